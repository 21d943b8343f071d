/*
 * stats.h - samples and percentiles for the bench tool.
 *
 * Key decision: keep every sample and sort once.  The largest workload keeps
 * a few hundred thousand 8-byte samples, so exact percentiles cost a few
 * megabytes and one qsort, and nobody has to argue about histogram buckets.
 * Percentiles use the nearest-rank definition.
 */
#ifndef RETRYD_BENCH_STATS_H
#define RETRYD_BENCH_STATS_H

#include <stddef.h>
#include <stdint.h>

struct samples {
	int64_t	*v;
	size_t	 n;
	size_t	 cap;
	int	 sorted;
};

void	samples_add(struct samples *s, int64_t x);
/* Nearest-rank percentile, p in [0, 100]; 0 when there are no samples. */
int64_t	samples_pct(struct samples *s, double p);
int64_t	samples_min(struct samples *s);
int64_t	samples_max(struct samples *s);
double	samples_mean(const struct samples *s);
void	samples_clear(struct samples *s);
void	samples_free(struct samples *s);

#endif
