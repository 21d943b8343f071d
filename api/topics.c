/*
 * topics.c - topics (tenant key): create or replace, read, list, delete,
 * rotate the signing secret; per-topic job operations that name the topic
 * (cancel by bizkey, the dead-letter list, redrive).
 *
 * Key decisions: PUT replaces the whole topic (absent members take their
 * defaults) but keeps its signing secret unless a new one is given, so
 * re-applying a configuration never breaks the receiver's signature checks.
 * The callback URL is checked against the SSRF policy at registration
 * (dispatcher/disp_url_check) and again on the address actually connected.
 * Every lookup is by (the caller's tenant, topic): another tenant's topic is
 * simply not found.
 *
 * Topics are also written to the journal (as the registry stores them,
 * signing secret included), in the order tenants.c uses: Redis first for a
 * put or a new secret, undone when the journal refuses (503
 * journal_unavailable); the journal first for a delete.  A put or a new
 * secret keeps part of the topic as Redis has it (never this instance's
 * cached copy) and is written only if the topic is still as read
 * (topic_write).
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "api/api.h"
#include "api/internal.h"
#include "api/validate.h"
#include "conf.h"
#include "dispatcher/dispatcher.h"
#include "journal/journal.h"
#include "scheduler/registry.h"
#include "scheduler/sched.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define TOPIC_DEFAULT_SCHEDULE	"<0,0,2m,10m,10m,1h,2h,6h,15h>"
#define TOPIC_DEFAULT_TTR_MS	30000
#define TOPIC_MAX_IN_FLIGHT	100000
#define DEAD_LIMIT_DEFAULT	100
#define DEAD_LIMIT_MAX		1000
#define CURSOR_MAX		256

/*
 * The lookup of api_topic_load and api_topic_hold: the registry's answer
 * e for topic name, as 404 or 503.  0 when found.
 */
static int
topic_found(struct api_req *req, const char *name, enum reg_err e)
{
	if (e == REG_ENOTFOUND) {
		if (!api_rebuilding(req))
			api_error(req, 404, "topic_not_found", "topic",
			    "no topic named %s", name);
		return -1;
	}
	if (e != REG_OK) {
		api_reg_error(req, e, "topic");
		return -1;
	}
	return 0;
}

int
api_topic_load(struct api_req *req, const char *name,
    struct registry_topic **out)
{
	struct api_ctx *ctx = api_ctx_of(req);

	*out = NULL;
	if (api_check_topic(req, name) == -1)
		return -1;
	return topic_found(req, name,
	    registry_topic_get(ctx->reg, req->tenant, name, out));
}

int
api_topic_hold(struct api_req *req, const char *name,
    const struct registry_topic **out)
{
	struct api_ctx *ctx = api_ctx_of(req);

	*out = NULL;
	if (api_check_topic(req, name) == -1)
		return -1;
	return topic_found(req, name,
	    registry_topic_hold(ctx->reg, req->tenant, name, out));
}

json_object *
api_topic_json(const struct registry_topic *t, int with_secret)
{
	json_object *o = json_object_new_object(), *h;
	char sched[SCHEDULE_FORMAT_MAX];
	size_t i;

	json_object_object_add(o, "name", json_object_new_string(t->name));
	json_object_object_add(o, "mode", json_object_new_string(
	    t->mode == REG_MODE_PULL ? "pull" : "push"));
	json_object_object_add(o, "callback_url", t->callback_url != NULL ?
	    json_object_new_string(t->callback_url) : NULL);
	if (schedule_format(&t->schedule, sched, sizeof(sched)) < 0)
		sched[0] = '\0';
	json_object_object_add(o, "retry_schedule",
	    json_object_new_string(sched));
	json_object_object_add(o, "timeout_ms",
	    json_object_new_int64(t->timeout_ms));
	h = json_object_new_object();
	for (i = 0; i < t->nheaders; i++)
		json_object_object_add(h, t->headers[i].name,
		    json_object_new_string(t->headers[i].value));
	json_object_object_add(o, "headers", h);
	json_object_object_add(o, "max_in_flight",
	    json_object_new_int(t->max_in_flight));
	json_object_object_add(o, "ttr_ms", json_object_new_int64(t->ttr_ms));
	if (with_secret)
		json_object_object_add(o, "secret",
		    json_object_new_string(t->secret));
	json_object_object_add(o, "created_ms",
	    json_object_new_int64(t->created_ms));
	json_object_object_add(o, "updated_ms",
	    json_object_new_int64(t->updated_ms));
	return o;
}

