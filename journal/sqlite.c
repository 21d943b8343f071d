/*
 * sqlite.c - the SQLite journal driver, the embedded default.
 *
 * Key decision: WAL mode, with synchronous=FULL when the journal runs in
 * SYNC mode and NORMAL otherwise.  WAL+NORMAL survives a crash of retryd
 * (the WAL is in the page cache) but a power loss or kernel crash may take
 * the last commits with it; SYNC mode promises that an accepted job is on
 * disk, so it pays one fsync per commit, and group commit shares that fsync
 * among every put waiting.  Writes begin IMMEDIATE so two connections never
 * deadlock upgrading a read lock; busy_timeout makes a locked database wait
 * rather than fail at once.  A connection is used by one thread at a time
 * (the journal guarantees it), so it is opened NOMUTEX.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sqlite3.h>

#include "journal/internal.h"
#include "util/xmalloc.h"

struct jrnl_conn {
	sqlite3		*db;
	sqlite3_stmt	*stmts[JS_COUNT];
	char		 err[256];
};

static enum jrnl_err
classify(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
	case SQLITE_IOERR:
	case SQLITE_FULL:
	case SQLITE_CANTOPEN:
	case SQLITE_READONLY:
	case SQLITE_PROTOCOL:
	case SQLITE_NOMEM:
	case SQLITE_NOTADB:
	case SQLITE_CORRUPT:
		return JRNL_EUNAVAIL;
	default:
		return JRNL_EINTERNAL;
	}
}

static enum jrnl_err
set_err(struct jrnl_conn *c, int rc, const char *what)
{
	snprintf(c->err, sizeof(c->err), "%s: %s (%d)", what,
	    c->db != NULL ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc), rc);
	return classify(rc);
}

static void
sq_close(struct jrnl_conn *c)
{
	size_t i;

	if (c == NULL)
		return;
	for (i = 0; i < JS_COUNT; i++)
		sqlite3_finalize(c->stmts[i]);
	sqlite3_close_v2(c->db);
	free(c);
}

static enum jrnl_err
sq_exec(struct jrnl_conn *c, const char *sql)
{
	int rc;

	rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return set_err(c, rc, "exec");
	return JRNL_OK;
}

static int
wal_row(void *arg, int ncols, char **vals, char **names)
{
	int *is_wal = arg;

	(void)names;
	*is_wal = ncols >= 1 && vals[0] != NULL &&
	    sqlite3_stricmp(vals[0], "wal") == 0;
	return 0;
}

static enum jrnl_err
sq_connect(const struct jrnl_url *u, int64_t timeout_ms, int durable,
    struct jrnl_conn **out, char *why, size_t whylen)
{
	struct jrnl_conn *c = xcalloc(1, sizeof(*c));
	enum jrnl_err e = JRNL_EUNAVAIL;
	int rc, is_wal = 0;

	rc = sqlite3_open_v2(u->path, &c->db, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		snprintf(why, whylen, "sqlite %s: %s", u->path,
		    c->db != NULL ? sqlite3_errmsg(c->db) :
		    sqlite3_errstr(rc));
		goto out;
	}
	sqlite3_extended_result_codes(c->db, 1);
	sqlite3_busy_timeout(c->db, timeout_ms > 0 && timeout_ms < 1 << 30 ?
	    (int)timeout_ms : 2000);
	rc = sqlite3_exec(c->db, "PRAGMA journal_mode=WAL", wal_row, &is_wal,
	    NULL);
	if (rc == SQLITE_OK && !is_wal) {
		snprintf(why, whylen, "sqlite %s: cannot use WAL mode here",
		    u->path);
		goto out;
	}
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(c->db, durable ? "PRAGMA synchronous=FULL" :
		    "PRAGMA synchronous=NORMAL", NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(c->db, "SELECT count(*) FROM sqlite_master",
		    NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		snprintf(why, whylen, "sqlite %s: %s", u->path,
		    sqlite3_errmsg(c->db));
		e = classify(rc);
		goto out;
	}
	*out = c;
	c = NULL;
	e = JRNL_OK;
out:
	sq_close(c);
	return e;
}

static enum jrnl_err
bind_args(struct jrnl_conn *c, sqlite3_stmt *st, const struct jrnl_val *args,
    size_t nargs)
{
	size_t i;
	int rc = SQLITE_OK, idx;

	if ((size_t)sqlite3_bind_parameter_count(st) < nargs) {
		snprintf(c->err, sizeof(c->err), "statement takes %d "
		    "parameters, not %zu", sqlite3_bind_parameter_count(st),
		    nargs);
		return JRNL_EINTERNAL;
	}
	for (i = 0; i < nargs && rc == SQLITE_OK; i++) {
		idx = (int)i + 1;
		switch (args[i].type) {
		case JRNL_V_NULL:
			rc = sqlite3_bind_null(st, idx);
			break;
		case JRNL_V_INT:
			rc = sqlite3_bind_int64(st, idx, args[i].i);
			break;
		case JRNL_V_TEXT:
			rc = sqlite3_bind_text64(st, idx, args[i].p,
			    args[i].len, SQLITE_STATIC, SQLITE_UTF8);
			break;
		case JRNL_V_BLOB:
			if (args[i].len == 0)
				rc = sqlite3_bind_zeroblob(st, idx, 0);
			else
				rc = sqlite3_bind_blob64(st, idx, args[i].p,
				    args[i].len, SQLITE_STATIC);
			break;
		}
	}
	if (rc != SQLITE_OK)
		return set_err(c, rc, "bind");
	return JRNL_OK;
}

static void
read_row(sqlite3_stmt *st, struct jrnl_val *cols, size_t ncols)
{
	size_t i;
	int k;

	for (i = 0; i < ncols; i++) {
		k = (int)i;
		memset(&cols[i], 0, sizeof(cols[i]));
		switch (sqlite3_column_type(st, k)) {
		case SQLITE_INTEGER:
		case SQLITE_FLOAT:
			cols[i].type = JRNL_V_INT;
			cols[i].i = sqlite3_column_int64(st, k);
			break;
		case SQLITE_TEXT:
			cols[i].type = JRNL_V_TEXT;
			cols[i].p = (const char *)sqlite3_column_text(st, k);
			cols[i].len = (size_t)sqlite3_column_bytes(st, k);
			break;
		case SQLITE_BLOB:
			cols[i].type = JRNL_V_BLOB;
			cols[i].p = sqlite3_column_blob(st, k);
			cols[i].len = (size_t)sqlite3_column_bytes(st, k);
			if (cols[i].p == NULL)
				cols[i].p = "";
			break;
		default:
			cols[i].type = JRNL_V_NULL;
			break;
		}
	}
}

static enum jrnl_err
sq_run(struct jrnl_conn *c, int id, const char *sql,
    const struct jrnl_val *args, size_t nargs, jrnl_row_fn fn, void *arg,
    int64_t *changes)
{
	struct jrnl_val cols[JRNL_ROW_COLS_MAX];
	sqlite3_stmt *st;
	enum jrnl_err e;
	size_t ncols;
	int rc;

	if (id < 0 || id >= JS_COUNT || sql == NULL) {
		snprintf(c->err, sizeof(c->err), "no statement %d", id);
		return JRNL_EINTERNAL;
	}
	if ((st = c->stmts[id]) == NULL) {
		rc = sqlite3_prepare_v3(c->db, sql, -1,
		    SQLITE_PREPARE_PERSISTENT, &st, NULL);
		if (rc != SQLITE_OK)
			return set_err(c, rc, "prepare");
		c->stmts[id] = st;
	}
	if ((e = bind_args(c, st, args, nargs)) != JRNL_OK)
		goto out;
	ncols = (size_t)sqlite3_column_count(st);
	if (ncols > JRNL_ROW_COLS_MAX) {
		snprintf(c->err, sizeof(c->err), "too many columns");
		e = JRNL_EINTERNAL;
		goto out;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (fn == NULL)
			continue;
		read_row(st, cols, ncols);
		if (fn(cols, ncols, arg) != 0) {
			rc = SQLITE_DONE;
			break;
		}
	}
	if (rc != SQLITE_DONE) {
		e = set_err(c, rc, "step");
		goto out;
	}
	if (changes != NULL)
		*changes = sqlite3_changes64(c->db);
	e = JRNL_OK;
out:
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return e;
}

/*
 * The file at the database's path is not the one open (removed, or
 * replaced, while open): what is written here would go to a file nobody
 * finds again, so every transaction asks first, a stat(2).  When it moved,
 * the error (sq_errmsg) says so.
 */
