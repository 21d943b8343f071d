/*
 * http.c - libmicrohttpd glue: routing, capped bodies, replies, suspension.
 *
 * Key decisions:
 *  - We bind the listening socket ourselves (api_listen) and hand it to MHD,
 *    so "port 0" works and the log can say which port was taken.
 *  - MHD runs its own thread pool on epoll with suspend/resume allowed; a
 *    handler that must wait (a long-polling consumer) suspends its connection
 *    instead of holding a thread.
 *  - The path is decoded by our own unescape callback, which leaves "%00"
 *    undecoded so a NUL can never truncate a name into another valid name.
 *  - Bodies are read into a struct buf capped by the configured limit; a
 *    declared Content-Length over the limit is answered 413 before reading.
 *  - HEAD runs the GET route (unless it changes something) and MHD drops
 *    the body: no handler needs to know.
 */
#include "config.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "api/http.h"
#include "util/clock.h"
#include "util/jsonout.h"
#include "util/log.h"
#include "util/strutil.h"
#include "util/xmalloc.h"

struct pending_header {
	char	*name;
	char	*value;
};

struct req_priv {
	struct api_req		 pub;
	struct pending_header	 hdr[8];
	int			 nhdr;
	int			 started;	/* body complete, handler ran */
	int			 parked;	/* api_suspend in this call,
						   not refused */
	int			 refused;	/* ... while stopping: not, or
						   the drain or the stop
						   resumed it (REFUSED_*) */
	int			 unanswered;	/* close it, no answer */
	int			 late;		/* its connection came after
						   the quiesce */
	int			 ran;		/* the handler ran once */
	int			 busy;		/* counted in srv->busy */
	/* ran and busy: only the request's own MHD thread touches them. */
	int			 idle;		/* api_suspend_idle (lock) */
	int			 drained;	/* resumed by the drain: counted
						   in srv->busy by it */
	const char		*raw_uri;	/* the request line's target, */
	size_t			 raw_len;	/* ... as read (uri_seen()) */
	struct req_priv		*next_susp;	/* srv->suspended list */
	struct req_priv		*prev_susp;
};

#define API_STOP_WAIT_MS	1000	/* for the requests the stop resumes */

/*
 * A request its handler parked once it could not be, or the drain or the
 * stop resumed before its work was done: answered 503 when nothing was
 * done for it (a long-poll waiting idly), closed without an answer when
 * its work may be under way (end_refused()).
 */
#define REFUSED_IDLE	1
#define REFUSED_BUSY	2

/* The socket context of a connection made after the quiesce. */
static char late_mark;

struct api_server {
	struct MHD_Daemon		*mhd;
	struct api_server_config	 cfg;
	pthread_mutex_t			 lock;	/* guards suspended; stopping
						   is written under it, read
						   atomically */
	struct req_priv			*suspended;
	int				 stopping;
	/*
	 * Requests begun (their handler called) and not completed yet, but
	 * for those waiting idly (api_suspend_idle); atomic.
	 * api_server_drain() waits for none on idle, under drain_mu, which is
	 * never held with the lock above or across a call into
	 * libmicrohttpd (completed() takes it).
	 */
	int				 busy;
	int				 draining;	/* atomic */
	int				 quiesced;	/* atomic */
	pthread_mutex_t			 drain_mu;
	pthread_cond_t			 idle;
};

static struct req_priv *
priv(struct api_req *req)
{
	return (struct req_priv *)(void *)req;
}

int
api_listen(const char *hostport, char *bound, size_t boundlen, char *why,
    size_t whylen)
{
	struct addrinfo hints, *res = NULL, *ai;
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	char host[256], port[16], nhost[NI_MAXHOST], nport[NI_MAXSERV];
	const char *colon = strrchr(hostport, ':');
	int fd = -1, one = 1, e;
	size_t hl;

	if (colon == NULL) {
		snprintf(why, whylen, "\"%s\" is not host:port", hostport);
		return -1;
	}
	hl = (size_t)(colon - hostport);
	if (hl >= sizeof(host))
		hl = sizeof(host) - 1;
	memcpy(host, hostport, hl);
	host[hl] = '\0';
	if (host[0] == '[' && hl > 1 && host[hl - 1] == ']') {
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = '\0';
	}
	snprintf(port, sizeof(port), "%s", colon + 1);
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	if ((e = getaddrinfo(host[0] ? host : NULL, port, &hints, &res)) != 0) {
		snprintf(why, whylen, "%s: %s", hostport, gai_strerror(e));
		return -1;
	}
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC,
		    ai->ai_protocol);
		if (fd == -1)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
		    listen(fd, 1024) == 0)
			break;
		snprintf(why, whylen, "%s: %s", hostport, strerror(errno));
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd == -1)
		return -1;
	if (getsockname(fd, (struct sockaddr *)&ss, &sslen) == 0 &&
	    getnameinfo((struct sockaddr *)&ss, sslen, nhost, sizeof(nhost),
	    nport, sizeof(nport), NI_NUMERICHOST | NI_NUMERICSERV) == 0)
		snprintf(bound, boundlen, ss.ss_family == AF_INET6 ?
		    "[%s]:%s" : "%s:%s", nhost, nport);
	else
		snprintf(bound, boundlen, "%s", hostport);
	return fd;
}

/* MHD unescape callback: %XX decoding that keeps %00 as it is. */
static size_t
unescape(void *cls, struct MHD_Connection *c, char *s)
{
	char *r = s, *w = s;
	int hi, lo;

	(void)cls;
	(void)c;
	while (*r != '\0') {
		if (r[0] == '%' &&
		    (hi = str_hexval((unsigned char)r[1])) >= 0 &&
		    (lo = str_hexval((unsigned char)r[2])) >= 0 &&
		    (hi | lo) != 0) {
			*w++ = (char)(hi * 16 + lo);
			r += 3;
		} else
			*w++ = *r++;
	}
	*w = '\0';
	return (size_t)(w - s);
}

/*
 * Match path against pattern; on success fill params.  Segments of the
 * pattern written {name} match one non-empty path segment.
 */
static int
route_match(const char *pattern, const char *path, struct api_req *req)
{
	const char *p = pattern, *s = path, *se;
	int n = 0;

	/* Literal segments are compared as walked: most routes differ early. */
	while (*p != '\0' && *s != '\0') {
		if (*p != '/' || *s != '/')
			goto no;
		p++;
		s++;
		if (*p == '{') {
			for (se = s; *se != '\0' && *se != '/'; se++)
				;
			if (se == s || n >= API_MAX_PARAMS)
				goto no;
			if (req != NULL)
				req->param[n] = xstrndup(s, (size_t)(se - s));
			n++;
			while (*p != '\0' && *p != '/')
				p++;
			s = se;
			continue;
		}
		for (; *p != '\0' && *p != '/' && *p == *s; p++, s++)
			;
		if ((*p != '\0' && *p != '/') || (*s != '\0' && *s != '/'))
			goto no;
	}
	if (*p != '\0' || *s != '\0') {
no:
		if (req != NULL)
			while (n > 0)
				free(req->param[--n]);
		return 0;
	}
	if (req != NULL)
		req->nparam = n;
	return 1;
}

static void
clear_params(struct api_req *req)
{
	while (req->nparam > 0)
		free(req->param[--req->nparam]);
}

