/*
 * inflight.c - how many requests each tenant's topic has in flight.
 *
 * Key decision: one chained hash table under one mutex, keyed by
 * "tenant NUL topic", whose entries exist only while their count is above
 * zero, so the table's size follows the topics that are busy right now and
 * not every topic ever seen.  A tenant's own count (all its topics) lives in
 * the same table under the topic "", which no topic may be named, so a
 * request costs two probes under the one lock and the tenant cap is checked
 * and counted atomically with the total.  A lock held for a hash probe is
 * cheap next to an HTTP request, and the scheduler reads these counts to
 * decide how much a topic may still send, so they must be exact, not
 * eventually right.  A tenant's entry also remembers when the tenant was
 * last reported as reaching its cap, so that report costs nothing until a
 * request takes the tenant to its cap, and is forgotten with the entry
 * when the tenant has nothing in flight.
 *
 * Key decision: a tenant's own cap (its max_in_flight, set by the caller
 * from the registry once per timer pass, disp_counts_set_cap()) lives in
 * the same entry, so a request reads it in the probe it makes anyway.  An
 * entry with a cap stays while the cap does, its count at 0 (its report's
 * time forgotten then all the same); one without a cap goes at 0 as
 * before, so the table holds the busy topics and the tenants with a cap
 * of their own.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "dispatcher/disp_int.h"
#include "util/clock.h"
#include "util/xmalloc.h"

#define COUNTS_MIN_BUCKETS	64

struct disp_count {
	struct disp_count *next;
	uint64_t	 hash;
	int		 n;
	int		 cap;		/* a tenant's own; 0: max_tenant */
	int64_t		 warned_mono_us; /* a tenant's; INT64_MIN: never */
	size_t		 tlen;		/* tenant's length; topic follows */
	size_t		 klen;		/* key length, NULs included */
	char		 key[];
};

/* FNV-1a of tenant NUL topic: the counts' hash. */
static uint64_t
topic_hash(const char *tenant, const char *topic)
{
	uint64_t h = 14695981039346656037ULL;
	const unsigned char *p;

	for (p = (const unsigned char *)tenant; *p != '\0'; p++)
		h = (h ^ *p) * 1099511628211ULL;
	h = (h ^ 0) * 1099511628211ULL;
	for (p = (const unsigned char *)topic; *p != '\0'; p++)
		h = (h ^ *p) * 1099511628211ULL;
	return h;
}

void
disp_counts_init(struct disp_counts *c)
{
	pthread_mutex_init(&c->lock, NULL);
	c->nb = COUNTS_MIN_BUCKETS;
	c->b = xcalloc(c->nb, sizeof(*c->b));
	c->nitems = 0;
	c->total = 0;
	c->warn_every_us = DISP_CAP_WARN_US;
}

void
disp_counts_destroy(struct disp_counts *c)
{
	struct disp_count *e, *next;
	size_t i;

	for (i = 0; i < c->nb; i++)
		for (e = c->b[i]; e != NULL; e = next) {
			next = e->next;
			free(e);
		}
	free(c->b);
	c->b = NULL;
	pthread_mutex_destroy(&c->lock);
}

static struct disp_count **
counts_find(struct disp_counts *c, uint64_t h, const char *tenant,
    size_t tlen, const char *topic, size_t plen)
{
	struct disp_count **ep;

	for (ep = &c->b[h & (c->nb - 1)]; *ep != NULL; ep = &(*ep)->next)
		if ((*ep)->hash == h && (*ep)->tlen == tlen &&
		    (*ep)->klen == tlen + plen + 2 &&
		    memcmp((*ep)->key, tenant, tlen) == 0 &&
		    memcmp((*ep)->key + tlen + 1, topic, plen) == 0)
			return ep;
	return ep;
}

static void
counts_grow(struct disp_counts *c)
{
	struct disp_count **nb, *e, *next;
	size_t i, n = c->nb * 2;

	nb = xcalloc(n, sizeof(*nb));
	for (i = 0; i < c->nb; i++)
		for (e = c->b[i]; e != NULL; e = next) {
			next = e->next;
			e->next = nb[e->hash & (n - 1)];
			nb[e->hash & (n - 1)] = e;
		}
	free(c->b);
	c->b = nb;
	c->nb = n;
}

