/*
 * journal.c - the journal's handle and its writer thread: group commit of
 * job puts, batches of transitions, reconnection, retention purge.
 *
 * Key decision: one writer thread owns the writing connection and is the
 * only one that writes jobs and transitions.  jrnl_put_jobs() queues a
 * request and (SYNC) waits on a condition variable; the writer takes every
 * request queued when it starts a transaction, plus the transitions due,
 * and commits them together, so N concurrent puts cost one commit (one
 * fsync) instead of N: the requests that arrive while a commit runs form
 * the next batch by themselves, and commit_window_us can hold the writer a
 * little longer to gather more.  A batch the database refuses is retried
 * request by request so one bad row fails only its own put.  When the
 * database goes away the writer fails waiting SYNC puts at once
 * (JRNL_EUNAVAIL, the API answers 503), keeps ASYNC puts and transitions
 * queued (bounded: drops are counted), and reconnects with exponential
 * backoff.  Condition waits need a real clock: deadlines are computed with
 * clock_mono_us() and only the wait itself reads CLOCK_MONOTONIC.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "journal/internal.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define BATCH_JOBS		4096	/* jobs per transaction, about */
#define BATCH_REQS		1024
#define BATCH_TRANS		1024
#define BACKOFF_MIN_US		100000
#define BACKOFF_MAX_US		5000000
#define RETRY_MIN_US		100000	/* reconnect on demand, at most */
#define PING_US			1000000
#define MAX_WAIT_US		1000000	/* re-check at least this often */

static const char *const err_names[] = {
	[JRNL_OK] = "ok",
	[JRNL_EURL] = "bad journal URL",
	[JRNL_EUNAVAIL] = "journal database unavailable",
	[JRNL_ESCHEMA] = "journal schema unusable",
	[JRNL_EFULL] = "journal queue full",
	[JRNL_ENOTFOUND] = "not found",
	[JRNL_EINTERNAL] = "journal database refused the statement",
	[JRNL_EOFF] = "journal is off",
	[JRNL_EINVAL] = "invalid argument",
};

const char *
jrnl_strerror(enum jrnl_err err)
{
	if ((unsigned)err >= sizeof(err_names) / sizeof(err_names[0]))
		return "unknown journal error";
	return err_names[err];
}

int
jrnl_state_finished(const char *state)
{
	return state != NULL && (strcmp(state, "delivered") == 0 ||
	    strcmp(state, "cancelled") == 0);
}

/* Wait on cv for at most us microseconds of real time. */
static void
cv_wait_us(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t us)
{
	struct timespec ts;

	if (us <= 0)
		return;
	if (us > MAX_WAIT_US)
		us = MAX_WAIT_US;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += us / 1000000;
	ts.tv_nsec += (long)(us % 1000000) * 1000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	(void)pthread_cond_timedwait(cv, mu, &ts);
}

static void
cv_init_mono(pthread_cond_t *cv)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
}

/* Copy n jobs and their strings into one block; returns the array. */
static struct jrnl_job *
copy_jobs(const struct jrnl_job *jobs, size_t n)
{
	struct jrnl_job *out;
	size_t i, size = n * sizeof(*out);
	char *p;

#define SLEN(s)	((s) != NULL ? strlen(s) + 1 : 0)
	for (i = 0; i < n; i++)
		size += SLEN(jobs[i].tenant) + SLEN(jobs[i].topic) +
		    SLEN(jobs[i].id) + SLEN(jobs[i].bizkey) +
		    jobs[i].body_len + 1 + SLEN(jobs[i].headers_json) +
		    SLEN(jobs[i].schedule) + SLEN(jobs[i].state);
	out = xmalloc(size);
	p = (char *)(out + n);
#define SCOPY(dst, s) do {						\
	if ((s) == NULL) {						\
		(dst) = NULL;						\
		break;							\
	}								\
	size_t len_ = strlen(s) + 1;					\
	memcpy(p, (s), len_);						\
	(dst) = p;							\
	p += len_;							\
} while (0)
	for (i = 0; i < n; i++) {
		out[i] = jobs[i];
		SCOPY(out[i].tenant, jobs[i].tenant);
		SCOPY(out[i].topic, jobs[i].topic);
		SCOPY(out[i].id, jobs[i].id);
		SCOPY(out[i].bizkey, jobs[i].bizkey);
		SCOPY(out[i].headers_json, jobs[i].headers_json);
		SCOPY(out[i].schedule, jobs[i].schedule);
		SCOPY(out[i].state, jobs[i].state);
		if (jobs[i].body_len > 0)
			memcpy(p, jobs[i].body, jobs[i].body_len);
		p[jobs[i].body_len] = '\0';
		out[i].body = p;
		p += jobs[i].body_len + 1;
	}
