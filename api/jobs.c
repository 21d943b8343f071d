/*
 * jobs.c - jobs (tenant key): push one or a batch, look up, list, cancel,
 * reschedule, retry from dead; and the path every accepted job takes:
 * validation, quota, journal, scheduler.
 *
 * Key decisions:
 *  - One parser (api_job_parse) and one acceptance path (api_jobs_accept)
 *    serve every route that makes jobs, the original /push included.
 *  - The client says when the job is due; the first attempt runs at that
 *    time plus the first wait of its schedule (schedule_first_ms).  Answers
 *    carry both: run_at_ms (the due time asked for) and next_attempt_ms.
 *  - A JSON string body is sent as its content (so text or form data can be
 *    sent); any other JSON value as its compact text.  Reading a job back,
 *    a body that parses as JSON is shown as that value, else as a string.
 *  - The pending quota is read from Redis at most every 100 ms per tenant
 *    and taken from the cached count under a lock, so a burst cannot slip
 *    past it between two reads.  Jobs taken and not yet settled (on their
 *    way through the journal to Redis) are counted apart and added to
 *    each count read, which cannot hold them.
 *  - A duplicate is answered as one whatever the quota (an idempotent
 *    retry gets the answer the first push got): a client id, looked up
 *    for every push that has one, is looked up before the quota; a
 *    bizkey, which Redis's push script deduplicates, is looked up only
 *    when the quota refuses, so a push under the quota pays no round trip
 *    for it.  Then too, the jobs of a batch that share a bizkey take the
 *    room of one: Redis makes only the first.
 *  - Accepted means journaled: jobs are written to the journal before
 *    Redis.  A journaled job that Redis then does not make (deduplicated by
 *    bizkey, refused, Redis down) has its row removed (a void transition,
 *    which takes only the row its own put wrote), flushed before the
 *    answer, so a restore never brings it back as a second job.  A
 *    client-given id (/push) that names a job already in Redis is
 *    answered from Redis without touching the journal, whose row for that
 *    id must keep describing the job that exists.
 *  - In sync mode a push waits for its journal commit without holding an
 *    HTTP thread: the request is parked (api_suspend) with its parsed jobs
 *    in req->state (struct api_accept), the journal calls back from its
 *    writer once the rows are committed, the request goes to the push
 *    threads, and the handler, called again, answers.  So every push in
 *    flight, not only one per HTTP thread, shares a group commit.
 *  - Redis is pushed to by API_PUSHERS push threads, never by the handler:
 *    each takes every request queued (committed, or not waiting for the
 *    journal) and pushes all their jobs in one sched_push_many, so pushes
 *    arriving together share round trips and script calls, and the journal
 *    commits the next group meanwhile.  Journal first, Redis after, always.
 */
#include "config.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "api/api.h"
#include "api/internal.h"
#include "api/jobs_journal.h"
#include "api/validate.h"
#include "conf.h"
#include "journal/journal.h"
#include "scheduler/registry.h"
#include "scheduler/sched.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/id.h"
#include "util/jsonout.h"
#include "util/log.h"
#include "util/strutil.h"
#include "util/xmalloc.h"

#define QUOTA_TTL_US		100000
#define QUOTA_BUCKETS		256
/* An item of a push's answer at most: the id (escaped) and 256 bytes more. */
#define API_RESULT_MAX		(6 * API_JOB_ID_MAX + 256)

/* ------------------------------------------------------------------ */
/* Rendering */

/* Bytes as a JSON string: invalid UTF-8 becomes U+FFFD. */
static json_object *
safe_string(const char *s, size_t len)
{
	struct buf b;
	json_object *o;
	size_t i = 0, n, k;
	unsigned char c;
	uint32_t cp;

	buf_init(&b, len * 3 + 1);
	while (i < len) {
		c = (unsigned char)s[i];
		n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) ==
		    0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
		if (n == 0 || i + n > len)
			goto bad;
		cp = n == 1 ? c : n == 2 ? (c & 0x1fu) : n == 3 ?
		    (c & 0x0fu) : (c & 0x07u);
		for (k = 1; k < n; k++) {
			if (((unsigned char)s[i + k] & 0xc0) != 0x80)
				goto bad;
			cp = (cp << 6) | ((unsigned char)s[i + k] & 0x3fu);
		}
		if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) ||
		    (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			goto bad;
		buf_append(&b, s + i, n);
		i += n;
		continue;
bad:
		buf_append(&b, "\xef\xbf\xbd", 3);
		i++;
	}
	o = json_object_new_string_len(b.data != NULL ? b.data : "",
	    (int)b.len);
	buf_free(&b);
	return o;
}

json_object *
api_body_value(const char *body, size_t len)
{
	struct api_json_shape sh;
	struct json_tokener *tok;
	json_object *v = NULL;
	char *copy, dup[1];
	size_t i;

	if (body == NULL || len == 0)
		return json_object_new_string("");
	/*
	 * An integer json-c would clamp, a member named twice or a name
	 * holding \u0000 (a body sent as a string: json-c would show one of
	 * the two, or the name cut), is shown as the text it is.
	 */
	if (memchr(body, '\0', len) != NULL || len > INT32_MAX - 1 ||
	    api_json_scan_dup((const unsigned char *)body, len, &sh, dup,
	    sizeof(dup)) != NULL || sh.int_range)
		return safe_string(body, len);
	/* A trailing blank ends a top-level number ("42" is complete). */
	copy = xmalloc(len + 1);
	memcpy(copy, body, len);
	copy[len] = ' ';
	tok = json_tokener_new_ex(64);
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT |
	    JSON_TOKENER_VALIDATE_UTF8);
	v = json_tokener_parse_ex(tok, copy, (int)len + 1);
	/* A body of null parses to NULL, which json-c prints as null. */
	if (json_tokener_get_error(tok) == json_tokener_success) {
		for (i = json_tokener_get_parse_end(tok); i < len + 1; i++)
			if (strchr(" \t\r\n", copy[i]) == NULL)
				break;
		if (i == len + 1) {
			json_tokener_free(tok);
			free(copy);
			return v;
		}
	}
	json_object_put(v);
	json_tokener_free(tok);
	free(copy);
	return safe_string(body, len);
}

static int
unfinished(enum sched_state s)
{
	return s == SCHED_SCHEDULED || s == SCHED_READY ||
	    s == SCHED_IN_FLIGHT || s == SCHED_RETRYING;
}

json_object *
api_job_json(const struct sched_job *job, int with_log)
{
	json_object *o = json_object_new_object(), *a, *h = NULL;
	const struct sched_attempt *at;
	size_t i;

	json_object_object_add(o, "id", json_object_new_string(job->id));
	json_object_object_add(o, "topic",
	    json_object_new_string(job->topic ? job->topic : ""));
	json_object_object_add(o, "state",
	    json_object_new_string(sched_state_name(job->state)));
	json_object_object_add(o, "bizkey", job->bizkey != NULL ?
	    json_object_new_string(job->bizkey) : NULL);
	json_object_object_add(o, "priority",
	    json_object_new_int(job->priority));
	json_object_object_add(o, "created_ms",
	    json_object_new_int64(job->created_ms));
	json_object_object_add(o, "next_attempt_ms", unfinished(job->state) ?
	    json_object_new_int64(job->due_ms) : NULL);
	json_object_object_add(o, "attempt_count",
	    json_object_new_int(job->attempts));
	json_object_object_add(o, "body",
	    api_body_value(job->body, job->body_len));
	if (job->headers_json != NULL)
		h = json_tokener_parse(job->headers_json);
	json_object_object_add(o, "headers",
	    h != NULL ? h : json_object_new_object());
	json_object_object_add(o, "retry_schedule", job->schedule != NULL ?
	    json_object_new_string(job->schedule) : NULL);
	if (job->ttr_ms > 0)
		json_object_object_add(o, "ttr_ms",
		    json_object_new_int64(job->ttr_ms));
	if (!with_log)
		return o;
	a = json_object_new_array();
	for (i = 0; i < job->nattempt_log; i++) {
		at = &job->attempt_log[i];
		json_object_array_add(a, api_attempt_json(at->at_ms,
		    at->status, at->latency_ms, at->error, at->excerpt,
		    at->excerpt_len));
	}
	json_object_object_add(o, "attempts", a);
	return o;
}

json_object *
api_attempt_json(int64_t at_ms, int status, int64_t latency_ms,
    const char *error, const char *excerpt, size_t excerpt_len)
{
	json_object *e = json_object_new_object();

	json_object_object_add(e, "at_ms", json_object_new_int64(at_ms));
	json_object_object_add(e, "status", json_object_new_int(status));
	json_object_object_add(e, "latency_ms",
	    json_object_new_int64(latency_ms));
	json_object_object_add(e, "error", error != NULL ?
	    json_object_new_string(error) : NULL);
	json_object_object_add(e, "response", excerpt != NULL ?
	    safe_string(excerpt, excerpt_len) : NULL);
	return e;
}

