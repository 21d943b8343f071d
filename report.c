/*
 * report.c - the outcome reporter (report.h): a FIFO of outcomes and hand
 * backs, applied in batches by a few threads of its own.
 *
 * Key decision: the dispatcher's done() only copies the result into the
 * queue (no Redis, no lock held for long), so a loop goes straight back to
 * its sockets and the next callbacks start on time.  A thread takes all
 * that is queued (up to REPORT_BATCH) and applies it with
 * sched_report_many(): one pipelined round trip for the whole batch (the
 * jobs come as reserved, so their records are not read back), one finish
 * call per shard and topic, so under load the batches grow and the cost
 * per outcome falls.  The order of two outcomes of different jobs does not
 * matter (each job has one reservation at a time, and finish.lua is fenced
 * by its token), so the threads need no ordering among themselves.  The
 * queue is bounded: when it is full the caller waits (back-pressure on the
 * loop, as before this file existed) rather than dropping an outcome or
 * growing without end.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "scheduler/sched_batch.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define REPORT_THREADS		2
#define REPORT_BATCH		128	/* outcomes per sched_report_many() */
#define REPORT_QUEUE_MAX	65536

struct item {
	struct item		*next;
	int			 release;	/* hand back, no attempt */
	char			*tenant;
	char			 id[ID_LEN + 65];
	char			 token[SCHED_TOKEN_LEN + 1];
	int			 attempt;
	struct schedule_outcome	 o;
	struct sched_attempt	 a;		/* error, excerpt owned */
	struct sched_job	*job;		/* as reserved, or NULL */
};

struct reporter {
	struct sched	*sched;
	pthread_mutex_t	 lock;
	pthread_cond_t	 work;		/* items queued, or stopping */
	pthread_cond_t	 room;		/* the queue has room, or is idle */
	struct item	*head, *tail;
	size_t		 queued;
	size_t		 busy;		/* items taken, not yet applied */
	int		 stopping;
	pthread_t	 thr[REPORT_THREADS];
	int		 nthr;
};

static void
item_free(struct item *it)
{
	if (it == NULL)
		return;
	free(it->tenant);
	free(it->a.error);
	free(it->a.excerpt);
	sched_job_free(it->job);
	free(it);
}

/* Logs what became of a hand back. */
static void
released(const struct item *it, enum sched_err e)
{
	if (e != SCHED_OK && e != SCHED_ESTALE && e != SCHED_ENOTFOUND)
		log_warnx("tenant=%s job=%s: cannot hand the job back: %s "
		    "(it returns when its deadline passes)", it->tenant, it->id,
		    sched_strerror(e));
}

/* Logs what became of an outcome. */
static void
reported(const struct item *it, enum sched_err e,
    const struct schedule_decision *d)
{
	struct log_obj lo = { it->tenant, NULL, it->id, it->attempt };

	if (e == SCHED_OK)
		log_obj(LOG_LVL_DEBUG, &lo, "%s (%d): %s",
		    schedule_outcome_name(it->o.kind), it->o.http_status,
		    schedule_verdict_name(d->verdict));
	else if (e == SCHED_ESTALE)
		log_obj(LOG_LVL_INFO, &lo, "outcome ignored: the job was "
		    "reserved again after its deadline passed");
	else if (e == SCHED_ENOTFOUND)
		/* A forced delete with callbacks in flight: one a job. */
		log_obj(LOG_LVL_INFO, &lo, "outcome not recorded: the job "
		    "is no longer in Redis (its topic or tenant was deleted, "
		    "or Redis lost it and the journal brings it back)");
	else
		log_obj(LOG_LVL_WARN, &lo, "cannot record the outcome: %s "
		    "(the job returns when its deadline passes)",
		    sched_strerror(e));
}

/* Applies up to REPORT_BATCH items in one sched_report_many() call. */
static void
apply_batch(struct reporter *r, struct item **iv, size_t n)
{
	struct sched_report_item v[REPORT_BATCH];
	size_t i;

	memset(v, 0, sizeof(v));
	for (i = 0; i < n; i++) {
		v[i].tenant = iv[i]->tenant;
		v[i].id = iv[i]->id;
		v[i].token = iv[i]->token;
		v[i].release = iv[i]->release;
		v[i].outcome = iv[i]->o;
		v[i].attempt = iv[i]->release ? NULL : &iv[i]->a;
		v[i].job = iv[i]->job;
	}
	sched_report_many(r->sched, v, n);
	for (i = 0; i < n; i++) {
		if (iv[i]->release)
			released(iv[i], v[i].err);
		else
			reported(iv[i], v[i].err, &v[i].decision);
		item_free(iv[i]);
	}
}

