/*
 * store.c - one C function per state-changing Lua script: it names the
 * shard's keys (all passed in KEYS, all under the shard's hash tag), packs
 * the arguments, runs the script and turns its reply into an enum sched_err
 * and jobs.  No policy here: the callers (sched.c, timer.c) decide.
 *
 * Key decision: scripts that act on an existing job take its topic from the
 * caller, who read the job first, because the topic names some of the keys;
 * a job's topic never changes, and each script checks it again, so the read
 * and the script need no lock between them.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/sched_int.h"
#include "util/clock.h"
#include "util/crypto.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define NKEYS_MAX	12
#define WAIT_MAX	((INT64_C(1) << 48) - 1)	/* 6 bytes (redrive) */

const char *
sched_now_arg(struct sched *s, char buf[24])
{
	if (!s->cfg.fake_clock)
		return "";
	snprintf(buf, 24, "%lld", (long long)clock_wall_ms());
	return buf;
}

int64_t
sched_now_ms(struct sched *s)
{
	int64_t off;

	if (s->cfg.fake_clock)
		return clock_wall_ms();
	/* The timer's filtered measure, else the last heartbeat's. */
	if (__atomic_load_n(&s->offset_best_ok, __ATOMIC_ACQUIRE))
		off = __atomic_load_n(&s->offset_best_ms, __ATOMIC_RELAXED);
	else
		off = __atomic_load_n(&s->offset_ms, __ATOMIC_RELAXED);
	return clock_wall_ms() + off;
}

enum sched_err
sched_reply_err(redisContext *c, redisReply *r, int *broken, const char *what)
{
	if (r == NULL) {
		if (c->err) {
			*broken = 1;
			log_warnx("redis: %s: %s", what, c->errstr);
		}
		return c->err ? SCHED_EUNAVAIL : SCHED_EINTERNAL;
	}
	if (r->type == REDIS_REPLY_ERROR) {
		if (strncmp(r->str, "LOADING", 7) == 0 ||
		    strncmp(r->str, "BUSY", 4) == 0 ||
		    strncmp(r->str, "MASTERDOWN", 10) == 0 ||
		    strncmp(r->str, "READONLY", 8) == 0 ||
		    strncmp(r->str, "TRYAGAIN", 8) == 0 ||
		    strncmp(r->str, "CLUSTERDOWN", 11) == 0 ||
		    strncmp(r->str, "MOVED", 5) == 0 ||
		    strncmp(r->str, "ASK", 3) == 0)
			return SCHED_EUNAVAIL;
		/* Refused before any write: surely not made. */
		if (strncmp(r->str, "OOM", 3) == 0)
			return SCHED_EFULL;
		return SCHED_EINTERNAL;
	}
	log_warnx("redis: %s: unexpected reply type %d", what, r->type);
	return SCHED_EINTERNAL;
}

/* Integer element i of an array reply (integers or numeric strings). */
static int
el_int(const redisReply *r, size_t i, long long *v)
{
	const redisReply *e;
	char *end;

	if (r == NULL || r->type != REDIS_REPLY_ARRAY || i >= r->elements)
		return -1;
	e = r->element[i];
	if (e->type == REDIS_REPLY_INTEGER) {
		*v = e->integer;
		return 0;
	}
	if (e->type == REDIS_REPLY_STRING && e->len > 0) {
		errno = 0;
		*v = strtoll(e->str, &end, 10);
		if (errno == 0 && *end == '\0')
			return 0;
	}
	return -1;
}

static const redisReply *
el_str(const redisReply *r, size_t i)
{
	if (r == NULL || r->type != REDIS_REPLY_ARRAY || i >= r->elements ||
	    r->element[i]->type != REDIS_REPLY_STRING)
		return NULL;
	return r->element[i];
}

/* The keys named by names (letters of lib.lua's layout) into k. */
static int
keys_of(char k[][SCHED_KEY_MAX], const char *tenant, int shard,
    const char *names, const char *topic)
{
	static const struct {
		char		 letter;
		const char	*suffix;
		int		 per_topic;
	} map[] = {
		{ 'j', "j", 0 }, { 'd', "d", 1 }, { 'h', "h", 0 },
		{ 'r', "r", 1 }, { 't', "rt", 0 }, { 'f', "f", 0 },
		{ 'x', "x", 1 }, { 'z', "z", 0 }, { 'c', "c", 0 },
		{ 'b', "b", 0 }, { 'a', "a", 0 },
	};
	size_t i, m;
	int n = 0;

	for (i = 0; names[i] != '\0'; i++)
		for (m = 0; m < sizeof(map) / sizeof(map[0]); m++)
			if (map[m].letter == names[i]) {
				sched_key(k[n++], tenant, shard, map[m].suffix,
				    map[m].per_topic ? topic : NULL);
				break;
			}
	return n;
}

/*
 * Runs a script whose KEYS are the letters names and whose ARGV follow
 * (ARGV[1], now, is added here).  *rp is the reply on SCHED_OK.
 */
