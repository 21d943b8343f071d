/*
 * test_journal_outage.c - the journal tests where the database goes away:
 * SYNC puts fail fast and nothing accepted is lost, ASYNC puts and
 * transitions wait in bounded queues, opening before the database is up,
 * and a row the database refuses failing alone.
 *
 * Key decision: SQLite's outage is the journal's test hook (a file cannot
 * be made to vanish for root); MySQL's is the hook and also a real stop and
 * start of the private server, on the same port and data.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "journal/internal.h"
#include "journal/journal.h"
#include "tests/unit/test_journal.h"
#include "util/clock.h"

#define NELEM(a)	(sizeof(a) / sizeof((a)[0]))

/* ---- the database going away --------------------------------------------- */

static int64_t
elapsed_ms(int64_t t0_us)
{
	return (clock_mono_us() - t0_us) / 1000;
}

/*
 * SYNC mode with the database gone: puts fail fast with JRNL_EUNAVAIL,
 * transitions wait in the queue, and after it is back everything accepted
 * and everything queued is there.  outage(b, 1) makes it go away, (b, 0)
 * brings it back.
 */
static void
outage_case(struct tb *b, int (*outage)(struct tb *, int))
{
	struct jrnl_job j1 = tj_job("o", "a", "O1", NULL, 10);
	struct jrnl_job j2 = tj_job("o", "a", "O2", NULL, 11);
	struct jrnl_job j3 = tj_job("o", "a", "O3", NULL, 12);
	struct jrnl_transition tr = tj_trans("o", "O1", "scheduled", "ready",
	    20, 0);
	struct jrnl_stats st;
	struct ids ids = { .n = 0 };
	char why[256] = "";
	struct jrnl *j;
	int64_t t0;

	tr.version = 1;
	tr.created_ms = j1.created_ms;
	j = tj_open(b, JRNL_MODE_SYNC);
	assert_int_equal(jrnl_put_jobs(j, &j1, 1), JRNL_OK);
	assert_int_equal(outage(b, 1), 0);

	t0 = clock_mono_us();
	assert_int_equal(jrnl_put_jobs(j, &j2, 1), JRNL_EUNAVAIL);
	print_message("# %s: put with the database gone failed in %lld ms\n",
	    b->name, (long long)elapsed_ms(t0));
	assert_true(elapsed_ms(t0) < 3000);	/* timeout_ms 1000 */
	assert_true(tj_wait_until(tj_not_ready, j, 5000));
	assert_int_equal(jrnl_ready(j, why, sizeof(why)), 0);
	assert_true(why[0] != '\0');
	t0 = clock_mono_us();
	assert_int_equal(jrnl_put_jobs(j, &j2, 1), JRNL_EUNAVAIL);
	assert_true(elapsed_ms(t0) < 3000);
	jrnl_transition(j, &tr);
	assert_int_equal(jrnl_flush(j), -1);
	assert_int_equal(jrnl_get_job(j, "o", "O1", tj_collect_id, &ids),
	    JRNL_EUNAVAIL);
	jrnl_get_stats(j, &st);
	assert_int_equal(st.queued_transitions, 1);

	assert_int_equal(outage(b, 0), 0);
	assert_true(tj_wait_until(tj_is_ready, j, 20000));
	assert_int_equal(jrnl_put_jobs(j, &j3, 1), JRNL_OK);
	assert_int_equal(jrnl_flush(j), 0);
	assert_string_equal(tj_get_one(j, "o", "O1").state, "ready");
	assert_true(tj_get_one(j, "o", "O3").found);
	assert_false(tj_get_one(j, "o", "O2").found);	/* never accepted */
	tj_close(j);
	assert_int_equal(tj_int(b, "SELECT COUNT(*) FROM jobs"), 2);
}

static int
hook_outage(struct tb *b, int down)
{
	(void)b;
	jrnl_test_set_unavailable(down);
	return 0;
}

