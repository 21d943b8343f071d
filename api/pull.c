/*
 * pull.c - pull consumers: the reserve long-poll, ack and nack with the
 * reservation's fencing token.
 *
 * Key decisions:
 *  - A waiting consumer holds no thread: its connection is suspended
 *    (api_suspend_idle, so a drain at shutdown does not wait for it) and
 *    its struct waiter sits in the list of its (tenant, topic) and in one
 *    min-heap of deadlines.  Three things resume it: the
 *    scheduler's `ready` hook (api_pull_notify), its deadline, and a probe
 *    once a second per topic that has waiters, so a lost notification
 *    delays a consumer by at most a second and never strands it.
 *  - A notification wakes one waiter, the oldest; a waiter that gets a job
 *    wakes the next, so a burst of ready jobs drains through a chain of
 *    consumers without waking 10,000 of them for one job.
 *  - A waiter reads its list's generation before it asks Redis and compares
 *    after it parked: a notification in between resumes it at once, so the
 *    window between "nothing ready" and "parked" loses nothing.
 *  - One thread serves every deadline: it sleeps until the earliest one or
 *    the next probe, whichever comes first.
 *  - A reserve's answer is printed directly, the body copied as stored
 *    when it is plain JSON that json-c would print back the same
 *    (json_plain), instead of parsed into objects and printed again, and
 *    the strings escaped by util/jsonout as json-c escapes them; a job
 *    whose body or headers are not plain takes the json-c path, so the
 *    answer is the same value either way (tests/bb/test_api_pull.py
 *    compares it with GET).  An ack's or nack's body written
 *    {"token":"..."} is read the same way (any other body takes json-c's
 *    path), and its answer is printed directly.
 *  - Batches, an extension of API.md: reserve?max=N answers {"jobs":[...]}
 *    with 1 to N jobs as soon as one is ready (it never waits to fill N),
 *    and POST /v1/jobs:ack and :nack take {"jobs":[{"id","token"}, ...]}
 *    and answer one result per item, each what the single route would
 *    answer for it alone.  One bad item refuses the request before any is
 *    applied, as jobs:batch does.
 *
 * Lock order: pull_lock, then the HTTP server's lock (api_resume).  A
 * waiter is touched by other threads only while it is linked, and it is
 * linked only under pull_lock; resuming unlinks it first.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "api/api.h"
#include "api/internal.h"
#include "api/pull_batch.h"
#include "api/validate.h"
#include "conf.h"
#include "scheduler/registry.h"
#include "scheduler/sched.h"
#include "util/clock.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/strutil.h"
#include "util/xmalloc.h"

#define PULL_BUCKETS		1024
#define PULL_PROBE_US		1000000
#define PULL_WAIT_DEFAULT_MS	30000

struct waiter;

struct wlist {
	struct wlist	*next;		/* hash chain */
	char		*key;		/* tenant "\n" topic */
	struct waiter	*head, *tail;
	uint64_t	 gen;		/* bumped by every notification */
	int		 refs;		/* waiters that point here */
};

struct waiter {
	struct api_req	*req;
	struct wlist	*list;
	struct waiter	*prev, *next;	/* in list, while linked */
	size_t		 heap_idx;	/* in the heap, while linked */
	int		 linked;
	int		 timed_out;	/* resumed by its deadline */
	int64_t		 deadline_mono_us;
	int64_t		 ttr_ms;
	size_t		 want;		/* jobs to reserve: max=, or 1 */
	int		 many;		/* max= given: answer {"jobs":[...]} */
	int		 original;	/* GET /get/{topic} */
	uint64_t	 gen;		/* the list's, before Redis was asked */
	struct pull_op	*op;		/* the reserve queued, or NULL */
	int		 counted;	/* in its tenant's waiting count */
	char		 tenant[API_TENANT_MAX + 1];
	char		 topic[API_TOPIC_MAX + 1];
};

/* A tenant's reserves in progress or waiting (limits.max_waiting). */
struct twait {
	struct twait	*next;
	int64_t		 n;
	char		 tenant[API_TENANT_MAX + 1];
};

static pthread_mutex_t pull_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pull_cond;
static pthread_t pull_thr;
static int pull_started, pull_stopping;
static struct wlist *pull_table[PULL_BUCKETS];
static struct twait *twait_table[PULL_BUCKETS];
static struct waiter **heap;
static size_t heap_len, heap_cap;

/* ------------------------------------------------------------------ */
/* The deadline heap (pull_lock held) */

static int
heap_less(size_t a, size_t b)
{
	return heap[a]->deadline_mono_us < heap[b]->deadline_mono_us;
}

static void
heap_swap(size_t a, size_t b)
{
	struct waiter *t = heap[a];

	heap[a] = heap[b];
	heap[b] = t;
	heap[a]->heap_idx = a;
	heap[b]->heap_idx = b;
}

