/*
 * journal.h - the SQL journal: every accepted job and every state change,
 * kept in SQLite or MySQL/MariaDB so Redis can be rebuilt after it loses its
 * data.
 *
 * Key decision: one writer thread owns the writing connection.  Job puts are
 * queued to it and written by group commit (every put waiting when a
 * transaction starts shares it, so concurrent puts share one fsync; a put
 * may also be settled by a callback, so its caller need not wait), and
 * state transitions are queued without blocking and written in batches (a
 * caller may ask to be called back once those it queued are committed).
 * Reads and the tenant/key/topic records go through a second, mutex-guarded
 * connection and are synchronous.  See docs/internals/JOURNAL.md.
 *
 * Strings passed in are copied or used only during the call; pointers handed
 * to callbacks are valid only during the callback.  A callback returns 0 to
 * go on, anything else to stop (the function then returns JRNL_OK).
 * Callbacks run with no journal lock held and may call into the journal.
 */
#ifndef RETRYD_JOURNAL_JOURNAL_H
#define RETRYD_JOURNAL_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

enum jrnl_mode {
	JRNL_MODE_OFF,		/* no database at all; writes are no-ops */
	JRNL_MODE_ASYNC,	/* puts return once queued */
	JRNL_MODE_SYNC,		/* puts return once committed */
};

enum jrnl_err {
	JRNL_OK = 0,
	JRNL_EURL,		/* the URL is malformed or unsupported */
	JRNL_EUNAVAIL,		/* the database cannot be reached now */
	JRNL_ESCHEMA,		/* schema newer than this build, or unusable */
	JRNL_EFULL,		/* the ASYNC queue is at its cap */
	JRNL_ENOTFOUND,		/* no such row */
	JRNL_EINTERNAL,		/* the database refused the statement */
	JRNL_EOFF,		/* reads while the journal is off */
	JRNL_EINVAL,		/* a required argument is missing */
};

const char *jrnl_strerror(enum jrnl_err err);

/* Zero or NULL members take the default shown. */
struct jrnl_config {
	const char	*url;		/* sqlite:///abs, mysql://..., none */
	enum jrnl_mode	 mode;
	int64_t		 flush_interval_ms;	/* transition batches: 100 */
	int64_t		 retention_ms;		/* finished jobs: 30 d */
	const char	*instance;		/* "" */
	const char	*host;			/* "" */
	int64_t		 commit_window_us;	/* group-commit gather: 0 */
	int64_t		 timeout_ms;	/* connect, busy, SYNC wait: 2000 */
	size_t		 queue_max;	/* queued transitions and ASYNC
					   jobs, each: 100000 */
	int64_t		 purge_interval_ms;	/* 60000 */
	int		 purge_batch;		/* jobs per purge txn: 500 */
	int		 delete_batch;		/* rows per step of a topic's
						   or tenant's delete: 1000 */
	int		 start_unavailable;	/* open even when the database
						   cannot be reached yet */
	void		(*callbacks_done)(void);	/* NULL, or see
						   jrnl_in_callbacks() */
};

/*
 * A job.  On input state NULL means "scheduled", updated_ms 0 means
 * created_ms, and finished_ms is ignored (derived from the state).
 * created_ms must be the job's creation time as Redis holds it, to the
 * millisecond: a transition moves the row only when it names the same.
 * version orders the job's transitions (see struct jrnl_transition): the
 * number of journaled changes Redis had made to the job when the row was
 * written.  A push's put passes 0 (no change yet), a put that writes the
 * row again from Redis the version Redis holds; a put that replaces a row
 * replaces its version too.  On output, the row's.
 */
struct jrnl_job {
	const char	*tenant;
	const char	*topic;
	const char	*id;
	const char	*bizkey;	/* NULL: none */
	int64_t		 due_ms;
	int		 priority;
	const char	*body;		/* bytes, not NUL-terminated */
	size_t		 body_len;
	const char	*headers_json;	/* NULL: none */
	const char	*schedule;	/* NULL: the topic's */
	int64_t		 ttr_ms;
	const char	*state;
	int		 attempts;
	int64_t		 created_ms;
	int64_t		 updated_ms;
	int64_t		 finished_ms;	/* output: 0 while unfinished */
	int64_t		 version;
	/*
	 * Input only.  put_id: a token for this put, unique to it (0: none).
	 * A put with one does not replace a row another put wrote while that
	 * row is unfinished (a put without one always replaces), and in SYNC
	 * mode *contested (when not NULL) is set once the put is written: 1
	 * when such a row stood and this put's job is not the row, 0 when it
	 * is.  A void transition with the token removes only this put's row.
	 */
	int64_t		 put_id;
	int		*contested;
};

