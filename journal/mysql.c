/*
 * mysql.c - the MySQL/MariaDB journal driver, through libmariadb.
 *
 * Key decision: every statement is a server-side prepared statement, cached
 * per connection, and results are stored client-side first
 * (mysql_stmt_store_result with STMT_ATTR_UPDATE_MAX_LENGTH) so each
 * variable-length column gets a buffer of exactly its longest value: no
 * truncation, no second fetch.  Errors are sorted in two: the connection or
 * the server is in trouble (client errors CR_*, deadlock, lock wait,
 * shutdown, read-only after a failover, disk full) is JRNL_EUNAVAIL, upon
 * which the journal drops the connection and reconnects with backoff;
 * anything else is a refusal of this statement (JRNL_EINTERNAL).  The
 * library never reconnects by itself (a silent reconnect would lose the
 * open transaction).  Sessions run STRICT (no silent truncation) at READ
 * COMMITTED (no gap locks between the writer and the purge).
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errmsg.h>
#include <mysql.h>
#include <mysqld_error.h>

#include "journal/internal.h"
#include "util/xmalloc.h"

#define MY_MAX_ARGS	JRNL_ARGS_MAX
#define MY_SCHEMA_LOCK	"retryd_journal_schema"

struct jrnl_conn {
	MYSQL		*my;
	MYSQL_STMT	*stmts[JS_COUNT];
	char		 err[512];
	MYSQL_BIND	 bind[MY_MAX_ARGS];	/* my_run()'s parameters */
	int64_t		 ints[MY_MAX_ARGS];
};

static pthread_once_t	my_once = PTHREAD_ONCE_INIT;
static int		my_init_failed;

static void
my_library_init(void)
{
	my_init_failed = mysql_library_init(0, NULL, NULL) != 0;
}

static enum jrnl_err
classify(unsigned int code)
{
	if (code >= CR_MIN_ERROR && code <= CR_MAX_ERROR)
		return JRNL_EUNAVAIL;
	switch (code) {
	case ER_LOCK_DEADLOCK:
	case ER_LOCK_WAIT_TIMEOUT:
	case ER_SERVER_SHUTDOWN:
	case ER_CON_COUNT_ERROR:
	case ER_OPTION_PREVENTS_STATEMENT:
	case ER_QUERY_INTERRUPTED:
	case ER_CONNECTION_KILLED:
	case ER_DISK_FULL:
	case ER_RECORD_FILE_FULL:
	case ER_OUT_OF_RESOURCES:
	case ER_OUTOFMEMORY:
	case ER_ACCESS_DENIED_ERROR:
	case ER_DBACCESS_DENIED_ERROR:
	case ER_READ_ONLY_MODE:
	case ER_UNKNOWN_COM_ERROR:
		return JRNL_EUNAVAIL;
	default:
		return JRNL_EINTERNAL;
	}
}

static enum jrnl_err
conn_err(struct jrnl_conn *c, const char *what)
{
	unsigned int code = mysql_errno(c->my);

	snprintf(c->err, sizeof(c->err), "%s: %s (%u)", what,
	    mysql_error(c->my), code);
	return classify(code);
}

static enum jrnl_err
stmt_err(struct jrnl_conn *c, MYSQL_STMT *st, const char *what)
{
	unsigned int code = mysql_stmt_errno(st);

	snprintf(c->err, sizeof(c->err), "%s: %s (%u)", what,
	    mysql_stmt_error(st), code);
	return classify(code);
}

static void
my_close(struct jrnl_conn *c)
{
	size_t i;

	if (c == NULL)
		return;
	for (i = 0; i < JS_COUNT; i++)
		if (c->stmts[i] != NULL)
			mysql_stmt_close(c->stmts[i]);
	if (c->my != NULL)
		mysql_close(c->my);
	free(c);
}