/* {"scheduled": n, ...}: one member per state. */
json_object *
api_counts_json(const int64_t counts[SCHED_NSTATES])
{
	json_object *o = json_object_new_object();
	int i;

	for (i = 0; i < SCHED_NSTATES; i++)
		json_object_object_add(o, sched_state_name((enum sched_state)i),
		    json_object_new_int64(counts[i]));
	return o;
}

/* Fill t from the PUT body; 0, or -1 after answering 400. */
static int
topic_from_body(struct api_req *req, json_object *body,
    struct registry_topic *t, const struct registry_topic *old)
{
	static const char *const allowed[] = { "callback_url",
		"retry_schedule", "timeout_ms", "headers", "max_in_flight",
		"mode", "ttr_ms", "secret", NULL };
	const char *url = NULL, *mode = NULL, *secret = NULL;
	int64_t horizon = CONF_GET(limit_horizon_ms), v;
	json_object *sched = NULL, *hdrs = NULL;
	char why[256], *hj = NULL;
	int has_url;

	if (api_json_only(req, body, allowed, "") == -1 ||
	    api_json_string(req, body, "callback_url", "callback_url",
	    DISP_URL_MAX, &url, &has_url) == -1 ||
	    api_json_string(req, body, "mode", "mode", 16, &mode,
	    NULL) == -1 ||
	    api_json_string(req, body, "secret", "secret", REG_SECRET_MAX,
	    &secret, NULL) == -1)
		return -1;
	if (mode == NULL)
		t->mode = has_url ? REG_MODE_PUSH : REG_MODE_PULL;
	else if (strcmp(mode, "push") == 0)
		t->mode = REG_MODE_PUSH;
	else if (strcmp(mode, "pull") == 0)
		t->mode = REG_MODE_PULL;
	else {
		api_error(req, 400, "invalid_field", "mode",
		    "mode must be \"push\" or \"pull\"");
		return -1;
	}
	if (t->mode == REG_MODE_PUSH && !has_url) {
		api_error(req, 400, "missing_field", "callback_url",
		    "a push topic needs a callback_url");
		return -1;
	}
	if (has_url) {
		if (disp_url_check(url, (int)CONF_GET(disp_allow_private), why,
		    sizeof(why)) == -1) {
			api_error(req, 400, "invalid_url", "callback_url",
			    "callback_url is refused: %s", why);
			return -1;
		}
		t->callback_url = xstrdup(url);
	}

	if (json_object_object_get_ex(body, "retry_schedule", &sched) &&
	    !json_object_is_type(sched, json_type_null)) {
		if (api_json_schedule(req, sched, "retry_schedule", horizon,
		    &t->schedule) == -1)
			return -1;
	} else if (schedule_parse(TOPIC_DEFAULT_SCHEDULE,
	    strlen(TOPIC_DEFAULT_SCHEDULE), 0, &t->schedule, NULL) == -1) {
		api_error(req, 500, "internal", NULL, "default schedule");
		return -1;
	}

