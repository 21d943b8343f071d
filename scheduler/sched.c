/*
 * sched.c - the public API of the Redis delay core (sched.h): life cycle,
 * ids and shards, and the job operations the REST API and the dispatcher
 * call, each on a pooled connection.
 *
 * Key decision: what happens after an attempt is decided here, in C, by the
 * pure schedules module (the job's own schedule, else its topic's), and
 * applied by one fenced script (store.c, finish.lua): the script refuses a
 * token that is not the current reservation's, so a late ack, a redelivery
 * and an expiry racing for one job resolve exactly once.  Every state change
 * this module makes is reported to the transition hook after the script
 * succeeded, never before.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/sched_batch.h"
#include "scheduler/sched_int.h"
#include "util/clock.h"
#include "util/crypto.h"
#include "util/log.h"
#include "util/strutil.h"
#include "util/xmalloc.h"

#define DEFAULT_SHARDS		16
#define DEFAULT_BATCH		100
#define DEFAULT_SWEEP_MS	1000
#define DEFAULT_LEASE_MS	5000
#define DEFAULT_TIMEOUT_MS	2000
#define DEFAULT_RETENTION_MS	(7 * 24 * 3600 * INT64_C(1000))
#define DEFAULT_TTR_MS		30000
#define POOL_IDLE		32
#define RECORD_MAX		(64 * 1024 * 1024)
#define REDRIVE_CALLS_MAX	100000

static const char *const state_names[SCHED_NSTATES] = {
	"scheduled", "ready", "in_flight", "retrying", "delivered", "dead",
	"cancelled",
};

const char *
sched_strerror(enum sched_err e)
{
	switch (e) {
	case SCHED_OK:
		return "ok";
	case SCHED_ENOTFOUND:
		return "no such job";
	case SCHED_ECONFLICT:
		return "the job's state forbids it";
	case SCHED_ESTALE:
		return "the token is not the current reservation's";
	case SCHED_EUNAVAIL:
		return "Redis is unavailable";
	case SCHED_EINVAL:
		return "invalid argument";
	case SCHED_EINTERNAL:
		return "internal error";
	case SCHED_EFULL:
		return "Redis is out of memory (maxmemory)";
	case SCHED_EAGAIN:
		return "the job's topic cannot be read now (Redis is owed its "
		    "rebuild or unreachable, and the journal cannot tell)";
	}
	return "unknown error";
}

const char *
sched_state_name(enum sched_state s)
{
	if ((int)s < 0 || s >= SCHED_NSTATES)
		return "unknown";
	return state_names[s];
}

int
sched_state_parse(const char *s)
{
	int i;

	for (i = 0; s != NULL && i < SCHED_NSTATES; i++)
		if (strcmp(s, state_names[i]) == 0)
			return i;
	return -1;
}

void
sched_transition(struct sched *s, const struct sched_job *job,
    enum sched_state from, enum sched_state to, const struct sched_attempt *a)
{
	/* Released here: a pull reserve must look at the shard again. */
	if (to == SCHED_READY && job->tenant != NULL && job->topic != NULL)
		sched_heads_forget(s, job->tenant, job->shard, job->topic);
	if (s->hooks.transition != NULL)
		s->hooks.transition(job, from, to, a, s->hooks.arg);
}

/* ---- life cycle --------------------------------------------------------- */

struct sched *
sched_new(const struct sched_config *cfg, const struct sched_hooks *hooks,
    char *why, size_t whylen)
{
	struct sched *s;
	struct redis_target t[SCHED_SEEDS_MAX];
	unsigned char rnd[4];
	char hex[9];
	int nt;

	if ((nt = sched_redis_seeds_parse(cfg->redis_url, t, SCHED_SEEDS_MAX,
	    why, whylen)) == -1)
		return NULL;
	if (cfg->shards < 0 || cfg->shards > ID_MAX_SHARD + 1) {
		snprintf(why, whylen, "scheduler.shards must be 1..%d",
		    ID_MAX_SHARD + 1);
		return NULL;
	}
	if (cfg->batch < 0 || cfg->batch > SCHED_BATCH_MAX ||
	    cfg->sweep_ms < 0 ||
	    cfg->lease_ms < 0 || cfg->retention_ms < 0 ||
	    cfg->redis_timeout_ms < 0) {
		snprintf(why, whylen, "a scheduler setting is out of range");
		return NULL;
	}
	s = xcalloc(1, sizeof(*s));
	s->cfg = *cfg;
	s->cfg.redis_url = xstrdup(cfg->redis_url);
	s->cfg.instance = xstrdup(cfg->instance != NULL &&
	    cfg->instance[0] != '\0' ? cfg->instance : "retryd");
	if (s->cfg.shards == 0)
		s->cfg.shards = DEFAULT_SHARDS;
	if (s->cfg.batch == 0)
		s->cfg.batch = DEFAULT_BATCH;
	if (s->cfg.sweep_ms == 0)
		s->cfg.sweep_ms = DEFAULT_SWEEP_MS;
	if (s->cfg.lease_ms == 0)
		s->cfg.lease_ms = DEFAULT_LEASE_MS;
	if (s->cfg.redis_timeout_ms == 0)
		s->cfg.redis_timeout_ms = DEFAULT_TIMEOUT_MS;
	if (s->cfg.retention_ms == 0)
		s->cfg.retention_ms = DEFAULT_RETENTION_MS;
	if (hooks != NULL)
		s->hooks = *hooks;
	s->target = t[0];
	s->pool = sched_pool_new(t, nt, s->cfg.redis_timeout_ms, POOL_IDLE);
	s->scripts = sched_scripts_new(s->pool);
	if (random_bytes(rnd, sizeof(rnd)) == -1)
		memset(rnd, 0, sizeof(rnd));
	hex_encode(rnd, sizeof(rnd), hex);
	snprintf(s->holder, sizeof(s->holder), "%.160s/%s", s->cfg.instance,
	    hex);
	s->node_salt = (int)(rnd[0] << 8 | rnd[1]);
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->node_lock, NULL);
	s->heads = sched_heads_new(s->cfg.shards);
	s->heads_ttl_us = SCHED_HEADS_TTL_US;
	clock_cond_init(&s->cond);
	s->owned = xcalloc((size_t)s->cfg.shards, 1);
	s->schema_ok = -1;
	s->node = -1;
	s->sub_fd[0] = s->sub_fd[1] = -1;
	snprintf(s->why, sizeof(s->why), "not connected to Redis yet");
	return s;
}

int
sched_start(struct sched *s)
{
	return sched_timer_start(s);
}

int
sched_ready(struct sched *s, char *why, size_t whylen)
{
	int ok;

	pthread_mutex_lock(&s->lock);
	ok = s->redis_ok && s->schema_ok == 1;
	if (!ok && why != NULL && whylen > 0)
		snprintf(why, whylen, "%s", s->why[0] != '\0' ? s->why :
		    "Redis is unavailable");
	pthread_mutex_unlock(&s->lock);
	return ok;
}

void
sched_quiesce(struct sched *s)
{
	pthread_mutex_lock(&s->lock);
	s->quiesced = 1;
	pthread_mutex_unlock(&s->lock);
}

void
sched_set_batch(struct sched *s, int batch)
{
	if (batch >= 1 && batch <= SCHED_BATCH_MAX)
		__atomic_store_n(&s->cfg.batch, batch, __ATOMIC_RELAXED);
}

void
sched_stop(struct sched *s)
{
	sched_timer_stop(s);
}

void
sched_abandon(struct sched *s)
{
	pthread_mutex_lock(&s->lock);
	s->abandon = 1;
	pthread_mutex_unlock(&s->lock);
	sched_timer_stop(s);
}

void
sched_free(struct sched *s)
{
	if (s == NULL)
		return;
	sched_timer_stop(s);
	sched_tenants_free(s);
	sched_pool_free(s->pool);
	sched_scripts_free(s->scripts);
	free(s->owned);
	free((char *)s->cfg.redis_url);
	free((char *)s->cfg.instance);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->node_lock);
	pthread_mutex_destroy(&s->lock);
	sched_heads_free(s->heads);
	free(s);
}

uint64_t
sched_passes(struct sched *s)
{
	return __atomic_load_n(&s->passes, __ATOMIC_ACQUIRE);
}

int
sched_owned_shards(struct sched *s)
{
	return __atomic_load_n(&s->nowned, __ATOMIC_RELAXED);
}

struct sched_pool *
sched_pool(struct sched *s)
{
	return s->pool;
}

/* ---- connections -------------------------------------------------------- */

/* A pooled connection on a Redis whose schema is known (and node). */
static redisContext *
take(struct sched *s, int need_node, enum sched_err *e)
{
	redisContext *c;
	int sok, node, broken = 0;

	pthread_mutex_lock(&s->lock);
	sok = s->schema_ok;
	node = s->node;
	pthread_mutex_unlock(&s->lock);
	*e = SCHED_EUNAVAIL;
	if (sok == 0)
		return NULL;
	if ((c = sched_pool_get(s->pool)) == NULL)
		return NULL;
	if ((sok == -1 && sched_schema_check(s, c, 0, &broken) == -1) ||
	    (need_node && node < 0 && sched_node_ensure(s, c, &broken) == -1)) {
		sched_pool_put(s->pool, c, broken);
		return NULL;
	}
	*e = SCHED_OK;
	return c;
}

static void
give(struct sched *s, redisContext *c, int broken)
{
	sched_pool_put(s->pool, c, broken);
}

