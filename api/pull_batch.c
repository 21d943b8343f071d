/*
 * pull_batch.c - the pull routes' Redis work in batches: one worker thread
 * reserves for every consumer queued, another applies every ack and nack
 * queued, and neither holds an HTTP thread while Redis answers.
 *
 * Key decisions:
 *  - Consumers that ask together are served together: the reserves queued
 *    for one (tenant, topic, time to run) become one sched_reserve_many,
 *    one read of the ready sets and one reserve.lua call per shard for all
 *    of them instead of all of that per consumer.  The jobs come best
 *    first and go to the consumers in the order they asked.
 *  - Acks and nacks queued together become one sched_report_many: two
 *    pipelined round trips, one finish.lua call per shard and topic.  Each
 *    outcome is still fenced by its own token inside the script, so a
 *    stale or repeated ack in a batch is refused alone, as it would be
 *    alone.
 *  - In sync journal mode an ack or nack is answered once its transition
 *    is committed: the batch takes one flush ticket of the journal
 *    (jrnl_flush_cb) and its requests are resumed from the callback, so
 *    the worker goes on with the next batch meanwhile and the acks of
 *    every batch in flight share the writer's commits.
 *  - One worker per kind, so acks are applied while reserves wait on Redis
 *    and the other way round; what a worker takes is what queued while it
 *    was busy, so batches grow with the load and a lone request waits for
 *    nothing.
 *  - An op is shared by its request and the worker (refs, under pb_lock);
 *    a request that ends first (the server stopping) leaves its op to the
 *    worker, which still applies it and frees it.  Jobs reserved for a
 *    request that can no longer answer are given back (give_back()), not
 *    left in flight until their ttr counts an attempt nobody made.
 *
 * Lock order: pb_lock, then the HTTP server's lock (api_resume).
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/pull_batch.h"
#include "scheduler/sched_batch.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define PULL_BATCH_MAX	256	/* ops per scheduler call */
#define PULL_BATCH_WORK	4096	/* jobs reserved or finished, about */

struct pb_queue {
	struct pull_op	*head, **tail;
	pthread_cond_t	 cond;
	pthread_t	 thr;
	int		 started;
	enum pull_op_kind kind;
};

static pthread_mutex_t pb_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pb_queue pb_q[2] = {
	{ NULL, &pb_q[0].head, PTHREAD_COND_INITIALIZER, 0, 0,
	    PULL_OP_RESERVE },
	{ NULL, &pb_q[1].head, PTHREAD_COND_INITIALIZER, 0, 0,
	    PULL_OP_FINISH },
};
static int pb_stopping;
static pthread_cond_t pb_hold_cond = PTHREAD_COND_INITIALIZER;
static int pb_hold;		/* tests: pull_batch_hold() */
static size_t pb_held;		/* reserves waiting at the hold */

static int queue_locked(struct pull_op *op);
static void finish_batch(struct pull_op **v, size_t n);

struct pull_op *
pull_op_new(struct api_req *req, enum pull_op_kind kind)
{
	struct pull_op *op = xcalloc(1, sizeof(*op));

	op->kind = kind;
	op->req = req;
	op->refs = 1;
	op->want = 1;
	op->items = &op->one;
	op->nitems = 1;
	snprintf(op->tenant, sizeof(op->tenant), "%s", req->tenant);
	return op;
}

/* pb_lock held; 1 when that was the last reference. */
static int
unref_locked(struct pull_op *op)
{
	return --op->refs == 0;
}

static void give_back(struct pull_op *op);

static void
op_free(struct pull_op *op)
{
	size_t i;

	if (op->kind == PULL_OP_RESERVE && op->njobs > 0)
		give_back(op);
	for (i = 0; op->release && i < op->nitems; i++)
		if (op->items[i].err == SCHED_EUNAVAIL ||
		    op->items[i].err == SCHED_EFULL ||
		    op->items[i].err == SCHED_EINTERNAL)
			log_warnx("pull: job %s/%s not given back (%s): it "
			    "comes back when its ttr runs out", op->tenant,
			    op->items[i].id, sched_strerror(op->items[i].err));
	for (i = 0; i < op->njobs; i++)
		sched_job_free(op->jobs[i]);
	free(op->jobs);
	if (op->items != &op->one)
		free(op->items);
	free(op);
}

