/*
 * test_journal_fixture.c - the fixture of the journal tests: per-case setup
 * (a fresh SQLite file, or a MySQL database emptied of the journal's
 * tables), direct SQL around the journal, and small builders and waits.
 *
 * Key decision: waits poll a condition against a deadline (tj_wait_until);
 * nothing here sleeps to let time pass.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "journal/internal.h"
#include "journal/journal.h"
#include "tests/unit/test_journal.h"
#include "util/clock.h"

#define NELEM(a)	(sizeof(a) / sizeof((a)[0]))

struct tb sqlite_b = { .name = "sqlite" };
struct tb mysql_b = { .name = "mysql", .is_mysql = 1 };

/*
 * The journals a case has open: a case that fails leaves its own open, and
 * tj_teardown closes it, so that its writer does not go on writing into
 * the next case's database.
 */
static struct jrnl	*open_j[8];

/* ---- backends ----------------------------------------------------------- */

static int
sq_exec_file(struct tb *b, const char *sql, int64_t *out)
{
	char path[600];
	sqlite3_stmt *st = NULL;
	sqlite3 *db = NULL;
	int rc = -1;

	snprintf(path, sizeof(path), "%s/journal.db", b->dir);
	if (sqlite3_open(path, &db) != SQLITE_OK)
		goto out;
	if (out == NULL) {
		rc = sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ?
		    0 : -1;
		goto out;
	}
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		goto out;
	*out = -1;
	if (sqlite3_step(st) == SQLITE_ROW &&
	    sqlite3_column_type(st, 0) != SQLITE_NULL)
		*out = sqlite3_column_int64(st, 0);
	rc = 0;
out:
	sqlite3_finalize(st);
	sqlite3_close(db);
	return rc;
}

int
tj_exec(struct tb *b, const char *sql)
{
	return b->is_mysql ? tbm_exec(b, sql) : sq_exec_file(b, sql, NULL);
}

int64_t
tj_int(struct tb *b, const char *sql)
{
	int64_t v = -1;

	if (b->is_mysql)
		return tbm_query_int(b, sql);
	return sq_exec_file(b, sql, &v) == 0 ? v : -1;
}

