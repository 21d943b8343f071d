/*
 * disp_int.h - what the dispatcher's files share and nobody else sees.
 *
 * Key decision: a transfer (struct disp_xfer) is allocated by disp_submit() on
 * the caller's thread and from then on touched by exactly one loop thread, so
 * it needs no lock; only the loop's submission queue and the in-flight counts
 * are shared, each under its own mutex, and no thread ever holds two of these
 * mutexes at once.
 */
#ifndef RETRYD_DISPATCHER_DISP_INT_H
#define RETRYD_DISPATCHER_DISP_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "dispatcher/dispatcher.h"
#include "util/buf.h"
#include "util/crypto.h"

/* In-flight counts per tenant and topic (inflight.c). */
struct disp_count;
struct disp_counts {
	pthread_mutex_t	  lock;
	struct disp_count **b;		/* buckets */
	size_t		  nb;		/* a power of two */
	size_t		  nitems;
	int		  total;
	int64_t		  warn_every_us;	/* DISP_CAP_WARN_US */
};

/* A tenant reaching its cap is reported at most this often. */
#define DISP_CAP_WARN_US	(60 * INT64_C(1000000))

void	disp_counts_init(struct disp_counts *c);
void	disp_counts_destroy(struct disp_counts *c);
/*
 * +1 for the topic and its tenant: 0, or 1 when this request filled the
 * tenant's cap (its own when set, disp_cap_in_force(), else max_tenant)
 * and the tenant was not reported as reaching it in the last warn_every_us
 * (nor ever, since its count was last 0): the caller reports it.  -1 with
 * errno EAGAIN when max_total > 0 or the tenant's cap > 0 is reached
 * (nothing counted then).
 */
int	disp_counts_add(struct disp_counts *c, const char *tenant,
	    const char *topic, int max_total, int max_tenant);
void	disp_counts_del(struct disp_counts *c, const char *tenant,
	    const char *topic);
/* The tenant's own cap (<= 0: none, max_tenant applies). */
void	disp_counts_set_cap(struct disp_counts *c, const char *tenant,
	    int cap);
/* The tenant's cap in force (disp_cap_in_force()); 0: none. */
int	disp_counts_cap(struct disp_counts *c, const char *tenant,
	    int max_tenant, int max_total);
/* The topic's count; topic "" gives the tenant's (all its topics). */
int	disp_counts_get(struct disp_counts *c, const char *tenant,
	    const char *topic);
/*
 * What the topic may still start under its cap, its tenant's (its own when
 * set) and the total,
 * the least of the three, read under one lock; a cap <= 0 is none.
 */
int	disp_counts_room(struct disp_counts *c, const char *tenant,
	    const char *topic, int max_topic, int max_tenant, int max_total);
/* cap - n, at least 0; INT_MAX when cap <= 0 (no cap). */
int	disp_room(int cap, int n);
int	disp_counts_total(struct disp_counts *c);
void	disp_counts_foreach(struct disp_counts *c,
	    void (*fn)(const char *tenant, const char *topic, int n, void *arg),
	    void *arg);
/* The same for the tenants' own counts (all of a tenant's topics). */
void	disp_counts_foreach_tenant(struct disp_counts *c,
	    void (*fn)(const char *tenant, int n, void *arg), void *arg);
/* Every tenant with a cap of its own, with that cap in force. */
void	disp_counts_foreach_cap(struct disp_counts *c, int max_total,
	    void (*fn)(const char *tenant, int cap, void *arg), void *arg);

/*
 * The signing keys a loop has used (sign.c): per secret, the SHA-256 states
 * after its two HMAC pad blocks.  Loop thread only.
 */
#define DISP_SIGN_SLOTS	64
struct disp_sign_key {
	uint8_t		 key[DISP_SECRET_MAX];
	size_t		 keylen;	/* 0: an empty slot */
	struct sha256_ctx inner;	/* after K ^ ipad */
	struct sha256_ctx outer;	/* after K ^ opad */
};
struct disp_sign_cache {
	struct disp_sign_key slot[DISP_SIGN_SLOTS];
	uint64_t	 loads;		/* pads hashed (a key not held) */
};

/*
 * "v1," and the base64 of HMAC-SHA256(key, "{id}.{ts}.{body}") into out,
 * NUL-terminated: the bytes hmac_sha256() gives.  0, or -1 (out empty) when
 * keylen is 0 or over DISP_SECRET_MAX or out is too small.
 */
int	disp_sign(struct disp_sign_cache *c, const uint8_t *key,
	    size_t keylen, const char *id, long long ts, const void *body,
	    size_t body_len, char *out, size_t outlen);
void	disp_sign_cache_wipe(struct disp_sign_cache *c);

