/*
 * registry.c - tenants, API keys and topics in Redis, behind a small cache
 * (see registry.h and docs/internals/REDIS-SCHEMA.md, "Registry keys").
 *
 * Key decisions:
 *  - All keys share the hash tag {registry}: one slot, so every multi-key
 *    change is one Lua script, atomic on a single Redis or a Cluster alike.
 *  - Only the SHA-256 (hex) of an API key is stored; rd:{registry}:keys maps
 *    it to "tenant key_id", which is all authentication needs.
 *  - The cache is one chained hash table under one mutex, entries with an
 *    expiry on the monotonic clock, negative entries included (so a client
 *    hammering with a bad key costs one Redis read per TTL, not per request).
 *    Topics are served stale when Redis is unreachable, so a Redis hiccup
 *    does not make the scheduler think a topic vanished.
 *
 * Lock order: the cache mutex is a leaf; no Redis call is made under it.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <json-c/json.h>

#include "scheduler/conn.h"
#include "scheduler/registry.h"
#include "scheduler/registry_int.h"
#include "util/clock.h"
#include "util/crypto.h"
#include "util/log.h"
#include "util/strutil.h"
#include "util/xmalloc.h"

#define P			"rd:{registry}:"
#define CACHE_BUCKETS		4096
#define CACHE_MAX_ENTRIES	200000
#define KEY_ID_LEN		12

enum centry_kind {
	CE_KEY = 'K',		/* key hash -> tenant, key_id */
	CE_TENANT = 'T',	/* name -> struct registry_tenant */
	CE_TOPIC = 'P',		/* tenant/topic -> struct registry_topic */
};

struct centry {
	struct centry	*next;
	char		*key;		/* kind letter + ":" + name */
	int64_t		 expires_mono_us;
	int		 found;
	/* CE_KEY */
	char		 tenant[REG_TENANT_MAX + 1];
	char		 key_id[REG_KEY_ID_MAX + 1];
	/* CE_TENANT */
	struct registry_tenant t;
	/* CE_TOPIC */
	struct registry_topic *topic;
};

struct registry {
	struct sched_pool	*pool;
	int64_t			 ttl_us;
	pthread_mutex_t		 lock;	/* guards the cache */
	struct centry		*bucket[CACHE_BUCKETS];
	size_t			 nentries;
	uint64_t		 gen;	/* bumped by each drop (cache_put) */
};

const char *
registry_strerror(enum reg_err e)
{
	switch (e) {
	case REG_OK:
		return "ok";
	case REG_ENOTFOUND:
		return "not found";
	case REG_EEXISTS:
		return "already exists";
	case REG_EUNAVAIL:
		return "Redis unavailable";
	case REG_EINVAL:
		return "invalid argument";
	case REG_EINTERNAL:
		return "internal error";
	case REG_ECHANGED:
		return "changed meanwhile";
	}
	return "unknown error";
}

/* ------------------------------------------------------------------ */
/* Topics as values */

struct registry_topic *
registry_topic_new(void)
{
	return xcalloc(1, sizeof(struct registry_topic));
}

void
registry_topic_free(struct registry_topic *t)
{
	size_t i;

	if (t == NULL)
		return;
	free(t->callback_url);
	for (i = 0; i < t->nheaders; i++) {
		free(t->headers[i].name);
		free(t->headers[i].value);
	}
	free(t->headers);
	explicit_bzero(t, sizeof(*t));
	free(t);
}

void
registry_topic_release(const struct registry_topic *t)
{
	struct registry_topic *m = (struct registry_topic *)t;

	if (m != NULL && __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) == 0)
		registry_topic_free(m);
}

void
registry_topic_add_header(struct registry_topic *t, const char *name,
    const char *value)
{
	t->headers = xreallocarray(t->headers, t->nheaders + 1,
	    sizeof(*t->headers));
	t->headers[t->nheaders].name = xstrdup(name);
	t->headers[t->nheaders].value = xstrdup(value);
	t->nheaders++;
}

int
registry_topic_set_secret(struct registry_topic *t, const char *whsec)
{
	uint8_t raw[REG_SECRET_RAW_MAX + 4];
	const char *b64 = whsec;
	ssize_t n;

	if (strncmp(b64, "whsec_", 6) == 0)
		b64 += 6;
	if (strlen(b64) > BASE64_ENCODED_LEN(REG_SECRET_RAW_MAX))
		return -1;
	n = base64_decode(b64, strlen(b64), raw, sizeof(raw));
	if (n < 16 || n > REG_SECRET_RAW_MAX) {
		explicit_bzero(raw, sizeof(raw));
		return -1;
	}
	memcpy(t->secret_raw, raw, (size_t)n);
	t->secret_len = (size_t)n;
	memcpy(t->secret, "whsec_", 6);
	base64_encode(raw, (size_t)n, t->secret + 6, sizeof(t->secret) - 6, 0);
	explicit_bzero(raw, sizeof(raw));
	return 0;
}

int
registry_topic_new_secret(struct registry_topic *t)
{
	uint8_t raw[32];

	if (random_bytes(raw, sizeof(raw)) == -1)
		return -1;
	memcpy(t->secret_raw, raw, sizeof(raw));
	t->secret_len = sizeof(raw);
	memcpy(t->secret, "whsec_", 6);
	base64_encode(raw, sizeof(raw), t->secret + 6, sizeof(t->secret) - 6,
	    0);
	explicit_bzero(raw, sizeof(raw));
	return 0;
}

struct registry_topic *
registry_topic_dup(const struct registry_topic *src)
{
	struct registry_topic *t = registry_topic_new();
	size_t i;

	/*
	 * Every member but refs, the last: a cached topic's count is
	 * changed by other threads meanwhile, and the copy starts at 0.
	 */
	memcpy(t, src, offsetof(struct registry_topic, refs));
	t->callback_url = src->callback_url ? xstrdup(src->callback_url) :
	    NULL;
	t->headers = NULL;
	t->nheaders = 0;
	for (i = 0; i < src->nheaders; i++)
		registry_topic_add_header(t, src->headers[i].name,
		    src->headers[i].value);
	return t;
}

static const char *
mode_name(enum registry_mode m)
{
	return m == REG_MODE_PULL ? "pull" : "push";
}