static enum sched_err
run(struct sched *s, redisContext *c, enum sched_script id, const char *tenant,
    int shard, const char *names, const char *topic, int nargs,
    const char **args, const size_t *arglens, redisReply **rp, int *broken)
{
	char k[NKEYS_MAX][SCHED_KEY_MAX], nowbuf[24];
	const char *argv[NKEYS_MAX + 16];
	size_t lens[NKEYS_MAX + 16];
	redisReply *r;
	enum sched_err e;
	int nk, i;

	nk = keys_of(k, tenant, shard, names, topic);
	for (i = 0; i < nk; i++) {
		argv[i] = k[i];
		lens[i] = strlen(k[i]);
	}
	argv[nk] = sched_now_arg(s, nowbuf);
	lens[nk] = strlen(argv[nk]);
	for (i = 0; i < nargs; i++) {
		argv[nk + 1 + i] = args[i];
		lens[nk + 1 + i] = arglens != NULL ? arglens[i] :
		    strlen(args[i]);
	}
	r = sched_script_run(s->scripts, c, id, nk, nargs + 1, argv, lens,
	    broken);
	if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements < 1) {
		e = sched_reply_err(c, r, broken, sched_script_name(id));
		if (r != NULL)
			freeReplyObject(r);
		return e;
	}
	*rp = r;
	return SCHED_OK;
}

/* ---- pipelining (the timer's passes) ------------------------------------ */

/*
 * The SHA1 of script id for pipelined EVALSHA, from SCRIPT LOAD of the same
 * text scripts.c loads (so the same SHA1).  Must run before anything is
 * appended: it is a round trip of its own.
 */
static int
pipe_sha(struct sched *s, redisContext *c, enum sched_script id,
    const char *src, int *broken)
{
	redisReply *r;
	char *text;
	int rc = -1;

	pthread_mutex_lock(&s->lock);
	rc = s->pipe_sha[id][0] != '\0' ? 0 : -1;
	pthread_mutex_unlock(&s->lock);
	if (rc == 0)
		return 0;
	text = xasprintf("%s%s", sched_lua_lib, src);
	r = redisCommand(c, "SCRIPT LOAD %s", text);
	sched_redis_count_reply(r);
	/* A cluster: every node, for the calls routed there. */
	if (r != NULL && r->type == REDIS_REPLY_STRING)
		(void)sched_pool_each(s->pool, c, "SCRIPT LOAD %s", text);
	free(text);
	if (r != NULL && r->type == REDIS_REPLY_STRING &&
	    r->len + 1 == sizeof(s->pipe_sha[id])) {
		pthread_mutex_lock(&s->lock);
		memcpy(s->pipe_sha[id], r->str, r->len);
		s->pipe_sha[id][r->len] = '\0';
		pthread_mutex_unlock(&s->lock);
		rc = 0;
	} else
		(void)sched_reply_err(c, r, broken, "SCRIPT LOAD");
	if (r != NULL)
		freeReplyObject(r);
	return rc;
}

int
sched_st_pipe_prepare(struct sched *s, redisContext *c, int *broken)
{
	if (pipe_sha(s, c, SCRIPT_PROMOTE, sched_lua_promote, broken) == -1 ||
	    pipe_sha(s, c, SCRIPT_RESERVE, sched_lua_reserve, broken) == -1 ||
	    pipe_sha(s, c, SCRIPT_FINISH, sched_lua_finish, broken) == -1)
		return -1;
	return 0;
}

/* Queues EVALSHA of script id on q (as run() would send it). */
static int
append(struct sched *s, struct sched_pipe *q, enum sched_script id,
    const char *tenant, int shard, const char *names, const char *topic,
    int nargs, const char **args, const size_t *arglens)
{
	char k[NKEYS_MAX][SCHED_KEY_MAX], nowbuf[24], nk[16];
	char sha[sizeof(s->pipe_sha[0])];
	const char **argv;
	size_t *lens;
	int n, i, rc;

	pthread_mutex_lock(&s->lock);
	memcpy(sha, s->pipe_sha[id], sizeof(sha));
	pthread_mutex_unlock(&s->lock);
	if (sha[0] == '\0')
		return -1;
	n = keys_of(k, tenant, shard, names, topic);
	argv = xcalloc((size_t)(4 + n + nargs), sizeof(*argv));
	lens = xcalloc((size_t)(4 + n + nargs), sizeof(*lens));
	snprintf(nk, sizeof(nk), "%d", n);
	argv[0] = "EVALSHA";
	argv[1] = sha;
	argv[2] = nk;
	for (i = 0; i < 3; i++)
		lens[i] = strlen(argv[i]);
	for (i = 0; i < n; i++) {
		argv[3 + i] = k[i];
		lens[3 + i] = strlen(k[i]);
	}
	argv[3 + n] = sched_now_arg(s, nowbuf);
	lens[3 + n] = strlen(argv[3 + n]);
	for (i = 0; i < nargs; i++) {
		argv[4 + n + i] = args[i];
		lens[4 + n + i] = arglens != NULL ? arglens[i] :
		    strlen(args[i]);
	}
	rc = sched_pipe_append_argv(q, k[0], lens[3], 4 + n + nargs, argv,
	    lens);
	free(argv);
	free(lens);
	return rc;
}

/* A NOSCRIPT reply (freed): the caller runs the script again by run(). */
static int
noscript(redisReply *r)
{
	if (r == NULL || r->type != REDIS_REPLY_ERROR ||
	    strncmp(r->str, "NOSCRIPT", 8) != 0)
		return 0;
	freeReplyObject(r);
	return 1;
}

