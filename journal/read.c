/*
 * read.c - the journal's synchronous side: reads of jobs and transitions,
 * and the tenant, key and topic records.
 *
 * Key decision: one reading connection guarded by a mutex, separate from
 * the writer's, so a slow listing never delays a group commit.  Rows are
 * copied out while the mutex is held and handed to the callback after it is
 * released: a callback may take its time (a restore pushes each job into
 * Redis) or call the journal again without blocking other readers or
 * deadlocking.  The price is memory for one page of rows, which the caller
 * bounds with its limit.  A connection that fails is dropped and made anew
 * on the next call, at most every RECONNECT_US, so a missing database costs
 * a reader an error, not a connect timeout each time.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "journal/internal.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define RECONNECT_US		500000
#define DEFAULT_SCAN_LIMIT	1000
#define DEFAULT_LIST_LIMIT	100
#define MAX_LIMIT		100000
#define MAX_TRANSITIONS		10000

/* Copied rows: each one allocation, the struct first. */
struct rows {
	void	**v;
	size_t	  n;
	size_t	  cap;
};

static void
rows_add(struct rows *r, void *p)
{
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 16;
		r->v = xreallocarray(r->v, r->cap, sizeof(*r->v));
	}
	r->v[r->n++] = p;
}

static void
rows_free(struct rows *r)
{
	size_t i;

	for (i = 0; i < r->n; i++)
		free(r->v[i]);
	free(r->v);
	memset(r, 0, sizeof(*r));
}

/* Room a column takes as a NUL-terminated copy (0 for NULL). */
static size_t
col_size(const struct jrnl_val *v)
{
	return v->type == JRNL_V_TEXT || v->type == JRNL_V_BLOB ?
	    v->len + 1 : 0;
}

/* Copy a column to *pp and return it; NULL for SQL NULL. */
static const char *
col_copy(const struct jrnl_val *v, char **pp)
{
	char *p = *pp;

	if (v->type != JRNL_V_TEXT && v->type != JRNL_V_BLOB)
		return NULL;
	if (v->len > 0)
		memcpy(p, v->p, v->len);
	p[v->len] = '\0';
	*pp = p + v->len + 1;
	return p;
}

static int64_t
col_int(const struct jrnl_val *v)
{
	return v->type == JRNL_V_INT ? v->i : 0;
}

static size_t
cols_size(const struct jrnl_val *cols, size_t ncols)
{
	size_t i, size = 0;

	for (i = 0; i < ncols; i++)
		size += col_size(&cols[i]);
	return size;
}

/* Rows of JOB_COLS (schema.c) into struct jrnl_job copies. */
static int
job_row(const struct jrnl_val *c, size_t ncols, void *arg)
{
	struct jrnl_job *job;
	char *p;

	if (ncols < 16)
		return 1;
	job = xcalloc(1, sizeof(*job) + cols_size(c, ncols));
	p = (char *)(job + 1);
	job->tenant = col_copy(&c[0], &p);
	job->topic = col_copy(&c[1], &p);
	job->id = col_copy(&c[2], &p);
	job->bizkey = col_copy(&c[3], &p);
	job->due_ms = col_int(&c[4]);
	job->priority = (int)col_int(&c[5]);
	job->body = col_copy(&c[6], &p);
	job->body_len = c[6].len;
	if (job->body == NULL) {
		job->body = "";
		job->body_len = 0;
	}
	job->headers_json = col_copy(&c[7], &p);
	job->schedule = col_copy(&c[8], &p);
	job->ttr_ms = col_int(&c[9]);
	job->state = col_copy(&c[10], &p);
	job->attempts = (int)col_int(&c[11]);
	job->created_ms = col_int(&c[12]);
	job->updated_ms = col_int(&c[13]);
	job->finished_ms = col_int(&c[14]);
	job->version = col_int(&c[15]);
	rows_add(arg, job);
	return 0;
}

static int
transition_row(const struct jrnl_val *c, size_t ncols, void *arg)
{
	struct jrnl_transition *t;
	char *p;

	if (ncols < 13)
		return 1;
	t = xcalloc(1, sizeof(*t) + cols_size(c, ncols));
	p = (char *)(t + 1);
	t->tenant = col_copy(&c[0], &p);
	t->job_id = col_copy(&c[1], &p);
	t->from_state = col_copy(&c[2], &p);
	t->to_state = col_copy(&c[3], &p);
	t->at_ms = col_int(&c[4]);
	t->instance = col_copy(&c[5], &p);
	t->host = col_copy(&c[6], &p);
	t->shard = (int)col_int(&c[7]);
	t->attempt = (int)col_int(&c[8]);
	t->http_status = (int)col_int(&c[9]);
	t->latency_ms = col_int(&c[10]);
	t->error = col_copy(&c[11], &p);
	t->excerpt = col_copy(&c[12], &p);
	t->excerpt_len = t->excerpt != NULL ? c[12].len : 0;
	rows_add(arg, t);
	return 0;
}

