/*
 * disp.c - the dispatcher's lifecycle: start the loops, accept work, count
 * it, drain, stop.
 *
 * Key decision: requests go to the loops in turn, so a burst of one topic
 * (one receiver) uses every thread; each loop keeps its own keep-alive
 * connections to the receiver.  No topic
 * can block another inside a loop either: every transfer is independent in
 * the multi handle.  Two counts are kept: the per-topic in-flight counts the
 * scheduler reads (a request leaves them just before its done() runs, so
 * done() may refill the topic at once), and "outstanding", which drops only
 * after done() has returned and is what disp_drain() waits for.
 *
 * Lock order: none is needed.  d->lock, the counts' lock and each loop's lock
 * are never held together, and no lock is held while done() runs.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatcher/disp_int.h"
#include "util/log.h"
#include "util/xmalloc.h"

#ifndef PACKAGE_VERSION
#define PACKAGE_VERSION	"0"
#endif

static int	disp_curl_users;
static pthread_mutex_t disp_curl_lock = PTHREAD_MUTEX_INITIALIZER;

static int
curl_ref(void)
{
	int ret = 0;

	pthread_mutex_lock(&disp_curl_lock);
	if (disp_curl_users == 0 &&
	    curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		ret = -1;
	else
		disp_curl_users++;
	pthread_mutex_unlock(&disp_curl_lock);
	return ret;
}

static void
curl_unref(void)
{
	pthread_mutex_lock(&disp_curl_lock);
	if (--disp_curl_users == 0)
		curl_global_cleanup();
	pthread_mutex_unlock(&disp_curl_lock);
}

static void
outstanding_dec(struct dispatcher *d)
{
	pthread_mutex_lock(&d->lock);
	if (--d->outstanding == 0)
		pthread_cond_broadcast(&d->idle);
	pthread_mutex_unlock(&d->lock);
}

struct dispatcher *
disp_new(const struct disp_config *cfg,
    void (*done)(struct disp_result *res, void *arg), void *arg)
{
	const curl_version_info_data *vi;
	sigset_t all, old;
	struct dispatcher *d;
	int i, e;

	if (done == NULL) {
		errno = EINVAL;
		return NULL;
	}
	if (curl_ref() == -1) {
		log_warnx("dispatcher: curl_global_init failed");
		errno = EIO;
		return NULL;
	}
	d = xcalloc(1, sizeof(*d));
	if (cfg != NULL)
		d->cfg = *cfg;
	if (d->cfg.threads <= 0)
		d->cfg.threads = 1;
	if (d->cfg.capture_max == 0)
		d->cfg.capture_max = DISP_CAPTURE_DEFAULT;
	if (d->cfg.max_total_in_flight < 0)
		d->cfg.max_total_in_flight = 0;
	if (d->cfg.max_tenant_in_flight < 0)
		d->cfg.max_tenant_in_flight = 0;
	d->ua = d->cfg.user_agent != NULL ? xstrdup(d->cfg.user_agent) :
	    xstrdup("retryd/" PACKAGE_VERSION);
	d->cfg.user_agent = d->ua;
	d->done = done;
	d->arg = arg;
	disp_counts_init(&d->counts);
	pthread_mutex_init(&d->lock, NULL);
	pthread_cond_init(&d->idle, NULL);

	vi = curl_version_info(CURLVERSION_NOW);
	if (!(vi->features & CURL_VERSION_ASYNCHDNS))
		log_warnx("dispatcher: libcurl %s resolves names "
		    "synchronously; a slow DNS server will stall callbacks",
		    vi->version);

	d->loops = xcalloc((size_t)d->cfg.threads, sizeof(*d->loops));
	for (i = 0; i < d->cfg.threads; i++) {
		d->nloops++;
		if (disp_loop_init(&d->loops[i], d, i) == -1)
			goto fail;
	}
	/* The loops take no signals: those are the main thread's. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (i = 0; i < d->nloops; i++) {
		char name[16];

		if ((e = pthread_create(&d->loops[i].thread, NULL,
		    disp_loop_main, &d->loops[i])) != 0) {
			pthread_sigmask(SIG_SETMASK, &old, NULL);
			errno = e;
			goto fail;
		}
		d->loops[i].started = 1;
		snprintf(name, sizeof(name), "disp-%d", i % 1000);
		(void)pthread_setname_np(d->loops[i].thread, name);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return d;
fail:
	e = errno;
	log_warn("dispatcher: cannot start");
	disp_free(d);
	errno = e;
	return NULL;
}

int
disp_submit(struct dispatcher *d, struct disp_request *req)
{
	struct disp_loop *l;
	struct disp_xfer *x;
	int full;

	if (d == NULL || req == NULL || req->url == NULL ||
	    req->tenant == NULL || req->topic == NULL ||
	    req->topic[0] == '\0' || req->job_id == NULL ||
	    req->attempt < 1 || (req->body == NULL && req->body_len > 0) ||
	    req->secret_len > DISP_SECRET_MAX) {
		errno = EINVAL;
		return -1;
	}
	pthread_mutex_lock(&d->lock);
	if (d->draining) {
		pthread_mutex_unlock(&d->lock);
		errno = ESHUTDOWN;
		return -1;
	}
	d->outstanding++;
	pthread_mutex_unlock(&d->lock);
	if ((full = disp_counts_add(&d->counts, req->tenant, req->topic,
	    d->cfg.max_total_in_flight, d->cfg.max_tenant_in_flight)) == -1) {
		outstanding_dec(d);
		errno = EAGAIN;
		return -1;
	}
	/* Before the loop owns req; at most once a minute per tenant. */
	if (full == 1) {
		int cap = disp_tenant_cap_of(d, req->tenant);

		log_warnx("dispatcher: tenant=%s reached %s (%d callbacks in "
		    "flight on this instance): its other due jobs wait until "
		    "one finishes", req->tenant,
		    cap == d->cfg.max_tenant_in_flight ?
		    "max_tenant_in_flight" : "its max_in_flight", cap);
	}
	x = xcalloc(1, sizeof(*x));
	x->req = req;
	buf_init(&x->excerpt, d->cfg.capture_max);
	l = &d->loops[__atomic_fetch_add(&d->next_loop, 1, __ATOMIC_RELAXED) %
	    (unsigned)d->nloops];
	disp_loop_enqueue(l, x);
	return 0;
}