/* SCHED_OK for a script's array reply; else the error (r freed). */
static enum sched_err
reply_ok(redisContext *c, redisReply *r, int *broken, enum sched_script id)
{
	enum sched_err e;

	if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements >= 1)
		return SCHED_OK;
	if (r != NULL && r->type == REDIS_REPLY_ERROR)
		sched_log_script_err(sched_script_name(id), r->str);
	e = sched_reply_err(c, r, broken, sched_script_name(id));
	if (r != NULL)
		freeReplyObject(r);
	return e;
}

static enum sched_err
code_err(long long code)
{
	switch (code) {
	case SCHED_R_CONFLICT:
		return SCHED_ECONFLICT;
	case SCHED_R_NOTFOUND:
	case SCHED_R_TOPIC:
		return SCHED_ENOTFOUND;
	case SCHED_R_STALE:
		return SCHED_ESTALE;
	default:
		return SCHED_EINTERNAL;
	}
}

/* The reply's first element as a status or count: negative is an error. */
static enum sched_err
el_status(const redisReply *r, long long *v)
{
	if (el_int(r, 0, v) == -1)
		return SCHED_EINTERNAL;
	return *v < 0 ? code_err(*v) : SCHED_OK;
}

static void
lld(char buf[24], long long v)
{
	snprintf(buf, 24, "%lld", v);
}

/* Decodes element i (id key) and i + 1 (record or head) into a job. */
static struct sched_job *
el_job(const redisReply *r, size_t i, const char *tenant, int shard,
    int skip)
{
	const redisReply *k = el_str(r, i), *v = el_str(r, i + 1);

	if (k == NULL || v == NULL || v->len < (size_t)skip)
		return NULL;
	return sched_rec_decode(tenant, shard, k->str, k->len, v->str + skip,
	    v->len - skip);
}

enum sched_err
sched_st_push(struct sched *s, redisContext *c, int shard,
    const struct sched_push *p, const char *rec, size_t reclen,
    struct sched_push_result *res, int *broken)
{
	char idk[SCHED_IDKEY_MAX], tag[SCHED_KEY_MAX];
	const char *args[3];
	size_t lens[3], idklen;
	const redisReply *k;
	redisReply *r = NULL;
	enum sched_err e;
	long long code, due, st;

	if (sched_idkey(p->id, idk, &idklen) == -1)
		return SCHED_EINVAL;
	sched_tag(tag, p->tenant, shard);
	args[0] = idk;
	lens[0] = idklen;
	args[1] = rec;
	lens[1] = reclen;
	args[2] = tag;
	lens[2] = strlen(tag);
	e = run(s, c, SCRIPT_PUSH, p->tenant, shard, "jdhcb", p->topic, 3,
	    args, lens, &r, broken);
	if (e != SCHED_OK)
		return e;
	if ((e = el_status(r, &code)) != SCHED_OK)
		goto out;
	if ((k = el_str(r, 1)) == NULL || el_int(r, 2, &due) == -1 ||
	    el_int(r, 3, &st) == -1 ||
	    sched_idkey_text(k->str, k->len, res->id) == -1) {
		e = SCHED_EINTERNAL;
		goto out;
	}
	res->deduplicated = code == SCHED_R_DUP;
	res->run_at_ms = due;
	res->state = (enum sched_state)st;
out:
	freeReplyObject(r);
	return e;
}

int
sched_st_push_many_prepare(struct sched *s, redisContext *c, int again,
    int *broken)
{
	if (again) {
		pthread_mutex_lock(&s->lock);
		s->pipe_sha[SCRIPT_PUSH_MANY][0] = '\0';
		pthread_mutex_unlock(&s->lock);
	}
	return pipe_sha(s, c, SCRIPT_PUSH_MANY, sched_lua_push_many, broken);
}

int
sched_st_push_many_append(struct sched *s, struct sched_pipe *q,
    const char *tenant, int shard, const char *topic,
    const struct sched_push_item *it, size_t n)
{
	char tag[SCHED_KEY_MAX];
	const char **args;
	size_t *lens, i;
	int rc;

	sched_tag(tag, tenant, shard);
	args = xcalloc(1 + 2 * n, sizeof(*args));
	lens = xcalloc(1 + 2 * n, sizeof(*lens));
	args[0] = tag;
	lens[0] = strlen(tag);
	for (i = 0; i < n; i++) {
		args[1 + 2 * i] = it[i].idk;
		lens[1 + 2 * i] = it[i].idklen;
		args[2 + 2 * i] = it[i].rec;
		lens[2 + 2 * i] = it[i].reclen;
	}
	rc = append(s, q, SCRIPT_PUSH_MANY, tenant, shard, "jdhcb", topic,
	    (int)(1 + 2 * n), args, lens);
	free(args);
	free(lens);
	return rc;
}

enum sched_err
sched_st_push_many_reply(redisContext *c, redisReply *r,
    struct sched_push_item *it, size_t n, int *broken)
{
	const redisReply *k;
	enum sched_err e;
	long long code, due, st;
	size_t i, x = n, len;