#undef SCOPY
#undef SLEN
	return out;
}

/* Cut s to at most max bytes without splitting a UTF-8 sequence. */
static size_t
cut_utf8(const char *s, size_t len, size_t max)
{
	if (len <= max)
		return len;
	while (max > 0 && ((unsigned char)s[max] & 0xc0) == 0x80)
		max--;
	return max;
}

static struct jrnl_trans_rec *
copy_transition(const struct jrnl_transition *t)
{
	struct jrnl_trans_rec *r;
	size_t lt, lj, lf, lto, le, lx;
	char *p;

	lt = strlen(t->tenant) + 1;
	lj = strlen(t->job_id) + 1;
	lf = t->from_state != NULL ? strlen(t->from_state) + 1 : 0;
	lto = strlen(t->to_state) + 1;
	le = t->error != NULL ? cut_utf8(t->error, strlen(t->error),
	    JRNL_ERROR_MAX) + 1 : 0;
	lx = t->excerpt != NULL ? (t->excerpt_len > JRNL_EXCERPT_MAX ?
	    JRNL_EXCERPT_MAX : t->excerpt_len) : 0;
	r = xmalloc(sizeof(*r) + lt + lj + lf + lto + le + lx + 1);
	r->t = *t;
	p = r->data;
	memcpy(p, t->tenant, lt);
	r->t.tenant = p;
	p += lt;
	memcpy(p, t->job_id, lj);
	r->t.job_id = p;
	p += lj;
	if (lf > 0) {
		memcpy(p, t->from_state, lf);
		r->t.from_state = p;
		p += lf;
	}
	memcpy(p, t->to_state, lto);
	r->t.to_state = p;
	p += lto;
	if (le > 0) {
		memcpy(p, t->error, le - 1);
		p[le - 1] = '\0';
		r->t.error = p;
		p += le;
	}
	if (t->excerpt != NULL) {
		if (lx > 0)
			memcpy(p, t->excerpt, lx);
		r->t.excerpt = p;
		r->t.excerpt_len = lx;
	}
	r->t.instance = NULL;
	r->t.host = NULL;
	return r;
}

/* Writing, on the writer's connection. */

static enum jrnl_err
put_job(struct jrnl *j, const struct jrnl_job *job)
{
	struct jrnl_val a[15];
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
	return jrnl_run(j->drv, j->wconn, JS_JOB_UPSERT, a, 15, NULL, NULL,
	    NULL);
}

static enum jrnl_err
put_transition(struct jrnl *j, const struct jrnl_transition *t)
{
	struct jrnl_val a[13];
	enum jrnl_err e;

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
	e = jrnl_run(j->drv, j->wconn, JS_TRANS_INSERT, a, 13, NULL, NULL,
	    NULL);
	if (e != JRNL_OK)
		return e;
	a[0] = jrnl_vtext(t->to_state);
	a[1] = jrnl_vint(t->attempt);
	a[2] = jrnl_vint(t->attempt);
	a[3] = jrnl_vint(t->at_ms);
	a[4] = jrnl_state_finished(t->to_state) ? jrnl_vint(t->at_ms) :
	    jrnl_vtext(NULL);
	a[5] = jrnl_vtext(t->tenant);
	a[6] = jrnl_vtext(t->job_id);
	a[7] = jrnl_vint(t->at_ms);
	return jrnl_run(j->drv, j->wconn, JS_JOB_APPLY, a, 8, NULL, NULL,
	    NULL);
}

/* One transaction: the jobs of reqs, then the transitions tr. */
static enum jrnl_err
tx_write(struct jrnl *j, struct jrnl_put_req **reqs, size_t nreq,
    struct jrnl_trans_rec **tr, size_t ntr)
{
	enum jrnl_err e;
	size_t i, k;