char *
registry_topic_json(const struct registry_topic *t)
{
	json_object *o = json_object_new_object(), *h;
	char sched[SCHEDULE_FORMAT_MAX];
	char *s;
	size_t i;

	json_object_object_add(o, "mode",
	    json_object_new_string(mode_name(t->mode)));
	if (t->callback_url != NULL)
		json_object_object_add(o, "callback_url",
		    json_object_new_string(t->callback_url));
	h = json_object_new_object();
	for (i = 0; i < t->nheaders; i++)
		json_object_object_add(h, t->headers[i].name,
		    json_object_new_string(t->headers[i].value));
	json_object_object_add(o, "headers", h);
	json_object_object_add(o, "secret", json_object_new_string(t->secret));
	json_object_object_add(o, "timeout_ms",
	    json_object_new_int64(t->timeout_ms));
	json_object_object_add(o, "max_in_flight",
	    json_object_new_int(t->max_in_flight));
	json_object_object_add(o, "ttr_ms", json_object_new_int64(t->ttr_ms));
	if (schedule_format(&t->schedule, sched, sizeof(sched)) < 0)
		sched[0] = '\0';
	json_object_object_add(o, "retry_schedule",
	    json_object_new_string(sched));
	json_object_object_add(o, "updated_ms",
	    json_object_new_int64(t->updated_ms));
	s = xstrdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
	    JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
	return s;
}

static int64_t
jint(json_object *o, const char *name)
{
	json_object *v;

	if (!json_object_object_get_ex(o, name, &v))
		return 0;
	return json_object_get_int64(v);
}

static const char *
jstr(json_object *o, const char *name)
{
	json_object *v;

	if (!json_object_object_get_ex(o, name, &v) ||
	    !json_object_is_type(v, json_type_string))
		return NULL;
	return json_object_get_string(v);
}

static struct registry_topic *
topic_from_json(const char *tenant, const char *name, const char *text,
    size_t len, int64_t created_ms)
{
	struct registry_topic *t = NULL;
	json_object *o = NULL, *h;
	const char *s;

	o = json_tokener_parse(text);
	if (o == NULL || !json_object_is_type(o, json_type_object) ||
	    strlen(text) != len) {
		log_warnx("registry: topic %s/%s: unreadable record", tenant,
		    name);
		goto out;
	}
	t = registry_topic_new();
	str_copy(t->tenant, sizeof(t->tenant), tenant);
	str_copy(t->name, sizeof(t->name), name);
	s = jstr(o, "mode");
	t->mode = s != NULL && strcmp(s, "pull") == 0 ? REG_MODE_PULL :
	    REG_MODE_PUSH;
	if ((s = jstr(o, "callback_url")) != NULL)
		t->callback_url = xstrdup(s);
	if (json_object_object_get_ex(o, "headers", &h) &&
	    json_object_is_type(h, json_type_object)) {
		json_object_object_foreach(h, k, v)
			registry_topic_add_header(t, k,
			    json_object_get_string(v));
	}
	if ((s = jstr(o, "secret")) == NULL ||
	    registry_topic_set_secret(t, s) == -1)
		log_warnx("registry: topic %s/%s: unreadable secret", tenant,
		    name);
	t->timeout_ms = jint(o, "timeout_ms");
	t->max_in_flight = (int)jint(o, "max_in_flight");
	t->ttr_ms = jint(o, "ttr_ms");
	s = jstr(o, "retry_schedule");
	if (s == NULL || schedule_parse(s, strlen(s), 0, &t->schedule,
	    NULL) == -1) {
		log_warnx("registry: topic %s/%s: unreadable schedule", tenant,
		    name);
		t->schedule.n = 1;
		t->schedule.wait_ms[0] = 0;
	}
	t->updated_ms = jint(o, "updated_ms");
	t->created_ms = created_ms;
out:
	json_object_put(o);
	return t;
}

/* ------------------------------------------------------------------ */
/* The cache */

/* The cache bucket of key. */
static uint32_t
bucket_of(const char *key)
{
	return str_hash(STR_HASH_INIT, key) % CACHE_BUCKETS;
}

static void
centry_free(struct centry *e)
{
	if (e == NULL)
		return;
	if (e->topic != NULL)
		registry_topic_release(e->topic);
	free(e->key);
	free(e);
}

static void
cache_clear_locked(struct registry *reg)
{
	struct centry *e, *next;
	size_t i;

	for (i = 0; i < CACHE_BUCKETS; i++) {
		for (e = reg->bucket[i]; e != NULL; e = next) {
			next = e->next;
			centry_free(e);
		}
		reg->bucket[i] = NULL;
	}
	reg->nentries = 0;
}

void
registry_flush_cache(struct registry *reg)
{
	pthread_mutex_lock(&reg->lock);
	cache_clear_locked(reg);
	reg->gen++;
	pthread_mutex_unlock(&reg->lock);
}

/* The entry for key, expired or not; the lock is held. */
static struct centry *
cache_find_locked(struct registry *reg, const char *key)
{
	struct centry *e;

	for (e = reg->bucket[bucket_of(key)]; e != NULL;
	    e = e->next)
		if (strcmp(e->key, key) == 0)
			return e;
	return NULL;
}

/*
 * Insert e (the cache takes it), replacing any entry with its key.  e was
 * read from Redis after a miss that saw reg->gen at gen: if a write dropped
 * entries since, e may be older than that write, so it goes in expired (a
 * lookup reads Redis again; only a Redis outage serves it, as any expired
 * entry).  So a read on this instance never holds a value its own write
 * replaced.  stale != 0 puts it in expired in any case.
 */
static void
cache_put(struct registry *reg, struct centry *e, uint64_t gen, int stale)
{
	struct centry **pp, *old;
	uint32_t b = bucket_of(e->key);

	e->expires_mono_us = clock_mono_us() + reg->ttl_us;
	pthread_mutex_lock(&reg->lock);
	if (reg->gen != gen || stale)
		e->expires_mono_us = 0;
	for (pp = &reg->bucket[b]; *pp != NULL; pp = &(*pp)->next)
		if (strcmp((*pp)->key, e->key) == 0) {
			old = *pp;
			*pp = old->next;
			centry_free(old);
			reg->nentries--;
			break;
		}
	if (reg->nentries >= CACHE_MAX_ENTRIES)
		cache_clear_locked(reg);
	b = bucket_of(e->key);
	e->next = reg->bucket[b];
	reg->bucket[b] = e;
	reg->nentries++;
	pthread_mutex_unlock(&reg->lock);
}

/* Drop entries for which match(e, arg) says 1. */
static void
cache_drop_if(struct registry *reg, int (*match)(const struct centry *,
    const void *), const void *arg)
{
	struct centry **pp, *e;
	size_t i;

	pthread_mutex_lock(&reg->lock);
	reg->gen++;
	for (i = 0; i < CACHE_BUCKETS; i++)
		for (pp = &reg->bucket[i]; (e = *pp) != NULL;) {
			if (match(e, arg)) {
				*pp = e->next;
				centry_free(e);
				reg->nentries--;
			} else
				pp = &e->next;
		}
	pthread_mutex_unlock(&reg->lock);
}

