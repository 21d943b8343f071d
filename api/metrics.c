/*
 * metrics.c - GET /metrics in the Prometheus text format, and the entry
 * points through which the daemon reports what happens (api_obs_*()).
 *
 * Key decisions: events (a job pushed, an attempt started or finished, a
 * callback's outcome and latency) are counted where they happen, lock-free
 * (util/metrics), with tenant and topic as labels capped at
 * METRICS_DEFAULT_SERIES per family (beyond: topic="_other").  What is a
 * state rather than an event is read when scraped: callbacks in flight from
 * the dispatcher (per topic and per tenant) and its tenant cap, shards
 * owned from the scheduler, the journal's counters, and jobs per state
 * from Redis; the last through a cache refreshed at most every
 * metrics.counts_interval by one scrape at a time (the others get the
 * previous numbers), so scrapes cannot hammer Redis.  The route is open,
 * like most exporters (operators firewall it), unless metrics.require_key
 * asks for the admin key.
 */
#include "config.h"

#include <pthread.h>
#include <sys/types.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/internal.h"
#include "api/obs.h"
#include "conf.h"
#include "dispatcher/dispatcher.h"
#include "journal/journal.h"
#include "scheduler/conn.h"
#include "scheduler/registry.h"
#include "scheduler/sched.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/metrics.h"
#include "util/xmalloc.h"

#define RENDER_MAX		(64u << 20)
#define COUNT_ROWS_MAX		METRICS_DEFAULT_SERIES
#define INFLIGHT_ROWS_MAX	METRICS_DEFAULT_SERIES
#define TENANT_ROWS_MAX		METRICS_DEFAULT_SERIES
#define CTYPE	"text/plain; version=0.0.4; charset=utf-8"

static const int64_t late_bounds_ms[] = {
	5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000,
	300000, 900000, 3600000,
};
static const int64_t latency_bounds_ms[] = {
	5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000,
};

/* The registry and its families: made once, for the life of the process. */
static pthread_once_t reg_once = PTHREAD_ONCE_INIT;
static struct metrics *reg;
static struct metrics_family *f_build, *f_pushed, *f_attempts, *f_callbacks,
    *f_late, *f_latency, *f_redis_err, *f_held;
static struct metrics_series *s_late, *s_latency, *s_redis_err;
static int64_t start_ms;