/* Adds method to the list allowed (n long) unless it is there. */
static size_t
allow_add(char *allowed, size_t allowedlen, size_t n, const char *method)
{
	if (n < allowedlen && strstr(allowed, method) == NULL)
		n += (size_t)snprintf(allowed + n, allowedlen - n, "%s%s",
		    n ? ", " : "", method);
	return n;
}

/*
 * Find the route; *allowed gets the methods of a path match (for 405).
 * HEAD takes a GET route without API_NO_HEAD: MHD sends the answer's
 * headers, Content-Length included, without its body.
 */
static const struct api_route *
route_find(struct api_server *srv, struct api_req *req, char *allowed,
    size_t allowedlen)
{
	const struct api_route *const *set;
	const struct api_route *r;
	int head = strcmp(req->method, MHD_HTTP_METHOD_HEAD) == 0;
	int can_head;
	size_t n = 0;

	allowed[0] = '\0';
	/* First the routes of the method: the path is matched only there. */
	for (set = srv->cfg.routes; *set != NULL; set++)
		for (r = *set; r->method != NULL; r++) {
			can_head = head && strcmp(r->method,
			    MHD_HTTP_METHOD_GET) == 0 &&
			    (r->flags & API_NO_HEAD) == 0;
			if ((can_head || strcmp(r->method, req->method) == 0) &&
			    route_match(r->pattern, req->path, req))
				return r;
		}
	/* None: the methods the path has, for the 405's Allow. */
	for (set = srv->cfg.routes; *set != NULL; set++)
		for (r = *set; r->method != NULL; r++) {
			if (!route_match(r->pattern, req->path, NULL))
				continue;
			can_head = strcmp(r->method, MHD_HTTP_METHOD_GET) ==
			    0 && (r->flags & API_NO_HEAD) == 0;
			n = allow_add(allowed, allowedlen, n, r->method);
			if (can_head)
				n = allow_add(allowed, allowedlen, n,
				    MHD_HTTP_METHOD_HEAD);
		}
	return NULL;
}

void
api_add_header(struct api_req *req, const char *name, const char *value)
{
	struct req_priv *rp = priv(req);

	if (rp->nhdr >= (int)(sizeof(rp->hdr) / sizeof(rp->hdr[0])))
		return;
	rp->hdr[rp->nhdr].name = xstrdup(name);
	rp->hdr[rp->nhdr].value = xstrdup(value);
	rp->nhdr++;
}

void
api_reply(struct api_req *req, int status, const char *ctype,
    const void *body, size_t len)
{
	struct req_priv *rp = priv(req);
	struct MHD_Response *resp;
	int i;

	if (req->answered) {
		log_warnx("http: %s %s answered twice", req->method,
		    req->path);
		return;
	}
	req->answered = 1;
	req->status = status;
	resp = MHD_create_response_from_buffer(len, (void *)(uintptr_t)body,
	    MHD_RESPMEM_MUST_COPY);
	if (resp == NULL) {
		log_warnx("http: cannot create a response");
		return;
	}
	if (ctype != NULL)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
		    ctype);
	for (i = 0; i < rp->nhdr; i++)
		MHD_add_response_header(resp, rp->hdr[i].name,
		    rp->hdr[i].value);
	MHD_queue_response(req->conn, (unsigned)status, resp);
	MHD_destroy_response(resp);
}

void
api_reply_json(struct api_req *req, int status, json_object *obj)
{
	size_t len;
	const char *s;

	s = json_object_to_json_string_length(obj, JSON_C_TO_STRING_PLAIN |
	    JSON_C_TO_STRING_NOSLASHESCAPE, &len);
	api_reply(req, status, "application/json", s, len);
	json_object_put(obj);
}

void
api_put_str(struct buf *b, const char *key, const char *v)
{
	buf_puts(b, key);
	if (v == NULL)
		buf_puts(b, "null");
	else
		jsonout_str(b, v, strlen(v));
}

void
api_put_int(struct buf *b, const char *key, int64_t v)
{
	buf_puts(b, key);
	jsonout_int(b, v);
}

void
api_reply_empty(struct api_req *req, int status)
{
	api_reply(req, status, NULL, "", 0);
}

/*
 * Replace every byte of s that is not part of valid UTF-8 with '?', in
 * place: messages quote paths and names the client sent, and an answer
 * must stay valid JSON whatever they held.
 */
static void
utf8_scrub(char *s)
{
	unsigned char *u = (unsigned char *)s;
	size_t i = 0, n, k;
	uint32_t cp;

	while (u[i] != '\0') {
		n = u[i] < 0x80 ? 1 : (u[i] & 0xe0) == 0xc0 ? 2 :
		    (u[i] & 0xf0) == 0xe0 ? 3 : (u[i] & 0xf8) == 0xf0 ? 4 : 0;
		cp = n == 2 ? (u[i] & 0x1fu) : n == 3 ? (u[i] & 0x0fu) :
		    (u[i] & 0x07u);
		for (k = 1; k < n; k++) {
			if ((u[i + k] & 0xc0) != 0x80)
				break;
			cp = (cp << 6) | (u[i + k] & 0x3fu);
		}
		if (n == 0 || k < n || (n == 2 && cp < 0x80) ||
		    (n == 3 && (cp < 0x800 || (cp >= 0xd800 &&
		    cp <= 0xdfff))) || (n == 4 && (cp < 0x10000 ||
		    cp > 0x10ffff))) {
			u[i++] = '?';
			continue;
		}
		i += n;
	}
}

/*
 * s was cut at n bytes (its NUL there): drops a UTF-8 sequence the cut left
 * incomplete at its end.
 */
static void
utf8_trim(char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = n, len;

	while (i > 0 && n - i < 3 && (u[i - 1] & 0xc0) == 0x80)
		i--;
	if (i == 0 || u[i - 1] < 0xc0)
		return;
	len = (u[i - 1] & 0xe0) == 0xc0 ? 2 : (u[i - 1] & 0xf0) == 0xe0 ? 3 :
	    4;
	if (i - 1 + len > n)
		s[i - 1] = '\0';
}

#define FIELD_SHOWN	320	/* a field's bytes: a header's path */

void
api_error(struct api_req *req, int status, const char *code,
    const char *field, const char *fmt, ...)
{
	json_object *root, *err;
	char msg[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n >= (int)sizeof(msg))
		utf8_trim(msg, sizeof(msg) - 1);
	utf8_scrub(msg);
	root = json_object_new_object();
	err = json_object_new_object();
	json_object_object_add(err, "code", json_object_new_string(code));
	json_object_object_add(err, "message", json_object_new_string(msg));
	if (field != NULL)
		json_object_object_add(err, "field",
		    json_object_new_string_len(field, (int)api_text_shown(field,
		    strnlen(field, FIELD_SHOWN), FIELD_SHOWN)));
	json_object_object_add(root, "error", err);
	api_reply_json(req, status, root);
}

const char *
api_header(struct api_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *
api_query(struct api_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn,
	    MHD_GET_ARGUMENT_KIND, name);
}

#define JSON_STRICT_DEPTH	64

static size_t
json_ws(const unsigned char *s, size_t i, size_t n)
{
	while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' ||
	    s[i] == '\r'))
		i++;
	return i;
}

/*
 * The length of the UTF-8 sequence at s[i], or 0 when it is not valid
 * UTF-8 (overlong forms, surrogates and code points past U+10FFFF
 * included: json-c lets those through).
 */
