/*
 * obs.h - what api/metrics.c (the Prometheus counters) and api/stats.c
 * (the per-topic, per-minute series in Redis behind the dashboard's chart)
 * share.  Nothing outside api/ includes it: the daemon reports events
 * through the api_obs_*() entry points of api/api.h.
 *
 * Key decision: one event feeds both: metrics.c receives it from wire.c,
 * updates its counters and passes the per-topic part to stats.c, which
 * only adds it to an in-memory table; stats.c's own thread writes that
 * table to Redis once a second, so no callback or scheduler thread ever
 * waits on Redis for the sake of a chart.
 */
#ifndef RETRYD_API_OBS_H
#define RETRYD_API_OBS_H

#include <stdint.h>

struct sched;

struct api_ctx;

/* The lateness buckets of the per-minute series, milliseconds (+Inf last). */
#define OBS_LATE_BUCKETS	15
extern const int64_t obs_late_bounds_ms[OBS_LATE_BUCKETS - 1];

/* stats.c: start and stop the flusher (it writes what is left on stop). */
int	obs_stats_start(const struct api_ctx *ctx);
void	obs_stats_stop(void);
/* stats.c: an attempt of tenant/topic finished (delivered or failed). */
void	obs_stats_attempt(const char *tenant, const char *topic,
	    int delivered, int64_t now_ms);
/* stats.c: a job of tenant/topic started an attempt late_ms after due. */
void	obs_stats_lateness(const char *tenant, const char *topic,
	    int64_t late_ms, int64_t now_ms);
/* stats.c: entries lost (table full, Redis down at flush). */
uint64_t obs_stats_dropped(void);
/*
 * A deleted topic's series (topic NULL: every topic of a deleted tenant)
 * leave Redis and the table, so one made again with the name starts with
 * none.
 */
void	obs_stats_forget(struct sched *s, const char *tenant,
	    const char *topic);

#endif
