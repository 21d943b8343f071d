/*
 * conn.c - Redis connections: connecting with a timeout (AUTH and SELECT
 * included), the pool of blocking contexts the scheduler's callers share
 * (a free list per node on a Redis Cluster, with the slot map), and the
 * routed commands and pipelines that send each command to the node serving
 * its key, follow MOVED and ASK and wait out TRYAGAIN (within redis.timeout)
 * (docs/internals/CLUSTER.md).  The pool's first nodes are redis.url's seeds.
 *
 * Key decision: a context that failed is never reused, and one failure also
 * closes every idle context of its node, because the usual cause (Redis
 * restarted, a network cut) has broken them all: the next callers reconnect
 * at once instead of each discovering a dead socket in turn.  An idle
 * context is also looked at before it is handed out (idle_dead(): one
 * poll(), no round trip): one whose server closed it while it sat in the
 * pool (Redis restarted while this instance had nothing to ask) goes, with
 * the rest of its node's, instead of failing its caller's command.
 * "Unreachable"
 * is logged once per outage, and "reachable again" once when it ends.  On a
 * single Redis the routing is a pass-through to the caller's context.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "scheduler/conn.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define POOL_NODES_MAX		1024	/* masters of a cluster */
#define POOL_REFRESH_US		(1000 * 1000)	/* between slot map reads */
#define POOL_TRYAGAIN_MS	5	/* the first TRYAGAIN wait, doubled */
#define POOL_TRYAGAIN_CAP_MS	50	/* up to this */

struct pool_node {
	struct redis_target	 t;
	redisContext		**idle;
	int			 nidle;
	int			 down;		/* outage logged */
};

/* Everything below lock except target, timeout_ms and max_idle. */
struct sched_pool {
	pthread_mutex_t		 lock;
	struct redis_target	 target;	/* the first seed */
	int			 nseeds;	/* nodes[0..nseeds) */
	int64_t			 timeout_ms;
	int			 max_idle;
	/* -1 unknown, 0 single, 1 cluster */
	int			 mode;
	struct pool_node	**nodes;	/* single: nodes[0] = target */
	int			 nnodes;
	/* cluster: the node tried first */
	int			 home;
	int			 refused;	/* non-cluster seeds logged */
	/* cluster: per slot, its node + 1, or 0: unknown */
	uint16_t		*slots;
	int64_t			 refreshed_mono_us;
};


/* Runs one command; 0, or -1 with why (an error reply or I/O error). */
static int
simple_command(redisContext *c, const char *what, char *why, size_t whylen,
    int argc, const char **argv)
{
	redisReply *r;
	int rc = -1;

	r = redisCommandArgv(c, argc, argv, NULL);
	if (r == NULL) {
		snprintf(why, whylen, "%s: %s", what, c->errstr);
		return -1;
	}
	if (r->type == REDIS_REPLY_ERROR)
		snprintf(why, whylen, "%s: %s", what, r->str);
	else
		rc = 0;
	freeReplyObject(r);
	return rc;
}

/*
 * Failures of our Redis work, for retryd_redis_errors_total: connections
 * that could not be made, contexts returned broken (an I/O or protocol
 * error), and error replies from Redis, to routed commands and to pipelined
 * ones alike, on a single Redis as on a cluster, that were not redirections
 * or repaired (a script loaded again).  Each is counted once, here, where
 * every command passes (the timer and the subscriber, on contexts of their
 * own, count theirs through sched_redis_count_reply() and
 * sched_redis_count_failure()); an error reply of our own making
 * (fake_error) is not, as the failure behind it (a connection not made or
 * broken) was.
 */
static atomic_uint_fast64_t redis_errors;

static void
count_error(void)
{
	atomic_fetch_add_explicit(&redis_errors, 1, memory_order_relaxed);
}

/*
 * Counts r when it is an error reply from Redis.  repaired: a NOSCRIPT is
 * not a failure, as the caller loads the script and sends the call again
 * (every pipelined EVALSHA's caller does; a routed one has its fix, and a
 * NOSCRIPT that the fix could not repair counts).
 */
static void
count_reply(const redisReply *r, int repaired)
{
	if (r == NULL || r->type != REDIS_REPLY_ERROR)
		return;
	if (repaired && r->len >= 8 && memcmp(r->str, "NOSCRIPT", 8) == 0)
		return;
	count_error();
}

void
sched_redis_count_reply(const redisReply *r)
{
	count_reply(r, 0);
}

void
sched_redis_count_failure(void)
{
	count_error();
}

uint64_t
sched_redis_errors(void)
{
	return (uint64_t)atomic_load_explicit(&redis_errors,
	    memory_order_relaxed);
}

