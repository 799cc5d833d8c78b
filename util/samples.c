/* SPDX-License-Identifier: MIT */
/*
 * samples.c - the sample ring and its quantiles (see samples.h).
 */
#include "util/samples.h"

#include <math.h>
#include <string.h>

#include "util/stats.h"

void kvp_samples_init(struct kvp_samples *r, double *v, uint32_t cap)
{
	r->v = v;
	r->cap = cap;
	r->n = 0;
}

void kvp_samples_add(struct kvp_samples *r, double x)
{
	r->v[r->n++ % r->cap] = x;
}

uint32_t kvp_samples_count(const struct kvp_samples *r)
{
	return r->n < r->cap ? (uint32_t)r->n : r->cap;
}

uint32_t kvp_samples_copy(const struct kvp_samples *r, double *out)
{
	uint32_t k = kvp_samples_count(r);

	memcpy(out, r->v, (size_t)k * sizeof(*out));
	return k;
}

void kvp_samples_catch_up(struct kvp_samples *dst, const struct kvp_samples *src)
{
	uint64_t i = dst->n;

	/* only the samples taken since the last catch-up (the ring keeps the newest) */
	if (src->n - i > src->cap)
		i = src->n - src->cap;
	for (; i < src->n; i++)
		dst->v[i % dst->cap] = src->v[i % src->cap];
	dst->n = src->n;
}

void kvp_quantiles_of(double *v, uint32_t n, struct kvp_quantiles *q)
{
	kvp_sort_doubles(v, n);
	q->p50 = kvp_percentile_sorted(v, n, 50);
	q->p99 = kvp_percentile_sorted(v, n, 99);
	q->max = n ? v[n - 1] : NAN;
}
