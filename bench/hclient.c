/*
 * hclient.c - keep-alive HTTP/1.1 connections on one epoll loop for the
 * bench tool (see hclient.h).
 *
 * Key decision: each slot is a small state machine (idle, writing, reading,
 * parked) owned by the one thread that runs the pool, so nothing is locked.
 * A slot connects lazily, reconnects after "Connection: close" or an error,
 * and never resends a request: a request that failed is reported as failed
 * (status 0), since resending a job push could enqueue it twice and spoil the
 * exactly-once checks.  The bench reads the machine's clocks directly, with
 * microsecond resolution, because it is an outside observer of retryd.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench/hclient.h"
#include "bench/http1.h"
#include "util/xmalloc.h"

enum slot_state {
	SLOT_IDLE = 0,
	SLOT_WRITING,
	SLOT_READING,
	SLOT_PARKED,
};

struct slot {
	int		 fd;
	enum slot_state	 state;
	struct buf	 req;
	size_t		 sent;
	struct buf	 in;
	struct buf	 body;
	int64_t		 start_us;
	int64_t		 deadline_us;
};

struct hc_pool {
	struct hc_target	 t;
	const struct hc_ops	*ops;
	void			*arg;
	int			 ep;
	int			 nslots;
	int			 live;		/* slots not parked */
	int			 stop;
	int64_t			 req_timeout_us;
	uint64_t		 errors;
	struct slot		*slots;
};

int64_t
hc_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t
hc_wall_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int
hc_parse_url(const char *url, struct hc_target *t)
{
	const char *p, *colon, *end;
	struct in_addr a;
	char *e;
	long port;
	size_t hl;

	memset(t, 0, sizeof(*t));
	if (strncmp(url, "http://", 7) != 0)
		goto bad;
	p = url + 7;
	end = p + strcspn(p, "/");
	colon = memchr(p, ':', (size_t)(end - p));
	if (colon == NULL)
		goto bad;
	hl = (size_t)(colon - p);
	if (hl == 0 || hl >= sizeof(t->host))
		goto bad;
	memcpy(t->host, p, hl);
	t->host[hl] = '\0';
	if (strcmp(t->host, "localhost") == 0)
		memcpy(t->host, "127.0.0.1", sizeof("127.0.0.1"));
	errno = 0;
	port = strtol(colon + 1, &e, 10);
	if (errno != 0 || e != end || port < 1 || port > 65535)
		goto bad;
	/* Loopback only: the bench never sends traffic off this machine. */
	if (inet_pton(AF_INET, t->host, &a) != 1 ||
	    (ntohl(a.s_addr) >> 24) != 127)
		goto bad;
	t->port = (int)port;
	snprintf(t->hostport, sizeof(t->hostport), "%s:%d", t->host, t->port);
	return 0;
bad:
	errno = EINVAL;
	return -1;
}

int
hc_format(struct buf *req, const struct hc_target *t, const char *method,
    const char *path, const char *headers, const char *body, size_t body_len)
{
	if (body == NULL)
		body_len = 0;
	if (buf_printf(req, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, path,
	    t->hostport) == -1)
		return -1;
	if (headers != NULL && buf_puts(req, headers) == -1)
		return -1;
	if (body != NULL || strcmp(method, "POST") == 0 ||
	    strcmp(method, "PUT") == 0) {
		if (buf_printf(req, "Content-Type: application/json\r\n"
		    "Content-Length: %zu\r\n", body_len) == -1)
			return -1;
	}
	if (buf_append(req, "\r\n", 2) == -1)
		return -1;
	if (body_len > 0 && buf_append(req, body, body_len) == -1)
		return -1;
	return 0;
}

static int
slot_connect(struct hc_pool *p, int i)
{
	struct slot *s = &p->slots[i];
	struct sockaddr_in sa;
	struct epoll_event ev;
	int fd, one = 1;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)p->t.port);
	inet_pton(AF_INET, p->t.host, &sa.sin_addr);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/*
	 * Non-blocking: while the handshake is in progress write() answers
	 * EAGAIN, so the request simply waits for EPOLLOUT, and a refused
	 * connection shows up as EPOLLERR on the slot.
	 */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1 &&
	    errno != EINPROGRESS)
		goto fail;
	memset(&ev, 0, sizeof(ev));
	ev.events = EPOLLIN;
	ev.data.u32 = (uint32_t)i;
	if (epoll_ctl(p->ep, EPOLL_CTL_ADD, fd, &ev) == -1)
		goto fail;
	s->fd = fd;
	return 0;
fail:
	close(fd);
	return -1;
}

static void
slot_close(struct hc_pool *p, struct slot *s)
{
	if (s->fd != -1) {
		epoll_ctl(p->ep, EPOLL_CTL_DEL, s->fd, NULL);
		close(s->fd);
		s->fd = -1;
	}
}

