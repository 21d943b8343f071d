/*
 * stats.c - the per-topic time series behind the dashboard, and the small
 * JSON routes the dashboard needs beyond the REST API: a topic's last hour
 * (GET /v1/topics/{topic}/stats), the tenant's topics with counts (GET
 * /v1/stats), who a key is (GET /v1/whoami) and schedule validation as the
 * user types (POST /v1/schedules:validate).
 *
 * Key decision: the series live in Redis, one hash per tenant, topic and
 * minute (rd:stats:{TENANT}:TOPIC:MINUTE, fields ok, fail and l0..l14, the
 * lateness histogram; expiring after two hours), so every instance adds to
 * the same numbers and any instance can answer.  Events never reach Redis
 * on the thread that saw them: they are summed in a striped in-memory table
 * (bounded: past STATS_MAX_ENTRIES, events are dropped and counted) that one
 * thread writes out once a second with HINCRBY in a single pipeline.  A
 * chart is therefore up to about a second behind, and a Redis outage during
 * a flush loses that second of chart (the Prometheus counters of metrics.c
 * are unaffected).  Quantiles come from the bucket counts, interpolated
 * linearly within a bucket, as Prometheus's histogram_quantile() does.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>
#include <json-c/json.h>

#include "api/api.h"
#include "api/internal.h"
#include "api/obs.h"
#include "api/validate.h"
#include "conf.h"
#include "scheduler/conn.h"
#include "scheduler/registry.h"
#include "scheduler/sched.h"
#include "schedules/schedule.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/strutil.h"
#include "util/xmalloc.h"

#define STATS_MINUTE_MS		60000
#define STATS_TTL_S		7200	/* two hours of minutes */
#define STATS_MAX_MINUTES	120
#define STATS_MAX_ENTRIES	10000	/* pending (tenant, topic, minute) */
#define STATS_STRIPES		8
#define STATS_CHAINS		64
#define STATS_FLUSH_US		1000000
#define OVERVIEW_MAX_TOPICS	500
#define STATS_KEY_MAX		(16 + REG_TENANT_MAX + REG_TOPIC_MAX + 24)

const int64_t obs_late_bounds_ms[OBS_LATE_BUCKETS - 1] = {
	10, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000,
	300000, 900000, 3600000,
};

struct entry {
	struct entry	*next;
	char		 tenant[REG_TENANT_MAX + 1];
	char		 topic[REG_TOPIC_MAX + 1];
	int64_t		 minute;	/* ms / STATS_MINUTE_MS */
	uint64_t	 ok, fail;
	uint64_t	 late[OBS_LATE_BUCKETS];
};

struct stripe {
	pthread_mutex_t	 lock;
	struct entry	*chain[STATS_CHAINS];
};

/*
 * Lock order: a stripe's lock is never held with another lock; run_lock
 * guards the thread's life only.
 */
static struct stripe stripes[STATS_STRIPES];
static pthread_once_t stripes_once = PTHREAD_ONCE_INIT;
static size_t nentries;			/* atomic */
static uint64_t ndropped;		/* atomic */
static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t run_cond;
static pthread_t flusher;
static int running, stopping;
static struct sched *stats_sched;

/* ---- the in-memory table ------------------------------------------------ */

static void
stripes_init(void)
{
	size_t i;

	for (i = 0; i < STATS_STRIPES; i++)
		pthread_mutex_init(&stripes[i].lock, NULL);
}

static uint32_t
entry_hash(const char *tenant, const char *topic, int64_t minute)
{
	uint32_t h;

	h = str_hash(str_hash(str_hash(STR_HASH_INIT, tenant), "\xff"),
	    topic);
	return (h ^ (uint32_t)minute) * STR_HASH_PRIME;
}

