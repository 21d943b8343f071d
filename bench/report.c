/*
 * report.c - `retryd-bench report FILE...`: the results table, made from the
 * JSON lines of a run (the workloads' and the ceilings bench/run measured
 * with redis-benchmark and wrk).
 *
 * Key decision: the targets of issue 7 live here, in one table of rows,
 * and nowhere else.  The workloads only measure; this file says which
 * figure is held to which target, which ceiling it is a fraction of, and
 * which empty-queue figure a W6 figure must stay within 20% of.  A later
 * line for the same workload replaces an earlier one, so a file that holds
 * several runs reports the last.  Verdicts: "ok", "MISS" (a target missed:
 * timing, never a failure of the tool), "FAIL" (a correctness check).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "util/xmalloc.h"

#define MAX_LINES	4096

enum dir {
	INFO = 0,	/* no target */
	MIN,		/* value >= target */
	MAX,		/* value <= target */
	ZERO,		/* correctness: value == 0 */
	CHECK,		/* correctness: the workload's ok_check */
};

struct row {
	const char	*workload;
	const char	*field;
	const char	*label;
	enum dir	 dir;
	double		 target;
	const char	*ceiling;	/* workload of the ceiling, or NULL */
	const char	*base;		/* W6: the empty-queue workload */
	const char	*bullmq;
};

