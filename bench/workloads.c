/*
 * workloads.c - the six workloads of retryd-bench (bench/README.md says
 * what each measures and why).
 *
 * Key decision: the figures come from the receiver's clock, never from
 * retryd's own metrics.  A job's body carries its sequence number and its
 * due time, the receiver stamps each arrival with CLOCK_REALTIME, and the
 * checks here compare the two: lateness is arrival minus due time, "never
 * early" means no negative lateness, "exactly once" means every sequence
 * number arrived once.  Every wait is bounded by --wait and polls the
 * receiver's count; nothing sleeps in place of a condition.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "util/buf.h"
#include "util/xmalloc.h"

#define POLL_MS		50
#define GRACE_MS	500	/* after the last expected arrival */
#define ONCE_SECONDS	60	/* W2's worst lateness, second by second */

static int64_t
wall_ms(void)
{
	return hc_wall_us() / 1000;
}

/*
 * Poll the receiver until tag has want records or the wall clock passes
 * deadline_ms; the count seen last.
 */
static int64_t
wait_count(struct bench *b, int tag, int64_t want, int64_t deadline_ms)
{
	int64_t n = -1;
	int i;

	for (i = 0; i < 1000000; i++) {
		n = bench_rcv_count(b, tag);
		if (n >= want || wall_ms() >= deadline_ms)
			break;
		bench_sleep_ms(POLL_MS);
	}
	return n;
}

/* Redis's own time per job since the last reset, as figures prefix_*. */
static void
jset_redis_time(struct bench *b, struct json_object *o, const char *prefix,
    int64_t jobs, int reset)
{
	int64_t usec, calls;
	char k[64], top[256];

	if (jobs <= 0 || bench_redis_cmdtime(b, reset, &usec, &calls, top,
	    sizeof(top)) == -1)
		return;
	snprintf(k, sizeof(k), "%s_redis_us_per_job", prefix);
	jset_dbl(o, k, (double)usec / (double)jobs);
	snprintf(k, sizeof(k), "%s_redis_calls_per_job", prefix);
	jset_dbl(o, k, (double)calls / (double)jobs);
	snprintf(k, sizeof(k), "%s_redis_top", prefix);
	jset_str(o, k, top);
}

static void
redis_time_reset(struct bench *b)
{
	int64_t usec, calls;

	bench_redis_cmdtime(b, 1, &usec, &calls, NULL, 0);
}

/*
 * Say what the push did not get in: refused jobs are a figure (the daemon
 * said "not now" under load), failed ones fail the workload's checks.
 */
static void
warn_push(struct bench *b, const char *name, const struct push_spec *s,
    const struct push_result *r)
{
	if (r->refused > 0)
		fprintf(stderr, "retryd-bench: %s: %" PRId64 " of %" PRId64
		    " jobs refused (%s)\n", name, r->refused, s->n,
		    r->first_error);
	if (r->failed > 0) {
		fprintf(stderr, "retryd-bench: %s: %" PRId64 " of %" PRId64
		    " jobs failed (%s)\n", name, r->failed, s->n,
		    r->first_error);
		b->failures++;
	}
}

static void
emit_push(struct bench *b, const char *name, const struct push_spec *s,
    struct push_result *r, const struct redis_mem *m0,
    const struct redis_mem *m1, const struct bench_cpu *c0,
    const struct bench_cpu *c1)
{
	struct json_object *o = json_object_new_object();
	double secs = (double)r->elapsed_us / 1e6;

	jset_redis_time(b, o, "push", r->ok, 0);
	jset_cpu_per(o, c0, c1, "job", r->ok);

	jset_int(o, "jobs", s->n);
	jset_int(o, "ok", r->ok);
	jset_int(o, "refused", r->refused);
	jset_int(o, "failed", r->failed);
	jset_int(o, "batch", s->batch);
	jset_int(o, "in_flight", s->conc);
	jset_dbl(o, "elapsed_s", secs);
	jset_dbl(o, "jobs_per_s", secs > 0 ? (double)r->ok / secs : 0);
	jset_pcts_ms(o, "req", &r->lat_us);
	if (m0->used >= 0 && m1->used >= 0 && r->ok > 0) {
		jset_int(o, "redis_used_memory", m1->used);
		jset_int(o, "redis_keys", m1->keys);
		jset_dbl(o, "bytes_per_job", (double)(m1->used - m0->used) /
		    (double)r->ok);
		jset_dbl(o, "keys_per_job", (double)(m1->keys - m0->keys) /
		    (double)r->ok);
	}
	/*
	 * The connections' buffers grow with the requests in flight, not
	 * with the jobs held: the cost of a pending job leaves them out.
	 */
	if (m0->used >= 0 && m1->used >= 0 && m0->clients >= 0 &&
	    m1->clients >= 0 && r->ok > 0) {
		jset_dbl(o, "clients_bytes_per_job",
		    (double)(m1->clients - m0->clients) / (double)r->ok);
		jset_dbl(o, "data_bytes_per_job",
		    (double)((m1->used - m1->clients) -
		    (m0->used - m0->clients)) / (double)r->ok);
	}
	if (r->first_error[0] != '\0')
		jset_str(o, "first_error", r->first_error);
	jset_bool(o, "ok_check", r->failed == 0);
	warn_push(b, name, s, r);
	bench_emit(b, name, o);
}

