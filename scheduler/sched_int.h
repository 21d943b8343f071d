/*
 * sched_int.h - what the scheduler's files share among themselves: the
 * struct sched, the Redis key builders, the packed job record codec
 * (record.c), one C function per Lua script (store.c), the reads (query.c)
 * and the timer and subscriber threads (timer.c).  Not for other modules.
 *
 * Key decision: the timer's picture of the shards it owns (the earliest due
 * time and the earliest in-flight deadline of every tenant's shard, and
 * whether push topics have ready jobs) is a cache: it lets the timer sleep
 * exactly until the next due time, but every decision is re-checked by a
 * script against Redis time, so a stale cache costs a wasted call or a late
 * wake-up (bounded by the sweep), never an early delivery.
 *
 * Lock order: sched.lock, then nothing (hooks are never called with it held;
 * the pool and the script cache have their own leaf locks).
 */
#ifndef RETRYD_SCHEDULER_SCHED_INT_H
#define RETRYD_SCHEDULER_SCHED_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "scheduler/conn.h"
#include "scheduler/sched.h"
#include "scheduler/scripts.h"
#include "util/buf.h"

/*
 * 2: a record may carry a version (the state byte's high bit), which a
 * build of version 1 cannot read; version 1's data is read as it is, and
 * its marker raised to 2 at the first check (docs/internals/REDIS-SCHEMA.md).
 */
#define SCHED_SCHEMA_VERSION	2
#define SCHED_SCHEMA_OLDEST	1	/* read as it is, marker raised */
#define SCHED_KEY_MAX		(4 + 64 + 1 + 5 + 2 + 3 + 128 + 8)
#define SCHED_IDKEY_MAX		64	/* bytes of an id key */
#define SCHED_IDTEXT_MAX	(ID_LEN + 65)	/* an id as text, with NUL */
#define SCHED_BIZKEY_MAX	1024
#define SCHED_PUSH_MARGIN_MS	5000	/* push deadline past the timeout */
#define SCHED_ERROR_MAX		256	/* bytes of an attempt's error kept */
#define SCHED_EXCERPT_MAX	512	/* bytes of a response excerpt kept */
#define SCHED_NO_TIME		INT64_MAX
#define SCHED_OFFSET_SAMPLES	8	/* Redis TIME samples kept (timer) */

/* Script replies: the first element of the array. */
#define SCHED_R_OK		0
#define SCHED_R_DUP		1
#define SCHED_R_CONFLICT	(-1)
#define SCHED_R_NOTFOUND	(-2)
#define SCHED_R_TOPIC		(-3)
#define SCHED_R_STALE		(-4)
#define SCHED_R_NOTYET		(-5)

/* A tenant the timer looks at: per shard index, what it knows. */
struct sched_tenant {
	char		*name;
	/* Per shard index, under sched.lock: */
	int64_t		*next_due_ms;	/* earliest delay; SCHED_NO_TIME */
	int64_t		*next_deadline_ms; /* earliest in-flight deadline */
	uint32_t	*gen;		/* wake-ups seen (see store_due) */
	unsigned char	*ready;		/* ready jobs may wait for dispatch */
	unsigned char	*blocked;	/* dispatch waits for capacity */
	uint64_t	 registered_gen; /* in rd:tenants as of this gen */
	int		 first_shard;	/* timer thread only: a pass's first */
};

struct sched {
	struct sched_config	 cfg;		/* strings owned (copied) */
	struct sched_hooks	 hooks;
	struct redis_target	 target;
	struct sched_pool	*pool;
	struct sched_scripts	*scripts;
	char			 holder[192];	/* lease value: instance+rand */
	char			 prev_holder[192]; /* a dead run's ("": none;
						   the timer's) */
	int			 node_salt;	/* random: where a node
						   number is looked for */

