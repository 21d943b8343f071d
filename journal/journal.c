/*
 * journal.c - the journal's handle and public entry points: open and
 * close, queueing puts and transitions, flush, purge, readiness.
 *
 * Key decision: callers never touch the database.  jrnl_put_jobs() queues a
 * request for the writer thread (writer.c) and, in SYNC mode, sleeps on a
 * condition variable until the batch holding it commits; the request lives
 * on the caller's stack because the caller always waits for it to be
 * settled or takes it back out of the queue itself (at its deadline, if the
 * writer never took it).  jrnl_put_jobs_cb() queues a copy instead and
 * the writer calls back once it is settled (what lets the HTTP push path
 * wait for the commit without holding a thread, so every push in flight
 * can share one group commit).  ASYNC puts and transitions are copied into
 * the queue and the caller goes on; both queues are bounded by queue_max, and
 * what does not fit is refused (puts, JRNL_EFULL) or dropped and counted
 * (transitions), never grown without bound.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "journal/internal.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/xmalloc.h"


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

/*
 * Wait on cv for at most us microseconds (and at most JRNL_MAX_WAIT_US), on
 * the real clock (clock_cond_wait_us); deadlines come from clock_mono_us().
 */
void
jrnl_cv_wait_us(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t us)
{
	if (us > JRNL_MAX_WAIT_US)
		us = JRNL_MAX_WAIT_US;
	(void)clock_cond_wait_us(cv, mu, us);
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

/*
 * Transitions this thread had dropped (the ring full), and how many of them
 * its last flush ticket told of: a change's transitions are queued from the
 * thread that then takes its ticket (the scheduler's hook runs on the
 * caller's thread), so a ticket can answer for the drops before it.
 */
static __thread uint64_t thread_drops;
static __thread uint64_t thread_drops_told;

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
	else if (c->commit_window_us > 100000)
		c->commit_window_us = 100000;
	if (c->timeout_ms <= 0)
		c->timeout_ms = 2000;
	if (c->queue_max == 0)
		c->queue_max = 100000;
	if (c->purge_interval_ms <= 0)
		c->purge_interval_ms = 60000;
	if (c->purge_batch <= 0)
		c->purge_batch = 500;
	if (c->delete_batch <= 0)
		c->delete_batch = 1000;
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
	TAILQ_INIT(&j->settled);
	TAILQ_INIT(&j->tickets);
	TAILQ_INIT(&j->tasks);
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
	e = jrnl_connect_writer(j->drv, &j->url, j->cfg.timeout_ms,
	    j->cfg.mode == JRNL_MODE_SYNC, &j->wconn, why, whylen);
	if (e == JRNL_EUNAVAIL && j->cfg.start_unavailable) {
		log_warnx("journal: %s; retrying in the background", why);
		snprintf(j->last_error, sizeof(j->last_error), "%s", why);
	} else if (e != JRNL_OK)
		goto fail;
	j->ring = xcalloc(j->cfg.queue_max, sizeof(*j->ring));
	pthread_mutex_init(&j->mu, NULL);
	pthread_mutex_init(&j->rmu, NULL);
	clock_cond_init(&j->wake);
	clock_cond_init(&j->done);
	j->connected = j->wconn != NULL;
	j->stats.connected = j->connected;
	j->next_ping_mono_us = clock_mono_us() + JRNL_PING_US;
	j->next_flush_mono_us = clock_mono_us() +
	    j->cfg.flush_interval_ms * 1000;
	j->next_purge_mono_us = clock_mono_us() +
	    j->cfg.purge_interval_ms * 1000;
	if ((rc = pthread_create(&j->writer, NULL, jrnl_writer_main, j)) != 0) {
		snprintf(why, whylen, "journal writer thread: %s",
		    strerror(rc));
		e = JRNL_EINTERNAL;
		pthread_mutex_destroy(&j->mu);
		pthread_mutex_destroy(&j->rmu);
		pthread_cond_destroy(&j->wake);
		pthread_cond_destroy(&j->done);
		goto fail;
	}
	(void)pthread_setname_np(j->writer, "jrnl-writer");
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
		jrnl_finish_req(j, r);
	}
	pthread_mutex_lock(&j->mu);
	jrnl_settle_tickets(j, JRNL_EUNAVAIL);
	jrnl_fail_tasks(j);
	jrnl_run_callbacks(j);
	pthread_mutex_unlock(&j->mu);
	if (lost_t > 0 || lost_j > 0)
		log_warnx("journal: closed with %zu transitions and %zu "
		    "ASYNC jobs unwritten", lost_t, lost_j);
	log_info("journal: closed after %llu commits of %llu jobs and %llu "
	    "transitions", (unsigned long long)j->stats.commits,
	    (unsigned long long)j->stats.jobs_written,
	    (unsigned long long)j->stats.transitions_written);
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
	int64_t deadline, left;
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
		/* Written after the return: nobody left to tell. */
		for (i = 0; i < n; i++)
			((struct jrnl_job *)r->copy)[i].contested = NULL;
		r->jobs = r->copy;
		r->n = n;
		pthread_mutex_lock(&j->mu);
		if (j->async_jobs + n > j->cfg.queue_max) {	/* raced */
			j->stats.jobs_dropped += n;
			pthread_mutex_unlock(&j->mu);
			free(r->copy);
			free(r);
			return JRNL_EFULL;
		}
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
		left = deadline - clock_mono_us();
		jrnl_cv_wait_us(&j->done, &j->mu, left > 0 ? left :
		    JRNL_MAX_WAIT_US);
	}
	e = req.result;
	pthread_mutex_unlock(&j->mu);
	return e;
}

