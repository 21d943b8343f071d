/*
 * jobs_journal.c - what the job routes read from and write to the journal:
 * the one place where accepted jobs are journaled, the removals that keep
 * a journaled job Redis did not make from coming back in a restore, and the
 * listing of a tenant's jobs (the journal indexes them by tenant, Redis
 * does not).
 *
 * The push routes journal through api_journal_jobs_cb(): the journal calls
 * back once the rows are committed, so no HTTP thread waits for the
 * group commit (jobs.c parks the request meanwhile).  The routes that
 * change a job in Redis (cancel, reschedule, retry, redrive) wait the same
 * way for their transitions, through api_change_durable() and a flush
 * ticket of the journal.
 *
 * Key decision: the row of a journaled job that Redis does not make is
 * removed through an ordinary (void) transition, and in sync mode the
 * caller flushes the transitions before it answers, so the removal is
 * durable whenever the answer says the job was not made (or was
 * deduplicated).
 */
#include "config.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "api/api.h"
#include "api/internal.h"
#include "api/jobs_journal.h"
#include "api/validate.h"
#include "conf.h"
#include "journal/journal.h"
#include "scheduler/registry.h"
#include "scheduler/sched.h"
#include "util/clock.h"
#include "util/crypto.h"
#include "util/id.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define LIST_LIMIT_DEFAULT	100
#define LIST_LIMIT_MAX		1000

/* ------------------------------------------------------------------ */
/* Writing */

int
api_need_journal(struct api_req *req, const char *what)
{
	if (api_ctx_of(req)->jrnl != NULL)
		return 0;
	api_error(req, 501, "not_supported", NULL,
	    "%s needs the journal, and it is off (journal.url = \"none\")",
	    what);
	return -1;
}

/* The journal's rows of jobs (pointing into them); free() the array. */
static struct jrnl_job *
journal_rows(const char *tenant, const char *topic,
    const struct api_job_in *jobs, size_t n)
{
	struct jrnl_job *jj;
	size_t i;

	jj = xcalloc(n, sizeof(*jj));
	for (i = 0; i < n; i++) {
		jj[i].tenant = tenant;
		jj[i].topic = topic;
		jj[i].id = jobs[i].id;
		jj[i].bizkey = jobs[i].bizkey;
		jj[i].due_ms = jobs[i].run_at_ms;
		jj[i].priority = jobs[i].priority;
		jj[i].body = jobs[i].body;
		jj[i].body_len = jobs[i].body_len;
		jj[i].headers_json = jobs[i].headers_json;
		jj[i].schedule = jobs[i].schedule;
		jj[i].ttr_ms = jobs[i].ttr_ms;
		jj[i].state = "scheduled";
		jj[i].created_ms = jobs[i].created_ms;
		jj[i].put_id = jobs[i].put_id;
		jj[i].contested = jobs[i].contested_at;
	}
	return jj;
}

static uint64_t		put_ids;
static pthread_once_t	put_ids_once = PTHREAD_ONCE_INIT;

/* A random start, so that instances sharing a journal never meet. */
static void
put_ids_init(void)
{
	if (random_bytes(&put_ids, sizeof(put_ids)) == -1)
		put_ids = (uint64_t)clock_wall_ms() << 20;
}

void
api_journal_claim(struct api_job_in *j)
{
	uint64_t id;

	pthread_once(&put_ids_once, put_ids_init);
	do
		id = __atomic_add_fetch(&put_ids, 1, __ATOMIC_RELAXED) &
		    (uint64_t)INT64_MAX;
	while (id == 0);
	j->put_id = (int64_t)id;
	j->contested = 0;
	j->contested_at = &j->contested;
}

/*
 * A journal that is away refuses every push: one line a second says so,
 * with how many more were refused since, not one line a request.
 */
void
api_journal_refused(struct api_req *req, const char *tenant,
    const char *topic, size_t n, enum jrnl_err e)
{
	static struct log_every refused = LOG_EVERY_INIT;
	uint64_t held;

	if (log_every(&refused, LOG_EVERY_US, &held))
		log_warnx("api: journal: %s: %zu job(s) of %s/%s refused "
		    "(and %llu request(s) since the last such line)",
		    jrnl_strerror(e), n, tenant, topic,
		    (unsigned long long)held);
	api_error(req, 503, "journal_unavailable", NULL,
	    "the journal cannot record the job now (%s); nothing was "
	    "accepted, try again", jrnl_strerror(e));
}

