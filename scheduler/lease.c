/*
 * lease.c - who does what among the instances sharing one Redis: the schema
 * marker, the node number each instance's ids carry, and the shard leases
 * that say which instance's timer scans which shard index.
 *
 * Key decision: leases are plain SET NX PX keys (rd:lease:N, rd:node:N)
 * renewed by a compare-and-expire script, and each instance takes at most its
 * fair share, ceil(shards / live instances), counting the live ones in a
 * sorted set of heartbeats; an instance over its share gives shards back, so
 * a new instance gets work within a few renewals and a dead one's shards are
 * free once its leases time out.  Leases decide efficiency only: every state
 * change is an atomic script, so two timers on one shard (a paused instance
 * whose lease ran out) cost duplicate calls, never a duplicate delivery.
 * Leases run on real time even under the fake clock, because Redis expires
 * them in real time.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/sched_int.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define NODE_TTL_MIN_MS		60000
#define NODE_TRIES		64

static int64_t
node_ttl(const struct sched *s)
{
	return s->cfg.lease_ms * 12 > NODE_TTL_MIN_MS ? s->cfg.lease_ms * 12 :
	    NODE_TTL_MIN_MS;
}

static void
set_why(struct sched *s, const char *why)
{
	pthread_mutex_lock(&s->lock);
	snprintf(s->why, sizeof(s->why), "%s", why);
	pthread_mutex_unlock(&s->lock);
}

/*
 * Checks the schema marker, writing it on a Redis that never had one for us
 * (or after a loss when no redis_lost hook will rebuild and mark it).  A
 * marker that vanished after we saw it means Redis lost its data: logged
 * once per loss, and the redis_lost hook is called on every check that
 * finds it gone until it is written again.  force writes it
 * (sched_mark_schema).  0 when the schema is usable, -1 when refused or on
 * an error.
 */
int
sched_schema_check(struct sched *s, redisContext *c, int force, int *broken)
{
	char ver[24], shards[24], oldest[24], why[256];
	const char *argv[6];
	redisReply *r;
	int seen, rc = -1, lost = 0, report = 0;
	long long v = -1, n = -1, written = 0;

	pthread_mutex_lock(&s->lock);
	seen = s->schema_seen;
	pthread_mutex_unlock(&s->lock);
	snprintf(ver, sizeof(ver), "%d", SCHED_SCHEMA_VERSION);
	snprintf(shards, sizeof(shards), "%d", s->cfg.shards);
	snprintf(oldest, sizeof(oldest), "%d", SCHED_SCHEMA_OLDEST);
	argv[0] = "rd:schema";
	argv[1] = "";
	argv[2] = force || !seen || s->hooks.redis_lost == NULL ? "1" : "0";
	argv[3] = ver;
	argv[4] = shards;
	argv[5] = oldest;
	r = sched_script_run(s->scripts, c, SCRIPT_SCHEMA, 1, 5, argv, NULL,
	    broken);
	if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
		(void)sched_reply_err(c, r, broken, "schema");
		goto out;
	}
	if (r->elements == 0) {
		lost = 1;
	} else if (r->elements == 3 &&
	    r->element[0]->type == REDIS_REPLY_STRING &&
	    r->element[1]->type == REDIS_REPLY_STRING &&
	    r->element[2]->type == REDIS_REPLY_INTEGER) {
		v = strtoll(r->element[0]->str, NULL, 10);
		n = strtoll(r->element[1]->str, NULL, 10);
		written = r->element[2]->integer;
		lost = written && seen && !force;
	}
	if (r->elements != 0 && v != SCHED_SCHEMA_VERSION) {
		snprintf(why, sizeof(why), "Redis holds retryd schema version "
		    "%s; this retryd knows version %d only (see "
		    "docs/internals/REDIS-SCHEMA.md)",
		    r->element[0]->type == REDIS_REPLY_STRING ?
		    r->element[0]->str : "?", SCHED_SCHEMA_VERSION);
		goto refuse;
	}
	if (r->elements != 0 && n != s->cfg.shards) {
		snprintf(why, sizeof(why), "Redis was set up with %lld shards "
		    "per tenant, the config says %d (scheduler.shards cannot "
		    "change)", n, s->cfg.shards);
		goto refuse;
	}
	pthread_mutex_lock(&s->lock);
	s->schema_ok = 1;
	s->why[0] = '\0';
	if (lost && !s->lost_reported) {
		s->lost_reported = 1;
		report = 1;
	}
	if (r->elements != 0 && !lost) {
		s->schema_seen = 1;
		s->lost_reported = 0;
	}
	if (lost)
		s->registered_gen++;
	pthread_mutex_unlock(&s->lock);
	/*
	 * Logged once per loss, but the hook is told on every check that
	 * finds the marker gone, until it is back: a check that read the
	 * marker gone just before a rebuild wrote it again reports the old
	 * loss after the rebuild, and had it been told only once, a second
	 * loss before the next check saw the marker would never be told.
	 * The restore worker takes a request for a Redis whose marker is
	 * there as nothing to do.
	 */
	if (report)
		log_obj(LOG_LVL_ERROR, NULL, "redis: the schema marker is "
		    "gone: Redis lost its data");
	if (lost && s->hooks.redis_lost != NULL)
		s->hooks.redis_lost(s->hooks.arg);
	rc = 0;
	goto out;
