/*
 * stats.c - exact percentiles over kept samples (see stats.h).
 *
 * Key decision: sort lazily, on the first percentile asked after a change,
 * so adding a sample stays one store in the hot loop of a workload.
 */
#include "config.h"

#include <stdlib.h>

#include "bench/stats.h"
#include "util/xmalloc.h"

void
samples_add(struct samples *s, int64_t x)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 1024;
		s->v = xreallocarray(s->v, s->cap, sizeof(*s->v));
	}
	s->v[s->n++] = x;
	s->sorted = 0;
}

static int
cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

static void
sort(struct samples *s)
{
	if (!s->sorted && s->n > 1)
		qsort(s->v, s->n, sizeof(*s->v), cmp64);
	s->sorted = 1;
}

int64_t
samples_pct(struct samples *s, double p)
{
	size_t rank;

	if (s->n == 0)
		return 0;
	sort(s);
	if (p <= 0)
		return s->v[0];
	rank = (size_t)((p / 100.0) * (double)s->n + 0.999999);
	if (rank < 1)
		rank = 1;
	if (rank > s->n)
		rank = s->n;
	return s->v[rank - 1];
}

int64_t
samples_min(struct samples *s)
{
	return samples_pct(s, 0);
}

int64_t
samples_max(struct samples *s)
{
	return samples_pct(s, 100);
}

double
samples_mean(const struct samples *s)
{
	double sum = 0;
	size_t i;

	if (s->n == 0)
		return 0;
	for (i = 0; i < s->n; i++)
		sum += (double)s->v[i];
	return sum / (double)s->n;
}

void
samples_clear(struct samples *s)
{
	s->n = 0;
	s->sorted = 0;
}

void
samples_free(struct samples *s)
{
	if (s == NULL)
		return;
	free(s->v);
	s->v = NULL;
	s->n = s->cap = 0;
}