redisContext *
sched_redis_connect(const struct redis_target *t, int64_t timeout_ms,
    char *why, size_t whylen)
{
	struct timeval tv;
	redisContext *c;
	char dbs[16];
	const char *argv[3];

	if (timeout_ms <= 0)
		timeout_ms = 1000;
	tv.tv_sec = (time_t)(timeout_ms / 1000);
	tv.tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000;
	if (t->path[0] != '\0')
		c = redisConnectUnixWithTimeout(t->path, tv);
	else
		c = redisConnectWithTimeout(t->host, t->port, tv);
	if (c == NULL) {
		snprintf(why, whylen, "cannot allocate a Redis context");
		count_error();
		return NULL;
	}
	if (c->err) {
		if (t->path[0] != '\0')
			snprintf(why, whylen, "%s: %s", t->path, c->errstr);
		else
			snprintf(why, whylen, "%s:%d: %s", t->host, t->port,
			    c->errstr);
		goto fail;
	}
	if (redisSetTimeout(c, tv) != REDIS_OK) {
		snprintf(why, whylen, "cannot set the Redis timeout");
		goto fail;
	}
	if (t->path[0] == '\0')
		(void)redisEnableKeepAlive(c);
	if (t->password[0] != '\0') {
		argv[0] = "AUTH";
		if (t->username[0] != '\0') {
			argv[1] = t->username;
			argv[2] = t->password;
			if (simple_command(c, "AUTH", why, whylen, 3, argv))
				goto fail;
		} else {
			argv[1] = t->password;
			if (simple_command(c, "AUTH", why, whylen, 2, argv))
				goto fail;
		}
	}
	if (t->db != 0) {
		snprintf(dbs, sizeof(dbs), "%d", t->db);
		argv[0] = "SELECT";
		argv[1] = dbs;
		if (simple_command(c, "SELECT", why, whylen, 2, argv))
			goto fail;
	}
	return c;
fail:
	redisFree(c);
	count_error();
	return NULL;
}

/* ---- the pool: nodes and their free lists ------------------------------- */

/* The index of the node host:port, added when new; -1 when full. */
static int
node_find_add(struct sched_pool *p, const char *host, int port)
{
	struct pool_node *n;
	int i;

	for (i = 0; i < p->nnodes; i++)
		if (p->nodes[i]->t.port == port &&
		    strcmp(p->nodes[i]->t.host, host) == 0)
			return i;
	if (p->nnodes >= POOL_NODES_MAX || strlen(host) >= sizeof(n->t.host))
		return -1;
	n = xcalloc(1, sizeof(*n));
	n->t = p->target;
	n->t.path[0] = '\0';
	n->t.db = 0;
	snprintf(n->t.host, sizeof(n->t.host), "%s", host);
	n->t.port = port;
	n->idle = xcalloc((size_t)p->max_idle, sizeof(*n->idle));
	p->nodes = xreallocarray(p->nodes, (size_t)p->nnodes + 1,
	    sizeof(*p->nodes));
	p->nodes[p->nnodes] = n;
	return p->nnodes++;
}

struct sched_pool *
sched_pool_new(const struct redis_target *t, int nt, int64_t timeout_ms,
    int max_idle)
{
	struct sched_pool *p = xcalloc(1, sizeof(*p));
	struct pool_node *n;
	int i;

	pthread_mutex_init(&p->lock, NULL);
	p->target = t[0];
	p->nseeds = nt > 0 ? nt : 1;
	p->timeout_ms = timeout_ms;
	p->max_idle = max_idle > 0 ? max_idle : 1;
	p->mode = -1;
	p->nodes = xcalloc((size_t)p->nseeds, sizeof(*p->nodes));
	for (i = 0; i < p->nseeds; i++) {
		n = xcalloc(1, sizeof(*n));
		n->t = t[i];
		n->idle = xcalloc((size_t)p->max_idle, sizeof(*n->idle));
		p->nodes[i] = n;
	}
	p->nnodes = p->nseeds;
	return p;
}

/* Node i's name for logs. */
static void
node_name(const struct redis_target *t, char *out, size_t len)
{
	if (t->path[0] != '\0')
		snprintf(out, len, "%s", t->path);
	else
		snprintf(out, len, "%s:%d", t->host, t->port);
}

/*
 * 1 when an idle context's socket is readable: nothing is owed to it, so
 * its server closed it (or broke the protocol), and a command on it would
 * fail.
 */
static int
idle_dead(const redisContext *c)
{
	struct pollfd pfd;
	int r;

	pfd.fd = c->fd;
	pfd.events = POLLIN;
#ifdef POLLRDHUP
	pfd.events |= POLLRDHUP;
#endif
	pfd.revents = 0;
	while ((r = poll(&pfd, 1, 0)) == -1 && errno == EINTR)
		;
	return r != 0;
}

/*
 * Takes every idle context of n out of the pool, with c (under lock): one
 * failure's usual cause (Redis restarted, a network cut) has broken them
 * all.  The caller closes them with drop_all() once the lock is let go.
 */
static redisContext **
idle_take_locked(struct pool_node *n, redisContext *c, int *ndrop)
{
	redisContext **drop;
	int i;

	drop = xcalloc((size_t)n->nidle + 1, sizeof(*drop));
	for (i = 0; i < n->nidle; i++)
		drop[i] = n->idle[i];
	drop[i] = c;
	*ndrop = n->nidle + 1;
	n->nidle = 0;
	return drop;
}

static void
drop_all(redisContext **drop, int ndrop)
{
	int i;

	for (i = 0; i < ndrop; i++)
		redisFree(drop[i]);
	free(drop);
}

