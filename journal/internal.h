/*
 * internal.h - what the journal's files share and nobody else includes: the
 * parsed URL, the driver interface and the statement table.
 *
 * Key decision: a driver knows nothing of jobs.  It connects, runs one of
 * the journal's statements (by number, with its SQL text in the driver's
 * dialect, prepared once per connection and cached) with typed parameters,
 * and hands back rows as typed values; the core maps rows to structs.  So
 * every query is written once (schema.c) and a driver is only the
 * database's calling convention.  Values are bound, never spliced into SQL.
 */
#ifndef RETRYD_JOURNAL_INTERNAL_H
#define RETRYD_JOURNAL_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "journal/journal.h"

/* url.c */
enum jrnl_kind {
	JRNL_KIND_NONE,
	JRNL_KIND_SQLITE,
	JRNL_KIND_MYSQL,
};

struct jrnl_url {
	enum jrnl_kind	 kind;
	char		*path;		/* sqlite: absolute file path */
	char		*user;		/* mysql: decoded; NULL: none */
	char		*pass;		/* NULL: none */
	char		*host;		/* NULL with a socket */
	unsigned	 port;		/* 0: the default */
	char		*db;
	char		*socket;	/* NULL: TCP */
};

/* Parse s into u (freed with jrnl_url_free); JRNL_EURL with a reason. */
enum jrnl_err jrnl_url_parse(const char *s, struct jrnl_url *u, char *why,
	    size_t whylen);
void	jrnl_url_free(struct jrnl_url *u);

/* One value bound to or read from a statement. */
enum jrnl_vtype {
	JRNL_V_NULL,
	JRNL_V_INT,
	JRNL_V_TEXT,
	JRNL_V_BLOB,
};

struct jrnl_val {
	enum jrnl_vtype	 type;
	int64_t		 i;
	const char	*p;	/* TEXT, BLOB; not NUL-terminated on output */
	size_t		 len;
};

/*
 * The most columns a statement's result row may have (a job's row has 16);
 * a driver refuses a statement with more rather than cut its rows short.
 */
#define JRNL_ROW_COLS_MAX	24

/* A row: cols[0..ncols); 0 to go on, else stop. */
typedef int	(*jrnl_row_fn)(const struct jrnl_val *cols, size_t ncols,
		    void *arg);

/*
 * A group commit's jobs and transitions are written by multi-row inserts
 * of 2^k rows (k < JRNL_PUT_SIZES): one statement per 32 rows, not per row,
 * so the per-statement work (cursors opened at each B-tree's root, the
 * statement's halt) is shared and each index insert after the first finds
 * its cursor already at the end (ids grow).
 */
#define JRNL_JOB_COLS		17
#define JRNL_TRANS_COLS		13
#define JRNL_PUT_SIZES		6
#define JRNL_PUT_ROWS_MAX	(1 << (JRNL_PUT_SIZES - 1))
#define JRNL_ARGS_MAX		(JRNL_JOB_COLS * JRNL_PUT_ROWS_MAX)