void
disp_result_local(struct disp_xfer *x, struct disp_result *res,
    int handed_back, const char *why)
{
	memset(res, 0, sizeof(*res));
	res->cookie = x->req->cookie;
	res->req = x->req;
	res->kind = SCHEDULE_ERROR;
	res->retry_after_ms = -1;
	res->started_ms = x->started_ms;
	res->handed_back = handed_back;
	snprintf(res->error, sizeof(res->error), "%s", why);
	res->body_excerpt = buf_steal(&x->excerpt, &res->body_excerpt_len);
}

void
disp_report(struct dispatcher *d, struct disp_xfer *x, struct disp_result *res)
{
	disp_counts_del(&d->counts, x->req->tenant, x->req->topic);
	d->done(res, d->arg);
	free(res->body_excerpt);
	res->body_excerpt = NULL;
	disp_xfer_free(x);
	outstanding_dec(d);
}

int
disp_inflight(struct dispatcher *d, const char *tenant, const char *topic)
{
	if (d == NULL || tenant == NULL || topic == NULL)
		return 0;
	return disp_counts_get(&d->counts, tenant, topic);
}

int
disp_inflight_total(struct dispatcher *d)
{
	return d != NULL ? disp_counts_total(&d->counts) : 0;
}

int
disp_inflight_tenant(struct dispatcher *d, const char *tenant)
{
	if (d == NULL || tenant == NULL)
		return 0;
	return disp_counts_get(&d->counts, tenant, "");
}

