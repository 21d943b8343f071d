/*
 * sched_batch.h - applying the outcomes of many reserved jobs at once (the
 * daemon's outcome reporter): for each, what sched_report() or
 * sched_release() would do, with the reads of all of them in one pipeline
 * and their scripts in another.
 *
 * Key decision: two round trips for a batch instead of two per outcome;
 * each outcome is still its own fenced script (finish.lua), so a batch
 * changes nothing of what one outcome means, and anything the pipeline
 * cannot decide (a client-given id outside its hashed shard) goes the one
 * by one way.
 */
#ifndef RETRYD_SCHEDULER_SCHED_BATCH_H
#define RETRYD_SCHEDULER_SCHED_BATCH_H

#include <stddef.h>

#include "schedules/schedule.h"
#include "scheduler/sched.h"

struct sched_report_item {
	const char			*tenant;
	const char			*id;
	const char			*token;
	int				 release;	/* sched_release() */
	struct schedule_outcome		 outcome;
	const struct sched_attempt	*attempt;	/* may be NULL */
	/*
	 * The job as reserved for this token (body not needed), or NULL: then
	 * its record is read from Redis first.  Borrowed; it may be changed.
	 * finish.lua is fenced by the token, so a copy that is no longer
	 * current is refused there as a stale token.
	 */
	struct sched_job		*job;
	/* Out: what sched_report() would return, and its decision. */
	enum sched_err			 err;
	struct schedule_decision	 decision;
};

/* Applies v[0 .. n-1]; each item's err says how it went. */
void	sched_report_many(struct sched *s, struct sched_report_item *v,
	    size_t n);

#endif