	t->timeout_ms = CONF_GET(disp_timeout_ms);
	if (api_json_int(req, body, "timeout_ms", "timeout_ms", 1,
	    CONF_GET(disp_max_timeout_ms), &t->timeout_ms, NULL) == -1)
		return -1;
	v = CONF_GET(disp_max_in_flight);
	if (api_json_int(req, body, "max_in_flight", "max_in_flight", 1,
	    TOPIC_MAX_IN_FLIGHT, &v, NULL) == -1)
		return -1;
	t->max_in_flight = (int)v;
	t->ttr_ms = TOPIC_DEFAULT_TTR_MS;
	if (api_json_int(req, body, "ttr_ms", "ttr_ms", 1, horizon,
	    &t->ttr_ms, NULL) == -1)
		return -1;

	json_object_object_get_ex(body, "headers", &hdrs);
	if (api_json_headers(req, hdrs, "headers", &hj) == -1)
		return -1;
	free(hj);
	if (hdrs != NULL && json_object_is_type(hdrs, json_type_object)) {
		json_object_object_foreach(hdrs, k, hv)
			registry_topic_add_header(t, k,
			    json_object_get_string(hv));
	}

	if (secret != NULL) {
		if (registry_topic_set_secret(t, secret) == -1) {
			api_error(req, 400, "invalid_field", "secret",
			    "secret must be whsec_ and the base64 of 16 to %d "
			    "bytes", REG_SECRET_RAW_MAX);
			return -1;
		}
	} else if (old != NULL) {
		memcpy(t->secret, old->secret, sizeof(t->secret));
		memcpy(t->secret_raw, old->secret_raw, sizeof(t->secret_raw));
		t->secret_len = old->secret_len;
	} else if (registry_topic_new_secret(t) == -1) {
		api_error(req, 500, "internal", NULL, "no random bytes");
		return -1;
	}
	return 0;
}

/* The topic as it is now in Redis, into the journal. */
static enum jrnl_err
journal_topic(struct api_ctx *ctx, const struct registry_topic *t)
{
	struct jrnl_topic jt;
	enum jrnl_err e;
	char *json;

	if (ctx->jrnl == NULL)
		return JRNL_OK;
	json = registry_topic_json(t);
	memset(&jt, 0, sizeof(jt));
	jt.tenant = t->tenant;
	jt.name = t->name;
	jt.config_json = json;
	jt.created_ms = t->created_ms;
	jt.updated_ms = t->updated_ms;
	e = jrnl_put_topic(ctx->jrnl, &jt);
	free(json);
	return e;
}

/*
 * The journal refused t, just put in Redis: put back old (NULL: t was new,
 * delete it) and answer 503.  old goes back only over t itself: a change
 * made since by another instance stays.
 */
static void
journal_refused(struct api_req *req, enum jrnl_err je,
    const struct registry_topic *t, struct registry_topic *old)
{
	struct api_ctx *ctx = api_ctx_of(req);
	enum reg_err e;
	char *mine;
	int created;

	if (old != NULL) {
		mine = registry_topic_json(t);
		e = registry_topic_put_if(ctx->reg, old, old->updated_ms, mine,
		    &created);
		free(mine);
	} else
		e = registry_topic_delete(ctx->reg, t->tenant, t->name);
	if (e != REG_OK)
		log_warnx("api: topic %s/%s: cannot undo the change: %s",
		    t->tenant, t->name, registry_strerror(e));
	log_warnx("api: journal: topic %s/%s not recorded: %s", t->tenant,
	    t->name, jrnl_strerror(je));
	api_error(req, 503, "journal_unavailable", NULL,
	    "the journal cannot record the topic now (%s); nothing was "
	    "changed, try again", jrnl_strerror(je));
}

/*
 * A PUT or a rotation keeps part of the topic as it was (its secret, or
 * all but the secret): read from Redis, changed, and written only if the
 * topic is still as read (registry_topic_put_if), else read again, at
 * most TOPIC_TRIES times (then 409).  The topic's write lock
 * (api_write_lock) orders this instance's changes of it, so their journal
 * rows are written in the order Redis took them, and keeps them out of a
 * delete's two writes.
 */