int
api_journal_jobs(struct api_req *req, const char *tenant, const char *topic,
    const struct api_job_in *jobs, size_t n)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct jrnl_job *jj;
	enum jrnl_err e;

	if (ctx->jrnl == NULL || n == 0)
		return 0;
	jj = journal_rows(tenant, topic, jobs, n);
	e = jrnl_put_jobs(ctx->jrnl, jj, n);
	free(jj);
	if (e == JRNL_OK)
		return 0;
	api_journal_refused(req, tenant, topic, n, e);
	return -1;
}

enum jrnl_err
api_journal_jobs_cb(struct api_req *req, const char *tenant,
    const char *topic, const struct api_job_in *jobs, size_t n,
    jrnl_done_fn done, void *arg)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct jrnl_job *jj;
	enum jrnl_err e;

	if (ctx->jrnl == NULL || n == 0) {
		done(JRNL_OK, arg);
		return JRNL_OK;
	}
	jj = journal_rows(tenant, topic, jobs, n);
	e = jrnl_put_jobs_cb(ctx->jrnl, jj, n, done, arg);	/* copies */
	free(jj);
	return e;
}

/*
 * A change made in Redis whose transitions' commit answered e (not
 * JRNL_OK): logged, and the 503 to answer into *d.
 */
static void
change_fail(enum jrnl_err e, const char *what, const char *tenant,
    struct api_err_desc *d)
{
	if (e == JRNL_EFULL) {
		/* Its transition was dropped: never written. */
		log_warnx("api: journal: %s of %s made in Redis is not "
		    "journaled: its transition was dropped, the journal's "
		    "queue is full", what, tenant);
		api_journal_desc(d, "the change was made but the journal's "
		    "queue is full, so it is not journaled");
		return;
	}
	log_warnx("api: journal: %s of %s made in Redis is queued for the "
	    "journal only: %s", what, tenant, jrnl_strerror(e));
	api_journal_desc(d, "the change was made but is not journaled yet "
	    "(%s); it is written when the journal is back", jrnl_strerror(e));
}

/* A background thread's wait for its transitions' commit. */
struct change_sync {
	pthread_mutex_t	 mu;
	pthread_cond_t	 cond;
	int		 done;
	enum jrnl_err	 err;
};

static void
change_sync_done(enum jrnl_err err, void *arg)
{
	struct change_sync *cs = arg;

	pthread_mutex_lock(&cs->mu);
	cs->err = err;
	cs->done = 1;
	pthread_cond_signal(&cs->cond);
	pthread_mutex_unlock(&cs->mu);
}

int
api_change_durable_wait(struct api_ctx *ctx, const char *what,
    const char *tenant, struct api_err_desc *d)
{
	struct change_sync cs;
	enum jrnl_err e;

	/* In async mode the change goes with the next batch, unwaited. */
	if (ctx->jrnl == NULL || conf.journal_mode != CONF_JOURNAL_SYNC)
		return 0;
	memset(&cs, 0, sizeof(cs));
	pthread_mutex_init(&cs.mu, NULL);
	pthread_cond_init(&cs.cond, NULL);
	if ((e = jrnl_flush_cb(ctx->jrnl, change_sync_done, &cs)) == JRNL_OK) {
		pthread_mutex_lock(&cs.mu);
		while (!cs.done)
			pthread_cond_wait(&cs.cond, &cs.mu);
		e = cs.err;
		pthread_mutex_unlock(&cs.mu);
	}
	pthread_cond_destroy(&cs.cond);
	pthread_mutex_destroy(&cs.mu);
	if (e == JRNL_OK)
		return 0;
	change_fail(e, what, tenant, d);
	return -1;
}

/*
 * A change waiting for its transitions' commit, held by the request (its
 * free_state) and the journal's callback: the last to let go frees it, so
 * a request that ends first (the server stopping) leaves it to the
 * callback.  hold.mu guards done and err.
 */
