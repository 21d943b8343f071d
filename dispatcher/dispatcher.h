/*
 * dispatcher.h - outbound webhook callbacks (docs/internals/DISPATCHER.md).
 *
 * Key decision: the dispatcher makes one signed POST per request and reports
 * what happened as a schedule outcome; it applies no retry policy and knows
 * nothing of Redis.  Each of its threads is one event loop (epoll driving a
 * libcurl multi handle through curl_multi_socket_action), so thousands of
 * transfers are in flight at once, each independent of the others: a slow
 * callback delays nobody but itself.  Targets are checked against the SSRF
 * policy on the address actually connected, so DNS cannot smuggle a private
 * address past it.
 *
 * Ownership: disp_submit() takes the request on success; the dispatcher frees
 * it after done() returns.  done() runs on a dispatcher thread and borrows the
 * result: everything in it is freed when done() returns, except body_excerpt,
 * which done() may keep by setting res->body_excerpt to NULL (it then frees it
 * with free()).
 */
#ifndef RETRYD_DISPATCHER_DISPATCHER_H
#define RETRYD_DISPATCHER_DISPATCHER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "schedules/schedule.h"

#define DISP_CAPTURE_DEFAULT	1024		/* response bytes kept */
#define DISP_READ_MAX		(64 * 1024)	/* response bytes read */
#define DISP_HEADER_READ_MAX	(64 * 1024)	/* response header bytes */
#define DISP_TIMEOUT_DEFAULT_MS	10000
#define DISP_SECRET_MAX		64		/* raw HMAC key bytes */
#define DISP_URL_MAX		4096
#define DISP_HEADERS_MAX	64		/* caller headers per request */
#define DISP_HEADER_NAME_MAX	256
#define DISP_HEADER_VALUE_MAX	4096

/* Zero in any member means its default. */
struct disp_config {
	int		 threads;		/* event loops; default 1 */
	int		 allow_private_targets;	/* 1: loopback, private ok */
	size_t		 capture_max;		/* DISP_CAPTURE_DEFAULT */
	int		 max_total_in_flight;	/* safety cap; default none */
	int		 max_tenant_in_flight;	/* per tenant; default none */
	const char	*user_agent;		/* copied; "retryd/VERSION" */
};

/* One extra header of a request; both strings owned by the request. */
struct disp_header {
	char	*name;
	char	*value;
};

/*
 * One attempt to deliver.  Every pointer is owned by the request and freed by
 * disp_request_free() (strings with free()); build it with
 * disp_request_new() and the helpers below, or fill it by hand with malloc'd
 * strings.  url, tenant, topic (not empty) and job_id are required,
 * attempt >= 1.
 */
struct disp_request {
	char		*url;
	struct disp_header *headers;	/* topic's then job's: the last
					   of a name wins */
	size_t		 nheaders;
	char		*body;		/* sent byte for byte; may be NULL */
	size_t		 body_len;
	int64_t		 timeout_ms;	/* whole transfer; <= 0: default */
	char		*tenant;
	char		*topic;
	char		*job_id;
	int		 attempt;	/* 1-based */
	uint8_t		 secret[DISP_SECRET_MAX];	/* raw key */
	size_t		 secret_len;	/* 0: no webhook-signature */
	void		*cookie;	/* the caller's, handed back */
};

/*
 * The outcome of one request.  kind, http_status and retry_after_ms are what
 * schedule_decide() wants (disp_result_outcome()).  http_status is set only
 * for SCHEDULE_OK and SCHEDULE_HTTP, else 0.  retry_after_ms is absolute wall
 * ms from a Retry-After on a 429 or 503, else -1.  error is a human sentence,
 * empty for a plain 2xx.  body_excerpt holds the first capture_max bytes of the
 * response body, NUL-terminated (the NUL not counted; the bytes may hold
 * NULs).  handed_back = 1 means no attempt was made or it was cut short by
 * disp_drain(): the caller must not count it (kind is SCHEDULE_ERROR then).
 */