static int
match_miss(const struct centry *e, const void *arg)
{
	(void)arg;
	return !e->found;
}

void
registry_forget_misses(struct registry *reg)
{
	cache_drop_if(reg, match_miss, NULL);
}

void
registry_cache_expire(struct registry *reg)
{
	struct centry *e;
	size_t i;

	pthread_mutex_lock(&reg->lock);
	for (i = 0; i < CACHE_BUCKETS; i++)
		for (e = reg->bucket[i]; e != NULL; e = e->next)
			e->expires_mono_us = 0;
	pthread_mutex_unlock(&reg->lock);
}

static void
cache_drop(struct registry *reg, const char *key)
{
	struct centry **pp, *e;

	pthread_mutex_lock(&reg->lock);
	reg->gen++;
	for (pp = &reg->bucket[bucket_of(key)];
	    (e = *pp) != NULL; pp = &e->next)
		if (strcmp(e->key, key) == 0) {
			*pp = e->next;
			centry_free(e);
			reg->nentries--;
			break;
		}
	pthread_mutex_unlock(&reg->lock);
}

static int
match_tenant(const struct centry *e, const void *arg)
{
	const char *tenant = arg;

	switch (e->key[0]) {
	case CE_KEY:
		return strcmp(e->tenant, tenant) == 0;
	case CE_TENANT:
		return strcmp(e->key + 2, tenant) == 0;
	case CE_TOPIC:
		return strncmp(e->key + 2, tenant, strlen(tenant)) == 0 &&
		    e->key[2 + strlen(tenant)] == '/';
	}
	return 0;
}

struct key_match {
	const char	*tenant;
	const char	*key_id;
};

static int
match_key(const struct centry *e, const void *arg)
{
	const struct key_match *m = arg;

	return e->key[0] == CE_KEY && strcmp(e->tenant, m->tenant) == 0 &&
	    strcmp(e->key_id, m->key_id) == 0;
}

/* s[0..len) after out[0..n), cut to fit outlen with the NUL: the new n. */
static size_t
key_cat(char *out, size_t outlen, size_t n, const char *s, size_t len)
{
	if (n + 1 >= outlen)
		return n;
	if (len > outlen - 1 - n)
		len = outlen - 1 - n;
	memcpy(out + n, s, len);
	return n + len;
}

/*
 * The cache's key of an entry, "K:a" or "K:a/b", into out (outlen > 0
 * bytes), cut to fit as snprintf would: looked up on every request, and
 * the key a miss's new entry takes (centry_new), so the two never differ.
 * The callers refuse names too long for out.
 */
static void
cache_key(char *out, size_t outlen, enum centry_kind kind, const char *a,
    const char *b)
{
	const char head[2] = { (char)kind, ':' };
	size_t n;

	n = key_cat(out, outlen, 0, head, sizeof(head));
	n = key_cat(out, outlen, n, a, strlen(a));
	if (b != NULL) {
		n = key_cat(out, outlen, n, "/", 1);
		n = key_cat(out, outlen, n, b, strlen(b));
	}
	out[n] = '\0';
}

/* A new entry under key (cache_key's). */
static struct centry *
centry_new(const char *key)
{
	struct centry *e = xcalloc(1, sizeof(*e));

	e->key = xstrdup(key);
	return e;
}

/* ------------------------------------------------------------------ */
/* Redis */

struct registry *
registry_new(const char *redis_url, int64_t timeout_ms, int64_t cache_ttl_ms,
    char *why, size_t whylen)
{
	struct redis_target t[SCHED_SEEDS_MAX];
	struct registry *reg;
	int nt;

	if ((nt = sched_redis_seeds_parse(redis_url, t, SCHED_SEEDS_MAX, why,
	    whylen)) == -1)
		return NULL;
	reg = xcalloc(1, sizeof(*reg));
	reg->pool = sched_pool_new(t, nt, timeout_ms, 4);
	reg->ttl_us = (cache_ttl_ms > 0 ? cache_ttl_ms : 1000) * 1000;
	pthread_mutex_init(&reg->lock, NULL);
	return reg;
}

void
registry_free(struct registry *reg)
{
	if (reg == NULL)
		return;
	cache_clear_locked(reg);
	pthread_mutex_destroy(&reg->lock);
	sched_pool_free(reg->pool);
	free(reg);
}

/*
 * One command; the reply (the caller frees it) or NULL with *err set.  An
 * error reply is logged and counts as EINTERNAL.
 */
redisReply *
registry_vcmd(struct registry *reg, enum reg_err *err, const char *fmt,
    va_list ap)
{
	redisContext *c;
	redisReply *r;

	int broken = 0;

	if ((c = sched_pool_get_key(reg->pool, P)) == NULL) {
		*err = REG_EUNAVAIL;
		return NULL;
	}
	r = sched_pool_vcommand(reg->pool, c, &broken, P, fmt, ap);
	if (r == NULL) {
		log_warnx("registry: redis: %s", c->errstr);
		sched_pool_put(reg->pool, c, 1);
		*err = REG_EUNAVAIL;
		return NULL;
	}
	sched_pool_put(reg->pool, c, 0);
	if (r->type == REDIS_REPLY_ERROR) {
		log_warnx("registry: redis: %s", r->str);
		freeReplyObject(r);
		*err = REG_EINTERNAL;
		return NULL;
	}
	*err = REG_OK;
	return r;
}

redisReply *
registry_cmd(struct registry *reg, enum reg_err *err, const char *fmt, ...)
{
	redisReply *r;
	va_list ap;

	va_start(ap, fmt);
	r = registry_vcmd(reg, err, fmt, ap);
	va_end(ap);
	return r;
}

static int64_t
reply_int(const redisReply *r)
{
	char *end;
	long long v;

	if (r == NULL)
		return 0;
	if (r->type == REDIS_REPLY_INTEGER)
		return r->integer;
	if (r->type != REDIS_REPLY_STRING)
		return 0;
	errno = 0;
	v = strtoll(r->str, &end, 10);
	if (errno != 0 || end == r->str)
		return 0;
	return v;
}