/*
 * The answer of one accepted job, with ,"status":N before the closing
 * brace when status is not 0, appended to b without json-c (a batch
 * answers a thousand of these).  b has room for API_RESULT_MAX more.
 */
static void
job_result_put(struct buf *b, const struct api_job_in *j, int status)
{
	api_put_str(b, "{\"id\":", j->res.id);
	api_put_str(b, ",\"state\":", sched_state_name(j->res.state));
	if (j->res.deduplicated) {
		buf_puts(b, ",\"deduplicated\":true");
		api_put_int(b, ",\"next_attempt_ms\":", j->res.run_at_ms);
	} else {
		api_put_int(b, ",\"run_at_ms\":", j->due_ms);
		api_put_int(b, ",\"next_attempt_ms\":", j->run_at_ms);
	}
	if (status != 0)
		api_put_int(b, ",\"status\":", status);
	buf_append(b, "}", 1);
}

void
api_reply_job_result(struct api_req *req, int status,
    const struct api_job_in *j)
{
	struct buf b;

	buf_init(&b, API_RESULT_MAX);
	job_result_put(&b, j, 0);
	api_reply(req, status, "application/json", b.data, b.len);
	buf_free(&b);
}

/* ------------------------------------------------------------------ */
/* Parsing a job */

void
api_job_in_clear(struct api_job_in *j)
{
	free(j->body);
	free(j->headers_json);
	free(j->schedule);
	memset(j, 0, sizeof(*j));
}

/*
 * out = prefix name (cut to outlen - 1 bytes), for error answers.  Built
 * for each member of every job parsed, so by memcpy, not snprintf (8 calls
 * of about 800 instructions each per job).
 */
static void
field_name(char *out, size_t outlen, const char *prefix, const char *name)
{
	size_t p = strlen(prefix), n = strlen(name);

	if (p > outlen - 1)
		p = outlen - 1;
	if (n > outlen - 1 - p)
		n = outlen - 1 - p;
	memcpy(out, prefix, p);
	memcpy(out + p, name, n);
	out[p + n] = '\0';
}

/*
 * 1 when v holds an integer at an end of json-c's range, where json-c puts
 * one beyond it: asked only when the request's text had such an integer.
 */
static int
json_has_clamped(json_object *v)
{
	struct json_object_iterator it, end;
	size_t i, n;

	switch (json_object_get_type(v)) {
	case json_type_int:
		return json_object_get_int64(v) == INT64_MIN ||
		    json_object_get_int64(v) == INT64_MAX ||
		    json_object_get_uint64(v) == UINT64_MAX;
	case json_type_array:
		n = json_object_array_length(v);
		for (i = 0; i < n; i++)
			if (json_has_clamped(json_object_array_get_idx(v, i)))
				return 1;
		return 0;
	case json_type_object:
		it = json_object_iter_begin(v);
		end = json_object_iter_end(v);
		for (; !json_object_iter_equal(&it, &end);
		    json_object_iter_next(&it))
			if (json_has_clamped(json_object_iter_peek_value(&it)))
				return 1;
		return 0;
	default:
		return 0;
	}
}

/* The body member into out->body; 0 or -1 after answering. */
static int
job_body(struct api_req *req, json_object *obj, const char *field,
    struct api_job_in *out)
{
	size_t limit = (size_t)CONF_GET(limit_job_body), len;
	json_object *v;
	const char *s;
	struct buf pb;

	if (!json_object_object_get_ex(obj, "body", &v)) {
		out->body = xstrdup("");
		out->body_len = 0;
		return 0;
	}
	if (req->int_clamped && json_has_clamped(v)) {
		api_error(req, 400, "invalid_field", field,
		    "the body holds an integer beyond -9223372036854775808 .. "
		    "18446744073709551615, which would not reach the callback "
		    "as written; send it as a string, or with a fraction or "
		    "an exponent (1.0e30), which are kept exactly");
		return -1;
	}
	buf_init(&pb, SIZE_MAX / 2);
	if (json_object_is_type(v, json_type_string)) {
		s = json_object_get_string(v);
		len = (size_t)json_object_get_string_len(v);
	} else {
		/* json-c's plain printing, done without its printbuf. */
		if (jsonout_put(&pb, v) == -1)
			fatalx("api: out of memory");
		s = pb.data;
		len = pb.len;
	}
	if (len > limit) {
		api_error(req, 413, "body_too_large", field,
		    "the job body is %zu bytes; the limit is %zu", len,
		    limit);
		buf_free(&pb);
		return -1;
	}
	if (pb.data != NULL)		/* printed: taken as it is */
		out->body = buf_steal(&pb, NULL);
	else {
		out->body = xmalloc(len + 1);
		memcpy(out->body, s, len);
		out->body[len] = '\0';
	}
	out->body_len = len;
	return 0;
}

