/*
 * conn.h - Redis connections: URL parsing and a small pool of blocking
 * hiredis contexts shared by the threads that call into the scheduler
 * (API threads, the timer, the dispatcher's completion path).
 *
 * Key decision: blocking contexts with a timeout, one per concurrent caller,
 * taken from and returned to a mutex-guarded free list.  A context that saw an
 * I/O or protocol error is returned as broken and closed, so the next caller
 * reconnects; a caller never waits longer than the configured timeout.
 *
 * On a Redis Cluster (INFO says cluster_enabled:1 when the pool first
 * connects) the pool keeps a free list per master node and the slot map, and
 * a command goes to the node serving its key's slot: callers name the key
 * (sched_pool_command, sched_pipe_*) and are otherwise unchanged; MOVED and
 * ASK are followed here (see docs/internals/CLUSTER.md).  On a single Redis
 * all of this is one node and no command costs a round trip more.
 */
#ifndef RETRYD_SCHEDULER_CONN_H
#define RETRYD_SCHEDULER_CONN_H

#include <stdarg.h>
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

/*
 * redis.url: one URL as above, or a comma-separated list of seeds of a
 * Redis Cluster (blanks around each allowed; a ',' in a password is written
 * %2C), each a redis:// URL with database 0 and the same user and password.
 * The number of targets put in out[0..max), or -1 with a reason in why.
 */
#define SCHED_SEEDS_MAX		16
int	sched_redis_seeds_parse(const char *list, struct redis_target *out,
	    int max, char *why, size_t whylen);

/* A new blocking context (AUTH and SELECT done), or NULL with why. */
redisContext *sched_redis_connect(const struct redis_target *t,
	    int64_t timeout_ms, char *why, size_t whylen);

/* ---- cluster.c: key slots and redirections (pure) ---------------------- */

#define SCHED_SLOTS		16384
#define SCHED_REDIRECTS_MAX	5	/* MOVED/ASK followed per command */

/* The cluster slot of a key: CRC16 of its hash tag (or all of it). */
int	sched_key_slot(const char *key, size_t len);
/*
 * The value of the line "name:value" of an INFO reply's text, copied into
 * out (cut to outlen - 1 bytes): 0, or -1 when there is no such line.
 */
int	sched_info_field(const char *info, const char *name, char *out,
	    size_t outlen);

struct sched_redirect {
	int	ask;		/* 1: ASK (this command only), 0: MOVED */
	int	slot;
	char	host[256];
	int	port;
};

/* 1 and *out for "MOVED|ASK SLOT HOST:PORT", else 0. */
int	sched_redirect_parse(const char *err, size_t len,
	    struct sched_redirect *out);

/* ---- conn.c: the pool --------------------------------------------------- */

struct sched_pool;

/*
 * A pool for the seeds t[0..nt) (sched_redis_seeds_parse): the first that
 * answers tells whether Redis is a cluster; more than one seed is refused
 * (no context, logged) when it is not.
 */
struct sched_pool *sched_pool_new(const struct redis_target *t, int nt,
	    int64_t timeout_ms, int max_idle);
/*
 * A connected context, or NULL when Redis is unreachable (logged once).
 * On a cluster, a context of a live master (for commands without a key and
 * as the "home" context routed calls use when its node serves the slot).
 */
redisContext *sched_pool_get(struct sched_pool *p);
/* A context of the node serving key's slot (sched_pool_get when single). */
redisContext *sched_pool_get_key(struct sched_pool *p, const char *key);
/* Give c back; broken != 0 closes it instead (after an I/O error). */
void	sched_pool_put(struct sched_pool *p, redisContext *c, int broken);
/*
 * Failures so far in this process, all pools, each once: connections not
 * made, contexts given back broken, error replies from Redis to routed and
 * pipelined commands (not redirections, nor a NOSCRIPT repaired).
 */
