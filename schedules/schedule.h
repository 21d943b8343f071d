/*
 * schedule.h - retry schedules: parse, print, validate, and decide what
 * happens after an attempt (docs/internals/SCHEDULES.md).
 *
 * Key decision: the module is pure.  It reads no clock, does no I/O and
 * allocates nothing; every "now" is a parameter, so the whole retry policy is
 * a function of its inputs and is tested as a table.  All time arithmetic
 * saturates at INT64_MIN/INT64_MAX instead of overflowing.
 */
#ifndef RETRYD_SCHEDULES_SCHEDULE_H
#define RETRYD_SCHEDULES_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#define SCHEDULE_MAX_WAITS	100
/* Longest canonical text plus its NUL: "<" ">" and per wait at most
 * 19 digits + "ms" + ",". */
#define SCHEDULE_FORMAT_MAX	(2 + SCHEDULE_MAX_WAITS * 22)

struct retry_schedule {
	int	 n;				/* 1..SCHEDULE_MAX_WAITS */
	int64_t	 wait_ms[SCHEDULE_MAX_WAITS];	/* each >= 0 */
};

struct schedule_error {
	size_t	 pos;		/* 0-based byte offset (array index for
				   schedule_from_ms) */
	char	 reason[128];	/* NUL-terminated, no trailing period */
};

/*
 * Parses the text form "<0,0,2m,10m>" (units ms s m h d, bare number is
 * seconds) or the JSON-array form "[0, 1000, 120000]" (milliseconds).  s need
 * not be NUL-terminated; a NUL among its len bytes is an error.  horizon_ms > 0
 * bounds the total of the waits; 0 means no bound.  Returns 0, or -1 with errno
 * EINVAL and *err filled (err may be NULL); *out is written only on success.
 */
int	schedule_parse(const char *s, size_t len, int64_t horizon_ms,
	    struct retry_schedule *out, struct schedule_error *err);
/* The same checks for waits already parsed (e.g. by the JSON layer). */
int	schedule_from_ms(const int64_t *ms, size_t n, int64_t horizon_ms,
	    struct retry_schedule *out, struct schedule_error *err);
/*
 * Writes the canonical text form, NUL-terminated: each wait in the largest
 * unit that divides it exactly (120000 -> 2m, 5000 -> 5s, 1500 -> 1500ms,
 * 0 -> 0).  Returns its length, or -1 with errno EINVAL for an invalid
 * schedule or ENOBUFS when outlen is too small (SCHEDULE_FORMAT_MAX always
 * suffices); on -1, out is "" when outlen > 0.
 */
int	schedule_format(const struct retry_schedule *s, char *out,
	    size_t outlen);
/* Sum of the waits (never overflows for a schedule that parsed). */
int64_t	schedule_total_ms(const struct retry_schedule *s);
/* t_ms + d_ms, saturating at INT64_MIN/INT64_MAX. */
int64_t	schedule_add_ms(int64_t t_ms, int64_t d_ms);

enum schedule_outcome_kind {
	SCHEDULE_OK = 0,	/* 2xx, or a pull ack */
	SCHEDULE_HTTP,		/* a non-2xx status in http_status */
	SCHEDULE_TIMEOUT,
	SCHEDULE_CONNECT,	/* refused or reset */
	SCHEDULE_DNS,
	SCHEDULE_TLS,
	SCHEDULE_BLOCKED,	/* target refused by the SSRF policy */
	SCHEDULE_ERROR,		/* any other transport error */
	SCHEDULE_NACK,		/* pull consumer nack */
	SCHEDULE_TTR,		/* pull reservation's ttr expired */
};

struct schedule_outcome {
	enum schedule_outcome_kind kind;
	int	 http_status;		/* for SCHEDULE_HTTP */
	int64_t	 retry_after_ms;	/* absolute wall ms, or -1 */
};

enum schedule_verdict {
	SCHEDULE_DONE = 0,
	SCHEDULE_RETRY,
	SCHEDULE_DEAD,
};

struct schedule_decision {
	enum schedule_verdict verdict;
	int64_t	 next_ms;	/* wall ms of the next attempt, for RETRY */
	const char *reason;	/* static string */
};

/*
 * attempt is the 1-based attempt that just finished at now_ms.  A Retry-After
 * on 429/503 moves the next attempt later, never earlier, and never past
 * now_ms + retry_after_cap_ms; a cap <= 0 ignores Retry-After.
 */
struct schedule_decision schedule_decide(const struct retry_schedule *s,
	    int attempt, const struct schedule_outcome *o, int64_t now_ms,
	    int64_t retry_after_cap_ms);
/* When attempt 1 runs: due_ms + wait[0]. */
int64_t	schedule_first_ms(const struct retry_schedule *s, int64_t due_ms);
/* "ok", "http", "timeout", ...; "unknown" outside the enum. */
const char *schedule_outcome_name(enum schedule_outcome_kind kind);
const char *schedule_verdict_name(enum schedule_verdict verdict);

/*
 * Parses a Retry-After header value (NUL-terminated, surrounding blanks
 * allowed): delta-seconds, or an HTTP-date in IMF-fixdate, RFC 850 or asctime
 * form.  Sets *abs_ms to the absolute wall time: now_ms + delta (a delta past
 * 2^31 s counts as 2^31 s), or the date, or now_ms for a date in the past.
 * Returns 0, or -1 with errno EINVAL for anything else (*abs_ms untouched).
 */
int	schedule_parse_retry_after(const char *value, int64_t now_ms,
	    int64_t *abs_ms);

#endif