/* Adds tenant to rd:tenants once per process (and again after a loss). */
static void
register_tenant(struct sched *s, redisContext *c, const char *tenant,
    int *broken)
{
	struct sched_tenant *t = sched_tenant_get(s, tenant);
	redisReply *r;
	uint64_t gen;
	int done;

	pthread_mutex_lock(&s->lock);
	gen = s->registered_gen;
	done = t->registered_gen == gen;
	pthread_mutex_unlock(&s->lock);
	if (done)
		return;
	r = sched_pool_command(s->pool, c, broken, "rd:tenants",
	    "SADD rd:tenants %s", tenant);
	if (r != NULL && r->type == REDIS_REPLY_INTEGER) {
		pthread_mutex_lock(&s->lock);
		t->registered_gen = gen;
		pthread_mutex_unlock(&s->lock);
	} else {
		(void)sched_reply_err(c, r, broken, "SADD");
	}
	if (r != NULL)
		freeReplyObject(r);
}

/* ---- ids and shards ----------------------------------------------------- */

/*
 * A job pushed alone without a bizkey takes the shard of its time: every
 * SCHED_STICKY_MS the next one (offset by the instance's node number).
 * Lone pushes that arrive together then share a shard, so the pushes that
 * one commit or one pusher takes together are one push_many call instead
 * of one per shard (most of a single push's Redis time was that call's
 * fixed cost), while over 16 spans every shard gets its turn: Kafka's
 * sticky partitioner, by time.  A batch's jobs go in runs of
 * SCHED_RUN_JOBS (64) consecutive jobs, run k on the shard k after the one
 * of the batch's time: they are pushed together anyway (one call per shard
 * of up to scheduler.batch jobs), jobs pushed together tend to fall due
 * together (a day's reminders, in order), so a run's deliveries share the
 * promote, reserve and finish calls of one shard instead of one call per
 * job on 16 shards; and a large batch still covers every shard evenly (a
 * whole batch on one shard left the shards uneven, their hash tables
 * doubling at different sizes).  A bizkey picks its own shard (its
 * deduplication lives there).  Ids made otherwise (sched_new_id without a
 * bizkey) spread by a hash of the id.
 */
#define SCHED_STICKY_MS	4

static int
crc_shard(const struct sched *s, const char *p, size_t n)
{
	return (int)(crc32_update(0, p, n) % (uint32_t)s->cfg.shards);
}

int
sched_shard_of(struct sched *s, const char *id)
{
	struct id_parts p;

	if (id_parse(id, &p) == 0 && (int)p.shard < s->cfg.shards)
		return (int)p.shard;
	return crc_shard(s, id, strlen(id));
}

int
sched_shard_for(struct sched *s, const char *bizkey, const char *id)
{
	if (bizkey != NULL && bizkey[0] != '\0')
		return crc_shard(s, bizkey, strlen(bizkey));
	return sched_shard_of(s, id);
}

/*
 * A new id: its shard the bizkey's, else the one of its time (alone), else
 * run i / SCHED_RUN_JOBS after *base (run != NULL), else a hash of the id.
 */
static void
new_id(struct sched *s, const char *bizkey, int alone, const size_t *run,
    int *base, char out[ID_LEN + 1])
{
	struct id_parts p;
	redisContext *c;
	enum sched_err e;
	char tmp[ID_LEN + 1];
	uint64_t sh;
	int node;

	pthread_mutex_lock(&s->lock);
	node = s->node;
	pthread_mutex_unlock(&s->lock);
	if (node < 0 && (c = take(s, 1, &e)) != NULL)
		give(s, c, 0);
	id_generate(0, clock_wall_ms(), tmp);
	(void)id_parse(tmp, &p);
	if (bizkey != NULL && bizkey[0] != '\0')
		p.shard = (uint32_t)crc_shard(s, bizkey, strlen(bizkey));
	else if (alone || run != NULL) {
		sh = ((uint64_t)p.ms / SCHED_STICKY_MS + p.node) %
		    (uint64_t)s->cfg.shards;
		if (run != NULL) {
			if (*base < 0)
				*base = (int)sh;
			sh = ((uint64_t)*base + *run / SCHED_RUN_JOBS) %
			    (uint64_t)s->cfg.shards;
		}
		p.shard = (uint32_t)sh;
	} else
		p.shard = (uint32_t)crc_shard(s, tmp, ID_LEN - 2);
	id_format(&p, out);
}

void
sched_new_id(struct sched *s, const char *bizkey, char out[ID_LEN + 1])
{
	new_id(s, bizkey, 0, NULL, NULL, out);
}

void
sched_new_id_alone(struct sched *s, char out[ID_LEN + 1])
{
	new_id(s, NULL, 1, NULL, NULL, out);
}

void
sched_new_id_run(struct sched *s, size_t i, int *base, char out[ID_LEN + 1])
{
	new_id(s, NULL, 0, &i, base, out);
}

/* The shard a push goes to: a generated id's own, else its bizkey's. */
static int
push_shard(struct sched *s, const char *bizkey, const char *id)
{
	struct id_parts p;

	if (id_parse(id, &p) == 0 && (int)p.shard < s->cfg.shards)
		return (int)p.shard;
	return sched_shard_for(s, bizkey, id);
}

/* ---- jobs --------------------------------------------------------------- */

/*
 * The answer to push p whose client-given id names job: that job,
 * deduplicated, or SCHED_ECONFLICT when it is another topic's.
 */
static enum sched_err
client_id_answer(const struct sched_push *p, const struct sched_job *job,
    struct sched_push_result *res)
{
	if (strcmp(job->topic, p->topic) != 0)
		return SCHED_ECONFLICT;
	str_copy(res->id, sizeof(res->id), job->id);
	res->deduplicated = 1;
	res->run_at_ms = job->due_ms;
	res->state = job->state;
	return SCHED_OK;
}

/*
 * A client-given id may already name a job in another shard (pushed before
 * with another bizkey): that job is the answer (ENOTFOUND when none).
 */
static enum sched_err
client_id_exists(struct sched *s, redisContext *c, const struct sched_push *p,
    struct sched_push_result *res, int *broken)
{
	struct sched_job *job = NULL;
	enum sched_err e;

	e = sched_q_job(s, c, p->tenant, p->id, 0, &job, broken);
	if (e != SCHED_OK)
		return e;
	e = client_id_answer(p, job, res);
	sched_job_free(job);
	return e;
}

/*
 * A push's job and packed record (rec: buf_init'ed by the caller); *gen: 1
 * for a generated id.  SCHED_EINVAL for a bad push.
 */
static enum sched_err
push_prepare(struct sched *s, const struct sched_push *p,
    struct sched_job *job, struct buf *rec, int *gen)
{
	struct id_parts ip;
	const char *biz;

	biz = p->bizkey != NULL && p->bizkey[0] != '\0' ? p->bizkey : NULL;
	if (!sched_valid_tenant(p->tenant) || !sched_valid_topic(p->topic) ||
	    p->id == NULL || (biz != NULL && strlen(biz) > SCHED_BIZKEY_MAX) ||
	    (p->body == NULL && p->body_len > 0) || p->body_len > RECORD_MAX)
		return SCHED_EINVAL;
	*gen = id_parse(p->id, &ip) == 0;
	if (!*gen && !sched_valid_client_id(p->id))
		return SCHED_EINVAL;

	memset(job, 0, sizeof(*job));
	str_copy(job->id, sizeof(job->id), p->id);
	job->topic = (char *)p->topic;
	job->tenant = (char *)p->tenant;
	job->bizkey = (char *)biz;
	job->state = SCHED_SCHEDULED;
	job->due_ms = p->run_at_ms;
	job->created_ms = p->created_ms > 0 ? p->created_ms :
	    *gen ? ip.ms : sched_now_ms(s);
	job->priority = p->priority;
	job->body = (char *)p->body;
	job->body_len = p->body_len;
	job->headers_json = (char *)p->headers_json;
	job->schedule = (char *)p->schedule;
	job->ttr_ms = p->ttr_ms;
	job->shard = push_shard(s, biz, p->id);
	if (sched_rec_encode(job, rec) == -1)
		return SCHED_EINVAL;
	return SCHED_OK;
}

#define PUSH_REC_MAX	(RECORD_MAX + 2 * 65536 + 1024)

enum sched_err
sched_push(struct sched *s, const struct sched_push *p,
    struct sched_push_result *res)
{
	struct sched_job job;
	redisContext *c;
	struct buf rec;
	enum sched_err e;
	int broken = 0, generated;

	memset(res, 0, sizeof(*res));
	buf_init(&rec, PUSH_REC_MAX);
	if ((e = push_prepare(s, p, &job, &rec, &generated)) != SCHED_OK)
		goto out;
	if ((c = take(s, generated, &e)) == NULL)
		goto out;
	if (!generated && (e = client_id_exists(s, c, p, res,
	    &broken)) != SCHED_ENOTFOUND) {
		give(s, c, broken);
		goto out;
	}
	e = sched_st_push(s, c, job.shard, p, rec.data, rec.len, res,
	    &broken);
	if (e == SCHED_OK && !broken)
		register_tenant(s, c, p->tenant, &broken);
	give(s, c, broken);
	if (e == SCHED_OK && !res->deduplicated)
		sched_transition(s, &job, SCHED_NSTATES, SCHED_SCHEDULED,
		    NULL);
out:
	buf_free(&rec);
	return e;
}

/* ---- many jobs at once -------------------------------------------------- */

