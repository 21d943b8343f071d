/*
 * redisfix.h - a throwaway redis-server for the scheduler's tests: started
 * on a free port in its own temporary directory, stopped (and the directory
 * removed) at the end, restartable in place to test recovery.
 *
 * Key decision: the server runs as our child in the foreground
 * (--daemonize no) so it can be killed and reaped by pid; readiness is a
 * PING answered PONG, polled with a deadline, never a fixed sleep.
 */
#ifndef RETRYD_TESTS_REDISFIX_H
#define RETRYD_TESTS_REDISFIX_H

#include <sys/types.h>

#include <hiredis/hiredis.h>

struct redisfix {
	char	dir[256];	/* the server's working directory */
	char	url[300];	/* redis://127.0.0.1:PORT/0 */
	int	port;
	pid_t	pid;		/* -1 when not running */
};

/* Starts a server (REDIS_SERVER or redis-server in PATH); 0 or -1. */
int	redisfix_start(struct redisfix *f);
/* Stops it and removes its directory. */
void	redisfix_stop(struct redisfix *f);
/*
 * Stops the server (save != 0: SHUTDOWN SAVE, so the data survives) and
 * starts it again on the same port; 0 or -1.
 */
int	redisfix_restart(struct redisfix *f, int save);
/* A new blocking connection (the caller frees it), or NULL. */
redisContext *redisfix_connect(const struct redisfix *f);
/* Runs a command and returns its reply (caller frees), NULL on error. */
redisReply *redisfix_cmd(const struct redisfix *f, const char *fmt, ...);

#endif
