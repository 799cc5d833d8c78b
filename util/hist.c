/* SPDX-License-Identifier: MIT */
/*
 * hist.c - fixed-bucket latency histograms (see hist.h).
 * Thread: the caller's.
 */
#include "util/hist.h"

#include <math.h>

/* 1 ms .. 5 min: a decode step or a cached TTFT on a small model is milliseconds, a
 * cold 16k-token prefill on the CPU minutes */
const double kvp_hist_bounds_s[KVP_HIST_BUCKETS] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
};

unsigned int kvp_hist_bucket(double s)
{
	unsigned int i = 0;

	if (!(s > 0)) /* negative or NaN */
		s = 0;
	while (i < KVP_HIST_BUCKETS && s > kvp_hist_bounds_s[i])
		i++;
	return i;
}

void kvp_hist_observe_ms(struct kvp_hist *h, double ms)
{
	double s = isfinite(ms) && ms > 0 ? ms / 1000.0 : 0.0;
	unsigned int i = kvp_hist_bucket(s);

	h->count++;
	h->sum_s += s;
	if (i < KVP_HIST_BUCKETS) /* past the last bound: only in @count, the +Inf bucket */
		h->bucket[i]++;
}

uint64_t kvp_hist_cumulative(const struct kvp_hist *h, unsigned int i)
{
	uint64_t n = 0;

	for (unsigned int k = 0; k <= i && k < KVP_HIST_BUCKETS; k++)
		n += h->bucket[k];
	return n;
}