static void
heap_up(size_t i)
{
	while (i > 0 && heap_less(i, (i - 1) / 2)) {
		heap_swap(i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void
heap_down(size_t i)
{
	size_t l, r, m;

	for (;;) {
		l = 2 * i + 1;
		r = l + 1;
		m = i;
		if (l < heap_len && heap_less(l, m))
			m = l;
		if (r < heap_len && heap_less(r, m))
			m = r;
		if (m == i)
			return;
		heap_swap(i, m);
		i = m;
	}
}

static void
heap_push(struct waiter *w)
{
	if (heap_len == heap_cap) {
		heap_cap = heap_cap ? heap_cap * 2 : 64;
		heap = xreallocarray(heap, heap_cap, sizeof(*heap));
	}
	heap[heap_len] = w;
	w->heap_idx = heap_len++;
	heap_up(w->heap_idx);
}

static void
heap_remove(struct waiter *w)
{
	size_t i = w->heap_idx;

	heap_len--;
	if (i != heap_len) {
		heap[i] = heap[heap_len];
		heap[i]->heap_idx = i;
		heap_down(i);
		heap_up(i);
	}
}

/* ------------------------------------------------------------------ */
/* Lists per (tenant, topic) (pull_lock held) */

static uint32_t
key_hash(const char *tenant, const char *topic)
{
	return str_hash(str_hash(str_hash(STR_HASH_INIT, tenant), "\n"),
	    topic);
}

static struct wlist *
wlist_find(const char *tenant, const char *topic, int create)
{
	uint32_t b = key_hash(tenant, topic) % PULL_BUCKETS;
	size_t tl = strlen(tenant);
	struct wlist *l;

	for (l = pull_table[b]; l != NULL; l = l->next)
		if (strncmp(l->key, tenant, tl) == 0 && l->key[tl] == '\n' &&
		    strcmp(l->key + tl + 1, topic) == 0)
			return l;
	if (!create)
		return NULL;
	l = xcalloc(1, sizeof(*l));
	l->key = xasprintf("%s\n%s", tenant, topic);
	l->next = pull_table[b];
	pull_table[b] = l;
	return l;
}

static void
wlist_unref(struct wlist *l)
{
	struct wlist **pp;
	const char *nl;
	char tenant[REG_TENANT_MAX + 1];
	uint32_t b;

	if (--l->refs > 0)
		return;
	nl = strchr(l->key, '\n');
	snprintf(tenant, sizeof(tenant), "%.*s", (int)(nl - l->key), l->key);
	b = key_hash(tenant, nl + 1) % PULL_BUCKETS;
	for (pp = &pull_table[b]; *pp != NULL; pp = &(*pp)->next)
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	free(l->key);
	free(l);
}

/*
 * Counts one more reserve of tenant unless it has cap already: 0, or -1
 * with *n its count (pull_lock held).
 */
static int
twait_take(const char *tenant, int64_t cap, int64_t *n)
{
	uint32_t b = str_hash(STR_HASH_INIT, tenant) % PULL_BUCKETS;
	struct twait *t;

	for (t = twait_table[b]; t != NULL; t = t->next)
		if (strcmp(t->tenant, tenant) == 0)
			break;
	if (t != NULL && t->n >= cap) {
		*n = t->n;
		return -1;
	}
	if (t == NULL) {
		t = xcalloc(1, sizeof(*t));
		snprintf(t->tenant, sizeof(t->tenant), "%s", tenant);
		t->next = twait_table[b];
		twait_table[b] = t;
	}
	t->n++;
	return 0;
}

/* One reserve of tenant less (pull_lock held). */
static void
twait_give(const char *tenant)
{
	uint32_t b = str_hash(STR_HASH_INIT, tenant) % PULL_BUCKETS;
	struct twait **pp, *t;

	for (pp = &twait_table[b]; (t = *pp) != NULL; pp = &t->next)
		if (strcmp(t->tenant, tenant) == 0) {
			if (--t->n == 0) {
				*pp = t->next;
				free(t);
			}
			return;
		}
}

static void
waiter_link(struct waiter *w)
{
	struct wlist *l = w->list;

	w->next = NULL;
	w->prev = l->tail;
	if (l->tail != NULL)
		l->tail->next = w;
	else
		l->head = w;
	l->tail = w;
	w->linked = 1;
	heap_push(w);
}

static void
waiter_unlink(struct waiter *w)
{
	struct wlist *l = w->list;

	if (!w->linked)
		return;
	if (w->prev != NULL)
		w->prev->next = w->next;
	else
		l->head = w->next;
	if (w->next != NULL)
		w->next->prev = w->prev;
	else
		l->tail = w->prev;
	w->prev = w->next = NULL;
	w->linked = 0;
	heap_remove(w);
}

/* Resume w (linked) to try again or, with timed_out, to end its wait. */
static void
waiter_wake(struct waiter *w, int timed_out)
{
	waiter_unlink(w);
	w->timed_out = timed_out;
	api_resume(w->req);
}

static void
waiter_free(void *p)
{
	struct waiter *w = p;

	pthread_mutex_lock(&pull_lock);
	waiter_unlink(w);
	if (w->list != NULL)
		wlist_unref(w->list);
	if (w->counted)
		twait_give(w->tenant);
	pthread_mutex_unlock(&pull_lock);
	pull_op_release(w->op);
	free(w);
}

/* ------------------------------------------------------------------ */
/* The deadline thread */

static struct timespec
ts_after_us(int64_t us)
{
	struct timespec ts;

	/* The condition variable's own clock: only for the timed wait. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(us / 1000000);
	ts.tv_nsec += (long)(us % 1000000) * 1000;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

static void
probe_all_locked(void)
{
	struct wlist *l;
	size_t b;

	for (b = 0; b < PULL_BUCKETS; b++)
		for (l = pull_table[b]; l != NULL; l = l->next)
			if (l->head != NULL)
				waiter_wake(l->head, 0);
}

static void *
pull_main(void *arg)
{
	struct timespec ts, probe_ts;
	int64_t now, sleep_us;
	int rc;

	(void)arg;
	pthread_mutex_lock(&pull_lock);
	probe_ts = ts_after_us(PULL_PROBE_US);
	while (!pull_stopping) {
		now = clock_mono_us();
		while (heap_len > 0 && heap[0]->deadline_mono_us <= now)
			waiter_wake(heap[0], 1);
		sleep_us = PULL_PROBE_US;
		if (heap_len > 0 && heap[0]->deadline_mono_us - now < sleep_us)
			sleep_us = heap[0]->deadline_mono_us - now;
		ts = ts_after_us(sleep_us);
		if (ts.tv_sec > probe_ts.tv_sec || (ts.tv_sec ==
		    probe_ts.tv_sec && ts.tv_nsec > probe_ts.tv_nsec))
			ts = probe_ts;
		rc = pthread_cond_timedwait(&pull_cond, &pull_lock, &ts);
		if (rc == ETIMEDOUT) {
			ts = ts_after_us(0);
			if (ts.tv_sec > probe_ts.tv_sec ||
			    (ts.tv_sec == probe_ts.tv_sec &&
			    ts.tv_nsec >= probe_ts.tv_nsec)) {
				probe_all_locked();
				probe_ts = ts_after_us(PULL_PROBE_US);
			}
		}
	}
	pthread_mutex_unlock(&pull_lock);
	return NULL;
}

/* pull_lock held. */
static int
start_locked(void)
{
	if (pull_started)
		return 0;
	clock_cond_init(&pull_cond);
	pull_stopping = 0;
	if (pthread_create(&pull_thr, NULL, pull_main, NULL) != 0) {
		log_warn("pull: cannot start the deadline thread");
		pthread_cond_destroy(&pull_cond);
		return -1;
	}
	(void)pthread_setname_np(pull_thr, "pull-deadline");
	pull_started = 1;
	return 0;
}

int
api_pull_start(void)
{
	int rc;

	pthread_mutex_lock(&pull_lock);
	rc = start_locked();
	pthread_mutex_unlock(&pull_lock);
	return rc;
}

void
api_pull_stop(void)
{
	int started;

	pthread_mutex_lock(&pull_lock);
	if ((started = pull_started)) {
		pull_stopping = 1;
		pthread_cond_signal(&pull_cond);
	}
	pthread_mutex_unlock(&pull_lock);
	if (started) {
		pthread_join(pull_thr, NULL);
		pthread_mutex_lock(&pull_lock);
		pthread_cond_destroy(&pull_cond);
		pull_started = 0;
		pthread_mutex_unlock(&pull_lock);
	}
	/* The batch workers run without the deadline thread too. */
	pull_batch_stop();
}

void
api_pull_kick(void)
{
	pthread_mutex_lock(&pull_lock);
	if (pull_started)
		pthread_cond_signal(&pull_cond);
	pthread_mutex_unlock(&pull_lock);
}

void
api_pull_notify(const char *tenant, const char *topic)
{
	struct wlist *l;

	pthread_mutex_lock(&pull_lock);
	if ((l = wlist_find(tenant, topic, 0)) != NULL) {
		l->gen++;
		if (l->head != NULL)
			waiter_wake(l->head, 0);
	}
	pthread_mutex_unlock(&pull_lock);
}

/* ------------------------------------------------------------------ */
/* The reserve answer, printed directly */

#define PLAIN_DEPTH	32
#define PLAIN_DIGITS	15	/* integer or fraction digits */
#define PULL_ANSWER_MORE 1024	/* an answer's bytes besides its strings */

/*
 * Whether s[0 .. len-1] is one JSON value of the plain kind that json-c
 * reads and prints back as the same value: strings of printable ASCII
 * with no \\u escapes, numbers without exponents or long digit runs, at
 * most PLAIN_DEPTH deep, not a bare null, no member named twice (a body
 * sent as a string may hold one; json-c would show it as the string).
 * Such text can be copied into an answer as it is; anything else (valid
 * JSON or not) takes the json-c path.  The request bodies' RFC 8259 check
 * reads it and says its shape.
 */
static int
json_plain(const char *s, size_t len)
{
	struct api_json_shape sh;
	size_t i = 0;
	char dup[1];

	if (api_json_scan_dup((const unsigned char *)s, len, &sh, dup,
	    sizeof(dup)) != NULL ||
	    sh.depth > PLAIN_DEPTH || sh.digits > PLAIN_DIGITS ||
	    sh.exponent || sh.u_escape || sh.unprintable)
		return 0;
	/* json-c reads a bare null as no value: the body is then a string. */
	while (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')
		i++;
	return s[i] != 'n';
}

/*
 * The reserve answer as reserved_json() would print it, built without
 * json-c: the body and headers copied as stored when json_plain() says
 * they read back the same, the strings escaped as json-c escapes them.
 * 0, or -1 when the body or headers need json-c.
 */
static int
reserved_text(struct buf *b, const struct sched_job *job, int64_t ttr_ms)
{
	const char *hdr = job->headers_json != NULL ? job->headers_json :
	    "{}";

	/* Room for all of it (a string escaped is at most 6 times as long). */
	buf_init(b, job->body_len + strlen(hdr) + PULL_ANSWER_MORE +
	    6 * (strlen(job->id) + strlen(job->token) +
	    (job->topic != NULL ? strlen(job->topic) : 0) +
	    (job->bizkey != NULL ? strlen(job->bizkey) : 0) +
	    (job->schedule != NULL ? strlen(job->schedule) : 0)));
	if (!json_plain(job->body, job->body_len) ||
	    !json_plain(hdr, strlen(hdr)) || job->topic == NULL)
		return -1;
	api_put_str(b, "{\"id\":", job->id);
	api_put_str(b, ",\"topic\":", job->topic);
	api_put_str(b, ",\"state\":", sched_state_name(job->state));
	api_put_str(b, ",\"bizkey\":", job->bizkey);
	api_put_int(b, ",\"priority\":", job->priority);
	api_put_int(b, ",\"created_ms\":", job->created_ms);
	api_put_int(b, ",\"next_attempt_ms\":", job->due_ms);
	api_put_int(b, ",\"attempt_count\":", job->attempts);
	buf_puts(b, ",\"body\":");
	buf_append(b, job->body, job->body_len);
	buf_puts(b, ",\"headers\":");
	buf_puts(b, hdr);
	api_put_str(b, ",\"retry_schedule\":", job->schedule);
	api_put_int(b, ",\"ttr_ms\":", job->ttr_ms > 0 ? job->ttr_ms : ttr_ms);
	api_put_str(b, ",\"token\":", job->token);
	api_put_int(b, ",\"attempt\":", job->attempts + 1);
	api_put_int(b, ",\"deadline_ms\":", job->deadline_ms);
	return buf_append(b, "}", 1);
}

/* ------------------------------------------------------------------ */
/* Handlers */

static json_object *
reserved_json(const struct sched_job *job, int64_t ttr_ms)
{
	json_object *o = api_job_json(job, 0);

	json_object_object_add(o, "token", json_object_new_string(job->token));
	json_object_object_add(o, "attempt",
	    json_object_new_int(job->attempts + 1));
	json_object_object_add(o, "ttr_ms", json_object_new_int64(
	    job->ttr_ms > 0 ? job->ttr_ms : ttr_ms));
	json_object_object_add(o, "deadline_ms",
	    json_object_new_int64(job->deadline_ms));
	return o;
}

/* First call: validate and make the waiter.  0, or -1 after answering. */
static int
reserve_begin(struct api_req *req, const char *topic, int original)
{
	struct registry_topic *t = NULL;
	struct waiter *w;
	int64_t maxw = CONF_GET(limit_max_wait_ms), wait_ms, want = 0;
	int64_t dflt = PULL_WAIT_DEFAULT_MS < maxw ? PULL_WAIT_DEFAULT_MS :
	    maxw;
	int64_t cap = CONF_GET(limit_max_waiting), n;
	int full;

	if (api_topic_load(req, topic, &t) == -1)
		return -1;
	if (t->mode != REG_MODE_PULL) {
		registry_topic_free(t);
		api_error(req, 409, "wrong_mode", "topic",
		    "%s is a push topic: its jobs go to its callback_url",
		    topic);
		return -1;
	}
	if (api_query_int(req, "wait_ms", 0, maxw, dflt, &wait_ms) == -1 ||
	    (!original && api_query_int(req, "max", 1, PULL_RESERVE_MAX, 0,
	    &want) == -1)) {
		registry_topic_free(t);
		return -1;
	}
	if (cap == 0)
		cap = conf.http_max_connections / 2 > 0 ?
		    conf.http_max_connections / 2 : 1;
	pthread_mutex_lock(&pull_lock);
	full = twait_take(req->tenant, cap, &n) == -1;
	pthread_mutex_unlock(&pull_lock);
	if (full) {
		registry_topic_free(t);
		/* The connection too: the slot is what others lack. */
		api_add_header(req, "Retry-After", "1");
		api_add_header(req, "Connection", "close");
		api_error(req, 429, "too_many_waiting", NULL, "tenant %s has "
		    "%lld reserves waiting on this instance, its most "
		    "(limits.max_waiting); try again later", req->tenant,
		    (long long)n);
		return -1;
	}
	w = xcalloc(1, sizeof(*w));
	w->counted = 1;
	snprintf(w->tenant, sizeof(w->tenant), "%s", req->tenant);
	w->req = req;
	w->ttr_ms = t->ttr_ms;
	w->many = want > 0;
	w->want = want > 0 ? (size_t)want : 1;
	w->original = original;
	w->deadline_mono_us = clock_mono_us() + wait_ms * 1000;
	snprintf(w->topic, sizeof(w->topic), "%s", t->name);
	registry_topic_free(t);
	pthread_mutex_lock(&pull_lock);
	w->list = wlist_find(req->tenant, w->topic, 1);
	w->list->refs++;
	pthread_mutex_unlock(&pull_lock);
	req->state = w;
	req->free_state = waiter_free;
	return 0;
}

/* Appends job's part of a reserve answer to b. */
static void
reserved_put(struct buf *b, const struct sched_job *job, int64_t ttr_ms)
{
	json_object *o;
	const char *s;
	struct buf t;
	size_t len;

	if (reserved_text(&t, job, ttr_ms) == 0)
		buf_append(b, t.data, t.len);
	else {
		o = reserved_json(job, ttr_ms);
		s = json_object_to_json_string_length(o,
		    JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
		    &len);
		buf_append(b, s, len);
		json_object_put(o);
	}
	buf_free(&t);
}

static void
jobs_free(struct sched_job **jobs, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		sched_job_free(jobs[i]);
	free(jobs);
}

/*
 * The reserve's outcome (jobs[0 .. n-1], the caller's): answer, or park
 * w.  A reserve with max= answers {"jobs":[...]}, one without the job.
 */
static void
reserve_done(struct api_req *req, struct waiter *w, enum sched_err e,
    struct sched_job **jobs, size_t n)
{
	struct buf b;
	size_t i;
	int stale;

	if (e == SCHED_OK) {	/* n > 0: the worker says OK only then */
		buf_init(&b, SIZE_MAX / 2);	/* the jobs bound it */
		if (w->many)
			buf_puts(&b, "{\"jobs\":[");
		for (i = 0; i < n; i++) {
			if (i > 0)
				buf_append(&b, ",", 1);
			reserved_put(&b, jobs[i], w->ttr_ms);
		}
		if (w->many)
			buf_puts(&b, "]}");
		api_reply(req, 200, "application/json", b.data, b.len);
		buf_free(&b);
		jobs_free(jobs, n);
		/* There may be more: pass the word on. */
		pthread_mutex_lock(&pull_lock);
		if (w->list->head != NULL)
			waiter_wake(w->list->head, 0);
		pthread_mutex_unlock(&pull_lock);
		return;
	}
	jobs_free(jobs, n);
	if (e != SCHED_ENOTFOUND) {
		api_sched_error(req, e, "topic");
		return;
	}
	if (w->timed_out || clock_mono_us() >= w->deadline_mono_us) {
		api_reply_empty(req, 204);
		return;
	}

	/* Park: suspend first, then publish the request to other threads. */
	api_suspend_idle(req);
	pthread_mutex_lock(&pull_lock);
	if (start_locked() == -1) {
		/* No deadline thread: end the wait now rather than never. */
		w->timed_out = 1;
		pthread_mutex_unlock(&pull_lock);
		api_resume(req);
		return;
	}
	stale = w->list->gen != w->gen;
	if (!stale) {
		waiter_link(w);
		if (heap[0] == w)
			pthread_cond_signal(&pull_cond);
	}
	pthread_mutex_unlock(&pull_lock);
	if (stale)
		api_resume(req);	/* a notification came meanwhile */
}

/*
 * The handler of a reserve: first called, it queues the reserve to the
 * batch worker (pull_batch.c) and parks; called again with the outcome, it
 * answers, or parks the consumer as a waiter when nothing was ready.
 */
void
api_pull_reserve(struct api_req *req, const char *topic, int original)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct sched_job **jobs;
	struct pull_op *op;
	struct waiter *w;
	enum sched_err e;
	size_t n;
	int first;

	if ((first = req->state == NULL) &&
	    reserve_begin(req, topic, original) == -1)
		return;
	w = req->state;
	if ((op = w->op) != NULL) {
		if (!pull_op_wait(req, op))
			return;
		w->op = NULL;
		if (op->njobs > 0 && api_client_gone(req)) {
			/* Left during the reserve: its jobs go back. */
			pull_op_release(op);
			api_reply_empty(req, 204);
			return;
		}
		e = op->err;
		jobs = op->jobs;
		n = op->njobs;
		op->jobs = NULL;
		op->njobs = 0;
		pull_op_release(op);
		reserve_done(req, w, e, jobs, n);
		return;
	}
	pthread_mutex_lock(&pull_lock);
	w->gen = w->list->gen;
	pthread_mutex_unlock(&pull_lock);

	/*
	 * A consumer that left while parked must not take a job it will
	 * never see: end it, and pass a wake-up it may have had to the next.
	 * (One that just asked is asked again only if its reserve got jobs.)
	 */
	if (!first && api_client_gone(req)) {
		api_reply_empty(req, 204);
		pthread_mutex_lock(&pull_lock);
		if (!w->timed_out && w->list->head != NULL &&
		    w->list->head != w)
			waiter_wake(w->list->head, 0);
		pthread_mutex_unlock(&pull_lock);
		return;
	}
	op = pull_op_new(req, PULL_OP_RESERVE);
	op->sched = ctx->sched;
	op->ttr_ms = w->ttr_ms;
	op->want = w->want;
	snprintf(op->topic, sizeof(op->topic), "%s", w->topic);
	w->op = op;
	if (pull_op_submit(req, op) == 1)
		api_pull_reserve(req, topic, original);	/* done: answer */
}

static int
valid_token(const char *s)
{
	size_t n = 0;

	for (; *s != '\0'; s++, n++)
		if (n >= PULL_TOKEN_MAX || !((*s >= 'a' && *s <= 'z') ||
		    (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
		    *s == '-' || *s == '_' || *s == '.' || *s == ':'))
			return 0;
	return n > 0;
}

/* A token's check: 0, or -1 after answering 400 naming field. */
static int
check_token(struct api_req *req, const char *token, const char *field)
{
	if (valid_token(token))
		return 0;
	api_error(req, 400, "invalid_field", field,
	    "token must be the one reserve answered");
	return -1;
}

static void
finish_free_state(void *state)
{
	pull_op_release(state);
}

/*
 * Hands op (its items filled) to the batch worker for req; done answers
 * once the outcome is in, here when it already is.
 */
static void
finish_submit(struct api_req *req, struct pull_op *op, int ack,
    void (*done)(struct api_req *))
{
	struct api_ctx *ctx = api_ctx_of(req);

	op->sched = ctx->sched;
	op->ack = ack;
	if (conf.journal_mode == CONF_JOURNAL_SYNC)
		op->jrnl = ctx->jrnl;
	req->state = op;
	req->free_state = finish_free_state;
	if (pull_op_submit(req, op) == 1)
		done(req);
}

/*
 * What item it of op (applied, its journal waited for) answers: 0 and its
 * answer appended to b ("status":200 in it for a batch's item), or -1 and
 * the error in *d.  A finished job gives its pending room back to the
 * tenant's quota here, once.
 */
static int
item_answer(struct api_req *req, const struct pull_op *op,
    const struct pull_item *it, int in_batch, struct buf *b,
    struct api_err_desc *d)
{
	struct api_ctx *ctx = api_ctx_of(req);
	const struct schedule_decision *dec = &it->decision;
	struct sched_job *job = NULL;
	enum sched_err e = it->err;

	if (e == SCHED_ESTALE) {
		/* A token matches no job that does not exist: say so. */
		if (sched_get(ctx->sched, req->tenant, it->id, &job) ==
		    SCHED_ENOTFOUND)
			e = SCHED_ENOTFOUND;
		sched_job_free(job);
	}
	if (e == SCHED_ECONFLICT) {
		d->status = 409;
		d->code = "job_not_reserved";
		d->field = NULL;
		snprintf(d->msg, sizeof(d->msg), "the job is not reserved");
		return -1;
	}
	if (e == SCHED_ENOTFOUND && api_rebuild_owed(ctx)) {
		api_rebuilding_describe(d);
		return -1;
	}
	if (e != SCHED_OK) {
		api_sched_describe(e, "job", d);
		return -1;
	}
	if (dec->verdict != SCHEDULE_RETRY)
		api_quota_refund(req->tenant, 1);
	if (op->jerr != JRNL_OK) {
		d->status = 503;
		d->code = "journal_unavailable";
		d->field = NULL;
		if (op->jerr == JRNL_EFULL)
			/* A transition of its batch was dropped. */
			snprintf(d->msg, sizeof(d->msg), "the %s was applied "
			    "but the journal's queue is full, so it is not "
			    "journaled", op->ack ? "ack" : "nack");
		else
			snprintf(d->msg, sizeof(d->msg), "the %s was applied "
			    "but is not journaled yet (%s); it is written when "
			    "the journal is back", op->ack ? "ack" : "nack",
			    jrnl_strerror(op->jerr));
		return -1;
	}
	api_put_str(b, "{\"id\":", it->id);
	if (in_batch)
		buf_puts(b, ",\"status\":200");
	api_put_str(b, ",\"state\":", dec->verdict == SCHEDULE_DONE ?
	    "delivered" : dec->verdict == SCHEDULE_RETRY ? "retrying" :
	    "dead");
	if (dec->verdict == SCHEDULE_RETRY)
		api_put_int(b, ",\"next_attempt_ms\":", dec->next_ms);
	buf_append(b, "}", 1);
	return 0;
}

/* Logs that n outcomes of op applied in Redis are not journaled. */
static void
log_unjournaled(struct api_req *req, const struct pull_op *op, size_t n)
{
	if (op->jerr == JRNL_OK || n == 0)
		return;
	if (op->jerr == JRNL_EFULL)
		log_warnx("api: journal: %zu %s(s) of %s (%s...) made in "
		    "Redis are not journaled: the journal's queue is full", n,
		    op->ack ? "ack" : "nack", req->tenant, op->items[0].id);
	else
		log_warnx("api: journal: %zu %s(s) of %s (%s...) made in "
		    "Redis are queued for the journal only: %s", n,
		    op->ack ? "ack" : "nack", req->tenant, op->items[0].id,
		    jrnl_strerror(op->jerr));
}

/* Called again with the ack's outcome in req->state: answer it. */
static void
finish_done(struct api_req *req)
{
	struct pull_op *op = req->state;
	struct api_err_desc d;
	struct buf b;

	if (!pull_op_wait(req, op))
		return;
	buf_init(&b, 6 * sizeof(op->one.id) + PULL_ANSWER_MORE);
	if (item_answer(req, op, &op->one, 0, &b, &d) == 0)
		api_reply(req, 200, "application/json", b.data, b.len);
	else {
		if (op->one.err == SCHED_OK)
			log_unjournaled(req, op, 1);
		api_error(req, d.status, d.code, d.field, "%s", d.msg);
	}
	buf_free(&b);
}

/* Called again with a batch's outcomes: one result per item, in order. */
static void
finish_many_done(struct api_req *req)
{
	struct pull_op *op = req->state;
	struct api_err_desc d;
	struct buf b;
	char field[64];
	size_t i, applied = 0;

	if (!pull_op_wait(req, op))
		return;
	buf_init(&b, SIZE_MAX / 2);	/* the items bound it */
	buf_puts(&b, "{\"results\":[");
	for (i = 0; i < op->nitems; i++) {
		if (i > 0)
			buf_append(&b, ",", 1);
		if (op->items[i].err == SCHED_OK)
			applied++;
		if (item_answer(req, op, &op->items[i], 1, &b, &d) == 0)
			continue;
		api_put_str(&b, "{\"id\":", op->items[i].id);
		api_put_int(&b, ",\"status\":", d.status);
		api_put_str(&b, ",\"error\":{\"code\":", d.code);
		api_put_str(&b, ",\"message\":", d.msg);
		if (d.field != NULL) {
			snprintf(field, sizeof(field), "jobs[%zu].%s", i,
			    d.field);
			api_put_str(&b, ",\"field\":", field);
		}
		buf_puts(&b, "}}");
	}
	buf_puts(&b, "]}");
	log_unjournaled(req, op, applied);
	api_reply(req, 200, "application/json", b.data, b.len);
	buf_free(&b);
}

/*
 * Ack or nack: first called, validate and queue the outcome to the batch
 * worker, parked; called again (req->state set), answer.
 */
void
api_pull_finish(struct api_req *req, const char *id, const char *token,
    int ack)
{
	struct pull_op *op;

	if (req->state != NULL) {
		finish_done(req);
		return;
	}
	if (api_check_job_id(req, id) == -1)
		return;
	if (token == NULL) {
		api_error(req, 400, "missing_field", "token",
		    "the reservation's token is required");
		return;
	}
	if (check_token(req, token, "token") == -1)
		return;
	op = pull_op_new(req, PULL_OP_FINISH);
	snprintf(op->one.id, sizeof(op->one.id), "%s", id);
	snprintf(op->one.token, sizeof(op->one.token), "%s", token);
	finish_submit(req, op, ack, finish_done);
}

static void
reserve(struct api_req *req)
{
	api_pull_reserve(req, req->param[0], 0);
}

/*
 * The token of a body written the way consumers write it, exactly
 * {"token":"TOKEN"} with a token of valid_token()'s characters, read
 * without json-c: 0 and tok filled, or -1 for any other body (json-c's
 * path, with its answers to bad input).
 */
static int
plain_token(const struct buf *body, char tok[PULL_TOKEN_MAX + 1])
{
	static const char head[] = "{\"token\":\"";
	size_t hl = sizeof(head) - 1, n;

	if (body->len < hl + 3 || body->len - hl - 2 > PULL_TOKEN_MAX ||
	    memcmp(body->data, head, hl) != 0 ||
	    memcmp(body->data + body->len - 2, "\"}", 2) != 0)
		return -1;
	n = body->len - hl - 2;
	memcpy(tok, body->data + hl, n);
	tok[n] = '\0';
	return valid_token(tok) ? 0 : -1;
}

static void
finish(struct api_req *req, int ack)
{
	static const char *const allowed[] = { "token", NULL };
	json_object *body = NULL;
	const char *token = NULL;
	char tok[PULL_TOKEN_MAX + 1];

	if (req->state != NULL) {	/* called again: the answer */
		api_pull_finish(req, NULL, NULL, ack);
		return;
	}
	if (plain_token(&req->body, tok) == 0) {
		api_pull_finish(req, req->param[0], tok, ack);
		return;
	}
	if (api_check_job_id(req, req->param[0]) == -1 ||
	    api_body_json(req, &body) == -1 ||
	    api_json_only(req, body, allowed, "") == -1 ||
	    api_json_string(req, body, "token", "token", PULL_TOKEN_MAX,
	    &token, NULL) == -1)
		goto out;
	api_pull_finish(req, req->param[0], token, ack);
out:
	json_object_put(body);
}

static void
ack(struct api_req *req)
{
	finish(req, 1);
}

static void
nack(struct api_req *req)
{
	finish(req, 0);
}

/*
 * Item i of a batch's body (o): 0 and it filled, or -1 after answering
 * 400 naming the item's field.
 */
static int
finish_item_parse(struct api_req *req, json_object *o, size_t i,
    struct pull_item *it)
{
	static const char *const allowed[] = { "id", "token", NULL };
	const char *id = NULL, *token = NULL;
	char prefix[32], fid[48], ftok[48];

	snprintf(prefix, sizeof(prefix), "jobs[%zu].", i);
	snprintf(fid, sizeof(fid), "jobs[%zu].id", i);
	snprintf(ftok, sizeof(ftok), "jobs[%zu].token", i);
	if (!json_object_is_type(o, json_type_object)) {
		snprintf(prefix, sizeof(prefix), "jobs[%zu]", i);
		api_error(req, 400, "invalid_field", prefix,
		    "an item must be a JSON object with id and token");
		return -1;
	}
	if (api_json_only(req, o, allowed, prefix) == -1 ||
	    api_json_string(req, o, "id", fid, API_JOB_ID_MAX, &id,
	    NULL) == -1 ||
	    api_json_string(req, o, "token", ftok, PULL_TOKEN_MAX, &token,
	    NULL) == -1)
		return -1;
	if (id == NULL || token == NULL) {
		api_error(req, 400, "missing_field", id == NULL ? fid : ftok,
		    "each item needs the job's id and its reservation's "
		    "token");
		return -1;
	}
	if (api_check_job_id_field(req, id, fid) == -1 ||
	    check_token(req, token, ftok) == -1)
		return -1;
	snprintf(it->id, sizeof(it->id), "%s", id);
	snprintf(it->token, sizeof(it->token), "%s", token);
	return 0;
}

/*
 * POST /v1/jobs:ack and :nack, {"jobs":[{"id","token"}, ...]}: every item
 * is checked before any is applied (one bad item refuses the request, as
 * in jobs:batch); then all of them go to the batch worker as one op, and
 * each is answered as the single route would answer it alone.
 */
static void
finish_many(struct api_req *req, int ack)
{
	size_t i, n;
	struct pull_item *items = NULL;
	json_object *body = NULL, *arr;
	struct pull_op *op;

	if (req->state != NULL) {	/* called again: the answer */
		finish_many_done(req);
		return;
	}
	if (api_body_json(req, &body) == -1 ||
	    api_json_batch(req, body, "{\"id\", \"token\"}",
	    (size_t)CONF_GET(limit_batch), &arr, &n) == -1)
		goto out;
	items = xcalloc(n, sizeof(*items));
	for (i = 0; i < n; i++)
		if (finish_item_parse(req, json_object_array_get_idx(arr, i),
		    i, &items[i]) == -1)
			goto out;
	op = pull_op_new(req, PULL_OP_FINISH);
	op->items = items;
	op->nitems = n;
	items = NULL;
	finish_submit(req, op, ack, finish_many_done);
out:
	free(items);
	json_object_put(body);
}

static void
ack_many(struct api_req *req)
{
	finish_many(req, 1);
}

static void
nack_many(struct api_req *req)
{
	finish_many(req, 0);
}

const struct api_route api_routes_pull[] = {
	{ "GET", "/v1/topics/{topic}/reserve", API_AUTH_TENANT, reserve,
	    "long-poll for a ready job of a pull topic", API_NO_HEAD },
	{ "POST", "/v1/jobs/{id}/ack", API_AUTH_TENANT, ack,
	    "finish a reserved job", 0 },
	{ "POST", "/v1/jobs/{id}/nack", API_AUTH_TENANT, nack,
	    "fail a reserved job's attempt", 0 },
	{ "POST", "/v1/jobs:ack", API_AUTH_TENANT, ack_many,
	    "finish reserved jobs, each with its token", 0 },
	{ "POST", "/v1/jobs:nack", API_AUTH_TENANT, nack_many,
	    "fail reserved jobs' attempts, each with its token", 0 },
	{ NULL, NULL, 0, NULL, NULL, 0 },
};
