/* SPDX-License-Identifier: MIT */
/*
 * hist.h - fixed-bucket latency histograms, in the shape Prometheus exposes them: a
 * count, a sum and one counter per upper bound (seconds).  One set of bounds for every
 * histogram kvpool exports (the daemon's request times and inter-token gaps, the HTTP
 * front's durations and TTFT), so dashboards can compare them bucket for bucket.
 * Thread: a histogram belongs to the thread that observes it (the loop thread); readers
 * take a copy on that thread.
 */
#ifndef KVP_UTIL_HIST_H
#define KVP_UTIL_HIST_H

#include <stdint.h>

#define KVP_HIST_BUCKETS 17 /* finite upper bounds; +Inf is @count */

/**
 * struct kvp_hist - one histogram
 * @count:  observations
 * @sum_s:  their sum, seconds
 * @bucket: observations <= kvp_hist_bounds_s[i] and > the bound before (not cumulative)
 */
struct kvp_hist {
	uint64_t count;
	double sum_s;
	uint64_t bucket[KVP_HIST_BUCKETS];
};

/* The finite upper bounds, seconds, increasing. */
extern const double kvp_hist_bounds_s[KVP_HIST_BUCKETS];

/*
 * The bucket of an observation of @s seconds: the first i with @s <= bound i (a
 * Prometheus `le` is inclusive), KVP_HIST_BUCKETS past the last bound (+Inf); negative
 * or NaN counts as 0.
 */
unsigned int kvp_hist_bucket(double s);

/* Count one observation of @ms milliseconds (negative or NaN counts as 0). */
void kvp_hist_observe_ms(struct kvp_hist *h, double ms);

/* Observations <= kvp_hist_bounds_s[@i] (cumulative, as a Prometheus `le` bucket). */
uint64_t kvp_hist_cumulative(const struct kvp_hist *h, unsigned int i);

#endif /* KVP_UTIL_HIST_H */