struct disp_result {
	void		*cookie;
	const struct disp_request *req;	/* valid during done() only */
	enum schedule_outcome_kind kind;
	int		 http_status;
	int64_t		 retry_after_ms;
	int64_t		 started_ms;	/* wall ms; 0 when never started */
	int64_t		 latency_ms;	/* as libcurl measured it */
	char		 error[256];
	char		*body_excerpt;	/* see the ownership note above */
	size_t		 body_excerpt_len;
	int		 handed_back;
};

struct dispatcher;

/*
 * Starts cfg->threads event loops.  done(res, arg) runs on a dispatcher
 * thread for every request accepted by disp_submit(), exactly once; it may
 * call disp_submit() and disp_inflight*() but not disp_drain() or disp_free(),
 * and it must not block for long (it holds up its loop).  Returns NULL with
 * errno set when the loops cannot be made (start-up failure).  Call it before
 * other threads use libcurl: it runs curl_global_init().
 */
struct dispatcher *disp_new(const struct disp_config *cfg,
	    void (*done)(struct disp_result *res, void *arg), void *arg);

/*
 * Thread-safe.  0: the dispatcher owns req and will call done() for it.
 * -1, and the caller still owns req: errno EINVAL (a required member missing),
 * ESHUTDOWN (draining), EAGAIN (max_total_in_flight reached, or the
 * request's tenant is at its cap: disp_tenant_cap_of()).  A request that
 * takes its tenant to that cap logs a warning naming the tenant and the
 * cap, at most once a minute per tenant (and again when the tenant reaches
 * it after having had nothing in flight).  A request
 * whose content is bad (a header with CR or LF, a URL libcurl refuses) is
 * accepted and reported through done() as SCHEDULE_ERROR: it fails that
 * attempt, and the schedule decides the rest.
 */
int	disp_submit(struct dispatcher *d, struct disp_request *req);

/* Accepted and not yet reported, for one topic or in all.  Thread-safe.  A
 * request stops counting just before its done() runs. */
int	disp_inflight(struct dispatcher *d, const char *tenant,
	    const char *topic);
int	disp_inflight_total(struct dispatcher *d);
/* Accepted and not yet reported for all of a tenant's topics. */
int	disp_inflight_tenant(struct dispatcher *d, const char *tenant);
/*
 * How many more requests the topic may have accepted now: the least of
 * max_topic (the topic's own cap, the caller's; <= 0: none) less its count,
 * its tenant's cap (disp_tenant_cap_of()) less its tenant's count and
 * max_total_in_flight less the
 * total, at least 0 (INT_MAX with no cap at all).  One lock, exact.
 */
int	disp_topic_room(struct dispatcher *d, const char *tenant,
	    const char *topic, int max_topic);
/* The same for all of a tenant's topics together: its cap and the total's. */
int	disp_tenant_room(struct dispatcher *d, const char *tenant);
/*
 * The tenant cap that keeps part of max_total for the other tenants: max_total
 * less a tenth of it (at least 1), so 9000 of 10000; max_total itself when it
 * is 1, 0 (none) when it is 0 or less.
 */
int	disp_tenant_cap_default(int max_total);
/* The max_tenant_in_flight in force (0: none). */
int	disp_tenant_cap(struct dispatcher *d);
/*
 * A tenant's cap in force: own (its max_in_flight; <= 0: none) when set,
 * never above max_total (when > 0), else max_tenant.  0: no cap.
 */
int	disp_cap_in_force(int own, int max_tenant, int max_total);
/* The same with this dispatcher's max_tenant_in_flight and total. */
int	disp_tenant_cap_for(struct dispatcher *d, int own);
/*
 * Sets the tenant's own cap (<= 0: none, back to max_tenant_in_flight),
 * read by disp_submit() and the room functions from then on.  Thread-safe;
 * the caller sets it from the registry (once per timer pass, not per job).
 */
void	disp_tenant_set_cap(struct dispatcher *d, const char *tenant, int own);
/* The tenant's cap in force, its own as last set or the instance's. */
int	disp_tenant_cap_of(struct dispatcher *d, const char *tenant);
/* Calls fn for every tenant with a cap of its own, with the cap in force,
 * under the counts' lock: fn must not call into the dispatcher. */
