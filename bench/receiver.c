/*
 * receiver.c - bench-receiver: the callback target of the benchmarks.  It
 * answers retryd's callbacks as fast as it can and records, for each one,
 * when it arrived; the bench tool reads the records back over HTTP.
 *
 *   POST /cb/TAG[?fail=N&status=S]  a callback: recorded under TAG; answers
 *                                   S (default 500) while the retryd-attempt
 *                                   header is <= N, else 200
 *   GET|POST /ping                  200, not recorded (the wrk ceiling)
 *   GET /stats[?tag=T]              {"records":N,"tagged":K,"dropped":D}
 *   GET /records?from=I&max=M       records I.. as text lines
 *                                   "tag seq attempt status due_ms wall_us"
 *   POST /reset                     forget every record
 *
 * The body of a callback is the job's body, a JSON object carrying "s" (the
 * job's sequence number in its workload) and "d" (its due time, wall ms).
 *
 * Key decision: one thread, one epoll loop, records in one preallocated array
 * of fixed-size structs.  The arrival time is read with CLOCK_REALTIME in
 * microseconds right after the read that completed the request, so the
 * lateness the bench reports includes retryd's whole path (promote, dispatch,
 * connect, send) and nothing of the receiver's bookkeeping.  The process
 * ends on SIGTERM, when its parent dies, or after -T seconds.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench/http1.h"
#include "util/buf.h"
#include "util/xmalloc.h"

#define RCV_MAX_CONN	4096
#define RCV_MAX_IN	(1024 * 1024)
#define RCV_MAX_DUMP	200000

struct rec {
	int64_t	wall_us;
	int64_t	due_ms;
	int64_t	seq;
	int32_t	tag;
	int16_t	attempt;
	int16_t	status;
};

struct conn {
	int		fd;
	struct buf	in;
	struct buf	out;
	size_t		out_off;
	int		close_after;
};

static struct rec	*recs;
static size_t		 nrecs, caprecs;
static uint64_t		 dropped;
static volatile sig_atomic_t quit;
static struct buf	 scratch;	/* dechunked bodies, dumps */

static int64_t
wall_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t
mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec;
}

static void
on_signal(int sig)
{
	(void)sig;
	quit = 1;
}

/* The integer after "key": in a JSON object, or -1. */
static int64_t
json_int(const char *p, size_t n, const char *key)
{
	size_t kl = strlen(key), i;
	int64_t x;
	int neg;

	for (i = 0; i + kl + 2 < n; i++) {
		if (p[i] != '"' || strncmp(p + i + 1, key, kl) != 0 ||
		    p[i + 1 + kl] != '"')
			continue;
		i += kl + 2;
		while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == ':' ||
		    p[i] == '\n' || p[i] == '\r'))
			i++;
		neg = i < n && p[i] == '-';
		if (neg)
			i++;
		if (i >= n || p[i] < '0' || p[i] > '9')
			return -1;
		for (x = 0; i < n && p[i] >= '0' && p[i] <= '9'; i++)
			x = x * 10 + (p[i] - '0');
		return neg ? -x : x;
	}
	return -1;
}

/* The integer value of query parameter name in q[0..n), or def. */
static int64_t
query_int(const char *q, size_t n, const char *name, int64_t def)
{
	size_t nl = strlen(name), i = 0;
	int64_t x;

	while (i < n) {
		if (n - i > nl && strncmp(q + i, name, nl) == 0 &&
		    q[i + nl] == '=') {
			i += nl + 1;
			if (i >= n || q[i] < '0' || q[i] > '9')
				return def;
			for (x = 0; i < n && q[i] >= '0' && q[i] <= '9' &&
			    x < INT64_C(100000000000000); i++)
				x = x * 10 + (q[i] - '0');
			return x;
		}
		while (i < n && q[i] != '&')
			i++;
		i++;
	}
	return def;
}