/* The entry, made if new; NULL (counted) when the table is full. */
static struct entry *
entry_get(struct stripe *st, uint32_t h, const char *tenant,
    const char *topic, int64_t minute)
{
	struct entry **head = &st->chain[(h / STATS_STRIPES) % STATS_CHAINS];
	struct entry *e;

	for (e = *head; e != NULL; e = e->next)
		if (e->minute == minute && strcmp(e->topic, topic) == 0 &&
		    strcmp(e->tenant, tenant) == 0)
			return e;
	if (__atomic_add_fetch(&nentries, 1, __ATOMIC_RELAXED) >
	    STATS_MAX_ENTRIES) {
		__atomic_sub_fetch(&nentries, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&ndropped, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	e = xcalloc(1, sizeof(*e));
	snprintf(e->tenant, sizeof(e->tenant), "%s", tenant);
	snprintf(e->topic, sizeof(e->topic), "%s", topic);
	e->minute = minute;
	e->next = *head;
	*head = e;
	return e;
}

static int
names_ok(const char *tenant, const char *topic)
{
	return tenant != NULL && topic != NULL &&
	    api_valid_tenant(tenant) && api_valid_topic(topic);
}

/*
 * The entry of (tenant, topic, the minute of now_ms) with its stripe locked
 * in *stp, or NULL (bad names: nothing locked; no room: still locked).
 * The caller unlocks (*stp)->lock when *stp is set.
 */
static struct entry *
entry_lock(const char *tenant, const char *topic, int64_t now_ms,
    struct stripe **stp)
{
	int64_t minute = now_ms / STATS_MINUTE_MS;
	uint32_t h;

	*stp = NULL;
	if (!names_ok(tenant, topic))
		return NULL;
	pthread_once(&stripes_once, stripes_init);
	h = entry_hash(tenant, topic, minute);
	*stp = &stripes[h % STATS_STRIPES];
	pthread_mutex_lock(&(*stp)->lock);
	return entry_get(*stp, h, tenant, topic, minute);
}

void
obs_stats_attempt(const char *tenant, const char *topic, int delivered,
    int64_t now_ms)
{
	struct stripe *st;
	struct entry *e;

	e = entry_lock(tenant, topic, now_ms, &st);
	if (e != NULL) {
		if (delivered)
			e->ok++;
		else
			e->fail++;
	}
	if (st != NULL)
		pthread_mutex_unlock(&st->lock);
}

static size_t
late_bucket(int64_t ms)
{
	size_t i;

	for (i = 0; i < OBS_LATE_BUCKETS - 1; i++)
		if (ms <= obs_late_bounds_ms[i])
			return i;
	return OBS_LATE_BUCKETS - 1;
}

void
obs_stats_lateness(const char *tenant, const char *topic, int64_t late_ms,
    int64_t now_ms)
{
	struct stripe *st;
	struct entry *e;

	e = entry_lock(tenant, topic, now_ms, &st);
	if (e != NULL)
		e->late[late_bucket(late_ms < 0 ? 0 : late_ms)]++;
	if (st != NULL)
		pthread_mutex_unlock(&st->lock);
}

uint64_t
obs_stats_dropped(void)
{
	return __atomic_load_n(&ndropped, __ATOMIC_RELAXED);
}

static void
key_of(char *out, size_t outlen, const char *tenant, const char *topic,
    int64_t minute)
{
	snprintf(out, outlen, "rd:stats:{%s}:%s:%" PRId64, tenant, topic,
	    minute);
}

/* Take every pending entry out of the table: a list the caller frees. */
static struct entry *
table_take(void)
{
	struct entry *all = NULL, *e, *next;
	size_t i, j, n = 0;

	pthread_once(&stripes_once, stripes_init);
	for (i = 0; i < STATS_STRIPES; i++) {
		pthread_mutex_lock(&stripes[i].lock);
		for (j = 0; j < STATS_CHAINS; j++) {
			for (e = stripes[i].chain[j]; e != NULL; e = next) {
				next = e->next;
				e->next = all;
				all = e;
				n++;
			}
			stripes[i].chain[j] = NULL;
		}
		pthread_mutex_unlock(&stripes[i].lock);
	}
	__atomic_sub_fetch(&nentries, n, __ATOMIC_RELAXED);
	return all;
}

static void
list_free(struct entry *e)
{
	struct entry *next;

	for (; e != NULL; e = next) {
		next = e->next;
		free(e);
	}
}

/* Appends the commands of one entry; their count. */
static int
append_entry(struct sched_pipe *q, const struct entry *e)
{
	char key[STATS_KEY_MAX], field[8];
	int n = 0;
	size_t i;

	key_of(key, sizeof(key), e->tenant, e->topic, e->minute);
	if (e->ok > 0) {
		sched_pipe_append(q, key, "HINCRBY %s ok %llu", key,
		    (unsigned long long)e->ok);
		n++;
	}
	if (e->fail > 0) {
		sched_pipe_append(q, key, "HINCRBY %s fail %llu", key,
		    (unsigned long long)e->fail);
		n++;
	}
	for (i = 0; i < OBS_LATE_BUCKETS; i++) {
		if (e->late[i] == 0)
			continue;
		snprintf(field, sizeof(field), "l%zu", i);
		sched_pipe_append(q, key, "HINCRBY %s %s %llu", key, field,
		    (unsigned long long)e->late[i]);
		n++;
	}
	sched_pipe_append(q, key, "EXPIRE %s %d", key, STATS_TTL_S);
	return n + 1;
}

/* Write the pending entries to Redis in one pipeline. */
static void
stats_flush(void)
{
	struct entry *all = table_take(), *e;
	struct sched_pool *pool;
	struct sched_pipe *q;
	redisContext *c = NULL;
	redisReply *r;
	int n = 0, i, broken = 0;
	uint64_t lost = 0;

	if (all == NULL)
		return;
	if (stats_sched == NULL || (pool = sched_pool(stats_sched)) == NULL ||
	    (c = sched_pool_get(pool)) == NULL) {
		for (e = all; e != NULL; e = e->next)
			lost++;
		__atomic_add_fetch(&ndropped, lost, __ATOMIC_RELAXED);
		goto out;
	}
	/* On a cluster, one pipeline per node. */
	q = sched_pipe_new(pool, c);
	for (e = all; e != NULL; e = e->next)
		n += append_entry(q, e);
	for (i = 0; i < n; i++) {
		if (sched_pipe_getreply(q, (void **)&r) != REDIS_OK) {
			broken = 1;
			break;
		}
		if (r != NULL && r->type == REDIS_REPLY_ERROR && !broken)
			log_warnx("stats: Redis: %s", r->str);
		freeReplyObject(r);
	}
	if (broken) {
		for (e = all; e != NULL; e = e->next)
			lost++;
		__atomic_add_fetch(&ndropped, lost, __ATOMIC_RELAXED);
		log_warnx("stats: cannot write the per-minute series: %s",
		    c->errstr);
	}
	sched_pipe_free(q);
	sched_pool_put(pool, c, broken);
out:
	list_free(all);
}

/* Drops the pending entries of tenant's topic (NULL: all its topics). */
static void
table_drop(const char *tenant, const char *topic)
{
	struct entry **pp, *e;
	size_t i, j, n = 0;

	pthread_once(&stripes_once, stripes_init);
	for (i = 0; i < STATS_STRIPES; i++) {
		pthread_mutex_lock(&stripes[i].lock);
		for (j = 0; j < STATS_CHAINS; j++)
			for (pp = &stripes[i].chain[j]; (e = *pp) != NULL;) {
				if (strcmp(e->tenant, tenant) != 0 ||
				    (topic != NULL &&
				    strcmp(e->topic, topic) != 0)) {
					pp = &e->next;
					continue;
				}
				*pp = e->next;
				free(e);
				n++;
			}
		pthread_mutex_unlock(&stripes[i].lock);
	}
	__atomic_sub_fetch(&nentries, n, __ATOMIC_RELAXED);
}

/*
 * The keys of the tenant's series matching pattern, found with SCAN on
 * the node of its hash tag, each removed (UNLINK); -1 when Redis failed.
 */
static int
keys_drop(struct sched_pool *pool, redisContext *c, const char *tenant,
    const char *pattern)
{
	char route[STATS_KEY_MAX], cursor[32] = "0";
	struct sched_pipe *q;
	redisReply *sr, *r, *k;
	size_t i;
	int broken = 0;

	key_of(route, sizeof(route), tenant, "-", 0);
	do {
		sr = sched_pool_command(pool, c, &broken, route,
		    "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
		if (sr == NULL || sr->type != REDIS_REPLY_ARRAY ||
		    sr->elements != 2 ||
		    sr->element[0]->type != REDIS_REPLY_STRING ||
		    sr->element[1]->type != REDIS_REPLY_ARRAY) {
			freeReplyObject(sr);
			return -1;
		}
		snprintf(cursor, sizeof(cursor), "%s", sr->element[0]->str);
		k = sr->element[1];
		q = sched_pipe_new(pool, c);
		for (i = 0; i < k->elements; i++)
			sched_pipe_append(q, k->element[i]->str, "UNLINK %s",
			    k->element[i]->str);
		for (i = 0; i < k->elements && !broken; i++) {
			if (sched_pipe_getreply(q, (void **)&r) != REDIS_OK)
				broken = 1;
			else
				freeReplyObject(r);
		}
		sched_pipe_free(q);
		freeReplyObject(sr);
	} while (!broken && strcmp(cursor, "0") != 0);
	return broken ? -1 : 0;
}

void
obs_stats_forget(struct sched *s, const char *tenant, const char *topic)
{
	char pattern[STATS_KEY_MAX + 4];
	struct sched_pool *pool;
	redisContext *c;
	int rc;

	if (tenant == NULL || !api_valid_tenant(tenant) ||
	    (topic != NULL && !api_valid_topic(topic)))
		return;
	table_drop(tenant, topic);
	if (s == NULL || (pool = sched_pool(s)) == NULL ||
	    (c = sched_pool_get(pool)) == NULL) {
		log_warnx("stats: %s%s%s: its last two hours of series stay "
		    "(Redis is unavailable)", tenant, topic ? "/" : "",
		    topic ? topic : "");
		return;
	}
	/* Names hold no glob character: the pattern is the names. */
	snprintf(pattern, sizeof(pattern), "rd:stats:{%s}:%s%s*", tenant,
	    topic != NULL ? topic : "", topic != NULL ? ":" : "");
	if ((rc = keys_drop(pool, c, tenant, pattern)) == -1)
		log_warnx("stats: %s%s%s: cannot remove its series: %s",
		    tenant, topic ? "/" : "", topic ? topic : "",
		    c->errstr[0] != '\0' ? c->errstr : "Redis refused");
	sched_pool_put(pool, c, rc == -1);
}

static void *
flusher_main(void *arg)
{
	struct timespec ts;
	int stop;

	(void)arg;
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += STATS_FLUSH_US / 1000000;
		pthread_mutex_lock(&run_lock);
		while (!stopping && pthread_cond_timedwait(&run_cond,
		    &run_lock, &ts) == 0)
			;
		stop = stopping;
		pthread_mutex_unlock(&run_lock);
		stats_flush();
		if (stop)
			break;
	}
	return NULL;
}

int
obs_stats_start(const struct api_ctx *ctx)
{
	int rc = 0;

	pthread_mutex_lock(&run_lock);
	if (running)
		goto out;
	stats_sched = ctx->sched;
	clock_cond_init(&run_cond);
	stopping = 0;
	if ((rc = pthread_create(&flusher, NULL, flusher_main, NULL)) != 0) {
		pthread_cond_destroy(&run_cond);
		errno = rc;
		rc = -1;
		goto out;
	}
	(void)pthread_setname_np(flusher, "stats-flush");
	running = 1;
out:
	pthread_mutex_unlock(&run_lock);
	return rc;
}

void
obs_stats_stop(void)
{
	pthread_mutex_lock(&run_lock);
	if (!running) {
		pthread_mutex_unlock(&run_lock);
		list_free(table_take());
		return;
	}
	stopping = 1;
	pthread_cond_signal(&run_cond);
	pthread_mutex_unlock(&run_lock);
	pthread_join(flusher, NULL);
	pthread_mutex_lock(&run_lock);
	running = 0;
	stats_sched = NULL;
	pthread_cond_destroy(&run_cond);
	pthread_mutex_unlock(&run_lock);
	list_free(table_take());
}

/* ---- reading ------------------------------------------------------------ */

struct minute {
	int64_t		start_ms;
	uint64_t	ok, fail;
	uint64_t	late[OBS_LATE_BUCKETS];
};

/* The q-quantile of the lateness buckets in ms, or -1 when empty. */
static int64_t
late_quantile(const uint64_t b[OBS_LATE_BUCKETS], double q)
{
	uint64_t total = 0, cum = 0;
	double rank, lo, hi;
	size_t i;

	for (i = 0; i < OBS_LATE_BUCKETS; i++)
		total += b[i];
	if (total == 0)
		return -1;
	rank = q * (double)total;
	for (i = 0; i < OBS_LATE_BUCKETS; i++) {
		if (b[i] > 0 && (double)(cum + b[i]) >= rank) {
			if (i == OBS_LATE_BUCKETS - 1)
				return obs_late_bounds_ms[i - 1];
			lo = i > 0 ? (double)obs_late_bounds_ms[i - 1] : 0;
			hi = (double)obs_late_bounds_ms[i];
			return (int64_t)(lo + (hi - lo) *
			    ((rank - (double)cum) / (double)b[i]) + 0.5);
		}
		cum += b[i];
	}
	return obs_late_bounds_ms[OBS_LATE_BUCKETS - 2];
}

static uint64_t
field_u64(const char *s)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || s[0] == '-')
		return 0;
	return (uint64_t)v;
}