uint64_t sched_redis_errors(void);
/*
 * Counts r there when it is an error reply: for the few commands sent on a
 * context directly, not through the routed commands and pipelines below.
 */
void	sched_redis_count_reply(const redisReply *r);
/*
 * Counts a failure seen on a context of the caller's own (the
 * subscriber's: a read error, or a silence taken for a dead link).
 */
void	sched_redis_count_failure(void);
void	sched_pool_free(struct sched_pool *p);
/* 1 on a Redis Cluster, 0 on a single Redis, -1 before the first connect. */
int	sched_pool_cluster(struct sched_pool *p);
/*
 * A new context of the caller's own (not pooled; redisFree it) to the Redis
 * or, on a cluster, to a live master (another one than last time when that
 * one is unreachable): for the timer and the subscriber.  NULL with why.
 */
redisContext *sched_pool_connect(struct sched_pool *p, char *why,
	    size_t whylen);

/*
 * Routed commands.  c is the caller's context (from sched_pool_get, or the
 * timer's own): a command goes on it when its node serves the key's slot
 * (always, on a single Redis), else on a pooled context of the right node.
 * MOVED and ASK replies are followed (up to SCHED_REDIRECTS_MAX).  The reply
 * is the caller's; NULL only when c itself failed (c->err set, *broken = 1);
 * a failure of another node is an error reply "CLUSTERDOWN ...".  key NULL:
 * no key (runs on c).
 */
redisReply *sched_pool_command(struct sched_pool *p, redisContext *c,
	    int *broken, const char *key, const char *fmt, ...);
redisReply *sched_pool_vcommand(struct sched_pool *p, redisContext *c,
	    int *broken, const char *key, const char *fmt, va_list ap);
/*
 * A command's RESP in one allocation (*cmd, for free()) and its length: what
 * redisFormatCommandArgv() makes, without its sprintf per argument.
 */
size_t	sched_format_argv(char **cmd, int argc, const char **argv,
	    const size_t *lens);
redisReply *sched_pool_command_argv(struct sched_pool *p, redisContext *c,
	    int *broken, const char *key, size_t keylen, int argc,
	    const char **argv, const size_t *lens);
/*
 * The same with a hook: an error reply is shown to fix(ctx, reply, arg)
 * with the context that gave it; when fix returns 1 (it repaired that node,
 * say loaded a script) the command is sent once more.
 */
redisReply *sched_pool_command_fix(struct sched_pool *p, redisContext *c,
	    int *broken, const char *key, size_t keylen, int argc,
	    const char **argv, const size_t *lens,
	    int (*fix)(redisContext *, const redisReply *, void *), void *arg);
/*
 * Runs a command without a key on every master serving slots but c's node
 * (SCRIPT LOAD before pipelined EVALSHA); 0, or -1 when one failed.  No-op
 * on a single Redis.
 */
int	sched_pool_each(struct sched_pool *p, redisContext *c,
	    const char *fmt, ...);

/*
 * A pipeline routed per node: commands are queued with their key; the first
 * sched_pipe_getreply() sends each node its commands (one write per node)
 * and replies come back in the order queued, a redirected command resent
 * on its own.  On a single Redis it is c's own pipeline.  getreply returns
 * REDIS_ERR only when c failed; another node's failure is an error reply.
 */
struct sched_pipe;

struct sched_pipe *sched_pipe_new(struct sched_pool *p, redisContext *c);
int	sched_pipe_append(struct sched_pipe *q, const char *key,
	    const char *fmt, ...);
int	sched_pipe_vappend(struct sched_pipe *q, const char *key,
	    const char *fmt, va_list ap);
int	sched_pipe_append_argv(struct sched_pipe *q, const char *key,
	    size_t keylen, int argc, const char **argv, const size_t *lens);
int	sched_pipe_getreply(struct sched_pipe *q, void **reply);
/* Gives back the contexts it took (those with unread replies as broken). */
void	sched_pipe_free(struct sched_pipe *q);

#endif