static const struct row rows[] = {
	{ "w1_single", "jobs_per_s", "W1 enqueue single, jobs/s", MIN, 40000,
	  "ceiling_redis_evalsha", NULL, "15-20k" },
	{ "w1_single", "req_p99_ms", "W1 single request p99, ms", INFO, 0,
	  NULL, NULL, NULL },
	{ "w1_single", "data_bytes_per_job",
	  "W1 Redis B/pending job (single)", MAX, 250, NULL, NULL, "880" },
	{ "w1_single", "clients_bytes_per_job",
	  "  and connections' buffers, B/job", INFO, 0, NULL, NULL, NULL },
	{ "w1_single", "retryd_cpu_us_per_job",
	  "  retryd CPU per job (single), us", INFO, 0, NULL, NULL, NULL },
	{ "w1_single", "redis_cpu_us_per_job",
	  "  Redis CPU per job (single), us", INFO, 0, NULL, NULL, NULL },
	{ "w1_batch", "jobs_per_s", "W1 enqueue batch 1000, jobs/s", MIN,
	  120000, "ceiling_redis_evalsha_p16", NULL, NULL },
	{ "w1_batch", "data_bytes_per_job", "W1 Redis B/pending job (batch)",
	  MAX, 250, NULL, NULL, "880" },
	{ "w1_batch", "retryd_cpu_us_per_job",
	  "  retryd CPU per job (batch), us", INFO, 0, NULL, NULL, NULL },
	{ "w1_ids", "jobs_per_s", "W1 single with client ids, jobs/s", INFO,
	  0, "ceiling_redis_evalsha", NULL, NULL },
	{ "w2", "late_p50_ms", "W2 lateness p50, ms", INFO, 0,
	  "ceiling_timer", NULL, NULL },
	{ "w2", "late_p90_ms", "W2 lateness p90, ms", INFO, 0,
	  "ceiling_timer", NULL, NULL },
	{ "w2", "late_p99_ms", "W2 lateness p99, ms", MAX, 5,
	  "ceiling_timer", NULL, "~140" },
	{ "w2", "late_max_ms", "W2 lateness max, ms", INFO, 0,
	  "ceiling_timer", NULL, NULL },
	{ "w2", "early", "W2 early deliveries", ZERO, 0, NULL, NULL, NULL },
	{ "w2", "duplicates", "W2 duplicates", ZERO, 0, NULL, NULL, NULL },
	{ "w2", "missing", "W2 missing", ZERO, 0, NULL, NULL, NULL },
	{ "w3", "deliveries_per_s", "W3 burst deliveries/s", MIN, 25000,
	  "ceiling_receiver", NULL, "4.4k" },
	{ "w3", "drain_s", "W3 time to drain, s", INFO, 0, NULL, NULL, NULL },
	{ "w3", "late_p50_ms", "W3 lateness p50, ms", INFO, 0, NULL, NULL,
	  NULL },
	{ "w3", "late_p99_ms", "W3 lateness p99, ms", INFO, 0, NULL, NULL,
	  NULL },
	{ "w3", "early", "W3 early deliveries", ZERO, 0, NULL, NULL, NULL },
	{ "w3", "duplicates", "W3 duplicates", ZERO, 0, NULL, NULL, NULL },
	{ "w4", "spacing_err_p50_ms", "W4 spacing error p50, ms", INFO, 0,
	  NULL, NULL, NULL },
	{ "w4", "spacing_err_p90_ms", "W4 spacing error p90, ms", INFO, 0,
	  NULL, NULL, NULL },
	{ "w4", "spacing_err_p99_ms", "W4 spacing error p99, ms", MAX, 10,
	  NULL, NULL, NULL },
	{ "w4", "spacing_err_max_ms", "W4 spacing error max, ms", INFO, 0,
	  NULL, NULL, NULL },
	{ "w4", "missing_attempts", "W4 attempts missing", ZERO, 0, NULL,
	  NULL, NULL },
	{ "w4", "early", "W4 early attempts", ZERO, 0, NULL, NULL, NULL },
	{ "w5", "per_s", "W5 pull reserve+ack/s", MIN, 30000,
	  "ceiling_redis_evalsha", NULL, NULL },
	{ "w5", "duplicates", "W5 duplicates", ZERO, 0, NULL, NULL, NULL },
	/* The batched form: reserve?max=B, one POST /v1/jobs:ack. */
	{ "w5_batch", "per_s", "W5 pull batched reserve+ack/s", MIN, 30000,
	  "ceiling_redis_evalsha_p16", NULL, NULL },
	{ "w5_batch", "duplicates", "W5 batched duplicates", ZERO, 0, NULL,
	  NULL, NULL },
	{ "w6_preload", "jobs_per_s", "W6 preload (batch), jobs/s", INFO, 0,
	  "ceiling_redis_evalsha_p16", NULL, NULL },
	{ "w6_preload", "data_bytes_per_job", "W6 Redis B/pending job", MAX,
	  250, NULL, NULL, "880" },
	{ "w6_w1_single", "jobs_per_s", "W6 W1 single, jobs/s", MIN, 0,
	  NULL, "w1_single", NULL },
	{ "w6_w1_batch", "jobs_per_s", "W6 W1 batch, jobs/s", MIN, 0, NULL,
	  "w1_batch", NULL },
	{ "w6_w2", "late_p99_ms", "W6 W2 lateness p99, ms", MAX, 0, NULL,
	  "w2", NULL },
	{ "w6_w2", "early", "W6 W2 early deliveries", ZERO, 0, NULL, NULL,
	  NULL },
	{ "w1_single", "ok_check", "W1 single: every push accepted", CHECK,
	  0, NULL, NULL, NULL },
	{ "w1_batch", "ok_check", "W1 batch: every push accepted", CHECK, 0,
	  NULL, NULL, NULL },
	{ "w1_ids", "ok_check", "W1 client ids: every push accepted", CHECK,
	  0, NULL, NULL, NULL },
	{ "w2", "ok_check", "W2: exactly once, never early", CHECK, 0, NULL,
	  NULL, NULL },
	{ "w3", "ok_check", "W3: exactly once, never early", CHECK, 0, NULL,
	  NULL, NULL },
	{ "w4", "ok_check", "W4: every job done at attempt 3", CHECK, 0,
	  NULL, NULL, NULL },
	{ "w5", "ok_check", "W5: every job acked once", CHECK, 0, NULL, NULL,
	  NULL },
	{ "w5_batch", "ok_check", "W5 batched: every job acked once", CHECK,
	  0, NULL, NULL, NULL },
	{ "w6_preload", "ok_check", "W6 preload: every push accepted", CHECK,
	  0, NULL, NULL, NULL },
	{ "w6_w2", "ok_check", "W6 W2: exactly once, never early", CHECK, 0,
	  NULL, NULL, NULL },
	{ "w6_w1_single", "ok_check", "W6 W1 single: every push accepted",
	  CHECK, 0, NULL, NULL, NULL },
	{ "w6_w1_batch", "ok_check", "W6 W1 batch: every push accepted",
	  CHECK, 0, NULL, NULL, NULL },
	{ "ceiling_redis_zadd", "rps", "ceiling redis ZADD/s", INFO, 0, NULL,
	  NULL, NULL },
	{ "ceiling_redis_zadd_p16", "rps", "ceiling redis ZADD -P16/s", INFO,
	  0, NULL, NULL, NULL },
	{ "ceiling_redis_evalsha", "rps", "ceiling redis EVALSHA/s", INFO, 0,
	  NULL, NULL, NULL },
	{ "ceiling_redis_evalsha_p16", "rps", "ceiling redis EVALSHA -P16/s",
	  INFO, 0, NULL, NULL, NULL },
	{ "ceiling_receiver", "rps", "ceiling receiver (wrk) req/s", INFO, 0,
	  NULL, NULL, NULL },
	{ "ceiling_timer", "late_p50_ms", "ceiling timer lateness p50, ms",
	  INFO, 0, NULL, NULL, NULL },
	{ "ceiling_timer", "late_p99_ms", "ceiling timer lateness p99, ms",
	  INFO, 0, NULL, NULL, NULL },
	{ "ceiling_timer", "late_max_ms", "ceiling timer lateness max, ms",
	  INFO, 0, NULL, NULL, NULL },
};