void
test_outage_hook(void **state)
{
	outage_case(tj_begin(state), hook_outage);
}

static int
server_outage(struct tb *b, int down)
{
	return down ? tbm_stop(b) : tbm_start(b);
}

void
test_outage_server(void **state)
{
	struct tb *b = tj_begin(state);

	if (!b->own_server) {
		print_message("# SKIP mysql: RETRYD_TEST_MYSQL_URL names a "
		    "server this test may not stop\n");
		skip();
	}
	outage_case(b, server_outage);
}

/* Opening while the database is away: not ready, then ready. */
void
test_start_unavailable(void **state)
{
	struct tb *b = tj_begin(state);
	struct jrnl_config c = tj_cfg(b, JRNL_MODE_SYNC);
	struct jrnl_job job = tj_job("s", "a", "U1", NULL, 1);
	enum jrnl_err e;
	char why[256];
	struct jrnl *j;

	jrnl_test_set_unavailable(1);
	assert_null(jrnl_open(&c, &e, why, sizeof(why)));
	assert_int_equal(e, JRNL_EUNAVAIL);
	c.start_unavailable = 1;
	j = tj_open_cfg(&c);
	assert_int_equal(jrnl_ready(j, why, sizeof(why)), 0);
	assert_int_equal(jrnl_put_jobs(j, &job, 1), JRNL_EUNAVAIL);
	jrnl_test_set_unavailable(0);
	assert_true(tj_wait_until(tj_is_ready, j, 20000));
	assert_int_equal(jrnl_put_jobs(j, &job, 1), JRNL_OK);
	tj_close(j);
	assert_int_equal(tj_int(b, "SELECT COUNT(*) FROM jobs"), 1);
}

/* ASYNC mode: puts queue while the database is gone, up to the cap. */
void
test_async_queue(void **state)
{
	struct tb *b = tj_begin(state);
	struct jrnl_config c = tj_cfg(b, JRNL_MODE_ASYNC);
	struct jrnl_job job;
	struct jrnl_transition tr;
	struct jrnl_stats st;
	static char idbuf[12][8];
	struct jrnl *j;
	int i;

	c.queue_max = 10;
	j = tj_open_cfg(&c);
	jrnl_test_set_unavailable(1);
	for (i = 0; i < 11; i++) {
		snprintf(idbuf[i], sizeof(idbuf[i]), "A%02d", i);
		job = tj_job("q", "a", idbuf[i], NULL, 100 + i);
		assert_int_equal(jrnl_put_jobs(j, &job, 1),
		    i < 10 ? JRNL_OK : JRNL_EFULL);
	}
	for (i = 0; i < 15; i++) {
		tr = tj_trans("q", idbuf[i % 10], "scheduled", "ready",
		    200 + i, 0);
		tr.version = 1 + i / 10;
		tr.created_ms = 100 + i % 10;
		jrnl_transition(j, &tr);
	}
	jrnl_get_stats(j, &st);
	assert_int_equal(st.queued_jobs, 10);
	assert_int_equal(st.queued_transitions, 10);
	assert_int_equal(st.transitions_dropped, 5);
	assert_int_equal(st.jobs_dropped, 1);
	assert_int_equal(jrnl_flush(j), -1);

	jrnl_test_set_unavailable(0);
	assert_true(tj_wait_until(tj_is_ready, j, 20000));
	assert_int_equal(jrnl_flush(j), 0);
	jrnl_get_stats(j, &st);
	assert_int_equal(st.queued_jobs, 0);
	assert_int_equal(st.jobs_written, 10);
	assert_int_equal(st.transitions_written, 10);
	assert_string_equal(tj_get_one(j, "q", "A09").state, "ready");
	tj_close(j);
	assert_int_equal(tj_int(b, "SELECT COUNT(*) FROM jobs"), 10);
}

struct ticket {
	pthread_mutex_t	mu;
	int		done;
	enum jrnl_err	err;
};