static void
minute_fill(struct minute *m, const redisReply *r)
{
	const char *f;
	size_t i;
	uint64_t v;
	char *end;
	long idx;

	if (r == NULL || r->type != REDIS_REPLY_ARRAY)
		return;
	for (i = 0; i + 1 < r->elements; i += 2) {
		if (r->element[i]->type != REDIS_REPLY_STRING ||
		    r->element[i + 1]->type != REDIS_REPLY_STRING)
			continue;
		f = r->element[i]->str;
		v = field_u64(r->element[i + 1]->str);
		if (strcmp(f, "ok") == 0)
			m->ok += v;
		else if (strcmp(f, "fail") == 0)
			m->fail += v;
		else if (f[0] == 'l' && f[1] != '\0') {
			errno = 0;
			idx = strtol(f + 1, &end, 10);
			if (errno == 0 && *end == '\0' && idx >= 0 &&
			    idx < OBS_LATE_BUCKETS)
				m->late[idx] += v;
		}
	}
}

/*
 * The last n minutes of tenant/topic, oldest first, ending with the
 * minute of now_ms: SCHED_OK, or SCHED_EUNAVAIL.
 */
static enum sched_err
minutes_read(struct sched *s, const char *tenant, const char *topic,
    int64_t now_ms, int n, struct minute *out)
{
	struct sched_pool *pool = sched_pool(s);
	int64_t last = now_ms / STATS_MINUTE_MS;
	char key[STATS_KEY_MAX];
	struct sched_pipe *q;
	redisContext *c;
	redisReply *r;
	int i, broken = 0;

	memset(out, 0, sizeof(*out) * (size_t)n);
	if (pool == NULL || (c = sched_pool_get(pool)) == NULL)
		return SCHED_EUNAVAIL;
	q = sched_pipe_new(pool, c);
	for (i = 0; i < n; i++) {
		out[i].start_ms = (last - (n - 1 - i)) * STATS_MINUTE_MS;
		key_of(key, sizeof(key), tenant, topic, last - (n - 1 - i));
		sched_pipe_append(q, key, "HGETALL %s", key);
	}
	for (i = 0; i < n; i++) {
		if (sched_pipe_getreply(q, (void **)&r) != REDIS_OK) {
			broken = 1;
			break;
		}
		minute_fill(&out[i], r);
		freeReplyObject(r);
	}
	sched_pipe_free(q);
	sched_pool_put(pool, c, broken);
	return broken ? SCHED_EUNAVAIL : SCHED_OK;
}