int
api_job_parse(struct api_req *req, json_object *obj,
    const struct registry_topic *t, enum api_job_dialect d,
    const char *prefix, struct api_id_run *run, struct api_job_in *out)
{
	static const char *const v1[] = { "delay_ms", "run_at_ms", "body",
		"bizkey", "priority", "headers", "retry_schedule", "ttr_ms",
		NULL };
	static const char *const orig[] = { "topic", "id", "delay", "body",
		"bizkey", "priority", "ttl", NULL };
	struct api_ctx *ctx = api_ctx_of(req);
	int64_t horizon = CONF_GET(limit_horizon_ms), now = clock_wall_ms();
	int64_t delay = 0, run_at = 0, prio = 0, ttr = 0;
	int has_delay, has_run_at, has_id;
	char f[200], stext[SCHEDULE_FORMAT_MAX];
	struct retry_schedule own;
	const struct retry_schedule *sched = &t->schedule;
	const char *id = NULL;
	json_object *v, *hdrs = NULL;

	memset(out, 0, sizeof(*out));
	if (!json_object_is_type(obj, json_type_object)) {
		/* The element itself: its prefix less the dot ("jobs[1]"). */
		field_name(f, sizeof(f), prefix, "");
		if (*f != '\0' && f[strlen(f) - 1] == '.')
			f[strlen(f) - 1] = '\0';
		api_error(req, 400, "invalid_field", *f ? f : NULL,
		    "a job must be a JSON object");
		return -1;
	}
	if (api_json_only(req, obj, d == API_JOB_V1 ? v1 : orig,
	    prefix) == -1)
		return -1;

	field_name(f, sizeof(f), prefix, d == API_JOB_V1 ? "delay_ms" :
	    "delay");
	if (api_json_int(req, obj, d == API_JOB_V1 ? "delay_ms" : "delay", f,
	    0, INT64_MAX - 1, &delay, &has_delay) == -1)
		return -1;
	if (has_delay && delay > horizon) {
		api_error(req, 400, "beyond_horizon", f,
		    "%s is beyond the horizon of %" PRId64 " ms", f, horizon);
		return -1;
	}
	field_name(f, sizeof(f), prefix, "run_at_ms");
	if (api_json_int(req, obj, "run_at_ms", f, 0, INT64_MAX - 1, &run_at,
	    &has_run_at) == -1)
		return -1;
	if (has_run_at && has_delay) {
		api_error(req, 400, "invalid_field", f,
		    "give delay_ms or run_at_ms, not both");
		return -1;
	}
	if (has_run_at && run_at - now > horizon) {
		api_error(req, 400, "beyond_horizon", f,
		    "%s is beyond the horizon of %" PRId64 " ms from now", f,
		    horizon);
		return -1;
	}
	out->due_ms = has_run_at ? run_at : now + delay;

	field_name(f, sizeof(f), prefix, "bizkey");
	if (api_json_string(req, obj, "bizkey", f, API_BIZKEY_MAX,
	    &out->bizkey, NULL) == -1 || (out->bizkey != NULL &&
	    api_check_bizkey(req, out->bizkey, f) == -1))
		return -1;

	field_name(f, sizeof(f), prefix, "priority");
	if (api_json_int(req, obj, "priority", f, API_PRIORITY_MIN,
	    API_PRIORITY_MAX, &prio, NULL) == -1)
		return -1;
	out->priority = (int)prio;

	field_name(f, sizeof(f), prefix, d == API_JOB_V1 ? "ttr_ms" : "ttl");
	if (api_json_int(req, obj, d == API_JOB_V1 ? "ttr_ms" : "ttl", f, 1,
	    horizon, &ttr, NULL) == -1)
		return -1;
	out->ttr_ms = ttr;

	field_name(f, sizeof(f), prefix, "headers");
	json_object_object_get_ex(obj, "headers", &hdrs);
	if (api_json_headers(req, hdrs, f, &out->headers_json) == -1)
		return -1;

	field_name(f, sizeof(f), prefix, "retry_schedule");
	if (json_object_object_get_ex(obj, "retry_schedule", &v) &&
	    !json_object_is_type(v, json_type_null)) {
		if (api_json_schedule(req, v, f, horizon, &own) == -1)
			return -1;
		if (schedule_format(&own, stext, sizeof(stext)) < 0) {
			api_error(req, 400, "invalid_schedule", f,
			    "the schedule cannot be printed");
			return -1;
		}
		out->schedule = xstrdup(stext);
		sched = &own;
	}
	out->run_at_ms = schedule_first_ms(sched, out->due_ms);

	field_name(f, sizeof(f), prefix, "body");
	if (job_body(req, obj, f, out) == -1)
		return -1;

	if (d == API_JOB_ORIGINAL) {
		field_name(f, sizeof(f), prefix, "id");
		if (api_json_string(req, obj, "id", f, API_CLIENT_ID_MAX, &id,
		    &has_id) == -1)
			return -1;
		if (has_id && (!api_valid_client_id(id) ||
		    api_looks_generated_id(id))) {
			api_error(req, 400, "invalid_id", f,
			    "an id is 1 to 64 of A-Z a-z 0-9 . _ : - and not "
			    "16 characters of Crockford base32 (the form of "
			    "generated ids)");
			return -1;
		}
		if (has_id && out->bizkey != NULL) {
			api_error(req, 400, "invalid_field", f,
			    "give id or bizkey, not both (the id is the "
			    "deduplication key)");
			return -1;
		}
		if (has_id) {
			snprintf(out->id, sizeof(out->id), "%s", id);
			out->client_id = 1;
		}
	}
	if (out->client_id)
		return 0;
	if (out->bizkey != NULL)
		sched_new_id(ctx->sched, out->bizkey, out->id);
	else if (run == NULL)
		sched_new_id_alone(ctx->sched, out->id);
	else
		sched_new_id_run(ctx->sched, run->i, &run->base, out->id);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Quota */

struct quota_entry {
	struct quota_entry	*next;
	char			 tenant[REG_TENANT_MAX + 1];
	int64_t			 pending;	/* the count, with ours since */
	int64_t			 inflight;	/* taken, not settled yet */
	int64_t			 made;		/* settled into Redis, ever */
	int64_t			 read_mono_us;
};

static pthread_mutex_t quota_lock = PTHREAD_MUTEX_INITIALIZER;
static struct quota_entry *quota_table[QUOTA_BUCKETS];

static struct quota_entry *
quota_find_locked(const char *tenant, int create)
{
	struct quota_entry *e;
	uint32_t h = str_hash(STR_HASH_INIT, tenant);

	for (e = quota_table[h % QUOTA_BUCKETS]; e != NULL; e = e->next)
		if (strcmp(e->tenant, tenant) == 0)
			return e;
	if (!create)
		return NULL;
	e = xcalloc(1, sizeof(*e));
	snprintf(e->tenant, sizeof(e->tenant), "%s", tenant);
	e->next = quota_table[h % QUOTA_BUCKETS];
	quota_table[h % QUOTA_BUCKETS] = e;
	return e;
}

/*
 * Takes room for n more pending jobs of tenant: 0 taken, 1 when they do
 * not fit (nothing answered; *pending and *limit say why), -1 after
 * answering an error.
 */
static int
quota_try(struct api_req *req, const char *tenant, size_t n,
    int64_t *pending_out, int64_t *limit_out)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct registry_tenant t;
	struct quota_entry *e;
	int64_t counts[SCHED_NSTATES], limit, pending = 0, now, made0;
	enum sched_err se;
	enum reg_err re;
	int fresh;

	if ((re = registry_tenant_get(ctx->reg, tenant, &t)) != REG_OK) {
		api_reg_error(req, re, "tenant");
		return -1;
	}
	limit = t.max_pending > 0 ? t.max_pending :
	    CONF_GET(limit_max_pending);
	now = clock_mono_us();
	pthread_mutex_lock(&quota_lock);
	e = quota_find_locked(tenant, 1);
	fresh = e->read_mono_us != 0 && now - e->read_mono_us < QUOTA_TTL_US &&
	    now >= e->read_mono_us;
	made0 = e->made;
	pthread_mutex_unlock(&quota_lock);
	if (!fresh) {
		se = sched_counts(ctx->sched, tenant, NULL, counts);
		if (se != SCHED_OK) {
			api_sched_error(req, se, "tenant");
			return -1;
		}
		pending = counts[SCHED_SCHEDULED] + counts[SCHED_READY] +
		    counts[SCHED_IN_FLIGHT] + counts[SCHED_RETRYING];
	}
	pthread_mutex_lock(&quota_lock);
	if (!fresh) {
		/*
		 * Redis's count holds no job still on its way there, and
		 * may or may not hold one made while it was read: both
		 * are added (the latter perhaps twice, until the next
		 * read), so the count is never less than the truth.
		 */
		e->pending = pending + e->inflight + (e->made - made0);
		e->read_mono_us = now;
	}
	if (e->pending + (int64_t)n > limit) {
		*pending_out = e->pending;
		*limit_out = limit;
		pthread_mutex_unlock(&quota_lock);
		return 1;
	}
	e->pending += (int64_t)n;
	e->inflight += (int64_t)n;
	pthread_mutex_unlock(&quota_lock);
	return 0;
}

/*
 * The push of held jobs that quota_try() took is settled: made of them are
 * in Redis now, the rest give their room back.
 */
static void
quota_settle(const char *tenant, size_t held, size_t made)
{
	struct quota_entry *e;

	if (held == 0)
		return;
	pthread_mutex_lock(&quota_lock);
	if ((e = quota_find_locked(tenant, 0)) != NULL) {
		e->inflight -= (int64_t)held;
		e->pending -= (int64_t)(held - made);
		e->made += (int64_t)made;
	}
	pthread_mutex_unlock(&quota_lock);
}

/* Answers 429 quota_exceeded for n jobs that did not fit. */
static void
quota_refuse(struct api_req *req, const char *tenant, size_t n,
    int64_t pending, int64_t limit)
{
	api_error(req, 429, "quota_exceeded", NULL,
	    "tenant %s has %" PRId64 " pending jobs and may have at most %"
	    PRId64 "; %zu more would exceed it", tenant, pending, limit, n);
}

void
api_quota_refund(const char *tenant, size_t n)
{
	struct quota_entry *e;

	if (n == 0)
		return;
	pthread_mutex_lock(&quota_lock);
	if ((e = quota_find_locked(tenant, 0)) != NULL)
		e->pending -= (int64_t)n;
	pthread_mutex_unlock(&quota_lock);
}

void
api_quota_forget(const char *tenant)
{
	struct quota_entry *e;

	pthread_mutex_lock(&quota_lock);
	if ((e = quota_find_locked(tenant, 0)) != NULL)
		e->read_mono_us = 0;
	pthread_mutex_unlock(&quota_lock);
}

/* ------------------------------------------------------------------ */
/* Acceptance */

/* What the journal knows of a client-given id (journal_id_exists). */
struct journal_seen {
	int	found;
	int	unsettled;	/* not in Redis, not known to be cut off */
	char	topic[API_TOPIC_MAX + 1];
	char	state[16];
	int64_t	due_ms;
	int64_t	created_ms;
	int64_t	finished_ms;
};

/* A row jrnl_get_jobs() found for lookup_many(): whose, and what it says. */
struct journal_row {
	char			*tenant;
	char			*id;
	struct journal_seen	 js;
};

struct journal_rows {
	struct journal_row	*v;
	size_t			 n, cap;
};

static int
journal_row_cmp(const void *a, const void *b)
{
	const struct journal_row *x = a, *y = b;
	int c;

	if ((c = strcmp(x->tenant, y->tenant)) != 0)
		return c;
	return strcmp(x->id, y->id);
}

/* Each row of jrnl_get_jobs() kept, for the asks to find by (tenant, id). */
static int
journal_row_add(const struct jrnl_job *jj, void *arg)
{
	struct journal_rows *rs = arg;
	struct journal_row *r;

	if (jj->tenant == NULL || jj->id == NULL)
		return 0;
	if (rs->n == rs->cap) {
		rs->cap = rs->cap ? rs->cap * 2 : 8;
		rs->v = xreallocarray(rs->v, rs->cap, sizeof(*rs->v));
	}
	r = &rs->v[rs->n++];
	memset(r, 0, sizeof(*r));
	r->tenant = xstrdup(jj->tenant);
	r->id = xstrdup(jj->id);
	r->js.found = 1;
	snprintf(r->js.topic, sizeof(r->js.topic), "%s",
	    jj->topic != NULL ? jj->topic : "");
	snprintf(r->js.state, sizeof(r->js.state), "%s",
	    jj->state != NULL ? jj->state : "");
	r->js.due_ms = jj->due_ms;
	r->js.created_ms = jj->created_ms;
	r->js.finished_ms = jj->finished_ms;
	return 0;
}

