/* SPDX-License-Identifier: MIT */
/*
 * stepcost.h - how long the engine's forward calls take: a small cost model, calibrated
 * once per model when the engine starts and adapted after every step, that the scheduler
 * (svc/engine/engine.c) uses to size each step's prefill to a time budget.
 *
 * Prefill of n tokens after ctx cached positions:
 *
 *	t(n, ctx) = k_w * (p0 + n * p1) + k_a * n * p2 * (ctx + n / 2)
 *
 * p0 is what a call costs whatever its size (reading every weight once: on a CPU about
 * one decode step), p1 the matrix work per token, p2 the attention work per token and per
 * position it attends to.  k_w and k_a start at 1 and follow what the recent steps took
 * (svc/engine/stepcost.c): on a machine whose load changes the shape of the model stays and its
 * scales move; attention, fitted at short contexts, gets a scale of its own.
 *
 * A mixed step (compute/forward.h kvp_fwd_step(): a decode batch and prefill chunks in
 * one call) is the same model over all its rows: R rows whose attention reads A
 * positions in all (a prefill chunk n(ctx + n/2), a decode row at pos, pos + 1) cost
 *
 *	t(R, A) = k_w * (p0 + R * p1) + k_a * A * p2
 *
 * so the fixed cost is paid once per step, and a decode row costs what a prefill token
 * does.  Mixed steps adapt the scales like prefill calls.
 *
 * Except in steps of few rows (R <= KVP_STEPCOST_ROWS), which run other kernels than
 * the chunks the line was fitted on: up to a GEMV group (4 rows on AVX2, 8 on AVX-512)
 * an f32 projection reads each weight once for all its rows, one row more goes to the
 * packed tile, whose fixed part is twice that (measured on the demo model at 3,500
 * positions: a stream's row and 3 prompt tokens 23 ms, and 4 tokens 40 ms, against 32
 * predicted for both).  Such a step is priced by its row count: the line times the
 * median of the last KVP_STEPCOST_RING ratios measured at that count (until one is, its
 * nearest neighbour's that has some; 1 when none has), which each such step adds to.
 * The scales still close part of the line's error in every step (ratios that took the
 * machine's load in would keep it from the scales, and the counts not tried would be
 * priced at the load of before and never tried: seen with another process taking 80%
 * of the CPU, every step one prompt token).  A count not seen in KVP_STEPCOST_STALE such
 * steps is priced as one never seen (one step stalled by another process must not
 * price its count out for good: tried again, it measures again).
 * kvp_stepcost_fit_step() picks the largest chunk that fits, whether or not a smaller
 * one costs more.
 *
 * A decode step of a batch of b sequences alone: the median of the last
 * KVP_STEPCOST_RING measurements of that batch size when there are some (a step stalled
 * by another process on a shared machine moves it not at all; a shift in load within
 * half a ring), else d1 * (1 + 0.06 (b - 1)) scaled by the decode ratio (each sequence
 * adds its attention and sampling to one pass over the weights).  It is the streams'
 * gap alone, which the step budget while they run is a multiple of.  While a long
 * prompt prefills next to them no decode step runs alone, and a median taken before
 * the machine's load changed would stay: it follows the weights scale k_w of the mixed
 * steps since then (the ratio of now to when the last decode step alone was seen,
 * within [1/2, 2]).  Measured with another process taking 75% of the CPU: the median
 * of before held the budget at half a step's cost, each step computed one prompt token,
 * and a 4,000-token prompt next to one stream took 647 s.
 *
 * Thread: the engine thread's; pure arithmetic, no clock.
 */
#ifndef KVP_ENGINE_STEPCOST_H
#define KVP_ENGINE_STEPCOST_H

#include <stdbool.h>
#include <stdint.h>

#define KVP_STEPCOST_MAX_BATCH 256 /* decode sizes remembered one by one; larger share */
#define KVP_STEPCOST_RING 8	   /* decode steps remembered per batch size */
#define KVP_STEPCOST_ROWS 16	   /* mixed steps of this many rows or fewer: by row count */
#define KVP_STEPCOST_STALE 64	   /* ... a count's ratios forgotten after this many others */

