/*
 * wire.c - the parts of the daemon and the hooks between them.
 *
 * Key decision: the modules know nothing of each other (dependencies point
 * one way: util <- schedules <- scheduler, dispatcher, journal <- api);
 * every cross-module call is a hook set here.  A due job of a push topic
 * travels: scheduler (reserved, in flight with a token) -> on_deliver()
 * builds the signed request from the topic -> dispatcher -> disp_done()
 * queues the outcome -> the reporter's threads (report.c) run sched_report()
 * (or sched_release() when the attempt was never made).  Stopping runs in
 * the reverse order of starting: stop taking requests and due jobs, let
 * callbacks drain and their outcomes be applied, then close.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "api/http.h"
#include "conf.h"
#include "dispatcher/dispatcher.h"
#include "journal/journal.h"
#include "report.h"
#include "restore.h"
#include "scheduler/registry.h"
#include "scheduler/sched.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/xmalloc.h"
#include "wire.h"

struct wire {
	struct sched		*sched;
	struct registry		*reg;
	struct dispatcher	*disp;
	struct jrnl		*jrnl;		/* NULL: journal off */
	struct api_server	*http;
	struct restore		*restore;	/* NULL: journal off */
	struct reporter		*rep;		/* applies callback outcomes */
	struct api_ctx		 ctx;
	int64_t			 recall_off_us;	/* no journal recall before */
	int			 lock_fd;	/* data_dir's lock, or -1 */
};

/* What travels with a request through the dispatcher. */
struct delivery {
	char	*tenant;
	char	 id[ID_LEN + 65];
	char	 token[SCHED_TOKEN_LEN + 1];
	int	 attempt;
	struct sched_job *job;	/* as reserved, without its body */
};

static void
delivery_free(struct delivery *dl)
{
	if (dl == NULL)
		return;
	free(dl->tenant);
	sched_job_free(dl->job);
	free(dl);
}

static int
wire_ready(char *why, size_t whylen, void *arg)
{
	struct wire *w = arg;

	if (!sched_ready(w->sched, why, whylen))
		return 0;
	/* Its reason says "journal: ..." itself. */
	return w->jrnl == NULL || jrnl_ready(w->jrnl, why, whylen);
}

/* api_ctx.rebuild: a restore route found Redis owed a rebuild. */
static void
wire_rebuild(void *arg)
{
	restore_request(arg);
}

/* sched_hooks.ready: jobs became ready in a topic; wake its consumers. */
static void
hook_ready(const char *tenant, const char *topic, void *arg)
{
	(void)arg;
	api_pull_notify(tenant, topic);
}

/*
 * Whether the journal records this change: not a move into ready or
 * in_flight, of any topic.  A restore puts an in-flight job back due at
 * the due time its row already holds, and a ready one (due now) is what a
 * waiting job whose due time has passed becomes at the timer's next pass,
 * so neither row would change what a restore brings back.  The journal
 * keeps the waiting state instead and writes one row per attempt, in_flight
 * -> its outcome (delivered, retrying, dead, or ready again when released,
 * also not written): a push's delivery, or a pull's reserve and ack.
 */
static int
journaled(enum sched_state to)
{
	return to != SCHED_READY && to != SCHED_IN_FLIGHT;
}

/*
 * sched_hooks.transition: every state change goes to the journal.  A job's
 * creation (from SCHED_NSTATES) does not: the put that accepted it wrote
 * its row, in that state and at that time, before Redis made it, so the
 * journal derives the creation from the row (jrnl_list_transitions) rather
 * than writing a second row per pushed job.
 */
static void
hook_transition(const struct sched_job *job, enum sched_state from,
    enum sched_state to, const struct sched_attempt *a, void *arg)
{
	struct wire *w = arg;
	struct jrnl_transition t;

