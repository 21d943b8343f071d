/*
 * fuzz.h - what every fuzz target shares: libFuzzer's entry point, which
 * each target defines and replay.c (make check) or libFuzzer calls, and
 * the check that ends a run when an invariant breaks.
 */
#ifndef RETRYD_TESTS_FUZZ_H
#define RETRYD_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int	LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Abort, which both libFuzzer and make check report, unless ok. */
static inline void
fuzz_check(int ok)
{
	if (!ok)
		abort();
}

#endif
