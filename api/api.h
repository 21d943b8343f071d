/*
 * api.h - what the REST handlers share with the daemon: the application
 * context handed to every handler through api_server_arg(), the route sets
 * each api/ file exports, and the few entry points main/wire must connect
 * (the authenticator, the pull consumers' wake-up, the body limit).
 */
#ifndef RETRYD_API_API_H
#define RETRYD_API_API_H

#include <stddef.h>

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
};

/* Route sets, each NULL-method terminated. */
extern const struct api_route api_routes_health[];
extern const struct api_route api_routes_tenants[];	/* tenants.c */
extern const struct api_route api_routes_topics[];	/* topics.c */
extern const struct api_route api_routes_jobs[];	/* jobs.c */
extern const struct api_route api_routes_pull[];	/* pull.c */
extern const struct api_route api_routes_original[];	/* original.c */
extern const struct api_route api_routes_debug[];	/* debug.c */

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
 * lazily by the first long-poll); api_pull_stop() joins it: call it after
 * api_server_stop().  api_pull_kick() makes the deadline thread look again
 * now (after the fake clock moved).
 */
void	api_pull_notify(const char *tenant, const char *topic);
int	api_pull_start(void);
void	api_pull_stop(void);
void	api_pull_kick(void);

#endif
