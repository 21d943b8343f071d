/*
 * internal.h - what the REST handlers of api/ share among themselves and
 * nothing else includes: error answers for the scheduler's and registry's
 * results, job and topic rendering, the pending-jobs quota, job
 * validation, and the one place where an accepted job is journaled.
 *
 * Key decision: a job pushed through any route (v1, batch, the original
 * /push) goes through the same api_job_parse() and api_jobs_accept(), so the
 * rules, the quota and the journal cannot differ between routes.
 */
#ifndef RETRYD_API_INTERNAL_H
#define RETRYD_API_INTERNAL_H

#define API_JOB_ID_BUF	(API_JOB_ID_MAX + 1)

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "api/api.h"
#include "api/http.h"
#include "api/validate.h"
#include "journal/journal.h"
#include "scheduler/registry.h"
#include "scheduler/sched.h"

static inline struct api_ctx *
api_ctx_of(struct api_req *req)
{
	return api_server_arg(req->srv);
}

/* 1 when the request's bearer key is the admin key (nothing answered). */
int	api_is_admin_request(struct api_req *req);

/* An error's answer, described rather than sent (an item of a batch). */
struct api_err_desc {
	int		 status;
	const char	*code;		/* code_buf, or a literal */
	const char	*field;		/* NULL: none */
	char		 code_buf[64];
	char		 msg[256];
};

/* Answer for a scheduler error (what: "job", "topic"...). */
void	api_sched_error(struct api_req *req, enum sched_err e,
	    const char *what);
/*
 * The scheduler's error behind a job's HTTP status of a push (503, 507),
 * SCHED_EINTERNAL for any other.
 */
enum sched_err api_status_sched(int status);
/* What api_sched_error() would answer, into *d. */
void	api_sched_describe(enum sched_err e, const char *what,
	    struct api_err_desc *d);
/* Answer for a registry error. */
void	api_reg_error(struct api_req *req, enum reg_err e, const char *what);

/*
 * Before answering that something does not exist (401 for an unknown key,
 * 404 for a tenant, topic or job): while Redis is owed a rebuild from the
 * journal (it lost its data, or came back from a restart that may lack its
 * last writes) what it lacks may be there once rebuilt, and a client told
 * 401 or 404 would give up on something that exists.  api_rebuild_owed():
 * 1 when so (never without a journal: nothing would rebuild it); it also
 * drops the registry's cached misses, which must not outlive the rebuild.
 * api_rebuilding_describe(): the answer then, 503 `rebuilding`.
 * api_rebuilding(): 1 after answering so (with Retry-After), else 0.
 */
int	api_rebuild_owed(struct api_ctx *ctx);
void	api_rebuilding_describe(struct api_err_desc *d);
int	api_rebuilding(struct api_req *req);

/*
 * The caller's topic: 0 and *out (the caller's), or -1 after answering
 * (404 topic_not_found for an unknown name or another tenant's).
 */
int	api_topic_load(struct api_req *req, const char *name,
	    struct registry_topic **out);
/*
 * The same, the cached topic itself, shared and read-only
 * (registry_topic_hold; give it back with registry_topic_release): the
 * push routes' lookup, one per request, without a copy.
 */
int	api_topic_hold(struct api_req *req, const char *name,
	    const struct registry_topic **out);

/*
 * A job's body as JSON: the value it parses as, else (and when it holds
 * an integer json-c would clamp) a string.
 */
json_object *api_body_value(const char *body, size_t len);
/* One attempt of a job as GET /v1/jobs/{id} shows it. */
json_object *api_attempt_json(int64_t at_ms, int status, int64_t latency_ms,
	    const char *error, const char *excerpt, size_t excerpt_len);
/* The job as the API shows it; attempts with the attempt log. */
json_object *api_job_json(const struct sched_job *job, int with_log);

/* A job to push, as validated from one JSON object. */
struct api_job_in {
	char		 id[API_JOB_ID_BUF];
	int		 client_id;	/* id given by the client (/push) */
	const char	*bizkey;	/* points into the JSON */
	int64_t		 due_ms;	/* the time the client asked for */
	int64_t		 run_at_ms;	/* first attempt: due + first wait */
	int		 priority;
	char		*body;		/* owned */
	size_t		 body_len;
	char		*headers_json;	/* owned, or NULL */
	char		*schedule;	/* owned canonical text, or NULL */
	int64_t		 ttr_ms;	/* 0: the topic's */
	int64_t		 created_ms;	/* the same in the journal and Redis */
	/* A client-given id's journal put (api_journal_claim): */
	int64_t		 put_id;	/* its token; 0: none */
	int		 contested;	/* its row is another push's */
	int		*contested_at;	/* &contested, kept by a copy */
	/* Result: */
	struct sched_push_result res;
	int		 status;	/* HTTP status of this job's answer */
	int		 unsettled;	/* 503: its journaled push unsettled */
};

