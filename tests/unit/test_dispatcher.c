/*
 * test_dispatcher.c - the dispatcher against a scripted in-process HTTP
 * server (test_disp_server.c) on 127.0.0.1: outcomes, signing, headers,
 * body bytes, capture caps, keep-alive, no head-of-line blocking, the SSRF
 * refusal at connect time, and drain; and the plan for libcurl's timer
 * (disp_timer_plan), table-driven.
 *
 * Key decision: nothing here sleeps to let time pass.  Each result lands in
 * a slot and a condition variable is signalled; a test waits for the
 * condition with a generous deadline that only a failing test ever reaches.
 * Ordering is asserted, not elapsed time: "all the fast ones finished while
 * the slow one was still open".
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "dispatcher/disp_int.h"
#include "dispatcher/dispatcher.h"
#include "tests/unit/test_disp_server.h"
#include "util/clock.h"
#include "util/crypto.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define WAIT_MS		10000
#define NSLOTS		320
#define SECRET		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define BIG_LEN		(1024 * 1024)

struct slot {
	int		 done;
	int		 order;		/* 1-based completion order */
	struct disp_result res;		/* req is NULL in the copy */
	char		*excerpt;	/* taken from the result */
};

struct fx {
	struct tsrv	*srv;
	struct dispatcher *d;
	pthread_mutex_t	 mu;
	pthread_cond_t	 cv;		/* CLOCK_MONOTONIC */
	int		 ndone;
	int		 chain_left;	/* done() resubmits while > 0 */
	int		 errors;	/* seen on a dispatcher thread */
	struct slot	 slots[NSLOTS];
};

static char	big_body[BIG_LEN];
static char	big_headers[80 * 1024];
static const char hundred[] =
    "0123456789012345678901234567890123456789012345678901234567890123456789"
    "012345678901234567890123456789";

/* --- the server's script, chosen by path ---------------------------- */

static void
handler(const struct tsrv_req *r, struct tsrv_reply *rep, void *arg)
{
	const char *p = r->path;

	(void)arg;
	if (strcmp(p, "/ok") == 0) {
		rep->body = "hello";
		rep->body_len = 5;
	} else if (strncmp(p, "/status/", 8) == 0) {
		rep->status = (int)strtol(p + 8, NULL, 10);
		rep->body = "status";
		rep->body_len = 6;
	} else if (strcmp(p, "/retry/secs") == 0) {
		rep->status = 429;
		snprintf(rep->headers, sizeof(rep->headers),
		    "Retry-After: 120\r\n");
	} else if (strcmp(p, "/retry/date") == 0) {
		rep->status = 503;
		snprintf(rep->headers, sizeof(rep->headers),
		    "Retry-After: Wed, 21 Oct 2037 07:28:00 GMT\r\n");
	} else if (strcmp(p, "/retry/bad") == 0) {
		rep->status = 429;
		snprintf(rep->headers, sizeof(rep->headers),
		    "Retry-After: soon\r\n");
	} else if (strcmp(p, "/retry/500") == 0) {
		rep->status = 500;
		snprintf(rep->headers, sizeof(rep->headers),
		    "Retry-After: 120\r\n");
	} else if (strcmp(p, "/redirect") == 0) {
		rep->status = 302;
		snprintf(rep->headers, sizeof(rep->headers),
		    "Location: /ok\r\n");
	} else if (strcmp(p, "/hang") == 0) {
		rep->hang = 1;
		rep->body = "late";
		rep->body_len = 4;
	} else if (strcmp(p, "/big") == 0) {
		rep->body = big_body;
		rep->body_len = sizeof(big_body);
	} else if (strcmp(p, "/bigheaders") == 0) {
		rep->more_headers = big_headers;
	} else if (strcmp(p, "/drop") == 0) {
		rep->drop = 1;
	} else if (strcmp(p, "/body100") == 0) {
		rep->body = hundred;
		rep->body_len = 100;
	} else
		rep->status = 404;
}

/* --- collecting results --------------------------------------------- */

static struct disp_request *
mkreq(struct fx *f, const char *path, const char *topic, int slot);

static void
done_cb(struct disp_result *res, void *arg)
{
	struct fx *f = arg;
	struct slot *s = res->cookie;
	struct disp_request *next;
	int k = -1;

	pthread_mutex_lock(&f->mu);
	s->res = *res;
	s->res.req = NULL;
	s->excerpt = res->body_excerpt;
	res->body_excerpt = NULL;	/* ours now */
	s->done = 1;
	s->order = ++f->ndone;
	if (f->chain_left > 0)
		k = --f->chain_left;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	/* Submitting from done() must work: the scheduler refills here. */
	if (k >= 0) {
		next = mkreq(f, "/ok", "chain", (int)(s - f->slots) + 1);
		if (disp_submit(f->d, next) == -1) {
			disp_request_free(next);
			pthread_mutex_lock(&f->mu);
			f->errors++;
			pthread_mutex_unlock(&f->mu);
		}
	}
}

static int
wait_ndone(struct fx *f, int n)
{
	struct timespec dl;
	int ret = 0;

	tsrv_deadline(&dl, WAIT_MS);
	pthread_mutex_lock(&f->mu);
	while (f->ndone < n && ret == 0)
		if (pthread_cond_timedwait(&f->cv, &f->mu, &dl) == ETIMEDOUT)
			ret = f->ndone >= n ? 0 : -1;
	pthread_mutex_unlock(&f->mu);
	return ret;
}

static int
slot_done(struct fx *f, int i)
{
	int d;

	pthread_mutex_lock(&f->mu);
	d = f->slots[i].done;
	pthread_mutex_unlock(&f->mu);
	return d;
}

static struct disp_request *
mkreq(struct fx *f, const char *path, const char *topic, int slot)
{
	struct disp_request *r = disp_request_new();

	r->url = xasprintf("http://127.0.0.1:%d%s", tsrv_port(f->srv), path);
	r->tenant = xstrdup("acme");
	r->topic = xstrdup(topic);
	r->job_id = xasprintf("job-%d", slot);
	r->attempt = 1;
	r->body = xstrdup("{\"order\":42}");
	r->body_len = strlen(r->body);
	r->cookie = &f->slots[slot];
	/* No cmocka assert: this also runs on a dispatcher thread. */
	if (disp_request_set_secret(r, SECRET) == -1)
		abort();
	return r;
}

static void
start_disp(struct fx *f, int threads, int allow_private, size_t capture,
    int max_total)
{
	struct disp_config c;

	memset(&c, 0, sizeof(c));
	c.threads = threads;
	c.allow_private_targets = allow_private;
	c.capture_max = capture;
	c.max_total_in_flight = max_total;
	c.user_agent = "retryd-test/1";
	f->d = disp_new(&c, done_cb, f);
	assert_non_null(f->d);
}

static void
slot_clear(struct slot *s)
{
	free(s->excerpt);
	s->excerpt = NULL;
}