static size_t
utf8_seq(const unsigned char *s, size_t i, size_t n)
{
	size_t len, k;
	uint32_t cp;

	if (s[i] < 0x80)
		return 1;
	len = (s[i] & 0xe0) == 0xc0 ? 2 : (s[i] & 0xf0) == 0xe0 ? 3 :
	    (s[i] & 0xf8) == 0xf0 ? 4 : 0;
	if (len == 0 || i + len > n)
		return 0;
	cp = len == 2 ? (s[i] & 0x1fu) : len == 3 ? (s[i] & 0x0fu) :
	    (s[i] & 0x07u);
	for (k = 1; k < len; k++) {
		if ((s[i + k] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i + k] & 0x3fu);
	}
	if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
	    (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

size_t
api_text_shown(const char *s, size_t n, size_t max)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t k = 0, c;

	while (k < n && u[k] >= 0x20 && u[k] != 0x7f && u[k] != '"' &&
	    u[k] != '\\' && (c = utf8_seq(u, k, n)) != 0 && k + c <= max)
		k += c;
	return k;
}

/*
 * A string at s[i] (the quote); the index past it, or 0 when invalid.
 * Notes in sh a \\u escape and a byte past printable ASCII.
 */
static size_t
json_string(const unsigned char *s, size_t i, size_t n,
    struct api_json_shape *sh)
{
	size_t k;

	for (i++; i < n; i++) {
		if (s[i] == '"')
			return i + 1;
		if (s[i] < 0x20)
			return 0;
		if (s[i] > 0x7e)
			sh->unprintable = 1;
		if (s[i] >= 0x80) {
			if ((k = utf8_seq(s, i, n)) == 0)
				return 0;
			i += k - 1;
			continue;
		}
		if (s[i] != '\\')
			continue;
		if (++i >= n)
			return 0;
		if (s[i] == 'u') {
			for (k = 1; k <= 4; k++)
				if (i + k >= n || str_hexval(s[i + k]) < 0)
					return 0;
			i += 4;
			sh->u_escape = 1;
		} else if (strchr("\"\\/bfnrt", s[i]) == NULL || s[i] == '\0')
			return 0;
	}
	return 0;
}

/* A run of digits from s[i]: its end, the longest run noted in sh. */
static size_t
json_digits(const unsigned char *s, size_t i, size_t n,
    struct api_json_shape *sh)
{
	size_t d = i;

	while (i < n && s[i] >= '0' && s[i] <= '9')
		i++;
	if (i - d > sh->digits)
		sh->digits = i - d;
	return i;
}

/*
 * 1 when the integer of the digits d[0..n) (no leading zero), negative or
 * not, lies beyond what json-c keeps: -2^63 .. 2^64 - 1.  json-c clamps
 * such a number to the nearest end without a word, and a job's body must
 * reach its callback exactly as given.
 */
static int
json_int_beyond(const unsigned char *d, size_t n, int neg)
{
	static const char min[] = "9223372036854775808";
	static const char max[] = "18446744073709551615";
	const char *lim = neg ? min : max;
	size_t len = neg ? sizeof(min) - 1 : sizeof(max) - 1;

	if (n != len)
		return n > len;
	return memcmp(d, lim, len) > 0;
}

/*
 * A number at s[i]; the index past it, or 0 when invalid.  Notes in sh
 * its longest digit run (integer or fraction part) and an exponent.
 */
static size_t
json_number(const unsigned char *s, size_t i, size_t n,
    struct api_json_shape *sh)
{
	size_t d, start;
	int neg = 0;

	if (i < n && s[i] == '-') {
		neg = 1;
		i++;
	}
	start = i;
	if (i < n && s[i] == '0')
		i = json_digits(s, i, i + 1, sh);
	else if (i < n && s[i] >= '1' && s[i] <= '9')
		i = json_digits(s, i, n, sh);
	else
		return 0;
	if (!(i < n && (s[i] == '.' || s[i] == 'e' || s[i] == 'E')) &&
	    json_int_beyond(s + start, i - start, neg))
		sh->int_range = 1;
	if (i < n && s[i] == '.') {
		d = ++i;
		if ((i = json_digits(s, i, n, sh)) == d)
			return 0;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		sh->exponent = 1;
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		for (d = i; i < n && s[i] >= '0' && s[i] <= '9'; i++)
			;
		if (i == d)
			return 0;
	}
	return i;
}

/*
 * Member names, to find one given twice in an object: json-c keeps the
 * last without a word, so {"delay_ms": "soon", "delay_ms": 1} would pass
 * as the second, and a job's body would lose the first on its way to the
 * callback.  The names of the objects open at a point of the scan are kept
 * in one array, an object's after its parent's, dropped when it closes.
 * An object's names are compared when it closes: pairwise when it has a
 * few, sorted when it has more, so an object of m members costs at most
 * m log m comparisons.  Names compare as json-c keeps them: escapes
 * decoded, a lone surrogate read as U+FFFD.  A name holding a \u0000 is
 * refused as it is noted: json-c would cut it there, so "delay_ms\u0000x"
 * would be read as delay_ms.
 */
#define NAMES_LOCAL	32	/* names kept without allocating */
#define NAMES_PAIRWISE	8	/* objects up to this size compare pairwise */

struct json_name {
	const unsigned char	*p;	/* the name as json-c keeps it */
	size_t			 len;
	size_t			 at;	/* its offset in the text */
};

struct json_names {
	struct json_name	*v;	/* the open objects' names */
	size_t			 n;
	size_t			 cap;
	unsigned char		*dec;	/* decoded names (those with escapes) */
	size_t			 declen;
	/* Per level: an object's first name in v; its current one in v, or
	   an array's current element. */
	size_t			 first[JSON_STRICT_DEPTH];
	size_t			 pos[JSON_STRICT_DEPTH];
	struct json_name	 local[NAMES_LOCAL];
};

static uint32_t
hex4(const unsigned char *s)
{
	return (uint32_t)(str_hexval(s[0]) << 12 | str_hexval(s[1]) << 8 |
	    str_hexval(s[2]) << 4 | str_hexval(s[3]));
}

/* Writes code point cp at d[k] as UTF-8; the length after it. */
static size_t
utf8_put(unsigned char *d, size_t k, uint32_t cp)
{
	if (cp < 0x80) {
		d[k++] = (unsigned char)cp;
		return k;
	}
	if (cp < 0x800)
		d[k++] = (unsigned char)(0xc0 | cp >> 6);
	else {
		if (cp < 0x10000)
			d[k++] = (unsigned char)(0xe0 | cp >> 12);
		else {
			d[k++] = (unsigned char)(0xf0 | cp >> 18);
			d[k++] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
		}
		d[k++] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
	}
	d[k++] = (unsigned char)(0x80 | (cp & 0x3f));
	return k;
}

/*
 * Decodes the valid string contents s[i..j) into d the way json-c keeps
 * a member name; its length (never more than j - i).  *nul is set when a
 * \u0000 cut it there.
 */
static size_t
name_decode(const unsigned char *s, size_t i, size_t j, unsigned char *d,
    int *nul)
{
	static const char esc[] = "b\bf\fn\nr\rt\t";
	const char *e;
	uint32_t cp, lo;
	size_t k = 0;

	while (i < j) {
		if (s[i] != '\\') {
			d[k++] = s[i++];
			continue;
		}
		if (s[++i] != 'u') {
			e = strchr(esc, s[i]);
			d[k++] = e != NULL ? (unsigned char)e[1] : s[i];
			i++;
			continue;
		}
		cp = hex4(s + i + 1);
		i += 5;
		if (cp >= 0xd800 && cp <= 0xdbff && j - i >= 6 &&
		    s[i] == '\\' && s[i + 1] == 'u' &&
		    (lo = hex4(s + i + 2)) >= 0xdc00 && lo <= 0xdfff) {
			cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			i += 6;
		} else if (cp >= 0xd800 && cp <= 0xdfff)
			cp = 0xfffd;
		if (cp == 0) {
			*nul = 1;
			break;
		}
		k = utf8_put(d, k, cp);
	}
	return k;
}

/*
 * Notes the member name at s[i..j) (quotes included) of a text of n; -1
 * when it holds a \u0000, where json-c would cut it (noted up to there).
 */
static int
names_add(struct json_names *nm, const unsigned char *s, size_t i, size_t j,
    size_t n)
{
	struct json_name *e;
	const unsigned char *raw = s + i + 1;
	size_t rawlen = j - i - 2;
	int nul = 0;

	if (nm->n == nm->cap) {
		if (nm->v == nm->local) {
			nm->v = xreallocarray(NULL, nm->cap * 2,
			    sizeof(*nm->v));
			memcpy(nm->v, nm->local, sizeof(nm->local));
		} else
			nm->v = xreallocarray(nm->v, nm->cap * 2,
			    sizeof(*nm->v));
		nm->cap *= 2;
	}
	e = &nm->v[nm->n++];
	e->at = i;
	if (memchr(raw, '\\', rawlen) == NULL) {
		e->p = raw;
		e->len = rawlen;
		return 0;
	}
	/* Decoded names are no longer than their text: n bytes hold all. */
	if (nm->dec == NULL)
		nm->dec = xmalloc(n);
	e->p = nm->dec + nm->declen;
	e->len = name_decode(s, i + 1, j - 1, nm->dec + nm->declen, &nul);
	nm->declen += e->len;
	return nul ? -1 : 0;
}

static int
name_eq(const struct json_name *x, const struct json_name *y)
{
	return x->len == y->len && memcmp(x->p, y->p, x->len) == 0;
}

static int
name_cmp(const void *a, const void *b)
{
	const struct json_name *x = a, *y = b;
	int c;

	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	if ((c = memcmp(x->p, y->p, x->len)) != 0)
		return c;
	return x->at < y->at ? -1 : x->at > y->at;
}

/*
 * The object whose names start at first closes: drops its names and
 * returns the one repeated first in the text (its second occurrence), or
 * NULL.  What it returns stays valid until the next names_add().
 */
static const struct json_name *
names_close(struct json_names *nm, size_t first)
{
	struct json_name *v = nm->v + first, *dup = NULL;
	size_t m = nm->n - first, i, k;

	nm->n = first;
	if (m <= NAMES_PAIRWISE) {
		for (i = 1; i < m; i++)
			for (k = 0; k < i; k++)
				if (name_eq(&v[i], &v[k]))
					return &v[i];
		return NULL;
	}
	qsort(v, m, sizeof(*v), name_cmp);
	for (i = 1; i < m; i++)
		if (name_eq(&v[i], &v[i - 1]) &&
		    (dup == NULL || v[i].at < dup->at))
			dup = &v[i];
	return dup;
}

/*
 * Appends b[0..n) to the path out (of outlen, NUL-terminated, *len long),
 * as much as api_text_shown() shows of a name (at most API_NAME_SHOWN
 * bytes); once something was cut or did not fit, nothing more is added,
 * so the path shown is always the start of the member's.
 */
static void
path_put(char *out, size_t outlen, size_t *len, const unsigned char *b,
    size_t n)
{
	size_t k;

	if (*len >= outlen - 1)
		return;
	k = api_text_shown((const char *)b, n, API_NAME_SHOWN);
	k = api_text_shown((const char *)b, k, outlen - 1 - *len);
	memcpy(out + *len, b, k);
	out[*len += k] = '\0';
	if (k < n)
		*len = outlen - 1;
}

/*
 * The path of name e of the object at level d, as errors name fields:
 * "jobs[3].body.a" (stack[0..d) the levels that lead to it).
 */
static void
names_path(const struct json_names *nm, const char *stack, int d,
    const struct json_name *e, char *out, size_t outlen)
{
	char idx[32];
	size_t len = 0;
	int k;

	out[0] = '\0';
	for (k = 0; k <= d; k++) {
		if (k < d && stack[k] == '[') {
			snprintf(idx, sizeof(idx), "[%zu]", nm->pos[k]);
			path_put(out, outlen, &len,
			    (const unsigned char *)idx, strlen(idx));
			continue;
		}
		if (len > 0)
			path_put(out, outlen, &len,
			    (const unsigned char *)".", 1);
		if (k < d)
			path_put(out, outlen, &len, nm->v[nm->pos[k]].p,
			    nm->v[nm->pos[k]].len);
		else
			path_put(out, outlen, &len, e->p, e->len);
	}
}

/*
 * RFC 8259 syntax, which json-c does not enforce even when strict (it takes
 * single quotes, NaN, Infinity, "1." and raw control characters in
 * strings).  NULL when s is one valid JSON text, else the reason.
 */
const char *
api_json_strict_check(const unsigned char *s, size_t n)
{
	struct api_json_shape sh;

	return api_json_scan(s, n, &sh);
}

const char *
api_json_scan(const unsigned char *s, size_t n, struct api_json_shape *sh)
{
	return api_json_scan_dup(s, n, sh, NULL, 0);
}

/* api_json_scan(), and with nm a member name given twice (see above). */
static const char *
json_scan(const unsigned char *s, size_t n, struct api_json_shape *sh,
    struct json_names *nm, char *dup, size_t duplen)
{
	enum { J_VALUE, J_VALUE1, J_KEY, J_KEY1, J_AFTER } st = J_VALUE;
	const struct json_name *e;
	char stack[JSON_STRICT_DEPTH];
	int depth = 0, k;
	size_t i = 0, j;

	memset(sh, 0, sizeof(*sh));
	for (;;) {
		i = json_ws(s, i, n);
		if (i >= n)
			return st == J_AFTER && depth == 0 ? NULL :
			    "unexpected end of data";
		switch (st) {
		case J_VALUE1:
			if (s[i] == ']') {
				depth--;
				i++;
				st = J_AFTER;
				break;
			}
			/* FALLTHROUGH */
		case J_VALUE:
			if (s[i] == '{' || s[i] == '[') {
				if (depth >= JSON_STRICT_DEPTH)
					return "nested too deeply";
				stack[depth++] = (char)s[i];
				if (depth > sh->depth)
					sh->depth = depth;
				if (nm != NULL && s[i] == '{')
					nm->first[depth - 1] = nm->n;
				else if (nm != NULL)
					nm->pos[depth - 1] = 0;
				st = s[i++] == '{' ? J_KEY1 : J_VALUE1;
				break;
			}
			if (s[i] == '"')
				j = json_string(s, i, n, sh);
			else if (s[i] == '-' || (s[i] >= '0' && s[i] <= '9'))
				j = json_number(s, i, n, sh);
			else if (n - i >= 4 && memcmp(s + i, "true", 4) == 0)
				j = i + 4;
			else if (n - i >= 5 && memcmp(s + i, "false", 5) == 0)
				j = i + 5;
			else if (n - i >= 4 && memcmp(s + i, "null", 4) == 0)
				j = i + 4;
			else
				return "unexpected character";
			if (j == 0)
				return s[i] == '"' ? "invalid string (escape, "
				    "control character or UTF-8)" :
				    "invalid number";
			i = j;
			st = J_AFTER;
			break;
		case J_KEY1:
			if (s[i] == '}') {
				depth--;
				i++;
				st = J_AFTER;
				break;
			}
			/* FALLTHROUGH */
		case J_KEY:
			if (s[i] != '"' || (j = json_string(s, i, n, sh)) == 0)
				return "a member name must be a string";
			if (nm != NULL) {
				k = names_add(nm, s, i, j, n);
				nm->pos[depth - 1] = nm->n - 1;
				if (k == -1) {
					sh->nul_name = 1;
					names_path(nm, stack, depth - 1,
					    &nm->v[nm->n - 1], dup, duplen);
					return "a member name holds \\u0000";
				}
			}
			i = json_ws(s, j, n);
			if (i >= n || s[i] != ':')
				return "':' expected after a member name";
			i++;
			st = J_VALUE;
			break;
		case J_AFTER:
			if (depth == 0)
				return "data after the value";
			if (s[i] == ',') {
				i++;
				st = stack[depth - 1] == '{' ? J_KEY : J_VALUE;
				if (nm != NULL && st == J_VALUE)
					nm->pos[depth - 1]++;
			} else if (s[i] == '}' && stack[depth - 1] == '{') {
				if (nm != NULL && (e = names_close(nm,
				    nm->first[depth - 1])) != NULL) {
					sh->dup_name = 1;
					names_path(nm, stack, depth - 1, e,
					    dup, duplen);
					return "a member name is given twice "
					    "in one object";
				}
				depth--;
				i++;
			} else if (s[i] == ']' && stack[depth - 1] == '[') {
				depth--;
				i++;
			} else
				return "',' or the end of the container "
				    "expected";
			break;
		}
	}
}

const char *
api_json_scan_dup(const unsigned char *s, size_t n,
    struct api_json_shape *sh, char *dup, size_t duplen)
{
	struct json_names nm;
	const char *why;

	if (dup == NULL || duplen == 0)
		return json_scan(s, n, sh, NULL, NULL, 0);
	dup[0] = '\0';
	nm.v = nm.local;
	nm.n = 0;
	nm.cap = NAMES_LOCAL;
	nm.dec = NULL;
	nm.declen = 0;
	why = json_scan(s, n, sh, &nm, dup, duplen);
	if (nm.v != nm.local)
		free(nm.v);
	free(nm.dec);
	return why;
}

/*
 * Each thread's JSON tokener, made at its first body and reset after each:
 * a new one per request was a calloc of its 2 KiB stack, which made glibc
 * consolidate its fast bins on every request.  Freed when the thread ends,
 * and after a body over 64 KiB, whose long strings would otherwise stay
 * in its buffer.
 */
#define TOKENER_KEEP_MAX	(64 * 1024)	/* larger bodies: a new one */

static pthread_key_t	tok_key;
static pthread_once_t	tok_once = PTHREAD_ONCE_INIT;

static void
tokener_free(void *tok)
{
	json_tokener_free(tok);
}

static void
tokener_key_init(void)
{
	if (pthread_key_create(&tok_key, tokener_free) != 0)
		fatalx("api: cannot make a thread key");
}

static struct json_tokener *
thread_tokener(void)
{
	struct json_tokener *tok;

	pthread_once(&tok_once, tokener_key_init);
	if ((tok = pthread_getspecific(tok_key)) != NULL)
		return tok;
	if ((tok = json_tokener_new_ex(64)) == NULL ||
	    pthread_setspecific(tok_key, tok) != 0)
		fatalx("api: out of memory");
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT |
	    JSON_TOKENER_VALIDATE_UTF8);
	return tok;
}

