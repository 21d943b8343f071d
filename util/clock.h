/*
 * clock.h - the one clock of the process, with a replaceable "now".
 *
 * Two clocks, named by their unit: clock_wall_ms() is Unix time in
 * milliseconds (for anything stored or sent), clock_mono_us() is a monotonic
 * microsecond count (for deadlines inside the process).  Tests switch the wall
 * clock to a manual one with clock_set_fake() and move it with
 * clock_advance_ms() instead of sleeping (memcached's debugtime).  The fake
 * clock moves only the wall clock, i.e. "now" for due times, schedules and
 * timestamps; clock_mono_us() stays real, because it paces I/O (timeouts,
 * reconnect backoff, lease renewal, batch intervals) that must go on while a
 * test holds the wall clock still.  All functions are thread-safe.
 */
#ifndef RETRYD_UTIL_CLOCK_H
#define RETRYD_UTIL_CLOCK_H

#include <pthread.h>
#include <stdint.h>

int64_t	clock_wall_ms(void);
int64_t	clock_mono_us(void);
/* clock_wall_ms() rounded up rather than down: never before the instant. */
int64_t	clock_wall_ms_ceil(void);

/* Turn the manual clock on at wall time now_ms (>= 0). */
void	clock_set_fake(int64_t now_ms);
/* Move the manual clock forward by delta_ms (no-op when it is off). */
void	clock_advance_ms(int64_t delta_ms);
int	clock_is_fake(void);

/*
 * Timed waits count real time on CLOCK_MONOTONIC, never the fake clock:
 * clock_cond_init() makes cv so; clock_cond_wait_us() waits on it (mu
 * held) at most us microseconds and returns pthread_cond_timedwait()'s
 * result (ETIMEDOUT at once when us <= 0).
 */
void	clock_cond_init(pthread_cond_t *cv);
int	clock_cond_wait_us(pthread_cond_t *cv, pthread_mutex_t *mu,
	    int64_t us);

#endif
