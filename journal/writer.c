/*
 * writer.c - the journal's writer thread: group commit of job puts,
 * batches of transitions, reconnection with backoff, retention purge.
 *
 * Key decision: one thread owns the writing connection and is the only one
 * that writes jobs and transitions.  Each round it takes every put request
 * queued (up to BATCH_JOBS jobs) and the transitions due that were queued
 * before the oldest put it leaves behind (so a transition never comes
 * before its job's row), and writes them in one transaction, jobs first:
 * puts that arrive while a commit runs form the next batch by themselves,
 * so N concurrent puts cost about one fsync, not N; commit_window_us can
 * hold a round back to gather more.  A batch the database refuses is
 * written again request by request, so one bad row fails only its own put
 * (and a bad transition is dropped alone).  When the connection fails,
 * SYNC puts fail at once (JRNL_EUNAVAIL), ASYNC puts go
 * back to the head of the queue, transitions stay in the ring, and the
 * writer reconnects: once at once, then with exponential backoff.  Idle, it
 * pings every JRNL_PING_US so jrnl_ready() notices a lost database, and purges
 * finished jobs past retention one small transaction per round so writes
 * are never held behind a purge.  A big delete's steps (read.c) come as
 * tasks, each a round of its own, taking turns with the write rounds while
 * anything is queued.  Puts with a callback (jrnl_put_jobs_cb)
 * and flush tickets (jrnl_flush_cb: settled once the transitions queued
 * before them are written) are called back at the top of the next loop,
 * with mu dropped, so a callback never runs under the journal's lock.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "journal/internal.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define BATCH_JOBS		4096	/* jobs per transaction, about */
#define BATCH_REQS		1024
#define BACKOFF_MIN_US		100000
#define BACKOFF_MAX_US		5000000
#define RETRY_MIN_US		100000	/* reconnect on demand, at most */

/* Writing, on the writer's connection. */

/* A job's row: a[0..JRNL_JOB_COLS), in JOB_INSERT's order. */
static void
job_args(struct jrnl_val *a, const struct jrnl_job *job)
{
	int64_t updated = job->updated_ms != 0 ? job->updated_ms :
	    job->created_ms;
	const char *state = job->state != NULL ? job->state : "scheduled";

	a[0] = jrnl_vtext(job->tenant);
	a[1] = jrnl_vtext(job->id);
	a[2] = jrnl_vtext(job->topic);
	a[3] = jrnl_vtext(job->bizkey);
	a[4] = jrnl_vint(job->due_ms);
	a[5] = jrnl_vint(job->priority);
	a[6] = jrnl_vblob(job->body != NULL ? job->body : "", job->body_len);
	a[7] = jrnl_vtext(job->headers_json);
	a[8] = jrnl_vtext(job->schedule);
	a[9] = jrnl_vint(job->ttr_ms);
	a[10] = jrnl_vtext(state);
	a[11] = jrnl_vint(job->attempts);
	a[12] = jrnl_vint(job->created_ms);
	a[13] = jrnl_vint(updated);
	a[14] = jrnl_state_finished(state) ? jrnl_vint(updated) :
	    jrnl_vtext(NULL);
	a[15] = job->put_id != 0 ? jrnl_vint(job->put_id) : jrnl_vtext(NULL);
	a[16] = jrnl_vint(job->version);
}

/* Writes row i (0, 1, .. in order) of a put_rows() at a. */
typedef void	(*row_fn)(struct jrnl *j, struct jrnl_val *a, size_t i,
		    void *arg);

/*
 * Runs for n rows of ncols values the statements base + k of 2^k rows
 * (jrnl_many_size()).  Rows a statement returns go to out (NULL: none
 * expected), with arg.
 */
static enum jrnl_err
put_rows(struct jrnl *j, int base, size_t ncols, size_t n, row_fn fill,
    jrnl_row_fn out, void *arg)
{
	struct jrnl_val a[JRNL_ARGS_MAX];
	size_t i = 0, r, rows;
	enum jrnl_err e;
	int size;

	while (i < n) {
		size = jrnl_many_size(n - i);
		rows = (size_t)1 << size;
		for (r = 0; r < rows; r++)
			fill(j, &a[r * ncols], i + r, arg);
		e = jrnl_run(j->drv, j->wconn, base + size, a, rows * ncols,
		    out, arg, NULL);
		if (e != JRNL_OK)
			return e;
		i += rows;
	}
	return JRNL_OK;
}

/* The jobs of reqs[0..nreq), walked in order by job_row(). */
struct job_walk {
	struct jrnl_put_req	**reqs;
	size_t			  req, job;
};