int
api_body_json(struct api_req *req, json_object **out)
{
	struct api_json_shape sh;
	struct json_tokener *tok;
	const char *why;
	json_object *obj;
	enum json_tokener_error e;
	char dup[256];

	*out = NULL;
	if (req->body.len == 0) {
		api_error(req, 400, "invalid_json", NULL,
		    "a JSON object body is required");
		return -1;
	}
	if (memchr(req->body.data, '\0', req->body.len) != NULL) {
		api_error(req, 400, "invalid_json", NULL,
		    "the body contains a NUL byte");
		return -1;
	}
	if ((why = api_json_scan_dup((const unsigned char *)req->body.data,
	    req->body.len, &sh, dup, sizeof(dup))) != NULL) {
		if (sh.dup_name)
			api_error(req, 400, "invalid_json",
			    dup[0] != '\0' ? dup : NULL,
			    "%s is given twice: an object must name each "
			    "member once", dup[0] != '\0' ? dup :
			    "a member name");
		else if (sh.nul_name)
			api_error(req, 400, "invalid_json",
			    dup[0] != '\0' ? dup : NULL,
			    "%s\\u0000...: a member name must not hold "
			    "\\u0000 (it would be cut there)", dup);
		else
			api_error(req, 400, "invalid_json", NULL,
			    "the body is not valid JSON: %s", why);
		return -1;
	}
	/* The member that holds it answers (api_json_int, job bodies). */
	req->int_clamped = sh.int_range;
	tok = thread_tokener();
	/*
	 * With the buffer's NUL after the text: at the end of its input
	 * json-c cannot tell a bare number or literal ("42", "true") has
	 * ended, and waits for more; the NUL ends it.
	 */
	obj = json_tokener_parse_ex(tok, req->body.data,
	    (int)req->body.len + 1);
	e = json_tokener_get_error(tok);
	if (obj != NULL && e == json_tokener_success &&
	    json_tokener_get_parse_end(tok) < req->body.len) {
		/* Only white space may follow the value. */
		size_t i;

		for (i = json_tokener_get_parse_end(tok); i < req->body.len;
		    i++)
			if (strchr(" \t\r\n", req->body.data[i]) == NULL) {
				e = json_tokener_error_parse_unexpected;
				break;
			}
	}
	if (obj == NULL && e == json_tokener_continue)
		e = json_tokener_error_parse_eof;
	if (req->body.len > TOKENER_KEEP_MAX) {
		/* Its buffer may have grown to the body's longest string. */
		json_tokener_free(tok);
		pthread_setspecific(tok_key, NULL);
	} else
		json_tokener_reset(tok);
	if (e != json_tokener_success) {
		json_object_put(obj);
		api_error(req, 400, "invalid_json", NULL,
		    "the body is not valid JSON: %s",
		    e == json_tokener_error_depth ? "nested too deeply" :
		    json_tokener_error_desc(e));
		return -1;
	}
	/* obj is NULL for the text "null". */
	if (obj == NULL || !json_object_is_type(obj, json_type_object)) {
		json_object_put(obj);
		api_error(req, 400, "invalid_json", NULL,
		    "the body must be a JSON object");
		return -1;
	}
	*out = obj;
	return 0;
}