static int
tenant_row(const struct jrnl_val *c, size_t ncols, void *arg)
{
	struct jrnl_tenant *t;
	char *p;

	if (ncols < 3)
		return 1;
	t = xcalloc(1, sizeof(*t) + cols_size(c, ncols));
	p = (char *)(t + 1);
	t->name = col_copy(&c[0], &p);
	t->created_ms = col_int(&c[1]);
	t->settings_json = col_copy(&c[2], &p);
	rows_add(arg, t);
	return 0;
}

static int
key_row(const struct jrnl_val *c, size_t ncols, void *arg)
{
	struct jrnl_key *k;
	char *p;

	if (ncols < 5)
		return 1;
	k = xcalloc(1, sizeof(*k) + cols_size(c, ncols));
	p = (char *)(k + 1);
	k->tenant = col_copy(&c[0], &p);
	k->key_id = col_copy(&c[1], &p);
	k->hash_hex = col_copy(&c[2], &p);
	k->created_ms = col_int(&c[3]);
	k->revoked_ms = col_int(&c[4]);
	rows_add(arg, k);
	return 0;
}

static int
topic_row(const struct jrnl_val *c, size_t ncols, void *arg)
{
	struct jrnl_topic *t;
	char *p;

	if (ncols < 5)
		return 1;
	t = xcalloc(1, sizeof(*t) + cols_size(c, ncols));
	p = (char *)(t + 1);
	t->tenant = col_copy(&c[0], &p);
	t->name = col_copy(&c[1], &p);
	t->config_json = col_copy(&c[2], &p);
	t->created_ms = col_int(&c[3]);
	t->updated_ms = col_int(&c[4]);
	rows_add(arg, t);
	return 0;
}

/* The reading connection, under rmu. */

static enum jrnl_err
rconn_get(struct jrnl *j)
{
	char why[256];
	enum jrnl_err e;
	int writer_ok;

	if (j->rconn != NULL && (j->drv->moved == NULL ||
	    !j->drv->moved(j->rconn)))
		return JRNL_OK;
	if (j->rconn != NULL) {		/* the file went: read the new one */
		log_info("journal: reader: %s; opening it again",
		    j->drv->errmsg(j->rconn));
		j->drv->close(j->rconn);
		j->rconn = NULL;
	}
	/* Hold back after a failure, unless the writer got through since. */
	pthread_mutex_lock(&j->mu);
	writer_ok = j->connected;
	pthread_mutex_unlock(&j->mu);
	if (!writer_ok && clock_mono_us() < j->rconn_retry_mono_us)
		return JRNL_EUNAVAIL;
	e = jrnl_connect(j->drv, &j->url, j->cfg.timeout_ms,
	    j->cfg.mode == JRNL_MODE_SYNC, &j->rconn, why, sizeof(why));
	if (e != JRNL_OK) {
		j->rconn = NULL;
		j->rconn_retry_mono_us = clock_mono_us() + RECONNECT_US;
		log_debug("journal: reader connect: %s", why);
		return JRNL_EUNAVAIL;
	}
	return JRNL_OK;
}

/* After a failed statement: drop a connection that is gone. */
static enum jrnl_err
rconn_check(struct jrnl *j, enum jrnl_err e)
{
	if (e == JRNL_EUNAVAIL && j->rconn != NULL) {
		if (!jrnl_test_unavailable())
			log_debug("journal: reader: %s",
			    j->drv->errmsg(j->rconn));
		j->drv->close(j->rconn);
		j->rconn = NULL;
	} else if (e == JRNL_EINTERNAL)
		log_warnx("journal: read refused: %s",
		    j->drv->errmsg(j->rconn));
	return e;
}

void
jrnl_read_close(struct jrnl *j)
{
	if (j->rconn != NULL)
		j->drv->close(j->rconn);
	j->rconn = NULL;
}

/*
 * Get the reading connection; *fresh says whether it was made just now.
 * A statement that fails JRNL_EUNAVAIL on an older connection is tried once
 * more on a new one: the server may have restarted since, and every
 * statement here is safe to run twice.
 */
static enum jrnl_err
rconn_fresh(struct jrnl *j, int *fresh)
{
	*fresh = j->rconn == NULL;
	return rconn_get(j);
}