/*
 * The jobs of reserve op, which no handler took, released (finish.lua's
 * release: back to ready, no attempt counted) by a finish op of their
 * own queued to the ack worker, or here when no worker runs (stopping).
 * A job finished or reserved again meanwhile is refused by its token.
 */
static void
give_back(struct pull_op *op)
{
	struct pull_op *r = xcalloc(1, sizeof(*r));
	struct pull_item *it;
	size_t i;
	int queued, last = 0;

	r->kind = PULL_OP_FINISH;
	r->sched = op->sched;
	r->refs = 1;
	r->release = 1;
	memcpy(r->tenant, op->tenant, sizeof(r->tenant));
	r->items = xcalloc(op->njobs, sizeof(*r->items));
	r->nitems = op->njobs;
	for (i = 0; i < op->njobs; i++) {
		/* Ids and tokens fit: the API takes no longer ones. */
		it = &r->items[i];
		snprintf(it->id, sizeof(it->id), "%.*s",
		    (int)sizeof(it->id) - 1, op->jobs[i]->id);
		snprintf(it->token, sizeof(it->token), "%.*s",
		    (int)sizeof(it->token) - 1, op->jobs[i]->token);
	}
	log_info("pull: %zu job%s of %s/%s given back: reserved for a "
	    "consumer that left or a request that ended", op->njobs,
	    op->njobs == 1 ? "" : "s", op->tenant, op->topic);
	pthread_mutex_lock(&pb_lock);
	if ((queued = queue_locked(r) == 0))
		last = unref_locked(r);
	pthread_mutex_unlock(&pb_lock);
	if (!queued) {
		finish_batch(&r, 1);
		last = 1;
	}
	if (last)
		op_free(r);
}

void
pull_op_release(struct pull_op *op)
{
	int last;

	if (op == NULL)
		return;
	pthread_mutex_lock(&pb_lock);
	op->req = NULL;
	last = unref_locked(op);
	pthread_mutex_unlock(&pb_lock);
	if (last)
		op_free(op);
}

/* The worker is done with v[0 .. n-1]: resume their requests. */
static void
ops_done(struct pull_op **v, size_t n)
{
	struct pull_op *dead = NULL, *op;
	size_t i;

	pthread_mutex_lock(&pb_lock);
	for (i = 0; i < n; i++) {
		v[i]->done = 1;
		if (v[i]->req != NULL)
			api_resume(v[i]->req);
		if (unref_locked(v[i])) {
			v[i]->next = dead;
			dead = v[i];
		}
	}
	pthread_mutex_unlock(&pb_lock);
	while ((op = dead) != NULL) {
		dead = op->next;
		op_free(op);
	}
}

/* ------------------------------------------------------------------ */
/* Applying a batch (no lock held: the ops are the worker's until done) */

static int
same_reserve(const struct pull_op *a, const struct pull_op *b)
{
	return a->sched == b->sched && a->ttr_ms == b->ttr_ms &&
	    strcmp(a->tenant, b->tenant) == 0 &&
	    strcmp(a->topic, b->topic) == 0;
}

/*
 * Reserves for v[0 .. n-1] (one tenant, topic and time to run) in one
 * call, dealt round-robin in the order they asked: the best job to the
 * first consumer, the next to the second, and a consumer that asked for
 * several gets its second only once each has had one.  Those left with
 * none get ENOTFOUND.
 */
static void
reserve_group(struct pull_op **v, size_t n)
{
	struct sched_job **jobs;
	enum sched_err e;
	size_t got = 0, want = 0, i, k;

	for (i = 0; i < n; i++) {
		want += v[i]->want;
		v[i]->jobs = xcalloc(v[i]->want, sizeof(*v[i]->jobs));
		v[i]->njobs = 0;
	}
	jobs = xcalloc(want, sizeof(*jobs));
	e = sched_reserve_many(v[0]->sched, v[0]->tenant, v[0]->topic,
	    v[0]->ttr_ms, want, jobs, &got);
	for (k = 0; k < got; )
		for (i = 0; i < n && k < got; i++)
			if (v[i]->njobs < v[i]->want)
				v[i]->jobs[v[i]->njobs++] = jobs[k++];
	for (i = 0; i < n; i++)
		v[i]->err = v[i]->njobs > 0 ? SCHED_OK : e == SCHED_OK ?
		    SCHED_ENOTFOUND : e;
	free(jobs);
}