/* One request fewer in progress; the drain is told when none is. */
static void
busy_drop(struct api_server *srv)
{
	if (__atomic_sub_fetch(&srv->busy, 1, __ATOMIC_SEQ_CST) == 0) {
		pthread_mutex_lock(&srv->drain_mu);
		pthread_cond_broadcast(&srv->idle);
		pthread_mutex_unlock(&srv->drain_mu);
	}
}

/* rp counted as busy by its own thread, once. */
static void
busy_mark(struct api_server *srv, struct req_priv *rp)
{
	if (rp->busy)
		return;
	rp->busy = 1;
	__atomic_add_fetch(&srv->busy, 1, __ATOMIC_SEQ_CST);
}

/* rp is no longer counted as busy by its own thread. */
static void
unbusy(struct api_server *srv, struct req_priv *rp)
{
	if (!rp->busy)
		return;
	rp->busy = 0;
	busy_drop(srv);
}

/* Parks req; an idle park is not counted busy (see api_suspend_idle). */
static void
suspend_req(struct api_req *req, int idle)
{
	struct api_server *srv = req->srv;
	struct req_priv *rp = priv(req);

	rp->parked = 1;
	pthread_mutex_lock(&srv->lock);
	/*
	 * Once api_server_stop() has resumed the suspended requests, a
	 * connection suspended now would still be suspended when MHD stops,
	 * and MHD aborts the process then.  Keep-alive connections bring
	 * new requests until the threads stop, so a handler may park one
	 * now: it is not suspended, and run_handler() ends it as it ends
	 * every request resumed by the stop (closed unanswered, a long-poll
	 * about to wait idly answered 503).  Suspended under the
	 * lock, so a request is either on the list the stop empties or
	 * sees stopping.  Likewise a long-poll that would wait idly once the
	 * drain has resumed those waiting: it is answered 503 at once (and
	 * still counted busy until its answer is out).
	 */
	if (__atomic_load_n(&srv->stopping, __ATOMIC_ACQUIRE) || (idle &&
	    __atomic_load_n(&srv->draining, __ATOMIC_SEQ_CST))) {
		rp->refused = idle ? REFUSED_IDLE : REFUSED_BUSY;
		rp->parked = 0;		/* not parked: refused */
		pthread_mutex_unlock(&srv->lock);
		return;
	}
	MHD_suspend_connection(req->conn);
	if (!idle)
		busy_mark(srv, rp);
	rp->idle = idle;
	req->suspended = 1;
	rp->prev_susp = NULL;
	rp->next_susp = srv->suspended;
	if (srv->suspended != NULL)
		srv->suspended->prev_susp = rp;
	srv->suspended = rp;
	pthread_mutex_unlock(&srv->lock);
	if (idle)
		unbusy(srv, rp);
}

