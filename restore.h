/*
 * restore.h - rebuilding Redis from the journal after Redis lost its data:
 * tenants, key hashes and topics first, then every unfinished job, in
 * bounded batches while the server keeps serving.  Used by the daemon (the
 * scheduler's redis_lost hook, and at start) and by `retryd --recover`.
 *
 * Threading: restore_request() may be called from any thread and never
 * blocks; the rest from the thread that owns the struct restore.
 * Ownership: the scheduler, registry and journal given in the config stay
 * the caller's and must outlive the struct restore.
 */
#ifndef RETRYD_RESTORE_H
#define RETRYD_RESTORE_H

#include <stddef.h>
#include <stdint.h>

struct sched;
struct registry;
struct jrnl;

struct restore_config {
	struct sched	*sched;
	struct registry	*reg;
	struct jrnl	*jrnl;
	const char	*instance;	/* names the lock's holder */
	size_t		 batch;		/* jobs per journal page: 500 */
	int64_t		 settle_ms;	/* wait for the transition batches of
					   every instance before reading
					   jobs: 200 */
};

/* What one rebuild did. */
struct restore_counts {
	int64_t	tenants, keys, topics;	/* re-created in Redis */
	int64_t	restored;		/* jobs re-created */
	int64_t	present;		/* jobs Redis had already */
	int64_t	failed;			/* jobs Redis refused (logged) */
	int64_t	superseded;		/* not made: another unfinished job
					   of the topic has the bizkey */
};

struct restore *restore_new(const struct restore_config *cfg);
/*
 * Stops the worker (a rebuild in progress stops between two jobs and is
 * finished by the next start or another instance); requests after it are
 * taken and never acted on, so the scheduler's hooks may still make them.
 * Accepts NULL.
 */
void	restore_stop(struct restore *r);
/* restore_stop(), then frees.  Accepts NULL. */
void	restore_free(struct restore *r);

/*
 * Call once before the scheduler starts: a Redis without the schema marker
 * is either new or has lost its data, and the scheduler marks such a Redis
 * at once, so this is the moment to flag it for a rebuild.  A Redis that
 * cannot be reached now is judged by the worker later (no tenants in Redis
 * while the journal has some).
 */
void	restore_check_start(struct restore *r);
/* Start the worker thread: 0, or -1 with errno. */
int	restore_start(struct restore *r);
/* The value of this instance's rebuild lock. */
const char *restore_holder(const struct restore *r);
/*
 * Before restore_start: holder is the rebuild lock's value of a run known
 * to be gone (see sched_set_predecessor); the worker lets go of that lock
 * first, so that a rebuild the run left half-done is taken up at once
 * rather than once the lock runs out.
 */
void	restore_set_predecessor(struct restore *r, const char *holder);
/* The scheduler's redis_lost hook: ask the worker for a rebuild. */
void	restore_request(struct restore *r);
/*
 * The scheduler's redis_restarted hook: a rebuild is owed even with the
 * schema marker there (the worker sets the flag, so one instance does
 * it): every unfinished job of the journal that Redis lacks comes back.
 */
void	restore_recheck(struct restore *r);

/*
 * Rebuild now in the calling thread, whether or not Redis looks as if it
 * needed it (retryd --recover).  0 with *out, or -1 with why.
 */
int	restore_run(struct restore *r, struct restore_counts *out, char *why,
	    size_t whylen);

/* retryd --recover: build the parts from the configuration, rebuild,
 * print what was done; the process's exit code. */
int	restore_recover(void);

#endif