/* Submits one request to path and waits for its result in slot 0. */
static struct slot *
run_one(struct fx *f, const char *path, int64_t timeout_ms)
{
	struct disp_request *r = mkreq(f, path, "orders", 0);
	int n;

	pthread_mutex_lock(&f->mu);
	slot_clear(&f->slots[0]);
	memset(&f->slots[0], 0, sizeof(f->slots[0]));
	n = f->ndone + 1;
	pthread_mutex_unlock(&f->mu);
	if (timeout_ms > 0)
		r->timeout_ms = timeout_ms;
	assert_int_equal(disp_submit(f->d, r), 0);
	assert_int_equal(wait_ndone(f, n), 0);
	return &f->slots[0];
}

static int
setup(void **state)
{
	struct fx *f = xcalloc(1, sizeof(*f));
	pthread_condattr_t ca;

	pthread_mutex_init(&f->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&f->cv, &ca);
	pthread_condattr_destroy(&ca);
	f->srv = tsrv_start(handler, NULL);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;
	int i;

	tsrv_release(f->srv);
	disp_free(f->d);
	tsrv_stop(f->srv);
	for (i = 0; i < NSLOTS; i++)
		slot_clear(&f->slots[i]);
	pthread_cond_destroy(&f->cv);
	pthread_mutex_destroy(&f->mu);
	free(f);
	return 0;
}

/* --- outcomes ------------------------------------------------------- */

static void
test_ok(void **state)
{
	struct fx *f = *state;
	const struct tsrv_req *q;
	int64_t t0 = clock_wall_ms();
	struct slot *s;

	start_disp(f, 1, 1, 0, 0);
	log_set_level(LOG_LVL_DEBUG);	/* the per-attempt line, once */
	s = run_one(f, "/ok", 0);
	log_set_level(LOG_LVL_INFO);
	assert_int_equal(s->res.kind, SCHEDULE_OK);
	assert_int_equal(s->res.http_status, 200);
	assert_int_equal(s->res.handed_back, 0);
	assert_int_equal(s->res.retry_after_ms, -1);
	assert_true(s->res.started_ms >= t0);
	assert_true(s->res.latency_ms >= 0);
	assert_string_equal(s->res.error, "");
	assert_int_equal(s->res.body_excerpt_len, 5);
	assert_string_equal(s->excerpt, "hello");
	assert_ptr_equal(s->res.cookie, &f->slots[0]);
	q = tsrv_req(f->srv, 0);
	assert_non_null(q);
	assert_string_equal(q->method, "POST");
	assert_string_equal(q->path, "/ok");
	assert_int_equal(disp_inflight_total(f->d), 0);
}

struct status_row {
	const char	*path;
	enum schedule_outcome_kind kind;
	int		 status;
};

static const struct status_row status_rows[] = {
	{ "/status/200", SCHEDULE_OK, 200 },
	{ "/status/204", SCHEDULE_OK, 204 },
	{ "/status/299", SCHEDULE_OK, 299 },
	{ "/status/500", SCHEDULE_HTTP, 500 },
	{ "/status/410", SCHEDULE_HTTP, 410 },
	{ "/status/404", SCHEDULE_HTTP, 404 },
	{ "/status/400", SCHEDULE_HTTP, 400 },
	{ "/redirect", SCHEDULE_HTTP, 302 },	/* never followed */
	{ "/status/304", SCHEDULE_HTTP, 304 },
};

static void
test_statuses(void **state)
{
	struct fx *f = *state;
	struct slot *s;
	size_t i, n = sizeof(status_rows) / sizeof(status_rows[0]);

	start_disp(f, 1, 1, 0, 0);
	for (i = 0; i < n; i++) {
		s = run_one(f, status_rows[i].path, 0);
		if (s->res.kind != status_rows[i].kind ||
		    s->res.http_status != status_rows[i].status)
			fail_msg("%s: kind %s status %d", status_rows[i].path,
			    schedule_outcome_name(s->res.kind),
			    s->res.http_status);
		assert_int_equal(s->res.retry_after_ms, -1);
		slot_clear(s);
	}
	/* The redirect was not followed: one request per row, none to /ok. */
	assert_int_equal(tsrv_nreqs(f->srv), (int)n);
	for (i = 0; i < n; i++)
		assert_string_not_equal(tsrv_req(f->srv, (int)i)->path, "/ok");
}

static void
test_retry_after(void **state)
{
	struct fx *f = *state;
	struct slot *s;
	int64_t t0, t1;

	start_disp(f, 1, 1, 0, 0);
	t0 = clock_wall_ms();
	s = run_one(f, "/retry/secs", 0);
	t1 = clock_wall_ms();
	assert_int_equal(s->res.kind, SCHEDULE_HTTP);
	assert_int_equal(s->res.http_status, 429);
	assert_true(s->res.retry_after_ms >= t0 + 120000);
	assert_true(s->res.retry_after_ms <= t1 + 120000);

	s = run_one(f, "/retry/date", 0);
	assert_int_equal(s->res.http_status, 503);
	assert_int_equal(s->res.retry_after_ms, INT64_C(2139722880000));

	s = run_one(f, "/retry/bad", 0);
	assert_int_equal(s->res.http_status, 429);
	assert_int_equal(s->res.retry_after_ms, -1);

	/* Only 429 and 503 carry a Retry-After that counts. */
	s = run_one(f, "/retry/500", 0);
	assert_int_equal(s->res.http_status, 500);
	assert_int_equal(s->res.retry_after_ms, -1);
}

static void
test_timeout(void **state)
{
	struct fx *f = *state;
	struct slot *s;

	start_disp(f, 1, 1, 0, 0);
	s = run_one(f, "/hang", 300);
	assert_int_equal(s->res.kind, SCHEDULE_TIMEOUT);
	assert_int_equal(s->res.http_status, 0);
	assert_int_equal(s->res.handed_back, 0);
	assert_string_not_equal(s->res.error, "");
}

