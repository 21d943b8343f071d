/*
 * health.c - /healthz and /readyz.
 *
 * /healthz says only that the process answers HTTP (a liveness probe must not
 * fail because Redis does).  /readyz asks the application whether it can
 * serve: Redis reachable with a known schema, the journal reachable; 503 with
 * the reason otherwise, so an operator sees why in one request.  When ready it
 * also says how many shards this instance holds ("leased") or that it holds
 * none and waits for one ("waiting").
 */
#include "config.h"

#include <json-c/json.h>

#include "api/api.h"
#include "scheduler/sched.h"

static void
healthz(struct api_req *req)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "status", json_object_new_string("ok"));
	api_reply_json(req, 200, o);
}

static void
readyz(struct api_req *req)
{
	struct api_ctx *ctx = api_server_arg(req->srv);
	json_object *o = json_object_new_object();
	char why[256] = "";
	int ok = 1;

	if (ctx != NULL && ctx->ready != NULL)
		ok = ctx->ready(why, sizeof(why), ctx->ready_arg);
	json_object_object_add(o, "status",
	    json_object_new_string(ok ? "ready" : "not_ready"));
	if (!ok)
		json_object_object_add(o, "reason",
		    json_object_new_string(why));
	/* Informational: an instance holding no shard is still ready (it
	 * serves the API and waits for a lease that another instance holds). */
	if (ok && ctx != NULL && ctx->sched != NULL) {
		int n = sched_owned_shards(ctx->sched);

		json_object_object_add(o, "shards_owned",
		    json_object_new_int(n));
		json_object_object_add(o, "shards",
		    json_object_new_string(n > 0 ? "leased" : "waiting"));
	}
	api_reply_json(req, ok ? 200 : 503, o);
}

const struct api_route api_routes_health[] = {
	{ "GET", "/healthz", API_AUTH_NONE, healthz, "liveness", 0 },
	{ "GET", "/readyz", API_AUTH_NONE, readyz, "readiness", 0 },
	{ NULL, NULL, 0, NULL, NULL, 0 },
};