struct change_wait {
	struct api_hold	 hold;
	int		 done;
	enum jrnl_err	 err;
	int64_t		 value;
};

static void
change_free_state(void *state)
{
	struct change_wait *cw = state;

	if (api_hold_drop(&cw->hold, 1))
		free(cw);
}

/* The journal's callback (its writer, or this thread before the return). */
static void
change_committed(enum jrnl_err err, void *arg)
{
	struct change_wait *cw = arg;

	pthread_mutex_lock(&cw->hold.mu);
	cw->err = err;
	cw->done = 1;
	pthread_mutex_unlock(&cw->hold.mu);
	if (api_hold_drop(&cw->hold, 0))
		free(cw);
}

int
api_change_durable(struct api_req *req, int64_t *value)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct change_wait *cw = req->state;
	struct api_err_desc d;
	enum jrnl_err e;
	char what[256];

	if (cw != NULL) {		/* called again: the commit's answer */
		pthread_mutex_lock(&cw->hold.mu);
		e = cw->done ? cw->err : JRNL_EUNAVAIL;
		pthread_mutex_unlock(&cw->hold.mu);
		if (value != NULL)
			*value = cw->value;
		if (e == JRNL_OK)
			return 0;
		snprintf(what, sizeof(what), "%s %s", req->method, req->path);
		change_fail(e, what, req->tenant, &d);
		api_error_desc(req, &d);
		return -1;
	}
	/* In async mode the change goes with the next batch, unwaited. */
	if (ctx->jrnl == NULL || conf.journal_mode != CONF_JOURNAL_SYNC)
		return 0;
	cw = xcalloc(1, sizeof(*cw));
	api_hold_init(&cw->hold, req, 2);	/* the request, the journal */
	cw->value = value != NULL ? *value : 0;
	req->state = cw;
	req->free_state = change_free_state;
	/* Park first: the callback may come before the return. */
	api_suspend(req);
	if ((e = jrnl_flush_cb(ctx->jrnl, change_committed, cw)) != JRNL_OK)
		change_committed(e, cw);
	return 1;
}

void
api_journal_void(struct api_req *req, const char *tenant,
    const struct api_job_in *j, int64_t now_ms)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct jrnl_transition tr;

	if (ctx->jrnl == NULL)
		return;
	memset(&tr, 0, sizeof(tr));
	tr.tenant = tenant;
	tr.job_id = j->id;
	tr.put_id = j->put_id;
	tr.from_state = "scheduled";
	tr.to_state = JRNL_STATE_VOID;
	tr.at_ms = now_ms;
	jrnl_transition(ctx->jrnl, &tr);
}

void
api_journal_settle(struct api_req *req, const char *tenant, size_t nvoid)
{
	struct api_ctx *ctx = api_ctx_of(req);

	/* In async mode the job's own row is not durable at the answer
	 * either: the removal goes with the next batch. */
	if (ctx->jrnl == NULL || nvoid == 0 ||
	    conf.journal_mode != CONF_JOURNAL_SYNC)
		return;
	if (jrnl_flush(ctx->jrnl) == -1)
		log_warnx("api: journal: the rows of %zu job(s) of %s not made "
		    "are removed in the queue only (the journal is "
		    "unavailable); they go when it is back", nvoid, tenant);
}

void
api_journal_repair(struct api_req *req, const char *tenant, const char *id)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct sched_job *job = NULL;
	struct jrnl_job jj;
	enum jrnl_err e;

	if (ctx->jrnl == NULL)
		return;
	if (sched_get(ctx->sched, tenant, id, &job) != SCHED_OK) {
		log_warnx("api: journal: tenant=%s job=%s: cannot read the "
		    "job back to repair its journal row", tenant, id);
		return;
	}
	memset(&jj, 0, sizeof(jj));
	jj.tenant = tenant;
	jj.topic = job->topic;
	jj.id = job->id;
	jj.bizkey = job->bizkey;
	jj.due_ms = job->due_ms;
	jj.priority = job->priority;
	jj.body = job->body;
	jj.body_len = job->body_len;
	jj.headers_json = job->headers_json;
	jj.schedule = job->schedule;
	jj.ttr_ms = job->ttr_ms;
	jj.state = sched_state_name(job->state);
	jj.attempts = job->attempts;
	jj.created_ms = job->created_ms;
	jj.version = job->version;
	jj.updated_ms = clock_wall_ms();
	if ((e = jrnl_put_jobs(ctx->jrnl, &jj, 1)) != JRNL_OK)
		log_warnx("api: journal: tenant=%s job=%s: cannot repair its "
		    "journal row: %s", tenant, id, jrnl_strerror(e));
	sched_job_free(job);
}