/* Push with the Redis memory read before and after. */
static int
push_measured(struct bench *b, const char *name, const struct push_spec *s)
{
	struct push_result r;
	struct redis_mem m0, m1;
	struct bench_cpu c0, c1;
	int rc;

	bench_redis_mem(b, &m0);
	redis_time_reset(b);
	bench_cpu_read(b, &c0);
	rc = bench_push(b, s, &r);
	bench_cpu_read(b, &c1);
	bench_redis_mem(b, &m1);
	emit_push(b, name, s, &r, &m0, &m1, &c0, &c1);
	push_result_free(&r);
	return rc;
}

/* W1: enqueue throughput and Redis bytes per pending job. */
int
bench_w1(struct bench *b)
{
	struct push_spec s;

	if (bench_push_topic(b, "w1", TAG_W1, NULL, NULL) == -1)
		return -1;
	memset(&s, 0, sizeof(s));
	s.topic = "w1";
	s.n = b->w1_jobs;
	s.batch = 1;
	s.conc = b->w1_conc;
	s.delay_ms = b->w1_ahead_ms;
	if (push_measured(b, "w1_single", &s) == -1)
		return -1;
	s.batch = b->batch;
	s.conc = b->batch_conc;
	if (push_measured(b, "w1_batch", &s) == -1)
		return -1;
	/*
	 * Single pushes again, each with a client-given id (POST /push), a
	 * figure without a target: each is looked up before it is made.  Not
	 * over W6's backlog, which measures the two forms above.
	 */
	if (b->label != NULL && b->label[0] != '\0')
		return 0;
	if (bench_push_topic(b, "w1ids", TAG_W1, NULL, NULL) == -1)
		return -1;
	s.topic = "w1ids";
	s.batch = 1;
	s.conc = b->w1_conc;
	s.client_ids = 1;
	return push_measured(b, "w1_ids", &s);
}

/* Exactly-once delivery of jobs pushed by spec, first attempt each. */
struct once {
	int64_t		 delivered;
	int64_t		 missing;
	int64_t		 dups;
	int64_t		 early;
	int64_t		 bad;		/* unknown seq or wrong due time */
	int64_t		 not_first;	/* arrived at attempt != 1 */
	int64_t		 unaccepted;	/* delivered, though refused */
	int64_t		 first_us;
	int64_t		 last_us;
	struct samples	 late_us;
	int64_t		 by_s_us[ONCE_SECONDS];	/* worst lateness by the */
						/* second of the due time */
};

static void
check_once(const struct arrivals *a, const struct push_spec *s,
    const uint8_t *accepted, struct once *c)
{
	uint8_t *seen;
	int64_t due, late, i, sec;
	size_t k;

	memset(c, 0, sizeof(*c));
	seen = xcalloc((size_t)s->n, 1);
	for (k = 0; k < a->n; k++) {
		const struct arrival *x = &a->v[k];

		if (x->seq < 0 || x->seq >= s->n) {
			c->bad++;
			continue;
		}
		if (!accepted[x->seq]) {
			/* Refused with 429/503, yet delivered. */
			c->unaccepted++;
			continue;
		}
		due = push_due_ms(s, x->seq);
		if (x->due_ms != due)
			c->bad++;
		if (seen[x->seq]) {
			c->dups++;
			continue;
		}
		seen[x->seq] = 1;
		c->delivered++;
		if (x->attempt != 1)
			c->not_first++;
		late = x->wall_us - due * 1000;
		if (late < 0)
			c->early++;
		samples_add(&c->late_us, late);
		sec = (due - s->base_ms) / 1000;
		if (sec >= 0 && sec < ONCE_SECONDS && late > c->by_s_us[sec])
			c->by_s_us[sec] = late;
		if (c->first_us == 0 || x->wall_us < c->first_us)
			c->first_us = x->wall_us;
		if (x->wall_us > c->last_us)
			c->last_us = x->wall_us;
	}
	for (i = 0; i < s->n; i++)
		if (accepted[i] && !seen[i])
			c->missing++;
	free(seen);
}

static int
once_ok(const struct once *c)
{
	return c->missing == 0 && c->dups == 0 && c->early == 0 &&
	    c->bad == 0 && c->not_first == 0;
}

static void
once_json(struct json_object *o, struct once *c, int64_t spread_ms)
{
	struct json_object *a;
	int64_t i;

	/* Drift (a queue that grows) or stalls (spikes) show here. */
	if (spread_ms >= 2000) {
		a = json_object_new_array();
		for (i = 0; i < ONCE_SECONDS && i * 1000 < spread_ms; i++)
			json_object_array_add(a, json_object_new_int64(
			    (c->by_s_us[i] + 500) / 1000));
		json_object_object_add(o, "late_max_by_s_ms", a);
	}
	jset_int(o, "delivered", c->delivered);
	jset_int(o, "missing", c->missing);
	jset_int(o, "duplicates", c->dups);
	jset_int(o, "early", c->early);
	jset_int(o, "bad", c->bad);
	jset_int(o, "not_first_attempt", c->not_first);
	jset_int(o, "refused_but_delivered", c->unaccepted);
	jset_pcts_ms(o, "late", &c->late_us);
}

/*
 * Push spec's jobs (due from lead ahead), wait for per_job arrivals of each
 * accepted job under tag, and fetch them.  *enq_late: the push ended after
 * the first due time.
 */
static int
push_and_collect(struct bench *b, const char *name, struct push_spec *s,
    int tag, int per_job, int64_t last_due_ms, struct arrivals *a,
    struct push_result *r, int *enq_late, struct json_object *o)
{
	struct bench_cpu c0, c1;
	int64_t n, want;

