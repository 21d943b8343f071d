/*
 * debug.c - the test clock: GET/POST /v1/debug/clock.
 *
 * Tests never sleep to let time pass.  With debug.fake_clock on, the
 * process's clock (util/clock.h) stands still until a test moves it here;
 * the scheduler's scripts take "now" from that clock instead of Redis TIME,
 * and the timer is kicked so it looks again at once.  The answer carries the
 * number of timer passes completed, so a test can wait until the scheduler
 * has seen the new time before it asserts that something did not happen.
 * With the fake clock off these routes answer 404: they do not exist in
 * production.
 *
 * GET/POST /v1/debug/pull-hold holds the pull reserve worker before it
 * applies a batch ({"hold": true}, until {"hold": false} or the stop), and
 * says how many reserves wait there, so a test can end a consumer's
 * request while its reserve is in progress.
 */
#include "config.h"

#include <inttypes.h>

#include <json-c/json.h>

#include "api/api.h"
#include "api/pull_batch.h"
#include "scheduler/sched.h"
#include "util/clock.h"

static void
clock_reply(struct api_req *req, struct api_ctx *ctx)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "now_ms",
	    json_object_new_int64(clock_wall_ms()));
	json_object_object_add(o, "passes", json_object_new_int64(
	    ctx->sched ? (int64_t)sched_passes(ctx->sched) : 0));
	api_reply_json(req, 200, o);
}

static int
fake_only(struct api_req *req)
{
	if (clock_is_fake())
		return 0;
	api_error(req, 404, "not_found", NULL,
	    "the debug clock exists only with debug.fake_clock = true");
	return -1;
}

static void
clock_get(struct api_req *req)
{
	if (fake_only(req) == -1)
		return;
	clock_reply(req, api_server_arg(req->srv));
}

/*
 * The latest time the fake clock may show: 2096-10-02, some years short
 * of the end of the job records' 42-bit times (2109, REDIS-SCHEMA.md),
 * which a push would otherwise meet as an internal error.
 */
#define FAKE_CLOCK_MAX_MS	INT64_C(4000000000000)

static void
clock_post(struct api_req *req)
{
	struct api_ctx *ctx = api_server_arg(req->srv);
	json_object *body, *v;
	int64_t n;

	if (fake_only(req) == -1 || api_body_json(req, &body) == -1)
		return;
	if (json_object_object_get_ex(body, "advance_ms", &v)) {
		if (!json_object_is_type(v, json_type_int) ||
		    (n = json_object_get_int64(v)) < 0 ||
		    n > FAKE_CLOCK_MAX_MS - clock_wall_ms()) {
			json_object_put(body);
			api_error(req, 400, "invalid_field", "advance_ms",
			    "advance_ms must be a non-negative integer that "
			    "leaves the clock at or before %" PRId64 " ms",
			    FAKE_CLOCK_MAX_MS);
			return;
		}
		clock_advance_ms(n);
	} else if (json_object_object_get_ex(body, "now_ms", &v)) {
		if (!json_object_is_type(v, json_type_int) ||
		    (n = json_object_get_int64(v)) < clock_wall_ms() ||
		    n > FAKE_CLOCK_MAX_MS) {
			json_object_put(body);
			api_error(req, 400, "invalid_field", "now_ms",
			    "now_ms must be an integer from the current time "
			    "(the clock never goes back) to %" PRId64,
			    FAKE_CLOCK_MAX_MS);
			return;
		}
		clock_advance_ms(n - clock_wall_ms());
	} else {
		json_object_put(body);
		api_error(req, 400, "invalid_field", "advance_ms",
		    "give advance_ms or now_ms");
		return;
	}
	json_object_put(body);
	if (ctx->sched != NULL)
		sched_kick(ctx->sched);
	api_pull_kick();
	clock_reply(req, ctx);
}

static void
hold_reply(struct api_req *req)
{
	json_object *o = json_object_new_object();
	size_t waiting;
	int on = pull_batch_holding(&waiting);

	json_object_object_add(o, "hold", json_object_new_boolean(on));
	json_object_object_add(o, "waiting",
	    json_object_new_int64((int64_t)waiting));
	api_reply_json(req, 200, o);
}

static void
hold_get(struct api_req *req)
{
	if (fake_only(req) == -1)
		return;
	hold_reply(req);
}

static void
hold_post(struct api_req *req)
{
	json_object *body, *v;

	if (fake_only(req) == -1 || api_body_json(req, &body) == -1)
		return;
	if (!json_object_object_get_ex(body, "hold", &v) ||
	    !json_object_is_type(v, json_type_boolean)) {
		json_object_put(body);
		api_error(req, 400, "invalid_field", "hold",
		    "hold must be true or false");
		return;
	}
	pull_batch_hold(json_object_get_boolean(v));
	json_object_put(body);
	hold_reply(req);
}

const struct api_route api_routes_debug[] = {
	{ "GET", "/v1/debug/clock", API_AUTH_ADMIN, clock_get,
	  "read the test clock", 0 },
	{ "POST", "/v1/debug/clock", API_AUTH_ADMIN, clock_post,
	  "move the test clock", 0 },
	{ "GET", "/v1/debug/pull-hold", API_AUTH_ADMIN, hold_get,
	  "read the pull reserve worker's test hold", 0 },
	{ "POST", "/v1/debug/pull-hold", API_AUTH_ADMIN, hold_post,
	  "hold or let go the pull reserve worker (tests)", 0 },
	{ NULL, NULL, 0, NULL, NULL, 0 },
};
