/*
 * test_sched.c - unit tests of the Redis delay core against a real
 * redis-server (tests/unit/redisfix.c): the job operations, time on the fake
 * clock ("never early", order), dedup, cancel and reschedule, fenced acks,
 * expiry, dead letters, counts, retention, restore, schema refusal, NOSCRIPT,
 * a 100k burst promoted in bounded calls, and memory per job.  The
 * multi-instance and restart tests are in test_sched_multi.c and run first,
 * on real time, because the fake clock cannot be turned off once on; the
 * shared hooks and helpers are in test_sched_util.c.
 *
 * Key decision: every test starts from a flushed Redis and a new instance,
 * moves the fake clock, kicks the timer and waits for its pass counter, so
 * nothing depends on how long anything takes.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "scheduler/conn.h"
#include "scheduler/registry.h"
#include "scheduler/sched.h"
#include "scheduler/sched_batch.h"
#include "scheduler/sched_int.h"
#include "tests/unit/test_sched.h"
#include "util/clock.h"
#include "util/id.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define T0	INT64_C(1700000000000)

/* ---- the fake-clock group ----------------------------------------------- */

struct fx {
	struct trec	 rec;
	struct tinst	*ti;
};

struct redisfix test_redis;

static int
group_setup(void **state)
{
	(void)state;
	return redisfix_start(&test_redis);
}

static int
group_teardown(void **state)
{
	(void)state;
	redisfix_stop(&test_redis);
	return 0;
}

static int
setup(void **state)
{
	struct fx *f = xcalloc(1, sizeof(*f));

	/* From the first fake-clock test on, time is ours. */
	if (!clock_is_fake())
		clock_set_fake(T0);
	flush_redis(&test_redis);
	trec_init(&f->rec, &test_redis);
	f->ti = tinst_new(&f->rec, "fake", 1, 0, 0, 0);
	wait_owned(f->ti, 16);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;

	tinst_free(f->ti, 0);
	trec_free(&f->rec);
	free(f);
	return 0;
}

/* Pushes a job with id nid due at due with these fields; returns its id. */
static void
push_as(struct sched *s, const char *topic, const char *nid, int64_t due,
    int pri, const char *bizkey, char id[ID_LEN + 65])
{
	struct sched_push p;
	struct sched_push_result res;

	memset(&p, 0, sizeof(p));
	p.tenant = T_TENANT;
	p.topic = topic;
	p.id = nid;
	p.bizkey = bizkey;
	p.run_at_ms = due;
	p.priority = pri;
	p.body = "{\"n\":1}";
	p.body_len = 7;
	assert_int_equal(sched_push(s, &p, &res), SCHED_OK);
	snprintf(id, ID_LEN + 65, "%s", res.id);
}

/* The same with a new id. */
static void
push(struct sched *s, const char *topic, int64_t due, int pri,
    const char *bizkey, char id[ID_LEN + 65])
{
	char nid[ID_LEN + 1];

	sched_new_id(s, bizkey, nid);
	push_as(s, topic, nid, due, pri, bizkey, id);
}

static enum sched_state
state_of(struct sched *s, const char *id)
{
	struct sched_job *job;
	enum sched_state st;

	assert_int_equal(sched_get(s, T_TENANT, id, &job), SCHED_OK);
	st = job->state;
	sched_job_free(job);
	return st;
}

/*
 * A job pushed alone takes the shard of its 4 ms: two ids of one window
 * share it, the next window takes the next shard, and 16 windows cover
 * every shard; an id with a bizkey keeps its bizkey's; a batch's ids
 * (sched_new_id_run) go in runs of 64 per shard, the first run on the
 * shard of the batch's time, each next run on the next shard, so a batch
 * of 1024 puts 64 on every shard; other ids (sched_new_id) spread by hash.
 * The test clock stands still, so the ids move from ms to ms by using up
 * a ms's 4096 sequence numbers (the generator then borrows the next ms).
 */
static void
test_id_shards(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct id_parts pa, pb;
	char a[ID_LEN + 1], b[ID_LEN + 1];
	int seen[64] = { 0 }, nseen = 0, ns = s->cfg.shards, w, sh, prev = -1;
	int base = -1;
	int64_t win;

	assert_true(ns > 1 && ns <= 64);
	sched_new_id_alone(s, a);
	assert_int_equal(id_parse(a, &pa), 0);
	for (w = 0; w < ns; w++) {
		win = pa.ms / 4;
		while (pa.ms / 4 == win) {	/* the next window's first id */
			sched_new_id_alone(s, a);
			assert_int_equal(id_parse(a, &pa), 0);
		}
		sched_new_id_alone(s, b);
		assert_int_equal(id_parse(b, &pb), 0);
		assert_int_equal(pb.ms / 4, pa.ms / 4);
		sh = sched_shard_of(s, a);
		assert_int_equal(sh, (int)((pa.ms / 4 + pa.node) % ns));
		assert_int_equal(sched_shard_of(s, b), sh);
		if (prev >= 0)
			assert_int_equal(sh, (prev + 1) % ns);
		prev = sh;
		if (!seen[sh]++)
			nseen++;
		/* A bizkey picks its own shard, whatever the time. */
		sched_new_id(s, "patient-12", b);
		assert_int_equal(sched_shard_of(s, b),
		    sched_shard_for(s, "patient-12", NULL));
	}
	assert_int_equal(nseen, ns);
	/* A batch's ids: runs of 64 on consecutive shards, all covered. */
	memset(seen, 0, sizeof(seen));
	for (w = 0; w < SCHED_RUN_JOBS * ns; w++) {
		sched_new_id_run(s, (size_t)w, &base, a);
		assert_int_equal(id_parse(a, &pa), 0);
		sh = sched_shard_of(s, a);
		if (w == 0)
			assert_int_equal(sh, (int)((pa.ms / 4 + pa.node) % ns));
		assert_int_equal(sh, (base + w / SCHED_RUN_JOBS) % ns);
		seen[sh]++;
	}
	for (sh = 0; sh < ns; sh++)
		assert_int_equal(seen[sh], SCHED_RUN_JOBS);
	/* Ids made otherwise, all in one window, spread over the shards. */
	memset(seen, 0, sizeof(seen));
	nseen = 0;
	for (w = 0; w < 64; w++) {
		sched_new_id(s, NULL, a);
		assert_int_equal(id_parse(a, &pa), 0);
		if (!seen[sched_shard_of(s, a)]++)
			nseen++;
	}
	assert_true(nseen > ns / 2);
}

static void
test_push_get_roundtrip(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct sched_push p;
	struct sched_push_result res;
	struct sched_job *job;
	char id[ID_LEN + 1];
	static const char body[] = "bin\0ary\xff\x01 body";
	int64_t now = clock_wall_ms();

	sched_new_id(s, "order-42", id);
	memset(&p, 0, sizeof(p));
	p.tenant = T_TENANT;
	p.topic = "pull";
	p.id = id;
	p.bizkey = "order-42";
	p.run_at_ms = now + 5000;
	p.priority = -7;
	p.body = body;
	p.body_len = sizeof(body) - 1;
	p.headers_json = "{\"X-A\":\"b\"}";
	p.schedule = "<0,5s>";
	p.ttr_ms = 4321;
	assert_int_equal(sched_push(s, &p, &res), SCHED_OK);
	assert_string_equal(res.id, id);
	assert_int_equal(res.deduplicated, 0);
	assert_int_equal(res.run_at_ms, now + 5000);
	assert_int_equal(res.state, SCHED_SCHEDULED);

	assert_int_equal(sched_get(s, T_TENANT, id, &job), SCHED_OK);
	assert_string_equal(job->id, id);
	assert_string_equal(job->tenant, T_TENANT);
	assert_string_equal(job->topic, "pull");
	assert_string_equal(job->bizkey, "order-42");
	assert_int_equal(job->state, SCHED_SCHEDULED);
	assert_int_equal(job->due_ms, now + 5000);
	assert_int_equal(job->priority, -7);
	assert_int_equal(job->attempts, 0);
	assert_int_equal(job->body_len, sizeof(body) - 1);
	assert_memory_equal(job->body, body, sizeof(body) - 1);
	assert_string_equal(job->headers_json, "{\"X-A\":\"b\"}");
	assert_string_equal(job->schedule, "<0,5s>");
	assert_int_equal(job->ttr_ms, 4321);
	assert_int_equal(job->shard, sched_shard_of(s, id));
	assert_int_equal(job->shard, sched_shard_for(s, "order-42", NULL));
	assert_int_equal(job->nattempt_log, 0);
	sched_job_free(job);

	/* Another tenant does not see it. */
	assert_int_equal(sched_get(s, "other", id, &job), SCHED_ENOTFOUND);
	/* A client-given id, with a bizkey in another shard: found. */
	p.id = "client:id-1";
	p.bizkey = "zz-bizkey";
	p.body = "";
	p.body_len = 0;
	p.headers_json = NULL;
	p.schedule = NULL;
	p.priority = 1000;
	assert_int_equal(sched_push(s, &p, &res), SCHED_OK);
	assert_string_equal(res.id, "client:id-1");
	assert_int_equal(sched_get(s, T_TENANT, "client:id-1", &job),
	    SCHED_OK);
	assert_int_equal(job->body_len, 0);
	assert_int_equal(job->priority, 1000);
	assert_int_equal(job->created_ms, now);
	assert_null(job->headers_json);
	sched_job_free(job);
	/* The longest client id (64 characters). */
	{
		char longid[65];

		memset(longid, 'L', 64);
		longid[64] = '\0';
		p.id = longid;
		p.bizkey = NULL;
		assert_int_equal(sched_push(s, &p, &res), SCHED_OK);
		assert_string_equal(res.id, longid);
		assert_int_equal(sched_get(s, T_TENANT, longid, &job),
		    SCHED_OK);
		assert_string_equal(job->id, longid);
		sched_job_free(job);
		p.id = "client:id-1";
		p.bizkey = "zz-bizkey";
	}
	/* The same client id again: the existing job, not a second. */
	p.bizkey = NULL;
	assert_int_equal(sched_push(s, &p, &res), SCHED_OK);
	assert_int_equal(res.deduplicated, 1);
	/* Bad input. */
	p.id = "bad id";
	assert_int_equal(sched_push(s, &p, &res), SCHED_EINVAL);
	p.id = "ok";
	p.priority = 1001;
	assert_int_equal(sched_push(s, &p, &res), SCHED_EINVAL);
	p.priority = 0;
	p.topic = "bad topic";
	assert_int_equal(sched_push(s, &p, &res), SCHED_EINVAL);
	assert_int_equal(sched_get(s, T_TENANT, "NOPE", &job),
	    SCHED_ENOTFOUND);
}

/* Pushes a job of T_TENANT or tenant with a client-given id and bizkey. */
static void
push_client(struct sched *s, const char *tenant, const char *id,
    const char *bizkey)
{
	struct sched_push p;
	struct sched_push_result res;

	memset(&p, 0, sizeof(p));
	p.tenant = tenant;
	p.topic = "pull";
	p.id = id;
	p.bizkey = bizkey;
	p.run_at_ms = clock_wall_ms() + 60000;
	p.body = "{}";
	p.body_len = 2;
	assert_int_equal(sched_push(s, &p, &res), SCHED_OK);
	assert_string_equal(res.id, id);
	assert_int_equal(res.deduplicated, 0);
}

/*
 * sched_get_many() finds what sched_get() finds, each id where it lives:
 * client ids with bizkeys in other shards than their hash's, generated
 * ids, another tenant's, absent and invalid ids, in one call.
 */
static void
test_get_many(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	char gen[ID_LEN + 65], bk[8][16], id[8][16];
	const char *tv[20], *iv[20];
	struct sched_job *out[20], *one;
	size_t n = 0, i;
	int moved = 0;

	push(s, "pull", clock_wall_ms() + 60000, 0, NULL, gen);
	for (i = 0; i < 8; i++) {
		snprintf(id[i], sizeof(id[i]), "c-%zu", i);
		snprintf(bk[i], sizeof(bk[i]), "bk-%zu", i);
		push_client(s, T_TENANT, id[i], bk[i]);
		if (sched_shard_for(s, bk[i], NULL) !=
		    sched_shard_of(s, id[i]))
			moved++;
	}
	assert_true(moved > 0);		/* some live away from their hash */
	push_client(s, "other", "c-0", NULL);	/* another tenant's c-0 */
	push_client(s, "other", "o-1", "bk-x");
	for (i = 0; i < 8; i++) {
		tv[n] = T_TENANT;
		iv[n++] = id[i];
	}
	tv[n] = T_TENANT;
	iv[n++] = gen;
	tv[n] = T_TENANT;
	iv[n++] = "o-1";		/* other's only */
	tv[n] = "other";
	iv[n++] = "o-1";
	tv[n] = "other";
	iv[n++] = "c-0";
	tv[n] = "other";
	iv[n++] = "c-1";		/* T_TENANT's only */
	tv[n] = T_TENANT;
	iv[n++] = "nosuch";
	tv[n] = T_TENANT;
	iv[n++] = "bad id";
	tv[n] = "bad tenant!";
	iv[n++] = "c-0";
	tv[n] = T_TENANT;
	iv[n++] = id[3];		/* twice in one call */
	assert_int_equal(sched_get_many(s, tv, iv, n, out), SCHED_OK);
	for (i = 0; i < n; i++) {
		enum sched_err e = sched_get(s, tv[i], iv[i], &one);

		if (e == SCHED_ENOTFOUND) {
			assert_null(out[i]);
			continue;
		}
		assert_int_equal(e, SCHED_OK);
		assert_non_null(out[i]);
		assert_string_equal(out[i]->id, one->id);
		assert_string_equal(out[i]->tenant, one->tenant);
		assert_string_equal(out[i]->topic, one->topic);
		assert_int_equal(out[i]->shard, one->shard);
		assert_int_equal(out[i]->state, one->state);
		assert_int_equal(out[i]->due_ms, one->due_ms);
		if (one->bizkey != NULL)
			assert_string_equal(out[i]->bizkey, one->bizkey);
		sched_job_free(one);
		sched_job_free(out[i]);
	}
	/* What must and must not have been found. */
	assert_int_equal(sched_get_many(s, tv, iv, n, out), SCHED_OK);
	for (i = 0; i < 8; i++)
		assert_non_null(out[i]);
	assert_non_null(out[8]);
	assert_null(out[9]);
	assert_non_null(out[10]);
	assert_non_null(out[11]);
	assert_string_equal(out[11]->tenant, "other");
	assert_null(out[12]);
	assert_null(out[13]);
	assert_null(out[14]);
	assert_null(out[15]);
	assert_non_null(out[16]);
	assert_int_equal(out[16]->shard, sched_shard_for(s, bk[3], NULL));
	for (i = 0; i < n; i++)
		sched_job_free(out[i]);
	assert_int_equal(sched_get_many(s, tv, iv, 0, out), SCHED_OK);

	/*
	 * A shard's pool of the wrong type: the call fails whole, and the
	 * connection it came back on answers right afterwards (no reply of
	 * the pipeline left unread on it).
	 */
	{
		char k[SCHED_KEY_MAX];
		const char *t2[2] = { "other", T_TENANT };
		const char *i2[2] = { "o-1", id[2] };

		sched_key(k, "other", 5, "j", NULL);
		freeReplyObject(redisfix_cmd(&test_redis, "SET %s x", k));
		assert_int_not_equal(sched_get_many(s, t2, i2, 2, out),
		    SCHED_OK);
		assert_null(out[0]);
		assert_null(out[1]);
		for (i = 0; i < 4; i++) {
			assert_int_equal(sched_get(s, T_TENANT, id[2], &one),
			    SCHED_OK);
			assert_string_equal(one->id, id[2]);
			sched_job_free(one);
			assert_int_equal(sched_get_many(s, t2 + 1, i2 + 1, 1,
			    out), SCHED_OK);
			assert_non_null(out[0]);
			assert_string_equal(out[0]->id, id[2]);
			sched_job_free(out[0]);
		}
		freeReplyObject(redisfix_cmd(&test_redis, "DEL %s", k));
	}
}

/*
 * sched_push_many with client-given ids, looked up together: an id living
 * in another shard (pushed with a bizkey) is that job, or a conflict for
 * another topic; a new id twice in one call is made once; new ids and
 * generated ids beside them are made; each answered as sched_push would.
 */