static void
make_key(char api_key[REG_API_KEY_LEN + 1], char hash_hex[65])
{
	uint8_t raw[32], h[SHA256_LEN];

	if (random_bytes(raw, sizeof(raw)) == -1)
		fatal("registry: random_bytes");
	memcpy(api_key, "rk_", 3);
	base64_encode(raw, sizeof(raw), api_key + 3, REG_API_KEY_LEN - 2, 1);
	sha256(api_key, strlen(api_key), h);
	hex_encode(h, sizeof(h), hash_hex);
	explicit_bzero(raw, sizeof(raw));
}

static void
make_key_id(char key_id[REG_KEY_ID_MAX + 1])
{
	static const char alpha[] = "0123456789abcdefghjkmnpqrstvwxyz";
	uint8_t raw[KEY_ID_LEN];
	size_t i;

	if (random_bytes(raw, sizeof(raw)) == -1)
		fatal("registry: random_bytes");
	for (i = 0; i < KEY_ID_LEN; i++)
		key_id[i] = alpha[raw[i] % 32];
	key_id[KEY_ID_LEN] = '\0';
}

static const char LUA_TENANT_CREATE[] =
    "if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then return 0 end\n"
    "redis.call('DEL', KEYS[2], KEYS[4], KEYS[5], KEYS[6])\n"
    "redis.call('HSET', KEYS[2], 'created_ms', ARGV[2], 'max_pending',"
    " ARGV[3], 'max_in_flight', ARGV[6])\n"
    "redis.call('HSET', KEYS[3], ARGV[4], ARGV[1] .. ' ' .. ARGV[5])\n"
    "redis.call('HSET', KEYS[4], ARGV[5], ARGV[4] .. ' ' .. ARGV[2])\n"
    "redis.call('SET', KEYS[7], '1')\n"
    "return 1\n";

enum reg_err
registry_tenant_create(struct registry *reg, const char *name,
    int64_t max_pending, int64_t max_in_flight, int64_t now_ms,
    char api_key[REG_API_KEY_LEN + 1], char key_id[REG_KEY_ID_MAX + 1])
{
	char hash[65], now[32], maxp[32], maxf[32];
	redisReply *r;
	enum reg_err err;

	if (name == NULL || strlen(name) > REG_TENANT_MAX || max_pending < 0 ||
	    max_in_flight < 0)
		return REG_EINVAL;
	make_key(api_key, hash);
	make_key_id(key_id);
	snprintf(now, sizeof(now), "%" PRId64, now_ms);
	snprintf(maxp, sizeof(maxp), "%" PRId64, max_pending);
	snprintf(maxf, sizeof(maxf), "%" PRId64, max_in_flight);
	r = registry_cmd(reg, &err, "EVAL %s 7 " P "tenants " P "tenant:%s "
	    P "keys " P "tkeys:%s " P "topics:%s " P "topicc:%s " P "version "
	    "%s %s %s %s %s %s", LUA_TENANT_CREATE, name, name, name, name,
	    name, now, maxp, hash, key_id, maxf);
	if (r == NULL)
		return err;
	err = reply_int(r) == 1 ? REG_OK : REG_EEXISTS;
	freeReplyObject(r);
	cache_drop_if(reg, match_tenant, name);
	if (err != REG_OK) {
		explicit_bzero(api_key, REG_API_KEY_LEN + 1);
		key_id[0] = '\0';
	}
	return err;
}

/*
 * Two commands on the registry's keys in one round trip, both formatted
 * with the same arguments (after fmt2).  REG_OK with both replies (the
 * caller frees them), or REG_EUNAVAIL with neither.
 */
static enum reg_err
fetch_two(struct registry *reg, redisReply **r1, redisReply **r2,
    const char *fmt1, const char *fmt2, ...)
{
	redisContext *c;
	struct sched_pipe *q;
	va_list ap;

	*r1 = *r2 = NULL;
	if ((c = sched_pool_get_key(reg->pool, P)) == NULL)
		return REG_EUNAVAIL;
	q = sched_pipe_new(reg->pool, c);
	va_start(ap, fmt2);
	sched_pipe_vappend(q, P, fmt1, ap);
	va_end(ap);
	va_start(ap, fmt2);
	sched_pipe_vappend(q, P, fmt2, ap);
	va_end(ap);
	if (sched_pipe_getreply(q, (void **)r1) != REDIS_OK ||
	    sched_pipe_getreply(q, (void **)r2) != REDIS_OK) {
		log_warnx("registry: redis: %s", c->errstr);
		sched_pipe_free(q);
		sched_pool_put(reg->pool, c, 1);
		if (*r1 != NULL)
			freeReplyObject(*r1);
		*r1 = NULL;
		return REG_EUNAVAIL;
	}
	sched_pipe_free(q);
	sched_pool_put(reg->pool, c, 0);
	return REG_OK;
}

enum reg_err
registry_tenant_get(struct registry *reg, const char *name,
    struct registry_tenant *out)
{
	redisReply *r1 = NULL, *r2 = NULL;
	struct centry *e;
	enum reg_err err = REG_EINTERNAL;
	char key[REG_TENANT_MAX + 3];
	uint64_t gen;
	int found;

	/* No such name can exist, and its key would be cut to another's. */
	if (strlen(name) > REG_TENANT_MAX)
		return REG_ENOTFOUND;
	cache_key(key, sizeof(key), CE_TENANT, name, NULL);
	pthread_mutex_lock(&reg->lock);
	e = cache_find_locked(reg, key);
	if (e != NULL && e->expires_mono_us > clock_mono_us()) {
		found = e->found;
		if (found)
			*out = e->t;
		pthread_mutex_unlock(&reg->lock);
		return found ? REG_OK : REG_ENOTFOUND;
	}
	gen = reg->gen;
	pthread_mutex_unlock(&reg->lock);

	if ((err = fetch_two(reg, &r1, &r2, "HMGET " P "tenant:%s created_ms "
	    "max_pending max_in_flight", "HLEN " P "tkeys:%s", name)) !=
	    REG_OK)
		goto out;
	err = REG_EINTERNAL;
	if (r1->type != REDIS_REPLY_ARRAY || r1->elements != 3) {
		log_warnx("registry: unexpected reply to HMGET");
		goto out;
	}
	e = centry_new(key);
	e->found = r1->element[0]->type == REDIS_REPLY_STRING;
	if (e->found) {
		str_copy(e->t.name, sizeof(e->t.name), name);
		e->t.created_ms = reply_int(r1->element[0]);
		e->t.max_pending = reply_int(r1->element[1]);
		/* Absent (a tenant stored before it existed): none. */
		e->t.max_in_flight = reply_int(r1->element[2]);
		e->t.nkeys = (int)reply_int(r2);
		*out = e->t;
	}
	err = e->found ? REG_OK : REG_ENOTFOUND;
	cache_put(reg, e, gen, 0);
out:
	if (r1 != NULL)
		freeReplyObject(r1);
	if (r2 != NULL)
		freeReplyObject(r2);
	return err;
}