/* Run one read statement and collect its rows. */
static enum jrnl_err
read_rows(struct jrnl *j, int id, const struct jrnl_val *a, size_t na,
    jrnl_row_fn fn, struct rows *out)
{
	enum jrnl_err e;
	int fresh, tries;

	if (j->off)
		return JRNL_EOFF;
	pthread_mutex_lock(&j->rmu);
	for (tries = 0; tries < 2; tries++) {
		if ((e = rconn_fresh(j, &fresh)) != JRNL_OK)
			break;
		e = rconn_check(j, jrnl_run(j->drv, j->rconn, id, a, na, fn,
		    out, NULL));
		if (e != JRNL_EUNAVAIL || fresh)
			break;
		rows_free(out);
	}
	pthread_mutex_unlock(&j->rmu);
	if (e != JRNL_OK)
		rows_free(out);
	return e;
}

/*
 * Run statements s[0..n) in one transaction; *changes gets the rows
 * written by the first.
 */
struct wstep {
	int			 id;
	const struct jrnl_val	*a;
	size_t			 na;
};

static enum jrnl_err
write_once(struct jrnl *j, struct jrnl_conn *c, const struct wstep *s,
    size_t n, int64_t *changes)
{
	enum jrnl_err e = JRNL_OK;
	size_t i;

	if (n > 1 && (e = j->drv->begin(c)) != JRNL_OK)
		return e;
	for (i = 0; i < n && e == JRNL_OK; i++)
		e = jrnl_run(j->drv, c, s[i].id, s[i].a, s[i].na, NULL,
		    NULL, i == 0 ? changes : NULL);
	if (n > 1) {
		if (e == JRNL_OK)
			e = j->drv->commit(c);
		else
			j->drv->rollback(c);
	}
	return e;
}

static enum jrnl_err
write_steps(struct jrnl *j, const struct wstep *s, size_t n,
    int64_t *changes)
{
	enum jrnl_err e;
	int fresh, tries;

	if (j->off)
		return JRNL_OK;
	pthread_mutex_lock(&j->rmu);
	for (tries = 0; tries < 2; tries++) {
		if ((e = rconn_fresh(j, &fresh)) != JRNL_OK)
			break;
		e = rconn_check(j, write_once(j, j->rconn, s, n, changes));
		if (e != JRNL_EUNAVAIL || fresh)
			break;
	}
	pthread_mutex_unlock(&j->rmu);
	return e;
}

static size_t
clamp_limit(size_t limit, size_t dflt)
{
	if (limit == 0)
		return dflt;
	return limit > MAX_LIMIT ? MAX_LIMIT : limit;
}

static enum jrnl_err
deliver_jobs(struct rows *r, jrnl_job_fn cb, void *arg)
{
	size_t i;

	for (i = 0; i < r->n; i++)
		if (cb(r->v[i], arg) != 0)
			break;
	rows_free(r);
	return JRNL_OK;
}

enum jrnl_err
jrnl_scan_unfinished(struct jrnl *j, const struct jrnl_scan *s,
    jrnl_job_fn cb, void *arg)
{
	struct rows r = { 0 };
	struct jrnl_val a[5];
	enum jrnl_err e;
	size_t limit;

	if (j == NULL || s == NULL || cb == NULL)
		return JRNL_EINVAL;
	limit = clamp_limit(s->limit, DEFAULT_SCAN_LIMIT);
	if (s->tenant != NULL) {
		a[0] = jrnl_vtext(s->tenant);
		a[1] = jrnl_vtext(s->after_id != NULL ? s->after_id : "");
		a[2] = jrnl_vint(s->include_dead ? 1 : 0);
		a[3] = jrnl_vint((int64_t)limit);
		e = read_rows(j, JS_SCAN_TENANT, a, 4, job_row, &r);
	} else {
		a[0] = jrnl_vtext(s->after_tenant != NULL ? s->after_tenant :
		    "");
		a[1] = a[0];
		a[2] = jrnl_vtext(s->after_tenant != NULL &&
		    s->after_id != NULL ? s->after_id : "");
		a[3] = jrnl_vint(s->include_dead ? 1 : 0);
		a[4] = jrnl_vint((int64_t)limit);
		e = read_rows(j, JS_SCAN_ALL, a, 5, job_row, &r);
	}
	if (e != JRNL_OK)
		return e;
	return deliver_jobs(&r, cb, arg);
}

enum jrnl_err
jrnl_get_job(struct jrnl *j, const char *tenant, const char *id,
    jrnl_job_fn cb, void *arg)
{
	struct rows r = { 0 };
	struct jrnl_val a[2];
	enum jrnl_err e;

	if (j == NULL || tenant == NULL || id == NULL || cb == NULL)
		return JRNL_EINVAL;
	a[0] = jrnl_vtext(tenant);
	a[1] = jrnl_vtext(id);
	if ((e = read_rows(j, JS_JOB_GET, a, 2, job_row, &r)) != JRNL_OK)
		return e;
	if (r.n == 0) {
		rows_free(&r);
		return JRNL_ENOTFOUND;
	}
	return deliver_jobs(&r, cb, arg);
}