	pthread_mutex_t		 lock;
	pthread_mutex_t		 node_lock;	/* one node lease at a time */
	pthread_cond_t		 cond;		/* CLOCK_MONOTONIC */
	pthread_t		 timer_thr, sub_thr;
	int			 started;
	/* Under lock: */
	int			 stopping;
	int			 kicked;	/* sched_kick: sweep and pass */
	int			 woken;		/* a pass is wanted now */
	int			 unblock;	/* capacity was freed */
	int			 quiesced;
	int			 abandon;	/* stop, keep the leases */
	struct sched_tenant	**tenants;
	size_t			 ntenants;
	char			 why[256];	/* why not ready */
	int			 redis_ok;
	int			 schema_ok;	/* -1 unknown, 0 no, 1 ok */
	int			 schema_seen;
	int			 lost_reported;	/* redis_lost called */
	char			 run_id[48];	/* Redis's, as last seen */
	uint64_t		 registered_gen; /* bumped by a loss */
	int			 node;		/* -1 until leased */
	/* Atomics: */
	int64_t			 offset_ms;	/* Redis time - our clock */
	int64_t			 offset_best_ms; /* the same, filtered */
	int			 offset_best_ok; /* offset_best_ms is set */
	uint64_t		 passes;
	int			 nowned;
	char			 pipe_sha[SCRIPT_COUNT][41]; /* under lock */
	/* Timer thread only: */
	unsigned char		*owned;		/* per shard index */
	size_t			 rr;		/* round-robin start */
	int64_t			 off_us[SCHED_OFFSET_SAMPLES]; /* Redis - us */
	int64_t			 rtt_us[SCHED_OFFSET_SAMPLES]; /* their trips */
	size_t			 noff;
	int			 sub_fd[2];	/* wakes the subscriber */
	/* Pull reserves' view of the ready sets (heads.c; own lock): */
	struct sched_heads	*heads;
	int64_t			 heads_ttl_us;	/* SCHED_HEADS_TTL_US */
};

/* scheduler.batch now (a reload may change it: sched_set_batch). */
static inline int
sched_batch(struct sched *s)
{
	return __atomic_load_n(&s->cfg.batch, __ATOMIC_RELAXED);
}

/* ---- record.c: ids, keys, the packed record ----------------------------- */

int	sched_valid_tenant(const char *t);
int	sched_valid_topic(const char *t);
int	sched_valid_client_id(const char *id);
/* The id key of an id (packed for generated ids); 0 or -1 when invalid. */
int	sched_idkey(const char *id, char out[SCHED_IDKEY_MAX], size_t *len);
/* The text of an id key into out[SCHED_IDTEXT_MAX]; 0 or -1. */
int	sched_idkey_text(const char *k, size_t len, char *out);
/* "rd:{TENANT:SHARD}:SUFFIX" or ...:SUFFIX:TOPIC when topic != NULL. */
void	sched_key(char out[SCHED_KEY_MAX], const char *tenant, int shard,
	    const char *suffix, const char *topic);
/* The tag "TENANT:SHARD" the scripts publish. */
void	sched_tag(char out[SCHED_KEY_MAX], const char *tenant, int shard);
/*
 * Encodes job (not in flight) as a record into b (reset first); the
 * creation time is left out when the id carries it.  0 or -1 (EINVAL).
 */
int	sched_rec_encode(const struct sched_job *job, struct buf *b);
/*
 * Big-endian fields as records (and the scripts' struct.pack) hold them:
 * v in n bytes; a string after its length in lenbytes.  0, or -1 when b
 * is full.
 */
int	sched_put_be(struct buf *b, uint64_t v, int n);
int	sched_put_str(struct buf *b, const char *s, size_t len,
	    int lenbytes);
/*
 * A new job from a record (or a record head without its body); NULL when
 * malformed.  tenant, the id key and shard name it.
 */
struct sched_job *sched_rec_decode(const char *tenant, int shard,
	    const char *idk, size_t idklen, const char *rec, size_t len);
/* One packed attempt for the log (see lib.lua). */
void	sched_attempt_encode(const struct sched_attempt *a, int64_t at_ms,
	    struct buf *b);
