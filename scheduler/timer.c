/*
 * timer.c - the timer thread: for the shards this instance leases, promote
 * jobs when they fall due, hand due jobs of push topics to the dispatcher,
 * expire reservations past their deadline, purge finished jobs after their
 * retention; and the registry of tenants it looks at.
 *
 * Key decision: the loop sleeps exactly until the earliest due time or
 * deadline it knows of (beanstalkd's prottick, Redis's usUntilEarliestTimer),
 * is woken early by the subscriber when a job lands earlier, and sweeps every
 * scheduler.sweep (re-reading every owned shard's heads from Redis) so a lost
 * message or a dropped connection costs at most one sweep of delay.  Work per
 * pass is bounded (PASS_BUDGET script calls) and the tenants are visited
 * round-robin, so one tenant's backlog cannot starve the others; a pass that
 * runs out of budget is followed at once by the next.  Sleeping is on the
 * real monotonic clock (pthread_cond_timedwait); what is due is computed from
 * util/clock (fake in tests) plus the measured offset to Redis time, and
 * decided by the scripts on Redis time.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "scheduler/sched_int.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define PASS_BUDGET	64	/* script calls per pass */
#define RESERVE_MIN	64	/* jobs a reserve call is given at least */
#define HEADS_PER_READ	16	/* topics of a shard looked at per pass */
#define PURGE_CALLS	8	/* purge calls per shard per sweep */
#define BACKOFF_MIN_MS	50
#define BACKOFF_MAX_MS	2000
/*
 * How soon an expired deadline whose job could not be decided (its topic
 * cannot be read now: SCHED_EAGAIN) is looked at again.
 */
#define SCHED_HELD_MS	250

/* The real monotonic clock in ms: leases and sleeping, never "due". */
static int64_t
real_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- tenants ------------------------------------------------------------ */

struct sched_tenant *
sched_tenant_get(struct sched *s, const char *name)
{
	struct sched_tenant *t;
	size_t i;
	int n = s->cfg.shards;

	pthread_mutex_lock(&s->lock);
	for (i = 0; i < s->ntenants; i++)
		if (strcmp(s->tenants[i]->name, name) == 0) {
			t = s->tenants[i];
			goto out;
		}
	t = xcalloc(1, sizeof(*t));
	t->name = xstrdup(name);
	t->next_due_ms = xcalloc((size_t)n, sizeof(*t->next_due_ms));
	t->next_deadline_ms = xcalloc((size_t)n,
	    sizeof(*t->next_deadline_ms));
	t->gen = xcalloc((size_t)n, sizeof(*t->gen));
	t->ready = xcalloc((size_t)n, 1);
	t->blocked = xcalloc((size_t)n, 1);
	t->registered_gen = (uint64_t)-1;
	s->tenants = xreallocarray(s->tenants, s->ntenants + 1,
	    sizeof(*s->tenants));
	s->tenants[s->ntenants++] = t;
out:
	pthread_mutex_unlock(&s->lock);
	return t;
}

void
sched_tenants_free(struct sched *s)
{
	size_t i;

	for (i = 0; i < s->ntenants; i++) {
		struct sched_tenant *t = s->tenants[i];

		free(t->name);
		free(t->next_due_ms);
		free(t->next_deadline_ms);
		free(t->gen);
		free(t->ready);
		free(t->blocked);
		free(t);
	}
	free(s->tenants);
	s->tenants = NULL;
	s->ntenants = 0;
}

/* A copy of the tenant list (the tenants themselves live until free). */
static struct sched_tenant **
tenants_snapshot(struct sched *s, size_t *n)
{
	struct sched_tenant **v;

	pthread_mutex_lock(&s->lock);
	*n = s->ntenants;
	v = xcalloc(*n + 1, sizeof(*v));
	if (*n > 0)
		memcpy(v, s->tenants, *n * sizeof(*v));
	pthread_mutex_unlock(&s->lock);
	return v;
}

static int
owned(struct sched *s, int shard)
{
	return __atomic_load_n(&s->owned[shard], __ATOMIC_ACQUIRE);
}

/* Shards just taken, tenants just seen: look at everything now. */
static void
invalidate_shard(struct sched *s, int shard)
{
	size_t i;

	pthread_mutex_lock(&s->lock);
	for (i = 0; i < s->ntenants; i++) {
		s->tenants[i]->next_due_ms[shard] = 0;
		s->tenants[i]->next_deadline_ms[shard] = 0;
		s->tenants[i]->ready[shard] = 1;
		s->tenants[i]->gen[shard]++;
	}
	pthread_mutex_unlock(&s->lock);
}

/* Stores a head read from Redis unless a wake-up came in meanwhile. */
static void
store_due(struct sched *s, struct sched_tenant *t, int shard, uint32_t gen0,
    int64_t head)
{
	pthread_mutex_lock(&s->lock);
	if (t->gen[shard] == gen0 || head < t->next_due_ms[shard])
		t->next_due_ms[shard] = head;
	pthread_mutex_unlock(&s->lock);
}

/* ---- the pass ----------------------------------------------------------- */

static int64_t
score_of(const redisReply *e)
{
	if (e->type != REDIS_REPLY_STRING)
		return SCHED_NO_TIME;
	return (int64_t)strtod(e->str, NULL);
}

/* A job whose expired deadline could not be decided (SCHED_EAGAIN). */
static void
expire_held(const char *tenant, const struct sched_job *job)
{
	struct log_obj lo = { tenant, job->topic, job->id, job->attempts };

	log_obj(LOG_LVL_DEBUG, &lo, "its deadline passed, but its outcome "
	    "cannot be decided: %s; held in flight",
	    sched_strerror(SCHED_EAGAIN));
}