enum jrnl_err
jrnl_put_jobs_cb(struct jrnl *j, const struct jrnl_job *jobs, size_t n,
    jrnl_done_fn done, void *arg)
{
	struct jrnl_put_req *r;
	enum jrnl_err e;
	size_t i;

	if (j == NULL || done == NULL || (jobs == NULL && n > 0))
		return JRNL_EINVAL;
	for (i = 0; i < n; i++)
		if (!job_valid(&jobs[i]))
			return JRNL_EINVAL;
	if (j->off || n == 0 || j->cfg.mode == JRNL_MODE_ASYNC) {
		if ((e = jrnl_put_jobs(j, jobs, n)) != JRNL_OK)
			return e;
		done(JRNL_OK, arg);
		return JRNL_OK;
	}
	r = xcalloc(1, sizeof(*r));
	r->copy = copy_jobs(jobs, n);
	r->jobs = r->copy;
	r->n = n;
	r->sync = 1;
	r->cb = done;
	r->cb_arg = arg;
	r->state = JRNL_REQ_QUEUED;
	r->deadline_mono_us = clock_mono_us() + j->cfg.timeout_ms * 1000;
	pthread_mutex_lock(&j->mu);
	r->seq = ++j->put_seq;
	TAILQ_INSERT_TAIL(&j->puts, r, entry);
	pthread_mutex_unlock(&j->mu);
	/* After the unlock: the writer woken does not wait for mu. */
	pthread_cond_signal(&j->wake);
	return JRNL_OK;
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
		thread_drops++;
		if (dropped == 1 || dropped % 1000 == 0)
			log_warnx("journal: transition queue full (%zu), "
			    "%llu transitions dropped so far",
			    j->cfg.queue_max, (unsigned long long)dropped);
		free(r);
		return;
	}
	r->put_seq = j->put_seq;
	j->ring[(j->ring_head + j->ring_len) % j->cfg.queue_max] = r;
	j->ring_len++;
	j->trans_in++;
	if (j->ring_len == 1 || j->ring_len == JRNL_BATCH_TRANS)
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
		jrnl_cv_wait_us(&j->done, &j->mu, deadline - clock_mono_us());
	}
	j->flushers--;
	pthread_mutex_unlock(&j->mu);
	return rc;
}

int
jrnl_settle(struct jrnl *j)
{
	uint64_t want;
	int64_t deadline;
	int rc;

	if (j == NULL || j->off)
		return 0;
	rc = jrnl_flush(j);
	pthread_mutex_lock(&j->mu);
	/*
	 * The puts flushed are settled, called back in the round running
	 * now or, still on the settled list, in the next one: the writer
	 * runs the rounds one after the other.
	 */
	want = j->cb_rounds + !TAILQ_EMPTY(&j->settled);
	deadline = clock_mono_us() + j->cfg.timeout_ms * 1000;
	while (j->cb_rounds_done < want) {
		if (clock_mono_us() >= deadline) {
			rc = -1;
			break;
		}
		pthread_cond_signal(&j->wake);
		jrnl_cv_wait_us(&j->done, &j->mu, deadline - clock_mono_us());
	}
	pthread_mutex_unlock(&j->mu);
	return rc;
}

enum jrnl_err
jrnl_flush_cb(struct jrnl *j, jrnl_done_fn done, void *arg)
{
	struct jrnl_put_req *r;

	if (j == NULL || done == NULL)
		return JRNL_EINVAL;
	if (j->off) {
		done(JRNL_OK, arg);
		return JRNL_OK;
	}
	if (thread_drops != thread_drops_told) {
		/* One of them will never be written: nothing to wait for. */
		thread_drops_told = thread_drops;
		return JRNL_EFULL;
	}
	r = xcalloc(1, sizeof(*r));
	r->sync = 1;
	r->cb = done;
	r->cb_arg = arg;
	r->state = JRNL_REQ_QUEUED;
	r->deadline_mono_us = clock_mono_us() + j->cfg.timeout_ms * 1000 * 5;
	pthread_mutex_lock(&j->mu);
	if (j->trans_done >= j->trans_in) {
		/* Nothing queued: everything before the call is written. */
		pthread_mutex_unlock(&j->mu);
		free(r);
		done(JRNL_OK, arg);
		return JRNL_OK;
	}
	r->want_trans = j->trans_in;
	TAILQ_INSERT_TAIL(&j->tickets, r, entry);
	pthread_mutex_unlock(&j->mu);
	/* After the unlock: the writer woken does not wait for mu. */
	pthread_cond_signal(&j->wake);
	return JRNL_OK;
}

void
jrnl_set_retention(struct jrnl *j, int64_t retention_ms)
{
	if (j == NULL || retention_ms <= 0)
		return;
	__atomic_store_n(&j->cfg.retention_ms, retention_ms,
	    __ATOMIC_RELAXED);
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
		jrnl_cv_wait_us(&j->done, &j->mu, JRNL_MAX_WAIT_US);
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