/* A context of node i: an idle one, or a new one; NULL (logged once). */
static redisContext *
node_get(struct sched_pool *p, int i)
{
	struct redis_target t;
	struct pool_node *n;
	redisContext *c = NULL, **drop = NULL;
	char why[512], name[300];
	int ndrop = 0;

	pthread_mutex_lock(&p->lock);
	n = p->nodes[i];
	if (n->nidle > 0)
		c = n->idle[--n->nidle];
	if (c != NULL && idle_dead(c)) {
		drop = idle_take_locked(n, c, &ndrop);
		c = NULL;
	}
	t = n->t;
	pthread_mutex_unlock(&p->lock);
	drop_all(drop, ndrop);
	if (c != NULL)
		return c;

	c = sched_redis_connect(&t, p->timeout_ms, why, sizeof(why));
	node_name(&t, name, sizeof(name));
	pthread_mutex_lock(&p->lock);
	if (c == NULL && !n->down) {
		n->down = 1;
		log_warnx("redis unreachable: %s", why);
	} else if (c != NULL && n->down) {
		n->down = 0;
		if (p->mode == 1)
			log_info("redis node %s reachable again", name);
		else
			log_info("redis reachable again");
	}
	pthread_mutex_unlock(&p->lock);
	return c;
}

/* The node c talks to (under lock); -1 when none of ours. */
static int
node_of_locked(const struct sched_pool *p, const redisContext *c)
{
	int i;

	if (p->mode != 1)
		return 0;
	if (c->connection_type != REDIS_CONN_TCP || c->tcp.host == NULL)
		return -1;
	for (i = 0; i < p->nnodes; i++)
		if (p->nodes[i]->t.port == c->tcp.port &&
		    strcmp(p->nodes[i]->t.host, c->tcp.host) == 0)
			return i;
	return -1;
}

static int
node_of(struct sched_pool *p, const redisContext *c)
{
	int i;

	pthread_mutex_lock(&p->lock);
	i = node_of_locked(p, c);
	pthread_mutex_unlock(&p->lock);
	return i;
}

