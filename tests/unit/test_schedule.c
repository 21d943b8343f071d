/*
 * test_schedule.c - unit tests of schedules/: parse, format, decide and
 * Retry-After, one table per function and one row per case.
 *
 * Key decision: every table row becomes its own cmocka test (named after the
 * row, built at start-up), so the TAP output has one line per case and a
 * failing row is named in the summary instead of hiding inside a loop.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "schedules/schedule.h"

#define NOW	INT64_C(1000000000000)	/* 2001-09-09T01:46:40Z */
#define S	INT64_C(1000)
#define M	(60 * S)
#define H	(60 * M)
#define D	(24 * H)
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define MAXW	12

/* ---- parse: good inputs ---- */

struct good_row {
	const char	*in;
	size_t		 len;		/* 0: strlen(in) */
	int64_t		 horizon_ms;
	int		 n;
	int64_t		 ms[MAXW];
};

static const struct good_row good_rows[] = {
	{ "<0,0,2m,10m,10m,1h,2h,6h,15h>", 0, 0, 9,
	    { 0, 0, 2 * M, 10 * M, 10 * M, H, 2 * H, 6 * H, 15 * H } },
	{ "<1500ms>", 0, 0, 1, { 1500 } },
	{ "<5s>", 0, 0, 1, { 5 * S } },
	{ "<5>", 0, 0, 1, { 5 * S } },
	{ "<3m>", 0, 0, 1, { 3 * M } },
	{ "<2h>", 0, 0, 1, { 2 * H } },
	{ "<1d>", 0, 0, 1, { D } },
	{ "<0>", 0, 0, 1, { 0 } },
	{ "<0ms,0s,0m,0h,0d>", 0, 0, 5, { 0, 0, 0, 0, 0 } },
	{ "<007>", 0, 0, 1, { 7 * S } },
	{ "< 1 , 2s ,3m >", 0, 0, 3, { S, 2 * S, 3 * M } },
	{ "\t<1,\n2ms>\r\n", 0, 0, 2, { S, 2 } },
	{ "<9223372036854775807ms>", 0, 0, 1, { INT64_MAX } },
	{ "<106751991167d>", 0, 0, 1, { INT64_C(106751991167) * D } },
	{ "<1h,1h>", 0, 2 * H, 2, { H, H } },
	{ "<1h,1h>", 0, -1, 2, { H, H } },	/* negative: no horizon */
	{ "[0, 1000, 120000]", 0, 0, 3, { 0, S, 2 * M } },
	{ "[ 5 ]", 0, 0, 1, { 5 } },
	{ "[0]", 0, 0, 1, { 0 } },
	{ " [1,\n2]\n", 0, 0, 2, { 1, 2 } },
	{ "<1,2,3,4,5,6,7,8,9,10,11,12>", 0, 0, 12,
	    { S, 2 * S, 3 * S, 4 * S, 5 * S, 6 * S, 7 * S, 8 * S, 9 * S,
	      10 * S, 11 * S, 12 * S } },
};

static size_t
row_len(const char *in, size_t len)
{
	return len != 0 ? len : strlen(in);
}

static void
test_parse_good(void **state)
{
	const struct good_row *r = *state;
	struct retry_schedule s;
	struct schedule_error err = { 0, "" };
	int i, rc;

	rc = schedule_parse(r->in, row_len(r->in, r->len), r->horizon_ms, &s,
	    &err);
	if (rc != 0)
		fail_msg("rejected at %zu: %s", err.pos, err.reason);
	assert_int_equal(s.n, r->n);
	for (i = 0; i < r->n; i++)
		assert_int_equal(s.wait_ms[i], r->ms[i]);
}

/* A parsed schedule prints canonically and reads back the same. */
static void
test_round_trip(void **state)
{
	const struct good_row *r = *state;
	struct retry_schedule s, t;
	char text[SCHEDULE_FORMAT_MAX];
	int len;

	assert_int_equal(schedule_parse(r->in, row_len(r->in, r->len), 0, &s,
	    NULL), 0);
	len = schedule_format(&s, text, sizeof(text));
	assert_true(len > 0);
	assert_int_equal((size_t)len, strlen(text));
	assert_int_equal(schedule_parse(text, (size_t)len, 0, &t, NULL), 0);
	assert_int_equal(t.n, s.n);
	assert_memory_equal(t.wait_ms, s.wait_ms, s.n * sizeof(s.wait_ms[0]));
}

/* ---- parse: bad inputs ---- */

struct bad_row {
	const char	*in;
	size_t		 len;		/* 0: strlen(in) */
	int64_t		 horizon_ms;
	size_t		 pos;
	const char	*reason;	/* a substring of err.reason */
};

