/*
 * schema.c - the journal's tables, their versions and migrations, and the
 * text of every statement the journal runs, in both dialects.
 *
 * Key decision: the schema carries a version (schema_version keeps one row
 * per version applied) and a build migrates forward only, step by step,
 * under a lock that serialises instances starting together; a database
 * whose version is newer than the build is refused rather than written to
 * in a format it does not know.  MySQL DDL commits implicitly, so every
 * step is written to be safe to run twice (IF NOT EXISTS): a step cut short
 * by a crash is simply run again.  MySQL columns are binary (VARBINARY,
 * BLOB): bytes in, bytes out, compared as bytes like SQLite's BINARY
 * collation, so a cursor orders the same in both and no charset conversion
 * can refuse a row and stall a batch.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "journal/internal.h"
#include "util/clock.h"

#define JOB_COLS "tenant, topic, id, bizkey, due_ms, priority, body, " \
	"headers, schedule, ttr_ms, state, attempts, created_ms, " \
	"updated_ms, finished_ms, version"

#define JOB_INSERT "INSERT INTO jobs (tenant, id, topic, bizkey, due_ms, " \
	"priority, body, headers, schedule, ttr_ms, state, attempts, " \
	"created_ms, updated_ms, finished_ms, put_id, version) VALUES "
#define JOB_ROW "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

/*
 * A put replaces a row unless it carries a token (put_id) and the row is
 * another put's, unfinished: two pushes of one client-given id in flight
 * together, the first put's row stands (the second learns it through
 * JS_PUT_ID_MANY).  MySQL assigns in order, each IF() seeing the columns
 * already assigned: put_id and finished_ms, which the test reads, come
 * last, put_id first (once it is assigned the test still holds).
 */
#define UPSERT_SET(X) "topic = " X(topic) ", bizkey = " X(bizkey) \
	", due_ms = " X(due_ms) ", priority = " X(priority) \
	", body = " X(body) ", headers = " X(headers) \
	", schedule = " X(schedule) ", ttr_ms = " X(ttr_ms) \
	", state = " X(state) ", attempts = " X(attempts) \
	", created_ms = " X(created_ms) ", updated_ms = " X(updated_ms) \
	", version = " X(version) \
	", put_id = " X(put_id) ", finished_ms = " X(finished_ms)
#define EXCLUDED(c)	"excluded." #c
#define SQLITE_UPSERT	" ON CONFLICT (tenant, id) DO UPDATE SET " \
	UPSERT_SET(EXCLUDED) " WHERE excluded.put_id IS NULL OR " \
	"jobs.finished_ms IS NOT NULL OR jobs.put_id = excluded.put_id"
#define MYSQL_MAY	"(VALUES(put_id) IS NULL OR finished_ms IS NOT NULL " \
	"OR put_id = VALUES(put_id))"
#define IF_MAY(c)	"IF(" MYSQL_MAY ", VALUES(" #c "), " #c ")"
#define MYSQL_UPSERT	" ON DUPLICATE KEY UPDATE " UPSERT_SET(IF_MAY)

#define LIST_SQL(f) "SELECT " JOB_COLS " FROM jobs " \
	"WHERE tenant = ? AND id < ?" f " ORDER BY id DESC LIMIT ?"
#define BY_STATE " AND state = ? AND state <> 'scheduled'"
#define BY_SCHEDULED " AND id >= ? AND state = 'scheduled'"

/*
 * Past any version Redis gives the job (6 bytes there): a change Redis
 * made before the topic went, its transition still queued, must not
 * reopen the row.
 */
#define TOPIC_CANCEL(range) "UPDATE jobs SET state = 'cancelled', " \
	"updated_ms = ?, finished_ms = ?, version = 281474976710656 " \
	"WHERE tenant = ? AND topic = ? AND " range " AND finished_ms IS NULL"

#define TRANS_COLS "tenant, job_id, from_state, to_state, at_ms, " \
	"instance, host, shard, attempt, http_status, latency_ms, error, " \
	"excerpt"
#define TRANS_INSERT "INSERT INTO transitions (" TRANS_COLS ") VALUES "
#define TRANS_ROW "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