static void
test_push_many_client_ids(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct sched_push p[7];
	struct sched_push_result res[7];
	enum sched_err err[7];
	struct sched_job *job;
	char gen[ID_LEN + 1], bk[16];
	int64_t now = clock_wall_ms(), counts[SCHED_NSTATES];
	size_t i;

	/* cid-away lives in its bizkey's shard, not its hash's. */
	for (i = 0; i < 64; i++) {
		snprintf(bk, sizeof(bk), "far-%zu", i);
		if (sched_shard_for(s, bk, NULL) !=
		    sched_shard_of(s, "cid-away"))
			break;
	}
	assert_true(i < 64);
	memset(p, 0, sizeof(p));
	p[0].tenant = T_TENANT;
	p[0].topic = "pull";
	p[0].id = "cid-away";
	p[0].bizkey = bk;
	p[0].run_at_ms = now + 1000;
	p[0].body = "{}";
	p[0].body_len = 2;
	assert_int_equal(sched_push(s, &p[0], &res[0]), SCHED_OK);
	p[0].id = "cid-push";
	p[0].topic = "push";
	p[0].bizkey = "far-push";
	assert_int_equal(sched_push(s, &p[0], &res[0]), SCHED_OK);
	assert_int_equal(sched_counts(s, T_TENANT, "pull", counts), SCHED_OK);
	assert_int_equal(counts[SCHED_SCHEDULED], 1);

	sched_new_id(s, NULL, gen);
	for (i = 0; i < 7; i++) {
		p[i].tenant = T_TENANT;
		p[i].topic = "pull";
		p[i].bizkey = NULL;
		p[i].run_at_ms = now + 2000 + (int64_t)i;
		p[i].body = "{}";
		p[i].body_len = 2;
	}
	p[0].id = "cid-away";	/* found in another shard */
	p[1].id = "cid-new";	/* made */
	p[2].id = "cid-push";	/* another topic's: refused */
	p[3].id = "cid-new";	/* the same call's: found */
	p[4].id = gen;		/* generated, made */
	p[5].id = "cid-other";	/* made */
	p[6].id = "bad id";	/* invalid */
	sched_push_many(s, p, 7, res, err);
	assert_int_equal(err[0], SCHED_OK);
	assert_int_equal(res[0].deduplicated, 1);
	assert_string_equal(res[0].id, "cid-away");
	assert_int_equal(res[0].run_at_ms, now + 1000);
	assert_int_equal(err[1], SCHED_OK);
	assert_int_equal(res[1].deduplicated, 0);
	assert_int_equal(err[2], SCHED_ECONFLICT);
	assert_int_equal(err[3], SCHED_OK);
	assert_int_equal(res[3].deduplicated, 1);
	assert_int_equal(res[3].run_at_ms, now + 2001);
	assert_int_equal(err[4], SCHED_OK);
	assert_int_equal(res[4].deduplicated, 0);
	assert_int_equal(err[5], SCHED_OK);
	assert_int_equal(res[5].deduplicated, 0);
	assert_int_equal(err[6], SCHED_EINVAL);
	/* One cid-away, in its bizkey's shard; three made; no second. */
	assert_int_equal(sched_counts(s, T_TENANT, "pull", counts), SCHED_OK);
	assert_int_equal(counts[SCHED_SCHEDULED], 4);
	assert_int_equal(sched_get(s, T_TENANT, "cid-away", &job), SCHED_OK);
	assert_int_equal(job->shard, sched_shard_for(s, bk, NULL));
	assert_int_equal(job->due_ms, now + 1000);
	sched_job_free(job);
	assert_int_equal(sched_get(s, T_TENANT, "cid-new", &job), SCHED_OK);
	assert_int_equal(job->due_ms, now + 2001);
	sched_job_free(job);
	/* Made jobs report their transition, found ones do not. */
	assert_int_equal(f->rec.ntrans[SCHED_NSTATES][SCHED_SCHEDULED], 5);
}

static int
ready_seen(void *arg)
{
	struct trec *rec = arg;
	int seen;

	pthread_mutex_lock(&rec->lock);
	seen = rec->nready > 0;
	pthread_mutex_unlock(&rec->lock);
	return seen;
}

static void
test_never_early_and_order(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct sched_job *job;
	char a[ID_LEN + 65], b[ID_LEN + 65], c[ID_LEN + 65], d[ID_LEN + 65];
	char e[ID_LEN + 65];
	int64_t now = clock_wall_ms();
	int64_t want[SCHED_NSTATES] = { 0 };

	push(s, "pull", now + 100, 0, NULL, a);
	push(s, "pull", now + 50, 0, NULL, b);
	push(s, "pull", now + 50, 5, NULL, c);	/* same due, higher pri */
	push(s, "pull", now + 60, 9, NULL, d);	/* later, highest pri */
	push(s, "pull", now + 40, -3, NULL, e);	/* earliest, lowest pri */

	clock_advance_ms(39);
	kick_wait(s);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_ENOTFOUND);
	want[SCHED_SCHEDULED] = 5;
	expect_counts(s, "pull", want);

	clock_advance_ms(1);			/* now + 40: e only */
	kick_wait(s);
	want[SCHED_SCHEDULED] = 4;
	want[SCHED_READY] = 1;
	expect_counts(s, "pull", want);

	clock_advance_ms(9);			/* now + 49: still e only */
	kick_wait(s);
	expect_counts(s, "pull", want);

	clock_advance_ms(60);			/* now + 109: all due */
	kick_wait(s);
	want[SCHED_SCHEDULED] = 0;
	want[SCHED_READY] = 5;
	expect_counts(s, "pull", want);

	/* Priority first, then due time. */
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_OK);
	assert_string_equal(job->id, d);
	assert_int_equal(strlen(job->token), SCHED_TOKEN_LEN);
	assert_int_equal(job->deadline_ms, clock_wall_ms() + 1000);
	sched_job_free(job);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_OK);
	assert_string_equal(job->id, c);
	sched_job_free(job);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_OK);
	assert_string_equal(job->id, b);
	sched_job_free(job);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_OK);
	assert_string_equal(job->id, a);
	sched_job_free(job);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_OK);
	assert_string_equal(job->id, e);
	sched_job_free(job);
	want[SCHED_READY] = 0;
	want[SCHED_IN_FLIGHT] = 5;
	expect_counts(s, "pull", want);
	expect_counts(s, NULL, want);
	/* The ready hook runs on the subscriber's thread: wait for it. */
	assert_true(wait_for(ready_seen, &f->rec, T_DEADLINE_MS));
}

/*
 * A batched reserve for 6 consumers: the 6 best jobs of 9 spread over the
 * shards, distinct, best first (priority, then due), then the 3 left, then
 * none.
 */
static void
test_reserve_many(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	static const struct { int64_t due; int pri; } spec[9] = {
		{ 30, 0 }, { 10, 0 }, { 20, 7 }, { 50, 7 }, { 40, -2 },
		{ 15, 3 }, { 60, 0 }, { 25, 3 }, { 5, -2 },
	};
	/* The order reserve must keep: indices into spec. */
	static const int best[9] = { 2, 3, 5, 7, 1, 0, 6, 8, 4 };
	char ids[9][ID_LEN + 65];
	struct sched_job *out[10];
	int64_t now = clock_wall_ms();
	int64_t want[SCHED_NSTATES] = { 0 };
	size_t n, i, j;

	for (i = 0; i < 9; i++)
		push(s, "pull", now + spec[i].due, spec[i].pri, NULL, ids[i]);
	clock_advance_ms(100);
	kick_wait(s);
	want[SCHED_READY] = 9;
	expect_counts(s, "pull", want);

	assert_int_equal(sched_reserve_many(s, T_TENANT, "pull", 0, 6, out,
	    &n), SCHED_OK);
	assert_int_equal(n, 6);
	for (i = 0; i < n; i++) {
		assert_string_equal(out[i]->id, ids[best[i]]);
		assert_int_equal(out[i]->state, SCHED_IN_FLIGHT);
		assert_int_equal(strlen(out[i]->token), SCHED_TOKEN_LEN);
		for (j = 0; j < i; j++)
			assert_string_not_equal(out[i]->token,
			    out[j]->token);
	}
	for (i = 0; i < n; i++)
		sched_job_free(out[i]);
	want[SCHED_READY] = 3;
	want[SCHED_IN_FLIGHT] = 6;
	expect_counts(s, "pull", want);

	assert_int_equal(sched_reserve_many(s, T_TENANT, "pull", 0, 10, out,
	    &n), SCHED_OK);
	assert_int_equal(n, 3);
	for (i = 0; i < n; i++) {
		assert_string_equal(out[i]->id, ids[best[6 + i]]);
		sched_job_free(out[i]);
	}
	assert_int_equal(sched_reserve_many(s, T_TENANT, "pull", 0, 4, out,
	    &n), SCHED_ENOTFOUND);
	assert_int_equal(n, 0);
	want[SCHED_READY] = 0;
	want[SCHED_IN_FLIGHT] = 9;
	expect_counts(s, "pull", want);
}

/*
 * Ten of the best jobs in one shard, more than the reserve reads of a shard
 * at first (it reads a few of each and reads again): a reserve for 8 still
 * gives the 8 best, in order, before the other shards' lesser jobs.
 */
static void
test_reserve_many_one_shard(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	char ids[14][ID_LEN + 65], biz[32];
	struct sched_job *out[8];
	int64_t now = clock_wall_ms();
	int target = -1, sh, k = 0, other = 0, i;
	size_t n;

	for (i = 0; k < 10 || other < 4; i++) {
		snprintf(biz, sizeof(biz), "b%d", i);
		sh = sched_shard_for(s, biz, NULL);
		if (target == -1)
			target = sh;
		if (sh == target && k < 10) {
			/* The best: priority 9, due in push order. */
			push(s, "pull", now + 10 + k, 9, biz, ids[k]);
			k++;
		} else if (sh != target && other < 4) {
			push(s, "pull", now + 1 + other, 0, biz,
			    ids[10 + other]);
			other++;
		}
	}
	clock_advance_ms(100);
	kick_wait(s);
	assert_int_equal(sched_reserve_many(s, T_TENANT, "pull", 0, 8, out,
	    &n), SCHED_OK);
	assert_int_equal(n, 8);
	for (i = 0; i < 8; i++) {
		assert_string_equal(out[i]->id, ids[i]);
		sched_job_free(out[i]);
	}
}

/* The nth bizkey (0, 1, ...) whose job goes to shard sh; into biz[32]. */
static void
biz_for_shard(struct sched *s, int sh, int nth, char biz[32])
{
	int i;

	for (i = 0;; i++) {
		snprintf(biz, 32, "s%d-%d", sh, i);
		if (sched_shard_for(s, biz, NULL) == sh && nth-- == 0)
			return;
	}
}

/*
 * Jobs pushed together tie (same priority, same due): 10 in each of six
 * shards, more than the reserve knows of a shard at first.  A reserve for
 * 40 gets 40 in its passes, taking the tied jobs of the next shards when
 * it has taken all it knows of one; it stopped at each shard's last known
 * job, one shard a pass, and four passes gave 38.  The 20 left come next.
 */
#define TIE_SHARDS	6
#define TIE_PER		10

static void
test_reserve_many_ties(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	char id[ID_LEN + 65], biz[32];
	struct sched_job *out[TIE_SHARDS * TIE_PER];
	int64_t due = clock_wall_ms() + 10;
	int64_t want[SCHED_NSTATES] = { 0 };
	int sh, k;
	size_t n, i, j;

	for (sh = 0; sh < TIE_SHARDS; sh++)
		for (k = 0; k < TIE_PER; k++) {
			biz_for_shard(s, sh, k, biz);
			push(s, "pull", due, 0, biz, id);
		}
	clock_advance_ms(100);
	kick_wait(s);
	want[SCHED_READY] = TIE_SHARDS * TIE_PER;
	expect_counts(s, "pull", want);
	assert_int_equal(sched_reserve_many(s, T_TENANT, "pull", 0, 40, out,
	    &n), SCHED_OK);
	assert_int_equal(n, 40);
	for (i = 0; i < n; i++)
		for (j = 0; j < i; j++)
			assert_string_not_equal(out[i]->id, out[j]->id);
	for (i = 0; i < n; i++)
		sched_job_free(out[i]);
	assert_int_equal(sched_reserve_many(s, T_TENANT, "pull", 0, 40, out,
	    &n), SCHED_OK);
	assert_int_equal(n, TIE_SHARDS * TIE_PER - 40);
	for (i = 0; i < n; i++)
		sched_job_free(out[i]);
	want[SCHED_READY] = 0;
	want[SCHED_IN_FLIGHT] = TIE_SHARDS * TIE_PER;
	expect_counts(s, "pull", want);
}

static void
reserve_expect(struct sched *s, const char *id, struct sched_job **keep)
{
	struct sched_job *job = NULL;

	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_OK);
	if (strcmp(job->id, id) != 0)
		print_error("reserved %s (shard %d, priority %d, due %lld), "
		    "want %s\n", job->id, job->shard, job->priority,
		    (long long)job->due_ms, id);
	assert_string_equal(job->id, id);
	if (keep != NULL)
		*keep = job;
	else
		sched_job_free(job);
}

/*
 * A reserve keeps what it learnt of each shard's ready set (heads.c); kept
 * here for an hour, so only forgetting can make these right: a better job
 * promoted into a shard known to hold worse ones than another (no
 * rd:ready), one released back, and one promoted into a shard known empty,
 * each comes next, before the job the other shard was known to hold.
 */
static void
test_reserve_heads_forgotten(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct sched_job *job = NULL, *zj = NULL;
	char x1[ID_LEN + 65], x2[ID_LEN + 65], y[ID_LEN + 65];
	char z[ID_LEN + 65], v[ID_LEN + 65], biz[32];
	int64_t now = clock_wall_ms();

	s->heads_ttl_us = 3600LL * 1000000;
	biz_for_shard(s, 1, 0, biz);
	push(s, "pull", now + 10, 0, biz, x1);
	biz_for_shard(s, 1, 1, biz);
	push(s, "pull", now + 15, 0, biz, x2);
	biz_for_shard(s, 2, 0, biz);
	push(s, "pull", now + 20, 0, biz, y);
	clock_advance_ms(100);
	kick_wait(s);
	reserve_expect(s, x1, NULL);	/* known: x2 in 1, y in 2, no more */

	/* Into shard 2, known to hold y, worse than x2: z goes first. */
	biz_for_shard(s, 2, 1, biz);
	push(s, "pull", now + 110, 5, biz, z);
	clock_advance_ms(20);
	kick_wait(s);
	reserve_expect(s, z, &zj);

	/* Released: back to ready, and first again. */
	assert_int_equal(sched_release(s, T_TENANT, zj->id, zj->token),
	    SCHED_OK);
	sched_job_free(zj);
	reserve_expect(s, z, NULL);

	/* Into shard 3, known empty: v comes next. */
	biz_for_shard(s, 3, 0, biz);
	push(s, "pull", now + 125, 9, biz, v);
	clock_advance_ms(10);
	kick_wait(s);
	reserve_expect(s, v, NULL);
	reserve_expect(s, x2, NULL);
	reserve_expect(s, y, NULL);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_ENOTFOUND);
}

/*
 * One job in every shard, due in an order unrelated to the shards'; the
 * heads kept for an hour: reserves one at a time find every job, in due
 * order, each shard's heads learnt from the reserve that emptied it; then
 * a job made ready in a shard known empty is found.
 */
static void
test_reserve_heads_every_shard(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	int ns = s->cfg.shards, sh, i;
	char (*ids)[ID_LEN + 65] = xcalloc((size_t)ns + 1, sizeof(*ids));
	int *order = xcalloc((size_t)ns, sizeof(*order));
	struct sched_job *job = NULL;
	int64_t now = clock_wall_ms();
	char biz[32];

	s->heads_ttl_us = 3600LL * 1000000;
	for (sh = 0; sh < ns; sh++) {
		/* Shard sh's job is due (sh * 7) % ns ms after the first. */
		biz_for_shard(s, sh, 0, biz);
		push(s, "pull", now + 1 + (sh * 7) % ns, 0, biz, ids[sh]);
		order[(sh * 7) % ns] = sh;
	}
	clock_advance_ms(100);
	kick_wait(s);
	for (i = 0; i < ns; i++)
		reserve_expect(s, ids[order[i]], NULL);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_ENOTFOUND);
	biz_for_shard(s, ns - 1, 1, biz);
	push(s, "pull", now + 105, 0, biz, ids[ns]);
	clock_advance_ms(10);
	kick_wait(s);
	reserve_expect(s, ids[ns], NULL);
	free(order);
	free(ids);
}

