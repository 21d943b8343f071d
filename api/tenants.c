/*
 * tenants.c - the admin API: tenants and their keys (admin key only).
 *
 * Key decisions: a key is shown once, in the answer that creates it; only its
 * hash is stored (scheduler/registry.c).  Creating a tenant issues its first
 * key, so a new tenant can work at once.  A tenant (or, in topics.c, a topic)
 * that still has unfinished jobs is not deleted unless the admin says
 * ?force=true, so a slip of the hand does not orphan accepted jobs.
 *
 * Every change is also written to the journal (when there is one), so the
 * tenants and key hashes survive Redis losing its data, and a 2xx means
 * both hold it.  Order: Redis first for what adds (a tenant, a key, a
 * quota), so Redis decides conflicts; when the journal then refuses, the
 * Redis change is undone and the answer is 503 journal_unavailable.  The
 * journal first for what takes away (deleting a tenant, revoking a key),
 * so a restore can never bring back what a 2xx removed.  The journal is
 * needed in every journal mode: these writes are rare, and a revoked key
 * must not come back.
 *
 * Key decision: PATCH changes only the settings its body names (null clears
 * one), so setting one override never clears the other.  A tenant's
 * max_in_flight is kept as given, even above dispatcher.max_total_in_flight
 * (an instance's total may differ from another's and change at a restart);
 * the cap in force shown is what this instance applies: at most its total.
 */
#include "config.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "api/api.h"
#include "api/internal.h"
#include "api/obs.h"
#include "api/validate.h"
#include "conf.h"
#include "dispatcher/dispatcher.h"
#include "journal/journal.h"
#include "scheduler/registry.h"
#include "scheduler/sched.h"
#include "util/clock.h"
#include "util/crypto.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define MAX_PENDING_LIMIT	INT64_C(1000000000000)
/* As dispatcher.max_total_in_flight's. */
#define MAX_IN_FLIGHT_LIMIT	INT64_C(1000000)

static json_object *
tenant_json(struct api_ctx *ctx, const struct registry_tenant *t)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "name", json_object_new_string(t->name));
	json_object_object_add(o, "created_ms",
	    json_object_new_int64(t->created_ms));
	json_object_object_add(o, "max_pending", json_object_new_int64(
	    t->max_pending > 0 ? t->max_pending :
	    CONF_GET(limit_max_pending)));
	json_object_object_add(o, "max_pending_override", t->max_pending > 0 ?
	    json_object_new_int64(t->max_pending) : NULL);
	json_object_object_add(o, "max_in_flight", json_object_new_int(
	    disp_tenant_cap_for(ctx->disp, (int)t->max_in_flight)));
	json_object_object_add(o, "max_in_flight_override",
	    t->max_in_flight > 0 ? json_object_new_int64(t->max_in_flight) :
	    NULL);
	json_object_object_add(o, "keys", json_object_new_int(t->nkeys));
	return o;
}

static json_object *
key_json(const char *key_id, int64_t created_ms, const char *api_key)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "key_id", json_object_new_string(key_id));
	if (api_key != NULL)
		json_object_object_add(o, "api_key",
		    json_object_new_string(api_key));
	json_object_object_add(o, "created_ms",
	    json_object_new_int64(created_ms));
	return o;
}

/* ------------------------------------------------------------------ */
/* The journal's copy */

/* The 503 for a journal that refused a registry change, into *d. */
static void
journal_refused_desc(struct api_err_desc *d, enum jrnl_err e,
    const char *what, const char *name)
{
	log_warnx("api: journal: %s %s not recorded: %s", what, name,
	    jrnl_strerror(e));
	api_journal_desc(d, "the journal cannot record the %s now (%s); "
	    "nothing was changed, try again", what, jrnl_strerror(e));
}

/* Answer 503 for a journal that refused a registry change. */
static void
journal_refused(struct api_req *req, enum jrnl_err e, const char *what,
    const char *name)
{
	struct api_err_desc d;

	journal_refused_desc(&d, e, what, name);
	api_error_desc(req, &d);
}

static enum jrnl_err
journal_tenant(struct api_ctx *ctx, const char *name, int64_t created_ms,
    int64_t max_pending, int64_t max_in_flight)
{
	struct jrnl_tenant jt;
	enum jrnl_err e;
	char *settings;

	if (ctx->jrnl == NULL)
		return JRNL_OK;
	settings = registry_tenant_settings_json(max_pending, max_in_flight);
	memset(&jt, 0, sizeof(jt));
	jt.name = name;
	jt.created_ms = created_ms;
	jt.settings_json = settings;
	e = jrnl_put_tenant(ctx->jrnl, &jt);
	free(settings);
	return e;
}

