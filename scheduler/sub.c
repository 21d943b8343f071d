/*
 * sub.c - the subscriber thread: listens on rd:wake (a job became the
 * earliest of its shard, or a reservation the earliest deadline) and
 * rd:ready (jobs became ready in a topic), so the owning timer wakes early
 * and pull consumers on every instance are told.
 *
 * Key decision: the thread polls the socket itself (with a pipe to stop it)
 * and feeds hiredis's reader, instead of blocking in redisGetReply, so it
 * can stop at once, ping a quiet connection and notice a dead one; after
 * every (re)subscription it asks the timer for a sweep, because messages
 * published while it was away are lost (pub/sub has no backlog).
 *
 * Messages: rd:wake "TENANT:SHARD:MS" (delays) or "TENANT:SHARD:MS:f"
 * (in-flight deadline); rd:ready "TENANT:SHARD:TOPIC".  Tenant names hold
 * no ':' and topics none either, so the fields split unambiguously.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "scheduler/sched_int.h"
#include "util/log.h"

#define SUB_PING_MS	5000
#define SUB_DEAD_MS	15000
#define SUB_BACKOFF_MIN	50
#define SUB_BACKOFF_MAX	2000

static int64_t
real_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Splits "A:B:REST" in place; 0 or -1. */
static int
split3(char *s, char **a, char **b, char **rest)
{
	char *p, *q;

	if ((p = strchr(s, ':')) == NULL || (q = strchr(p + 1, ':')) == NULL)
		return -1;
	*p = *q = '\0';
	*a = s;
	*b = p + 1;
	*rest = q + 1;
	return 0;
}

static int
parse_shard(struct sched *s, const char *v)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(v, &end, 10);
	if (errno != 0 || *end != '\0' || end == v || n < 0 ||
	    n >= s->cfg.shards)
		return -1;
	return (int)n;
}

static void
on_wake(struct sched *s, char *msg)
{
	struct sched_tenant *t;
	char *tenant, *sh, *rest, *kind, *end;
	long long ms;
	int shard, deadline = 0, mine;

	if (split3(msg, &tenant, &sh, &rest) == -1 ||
	    !sched_valid_tenant(tenant) || (shard = parse_shard(s, sh)) < 0)
		return;
	if ((kind = strchr(rest, ':')) != NULL) {
		*kind++ = '\0';
		deadline = strcmp(kind, "f") == 0;
	}
	errno = 0;
	ms = strtoll(rest, &end, 10);
	if (errno != 0 || *end != '\0' || end == rest)
		return;
	t = sched_tenant_get(s, tenant);
	mine = __atomic_load_n(&s->owned[shard], __ATOMIC_ACQUIRE);
	pthread_mutex_lock(&s->lock);
	if (deadline) {
		if (ms < t->next_deadline_ms[shard])
			t->next_deadline_ms[shard] = ms;
	} else {
		t->gen[shard]++;
		if (ms < t->next_due_ms[shard])
			t->next_due_ms[shard] = ms;
	}
	pthread_mutex_unlock(&s->lock);
	if (mine)
		sched_timer_wake(s, 0);
}

static void
on_ready(struct sched *s, char *msg)
{
	struct sched_tenant *t;
	char *tenant, *sh, *topic;
	int shard;

	if (split3(msg, &tenant, &sh, &topic) == -1 ||
	    !sched_valid_tenant(tenant) || !sched_valid_topic(topic) ||
	    (shard = parse_shard(s, sh)) < 0)
		return;
	if (__atomic_load_n(&s->owned[shard], __ATOMIC_ACQUIRE)) {
		t = sched_tenant_get(s, tenant);
		pthread_mutex_lock(&s->lock);
		if (!t->blocked[shard])
			t->ready[shard] = 1;
		pthread_mutex_unlock(&s->lock);
		sched_timer_wake(s, 0);
	}
	/* Before the consumers are woken: they must read the shard. */
	sched_heads_forget(s, tenant, shard, topic);
	if (s->hooks.ready != NULL)
		s->hooks.ready(tenant, topic, s->hooks.arg);
}