	api_obs_transition(job, (int)from, (int)to, a);
	if (w->jrnl == NULL || from >= SCHED_NSTATES || !journaled(to))
		return;
	memset(&t, 0, sizeof(t));
	t.tenant = job->tenant;
	t.job_id = job->id;
	t.from_state = from < SCHED_NSTATES ? sched_state_name(from) : NULL;
	t.to_state = sched_state_name(to);
	t.at_ms = a != NULL && a->at_ms > 0 ? a->at_ms : clock_wall_ms();
	/*
	 * The row takes the change only if it is the same job (a client-given
	 * id can be pushed again once the first job is long finished) and the
	 * change is newer: by the version Redis gave it, not by at_ms, which
	 * is the clock of whichever instance made the change.
	 */
	t.version = job->version;
	t.created_ms = job->created_ms;
	t.shard = job->shard;
	if (a != NULL) {
		t.attempt = job->attempts > 0 ? job->attempts : 1;
		t.http_status = a->status;
		t.latency_ms = a->latency_ms;
		t.error = a->error;
		t.excerpt = a->excerpt;
		t.excerpt_len = a->excerpt_len;
	}
	/* Where a restore puts a waiting job back in time. */
	if (to == SCHED_SCHEDULED || to == SCHED_RETRYING)
		t.due_ms = job->due_ms;
	jrnl_transition(w->jrnl, &t);
}

/*
 * sched_hooks.redis_restarted: a rebuild is owed (the restore worker sets
 * the flag in Redis, so one instance does it, however many saw the
 * restart): it creates the unfinished jobs Redis lacks and leaves the
 * others as they are.
 */
static void
hook_redis_restarted(void *arg)
{
	struct wire *w = arg;

	restore_recheck(w->restore);
}

/* sched_hooks.redis_lost: the restore worker rebuilds Redis. */
static void
hook_redis_lost(void *arg)
{
	struct wire *w = arg;

	restore_request(w->restore);
}

/*
 * The journal: journal.url, else an SQLite file under data_dir.  With
 * journal.mode = off or the URL "none" there is none (w->jrnl NULL).
 */
static int
journal_open(struct wire *w, char *err, size_t errlen)
{
	struct jrnl_config jc;
	enum jrnl_err e;
	char why[512], dir[PATH_MAX], host[256], *url = NULL;

	if (conf.journal_mode == CONF_JOURNAL_OFF ||
	    strcmp(conf.journal_url, "none") == 0)
		return 0;
	if (conf.journal_url[0] == '\0') {
		if (mkdir(conf.data_dir, 0700) == -1 && errno != EEXIST) {
			snprintf(err, errlen, "data_dir %s: %s", conf.data_dir,
			    strerror(errno));
			return -1;
		}
		if (realpath(conf.data_dir, dir) == NULL) {
			snprintf(err, errlen, "data_dir %s: %s", conf.data_dir,
			    strerror(errno));
			return -1;
		}
		url = xasprintf("sqlite://%s/journal.db", dir);
	} else
		url = xstrdup(conf.journal_url);
	if (gethostname(host, sizeof(host)) == -1)
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = '\0';
	memset(&jc, 0, sizeof(jc));
	jc.url = url;
	jc.mode = conf.journal_mode == CONF_JOURNAL_SYNC ? JRNL_MODE_SYNC :
	    JRNL_MODE_ASYNC;
	jc.flush_interval_ms = conf.journal_flush_ms;
	jc.timeout_ms = conf.journal_timeout_ms;
	jc.retention_ms = conf.journal_retention_ms;
	jc.purge_interval_ms = conf.journal_purge_ms;
	jc.instance = conf.instance;
	jc.host = host;
	jc.start_unavailable = 1;	/* a database down is not fatal */
	jc.callbacks_done = api_push_flush;
	w->jrnl = jrnl_open(&jc, &e, why, sizeof(why));
	if (w->jrnl == NULL) {
		snprintf(err, errlen, "journal: %s", why);
		free(url);
		return -1;
	}
	if (strncmp(url, "sqlite:", 7) == 0)
		log_info("journal: %s (%s)", url, conf.journal_mode ==
		    CONF_JOURNAL_SYNC ? "sync" : "async");
	else
		log_info("journal: MySQL/MariaDB (%s)", conf.journal_mode ==
		    CONF_JOURNAL_SYNC ? "sync" : "async");
	free(url);
	return 0;
}

struct jrnl *
wire_journal(char *err, size_t errlen)
{
	struct wire w;

	memset(&w, 0, sizeof(w));
	err[0] = '\0';
	if (journal_open(&w, err, errlen) == -1)
		return NULL;
	return w.jrnl;
}

static int
access_log(void *arg)
{
	(void)arg;
	return (int)CONF_GET(log_access);
}