void	api_job_in_clear(struct api_job_in *j);

enum api_job_dialect {
	API_JOB_V1,		/* POST /v1/topics/{topic}/jobs */
	API_JOB_ORIGINAL,	/* POST /push */
};

/* A batch's job, for its generated id (sched_new_id_run). */
struct api_id_run {
	size_t	i;	/* its index in the batch */
	int	base;	/* the batch's first shard, -1 before its first id */
};

/*
 * Validate one job object for topic t; prefix names it in errors ("" or
 * "jobs[3].").  0, or -1 after answering 4xx.  A job without a bizkey or a
 * client id gets a generated id: run NULL, its request's only job, the
 * shard of its time (sched_new_id_alone); else job run->i of a batch, in
 * runs of 64 jobs per shard (sched_new_id_run).
 */
int	api_job_parse(struct api_req *req, json_object *obj,
	    const struct registry_topic *t, enum api_job_dialect d,
	    const char *prefix, struct api_id_run *run, struct api_job_in *out);
/*
 * What a push route keeps in req->state while the journal commits its jobs
 * (freed with the request): the route fills t, body (the jobs point into
 * it) and jobs[0..n) in its first call, then calls api_jobs_accept(),
 * which may park the request; the route's handler is then called again
 * with the same state and calls api_jobs_accept() again.
 */
struct api_accept {
	const struct registry_topic *t;	/* held (registry_topic_hold) */
	json_object		*body;
	struct api_job_in	*jobs;
	size_t			 n;
	/* api_jobs_accept()'s own. */
	struct api_accept_priv	*priv;
};

/* A new state with n zeroed jobs, set as req->state. */
struct api_accept *api_accept_new(struct api_req *req, size_t n);
/*
 * Quota, journal, then push the n parsed jobs of a->t.  0 with each job's
 * res and status filled (201 new, 200 deduplicated, or an error status
 * with the job's id empty: 429 for a new job of a batch over the quota
 * whose other jobs were answered as duplicates); 1 when the request is
 * parked until the journal has committed the jobs (return at once: the
 * handler is called again); or -1 after answering (429, 503) for all.
 * A duplicate (a client id that names a job, a bizkey that names an
 * unfinished job) is answered 200 whatever the quota.
 */
int	api_jobs_accept(struct api_req *req, struct api_accept *a);
/* Answers status with the answer of one accepted job. */
void	api_reply_job_result(struct api_req *req, int status,
	    const struct api_job_in *j);

/*
 * The single place where accepted jobs reach the journal ("accepted means
 * journaled"): 0, or -1 after answering 503 journal_unavailable.  Each
 * job's row is created at its created_ms (set by the accept).
 */
int	api_journal_jobs(struct api_req *req, const char *tenant,
	    const char *topic, const struct api_job_in *jobs, size_t n);
/*
 * The same without holding the thread: done(err, arg) is called once the
 * journal settled the jobs (from the journal's writer, or from this thread
 * before the return), when JRNL_OK is returned, never otherwise.  The
 * caller answers a failure with api_journal_refused().
 */
enum jrnl_err api_journal_jobs_cb(struct api_req *req,
	    const char *tenant, const char *topic,
	    const struct api_job_in *jobs, size_t n, jrnl_done_fn done,
	    void *arg);
/* Answer 503 journal_unavailable for n jobs the journal refused (err). */
void	api_journal_refused(struct api_req *req, const char *tenant,
	    const char *topic, size_t n, enum jrnl_err err);

/*
 * The quota (api_jobs_accept takes it from the tenant's cached count of
 * pending jobs): give back room taken for jobs that were not created.
 */
void	api_quota_refund(const char *tenant, size_t n);
/* The tenant's count is read again (its jobs were dropped). */
void	api_quota_forget(const char *tenant);
/*
 * Locks and returns the write lock of a tenant (topic NULL) or topic: a
 * change of it in Redis and its journal row are made under it (a delete's
 * journal row and Redis removal too), so this instance journals the
 * changes of one entry in the order Redis took them, and never between a
 * delete's two writes.  One lock per name: another entry's never waits
 * for it.  api_write_unlock() it.
 */