/* Statements the same in both dialects. */
static const char *const common_sql[JS_COUNT] = {
	[JS_JOB_APPLY] = "UPDATE jobs SET state = ?, attempts = "
	    "CASE WHEN ? <> 0 OR ? > attempts THEN ? ELSE attempts END, "
	    "due_ms = COALESCE(?, due_ms), updated_ms = ?, finished_ms = ?, "
	    "version = ? WHERE tenant = ? AND id = ? AND created_ms = ? "
	    "AND version < ?",
	[JS_JOB_VOID] = "DELETE FROM jobs "
	    "WHERE tenant = ? AND id = ? AND state = 'scheduled' "
	    "AND (? IS NULL OR put_id = ?)",
	[JS_JOB_GET] = "SELECT " JOB_COLS " FROM jobs "
	    "WHERE tenant = ? AND id = ?",
	[JS_SCAN_TENANT] = "SELECT " JOB_COLS " FROM jobs "
	    "WHERE finished_ms IS NULL AND tenant = ? AND id > ? "
	    "AND (? OR state <> 'dead') ORDER BY id LIMIT ?",
	[JS_TRANS_LIST] = "SELECT " TRANS_COLS " FROM transitions "
	    "WHERE tenant = ? AND job_id = ? ORDER BY id LIMIT ?",
	[JS_PURGE_SELECT] = "SELECT tenant, id FROM jobs "
	    "WHERE finished_ms < ? ORDER BY finished_ms LIMIT ?",
	[JS_PURGE_TRANS] = "DELETE FROM transitions "
	    "WHERE tenant = ? AND job_id = ?",
	[JS_PURGE_JOB] = "DELETE FROM jobs "
	    "WHERE tenant = ? AND id = ? AND finished_ms < ?",
	[JS_TENANT_DELETE] = "DELETE FROM tenants WHERE name = ?",
	[JS_TENANT_KEYS_DELETE] = "DELETE FROM api_keys WHERE tenant = ?",
	[JS_TENANT_TOPICS_DELETE] = "DELETE FROM topics WHERE tenant = ?",
	[JS_TENANT_JOBS_DELETE] = "DELETE FROM jobs WHERE tenant = ?",
	[JS_TENANT_TRANS_DELETE] = "DELETE FROM transitions WHERE tenant = ?",
	[JS_TENANT_SCAN] = "SELECT name, created_ms, settings FROM tenants "
	    "ORDER BY name",
	[JS_KEY_REVOKE] = "UPDATE api_keys SET revoked_ms = "
	    "COALESCE(revoked_ms, ?) WHERE tenant = ? AND key_id = ?",
	[JS_KEY_SCAN_ALL] = "SELECT tenant, key_id, hash, created_ms, "
	    "revoked_ms FROM api_keys ORDER BY tenant, created_ms, key_id",
	[JS_KEY_SCAN] = "SELECT tenant, key_id, hash, created_ms, "
	    "revoked_ms FROM api_keys WHERE tenant = ? "
	    "ORDER BY created_ms, key_id",
	[JS_TOPIC_DELETE] = "DELETE FROM topics "
	    "WHERE tenant = ? AND name = ?",
	/* The topic's rows past the cursor; the cursor to the bound. */
	[JS_TOPIC_JOBS_CANCEL] = TOPIC_CANCEL("id > ?"),
	[JS_TOPIC_STEP_CANCEL] = TOPIC_CANCEL("id > ? AND id <= ?"),
	/*
	 * The bounds of a delete's steps: the id of the delete_batch-th row
	 * to go (the topic's from the cursor on, the tenant's from its
	 * first, since the rows before it are gone).
	 */
	[JS_TOPIC_STEP_BOUND] = "SELECT id FROM jobs WHERE tenant = ? "
	    "AND topic = ? AND id > ? ORDER BY id LIMIT 1 OFFSET ?",
	[JS_TENANT_JOBS_BOUND] = "SELECT id FROM jobs WHERE tenant = ? "
	    "ORDER BY id LIMIT 1 OFFSET ?",
	[JS_TENANT_JOBS_STEP] = "DELETE FROM jobs "
	    "WHERE tenant = ? AND id <= ?",
	[JS_TENANT_TRANS_BOUND] = "SELECT job_id FROM transitions "
	    "WHERE tenant = ? ORDER BY job_id LIMIT 1 OFFSET ?",
	[JS_TENANT_TRANS_STEP] = "DELETE FROM transitions "
	    "WHERE tenant = ? AND job_id <= ?",
	[JS_TOPIC_SCAN_ALL] = "SELECT tenant, name, config, created_ms, "
	    "updated_ms FROM topics ORDER BY tenant, name",
	[JS_TOPIC_SCAN] = "SELECT tenant, name, config, created_ms, "
	    "updated_ms FROM topics WHERE tenant = ? ORDER BY name",
	[JS_TOPIC_GET] = "SELECT tenant, name, config, created_ms, "
	    "updated_ms FROM topics WHERE tenant = ? AND name = ?",
	[JS_VERSION_GET] = "SELECT MAX(version) FROM schema_version",
	[JS_VERSION_SET] = "INSERT INTO schema_version (version, applied_ms) "
	    "VALUES (?, ?)",
	[JS_PING] = "SELECT 1",
	/*
	 * By a state other than scheduled: SQLite's jobs_state holds only
	 * those rows (schema version 6) and is used when the statement
	 * itself says so.  By scheduled: the window's floor bounds the ids
	 * read (jrnl_list_jobs).
	 */
	[JS_LIST + 0] = LIST_SQL(""),
	[JS_LIST + JRNL_LIST_BY_TOPIC] = LIST_SQL(" AND topic = ?"),
	[JS_LIST + JRNL_LIST_BY_STATE] = LIST_SQL(BY_STATE),
	[JS_LIST + JRNL_LIST_BY_TOPIC + JRNL_LIST_BY_STATE] =
	    LIST_SQL(" AND topic = ?" BY_STATE),
	[JS_LIST + JRNL_LIST_BY_BIZKEY] = LIST_SQL(" AND bizkey = ?"),
	[JS_LIST + JRNL_LIST_BY_TOPIC + JRNL_LIST_BY_BIZKEY] =
	    LIST_SQL(" AND topic = ? AND bizkey = ?"),
	[JS_LIST + JRNL_LIST_BY_STATE + JRNL_LIST_BY_BIZKEY] =
	    LIST_SQL(BY_STATE " AND bizkey = ?"),
	[JS_LIST + 7] = LIST_SQL(" AND topic = ?" BY_STATE " AND bizkey = ?"),
	[JS_LIST + JRNL_LIST_SCHEDULED] = LIST_SQL(BY_SCHEDULED),
	[JS_LIST + JRNL_LIST_SCHEDULED + JRNL_LIST_BY_TOPIC] =
	    LIST_SQL(BY_SCHEDULED " AND topic = ?"),
	[JS_LIST + JRNL_LIST_SCHEDULED + JRNL_LIST_BY_BIZKEY] =
	    LIST_SQL(BY_SCHEDULED " AND bizkey = ?"),
	[JS_LIST + JRNL_LIST_SCHEDULED + JRNL_LIST_BY_TOPIC +
	    JRNL_LIST_BY_BIZKEY] =
	    LIST_SQL(BY_SCHEDULED " AND topic = ? AND bizkey = ?"),
	/* The id W - 1 rows below the cursor: the floor of a window of W. */
	[JS_LIST_FLOOR] = "SELECT id FROM jobs WHERE tenant = ? AND id < ? "
	    "ORDER BY id DESC LIMIT 1 OFFSET ?",
	[JS_LIST_FLOOR + JRNL_LIST_BY_TOPIC] = "SELECT id FROM jobs "
	    "WHERE tenant = ? AND id < ? AND topic = ? "
	    "ORDER BY id DESC LIMIT 1 OFFSET ?",
};