void
api_suspend(struct api_req *req)
{
	suspend_req(req, 0);
}

void
api_suspend_idle(struct api_req *req)
{
	suspend_req(req, 1);
}

static void
unlink_suspended(struct api_server *srv, struct req_priv *rp)
{
	if (rp->prev_susp != NULL)
		rp->prev_susp->next_susp = rp->next_susp;
	else
		srv->suspended = rp->next_susp;
	if (rp->next_susp != NULL)
		rp->next_susp->prev_susp = rp->prev_susp;
	rp->next_susp = rp->prev_susp = NULL;
}

/* Takes rp off the suspended list and resumes it (srv->lock held). */
static void
resume_locked(struct api_server *srv, struct req_priv *rp)
{
	unlink_suspended(srv, rp);
	rp->pub.suspended = 0;
	rp->idle = 0;
	MHD_resume_connection(rp->pub.conn);
}

void
api_resume(struct api_req *req)
{
	struct api_server *srv = req->srv;
	struct req_priv *rp = priv(req);

	pthread_mutex_lock(&srv->lock);
	if (!req->suspended) {
		pthread_mutex_unlock(&srv->lock);
		return;
	}
	resume_locked(srv, rp);
	pthread_mutex_unlock(&srv->lock);
}

void
api_hold_init(struct api_hold *h, struct api_req *req, int refs)
{
	pthread_mutex_init(&h->mu, NULL);
	h->refs = refs;
	h->req = req;
}

void
api_hold_ref(struct api_hold *h)
{
	pthread_mutex_lock(&h->mu);
	h->refs++;
	pthread_mutex_unlock(&h->mu);
}

int
api_hold_drop(struct api_hold *h, int the_request)
{
	int last;

	/* A worker's reference goes in the same hold of mu as its resume. */
	pthread_mutex_lock(&h->mu);
	if (the_request)
		h->req = NULL;
	else if (h->req != NULL)
		api_resume(h->req);
	last = --h->refs == 0;
	pthread_mutex_unlock(&h->mu);
	if (last)
		pthread_mutex_destroy(&h->mu);
	return last;
}

int
api_client_gone(struct api_req *req)
{
	const union MHD_ConnectionInfo *ci;
	char c;
	ssize_t n;

	ci = MHD_get_connection_info(req->conn,
	    MHD_CONNECTION_INFO_CONNECTION_FD);
	if (ci == NULL)
		return 0;
	n = recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n == 0)
		return 1;
	return n == -1 && errno != EAGAIN && errno != EWOULDBLOCK &&
	    errno != EINTR;
}

void *
api_server_arg(struct api_server *srv)
{
	return srv->cfg.arg;
}

static void
shutting_down(struct api_req *req)
{
	api_error(req, 503, "shutting_down", NULL,
	    "the server is shutting down");
}

/*
 * The stop ends a request whose work may be under way (a push waiting for
 * its commit or for Redis, an ack waiting for its commit): a 503 would say
 * that nothing was done, which may not be so.  Its connection is closed
 * unanswered, as a crash would leave it: the client does not know, and
 * retries with the same client id or bizkey.
 */
static void
unanswered(struct api_req *req)
{
	priv(req)->unanswered = 1;
	log_warnx("http: %s %s: still in progress when the server stopped: "
	    "closed without an answer", req->method, req->path);
}

/* Ends a request refused or resumed by the stop (REFUSED_*). */
static void
end_refused(struct api_req *req)
{
	if (priv(req)->refused == REFUSED_IDLE)
		shutting_down(req);
	else
		unanswered(req);
}

static void
run_handler(struct api_server *srv, struct api_req *req)
{
	struct req_priv *rp = priv(req);

	/*
	 * Without the lock: every handler runs here, and resumes hold it.
	 * A request the drain or the stop resumed (refused set) is ended:
	 * one waiting idly answered 503, one whose work may be under way
	 * closed.  One its own worker resumed goes on to its answer.
	 */
	if (rp->refused && req->state != NULL) {
		end_refused(req);
		return;
	}
	/*
	 * A request is counted busy from its handler's first call until it
	 * completes (or waits idly).  Draining, a request not begun yet is
	 * refused before any work is queued for it (so its 503 means nothing
	 * was done), and its connection closed; those begun go on to their
	 * answers.  Counted first, then draining read, while the drain sets
	 * draining first, then reads the count (both sequentially
	 * consistent): the drain sees the request or the request sees the
	 * drain.
	 */
	if (!rp->ran) {
		busy_mark(srv, rp);
		if (rp->late ||
		    __atomic_load_n(&srv->draining, __ATOMIC_SEQ_CST)) {
			unbusy(srv, rp);
			api_add_header(req, "Connection", "close");
			shutting_down(req);
			return;
		}
		rp->ran = 1;
	}
	/*
	 * Once the handler parked the request, another thread may resume it
	 * before we get here (req->suspended is 0 again): that is not "no
	 * answer", the handler will run again.
	 */
	rp->parked = 0;
	rp->refused = 0;
	req->route->fn(req);
	/*
	 * refused is read only when the handler did not park the request:
	 * once parked, the drain or the stop may set it and resume the
	 * request (under the lock), and its next call ends it (above).
	 */
	if (!req->answered && !rp->parked && rp->refused) {
		end_refused(req);
		return;
	}
	if (!req->answered && !rp->parked) {
		log_warnx("http: %s %s: handler gave no answer", req->method,
		    req->path);
		api_error(req, 500, "internal", NULL, "no answer");
	}
}