	if (noscript(r))
		return SCHED_ESTALE;	/* the caller loads it, sends again */
	if ((e = reply_ok(c, r, broken, SCRIPT_PUSH_MANY)) != SCHED_OK)
		return e;
	if (r->elements < n) {
		freeReplyObject(r);
		return SCHED_EINTERNAL;
	}
	/* A code per job, then id key, due, state per existing job. */
	for (i = 0; i < n; i++) {
		struct sched_push_result *res = it[i].res;

		memset(res, 0, sizeof(*res));
		it[i].err = SCHED_EINTERNAL;
		if (el_int(r, i, &code) == -1)
			continue;
		if (code < 0) {
			it[i].err = SCHED_ECONFLICT;
			continue;
		}
		if (code == 0) {
			if ((len = strlen(it[i].id)) >= sizeof(res->id))
				continue;
			memcpy(res->id, it[i].id, len + 1);
			res->run_at_ms = it[i].due_ms;
			res->state = SCHED_SCHEDULED;
			it[i].err = SCHED_OK;
			continue;
		}
		if (x + 3 > r->elements || (k = el_str(r, x)) == NULL ||
		    el_int(r, x + 1, &due) == -1 ||
		    el_int(r, x + 2, &st) == -1 ||
		    sched_idkey_text(k->str, k->len, res->id) == -1) {
			x += 3;
			continue;
		}
		x += 3;
		res->deduplicated = code == SCHED_R_DUP;
		res->run_at_ms = due;
		res->state = (enum sched_state)st;
		it[i].err = SCHED_OK;
	}
	freeReplyObject(r);
	return SCHED_OK;
}

enum sched_err
sched_st_cancel(struct sched *s, redisContext *c, const char *tenant,
    int shard, const char *idk, size_t idklen, const char *topic,
    struct sched_job **job, enum sched_state *from, int *broken)
{
	const char *args[2] = { idk, topic };
	size_t lens[2] = { idklen, strlen(topic) };
	redisReply *r = NULL;
	enum sched_err e;
	long long code, st;

	e = run(s, c, SCRIPT_CANCEL, tenant, shard, "jdhrtfzcb", topic, 2,
	    args, lens, &r, broken);
	if (e != SCHED_OK)
		return e;
	if (el_int(r, 0, &code) == -1) {
		e = SCHED_EINTERNAL;
		goto out;
	}
	if (code != SCHED_R_OK) {
		e = code_err(code);
		goto out;
	}
	if (el_int(r, 1, &st) == -1) {
		e = SCHED_EINTERNAL;
		goto out;
	}
	*from = (enum sched_state)st;
	if (r->elements >= 3 && (*job = sched_rec_decode(tenant, shard, idk,
	    idklen, r->element[2]->str, r->element[2]->len)) == NULL)
		e = SCHED_EINTERNAL;
out:
	freeReplyObject(r);
	return e;
}

enum sched_err
sched_st_reschedule(struct sched *s, redisContext *c, const char *tenant,
    int shard, const char *idk, size_t idklen, const char *topic,
    int64_t due_ms, struct sched_job **job, int *broken)
{
	char due[24], tag[SCHED_KEY_MAX];
	const char *args[4];
	size_t lens[4];
	redisReply *r = NULL;
	enum sched_err e;
	long long code;

	lld(due, due_ms);
	sched_tag(tag, tenant, shard);
	args[0] = idk;
	lens[0] = idklen;
	args[1] = topic;
	lens[1] = strlen(topic);
	args[2] = due;
	lens[2] = strlen(due);
	args[3] = tag;
	lens[3] = strlen(tag);
	e = run(s, c, SCRIPT_RESCHEDULE, tenant, shard, "jdh", topic, 4, args,
	    lens, &r, broken);
	if (e != SCHED_OK)
		return e;
	if (el_int(r, 0, &code) == -1)
		e = SCHED_EINTERNAL;
	else if (code != SCHED_R_OK)
		e = code_err(code);
	else if (r->elements >= 3 && (*job = sched_rec_decode(tenant, shard,
	    idk, idklen, r->element[2]->str, r->element[2]->len)) == NULL)
		e = SCHED_EINTERNAL;
	freeReplyObject(r);
	return e;
}

/* The reply of promote (freed here); the transitions reported. */
static enum sched_err
promote_parse(struct sched *s, redisReply *r, const char *tenant, int shard,
    int *moved, int *more, int64_t *head)
{
	struct sched_job *job;
	const redisReply *v;
	enum sched_err e = SCHED_OK;
	long long n, m, h;
	size_t i;

	if (el_int(r, 0, &n) == -1 || el_int(r, 1, &m) == -1 ||
	    el_int(r, 2, &h) == -1) {
		e = SCHED_EINTERNAL;
		goto out;
	}
	*moved = (int)n;
	*more = (int)m;
	*head = h < 0 ? SCHED_NO_TIME : h;
	if (s->hooks.transition == NULL)
		goto out;
	for (i = 3; i + 1 < r->elements; i += 2) {
		if ((v = el_str(r, i + 1)) == NULL || v->len < 1)
			continue;
		if ((job = el_job(r, i, tenant, shard, 1)) == NULL)
			continue;
		sched_transition(s, job, (enum sched_state)(unsigned char)
		    v->str[0], SCHED_READY, NULL);
		sched_job_free(job);
	}
out:
	freeReplyObject(r);
	return e;
}

enum sched_err
sched_st_promote(struct sched *s, redisContext *c, const char *tenant,
    int shard, const char *topic, int *moved, int *more, int64_t *head,
    int *broken)
{
	char batch[24], tag[SCHED_KEY_MAX];
	const char *args[3];
	redisReply *r = NULL;
	enum sched_err e;

	lld(batch, sched_batch(s));
	sched_tag(tag, tenant, shard);
	args[0] = topic;
	args[1] = batch;
	args[2] = tag;
	e = run(s, c, SCRIPT_PROMOTE, tenant, shard, "jdhrtc", topic, 3, args,
	    NULL, &r, broken);
	if (e != SCHED_OK)
		return e;
	return promote_parse(s, r, tenant, shard, moved, more, head);
}

