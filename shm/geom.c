/* SPDX-License-Identifier: MIT */
/*
 * geom.c - block sizes derived from a model shape.  Pure arithmetic, no state.
 */
#include "shm/geom.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A block larger than this is a misconfiguration, not a model. */
#define BLOCK_BYTES_MAX (1ull << 30)

size_t kvp_dtype_bytes(uint32_t dtype)
{
	switch (dtype) {
	case KVP_DTYPE_F32:
		return 4;
	case KVP_DTYPE_F16:
	case KVP_DTYPE_BF16:
		return 2;
	case KVP_DTYPE_INT8:
	case KVP_DTYPE_INT4: /* two a byte: the runs' sizes are layout.h's */
		return 1;
	default:
		return 0;
	}
}

const char *kvp_dtype_name(uint32_t dtype)
{
	static const char *const names[] = {
		[KVP_DTYPE_F32] = "f32",   [KVP_DTYPE_F16] = "f16",   [KVP_DTYPE_BF16] = "bf16",
		[KVP_DTYPE_INT8] = "int8", [KVP_DTYPE_INT4] = "int4",
	};

	if (dtype >= KVP_DTYPE__COUNT)
		return "?";
	return names[dtype];
}

int kvp_dtype_parse(const char *name, uint32_t *out)
{
	for (uint32_t d = 0; d < KVP_DTYPE__COUNT; d++) {
		if (!strcmp(name, kvp_dtype_name(d))) {
			*out = d;
			return 0;
		}
	}
	return -EINVAL;
}

int kvp_geom_init(struct kvp_geom *g, const struct kvp_model_shape *shape)
{
	const struct kvp_model_shape *s = shape;
	size_t elem = kvp_dtype_bytes(s->dtype);
	uint64_t block, stride;

	if (!elem || !s->n_layers || !s->n_kv_heads || !s->head_dim || !s->block_tokens)
		return -EINVAL;
	/* int8 keys go in channel quads, int4 packs a row's elements in pairs (layout.h) */
	if ((s->dtype == KVP_DTYPE_INT8 && s->head_dim % 4) ||
	    (s->dtype == KVP_DTYPE_INT4 && s->head_dim % 2))
		return -EINVAL;
	/*
	 * Each factor is below 2^32, so a run (block_tokens * head_dim * 4 + scales) is
	 * below 2^66 only in theory: bound the factors first so layout.h's uint64_t
	 * arithmetic cannot wrap.
	 */
	if ((uint64_t)s->block_tokens * s->head_dim > BLOCK_BYTES_MAX ||
	    (uint64_t)s->n_layers * s->n_kv_heads > BLOCK_BYTES_MAX)
		return -EINVAL;
	block = kvp_layout_block_bytes(s);
	if (block > BLOCK_BYTES_MAX ||
	    (uint64_t)s->n_layers * s->n_kv_heads * s->block_tokens * s->head_dim > BLOCK_BYTES_MAX)
		return -EINVAL;
	stride = (block + KVP_BLOCK_ALIGN - 1) & ~(uint64_t)(KVP_BLOCK_ALIGN - 1);

	g->shape = *s;
	g->shape.reserved0 = 0;
	g->elem_bytes = elem;
	g->head_bytes = (size_t)kvp_layout_run_bytes(s, 0);
	g->v_head_bytes = (size_t)kvp_layout_run_bytes(s, 1);
	g->bytes_per_token = (size_t)(block / s->block_tokens);
	g->block_bytes = (size_t)block;
	g->block_stride = (size_t)stride;
	return 0;
}

int kvp_stage_init(struct kvp_kv_stage *st, const struct kvp_geom *g, uint32_t n_blocks,
		   uint32_t n_slots)
{
	const struct kvp_model_shape *s = &g->shape;

	memset(st, 0, sizeof(*st));
	if (!n_blocks || !n_slots)
		return -EINVAL;
	st->slot_floats = (size_t)s->n_layers * s->n_kv_heads * s->block_tokens * s->head_dim;
	/* int4 stages V too: the residual window is read at full precision */
	if (s->dtype == KVP_DTYPE_INT4)
		st->slot_floats *= 2;
	st->data = calloc(n_slots, st->slot_floats * sizeof(float));
	st->slot_of = malloc((size_t)n_blocks * sizeof(uint32_t));
	st->owner = malloc((size_t)n_slots * sizeof(uint32_t));
	st->sealed = calloc(n_slots, sizeof(uint32_t));
	if (!st->data || !st->slot_of || !st->owner || !st->sealed) {
		kvp_stage_deinit(st);
		return -ENOMEM;
	}
	memset(st->slot_of, 0xff, (size_t)n_blocks * sizeof(uint32_t));
	memset(st->owner, 0xff, (size_t)n_slots * sizeof(uint32_t));
	st->n_slots = n_slots;
	st->window = s->dtype == KVP_DTYPE_INT4 ? KVP_KV_WINDOW_DEFAULT : 0;
	return 0;
}

void kvp_stage_deinit(struct kvp_kv_stage *st)
{
	free(st->data);
	free(st->slot_of);
	free(st->owner);
	free(st->sealed);
	memset(st, 0, sizeof(*st));
}

float *kvp_stage_take(struct kvp_kv_stage *st, uint32_t id)
{
	float *have = kvp_stage_get(st, id);

	if (have)
		return have;
	if (st->n_used == st->n_slots)
		return NULL;
	/* a few slots (about one per running sequence): a scan is cheaper than a list */
	for (uint32_t i = 0; i < st->n_slots; i++) {
		if (st->owner[i] != KVP_STAGE_NONE)
			continue;
		st->owner[i] = id;
		st->sealed[i] = 0;
		st->slot_of[id] = i;
		st->n_used++;
		return st->data + (size_t)i * st->slot_floats;
	}
	return NULL; /* cannot happen: n_used counts the owners */
}

void kvp_stage_drop(struct kvp_kv_stage *st, uint32_t id)
{
	uint32_t s = st->slot_of[id];

	if (s == KVP_STAGE_NONE)
		return;
	st->owner[s] = KVP_STAGE_NONE;
	st->slot_of[id] = KVP_STAGE_NONE;
	st->n_used--;
}

int kvp_stage_copy(struct kvp_kv_stage *st, uint32_t from, uint32_t to)
{
	const float *src = kvp_stage_get(st, from);
	float *dst;

	if (!src)
		return 0;
	dst = kvp_stage_take(st, to);
	if (!dst)
		return -ENOSPC;
	memcpy(dst, src, st->slot_floats * sizeof(float));
	st->sealed[st->slot_of[to]] = st->sealed[st->slot_of[from]];
	return 0;
}