/* Report the end of slot i's request and give it the next one. */
static void
slot_finish(struct hc_pool *p, int i, int status, const char *body,
    size_t len)
{
	struct slot *s = &p->slots[i];
	struct hc_resp r;

	r.status = status;
	r.body = body != NULL ? body : "";
	r.len = body != NULL ? len : 0;
	r.lat_us = hc_mono_us() - s->start_us;
	if (status == 0) {
		p->errors++;
		slot_close(p, s);
	}
	s->state = SLOT_IDLE;	/* hc_pool_run() gives it the next request */
	p->ops->done(p->arg, i, &r);
	buf_reset(&s->in);
}

static void
slot_write(struct hc_pool *p, int i)
{
	struct slot *s = &p->slots[i];
	struct epoll_event ev;
	ssize_t n;

	while (s->sent < s->req.len) {
		n = write(s->fd, s->req.data + s->sent, s->req.len - s->sent);
		if (n > 0) {
			s->sent += (size_t)n;
			continue;
		}
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN) {
			if (s->state != SLOT_WRITING) {
				memset(&ev, 0, sizeof(ev));
				ev.events = EPOLLIN | EPOLLOUT;
				ev.data.u32 = (uint32_t)i;
				epoll_ctl(p->ep, EPOLL_CTL_MOD, s->fd, &ev);
				s->state = SLOT_WRITING;
			}
			return;
		}
		slot_finish(p, i, 0, NULL, 0);
		return;
	}
	if (s->state == SLOT_WRITING) {
		memset(&ev, 0, sizeof(ev));
		ev.events = EPOLLIN;
		ev.data.u32 = (uint32_t)i;
		epoll_ctl(p->ep, EPOLL_CTL_MOD, s->fd, &ev);
	}
	s->state = SLOT_READING;
}

static void
slot_kick(struct hc_pool *p, int i)
{
	struct slot *s = &p->slots[i];
	int r;

	buf_reset(&s->req);
	r = p->ops->next(p->arg, i, &s->req);
	if (r == -1) {
		p->stop = 1;
		return;
	}
	if (r == 0) {
		s->state = SLOT_PARKED;
		p->live--;
		slot_close(p, s);
		return;
	}
	s->sent = 0;
	s->start_us = hc_mono_us();
	s->deadline_us = s->start_us + p->req_timeout_us;
	if (s->fd == -1 && slot_connect(p, i) == -1) {
		slot_finish(p, i, 0, NULL, 0);
		return;
	}
	s->state = SLOT_READING;	/* slot_write() moves it as needed */
	slot_write(p, i);
}

/*
 * Is the answer in s->in complete?  1 and status/body set; 0 need more;
 * -1 malformed.  eof: the peer closed, which ends a body without length.
 */
static int
slot_parse(struct slot *s, int eof, int *status, const char **body,
    size_t *len, int *close_after)
{
	struct http1_head h;
	size_t used;
	int r;

	for (;;) {
		r = http1_parse_head(s->in.data, s->in.len, 0, &h);
		if (r <= 0)
			return r;
		if (h.status != 100)
			break;
		/* An interim 100 Continue: drop it and look again. */
		memmove(s->in.data, s->in.data + h.len, s->in.len - h.len);
		s->in.len -= h.len;
		s->in.data[s->in.len] = '\0';
	}
	*status = h.status;
	*close_after = h.close;
	if (h.status == 204 || h.status == 304 || h.status < 200) {
		*body = NULL;
		*len = 0;
		return 1;
	}
	if (h.chunked) {
		r = http1_dechunk(s->in.data + h.len, s->in.len - h.len, &used,
		    &s->body);
		if (r <= 0)
			return r;
		*body = s->body.data;
		*len = s->body.len;
		return 1;
	}
	if (h.content_length >= 0) {
		if (s->in.len - h.len < (size_t)h.content_length)
			return 0;
		*body = s->in.data + h.len;
		*len = (size_t)h.content_length;
		s->in.data[h.len + *len] = '\0';
		return 1;
	}
	if (!eof)
		return 0;
	*body = s->in.data + h.len;
	*len = s->in.len - h.len;
	*close_after = 1;
	return 1;
}

static void
slot_read(struct hc_pool *p, int i)
{
	struct slot *s = &p->slots[i];
	const char *body = NULL;
	size_t len = 0;
	int status = 0, close_after = 0, r, eof = 0;

	if (http1_read_avail(s->fd, &s->in, &eof) == -1) {
		slot_finish(p, i, 0, NULL, 0);
		return;
	}
	if (s->state != SLOT_READING && s->state != SLOT_WRITING) {
		/* Bytes or a close while idle: the server ended keep-alive. */
		if (eof)
			slot_close(p, s);
		buf_reset(&s->in);
		return;
	}
	r = slot_parse(s, eof, &status, &body, &len, &close_after);
	if (r == 0 && !eof)
		return;
	if (r <= 0) {
		slot_finish(p, i, 0, NULL, 0);
		return;
	}
	if (close_after || eof)
		slot_close(p, s);
	slot_finish(p, i, status, body, len);
}