#define TOPIC_TRIES	8

/*
 * Writes t (read from Redis as raw, old: NULL when new) to Redis and the
 * journal under the topic's write lock.  1 when the topic changed since
 * it was read (nothing written, nothing answered), 0 when answered:
 * created or not with *created, -1 after an error answer.
 */
static int
topic_write(struct api_req *req, struct registry_topic *t,
    struct registry_topic *old, const char *raw, int *created)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct api_wlock *lock;
	enum reg_err e;
	enum jrnl_err je;

	lock = api_write_lock(t->tenant, t->name);
	e = registry_topic_put_if(ctx->reg, t, clock_wall_ms(), raw, created);
	if (e == REG_ECHANGED) {
		api_write_unlock(lock);
		return 1;
	}
	if (e != REG_OK) {
		api_write_unlock(lock);
		api_reg_error(req, e, e == REG_ENOTFOUND ? "tenant" : "topic");
		return -1;
	}
	if ((je = journal_topic(ctx, t)) != JRNL_OK) {
		journal_refused(req, je, t, *created ? NULL : old);
		api_write_unlock(lock);
		return -1;
	}
	api_write_unlock(lock);
	return 0;
}

/*
 * Drops what an earlier try read and made (*old, *t, *raw), and reads the
 * request's topic from Redis again into *old and *raw.
 */
static enum reg_err
topic_reread(struct api_req *req, struct registry_topic **old,
    struct registry_topic **t, char **raw)
{
	registry_topic_free(*old);
	registry_topic_free(*t);
	free(*raw);
	*old = *t = NULL;
	return registry_topic_read(api_ctx_of(req)->reg, req->tenant,
	    req->param[0], old, raw);
}

static void
topic_put(struct api_req *req)
{
	struct registry_topic *t = NULL, *old = NULL;
	json_object *body = NULL;
	enum reg_err e;
	char *raw = NULL;
	int created, tries, rc = 1;

	if (api_check_topic(req, req->param[0]) == -1 ||
	    api_body_json(req, &body) == -1)
		goto out;
	for (tries = 0; rc == 1 && tries < TOPIC_TRIES; tries++) {
		e = topic_reread(req, &old, &t, &raw);
		if (e != REG_OK && e != REG_ENOTFOUND) {
			api_reg_error(req, e, "topic");
			goto out;
		}
		t = registry_topic_new();
		snprintf(t->tenant, sizeof(t->tenant), "%s", req->tenant);
		snprintf(t->name, sizeof(t->name), "%s", req->param[0]);
		if (topic_from_body(req, body, t, old) == -1)
			goto out;
		rc = topic_write(req, t, old, raw, &created);
	}
	if (rc == 1)
		api_reg_error(req, REG_ECHANGED, "topic");
	else if (rc == 0)
		api_reply_json(req, created ? 201 : 200, api_topic_json(t, 1));
out:
	free(raw);
	registry_topic_free(old);
	registry_topic_free(t);
	json_object_put(body);
}

static void
topic_get(struct api_req *req)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct registry_topic *t;
	int64_t counts[SCHED_NSTATES];
	enum sched_err e;
	json_object *o;

	if (api_topic_load(req, req->param[0], &t) == -1)
		return;
	o = api_topic_json(t, 1);
	if (ctx->sched != NULL) {
		e = sched_counts(ctx->sched, req->tenant, t->name, counts);
		if (e != SCHED_OK) {
			json_object_put(o);
			registry_topic_free(t);
			api_sched_error(req, e, "topic");
			return;
		}
		json_object_object_add(o, "counts", api_counts_json(counts));
	}
	registry_topic_free(t);
	api_reply_json(req, 200, o);
}