/* Bytes of records per push_many call, besides scheduler.batch jobs. */
#define PUSH_MANY_BYTES	(1024 * 1024)

struct pm_job {
	struct sched_job	 job;
	struct buf		 rec;
	char			 idk[SCHED_IDKEY_MAX];
	int			 generated;
	size_t			 i;		/* in the caller's arrays */
};

struct pm_call {
	size_t			 first, n;	/* in the sorted items */
	int			 resend;	/* NOSCRIPT: send again */
};

static int
pm_cmp(const void *a, const void *b)
{
	const struct pm_job *x = *(struct pm_job *const *)a;
	const struct pm_job *y = *(struct pm_job *const *)b;
	int d;

	if (x->job.shard != y->job.shard)
		return x->job.shard < y->job.shard ? -1 : 1;
	if ((d = strcmp(x->job.tenant, y->job.tenant)) != 0 ||
	    (d = strcmp(x->job.topic, y->job.topic)) != 0)
		return d;
	return x->i < y->i ? -1 : x->i > y->i;
}

static int
pm_same_call(const struct pm_job *x, const struct pm_job *y)
{
	return x->job.shard == y->job.shard &&
	    strcmp(x->job.tenant, y->job.tenant) == 0 &&
	    strcmp(x->job.topic, y->job.topic) == 0;
}

/* Cuts the sorted jobs into calls: one shard and topic, bounded. */
static size_t
pm_calls(struct sched *s, struct pm_job **v, size_t n, struct pm_call *calls)
{
	size_t i, nc = 0, bytes = 0, lim;

	lim = (size_t)sched_batch(s);
	for (i = 0; i < n; i++) {
		if (i == 0 || !pm_same_call(v[i - 1], v[i]) ||
		    calls[nc - 1].n >= lim ||
		    bytes + v[i]->rec.len > PUSH_MANY_BYTES) {
			calls[nc].first = i;
			calls[nc].n = 0;
			calls[nc].resend = 0;
			nc++;
			bytes = 0;
		}
		calls[nc - 1].n++;
		bytes += v[i]->rec.len;
	}
	return nc;
}

static int
pm_append(struct sched *s, struct sched_pipe *q, struct pm_job **v,
    struct sched_push_item *it, const struct pm_call *k)
{
	const struct pm_job *j = v[k->first];

	return sched_st_push_many_append(s, q, j->job.tenant, j->job.shard,
	    j->job.topic, it + k->first, k->n);
}

static void
pm_fail(struct sched_push_item *it, const struct pm_call *k, enum sched_err e)
{
	size_t i;

	for (i = 0; i < k->n; i++)
		it[k->first + i].err = e;
}

/*
 * Sends the calls in one pipeline and reads their replies; a call that met
 * NOSCRIPT is sent once more after loading the script.
 */
static void
pm_run(struct sched *s, redisContext *c, struct pm_job **v,
    struct sched_push_item *it, struct pm_call *calls, size_t nc,
    int *broken)
{
	struct sched_pipe *q;
	redisReply *r;
	enum sched_err e;
	size_t k, sent = 0, again = 0;
	int round;

	for (round = 0; round < 2; round++) {
		if (sched_st_push_many_prepare(s, c, round, broken) == -1) {
			for (k = 0; k < nc; k++)
				if (round == 0 || calls[k].resend)
					pm_fail(it, &calls[k], SCHED_EUNAVAIL);
			return;
		}
		/* On a cluster, one pipeline per node. */
		q = sched_pipe_new(s->pool, c);
		for (k = sent = 0; k < nc; k++) {
			if (round == 1 && !calls[k].resend)
				continue;
			if (pm_append(s, q, v, it, &calls[k]) == -1)
				break;
			sent = k + 1;
		}
		for (k = 0; k < nc; k++) {
			if (round == 1 && !calls[k].resend)
				continue;
			calls[k].resend = 0;
			if (k >= sent || *broken ||
			    sched_pipe_getreply(q, (void **)&r) != REDIS_OK) {
				if (k < sent && !*broken)
					(void)sched_reply_err(c, NULL, broken,
					    "push_many");
				pm_fail(it, &calls[k], SCHED_EUNAVAIL);
				continue;
			}
			e = sched_st_push_many_reply(c, r, it + calls[k].first,
			    calls[k].n, broken);
			if (e == SCHED_ESTALE && round == 0) {
				calls[k].resend = 1;
				again++;
			} else if (e != SCHED_OK)
				pm_fail(it, &calls[k], e == SCHED_ESTALE ?
				    SCHED_EINTERNAL : e);
		}
		sched_pipe_free(q);
		if (again == 0 || *broken)
			return;
	}
}

/*
 * The jobs with client-given ids among jobs[0..n): such an id may name a
 * job in another shard (pushed with a bizkey), which is then the answer
 * (or SCHED_ECONFLICT when it is another topic's), as sched_push() answers
 * one; all are looked up in one sched_get_many().  The others are pushed
 * with the rest (appended to v), where push_many.lua answers an id its own
 * shard has.
 */
static void
pm_clients(struct sched *s, const struct sched_push *p, struct pm_job *jobs,
    size_t n, struct sched_push_result *res, enum sched_err *err,
    struct pm_job **v, size_t *nv)
{
	struct sched_job **out;
	const char **tv, **iv;
	enum sched_err e;
	size_t i, k, nc;

	for (i = nc = 0; i < n; i++)
		nc += err[i] == SCHED_OK && !jobs[i].generated;
	if (nc == 0)
		return;
	tv = xcalloc(nc, sizeof(*tv));
	iv = xcalloc(nc, sizeof(*iv));
	out = xcalloc(nc, sizeof(*out));
	for (i = k = 0; i < n; i++)
		if (err[i] == SCHED_OK && !jobs[i].generated) {
			tv[k] = p[i].tenant;
			iv[k++] = p[i].id;
		}
	e = sched_get_many(s, tv, iv, nc, out);
	for (i = k = 0; i < n; i++) {
		if (err[i] != SCHED_OK || jobs[i].generated)
			continue;
		if (e != SCHED_OK)
			err[i] = e;
		else if (out[k] == NULL)
			v[(*nv)++] = &jobs[i];
		else
			err[i] = client_id_answer(&p[i], out[k], &res[i]);
		sched_job_free(out[k++]);
	}
	free(out);
	free(iv);
	free(tv);
}

void
sched_push_many(struct sched *s, const struct sched_push *p, size_t n,
    struct sched_push_result *res, enum sched_err *err)
{
	struct pm_job *jobs, **v;
	struct sched_push_item *it;
	struct pm_call *calls;
	redisContext *c;
	enum sched_err e = SCHED_EUNAVAIL;
	size_t i, nv = 0, nc;
	int broken = 0;

	if (n == 0)
		return;
	jobs = xcalloc(n, sizeof(*jobs));
	v = xcalloc(n, sizeof(*v));
	for (i = 0; i < n; i++) {
		memset(&res[i], 0, sizeof(res[i]));
		jobs[i].i = i;
		buf_init(&jobs[i].rec, PUSH_REC_MAX);
		err[i] = push_prepare(s, &p[i], &jobs[i].job, &jobs[i].rec,
		    &jobs[i].generated);
		if (err[i] == SCHED_OK && jobs[i].generated)
			v[nv++] = &jobs[i];
	}
	pm_clients(s, p, jobs, n, res, err, v, &nv);
	qsort(v, nv, sizeof(*v), pm_cmp);
	it = xcalloc(nv > 0 ? nv : 1, sizeof(*it));
	calls = xcalloc(nv > 0 ? nv : 1, sizeof(*calls));
	for (i = 0; i < nv; i++) {
		size_t idklen;

		(void)sched_idkey(v[i]->job.id, v[i]->idk, &idklen);
		it[i].id = v[i]->job.id;
		it[i].due_ms = v[i]->job.due_ms;
		it[i].idk = v[i]->idk;
		it[i].idklen = idklen;
		it[i].rec = v[i]->rec.data;
		it[i].reclen = v[i]->rec.len;
		it[i].res = &res[v[i]->i];
		it[i].err = SCHED_EINTERNAL;
	}
	nc = pm_calls(s, v, nv, calls);
	if (nv > 0 && (c = take(s, 1, &e)) != NULL) {
		pm_run(s, c, v, it, calls, nc, &broken);
		for (i = 0; i < nv && !broken; i++)
			if (it[i].err == SCHED_OK && (i == 0 ||
			    strcmp(v[i]->job.tenant, v[i - 1]->job.tenant)))
				register_tenant(s, c, v[i]->job.tenant,
				    &broken);
		give(s, c, broken);
	} else
		for (i = 0; i < nv; i++)
			it[i].err = e;
	for (i = 0; i < nv; i++) {
		err[v[i]->i] = it[i].err;
		if (it[i].err == SCHED_OK && !it[i].res->deduplicated)
			sched_transition(s, &v[i]->job, SCHED_NSTATES,
			    SCHED_SCHEDULED, NULL);
	}
	for (i = 0; i < n; i++)
		buf_free(&jobs[i].rec);
	free(calls);
	free(it);
	free(v);
	free(jobs);
}

enum sched_err
sched_get(struct sched *s, const char *tenant, const char *id,
    struct sched_job **out)
{
	redisContext *c;
	enum sched_err e;
	int broken = 0;

	*out = NULL;
	if ((c = take(s, 0, &e)) == NULL)
		return e;
	e = sched_q_job(s, c, tenant, id, 1, out, &broken);
	give(s, c, broken);
	return e;
}