/*
 * SQLite: upserts with ON CONFLICT; the cursor of the all-tenant scan as a
 * row value, which SQLite turns into an index range (?2 repeats ?1 for
 * MySQL's form and is not used here).
 */
static const char *const sqlite_sql[JS_COUNT] = {
	[JS_SCAN_ALL] = "SELECT " JOB_COLS " FROM jobs "
	    "WHERE finished_ms IS NULL AND (tenant, id) > (?1, ?3) "
	    "AND (?4 OR state <> 'dead') ORDER BY tenant, id LIMIT ?5",
	[JS_TENANT_UPSERT] = "INSERT INTO tenants (name, created_ms, "
	    "settings) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE "
	    "SET settings = excluded.settings",
	[JS_KEY_UPSERT] = "INSERT INTO api_keys (tenant, key_id, hash, "
	    "created_ms, revoked_ms) VALUES (?, ?, ?, ?, ?) "
	    "ON CONFLICT (tenant, key_id) DO UPDATE SET hash = excluded.hash, "
	    "revoked_ms = excluded.revoked_ms",
	[JS_TOPIC_UPSERT] = "INSERT INTO topics (tenant, name, config, "
	    "created_ms, updated_ms) VALUES (?, ?, ?, ?, ?) "
	    "ON CONFLICT (tenant, name) DO UPDATE SET config = "
	    "excluded.config, updated_ms = excluded.updated_ms",
	/*
	 * The header's user_version, set to the schema's version: SQLite
	 * writes the header page even when the value is the same (a row
	 * updated to what it held is not written at all), so the commit
	 * appends to the WAL and meets a full disk or a read-only file.
	 */
	[JS_WRITE_PROBE] = "PRAGMA user_version = "
	    JRNL_XSTR(JRNL_SCHEMA_VERSION),
};