static void
expire_shard(struct sched *s, redisContext *c, struct sched_tenant *t,
    int shard, int64_t now, int *budget, int *broken)
{
	char kf[SCHED_KEY_MAX], kj[SCHED_KEY_MAX];
	struct sched_topic_info info;
	struct schedule_outcome o;
	struct sched_attempt a;
	struct sched_job *job;
	redisReply *r, *rec;
	int64_t dl = SCHED_NO_TIME;
	enum sched_err e;
	size_t i;
	int expired = 0, held = 0;

	sched_key(kf, t->name, shard, "f", NULL);
	sched_key(kj, t->name, shard, "j", NULL);
	r = sched_pool_command(s->pool, c, broken, kf,
	    "ZRANGEBYSCORE %s -inf %lld LIMIT 0 %d", kf, (long long)now,
	    sched_batch(s));
	if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
		(void)sched_reply_err(c, r, broken, "ZRANGEBYSCORE");
		goto out;
	}
	for (i = 0; i < r->elements && *budget > 0 && !*broken; i++) {
		const redisReply *m = r->element[i];

		if (m->type != REDIS_REPLY_STRING)
			continue;
		rec = sched_pool_command(s->pool, c, broken, kj, "HGET %s %b",
		    kj, m->str, m->len);
		if (rec == NULL)
			goto out;
		if (rec->type == REDIS_REPLY_NIL) {
			/* No job: an entry no script would leave; drop it. */
			freeReplyObject(rec);
			rec = sched_pool_command(s->pool, c, broken, kf,
			    "ZREM %s %b", kf, m->str, m->len);
			if (rec == NULL)
				goto out;
			freeReplyObject(rec);
			continue;
		}
		job = rec->type == REDIS_REPLY_STRING ? sched_rec_decode(
		    t->name, shard, m->str, m->len, rec->str, rec->len) : NULL;
		freeReplyObject(rec);
		if (job == NULL || job->state != SCHED_IN_FLIGHT) {
			sched_job_free(job);
			continue;
		}
		memset(&o, 0, sizeof(o));
		memset(&a, 0, sizeof(a));
		o.retry_after_ms = -1;
		o.kind = SCHEDULE_TTR;
		a.error = "time to run expired";
		if (s->hooks.topic_info != NULL && s->hooks.topic_info(t->name,
		    job->topic, &info, s->hooks.arg) == 0 && info.push) {
			o.kind = SCHEDULE_TIMEOUT;
			a.error = "no outcome before the deadline";
		}
		a.at_ms = now;
		e = sched_apply(s, c, job, job->token, &o, &a, 1, NULL,
		    broken);
		if (e == SCHED_OK)
			expired++;
		else if (e == SCHED_EAGAIN) {
			held++;
			expire_held(t->name, job);
		}
		(*budget)--;
		sched_job_free(job);
	}
	freeReplyObject(r);
	r = sched_pool_command(s->pool, c, broken, kf,
	    "ZRANGE %s 0 0 WITHSCORES", kf);
	if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
		(void)sched_reply_err(c, r, broken, "ZRANGE");
		goto out;
	}
	if (r->elements == 2)
		dl = score_of(r->element[1]);
	/*
	 * Nothing expired although a deadline looked passed: Redis time is a
	 * little behind ours (or the job is odd); look again shortly.  A job
	 * whose topic cannot be read now (Redis owed its rebuild) waits in
	 * flight for it: looked at again four times a second, not a hundred.
	 * Until it is decided it comes first in each look, so other deadlines
	 * of the slot past the batch wait with it.
	 */
	if (expired == 0 && dl <= now)
		dl = now + (held > 0 ? SCHED_HELD_MS : 10);
	pthread_mutex_lock(&s->lock);
	t->next_deadline_ms[shard] = dl;
	pthread_mutex_unlock(&s->lock);
out:
	if (r != NULL)
		freeReplyObject(r);
}

/*
 * A pass works on slots (a tenant's shard) in two pipelined round trips
 * (see work_all), whatever the number of slots: the round trips, not the
 * shards, set the pass's length.
 */
struct slot {
	struct sched_tenant	*t;
	int			 shard;
	uint32_t		 gen0;
	int64_t			 head;		/* from the last promote */
	int			 moved;
	unsigned char		 promote, expire, dispatch;
	unsigned char		 failed, called, again, blocked;
};

/* One script call of a pass: a topic of a slot. */
struct call {
	struct slot	*sl;
	char		*topic;
	int		 n;		/* reserve: jobs asked; 0: not sent */
	int64_t		 ttr_ms;
	int		 sent;
	redisReply	*r;
};

/* Room left in a topic, or in all of a tenant's (topic NULL), in a pass. */
struct room {
	struct sched_tenant	*t;
	const char		*topic;		/* a call's; NULL: the tenant */
	int			 left;
	int			 want;		/* calls not yet given room */
};

static void
calls_free(struct call *cv, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		free(cv[i].topic);
		if (cv[i].r != NULL)
			freeReplyObject(cv[i].r);
	}
	free(cv);
}

static struct call *
call_add(struct call *cv, size_t *n, size_t *cap, struct slot *sl,
    const char *topic)
{
	if (*n == *cap) {
		*cap = *cap == 0 ? 16 : *cap * 2;
		cv = xreallocarray(cv, *cap, sizeof(*cv));
	}
	memset(&cv[*n], 0, sizeof(cv[*n]));
	cv[*n].sl = sl;
	cv[*n].topic = xstrdup(topic);
	(*n)++;
	return cv;
}