/* The packed log into an array (the caller frees each and it); 0 or -1. */
int	sched_attlog_decode(const char *s, size_t len,
	    struct sched_attempt **out, size_t *n);
void	sched_attempts_free(struct sched_attempt *a, size_t n);

/* ---- store.c: the scripts, one function each ---------------------------- */

/*
 * "now" for the scripts: "" (Redis time) or the fake clock.  buf has room
 * for 24 characters.
 */
const char *sched_now_arg(struct sched *s, char buf[24]);
/* Our best guess of Redis time (the fake clock when it is on). */
int64_t	sched_now_ms(struct sched *s);
/* Error of a NULL or unexpected reply; sets *broken for I/O errors. */
enum sched_err sched_reply_err(redisContext *c, redisReply *r, int *broken,
	    const char *what);

enum sched_err sched_st_push(struct sched *s, redisContext *c, int shard,
	    const struct sched_push *p, const char *rec, size_t reclen,
	    struct sched_push_result *res, int *broken);
/* from/head: the previous state and the job (head only) after it. */
enum sched_err sched_st_cancel(struct sched *s, redisContext *c,
	    const char *tenant, int shard, const char *idk, size_t idklen,
	    const char *topic, struct sched_job **job, enum sched_state *from,
	    int *broken);
enum sched_err sched_st_reschedule(struct sched *s, redisContext *c,
	    const char *tenant, int shard, const char *idk, size_t idklen,
	    const char *topic, int64_t due_ms, struct sched_job **job,
	    int *broken);
/*
 * Promotes due jobs of one topic; *more: more are due now; *head: the
 * shard's earliest due time left (SCHED_NO_TIME: none).  Calls the
 * transition hook for each job moved.
 */
enum sched_err sched_st_promote(struct sched *s, redisContext *c,
	    const char *tenant, int shard, const char *topic, int *moved,
	    int *more, int64_t *head, int *broken);
/*
 * Pipelining (the timer): sched_st_pipe_prepare() learns the SHA1s first (a
 * round trip of its own, so before anything is appended); an _append
 * function queues a call on q (0, or -1; routed to its shard's node), and
 * its _reply function takes the reply read later with sched_pipe_getreply()
 * (and frees it); c is the pipeline's own context.  A NOSCRIPT reply is
 * run again synchronously, so read every pending reply before the first
 * _reply call.
 */
int	sched_st_pipe_prepare(struct sched *s, redisContext *c, int *broken);
/*
 * push_many.lua, pipelined: _prepare (again: after a NOSCRIPT) before the
 * first _append; each call pushes n jobs of one topic in one shard, and its
 * _reply fills their res and err (SCHED_ESTALE for the whole call: NOSCRIPT,
 * send it again after _prepare with again set).
 */
struct sched_push_item {
	const char		*id;		/* what a new job answers */
	int64_t			 due_ms;
	const char		*idk;
	size_t			 idklen;
	const char		*rec;
	size_t			 reclen;
	struct sched_push_result *res;
	enum sched_err		 err;
};
int	sched_st_push_many_prepare(struct sched *s, redisContext *c,
	    int again, int *broken);
int	sched_st_push_many_append(struct sched *s, struct sched_pipe *q,
	    const char *tenant, int shard, const char *topic,
	    const struct sched_push_item *it, size_t n);
enum sched_err sched_st_push_many_reply(redisContext *c, redisReply *r,
	    struct sched_push_item *it, size_t n, int *broken);
int	sched_st_promote_append(struct sched *s, struct sched_pipe *q,
	    const char *tenant, int shard, const char *topic);
enum sched_err sched_st_promote_reply(struct sched *s, redisContext *c,
	    redisReply *r, const char *tenant, int shard, const char *topic,
	    int *moved, int *more, int64_t *head, int *broken);
/* own_ttr: a job's own time to run wins (pull), as sched_st_reserve. */
int	sched_st_reserve_append(struct sched *s, struct sched_pipe *q,
	    const char *tenant, int shard, const char *topic, int n,
	    int64_t ttr_ms, int own_ttr);