static void
test_push_never_early(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct schedule_outcome ok = { SCHEDULE_OK, 200, -1 };
	struct sched_job *job;
	char id[ID_LEN + 65];
	int64_t now = clock_wall_ms();
	int i;

	for (i = 0; i < 20; i++)
		push(s, "push", now + 10 * (i % 7) + 1, 0, NULL, id);
	for (i = 0; i < 80; i++) {
		clock_advance_ms(1);
		kick_wait(s);
	}
	for (i = 0; i < 20; i++) {
		job = take_delivery(&f->rec);
		assert_non_null(job);
		assert_true(job->due_ms <= clock_wall_ms());
		assert_int_equal(sched_report(s, T_TENANT, job->id, job->token,
		    &ok, NULL, NULL), SCHED_OK);
		sched_job_free(job);
	}
	assert_int_equal(f->rec.early, 0);
	assert_int_equal(f->rec.ntrans[SCHED_IN_FLIGHT][SCHED_DELIVERED], 20);
}

static void
test_bizkey_dedup(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct sched_push p;
	struct sched_push_result res;
	struct sched_job *job;
	struct schedule_outcome ok = { SCHEDULE_OK, 0, -1 };
	char a[ID_LEN + 65], b[ID_LEN + 65], cid[ID_LEN + 65];
	char id2[ID_LEN + 1];
	const char *biz[4] = { "patient-7", "nobody", NULL, "patient-7" };
	struct sched_push_result fres[4];
	int found[4];
	int64_t now = clock_wall_ms();

	push(s, "pull", now + 10, 0, "patient-7", a);
	/* Same bizkey, same topic: the first job, not a new one. */
	sched_new_id(s, "patient-7", id2);
	memset(&p, 0, sizeof(p));
	p.tenant = T_TENANT;
	p.topic = "pull";
	p.id = id2;
	p.bizkey = "patient-7";
	p.run_at_ms = now + 999;
	assert_int_equal(sched_push(s, &p, &res), SCHED_OK);
	assert_int_equal(res.deduplicated, 1);
	assert_string_equal(res.id, a);
	assert_int_equal(res.run_at_ms, now + 10);
	assert_int_equal(sched_get(s, T_TENANT, id2, &job), SCHED_ENOTFOUND);
	/* Another topic: its own job. */
	push(s, "other", now + 10, 0, "patient-7", b);
	assert_string_not_equal(a, b);
	/* Found without a push: the job a push would be answered with. */
	assert_int_equal(sched_find_bizkeys(s, T_TENANT, "pull", biz, 4, fres,
	    found), SCHED_OK);
	assert_int_equal(found[0], 1);
	assert_string_equal(fres[0].id, a);
	assert_int_equal(fres[0].deduplicated, 1);
	assert_int_equal(fres[0].run_at_ms, now + 10);
	assert_int_equal(fres[0].state, SCHED_SCHEDULED);
	assert_int_equal(found[1], 0);
	assert_int_equal(found[2], 0);
	assert_int_equal(found[3], 1);
	assert_string_equal(fres[3].id, a);
	assert_int_equal(sched_find_bizkeys(s, T_TENANT, "other", biz, 4,
	    fres, found), SCHED_OK);
	assert_int_equal(found[0], 1);
	assert_string_equal(fres[0].id, b);

	/* Finished jobs free the bizkey. */
	clock_advance_ms(10);
	kick_wait(s);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_OK);
	assert_string_equal(job->id, a);
	assert_int_equal(sched_report(s, T_TENANT, job->id, job->token, &ok,
	    NULL, NULL), SCHED_OK);
	sched_job_free(job);
	assert_int_equal(sched_find_bizkeys(s, T_TENANT, "pull", biz, 4, fres,
	    found), SCHED_OK);
	assert_int_equal(found[0] + found[1] + found[2] + found[3], 0);
	assert_int_equal(sched_push(s, &p, &res), SCHED_OK);
	assert_int_equal(res.deduplicated, 0);
	assert_string_equal(res.id, id2);

	/* Cancel by bizkey. */
	assert_int_equal(sched_cancel_bizkey(s, T_TENANT, "pull", "patient-7",
	    cid), SCHED_OK);
	assert_string_equal(cid, id2);
	assert_int_equal(state_of(s, id2), SCHED_CANCELLED);
	assert_int_equal(sched_cancel_bizkey(s, T_TENANT, "pull", "patient-7",
	    cid), SCHED_ENOTFOUND);
	assert_int_equal(sched_cancel_bizkey(s, T_TENANT, "pull", "nobody",
	    cid), SCHED_ENOTFOUND);
}

/*
 * sched_push_many: jobs of many shards in one call; a job with the bizkey of
 * an earlier one of the same call gets that one's id (as a second push
 * would); a bad job fails alone; a client-given id goes its own way; the
 * counts and the topic's head are right afterwards (the earliest is due
 * first).
 */
static void
test_push_many(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct sched_push p[44];
	struct sched_push_result res[44], first[44];
	enum sched_err err[44];
	struct sched_job *job;
	char ids[44][ID_LEN + 1], biz[44][16];
	int64_t now = clock_wall_ms(), counts[SCHED_NSTATES];
	int shard_seen[64] = { 0 }, nshards = 0, sh;
	size_t i;

	memset(p, 0, sizeof(p));
	for (i = 0; i < 44; i++) {
		snprintf(biz[i], sizeof(biz[i]), "k%zu", i == 40 ? 3 : i);
		sched_new_id(s, i == 43 ? NULL : biz[i], ids[i]);
		p[i].tenant = T_TENANT;
		p[i].topic = "pull";
		p[i].id = ids[i];
		p[i].bizkey = i == 43 ? NULL : biz[i];
		/* Job 7 is the earliest. */
		p[i].run_at_ms = now + (i == 7 ? 5 : 50 + (int64_t)i);
		p[i].body = "{}";
		p[i].body_len = 2;
	}
	p[41].topic = "bad topic";		/* invalid */
	p[42].id = "client-given-1";		/* not generated */
	p[42].bizkey = NULL;
	sched_push_many(s, p, 44, res, err);

	for (i = 0; i < 44; i++) {
		if (i == 41) {
			assert_int_equal(err[i], SCHED_EINVAL);
			continue;
		}
		assert_int_equal(err[i], SCHED_OK);
		assert_int_equal(res[i].deduplicated, i == 40);
		assert_int_equal(res[i].state, SCHED_SCHEDULED);
		sh = sched_shard_of(s, res[i].id);
		if (!shard_seen[sh]++)
			nshards++;
	}
	assert_true(nshards > 4);
	/* The second job with bizkey k3 is the first one. */
	assert_string_equal(res[40].id, res[3].id);
	assert_int_equal(res[40].run_at_ms, now + 53);
	assert_int_equal(sched_get(s, T_TENANT, ids[40], &job),
	    SCHED_ENOTFOUND);
	assert_int_equal(sched_get(s, T_TENANT, "client-given-1", &job),
	    SCHED_OK);
	assert_int_equal(job->due_ms, now + 92);
	sched_job_free(job);
	assert_int_equal(f->rec.ntrans[SCHED_NSTATES][SCHED_SCHEDULED], 42);
	assert_int_equal(sched_counts(s, T_TENANT, "pull", counts), SCHED_OK);
	assert_int_equal(counts[SCHED_SCHEDULED], 42);

	/* Pushed again: all found, none made, each the job it was. */
	memcpy(first, res, sizeof(first));
	sched_push_many(s, p, 44, res, err);
	for (i = 0; i < 44; i++)
		if (i != 41) {
			assert_int_equal(err[i], SCHED_OK);
			assert_int_equal(res[i].deduplicated, 1);
			assert_string_equal(res[i].id, first[i].id);
			assert_int_equal(res[i].run_at_ms, first[i].run_at_ms);
		}
	assert_int_equal(sched_counts(s, T_TENANT, "pull", counts), SCHED_OK);
	assert_int_equal(counts[SCHED_SCHEDULED], 42);

	/* New and found jobs alternating in one call: each answered as its. */
	for (i = 0; i < 40; i += 2) {
		snprintf(biz[i], sizeof(biz[i]), "m%zu", i);
		sched_new_id(s, biz[i], ids[i]);
	}
	sched_push_many(s, p, 40, res, err);
	for (i = 0; i < 40; i++) {
		assert_int_equal(err[i], SCHED_OK);
		assert_int_equal(res[i].deduplicated, i % 2);
		assert_string_equal(res[i].id, i % 2 ? first[i].id : ids[i]);
		assert_int_equal(res[i].run_at_ms, p[i].run_at_ms);
	}
	assert_int_equal(sched_counts(s, T_TENANT, "pull", counts), SCHED_OK);
	assert_int_equal(counts[SCHED_SCHEDULED], 62);

	/*
	 * Without bizkeys (the script writes these together at its end): an
	 * id twice in one call is made once, the second answered as the
	 * first; an id of another topic's job is refused, and the new job
	 * beside it is still made.
	 */
	memset(p, 0, 3 * sizeof(p[0]));
	sched_new_id(s, NULL, ids[0]);
	for (i = 0; i < 3; i++) {
		p[i].tenant = T_TENANT;
		p[i].topic = "pull";
		p[i].id = i == 2 ? first[43].id : ids[0];
		p[i].run_at_ms = now + 60 + (int64_t)i;
		p[i].body = "{}";
		p[i].body_len = 2;
	}
	p[2].topic = "push";
	sched_push_many(s, p, 3, res, err);
	assert_int_equal(err[0], SCHED_OK);
	assert_int_equal(res[0].deduplicated, 0);
	assert_int_equal(err[1], SCHED_OK);
	assert_int_equal(res[1].deduplicated, 1);
	assert_string_equal(res[1].id, ids[0]);
	assert_int_equal(res[1].run_at_ms, now + 60);
	assert_int_equal(err[2], SCHED_ECONFLICT);
	assert_int_equal(sched_get(s, T_TENANT, ids[0], &job), SCHED_OK);
	assert_string_equal(job->topic, "pull");
	assert_int_equal(job->due_ms, now + 60);
	sched_job_free(job);
	assert_int_equal(sched_counts(s, T_TENANT, "pull", counts), SCHED_OK);
	assert_int_equal(counts[SCHED_SCHEDULED], 63);
	assert_int_equal(sched_counts(s, T_TENANT, "push", counts), SCHED_OK);
	assert_int_equal(counts[SCHED_SCHEDULED], 0);

	/* The heads: job 7 alone is due at now + 5. */
	clock_advance_ms(5);
	kick_wait(s);
	assert_int_equal(state_of(s, ids[7]), SCHED_READY);
	assert_int_equal(state_of(s, ids[8]), SCHED_SCHEDULED);
	assert_int_equal(sched_counts(s, T_TENANT, "pull", counts), SCHED_OK);
	assert_int_equal(counts[SCHED_READY], 1);
}

/* New jobs of topic "pull" all in one shard (their ids made here), due. */
static void
one_shard(struct sched *s, struct sched_push *p, char (*ids)[ID_LEN + 1],
    size_t n, int64_t due, const char *body)
{
	size_t i;

	for (i = 0; i < n; i++) {
		sched_new_id(s, "same-shard", ids[i]);
		p[i].tenant = T_TENANT;
		p[i].topic = "pull";
		p[i].id = ids[i];
		p[i].run_at_ms = due;
		p[i].body = body;
		p[i].body_len = strlen(body);
	}
}

/*
 * scheduler.batch at its most (SCHED_BATCH_MAX): 2000 jobs of one shard and
 * topic pushed in one push_many call and promoted in one promote call, each
 * handing all of them to one HSET and one ZADD (Lua's unpack() takes about
 * 8000 values, so a larger batch failed every call).  A value out of range
 * leaves the batch as it was.
 */
static void
test_batch_max(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	size_t n = SCHED_BATCH_MAX, i;
	struct sched_push *p = xcalloc(n, sizeof(*p));
	struct sched_push_result *res = xcalloc(n, sizeof(*res));
	enum sched_err *err = xcalloc(n, sizeof(*err));
	char (*ids)[ID_LEN + 1] = xcalloc(n, sizeof(*ids));
	int64_t now = clock_wall_ms(), counts[SCHED_NSTATES];

	sched_set_batch(s, SCHED_BATCH_MAX);
	sched_set_batch(s, SCHED_BATCH_MAX + 1);	/* ignored */
	sched_set_batch(s, 0);				/* ignored */
	one_shard(s, p, ids, n, now + 10,
	    "0123456789012345678901234567890123456789");
	sched_push_many(s, p, n, res, err);
	for (i = 0; i < n; i++) {
		assert_int_equal(err[i], SCHED_OK);
		assert_int_equal(res[i].deduplicated, 0);
	}
	assert_int_equal(sched_counts(s, T_TENANT, "pull", counts), SCHED_OK);
	assert_int_equal(counts[SCHED_SCHEDULED], (int64_t)n);
	clock_advance_ms(10);
	kick_wait(s);
	assert_int_equal(sched_counts(s, T_TENANT, "pull", counts), SCHED_OK);
	assert_int_equal(counts[SCHED_READY], (int64_t)n);
	assert_int_equal(counts[SCHED_SCHEDULED], 0);
	assert_int_equal(state_of(s, ids[0]), SCHED_READY);
	assert_int_equal(state_of(s, ids[n - 1]), SCHED_READY);
	free(ids);
	free(err);
	free(res);
	free(p);
}

/*
 * A burst of 1000 jobs in one shard and topic is cut into calls of at most
 * scheduler.batch (100) jobs: SLOWLOG, told to log every command, shows
 * each call's argument count (no timing is looked at).
 */
static void
test_push_many_bounded(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct sched_push *p = xcalloc(1000, sizeof(*p));
	struct sched_push_result *res = xcalloc(1000, sizeof(*res));
	enum sched_err *err = xcalloc(1000, sizeof(*err));
	char (*ids)[ID_LEN + 1] = xcalloc(1000, sizeof(*ids));
	int64_t now = clock_wall_ms(), counts[SCHED_NSTATES];
	long long nargs, calls = 0, jobs = 0;
	redisReply *r;
	const char *more;
	size_t i;

	one_shard(s, p, ids, 1000, now + 100, "x");
	freeReplyObject(redisfix_cmd(&test_redis,
	    "CONFIG SET slowlog-max-len 4096"));
	freeReplyObject(redisfix_cmd(&test_redis,
	    "CONFIG SET slowlog-log-slower-than 0"));
	freeReplyObject(redisfix_cmd(&test_redis, "SLOWLOG RESET"));
	sched_push_many(s, p, 1000, res, err);
	r = redisfix_cmd(&test_redis, "SLOWLOG GET 4096");
	freeReplyObject(redisfix_cmd(&test_redis,
	    "CONFIG SET slowlog-log-slower-than 10000"));
	freeReplyObject(redisfix_cmd(&test_redis,
	    "CONFIG SET slowlog-max-len 128"));
	assert_non_null(r);
	for (i = 0; i < r->elements; i++) {
		redisReply *e = r->element[i], *a;

		if (e->elements < 4)
			continue;
		a = e->element[3];
		/* push_many: 5 keys, the second the topic's delays. */
		if (a->elements < 5 || strcasecmp(a->element[0]->str,
		    "evalsha") != 0 || strcmp(a->element[2]->str, "5") != 0 ||
		    strstr(a->element[4]->str, "pull") == NULL)
			continue;
		/* SLOWLOG keeps 32 arguments; the last tells the rest. */
		nargs = (long long)a->elements;
		more = a->element[a->elements - 1]->str;
		if (a->elements == 32 && strncmp(more, "... (", 5) == 0)
			nargs = 31 + strtoll(more + 5, NULL, 10);
		/* EVALSHA sha 5 keys(5) now tag, then two per job. */
		assert_true(nargs > 10);
		assert_true((nargs - 10) % 2 == 0);
		assert_true((nargs - 10) / 2 <= 100);
		jobs += (nargs - 10) / 2;
		calls++;
	}
	freeReplyObject(r);
	assert_int_equal(jobs, 1000);
	assert_int_equal(calls, 10);
	for (i = 0; i < 1000; i++)
		assert_int_equal(err[i], SCHED_OK);
	assert_int_equal(sched_counts(s, T_TENANT, "pull", counts), SCHED_OK);
	assert_int_equal(counts[SCHED_SCHEDULED], 1000);
	free(ids);
	free(err);
	free(res);
	free(p);
}

