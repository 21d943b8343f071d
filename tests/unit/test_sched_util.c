/*
 * test_sched_util.c - what the scheduler's tests share (test_sched.h): the
 * recording hooks, the dispatcher-like worker that reports deliveries,
 * instances made against the test Redis, waiting with deadlines, and
 * pushing many jobs from several threads.
 *
 * Key decision: the hooks only record (under one mutex) and queue; the test
 * or the worker decides what to report, so every test reads as the story
 * of one job.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "scheduler/sched.h"
#include "tests/unit/test_sched.h"
#include "util/clock.h"
#include "util/crypto.h"
#include "util/xmalloc.h"

int64_t
real_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
nap_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

int
wait_for(int (*cond)(void *), void *arg, int64_t deadline_ms)
{
	int64_t end = real_ms() + deadline_ms;

	while (!cond(arg)) {
		if (real_ms() > end)
			return cond(arg);
		nap_ms(1);
	}
	return 1;
}

static int
topic_info(const char *tenant, const char *topic, struct sched_topic_info *out,
    void *arg)
{
	struct tinst *ti = arg;
	const char *sched = NULL;

	(void)tenant;
	memset(out, 0, sizeof(*out));
	out->max_in_flight = 100;
	out->timeout_ms = 1000;
	out->ttr_ms = 1000;
	if (strcmp(topic, "pull") == 0) {
		sched = "<0,0,1s>";
	} else if (strcmp(topic, "push") == 0 ||
	    strcmp(topic, "push2") == 0) {
		out->push = 1;
		sched = "<0,1s,1s>";
	} else if (strcmp(topic, "once") == 0) {
		sched = "<0>";
	} else if (strcmp(topic, "other") == 0) {
		sched = "<0,0>";
	} else if (strcmp(topic, "unsure") == 0 &&
	    __atomic_load_n(&ti->rec->unsure_known, __ATOMIC_RELAXED)) {
		sched = "<0,1m>";
	} else if (strcmp(topic, "unsure") == 0 ||
	    strcmp(topic, "recalled") == 0 ||
	    strcmp(topic, "forgotten") == 0) {
		return -2;	/* cannot tell now: ask topic_recall */
	} else {
		return -1;
	}
	return schedule_parse(sched, strlen(sched), 0, &out->schedule, NULL);
}

/* What the journal would say of the topics topic_info() cannot tell of. */
static int
topic_recall(const char *tenant, const char *topic,
    struct sched_topic_info *out, void *arg)
{
	struct tinst *ti = arg;
	const char *sched = "<0,2m>";

	(void)tenant;
	memset(out, 0, sizeof(*out));
	__atomic_add_fetch(&ti->rec->nrecall, 1, __ATOMIC_RELAXED);
	if (strcmp(topic, "forgotten") == 0)
		return -1;
	if (strcmp(topic, "recalled") != 0)
		return -2;
	out->max_in_flight = 100;
	out->timeout_ms = 1000;
	out->ttr_ms = 1000;
	return schedule_parse(sched, strlen(sched), 0, &out->schedule, NULL);
}

static int
capacity(const char *tenant, const char *topic, void *arg)
{
	struct tinst *ti = arg;
	int cap;

	(void)tenant;
	(void)topic;
	pthread_mutex_lock(&ti->rec->lock);
	cap = ti->rec->capacity < 0 ? 1000 : ti->rec->capacity - ti->inflight;
	pthread_mutex_unlock(&ti->rec->lock);
	return cap;
}

/* The instance's deliveries not yet reported count against the tenant. */
static int
tenant_capacity(const char *tenant, void *arg)
{
	struct tinst *ti = arg;
	int cap;

	(void)tenant;
	pthread_mutex_lock(&ti->rec->lock);
	cap = ti->rec->tenant_capacity < 0 ? INT_MAX :
	    ti->rec->tenant_capacity - ti->inflight;
	pthread_mutex_unlock(&ti->rec->lock);
	return cap;
}