/* Jobs per tenant, topic and state, read from Redis (see the top). */
struct count_row {
	char	 tenant[REG_TENANT_MAX + 1];
	char	 topic[REG_TOPIC_MAX + 1];
	int64_t	 counts[SCHED_NSTATES];
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct count_row *cache_rows;
static size_t cache_n;
static int64_t cache_mono_us;
static int cache_valid, cache_refreshing;

static void
reg_init(void)
{
	static const char *const tt[] = { "tenant", "topic", NULL };
	static const char *const tenant[] = { "tenant", NULL };
	/* The last label is the one folded into "_other": the topic. */
	static const char *const trt[] = { "tenant", "result", "topic", NULL };
	static const char *const outcome[] = { "outcome", NULL };
	static const char *const version[] = { "version", NULL };
	const char *v[] = { PACKAGE_VERSION };

	reg = metrics_new();
	start_ms = clock_wall_ms();
	f_build = metrics_family_new(reg, METRICS_GAUGE, "retryd_build_info",
	    "The running build (value 1).", version, 1);
	metrics_set(f_build, v, 1);
	f_pushed = metrics_family_new(reg, METRICS_COUNTER,
	    "retryd_jobs_pushed_total", "Jobs accepted (pushed).", tt, 0);
	f_attempts = metrics_family_new(reg, METRICS_COUNTER,
	    "retryd_attempts_total", "Attempts finished, by what followed: "
	    "delivered, retrying (a later attempt) or dead.", trt, 0);
	f_callbacks = metrics_family_new(reg, METRICS_COUNTER,
	    "retryd_callbacks_total", "Callbacks made, by outcome (ok, http, "
	    "timeout, connect, dns, tls, blocked, error).", outcome, 64);
	f_late = metrics_histogram_new(reg, "retryd_lateness_seconds",
	    "Time from a job's due time to the start of its attempt.", NULL,
	    1, late_bounds_ms, sizeof(late_bounds_ms) /
	    sizeof(late_bounds_ms[0]), 1000);
	s_late = metrics_get(f_late, NULL);
	f_latency = metrics_histogram_new(reg,
	    "retryd_callback_duration_seconds",
	    "Callback latency, request sent to response (or failure).", NULL,
	    1, latency_bounds_ms, sizeof(latency_bounds_ms) /
	    sizeof(latency_bounds_ms[0]), 1000);
	s_latency = metrics_get(f_latency, NULL);
	f_redis_err = metrics_family_new(reg, METRICS_COUNTER,
	    "retryd_redis_errors_total", "Redis work of this process that "
	    "failed, each failure once: connections not made, connections "
	    "broken, error replies (routed or pipelined).", NULL, 1);
	s_redis_err = metrics_get(f_redis_err, NULL);
	f_held = metrics_family_new(reg, METRICS_COUNTER,
	    "retryd_dispatcher_tenant_held_total", "Timer passes that found "
	    "the tenant at its cap (its max_in_flight, else "
	    "dispatcher.max_tenant_in_flight) with due jobs in push topics, "
	    "which waited (once per pass).", tenant, 0);
}

static void
reg_ready(void)
{
	pthread_once(&reg_once, reg_init);
}

int
api_obs_start(const struct api_ctx *ctx)
{
	reg_ready();
	return obs_stats_start(ctx);
}

void
api_obs_stop(void)
{
	obs_stats_stop();
	pthread_mutex_lock(&cache_lock);
	free(cache_rows);
	cache_rows = NULL;
	cache_n = 0;
	cache_valid = 0;
	pthread_mutex_unlock(&cache_lock);
}

void
api_obs_transition(const struct sched_job *job, int from, int to,
    const struct sched_attempt *a)
{
	const char *v[3];
	int64_t now;

	if (job == NULL || job->tenant == NULL || job->topic == NULL)
		return;
	reg_ready();
	v[0] = job->tenant;
	if (from == SCHED_NSTATES) {
		v[1] = job->topic;
		metrics_add(f_pushed, v, 1);
		return;
	}
	now = clock_wall_ms();
	if (from == SCHED_READY && to == SCHED_IN_FLIGHT) {
		/* An attempt starts: how late against its due time. */
		metrics_series_observe(s_late, now > job->due_ms ?
		    now - job->due_ms : 0);
		obs_stats_lateness(job->tenant, job->topic,
		    now - job->due_ms, now);
		return;
	}
	if (from == SCHED_IN_FLIGHT && a != NULL &&
	    (to == SCHED_DELIVERED || to == SCHED_RETRYING ||
	    to == SCHED_DEAD)) {
		/* An attempt finished (a release has no attempt). */
		v[1] = sched_state_name((enum sched_state)to);
		v[2] = job->topic;
		metrics_add(f_attempts, v, 1);
		obs_stats_attempt(job->tenant, job->topic,
		    to == SCHED_DELIVERED, now);
	}
}

void
api_obs_callback(const char *outcome, int64_t latency_ms)
{
	const char *v[1];

	reg_ready();
	v[0] = outcome != NULL ? outcome : "error";
	metrics_add(f_callbacks, v, 1);
	metrics_series_observe(s_latency, latency_ms > 0 ? latency_ms : 0);
}

void
api_obs_tenant_held(const char *tenant)
{
	const char *v[1];

	if (tenant == NULL)
		return;
	reg_ready();
	v[0] = tenant;
	metrics_add(f_held, v, 1);
}

/* ---- jobs per state ----------------------------------------------------- */

/* Append a row; (_other, _other) rows are summed into one. */
static void
row_add(struct count_row *rows, size_t *n, ssize_t *other,
    const char *tenant, const char *topic,
    const int64_t counts[SCHED_NSTATES])
{
	size_t i;
	int s, fold = strcmp(tenant, METRICS_OTHER) == 0;

	if (fold && *other >= 0)
		i = (size_t)*other;
	else {
		i = (*n)++;
		memset(&rows[i], 0, sizeof(rows[i]));
		snprintf(rows[i].tenant, sizeof(rows[i].tenant), "%s", tenant);
		snprintf(rows[i].topic, sizeof(rows[i].topic), "%s", topic);
		if (fold)
			*other = (ssize_t)i;
	}
	for (s = 0; s < SCHED_NSTATES; s++)
		rows[i].counts[s] += counts[s];
}

/*
 * Read every topic's counts.  Past COUNT_ROWS_MAX rows a tenant's other
 * topics become one row (tenant, "_other") from the tenant's total; past
 * that again, every further tenant is summed in (_other, _other).  0, or
 * -1 when Redis did not answer.
 */
static int
counts_read(struct api_ctx *ctx, struct count_row **out, size_t *nout)
{
	struct registry_tenant *tenants = NULL;
	struct registry_topic **topics = NULL;
	struct count_row *rows;
	int64_t c[SCHED_NSTATES], total[SCHED_NSTATES], sum[SCHED_NSTATES];
	size_t nt = 0, ntop = 0, i, j, n = 0;
	ssize_t other = -1;
	int s, rc = -1;

	/* Room for the cap, one fold per tenant past it, and (_other,_other):
	 * bounded by tenants actually listed, capped below. */
	rows = xcalloc(COUNT_ROWS_MAX + METRICS_OVERFLOW_SERIES + 1,
	    sizeof(*rows));
	if (registry_tenant_list(ctx->reg, &tenants, &nt) != REG_OK)
		goto out;
	for (i = 0; i < nt; i++) {
		if (n >= COUNT_ROWS_MAX + METRICS_OVERFLOW_SERIES) {
			if (sched_counts(ctx->sched, tenants[i].name, NULL,
			    total) != SCHED_OK)
				goto out;
			row_add(rows, &n, &other, METRICS_OTHER,
			    METRICS_OTHER, total);
			continue;
		}
		if (registry_topic_list(ctx->reg, tenants[i].name, &topics,
		    &ntop) != REG_OK)
			goto out;
		memset(sum, 0, sizeof(sum));
		for (j = 0; j < ntop && n < COUNT_ROWS_MAX; j++) {
			if (sched_counts(ctx->sched, tenants[i].name,
			    topics[j]->name, c) != SCHED_OK)
				goto out;
			row_add(rows, &n, &other, tenants[i].name,
			    topics[j]->name, c);
			for (s = 0; s < SCHED_NSTATES; s++)
				sum[s] += c[s];
		}
		if (j < ntop) {
			if (sched_counts(ctx->sched, tenants[i].name, NULL,
			    total) != SCHED_OK)
				goto out;
			for (s = 0; s < SCHED_NSTATES; s++)
				total[s] = total[s] > sum[s] ?
				    total[s] - sum[s] : 0;
			row_add(rows, &n, &other, tenants[i].name,
			    METRICS_OTHER, total);
		}
		registry_topic_list_free(topics, ntop);
		topics = NULL;
		ntop = 0;
	}
	rc = 0;
out:
	registry_topic_list_free(topics, ntop);
	free(tenants);
	if (rc == -1) {
		free(rows);
		rows = NULL;
		n = 0;
	}
	*out = rows;
	*nout = n;
	return rc;
}

/* Refresh the cache when it is older than the interval (one at a time). */
static void
counts_refresh(struct api_ctx *ctx)
{
	int64_t now = clock_mono_us(), ival = CONF_GET(metrics_counts_ms);
	struct count_row *rows, *old;
	size_t n;

	pthread_mutex_lock(&cache_lock);
	if (cache_refreshing || (cache_valid &&
	    now - cache_mono_us < ival * 1000)) {
		pthread_mutex_unlock(&cache_lock);
		return;
	}
	cache_refreshing = 1;
	pthread_mutex_unlock(&cache_lock);

	if (counts_read(ctx, &rows, &n) == -1)
		log_debug("metrics: job counts not refreshed (Redis)");
	pthread_mutex_lock(&cache_lock);
	if (rows != NULL) {
		old = cache_rows;
		cache_rows = rows;
		cache_n = n;
		cache_valid = 1;
		free(old);
	}
	cache_mono_us = clock_mono_us();
	cache_refreshing = 0;
	pthread_mutex_unlock(&cache_lock);
}

static int
render_counts(struct buf *out)
{
	static const char *const names[] = { "tenant", "topic", "state" };
	const char *v[3];
	size_t i;
	int s, rc = 0;

	if (metrics_write_header(out, "retryd_jobs", "Jobs per tenant, topic "
	    "and state (read every metrics.counts_interval).",
	    METRICS_GAUGE) == -1)
		return -1;
	pthread_mutex_lock(&cache_lock);
	for (i = 0; i < cache_n && rc == 0; i++)
		for (s = 0; s < SCHED_NSTATES && rc == 0; s++) {
			v[0] = cache_rows[i].tenant;
			v[1] = cache_rows[i].topic;
			v[2] = sched_state_name((enum sched_state)s);
			rc = metrics_write_sample(out, "retryd_jobs", names, v,
			    3, cache_rows[i].counts[s]);
		}
	pthread_mutex_unlock(&cache_lock);
	return rc;
}

/* ---- callbacks in flight ------------------------------------------------ */

/*
 * A gauge of callbacks in flight, one sample per dispatcher row up to max
 * rows, the rest summed under METRICS_OTHER in every label.
 */
struct inflight_ctx {
	struct buf		*out;
	const char		*name;		/* the series */
	const char *const	*labels;
	size_t			 nlabels;
	size_t			 max;		/* rows written at most */
	size_t			 rows;
	int64_t			 other;
	int			 rc;
};

/* Writes one row's sample (v, ic->nlabels values), or folds it. */
static void
inflight_sample(struct inflight_ctx *ic, const char *const *v, int n)
{
	if (ic->rc != 0)
		return;
	if (ic->rows >= ic->max) {
		ic->other += n;
		return;
	}
	ic->rc = metrics_write_sample(ic->out, ic->name, ic->labels, v,
	    ic->nlabels, n);
	ic->rows++;
}

/* The folded rows' sample, if any; 0 or -1. */
static int
inflight_other(struct inflight_ctx *ic)
{
	static const char *const other[] = { METRICS_OTHER, METRICS_OTHER };

	if (ic->rc == 0 && ic->other > 0)
		ic->rc = metrics_write_sample(ic->out, ic->name, ic->labels,
		    other, ic->nlabels, ic->other);
	return ic->rc != 0 ? -1 : 0;
}

static void
inflight_row(const char *tenant, const char *topic, int n, void *arg)
{
	const char *v[2];

	v[0] = tenant;
	v[1] = topic;
	inflight_sample(arg, v, n);
}

static int
render_inflight(struct api_ctx *ctx, struct buf *out)
{
	static const char *const names[] = { "tenant", "topic" };
	struct inflight_ctx ic = { out, "retryd_callbacks_in_flight", names,
	    2, INFLIGHT_ROWS_MAX, 0, 0, 0 };

	if (metrics_write_header(out, ic.name,
	    "Callbacks running now on this instance, per topic.",
	    METRICS_GAUGE) == -1)
		return -1;
	if (ctx->disp == NULL)
		return 0;
	disp_inflight_foreach(ctx->disp, inflight_row, &ic);
	if (inflight_other(&ic) == -1)
		return -1;
	if (metrics_write_header(out, "retryd_dispatcher_in_flight",
	    "Callbacks running now on this instance.", METRICS_GAUGE) == -1 ||
	    metrics_write_sample(out, "retryd_dispatcher_in_flight", NULL,
	    NULL, 0, disp_inflight_total(ctx->disp)) == -1)
		return -1;
	return 0;
}

/* ---- each tenant's callbacks in flight, and its cap -------------------- */

static void
tenant_row(const char *tenant, int n, void *arg)
{
	inflight_sample(arg, &tenant, n);
}

static int
render_tenants(struct api_ctx *ctx, struct buf *out)
{
	static const char *const names[] = { "tenant" };
	struct inflight_ctx ic = { out, "retryd_dispatcher_tenant_in_flight",
	    names, 1, TENANT_ROWS_MAX, 0, 0, 0 };

	if (metrics_write_header(out, ic.name,
	    "Callbacks running now on this instance, per tenant (all its "
	    "topics), against dispatcher.max_tenant_in_flight.",
	    METRICS_GAUGE) == -1)
		return -1;
	if (ctx->disp != NULL)
		disp_inflight_tenant_foreach(ctx->disp, tenant_row, &ic);
	if (inflight_other(&ic) == -1 ||
	    metrics_write_header(out, "retryd_dispatcher_tenant_in_flight_max",
	    "dispatcher.max_tenant_in_flight in force: one tenant's callbacks "
	    "running at once on this instance (0: no cap); with a tenant "
	    "label, the cap in force of a tenant with its own max_in_flight.",
	    METRICS_GAUGE) == -1 ||
	    metrics_write_sample(out, "retryd_dispatcher_tenant_in_flight_max",
	    NULL, NULL, 0, disp_tenant_cap(ctx->disp)) == -1)
		return -1;
	/*
	 * Key decision: a cap is not a count, so the tenants with one of
	 * their own past the row cap are left out rather than folded into
	 * _other (a sum of caps means nothing); the operator set each one.
	 */
	ic.name = "retryd_dispatcher_tenant_in_flight_max";
	ic.rows = 0;
	if (ctx->disp != NULL)
		disp_tenant_cap_foreach(ctx->disp, tenant_row, &ic);
	return ic.rc != 0 ? -1 : 0;
}

/* One metric of one sample without labels. */
static int
single(struct buf *out, const char *name, const char *help,
    enum metrics_type type, int64_t v)
{
	if (metrics_write_header(out, name, help, type) == -1 ||
	    metrics_write_sample(out, name, NULL, NULL, 0, v) == -1)
		return -1;
	return 0;
}

static int
render_state(struct api_ctx *ctx, struct buf *out)
{
	struct jrnl_stats js;
	char why[256];
	int redis_up = 0, jrnl_up = 1;

	if (ctx->sched != NULL)
		redis_up = sched_ready(ctx->sched, why, sizeof(why));
	memset(&js, 0, sizeof(js));
	if (ctx->jrnl != NULL) {
		jrnl_get_stats(ctx->jrnl, &js);
		jrnl_up = jrnl_ready(ctx->jrnl, why, sizeof(why));
	}
	if (single(out, "retryd_start_time_seconds", "When the process "
	    "started (Unix time).", METRICS_GAUGE, start_ms / 1000) == -1 ||
	    single(out, "retryd_redis_up", "1 when Redis is reachable with a "
	    "known schema.", METRICS_GAUGE, redis_up) == -1 ||
	    single(out, "retryd_journal_up", "1 when the journal is reachable "
	    "(also 1 when it is off).", METRICS_GAUGE, jrnl_up) == -1 ||
	    single(out, "retryd_journal_enabled", "1 when a journal is "
	    "configured.", METRICS_GAUGE, ctx->jrnl != NULL) == -1 ||
	    single(out, "retryd_journal_errors_total", "Journal writes lost: "
	    "transitions and asynchronous jobs refused or dropped.",
	    METRICS_COUNTER, (int64_t)(js.transitions_dropped +
	    js.jobs_dropped)) == -1 ||
	    single(out, "retryd_journal_queued", "Transitions and jobs "
	    "waiting to be written to the journal.", METRICS_GAUGE,
	    (int64_t)(js.queued_transitions + js.queued_jobs)) == -1 ||
	    single(out, "retryd_shards_owned", "Shards this instance holds "
	    "the lease of.", METRICS_GAUGE, ctx->sched != NULL ?
	    sched_owned_shards(ctx->sched) : 0) == -1 ||
	    single(out, "retryd_stats_dropped_total", "Chart events lost "
	    "(table full, or Redis down when written).", METRICS_COUNTER,
	    (int64_t)obs_stats_dropped()) == -1 ||
	    single(out, "retryd_metrics_folded_total", "Label sets folded "
	    "into topic=\"_other\" because a family was at its cap.",
	    METRICS_COUNTER, (int64_t)metrics_folded(reg)) == -1)
		return -1;
	return 0;
}

static void
metrics_get_route(struct api_req *req)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct buf out;
	size_t len;
	char *text;