	if (bench_rcv_reset(b) == -1) {
		fprintf(stderr, "retryd-bench: %s: receiver reset failed\n",
		    name);
		return -1;
	}
	redis_time_reset(b);
	if (bench_push(b, s, r) == -1)
		fprintf(stderr, "retryd-bench: %s: the push ran out of time\n",
		    name);
	warn_push(b, name, s, r);
	jset_int(o, "refused", r->refused);
	jset_int(o, "failed", r->failed);
	want = r->ok * per_job;
	/* Redis's time for the push, then for the deliveries. */
	jset_redis_time(b, o, "push", s->n, 1);
	*enq_late = wall_ms() > s->base_ms;
	if (*enq_late)
		fprintf(stderr, "retryd-bench: %s: the push ended %" PRId64
		    " ms after the first due time; raise --lead\n", name,
		    wall_ms() - s->base_ms);
	bench_cpu_read(b, &c0);
	n = wait_count(b, tag, want, last_due_ms + b->wait_ms);
	bench_cpu_read(b, &c1);
	/* The CPU of the deliveries (every attempt made, for W4). */
	jset_cpu_per(o, &c0, &c1, "delivery", n > 0 ? n : 0);
	/* Let duplicates, if any, arrive before judging. */
	bench_sleep_ms(GRACE_MS);
	if (n < want)
		fprintf(stderr, "retryd-bench: %s: %" PRId64 " of %" PRId64
		    " arrivals by the deadline\n", name, n < 0 ? 0 : n, want);
	jset_redis_time(b, o, "deliver", s->n, 0);
	return bench_rcv_fetch(b, tag, a);
}

static int
timed_once(struct bench *b, const char *name, const char *topic, int tag,
    int64_t jobs, int64_t spread_ms, int burst)
{
	struct push_spec s;
	struct push_result r;
	struct arrivals a;
	struct once c;
	struct json_object *o;
	int enq_late, rc;
	double drain_s;

	if (bench_push_topic(b, topic, tag, NULL, NULL) == -1)
		return -1;
	memset(&s, 0, sizeof(s));
	memset(&a, 0, sizeof(a));
	s.topic = topic;
	s.n = jobs;
	s.batch = b->batch;
	s.conc = b->batch_conc;
	s.delay_ms = -1;
	s.base_ms = wall_ms() + b->lead_ms;
	s.spread_ms = spread_ms;
	o = json_object_new_object();
	rc = push_and_collect(b, name, &s, tag, 1, s.base_ms + spread_ms,
	    &a, &r, &enq_late, o);
	if (rc == -1) {
		push_result_free(&r);
		json_object_put(o);
		return -1;
	}
	check_once(&a, &s, r.accepted, &c);
	jset_int(o, "jobs", jobs);
	jset_int(o, "spread_ms", spread_ms);
	jset_dbl(o, "enqueue_s", (double)r.elapsed_us / 1e6);
	jset_bool(o, "enqueue_late", enq_late);
	once_json(o, &c, spread_ms);
	if (burst && c.delivered > 0) {
		drain_s = (double)(c.last_us - s.base_ms * 1000) / 1e6;
		jset_dbl(o, "drain_s", drain_s);
		jset_dbl(o, "deliveries_per_s", drain_s > 0 ?
		    (double)c.delivered / drain_s : 0);
		jset_dbl(o, "first_late_ms",
		    (double)(c.first_us - s.base_ms * 1000) / 1000.0);
	}
	jset_bool(o, "ok_check", once_ok(&c) && r.failed == 0);
	if (!once_ok(&c)) {
		fprintf(stderr, "retryd-bench: %s: delivered %" PRId64 ", "
		    "missing %" PRId64 ", duplicates %" PRId64 ", early %"
		    PRId64 ", bad %" PRId64 ", not at attempt 1 %" PRId64 "\n",
		    name, c.delivered, c.missing, c.dups, c.early, c.bad,
		    c.not_first);
		b->failures++;
	}
	bench_emit(b, name, o);
	samples_free(&c.late_us);
	push_result_free(&r);
	arrivals_free(&a);
	return 0;
}

/* W2: lateness of jobs due uniformly over a spread. */
int
bench_w2(struct bench *b)
{
	return timed_once(b, "w2", "w2", TAG_W2, b->w2_jobs, b->w2_spread_ms,
	    0);
}

/* W3: a burst of jobs due at one instant. */
int
bench_w3(struct bench *b)
{
	return timed_once(b, "w3", "w3", TAG_W3, b->w3_jobs, 0, 1);
}

/* W4: retries on <0,1s,2s> with the first two attempts failing. */
#define W4_ATTEMPTS	3