static void
job_row(struct jrnl *j, struct jrnl_val *a, size_t i, void *arg)
{
	struct job_walk *w = arg;

	(void)j;
	(void)i;
	while (w->job == w->reqs[w->req]->n) {
		w->req++;
		w->job = 0;
	}
	job_args(a, &w->reqs[w->req]->jobs[w->job++]);
}

/* A transition's row: a[0..JRNL_TRANS_COLS), in TRANS_COLS' order. */
static void
trans_row(struct jrnl *j, struct jrnl_val *a, size_t i, void *arg)
{
	struct jrnl_trans_rec **tr = arg;
	const struct jrnl_transition *t = &tr[i]->t;

	a[0] = jrnl_vtext(t->tenant);
	a[1] = jrnl_vtext(t->job_id);
	a[2] = jrnl_vtext(t->from_state);
	a[3] = jrnl_vtext(t->to_state);
	a[4] = jrnl_vint(t->at_ms);
	a[5] = jrnl_vtext(j->cfg.instance);
	a[6] = jrnl_vtext(j->cfg.host);
	a[7] = jrnl_vint(t->shard);
	a[8] = jrnl_vint(t->attempt);
	a[9] = jrnl_vint(t->http_status);
	a[10] = jrnl_vint(t->latency_ms);
	a[11] = jrnl_vtext(t->error);
	a[12] = jrnl_vblob(t->excerpt, t->excerpt_len);
}

/*
 * Whether t starts a job's schedule over: a dead job retried or redriven
 * (dead -> scheduled) runs from attempt 0 again, so its row's attempts are
 * set to the transition's, not only raised.
 */
static int
restarts(const struct jrnl_transition *t)
{
	return t->from_state != NULL && strcmp(t->from_state, "dead") == 0 &&
	    strcmp(t->to_state, "scheduled") == 0;
}

static int
is_void(const struct jrnl_transition *t)
{
	return strcmp(t->to_state, JRNL_STATE_VOID) == 0;
}

/*
 * A transition's move of its job's row (not for a job's creation); a void
 * one takes away the row its push wrote.  The move is ordered by the job's
 * version, not by at_ms: at_ms is the clock of whichever instance made the
 * change, and one whose clock is behind would otherwise see its change
 * (a delivery) ignored, and a restore make the job again.
 */
static enum jrnl_err
apply_transition(struct jrnl *j, const struct jrnl_transition *t)
{
	struct jrnl_val a[12];

	if (is_void(t)) {
		a[0] = jrnl_vtext(t->tenant);
		a[1] = jrnl_vtext(t->job_id);
		a[2] = a[3] = t->put_id != 0 ? jrnl_vint(t->put_id) :
		    jrnl_vtext(NULL);
		return jrnl_run(j->drv, j->wconn, JS_JOB_VOID, a, 4, NULL,
		    NULL, NULL);
	}

	a[0] = jrnl_vtext(t->to_state);
	a[1] = jrnl_vint(restarts(t));
	a[2] = jrnl_vint(t->attempt);
	a[3] = jrnl_vint(t->attempt);
	a[4] = t->due_ms > 0 ? jrnl_vint(t->due_ms) : jrnl_vtext(NULL);
	a[5] = jrnl_vint(t->at_ms);
	a[6] = jrnl_state_finished(t->to_state) ? jrnl_vint(t->at_ms) :
	    jrnl_vtext(NULL);
	a[7] = jrnl_vint(t->version);
	a[8] = jrnl_vtext(t->tenant);
	a[9] = jrnl_vtext(t->job_id);
	a[10] = jrnl_vint(t->created_ms);
	a[11] = jrnl_vint(t->version);
	return jrnl_run(j->drv, j->wconn, JS_JOB_APPLY, a, 12, NULL, NULL,
	    NULL);
}

/* The jobs of a commit that ask whether their row is their put's. */
struct asking {
	const struct jrnl_job	**v;	/* sorted by (tenant, id) */
	size_t			  n;
};

static int
asking_cmp(const void *a, const void *b)
{
	const struct jrnl_job *x = *(const struct jrnl_job *const *)a;
	const struct jrnl_job *y = *(const struct jrnl_job *const *)b;
	int c = strcmp(x->tenant, y->tenant);

	return c != 0 ? c : strcmp(x->id, y->id);
}

/* A column's bytes against a string, in strcmp's order. */
static int
val_cmp(const struct jrnl_val *v, const char *s)
{
	size_t n = strlen(s), len = v->type == JRNL_V_NULL ? 0 : v->len;
	int c = len > 0 && n > 0 ? memcmp(v->p, s, len < n ? len : n) : 0;

	return c != 0 ? c : (len > n) - (len < n);
}