enum sched_err sched_st_reserve_reply(struct sched *s, redisContext *c,
	    redisReply *r, const char *tenant, int shard, const char *topic,
	    int n, int64_t ttr_ms, int own_ttr, struct sched_job ***jobs,
	    size_t *njobs, int *broken);
/* Reserves up to n jobs; *jobs (array of *njobs) is the caller's. */
enum sched_err sched_st_reserve(struct sched *s, redisContext *c,
	    const char *tenant, int shard, const char *topic, int n,
	    int64_t ttr_ms, int own_ttr, struct sched_job ***jobs,
	    size_t *njobs, int *broken);
/*
 * The same, asking reserve.lua for the scores of the next h->want ready
 * jobs of the shard after the ones taken (h->score, h->n of them; -1 when
 * the reply had none): pull reserves keep them (sched_heads_*).
 */
struct sched_heads_in {
	int	 want;
	int	 n;
	double	*score;		/* want of them */
};
enum sched_err sched_st_reserve_h(struct sched *s, redisContext *c,
	    const char *tenant, int shard, const char *topic, int n,
	    int64_t ttr_ms, int own_ttr, struct sched_job ***jobs,
	    size_t *njobs, struct sched_heads_in *h, int *broken);
int	sched_st_reserve_append_h(struct sched *s, struct sched_pipe *q,
	    const char *tenant, int shard, const char *topic, int n,
	    int64_t ttr_ms, int own_ttr, const struct sched_heads_in *h);
enum sched_err sched_st_reserve_reply_h(struct sched *s, redisContext *c,
	    redisReply *r, const char *tenant, int shard, const char *topic,
	    int n, int64_t ttr_ms, int own_ttr, struct sched_job ***jobs,
	    size_t *njobs, struct sched_heads_in *h, int *broken);

enum sched_verdict_x {
	SCHED_V_DONE,
	SCHED_V_RETRY,
	SCHED_V_DEAD,
	SCHED_V_RELEASE,
};

/* What finish made of one job: its new state and version. */
struct sched_fin_out {
	enum sched_state	 to;
	int64_t			 version;
};
enum sched_err sched_st_finish(struct sched *s, redisContext *c,
	    const struct sched_job *job, const char *token,
	    enum sched_verdict_x v, int64_t next_ms,
	    const struct sched_attempt *attempt, int expire_only,
	    struct sched_fin_out *out, int *broken);
/* One job's finish in a pipelined call (not an expiry). */
struct sched_fin {
	const struct sched_job		*job;
	const char			*token;
	enum sched_verdict_x		 v;
	int64_t				 next_ms;
	const struct sched_attempt	*attempt;
};
/*
 * Appends one finish call for n jobs of one tenant, shard and topic: 0, or
 * -1 when nothing was appended.
 */
int	sched_st_finish_many_append(struct sched *s, struct sched_pipe *q,
	    const struct sched_fin *f, size_t n);
/*
 * Its reply (freed): SCHED_OK and errs[i], out[i] for each job; else
 * nothing was applied (SCHED_ENOTFOUND: NOSCRIPT, run them again).
 */
enum sched_err sched_st_finish_many_reply(redisContext *c, redisReply *r,
	    size_t n, enum sched_err *errs, struct sched_fin_out *out,
	    int *broken);
enum sched_err sched_st_restore(struct sched *s, redisContext *c,
	    const struct sched_job *job, const char *rec, size_t reclen,
	    int *created, int *broken);
/*
 * Redrive, in two steps (the caller reads the schedules between them).
 * The dead jobs of the topic (record heads) from index at of its dead
 * set, or from just after the job whose id key is after (afterlen > 0)
 * while that one is still dead: up to a batch, *njobs into *jobs (the
 * caller frees them); *total: the dead set's size, *seen: how many it
 * looked at.
 */
enum sched_err sched_st_redrive_peek(struct sched *s, redisContext *c,
	    const char *tenant, int shard, const char *topic, int64_t at,
	    const char *after, size_t afterlen, struct sched_job ***jobs,
	    size_t *njobs, int64_t *total, int64_t *seen, int *broken);