	if ((e = j->drv->begin(j->wconn)) != JRNL_OK)
		return e;
	for (i = 0; i < nreq; i++)
		for (k = 0; k < reqs[i]->n; k++)
			if ((e = put_job(j, &reqs[i]->jobs[k])) != JRNL_OK)
				goto fail;
	for (i = 0; i < ntr; i++)
		if ((e = put_transition(j, &tr[i]->t)) != JRNL_OK)
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

static void
finish_req(struct jrnl *j, struct jrnl_put_req *r)
{
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
		r->state = JRNL_REQ_DONE;
		any = 1;
	}
	if (j->flushers > 0) {
		j->fail_gen++;
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
	e = jrnl_connect(j->drv, &j->url, j->cfg.timeout_ms,
	    j->cfg.mode == JRNL_MODE_SYNC, &c, why, sizeof(why));
	pthread_mutex_lock(&j->mu);
	if (e != JRNL_OK) {
		log_debug("journal: reconnect failed: %s", why);
		lost_connection(j, why);
		return;
	}
	j->wconn = c;
	j->connected = 1;
	j->stats.connected = 1;
	j->backoff_us = 0;
	j->next_ping_mono_us = clock_mono_us() + PING_US;
	log_info("journal: %s database reachable again", j->drv->name);
}

static int
has_sync_puts(struct jrnl *j)
{
	struct jrnl_put_req *r;

	TAILQ_FOREACH(r, &j->puts, entry)
		if (r->sync)
			return 1;
	return 0;
}

/* Take a batch, write it without mu, and settle it. */
static void
write_round(struct jrnl *j, int take_trans)
{
	struct jrnl_put_req *reqs[BATCH_REQS], *r;
	struct jrnl_trans_rec *tr[BATCH_TRANS];
	size_t nreq = 0, ntr = 0, njobs = 0, i, ok, used, cap;
	uint64_t commits = 0;
	enum jrnl_err e;
	char why[256];

	while ((r = TAILQ_FIRST(&j->puts)) != NULL && nreq < BATCH_REQS &&
	    (nreq == 0 || njobs + r->n <= BATCH_JOBS)) {
		TAILQ_REMOVE(&j->puts, r, entry);
		TAILQ_INSERT_TAIL(&j->inflight, r, entry);
		r->state = JRNL_REQ_TAKEN;
		reqs[nreq++] = r;
		njobs += r->n;
	}
	cap = j->cfg.queue_max;
	if (take_trans)
		for (; ntr < j->ring_len && ntr < BATCH_TRANS; ntr++)
			tr[ntr] = j->ring[(j->ring_head + ntr) % cap];
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
		finish_req(j, r);
	}
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
};