static void
asking_row(struct jrnl *j, struct jrnl_val *a, size_t i, void *arg)
{
	const struct jrnl_job *job = ((struct asking *)arg)->v[i];

	(void)j;
	a[0] = jrnl_vtext(job->tenant);
	a[1] = jrnl_vtext(job->id);
}

/* A row (tenant, id, put_id): tells every asking job of that id. */
static int
asking_tell(const struct jrnl_val *c, size_t ncols, void *arg)
{
	struct asking *w = arg;
	size_t lo = 0, hi = w->n, mid;
	int cmp;

	if (ncols < 3)
		return 0;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		cmp = val_cmp(&c[0], w->v[mid]->tenant);
		if (cmp == 0)
			cmp = val_cmp(&c[1], w->v[mid]->id);
		if (cmp > 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < w->n && val_cmp(&c[0], w->v[lo]->tenant) == 0 &&
	    val_cmp(&c[1], w->v[lo]->id) == 0; lo++)
		*w->v[lo]->contested = c[2].type != JRNL_V_INT ||
		    c[2].i != w->v[lo]->put_id;
	return 0;
}

/*
 * Tells each job of reqs that asks (a token and somewhere to say it)
 * whether its row is its own or another put's that it did not replace:
 * one statement per 32 of them (JS_PUT_ID_MANY), not one each, since in
 * MySQL each is a round trip inside the commit.  A job whose row is not
 * there (it cannot be, in the same transaction) counts as contested.
 */
static enum jrnl_err
tell_contested(struct jrnl *j, struct jrnl_put_req **reqs, size_t nreq)
{
	struct asking w = { NULL, 0 };
	const struct jrnl_job *job;
	enum jrnl_err e;
	size_t i, k, n = 0;

	for (i = 0; i < nreq; i++)
		for (k = 0; k < reqs[i]->n; k++)
			n += reqs[i]->jobs[k].put_id != 0 &&
			    reqs[i]->jobs[k].contested != NULL;
	if (n == 0)
		return JRNL_OK;
	w.v = xreallocarray(NULL, n, sizeof(*w.v));
	for (i = 0; i < nreq; i++)
		for (k = 0; k < reqs[i]->n; k++) {
			job = &reqs[i]->jobs[k];
			if (job->put_id == 0 || job->contested == NULL)
				continue;
			*job->contested = 1;
			w.v[w.n++] = job;
		}
	qsort(w.v, w.n, sizeof(*w.v), asking_cmp);
	e = put_rows(j, JS_PUT_ID_MANY, 2, w.n, asking_row, asking_tell, &w);
	free(w.v);
	return e;
}

/*
 * One transaction: the jobs of reqs, then the transitions tr (their rows,
 * void ones left out, then, in order, the moves of their jobs' rows).
 */
static enum jrnl_err
tx_write(struct jrnl *j, struct jrnl_put_req **reqs, size_t nreq,
    struct jrnl_trans_rec **tr, size_t ntr)
{
	struct jrnl_trans_rec *rows[JRNL_BATCH_TRANS];
	struct job_walk w = { reqs, 0, 0 };
	enum jrnl_err e;
	size_t i, njobs = 0, nrows = 0;

	for (i = 0; i < nreq; i++)
		njobs += reqs[i]->n;
	for (i = 0; i < ntr && nrows < JRNL_BATCH_TRANS; i++)
		if (!is_void(&tr[i]->t))
			rows[nrows++] = tr[i];
	if ((e = j->drv->begin(j->wconn)) != JRNL_OK)
		return e;
	if ((e = put_rows(j, JS_PUT_MANY, JRNL_JOB_COLS, njobs, job_row, NULL,
	    &w)) != JRNL_OK || (e = tell_contested(j, reqs, nreq)) != JRNL_OK)
		goto fail;
	if ((e = put_rows(j, JS_TRANS_MANY, JRNL_TRANS_COLS, nrows, trans_row,
	    NULL, rows)) != JRNL_OK)
		goto fail;
	/* A job's creation: its put wrote the row in that state already. */
	for (i = 0; i < ntr; i++)
		if (tr[i]->t.from_state != NULL &&
		    (e = apply_transition(j, &tr[i]->t)) != JRNL_OK)
			goto fail;
	if ((e = j->drv->commit(j->wconn)) != JRNL_OK)
		return e;
	return JRNL_OK;
fail:
	j->drv->rollback(j->wconn);
	return e;
}

static const char *
wconn_error(struct jrnl *j)
{
	if (jrnl_test_unavailable())
		return "unavailable (test hook)";
	return j->drv->errmsg(j->wconn);
}