/* A topic's timeout: its own, else the default, never over the maximum. */
static int64_t
topic_timeout(int64_t ms)
{
	int64_t max = CONF_GET(disp_max_timeout_ms);

	if (ms <= 0)
		ms = CONF_GET(disp_timeout_ms);
	return ms > max ? max : ms;
}

/* The defaults a topic's unset settings take. */
static void
topic_defaults(struct sched_topic_info *out)
{
	out->timeout_ms = topic_timeout(out->timeout_ms);
	if (out->max_in_flight <= 0)
		out->max_in_flight = (int)CONF_GET(disp_max_in_flight);
}

static int
hook_topic_info(const char *tenant, const char *topic,
    struct sched_topic_info *out, void *arg)
{
	struct wire *w = arg;
	int r;

	if ((r = registry_topic_info(w->reg, tenant, topic, out)) != 0)
		return r;
	topic_defaults(out);
	return 0;
}

/* How long after a failed read the journal is not asked again, us. */
#define RECALL_PAUSE_US	1000000

struct recall {
	struct registry		*reg;
	struct sched_topic_info	*out;
	int			 r;
};

static int
recall_cb(const struct jrnl_topic *t, void *arg)
{
	struct recall *rc = arg;

	rc->r = registry_topic_recall(rc->reg, t->tenant, t->name,
	    t->config_json, t->created_ms, rc->out) == 0 ? 0 : -2;
	return 0;
}

/*
 * sched_hooks.topic_recall: a topic Redis cannot tell of now (it lost its
 * data and is not rebuilt yet, and this instance had not cached it) read
 * from the journal, where every topic is kept, so a failed attempt follows
 * its schedule instead of waiting in flight for the rebuild.  The registry
 * caches it (expired) for the lookups after.  A journal that fails is not
 * asked again for a second: the reporter's threads wait on each read.
 */
static int
hook_topic_recall(const char *tenant, const char *topic,
    struct sched_topic_info *out, void *arg)
{
	struct wire *w = arg;
	struct recall rc = { w->reg, out, -2 };
	struct log_obj lo = { tenant, topic, NULL, 0 };
	enum jrnl_err e;
	int64_t now = clock_mono_us();

	if (w->jrnl == NULL || now < __atomic_load_n(&w->recall_off_us,
	    __ATOMIC_RELAXED))
		return -2;
	e = jrnl_get_topic(w->jrnl, tenant, topic, recall_cb, &rc);
	if (e == JRNL_ENOTFOUND)
		return -1;
	if (e != JRNL_OK) {
		/* From the failure's end: a hung database's read takes
		 * longer than the pause. */
		__atomic_store_n(&w->recall_off_us, clock_mono_us() +
		    RECALL_PAUSE_US, __ATOMIC_RELAXED);
		log_obj(LOG_LVL_WARN, &lo, "the topic cannot be read from the "
		    "journal either: %s", jrnl_strerror(e));
		return -2;
	}
	if (rc.r != 0) {
		log_obj(LOG_LVL_WARN, &lo, "the journal's record of the topic "
		    "is unreadable");
		return -2;
	}
	log_obj(LOG_LVL_INFO, &lo, "the topic read from the journal: Redis "
	    "lacks it until its rebuild");
	topic_defaults(out);
	return 0;
}

/*
 * sched_hooks.capacity: what the topic may still send, under its own cap,
 * its tenant's (its max_in_flight, else dispatcher.max_tenant_in_flight)
 * and the instance's, so the scheduler reserves no more than the
 * dispatcher takes, and a tenant whose receivers hang keeps at most its
 * cap of the instance's callbacks.
 */
static int
hook_capacity(const char *tenant, const char *topic, void *arg)
{
	struct wire *w = arg;
	struct sched_topic_info ti;

	if (hook_topic_info(tenant, topic, &ti, w) != 0 || !ti.push)
		return 0;
	return disp_topic_room(w->disp, tenant, topic, ti.max_in_flight);
}

/*
 * sched_hooks.tenant_capacity: the room all of a tenant's topics share.  A
 * pass asks once for each tenant with due jobs in push topics, before it
 * asks for any of the tenant's topics, so this is where the tenant's own
 * max_in_flight, read from the registry's cache, is handed to the
 * dispatcher: once per pass and tenant, not per job.  Redis unreachable
 * with nothing cached leaves the cap the dispatcher last had.  No room
 * with the tenant at its own cap (not the instance's) is a pass that held
 * the tenant back: counted (retryd_dispatcher_tenant_held_total).  Read
 * only when the room is 0, so it costs nothing otherwise.
 */