/* A request's framing headers, counted by framing_header(). */
struct framing {
	int	content_length;
	int	transfer_encoding;
};

static enum MHD_Result
framing_header(void *cls, enum MHD_ValueKind kind, const char *key,
    const char *value)
{
	struct framing *f = cls;

	(void)kind;
	(void)value;
	if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
		f->content_length++;
	else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0)
		f->transfer_encoding++;
	return MHD_YES;
}

/*
 * 1 when the body's length is ambiguous: two Content-Length headers, or
 * one with Transfer-Encoding (RFC 9112 6.3).  libmicrohttpd goes by one of
 * them; a proxy in front may go by the other, and the bytes it forwards
 * as the next request would be read here as part of this one.
 */
static int
framing_ambiguous(struct MHD_Connection *conn)
{
	struct framing f = { 0, 0 };

	(void)MHD_get_connection_values(conn, MHD_HEADER_KIND, framing_header,
	    &f);
	return f.content_length > 1 ||
	    (f.content_length > 0 && f.transfer_encoding > 0);
}

/*
 * MHD_OPTION_URI_LOG_CALLBACK: libmicrohttpd shows the request's target
 * here as read, before it decodes it and splits off the query in place.
 * Its length now is what nul_in_target() compares with later.  The
 * request's state starts here: what this returns is the handler's
 * *con_cls, and completed() frees it whether or not the handler runs.
 */
static void *
uri_seen(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct req_priv *rp;

	(void)cls;
	(void)conn;
	rp = xcalloc(1, sizeof(*rp));
	rp->raw_uri = uri;
	rp->raw_len = strlen(uri);
	return rp;
}

/*
 * 1 when the request line's target holds a NUL byte.  libmicrohttpd
 * 0.9.75 hands the target on as a C string, so "DELETE
 * /v1/tenants/a<NUL>/keys/K" would reach the routes as "DELETE
 * /v1/tenants/a": another resource.  It parses the line in place: the
 * method, a NUL, the target, a NUL where the space was, the version.  So
 * a target read whole ends just before the version; one cut by a NUL ends
 * sooner.  Only pointers into its buffer are compared, never bytes read
 * past a string.  When the strings are not laid out that way (another
 * version of the library) nothing can be told and nothing is refused.
 */
static int
nul_in_target(const struct req_priv *rp, const char *url,
    const char *method, const char *version)
{
	if (rp->raw_uri == NULL || rp->raw_uri != url ||
	    method + strlen(method) + 1 != url)
		return 0;
	return version != url + rp->raw_len + 1;
}

static enum MHD_Result
access_handler(void *cls, struct MHD_Connection *conn, const char *url,
    const char *method, const char *version, const char *upload_data,
    size_t *upload_data_size, void **con_cls)
{
	struct api_server *srv = cls;
	struct req_priv *rp = *con_cls;
	struct api_req *req;
	const union MHD_ConnectionInfo *ci;
	char allowed[128];
	const char *cl;
	size_t limit;
	unsigned long long declared;
	char *end;

	if (rp == NULL || rp->pub.srv == NULL) {
		if (rp == NULL)
			rp = xcalloc(1, sizeof(*rp));
		req = &rp->pub;
		req->srv = srv;
		req->conn = conn;
		req->method = method;
		req->path = url;
		req->start_mono_us = clock_mono_us();
		limit = srv->cfg.body_limit ?
		    srv->cfg.body_limit(srv->cfg.arg) : 1 << 20;
		buf_init(&req->body, limit);
		*con_cls = rp;
		ci = MHD_get_connection_info(conn,
		    MHD_CONNECTION_INFO_SOCKET_CONTEXT);
		rp->late = ci != NULL && ci->socket_context == &late_mark;
		if (nul_in_target(rp, url, method, version)) {
			api_add_header(req, "Connection", "close");
			api_error(req, 400, "invalid_request", NULL,
			    "the request's target holds a NUL byte");
			return MHD_YES;
		}
		req->route = route_find(srv, req, allowed, sizeof(allowed));
		if (req->route == NULL) {
			if (allowed[0] != '\0') {
				api_add_header(req, "Allow", allowed);
				api_error(req, 405, "method_not_allowed", NULL,
				    "%s is not allowed on %s (allowed: %s)",
				    method, url, allowed);
			} else
				api_error(req, 404, "not_found", NULL,
				    "no route %s %s", method, url);
			return MHD_YES;
		}
		if (framing_ambiguous(conn)) {
			api_add_header(req, "Connection", "close");
			api_error(req, 400, "invalid_request", NULL,
			    "the body's length is ambiguous: send one "
			    "Content-Length, or Transfer-Encoding without "
			    "Content-Length");
			return MHD_YES;
		}
		cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
		    MHD_HTTP_HEADER_CONTENT_LENGTH);
		if (cl != NULL) {
			errno = 0;
			declared = strtoull(cl, &end, 10);
			if (errno != 0 || *end != '\0' || declared > limit) {
				api_error(req, 413, "body_too_large", NULL,
				    "the request body is larger than %zu "
				    "bytes", limit);
				return MHD_YES;
			}
		}
		return MHD_YES;
	}
	req = &rp->pub;
	if (*upload_data_size != 0) {
		if (req->answered) {
			*upload_data_size = 0;	/* discard the rest */
			return MHD_YES;
		}
		if (buf_append(&req->body, upload_data,
		    *upload_data_size) == -1) {
			/*
			 * A body without a declared length grew past the
			 * cap.  MHD cannot queue an answer in the middle of
			 * an upload: close the connection instead of
			 * reading on.
			 */
			log_debug("http: %s %s: body over %zu bytes: closing",
			    method, url, req->body.max);
			return MHD_NO;
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (req->answered)
		return MHD_YES;
	if (!rp->started) {
		rp->started = 1;
		if (srv->cfg.authenticate != NULL &&
		    srv->cfg.authenticate(req, req->route->auth,
		    srv->cfg.arg) == -1) {
			if (!req->answered)
				api_error(req, 401, "unauthorized", NULL,
				    "missing or invalid API key");
			return MHD_YES;
		}
	}
	run_handler(srv, req);
	return rp->unanswered ? MHD_NO : MHD_YES;
}

static void
completed(void *cls, struct MHD_Connection *conn, void **con_cls,
    enum MHD_RequestTerminationCode toe)
{
	struct api_server *srv = cls;
	struct req_priv *rp = *con_cls;
	struct api_req *req;
	int i;

	(void)conn;
	if (rp == NULL)
		return;
	req = &rp->pub;
	if (req->srv == NULL) {		/* uri_seen() only */
		free(rp);
		*con_cls = NULL;
		return;
	}
	if (srv->cfg.access_log != NULL && srv->cfg.access_log(srv->cfg.arg))
		log_info("access: %s %s %d %lldus tenant=%s%s", req->method,
		    req->path, req->status,
		    (long long)(clock_mono_us() - req->start_mono_us),
		    req->tenant[0] ? req->tenant : "-",
		    toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" :
		    " (aborted)");
	if (req->free_state != NULL && req->state != NULL)
		req->free_state(req->state);
	unbusy(srv, rp);
	if (rp->drained) {
		rp->drained = 0;
		busy_drop(srv);
	}
	clear_params(req);
	buf_free(&req->body);
	for (i = 0; i < rp->nhdr; i++) {
		free(rp->hdr[i].name);
		free(rp->hdr[i].value);
	}
	free(rp);
	*con_cls = NULL;
}

/* Marks a connection made after the quiesce (late_mark). */
static void
notify_connection(void *cls, struct MHD_Connection *conn,
    void **socket_context, enum MHD_ConnectionNotificationCode toe)
{
	struct api_server *srv = cls;

	(void)conn;
	if (toe == MHD_CONNECTION_NOTIFY_STARTED &&
	    __atomic_load_n(&srv->quiesced, __ATOMIC_SEQ_CST))
		*socket_context = &late_mark;
}

/*
 * libmicrohttpd's own messages (a request too big, a malformed one, a
 * resource it runs out of) and its panics: our log lines, with time and
 * level, rather than bare lines on stderr.
 */
static void	mhd_log(void *, const char *, va_list)
		    __attribute__((format(printf, 2, 0)));

static void
mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	size_t n;

	(void)cls;
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	log_warnx("http: libmicrohttpd: %s", msg);
}