static void
test_cancel_reschedule(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct sched_job *job;
	char a[ID_LEN + 65], b[ID_LEN + 65], c[ID_LEN + 65];
	int64_t now = clock_wall_ms();
	int64_t want[SCHED_NSTATES] = { 0 };

	push(s, "pull", now + 100, 0, NULL, a);
	push(s, "pull", now + 200, 0, NULL, b);
	push(s, "pull", now + 300, 0, NULL, c);
	assert_int_equal(sched_cancel(s, T_TENANT, a), SCHED_OK);
	assert_int_equal(state_of(s, a), SCHED_CANCELLED);
	assert_int_equal(sched_cancel(s, T_TENANT, a), SCHED_ECONFLICT);
	assert_int_equal(sched_cancel(s, T_TENANT, "NOSUCHJOB"),
	    SCHED_ENOTFOUND);
	assert_int_equal(sched_reschedule(s, T_TENANT, a, now + 1),
	    SCHED_ECONFLICT);
	want[SCHED_SCHEDULED] = 2;
	want[SCHED_CANCELLED] = 1;
	expect_counts(s, "pull", want);

	/* c earlier than b, b later. */
	assert_int_equal(sched_reschedule(s, T_TENANT, c, now + 50), SCHED_OK);
	assert_int_equal(sched_reschedule(s, T_TENANT, b, now + 500),
	    SCHED_OK);
	assert_int_equal(sched_get(s, T_TENANT, c, &job), SCHED_OK);
	assert_int_equal(job->due_ms, now + 50);
	sched_job_free(job);
	clock_advance_ms(49);
	kick_wait(s);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_ENOTFOUND);
	clock_advance_ms(1);
	kick_wait(s);
	assert_int_equal(state_of(s, c), SCHED_READY);
	assert_int_equal(sched_reschedule(s, T_TENANT, c, now + 900),
	    SCHED_ECONFLICT);
	clock_advance_ms(250);		/* b's old due time: not moved yet */
	kick_wait(s);
	assert_int_equal(state_of(s, b), SCHED_SCHEDULED);
	/* Cancel a ready job and an in-flight one. */
	assert_int_equal(sched_cancel(s, T_TENANT, c), SCHED_OK);
	clock_advance_ms(200);
	kick_wait(s);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_OK);
	assert_string_equal(job->id, b);
	assert_int_equal(sched_cancel(s, T_TENANT, b), SCHED_OK);
	{
		struct schedule_outcome ok = { SCHEDULE_OK, 0, -1 };

		assert_int_equal(sched_report(s, T_TENANT, b, job->token, &ok,
		    NULL, NULL), SCHED_ESTALE);
	}
	sched_job_free(job);
	memset(want, 0, sizeof(want));
	want[SCHED_CANCELLED] = 3;
	expect_counts(s, "pull", want);
	expect_counts(s, NULL, want);
}

static void
test_stale_ack_and_expiry(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct schedule_outcome ok = { SCHEDULE_OK, 0, -1 };
	struct sched_job *j1, *j2, *job;
	char a[ID_LEN + 65], tok1[SCHED_TOKEN_LEN + 1];
	int64_t now = clock_wall_ms();
	int64_t want[SCHED_NSTATES] = { 0 };

	push(s, "pull", now, 0, NULL, a);
	kick_wait(s);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &j1), SCHED_OK);
	snprintf(tok1, sizeof(tok1), "%s", j1->token);
	/* Time to run (1000 ms, the topic's) passes: a failed attempt. */
	clock_advance_ms(999);
	kick_wait(s);
	assert_int_equal(state_of(s, a), SCHED_IN_FLIGHT);
	clock_advance_ms(1);
	kick_wait(s);
	kick_wait(s);	/* expired, retried at once (<0,0,1s>), promoted */
	assert_int_equal(sched_get(s, T_TENANT, a, &job), SCHED_OK);
	assert_int_equal(job->state, SCHED_READY);
	assert_int_equal(job->attempts, 1);
	assert_int_equal(job->nattempt_log, 1);
	assert_string_equal(job->attempt_log[0].error, "time to run expired");
	sched_job_free(job);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &j2), SCHED_OK);
	assert_string_equal(j2->id, a);
	assert_string_not_equal(j2->token, tok1);
	/* The late ack of the first reservation is refused. */
	assert_int_equal(sched_report(s, T_TENANT, a, tok1, &ok, NULL, NULL),
	    SCHED_ESTALE);
	assert_int_equal(sched_report(s, T_TENANT, a, "short", &ok, NULL,
	    NULL), SCHED_ESTALE);
	assert_int_equal(sched_report(s, T_TENANT, a, j2->token, &ok, NULL,
	    NULL), SCHED_OK);
	assert_int_equal(sched_report(s, T_TENANT, a, j2->token, &ok, NULL,
	    NULL), SCHED_ESTALE);
	assert_int_equal(sched_get(s, T_TENANT, a, &job), SCHED_OK);
	assert_int_equal(job->state, SCHED_DELIVERED);
	assert_int_equal(job->attempts, 2);
	assert_int_equal(job->nattempt_log, 2);
	sched_job_free(job);
	sched_job_free(j1);
	sched_job_free(j2);
	want[SCHED_DELIVERED] = 1;
	expect_counts(s, "pull", want);
	assert_int_equal(f->rec.ntrans[SCHED_IN_FLIGHT][SCHED_RETRYING], 1);
}

static void
test_quiesce(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct sched_job *job;
	char a[ID_LEN + 65];
	int64_t want[SCHED_NSTATES] = { 0 };

	sched_quiesce(s);
	push(s, "pull", clock_wall_ms(), 0, NULL, a);
	clock_advance_ms(10);
	kick_wait(s);
	/* Draining: nothing new falls due, the leases stay. */
	want[SCHED_SCHEDULED] = 1;
	expect_counts(s, "pull", want);
	assert_int_equal(sched_owned_shards(s), 16);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_ENOTFOUND);
}

/* Reserves the job of topic that is id (the only one ready there). */
static struct sched_job *
reserve_id(struct sched *s, const char *topic, const char *id)
{
	struct sched_job *job;

	assert_int_equal(sched_reserve(s, T_TENANT, topic, 1000, &job),
	    SCHED_OK);
	assert_string_equal(job->id, id);
	return job;
}

/*
 * A failed attempt of a job whose topic cannot be read now (topic_info()
 * answers -2: Redis owed its rebuild, nothing cached) is not decided as if
 * the topic were gone.  Its outcome is decided by the topic topic_recall()
 * reads (the journal); when that cannot tell either, the outcome is not
 * applied (SCHED_EAGAIN, alone and in a batch) and the job stays in flight;
 * its expired deadline does not ask topic_recall() (the timer's thread
 * does not wait on it) and holds the job until topic_info() can tell.
 */
static void
test_outcome_topic_unsure(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct schedule_outcome nack = { SCHEDULE_NACK, 0, -1 };
	struct schedule_decision d;
	struct sched_report_item v;
	struct sched_job *job;
	char u[ID_LEN + 65], r[ID_LEN + 65], r2[ID_LEN + 65];
	char g[ID_LEN + 65];
	int64_t now = clock_wall_ms();

	push(s, "unsure", now, 0, NULL, u);
	push(s, "recalled", now, 0, NULL, r);
	push(s, "forgotten", now, 0, NULL, g);
	kick_wait(s);

	/* Recalled: its schedule, <0,2m>, decides. */
	job = reserve_id(s, "recalled", r);
	assert_int_equal(sched_report(s, T_TENANT, r, job->token, &nack, NULL,
	    &d), SCHED_OK);
	assert_int_equal(d.verdict, SCHEDULE_RETRY);
	assert_int_equal(d.next_ms, now + 120000);
	sched_job_free(job);
	assert_int_equal(state_of(s, r), SCHED_RETRYING);
	assert_int_equal(__atomic_load_n(&f->rec.nrecall, __ATOMIC_RELAXED),
	    1);

	/* The journal has no such topic: gone, dead. */
	job = reserve_id(s, "forgotten", g);
	assert_int_equal(sched_report(s, T_TENANT, g, job->token, &nack, NULL,
	    &d), SCHED_OK);
	assert_int_equal(d.verdict, SCHEDULE_DEAD);
	sched_job_free(job);
	assert_int_equal(state_of(s, g), SCHED_DEAD);

	/* Neither can tell: not applied, alone or in a batch. */
	job = reserve_id(s, "unsure", u);
	assert_int_equal(sched_report(s, T_TENANT, u, job->token, &nack, NULL,
	    &d), SCHED_EAGAIN);
	assert_int_equal(state_of(s, u), SCHED_IN_FLIGHT);
	memset(&v, 0, sizeof(v));
	v.tenant = T_TENANT;
	v.id = u;
	v.token = job->token;
	v.outcome = nack;
	v.job = job;	/* as the reporter gives it: not read again */
	sched_report_many(s, &v, 1);
	assert_int_equal(v.err, SCHED_EAGAIN);
	v.job = NULL;	/* read from Redis */
	sched_report_many(s, &v, 1);
	assert_int_equal(v.err, SCHED_EAGAIN);
	sched_job_free(job);
	assert_int_equal(state_of(s, u), SCHED_IN_FLIGHT);

	/*
	 * Deadlines pass (ttr 1 s).  The timer asks no recall: a recalled
	 * topic's job waits too.  Held, not dead, until topic_info() tells.
	 */
	push(s, "recalled", now, 0, NULL, r2);
	kick_wait(s);
	job = reserve_id(s, "recalled", r2);
	sched_job_free(job);
	clock_advance_ms(1001);
	kick_wait(s);
	kick_wait(s);
	assert_int_equal(state_of(s, u), SCHED_IN_FLIGHT);
	assert_int_equal(state_of(s, r2), SCHED_IN_FLIGHT);
	assert_int_equal(__atomic_load_n(&f->rec.nrecall, __ATOMIC_RELAXED),
	    5);
	__atomic_store_n(&f->rec.unsure_known, 1, __ATOMIC_RELAXED);
	clock_advance_ms(250);
	kick_wait(s);
	kick_wait(s);
	/* Decided by the expired deadline, on the schedule <0,1m>. */
	assert_int_equal(sched_get(s, T_TENANT, u, &job), SCHED_OK);
	assert_int_equal(job->state, SCHED_RETRYING);
	assert_int_equal(job->attempts, 1);
	assert_int_equal(job->due_ms, clock_wall_ms() + 60000);
	sched_job_free(job);
	assert_int_equal(state_of(s, r2), SCHED_IN_FLIGHT);
}

static void
test_nack_dead_retry_redrive(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct schedule_outcome nack = { SCHEDULE_NACK, 0, -1 };
	struct schedule_decision d;
	struct sched_job *job, **dead;
	char ids[5][ID_LEN + 65], cur[128], seen[5][ID_LEN + 65];
	char died[5][ID_LEN + 65], holder[ID_LEN + 65];
	size_t n, i, k, nseen = 0;
	int64_t now = clock_wall_ms(), count, skipped;
	int64_t want[SCHED_NSTATES] = { 0 };

	for (i = 0; i < 5; i++)
		push(s, "once", now, 0, NULL, ids[i]);
	kick_wait(s);
	for (i = 0; i < 5; i++) {
		assert_int_equal(sched_reserve(s, T_TENANT, "once", 0, &job),
		    SCHED_OK);
		assert_int_equal(sched_report(s, T_TENANT, job->id,
		    job->token, &nack, NULL, &d), SCHED_OK);
		assert_int_equal(d.verdict, SCHEDULE_DEAD);
		snprintf(died[i], sizeof(died[i]), "%s", job->id);
		sched_job_free(job);
		clock_advance_ms(1);	/* distinct dead times */
	}
	want[SCHED_DEAD] = 5;
	expect_counts(s, "once", want);

	/* Newest first, two by two, each once. */
	cur[0] = '\0';
	do {
		assert_int_equal(sched_dead_list(s, T_TENANT, "once", cur, 2,
		    &dead, &n, cur, sizeof(cur)), SCHED_OK);
		for (i = 0; i < n; i++) {
			assert_int_equal(dead[i]->state, SCHED_DEAD);
			for (k = 0; k < nseen; k++)
				assert_string_not_equal(seen[k], dead[i]->id);
			snprintf(seen[nseen++], sizeof(seen[0]), "%s",
			    dead[i]->id);
			sched_job_free(dead[i]);
		}
		free(dead);
	} while (cur[0] != '\0' && nseen < 5);
	assert_int_equal(nseen, 5);
	for (i = 0; i < 5; i++)
		assert_string_equal(seen[i], died[4 - i]);

	/* One back, then the rest. */
	assert_int_equal(sched_retry(s, T_TENANT, ids[0], holder), SCHED_OK);
	assert_int_equal(sched_retry(s, T_TENANT, ids[0], holder),
	    SCHED_ECONFLICT);
	assert_string_equal(holder, "");
	assert_int_equal(sched_get(s, T_TENANT, ids[0], &job), SCHED_OK);
	/* Due now: the timer may have promoted it already. */
	assert_true(job->state == SCHED_SCHEDULED ||
	    job->state == SCHED_READY);
	assert_int_equal(job->attempts, 0);
	assert_int_equal(job->due_ms, clock_wall_ms());
	sched_job_free(job);
	assert_int_equal(sched_redrive(s, T_TENANT, "once", &count,
	    &skipped), SCHED_OK);
	assert_int_equal(count, 4);
	assert_int_equal(skipped, 0);
	{
		int64_t got[SCHED_NSTATES];

		/* Due now: the timer may promote them at once. */
		assert_int_equal(sched_counts(s, T_TENANT, "once", got),
		    SCHED_OK);
		assert_int_equal(got[SCHED_DEAD], 0);
		assert_int_equal(got[SCHED_SCHEDULED] + got[SCHED_READY], 5);
	}
	memset(want, 0, sizeof(want));
	kick_wait(s);
	want[SCHED_SCHEDULED] = 0;
	want[SCHED_READY] = 5;
	expect_counts(s, "once", want);
}

/* The version of a job, as Redis holds it. */
static int64_t
version_of(struct sched *s, const char *id)
{
	struct sched_job *job;
	int64_t v;

	assert_int_equal(sched_get(s, T_TENANT, id, &job), SCHED_OK);
	v = job->version;
	sched_job_free(job);
	return v;
}

/* The last change the journal would record was id's, to to, version v. */
static void
expect_change(struct trec *r, const char *id, enum sched_state to,
    int64_t v)
{
	pthread_mutex_lock(&r->lock);
	assert_string_equal(r->jid, id);
	assert_int_equal(r->jto, to);
	assert_int_equal(r->jversion, v);
	pthread_mutex_unlock(&r->lock);
}

/*
 * Every change the journal records takes the job's next version in Redis
 * (the journal orders a job's transitions by it, not by the reporting
 * instance's clock), and the hook reports it: reschedule, an attempt's
 * outcome, cancel, a dead job retried, a topic's jobs dropped.  Promote
 * and reserve keep it; a release takes one without a recorded change.
 * A restored job keeps the version it was given, its record with every
 * optional field edited in place by reserve and finish around it.
 */