enum sched_err
sched_get_many(struct sched *s, const char *const *tenants,
    const char *const *ids, size_t n, struct sched_job **out)
{
	redisContext *c;
	enum sched_err e;
	size_t i;
	int broken = 0;

	for (i = 0; i < n; i++)
		out[i] = NULL;
	if (n == 0)
		return SCHED_OK;
	if ((c = take(s, 0, &e)) == NULL)
		return e;
	e = sched_q_jobs(s, c, tenants, ids, n, out, &broken);
	give(s, c, broken);
	return e;
}

/* Cancels the job (already read); transition reported. */
static enum sched_err
cancel_job(struct sched *s, redisContext *c, const struct sched_job *job,
    int *broken)
{
	char idk[SCHED_IDKEY_MAX];
	struct sched_job *after = NULL;
	enum sched_state from;
	enum sched_err e;
	size_t idklen;

	if (sched_idkey(job->id, idk, &idklen) == -1)
		return SCHED_ENOTFOUND;
	e = sched_st_cancel(s, c, job->tenant, job->shard, idk, idklen,
	    job->topic, &after, &from, broken);
	if (e == SCHED_OK && after != NULL)
		sched_transition(s, after, from, SCHED_CANCELLED, NULL);
	sched_job_free(after);
	return e;
}

enum sched_err
sched_cancel(struct sched *s, const char *tenant, const char *id)
{
	struct sched_job *job = NULL;
	redisContext *c;
	enum sched_err e;
	int broken = 0;

	if ((c = take(s, 0, &e)) == NULL)
		return e;
	e = sched_q_job(s, c, tenant, id, 0, &job, &broken);
	if (e == SCHED_OK)
		e = cancel_job(s, c, job, &broken);
	give(s, c, broken);
	sched_job_free(job);
	return e;
}

enum sched_err
sched_find_bizkeys(struct sched *s, const char *tenant, const char *topic,
    const char *const *bizkeys, size_t n, struct sched_push_result *res,
    int *found)
{
	redisContext *c;
	enum sched_err e;
	int broken = 0;

	memset(found, 0, n * sizeof(*found));
	if (!sched_valid_tenant(tenant) || !sched_valid_topic(topic))
		return SCHED_EINVAL;
	if (n == 0)
		return SCHED_OK;
	if ((c = take(s, 0, &e)) == NULL)
		return e;
	e = sched_q_bizkeys(s, c, tenant, topic, bizkeys, n, res, found,
	    &broken);
	give(s, c, broken);
	return e;
}

enum sched_err
sched_cancel_bizkey(struct sched *s, const char *tenant, const char *topic,
    const char *bizkey, char id_out[ID_LEN + 65])
{
	char idk[SCHED_IDKEY_MAX], text[SCHED_IDTEXT_MAX];
	struct sched_job *job = NULL;
	redisContext *c;
	enum sched_err e;
	size_t idklen;
	int broken = 0, shard;

	if (!sched_valid_tenant(tenant) || !sched_valid_topic(topic) ||
	    bizkey == NULL || bizkey[0] == '\0' ||
	    strlen(bizkey) > SCHED_BIZKEY_MAX)
		return SCHED_ENOTFOUND;
	if ((c = take(s, 0, &e)) == NULL)
		return e;
	shard = sched_shard_for(s, bizkey, NULL);
	e = sched_q_bizkey(s, c, tenant, shard, topic, bizkey, idk, &idklen,
	    &broken);
	if (e == SCHED_OK && sched_idkey_text(idk, idklen, text) == -1)
		e = SCHED_EINTERNAL;
	if (e == SCHED_OK)
		e = sched_q_job(s, c, tenant, text, 0, &job, &broken);
	if (e == SCHED_OK) {
		e = cancel_job(s, c, job, &broken);
		if (e == SCHED_ECONFLICT)
			e = SCHED_ENOTFOUND;	/* finished: none unfinished */
		if (e == SCHED_OK && id_out != NULL)
			snprintf(id_out, ID_LEN + 65, "%s", text);
	}
	give(s, c, broken);
	sched_job_free(job);
	return e;
}

/* ---- dropping a deleted topic's or tenant's jobs ------------------------ */

/*
 * The topic's jobs leave one shard: its own sets until empty, then a walk
 * of the in-flight set and (finished) of the finished set for its members.
 * Topic "" (walks only): every topic's.
 */
static enum sched_err
drop_shard(struct sched *s, redisContext *c, const char *tenant, int shard,
    const char *topic, int waiting, int finished, int64_t *n, int *broken)
{
	char sets[3];
	int64_t at, left;
	enum sched_err e = SCHED_OK;
	size_t i, nsets = 0;

	if (waiting)
		sets[nsets++] = '\0';
	sets[nsets++] = 'f';
	if (finished)
		sets[nsets++] = 'z';
	for (i = 0; i < nsets && e == SCHED_OK; i++) {
		at = 0;
		do
			e = sched_st_drop(s, c, tenant, shard, topic, sets[i],
			    &at, &left, n, broken);
		while (e == SCHED_OK && left > 0);
	}
	if (topic[0] != '\0')
		sched_heads_forget(s, tenant, shard, topic);
	return e;
}

enum sched_err
sched_drop_topic(struct sched *s, const char *tenant, const char *topic,
    int64_t *n)
{
	redisContext *c;
	enum sched_err e;
	int broken = 0, shard;

	*n = 0;
	if (!sched_valid_tenant(tenant) || !sched_valid_topic(topic))
		return SCHED_EINVAL;
	if ((c = take(s, 0, &e)) == NULL)
		return e;
	for (shard = 0; shard < s->cfg.shards && e == SCHED_OK; shard++)
		e = drop_shard(s, c, tenant, shard, topic, 1, 1, n, &broken);
	give(s, c, broken);
	return e;
}

/* Adds the topic of each element of r (a "TOPIC:N" field when cut). */
static void
topics_add(const redisReply *r, int cut, char ***v, size_t *nv)
{
	const char *colon;
	char *t;
	size_t i, k, len;

	if (r == NULL || r->type != REDIS_REPLY_ARRAY)
		return;
	for (i = 0; i < r->elements; i++) {
		if (r->element[i]->type != REDIS_REPLY_STRING)
			continue;
		len = r->element[i]->len;
		if (cut && (colon = memrchr(r->element[i]->str, ':', len)) !=
		    NULL)
			len = (size_t)(colon - r->element[i]->str);
		t = xstrndup(r->element[i]->str, len);
		for (k = 0; k < *nv; k++)
			if (strcmp((*v)[k], t) == 0)
				break;
		if (k < *nv || !sched_valid_topic(t)) {
			free(t);
			continue;
		}
		*v = xreallocarray(*v, *nv + 1, sizeof(**v));
		(*v)[(*nv)++] = t;
	}
}

/*
 * The topics with jobs in the shard: those counted, with delays, with
 * ready jobs.
 */
static enum sched_err
shard_topics(struct sched *s, redisContext *c, const char *tenant, int shard,
    char ***v, size_t *nv, int *broken)
{
	static const struct {
		const char	*cmd, *suffix, *arg[2];
		int		 nargs, cut;
	} q[] = {
		{ "HKEYS", "c", { NULL, NULL }, 0, 1 },
		{ "ZRANGE", "h", { "0", "-1" }, 2, 0 },
		{ "SMEMBERS", "rt", { NULL, NULL }, 0, 0 },
	};
	char key[SCHED_KEY_MAX];
	const char *argv[4];
	size_t lens[4], i;
	redisReply *r;
	enum sched_err e = SCHED_OK;
	int a;

	for (i = 0; i < sizeof(q) / sizeof(q[0]) && e == SCHED_OK; i++) {
		sched_key(key, tenant, shard, q[i].suffix, NULL);
		argv[0] = q[i].cmd;
		argv[1] = key;
		for (a = 0; a < q[i].nargs; a++)
			argv[2 + a] = q[i].arg[a];
		for (a = 0; a < 2 + q[i].nargs; a++)
			lens[a] = strlen(argv[a]);
		r = sched_pool_command_argv(s->pool, c, broken, key, lens[1],
		    2 + q[i].nargs, argv, lens);
		if (r == NULL || r->type != REDIS_REPLY_ARRAY)
			e = sched_reply_err(c, r, broken, q[i].cmd);
		else
			topics_add(r, q[i].cut, v, nv);
		if (r != NULL)
			freeReplyObject(r);
	}
	return e;
}

/* Deletes what is left of the tenant's keys of the shard. */
static enum sched_err
shard_unlink(struct sched *s, redisContext *c, const char *tenant, int shard,
    int *broken)
{
	static const char *const suffix[] = {
		"j", "h", "rt", "f", "z", "b", "c", "a"
	};
	char keys[8][SCHED_KEY_MAX];
	const char *argv[9];
	size_t lens[9], i;
	redisReply *r;
	enum sched_err e = SCHED_OK;

	argv[0] = "UNLINK";
	lens[0] = 6;
	for (i = 0; i < 8; i++) {
		sched_key(keys[i], tenant, shard, suffix[i], NULL);
		argv[i + 1] = keys[i];
		lens[i + 1] = strlen(keys[i]);
	}
	r = sched_pool_command_argv(s->pool, c, broken, keys[0], lens[1], 9,
	    argv, lens);
	if (r == NULL || r->type != REDIS_REPLY_INTEGER)
		e = sched_reply_err(c, r, broken, "UNLINK");
	if (r != NULL)
		freeReplyObject(r);
	return e;
}

