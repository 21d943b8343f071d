/*
 * pull_batch.h - the pull routes' Redis work done in batches off the HTTP
 * threads: reserves of waiting consumers and acks/nacks (pull_batch.c).
 *
 * Key decision: a handler never waits for Redis.  It fills a struct
 * pull_op, parks its request (api_suspend) and queues the op; a worker
 * applies every op queued at once and resumes each request, whose handler,
 * called again, answers from its op.  Acks and nacks with a journal to
 * wait for are resumed once a flush ticket of the journal says their
 * transitions are committed: one ticket per batch, so acks applied
 * together share the wait and the commit.  An op may ask for several jobs
 * (reserve?max=) or carry several acks (POST /v1/jobs:ack): the worker
 * applies them with everyone else's, as if each were a request of its own.
 */
#ifndef RETRYD_API_PULL_BATCH_H
#define RETRYD_API_PULL_BATCH_H

#include <stdint.h>

#include "api/http.h"
#include "api/validate.h"
#include "journal/journal.h"
#include "schedules/schedule.h"
#include "scheduler/sched.h"

#define PULL_TOKEN_MAX	64
#define PULL_RESERVE_MAX 100	/* jobs one reserve may ask for (max=) */

/* One job's ack or nack: a single route's op holds one, a batch's many. */
struct pull_item {
	char			 id[API_JOB_ID_MAX + 1];
	char			 token[PULL_TOKEN_MAX + 1];
	/* Out */
	enum sched_err		 err;
	struct schedule_decision decision;
};

enum pull_op_kind {
	PULL_OP_RESERVE,
	PULL_OP_FINISH
};

struct pull_op {
	/* In: set by the handler before pull_op_submit(). */
	enum pull_op_kind	 kind;
	struct sched		*sched;
	char			 tenant[API_TENANT_MAX + 1];
	char			 topic[API_TOPIC_MAX + 1];	/* reserve */
	int64_t			 ttr_ms;			/* reserve */
	size_t			 want;	/* reserve: jobs asked for, >= 1 */
	struct pull_item	*items;	/* finish: &one, or an array */
	size_t			 nitems;
	struct pull_item	 one;
	int			 ack;				/* finish */
	int			 release;	/* finish: give the jobs back
						   (no attempt counted) */
	struct jrnl		*jrnl;	/* finish: wait for the commit of its
					   transition (sync mode); NULL: not */
	/* Out: valid once the handler runs again. */
	enum sched_err		 err;	/* reserve */
	enum jrnl_err		 jerr;	/* finish: the journal's answer */
	struct sched_job	**jobs;	/* reserve: njobs, the handler's */
	size_t			 njobs;
	/* The workers' (pull_batch.c) */
	struct pull_op		*next;
	struct api_req		*req;		/* NULL once the request ends */
	int			 refs;
	int			 done;
};

/*
 * A new op for req, with the request's reference: a reserve of one job, or
 * a finish of one item (op->one); a batch's handler points items at an
 * array of its own (freed with the op).
 */
struct pull_op *pull_op_new(struct api_req *req, enum pull_op_kind kind);
/*
 * The request is done with op (its free_state, or after answering).  Jobs
 * a reserve holds that its handler did not take (op->njobs > 0: the
 * request ended first, or the consumer left) are given back to their
 * ready sets with no attempt counted, as if never reserved.
 */
void	pull_op_release(struct pull_op *op);
/*
 * Parks req and queues op: 0, and the handler runs again once op is done.
 * 1 when no worker runs: op was done here and req is not parked.
 */
int	pull_op_submit(struct api_req *req, struct pull_op *op);
/* 1 when op is done; else req is parked again until it is. */
int	pull_op_wait(struct api_req *req, struct pull_op *op);
/* Applies what is queued and joins the workers (after the server stops). */
void	pull_batch_stop(void);
/*
 * Tests only (the debug routes, with the fake clock): while held, the
 * reserve worker takes its batch and waits before applying it, so a test
 * can act while a reserve is in progress.  The stop lets it go.
 */
void	pull_batch_hold(int on);
/* 1 when held; *waiting: reserves taken and waiting at the hold. */
int	pull_batch_holding(size_t *waiting);

#endif