static int
cmp_tenant(const void *a, const void *b)
{
	return strcmp(((const struct registry_tenant *)a)->name,
	    ((const struct registry_tenant *)b)->name);
}

enum reg_err
registry_tenant_list(struct registry *reg, struct registry_tenant **out,
    size_t *n)
{
	struct registry_tenant *v = NULL;
	redisReply *r;
	enum reg_err err;
	size_t i, k = 0;

	*out = NULL;
	*n = 0;
	if ((r = registry_cmd(reg, &err, "SMEMBERS " P "tenants")) == NULL)
		return err;
	if (r->type != REDIS_REPLY_ARRAY) {
		freeReplyObject(r);
		return REG_EINTERNAL;
	}
	if (r->elements > 0)
		v = xcalloc(r->elements, sizeof(*v));
	for (i = 0; i < r->elements; i++) {
		if (r->element[i]->type != REDIS_REPLY_STRING)
			continue;
		err = registry_tenant_get(reg, r->element[i]->str, &v[k]);
		if (err == REG_OK)
			k++;
		else if (err != REG_ENOTFOUND) {
			free(v);
			freeReplyObject(r);
			return err;
		}
	}
	freeReplyObject(r);
	if (k > 1)
		qsort(v, k, sizeof(*v), cmp_tenant);
	*out = v;
	*n = k;
	return REG_OK;
}

/*
 * Sets the overrides named (an empty ARGV leaves its member as it is) and
 * returns both as they now are, then as they were: a change of one member
 * never writes the other, so two PATCHes of different members, or one made
 * on another instance whose cached tenant is a second old, cannot undo
 * each other.
 */
static const char LUA_SET_LIMITS[] =
    "if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return {0} end\n"
    "local o = redis.call('HMGET', KEYS[2], 'max_pending', 'max_in_flight')\n"
    "if ARGV[2] ~= '' then\n"
    "  redis.call('HSET', KEYS[2], 'max_pending', ARGV[2])\n"
    "end\n"
    "if ARGV[3] ~= '' then\n"
    "  redis.call('HSET', KEYS[2], 'max_in_flight', ARGV[3])\n"
    "end\n"
    "local v = redis.call('HMGET', KEYS[2], 'max_pending', 'max_in_flight')\n"
    "return {1, v[1] or '0', v[2] or '0', o[1] or '0', o[2] or '0'}\n";

/* An override as the script takes it: "" for REG_LIMIT_KEEP. */
static int
limit_arg(char out[32], int64_t v)
{
	if (v == REG_LIMIT_KEEP) {
		out[0] = '\0';
		return 0;
	}
	if (v < 0)
		return -1;
	snprintf(out, 32, "%" PRId64, v);
	return 0;
}

enum reg_err
registry_tenant_set_limits(struct registry *reg, const char *name,
    int64_t max_pending, int64_t max_in_flight, int64_t now[2],
    int64_t was[2])
{
	char key[REG_TENANT_MAX + 3], maxp[32], maxf[32];
	redisReply *r;
	enum reg_err err;

	if (limit_arg(maxp, max_pending) == -1 ||
	    limit_arg(maxf, max_in_flight) == -1)
		return REG_EINVAL;
	r = registry_cmd(reg, &err, "EVAL %s 2 " P "tenants " P "tenant:%s "
	    "%s %s %s", LUA_SET_LIMITS, name, name, maxp, maxf);
	if (r == NULL)
		return err;
	if (r->type != REDIS_REPLY_ARRAY || r->elements < 1)
		err = REG_EINTERNAL;
	else if (reply_int(r->element[0]) != 1)
		err = REG_ENOTFOUND;
	else if (r->elements != 5)
		err = REG_EINTERNAL;
	else {
		if (now != NULL) {
			now[0] = reply_int(r->element[1]);
			now[1] = reply_int(r->element[2]);
		}
		if (was != NULL) {
			was[0] = reply_int(r->element[3]);
			was[1] = reply_int(r->element[4]);
		}
		err = REG_OK;
	}
	freeReplyObject(r);
	cache_key(key, sizeof(key), CE_TENANT, name, NULL);
	cache_drop(reg, key);
	return err;
}

static const char LUA_TENANT_DELETE[] =
    "if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then return 0 end\n"
    "local all = redis.call('HGETALL', KEYS[4])\n"
    "for i = 2, #all, 2 do\n"
    "  redis.call('HDEL', KEYS[3], string.sub(all[i], 1, 64))\n"
    "end\n"
    "redis.call('DEL', KEYS[2], KEYS[4], KEYS[5], KEYS[6])\n"
    "return 1\n";

enum reg_err
registry_tenant_delete(struct registry *reg, const char *name)
{
	redisReply *r;
	enum reg_err err;

	r = registry_cmd(reg, &err, "EVAL %s 6 " P "tenants " P "tenant:%s "
	    P "keys " P "tkeys:%s " P "topics:%s " P "topicc:%s %s",
	    LUA_TENANT_DELETE,
	    name, name, name, name, name);
	if (r == NULL)
		return err;
	err = reply_int(r) == 1 ? REG_OK : REG_ENOTFOUND;
	freeReplyObject(r);
	cache_drop_if(reg, match_tenant, name);
	return err;
}

static const char LUA_KEY_CREATE[] =
    "if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return -1 end\n"
    "if redis.call('HSETNX', KEYS[3], ARGV[3], ARGV[2] .. ' ' .. ARGV[4])"
    " == 0 then return 0 end\n"
    "redis.call('HSET', KEYS[2], ARGV[2], ARGV[1] .. ' ' .. ARGV[3])\n"
    "return 1\n";

enum reg_err
registry_key_create(struct registry *reg, const char *tenant, int64_t now_ms,
    char api_key[REG_API_KEY_LEN + 1], char key_id[REG_KEY_ID_MAX + 1])
{
	char hash[65], now[32], key[REG_TENANT_MAX + 3];
	redisReply *r;
	enum reg_err err = REG_EINTERNAL;
	int64_t v;
	int tries;

	snprintf(now, sizeof(now), "%" PRId64, now_ms);
	for (tries = 0; tries < 5; tries++) {
		make_key(api_key, hash);
		make_key_id(key_id);
		r = registry_cmd(reg, &err, "EVAL %s 3 " P "tenants " P "keys "
		    P "tkeys:%s %s %s %s %s", LUA_KEY_CREATE, tenant, tenant,
		    hash, key_id, now);
		if (r == NULL)
			break;
		v = reply_int(r);
		freeReplyObject(r);
		if (v == 1) {
			err = REG_OK;
			break;
		}
		err = v == -1 ? REG_ENOTFOUND : REG_EINTERNAL;
		if (v == -1)
			break;
		/* v == 0: the key id was taken, draw another. */
	}
	cache_key(key, sizeof(key), CE_TENANT, tenant, NULL);
	cache_drop(reg, key);
	if (err != REG_OK) {
		explicit_bzero(api_key, REG_API_KEY_LEN + 1);
		key_id[0] = '\0';
	}
	return err;
}