static const struct bad_row bad_rows[] = {
	{ "<0,,2m>", 0, 0, 3, "empty entry" },
	{ "<,1>", 0, 0, 1, "empty entry" },
	{ "<1,>", 0, 0, 3, "empty entry" },
	{ "<-1>", 0, 0, 1, "negative" },
	{ "<+1>", 0, 0, 1, "expected a number" },
	{ "<2x>", 0, 0, 2, "unknown unit 'x'" },
	{ "<2M>", 0, 0, 2, "unknown unit" },
	{ "<1mss>", 0, 0, 2, "unknown unit" },
	{ "<1 s>", 0, 0, 2, "blank between" },
	{ "<1.5s>", 0, 0, 2, "not an integer" },
	{ "<1;2>", 0, 0, 2, "expected ',' or '>'" },
	{ "<>", 0, 0, 1, "empty schedule" },
	{ "< >", 0, 0, 2, "empty schedule" },
	{ "", 0, 0, 0, "empty" },
	{ "  ", 0, 0, 2, "empty" },
	{ "0,1s>", 0, 0, 0, "expected '<' or '['" },
	{ "<0,1s", 0, 0, 5, "missing '>'" },
	{ "<0,", 0, 0, 3, "missing '>'" },
	{ "<0,1s>x", 0, 0, 6, "trailing garbage" },
	{ "<0> <1>", 0, 0, 4, "trailing garbage" },
	{ "<99999999999999999999>", 0, 0, 1, "overflows" },
	{ "<9223372036854775808ms>", 0, 0, 1, "overflows" },
	{ "<106751991168d>", 0, 0, 1, "overflows" },
	{ "<3,9223372036854775807ms>", 0, 0, 3, "total of waits overflows" },
	{ "<1h,1h,1ms>", 0, 2 * H, 7, "beyond the horizon" },
	{ "<1,\0 2>", 7, 0, 3, "NUL" },
	{ "\0", 1, 0, 0, "NUL" },
	{ "[1.5]", 0, 0, 2, "not an integer" },
	{ "[1e3]", 0, 0, 2, "not an integer" },
	{ "[-1]", 0, 0, 1, "negative" },
	{ "[]", 0, 0, 1, "empty schedule" },
	{ "[01]", 0, 0, 1, "leading zero" },
	{ "[1s]", 0, 0, 2, "no units" },
	{ "[1 s]", 0, 0, 3, "expected ',' or ']'" },
	{ "[1,2>", 0, 0, 4, "expected ',' or ']'" },
	{ "<1,2]", 0, 0, 4, "expected ',' or '>'" },
	{ "[1,2", 0, 0, 4, "missing ']'" },
};

