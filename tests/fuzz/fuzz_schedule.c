/*
 * fuzz_schedule.c - libFuzzer target for schedules/: schedule_parse() and
 * schedule_parse_retry_after() on arbitrary bytes.
 *
 * Key decision: besides "no crash", the target checks the module's
 * invariants on every input and aborts when one breaks: a parsed schedule
 * has 1..SCHEDULE_MAX_WAITS non-negative waits within the horizon, prints,
 * and reads back to the same waits; a decision never retries earlier than
 * now; a Retry-After time is never before now.  Built only with
 * --enable-fuzz (see schedules/local.mk).
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "schedules/schedule.h"
#include "tests/fuzz/fuzz.h"

#define NOW_MS		INT64_C(1735689600000)	/* 2025-01-01T00:00:00Z */
#define HORIZON_MS	(INT64_C(30) * 86400000)

static void
check_schedule(const struct retry_schedule *s, int64_t horizon_ms)
{
	static const enum schedule_outcome_kind kinds[] = {
		SCHEDULE_OK, SCHEDULE_HTTP, SCHEDULE_TIMEOUT, SCHEDULE_NACK,
	};
	static const int statuses[] = { 200, 410, 429, 500, 503 };
	struct retry_schedule t;
	struct schedule_outcome o;
	struct schedule_decision d;
	char text[SCHEDULE_FORMAT_MAX];
	int i, k, len;

	fuzz_check(s->n >= 1 && s->n <= SCHEDULE_MAX_WAITS);
	for (i = 0; i < s->n; i++)
		fuzz_check(s->wait_ms[i] >= 0);
	fuzz_check(horizon_ms == 0 || schedule_total_ms(s) <= horizon_ms);

	len = schedule_format(s, text, sizeof(text));
	fuzz_check(len > 0 && (size_t)len == strlen(text));
	fuzz_check(schedule_parse(text, (size_t)len, horizon_ms, &t,
	    NULL) == 0);
	fuzz_check(t.n == s->n);
	fuzz_check(memcmp(t.wait_ms, s->wait_ms, (size_t)s->n *
	    sizeof(s->wait_ms[0])) == 0);

	for (i = 0; i <= s->n; i++)
		for (k = 0; k < (int)(sizeof(kinds) / sizeof(kinds[0])); k++) {
			o.kind = kinds[k];
			o.http_status = statuses[(i + k) % 5];
			o.retry_after_ms = NOW_MS + (i % 2 ? 90000 : -1);
			d = schedule_decide(s, i, &o, NOW_MS, 3600000);
			fuzz_check(d.reason != NULL);
			if (d.verdict == SCHEDULE_RETRY)
				fuzz_check(i >= 1 && i < s->n &&
				    d.next_ms >= schedule_add_ms(NOW_MS,
				    s->wait_ms[i]));
		}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct retry_schedule s;
	struct schedule_error err;
	const char *p = (const char *)data;
	char *str;
	int64_t abs_ms;

	if (schedule_parse(p, size, 0, &s, &err) == 0)
		check_schedule(&s, 0);
	else
		fuzz_check(err.pos <= size && memchr(err.reason, '\0',
		    sizeof(err.reason)) != NULL);
	if (schedule_parse(p, size, HORIZON_MS, &s, &err) == 0)
		check_schedule(&s, HORIZON_MS);
	else
		fuzz_check(err.pos <= size);

	if ((str = malloc(size + 1)) == NULL)
		return 0;
	memcpy(str, data, size);
	str[size] = '\0';
	if (schedule_parse_retry_after(str, NOW_MS, &abs_ms) == 0)
		fuzz_check(abs_ms >= NOW_MS);
	free(str);
	return 0;
}
