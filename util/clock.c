/*
 * clock.c - wall and monotonic clocks with a manual override for tests.
 *
 * Key decision: the fake clock is a pair of atomics (on/off and the current
 * wall ms) rather than a function pointer, so any thread may read the time
 * without a lock and a test moves every thread's "now" at once.  Only the
 * wall clock is faked: the monotonic clock paces I/O and stays real.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "util/clock.h"

static int	clock_fake_on;
static int64_t	clock_fake_ms;

int64_t
clock_wall_ms(void)
{
	struct timespec ts;

	if (__atomic_load_n(&clock_fake_on, __ATOMIC_ACQUIRE))
		return __atomic_load_n(&clock_fake_ms, __ATOMIC_ACQUIRE);
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
clock_wall_ms_ceil(void)
{
	struct timespec ts;

	if (__atomic_load_n(&clock_fake_on, __ATOMIC_ACQUIRE))
		return __atomic_load_n(&clock_fake_ms, __ATOMIC_ACQUIRE);
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + (ts.tv_nsec + 999999) / 1000000;
}

int64_t
clock_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void
clock_set_fake(int64_t now_ms)
{
	__atomic_store_n(&clock_fake_ms, now_ms, __ATOMIC_RELEASE);
	__atomic_store_n(&clock_fake_on, 1, __ATOMIC_RELEASE);
}

void
clock_advance_ms(int64_t delta_ms)
{
	if (__atomic_load_n(&clock_fake_on, __ATOMIC_ACQUIRE))
		__atomic_add_fetch(&clock_fake_ms, delta_ms, __ATOMIC_ACQ_REL);
}

int
clock_is_fake(void)
{
	return __atomic_load_n(&clock_fake_on, __ATOMIC_ACQUIRE);
}

void
clock_cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cv, &ca);
	pthread_condattr_destroy(&ca);
}

int
clock_cond_wait_us(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t us)
{
	struct timespec ts;

	if (us <= 0)
		return ETIMEDOUT;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)(us / 1000000);
	ts.tv_nsec += (long)(us % 1000000) * 1000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	return pthread_cond_timedwait(cv, mu, &ts);
}