struct pair {
	const char	*tenant, *id;
};

static int
pair_cmp(const void *a, const void *b)
{
	const struct pair *x = a, *y = b;
	int c;

	if ((c = strcmp(x->tenant, y->tenant)) != 0)
		return c;
	return strcmp(x->id, y->id);
}

enum jrnl_err
jrnl_get_jobs(struct jrnl *j, const char *const *tenants,
    const char *const *ids, size_t n, jrnl_job_fn cb, void *arg)
{
	struct rows all = { 0 }, r;
	struct jrnl_val a[2 * JRNL_PUT_ROWS_MAX];
	struct pair *p;
	enum jrnl_err e = JRNL_OK;
	size_t i, k, m, rows;
	int size;

	if (j == NULL || (n > 0 && (tenants == NULL || ids == NULL)) ||
	    cb == NULL)
		return JRNL_EINVAL;
	if (n == 0)
		return JRNL_OK;
	/* Each pair once, whichever statements its asks would fall in. */
	p = xreallocarray(NULL, n, sizeof(*p));
	for (i = 0; i < n; i++) {
		p[i].tenant = tenants[i];
		p[i].id = ids[i];
	}
	qsort(p, n, sizeof(*p), pair_cmp);
	for (i = m = 0; i < n; i++)
		if (m == 0 || pair_cmp(&p[m - 1], &p[i]) != 0)
			p[m++] = p[i];
	/* Each statement's rows apart: read_rows() drops them on a retry. */
	for (i = 0; i < m; i += rows) {
		size = jrnl_many_size(m - i);
		rows = (size_t)1 << size;
		for (k = 0; k < rows; k++) {
			a[2 * k] = jrnl_vtext(p[i + k].tenant);
			a[2 * k + 1] = jrnl_vtext(p[i + k].id);
		}
		memset(&r, 0, sizeof(r));
		if ((e = read_rows(j, JS_GET_MANY + size, a, 2 * rows,
		    job_row, &r)) != JRNL_OK)
			break;
		for (k = 0; k < r.n; k++)
			rows_add(&all, r.v[k]);
		free(r.v);
	}
	free(p);
	if (e != JRNL_OK) {
		rows_free(&all);
		return e;
	}
	return deliver_jobs(&all, cb, arg);
}

/* Rows of one text column (an id) into NUL-terminated copies. */
static int
id_row(const struct jrnl_val *c, size_t ncols, void *arg)
{
	char *buf, *p;

	if (ncols < 1 || col_size(&c[0]) == 0)
		return 1;
	buf = p = xmalloc(col_size(&c[0]));
	col_copy(&c[0], &p);
	rows_add(arg, buf);
	return 0;
}

/*
 * The floor of the window of w rows below cursor (into floor; "" when
 * fewer than w rows are left: the window reaches the end).
 */
static enum jrnl_err
list_floor(struct jrnl *j, const char *tenant, const char *cursor,
    const char *topic, size_t w, char *floor)
{
	struct rows r = { 0 };
	struct jrnl_val a[4];
	enum jrnl_err e;
	size_t na = 0;

	a[na++] = jrnl_vtext(tenant);
	a[na++] = jrnl_vtext(cursor);
	if (topic != NULL)
		a[na++] = jrnl_vtext(topic);
	a[na++] = jrnl_vint((int64_t)w - 1);
	e = read_rows(j, JS_LIST_FLOOR + (topic != NULL ?
	    JRNL_LIST_BY_TOPIC : 0), a, na, id_row, &r);
	floor[0] = '\0';
	if (e == JRNL_OK && r.n > 0)
		snprintf(floor, JRNL_ID_MAX + 1, "%s", (char *)r.v[0]);
	rows_free(&r);
	return e;
}

/*
 * Jobs in state scheduled are most of a busy tenant's unfinished jobs and
 * are not in SQLite's jobs_state index (schema version 6): a listing by
 * scheduled without a bizkey walks the ids (the primary key, or
 * jobs_topic) from the cursor down, a window of rows at a time, and stops
 * after budget rows with what it found, its next cursor the window's
 * floor: a tenant whose history is mostly finished jobs costs a page at
 * most budget rows read, not the whole history.  Both drivers page the
 * same way, so the answer does not depend on the database.
 */
