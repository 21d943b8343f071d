/*
 * conn.h - Redis connections: URL parsing and a small pool of blocking
 * hiredis contexts shared by the threads that call into the scheduler
 * (API threads, the timer, the dispatcher's completion path).
 *
 * Key decision: blocking contexts with a timeout, one per concurrent caller,
 * taken from and returned to a mutex-guarded free list.  A context that saw an
 * I/O or protocol error is returned as broken and closed, so the next caller
 * reconnects; a caller never waits longer than the configured timeout.
 */
#ifndef RETRYD_SCHEDULER_CONN_H
#define RETRYD_SCHEDULER_CONN_H

#include <stdint.h>

#include <hiredis/hiredis.h>

struct redis_target {
	char	host[256];	/* empty for a unix socket */
	int	port;
	char	path[256];	/* unix socket path, or empty */
	char	password[256];	/* empty: no AUTH */
	int	db;
	char	username[256];	/* ACL user (Redis 6+), or empty: AUTH pass */
};

/*
 * Parses redis://[[user]:password@]host[:port][/db] (host may be an IPv6
 * address in brackets; user and password may be percent-encoded) and
 * unix://[[user]:password@]/path[?db=N].  0, or -1 with a reason in why.
 */
int	sched_redis_url_parse(const char *url, struct redis_target *out,
	    char *why, size_t whylen);

/* A new blocking context (AUTH and SELECT done), or NULL with why. */
redisContext *sched_redis_connect(const struct redis_target *t,
	    int64_t timeout_ms, char *why, size_t whylen);

struct sched_pool;

struct sched_pool *sched_pool_new(const struct redis_target *t,
	    int64_t timeout_ms, int max_idle);
/* A connected context, or NULL when Redis is unreachable (logged once). */
redisContext *sched_pool_get(struct sched_pool *p);
/* Give c back; broken != 0 closes it instead (after an I/O error). */
void	sched_pool_put(struct sched_pool *p, redisContext *c, int broken);
void	sched_pool_free(struct sched_pool *p);

#endif