enum sched_err
sched_drop_tenant(struct sched *s, const char *tenant, int64_t *n)
{
	redisContext *c;
	enum sched_err e;
	char **v = NULL;
	size_t nv = 0, i;
	int broken = 0, shard;

	*n = 0;
	if (!sched_valid_tenant(tenant))
		return SCHED_EINVAL;
	if ((c = take(s, 0, &e)) == NULL)
		return e;
	for (shard = 0; shard < s->cfg.shards && e == SCHED_OK; shard++) {
		e = shard_topics(s, c, tenant, shard, &v, &nv, &broken);
		for (i = 0; i < nv && e == SCHED_OK; i++)
			e = drop_shard(s, c, tenant, shard, v[i], 1, 0, n,
			    &broken);
		if (e == SCHED_OK)
			e = drop_shard(s, c, tenant, shard, "", 0, 0, n,
			    &broken);
		if (e == SCHED_OK)
			e = shard_unlink(s, c, tenant, shard, &broken);
		for (i = 0; i < nv; i++)
			free(v[i]);
		free(v);
		v = NULL;
		nv = 0;
	}
	give(s, c, broken);
	return e;
}

enum sched_err
sched_reschedule(struct sched *s, const char *tenant, const char *id,
    int64_t run_at_ms)
{
	char idk[SCHED_IDKEY_MAX];
	struct sched_job *job = NULL, *after = NULL;
	redisContext *c;
	enum sched_err e;
	size_t idklen;
	int broken = 0;

	if (run_at_ms < 0 || run_at_ms >= (INT64_C(1) << 42))
		return SCHED_EINVAL;
	if ((c = take(s, 0, &e)) == NULL)
		return e;
	e = sched_q_job(s, c, tenant, id, 0, &job, &broken);
	if (e == SCHED_OK && sched_idkey(job->id, idk, &idklen) == -1)
		e = SCHED_ENOTFOUND;
	if (e == SCHED_OK)
		e = sched_st_reschedule(s, c, tenant, job->shard, idk, idklen,
		    job->topic, run_at_ms, &after, &broken);
	give(s, c, broken);
	if (e == SCHED_OK && after != NULL)
		sched_transition(s, after, after->state, after->state, NULL);
	sched_job_free(after);
	sched_job_free(job);
	return e;
}

/* Reserved jobs in the ready sets' order: higher priority, then due. */
static int
reserved_cmp(const void *a, const void *b)
{
	const struct sched_job *x = *(struct sched_job *const *)a;
	const struct sched_job *y = *(struct sched_job *const *)b;

	if (x->priority != y->priority)
		return x->priority > y->priority ? -1 : 1;
	if (x->due_ms != y->due_ms)
		return x->due_ms < y->due_ms ? -1 : 1;
	return x->shard - y->shard;
}

/*
 * One reserve call per shard with per[shard] > 0, in one pipeline (one by
 * one when the pipeline cannot be prepared); the jobs are added to out[]
 * (*got of n); *shortfall when a shard gave fewer than asked.
 */
static enum sched_err
reserve_shards(struct sched *s, redisContext *c, const char *tenant,
    const char *topic, int64_t ttr_ms, const int *per, const uint64_t *gen,
    int m, struct sched_job **out, size_t n, size_t *got, int *shortfall,
    int *broken)
{
	struct sched_job **jobs;
	struct sched_pipe *q = NULL;
	struct sched_heads_in hi;
	redisReply **r;
	enum sched_err e = SCHED_OK, e1;
	size_t njobs, i;
	double score[SCHED_HEADS_MAX];
	char *sent;
	void *rep;
	int k, ns = s->cfg.shards;

	*shortfall = 0;
	hi.want = m;
	hi.score = score;
	r = xcalloc((size_t)ns, sizeof(*r));
	sent = xcalloc((size_t)ns, 1);
	if (sched_st_pipe_prepare(s, c, broken) == 0) {
		q = sched_pipe_new(s->pool, c);
		for (k = 0; k < ns; k++)
			sent[k] = per[k] > 0 && sched_st_reserve_append_h(s,
			    q, tenant, k, topic, per[k], ttr_ms, 1, &hi) == 0;
		/* Every reply first: a NOSCRIPT is run again below. */
		for (k = 0; k < ns; k++) {
			if (!sent[k])
				continue;
			if (sched_pipe_getreply(q, &rep) != REDIS_OK) {
				*broken = 1;
				break;
			}
			r[k] = rep;
		}
	}
	for (k = 0; k < ns && !*broken; k++) {
		if (per[k] == 0)
			continue;
		if (sent[k])
			e1 = sched_st_reserve_reply_h(s, c, r[k], tenant, k,
			    topic, per[k], ttr_ms, 1, &jobs, &njobs, &hi,
			    broken);
		else
			e1 = sched_st_reserve_h(s, c, tenant, k, topic,
			    per[k], ttr_ms, 1, &jobs, &njobs, &hi, broken);
		r[k] = NULL;	/* freed by _reply */
		if (e1 != SCHED_OK)
			e = e1;
		/* The shard as the reserve left it, or not known. */
		if (e1 == SCHED_OK && hi.n >= 0)
			sched_heads_learn(s, tenant, topic, k, gen[k], score,
			    hi.n, hi.n == hi.want);
		else
			sched_heads_forget(s, tenant, k, topic);
		for (i = 0; i < njobs; i++) {
			if (*got < n)
				out[(*got)++] = jobs[i];
			else
				sched_job_free(jobs[i]);
		}
		free(jobs);
		if (njobs < (size_t)per[k])
			*shortfall = 1;
	}
	if (*broken)
		e = SCHED_EUNAVAIL;
	for (k = 0; k < ns; k++)
		if (r[k] != NULL)
			freeReplyObject(r[k]);
	sched_pipe_free(q);
	free(sent);
	free(r);
	return e;
}

/*
 * Finds which shards hold the n best ready jobs (from what it knows of
 * them, heads.c, reading the shards it does not know) and reserves that
 * many from each; a shard that gives fewer (another reserve took them
 * meanwhile: then every shard is read again), or a shard known to fewer
 * jobs than it gave (reserve.lua tells the next ones), makes one more pass
 * over what is left, up to RESERVE_PASSES.
 */
#define RESERVE_PASSES	4

enum sched_err
sched_reserve_many(struct sched *s, const char *tenant, const char *topic,
    int64_t ttr_ms, size_t n, struct sched_job **out, size_t *nout)
{
	struct sched_topic_info info;
	redisContext *c;
	enum sched_err e = SCHED_OK;
	size_t got = 0, i;
	uint64_t *gen;
	int *per, pass, shortfall, more, m, broken = 0;

	*nout = 0;
	if (!sched_valid_tenant(tenant) || !sched_valid_topic(topic))
		return SCHED_EINVAL;
	if (ttr_ms <= 0) {
		ttr_ms = DEFAULT_TTR_MS;
		if (s->hooks.topic_info != NULL && s->hooks.topic_info(tenant,
		    topic, &info, s->hooks.arg) == 0 && info.ttr_ms > 0)
			ttr_ms = info.ttr_ms;
	}
	if ((c = take(s, 0, &e)) == NULL)
		return e;
	per = xcalloc((size_t)s->cfg.shards, sizeof(*per));
	gen = xcalloc((size_t)s->cfg.shards, sizeof(*gen));
	shortfall = 0;
	for (pass = 0; e == SCHED_OK && got < n && pass < RESERVE_PASSES;
	    pass++) {
		/* What came up short is read again; the rest is known. */
		e = sched_q_ready_take(s, c, tenant, topic, n - got,
		    shortfall, per, gen, &m, &more, &broken);
		if (e != SCHED_OK)
			break;
		e = reserve_shards(s, c, tenant, topic, ttr_ms, per, gen, m,
		    out, n, &got, &shortfall, &broken);
		if (!shortfall && !more)
			break;
	}
	give(s, c, broken);
	free(gen);
	free(per);
	if (got > 0)
		e = SCHED_OK;	/* what was reserved is the caller's */
	else if (e == SCHED_OK)
		e = SCHED_ENOTFOUND;
	qsort(out, got, sizeof(*out), reserved_cmp);
	for (i = 0; i < got; i++)
		sched_transition(s, out[i], SCHED_READY, SCHED_IN_FLIGHT, NULL);
	*nout = got;
	return e;
}

enum sched_err
sched_reserve(struct sched *s, const char *tenant, const char *topic,
    int64_t ttr_ms, struct sched_job **out)
{
	size_t n;

	*out = NULL;
	return sched_reserve_many(s, tenant, topic, ttr_ms, 1, out, &n);
}

/* Whether the job's topic is a push topic (its dispatch capacity). */
static int
is_push(struct sched *s, const struct sched_job *job)
{
	struct sched_topic_info info;

	return s->hooks.topic_info != NULL && s->hooks.topic_info(job->tenant,
	    job->topic, &info, s->hooks.arg) == 0 && info.push;
}

/*
 * The schedule of a topic: 0 with *rs; -1 when the topic is gone; -2 when
 * it cannot be told now (Redis lost its data and is not rebuilt yet, or is
 * unreachable, with nothing cached) and, with recall, topic_recall()
 * cannot tell either.
 */