int
bench_w4(struct bench *b)
{
	static const int64_t wait_us[W4_ATTEMPTS] = { 0, 1000000, 2000000 };
	struct push_spec s;
	struct push_result r;
	struct arrivals a;
	struct samples err, err2, late;
	struct json_object *o;
	int64_t (*at)[W4_ATTEMPTS], at3 = 0, missing = 0, extra = 0;
	int64_t dups = 0, bad = 0, early = 0, unaccepted = 0, e, i;
	int enq_late, k, okk;
	size_t j;

	if (bench_push_topic(b, "w4", TAG_W4, "fail=2", "<0,1s,2s>") == -1)
		return -1;
	memset(&s, 0, sizeof(s));
	memset(&a, 0, sizeof(a));
	memset(&err, 0, sizeof(err));
	memset(&err2, 0, sizeof(err2));
	memset(&late, 0, sizeof(late));
	s.topic = "w4";
	s.n = b->w4_jobs;
	s.batch = b->batch;
	s.conc = b->batch_conc;
	s.delay_ms = -1;
	s.base_ms = wall_ms() + b->lead_ms;
	s.spread_ms = b->w4_spread_ms;
	o = json_object_new_object();
	if (push_and_collect(b, "w4", &s, TAG_W4, W4_ATTEMPTS,
	    s.base_ms + s.spread_ms + 3000, &a, &r, &enq_late, o) == -1) {
		push_result_free(&r);
		json_object_put(o);
		return -1;
	}
	at = xcalloc((size_t)s.n, sizeof(*at));
	for (j = 0; j < a.n; j++) {
		const struct arrival *x = &a.v[j];

		if (x->seq < 0 || x->seq >= s.n ||
		    x->due_ms != push_due_ms(&s, x->seq)) {
			bad++;
			continue;
		}
		if (!r.accepted[x->seq]) {
			unaccepted++;
			continue;
		}
		if (x->attempt < 1 || x->attempt > W4_ATTEMPTS) {
			extra++;
			continue;
		}
		/* The receiver fails attempts 1 and 2 with 500. */
		if (x->status != (x->attempt < W4_ATTEMPTS ? 500 : 200))
			bad++;
		if (at[x->seq][x->attempt - 1] != 0) {
			dups++;
			continue;
		}
		at[x->seq][x->attempt - 1] = x->wall_us;
	}
	for (i = 0; i < s.n; i++) {
		if (!r.accepted[i])
			continue;
		okk = 1;
		for (k = 0; k < W4_ATTEMPTS; k++)
			if (at[i][k] == 0) {
				missing++;
				okk = 0;
			}
		if (!okk)
			continue;
		at3++;
		e = at[i][0] - push_due_ms(&s, i) * 1000;
		if (e < 0 && early++ < 5)
			fprintf(stderr, "retryd-bench: w4: job %" PRId64
			    " attempt 1 arrived %" PRId64 " us before its due "
			    "time\n", i, -e);
		samples_add(&late, e);
		for (k = 1; k < W4_ATTEMPTS; k++) {
			/*
			 * From the receiver's answer to the next arrival.
			 * retryd keeps times in whole milliseconds, so the
			 * failure it counts from may be up to 1 ms before the
			 * answer seen here in microseconds: only more than
			 * that is early.
			 */
			e = at[i][k] - at[i][k - 1] - wait_us[k];
			if (e < -1000 && early++ < 5)
				fprintf(stderr, "retryd-bench: w4: job %" PRId64
				    " attempt %d arrived %" PRId64 " us after "
				    "attempt %d failed, %" PRId64 " us early\n",
				    i, k + 1, at[i][k] - at[i][k - 1], k, -e);
			samples_add(&err, e);
			if (k == 2)
				samples_add(&err2, e);
		}
	}
	jset_int(o, "jobs", s.n);
	jset_str(o, "schedule", "<0,1s,2s>");
	jset_int(o, "delivered_at_attempt_3", at3);
	jset_int(o, "missing_attempts", missing);
	jset_int(o, "extra_attempts", extra);
	jset_int(o, "duplicates", dups);
	jset_int(o, "bad", bad);
	jset_int(o, "early", early);
	jset_int(o, "refused_but_delivered", unaccepted);
	jset_bool(o, "enqueue_late", enq_late);
	jset_pcts_ms(o, "spacing_err", &err);
	jset_dbl(o, "spacing2_err_p99_ms", (double)samples_pct(&err2, 99) /
	    1000.0);
	jset_pcts_ms(o, "late", &late);
	okk = at3 == r.ok && extra == 0 && dups == 0 && bad == 0 &&
	    early == 0 && r.failed == 0;
	jset_bool(o, "ok_check", okk);
	if (!okk) {
		fprintf(stderr, "retryd-bench: w4: %" PRId64 " of %" PRId64
		    " delivered at attempt 3; missing attempts %" PRId64
		    ", extra %" PRId64 ", duplicates %" PRId64 ", bad %"
		    PRId64 ", early %" PRId64 "\n", at3, r.ok, missing, extra,
		    dups, bad, early);
		b->failures++;
	}
	bench_emit(b, "w4", o);
	free(at);
	samples_free(&err);
	samples_free(&err2);
	samples_free(&late);
	push_result_free(&r);
	arrivals_free(&a);
	return 0;
}

/*
 * The end of both W5 phases, run for elapsed_us with seen[] marking the
 * jobs acked: the figures they share and the checks' verdict into o, a
 * failure counted and said, o emitted as workload name.
 */
static void
w5_check(struct bench *b, const char *name, struct json_object *o,
    const struct push_result *r, const uint8_t *seen, int64_t elapsed_us,
    int64_t acked, int64_t empty, int64_t dups, int64_t bad, int64_t errors,
    const char *first_error)
{
	double secs = (double)elapsed_us / 1e6;
	int64_t i, jobs = b->w5_jobs, missing = 0;
	int ok;

	for (i = 0; i < jobs; i++)
		if (r->accepted[i] && !seen[i])
			missing++;
	jset_redis_time(b, o, "consume", acked, 0);
	jset_int(o, "jobs", jobs);
	jset_int(o, "consumers", b->w5_conc);
	jset_dbl(o, "enqueue_s", (double)r->elapsed_us / 1e6);
	jset_int(o, "refused", r->refused);
	jset_int(o, "acked", acked);
	jset_dbl(o, "elapsed_s", secs);
	jset_dbl(o, "per_s", secs > 0 ? (double)acked / secs : 0);
	jset_int(o, "empty_reserves", empty);
	jset_int(o, "errors", errors);
	jset_int(o, "duplicates", dups);
	jset_int(o, "missing", missing);
	jset_int(o, "bad", bad);
	if (first_error[0] != '\0')
		jset_str(o, "first_error", first_error);
	ok = missing == 0 && dups == 0 && bad == 0 && errors == 0 &&
	    r->failed == 0;
	jset_bool(o, "ok_check", ok);
	if (!ok) {
		fprintf(stderr, "retryd-bench: %s: acked %" PRId64 " of %"
		    PRId64 ", missing %" PRId64 ", duplicates %" PRId64
		    ", errors %" PRId64 " (%s)\n", name, acked, jobs, missing,
		    dups, errors, first_error);
		b->failures++;
	}
	bench_emit(b, name, o);
}

