/*
 * decide.c - the retry policy: given the attempt that just finished, its
 * outcome and the time, is the job done, dead, or due again and when?
 *
 * Key decision: the rules are checked in a fixed order, first match wins:
 * success, 410 Gone, a malformed call, schedule exhausted, then retry at the
 * schedule's next wait, which a Retry-After on 429/503 may only move later
 * (up to the caller's cap), never earlier.  Every other outcome, whatever its
 * kind or status, is a plain failed attempt, so an outcome kind added later
 * cannot make a job retry without limit.
 */
#include "config.h"

#include "schedules/schedule.h"

static const char *const outcome_names[] = {
	[SCHEDULE_OK] = "ok",
	[SCHEDULE_HTTP] = "http",
	[SCHEDULE_TIMEOUT] = "timeout",
	[SCHEDULE_CONNECT] = "connect",
	[SCHEDULE_DNS] = "dns",
	[SCHEDULE_TLS] = "tls",
	[SCHEDULE_BLOCKED] = "blocked",
	[SCHEDULE_ERROR] = "error",
	[SCHEDULE_NACK] = "nack",
	[SCHEDULE_TTR] = "ttr",
};

static const char *const verdict_names[] = {
	[SCHEDULE_DONE] = "done",
	[SCHEDULE_RETRY] = "retry",
	[SCHEDULE_DEAD] = "dead",
};

static struct schedule_decision
verdict(enum schedule_verdict v, int64_t next_ms, const char *reason)
{
	struct schedule_decision d;

	d.verdict = v;
	d.next_ms = next_ms;
	d.reason = reason;
	return d;
}

struct schedule_decision
schedule_decide(const struct retry_schedule *s, int attempt,
    const struct schedule_outcome *o, int64_t now_ms,
    int64_t retry_after_cap_ms)
{
	int64_t next_ms, limit_ms, ra_ms;
	int status;

	status = o->kind == SCHEDULE_HTTP ? o->http_status : 0;
	if (o->kind == SCHEDULE_OK || (status >= 200 && status <= 299))
		return verdict(SCHEDULE_DONE, 0, "succeeded");
	if (status == 410)
		return verdict(SCHEDULE_DEAD, 0, "410 gone");
	if (s->n < 1 || s->n > SCHEDULE_MAX_WAITS || attempt < 1)
		return verdict(SCHEDULE_DEAD, 0, "invalid schedule or attempt");
	if (attempt >= s->n)
		return verdict(SCHEDULE_DEAD, 0, "schedule exhausted");

	/* wait_ms[attempt] is the wait before attempt + 1 (0-based array). */
	next_ms = schedule_add_ms(now_ms, s->wait_ms[attempt]);
	ra_ms = o->retry_after_ms;
	if ((status == 429 || status == 503) && ra_ms >= 0 &&
	    retry_after_cap_ms > 0 && ra_ms > next_ms) {
		limit_ms = schedule_add_ms(now_ms, retry_after_cap_ms);
		if (ra_ms <= limit_ms)
			return verdict(SCHEDULE_RETRY, ra_ms,
			    "retry-after honoured");
		if (limit_ms > next_ms)
			return verdict(SCHEDULE_RETRY, limit_ms,
			    "retry-after capped");
	}
	return verdict(SCHEDULE_RETRY, next_ms, "next wait");
}

int64_t
schedule_first_ms(const struct retry_schedule *s, int64_t due_ms)
{
	if (s->n < 1 || s->n > SCHEDULE_MAX_WAITS)
		return due_ms;
	return schedule_add_ms(due_ms, s->wait_ms[0]);
}

const char *
schedule_outcome_name(enum schedule_outcome_kind kind)
{
	if ((unsigned)kind >= sizeof(outcome_names) / sizeof(outcome_names[0]))
		return "unknown";
	return outcome_names[kind];
}

const char *
schedule_verdict_name(enum schedule_verdict v)
{
	if ((unsigned)v >= sizeof(verdict_names) / sizeof(verdict_names[0]))
		return "unknown";
	return verdict_names[v];
}