/* The statements, in schema.c's table. */
enum jrnl_stmt {
	JS_JOB_APPLY,
	JS_JOB_VOID,
	JS_JOB_GET,
	JS_SCAN_ALL,
	JS_SCAN_TENANT,
	JS_TRANS_LIST,
	JS_PURGE_SELECT,
	JS_PURGE_TRANS,
	JS_PURGE_JOB,
	JS_TENANT_UPSERT,
	JS_TENANT_DELETE,
	JS_TENANT_KEYS_DELETE,
	JS_TENANT_TOPICS_DELETE,
	JS_TENANT_JOBS_DELETE,
	JS_TENANT_TRANS_DELETE,
	JS_TENANT_SCAN,
	JS_KEY_UPSERT,
	JS_KEY_REVOKE,
	JS_KEY_SCAN_ALL,
	JS_KEY_SCAN,
	JS_TOPIC_UPSERT,
	JS_TOPIC_DELETE,
	JS_TOPIC_JOBS_CANCEL,
	JS_TOPIC_STEP_BOUND,
	JS_TOPIC_STEP_CANCEL,
	JS_TENANT_JOBS_BOUND,
	JS_TENANT_JOBS_STEP,
	JS_TENANT_TRANS_BOUND,
	JS_TENANT_TRANS_STEP,
	JS_TOPIC_SCAN_ALL,
	JS_TOPIC_SCAN,
	JS_TOPIC_GET,
	JS_VERSION_GET,
	JS_VERSION_SET,
	JS_PING,
	JS_WRITE_PROBE,	/* a write that proves the database takes one */
	JS_LIST,	/* + a mask of JRNL_LIST_*: 16 statements */
	JS_LIST_FLOOR = JS_LIST + 16,	/* + JRNL_LIST_BY_TOPIC */
	JS_PUT_MANY = JS_LIST_FLOOR + 2,	/* + k: an upsert of 2^k jobs */
	JS_TRANS_MANY = JS_PUT_MANY + JRNL_PUT_SIZES,	/* 2^k transitions */
	JS_PUT_ID_MANY = JS_TRANS_MANY + JRNL_PUT_SIZES, /* 2^k rows' put_id */
	JS_GET_MANY = JS_PUT_ID_MANY + JRNL_PUT_SIZES,	/* 2^k jobs by id */
	JS_COUNT = JS_GET_MANY + JRNL_PUT_SIZES,
};

#define JRNL_LIST_BY_TOPIC	1
#define JRNL_LIST_BY_STATE	2
#define JRNL_LIST_BY_BIZKEY	4
/*
 * state = 'scheduled' (not BY_STATE, whose statements say state <> it to
 * reach SQLite's partial index) and the window's floor: id >= ?.
 */
#define JRNL_LIST_SCHEDULED	8

struct jrnl_conn;

struct jrnl_driver {
	const char	*name;
	enum jrnl_kind	 kind;
	/* Connect within timeout_ms; *out on JRNL_OK. */
	enum jrnl_err	(*connect)(const struct jrnl_url *u, int64_t timeout_ms,
			    int durable, struct jrnl_conn **out, char *why,
			    size_t whylen);
	void		(*close)(struct jrnl_conn *c);
	/* A statement without parameters or rows (DDL, BEGIN...). */
	enum jrnl_err	(*exec)(struct jrnl_conn *c, const char *sql);
	/*
	 * Run statement id (text sql) with args; each row goes to fn (may be
	 * NULL); *changes (may be NULL) gets the rows written.
	 */
	enum jrnl_err	(*run)(struct jrnl_conn *c, int id, const char *sql,
			    const struct jrnl_val *args, size_t nargs,
			    jrnl_row_fn fn, void *arg, int64_t *changes);
	enum jrnl_err	(*begin)(struct jrnl_conn *c);
	enum jrnl_err	(*commit)(struct jrnl_conn *c);
	void		(*rollback)(struct jrnl_conn *c);
	/* Serialise schema changes among instances: begin and end. */
	enum jrnl_err	(*lock_schema)(struct jrnl_conn *c);
	void		(*unlock_schema)(struct jrnl_conn *c, int ok);
	/* The last error, for logs. */
	const char	*(*errmsg)(struct jrnl_conn *c);
	/*
	 * 1 when c's database file is no longer the one at its path
	 * (removed or replaced while open; errmsg says so); NULL for a
	 * server's.
	 */
	int		(*moved)(struct jrnl_conn *c);
};

extern const struct jrnl_driver jrnl_sqlite_driver;
extern const struct jrnl_driver jrnl_mysql_driver;

/* schema.c */
#define JRNL_SCHEMA_VERSION	6
#define JRNL_STR(x)		#x
#define JRNL_XSTR(x)		JRNL_STR(x)	/* a macro's value as text */

const char *jrnl_sql(enum jrnl_kind kind, int id);
/*
 * The k of the multi-row statement (2^k rows, JS_PUT_MANY's and the
 * others') that takes the next rows of left > 0: JRNL_PUT_ROWS_MAX a
 * statement, the rest by the powers of two it adds up to (30: 16, 8, 4, 2).
 */