enum jrnl_err
jrnl_list_jobs(struct jrnl *j, const char *tenant, struct jrnl_list *l,
    jrnl_job_fn cb, void *arg)
{
	char cur[JRNL_ID_MAX + 1], floor[JRNL_ID_MAX + 1];
	size_t limit, w, budget, seen = 0, got = 0, na, i;
	struct rows r = { 0 };
	struct jrnl_val a[7];
	const struct jrnl_job *last;
	enum jrnl_err e;
	int mask = 0, windowed, stop;

	if (j == NULL || tenant == NULL || l == NULL || cb == NULL)
		return JRNL_EINVAL;
	l->next[0] = '\0';
	if (l->cursor != NULL && strlen(l->cursor) > JRNL_ID_MAX)
		return JRNL_EINVAL;
	limit = clamp_limit(l->limit, DEFAULT_LIST_LIMIT);
	w = l->window > 0 ? l->window : JRNL_LIST_WINDOW;
	budget = l->budget > 0 ? l->budget : JRNL_LIST_BUDGET;
	/*
	 * No cursor: start above every id.  Bytes 0xff never occur in UTF-8,
	 * so this sorts after any id in both databases' byte order.
	 */
	snprintf(cur, sizeof(cur), "%s", l->cursor != NULL ? l->cursor :
	    "\xff\xff");
	if (l->topic != NULL)
		mask |= JRNL_LIST_BY_TOPIC;
	if (l->state != NULL)
		mask |= strcmp(l->state, "scheduled") == 0 ?
		    JRNL_LIST_SCHEDULED : JRNL_LIST_BY_STATE;
	if (l->bizkey != NULL)
		mask |= JRNL_LIST_BY_BIZKEY;
	windowed = (mask & JRNL_LIST_SCHEDULED) && l->bizkey == NULL;
	for (;;) {
		floor[0] = '\0';
		if (windowed && (e = list_floor(j, tenant, cur, l->topic, w,
		    floor)) != JRNL_OK)
			return e;
		na = 0;
		a[na++] = jrnl_vtext(tenant);
		a[na++] = jrnl_vtext(cur);
		if (mask & JRNL_LIST_SCHEDULED)
			a[na++] = jrnl_vtext(floor);
		if (l->topic != NULL)
			a[na++] = jrnl_vtext(l->topic);
		if (mask & JRNL_LIST_BY_STATE)
			a[na++] = jrnl_vtext(l->state);
		if (l->bizkey != NULL)
			a[na++] = jrnl_vtext(l->bizkey);
		a[na++] = jrnl_vint((int64_t)(limit - got));
		if ((e = read_rows(j, JS_LIST + mask, a, na, job_row, &r)) !=
		    JRNL_OK)
			return e;
		got += r.n;
		if (r.n > 0) {
			last = r.v[r.n - 1];
			snprintf(cur, sizeof(cur), "%s", last->id);
		}
		for (i = 0; i < r.n; i++)
			if (cb(r.v[i], arg) != 0)
				break;
		stop = i < r.n;
		rows_free(&r);
		if (stop)
			return JRNL_OK;
		if (got == limit) {
			snprintf(l->next, sizeof(l->next), "%s", cur);
			return JRNL_OK;
		}
		/* Short: the window, or everything left, is read. */
		if (!windowed || floor[0] == '\0')
			return JRNL_OK;
		snprintf(cur, sizeof(cur), "%s", floor);
		if ((seen += w) >= budget) {
			snprintf(l->next, sizeof(l->next), "%s", cur);
			return JRNL_OK;
		}
	}
}

/*
 * A job's creation is not a transitions row (a put writes the job's row in
 * its first state, "scheduled"; docs/internals/JOURNAL.md): it is derived
 * from the job's row, unless the table has one (written before schema 2).
 */
static int
creation_first(const struct rows *jr, const struct rows *tr)
{
	const struct jrnl_transition *t0;

	if (jr->n == 0)
		return 0;
	t0 = tr->n > 0 ? tr->v[0] : NULL;
	return t0 == NULL || t0->from_state != NULL;
}

enum jrnl_err
jrnl_list_transitions(struct jrnl *j, const char *tenant, const char *job_id,
    jrnl_transition_fn cb, void *arg)
{
	struct rows r = { 0 }, jr = { 0 };
	const struct jrnl_job *job;
	struct jrnl_transition c;
	struct jrnl_val a[3];
	enum jrnl_err e;
	size_t i;

	if (j == NULL || tenant == NULL || job_id == NULL || cb == NULL)
		return JRNL_EINVAL;
	a[0] = jrnl_vtext(tenant);
	a[1] = jrnl_vtext(job_id);
	a[2] = jrnl_vint(MAX_TRANSITIONS);
	if ((e = read_rows(j, JS_JOB_GET, a, 2, job_row, &jr)) != JRNL_OK)
		return e;
	e = read_rows(j, JS_TRANS_LIST, a, 3, transition_row, &r);
	if (e != JRNL_OK) {
		rows_free(&jr);
		return e;
	}
	if (creation_first(&jr, &r)) {
		job = jr.v[0];
		memset(&c, 0, sizeof(c));
		c.tenant = job->tenant;
		c.job_id = job->id;
		c.to_state = "scheduled";
		c.at_ms = job->created_ms;
		c.instance = c.host = "";
		if (cb(&c, arg) != 0)
			goto out;
	}
	for (i = 0; i < r.n; i++)
		if (cb(r.v[i], arg) != 0)
			break;
out:
	rows_free(&jr);
	rows_free(&r);
	return JRNL_OK;
}