static int
cmp_key(const void *a, const void *b)
{
	const struct registry_key *x = a, *y = b;

	if (x->created_ms != y->created_ms)
		return x->created_ms < y->created_ms ? -1 : 1;
	return strcmp(x->key_id, y->key_id);
}

enum reg_err
registry_key_list(struct registry *reg, const char *tenant,
    struct registry_key **out, size_t *n)
{
	struct registry_tenant t;
	struct registry_key *v = NULL;
	redisReply *r;
	enum reg_err err;
	const char *sp;
	size_t i, k = 0;

	*out = NULL;
	*n = 0;
	if ((err = registry_tenant_get(reg, tenant, &t)) != REG_OK)
		return err;
	if ((r = registry_cmd(reg, &err, "HGETALL " P "tkeys:%s",
	    tenant)) == NULL)
		return err;
	if (r->type != REDIS_REPLY_ARRAY) {
		freeReplyObject(r);
		return REG_EINTERNAL;
	}
	if (r->elements > 0)
		v = xcalloc(r->elements / 2 + 1, sizeof(*v));
	for (i = 0; i + 1 < r->elements; i += 2) {
		if (r->element[i]->type != REDIS_REPLY_STRING ||
		    r->element[i + 1]->type != REDIS_REPLY_STRING)
			continue;
		snprintf(v[k].key_id, sizeof(v[k].key_id), "%s",
		    r->element[i]->str);
		sp = strchr(r->element[i + 1]->str, ' ');
		v[k].created_ms = sp != NULL ? strtoll(sp + 1, NULL, 10) : 0;
		k++;
	}
	freeReplyObject(r);
	if (k > 1)
		qsort(v, k, sizeof(*v), cmp_key);
	*out = v;
	*n = k;
	return REG_OK;
}

static const char LUA_KEY_REVOKE[] =
    "local v = redis.call('HGET', KEYS[1], ARGV[1])\n"
    "if not v then return 0 end\n"
    "redis.call('HDEL', KEYS[2], string.sub(v, 1, 64))\n"
    "redis.call('HDEL', KEYS[1], ARGV[1])\n"
    "return 1\n";

enum reg_err
registry_key_revoke(struct registry *reg, const char *tenant,
    const char *key_id)
{
	struct key_match m = { tenant, key_id };
	char key[REG_TENANT_MAX + 3];
	redisReply *r;
	enum reg_err err;

	r = registry_cmd(reg, &err, "EVAL %s 2 " P "tkeys:%s " P "keys %s",
	    LUA_KEY_REVOKE, tenant, key_id);
	if (r == NULL)
		return err;
	err = reply_int(r) == 1 ? REG_OK : REG_ENOTFOUND;
	freeReplyObject(r);
	cache_drop_if(reg, match_key, &m);
	cache_key(key, sizeof(key), CE_TENANT, tenant, NULL);
	cache_drop(reg, key);
	return err;
}

enum reg_err
registry_key_lookup(struct registry *reg, const uint8_t h[SHA256_LEN],
    char tenant[REG_TENANT_MAX + 1], char key_id[REG_KEY_ID_MAX + 1])
{
	char hex[2 * SHA256_LEN + 1], key[2 * SHA256_LEN + 3];
	struct centry *e;
	redisReply *r;
	enum reg_err err;
	const char *sp;
	uint64_t gen;
	int found;

	hex_encode(h, SHA256_LEN, hex);
	cache_key(key, sizeof(key), CE_KEY, hex, NULL);
	pthread_mutex_lock(&reg->lock);
	e = cache_find_locked(reg, key);
	if (e != NULL && e->expires_mono_us > clock_mono_us()) {
		found = e->found;
		if (found) {
			memcpy(tenant, e->tenant, sizeof(e->tenant));
			memcpy(key_id, e->key_id, sizeof(e->key_id));
		}
		pthread_mutex_unlock(&reg->lock);
		return found ? REG_OK : REG_ENOTFOUND;
	}
	gen = reg->gen;
	pthread_mutex_unlock(&reg->lock);

	if ((r = registry_cmd(reg, &err, "HGET " P "keys %s", hex)) == NULL)
		return err;
	e = centry_new(key);
	if (r->type == REDIS_REPLY_STRING &&
	    (sp = strchr(r->str, ' ')) != NULL &&
	    (size_t)(sp - r->str) <= REG_TENANT_MAX &&
	    strlen(sp + 1) <= REG_KEY_ID_MAX) {
		e->found = 1;
		memcpy(e->tenant, r->str, (size_t)(sp - r->str));
		e->tenant[sp - r->str] = '\0';
		snprintf(e->key_id, sizeof(e->key_id), "%s", sp + 1);
		memcpy(tenant, e->tenant, sizeof(e->tenant));
		memcpy(key_id, e->key_id, sizeof(e->key_id));
	}
	err = e->found ? REG_OK : REG_ENOTFOUND;
	freeReplyObject(r);
	cache_put(reg, e, gen, 0);
	return err;
}

/* ------------------------------------------------------------------ */
/* Topics in Redis */

/*
 * ARGV 1 tenant, 2 topic, 3 JSON, 4 now, 5 "1" when 6 is what the topic's
 * JSON must still be ("": no such topic), else "0".
 */
static const char LUA_TOPIC_PUT[] =
    "if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 0 then return -1 end\n"
    "if ARGV[5] == '1' and\n"
    "    (redis.call('HGET', KEYS[2], ARGV[2]) or '') ~= ARGV[6] then\n"
    "  return -2\n"
    "end\n"
    "local new = redis.call('HSETNX', KEYS[3], ARGV[2], ARGV[4])\n"
    "redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])\n"
    "return {new, redis.call('HGET', KEYS[3], ARGV[2])}\n";