/* ------------------------------------------------------------------ */
/* Listing */

static json_object *
jrnl_job_json(const struct jrnl_job *j)
{
	json_object *o = json_object_new_object(), *h = NULL;

	json_object_object_add(o, "id", json_object_new_string(j->id));
	json_object_object_add(o, "topic", json_object_new_string(j->topic));
	json_object_object_add(o, "state",
	    json_object_new_string(j->state ? j->state : "scheduled"));
	json_object_object_add(o, "bizkey", j->bizkey != NULL ?
	    json_object_new_string(j->bizkey) : NULL);
	json_object_object_add(o, "priority", json_object_new_int(j->priority));
	json_object_object_add(o, "created_ms",
	    json_object_new_int64(j->created_ms));
	json_object_object_add(o, "updated_ms",
	    json_object_new_int64(j->updated_ms));
	json_object_object_add(o, "finished_ms", j->finished_ms > 0 ?
	    json_object_new_int64(j->finished_ms) : NULL);
	json_object_object_add(o, "due_ms", json_object_new_int64(j->due_ms));
	json_object_object_add(o, "attempt_count",
	    json_object_new_int(j->attempts));
	json_object_object_add(o, "body", api_body_value(j->body,
	    j->body_len));
	if (j->headers_json != NULL)
		h = json_tokener_parse(j->headers_json);
	json_object_object_add(o, "headers",
	    h != NULL ? h : json_object_new_object());
	json_object_object_add(o, "retry_schedule", j->schedule != NULL ?
	    json_object_new_string(j->schedule) : NULL);
	return o;
}

static int
list_cb(const struct jrnl_job *j, void *arg)
{
	json_object_array_add(arg, jrnl_job_json(j));
	return 0;
}

void
api_job_list(struct api_req *req)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct jrnl_list l;
	json_object *arr;
	const char *topic, *state, *bizkey, *cursor;
	int64_t limit;
	enum jrnl_err e;
	json_object *o;
	int st;

	memset(&l, 0, sizeof(l));
	topic = api_query(req, "topic");
	state = api_query(req, "state");
	bizkey = api_query(req, "bizkey");
	if ((topic != NULL && api_check_topic(req, topic) == -1) ||
	    (bizkey != NULL && api_check_bizkey(req, bizkey, "bizkey") == -1) ||
	    api_query_int(req, "limit", 1, LIST_LIMIT_MAX, LIST_LIMIT_DEFAULT,
	    &limit) == -1 || api_query_cursor(req, &cursor) == -1)
		return;
	st = state != NULL ? sched_state_parse(state) : SCHED_SCHEDULED;
	if (st < 0) {
		api_error(req, 400, "invalid_field", "state",
		    "state must be one of scheduled, ready, in_flight, "
		    "retrying, delivered, dead, cancelled");
		return;
	}
	/*
	 * The journal writes each attempt's outcome, not a job's moves into
	 * ready or in_flight (JOURNAL.md): a listing by them would always be
	 * empty, so it is refused with where to look instead.
	 */
	if (st == SCHED_READY || st == SCHED_IN_FLIGHT) {
		api_error(req, 400, "invalid_field", "state",
		    "jobs cannot be listed by state %s: the listing reads the "
		    "journal, which keeps a job's waiting state until the "
		    "outcome of its attempt; the topic's counts "
		    "(GET /v1/topics/{topic}) and GET /v1/jobs/{id} show it "
		    "live", state);
		return;
	}
	if (*cursor != '\0' && !api_valid_job_id(cursor)) {
		api_error(req, 400, "invalid_field", "cursor",
		    "cursor must be the next_cursor of an earlier answer "
		    "(a job id: 1 to 64 of A-Z a-z 0-9 . _ : -)");
		return;
	}
	if (api_need_journal(req, "listing jobs") == -1)
		return;
	l.topic = topic;
	l.state = state;
	l.bizkey = bizkey;
	l.cursor = *cursor != '\0' ? cursor : NULL;
	l.limit = (size_t)limit;
	arr = json_object_new_array();
	e = jrnl_list_jobs(ctx->jrnl, req->tenant, &l, list_cb, arr);
	if (e != JRNL_OK) {
		json_object_put(arr);
		api_error(req, 503, "journal_unavailable", NULL,
		    "the journal cannot be read now: %s", jrnl_strerror(e));
		return;
	}
	o = json_object_new_object();
	json_object_object_add(o, "jobs", arr);
	json_object_object_add(o, "next_cursor", l.next[0] != '\0' ?
	    json_object_new_string(l.next) : NULL);
	api_reply_json(req, 200, o);
}