struct lines {
	struct json_object	*o[MAX_LINES];
	const char		*name[MAX_LINES];
	int			 n;
};

static struct json_object *
find(const struct lines *l, const char *workload)
{
	int i;

	for (i = l->n - 1; i >= 0; i--)
		if (strcmp(l->name[i], workload) == 0)
			return l->o[i];
	return NULL;
}

static int
get_num(const struct lines *l, const char *workload, const char *field,
    double *v)
{
	struct json_object *o = find(l, workload), *x;

	if (o == NULL || !json_object_object_get_ex(o, field, &x))
		return -1;
	if (!json_object_is_type(x, json_type_int) &&
	    !json_object_is_type(x, json_type_double))
		return -1;
	*v = json_object_get_double(x);
	return 0;
}

static int
load(struct lines *l, const char *file)
{
	char line[65536];
	struct json_object *o, *w;
	FILE *f;

	f = fopen(file, "r");
	if (f == NULL) {
		fprintf(stderr, "retryd-bench: %s: %s\n", file,
		    strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f) != NULL && l->n < MAX_LINES) {
		o = json_tokener_parse(line);
		if (o == NULL || !json_object_object_get_ex(o, "workload",
		    &w) || !json_object_is_type(w, json_type_string)) {
			json_object_put(o);
			continue;
		}
		l->o[l->n] = o;
		l->name[l->n] = json_object_get_string(w);
		l->n++;
	}
	fclose(f);
	return 0;
}

static void
fmt_num(char *s, size_t n, double v)
{
	double a = v < 0 ? -v : v;

	if (a >= 1000 || (a < 1e15 && v == (double)(int64_t)v))
		snprintf(s, n, "%.0f", v);
	else if (a >= 10)
		snprintf(s, n, "%.1f", v);
	else
		snprintf(s, n, "%.3f", v);
}

static const char *
meta_str(const struct lines *l, const char *k)
{
	struct json_object *o = find(l, "meta"), *v;

	if (o == NULL || !json_object_object_get_ex(o, k, &v))
		return "?";
	return json_object_get_string(v);
}

/* Did the correctness checks of workload pass?  -1 when unknown. */
static int
checks(const struct lines *l, const char *workload)
{
	struct json_object *o = find(l, workload), *v;

	if (o == NULL || !json_object_object_get_ex(o, "ok_check", &v))
		return -1;
	return json_object_get_boolean(v);
}