/*
 * The start of both W5 phases: a pull topic, and its jobs pushed due now
 * in batches.  The phase's JSON object with the push's Redis figures, or
 * NULL when the topic failed.
 */
static struct json_object *
w5_push(struct bench *b, const char *topic, const char *name,
    struct push_spec *s, struct push_result *r)
{
	struct json_object *o;

	if (bench_topic(b, topic, "{\"mode\":\"pull\",\"ttr_ms\":30000}") ==
	    -1)
		return NULL;
	memset(s, 0, sizeof(*s));
	s->topic = topic;
	s->n = b->w5_jobs;
	s->batch = b->batch;
	s->conc = b->batch_conc;
	s->delay_ms = 0;
	redis_time_reset(b);
	if (bench_push(b, s, r) == -1)
		fprintf(stderr, "retryd-bench: %s: the push ran out of time\n",
		    name);
	warn_push(b, name, s, r);
	o = json_object_new_object();
	jset_redis_time(b, o, "push", s->n, 1);
	return o;
}

/* W5: pull consumers, each looping reserve then ack. */
struct consumer {
	int	 acking;
	int64_t	 seq;
	char	 id[128];
	char	 token[512];
};

struct pull {
	struct bench	*b;
	int64_t		 n;
	int64_t		 acked;
	int64_t		 reserved;
	int64_t		 empty;
	int64_t		 errors;
	int64_t		 dups;
	int64_t		 bad;
	struct consumer	*cons;
	uint8_t		*seen;
	struct samples	 lat_us;	/* reserves */
	struct samples	 ack_lat_us;
	struct hc_pool	*pool;
	char		 first_error[256];
};

static int
pull_next(void *arg, int slot, struct buf *req)
{
	struct pull *p = arg;
	struct consumer *c = &p->cons[slot];
	char path[256], body[600];

	if (p->acked >= p->n)
		return 0;
	if (c->acking) {
		snprintf(path, sizeof(path), "/v1/jobs/%s/ack", c->id);
		snprintf(body, sizeof(body), "{\"token\":\"%s\"}", c->token);
		return hc_format(req, &p->b->api, "POST", path, p->b->auth,
		    body, strlen(body)) == -1 ? -1 : 1;
	}
	return hc_format(req, &p->b->api, "GET",
	    "/v1/topics/w5/reserve?wait_ms=1000", p->b->auth, NULL, 0) ==
	    -1 ? -1 : 1;
}

static int64_t
body_seq(struct json_object *job)
{
	struct json_object *body, *v, *parsed = NULL;
	int64_t seq = -1;

	if (!json_object_object_get_ex(job, "body", &body))
		return -1;
	if (json_object_is_type(body, json_type_string)) {
		parsed = json_tokener_parse(json_object_get_string(body));
		body = parsed;
	}
	if (body != NULL && json_object_object_get_ex(body, "s", &v))
		seq = json_object_get_int64(v);
	json_object_put(parsed);
	return seq;
}

static void
pull_error(struct pull *p, const struct hc_resp *r, const char *what)
{
	p->errors++;
	if (p->first_error[0] == '\0')
		snprintf(p->first_error, sizeof(p->first_error),
		    "%s: status %d: %.200s", what, r->status, r->body);
}

static void
pull_done(void *arg, int slot, const struct hc_resp *r)
{
	struct pull *p = arg;
	struct consumer *c = &p->cons[slot];
	struct json_object *o, *v;

	if (c->acking) {
		c->acking = 0;
		samples_add(&p->ack_lat_us, r->lat_us);
		if (r->status != 200 && r->status != 204) {
			pull_error(p, r, "ack");
			return;
		}
		p->acked++;
		if (c->seq < 0 || c->seq >= p->n)
			p->bad++;
		else if (p->seen[c->seq]++ > 0)
			p->dups++;
		if (p->acked >= p->n)
			hc_pool_stop(p->pool);
		return;
	}
	samples_add(&p->lat_us, r->lat_us);
	if (r->status == 204) {
		p->empty++;
		return;
	}
	if (r->status != 200) {
		pull_error(p, r, "reserve");
		return;
	}
	o = json_tokener_parse(r->body);
	if (o == NULL || !json_object_object_get_ex(o, "id", &v) ||
	    snprintf(c->id, sizeof(c->id), "%s", json_object_get_string(v)) >=
	    (int)sizeof(c->id) ||
	    !json_object_object_get_ex(o, "token", &v) ||
	    snprintf(c->token, sizeof(c->token), "%s",
	    json_object_get_string(v)) >= (int)sizeof(c->token)) {
		pull_error(p, r, "reserve answer");
		json_object_put(o);
		return;
	}
	c->seq = body_seq(o);
	c->acking = 1;
	p->reserved++;
	json_object_put(o);
}