static int
sq_moved(struct jrnl_conn *c)
{
	int moved = 0;

	if (sqlite3_file_control(c->db, "main", SQLITE_FCNTL_HAS_MOVED,
	    &moved) != SQLITE_OK || !moved)
		return 0;
	snprintf(c->err, sizeof(c->err), "the database file was removed or "
	    "replaced while open");
	return 1;
}

static enum jrnl_err
sq_begin(struct jrnl_conn *c)
{
	if (sq_moved(c))
		return JRNL_EUNAVAIL;
	return sq_exec(c, "BEGIN IMMEDIATE");
}

static void
sq_rollback(struct jrnl_conn *c)
{
	if (!sqlite3_get_autocommit(c->db))
		(void)sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
}

static enum jrnl_err
sq_commit(struct jrnl_conn *c)
{
	enum jrnl_err e;

	if ((e = sq_exec(c, "COMMIT")) != JRNL_OK)
		sq_rollback(c);
	return e;
}

static enum jrnl_err
sq_lock_schema(struct jrnl_conn *c)
{
	return sq_begin(c);
}

static void
sq_unlock_schema(struct jrnl_conn *c, int ok)
{
	if (!ok || sq_commit(c) != JRNL_OK)
		sq_rollback(c);
}

static const char *
sq_errmsg(struct jrnl_conn *c)
{
	return c->err;
}

const struct jrnl_driver jrnl_sqlite_driver = {
	.name = "sqlite",
	.kind = JRNL_KIND_SQLITE,
	.connect = sq_connect,
	.close = sq_close,
	.exec = sq_exec,
	.run = sq_run,
	.begin = sq_begin,
	.commit = sq_commit,
	.rollback = sq_rollback,
	.lock_schema = sq_lock_schema,
	.unlock_schema = sq_unlock_schema,
	.errmsg = sq_errmsg,
	.moved = sq_moved,
};