static void
topic_list(struct api_req *req)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct registry_topic **v;
	json_object *o, *a;
	enum reg_err e;
	size_t i, n;

	if ((e = registry_topic_list(ctx->reg, req->tenant, &v, &n)) !=
	    REG_OK) {
		api_reg_error(req, e, "topic");
		return;
	}
	o = json_object_new_object();
	a = json_object_new_array();
	for (i = 0; i < n; i++)
		json_object_array_add(a, api_topic_json(v[i], 0));
	json_object_object_add(o, "topics", a);
	registry_topic_list_free(v, n);
	api_reply_json(req, 200, o);
}

/* A topic's deletion, done on the background thread (defer.c). */
struct topic_del {
	struct api_defer	 d;	/* first: the work's own pointer */
	char			 tenant[API_TENANT_MAX + 1];
	char			 name[REG_TOPIC_MAX + 1];
};

static void
topic_delete_work(struct api_defer *dd)
{
	struct topic_del *td = (struct topic_del *)(void *)dd;
	struct api_ctx *ctx = td->d.ctx;
	struct api_wlock *lock;
	enum reg_err e;
	enum jrnl_err je;

	/* The journal first (it cancels the topic's unfinished jobs there
	 * too), so a restore never brings back what a 204 removed; a PUT or
	 * rotation here waits (the lock) until the registry has let go. */
	lock = api_write_lock(td->tenant, td->name);
	if (ctx->jrnl != NULL && (je = jrnl_delete_topic(ctx->jrnl,
	    td->tenant, td->name)) != JRNL_OK && je != JRNL_ENOTFOUND) {
		api_write_unlock(lock);
		log_warnx("api: journal: topic %s/%s not deleted: %s",
		    td->tenant, td->name, jrnl_strerror(je));
		api_journal_desc(&td->d.err, "the journal cannot record the "
		    "deletion now (%s); nothing was changed, try again",
		    jrnl_strerror(je));
		return;
	}
	/* Then its jobs leave Redis, before and after the registry (a
	 * push that loaded the topic before it went may still land), so
	 * none is delivered and a topic made again starts empty. */
	if (api_drop_jobs(ctx, td->tenant, td->name, &td->d.err) == -1) {
		api_write_unlock(lock);
		return;
	}
	e = registry_topic_delete(ctx->reg, td->tenant, td->name);
	api_write_unlock(lock);
	if (e != REG_OK)
		api_reg_describe(e, "topic", &td->d.err);
	else
		(void)api_drop_jobs(ctx, td->tenant, td->name, &td->d.err);
}

/*
 * Checked here; deleted on the background thread, which may take seconds
 * for a topic with many jobs (defer.c), and answered when it is done.
 */
static void
topic_delete(struct api_req *req)
{
	struct topic_del *td = req->state;
	struct registry_topic *t;

	if (td != NULL) {
		api_defer_answer(req, &td->d);
		return;
	}
	if (api_topic_load(req, req->param[0], &t) == -1)
		return;
	if (api_unfinished_guard(req, req->tenant, t->name) == -1) {
		registry_topic_free(t);
		return;
	}
	td = xcalloc(1, sizeof(*td));
	td->d.work = topic_delete_work;
	snprintf(td->tenant, sizeof(td->tenant), "%s", req->tenant);
	snprintf(td->name, sizeof(td->name), "%s", t->name);
	registry_topic_free(t);
	log_info("api: topic %s/%s: deleting", td->tenant, td->name);
	api_defer(req, &td->d);
}