/*
 * Write a batch, falling back to one transaction per request (and then per
 * transition) when the database refuses the whole.  Sets each request's
 * result, *trans_ok to the transitions written and *trans_used to those
 * consumed (written or refused for good).  Returns JRNL_EUNAVAIL when the
 * connection failed; the rest is then left unwritten.
 */
static enum jrnl_err
write_batch(struct jrnl *j, struct jrnl_put_req **reqs, size_t nreq,
    struct jrnl_trans_rec **tr, size_t ntr, size_t *trans_ok,
    size_t *trans_used, uint64_t *commits)
{
	enum jrnl_err e;
	size_t i;

	*trans_ok = *trans_used = 0;
	e = tx_write(j, reqs, nreq, tr, ntr);
	if (e == JRNL_OK) {
		(*commits)++;
		for (i = 0; i < nreq; i++)
			reqs[i]->result = JRNL_OK;
		*trans_ok = *trans_used = ntr;
		return JRNL_OK;
	}
	if (e != JRNL_EUNAVAIL && nreq + ntr > 1) {
		log_warnx("journal: batch of %zu puts and %zu transitions "
		    "refused (%s); writing them one by one", nreq, ntr,
		    wconn_error(j));
		for (i = 0; i < nreq; i++) {
			e = tx_write(j, &reqs[i], 1, NULL, 0);
			reqs[i]->result = e;
			if (e == JRNL_EUNAVAIL)
				goto unavail;
			if (e == JRNL_OK)
				(*commits)++;
			else
				log_warnx("journal: put of %zu jobs refused: "
				    "%s", reqs[i]->n, wconn_error(j));
		}
		nreq = 0;
		for (i = 0; i < ntr; i++) {
			e = tx_write(j, NULL, 0, &tr[i], 1);
			if (e == JRNL_EUNAVAIL)
				return e;
			*trans_used = i + 1;
			if (e == JRNL_OK) {
				(*commits)++;
				(*trans_ok)++;
			} else
				log_warnx("journal: transition of job %s/%s "
				    "refused, dropped: %s", tr[i]->t.tenant,
				    tr[i]->t.job_id, wconn_error(j));
		}
		return JRNL_OK;
	}
	if (e != JRNL_EUNAVAIL) {
		/* One request or one transition, refused for good. */
		for (i = 0; i < nreq; i++)
			reqs[i]->result = e;
		*trans_used = ntr;
		log_warnx("journal: write refused: %s", wconn_error(j));
		return JRNL_OK;
	}
	i = 0;
unavail:
	for (; i < nreq; i++)
		reqs[i]->result = JRNL_EUNAVAIL;
	return JRNL_EUNAVAIL;
}

/* Writer state changes, under mu. */

void
jrnl_finish_req(struct jrnl *j, struct jrnl_put_req *r)
{
	if (r->cb != NULL) {
		r->state = JRNL_REQ_DONE;
		TAILQ_INSERT_TAIL(&j->settled, r, entry);
		return;
	}
	if (r->sync) {
		r->state = JRNL_REQ_DONE;
		return;
	}
	if (r->result != JRNL_OK)
		j->stats.jobs_dropped += r->n;
	j->async_jobs -= r->n;
	free(r->copy);
	free(r);
}

void
jrnl_settle_tickets(struct jrnl *j, enum jrnl_err err)
{
	struct jrnl_put_req *r;
	int64_t now = clock_mono_us();

	/* In order of want_trans, and of deadline. */
	while ((r = TAILQ_FIRST(&j->tickets)) != NULL) {
		if (err != JRNL_OK)
			r->result = err;
		else if (r->want_trans <= j->trans_done)
			r->result = JRNL_OK;
		else if (now >= r->deadline_mono_us)
			r->result = JRNL_EUNAVAIL;
		else
			break;
		TAILQ_REMOVE(&j->tickets, r, entry);
		jrnl_finish_req(j, r);
	}
}

static __thread int in_callbacks;

int
jrnl_in_callbacks(void)
{
	return in_callbacks;
}

void
jrnl_run_callbacks(struct jrnl *j)
{
	struct jrnl_put_list l;
	struct jrnl_put_req *r;

	if (TAILQ_EMPTY(&j->settled))
		return;
	TAILQ_INIT(&l);
	TAILQ_CONCAT(&l, &j->settled, entry);
	j->cb_rounds++;
	pthread_mutex_unlock(&j->mu);
	in_callbacks = 1;
	while ((r = TAILQ_FIRST(&l)) != NULL) {
		TAILQ_REMOVE(&l, r, entry);
		r->cb(r->result, r->cb_arg);
		free(r->copy);
		free(r);
	}
	in_callbacks = 0;
	if (j->cfg.callbacks_done != NULL)
		j->cfg.callbacks_done();
	pthread_mutex_lock(&j->mu);
	j->cb_rounds_done = j->cb_rounds;
	pthread_cond_broadcast(&j->done);	/* jrnl_settle() */
}