/* Reads the replies of the calls sent (in order); -1 with *broken. */
static int
read_replies(redisContext *c, struct sched_pipe *q, struct call *cv,
    size_t n, int *broken)
{
	void *rep;
	size_t i;

	for (i = 0; i < n; i++) {
		if (!cv[i].sent)
			continue;
		if (sched_pipe_getreply(q, &rep) != REDIS_OK) {
			log_warnx("redis: pipeline: %s", c->errstr);
			*broken = 1;
			return -1;
		}
		cv[i].r = rep;
	}
	return 0;
}

/* Reads n replies of one command each (ZRANGE, SMEMBERS) into rv. */
static int
read_n(redisContext *c, struct sched_pipe *q, redisReply **rv, size_t n,
    int *broken)
{
	void *rep;
	size_t i;

	for (i = 0; i < n; i++) {
		if (sched_pipe_getreply(q, &rep) != REDIS_OK) {
			log_warnx("redis: pipeline: %s", c->errstr);
			*broken = 1;
			return -1;
		}
		rv[i] = rep;
	}
	return 0;
}

static void
replies_free(redisReply **rv, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (rv[i] != NULL)
			freeReplyObject(rv[i]);
	free(rv);
}

static struct room *
room_of(struct sched *s, struct room **rv, size_t *n, size_t *cap,
    struct sched_tenant *t, const char *topic)
{
	size_t i;

	for (i = 0; i < *n; i++)
		if ((*rv)[i].t == t && (topic == NULL ? (*rv)[i].topic == NULL :
		    (*rv)[i].topic != NULL &&
		    strcmp((*rv)[i].topic, topic) == 0))
			return &(*rv)[i];
	if (*n == *cap) {
		*cap = *cap == 0 ? 8 : *cap * 2;
		*rv = xreallocarray(*rv, *cap, sizeof(**rv));
	}
	(*rv)[*n].t = t;
	(*rv)[*n].topic = topic;
	if (topic == NULL)
		(*rv)[*n].left = s->hooks.tenant_capacity != NULL ?
		    s->hooks.tenant_capacity(t->name, s->hooks.arg) : INT_MAX;
	else
		(*rv)[*n].left = s->hooks.capacity != NULL ? s->hooks.capacity(
		    t->name, topic, s->hooks.arg) : sched_batch(s);
	(*rv)[*n].want = 0;
	return &(*rv)[(*n)++];
}

/*
 * An equal part of rm's room for each call still wanting some, rm's too,
 * but at least RESERVE_MIN or all that is left: a reserve call costs Redis
 * nearly as much for one job as for ten, so a small room is not spread
 * over every shard a job at a time; the shards take turns (first_shard).
 */
static int
room_part(const struct room *rm)
{
	int n = (int)(((int64_t)rm->left + rm->want) / (rm->want + 1));

	if (n < RESERVE_MIN)
		n = rm->left < RESERVE_MIN ? rm->left : RESERVE_MIN;
	return n;
}

/* Whether the calls cv[0 .. n-1] already name topic for slot sl. */
static int
call_has(const struct call *cv, size_t n, const struct slot *sl,
    const char *topic)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (cv[i].sl == sl && strcmp(cv[i].topic, topic) == 0)
			return 1;
	return 0;
}

/* A push topic (and its reserve ttr) by the topic_info hook. */
static int
push_topic(struct sched *s, const struct slot *sl, const char *topic,
    int64_t *ttr_ms)
{
	struct sched_topic_info info;

	if (s->hooks.topic_info == NULL || s->hooks.topic_info(sl->t->name,
	    topic, &info, s->hooks.arg) != 0 || !info.push)
		return 0;
	*ttr_ms = info.timeout_ms + SCHED_PUSH_MARGIN_MS;
	return 1;
}

/*
 * Gives each reserve call its part of its topic's room and of its tenant's
 * (room_part() of each, the smaller of the two, so a tenant's topics
 * together reserve no more than the tenant may start); appends it.  A call
 * left without room is marked blocked.  The rooms are indexes into one
 * array, which room_of() may move.
 */
static void
reserve_send(struct sched *s, struct sched_pipe *q, struct call *rc,
    size_t nr, int *budget)
{
	struct room *rooms = NULL, *rm, *rt;
	struct slot *sl;
	size_t i, nrm = 0, rcap = 0, ti;
	int n, nt;

	/* The tenant's room first: its hook may set what the topics' read. */
	for (i = 0; i < nr; i++) {
		room_of(s, &rooms, &nrm, &rcap, rc[i].sl->t, NULL)->want++;
		room_of(s, &rooms, &nrm, &rcap, rc[i].sl->t,
		    rc[i].topic)->want++;
	}
	for (i = 0; i < nr; i++) {
		sl = rc[i].sl;
		ti = (size_t)(room_of(s, &rooms, &nrm, &rcap, sl->t, NULL) -
		    rooms);
		rm = room_of(s, &rooms, &nrm, &rcap, sl->t, rc[i].topic);
		rt = &rooms[ti];
		rm->want--;
		rt->want--;
		if (*budget <= 0) {
			sl->again = 1;
			continue;
		}
		if (rm->left <= 0 || rt->left <= 0) {
			sl->blocked = 1;
			continue;
		}
		n = room_part(rm);
		if ((nt = room_part(rt)) < n)
			n = nt;
		if (n > (nt = sched_batch(s)))
			n = nt;
		rm->left -= n;
		rt->left -= n;
		if (sched_st_reserve_append(s, q, sl->t->name, sl->shard,
		    rc[i].topic, n, rc[i].ttr_ms, 0) == -1) {
			sl->again = 1;
			continue;
		}
		rc[i].n = n;
		rc[i].sent = 1;
		(*budget)--;
		/* The next pass starts after the last shard given room. */
		sl->t->first_shard = (sl->shard + 1) % s->cfg.shards;
	}
	free(rooms);
}