static void
print_rows(const struct lines *l, int *miss, int *fail)
{
	char val[32], tgt[48], ratio[48];
	const char *verdict;
	double v, t, c, base;
	enum dir d;
	size_t i;
	int k;

	printf("%-34s %12s %14s %18s %8s %s\n", "figure", "value", "target",
	    "vs ceiling/base", "BullMQ", "verdict");
	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];

		if (r->dir == CHECK) {
			if ((k = checks(l, r->workload)) == -1)
				continue;
			if (k == 0)
				(*fail)++;
			printf("%-34s %12s %14s %18s %8s %s\n", r->label,
			    k ? "pass" : "fail", "pass", "", "",
			    k ? "ok" : "FAIL");
			continue;
		}
		if (get_num(l, r->workload, r->field, &v) == -1)
			continue;
		fmt_num(val, sizeof(val), v);
		tgt[0] = ratio[0] = '\0';
		t = r->target;
		d = r->dir;
		if (r->base != NULL &&
		    get_num(l, r->base, r->field, &base) == 0 && base != 0) {
			/* Within 20% of the empty-queue figure. */
			t = r->dir == MIN ? base * 0.8 : base * 1.2;
			snprintf(ratio, sizeof(ratio), "%.2fx %s", v / base,
			    r->base);
		} else if (r->base != NULL)
			d = INFO;	/* nothing to compare with */
		else if (r->ceiling != NULL &&
		    get_num(l, r->ceiling, "rps", &c) == 0 && c > 0)
			snprintf(ratio, sizeof(ratio), "%.2f of %s", v / c,
			    r->ceiling + strlen("ceiling_"));
		else if (r->ceiling != NULL &&
		    get_num(l, r->ceiling, r->field, &c) == 0 && c > 0)
			/* A latency: how many times the machine's own. */
			snprintf(ratio, sizeof(ratio), "%.1fx %s", v / c,
			    r->ceiling + strlen("ceiling_"));
		verdict = "";
		switch (d) {
		case MIN:
			fmt_num(tgt, sizeof(tgt), t);
			memmove(tgt + 3, tgt, strlen(tgt) + 1);
			memcpy(tgt, ">= ", 3);
			verdict = v >= t ? "ok" : "MISS";
			break;
		case MAX:
			fmt_num(tgt, sizeof(tgt), t);
			memmove(tgt + 3, tgt, strlen(tgt) + 1);
			memcpy(tgt, "<= ", 3);
			verdict = v <= t ? "ok" : "MISS";
			break;
		case ZERO:
			snprintf(tgt, sizeof(tgt), "0");
			verdict = v == 0 ? "ok" : "FAIL";
			break;
		case INFO:
		case CHECK:
			break;
		}
		if (strcmp(verdict, "MISS") == 0)
			(*miss)++;
		if (strcmp(verdict, "FAIL") == 0)
			(*fail)++;
		printf("%-34s %12s %14s %18s %8s %s\n", r->label, val, tgt,
		    ratio, r->bullmq != NULL ? r->bullmq : "", verdict);
	}
}

int
bench_report(int nfiles, char **files)
{
	struct lines *l;
	int i, miss = 0, fail = 0;

	if (nfiles < 1) {
		fprintf(stderr, "usage: retryd-bench report FILE...\n");
		return 2;
	}
	l = xcalloc(1, sizeof(*l));
	for (i = 0; i < nfiles; i++)
		if (load(l, files[i]) == -1)
			return 1;
	printf("retryd bench: %s, commit %s, %s cores, %s, load %s\n",
	    meta_str(l, "date"), meta_str(l, "commit"), meta_str(l, "cores"),
	    meta_str(l, "mode"), meta_str(l, "load"));
	print_rows(l, &miss, &fail);
	printf("%d target(s) missed, %d check(s) failed\n", miss, fail);
	for (i = 0; i < l->n; i++)
		json_object_put(l->o[i]);
	free(l);
	return fail > 0 ? 3 : 0;
}