/* A new key: only the hash of api_key is written. */
static enum jrnl_err
journal_key(struct api_ctx *ctx, const char *tenant, const char *key_id,
    const char *api_key, int64_t created_ms)
{
	struct jrnl_key jk;
	uint8_t h[SHA256_LEN];
	char hex[2 * SHA256_LEN + 1];

	if (ctx->jrnl == NULL)
		return JRNL_OK;
	sha256(api_key, strlen(api_key), h);
	hex_encode(h, sizeof(h), hex);
	memset(&jk, 0, sizeof(jk));
	jk.tenant = tenant;
	jk.key_id = key_id;
	jk.hash_hex = hex;
	jk.created_ms = created_ms;
	return jrnl_put_key(ctx->jrnl, &jk);
}

/* The tenant named by the path: 0, or -1 after answering. */
static int
load_tenant(struct api_req *req, struct registry_tenant *t)
{
	struct api_ctx *ctx = api_ctx_of(req);
	enum reg_err e;

	if (api_check_tenant(req, req->param[0], "name") == -1)
		return -1;
	if ((e = registry_tenant_get(ctx->reg, req->param[0], t)) != REG_OK) {
		api_reg_error(req, e, "tenant");
		return -1;
	}
	return 0;
}

static void
tenant_create(struct api_req *req)
{
	static const char *const allowed[] = { "name", "max_pending",
	    "max_in_flight", NULL };
	struct api_ctx *ctx = api_ctx_of(req);
	char api_key[REG_API_KEY_LEN + 1], key_id[REG_KEY_ID_MAX + 1];
	struct registry_tenant t;
	json_object *body = NULL, *o;
	const char *name = NULL;
	int64_t maxp = 0, maxf = 0, now = clock_wall_ms();
	enum reg_err e;
	enum jrnl_err je;
	int present;

	if (api_body_json(req, &body) == -1 ||
	    api_json_only(req, body, allowed, "") == -1 ||
	    api_json_string(req, body, "name", "name", 64, &name,
	    &present) == -1 ||
	    api_json_int(req, body, "max_pending", "max_pending", 1,
	    MAX_PENDING_LIMIT, &maxp, NULL) == -1 ||
	    api_json_int(req, body, "max_in_flight", "max_in_flight", 1,
	    MAX_IN_FLIGHT_LIMIT, &maxf, NULL) == -1)
		goto out;
	if (!present) {
		api_error(req, 400, "missing_field", "name",
		    "name is required");
		goto out;
	}
	if (api_check_tenant(req, name, "name") == -1)
		goto out;
	e = registry_tenant_create(ctx->reg, name, maxp, maxf, now, api_key,
	    key_id);
	if (e == REG_EEXISTS) {
		api_error(req, 409, "tenant_exists", "name",
		    "a tenant named %s exists already", name);
		goto out;
	}
	if (e != REG_OK) {
		api_reg_error(req, e, "tenant");
		goto out;
	}
	if ((je = journal_tenant(ctx, name, now, maxp, maxf)) != JRNL_OK ||
	    (je = journal_key(ctx, name, key_id, api_key, now)) != JRNL_OK) {
		/*
		 * Undo in Redis.  A tenant row the journal may have taken
		 * stays: deleting it would cancel the jobs of a tenant of
		 * that name that the journal holds (Redis may have lost it
		 * and not be restored yet); without a key it opens nothing.
		 */
		if ((e = registry_tenant_delete(ctx->reg, name)) != REG_OK)
			log_warnx("api: tenant %s: cannot undo the creation: "
			    "%s", name, registry_strerror(e));
		explicit_bzero(api_key, sizeof(api_key));
		journal_refused(req, je, "tenant", name);
		goto out;
	}
	memset(&t, 0, sizeof(t));
	snprintf(t.name, sizeof(t.name), "%s", name);
	t.created_ms = now;
	t.max_pending = maxp;
	t.max_in_flight = maxf;
	t.nkeys = 1;
	disp_tenant_set_cap(ctx->disp, name, (int)maxf);
	o = tenant_json(ctx, &t);
	json_object_object_add(o, "key_id", json_object_new_string(key_id));
	json_object_object_add(o, "api_key", json_object_new_string(api_key));
	explicit_bzero(api_key, sizeof(api_key));
	api_reply_json(req, 201, o);
out:
	json_object_put(body);
}

