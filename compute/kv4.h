/* SPDX-License-Identifier: MIT */
/*
 * kv4.h - the int4 K/V type in the forward pass: rows into the stage, the residual
 * window, blocks quantized (sealed) as they slide out of it (shm/geom.h struct
 * kvp_kv_stage says when), and attention that reads a block quantized or from the
 * stage by position.
 */
#ifndef KVP_COMPUTE_KV4_H
#define KVP_COMPUTE_KV4_H

#include <stdint.h>

#include "shm/geom.h"

struct kvp_kernels;
struct kvp_attn_scratch;

/*
 * kvp_kv4_store() - K and V of position @pos of layer @l (n_kv_heads * head_dim f32
 * each at @k and @v) into the stage slot of its block (taken by the caller).
 */
void kvp_kv4_store(const struct kvp_kv_view *kv, const uint32_t *table, uint32_t l, uint32_t pos,
		   const float *k, const float *v);

/*
 * kvp_kv4_seal() - after layer @l's stores of a call writing positions [@pos0, @pos0 +
 * @n) of @table: quantize layer @l of every block that this call takes out of the
 * window, unless another sequence of the call sharing it has (once per block).
 */
void kvp_kv4_seal(const struct kvp_kernels *k, const struct kvp_kv_view *kv, const uint32_t *table,
		  uint32_t pos0, uint32_t n, uint32_t l);

/* kvp_kv4_release() - at the end of that call: sealed blocks give their slots back. */
void kvp_kv4_release(const struct kvp_kv_view *kv, const uint32_t *table, uint32_t pos0,
		     uint32_t n);

/* kvp_attn4() - kvp_attn() (attn.h) for int4 views; kvp_attn() calls it. */
void kvp_attn4(float *restrict out, const float *restrict q, const struct kvp_kv_view *kv,
	       const uint32_t *table, uint32_t layer, uint32_t pos0, uint32_t n, uint32_t n_heads,
	       uint32_t kh0, uint32_t kh1, const struct kvp_kernels *k, struct kvp_attn_scratch *s);

#endif /* KVP_COMPUTE_KV4_H */
