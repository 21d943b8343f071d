/*
 * metrics.c - counters, gauges and histograms with bounded label sets, in
 * the Prometheus text format.
 *
 * Key decision: finding a series takes one stripe's mutex (the stripe is
 * picked by the hash of the label values, so threads updating different
 * topics rarely meet); changing its value is an atomic add on the series
 * itself, outside any lock.  Series are only ever added, never freed before
 * metrics_free(), which is what makes the lock-free update and the handle
 * returned by metrics_get() safe.  Rendering takes each stripe's mutex in
 * turn while it copies that stripe's values out; a scrape never blocks an
 * update for longer than one stripe takes to print.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/metrics.h"
#include "util/xmalloc.h"

#define STRIPES		16
#define STRIPE_MIN	16	/* initial chains per stripe */

struct metrics_series {
	struct metrics_series	*next;		/* in its chain */
	uint64_t		 hash;
	char			*values[METRICS_MAX_LABELS];
	int64_t			 value;		/* or a histogram's sum */
	uint64_t		 count;		/* histogram */
	uint64_t		*buckets;	/* histogram: nbounds + 1 */
	const struct metrics_family *fam;
};

struct stripe {
	pthread_mutex_t		  lock;
	struct metrics_series	**chain;
	size_t			  nchain;
	size_t			  n;
};

struct metrics_family {
	struct metrics_family	*next;		/* in creation order */
	struct metrics		*reg;
	enum metrics_type	 type;
	char			*name;
	char			*help;
	char			*labels[METRICS_MAX_LABELS];
	size_t			 nlabels;
	size_t			 max_series;
	int64_t			 bounds[METRICS_MAX_BUCKETS];
	size_t			 nbounds;
	int64_t			 scale;
	size_t			 nseries;	/* atomic */
	size_t			 nfolded_kept;	/* atomic: over the cap */
	struct stripe		 stripes[STRIPES];
};

struct metrics {
	struct metrics_family	*first, *last;
	uint64_t		 folded;	/* atomic */
};

static const char *const all_other[METRICS_MAX_LABELS] = {
	METRICS_OTHER, METRICS_OTHER, METRICS_OTHER,
};

struct metrics *
metrics_new(void)
{
	return xcalloc(1, sizeof(struct metrics));
}

static void
family_free(struct metrics_family *f)
{
	struct metrics_series *s, *next;
	size_t i, j, k;

	for (i = 0; i < STRIPES; i++) {
		for (j = 0; j < f->stripes[i].nchain; j++)
			for (s = f->stripes[i].chain[j]; s != NULL; s = next) {
				next = s->next;
				for (k = 0; k < f->nlabels; k++)
					free(s->values[k]);
				free(s->buckets);
				free(s);
			}
		free(f->stripes[i].chain);
		pthread_mutex_destroy(&f->stripes[i].lock);
	}
	for (k = 0; k < f->nlabels; k++)
		free(f->labels[k]);
	free(f->name);
	free(f->help);
	free(f);
}

void
metrics_free(struct metrics *m)
{
	struct metrics_family *f, *next;

	if (m == NULL)
		return;
	for (f = m->first; f != NULL; f = next) {
		next = f->next;
		family_free(f);
	}
	free(m);
}

/* [a-zA-Z_:][a-zA-Z0-9_:]* (labels: no colon). */
static int
valid_name(const char *s, int colon)
{
	size_t i;

	if (s == NULL || s[0] == '\0' || (s[0] >= '0' && s[0] <= '9'))
		return 0;
	for (i = 0; s[i] != '\0'; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') ||
		    (s[i] >= 'A' && s[i] <= 'Z') ||
		    (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
		    (colon && s[i] == ':')))
			return 0;
	return 1;
}

static struct metrics_family *
family_make(struct metrics *m, enum metrics_type type, const char *name,
    const char *help, const char *const *labels, size_t max_series)
{
	struct metrics_family *f;
	size_t i;

	if (!valid_name(name, 1))
		fatalx("metrics: bad metric name %s", name ? name : "(null)");
	f = xcalloc(1, sizeof(*f));
	f->reg = m;
	f->type = type;
	f->name = xstrdup(name);
	f->help = xstrdup(help != NULL ? help : "");
	for (i = 0; labels != NULL && labels[i] != NULL; i++) {
		if (i >= METRICS_MAX_LABELS || !valid_name(labels[i], 0) ||
		    strcmp(labels[i], "le") == 0)
			fatalx("metrics: %s: bad label list", name);
		f->labels[i] = xstrdup(labels[i]);
	}
	f->nlabels = i;
	f->max_series = max_series > 0 ? max_series : METRICS_DEFAULT_SERIES;
	f->scale = 1;
	for (i = 0; i < STRIPES; i++) {
		pthread_mutex_init(&f->stripes[i].lock, NULL);
		f->stripes[i].nchain = STRIPE_MIN;
		f->stripes[i].chain = xcalloc(STRIPE_MIN,
		    sizeof(struct metrics_series *));
	}
	if (m->last != NULL)
		m->last->next = f;
	else
		m->first = f;
	m->last = f;
	return f;
}