static void
on_reply(struct sched *s, redisReply *r)
{
	char msg[512];
	const redisReply *ch, *pl;

	if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
	    r->element[0]->type != REDIS_REPLY_STRING ||
	    strcmp(r->element[0]->str, "message") != 0)
		return;	/* subscribe confirmations, pongs */
	ch = r->element[1];
	pl = r->element[2];
	if (ch->type != REDIS_REPLY_STRING || pl->type != REDIS_REPLY_STRING ||
	    pl->len >= sizeof(msg))
		return;
	memcpy(msg, pl->str, pl->len);
	msg[pl->len] = '\0';
	if (strcmp(ch->str, "rd:wake") == 0)
		on_wake(s, msg);
	else if (strcmp(ch->str, "rd:ready") == 0)
		on_ready(s, msg);
}

static int
sub_stopping(struct sched *s)
{
	int v;

	pthread_mutex_lock(&s->lock);
	v = s->stopping;
	pthread_mutex_unlock(&s->lock);
	return v;
}

/* Waits up to ms for the stop pipe; 1 when told to stop. */
static int
sub_sleep(struct sched *s, int64_t ms)
{
	struct pollfd pfd = { s->sub_fd[0], POLLIN, 0 };

	(void)poll(&pfd, 1, (int)ms);
	return sub_stopping(s);
}

/*
 * Reads and handles messages until the connection fails (-1) or we stop
 * (0).
 */
static int
listen_loop(struct sched *s, redisContext *c)
{
	struct pollfd pfd[2];
	int64_t last_rx = real_ms(), last_ping = last_rx, now;
	void *rep;
	int done, n;

	for (;;) {
		while (redisReaderGetReply(c->reader, &rep) == REDIS_OK &&
		    rep != NULL) {
			on_reply(s, rep);
			freeReplyObject(rep);
		}
		if (c->reader->err)
			return -1;
		pfd[0].fd = c->fd;
		pfd[0].events = POLLIN;
		pfd[1].fd = s->sub_fd[0];
		pfd[1].events = POLLIN;
		pfd[0].revents = pfd[1].revents = 0;
		n = poll(pfd, 2, 1000);
		if (sub_stopping(s))
			return 0;
		now = real_ms();
		if (n > 0 && (pfd[0].revents & (POLLIN | POLLERR | POLLHUP))) {
			if (redisBufferRead(c) != REDIS_OK)
				return -1;
			last_rx = now;
			continue;
		}
		if (now - last_rx > SUB_DEAD_MS) {
			log_warnx("redis: the subscriber connection is silent;"
			    " reconnecting");
			return -1;
		}
		if (now - last_ping >= SUB_PING_MS) {
			last_ping = now;
			if (redisAppendCommand(c, "PING") != REDIS_OK)
				return -1;
			do {
				if (redisBufferWrite(c, &done) != REDIS_OK)
					return -1;
			} while (!done);
		}
	}
}

void *
sched_sub_main(void *arg)
{
	struct sched *s = arg;
	redisContext *c;
	redisReply *r;
	char why[300];
	int64_t backoff = SUB_BACKOFF_MIN;

	while (!sub_stopping(s)) {
		/* On a cluster, any live master: messages reach them all. */
		c = sched_pool_connect(s->pool, why, sizeof(why));
		if (c == NULL) {
			if (sub_sleep(s, backoff))
				break;
			backoff = backoff * 2 > SUB_BACKOFF_MAX ?
			    SUB_BACKOFF_MAX : backoff * 2;
			continue;
		}
		r = redisCommand(c, "SUBSCRIBE rd:wake rd:ready");
		sched_redis_count_reply(r);
		if (r == NULL || r->type != REDIS_REPLY_ARRAY) {
			if (r != NULL)
				freeReplyObject(r);
			redisFree(c);
			if (sub_sleep(s, backoff))
				break;
			continue;
		}
		freeReplyObject(r);
		backoff = SUB_BACKOFF_MIN;
		/* What was published while we were away is lost: sweep. */
		sched_kick(s);
		if (listen_loop(s, c) == -1)
			sched_redis_count_failure();
		redisFree(c);
	}
	return NULL;
}
