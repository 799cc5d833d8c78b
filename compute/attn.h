/* SPDX-License-Identifier: MIT */
/*
 * attn.h - causal attention that reads K/V straight from pool blocks through a block
 * table (no contiguous copy of the history is built).
 */
#ifndef KVP_COMPUTE_ATTN_H
#define KVP_COMPUTE_ATTN_H

#include <stdint.h>

#include "shm/geom.h"

struct kvp_kernels;

/**
 * struct kvp_attn_scratch - per-context buffers, sized once
 * @ml:   2 * rows * n_heads floats (running max and mass per query head)
 * @kbuf, @vbuf: block_tokens * head_dim floats each (f16/bf16/int8 runs converted here)
 * @sbuf: block_tokens floats (one block's scores)
 */
struct kvp_attn_scratch {
	float *ml;
	float *kbuf;
	float *vbuf;
	float *sbuf;
};

/**
 * kvp_attn() - attention of @n consecutive query positions of one sequence
 * @out:     (n, n_heads * head_dim) result
 * @q:       (n, n_heads * head_dim) queries, RoPE applied
 * @kv:      the view; K/V of positions 0 .. pos0 + n - 1 are already in the blocks (int8:
 *           the blocks from pos0's on hold their keys in kv->stage, as the forward pass
 *           leaves them during the call that writes those positions)
 * @table:   the sequence's block table, covering those positions (checked by caller)
 * @layer:   which layer's K/V
 * @pos0:    position of query row 0; row i is at pos0 + i and sees positions <= pos0 + i
 * @n_heads: query heads; query head h reads K/V head h / (n_heads / n_kv_heads)
 * @kh0, @kh1: only K/V heads [kh0, kh1) and their query heads are computed (threads
 *           split the heads; each needs its own @s)
 * @k:       the kernel table (K/V conversion and the per-block step)
 * @s:       scratch
 *
 * Streams each (kv head, block) run once for all queries and heads that need it, with
 * an online softmax (running max and mass, rescaled per block).
 */
void kvp_attn(float *restrict out, const float *restrict q, const struct kvp_kv_view *kv,
	      const uint32_t *table, uint32_t layer, uint32_t pos0, uint32_t n, uint32_t n_heads,
	      uint32_t kh0, uint32_t kh1, const struct kvp_kernels *k, struct kvp_attn_scratch *s);

/*
 * kvp_attn_prefetch() - ask for the K and V runs of (@layer, @kh) in block @id (all
 * their cache lines), ahead of the block's turn in kvp_attn() or kvp_attn4().
 */
void kvp_attn_prefetch(const struct kvp_kv_view *kv, uint32_t id, uint32_t layer, uint32_t kh);

#endif /* KVP_COMPUTE_ATTN_H */