struct sched_redrive {
	int64_t	 moved;
	int64_t	 skipped;	/* left dead: their bizkey is held */
	char	 last[SCHED_IDKEY_MAX];	/* id key of the last of those */
	size_t	 lastlen;
	char	 holder[SCHED_IDTEXT_MAX]; /* the job holding its bizkey */
};
/*
 * The n jobs still dead back to scheduled, each with its first attempt
 * waits_ms[i] from now, unless their bizkey names another unfinished job
 * of the topic (skipped).  one: jobs[0] alone, and a job that is gone,
 * of another topic or not dead is an error (ENOTFOUND, ECONFLICT).
 */
enum sched_err sched_st_redrive(struct sched *s, redisContext *c,
	    const char *tenant, int shard, const char *topic, int one,
	    struct sched_job *const *jobs, const int64_t *waits_ms, size_t n,
	    struct sched_redrive *res, int *broken);
enum sched_err sched_st_purge(struct sched *s, redisContext *c,
	    const char *tenant, int shard, int *n, int *more, int *broken);
/*
 * Drops up to a batch of the topic's jobs from the shard: set '\0' from
 * its delays, ready and dead sets (*left: what they still hold), or 'f'
 * (in flight) or 'z' (finished) walked from index *at, which is advanced
 * (*left 1: the walk goes on; topic "": every topic's).  Each unfinished
 * or dead job dropped is counted in *n and reported as cancelled.
 */
enum sched_err sched_st_drop(struct sched *s, redisContext *c,
	    const char *tenant, int shard, const char *topic, char set,
	    int64_t *at, int64_t *left, int64_t *n, int *broken);

/* ---- query.c: reads ----------------------------------------------------- */

/*
 * The record (and attempt log when want_log) of a job; ENOTFOUND.  When
 * shard is -1 the id's shard is looked up, probing every shard for a client
 * id not found where its hash puts it; *shard_out says where it was.
 */
enum sched_err sched_q_job(struct sched *s, redisContext *c,
	    const char *tenant, const char *id, int want_log,
	    struct sched_job **out, int *broken);
/*
 * The records of n jobs (tenants[i], ids[i]) in one round trip, an HMGET of
 * every shard of each tenant named, each asking for all that tenant's ids:
 * out[i] the job (no attempt log) or NULL when absent, each found where
 * sched_q_job() would find it.  On an error every out[i] is NULL.
 */
enum sched_err sched_q_jobs(struct sched *s, redisContext *c,
	    const char *const *tenants, const char *const *ids, size_t n,
	    struct sched_job **out, int *broken);
enum sched_err sched_q_counts(struct sched *s, redisContext *c,
	    const char *tenant, const char *topic,
	    int64_t counts[SCHED_NSTATES], int *broken);
enum sched_err sched_q_dead_list(struct sched *s, redisContext *c,
	    const char *tenant, const char *topic, const char *cursor,
	    size_t limit, struct sched_job ***jobs, size_t *njobs,
	    char *next_cursor, size_t next_cursor_len, int *broken);
/*
 * How many of the n best ready jobs of a topic (higher priority, then
 * earlier due) each shard holds: take[] of one per shard.  It knows a few
 * of each shard, not n, reading only the shards whose heads it does not
 * know (heads.c; every shard when fresh): *more when it had to stop short
 * of n at a shard known to its limit, or a shard's heads were forgotten
 * meanwhile (what it counted is still the best; ask again, fresh).  gen[]
 * (one per shard) is for sched_heads_learn() after the reserve; *m how
 * many heads of a shard to ask reserve.lua for.
 */
enum sched_err sched_q_ready_take(struct sched *s, redisContext *c,
	    const char *tenant, const char *topic, size_t n, int fresh,
	    int *take, uint64_t *gen, int *m, int *more, int *broken);

/* ---- heads.c: the ready heads pull reserves know ------------------------ */