static json_object *
ms_or_null(int64_t v)
{
	return v < 0 ? NULL : json_object_new_int64(v);
}

/* Sum of the minutes as {"delivered","failed","lateness_*"}. */
static json_object *
totals_json(const struct minute *m, int n)
{
	json_object *o = json_object_new_object();
	uint64_t late[OBS_LATE_BUCKETS] = { 0 }, ok = 0, fail = 0, cnt = 0;
	int i;
	size_t j;

	for (i = 0; i < n; i++) {
		ok += m[i].ok;
		fail += m[i].fail;
		for (j = 0; j < OBS_LATE_BUCKETS; j++)
			late[j] += m[i].late[j];
	}
	for (j = 0; j < OBS_LATE_BUCKETS; j++)
		cnt += late[j];
	json_object_object_add(o, "delivered", json_object_new_int64(
	    (int64_t)ok));
	json_object_object_add(o, "failed", json_object_new_int64(
	    (int64_t)fail));
	json_object_object_add(o, "started", json_object_new_int64(
	    (int64_t)cnt));
	json_object_object_add(o, "lateness_p50_ms",
	    ms_or_null(late_quantile(late, 0.50)));
	json_object_object_add(o, "lateness_p99_ms",
	    ms_or_null(late_quantile(late, 0.99)));
	return o;
}

