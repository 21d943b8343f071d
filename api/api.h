/*
 * api.h - what the REST handlers share with the daemon: the application
 * context handed to every handler through api_server_arg(), the route sets
 * each api/ file exports, and the few entry points main/wire must connect
 * (the authenticator, the pull consumers' wake-up, the body limit).
 */
#ifndef RETRYD_API_API_H
#define RETRYD_API_API_H

#include <stddef.h>
#include <stdint.h>

#include "api/http.h"

struct sched;
struct jrnl;
struct dispatcher;
struct registry;

struct api_ctx {
	struct sched		*sched;
	struct jrnl		*jrnl;		/* NULL: journal off */
	struct dispatcher	*disp;
	struct registry		*reg;
	const char		*version;
	/* 1 when ready to serve; else 0 with a reason. */
	int			(*ready)(char *why, size_t whylen, void *arg);
	void			*ready_arg;
	/*
	 * Ask this instance's restore worker to look at the rebuild flag
	 * now (NULL: none); rebuild_arg is its argument.
	 */
	void			(*rebuild)(void *arg);
	void			*rebuild_arg;
};

/* Route sets, each NULL-method terminated. */
extern const struct api_route api_routes_health[];
extern const struct api_route api_routes_tenants[];	/* tenants.c */
extern const struct api_route api_routes_topics[];	/* topics.c */
extern const struct api_route api_routes_jobs[];	/* jobs.c */
extern const struct api_route api_routes_pull[];	/* pull.c */
extern const struct api_route api_routes_original[];	/* original.c */
extern const struct api_route api_routes_debug[];	/* debug.c */
extern const struct api_route api_routes_stats[];	/* stats.c */
extern const struct api_route api_routes_metrics[];	/* metrics.c */
extern const struct api_route api_routes_dashboard[];	/* dashboard.c */

/* All route sets, NULL-terminated (for the server and the OpenAPI check). */
extern const struct api_route *const api_all_routes[];

/*
 * The server's authenticate callback (struct api_server_config); arg is the
 * struct api_ctx.  Bearer keys: the admin key (conf admin_key) or a tenant
 * key looked up in ctx->reg by its SHA-256; X-Tenant lets the admin key act
 * as a tenant; the per-key request rate (limits.rate) is enforced here.
 */
int	api_authenticate(struct api_req *req, enum api_auth need, void *arg);
/* The server's body_limit callback: limits.request_body. */
size_t	api_body_limit(void *arg);

/*
 * Pull consumers.  api_pull_notify() is the scheduler's `ready` hook: jobs
 * became ready in tenant/topic, wake a waiting consumer (any thread, never
 * blocks on I/O).  api_pull_start() starts the deadline thread (also started
 * lazily by the first long-poll); api_pull_stop() joins it and the batch
 * workers (pull_batch.c), whether or not it ever started: call it after
 * api_server_stop().  api_pull_kick() makes the deadline thread look again
 * now (after the fake clock moved).
 */
void	api_pull_notify(const char *tenant, const char *topic);
int	api_pull_start(void);
void	api_pull_stop(void);
void	api_pull_kick(void);
/*
 * The push threads (started by the first push): api_push_stop() pushes what
 * they hold, joins them and waits for a push the journal's writer is making
 * (api_push_flush); call it after api_server_stop(), before the scheduler
 * stops.  Later pushes are made by the handler's own thread.
 */
void	api_push_stop(void);
/*
 * The background thread of deletions (defer.c, started by the first):
 * api_defer_stop() lets it finish what is queued, so each of those
 * requests is answered, and joins it; later deletions run on their HTTP
 * thread.  Call it before api_server_stop().
 */
void	api_defer_stop(void);
/*
 * The journal's callbacks_done: pushes the committed group on this thread
 * when it is small (a few single pushes), else hands it to the pushers.
 */
void	api_push_flush(void);

/*
 * Observability (metrics.c, stats.c; docs/internals/METRICS.md).
 * api_obs_start() makes the metrics and starts the thread that writes the
 * dashboard's per-minute series to Redis through ctx->sched;
 * api_obs_stop() writes what is left and stops it: call it after
 * sched_stop(), before sched_free().  The others may be called from any
 * thread, never block on I/O, and are no-ops for jobs without a topic.
 * api_obs_transition() is the scheduler's transition hook (from and to are
 * enum sched_state); api_obs_callback() takes a callback's outcome name
 * (schedule_outcome_name()) and latency.  Failed Redis work is counted
 * where every command passes, in the scheduler's pool (sched_redis_errors).
 */
struct sched_job;
struct sched_attempt;
int	api_obs_start(const struct api_ctx *ctx);
void	api_obs_stop(void);
void	api_obs_transition(const struct sched_job *job, int from, int to,
	    const struct sched_attempt *attempt);
void	api_obs_callback(const char *outcome, int64_t latency_ms);
/* A timer pass found the tenant, with due jobs in push topics, at its
 * dispatcher.max_tenant_in_flight: they wait (once per pass and tenant). */
void	api_obs_tenant_held(const char *tenant);

#endif
