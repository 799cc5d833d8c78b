/* SPDX-License-Identifier: MIT */
/*
 * samples.h - the newest samples of a series in a ring (latencies, any unit), and their
 * nearest-rank quantiles: kvpool's one sample ring, for the engine's TTFT, inter-token
 * and step times (and the snapshots of them it publishes), the disk tier's reload times
 * and the remote tier's fetch times.  The quantiles use util/stats.h.
 * Thread: a ring is its owner's; a reader copies it under the owner's lock
 * (kvp_samples_copy(), kvp_samples_catch_up()) and sorts the copy on its own time.
 */
#ifndef KVP_UTIL_SAMPLES_H
#define KVP_UTIL_SAMPLES_H

#include <stdint.h>

/**
 * struct kvp_samples - a ring of the last @cap samples
 * @v:   @cap slots (the owner's storage, set by kvp_samples_init())
 * @cap: slots, > 0
 * @n:   samples ever added; the next goes to v[n % cap], and v[0 .. min(n, cap)) hold
 *       the newest min(n, cap), in no particular order
 */
struct kvp_samples {
	double *v;
	uint32_t cap;
	uint64_t n;
};

/* Quantiles of a sample: nearest-rank p50 and p99, and the largest. */
struct kvp_quantiles {
	double p50;
	double p99;
	double max;
};

/* An empty ring over @v (@cap slots). */
void kvp_samples_init(struct kvp_samples *r, double *v, uint32_t cap);

/* Add @x, overwriting the oldest when full. */
void kvp_samples_add(struct kvp_samples *r, double x);

/* Samples held: min(n, cap). */
uint32_t kvp_samples_count(const struct kvp_samples *r);

/*
 * kvp_samples_copy() - the held samples into @out (room for @r->cap)
 * Return: how many (kvp_samples_count()).
 */
uint32_t kvp_samples_copy(const struct kvp_samples *r, double *out);

/*
 * kvp_samples_catch_up() - make @dst (same @cap) hold what @src holds, copying only the
 * samples @src took since @dst last caught up (a snapshot kept current at O(new)).
 */
void kvp_samples_catch_up(struct kvp_samples *dst, const struct kvp_samples *src);

/*
 * kvp_quantiles_of() - sort @v (@n values) in place and fill @q; each NaN when @n is 0
 * (there is no such value: callers decide what to show).
 */
void kvp_quantiles_of(double *v, uint32_t n, struct kvp_quantiles *q);

#endif /* KVP_UTIL_SAMPLES_H */
