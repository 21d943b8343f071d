/*
 * redisfix.c - a throwaway redis-server for tests (see redisfix.h).
 *
 * Key decision: the port is found by binding port 0 and releasing it just
 * before the server starts; the small race with another process is handled
 * by trying again on a new port when the server fails to come up.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/redisfix.h"

#define START_TRIES	5
#define READY_MS	10000

static int64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
nap_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
}

static int
free_port(void)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int fd, port = -1;

	if ((fd = socket(AF_INET, SOCK_STREAM, 0)) == -1)
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

redisContext *
redisfix_connect(const struct redisfix *f)
{
	struct timeval tv = { 2, 0 };
	redisContext *c;

	c = redisConnectWithTimeout("127.0.0.1", f->port, tv);
	if (c != NULL && c->err) {
		redisFree(c);
		return NULL;
	}
	if (c != NULL)
		(void)redisSetTimeout(c, tv);
	return c;
}

redisReply *
redisfix_cmd(const struct redisfix *f, const char *fmt, ...)
{
	redisContext *c;
	redisReply *r;
	va_list ap;

	if ((c = redisfix_connect(f)) == NULL)
		return NULL;
	va_start(ap, fmt);
	r = redisvCommand(c, fmt, ap);
	va_end(ap);
	redisFree(c);
	return r;
}

/* Waits for PONG (not LOADING) or the child's death; 0 or -1. */
static int
wait_ready(struct redisfix *f)
{
	int64_t end = mono_ms() + READY_MS;
	redisReply *r;
	int status, ok;

	while (mono_ms() < end) {
		if (waitpid(f->pid, &status, WNOHANG) == f->pid) {
			f->pid = -1;
			return -1;
		}
		r = redisfix_cmd(f, "PING");
		ok = r != NULL && r->type == REDIS_REPLY_STATUS &&
		    strcmp(r->str, "PONG") == 0;
		if (r != NULL)
			freeReplyObject(r);
		if (ok)
			return 0;
		nap_ms(10);
	}
	return -1;
}

static int
spawn(struct redisfix *f)
{
	const char *server = getenv("REDIS_SERVER");
	char port[16], log[300];
	int fd;

	if (server == NULL || *server == '\0' || strcmp(server, "no") == 0)
		server = "redis-server";
	snprintf(port, sizeof(port), "%d", f->port);
	snprintf(log, sizeof(log), "%s/redis.log", f->dir);
	f->pid = fork();
	if (f->pid == -1)
		return -1;
	if (f->pid == 0) {
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		if (fd != -1) {
			(void)dup2(fd, 1);
			(void)dup2(fd, 2);
			close(fd);
		}
		execlp(server, server, "--port", port, "--bind", "127.0.0.1",
		    "--save", "", "--appendonly", "no", "--dir", f->dir,
		    "--daemonize", "no", "--protected-mode", "no",
		    (char *)NULL);
		_exit(127);
	}
	if (wait_ready(f) == 0)
		return 0;
	if (f->pid > 0) {
		kill(f->pid, SIGKILL);
		(void)waitpid(f->pid, NULL, 0);
		f->pid = -1;
	}
	return -1;
}

int
redisfix_start(struct redisfix *f)
{
	const char *tmp = getenv("TMPDIR");
	int i;

	memset(f, 0, sizeof(*f));
	f->pid = -1;
	snprintf(f->dir, sizeof(f->dir), "%s/retryd-redis-XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
	if (mkdtemp(f->dir) == NULL)
		return -1;
	for (i = 0; i < START_TRIES; i++) {
		if ((f->port = free_port()) <= 0)
			continue;
		snprintf(f->url, sizeof(f->url), "redis://127.0.0.1:%d/0",
		    f->port);
		if (spawn(f) == 0)
			return 0;
	}
	redisfix_stop(f);
	return -1;
}

static void
shutdown_server(struct redisfix *f, int save)
{
	redisReply *r;
	int64_t end;

	if (f->pid <= 0)
		return;
	r = redisfix_cmd(f, save ? "SHUTDOWN SAVE" : "SHUTDOWN NOSAVE");
	if (r != NULL)
		freeReplyObject(r);
	end = mono_ms() + 5000;
	while (mono_ms() < end) {
		if (waitpid(f->pid, NULL, WNOHANG) == f->pid) {
			f->pid = -1;
			return;
		}
		nap_ms(5);
	}
	kill(f->pid, SIGKILL);
	(void)waitpid(f->pid, NULL, 0);
	f->pid = -1;
}

int
redisfix_restart(struct redisfix *f, int save)
{
	char path[300];

	shutdown_server(f, save);
	if (!save) {
		/* An older snapshot would bring old data back. */
		snprintf(path, sizeof(path), "%s/dump.rdb", f->dir);
		(void)unlink(path);
	}
	return spawn(f);
}

void
redisfix_stop(struct redisfix *f)
{
	char path[600];
	struct dirent *de;
	DIR *d;

	shutdown_server(f, 0);
	if (f->dir[0] == '\0')
		return;
	if ((d = opendir(f->dir)) != NULL) {
		while ((de = readdir(d)) != NULL) {
			if (strcmp(de->d_name, ".") == 0 ||
			    strcmp(de->d_name, "..") == 0)
				continue;
			snprintf(path, sizeof(path), "%s/%s", f->dir,
			    de->d_name);
			(void)unlink(path);
		}
		closedir(d);
	}
	(void)rmdir(f->dir);
	f->dir[0] = '\0';
}