static int
reply(struct conn *c, int status, const char *body, size_t len)
{
	const char *reason;

	switch (status) {
	case 200: reason = "OK"; break;
	case 404: reason = "Not Found"; break;
	case 400: reason = "Bad Request"; break;
	case 100: reason = "Continue"; break;
	default: reason = "Status"; break;
	}
	if (status == 100)
		return buf_printf(&c->out, "HTTP/1.1 100 Continue\r\n\r\n");
	if (buf_printf(&c->out, "HTTP/1.1 %d %s\r\nContent-Length: %zu\r\n"
	    "Content-Type: text/plain\r\n%s\r\n", status, reason, len,
	    c->close_after ? "Connection: close\r\n" : "") == -1)
		return -1;
	return buf_append(&c->out, body, len);
}

static int
on_callback(struct conn *c, const char *head, const struct http1_head *h,
    const char *tag, size_t tn, const char *body, size_t blen, int64_t now)
{
	const char *q;
	int64_t attempt, fail, fstatus;
	struct rec *r;
	int status;
	int32_t t = 0;
	size_t i;

	for (i = 0; i < tn && tag[i] >= '0' && tag[i] <= '9' && t < 100000;
	    i++)
		t = t * 10 + (tag[i] - '0');
	q = memchr(tag, '?', tn);
	fail = 0;
	fstatus = 500;
	if (q != NULL) {
		q++;
		fail = query_int(q, (size_t)(tag + tn - q), "fail", 0);
		fstatus = query_int(q, (size_t)(tag + tn - q), "status", 500);
		if (fstatus < 200 || fstatus > 599)
			fstatus = 500;
	}
	attempt = http1_header_int(head, h->len, "retryd-attempt");
	status = attempt >= 0 && attempt <= fail ? (int)fstatus : 200;
	if (nrecs < caprecs) {
		r = &recs[nrecs++];
		r->wall_us = now;
		r->tag = t;
		r->attempt = (int16_t)(attempt > 32767 ? 32767 : attempt);
		r->status = (int16_t)status;
		r->seq = json_int(body, blen, "s");
		r->due_ms = json_int(body, blen, "d");
	} else
		dropped++;
	return reply(c, status, "ok", 2);
}

static int
on_stats(struct conn *c, const char *q, size_t qn)
{
	char out[256];
	int64_t tag = q != NULL ? query_int(q, qn, "tag", -1) : -1;
	size_t i, tagged = 0;
	int n;

	if (tag >= 0)
		for (i = 0; i < nrecs; i++)
			if (recs[i].tag == tag)
				tagged++;
	n = snprintf(out, sizeof(out),
	    "{\"records\":%zu,\"tagged\":%zu,\"dropped\":%" PRIu64
	    ",\"cap\":%zu}\n", nrecs, tagged, dropped, caprecs);
	return reply(c, 200, out, (size_t)n);
}

static int
on_records(struct conn *c, const char *q, size_t qn)
{
	int64_t from = q != NULL ? query_int(q, qn, "from", 0) : 0;
	int64_t max = q != NULL ? query_int(q, qn, "max", 100000) : 100000;
	size_t i, end;
	int r;

	if (max > RCV_MAX_DUMP)
		max = RCV_MAX_DUMP;
	buf_reset(&scratch);
	end = (size_t)from + (size_t)max;
	if (end > nrecs)
		end = nrecs;
	for (i = (size_t)from; i < end; i++) {
		const struct rec *x = &recs[i];

		if (buf_printf(&scratch, "%d %" PRId64 " %d %d %" PRId64 " %"
		    PRId64 "\n", (int)x->tag, x->seq, (int)x->attempt,
		    (int)x->status, x->due_ms, x->wall_us) == -1)
			return -1;
	}
	r = reply(c, 200, scratch.data != NULL ? scratch.data : "",
	    scratch.len);
	buf_reset(&scratch);
	return r;
}

