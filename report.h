/*
 * report.h - the outcome reporter: applies the outcomes of push callbacks
 * (sched_report) and hands back unmade attempts (sched_release) on threads
 * of its own, so the dispatcher's event loops never wait for Redis.
 *
 * Threading: report_outcome() and report_release() may be called from any
 * thread; they copy what they are given and return at once unless the queue
 * is full (then they wait for room: back-pressure, never loss).
 * report_drain() and report_free() from one controlling thread.
 */
#ifndef RETRYD_REPORT_H
#define RETRYD_REPORT_H

#include <stddef.h>

#include "schedules/schedule.h"
#include "scheduler/sched.h"

struct reporter;

/* Starts the threads; NULL with errno when they cannot be made. */
struct reporter *report_new(struct sched *s);
/*
 * Queues the outcome of attempt number attempt of job id (reserved with
 * token).  a is copied; *excerpt, when not NULL, is taken (set to NULL).
 * *job, when not NULL, is the job as reserved (its body may be gone) and is
 * taken too: the reporter then decides from it instead of reading the
 * record back from Redis (finish.lua's token check still fences it).
 */
void	report_outcome(struct reporter *r, const char *tenant, const char *id,
	    const char *token, int attempt, const struct schedule_outcome *o,
	    const struct sched_attempt *a, char **excerpt,
	    struct sched_job **job);
/* Queues giving the job back without counting an attempt. */
void	report_release(struct reporter *r, const char *tenant, const char *id,
	    const char *token, struct sched_job **job);
/* Returns when everything queued so far has been applied. */
void	report_drain(struct reporter *r);
/* Drains, stops the threads, frees. */
void	report_free(struct reporter *r);

#endif