static void
topic_stats(struct api_req *req)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct registry_topic *t = NULL;
	struct minute *m = NULL;
	json_object *o, *a, *e, *b;
	int64_t n, now = clock_wall_ms();
	enum sched_err err;
	int i;
	size_t j;

	if (api_topic_load(req, req->param[0], &t) == -1 ||
	    api_query_int(req, "minutes", 1, STATS_MAX_MINUTES, 60, &n) == -1)
		goto out;
	m = xcalloc((size_t)n, sizeof(*m));
	if ((err = minutes_read(ctx->sched, req->tenant, t->name, now, (int)n,
	    m)) != SCHED_OK) {
		api_sched_error(req, err, "topic");
		goto out;
	}
	o = json_object_new_object();
	json_object_object_add(o, "topic", json_object_new_string(t->name));
	json_object_object_add(o, "now_ms", json_object_new_int64(now));
	json_object_object_add(o, "minute_ms",
	    json_object_new_int64(STATS_MINUTE_MS));
	b = json_object_new_array();
	for (j = 0; j < OBS_LATE_BUCKETS - 1; j++)
		json_object_array_add(b,
		    json_object_new_int64(obs_late_bounds_ms[j]));
	json_object_object_add(o, "lateness_bounds_ms", b);
	a = json_object_new_array();
	for (i = 0; i < (int)n; i++) {
		e = json_object_new_object();
		json_object_object_add(e, "start_ms",
		    json_object_new_int64(m[i].start_ms));
		json_object_object_add(e, "delivered",
		    json_object_new_int64((int64_t)m[i].ok));
		json_object_object_add(e, "failed",
		    json_object_new_int64((int64_t)m[i].fail));
		json_object_object_add(e, "lateness_p50_ms",
		    ms_or_null(late_quantile(m[i].late, 0.50)));
		json_object_object_add(e, "lateness_p99_ms",
		    ms_or_null(late_quantile(m[i].late, 0.99)));
		json_object_array_add(a, e);
	}
	json_object_object_add(o, "minutes", a);
	json_object_object_add(o, "total", totals_json(m, (int)n));
	api_reply_json(req, 200, o);
