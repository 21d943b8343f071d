/*
 * sched.h - the Redis delay core: every job's state lives in Redis, spread
 * per tenant over N shards; every state change is one Lua script on one shard
 * (atomic, Redis Cluster safe); a timer thread promotes due jobs of the shards
 * this instance holds a lease on, hands due jobs of push topics to the
 * dispatcher and expires in-flight jobs past their deadline.
 *
 * Threading: every function here may be called from any thread (each call
 * takes a pooled connection); hooks run on the scheduler's own threads and
 * must not block for long.
 *
 * Ownership: a struct sched_job returned to the caller is the caller's, freed
 * with sched_job_free().  Strings passed in are copied or used only during the
 * call.
 */
#ifndef RETRYD_SCHEDULER_SCHED_H
#define RETRYD_SCHEDULER_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "schedules/schedule.h"
#include "util/id.h"

enum sched_state {
	SCHED_SCHEDULED = 0,	/* waiting for its first attempt */
	SCHED_READY,		/* due, waiting for a consumer or dispatcher */
	SCHED_IN_FLIGHT,	/* reserved: a callback or a consumer has it */
	SCHED_RETRYING,		/* an attempt failed, waiting for the next */
	SCHED_DELIVERED,
	SCHED_DEAD,
	SCHED_CANCELLED,
	SCHED_NSTATES
};

enum sched_err {
	SCHED_OK = 0,
	SCHED_ENOTFOUND,	/* no such job (or not this tenant's) */
	SCHED_ECONFLICT,	/* the job is in a state that forbids it */
	SCHED_ESTALE,		/* the token is not the current reservation's */
	SCHED_EUNAVAIL,		/* Redis unreachable or timed out */
	SCHED_EINVAL,		/* a bad argument (caller's bug or bad input) */
	SCHED_EINTERNAL,	/* unexpected reply: logged */
	SCHED_EFULL,		/* Redis out of memory: refused, not made */
	SCHED_EAGAIN,		/* the job's topic cannot be read now */
};

#define SCHED_TOKEN_LEN	22	/* characters, without the NUL */
#define SCHED_VERSION_MAX ((INT64_C(1) << 48) - 1)	/* 6 bytes in Redis */

const char *sched_strerror(enum sched_err e);
const char *sched_state_name(enum sched_state s);
/* The state named s, or -1. */
int	sched_state_parse(const char *s);

/* One attempt as logged in Redis (kept while the job is). */
struct sched_attempt {
	int64_t	 at_ms;
	int	 status;	/* HTTP status, or 0 */
	int64_t	 latency_ms;
	/*
	 * Wall ms when the attempt ended (its answer read, or its failure),
	 * rounded up; 0 when unknown.  A retry waits from here.  Not stored.
	 */
	int64_t	 end_ms;
	char	*error;		/* NULL when none */
	char	*excerpt;	/* first bytes of the response body, or NULL */
	size_t	 excerpt_len;
};

struct sched_job {
	char	 id[ID_LEN + 65];	/* generated (16) or given (<= 64) */
	char	*tenant;
	char	*topic;
	char	*bizkey;	/* NULL when none */
	enum sched_state state;
	int64_t	 due_ms;	/* the time of the next (or current) attempt */
	int64_t	 created_ms;
	int	 priority;	/* -1000 .. 1000, higher first */
	int	 attempts;	/* finished; the one in flight is +1 */
	/*
	 * How many changes the journal records the job has had (cancel,
	 * reschedule, redrive, an attempt's outcome): each takes the next
	 * version in Redis, so the journal orders a job's transitions by it
	 * rather than by the clocks of the instances that report them.
	 */
	int64_t	 version;	/* 0 .. SCHED_VERSION_MAX */
	char	*body;
	size_t	 body_len;
	char	*headers_json;	/* the job's own headers, or NULL */
	char	*schedule;	/* the job's own schedule text, or NULL */
	int64_t	 ttr_ms;	/* pull: time to run; 0 = the topic's */
	int	 shard;
	/* Filled by reserve and for jobs handed to the dispatcher: */
	char	 token[SCHED_TOKEN_LEN + 1];
	int64_t	 deadline_ms;
	/* Filled by sched_get: */
	struct sched_attempt *attempt_log;
	size_t	 nattempt_log;
};

void	sched_job_free(struct sched_job *job);

/* What the core needs to know of a topic (the registry answers). */
struct sched_topic_info {
	int	 push;		/* 1: callbacks, 0: pull consumers */
	int	 max_in_flight;
	int64_t	 timeout_ms;	/* push: callback timeout */
	int64_t	 ttr_ms;	/* pull: default time to run */
	struct retry_schedule schedule;
};