struct api_wlock;
struct api_wlock *api_write_lock(const char *tenant, const char *topic);
void	api_write_unlock(struct api_wlock *l);
/*
 * Drops the jobs of a deleted topic (NULL: of every topic of the tenant)
 * from the scheduler: 0, or -1 with the error to answer in *d.
 */
int	api_drop_jobs(struct api_ctx *ctx, const char *tenant,
	    const char *topic, struct api_err_desc *d);
/* What api_reg_error() would answer, into *d. */
void	api_reg_describe(enum reg_err e, const char *what,
	    struct api_err_desc *d);
/* Answers the error *d describes. */
void	api_error_desc(struct api_req *req, const struct api_err_desc *d);
/* *d: 503 journal_unavailable with the message fmt. */
void	api_journal_desc(struct api_err_desc *d, const char *fmt, ...)
	    __attribute__((format(printf, 2, 3)));

/*
 * Work done off the HTTP thread (defer.c): api_defer() parks req and
 * queues d, the first member of a struct from calloc; d->work runs on a
 * background thread and sets d->err to the error to answer, or d->reply
 * to a JSON object to answer 200 with (neither: 204).  The request is
 * then resumed and its handler called again with req->state == d: it
 * answers with api_defer_answer().  Without the background threads
 * (stopping), the work runs here and is answered at once.  d is freed
 * once both the work and the request are done with it (d->reply too).
 */
struct api_defer {
	struct api_hold		 hold;
	void			(*work)(struct api_defer *d);
	struct api_ctx		*ctx;	/* set by api_defer() */
	struct api_defer	*next;
	struct api_err_desc	 err;
	json_object		*reply;	/* 200 with it, when no err */
};
void	api_defer(struct api_req *req, struct api_defer *d);
void	api_defer_answer(struct api_req *req, struct api_defer *d);
/*
 * Cancels the tenant's job id and gives its quota back: 0, or -1 after
 * answering the error (409 job_finished naming field, which may be NULL;
 * 404 and the others as api_sched_error).
 */
int	api_cancel_job(struct api_req *req, const char *id, const char *field);
/* The cursor query argument (bounded, printable); "" when absent. */
int	api_query_cursor(struct api_req *req, const char **out);

/*
 * 0 when the tenant (topic NULL) or the topic has no unfinished job or the
 * query says force=true; else -1 after answering 409.
 */
int	api_unfinished_guard(struct api_req *req, const char *tenant,
	    const char *topic);
/* Jobs per state as the API shows them (topics.c). */
json_object *api_counts_json(const int64_t counts[SCHED_NSTATES]);
/* The topic as the API shows it (secret only when with_secret). */
json_object *api_topic_json(const struct registry_topic *t,
	    int with_secret);

/*
 * After a change made in Redis whose transitions went to the journal
 * (cancel, reschedule, retry, redrive): in sync mode the 2xx waits for
 * their commit, without holding the thread.  First call (req->state NULL):
 * 0 to answer now (no journal, or async mode), or 1 with req parked: the
 * handler is called again and calls this again (req->state set), which
 * gives back *value as it was first given and returns 0 to answer, or -1
 * after answering 503 journal_unavailable (the change stands in Redis and
 * its transitions stay queued, written when the journal is back).  value
 * may be NULL.  The handler must not use req->state otherwise.
 */
int	api_change_durable(struct api_req *req, int64_t *value);
/*
 * The same on a background thread (defer.c), for the transitions this
 * thread queued: it waits for their commit.  0, or -1 with the 503 to
 * answer in *d; what names the change in the log.
 */
int	api_change_durable_wait(struct api_ctx *ctx, const char *what,
	    const char *tenant, struct api_err_desc *d);

/* Restore routes share this answer while the journal is off. */
int	api_need_journal(struct api_req *req, const char *what);

/* The reserve long-poll, shared by /v1/.../reserve and /get/{topic}. */
void	api_pull_reserve(struct api_req *req, const char *topic,
	    int original);
/* Ack or nack with a token; token NULL: the current reservation. */
void	api_pull_finish(struct api_req *req, const char *id,
	    const char *token, int ack);

#endif