static void
tenant_list(struct api_req *req)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct registry_tenant *v;
	json_object *o, *a;
	enum reg_err e;
	size_t i, n;

	if ((e = registry_tenant_list(ctx->reg, &v, &n)) != REG_OK) {
		api_reg_error(req, e, "tenant");
		return;
	}
	o = json_object_new_object();
	a = json_object_new_array();
	for (i = 0; i < n; i++)
		json_object_array_add(a, tenant_json(ctx, &v[i]));
	json_object_object_add(o, "tenants", a);
	free(v);
	api_reply_json(req, 200, o);
}

/*
 * The tenant with its keys and counts.  A GET whose counts cannot be read
 * answers the scheduler's error (503 while Redis is unavailable), as a
 * topic's GET does; a PATCH (changed) has made its change, so its answer
 * leaves the counts out rather than call the change failed.
 */
static void
tenant_reply(struct api_req *req, const struct registry_tenant *t,
    int changed)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct registry_key *keys = NULL;
	int64_t counts[SCHED_NSTATES];
	json_object *o, *a;
	enum sched_err se = SCHED_OK;
	enum reg_err e;
	size_t i, n = 0;

	if (ctx->sched != NULL) {
		se = sched_counts(ctx->sched, t->name, NULL, counts);
		if (se != SCHED_OK && !changed) {
			api_sched_error(req, se, "tenant");
			return;
		}
	}
	if ((e = registry_key_list(ctx->reg, t->name, &keys, &n)) != REG_OK) {
		api_reg_error(req, e, "tenant");
		return;
	}
	o = tenant_json(ctx, t);
	a = json_object_new_array();
	for (i = 0; i < n; i++)
		json_object_array_add(a, key_json(keys[i].key_id,
		    keys[i].created_ms, NULL));
	json_object_object_add(o, "keys", a);
	free(keys);
	if (ctx->sched != NULL && se == SCHED_OK)
		json_object_object_add(o, "counts", api_counts_json(counts));
	api_reply_json(req, 200, o);
}

static void
tenant_get(struct api_req *req)
{
	struct registry_tenant t;

	if (load_tenant(req, &t) == 0)
		tenant_reply(req, &t, 0);
}

/*
 * A setting of a PATCH body: *v unchanged when the member is absent, 0
 * when it is null (back to the configured default).  0, or -1 answered.
 */
static int
patch_int(struct api_req *req, json_object *body, const char *name,
    int64_t max, int64_t *v)
{
	int present;

	if (api_json_int(req, body, name, name, 1, max, v, &present) == -1)
		return -1;
	if (!present && json_object_object_get_ex(body, name, NULL))
		*v = 0;
	return 0;
}

/*
 * A PATCH writes only the members its body names (the registry's script
 * reads the others as they are in Redis, not as this instance cached
 * them), and journals both as they then are, under the tenant's write
 * lock (api_write_lock), so this instance journals its PATCHes of a tenant
 * in the order they changed Redis; PATCHes made at the same moment on two
 * instances can still journal out of order (docs/internals/JOURNAL.md).
 */
static void
tenant_patch(struct api_req *req)
{
	static const char *const allowed[] = { "max_pending",
	    "max_in_flight", NULL };
	struct api_ctx *ctx = api_ctx_of(req);
	struct registry_tenant t;
	json_object *body = NULL;
	int64_t maxp = REG_LIMIT_KEEP, maxf = REG_LIMIT_KEEP, now[2], was[2];
	enum reg_err e;
	enum jrnl_err je;
	struct api_wlock *lock;

	if (load_tenant(req, &t) == -1 || api_body_json(req, &body) == -1 ||
	    api_json_only(req, body, allowed, "") == -1)
		goto out;
	if (patch_int(req, body, "max_pending", MAX_PENDING_LIMIT,
	    &maxp) == -1 ||
	    patch_int(req, body, "max_in_flight", MAX_IN_FLIGHT_LIMIT,
	    &maxf) == -1)
		goto out;
	lock = api_write_lock(t.name, NULL);
	e = registry_tenant_set_limits(ctx->reg, t.name, maxp, maxf, now, was);
	if (e != REG_OK) {
		api_write_unlock(lock);
		api_reg_error(req, e, "tenant");
		goto out;
	}
	if ((je = journal_tenant(ctx, t.name, t.created_ms, now[0],
	    now[1])) != JRNL_OK) {
		/* The members named go back to what they were. */
		if ((e = registry_tenant_set_limits(ctx->reg, t.name,
		    maxp == REG_LIMIT_KEEP ? REG_LIMIT_KEEP : was[0],
		    maxf == REG_LIMIT_KEEP ? REG_LIMIT_KEEP : was[1], NULL,
		    NULL)) != REG_OK)
			log_warnx("api: tenant %s: cannot undo the limits' "
			    "change: %s", t.name, registry_strerror(e));
		api_write_unlock(lock);
		journal_refused(req, je, "tenant", t.name);
		goto out;
	}
	api_write_unlock(lock);
	/* This instance at once; the others at their next timer pass. */
	disp_tenant_set_cap(ctx->disp, t.name, (int)now[1]);
	if ((e = registry_tenant_get(ctx->reg, t.name, &t)) != REG_OK) {
		api_reg_error(req, e, "tenant");
		goto out;
	}
	tenant_reply(req, &t, 1);
out:
	json_object_put(body);
}