static int
topic_schedule(struct sched *s, const char *tenant, const char *topic,
    int recall, struct retry_schedule *rs)
{
	struct sched_topic_info info;
	int r = -1;

	if (s->hooks.topic_info != NULL)
		r = s->hooks.topic_info(tenant, topic, &info, s->hooks.arg);
	if (r == -2 && recall && s->hooks.topic_recall != NULL)
		r = s->hooks.topic_recall(tenant, topic, &info, s->hooks.arg);
	if (r == 0)
		*rs = info.schedule;
	return r == 0 || r == -2 ? r : -1;
}

/*
 * The schedule a failed attempt follows: the job's own, else its topic's
 * (topic_schedule()'s answers).
 */
static int
failed_schedule(struct sched *s, const struct sched_job *job, int recall,
    struct retry_schedule *rs)
{
	if (job->schedule != NULL && schedule_parse(job->schedule,
	    strlen(job->schedule), 0, rs, NULL) == 0)
		return 0;
	return topic_schedule(s, job->tenant, job->topic, recall, rs);
}

/*
 * What to do after an attempt: the decision and its verdict.  A retry
 * waits from the end of the attempt, not from when its outcome is applied
 * (the reporter may have queued it a while): the end as the dispatcher
 * stamped it when the transfer completed (rounded up, so never before the
 * answer), on Redis time, and never later than now (with the fake clock,
 * which stands still, that is now).  Start plus latency is not used: curl's
 * latency leaves out the time a transfer waited to start, which made
 * retries come early.  A failure whose schedule cannot be read now is not
 * decided (-1): the job is not made dead for a topic that is only not back
 * yet; it stays in flight, and its expired deadline decides it later.
 * recall: topic_recall() may be asked.
 */
static int
decide(struct sched *s, const struct sched_job *job,
    const struct schedule_outcome *outcome,
    const struct sched_attempt *attempt, int recall,
    struct schedule_decision *d, enum sched_verdict_x *v, int64_t *now_out)
{
	struct retry_schedule rs;
	int64_t now = sched_now_ms(s), end;
	int r;

	if (attempt != NULL && attempt->end_ms > 0) {
		end = attempt->end_ms + (now - clock_wall_ms());
		if (end < now)
			now = end;
	}
	*now_out = now;
	if (outcome->kind == SCHEDULE_OK) {
		d->verdict = SCHEDULE_DONE;
		d->next_ms = 0;
		d->reason = "ok";
	} else if ((r = failed_schedule(s, job, recall, &rs)) == 0) {
		*d = schedule_decide(&rs, job->attempts + 1, outcome, now,
		    s->cfg.retry_after_cap_ms);
	} else if (r == -2) {
		return -1;
	} else {
		d->verdict = SCHEDULE_DEAD;
		d->next_ms = 0;
		d->reason = "the topic is gone";
	}
	switch (d->verdict) {
	case SCHEDULE_DONE:
		*v = SCHED_V_DONE;
		break;
	case SCHEDULE_RETRY:
		*v = SCHED_V_RETRY;
		break;
	default:
		*v = SCHED_V_DEAD;
		break;
	}
	return 0;
}

/* The job after its outcome was applied (to): logged and reported. */
static void
applied(struct sched *s, struct sched_job *job,
    const struct schedule_outcome *outcome,
    const struct schedule_decision *d, enum sched_verdict_x v,
    enum sched_state to, const struct sched_attempt *attempt)
{
	struct log_obj lo;

	job->attempts++;
	job->state = to;
	if (v == SCHED_V_RETRY)
		job->due_ms = d->next_ms;
	job->token[0] = '\0';
	job->deadline_ms = 0;
	lo.tenant = job->tenant;
	lo.topic = job->topic;
	lo.job = job->id;
	lo.attempt = job->attempts;
	log_obj(LOG_LVL_DEBUG, &lo, "attempt %s: %s (%s)",
	    schedule_outcome_name(outcome->kind), sched_state_name(to),
	    d->reason != NULL ? d->reason : "");
	sched_transition(s, job, SCHED_IN_FLIGHT, to, attempt);
}

/* The attempt to log: the caller's, else one made up at now. */
static const struct sched_attempt *
attempt_or(const struct sched_attempt *attempt,
    const struct schedule_outcome *outcome, int64_t now,
    struct sched_attempt *synth)
{
	if (attempt != NULL)
		return attempt;
	memset(synth, 0, sizeof(*synth));
	synth->at_ms = now;
	if (outcome->kind != SCHEDULE_OK)
		synth->error = (char *)schedule_outcome_name(outcome->kind);
	return synth;
}

enum sched_err
sched_apply(struct sched *s, redisContext *c, struct sched_job *job,
    const char *token, const struct schedule_outcome *outcome,
    const struct sched_attempt *attempt, int expire_only,
    struct schedule_decision *decision, int *broken)
{
	struct schedule_decision d;
	struct sched_attempt synth;
	struct sched_fin_out fo;
	enum sched_verdict_x v;
	enum sched_err e;
	int64_t now;

	if (decide(s, job, outcome, attempt, !expire_only, &d, &v,
	    &now) == -1)
		return SCHED_EAGAIN;
	attempt = attempt_or(attempt, outcome, now, &synth);
	e = sched_st_finish(s, c, job, token, v, d.next_ms, attempt,
	    expire_only, &fo, broken);
	if (e != SCHED_OK)
		return e;
	if (decision != NULL)
		*decision = d;
	job->version = fo.version;
	applied(s, job, outcome, &d, v, fo.to, attempt);
	if (is_push(s, job))
		sched_timer_wake(s, 1);
	return SCHED_OK;
}

/* Reads the job and checks its reservation. */
static enum sched_err
reserved_job(struct sched *s, redisContext *c, const char *tenant,
    const char *id, const char *token, struct sched_job **job, int *broken)
{
	enum sched_err e;

	if (token == NULL || strlen(token) != SCHED_TOKEN_LEN)
		return SCHED_ESTALE;
	e = sched_q_job(s, c, tenant, id, 0, job, broken);
	if (e != SCHED_OK)
		return e;
	if ((*job)->state != SCHED_IN_FLIGHT ||
	    strcmp((*job)->token, token) != 0)
		return SCHED_ESTALE;
	return SCHED_OK;
}

enum sched_err
sched_report(struct sched *s, const char *tenant, const char *id,
    const char *token, const struct schedule_outcome *outcome,
    const struct sched_attempt *attempt, struct schedule_decision *decision)
{
	struct sched_job *job = NULL;
	redisContext *c;
	enum sched_err e;
	int broken = 0;

	if (outcome == NULL)
		return SCHED_EINVAL;
	if ((c = take(s, 0, &e)) == NULL)
		return e;
	e = reserved_job(s, c, tenant, id, token, &job, &broken);
	if (e == SCHED_OK)
		e = sched_apply(s, c, job, token, outcome, attempt, 0,
		    decision, &broken);
	give(s, c, broken);
	sched_job_free(job);
	return e;
}

/* One outcome of a batch on its way through sched_report_many(). */
struct many {
	struct sched_job		*job;
	const struct sched_attempt	*att;
	struct sched_attempt		 synth;
	struct schedule_decision	 d;
	enum sched_verdict_x		 v;
	redisReply			*r;
	int				 step;	/* enum below */
	int				 borrowed;	/* job is v[i].job */
};

/* M_KNOWN: the caller gave the job, nothing to read. */
enum { M_DONE, M_READ, M_KNOWN, M_FINISH, M_SLOW };

/* Appends the read of each item's record; step M_READ when sent. */
static void
many_read(struct sched *s, struct sched_pipe *q, struct sched_report_item *v,
    struct many *m, size_t n)
{
	char idk[SCHED_IDKEY_MAX], kj[SCHED_KEY_MAX];
	size_t i, idklen;

	for (i = 0; i < n; i++) {
		if (v[i].token == NULL ||
		    strlen(v[i].token) != SCHED_TOKEN_LEN) {
			v[i].err = SCHED_ESTALE;
			continue;
		}
		if (!sched_valid_tenant(v[i].tenant) ||
		    sched_idkey(v[i].id, idk, &idklen) == -1) {
			m[i].step = M_SLOW;	/* its own error there */
			continue;
		}
		if (v[i].job != NULL && v[i].job->state == SCHED_IN_FLIGHT &&
		    strcmp(v[i].job->token, v[i].token) == 0 &&
		    strcmp(v[i].job->tenant, v[i].tenant) == 0 &&
		    strcmp(v[i].job->id, v[i].id) == 0) {
			m[i].job = v[i].job;
			m[i].borrowed = 1;
			m[i].step = M_KNOWN;
			continue;
		}
		sched_key(kj, v[i].tenant, sched_shard_of(s, v[i].id), "j",
		    NULL);
		if (sched_pipe_append(q, kj, "HGET %s %b", kj, idk,
		    idklen) == -1) {
			m[i].step = M_SLOW;
			continue;
		}
		m[i].step = M_READ;
	}
}

/* Reads the replies of the items at step; -1 with *broken. */
static int
many_replies(struct sched_pipe *q, struct sched_report_item *v,
    struct many *m, size_t n, int step, int *broken)
{
	void *rep;
	size_t i;

	for (i = 0; i < n; i++) {
		if (m[i].step != step)
			continue;
		if (sched_pipe_getreply(q, &rep) != REDIS_OK) {
			*broken = 1;
			for (; i < n; i++)
				if (m[i].step == step) {
					v[i].err = SCHED_EUNAVAIL;
					m[i].step = M_DONE;
				}
			return -1;
		}
		m[i].r = rep;
	}
	return 0;
}