static void
mhd_panic(void *cls, const char *file, unsigned int line, const char *reason)
{
	(void)cls;
	log_warnx("http: libmicrohttpd: fatal error at %s:%u: %s",
	    file != NULL ? file : "?", line, reason != NULL ? reason : "?");
	abort();
}

struct api_server *
api_server_start(const struct api_server_config *cfg, char *why,
    size_t whylen)
{
	struct api_server *srv = xcalloc(1, sizeof(*srv));
	unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD |
	    MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
	/* One thread is no pool: named at all, 0 or 1 draws a warning. */
	struct MHD_OptionItem pool[] = {
		{ MHD_OPTION_THREAD_POOL_SIZE, cfg->threads, NULL },
		{ MHD_OPTION_END, 0, NULL }
	};

	/*
	 * MHD_USE_EPOLL is an enum constant, not a macro: test the feature at
	 * run time only.  Without epoll MHD falls back to poll(), never to
	 * select(), whose FD_SETSIZE would cap us at ~1000 connections.
	 */
	if (MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES)
		flags |= MHD_USE_EPOLL;
	else if (MHD_is_feature_supported(MHD_FEATURE_POLL) == MHD_YES)
		flags |= MHD_USE_POLL;
	if (cfg->threads <= 1)
		pool[0].option = MHD_OPTION_END;
	srv->cfg = *cfg;
	MHD_set_panic_func(mhd_panic, NULL);	/* process-wide */
	pthread_mutex_init(&srv->lock, NULL);
	pthread_mutex_init(&srv->drain_mu, NULL);
	clock_cond_init(&srv->idle);
	/* The logger first: libmicrohttpd prints what comes before it. */
	srv->mhd = MHD_start_daemon(flags, 0, NULL, NULL, access_handler, srv,
	    MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
	    MHD_OPTION_LISTEN_SOCKET, cfg->listen_fd,
	    MHD_OPTION_ARRAY, pool,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned int)cfg->max_connections,
	    MHD_OPTION_CONNECTION_TIMEOUT,
	    (unsigned int)((cfg->timeout_ms + 999) / 1000),
	    MHD_OPTION_NOTIFY_COMPLETED, completed, srv,
	    MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
	    MHD_OPTION_URI_LOG_CALLBACK, uri_seen, NULL,
	    MHD_OPTION_NOTIFY_CONNECTION, notify_connection, srv,
	    MHD_OPTION_END);
	if (srv->mhd == NULL) {
		snprintf(why, whylen, "cannot start the HTTP server");
		pthread_cond_destroy(&srv->idle);
		pthread_mutex_destroy(&srv->drain_mu);
		pthread_mutex_destroy(&srv->lock);
		free(srv);
		return NULL;
	}
	return srv;
}

/* Waits until no request is busy or end (monotonic us): how many are. */
static int
wait_busy(struct api_server *srv, int64_t end)
{
	int left;

	pthread_mutex_lock(&srv->drain_mu);
	while ((left = __atomic_load_n(&srv->busy, __ATOMIC_SEQ_CST)) > 0)
		if (clock_cond_wait_us(&srv->idle, &srv->drain_mu,
		    end - clock_mono_us()) == ETIMEDOUT &&
		    clock_mono_us() >= end)
			break;
	pthread_mutex_unlock(&srv->drain_mu);
	return left;
}

int
api_server_drain(struct api_server *srv, int64_t wait_ms)
{
	int64_t end = clock_mono_us() + (wait_ms > 0 ? wait_ms : 0) * 1000;
	struct req_priv *rp, *next;
	int left;

	if (srv == NULL)
		return 0;
	__atomic_store_n(&srv->draining, 1, __ATOMIC_SEQ_CST);
	/*
	 * The long-polls waiting are answered now, while the server still
	 * sends answers (503, as the stop would), and waited for like the
	 * requests in progress.
	 */
	pthread_mutex_lock(&srv->lock);
	for (rp = srv->suspended; rp != NULL; rp = next) {
		next = rp->next_susp;
		if (!rp->idle)
			continue;
		rp->drained = 1;
		rp->refused = REFUSED_IDLE;
		__atomic_add_fetch(&srv->busy, 1, __ATOMIC_SEQ_CST);
		resume_locked(srv, rp);
	}
	pthread_mutex_unlock(&srv->lock);
	if ((left = wait_busy(srv, end)) > 0)
		log_warnx("http: %d requests still in progress after %lld ms "
		    "of draining", left, (long long)wait_ms);
	return left;
}

/*
 * Not MHD_quiesce_daemon(): with epoll and its own threads it races the
 * threads' removal of the listening socket from their epoll sets, and
 * when it loses, libmicrohttpd aborts the process ("Failed to remove
 * listen FD from epoll set"; seen once in the suite, SIGTERM just after
 * start).  The socket stays open until the server stops, and a connection
 * made from now on is marked (notify_connection()): its requests are
 * answered 503 shutting_down, which says why.  Open connections are served
 * until the drain, as before.
 */
void
api_server_quiesce(struct api_server *srv)
{
	if (srv == NULL)
		return;
	__atomic_store_n(&srv->quiesced, 1, __ATOMIC_SEQ_CST);
}

void
api_server_stop(struct api_server *srv)
{
	struct req_priv *rp;

	if (srv == NULL)
		return;
	/* MHD wants every suspended connection resumed before it stops. */
	pthread_mutex_lock(&srv->lock);
	__atomic_store_n(&srv->stopping, 1, __ATOMIC_RELEASE);
	while ((rp = srv->suspended) != NULL) {
		rp->refused = rp->idle ? REFUSED_IDLE : REFUSED_BUSY;
		resume_locked(srv, rp);
	}
	pthread_mutex_unlock(&srv->lock);
	/*
	 * Their threads end them (closed, or answered 503) before they
	 * stop: stopped at once, libmicrohttpd may close a connection
	 * without calling its handler again.
	 */
	(void)wait_busy(srv, clock_mono_us() + API_STOP_WAIT_MS * 1000);
	MHD_stop_daemon(srv->mhd);
	pthread_cond_destroy(&srv->idle);
	pthread_mutex_destroy(&srv->drain_mu);
	pthread_mutex_destroy(&srv->lock);
	free(srv);
}