static void
test_versions(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct schedule_outcome ok = { SCHEDULE_OK, 0, -1 };
	struct schedule_outcome nack = { SCHEDULE_NACK, 0, -1 };
	struct schedule_decision d;
	struct sched_job *job, j;
	char a[ID_LEN + 65], b[ID_LEN + 65], c[ID_LEN + 65];
	char e[ID_LEN + 1], holder[ID_LEN + 65];
	int64_t now = clock_wall_ms(), n;
	int created;

	push(s, "pull", now + 100, 0, NULL, a);
	assert_int_equal(version_of(s, a), 0);
	assert_int_equal(sched_reschedule(s, T_TENANT, a, now + 50), SCHED_OK);
	expect_change(&f->rec, a, SCHED_SCHEDULED, 1);
	clock_advance_ms(50);
	kick_wait(s);
	assert_int_equal(state_of(s, a), SCHED_READY);
	assert_int_equal(version_of(s, a), 1);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_OK);
	assert_string_equal(job->id, a);
	assert_int_equal(job->version, 1);
	assert_int_equal(sched_report(s, T_TENANT, a, job->token, &nack,
	    NULL, &d), SCHED_OK);
	assert_int_equal(d.verdict, SCHEDULE_RETRY);
	expect_change(&f->rec, a, SCHED_RETRYING, 2);
	sched_job_free(job);
	kick_wait(s);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_OK);
	assert_int_equal(job->version, 2);
	assert_int_equal(sched_release(s, T_TENANT, a, job->token), SCHED_OK);
	sched_job_free(job);
	assert_int_equal(version_of(s, a), 3);
	expect_change(&f->rec, a, SCHED_RETRYING, 2);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_OK);
	assert_int_equal(sched_report(s, T_TENANT, a, job->token, &ok,
	    NULL, NULL), SCHED_OK);
	sched_job_free(job);
	expect_change(&f->rec, a, SCHED_DELIVERED, 4);
	assert_int_equal(sched_cancel(s, T_TENANT, a), SCHED_ECONFLICT);
	assert_int_equal(version_of(s, a), 4);

	push(s, "pull", now + 1000, 0, NULL, b);
	assert_int_equal(sched_cancel(s, T_TENANT, b), SCHED_OK);
	expect_change(&f->rec, b, SCHED_CANCELLED, 1);

	push(s, "once", clock_wall_ms(), 0, NULL, c);
	kick_wait(s);
	assert_int_equal(sched_reserve(s, T_TENANT, "once", 0, &job),
	    SCHED_OK);
	assert_int_equal(sched_report(s, T_TENANT, c, job->token, &nack,
	    NULL, NULL), SCHED_OK);
	sched_job_free(job);
	expect_change(&f->rec, c, SCHED_DEAD, 1);
	assert_int_equal(sched_retry(s, T_TENANT, c, holder), SCHED_OK);
	expect_change(&f->rec, c, SCHED_SCHEDULED, 2);

	push(s, "other", now + 1000, 0, NULL, b);
	assert_int_equal(sched_reschedule(s, T_TENANT, b, now + 2000),
	    SCHED_OK);
	assert_int_equal(sched_drop_topic(s, T_TENANT, "other", &n),
	    SCHED_OK);
	assert_int_equal(n, 1);
	expect_change(&f->rec, b, SCHED_CANCELLED, 2);

	sched_new_id(s, "bk", e);
	memset(&j, 0, sizeof(j));
	snprintf(j.id, sizeof(j.id), "%s", e);
	j.tenant = T_TENANT;
	j.topic = "pull";
	j.bizkey = "bk";
	j.state = SCHED_SCHEDULED;
	j.due_ms = clock_wall_ms();
	j.created_ms = clock_wall_ms() - 5;
	j.priority = 3;
	j.attempts = 1;
	j.ttr_ms = 5000;
	j.headers_json = "{\"X-A\":\"1\"}";
	j.schedule = "<0,1s,1s,1s>";
	j.body = "hello";
	j.body_len = 5;
	j.version = 70000;
	assert_int_equal(sched_restore_job(s, &j, &created), SCHED_OK);
	assert_int_equal(created, 1);
	assert_int_equal(version_of(s, e), 70000);
	kick_wait(s);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_OK);
	assert_string_equal(job->id, e);
	assert_int_equal(job->version, 70000);
	assert_memory_equal(job->body, "hello", 5);
	assert_int_equal(sched_report(s, T_TENANT, e, job->token, &nack,
	    NULL, NULL), SCHED_OK);
	sched_job_free(job);
	expect_change(&f->rec, e, SCHED_RETRYING, 70001);
	assert_int_equal(sched_get(s, T_TENANT, e, &job), SCHED_OK);
	assert_int_equal(job->version, 70001);
	assert_int_equal(job->attempts, 2);
	assert_int_equal(job->priority, 3);
	assert_int_equal(job->ttr_ms, 5000);
	assert_int_equal(job->created_ms, j.created_ms);
	assert_string_equal(job->bizkey, "bk");
	assert_string_equal(job->headers_json, "{\"X-A\":\"1\"}");
	assert_string_equal(job->schedule, "<0,1s,1s,1s>");
	assert_int_equal(job->body_len, 5);
	assert_memory_equal(job->body, "hello", 5);
	sched_job_free(job);
	j.version = SCHED_VERSION_MAX + 1;
	j.id[0] = 'Z';
	assert_int_equal(sched_restore_job(s, &j, &created), SCHED_EINVAL);
}

/*
 * A topic holds one unfinished job per bizkey, and a restore keeps to it:
 * a journal row whose bizkey names another unfinished job in Redis (one
 * pushed while Redis lacked the row's) is not made, and its change to
 * cancelled is reported for the journal, at the version the row would
 * have been restored with.  A job of that bizkey that is finished does
 * not hold it.
 */
static void
test_restore_bizkey_taken(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct sched_job j, *job;
	char a[ID_LEN + 65], b[ID_LEN + 65], c[ID_LEN + 65];
	int created = 0;

	push(s, "pull", clock_wall_ms() + 60000, 0, "bk", a);
	sched_new_id(s, "bk", b);
	memset(&j, 0, sizeof(j));
	snprintf(j.id, sizeof(j.id), "%s", b);
	j.tenant = T_TENANT;
	j.topic = "pull";
	j.bizkey = "bk";
	j.state = SCHED_SCHEDULED;
	/* Ahead: the timer would make a job due now ready (below). */
	j.due_ms = clock_wall_ms() + 60000;
	j.created_ms = clock_wall_ms() - 5;
	j.body = "old";
	j.body_len = 3;
	j.version = 65537;
	assert_int_equal(sched_restore_job(s, &j, &created), SCHED_OK);
	assert_int_equal(created, -1);
	assert_int_equal(sched_get(s, T_TENANT, b, &job), SCHED_ENOTFOUND);
	expect_change(&f->rec, b, SCHED_CANCELLED, 65537);
	/* Again: the same answer, nothing made. */
	assert_int_equal(sched_restore_job(s, &j, &created), SCHED_OK);
	assert_int_equal(created, -1);

	/* Another topic's bizkey of that name is not it. */
	sched_new_id(s, "bk", c);
	snprintf(j.id, sizeof(j.id), "%s", c);
	j.topic = "other";
	assert_int_equal(sched_restore_job(s, &j, &created), SCHED_OK);
	assert_int_equal(created, 1);

	/* Its job finished, the bizkey is free: the row is made. */
	assert_int_equal(sched_cancel(s, T_TENANT, a), SCHED_OK);
	snprintf(j.id, sizeof(j.id), "%s", b);
	j.topic = "pull";
	assert_int_equal(sched_restore_job(s, &j, &created), SCHED_OK);
	assert_int_equal(created, 1);
	assert_int_equal(sched_get(s, T_TENANT, b, &job), SCHED_OK);
	assert_int_equal(job->state, SCHED_SCHEDULED);
	sched_job_free(job);
	/* And now holds it: a push of the bizkey is that job. */
	push(s, "pull", clock_wall_ms(), 0, "bk", c);
	assert_string_equal(c, b);
}

static void
test_push_mode_outcomes(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct schedule_outcome fail = { SCHEDULE_HTTP, 500, -1 };
	struct schedule_outcome busy = { SCHEDULE_HTTP, 503, -1 };
	struct schedule_decision d;
	struct sched_attempt at;
	struct sched_job *job;
	char a[ID_LEN + 65];
	int64_t now = clock_wall_ms();
	int64_t want[SCHED_NSTATES] = { 0 };

	push(s, "push", now, 0, NULL, a);
	kick_wait(s);
	job = take_delivery(&f->rec);
	assert_non_null(job);
	assert_string_equal(job->id, a);
	assert_int_equal(job->deadline_ms, now + 1000 + 5000);
	memset(&at, 0, sizeof(at));
	at.at_ms = now;
	at.status = 500;
	at.latency_ms = 12;
	at.error = "HTTP 500";
	at.excerpt = "oops\0x";
	at.excerpt_len = 6;
	/* Attempt 1 fails: <0,1s,1s> retries 1 s later. */
	assert_int_equal(sched_report(s, T_TENANT, a, job->token, &fail, &at,
	    &d), SCHED_OK);
	assert_int_equal(d.verdict, SCHEDULE_RETRY);
	assert_int_equal(d.next_ms, now + 1000);
	sched_job_free(job);
	want[SCHED_RETRYING] = 1;
	expect_counts(s, "push", want);
	clock_advance_ms(999);
	kick_wait(s);
	assert_int_equal(state_of(s, a), SCHED_RETRYING);
	clock_advance_ms(1);
	kick_wait(s);
	job = take_delivery(&f->rec);
	assert_non_null(job);
	assert_int_equal(job->attempts, 1);
	/* 503 with a Retry-After later than the next wait. */
	busy.retry_after_ms = clock_wall_ms() + 7000;
	assert_int_equal(sched_report(s, T_TENANT, a, job->token, &busy, NULL,
	    &d), SCHED_OK);
	assert_int_equal(d.next_ms, clock_wall_ms() + 7000);
	sched_job_free(job);
	clock_advance_ms(7000);
	kick_wait(s);
	job = take_delivery(&f->rec);
	assert_non_null(job);
	assert_int_equal(sched_report(s, T_TENANT, a, job->token, &fail, NULL,
	    &d), SCHED_OK);
	assert_int_equal(d.verdict, SCHEDULE_DEAD);
	sched_job_free(job);
	assert_int_equal(sched_get(s, T_TENANT, a, &job), SCHED_OK);
	assert_int_equal(job->state, SCHED_DEAD);
	assert_int_equal(job->attempts, 3);
	assert_int_equal(job->nattempt_log, 3);
	assert_int_equal(job->attempt_log[0].status, 500);
	assert_int_equal(job->attempt_log[0].latency_ms, 12);
	assert_string_equal(job->attempt_log[0].error, "HTTP 500");
	assert_int_equal(job->attempt_log[0].excerpt_len, 6);
	assert_memory_equal(job->attempt_log[0].excerpt, "oops\0x", 6);
	sched_job_free(job);
	memset(want, 0, sizeof(want));
	want[SCHED_DEAD] = 1;
	expect_counts(s, "push", want);
}

/* Redis's count of HGET commands so far. */
static long long
hget_calls(void)
{
	redisReply *r = redisfix_cmd(&test_redis, "INFO commandstats");
	const char *p;
	long long n = 0;

	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STRING);
	if ((p = strstr(r->str, "cmdstat_hget:calls=")) != NULL)
		n = strtoll(p + strlen("cmdstat_hget:calls="), NULL, 10);
	freeReplyObject(r);
	return n;
}

/*
 * A batch of outcomes: the items of one shard and topic go in one finish
 * call.  Done, retry, release, a stale token, a pull job's ack among push
 * ones, and the same reservation twice (the second is stale) all come out
 * as they would one by one, with the counts and attempt logs; an item that
 * comes with its job as reserved is not read back from Redis.
 */
static void
test_report_many(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct schedule_outcome ok = { SCHEDULE_OK, 200, -1 };
	struct schedule_outcome fail = { SCHEDULE_HTTP, 500, -1 };
	static const enum sched_err errs[] = { SCHED_OK, SCHED_OK, SCHED_OK,
	    SCHED_ESTALE, SCHED_OK, SCHED_ESTALE };
	struct sched_report_item v[6];
	struct sched_attempt at[3];
	struct sched_job *job[4], *pj, *g;
	char id[5][ID_LEN + 65];
	long long hget0;
	int64_t now = clock_wall_ms();
	int64_t want[SCHED_NSTATES] = { 0 };
	int i;

	for (i = 0; i < 4; i++)
		push(s, "push", now, i == 2 ? 5 : 0, NULL, id[i]);
	push(s, "pull", now, 0, NULL, id[4]);
	kick_wait(s);
	for (i = 0; i < 4; i++)
		assert_non_null(job[i] = take_delivery(&f->rec));
	for (i = 0; i < 4; i++)		/* the one of priority 5 goes back */
		if (job[i]->priority == 5) {
			g = job[2];
			job[2] = job[i];
			job[i] = g;
		}
	pthread_mutex_lock(&f->rec.lock);
	f->rec.capacity = 0;		/* the released job stays ready */
	pthread_mutex_unlock(&f->rec.lock);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &pj),
	    SCHED_OK);
	memset(v, 0, sizeof(v));
	for (i = 0; i < 4; i++) {
		v[i].tenant = T_TENANT;
		v[i].id = job[i]->id;
		v[i].token = job[i]->token;
		v[i].outcome = ok;
	}
	memset(at, 0, sizeof(at));
	for (i = 0; i < 3; i++) {
		at[i].at_ms = now;
		at[i].status = i == 1 ? 500 : 200;
		at[i].latency_ms = 3;
	}
	v[0].attempt = &at[0];
	v[1].attempt = &at[1];
	v[1].outcome = fail;
	v[2].release = 1;
	v[3].token = "AAAAAAAAAAAAAAAAAAAAAA";
	v[4].tenant = T_TENANT;
	v[4].id = pj->id;
	v[4].token = pj->token;
	v[4].outcome = ok;
	v[4].attempt = &at[2];
	/* Three push items come with the job as reserved, so their
	 * records are not read back; the stale one's copy does not match
	 * its token and is read (and refused). */
	for (i = 0; i < 4; i++)
		v[i].job = job[i];
	v[5] = v[0];
	hget0 = hget_calls();
	sched_report_many(s, v, 6);
	assert_int_equal(hget_calls() - hget0, 2);
	for (i = 0; i < 6; i++)
		assert_int_equal(v[i].err, errs[i]);
	assert_int_equal(v[1].decision.verdict, SCHEDULE_RETRY);
	assert_int_equal(v[1].decision.next_ms, now + 1000);
	want[SCHED_DELIVERED] = 1;
	want[SCHED_RETRYING] = 1;
	want[SCHED_READY] = 1;
	want[SCHED_IN_FLIGHT] = 1;
	expect_counts(s, "push", want);
	memset(want, 0, sizeof(want));
	want[SCHED_DELIVERED] = 1;
	expect_counts(s, "pull", want);
	static const struct {
		enum sched_state st;
		int att, nlog, status;
	} after[] = {
		{ SCHED_DELIVERED, 1, 1, 200 }, { SCHED_RETRYING, 1, 1, 500 },
		{ SCHED_READY, 0, 0, 0 }, { SCHED_IN_FLIGHT, 0, 0, 0 },
		{ SCHED_DELIVERED, 1, 1, 200 },
	};
	for (i = 0; i < 5; i++) {
		assert_int_equal(sched_get(s, T_TENANT, i < 4 ? job[i]->id :
		    id[4], &g), SCHED_OK);
		assert_int_equal(g->state, after[i].st);
		assert_int_equal(g->attempts, after[i].att);
		assert_int_equal((int)g->nattempt_log, after[i].nlog);
		if (after[i].nlog > 0)
			assert_int_equal(g->attempt_log[0].status,
			    after[i].status);
		if (i == 1)
			assert_int_equal(g->due_ms, now + 1000);
		if (i == 2)
			assert_int_equal(g->priority, 5);
		assert_int_equal(g->body_len, job[i < 4 ? i : 0]->body_len);
		sched_job_free(g);
	}
	for (i = 0; i < 4; i++)
		sched_job_free(job[i]);
	sched_job_free(pj);
}

static void
test_capacity_and_release(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct schedule_outcome ok = { SCHEDULE_OK, 0, -1 };
	struct sched_job *j1, *j2;
	char id[ID_LEN + 65];
	int64_t now = clock_wall_ms();
	int64_t want[SCHED_NSTATES] = { 0 };
	int i;

	f->rec.capacity = 1;
	for (i = 0; i < 3; i++)
		push(s, "push", now, 0, NULL, id);
	kick_wait(s);
	kick_wait(s);
	want[SCHED_READY] = 2;
	want[SCHED_IN_FLIGHT] = 1;
	expect_counts(s, "push", want);
	j1 = take_delivery(&f->rec);
	assert_non_null(j1);
	/* Giving it back (drain) counts no attempt. */
	assert_int_equal(sched_release(s, T_TENANT, j1->id, j1->token),
	    SCHED_OK);
	j2 = take_delivery(&f->rec);
	assert_non_null(j2);
	assert_int_equal(sched_report(s, T_TENANT, j2->id, j2->token, &ok,
	    NULL, NULL), SCHED_OK);
	sched_job_free(j2);
	for (i = 0; i < 2; i++) {
		j2 = take_delivery(&f->rec);
		assert_non_null(j2);
		if (strcmp(j2->id, j1->id) == 0)
			assert_int_equal(j2->attempts, 0);
		assert_int_equal(sched_report(s, T_TENANT, j2->id, j2->token,
		    &ok, NULL, NULL), SCHED_OK);
		sched_job_free(j2);
	}
	sched_job_free(j1);
	memset(want, 0, sizeof(want));
	want[SCHED_DELIVERED] = 3;
	expect_counts(s, "push", want);
}

/*
 * A tenant's room is shared by its push topics in a pass: with room for 3
 * in all and two topics of 3 due jobs each (room for plenty each), 3 are
 * reserved, not 3 of each (the dispatcher would refuse the rest, and each
 * would be handed back); the others stay ready, uncounted, and go out as
 * room frees.
 */