/**
 * struct kvp_stepcost - the model; fill with kvp_stepcost_init()
 * @p0, @p1, @p2:  prefill: fixed ns per call, ns per token, ns per token per position
 * @d1:            decode step of one sequence, ns
 * @k_w, @k_a:    prefill and mixed steps, scales of the weights-and-rows part and of the
 *                 attention part (1 = as calibrated)
 * @k_dec:         decode steps, measured / modelled, recent
 * @k_w_dec:       k_w when the last decode step alone was seen (0: none)
 * @dec:           decode step ns per batch size, the median of @ring (0 = not seen);
 *                 [b - 1]
 * @ring, @n_ring:  the last KVP_STEPCOST_RING decode steps of each batch size, and how
 *                 many were seen (the next goes at n_ring % KVP_STEPCOST_RING)
 * @rk, @rk_ring, @n_rk, @rk_at:  mixed and prefill steps of R <= KVP_STEPCOST_ROWS
 *                 rows: the median of the last KVP_STEPCOST_RING ratios of what such a
 *                 step took to the scaled line (1 = none seen, or none in the last
 *                 KVP_STEPCOST_STALE such steps); [R - 1]; @rk_at: @n_small when the
 *                 last was seen
 * @n_small:       steps of KVP_STEPCOST_ROWS rows or fewer seen
 * @frozen:        the figures were given, not measured: the observe calls change
 *                 nothing (plans that depend on the requests alone: tests)
 */
struct kvp_stepcost {
	double p0, p1, p2;
	double d1;
	double k_w, k_a, k_dec, k_w_dec;
	double dec[KVP_STEPCOST_MAX_BATCH];
	double ring[KVP_STEPCOST_MAX_BATCH][KVP_STEPCOST_RING];
	uint32_t n_ring[KVP_STEPCOST_MAX_BATCH];
	double rk[KVP_STEPCOST_ROWS];
	double rk_ring[KVP_STEPCOST_ROWS][KVP_STEPCOST_RING];
	uint32_t n_rk[KVP_STEPCOST_ROWS];
	uint64_t rk_at[KVP_STEPCOST_ROWS];
	uint64_t n_small;
	bool frozen;
};

/* Calibrated figures (ns); non-positive ones are replaced by small defaults. */
void kvp_stepcost_init(struct kvp_stepcost *c, double p0, double p1, double p2, double d1);

/*
 * kvp_stepcost_fit() - p0, p1, p2 from three timed prefills: @t[i] ns for @n[i] tokens
 * after @ctx[i] positions (chunks of a few dozen tokens and more: a single token's call
 * is cheaper per call than the line through real chunk sizes, whose matrix products run
 * at a better rate); values that noise made absurd are clamped.  @d1: a decode step.
 */
void kvp_stepcost_fit(struct kvp_stepcost *c, const double n[3], const double ctx[3],
		      const double t[3], double d1);

/* Predicted ns of a prefill of @n tokens after @ctx positions. */
double kvp_stepcost_prefill_ns(const struct kvp_stepcost *c, uint32_t n, uint32_t ctx);

/*
 * Tokens (1 .. @max) of a chunk after @ctx positions whose own work (their rows and
 * attention, as predicted now) is at least @work_x times @fixed_ns, the call's fixed
 * cost, scaled as the weights part is: the floor of a step of prefill alone, so that
 * the fixed cost is at most 1 / (1 + @work_x) of it whatever the machine's load (a
 * count of tokens: the load scales both sides).
 */
uint32_t kvp_stepcost_floor_tokens(const struct kvp_stepcost *c, double fixed_ns, double work_x,
				   uint32_t ctx, uint32_t max);

/* Predicted ns of a decode step of @batch sequences (0 for none). */
double kvp_stepcost_decode_ns(const struct kvp_stepcost *c, uint32_t batch);

/* Predicted ns of a mixed step of @rows rows reading @attn positions in attention. */
double kvp_stepcost_step_ns(const struct kvp_stepcost *c, double rows, double attn);

/*
 * Most tokens (<= @max) of a chunk after @ctx positions that a step already holding
 * @rows rows and @attn attention positions can take within @budget_ns; 0 when none.
 */
uint32_t kvp_stepcost_fit_step(const struct kvp_stepcost *c, double budget_ns, double rows,
			       double attn, uint32_t ctx, uint32_t max);

/* A mixed step of @rows rows and @attn attention positions took @ns: adapt. */
void kvp_stepcost_observe_step(struct kvp_stepcost *c, double rows, double attn, double ns);

/* A prefill of @n tokens after @ctx took @ns: adapt. */
void kvp_stepcost_observe_prefill(struct kvp_stepcost *c, uint32_t n, uint32_t ctx, double ns);

/* A decode step of @batch sequences took @ns: adapt. */
void kvp_stepcost_observe_decode(struct kvp_stepcost *c, uint32_t batch, double ns);

#endif /* KVP_ENGINE_STEPCOST_H */