void	disp_tenant_cap_foreach(struct dispatcher *d,
	    void (*fn)(const char *tenant, int cap, void *arg), void *arg);
/* Calls fn for every topic with requests in flight, under the counts' lock:
 * fn must not call into the dispatcher. */
void	disp_inflight_foreach(struct dispatcher *d,
	    void (*fn)(const char *tenant, const char *topic, int n, void *arg),
	    void *arg);
/* The same for every tenant with requests in flight, with its count of all
 * its topics (disp_inflight_tenant()). */
void	disp_inflight_tenant_foreach(struct dispatcher *d,
	    void (*fn)(const char *tenant, int n, void *arg), void *arg);

/*
 * Stops taking work (disp_submit fails with ESHUTDOWN), lets what was
 * accepted run for up to grace_ms, then aborts the rest and reports it with
 * handed_back = 1.  Returns when every done() has returned.  Idempotent.
 */
void	disp_drain(struct dispatcher *d, int64_t grace_ms);
/* Drains with no grace if that was not done, stops the threads, frees d.
 * Accepts NULL.  No disp_submit() may run concurrently. */
void	disp_free(struct dispatcher *d);

/* A zeroed request (timeout_ms = DISP_TIMEOUT_DEFAULT_MS); never NULL. */
struct disp_request *disp_request_new(void);
/* Frees every owned member and wipes the secret.  Accepts NULL. */
void	disp_request_free(struct disp_request *r);
/*
 * Appends a copy of name: value.  -1 with errno EINVAL when the name is not
 * an RFC 9110 token or the value holds CR, LF, NUL or another control byte
 * (tab excepted), or E2BIG past DISP_HEADERS_MAX or the length limits.
 * Reserved names (disp_header_reserved) are kept but never sent.
 */
int	disp_request_add_header(struct disp_request *r, const char *name,
	    const char *value);
/* Sets the key from a "whsec_BASE64" secret (the prefix is optional).
 * -1 with errno EINVAL on bad base64, an empty key or one over
 * DISP_SECRET_MAX bytes. */
int	disp_request_set_secret(struct disp_request *r, const char *whsec);

/* 1 when name: value may be sent (the disp_request_add_header rules). */
int	disp_header_valid(const char *name, const char *value);
/*
 * 1 when the dispatcher sets or controls the header itself, so a caller's is
 * dropped: webhook-*, retryd-*, and framing or hop-by-hop headers (Host,
 * Content-Length, Transfer-Encoding, Connection, Expect, Upgrade, TE,
 * Trailer, Keep-Alive, Proxy-*).  Content-Type is not reserved: the caller's
 * replaces the default application/json.
 */
int	disp_header_reserved(const char *name);

/*
 * The SSRF policy.  disp_addr_refusal() names the class of a special-purpose
 * address that policy refuses ("loopback", "private", "link-local",
 * "metadata", ...), or returns NULL when the address may be connected.  With
 * allow_private only multicast and broadcast (never a TCP peer) and unknown
 * address families are refused.  IPv4-mapped, IPv4-compatible, NAT64
 * (64:ff9b::/96) and 6to4 (2002::/16) addresses are judged by the IPv4
 * address they carry.
 */
const char *disp_addr_refusal(const struct sockaddr *sa, int allow_private);
/* 1 when allowed, 0 when refused. */
int	disp_addr_allowed(const struct sockaddr *sa, int allow_private);

/*
 * Registration-time check of a callback URL: http or https, a host, no
 * user:password, no port 0, at most DISP_URL_MAX bytes; a literal IP host
 * (any form inet_aton takes, or [IPv6]) and "localhost" are judged by the
 * address policy now, other names when connecting.  0, or -1 with a reason in
 * why (NUL-terminated, may be NULL).
 */
int	disp_url_check(const char *url, int allow_private, char *why,
	    size_t whylen);

static inline struct schedule_outcome
disp_result_outcome(const struct disp_result *r)
{
	struct schedule_outcome o;

	o.kind = r->kind;
	o.http_status = r->http_status;
	o.retry_after_ms = r->retry_after_ms;
	return o;
}

#endif