/*
 * A state change.  instance and host come from the config on input and are
 * filled on output.  error is cut to JRNL_ERROR_MAX bytes and the excerpt
 * to JRNL_EXCERPT_MAX.
 *
 * Besides its row in the transitions table, a transition with a from_state
 * moves its job's row (state, attempts, due_ms, updated_ms = at_ms,
 * finished_ms, version) when the row's created_ms is created_ms and its
 * version is below version, and only then.  Redis raises a job's version
 * with every journaled change, so a late transition never moves a job
 * back, whatever the clocks of the instances that made the two (at_ms is
 * the maker's clock, and instances' clocks differ); created_ms keeps a
 * late transition of an earlier job with the same client-given id (long
 * finished, its id pushed again) off the new job's row.  Version 0 moves
 * no row.  version and created_ms are input only (0 on output: the
 * transitions table does not keep them); a void transition ignores both.
 */
#define JRNL_ERROR_MAX		1024
#define JRNL_ID_MAX		64	/* a job id's bytes (VARBINARY(64)) */
#define JRNL_EXCERPT_MAX	4096

/*
 * The to_state of a push the API did not make after all (deduplicated
 * against another job, or refused by Redis): its row goes, and no
 * transition row is written.
 */
#define JRNL_STATE_VOID	"void"	/* put_id: the put's token, 0: any */

struct jrnl_transition {
	const char	*tenant;
	const char	*job_id;
	const char	*from_state;	/* NULL: none (a new job) */
	const char	*to_state;
	int64_t		 at_ms;
	int		 shard;
	int		 attempt;	/* 0: not an attempt */
	int		 http_status;	/* 0: none */
	int64_t		 latency_ms;
	const char	*error;		/* NULL: none */
	const char	*excerpt;	/* response bytes; NULL: none */
	size_t		 excerpt_len;
	int64_t		 due_ms;	/* the job's next attempt from now
					   on; 0: unchanged */
	int64_t		 put_id;	/* a void one: the row's put; 0: any */
	int64_t		 version;	/* the job's after this change, >= 1 */
	int64_t		 created_ms;	/* the job's, as Redis holds it */
	const char	*instance;	/* output only */
	const char	*host;		/* output only */
};

struct jrnl_tenant {
	const char	*name;
	int64_t		 created_ms;
	const char	*settings_json;	/* NULL: none */
};

struct jrnl_key {
	const char	*tenant;
	const char	*key_id;
	const char	*hash_hex;	/* sha256 of the key, lower-case hex */
	int64_t		 created_ms;
	int64_t		 revoked_ms;	/* 0: in force */
};

struct jrnl_topic {
	const char	*tenant;
	const char	*name;
	const char	*config_json;
	int64_t		 created_ms;	/* kept from the first put */
	int64_t		 updated_ms;
};

/* Paging through unfinished jobs, ordered by (tenant, id). */
struct jrnl_scan {
	const char	*tenant;	/* NULL: every tenant */
	const char	*after_tenant;	/* the last job seen; NULL: start */
	const char	*after_id;
	size_t		 limit;		/* 0: 1000 */
	int		 include_dead;	/* also jobs in state dead */
};

#define JRNL_LIST_WINDOW	10000
#define JRNL_LIST_BUDGET	50000

/*
 * Listing one tenant's jobs newest first (ids sort by creation time).  A
 * listing by state scheduled without a bizkey reads at most budget rows,
 * window at a time, and may stop with fewer than limit jobs: next then
 * says where to go on.
 */
struct jrnl_list {
	const char	*topic;		/* NULL: any */
	const char	*state;		/* NULL: any */
	const char	*bizkey;	/* NULL: any */
	const char	*cursor;	/* the last id seen; NULL: newest */
	size_t		 limit;		/* 0: 100 */
	size_t		 window;	/* 0: JRNL_LIST_WINDOW */
	size_t		 budget;	/* 0: JRNL_LIST_BUDGET */
	/* Out: the cursor of the next page; "": there is none. */
	char		 next[JRNL_ID_MAX + 1];
};