/* Tenants, keys, topics. */

enum jrnl_err
jrnl_put_tenant(struct jrnl *j, const struct jrnl_tenant *t)
{
	struct jrnl_val a[3];
	struct wstep s = { JS_TENANT_UPSERT, a, 3 };

	if (j == NULL || t == NULL || t->name == NULL)
		return JRNL_EINVAL;
	a[0] = jrnl_vtext(t->name);
	a[1] = jrnl_vint(t->created_ms);
	a[2] = jrnl_vtext(t->settings_json);
	return write_steps(j, &s, 1, NULL);
}

/*
 * A big delete in steps.  Deleting a topic of many jobs, or a tenant, was
 * one transaction, and it held the database's write lock, so every other
 * tenant's pushes waited for it (about a second for 800k jobs).  Now the
 * rows go delete_batch at a time, each step a round of the writer's own
 * (jrnl_run_task), taking turns with the puts queued meanwhile; what is
 * left after the last full step goes with the topic's or tenant's own row
 * in one transaction, as before.  A delete cut short (the database away,
 * a crash) has done part of its rows, and the topic or tenant is still
 * there: the delete is answered 503, or not at all, and can be repeated.
 */

/* The one column of a bound's row, into *arg (NULL: no row). */
static int
bound_row(const struct jrnl_val *c, size_t ncols, void *arg)
{
	char **out = arg;

	if (ncols >= 1 && c[0].type != JRNL_V_NULL) {
		free(*out);
		*out = xstrndup(c[0].p, c[0].len);
	}
	return 0;
}

/*
 * Statement id (a bound: the args a[0..na), then the offset), into *out;
 * JRNL_OK with *out NULL when fewer rows than a step are left.
 */
static enum jrnl_err
step_bound(struct jrnl *j, int id, struct jrnl_val *a, size_t na, char **out)
{
	*out = NULL;
	a[na] = jrnl_vint(j->cfg.delete_batch - 1);
	return jrnl_run(j->drv, j->wconn, id, a, na + 1, bound_row, out, NULL);
}

struct delete_steps {
	const char	*tenant;
	const char	*topic;
	char		*after;		/* topic: the rows up to it are done */
	int64_t		 now;
	int		 last;		/* no full step is left */
};

/* A topic's next delete_batch rows, cancelled. */
static enum jrnl_err
topic_step(struct jrnl *j, void *arg)
{
	struct delete_steps *d = arg;
	struct jrnl_val a[6];
	char *bound;
	enum jrnl_err e;

	a[0] = jrnl_vtext(d->tenant);
	a[1] = jrnl_vtext(d->topic);
	a[2] = jrnl_vtext(d->after);
	if ((e = step_bound(j, JS_TOPIC_STEP_BOUND, a, 3, &bound)) !=
	    JRNL_OK || bound == NULL) {
		free(bound);		/* a row read before a failure */
		d->last = e == JRNL_OK;
		return e;
	}
	a[0] = a[1] = jrnl_vint(d->now);
	a[2] = jrnl_vtext(d->tenant);
	a[3] = jrnl_vtext(d->topic);
	a[4] = jrnl_vtext(d->after);
	a[5] = jrnl_vtext(bound);
	e = jrnl_run(j->drv, j->wconn, JS_TOPIC_STEP_CANCEL, a, 6, NULL,
	    NULL, NULL);
	free(d->after);
	d->after = bound;
	return e;
}

/*
 * A tenant's next delete_batch jobs and delete_batch jobs' transitions
 * (each table by its own bound: the jobs may be gone already, their
 * transitions written since), in one transaction.
 */
static enum jrnl_err
tenant_step(struct jrnl *j, void *arg)
{
	struct delete_steps *d = arg;
	struct jrnl_val a[2], b[2];
	struct wstep s[2];
	char *bj = NULL, *bt = NULL;
	enum jrnl_err e;
	size_t n = 0;

	a[0] = b[0] = jrnl_vtext(d->tenant);
	if ((e = step_bound(j, JS_TENANT_JOBS_BOUND, a, 1, &bj)) != JRNL_OK ||
	    (e = step_bound(j, JS_TENANT_TRANS_BOUND, b, 1, &bt)) != JRNL_OK)
		goto out;
	if (bj != NULL) {
		a[1] = jrnl_vtext(bj);
		s[n++] = (struct wstep){ JS_TENANT_JOBS_STEP, a, 2 };
	}
	if (bt != NULL) {
		b[1] = jrnl_vtext(bt);
		s[n++] = (struct wstep){ JS_TENANT_TRANS_STEP, b, 2 };
	}
	d->last = n == 0;
	if (n > 0)
		e = write_once(j, j->wconn, s, n, NULL);
out:
	free(bj);
	free(bt);
	return e;
}