/*
 * A client-given id Redis does not know may still be the journal's (js,
 * read by lookup_many()): Redis lost its data and is not rebuilt yet, or
 * lost the finished job it would have kept for sched.retention.  Within
 * that window the id is the same job, as it would be with Redis whole: 1
 * and j answered (200 with the journal's state, or 409 for another
 * topic's), 0 when it is new (also when the journal could not be read:
 * the put then meets the journal's own answer).
 */
static int
journal_id_exists(const struct journal_seen *js,
    const struct registry_topic *t, struct api_job_in *j)
{
	int st;

	if (!js->found)
		return 0;
	if (js->finished_ms != 0 &&
	    js->finished_ms < clock_wall_ms() - CONF_GET(sched_retention_ms))
		return 0;
	if ((st = sched_state_parse(js->state)) < 0)
		return 0;
	memset(&j->res, 0, sizeof(j->res));
	if (strcmp(js->topic, t->name) != 0) {
		j->status = 409;
	} else if (js->unsettled) {
		j->status = 503;
		j->unsettled = 1;
	} else {
		snprintf(j->res.id, sizeof(j->res.id), "%s", j->id);
		j->res.deduplicated = 1;
		j->res.run_at_ms = js->due_ms;
		j->res.state = (enum sched_state)st;
		j->status = 200;
	}
	return 1;
}

/*
 * A client-given id that names a job Redis has (job, read by
 * lookup_many()), or the journal has (js) within journal_id_exists()'s
 * window: answered so (200, deduplicated; 409 when it is another topic's),
 * never journaled.  1 when answered so, 0 when the id is free.
 */
static int
client_id_found(const struct journal_seen *js,
    const struct registry_topic *t, struct api_job_in *j,
    const struct sched_job *job)
{
	if (job == NULL)
		return journal_id_exists(js, t, j);
	memset(&j->res, 0, sizeof(j->res));
	if (strcmp(job->topic, t->name) != 0) {
		j->status = 409;
	} else {
		snprintf(j->res.id, sizeof(j->res.id), "%s", job->id);
		j->res.deduplicated = 1;
		j->res.run_at_ms = job->due_ms;
		j->res.state = job->state;
		j->status = 200;
	}
	return 1;
}

static int
sched_status(enum sched_err e)
{
	switch (e) {
	case SCHED_OK:
		return 201;
	case SCHED_ENOTFOUND:
		return 404;
	case SCHED_ECONFLICT:
	case SCHED_ESTALE:
		return 409;
	case SCHED_EUNAVAIL:
	case SCHED_EAGAIN:
		return 503;
	case SCHED_EFULL:
		return 507;
	case SCHED_EINVAL:
		return 400;
	default:
		return 500;
	}
}

struct api_accept_priv {
	struct api_hold		 hold;		/* the request, the journal */
	int			 jerr;		/* the journal's answer */
	int			 phase;		/* 0 new, 1 journaling, 2
						   done, 3 looking up */
	struct api_ctx		*ctx;
	int			 looked;	/* lookup_many() ran */
	enum sched_err		 look_err;	/* ... and failed */
	size_t			 quota_held;	/* to give back if gone */
	size_t			 quota_free;	/* bizkey repeats: no room */
	char			 tenant[API_TENANT_MAX + 1];
	unsigned char		*known;		/* client ids Redis has */
	int64_t			 now_ms;
	struct sched		*sched;
	struct api_accept	*next;		/* in the pushers' queue */
	int			 pushed;	/* Redis has answered */
	/*
	 * jerr and pushed are stored (release) before the request is resumed
	 * and loaded (acquire) by its handler: no lock, so the handler never
	 * waits for the pusher still holding mu around its api_resume().
	 */
};

static void
accept_destroy(struct api_accept *a)
{
	struct api_accept_priv *p = a->priv;
	size_t i;

	quota_settle(p->tenant, p->quota_held, 0);
	for (i = 0; a->jobs != NULL && i < a->n; i++)
		api_job_in_clear(&a->jobs[i]);
	free(a->jobs);
	registry_topic_release(a->t);
	json_object_put(a->body);
	free(p->known);
	free(p);
	free(a);
}

static void
accept_free_state(void *state)
{
	struct api_accept *a = state;

	if (api_hold_drop(&a->priv->hold, 1))
		accept_destroy(a);
}

struct api_accept *
api_accept_new(struct api_req *req, size_t n)
{
	struct api_accept *a = xcalloc(1, sizeof(*a));
	struct api_accept_priv *p = xcalloc(1, sizeof(*p));

	api_hold_init(&p->hold, req, 1);
	snprintf(p->tenant, sizeof(p->tenant), "%s", req->tenant);
	a->priv = p;
	a->n = n;
	a->jobs = n > 0 ? xcalloc(n, sizeof(*a->jobs)) : NULL;
	req->state = a;
	req->free_state = accept_free_state;
	return a;
}

/*
 * Have the handler called again (if the request is still there), our
 * reference dropped.
 */
static void
accept_wake(struct api_accept *a)
{
	if (api_hold_drop(&a->priv->hold, 0))
		accept_destroy(a);
}

/* ------------------------------------------------------------------ */
/*
 * The pushers: API_PUSHERS threads that take every accepted request queued
 * (journal committed, or no journal wait), push all their jobs to Redis in
 * one sched_push_many (a pipeline of push_many calls) and resume them.  So
 * the pushes that share a commit share the round trips to Redis too, and
 * while one group is pushed the journal commits the next.  A commit's group
 * of at most API_PUSH_INLINE jobs is pushed by the journal's writer itself
 * (api_push_flush): a pipeline of a few scripts costs less than waking a
 * pusher, and the requests skip a thread hand-off; larger groups (batches)
 * go to the pushers, so their push overlaps the next commit.
 */

#define API_PUSHERS	2
#define API_PUSH_INLINE	64	/* jobs of a commit pushed by the writer */

static pthread_mutex_t push_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t push_cond = PTHREAD_COND_INITIALIZER;
static struct api_accept *push_head, **push_tail = &push_head;
/* Requests whose client-given ids are to be looked up (lookup_many). */
static struct api_accept *look_head, **look_tail = &look_head;
static pthread_t push_thr[API_PUSHERS];
static int push_started, push_stopping;
static int push_inline;		/* the writer pushing (api_push_flush) */

static void accept_push(struct sched *sched, struct api_accept **v,
    size_t nv);
static void lookup_many(struct api_accept **v, size_t nv);

/* Pushes v[0..n) in one sched_push_many and resumes each. */
static void
push_vector(struct api_accept **v, size_t n)
{
	size_t i;

	accept_push(v[0]->priv->sched, v, n);
	for (i = 0; i < n; i++)
		accept_wake(v[i]);
}

/*
 * The pushers also look up the client-given ids of the requests queued for
 * it (before their quota and journal), every request queued at once: one
 * round trip to Redis for all, and no HTTP thread held meanwhile.
 */
static void *
pusher_main(void *arg)
{
	struct api_accept *q, *a, **v = NULL;
	size_t i, n, cap = 0;
	int look;

	(void)arg;
	pthread_mutex_lock(&push_lock);
	for (;;) {
		while (push_head == NULL && look_head == NULL &&
		    !push_stopping)
			pthread_cond_wait(&push_cond, &push_lock);
		if ((look = look_head != NULL)) {
			q = look_head;
			look_head = NULL;
			look_tail = &look_head;
		} else if ((q = push_head) != NULL) {
			push_head = NULL;
			push_tail = &push_head;
		} else
			break;
		pthread_mutex_unlock(&push_lock);
		for (n = 0, a = q; a != NULL; a = a->priv->next)
			n++;
		if (n > cap) {
			cap = n;
			v = xreallocarray(v, cap, sizeof(*v));
		}
		for (n = 0, a = q; a != NULL; a = a->priv->next)
			v[n++] = a;
		if (look) {
			lookup_many(v, n);
			for (i = 0; i < n; i++)
				accept_wake(v[i]);
		} else
			push_vector(v, n);
		pthread_mutex_lock(&push_lock);
	}
	pthread_mutex_unlock(&push_lock);
	free(v);
	return NULL;
}

/* push_lock held: starts the push threads; 1 when some run. */
static int
push_running_locked(void)
{
	int i;

	if (push_stopping)
		return 0;
	for (i = push_started; i < API_PUSHERS; i++) {
		if (pthread_create(&push_thr[i], NULL, pusher_main,
		    NULL) != 0) {
			log_warn("api: cannot start a push thread");
			break;
		}
		(void)pthread_setname_np(push_thr[i], "api-push");
		push_started = i + 1;
	}
	return push_started > 0;
}