/* Decides item i's verdict; step M_FINISH (M_DONE: not decided now). */
static void
many_decide(struct sched *s, struct sched_report_item *v, struct many *m,
    size_t i)
{
	int64_t now;

	if (v[i].release) {
		m[i].v = SCHED_V_RELEASE;
		m[i].att = NULL;
	} else if (decide(s, m[i].job, &v[i].outcome, v[i].attempt, 1,
	    &m[i].d, &m[i].v, &now) == -1) {
		v[i].err = SCHED_EAGAIN;
		m[i].step = M_DONE;
		return;
	} else {
		m[i].att = attempt_or(v[i].attempt, &v[i].outcome, now,
		    &m[i].synth);
	}
	m[i].step = M_FINISH;
}

/* Checks each record read (or given) and decides; step M_FINISH. */
static void
many_finish(struct sched *s, redisContext *c, struct sched_report_item *v,
    struct many *m, size_t n, int *broken)
{
	char idk[SCHED_IDKEY_MAX];
	redisReply *r;
	size_t i, idklen;

	for (i = 0; i < n; i++) {
		if (m[i].step == M_KNOWN) {
			many_decide(s, v, m, i);
			continue;
		}
		if (m[i].step != M_READ)
			continue;
		r = m[i].r;
		m[i].r = NULL;
		m[i].step = M_DONE;
		if (r->type == REDIS_REPLY_NIL) {
			m[i].step = M_SLOW;	/* a client id elsewhere? */
		} else if (r->type != REDIS_REPLY_STRING) {
			v[i].err = sched_reply_err(c, r, broken, "HGET");
		} else if (sched_idkey(v[i].id, idk, &idklen) == -1 ||
		    (m[i].job = sched_rec_decode(v[i].tenant,
		    sched_shard_of(s, v[i].id), idk, idklen, r->str,
		    r->len)) == NULL) {
			log_warnx("redis: a malformed job record (%s)",
			    v[i].id);
			v[i].err = SCHED_EINTERNAL;
		} else if (m[i].job->state != SCHED_IN_FLIGHT ||
		    strcmp(m[i].job->token, v[i].token) != 0) {
			v[i].err = SCHED_ESTALE;
		} else
			many_decide(s, v, m, i);
		freeReplyObject(r);
	}
}

/* One finish call of a batch: its items, of one tenant, shard and topic. */
struct many_call {
	size_t	*idx;
	size_t	 n;
	int	 sent;
};

static int
same_call(const struct sched_job *a, const struct sched_job *b)
{
	return a->shard == b->shard && strcmp(a->tenant, b->tenant) == 0 &&
	    strcmp(a->topic, b->topic) == 0;
}

/*
 * Groups the items at M_FINISH into one finish call per tenant, shard and
 * topic and appends the calls (an item whose call cannot be appended goes
 * M_SLOW).  Returns the number of calls in mc (n of them at most).
 */
static size_t
many_calls(struct sched *s, struct sched_pipe *q, struct sched_report_item *v,
    struct many *m, size_t n, struct many_call *mc)
{
	struct sched_fin *f = xcalloc(n, sizeof(*f));
	char *taken = xcalloc(n, 1);
	size_t nc = 0, i, j, k;

	for (i = 0; i < n; i++) {
		if (m[i].step != M_FINISH || taken[i])
			continue;
		mc[nc].idx = xcalloc(n - i, sizeof(*mc[nc].idx));
		for (j = i; j < n; j++) {
			if (m[j].step != M_FINISH || taken[j] ||
			    !same_call(m[i].job, m[j].job))
				continue;
			taken[j] = 1;
			k = mc[nc].n++;
			mc[nc].idx[k] = j;
			f[k].job = m[j].job;
			f[k].token = v[j].token;
			f[k].v = m[j].v;
			f[k].next_ms = m[j].d.next_ms;
			f[k].attempt = m[j].att;
		}
		if (sched_st_finish_many_append(s, q, f, mc[nc].n) == 0)
			mc[nc].sent = 1;
		else
			for (k = 0; k < mc[nc].n; k++)
				m[mc[nc].idx[k]].step = M_SLOW;
		nc++;
	}
	free(taken);
	free(f);
	return nc;
}

/* Item i's finish was applied (or refused with err). */
static void
many_applied(struct sched *s, struct sched_report_item *v, struct many *m,
    size_t i, enum sched_err err, const struct sched_fin_out *fo, int *wake)
{
	m[i].step = M_DONE;
	if ((v[i].err = err) != SCHED_OK)
		return;
	m[i].job->version = fo->version;
	if (v[i].release) {
		m[i].job->state = fo->to;
		m[i].job->token[0] = '\0';
		sched_transition(s, m[i].job, SCHED_IN_FLIGHT, fo->to, NULL);
	} else {
		v[i].decision = m[i].d;
		applied(s, m[i].job, &v[i].outcome, &m[i].d, m[i].v, fo->to,
		    m[i].att);
	}
	if (!*wake && is_push(s, m[i].job))
		*wake = 1;
}

/* Reads the replies of the calls sent and applies them to their items. */
static void
many_results(struct sched *s, redisContext *c, struct sched_pipe *q,
    struct sched_report_item *v, struct many *m, struct many_call *mc,
    size_t nc, int *broken, int *wake)
{
	struct sched_fin_out *fo;
	enum sched_err *errs, e;
	void *rep;
	size_t g, k, i;

	for (g = 0; g < nc; g++) {
		if (!mc[g].sent || *broken)
			continue;	/* M_FINISH: unavailable, below */
		if (sched_pipe_getreply(q, &rep) != REDIS_OK) {
			*broken = 1;
			continue;
		}
		errs = xcalloc(mc[g].n, sizeof(*errs));
		fo = xcalloc(mc[g].n, sizeof(*fo));
		e = sched_st_finish_many_reply(c, rep, mc[g].n, errs, fo,
		    broken);
		for (k = 0; k < mc[g].n; k++) {
			i = mc[g].idx[k];
			if (e == SCHED_ENOTFOUND)
				m[i].step = M_SLOW;	/* NOSCRIPT */
			else if (e != SCHED_OK) {
				m[i].step = M_DONE;
				v[i].err = e;
			} else
				many_applied(s, v, m, i, errs[k], &fo[k],
				    wake);
		}
		free(errs);
		free(fo);
	}
}

void
sched_report_many(struct sched *s, struct sched_report_item *v, size_t n)
{
	struct many_call *mc = NULL;
	struct many *m;
	redisContext *c;
	struct sched_pipe *q1, *q2;
	enum sched_err e;
	size_t i, nc = 0;
	int broken = 0, wake = 0;

	if (n == 0)
		return;
	m = xcalloc(n, sizeof(*m));
	for (i = 0; i < n; i++)
		v[i].err = SCHED_EINTERNAL;
	if ((c = take(s, 0, &e)) == NULL) {
		for (i = 0; i < n; i++)
			v[i].err = e;
		goto out;
	}
	if (sched_st_pipe_prepare(s, c, &broken) == -1) {
		for (i = 0; i < n; i++)
			m[i].step = broken ? M_DONE : M_SLOW;
		for (i = 0; i < n && broken; i++)
			v[i].err = SCHED_EUNAVAIL;
		give(s, c, broken);
		goto slow;
	}
	/* On a cluster each is a pipeline per node. */
	q1 = sched_pipe_new(s->pool, c);
	q2 = sched_pipe_new(s->pool, c);
	many_read(s, q1, v, m, n);
	if (many_replies(q1, v, m, n, M_READ, &broken) == 0) {
		many_finish(s, c, v, m, n, &broken);
		mc = xcalloc(n, sizeof(*mc));
		nc = many_calls(s, q2, v, m, n, mc);
		many_results(s, c, q2, v, m, mc, nc, &broken, &wake);
	}
	sched_pipe_free(q1);
	sched_pipe_free(q2);
	for (i = 0; i < n && broken; i++)
		if (m[i].step == M_READ || m[i].step == M_KNOWN ||
		    m[i].step == M_FINISH)
			v[i].err = SCHED_EUNAVAIL;	/* the link broke */
	give(s, c, broken);
slow:
	for (i = 0; i < n; i++) {
		if (m[i].step != M_SLOW)
			continue;
		if (v[i].release)
			v[i].err = sched_release(s, v[i].tenant, v[i].id,
			    v[i].token);
		else
			v[i].err = sched_report(s, v[i].tenant, v[i].id,
			    v[i].token, &v[i].outcome, v[i].attempt,
			    &v[i].decision);
	}
	if (wake)
		sched_timer_wake(s, 1);
out:
	for (i = 0; i < n; i++) {
		if (!m[i].borrowed)
			sched_job_free(m[i].job);
		if (m[i].r != NULL)
			freeReplyObject(m[i].r);
	}
	for (i = 0; i < nc; i++)
		free(mc[i].idx);
	free(mc);
	free(m);
}

enum sched_err
sched_release(struct sched *s, const char *tenant, const char *id,
    const char *token)
{
	struct sched_job *job = NULL;
	struct sched_fin_out fo;
	redisContext *c;
	enum sched_err e;
	int broken = 0;

	if ((c = take(s, 0, &e)) == NULL)
		return e;
	e = reserved_job(s, c, tenant, id, token, &job, &broken);
	if (e == SCHED_OK)
		e = sched_st_finish(s, c, job, token, SCHED_V_RELEASE, 0, NULL,
		    0, &fo, &broken);
	give(s, c, broken);
	if (e == SCHED_OK) {
		job->state = fo.to;
		job->version = fo.version;
		job->token[0] = '\0';
		sched_transition(s, job, SCHED_IN_FLIGHT, fo.to, NULL);
		if (is_push(s, job))
			sched_timer_wake(s, 1);
	}
	sched_job_free(job);
	return e;
}