/* 0 when the tenant (topic NULL) or topic has no unfinished job. */
int
api_unfinished_guard(struct api_req *req, const char *tenant,
    const char *topic)
{
	struct api_ctx *ctx = api_ctx_of(req);
	int64_t counts[SCHED_NSTATES], n;
	enum sched_err e;
	int force;

	if (api_query_bool(req, "force", 0, &force) == -1)
		return -1;
	if (force || ctx->sched == NULL)
		return 0;
	if ((e = sched_counts(ctx->sched, tenant, topic, counts)) !=
	    SCHED_OK) {
		api_sched_error(req, e, topic != NULL ? "topic" : "tenant");
		return -1;
	}
	n = counts[SCHED_SCHEDULED] + counts[SCHED_READY] +
	    counts[SCHED_IN_FLIGHT] + counts[SCHED_RETRYING];
	if (n == 0)
		return 0;
	api_error(req, 409, topic != NULL ? "topic_not_empty" :
	    "tenant_not_empty", NULL, "%lld unfinished job(s): cancel them "
	    "first, or add ?force=true to delete anyway (their callbacks "
	    "then stop)", (long long)n);
	return -1;
}

/*
 * The write locks in use (held or waited for), one per name: a tenant's
 * ("tenant") or a topic's ("tenant/topic").  A lock of one name never
 * holds up another's, so a deletion that holds its name's lock for
 * seconds delays only changes of that same entry.  Few are in use at a
 * time (changes of tenants and topics are rare), so a list does.
 */
struct api_wlock {
	pthread_mutex_t		 mu;
	int			 refs;		/* under wlocks_mu */
	struct api_wlock	*next;
	char			 name[];
};

static pthread_mutex_t wlocks_mu = PTHREAD_MUTEX_INITIALIZER;
static struct api_wlock *wlocks;

struct api_wlock *
api_write_lock(const char *tenant, const char *topic)
{
	char name[API_TENANT_MAX + REG_TOPIC_MAX + 2];
	struct api_wlock *l;
	size_t len;

	snprintf(name, sizeof(name), "%s%s%s", tenant, topic != NULL ? "/" :
	    "", topic != NULL ? topic : "");
	pthread_mutex_lock(&wlocks_mu);
	for (l = wlocks; l != NULL; l = l->next)
		if (strcmp(l->name, name) == 0)
			break;
	if (l == NULL) {
		len = strlen(name);
		l = xcalloc(1, sizeof(*l) + len + 1);
		memcpy(l->name, name, len + 1);
		pthread_mutex_init(&l->mu, NULL);
		l->next = wlocks;
		wlocks = l;
	}
	l->refs++;
	pthread_mutex_unlock(&wlocks_mu);
	pthread_mutex_lock(&l->mu);
	return l;
}

void
api_write_unlock(struct api_wlock *l)
{
	struct api_wlock **pp;

	pthread_mutex_unlock(&l->mu);
	pthread_mutex_lock(&wlocks_mu);
	if (--l->refs == 0) {
		for (pp = &wlocks; *pp != l; pp = &(*pp)->next)
			;
		*pp = l->next;
		pthread_mutex_destroy(&l->mu);
		free(l);
	}
	pthread_mutex_unlock(&wlocks_mu);
}