/* GET's row: the job's JSON, and what api_cut_off() needs of it. */
struct got {
	json_object	*o;
	int64_t		 created_ms;
	int64_t		 finished_ms;
};

static int
get_cb(const struct jrnl_job *j, void *arg)
{
	struct got *g = arg;

	g->o = jrnl_job_json(j);
	g->created_ms = j->created_ms;
	g->finished_ms = j->finished_ms;
	json_object_object_add(g->o, "next_attempt_ms", j->finished_ms == 0 ?
	    json_object_new_int64(j->due_ms) : NULL);
	if (j->ttr_ms > 0)
		json_object_object_add(g->o, "ttr_ms",
		    json_object_new_int64(j->ttr_ms));
	return 0;
}

/* The attempts a job's transitions recorded, those before before_ms. */
struct older {
	json_object	*arr;
	int64_t		 before_ms;	/* INT64_MAX: all */
};

static int
older_cb(const struct jrnl_transition *t, void *arg)
{
	struct older *ol = arg;

	if (t->attempt > 0 && t->at_ms < ol->before_ms)
		json_object_array_add(ol->arr, api_attempt_json(t->at_ms,
		    t->http_status, t->latency_ms, t->error, t->excerpt,
		    t->excerpt_len));
	return 0;
}

void
api_job_older_attempts(struct api_req *req, const struct sched_job *job,
    json_object *o)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct older ol;
	json_object *cur;
	size_t i, n;

	if (ctx->jrnl == NULL || job->attempts <= (int)job->nattempt_log ||
	    !json_object_object_get_ex(o, "attempts", &cur))
		return;
	ol.arr = json_object_new_array();
	ol.before_ms = job->nattempt_log > 0 ? job->attempt_log[0].at_ms :
	    INT64_MAX;
	if (jrnl_list_transitions(ctx->jrnl, req->tenant, job->id, older_cb,
	    &ol) != JRNL_OK || json_object_array_length(ol.arr) == 0) {
		json_object_put(ol.arr);
		return;
	}
	n = json_object_array_length(cur);
	for (i = 0; i < n; i++)
		json_object_array_add(ol.arr,
		    json_object_get(json_object_array_get_idx(cur, i)));
	json_object_object_add(o, "attempts", ol.arr);
}

/*
 * Redis keeps a finished job sched.retention (1 h by default), the
 * journal journal.retention (30 days); after Redis lost its data the
 * journal has every job until the rebuild.  The shape is GET's from
 * Redis, with the listing's fields besides (due_ms, updated_ms,
 * finished_ms), and every attempt the journal holds, not the last 20.
 */
