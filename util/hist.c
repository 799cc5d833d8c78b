/* SPDX-License-Identifier: MIT */
/*
 * hist.c - fixed-bucket latency histograms (see hist.h).
 * Thread: the caller's.
 */
#include "util/hist.h"

#include <math.h>

/* 5 ms .. 5 min: a cached TTFT on a small model is milliseconds, a cold 16k-token
 * prefill on the CPU minutes */
const double kvp_hist_bounds_s[KVP_HIST_BUCKETS] = {
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
};

void kvp_hist_observe_ms(struct kvp_hist *h, double ms)
{
	double s = isfinite(ms) && ms > 0 ? ms / 1000.0 : 0.0;
	unsigned int i;

	h->count++;
	h->sum_s += s;
	for (i = 0; i < KVP_HIST_BUCKETS; i++) {
		if (s <= kvp_hist_bounds_s[i]) {
			h->bucket[i]++;
			break;
		}
	}
	/* past the last bound: only in @count, the +Inf bucket */
}

uint64_t kvp_hist_cumulative(const struct kvp_hist *h, unsigned int i)
{
	uint64_t n = 0;

	for (unsigned int k = 0; k <= i && k < KVP_HIST_BUCKETS; k++)
		n += h->bucket[k];
	return n;
}