struct jrnl_stats {
	uint64_t	commits;	/* write transactions committed */
	uint64_t	jobs_written;
	uint64_t	transitions_written;
	uint64_t	transitions_dropped;	/* queue full or refused */
	uint64_t	jobs_dropped;		/* ASYNC jobs refused */
	uint64_t	purged;			/* finished jobs removed */
	uint64_t	delete_steps;		/* jrnl_run_task rounds */
	size_t		queued_transitions;
	size_t		queued_jobs;
	int		connected;
};

typedef int	(*jrnl_job_fn)(const struct jrnl_job *job, void *arg);
typedef int	(*jrnl_transition_fn)(const struct jrnl_transition *t,
		    void *arg);
typedef int	(*jrnl_tenant_fn)(const struct jrnl_tenant *t, void *arg);
typedef int	(*jrnl_key_fn)(const struct jrnl_key *k, void *arg);
typedef int	(*jrnl_topic_fn)(const struct jrnl_topic *t, void *arg);

struct jrnl;

/*
 * Parse the URL, connect, create or migrate the schema and start the writer
 * thread.  NULL on failure with *err set and a sentence in why.  With the
 * URL "none" or mode OFF no database is opened.  An unreachable database
 * fails with JRNL_EUNAVAIL, unless start_unavailable is set: then the
 * journal opens not ready and the writer keeps trying (the schema is
 * checked at every connect, so JRNL_ESCHEMA then shows in jrnl_ready()).
 */
struct jrnl *jrnl_open(const struct jrnl_config *cfg, enum jrnl_err *err,
	    char *why, size_t whylen);
/*
 * Flush what is queued, stop the writer, close.  No other call on j may
 * run concurrently or after.  Accepts NULL.
 */
void	jrnl_close(struct jrnl *j);

/*
 * Record n jobs (insert, or replace a row with the same tenant and id;
 * but see put_id in struct jrnl_job).
 * SYNC: returns once committed, or JRNL_EUNAVAIL within about timeout_ms
 * when the database cannot be reached.  ASYNC: returns once copied into the
 * queue, JRNL_EFULL at its cap.  OFF: JRNL_OK at once.
 */
enum jrnl_err jrnl_put_jobs(struct jrnl *j, const struct jrnl_job *jobs,
	    size_t n);
/*
 * The same without waiting: the jobs are copied and done(err, arg) is
 * called exactly once when JRNL_OK is returned, never otherwise.  SYNC:
 * from the writer thread once the transaction holding them committed, or
 * with the error (JRNL_EUNAVAIL when the database cannot be reached, or a
 * put still queued after about timeout_ms; JRNL_EINTERNAL for a row
 * refused).  ASYNC (once queued) and OFF: from the caller's thread, before
 * the return.  done runs with no journal lock held and must not block on
 * the journal's writer (no jrnl_put_jobs, jrnl_flush, jrnl_purge).
 */
typedef void	(*jrnl_done_fn)(enum jrnl_err err, void *arg);
enum jrnl_err jrnl_put_jobs_cb(struct jrnl *j, const struct jrnl_job *jobs,
	    size_t n, jrnl_done_fn done, void *arg);
/*
 * 1 while the calling thread is the writer running a group of done
 * callbacks; the config's callbacks_done is called on it after the group,
 * so a done callback may defer its hand-off (a wake-up) to the end of the
 * group: one wake-up per group commit rather than one per put.
 */
int	jrnl_in_callbacks(void);
/*
 * Queue a state change (copied); never waits for I/O.  When the queue is
 * full the transition is dropped and counted, and the calling thread's
 * next jrnl_flush_cb() answers JRNL_EFULL.
 */
void	jrnl_transition(struct jrnl *j, const struct jrnl_transition *t);
/* Write everything queued before the call: 0, or -1 when it could not. */
int	jrnl_flush(struct jrnl *j);
/*
 * jrnl_flush(), then wait (up to timeout_ms) until the puts it waited for
 * have been called back, so that what their callbacks hand on is handed
 * on (at shutdown, a push's jobs to Redis before the pushers stop).  Not
 * from a callback, which would wait for itself.
 */