/* 1 when the push threads run (started now if need be). */
static int
push_running(void)
{
	int rc;

	pthread_mutex_lock(&push_lock);
	rc = push_running_locked();
	pthread_mutex_unlock(&push_lock);
	return rc;
}

/*
 * Appends the chain head .. (the last's next is tail) to the pushers'
 * queue whose tail pointer is *qtail (push_tail or look_tail), each
 * holding a reference for the pushers; 0, or -1 when the pushers are
 * stopped or cannot start (the callers do the work themselves, or drop
 * the chain).
 */
static int
queue_chain(struct api_accept ***qtail, struct api_accept *head,
    struct api_accept **tail)
{
	int rc = -1;

	pthread_mutex_lock(&push_lock);
	if (push_running_locked()) {
		**qtail = head;
		*qtail = tail;
		rc = 0;
	}
	pthread_mutex_unlock(&push_lock);
	if (rc == 0)	/* after the unlock, so the woken does not wait */
		pthread_cond_signal(&push_cond);
	return rc;
}

/* Queues the chain head .. tail for accept_push(): queue_chain(). */
static int
push_queue_chain(struct api_accept *head, struct api_accept **tail)
{
	return queue_chain(&push_tail, head, tail);
}

/* Queues a alone: push_queue_chain(). */
static int
push_queue(struct api_accept *a)
{
	a->priv->next = NULL;
	return push_queue_chain(a, &a->priv->next);
}

/* Queues a for lookup_many() by the pushers; -1 when they are stopped. */
static int
look_queue(struct api_accept *a)
{
	a->priv->next = NULL;
	return queue_chain(&look_tail, a, &a->priv->next);
}

/*
 * Accepts the journal committed in its current group of callbacks, pushed
 * together by api_push_flush() at the end of the group: by the writer when
 * they hold at most API_PUSH_INLINE jobs, else by the pushers (one wake-up
 * per group commit, not one per request).  Only the journal's writer
 * thread touches its list.
 */
static __thread struct api_accept *defer_head, **defer_tail;

/* The chain from a in v (n), if it holds at most API_PUSH_INLINE jobs. */
static int
push_small(struct api_accept *a, struct api_accept **v, size_t *n)
{
	size_t jobs = 0;

	for (*n = 0; a != NULL; a = a->priv->next) {
		jobs += a->n;
		if (jobs > API_PUSH_INLINE || *n == API_PUSH_INLINE)
			return 0;
		v[(*n)++] = a;
	}
	return *n > 0;
}

void
api_push_flush(void)
{
	struct api_accept *a, *next, *v[API_PUSH_INLINE];
	size_t n;
	int queued, here = 0;

	if ((a = defer_head) == NULL)
		return;
	if (push_small(a, v, &n)) {
		/* As the pushers, not once stopped; api_push_stop() waits. */
		pthread_mutex_lock(&push_lock);
		if ((here = !push_stopping))
			push_inline++;
		pthread_mutex_unlock(&push_lock);
	}
	if (here) {
		defer_head = NULL;
		defer_tail = NULL;
		push_vector(v, n);
		pthread_mutex_lock(&push_lock);
		if (--push_inline == 0 && push_stopping)
			pthread_cond_broadcast(&push_cond);
		pthread_mutex_unlock(&push_lock);
		return;
	}
	queued = push_queue_chain(defer_head, defer_tail) == 0;
	defer_head = NULL;
	defer_tail = NULL;
	for (; !queued && a != NULL; a = next) {
		next = a->priv->next;
		accept_wake(a);	/* called again, it pushes itself */
	}
}

void
api_push_stop(void)
{
	int i, n;

	pthread_mutex_lock(&push_lock);
	push_stopping = 1;
	n = push_started;
	pthread_cond_broadcast(&push_cond);
	pthread_mutex_unlock(&push_lock);
	for (i = 0; i < n; i++)
		pthread_join(push_thr[i], NULL);
	pthread_mutex_lock(&push_lock);
	while (push_inline > 0)		/* the writer's api_push_flush() */
		pthread_cond_wait(&push_cond, &push_lock);
	push_started = 0;
	pthread_mutex_unlock(&push_lock);
}

/*
 * The journal's callback (its writer thread, or ours): note the answer;
 * committed, the request goes to the pushers, else the handler answers 503.
 * The request may have been answered and freed meanwhile (the server
 * stopping): then p->hold.req is NULL, and what the journal has is still pushed
 * while the pushers run.
 */
static void
accept_journaled(enum jrnl_err err, void *arg)
{
	struct api_accept *a = arg;
	struct api_accept_priv *p = a->priv;

	__atomic_store_n(&p->jerr, (int)err, __ATOMIC_RELEASE);
	if (err == JRNL_OK && jrnl_in_callbacks()) {
		p->next = NULL;
		if (defer_tail == NULL)
			defer_tail = &defer_head;
		*defer_tail = a;
		defer_tail = &p->next;
		return;
	}
	if (err == JRNL_OK && push_queue(a) == 0)
		return;
	accept_wake(a);
}

/*
 * Journal jobs[0..n) in sync mode without holding the thread: park the
 * request first (the callback may come before we return), then queue.
 */
static void
accept_journal_wait(struct api_req *req, struct api_accept *a,
    const struct api_job_in *jobs, size_t n)
{
	struct api_accept_priv *p = a->priv;
	enum jrnl_err e;

	api_hold_ref(&p->hold);
	p->phase = 1;
	api_suspend(req);
	e = api_journal_jobs_cb(req, req->tenant, a->t->name, jobs, n,
	    accept_journaled, a);
	if (e != JRNL_OK)
		accept_journaled(e, a);	/* the handler answers 503 */
}

static int
biz_cmp(const void *x, const void *y)
{
	const char *const *a = x, *const *b = y;

	return strcmp(*a, *b);
}

/*
 * The jobs of a not answered yet whose bizkey repeats another of them:
 * Redis makes one job per bizkey, so only the first needs room.
 */
static size_t
biz_repeats(const struct api_accept *a)
{
	const char **v;
	size_t i, n = 0, r = 0;

	v = xcalloc(a->n > 0 ? a->n : 1, sizeof(*v));
	for (i = 0; i < a->n; i++)
		if (!a->priv->known[i] && a->jobs[i].bizkey != NULL)
			v[n++] = a->jobs[i].bizkey;
	qsort(v, n, sizeof(*v), biz_cmp);
	for (i = 1; i < n; i++)
		r += strcmp(v[i - 1], v[i]) == 0;
	free(v);
	return r;
}

/*
 * Room for need jobs of a, those not answered yet (p->known[i] 0).  Over
 * the quota, a job that repeats a push (the bizkey of an unfinished job of
 * the topic) is answered as that push was, 200 deduplicated, whatever the
 * quota: a client retrying after a timeout gets the same answer, and a
 * duplicate takes no room.  The looking up is paid only over the quota, so
 * the push path under it costs what it did.  The jobs left are new: when
 * they do not fit either, the request is answered 429 whole if no job of it
 * was answered, else each of them has 429 (a batch's partial refusal) and
 * nothing is made.  0, or -1 after answering.
 */
static int
accept_quota(struct api_req *req, struct api_accept *a, size_t need,
    size_t answered)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct api_accept_priv *p = a->priv;
	struct api_job_in *jobs = a->jobs;
	struct sched_push_result *res;
	const char **biz;
	int64_t pending = 0, limit = 0;
	size_t i, n = a->n, nbiz = 0;
	enum sched_err se = SCHED_OK;
	int rc, *found;

	if ((rc = quota_try(req, req->tenant, need, &pending, &limit)) != 1)
		goto out;
	biz = xcalloc(n, sizeof(*biz));
	for (i = 0; i < n; i++)
		if (!p->known[i] && jobs[i].bizkey != NULL) {
			biz[i] = jobs[i].bizkey;
			nbiz++;
		}
	if (nbiz > 0) {
		res = xcalloc(n, sizeof(*res));
		found = xcalloc(n, sizeof(*found));
		se = sched_find_bizkeys(ctx->sched, req->tenant, a->t->name,
		    biz, n, res, found);
		for (i = 0; se == SCHED_OK && i < n; i++) {
			if (!found[i])
				continue;
			jobs[i].res = res[i];
			jobs[i].status = 200;
			p->known[i] = 1;
			need--;
			answered++;
		}
		free(found);
		free(res);
	}
	free(biz);
	if (se != SCHED_OK) {
		api_sched_error(req, se, "job");
		return -1;
	}
	if (need == 0)
		return 0;
	if (nbiz > 1) {
		p->quota_free = biz_repeats(a);
		need -= p->quota_free;
	}
	if ((rc = quota_try(req, req->tenant, need, &pending, &limit)) != 1)
		goto out;
	p->quota_free = 0;
	if (answered == 0) {
		quota_refuse(req, req->tenant, need, pending, limit);
		return -1;
	}
	for (i = 0; i < n; i++)
		if (!p->known[i]) {
			memset(&jobs[i].res, 0, sizeof(jobs[i].res));
			jobs[i].status = 429;
			p->known[i] = 1;
		}
	return 0;