/*
 * Promotes and dispatches in two round trips.  The first reads the due
 * heads of every slot due and the ready topics of every slot that may have
 * ready jobs; the second sends every promote call and then every reserve
 * call in one pipeline: Redis runs them in order, so a reserve sees what
 * the promote before it moved.  One promote call per due topic and pass
 * (a burst goes a batch per topic and shard at a time, and dispatch starts
 * with the first batch); a topic's room is shared among its slots
 * (room_part(), at most scheduler.batch each), the tenant's first shard
 * first; a slot that may have more is looked at again by the next pass.
 */
static void
work_all(struct sched *s, redisContext *c, struct slot *sv, size_t nsl,
    int64_t now, int *budget, int *spin, int *more, int *broken)
{
	char k[SCHED_KEY_MAX];
	struct call *pc = NULL, *rc = NULL;
	struct sched_job **jobs;
	struct sched_pipe *q1, *q2 = NULL;
	redisReply **rv = NULL, *r;
	struct slot *sl;
	size_t i, j, e, np = 0, npc = 0, pcap = 0, nrc = 0, rcap = 0, njobs;
	int64_t head, ttr;
	int moved, m;
	enum sched_err err;

	/* Round trip 1: heads and ready topics (one per node on a cluster). */
	q1 = sched_pipe_new(s->pool, c);
	for (i = 0; i < nsl; i++) {
		sl = &sv[i];
		pthread_mutex_lock(&s->lock);
		sl->dispatch = sl->promote || sl->t->ready[sl->shard];
		pthread_mutex_unlock(&s->lock);
		if (sl->promote) {
			sched_key(k, sl->t->name, sl->shard, "h", NULL);
			sched_pipe_append(q1, k, "ZRANGE %s 0 %d WITHSCORES",
			    k, HEADS_PER_READ - 1);
			np++;
		}
		if (sl->dispatch) {
			sched_key(k, sl->t->name, sl->shard, "rt", NULL);
			sched_pipe_append(q1, k, "SMEMBERS %s", k);
			np++;
		}
	}
	if (np == 0)
		goto out;
	rv = xcalloc(np, sizeof(*rv));
	if (read_n(c, q1, rv, np, broken) == -1)
		goto out;
	for (i = 0, j = 0; i < nsl; i++) {
		sl = &sv[i];
		if (sl->promote) {
			r = rv[j++];
			if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
				(void)sched_reply_err(c, r, broken, "ZRANGE");
				sl->failed = 1;
			} else {
				sl->head = r->elements >= 2 ?
				    score_of(r->element[1]) : SCHED_NO_TIME;
				for (e = 0; e + 1 < r->elements; e += 2) {
					if (r->element[e]->type !=
					    REDIS_REPLY_STRING ||
					    score_of(r->element[e + 1]) > now)
						break;
					pc = call_add(pc, &npc, &pcap, sl,
					    r->element[e]->str);
					if (push_topic(s, sl,
					    r->element[e]->str, &ttr)) {
						rc = call_add(rc, &nrc, &rcap,
						    sl, r->element[e]->str);
						rc[nrc - 1].ttr_ms = ttr;
					}
				}
			}
		}
		if (sl->dispatch) {
			r = rv[j++];
			if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
				(void)sched_reply_err(c, r, broken,
				    "SMEMBERS");
				sl->again = 1;	/* try again next pass */
				continue;
			}
			for (e = 0; e < r->elements; e++)
				if (r->element[e]->type == REDIS_REPLY_STRING &&
				    !call_has(rc, nrc, sl,
				    r->element[e]->str) &&
				    push_topic(s, sl, r->element[e]->str,
				    &ttr)) {
					rc = call_add(rc, &nrc, &rcap, sl,
					    r->element[e]->str);
					rc[nrc - 1].ttr_ms = ttr;
				}
		}
	}

	/* Round trip 2: every promote, then every reserve. */
	q2 = sched_pipe_new(s->pool, c);
	for (i = 0; i < npc; i++) {
		if (pc[i].sl->failed)
			continue;
		if (*budget <= 0) {
			*more = 1;
			break;
		}
		if (sched_st_promote_append(s, q2, pc[i].sl->t->name,
		    pc[i].sl->shard, pc[i].topic) == -1)
			continue;
		pc[i].sent = 1;
		(*budget)--;
	}
	reserve_send(s, q2, rc, nrc, budget);
	if (read_replies(c, q2, pc, npc, broken) == -1 ||
	    read_replies(c, q2, rc, nrc, broken) == -1)
		goto out;
	for (i = 0; i < npc; i++) {
		if (!pc[i].sent)
			continue;
		sl = pc[i].sl;
		r = pc[i].r;
		pc[i].r = NULL;
		/* Run again after the reserves: look at the slot again. */
		if (r->type == REDIS_REPLY_ERROR &&
		    strncmp(r->str, "NOSCRIPT", 8) == 0)
			sl->again = 1;
		err = sched_st_promote_reply(s, c, r, sl->t->name, sl->shard,
		    pc[i].topic, &moved, &m, &head, broken);
		if (err != SCHED_OK) {
			/* Logged; do not hammer Redis with it. */
			if (!*broken && !sl->failed)
				store_due(s, sl->t, sl->shard, sl->gen0,
				    now + s->cfg.sweep_ms);
			sl->failed = 1;
			continue;
		}
		sl->called = 1;
		sl->moved += moved;
		if (moved > 0)	/* pull reserves must look again (heads.c) */
			sched_heads_forget(s, sl->t->name, sl->shard,
			    pc[i].topic);
		sl->head = head;
		if (m)
			*more = 1;	/* the next pass goes on */
	}
	if (*broken)
		goto out;
	for (i = 0; i < nsl; i++) {
		if (!(sl = &sv[i])->promote || sl->failed)
			continue;
		if (sl->called && sl->moved == 0)
			*spin = 1;	/* we thought it due, Redis disagrees */
		store_due(s, sl->t, sl->shard, sl->gen0, sl->head);
	}
	for (i = 0; i < nrc; i++) {
		if (!rc[i].sent)
			continue;
		sl = rc[i].sl;
		r = rc[i].r;
		rc[i].r = NULL;
		err = sched_st_reserve_reply(s, c, r, sl->t->name, sl->shard,
		    rc[i].topic, rc[i].n, rc[i].ttr_ms, 0, &jobs, &njobs,
		    broken);
		if (err != SCHED_OK) {
			sl->again = 1;
			continue;
		}
		for (e = 0; e < njobs; e++) {
			sched_transition(s, jobs[e], SCHED_READY,
			    SCHED_IN_FLIGHT, NULL);
			if (s->hooks.deliver != NULL)
				s->hooks.deliver(jobs[e], s->hooks.arg);
			else
				sched_job_free(jobs[e]);
		}
		free(jobs);
		if ((int)njobs == rc[i].n)
			sl->again = 1;
	}
	for (i = 0; i < nsl; i++) {
		if (!(sl = &sv[i])->dispatch)
			continue;
		pthread_mutex_lock(&s->lock);
		sl->t->ready[sl->shard] = sl->again;
		if (sl->blocked)
			sl->t->blocked[sl->shard] = 1;
		pthread_mutex_unlock(&s->lock);
		*more |= sl->again;
	}
