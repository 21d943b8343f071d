/*
 * metrics.h - counters, gauges and histograms with label sets, rendered in
 * the Prometheus text exposition format (version 0.0.4).
 *
 * Key decisions: a family's series live in a striped hash table (one mutex
 * per stripe) that is taken only to find or make a series; the value itself
 * changes with an atomic add, so a caller that keeps the series handle
 * (metrics_get()) updates it without any lock.  Series are never removed
 * while the registry lives, so a handle stays valid until metrics_free().
 * The number of series per family is capped: past the cap a new label set is
 * folded into one where the family's last label (e.g. topic) reads
 * METRICS_OTHER, and past a small second allowance into the series whose
 * every label reads METRICS_OTHER, so no client can grow memory without
 * bound by inventing names.  Histograms have fixed bucket bounds given at
 * creation, as integers in the caller's unit, and a scale that divides them
 * when rendered (1000 turns milliseconds into the seconds Prometheus
 * expects).  Values a caller has as a snapshot (jobs per state read from
 * Redis) are not kept here: metrics_write_*() render them in the same format.
 *
 * Threading: every function may be called from any thread, except
 * metrics_free() and family creation, which the owner does before and after
 * the others run.
 */
#ifndef RETRYD_UTIL_METRICS_H
#define RETRYD_UTIL_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

#define METRICS_MAX_LABELS	3
#define METRICS_MAX_BUCKETS	32
#define METRICS_OTHER		"_other"
#define METRICS_DEFAULT_SERIES	10000
/* Label sets beyond a family's cap that may keep their other labels. */
#define METRICS_OVERFLOW_SERIES	1000

enum metrics_type {
	METRICS_COUNTER = 0,
	METRICS_GAUGE,
	METRICS_HISTOGRAM,
};

struct metrics;
struct metrics_family;
struct metrics_series;

struct metrics	*metrics_new(void);
/* Frees the registry, its families and series.  Accepts NULL. */
void	metrics_free(struct metrics *m);

/*
 * A new family, rendered in creation order.  labels: NULL-terminated label
 * names (at most METRICS_MAX_LABELS; NULL for none).  max_series 0 means
 * METRICS_DEFAULT_SERIES.  Histograms: bounds strictly increasing (at most
 * METRICS_MAX_BUCKETS; +Inf is implied), scale >= 1 divides the bounds and
 * the sum when rendered.  The strings are copied.  Aborts on a bad argument
 * (a programming error).
 */
struct metrics_family *metrics_family_new(struct metrics *m,
	    enum metrics_type type, const char *name, const char *help,
	    const char *const *labels, size_t max_series);
struct metrics_family *metrics_histogram_new(struct metrics *m,
	    const char *name, const char *help, const char *const *labels,
	    size_t max_series, const int64_t *bounds, size_t nbounds,
	    int64_t scale);

/*
 * The series of these label values (as many as the family has labels; NULL
 * when it has none), made when new (or folded, see above).  Never NULL.
 */
struct metrics_series *metrics_get(struct metrics_family *f,
	    const char *const *values);

/* Counters and gauges (lock-free). */
void	metrics_series_add(struct metrics_series *s, int64_t delta);
void	metrics_series_set(struct metrics_series *s, int64_t v);
int64_t	metrics_series_value(const struct metrics_series *s);
/* Histograms (lock-free). */
void	metrics_series_observe(struct metrics_series *s, int64_t v);
/* Observations so far, and in bucket i (not cumulative; i == nbounds is
 * the +Inf bucket). */
uint64_t metrics_series_count(const struct metrics_series *s);
uint64_t metrics_series_bucket(const struct metrics_series *s, size_t i);

/* Shorthands: find the series, then add, set or observe. */
void	metrics_add(struct metrics_family *f, const char *const *values,
	    int64_t delta);
void	metrics_set(struct metrics_family *f, const char *const *values,
	    int64_t v);
void	metrics_observe(struct metrics_family *f, const char *const *values,
	    int64_t v);

/* Series in the family now, and label sets folded so far (every family). */
size_t	metrics_family_series(struct metrics_family *f);
uint64_t metrics_folded(struct metrics *m);

/*
 * Appends every family to out.  0, or -1 with errno ENOBUFS when out's cap
 * was reached (what fitted is there).
 */
int	metrics_render(struct metrics *m, struct buf *out);

/* Rendering of values kept elsewhere, in the same format. */
int	metrics_write_header(struct buf *out, const char *name,
	    const char *help, enum metrics_type type);
/* name{l0="v0",...} value; nlabels may be 0 (names/values NULL). */
int	metrics_write_sample(struct buf *out, const char *name,
	    const char *const *names, const char *const *values,
	    size_t nlabels, int64_t value);

#endif