void
sched_pool_put(struct sched_pool *p, redisContext *c, int broken)
{
	redisContext **drop = NULL;
	struct pool_node *n;
	int ndrop = 0, i;

	if (c == NULL)
		return;
	if (c->err)
		broken = 1;
	if (broken)
		count_error();
	pthread_mutex_lock(&p->lock);
	if ((i = node_of_locked(p, c)) < 0) {
		pthread_mutex_unlock(&p->lock);
		redisFree(c);
		return;
	}
	n = p->nodes[i];
	if (broken)
		drop = idle_take_locked(n, c, &ndrop);
	else if (n->nidle < p->max_idle) {
		n->idle[n->nidle++] = c;
		c = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	drop_all(drop, ndrop);
	if (!broken && c != NULL)
		redisFree(c);
}

void
sched_pool_free(struct sched_pool *p)
{
	int i, k;

	if (p == NULL)
		return;
	for (k = 0; k < p->nnodes; k++) {
		for (i = 0; i < p->nodes[k]->nidle; i++)
			redisFree(p->nodes[k]->idle[i]);
		free(p->nodes[k]->idle);
		free(p->nodes[k]);
	}
	free(p->nodes);
	free(p->slots);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

/* ---- the slot map ------------------------------------------------------- */

/* The host of a CLUSTER SLOTS node entry ("" means the node asked). */
static const char *
slots_host(const redisReply *e, const redisContext *c)
{
	if (e->element[0]->type != REDIS_REPLY_STRING)
		return NULL;
	if (e->element[0]->len == 0 || strcmp(e->element[0]->str, "?") == 0)
		return c->tcp.host;
	return e->element[0]->str;
}

/* Reads CLUSTER SLOTS on c into the map; 0, or -1 (c->err on I/O). */
static int
map_refresh(struct sched_pool *p, redisContext *c)
{
	const redisReply *e, *m;
	redisReply *r;
	const char *host;
	uint16_t *slots;
	long long lo, hi, k;
	size_t i;
	int node, rc = -1;

	if ((r = redisCommand(c, "CLUSTER SLOTS")) == NULL)
		return -1;
	if (r->type != REDIS_REPLY_ARRAY) {
		log_warnx("redis: CLUSTER SLOTS: %s", r->type ==
		    REDIS_REPLY_ERROR ? r->str : "unexpected reply");
		goto out;
	}
	slots = xcalloc(SCHED_SLOTS, sizeof(*slots));
	pthread_mutex_lock(&p->lock);
	for (i = 0; i < r->elements; i++) {
		e = r->element[i];
		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER)
			continue;
		lo = e->element[0]->integer;
		hi = e->element[1]->integer;
		m = e->element[2];	/* the master */
		if (lo < 0 || hi >= SCHED_SLOTS || lo > hi ||
		    m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
		    m->element[1]->type != REDIS_REPLY_INTEGER ||
		    (host = slots_host(m, c)) == NULL)
			continue;
		node = node_find_add(p, host, (int)m->element[1]->integer);
		for (k = lo; node >= 0 && k <= hi; k++)
			slots[k] = (uint16_t)(node + 1);
	}
	free(p->slots);
	p->slots = slots;
	p->refreshed_mono_us = clock_mono_us();
	pthread_mutex_unlock(&p->lock);
	rc = 0;
out:
	freeReplyObject(r);
	return rc;
}

/*
 * The seed that answered when the map names it, else the first node it
 * names: the seed may be spelt otherwise ("localhost") than the cluster does.
 */
static int
mapped_home(const struct sched_pool *p, int seed)
{
	int i, first = 0;

	for (i = 0; i < SCHED_SLOTS; i++) {
		if (p->slots[i] == seed + 1)
			return seed;
		if (first == 0)
			first = p->slots[i];
	}
	return first > 0 ? first - 1 : 0;
}

int
sched_info_field(const char *info, const char *name, char *out,
    size_t outlen)
{
	size_t nl = strlen(name), n;
	const char *p = info;

	for (;;) {
		if (strncmp(p, name, nl) == 0 && p[nl] == ':') {
			p += nl + 1;
			n = strcspn(p, "\r\n");
			if (n >= outlen)
				n = outlen - 1;
			memcpy(out, p, n);
			out[n] = '\0';
			return 0;
		}
		if ((p = strchr(p, '\n')) == NULL)
			return -1;
		p++;
	}
}

/*
 * Redis must not evict.  A job evicted is gone from Redis without a trace:
 * the journal still holds it, but nothing looks for it while the schema
 * marker is there, so only a restore route would bring it back.  Says so
 * when the (first) node has a maxmemory and a maxmemory-policy other than
 * noeviction (without a maxmemory the policy never applies).
 */
static void
check_eviction(redisContext *c)
{
	static int said;	/* once a process: both pools ask */
	char limit[32], policy[65];
	redisReply *r;

	r = redisCommand(c, "INFO memory");
	if (r != NULL && r->type == REDIS_REPLY_STRING &&
	    (sched_info_field(r->str, "maxmemory", limit,
	    sizeof(limit)) == -1 || strcmp(limit, "0") != 0) &&
	    sched_info_field(r->str, "maxmemory_policy", policy,
	    sizeof(policy)) == 0 && strcmp(policy, "noeviction") != 0 &&
	    !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		log_warnx("redis: maxmemory-policy is %s: Redis may evict "
		    "jobs, and only a restore (POST /v1/restore) brings an "
		    "evicted job back; set it to noeviction", policy);
	if (r != NULL)
		freeReplyObject(r);
}

/*
 * Learns, on the first connection, whether Redis is a cluster: INFO cluster
 * and, when it is, the slot map; from the first seed that answers.  The
 * context is given back to the pool.
 */
static void
discover(struct sched_pool *p)
{
	redisContext *c = NULL;
	redisReply *r;
	int cluster = 0, ok = 0, seed;
	char name[300];

	for (seed = 0; seed < p->nseeds && c == NULL; seed++)
		c = node_get(p, seed);
	if (c == NULL)
		return;
	seed--;
	r = redisCommand(c, "INFO cluster");
	if (r != NULL && r->type == REDIS_REPLY_STRING) {
		ok = 1;
		cluster = strstr(r->str, "cluster_enabled:1") != NULL;
	} else if (r != NULL) {
		/* INFO refused (an ACL): a single Redis, as before. */
		log_warnx("redis: INFO cluster: %s; taken for a single Redis",
		    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
		ok = 1;
	}
	if (r != NULL)
		freeReplyObject(r);
	if (ok) {
		check_eviction(c);
		ok = c->err == 0;	/* else learnt again on the next */
	}
	if (ok && cluster) {
		/* The seed is node 0, whether the map names it or not. */
		pthread_mutex_lock(&p->lock);
		p->mode = 1;
		pthread_mutex_unlock(&p->lock);
		ok = map_refresh(p, c) == 0;
		pthread_mutex_lock(&p->lock);
		if (!ok)
			p->mode = -1;
		else
			log_info("redis: a cluster (%d node(s) known)",
			    p->nnodes);
		p->home = ok ? mapped_home(p, seed) : 0;
		pthread_mutex_unlock(&p->lock);
	} else if (ok && p->nseeds > 1) {
		/* Several seeds name one cluster, never several Redis. */
		node_name(&p->nodes[seed]->t, name, sizeof(name));
		pthread_mutex_lock(&p->lock);
		if (!p->refused)
			log_warnx("redis: redis.url lists %d seeds but %s is "
			    "not a Redis Cluster: not used (name one URL for "
			    "a single Redis)", p->nseeds, name);
		p->refused = 1;
		pthread_mutex_unlock(&p->lock);
		ok = 0;		/* closed: the mode is still unknown */
	} else if (ok) {
		pthread_mutex_lock(&p->lock);
		p->mode = 0;
		pthread_mutex_unlock(&p->lock);
	}
	sched_pool_put(p, c, !ok);
}

int
sched_pool_cluster(struct sched_pool *p)
{
	int m;

	pthread_mutex_lock(&p->lock);
	m = p->mode;
	pthread_mutex_unlock(&p->lock);
	return m;
}

/* The node serving slot, or -1 when not known. */
static int
slot_node(struct sched_pool *p, int slot)
{
	int n = -1;

	pthread_mutex_lock(&p->lock);
	if (p->mode != 1)
		n = 0;
	else if (p->slots != NULL && slot >= 0 && p->slots[slot] != 0)
		n = p->slots[slot] - 1;
	pthread_mutex_unlock(&p->lock);
	return n;
}

/*
 * A context of a live master, the home node first (the one that answers
 * becomes the home): pooled, or (own) a new one of the caller's.
 */
static redisContext *
home_get(struct sched_pool *p, int own, char *why, size_t whylen)
{
	struct redis_target t;
	redisContext *c;
	int i, k, n, home;

	pthread_mutex_lock(&p->lock);
	n = p->nnodes;
	home = p->home;
	pthread_mutex_unlock(&p->lock);
	for (k = 0; k < n; k++) {
		i = (home + k) % n;
		if (own) {
			pthread_mutex_lock(&p->lock);
			t = p->nodes[i]->t;
			pthread_mutex_unlock(&p->lock);
			c = sched_redis_connect(&t, p->timeout_ms, why,
			    whylen);
		} else
			c = node_get(p, i);
		if (c != NULL) {
			pthread_mutex_lock(&p->lock);
			p->home = i;
			pthread_mutex_unlock(&p->lock);
			return c;
		}
	}
	return NULL;
}

static redisContext *
any_get(struct sched_pool *p)
{
	return home_get(p, 0, NULL, 0);
}

redisContext *
sched_pool_get(struct sched_pool *p)
{
	int mode = sched_pool_cluster(p);

	if (mode == -1) {
		discover(p);
		mode = sched_pool_cluster(p);
	}
	if (mode == 1)
		return any_get(p);
	if (mode == -1 && p->nseeds > 1)
		return NULL;	/* no seed answered, or not a cluster */
	return node_get(p, 0);
}

redisContext *
sched_pool_get_key(struct sched_pool *p, const char *key)
{
	int node;

	if (sched_pool_cluster(p) != 1 || (node = slot_node(p, sched_key_slot(
	    key, strlen(key)))) < 0)
		return sched_pool_get(p);
	return node_get(p, node);
}

/* Reads the slot map again unless it was read within POOL_REFRESH_US. */
static void
map_maybe_refresh(struct sched_pool *p)
{
	redisContext *c;
	int64_t now = clock_mono_us();
	int due;

	pthread_mutex_lock(&p->lock);
	due = now - p->refreshed_mono_us >= POOL_REFRESH_US;
	if (due)
		p->refreshed_mono_us = now;	/* one thread at a time */
	pthread_mutex_unlock(&p->lock);
	if (!due || (c = any_get(p)) == NULL)
		return;
	sched_pool_put(p, c, map_refresh(p, c) == -1);
}

redisContext *
sched_pool_connect(struct sched_pool *p, char *why, size_t whylen)
{
	redisContext *c;
	int mode = sched_pool_cluster(p);

	if (mode == -1) {
		discover(p);
		mode = sched_pool_cluster(p);
	}
	if (mode == -1 && p->nseeds > 1) {
		snprintf(why, whylen, "no seed of redis.url answered as a "
		    "Redis Cluster");
		return NULL;
	}
	if (mode != 1)
		return sched_redis_connect(&p->target, p->timeout_ms, why,
		    whylen);
	if ((c = home_get(p, 1, why, whylen)) == NULL)
		map_maybe_refresh(p);	/* every master known is down */
	return c;
}

/* ---- routed commands ---------------------------------------------------- */

/* An error reply of our own making, as if Redis had sent it. */
static redisReply *
fake_error(const char *what)
{
	redisReader *rd;
	char msg[400];
	void *r = NULL;
	int n;

	n = snprintf(msg, sizeof(msg) - 2, "-CLUSTERDOWN retryd: %s", what);
	if (n < 0 || (size_t)n > sizeof(msg) - 3)
		n = (int)sizeof(msg) - 3;
	msg[n] = '\r';
	msg[n + 1] = '\n';
	rd = redisReaderCreate();
	if (redisReaderFeed(rd, msg, (size_t)n + 2) != REDIS_OK ||
	    redisReaderGetReply(rd, &r) != REDIS_OK)
		r = NULL;
	redisReaderFree(rd);
	if (r == NULL)
		fatalx("cannot make an error reply");
	return r;
}

/* Sends cmd on ctx (after ASKING when asking); its reply, or -1. */
static int
send_one(redisContext *ctx, int asking, const char *cmd, size_t len,
    redisReply **r)
{
	void *rep;

	if (asking && redisAppendCommand(ctx, "ASKING") != REDIS_OK)
		return -1;
	if (redisAppendFormattedCommand(ctx, cmd, len) != REDIS_OK)
		return -1;
	if (asking) {
		if (redisGetReply(ctx, &rep) != REDIS_OK)
			return -1;
		freeReplyObject(rep);
	}
	if (redisGetReply(ctx, &rep) != REDIS_OK)
		return -1;
	*r = rep;
	return 0;
}

/*
 * A context for node (c when it is c's node or unknown; c NULL: a pooled
 * one); NULL: down.
 */
static redisContext *
route_get(struct sched_pool *p, redisContext *c, int node)
{
	if (c == NULL)
		return node < 0 ? any_get(p) : node_get(p, node);
	if (node < 0 || node_of(p, c) == node)
		return c;
	return node_get(p, node);
}

static void
route_put(struct sched_pool *p, redisContext *c, redisContext *ctx)
{
	if (ctx != NULL && ctx != c)
		sched_pool_put(p, ctx, 0);
}

/* The node a redirection names (added when new); MOVED updates the map. */
static int
redirect_node(struct sched_pool *p, const struct sched_redirect *rd)
{
	int node;

	pthread_mutex_lock(&p->lock);
	node = node_find_add(p, rd->host, rd->port);
	if (!rd->ask && node >= 0 && p->slots != NULL)
		p->slots[rd->slot] = (uint16_t)(node + 1);
	pthread_mutex_unlock(&p->lock);
	if (!rd->ask)
		map_maybe_refresh(p);
	return node;
}

/* 1 and *rd when r is a MOVED or ASK error of a cluster. */
static int
redirected(struct sched_pool *p, const redisReply *r,
    struct sched_redirect *rd)
{
	return r != NULL && r->type == REDIS_REPLY_ERROR &&
	    sched_pool_cluster(p) == 1 &&
	    sched_redirect_parse(r->str, r->len, rd);
}

/* TRYAGAIN waits of a command or a pipeline: how many, since when. */
struct tryagain {
	int	 tries;
	int64_t	 since_us;
};

/*
 * 1 after a short wait when r is a cluster's TRYAGAIN (a command refused
 * during a migration, not run) and the command may be sent again: waits of
 * 5, 10, 20, 40 then 50 ms, none ending past the pool's timeout (the
 * caller's redis.timeout) since the first TRYAGAIN of the command, or of
 * the pipeline (one budget for all its commands).  Else 0.
 */
static int
tryagain_wait(struct sched_pool *p, const redisReply *r, int slot,
    struct tryagain *ta)
{
	struct timespec ts;
	int64_t now, ms;

	if (r == NULL || r->type != REDIS_REPLY_ERROR || r->len < 8 ||
	    memcmp(r->str, "TRYAGAIN", 8) != 0 || slot < 0 ||
	    sched_pool_cluster(p) != 1)
		return 0;
	now = clock_mono_us();
	if (ta->tries == 0)
		ta->since_us = now;
	ms = ta->tries < 4 ? (int64_t)POOL_TRYAGAIN_MS << ta->tries :
	    POOL_TRYAGAIN_CAP_MS;
	if ((now - ta->since_us) / 1000 + ms > p->timeout_ms)
		return 0;
	ta->tries++;
	log_debug("redis: TRYAGAIN for slot %d, again in %lld ms", slot,
	    (long long)ms);
	ts.tv_sec = 0;
	ts.tv_nsec = (long)ms * 1000000L;
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		continue;
	return 1;
}

/*
 * Sends the formatted command cmd for slot, starting at the node rd names
 * when rd is not NULL (a redirection already received), and follows
 * redirections and TRYAGAIN (ta: the waits made so far, shared by a
 * pipeline; NULL: a budget of its own); see sched_pool_command_fix.
 */
static redisReply *
route_exec(struct sched_pool *p, redisContext *c, int *broken, int slot,
    const char *cmd, size_t len, const struct sched_redirect *first,
    struct tryagain *ta,
    int (*fix)(redisContext *, const redisReply *, void *), void *arg)
{
	struct sched_redirect rd;
	struct tryagain own = { 0, 0 };
	redisContext *ctx;
	redisReply *r = NULL;
	int hops = 0, asking = 0, fixed = 0, node;
	char name[300], what[340];

	if (ta == NULL)
		ta = &own;

	node = slot >= 0 ? slot_node(p, slot) : -1;
	if (first != NULL) {
		rd = *first;
		hops = 1;
		asking = rd.ask;
		if ((node = redirect_node(p, &rd)) < 0)
			return fake_error("too many nodes");
	}
	for (;;) {
		if ((ctx = route_get(p, c, node)) == NULL) {
			if (node < 0)
				return fake_error("no node reachable");
			pthread_mutex_lock(&p->lock);
			node_name(&p->nodes[node]->t, name, sizeof(name));
			pthread_mutex_unlock(&p->lock);
			snprintf(what, sizeof(what), "no connection to %s",
			    name);
			return fake_error(what);
		}
		if (send_one(ctx, asking, cmd, len, &r) == -1) {
			if (ctx == c) {
				*broken = 1;
				return NULL;
			}
			log_warnx("redis: %s", ctx->errstr);
			sched_pool_put(p, ctx, 1);
			return fake_error("a node failed");
		}
		if (r->type == REDIS_REPLY_ERROR && fix != NULL && !fixed &&
		    fix(ctx, r, arg) == 1) {
			/* Repaired on that node (a script loaded): again. */
			fixed = 1;
			freeReplyObject(r);
			r = NULL;
			if (ctx->err && ctx == c) {
				*broken = 1;
				return NULL;
			}
			if (ctx != c)
				sched_pool_put(p, ctx, ctx->err != 0);
			continue;
		}
		route_put(p, c, ctx);
		if (tryagain_wait(p, r, slot, ta)) {
			/* Not run: from the slot's node again, ASK and all. */
			freeReplyObject(r);
			r = NULL;
			node = slot_node(p, slot);
			asking = 0;
			hops = 0;
			continue;
		}
		if (hops >= SCHED_REDIRECTS_MAX || !redirected(p, r, &rd)) {
			count_reply(r, fix == NULL);
			return r;
		}
		hops++;
		freeReplyObject(r);
		r = NULL;
		asking = rd.ask;
		if ((node = redirect_node(p, &rd)) < 0)
			return fake_error("too many nodes");
	}
}

/* Writes v in decimal at p; the end. */
static char *
put_dec(char *p, size_t v)
{
	char tmp[24];
	int n = 0;

	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	while (n > 0)
		*p++ = tmp[--n];
	return p;
}

/*
 * The length is counted first, so the command is one allocation; hiredis's
 * own paths grow an sds string piece by piece (redisAppendCommandArgv) or
 * sprintf every length (redisFormatCommandArgv), which was most of the cost
 * of a script call's 20 to 70 arguments.
 */
size_t
sched_format_argv(char **cmd, int argc, const char **argv,
    const size_t *lens)
{
	size_t tot = 1 + 20 + 2, len;
	char *p;
	int i;

	for (i = 0; i < argc; i++) {
		len = lens != NULL ? lens[i] : strlen(argv[i]);
		tot += 1 + 20 + 2 + len + 2;
	}
	p = *cmd = xmalloc(tot + 1);
	*p++ = '*';
	p = put_dec(p, (size_t)argc);
	*p++ = '\r';
	*p++ = '\n';
	for (i = 0; i < argc; i++) {
		len = lens != NULL ? lens[i] : strlen(argv[i]);
		*p++ = '$';
		p = put_dec(p, len);
		*p++ = '\r';
		*p++ = '\n';
		memcpy(p, argv[i], len);
		p += len;
		*p++ = '\r';
		*p++ = '\n';
	}
	*p = '\0';
	return (size_t)(p - *cmd);
}

redisReply *
sched_pool_command_fix(struct sched_pool *p, redisContext *c, int *broken,
    const char *key, size_t keylen, int argc, const char **argv,
    const size_t *lens, int (*fix)(redisContext *, const redisReply *,
    void *), void *arg)
{
	redisReply *r;
	char *cmd;
	size_t len;

	len = sched_format_argv(&cmd, argc, argv, lens);
	r = route_exec(p, c, broken, key != NULL ? sched_key_slot(key,
	    keylen) : -1, cmd, len, NULL, NULL, fix, arg);
	free(cmd);
	return r;
}

redisReply *
sched_pool_command_argv(struct sched_pool *p, redisContext *c, int *broken,
    const char *key, size_t keylen, int argc, const char **argv,
    const size_t *lens)
{
	return sched_pool_command_fix(p, c, broken, key, keylen, argc, argv,
	    lens, NULL, NULL);
}

redisReply *
sched_pool_command(struct sched_pool *p, redisContext *c, int *broken,
    const char *key, const char *fmt, ...)
{
	redisReply *r;
	va_list ap;

	va_start(ap, fmt);
	r = sched_pool_vcommand(p, c, broken, key, fmt, ap);
	va_end(ap);
	return r;
}

redisReply *
sched_pool_vcommand(struct sched_pool *p, redisContext *c, int *broken,
    const char *key, const char *fmt, va_list ap)
{
	redisReply *r;
	char *cmd;
	int len;

	len = redisvFormatCommand(&cmd, fmt, ap);
	if (len < 0)
		fatalx("cannot format a Redis command");
	r = route_exec(p, c, broken, key != NULL ? sched_key_slot(key,
	    strlen(key)) : -1, cmd, (size_t)len, NULL, NULL, NULL, NULL);
	free(cmd);
	return r;
}

int
sched_pool_each(struct sched_pool *p, redisContext *c, const char *fmt, ...)
{
	unsigned char *seen;
	redisContext *ctx;
	redisReply *r;
	va_list ap;
	char *cmd;
	int len, i, mine, n, rc = 0;

	if (sched_pool_cluster(p) != 1)
		return 0;
	va_start(ap, fmt);
	len = redisvFormatCommand(&cmd, fmt, ap);
	va_end(ap);
	if (len < 0)
		fatalx("cannot format a Redis command");
	mine = node_of(p, c);
	pthread_mutex_lock(&p->lock);
	n = p->nnodes;
	seen = xcalloc((size_t)n, 1);
	for (i = 0; p->slots != NULL && i < SCHED_SLOTS; i++)
		if (p->slots[i] != 0 && p->slots[i] <= n)
			seen[p->slots[i] - 1] = 1;
	pthread_mutex_unlock(&p->lock);
	for (i = 0; i < n; i++) {
		if (!seen[i] || i == mine)
			continue;
		if ((ctx = node_get(p, i)) == NULL) {
			rc = -1;
			continue;
		}
		if (send_one(ctx, 0, cmd, (size_t)len, &r) == -1) {
			sched_pool_put(p, ctx, 1);
			rc = -1;
			continue;
		}
		if (r->type == REDIS_REPLY_ERROR)
			rc = -1;
		count_reply(r, 0);
		freeReplyObject(r);
		sched_pool_put(p, ctx, 0);
	}
	free(seen);
	free(cmd);
	return rc;
}

/* ---- routed pipelines --------------------------------------------------- */

struct pipe_conn {
	int		 node;
	redisContext	*ctx;		/* NULL: the node is down */
	size_t		 unread;
};

struct pipe_cmd {
	int		 slot;
	char		*cmd;
	size_t		 len;
	int		 conn;		/* index into conns once sent */
};

struct sched_pipe {
	struct sched_pool	*p;
	redisContext		*c;
	int			 cluster;
	struct pipe_cmd		*v;		/* cluster only */
	size_t			 n, cap, next;
	int			 sent;
	struct pipe_conn	*conns;
	size_t			 nconns;
	struct tryagain		 ta;		/* its TRYAGAIN waits */
};

struct sched_pipe *
sched_pipe_new(struct sched_pool *p, redisContext *c)
{
	struct sched_pipe *q = xcalloc(1, sizeof(*q));

	q->p = p;
	q->c = c;
	q->cluster = sched_pool_cluster(p) == 1;
	return q;
}

static int
pipe_add(struct sched_pipe *q, const char *key, size_t keylen, char *cmd,
    int len)
{
	if (len < 0)
		return -1;
	if (q->n == q->cap) {
		q->cap = q->cap == 0 ? 16 : q->cap * 2;
		q->v = xreallocarray(q->v, q->cap, sizeof(*q->v));
	}
	q->v[q->n].slot = key != NULL ? sched_key_slot(key, keylen) : -1;
	q->v[q->n].cmd = cmd;
	q->v[q->n].len = (size_t)len;
	q->v[q->n].conn = -1;
	q->n++;
	return 0;
}

int
sched_pipe_append(struct sched_pipe *q, const char *key, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = sched_pipe_vappend(q, key, fmt, ap);
	va_end(ap);
	return rc;
}

int
sched_pipe_vappend(struct sched_pipe *q, const char *key, const char *fmt,
    va_list ap)
{
	char *cmd;
	int len, rc;

	if (!q->cluster)
		rc = redisvAppendCommand(q->c, fmt, ap);
	else {
		len = redisvFormatCommand(&cmd, fmt, ap);
		rc = pipe_add(q, key, key != NULL ? strlen(key) : 0, cmd, len);
	}
	return rc == REDIS_OK ? 0 : -1;
}

int
sched_pipe_append_argv(struct sched_pipe *q, const char *key, size_t keylen,
    int argc, const char **argv, const size_t *lens)
{
	char *cmd;
	size_t len;
	int rc;

	len = sched_format_argv(&cmd, argc, argv, lens);
	if (q->cluster)
		return pipe_add(q, key, keylen, cmd, (int)len);
	rc = redisAppendFormattedCommand(q->c, cmd, len);
	free(cmd);
	return rc == REDIS_OK ? 0 : -1;
}

/* Sends every node its commands, each node's in one write. */
static void
pipe_send(struct sched_pipe *q)
{
	struct pipe_conn *pc;
	size_t i, k;
	int node, done;

	q->sent = 1;
	q->conns = xcalloc(q->n + 1, sizeof(*q->conns));
	for (i = 0; i < q->n; i++) {
		node = slot_node(q->p, q->v[i].slot);
		if (node < 0 || node_of(q->p, q->c) == node)
			node = -1;	/* on c */
		for (k = 0; k < q->nconns; k++)
			if (q->conns[k].node == node)
				break;
		if (k == q->nconns) {
			q->conns[k].node = node;
			q->conns[k].ctx = node < 0 ? q->c :
			    node_get(q->p, node);
			q->nconns++;
		}
		pc = &q->conns[k];
		q->v[i].conn = (int)k;
		if (pc->ctx != NULL && redisAppendFormattedCommand(pc->ctx,
		    q->v[i].cmd, q->v[i].len) == REDIS_OK)
			pc->unread++;
	}
	for (k = 0; k < q->nconns; k++) {
		if (q->conns[k].ctx == NULL)
			continue;
		do {
			if (redisBufferWrite(q->conns[k].ctx, &done) !=
			    REDIS_OK)
				break;
		} while (!done);
	}
}

int
sched_pipe_getreply(struct sched_pipe *q, void **reply)
{
	struct sched_redirect rd;
	struct pipe_conn *pc;
	struct pipe_cmd *pv;
	redisReply *r;
	void *rep;
	int broken, redir;

	if (!q->cluster) {
		if (redisGetReply(q->c, reply) != REDIS_OK)
			return REDIS_ERR;
		count_reply(*reply, 1);
		return REDIS_OK;
	}
	if (q->next >= q->n)
		return REDIS_ERR;
	if (!q->sent)
		pipe_send(q);
	pv = &q->v[q->next++];
	pc = &q->conns[pv->conn];
	if (pc->ctx == NULL || pc->unread == 0) {
		*reply = fake_error("no connection to a node");
		return REDIS_OK;
	}
	if (redisGetReply(pc->ctx, &rep) != REDIS_OK) {
		if (pc->ctx == q->c)
			return REDIS_ERR;
		pc->unread = 0;
		*reply = fake_error("a node failed");
		return REDIS_OK;
	}
	pc->unread--;
	r = rep;
	if ((redir = redirected(q->p, r, &rd)) ||
	    tryagain_wait(q->p, r, pv->slot, &q->ta)) {
		/*
		 * Not run there: send it where it is served now, on a pooled
		 * context (q->c may have replies still to read).
		 */
		freeReplyObject(r);
		r = route_exec(q->p, NULL, &broken, pv->slot, pv->cmd,
		    pv->len, redir ? &rd : NULL, &q->ta, NULL, NULL);
		if (r == NULL)
			return REDIS_ERR;
	} else
		count_reply(r, 1);	/* route_exec counted its own */
	*reply = r;
	return REDIS_OK;
}

void
sched_pipe_free(struct sched_pipe *q)
{
	size_t i;

	if (q == NULL)
		return;
	for (i = 0; i < q->nconns; i++)
		if (q->conns[i].ctx != NULL && q->conns[i].ctx != q->c)
			sched_pool_put(q->p, q->conns[i].ctx,
			    q->conns[i].unread > 0);
	for (i = 0; i < q->n; i++)
		free(q->v[i].cmd);
	free(q->v);
	free(q->conns);
	free(q);
}