int
api_job_get_journal(struct api_req *req, const char *id)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct older all = { NULL, INT64_MAX };
	struct got g = { NULL, 0, 0 };
	json_object *o = NULL;
	struct id_parts ip;
	enum jrnl_err e;
	int owed = -1;

	if (ctx->jrnl == NULL)
		return 0;
	e = jrnl_get_job(ctx->jrnl, req->tenant, id, get_cb, &g);
	if (e == JRNL_ENOTFOUND || (e == JRNL_OK && g.o == NULL))
		return 0;
	o = g.o;
	/*
	 * A client-given id's row may be a push cut off before Redis made
	 * it: shown as scheduled, its client would take it as accepted and
	 * not push it again.  A generated id's client never learnt it.
	 */
	if (e == JRNL_OK && g.finished_ms == 0 && id_parse(id, &ip) != 0) {
		switch (api_cut_off(ctx, ctx->sched, req->tenant, id,
		    g.created_ms, clock_wall_ms(), &owed, "read")) {
		case API_CUT_UNSETTLED:
			json_object_put(o);
			api_reply_unsettled(req);
			return 1;
		case API_CUT_MADE:
			json_object_put(o);
			return 2;
		case API_CUT_NO:
			break;
		}
	}
	all.arr = json_object_new_array();
	if (e == JRNL_OK)
		e = jrnl_list_transitions(ctx->jrnl, req->tenant, id,
		    older_cb, &all);
	if (e != JRNL_OK) {
		json_object_put(o);
		json_object_put(all.arr);
		api_error(req, 503, "journal_unavailable", NULL,
		    "Redis does not hold this job and the journal cannot be "
		    "read now: %s", jrnl_strerror(e));
		return 1;
	}
	json_object_object_add(o, "attempts", all.arr);
	api_reply_json(req, 200, o);
	return 1;
}

#define API_UNSETTLED_SLACK_MS	30000

/*
 * How old an unfinished row Redis does not have must be before no push of
 * it can still be in flight: a push's lookup and its push to Redis each
 * take redis.timeout at most, its put and a refused push's void each the
 * journal's timeout (MySQL's five times it), and the slack covers the
 * queues between them and instances' clocks.
 */
static int64_t
unsettled_age_ms(void)
{
	return API_UNSETTLED_SLACK_MS + 2 * CONF_GET(redis_timeout_ms) +
	    10 * CONF_GET(journal_timeout_ms);
}

struct cut_arg {
	struct sched	*sched;
	int		 made;
	int		 err;
};

static int
cut_row(const struct jrnl_job *jj, void *arg)
{
	struct cut_arg *ca = arg;

	if (jj->finished_ms == 0)
		ca->err = api_restore_journal_job(ca->sched, jj, &ca->made);
	else
		ca->err = SCHED_ECONFLICT;	/* finished since it was read */
	return 0;
}

/* Counts the moves Redis made (not the creation read from the row). */
static int
count_moves(const struct jrnl_transition *t, void *arg)
{
	if (t->from_state != NULL)
		(*(size_t *)arg)++;
	return 0;
}

enum api_cut_off
api_cut_off(struct api_ctx *ctx, struct sched *s, const char *tenant,
    const char *id, int64_t created_ms, int64_t now, int *owed,
    const char *what)
{
	struct cut_arg ca = { s, 0, SCHED_OK };
	enum jrnl_err e;
	size_t moves = 0;

	if (*owed == -1 && (ctx->reg == NULL ||
	    registry_rebuild_owed(ctx->reg, owed) != REG_OK)) {
		*owed = -1;		/* cannot tell: ask again next time */
		return API_CUT_UNSETTLED;
	}
	if (*owed == 1)
		return API_CUT_NO;
	if (jrnl_list_transitions(ctx->jrnl, tenant, id, count_moves,
	    &moves) != JRNL_OK)
		return API_CUT_UNSETTLED;
	if (moves > 0)
		return API_CUT_NO;
	if (now - created_ms < unsettled_age_ms())
		return API_CUT_UNSETTLED;
	e = jrnl_get_job(ctx->jrnl, tenant, id, cut_row, &ca);
	if (e != JRNL_OK || ca.err != SCHED_OK) {
		log_warnx("api: %s of %s/%s: journaled at %" PRId64 " ms, not "
		    "in Redis, and cannot be made now: %s", what, tenant, id,
		    created_ms, e != JRNL_OK ? jrnl_strerror(e) :
		    sched_strerror((enum sched_err)ca.err));
		return API_CUT_UNSETTLED;
	}
	if (ca.made == -1)
		return API_CUT_NO;	/* not made: its bizkey's job stands */
	if (ca.made)
		log_warnx("api: %s of %s/%s: journaled at %" PRId64 " ms and "
		    "never made in Redis (its push was cut off); made now from "
		    "the journal", what, tenant, id, created_ms);
	return API_CUT_MADE;
}

