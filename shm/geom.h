/* SPDX-License-Identifier: MIT */
/*
 * geom.h - the shape of a KV block, shared by the pool (shm/) and the model (compute/).
 *
 * A block holds block_tokens tokens of K and V for every layer, laid out
 *
 *	[layer][k|v][kv_head][token][head_dim]
 *
 * so that one (layer, k|v, head) run of block_tokens x head_dim elements is contiguous
 * (attention walks one head's keys in order) and a whole block is one I/O unit for the
 * disk tier.  Bytes per token are exactly 2 * n_layers * n_kv_heads * head_dim * elem.
 *
 * Blocks sit back to back in a pool segment at block_stride bytes apart; the stride is
 * block_bytes rounded up to KVP_BLOCK_ALIGN so every block starts on a page boundary
 * (O_DIRECT reads straight into a block, huge pages never split a block needlessly).
 *
 * This is the only shm/ header compute/ may include.
 */
#ifndef KVP_SHM_GEOM_H
#define KVP_SHM_GEOM_H

#include <stddef.h>
#include <stdint.h>

#include "kvpool/layout.h"

/* Every block starts on a 4 KiB boundary: the O_DIRECT and page-size unit. */
#define KVP_BLOCK_ALIGN 4096u

/**
 * struct kvp_geom - derived sizes of one pool's blocks; filled by kvp_geom_init()
 * @shape:          the model shape it was built from (validated)
 * @elem_bytes:     bytes of one K or V element (4 f32, 2 f16/bf16)
 * @head_bytes:     one (layer, k|v, head) run: block_tokens * head_dim * elem_bytes
 * @bytes_per_token: 2 * n_layers * n_kv_heads * head_dim * elem_bytes
 * @block_bytes:    block_tokens * bytes_per_token, the payload of a block
 * @block_stride:   distance between two blocks in the segment (>= block_bytes)
 */
struct kvp_geom {
	struct kvp_model_shape shape;
	size_t elem_bytes;
	size_t head_bytes;
	size_t bytes_per_token;
	size_t block_bytes;
	size_t block_stride;
};

/**
 * kvp_geom_init() - validate @shape and derive the block sizes
 *
 * Rejects zero dimensions, an unknown dtype, and shapes whose block would not fit
 * in 1 GiB (every product is overflow-checked).
 * Return: 0, or -EINVAL.
 */
int kvp_geom_init(struct kvp_geom *g, const struct kvp_model_shape *shape);

/* Bytes of one element of @dtype, or 0 for an unknown one. */
size_t kvp_dtype_bytes(uint32_t dtype);

/* Name of @dtype ("f32", "f16", "bf16"), or "?" for an unknown one. */
const char *kvp_dtype_name(uint32_t dtype);

/* The names kvp_dtype_parse() takes, for messages. */
#define KVP_DTYPE_NAMES "f32, f16 or bf16"

/* kvp_dtype_parse() - *@out = the dtype named @name.  Return: 0, or -EINVAL. */
int kvp_dtype_parse(const char *name, uint32_t *out);

/*
 * Byte offset, inside a block, of the run for (@layer, @kv: 0 = K / 1 = V, @head).
 * The run holds block_tokens rows of head_dim elements.
 */
static inline size_t kvp_geom_run_offset(const struct kvp_geom *g, uint32_t layer, uint32_t kv,
					 uint32_t head)
{
	return (((size_t)layer * 2 + kv) * g->shape.n_kv_heads + head) * g->head_bytes;
}

/**
 * struct kvp_kv_view - how compute/ reaches K/V: a mapped segment plus its geometry
 * @base: start of block 0 (read-write for the daemon, read-only for clients)
 * @n_blocks: blocks in the segment; block ids are 0 .. n_blocks-1
 * @geom: block shape and stride
 *
 * Block @id lives at base + id * geom.block_stride.  A sequence's history is a block
 * table: an array of block ids, token t of the sequence in block table[t / block_tokens]
 * at row t % block_tokens.
 */
struct kvp_kv_view {
	uint8_t *base;
	uint32_t n_blocks;
	struct kvp_geom geom;
};

/* Start of block @id in @v; the caller has checked id < v->n_blocks. */
static inline uint8_t *kvp_kv_block(const struct kvp_kv_view *v, uint32_t id)
{
	return v->base + (size_t)id * v->geom.block_stride;
}

/*
 * The K (@kv 0) or V (@kv 1) run of (@layer, @head) in block @id: block_tokens rows of
 * head_dim elements; token t of the block is row t.  The caller has checked every index.
 */
static inline uint8_t *kvp_kv_run(const struct kvp_kv_view *v, uint32_t id, uint32_t layer,
				  uint32_t kv, uint32_t head)
{
	return kvp_kv_block(v, id) + kvp_geom_run_offset(&v->geom, layer, kv, head);
}

#endif /* KVP_SHM_GEOM_H */
