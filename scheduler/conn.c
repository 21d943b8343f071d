/*
 * conn.c - Redis connections: URL parsing, connecting with a timeout (AUTH
 * and SELECT included), and the pool of blocking contexts the scheduler's
 * callers share.
 *
 * Key decision: a context that failed is never reused, and one failure also
 * closes every idle context of the pool, because the usual cause (Redis
 * restarted, a network cut) has broken them all: the next callers reconnect
 * at once instead of each discovering a dead socket in turn.  "Unreachable"
 * is logged once per outage, and "reachable again" once when it ends.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "scheduler/conn.h"
#include "util/strutil.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define REDIS_DEFAULT_PORT	6379
#define REDIS_MAX_DB		1000000

struct sched_pool {
	pthread_mutex_t		 lock;
	struct redis_target	 target;
	int64_t			 timeout_ms;
	int			 max_idle;
	redisContext		**idle;		/* under lock */
	int			 nidle;		/* under lock */
	int			 down;		/* under lock: outage logged */
};


/* A decimal integer in [lo, hi] spelled by s[0..n); 0 or -1. */
static int
parse_int(const char *s, size_t n, long lo, long hi, int *out)
{
	char tmp[24], *end;
	long v;

	if (n == 0 || n >= sizeof(tmp))
		return -1;
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	if (tmp[0] < '0' || tmp[0] > '9')
		return -1;
	errno = 0;
	v = strtol(tmp, &end, 10);
	if (errno != 0 || *end != '\0' || v < lo || v > hi)
		return -1;
	*out = (int)v;
	return 0;
}

/* "user:password" or "user" (userinfo of a URL) into t. */
static int
parse_userinfo(const char *s, size_t n, struct redis_target *t)
{
	const char *colon = memchr(s, ':', n);

	if (colon == NULL)
		return str_pct_decode(s, n, t->username, sizeof(t->username));
	if (str_pct_decode(s, (size_t)(colon - s), t->username,
	    sizeof(t->username)) == -1)
		return -1;
	return str_pct_decode(colon + 1, n - (size_t)(colon - s) - 1,
	    t->password, sizeof(t->password));
}

static int
parse_unix(const char *rest, struct redis_target *t, char *why,
    size_t whylen)
{
	const char *at, *q, *path;
	size_t plen;

	/* unix://[userinfo@]/path[?db=N] */
	path = rest;
	if ((at = strchr(rest, '@')) != NULL &&
	    (q = strchr(rest, '/')) != NULL && at < q) {
		if (parse_userinfo(rest, (size_t)(at - rest), t) == -1) {
			snprintf(why, whylen, "bad user or password");
			return -1;
		}
		path = at + 1;
	}
	if (path[0] != '/') {
		snprintf(why, whylen, "unix socket path must be absolute");
		return -1;
	}
	q = strchr(path, '?');
	plen = q != NULL ? (size_t)(q - path) : strlen(path);
	if (plen < 2 || plen >= sizeof(t->path)) {
		snprintf(why, whylen, "bad unix socket path");
		return -1;
	}
	memcpy(t->path, path, plen);
	t->path[plen] = '\0';
	if (q != NULL) {
		if (strncmp(q, "?db=", 4) != 0 ||
		    parse_int(q + 4, strlen(q + 4), 0, REDIS_MAX_DB,
		    &t->db) == -1) {
			snprintf(why, whylen, "bad query (only ?db=N)");
			return -1;
		}
	}
	return 0;
}

static int
parse_tcp(const char *rest, struct redis_target *t, char *why, size_t whylen)
{
	const char *auth_end, *host, *hend, *p, *slash;
	size_t alen, hlen;

	/* The authority ends at the first '/', the userinfo at its last '@'. */
	slash = strchr(rest, '/');
	alen = slash != NULL ? (size_t)(slash - rest) : strlen(rest);
	host = rest;
	for (auth_end = rest + alen; auth_end > rest; auth_end--)
		if (auth_end[-1] == '@')
			break;
	if (auth_end > rest) {
		if (parse_userinfo(rest, (size_t)(auth_end - 1 - rest),
		    t) == -1) {
			snprintf(why, whylen, "bad user or password");
			return -1;
		}
		host = auth_end;
	}
	hend = rest + alen;
	if (host < hend && host[0] == '[') {
		if ((p = memchr(host, ']', (size_t)(hend - host))) == NULL) {
			snprintf(why, whylen, "unclosed '[' in host");
			return -1;
		}
		hlen = (size_t)(p - host - 1);
		host++;
		p++;
	} else {
		p = memchr(host, ':', (size_t)(hend - host));
		if (p == NULL)
			p = hend;
		hlen = (size_t)(p - host);
	}
	if (hlen >= sizeof(t->host)) {
		snprintf(why, whylen, "host name too long");
		return -1;
	}
	if (hlen == 0) {
		snprintf(t->host, sizeof(t->host), "127.0.0.1");
	} else {
		memcpy(t->host, host, hlen);
		t->host[hlen] = '\0';
	}
	if (p < hend) {
		if (*p != ':' || parse_int(p + 1, (size_t)(hend - p - 1), 1,
		    65535, &t->port) == -1) {
			snprintf(why, whylen, "bad port");
			return -1;
		}
	}
	if (slash != NULL && slash[1] != '\0') {
		if (parse_int(slash + 1, strlen(slash + 1), 0, REDIS_MAX_DB,
		    &t->db) == -1) {
			snprintf(why, whylen, "bad database number");
			return -1;
		}
	}
	return 0;
}