static void
test_parse_bad(void **state)
{
	const struct bad_row *r = *state;
	struct retry_schedule s;
	struct schedule_error err = { 9999, "" };

	s.n = -7;
	errno = 0;
	assert_int_equal(schedule_parse(r->in, row_len(r->in, r->len),
	    r->horizon_ms, &s, &err), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(s.n, -7);		/* untouched on error */
	if (err.pos != r->pos || strstr(err.reason, r->reason) == NULL)
		fail_msg("got %zu \"%s\", want %zu \"%s\"", err.pos,
		    err.reason, r->pos, r->reason);
}

/* "<0,0,...>" with n zero waits, in buf. */
static size_t
zeros(char *buf, size_t size, int n)
{
	size_t len = 0;
	int i;

	for (i = 0; i < n; i++)
		len += (size_t)snprintf(buf + len, size - len, "%c0",
		    i == 0 ? '<' : ',');
	len += (size_t)snprintf(buf + len, size - len, ">");
	return len;
}

static void
test_parse_100_waits(void **state)
{
	struct retry_schedule s;
	char buf[512];
	size_t len;

	len = zeros(buf, sizeof(buf), SCHEDULE_MAX_WAITS);
	assert_int_equal(schedule_parse(buf, len, 0, &s, NULL), 0);
	assert_int_equal(s.n, SCHEDULE_MAX_WAITS);
}

static void
test_parse_101_waits(void **state)
{
	struct schedule_error err;
	struct retry_schedule s;
	char buf[512];
	size_t len;

	len = zeros(buf, sizeof(buf), SCHEDULE_MAX_WAITS + 1);
	assert_int_equal(schedule_parse(buf, len, 0, &s, &err), -1);
	assert_int_equal(err.pos, 1 + 2 * SCHEDULE_MAX_WAITS);
	assert_non_null(strstr(err.reason, "more than 100"));
}

static void
test_parse_null_err(void **state)
{
	struct retry_schedule s;

	assert_int_equal(schedule_parse("<x>", 3, 0, &s, NULL), -1);
	assert_int_equal(schedule_parse(NULL, 0, 0, &s, NULL), -1);
}

/* ---- schedule_from_ms ---- */

static void
test_from_ms(void **state)
{
	static const int64_t ok[] = { 0, S, 2 * M };
	static const int64_t neg[] = { 0, -1 };
	static const int64_t big[] = { INT64_MAX, 1 };
	struct retry_schedule s;
	struct schedule_error err;
	int64_t many[SCHEDULE_MAX_WAITS + 1];

	assert_int_equal(schedule_from_ms(ok, 3, 0, &s, &err), 0);
	assert_int_equal(s.n, 3);
	assert_int_equal(s.wait_ms[2], 2 * M);
	assert_int_equal(schedule_total_ms(&s), S + 2 * M);
	assert_int_equal(schedule_from_ms(ok, 0, 0, &s, &err), -1);
	assert_non_null(strstr(err.reason, "empty schedule"));
	assert_int_equal(schedule_from_ms(neg, 2, 0, &s, &err), -1);
	assert_int_equal(err.pos, 1);
	assert_int_equal(schedule_from_ms(big, 2, 0, &s, &err), -1);
	assert_int_equal(err.pos, 1);
	assert_int_equal(schedule_from_ms(ok, 3, 2 * M, &s, &err), -1);
	assert_int_equal(err.pos, 2);
	assert_non_null(strstr(err.reason, "horizon"));
	memset(many, 0, sizeof(many));
	assert_int_equal(schedule_from_ms(many, SCHEDULE_MAX_WAITS, 0, &s,
	    &err), 0);
	assert_int_equal(schedule_from_ms(many, SCHEDULE_MAX_WAITS + 1, 0, &s,
	    &err), -1);
	assert_int_equal(err.pos, SCHEDULE_MAX_WAITS);
}

/* ---- format ---- */

struct format_row {
	int		 n;
	int64_t		 ms[MAXW];
	const char	*out;		/* NULL: must fail with EINVAL */
};

static const struct format_row format_rows[] = {
	{ 9, { 0, 0, 2 * M, 10 * M, 10 * M, H, 2 * H, 6 * H, 15 * H },
	    "<0,0,2m,10m,10m,1h,2h,6h,15h>" },
	{ 1, { 1500 }, "<1500ms>" },
	{ 1, { 5 * S }, "<5s>" },
	{ 1, { 90 * S }, "<90s>" },
	{ 1, { 61 * M }, "<61m>" },
	{ 1, { 25 * H }, "<25h>" },
	{ 1, { 2 * D }, "<2d>" },
	{ 1, { 0 }, "<0>" },
	{ 1, { 1 }, "<1ms>" },
	{ 1, { INT64_MAX }, "<9223372036854775807ms>" },
	{ 3, { D + 1, H + S, M + 1 }, "<86400001ms,3601s,60001ms>" },
	{ 0, { 0 }, NULL },
	{ 2, { 0, -1 }, NULL },
	{ 2, { INT64_MAX, 1 }, NULL },
	{ SCHEDULE_MAX_WAITS + 1, { 0 }, NULL },
};

static void
test_format(void **state)
{
	const struct format_row *r = *state;
	struct retry_schedule s;
	char out[SCHEDULE_FORMAT_MAX];
	int i, len;

	memset(&s, 0, sizeof(s));
	s.n = r->n;
	for (i = 0; i < r->n && i < MAXW; i++)
		s.wait_ms[i] = r->ms[i];
	errno = 0;
	len = schedule_format(&s, out, sizeof(out));
	if (r->out == NULL) {
		assert_int_equal(len, -1);
		assert_int_equal(errno, EINVAL);
		assert_string_equal(out, "");
		return;
	}
	assert_string_equal(out, r->out);
	assert_int_equal(len, (int)strlen(r->out));
}

/* Exactly enough room works; one byte less fails with ENOBUFS. */
static void
test_format_room(void **state)
{
	struct retry_schedule s;
	char out[SCHEDULE_FORMAT_MAX];
	int i, len;

	s.n = SCHEDULE_MAX_WAITS;
	for (i = 0; i < s.n; i++)	/* the longest text that can parse */
		s.wait_ms[i] = INT64_MAX / SCHEDULE_MAX_WAITS - 1000 + i;
	len = schedule_format(&s, out, sizeof(out));
	assert_true(len > 0);
	assert_int_equal(schedule_format(&s, out, (size_t)len + 1), len);
	errno = 0;
	assert_int_equal(schedule_format(&s, out, (size_t)len), -1);
	assert_int_equal(errno, ENOBUFS);
	assert_string_equal(out, "");
	assert_int_equal(schedule_format(&s, NULL, 0), -1);
	assert_int_equal(schedule_format(&s, out, 1), -1);
	assert_string_equal(out, "");
}

/* Pseudo-random schedules (fixed seed) survive format then parse. */
static void
test_round_trip_random(void **state)
{
	static const int64_t scale[] = { 1, S, M, H, D };
	struct retry_schedule s, t;
	char text[SCHEDULE_FORMAT_MAX];
	uint64_t x = 88172645463325252u;
	int i, iter, len;

	for (iter = 0; iter < 2000; iter++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		s.n = 1 + (int)(x % SCHEDULE_MAX_WAITS);
		for (i = 0; i < s.n; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			s.wait_ms[i] = (int64_t)(x % 100000) *
			    scale[(x >> 32) % NELEM(scale)] +
			    (int64_t)((x >> 40) % 2);
		}
		len = schedule_format(&s, text, sizeof(text));
		assert_true(len > 0);
		assert_int_equal(schedule_parse(text, (size_t)len, 0, &t,
		    NULL), 0);
		assert_int_equal(t.n, s.n);
		assert_memory_equal(t.wait_ms, s.wait_ms,
		    s.n * sizeof(s.wait_ms[0]));
	}
}

/* ---- decide ---- */

struct decide_row {
	const char	*name;
	int		 n;
	int64_t		 ms[MAXW];
	int		 attempt;
	enum schedule_outcome_kind kind;
	int		 status;
	int64_t		 retry_after_ms;
	int64_t		 now_ms;
	int64_t		 cap_ms;
	enum schedule_verdict verdict;
	int64_t		 next_ms;	/* checked for RETRY */
	const char	*reason;	/* a substring */
};

#define W3	3, { 0, M, 5 * M }	/* three attempts: due, +1m, +5m */
#define CAP	H

static const struct decide_row decide_rows[] = {
	{ "ok is done", W3, 1, SCHEDULE_OK, 0, -1, NOW, CAP,
	    SCHEDULE_DONE, 0, "succeeded" },
	{ "http 200 is done", W3, 1, SCHEDULE_HTTP, 200, -1, NOW, CAP,
	    SCHEDULE_DONE, 0, "succeeded" },
	{ "http 204 on the last attempt is done", W3, 3, SCHEDULE_HTTP, 204,
	    -1, NOW, CAP, SCHEDULE_DONE, 0, "succeeded" },
	{ "ok on the last attempt is done", W3, 3, SCHEDULE_OK, 0, -1, NOW,
	    CAP, SCHEDULE_DONE, 0, "succeeded" },
	{ "500 at 1 of 3 retries after wait[1]", W3, 1, SCHEDULE_HTTP, 500,
	    -1, NOW, CAP, SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "500 at 2 of 3 retries after wait[2]", W3, 2, SCHEDULE_HTTP, 500,
	    -1, NOW, CAP, SCHEDULE_RETRY, NOW + 5 * M, "next wait" },
	{ "500 at 3 of 3 is dead", W3, 3, SCHEDULE_HTTP, 500, -1, NOW, CAP,
	    SCHEDULE_DEAD, 0, "schedule exhausted" },
	{ "attempt past n is dead", W3, 7, SCHEDULE_HTTP, 500, -1, NOW, CAP,
	    SCHEDULE_DEAD, 0, "schedule exhausted" },
	{ "one-wait schedule fails once, dead", 1, { 0 }, 1, SCHEDULE_TIMEOUT,
	    0, -1, NOW, CAP, SCHEDULE_DEAD, 0, "schedule exhausted" },
	{ "410 at 1 of 3 is dead", W3, 1, SCHEDULE_HTTP, 410, -1, NOW, CAP,
	    SCHEDULE_DEAD, 0, "410 gone" },
	{ "410 on the last attempt is dead", W3, 3, SCHEDULE_HTTP, 410, -1,
	    NOW, CAP, SCHEDULE_DEAD, 0, "410 gone" },
	{ "429 retry-after later is honoured", W3, 1, SCHEDULE_HTTP, 429,
	    NOW + 2 * M, NOW, CAP, SCHEDULE_RETRY, NOW + 2 * M,
	    "retry-after honoured" },
	{ "503 retry-after later is honoured", W3, 1, SCHEDULE_HTTP, 503,
	    NOW + 2 * M, NOW, CAP, SCHEDULE_RETRY, NOW + 2 * M,
	    "retry-after honoured" },
	{ "429 retry-after at the cap is honoured", W3, 1, SCHEDULE_HTTP, 429,
	    NOW + CAP, NOW, CAP, SCHEDULE_RETRY, NOW + CAP,
	    "retry-after honoured" },
	{ "429 retry-after earlier is ignored", W3, 1, SCHEDULE_HTTP, 429,
	    NOW + 30 * S, NOW, CAP, SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "429 retry-after equal is ignored", W3, 1, SCHEDULE_HTTP, 429,
	    NOW + M, NOW, CAP, SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "429 retry-after now is ignored", W3, 1, SCHEDULE_HTTP, 429,
	    NOW, NOW, CAP, SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "429 retry-after beyond the cap is capped", W3, 1, SCHEDULE_HTTP,
	    429, NOW + 2 * H, NOW, CAP, SCHEDULE_RETRY, NOW + CAP,
	    "retry-after capped" },
	{ "503 retry-after beyond the cap is capped", W3, 2, SCHEDULE_HTTP,
	    503, NOW + 2 * H, NOW, CAP, SCHEDULE_RETRY, NOW + CAP,
	    "retry-after capped" },
	{ "cap below the next wait keeps the wait", W3, 2, SCHEDULE_HTTP, 429,
	    NOW + H, NOW, 30 * S, SCHEDULE_RETRY, NOW + 5 * M, "next wait" },
	{ "cap 0 ignores retry-after", W3, 1, SCHEDULE_HTTP, 429,
	    NOW + 2 * M, NOW, 0, SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "cap -1 ignores retry-after", W3, 1, SCHEDULE_HTTP, 503,
	    NOW + 2 * M, NOW, -1, SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "429 without retry-after", W3, 1, SCHEDULE_HTTP, 429, -1, NOW, CAP,
	    SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "500 with retry-after ignores it", W3, 1, SCHEDULE_HTTP, 500,
	    NOW + 2 * M, NOW, CAP, SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "502 with retry-after ignores it", W3, 1, SCHEDULE_HTTP, 502,
	    NOW + 2 * M, NOW, CAP, SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "429 on the last attempt is dead", W3, 3, SCHEDULE_HTTP, 429,
	    NOW + 2 * M, NOW, CAP, SCHEDULE_DEAD, 0, "schedule exhausted" },
	{ "100 retries", W3, 1, SCHEDULE_HTTP, 100, -1, NOW, CAP,
	    SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "301 retries (no redirects)", W3, 1, SCHEDULE_HTTP, 301, -1, NOW,
	    CAP, SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "404 retries", W3, 1, SCHEDULE_HTTP, 404, -1, NOW, CAP,
	    SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "status 0 retries", W3, 1, SCHEDULE_HTTP, 0, -1, NOW, CAP,
	    SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "timeout retries", W3, 1, SCHEDULE_TIMEOUT, 0, -1, NOW, CAP,
	    SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "connect retries", W3, 1, SCHEDULE_CONNECT, 0, -1, NOW, CAP,
	    SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "dns retries", W3, 1, SCHEDULE_DNS, 0, -1, NOW, CAP,
	    SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "tls retries", W3, 1, SCHEDULE_TLS, 0, -1, NOW, CAP,
	    SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "blocked retries", W3, 1, SCHEDULE_BLOCKED, 0, -1, NOW, CAP,
	    SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "other error retries", W3, 1, SCHEDULE_ERROR, 0, -1, NOW, CAP,
	    SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "nack retries", W3, 1, SCHEDULE_NACK, 0, -1, NOW, CAP,
	    SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "ttr retries", W3, 2, SCHEDULE_TTR, 0, -1, NOW, CAP,
	    SCHEDULE_RETRY, NOW + 5 * M, "next wait" },
	{ "status 200 outside HTTP kind is a failure", W3, 1,
	    SCHEDULE_TIMEOUT, 200, -1, NOW, CAP, SCHEDULE_RETRY, NOW + M,
	    "next wait" },
	{ "status 410 outside HTTP kind is a failure", W3, 1, SCHEDULE_NACK,
	    410, -1, NOW, CAP, SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "unknown kind is a failure", W3, 1, (enum schedule_outcome_kind)99,
	    0, -1, NOW, CAP, SCHEDULE_RETRY, NOW + M, "next wait" },
	{ "attempt 0 is dead", W3, 0, SCHEDULE_HTTP, 500, -1, NOW, CAP,
	    SCHEDULE_DEAD, 0, "invalid" },
	{ "empty schedule is dead", 0, { 0 }, 1, SCHEDULE_HTTP, 500, -1, NOW,
	    CAP, SCHEDULE_DEAD, 0, "invalid" },
	{ "next time saturates", 2, { 0, D }, 1, SCHEDULE_HTTP, 500, -1,
	    INT64_MAX - 5, CAP, SCHEDULE_RETRY, INT64_MAX, "next wait" },
	{ "cap saturates", 2, { 0, M }, 1, SCHEDULE_HTTP, 429, INT64_MAX,
	    INT64_MAX - H, INT64_MAX, SCHEDULE_RETRY, INT64_MAX,
	    "retry-after honoured" },
};

static void
test_decide(void **state)
{
	const struct decide_row *r = *state;
	struct retry_schedule s;
	struct schedule_outcome o;
	struct schedule_decision d;
	int i;

	memset(&s, 0, sizeof(s));
	s.n = r->n;
	for (i = 0; i < r->n; i++)
		s.wait_ms[i] = r->ms[i];
	o.kind = r->kind;
	o.http_status = r->status;
	o.retry_after_ms = r->retry_after_ms;
	d = schedule_decide(&s, r->attempt, &o, r->now_ms, r->cap_ms);
	assert_string_equal(schedule_verdict_name(d.verdict),
	    schedule_verdict_name(r->verdict));
	if (r->verdict == SCHEDULE_RETRY)
		assert_int_equal(d.next_ms, r->next_ms);
	assert_non_null(d.reason);
	if (strstr(d.reason, r->reason) == NULL)
		fail_msg("reason \"%s\", want \"%s\"", d.reason, r->reason);
}

static void
test_first_ms(void **state)
{
	struct retry_schedule s;

	assert_int_equal(schedule_parse("<0,1m>", 6, 0, &s, NULL), 0);
	assert_int_equal(schedule_first_ms(&s, NOW), NOW);
	assert_int_equal(schedule_parse("<30s,1m>", 8, 0, &s, NULL), 0);
	assert_int_equal(schedule_first_ms(&s, NOW), NOW + 30 * S);
	assert_int_equal(schedule_first_ms(&s, INT64_MAX - 1), INT64_MAX);
	s.n = 0;
	assert_int_equal(schedule_first_ms(&s, NOW), NOW);
}

/* The API's example, attempt by attempt, each failing 10 s after it ran. */
static void
test_worked_example(void **state)
{
	static const int64_t runs[] = {
		NOW, NOW + 10 * S, NOW + 20 * S + 2 * M,
		NOW + 30 * S + 12 * M, NOW + 40 * S + 22 * M,
		NOW + 50 * S + 22 * M + H, NOW + 60 * S + 22 * M + 3 * H,
		NOW + 70 * S + 22 * M + 9 * H, NOW + 80 * S + 22 * M + 24 * H,
	};
	const char *text = "<0,0,2m,10m,10m,1h,2h,6h,15h>";
	struct retry_schedule s;
	struct schedule_outcome o = { SCHEDULE_HTTP, 500, -1 };
	struct schedule_decision d;
	int64_t at;
	int attempt;

	assert_int_equal(schedule_parse(text, strlen(text), 0, &s, NULL), 0);
	at = schedule_first_ms(&s, NOW);
	for (attempt = 1; attempt <= s.n; attempt++) {
		assert_int_equal(at, runs[attempt - 1]);
		d = schedule_decide(&s, attempt, &o, at + 10 * S, CAP);
		if (attempt < s.n) {
			assert_int_equal(d.verdict, SCHEDULE_RETRY);
			at = d.next_ms;
		} else
			assert_int_equal(d.verdict, SCHEDULE_DEAD);
	}
}

static void
test_names(void **state)
{
	assert_string_equal(schedule_outcome_name(SCHEDULE_OK), "ok");
	assert_string_equal(schedule_outcome_name(SCHEDULE_TTR), "ttr");
	assert_string_equal(schedule_outcome_name(SCHEDULE_BLOCKED),
	    "blocked");
	assert_string_equal(schedule_outcome_name(
	    (enum schedule_outcome_kind)42), "unknown");
	assert_string_equal(schedule_outcome_name(
	    (enum schedule_outcome_kind)-1), "unknown");
	assert_string_equal(schedule_verdict_name(SCHEDULE_DEAD), "dead");
	assert_string_equal(schedule_verdict_name(
	    (enum schedule_verdict)9), "unknown");
}

/* ---- Retry-After ---- */

#define NOV94	INT64_C(784111777000)	/* Sun, 06 Nov 1994 08:49:37 GMT */
#define Y2025	INT64_C(1735689600000)	/* Wed, 01 Jan 2025 00:00:00 GMT */

struct ra_row {
	const char	*in;
	int64_t		 now_ms;
	int		 rc;
	int64_t		 abs_ms;	/* checked when rc == 0 */
};

static const struct ra_row ra_rows[] = {
	{ "120", NOW, 0, NOW + 120 * S },
	{ "0", NOW, 0, NOW },
	{ " 5\t", NOW, 0, NOW + 5 * S },
	{ "007", NOW, 0, NOW + 7 * S },
	{ "2147483647", NOW, 0, NOW + INT64_C(2147483647) * S },
	{ "2147483648", NOW, 0, NOW + INT64_C(2147483648) * S },
	{ "99999999999999999999999999999", NOW, 0,
	    NOW + INT64_C(2147483648) * S },
	{ "5", INT64_MAX - 1, 0, INT64_MAX },
	{ "Sun, 06 Nov 1994 08:49:37 GMT", NOV94 - M, 0, NOV94 },
	{ "  Sun, 06 Nov 1994 08:49:37 GMT ", NOV94 - M, 0, NOV94 },
	{ "Sunday, 06-Nov-94 08:49:37 GMT", NOV94 - M, 0, NOV94 },
	{ "Sun Nov  6 08:49:37 1994", NOV94 - M, 0, NOV94 },
	{ "Sun Nov 06 08:49:37 1994", NOV94 - M, 0, NOV94 },
	{ "Mon, 06 Nov 1994 08:49:37 GMT", NOV94 - M, 0, NOV94 },
	{ "Sun, 06 Nov 1994 08:49:60 GMT", NOV94 - M, 0, NOV94 + 23 * S },
	{ "Thu, 29 Feb 2024 12:00:00 GMT", NOW, 0, INT64_C(1709208000000) },
	{ "Fri, 31 Dec 9999 23:59:59 GMT", NOW, 0,
	    INT64_C(253402300799000) },
	{ "Wed, 01 Jan 2025 00:00:00 GMT", NOW, 0, Y2025 },
	{ "Sun, 06 Nov 1994 08:49:37 GMT", NOW, 0, NOW },	/* past */
	{ "Sat, 05 Nov 1994 08:49:37 GMT", NOV94, 0, NOV94 },
	{ "Thu, 01 Jan 1970 00:00:00 GMT", NOW, 0, NOW },
	{ "Wed, 31 Dec 1969 23:59:59 GMT", NOW, 0, NOW },
	{ "Tue, 01 Jan 0000 00:00:00 GMT", NOW, 0, NOW },
	{ "Tuesday, 01-Jan-70 00:00:00 GMT", Y2025, 0,
	    INT64_C(3155760000000) },			/* 2070 */
	{ "Tuesday, 01-Jan-80 00:00:00 GMT", Y2025, 0, Y2025 },	/* 1980 */
	{ "Tuesday, 01-Jan-25 00:00:01 GMT", Y2025, 0, Y2025 + S },
	{ "Sun, 06 Nov 1994 08:49:37 GMT", INT64_MAX, 0, INT64_MAX },
	{ "Sunday, 06-Nov-94 08:49:37 GMT", INT64_MAX, 0, INT64_MAX },
	{ "Sunday, 06-Nov-94 08:49:37 GMT", -5, 0, NOV94 },
	{ "", NOW, -1, 0 },
	{ "   ", NOW, -1, 0 },
	{ "-1", NOW, -1, 0 },
	{ "+5", NOW, -1, 0 },
	{ "1.5", NOW, -1, 0 },
	{ "5s", NOW, -1, 0 },
	{ "5 5", NOW, -1, 0 },
	{ "soon", NOW, -1, 0 },
	{ "Fri, 29 Feb 2023 12:00:00 GMT", NOW, -1, 0 },
	{ "Thu, 31 Apr 2025 12:00:00 GMT", NOW, -1, 0 },
	{ "Thu, 00 Apr 2025 12:00:00 GMT", NOW, -1, 0 },
	{ "Sun, 06 Nov 1994 24:00:00 GMT", NOW, -1, 0 },
	{ "Sun, 06 Nov 1994 08:60:00 GMT", NOW, -1, 0 },
	{ "Sun, 06 Nov 1994 08:49:61 GMT", NOW, -1, 0 },
	{ "sun, 06 nov 1994 08:49:37 gmt", NOW, -1, 0 },
	{ "Sun, 06 Nov 1994 08:49:37 UTC", NOW, -1, 0 },
	{ "Sun, 6 Nov 1994 08:49:37 GMT", NOW, -1, 0 },
	{ "Sun, 06 Nov 94 08:49:37 GMT", NOW, -1, 0 },
	{ "Sun, 06 Nov 1994 08:49:37 GMT x", NOW, -1, 0 },
	{ "Sun, 06 Nov 1994 08:49:37", NOW, -1, 0 },
	{ "Sun, 06 Xyz 1994 08:49:37 GMT", NOW, -1, 0 },
	{ "Sunday, 06-Nov-1994 08:49:37 GMT", NOW, -1, 0 },
	{ "Sun Nov  6 08:49:37 1994 GMT", NOW, -1, 0 },
	{ "Sun Nov 6 08:49:37 1994", NOW, -1, 0 },
	{ "Sun,06 Nov 1994 08:49:37 GMT", NOW, -1, 0 },
};

static void
test_retry_after(void **state)
{
	const struct ra_row *r = *state;
	int64_t abs_ms = -12345;
	int rc;

	errno = 0;
	rc = schedule_parse_retry_after(r->in, r->now_ms, &abs_ms);
	assert_int_equal(rc, r->rc);
	if (rc == 0)
		assert_int_equal(abs_ms, r->abs_ms);
	else {
		assert_int_equal(errno, EINVAL);
		assert_int_equal(abs_ms, -12345);
	}
}

static void
test_retry_after_null(void **state)
{
	int64_t abs_ms;

	assert_int_equal(schedule_parse_retry_after(NULL, NOW, &abs_ms), -1);
}

/* ---- the group: one test per table row ---- */

static struct CMUnitTest *tests;
static size_t ntests, maxtests;

/* Printable, single-line, without TAP's '#'. */
static char *
row_name(const char *kind, const char *in, size_t len)
{
	char *name, *p;
	size_t i, size;

	size = strlen(kind) + 3 + 4 * len + 1;
	if ((name = malloc(size)) == NULL)
		abort();
	p = name + snprintf(name, size, "%s: ", kind);
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)in[i];

		if (c < 0x20 || c >= 0x7f || c == '#' || c == '\\')
			p += snprintf(p, size - (size_t)(p - name), "\\x%02x",
			    c);
		else
			*p++ = (char)c;
	}
	*p = '\0';
	return name;
}