/* Fail whoever waits on a database that is not there. */
static void
fail_waiters(struct jrnl *j)
{
	struct jrnl_put_req *r, *next;
	int any = 0;

	for (r = TAILQ_FIRST(&j->puts); r != NULL; r = next) {
		next = TAILQ_NEXT(r, entry);
		if (!r->sync)
			continue;
		TAILQ_REMOVE(&j->puts, r, entry);
		r->result = JRNL_EUNAVAIL;
		if (r->cb != NULL)
			jrnl_finish_req(j, r);
		else
			r->state = JRNL_REQ_DONE;
		any = 1;
	}
	if (!TAILQ_EMPTY(&j->tickets)) {
		/* Their transitions stay queued, written once it is back. */
		jrnl_settle_tickets(j, JRNL_EUNAVAIL);
		any = 1;
	}
	if (j->flushers > 0) {
		j->fail_gen++;
		any = 1;
	}
	if (!TAILQ_EMPTY(&j->tasks)) {
		jrnl_fail_tasks(j);
		any = 1;
	}
	if (j->purge_req_gen > j->purge_done_gen) {
		j->purge_done_gen = j->purge_req_gen;
		j->purge_result = -1;
		j->purging = 0;
		any = 1;
	}
	if (any)
		pthread_cond_broadcast(&j->done);
}

static void
lost_connection(struct jrnl *j, const char *why)
{
	if (j->connected)
		log_warnx("journal: %s database unavailable: %s",
		    j->drv->name, why);
	snprintf(j->last_error, sizeof(j->last_error), "%s", why);
	j->connected = 0;
	j->stats.connected = 0;
	j->fail_gen++;
	j->purging = 0;
	j->backoff_us = j->backoff_us < BACKOFF_MIN_US ? BACKOFF_MIN_US :
	    j->backoff_us * 2;
	if (j->backoff_us > BACKOFF_MAX_US)
		j->backoff_us = BACKOFF_MAX_US;
	j->next_connect_mono_us = clock_mono_us() + j->backoff_us;
}

/* Called and returns with mu held; drops it while connecting. */
static void
try_connect(struct jrnl *j)
{
	struct jrnl_conn *c = NULL;
	char why[256] = "";
	enum jrnl_err e;

	j->last_connect_mono_us = clock_mono_us();
	pthread_mutex_unlock(&j->mu);
	if (j->wconn != NULL) {
		j->drv->close(j->wconn);
		j->wconn = NULL;
	}
	/*
	 * The database may be a new one (a failover, a restore): its schema
	 * is ensured.  And it must take a write, not only answer: a commit
	 * that failed on a full disk leaves a database that still connects.
	 */
	e = jrnl_connect_writer(j->drv, &j->url, j->cfg.timeout_ms,
	    j->cfg.mode == JRNL_MODE_SYNC, &c, why, sizeof(why));
	pthread_mutex_lock(&j->mu);
	if (e != JRNL_OK) {
		if (e == JRNL_ESCHEMA)
			log_warnx("journal: %s", why);
		else
			log_debug("journal: reconnect failed: %s", why);
		lost_connection(j, why);
		return;
	}
	j->wconn = c;
	j->connected = 1;
	j->stats.connected = 1;
	j->backoff_us = 0;
	j->next_ping_mono_us = clock_mono_us() + JRNL_PING_US;
	log_info("journal: %s database reachable again", j->drv->name);
}

/* The mode is fixed at open: all puts are SYNC or all are ASYNC. */
static int
has_sync_puts(struct jrnl *j)
{
	return j->cfg.mode == JRNL_MODE_SYNC && !TAILQ_EMPTY(&j->puts);
}

