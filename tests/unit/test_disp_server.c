/*
 * test_disp_server.c - the scripted HTTP/1.1 server of the dispatcher tests
 * (see test_disp_server.h).
 *
 * Key decision: one thread per connection with blocking sockets, the simplest
 * server that can hold hundreds of connections at once, keep them alive, and
 * hang one of them while the others answer; the tests are about the client.
 * A connection's fd is closed only by tsrv_stop(), after its thread has been
 * joined, so shutdown() never hits a reused descriptor.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/test_disp_server.h"

#define TSRV_BUF_MAX	(8 * 1024 * 1024)

struct tsrv_conn {
	struct tsrv	*s;
	int		 fd;
	int		 id;
	pthread_t	 thread;
	struct tsrv_conn *next;
};

struct tsrv {
	int		 lfd;
	int		 port;
	pthread_t	 acceptor;
	pthread_mutex_t	 mu;
	pthread_cond_t	 cv;		/* CLOCK_MONOTONIC */
	int		 stopping;
	int		 released;
	int		 accepts;
	struct tsrv_req	**reqs;
	int		 nreqs;
	int		 capreqs;
	struct tsrv_conn *conns;
	void		(*handler)(const struct tsrv_req *, struct tsrv_reply *,
			    void *);
	void		*arg;
};

void
tsrv_deadline(struct timespec *ts, int ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
}

static char *
dupn(const char *p, size_t n)
{
	char *s = malloc(n + 1);

	if (s == NULL)
		abort();
	memcpy(s, p, n);
	s[n] = '\0';
	return s;
}

static void
req_free(struct tsrv_req *r)
{
	int i;

	for (i = 0; i < r->nheaders; i++) {
		free(r->name[i]);
		free(r->value[i]);
	}
	free(r->body);
	free(r);
}

const char *
tsrv_header(const struct tsrv_req *r, const char *name, int *count)
{
	const char *v = NULL;
	int i, n = 0;

	for (i = 0; i < r->nheaders; i++)
		if (strcasecmp(r->name[i], name) == 0) {
			if (v == NULL)
				v = r->value[i];
			n++;
		}
	if (count != NULL)
		*count = n;
	return v;
}

/* Parses the head in p[0..n) (without the blank line). */
static struct tsrv_req *
parse_head(const char *p, size_t n, size_t *clen)
{
	struct tsrv_req *r;
	const char *line = p, *end = p + n, *eol, *sp, *colon, *v;
	size_t k;
	char tmp[32];

	if ((r = calloc(1, sizeof(*r))) == NULL)
		abort();
	*clen = 0;
	eol = memmem(line, (size_t)(end - line), "\r\n", 2);
	if (eol == NULL)
		eol = end;
	sp = memchr(line, ' ', (size_t)(eol - line));
	if (sp != NULL) {
		k = (size_t)(sp - line);
		if (k >= sizeof(r->method))
			k = sizeof(r->method) - 1;
		memcpy(r->method, line, k);
		line = sp + 1;
		sp = memchr(line, ' ', (size_t)(eol - line));
		k = (size_t)((sp != NULL ? sp : eol) - line);
		if (k >= sizeof(r->path))
			k = sizeof(r->path) - 1;
		memcpy(r->path, line, k);
	}
	for (line = eol + 2; line < end; line = eol + 2) {
		eol = memmem(line, (size_t)(end - line), "\r\n", 2);
		if (eol == NULL)
			eol = end;
		colon = memchr(line, ':', (size_t)(eol - line));
		if (colon == NULL || r->nheaders >= TSRV_MAX_HEADERS)
			continue;
		for (v = colon + 1; v < eol && (*v == ' ' || *v == '\t'); v++)
			;
		r->name[r->nheaders] = dupn(line, (size_t)(colon - line));
		r->value[r->nheaders] = dupn(v, (size_t)(eol - v));
		if (strcasecmp(r->name[r->nheaders], "content-length") == 0) {
			k = (size_t)(eol - v) < sizeof(tmp) - 1 ?
			    (size_t)(eol - v) : sizeof(tmp) - 1;
			memcpy(tmp, v, k);
			tmp[k] = '\0';
			*clen = (size_t)strtoull(tmp, NULL, 10);
		}
		r->nheaders++;
	}
	return r;
}