/* Groups v[0 .. n-1] by what they reserve from, in order of arrival. */
static void
reserve_batch(struct pull_op **v, size_t n)
{
	struct pull_op **g = xcalloc(n, sizeof(*g));
	char *taken = xcalloc(n, 1);
	size_t i, j, k;

	for (i = 0; i < n; i++) {
		if (taken[i])
			continue;
		for (k = 0, j = i; j < n; j++)
			if (!taken[j] && same_reserve(v[i], v[j])) {
				taken[j] = 1;
				g[k++] = v[j];
			}
		reserve_group(g, k);
	}
	free(taken);
	free(g);
}

/*
 * Acks and nacks of v[0 .. n-1], every item of each, in one
 * sched_report_many per scheduler.
 */
static void
finish_batch(struct pull_op **v, size_t n)
{
	struct sched_report_item *it;
	struct pull_item *pi;
	size_t i, j, k, m, x;

	for (i = 0; i < n; i = j) {
		for (m = 0, j = i; j < n && v[j]->sched == v[i]->sched; j++)
			m += v[j]->nitems;
		it = xcalloc(m, sizeof(*it));
		for (k = 0, j = i; j < n && v[j]->sched == v[i]->sched; j++)
			for (x = 0; x < v[j]->nitems; x++, k++) {
				pi = &v[j]->items[x];
				it[k].tenant = v[j]->tenant;
				it[k].id = pi->id;
				it[k].token = pi->token;
				it[k].release = v[j]->release;
				it[k].outcome.kind = v[j]->ack ? SCHEDULE_OK :
				    SCHEDULE_NACK;
				it[k].outcome.retry_after_ms = -1;
			}
		sched_report_many(v[i]->sched, it, m);
		for (k = 0, j = i; j < n && v[j]->sched == v[i]->sched; j++)
			for (x = 0; x < v[j]->nitems; x++, k++) {
				v[j]->items[x].err = it[k].err;
				v[j]->items[x].decision = it[k].decision;
			}
		free(it);
	}
}

/* Acks and nacks waiting for their journal commit (the worker's refs). */
struct finish_wait {
	size_t		 n;
	struct pull_op	*v[];
};

/* The journal's callback (its writer, or this thread): resume them. */
static void
finish_committed(enum jrnl_err err, void *arg)
{
	struct finish_wait *fw = arg;
	size_t i;

	for (i = 0; i < fw->n; i++)
		fw->v[i]->jerr = err;
	ops_done(fw->v, fw->n);
	free(fw);
}

/*
 * Done with the acks and nacks of v[0 .. n-1]: at once, or, when they
 * wait for the journal, once the transitions they queued are committed.
 */
static void
finish_settle(struct pull_op **v, size_t n)
{
	struct finish_wait *fw;
	struct jrnl *jrnl = NULL;
	enum jrnl_err e;
	size_t i;

	for (i = 0; i < n && jrnl == NULL; i++)
		jrnl = v[i]->jrnl;
	if (jrnl == NULL) {
		ops_done(v, n);
		return;
	}
	fw = xmalloc(sizeof(*fw) + n * sizeof(fw->v[0]));
	fw->n = n;
	memcpy(fw->v, v, n * sizeof(fw->v[0]));
	if ((e = jrnl_flush_cb(jrnl, finish_committed, fw)) != JRNL_OK)
		finish_committed(e, fw);
}

static void
apply(enum pull_op_kind kind, struct pull_op **v, size_t n)
{
	if (kind == PULL_OP_RESERVE) {
		reserve_batch(v, n);
		ops_done(v, n);
		return;
	}
	finish_batch(v, n);
	finish_settle(v, n);
}

/* ------------------------------------------------------------------ */
/* The workers */

/* The jobs op reserves or finishes. */
static size_t
op_work(const struct pull_op *op)
{
	return op->kind == PULL_OP_RESERVE ? op->want : op->nitems;
}

