/* SPDX-License-Identifier: MIT */
/*
 * test_kvq.c - the integer K/V types, on every kernel table this CPU runs:
 *  - int8 quantize and dequantize (V per token, K per channel over a block) equal the
 *    scalar reference of compute/kernels/kvq.c byte for byte and bit for bit, on rows
 *    with outlier channels, zeros, tiny and huge values; the round trip is within half
 *    a step of its group;
 *  - attention over int8 blocks (compute/attn.c) equals attention over f32 blocks that
 *    hold their dequantized values (and, for a query's own block, the staged f32 keys),
 *    for prefill rows that span blocks and decode rows, GQA, head_dim 64 and 40;
 *  - the stage: slots taken, shared by block id, copied, given back, refused when full;
 *  - per-channel keys beat per-token keys on keys with outlier channels.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/attn.h"
#include "compute/kernels/kernels.h"
#include "compute/kernels/kvq.h"
#include "shm/geom.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static float frand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((rng >> 40) & 0xffffff) / 8388608.0f - 1.0f; /* [-1, 1) */
}

static const struct kvp_kernels *tables[KVP_ISA__COUNT];
static int n_tables;

static int setup(void **state)
{
	for (uint32_t i = 0; i < KVP_ISA__COUNT; i++)
		if (kvp_kernels_for(i))
			tables[n_tables++] = kvp_kernels_for(i);
	return 0;
}

static uint32_t bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

/* Keys with the structure that makes per-channel scales worth it: a few big channels. */
static void keys_with_outliers(float *k, uint32_t rows, uint32_t hd, float big)
{
	for (uint32_t t = 0; t < rows; t++)
		for (uint32_t d = 0; d < hd; d++)
			k[(size_t)t * hd + d] = frand() * (d % 17 == 3 ? big : 1.0f);
}

/*
 * How far a value of a group may come back: half a step (the scale code is rounded up,
 * so no value of a group within the codes' range is clamped).
 */
static float within(float s)
{
	return 0.5f * s * 1.001f + 1e-30f;
}

static void test_int8_equals_reference(void **state)
{
	enum { BT = 16 };
	static const uint32_t hds[] = { 64, 128, 40, 12 };

	for (int t = 0; t < n_tables; t++) {
		for (int h = 0; h < 4; h++) {
			uint32_t hd = hds[h];
			float *x = malloc(BT * hd * 4), *a = malloc(BT * hd * 4),
			      *b = malloc(BT * hd * 4);
			int8_t *qa = malloc(BT * hd), *qb = malloc(BT * hd);
			uint8_t sa[128], sb[128];

			keys_with_outliers(x, BT, hd, 40.0f);
			for (uint32_t d = 0; d < hd; d++) {
				x[2 * hd + d] = 0;	/* a zero row */
				x[5 * hd + d] *= 1e-6f; /* a tiny one (the smallest code) */
				x[7 * hd + d] = d == 1 ? 1e9f : 1.0f; /* past the codes' range */
			}
			x[hd + 1] = -x[hd + 1] * 300; /* one channel's extreme */
			/* V: a row at a time */
			for (uint32_t r = 0; r < BT; r++) {
				kvp_kvq_ref_row8(qa + r * hd, sa + r, x + r * hd, hd);
				tables[t]->kvq_row8(qb + r * hd, sb + r, x + r * hd, hd);
			}
			assert_memory_equal(qa, qb, BT * hd);
			assert_memory_equal(sa, sb, BT);
			kvp_kvq_ref_load_row8(a, qa, sa, BT, hd);
			tables[t]->kvq_load_row8(b, qb, sb, BT, hd);
			for (uint32_t i = 0; i < BT * hd; i++)
				assert_int_equal(bits(a[i]), bits(b[i]));
			for (uint32_t r = 0; r < BT; r++) {
				float s = kvp_int8_scale(sa[r]);

				if (r == 7)
					continue; /* clamped: the scale cannot reach 1e9 / 127 */
				for (uint32_t d = 0; d < hd; d++)
					assert_true(fabsf(a[r * hd + d] - x[r * hd + d]) <=
						    within(s));
			}
			/* K: per channel over the block */
			kvp_kvq_ref_chan8(qa, sa, x, BT, hd);
			tables[t]->kvq_chan8(qb, sb, x, BT, hd);
			assert_memory_equal(qa, qb, BT * hd);
			assert_memory_equal(sa, sb, hd);
			/* the channel quads of the layout: key r, channel d where layout.h says */
			for (uint32_t r = 0; r < BT; r++)
				for (uint32_t d = 0; d < hd; d++) {
					float e = nearbyintf(x[r * hd + d] *
							     (1.0f / kvp_int8_scale(sa[d])));

					e = fminf(fmaxf(e, -127.0f), 127.0f);
					assert_int_equal(qa[kvp_int8_k_index(BT, r, d)], (int)e);
				}
			kvp_kvq_ref_load_chan8(a, qa, sa, BT, hd);
			tables[t]->kvq_load_chan8(b, qb, sb, BT, hd);
			for (uint32_t i = 0; i < BT * hd; i++)
				assert_int_equal(bits(a[i]), bits(b[i]));
			for (uint32_t d = 0; d < hd; d++) {
				float s = kvp_int8_scale(sa[d]);

				if (d == 1)
					continue; /* the 1e9 channel, clamped */
				for (uint32_t r = 0; r < BT; r++)
					assert_true(fabsf(a[r * hd + d] - x[r * hd + d]) <=
						    within(s));
			}
			free(x);
			free(a);
			free(b);
			free(qa);
			free(qb);
		}
	}
}