/* Take a batch, write it without mu, and settle it. */
static void
write_round(struct jrnl *j, int take_trans)
{
	struct jrnl_put_req *reqs[BATCH_REQS], *r;
	struct jrnl_trans_rec *tr[JRNL_BATCH_TRANS];
	size_t nreq = 0, ntr = 0, njobs = 0, i, ok, used, cap;
	uint64_t commits = 0, limit;
	enum jrnl_err e;
	int64_t now = clock_mono_us();
	char why[256];

	while ((r = TAILQ_FIRST(&j->puts)) != NULL && nreq < BATCH_REQS &&
	    (nreq == 0 || njobs + r->n <= BATCH_JOBS)) {
		TAILQ_REMOVE(&j->puts, r, entry);
		if (r->cb != NULL && now >= r->deadline_mono_us) {
			/* As a waiting caller would have given up. */
			r->result = JRNL_EUNAVAIL;
			jrnl_finish_req(j, r);
			continue;
		}
		TAILQ_INSERT_TAIL(&j->inflight, r, entry);
		r->state = JRNL_REQ_TAKEN;
		reqs[nreq++] = r;
		njobs += r->n;
	}
	/*
	 * Only the transitions queued before the oldest put left in the
	 * queue: a later one may move a job whose row that put writes, and
	 * applied first it would update nothing.  The queue is in seq order
	 * (puts taken back after a failure return to its head), and so is
	 * the ring, so this is a prefix of each.
	 */
	limit = (r = TAILQ_FIRST(&j->puts)) != NULL ? r->seq : UINT64_MAX;
	cap = j->cfg.queue_max;
	if (take_trans)
		for (; ntr < j->ring_len && ntr < JRNL_BATCH_TRANS; ntr++) {
			tr[ntr] = j->ring[(j->ring_head + ntr) % cap];
			if (tr[ntr]->put_seq >= limit)
				break;
		}
	if (nreq == 0 && ntr == 0) {
		/* Every put taken had expired. */
		pthread_cond_broadcast(&j->done);
		return;
	}
	if (nreq > 0)
		j->last_batch_reqs = nreq;
	pthread_mutex_unlock(&j->mu);
	e = write_batch(j, reqs, nreq, tr, ntr, &ok, &used, &commits);
	if (e == JRNL_EUNAVAIL)
		snprintf(why, sizeof(why), "%s", wconn_error(j));
	pthread_mutex_lock(&j->mu);

	j->stats.commits += commits;
	j->stats.transitions_written += ok;
	j->stats.transitions_dropped += used - ok;
	for (i = 0; i < used; i++) {
		free(j->ring[j->ring_head]);
		j->ring[j->ring_head] = NULL;
		j->ring_head = (j->ring_head + 1) % cap;
	}
	j->ring_len -= used;
	j->trans_done += used;
	if (take_trans)
		j->next_flush_mono_us = clock_mono_us() +
		    j->cfg.flush_interval_ms * 1000;
	/* Back to the head of the queue, in order, what must be retried. */
	for (i = nreq; i-- > 0;) {
		r = reqs[i];
		TAILQ_REMOVE(&j->inflight, r, entry);
		if (r->result == JRNL_EUNAVAIL && !r->sync) {
			r->state = JRNL_REQ_QUEUED;
			TAILQ_INSERT_HEAD(&j->puts, r, entry);
			continue;
		}
		if (r->result == JRNL_OK)
			j->stats.jobs_written += r->n;
		jrnl_finish_req(j, r);
	}
	jrnl_settle_tickets(j, JRNL_OK);
	if (e == JRNL_EUNAVAIL) {
		lost_connection(j, why);
		/* First retry at once: the failure may have been a blip. */
		j->next_connect_mono_us = clock_mono_us();
	}
	pthread_cond_broadcast(&j->done);
}

struct purge_sel {
	char	**keys;		/* tenant, id, tenant, id, ... */
	size_t	 n;
	size_t	 max;
};

static int
purge_row(const struct jrnl_val *cols, size_t ncols, void *arg)
{
	struct purge_sel *s = arg;

	if (s->n == s->max)
		return 1;
	if (ncols < 2 || cols[0].type == JRNL_V_NULL ||
	    cols[1].type == JRNL_V_NULL)
		return 0;
	s->keys[2 * s->n] = xstrndup(cols[0].p, cols[0].len);
	s->keys[2 * s->n + 1] = xstrndup(cols[1].p, cols[1].len);
	s->n++;
	return 0;
}

/*
 * One purge transaction; the number of jobs removed, or -1.  *more is set
 * when the batch was full, so there may be more to remove.
 */