/* ---- dead letters ------------------------------------------------------- */

enum sched_err
sched_dead_list(struct sched *s, const char *tenant, const char *topic,
    const char *cursor, size_t limit, struct sched_job ***jobs, size_t *njobs,
    char *next_cursor, size_t next_cursor_len)
{
	redisContext *c;
	enum sched_err e;
	int broken = 0;

	*jobs = NULL;
	*njobs = 0;
	if (!sched_valid_tenant(tenant) || !sched_valid_topic(topic))
		return SCHED_EINVAL;
	if ((c = take(s, 0, &e)) == NULL)
		return e;
	e = sched_q_dead_list(s, c, tenant, topic, cursor, limit, jobs, njobs,
	    next_cursor, next_cursor_len, &broken);
	give(s, c, broken);
	return e;
}

/*
 * How long after its due time a job retried or redriven now makes its
 * first attempt: the first wait of its own schedule, else of topic_rs
 * (NULL: the topic's, read now).  As a push (schedule_first_ms).  0, or
 * topic_schedule()'s -1 or -2.
 */
static int
first_wait(struct sched *s, const struct sched_job *job,
    const struct retry_schedule *topic_rs, int64_t *wait_ms)
{
	struct retry_schedule rs;
	int r;

	if (job->schedule != NULL && schedule_parse(job->schedule,
	    strlen(job->schedule), 0, &rs, NULL) == 0) {
		*wait_ms = schedule_first_ms(&rs, 0);
		return 0;
	}
	if (topic_rs != NULL) {
		*wait_ms = schedule_first_ms(topic_rs, 0);
		return 0;
	}
	if ((r = topic_schedule(s, job->tenant, job->topic, 1, &rs)) == 0)
		*wait_ms = schedule_first_ms(&rs, 0);
	return r;
}

static enum sched_err
schedule_err(int r)
{
	return r == 0 ? SCHED_OK : r == -2 ? SCHED_EAGAIN : SCHED_ENOTFOUND;
}

enum sched_err
sched_retry(struct sched *s, const char *tenant, const char *id,
    char holder[ID_LEN + 65])
{
	struct sched_redrive res;
	struct sched_job *job = NULL;
	redisContext *c;
	enum sched_err e;
	int64_t wait;
	int broken = 0;

	holder[0] = '\0';
	if ((c = take(s, 0, &e)) == NULL)
		return e;
	e = sched_q_job(s, c, tenant, id, 0, &job, &broken);
	if (e == SCHED_OK && job->state != SCHED_DEAD)
		e = SCHED_ECONFLICT;
	if (e == SCHED_OK)
		e = schedule_err(first_wait(s, job, NULL, &wait));
	if (e == SCHED_OK)
		e = sched_st_redrive(s, c, tenant, job->shard, job->topic, 1,
		    &job, &wait, 1, &res, &broken);
	/* Left dead: another unfinished job of its topic has its bizkey. */
	if (e == SCHED_OK && res.moved == 0) {
		e = SCHED_ECONFLICT;
		snprintf(holder, ID_LEN + 65, "%s", res.holder[0] != '\0' ?
		    res.holder : "?");
	}
	give(s, c, broken);
	sched_job_free(job);
	return e;
}

/*
 * One shard's part of a redrive: its dead jobs of the topic a batch at a
 * time, each visited once.  The jobs left dead (their bizkey is held) stay
 * at the front of the dead set, so each batch starts just after the last
 * of them (or, if it left the set meanwhile, after as many as were left);
 * no more jobs are visited than the set held at the start, so jobs that
 * die again meanwhile are not taken twice.
 */
static enum sched_err
redrive_shard(struct sched *s, redisContext *c, const char *tenant,
    int shard, const char *topic, const struct retry_schedule *topic_rs,
    int64_t *count, int64_t *skipped, int *calls, int *broken)
{
	struct sched_redrive res;
	struct sched_job **jobs;
	char after[SCHED_IDKEY_MAX];
	enum sched_err e;
	int64_t *waits, total, seen, visited = 0, limit = -1, kept = 0;
	size_t afterlen = 0, n, use, i;

	do {
		e = sched_st_redrive_peek(s, c, tenant, shard, topic, kept,
		    after, afterlen, &jobs, &n, &total, &seen, broken);
		if (e != SCHED_OK)
			break;
		if (limit < 0)
			limit = total;
		use = (int64_t)n < limit - visited ? n :
		    (size_t)(limit - visited);
		visited += seen;
		waits = xcalloc(use + 1, sizeof(*waits));
		for (i = 0; i < use; i++)
			(void)first_wait(s, jobs[i], topic_rs, &waits[i]);
		memset(&res, 0, sizeof(res));
		if (use > 0)
			e = sched_st_redrive(s, c, tenant, shard, topic, 0,
			    jobs, waits, use, &res, broken);
		free(waits);
		for (i = 0; i < n; i++)
			sched_job_free(jobs[i]);
		free(jobs);
		if (e != SCHED_OK)
			break;
		*count += res.moved;
		*skipped += res.skipped;
		kept += res.skipped;
		if (res.lastlen > 0) {
			memcpy(after, res.last, res.lastlen);
			afterlen = res.lastlen;
		}
	} while (seen > 0 && seen == sched_batch(s) && visited < limit &&
	    ++*calls < REDRIVE_CALLS_MAX);
	return e;
}

enum sched_err
sched_redrive(struct sched *s, const char *tenant, const char *topic,
    int64_t *count, int64_t *skipped)
{
	struct retry_schedule rs;
	redisContext *c;
	enum sched_err e = SCHED_OK;
	int broken = 0, shard, calls = 0;

	*count = *skipped = 0;
	if (!sched_valid_tenant(tenant) || !sched_valid_topic(topic))
		return SCHED_EINVAL;
	/* Read once: every job of the redrive waits as the topic says now. */
	if ((e = schedule_err(topic_schedule(s, tenant, topic, 1, &rs))) !=
	    SCHED_OK)
		return e;
	if ((c = take(s, 0, &e)) == NULL)
		return e;
	for (shard = 0; shard < s->cfg.shards && e == SCHED_OK; shard++)
		e = redrive_shard(s, c, tenant, shard, topic, &rs, count,
		    skipped, &calls, &broken);
	give(s, c, broken);
	return e;
}

enum sched_err
sched_counts(struct sched *s, const char *tenant, const char *topic,
    int64_t counts[SCHED_NSTATES])
{
	redisContext *c;
	enum sched_err e;
	int broken = 0;

	memset(counts, 0, sizeof(int64_t) * SCHED_NSTATES);
	if (!sched_valid_tenant(tenant) ||
	    (topic != NULL && !sched_valid_topic(topic)))
		return SCHED_EINVAL;
	if ((c = take(s, 0, &e)) == NULL)
		return e;
	e = sched_q_counts(s, c, tenant, topic, counts, &broken);
	give(s, c, broken);
	return e;
}

enum sched_err
sched_restore_job(struct sched *s, const struct sched_job *job, int *created)
{
	struct sched_job copy;
	struct id_parts ip;
	redisContext *c;
	struct buf rec;
	enum sched_err e;
	int broken = 0;

	*created = 0;
	if (job == NULL || !sched_valid_tenant(job->tenant) ||
	    !sched_valid_topic(job->topic) || (id_parse(job->id, &ip) != 0 &&
	    !sched_valid_client_id(job->id)) || (int)job->state < 0 ||
	    job->state >= SCHED_NSTATES)
		return SCHED_EINVAL;
	copy = *job;
	copy.attempt_log = NULL;
	copy.nattempt_log = 0;
	if (copy.bizkey != NULL && copy.bizkey[0] == '\0')
		copy.bizkey = NULL;
	/* An attempt in flight when Redis lost it runs again. */
	if (copy.state == SCHED_IN_FLIGHT)
		copy.state = copy.attempts > 0 ? SCHED_RETRYING :
		    SCHED_SCHEDULED;
	copy.shard = push_shard(s, copy.bizkey, copy.id);
	buf_init(&rec, RECORD_MAX + 2 * 65536 + 1024);
	if (sched_rec_encode(&copy, &rec) == -1) {
		buf_free(&rec);
		return SCHED_EINVAL;
	}
	if ((c = take(s, 0, &e)) == NULL)
		goto out;
	e = sched_st_restore(s, c, &copy, rec.data, rec.len, created, &broken);
	/* Not made: the journal's row ends, as a cancel ends a job. */
	if (e == SCHED_OK && *created == -1)
		sched_transition(s, &copy, copy.state, SCHED_CANCELLED, NULL);
	if (e == SCHED_OK && !broken)
		register_tenant(s, c, copy.tenant, &broken);
	give(s, c, broken);
out:
	buf_free(&rec);
	return e;
}

enum sched_err
sched_mark_schema(struct sched *s)
{
	redisContext *c;
	int broken = 0;

	if ((c = sched_pool_get(s->pool)) == NULL)
		return SCHED_EUNAVAIL;
	if (sched_schema_check(s, c, 1, &broken) == -1) {
		give(s, c, broken);
		return broken ? SCHED_EUNAVAIL : SCHED_EINTERNAL;
	}
	give(s, c, broken);
	return SCHED_OK;
}