out:
	if (rc == 0)
		p->quota_held = need;
	return rc;
}

/*
 * The journal's rows of the ids of tv, iv [0..n) Redis does not have
 * (out[k] NULL) into seen[k], in a few statements for all
 * (jrnl_get_jobs()); each ask then finds its row by itself, so an id asked
 * twice gets it twice.  Left not found when the journal cannot be read.
 */
static void
journal_look(struct jrnl *jr, const char **tv, const char **iv,
    struct sched_job **out, size_t n, struct journal_seen *seen)
{
	struct journal_rows rs = { NULL, 0, 0 };
	struct journal_row key, *r;
	const char **at, **ai;
	size_t k, m;

	at = xcalloc(n, sizeof(*at));
	ai = xcalloc(n, sizeof(*ai));
	for (k = m = 0; k < n; k++)
		if (out[k] == NULL) {
			at[m] = tv[k];
			ai[m++] = iv[k];
		}
	if (m > 0 && jrnl_get_jobs(jr, at, ai, m, journal_row_add,
	    &rs) == JRNL_OK && rs.n > 0) {
		qsort(rs.v, rs.n, sizeof(*rs.v), journal_row_cmp);
		for (k = 0; k < n; k++) {
			if (out[k] != NULL)
				continue;
			key.tenant = (char *)tv[k];
			key.id = (char *)iv[k];
			if ((r = bsearch(&key, rs.v, rs.n, sizeof(*rs.v),
			    journal_row_cmp)) != NULL)
				seen[k] = r->js;
		}
	}
	for (k = 0; k < rs.n; k++) {
		free(rs.v[k].tenant);
		free(rs.v[k].id);
	}
	free(rs.v);
	free(ai);
	free(at);
}

/*
 * A client-given id with an unfinished row of topic that Redis does not
 * have (js, found by journal_look()): made from the row when its push was
 * cut off, unsettled (503) while that cannot be told or done yet, else
 * answered as the job it is (api_cut_off()).  Another topic's row is
 * left: the id is answered 409 either way.
 */
static void
journal_settle(struct api_ctx *ctx, struct sched *s, const char *tenant,
    const char *id, const char *topic, struct journal_seen *js, int64_t now,
    int *owed)
{
	if (!js->found || js->finished_ms != 0 || strcmp(js->topic, topic) != 0)
		return;
	if (api_cut_off(ctx, s, tenant, id, js->created_ms, now, owed,
	    "push") == API_CUT_UNSETTLED)
		js->unsettled = 1;
}

/*
 * Looks up the client-given ids of the requests v[0..nv) (on a pusher, or
 * the request's own thread when they are stopped): Redis for all of them
 * in one sched_get_many(), then the journal for those Redis does not have,
 * in one jrnl_get_jobs().  Each such job is marked known (answered 200 or
 * 409 from what exists) or left to be made; a Redis error fails each
 * request whole.
 */
static void
lookup_many(struct api_accept **v, size_t nv)
{
	struct api_accept_priv *p;
	struct api_job_in *jb;
	struct sched_job **out = NULL;
	struct journal_seen *seen = NULL;
	struct jrnl *jr = v[0]->priv->ctx->jrnl;
	const char **tv = NULL, **iv = NULL, **qv = NULL;
	enum sched_err e = SCHED_OK;
	size_t i, j, k, n;
	int64_t now;
	int owed = -1;

	for (j = n = 0; j < nv; j++)
		for (i = 0; i < v[j]->n; i++)
			n += v[j]->jobs[i].client_id != 0;
	if (n > 0) {		/* else nothing is allocated or asked */
		tv = xcalloc(n, sizeof(*tv));
		iv = xcalloc(n, sizeof(*iv));
		qv = xcalloc(n, sizeof(*qv));
		out = xcalloc(n, sizeof(*out));
		for (j = k = 0; j < nv; j++)
			for (i = 0; i < v[j]->n; i++)
				if (v[j]->jobs[i].client_id) {
					tv[k] = v[j]->priv->tenant;
					qv[k] = v[j]->t->name;
					iv[k++] = v[j]->jobs[i].id;
				}
		e = sched_get_many(v[0]->priv->sched, tv, iv, n, out);
		if (e == SCHED_OK) {	/* seen is read only then */
			seen = xcalloc(n, sizeof(*seen));
			if (jr != NULL) {
				journal_look(jr, tv, iv, out, n, seen);
				now = clock_wall_ms();
				for (k = 0; k < n; k++)
					journal_settle(v[0]->priv->ctx,
					    v[0]->priv->sched, tv[k], iv[k],
					    qv[k], &seen[k], now, &owed);
			}
		}
	}
	for (j = k = 0; j < nv; j++) {
		p = v[j]->priv;
		p->look_err = e;
		for (i = 0; i < v[j]->n; i++) {
			jb = &v[j]->jobs[i];
			if (!jb->client_id)
				continue;
			if (e == SCHED_OK)
				p->known[i] = (unsigned char)client_id_found(
				    &seen[k], v[j]->t, jb, out[k]);
			sched_job_free(out[k++]);
		}
		__atomic_store_n(&p->looked, 1, __ATOMIC_RELEASE);
	}
	free(seen);
	free(out);
	free(qv);
	free(iv);
	free(tv);
}

/*
 * Hands the request's client-given ids to the pushers (lookup_many())
 * without holding the thread; 1 parked, 0 when none are given or the
 * pushers are stopped (the caller looks them up itself).
 */
static int
accept_lookup_wait(struct api_req *req, struct api_accept *a)
{
	struct api_accept_priv *p = a->priv;
	size_t i;

	for (i = 0; i < a->n && !a->jobs[i].client_id; i++)
		;
	if (i == a->n || !push_running())
		return 0;
	api_hold_ref(&p->hold);
	p->phase = 3;
	api_suspend(req);
	if (look_queue(a) == -1)
		accept_wake(a);	/* called again, it looks up itself */
	return 1;
}

/*
 * What the rest needs, then the client-given ids' lookup handed to the
 * pushers: 1 parked for it, 0 to go on here.
 */
static int
accept_start(struct api_req *req, struct api_accept *a)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct api_accept_priv *p = a->priv;
	struct api_job_in *jobs = a->jobs;
	struct id_parts ip;
	size_t i;

	p->now_ms = clock_wall_ms();
	p->sched = ctx->sched;
	p->ctx = ctx;
	/*
	 * The creation time the journal's row and Redis's record both get (a
	 * transition moves the row only when they agree): a generated id's
	 * own time, which its record then need not store, or now.
	 */
	for (i = 0; i < a->n; i++)
		jobs[i].created_ms = id_parse(jobs[i].id, &ip) == 0 ? ip.ms :
		    p->now_ms;
	p->known = xcalloc(a->n, 1);
	return accept_lookup_wait(req, a);
}

/*
 * Client ids, quota, journal: 0 to push, 1 parked, -1 answered.  A job
 * answered before the push (p->known[i]: its client id names a job, or
 * its bizkey an unfinished job over the quota, or it was refused for the
 * quota) takes no room, is neither journaled nor pushed.
 */
static int
accept_begin(struct api_req *req, struct api_accept *a)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct api_accept_priv *p = a->priv;
	struct api_job_in *jobs = a->jobs, *todo = NULL;
	size_t i, k, n = a->n;
	int rc = -1;

	/*
	 * Client-given ids that exist already are answered from Redis (or
	 * the journal) before the quota, which they do not need.
	 */
	if (!__atomic_load_n(&p->looked, __ATOMIC_ACQUIRE))
		lookup_many(&a, 1);
	if (p->look_err != SCHED_OK) {
		api_sched_error(req, p->look_err, "job");
		return -1;
	}
	for (i = k = 0; i < n; i++) {
		if (!jobs[i].client_id)
			continue;
		if (!p->known[i])
			api_journal_claim(&jobs[i]);
		k += p->known[i];
	}
	if (k < n && accept_quota(req, a, n - k, k) == -1)
		return -1;
	for (i = k = 0; i < n; i++)
		k += p->known[i];
	if (k > 0) {
		todo = xcalloc(n, sizeof(*todo));
		for (i = k = 0; i < n; i++)
			if (!p->known[i])
				todo[k++] = jobs[i];
	} else
		k = n;
	if (ctx->jrnl != NULL && k > 0 &&
	    conf.journal_mode == CONF_JOURNAL_SYNC) {
		accept_journal_wait(req, a, todo != NULL ? todo : jobs, k);
		rc = 1;
		goto out;
	}
	if (api_journal_jobs(req, req->tenant, a->t->name, todo != NULL ?
	    todo : jobs, k) == -1)
		goto out;
	rc = 0;