static int
hook_tenant_capacity(const char *tenant, void *arg)
{
	struct wire *w = arg;
	struct registry_tenant t;
	enum reg_err e;
	int room, cap;

	if ((e = registry_tenant_get(w->reg, tenant, &t)) == REG_OK)
		disp_tenant_set_cap(w->disp, tenant, t.max_in_flight > INT_MAX ?
		    INT_MAX : (int)t.max_in_flight);
	else if (e == REG_ENOTFOUND)
		disp_tenant_set_cap(w->disp, tenant, 0);
	room = disp_tenant_room(w->disp, tenant);
	if (room == 0 && (cap = disp_tenant_cap_of(w->disp, tenant)) > 0 &&
	    disp_inflight_tenant(w->disp, tenant) >= cap)
		api_obs_tenant_held(tenant);
	return room;
}

/* Give a reserved job back without counting an attempt. */
static void
hand_back(struct wire *w, const char *tenant, const char *id,
    const char *token)
{
	enum sched_err e;

	e = sched_release(w->sched, tenant, id, token);
	if (e != SCHED_OK && e != SCHED_ESTALE)
		log_warnx("tenant=%s job=%s: cannot hand the job back: %s "
		    "(it returns when its deadline passes)", tenant, id,
		    sched_strerror(e));
}

/* A request for job from its topic; NULL (job failed) with why. */
static struct disp_request *
build_request(struct wire *w, const struct sched_job *job, char *why,
    size_t whylen)
{
	struct registry_topic *t = NULL;
	struct disp_request *r = NULL;
	json_object *hdrs = NULL;
	enum reg_err e;
	size_t i;

	if ((e = registry_topic_get(w->reg, job->tenant, job->topic, &t)) !=
	    REG_OK) {
		snprintf(why, whylen, "topic lookup: %s", registry_strerror(e));
		return NULL;
	}
	if (t->callback_url == NULL) {
		snprintf(why, whylen, "the topic has no callback URL");
		goto fail;
	}
	r = disp_request_new();
	r->url = xstrdup(t->callback_url);
	r->tenant = xstrdup(job->tenant);
	r->topic = xstrdup(job->topic);
	r->job_id = xstrdup(job->id);
	r->attempt = job->attempts + 1;
	r->timeout_ms = topic_timeout(t->timeout_ms);
	r->body = xmalloc(job->body_len + 1);
	memcpy(r->body, job->body, job->body_len);
	r->body[job->body_len] = '\0';
	r->body_len = job->body_len;
	if (t->secret_len > 0 && t->secret_len <= sizeof(r->secret)) {
		memcpy(r->secret, t->secret_raw, t->secret_len);
		r->secret_len = t->secret_len;
	}
	/* The topic's headers, then the job's: the last of a name wins. */
	for (i = 0; i < t->nheaders; i++)
		if (disp_request_add_header(r, t->headers[i].name,
		    t->headers[i].value) == -1)
			log_warnx("tenant=%s topic=%s: header %s not sent: %s",
			    job->tenant, job->topic, t->headers[i].name,
			    strerror(errno));
	if (job->headers_json != NULL &&
	    (hdrs = json_tokener_parse(job->headers_json)) != NULL &&
	    json_object_is_type(hdrs, json_type_object)) {
		json_object_object_foreach(hdrs, name, val) {
			if (json_object_is_type(val, json_type_string) &&
			    disp_request_add_header(r, name,
			    json_object_get_string(val)) == -1)
				log_warnx("tenant=%s job=%s: header %s not "
				    "sent: %s", job->tenant, job->id, name,
				    strerror(errno));
		}
	}
	json_object_put(hdrs);
	registry_topic_free(t);
	return r;
fail:
	registry_topic_free(t);
	disp_request_free(r);
	return NULL;
}