static int
purge_row(const struct jrnl_val *cols, size_t ncols, void *arg)
{
	struct purge_sel *s = arg;

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
	struct purge_sel s = { NULL, 0 };
	struct jrnl_val a[3];
	int64_t cutoff, removed = 0, ch;
	enum jrnl_err e;
	size_t i;

	cutoff = clock_wall_ms() - j->cfg.retention_ms;
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

static void
ping_round(struct jrnl *j)
{
	enum jrnl_err e;
	char why[256];

	pthread_mutex_unlock(&j->mu);
	e = jrnl_run(j->drv, j->wconn, JS_PING, NULL, 0, NULL, NULL, NULL);
	if (e != JRNL_OK)
		snprintf(why, sizeof(why), "%s", wconn_error(j));
	pthread_mutex_lock(&j->mu);
	j->next_ping_mono_us = clock_mono_us() + PING_US;
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

static void *
writer_main(void *arg)
{
	struct jrnl *j = arg;
	int64_t now, deadline, gather_until = 0;
	int urgent, has_puts, trans_due, purge_due;

	pthread_mutex_lock(&j->mu);
	for (;;) {
		now = clock_mono_us();
		urgent = has_sync_puts(j) || j->flushers > 0 ||
		    j->purge_req_gen > j->purge_done_gen || j->stopping;
		if (!j->connected) {
			if (now >= j->next_connect_mono_us || (urgent &&
			    now >= j->last_connect_mono_us + RETRY_MIN_US))
				try_connect(j);
			if (!j->connected) {
				fail_waiters(j);
				if (j->stopping)
					break;
				cv_wait_us(&j->wake, &j->mu,
				    j->next_connect_mono_us - clock_mono_us());
				continue;
			}
			now = clock_mono_us();
		}
		has_puts = !TAILQ_EMPTY(&j->puts);
		trans_due = j->ring_len > 0 && (has_puts || urgent ||
		    now >= j->next_flush_mono_us ||
		    j->ring_len >= BATCH_TRANS);
		/* Group commit: let more puts join for the window. */
		if (has_puts && j->cfg.commit_window_us > 0 && !urgent_only(j)) {
			if (gather_until == 0)
				gather_until = now + j->cfg.commit_window_us;
			if (now < gather_until) {
				cv_wait_us(&j->wake, &j->mu, gather_until - now);
				continue;
			}
		}
		gather_until = 0;
		if (has_puts || trans_due) {
			write_round(j, trans_due);
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
		cv_wait_us(&j->wake, &j->mu, deadline - now);
	}
	pthread_mutex_unlock(&j->mu);
	return NULL;
}

/* Public API. */

static void
fill_defaults(struct jrnl_config *c)
{
	if (c->flush_interval_ms <= 0)
		c->flush_interval_ms = 100;
	if (c->retention_ms <= 0)
		c->retention_ms = 30LL * 24 * 3600 * 1000;
	if (c->commit_window_us < 0)
		c->commit_window_us = 0;
	if (c->timeout_ms <= 0)
		c->timeout_ms = 2000;
	if (c->queue_max == 0)
		c->queue_max = 100000;
	if (c->purge_interval_ms <= 0)
		c->purge_interval_ms = 60000;
	if (c->purge_batch <= 0)
		c->purge_batch = 500;
	c->instance = xstrdup(c->instance != NULL ? c->instance : "");
	c->host = xstrdup(c->host != NULL ? c->host : "");
	c->url = xstrdup(c->url != NULL ? c->url : "");
}

static void
jrnl_free(struct jrnl *j)
{
	free((char *)j->cfg.instance);
	free((char *)j->cfg.host);
	free((char *)j->cfg.url);
	jrnl_url_free(&j->url);
	free(j->ring);
	free(j);
}

struct jrnl *
jrnl_open(const struct jrnl_config *cfg, enum jrnl_err *err, char *why,
    size_t whylen)
{
	struct jrnl *j = xcalloc(1, sizeof(*j));
	enum jrnl_err e;
	int rc;

	j->cfg = *cfg;
	fill_defaults(&j->cfg);
	TAILQ_INIT(&j->puts);
	TAILQ_INIT(&j->inflight);
	if ((e = jrnl_url_parse(j->cfg.url, &j->url, why, whylen)) != JRNL_OK)
		goto fail;
	if (j->url.kind == JRNL_KIND_NONE || j->cfg.mode == JRNL_MODE_OFF) {
		j->off = 1;
		j->cfg.mode = JRNL_MODE_OFF;
		*err = JRNL_OK;
		return j;
	}
	j->drv = j->url.kind == JRNL_KIND_MYSQL ? &jrnl_mysql_driver :
	    &jrnl_sqlite_driver;
	e = jrnl_connect(j->drv, &j->url, j->cfg.timeout_ms,
	    j->cfg.mode == JRNL_MODE_SYNC, &j->wconn, why, whylen);
	if (e != JRNL_OK)
		goto fail;
	if ((e = jrnl_schema_ensure(j->drv, j->wconn, why, whylen)) != JRNL_OK)
		goto fail;
	j->ring = xcalloc(j->cfg.queue_max, sizeof(*j->ring));
	pthread_mutex_init(&j->mu, NULL);
	pthread_mutex_init(&j->rmu, NULL);
	cv_init_mono(&j->wake);
	cv_init_mono(&j->done);
	j->connected = 1;
	j->stats.connected = 1;
	j->next_flush_mono_us = clock_mono_us();
	j->next_ping_mono_us = j->next_flush_mono_us + PING_US;
	j->next_purge_mono_us = j->next_flush_mono_us +
	    j->cfg.purge_interval_ms * 1000;
	if ((rc = pthread_create(&j->writer, NULL, writer_main, j)) != 0) {
		snprintf(why, whylen, "journal writer thread: %s",
		    strerror(rc));
		e = JRNL_EINTERNAL;
		pthread_mutex_destroy(&j->mu);
		pthread_mutex_destroy(&j->rmu);
		pthread_cond_destroy(&j->wake);
		pthread_cond_destroy(&j->done);
		goto fail;
	}
	j->writer_started = 1;
	*err = JRNL_OK;
	return j;
fail:
	if (j->wconn != NULL)
		j->drv->close(j->wconn);
	jrnl_free(j);
	*err = e;
	return NULL;
}

void
jrnl_close(struct jrnl *j)
{
	struct jrnl_put_req *r;
	size_t lost_t, lost_j = 0;

	if (j == NULL)
		return;
	if (j->off) {
		jrnl_free(j);
		return;
	}
	(void)jrnl_flush(j);
	pthread_mutex_lock(&j->mu);
	j->stopping = 1;
	pthread_cond_signal(&j->wake);
	pthread_mutex_unlock(&j->mu);
	pthread_join(j->writer, NULL);

	lost_t = j->ring_len;
	while (j->ring_len > 0) {
		free(j->ring[j->ring_head]);
		j->ring_head = (j->ring_head + 1) % j->cfg.queue_max;
		j->ring_len--;
	}
	while ((r = TAILQ_FIRST(&j->puts)) != NULL) {
		TAILQ_REMOVE(&j->puts, r, entry);
		lost_j += r->n;
		r->result = JRNL_EUNAVAIL;
		finish_req(j, r);
	}
	if (lost_t > 0 || lost_j > 0)
		log_warnx("journal: closed with %zu transitions and %zu "
		    "ASYNC jobs unwritten", lost_t, lost_j);
	if (j->wconn != NULL)
		j->drv->close(j->wconn);
	jrnl_read_close(j);
	pthread_mutex_destroy(&j->mu);
	pthread_mutex_destroy(&j->rmu);
	pthread_cond_destroy(&j->wake);
	pthread_cond_destroy(&j->done);
	jrnl_free(j);
}

static int
job_valid(const struct jrnl_job *job)
{
	return job->tenant != NULL && job->topic != NULL && job->id != NULL &&
	    (job->body != NULL || job->body_len == 0);
}

enum jrnl_err
jrnl_put_jobs(struct jrnl *j, const struct jrnl_job *jobs, size_t n)
{
	struct jrnl_put_req req, *r;
	enum jrnl_err e;
	int64_t deadline;
	size_t i;

	if (j == NULL || (jobs == NULL && n > 0))
		return JRNL_EINVAL;
	if (j->off || n == 0)
		return JRNL_OK;
	for (i = 0; i < n; i++)
		if (!job_valid(&jobs[i]))
			return JRNL_EINVAL;
	if (j->cfg.mode == JRNL_MODE_ASYNC) {
		pthread_mutex_lock(&j->mu);
		if (j->async_jobs + n > j->cfg.queue_max) {
			j->stats.jobs_dropped += n;
			pthread_mutex_unlock(&j->mu);
			return JRNL_EFULL;
		}
		pthread_mutex_unlock(&j->mu);
		r = xcalloc(1, sizeof(*r));
		r->copy = copy_jobs(jobs, n);
		r->jobs = r->copy;
		r->n = n;
		pthread_mutex_lock(&j->mu);
		j->async_jobs += n;
		r->seq = ++j->put_seq;
		TAILQ_INSERT_TAIL(&j->puts, r, entry);
		pthread_cond_signal(&j->wake);
		pthread_mutex_unlock(&j->mu);
		return JRNL_OK;
	}

	memset(&req, 0, sizeof(req));
	req.jobs = jobs;
	req.n = n;
	req.sync = 1;
	req.state = JRNL_REQ_QUEUED;
	pthread_mutex_lock(&j->mu);
	req.seq = ++j->put_seq;
	TAILQ_INSERT_TAIL(&j->puts, &req, entry);
	pthread_cond_signal(&j->wake);
	deadline = clock_mono_us() + j->cfg.timeout_ms * 1000;
	while (req.state != JRNL_REQ_DONE) {
		if (req.state == JRNL_REQ_QUEUED &&
		    clock_mono_us() >= deadline) {
			/* Never taken: it will not be written. */
			TAILQ_REMOVE(&j->puts, &req, entry);
			req.result = JRNL_EUNAVAIL;
			break;
		}
		cv_wait_us(&j->done, &j->mu, deadline - clock_mono_us() > 0 ?
		    deadline - clock_mono_us() : MAX_WAIT_US);
	}
	e = req.result;
	pthread_mutex_unlock(&j->mu);
	return e;
}

void
jrnl_transition(struct jrnl *j, const struct jrnl_transition *t)
{
	struct jrnl_trans_rec *r;
	uint64_t dropped;

	if (j == NULL || j->off || t == NULL || t->tenant == NULL ||
	    t->job_id == NULL || t->to_state == NULL)
		return;
	r = copy_transition(t);
	pthread_mutex_lock(&j->mu);
	if (j->ring_len == j->cfg.queue_max) {
		dropped = ++j->stats.transitions_dropped;
		pthread_mutex_unlock(&j->mu);
		if (dropped == 1 || dropped % 1000 == 0)
			log_warnx("journal: transition queue full (%zu), "
			    "%llu transitions dropped so far",
			    j->cfg.queue_max, (unsigned long long)dropped);
		free(r);
		return;
	}
	j->ring[(j->ring_head + j->ring_len) % j->cfg.queue_max] = r;
	j->ring_len++;
	j->trans_in++;
	if (j->ring_len == 1 || j->ring_len == BATCH_TRANS)
		pthread_cond_signal(&j->wake);
	pthread_mutex_unlock(&j->mu);
}

/* The oldest put not yet settled, or past the last one handed out. */
static uint64_t
oldest_put(struct jrnl *j)
{
	struct jrnl_put_req *r;

	if ((r = TAILQ_FIRST(&j->inflight)) != NULL)
		return r->seq;
	if ((r = TAILQ_FIRST(&j->puts)) != NULL)
		return r->seq;
	return j->put_seq + 1;
}

int
jrnl_flush(struct jrnl *j)
{
	uint64_t want_t, want_p, gen;
	int64_t deadline;
	int rc = 0;

	if (j == NULL || j->off)
		return 0;
	pthread_mutex_lock(&j->mu);
	want_t = j->trans_in;
	want_p = j->put_seq;
	gen = j->fail_gen;
	j->flushers++;
	pthread_cond_signal(&j->wake);
	deadline = clock_mono_us() + j->cfg.timeout_ms * 1000 * 5;
	while (j->trans_done < want_t || oldest_put(j) <= want_p) {
		if (j->fail_gen != gen || clock_mono_us() >= deadline) {
			rc = -1;
			break;
		}
		cv_wait_us(&j->done, &j->mu, deadline - clock_mono_us());
	}
	j->flushers--;
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int
jrnl_purge(struct jrnl *j)
{
	uint64_t gen;
	int rc;

	if (j == NULL || j->off)
		return 0;
	pthread_mutex_lock(&j->mu);
	gen = ++j->purge_req_gen;
	pthread_cond_signal(&j->wake);
	while (j->purge_done_gen < gen)
		cv_wait_us(&j->done, &j->mu, MAX_WAIT_US);
	rc = j->purge_result;
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int
jrnl_ready(struct jrnl *j, char *why, size_t whylen)
{
	int ok;

	if (j == NULL)
		return 0;
	if (j->off)
		return 1;
	pthread_mutex_lock(&j->mu);
	ok = j->connected;
	if (!ok && why != NULL)
		snprintf(why, whylen, "journal: %s", j->last_error);
	pthread_mutex_unlock(&j->mu);
	return ok;
}

void
jrnl_get_stats(struct jrnl *j, struct jrnl_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (j == NULL || j->off)
		return;
	pthread_mutex_lock(&j->mu);
	*st = j->stats;
	st->queued_transitions = j->ring_len;
	st->queued_jobs = j->async_jobs;
	st->connected = j->connected;
	pthread_mutex_unlock(&j->mu);
}