/* A statement whose result, if any, is read and thrown away. */
static enum jrnl_err
my_exec(struct jrnl_conn *c, const char *sql)
{
	MYSQL_RES *res;

	if (mysql_real_query(c->my, sql, strlen(sql)) != 0)
		return conn_err(c, "query");
	do {
		res = mysql_store_result(c->my);
		if (res != NULL)
			mysql_free_result(res);
		else if (mysql_field_count(c->my) != 0)
			return conn_err(c, "result");
	} while (mysql_next_result(c->my) == 0);
	if (mysql_errno(c->my) != 0)
		return conn_err(c, "query");
	return JRNL_OK;
}

static enum jrnl_err
my_connect(const struct jrnl_url *u, int64_t timeout_ms, int durable,
    struct jrnl_conn **out, char *why, size_t whylen)
{
	struct jrnl_conn *c = NULL;
	unsigned int secs, io_secs, proto;
	enum jrnl_err e = JRNL_EUNAVAIL;
	my_bool no = 0;

	(void)durable;	/* the server's innodb_flush_log_at_trx_commit */
	pthread_once(&my_once, my_library_init);
	if (my_init_failed) {
		snprintf(why, whylen, "mysql: library initialisation failed");
		goto out;
	}
	c = xcalloc(1, sizeof(*c));
	if ((c->my = mysql_init(NULL)) == NULL) {
		snprintf(why, whylen, "mysql: out of memory");
		goto out;
	}
	secs = timeout_ms <= 0 ? 2 : (unsigned int)((timeout_ms + 999) / 1000);
	if (secs > 3600)
		secs = 3600;
	io_secs = secs * 5;
	mysql_options(c->my, MYSQL_OPT_CONNECT_TIMEOUT, &secs);
	mysql_options(c->my, MYSQL_OPT_READ_TIMEOUT, &io_secs);
	mysql_options(c->my, MYSQL_OPT_WRITE_TIMEOUT, &io_secs);
	mysql_options(c->my, MYSQL_OPT_RECONNECT, &no);
	mysql_options(c->my, MYSQL_SET_CHARSET_NAME, "utf8mb4");
	if (u->socket != NULL) {
		proto = MYSQL_PROTOCOL_SOCKET;
		mysql_options(c->my, MYSQL_OPT_PROTOCOL, &proto);
	}
	if (mysql_real_connect(c->my, u->host, u->user, u->pass, u->db,
	    u->port, u->socket, CLIENT_FOUND_ROWS) == NULL) {
		snprintf(why, whylen, "mysql %s: %s",
		    u->socket != NULL ? u->socket : u->host,
		    mysql_error(c->my));
		e = classify(mysql_errno(c->my));
		if (e != JRNL_EUNAVAIL && mysql_errno(c->my) ==
		    ER_BAD_DB_ERROR)
			e = JRNL_EUNAVAIL;
		goto out;
	}
	if ((e = my_exec(c, "SET SESSION sql_mode = "
	    "'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'")) != JRNL_OK ||
	    (e = my_exec(c, "SET SESSION TRANSACTION ISOLATION LEVEL "
	    "READ COMMITTED")) != JRNL_OK) {
		snprintf(why, whylen, "mysql session: %s", c->err);
		goto out;
	}
	*out = c;
	c = NULL;
	e = JRNL_OK;
out:
	my_close(c);
	return e;
}

static int
is_int_type(enum enum_field_types t)
{
	switch (t) {
	case MYSQL_TYPE_TINY:
	case MYSQL_TYPE_SHORT:
	case MYSQL_TYPE_LONG:
	case MYSQL_TYPE_INT24:
	case MYSQL_TYPE_LONGLONG:
	case MYSQL_TYPE_YEAR:
		return 1;
	default:
		return 0;
	}
}

struct my_result {
	MYSQL_BIND	 bind[JRNL_ROW_COLS_MAX];
	int64_t		 ints[JRNL_ROW_COLS_MAX];
	unsigned long	 lens[JRNL_ROW_COLS_MAX];
	my_bool		 nulls[JRNL_ROW_COLS_MAX];
	char		*bufs[JRNL_ROW_COLS_MAX];
	size_t		 ncols;
};

