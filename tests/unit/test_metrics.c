/*
 * test_metrics.c - unit tests for util/metrics: values, the text format
 * (exact lines), histogram buckets, label escaping, the series cap and
 * concurrent updates.
 *
 * Key decision: the rendering is checked line by line against the exact
 * text Prometheus expects (one row per expected line), since a scraper
 * rejects a whole page for one malformed line.
 */
#include "config.h"

#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/buf.h"
#include "util/metrics.h"

#define NELEM(a)	(sizeof(a) / sizeof((a)[0]))

static char *
render(struct metrics *m)
{
	struct buf b;

	buf_init(&b, 1 << 24);
	assert_int_equal(metrics_render(m, &b), 0);
	return buf_steal(&b, NULL);
}

/* Every line of want[] appears as a whole line of text. */
static void
assert_lines(const char *text, const char *const *want, size_t n)
{
	char line[512];
	size_t i;

	for (i = 0; i < n; i++) {
		snprintf(line, sizeof(line), "\n%s\n", want[i]);
		if (strstr(text, line) == NULL &&
		    strncmp(text, line + 1, strlen(line + 1)) != 0)
			fail_msg("missing line: %s\n--- text:\n%s", want[i],
			    text);
	}
}

static void
test_counter_gauge(void **state)
{
	static const char *const labels[] = { "tenant", "topic", NULL };
	static const char *const want[] = {
		"# HELP t_pushes_total Jobs pushed.",
		"# TYPE t_pushes_total counter",
		"t_pushes_total{tenant=\"acme\",topic=\"orders\"} 3",
		"t_pushes_total{tenant=\"acme\",topic=\"mail\"} 1",
		"# TYPE t_up gauge",
		"t_up 1",
		"# HELP t_odd A \\\\ and a\\nnewline.",
	};
	struct metrics *m = metrics_new();
	struct metrics_family *c, *g, *o;
	struct metrics_series *s;
	const char *v1[] = { "acme", "orders" }, *v2[] = { "acme", "mail" };
	char *text;

	(void)state;
	c = metrics_family_new(m, METRICS_COUNTER, "t_pushes_total",
	    "Jobs pushed.", labels, 0);
	g = metrics_family_new(m, METRICS_GAUGE, "t_up", "Up.", NULL, 0);
	o = metrics_family_new(m, METRICS_GAUGE, "t_odd",
	    "A \\ and a\nnewline.", NULL, 0);
	metrics_add(c, v1, 2);
	metrics_add(c, v1, 1);
	metrics_add(c, v2, 1);
	metrics_set(g, NULL, 5);
	metrics_set(g, NULL, 1);
	s = metrics_get(c, v1);
	assert_int_equal(metrics_series_value(s), 3);
	assert_ptr_equal(s, metrics_get(c, v1));
	assert_int_equal(metrics_family_series(c), 2);
	assert_int_equal(metrics_family_series(g), 1);
	(void)o;
	text = render(m);
	assert_lines(text, want, NELEM(want));
	free(text);
	metrics_free(m);
	metrics_free(NULL);
}

static void
test_histogram(void **state)
{
	static const int64_t bounds[] = { 5, 10, 100, 2500 };
	static const char *const labels[] = { "kind", NULL };
	static const char *const want[] = {
		"# TYPE t_lat_seconds histogram",
		"t_lat_seconds_bucket{kind=\"a\",le=\"0.005\"} 1",
		"t_lat_seconds_bucket{kind=\"a\",le=\"0.01\"} 3",
		"t_lat_seconds_bucket{kind=\"a\",le=\"0.1\"} 4",
		"t_lat_seconds_bucket{kind=\"a\",le=\"2.5\"} 4",
		"t_lat_seconds_bucket{kind=\"a\",le=\"+Inf\"} 5",
		"t_lat_seconds_sum{kind=\"a\"} 5.076",
		"t_lat_seconds_count{kind=\"a\"} 5",
	};
	struct metrics *m = metrics_new();
	struct metrics_family *h;
	struct metrics_series *s;
	const char *a[] = { "a" };
	char *text;

	(void)state;
	h = metrics_histogram_new(m, "t_lat_seconds", "Lateness.", labels, 0,
	    bounds, NELEM(bounds), 1000);
	s = metrics_get(h, a);
	/* le: a value equal to a bound falls in that bound's bucket. */
	metrics_series_observe(s, 0);
	metrics_series_observe(s, 10);
	metrics_series_observe(s, 6);
	metrics_series_observe(s, 60);
	metrics_series_observe(s, 5000);
	assert_int_equal(metrics_series_count(s), 5);
	assert_int_equal(metrics_series_bucket(s, 0), 1);
	assert_int_equal(metrics_series_bucket(s, 1), 2);
	assert_int_equal(metrics_series_bucket(s, 4), 1);
	text = render(m);
	assert_lines(text, want, NELEM(want));
	free(text);
	metrics_free(m);
}

static void
test_escaping(void **state)
{
	static const char *const labels[] = { "v", NULL };
	static const char *const want[] = {
		"t_esc{v=\"a\\\"b\\\\c\\nd\"} 1",
	};
	struct metrics *m = metrics_new();
	struct metrics_family *f;
	const char *v[] = { "a\"b\\c\nd" };
	struct buf b;
	char *text;

	(void)state;
	f = metrics_family_new(m, METRICS_COUNTER, "t_esc", "", labels, 0);
	metrics_add(f, v, 1);
	text = render(m);
	assert_lines(text, want, NELEM(want));
	free(text);
	/* A full buffer is reported, not overrun. */
	buf_init(&b, 16);
	assert_int_equal(metrics_render(m, &b), -1);
	assert_true(b.len <= 16);
	buf_free(&b);
	metrics_free(m);
}