static void
test_tenant_capacity_shared(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct schedule_outcome ok = { SCHEDULE_OK, 0, -1 };
	struct sched_job *j;
	char id[ID_LEN + 65];
	int64_t now = clock_wall_ms();
	int64_t want[SCHED_NSTATES] = { 0 }, got[SCHED_NSTATES];
	int i;

	f->rec.tenant_capacity = 3;
	for (i = 0; i < 3; i++) {
		push(s, "push", now, 0, NULL, id);
		push(s, "push2", now, 0, NULL, id);
	}
	/*
	 * How many passes fill the room depends on the shards the ids fell
	 * in (their node number is random): a few, never more than 3 in
	 * flight.
	 */
	want[SCHED_READY] = 3;
	want[SCHED_IN_FLIGHT] = 3;
	for (i = 0; i < 6; i++) {
		kick_wait(s);
		assert_int_equal(sched_counts(s, T_TENANT, NULL, got),
		    SCHED_OK);
		assert_true(got[SCHED_IN_FLIGHT] <= 3);
		if (got[SCHED_IN_FLIGHT] == 3)
			break;
	}
	expect_counts(s, NULL, want);
	assert_int_equal(trec_delivered(&f->rec), 3);
	for (i = 0; i < 3; i++) {
		j = take_delivery(&f->rec);
		assert_non_null(j);
		assert_int_equal(j->attempts, 0);
		assert_int_equal(sched_report(s, T_TENANT, j->id, j->token,
		    &ok, NULL, NULL), SCHED_OK);
		sched_job_free(j);
	}
	for (i = 0; i < 3; i++) {
		j = take_delivery(&f->rec);
		assert_non_null(j);
		assert_int_equal(j->attempts, 0);	/* waiting was none */
		assert_int_equal(sched_report(s, T_TENANT, j->id, j->token,
		    &ok, NULL, NULL), SCHED_OK);
		sched_job_free(j);
	}
	kick_wait(s);
	assert_int_equal(trec_delivered(&f->rec), 6);
	memset(want, 0, sizeof(want));
	want[SCHED_DELIVERED] = 6;
	expect_counts(s, NULL, want);
}

/* Pushes a job of topic due at due whose id is in shard sh. */
static void
push_in_shard(struct sched *s, const char *topic, int64_t due, int sh)
{
	char nid[ID_LEN + 1], id[ID_LEN + 65];

	do
		sched_new_id(s, NULL, nid);
	while (sched_shard_of(s, nid) != sh);
	push_as(s, topic, nid, due, 0, NULL, id);
}

/*
 * A topic's small room is not spread over its shards a job at a time (a
 * reserve call each): with room for 10 and 30 ready jobs in each of the
 * 16 shards, a pass reserves all 10 from one shard, and the next pass
 * given room starts after it, so each shard gets its turn: round r takes
 * shard r's.
 */
static void
test_room_shards_take_turns(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct schedule_outcome ok = { SCHEDULE_OK, 0, -1 };
	struct sched_job *j[10];
	int64_t now = clock_wall_ms();
	int i, r, sh;

	pthread_mutex_lock(&f->rec.lock);
	f->rec.capacity = 0;
	pthread_mutex_unlock(&f->rec.lock);
	for (sh = 0; sh < 16; sh++)
		for (i = 0; i < 30; i++)
			push_in_shard(s, "push", now + 10, sh);
	clock_advance_ms(10);
	kick_wait(s);			/* all ready, none reserved */
	assert_int_equal(trec_delivered(&f->rec), 0);
	for (r = 0; r < 16; r++) {
		pthread_mutex_lock(&f->rec.lock);
		f->rec.capacity = 10;
		pthread_mutex_unlock(&f->rec.lock);
		kick_wait(s);
		pthread_mutex_lock(&f->rec.lock);
		f->rec.capacity = 0;
		pthread_mutex_unlock(&f->rec.lock);
		assert_int_equal(trec_delivered(&f->rec), 10 * (r + 1));
		for (i = 0; i < 10; i++) {
			assert_non_null(j[i] = take_delivery(&f->rec));
			assert_int_equal(sched_shard_of(s, j[i]->id), r);
		}
		for (i = 0; i < 10; i++) {
			assert_int_equal(sched_report(s, T_TENANT, j[i]->id,
			    j[i]->token, &ok, NULL, NULL), SCHED_OK);
			sched_job_free(j[i]);
		}
	}
	kick_wait(s);
	assert_int_equal(trec_delivered(&f->rec), 160);
}

/*
 * The rebuild lock is taken only while a rebuild is owed (the flag): an
 * instance that waited for another must not take the lock the other just
 * freed with the flag and rebuild a second time.  Renewing fails once the
 * flag is gone.
 */
static void
test_restore_lock(void **state)
{
	struct registry *reg;
	char why[256];
	int got, done;

	(void)state;
	reg = registry_new(test_redis.url, 2000, 0, why, sizeof(why));
	assert_non_null(reg);
	freeReplyObject(redisfix_cmd(&test_redis, "DEL rd:{registry}:restore "
	    "rd:{registry}:restore_lock"));
	/* Nothing owed: no lock, for anyone. */
	assert_int_equal(registry_restore_lock(reg, "a", 30000, 0, &got),
	    REG_OK);
	assert_int_equal(got, -1);
	/* Owed: the first takes it, the second waits. */
	assert_int_equal(registry_restore_request(reg, "test"), REG_OK);
	assert_int_equal(registry_restore_lock(reg, "a", 30000, 0, &got),
	    REG_OK);
	assert_int_equal(got, 1);
	assert_int_equal(registry_restore_lock(reg, "b", 30000, 0, &got),
	    REG_OK);
	assert_int_equal(got, 0);
	assert_int_equal(registry_restore_lock(reg, "a", 30000, 1, &got),
	    REG_OK);
	assert_int_equal(got, 1);
	/* Done: lock and flag go together; the waiter finds nothing owed. */
	assert_int_equal(registry_restore_done(reg, "a", &done), REG_OK);
	assert_int_equal(done, 1);
	assert_int_equal(registry_restore_lock(reg, "b", 30000, 0, &got),
	    REG_OK);
	assert_int_equal(got, -1);
	assert_int_equal(registry_restore_lock(reg, "a", 30000, 1, &got),
	    REG_OK);
	assert_int_equal(got, 0);
	registry_free(reg);
}

/*
 * A registry on f's Redis (its schema marker set) with tenant "acme" and
 * its pull topic "q" on schedule sched (*t: the topic as put).
 */
static struct registry *
registry_with_topic(struct redisfix *f, const char *sched,
    struct registry_topic **t)
{
	struct registry *reg;
	char why[256], key[REG_API_KEY_LEN + 1], kid[REG_KEY_ID_MAX + 1];
	int created;

	freeReplyObject(redisfix_cmd(f, "SET rd:schema 1"));
	reg = registry_new(f->url, 500, 0, why, sizeof(why));
	assert_non_null(reg);
	assert_int_equal(registry_tenant_create(reg, "acme", 0, 0, T0, key,
	    kid), REG_OK);
	*t = registry_topic_new();
	snprintf((*t)->tenant, sizeof((*t)->tenant), "acme");
	snprintf((*t)->name, sizeof((*t)->name), "q");
	(*t)->mode = REG_MODE_PULL;
	assert_int_equal(schedule_parse(sched, strlen(sched), 0,
	    &(*t)->schedule, NULL), 0);
	assert_int_equal(registry_topic_new_secret(*t), 0);
	assert_int_equal(registry_topic_put(reg, *t, T0, &created), REG_OK);
	return reg;
}

/*
 * Redis lost its data and is not rebuilt yet: the scheduler's lookup of a
 * topic Redis no longer has gets the last one known, so a failed attempt
 * follows the topic's schedule instead of killing the job as if the topic
 * were deleted; the API's lookup misses (503 rebuilding) and does not
 * replace what the scheduler is served.  With nothing cached, the
 * scheduler is told the topic cannot be read now (-2) until a recall (the
 * journal's record) is cached.  With nothing owed, a topic Redis lacks is
 * gone for both.
 */
static void
test_topic_info_while_owed(void **state)
{
	struct registry *reg;
	struct registry_topic *t, *got = NULL;
	struct sched_topic_info info;
	char *json;

	(void)state;
	flush_redis(&test_redis);
	reg = registry_with_topic(&test_redis, "<0,2m,10m>", &t);
	assert_int_equal(registry_topic_info(reg, "acme", "q", &info), 0);
	assert_int_equal(info.schedule.n, 3);

	/* Every key lost, the schema marker with them: a rebuild is owed. */
	freeReplyObject(redisfix_cmd(&test_redis, "FLUSHDB"));
	registry_cache_expire(reg);
	assert_int_equal(registry_topic_get(reg, "acme", "q", &got),
	    REG_ENOTFOUND);
	memset(&info, 0, sizeof(info));
	assert_int_equal(registry_topic_info(reg, "acme", "q", &info), 0);
	assert_int_equal(info.schedule.n, 3);
	assert_int_equal(info.schedule.wait_ms[1], 120000);
	assert_int_equal(registry_topic_get(reg, "acme", "q", &got),
	    REG_ENOTFOUND);

	/*
	 * Nothing cached (another instance, or a reload): the scheduler is
	 * told the topic cannot be read now, not that it is gone.  Recalled
	 * from its stored form (the journal's), it is served from then on.
	 */
	registry_flush_cache(reg);
	assert_int_equal(registry_topic_info(reg, "acme", "q", &info), -2);
	json = registry_topic_json(t);
	assert_int_equal(registry_topic_recall(reg, "acme", "q", "{", T0,
	    &info), -1);
	assert_int_equal(registry_topic_info(reg, "acme", "q", &info), -2);
	memset(&info, 0, sizeof(info));
	assert_int_equal(registry_topic_recall(reg, "acme", "q", json, T0,
	    &info), 0);
	assert_int_equal(info.schedule.n, 3);
	assert_int_equal(info.schedule.wait_ms[2], 600000);
	memset(&info, 0, sizeof(info));
	assert_int_equal(registry_topic_info(reg, "acme", "q", &info), 0);
	assert_int_equal(info.schedule.wait_ms[1], 120000);
	assert_int_equal(registry_topic_get(reg, "acme", "q", &got),
	    REG_ENOTFOUND);
	free(json);

	/* Rebuilt (the marker back) without it: the topic is gone. */
	freeReplyObject(redisfix_cmd(&test_redis, "SET rd:schema 1"));
	registry_cache_expire(reg);
	assert_int_equal(registry_topic_info(reg, "acme", "q", &info), -1);
	registry_topic_free(t);
	registry_free(reg);
}

/*
 * Redis unreachable: a topic the registry cached as missing before is not
 * gone for the scheduler (it may have been made since on another
 * instance), only not readable now; a topic it cached as found stands.
 */
static void
test_topic_info_unreachable(void **state)
{
	struct redisfix r2;
	struct registry *reg;
	struct registry_topic *t, *got = NULL;
	struct sched_topic_info info;

	(void)state;
	memset(&r2, 0, sizeof(r2));
	assert_int_equal(redisfix_start(&r2), 0);
	reg = registry_with_topic(&r2, "<0,2m>", &t);
	assert_int_equal(registry_topic_info(reg, "acme", "q", &info), 0);
	assert_int_equal(registry_topic_info(reg, "acme", "later", &info),
	    -1);

	redisfix_stop(&r2);
	registry_cache_expire(reg);
	assert_int_equal(registry_topic_info(reg, "acme", "q", &info), 0);
	assert_int_equal(info.schedule.wait_ms[1], 120000);
	assert_int_equal(registry_topic_info(reg, "acme", "later", &info),
	    -2);
	/* The API's lookup still answers the miss it has. */
	assert_int_equal(registry_topic_get(reg, "acme", "later", &got),
	    REG_ENOTFOUND);
	registry_topic_free(t);
	registry_free(reg);
}

static void
test_retention_purge(void **state)
{
	struct fx *f = *state;
	struct sched *s;
	struct sched_job *job;
	struct schedule_outcome ok = { SCHEDULE_OK, 0, -1 };
	struct schedule_outcome nack = { SCHEDULE_NACK, 0, -1 };
	char a[ID_LEN + 65], b[ID_LEN + 65], c[ID_LEN + 65];
	int64_t now = clock_wall_ms();
	int64_t want[SCHED_NSTATES] = { 0 };

	tinst_free(f->ti, 0);
	f->ti = tinst_new(&f->rec, "short", 1, 0, 0, 1000);
	wait_owned(f->ti, 16);
	s = f->ti->s;
	push(s, "once", now, 0, NULL, a);
	push(s, "once", now, 0, NULL, b);
	push(s, "once", now + 10000, 0, NULL, c);
	kick_wait(s);
	assert_int_equal(sched_reserve(s, T_TENANT, "once", 0, &job),
	    SCHED_OK);
	assert_int_equal(sched_report(s, T_TENANT, job->id, job->token, &ok,
	    NULL, NULL), SCHED_OK);
	sched_job_free(job);
	assert_int_equal(sched_reserve(s, T_TENANT, "once", 0, &job),
	    SCHED_OK);
	assert_int_equal(sched_report(s, T_TENANT, job->id, job->token, &nack,
	    NULL, NULL), SCHED_OK);
	sched_job_free(job);
	assert_int_equal(sched_cancel(s, T_TENANT, c), SCHED_OK);
	clock_advance_ms(999);
	kick_wait(s);
	want[SCHED_DELIVERED] = 1;
	want[SCHED_DEAD] = 1;
	want[SCHED_CANCELLED] = 1;
	expect_counts(s, "once", want);
	clock_advance_ms(2);
	kick_wait(s);
	want[SCHED_DELIVERED] = 0;
	want[SCHED_CANCELLED] = 0;
	expect_counts(s, "once", want);	/* dead stays */
	assert_int_equal(sched_get(s, T_TENANT, c, &job), SCHED_ENOTFOUND);
}

static void
test_restore_idempotent(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct sched_job j, *got;
	char id[ID_LEN + 1];
	int created = -1;
	int64_t want[SCHED_NSTATES] = { 0 };

	sched_new_id(s, "bk", id);
	memset(&j, 0, sizeof(j));
	snprintf(j.id, sizeof(j.id), "%s", id);
	j.tenant = T_TENANT;
	j.topic = "pull";
	j.bizkey = "bk";
	j.state = SCHED_IN_FLIGHT;	/* restored as retrying */
	j.attempts = 2;
	j.due_ms = clock_wall_ms() + 100;
	j.created_ms = clock_wall_ms() - 5;
	j.priority = 3;
	j.body = "hello";
	j.body_len = 5;
	j.schedule = "<0,1s,1s,1s>";
	assert_int_equal(sched_restore_job(s, &j, &created), SCHED_OK);
	assert_int_equal(created, 1);
	assert_int_equal(sched_restore_job(s, &j, &created), SCHED_OK);
	assert_int_equal(created, 0);
	assert_int_equal(sched_get(s, T_TENANT, id, &got), SCHED_OK);
	assert_int_equal(got->state, SCHED_RETRYING);
	assert_int_equal(got->attempts, 2);
	assert_int_equal(got->due_ms, j.due_ms);
	assert_int_equal(got->created_ms, j.created_ms);
	assert_int_equal(got->priority, 3);
	assert_string_equal(got->bizkey, "bk");
	assert_memory_equal(got->body, "hello", 5);
	sched_job_free(got);
	want[SCHED_RETRYING] = 1;
	expect_counts(s, "pull", want);
	/* The bizkey index came back too. */
	{
		struct sched_push p;
		struct sched_push_result res;
		char nid[ID_LEN + 1];

		sched_new_id(s, "bk", nid);
		memset(&p, 0, sizeof(p));
		p.tenant = T_TENANT;
		p.topic = "pull";
		p.id = nid;
		p.bizkey = "bk";
		p.run_at_ms = clock_wall_ms();
		assert_int_equal(sched_push(s, &p, &res), SCHED_OK);
		assert_int_equal(res.deduplicated, 1);
		assert_string_equal(res.id, id);
	}
	/* A dead job restores into the dead letters. */
	sched_new_id(s, NULL, id);
	snprintf(j.id, sizeof(j.id), "%s", id);
	j.bizkey = NULL;
	j.state = SCHED_DEAD;
	assert_int_equal(sched_restore_job(s, &j, &created), SCHED_OK);
	assert_int_equal(created, 1);
	want[SCHED_DEAD] = 1;
	expect_counts(s, "pull", want);
	clock_advance_ms(100);
	kick_wait(s);
	want[SCHED_RETRYING] = 0;
	want[SCHED_READY] = 1;
	expect_counts(s, "pull", want);
}

static void
test_noscript_reload(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	struct sched_job *job;
	redisReply *r;
	char a[ID_LEN + 65], b[ID_LEN + 65];
	int64_t now = clock_wall_ms();

	push(s, "pull", now, 0, NULL, a);
	r = redisfix_cmd(&test_redis, "SCRIPT FLUSH");
	assert_non_null(r);
	freeReplyObject(r);
	push(s, "pull", now, 1, NULL, b);
	r = redisfix_cmd(&test_redis, "SCRIPT FLUSH");
	freeReplyObject(r);
	kick_wait(s);
	assert_int_equal(sched_reserve(s, T_TENANT, "pull", 0, &job),
	    SCHED_OK);
	assert_string_equal(job->id, b);
	sched_job_free(job);
}

static const char *refusal_want;

static int
not_ready_cond(void *arg)
{
	char why[256];

	return !sched_ready(arg, why, sizeof(why)) &&
	    strstr(why, refusal_want) != NULL;
}

