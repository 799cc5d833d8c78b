/* SPDX-License-Identifier: MIT */
/*
 * time.h - the monotonic clock every part of kvpool measures with.
 *
 * CLOCK_MONOTONIC: never jumps with the wall clock, counts while the process sleeps,
 * and is what timerfd and pthread_cond_timedwait() (with a condattr) can be given too.
 * Thread: any.
 */
#ifndef KVP_UTIL_TIME_H
#define KVP_UTIL_TIME_H

#include <stdint.h>

/* Nanoseconds of CLOCK_MONOTONIC. */
uint64_t kvp_now_ns(void);

/* A duration in milliseconds / seconds, for reports. */
static inline double kvp_ns_to_ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

static inline double kvp_ns_to_s(uint64_t ns)
{
	return (double)ns / 1e9;
}

#endif /* KVP_UTIL_TIME_H */