/* Open addressing on the id; grows at half full. */
static int *
count_slot(struct tcount *c, const char *id)
{
	size_t i, cap;

	if (c->cap == 0 || c->n == NULL) {
		c->cap = 1024;
		c->ids = xcalloc(c->cap, sizeof(*c->ids));
		c->n = xcalloc(c->cap, sizeof(*c->n));
	}
	for (;;) {
		i = crc32_update(0, id, strlen(id)) & (c->cap - 1);
		for (cap = 0; cap < c->cap; cap++, i = (i + 1) & (c->cap - 1)) {
			if (c->ids[i][0] == '\0') {
				size_t used = 0, k;

				for (k = 0; k < c->cap; k++)
					used += c->ids[k][0] != '\0';
				if (used * 2 < c->cap) {
					snprintf(c->ids[i], sizeof(c->ids[i]),
					    "%s", id);
					return &c->n[i];
				}
				break;
			}
			if (strcmp(c->ids[i], id) == 0)
				return &c->n[i];
		}
		/* grow */
		{
			struct tcount nc = { NULL, NULL, 0 };
			size_t k;

			nc.cap = c->cap * 2;
			nc.ids = xcalloc(nc.cap, sizeof(*nc.ids));
			nc.n = xcalloc(nc.cap, sizeof(*nc.n));
			for (k = 0; k < c->cap; k++) {
				size_t j;

				if (c->ids[k][0] == '\0')
					continue;
				j = crc32_update(0, c->ids[k],
				    strlen(c->ids[k])) & (nc.cap - 1);
				while (nc.ids[j][0] != '\0')
					j = (j + 1) & (nc.cap - 1);
				memcpy(nc.ids[j], c->ids[k],
				    sizeof(nc.ids[j]));
				nc.n[j] = c->n[k];
			}
			free(c->ids);
			free(c->n);
			*c = nc;
		}
	}
}

static void
deliver(struct sched_job *job, void *arg)
{
	struct tinst *ti = arg;
	struct trec *r = ti->rec;

	pthread_mutex_lock(&r->lock);
	if (clock_wall_ms() < job->due_ms)
		r->early++;
	if (clock_wall_ms() - job->due_ms > r->max_late_ms &&
	    job->attempts == 0)
		r->max_late_ms = clock_wall_ms() - job->due_ms;
	r->ndelivered++;
	(*count_slot(&r->count, job->id))++;
	ti->inflight++;
	if (r->nqueue == r->capqueue) {
		r->capqueue = r->capqueue ? r->capqueue * 2 : 64;
		r->queue = xreallocarray(r->queue, r->capqueue,
		    sizeof(*r->queue));
	}
	r->queue[r->nqueue].job = job;
	r->queue[r->nqueue++].ti = ti;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

static void
ready(const char *tenant, const char *topic, void *arg)
{
	struct tinst *ti = arg;

	(void)tenant;
	(void)topic;
	pthread_mutex_lock(&ti->rec->lock);
	ti->rec->nready++;
	pthread_mutex_unlock(&ti->rec->lock);
}

static void
transition(const struct sched_job *job, enum sched_state from,
    enum sched_state to, const struct sched_attempt *a, void *arg)
{
	struct tinst *ti = arg;

	(void)a;
	pthread_mutex_lock(&ti->rec->lock);
	ti->rec->ntrans[from][to]++;
	if (from < SCHED_NSTATES && to != SCHED_READY &&
	    to != SCHED_IN_FLIGHT) {
		snprintf(ti->rec->jid, sizeof(ti->rec->jid), "%s", job->id);
		ti->rec->jto = to;
		ti->rec->jversion = job->version;
	}
	pthread_mutex_unlock(&ti->rec->lock);
}

static void
redis_lost(void *arg)
{
	struct tinst *ti = arg;
	int mark;

	pthread_mutex_lock(&ti->rec->lock);
	ti->rec->nlost++;
	mark = ti->rec->mark_on_lost;
	pthread_mutex_unlock(&ti->rec->lock);
	if (mark)
		(void)sched_mark_schema(ti->s);
}

static void
done_with(struct trec *r, struct tinst *ti)
{
	pthread_mutex_lock(&r->lock);
	ti->inflight--;
	pthread_mutex_unlock(&r->lock);
}

struct sched_job *
take_delivery(struct trec *r)
{
	struct sched_job *job = NULL;
	int64_t end = real_ms() + T_DEADLINE_MS;
	struct tinst *ti = NULL;

	pthread_mutex_lock(&r->lock);
	while (r->nqueue == 0 && real_ms() < end) {
		pthread_mutex_unlock(&r->lock);
		nap_ms(1);
		pthread_mutex_lock(&r->lock);
	}
	if (r->nqueue > 0) {
		job = r->queue[0].job;
		ti = r->queue[0].ti;
		memmove(r->queue, r->queue + 1, --r->nqueue *
		    sizeof(*r->queue));
	}
	pthread_mutex_unlock(&r->lock);
	if (ti != NULL)
		done_with(r, ti);
	return job;
}

static void *
worker_main(void *arg)
{
	struct trec *r = arg;
	struct schedule_outcome ok = { SCHEDULE_OK, 200, -1 };
	struct sched_job *job;
	struct tinst *ti;
	enum sched_err e;
	int64_t end;

	for (;;) {
		pthread_mutex_lock(&r->lock);
		while (r->nqueue == 0 && !r->stop_worker)
			pthread_cond_wait(&r->cond, &r->lock);
		if (r->nqueue == 0) {
			pthread_mutex_unlock(&r->lock);
			break;
		}
		job = r->queue[0].job;
		ti = r->queue[0].ti;
		memmove(r->queue, r->queue + 1, --r->nqueue *
		    sizeof(*r->queue));
		pthread_mutex_unlock(&r->lock);
		/* Like the dispatcher: retry while Redis is away. */
		end = real_ms() + T_DEADLINE_MS;
		do {
			e = sched_report(ti->s, job->tenant, job->id,
			    job->token, &ok, NULL, NULL);
			if (e == SCHED_EUNAVAIL)
				nap_ms(20);
		} while (e == SCHED_EUNAVAIL && real_ms() < end);
		done_with(r, ti);
		sched_job_free(job);
	}
	return NULL;
}

void
trec_init(struct trec *r, struct redisfix *redis)
{
	memset(r, 0, sizeof(*r));
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	r->redis = redis;
	r->capacity = -1;
	r->tenant_capacity = -1;
}

void
trec_worker_start(struct trec *r)
{
	r->stop_worker = 0;
	assert_int_equal(pthread_create(&r->worker, NULL, worker_main, r), 0);
	r->worker_on = 1;
}

void
trec_worker_stop(struct trec *r)
{
	if (!r->worker_on)
		return;
	pthread_mutex_lock(&r->lock);
	r->stop_worker = 1;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->worker, NULL);
	r->worker_on = 0;
}

