/*
 * hclient.h - the bench tool's HTTP/1.1 client: raw keep-alive sockets on
 * one epoll loop.
 *
 * Key decision: raw sockets, not libcurl.  On a 2-core machine the load
 * generator shares the CPU with Redis, retryd and the receiver, so every
 * microsecond it spends is taken from the thing being measured.  A request
 * here is one write(2) of preformatted bytes and one read(2) of the answer.
 * A pool holds N connections ("slots") to one address, each with at most one
 * request in flight; the caller's next() gives a slot its next request and
 * done() receives the answer.  Only loopback addresses are accepted.
 */
#ifndef RETRYD_BENCH_HCLIENT_H
#define RETRYD_BENCH_HCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

/* The largest response body either API accepts (a dump of records). */
#define HC_MAX_BODY	(64 * 1024 * 1024)

struct hc_target {
	char	host[64];	/* numeric loopback address */
	int	port;
	char	hostport[80];	/* for the Host header */
};

/* Parse "http://127.0.0.1:PORT[/...]"; -1 (errno EINVAL) when not loopback. */
int	hc_parse_url(const char *url, struct hc_target *t);

struct hc_resp {
	int		 status;	/* 0: transport error or timeout */
	const char	*body;		/* NUL-terminated, valid in done() */
	size_t		 len;
	int64_t		 lat_us;	/* from write to complete answer */
};

/*
 * Append one request to req.  headers: extra header lines, each ending in
 * "\r\n", or NULL.  body may be NULL.
 */
int	hc_format(struct buf *req, const struct hc_target *t,
	    const char *method, const char *path, const char *headers,
	    const char *body, size_t body_len);

/*
 * One request on a fresh connection, waiting at most timeout_ms.  The body
 * of the answer is appended to out (caller-owned, capped).  Returns the HTTP
 * status, or -1 on a transport error or timeout.
 */
int	hc_call(const struct hc_target *t, const char *method,
	    const char *path, const char *headers, const char *body,
	    struct buf *out, int timeout_ms);

struct hc_ops {
	/*
	 * Fill req (empty) with slot's next request.  1: send it; 0: park
	 * the slot (it sends nothing more); -1: stop the whole pool.
	 */
	int	(*next)(void *arg, int slot, struct buf *req);
	/* The answer to slot's request. */
	void	(*done)(void *arg, int slot, const struct hc_resp *resp);
};

struct hc_pool;

struct hc_pool *hc_pool_new(const struct hc_target *t, int slots,
	    const struct hc_ops *ops, void *arg, int req_timeout_ms);
/*
 * Run until every slot is parked with nothing in flight, hc_pool_stop() is
 * called from a callback, or the monotonic deadline passes.  0, or -1 when
 * the deadline ended it.
 */
int	hc_pool_run(struct hc_pool *p, int64_t deadline_mono_us);
void	hc_pool_stop(struct hc_pool *p);
/* Connection errors seen so far (each also reported through done()). */
uint64_t hc_pool_errors(const struct hc_pool *p);
void	hc_pool_free(struct hc_pool *p);

/* The machine's clocks, in microseconds. */
int64_t	hc_mono_us(void);
int64_t	hc_wall_us(void);

#endif
