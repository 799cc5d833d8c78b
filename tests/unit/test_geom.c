/* SPDX-License-Identifier: MIT */
/*
 * test_geom.c - block geometry: exact sizes, layout offsets, K/V run accessor, rejected
 * shapes.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "shm/geom.h"

static void test_bytes_per_token_exact(void **state)
{
	/* 2 * L * H_kv * D * s, for a GQA 1B-like shape in f16 */
	struct kvp_model_shape s = { .n_layers = 16,
				     .n_kv_heads = 8,
				     .head_dim = 64,
				     .dtype = KVP_DTYPE_F16,
				     .block_tokens = 16 };
	struct kvp_geom g;

	assert_int_equal(kvp_geom_init(&g, &s), 0);
	assert_int_equal(g.bytes_per_token, 2 * 16 * 8 * 64 * 2);
	assert_int_equal(g.block_bytes, 16 * g.bytes_per_token);
	assert_int_equal(g.head_bytes, 16 * 64 * 2);
	assert_int_equal(g.block_stride % KVP_BLOCK_ALIGN, 0);
	assert_true(g.block_stride >= g.block_bytes);
}

static void test_run_offsets_follow_layout(void **state)
{
	/* [layer][k|v][kv_head][token][head_dim]: V of layer 0 follows all K heads of layer 0 */
	struct kvp_model_shape s = { .n_layers = 3,
				     .n_kv_heads = 2,
				     .head_dim = 8,
				     .dtype = KVP_DTYPE_F32,
				     .block_tokens = 4 };
	struct kvp_geom g;

	assert_int_equal(kvp_geom_init(&g, &s), 0);
	assert_int_equal(kvp_geom_run_offset(&g, 0, 0, 0), 0);
	assert_int_equal(kvp_geom_run_offset(&g, 0, 0, 1), g.head_bytes);
	assert_int_equal(kvp_geom_run_offset(&g, 0, 1, 0), 2 * g.head_bytes);
	assert_int_equal(kvp_geom_run_offset(&g, 1, 0, 0), 4 * g.head_bytes);
	assert_int_equal(kvp_geom_run_offset(&g, 2, 1, 1) + g.head_bytes, g.block_bytes);
}

static void test_int8_runs_and_scales(void **state)
{
	/*
	 * int8: a K run is its rows (in channel quads) then one scale code byte per channel,
	 * a V run its rows then one per token; a layer's K runs, then its V runs; layout.h's
	 * functions and the geometry agree, and the runs tile the block
	 */
	struct kvp_model_shape s = { .n_layers = 3,
				     .n_kv_heads = 2,
				     .head_dim = 8,
				     .dtype = KVP_DTYPE_INT8,
				     .block_tokens = 4 };
	struct kvp_geom g;
	uint64_t at = 0;

	assert_int_equal(kvp_geom_init(&g, &s), 0);
	assert_int_equal(g.head_bytes, 4 * 8 + 8);
	assert_int_equal(g.v_head_bytes, 4 * 8 + 4);
	assert_int_equal(g.block_bytes, 3 * 2 * (40 + 36));
	assert_int_equal(g.bytes_per_token, g.block_bytes / 4);
	assert_int_equal(g.elem_bytes, 1);
	assert_int_equal(kvp_geom_run_offset(&g, 0, 0, 1), 40);
	assert_int_equal(kvp_geom_run_offset(&g, 0, 1, 0), 80);
	assert_int_equal(kvp_geom_run_offset(&g, 0, 1, 1), 116);
	assert_int_equal(kvp_geom_run_offset(&g, 1, 0, 0), 152);
	/* key t, channel c: channel quads of the block's 4 tokens */
	assert_int_equal(kvp_int8_k_index(4, 0, 0), 0);
	assert_int_equal(kvp_int8_k_index(4, 0, 3), 3);
	assert_int_equal(kvp_int8_k_index(4, 1, 0), 4);
	assert_int_equal(kvp_int8_k_index(4, 3, 5), 4 * 4 + 3 * 4 + 1);
	/* the channels go in quads */
	s.head_dim = 6;
	assert_int_equal(kvp_geom_init(&g, &s), -EINVAL);
	s.head_dim = 8;
	assert_int_equal(kvp_geom_init(&g, &s), 0);
	for (uint32_t l = 0; l < 3; l++)
		for (uint32_t kv = 0; kv < 2; kv++)
			for (uint32_t h = 0; h < 2; h++) {
				assert_int_equal(kvp_geom_run_offset(&g, l, kv, h), at);
				assert_int_equal(kvp_layout_run_offset(&s, l, kv, h), at);
				at += kvp_layout_run_bytes(&s, kv);
			}
	assert_int_equal(at, g.block_bytes);
	assert_int_equal(kvp_layout_block_bytes(&s), g.block_bytes);
	/* the names */
	uint32_t d = 99;

	assert_int_equal(kvp_dtype_parse("int8", &d), 0);
	assert_int_equal(d, KVP_DTYPE_INT8);
	assert_string_equal(kvp_dtype_name(KVP_DTYPE_INT8), "int8");
	assert_int_equal(kvp_dtype_parse("q8_0", &d), -EINVAL);
	assert_true(kvp_dtype_is_int(KVP_DTYPE_INT8) && !kvp_dtype_is_int(KVP_DTYPE_F16));
}