/* The count of tenant's topic ("" for the tenant's own), or 0. */
static int
counts_n(struct disp_counts *c, const char *tenant, size_t tlen,
    const char *topic, size_t plen)
{
	struct disp_count **ep;

	ep = counts_find(c, topic_hash(tenant, topic), tenant, tlen, topic,
	    plen);
	return *ep != NULL ? (*ep)->n : 0;
}

/* The entry of tenant's topic, made at 0 when it has none. */
static struct disp_count *
counts_entry(struct disp_counts *c, const char *tenant, size_t tlen,
    const char *topic, size_t plen)
{
	uint64_t h = topic_hash(tenant, topic);
	struct disp_count **ep, *e;

	ep = counts_find(c, h, tenant, tlen, topic, plen);
	if ((e = *ep) == NULL) {
		e = xmalloc(sizeof(*e) + tlen + plen + 2);
		e->next = NULL;
		e->hash = h;
		e->n = 0;
		e->cap = 0;
		e->warned_mono_us = INT64_MIN;
		e->tlen = tlen;
		e->klen = tlen + plen + 2;
		memcpy(e->key, tenant, tlen + 1);
		memcpy(e->key + tlen + 1, topic, plen + 1);
		*ep = e;
		if (++c->nitems > c->nb)
			counts_grow(c);
	}
	return e;
}

/* Unlinks and frees *ep. */
static void
counts_remove(struct disp_counts *c, struct disp_count **ep)
{
	struct disp_count *e = *ep;

	*ep = e->next;
	free(e);
	c->nitems--;
}

/*
 * -1 to the count of tenant's topic; at 0 it goes, unless it holds a
 * tenant's cap.  0, or -1: none.
 */
static int
counts_decr(struct disp_counts *c, const char *tenant, size_t tlen,
    const char *topic, size_t plen)
{
	struct disp_count **ep, *e;

	ep = counts_find(c, topic_hash(tenant, topic), tenant, tlen,
	    topic, plen);
	if ((e = *ep) == NULL || e->n == 0)
		return -1;
	if (--e->n == 0) {
		if (e->cap > 0)
			e->warned_mono_us = INT64_MIN;
		else
			counts_remove(c, ep);
	}
	return 0;
}

int
disp_cap_in_force(int own, int max_tenant, int max_total)
{
	if (own <= 0)
		return max_tenant;
	return max_total > 0 && own > max_total ? max_total : own;
}

/* The cap in force for the tenant whose entry is te (NULL: none). */
static int
counts_cap(struct disp_count *te, int max_tenant, int max_total)
{
	return disp_cap_in_force(te != NULL ? te->cap : 0, max_tenant,
	    max_total);
}

/* The tenant's own entry, or NULL. */
static struct disp_count *
counts_tenant(struct disp_counts *c, const char *tenant, size_t tlen)
{
	return *counts_find(c, topic_hash(tenant, ""), tenant, tlen, "",
	    0);
}

int
disp_counts_add(struct disp_counts *c, const char *tenant, const char *topic,
    int max_total, int max_tenant)
{
	size_t tlen = strlen(tenant), plen = strlen(topic);
	struct disp_count *te;
	int64_t now;
	int ret = -1, cap;

	pthread_mutex_lock(&c->lock);
	te = counts_tenant(c, tenant, tlen);
	cap = counts_cap(te, max_tenant, max_total);
	if ((max_total > 0 && c->total >= max_total) || (cap > 0 &&
	    te != NULL && te->n >= cap)) {
		errno = EAGAIN;
		goto out;
	}
	if (te == NULL)
		te = counts_entry(c, tenant, tlen, "", 0);
	te->n++;
	counts_entry(c, tenant, tlen, topic, plen)->n++;
	c->total++;
	ret = 0;
	/* The clock is read only when a request fills the tenant's cap. */
	if (cap > 0 && te->n == cap) {
		now = clock_mono_us();
		if (te->warned_mono_us == INT64_MIN ||
		    now - te->warned_mono_us >= c->warn_every_us) {
			te->warned_mono_us = now;
			ret = 1;
		}
	}
out:
	pthread_mutex_unlock(&c->lock);
	return ret;
}

