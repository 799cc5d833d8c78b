/* SPDX-License-Identifier: MIT */
/*
 * geom.h - the shape of a KV block, shared by the pool (shm/) and the model (compute/).
 *
 * A block holds block_tokens tokens of K and V for every layer, laid out
 *
 *	[layer][k|v][kv_head][token][head_dim]   (then, for int8, each run's scales)
 *
 * so that one (layer, k|v, head) run of block_tokens x head_dim elements is contiguous
 * (attention walks one head's keys in order) and a whole block is one I/O unit for the
 * disk tier.  include/kvpool/layout.h defines the runs and their offsets
 * (kvp_layout_run_offset()); for f32/f16/bf16 bytes per token are exactly
 * 2 * n_layers * n_kv_heads * head_dim * elem, for int8 head_dim bytes per row plus
 * the scales (block_bytes / block_tokens).
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
 * @elem_bytes:     bytes of one K or V element (4 f32, 2 f16/bf16, 1 int8)
 * @head_bytes:     one K (layer, 0, head) run: block_tokens * head_dim * elem_bytes, and
 *                  for int8 its per-channel scales
 * @v_head_bytes:   one V run (= head_bytes but for int8: its per-token scales)
 * @bytes_per_token: K/V of one token (block_bytes / block_tokens, rounded down for int8)
 * @block_bytes:    the payload of a block (kvp_layout_block_bytes())
 * @block_stride:   distance between two blocks in the segment (>= block_bytes)
 */