/* Runs fn's steps on the writer until none is full. */
static enum jrnl_err
run_steps(struct jrnl *j, jrnl_task_fn fn, struct delete_steps *d)
{
	enum jrnl_err e;

	d->last = 0;
	do
		e = jrnl_run_task(j, fn, d);
	while (e == JRNL_OK && !d->last);
	return e;
}

enum jrnl_err
jrnl_delete_tenant(struct jrnl *j, const char *name)
{
	struct delete_steps d = { name, NULL, NULL, 0, 0 };
	struct jrnl_val a[1];
	struct wstep s[5] = {
		{ JS_TENANT_DELETE, a, 1 },
		{ JS_TENANT_KEYS_DELETE, a, 1 },
		{ JS_TENANT_TOPICS_DELETE, a, 1 },
		{ JS_TENANT_JOBS_DELETE, a, 1 },
		{ JS_TENANT_TRANS_DELETE, a, 1 },
	};
	int64_t changes = 0;
	enum jrnl_err e;

	if (j == NULL || name == NULL)
		return JRNL_EINVAL;
	if (j->off)
		return JRNL_OK;
	if ((e = run_steps(j, tenant_step, &d)) != JRNL_OK)
		return e;
	a[0] = jrnl_vtext(name);
	e = write_steps(j, s, 5, &changes);
	if (e == JRNL_OK && changes == 0)
		return JRNL_ENOTFOUND;
	return e;
}

enum jrnl_err
jrnl_delete_tenant_jobs(struct jrnl *j, const char *name)
{
	struct delete_steps d = { name, NULL, NULL, 0, 0 };
	struct jrnl_val a[1];
	struct wstep s[2] = {
		{ JS_TENANT_JOBS_DELETE, a, 1 },
		{ JS_TENANT_TRANS_DELETE, a, 1 },
	};
	enum jrnl_err e;

	if (j == NULL || name == NULL)
		return JRNL_EINVAL;
	if (j->off)
		return JRNL_OK;
	/* What is queued first: a transition written after would stay. */
	if (jrnl_flush(j) == -1)
		return JRNL_EUNAVAIL;
	if ((e = run_steps(j, tenant_step, &d)) != JRNL_OK)
		return e;
	a[0] = jrnl_vtext(name);
	return write_steps(j, s, 2, NULL);
}

enum jrnl_err
jrnl_scan_tenants(struct jrnl *j, jrnl_tenant_fn cb, void *arg)
{
	struct rows r = { 0 };
	enum jrnl_err e;
	size_t i;

	if (j == NULL || cb == NULL)
		return JRNL_EINVAL;
	if ((e = read_rows(j, JS_TENANT_SCAN, NULL, 0, tenant_row, &r)) !=
	    JRNL_OK)
		return e;
	for (i = 0; i < r.n; i++)
		if (cb(r.v[i], arg) != 0)
			break;
	rows_free(&r);
	return JRNL_OK;
}

enum jrnl_err
jrnl_put_key(struct jrnl *j, const struct jrnl_key *k)
{
	struct jrnl_val a[5];
	struct wstep s = { JS_KEY_UPSERT, a, 5 };

	if (j == NULL || k == NULL || k->tenant == NULL || k->key_id == NULL ||
	    k->hash_hex == NULL)
		return JRNL_EINVAL;
	a[0] = jrnl_vtext(k->tenant);
	a[1] = jrnl_vtext(k->key_id);
	a[2] = jrnl_vtext(k->hash_hex);
	a[3] = jrnl_vint(k->created_ms);
	a[4] = k->revoked_ms != 0 ? jrnl_vint(k->revoked_ms) :
	    jrnl_vtext(NULL);
	return write_steps(j, &s, 1, NULL);
}

enum jrnl_err
jrnl_revoke_key(struct jrnl *j, const char *tenant, const char *key_id,
    int64_t revoked_ms)
{
	struct jrnl_val a[3];
	struct wstep s = { JS_KEY_REVOKE, a, 3 };
	int64_t changes = 0;
	enum jrnl_err e;

	if (j == NULL || tenant == NULL || key_id == NULL)
		return JRNL_EINVAL;
	a[0] = jrnl_vint(revoked_ms != 0 ? revoked_ms : clock_wall_ms());
	a[1] = jrnl_vtext(tenant);
	a[2] = jrnl_vtext(key_id);
	e = write_steps(j, &s, 1, &changes);
	if (e == JRNL_OK && changes == 0 && !j->off)
		return JRNL_ENOTFOUND;
	return e;
}

