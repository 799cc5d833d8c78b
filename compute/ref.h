/* SPDX-License-Identifier: MIT */
/*
 * ref.h - the naive reference forward pass: the test oracle.
 *
 * Recomputes the whole sequence from scratch with plain loops (no cache, no BLAS, no
 * blocks), straight from the formulas, accumulating in double.  Slow on purpose and
 * kept obviously correct; the fast path (forward.c) is tested against it.
 */
#ifndef KVP_COMPUTE_REF_H
#define KVP_COMPUTE_REF_H

#include <stdint.h>

struct kvp_model;

/**
 * kvp_ref_forward() - logits of every position of @tokens
 * @m:      the model
 * @tokens: @n ids (< n_vocab; the caller checks), positions 0 .. n - 1
 * @logits: out; n * n_vocab floats (row i for position i)
 * Return: 0, or -ENOMEM.
 */
int kvp_ref_forward(const struct kvp_model *m, const int32_t *tokens, uint32_t n, float *logits);

/* kvp_ref_forward_opts() flags */
enum {
	/*
	 * Round the input of every projection as the fast path does before its dot products
	 * (int8 blocks for the integer types, bf16 for BF16: compute/kernels/quant.h), so
	 * the only difference left is float rounding: tight bounds, equal greedy tokens.
	 * Without it the reference is the exact model the file describes.
	 */
	KVP_REF_ROUND_ACT = 1,
	/*
	 * With KVP_REF_ROUND_ACT: round the K-quants' inputs per 256 (struct kvp_act_q8k,
	 * what the 256-bit and scalar tables take: kvp_ref_act_flags()), not per 32.
	 */
	KVP_REF_ROUND_Q8K = 2,
};

/* kvp_ref_act_flags() - the rounding flags for the activation formats of table @k. */
struct kvp_kernels;
unsigned kvp_ref_act_flags(const struct kvp_kernels *k);

/* kvp_ref_forward_opts() - kvp_ref_forward() with @flags (KVP_REF_*). */
int kvp_ref_forward_opts(const struct kvp_model *m, const int32_t *tokens, uint32_t n,
			 float *logits, unsigned flags);

#endif /* KVP_COMPUTE_REF_H */