refuse:
	pthread_mutex_lock(&s->lock);
	if (s->schema_ok != 0)
		log_obj(LOG_LVL_ERROR, NULL, "redis: %s", why);
	s->schema_ok = 0;
	pthread_mutex_unlock(&s->lock);
	set_why(s, why);
out:
	if (r != NULL)
		freeReplyObject(r);
	return rc;
}

/*
 * Renews (ttl > 0) or releases (ttl 0) a lease key holder holds; 1 it
 * did, 0 not, -1.
 */
static int
lease_op(struct sched *s, redisContext *c, const char *key,
    const char *holder, int64_t ttl, int *broken)
{
	char t[24];
	const char *argv[4];
	redisReply *r;
	int rc = -1;

	snprintf(t, sizeof(t), "%lld", (long long)ttl);
	argv[0] = key;
	argv[1] = "";
	argv[2] = holder;
	argv[3] = t;
	r = sched_script_run(s->scripts, c, SCRIPT_LEASE, 1, 3, argv, NULL,
	    broken);
	if (r != NULL && r->type == REDIS_REPLY_INTEGER)
		rc = r->integer == 1;
	else
		(void)sched_reply_err(c, r, broken, "lease");
	if (r != NULL)
		freeReplyObject(r);
	return rc;
}

/* SET key holder NX PX ttl; 1 taken, 0 held by another, -1 error. */
static int
lease_take(struct sched *s, redisContext *c, const char *key, int64_t ttl,
    int *broken)
{
	redisReply *r;
	int rc = -1;

	r = sched_pool_command(s->pool, c, broken, key,
	    "SET %s %s NX PX %lld", key, s->holder, (long long)ttl);
	if (r == NULL)
		*broken = 1;
	else if (r->type == REDIS_REPLY_STATUS)
		rc = 1;
	else if (r->type == REDIS_REPLY_NIL)
		rc = 0;
	if (r != NULL)
		freeReplyObject(r);
	return rc;
}

static int
node_ensure(struct sched *s, redisContext *c, int *broken)
{
	char key[64];
	redisReply *r;
	long long start;
	int node, i, got;

	pthread_mutex_lock(&s->lock);
	node = s->node;
	pthread_mutex_unlock(&s->lock);
	if (node >= 0) {
		snprintf(key, sizeof(key), "rd:node:%d", node);
		if ((got = lease_op(s, c, key, s->holder, node_ttl(s),
		    broken)) != 0)
			return got == 1 ? 0 : -1;
		/*
		 * Lost: Redis lost its data (every instance's at once, and
		 * the counter with them), or we stalled past its time to
		 * live.  Our own number again first: an instance that took
		 * another's number while that one has not noticed its loss
		 * yet would issue the same ids as it until it does (the
		 * same ms, node and sequence), and a push whose id is taken
		 * is not a new job.
		 */
		if ((got = lease_take(s, c, key, node_ttl(s), broken)) == -1)
			return -1;
		if (got == 1) {
			log_warnx("redis: node %d was lost; taken again", node);
			return 0;
		}
		log_warnx("redis: node %d was lost and is another's; taking "
		    "another", node);
	}
	r = sched_pool_command(s->pool, c, broken, "rd:node", "INCR rd:node");
	if (r == NULL || r->type != REDIS_REPLY_INTEGER) {
		(void)sched_reply_err(c, r, broken, "INCR");
		if (r != NULL)
			freeReplyObject(r);
		return -1;
	}
	/*
	 * From the counter, which spreads the instances, plus a random
	 * offset: a counter Redis lost starts again at 1, where an instance
	 * that has not noticed the loss yet may still be.
	 */
	start = r->integer + s->node_salt;
	freeReplyObject(r);
	for (i = 0; i < NODE_TRIES; i++) {
		node = (int)((start + i) % (ID_MAX_NODE + 1));
		snprintf(key, sizeof(key), "rd:node:%d", node);
		if ((got = lease_take(s, c, key, node_ttl(s), broken)) == -1)
			return -1;
		if (got == 1) {
			pthread_mutex_lock(&s->lock);
			s->node = node;
			pthread_mutex_unlock(&s->lock);
			id_set_node((uint32_t)node);
			log_info("scheduler: instance %s has node %d",
			    s->cfg.instance, node);
			return 0;
		}
	}
	log_warnx("redis: no free node number after %d tries", NODE_TRIES);
	return -1;
}

