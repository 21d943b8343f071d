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
 * recorded, or 503 when the journal cannot be read), 0 when nothing was
 * answered (no journal, or no such job of the tenant's in it).
 */
int	api_job_get_journal(struct api_req *req, const char *id);
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
 * nothing if the id is there already; *created says which).  The one
 * conversion from a journal row to a job, for the restore routes and the
 * automatic restore.  SCHED_EINVAL for an id too long to be a job's.
 */
int	api_restore_journal_job(struct sched *s, const struct jrnl_job *jj,
	    int *created);
/* How far past its row's version a restored job's version starts. */
#define API_RESTORE_VERSION_STEP	65536

#endif
