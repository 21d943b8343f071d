/*
 * restore.c - rebuilding Redis from the journal (restore.h).
 *
 * Key decisions:
 *  - A rebuild is owed while a flag in Redis says so, and exactly one
 *    instance does it, the one holding the lock (both in
 *    scheduler/registry_restore.c).  The flag is set when the scheduler
 *    sees its schema marker vanish (redis_lost), when a Redis without the
 *    marker is found at start, or by `retryd --recover`; it is cleared only
 *    after a complete rebuild, so an instance that dies half-way leaves it
 *    for the next (each instance's worker looks at the flag every few
 *    seconds).  Instances that do not hold the lock wait for the flag to
 *    clear.
 *  - Order: our own queued transitions are flushed and one batch interval
 *    of every instance's is waited for, so a job delivered just before the
 *    loss reads as delivered; then tenants, key hashes and topics (restored
 *    jobs find their topic); then every unfinished job in pages of `batch`,
 *    the lock renewed between pages (renewal fails when Redis lost its data
 *    again: start over); then the schema marker; then the flag is cleared.
 *  - Every step is idempotent: nothing Redis holds is overwritten, and the
 *    journal's finished jobs (delivered, cancelled) are never read, so a
 *    rebuild run twice, or while clients push, creates nothing twice and
 *    never revives a finished job.  Jobs come back as the journal holds
 *    them: waiting ones at their due time (in flight: the attempt runs
 *    again), ready ones ready, dead ones dead.
 *  - The server keeps serving meanwhile: the rebuild is one script per job
 *    on the worker's own thread.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/jobs_journal.h"
#include "conf.h"
#include "journal/journal.h"
#include "restore.h"
#include "scheduler/registry.h"
#include "scheduler/sched.h"
#include "util/clock.h"
#include "util/crypto.h"
#include "util/log.h"
#include "util/xmalloc.h"
#include "wire.h"

#define LOCK_MS		30000	/* the lock outlives a stalled holder */
#define CHECK_MS	5000	/* how often the worker looks at the flag */
#define WAIT_MS		250	/* polling a lock another instance holds */
#define BACKOFF_MIN_MS	500
#define BACKOFF_MAX_MS	30000
#define PAGE_DEFAULT	500
#define SETTLE_DEFAULT	200

/* rebuild_locked(): Redis lost its data again (or the lock timed out). */
#define AGAIN		2

struct restore {
	struct restore_config	 cfg;
	char			 holder[200];
	char			 prev_holder[200]; /* a dead run's ("":
						   none; the worker's) */
	pthread_t		 thread;
	int			 started;
	pthread_mutex_t		 lock;		/* guards the three below */
	pthread_cond_t		 cond;		/* on CLOCK_MONOTONIC */
	int			 requested;
	int			 restarted;	/* restore_recheck() */
	int			 stopping;
	int			 start_check;	/* judge Redis by its tenants */
};

struct restore *
restore_new(const struct restore_config *cfg)
{
	struct restore *r = xcalloc(1, sizeof(*r));
	uint8_t rnd[4];
	char hex[9];

	r->cfg = *cfg;
	if (r->cfg.batch == 0)
		r->cfg.batch = PAGE_DEFAULT;
	if (r->cfg.settle_ms <= 0)
		r->cfg.settle_ms = SETTLE_DEFAULT;
	if (random_bytes(rnd, sizeof(rnd)) == -1)
		memset(rnd, 0, sizeof(rnd));
	hex_encode(rnd, sizeof(rnd), hex);
	snprintf(r->holder, sizeof(r->holder), "%.160s/%s",
	    cfg->instance != NULL ? cfg->instance : "", hex);
	pthread_mutex_init(&r->lock, NULL);
	clock_cond_init(&r->cond);
	r->start_check = 1;
	return r;
}

void
restore_stop(struct restore *r)
{
	if (r == NULL)
		return;
	pthread_mutex_lock(&r->lock);
	r->stopping = 1;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	if (r->started)
		pthread_join(r->thread, NULL);
	r->started = 0;
}

