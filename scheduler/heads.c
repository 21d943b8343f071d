/*
 * heads.c - what a pull reserve knows of each shard's ready set of a topic:
 * the scores of its next few jobs, as last read (ZRANGE) or as reserve.lua
 * answered after taking jobs from it.
 *
 * Key decision: a reserve needs the best ready jobs over all shards, and
 * reading every shard's head for every batch of reserves was 16 commands
 * of Redis for a handful of jobs.  A shard's heads are kept instead and
 * read again only when they may be wrong: jobs became ready in the shard
 * (this instance's promote or release forgets them at once, any
 * instance's rd:ready as soon as it arrives), a reserve needs more of the
 * shard than is known, a pass came up short, or they are older than
 * s->heads_ttl_us (another instance's promote into a shard that was not
 * empty publishes nothing: so such a job waits at most that long behind
 * worse ones).  Jobs that others took only make a reserve come up short,
 * which reads every shard again.  A forget bumps the shard's generation,
 * so heads read before it and learnt after it are not kept.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/sched_int.h"
#include "util/clock.h"
#include "util/strutil.h"
#include "util/xmalloc.h"

#define HEADS_BUCKETS	256
#define HEADS_TOPICS	4096	/* past this many, all are dropped */

struct heads_shard {
	uint64_t	 gen;		/* bumped by every forget */
	int64_t		 at_mono_us;	/* learnt then; 0: not known */
	int		 n;		/* scores known, best first */
	int		 more;		/* the set may hold more than n */
	double		 score[SCHED_HEADS_MAX];
};

struct heads_topic {
	struct heads_topic	*next;
	char			*tenant, *topic;
	struct heads_shard	*sh;	/* one per shard */
};

struct sched_heads {
	pthread_mutex_t		 lock;
	struct heads_topic	*bucket[HEADS_BUCKETS];
	size_t			 ntopics;
	int			 nshards;
};

struct sched_heads *
sched_heads_new(int nshards)
{
	struct sched_heads *h = xcalloc(1, sizeof(*h));

	pthread_mutex_init(&h->lock, NULL);
	h->nshards = nshards;
	return h;
}

static void
drop_all(struct sched_heads *h)
{
	struct heads_topic *t;
	size_t b;

	for (b = 0; b < HEADS_BUCKETS; b++)
		while ((t = h->bucket[b]) != NULL) {
			h->bucket[b] = t->next;
			free(t->tenant);
			free(t->topic);
			free(t->sh);
			free(t);
		}
	h->ntopics = 0;
}

void
sched_heads_free(struct sched_heads *h)
{
	if (h == NULL)
		return;
	drop_all(h);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

/* h->lock held: the topic's heads, made if create (else NULL if none). */
static struct heads_topic *
find(struct sched_heads *h, const char *tenant, const char *topic,
    int create)
{
	uint32_t b = str_hash(str_hash(STR_HASH_INIT, tenant), topic) %
	    HEADS_BUCKETS;
	struct heads_topic *t;

	for (t = h->bucket[b]; t != NULL; t = t->next)
		if (strcmp(t->topic, topic) == 0 &&
		    strcmp(t->tenant, tenant) == 0)
			return t;
	if (!create)
		return NULL;
	if (h->ntopics >= HEADS_TOPICS)
		drop_all(h);
	t = xcalloc(1, sizeof(*t));
	t->tenant = xstrdup(tenant);
	t->topic = xstrdup(topic);
	t->sh = xcalloc((size_t)h->nshards, sizeof(*t->sh));
	t->next = h->bucket[b];
	h->bucket[b] = t;
	h->ntopics++;
	return t;
}

void
sched_heads_forget(struct sched *s, const char *tenant, int shard,
    const char *topic)
{
	struct sched_heads *h = s->heads;
	struct heads_topic *t;

	if (h == NULL || shard < 0 || shard >= h->nshards)
		return;
	pthread_mutex_lock(&h->lock);
	if ((t = find(h, tenant, topic, 0)) != NULL) {
		t->sh[shard].gen++;
		t->sh[shard].at_mono_us = 0;
	}
	pthread_mutex_unlock(&h->lock);
}

void
sched_heads_plan(struct sched *s, const char *tenant, const char *topic,
    int m, int fresh, unsigned char *read, uint64_t *gen)
{
	struct sched_heads *h = s->heads;
	struct heads_shard *sh;
	struct heads_topic *t;
	int64_t now = clock_mono_us();
	int k;

	pthread_mutex_lock(&h->lock);
	t = find(h, tenant, topic, 1);
	for (k = 0; k < h->nshards; k++) {
		sh = &t->sh[k];
		gen[k] = sh->gen;
		read[k] = fresh || sh->at_mono_us == 0 ||
		    now - sh->at_mono_us >= s->heads_ttl_us ||
		    (sh->n < m && sh->more);
	}
	pthread_mutex_unlock(&h->lock);
}

void
sched_heads_learn(struct sched *s, const char *tenant, const char *topic,
    int shard, uint64_t gen, const double *score, int n, int more)
{
	struct sched_heads *h = s->heads;
	struct heads_shard *sh;
	struct heads_topic *t;

	if (shard < 0 || shard >= h->nshards)
		return;
	pthread_mutex_lock(&h->lock);
	t = find(h, tenant, topic, 1);
	sh = &t->sh[shard];
	if (sh->gen == gen) {
		if (n > SCHED_HEADS_MAX) {
			n = SCHED_HEADS_MAX;
			more = 1;
		}
		memcpy(sh->score, score, (size_t)n * sizeof(*score));
		sh->n = n;
		sh->more = more;
		sh->at_mono_us = clock_mono_us();
		if (sh->at_mono_us == 0)
			sh->at_mono_us = 1;
	}
	pthread_mutex_unlock(&h->lock);
}

size_t
sched_heads_collect(struct sched *s, const char *tenant, const char *topic,
    struct sched_head *out, int *seen, unsigned char *more, int *unknown)
{
	struct sched_heads *h = s->heads;
	struct heads_shard *sh;
	struct heads_topic *t;
	size_t k = 0;
	int i, j;

	*unknown = 0;
	pthread_mutex_lock(&h->lock);
	t = find(h, tenant, topic, 1);
	for (i = 0; i < h->nshards; i++) {
		sh = &t->sh[i];
		seen[i] = 0;
		more[i] = 0;
		if (sh->at_mono_us == 0) {
			*unknown = 1;	/* forgotten meanwhile */
			continue;
		}
		for (j = 0; j < sh->n; j++) {
			out[k].score = sh->score[j];
			out[k++].shard = i;
		}
		seen[i] = sh->n;
		more[i] = (unsigned char)sh->more;
	}
	pthread_mutex_unlock(&h->lock);
	return k;
}