int	jrnl_many_size(size_t left);
/*
 * Create the schema or migrate it to JRNL_SCHEMA_VERSION; JRNL_ESCHEMA
 * when the database's version is newer than this build's.
 */
enum jrnl_err jrnl_schema_ensure(const struct jrnl_driver *d,
	    struct jrnl_conn *c, char *why, size_t whylen);

/*
 * Connect through d, and run statement id on c with the SQL of d's
 * dialect; both fail with JRNL_EUNAVAIL while the test hook is on.
 */
enum jrnl_err jrnl_connect(const struct jrnl_driver *d,
	    const struct jrnl_url *u, int64_t timeout_ms, int durable,
	    struct jrnl_conn **out, char *why, size_t whylen);
/*
 * The writer's connection: jrnl_connect(), the schema ensured, and one
 * write committed (JS_WRITE_PROBE); a database that takes no write is
 * JRNL_EUNAVAIL, why "cannot write: ...".
 */
enum jrnl_err jrnl_connect_writer(const struct jrnl_driver *d,
	    const struct jrnl_url *u, int64_t timeout_ms, int durable,
	    struct jrnl_conn **out, char *why, size_t whylen);
enum jrnl_err jrnl_run(const struct jrnl_driver *d, struct jrnl_conn *c,
	    int id, const struct jrnl_val *args, size_t nargs,
	    jrnl_row_fn fn, void *arg, int64_t *changes);

/* Value constructors. */
struct jrnl_val jrnl_vint(int64_t i);
struct jrnl_val jrnl_vtext(const char *s);	/* NULL gives NULL */
struct jrnl_val jrnl_vblob(const char *p, size_t len);

/*
 * Test hook, process-wide: while on, the database acts as unreachable
 * (jrnl_connect and jrnl_run fail with JRNL_EUNAVAIL), as when a disk
 * fails or a server goes away.
 */
void	jrnl_test_set_unavailable(int on);
int	jrnl_test_unavailable(void);
/* Test hook: fn(arg) runs on the writer after each task, without mu. */
void	jrnl_test_set_task_hook(void (*fn)(void *), void *arg);

/* journal.c: the handle, shared with read.c. */
enum jrnl_req_state {
	JRNL_REQ_QUEUED,
	JRNL_REQ_TAKEN,
	JRNL_REQ_DONE,
};

/*
 * One jrnl_put_jobs call waiting for the writer, or one jrnl_put_jobs_cb
 * (sync, with cb: heap-allocated, owns its copy, settled by the callback),
 * or one jrnl_flush_cb (a ticket: no jobs, cb, want_trans).
 */
struct jrnl_put_req {
	TAILQ_ENTRY(jrnl_put_req) entry;
	const struct jrnl_job	*jobs;
	size_t			 n;
	uint64_t		 seq;
	int			 sync;
	enum jrnl_req_state	 state;
	enum jrnl_err		 result;
	void			*copy;	/* ASYNC, cb: owns jobs */
	jrnl_done_fn		 cb;	/* NULL: a caller waits */
	void			*cb_arg;
	int64_t			 deadline_mono_us; /* cb: if still queued;
						      ticket: at most */
	uint64_t		 want_trans;	/* ticket: trans_done due */
};
TAILQ_HEAD(jrnl_put_list, jrnl_put_req);

/*
 * A step of work the writer runs on its connection between its rounds
 * (jrnl_run_task): a delete's next rows.  fn runs without mu.
 */
typedef enum jrnl_err	(*jrnl_task_fn)(struct jrnl *j, void *arg);

struct jrnl_task {
	TAILQ_ENTRY(jrnl_task)	 entry;
	jrnl_task_fn		 fn;
	void			*arg;
	enum jrnl_err		 result;
	int			 done;
};
TAILQ_HEAD(jrnl_task_list, jrnl_task);

/*
 * One queued transition: the struct and its strings in one block.  put_seq
 * is the last put's seq when it was queued: it is written only with or
 * after every put up to that one, so never before its own job's row.
 */
struct jrnl_trans_rec {
	struct jrnl_transition	t;
	uint64_t		put_seq;
	char			data[];
};

