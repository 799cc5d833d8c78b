/* SPDX-License-Identifier: MIT */
/*
 * cost.h - is fetching blocks from the store cheaper than recomputing them, and how many
 * can arrive before a deadline?
 *
 *	fetch(k)     = rtt + k * value_bytes / bandwidth
 *	recompute(k) = k * block_tokens / prefill_tokens_per_s
 *
 * Round-trip time and bandwidth are measured on the tier's own operations (the
 * existence checks give round trips, the value transfers give bandwidth) and smoothed
 * (EWMA, weight 1/4 on the new sample); before the first measurement the configured hint
 * is used.  The prefill speed is the engine's, measured by its caller.  Recompute cost
 * grows with the position in the prompt (attention), so using the per-token average is
 * the cautious side: it undercounts what a fetch saves.
 * Pure; the owner locks.
 */
#ifndef KVP_SHM_REMOTE_COST_H
#define KVP_SHM_REMOTE_COST_H

#include <stddef.h>
#include <stdint.h>

/**
 * struct kvp_remote_est - measured round trip and bandwidth
 * @rtt_ns:     smoothed round-trip time
 * @bw_bps:     smoothed transfer rate, bytes per second
 * @rtt_n, @bw_n: samples taken
 */
struct kvp_remote_est {
	double rtt_ns;
	double bw_bps;
	uint64_t rtt_n;
	uint64_t bw_n;
};

void kvp_remote_est_init(struct kvp_remote_est *e, double bw_bps_hint, double rtt_ns_hint);

/* A round trip of @ns. */
void kvp_remote_est_rtt(struct kvp_remote_est *e, uint64_t ns);

/* @bytes of values received in @ns (first request sent to last reply, less one round
 * trip).  Ignored when either is 0. */
void kvp_remote_est_bw(struct kvp_remote_est *e, uint64_t bytes, uint64_t ns);

/* Estimated time to fetch @k values of @value_bytes, one pipelined round. */
double kvp_remote_est_fetch_ns(const struct kvp_remote_est *e, uint32_t k, size_t value_bytes);

/**
 * kvp_remote_plan() - how many of the @n_found blocks (in prompt order) to fetch
 * @prefill_tps:  the engine's prefill speed, tokens/s; 0 = do not compare (always fetch)
 * @time_left_ns: until the fetch's deadline
 * Return: k in [0, @n_found]: the blocks expected to arrive within 3/4 of @time_left_ns,
 * or 0 when fetching those is not faster than recomputing them.
 */
uint32_t kvp_remote_plan(const struct kvp_remote_est *e, uint32_t n_found, size_t value_bytes,
			 uint32_t block_tokens, double prefill_tps, uint64_t time_left_ns);

#endif /* KVP_SHM_REMOTE_COST_H */