static int64_t
purge_batch(struct jrnl *j, enum jrnl_err *ep, int *more)
{
	struct purge_sel s = { NULL, 0, (size_t)j->cfg.purge_batch };
	struct jrnl_val a[3];
	int64_t cutoff, removed = 0, ch;
	enum jrnl_err e;
	size_t i;

	cutoff = clock_wall_ms() - __atomic_load_n(&j->cfg.retention_ms,
	    __ATOMIC_RELAXED);
	s.keys = xcalloc((size_t)j->cfg.purge_batch * 2, sizeof(char *));
	if ((e = j->drv->begin(j->wconn)) != JRNL_OK)
		goto out;
	a[0] = jrnl_vint(cutoff);
	a[1] = jrnl_vint(j->cfg.purge_batch);
	e = jrnl_run(j->drv, j->wconn, JS_PURGE_SELECT, a, 2, purge_row, &s,
	    NULL);
	for (i = 0; e == JRNL_OK && i < s.n; i++) {
		a[0] = jrnl_vtext(s.keys[2 * i]);
		a[1] = jrnl_vtext(s.keys[2 * i + 1]);
		a[2] = jrnl_vint(cutoff);
		e = jrnl_run(j->drv, j->wconn, JS_PURGE_TRANS, a, 2, NULL,
		    NULL, NULL);
		if (e == JRNL_OK)
			e = jrnl_run(j->drv, j->wconn, JS_PURGE_JOB, a, 3,
			    NULL, NULL, &ch);
		if (e == JRNL_OK)
			removed += ch;
	}
	if (e == JRNL_OK)
		e = j->drv->commit(j->wconn);
	else
		j->drv->rollback(j->wconn);
out:
	for (i = 0; i < 2 * s.n; i++)
		free(s.keys[i]);
	free(s.keys);
	*ep = e;
	*more = s.n == (size_t)j->cfg.purge_batch;
	return e == JRNL_OK ? removed : -1;
}

static void
purge_round(struct jrnl *j)
{
	enum jrnl_err e;
	int64_t n;
	int more = 0;
	char why[256];

	if (!j->purging) {
		j->purging = 1;
		j->purge_cycle_gen = j->purge_req_gen;
	}
	pthread_mutex_unlock(&j->mu);
	n = purge_batch(j, &e, &more);
	if (e != JRNL_OK)
		snprintf(why, sizeof(why), "%s", wconn_error(j));
	pthread_mutex_lock(&j->mu);
	if (n < 0) {
		log_warnx("journal: purge failed: %s", why);
		j->purging = 0;
		j->next_purge_mono_us = clock_mono_us() +
		    j->cfg.purge_interval_ms * 1000;
		if (j->purge_req_gen > j->purge_done_gen) {
			j->purge_done_gen = j->purge_req_gen;
			j->purge_result = -1;
		}
		if (e == JRNL_EUNAVAIL)
			lost_connection(j, why);
		pthread_cond_broadcast(&j->done);
		return;
	}
	j->stats.purged += (uint64_t)n;
	if (more)
		return;		/* the next round goes on */
	j->purging = 0;
	j->next_purge_mono_us = clock_mono_us() +
	    j->cfg.purge_interval_ms * 1000;
	if (j->purge_cycle_gen > j->purge_done_gen) {
		j->purge_done_gen = j->purge_cycle_gen;
		j->purge_result = 0;
	}
	pthread_cond_broadcast(&j->done);
}

/* Tasks: a delete's steps (read.c), one a round. */

static void (*task_hook)(void *);
static void *task_hook_arg;

void
jrnl_test_set_task_hook(void (*fn)(void *), void *arg)
{
	task_hook = fn;
	task_hook_arg = arg;
}

void
jrnl_fail_tasks(struct jrnl *j)
{
	struct jrnl_task *t;

	while ((t = TAILQ_FIRST(&j->tasks)) != NULL) {
		TAILQ_REMOVE(&j->tasks, t, entry);
		t->result = JRNL_EUNAVAIL;
		t->done = 1;
	}
	pthread_cond_broadcast(&j->done);
}

void
jrnl_queue_task(struct jrnl *j, struct jrnl_task *t)
{
	t->done = 0;
	if (j->stopping) {
		t->result = JRNL_EUNAVAIL;
		t->done = 1;
		return;
	}
	TAILQ_INSERT_TAIL(&j->tasks, t, entry);
	pthread_cond_signal(&j->wake);
}

enum jrnl_err
jrnl_run_task(struct jrnl *j, jrnl_task_fn fn, void *arg)
{
	struct jrnl_task t = { .fn = fn, .arg = arg };

	pthread_mutex_lock(&j->mu);
	jrnl_queue_task(j, &t);
	while (!t.done)
		pthread_cond_wait(&j->done, &j->mu);
	pthread_mutex_unlock(&j->mu);
	return t.result;
}

