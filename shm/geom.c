/* SPDX-License-Identifier: MIT */
/*
 * geom.c - block sizes derived from a model shape.  Pure arithmetic, no state.
 */
#include "shm/geom.h"

#include <errno.h>
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
	default:
		return 0;
	}
}

const char *kvp_dtype_name(uint32_t dtype)
{
	static const char *const names[] = {
		[KVP_DTYPE_F32] = "f32",
		[KVP_DTYPE_F16] = "f16",
		[KVP_DTYPE_BF16] = "bf16",
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
	size_t head, per_token, block, stride;

	if (!elem || !s->n_layers || !s->n_kv_heads || !s->head_dim || !s->block_tokens)
		return -EINVAL;
	/* head = block_tokens * head_dim * elem; per_token = 2 * L * H_kv * head_dim * elem */
	if (__builtin_mul_overflow((size_t)s->block_tokens, (size_t)s->head_dim, &head) ||
	    __builtin_mul_overflow(head, elem, &head) ||
	    __builtin_mul_overflow((size_t)2 * s->n_layers, (size_t)s->n_kv_heads, &per_token) ||
	    __builtin_mul_overflow(per_token, (size_t)s->head_dim * elem, &per_token) ||
	    __builtin_mul_overflow(per_token, (size_t)s->block_tokens, &block))
		return -EINVAL;
	if (block > BLOCK_BYTES_MAX)
		return -EINVAL;
	stride = (block + KVP_BLOCK_ALIGN - 1) & ~(size_t)(KVP_BLOCK_ALIGN - 1);

	g->shape = *s;
	g->shape.reserved0 = 0;
	g->elem_bytes = elem;
	g->head_bytes = head;
	g->bytes_per_token = per_token;
	g->block_bytes = block;
	g->block_stride = stride;
	return 0;
}