enum reg_err
registry_topic_put_if(struct registry *reg, struct registry_topic *t,
    int64_t now_ms, const char *expect, int *created)
{
	char key[REG_TENANT_MAX + REG_TOPIC_MAX + 4], now[32];
	redisReply *r;
	enum reg_err err;
	char *json;

	*created = 0;
	t->updated_ms = now_ms;
	json = registry_topic_json(t);
	snprintf(now, sizeof(now), "%" PRId64, now_ms);
	r = registry_cmd(reg, &err, "EVAL %s 3 " P "tenants " P "topics:%s "
	    P "topicc:%s %s %s %s %s %s %s", LUA_TOPIC_PUT, t->tenant,
	    t->tenant, t->tenant, t->name, json, now,
	    expect != NULL ? "1" : "0", expect != NULL ? expect : "");
	free(json);
	if (r == NULL)
		return err;
	if (r->type == REDIS_REPLY_INTEGER)
		err = r->integer == -2 ? REG_ECHANGED : REG_ENOTFOUND;
	else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2) {
		*created = reply_int(r->element[0]) == 1;
		t->created_ms = reply_int(r->element[1]);
		err = REG_OK;
	} else
		err = REG_EINTERNAL;
	freeReplyObject(r);
	cache_key(key, sizeof(key), CE_TOPIC, t->tenant, t->name);
	cache_drop(reg, key);
	return err;
}

enum reg_err
registry_topic_put(struct registry *reg, struct registry_topic *t,
    int64_t now_ms, int *created)
{
	return registry_topic_put_if(reg, t, now_ms, NULL, created);
}

/*
 * The topic from Redis: REG_OK with *out, REG_ENOTFOUND, or an error; with
 * raw, its stored JSON too (free()), "" when there is no such topic.
 */
static enum reg_err
topic_fetch(struct registry *reg, const char *tenant, const char *topic,
    struct registry_topic **out, char **raw)
{
	redisReply *r1 = NULL, *r2 = NULL;
	enum reg_err err = REG_EINTERNAL;

	*out = NULL;
	if ((err = fetch_two(reg, &r1, &r2, "HGET " P "topics:%s %s",
	    "HGET " P "topicc:%s %s", tenant, topic)) != REG_OK)
		goto out;
	err = REG_EINTERNAL;
	if (r1->type == REDIS_REPLY_NIL) {
		err = REG_ENOTFOUND;
		if (raw != NULL)
			*raw = xstrdup("");
	} else if (r1->type == REDIS_REPLY_STRING) {
		*out = topic_from_json(tenant, topic, r1->str, r1->len,
		    reply_int(r2));
		err = *out != NULL ? REG_OK : REG_EINTERNAL;
		if (err == REG_OK && raw != NULL)
			*raw = xstrndup(r1->str, r1->len);
	}
out:
	if (r1 != NULL)
		freeReplyObject(r1);
	if (r2 != NULL)
		freeReplyObject(r2);
	return err;
}

enum reg_err
registry_topic_read(struct registry *reg, const char *tenant,
    const char *topic, struct registry_topic **out, char **raw)
{
	*raw = NULL;
	return topic_fetch(reg, tenant, topic, out, raw);
}

/*
 * What a lookup hands back: a copy (*out), the cached topic itself with a
 * reference taken (*held; called under reg->lock or before the topic is
 * cached), and/or the scheduler's part (*info).
 */
struct topic_want {
	struct registry_topic		**out;
	const struct registry_topic	**held;
	struct sched_topic_info		 *info;
};

static void
topic_answer(struct registry_topic *t, const struct topic_want *w)
{
	if (w->out != NULL)
		*w->out = registry_topic_dup(t);
	if (w->held != NULL) {
		__atomic_add_fetch(&t->refs, 1, __ATOMIC_RELAXED);
		*w->held = t;
	}
	if (w->info != NULL) {
		w->info->push = t->mode == REG_MODE_PUSH;
		w->info->max_in_flight = t->max_in_flight;
		w->info->timeout_ms = t->timeout_ms;
		w->info->ttr_ms = t->ttr_ms;
		w->info->schedule = t->schedule;
	}
}

/* 1 when Redis says a rebuild is owed (its marker gone, or the flag). */
static int
rebuild_owed_now(struct registry *reg)
{
	int owed;

	return registry_rebuild_owed(reg, &owed) == REG_OK && owed;
}

/*
 * From the cache, or Redis then the cache.  Answers as w asks when
 * found.  stale != 0 accepts an expired entry.  On a miss, *gen (unless
 * NULL) is the cache's generation for the cache_put() after the read.
 */
static int
topic_cached(struct registry *reg, const char *key, int stale,
    const struct topic_want *w, enum reg_err *err, uint64_t *gen)
{
	struct centry *e;

	pthread_mutex_lock(&reg->lock);
	e = cache_find_locked(reg, key);
	if (e == NULL || (!stale && e->expires_mono_us <= clock_mono_us())) {
		if (gen != NULL)
			*gen = reg->gen;
		pthread_mutex_unlock(&reg->lock);
		return 0;
	}
	*err = e->found ? REG_OK : REG_ENOTFOUND;
	if (e->found)
		topic_answer(e->topic, w);
	pthread_mutex_unlock(&reg->lock);
	return 1;
}

/*
 * Through the cache.  With Redis down, an expired entry is served rather
 * than nothing, so a Redis hiccup does not make a topic vanish.
 */
static enum reg_err
topic_lookup(struct registry *reg, const char *tenant, const char *topic,
    const struct topic_want *w)
{
	char key[REG_TENANT_MAX + REG_TOPIC_MAX + 4];
	struct registry_topic *t = NULL;
	struct centry *e;
	enum reg_err err;
	uint64_t gen;

	if (w->out != NULL)
		*w->out = NULL;
	if (w->held != NULL)
		*w->held = NULL;
	if (strlen(tenant) > REG_TENANT_MAX || strlen(topic) > REG_TOPIC_MAX)
		return REG_ENOTFOUND;
	cache_key(key, sizeof(key), CE_TOPIC, tenant, topic);
	if (topic_cached(reg, key, 0, w, &err, &gen))
		return err;
	err = topic_fetch(reg, tenant, topic, &t, NULL);
	/*
	 * Redis lost its data and is not rebuilt yet: a topic it lacks is not
	 * gone, only not back yet, and the miss is not cached over what was
	 * known.  For the scheduler (w->info: a failed attempt's next wait, a
	 * topic's room) the last topic known stands, stale, as when Redis is
	 * unreachable, so the attempt is decided by its schedule, not the job
	 * killed as if its topic had been deleted (a deletion drops the
	 * entry: nothing stale is left to serve).  With nothing known, the
	 * scheduler is told the topic cannot be read now, not that it is
	 * gone.  The API's lookups miss: they answer 503 rebuilding.
	 */
	if (err == REG_ENOTFOUND && rebuild_owed_now(reg)) {
		if (w->info == NULL)
			return REG_ENOTFOUND;
		err = REG_EUNAVAIL;	/* for the scheduler: as an outage */
	} else if (err == REG_OK || err == REG_ENOTFOUND) {
		if (t != NULL) {
			t->refs = 1;	/* the cache's */
			topic_answer(t, w);
		}
		e = centry_new(key);
		e->found = t != NULL;
		e->topic = t;
		cache_put(reg, e, gen, 0);
		return err;
	}
	/*
	 * Redis unreachable (or, for the scheduler, owed its rebuild): the
	 * last entry stands.  A miss it cached before is old news for the
	 * scheduler (the topic may have been made since): it cannot be told
	 * now, not gone.
	 */
	if (err == REG_EUNAVAIL && topic_cached(reg, key, 1, w, &err, NULL))
		return w->info != NULL && err == REG_ENOTFOUND ? REG_EUNAVAIL :
		    err;
	return err;
}