static int
w5_single(struct bench *b)
{
	static const struct hc_ops ops = { pull_next, pull_done };
	struct push_spec s;
	struct push_result r;
	struct pull p;
	struct json_object *o;
	int64_t t0, elapsed;
	int rc = 0;

	if ((o = w5_push(b, "w5", "w5", &s, &r)) == NULL)
		return -1;
	memset(&p, 0, sizeof(p));
	p.b = b;
	p.n = r.ok;
	p.cons = xcalloc((size_t)b->w5_conc, sizeof(*p.cons));
	p.seen = xcalloc((size_t)s.n, 1);
	p.pool = hc_pool_new(&b->api, b->w5_conc, &ops, &p, 30000);
	if (p.pool == NULL) {
		json_object_put(o);
		rc = -1;
		goto out;
	}
	t0 = hc_mono_us();
	hc_pool_run(p.pool, t0 + b->wait_ms * 1000);
	elapsed = hc_mono_us() - t0;
	jset_pcts_ms(o, "reserve", &p.lat_us);
	jset_pcts_ms(o, "ack", &p.ack_lat_us);
	w5_check(b, "w5", o, &r, p.seen, elapsed, p.acked, p.empty, p.dups,
	    p.bad, p.errors, p.first_error);
out:
	hc_pool_free(p.pool);
	free(p.cons);
	free(p.seen);
	samples_free(&p.lat_us);
	samples_free(&p.ack_lat_us);
	push_result_free(&r);
	return rc;
}

/*
 * W5's batched phase, on the pull API's batch extension: each consumer
 * reserves up to w5_batch jobs at once (reserve?max=B answers
 * {"jobs":[...]}) and acks all it got with one POST /v1/jobs:ack, whose
 * {"results":[...]} holds one answer per job, in order.  A job counts as
 * acked when its result has status 200; any other result is an error.  A
 * request not answered in that form (a server without the extension
 * ignores max and has no /v1/jobs:ack) stops the phase at once: going on
 * would only wait for the deadline.
 */
struct bconsumer {
	struct json_object	*jobs;	/* reserved, to ack; NULL: none */
};

struct bpull {
	struct bench		*b;
	int64_t			 jobs;		/* pushed, numbered from 0 */
	int64_t			 n;		/* accepted: to ack */
	int64_t			 acked;		/* results with status 200 */
	int64_t			 ack_failed;	/* results not 200 */
	int64_t			 reserved;	/* jobs reserved */
	int64_t			 reserves;	/* answers with jobs */
	int64_t			 acks;		/* ack requests answered */
	int64_t			 empty;
	int64_t			 errors;
	int64_t			 dups;
	int64_t			 bad;
	int			 stopped;	/* by an answer not in form */
	struct bconsumer	*cons;
	uint8_t			*seen;
	struct samples		 lat_us;	/* reserves */
	struct samples		 ack_lat_us;
	struct hc_pool		*pool;
	char			 path[128];	/* the reserve's */
	struct buf		 body;		/* an ack's */
	char			 first_error[384];
};

/* o as JSON text, valid until o is freed. */
static const char *
jtext(struct json_object *o)
{
	return json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
	    JSON_C_TO_STRING_NOSLASHESCAPE);
}

/* Every job has had its ack's answer. */
static int
bpull_done_all(const struct bpull *p)
{
	return p->acked + p->ack_failed >= p->n;
}

static int
bpull_next(void *arg, int slot, struct buf *req)
{
	struct bpull *p = arg;
	struct bconsumer *c = &p->cons[slot];
	struct json_object *job, *id, *token;
	size_t i, n;

	if (p->stopped)
		return -1;
	if (c->jobs == NULL) {
		if (bpull_done_all(p))
			return 0;
		return hc_format(req, &p->b->api, "GET", p->path, p->b->auth,
		    NULL, 0) == -1 ? -1 : 1;
	}
	/* Checked by bpull_reserved(): objects with string id and token. */
	buf_reset(&p->body);
	buf_puts(&p->body, "{\"jobs\":[");
	n = json_object_array_length(c->jobs);
	for (i = 0; i < n; i++) {
		job = json_object_array_get_idx(c->jobs, i);
		json_object_object_get_ex(job, "id", &id);
		json_object_object_get_ex(job, "token", &token);
		if (buf_printf(&p->body, "%s{\"id\":%s,\"token\":%s}",
		    i > 0 ? "," : "", jtext(id), jtext(token)) == -1)
			return -1;
	}
	buf_puts(&p->body, "]}");
	return hc_format(req, &p->b->api, "POST", "/v1/jobs:ack", p->b->auth,
	    p->body.data, p->body.len) == -1 ? -1 : 1;
}

/*
 * An answer not in the extension's form: count it, say what the server
 * answered, and stop the phase.
 */
static void
bpull_stop(struct bpull *p, const struct hc_resp *r, const char *what)
{
	p->errors++;
	if (!p->stopped) {
		fprintf(stderr, "retryd-bench: w5_batch: stopped: %s: status "
		    "%d: %.200s\n", what, r->status, r->body);
		if (p->first_error[0] == '\0')
			snprintf(p->first_error, sizeof(p->first_error),
			    "%s: status %d: %.200s", what, r->status,
			    r->body);
	}
	p->stopped = 1;
	hc_pool_stop(p->pool);
}