static void
task_round(struct jrnl *j)
{
	struct jrnl_task *t = TAILQ_FIRST(&j->tasks);
	enum jrnl_err e;
	char why[256];

	TAILQ_REMOVE(&j->tasks, t, entry);
	j->task_turn = 0;
	pthread_mutex_unlock(&j->mu);
	e = t->fn(j, t->arg);
	if (e == JRNL_EUNAVAIL)
		snprintf(why, sizeof(why), "%s", wconn_error(j));
	if (task_hook != NULL)
		task_hook(task_hook_arg);
	pthread_mutex_lock(&j->mu);
	j->stats.delete_steps++;
	t->result = e;
	t->done = 1;
	if (e == JRNL_EUNAVAIL) {
		lost_connection(j, why);
		j->next_connect_mono_us = clock_mono_us();
	}
	pthread_cond_broadcast(&j->done);
}

static void
ping_round(struct jrnl *j)
{
	enum jrnl_err e;
	char why[256];

	pthread_mutex_unlock(&j->mu);
	e = jrnl_run(j->drv, j->wconn, JS_PING, NULL, 0, NULL, NULL, NULL);
	if (e != JRNL_OK)
		snprintf(why, sizeof(why), "%s", wconn_error(j));
	else if (j->drv->moved != NULL && j->drv->moved(j->wconn)) {
		/* Idle: found within a ping, not at the next write. */
		e = JRNL_EUNAVAIL;
		snprintf(why, sizeof(why), "%s", wconn_error(j));
	}
	pthread_mutex_lock(&j->mu);
	j->next_ping_mono_us = clock_mono_us() + JRNL_PING_US;
	if (e != JRNL_OK)
		lost_connection(j, why);
}

/* Stopping or flushing: write at once, gather nothing. */
static int
urgent_only(struct jrnl *j)
{
	return j->stopping || j->flushers > 0;
}

static int64_t
min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

void *
jrnl_writer_main(void *arg)
{
	struct jrnl *j = arg;
	int64_t now, deadline, gather_until = 0;
	int urgent, has_puts, trans_due, purge_due;

	pthread_mutex_lock(&j->mu);
	for (;;) {
		jrnl_settle_tickets(j, JRNL_OK);
		jrnl_run_callbacks(j);
		now = clock_mono_us();
		urgent = has_sync_puts(j) || j->flushers > 0 ||
		    !TAILQ_EMPTY(&j->tickets) || !TAILQ_EMPTY(&j->tasks) ||
		    j->purge_req_gen > j->purge_done_gen || j->stopping;
		if (!j->connected) {
			if (now >= j->next_connect_mono_us || (urgent &&
			    now >= j->last_connect_mono_us + RETRY_MIN_US))
				try_connect(j);
			if (!j->connected) {
				fail_waiters(j);
				jrnl_run_callbacks(j);
				if (j->stopping)
					break;
				jrnl_cv_wait_us(&j->wake, &j->mu,
				    j->next_connect_mono_us - clock_mono_us());
				continue;
			}
			now = clock_mono_us();
		}
		has_puts = !TAILQ_EMPTY(&j->puts);
		trans_due = j->ring_len > 0 && (has_puts || urgent ||
		    now >= j->next_flush_mono_us ||
		    j->ring_len >= JRNL_BATCH_TRANS);
		/*
		 * A task every other round while there is writing to do, so
		 * a big delete's steps and the puts take turns.
		 */
		if (!TAILQ_EMPTY(&j->tasks) && (j->task_turn ||
		    !(has_puts || trans_due))) {
			task_round(j);
			continue;
		}
		/*
		 * Group commit: let more puts join for the window, but only
		 * while puts come concurrently (the last batch had several):
		 * a lone caller would only wait for nobody.
		 */
		if (has_puts && j->cfg.commit_window_us > 0 &&
		    j->last_batch_reqs > 1 && !urgent_only(j)) {
			if (gather_until == 0)
				gather_until = now + j->cfg.commit_window_us;
			if (now < gather_until) {
				jrnl_cv_wait_us(&j->wake, &j->mu,
				    gather_until - now);
				continue;
			}
		}
		gather_until = 0;
		if (has_puts || trans_due) {
			write_round(j, trans_due);
			j->task_turn = 1;
			continue;
		}
		if (j->stopping)
			break;
		purge_due = j->purging || j->purge_req_gen >
		    j->purge_done_gen || now >= j->next_purge_mono_us;
		if (purge_due) {
			purge_round(j);
			continue;
		}
		if (now >= j->next_ping_mono_us) {
			ping_round(j);
			continue;
		}
		deadline = min64(j->next_purge_mono_us, j->next_ping_mono_us);
		if (j->ring_len > 0)
			deadline = min64(deadline, j->next_flush_mono_us);
		jrnl_cv_wait_us(&j->wake, &j->mu, deadline - now);
	}
	jrnl_run_callbacks(j);
	pthread_mutex_unlock(&j->mu);
	return NULL;
}
