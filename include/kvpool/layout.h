/* SPDX-License-Identifier: MIT */
/*
 * kvpool/layout.h - pool geometry as clients see it (ABI, versioned).
 *
 * A client that maps a pool segment read-only (the fd passed in WELCOME) finds the
 * K/V of block id at  data_offset + id * block_stride  and, inside a block, the run of
 * (layer, k|v, kv_head) at  ((layer * 2 + kv) * n_kv_heads + kv_head) * head_bytes,
 * holding block_tokens rows of head_dim elements of dtype.
 *
 * Every struct here crosses a process boundary: fixed-width little-endian fields,
 * explicit padding, sizes pinned by static_assert.
 */
#ifndef KVPOOL_LAYOUT_H
#define KVPOOL_LAYOUT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

/* K/V element types.  Values are ABI; int8 with per-block scales comes later as 3. */
enum kvp_dtype {
	KVP_DTYPE_F32 = 0,
	KVP_DTYPE_F16 = 1,
	KVP_DTYPE_BF16 = 2,
	KVP_DTYPE__COUNT
};

/**
 * struct kvp_model_shape - what decides the size and layout of a KV block
 * @n_layers:     transformer layers
 * @n_kv_heads:   K/V heads per layer (GQA/MQA: fewer than query heads)
 * @head_dim:     elements per head
 * @dtype:        enum kvp_dtype of the stored K/V
 * @block_tokens: tokens per block (default 16)
 */
struct kvp_model_shape {
	uint32_t n_layers;
	uint32_t n_kv_heads;
	uint32_t head_dim;
	uint32_t dtype;
	uint32_t block_tokens;
	uint32_t reserved0;
};
static_assert(sizeof(struct kvp_model_shape) == 24, "layout ABI");

#endif /* KVPOOL_LAYOUT_H */