/*
 * MySQL: ON DUPLICATE KEY UPDATE; the cursor as an OR of two ranges on the
 * same index, which the range optimiser merges.
 */
static const char *const mysql_sql[JS_COUNT] = {
	[JS_SCAN_ALL] = "SELECT " JOB_COLS " FROM jobs "
	    "WHERE finished_ms IS NULL AND (tenant > ? OR "
	    "(tenant = ? AND id > ?)) AND (? OR state <> 'dead') "
	    "ORDER BY tenant, id LIMIT ?",
	[JS_TENANT_UPSERT] = "INSERT INTO tenants (name, created_ms, "
	    "settings) VALUES (?, ?, ?) "
	    "ON DUPLICATE KEY UPDATE settings = VALUES(settings)",
	[JS_KEY_UPSERT] = "INSERT INTO api_keys (tenant, key_id, hash, "
	    "created_ms, revoked_ms) VALUES (?, ?, ?, ?, ?) "
	    "ON DUPLICATE KEY UPDATE hash = VALUES(hash), "
	    "revoked_ms = VALUES(revoked_ms)",
	[JS_TOPIC_UPSERT] = "INSERT INTO topics (tenant, name, config, "
	    "created_ms, updated_ms) VALUES (?, ?, ?, ?, ?) "
	    "ON DUPLICATE KEY UPDATE config = VALUES(config), "
	    "updated_ms = VALUES(updated_ms)",
	/*
	 * Refused by a server in read-only mode (a replica after a
	 * failover) like any write, though it changes nothing.  A full disk
	 * makes MariaDB wait for room rather than fail: the statement's
	 * timeout is what notices it.
	 */
	[JS_WRITE_PROBE] = "UPDATE schema_version SET applied_ms = applied_ms "
	    "WHERE version = " JRNL_XSTR(JRNL_SCHEMA_VERSION),
};

/* Version 0 -> 1: everything. */
static const char *const sqlite_v1[] = {
	"CREATE TABLE IF NOT EXISTS jobs ("
	    "tenant TEXT NOT NULL, id TEXT NOT NULL, topic TEXT NOT NULL, "
	    "bizkey TEXT, due_ms INTEGER NOT NULL, "
	    "priority INTEGER NOT NULL DEFAULT 0, body BLOB NOT NULL, "
	    "headers TEXT, schedule TEXT, ttr_ms INTEGER NOT NULL DEFAULT 0, "
	    "state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, "
	    "created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL, "
	    "finished_ms INTEGER, PRIMARY KEY (tenant, id))",
	"CREATE INDEX IF NOT EXISTS jobs_topic ON jobs (tenant, topic, id)",
	"CREATE INDEX IF NOT EXISTS jobs_state ON jobs (tenant, state, id)",
	"CREATE INDEX IF NOT EXISTS jobs_bizkey ON jobs (tenant, bizkey, id)",
	"CREATE INDEX IF NOT EXISTS jobs_open ON jobs "
	    "(finished_ms, tenant, id)",
	"CREATE TABLE IF NOT EXISTS transitions ("
	    "id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, "
	    "job_id TEXT NOT NULL, from_state TEXT, to_state TEXT NOT NULL, "
	    "at_ms INTEGER NOT NULL, instance TEXT NOT NULL DEFAULT '', "
	    "host TEXT NOT NULL DEFAULT '', shard INTEGER NOT NULL DEFAULT 0, "
	    "attempt INTEGER NOT NULL DEFAULT 0, "
	    "http_status INTEGER NOT NULL DEFAULT 0, "
	    "latency_ms INTEGER NOT NULL DEFAULT 0, error TEXT, excerpt BLOB)",
	"CREATE INDEX IF NOT EXISTS transitions_job ON transitions "
	    "(tenant, job_id, id)",
	"CREATE TABLE IF NOT EXISTS tenants (name TEXT NOT NULL PRIMARY KEY, "
	    "created_ms INTEGER NOT NULL, settings TEXT)",
	"CREATE TABLE IF NOT EXISTS api_keys (tenant TEXT NOT NULL, "
	    "key_id TEXT NOT NULL, hash TEXT NOT NULL, "
	    "created_ms INTEGER NOT NULL, revoked_ms INTEGER, "
	    "PRIMARY KEY (tenant, key_id))",
	"CREATE TABLE IF NOT EXISTS topics (tenant TEXT NOT NULL, "
	    "name TEXT NOT NULL, config TEXT NOT NULL, "
	    "created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL, "
	    "PRIMARY KEY (tenant, name))",
	NULL,
};