/* api_cut_off_req()'s row: whether found, and its times. */
struct row_times {
	int	found;
	int64_t	created_ms;
	int64_t	finished_ms;
};

static int
times_cb(const struct jrnl_job *jj, void *arg)
{
	struct row_times *rt = arg;

	rt->found = 1;
	rt->created_ms = jj->created_ms;
	rt->finished_ms = jj->finished_ms;
	return 0;
}

int
api_cut_off_req(struct api_req *req, const char *id, const char *what)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct row_times rt = { 0, 0, 0 };
	struct id_parts ip;
	int owed = -1;

	if (ctx->jrnl == NULL || jrnl_get_job(ctx->jrnl, req->tenant, id,
	    times_cb, &rt) != JRNL_OK || !rt.found)
		return 0;
	if (rt.finished_ms != 0)
		return 3;
	if (id_parse(id, &ip) == 0)
		return 0;
	switch (api_cut_off(ctx, ctx->sched, req->tenant, id, rt.created_ms,
	    clock_wall_ms(), &owed, what)) {
	case API_CUT_UNSETTLED:
		api_reply_unsettled(req);
		return 1;
	case API_CUT_MADE:
		return 2;
	case API_CUT_NO:
		break;
	}
	return 0;
}

void
api_reply_unsettled(struct api_req *req)
{
	api_add_header(req, "Retry-After", "1");
	api_error(req, 503, "push_unsettled", "id", "a push of this id was "
	    "journaled but Redis does not have its job: it may still be in "
	    "flight, or was cut off and is made once no push of it can be; "
	    "try again");
}

int
api_restore_journal_job(struct sched *s, const struct jrnl_job *jj,
    int *created)
{
	struct log_obj lo = { jj->tenant, jj->topic, jj->id, jj->attempts };
	struct sched_job job;
	int st;

	*created = 0;
	memset(&job, 0, sizeof(job));
	if (strlen(jj->id) >= sizeof(job.id))
		return SCHED_EINVAL;
	snprintf(job.id, sizeof(job.id), "%s", jj->id);
	job.tenant = (char *)(uintptr_t)jj->tenant;
	job.topic = (char *)(uintptr_t)jj->topic;
	job.bizkey = (char *)(uintptr_t)jj->bizkey;
	st = jj->state != NULL ? sched_state_parse(jj->state) : -1;
	job.state = st >= 0 ? (enum sched_state)st : SCHED_SCHEDULED;
	job.due_ms = jj->due_ms;
	job.created_ms = jj->created_ms;
	job.priority = jj->priority;
	job.attempts = jj->attempts;
	/*
	 * Past the row's version by a wide step: a change the lost Redis made
	 * but whose transition was not written yet (at most a flush interval
	 * of them) may still come, numbered from the row's version up.  The
	 * rebuilt job's own changes must outrank it, not tie with it.
	 */
	job.version = jj->version + API_RESTORE_VERSION_STEP;
	if (jj->version < 0 || job.version > SCHED_VERSION_MAX)
		job.version = SCHED_VERSION_MAX;
	job.body = (char *)(uintptr_t)jj->body;
	job.body_len = jj->body_len;
	job.headers_json = (char *)(uintptr_t)jj->headers_json;
	job.schedule = (char *)(uintptr_t)jj->schedule;
	job.ttr_ms = jj->ttr_ms;
	if ((st = (int)sched_restore_job(s, &job, created)) == SCHED_OK &&
	    *created == -1)
		log_obj(LOG_LVL_INFO, &lo, "restore: not made: the topic has "
		    "another unfinished job with its bizkey %s (one per "
		    "bizkey: that one stands); cancelled in the journal",
		    jj->bizkey);
	return st;
}