static void
test_connect_refused(void **state)
{
	struct fx *f = *state;
	struct disp_request *r;
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);
	int fd;

	/* A port that was free a moment ago and has no listener now. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &sl), 0);
	close(fd);

	start_disp(f, 1, 1, 0, 0);
	r = mkreq(f, "/", "orders", 0);
	free(r->url);
	r->url = xasprintf("http://127.0.0.1:%d/", ntohs(sin.sin_port));
	assert_int_equal(disp_submit(f->d, r), 0);
	assert_int_equal(wait_ndone(f, 1), 0);
	assert_int_equal(f->slots[0].res.kind, SCHEDULE_CONNECT);
	assert_string_not_equal(f->slots[0].res.error, "");
}

static void
test_dns(void **state)
{
	struct fx *f = *state;
	struct disp_request *r;

	start_disp(f, 1, 0, 0, 0);
	r = mkreq(f, "/", "orders", 0);
	free(r->url);
	r->url = xstrdup("http://no-such-host.invalid/hook");
	assert_int_equal(disp_submit(f->d, r), 0);
	assert_int_equal(wait_ndone(f, 1), 0);
	assert_int_equal(f->slots[0].res.kind, SCHEDULE_DNS);
}

static void
test_blocked(void **state)
{
	struct fx *f = *state;
	struct disp_request *r;
	struct slot *s;

	start_disp(f, 1, 0, 0, 0);
	s = run_one(f, "/ok", 0);
	assert_int_equal(s->res.kind, SCHEDULE_BLOCKED);
	assert_string_equal(s->res.error,
	    "target address refused: loopback 127.0.0.1");
	slot_clear(s);

	/* A name is judged by the address it resolves to. */
	r = mkreq(f, "/ok", "orders", 1);
	free(r->url);
	r->url = xasprintf("http://localhost:%d/ok", tsrv_port(f->srv));
	assert_int_equal(disp_submit(f->d, r), 0);
	assert_int_equal(wait_ndone(f, 2), 0);
	assert_int_equal(f->slots[1].res.kind, SCHEDULE_BLOCKED);
	assert_non_null(strstr(f->slots[1].res.error, "loopback"));
	assert_int_equal(tsrv_accepts(f->srv), 0);

	/* The same target is fine when private targets are allowed. */
	disp_free(f->d);
	start_disp(f, 1, 1, 0, 0);
	s = run_one(f, "/ok", 0);
	assert_int_equal(s->res.kind, SCHEDULE_OK);
	assert_int_equal(tsrv_accepts(f->srv), 1);
}

/* --- what goes over the wire ---------------------------------------- */

static void
test_signature_and_headers(void **state)
{
	struct fx *f = *state;
	const struct tsrv_req *q;
	struct disp_request *r;
	char want[3 + BASE64_ENCODED_LEN(SHA256_LEN)], host[64], *msg;
	uint8_t key[64], mac[SHA256_LEN];
	const char *v, *ts;
	int64_t t0, t1, sec;
	ssize_t klen;
	int n;

	start_disp(f, 1, 1, 0, 0);
	r = mkreq(f, "/ok", "orders", 0);
	r->attempt = 3;
	assert_int_equal(disp_request_add_header(r, "X-Custom", "yes"), 0);
	assert_int_equal(disp_request_add_header(r, "X-Empty", ""), 0);
	assert_int_equal(disp_request_add_header(r, "X-Dup", "topic"), 0);
	assert_int_equal(disp_request_add_header(r, "x-dup", "job"), 0);
	assert_int_equal(disp_request_add_header(r, "webhook-id", "evil"), 0);
	assert_int_equal(disp_request_add_header(r, "Webhook-Signature",
	    "v1,evil"), 0);
	assert_int_equal(disp_request_add_header(r, "webhook-timestamp",
	    "1"), 0);
	assert_int_equal(disp_request_add_header(r, "Retryd-Topic", "evil"),
	    0);
	assert_int_equal(disp_request_add_header(r, "retryd-attempt", "99"),
	    0);
	assert_int_equal(disp_request_add_header(r, "Content-Length", "1"), 0);
	assert_int_equal(disp_request_add_header(r, "Host", "evil.example"),
	    0);
	assert_int_equal(disp_request_add_header(r, "Expect", "100-continue"),
	    0);
	t0 = clock_wall_ms() / 1000;
	assert_int_equal(disp_submit(f->d, r), 0);
	assert_int_equal(wait_ndone(f, 1), 0);
	t1 = clock_wall_ms() / 1000;
	assert_int_equal(f->slots[0].res.kind, SCHEDULE_OK);
	q = tsrv_req(f->srv, 0);
	assert_non_null(q);

	v = tsrv_header(q, "webhook-id", &n);
	assert_int_equal(n, 1);
	assert_string_equal(v, "job-0");
	ts = tsrv_header(q, "webhook-timestamp", &n);
	assert_int_equal(n, 1);
	sec = strtoll(ts, NULL, 10);
	assert_true(sec >= t0 && sec <= t1);
	assert_string_equal(tsrv_header(q, "retryd-attempt", &n), "3");
	assert_int_equal(n, 1);
	assert_string_equal(tsrv_header(q, "retryd-topic", &n), "orders");
	assert_int_equal(n, 1);
	assert_string_equal(tsrv_header(q, "retryd-tenant", &n), "acme");
	assert_int_equal(n, 1);
	assert_string_equal(tsrv_header(q, "content-type", &n),
	    "application/json");
	assert_int_equal(n, 1);
	assert_string_equal(tsrv_header(q, "x-custom", NULL), "yes");
	assert_string_equal(tsrv_header(q, "x-empty", &n), "");
	assert_int_equal(n, 1);
	assert_string_equal(tsrv_header(q, "x-dup", &n), "job");
	assert_int_equal(n, 1);
	assert_string_equal(tsrv_header(q, "user-agent", NULL),
	    "retryd-test/1");
	snprintf(host, sizeof(host), "127.0.0.1:%d", tsrv_port(f->srv));
	assert_string_equal(tsrv_header(q, "host", &n), host);
	assert_int_equal(n, 1);
	assert_string_equal(tsrv_header(q, "content-length", &n), "12");
	assert_int_equal(n, 1);
	assert_null(tsrv_header(q, "expect", NULL));
	assert_int_equal(q->body_len, 12);

	/* Recompute the signature from what the server received. */
	klen = base64_decode(SECRET + 6, strlen(SECRET) - 6, key, sizeof(key));
	assert_true(klen > 0);
	msg = xasprintf("%s.%s.%.*s", tsrv_header(q, "webhook-id", NULL), ts,
	    (int)q->body_len, (const char *)q->body);
	hmac_sha256(key, (size_t)klen, msg, strlen(msg), mac);
	free(msg);
	memcpy(want, "v1,", 3);
	assert_true(base64_encode(mac, sizeof(mac), want + 3,
	    sizeof(want) - 3, 0) > 0);
	assert_string_equal(tsrv_header(q, "webhook-signature", &n), want);
	assert_int_equal(n, 1);
}

static void
test_content_type_and_unsigned(void **state)
{
	struct fx *f = *state;
	const struct tsrv_req *q;
	struct disp_request *r;
	int n;

	start_disp(f, 1, 1, 0, 0);
	r = mkreq(f, "/ok", "orders", 0);
	assert_int_equal(disp_request_add_header(r, "content-TYPE",
	    "text/plain; charset=utf-8"), 0);
	r->secret_len = 0;
	assert_int_equal(disp_submit(f->d, r), 0);
	assert_int_equal(wait_ndone(f, 1), 0);
	q = tsrv_req(f->srv, 0);
	assert_string_equal(tsrv_header(q, "content-type", &n),
	    "text/plain; charset=utf-8");
	assert_int_equal(n, 1);
	assert_null(tsrv_header(q, "webhook-signature", NULL));
}

