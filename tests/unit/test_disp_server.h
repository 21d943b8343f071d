/*
 * test_disp_server.h - a tiny scripted HTTP/1.1 server for the dispatcher's
 * unit tests: 127.0.0.1, port 0, one thread per connection, keep-alive, and
 * a handler that chooses each reply.  It records every request it reads so
 * a test can check exactly what went over the wire.
 */
#ifndef RETRYD_TEST_DISP_SERVER_H
#define RETRYD_TEST_DISP_SERVER_H

#include <stddef.h>
#include <stdint.h>

#define TSRV_MAX_HEADERS	64

struct tsrv_req {
	int		 conn;		/* 1-based connection number */
	char		 method[16];
	char		 path[512];
	int		 nheaders;
	char		*name[TSRV_MAX_HEADERS];
	char		*value[TSRV_MAX_HEADERS];
	uint8_t		*body;
	size_t		 body_len;
};

struct tsrv_reply {
	int		 status;	/* 200 unless set */
	char		 headers[512];	/* extra "Name: value\r\n" lines */
	const char	*more_headers;	/* more such lines, the test's */
	const void	*body;		/* static or owned by the test */
	size_t		 body_len;
	int		 hang;		/* reply after tsrv_release() */
	int		 close;		/* close the connection after */
	int		 drop;		/* close it instead of replying */
};

struct tsrv;

/* handler(req, reply, arg) fills reply; it runs on a connection thread. */
struct tsrv *tsrv_start(void (*handler)(const struct tsrv_req *,
	    struct tsrv_reply *, void *), void *arg);
int	tsrv_port(struct tsrv *s);
int	tsrv_accepts(struct tsrv *s);
int	tsrv_nreqs(struct tsrv *s);
/* The i-th request read (0-based); valid until tsrv_stop(). */
const struct tsrv_req *tsrv_req(struct tsrv *s, int i);
/* The first value of a header, case-insensitive, or NULL; *count gets how
 * many times it came (count may be NULL). */
const char *tsrv_header(const struct tsrv_req *r, const char *name,
	    int *count);
/* Waits until n requests were read; 0, or -1 at the deadline. */
int	tsrv_wait_reqs(struct tsrv *s, int n, int timeout_ms);
/* Lets hung replies go. */
void	tsrv_release(struct tsrv *s);
void	tsrv_stop(struct tsrv *s);

/* A deadline helper shared with the tests: now + ms on CLOCK_MONOTONIC. */
struct timespec;
void	tsrv_deadline(struct timespec *ts, int ms);

#endif