int	jrnl_settle(struct jrnl *j);
/*
 * The same without waiting (a flush ticket): done(err, arg) is called
 * exactly once when JRNL_OK is returned, never otherwise, once every
 * transition queued before the call is committed, sharing the writer's
 * next transaction with whatever else it writes.  JRNL_EUNAVAIL when the
 * database cannot be reached (the transitions stay queued and are written
 * once it is back), or when they are still not written after about five
 * times timeout_ms.  From the writer thread, or from the caller's before
 * the return when nothing is queued or the journal is off.  done runs with
 * no journal lock held and must not block on the writer.  JRNL_EFULL, and
 * done is not called, when a transition the calling thread queued since
 * its previous ticket was dropped because the queue was full: that one is
 * never written.
 */
enum jrnl_err jrnl_flush_cb(struct jrnl *j, jrnl_done_fn done, void *arg);
/* Change the retention (a reload); <= 0 keeps it. */
void	jrnl_set_retention(struct jrnl *j, int64_t retention_ms);
/* Purge finished jobs past retention now, to the end: 0, or -1. */
int	jrnl_purge(struct jrnl *j);
/* 1 when the database is reachable, else 0 with the reason in why. */
int	jrnl_ready(struct jrnl *j, char *why, size_t whylen);
void	jrnl_get_stats(struct jrnl *j, struct jrnl_stats *st);

/* Reads: synchronous, on the reading connection. */
enum jrnl_err jrnl_scan_unfinished(struct jrnl *j, const struct jrnl_scan *s,
	    jrnl_job_fn cb, void *arg);
/* JRNL_ENOTFOUND when there is no such job. */
enum jrnl_err jrnl_get_job(struct jrnl *j, const char *tenant, const char *id,
	    jrnl_job_fn cb, void *arg);
/*
 * The jobs of n (tenants[i], ids[i]) pairs, each found to cb once (in no
 * order, once for a pair asked twice, none for a pair without a row),
 * asked in a few statements of up to 32 pairs: one round trip per 32 ids,
 * not per id.  JRNL_OK also when none is found.
 */
enum jrnl_err jrnl_get_jobs(struct jrnl *j, const char *const *tenants,
	    const char *const *ids, size_t n, jrnl_job_fn cb, void *arg);
enum jrnl_err jrnl_list_jobs(struct jrnl *j, const char *tenant,
	    struct jrnl_list *l, jrnl_job_fn cb, void *arg);
/* Oldest first. */
enum jrnl_err jrnl_list_transitions(struct jrnl *j, const char *tenant,
	    const char *job_id, jrnl_transition_fn cb, void *arg);

/*
 * Tenants, keys and topics: synchronous.  Puts insert or update.  Deleting
 * a tenant deletes its keys, topics, jobs and transitions;
 * deleting a topic cancels its unfinished jobs.  tenant NULL in a scan means
 * every tenant.
 */
enum jrnl_err jrnl_put_tenant(struct jrnl *j, const struct jrnl_tenant *t);
enum jrnl_err jrnl_delete_tenant(struct jrnl *j, const char *name);
/*
 * Write everything queued (jrnl_flush), then delete the tenant's jobs and
 * transitions again: those of jobs that went after jrnl_delete_tenant()
 * (a deleted tenant's jobs dropped from Redis are reported as transitions,
 * which would otherwise be written as rows of no job).  JRNL_EUNAVAIL when
 * the queue cannot be written or the rows deleted now.
 */
enum jrnl_err jrnl_delete_tenant_jobs(struct jrnl *j, const char *name);
enum jrnl_err jrnl_scan_tenants(struct jrnl *j, jrnl_tenant_fn cb, void *arg);
enum jrnl_err jrnl_put_key(struct jrnl *j, const struct jrnl_key *k);
enum jrnl_err jrnl_revoke_key(struct jrnl *j, const char *tenant,
	    const char *key_id, int64_t revoked_ms);
enum jrnl_err jrnl_scan_keys(struct jrnl *j, const char *tenant,
	    jrnl_key_fn cb, void *arg);
enum jrnl_err jrnl_put_topic(struct jrnl *j, const struct jrnl_topic *t);
enum jrnl_err jrnl_delete_topic(struct jrnl *j, const char *tenant,
	    const char *name);
enum jrnl_err jrnl_scan_topics(struct jrnl *j, const char *tenant,
	    jrnl_topic_fn cb, void *arg);
/* One topic: cb called with it, or JRNL_ENOTFOUND. */
enum jrnl_err jrnl_get_topic(struct jrnl *j, const char *tenant,
	    const char *name, jrnl_topic_fn cb, void *arg);

#endif