/* A 200 to a reserve: {"jobs":[JOB, ...]}, 1..w5_batch jobs. */
static void
bpull_reserved(struct bpull *p, struct bconsumer *c, const struct hc_resp *r)
{
	struct json_object *o, *jobs, *job, *v;
	size_t i, n;

	o = json_tokener_parse(r->body);
	if (!json_object_is_type(o, json_type_object) ||
	    !json_object_object_get_ex(o, "jobs", &jobs) ||
	    !json_object_is_type(jobs, json_type_array)) {
		bpull_stop(p, r, json_object_is_type(o, json_type_object) &&
		    json_object_object_get_ex(o, "id", &v) ?
		    "reserve with max answered one job, not {\"jobs\":[...]}"
		    " (the server ignores max)" :
		    "reserve with max: no \"jobs\" array");
		json_object_put(o);
		return;
	}
	n = json_object_array_length(jobs);
	for (i = 0; i < n; i++) {
		job = json_object_array_get_idx(jobs, i);
		if (!json_object_object_get_ex(job, "id", &v) ||
		    !json_object_is_type(v, json_type_string) ||
		    !json_object_object_get_ex(job, "token", &v) ||
		    !json_object_is_type(v, json_type_string))
			break;
	}
	if (n == 0 || n > (size_t)p->b->w5_batch || i < n) {
		bpull_stop(p, r, n == 0 || n > (size_t)p->b->w5_batch ?
		    "reserve with max: not 1..max jobs" :
		    "reserve with max: a job without a string id or token");
		json_object_put(o);
		return;
	}
	c->jobs = json_object_get(jobs);
	p->reserves++;
	p->reserved += (int64_t)n;
	json_object_put(o);
}

/* A 200 to an ack: {"results":[R, ...]}, one per job, in order. */
static void
bpull_acked(struct bpull *p, struct bconsumer *c, const struct hc_resp *r)
{
	struct json_object *o, *res, *e, *v, *job, *id;
	int64_t seq;
	size_t i, n;

	o = json_tokener_parse(r->body);
	n = json_object_array_length(c->jobs);
	if (!json_object_is_type(o, json_type_object) ||
	    !json_object_object_get_ex(o, "results", &res) ||
	    !json_object_is_type(res, json_type_array) ||
	    json_object_array_length(res) != n) {
		bpull_stop(p, r, "POST /v1/jobs:ack: not {\"results\":[...]}"
		    " with one result per job");
		json_object_put(o);
		return;
	}
	for (i = 0; i < n; i++) {
		e = json_object_array_get_idx(res, i);
		job = json_object_array_get_idx(c->jobs, i);
		if (!json_object_is_type(e, json_type_object) ||
		    !json_object_object_get_ex(e, "status", &v) ||
		    json_object_get_int(v) != 200) {
			p->ack_failed++;
			p->errors++;
			if (p->first_error[0] == '\0')
				snprintf(p->first_error,
				    sizeof(p->first_error), "POST /v1/jobs:ack"
				    ": results[%zu]: %.200s", i, jtext(e));
			continue;
		}
		p->acked++;
		json_object_object_get_ex(job, "id", &id);
		seq = body_seq(job);
		if (!json_object_object_get_ex(e, "id", &v) ||
		    strcmp(json_object_get_string(v),
		    json_object_get_string(id)) != 0 || seq < 0 ||
		    seq >= p->jobs)
			p->bad++;
		else if (p->seen[seq]++ > 0)
			p->dups++;
	}
	json_object_put(o);
}

static void
bpull_done(void *arg, int slot, const struct hc_resp *r)
{
	struct bpull *p = arg;
	struct bconsumer *c = &p->cons[slot];

	if (p->stopped)
		return;
	if (c->jobs != NULL) {
		samples_add(&p->ack_lat_us, r->lat_us);
		p->acks++;
		if (r->status == 200)
			bpull_acked(p, c, r);
		else
			bpull_stop(p, r, "POST /v1/jobs:ack");
		json_object_put(c->jobs);
		c->jobs = NULL;
		if (bpull_done_all(p))
			hc_pool_stop(p->pool);
		return;
	}
	samples_add(&p->lat_us, r->lat_us);
	if (r->status == 204)
		p->empty++;
	else if (r->status == 200)
		bpull_reserved(p, c, r);
	else
		bpull_stop(p, r, "reserve with max");
}

static int
w5_batch(struct bench *b)
{
	static const struct hc_ops ops = { bpull_next, bpull_done };
	struct push_spec s;
	struct push_result r;
	struct bpull p;
	struct json_object *o;
	int64_t t0, elapsed, i;
	int late, rc = 0;

	if ((o = w5_push(b, "w5b", "w5_batch", &s, &r)) == NULL)
		return -1;
	memset(&p, 0, sizeof(p));
	p.b = b;
	p.jobs = s.n;
	p.n = r.ok;
	p.cons = xcalloc((size_t)b->w5_conc, sizeof(*p.cons));
	p.seen = xcalloc((size_t)s.n, 1);
	snprintf(p.path, sizeof(p.path), "/v1/topics/w5b/reserve?wait_ms=1000"
	    "&max=%d", b->w5_batch);
	buf_init(&p.body, HC_MAX_BODY);
	p.pool = hc_pool_new(&b->api, b->w5_conc, &ops, &p, 30000);
	if (p.pool == NULL) {
		json_object_put(o);
		rc = -1;
		goto out;
	}
	t0 = hc_mono_us();
	late = hc_pool_run(p.pool, t0 + b->wait_ms * 1000) == -1;
	elapsed = hc_mono_us() - t0;
	if (late)
		fprintf(stderr, "retryd-bench: w5_batch: not done by the "
		    "deadline (--wait %" PRId64 " ms)\n", b->wait_ms);
	jset_int(o, "batch", b->w5_batch);
	jset_int(o, "reserves", p.reserves);
	jset_dbl(o, "jobs_per_reserve", p.reserves > 0 ?
	    (double)p.reserved / (double)p.reserves : 0);
	jset_int(o, "acks", p.acks);
	jset_int(o, "ack_results_failed", p.ack_failed);
	jset_pcts_ms(o, "reserve", &p.lat_us);
	if (p.ack_lat_us.n > 0)
		jset_pcts_ms(o, "ack", &p.ack_lat_us);
	w5_check(b, "w5_batch", o, &r, p.seen, elapsed, p.acked, p.empty,
	    p.dups, p.bad, p.errors, p.first_error);
out:
	hc_pool_free(p.pool);
	for (i = 0; i < b->w5_conc; i++)
		json_object_put(p.cons[i].jobs);
	free(p.cons);
	free(p.seen);
	buf_free(&p.body);
	samples_free(&p.lat_us);
	samples_free(&p.ack_lat_us);
	push_result_free(&r);
	return rc;
}