static const char *const mysql_v1[] = {
	"CREATE TABLE IF NOT EXISTS jobs ("
	    "tenant VARBINARY(64) NOT NULL, id VARBINARY(64) NOT NULL, "
	    "topic VARBINARY(128) NOT NULL, bizkey VARBINARY(255) NULL, "
	    "due_ms BIGINT NOT NULL, priority INT NOT NULL DEFAULT 0, "
	    "body LONGBLOB NOT NULL, headers MEDIUMBLOB NULL, "
	    "schedule BLOB NULL, ttr_ms BIGINT NOT NULL DEFAULT 0, "
	    "state VARBINARY(16) NOT NULL, attempts INT NOT NULL DEFAULT 0, "
	    "created_ms BIGINT NOT NULL, updated_ms BIGINT NOT NULL, "
	    "finished_ms BIGINT NULL, PRIMARY KEY (tenant, id), "
	    "KEY jobs_topic (tenant, topic, id), "
	    "KEY jobs_state (tenant, state, id), "
	    "KEY jobs_bizkey (tenant, bizkey, id), "
	    "KEY jobs_open (finished_ms, tenant, id)) ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS transitions ("
	    "id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
	    "tenant VARBINARY(64) NOT NULL, job_id VARBINARY(64) NOT NULL, "
	    "from_state VARBINARY(16) NULL, to_state VARBINARY(16) NOT NULL, "
	    "at_ms BIGINT NOT NULL, instance VARBINARY(255) NOT NULL, "
	    "host VARBINARY(255) NOT NULL, shard INT NOT NULL DEFAULT 0, "
	    "attempt INT NOT NULL DEFAULT 0, "
	    "http_status INT NOT NULL DEFAULT 0, "
	    "latency_ms BIGINT NOT NULL DEFAULT 0, error BLOB NULL, "
	    "excerpt BLOB NULL, "
	    "KEY transitions_job (tenant, job_id, id)) ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS tenants ("
	    "name VARBINARY(64) NOT NULL PRIMARY KEY, "
	    "created_ms BIGINT NOT NULL, settings MEDIUMBLOB NULL) "
	    "ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS api_keys ("
	    "tenant VARBINARY(64) NOT NULL, key_id VARBINARY(64) NOT NULL, "
	    "hash VARBINARY(64) NOT NULL, created_ms BIGINT NOT NULL, "
	    "revoked_ms BIGINT NULL, PRIMARY KEY (tenant, key_id)) "
	    "ENGINE=InnoDB",
	"CREATE TABLE IF NOT EXISTS topics ("
	    "tenant VARBINARY(64) NOT NULL, name VARBINARY(128) NOT NULL, "
	    "config MEDIUMBLOB NOT NULL, created_ms BIGINT NOT NULL, "
	    "updated_ms BIGINT NOT NULL, PRIMARY KEY (tenant, name)) "
	    "ENGINE=InnoDB",
	NULL,
};

/*
 * Version 1 -> 2: in SQLite the bizkey index holds only the jobs that have
 * a bizkey (most have none), so a job without one is a B-tree insert fewer
 * in every put; a listing by bizkey (bizkey = ?, which implies NOT NULL)
 * still uses it.  MySQL has no partial indexes: its step only records the
 * version.
 */
static const char *const sqlite_v2[] = {
	"DROP INDEX IF EXISTS jobs_bizkey",
	"CREATE INDEX IF NOT EXISTS jobs_bizkey ON jobs (tenant, bizkey, id) "
	    "WHERE bizkey IS NOT NULL",
	NULL,
};

/* A step with no statement: it only records the version (MySQL's 2, 3, 6). */
static const char *const version_only[] = {
	NULL,
};

/*
 * Version 2 -> 3: in SQLite the index on finished_ms holds only finished
 * jobs (the retention purge's finished_ms < ?, which implies NOT NULL), so
 * a put, whose job is never finished, is one B-tree insert fewer and a
 * group commit of 30 jobs about 3 of 17 pages fewer.  The restore scan
 * (finished_ms IS NULL, in (tenant, id) order) walks the primary key
 * instead: it reads the finished rows too, once, on the rare rebuild.
 * MySQL has no partial indexes: its step only records the version.
 */