/* sched_hooks.deliver: runs on the scheduler's thread; owns job. */
static void
hook_deliver(struct sched_job *job, void *arg)
{
	struct wire *w = arg;
	struct disp_request *r;
	struct delivery *dl;
	struct schedule_outcome o;
	struct sched_attempt a;
	struct log_obj lo = { job->tenant, job->topic, job->id,
	    job->attempts + 1 };
	char why[256];
	enum sched_err e;

	if ((r = build_request(w, job, why, sizeof(why))) == NULL) {
		/* A configuration problem fails the attempt, never the job
		 * silently: the schedule decides what comes next. */
		log_obj(LOG_LVL_WARN, &lo, "cannot call back: %s", why);
		memset(&o, 0, sizeof(o));
		o.kind = SCHEDULE_ERROR;
		o.retry_after_ms = -1;
		memset(&a, 0, sizeof(a));
		a.at_ms = clock_wall_ms();
		a.error = why;
		if ((e = sched_report(w->sched, job->tenant, job->id,
		    job->token, &o, &a, NULL)) != SCHED_OK)
			log_obj(LOG_LVL_WARN, &lo, "cannot record the failed "
			    "attempt: %s", sched_strerror(e));
		sched_job_free(job);
		return;
	}
	dl = xcalloc(1, sizeof(*dl));
	dl->tenant = xstrdup(job->tenant);
	snprintf(dl->id, sizeof(dl->id), "%s", job->id);
	snprintf(dl->token, sizeof(dl->token), "%s", job->token);
	dl->attempt = job->attempts + 1;
	/* The reporter decides from it instead of reading it back; set
	 * before the submit, as done() may run at once. */
	free(job->body);
	job->body = NULL;
	job->body_len = 0;
	dl->job = job;
	r->cookie = dl;
	if (disp_submit(w->disp, r) == -1) {
		log_obj(LOG_LVL_DEBUG, &lo, "dispatcher refused the job (%s): "
		    "handed back", strerror(errno));
		hand_back(w, job->tenant, job->id, job->token);
		disp_request_free(r);
		delivery_free(dl);	/* and job */
	}
}

/*
 * The dispatcher's done(): runs on a dispatcher thread, so it only queues
 * the outcome for the reporter (report.c) and returns to the loop.
 */
static void
disp_done(struct disp_result *res, void *arg)
{
	struct wire *w = arg;
	struct delivery *dl = res->cookie;
	struct schedule_outcome o;
	struct sched_attempt a;

	if (res->handed_back) {
		report_release(w->rep, dl->tenant, dl->id, dl->token,
		    &dl->job);
		delivery_free(dl);
		return;
	}
	o = disp_result_outcome(res);
	api_obs_callback(schedule_outcome_name(o.kind), res->latency_ms);
	memset(&a, 0, sizeof(a));
	a.end_ms = clock_wall_ms_ceil();	/* done() runs at its end */
	a.at_ms = res->started_ms ? res->started_ms : clock_wall_ms();
	a.status = res->http_status;
	a.latency_ms = res->latency_ms;
	a.error = res->error[0] != '\0' ? res->error : NULL;
	a.excerpt = res->body_excerpt;
	a.excerpt_len = res->body_excerpt_len;
	report_outcome(w->rep, dl->tenant, dl->id, dl->token, dl->attempt, &o,
	    &a, &res->body_excerpt, &dl->job);
	delivery_free(dl);
}

/*
 * The data_dir's lock (data_dir/instance.lock, flock) and the lease values
 * of the run that held it last (data_dir/instance: the scheduler's, then
 * the rebuild lock's, a line each).  A run that was killed or crashed
 * could not let go of its shard leases, and the next would wait
 * scheduler.lease for them, every job of those shards held back as long;
 * nor of the rebuild lock, if it was rebuilding (30 s).  Holding the lock
 * proves that run gone, so the scheduler and the restore worker let go of
 * what it held at once (sched_set_predecessor, restore_set_predecessor),
 * and ours are written in its place for the next run.  A retryd still
 * running on the same data_dir holds the lock: nothing is taken over
 * then.  The lock is held until exit.
 */