/* One request on its way (transfer.c). */
struct disp_xfer {
	struct disp_xfer *next;		/* queue, then running list */
	struct disp_xfer *prev;
	struct disp_request *req;
	CURL		*easy;
	struct curl_slist *hdrs;	/* one block (transfer.c) */
	struct buf	 excerpt;	/* capped at capture_max */
	size_t		 body_bytes;	/* response body bytes seen */
	size_t		 header_bytes;
	int		 body_too_large;
	int		 headers_too_large;
	int		 allow_private;
	int		 sends;		/* times libcurl was about to send */
	char		 retry_after[128];	/* last final-block value */
	char		 blocked[128];	/* why a socket was refused */
	char		 errbuf[CURL_ERROR_SIZE];
	int64_t		 started_ms;
};

/* 0, or -1 and a reason in why when the request cannot be sent as it is. */
int	disp_xfer_setup(struct disp_xfer *x, const char *user_agent,
	    CURLSH *share, struct disp_sign_cache *keys, char *why,
	    size_t whylen);
void	disp_xfer_result(struct disp_xfer *x, CURLcode rc,
	    struct disp_result *res);
/* Frees the transfer and its request (not the excerpt given away). */
void	disp_xfer_free(struct disp_xfer *x);

/* One event loop (loop.c). */
/*
 * libcurl's timer as the loop keeps it (loop thread only).  A 0 timeout
 * ("run now") is a flag the loop serves before it sleeps again, not a
 * syscall; the timerfd is re-armed only when the deadline moves earlier, and
 * after it fires the loop asks curl_multi_timeout() for the next one (libcurl
 * calls the timer function only when its own deadline changes).
 */
struct disp_timer {
	int		 armed;		/* the timerfd is set */
	int64_t		 armed_ms;	/* monotonic ms it fires at */
	int		 now;		/* run libcurl's timeout, then sleep */
};

enum disp_timer_act {
	DISP_TIMER_KEEP,		/* no syscall */
	DISP_TIMER_ARM,			/* arm the timerfd, *arm_ms from now */
	DISP_TIMER_DISARM
};

/*
 * What libcurl's timeout_ms (-1 none, 0 now, else ms) asks of the timerfd
 * at monotonic now_ms; updates t.  Pure, for the unit test.
 */
enum disp_timer_act disp_timer_plan(struct disp_timer *t, int64_t now_ms,
	    long timeout_ms, int64_t *arm_ms);

struct disp_loop {
	struct dispatcher *d;
	int		 idx;
	pthread_t	 thread;
	int		 started;
	int		 epfd;
	int		 wakefd;	/* eventfd: queue, drain, stop */
	int		 timerfd;	/* libcurl's timer */
	int		 drainfd;	/* the drain deadline */
	CURLM		*multi;
	CURLSH		*share;		/* TLS sessions */

	pthread_mutex_t	 lock;		/* guards the members below */
	struct disp_xfer *qhead;
	struct disp_xfer *qtail;
	int		 stop;
	int		 drain;
	int64_t		 drain_grace_ms;

	/* Loop thread only. */
	struct disp_timer timer;
	struct disp_sign_cache sign;
	struct disp_xfer *running;
	int		 nrunning;
	int		 drain_armed;
	int		 aborting;	/* past the drain deadline */
};

int	disp_loop_init(struct disp_loop *l, struct dispatcher *d, int idx);
void	disp_loop_destroy(struct disp_loop *l);
void	*disp_loop_main(void *arg);
void	disp_loop_enqueue(struct disp_loop *l, struct disp_xfer *x);
void	disp_loop_drain(struct disp_loop *l, int64_t grace_ms);
void	disp_loop_stop(struct disp_loop *l);

struct dispatcher {
	struct disp_config cfg;		/* user_agent points at ua */
	char		*ua;
	void		(*done)(struct disp_result *, void *);
	void		*arg;
	struct disp_loop *loops;
	int		 nloops;
	unsigned	 next_loop;	/* atomic: round-robin over loops */
	struct disp_counts counts;

	pthread_mutex_t	 lock;		/* guards the members below */
	pthread_cond_t	 idle;		/* outstanding reached 0 */
	int		 outstanding;	/* accepted, done() not returned */
	int		 draining;
};

/* A transfer is over: count it out, call done(), free it (disp.c). */
void	disp_report(struct dispatcher *d, struct disp_xfer *x,
	    struct disp_result *res);
/* Fills res as SCHEDULE_ERROR with why, for a request that libcurl never
 * finished: refused before sending, or handed back (unattempted or cut short
 * by a drain). */
void	disp_result_local(struct disp_xfer *x, struct disp_result *res,
	    int handed_back, const char *why);

#endif
