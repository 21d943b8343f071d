/*
 * jobs_journal.h - the job routes' use of the journal (jobs_journal.c),
 * shared by jobs.c and nothing else.  api_journal_jobs() and
 * api_need_journal() are declared in internal.h.
 *
 * Key decision: every mark written here is an ordinary transition, so the
 * journal's own rule (a transition never moves a job back past a newer
 * one) orders it against what the scheduler records.
 */
#ifndef RETRYD_API_JOBS_JOURNAL_H
#define RETRYD_API_JOBS_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "api/http.h"

struct api_job_in;
/*
 * A client-given id about to be journaled: give its put a token, so that
 * another push of the id in flight at the same time never shares its row
 * (the journal keeps the first put's row; the second is told, in sync
 * mode, through j->contested).
 */
void	api_journal_claim(struct api_job_in *j);
/*
 * The row of a job journaled but not made (deduplicated, refused): queue
 * its removal (JRNL_STATE_VOID), so no listing shows it and no restore
 * makes it; with a token (api_journal_claim), only the row its own put
 * wrote.  api_journal_settle() makes the removals durable: call it once
 * before answering.
 */
void	api_journal_void(struct api_req *req, const char *tenant,
	    const struct api_job_in *j, int64_t now_ms);
void	api_journal_settle(struct api_req *req, const char *tenant,
	    size_t nvoid);
/*
 * The job Redis holds and the journal's row differ: another push of the
 * same id made the job in Redis first (and our row may have replaced
 * its row), or our push made it but its row is another push's
 * (contested).  Write the job back as Redis holds it.
 */
void	api_journal_repair(struct api_req *req, const char *tenant,
	    const char *id);
/* GET /v1/jobs. */
void	api_job_list(struct api_req *req);
/*
 * GET /v1/jobs/{id} for a job Redis does not hold, from the journal: 1
 * when answered (200 with the row and the attempts its transitions
 * recorded, or 503 when the journal cannot be read or the row is a
 * client-given id's unsettled push, api_cut_off()), 2 when nothing was
 * answered because the row was a cut-off push made in Redis now (read it
 * there), 0 when nothing was answered (no journal, or no such job of the
 * tenant's in it).
 */
int	api_job_get_journal(struct api_req *req, const char *id);

/* What api_cut_off() made of an unfinished row Redis does not have. */
enum api_cut_off {
	API_CUT_NO,		/* a job Redis made or a rebuild brings back */
	API_CUT_UNSETTLED,	/* maybe in flight, or cannot tell now */
	API_CUT_MADE,		/* cut off, made in Redis now from its row */
};
struct api_ctx;
struct sched;
/*
 * The unfinished journal row of (tenant, id), created at created_ms,
 * whose job Redis does not hold.  Redis lost its data (a rebuild is owed;
 * *owed caches the flag across calls, -1 until asked): the rebuild brings
 * it back, API_CUT_NO.  The row has transitions, so Redis made the job and
 * let it go (finished longer ago than sched.retention, its last
 * transitions lost in a crash): API_CUT_NO.  Otherwise a push journaled
 * it and was cut off before Redis made it (retryd stopped or killed
 * between the two; its client got no 2xx), or is still in flight on some
 * instance: once the row is older than any push can take (30 s plus twice
 * redis.timeout plus ten times journal.timeout), the job is made from it
 * as a rebuild would (API_CUT_MADE, logged; nothing when Redis has it by
 * then); before that, or when Redis, the registry or the journal cannot
 * be read, API_CUT_UNSETTLED.  what names the request in the log.
 */
enum api_cut_off api_cut_off(struct api_ctx *ctx, struct sched *s,
	    const char *tenant, const char *id, int64_t created_ms,
	    int64_t now, int *owed, const char *what);
/* 503 push_unsettled with Retry-After: 1 (API_CUT_UNSETTLED). */
void	api_reply_unsettled(struct api_req *req);
/*
 * A change to job id that Redis does not hold: when id is client-given and
 * its unfinished journal row is a push cut off before Redis made it
 * (api_cut_off()), 1 after answering 503 push_unsettled, or 2 when the job
 * was made now (make the change again); 3 when the journal holds it
 * finished (Redis let it go after scheduler.retention, or its topic was
 * deleted): the change is refused as for a finished job, as
 * GET /v1/jobs/{id} shows it; else 0, answer as before.
 */
int	api_cut_off_req(struct api_req *req, const char *id,
	    const char *what);
/*
 * GET /v1/jobs/{id}'s job o from Redis, whose record logs fewer attempts
 * than it counts (it keeps the last 20; a job rebuilt from the journal
 * comes back without them): the journal's attempts before Redis's first
 * put in front of o's.  Nothing changes when the journal cannot say.
 */
struct sched_job;
void	api_job_older_attempts(struct api_req *req,
	    const struct sched_job *job, struct json_object *o);

struct jrnl_job;
struct sched;
/*
 * Put one job as the journal holds it back into Redis (sched_restore_job:
 * nothing if the id is there already; *created says which, -1 for a job
 * not made because its bizkey names another unfinished job, logged).  The one
 * conversion from a journal row to a job, for the restore routes and the
 * automatic restore.  SCHED_EINVAL for an id too long to be a job's.
 */
int	api_restore_journal_job(struct sched *s, const struct jrnl_job *jj,
	    int *created);
/* How far past its row's version a restored job's version starts. */
#define API_RESTORE_VERSION_STEP	65536

#endif