/* Handle one complete request; -1 closes the connection. */
static int
dispatch(struct conn *c, const char *p, const struct http1_head *h,
    const char *body, size_t blen, int64_t now)
{
	const char *t = h->target, *q;
	size_t tn = h->target_len, pn, qn = 0;
	int post = h->method_len == 4 && memcmp(h->method, "POST", 4) == 0;

	q = memchr(t, '?', tn);
	pn = q != NULL ? (size_t)(q - t) : tn;
	if (q != NULL) {
		q++;
		qn = (size_t)(t + tn - q);
	}
	if (post && pn > 4 && memcmp(t, "/cb/", 4) == 0)
		return on_callback(c, p, h, t + 4, tn - 4, body, blen, now);
	if (pn == 5 && memcmp(t, "/ping", 5) == 0)
		return reply(c, 200, "ok", 2);
	if (pn == 6 && memcmp(t, "/stats", 6) == 0)
		return on_stats(c, q, qn);
	if (pn == 8 && memcmp(t, "/records", 8) == 0)
		return on_records(c, q, qn);
	if (post && pn == 6 && memcmp(t, "/reset", 6) == 0) {
		nrecs = 0;
		dropped = 0;
		return reply(c, 200, "ok", 2);
	}
	return reply(c, 404, "not found", 9);
}

/* Serve every complete request in c->in.  -1: close the connection. */
static int
serve(struct conn *c, int64_t now)
{
	struct http1_head h;
	const char *body;
	size_t blen, used, total;
	int r;

	while (c->in.len > 0 && !c->close_after) {
		r = http1_parse_head(c->in.data, c->in.len, 1, &h);
		if (r == -1)
			return -1;
		if (r == 0)
			return 0;
		if (h.chunked) {
			r = http1_dechunk(c->in.data + h.len, c->in.len - h.len,
			    &used, &scratch);
			if (r == -1)
				return -1;
			if (r == 0)
				return 0;
			body = scratch.data != NULL ? scratch.data : "";
			blen = scratch.len;
			total = h.len + used;
		} else {
			if (h.content_length < 0)
				h.content_length = 0;
			if (h.content_length > RCV_MAX_IN)
				return -1;
			total = h.len + (size_t)h.content_length;
			if (c->in.len < total) {
				if (h.expect_continue && c->in.len == h.len &&
				    reply(c, 100, NULL, 0) == -1)
					return -1;
				return 0;
			}
			body = c->in.data + h.len;
			blen = (size_t)h.content_length;
		}
		if (h.close)
			c->close_after = 1;
		if (dispatch(c, c->in.data, &h, body, blen, now) == -1)
			return -1;
		memmove(c->in.data, c->in.data + total, c->in.len - total);
		c->in.len -= total;
		c->in.data[c->in.len] = '\0';
	}
	return 0;
}

static void
conn_free(int ep, struct conn *c)
{
	epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	buf_free(&c->in);
	buf_free(&c->out);
	free(c);
}

/* Write what is pending.  -1: drop the connection. */
static int
flush_out(int ep, struct conn *c)
{
	struct epoll_event ev;
	ssize_t n;

	while (c->out_off < c->out.len) {
		n = write(c->fd, c->out.data + c->out_off,
		    c->out.len - c->out_off);
		if (n > 0) {
			c->out_off += (size_t)n;
			continue;
		}
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN) {
			memset(&ev, 0, sizeof(ev));
			ev.events = EPOLLIN | EPOLLOUT;
			ev.data.ptr = c;
			epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
			return 0;
		}
		return -1;
	}
	if (c->out.len > 0) {
		buf_reset(&c->out);
		c->out_off = 0;
		memset(&ev, 0, sizeof(ev));
		ev.events = EPOLLIN;
		ev.data.ptr = c;
		epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
	}
	return c->close_after ? -1 : 0;
}

/* Read and serve; -1 when the connection was dropped (and freed). */
static int
on_readable(int ep, struct conn *c)
{
	int eof = 0;

	if (http1_read_avail(c->fd, &c->in, &eof) == -1)
		goto drop;
	if (serve(c, wall_us()) == -1) {
		c->close_after = 1;
		if (c->out.len == 0)
			goto drop;
	}
	if (flush_out(ep, c) == -1 || eof)
		goto drop;
	return 0;
drop:
	conn_free(ep, c);
	return -1;
}