void
restore_free(struct restore *r)
{
	if (r == NULL)
		return;
	restore_stop(r);
	pthread_cond_destroy(&r->cond);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

static int
stopping(struct restore *r)
{
	int v;

	pthread_mutex_lock(&r->lock);
	v = r->stopping;
	pthread_mutex_unlock(&r->lock);
	return v;
}

/* Wait on the condition until the monotonic deadline; the lock is held. */
static void
wait_until_locked(struct restore *r, int64_t until_mono_us)
{
	struct timespec ts;

	ts.tv_sec = (time_t)(until_mono_us / 1000000);
	ts.tv_nsec = (long)(until_mono_us % 1000000) * 1000;
	(void)pthread_cond_timedwait(&r->cond, &r->lock, &ts);
}

/* Sleep ms unless stopped first: 1 when stopping. */
static int
nap(struct restore *r, int64_t ms)
{
	int64_t until = clock_mono_us() + ms * 1000;
	int v;

	pthread_mutex_lock(&r->lock);
	while (!r->stopping && clock_mono_us() < until)
		wait_until_locked(r, until);
	v = r->stopping;
	pthread_mutex_unlock(&r->lock);
	return v;
}

/* Wakes the worker with a request (and, restarted, a restart to act on). */
static void
ask(struct restore *r, int restarted)
{
	if (r == NULL)
		return;
	pthread_mutex_lock(&r->lock);
	r->requested = 1;
	r->restarted |= restarted;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

void
restore_request(struct restore *r)
{
	ask(r, 0);
}

void
restore_recheck(struct restore *r)
{
	ask(r, 1);
}

/* ------------------------------------------------------------------ */
/* The registry */

struct reg_ctx {
	struct restore		*r;
	struct restore_counts	*c;
	enum reg_err		 err;	/* Redis failed: stop */
};

static int
tenant_cb(const struct jrnl_tenant *t, void *arg)
{
	struct reg_ctx *rc = arg;
	int64_t maxp, maxf;
	int created;

	if (registry_tenant_settings_parse(t->settings_json, &maxp,
	    &maxf) == -1) {
		log_warnx("restore: tenant %s: unreadable settings; the "
		    "defaults apply", t->name);
		maxp = maxf = 0;
	}
	rc->err = registry_restore_tenant(rc->r->cfg.reg, t->name,
	    t->created_ms, maxp, maxf, &created);
	if (rc->err == REG_EINVAL) {
		log_warnx("restore: tenant %s: not a valid tenant; skipped",
		    t->name);
		rc->err = REG_OK;
	}
	if (rc->err == REG_OK && created)
		rc->c->tenants++;
	return rc->err != REG_OK || stopping(rc->r);
}

static int
key_cb(const struct jrnl_key *k, void *arg)
{
	struct reg_ctx *rc = arg;
	int created;

	if (k->revoked_ms != 0)
		return stopping(rc->r);
	rc->err = registry_restore_key(rc->r->cfg.reg, k->tenant, k->key_id,
	    k->hash_hex, k->created_ms, &created);
	if (rc->err == REG_ENOTFOUND || rc->err == REG_EINVAL) {
		log_warnx("restore: key %s of tenant %s: %s; skipped",
		    k->key_id, k->tenant, rc->err == REG_ENOTFOUND ?
		    "no such tenant" : "not a valid key record");
		rc->err = REG_OK;
	}
	if (rc->err == REG_OK && created)
		rc->c->keys++;
	return rc->err != REG_OK || stopping(rc->r);
}

static int
topic_cb(const struct jrnl_topic *t, void *arg)
{
	struct reg_ctx *rc = arg;
	int created;

	rc->err = registry_restore_topic(rc->r->cfg.reg, t->tenant, t->name,
	    t->config_json, t->created_ms, &created);
	if (rc->err == REG_ENOTFOUND || rc->err == REG_EINVAL) {
		log_warnx("restore: topic %s of tenant %s: %s; skipped",
		    t->name, t->tenant, rc->err == REG_ENOTFOUND ?
		    "no such tenant" : "not a valid topic record");
		rc->err = REG_OK;
	}
	if (rc->err == REG_OK && created)
		rc->c->topics++;
	return rc->err != REG_OK || stopping(rc->r);
}

/* Tenants, then keys, then topics: 0, or -1 with why. */
static int
restore_registry(struct restore *r, struct restore_counts *c, char *why,
    size_t whylen)
{
	struct reg_ctx rc = { r, c, REG_OK };
	enum jrnl_err e;

	if ((e = jrnl_scan_tenants(r->cfg.jrnl, tenant_cb, &rc)) == JRNL_OK &&
	    rc.err == REG_OK &&
	    (e = jrnl_scan_keys(r->cfg.jrnl, NULL, key_cb, &rc)) == JRNL_OK &&
	    rc.err == REG_OK)
		e = jrnl_scan_topics(r->cfg.jrnl, NULL, topic_cb, &rc);
	registry_flush_cache(r->cfg.reg);
	if (e != JRNL_OK) {
		snprintf(why, whylen, "journal: %s", jrnl_strerror(e));
		return -1;
	}
	if (rc.err != REG_OK) {
		snprintf(why, whylen, "Redis: %s", registry_strerror(rc.err));
		return -1;
	}
	return stopping(r) ? -1 : 0;
}

/* ------------------------------------------------------------------ */
/* Jobs */

struct jobs_ctx {
	struct restore		*r;
	struct restore_counts	*c;
	char			 last_tenant[REG_TENANT_MAX + 1];
	char			 last_id[ID_LEN + 65];
	size_t			 seen;
	enum sched_err		 err;	/* Redis unavailable or full: stop */
	int			 stop;
};

static int
job_cb(const struct jrnl_job *jj, void *arg)
{
	struct jobs_ctx *jc = arg;
	struct log_obj lo = { jj->tenant, jj->topic, jj->id, jj->attempts };
	enum sched_err e;
	int created = 0;

	jc->seen++;
	snprintf(jc->last_tenant, sizeof(jc->last_tenant), "%s", jj->tenant);
	snprintf(jc->last_id, sizeof(jc->last_id), "%s", jj->id);
	e = (enum sched_err)api_restore_journal_job(jc->r->cfg.sched, jj,
	    &created);
	/* Redis away or full: stop, the rebuild runs again later. */
	if (e == SCHED_EUNAVAIL || e == SCHED_EFULL) {
		jc->err = e;
		return 1;
	}
	if (e != SCHED_OK) {
		log_obj(LOG_LVL_WARN, &lo, "restore: refused: %s; skipped",
		    sched_strerror(e));
		jc->c->failed++;
	} else if (created == -1) {
		jc->c->superseded++;	/* logged there */
	} else if (created) {
		jc->c->restored++;
	} else
		jc->c->present++;
	if (stopping(jc->r)) {
		jc->stop = 1;
		return 1;
	}
	return 0;
}

/* Renew the lock: 0 ours, AGAIN lost, -1 with why. */
static int
renew(struct restore *r, char *why, size_t whylen)
{
	enum reg_err e;
	int got;

	if ((e = registry_restore_lock(r->cfg.reg, r->holder, LOCK_MS, 1,
	    &got)) != REG_OK) {
		snprintf(why, whylen, "Redis: %s", registry_strerror(e));
		return -1;
	}
	return got ? 0 : AGAIN;
}

/* Every unfinished job, page by page: 0, AGAIN, or -1 with why. */
static int
restore_jobs(struct restore *r, struct restore_counts *c, char *why,
    size_t whylen)
{
	struct jobs_ctx jc;
	struct jrnl_scan sc;
	enum jrnl_err e;
	int rc;

	memset(&jc, 0, sizeof(jc));
	jc.r = r;
	jc.c = c;
	memset(&sc, 0, sizeof(sc));
	sc.limit = r->cfg.batch;
	sc.include_dead = 1;
	for (;;) {
		jc.seen = 0;
		if ((e = jrnl_scan_unfinished(r->cfg.jrnl, &sc, job_cb,
		    &jc)) != JRNL_OK) {
			snprintf(why, whylen, "journal: %s", jrnl_strerror(e));
			return -1;
		}
		if (jc.err != SCHED_OK) {
			snprintf(why, whylen, "Redis: %s",
			    sched_strerror(jc.err));
			return -1;
		}
		if (jc.stop) {
			snprintf(why, whylen, "stopping");
			return -1;
		}
		if ((rc = renew(r, why, whylen)) != 0)
			return rc;
		if (jc.seen < r->cfg.batch)
			return 0;
		log_debug("restore: %" PRId64 " jobs restored, %" PRId64
		    " present so far", c->restored, c->present);
		sc.after_tenant = jc.last_tenant;
		sc.after_id = jc.last_id;
	}
}

/* ------------------------------------------------------------------ */
/* A rebuild */

/* With the lock held: 0, AGAIN, or -1 with why. */
static int
rebuild_locked(struct restore *r, struct restore_counts *c, char *why,
    size_t whylen)
{
	int rc;

	/* Transitions still queued here or at other instances first: a job
	 * delivered just before the loss must read as delivered. */
	if (jrnl_flush(r->cfg.jrnl) == -1) {
		snprintf(why, whylen, "journal: cannot write the queued "
		    "transitions");
		return -1;
	}
	if (nap(r, r->cfg.settle_ms)) {
		snprintf(why, whylen, "stopping");
		return -1;
	}
	if (restore_registry(r, c, why, whylen) == -1)
		return -1;
	if ((rc = renew(r, why, whylen)) != 0)
		return rc;
	return restore_jobs(r, c, why, whylen);
}

/* 0 rebuilt, 1 another instance did it, -1 with why (try again later). */
static int
rebuild(struct restore *r, struct restore_counts *c, char *why,
    size_t whylen)
{
	struct registry_restore_state st;
	enum reg_err e;
	enum sched_err se;
	int64_t t0;
	int got, done, rc, waited = 0;

	/* What was re-created counts across rounds (a round cut short by
	 * another loss still made what it made); what was found, per round. */
	memset(c, 0, sizeof(*c));
	for (;;) {
		c->present = c->failed = c->superseded = 0;
		if (stopping(r)) {
			snprintf(why, whylen, "stopping");
			return -1;
		}
		if ((e = registry_restore_lock(r->cfg.reg, r->holder, LOCK_MS,
		    0, &got)) != REG_OK) {
			snprintf(why, whylen, "Redis: %s",
			    registry_strerror(e));
			return -1;
		}
		if (got == -1)
			return 1;	/* done meanwhile, or never owed */
		if (!got) {
			if (!waited++)
				log_info("restore: another instance is "
				    "rebuilding Redis; waiting for it");
			if (nap(r, WAIT_MS))
				continue;
			if ((e = registry_restore_state(r->cfg.reg, &st)) !=
			    REG_OK) {
				snprintf(why, whylen, "Redis: %s",
				    registry_strerror(e));
				return -1;
			}
			if (!st.pending)
				return 1;
			continue;
		}
		log_info("restore: rebuilding Redis from the journal");
		t0 = clock_mono_us();
		rc = rebuild_locked(r, c, why, whylen);
		if (rc == 0) {
			se = sched_mark_schema(r->cfg.sched);
			if (se != SCHED_OK) {
				snprintf(why, whylen, "Redis: cannot write the "
				    "schema marker: %s", sched_strerror(se));
				rc = -1;
			} else if ((e = registry_restore_done(r->cfg.reg,
			    r->holder, &done)) != REG_OK) {
				snprintf(why, whylen, "Redis: %s",
				    registry_strerror(e));
				rc = -1;
			} else if (!done)
				rc = AGAIN;
		}
		if (rc == 0) {
			log_info("restore: done in %" PRId64 " ms: %" PRId64
			    " tenants, %" PRId64 " keys, %" PRId64 " topics, "
			    "%" PRId64 " jobs restored; %" PRId64 " jobs "
			    "present, %" PRId64 " refused, %" PRId64
			    " superseded", (clock_mono_us() - t0) / 1000,
			    c->tenants, c->keys, c->topics, c->restored,
			    c->present, c->failed, c->superseded);
			return 0;
		}
		if (rc == AGAIN) {
			log_warnx("restore: Redis lost its data again (or the "
			    "lock timed out) during the rebuild: starting "
			    "over");
			(void)registry_restore_request(r->cfg.reg,
			    "lost again during a rebuild");
			continue;
		}
		(void)registry_restore_unlock(r->cfg.reg, r->holder);
		return -1;
	}
}

int
restore_run(struct restore *r, struct restore_counts *out, char *why,
    size_t whylen)
{
	enum reg_err e;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((e = registry_restore_request(r->cfg.reg, "retryd --recover")) !=
	    REG_OK) {
		snprintf(why, whylen, "Redis: %s", registry_strerror(e));
		return -1;
	}
	rc = rebuild(r, out, why, whylen);
	if (rc == 1)
		log_info("restore: another instance completed the rebuild");
	return rc == -1 ? -1 : 0;
}

/* ------------------------------------------------------------------ */
/* The worker */

static int
has_tenant_cb(const struct jrnl_tenant *t, void *arg)
{
	(void)t;
	*(int *)arg = 1;
	return 1;
}

void
restore_check_start(struct restore *r)
{
	struct registry_restore_state st;
	int has = 0;

	if (r == NULL ||
	    registry_restore_state(r->cfg.reg, &st) != REG_OK)
		return;		/* the worker judges later */
	r->start_check = 0;
	if (st.schema || st.pending)
		return;
	/*
	 * A journal without a tenant has nothing to rebuild (a new
	 * deployment): the marker at once, before the server listens, so
	 * that its first requests do not meet a Redis owed a rebuild (503
	 * `rebuilding` for whatever Redis does not hold, api_rebuilding).
	 */
	if (jrnl_scan_tenants(r->cfg.jrnl, has_tenant_cb, &has) == JRNL_OK &&
	    !has && sched_mark_schema(r->cfg.sched) == SCHED_OK) {
		log_info("restore: Redis has no schema marker and the journal "
		    "no tenant: nothing to rebuild");
		return;
	}
	if (registry_restore_request(r->cfg.reg, "no schema marker at "
	    "start") == REG_OK)
		log_info("restore: Redis has no schema marker: it is new or "
		    "lost its data; it will be rebuilt from the journal");
}

/*
 * Whether a rebuild is owed, and do it: 0 (nothing owed, or done), -1 to
 * look again after a backoff.
 */
static int
look(struct restore *r, int asked)
{
	struct registry_restore_state st;
	struct restore_counts c;
	char why[512];
	int need, has = 0, restarted;
	enum jrnl_err e;

	if (r->prev_holder[0] != '\0') {
		if (registry_restore_unlock(r->cfg.reg, r->prev_holder) !=
		    REG_OK)
			return -1;
		r->prev_holder[0] = '\0';
	}
	if (registry_restore_state(r->cfg.reg, &st) != REG_OK)
		return -1;
	need = st.pending;
	/*
	 * Redis restarted or failed over (restore_recheck): owed a rebuild
	 * whatever it holds, through the flag, so that one instance does it
	 * however many saw it; kept until the flag is set.
	 */
	pthread_mutex_lock(&r->lock);
	restarted = r->restarted;
	pthread_mutex_unlock(&r->lock);
	if (!need && restarted) {
		if (registry_restore_request(r->cfg.reg, "Redis restarted "
		    "or failed over") != REG_OK)
			return -1;
		need = 1;
	}
	if (restarted) {
		pthread_mutex_lock(&r->lock);
		r->restarted = 0;
		pthread_mutex_unlock(&r->lock);
	}
	if (!need && asked && !st.schema) {
		if (registry_restore_request(r->cfg.reg, "the schema marker "
		    "vanished") != REG_OK)
			return -1;
		need = 1;
	}
	if (!need && r->start_check) {
		/* Redis was unreachable before the scheduler started, which
		 * has marked it since: judge it by its tenants. */
		if (st.tenants == 0) {
			if ((e = jrnl_scan_tenants(r->cfg.jrnl, has_tenant_cb,
			    &has)) != JRNL_OK)
				return -1;
			if (has && registry_restore_request(r->cfg.reg,
			    "no tenants in Redis") != REG_OK)
				return -1;
			need = has;
		}
		r->start_check = 0;
	}
	if (!need)
		return 0;
	if (rebuild(r, &c, why, sizeof(why)) == -1) {
		if (!stopping(r))
			log_warnx("restore: the rebuild did not complete: %s "
			    "(trying again)", why);
		return -1;
	}
	return 0;
}

static void *
worker(void *arg)
{
	struct restore *r = arg;
	int64_t next_us = 0, backoff = BACKOFF_MIN_MS;
	int asked, retry = 0;

	for (;;) {
		pthread_mutex_lock(&r->lock);
		while (!r->stopping && !r->requested &&
		    clock_mono_us() < next_us)
			wait_until_locked(r, next_us);
		if (r->stopping) {
			pthread_mutex_unlock(&r->lock);
			break;
		}
		asked = r->requested || retry;
		r->requested = 0;
		pthread_mutex_unlock(&r->lock);
		if (look(r, asked) == -1) {
			retry = asked;
			next_us = clock_mono_us() + backoff * 1000;
			backoff = backoff * 2 > BACKOFF_MAX_MS ?
			    BACKOFF_MAX_MS : backoff * 2;
		} else {
			retry = 0;
			backoff = BACKOFF_MIN_MS;
			next_us = clock_mono_us() + (int64_t)CHECK_MS * 1000;
		}
	}
	return NULL;
}

const char *
restore_holder(const struct restore *r)
{
	return r->holder;
}

void
restore_set_predecessor(struct restore *r, const char *holder)
{
	snprintf(r->prev_holder, sizeof(r->prev_holder), "%s",
	    holder != NULL && strcmp(holder, r->holder) != 0 ? holder : "");
}

int
restore_start(struct restore *r)
{
	int e;

	if ((e = pthread_create(&r->thread, NULL, worker, r)) != 0) {
		errno = e;
		return -1;
	}
	r->started = 1;
	(void)pthread_setname_np(r->thread, "restore");
	return 0;
}

/* ------------------------------------------------------------------ */
/* retryd --recover */

int
restore_recover(void)
{
	struct registry *reg = NULL;
	struct jrnl *j = NULL;
	struct sched *s = NULL;
	struct restore *r = NULL;
	struct sched_config sc;
	struct restore_config rc;
	struct restore_counts c;
	char why[512];
	int code = 1;

	why[0] = '\0';
	if ((reg = registry_new(conf.redis_url, conf.redis_timeout_ms, 1000,
	    why, sizeof(why))) == NULL) {
		fprintf(stderr, "retryd: --recover: registry: %s\n", why);
		goto out;
	}
	if ((j = wire_journal(why, sizeof(why))) == NULL) {
		fprintf(stderr, "retryd: --recover: %s\n", why[0] != '\0' ?
		    why : "the journal is off (journal.mode = off or "
		    "journal.url = \"none\"): nothing to restore from");
		goto out;
	}
	memset(&sc, 0, sizeof(sc));
	sc.redis_url = conf.redis_url;
	sc.redis_timeout_ms = conf.redis_timeout_ms;
	sc.shards = (int)conf.sched_shards;
	sc.batch = (int)conf.sched_batch;
	sc.lease_ms = conf.sched_lease_ms;
	sc.retention_ms = conf.sched_retention_ms;
	sc.instance = conf.instance;
	if ((s = sched_new(&sc, NULL, why, sizeof(why))) == NULL) {
		fprintf(stderr, "retryd: --recover: scheduler: %s\n", why);
		goto out;
	}
	memset(&rc, 0, sizeof(rc));
	rc.sched = s;
	rc.reg = reg;
	rc.jrnl = j;
	rc.instance = conf.instance;
	rc.settle_ms = 2 * conf.journal_flush_ms;
	r = restore_new(&rc);
	if (restore_run(r, &c, why, sizeof(why)) == -1) {
		fprintf(stderr, "retryd: --recover: %s\n", why);
		goto out;
	}
	printf("restored: %" PRId64 " tenants, %" PRId64 " keys, %" PRId64
	    " topics, %" PRId64 " jobs; present already: %" PRId64 " jobs; "
	    "refused: %" PRId64 " jobs; superseded: %" PRId64 " jobs\n",
	    c.tenants, c.keys, c.topics, c.restored, c.present, c.failed,
	    c.superseded);
	code = 0;
out:
	restore_free(r);
	sched_free(s);
	jrnl_close(j);
	registry_free(reg);
	return code;
}