int
sched_node_ensure(struct sched *s, redisContext *c, int *broken)
{
	int rc;

	pthread_mutex_lock(&s->node_lock);
	rc = node_ensure(s, c, broken);
	pthread_mutex_unlock(&s->node_lock);
	return rc;
}

/*
 * Heartbeat of holder: live instances (ttl 0: it leaves), or -1.  Learns
 * Redis time; *other_ms: when another instance's heartbeat runs out (-1:
 * none).
 */
static int
heartbeat(struct sched *s, redisContext *c, const char *holder, int64_t ttl,
    int64_t *other_ms, int *broken)
{
	char t[24];
	const char *argv[4];
	redisReply *r;
	int64_t before, after, server;
	int live = -1;

	*other_ms = -1;
	snprintf(t, sizeof(t), "%lld", (long long)ttl);
	argv[0] = "rd:instances";
	argv[1] = "";
	argv[2] = holder;
	argv[3] = t;
	before = clock_wall_ms();
	r = sched_script_run(s->scripts, c, SCRIPT_HEARTBEAT, 1, 3, argv,
	    NULL, broken);
	after = clock_wall_ms();
	if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
	    r->element[0]->type == REDIS_REPLY_INTEGER &&
	    r->element[1]->type == REDIS_REPLY_STRING &&
	    r->element[2]->type == REDIS_REPLY_STRING) {
		live = (int)r->element[0]->integer;
		server = strtoll(r->element[1]->str, NULL, 10);
		*other_ms = strtoll(r->element[2]->str, NULL, 10);
		if (!s->cfg.fake_clock)
			__atomic_store_n(&s->offset_ms,
			    server - (before + after) / 2, __ATOMIC_RELAXED);
	} else {
		(void)sched_reply_err(c, r, broken, "heartbeat");
	}
	if (r != NULL)
		freeReplyObject(r);
	return live;
}

/* Time to live (ms) of a lease another instance holds; -1 when unknown. */
static int64_t
lease_pttl(struct sched *s, redisContext *c, const char *key, int *broken)
{
	redisReply *r;
	int64_t v = -1;

	r = sched_pool_command(s->pool, c, broken, key, "PTTL %s", key);
	if (r == NULL)
		*broken = 1;
	else if (r->type == REDIS_REPLY_INTEGER)
		v = r->integer;
	if (r != NULL)
		freeReplyObject(r);
	return v;
}

static void
sooner(int64_t *at, int64_t v)
{
	if (v >= 0 && (*at < 0 || v < *at))
		*at = v;
}

static void
set_owned(struct sched *s, int shard, int on)
{
	__atomic_store_n(&s->owned[shard], (unsigned char)on,
	    __ATOMIC_RELEASE);
	__atomic_add_fetch(&s->nowned, on ? 1 : -1, __ATOMIC_RELAXED);
}

/*
 * The shard leases and the heartbeat of this data_dir's previous run,
 * which ended without letting go of them (killed, crashed): let go now
 * rather than after scheduler.lease, so that a restart does not hold
 * every job of those shards back that long.  The caller proved that run
 * gone (sched_set_predecessor).  0, or -1 to try again next round.
 */