	if (CONF_GET(metrics_require_key) && !api_is_admin_request(req)) {
		api_add_header(req, "WWW-Authenticate",
		    "Bearer realm=\"retryd\"");
		api_error(req, 401, "unauthorized", NULL,
		    "metrics.require_key is on: use the admin key");
		return;
	}
	reg_ready();
	/* Every Redis command goes through the pool, which counts. */
	metrics_series_set(s_redis_err, (int64_t)sched_redis_errors());
	if (ctx->sched != NULL && ctx->reg != NULL)
		counts_refresh(ctx);
	buf_init(&out, RENDER_MAX);
	if (metrics_render(reg, &out) == -1 ||
	    render_counts(&out) == -1 || render_inflight(ctx, &out) == -1 ||
	    render_tenants(ctx, &out) == -1 || render_state(ctx, &out) == -1) {
		buf_free(&out);
		api_error(req, 500, "internal", NULL,
		    "the metrics outgrew %u bytes", RENDER_MAX);
		return;
	}
	text = buf_steal(&out, &len);
	api_reply(req, 200, CTYPE, text != NULL ? text : "", len);
	free(text);
}

const struct api_route api_routes_metrics[] = {
	{ "GET", "/metrics", API_AUTH_NONE, metrics_get_route,
	    "Prometheus metrics", 0 },
	{ NULL, NULL, 0, NULL, NULL, 0 },
};