static enum jrnl_err
fetch_rows(struct jrnl_conn *c, MYSQL_STMT *st, jrnl_row_fn fn, void *arg)
{
	struct jrnl_val cols[JRNL_ROW_COLS_MAX];
	struct my_result r;
	MYSQL_RES *meta = NULL;
	MYSQL_FIELD *f;
	enum jrnl_err e = JRNL_OK;
	size_t i;
	int rc;

	memset(&r, 0, sizeof(r));
	if (mysql_stmt_store_result(st) != 0)
		return stmt_err(c, st, "store");
	if ((meta = mysql_stmt_result_metadata(st)) == NULL) {
		e = stmt_err(c, st, "metadata");
		goto out;
	}
	r.ncols = mysql_num_fields(meta);
	if (r.ncols > JRNL_ROW_COLS_MAX) {
		snprintf(c->err, sizeof(c->err), "too many columns");
		e = JRNL_EINTERNAL;
		goto out;
	}
	f = mysql_fetch_fields(meta);
	for (i = 0; i < r.ncols; i++) {
		r.bind[i].is_null = &r.nulls[i];
		r.bind[i].length = &r.lens[i];
		if (is_int_type(f[i].type)) {
			r.bind[i].buffer_type = MYSQL_TYPE_LONGLONG;
			r.bind[i].buffer = &r.ints[i];
		} else {
			r.bufs[i] = xmalloc(f[i].max_length + 1);
			r.bind[i].buffer_type = MYSQL_TYPE_BLOB;
			r.bind[i].buffer = r.bufs[i];
			r.bind[i].buffer_length = f[i].max_length + 1;
		}
	}
	if (mysql_stmt_bind_result(st, r.bind) != 0) {
		e = stmt_err(c, st, "bind result");
		goto out;
	}
	while ((rc = mysql_stmt_fetch(st)) == 0 || rc == MYSQL_DATA_TRUNCATED) {
		if (rc == MYSQL_DATA_TRUNCATED) {
			snprintf(c->err, sizeof(c->err), "column truncated");
			e = JRNL_EINTERNAL;
			goto out;
		}
		for (i = 0; i < r.ncols; i++) {
			memset(&cols[i], 0, sizeof(cols[i]));
			if (r.nulls[i]) {
				cols[i].type = JRNL_V_NULL;
			} else if (r.bufs[i] == NULL) {
				cols[i].type = JRNL_V_INT;
				cols[i].i = r.ints[i];
			} else {
				cols[i].type = JRNL_V_BLOB;
				cols[i].p = r.bufs[i];
				cols[i].len = r.lens[i];
			}
		}
		if (fn != NULL && fn(cols, r.ncols, arg) != 0)
			goto out;
	}
	if (rc != MYSQL_NO_DATA)
		e = stmt_err(c, st, "fetch");
out:
	mysql_stmt_free_result(st);
	if (meta != NULL)
		mysql_free_result(meta);
	for (i = 0; i < JRNL_ROW_COLS_MAX; i++)
		free(r.bufs[i]);
	return e;
}