static void test_int8_scale_edges(void **state)
{
	float z[8] = { 0 }, one[8] = { 1, -1, 0.5f, 0, 0, 0, 0, 0.25f }, back[8];
	int8_t q[8];
	uint8_t s;

	(void)state;
	kvp_kvq_ref_row8(q, &s, z, 8);
	assert_int_equal(s, 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(q[i], 0);
	kvp_kvq_ref_row8(q, &s, one, 8);
	/* the largest magnitude takes 8/9 of the range at least (the code rounds up by
	 * less than 1/8): here 1 / 127 rounds up to 2^-7 * 9 / 8, 1 to 114 steps */
	assert_int_equal(q[0], 114);
	assert_int_equal(q[1], -114);
	kvp_kvq_ref_load_row8(back, q, &s, 1, 8);
	assert_true(fabsf(back[0] - 1) < 5e-3f && fabsf(back[2] - 0.5f) < 5e-3f);
	one[0] = 127.0f / 128; /* an exact scale: the full range */
	one[1] = 0;
	kvp_kvq_ref_row8(q, &s, one, 8);
	assert_int_equal(q[0], 127);
	assert_int_equal(kvp_kvq_code8(INFINITY), 255);
	assert_int_equal(kvp_kvq_code8(NAN), 255);
	assert_int_equal(kvp_kvq_code8(240.0f * 127), 255);
	assert_true(kvp_int8_scale(255) == 240.0f && kvp_int8_scale(0) == 0x1p-24f);
	assert_true(kvp_int8_scale(24 << 3) == 1.0f && kvp_int8_scale(24 << 3 | 4) == 1.5f);
	/* every code is the smallest scale at or above amax / 127, over the whole range */
	for (int i = 0; i < 20000; i++) {
		float amax = ldexpf(1.0f + (frand() + 1.0f) / 2, (int)(frand() * 20) - 7);
		uint8_t c = kvp_kvq_code8(amax);

		assert_true(kvp_int8_scale(c) >= amax / 127.0f);
		if (c)
			assert_true(kvp_int8_scale((uint8_t)(c - 1)) < amax / 127.0f);
	}
	for (uint32_t c = 0; c < 256; c++) /* an exact scale is its own code */
		assert_int_equal(kvp_kvq_code8(kvp_int8_scale((uint8_t)c) * 127.0f), c);
}

/*
 * A pool of @nb int8 blocks and the same blocks in f32 holding what attention must see.
 * K of every full block is sealed (per channel) from the staged keys; V is quantized a
 * row at a time as the forward pass writes it.
 */
struct twin {
	struct kvp_kv_view q8, f32;
	struct kvp_kv_stage st;
	float *keys; /* the written keys, f32: [block][layer][kv head][row][hd] */
};

static void twin_init(struct twin *w, const struct kvp_kernels *k, uint32_t L, uint32_t Hkv,
		      uint32_t hd, uint32_t bt, uint32_t nb, uint32_t n_tok)
{
	struct kvp_model_shape s = { .n_layers = L,
				     .n_kv_heads = Hkv,
				     .head_dim = hd,
				     .dtype = KVP_DTYPE_INT8,
				     .block_tokens = bt };

	assert_int_equal(kvp_geom_init(&w->q8.geom, &s), 0);
	s.dtype = KVP_DTYPE_F32;
	assert_int_equal(kvp_geom_init(&w->f32.geom, &s), 0);
	w->q8.n_blocks = w->f32.n_blocks = nb;
	w->q8.base = calloc(nb, w->q8.geom.block_stride);
	w->f32.base = calloc(nb, w->f32.geom.block_stride);
	w->keys = malloc((size_t)nb * bt * L * Hkv * hd * 4);
	assert_non_null(w->q8.base);
	assert_non_null(w->f32.base);
	assert_non_null(w->keys);
	assert_int_equal(kvp_stage_init(&w->st, &w->q8.geom, nb, nb), 0);
	w->q8.stage = &w->st;
	w->f32.stage = NULL;
	for (uint32_t pos = 0; pos < n_tok; pos++) {
		uint32_t b = pos / bt, r = pos % bt;
		float *slot = kvp_stage_take(&w->st, b);

		assert_non_null(slot);
		for (uint32_t l = 0; l < L; l++)
			for (uint32_t h = 0; h < Hkv; h++) {
				uint8_t *vr = kvp_kv_run(&w->q8, b, l, 1, h);
				float *kr = kvp_stage_row(&w->q8.geom, slot, l, h, r), v[256];

				for (uint32_t d = 0; d < hd; d++) {
					kr[d] = frand() * (d % 11 == 2 ? 6.0f : 1.0f);
					v[d] = frand();
				}
				k->kvq_row8((int8_t *)vr + r * hd, vr + bt * hd + r, v, hd);
				/* the f32 twin's V: the dequantized row */
				k->kvq_load_row8((float *)kvp_kv_run(&w->f32, b, l, 1, h) + r * hd,
						 (int8_t *)vr + r * hd, vr + bt * hd + r, 1, hd);
			}
		if (r == bt - 1) {
			for (uint32_t l = 0; l < L; l++)
				for (uint32_t h = 0; h < Hkv; h++) {
					uint8_t *kq = kvp_kv_run(&w->q8, b, l, 0, h);

					k->kvq_chan8((int8_t *)kq, kq + bt * hd,
						     kvp_stage_row(&w->q8.geom, slot, l, h, 0), bt,
						     hd);
				}
		}
	}
}

/* The f32 twin as query row at @pos sees it: its own block's keys staged, earlier sealed. */
static void twin_keys_for(struct twin *w, const struct kvp_kernels *k, uint32_t pos)
{
	const struct kvp_geom *g = &w->q8.geom;
	uint32_t bt = g->shape.block_tokens, hd = g->shape.head_dim;

	for (uint32_t b = 0; b <= pos / bt; b++)
		for (uint32_t l = 0; l < g->shape.n_layers; l++)
			for (uint32_t h = 0; h < g->shape.n_kv_heads; h++) {
				float *dst = (float *)kvp_kv_run(&w->f32, b, l, 0, h);
				uint8_t *kq = kvp_kv_run(&w->q8, b, l, 0, h);

				if (b == pos / bt)
					memcpy(dst,
					       kvp_stage_row(g, kvp_stage_get(&w->st, b), l, h, 0),
					       (size_t)bt * hd * 4);
				else
					k->kvq_load_chan8(dst, (int8_t *)kq, kq + bt * hd, bt, hd);
			}
}

static void twin_deinit(struct twin *w)
{
	free(w->q8.base);
	free(w->f32.base);
	free(w->keys);
	kvp_stage_deinit(&w->st);
}

static void scratch_init(struct kvp_attn_scratch *s, uint32_t n, uint32_t n_heads, uint32_t bt,
			 uint32_t hd)
{
	s->ml = malloc((size_t)2 * n * n_heads * 4);
	s->kbuf = malloc((size_t)bt * hd * 4);
	s->vbuf = malloc((size_t)bt * hd * 4);
	s->sbuf = malloc((size_t)bt * 4);
	assert_true(s->ml && s->kbuf && s->vbuf && s->sbuf);
}

static void scratch_free(struct kvp_attn_scratch *s)
{
	free(s->ml);
	free(s->kbuf);
	free(s->vbuf);
	free(s->sbuf);
}

static void test_attn_int8_equals_dequantized(void **state)
{
	/*
	 * A prefill call of rows 21 .. 52 (blocks 1 .. 3 of 16 tokens, two of them filled by
	 * the call) and a decode row at 52, GQA 2, 3 and 6 query heads a kv head (6: more
	 * than the 4 heads attn_block8 scores in one pass) on 2 kv heads: each row of the
	 * int8 call equals the same row alone over the f32 twin that holds what it must see,
	 * within DIFF_MAX: full blocks are scored in int8 with the query rounded per block
	 * to int16 codes of step amax / 32258 (kvqattn.inc; V read as stored, its scales in
	 * the softmax weights), a relative error of about 1/64516 of the largest
	 * term of a score; the outputs are averages of values within 1, measured below 2e-5
	 * here (printed; 4e-3 with the query in one part), bounded at 1e-4.  The tables' int scores are equal, so their outputs
	 * are within float rounding of one another (1e-5).
	 */
	enum { L = 2, HKV = 2, BT = 16, NB = 4, NTOK = 53, P0 = 21 };
	const float DIFF_MAX = 1e-4f;
	static const uint32_t hds[] = { 64, 40, 64, 128 }, nhs[] = { 4, 4, 6, 12 };

	for (int t = 0; t < n_tables; t++) {
		for (int hi = 0; hi < 4; hi++) {
			uint32_t hd = hds[hi], NH = nhs[hi], n = NTOK - P0, qd = NH * hd,
				 table[NB] = { 0, 1, 2, 3 };
			float *q = malloc((size_t)n * qd * 4), *o8 = malloc((size_t)n * qd * 4);
			float *o32 = malloc((size_t)qd * 4), *oref = malloc((size_t)n * qd * 4);
			struct kvp_attn_scratch s;
			struct twin w;

			twin_init(&w, tables[t], L, HKV, hd, BT, NB, NTOK);
			scratch_init(&s, n, NH, BT, hd);
			for (size_t i = 0; i < (size_t)n * qd; i++)
				q[i] = frand();
			for (uint32_t layer = 0; layer < L; layer++) {
				float diff = 0, tdiff = 0;

				kvp_attn(o8, q, &w.q8, table, layer, P0, n, NH, 0, HKV, tables[t],
					 &s);
				kvp_attn(oref, q, &w.q8, table, layer, P0, n, NH, 0, HKV, tables[0],
					 &s);
				for (uint32_t i = 0; i < n; i++) {
					twin_keys_for(&w, tables[t], P0 + i);
					kvp_attn(o32, q + (size_t)i * qd, &w.f32, table, layer,
						 P0 + i, 1, NH, 0, HKV, tables[t], &s);
					for (uint32_t e = 0; e < qd; e++) {
						float a = o8[(size_t)i * qd + e];

						diff = fmaxf(diff, fabsf(a - o32[e]));
						tdiff = fmaxf(tdiff,
							      fabsf(a - oref[(size_t)i * qd + e]));
					}
				}
				print_message(
					"%s hd %u heads %u: layer %u: int8 scoring vs dequantized "
					"%.3g, vs the %s table %.3g\n",
					tables[t]->name, hd, NH, layer, diff, tables[0]->name,
					tdiff);
				assert_true(diff < DIFF_MAX);
				assert_true(tdiff < 1e-5f);
				/* a decode row alone: the same as its row of the prefill call */
				kvp_attn(o32, q + (size_t)(n - 1) * qd, &w.q8, table, layer,
					 NTOK - 1, 1, NH, 0, HKV, tables[t], &s);
				assert_memory_equal(o32, o8 + (size_t)(n - 1) * qd, qd * 4);
			}
			scratch_free(&s);
			twin_deinit(&w);
			free(q);
			free(o8);
			free(o32);
			free(oref);
		}
	}
}

/*
 * attn_block8 over a group of heads gives each head bit for bit what it gives that
 * head alone (the heads share the keys' and values' loads, nothing else), for groups
 * of 3 and 6 heads (passes of 3, and of 4 then 2), blocks of 16 tokens (4 heads a
 * pass), 12 (keys past the last 8 in plain loops) and 80 (one head a pass), head_dim
 * 64, 40 and 36 (V channels past the last vector in plain loops), with a running max
 * and mass from an earlier block.
 */
static void test_attn_block8_group(void **state)
{
	enum { NGMAX = 6, BTMAX = 80, HDMAX = 64 };
	static const uint32_t bts[] = { 16, 12, 80 }, hds[] = { 64, 40, 36 }, ngs[] = { 3, 6 };

	(void)state;
	for (int t = 0; t < n_tables; t++)
		for (int bi = 0; bi < 3; bi++)
			for (int hi = 0; hi < 3; hi++)
				for (int ni = 0; ni < 2; ni++) {
					uint32_t bt = bts[bi], hd = hds[hi], ng = ngs[ni];
					static float k[BTMAX * HDMAX], V[BTMAX * HDMAX];
					static float q[NGMAX * HDMAX], og[NGMAX * HDMAX];
					static float o1[NGMAX * HDMAX], sbuf[BTMAX];
					static int8_t kq[BTMAX * HDMAX], vq[BTMAX * HDMAX];
					uint8_t code[HDMAX], vcode[BTMAX];
					float mg[2 * NGMAX], m1[2 * NGMAX];

					for (uint32_t i = 0; i < bt * hd; i++) {
						k[i] = frand() * (i % 7 == 3 ? 5.0f : 1.0f);
						V[i] = frand();
					}
					for (uint32_t i = 0; i < ng * hd; i++)
						q[i] = frand() * 2.0f;
					for (uint32_t h = 0; h < ng; h++) {
						mg[2 * h] = m1[2 * h] = frand();
						mg[2 * h + 1] = m1[2 * h + 1] = 1.0f +
										frand() * 0.5f;
					}
					for (uint32_t i = 0; i < ng * hd; i++)
						og[i] = o1[i] = frand();
					tables[t]->kvq_chan8(kq, code, k, bt, hd);
					for (uint32_t r = 0; r < bt; r++)
						tables[t]->kvq_row8(vq + r * hd, vcode + r,
								    V + r * hd, hd);
					tables[t]->attn_block8(og, mg, q, ng, kq, code, vq, vcode,
							       bt, 0.125f, sbuf, hd);
					for (uint32_t h = 0; h < ng; h++)
						tables[t]->attn_block8(o1 + h * hd, m1 + 2 * h,
								       q + h * hd, 1, kq, code, vq,
								       vcode, bt, 0.125f, sbuf, hd);
					assert_memory_equal(og, o1, ng * hd * sizeof(float));
					assert_memory_equal(mg, m1, 2 * ng * sizeof(float));
				}
}

static void test_stage_slots(void **state)
{
	struct kvp_model_shape s = { .n_layers = 2,
				     .n_kv_heads = 1,
				     .head_dim = 8,
				     .dtype = KVP_DTYPE_INT8,
				     .block_tokens = 4 };
	struct kvp_kv_stage st;
	struct kvp_geom g;
	float *a, *b;

	(void)state;
	assert_int_equal(kvp_geom_init(&g, &s), 0);
	assert_int_equal(kvp_stage_init(&st, &g, 10, 2), 0);
	assert_int_equal(st.slot_floats, 2 * 1 * 4 * 8);
	assert_null(kvp_stage_get(&st, 3));
	a = kvp_stage_take(&st, 3);
	assert_non_null(a);
	assert_ptr_equal(kvp_stage_take(&st, 3), a); /* the block's own slot again */
	a[5] = 42;
	assert_int_equal(kvp_stage_copy(&st, 3, 7), 0); /* copy-on-write of a partial block */
	b = kvp_stage_get(&st, 7);
	assert_non_null(b);
	assert_ptr_not_equal(a, b);
	assert_true(b[5] == 42);
	assert_null(kvp_stage_take(&st, 8)); /* full */
	assert_int_equal(kvp_stage_copy(&st, 3, 8), -ENOSPC);
	assert_int_equal(kvp_stage_copy(&st, 9, 8), 0); /* nothing staged: nothing to copy */
	assert_null(kvp_stage_get(&st, 8));
	kvp_stage_drop(&st, 3);
	kvp_stage_drop(&st, 3); /* twice: a no-op */
	assert_null(kvp_stage_get(&st, 3));
	assert_int_equal(st.n_used, 1);
	assert_non_null(kvp_stage_take(&st, 8));
	kvp_stage_deinit(&st);
	kvp_stage_deinit(&st); /* a zeroed stage: no-op */
}

/* mean squared error of keys quantized per channel (kvq) and per token (a V-style row) */
static void test_per_channel_keys_beat_per_token(void **state)
{
	enum { BT = 16, HD = 64 };
	float k[BT * HD], back[BT * HD];
	int8_t q[BT * HD];
	uint8_t sc[HD];
	double e_chan = 0, e_tok = 0;

	(void)state;
	keys_with_outliers(k, BT, HD, 20.0f);
	kvp_kvq_ref_chan8(q, sc, k, BT, HD);
	kvp_kvq_ref_load_chan8(back, q, sc, BT, HD);
	for (int i = 0; i < BT * HD; i++)
		e_chan += (double)(back[i] - k[i]) * (back[i] - k[i]);
	for (int r = 0; r < BT; r++) {
		kvp_kvq_ref_row8(q + r * HD, sc + (r % HD), k + r * HD, HD);
		kvp_kvq_ref_load_row8(back + r * HD, q + r * HD, sc + (r % HD), 1, HD);
	}
	for (int i = 0; i < BT * HD; i++)
		e_tok += (double)(back[i] - k[i]) * (back[i] - k[i]);
	print_message("K int8 squared error: per channel %.3g, per token %.3g\n", e_chan, e_tok);
	assert_true(e_chan * 4 < e_tok);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_int8_equals_reference),
		cmocka_unit_test(test_int8_scale_edges),
		cmocka_unit_test(test_attn_int8_equals_dequantized),
		cmocka_unit_test(test_attn_block8_group),
		cmocka_unit_test(test_stage_slots),
		cmocka_unit_test(test_per_channel_keys_beat_per_token),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
