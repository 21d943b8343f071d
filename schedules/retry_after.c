/*
 * retry_after.c - parse an HTTP Retry-After value (RFC 9110 section 10.2.3)
 * into an absolute wall-clock time in milliseconds.
 *
 * Key decision: no libc time parsing at all (no strptime, no timegm, no
 * locale): each of the three HTTP-date forms is matched byte by byte against
 * its fixed layout, names compare case-sensitively as RFC 9110 says, and the
 * epoch is computed here from the civil date.  Delta-seconds past 2^31 count
 * as 2^31 (the RFC 9111 rule for delta-seconds), so no value overflows.  The
 * day name is checked to be a day name but not against the date, as lenient
 * recipients do.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "schedules/schedule.h"

#define DELTA_MAX_S	INT64_C(2147483648)	/* 2^31 */
#define MS_PER_DAY	INT64_C(86400000)

static const char *const day_short[] = {
	"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun",
};
static const char *const day_long[] = {
	"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday",
	"Sunday",
};
static const char *const month_names[] = {
	"Jan", "Feb", "Mar", "Apr", "May", "Jun",
	"Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
};
/* Days before the first of each month in a common year. */
static const int month_start[] = {
	0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334,
};

/* A broken-down UTC time; year may be two digits until resolved. */
struct civil {
	int64_t	 year;
	int	 month;		/* 1..12 */
	int	 day, hour, min, sec;
};

/* A cursor over the bytes still to match. */
struct cur {
	const char	*p;
	const char	*end;
};

static int
is_leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int
month_days(int64_t y, int m)
{
	static const int mdays[] = {
		31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31,
	};

	return mdays[m - 1] + (m == 2 && is_leap(y));
}

/* Leap years in [1, y - 1], for y >= 1. */
static int64_t
leaps_before(int64_t y)
{
	return (y - 1) / 4 - (y - 1) / 100 + (y - 1) / 400;
}

/* Days from 1970-01-01 to y-m-d, for y >= 1970. */
static int64_t
days_from_civil(int64_t y, int m, int d)
{
	return (y - 1970) * 365 + leaps_before(y) - leaps_before(1970) +
	    month_start[m - 1] + (m > 2 && is_leap(y)) + d - 1;
}

/* The UTC year of a wall time; 1970 for times before the epoch. */
static int64_t
year_of(int64_t t_ms)
{
	int64_t days, y;

	if (t_ms < 0)
		return 1970;
	days = t_ms / MS_PER_DAY;
	y = 1970 + days * 400 / 146097;	/* 146097 days in 400 years */
	while (y > 1970 && days_from_civil(y, 1, 1) > days)
		y--;
	while (days_from_civil(y + 1, 1, 1) <= days)
		y++;
	return y;
}

static int
lit(struct cur *c, const char *s)
{
	size_t n = strlen(s);

	if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n) != 0)
		return -1;
	c->p += n;
	return 0;
}

/* Matches one of names (none a prefix of another); *idx is its index. */
static int
name(struct cur *c, const char *const *names, int count, int *idx)
{
	int i;

	for (i = 0; i < count; i++)
		if (lit(c, names[i]) == 0) {
			*idx = i;
			return 0;
		}
	return -1;
}

/* Exactly n digits. */
static int
digits(struct cur *c, int n, int *v)
{
	int i;

	if (c->end - c->p < n)
		return -1;
	*v = 0;
	for (i = 0; i < n; i++) {
		if (c->p[i] < '0' || c->p[i] > '9')
			return -1;
		*v = *v * 10 + (c->p[i] - '0');
	}
	c->p += n;
	return 0;
}

static int
month(struct cur *c, struct civil *t)
{
	int i;

	if (name(c, month_names, 12, &i) == -1)
		return -1;
	t->month = i + 1;
	return 0;
}

/* "08:49:37" */
static int
time_of_day(struct cur *c, struct civil *t)
{
	if (digits(c, 2, &t->hour) == -1 || lit(c, ":") == -1 ||
	    digits(c, 2, &t->min) == -1 || lit(c, ":") == -1 ||
	    digits(c, 2, &t->sec) == -1)
		return -1;
	return 0;
}

/* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" */
static int
imf_fixdate(struct cur c, struct civil *t)
{
	int i, y;

	if (name(&c, day_short, 7, &i) == -1 || lit(&c, ", ") == -1 ||
	    digits(&c, 2, &t->day) == -1 || lit(&c, " ") == -1 ||
	    month(&c, t) == -1 || lit(&c, " ") == -1 ||
	    digits(&c, 4, &y) == -1 || lit(&c, " ") == -1 ||
	    time_of_day(&c, t) == -1 || lit(&c, " GMT") == -1 || c.p != c.end)
		return -1;
	t->year = y;
	return 0;
}

/* RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT"; the century is resolved later. */
static int
rfc850_date(struct cur c, struct civil *t)
{
	int i, y;

	if (name(&c, day_long, 7, &i) == -1 || lit(&c, ", ") == -1 ||
	    digits(&c, 2, &t->day) == -1 || lit(&c, "-") == -1 ||
	    month(&c, t) == -1 || lit(&c, "-") == -1 ||
	    digits(&c, 2, &y) == -1 || lit(&c, " ") == -1 ||
	    time_of_day(&c, t) == -1 || lit(&c, " GMT") == -1 || c.p != c.end)
		return -1;
	t->year = y;
	return 0;
}

/* asctime: "Sun Nov  6 08:49:37 1994" (the day is space-padded). */
static int
asctime_date(struct cur c, struct civil *t)
{
	int i, y;

	if (name(&c, day_short, 7, &i) == -1 || lit(&c, " ") == -1 ||
	    month(&c, t) == -1 || lit(&c, " ") == -1)
		return -1;
	if (lit(&c, " ") == 0) {
		if (digits(&c, 1, &t->day) == -1)
			return -1;
	} else if (digits(&c, 2, &t->day) == -1)
		return -1;
	if (lit(&c, " ") == -1 || time_of_day(&c, t) == -1 ||
	    lit(&c, " ") == -1 || digits(&c, 4, &y) == -1 || c.p != c.end)
		return -1;
	t->year = y;
	return 0;
}

/* All digits: delta-seconds, saturating at DELTA_MAX_S. */
static int
delta_seconds(struct cur c, int64_t *s)
{
	int64_t v = 0;

	if (c.p == c.end)
		return -1;
	for (; c.p < c.end; c.p++) {
		if (*c.p < '0' || *c.p > '9')
			return -1;
		if (v < DELTA_MAX_S)
			v = v * 10 + (*c.p - '0');
	}
	*s = v < DELTA_MAX_S ? v : DELTA_MAX_S;
	return 0;
}

int
schedule_parse_retry_after(const char *value, int64_t now_ms,
    int64_t *abs_ms)
{
	struct civil t;
	struct cur c;
	int64_t delta_s, y, days, date_ms;

	if (value == NULL)
		goto bad;
	c.p = value;
	c.end = value + strlen(value);
	while (c.p < c.end && (*c.p == ' ' || *c.p == '\t'))
		c.p++;
	while (c.end > c.p && (c.end[-1] == ' ' || c.end[-1] == '\t'))
		c.end--;

	if (delta_seconds(c, &delta_s) == 0) {
		*abs_ms = schedule_add_ms(now_ms, delta_s * 1000);
		return 0;
	}
	if (imf_fixdate(c, &t) == -1 && asctime_date(c, &t) == -1) {
		if (rfc850_date(c, &t) == -1)
			goto bad;
		/* RFC 9110: a two-digit year more than 50 years ahead is the
		 * most recent past year with those digits. */
		y = year_of(now_ms);
		t.year += y / 100 * 100;
		if (t.year > y + 50)
			t.year -= 100;
	}
	if (t.month < 1 || t.month > 12 || t.day < 1 ||
	    t.day > month_days(t.year, t.month) || t.hour > 23 ||
	    t.min > 59 || t.sec > 60)	/* 60: a leap second */
		goto bad;
	if (t.year < 1970) {
		*abs_ms = now_ms;
		return 0;
	}
	days = days_from_civil(t.year, t.month, t.day);
	if (days >= INT64_MAX / MS_PER_DAY)	/* only for an absurd now_ms */
		date_ms = INT64_MAX;
	else
		date_ms = days * MS_PER_DAY +
		    ((int64_t)t.hour * 3600 + t.min * 60 + t.sec) * 1000;
	*abs_ms = date_ms > now_ms ? date_ms : now_ms;
	return 0;
bad:
	errno = EINVAL;
	return -1;
}
