/* SPDX-License-Identifier: MIT */
/*
 * stats.h - order statistics of a sample: sorting and nearest-rank percentiles, as the
 * engine's TTFT quantiles, the bench command and the benchmarks report them.
 * Thread: any (pure functions on the caller's array).
 */
#ifndef KVP_UTIL_STATS_H
#define KVP_UTIL_STATS_H

#include <stddef.h>

/* Sort @n doubles ascending, in place. */
void kvp_sort_doubles(double *v, size_t n);

/*
 * kvp_percentile_sorted() - nearest-rank percentile @p (0..100) of ascending @v: the
 * smallest value with at least p% of the sample at or below it.  NaN when @n is 0
 * (there is no such value; callers decide what to print).
 */
double kvp_percentile_sorted(const double *v, size_t n, double p);

#endif /* KVP_UTIL_STATS_H */