static void
on_accept(int ep, int lfd, int *nconn)
{
	struct epoll_event ev;
	struct conn *c;
	int fd, one = 1;

	for (;;) {
		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd == -1)
			return;
		if (*nconn >= RCV_MAX_CONN) {
			close(fd);
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c = xcalloc(1, sizeof(*c));
		c->fd = fd;
		buf_init(&c->in, RCV_MAX_IN + HTTP1_MAX_HEAD);
		buf_init(&c->out, 64 * 1024 * 1024);
		memset(&ev, 0, sizeof(ev));
		ev.events = EPOLLIN;
		ev.data.ptr = c;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == -1) {
			close(fd);
			buf_free(&c->in);
			buf_free(&c->out);
			free(c);
			continue;
		}
		(*nconn)++;
	}
}

static int
listen_on(const char *addr, int *port)
{
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);
	char host[64];
	const char *colon;
	char *e;
	long p;
	int fd, one = 1;

	colon = strrchr(addr, ':');
	if (colon == NULL || (size_t)(colon - addr) >= sizeof(host))
		return -1;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = '\0';
	errno = 0;
	p = strtol(colon + 1, &e, 10);
	if (errno != 0 || *e != '\0' || p < 0 || p > 65535)
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)p);
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1 ||
	    (ntohl(sa.sin_addr.s_addr) >> 24) != 127)
		return -1;	/* loopback only */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1 ||
	    listen(fd, 4096) == -1 ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl) == -1) {
		close(fd);
		return -1;
	}
	*port = ntohs(sa.sin_port);
	return fd;
}

static void
usage(void)
{
	fprintf(stderr, "usage: bench-receiver [-l 127.0.0.1:PORT] "
	    "[-n max-records] [-T seconds]\n");
	exit(2);
}

static long long
num_arg(const char *s, long long lo, long long hi)
{
	long long x;
	char *e;

	errno = 0;
	x = strtoll(s, &e, 10);
	if (errno != 0 || e == s || *e != '\0' || x < lo || x > hi)
		usage();
	return x;
}

int
main(int argc, char **argv)
{
	struct epoll_event evs[512], ev;
	struct sigaction sa;
	const char *addr = "127.0.0.1:0";
	int64_t end_s, lifetime = 3600;
	int ep, lfd, port, ch, n, i, nconn = 0;

	caprecs = 4000000;
	while ((ch = getopt(argc, argv, "l:n:T:")) != -1) {
		switch (ch) {
		case 'l':
			addr = optarg;
			break;
		case 'n':
			caprecs = (size_t)num_arg(optarg, 1, 100000000);
			break;
		case 'T':
			lifetime = num_arg(optarg, 1, 86400);
			break;
		default:
			usage();
		}
	}
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	/* calloc: pages are touched only as records arrive. */
	recs = xcalloc(caprecs, sizeof(*recs));
	buf_init(&scratch, 64 * 1024 * 1024);
	lfd = listen_on(addr, &port);
	if (lfd == -1) {
		fprintf(stderr, "bench-receiver: cannot listen on %s: %s\n",
		    addr, strerror(errno));
		return 1;
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLIN;
	ev.data.ptr = NULL;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	printf("bench-receiver: listening on 127.0.0.1:%d\n", port);
	fflush(stdout);
	end_s = mono_s() + lifetime;
	while (!quit && mono_s() < end_s) {
		n = epoll_wait(ep, evs, 512, 500);
		for (i = 0; i < n; i++) {
			struct conn *c = evs[i].data.ptr;

			if (c == NULL) {
				on_accept(ep, lfd, &nconn);
				continue;
			}
			if (evs[i].events & EPOLLOUT) {
				if (flush_out(ep, c) == -1) {
					conn_free(ep, c);
					nconn--;
					continue;
				}
			}
			if ((evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) &&
			    on_readable(ep, c) == -1)
				nconn--;
		}
	}
	close(lfd);
	close(ep);
	free(recs);
	buf_free(&scratch);
	return 0;
}