static const char *const sqlite_v3[] = {
	"DROP INDEX IF EXISTS jobs_open",
	"CREATE INDEX IF NOT EXISTS jobs_done ON jobs (finished_ms) "
	    "WHERE finished_ms IS NOT NULL",
	NULL,
};

/*
 * Version 3 -> 4: jobs.put_id, the token of the put that wrote the row
 * (NULL: a put without one, or a row written before).  A push's put of a
 * client-given id carries one: it does not replace another put's
 * unfinished row, and the removal of a push Redis did not make (a void
 * transition) takes only the row its own put wrote.  Additive: an older
 * build still running ignores the column.  SQLite runs the step inside the
 * schema lock's transaction, so it is never half done; MariaDB's ADD
 * COLUMN IF NOT EXISTS makes it safe to run again.
 */
static const char *const sqlite_v4[] = {
	"ALTER TABLE jobs ADD COLUMN put_id INTEGER",
	NULL,
};

static const char *const mysql_v4[] = {
	"ALTER TABLE jobs ADD COLUMN IF NOT EXISTS put_id BIGINT NULL",
	NULL,
};

/*
 * Version 4 -> 5: jobs.version, the number of journaled changes Redis had
 * made to the job when its row was last moved (0: none yet, or a row
 * written before).  A transition carries the job's version after it and
 * moves the row only when that is higher: instances' clocks differ, so
 * the time a transition was made cannot order two of them, and a late one
 * must not move a job back.  Additive, NOT NULL DEFAULT 0: the rows
 * written before get 0, so the first transition of each (version 1 or
 * more) still moves it; an older build still running ignores the column.
 */
static const char *const sqlite_v5[] = {
	"ALTER TABLE jobs ADD COLUMN version INTEGER NOT NULL DEFAULT 0",
	NULL,
};

static const char *const mysql_v5[] = {
	"ALTER TABLE jobs ADD COLUMN IF NOT EXISTS version BIGINT NOT NULL "
	    "DEFAULT 0",
	NULL,
};

/*
 * Version 5 -> 6: in SQLite the state index holds only the jobs past
 * scheduled, so a put, whose job is scheduled, is one B-tree insert fewer,
 * and a job's first transition adds its entry instead of moving it.  A
 * listing by another state still uses the index (its statements say
 * state <> 'scheduled'); a listing by scheduled walks the primary key or
 * jobs_topic a window at a time (jrnl_list_jobs).  MySQL has no partial
 * indexes: its step only records the version.
 */
static const char *const sqlite_v6[] = {
	"DROP INDEX IF EXISTS jobs_state",
	"CREATE INDEX IF NOT EXISTS jobs_state ON jobs (tenant, state, id) "
	    "WHERE state <> 'scheduled'",
	NULL,
};

/* migrations[v] takes a database from version v to v + 1. */
static const char *const *const sqlite_migrations[JRNL_SCHEMA_VERSION] = {
	sqlite_v1,
	sqlite_v2,
	sqlite_v3,
	sqlite_v4,
	sqlite_v5,
	sqlite_v6,
};
static const char *const *const mysql_migrations[JRNL_SCHEMA_VERSION] = {
	mysql_v1,
	version_only,
	version_only,
	mysql_v4,
	mysql_v5,
	version_only,
};

static const char sqlite_version_table[] =
	"CREATE TABLE IF NOT EXISTS schema_version ("
	"version INTEGER NOT NULL, applied_ms INTEGER NOT NULL)";
static const char mysql_version_table[] =
	"CREATE TABLE IF NOT EXISTS schema_version ("
	"version INT NOT NULL, applied_ms BIGINT NOT NULL) ENGINE=InnoDB";

/*
 * The multi-row statements (JS_PUT_MANY + k: an upsert of 2^k jobs;
 * JS_TRANS_MANY + k: an insert of 2^k transitions; JS_PUT_ID_MANY + k: the
 * put_id of 2^k rows by (tenant, id); JS_GET_MANY + k: 2^k jobs' rows by
 * (tenant, id)), written out once, on first use, for
 * both dialects.
 */
#define MANY_SQL_MAX	4096
#define MANY_FORMS	4

#define PUT_ID_SELECT	"SELECT tenant, id, put_id FROM jobs WHERE "
#define PUT_ID_ROW	"(tenant = ? AND id = ?)"
#define GET_SELECT	"SELECT " JOB_COLS " FROM jobs WHERE "