static void
instance_lock(struct wire *w)
{
	char path[PATH_MAX], tmp[PATH_MAX], prev[512], *second;
	ssize_t n;
	int fd;

	if (mkdir(conf.data_dir, 0700) == -1 && errno != EEXIST) {
		log_warn("data_dir %s", conf.data_dir);
		return;
	}
	snprintf(path, sizeof(path), "%s/instance.lock", conf.data_dir);
	if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) == -1) {
		log_warn("data_dir: %s", path);
		return;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) == -1) {
		if (errno == EWOULDBLOCK)
			log_info("data_dir %s is another running retryd's "
			    "too: this one takes over no lease early",
			    conf.data_dir);
		else
			log_warn("data_dir: flock %s", path);
		close(fd);
		return;
	}
	w->lock_fd = fd;
	snprintf(path, sizeof(path), "%s/instance", conf.data_dir);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) != -1) {
		n = read(fd, prev, sizeof(prev) - 1);
		close(fd);
		if (n > 0) {
			prev[n] = '\0';
			second = prev + strcspn(prev, "\n");
			if (*second != '\0')
				*second++ = '\0';
			second[strcspn(second, "\n")] = '\0';
			sched_set_predecessor(w->sched, prev);
			if (w->restore != NULL)
				restore_set_predecessor(w->restore, second);
		}
	}
	snprintf(tmp, sizeof(tmp), "%s/instance.tmp", conf.data_dir);
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
	    0600)) == -1) {
		log_warn("data_dir: %s", tmp);
		return;
	}
	n = dprintf(fd, "%s\n%s\n", sched_holder(w->sched),
	    w->restore != NULL ? restore_holder(w->restore) : "");
	if (close(fd) == -1 || n < 0 || rename(tmp, path) == -1)
		log_warn("data_dir: %s", path);
}

struct wire *
wire_start(int listen_fd, char *err, size_t errlen)
{
	struct wire *w = xcalloc(1, sizeof(*w));
	struct sched_config sc;
	struct sched_hooks hooks;
	struct disp_config dc;
	struct api_server_config hc;
	struct restore_config rc;
	char why[512], ua[64];

	w->lock_fd = -1;
	if ((w->reg = registry_new(conf.redis_url, conf.redis_timeout_ms,
	    1000, why, sizeof(why))) == NULL) {
		snprintf(err, errlen, "registry: %s", why);
		goto fail;
	}

	if (journal_open(w, err, errlen) == -1)
		goto fail;

	memset(&dc, 0, sizeof(dc));
	snprintf(ua, sizeof(ua), "retryd/%s", PACKAGE_VERSION);
	dc.threads = (int)conf.disp_threads;
	dc.allow_private_targets = (int)conf.disp_allow_private;
	dc.capture_max = (size_t)conf.disp_capture_bytes;
	dc.max_total_in_flight = (int)conf.disp_max_total;
	dc.max_tenant_in_flight = conf.disp_max_tenant > 0 ?
	    (int)conf.disp_max_tenant :
	    disp_tenant_cap_default((int)conf.disp_max_total);
	dc.user_agent = ua;
	if ((w->disp = disp_new(&dc, disp_done, w)) == NULL) {
		snprintf(err, errlen, "dispatcher: %s", strerror(errno));
		goto fail;
	}

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
	hooks.topic_info = hook_topic_info;
	hooks.capacity = hook_capacity;
	hooks.tenant_capacity = hook_tenant_capacity;
	hooks.deliver = hook_deliver;
	hooks.transition = hook_transition;
	hooks.ready = hook_ready;
	if (w->jrnl != NULL) {
		hooks.redis_lost = hook_redis_lost;
		hooks.redis_restarted = hook_redis_restarted;
		hooks.topic_recall = hook_topic_recall;
	}
	hooks.arg = w;
	if ((w->sched = sched_new(&sc, &hooks, why, sizeof(why))) == NULL) {
		snprintf(err, errlen, "scheduler: %s", why);
		goto fail;
	}
	if ((w->rep = report_new(w->sched)) == NULL) {
		snprintf(err, errlen, "reporter: cannot start its threads: %s",
		    strerror(errno));
		goto fail;
	}
	if (w->jrnl != NULL) {
		memset(&rc, 0, sizeof(rc));
		rc.sched = w->sched;
		rc.reg = w->reg;
		rc.jrnl = w->jrnl;
		rc.instance = conf.instance;
		rc.settle_ms = 2 * conf.journal_flush_ms;
		w->restore = restore_new(&rc);
		restore_check_start(w->restore);	/* before the marker */
	}
	instance_lock(w);
	if (sched_start(w->sched) == -1) {
		snprintf(err, errlen, "scheduler: cannot start its threads");
		goto fail;
	}
	if (w->restore != NULL && restore_start(w->restore) == -1) {
		snprintf(err, errlen, "restore: cannot start its thread: %s",
		    strerror(errno));
		goto fail;
	}

	w->ctx.sched = w->sched;
	w->ctx.reg = w->reg;
	w->ctx.disp = w->disp;
	w->ctx.jrnl = w->jrnl;
	w->ctx.version = PACKAGE_VERSION;
	w->ctx.ready = wire_ready;
	w->ctx.ready_arg = w;
	w->ctx.rebuild = wire_rebuild;
	w->ctx.rebuild_arg = w->restore;
	if (api_obs_start(&w->ctx) == -1) {
		snprintf(err, errlen, "metrics: cannot start: %s",
		    strerror(errno));
		goto fail;
	}
	memset(&hc, 0, sizeof(hc));
	hc.listen_fd = listen_fd;
	hc.threads = (int)conf.http_threads;
	hc.max_connections = (int)conf.http_max_connections;
	hc.timeout_ms = conf.http_timeout_ms;
	hc.routes = api_all_routes;
	hc.authenticate = api_authenticate;
	hc.body_limit = api_body_limit;
	hc.access_log = access_log;
	hc.arg = &w->ctx;
	if ((w->http = api_server_start(&hc, why, sizeof(why))) == NULL) {
		snprintf(err, errlen, "http: %s", why);
		goto fail;
	}
	return w;
fail:
	restore_free(w->restore);
	if (w->sched != NULL) {
		disp_drain(w->disp, 0);
		report_free(w->rep);
		sched_stop(w->sched);
		api_obs_stop();
		sched_free(w->sched);
	}
	disp_free(w->disp);
	jrnl_close(w->jrnl);
	registry_free(w->reg);
	if (w->lock_fd != -1)
		close(w->lock_fd);
	free(w);
	return NULL;
}