/* name is malloc'd (row_name) and freed by main() after the run. */
static void
add_row(char *name, CMUnitTestFunction f, const void *row)
{
	if (ntests == maxtests) {
		maxtests = maxtests ? 2 * maxtests : 64;
		tests = realloc(tests, maxtests * sizeof(*tests));
		if (tests == NULL)
			abort();
	}
	memset(&tests[ntests], 0, sizeof(tests[ntests]));
	tests[ntests].name = name;
	tests[ntests].test_func = f;
	tests[ntests].initial_state = (void *)(uintptr_t)row;
	ntests++;
}

static void
add(const char *name, CMUnitTestFunction f)
{
	size_t size = strlen(name) + 1;
	char *copy;

	if ((copy = malloc(size)) == NULL)
		abort();
	memcpy(copy, name, size);
	add_row(copy, f, NULL);
}

int
main(void)
{
	size_t i;
	int rc;

	for (i = 0; i < NELEM(good_rows); i++)
		add_row(row_name("parse ok", good_rows[i].in,
		    row_len(good_rows[i].in, good_rows[i].len)),
		    test_parse_good, &good_rows[i]);
	add("parse ok: 100 waits", test_parse_100_waits);
	for (i = 0; i < NELEM(bad_rows); i++)
		add_row(row_name("parse bad", bad_rows[i].in,
		    row_len(bad_rows[i].in, bad_rows[i].len)),
		    test_parse_bad, &bad_rows[i]);
	add("parse bad: 101 waits", test_parse_101_waits);
	add("parse bad: no err, NULL text", test_parse_null_err);
	add("from_ms", test_from_ms);
	for (i = 0; i < NELEM(good_rows); i++)
		add_row(row_name("round trip", good_rows[i].in,
		    row_len(good_rows[i].in, good_rows[i].len)),
		    test_round_trip, &good_rows[i]);
	add("round trip: random schedules", test_round_trip_random);
	for (i = 0; i < NELEM(format_rows); i++) {
		const char *out = format_rows[i].out ? format_rows[i].out :
		    "(invalid)";

		add_row(row_name("format", out, strlen(out)), test_format,
		    &format_rows[i]);
	}
	add("format: buffer size", test_format_room);
	for (i = 0; i < NELEM(decide_rows); i++)
		add_row(row_name("decide", decide_rows[i].name,
		    strlen(decide_rows[i].name)), test_decide, &decide_rows[i]);
	add("decide: first attempt", test_first_ms);
	add("decide: API worked example", test_worked_example);
	add("names", test_names);
	for (i = 0; i < NELEM(ra_rows); i++)
		add_row(row_name("retry-after", ra_rows[i].in,
		    strlen(ra_rows[i].in)), test_retry_after, &ra_rows[i]);
	add("retry-after: NULL", test_retry_after_null);

	rc = _cmocka_run_group_tests("schedule", tests, ntests, NULL, NULL);
	for (i = 0; i < ntests; i++)
		free((char *)(uintptr_t)tests[i].name);
	free(tests);
	return rc;
}