int
tj_setup(void **state)
{
	struct tb *b = *state;
	const char *tmp = getenv("TMPDIR");

	if (b == NULL)
		return 0;
	if (b->is_mysql) {
		if (!b->tried)
			tbm_setup(b);
		if (b->available && tj_exec(b, "DROP TABLE IF EXISTS jobs, "
		    "transitions, tenants, api_keys, topics, schema_version")
		    != 0) {
			snprintf(b->why, sizeof(b->why), "cannot reset the "
			    "test database");
			b->available = 0;
		}
		return 0;
	}
	snprintf(b->dir, sizeof(b->dir), "%s/retryd-jrnl-XXXXXX",
	    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
	if (mkdtemp(b->dir) == NULL)
		return -1;
	snprintf(b->url, sizeof(b->url), "sqlite://%s/journal.db", b->dir);
	b->available = 1;
	return 0;
}

int
tj_teardown(void **state)
{
	static const char *const files[] = { "journal.db", "journal.db-wal",
	    "journal.db-shm" };
	struct tb *b = *state;
	char path[600];
	size_t i;

	jrnl_test_set_unavailable(0);
	for (i = 0; i < NELEM(open_j); i++)
		if (open_j[i] != NULL) {
			print_message("# closing a journal the case left "
			    "open\n");
			tj_close(open_j[i]);
		}
	if (b == NULL || b->is_mysql)
		return 0;
	for (i = 0; i < NELEM(files); i++) {
		snprintf(path, sizeof(path), "%s/%s", b->dir, files[i]);
		(void)unlink(path);
	}
	(void)rmdir(b->dir);
	return 0;
}

int
tj_group_teardown(void **state)
{
	(void)state;
	tbm_teardown(&mysql_b);
	return 0;
}

/* The backend of this case, or skip/fail when it cannot run. */
struct tb *
tj_begin(void **state)
{
	struct tb *b = *state;

	if (!b->available) {
		if (b->skip) {
			print_message("# SKIP %s: %s\n", b->name, b->why);
			skip();
		}
		fail_msg("%s backend unavailable: %s", b->name, b->why);
	}
	return b;
}

struct jrnl_config
tj_cfg(struct tb *b, enum jrnl_mode mode)
{
	struct jrnl_config c;

	memset(&c, 0, sizeof(c));
	c.url = b->url;
	c.mode = mode;
	c.instance = "test-1";
	c.host = "testhost";
	c.timeout_ms = 1000;
	c.flush_interval_ms = 60000;	/* batches only when flushed */
	return c;
}

struct jrnl *
tj_open_cfg(const struct jrnl_config *c)
{
	enum jrnl_err e;
	char why[512] = "";
	struct jrnl *j;
	size_t i;

	j = jrnl_open(c, &e, why, sizeof(why));
	if (j == NULL)
		fail_msg("jrnl_open(%s): %s: %s", c->url, jrnl_strerror(e),
		    why);
	for (i = 0; i < NELEM(open_j) && open_j[i] != NULL; i++)
		;
	if (i == NELEM(open_j))
		fail_msg("more than %zu journals open", NELEM(open_j));
	open_j[i] = j;
	return j;
}

void
tj_close(struct jrnl *j)
{
	size_t i;

	for (i = 0; j != NULL && i < NELEM(open_j); i++)
		if (open_j[i] == j)
			open_j[i] = NULL;
	jrnl_close(j);
}

struct jrnl *
tj_open(struct tb *b, enum jrnl_mode mode)
{
	struct jrnl_config c = tj_cfg(b, mode);

	return tj_open_cfg(&c);
}

struct jrnl_job
tj_job(const char *tenant, const char *topic, const char *id,
    const char *state, int64_t at_ms)
{
	struct jrnl_job job;

	memset(&job, 0, sizeof(job));
	job.tenant = tenant;
	job.topic = topic;
	job.id = id;
	job.state = state;
	job.body = "{}";
	job.body_len = 2;
	job.due_ms = at_ms;
	job.created_ms = at_ms;
	job.updated_ms = at_ms;
	return job;
}

struct jrnl_transition
tj_trans(const char *tenant, const char *id, const char *from,
    const char *to, int64_t at_ms, int attempt)
{
	struct jrnl_transition t;

	memset(&t, 0, sizeof(t));
	t.tenant = tenant;
	t.job_id = id;
	t.from_state = from;
	t.to_state = to;
	t.at_ms = at_ms;
	t.attempt = attempt;
	return t;
}

/* Poll cond until it holds or timeout_ms pass: waiting, not sleeping. */
int
tj_wait_until(int (*cond)(struct jrnl *), struct jrnl *j,
    int64_t timeout_ms)
{
	struct timespec pause = { 0, 20 * 1000 * 1000 };
	int64_t end = clock_mono_us() + timeout_ms * 1000;

	while (!cond(j)) {
		if (clock_mono_us() >= end)
			return 0;
		nanosleep(&pause, NULL);
	}
	return 1;
}

int
tj_is_ready(struct jrnl *j)
{
	return jrnl_ready(j, NULL, 0);
}

int
tj_not_ready(struct jrnl *j)
{
	return !jrnl_ready(j, NULL, 0);
}


int
tj_collect_id(const struct jrnl_job *job, void *arg)
{
	struct ids *ids = arg;

	if (ids->n < NELEM(ids->v))
		snprintf(ids->v[ids->n++], sizeof(ids->v[0]), "%s/%s",
		    job->tenant, job->id);
	return 0;
}

static int
tj_take_job(const struct jrnl_job *job, void *arg)
{
	struct one_job *o = arg;

	o->found = 1;
	snprintf(o->state, sizeof(o->state), "%s", job->state);
	o->attempts = job->attempts;
	o->due_ms = job->due_ms;
	o->created_ms = job->created_ms;
	o->updated_ms = job->updated_ms;
	o->finished_ms = job->finished_ms;
	o->version = job->version;
	return 0;
}

struct one_job
tj_get_one(struct jrnl *j, const char *tenant, const char *id)
{
	struct one_job o;
	enum jrnl_err e;

	memset(&o, 0, sizeof(o));
	e = jrnl_get_job(j, tenant, id, tj_take_job, &o);
	if (e != JRNL_OK && e != JRNL_ENOTFOUND)
		fail_msg("get %s/%s: %s", tenant, id, jrnl_strerror(e));
	return o;
}