enum reg_err
registry_topic_get(struct registry *reg, const char *tenant,
    const char *topic, struct registry_topic **out)
{
	struct topic_want w = { out, NULL, NULL };

	return topic_lookup(reg, tenant, topic, &w);
}

enum reg_err
registry_topic_hold(struct registry *reg, const char *tenant,
    const char *topic, const struct registry_topic **out)
{
	struct topic_want w = { NULL, out, NULL };

	return topic_lookup(reg, tenant, topic, &w);
}

int
registry_topic_info(struct registry *reg, const char *tenant,
    const char *topic, struct sched_topic_info *out)
{
	struct topic_want w = { NULL, NULL, out };
	enum reg_err err;

	memset(out, 0, sizeof(*out));
	err = topic_lookup(reg, tenant, topic, &w);
	if (err == REG_OK)
		return out->schedule.n > 0 ? 0 : -1;
	return err == REG_ENOTFOUND ? -1 : -2;
}

int
registry_topic_recall(struct registry *reg, const char *tenant,
    const char *topic, const char *json, int64_t created_ms,
    struct sched_topic_info *out)
{
	struct topic_want w = { NULL, NULL, out };
	char key[REG_TENANT_MAX + REG_TOPIC_MAX + 4];
	struct registry_topic *t;
	struct centry *e;
	uint64_t gen;
	int found;

	memset(out, 0, sizeof(*out));
	if (strlen(tenant) > REG_TENANT_MAX || strlen(topic) > REG_TOPIC_MAX ||
	    json == NULL || (t = topic_from_json(tenant, topic, json,
	    strlen(json), created_ms)) == NULL)
		return -1;
	t->refs = 1;	/* the cache's */
	topic_answer(t, &w);
	cache_key(key, sizeof(key), CE_TOPIC, tenant, topic);
	/* Not over a topic the cache has (found, fresh or not). */
	pthread_mutex_lock(&reg->lock);
	e = cache_find_locked(reg, key);
	found = e != NULL && e->found;
	gen = reg->gen;
	pthread_mutex_unlock(&reg->lock);
	if (found) {
		registry_topic_release(t);
		return 0;
	}
	e = centry_new(key);
	e->found = 1;
	e->topic = t;
	cache_put(reg, e, gen, 1);
	return 0;
}

static int
cmp_topic(const void *a, const void *b)
{
	return strcmp((*(struct registry_topic *const *)a)->name,
	    (*(struct registry_topic *const *)b)->name);
}

enum reg_err
registry_topic_list(struct registry *reg, const char *tenant,
    struct registry_topic ***out, size_t *n)
{
	struct registry_topic **v = NULL, *t;
	redisReply *r1 = NULL, *r2 = NULL;
	enum reg_err err = REG_EINTERNAL;
	const redisReply *cr;
	size_t i, j, k = 0;

	*out = NULL;
	*n = 0;
	if ((err = fetch_two(reg, &r1, &r2, "HGETALL " P "topics:%s",
	    "HGETALL " P "topicc:%s", tenant)) != REG_OK)
		goto out;
	err = REG_EINTERNAL;
	if (r1->type != REDIS_REPLY_ARRAY || r2->type != REDIS_REPLY_ARRAY)
		goto out;
	if (r1->elements > 0)
		v = xcalloc(r1->elements / 2 + 1, sizeof(*v));
	for (i = 0; i + 1 < r1->elements; i += 2) {
		if (r1->element[i]->type != REDIS_REPLY_STRING ||
		    r1->element[i + 1]->type != REDIS_REPLY_STRING)
			continue;
		cr = NULL;
		for (j = 0; j + 1 < r2->elements; j += 2)
			if (r2->element[j]->type == REDIS_REPLY_STRING &&
			    strcmp(r2->element[j]->str,
			    r1->element[i]->str) == 0) {
				cr = r2->element[j + 1];
				break;
			}
		t = topic_from_json(tenant, r1->element[i]->str,
		    r1->element[i + 1]->str, r1->element[i + 1]->len,
		    reply_int(cr));
		if (t != NULL)
			v[k++] = t;
	}
	if (k > 1)
		qsort(v, k, sizeof(*v), cmp_topic);
	*out = v;
	*n = k;
	v = NULL;
	err = REG_OK;
out:
	free(v);
	if (r1 != NULL)
		freeReplyObject(r1);
	if (r2 != NULL)
		freeReplyObject(r2);
	return err;
}

void
registry_topic_list_free(struct registry_topic **v, size_t n)
{
	size_t i;

	if (v == NULL)
		return;
	for (i = 0; i < n; i++)
		registry_topic_free(v[i]);
	free(v);
}

static const char LUA_TOPIC_DELETE[] =
    "redis.call('HDEL', KEYS[2], ARGV[1])\n"
    "return redis.call('HDEL', KEYS[1], ARGV[1])\n";

enum reg_err
registry_topic_delete(struct registry *reg, const char *tenant,
    const char *topic)
{
	char key[REG_TENANT_MAX + REG_TOPIC_MAX + 4];
	redisReply *r;
	enum reg_err err;

	r = registry_cmd(reg, &err, "EVAL %s 2 " P "topics:%s " P "topicc:%s "
	    "%s", LUA_TOPIC_DELETE, tenant, tenant, topic);
	if (r == NULL)
		return err;
	err = reply_int(r) == 1 ? REG_OK : REG_ENOTFOUND;
	freeReplyObject(r);
	cache_key(key, sizeof(key), CE_TOPIC, tenant, topic);
	cache_drop(reg, key);
	return err;
}
