/*
 * url.c - journal URLs: sqlite:///abs/path.db,
 * mysql://[user[:pass]@]host[:port]/db[?socket=/path] (mariadb:// too), and
 * none.
 *
 * Key decision: strict.  A URL the journal would have to guess about (a
 * relative SQLite path, a port out of range, an unknown query parameter, a
 * bad percent escape, an encoded NUL) is refused at start-up with a sentence
 * naming the problem, never passed on for the database to misread.  User,
 * password, database, path and socket are percent-decoded.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "journal/internal.h"
#include "util/strutil.h"
#include "util/xmalloc.h"

/* Decode s[0..n) into a new string; NULL on a bad escape or a NUL. */
static char *
pct_decode(const char *s, size_t n)
{
	char *out = xmalloc(n + 1);

	if (str_pct_decode(s, n, out, n + 1) == -1) {
		free(out);
		return NULL;
	}
	return out;
}

static enum jrnl_err
fail(struct jrnl_url *u, char *why, size_t whylen, const char *msg)
{
	jrnl_url_free(u);
	snprintf(why, whylen, "%s", msg);
	return JRNL_EURL;
}

static enum jrnl_err
parse_sqlite(const char *rest, struct jrnl_url *u, char *why, size_t whylen)
{
	size_t n = strlen(rest);

	if (rest[0] != '/')
		return fail(u, why, whylen, "sqlite journal URL needs an "
		    "absolute path: sqlite:///abs/path.db");
	if (strchr(rest, '?') != NULL || strchr(rest, '#') != NULL)
		return fail(u, why, whylen,
		    "sqlite journal URL takes no query or fragment");
	if (n < 2 || rest[n - 1] == '/')
		return fail(u, why, whylen,
		    "sqlite journal URL names no file");
	u->path = pct_decode(rest, n);
	if (u->path == NULL)
		return fail(u, why, whylen,
		    "sqlite journal URL has a bad percent escape");
	return JRNL_OK;
}

static enum jrnl_err
parse_port(const char *s, size_t n, unsigned *port)
{
	unsigned long v = 0;
	size_t i;

	if (n == 0 || n > 5)
		return JRNL_EURL;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return JRNL_EURL;
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (v < 1 || v > 65535)
		return JRNL_EURL;
	*port = (unsigned)v;
	return JRNL_OK;
}

static enum jrnl_err
parse_query(const char *q, struct jrnl_url *u, char *why, size_t whylen)
{
	const char *p = q, *amp, *eq;
	size_t n;

	while (*p != '\0') {
		amp = strchr(p, '&');
		n = amp != NULL ? (size_t)(amp - p) : strlen(p);
		eq = memchr(p, '=', n);
		if (eq == NULL || (size_t)(eq - p) != 6 ||
		    strncmp(p, "socket", 6) != 0) {
			snprintf(why, whylen, "mysql journal URL: unknown "
			    "parameter \"%.*s\" (only socket=)", (int)n, p);
			return JRNL_EURL;
		}
		free(u->socket);
		u->socket = pct_decode(eq + 1, n - 7);
		if (u->socket == NULL || u->socket[0] != '/') {
			snprintf(why, whylen, "mysql journal URL: socket= "
			    "needs an absolute path");
			return JRNL_EURL;
		}
		p += n;
		if (*p == '&')
			p++;
	}
	return JRNL_OK;
}