struct metrics_family *
metrics_family_new(struct metrics *m, enum metrics_type type,
    const char *name, const char *help, const char *const *labels,
    size_t max_series)
{
	if (type == METRICS_HISTOGRAM)
		fatalx("metrics: %s: use metrics_histogram_new", name);
	return family_make(m, type, name, help, labels, max_series);
}

struct metrics_family *
metrics_histogram_new(struct metrics *m, const char *name, const char *help,
    const char *const *labels, size_t max_series, const int64_t *bounds,
    size_t nbounds, int64_t scale)
{
	struct metrics_family *f;
	size_t i;

	if (nbounds == 0 || nbounds > METRICS_MAX_BUCKETS || scale < 1)
		fatalx("metrics: %s: bad buckets", name);
	for (i = 1; i < nbounds; i++)
		if (bounds[i] <= bounds[i - 1])
			fatalx("metrics: %s: bounds must increase", name);
	f = family_make(m, METRICS_HISTOGRAM, name, help, labels, max_series);
	memcpy(f->bounds, bounds, nbounds * sizeof(bounds[0]));
	f->nbounds = nbounds;
	f->scale = scale;
	return f;
}

/* FNV-1a over the values, each followed by a 0 byte. */
static uint64_t
values_hash(const struct metrics_family *f, const char *const *values)
{
	uint64_t h = 14695981039346656037ULL;
	const unsigned char *p;
	size_t i;

	for (i = 0; i < f->nlabels; i++) {
		for (p = (const unsigned char *)values[i]; *p != '\0'; p++) {
			h ^= *p;
			h *= 1099511628211ULL;
		}
		h ^= 0xff;
		h *= 1099511628211ULL;
	}
	return h;
}

static struct metrics_series *
chain_find(struct stripe *st, const struct metrics_family *f, uint64_t h,
    const char *const *values)
{
	struct metrics_series *s;
	size_t i;

	for (s = st->chain[(h / STRIPES) % st->nchain]; s != NULL;
	    s = s->next) {
		if (s->hash != h)
			continue;
		for (i = 0; i < f->nlabels; i++)
			if (strcmp(s->values[i], values[i]) != 0)
				break;
		if (i == f->nlabels)
			return s;
	}
	return NULL;
}

static void
stripe_grow(struct stripe *st)
{
	struct metrics_series **nc, *s, *next;
	size_t n = st->nchain * 2, i;

	nc = xcalloc(n, sizeof(*nc));
	for (i = 0; i < st->nchain; i++)
		for (s = st->chain[i]; s != NULL; s = next) {
			next = s->next;
			s->next = nc[(s->hash / STRIPES) % n];
			nc[(s->hash / STRIPES) % n] = s;
		}
	free(st->chain);
	st->chain = nc;
	st->nchain = n;
}

/*
 * Find or make the series.  With counter, making one takes a place in
 * *counter, and none is made (NULL) when that would pass limit.
 */
static struct metrics_series *
lookup(struct metrics_family *f, const char *const *values, size_t limit,
    size_t *counter)
{
	uint64_t h = values_hash(f, values);
	struct stripe *st = &f->stripes[h % STRIPES];
	struct metrics_series *s;
	size_t i;

	pthread_mutex_lock(&st->lock);
	if ((s = chain_find(st, f, h, values)) != NULL)
		goto out;
	if (counter != NULL && __atomic_add_fetch(counter, 1,
	    __ATOMIC_RELAXED) > limit) {
		__atomic_sub_fetch(counter, 1, __ATOMIC_RELAXED);
		goto out;
	}
	s = xcalloc(1, sizeof(*s));
	s->hash = h;
	s->fam = f;
	for (i = 0; i < f->nlabels; i++)
		s->values[i] = xstrdup(values[i]);
	if (f->type == METRICS_HISTOGRAM)
		s->buckets = xcalloc(f->nbounds + 1, sizeof(uint64_t));
	if (st->n >= st->nchain * 2)
		stripe_grow(st);
	s->next = st->chain[(h / STRIPES) % st->nchain];
	st->chain[(h / STRIPES) % st->nchain] = s;
	st->n++;
out:
	pthread_mutex_unlock(&st->lock);
	return s;
}