int
sched_st_promote_append(struct sched *s, struct sched_pipe *q,
    const char *tenant, int shard, const char *topic)
{
	char batch[24], tag[SCHED_KEY_MAX];
	const char *args[3];

	lld(batch, sched_batch(s));
	sched_tag(tag, tenant, shard);
	args[0] = topic;
	args[1] = batch;
	args[2] = tag;
	return append(s, q, SCRIPT_PROMOTE, tenant, shard, "jdhrtc", topic, 3,
	    args, NULL);
}

enum sched_err
sched_st_promote_reply(struct sched *s, redisContext *c, redisReply *r,
    const char *tenant, int shard, const char *topic, int *moved, int *more,
    int64_t *head, int *broken)
{
	enum sched_err e;

	if (noscript(r))
		return sched_st_promote(s, c, tenant, shard, topic, moved, more,
		    head, broken);
	if ((e = reply_ok(c, r, broken, SCRIPT_PROMOTE)) != SCHED_OK)
		return e;
	return promote_parse(s, r, tenant, shard, moved, more, head);
}

/* 18 random characters of the url-safe base64 alphabet. */
static void
token_base(char out[19])
{
	unsigned char raw[15];
	char enc[BASE64_ENCODED_LEN(15)];

	if (random_bytes(raw, sizeof(raw)) == -1)
		fatal("getrandom");
	(void)base64_encode(raw, sizeof(raw), enc, sizeof(enc), 1);
	memcpy(out, enc, 18);
	out[18] = '\0';
}

/*
 * The next ready jobs' scores that reserve answers with after its jobs
 * (ARGV[8]) into h->score (at most h->want); h->n = -1 when the reply has
 * none.
 */
static void
heads_parse(const redisReply *r, long long got, struct sched_heads_in *h)
{
	const redisReply *a;
	size_t j;

	h->n = -1;
	if (h->want <= 0 || r->elements != (size_t)(3 + 2 * got))
		return;
	a = r->element[r->elements - 1];
	if (a->type != REDIS_REPLY_ARRAY)
		return;
	h->n = 0;
	for (j = 1; j < a->elements && h->n < h->want; j += 2) {
		if (a->element[j]->type != REDIS_REPLY_STRING)
			break;
		h->score[h->n++] = strtod(a->element[j]->str, NULL);
	}
}

/* The reply of reserve (freed here) into jobs (and h, if not NULL). */
static enum sched_err
reserve_parse(redisReply *r, const char *tenant, int shard,
    struct sched_job ***jobs, size_t *njobs, struct sched_heads_in *h)
{
	struct sched_job **v = NULL, *job;
	enum sched_err e = SCHED_OK;
	long long got;
	size_t i, nv = 0;

	if (el_int(r, 0, &got) == -1 || got < 0) {
		e = SCHED_EINTERNAL;
		goto out;
	}
	if (got > 0)
		v = xcalloc((size_t)got, sizeof(*v));
	for (i = 2; i + 1 < r->elements && nv < (size_t)got; i += 2) {
		if ((job = el_job(r, i, tenant, shard, 0)) == NULL) {
			log_warnx("redis: reserve: a malformed job record");
			continue;
		}
		v[nv++] = job;
	}
	if (h != NULL)
		heads_parse(r, got, h);
	*jobs = v;
	*njobs = nv;
out:
	freeReplyObject(r);
	return e;
}

/* reserve.lua's ARGV, for the blocking call and the pipelined one. */
struct reserve_argv {
	char		 cnt[24], ttr[24], base[19], tag[SCHED_KEY_MAX];
	char		 heads[24];
	const char	*args[7];
	int		 nargs;
};

static void
reserve_argv(struct reserve_argv *a, const char *tenant, int shard,
    const char *topic, int n, int64_t ttr_ms, int own_ttr,
    const struct sched_heads_in *h)
{
	lld(a->cnt, n);
	lld(a->ttr, ttr_ms);
	token_base(a->base);
	sched_tag(a->tag, tenant, shard);
	a->args[0] = topic;
	a->args[1] = a->cnt;
	a->args[2] = a->base;
	a->args[3] = a->ttr;
	a->args[4] = own_ttr ? "1" : "0";
	a->args[5] = a->tag;
	a->nargs = 6;
	if (h != NULL && h->want > 0) {
		lld(a->heads, h->want);
		a->args[a->nargs++] = a->heads;
	}
}

enum sched_err
sched_st_reserve_h(struct sched *s, redisContext *c, const char *tenant,
    int shard, const char *topic, int n, int64_t ttr_ms, int own_ttr,
    struct sched_job ***jobs, size_t *njobs, struct sched_heads_in *h,
    int *broken)
{
	struct reserve_argv a;
	redisReply *r = NULL;
	enum sched_err e;

	*jobs = NULL;
	*njobs = 0;
	if (h != NULL)
		h->n = -1;
	reserve_argv(&a, tenant, shard, topic, n, ttr_ms, own_ttr, h);
	e = run(s, c, SCRIPT_RESERVE, tenant, shard, "jrtfc", topic, a.nargs,
	    a.args, NULL, &r, broken);
	if (e != SCHED_OK)
		return e;
	return reserve_parse(r, tenant, shard, jobs, njobs, h);
}