void
wire_reloaded(struct wire *w)
{
	/* Reloadable keys are read through CONF_GET() where they are used;
	 * cached topic settings are re-read with the new defaults. */
	registry_flush_cache(w->reg);
	jrnl_set_retention(w->jrnl, CONF_GET(journal_retention_ms));
	sched_set_batch(w->sched, (int)CONF_GET(sched_batch));
}

/* The least a drain of the HTTP requests in progress is given, ms. */
#define WIRE_DRAIN_MIN_MS	1000

void
wire_stop(struct wire *w, int64_t grace_ms)
{
	int64_t t0 = clock_mono_us(), left;

	if (w == NULL)
		return;
	api_server_quiesce(w->http);
	sched_quiesce(w->sched);
	disp_drain(w->disp, grace_ms);
	report_drain(w->rep);		/* every outcome applied */
	api_defer_stop();	/* a deletion in progress ends and answers */
	/*
	 * Requests in progress (pushes and acks waiting for the journal or
	 * Redis) are answered, new ones refused, within what is left of the
	 * grace; then the server stops.
	 */
	left = grace_ms - (clock_mono_us() - t0) / 1000;
	if (api_server_drain(w->http, left > WIRE_DRAIN_MIN_MS ? left :
	    WIRE_DRAIN_MIN_MS) > 0 && w->jrnl != NULL) {
		/*
		 * Pushes and acks still waiting for the journal may yet be
		 * committed: wait for the journal to write or fail what it
		 * holds (bounded by its own timeouts) and for its callbacks,
		 * which hand the pushes on to Redis, then give them the time
		 * to be answered.  Stopped earlier, such a push would be in
		 * the journal and not in Redis.
		 */
		log_info("http: waiting for the journal's writes in progress");
		(void)jrnl_settle(w->jrnl);
		(void)api_server_drain(w->http, WIRE_DRAIN_MIN_MS);
	}
	api_server_stop(w->http);
	api_pull_stop();
	api_push_stop();
	restore_stop(w->restore);	/* a rebuild in progress stops */
	report_free(w->rep);
	sched_stop(w->sched);
	/* After the timer, whose redis_lost hook may still ask for one. */
	restore_free(w->restore);
	api_obs_stop();		/* writes the last chart numbers */
	disp_free(w->disp);
	sched_free(w->sched);
	jrnl_close(w->jrnl);		/* flushes the queued transitions */
	registry_free(w->reg);
	if (w->lock_fd != -1)
		close(w->lock_fd);
	free(w);
}