struct sched_hooks {
	/*
	 * Topic lookup: 0 and *out filled, -1 when the topic is unknown, -2
	 * when it cannot be told now (callers that only ask "is it known"
	 * take -2 as -1).
	 */
	int	(*topic_info)(const char *tenant, const char *topic,
		    struct sched_topic_info *out, void *arg);
	/*
	 * The topic from elsewhere (the journal), asked when topic_info()
	 * answered -2 and an attempt's outcome needs the topic's schedule:
	 * the same answers.  NULL: none.  Not asked by the timer's own
	 * thread (an expired deadline), which must not wait on it.
	 */
	int	(*topic_recall)(const char *tenant, const char *topic,
		    struct sched_topic_info *out, void *arg);
	/*
	 * How many more callbacks of this topic this instance may start now
	 * (its cap minus those in flight).
	 */
	int	(*capacity)(const char *tenant, const char *topic, void *arg);
	/*
	 * How many more callbacks all of the tenant's push topics together may
	 * start now (a cap of the tenant's, the instance's), or NULL: only
	 * capacity() bounds them.  A pass shares it among the tenant's topics
	 * instead of giving each topic all of it, and asks once per pass for
	 * each tenant with due or ready jobs in push topics, before it asks
	 * capacity() for any of the tenant's topics (the daemon counts a 0
	 * there as the tenant held back, and sets the tenant's own cap
	 * there).
	 */
	int	(*tenant_capacity)(const char *tenant, void *arg);
	/*
	 * A due job of a push topic, reserved for delivery (in flight, with
	 * token and deadline).  The callee owns job.
	 */
	void	(*deliver)(struct sched_job *job, void *arg);
	/* Jobs became ready in a topic (on any instance): wake consumers. */
	void	(*ready)(const char *tenant, const char *topic, void *arg);
	/*
	 * A job changed state (for the journal and metrics); may be NULL.
	 * Called after the change is in Redis.  from is SCHED_NSTATES for a
	 * new job (push; restores are not reported), from == to when a
	 * waiting job's due time moved (reschedule); for promotions (to
	 * SCHED_READY) job has no body, headers or schedule.
	 */
	void	(*transition)(const struct sched_job *job,
		    enum sched_state from, enum sched_state to,
		    const struct sched_attempt *attempt, void *arg);
	/* Redis lost its data (schema marker gone): rebuild it; may be NULL. */
	void	(*redis_lost)(void *arg);
	/*
	 * The Redis process behind the schema marker changed (a restart, a
	 * failover: its run_id), so the writes it took last may be gone
	 * though the marker is there (a snapshot or a replica behind): check
	 * every unfinished job against it; may be NULL.
	 */
	void	(*redis_restarted)(void *arg);
	void	*arg;
};

/*
 * The most jobs one script call takes (scheduler.batch).  A script passes
 * a call's jobs to one command as two arguments each (ids and records, or
 * scores and ids) with Lua's unpack(), which Redis's Lua refuses past about
 * 8000 values ("too many results to unpack"): 2000 keeps every script well
 * under that.
 */
#define SCHED_BATCH_MAX	2000

/* A field left 0 takes its default (shown). */
struct sched_config {
	const char	*redis_url;
	int64_t		 redis_timeout_ms;	/* 2000 */
	int		 shards;	/* per tenant, 1..ID_MAX_SHARD+1; 16 */
	int		 batch;		/* jobs per script call, 1..
					   SCHED_BATCH_MAX; 100 */
	int64_t		 sweep_ms;	/* 1000 */
	int64_t		 lease_ms;	/* 5000 */
	int64_t		 retention_ms;	/* finished jobs stay; 7 days */
	int64_t		 retry_after_cap_ms;
	const char	*instance;
	int		 fake_clock;	/* scripts take "now" from util/clock */
};

struct sched;

/* Copies cfg and hooks.  NULL with why on a bad config. */
struct sched *sched_new(const struct sched_config *cfg,
	    const struct sched_hooks *hooks, char *why, size_t whylen);
/*
 * Starts the timer and subscriber threads.  Connecting to Redis happens
 * there, with backoff: Redis down at start is not an error.
 */
int	sched_start(struct sched *s);
/* 1 when Redis is reachable and the schema is known; else 0 and why. */
int	sched_ready(struct sched *s, char *why, size_t whylen);
/* Stop taking new due jobs (drain); the threads keep renewing leases. */
void	sched_quiesce(struct sched *s);
/* A new scheduler.batch (1..SCHED_BATCH_MAX), from a reload. */
void	sched_set_batch(struct sched *s, int batch);
/* Stops the threads and hands the leases back. */
void	sched_stop(struct sched *s);
/*
 * Tests: stop as if the process died (leases, node and heartbeat are left
 * to time out in Redis).
 */
