/*
 * http.h - the HTTP server under the REST API: libmicrohttpd on a socket we
 * bind ourselves, a table of routes with {param} segments, request bodies
 * collected into capped buffers, JSON replies and the error shape of API.md.
 *
 * A handler runs on one of the server's threads once the whole body is in.
 * It answers with api_reply*() before returning, or calls api_suspend() and
 * answers later: after api_resume() (from any thread) the handler is called
 * again with the same struct api_req, whose `state` member it may use to
 * remember where it was (long-polling reserve).
 */
#ifndef RETRYD_API_HTTP_H
#define RETRYD_API_HTTP_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "util/buf.h"

#define API_MAX_PARAMS	4
#define API_TENANT_MAX	64

enum api_auth {
	API_AUTH_NONE = 0,	/* open: health, metrics, dashboard files */
	API_AUTH_TENANT,	/* a tenant key, or the admin key + X-Tenant */
	API_AUTH_ADMIN,		/* the admin key */
};

struct api_server;
struct api_req;

typedef void api_handler(struct api_req *req);

/*
 * A GET route also serves HEAD (the same answer without its body, as HTTP
 * wants) unless it has API_NO_HEAD: a GET that changes something (reserve,
 * and /get, /delete, /finish, /restore of the original design), which a
 * HEAD, taken for safe by every client and proxy, must not do.
 */
#define API_NO_HEAD	0x1

struct api_route {
	const char	*method;	/* "GET", "POST", ... */
	const char	*pattern;	/* "/v1/topics/{topic}/jobs" */
	enum api_auth	 auth;
	api_handler	*fn;
	const char	*summary;	/* one line, for the route listing */
	unsigned	 flags;		/* API_NO_HEAD */
};

struct api_req {
	struct api_server	*srv;
	void			*conn;		/* struct MHD_Connection */
	const struct api_route	*route;
	const char		*method;
	const char		*path;
	/* Path parameters, percent-decoded, in pattern order. */
	char			*param[API_MAX_PARAMS];
	int			 nparam;
	struct buf		 body;
	/* api_body_json() saw an integer json-c clamps (beyond 64 bits). */
	int			 int_clamped;
	/* Filled by the authenticator: */
	char			 tenant[API_TENANT_MAX + 1];
	int			 admin;		/* the admin key was used */
	char			 key_id[64];	/* which key, for rate limits */
	/* Handler-owned state across suspend/resume; freed with free_state. */
	void			*state;
	void			(*free_state)(void *state);
	int64_t			 start_mono_us;
	int			 answered;
	int			 suspended;
	int			 status;	/* the status answered */
};

struct api_server_config {
	int		 listen_fd;	/* bound and listening */
	int		 threads;
	int		 max_connections;
	int64_t		 timeout_ms;	/* idle connection timeout */
	/* Routes: a NULL-terminated array of arrays of routes. */
	const struct api_route *const *routes;
	/*
	 * Authenticate req for the route's level: 0 to go on, or -1 after
	 * answering (401, 404...).
	 */
	int		(*authenticate)(struct api_req *req, enum api_auth need,
			    void *arg);
	/* The request body cap in force now, in bytes. */
	size_t		(*body_limit)(void *arg);
	/* Access log line per request, when it returns non-zero. */
	int		(*access_log)(void *arg);
	void		*arg;
};

/* NULL with why on failure (a start-up error). */
struct api_server *api_server_start(const struct api_server_config *cfg,
	    char *why, size_t whylen);
/*
 * Stop taking connections: a request on a connection made from now on is
 * answered 503 shutting_down (its connection closed); open connections
 * are served until the drain.
 */
void	api_server_quiesce(struct api_server *srv);
/*
 * Drain: every request not begun yet is answered 503 shutting_down (its
 * connection closed), and this waits up to wait_ms until those begun
 * (their handler called) are completed, but for those waiting idly
 * (api_suspend_idle).  The requests still in progress: 0 when done.
 */
int	api_server_drain(struct api_server *srv, int64_t wait_ms);
/*
 * Ends every suspended request (503 for one waiting idly; closed without
 * an answer for one whose work may be under way) and stops the threads.
 */
void	api_server_stop(struct api_server *srv);
void	*api_server_arg(struct api_server *srv);

/* Binds host:port (port 0: any), listening.  fd, or -1 with why. */
int	api_listen(const char *hostport, char *bound, size_t boundlen,
	    char *why, size_t whylen);

/* Answers; each takes ownership of nothing the caller keeps. */
void	api_reply(struct api_req *req, int status, const char *ctype,
	    const void *body, size_t len);
/* obj is consumed (json_object_put) */
void	api_reply_json(struct api_req *req, int status, json_object *obj);
void	api_reply_empty(struct api_req *req, int status);
/*
 * Answers printed without json-c: key, then v as a JSON string escaped as
 * json-c escapes it (NULL: null); key, then v.  key is the text before the
 * value, as ",\"id\":".
 */