out:
	free(m);
	registry_topic_free(t);
}

/* The tenant's topics with their counts and last hour, one request. */
static void
overview(struct api_req *req)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct registry_topic **v = NULL;
	struct minute m[60];
	int64_t counts[SCHED_NSTATES], now = clock_wall_ms();
	json_object *o = NULL, *a, *e;
	enum sched_err se;
	enum reg_err re;
	size_t i, n = 0;

	if ((re = registry_topic_list(ctx->reg, req->tenant, &v, &n)) !=
	    REG_OK) {
		api_reg_error(req, re, "topic");
		return;
	}
	a = json_object_new_array();
	for (i = 0; i < n && i < OVERVIEW_MAX_TOPICS; i++) {
		if ((se = sched_counts(ctx->sched, req->tenant, v[i]->name,
		    counts)) != SCHED_OK ||
		    (se = minutes_read(ctx->sched, req->tenant, v[i]->name, now,
		    60, m)) != SCHED_OK) {
			json_object_put(a);
			api_sched_error(req, se, "topic");
			goto out;
		}
		e = json_object_new_object();
		json_object_object_add(e, "name",
		    json_object_new_string(v[i]->name));
		json_object_object_add(e, "mode", json_object_new_string(
		    v[i]->mode == REG_MODE_PULL ? "pull" : "push"));
		json_object_object_add(e, "counts", api_counts_json(counts));
		json_object_object_add(e, "last_hour", totals_json(m, 60));
		json_object_array_add(a, e);
	}
	o = json_object_new_object();
	json_object_object_add(o, "tenant",
	    json_object_new_string(req->tenant));
	json_object_object_add(o, "topics", a);
	json_object_object_add(o, "truncated",
	    json_object_new_boolean(n > OVERVIEW_MAX_TOPICS));
	api_reply_json(req, 200, o);
