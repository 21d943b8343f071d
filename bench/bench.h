/*
 * bench.h - what the parts of retryd-bench share: the run's settings, the
 * helpers that speak to retryd, the receiver and Redis, and the JSON lines.
 *
 * Key decision: every figure leaves the tool as one JSON object per line
 * (bench_emit), and the table is made later from those lines alone
 * (bench_report), so a run can be re-tabulated, compared with an older run,
 * or merged with the ceilings that bench/run measures with other tools.
 */
#ifndef RETRYD_BENCH_BENCH_H
#define RETRYD_BENCH_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include <json-c/json.h>

#include "bench/hclient.h"
#include "bench/stats.h"

/* Receiver tags (the /cb/TAG of each topic's callback URL). */
#define TAG_W1		1
#define TAG_W2		2
#define TAG_W3		3
#define TAG_W4		4
#define TAG_TIMER	8
#define TAG_BACKLOG	9

struct bench {
	struct hc_target	 api;
	struct hc_target	 rcv;
	const char		*rcv_url;
	const char		*admin_key;
	const char		*redis_url;	/* NULL: no memory figures */
	const char		*tenant;
	char			*api_key;	/* the tenant's, owned */
	char			*auth;		/* "Authorization: ...\r\n" */
	FILE			*json;		/* JSON lines, or NULL */
	const char		*label;		/* prefix of workload names */

	int64_t			 w1_jobs;
	int			 w1_conc;	/* single POSTs in flight */
	int64_t			 w1_ahead_ms;
	int			 batch;		/* jobs per batch push */
	int			 batch_conc;	/* batches in flight */
	int64_t			 w2_jobs;
	int64_t			 w2_spread_ms;
	int64_t			 w3_jobs;
	int64_t			 w4_jobs;
	int64_t			 w4_spread_ms;
	int64_t			 w5_jobs;
	int			 w5_conc;
	int			 w5_batch;	/* jobs per batched reserve; */
						/* 0: no batched phase */
	int64_t			 w6_pending;
	int64_t			 lead_ms;	/* push start to first due */
	int64_t			 wait_ms;	/* bound on any wait */
	int			 body_bytes;	/* size of each job's body */

	int			 failures;	/* correctness checks failed */
	long			 pids[2];	/* retryd, Redis: 0 unknown */
};

/* One arrival at the receiver. */
struct arrival {
	int64_t	wall_us;
	int64_t	due_ms;
	int64_t	seq;
	int	attempt;
	int	status;
};

struct arrivals {
	struct arrival	*v;
	size_t		 n;
	size_t		 cap;
};

/* bench.c: speaking to retryd, the receiver and Redis. */
int	bench_setup_tenant(struct bench *b);
/* PUT /v1/topics/NAME with the JSON object given; 0 or -1. */
int	bench_topic(struct bench *b, const char *name, const char *json);
/* A topic whose callbacks go to the receiver under tag. */
int	bench_push_topic(struct bench *b, const char *name, int tag,
	    const char *query, const char *schedule);
int	bench_rcv_reset(struct bench *b);
/* Records under tag so far, or -1. */
int64_t	bench_rcv_count(struct bench *b, int tag);
/* Every record under tag, appended to out; 0 or -1. */
int	bench_rcv_fetch(struct bench *b, int tag, struct arrivals *out);
void	arrivals_free(struct arrivals *a);
/*
 * Redis's memory: used_memory, the part of it that is the clients'
 * buffers (mem_clients_normal: connections, not data), and DBSIZE.
 */
struct redis_mem {
	int64_t	used;
	int64_t	clients;
	int64_t	keys;
};

/* Fills m (fields it could not read are -1); 0 or -1. */
int	bench_redis_mem(struct bench *b, struct redis_mem *m);
/*
 * Microseconds Redis spent in commands, and the calls, since the last reset
 * (INFO commandstats); top (may be NULL) names the costliest commands.
 * reset: start counting again afterwards.  0 or -1.
 */
int	bench_redis_cmdtime(struct bench *b, int reset, int64_t *usec,
	    int64_t *calls, char *top, size_t toplen);
/* Sleep, bounded; the bench never sleeps in retryd's place. */
void	bench_sleep_ms(int64_t ms);

/* CPU used so far by b->pids[0] and [1], in ticks (-1: unknown). */
#define BENCH_THREAD_NAMES	16

struct bench_cpu {
	int64_t	ticks[2];
	/* retryd's CPU by thread name (the threads' comm), in ticks */
	size_t	nthr;
	char	thr_name[BENCH_THREAD_NAMES][16];
	int64_t	thr_ticks[BENCH_THREAD_NAMES];
};
void	bench_cpu_read(const struct bench *b, struct bench_cpu *c);
void	jset_cpu_per(struct json_object *o, const struct bench_cpu *c0,
	    const struct bench_cpu *c1, const char *per, int64_t n);

/* Push jobs: n jobs numbered from 0, in batches (batch > 1) or singly. */
struct push_spec {
	const char	*topic;
	int64_t		 n;
	int		 batch;		/* 1: single POSTs */
	int		 conc;		/* requests in flight */
	int64_t		 delay_ms;	/* >= 0: every job delay_ms ahead */
	int64_t		 base_ms;	/* else job i is due base_ms + */
	int64_t		 spread_ms;	/*   i * spread_ms / n (wall ms) */
	int		 client_ids;	/* single POST /push, each job with
					   an id of its own ("b-PID-I");
					   with delay_ms only */
};

/*
 * A job is accepted (2xx), refused (429 or 503: the daemon said "not now",
 * under load; reported, not a failure of a check), or failed (any other
 * answer, a transport error, or not pushed before the deadline).
 */
struct push_result {
	int64_t		 ok;
	int64_t		 refused;
	int64_t		 failed;
	int64_t		 elapsed_us;
	uint8_t		*accepted;	/* [n]: 1 when job i was accepted */
	struct samples	 lat_us;	/* per request */
	char		 first_error[256];
};

/* res is overwritten; free it with push_result_free(). */
int	bench_push(struct bench *b, const struct push_spec *spec,
	    struct push_result *res);
void	push_result_free(struct push_result *res);
/* The due time of job i of spec, wall ms. */
int64_t	push_due_ms(const struct push_spec *spec, int64_t i);

/* One JSON line: the workload name (label-prefixed) and the figures. */
void	bench_emit(struct bench *b, const char *workload,
	    struct json_object *o);
/* Set a figure on o. */
void	jset_int(struct json_object *o, const char *k, int64_t v);
void	jset_dbl(struct json_object *o, const char *k, double v);
void	jset_str(struct json_object *o, const char *k, const char *v);
void	jset_bool(struct json_object *o, const char *k, int v);
/* p50, p90, p99, max and min of s (microseconds) as ms figures prefix_*. */
void	jset_pcts_ms(struct json_object *o, const char *prefix,
	    struct samples *s);

/* workloads.c */
int	bench_w1(struct bench *b);
int	bench_w2(struct bench *b);
int	bench_w3(struct bench *b);
int	bench_w4(struct bench *b);
int	bench_w5(struct bench *b);
int	bench_w6(struct bench *b);
int	bench_timer(struct bench *b);

/* report.c: print the table from JSON-lines files. */
int	bench_report(int nfiles, char **files);

#endif