static void *
worker_main(void *arg)
{
	struct pb_queue *q = arg;
	struct pull_op *v[PULL_BATCH_MAX];
	size_t n, work;

	pthread_mutex_lock(&pb_lock);
	for (;;) {
		while (q->head == NULL && !pb_stopping)
			pthread_cond_wait(&q->cond, &pb_lock);
		if (q->head == NULL)
			break;
		/* Every op queued, up to a bound on the scheduler call. */
		for (n = work = 0; n < PULL_BATCH_MAX && q->head != NULL &&
		    (n == 0 || work + op_work(q->head) <= PULL_BATCH_WORK);
		    n++) {
			work += op_work(q->head);
			v[n] = q->head;
			q->head = v[n]->next;
		}
		if (q->head == NULL)
			q->tail = &q->head;
		if (q->kind == PULL_OP_RESERVE && pb_hold && !pb_stopping) {
			pb_held += n;
			while (pb_hold && !pb_stopping)
				pthread_cond_wait(&pb_hold_cond, &pb_lock);
			pb_held -= n;
		}
		pthread_mutex_unlock(&pb_lock);
		apply(q->kind, v, n);
		pthread_mutex_lock(&pb_lock);
	}
	pthread_mutex_unlock(&pb_lock);
	return NULL;
}

/* pb_lock held: 1 when the worker of kind runs (started now if need be). */
static int
running_locked(enum pull_op_kind kind)
{
	struct pb_queue *q = &pb_q[kind];

	if (pb_stopping)
		return 0;
	if (!q->started) {
		if (pthread_create(&q->thr, NULL, worker_main, q) != 0) {
			log_warn("pull: cannot start a batch worker");
			return 0;
		}
		(void)pthread_setname_np(q->thr, "pull-batch");
		q->started = 1;
	}
	return 1;
}

/* pb_lock held: queue op (the worker's reference taken); -1 if no worker. */
static int
queue_locked(struct pull_op *op)
{
	struct pb_queue *q = &pb_q[op->kind];

	if (!running_locked(op->kind))
		return -1;
	op->refs++;
	op->next = NULL;
	*q->tail = op;
	q->tail = &op->next;
	pthread_cond_signal(&q->cond);
	return 0;
}

/* Applies op in the handler's thread (no worker runs). */
static int
inline_op(struct pull_op *op)
{
	if (op->kind == PULL_OP_RESERVE)
		reserve_batch(&op, 1);
	else {
		finish_batch(&op, 1);
		/* Rare (no worker): the thread waits for the commit. */
		if (op->jrnl != NULL && jrnl_flush(op->jrnl) == -1)
			op->jerr = JRNL_EUNAVAIL;
	}
	op->done = 1;
	return 1;
}

int
pull_op_submit(struct api_req *req, struct pull_op *op)
{
	int rc;

	pthread_mutex_lock(&pb_lock);
	rc = running_locked(op->kind);
	pthread_mutex_unlock(&pb_lock);
	if (!rc)
		return inline_op(op);
	/* Park first: the worker may be done before we return. */
	api_suspend(req);
	pthread_mutex_lock(&pb_lock);
	op->done = 0;
	rc = queue_locked(op);
	pthread_mutex_unlock(&pb_lock);
	if (rc == 0)
		return 0;
	api_resume(req);	/* the workers stopped meanwhile */
	return inline_op(op);
}

int
pull_op_wait(struct api_req *req, struct pull_op *op)
{
	int done;

	pthread_mutex_lock(&pb_lock);
	if (!(done = op->done))
		api_suspend(req);
	pthread_mutex_unlock(&pb_lock);
	return done;
}

void
pull_batch_stop(void)
{
	int i;

	pthread_mutex_lock(&pb_lock);
	pb_stopping = 1;
	for (i = 0; i < 2; i++)
		pthread_cond_broadcast(&pb_q[i].cond);
	pthread_cond_broadcast(&pb_hold_cond);
	pthread_mutex_unlock(&pb_lock);
	for (i = 0; i < 2; i++) {
		if (!pb_q[i].started)
			continue;
		pthread_join(pb_q[i].thr, NULL);
		pb_q[i].started = 0;
	}
	pthread_mutex_lock(&pb_lock);
	pb_stopping = 0;
	pthread_mutex_unlock(&pb_lock);
}

void
pull_batch_hold(int on)
{
	pthread_mutex_lock(&pb_lock);
	pb_hold = on;
	pthread_cond_broadcast(&pb_hold_cond);
	pthread_mutex_unlock(&pb_lock);
}

int
pull_batch_holding(size_t *waiting)
{
	int on;

	pthread_mutex_lock(&pb_lock);
	on = pb_hold;
	*waiting = pb_held;
	pthread_mutex_unlock(&pb_lock);
	return on;
}