void	sched_abandon(struct sched *s);
void	sched_free(struct sched *s);
/* Wake the timer now (after the fake clock moved). */
void	sched_kick(struct sched *s);
/* Timer passes completed so far (tests wait for it to move). */
uint64_t sched_passes(struct sched *s);
/* Shards (indexes) this instance holds a lease on now. */
int	sched_owned_shards(struct sched *s);
struct sched_pool *sched_pool(struct sched *s);

/*
 * Shard of a new job: from its bizkey if any, else from its id.  (A
 * generated id carries its shard, and sched_push uses that one: generate it
 * with the job's bizkey.)
 */
int	sched_shard_for(struct sched *s, const char *bizkey, const char *id);
/* Shard of an existing job from its id (generated or client-given). */
int	sched_shard_of(struct sched *s, const char *id);
/*
 * A new id (16 characters) for a job with this bizkey (or NULL): the shard
 * in it is the bizkey's, else a hash of the id.
 */
void	sched_new_id(struct sched *s, const char *bizkey, char out[ID_LEN + 1]);
/*
 * A new id for job i of a batch, without a bizkey: runs of SCHED_RUN_JOBS
 * consecutive jobs share a shard, run 0 the one of the batch's time, each
 * next run the next shard.  *base is the batch's (-1 before its first id).
 * Jobs pushed together tend to fall due together, so a run's deliveries
 * share the scripts of one shard, and a large batch still spreads evenly.
 */
#define SCHED_RUN_JOBS	64
void	sched_new_id_run(struct sched *s, size_t i, int *base,
	    char out[ID_LEN + 1]);
/*
 * A new id for a job pushed alone without a bizkey: the shard in it is the
 * one of its time, the next every SCHED_STICKY_MS (sched.c), so lone pushes
 * that arrive together share a shard and one push_many call.
 */
void	sched_new_id_alone(struct sched *s, char out[ID_LEN + 1]);

struct sched_push {
	const char	*tenant;
	const char	*topic;
	const char	*id;		/* from sched_new_id or the client */
	const char	*bizkey;	/* NULL: none */
	int64_t		 run_at_ms;	/* first attempt: due + first wait */
	int		 priority;
	const char	*body;
	size_t		 body_len;
	const char	*headers_json;	/* NULL: none */
	const char	*schedule;	/* NULL: the topic's */
	int64_t		 ttr_ms;	/* 0: the topic's */
	/*
	 * 0: the id's own time for a generated id, else now.  A caller that
	 * journals the job passes the time its row says: a transition moves
	 * the row only when the two agree (docs/internals/JOURNAL.md).
	 */
	int64_t		 created_ms;
};

struct sched_push_result {
	char	 id[ID_LEN + 1 + 64];	/* the new job's, or the existing one */
	int	 deduplicated;		/* 1: the bizkey's unfinished job */
	int64_t	 run_at_ms;
	enum sched_state state;
};

enum sched_err sched_push(struct sched *s, const struct sched_push *p,
	    struct sched_push_result *res);
/*
 * Pushes p[0..n) as sched_push would one by one, in far fewer round trips:
 * one script call per shard and topic for up to scheduler.batch jobs (so no
 * call runs long), all calls pipelined on one connection.  A job with the
 * bizkey of an earlier one gets that one's id (deduplicated).  err[i] and
 * res[i] are job i's outcome.
 */
void	sched_push_many(struct sched *s, const struct sched_push *p, size_t n,
	    struct sched_push_result *res, enum sched_err *err);
/*
 * The jobs of n (tenants[i], ids[i]) at once, without attempt logs: out[i]
 * the job (the caller's) or NULL when there is none.  One round trip for
 * all, however many shards an id may be in (a client-given id pushed with
 * a bizkey lives in its bizkey's shard).
 */
enum sched_err sched_get_many(struct sched *s, const char *const *tenants,
	    const char *const *ids, size_t n, struct sched_job **out);
/* The job with its attempt log; *out is the caller's. */
enum sched_err sched_get(struct sched *s, const char *tenant, const char *id,
	    struct sched_job **out);
/* Cancel a job not yet finished; ECONFLICT when finished. */
enum sched_err sched_cancel(struct sched *s, const char *tenant,
	    const char *id);
/*
 * The unfinished jobs of topic that hold bizkeys[0..n) (NULL: none), as a
 * push of each would find them, in two pipelined round trips whatever n:
 * found[i] 1 and res[i] as sched_push would answer (deduplicated), else
 * found[i] 0.  An error leaves every found[i] 0.
 */
enum sched_err sched_find_bizkeys(struct sched *s, const char *tenant,
	    const char *topic, const char *const *bizkeys, size_t n,
	    struct sched_push_result *res, int *found);