struct kvp_geom {
	struct kvp_model_shape shape;
	size_t elem_bytes;
	size_t head_bytes;
	size_t v_head_bytes;
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
#define KVP_DTYPE_NAMES "f32, f16, bf16, int8 or int4"

/* kvp_dtype_parse() - *@out = the dtype named @name.  Return: 0, or -EINVAL. */
int kvp_dtype_parse(const char *name, uint32_t *out);

/*
 * Byte offset, inside a block, of the run for (@layer, @kv: 0 = K / 1 = V, @head).
 * The run holds block_tokens rows of head_dim elements.
 */
static inline size_t kvp_geom_run_offset(const struct kvp_geom *g, uint32_t layer, uint32_t kv,
					 uint32_t head)
{
	size_t kb = g->head_bytes, vb = g->v_head_bytes;

	return (size_t)layer * g->shape.n_kv_heads * (kb + vb) +
	       (size_t)kv * g->shape.n_kv_heads * kb + (size_t)head * (kv ? vb : kb);
}

#define KVP_STAGE_NONE UINT32_MAX

/* int4's residual window by default, tokens (KIVI's R; [pool] kv_window) */
#define KVP_KV_WINDOW_DEFAULT 32u
/* the largest window [pool] kv_window takes */
#define KVP_KV_WINDOW_MAX 4096u

/**
 * struct kvp_kv_stage - the keys of partial blocks, in f32, for the integer K/V types
 * @n_slots:   slots; a block being filled holds one until its last row is written
 * @slot_floats: floats of one slot: block_tokens rows of every (layer, kv head),
 *             laid out [layer][kv_head][token][head_dim]
 * @data:      n_slots * slot_floats
 * @slot_of:   per block id: its slot, or KVP_STAGE_NONE
 * @owner:     per slot: the block holding it, or KVP_STAGE_NONE (free)
 * @n_used:    slots held
 * @sealed:    per slot: layers whose runs have been quantized (int4: a block filled
 *             while shared is quantized once, by the first sequence to reach it)
 * @window:    int4: the residual window, tokens ([pool] kv_window; kvp_stage_init()
 *             sets KVP_KV_WINDOW_DEFAULT, the owner may change it before first use);
 *             0 for int8
 *
 * K is quantized per channel over a block's tokens, so it can only be quantized once
 * the block is full.  Until then the rows written so far live here, at full precision;
 * the block's V rows are quantized (per token) as they are written.  compute/ takes a
 * slot for each block a call writes into (kvp_stage_take()), quantizes the block's K
 * when the call writes its last row, and gives the slot back at the end of that call.
 * The pool gives back the slot of a block freed before it filled, and copies it with
 * the block on copy-on-write.  Daemon memory only: a client never sees a partial block.
 *
 * int4 stages V as well, and keeps a block's slot past its last row: a block is
 * quantized (sealed) once its sequence reaches @window tokens past its end, and until
 * then every query reads it from here, at full precision (KIVI's residual window).
 * Whether a query at position p reads block b quantized or from its slot is a function
 * of the positions only - quantized iff (b + 1) * block_tokens + window <= p + 1 - so
 * a prompt prefilled in chunks gives what one call gives; the slot is dropped at the
 * end of the call that sealed the block.  A block with no slot left (a prefix hit's:
 * only sealed blocks are published) is read quantized.
 */
struct kvp_kv_stage {
	uint32_t n_slots;
	size_t slot_floats;
	float *data;
	uint32_t *slot_of;
	uint32_t *owner;
	uint32_t n_used;
	uint32_t *sealed;
	uint32_t window;
};

/**
 * kvp_stage_init() - slots for @n_slots partial blocks of @g, in a pool of @n_blocks
 * Return: 0, -EINVAL (zero sizes), -ENOMEM.
 */
int kvp_stage_init(struct kvp_kv_stage *st, const struct kvp_geom *g, uint32_t n_blocks,
		   uint32_t n_slots);

/* kvp_stage_deinit() - free its memory; a zeroed stage is a no-op. */
void kvp_stage_deinit(struct kvp_kv_stage *st);

/* The staged K of block @id (its slot), or NULL when it holds none. */
static inline float *kvp_stage_get(const struct kvp_kv_stage *st, uint32_t id)
{
	uint32_t s = st->slot_of[id];

	return s == KVP_STAGE_NONE ? NULL : st->data + (size_t)s * st->slot_floats;
}

/* kvp_stage_take() - block @id's slot, taken when it has none.  NULL: none free. */
float *kvp_stage_take(struct kvp_kv_stage *st, uint32_t id);

/* kvp_stage_drop() - block @id gives its slot back (no-op when it holds none). */
void kvp_stage_drop(struct kvp_kv_stage *st, uint32_t id);

/* kvp_stage_copy() - @to gets a copy of @from's slot.  Return: 0, or -ENOSPC. */
int kvp_stage_copy(struct kvp_kv_stage *st, uint32_t from, uint32_t to);

/*
 * kvp_stage_row() - row @row of (@layer, @head) in a slot: head_dim floats.
 */
static inline float *kvp_stage_row(const struct kvp_geom *g, float *slot, uint32_t layer,
				   uint32_t head, uint32_t row)
{
	return slot + (((size_t)layer * g->shape.n_kv_heads + head) * g->shape.block_tokens + row) *
			      g->shape.head_dim;
}

/*
 * kvp_stage_vrow() - int4: row @row of V (@layer, @head) in a slot, after all the K rows.
 */
static inline float *kvp_stage_vrow(const struct kvp_geom *g, float *slot, uint32_t layer,
				    uint32_t head, uint32_t row)
{
	return kvp_stage_row(g, slot, layer, head, row) +
	       (size_t)g->shape.n_layers * g->shape.n_kv_heads * g->shape.block_tokens *
		       g->shape.head_dim;
}

/**
 * struct kvp_kv_view - how compute/ reaches K/V: a mapped segment plus its geometry
 * @base: start of block 0 (read-write for the daemon, read-only for clients)
 * @n_blocks: blocks in the segment; block ids are 0 .. n_blocks-1
 * @geom: block shape and stride
 * @stage: the staged keys of partial blocks (integer dtypes; NULL for the float ones)
 *
 * Block @id lives at base + id * geom.block_stride.  A sequence's history is a block
 * table: an array of block ids, token t of the sequence in block table[t / block_tokens]
 * at row t % block_tokens.
 */
struct kvp_kv_view {
	uint8_t *base;
	uint32_t n_blocks;
	struct kvp_geom geom;
	struct kvp_kv_stage *stage;
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