static int
forget_predecessor(struct sched *s, redisContext *c, int *broken)
{
	char key[64];
	int i, got, freed = 0;
	int64_t other;

	for (i = 0; i < s->cfg.shards; i++) {
		snprintf(key, sizeof(key), "rd:lease:%d", i);
		if ((got = lease_op(s, c, key, s->prev_holder, 0,
		    broken)) == -1)
			return -1;
		freed += got;
	}
	if (heartbeat(s, c, s->prev_holder, 0, &other, broken) < 0)
		return -1;
	if (freed > 0)
		log_info("scheduler: this data_dir's previous run (%s) ended "
		    "holding %d shard leases: let go now", s->prev_holder,
		    freed);
	s->prev_holder[0] = '\0';
	return 0;
}

void
sched_set_predecessor(struct sched *s, const char *holder)
{
	snprintf(s->prev_holder, sizeof(s->prev_holder), "%s",
	    holder != NULL && strcmp(holder, s->holder) != 0 ? holder : "");
}

const char *
sched_holder(const struct sched *s)
{
	return s->holder;
}

int
sched_leases_round(struct sched *s, redisContext *c, int64_t *again_ms,
    int *broken)
{
	char key[64];
	int live, fair, i, k, got, n = s->cfg.shards, start, taken = 0;
	int64_t other, pttl;

	*again_ms = -1;
	if (s->prev_holder[0] != '\0' && forget_predecessor(s, c,
	    broken) == -1)
		return -1;
	if ((live = heartbeat(s, c, s->holder, s->cfg.lease_ms, &other,
	    broken)) < 1)
		return -1;
	/* Look again the moment another instance would be dead. */
	sooner(again_ms, other >= 0 ? other + 1 : -1);
	fair = (n + live - 1) / live;

	for (i = 0; i < n; i++) {
		if (!s->owned[i])
			continue;
		snprintf(key, sizeof(key), "rd:lease:%d", i);
		if ((got = lease_op(s, c, key, s->holder, s->cfg.lease_ms,
		    broken)) == -1)
			return -1;
		if (got == 0) {
			log_warnx("scheduler: lease of shard %d was lost", i);
			set_owned(s, i, 0);
		}
	}
	/* Over the fair share: give the highest indexes back. */
	for (i = n - 1; i >= 0 && s->nowned > fair; i--) {
		if (!s->owned[i])
			continue;
		snprintf(key, sizeof(key), "rd:lease:%d", i);
		if (lease_op(s, c, key, s->holder, 0, broken) == -1)
			return -1;
		set_owned(s, i, 0);
		log_debug("scheduler: shard %d handed back (%d live)", i,
		    live);
	}
	/* Under it: take free ones, starting at a place of our own. */
	start = (int)(s->holder[0] != '\0' ? (unsigned char)s->holder[
	    strlen(s->holder) - 1] : 0) % n;
	for (k = 0; k < n && s->nowned < fair; k++) {
		i = (start + k) % n;
		if (s->owned[i])
			continue;
		snprintf(key, sizeof(key), "rd:lease:%d", i);
		if ((got = lease_take(s, c, key, s->cfg.lease_ms,
		    broken)) == -1)
			return -1;
		if (got == 1) {
			sched_shard_taken(s, i);
			set_owned(s, i, 1);
			taken++;
			log_debug("scheduler: shard %d taken", i);
		} else {
			/* Held: try again the moment it runs out. */
			pttl = lease_pttl(s, c, key, broken);
			if (*broken)
				return -1;
			if (pttl >= 0)
				sooner(again_ms, pttl + 1);
		}
	}
	return taken;
}

void
sched_leases_release(struct sched *s, redisContext *c)
{
	char key[64];
	int i, broken = 0, node;
	int64_t other;

	for (i = 0; i < s->cfg.shards && !broken; i++) {
		if (!s->owned[i])
			continue;
		snprintf(key, sizeof(key), "rd:lease:%d", i);
		(void)lease_op(s, c, key, s->holder, 0, &broken);
		set_owned(s, i, 0);
	}
	pthread_mutex_lock(&s->lock);
	node = s->node;
	pthread_mutex_unlock(&s->lock);
	if (node >= 0 && !broken) {
		snprintf(key, sizeof(key), "rd:node:%d", node);
		(void)lease_op(s, c, key, s->holder, 0, &broken);
	}
	if (!broken)
		(void)heartbeat(s, c, s->holder, 0, &other, &broken);
}