enum sched_err
sched_st_reserve(struct sched *s, redisContext *c, const char *tenant,
    int shard, const char *topic, int n, int64_t ttr_ms, int own_ttr,
    struct sched_job ***jobs, size_t *njobs, int *broken)
{
	return sched_st_reserve_h(s, c, tenant, shard, topic, n, ttr_ms,
	    own_ttr, jobs, njobs, NULL, broken);
}

int
sched_st_reserve_append_h(struct sched *s, struct sched_pipe *q,
    const char *tenant, int shard, const char *topic, int n, int64_t ttr_ms,
    int own_ttr, const struct sched_heads_in *h)
{
	struct reserve_argv a;

	reserve_argv(&a, tenant, shard, topic, n, ttr_ms, own_ttr, h);
	return append(s, q, SCRIPT_RESERVE, tenant, shard, "jrtfc", topic,
	    a.nargs, a.args, NULL);
}

int
sched_st_reserve_append(struct sched *s, struct sched_pipe *q,
    const char *tenant, int shard, const char *topic, int n, int64_t ttr_ms,
    int own_ttr)
{
	return sched_st_reserve_append_h(s, q, tenant, shard, topic, n,
	    ttr_ms, own_ttr, NULL);
}

enum sched_err
sched_st_reserve_reply_h(struct sched *s, redisContext *c, redisReply *r,
    const char *tenant, int shard, const char *topic, int n, int64_t ttr_ms,
    int own_ttr, struct sched_job ***jobs, size_t *njobs,
    struct sched_heads_in *h, int *broken)
{
	enum sched_err e;

	*jobs = NULL;
	*njobs = 0;
	if (h != NULL)
		h->n = -1;
	if (noscript(r))
		return sched_st_reserve_h(s, c, tenant, shard, topic, n, ttr_ms,
		    own_ttr, jobs, njobs, h, broken);
	if ((e = reply_ok(c, r, broken, SCRIPT_RESERVE)) != SCHED_OK)
		return e;
	return reserve_parse(r, tenant, shard, jobs, njobs, h);
}

enum sched_err
sched_st_reserve_reply(struct sched *s, redisContext *c, redisReply *r,
    const char *tenant, int shard, const char *topic, int n, int64_t ttr_ms,
    int own_ttr, struct sched_job ***jobs, size_t *njobs, int *broken)
{
	return sched_st_reserve_reply_h(s, c, r, tenant, shard, topic, n,
	    ttr_ms, own_ttr, jobs, njobs, NULL, broken);
}

/*
 * The arguments of finish.lua after "now": topic and tag, then 6 per job
 * (att.data until buf_free(&att)).
 */
struct finish_args {
	char		 idk[SCHED_IDKEY_MAX], next[24], tag[SCHED_KEY_MAX];
	const char	*args[8];
	size_t		 lens[8];
	struct buf	 att;
};

static int
finish_args(struct sched *s, struct finish_args *fa,
    const struct sched_job *job, const char *token, enum sched_verdict_x v,
    int64_t next_ms, const struct sched_attempt *attempt, int expire_only)
{
	static const char *const verdicts[] = {
		[SCHED_V_DONE] = "done", [SCHED_V_RETRY] = "retry",
		[SCHED_V_DEAD] = "dead", [SCHED_V_RELEASE] = "release",
	};
	size_t idklen;
	int i;

	if (sched_idkey(job->id, fa->idk, &idklen) == -1)
		return -1;
	buf_init(&fa->att, 4096);
	if (v != SCHED_V_RELEASE)
		sched_attempt_encode(attempt, sched_now_ms(s), &fa->att);
	lld(fa->next, next_ms);
	sched_tag(fa->tag, job->tenant, job->shard);
	fa->args[0] = job->topic;
	fa->args[1] = fa->tag;
	fa->args[2] = fa->idk;
	fa->args[3] = token;
	fa->args[4] = verdicts[v];
	fa->args[5] = fa->next;
	fa->args[6] = fa->att.data != NULL ? fa->att.data : "";
	fa->args[7] = expire_only ? "1" : "0";
	for (i = 0; i < 8; i++)
		fa->lens[i] = strlen(fa->args[i]);
	fa->lens[2] = idklen;
	fa->lens[6] = fa->att.len;
	return 0;
}

/*
 * Element i of finish's reply (one job's three): its error, state and
 * version.
 */
static enum sched_err
finish_el(const redisReply *r, size_t i, struct sched_fin_out *out)
{
	long long code, st, ver;

	if (el_int(r, 3 * i, &code) == -1)
		return SCHED_EINTERNAL;
	if (code == SCHED_R_NOTYET)
		return SCHED_ECONFLICT;
	if (code != SCHED_R_OK)
		return code_err(code);
	if (el_int(r, 3 * i + 1, &st) == -1 ||
	    el_int(r, 3 * i + 2, &ver) == -1)
		return SCHED_EINTERNAL;
	out->to = (enum sched_state)st;
	out->version = ver;
	return SCHED_OK;
}

enum sched_err
sched_st_finish(struct sched *s, redisContext *c, const struct sched_job *job,
    const char *token, enum sched_verdict_x v, int64_t next_ms,
    const struct sched_attempt *attempt, int expire_only,
    struct sched_fin_out *out, int *broken)
{
	struct finish_args fa;
	redisReply *r = NULL;
	enum sched_err e;

