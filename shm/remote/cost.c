/* SPDX-License-Identifier: MIT */
/*
 * cost.c - fetch-versus-recompute estimates (see cost.h).
 */
#include "shm/remote/cost.h"

#include <math.h>

#define EWMA_NEW 0.25 /* weight of a new sample */

void kvp_remote_est_init(struct kvp_remote_est *e, double bw_bps_hint, double rtt_ns_hint)
{
	e->rtt_ns = rtt_ns_hint > 0 ? rtt_ns_hint : 200e3;
	e->bw_bps = bw_bps_hint > 0 ? bw_bps_hint : 1e9;
	e->rtt_n = 0;
	e->bw_n = 0;
}

void kvp_remote_est_rtt(struct kvp_remote_est *e, uint64_t ns)
{
	/* the first sample replaces the hint outright */
	e->rtt_ns = e->rtt_n++ ? e->rtt_ns + EWMA_NEW * ((double)ns - e->rtt_ns) : (double)ns;
}

void kvp_remote_est_bw(struct kvp_remote_est *e, uint64_t bytes, uint64_t ns)
{
	double s;

	if (!bytes || !ns)
		return;
	s = (double)bytes * 1e9 / (double)ns;
	e->bw_bps = e->bw_n++ ? e->bw_bps + EWMA_NEW * (s - e->bw_bps) : s;
}

double kvp_remote_est_fetch_ns(const struct kvp_remote_est *e, uint32_t k, size_t value_bytes)
{
	return e->rtt_ns + (double)k * (double)value_bytes * 1e9 / e->bw_bps;
}

uint32_t kvp_remote_plan(const struct kvp_remote_est *e, uint32_t n_found, size_t value_bytes,
			 uint32_t block_tokens, double prefill_tps, uint64_t time_left_ns)
{
	double budget = 0.75 * (double)time_left_ns - e->rtt_ns;
	double fit, recompute;
	uint32_t k = n_found;

	if (!n_found || budget <= 0 || !value_bytes)
		return 0;
	fit = floor(budget * e->bw_bps / ((double)value_bytes * 1e9));
	if (fit < (double)k)
		k = fit < 1 ? 0 : (uint32_t)fit;
	if (!k)
		return 0;
	if (prefill_tps > 0) {
		recompute = (double)k * block_tokens * 1e9 / prefill_tps;
		if (kvp_remote_est_fetch_ns(e, k, value_bytes) >= recompute)
			return 0;
	}
	return k;
}