void
disp_counts_del(struct disp_counts *c, const char *tenant, const char *topic)
{
	size_t tlen = strlen(tenant), plen = strlen(topic);

	pthread_mutex_lock(&c->lock);
	if (counts_decr(c, tenant, tlen, topic, plen) == 0) {
		(void)counts_decr(c, tenant, tlen, "", 0);
		c->total--;
	}
	pthread_mutex_unlock(&c->lock);
}

void
disp_counts_set_cap(struct disp_counts *c, const char *tenant, int cap)
{
	size_t tlen = strlen(tenant);
	struct disp_count **ep;

	if (cap < 0)
		cap = 0;
	pthread_mutex_lock(&c->lock);
	ep = counts_find(c, topic_hash(tenant, ""), tenant, tlen, "", 0);
	if (*ep != NULL) {
		(*ep)->cap = cap;
		if (cap == 0 && (*ep)->n == 0)
			counts_remove(c, ep);
	} else if (cap > 0)
		counts_entry(c, tenant, tlen, "", 0)->cap = cap;
	pthread_mutex_unlock(&c->lock);
}

int
disp_counts_cap(struct disp_counts *c, const char *tenant, int max_tenant,
    int max_total)
{
	int cap;

	pthread_mutex_lock(&c->lock);
	cap = counts_cap(counts_tenant(c, tenant, strlen(tenant)), max_tenant,
	    max_total);
	pthread_mutex_unlock(&c->lock);
	return cap;
}

int
disp_room(int cap, int n)
{
	if (cap <= 0)
		return INT_MAX;
	return n < cap ? cap - n : 0;
}

int
disp_counts_room(struct disp_counts *c, const char *tenant, const char *topic,
    int max_topic, int max_tenant, int max_total)
{
	size_t tlen = strlen(tenant), plen = strlen(topic);
	struct disp_count *te;
	int room, r;

	pthread_mutex_lock(&c->lock);
	room = disp_room(max_topic, counts_n(c, tenant, tlen, topic, plen));
	te = counts_tenant(c, tenant, tlen);
	if ((r = disp_room(counts_cap(te, max_tenant, max_total),
	    te != NULL ? te->n : 0)) < room)
		room = r;
	if ((r = disp_room(max_total, c->total)) < room)
		room = r;
	pthread_mutex_unlock(&c->lock);
	return room;
}

int
disp_counts_get(struct disp_counts *c, const char *tenant, const char *topic)
{
	int n;

	pthread_mutex_lock(&c->lock);
	n = counts_n(c, tenant, strlen(tenant), topic, strlen(topic));
	pthread_mutex_unlock(&c->lock);
	return n;
}

int
disp_counts_total(struct disp_counts *c)
{
	int n;

	pthread_mutex_lock(&c->lock);
	n = c->total;
	pthread_mutex_unlock(&c->lock);
	return n;
}

void
disp_counts_foreach(struct disp_counts *c,
    void (*fn)(const char *tenant, const char *topic, int n, void *arg),
    void *arg)
{
	struct disp_count *e;
	size_t i;

	pthread_mutex_lock(&c->lock);
	for (i = 0; i < c->nb; i++)
		for (e = c->b[i]; e != NULL; e = e->next)
			if (e->klen > e->tlen + 2)	/* not a tenant's own */
				fn(e->key, e->key + e->tlen + 1, e->n, arg);
	pthread_mutex_unlock(&c->lock);
}

void
disp_counts_foreach_tenant(struct disp_counts *c,
    void (*fn)(const char *tenant, int n, void *arg), void *arg)
{
	struct disp_count *e;
	size_t i;

	pthread_mutex_lock(&c->lock);
	for (i = 0; i < c->nb; i++)
		for (e = c->b[i]; e != NULL; e = e->next)
			if (e->klen == e->tlen + 2 && e->n > 0)
				fn(e->key, e->n, arg);	/* a tenant's own */
	pthread_mutex_unlock(&c->lock);
}

void
disp_counts_foreach_cap(struct disp_counts *c, int max_total,
    void (*fn)(const char *tenant, int cap, void *arg), void *arg)
{
	struct disp_count *e;
	size_t i;

	pthread_mutex_lock(&c->lock);
	for (i = 0; i < c->nb; i++)
		for (e = c->b[i]; e != NULL; e = e->next)
			if (e->klen == e->tlen + 2 && e->cap > 0)
				fn(e->key, disp_cap_in_force(e->cap, 0,
				    max_total), arg);
	pthread_mutex_unlock(&c->lock);
}