static void
test_body_bytes(void **state)
{
	struct fx *f = *state;
	const size_t len = 200 * 1024;
	const struct tsrv_req *q;
	struct disp_request *r;
	size_t i;

	start_disp(f, 1, 1, 0, 0);
	r = mkreq(f, "/ok", "orders", 0);
	free(r->body);
	r->body = xmalloc(len);
	for (i = 0; i < len; i++)	/* every byte value, NUL and CR too */
		r->body[i] = (char)((i * 7) ^ (i >> 8));
	r->body_len = len;
	assert_int_equal(disp_submit(f->d, r), 0);

	r = mkreq(f, "/ok", "orders", 1);
	free(r->body);
	r->body = NULL;
	r->body_len = 0;
	assert_int_equal(disp_submit(f->d, r), 0);
	assert_int_equal(wait_ndone(f, 2), 0);
	assert_int_equal(f->slots[0].res.kind, SCHEDULE_OK);
	assert_int_equal(f->slots[1].res.kind, SCHEDULE_OK);
	assert_int_equal(tsrv_nreqs(f->srv), 2);
	/* They ran at once: find the big one. */
	q = tsrv_req(f->srv, 0);
	if (q->body_len == 0)
		q = tsrv_req(f->srv, 1);
	assert_int_equal(q->body_len, len);
	for (i = 0; i < len; i++)
		if (q->body[i] != (uint8_t)((i * 7) ^ (i >> 8)))
			fail_msg("body byte %zu differs", i);
	q = tsrv_req(f->srv, q == tsrv_req(f->srv, 0) ? 1 : 0);
	assert_int_equal(q->body_len, 0);
	assert_string_equal(tsrv_header(q, "content-length", NULL), "0");
}

static void
test_excerpt_cap(void **state)
{
	struct fx *f = *state;
	struct slot *s;

	memset(big_body, 'B', sizeof(big_body));
	start_disp(f, 1, 1, 16, 0);
	s = run_one(f, "/body100", 0);
	assert_int_equal(s->res.kind, SCHEDULE_OK);
	assert_int_equal(s->res.body_excerpt_len, 16);
	assert_memory_equal(s->excerpt, hundred, 16);
	assert_int_equal(s->excerpt[16], '\0');
	assert_string_equal(s->res.error, "");
	slot_clear(s);

	/* A huge body: the status counts, reading stops, nothing hangs. */
	s = run_one(f, "/big", 0);
	assert_int_equal(s->res.kind, SCHEDULE_OK);
	assert_int_equal(s->res.http_status, 200);
	assert_int_equal(s->res.body_excerpt_len, 16);
	assert_memory_equal(s->excerpt, "BBBBBBBBBBBBBBBB", 16);
	assert_non_null(strstr(s->res.error, "not read"));
}

static void
test_header_cap(void **state)
{
	struct fx *f = *state;
	struct slot *s;
	size_t i, n = 0;

	/* 80 lines of 1000 bytes: over the 64 KiB cap, each line short. */
	for (i = 0; i < 80; i++) {
		n += (size_t)snprintf(big_headers + n, sizeof(big_headers) - n,
		    "X-Pad-%02zu: ", i);
		memset(big_headers + n, 'p', 986);
		n += 986;
		memcpy(big_headers + n, "\r\n", 2);
		n += 2;
	}
	big_headers[n] = '\0';
	start_disp(f, 1, 1, 0, 0);
	s = run_one(f, "/bigheaders", 0);
	assert_int_equal(s->res.kind, SCHEDULE_ERROR);
	assert_non_null(strstr(s->res.error, "headers longer"));
}

static void
test_bad_header_not_sent(void **state)
{
	struct fx *f = *state;
	struct disp_request *r;

	start_disp(f, 1, 1, 0, 0);
	r = mkreq(f, "/ok", "orders", 0);
	/* Filled by hand, past disp_request_add_header's check. */
	r->headers = xcalloc(1, sizeof(*r->headers));
	r->headers[0].name = xstrdup("X-Bad");
	r->headers[0].value = xstrdup("a\r\nX-Evil: 1");
	r->nheaders = 1;
	assert_int_equal(disp_submit(f->d, r), 0);
	assert_int_equal(wait_ndone(f, 1), 0);
	assert_int_equal(f->slots[0].res.kind, SCHEDULE_ERROR);
	assert_int_equal(f->slots[0].res.handed_back, 0);
	assert_non_null(strstr(f->slots[0].res.error, "X-Bad"));
	assert_int_equal(tsrv_accepts(f->srv), 0);
}

/* --- concurrency ---------------------------------------------------- */

/* One thread; a request to /ok, then one to path: the second's result. */
static struct slot *
after_ok(struct fx *f, const char *path)
{
	struct slot *s;

	start_disp(f, 1, 1, 0, 0);
	s = run_one(f, "/ok", 0);
	assert_int_equal(s->res.kind, SCHEDULE_OK);
	slot_clear(s);
	return run_one(f, path, 0);
}

static void
test_keepalive(void **state)
{
	struct fx *f = *state;
	struct slot *s;

	s = after_ok(f, "/status/500");
	assert_int_equal(s->res.kind, SCHEDULE_HTTP);
	assert_int_equal(tsrv_nreqs(f->srv), 2);
	assert_int_equal(tsrv_accepts(f->srv), 1);
	assert_int_equal(tsrv_req(f->srv, 1)->conn, 1);
}

/*
 * A kept-alive connection that ends without an answer after the request
 * was read: one attempt, one request.  libcurl would send the POST again
 * on a new connection; the receiver may have acted on the first.
 */
static void
test_no_resend(void **state)
{
	struct fx *f = *state;
	struct slot *s;

	s = after_ok(f, "/drop");
	assert_int_equal(s->res.kind, SCHEDULE_CONNECT);
	assert_int_equal(s->res.http_status, 0);
	assert_non_null(strstr(s->res.error, "not sent again"));
	assert_int_equal(tsrv_nreqs(f->srv), 2);
	assert_int_equal(tsrv_req(f->srv, 1)->conn, 1);
	slot_clear(s);
	/* A fresh connection that ends so: the same, and nothing resent. */
	s = run_one(f, "/drop", 0);
	assert_int_equal(s->res.kind, SCHEDULE_CONNECT);
	assert_int_equal(tsrv_nreqs(f->srv), 3);
}

/*
 * One topic's requests go to the loops in turn, so a burst of one topic
 * uses every thread: one after another, four requests of one topic over
 * two loops come on two connections (one per loop, not one for the topic),
 * each kept alive for its loop's next.
 */