static enum jrnl_err
my_run(struct jrnl_conn *c, int id, const char *sql,
    const struct jrnl_val *args, size_t nargs, jrnl_row_fn fn, void *arg,
    int64_t *changes)
{
	MYSQL_BIND *bind = c->bind;
	int64_t *ints = c->ints;
	MYSQL_STMT *st;
	my_bool yes = 1;
	size_t i;

	if (id < 0 || id >= JS_COUNT || sql == NULL || nargs > MY_MAX_ARGS) {
		snprintf(c->err, sizeof(c->err), "no statement %d", id);
		return JRNL_EINTERNAL;
	}
	if ((st = c->stmts[id]) == NULL) {
		if ((st = mysql_stmt_init(c->my)) == NULL)
			return conn_err(c, "stmt init");
		if (mysql_stmt_prepare(st, sql, strlen(sql)) != 0) {
			enum jrnl_err e = stmt_err(c, st, "prepare");

			mysql_stmt_close(st);
			return e;
		}
		mysql_stmt_attr_set(st, STMT_ATTR_UPDATE_MAX_LENGTH, &yes);
		c->stmts[id] = st;
	}
	if (mysql_stmt_param_count(st) != nargs) {
		snprintf(c->err, sizeof(c->err), "statement %d takes %lu "
		    "parameters, not %zu", id, mysql_stmt_param_count(st),
		    nargs);
		return JRNL_EINTERNAL;
	}
	memset(bind, 0, nargs * sizeof(*bind));
	for (i = 0; i < nargs; i++) {
		switch (args[i].type) {
		case JRNL_V_NULL:
			bind[i].buffer_type = MYSQL_TYPE_NULL;
			break;
		case JRNL_V_INT:
			ints[i] = args[i].i;
			bind[i].buffer_type = MYSQL_TYPE_LONGLONG;
			bind[i].buffer = &ints[i];
			break;
		case JRNL_V_TEXT:
		case JRNL_V_BLOB:
			bind[i].buffer_type = args[i].type == JRNL_V_TEXT ?
			    MYSQL_TYPE_STRING : MYSQL_TYPE_BLOB;
			bind[i].buffer = (void *)(uintptr_t)args[i].p;
			bind[i].buffer_length = (unsigned long)args[i].len;
			break;
		}
	}
	if (nargs > 0 && mysql_stmt_bind_param(st, bind) != 0)
		return stmt_err(c, st, "bind");
	if (mysql_stmt_execute(st) != 0)
		return stmt_err(c, st, "execute");
	if (mysql_stmt_field_count(st) > 0)
		return fetch_rows(c, st, fn, arg);
	if (changes != NULL)
		*changes = (int64_t)mysql_stmt_affected_rows(st);
	return JRNL_OK;
}

static enum jrnl_err
my_begin(struct jrnl_conn *c)
{
	return my_exec(c, "START TRANSACTION");
}

static void
my_rollback(struct jrnl_conn *c)
{
	(void)mysql_rollback(c->my);
}

static enum jrnl_err
my_commit(struct jrnl_conn *c)
{
	enum jrnl_err e;

	if (mysql_commit(c->my) == 0)
		return JRNL_OK;
	e = conn_err(c, "commit");
	my_rollback(c);
	return e;
}

static enum jrnl_err
my_lock_schema(struct jrnl_conn *c)
{
	MYSQL_RES *res;
	MYSQL_ROW row;
	int got = 0;

	if (mysql_query(c->my, "SELECT GET_LOCK('" MY_SCHEMA_LOCK "', 60)"))
		return conn_err(c, "get_lock");
	if ((res = mysql_store_result(c->my)) == NULL)
		return conn_err(c, "get_lock");
	row = mysql_fetch_row(res);
	got = row != NULL && row[0] != NULL && strcmp(row[0], "1") == 0;
	mysql_free_result(res);
	if (!got) {
		snprintf(c->err, sizeof(c->err), "another instance holds the "
		    "schema lock");
		return JRNL_EUNAVAIL;
	}
	return JRNL_OK;
}

static void
my_unlock_schema(struct jrnl_conn *c, int ok)
{
	(void)ok;		/* MySQL DDL is not transactional */
	(void)my_exec(c, "SELECT RELEASE_LOCK('" MY_SCHEMA_LOCK "')");
}

static const char *
my_errmsg(struct jrnl_conn *c)
{
	return c->err;
}

const struct jrnl_driver jrnl_mysql_driver = {
	.name = "mysql",
	.kind = JRNL_KIND_MYSQL,
	.connect = my_connect,
	.close = my_close,
	.exec = my_exec,
	.run = my_run,
	.begin = my_begin,
	.commit = my_commit,
	.rollback = my_rollback,
	.lock_schema = my_lock_schema,
	.unlock_schema = my_unlock_schema,
	.errmsg = my_errmsg,
};
