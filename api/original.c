/*
 * original.c - the routes of the original design, kept for its clients
 * (/push, /delete, /restore, /restore/{id}, /get/{topic}, /finish), and the
 * recovery routes they share with v1 (/v1/restore, /v1/jobs/{id}/restore).
 *
 * Key decisions: these routes are thin adapters.  They authenticate like the
 * rest (a tenant key, or the admin key with X-Tenant), and every one of them
 * calls the same code as its v1 counterpart (api_job_parse,
 * api_jobs_accept, api_pull_reserve, api_pull_finish), so the original
 * clients get the same validation, quota, journal and tenant isolation
 * (/push keeps its parsed job in req->state, struct api_accept, while the
 * journal commits it).
 * Recovery reads the journal: with the journal off it answers 501.  The
 * recovery routes re-create jobs only, with the same rules as the automatic
 * rebuild (restore.c): the transitions queued here are flushed first, so a
 * job finished a moment ago is not revived; finished jobs are never read;
 * dead jobs come back dead.  Tenants, keys and topics come back by
 * themselves when Redis lost them (restore.c, or retryd --recover).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "api/api.h"
#include "api/internal.h"
#include "api/jobs_journal.h"
#include "api/validate.h"
#include "journal/journal.h"
#include "scheduler/registry.h"
#include "scheduler/sched.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define RESTORE_PAGE	500

/* ------------------------------------------------------------------ */
/* Original routes */

static void
push(struct api_req *req)
{
	struct api_accept *a = req->state;
	const char *topic = NULL;
	int present;

	if (a == NULL) {
		a = api_accept_new(req, 1);
		if (api_body_json(req, &a->body) == -1 ||
		    api_json_string(req, a->body, "topic", "topic",
		    API_TOPIC_MAX, &topic, &present) == -1)
			return;
		if (!present) {
			api_error(req, 400, "missing_field", "topic",
			    "topic is required");
			return;
		}
		if (api_topic_hold(req, topic, &a->t) == -1 ||
		    api_job_parse(req, a->body, a->t, API_JOB_ORIGINAL, "",
		    NULL, &a->jobs[0]) == -1)
			return;
	}
	if (api_jobs_accept(req, a) != 0)
		return;
	if (a->jobs[0].status == 409) {
		api_error(req, 409, "conflict", "id",
		    "that id names a job of another topic");
		return;
	}
	if (a->jobs[0].unsettled) {
		api_reply_unsettled(req);
		return;
	}
	if (a->jobs[0].status != 201 && a->jobs[0].status != 200) {
		api_sched_error(req, api_status_sched(a->jobs[0].status),
		    "job");
		return;
	}
	api_reply_job_result(req, 200, &a->jobs[0]);
}

/* The id query argument: 0, or -1 after answering 400. */
static int
query_id(struct api_req *req, const char **id)
{
	*id = api_query(req, "id");
	if (*id == NULL) {
		api_error(req, 400, "missing_field", "id", "id is required");
		return -1;
	}
	return api_check_job_id(req, *id);
}

static void
delete(struct api_req *req)
{
	const char *id;
	json_object *o;

	if (query_id(req, &id) == -1 || (req->state == NULL &&
	    api_cancel_job(req, id, "id") == -1))
		return;
	/* Called again (req->state set) once journaled. */
	if (api_change_durable(req, NULL) != 0)
		return;
	o = json_object_new_object();
	json_object_object_add(o, "id", json_object_new_string(id));
	json_object_object_add(o, "state", json_object_new_string("cancelled"));
	api_reply_json(req, 200, o);
}

static void
get(struct api_req *req)
{
	api_pull_reserve(req, req->param[0], 1);
}

static void
finish(struct api_req *req)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct sched_job *job = NULL;
	const char *id, *token;
	enum sched_err e;

	if (req->state != NULL) {	/* called again: the answer */
		api_pull_finish(req, NULL, NULL, 1);
		return;
	}
	if (query_id(req, &id) == -1)
		return;
	token = api_query(req, "token");
	if (token == NULL) {
		/*
		 * The original design had no token: finish the current
		 * reservation, whoever holds it.
		 */
		if ((e = sched_get(ctx->sched, req->tenant, id, &job)) !=
		    SCHED_OK) {
			api_sched_error(req, e, "job");
			return;
		}
		if (job->state != SCHED_IN_FLIGHT || job->token[0] == '\0') {
			sched_job_free(job);
			api_error(req, 409, "job_not_reserved", "id",
			    "the job is not reserved");
			return;
		}
		api_pull_finish(req, id, job->token, 1);
		sched_job_free(job);
		return;
	}
	api_pull_finish(req, id, token, 1);
}

/* ------------------------------------------------------------------ */
/* Recovery */

struct restore_ctx {
	struct sched	*sched;
	int		 expired;	/* also jobs whose due time passed */
	int64_t		 now_ms;
	int64_t		 restored, present, skipped, failed, superseded;
	char		 last_tenant[REG_TENANT_MAX + 1];
	char		 last_id[API_JOB_ID_BUF];
	size_t		 seen;
};