void
trec_free(struct trec *r)
{
	size_t i;

	trec_worker_stop(r);
	for (i = 0; i < r->nqueue; i++)
		sched_job_free(r->queue[i].job);
	free(r->queue);
	free(r->count.ids);
	free(r->count.n);
	pthread_cond_destroy(&r->cond);
	pthread_mutex_destroy(&r->lock);
}

int
trec_count(struct trec *r, const char *id)
{
	int n;

	pthread_mutex_lock(&r->lock);
	n = *count_slot(&r->count, id);
	pthread_mutex_unlock(&r->lock);
	return n;
}

int
trec_dups(struct trec *r)
{
	size_t i;
	int d = 0;

	pthread_mutex_lock(&r->lock);
	for (i = 0; i < r->count.cap; i++)
		if (r->count.ids != NULL && r->count.n[i] > 1)
			d++;
	pthread_mutex_unlock(&r->lock);
	return d;
}

int
trec_distinct(struct trec *r)
{
	size_t i;
	int d = 0;

	pthread_mutex_lock(&r->lock);
	for (i = 0; i < r->count.cap; i++)
		if (r->count.ids != NULL && r->count.n[i] > 0)
			d++;
	pthread_mutex_unlock(&r->lock);
	return d;
}

uint64_t
trec_delivered(struct trec *r)
{
	uint64_t n;

	pthread_mutex_lock(&r->lock);
	n = r->ndelivered;
	pthread_mutex_unlock(&r->lock);
	return n;
}

struct tinst *
tinst_new(struct trec *r, const char *name, int fake, int64_t lease_ms,
    int64_t sweep_ms, int64_t retention_ms)
{
	struct sched_config cfg;
	struct sched_hooks h;
	struct tinst *ti = xcalloc(1, sizeof(*ti));
	char why[256];

	memset(&cfg, 0, sizeof(cfg));
	cfg.redis_url = r->redis->url;
	cfg.redis_timeout_ms = 2000;
	cfg.shards = 16;
	cfg.batch = 100;
	cfg.sweep_ms = sweep_ms > 0 ? sweep_ms : 200;
	cfg.lease_ms = lease_ms > 0 ? lease_ms : 2000;
	cfg.retention_ms = retention_ms > 0 ? retention_ms : 3600000;
	cfg.retry_after_cap_ms = 3600000;
	cfg.instance = name;
	cfg.fake_clock = fake;
	memset(&h, 0, sizeof(h));
	h.topic_info = topic_info;
	h.topic_recall = topic_recall;
	h.capacity = capacity;
	h.tenant_capacity = tenant_capacity;
	h.deliver = deliver;
	h.ready = ready;
	h.transition = r->no_transition ? NULL : transition;
	h.redis_lost = redis_lost;
	h.arg = ti;
	ti->rec = r;
	ti->s = sched_new(&cfg, &h, why, sizeof(why));
	assert_non_null(ti->s);
	assert_int_equal(sched_start(ti->s), 0);
	return ti;
}