/* Cancel the unfinished job with this bizkey; ENOTFOUND when none. */
enum sched_err sched_cancel_bizkey(struct sched *s, const char *tenant,
	    const char *topic, const char *bizkey, char id_out[ID_LEN + 65]);
/*
 * A topic deleted with its jobs: every job of the topic leaves Redis
 * (record, sets, counts, bizkeys, attempt logs), the unfinished and dead
 * ones reported as cancelled.  *n: how many unfinished or dead jobs went.
 */
enum sched_err sched_drop_topic(struct sched *s, const char *tenant,
	    const char *topic, int64_t *n);
/* The same for every topic of a tenant, then the tenant's shard keys. */
enum sched_err sched_drop_tenant(struct sched *s, const char *tenant,
	    int64_t *n);
/* Move a waiting (scheduled or retrying) job; ECONFLICT otherwise. */
enum sched_err sched_reschedule(struct sched *s, const char *tenant,
	    const char *id, int64_t run_at_ms);

/*
 * Pull: reserve the best ready job of the topic (higher priority, then
 * earlier due) for ttr_ms; ENOTFOUND when none is ready.
 */
enum sched_err sched_reserve(struct sched *s, const char *tenant,
	    const char *topic, int64_t ttr_ms, struct sched_job **out);
/*
 * Pull, for n consumers at once: reserve up to n of the best ready jobs into
 * out[] (room for n), best first, *nout of them; ENOTFOUND when none.
 */
enum sched_err sched_reserve_many(struct sched *s, const char *tenant,
	    const char *topic, int64_t ttr_ms, size_t n, struct sched_job **out,
	    size_t *nout);
/*
 * Report the outcome of the attempt reserved with token: SCHEDULE_OK
 * finishes the job, anything else applies the schedule (retry at the next
 * wait, or dead).  ESTALE when token is not the current reservation's.
 * attempt may be NULL (pull); decision (may be NULL) says what was done.
 */
enum sched_err sched_report(struct sched *s, const char *tenant,
	    const char *id, const char *token,
	    const struct schedule_outcome *outcome,
	    const struct sched_attempt *attempt,
	    struct schedule_decision *decision);
/* Give a reserved job back without counting an attempt (drain). */
enum sched_err sched_release(struct sched *s, const char *tenant,
	    const char *id, const char *token);

/* Dead letters of a topic, newest first; cursor "" to start. */
enum sched_err sched_dead_list(struct sched *s, const char *tenant,
	    const char *topic, const char *cursor, size_t limit,
	    struct sched_job ***jobs, size_t *njobs, char *next_cursor,
	    size_t next_cursor_len);
/*
 * A dead job runs its schedule again: due now, its attempts back to 0, its
 * first attempt after the first wait of its schedule (its own, else its
 * topic's), as a push's.  ECONFLICT when it is not dead, or when its
 * bizkey names another unfinished job of its topic: then holder (else "")
 * is that job's id and the job stays dead.  EAGAIN when its topic's
 * schedule cannot be read now.
 */
enum sched_err sched_retry(struct sched *s, const char *tenant,
	    const char *id, char holder[ID_LEN + 65]);
/*
 * Every dead job of the topic runs again as sched_retry's does, each
 * visited once; *count says how many, *skipped how many stay dead because
 * their bizkey names another unfinished job of the topic.
 */
enum sched_err sched_redrive(struct sched *s, const char *tenant,
	    const char *topic, int64_t *count, int64_t *skipped);

/* Jobs per state of a topic (topic NULL: the whole tenant). */
enum sched_err sched_counts(struct sched *s, const char *tenant,
	    const char *topic, int64_t counts[SCHED_NSTATES]);

/*
 * Restore: put job (as the journal holds it) back into Redis unless a job
 * with that id is there already; *created says which (1 made, 0 there).
 * Idempotent.  An unfinished job whose bizkey names another unfinished job
 * of its topic in Redis is not made (*created -1): a topic holds one
 * unfinished job per bizkey, and the one Redis has (pushed while Redis
 * lacked this one, or made first by the same rebuild) stands; the change
 * to cancelled is reported (hooks.transition), so the journal's row ends
 * and no later rebuild makes it.
 */
enum sched_err sched_restore_job(struct sched *s, const struct sched_job *job,
	    int *created);
/* Write the schema marker (after a restore, or on a fresh Redis). */
enum sched_err sched_mark_schema(struct sched *s);

/* The value of this scheduler's leases: its instance and a random part. */
const char *sched_holder(const struct sched *s);
/*
 * Before sched_start: holder is the lease value of a run that is known to
 * be gone (it held the data_dir's lock, which is ours now); the timer's
 * first round lets go of the shard leases it still holds, instead of
 * waiting scheduler.lease for them to run out.
 */
void	sched_set_predecessor(struct sched *s, const char *holder);

#endif
