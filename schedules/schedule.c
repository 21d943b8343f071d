/*
 * schedule.c - parse, validate and print retry schedules (see schedule.h and
 * docs/internals/SCHEDULES.md for the grammar).
 *
 * Key decision: one hand-written single-pass scanner serves both the text
 * form "<0,2m,1h>" and the JSON-array form "[0,120000]", and every check
 * (count, sign, int64 overflow, horizon) lives in one function, wait_add(),
 * shared with schedule_from_ms() and schedule_format().  So a schedule is
 * valid by one definition whichever way it arrived, and whatever
 * schedule_format() prints, schedule_parse() reads back to the same waits.
 * No strtoll: the scanner needs the exact byte of each error, and digits are
 * accumulated with an explicit overflow test.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "schedules/schedule.h"

#define MS_PER_S	INT64_C(1000)
#define MS_PER_M	(60 * MS_PER_S)
#define MS_PER_H	(60 * MS_PER_M)
#define MS_PER_D	(24 * MS_PER_H)

static const struct unit {
	const char	*name;
	int64_t		 ms;
} units[] = {	/* largest first: schedule_format() picks the first that fits */
	{ "d", MS_PER_D },
	{ "h", MS_PER_H },
	{ "m", MS_PER_M },
	{ "s", MS_PER_S },
	{ "ms", 1 },
};
#define NUNITS	(sizeof(units) / sizeof(units[0]))

/* A schedule being built, with the running total that the checks need. */
struct acc {
	struct retry_schedule	 sched;
	int64_t			 total_ms;
	int64_t			 horizon_ms;
};

static int	fail(struct schedule_error *, size_t, const char *, ...)
		    __attribute__((format(printf, 3, 4)));

static int
fail(struct schedule_error *err, size_t pos, const char *fmt, ...)
{
	va_list ap;

	if (err != NULL) {
		err->pos = pos;
		va_start(ap, fmt);
		vsnprintf(err->reason, sizeof(err->reason), fmt, ap);
		va_end(ap);
	}
	errno = EINVAL;
	return -1;
}

static void
acc_init(struct acc *a, int64_t horizon_ms)
{
	a->sched.n = 0;
	a->total_ms = 0;
	a->horizon_ms = horizon_ms > 0 ? horizon_ms : 0;
}

/* Appends one wait; pos is where it came from, for the error. */
static int
wait_add(struct acc *a, int64_t ms, size_t pos, struct schedule_error *err)
{
	if (a->sched.n >= SCHEDULE_MAX_WAITS)
		return fail(err, pos, "more than %d waits", SCHEDULE_MAX_WAITS);
	if (ms < 0)
		return fail(err, pos, "negative wait");
	if (ms > INT64_MAX - a->total_ms)
		return fail(err, pos,
		    "total of waits overflows int64 milliseconds");
	a->total_ms += ms;
	if (a->horizon_ms > 0 && a->total_ms > a->horizon_ms)
		return fail(err, pos, "total of waits (%" PRId64 " ms) is "
		    "beyond the horizon of %" PRId64 " ms", a->total_ms,
		    a->horizon_ms);
	a->sched.wait_ms[a->sched.n++] = ms;
	return 0;
}