/*
 * Lock order: rmu before mu (read.c takes mu only to read the config,
 * which needs no lock, so in practice neither holds the other).
 */
struct jrnl {
	struct jrnl_config	 cfg;	/* defaults filled; strings owned */
	int			 off;
	const struct jrnl_driver *drv;
	struct jrnl_url		 url;

	pthread_mutex_t		 mu;
	pthread_cond_t		 wake;	/* to the writer */
	pthread_cond_t		 done;	/* to putters, flushers, purgers */
	pthread_t		 writer;
	int			 writer_started;
	struct jrnl_conn	*wconn;	/* the writer thread's only */

	/* Under mu. */
	struct jrnl_put_list	 puts;
	struct jrnl_put_list	 inflight;
	struct jrnl_put_list	 settled;	/* cb puts, to call back */
	uint64_t		 cb_rounds;	/* jrnl_run_callbacks() begun */
	uint64_t		 cb_rounds_done;	/* ... and ended */
	struct jrnl_put_list	 tickets;	/* jrnl_flush_cb, in order */
	struct jrnl_task_list	 tasks;		/* jrnl_run_task, in order */
	int			 task_turn;	/* a write round went last */
	uint64_t		 put_seq;
	size_t			 async_jobs;
	struct jrnl_trans_rec	**ring;
	size_t			 ring_head;
	size_t			 ring_len;
	uint64_t		 trans_in;
	uint64_t		 trans_done;
	int			 connected;
	uint64_t		 fail_gen;
	char			 last_error[256];
	int			 stopping;
	int			 flushers;
	uint64_t		 purge_req_gen;
	uint64_t		 purge_cycle_gen;
	uint64_t		 purge_done_gen;
	int			 purge_result;
	int			 purging;
	size_t			 last_batch_reqs;
	struct jrnl_stats	 stats;
	int64_t			 next_connect_mono_us;
	int64_t			 last_connect_mono_us;
	int64_t			 backoff_us;
	int64_t			 next_flush_mono_us;
	int64_t			 next_purge_mono_us;
	int64_t			 next_ping_mono_us;

	/* The reading connection (read.c), under rmu. */
	pthread_mutex_t		 rmu;
	struct jrnl_conn	*rconn;
	int64_t			 rconn_retry_mono_us;
};

#define JRNL_BATCH_TRANS	1024	/* transitions per transaction */
#define JRNL_PING_US		1000000
#define JRNL_MAX_WAIT_US	1000000	/* waits re-check this often */

/* 1 for the states a job never leaves by itself: delivered, cancelled. */
int	jrnl_state_finished(const char *state);
void	jrnl_cv_wait_us(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t us);
/* writer.c */
void	*jrnl_writer_main(void *arg);
/*
 * Settle a request the writer is done with (frees an ASYNC one, moves a cb
 * one to settled); mu held.
 */
void	jrnl_finish_req(struct jrnl *j, struct jrnl_put_req *r);
/*
 * Settle the tickets whose transitions are written, or all of them with
 * err (JRNL_OK: only those due); mu held.
 */
void	jrnl_settle_tickets(struct jrnl *j, enum jrnl_err err);
/* Call back and free the settled cb puts; mu held, dropped meanwhile. */
void	jrnl_run_callbacks(struct jrnl *j);
/*
 * Have the writer run fn(j, arg) as a round of its own, and wait for it:
 * while puts or transitions are queued, the writer takes turns between
 * them and the tasks, so neither waits behind the other for more than a
 * round.  JRNL_EUNAVAIL when the database is away or the journal closes.
 */
enum jrnl_err jrnl_run_task(struct jrnl *j, jrnl_task_fn fn, void *arg);
/* Queue t (fn, arg set) without waiting; t->done once run.  mu held. */
void	jrnl_queue_task(struct jrnl *j, struct jrnl_task *t);
/* Fail the tasks still queued: the database away, or closed; mu held. */
void	jrnl_fail_tasks(struct jrnl *j);
/* read.c: close the reading connection (at jrnl_close). */
void	jrnl_read_close(struct jrnl *j);

#endif