out:
	sched_pipe_free(q1);
	sched_pipe_free(q2);
	if (rv != NULL)
		replies_free(rv, np);
	calls_free(pc, npc);
	calls_free(rc, nrc);
}

/* One pass over the owned shards; 1 when work is left for the next. */
static int
pass(struct sched *s, redisContext *c, int *spin, int *broken)
{
	struct sched_tenant **tv, *t;
	struct slot *sv = NULL, *sl;
	size_t nt, k, i, nsl = 0;
	int64_t now, due, dl;
	int budget = PASS_BUDGET, more = 0, shard, j, rdy, unblock;
	uint32_t gen;

	pthread_mutex_lock(&s->lock);
	unblock = s->unblock;
	s->unblock = 0;
	if (unblock)
		for (i = 0; i < s->ntenants; i++)
			for (shard = 0; shard < s->cfg.shards; shard++)
				if (s->tenants[i]->blocked[shard]) {
					s->tenants[i]->blocked[shard] = 0;
					s->tenants[i]->ready[shard] = 1;
				}
	if (s->quiesced) {
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	pthread_mutex_unlock(&s->lock);

	tv = tenants_snapshot(s, &nt);
	now = sched_now_ms(s);
	sv = xcalloc(nt * (size_t)s->cfg.shards + 1, sizeof(*sv));
	for (k = 0; k < nt; k++) {
		t = tv[(s->rr + k) % nt];
		for (j = 0; j < s->cfg.shards; j++) {
			shard = (t->first_shard + j) % s->cfg.shards;
			if (!owned(s, shard))
				continue;
			pthread_mutex_lock(&s->lock);
			due = t->next_due_ms[shard];
			dl = t->next_deadline_ms[shard];
			rdy = t->ready[shard];
			gen = t->gen[shard];
			pthread_mutex_unlock(&s->lock);
			if (due > now && dl > now && !rdy)
				continue;
			sl = &sv[nsl++];
			sl->t = t;
			sl->shard = shard;
			sl->gen0 = gen;
			sl->promote = due <= now;
			sl->expire = dl <= now;
		}
	}
	if (nsl == 0 || sched_st_pipe_prepare(s, c, broken) == -1)
		goto out;
	work_all(s, c, sv, nsl, now, &budget, spin, &more, broken);
	for (i = 0; i < nsl && !*broken; i++)
		if (sv[i].expire) {
			if (budget <= 0) {
				more = 1;
				break;
			}
			expire_shard(s, c, sv[i].t, sv[i].shard, now, &budget,
			    broken);
		}
	pthread_mutex_lock(&s->lock);
	for (i = 0; i < nsl; i++)
		if (sv[i].t->next_due_ms[sv[i].shard] <= now && !*spin)
			more = 1;
	pthread_mutex_unlock(&s->lock);
out:
	if (nt > 0)
		s->rr = (s->rr + 1) % nt;
	free(sv);
	free(tv);
	return more;
}

/* ---- the sweep ---------------------------------------------------------- */

static void
learn_tenants(struct sched *s, redisContext *c, int *broken)
{
	redisReply *r;
	size_t i;

	r = sched_pool_command(s->pool, c, broken, "rd:tenants",
	    "SMEMBERS rd:tenants");
	if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
		(void)sched_reply_err(c, r, broken, "SMEMBERS");
	} else {
		for (i = 0; i < r->elements; i++)
			if (r->element[i]->type == REDIS_REPLY_STRING &&
			    sched_valid_tenant(r->element[i]->str))
				(void)sched_tenant_get(s, r->element[i]->str);
	}
	if (r != NULL)
		freeReplyObject(r);
}