out:
	registry_topic_list_free(v, n);
}

/*
 * Open route that authenticates itself: a tenant key answers its tenant,
 * the admin key answers admin (and the X-Tenant tenant, when given and
 * known), so the dashboard learns what a key is in one request that
 * succeeds for either.
 */
static void
whoami(struct api_req *req)
{
	struct api_ctx *ctx = api_ctx_of(req);
	json_object *o;
	int admin = api_is_admin_request(req);

	if ((!admin || api_header(req, "X-Tenant") != NULL) &&
	    api_authenticate(req, API_AUTH_TENANT, ctx) == -1)
		return;
	o = json_object_new_object();
	json_object_object_add(o, "tenant", req->tenant[0] != '\0' ?
	    json_object_new_string(req->tenant) : NULL);
	json_object_object_add(o, "admin", json_object_new_boolean(admin));
	api_reply_json(req, 200, o);
}

/* 200 {"valid": false, "error": {...}} naming the offset and reason. */
static void
schedule_refused(struct api_req *req, const struct schedule_error *err,
    int array)
{
	json_object *root = json_object_new_object();
	json_object *e = json_object_new_object();
	char msg[256];

	snprintf(msg, sizeof(msg), "retry_schedule: at %s %zu: %s",
	    array ? "index" : "offset", err->pos, err->reason);
	json_object_object_add(e, "code",
	    json_object_new_string("invalid_schedule"));
	json_object_object_add(e, "message", json_object_new_string(msg));
	json_object_object_add(e, "field",
	    json_object_new_string("retry_schedule"));
	json_object_object_add(e, "position",
	    json_object_new_int64((int64_t)err->pos));
	json_object_object_add(e, "reason",
	    json_object_new_string(err->reason));
	json_object_object_add(root, "valid", json_object_new_boolean(0));
	json_object_object_add(root, "error", e);
	api_reply_json(req, 200, root);
}

/* The array form: 0 with *out, or -1 with err (an element not an int). */
static int
schedule_array(json_object *v, int64_t horizon, struct retry_schedule *out,
    struct schedule_error *err)
{
	int64_t ms[SCHEDULE_MAX_WAITS];
	json_object *e;
	size_t i, n = json_object_array_length(v);