	if (finish_args(s, &fa, job, token, v, next_ms, attempt,
	    expire_only) == -1)
		return SCHED_EINVAL;
	e = run(s, c, SCRIPT_FINISH, job->tenant, job->shard, "jfdhxzcbart",
	    job->topic, 8, fa.args, fa.lens, &r, broken);
	buf_free(&fa.att);
	if (e != SCHED_OK)
		return e;
	e = finish_el(r, 0, out);
	freeReplyObject(r);
	return e;
}

int
sched_st_finish_many_append(struct sched *s, struct sched_pipe *q,
    const struct sched_fin *f, size_t n)
{
	struct finish_args *fa;
	const char **args;
	size_t *lens, i, k;
	int rc = -1;

	if (n == 0)
		return -1;
	fa = xcalloc(n, sizeof(*fa));
	args = xcalloc(2 + 6 * n, sizeof(*args));
	lens = xcalloc(2 + 6 * n, sizeof(*lens));
	for (i = 0; i < n; i++) {
		if (finish_args(s, &fa[i], f[i].job, f[i].token, f[i].v,
		    f[i].next_ms, f[i].attempt, 0) == -1) {
			n = i;
			goto out;
		}
		for (k = 0; k < 6; k++) {
			args[2 + 6 * i + k] = fa[i].args[2 + k];
			lens[2 + 6 * i + k] = fa[i].lens[2 + k];
		}
	}
	for (k = 0; k < 2; k++) {
		args[k] = fa[0].args[k];
		lens[k] = fa[0].lens[k];
	}
	rc = append(s, q, SCRIPT_FINISH, f[0].job->tenant, f[0].job->shard,
	    "jfdhxzcbart", f[0].job->topic, (int)(2 + 6 * n), args, lens);
out:
	for (i = 0; i < n; i++)
		buf_free(&fa[i].att);
	free(fa);
	free(args);
	free(lens);
	return rc;
}

enum sched_err
sched_st_finish_many_reply(redisContext *c, redisReply *r, size_t n,
    enum sched_err *errs, struct sched_fin_out *out, int *broken)
{
	enum sched_err e;
	size_t i;

	if (noscript(r))
		return SCHED_ENOTFOUND;
	if ((e = reply_ok(c, r, broken, SCRIPT_FINISH)) != SCHED_OK)
		return e;
	if (r->elements != 3 * n) {
		freeReplyObject(r);
		return SCHED_EINTERNAL;
	}
	for (i = 0; i < n; i++)
		errs[i] = finish_el(r, i, &out[i]);
	freeReplyObject(r);
	return SCHED_OK;
}

enum sched_err
sched_st_restore(struct sched *s, redisContext *c, const struct sched_job *job,
    const char *rec, size_t reclen, int *created, int *broken)
{
	char idk[SCHED_IDKEY_MAX], tag[SCHED_KEY_MAX];
	const char *args[3];
	size_t lens[3], idklen;
	redisReply *r = NULL;
	enum sched_err e;
	long long code;

	if (sched_idkey(job->id, idk, &idklen) == -1)
		return SCHED_EINVAL;
	sched_tag(tag, job->tenant, job->shard);
	args[0] = idk;
	lens[0] = idklen;
	args[1] = rec;
	lens[1] = reclen;
	args[2] = tag;
	lens[2] = strlen(tag);
	e = run(s, c, SCRIPT_RESTORE, job->tenant, job->shard, "jdhrtxzcb",
	    job->topic, 3, args, lens, &r, broken);
	if (e != SCHED_OK)
		return e;
	if (el_int(r, 0, &code) == -1)
		e = SCHED_EINTERNAL;
	else
		*created = code == 1 ? 1 : code == 2 ? -1 : 0;
	freeReplyObject(r);
	return e;
}

enum sched_err
sched_st_redrive_peek(struct sched *s, redisContext *c, const char *tenant,
    int shard, const char *topic, int64_t at, const char *after,
    size_t afterlen, struct sched_job ***jobs, size_t *njobs, int64_t *total,
    int64_t *seen, int *broken)
{
	char batch[24], from[24], tag[SCHED_KEY_MAX];
	const char *args[6];
	size_t lens[6], i, n = 0;
	struct sched_job **out = NULL, *job;
	redisReply *r = NULL;
	enum sched_err e;
	long long t, l;

	*jobs = NULL;
	*njobs = 0;
	lld(batch, sched_batch(s));
	lld(from, at);
	sched_tag(tag, tenant, shard);
	args[0] = topic;
	args[1] = tag;
	args[2] = "p";
	args[3] = batch;
	args[4] = from;
	for (i = 0; i < 5; i++)
		lens[i] = strlen(args[i]);
	args[5] = after != NULL ? after : "";
	lens[5] = after != NULL ? afterlen : 0;
	e = run(s, c, SCRIPT_REDRIVE, tenant, shard, "jxdhcb", topic, 6, args,
	    lens, &r, broken);
	if (e != SCHED_OK)
		return e;
	if (el_int(r, 0, &t) == -1 || el_int(r, 1, &l) == -1) {
		e = SCHED_EINTERNAL;
		goto out;
	}
	*total = t;
	*seen = l;
	out = xcalloc(r->elements / 2 + 1, sizeof(*out));
	for (i = 2; i + 1 < r->elements; i += 2)
		if ((job = el_job(r, i, tenant, shard, 0)) != NULL)
			out[n++] = job;
	*jobs = out;
	*njobs = n;
out:
	freeReplyObject(r);
	return e;
}