static int
is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int
is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int
is_alpha(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static size_t
skip_blanks(const char *s, size_t len, size_t i)
{
	while (i < len && is_blank(s[i]))
		i++;
	return i;
}

/*
 * Reads one entry at s[*ip] (a digit is there) into *msp and advances *ip
 * past it.  json selects plain milliseconds instead of number plus unit.
 */
static int
parse_entry(const char *s, size_t len, size_t *ip, int json, int64_t *msp,
    struct schedule_error *err)
{
	size_t i = *ip, start = *ip, ulen, u;
	int64_t v = 0, d, mult;

	while (i < len && is_digit(s[i])) {
		d = s[i] - '0';
		if (v > (INT64_MAX - d) / 10)
			return fail(err, start,
			    "wait overflows int64 milliseconds");
		v = v * 10 + d;
		i++;
	}
	if (i < len && (s[i] == '.' || (json && (s[i] == 'e' ||
	    s[i] == 'E'))))
		return fail(err, i, "not an integer");
	if (json) {
		if (s[start] == '0' && i - start > 1)
			return fail(err, start,
			    "leading zero in a JSON number");
		if (i < len && is_alpha(s[i]))
			return fail(err, i, "no units in the JSON form: "
			    "waits are milliseconds");
		*msp = v;
		*ip = i;
		return 0;
	}
	for (ulen = 0; i + ulen < len && is_alpha(s[i + ulen]); ulen++)
		continue;
	mult = MS_PER_S;			/* a bare number is seconds */
	if (ulen > 0) {
		for (u = 0; u < NUNITS; u++)
			if (strlen(units[u].name) == ulen &&
			    memcmp(units[u].name, s + i, ulen) == 0)
				break;
		if (u == NUNITS)
			return fail(err, i, "unknown unit '%.*s' (use ms, s, "
			    "m, h or d)", ulen > 16 ? 16 : (int)ulen, s + i);
		mult = units[u].ms;
	}
	if (v > INT64_MAX / mult)
		return fail(err, start, "wait overflows int64 milliseconds");
	*msp = v * mult;
	*ip = i + ulen;
	return 0;
}

int
schedule_parse(const char *s, size_t len, int64_t horizon_ms,
    struct retry_schedule *out, struct schedule_error *err)
{
	struct acc a;
	const char *nul;
	size_t i, start;
	int64_t ms = 0;
	int json;
	char close;

	if (len == 0 || s == NULL)
		return fail(err, 0, "empty schedule text");
	if ((nul = memchr(s, '\0', len)) != NULL)
		return fail(err, (size_t)(nul - s), "NUL byte");
	acc_init(&a, horizon_ms);
	i = skip_blanks(s, len, 0);
	if (i == len)
		return fail(err, i, "empty schedule text");
	if (s[i] == '<') {
		json = 0;
		close = '>';
	} else if (s[i] == '[') {
		json = 1;
		close = ']';
	} else
		return fail(err, i, "expected '<' or '['");
	i = skip_blanks(s, len, i + 1);
	if (i < len && s[i] == close)
		return fail(err, i, "empty schedule: at least one wait needed");
	for (;;) {
		i = skip_blanks(s, len, i);
		if (i == len)
			return fail(err, i, "missing '%c'", close);
		if (s[i] == ',' || s[i] == close)
			return fail(err, i, "empty entry");
		if (s[i] == '-')
			return fail(err, i, "negative wait");
		if (!is_digit(s[i]))
			return fail(err, i, "expected a number");
		start = i;
		if (parse_entry(s, len, &i, json, &ms, err) == -1)
			return -1;
		if (wait_add(&a, ms, start, err) == -1)
			return -1;
		start = i;
		i = skip_blanks(s, len, i);
		if (!json && i > start && i < len && is_alpha(s[i]))
			return fail(err, start,
			    "blank between a number and its unit");
		if (i == len)
			return fail(err, i, "missing '%c'", close);
		if (s[i] == close)
			break;
		if (s[i] != ',')
			return fail(err, i, "expected ',' or '%c'", close);
		i++;
	}
	i = skip_blanks(s, len, i + 1);
	if (i < len)
		return fail(err, i, "trailing garbage after '%c'", close);
	*out = a.sched;
	return 0;
}

int
schedule_from_ms(const int64_t *ms, size_t n, int64_t horizon_ms,
    struct retry_schedule *out, struct schedule_error *err)
{
	struct acc a;
	size_t i;

	if (n == 0)
		return fail(err, 0, "empty schedule: at least one wait needed");
	acc_init(&a, horizon_ms);
	for (i = 0; i < n; i++)
		if (wait_add(&a, ms[i], i, err) == -1)
			return -1;
	*out = a.sched;
	return 0;
}

/* What schedule_from_ms() accepts, without a horizon. */
static int
is_valid(const struct retry_schedule *s)
{
	struct acc a;
	int i;

	if (s->n < 1 || s->n > SCHEDULE_MAX_WAITS)
		return 0;
	acc_init(&a, 0);
	for (i = 0; i < s->n; i++)
		if (wait_add(&a, s->wait_ms[i], (size_t)i, NULL) == -1)
			return 0;
	return 1;
}

int
schedule_format(const struct retry_schedule *s, char *out, size_t outlen)
{
	size_t len = 0, u;
	int64_t w;
	int i, r;

	if (outlen > 0)
		out[0] = '\0';
	/* Print only what schedule_parse() would read back. */
	if (!is_valid(s)) {
		errno = EINVAL;
		return -1;
	}
	if (outlen == 0)
		goto toolong;
	for (i = 0; i < s->n; i++) {
		w = s->wait_ms[i];
		for (u = 0; w != 0 && w % units[u].ms != 0; u++)
			continue;
		r = snprintf(out + len, outlen - len, "%s%" PRId64 "%s",
		    i == 0 ? "<" : ",", w == 0 ? 0 : w / units[u].ms,
		    w == 0 ? "" : units[u].name);
		if (r < 0 || (size_t)r >= outlen - len)
			goto toolong;
		len += (size_t)r;
	}
	if (outlen - len < 2)
		goto toolong;
	out[len++] = '>';
	out[len] = '\0';
	return (int)len;
toolong:
	if (outlen > 0)
		out[0] = '\0';
	errno = ENOBUFS;
	return -1;
}

int64_t
schedule_total_ms(const struct retry_schedule *s)
{
	int64_t total = 0;
	int i;

	for (i = 0; i < s->n && i < SCHEDULE_MAX_WAITS; i++)
		total = schedule_add_ms(total, s->wait_ms[i]);
	return total;
}

int64_t
schedule_add_ms(int64_t t_ms, int64_t d_ms)
{
	if (d_ms > 0 && t_ms > INT64_MAX - d_ms)
		return INT64_MAX;
	if (d_ms < 0 && t_ms < INT64_MIN - d_ms)
		return INT64_MIN;
	return t_ms + d_ms;
}
