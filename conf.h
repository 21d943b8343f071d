/*
 * conf.h - retryd's configuration: one typed struct filled from a table of
 * keys (conf.c), from a libconfig file and the environment.
 *
 * Reloadable members may change on SIGHUP while other threads read them:
 * read those through CONF_GET() (an atomic load).  Strings are never
 * reloadable, so their pointers stay valid for the life of the process.
 */
#ifndef RETRYD_CONF_H
#define RETRYD_CONF_H

#include <stddef.h>
#include <stdint.h>

enum conf_journal_mode {
	CONF_JOURNAL_OFF = 0,
	CONF_JOURNAL_ASYNC,
	CONF_JOURNAL_SYNC,
};

struct conf {
	/* top level */
	char	*listen;		/* host:port */
	char	*data_dir;
	char	*admin_key;		/* "" = no admin key */
	char	*instance;		/* "" = host:pid */
	/* log */
	int64_t	 log_level;		/* enum log_level; reloadable */
	int64_t	 log_access;		/* bool; reloadable */
	/* redis */
	char	*redis_url;
	int64_t	 redis_timeout_ms;
	/* journal */
	char	*journal_url;		/* "" = sqlite under data_dir */
	int64_t	 journal_mode;		/* enum conf_journal_mode */
	int64_t	 journal_flush_ms;
	int64_t	 journal_timeout_ms;
	int64_t	 journal_retention_ms;	/* reloadable */
	int64_t	 journal_purge_ms;	/* retention purge interval */
	/* scheduler */
	int64_t	 sched_shards;
	int64_t	 sched_batch;		/* reloadable */
	int64_t	 sched_sweep_ms;	/* reloadable */
	int64_t	 sched_lease_ms;
	int64_t	 sched_retention_ms;	/* reloadable */
	/* dispatcher */
	int64_t	 disp_threads;
	int64_t	 disp_allow_private;	/* bool */
	int64_t	 disp_timeout_ms;	/* default topic timeout; reloadable */
	int64_t	 disp_max_timeout_ms;	/* reloadable */
	int64_t	 disp_max_in_flight;	/* default per topic; reloadable */
	int64_t	 disp_max_total;	/* all topics, this instance */
	int64_t	 disp_max_tenant;	/* one tenant's topics; 0: 9/10 of
					   disp_max_total (wire.c) */
	int64_t	 disp_retry_after_cap_ms; /* reloadable */
	int64_t	 disp_capture_bytes;
	/* http */
	int64_t	 http_threads;
	int64_t	 http_max_connections;
	int64_t	 http_timeout_ms;
	/* web (the dashboard) and metrics */
	char	*web_dir;		/* "" = installed or source tree */
	int64_t	 metrics_require_key;	/* bool; reloadable */
	int64_t	 metrics_counts_ms;	/* job counts cache; reloadable */
	/* limits (all reloadable) */
	int64_t	 limit_request_body;
	int64_t	 limit_job_body;
	int64_t	 limit_horizon_ms;
	int64_t	 limit_max_pending;
	int64_t	 limit_rate;		/* requests/s per key; 0 = off */
	int64_t	 limit_max_wait_ms;	/* longest reserve long-poll */
	int64_t	 limit_max_waiting;	/* reserves per tenant; 0: half of
					   http_max_connections */
	int64_t	 limit_batch;		/* jobs per batch push */
	/* shutdown */
	int64_t	 shutdown_grace_ms;	/* reloadable */
	/* debug */
	int64_t	 debug_fake_clock;	/* bool: tests move the clock */
};

/* The configuration in force (main thread writes; others read). */
extern struct conf conf;

#define CONF_GET(member)	__atomic_load_n(&conf.member, __ATOMIC_RELAXED)

/*
 * Fill *c with the defaults, then the file (path may be NULL), then the
 * environment.  0, or -1 with "FILE:LINE: reason" (or "RETRYD_X: reason")
 * in err.  On error *c holds nothing that needs freeing.
 */
int	conf_load(struct conf *c, const char *path, char *err, size_t errlen);
void	conf_free(struct conf *c);
/*
 * SIGHUP: load path again; apply the reloadable keys to the live conf and
 * log each change; log the others that changed as needing a restart.
 * 0, or -1 with err (the live conf is untouched).
 */
int	conf_reload(const char *path, char *err, size_t errlen);
/* Prints every key name, one per line (for the documentation checks). */
void	conf_print_keys(void);
/* Parses "10s", "250ms", "2m", "1h", "1d" or bare ms; 0 or -1. */
int	conf_parse_duration(const char *s, int64_t *ms);

#endif