static void
topic_secret(struct api_req *req)
{
	static const char *const allowed[] = { "secret", NULL };
	struct registry_topic *t = NULL, *old = NULL;
	json_object *body = NULL;
	const char *secret = NULL;
	enum reg_err e;
	char *raw = NULL;
	int created, tries, rc = 1;

	if (api_check_topic(req, req->param[0]) == -1)
		goto out;
	if (req->body.len > 0 && (api_body_json(req, &body) == -1 ||
	    api_json_only(req, body, allowed, "") == -1 ||
	    api_json_string(req, body, "secret", "secret", REG_SECRET_MAX,
	    &secret, NULL) == -1))
		goto out;
	for (tries = 0; rc == 1 && tries < TOPIC_TRIES; tries++) {
		e = topic_reread(req, &old, &t, &raw);
		if (topic_found(req, req->param[0], e) == -1)
			goto out;
		t = registry_topic_dup(old);
		if ((secret != NULL ? registry_topic_set_secret(t, secret) :
		    registry_topic_new_secret(t)) == -1) {
			api_error(req, 400, "invalid_field", "secret",
			    "secret must be whsec_ and the base64 of 16 to %d "
			    "bytes", REG_SECRET_RAW_MAX);
			goto out;
		}
		rc = topic_write(req, t, old, raw, &created);
	}
	if (rc == 1)
		api_reg_error(req, REG_ECHANGED, "topic");
	else if (rc == 0)
		api_reply_json(req, 200, api_topic_json(t, 1));
out:
	free(raw);
	registry_topic_free(old);
	registry_topic_free(t);
	json_object_put(body);
}

static void
bizkey_cancel(struct api_req *req)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct registry_topic *t;
	char id[ID_LEN + 65];
	enum sched_err e;

	if (req->state != NULL) {	/* called again: journaled */
		if (api_change_durable(req, NULL) == 0)
			api_reply_empty(req, 204);
		return;
	}
	if (api_check_topic(req, req->param[0]) == -1 ||
	    api_check_bizkey(req, req->param[1], "bizkey") == -1 ||
	    api_topic_load(req, req->param[0], &t) == -1)
		return;
	e = sched_cancel_bizkey(ctx->sched, req->tenant, t->name,
	    req->param[1], id);
	registry_topic_free(t);
	if (e == SCHED_ENOTFOUND) {
		if (!api_rebuilding(req))
			api_error(req, 404, "job_not_found", "bizkey",
			    "no unfinished job has that bizkey in this "
			    "topic");
		return;
	}
	if (e != SCHED_OK) {
		api_sched_error(req, e, "job");
		return;
	}
	if (api_change_durable(req, NULL) == 0)
		api_reply_empty(req, 204);
}

/* The cursor query argument: printable ASCII, bounded; "" when absent. */
int
api_query_cursor(struct api_req *req, const char **out)
{
	const char *c = api_query(req, "cursor");
	size_t i;

	*out = "";
	if (c == NULL)
		return 0;
	for (i = 0; c[i] != '\0'; i++)
		if (i >= CURSOR_MAX || c[i] <= ' ' || c[i] > '~') {
			api_error(req, 400, "invalid_field", "cursor",
			    "cursor must be the next_cursor of an earlier "
			    "answer");
			return -1;
		}
	*out = c;
	return 0;
}

static void
dead_list(struct api_req *req)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct registry_topic *t = NULL;
	struct sched_job **jobs = NULL;
	char next[CURSOR_MAX + 1] = "";
	json_object *o, *a;
	const char *cursor;
	enum sched_err e;
	int64_t limit;
	size_t i, n = 0;

	if (api_topic_load(req, req->param[0], &t) == -1 ||
	    api_query_int(req, "limit", 1, DEAD_LIMIT_MAX, DEAD_LIMIT_DEFAULT,
	    &limit) == -1 || api_query_cursor(req, &cursor) == -1)
		goto out;
	e = sched_dead_list(ctx->sched, req->tenant, t->name, cursor,
	    (size_t)limit, &jobs, &n, next, sizeof(next));
	if (e == SCHED_EINVAL && *cursor != '\0') {
		/* The names were checked: what it refused is the cursor. */
		api_error(req, 400, "invalid_field", "cursor",
		    "cursor must be the next_cursor of an earlier answer");
		goto out;
	}
	if (e != SCHED_OK) {
		api_sched_error(req, e, "topic");
		goto out;
	}
	o = json_object_new_object();
	a = json_object_new_array();
	for (i = 0; i < n; i++)
		json_object_array_add(a, api_job_json(jobs[i], 0));
	json_object_object_add(o, "jobs", a);
	json_object_object_add(o, "next_cursor", next[0] != '\0' ?
	    json_object_new_string(next) : NULL);
	api_reply_json(req, 200, o);