	if (n == 0 || n > SCHEDULE_MAX_WAITS) {
		err->pos = 0;
		snprintf(err->reason, sizeof(err->reason),
		    "a schedule has 1 to %d waits", SCHEDULE_MAX_WAITS);
		return -1;
	}
	for (i = 0; i < n; i++) {
		e = json_object_array_get_idx(v, i);
		ms[i] = json_object_is_type(e, json_type_int) ?
		    json_object_get_int64(e) : -1;
		if (ms[i] < 0 || ms[i] == INT64_MAX) {
			err->pos = i;
			snprintf(err->reason, sizeof(err->reason),
			    "a wait is an integer of milliseconds >= 0");
			return -1;
		}
	}
	return schedule_from_ms(ms, n, horizon, out, err);
}

/*
 * A schedule that does not parse is a successful check: 200 with valid
 * false, so an editor validating as the user types gets no HTTP errors.
 * Only a request that is not a check at all is 400.
 */
static void
schedule_validate(struct api_req *req)
{
	static const char *const allowed[] = { "retry_schedule", NULL };
	int64_t horizon = CONF_GET(limit_horizon_ms), at = 0;
	struct retry_schedule rs;
	struct schedule_error err;
	char text[SCHEDULE_FORMAT_MAX];
	json_object *body = NULL, *v, *o, *w, *firsts;
	int i, rc;

	if (api_body_json(req, &body) == -1 ||
	    api_json_only(req, body, allowed, "") == -1)
		goto out;
	if (!json_object_object_get_ex(body, "retry_schedule", &v) ||
	    json_object_is_type(v, json_type_null)) {
		api_error(req, 400, "missing_field", "retry_schedule",
		    "give retry_schedule, a string like \"<0,2m,10m>\" or an "
		    "array of milliseconds");
		goto out;
	}
	memset(&err, 0, sizeof(err));
	if (json_object_is_type(v, json_type_string))
		rc = schedule_parse(json_object_get_string(v),
		    (size_t)json_object_get_string_len(v), horizon, &rs, &err);
	else if (json_object_is_type(v, json_type_array))
		rc = schedule_array(v, horizon, &rs, &err);
	else {
		api_error(req, 400, "invalid_field", "retry_schedule",
		    "retry_schedule must be a string or an array");
		goto out;
	}
	if (rc == -1) {
		schedule_refused(req, &err,
		    json_object_is_type(v, json_type_array));
		goto out;
	}
	if (schedule_format(&rs, text, sizeof(text)) < 0) {
		api_error(req, 500, "internal", NULL, "cannot format");
		goto out;
	}
	o = json_object_new_object();
	json_object_object_add(o, "valid", json_object_new_boolean(1));
	json_object_object_add(o, "retry_schedule",
	    json_object_new_string(text));
	json_object_object_add(o, "attempts", json_object_new_int(rs.n));
	w = json_object_new_array();
	firsts = json_object_new_array();
	for (i = 0; i < rs.n; i++) {
		json_object_array_add(w, json_object_new_int64(rs.wait_ms[i]));
		at = schedule_add_ms(at, rs.wait_ms[i]);
		json_object_array_add(firsts, json_object_new_int64(at));
	}
	json_object_object_add(o, "waits_ms", w);
	/* When each attempt runs if every one before it fails at once. */
	json_object_object_add(o, "attempt_offsets_ms", firsts);
	json_object_object_add(o, "total_ms",
	    json_object_new_int64(schedule_total_ms(&rs)));
	api_reply_json(req, 200, o);
out:
	json_object_put(body);
}

const struct api_route api_routes_stats[] = {
	{ "GET", "/v1/stats", API_AUTH_TENANT, overview,
	    "the tenant's topics with counts and their last hour", 0 },
	{ "GET", "/v1/topics/{topic}/stats", API_AUTH_TENANT, topic_stats,
	    "a topic's deliveries, failures and lateness per minute", 0 },
	{ "GET", "/v1/whoami", API_AUTH_NONE, whoami,
	    "what a key is: a tenant's, or the admin key", 0 },
	{ "POST", "/v1/schedules:validate", API_AUTH_TENANT,
	    schedule_validate, "check a retry schedule; its canonical form",
	    0 },
	{ NULL, NULL, 0, NULL, NULL, 0 },
};