/* tail: SQLite's, MySQL's. */
static const struct {
	const char	*head, *row, *sep, *tail[2];
} many_form[MANY_FORMS] = {
	{ JOB_INSERT, JOB_ROW, ", ", { SQLITE_UPSERT, MYSQL_UPSERT } },
	{ TRANS_INSERT, TRANS_ROW, ", ", { "", "" } },
	{ PUT_ID_SELECT, PUT_ID_ROW, " OR ", { "", "" } },
	{ GET_SELECT, PUT_ID_ROW, " OR ", { "", "" } },
};

/* A statement has one tail, its dialect's: room for the longer. */
#define UPSERT_MAX	(sizeof(SQLITE_UPSERT) > sizeof(MYSQL_UPSERT) ? \
	sizeof(SQLITE_UPSERT) : sizeof(MYSQL_UPSERT))

_Static_assert(sizeof(JOB_INSERT) + JRNL_PUT_ROWS_MAX * (sizeof(JOB_ROW) +
    2) + UPSERT_MAX < MANY_SQL_MAX &&
    sizeof(TRANS_INSERT) + JRNL_PUT_ROWS_MAX * (sizeof(TRANS_ROW) + 2) <
    MANY_SQL_MAX &&
    sizeof(PUT_ID_SELECT) + JRNL_PUT_ROWS_MAX * (sizeof(PUT_ID_ROW) + 4) <
    MANY_SQL_MAX &&
    sizeof(GET_SELECT) + JRNL_PUT_ROWS_MAX * (sizeof(PUT_ID_ROW) + 4) <
    MANY_SQL_MAX, "MANY_SQL_MAX too small for the multi-row statements");
_Static_assert(JRNL_TRANS_COLS <= JRNL_JOB_COLS,
    "JRNL_ARGS_MAX counts job rows");

static char many_sql[MANY_FORMS][2][JRNL_PUT_SIZES][MANY_SQL_MAX];
static pthread_once_t many_sql_once = PTHREAD_ONCE_INIT;

static void
many_sql_build(void)
{
	size_t f, d, k, r, off;
	char *s;

	for (f = 0; f < MANY_FORMS; f++)
		for (d = 0; d < 2; d++)
			for (k = 0; k < JRNL_PUT_SIZES; k++) {
				s = many_sql[f][d][k];
				off = (size_t)snprintf(s, MANY_SQL_MAX, "%s",
				    many_form[f].head);
				for (r = 0; r < (size_t)1 << k; r++)
					off += (size_t)snprintf(s + off,
					    MANY_SQL_MAX - off, "%s%s",
					    r > 0 ? many_form[f].sep : "",
					    many_form[f].row);
				snprintf(s + off, MANY_SQL_MAX - off, "%s",
				    many_form[f].tail[d]);
			}
}

int
jrnl_many_size(size_t left)
{
	int k = JRNL_PUT_SIZES - 1;

	while (((size_t)1 << k) > left)
		k--;
	return k;
}

const char *
jrnl_sql(enum jrnl_kind kind, int id)
{
	const char *s;

	if (id < 0 || id >= JS_COUNT)
		return NULL;
	if (id >= JS_PUT_MANY) {
		id -= JS_PUT_MANY;
		pthread_once(&many_sql_once, many_sql_build);
		return many_sql[id / JRNL_PUT_SIZES][kind == JRNL_KIND_MYSQL]
		    [id % JRNL_PUT_SIZES];
	}
	s = kind == JRNL_KIND_MYSQL ? mysql_sql[id] : sqlite_sql[id];
	return s != NULL ? s : common_sql[id];
}

struct jrnl_val
jrnl_vint(int64_t i)
{
	struct jrnl_val v = { .type = JRNL_V_INT, .i = i };

	return v;
}

struct jrnl_val
jrnl_vtext(const char *s)
{
	struct jrnl_val v = { .type = JRNL_V_NULL };

	if (s != NULL) {
		v.type = JRNL_V_TEXT;
		v.p = s;
		v.len = strlen(s);
	}
	return v;
}

struct jrnl_val
jrnl_vblob(const char *p, size_t len)
{
	struct jrnl_val v = { .type = JRNL_V_NULL };

	if (p != NULL) {
		v.type = JRNL_V_BLOB;
		v.p = p;
		v.len = len;
	}
	return v;
}

enum jrnl_err
jrnl_run(const struct jrnl_driver *d, struct jrnl_conn *c, int id,
    const struct jrnl_val *args, size_t nargs, jrnl_row_fn fn, void *arg,
    int64_t *changes)
{
	if (jrnl_test_unavailable())
		return JRNL_EUNAVAIL;
	return d->run(c, id, jrnl_sql(d->kind, id), args, nargs, fn, arg,
	    changes);
}