out:
	for (i = 0; i < n; i++)
		sched_job_free(jobs[i]);
	free(jobs);
	registry_topic_free(t);
}

/* A redrive, done on a background thread (defer.c): seconds for many. */
struct redrive_work {
	struct api_defer	 d;	/* first: the work's own pointer */
	char			 tenant[API_TENANT_MAX + 1];
	char			 name[REG_TOPIC_MAX + 1];
};

static void
redrive_work(struct api_defer *dd)
{
	struct redrive_work *rw = (struct redrive_work *)(void *)dd;
	struct api_ctx *ctx = rw->d.ctx;
	enum sched_err e;
	int64_t count = 0, skipped = 0;
	char what[sizeof(rw->name) + 32];

	e = sched_redrive(ctx->sched, rw->tenant, rw->name, &count, &skipped);
	if (e != SCHED_OK) {
		api_sched_describe(e, "topic", &rw->d.err);
		return;
	}
	/* Its transitions went to the journal from this thread. */
	snprintf(what, sizeof(what), "the redrive of %s", rw->name);
	if (api_change_durable_wait(ctx, what, rw->tenant, &rw->d.err) == -1)
		return;
	rw->d.reply = json_object_new_object();
	json_object_object_add(rw->d.reply, "redriven",
	    json_object_new_int64(count));
	/* Left dead: their bizkey is held by another unfinished job. */
	json_object_object_add(rw->d.reply, "skipped",
	    json_object_new_int64(skipped));
}

static void
dead_redrive(struct api_req *req)
{
	struct redrive_work *rw = req->state;
	struct registry_topic *t;

	if (rw != NULL) {
		api_defer_answer(req, &rw->d);
		return;
	}
	if (api_topic_load(req, req->param[0], &t) == -1)
		return;
	if (api_body_none(req) == -1) {
		registry_topic_free(t);
		return;
	}
	rw = xcalloc(1, sizeof(*rw));
	rw->d.work = redrive_work;
	snprintf(rw->tenant, sizeof(rw->tenant), "%s", req->tenant);
	snprintf(rw->name, sizeof(rw->name), "%s", t->name);
	registry_topic_free(t);
	api_defer(req, &rw->d);
}

const struct api_route api_routes_topics[] = {
	{ "GET", "/v1/topics", API_AUTH_TENANT, topic_list,
	    "list the tenant's topics", 0 },
	{ "PUT", "/v1/topics/{topic}", API_AUTH_TENANT, topic_put,
	    "create or replace a topic", 0 },
	{ "GET", "/v1/topics/{topic}", API_AUTH_TENANT, topic_get,
	    "a topic with its counts per state", 0 },
	{ "DELETE", "/v1/topics/{topic}", API_AUTH_TENANT, topic_delete,
	    "delete a topic", 0 },
	{ "POST", "/v1/topics/{topic}/secret", API_AUTH_TENANT, topic_secret,
	    "rotate the signing secret", 0 },
	{ "DELETE", "/v1/topics/{topic}/bizkeys/{bizkey}", API_AUTH_TENANT,
	    bizkey_cancel, "cancel the unfinished job with a bizkey", 0 },
	{ "GET", "/v1/topics/{topic}/dead", API_AUTH_TENANT, dead_list,
	    "the dead-letter list", 0 },
	{ "POST", "/v1/topics/{topic}/dead:redrive", API_AUTH_TENANT,
	    dead_redrive, "run every dead job again", 0 },
	{ NULL, NULL, 0, NULL, NULL, 0 },
};