static void
test_schema_refusal(void **state)
{
	struct fx *f = *state;
	struct sched_push p;
	struct sched_push_result res;
	struct tinst *ti;
	redisReply *r;
	char why[256], id[ID_LEN + 1];

	r = redisfix_cmd(&test_redis, "HSET rd:schema version 99");
	freeReplyObject(r);
	ti = tinst_new(&f->rec, "refused", 1, 0, 0, 0);
	refusal_want = "schema version 99";
	assert_true(wait_for(not_ready_cond, ti->s, T_DEADLINE_MS));
	assert_int_equal(sched_ready(ti->s, why, sizeof(why)), 0);
	memset(&p, 0, sizeof(p));
	sched_new_id(ti->s, NULL, id);
	p.tenant = T_TENANT;
	p.topic = "pull";
	p.id = id;
	assert_int_equal(sched_push(ti->s, &p, &res), SCHED_EUNAVAIL);
	tinst_free(ti, 0);
	/* The same for a shard count that changed. */
	r = redisfix_cmd(&test_redis, "HSET rd:schema version 1 shards 8");
	freeReplyObject(r);
	ti = tinst_new(&f->rec, "refused2", 1, 0, 0, 0);
	refusal_want = "8 shards";
	assert_true(wait_for(not_ready_cond, ti->s, T_DEADLINE_MS));
	tinst_free(ti, 0);
	/* Version 1 is read as it is, and its marker raised to 2. */
	r = redisfix_cmd(&test_redis, "HSET rd:schema version 1 shards 16");
	freeReplyObject(r);
	ti = tinst_new(&f->rec, "upgrade", 1, 0, 0, 0);
	wait_owned(ti, 1);
	r = redisfix_cmd(&test_redis, "HGET rd:schema version");
	assert_string_equal(r->str, "2");
	freeReplyObject(r);
	tinst_free(ti, 0);
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

static void
test_redis_lost(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	char a[ID_LEN + 65];
	redisReply *r;

	push(s, "pull", clock_wall_ms(), 0, NULL, a);
	f->rec.mark_on_lost = 1;
	flush_redis(&test_redis);
	kick_wait(s);
	assert_true(wait_for(lost_cond, &f->rec, T_DEADLINE_MS));
	assert_int_equal(f->rec.nlost, 1);
	r = redisfix_cmd(&test_redis, "HGET rd:schema version");
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STRING);
	freeReplyObject(r);
	kick_wait(s);
	assert_int_equal(f->rec.nlost, 1);
	/* Pushes work again, and register the tenant again. */
	push(s, "pull", clock_wall_ms(), 0, NULL, a);
	r = redisfix_cmd(&test_redis, "SISMEMBER rd:tenants %s", T_TENANT);
	assert_int_equal(r->integer, 1);
	freeReplyObject(r);
}

static uint64_t
nlost(struct fx *f)
{
	uint64_t n;

	pthread_mutex_lock(&f->rec.lock);
	n = f->rec.nlost;
	pthread_mutex_unlock(&f->rec.lock);
	return n;
}

/*
 * Until the marker is written again, every check that finds it gone tells
 * the redis_lost hook, not only the first: a report of an old loss that
 * arrives after its rebuild must not hide the next loss.
 */
static void
test_redis_lost_told_until_marked(void **state)
{
	struct fx *f = *state;
	struct sched *s = f->ti->s;
	uint64_t n;

	f->rec.mark_on_lost = 0;
	flush_redis(&test_redis);
	kick_wait(s);
	assert_true(wait_for(lost_cond, &f->rec, T_DEADLINE_MS));
	n = nlost(f);
	kick_wait(s);
	assert_true(nlost(f) > n);
	assert_int_equal(sched_mark_schema(s), SCHED_OK);
	kick_wait(s);
	n = nlost(f);
	kick_wait(s);
	assert_true(nlost(f) == n);
	/* Lost again: told again. */
	flush_redis(&test_redis);
	kick_wait(s);
	assert_true(nlost(f) > n);
}

/* Slots as CLUSTER KEYSLOT of Redis 7 answers them. */
static void
test_cluster_slot(void **state)
{
	static const struct {
		const char	*key;
		int		 slot;
	} rows[] = {
		{ "somekey", 11058 },
		{ "foo{hash_tag}", 2515 },
		{ "foo", 12182 },
		{ "foo{}{bar}", 8363 },		/* empty tag: the whole key */
		{ "foo{{bar}}zap", 4015 },	/* the tag is "{bar" */
		{ "foo{bar}{zap}", 5061 },	/* the first tag only */
		{ "rd:{acme:7}:j", 4499 },
		{ "{", 4092 },
		{ "a{b", 13340 },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		assert_int_equal(sched_key_slot(rows[i].key,
		    strlen(rows[i].key)), rows[i].slot);
	/* Every key of a shard is on its tag's slot. */
	assert_int_equal(sched_key_slot("rd:{acme:7}:d:orders", 20),
	    sched_key_slot("acme:7", 6));
}

/* Key names, and a name too long cut where snprintf would cut it. */
/* A tenant's settings as the journal keeps them: older text lacks
 * max_in_flight (no override), a bad value is none. */
static void
test_tenant_settings(void **state)
{
	static const struct {
		const char	*json;
		int		 rc;
		int64_t		 maxp, maxf;
	} rows[] = {
		{ "{\"max_pending\":50,\"max_in_flight\":3}", 0, 50, 3 },
		{ "{\"max_pending\":50}", 0, 50, 0 },	/* written before */
		{ "{\"max_in_flight\":7}", 0, 0, 7 },
		{ "{\"max_pending\":0,\"max_in_flight\":0}", 0, 0, 0 },
		{ "{\"max_in_flight\":-2}", 0, 0, 0 },
		{ "{\"max_in_flight\":\"3\"}", 0, 0, 0 },
		{ "{}", 0, 0, 0 },
		{ "", 0, 0, 0 },
		{ NULL, 0, 0, 0 },
		{ "[1]", -1, 0, 0 },
		{ "{", -1, 0, 0 },
	};
	int64_t maxp, maxf;
	char *j;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		maxp = maxf = 99;
		assert_int_equal(registry_tenant_settings_parse(rows[i].json,
		    &maxp, &maxf), rows[i].rc);
		assert_int_equal(maxp, rows[i].maxp);
		assert_int_equal(maxf, rows[i].maxf);
	}
	j = registry_tenant_settings_json(40, 4);
	assert_int_equal(registry_tenant_settings_parse(j, &maxp, &maxf), 0);
	assert_int_equal(maxp, 40);
	assert_int_equal(maxf, 4);
	free(j);
}

static void
test_key_names(void **state)
{
	static const struct {
		const char	*tenant, *suffix, *topic;
		int		 shard;
		const char	*key;
	} rows[] = {
		{ "acme", "j", NULL, 0, "rd:{acme:0}:j" },
		{ "acme", "d", "orders", 7, "rd:{acme:7}:d:orders" },
		{ "t-1", "r", "q", 15, "rd:{t-1:15}:r:q" },
		{ "t", "c", NULL, 1023, "rd:{t:1023}:c" },
		{ "t", "c", NULL, -3, "rd:{t:-3}:c" },
	};
	char k[SCHED_KEY_MAX], want[600], ten[65], top[400];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		sched_key(k, rows[i].tenant, rows[i].shard, rows[i].suffix,
		    rows[i].topic);
		assert_string_equal(k, rows[i].key);
	}
	memset(ten, 'a', sizeof(ten) - 1);
	ten[sizeof(ten) - 1] = '\0';
	memset(top, 'b', sizeof(top) - 1);
	top[sizeof(top) - 1] = '\0';
	sched_key(k, ten, 1023, "r", top);
	snprintf(want, sizeof(want), "rd:{%s:%d}:%s:%s", ten, 1023, "r", top);
	want[SCHED_KEY_MAX - 1] = '\0';	/* where snprintf would cut */
	assert_int_equal(strlen(k), SCHED_KEY_MAX - 1);
	assert_string_equal(k, want);
	top[128] = '\0';			/* the longest topic: whole */
	sched_key(k, ten, 1023, "r", top);
	snprintf(want, sizeof(want), "rd:{%s:%d}:%s:%s", ten, 1023, "r", top);
	assert_int_equal(strlen(k), strlen(want));
	assert_string_equal(k, want);
}

/* A command's RESP byte for byte as hiredis formats it. */
static void
test_format_argv(void **state)
{
	static const char bin[] = { 'a', '\0', '\r', '\n', 'b' };
	static const struct {
		int		 argc;
		const char	*argv[4];
		size_t		 lens[4];	/* all 0: by strlen */
	} rows[] = {
		{ 1, { "PING" }, { 0 } },
		{ 3, { "SET", "k", "" }, { 0 } },
		{ 2, { "GET", bin }, { 3, sizeof(bin) } },
		{ 4, { "EVALSHA", "0123456789abcdef", "1", "rd:{t:7}:j" },
		    { 0 } },
	};
	char big[12345], *mine, *theirs;
	const char *argv[2];
	size_t i, n, lens[2];
	int len;

	(void)state;
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const size_t *l = rows[i].lens[0] != 0 ? rows[i].lens : NULL;
		const char *av[4];

		memcpy(av, rows[i].argv, sizeof(av));
		n = sched_format_argv(&mine, rows[i].argc, av, l);
		len = redisFormatCommandArgv(&theirs, rows[i].argc, av, l);
		assert_int_equal(n, (size_t)len);
		assert_memory_equal(mine, theirs, n);
		free(mine);
		free(theirs);
	}
	memset(big, 'x', sizeof(big));
	argv[0] = "SET";
	argv[1] = big;
	lens[0] = 3;
	lens[1] = sizeof(big);
	n = sched_format_argv(&mine, 2, argv, lens);
	len = redisFormatCommandArgv(&theirs, 2, argv, lens);
	assert_int_equal(n, (size_t)len);
	assert_memory_equal(mine, theirs, n);
	free(mine);
	free(theirs);
}

static void
test_cluster_redirect(void **state)
{
	static const struct {
		const char	*err;
		int		 ok, ask, slot, port;
		const char	*host;
	} rows[] = {
		{ "MOVED 3999 127.0.0.1:6381", 1, 0, 3999, 6381, "127.0.0.1" },
		{ "ASK 0 10.0.0.2:7000", 1, 1, 0, 7000, "10.0.0.2" },
		{ "MOVED 16383 ::1:7001", 1, 0, 16383, 7001, "::1" },
		{ "MOVED 16384 h:1", 0, 0, 0, 0, NULL },	/* no slot */
		{ "MOVED 12 h:0", 0, 0, 0, 0, NULL },
		{ "MOVED 12 h:70000", 0, 0, 0, 0, NULL },
		{ "MOVED 12 :7000", 0, 0, 0, 0, NULL },
		{ "MOVED 12 h", 0, 0, 0, 0, NULL },
		{ "MOVED -1 h:1", 0, 0, 0, 0, NULL },
		{ "MOVED x h:1", 0, 0, 0, 0, NULL },
		{ "MOVED 12", 0, 0, 0, 0, NULL },
		{ "ASKING", 0, 0, 0, 0, NULL },
		{ "NOSCRIPT No matching script", 0, 0, 0, 0, NULL },
		{ "CLUSTERDOWN The cluster is down", 0, 0, 0, 0, NULL },
	};
	struct sched_redirect rd;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		memset(&rd, 0, sizeof(rd));
		assert_int_equal(sched_redirect_parse(rows[i].err,
		    strlen(rows[i].err), &rd), rows[i].ok);
		if (!rows[i].ok)
			continue;
		assert_int_equal(rd.ask, rows[i].ask);
		assert_int_equal(rd.slot, rows[i].slot);
		assert_int_equal(rd.port, rows[i].port);
		assert_string_equal(rd.host, rows[i].host);
	}
}

/* A line of INFO's text by its whole name, never a longer name's. */
static void
test_info_field(void **state)
{
	static const char info[] = "# Memory\r\nused_memory:1024\r\n"
	    "maxmemory_human:1.00G\r\nmaxmemory:1073741824\r\n"
	    "maxmemory_policy:allkeys-lru\r\nlast:x";
	char v[8];

	(void)state;
	assert_int_equal(sched_info_field(info, "maxmemory", v, sizeof(v)),
	    0);
	assert_string_equal(v, "1073741");		/* cut to fit */
	assert_int_equal(sched_info_field(info, "memory", v, sizeof(v)), -1);
	assert_int_equal(sched_info_field(info, "used_memory", v, sizeof(v)),
	    0);
	assert_string_equal(v, "1024");
	assert_int_equal(sched_info_field(info, "last", v, sizeof(v)), 0);
	assert_string_equal(v, "x");			/* no line end */
	assert_int_equal(sched_info_field(info, "# Memory", v, sizeof(v)),
	    -1);
	assert_int_equal(sched_info_field("run_id:ab\r\n", "run_id", v,
	    sizeof(v)), 0);				/* the first line */
	assert_string_equal(v, "ab");
}

static void
test_conn_url(void **state)
{
	struct redis_target t;
	char why[128];

	(void)state;
	assert_int_equal(sched_redis_url_parse("redis://:s%40cret@h:7000/3",
	    &t, why, sizeof(why)), 0);
	assert_string_equal(t.host, "h");
	assert_int_equal(t.port, 7000);
	assert_string_equal(t.password, "s@cret");
	assert_int_equal(t.db, 3);
	assert_int_equal(sched_redis_url_parse("redis://u:p@[::1]/2", &t, why,
	    sizeof(why)), 0);
	assert_string_equal(t.host, "::1");
	assert_string_equal(t.username, "u");
	assert_int_equal(t.port, 6379);
	assert_int_equal(sched_redis_url_parse("unix:///run/r.sock?db=4", &t,
	    why, sizeof(why)), 0);
	assert_string_equal(t.path, "/run/r.sock");
	assert_int_equal(t.db, 4);
	assert_int_equal(sched_redis_url_parse("redis://h:0", &t, why,
	    sizeof(why)), -1);
	assert_int_equal(sched_redis_url_parse("http://h", &t, why,
	    sizeof(why)), -1);
	assert_int_equal(sched_redis_url_parse("redis://h/x", &t, why,
	    sizeof(why)), -1);
	assert_int_equal(sched_redis_url_parse("unix://rel", &t, why,
	    sizeof(why)), -1);
}

static void
test_conn_seeds(void **state)
{
	struct redis_target t[SCHED_SEEDS_MAX];
	static const struct {
		const char	*list;
		const char	*why;
	} bad[] = {
		{ "", "empty Redis URL" },
		{ "redis://a:1,", "seed 2 of the list: empty" },
		{ ",redis://a:1", "seed 1 of the list: empty" },
		{ "redis://a:1,,redis://b:2", "seed 2 of the list: empty" },
		{ "redis://a:1, ", "seed 2 of the list: empty" },
		{ "redis://a:1,redis://b:0", "seed 2 of the list: bad port" },
		{ "redis://a:1,http://b", "seed 2 of the list: Redis URL must "
		    "start with redis:// or unix://" },
		{ "redis://a:1,rediss://b", "seed 2 of the list: TLS "
		    "(rediss://) is not supported" },
		{ "redis://a:1,unix:///r.sock", "seed 2 of the list: a list "
		    "of seeds is for a Redis Cluster: redis:// only" },
		{ "redis://a:1/2,redis://b", "seed 1 of the list: a Redis "
		    "Cluster has no database but 0" },
		{ "redis://:p@a,redis://:q@b", "seed 2 of the list: every "
		    "seed needs the same user and password" },
		{ "redis://u:p@a,redis://:p@b", "seed 2 of the list: every "
		    "seed needs the same user and password" },
		{ "redis://h:0", "bad port" },
	};
	char why[256], many[2048];
	size_t i, n;

	(void)state;
	/* One URL: as sched_redis_url_parse, a database and unix:// too. */
	assert_int_equal(sched_redis_seeds_parse("redis://:p%2Cw@h:7000/3", t,
	    SCHED_SEEDS_MAX, why, sizeof(why)), 1);
	assert_string_equal(t[0].password, "p,w");
	assert_int_equal(t[0].db, 3);
	assert_int_equal(sched_redis_seeds_parse("unix:///r.sock?db=2", t,
	    SCHED_SEEDS_MAX, why, sizeof(why)), 1);
	assert_string_equal(t[0].path, "/r.sock");
	/* A list, blanks around the commas, IPv6, the same credentials. */
	assert_int_equal(sched_redis_seeds_parse("redis://u:p@a:7001 ,\t"
	    "redis://u:p@[::1]:7002/0, redis://u:p@c", t, SCHED_SEEDS_MAX,
	    why, sizeof(why)), 3);
	assert_string_equal(t[0].host, "a");
	assert_int_equal(t[0].port, 7001);
	assert_string_equal(t[1].host, "::1");
	assert_int_equal(t[1].port, 7002);
	assert_string_equal(t[2].host, "c");
	assert_int_equal(t[2].port, 6379);
	assert_string_equal(t[2].username, "u");
	assert_string_equal(t[2].password, "p");
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why[0] = '\0';
		assert_int_equal(sched_redis_seeds_parse(bad[i].list, t,
		    SCHED_SEEDS_MAX, why, sizeof(why)), -1);
		assert_string_equal(why, bad[i].why);
	}
	/* At most max seeds. */
	for (i = 0, n = 0; i <= SCHED_SEEDS_MAX; i++)
		n += (size_t)snprintf(many + n, sizeof(many) - n,
		    "%sredis://h:%zu", i > 0 ? "," : "", 7000 + i);
	assert_int_equal(sched_redis_seeds_parse(many, t, SCHED_SEEDS_MAX,
	    why, sizeof(why)), -1);
	assert_string_equal(why, "more than 16 seeds");
	*strrchr(many, ',') = '\0';
	assert_int_equal(sched_redis_seeds_parse(many, t, SCHED_SEEDS_MAX,
	    why, sizeof(why)), SCHED_SEEDS_MAX);
	assert_int_equal(t[SCHED_SEEDS_MAX - 1].port, 7015);
}