static void
test_loops_take_turns(void **state)
{
	struct fx *f = *state;
	struct slot *s;
	int i;

	start_disp(f, 2, 1, 0, 0);
	for (i = 0; i < 4; i++) {
		s = run_one(f, "/ok", 0);
		assert_int_equal(s->res.kind, SCHEDULE_OK);
		slot_clear(s);
	}
	assert_int_equal(tsrv_nreqs(f->srv), 4);
	assert_int_equal(tsrv_accepts(f->srv), 2);
	for (i = 0; i < 4; i++)
		assert_int_equal(tsrv_req(f->srv, i)->conn, 1 + i % 2);
}

static void
count_topic(const char *tenant, const char *topic, int n, void *arg)
{
	int *seen = arg;

	assert_string_equal(tenant, "acme");
	assert_string_equal(topic, "slow");
	assert_int_equal(n, 1);
	(*seen)++;
}

static void
count_any(const char *tenant, const char *topic, int n, void *arg)
{
	int *seen = arg;

	assert_true(topic[0] != '\0');
	assert_int_equal(n, 1);
	(void)tenant;
	(*seen)++;
}

static void
no_hol(struct fx *f, int threads)
{
	const int nfast = 200;
	int i, seen = 0;

	start_disp(f, threads, 1, 0, 0);
	assert_int_equal(disp_submit(f->d, mkreq(f, "/hang", "slow", 0)), 0);
	assert_int_equal(tsrv_wait_reqs(f->srv, 1, WAIT_MS), 0);
	for (i = 1; i <= nfast; i++)
		assert_int_equal(disp_submit(f->d,
		    mkreq(f, "/ok", "fast", i)), 0);
	assert_int_equal(wait_ndone(f, nfast), 0);
	/* Every fast one finished while the slow one was still open. */
	assert_int_equal(slot_done(f, 0), 0);
	for (i = 1; i <= nfast; i++)
		assert_int_equal(f->slots[i].res.kind, SCHEDULE_OK);
	assert_int_equal(disp_inflight(f->d, "acme", "slow"), 1);
	assert_int_equal(disp_inflight(f->d, "acme", "fast"), 0);
	assert_int_equal(disp_inflight(f->d, "other", "slow"), 0);
	assert_int_equal(disp_inflight_total(f->d), 1);
	disp_inflight_foreach(f->d, count_topic, &seen);
	assert_int_equal(seen, 1);

	tsrv_release(f->srv);
	assert_int_equal(wait_ndone(f, nfast + 1), 0);
	assert_int_equal(f->slots[0].res.kind, SCHEDULE_OK);
	assert_int_equal(f->slots[0].order, nfast + 1);
	assert_string_equal(f->slots[0].excerpt, "late");
	assert_int_equal(disp_inflight_total(f->d), 0);
}

/*
 * No cap on connections to one host below what the dispatcher lets run:
 * 300 callbacks to one receiver that holds them all get 300 connections at
 * once.  Past libcurl's per-host cap they would wait inside it, their
 * timeouts running, and one tenant's slow receiver would hold back
 * another's callbacks to the same host.
 */
static void
test_no_host_cap(void **state)
{
	struct fx *f = *state;
	const int n = 300;
	int i;

	start_disp(f, 1, 1, 0, 0);
	for (i = 0; i < n; i++)
		assert_int_equal(disp_submit(f->d,
		    mkreq(f, "/hang", i % 2 ? "slow" : "other", i)), 0);
	assert_int_equal(tsrv_wait_reqs(f->srv, n, WAIT_MS), 0);
	assert_int_equal(tsrv_accepts(f->srv), n);
	tsrv_release(f->srv);
	assert_int_equal(wait_ndone(f, n), 0);
	for (i = 0; i < n; i++)
		assert_int_equal(f->slots[i].res.kind, SCHEDULE_OK);
}

static void
test_no_hol_1(void **state)
{
	no_hol(*state, 1);
}

static void
test_no_hol_4(void **state)
{
	no_hol(*state, 4);
}

static void
test_submit_from_done(void **state)
{
	struct fx *f = *state;
	int i;

	start_disp(f, 2, 1, 0, 0);
	pthread_mutex_lock(&f->mu);
	f->chain_left = 5;
	pthread_mutex_unlock(&f->mu);
	assert_int_equal(disp_submit(f->d, mkreq(f, "/ok", "chain", 0)), 0);
	assert_int_equal(wait_ndone(f, 6), 0);
	for (i = 0; i < 6; i++) {
		assert_int_equal(f->slots[i].res.kind, SCHEDULE_OK);
		assert_int_equal(f->slots[i].order, i + 1);
	}
	assert_int_equal(f->errors, 0);
	/* The loops take turns: one kept-alive connection each. */
	assert_int_equal(tsrv_accepts(f->srv), 2);
}

static void
test_submit_refusals(void **state)
{
	struct fx *f = *state;
	struct disp_request *r;

	start_disp(f, 1, 1, 0, 2);
	r = mkreq(f, "/ok", "orders", 9);
	free(r->job_id);
	r->job_id = NULL;
	errno = 0;
	assert_int_equal(disp_submit(f->d, r), -1);
	assert_int_equal(errno, EINVAL);
	r->job_id = xstrdup("job-9");
	r->attempt = 0;
	assert_int_equal(disp_submit(f->d, r), -1);
	assert_int_equal(errno, EINVAL);
	r->attempt = 1;
	assert_int_equal(disp_submit(NULL, r), -1);

	/* max_total_in_flight = 2 */
	assert_int_equal(disp_submit(f->d, mkreq(f, "/hang", "a", 0)), 0);
	assert_int_equal(disp_submit(f->d, mkreq(f, "/hang", "b", 1)), 0);
	errno = 0;
	assert_int_equal(disp_submit(f->d, r), -1);
	assert_int_equal(errno, EAGAIN);
	assert_int_equal(disp_inflight_total(f->d), 2);
	tsrv_release(f->srv);
	assert_int_equal(wait_ndone(f, 2), 0);
	assert_int_equal(disp_submit(f->d, r), 0);	/* room again */
	assert_int_equal(wait_ndone(f, 3), 0);
	assert_int_equal(f->slots[9].res.kind, SCHEDULE_OK);
}

/* A request of another tenant than mkreq's "acme". */
static struct disp_request *
mkreq_of(struct fx *f, const char *tenant, const char *path,
    const char *topic, int slot)
{
	struct disp_request *r = mkreq(f, path, topic, slot);

	free(r->tenant);
	r->tenant = xstrdup(tenant);
	return r;
}

