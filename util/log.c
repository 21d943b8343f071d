/*
 * log.c - leveled logging to stderr.
 *
 * Key decision: each line is formatted into a stack buffer and written with a
 * single write(2), so concurrent threads never interleave within a line and
 * no lock is needed.  Lines longer than the buffer are truncated with "...".
 * The level is an atomic so SIGHUP can change it while other threads log.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

#define LOG_LINE_MAX	2048

static char	log_ident[128] = "retryd";
static int	log_level = LOG_LVL_INFO;

static const char *const log_names[] = { "error", "warn", "info", "debug" };

void
log_init(const char *ident, enum log_level level)
{
	if (ident != NULL)
		snprintf(log_ident, sizeof(log_ident), "%s", ident);
	log_set_level(level);
}

void
log_set_level(enum log_level level)
{
	__atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED);
}

enum log_level
log_get_level(void)
{
	return (enum log_level)__atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

int
log_level_parse(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(log_names) / sizeof(log_names[0]); i++)
		if (strcmp(name, log_names[i]) == 0)
			return (int)i;
	return -1;
}

const char *
log_level_name(enum log_level level)
{
	if ((unsigned)level >= sizeof(log_names) / sizeof(log_names[0]))
		return "?";
	return log_names[level];
}

static void	log_vwrite(enum log_level, const struct log_obj *, int, int,
		    const char *, va_list) LOG_PRINTF(5, 0);

static void
log_vwrite(enum log_level level, const struct log_obj *obj, int with_errno,
    int saved_errno, const char *fmt, va_list ap)
{
	char line[LOG_LINE_MAX];
	struct timespec ts;
	struct tm tm;
	size_t n = 0;
	int r;

	if ((int)level > __atomic_load_n(&log_level, __ATOMIC_RELAXED))
		return;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(line, sizeof(line), "%Y-%m-%dT%H:%M:%S", &tm);
	r = snprintf(line + n, sizeof(line) - n, ".%03ldZ %s %s ",
	    ts.tv_nsec / 1000000, log_ident, log_level_name(level));
	if (r > 0)
		n += (size_t)r;
	if (obj != NULL) {
		if (obj->tenant != NULL && n < sizeof(line))
			n += (size_t)snprintf(line + n, sizeof(line) - n,
			    "tenant=%s ", obj->tenant);
		if (obj->topic != NULL && n < sizeof(line))
			n += (size_t)snprintf(line + n, sizeof(line) - n,
			    "topic=%s ", obj->topic);
		if (obj->job != NULL && n < sizeof(line))
			n += (size_t)snprintf(line + n, sizeof(line) - n,
			    "job=%s ", obj->job);
		if (obj->attempt > 0 && n < sizeof(line))
			n += (size_t)snprintf(line + n, sizeof(line) - n,
			    "attempt=%d ", obj->attempt);
	}
	if (n < sizeof(line)) {
		r = vsnprintf(line + n, sizeof(line) - n, fmt, ap);
		if (r > 0)
			n += (size_t)r;
	}
	if (with_errno && n < sizeof(line))
		n += (size_t)snprintf(line + n, sizeof(line) - n, ": %s",
		    strerror(saved_errno));
	if (n >= sizeof(line) - 1) {
		n = sizeof(line) - 1;
		memcpy(line + n - 3, "...", 3);
	}
	line[n++] = '\n';
	/* One write per line; a short write to stderr is not worth a retry. */
	if (write(STDERR_FILENO, line, n) < 0)
		return;
}

#define LOG_FN(name, level, with_errno)					\
void									\
name(const char *fmt, ...)						\
{									\
	int saved = errno;						\
	va_list ap;							\
									\
	va_start(ap, fmt);						\
	log_vwrite(level, NULL, with_errno, saved, fmt, ap);		\
	va_end(ap);							\
	errno = saved;							\
}

LOG_FN(log_warn, LOG_LVL_WARN, 1)
LOG_FN(log_warnx, LOG_LVL_WARN, 0)
LOG_FN(log_info, LOG_LVL_INFO, 0)
LOG_FN(log_debug, LOG_LVL_DEBUG, 0)

void
log_obj(enum log_level level, const struct log_obj *obj, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(level, obj, 0, saved, fmt, ap);
	va_end(ap);
	errno = saved;
}

void
fatal(const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(LOG_LVL_ERROR, NULL, 1, saved, fmt, ap);
	va_end(ap);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vwrite(LOG_LVL_ERROR, NULL, 0, 0, fmt, ap);
	va_end(ap);
	exit(1);
}

int
log_every(struct log_every *le, int64_t interval_us, uint64_t *held)
{
	struct timespec ts;
	int64_t now;
	int say;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	pthread_mutex_lock(&le->mu);
	if ((say = le->last_us == 0 || now - le->last_us >= interval_us)) {
		le->last_us = now;
		*held = le->held;
		le->held = 0;
	} else
		le->held++;
	pthread_mutex_unlock(&le->mu);
	return say;
}
