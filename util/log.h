/*
 * log.h - leveled logging to stderr, OpenBSD log.c style.
 *
 * Every line is one write(2) of "TIME LEVEL [ident] message\n" so lines from
 * several threads never interleave.  log_warn() and fatal() append
 * strerror(errno); the "x" variants do not.  log_obj() prefixes a line with the
 * identity of the object it concerns (tenant, topic, job, attempt), PgBouncer
 * slog_error(client, ...) style, so a job can be followed with grep.
 */
#ifndef RETRYD_UTIL_LOG_H
#define RETRYD_UTIL_LOG_H

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdnoreturn.h>

enum log_level {
	LOG_LVL_ERROR = 0,
	LOG_LVL_WARN,
	LOG_LVL_INFO,
	LOG_LVL_DEBUG,
};

/* The identity a log line is about; any member may be NULL or 0. */
struct log_obj {
	const char	*tenant;
	const char	*topic;
	const char	*job;
	int		 attempt;
};

#define LOG_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* ident is copied; it names this instance in every line. */
void	log_init(const char *ident, enum log_level level);
void	log_set_level(enum log_level level);
enum log_level log_get_level(void);
/* "error", "warn", "info", "debug" -> level; -1 when unknown. */
int	log_level_parse(const char *name);
const char *log_level_name(enum log_level level);

void	log_warn(const char *fmt, ...) LOG_PRINTF(1, 2);
void	log_warnx(const char *fmt, ...) LOG_PRINTF(1, 2);
void	log_info(const char *fmt, ...) LOG_PRINTF(1, 2);
void	log_debug(const char *fmt, ...) LOG_PRINTF(1, 2);
void	log_obj(enum log_level level, const struct log_obj *obj,
	    const char *fmt, ...) LOG_PRINTF(3, 4);
/*
 * A warning that comes once per request while a fault lasts (a journal
 * or a Redis that refuses every push): log_every() is 1 when it is to be
 * logged now, at most once per interval_us of the monotonic clock, and
 * puts in *held how many calls were held back since the last 1.
 */
struct log_every {
	pthread_mutex_t	mu;
	int64_t		last_us;	/* 0: never said */
	uint64_t	held;
};
#define LOG_EVERY_INIT	{ PTHREAD_MUTEX_INITIALIZER, 0, 0 }
#define LOG_EVERY_US	1000000		/* the interval its callers use */
int	log_every(struct log_every *le, int64_t interval_us, uint64_t *held);

noreturn void fatal(const char *fmt, ...) LOG_PRINTF(1, 2);
noreturn void fatalx(const char *fmt, ...) LOG_PRINTF(1, 2);

#endif