static enum jrnl_err
parse_mysql(const char *rest, struct jrnl_url *u, char *why, size_t whylen)
{
	const char *slash, *at, *colon, *hp, *hend, *q;
	size_t auth_len, hlen, dblen;
	enum jrnl_err e;

	slash = strchr(rest, '/');
	if (slash == NULL)
		return fail(u, why, whylen, "mysql journal URL names no "
		    "database: mysql://user:pass@host:port/db");
	/* user[:pass]@ ends at the last '@' before the path. */
	at = NULL;
	for (hp = rest; hp < slash; hp++)
		if (*hp == '@')
			at = hp;
	hp = rest;
	if (at != NULL) {
		auth_len = (size_t)(at - rest);
		colon = memchr(rest, ':', auth_len);
		if (colon != NULL) {
			u->user = pct_decode(rest, (size_t)(colon - rest));
			u->pass = pct_decode(colon + 1,
			    auth_len - (size_t)(colon - rest) - 1);
			if (u->pass == NULL)
				goto bad_escape;
		} else
			u->user = pct_decode(rest, auth_len);
		if (u->user == NULL)
			goto bad_escape;
		if (u->user[0] == '\0')
			return fail(u, why, whylen,
			    "mysql journal URL has an empty user name");
		hp = at + 1;
	}
	/* host[:port], host may be [v6]. */
	hend = slash;
	if (*hp == '[') {
		const char *rb = memchr(hp, ']', (size_t)(hend - hp));

		if (rb == NULL)
			return fail(u, why, whylen,
			    "mysql journal URL has an unclosed [host]");
		u->host = xstrndup(hp + 1, (size_t)(rb - hp - 1));
		colon = rb + 1 < hend && rb[1] == ':' ? rb + 1 : NULL;
		if (colon == NULL && rb + 1 != hend)
			return fail(u, why, whylen,
			    "mysql journal URL: junk after ]");
	} else {
		colon = memchr(hp, ':', (size_t)(hend - hp));
		hlen = colon != NULL ? (size_t)(colon - hp) :
		    (size_t)(hend - hp);
		if (hlen > 0)
			u->host = xstrndup(hp, hlen);
	}
	if (colon != NULL && parse_port(colon + 1,
	    (size_t)(hend - colon - 1), &u->port) != JRNL_OK)
		return fail(u, why, whylen, "mysql journal URL has a bad "
		    "port (1-65535)");
	/* /db[?query] */
	q = strchr(slash, '?');
	if (strchr(slash, '#') != NULL)
		return fail(u, why, whylen,
		    "mysql journal URL takes no fragment");
	dblen = q != NULL ? (size_t)(q - slash - 1) : strlen(slash + 1);
	if (dblen == 0)
		return fail(u, why, whylen, "mysql journal URL names no "
		    "database: mysql://user:pass@host:port/db");
	u->db = pct_decode(slash + 1, dblen);
	if (u->db == NULL)
		goto bad_escape;
	if (strchr(u->db, '/') != NULL)
		return fail(u, why, whylen,
		    "mysql journal URL: the database name has a '/'");
	if (q != NULL) {
		e = parse_query(q + 1, u, why, whylen);
		if (e != JRNL_OK) {
			jrnl_url_free(u);
			return e;
		}
	}
	if (u->host == NULL && u->socket == NULL)
		return fail(u, why, whylen, "mysql journal URL names no "
		    "host (or ?socket=/path)");
	return JRNL_OK;
bad_escape:
	return fail(u, why, whylen, "mysql journal URL has a bad percent "
	    "escape");
}

enum jrnl_err
jrnl_url_parse(const char *s, struct jrnl_url *u, char *why, size_t whylen)
{
	memset(u, 0, sizeof(*u));
	if (s == NULL || s[0] == '\0')
		return fail(u, why, whylen, "journal URL is empty (use "
		    "\"none\" to run without a journal)");
	if (strcmp(s, "none") == 0) {
		u->kind = JRNL_KIND_NONE;
		return JRNL_OK;
	}
	if (strncmp(s, "sqlite://", 9) == 0) {
		u->kind = JRNL_KIND_SQLITE;
		return parse_sqlite(s + 9, u, why, whylen);
	}
	if (strncmp(s, "mysql://", 8) == 0) {
		u->kind = JRNL_KIND_MYSQL;
		return parse_mysql(s + 8, u, why, whylen);
	}
	if (strncmp(s, "mariadb://", 10) == 0) {
		u->kind = JRNL_KIND_MYSQL;
		return parse_mysql(s + 10, u, why, whylen);
	}
	return fail(u, why, whylen, "journal URL scheme is not one of "
	    "sqlite://, mysql://, mariadb:// or none");
}

void
jrnl_url_free(struct jrnl_url *u)
{
	if (u == NULL)
		return;
	free(u->path);
	if (u->pass != NULL)
		explicit_bzero(u->pass, strlen(u->pass));
	free(u->pass);
	free(u->user);
	free(u->host);
	free(u->db);
	free(u->socket);
	memset(u, 0, sizeof(*u));
}