enum sched_err
sched_st_redrive(struct sched *s, redisContext *c, const char *tenant,
    int shard, const char *topic, int one, struct sched_job *const *jobs,
    const int64_t *waits_ms, size_t n, struct sched_redrive *res,
    int *broken)
{
	char idk[SCHED_IDKEY_MAX], tag[SCHED_KEY_MAX];
	const char *args[4];
	size_t lens[4], idklen, i;
	const redisReply *k;
	redisReply *r = NULL;
	struct sched_job *job;
	struct buf packed;
	enum sched_err e;
	long long moved, skipped;

	memset(res, 0, sizeof(*res));
	if (one && n != 1)
		return SCHED_EINVAL;
	/* Per job: its id key (I2 length, bytes) and its wait (I6). */
	buf_init(&packed, n * (2 + SCHED_IDKEY_MAX + 6) + 1);
	for (i = 0; i < n; i++) {
		if (sched_idkey(jobs[i]->id, idk, &idklen) == -1 ||
		    waits_ms[i] < 0 || waits_ms[i] > WAIT_MAX) {
			if (one) {
				buf_free(&packed);
				return SCHED_ENOTFOUND;
			}
			continue;
		}
		(void)sched_put_str(&packed, idk, idklen, 2);
		(void)sched_put_be(&packed, (uint64_t)waits_ms[i], 6);
	}
	sched_tag(tag, tenant, shard);
	args[0] = topic;
	lens[0] = strlen(topic);
	args[1] = tag;
	lens[1] = strlen(tag);
	args[2] = one ? "o" : "a";
	lens[2] = 1;
	args[3] = packed.len > 0 ? packed.data : "";
	lens[3] = packed.len;
	e = run(s, c, SCRIPT_REDRIVE, tenant, shard, "jxdhcb", topic, 4, args,
	    lens, &r, broken);
	buf_free(&packed);
	if (e != SCHED_OK)
		return e;
	if ((e = el_status(r, &moved)) != SCHED_OK)
		goto out;
	if (el_int(r, 1, &skipped) == -1) {
		e = SCHED_EINTERNAL;
		goto out;
	}
	res->moved = moved;
	res->skipped = skipped;
	if ((k = el_str(r, 2)) != NULL && k->len <= sizeof(res->last)) {
		memcpy(res->last, k->str, k->len);
		res->lastlen = k->len;
	}
	if ((k = el_str(r, 3)) != NULL && k->len > 0 &&
	    sched_idkey_text(k->str, k->len, res->holder) == -1)
		res->holder[0] = '\0';
	for (i = 4; i + 1 < r->elements; i += 2) {
		if ((job = el_job(r, i, tenant, shard, 0)) == NULL)
			continue;
		sched_transition(s, job, SCHED_DEAD, SCHED_SCHEDULED, NULL);
		sched_job_free(job);
	}
out:
	freeReplyObject(r);
	return e;
}

enum sched_err
sched_st_purge(struct sched *s, redisContext *c, const char *tenant,
    int shard, int *n, int *more, int *broken)
{
	char ret[24], batch[24];
	const char *args[2];
	redisReply *r = NULL;
	enum sched_err e;
	long long a, b;

	lld(ret, s->cfg.retention_ms);
	lld(batch, sched_batch(s));
	args[0] = ret;
	args[1] = batch;
	e = run(s, c, SCRIPT_PURGE, tenant, shard, "jzca", NULL, 2, args, NULL,
	    &r, broken);
	if (e != SCHED_OK)
		return e;
	if (el_int(r, 0, &a) == -1 || el_int(r, 1, &b) == -1) {
		e = SCHED_EINTERNAL;
	} else {
		*n = (int)a;
		*more = (int)b;
	}
	freeReplyObject(r);
	return e;
}

enum sched_err
sched_st_drop(struct sched *s, redisContext *c, const char *tenant,
    int shard, const char *topic, char set, int64_t *at, int64_t *left,
    int64_t *n, int *broken)
{
	char batch[24], idx[24], names[16];
	const char *args[4];
	redisReply *r = NULL;
	struct sched_job *job;
	enum sched_err e;
	long long l, next;
	size_t i;

	lld(batch, sched_batch(s));
	lld(idx, set != '\0' ? *at : 0);
	if (set != '\0')
		snprintf(names, sizeof(names), "jcba%c", set);
	else
		snprintf(names, sizeof(names), "jcbadhrtx");
	args[0] = topic;
	args[1] = batch;
	args[2] = set != '\0' ? "s" : "w";
	args[3] = idx;
	e = run(s, c, SCRIPT_DROP, tenant, shard, names, topic, 4, args, NULL,
	    &r, broken);
	if (e != SCHED_OK)
		return e;
	if (el_int(r, 0, &l) == -1 || el_int(r, 1, &next) == -1) {
		e = SCHED_EINTERNAL;
		goto out;
	}
	*left = l;
	if (set != '\0')
		*at = next;
	for (i = 2; i + 1 < r->elements; i += 2) {
		if ((job = el_job(r, i, tenant, shard, 0)) == NULL)
			continue;
		(*n)++;
		sched_transition(s, job, job->state, SCHED_CANCELLED, NULL);
		sched_job_free(job);
	}
out:
	freeReplyObject(r);
	return e;
}