static void test_int4_runs_and_scales(void **state)
{
	/*
	 * int4: a run is its nibbles, then d and dmin, then 12 bits of codes a group (K: a
	 * group per channel, V: per token), padded to a byte; the runs tile the block; an
	 * odd head_dim is refused (elements are packed in pairs)
	 */
	struct kvp_model_shape s = { .n_layers = 3,
				     .n_kv_heads = 2,
				     .head_dim = 10,
				     .dtype = KVP_DTYPE_INT4,
				     .block_tokens = 3 };
	struct kvp_geom g;
	uint64_t at = 0;
	uint32_t d = 99;

	(void)state;
	assert_int_equal(kvp_geom_init(&g, &s), 0);
	assert_int_equal(g.head_bytes, 15 + 4 + 15);  /* 10 groups: 120 bits */
	assert_int_equal(g.v_head_bytes, 15 + 4 + 5); /* 3 groups: 36 bits, 5 bytes */
	assert_int_equal(g.block_bytes, 3 * 2 * (34 + 24));
	for (uint32_t l = 0; l < 3; l++)
		for (uint32_t kv = 0; kv < 2; kv++)
			for (uint32_t h = 0; h < 2; h++) {
				assert_int_equal(kvp_geom_run_offset(&g, l, kv, h), at);
				assert_int_equal(kvp_layout_run_offset(&s, l, kv, h), at);
				at += kvp_layout_run_bytes(&s, kv);
			}
	assert_int_equal(at, g.block_bytes);
	s.head_dim = 9;
	assert_int_equal(kvp_geom_init(&g, &s), -EINVAL);
	assert_int_equal(kvp_dtype_parse("int4", &d), 0);
	assert_int_equal(d, KVP_DTYPE_INT4);
	assert_string_equal(kvp_dtype_name(KVP_DTYPE_INT4), "int4");
	assert_true(kvp_dtype_is_int(KVP_DTYPE_INT4));
}

static void test_kv_run_tiles_blocks(void **state)
{
	/*
	 * kvp_kv_run() of every (block, layer, k|v, head) lands where layout.h tells a client
	 * to look, and the runs tile each block's payload exactly: every byte written once,
	 * the padding up to the stride never.
	 */
	struct kvp_model_shape s = { .n_layers = 3,
				     .n_kv_heads = 2,
				     .head_dim = 8,
				     .dtype = KVP_DTYPE_BF16,
				     .block_tokens = 5 };
	struct kvp_kv_view v = { .n_blocks = 3 };
	uint8_t *mem;

	assert_int_equal(kvp_geom_init(&v.geom, &s), 0);
	mem = calloc(v.n_blocks, v.geom.block_stride);
	assert_non_null(mem);
	v.base = mem;
	for (uint32_t b = 0; b < v.n_blocks; b++)
		for (uint32_t l = 0; l < s.n_layers; l++)
			for (uint32_t kv = 0; kv < 2; kv++)
				for (uint32_t h = 0; h < s.n_kv_heads; h++) {
					uint8_t *run = kvp_kv_run(&v, b, l, kv, h);
					size_t off = b * v.geom.block_stride +
						     ((l * 2 + kv) * s.n_kv_heads + h) *
							     (size_t)s.block_tokens * s.head_dim *
							     2;

					assert_ptr_equal(run, mem + off);
					for (size_t i = 0; i < v.geom.head_bytes; i++)
						run[i]++;
				}
	for (uint32_t b = 0; b < v.n_blocks; b++)
		for (size_t i = 0; i < v.geom.block_stride; i++)
			assert_int_equal(mem[b * v.geom.block_stride + i],
					 i < v.geom.block_bytes ? 1 : 0);
	free(mem);
}

static void test_bad_shapes_rejected(void **state)
{
	struct kvp_model_shape ok = { .n_layers = 2,
				      .n_kv_heads = 2,
				      .head_dim = 8,
				      .dtype = KVP_DTYPE_BF16,
				      .block_tokens = 16 };
	struct kvp_model_shape s;
	struct kvp_geom g;

	s = ok;
	s.dtype = KVP_DTYPE__COUNT;
	assert_int_equal(kvp_geom_init(&g, &s), -EINVAL);
	s = ok;
	s.block_tokens = 0;
	assert_int_equal(kvp_geom_init(&g, &s), -EINVAL);
	s = ok;
	s.n_kv_heads = 0;
	assert_int_equal(kvp_geom_init(&g, &s), -EINVAL);
	/* 1 GiB + 4 KiB per block: a misconfiguration, refused */
	s = ok;
	s.dtype = KVP_DTYPE_F32;
	s.n_layers = 1;
	s.n_kv_heads = 1;
	s.head_dim = 1024;
	s.block_tokens = (1u << 17) + 1;
	assert_int_equal(kvp_geom_init(&g, &s), -EINVAL);
	s.block_tokens = 1u << 17; /* exactly 1 GiB: accepted */
	assert_int_equal(kvp_geom_init(&g, &s), 0);
	assert_int_equal(g.block_bytes, 1u << 30);
	s = ok;
	s.n_layers = UINT32_MAX;
	s.head_dim = UINT32_MAX;
	assert_int_equal(kvp_geom_init(&g, &s), -EINVAL);
	assert_string_equal(kvp_dtype_name(KVP_DTYPE_BF16), "bf16");
	assert_string_equal(kvp_dtype_name(99), "?");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bytes_per_token_exact),
		cmocka_unit_test(test_run_offsets_follow_layout),
		cmocka_unit_test(test_kv_run_tiles_blocks),
		cmocka_unit_test(test_int8_runs_and_scales),
		cmocka_unit_test(test_int4_runs_and_scales),
		cmocka_unit_test(test_bad_shapes_rejected),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