struct metrics_series *
metrics_get(struct metrics_family *f, const char *const *values)
{
	const char *folded[METRICS_MAX_LABELS];
	struct metrics_series *s;
	size_t i;

	if (f->nlabels == 0)
		values = all_other;	/* not read: no labels */
	s = lookup(f, values, f->max_series, &f->nseries);
	if (s != NULL)
		return s;
	__atomic_add_fetch(&f->reg->folded, 1, __ATOMIC_RELAXED);
	if (f->nlabels == 0)		/* cannot happen: one series */
		return lookup(f, all_other, 0, NULL);
	/* Over the cap: keep every label but the last. */
	for (i = 0; i < f->nlabels; i++)
		folded[i] = values[i];
	folded[f->nlabels - 1] = METRICS_OTHER;
	s = lookup(f, folded, METRICS_OVERFLOW_SERIES, &f->nfolded_kept);
	if (s != NULL)
		return s;
	/* Over that too: the one series of all METRICS_OTHER. */
	return lookup(f, all_other, 0, NULL);
}

void
metrics_series_add(struct metrics_series *s, int64_t delta)
{
	__atomic_add_fetch(&s->value, delta, __ATOMIC_RELAXED);
}

void
metrics_series_set(struct metrics_series *s, int64_t v)
{
	__atomic_store_n(&s->value, v, __ATOMIC_RELAXED);
}

int64_t
metrics_series_value(const struct metrics_series *s)
{
	return __atomic_load_n(&s->value, __ATOMIC_RELAXED);
}

void
metrics_series_observe(struct metrics_series *s, int64_t v)
{
	const struct metrics_family *f = s->fam;
	size_t lo = 0, hi = f->nbounds, mid;

	/* The first bound >= v (le semantics), or nbounds for +Inf. */
	while (lo < hi) {
		mid = (lo + hi) / 2;
		if (f->bounds[mid] >= v)
			hi = mid;
		else
			lo = mid + 1;
	}
	__atomic_add_fetch(&s->buckets[lo], 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&s->value, v, __ATOMIC_RELAXED);
	__atomic_add_fetch(&s->count, 1, __ATOMIC_RELAXED);
}

uint64_t
metrics_series_count(const struct metrics_series *s)
{
	return __atomic_load_n(&s->count, __ATOMIC_RELAXED);
}

uint64_t
metrics_series_bucket(const struct metrics_series *s, size_t i)
{
	if (s->buckets == NULL || i > s->fam->nbounds)
		return 0;
	return __atomic_load_n(&s->buckets[i], __ATOMIC_RELAXED);
}

void
metrics_add(struct metrics_family *f, const char *const *values,
    int64_t delta)
{
	metrics_series_add(metrics_get(f, values), delta);
}

void
metrics_set(struct metrics_family *f, const char *const *values, int64_t v)
{
	metrics_series_set(metrics_get(f, values), v);
}

void
metrics_observe(struct metrics_family *f, const char *const *values,
    int64_t v)
{
	metrics_series_observe(metrics_get(f, values), v);
}

size_t
metrics_family_series(struct metrics_family *f)
{
	size_t i, n = 0;

	for (i = 0; i < STRIPES; i++) {
		pthread_mutex_lock(&f->stripes[i].lock);
		n += f->stripes[i].n;
		pthread_mutex_unlock(&f->stripes[i].lock);
	}
	return n;
}

uint64_t
metrics_folded(struct metrics *m)
{
	return __atomic_load_n(&m->folded, __ATOMIC_RELAXED);
}

/* ---- rendering ---------------------------------------------------------- */

static const char *
type_name(enum metrics_type t)
{
	switch (t) {
	case METRICS_COUNTER:
		return "counter";
	case METRICS_GAUGE:
		return "gauge";
	default:
		return "histogram";
	}
}

/*
 * s with backslash and newline escaped, and the double quote too when
 * quote (a label value; HELP text leaves it as is).
 */
static int
put_escaped(struct buf *out, const char *s, int quote)
{
	for (; *s != '\0'; s++) {
		if (*s == '\\' ? buf_puts(out, "\\\\") == -1 :
		    *s == '"' && quote ? buf_puts(out, "\\\"") == -1 :
		    *s == '\n' ? buf_puts(out, "\\n") == -1 :
		    buf_append(out, s, 1) == -1)
			return -1;
	}
	return 0;
}

/*
 * v / scale as a decimal without binary rounding ("0.25", "3", "-1.5") when
 * scale is a power of ten; any other scale prints as %g.
 */
static int
put_scaled(struct buf *out, int64_t v, int64_t scale)
{
	char frac[24];
	uint64_t a, sc, rem;
	int digits = 0, i;

	if (scale <= 1)
		return buf_printf(out, "%" PRId64, v);
	for (sc = (uint64_t)scale; sc % 10 == 0; sc /= 10)
		digits++;
	if (sc != 1)
		return buf_printf(out, "%g", (double)v / (double)scale);
	a = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
	sc = (uint64_t)scale;
	if (a % sc == 0)
		return buf_printf(out, "%s%" PRIu64, v < 0 ? "-" : "", a / sc);
	/* The fraction's digits, leading zeros included, trailing cut. */
	rem = a % sc;
	for (i = digits - 1; i >= 0; i--) {
		frac[i] = (char)('0' + rem % 10);
		rem /= 10;
	}
	frac[digits] = '\0';
	for (i = digits - 1; i > 0 && frac[i] == '0'; i--)
		frac[i] = '\0';
	return buf_printf(out, "%s%" PRIu64 ".%s", v < 0 ? "-" : "", a / sc,
	    frac);
}