void
tinst_free(struct tinst *ti, int abandon)
{
	if (ti == NULL)
		return;
	if (abandon)
		sched_abandon(ti->s);
	else
		sched_stop(ti->s);
	sched_free(ti->s);
	free(ti);
}

struct owned_arg {
	struct tinst	*ti;
	int		 want;
};

static int
owned_cond(void *arg)
{
	struct owned_arg *a = arg;

	return sched_ready(a->ti->s, NULL, 0) &&
	    sched_owned_shards(a->ti->s) >= a->want;
}

void
wait_owned(struct tinst *ti, int want)
{
	struct owned_arg a = { ti, want };

	assert_true(wait_for(owned_cond, &a, T_DEADLINE_MS));
}

struct pass_arg {
	struct sched	*s;
	uint64_t	 until;
};

static int
pass_cond(void *arg)
{
	struct pass_arg *a = arg;

	return sched_passes(a->s) >= a->until;
}

void
kick_wait(struct sched *s)
{
	struct pass_arg a = { s, sched_passes(s) + 2 };

	sched_kick(s);
	assert_true(wait_for(pass_cond, &a, T_DEADLINE_MS));
}

void
expect_counts(struct sched *s, const char *topic,
    const int64_t want[SCHED_NSTATES])
{
	int64_t got[SCHED_NSTATES];
	int i;

	assert_int_equal(sched_counts(s, T_TENANT, topic, got), SCHED_OK);
	for (i = 0; i < SCHED_NSTATES; i++) {
		if (got[i] != want[i])
			print_error("count of %s in %s: %lld, want %lld\n",
			    sched_state_name((enum sched_state)i),
			    topic != NULL ? topic : "(tenant)",
			    (long long)got[i], (long long)want[i]);
		assert_int_equal(got[i], want[i]);
	}
}

void
flush_redis(struct redisfix *f)
{
	redisReply *r = redisfix_cmd(f, "FLUSHALL");

	assert_non_null(r);
	freeReplyObject(r);
}

/* ---- many jobs at once -------------------------------------------------- */

struct pusher {
	struct sched	*s;
	const char	*topic;
	int64_t		 due;
	int64_t		 spread_ms;
	int		 first, n, total;
	size_t		 body_len;
	int		 many;		/* sched_push_many, 64 at a time */
};

#define PUSHER_CHUNK	64

static void *
pusher_main(void *arg)
{
	struct pusher *p = arg;
	struct sched_push sp[PUSHER_CHUNK];
	struct sched_push_result res[PUSHER_CHUNK];
	enum sched_err err[PUSHER_CHUNK];
	char id[PUSHER_CHUNK][ID_LEN + 1], body[256];
	int i, k, m, chunk = p->many ? PUSHER_CHUNK : 1;

	memset(body, 'x', sizeof(body));
	memset(sp, 0, sizeof(sp));
	for (i = 0; i < p->n; i += m) {
		m = p->n - i < chunk ? p->n - i : chunk;
		for (k = 0; k < m; k++) {
			sched_new_id(p->s, NULL, id[k]);
			sp[k].tenant = T_TENANT;
			sp[k].topic = p->topic;
			sp[k].body = body;
			sp[k].body_len = p->body_len;
			sp[k].id = id[k];
			sp[k].run_at_ms = p->due + (p->first + i + k) *
			    p->spread_ms / p->total;
		}
		if (!p->many)
			err[0] = sched_push(p->s, &sp[0], &res[0]);
		else
			sched_push_many(p->s, sp, (size_t)m, res, err);
		for (k = 0; k < m; k++)
			if (err[k] != SCHED_OK || res[k].deduplicated)
				return (void *)1;
	}
	return NULL;
}

void
push_many(struct sched *s, const char *topic, int64_t due, int64_t spread_ms,
    int n, size_t body_len)
{
	struct pusher p[4];
	pthread_t t[4];
	void *rv;
	int i, first = 0;

	for (i = 0; i < 4; i++) {
		p[i].s = s;
		p[i].topic = topic;
		p[i].due = due;
		p[i].spread_ms = spread_ms;
		p[i].first = first;
		p[i].n = n / 4 + (i < n % 4);
		p[i].total = n;
		first += p[i].n;
		p[i].body_len = body_len;
		p[i].many = i % 2;
		assert_int_equal(pthread_create(&t[i], NULL, pusher_main,
		    &p[i]), 0);
	}
	for (i = 0; i < 4; i++) {
		pthread_join(t[i], &rv);
		assert_null(rv);
	}
}

/* A field of INFO memory ("used_memory", "used_memory_dataset"). */