#define SCHED_HEADS_MAX		40	/* scores kept per shard */
#define SCHED_HEADS_READ	4	/* scores read per shard, at least */
#define SCHED_HEADS_TTL_US	20000	/* kept this long (another's promote) */

struct sched_head {
	double	score;
	int	shard;
};

struct sched_heads *sched_heads_new(int nshards);
void	sched_heads_free(struct sched_heads *h);
/* Jobs became ready in the shard: what was known of it is not. */
void	sched_heads_forget(struct sched *s, const char *tenant, int shard,
	    const char *topic);
/*
 * Which shards a reserve wanting m of each must read (read[], one per
 * shard; all when fresh), and each shard's generation now (gen[]).
 */
void	sched_heads_plan(struct sched *s, const char *tenant,
	    const char *topic, int m, int fresh, unsigned char *read,
	    uint64_t *gen);
/* The shard's next n scores, best first, unless forgotten since gen. */
void	sched_heads_learn(struct sched *s, const char *tenant,
	    const char *topic, int shard, uint64_t gen, const double *score,
	    int n, int more);
/*
 * Every known score into out[] (room for shards * SCHED_HEADS_MAX),
 * unsorted; seen[] and more[] per shard; *unknown when a shard is not
 * known (forgotten since the plan).
 */
size_t	sched_heads_collect(struct sched *s, const char *tenant,
	    const char *topic, struct sched_head *out, int *seen,
	    unsigned char *more, int *unknown);
/* The id key indexed for a bizkey, or ENOTFOUND. */
enum sched_err sched_q_bizkey(struct sched *s, redisContext *c,
	    const char *tenant, int shard, const char *topic,
	    const char *bizkey, char idk[SCHED_IDKEY_MAX], size_t *idklen,
	    int *broken);
/* sched_find_bizkeys() on c. */
enum sched_err sched_q_bizkeys(struct sched *s, redisContext *c,
	    const char *tenant, const char *topic, const char *const *bizkeys,
	    size_t n, struct sched_push_result *res, int *found, int *broken);

/* ---- lease.c ------------------------------------------------------------ */

/* 0 when the schema is usable; force writes the marker. */
int	sched_schema_check(struct sched *s, redisContext *c, int force,
	    int *broken);
/* Takes or renews this instance's node number; 0 or -1. */
int	sched_node_ensure(struct sched *s, redisContext *c, int *broken);
/*
 * Heartbeat, renew, hand back, take: shards taken, or -1.  *again_ms: when
 * a lease or an instance we wait for runs out (-1: no hurry).
 */
int	sched_leases_round(struct sched *s, redisContext *c, int64_t *again_ms,
	    int *broken);
void	sched_leases_release(struct sched *s, redisContext *c);

/* ---- timer.c, sub.c ----------------------------------------------------- */

/* The tenant named (added when new); lives until sched_free. */
struct sched_tenant *sched_tenant_get(struct sched *s, const char *name);
void	sched_tenants_free(struct sched *s);
/* A shard was just taken: look at all of it on the next pass. */
void	sched_shard_taken(struct sched *s, int shard);
int	sched_timer_start(struct sched *s);
void	sched_timer_stop(struct sched *s);
/* A pass is wanted soon (jobs, capacity); does not force a sweep. */
void	sched_timer_wake(struct sched *s, int unblock);
void	*sched_sub_main(void *arg);

/* ---- sched.c ------------------------------------------------------------ */

/*
 * Applies the outcome of the attempt reserved with token: finishes the job
 * or applies its schedule (retry or dead); job is updated to its new state.
 */
enum sched_err sched_apply(struct sched *s, redisContext *c,
	    struct sched_job *job, const char *token,
	    const struct schedule_outcome *outcome,
	    const struct sched_attempt *attempt, int expire_only,
	    struct schedule_decision *decision, int *broken);
/* The transition hook, when set. */
void	sched_transition(struct sched *s, const struct sched_job *job,
	    enum sched_state from, enum sched_state to,
	    const struct sched_attempt *a);

#endif