/*
 * Redis time minus ours, for deciding when to ask (never what is due).  One
 * heartbeat's sample is off by up to half its round trip, and on a busy
 * machine a round trip can take tens of ms: a timer that thinks it earlier
 * than it is wakes that much late, one that thinks it later asks early and
 * is told to wait.  So each sweep takes a TIME sample and the one with the
 * shortest round trip of the last SCHED_OFFSET_SAMPLES is used (NTP's filter).
 */
static void
measure_offset(struct sched *s, redisContext *c, int *broken)
{
	redisReply *r;
	int64_t m0, m1, w0, srv, rtt, off;
	size_t i, n, best;

	if (s->cfg.fake_clock)
		return;
	m0 = clock_mono_us();
	w0 = clock_wall_ms();
	r = redisCommand(c, "TIME");
	m1 = clock_mono_us();
	sched_redis_count_reply(r);
	if (r == NULL || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    r->element[1]->type != REDIS_REPLY_STRING) {
		(void)sched_reply_err(c, r, broken, "TIME");
		goto out;
	}
	srv = strtoll(r->element[0]->str, NULL, 10) * 1000000 +
	    strtoll(r->element[1]->str, NULL, 10);
	/* w0 is truncated to the ms: its middle, plus half the trip. */
	n = s->noff % SCHED_OFFSET_SAMPLES;
	s->off_us[n] = srv - (w0 * 1000 + 500 + (m1 - m0) / 2);
	s->rtt_us[n] = m1 - m0;
	s->noff++;
	n = s->noff < SCHED_OFFSET_SAMPLES ? s->noff : SCHED_OFFSET_SAMPLES;
	for (i = 1, best = 0, rtt = s->rtt_us[0]; i < n; i++)
		if (s->rtt_us[i] < rtt) {
			rtt = s->rtt_us[i];
			best = i;
		}
	off = s->off_us[best];
	off = off >= 0 ? (off + 500) / 1000 : -((-off + 500) / 1000);
	__atomic_store_n(&s->offset_best_ms, off, __ATOMIC_RELAXED);
	__atomic_store_n(&s->offset_best_ok, 1, __ATOMIC_RELEASE);
out:
	if (r != NULL)
		freeReplyObject(r);
}

/*
 * Re-reads every owned shard's heads (one pipeline): the earliest delay, the
 * earliest deadline, whether topics have ready jobs, the oldest finished
 * job; then purges the shards whose oldest finished job is past retention.
 */
static void
sweep(struct sched *s, redisContext *c, int *broken)
{
	struct sched_tenant **tv, *t;
	char k[SCHED_KEY_MAX];
	uint32_t *gens;
	unsigned char *purge;
	struct sched_pipe *q;
	redisReply *r[4];
	void *rep;
	size_t nt, i, sent = 0, at;
	int shard, j, n, more, calls;
	int64_t cut = sched_now_ms(s) - s->cfg.retention_ms;

	measure_offset(s, c, broken);
	if (*broken)
		return;
	learn_tenants(s, c, broken);
	if (*broken)
		return;
	tv = tenants_snapshot(s, &nt);
	gens = xcalloc(nt * (size_t)s->cfg.shards + 1, sizeof(*gens));
	purge = xcalloc(nt * (size_t)s->cfg.shards + 1, 1);
	pthread_mutex_lock(&s->lock);
	for (i = 0; i < nt; i++)
		for (shard = 0; shard < s->cfg.shards; shard++)
			gens[i * (size_t)s->cfg.shards + (size_t)shard] =
			    tv[i]->gen[shard];
	pthread_mutex_unlock(&s->lock);
	q = sched_pipe_new(s->pool, c);
	for (i = 0; i < nt; i++)
		for (shard = 0; shard < s->cfg.shards; shard++) {
			if (!owned(s, shard))
				continue;
			t = tv[i];
			sched_key(k, t->name, shard, "h", NULL);
			sched_pipe_append(q, k, "ZRANGE %s 0 0 WITHSCORES", k);
			sched_key(k, t->name, shard, "f", NULL);
			sched_pipe_append(q, k, "ZRANGE %s 0 0 WITHSCORES", k);
			sched_key(k, t->name, shard, "rt", NULL);
			sched_pipe_append(q, k, "SCARD %s", k);
			sched_key(k, t->name, shard, "z", NULL);
			sched_pipe_append(q, k, "ZRANGE %s 0 0 WITHSCORES", k);
			sent++;
		}
	for (i = 0; i < nt && sent > 0; i++)
		for (shard = 0; shard < s->cfg.shards; shard++) {
			if (!owned(s, shard))
				continue;
			t = tv[i];
			at = i * (size_t)s->cfg.shards + (size_t)shard;
			for (j = 0; j < 4; j++) {
				if (sched_pipe_getreply(q, &rep) != REDIS_OK) {
					*broken = 1;
					while (--j >= 0)
						freeReplyObject(r[j]);
					goto out;
				}
				r[j] = rep;
			}
			sent--;
			pthread_mutex_lock(&s->lock);
			if (r[0]->type == REDIS_REPLY_ARRAY) {
				int64_t h = r[0]->elements == 2 ?
				    score_of(r[0]->element[1]) : SCHED_NO_TIME;

				if (t->gen[shard] == gens[at] ||
				    h < t->next_due_ms[shard])
					t->next_due_ms[shard] = h;
			}
			if (r[1]->type == REDIS_REPLY_ARRAY)
				t->next_deadline_ms[shard] =
				    r[1]->elements == 2 ?
				    score_of(r[1]->element[1]) : SCHED_NO_TIME;
			/* Ready jobs: try them again, capacity-bound or not. */
			if (r[2]->type == REDIS_REPLY_INTEGER &&
			    r[2]->integer > 0) {
				t->ready[shard] = 1;
				t->blocked[shard] = 0;
			}
			pthread_mutex_unlock(&s->lock);
			if (r[3]->type == REDIS_REPLY_ARRAY &&
			    r[3]->elements == 2 &&
			    score_of(r[3]->element[1]) <= cut)
				purge[at] = 1;
			for (j = 0; j < 4; j++)
				freeReplyObject(r[j]);
		}
	/* Finished jobs past their retention leave. */
	for (i = 0; i < nt && !*broken; i++)
		for (shard = 0; shard < s->cfg.shards && !*broken; shard++) {
			if (!purge[i * (size_t)s->cfg.shards + (size_t)shard])
				continue;
			calls = 0;
			do {
				if (sched_st_purge(s, c, tv[i]->name, shard, &n,
				    &more, broken) != SCHED_OK)
					break;
			} while (more && ++calls < PURGE_CALLS);
		}
out:
	sched_pipe_free(q);
	free(purge);
	free(gens);
	free(tv);
}