static void *
report_main(void *arg)
{
	struct reporter *r = arg;
	struct item *iv[REPORT_BATCH];
	size_t n;

	pthread_mutex_lock(&r->lock);
	for (;;) {
		while (r->head == NULL && !r->stopping)
			pthread_cond_wait(&r->work, &r->lock);
		if (r->head == NULL)
			break;		/* stopping and nothing left */
		for (n = 0; n < REPORT_BATCH && r->head != NULL; n++) {
			iv[n] = r->head;
			if ((r->head = iv[n]->next) == NULL)
				r->tail = NULL;
		}
		r->queued -= n;
		r->busy += n;
		pthread_cond_broadcast(&r->room);
		pthread_mutex_unlock(&r->lock);
		apply_batch(r, iv, n);
		pthread_mutex_lock(&r->lock);
		r->busy -= n;
		pthread_cond_broadcast(&r->room);
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

static void
enqueue(struct reporter *r, struct item *it)
{
	pthread_mutex_lock(&r->lock);
	while (r->queued >= REPORT_QUEUE_MAX)
		pthread_cond_wait(&r->room, &r->lock);
	if (r->tail != NULL)
		r->tail->next = it;
	else
		r->head = it;
	r->tail = it;
	r->queued++;
	pthread_cond_signal(&r->work);
	pthread_mutex_unlock(&r->lock);
}

static struct item *
item_new(const char *tenant, const char *id, const char *token,
    struct sched_job **job)
{
	struct item *it = xcalloc(1, sizeof(*it));

	if (job != NULL) {
		it->job = *job;
		*job = NULL;
	}

	it->tenant = xstrdup(tenant);
	snprintf(it->id, sizeof(it->id), "%s", id);
	snprintf(it->token, sizeof(it->token), "%s", token);
	return it;
}

void
report_outcome(struct reporter *r, const char *tenant, const char *id,
    const char *token, int attempt, const struct schedule_outcome *o,
    const struct sched_attempt *a, char **excerpt, struct sched_job **job)
{
	struct item *it = item_new(tenant, id, token, job);

	it->attempt = attempt;
	it->o = *o;
	it->a.at_ms = a->at_ms;
	it->a.status = a->status;
	it->a.latency_ms = a->latency_ms;
	it->a.end_ms = a->end_ms;
	it->a.error = a->error != NULL ? xstrdup(a->error) : NULL;
	if (excerpt != NULL && *excerpt != NULL) {
		it->a.excerpt = *excerpt;
		it->a.excerpt_len = a->excerpt_len;
		*excerpt = NULL;
	} else if (a->excerpt != NULL) {
		it->a.excerpt = xmalloc(a->excerpt_len + 1);
		memcpy(it->a.excerpt, a->excerpt, a->excerpt_len);
		it->a.excerpt[a->excerpt_len] = '\0';
		it->a.excerpt_len = a->excerpt_len;
	}
	enqueue(r, it);
}

void
report_release(struct reporter *r, const char *tenant, const char *id,
    const char *token, struct sched_job **job)
{
	struct item *it = item_new(tenant, id, token, job);

	it->release = 1;
	enqueue(r, it);
}

struct reporter *
report_new(struct sched *s)
{
	struct reporter *r = xcalloc(1, sizeof(*r));
	int err;

	r->sched = s;
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->work, NULL);
	pthread_cond_init(&r->room, NULL);
	for (r->nthr = 0; r->nthr < REPORT_THREADS; r->nthr++) {
		if ((err = pthread_create(&r->thr[r->nthr], NULL, report_main,
		    r)) != 0)
			goto fail;
		(void)pthread_setname_np(r->thr[r->nthr], "report");
	}
	return r;
fail:
	report_free(r);
	errno = err;
	return NULL;
}

void
report_drain(struct reporter *r)
{
	if (r == NULL)
		return;
	pthread_mutex_lock(&r->lock);
	while (r->queued > 0 || r->busy > 0)
		pthread_cond_wait(&r->room, &r->lock);
	pthread_mutex_unlock(&r->lock);
}

void
report_free(struct reporter *r)
{
	int i;

	if (r == NULL)
		return;
	pthread_mutex_lock(&r->lock);
	r->stopping = 1;
	pthread_cond_broadcast(&r->work);
	pthread_mutex_unlock(&r->lock);
	for (i = 0; i < r->nthr; i++)
		pthread_join(r->thr[i], NULL);
	pthread_cond_destroy(&r->room);
	pthread_cond_destroy(&r->work);
	pthread_mutex_destroy(&r->lock);
	free(r);
}