static void
test_tenant_cap(void **state)
{
	struct fx *f = *state;
	struct disp_config c;
	struct disp_request *r;
	int seen = 0;

	memset(&c, 0, sizeof(c));
	c.allow_private_targets = 1;
	c.max_total_in_flight = 4;
	c.max_tenant_in_flight = 2;
	f->d = disp_new(&c, done_cb, f);
	assert_non_null(f->d);
	assert_int_equal(disp_topic_room(f->d, "acme", "slow", 10), 2);

	/* acme's two topics together reach its cap; its third waits. */
	assert_int_equal(disp_submit(f->d, mkreq(f, "/hang", "slow", 0)), 0);
	assert_int_equal(disp_submit(f->d, mkreq(f, "/hang", "other", 1)), 0);
	assert_int_equal(disp_inflight_tenant(f->d, "acme"), 2);
	assert_int_equal(disp_topic_room(f->d, "acme", "fast", 10), 0);
	assert_int_equal(disp_tenant_room(f->d, "acme"), 0);
	r = mkreq(f, "/ok", "fast", 2);
	errno = 0;
	assert_int_equal(disp_submit(f->d, r), -1);
	assert_int_equal(errno, EAGAIN);
	assert_int_equal(disp_inflight(f->d, "acme", "fast"), 0);
	assert_int_equal(disp_inflight_tenant(f->d, "acme"), 2);

	/* Another tenant has the rest of the total, and no more. */
	assert_int_equal(disp_topic_room(f->d, "zeta", "fast", 10), 2);
	assert_int_equal(disp_topic_room(f->d, "zeta", "fast", 1), 1);
	assert_int_equal(disp_tenant_room(f->d, "zeta"), 2);
	assert_int_equal(disp_submit(f->d, mkreq_of(f, "zeta", "/ok", "fast",
	    3)), 0);
	assert_int_equal(wait_ndone(f, 1), 0);
	assert_int_equal(f->slots[3].res.kind, SCHEDULE_OK);
	assert_int_equal(slot_done(f, 0) + slot_done(f, 1), 0);
	assert_int_equal(disp_inflight_tenant(f->d, "zeta"), 0);

	/* The tenants' own counts are not topics. */
	disp_inflight_foreach(f->d, count_any, &seen);
	assert_int_equal(seen, 2);
	assert_int_equal(disp_inflight_total(f->d), 2);

	/* An empty topic would be the tenant's own count: refused. */
	free(r->topic);
	r->topic = xstrdup("");
	errno = 0;
	assert_int_equal(disp_submit(f->d, r), -1);
	assert_int_equal(errno, EINVAL);
	free(r->topic);
	r->topic = xstrdup("fast");

	tsrv_release(f->srv);
	assert_int_equal(wait_ndone(f, 3), 0);
	assert_int_equal(disp_inflight_tenant(f->d, "acme"), 0);
	assert_int_equal(disp_topic_room(f->d, "acme", "fast", 10), 2);
	assert_int_equal(disp_submit(f->d, r), 0);	/* room again */
	assert_int_equal(wait_ndone(f, 4), 0);
	assert_int_equal(f->slots[2].res.kind, SCHEDULE_OK);
}

/*
 * The room arithmetic on the counts alone: a topic's room is the least of
 * its cap, its tenant's and the total's, less what each counts.
 */
static void
test_counts_room(void **state)
{
	static const struct {
		int	 max_topic, max_tenant, max_total, want;
	} rows[] = {
		/* counts: acme/a 3, acme/b 2, zeta/a 1: acme 5, total 6 */
		{ 10,  0,  0, 7 },	/* the topic's cap alone */
		{  3,  0,  0, 0 },	/* the topic at its cap */
		{  2,  0,  0, 0 },	/* over it (lowered): 0, not < 0 */
		{ 10,  8,  0, 3 },	/* the tenant's cap binds */
		{ 10,  5,  0, 0 },	/* the tenant at its cap */
		{ 10,  8,  7, 1 },	/* the total binds */
		{ 10,  0,  6, 0 },	/* the total at its cap */
		{  4,  8, 20, 1 },	/* the topic binds again */
		{  0,  0,  0, INT_MAX },	/* no cap at all */
	};
	struct disp_counts c;
	size_t i;

	(void)state;
	disp_counts_init(&c);
	for (i = 0; i < 3; i++)
		assert_int_equal(disp_counts_add(&c, "acme", "a", 0, 0), 0);
	assert_int_equal(disp_counts_add(&c, "acme", "b", 0, 0), 0);
	assert_int_equal(disp_counts_add(&c, "acme", "b", 0, 0), 0);
	assert_int_equal(disp_counts_add(&c, "zeta", "a", 0, 0), 0);
	assert_int_equal(disp_counts_get(&c, "acme", ""), 5);
	assert_int_equal(disp_counts_get(&c, "zeta", ""), 1);
	assert_int_equal(disp_counts_total(&c), 6);
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		assert_int_equal(disp_counts_room(&c, "acme", "a",
		    rows[i].max_topic, rows[i].max_tenant, rows[i].max_total),
		    rows[i].want);
	/* zeta's topic "a" is not acme's. */
	assert_int_equal(disp_counts_room(&c, "zeta", "a", 10, 8, 0), 7);

	/* A refused add counts nothing. */
	errno = 0;
	assert_int_equal(disp_counts_add(&c, "acme", "c", 0, 5), -1);
	assert_int_equal(errno, EAGAIN);
	assert_int_equal(disp_counts_add(&c, "zeta", "c", 6, 0), -1);
	assert_int_equal(disp_counts_get(&c, "acme", "c"), 0);
	assert_int_equal(disp_counts_get(&c, "acme", ""), 5);
	assert_int_equal(disp_counts_total(&c), 6);
	/* 1: this one filled zeta's cap of 2 (reported once). */
	assert_int_equal(disp_counts_add(&c, "zeta", "c", 7, 2), 1);
	assert_int_equal(disp_counts_add(&c, "zeta", "c", 8, 2), -1);

	/* Deleting the last of a tenant's requests removes its count. */
	disp_counts_del(&c, "zeta", "a");
	disp_counts_del(&c, "zeta", "c");
	disp_counts_del(&c, "zeta", "c");	/* not there: no change */
	assert_int_equal(disp_counts_get(&c, "zeta", ""), 0);
	assert_int_equal(disp_counts_total(&c), 5);
	disp_counts_destroy(&c);
}

static void
tenant_row(const char *tenant, int n, void *arg)
{
	int *seen = arg;

	if (strcmp(tenant, "acme") == 0)
		seen[0] += n;
	else if (strcmp(tenant, "zeta") == 0)
		seen[1] += n;
	else
		seen[2]++;
}

/*
 * A tenant reaching its cap: disp_counts_add() says so (1) when a request
 * fills the cap and the tenant was not reported within warn_every_us, so
 * a tenant that stays at its cap (a request ends, another takes its place)
 * is reported once, until the interval passes or its count was 0.
 */