static void
ticket_done(enum jrnl_err err, void *arg)
{
	struct ticket *t = arg;

	pthread_mutex_lock(&t->mu);
	t->err = err;
	t->done = 1;
	pthread_mutex_unlock(&t->mu);
}

/* Wait for a ticket's callback: its answer, or -1 after 20 s. */
static int
ticket_wait(struct ticket *t)
{
	struct timespec ts = { 0, 10 * 1000 * 1000 };
	int64_t t0 = clock_mono_us();
	int done, err;

	for (;;) {
		pthread_mutex_lock(&t->mu);
		done = t->done;
		err = (int)t->err;
		pthread_mutex_unlock(&t->mu);
		if (done)
			return err;
		if (elapsed_ms(t0) > 20000)
			return -1;
		nanosleep(&ts, NULL);
	}
}

/*
 * A flush ticket taken after one of its thread's transitions was dropped
 * (the queue full) answers JRNL_EFULL, even once the database is back and
 * the transitions that did fit are written: the change it waits for would
 * never be.  The next ticket waits as before.
 */
void
test_ticket_dropped(void **state)
{
	struct tb *b = tj_begin(state);
	struct jrnl_config c = tj_cfg(b, JRNL_MODE_SYNC);
	struct ticket t = { PTHREAD_MUTEX_INITIALIZER, 0, JRNL_OK };
	struct jrnl_transition tr;
	struct jrnl_stats st;
	struct jrnl *j;
	int i;

	c.queue_max = 4;
	j = tj_open_cfg(&c);
	jrnl_test_set_unavailable(1);
	for (i = 0; i < 5; i++) {
		tr = tj_trans("d", "D1", "scheduled", "cancelled", 100 + i, 0);
		jrnl_transition(j, &tr);
	}
	jrnl_get_stats(j, &st);
	assert_int_equal(st.transitions_dropped, 1);
	jrnl_test_set_unavailable(0);
	assert_true(tj_wait_until(tj_is_ready, j, 20000));
	assert_int_equal(jrnl_flush_cb(j, ticket_done, &t), JRNL_EFULL);
	assert_int_equal(t.done, 0);

	/* Told once: a ticket after it waits for the commit. */
	assert_int_equal(jrnl_flush(j), 0);
	tr = tj_trans("d", "D1", "cancelled", "cancelled", 200, 0);
	jrnl_transition(j, &tr);
	assert_int_equal(jrnl_flush_cb(j, ticket_done, &t), JRNL_OK);
	assert_int_equal(ticket_wait(&t), JRNL_OK);
	jrnl_get_stats(j, &st);
	assert_int_equal(st.transitions_written, 5);
	tj_close(j);
	assert_int_equal(tj_int(b, "SELECT COUNT(*) FROM transitions "
	    "WHERE tenant = 'd'"), 5);
}

/*
 * A backlog of ASYNC puts larger than one batch (the database was away):
 * a transition queued after a put is never written before that put, or it
 * would update no row and the row, written later, would keep the job's
 * first state (a delivered job restored and delivered again).
 */
#define TO_REQS		5
#define TO_JOBS		1000	/* TO_REQS * TO_JOBS > one batch */