/* ---- the thread --------------------------------------------------------- */

/* Sleeps up to ms (real time) unless woken, kicked or stopping. */
static void
timer_wait(struct sched *s, int64_t ms)
{
	pthread_mutex_lock(&s->lock);
	if (!s->stopping && !s->kicked && !s->woken && !s->unblock &&
	    ms > 0)
		(void)clock_cond_wait_us(&s->cond, &s->lock, ms * 1000);
	s->woken = 0;
	pthread_mutex_unlock(&s->lock);
}

/* How long until the earliest known due time or deadline (ms, >= 0). */
static int64_t
until_next(struct sched *s)
{
	int64_t now = sched_now_ms(s), best = SCHED_NO_TIME, v;
	size_t i;
	int shard;

	pthread_mutex_lock(&s->lock);
	for (i = 0; i < s->ntenants; i++)
		for (shard = 0; shard < s->cfg.shards; shard++) {
			if (!owned(s, shard))
				continue;
			v = s->tenants[i]->next_due_ms[shard];
			if (v < best)
				best = v;
			v = s->tenants[i]->next_deadline_ms[shard];
			if (v < best)
				best = v;
			if (s->tenants[i]->ready[shard])
				best = now;
		}
	pthread_mutex_unlock(&s->lock);
	if (best == SCHED_NO_TIME)
		return INT64_MAX;
	return best > now ? best - now : 0;
}

static void
set_state(struct sched *s, int ok, const char *why)
{
	pthread_mutex_lock(&s->lock);
	s->redis_ok = ok;
	if (why != NULL && s->schema_ok != 0)
		snprintf(s->why, sizeof(s->why), "%.*s",
		    (int)sizeof(s->why) - 1, why);
	pthread_mutex_unlock(&s->lock);
}

static int
stopping(struct sched *s)
{
	int v;

	pthread_mutex_lock(&s->lock);
	v = s->stopping;
	pthread_mutex_unlock(&s->lock);
	return v;
}

/*
 * Connects and checks the schema and node.  NULL on failure, with *refused
 * set when Redis answered but its schema is not one we know.
 */
/*
 * The run_id of the Redis behind c, compared with the one seen before: a
 * new one is another process (a restart, a failover), which may have come
 * back without the writes it took last (a snapshot, a replica behind)
 * though the schema marker is there.  Told to hooks->redis_restarted,
 * which has the journal's unfinished jobs checked against it.  Only the
 * timer's connections ask: a restart or failover breaks them.  On a
 * cluster this is the one node c is on: another master's failover is not
 * seen here.
 */
static void
check_run_id(struct sched *s, redisContext *c)
{
	char was[sizeof(s->run_id)], now[sizeof(s->run_id)];
	redisReply *r;
	int known;

	r = redisCommand(c, "INFO server");
	known = r != NULL && r->type == REDIS_REPLY_STRING &&
	    sched_info_field(r->str, "run_id", now, sizeof(now)) == 0;
	if (r != NULL)
		freeReplyObject(r);
	if (!known)
		return;		/* INFO refused (an ACL): not known */
	pthread_mutex_lock(&s->lock);
	memcpy(was, s->run_id, sizeof(was));
	memcpy(s->run_id, now, sizeof(now));
	pthread_mutex_unlock(&s->lock);
	if (was[0] == '\0' || strcmp(was, now) == 0)
		return;
	log_warnx("redis: another Redis process answers (run_id %.12s... "
	    "was %.12s...: a restart or a failover); the writes it took "
	    "last may be gone, so the journal's unfinished jobs are checked "
	    "against it", now, was);
	if (s->hooks.redis_restarted != NULL)
		s->hooks.redis_restarted(s->hooks.arg);
}

static redisContext *
timer_connect(struct sched *s, int *refused)
{
	char why[200], msg[256];
	redisContext *c;
	int broken = 0;

	*refused = 0;
	c = sched_pool_connect(s->pool, why, sizeof(why));
	if (c == NULL) {
		snprintf(msg, sizeof(msg), "redis unreachable: %s", why);
		set_state(s, 0, msg);
		return NULL;
	}
	if (sched_schema_check(s, c, 0, &broken) == -1 ||
	    sched_node_ensure(s, c, &broken) == -1) {
		if (broken)
			set_state(s, 0, "redis connection lost");
		else
			*refused = 1;
		redisFree(c);
		return NULL;
	}
	check_run_id(s, c);
	set_state(s, 1, NULL);
	return c;
}