static void
test_counts_cap_reached(void **state)
{
	struct disp_counts c;
	int seen[3] = { 0, 0, 0 };

	(void)state;
	disp_counts_init(&c);
	assert_int_equal(disp_counts_add(&c, "acme", "a", 0, 3), 0);
	assert_int_equal(disp_counts_add(&c, "acme", "b", 0, 3), 0);
	assert_int_equal(disp_counts_add(&c, "zeta", "a", 0, 3), 0);
	assert_int_equal(disp_counts_add(&c, "acme", "a", 0, 3), 1);
	assert_int_equal(disp_counts_add(&c, "acme", "a", 0, 3), -1);
	/* At the cap again within the interval: not reported again. */
	disp_counts_del(&c, "acme", "b");
	assert_int_equal(disp_counts_add(&c, "acme", "b", 0, 3), 0);
	/* The tenants' own counts, not their topics'. */
	disp_counts_foreach_tenant(&c, tenant_row, seen);
	assert_int_equal(seen[0], 3);
	assert_int_equal(seen[1], 1);
	assert_int_equal(seen[2], 0);
	/* Past the interval (none here): reported again. */
	c.warn_every_us = 0;
	disp_counts_del(&c, "acme", "b");
	assert_int_equal(disp_counts_add(&c, "acme", "b", 0, 3), 1);
	/* Having had nothing in flight, a tenant is reported afresh. */
	c.warn_every_us = DISP_CAP_WARN_US;
	disp_counts_del(&c, "acme", "a");
	disp_counts_del(&c, "acme", "a");
	disp_counts_del(&c, "acme", "b");
	assert_int_equal(disp_counts_get(&c, "acme", ""), 0);
	assert_int_equal(disp_counts_add(&c, "acme", "a", 0, 2), 0);
	assert_int_equal(disp_counts_add(&c, "acme", "a", 0, 2), 1);
	/* No cap, no report; a larger cap is not reached. */
	assert_int_equal(disp_counts_add(&c, "zeta", "a", 0, 0), 0);
	assert_int_equal(disp_counts_add(&c, "zeta", "a", 0, 9), 0);
	disp_counts_destroy(&c);
}

static void
cap_row(const char *tenant, int cap, void *arg)
{
	int *seen = arg;

	if (strcmp(tenant, "acme") == 0)
		seen[0] = cap;
	else
		seen[1]++;
}

/*
 * A tenant's own cap (its max_in_flight) replaces max_tenant for it alone,
 * in the add and in the room, and its entry stays while the cap does.
 */
static void
test_counts_own_cap(void **state)
{
	static const struct {
		int	 own, max_tenant, max_total, want;
	} force[] = {
		{ 0, 9, 10, 9 },	/* none: the instance's */
		{ -1, 9, 10, 9 },
		{ 2, 9, 10, 2 },	/* smaller */
		{ 10, 9, 10, 10 },	/* larger: up to the total */
		{ 50, 9, 10, 10 },	/* past the total: the total */
		{ 50, 0, 0, 50 },	/* no total: its own */
		{ 0, 0, 0, 0 },		/* no cap at all */
		{ 3, 0, 10, 3 },
	};
	struct disp_counts c;
	int seen[2] = { 0, 0 };
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(force) / sizeof(force[0]); i++)
		assert_int_equal(disp_cap_in_force(force[i].own,
		    force[i].max_tenant, force[i].max_total), force[i].want);

	disp_counts_init(&c);
	disp_counts_set_cap(&c, "acme", 2);
	assert_int_equal(disp_counts_cap(&c, "acme", 4, 10), 2);
	assert_int_equal(disp_counts_cap(&c, "zeta", 4, 10), 4);
	assert_int_equal(disp_counts_room(&c, "acme", "a", 0, 4, 10), 2);
	assert_int_equal(disp_counts_add(&c, "acme", "a", 10, 4), 0);
	assert_int_equal(disp_counts_add(&c, "acme", "b", 10, 4), 1);
	errno = 0;
	assert_int_equal(disp_counts_add(&c, "acme", "a", 10, 4), -1);
	assert_int_equal(errno, EAGAIN);
	assert_int_equal(disp_counts_room(&c, "acme", "c", 0, 4, 10), 0);
	/* Another tenant keeps the instance's cap. */
	assert_int_equal(disp_counts_room(&c, "zeta", "a", 0, 4, 10), 4);
	for (i = 0; i < 3; i++)
		assert_int_equal(disp_counts_add(&c, "zeta", "a", 10, 4), 0);
	assert_int_equal(disp_counts_add(&c, "zeta", "a", 10, 4), 1);
	assert_int_equal(disp_counts_add(&c, "zeta", "a", 10, 4), -1);
	/* At 0 the entry stays with its cap, not listed as in flight. */
	disp_counts_del(&c, "acme", "a");
	disp_counts_del(&c, "acme", "b");
	disp_counts_del(&c, "acme", "b");	/* not there: no change */
	assert_int_equal(disp_counts_get(&c, "acme", ""), 0);
	assert_int_equal(disp_counts_total(&c), 4);
	disp_counts_foreach_tenant(&c, tenant_row, seen);
	assert_int_equal(seen[0], 0);
	seen[0] = seen[1] = 0;
	disp_counts_foreach_cap(&c, 10, cap_row, seen);
	assert_int_equal(seen[0], 2);
	assert_int_equal(seen[1], 0);
	assert_int_equal(disp_counts_cap(&c, "acme", 4, 10), 2);
	/* Reported afresh, having had nothing in flight. */
	assert_int_equal(disp_counts_add(&c, "acme", "a", 10, 4), 0);
	assert_int_equal(disp_counts_add(&c, "acme", "a", 10, 4), 1);
	/* Larger than the instance's: up to the total's room. */
	disp_counts_set_cap(&c, "acme", 20);
	assert_int_equal(disp_counts_cap(&c, "acme", 4, 10), 10);
	assert_int_equal(disp_counts_room(&c, "acme", "a", 0, 4, 10), 4);
	seen[0] = 0;
	disp_counts_foreach_cap(&c, 10, cap_row, seen);
	assert_int_equal(seen[0], 10);
	/* Cleared: the instance's again; at 0 the entry goes. */
	disp_counts_set_cap(&c, "acme", 0);
	assert_int_equal(disp_counts_cap(&c, "acme", 4, 10), 4);
	disp_counts_del(&c, "acme", "a");
	disp_counts_del(&c, "acme", "a");
	seen[0] = seen[1] = 0;
	disp_counts_foreach_cap(&c, 10, cap_row, seen);
	assert_int_equal(seen[0] + seen[1], 0);
	disp_counts_set_cap(&c, "gone", 0);	/* none made */
	disp_counts_set_cap(&c, "gone", 3);
	disp_counts_set_cap(&c, "gone", 0);
	assert_int_equal(c.nitems, 2);		/* zeta's and its topic's */
	disp_counts_destroy(&c);
}

