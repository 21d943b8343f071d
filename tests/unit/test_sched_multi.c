/*
 * test_sched_multi.c - the scheduler's tests on real time: precision of the
 * timer on Redis time, two instances sharing one Redis (10k jobs, none
 * twice), one instance killed (its shards move within the lease TTL and
 * every job still arrives), and Redis restarted under load (the timer
 * recovers by itself).  Two struct sched in one process stand for two
 * instances; killing one is sched_abandon (its leases are left to expire).
 *
 * Key decision: each test waits for a condition with a deadline (all
 * delivered, shards owned); a worker thread plays the dispatcher and reports
 * every delivery, retrying while Redis is away.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/conn.h"
#include "scheduler/sched.h"
#include "tests/unit/test_sched.h"
#include "util/clock.h"

struct mfx {
	struct trec	 rec;
	struct tinst	*a, *b;
};

int
msetup(void **state)
{
	struct mfx *f = calloc(1, sizeof(*f));

	flush_redis(&test_redis);
	trec_init(&f->rec, &test_redis);
	f->rec.auto_ack = 1;
	trec_worker_start(&f->rec);
	*state = f;
	return 0;
}

int
mteardown(void **state)
{
	struct mfx *f = *state;

	trec_worker_stop(&f->rec);
	tinst_free(f->a, 0);
	tinst_free(f->b, 0);
	trec_free(&f->rec);
	free(f);
	return 0;
}

struct all_arg {
	struct trec	*rec;
	int		 n;
};

static int
all_cond(void *arg)
{
	struct all_arg *a = arg;

	return trec_distinct(a->rec) >= a->n;
}

static void
wait_all(struct trec *rec, int n, int64_t deadline_ms)
{
	struct all_arg a = { rec, n };

	if (!wait_for(all_cond, &a, deadline_ms))
		print_error("delivered %d of %d\n", trec_distinct(rec), n);
	assert_true(all_cond(&a));
}

static int
split_cond(void *arg)
{
	struct mfx *f = arg;
	int na = sched_owned_shards(f->a->s), nb = sched_owned_shards(f->b->s);

	return na + nb == 16 && na > 0 && nb > 0;
}

void
test_on_time(void **state)
{
	struct mfx *f = *state;
	int64_t want[SCHED_NSTATES] = { 0 };

	f->a = tinst_new(&f->rec, "solo", 0, 0, 0, 0);
	wait_owned(f->a, 16);
	push_many(f->a->s, "push", clock_wall_ms() + 200, 300, 50, 60);
	wait_all(&f->rec, 50, T_DEADLINE_MS);
	print_message("# latest delivery after its due time: %lld ms\n",
	    (long long)f->rec.max_late_ms);
	assert_int_equal(f->rec.early, 0);
	assert_true(f->rec.max_late_ms < 250);
	assert_int_equal(trec_dups(&f->rec), 0);
	trec_worker_stop(&f->rec);
	want[SCHED_DELIVERED] = 50;
	expect_counts(f->a->s, "push", want);
}

void
test_two_instances(void **state)
{
	struct mfx *f = *state;
	int64_t want[SCHED_NSTATES] = { 0 }, now;

	f->a = tinst_new(&f->rec, "inst-a", 0, 600, 200, 0);
	f->b = tinst_new(&f->rec, "inst-b", 0, 600, 200, 0);
	assert_true(wait_for(split_cond, f, T_DEADLINE_MS));
	now = clock_wall_ms();
	push_many(f->a->s, "push", now, 500, 5000, 60);
	push_many(f->b->s, "push", now, 500, 5000, 60);
	wait_all(&f->rec, 10000, 40000);
	assert_int_equal(trec_dups(&f->rec), 0);
	assert_int_equal(trec_delivered(&f->rec), 10000);
	assert_int_equal(f->rec.early, 0);
	trec_worker_stop(&f->rec);
	want[SCHED_DELIVERED] = 10000;
	expect_counts(f->a->s, "push", want);
}

static int
took_all_cond(void *arg)
{
	struct mfx *f = arg;

	return sched_owned_shards(f->b->s) == 16;
}

struct half_arg {
	struct trec	*rec;
	uint64_t	 n;
};

static int
some_cond(void *arg)
{
	struct half_arg *h = arg;

	return trec_delivered(h->rec) >= h->n;
}

void
test_kill_one(void **state)
{
	struct mfx *f = *state;
	struct half_arg h = { &f->rec, 500 };
	int64_t t0, moved_ms;

	f->a = tinst_new(&f->rec, "doomed", 0, 300, 100, 0);
	f->b = tinst_new(&f->rec, "survivor", 0, 300, 100, 0);
	assert_true(wait_for(split_cond, f, T_DEADLINE_MS));
	push_many(f->a->s, "push", clock_wall_ms(), 1500, 2000, 60);
	assert_true(wait_for(some_cond, &h, T_DEADLINE_MS));
	t0 = real_ms();
	sched_abandon(f->a->s);
	assert_true(wait_for(took_all_cond, f, T_DEADLINE_MS));
	moved_ms = real_ms() - t0;
	print_message("# shards moved %lld ms after the kill (lease 300 ms)\n",
	    (long long)moved_ms);
	/* Within the lease TTL (plus slack for a loaded machine). */
	assert_true(moved_ms <= 300 + 100);
	wait_all(&f->rec, 2000, T_DEADLINE_MS);
	assert_int_equal(trec_dups(&f->rec), 0);
	assert_int_equal(f->rec.early, 0);
}

