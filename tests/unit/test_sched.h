/*
 * test_sched.h - what the scheduler's test files share: a recording set of
 * hooks, instances made against the test Redis, and waiting helpers.
 *
 * Key decision: tests never sleep to let time pass; they move the fake
 * clock and wait, with a deadline, for the timer's pass counter or for a
 * condition the hooks make true.
 */
#ifndef RETRYD_TESTS_TEST_SCHED_H
#define RETRYD_TESTS_TEST_SCHED_H

#include <pthread.h>
#include <stdint.h>

#include "scheduler/sched.h"
#include "tests/unit/redisfix.h"

#define T_TENANT	"acme"
#define T_DEADLINE_MS	20000

/* Deliveries per job id, for "none twice". */
struct tcount {
	char	(*ids)[ID_LEN + 65];
	int	*n;
	size_t	 cap;
};

struct tinst;

/* A delivery and the instance that made it. */
struct qent {
	struct sched_job	*job;
	struct tinst		*ti;
};

/* What the hooks of one or more instances saw; all under lock. */
struct trec {
	pthread_mutex_t		 lock;
	pthread_cond_t		 cond;
	struct redisfix		*redis;
	/* Deliveries not yet taken by the test (auto_ack off). */
	struct qent		*queue;
	size_t			 nqueue, capqueue;
	int64_t			 early;		/* deliveries before due */
	uint64_t		 ndelivered;
	uint64_t		 ntrans[SCHED_NSTATES + 1][SCHED_NSTATES];
	uint64_t		 nready;
	uint64_t		 nlost;
	int			 capacity;	/* per instance; <0: large */
	int			 tenant_capacity; /* a tenant's; <0: none */
	int			 auto_ack;	/* a worker reports OK */
	int			 stop_worker;
	struct tcount		 count;
	pthread_t		 worker;
	int			 worker_on;
	int			 mark_on_lost;
	int			 no_transition;	/* instances without the hook */
	int64_t			 max_late_ms;	/* delivery after due */
	/* topic_info() knows topic "unsure" (else it cannot tell); the
	   topic_recall() calls (atomics) */
	int			 unsure_known;
	int			 nrecall;
	/* The last change the journal would record (not to ready or
	   in flight): its job, state and version. */
	char			 jid[ID_LEN + 65];
	enum sched_state	 jto;
	int64_t			 jversion;
};

/* One struct sched with its hooks' argument. */
struct tinst {
	struct sched	*s;
	struct trec	*rec;
	int		 inflight;	/* deliveries not yet reported */
};

void	trec_init(struct trec *r, struct redisfix *redis);
void	trec_free(struct trec *r);
/* Starts the worker that reports OK for every delivery (auto_ack). */
void	trec_worker_start(struct trec *r);
void	trec_worker_stop(struct trec *r);
/* Deliveries of this id so far. */
int	trec_count(struct trec *r, const char *id);
/* Ids delivered more than once; ids delivered at all. */
int	trec_dups(struct trec *r);
int	trec_distinct(struct trec *r);
uint64_t trec_delivered(struct trec *r);

/*
 * A started instance named name; fake != 0 uses the fake clock; lease_ms
 * and sweep_ms 0 take the defaults the tests like.
 */
struct tinst *tinst_new(struct trec *r, const char *name, int fake,
	    int64_t lease_ms, int64_t sweep_ms, int64_t retention_ms);
/* sched_stop (abandon: sched_abandon) and free. */
void	tinst_free(struct tinst *ti, int abandon);

/* Waits for the instance to be ready and own want shards (or more). */
void	wait_owned(struct tinst *ti, int want);
/* Kicks the timer and waits for two passes (one that began after). */
void	kick_wait(struct sched *s);
/* Polls cond(arg) every ms until true or deadline; returns it. */
int	wait_for(int (*cond)(void *), void *arg, int64_t deadline_ms);
/* Takes the oldest delivery (waiting up to the deadline), or NULL. */
struct sched_job *take_delivery(struct trec *r);
void	expect_counts(struct sched *s, const char *topic,
	    const int64_t want[SCHED_NSTATES]);

/*
 * Pushes n jobs (4 threads) to topic due at due + i * spread_ms / n, each
 * with a body of body_len bytes: two threads by sched_push, two by
 * sched_push_many 64 at a time, so the timing tests cover both.
 */
void	push_many(struct sched *s, const char *topic, int64_t due,
	    int64_t spread_ms, int n, size_t body_len);

/* A flushed Redis for the next test. */
void	flush_redis(struct redisfix *f);
int64_t	real_ms(void);

/* The one Redis of the test program (started by the group setup). */
extern struct redisfix test_redis;

/*
 * The real-time tests (test_sched_multi.c); they run first, because the
 * fake clock cannot be turned off once on.
 */
int	msetup(void **state);
int	mteardown(void **state);
void	test_on_time(void **state);
void	test_two_instances(void **state);
void	test_kill_one(void **state);
void	test_redis_restart(void **state);
void	test_lost_wakeup(void **state);

#endif