static void
test_room_and_default_cap(void **state)
{
	static const struct {
		int	 cap, n, want;
	} room[] = {
		{ 10, 0, 10 }, { 10, 9, 1 }, { 10, 10, 0 }, { 10, 12, 0 },
		{ 0, 5, INT_MAX }, { -1, 0, INT_MAX },
	};
	static const struct {
		int	 total, want;
	} cap[] = {
		{ 10000, 9000 },	/* the daemon's default */
		{ 10, 9 },
		{ 19, 18 },		/* a tenth rounds down... */
		{ 9, 8 },		/* ...but keeps at least 1 */
		{ 2, 1 },
		{ 1, 1 },		/* nothing to keep back */
		{ 0, 0 },		/* no total: no tenant cap */
		{ -3, 0 },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(room) / sizeof(room[0]); i++)
		assert_int_equal(disp_room(room[i].cap, room[i].n),
		    room[i].want);
	for (i = 0; i < sizeof(cap) / sizeof(cap[0]); i++)
		assert_int_equal(disp_tenant_cap_default(cap[i].total),
		    cap[i].want);
}

/* --- drain ---------------------------------------------------------- */

static void
test_drain_hands_back(void **state)
{
	struct fx *f = *state;
	struct disp_request *r;
	int i;

	start_disp(f, 2, 1, 0, 0);
	for (i = 0; i < 3; i++)
		assert_int_equal(disp_submit(f->d, mkreq(f, "/hang",
		    i == 1 ? "other" : "orders", i)), 0);
	assert_int_equal(tsrv_wait_reqs(f->srv, 3, WAIT_MS), 0);
	disp_drain(f->d, 100);
	/* drain returns after every done(): no waiting needed. */
	assert_int_equal(f->ndone, 3);
	for (i = 0; i < 3; i++) {
		assert_int_equal(f->slots[i].res.handed_back, 1);
		assert_int_equal(f->slots[i].res.kind, SCHEDULE_ERROR);
		assert_true(f->slots[i].res.started_ms > 0);
	}
	assert_int_equal(disp_inflight_total(f->d), 0);

	r = mkreq(f, "/ok", "orders", 5);
	errno = 0;
	assert_int_equal(disp_submit(f->d, r), -1);
	assert_int_equal(errno, ESHUTDOWN);
	disp_request_free(r);		/* still ours */
	disp_drain(f->d, 100);		/* idempotent */
}

static void
test_drain_finishes_work(void **state)
{
	struct fx *f = *state;
	int i;

	start_disp(f, 1, 1, 0, 0);
	for (i = 0; i < 3; i++)
		assert_int_equal(disp_submit(f->d, mkreq(f, "/ok", "orders",
		    i)), 0);
	disp_drain(f->d, WAIT_MS);
	assert_int_equal(f->ndone, 3);
	for (i = 0; i < 3; i++) {
		assert_int_equal(f->slots[i].res.handed_back, 0);
		assert_int_equal(f->slots[i].res.kind, SCHEDULE_OK);
	}
}

static void
test_free_without_drain(void **state)
{
	struct fx *f = *state;

	start_disp(f, 1, 1, 0, 0);
	assert_int_equal(disp_submit(f->d, mkreq(f, "/hang", "orders", 0)),
	    0);
	assert_int_equal(tsrv_wait_reqs(f->srv, 1, WAIT_MS), 0);
	disp_free(f->d);
	f->d = NULL;
	assert_int_equal(f->ndone, 1);
	assert_int_equal(f->slots[0].res.handed_back, 1);
}

/*
 * libcurl's timer: one row per call, in order, on one struct disp_timer.
 * A syscall only when the deadline moves earlier or the timer goes away;
 * "run now" is a flag.
 */
static void
test_timer_plan(void **state)
{
	static const struct {
		int64_t	 now_ms;
		long	 timeout_ms;
		enum disp_timer_act act;
		int64_t	 arm_ms;
		int	 armed, now;	/* after the call */
		int64_t	 armed_ms;
	} rows[] = {
		{ 1000, -1, DISP_TIMER_KEEP, 0, 0, 0, 0 },	/* idle */
		{ 1000, 0, DISP_TIMER_KEEP, 0, 0, 1, 0 },	/* add_handle */
		{ 1000, 10000, DISP_TIMER_ARM, 10000, 1, 0, 11000 },
		{ 1001, 0, DISP_TIMER_KEEP, 0, 1, 1, 11000 },
		{ 1001, 10000, DISP_TIMER_KEEP, 0, 1, 0, 11000 }, /* later */
		{ 1002, 9998, DISP_TIMER_KEEP, 0, 1, 0, 11000 },  /* same */
		{ 1003, 200, DISP_TIMER_ARM, 200, 1, 0, 1203 },   /* earlier */
		{ 1004, -1, DISP_TIMER_DISARM, 0, 0, 0, 1203 },   /* none */
		{ 1005, -1, DISP_TIMER_KEEP, 0, 0, 0, 1203 },
		{ 1006, 0, DISP_TIMER_KEEP, 0, 0, 1, 1203 },
		{ 1006, -1, DISP_TIMER_KEEP, 0, 0, 0, 1203 },	/* now off */
		{ 1007, 50, DISP_TIMER_ARM, 50, 1, 0, 1057 },
	};
	struct disp_timer t;
	int64_t ms;
	size_t i;

	(void)state;
	memset(&t, 0, sizeof(t));
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		ms = -7;
		assert_int_equal(disp_timer_plan(&t, rows[i].now_ms,
		    rows[i].timeout_ms, &ms), rows[i].act);
		assert_int_equal(ms, rows[i].arm_ms);
		assert_int_equal(t.armed, rows[i].armed);
		assert_int_equal(t.now, rows[i].now);
		if (t.armed)
			assert_int_equal(t.armed_ms, rows[i].armed_ms);
	}
	/* After it fired the loop clears armed: the next deadline arms. */
	t.armed = 0;
	assert_int_equal(disp_timer_plan(&t, 1100, 10000, &ms),
	    DISP_TIMER_ARM);
	assert_int_equal(ms, 10000);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_ok),
		T(test_statuses),
		T(test_retry_after),
		T(test_timeout),
		T(test_connect_refused),
		T(test_dns),
		T(test_blocked),
		T(test_signature_and_headers),
		T(test_content_type_and_unsigned),
		T(test_body_bytes),
		T(test_excerpt_cap),
		T(test_header_cap),
		T(test_bad_header_not_sent),
		T(test_keepalive),
		T(test_no_resend),
		T(test_loops_take_turns),
		T(test_no_hol_1),
		T(test_no_hol_4),
		T(test_no_host_cap),
		T(test_submit_from_done),
		T(test_submit_refusals),
		T(test_tenant_cap),
		cmocka_unit_test(test_counts_room),
		cmocka_unit_test(test_counts_cap_reached),
		cmocka_unit_test(test_counts_own_cap),
		cmocka_unit_test(test_room_and_default_cap),
		T(test_drain_hands_back),
		T(test_drain_finishes_work),
		T(test_free_without_drain),
		cmocka_unit_test(test_timer_plan),
	};

	return cmocka_run_group_tests_name("dispatcher", tests, NULL, NULL);
}