void	api_put_str(struct buf *b, const char *key, const char *v);
void	api_put_int(struct buf *b, const char *key, int64_t v);
/*
 * {"error":{"code":..,"message":..,"field":..}}; field may be NULL.  The
 * message is cut at 511 bytes, the field at 320 (as api_text_shown()), and
 * neither inside a UTF-8 sequence: what the client sent stays valid UTF-8
 * and bounded in the answer, whatever it held.
 */
void	api_error(struct api_req *req, int status, const char *code,
	    const char *field, const char *fmt, ...)
	    __attribute__((format(printf, 5, 6)));
/*
 * How much of s[0..n), text from the request, an error may show: at most
 * max bytes of whole UTF-8 sequences, up to a quote, backslash, control
 * character or byte that is not valid UTF-8.  Errors name members (at
 * most API_NAME_SHOWN bytes of each name) and fields with it.
 */
#define API_NAME_SHOWN	64
size_t	api_text_shown(const char *s, size_t n, size_t max);
/* Add a header to the next reply of req (before api_reply*). */
void	api_add_header(struct api_req *req, const char *name,
	    const char *value);

/* A request header (case-insensitive), or NULL. */
const char *api_header(struct api_req *req, const char *name);
/* A query-string argument, decoded, or NULL. */
const char *api_query(struct api_req *req, const char *name);

/*
 * Park req without answering; the connection stays open.  Once the server
 * is stopping it is not parked: the handler's caller answers it 503
 * shutting_down when the handler returns (its work, queued or not, goes
 * on as for a request resumed by the stop).
 */
void	api_suspend(struct api_req *req);
/*
 * api_suspend() for a wait on nothing but time or an event (a long-poll):
 * api_server_drain() resumes such a request and its handler's caller
 * answers it 503 shutting_down (as it does when one would park idly
 * during the drain), instead of waiting for it.
 */
void	api_suspend_idle(struct api_req *req);
/* Call the handler of a suspended req again (any thread). */
void	api_resume(struct api_req *req);

/*
 * A parked request shared with the threads working for it (the journal's
 * writer, a pusher): each holds a reference.  The request's own goes when
 * it ends (its free_state), a worker's when the worker is done, which
 * resumes the request if it is still there.  Whoever drops the last one
 * frees what the hold is part of.  mu may also guard the owner's fields.
 */
struct api_hold {
	pthread_mutex_t	 mu;
	int		 refs;
	struct api_req	*req;		/* NULL once the request ended */
};
void	api_hold_init(struct api_hold *h, struct api_req *req, int refs);
void	api_hold_ref(struct api_hold *h);
/*
 * Drops a reference: the request's (the_request) or a worker's (resuming
 * the request).  1 when it was the last: h's mutex is destroyed, and the
 * caller frees what holds h.
 */
int	api_hold_drop(struct api_hold *h, int the_request);

/*
 * 1 when the client has closed its end of the connection or reset it (a
 * parked long-poll whose client left), 0 otherwise.  Never blocks.
 */
int	api_client_gone(struct api_req *req);

/*
 * RFC 8259 syntax (json-c takes NaN, Infinity, "1." and more even when
 * strict): NULL when s[0..n) is one valid JSON text, else the reason.
 * api_json_scan() also describes the text in *sh (valid or not: what it
 * saw up to where it stopped).
 */
struct api_json_shape {
	int	depth;		/* the deepest nesting of arrays and objects */
	size_t	digits;		/* the longest integer or fraction digit run */
	int	exponent;	/* a number has one */
	int	u_escape;	/* a string has a \u escape */
	int	unprintable;	/* a string has a byte past 0x7e */
	int	int_range;	/* an integer beyond -2^63 .. 2^64 - 1 */
	int	dup_name;	/* an object names a member twice (only
				   api_json_scan_dup() looks) */
	int	nul_name;	/* a member name holds \u0000, where json-c
				   cuts it (only api_json_scan_dup() looks) */
};
const char *api_json_strict_check(const unsigned char *s, size_t n);
const char *api_json_scan(const unsigned char *s, size_t n,
	    struct api_json_shape *sh);
/*
 * api_json_scan(), which also refuses a member name given twice in one
 * object (json-c keeps the last without a word), and one that holds a
 * \u0000 (json-c keeps names as C strings: "delay_ms\u0000x" would read
 * as delay_ms): then sh->dup_name or sh->nul_name is set and dup (duplen
 * > 0) holds the member's path as errors name fields ("jobs[3].delay_ms",
 * a name with a NUL shown up to it).
 */
const char *api_json_scan_dup(const unsigned char *s, size_t n,
	    struct api_json_shape *sh, char *dup, size_t duplen);

/* Parse the body as JSON (an object); -1 after answering 400. */
int	api_body_json(struct api_req *req, json_object **out);

#endif