static int
send_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	ssize_t w;

	while (n > 0) {
		w = send(fd, c, n, MSG_NOSIGNAL);
		if (w == -1 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

static void
record(struct tsrv *s, struct tsrv_req *r)
{
	pthread_mutex_lock(&s->mu);
	if (s->nreqs == s->capreqs) {
		s->capreqs = s->capreqs ? s->capreqs * 2 : 64;
		s->reqs = realloc(s->reqs, (size_t)s->capreqs *
		    sizeof(*s->reqs));
		if (s->reqs == NULL)
			abort();
	}
	s->reqs[s->nreqs++] = r;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* 0 to go on, -1 when the server stops first. */
static int
wait_release(struct tsrv *s)
{
	int ret;

	pthread_mutex_lock(&s->mu);
	while (!s->released && !s->stopping)
		pthread_cond_wait(&s->cv, &s->mu);
	ret = s->stopping ? -1 : 0;
	pthread_mutex_unlock(&s->mu);
	return ret;
}

static int
reply(struct tsrv_conn *c, const struct tsrv_reply *rep)
{
	/* 204 and 304 never have a body (RFC 9110 6.4.1). */
	size_t blen = rep->status == 204 || rep->status == 304 ? 0 :
	    rep->body_len;
	char head[1024], clen[64] = "";
	int n;

	if (rep->status != 204)
		snprintf(clen, sizeof(clen), "Content-Length: %zu\r\n", blen);
	n = snprintf(head, sizeof(head), "HTTP/1.1 %d Scripted\r\n%s%s%s\r\n",
	    rep->status, clen, rep->close ? "Connection: close\r\n" : "",
	    rep->headers);
	if (n < 0 || (size_t)n >= sizeof(head))
		return -1;
	/* The blank line ends head; extra lines go in before it. */
	if (rep->more_headers != NULL) {
		if (send_all(c->fd, head, (size_t)n - 2) == -1 ||
		    send_all(c->fd, rep->more_headers,
		    strlen(rep->more_headers)) == -1 ||
		    send_all(c->fd, "\r\n", 2) == -1)
			return -1;
	} else if (send_all(c->fd, head, (size_t)n) == -1)
		return -1;
	if (blen > 0 && send_all(c->fd, rep->body, blen) == -1)
		return -1;
	return 0;
}

static void *
conn_main(void *arg)
{
	struct tsrv_conn *c = arg;
	struct tsrv *s = c->s;
	struct tsrv_reply rep;
	struct tsrv_req *r;
	size_t len = 0, cap = 65536, clen, hlen;
	char *buf, *eoh;
	ssize_t got;

	if ((buf = malloc(cap)) == NULL)
		abort();
	for (;;) {
		eoh = len > 0 ? memmem(buf, len, "\r\n\r\n", 4) : NULL;
		if (eoh == NULL) {
			if (len == cap) {
				if (cap >= TSRV_BUF_MAX)
					break;
				cap *= 2;
				if ((buf = realloc(buf, cap)) == NULL)
					abort();
			}
			got = recv(c->fd, buf + len, cap - len, 0);
			if (got == -1 && errno == EINTR)
				continue;
			if (got <= 0)
				break;
			len += (size_t)got;
			continue;
		}
		hlen = (size_t)(eoh - buf) + 4;
		r = parse_head(buf, hlen - 4, &clen);
		r->conn = c->id;
		if (clen > TSRV_BUF_MAX) {
			req_free(r);
			break;
		}
		while (len < hlen + clen) {
			if (len == cap) {
				cap *= 2;
				if ((buf = realloc(buf, cap)) == NULL)
					abort();
			}
			got = recv(c->fd, buf + len, cap - len, 0);
			if (got == -1 && errno == EINTR)
				continue;
			if (got <= 0)
				break;
			len += (size_t)got;
		}
		if (len < hlen + clen) {
			req_free(r);
			break;
		}
		if ((r->body = malloc(clen + 1)) == NULL)
			abort();
		memcpy(r->body, buf + hlen, clen);
		r->body_len = clen;
		memmove(buf, buf + hlen + clen, len - hlen - clen);
		len -= hlen + clen;
		record(s, r);

		memset(&rep, 0, sizeof(rep));
		rep.status = 200;
		s->handler(r, &rep, s->arg);
		if (rep.hang && wait_release(s) == -1)
			break;
		if (rep.drop || reply(c, &rep) == -1 || rep.close)
			break;
	}
	free(buf);
	shutdown(c->fd, SHUT_RDWR);
	return NULL;
}

static void *
accept_main(void *arg)
{
	struct tsrv *s = arg;
	struct tsrv_conn *c;
	int fd;

	for (;;) {
		fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd == -1) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			break;		/* shut down by tsrv_stop */
		}
		if ((c = calloc(1, sizeof(*c))) == NULL)
			abort();
		c->s = s;
		c->fd = fd;
		pthread_mutex_lock(&s->mu);
		if (s->stopping) {
			pthread_mutex_unlock(&s->mu);
			close(fd);
			free(c);
			break;
		}
		c->id = ++s->accepts;
		c->next = s->conns;
		s->conns = c;
		if (pthread_create(&c->thread, NULL, conn_main, c) != 0)
			abort();
		pthread_mutex_unlock(&s->mu);
	}
	return NULL;
}

struct tsrv *
tsrv_start(void (*handler)(const struct tsrv_req *, struct tsrv_reply *,
    void *), void *arg)
{
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);
	pthread_condattr_t ca;
	struct tsrv *s;
	int one = 1;

	if ((s = calloc(1, sizeof(*s))) == NULL)
		abort();
	s->handler = handler;
	s->arg = arg;
	pthread_mutex_init(&s->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->lfd == -1)
		abort();
	setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(s->lfd, (struct sockaddr *)&sin, sizeof(sin)) == -1 ||
	    listen(s->lfd, 1024) == -1 ||
	    getsockname(s->lfd, (struct sockaddr *)&sin, &sl) == -1)
		abort();
	s->port = ntohs(sin.sin_port);
	if (pthread_create(&s->acceptor, NULL, accept_main, s) != 0)
		abort();
	return s;
}