static void *
timer_main(void *arg)
{
	struct sched *s = arg;
	redisContext *c = NULL;
	int64_t backoff = BACKOFF_MIN_MS, next_sweep = 0, next_lease = 0;
	int64_t now, sleep_ms, lease_every, again;
	int broken, more, spin, kicked, force_sweep = 1, taken, abandon;
	int was_down = 0, refused;

	lease_every = s->cfg.lease_ms / 3 > 0 ? s->cfg.lease_ms / 3 : 1;
	while (!stopping(s)) {
		if (c == NULL) {
			if ((c = timer_connect(s, &refused)) == NULL) {
				__atomic_add_fetch(&s->passes, 1,
				    __ATOMIC_RELEASE);
				if (refused) {
					/* Logged; look again now and then. */
					timer_wait(s, s->cfg.sweep_ms);
					continue;
				}
				if (!was_down)
					log_warnx("scheduler: Redis "
					    "unavailable; retrying with "
					    "backoff");
				was_down = 1;
				timer_wait(s, backoff);
				backoff = backoff * 2 > BACKOFF_MAX_MS ?
				    BACKOFF_MAX_MS : backoff * 2;
				continue;
			}
			if (was_down)
				log_info("scheduler: Redis is back; resuming");
			was_down = 0;
			backoff = BACKOFF_MIN_MS;
			next_lease = 0;
			force_sweep = 1;
		}
		broken = 0;
		pthread_mutex_lock(&s->lock);
		kicked = s->kicked;
		s->kicked = 0;
		pthread_mutex_unlock(&s->lock);

		now = real_ms();
		if (now >= next_lease) {
			taken = sched_leases_round(s, c, &again, &broken);
			next_lease = now + lease_every;
			if (again >= 0 && again < lease_every)
				next_lease = now + again;
			if (taken > 0)
				force_sweep = 1;
			if (!broken)
				(void)sched_node_ensure(s, c, &broken);
		}
		if (!broken && (force_sweep || kicked || now >= next_sweep)) {
			if (sched_schema_check(s, c, 0, &broken) == 0) {
				sweep(s, c, &broken);
			} else if (!broken) {
				/* A schema we do not know appeared: stop. */
				redisFree(c);
				c = NULL;
				continue;
			}
			next_sweep = now + s->cfg.sweep_ms;
			force_sweep = 0;
		}
		spin = 0;
		more = broken ? 0 : pass(s, c, &spin, &broken);
		(void)spin;
		__atomic_add_fetch(&s->passes, 1, __ATOMIC_RELEASE);
		if (broken) {
			redisFree(c);
			c = NULL;
			set_state(s, 0, "redis connection lost");
			continue;
		}
		if (more)
			continue;
		sleep_ms = until_next(s);
		if (sleep_ms < 1)
			sleep_ms = 1;	/* Redis time has not reached it yet */
		now = real_ms();
		if (sleep_ms > next_sweep - now)
			sleep_ms = next_sweep - now;
		if (sleep_ms > next_lease - now)
			sleep_ms = next_lease - now;
		timer_wait(s, sleep_ms);
	}
	pthread_mutex_lock(&s->lock);
	abandon = s->abandon;
	pthread_mutex_unlock(&s->lock);
	if (c != NULL && !abandon)
		sched_leases_release(s, c);
	if (c != NULL)
		redisFree(c);
	return NULL;
}

void
sched_timer_wake(struct sched *s, int unblock)
{
	pthread_mutex_lock(&s->lock);
	s->woken = 1;
	if (unblock)
		s->unblock = 1;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

void
sched_kick(struct sched *s)
{
	pthread_mutex_lock(&s->lock);
	s->kicked = 1;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

void
sched_shard_taken(struct sched *s, int shard)
{
	invalidate_shard(s, shard);
}

int
sched_timer_start(struct sched *s)
{
	int err;

	if (pipe(s->sub_fd) == -1)
		return -1;
	(void)fcntl(s->sub_fd[0], F_SETFL, O_NONBLOCK);
	(void)fcntl(s->sub_fd[1], F_SETFL, O_NONBLOCK);
	(void)fcntl(s->sub_fd[0], F_SETFD, FD_CLOEXEC);
	(void)fcntl(s->sub_fd[1], F_SETFD, FD_CLOEXEC);
	if ((err = pthread_create(&s->timer_thr, NULL, timer_main, s)) != 0)
		goto fail;
	if ((err = pthread_create(&s->sub_thr, NULL, sched_sub_main,
	    s)) != 0) {
		pthread_mutex_lock(&s->lock);
		s->stopping = 1;
		pthread_cond_signal(&s->cond);
		pthread_mutex_unlock(&s->lock);
		pthread_join(s->timer_thr, NULL);
		goto fail;
	}
	(void)pthread_setname_np(s->timer_thr, "sched-timer");
	(void)pthread_setname_np(s->sub_thr, "sched-sub");
	s->started = 1;
	return 0;
fail:
	close(s->sub_fd[0]);
	close(s->sub_fd[1]);
	s->sub_fd[0] = s->sub_fd[1] = -1;
	errno = err;
	return -1;
}

void
sched_timer_stop(struct sched *s)
{
	char b = 'x';

	if (!s->started)
		return;
	pthread_mutex_lock(&s->lock);
	s->stopping = 1;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	(void)write(s->sub_fd[1], &b, 1);
	pthread_join(s->timer_thr, NULL);
	pthread_join(s->sub_thr, NULL);
	close(s->sub_fd[0]);
	close(s->sub_fd[1]);
	s->sub_fd[0] = s->sub_fd[1] = -1;
	s->started = 0;
}