static int
restore_one(const struct jrnl_job *jj, void *arg)
{
	struct restore_ctx *rc = arg;
	struct log_obj lo = { jj->tenant, jj->topic, jj->id, jj->attempts };
	enum sched_err e;
	int created = 0;

	rc->seen++;
	snprintf(rc->last_tenant, sizeof(rc->last_tenant), "%s", jj->tenant);
	snprintf(rc->last_id, sizeof(rc->last_id), "%s", jj->id);
	/* Finished (delivered, cancelled) never comes back; nor, with
	 * expired=false, a job whose time has passed. */
	if (jj->finished_ms > 0 || (!rc->expired && jj->due_ms < rc->now_ms)) {
		rc->skipped++;
		return 0;
	}
	e = (enum sched_err)api_restore_journal_job(rc->sched, jj, &created);
	if (e != SCHED_OK) {
		/* As the rebuild says it (restore.c): which job, and why. */
		log_obj(LOG_LVL_WARN, &lo, "restore: refused: %s; skipped",
		    sched_strerror(e));
		rc->failed++;
	} else if (created == -1)
		rc->superseded++;	/* logged there */
	else if (created)
		rc->restored++;
	else
		rc->present++;
	return 0;
}

static json_object *
restore_json(const struct restore_ctx *rc)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "restored",
	    json_object_new_int64(rc->restored));
	json_object_object_add(o, "present",
	    json_object_new_int64(rc->present));
	json_object_object_add(o, "skipped",
	    json_object_new_int64(rc->skipped));
	json_object_object_add(o, "failed", json_object_new_int64(rc->failed));
	json_object_object_add(o, "superseded",
	    json_object_new_int64(rc->superseded));
	return o;
}

/*
 * A Redis without the schema marker lost its data (or is new): it is owed
 * the full rebuild (tenants, keys, topics, jobs, then the marker), not only
 * the jobs a restore route puts back.  Flag it, as the worker does when
 * the scheduler reports the loss, and wake this instance's worker; the
 * lock lets one instance rebuild.  The route itself never writes the
 * marker: written over a loss the scheduler has not yet seen, it would
 * hide the loss, and the rebuild would never run.
 */
static void
restore_check_lost(struct api_ctx *ctx)
{
	struct registry_restore_state st;

	if (ctx->reg == NULL ||
	    registry_restore_state(ctx->reg, &st) != REG_OK)
		return;		/* Redis down: the scheduler notices later */
	if (st.schema && !st.pending)
		return;
	if (!st.pending) {
		if (registry_restore_request(ctx->reg, "the schema marker "
		    "vanished (seen by a restore route)") != REG_OK)
			return;
		log_warnx("api: restore: Redis has no schema marker: it lost "
		    "its data; it will be rebuilt from the journal");
	}
	if (ctx->rebuild != NULL)
		ctx->rebuild(ctx->rebuild_arg);
}

/*
 * A restore of every unfinished job, done on a background thread
 * (defer.c): it reads every unfinished job of the tenant (of all, for the
 * admin key without X-Tenant) and asks Redis about each, minutes for
 * millions.
 */
struct restore_work {
	struct api_defer	 d;	/* first: the work's own pointer */
	int			 all;	/* every tenant's */
	int			 expired;
	char			 tenant[API_TENANT_MAX + 1];
};

static void
restore_all_work(struct api_defer *dd)
{
	struct restore_work *rw = (struct restore_work *)(void *)dd;
	struct api_ctx *ctx = rw->d.ctx;
	const char *tenant = rw->all ? NULL : rw->tenant;
	struct restore_ctx rc;
	struct jrnl_scan sc;
	enum jrnl_err e;

	memset(&rc, 0, sizeof(rc));
	rc.sched = ctx->sched;
	rc.now_ms = clock_wall_ms();
	rc.expired = rw->expired;
	if (jrnl_flush(ctx->jrnl) == -1) {
		api_journal_desc(&rw->d.err, "the journal cannot write its "
		    "queued transitions now; try again");
		return;
	}
	restore_check_lost(ctx);
	memset(&sc, 0, sizeof(sc));
	sc.tenant = tenant;
	sc.limit = RESTORE_PAGE;
	sc.include_dead = 1;
	for (;;) {
		rc.seen = 0;
		e = jrnl_scan_unfinished(ctx->jrnl, &sc, restore_one, &rc);
		if (e != JRNL_OK) {
			api_journal_desc(&rw->d.err, "the journal cannot be "
			    "read now: %s", jrnl_strerror(e));
			return;
		}
		if (rc.seen < RESTORE_PAGE)
			break;
		sc.after_tenant = rc.last_tenant;
		sc.after_id = rc.last_id;
	}
	log_info("api: restore%s%s: %lld restored, %lld present, %lld "
	    "skipped, %lld failed, %lld superseded", tenant ? " of " : "",
	    tenant ? tenant : "", (long long)rc.restored,
	    (long long)rc.present, (long long)rc.skipped,
	    (long long)rc.failed, (long long)rc.superseded);
	rw->d.reply = restore_json(&rc);
}