out:
	if (rc == -1) {
		quota_settle(req->tenant, p->quota_held, 0);
		p->quota_held = 0;
	}
	free(todo);
	return rc;
}

/*
 * Pushes the jobs not answered yet of v[0..nv) to Redis, all in one
 * sched_push_many; a job's status is left 0 when Redis made or found it,
 * else set.
 */
static void
accept_push(struct sched *sched, struct api_accept **v, size_t nv)
{
	struct api_job_in **jp, *jb;
	struct api_accept_priv *p;
	struct sched_push *ps;
	struct sched_push_result *res;
	enum sched_err *err;
	size_t i, j, k, n;

	for (j = n = 0; j < nv; j++)
		n += v[j]->n;
	jp = xcalloc(n, sizeof(*jp));
	ps = xcalloc(n, sizeof(*ps));
	res = xcalloc(n, sizeof(*res));
	err = xcalloc(n, sizeof(*err));
	for (j = k = 0; j < nv; j++)
		for (i = 0; i < v[j]->n; i++) {
			if (v[j]->priv->known[i])
				continue;
			jb = jp[k] = &v[j]->jobs[i];
			ps[k].tenant = v[j]->priv->tenant;
			ps[k].topic = v[j]->t->name;
			ps[k].id = jb->id;
			ps[k].bizkey = jb->bizkey;
			ps[k].run_at_ms = jb->run_at_ms;
			ps[k].priority = jb->priority;
			ps[k].body = jb->body;
			ps[k].body_len = jb->body_len;
			ps[k].headers_json = jb->headers_json;
			ps[k].schedule = jb->schedule;
			ps[k].ttr_ms = jb->ttr_ms;
			ps[k].created_ms = jb->created_ms;
			k++;
		}
	sched_push_many(sched, ps, k, res, err);
	for (i = 0; i < k; i++) {
		jp[i]->res = res[i];
		jp[i]->status = err[i] == SCHED_OK ? 0 : sched_status(err[i]);
		if (err[i] != SCHED_OK)
			jp[i]->res.id[0] = '\0';
	}
	for (j = 0; j < nv; j++) {
		p = v[j]->priv;
		__atomic_store_n(&p->pushed, 1, __ATOMIC_RELEASE);
	}
	free(err);
	free(res);
	free(ps);
	free(jp);
}

/*
 * Hands the jobs to the pushers without holding the thread: park first
 * (they may resume it before we return).  1 parked, 0 when the pushers
 * are stopped (the caller pushes on its own thread).
 */
static int
accept_push_wait(struct api_req *req, struct api_accept *a)
{
	struct api_accept_priv *p = a->priv;

	/* Stopped only after the server, so not between here and there. */
	if (!push_running())
		return 0;
	api_hold_ref(&p->hold);
	p->phase = 1;
	api_suspend(req);
	if (push_queue(a) == -1)
		accept_wake(a);	/* called again, it pushes itself */
	return 1;
}

int
api_jobs_accept(struct api_req *req, struct api_accept *a)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct api_accept_priv *p = a->priv;
	struct api_job_in *jobs = a->jobs;
	enum jrnl_err je;
	size_t i, n = a->n, unmade = 0, nvoid = 0, back;
	int64_t now;
	int rc;

	if (n == 0)
		return 0;
	if (p->phase == 0) {
		if ((rc = accept_start(req, a)) != 0)
			return rc;
		p->phase = 3;
	}
	if (p->phase == 3) {
		if ((rc = accept_begin(req, a)) != 0)
			return rc;
		for (i = 0; i < n && p->known[i]; i++)
			;
		if (i < n && accept_push_wait(req, a) == 1)
			return 1;
	} else if (p->phase == 1) {
		je = (enum jrnl_err)__atomic_load_n(&p->jerr,
		    __ATOMIC_ACQUIRE);
		if (je != JRNL_OK) {
			api_journal_refused(req, req->tenant, a->t->name,
			    n, je);
			quota_settle(req->tenant, p->quota_held, 0);
			p->quota_held = 0;
			return -1;
		}
	} else
		return 0;	/* done already */
	p->phase = 2;
	now = p->now_ms;
	rc = __atomic_load_n(&p->pushed, __ATOMIC_ACQUIRE);
	if (!rc)	/* the pushers stopped, or nothing to push */
		accept_push(ctx->sched, &a, 1);
	for (i = 0; i < n; i++) {
		if (p->known[i])	/* answered, took no room */
			continue;
		if (jobs[i].status != 0) {
			unmade++;
			/*
			 * Not accepted, whatever the reason: its row goes.
			 * (Redis down or a timeout may hide a push that did
			 * happen: the client, answered 503, was not told it
			 * was accepted, and its later transitions find no
			 * row.)
			 */
			api_journal_void(req, req->tenant, &jobs[i], now);
			nvoid++;
			continue;
		}
		jobs[i].status = jobs[i].res.deduplicated ? 200 : 201;
		/* Made, but the row is another push's of the id: ours now. */
		if (!jobs[i].res.deduplicated && jobs[i].contested)
			api_journal_repair(req, req->tenant, jobs[i].id);
		if (jobs[i].res.deduplicated) {
			unmade++;
			if (strcmp(jobs[i].res.id, jobs[i].id) != 0) {
				api_journal_void(req, req->tenant, &jobs[i],
				    now);
				nvoid++;
			} else
				api_journal_repair(req, req->tenant,
				    jobs[i].id);
		}
	}
	api_journal_settle(req, req->tenant, nvoid);
	/* Each repeat that took no room is one of the unmade. */
	back = unmade > p->quota_free ? unmade - p->quota_free : 0;
	quota_settle(req->tenant, p->quota_held, back < p->quota_held ?
	    p->quota_held - back : 0);
	p->quota_held = 0;
	return 0;
}

/* ------------------------------------------------------------------ */
/* Routes */

static void
job_push(struct api_req *req)
{
	struct api_accept *a = req->state;
	struct api_job_in *j;

	if (a == NULL) {
		a = api_accept_new(req, 1);
		if (api_topic_hold(req, req->param[0], &a->t) == -1 ||
		    api_body_json(req, &a->body) == -1 ||
		    api_job_parse(req, a->body, a->t, API_JOB_V1, "", NULL,
		    &a->jobs[0]) == -1)
			return;
	}
	if (api_jobs_accept(req, a) != 0)
		return;
	j = &a->jobs[0];
	if (j->status == 201 || j->status == 200)
		api_reply_job_result(req, j->status, j);
	else if (j->status == 409)
		api_error(req, 409, "conflict", "bizkey",
		    "the job conflicts with an existing one");
	else
		api_sched_error(req, api_status_sched(j->status), "job");
}

static json_object *
item_error(int status, const char *code, const char *field,
    const char *message)
{
	json_object *o = json_object_new_object(), *e;

	json_object_object_add(o, "status", json_object_new_int(status));
	e = json_object_new_object();
	json_object_object_add(e, "code", json_object_new_string(code));
	json_object_object_add(e, "message", json_object_new_string(message));
	if (field != NULL)
		json_object_object_add(e, "field",
		    json_object_new_string(field));
	json_object_object_add(o, "error", e);
	return o;
}

/* The first call of a batch: parse it into a new req->state.  0 or -1. */
static int
batch_parse(struct api_req *req)
{
	struct api_accept *a = api_accept_new(req, 0);
	struct api_id_run run = { 0, -1 };
	json_object *arr;
	char prefix[32];
	size_t i, n;

	if (api_topic_hold(req, req->param[0], &a->t) == -1 ||
	    api_body_json(req, &a->body) == -1 ||
	    api_json_batch(req, a->body, "jobs",
	    (size_t)CONF_GET(limit_batch), &arr, &n) == -1)
		return -1;
	/*
	 * All or nothing on validation: a batch with one bad job is refused
	 * whole (naming it), so a client never has to sort out which half of
	 * a batch went in.
	 */
	a->jobs = xcalloc(n, sizeof(*a->jobs));
	a->n = n;
	for (i = 0; i < n; i++) {
		snprintf(prefix, sizeof(prefix), "jobs[%zu].", i);
		run.i = i;
		if (api_job_parse(req, json_object_array_get_idx(arr, i),
		    a->t, API_JOB_V1, prefix, &run, &a->jobs[i]) == -1)
			return -1;
	}
	return 0;
}

