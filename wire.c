/*
 * wire.c - the parts of the daemon and the hooks between them.
 *
 * Key decision: the modules know nothing of each other (dependencies point
 * one way: util <- schedules <- scheduler, dispatcher, journal <- api);
 * every cross-module call is a hook set here.  Stopping runs in the reverse
 * order of starting: stop taking requests and due jobs, let callbacks drain,
 * flush the journal, then close.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/http.h"
#include "conf.h"
#include "scheduler/sched.h"
#include "util/log.h"
#include "util/xmalloc.h"
#include "wire.h"

struct wire {
	struct sched		*sched;
	struct api_server	*http;
	struct api_ctx		 ctx;
};

static int
wire_ready(char *why, size_t whylen, void *arg)
{
	struct wire *w = arg;

	return sched_ready(w->sched, why, whylen);
}

static size_t
body_limit(void *arg)
{
	(void)arg;
	return (size_t)CONF_GET(limit_request_body);
}

static int
access_log(void *arg)
{
	(void)arg;
	return (int)CONF_GET(log_access);
}

struct wire *
wire_start(int listen_fd, char *err, size_t errlen)
{
	struct wire *w = xcalloc(1, sizeof(*w));
	struct sched_config sc;
	struct sched_hooks hooks;
	struct api_server_config hc;
	char why[512];

	memset(&sc, 0, sizeof(sc));
	sc.redis_url = conf.redis_url;
	sc.redis_timeout_ms = conf.redis_timeout_ms;
	sc.shards = (int)conf.sched_shards;
	sc.batch = (int)conf.sched_batch;
	sc.sweep_ms = conf.sched_sweep_ms;
	sc.lease_ms = conf.sched_lease_ms;
	sc.retention_ms = conf.sched_retention_ms;
	sc.retry_after_cap_ms = conf.disp_retry_after_cap_ms;
	sc.instance = conf.instance;
	sc.fake_clock = (int)conf.debug_fake_clock;
	memset(&hooks, 0, sizeof(hooks));
	hooks.arg = w;
	if ((w->sched = sched_new(&sc, &hooks, why, sizeof(why))) == NULL) {
		snprintf(err, errlen, "scheduler: %s", why);
		goto fail;
	}
	if (sched_start(w->sched) == -1) {
		snprintf(err, errlen, "scheduler: cannot start its threads");
		goto fail;
	}

	w->ctx.sched = w->sched;
	w->ctx.version = PACKAGE_VERSION;
	w->ctx.ready = wire_ready;
	w->ctx.ready_arg = w;
	memset(&hc, 0, sizeof(hc));
	hc.listen_fd = listen_fd;
	hc.threads = (int)conf.http_threads;
	hc.max_connections = (int)conf.http_max_connections;
	hc.timeout_ms = conf.http_timeout_ms;
	hc.routes = api_all_routes;
	hc.body_limit = body_limit;
	hc.access_log = access_log;
	hc.arg = &w->ctx;
	if ((w->http = api_server_start(&hc, why, sizeof(why))) == NULL) {
		snprintf(err, errlen, "http: %s", why);
		goto fail;
	}
	return w;
fail:
	if (w->sched != NULL) {
		sched_stop(w->sched);
		sched_free(w->sched);
	}
	free(w);
	return NULL;
}

void
wire_reloaded(struct wire *w)
{
	(void)w;
}

void
wire_stop(struct wire *w, int64_t grace_ms)
{
	(void)grace_ms;
	if (w == NULL)
		return;
	api_server_quiesce(w->http);
	sched_quiesce(w->sched);
	api_server_stop(w->http);
	sched_stop(w->sched);
	sched_free(w->sched);
	free(w);
}