int
metrics_write_header(struct buf *out, const char *name, const char *help,
    enum metrics_type type)
{
	if (buf_printf(out, "# HELP %s ", name) == -1 ||
	    put_escaped(out, help != NULL ? help : "", 0) == -1 ||
	    buf_printf(out, "\n# TYPE %s %s\n", name, type_name(type)) == -1)
		return -1;
	return 0;
}

/* name{labels[,le="..."]} : everything up to the value. */
static int
put_series_name(struct buf *out, const char *name, const char *suffix,
    const char *const *names, const char *const *values, size_t nlabels,
    const char *le)
{
	size_t i;

	if (buf_puts(out, name) == -1 || buf_puts(out, suffix) == -1)
		return -1;
	if (nlabels == 0 && le == NULL)
		return 0;
	if (buf_puts(out, "{") == -1)
		return -1;
	for (i = 0; i < nlabels; i++)
		if (buf_printf(out, "%s%s=\"", i ? "," : "", names[i]) == -1 ||
		    put_escaped(out, values[i], 1) == -1 ||
		    buf_puts(out, "\"") == -1)
			return -1;
	if (le != NULL && buf_printf(out, "%sle=\"%s\"", nlabels ? "," : "",
	    le) == -1)
		return -1;
	return buf_puts(out, "}");
}

int
metrics_write_sample(struct buf *out, const char *name,
    const char *const *names, const char *const *values, size_t nlabels,
    int64_t value)
{
	if (put_series_name(out, name, "", names, values, nlabels, NULL) ==
	    -1 || buf_printf(out, " %" PRId64 "\n", value) == -1)
		return -1;
	return 0;
}

static int
render_histogram(struct buf *out, const struct metrics_family *f,
    const struct metrics_series *s)
{
	const char *const *names = (const char *const *)f->labels;
	const char *const *values = (const char *const *)s->values;
	struct buf le;
	uint64_t cum = 0;
	size_t i;
	int rc = -1;

	buf_init(&le, 64);
	for (i = 0; i <= f->nbounds; i++) {
		cum += metrics_series_bucket(s, i);
		buf_reset(&le);
		if (i < f->nbounds) {
			if (put_scaled(&le, f->bounds[i], f->scale) == -1)
				goto out;
		} else if (buf_puts(&le, "+Inf") == -1)
			goto out;
		if (put_series_name(out, f->name, "_bucket", names, values,
		    f->nlabels, le.data) == -1 ||
		    buf_printf(out, " %" PRIu64 "\n", cum) == -1)
			goto out;
	}
	/* The count is the +Inf bucket's, so the two always agree. */
	if (put_series_name(out, f->name, "_sum", names, values, f->nlabels,
	    NULL) == -1 || buf_puts(out, " ") == -1 ||
	    put_scaled(out, metrics_series_value(s), f->scale) == -1 ||
	    buf_puts(out, "\n") == -1 ||
	    put_series_name(out, f->name, "_count", names, values, f->nlabels,
	    NULL) == -1 || buf_printf(out, " %" PRIu64 "\n", cum) == -1)
		goto out;
	rc = 0;
out:
	buf_free(&le);
	return rc;
}

static int
render_family(struct buf *out, struct metrics_family *f)
{
	struct metrics_series *s;
	struct stripe *st;
	size_t i, j;
	int rc = 0;

	if (metrics_write_header(out, f->name, f->help, f->type) == -1)
		return -1;
	for (i = 0; i < STRIPES && rc == 0; i++) {
		st = &f->stripes[i];
		pthread_mutex_lock(&st->lock);
		for (j = 0; j < st->nchain && rc == 0; j++)
			for (s = st->chain[j]; s != NULL && rc == 0;
			    s = s->next) {
				if (f->type == METRICS_HISTOGRAM)
					rc = render_histogram(out, f, s);
				else
					rc = metrics_write_sample(out, f->name,
					    (const char *const *)f->labels,
					    (const char *const *)s->values,
					    f->nlabels,
					    metrics_series_value(s));
			}
		pthread_mutex_unlock(&st->lock);
	}
	return rc;
}

int
metrics_render(struct metrics *m, struct buf *out)
{
	struct metrics_family *f;

	for (f = m->first; f != NULL; f = f->next)
		if (render_family(out, f) == -1) {
			errno = ENOBUFS;
			return -1;
		}
	return 0;
}