static void
job_batch(struct api_req *req)
{
	struct api_accept *a;
	struct api_job_in *jobs;
	json_object *r;
	struct buf b;
	size_t i;

	if (req->state == NULL && batch_parse(req) == -1)
		return;
	a = req->state;
	if (api_jobs_accept(req, a) != 0)
		return;
	jobs = a->jobs;
	buf_init(&b, a->n * API_RESULT_MAX + 64);
	buf_puts(&b, "{\"results\":[");
	for (i = 0; i < a->n; i++) {
		if (i > 0)
			buf_append(&b, ",", 1);
		if (jobs[i].status == 201 || jobs[i].status == 200) {
			job_result_put(&b, &jobs[i], jobs[i].status);
			continue;
		}
		if (jobs[i].status == 429)
			r = item_error(429, "quota_exceeded", NULL, "the job "
			    "was not accepted: the tenant's pending jobs are "
			    "at its quota");
		else
			r = item_error(jobs[i].status, jobs[i].status == 503 ?
			    "unavailable" : jobs[i].status == 507 ?
			    "redis_full" : jobs[i].status == 409 ?
			    "conflict" : "internal", NULL,
			    jobs[i].status == 507 ? "the job was not "
			    "accepted: Redis is out of memory" :
			    "the job was not accepted");
		buf_puts(&b, json_object_to_json_string_ext(r,
		    JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
		json_object_put(r);
	}
	buf_puts(&b, "]}");
	api_reply(req, 200, "application/json", b.data, b.len);
	buf_free(&b);
}

static void
job_get(struct api_req *req)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct sched_job *job = NULL;
	enum sched_err e;
	json_object *o;
	int rc;

	if (api_check_job_id(req, req->param[0]) == -1)
		return;
	/*
	 * A job Redis does not hold may be in the journal: finished longer
	 * ago than sched.retention, or not rebuilt yet after a loss.
	 */
	if ((e = sched_get(ctx->sched, req->tenant, req->param[0], &job)) ==
	    SCHED_ENOTFOUND && (rc = api_job_get_journal(req,
	    req->param[0])) != 0) {
		if (rc == 1)
			return;
		/* A cut-off push, made now from its row: Redis has it. */
		e = sched_get(ctx->sched, req->tenant, req->param[0], &job);
	}
	if (e != SCHED_OK) {
		api_sched_error(req, e, "job");
		return;
	}
	o = api_job_json(job, 1);
	api_job_older_attempts(req, job, o);
	api_reply_json(req, 200, o);
	sched_job_free(job);
}

/* After a change, answer with the job as it is now. */
static void
reply_job_now(struct api_req *req, const char *id)
{
	struct api_ctx *ctx = api_ctx_of(req);
	struct sched_job *job = NULL;
	json_object *o;

	if (sched_get(ctx->sched, req->tenant, id, &job) != SCHED_OK) {
		o = json_object_new_object();
		json_object_object_add(o, "id", json_object_new_string(id));
		api_reply_json(req, 200, o);
		return;
	}
	api_reply_json(req, 200, api_job_json(job, 0));
	sched_job_free(job);
}

int
api_cancel_job(struct api_req *req, const char *id, const char *field)
{
	struct api_ctx *ctx = api_ctx_of(req);
	enum sched_err e;
	int rc;

	e = sched_cancel(ctx->sched, req->tenant, id);
	if (e == SCHED_ENOTFOUND &&
	    (rc = api_cut_off_req(req, id, "cancel")) != 0) {
		if (rc == 1)
			return -1;
		e = rc == 3 ? SCHED_ECONFLICT :
		    sched_cancel(ctx->sched, req->tenant, id);
	}
	if (e == SCHED_ECONFLICT) {
		api_error(req, 409, "job_finished", field,
		    "the job is finished already");
		return -1;
	}
	if (e != SCHED_OK) {
		api_sched_error(req, e, "job");
		return -1;
	}
	api_quota_refund(req->tenant, 1);
	return 0;
}

/*
 * The changing routes answer once the change is journaled (sync mode):
 * called again (req->state set), they only answer.
 */
static void
job_cancel(struct api_req *req)
{
	if (req->state == NULL && (api_check_job_id(req, req->param[0]) ==
	    -1 || api_cancel_job(req, req->param[0], NULL) == -1))
		return;
	if (api_change_durable(req, NULL) == 0)
		api_reply_empty(req, 204);
}

static void
job_patch(struct api_req *req)
{
	static const char *const allowed[] = { "run_at_ms", "delay_ms", NULL };
	struct api_ctx *ctx = api_ctx_of(req);
	int64_t horizon = CONF_GET(limit_horizon_ms), now = clock_wall_ms();
	int64_t delay = 0, run_at = 0;
	int has_delay, has_run_at, rc;
	json_object *body = NULL;
	enum sched_err e;

	if (req->state != NULL) {	/* called again: journaled */
		if (api_change_durable(req, NULL) == 0)
			reply_job_now(req, req->param[0]);
		return;
	}
	if (api_check_job_id(req, req->param[0]) == -1 ||
	    api_body_json(req, &body) == -1 ||
	    api_json_only(req, body, allowed, "") == -1 ||
	    api_json_int(req, body, "delay_ms", "delay_ms", 0, INT64_MAX - 1,
	    &delay, &has_delay) == -1 ||
	    api_json_int(req, body, "run_at_ms", "run_at_ms", 0,
	    INT64_MAX - 1, &run_at, &has_run_at) == -1)
		goto out;
	if (has_delay == has_run_at) {
		api_error(req, 400, has_delay ? "invalid_field" :
		    "missing_field", "run_at_ms",
		    "give exactly one of run_at_ms and delay_ms");
		goto out;
	}
	if (has_delay)
		run_at = now + (delay > horizon ? horizon + 1 : delay);
	if (run_at - now > horizon) {
		api_error(req, 400, "beyond_horizon", has_delay ? "delay_ms" :
		    "run_at_ms", "the new time is beyond the horizon of %"
		    PRId64 " ms", horizon);
		goto out;
	}
	e = sched_reschedule(ctx->sched, req->tenant, req->param[0], run_at);
	if (e == SCHED_ENOTFOUND &&
	    (rc = api_cut_off_req(req, req->param[0], "reschedule")) != 0) {
		if (rc == 1)
			goto out;
		e = rc == 3 ? SCHED_ECONFLICT : sched_reschedule(ctx->sched,
		    req->tenant, req->param[0], run_at);
	}
	if (e == SCHED_ECONFLICT) {
		api_error(req, 409, "job_not_waiting", NULL,
		    "only a scheduled or retrying job can be rescheduled");
		goto out;
	}
	if (e != SCHED_OK) {
		api_sched_error(req, e, "job");
		goto out;
	}
	if (api_change_durable(req, NULL) == 0)
		reply_job_now(req, req->param[0]);
out:
	json_object_put(body);
}

static void
job_retry(struct api_req *req)
{
	struct api_ctx *ctx = api_ctx_of(req);
	char holder[ID_LEN + 65];
	enum sched_err e;

	if (req->state != NULL) {	/* called again: journaled */
		if (api_change_durable(req, NULL) == 0)
			reply_job_now(req, req->param[0]);
		return;
	}
	if (api_check_job_id(req, req->param[0]) == -1)
		return;
	if (api_body_none(req) == -1)
		return;
	e = sched_retry(ctx->sched, req->tenant, req->param[0], holder);
	if (e == SCHED_ECONFLICT && holder[0] != '\0') {
		api_error(req, 409, "bizkey_taken", "bizkey",
		    "the job's bizkey is held by job %s, which is not "
		    "finished: a topic holds one unfinished job per bizkey",
		    holder);
		return;
	}
	if (e == SCHED_ECONFLICT) {
		api_error(req, 409, "job_not_dead", NULL,
		    "only a dead job can be retried");
		return;
	}
	if (e != SCHED_OK) {
		api_sched_error(req, e, "job");
		return;
	}
	if (api_change_durable(req, NULL) == 0)
		reply_job_now(req, req->param[0]);
}

const struct api_route api_routes_jobs[] = {
	{ "POST", "/v1/topics/{topic}/jobs", API_AUTH_TENANT, job_push,
	    "push a job", 0 },
	{ "POST", "/v1/topics/{topic}/jobs:batch", API_AUTH_TENANT,
	    job_batch, "push up to limits.batch jobs", 0 },
	{ "GET", "/v1/jobs", API_AUTH_TENANT, api_job_list,
	    "list jobs, newest first (needs the journal)", 0 },
	{ "GET", "/v1/jobs/{id}", API_AUTH_TENANT, job_get,
	    "a job with its attempts", 0 },
	{ "DELETE", "/v1/jobs/{id}", API_AUTH_TENANT, job_cancel,
	    "cancel a job", 0 },
	{ "PATCH", "/v1/jobs/{id}", API_AUTH_TENANT, job_patch,
	    "reschedule a waiting job", 0 },
	{ "POST", "/v1/jobs/{id}/retry", API_AUTH_TENANT, job_retry,
	    "run a dead job again", 0 },
	{ NULL, NULL, 0, NULL, NULL, 0 },
};