int
api_drop_jobs(struct api_ctx *ctx, const char *tenant, const char *topic,
    struct api_err_desc *d)
{
	enum sched_err e;
	int64_t n = 0;

	if (ctx->sched == NULL)
		return 0;
	e = topic != NULL ? sched_drop_topic(ctx->sched, tenant, topic, &n) :
	    sched_drop_tenant(ctx->sched, tenant, &n);
	api_quota_forget(tenant);
	obs_stats_forget(ctx->sched, tenant, topic);
	if (e != SCHED_OK) {
		api_sched_describe(e, topic != NULL ? "topic" : "tenant", d);
		return -1;
	}
	if (n > 0)
		log_info("api: %s%s%s: %lld unfinished or dead job(s) "
		    "dropped", tenant, topic != NULL ? "/" : "",
		    topic != NULL ? topic : "", (long long)n);
	return 0;
}

/* A tenant's deletion, done on the background thread (defer.c). */
struct tenant_del {
	struct api_defer	 d;	/* first: the work's own pointer */
	char			 name[API_TENANT_MAX + 1];
};

static void
tenant_delete_work(struct api_defer *dd)
{
	struct tenant_del *td = (struct tenant_del *)(void *)dd;
	struct api_ctx *ctx = td->d.ctx;
	struct api_wlock *lock;
	enum reg_err e;
	enum jrnl_err je;

	/* The journal first: it also cancels the tenant's unfinished jobs
	 * there, so a restore brings none of them back.  A PATCH here waits
	 * (the lock) until the registry has let the tenant go. */
	lock = api_write_lock(td->name, NULL);
	if (ctx->jrnl != NULL &&
	    (je = jrnl_delete_tenant(ctx->jrnl, td->name)) != JRNL_OK &&
	    je != JRNL_ENOTFOUND) {
		api_write_unlock(lock);
		journal_refused_desc(&td->d.err, je, "tenant", td->name);
		return;
	}
	/* Then its jobs leave Redis, before and after the registry (a
	 * push that loaded the tenant before it went may still land), so
	 * a tenant made again with this name starts empty.  Each drop
	 * queues a transition per job it took: the journal's rows of the
	 * tenant go again once those are written, or they would stay as
	 * rows of no job, read by a tenant made again with the name. */
	if (api_drop_jobs(ctx, td->name, NULL, &td->d.err) == -1) {
		api_write_unlock(lock);
		return;
	}
	if (ctx->jrnl != NULL &&
	    (je = jrnl_delete_tenant_jobs(ctx->jrnl, td->name)) != JRNL_OK) {
		api_write_unlock(lock);
		log_warnx("api: journal: tenant %s not deleted: %s", td->name,
		    jrnl_strerror(je));
		api_journal_desc(&td->d.err, "the tenant's jobs are dropped, "
		    "but the journal cannot remove their rows now (%s); the "
		    "tenant is not deleted, try again", jrnl_strerror(je));
		return;
	}
	e = registry_tenant_delete(ctx->reg, td->name);
	api_write_unlock(lock);
	if (e != REG_OK) {
		api_reg_describe(e, "tenant", &td->d.err);
		return;
	}
	disp_tenant_set_cap(ctx->disp, td->name, 0);
	if (api_drop_jobs(ctx, td->name, NULL, &td->d.err) == -1)
		return;
	/* Only jobs pushed between the two drops are left to go now. */
	if (ctx->jrnl != NULL &&
	    (je = jrnl_delete_tenant_jobs(ctx->jrnl, td->name)) != JRNL_OK)
		log_warnx("api: journal: tenant %s deleted, but the rows of "
		    "jobs pushed while it went are left: %s", td->name,
		    jrnl_strerror(je));
}

/*
 * Checked here; deleted on the background thread, which may take seconds
 * for a tenant with many jobs (defer.c), and answered when it is done.
 */
static void
tenant_delete(struct api_req *req)
{
	struct tenant_del *td = req->state;
	struct registry_tenant t;

	if (td != NULL) {
		api_defer_answer(req, &td->d);
		return;
	}
	if (load_tenant(req, &t) == -1 ||
	    api_unfinished_guard(req, t.name, NULL) == -1)
		return;
	td = xcalloc(1, sizeof(*td));
	td->d.work = tenant_delete_work;
	snprintf(td->name, sizeof(td->name), "%s", t.name);
	log_info("api: tenant %s: deleting", td->name);
	api_defer(req, &td->d);
}

