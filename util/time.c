/* SPDX-License-Identifier: MIT */
/*
 * time.c - the monotonic clock (see time.h).
 */
#include "util/time.h"

#include <time.h>

uint64_t kvp_now_ns(void)
{
	struct timespec ts;

	/* cannot fail for CLOCK_MONOTONIC with a valid pointer */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