/*
 * W5: the single phase (reserve one job, ack it), then, unless --w5-batch
 * is 0, the batched phase on a topic of its own with as many jobs.
 */
int
bench_w5(struct bench *b)
{
	if (w5_single(b) == -1)
		return -1;
	if (b->w5_batch > 0)
		return w5_batch(b);
	return 0;
}

/* W6: W2 and W1 again over a backlog of pending jobs. */
int
bench_w6(struct bench *b)
{
	struct push_spec s;
	const char *label = b->label;
	int rc = 0;

	if (bench_push_topic(b, "backlog", TAG_BACKLOG, NULL, NULL) == -1)
		return -1;
	memset(&s, 0, sizeof(s));
	s.topic = "backlog";
	s.n = b->w6_pending;
	s.batch = b->batch;
	s.conc = b->batch_conc;
	s.delay_ms = INT64_C(86400000);	/* a day ahead: never fires here */
	if (s.n > 0 && push_measured(b, "w6_preload", &s) == -1)
		return -1;
	b->label = "w6";
	/* W2 first: W1's jobs fall due a minute later and must not
	 * disturb it. */
	if (bench_w2(b) == -1 || bench_w1(b) == -1)
		rc = -1;
	b->label = label;
	return rc;
}

/*
 * The timer ceiling: what a minimal scheduler achieves on this machine
 * now.  One thread sleeps until each of W2's due times (clock_nanosleep on
 * the wall clock) and POSTs the job's body to the receiver on a kept-alive
 * connection; lateness is measured exactly as W2's.  So W2's lateness can
 * be read as a multiple of the machine's own wake-up and loopback latency
 * (a busy machine has plenty of both).
 */
struct tick {
	struct bench		*b;
	const struct push_spec	*s;
	int64_t			 next;
	int			 failed;
};

static int
tick_next(void *arg, int slot, struct buf *req)
{
	struct tick *t = arg;
	struct timespec ts;
	char body[160];
	int64_t due;
	int n;

	(void)slot;
	if (t->next >= t->s->n)
		return 0;
	due = push_due_ms(t->s, t->next);
	ts.tv_sec = (time_t)(due / 1000);
	ts.tv_nsec = (long)(due % 1000) * 1000000L;
	while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) != 0)
		;
	n = snprintf(body, sizeof(body), "{\"s\":%" PRId64 ",\"d\":%" PRId64
	    ",\"p\":\"xxxxxxxxxxxxxxxxxxxxxxxx\"}", t->next, due);
	t->next++;
	return hc_format(req, &t->b->rcv, "POST", "/cb/8",
	    "retryd-attempt: 1\r\n", body, (size_t)n) == -1 ? -1 : 1;
}

static void
tick_done(void *arg, int slot, const struct hc_resp *r)
{
	struct tick *t = arg;

	(void)slot;
	if (r->status != 200)
		t->failed++;
}

int
bench_timer(struct bench *b)
{
	static const struct hc_ops ops = { tick_next, tick_done };
	struct push_spec s;
	struct arrivals a;
	struct tick t;
	struct once c;
	struct hc_pool *p;
	struct json_object *o;
	uint8_t *all;

	memset(&s, 0, sizeof(s));
	memset(&a, 0, sizeof(a));
	memset(&t, 0, sizeof(t));
	s.n = b->w2_jobs;
	s.delay_ms = -1;
	s.base_ms = wall_ms() + 200;
	s.spread_ms = b->w2_spread_ms;
	t.b = b;
	t.s = &s;
	if (bench_rcv_reset(b) == -1)
		return -1;
	p = hc_pool_new(&b->rcv, 1, &ops, &t, 10000);
	if (p == NULL)
		return -1;
	hc_pool_run(p, hc_mono_us() + (s.spread_ms + b->wait_ms) * 1000);
	hc_pool_free(p);
	if (bench_rcv_fetch(b, TAG_TIMER, &a) == -1)
		return -1;
	all = xcalloc((size_t)s.n, 1);
	memset(all, 1, (size_t)s.n);
	check_once(&a, &s, all, &c);
	o = json_object_new_object();
	jset_int(o, "jobs", s.n);
	jset_int(o, "spread_ms", s.spread_ms);
	once_json(o, &c, s.spread_ms);
	jset_bool(o, "ok_check", once_ok(&c) && t.failed == 0);
	bench_emit(b, "ceiling_timer", o);
	samples_free(&c.late_us);
	arrivals_free(&a);
	free(all);
	return 0;
}