static void
key_create(struct api_req *req)
{
	struct api_ctx *ctx = api_ctx_of(req);
	char api_key[REG_API_KEY_LEN + 1], key_id[REG_KEY_ID_MAX + 1];
	struct registry_tenant t;
	int64_t now = clock_wall_ms();
	enum reg_err e;
	enum jrnl_err je;

	if (load_tenant(req, &t) == -1)
		return;
	/* A body is optional; when given it must be an empty object. */
	if (api_body_none(req) == -1)
		return;
	e = registry_key_create(ctx->reg, t.name, now, api_key, key_id);
	if (e != REG_OK) {
		api_reg_error(req, e, "tenant");
		return;
	}
	/* The tenant's row too: it heals a tenant whose creation was cut
	 * short between Redis and the journal. */
	if ((je = journal_tenant(ctx, t.name, t.created_ms,
	    t.max_pending, t.max_in_flight)) != JRNL_OK ||
	    (je = journal_key(ctx, t.name, key_id, api_key, now)) !=
	    JRNL_OK) {
		if ((e = registry_key_revoke(ctx->reg, t.name, key_id)) !=
		    REG_OK)
			log_warnx("api: tenant %s: cannot undo key %s: %s",
			    t.name, key_id, registry_strerror(e));
		explicit_bzero(api_key, sizeof(api_key));
		journal_refused(req, je, "key", t.name);
		return;
	}
	api_reply_json(req, 201, key_json(key_id, now, api_key));
	explicit_bzero(api_key, sizeof(api_key));
}

static void
key_list(struct api_req *req)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct registry_tenant t;
	struct registry_key *keys;
	json_object *o, *a;
	enum reg_err e;
	size_t i, n;

	if (load_tenant(req, &t) == -1)
		return;
	if ((e = registry_key_list(ctx->reg, t.name, &keys, &n)) != REG_OK) {
		api_reg_error(req, e, "tenant");
		return;
	}
	o = json_object_new_object();
	a = json_object_new_array();
	for (i = 0; i < n; i++)
		json_object_array_add(a, key_json(keys[i].key_id,
		    keys[i].created_ms, NULL));
	json_object_object_add(o, "keys", a);
	free(keys);
	api_reply_json(req, 200, o);
}

static void
key_revoke(struct api_req *req)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct registry_tenant t;
	enum reg_err e;
	enum jrnl_err je;

	if (load_tenant(req, &t) == -1)
		return;
	if (!api_valid_key_id(req->param[1])) {
		api_error(req, 400, "invalid_id", "key_id",
		    "a key id is 1 to 32 of a-z 0-9");
		return;
	}
	/* The journal first: a restore must never bring the key back. */
	if (ctx->jrnl != NULL && (je = jrnl_revoke_key(ctx->jrnl, t.name,
	    req->param[1], clock_wall_ms())) != JRNL_OK &&
	    je != JRNL_ENOTFOUND) {
		journal_refused(req, je, "key", t.name);
		return;
	}
	e = registry_key_revoke(ctx->reg, t.name, req->param[1]);
	if (e != REG_OK) {
		api_reg_error(req, e, "key");
		return;
	}
	api_reply_empty(req, 204);
}

const struct api_route api_routes_tenants[] = {
	{ "POST", "/v1/tenants", API_AUTH_ADMIN, tenant_create,
	    "create a tenant and its first key", 0 },
	{ "GET", "/v1/tenants", API_AUTH_ADMIN, tenant_list,
	    "list tenants", 0 },
	{ "GET", "/v1/tenants/{name}", API_AUTH_ADMIN, tenant_get,
	    "a tenant with its keys and job counts", 0 },
	{ "PATCH", "/v1/tenants/{name}", API_AUTH_ADMIN, tenant_patch,
	    "set a tenant's quota and callback cap", 0 },
	{ "DELETE", "/v1/tenants/{name}", API_AUTH_ADMIN, tenant_delete,
	    "delete a tenant", 0 },
	{ "POST", "/v1/tenants/{name}/keys", API_AUTH_ADMIN, key_create,
	    "issue a new key (rotation)", 0 },
	{ "GET", "/v1/tenants/{name}/keys", API_AUTH_ADMIN, key_list,
	    "list a tenant's keys (ids only)", 0 },
	{ "DELETE", "/v1/tenants/{name}/keys/{key_id}", API_AUTH_ADMIN,
	    key_revoke, "revoke a key", 0 },
	{ NULL, NULL, 0, NULL, NULL, 0 },
};