int
sched_redis_url_parse(const char *url, struct redis_target *out, char *why,
    size_t whylen)
{
	struct redis_target t;
	int rc = -1;

	memset(&t, 0, sizeof(t));
	t.port = REDIS_DEFAULT_PORT;
	if (url == NULL || *url == '\0') {
		snprintf(why, whylen, "empty Redis URL");
		goto out;
	}
	if (strncmp(url, "redis://", 8) == 0)
		rc = parse_tcp(url + 8, &t, why, whylen);
	else if (strncmp(url, "unix://", 7) == 0)
		rc = parse_unix(url + 7, &t, why, whylen);
	else if (strncmp(url, "rediss://", 9) == 0)
		snprintf(why, whylen, "TLS (rediss://) is not supported");
	else
		snprintf(why, whylen,
		    "Redis URL must start with redis:// or unix://");
	if (rc == 0 && t.username[0] != '\0' && t.password[0] == '\0') {
		snprintf(why, whylen, "a user name needs a password");
		rc = -1;
	}
out:
	if (rc == 0)
		*out = t;
	return rc;
}

/* Runs one command; 0, or -1 with why (an error reply or I/O error). */
static int
simple_command(redisContext *c, const char *what, char *why, size_t whylen,
    int argc, const char **argv)
{
	redisReply *r;
	int rc = -1;

	r = redisCommandArgv(c, argc, argv, NULL);
	if (r == NULL) {
		snprintf(why, whylen, "%s: %s", what, c->errstr);
		return -1;
	}
	if (r->type == REDIS_REPLY_ERROR)
		snprintf(why, whylen, "%s: %s", what, r->str);
	else
		rc = 0;
	freeReplyObject(r);
	return rc;
}

redisContext *
sched_redis_connect(const struct redis_target *t, int64_t timeout_ms,
    char *why, size_t whylen)
{
	struct timeval tv;
	redisContext *c;
	char dbs[16];
	const char *argv[3];

	if (timeout_ms <= 0)
		timeout_ms = 1000;
	tv.tv_sec = (time_t)(timeout_ms / 1000);
	tv.tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000;
	if (t->path[0] != '\0')
		c = redisConnectUnixWithTimeout(t->path, tv);
	else
		c = redisConnectWithTimeout(t->host, t->port, tv);
	if (c == NULL) {
		snprintf(why, whylen, "cannot allocate a Redis context");
		return NULL;
	}
	if (c->err) {
		if (t->path[0] != '\0')
			snprintf(why, whylen, "%s: %s", t->path, c->errstr);
		else
			snprintf(why, whylen, "%s:%d: %s", t->host, t->port,
			    c->errstr);
		goto fail;
	}
	if (redisSetTimeout(c, tv) != REDIS_OK) {
		snprintf(why, whylen, "cannot set the Redis timeout");
		goto fail;
	}
	if (t->path[0] == '\0')
		(void)redisEnableKeepAlive(c);
	if (t->password[0] != '\0') {
		argv[0] = "AUTH";
		if (t->username[0] != '\0') {
			argv[1] = t->username;
			argv[2] = t->password;
			if (simple_command(c, "AUTH", why, whylen, 3, argv))
				goto fail;
		} else {
			argv[1] = t->password;
			if (simple_command(c, "AUTH", why, whylen, 2, argv))
				goto fail;
		}
	}
	if (t->db != 0) {
		snprintf(dbs, sizeof(dbs), "%d", t->db);
		argv[0] = "SELECT";
		argv[1] = dbs;
		if (simple_command(c, "SELECT", why, whylen, 2, argv))
			goto fail;
	}
	return c;
fail:
	redisFree(c);
	return NULL;
}

struct sched_pool *
sched_pool_new(const struct redis_target *t, int64_t timeout_ms, int max_idle)
{
	struct sched_pool *p = xcalloc(1, sizeof(*p));

	pthread_mutex_init(&p->lock, NULL);
	p->target = *t;
	p->timeout_ms = timeout_ms;
	p->max_idle = max_idle > 0 ? max_idle : 1;
	p->idle = xcalloc((size_t)p->max_idle, sizeof(*p->idle));
	return p;
}

redisContext *
sched_pool_get(struct sched_pool *p)
{
	redisContext *c = NULL;
	char why[512];

	pthread_mutex_lock(&p->lock);
	if (p->nidle > 0)
		c = p->idle[--p->nidle];
	pthread_mutex_unlock(&p->lock);
	if (c != NULL)
		return c;

	c = sched_redis_connect(&p->target, p->timeout_ms, why, sizeof(why));
	pthread_mutex_lock(&p->lock);
	if (c == NULL && !p->down) {
		p->down = 1;
		log_warnx("redis unreachable: %s", why);
	} else if (c != NULL && p->down) {
		p->down = 0;
		log_info("redis reachable again");
	}
	pthread_mutex_unlock(&p->lock);
	return c;
}

void
sched_pool_put(struct sched_pool *p, redisContext *c, int broken)
{
	redisContext **drop = NULL;
	int ndrop = 0, i;

	if (c == NULL)
		return;
	if (c->err)
		broken = 1;
	pthread_mutex_lock(&p->lock);
	if (broken) {
		/* The others most likely share the failure: close them. */
		drop = xcalloc((size_t)p->nidle + 1, sizeof(*drop));
		for (i = 0; i < p->nidle; i++)
			drop[ndrop++] = p->idle[i];
		p->nidle = 0;
		drop[ndrop++] = c;
	} else if (p->nidle < p->max_idle) {
		p->idle[p->nidle++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	for (i = 0; i < ndrop; i++)
		redisFree(drop[i]);
	free(drop);
	if (!broken && c != NULL)
		redisFree(c);
}

void
sched_pool_free(struct sched_pool *p)
{
	int i;

	if (p == NULL)
		return;
	for (i = 0; i < p->nidle; i++)
		redisFree(p->idle[i]);
	free(p->idle);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