int
tsrv_port(struct tsrv *s)
{
	return s->port;
}

int
tsrv_accepts(struct tsrv *s)
{
	int n;

	pthread_mutex_lock(&s->mu);
	n = s->accepts;
	pthread_mutex_unlock(&s->mu);
	return n;
}

int
tsrv_nreqs(struct tsrv *s)
{
	int n;

	pthread_mutex_lock(&s->mu);
	n = s->nreqs;
	pthread_mutex_unlock(&s->mu);
	return n;
}

const struct tsrv_req *
tsrv_req(struct tsrv *s, int i)
{
	const struct tsrv_req *r = NULL;

	pthread_mutex_lock(&s->mu);
	if (i >= 0 && i < s->nreqs)
		r = s->reqs[i];
	pthread_mutex_unlock(&s->mu);
	return r;
}

int
tsrv_wait_reqs(struct tsrv *s, int n, int timeout_ms)
{
	struct timespec dl;
	int ret = 0;

	tsrv_deadline(&dl, timeout_ms);
	pthread_mutex_lock(&s->mu);
	while (s->nreqs < n)
		if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) == ETIMEDOUT) {
			ret = s->nreqs >= n ? 0 : -1;
			break;
		}
	pthread_mutex_unlock(&s->mu);
	return ret;
}

void
tsrv_release(struct tsrv *s)
{
	pthread_mutex_lock(&s->mu);
	s->released = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

void
tsrv_stop(struct tsrv *s)
{
	struct tsrv_conn *c, *next;
	int i;

	if (s == NULL)
		return;
	pthread_mutex_lock(&s->mu);
	s->stopping = 1;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	shutdown(s->lfd, SHUT_RDWR);
	pthread_join(s->acceptor, NULL);
	close(s->lfd);
	for (c = s->conns; c != NULL; c = c->next)
		shutdown(c->fd, SHUT_RDWR);
	for (c = s->conns; c != NULL; c = next) {
		next = c->next;
		pthread_join(c->thread, NULL);
		close(c->fd);
		free(c);
	}
	for (i = 0; i < s->nreqs; i++)
		req_free(s->reqs[i]);
	free(s->reqs);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}