void
test_trans_order(void **state)
{
	struct tb *b = tj_begin(state);
	struct jrnl_config c = tj_cfg(b, JRNL_MODE_ASYNC);
	static char ids[TO_REQS * TO_JOBS][8];
	static struct jrnl_job jobs[TO_JOBS];
	struct jrnl_transition tr;
	struct jrnl_stats st;
	struct jrnl *j;
	int i, k;

	jrnl_test_set_unavailable(1);
	c.start_unavailable = 1;
	j = tj_open_cfg(&c);
	for (i = 0; i < TO_REQS; i++) {
		for (k = 0; k < TO_JOBS; k++) {
			snprintf(ids[i * TO_JOBS + k], sizeof(ids[0]), "O%04d",
			    i * TO_JOBS + k);
			jobs[k] = tj_job("o", "a", ids[i * TO_JOBS + k], NULL,
			    100);
		}
		assert_int_equal(jrnl_put_jobs(j, jobs, TO_JOBS), JRNL_OK);
		/* The last job of this put, delivered. */
		tr = tj_trans("o", ids[i * TO_JOBS + TO_JOBS - 1], "in_flight",
		    "delivered", 200 + i, 1);
		tr.version = 1;
		tr.created_ms = 100;
		jrnl_transition(j, &tr);
	}
	jrnl_test_set_unavailable(0);
	assert_true(tj_wait_until(tj_is_ready, j, 20000));
	assert_int_equal(jrnl_flush(j), 0);
	jrnl_get_stats(j, &st);
	assert_int_equal(st.jobs_written, TO_REQS * TO_JOBS);
	assert_int_equal(st.transitions_written, TO_REQS);
	assert_true(st.commits >= 2);		/* more than one batch */
	for (i = 0; i < TO_REQS; i++)
		assert_string_equal(tj_get_one(j, "o",
		    ids[i * TO_JOBS + TO_JOBS - 1]).state, "delivered");
	tj_close(j);
	assert_int_equal(tj_int(b, "SELECT COUNT(*) FROM jobs "
	    "WHERE state = 'delivered'"), TO_REQS);
}

/*
 * A row the database refuses fails its own put and no other.  The three
 * ASYNC puts must meet in one batch, so the database is away while they
 * are queued: the journal opens without it, and its writer takes no put
 * before it connects (with the hook switched on after an open, a writer
 * could take the first put alone, and a write it saw fail could be
 * counted only after the test had found it ready and begun its flush).
 */
void
test_refused_row(void **state)
{
	struct tb *b = tj_begin(state);
	struct jrnl_config c = tj_cfg(b, JRNL_MODE_ASYNC);
	struct jrnl_job jobs[3];
	struct jrnl_stats st;
	char longkey[400];
	struct jrnl *j;
	size_t nbatch;

	memset(longkey, 'k', sizeof(longkey) - 1);
	longkey[sizeof(longkey) - 1] = '\0';
	jobs[0] = tj_job("r", "a", "R1", NULL, 1);
	jobs[1] = tj_job("r", "a", "R2", NULL, 2);
	jobs[1].bizkey = longkey;		/* VARBINARY(255) */
	jobs[2] = tj_job("r", "a", "R3", NULL, 3);

	j = tj_open(b, JRNL_MODE_SYNC);
	assert_int_equal(jrnl_put_jobs(j, &jobs[1], 1), JRNL_EINTERNAL);
	assert_int_equal(jrnl_put_jobs(j, &jobs[0], 1), JRNL_OK);
	tj_close(j);

	jrnl_test_set_unavailable(1);
	c.start_unavailable = 1;
	j = tj_open_cfg(&c);
	assert_int_equal(jrnl_ready(j, NULL, 0), 0);
	assert_int_equal(jrnl_put_jobs(j, &jobs[0], 1), JRNL_OK);
	assert_int_equal(jrnl_put_jobs(j, &jobs[1], 1), JRNL_OK);
	assert_int_equal(jrnl_put_jobs(j, &jobs[2], 1), JRNL_OK);
	jrnl_test_set_unavailable(0);
	assert_true(tj_wait_until(tj_is_ready, j, 20000));
	assert_int_equal(jrnl_flush(j), 0);
	jrnl_get_stats(j, &st);
	assert_int_equal(st.jobs_written, 2);
	assert_int_equal(st.jobs_dropped, 1);
	pthread_mutex_lock(&j->mu);
	nbatch = j->last_batch_reqs;
	pthread_mutex_unlock(&j->mu);
	assert_int_equal(nbatch, 3);		/* the three in one batch */
	tj_close(j);
	assert_int_equal(tj_int(b, "SELECT COUNT(*) FROM jobs"), 2);
}

/* ---- main ---------------------------------------------------------------- */
