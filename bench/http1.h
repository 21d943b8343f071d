/*
 * http1.h - HTTP/1.1 message framing shared by the bench tool's client
 * (hclient.c) and the callback receiver (receiver.c).
 *
 * Key decision: framing only.  These functions find where a head ends, read
 * the few header fields the bench needs (status, Content-Length, chunked,
 * Connection: close, Expect: 100-continue) and decode a chunked body; they
 * never allocate except into a caller's capped struct buf, and they work on
 * whatever bytes have arrived so far, answering "complete", "need more" or
 * "malformed".
 */
#ifndef RETRYD_BENCH_HTTP1_H
#define RETRYD_BENCH_HTTP1_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

/* The longest head either side accepts. */
#define HTTP1_MAX_HEAD	(64 * 1024)

struct http1_head {
	size_t		 len;		/* bytes through the blank line */
	int		 status;	/* responses: the status code */
	const char	*method;	/* requests: into the caller's bytes */
	size_t		 method_len;
	const char	*target;	/* requests: path and query */
	size_t		 target_len;
	int64_t		 content_length; /* -1 when absent */
	int		 chunked;
	int		 close;		/* Connection: close, or HTTP/1.0 */
	int		 expect_continue;
};

/*
 * Reads what the non-blocking fd has now onto in: 0 (*eof set when the
 * peer closed), or -1 on a read error or when in is full.
 */
int	http1_read_avail(int fd, struct buf *in, int *eof);

/*
 * Parse the head at p[0..n).  1: complete, h filled; 0: need more bytes;
 * -1: malformed or longer than HTTP1_MAX_HEAD.
 */
int	http1_parse_head(const char *p, size_t n, int request,
	    struct http1_head *h);

/*
 * The value of header name (case-insensitive) in the head p[0..head_len),
 * without surrounding blanks; NULL when absent.
 */
const char *http1_header(const char *p, size_t head_len, const char *name,
	    size_t *vlen);

/*
 * An integer header value in [0, INT64_MAX]; -1 when absent or not a number.
 */
int64_t	http1_header_int(const char *p, size_t head_len, const char *name);

/*
 * Decode the chunked body at p[0..n) into body (appended).  1: complete,
 * *used is the bytes consumed (trailers included); 0: need more bytes (body
 * is reset and nothing is kept: call again with more); -1: malformed or
 * larger than body's cap.
 */
int	http1_dechunk(const char *p, size_t n, size_t *used, struct buf *body);

#endif