int
disp_topic_room(struct dispatcher *d, const char *tenant, const char *topic,
    int max_topic)
{
	if (d == NULL || tenant == NULL || topic == NULL)
		return 0;
	return disp_counts_room(&d->counts, tenant, topic, max_topic,
	    d->cfg.max_tenant_in_flight, d->cfg.max_total_in_flight);
}

int
disp_tenant_room(struct dispatcher *d, const char *tenant)
{
	if (d == NULL || tenant == NULL)
		return 0;
	return disp_counts_room(&d->counts, tenant, "", 0,
	    d->cfg.max_tenant_in_flight, d->cfg.max_total_in_flight);
}

int
disp_tenant_cap_default(int max_total)
{
	int keep;

	if (max_total <= 1)
		return max_total > 0 ? max_total : 0;
	keep = max_total / 10 > 0 ? max_total / 10 : 1;
	return max_total - keep;
}

int
disp_tenant_cap(struct dispatcher *d)
{
	return d != NULL ? d->cfg.max_tenant_in_flight : 0;
}

int
disp_tenant_cap_for(struct dispatcher *d, int own)
{
	if (d == NULL)
		return own > 0 ? own : 0;
	return disp_cap_in_force(own, d->cfg.max_tenant_in_flight,
	    d->cfg.max_total_in_flight);
}

void
disp_tenant_set_cap(struct dispatcher *d, const char *tenant, int own)
{
	if (d != NULL && tenant != NULL)
		disp_counts_set_cap(&d->counts, tenant, own);
}

int
disp_tenant_cap_of(struct dispatcher *d, const char *tenant)
{
	if (d == NULL || tenant == NULL)
		return 0;
	return disp_counts_cap(&d->counts, tenant,
	    d->cfg.max_tenant_in_flight, d->cfg.max_total_in_flight);
}

void
disp_tenant_cap_foreach(struct dispatcher *d,
    void (*fn)(const char *tenant, int cap, void *arg), void *arg)
{
	if (d != NULL && fn != NULL)
		disp_counts_foreach_cap(&d->counts,
		    d->cfg.max_total_in_flight, fn, arg);
}

void
disp_inflight_foreach(struct dispatcher *d,
    void (*fn)(const char *tenant, const char *topic, int n, void *arg),
    void *arg)
{
	if (d != NULL && fn != NULL)
		disp_counts_foreach(&d->counts, fn, arg);
}

void
disp_inflight_tenant_foreach(struct dispatcher *d,
    void (*fn)(const char *tenant, int n, void *arg), void *arg)
{
	if (d != NULL && fn != NULL)
		disp_counts_foreach_tenant(&d->counts, fn, arg);
}

void
disp_drain(struct dispatcher *d, int64_t grace_ms)
{
	int i;

	if (d == NULL)
		return;
	pthread_mutex_lock(&d->lock);
	d->draining = 1;
	pthread_mutex_unlock(&d->lock);
	for (i = 0; i < d->nloops; i++)
		if (d->loops[i].started)
			disp_loop_drain(&d->loops[i], grace_ms);
	pthread_mutex_lock(&d->lock);
	while (d->outstanding > 0)
		pthread_cond_wait(&d->idle, &d->lock);
	pthread_mutex_unlock(&d->lock);
}

void
disp_free(struct dispatcher *d)
{
	int i;

	if (d == NULL)
		return;
	disp_drain(d, 0);
	for (i = 0; i < d->nloops; i++)
		if (d->loops[i].started)
			disp_loop_stop(&d->loops[i]);
	for (i = 0; i < d->nloops; i++)
		if (d->loops[i].started)
			pthread_join(d->loops[i].thread, NULL);
	for (i = 0; i < d->nloops; i++)
		disp_loop_destroy(&d->loops[i]);
	free(d->loops);
	pthread_cond_destroy(&d->idle);
	pthread_mutex_destroy(&d->lock);
	disp_counts_destroy(&d->counts);
	free(d->ua);
	free(d);
	curl_unref();
}