/*
 * Every unfinished job of the journal (one tenant, or all for the admin
 * key without X-Tenant) back into Redis: checked here, done on a
 * background thread, answered when it is done.
 */
static void
restore_all(struct api_req *req, const char *tenant, const char *flag)
{
	struct restore_work *rw;
	int expired;

	if (api_query_bool(req, flag, 1, &expired) == -1 ||
	    api_need_journal(req, "restoring jobs") == -1)
		return;
	rw = xcalloc(1, sizeof(*rw));
	rw->d.work = restore_all_work;
	rw->expired = expired;
	rw->all = tenant == NULL;
	if (tenant != NULL)
		snprintf(rw->tenant, sizeof(rw->tenant), "%s", tenant);
	api_defer(req, &rw->d);
}

/* The job {id} from the journal: /v1/jobs/{id}/restore and /restore/{id}. */
static void
restore_id(struct api_req *req)
{
	const char *id = req->param[0];
	struct api_ctx *ctx = api_ctx_of(req);
	struct restore_ctx rc;
	enum jrnl_err e;
	json_object *o;

	memset(&rc, 0, sizeof(rc));
	rc.sched = ctx->sched;
	rc.now_ms = clock_wall_ms();
	rc.expired = 1;
	if (api_check_job_id(req, id) == -1 ||
	    api_need_journal(req, "restoring a job") == -1)
		return;
	if (jrnl_flush(ctx->jrnl) == -1) {
		api_error(req, 503, "journal_unavailable", NULL,
		    "the journal cannot write its queued transitions now; "
		    "try again");
		return;
	}
	e = jrnl_get_job(ctx->jrnl, req->tenant, id, restore_one, &rc);
	if (e == JRNL_ENOTFOUND) {
		api_error(req, 404, "job_not_found", "id",
		    "the journal has no such job");
		return;
	}
	if (e != JRNL_OK) {
		api_error(req, 503, "journal_unavailable", NULL,
		    "the journal cannot be read now: %s", jrnl_strerror(e));
		return;
	}
	o = restore_json(&rc);
	json_object_object_add(o, "id", json_object_new_string(id));
	api_reply_json(req, 200, o);
}

/*
 * Recovery takes the admin key without X-Tenant (every tenant) as well as
 * a tenant's key: those routes are declared open and authenticate here.
 */
static int
restore_begin(struct api_req *req, const char **tenant)
{
	struct api_ctx *ctx = api_ctx_of(req);

	*tenant = NULL;
	if (api_header(req, "X-Tenant") == NULL &&
	    api_is_admin_request(req)) {
		req->admin = 1;
		return 0;
	}
	if (api_authenticate(req, API_AUTH_TENANT, ctx) == -1) {
		if (!req->answered)
			api_error(req, 401, "unauthorized", NULL,
			    "missing or invalid API key");
		return -1;
	}
	*tenant = req->tenant;
	return 0;
}

static void
v1_restore(struct api_req *req)
{
	const char *tenant;

	if (req->state != NULL)		/* done on the background thread */
		api_defer_answer(req, req->state);
	else if (restore_begin(req, &tenant) == 0)
		restore_all(req, tenant, "expired");
}

static void
orig_restore(struct api_req *req)
{
	const char *tenant;

	if (req->state != NULL)		/* done on the background thread */
		api_defer_answer(req, req->state);
	else if (restore_begin(req, &tenant) == 0)
		restore_all(req, tenant, "expire");
}

const struct api_route api_routes_original[] = {
	{ "POST", "/push", API_AUTH_TENANT, push,
	    "original: push a job", 0 },
	{ "GET", "/delete", API_AUTH_TENANT, delete,
	    "original: cancel a job", API_NO_HEAD },
	{ "GET", "/restore", API_AUTH_NONE, orig_restore,
	    "original: restore unfinished jobs from the journal",
	    API_NO_HEAD },
	{ "GET", "/restore/{id}", API_AUTH_TENANT, restore_id,
	    "original: restore one job from the journal", API_NO_HEAD },
	{ "GET", "/get/{topic}", API_AUTH_TENANT, get,
	    "original: long-poll reserve", API_NO_HEAD },
	{ "GET", "/finish", API_AUTH_TENANT, finish,
	    "original: ack a reserved job", API_NO_HEAD },
	{ "POST", "/v1/restore", API_AUTH_NONE, v1_restore,
	    "restore unfinished jobs from the journal", 0 },
	{ "POST", "/v1/jobs/{id}/restore", API_AUTH_TENANT, restore_id,
	    "restore one job from the journal", 0 },
	{ NULL, NULL, 0, NULL, NULL, 0 },
};