static int
ready_cond(void *arg)
{
	return sched_ready(arg, NULL, 0);
}

static int
lost_cond(void *arg)
{
	struct trec *r = arg;
	int v;

	pthread_mutex_lock(&r->lock);
	v = r->nlost > 0;
	pthread_mutex_unlock(&r->lock);
	return v;
}

void
test_redis_restart(void **state)
{
	struct mfx *f = *state;
	struct half_arg h = { &f->rec, 300 };
	int64_t want[SCHED_NSTATES] = { 0 };

	f->a = tinst_new(&f->rec, "restart", 0, 1000, 200, 0);
	wait_owned(f->a, 16);
	push_many(f->a->s, "push", clock_wall_ms(), 2000, 1000, 60);
	assert_true(wait_for(some_cond, &h, T_DEADLINE_MS));
	/* Restarted with its data (SHUTDOWN SAVE): nothing is lost. */
	assert_int_equal(redisfix_restart(&test_redis, 1), 0);
	wait_all(&f->rec, 1000, 30000);
	assert_true(wait_for(ready_cond, f->a->s, T_DEADLINE_MS));
	assert_int_equal(trec_dups(&f->rec), 0);
	assert_int_equal(f->rec.early, 0);
	assert_int_equal(f->rec.nlost, 0);
	trec_worker_stop(&f->rec);
	want[SCHED_DELIVERED] = 1000;
	expect_counts(f->a->s, "push", want);

	/* Restarted without it: the loss is noticed and reported. */
	f->rec.mark_on_lost = 1;
	assert_int_equal(redisfix_restart(&test_redis, 0), 0);
	assert_true(wait_for(lost_cond, &f->rec, T_DEADLINE_MS));
	assert_true(wait_for(ready_cond, f->a->s, T_DEADLINE_MS));
}

static int
errors_above(void *arg)
{
	return sched_redis_errors() > *(const uint64_t *)arg;
}

/* A subscriber is connected and subscribed. */
static int
subscribed(void *arg)
{
	redisReply *r;
	int yes;

	(void)arg;
	r = redisfix_cmd(&test_redis, "CLIENT LIST TYPE pubsub");
	yes = r != NULL && r->type == REDIS_REPLY_STRING && r->len > 0;
	if (r != NULL)
		freeReplyObject(r);
	return yes;
}

/*
 * The subscriber's connection is killed just before a job lands: its wake-up
 * may be lost; the subscriber comes back and the sweep finds the job.  The
 * lost connection counts in retryd_redis_errors_total.  (The kill waits for
 * the subscriber to be there: killing nobody proved nothing, and failed the
 * count now and then.)
 */
void
test_lost_wakeup(void **state)
{
	struct mfx *f = *state;
	redisReply *r;
	uint64_t e0;

	f->a = tinst_new(&f->rec, "deaf", 0, 0, 200, 0);
	wait_owned(f->a, 16);
	assert_true(wait_for(subscribed, NULL, T_DEADLINE_MS));
	e0 = sched_redis_errors();
	r = redisfix_cmd(&test_redis, "CLIENT KILL TYPE pubsub");
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_INTEGER);
	assert_true(r->integer >= 1);
	freeReplyObject(r);
	push_many(f->a->s, "push", clock_wall_ms() + 50, 0, 10, 60);
	wait_all(&f->rec, 10, 5000);
	assert_int_equal(f->rec.early, 0);
	assert_int_equal(trec_dups(&f->rec), 0);
	assert_true(wait_for(errors_above, &e0, T_DEADLINE_MS));
}