/* A pool of the test's Redis, its target in *t. */
static struct sched_pool *
test_pool(struct redis_target *t)
{
	char why[256];

	assert_int_equal(sched_redis_url_parse(test_redis.url, t, why,
	    sizeof(why)), 0);
	return sched_pool_new(t, 1, 2000, 4);
}

/*
 * retryd_redis_errors_total counts the scheduler's failures: a connection
 * not made, an error reply to a routed command, a context given back
 * broken; a good command counts nothing.
 */
static void
test_redis_errors_counted(void **state)
{
	struct redis_target t;
	struct sched_pool *p;
	redisContext *c;
	redisReply *r;
	uint64_t e0;
	char why[256];
	int broken = 0;

	(void)state;
	p = test_pool(&t);
	assert_non_null(c = sched_pool_get(p));
	e0 = sched_redis_errors();
	r = sched_pool_command(p, c, &broken, NULL, "PING");
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STATUS);
	freeReplyObject(r);
	assert_true(sched_redis_errors() == e0);
	r = sched_pool_command(p, c, &broken, NULL, "NO-SUCH-COMMAND");
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_ERROR);
	freeReplyObject(r);
	assert_int_equal(broken, 0);
	assert_true(sched_redis_errors() == e0 + 1);
	sched_pool_put(p, c, 1);
	assert_true(sched_redis_errors() == e0 + 2);
	sched_pool_free(p);

	t.port = 1;			/* nobody listens there */
	assert_null(sched_redis_connect(&t, 500, why, sizeof(why)));
	assert_true(sched_redis_errors() == e0 + 3);
}

/*
 * An error reply inside a pipeline counts once, on a single Redis as on a
 * cluster (a script's error here); good replies count nothing, nor does
 * NOSCRIPT, which the callers of pipelined EVALSHA repair by loading the
 * script and sending the call again.
 */
static void
test_redis_errors_pipelined(void **state)
{
	struct redis_target t;
	struct sched_pool *p;
	struct sched_pipe *q;
	redisContext *c;
	redisReply *r;
	uint64_t e0;
	void *rep;
	int i;
	static const int want[] = { REDIS_REPLY_STATUS, REDIS_REPLY_ERROR,
	    REDIS_REPLY_ERROR, REDIS_REPLY_INTEGER };

	(void)state;
	p = test_pool(&t);
	assert_non_null(c = sched_pool_get(p));
	assert_int_equal(sched_pool_cluster(p), 0);
	e0 = sched_redis_errors();
	q = sched_pipe_new(p, c);
	assert_int_equal(sched_pipe_append(q, NULL, "PING"), 0);
	assert_int_equal(sched_pipe_append(q, "{x}k", "EVAL %s 1 %s",
	    "return redis.error_reply('boom')", "{x}k"), 0);
	assert_int_equal(sched_pipe_append(q, "{x}k", "EVALSHA %s 1 %s",
	    "0000000000000000000000000000000000000000", "{x}k"), 0);
	assert_int_equal(sched_pipe_append(q, "{x}k", "EVAL %s 1 %s",
	    "return 1", "{x}k"), 0);
	for (i = 0; i < 4; i++) {
		assert_int_equal(sched_pipe_getreply(q, &rep), REDIS_OK);
		r = rep;
		assert_int_equal(r->type, want[i]);
		if (i == 1)
			assert_non_null(strstr(r->str, "boom"));
		if (i == 2)
			assert_memory_equal(r->str, "NOSCRIPT", 8);
		freeReplyObject(r);
	}
	sched_pipe_free(q);
	assert_true(sched_redis_errors() == e0 + 1);
	sched_pool_put(p, c, 0);
	assert_true(sched_redis_errors() == e0 + 1);
	sched_pool_free(p);
}

/*
 * A pooled context whose Redis went away while it sat idle (restarted, its
 * data lost) is not handed out: the next command runs on a new one instead
 * of failing (an instance with nothing to ask while another rebuilt
 * Redis lost delivery outcomes so).  Restarts the shared server: last.
 */
static void
test_pool_idle_after_restart(void **state)
{
	struct redis_target t;
	struct sched_pool *p;
	redisContext *c, *d;
	redisReply *r;
	int broken = 0;

	(void)state;
	p = test_pool(&t);
	assert_non_null(c = sched_pool_get(p));
	assert_non_null(d = sched_pool_get(p));
	sched_pool_put(p, c, 0);
	sched_pool_put(p, d, 0);
	assert_int_equal(redisfix_restart(&test_redis, 0), 0);
	assert_non_null(c = sched_pool_get(p));
	r = sched_pool_command(p, c, &broken, NULL, "PING");
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STATUS);
	freeReplyObject(r);
	assert_int_equal(broken, 0);
	sched_pool_put(p, c, 0);
	sched_pool_free(p);
}

/*
 * A promote call moves at most 256 KiB of records, at least one job:
 * records are copied whole to change their state byte, and a timer pass
 * waits for every slot's call, so a burst of large bodies held up every
 * other tenant's due jobs for as long as its bytes took.  Small records
 * still go a whole batch a call.  One shard, a scheduler not started (no
 * timer of its own to promote meanwhile).
 */
static void
test_promote_bytes(void **state)
{
	struct sched_config cfg;
	struct sched_hooks h;
	struct sched_push p;
	struct sched_push_result res;
	struct sched *s;
	redisContext *c;
	char why[256], id[ID_LEN + 1], *body;
	const char *topic;
	int64_t head, due = clock_wall_ms() - 1;
	int i, k, moved, more, broken = 0;
	static const size_t sizes[] = { 100000, 300000, 100 };
	static const int want[][4] = {
		{ 2, 2, 1, 0 },		/* 2.6 fit: two a call */
		{ 1, 1, 1, 0 },		/* over it alone: one a call */
		{ 5, 0, 0, 0 },		/* small: all at once */
	};

	(void)state;
	flush_redis(&test_redis);
	memset(&cfg, 0, sizeof(cfg));
	cfg.redis_url = test_redis.url;
	cfg.redis_timeout_ms = 2000;
	cfg.shards = 1;
	cfg.batch = 100;
	cfg.instance = "bytes";
	cfg.fake_clock = 1;
	memset(&h, 0, sizeof(h));
	assert_non_null(s = sched_new(&cfg, &h, why, sizeof(why)));
	body = xmalloc(300000);
	memset(body, 'x', 300000);
	for (k = 0; k < 3; k++) {
		topic = k == 0 ? "big" : k == 1 ? "huge" : "small";
		for (i = 0; i < (k == 1 ? 3 : 5); i++) {
			memset(&p, 0, sizeof(p));
			sched_new_id(s, NULL, id);
			p.tenant = T_TENANT;
			p.topic = topic;
			p.id = id;
			p.body = body;
			p.body_len = sizes[k];
			p.run_at_ms = due;
			assert_int_equal(sched_push(s, &p, &res), SCHED_OK);
		}
		assert_non_null(c = sched_pool_get(sched_pool(s)));
		for (i = 0; i < 4; i++) {
			assert_int_equal(sched_st_promote(s, c, T_TENANT, 0,
			    topic, &moved, &more, &head, &broken), SCHED_OK);
			assert_int_equal(moved, want[k][i]);
			assert_int_equal(more, want[k][i + 1 < 4 ? i + 1 : 3] >
			    0);
		}
		sched_pool_put(sched_pool(s), c, broken);
	}
	free(body);
	sched_free(s);
}

/* ---- burst and memory --------------------------------------------------- */

static long long
info_memory(const char *field)
{
	redisReply *r = redisfix_cmd(&test_redis, "INFO memory");
	char key[64];
	const char *p;
	long long v;

	assert_non_null(r);
	snprintf(key, sizeof(key), "\r\n%s:", field);
	p = strstr(r->str, key);
	assert_non_null(p);
	v = strtoll(p + strlen(key), NULL, 10);
	freeReplyObject(r);
	return v;
}

static void
test_memory_per_job(void **state)
{
	struct fx *f = *state;
	long long used0, used1, data0, data1;
	int n = 100000;
	double per, perdata;

	used0 = info_memory("used_memory");
	data0 = info_memory("used_memory_dataset");
	push_many(f->ti->s, "bench", clock_wall_ms() + 3600000, 0, n, 60);
	used1 = info_memory("used_memory");
	data1 = info_memory("used_memory_dataset");
	per = (double)(used1 - used0) / n;
	perdata = (double)(data1 - data0) / n;
	print_message("# redis memory per pending job, 60-byte body, 100k "
	    "jobs: %.1f bytes (dataset: %.1f)\n", per, perdata);
	/*
	 * The goal is 250; the floor of one hash entry plus one sorted-set
	 * entry is about that (REDIS-SCHEMA.md, "Memory").  This catches a
	 * record growing into the next allocation size (+16 bytes).
	 */
	assert_true(perdata <= 256.0);
}

static int
burst_cond(void *arg)
{
	int64_t c[SCHED_NSTATES];

	return sched_counts(arg, T_TENANT, "pull", c) == SCHED_OK &&
	    c[SCHED_READY] == 100000;
}

/* Compares two long longs, for qsort. */
static int
cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return (x > y) - (x < y);
}

/* Whether SLOWLOG's argument i of entry e exists and ends with suffix. */
static int
slow_arg_has(const redisReply *e, size_t i, const char *what)
{
	const redisReply *a = e->element[3];

	return i < a->elements && a->element[i]->type == REDIS_REPLY_STRING &&
	    strstr(a->element[i]->str, what) != NULL;
}

/*
 * A burst of 100k jobs due at one instant is promoted by many short script
 * calls.  SLOWLOG, told to log every command, shows each promote call
 * (EVALSHA sha 6 pool delays heads ready topics counts now topic batch
 * tag): each one asks for at most scheduler.batch (100) jobs, so there are
 * at least 1000 of them, and the median call takes well under a few ms.
 * The bound is the work per call, which the arguments prove; SLOWLOG's
 * durations are wall time, and on a busy machine some calls are stretched
 * by the scheduler taking Redis's CPU mid-call, so the longest is printed,
 * and the median (which preemption of a few calls cannot move) is checked.
 */
static void
test_burst_bounded(void **state)
{
	struct fx *f = *state;
	struct sched *s;
	redisReply *r;
	long long *us;
	size_t i, n = 0;

	/* Leave the CPU to Redis: no transition hook work in this test. */
	tinst_free(f->ti, 0);
	flush_redis(&test_redis);
	f->rec.no_transition = 1;
	f->ti = tinst_new(&f->rec, "burst", 1, 0, 0, 0);
	wait_owned(f->ti, 16);
	s = f->ti->s;
	push_many(s, "pull", clock_wall_ms() + 10, 0, 100000, 20);
	freeReplyObject(redisfix_cmd(&test_redis,
	    "CONFIG SET slowlog-max-len 200000"));
	freeReplyObject(redisfix_cmd(&test_redis,
	    "CONFIG SET slowlog-log-slower-than 0"));
	freeReplyObject(redisfix_cmd(&test_redis, "SLOWLOG RESET"));
	clock_advance_ms(10);
	sched_kick(s);
	/* Poll gently: the test must not be what slows Redis down. */
	for (i = 0; i < 3000 && !burst_cond(s); i++) {
		struct timespec ts = { 0, 20 * 1000000L };

		nanosleep(&ts, NULL);
	}
	freeReplyObject(redisfix_cmd(&test_redis,
	    "CONFIG SET slowlog-log-slower-than 10000"));
	assert_true(burst_cond(s));
	r = redisfix_cmd(&test_redis, "SLOWLOG GET 200000");
	freeReplyObject(redisfix_cmd(&test_redis,
	    "CONFIG SET slowlog-max-len 128"));
	assert_non_null(r);
	assert_true(r->elements < 200000);	/* none pushed out */
	us = xcalloc(r->elements + 1, sizeof(*us));
	for (i = 0; i < r->elements; i++) {
		redisReply *e = r->element[i];

		if (e->elements < 4 || e->element[3]->elements < 13 ||
		    strcasecmp(e->element[3]->element[0]->str,
		    "evalsha") != 0 ||
		    !slow_arg_has(e, 3, ":j") || !slow_arg_has(e, 4, ":d:") ||
		    !slow_arg_has(e, 6, ":r:"))
			continue;
		/* ARGV[3], the batch: at most scheduler.batch jobs. */
		assert_true(strtol(e->element[3]->element[11]->str, NULL,
		    10) <= 100);
		us[n++] = e->element[2]->integer;
	}
	freeReplyObject(r);
	qsort(us, n, sizeof(*us), cmp_ll);
	print_message("# burst: %zu promote calls, median %lld us, p99 %lld "
	    "us, longest %lld us\n", n, n ? us[n / 2] : 0,
	    n ? us[n * 99 / 100] : 0, n ? us[n - 1] : 0);
	assert_true(n >= 1000);
	assert_true(us[n / 2] < 3000);
	free(us);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_conn_url),
		cmocka_unit_test(test_conn_seeds),
		cmocka_unit_test(test_cluster_slot),
		cmocka_unit_test(test_key_names),
		cmocka_unit_test(test_tenant_settings),
		cmocka_unit_test(test_format_argv),
		cmocka_unit_test(test_cluster_redirect),
		cmocka_unit_test(test_info_field),
		/* Real time first: the fake clock cannot be turned off. */
		cmocka_unit_test_setup_teardown(test_on_time, msetup,
		    mteardown),
		cmocka_unit_test_setup_teardown(test_two_instances, msetup,
		    mteardown),
		cmocka_unit_test_setup_teardown(test_kill_one, msetup,
		    mteardown),
		cmocka_unit_test_setup_teardown(test_redis_restart, msetup,
		    mteardown),
		cmocka_unit_test_setup_teardown(test_lost_wakeup, msetup,
		    mteardown),
		cmocka_unit_test_setup_teardown(test_push_get_roundtrip,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_get_many, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_push_many_client_ids,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_id_shards, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_never_early_and_order,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_reserve_many, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_reserve_many_one_shard,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_reserve_many_ties,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_reserve_heads_forgotten,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_reserve_heads_every_shard,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_push_never_early,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_bizkey_dedup, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_push_many, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_restore_lock, setup,
		    teardown),
		cmocka_unit_test(test_topic_info_while_owed),
		cmocka_unit_test(test_topic_info_unreachable),
		cmocka_unit_test_setup_teardown(test_batch_max, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_push_many_bounded, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_cancel_reschedule,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_stale_ack_and_expiry,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_nack_dead_retry_redrive,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_outcome_topic_unsure,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_restore_bizkey_taken,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_versions, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_quiesce, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_push_mode_outcomes,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_capacity_and_release,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_tenant_capacity_shared,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_room_shards_take_turns,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_report_many, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_retention_purge, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_restore_idempotent,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(test_noscript_reload, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_schema_refusal, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_redis_lost, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(
		    test_redis_lost_told_until_marked, setup, teardown),
		/* No instance of its own: nothing else counts meanwhile. */
		cmocka_unit_test(test_redis_errors_counted),
		cmocka_unit_test(test_redis_errors_pipelined),
		cmocka_unit_test_setup_teardown(test_memory_per_job, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_burst_bounded, setup,
		    teardown),
		cmocka_unit_test(test_promote_bytes),
		cmocka_unit_test(test_pool_idle_after_restart),
	};

	log_init("test_sched", LOG_LVL_WARN);
	return cmocka_run_group_tests_name("scheduler", tests, group_setup,
	    group_teardown);
}
