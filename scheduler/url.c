/*
 * url.c - Redis URLs: redis://[[user]:password@]host[:port][/db] and
 * unix://[[user]:password@]/path[?db=N] into a struct redis_target, and
 * redis.url's comma-separated list of a cluster's seeds into several.
 *
 * Key decision: strict parsing with a reason for every refusal (a bad URL
 * is a start-up error the operator must understand), percent-decoding of
 * user and password, and no TLS (rediss://) rather than a silent plain
 * connection.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/conn.h"
#include "util/strutil.h"

#define REDIS_DEFAULT_PORT	6379
#define REDIS_MAX_DB		1000000

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

int
sched_redis_seeds_parse(const char *list, struct redis_target *out, int max,
    char *why, size_t whylen)
{
	struct redis_target t;
	const char *p, *end;
	char url[1024], one[256];
	const char *bad = NULL;
	size_t len;
	int i, n = 0;

	if (list == NULL || *list == '\0') {
		snprintf(why, whylen, "empty Redis URL");
		return -1;
	}
	for (p = list;; p = end + 1) {
		/* One URL between commas, blanks around it left out. */
		if ((end = strchr(p, ',')) == NULL)
			end = p + strlen(p);
		while (p < end && (*p == ' ' || *p == '\t'))
			p++;
		len = (size_t)(end - p);
		while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (len == 0 || len >= sizeof(url)) {
			snprintf(why, whylen, "seed %d of the list: %s", n + 1,
			    len == 0 ? "empty" : "too long");
			return -1;
		}
		if (n == max) {
			snprintf(why, whylen, "more than %d seeds", max);
			return -1;
		}
		memcpy(url, p, len);
		url[len] = '\0';
		if (sched_redis_url_parse(url, &t, one, sizeof(one)) == -1) {
			if (n == 0 && *end == '\0')
				snprintf(why, whylen, "%s", one);
			else
				snprintf(why, whylen, "seed %d of the list: %s",
				    n + 1, one);
			return -1;
		}
		out[n++] = t;
		if (*end == '\0')
			break;
	}
	for (i = 0; n > 1 && i < n; i++) {
		if (out[i].path[0] != '\0')
			bad = "a list of seeds is for a Redis Cluster: "
			    "redis:// only";
		else if (out[i].db != 0)
			bad = "a Redis Cluster has no database but 0";
		else if (strcmp(out[i].username, out[0].username) != 0 ||
		    strcmp(out[i].password, out[0].password) != 0)
			bad = "every seed needs the same user and password";
		if (bad != NULL) {
			snprintf(why, whylen, "seed %d of the list: %s", i + 1,
			    bad);
			return -1;
		}
	}
	return n;
}