static void
test_cap(void **state)
{
	static const char *const labels[] = { "tenant", "topic", NULL };
	struct metrics *m = metrics_new();
	struct metrics_family *f;
	const char *v[2], *other[] = { "a", METRICS_OTHER },
	    *all[] = { METRICS_OTHER, METRICS_OTHER };
	char tenant[32], topic[32];
	int i;

	(void)state;
	f = metrics_family_new(m, METRICS_COUNTER, "t_cap", "", labels, 3);
	v[0] = "a";
	v[1] = topic;
	for (i = 0; i < 10; i++) {
		snprintf(topic, sizeof(topic), "q%d", i);
		metrics_add(f, v, 1);
	}
	/* Three real series, the other seven folded into (a, _other). */
	assert_int_equal(metrics_series_value(metrics_get(f, other)), 7);
	assert_int_equal(metrics_family_series(f), 4);
	assert_int_equal(metrics_folded(m), 7);
	/* An existing series keeps counting after the cap. */
	snprintf(topic, sizeof(topic), "q0");
	metrics_add(f, v, 1);
	assert_int_equal(metrics_series_value(metrics_get(f, v)), 2);
	/* Thousands of tenants: bounded by cap + allowance + 1. */
	v[0] = tenant;
	for (i = 0; i < 3 * METRICS_OVERFLOW_SERIES; i++) {
		snprintf(tenant, sizeof(tenant), "t%d", i);
		snprintf(topic, sizeof(topic), "x");
		metrics_add(f, v, 1);
	}
	assert_true(metrics_family_series(f) <= 3 + METRICS_OVERFLOW_SERIES +
	    1);
	assert_true(metrics_series_value(metrics_get(f, all)) >=
	    2 * METRICS_OVERFLOW_SERIES - 1);
	metrics_free(m);
}

struct worker {
	struct metrics_family	*f, *h;
	int			 id;
};

#define ROUNDS	20000

static void *
work(void *arg)
{
	struct worker *w = arg;
	char topic[16];
	const char *shared[] = { "shared" }, *own[] = { topic };
	int i;

	snprintf(topic, sizeof(topic), "t%d", w->id);
	for (i = 0; i < ROUNDS; i++) {
		metrics_add(w->f, shared, 1);
		metrics_add(w->f, own, 2);
		metrics_observe(w->h, NULL, i % 100);
	}
	return NULL;
}

static void
test_threads(void **state)
{
	static const char *const labels[] = { "topic", NULL };
	static const int64_t bounds[] = { 10, 50 };
	struct metrics *m = metrics_new();
	struct worker w[4];
	pthread_t th[4];
	const char *shared[] = { "shared" }, *t1[] = { "t1" };
	struct metrics_series *hs;
	int i;

	(void)state;
	for (i = 0; i < 4; i++) {
		w[i].f = i == 0 ? metrics_family_new(m, METRICS_COUNTER,
		    "t_thr", "", labels, 0) : w[0].f;
		w[i].h = i == 0 ? metrics_histogram_new(m, "t_thr_h", "",
		    NULL, 0, bounds, 2, 1) : w[0].h;
		w[i].id = i;
	}
	for (i = 0; i < 4; i++)
		assert_int_equal(pthread_create(&th[i], NULL, work, &w[i]), 0);
	for (i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(metrics_series_value(metrics_get(w[0].f, shared)),
	    4 * ROUNDS);
	assert_int_equal(metrics_series_value(metrics_get(w[0].f, t1)),
	    2 * ROUNDS);
	hs = metrics_get(w[0].h, NULL);
	assert_int_equal(metrics_series_count(hs), 4 * ROUNDS);
	assert_int_equal(metrics_series_bucket(hs, 0) +
	    metrics_series_bucket(hs, 1) + metrics_series_bucket(hs, 2),
	    4 * ROUNDS);
	metrics_free(m);
}

static void
test_write_sample(void **state)
{
	static const char *const names[] = { "tenant", "topic", "state" };
	static const char *const values[] = { "acme", "orders", "dead" };
	struct buf b;

	(void)state;
	buf_init(&b, 4096);
	assert_int_equal(metrics_write_header(&b, "t_jobs", "Jobs.",
	    METRICS_GAUGE), 0);
	assert_int_equal(metrics_write_sample(&b, "t_jobs", names, values, 3,
	    -4), 0);
	assert_int_equal(metrics_write_sample(&b, "t_n", NULL, NULL, 0, 7), 0);
	assert_string_equal(b.data, "# HELP t_jobs Jobs.\n"
	    "# TYPE t_jobs gauge\n"
	    "t_jobs{tenant=\"acme\",topic=\"orders\",state=\"dead\"} -4\n"
	    "t_n 7\n");
	buf_free(&b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counter_gauge),
		cmocka_unit_test(test_histogram),
		cmocka_unit_test(test_escaping),
		cmocka_unit_test(test_cap),
		cmocka_unit_test(test_threads),
		cmocka_unit_test(test_write_sample),
	};

	return cmocka_run_group_tests_name("metrics", tests, NULL, NULL);
}