enum jrnl_err
jrnl_scan_keys(struct jrnl *j, const char *tenant, jrnl_key_fn cb, void *arg)
{
	struct rows r = { 0 };
	struct jrnl_val a[1];
	enum jrnl_err e;
	size_t i;

	if (j == NULL || cb == NULL)
		return JRNL_EINVAL;
	a[0] = jrnl_vtext(tenant);
	e = tenant != NULL ? read_rows(j, JS_KEY_SCAN, a, 1, key_row, &r) :
	    read_rows(j, JS_KEY_SCAN_ALL, NULL, 0, key_row, &r);
	if (e != JRNL_OK)
		return e;
	for (i = 0; i < r.n; i++)
		if (cb(r.v[i], arg) != 0)
			break;
	rows_free(&r);
	return JRNL_OK;
}

enum jrnl_err
jrnl_put_topic(struct jrnl *j, const struct jrnl_topic *t)
{
	struct jrnl_val a[5];
	struct wstep s = { JS_TOPIC_UPSERT, a, 5 };

	if (j == NULL || t == NULL || t->tenant == NULL || t->name == NULL ||
	    t->config_json == NULL)
		return JRNL_EINVAL;
	a[0] = jrnl_vtext(t->tenant);
	a[1] = jrnl_vtext(t->name);
	a[2] = jrnl_vtext(t->config_json);
	a[3] = jrnl_vint(t->created_ms);
	a[4] = jrnl_vint(t->updated_ms != 0 ? t->updated_ms : t->created_ms);
	return write_steps(j, &s, 1, NULL);
}

enum jrnl_err
jrnl_delete_topic(struct jrnl *j, const char *tenant, const char *name)
{
	struct delete_steps d = { tenant, name, NULL, 0, 0 };
	struct jrnl_val a[2], c[5];
	struct wstep s[2] = {
		{ JS_TOPIC_DELETE, a, 2 },
		{ JS_TOPIC_JOBS_CANCEL, c, 5 },
	};
	int64_t changes = 0;
	enum jrnl_err e;

	if (j == NULL || tenant == NULL || name == NULL)
		return JRNL_EINVAL;
	if (j->off)
		return JRNL_OK;
	d.now = clock_wall_ms();
	d.after = xstrdup("");
	if ((e = run_steps(j, topic_step, &d)) != JRNL_OK)
		goto out;
	a[0] = jrnl_vtext(tenant);
	a[1] = jrnl_vtext(name);
	c[0] = jrnl_vint(d.now);
	c[1] = jrnl_vint(d.now);
	c[2] = jrnl_vtext(tenant);
	c[3] = jrnl_vtext(name);
	c[4] = jrnl_vtext(d.after);
	e = write_steps(j, s, 2, &changes);
	if (e == JRNL_OK && changes == 0)
		e = JRNL_ENOTFOUND;
out:
	free(d.after);
	return e;
}

enum jrnl_err
jrnl_scan_topics(struct jrnl *j, const char *tenant, jrnl_topic_fn cb,
    void *arg)
{
	struct rows r = { 0 };
	struct jrnl_val a[1];
	enum jrnl_err e;
	size_t i;

	if (j == NULL || cb == NULL)
		return JRNL_EINVAL;
	a[0] = jrnl_vtext(tenant);
	e = tenant != NULL ? read_rows(j, JS_TOPIC_SCAN, a, 1, topic_row, &r) :
	    read_rows(j, JS_TOPIC_SCAN_ALL, NULL, 0, topic_row, &r);
	if (e != JRNL_OK)
		return e;
	for (i = 0; i < r.n; i++)
		if (cb(r.v[i], arg) != 0)
			break;
	rows_free(&r);
	return JRNL_OK;
}

enum jrnl_err
jrnl_get_topic(struct jrnl *j, const char *tenant, const char *name,
    jrnl_topic_fn cb, void *arg)
{
	struct rows r = { 0 };
	struct jrnl_val a[2];
	enum jrnl_err e;

	if (j == NULL || tenant == NULL || name == NULL || cb == NULL)
		return JRNL_EINVAL;
	a[0] = jrnl_vtext(tenant);
	a[1] = jrnl_vtext(name);
	if ((e = read_rows(j, JS_TOPIC_GET, a, 2, topic_row, &r)) != JRNL_OK)
		return e;
	if (r.n == 0)
		e = JRNL_ENOTFOUND;
	else
		(void)cb(r.v[0], arg);
	rows_free(&r);
	return e;
}