static int
version_row(const struct jrnl_val *cols, size_t ncols, void *arg)
{
	int64_t *v = arg;

	if (ncols >= 1 && cols[0].type == JRNL_V_INT)
		*v = cols[0].i;
	return 0;
}

enum jrnl_err
jrnl_schema_ensure(const struct jrnl_driver *d, struct jrnl_conn *c,
    char *why, size_t whylen)
{
	const char *const *const *steps;
	const char *const *ddl;
	struct jrnl_val args[2];
	int64_t version = 0;
	enum jrnl_err e;
	int ok = 0;

	steps = d->kind == JRNL_KIND_MYSQL ? mysql_migrations :
	    sqlite_migrations;
	if ((e = d->lock_schema(c)) != JRNL_OK) {
		snprintf(why, whylen, "journal schema lock: %s", d->errmsg(c));
		return e;
	}
	e = d->exec(c, d->kind == JRNL_KIND_MYSQL ? mysql_version_table :
	    sqlite_version_table);
	if (e != JRNL_OK)
		goto fail;
	e = jrnl_run(d, c, JS_VERSION_GET, NULL, 0, version_row, &version,
	    NULL);
	if (e != JRNL_OK)
		goto fail;
	if (version > JRNL_SCHEMA_VERSION) {
		snprintf(why, whylen, "journal schema version %lld is newer "
		    "than this retryd supports (%d): upgrade retryd",
		    (long long)version, JRNL_SCHEMA_VERSION);
		e = JRNL_ESCHEMA;
		goto out;
	}
	if (version < 0) {
		snprintf(why, whylen, "journal schema version %lld is invalid",
		    (long long)version);
		e = JRNL_ESCHEMA;
		goto out;
	}
	for (; version < JRNL_SCHEMA_VERSION; version++) {
		for (ddl = steps[version]; *ddl != NULL; ddl++)
			if ((e = d->exec(c, *ddl)) != JRNL_OK)
				goto fail;
		args[0] = jrnl_vint(version + 1);
		args[1] = jrnl_vint(clock_wall_ms());
		e = jrnl_run(d, c, JS_VERSION_SET, args, 2, NULL, NULL, NULL);
		if (e != JRNL_OK)
			goto fail;
	}
	ok = 1;
	goto out;
fail:
	snprintf(why, whylen, "journal schema: %s", d->errmsg(c));
	if (e != JRNL_EUNAVAIL)
		e = JRNL_ESCHEMA;
out:
	d->unlock_schema(c, ok);
	return e;
}

static int	jrnl_fault;

void
jrnl_test_set_unavailable(int on)
{
	__atomic_store_n(&jrnl_fault, on, __ATOMIC_RELEASE);
}

int
jrnl_test_unavailable(void)
{
	return __atomic_load_n(&jrnl_fault, __ATOMIC_ACQUIRE);
}

enum jrnl_err
jrnl_connect(const struct jrnl_driver *d, const struct jrnl_url *u,
    int64_t timeout_ms, int durable, struct jrnl_conn **out, char *why,
    size_t whylen)
{
	if (jrnl_test_unavailable()) {
		snprintf(why, whylen, "%s: unavailable (test hook)", d->name);
		return JRNL_EUNAVAIL;
	}
	return d->connect(u, timeout_ms, durable, out, why, whylen);
}

/*
 * A database that answers but takes no write (a full disk, a read-only
 * file or server) is not a reachable one: without the probe the writer
 * would connect again after every failed commit, each time "reachable",
 * and /readyz would say ready between the failures.
 */
enum jrnl_err
jrnl_connect_writer(const struct jrnl_driver *d, const struct jrnl_url *u,
    int64_t timeout_ms, int durable, struct jrnl_conn **out, char *why,
    size_t whylen)
{
	struct jrnl_conn *c = NULL;
	enum jrnl_err e;

	*out = NULL;
	if ((e = jrnl_connect(d, u, timeout_ms, durable, &c, why,
	    whylen)) != JRNL_OK)
		return e;
	if ((e = jrnl_schema_ensure(d, c, why, whylen)) == JRNL_OK &&
	    jrnl_run(d, c, JS_WRITE_PROBE, NULL, 0, NULL, NULL, NULL) !=
	    JRNL_OK) {
		snprintf(why, whylen, "cannot write: %s", d->errmsg(c));
		e = JRNL_EUNAVAIL;
	}
	if (e != JRNL_OK) {
		d->close(c);
		return e;
	}
	*out = c;
	return JRNL_OK;
}