struct hc_pool *
hc_pool_new(const struct hc_target *t, int slots, const struct hc_ops *ops,
    void *arg, int req_timeout_ms)
{
	struct hc_pool *p;
	int i;

	p = xcalloc(1, sizeof(*p));
	p->t = *t;
	p->ops = ops;
	p->arg = arg;
	p->nslots = slots;
	p->req_timeout_us = (int64_t)req_timeout_ms * 1000;
	p->ep = epoll_create1(EPOLL_CLOEXEC);
	if (p->ep == -1) {
		free(p);
		return NULL;
	}
	p->slots = xcalloc((size_t)slots, sizeof(*p->slots));
	for (i = 0; i < slots; i++) {
		p->slots[i].fd = -1;
		p->slots[i].state = SLOT_PARKED;
		buf_init(&p->slots[i].req, HC_MAX_BODY);
		buf_init(&p->slots[i].in, HC_MAX_BODY + HTTP1_MAX_HEAD);
		buf_init(&p->slots[i].body, HC_MAX_BODY);
	}
	return p;
}

static void
check_timeouts(struct hc_pool *p, int64_t now)
{
	int i;

	for (i = 0; i < p->nslots && !p->stop; i++) {
		struct slot *s = &p->slots[i];

		if ((s->state == SLOT_READING || s->state == SLOT_WRITING) &&
		    now >= s->deadline_us)
			slot_finish(p, i, 0, NULL, 0);
	}
}

int
hc_pool_run(struct hc_pool *p, int64_t deadline_mono_us)
{
	struct epoll_event evs[256];
	int64_t now, wake;
	int i, n, ms, idle;

	p->stop = 0;
	p->live = p->nslots;
	for (i = 0; i < p->nslots; i++)
		p->slots[i].state = SLOT_IDLE;
	for (;;) {
		idle = 0;
		for (i = 0; i < p->nslots && !p->stop; i++)
			if (p->slots[i].state == SLOT_IDLE)
				slot_kick(p, i);
		if (p->live == 0 || p->stop)
			break;
		now = hc_mono_us();
		if (now >= deadline_mono_us)
			return -1;
		wake = deadline_mono_us;
		for (i = 0; i < p->nslots; i++) {
			struct slot *s = &p->slots[i];

			if (s->state == SLOT_IDLE)
				idle = 1;
			if ((s->state == SLOT_READING ||
			    s->state == SLOT_WRITING) && s->deadline_us < wake)
				wake = s->deadline_us;
		}
		ms = wake > now && !idle ? (int)((wake - now + 999) / 1000) : 0;
		n = epoll_wait(p->ep, evs, 256, ms);
		if (n == -1 && errno != EINTR)
			return -1;
		for (i = 0; i < n && !p->stop; i++) {
			int k = (int)evs[i].data.u32;
			struct slot *s = &p->slots[k];

			if (s->fd == -1)
				continue;
			if ((evs[i].events & EPOLLOUT) &&
			    s->state == SLOT_WRITING)
				slot_write(p, k);
			if (s->fd != -1 &&
			    (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
				slot_read(p, k);
		}
		check_timeouts(p, hc_mono_us());
	}
	return 0;
}

void
hc_pool_stop(struct hc_pool *p)
{
	p->stop = 1;
}

uint64_t
hc_pool_errors(const struct hc_pool *p)
{
	return p->errors;
}

void
hc_pool_free(struct hc_pool *p)
{
	int i;

	if (p == NULL)
		return;
	for (i = 0; i < p->nslots; i++) {
		slot_close(p, &p->slots[i]);
		buf_free(&p->slots[i].req);
		buf_free(&p->slots[i].in);
		buf_free(&p->slots[i].body);
	}
	free(p->slots);
	close(p->ep);
	free(p);
}

/* hc_call(): a pool of one slot that sends one request. */
struct call {
	const char	*method;
	const char	*path;
	const char	*headers;
	const char	*body;
	const struct hc_target *t;
	struct buf	*out;
	int		 sent;
	int		 status;
};

static int
call_next(void *arg, int slot, struct buf *req)
{
	struct call *c = arg;

	(void)slot;
	if (c->sent)
		return 0;
	c->sent = 1;
	if (hc_format(req, c->t, c->method, c->path, c->headers, c->body,
	    c->body != NULL ? strlen(c->body) : 0) == -1)
		return -1;
	return 1;
}

static void
call_done(void *arg, int slot, const struct hc_resp *r)
{
	struct call *c = arg;

	(void)slot;
	c->status = r->status;
	if (c->out != NULL && r->len > 0 &&
	    buf_append(c->out, r->body, r->len) == -1)
		c->status = 0;
}

int
hc_call(const struct hc_target *t, const char *method, const char *path,
    const char *headers, const char *body, struct buf *out, int timeout_ms)
{
	static const struct hc_ops ops = { call_next, call_done };
	struct call c;
	struct hc_pool *p;
	int r;

	memset(&c, 0, sizeof(c));
	c.method = method;
	c.path = path;
	c.headers = headers;
	c.body = body;
	c.t = t;
	c.out = out;
	p = hc_pool_new(t, 1, &ops, &c, timeout_ms);
	if (p == NULL)
		return -1;
	r = hc_pool_run(p, hc_mono_us() + (int64_t)timeout_ms * 1000 + 1000);
	hc_pool_free(p);
	if (r == -1 || c.status == 0)
		return -1;
	return c.status;
}
