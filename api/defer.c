/*
 * defer.c - work a request cannot do on its HTTP thread: a topic's or a
 * tenant's deletion, which cancels its rows in the journal and drops every
 * job of it from Redis, a restore of a tenant's jobs from the journal, a
 * redrive of a topic's dead jobs: seconds for a large one.
 *
 * Key decision: the request is parked (api_suspend) and its work queued to
 * a background thread, which writes what to answer into the work's own
 * struct and resumes the request; the handler, called again on its HTTP
 * thread, answers from it.  An HTTP thread serves many connections, so
 * work done on it stalls every one of them, other tenants' included.  The
 * work and the request share it through an api_hold: whichever lets go
 * last frees it, so a request that ends first (the server stopping) leaves
 * the work to finish alone.  Up to DEFER_THREADS threads, started as work
 * finds none idle: one tenant's long restore does not hold another's
 * delete; two works of one name take the same write lock anyway.
 */
#include "config.h"

#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>

#include <json-c/json.h>

#include "api/api.h"
#include "api/internal.h"
#include "util/log.h"

#define DEFER_THREADS	4

static pthread_mutex_t defer_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t defer_cond = PTHREAD_COND_INITIALIZER;
static struct api_defer *defer_head, **defer_tail = &defer_head;
static pthread_t defer_thr[DEFER_THREADS];
static int defer_started, defer_idle, defer_stopping;

static void
defer_release(struct api_defer *d, int the_request)
{
	if (api_hold_drop(&d->hold, the_request)) {
		if (d->reply != NULL)	/* the request went unanswered */
			json_object_put(d->reply);
		free(d);
	}
}

static void *
defer_main(void *arg)
{
	struct api_defer *d;

	(void)arg;
	pthread_mutex_lock(&defer_lock);
	for (;;) {
		defer_idle++;
		while (defer_head == NULL && !defer_stopping)
			pthread_cond_wait(&defer_cond, &defer_lock);
		defer_idle--;
		if ((d = defer_head) == NULL)
			break;
		if ((defer_head = d->next) == NULL)
			defer_tail = &defer_head;
		pthread_mutex_unlock(&defer_lock);
		d->work(d);
		defer_release(d, 0);
		pthread_mutex_lock(&defer_lock);
	}
	pthread_mutex_unlock(&defer_lock);
	return NULL;
}

static void
defer_free_state(void *state)
{
	defer_release(state, 1);
}

void
api_defer(struct api_req *req, struct api_defer *d)
{
	int queued = 0;

	d->ctx = api_ctx_of(req);
	d->next = NULL;
	pthread_mutex_lock(&defer_lock);
	/* Another thread when every one is busy (or queued for). */
	if (!defer_stopping && defer_started < DEFER_THREADS &&
	    defer_idle == 0) {
		if (pthread_create(&defer_thr[defer_started], NULL,
		    defer_main, NULL) == 0) {
			(void)pthread_setname_np(defer_thr[defer_started],
			    "api-defer");
			defer_started++;
		} else
			log_warn("api: cannot start a background thread");
	}
	if (defer_started > 0 && !defer_stopping) {
		api_hold_init(&d->hold, req, 2);
		req->state = d;
		req->free_state = defer_free_state;
		api_suspend(req);
		*defer_tail = d;
		defer_tail = &d->next;
		queued = 1;
	}
	pthread_mutex_unlock(&defer_lock);
	if (queued) {
		pthread_cond_signal(&defer_cond);
		return;
	}
	/* No thread (stopping): here, as before there was one. */
	d->work(d);
	api_defer_answer(req, d);
	free(d);
}

void
api_defer_answer(struct api_req *req, struct api_defer *d)
{
	if (d->err.status != 0)
		api_error_desc(req, &d->err);
	else if (d->reply != NULL) {
		api_reply_json(req, 200, d->reply);
		d->reply = NULL;
	} else
		api_reply_empty(req, 204);
}

void
api_defer_stop(void)
{
	int i, started;

	pthread_mutex_lock(&defer_lock);
	defer_stopping = 1;
	started = defer_started;
	pthread_cond_broadcast(&defer_cond);
	pthread_mutex_unlock(&defer_lock);
	for (i = 0; i < started; i++)
		pthread_join(defer_thr[i], NULL);
	pthread_mutex_lock(&defer_lock);
	defer_started = 0;
	pthread_mutex_unlock(&defer_lock);
}
