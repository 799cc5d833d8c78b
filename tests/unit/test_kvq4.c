/* SPDX-License-Identifier: MIT */
/*
 * test_kvq4.c - the int4 K/V type (KIVI's grouping and residual window), on every
 * kernel table this CPU runs:
 *  - quantize (K per channel over a block, V per token) and dequantize equal the
 *    scalar reference of compute/kernels/kvq4.c byte for byte and bit for bit; the
 *    round trip is within half a step of its group; zeros, constants, NaN, infinities;
 *  - attention over int4 blocks (compute/kv4.c) equals attention over f32 blocks that
 *    hold what each query must see - a block's dequantized values once it is out of
 *    the query's residual window, its staged f32 rows before - for windows of 0, 20
 *    and 32 tokens across block boundaries, prefill and decode rows, GQA;
 *  - the forward pass: a prompt prefilled in chunks gives the bits one call gives; a
 *    block that fills and leaves the window while two sequences share it is quantized
 *    once, and the one that copied a partial block on write reads its residual; a
 *    preempted sequence resumed from its sealed blocks holds the window again and
 *    follows the uninterrupted run;
 *  - per-channel keys beat per-token keys at 4 bits on keys with outlier channels.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/attn.h"
#include "compute/forward.h"
#include "compute/kernels/kernels.h"
#include "compute/kernels/kvq4.h"
#include "compute/kv4.h"
#include "compute/sample.h"
#include "shm/geom.h"
#include "tests/lib/fwdfix.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

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

/* Keys as models make them: channels with offsets, a few of them big. */
static void keys_like(float *k, uint32_t rows, uint32_t hd, float big)
{
	for (uint32_t t = 0; t < rows; t++)
		for (uint32_t d = 0; d < hd; d++)
			k[(size_t)t * hd + d] = frand() * (d % 17 == 3 ? big : 1.0f) +
						(d % 5 == 1 ? 2.5f : 0.0f);
}

#define RUN_MAX (KVP_INT4_K_RUN_BYTES(32, 64) + 64)

static void test_int4_equals_reference(void **state)
{
	static const uint32_t shapes[][2] = { { 16, 64 }, { 32, 64 }, { 16, 40 }, { 5, 64 } };

	(void)state;
	for (int t = 0; t < n_tables; t++) {
		const struct kvp_kernels *k = tables[t];

		for (int si = 0; si < 4; si++) {
			uint32_t bt = shapes[si][0], hd = shapes[si][1];
			size_t kb = KVP_INT4_K_RUN_BYTES(bt, hd), vb = KVP_INT4_V_RUN_BYTES(bt, hd);
			uint8_t r1[RUN_MAX], r2[RUN_MAX];
			float x[32 * 64], b1[32 * 64], b2[32 * 64], step[64], lo[64];

			keys_like(x, bt, hd, 12.0f);
			memset(r1, 0xa5, sizeof(r1));
			memset(r2, 0x5a, sizeof(r2));
			kvp_kvq4_ref_k(r1, x, bt, hd);
			k->kvq4_k(r2, x, bt, hd);
			assert_memory_equal(r1, r2, kb);
			kvp_kvq4_ref_load_k(b1, r1, bt, bt, hd);
			k->kvq4_load_k(b2, r1, bt, bt, hd);
			for (size_t i = 0; i < (size_t)bt * hd; i++)
				if (bits(b1[i]) != bits(b2[i]))
					fail_msg("%s K %ux%u elem %zu: %g vs %g", k->name, bt, hd,
						 i, b2[i], b1[i]);
			kvp_kvq4_unpack(r1 + KVP_INT4_SCALES_OFFSET(bt, hd), hd, step, lo);
			for (size_t i = 0; i < (size_t)bt * hd; i++)
				assert_true(fabsf(b1[i] - x[i]) <=
					    0.5f * step[i % hd] * 1.001f + 1e-6f);

			/* V: rows with offsets of their own */
			for (uint32_t r = 0; r < bt; r++)
				for (uint32_t d = 0; d < hd; d++)
					x[r * hd + d] = frand() * (1 + r) + (r % 3 ? 0.5f : -3.0f);
			kvp_kvq4_ref_v(r1, x, bt, hd);
			k->kvq4_v(r2, x, bt, hd);
			assert_memory_equal(r1, r2, vb);
			kvp_kvq4_ref_load_v(b1, r1, bt - 1, bt, hd); /* a partial read, too */
			k->kvq4_load_v(b2, r1, bt - 1, bt, hd);
			assert_memory_equal(b1, b2, (size_t)(bt - 1) * hd * 4);
			kvp_kvq4_unpack(r1 + KVP_INT4_SCALES_OFFSET(bt, hd), bt, step, lo);
			for (size_t i = 0; i < (size_t)(bt - 1) * hd; i++)
				assert_true(fabsf(b1[i] - x[i]) <=
					    0.5f * step[i / hd] * 1.001f + 1e-6f);
		}
	}
}

static void test_int4_edges(void **state)
{
	enum { BT = 16, HD = 64 };
	uint8_t run[KVP_INT4_K_RUN_BYTES(BT, HD)];
	float x[BT * HD], back[BT * HD];

	(void)state;
	memset(x, 0, sizeof(x));
	kvp_kvq4_ref_k(run, x, BT, HD);
	kvp_kvq4_ref_load_k(back, run, BT, BT, HD);
	for (int i = 0; i < BT * HD; i++)
		assert_true(back[i] == 0);
	/* a constant channel among varying ones comes back within half a dmin */
	keys_like(x, BT, HD, 4.0f);
	for (int t = 0; t < BT; t++)
		x[t * HD + 7] = 0.75f;
	kvp_kvq4_ref_k(run, x, BT, HD);
	kvp_kvq4_ref_load_k(back, run, BT, BT, HD);
	for (int t = 0; t < BT; t++)
		assert_true(fabsf(back[t * HD + 7] - 0.75f) < 0.1f);
	/* NaN and infinities: every value read back is finite */
	x[3] = NAN;
	x[HD + 5] = INFINITY;
	x[2 * HD + 9] = -INFINITY;
	for (int t = 0; t < BT; t++)
		x[t * HD + 11] = NAN;
	kvp_kvq4_ref_k(run, x, BT, HD);
	kvp_kvq4_ref_load_k(back, run, BT, BT, HD);
	for (int i = 0; i < BT * HD; i++)
		assert_true(isfinite(back[i]));
	kvp_kvq4_ref_v(run, x, BT, HD);
	kvp_kvq4_ref_load_v(back, run, BT, BT, HD);
	for (int i = 0; i < BT * HD; i++)
		assert_true(isfinite(back[i]));
}

/* 4-bit keys with outlier channels and offsets: per channel (KIVI) against per token */
static void test_per_channel_keys_beat_per_token(void **state)
{
	enum { BT = 16, HD = 64 };
	uint8_t run[KVP_INT4_K_RUN_BYTES(BT, HD)];
	float k[BT * HD], back[BT * HD];
	double e_chan = 0, e_tok = 0;

	(void)state;
	keys_like(k, BT, HD, 20.0f);
	kvp_kvq4_ref_k(run, k, BT, HD);
	kvp_kvq4_ref_load_k(back, run, BT, BT, HD);
	for (int i = 0; i < BT * HD; i++)
		e_chan += (double)(back[i] - k[i]) * (back[i] - k[i]);
	/* the V format, a group per token, fits in a K run (fewer groups when BT < HD) */
	kvp_kvq4_ref_v(run, k, BT, HD);
	kvp_kvq4_ref_load_v(back, run, BT, BT, HD);
	for (int i = 0; i < BT * HD; i++)
		e_tok += (double)(back[i] - k[i]) * (back[i] - k[i]);
	print_message("K int4 squared error: per channel %.3g, per token %.3g\n", e_chan, e_tok);
	assert_true(e_chan * 4 < e_tok);
}

/*
 * An int4 view written through kv4.c as the forward pass writes it, and the rows it was
 * given in f32, to build what a query must see.
 */
struct twin {
	struct kvp_kv_view q4, f32;
	struct kvp_kv_stage st;
	float *k, *v; /* [pos][layer][kv head][hd] */
};

static float *twin_row(const struct twin *w, float *base, uint32_t pos, uint32_t l, uint32_t h)
{
	const struct kvp_model_shape *s = &w->q4.geom.shape;

	return base + (((size_t)pos * s->n_layers + l) * s->n_kv_heads + h) * s->head_dim;
}

/* One "call" writing positions [pos0, end): slots, rows, every layer sealed. */
static void twin_call(struct twin *w, const struct kvp_kernels *k, const uint32_t *table,
		      uint32_t pos0, uint32_t end)
{
	const struct kvp_model_shape *s = &w->q4.geom.shape;
	size_t kvd = (size_t)s->n_kv_heads * s->head_dim;

	for (uint32_t pos = pos0; pos < end; pos++) {
		assert_non_null(kvp_stage_take(&w->st, table[pos / s->block_tokens]));
		for (uint32_t l = 0; l < s->n_layers; l++) {
			for (size_t e = 0; e < kvd; e++) {
				twin_row(w, w->k, pos, l, 0)[e] = frand() * (e % 13 == 4 ? 5 : 1) +
								  (e % 7 == 2 ? 1.5f : 0);
				twin_row(w, w->v, pos, l, 0)[e] = frand();
			}
			kvp_kv4_store(&w->q4, table, l, pos, twin_row(w, w->k, pos, l, 0),
				      twin_row(w, w->v, pos, l, 0));
		}
	}
	for (uint32_t l = 0; l < s->n_layers; l++)
		kvp_kv4_seal(k, &w->q4, table, pos0, end - pos0, l);
}

/* The f32 twin as the query at @pos sees it. */
static void twin_view_for(struct twin *w, const uint32_t *table, uint32_t pos)
{
	const struct kvp_model_shape *s = &w->q4.geom.shape;
	uint32_t bt = s->block_tokens, hd = s->head_dim;

	for (uint32_t b = 0; b <= pos / bt; b++)
		for (uint32_t l = 0; l < s->n_layers; l++)
			for (uint32_t h = 0; h < s->n_kv_heads; h++) {
				float *dk = (float *)kvp_kv_run(&w->f32, table[b], l, 0, h);
				float *dv = (float *)kvp_kv_run(&w->f32, table[b], l, 1, h);

				if ((b + 1) * bt + w->st.window <= pos + 1) {
					kvp_kvq4_ref_load_k(dk,
							    kvp_kv_run(&w->q4, table[b], l, 0, h),
							    bt, bt, hd);
					kvp_kvq4_ref_load_v(dv,
							    kvp_kv_run(&w->q4, table[b], l, 1, h),
							    bt, bt, hd);
					continue;
				}
				for (uint32_t r = 0; r < bt && b * bt + r <= pos; r++) {
					memcpy(dk + r * hd, twin_row(w, w->k, b * bt + r, l, h),
					       hd * 4);
					memcpy(dv + r * hd, twin_row(w, w->v, b * bt + r, l, h),
					       hd * 4);
				}
			}
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

static void test_attn_int4_equals_dequantized(void **state)
{
	/*
	 * A first call writes positions 0 .. 20, a second 21 .. 69 (blocks 1 .. 4 of 16, in
	 * a scrambled table); each row of the second call's attention equals, bit for bit,
	 * the same row alone over the f32 twin holding what it must see; then the blocks
	 * still in the window are the ones that hold a slot, and a decode row re-read
	 * after the call equals its row of the call.
	 */
	enum { L = 2, HKV = 2, NH = 4, BT = 16, HD = 64, NB = 5, NTOK = 70, P0 = 21 };
	static const uint32_t windows[] = { 0, 20, 32 };
	const uint32_t table[NB] = { 3, 0, 4, 1, 2 };
	struct kvp_model_shape s = { .n_layers = L,
				     .n_kv_heads = HKV,
				     .head_dim = HD,
				     .dtype = KVP_DTYPE_INT4,
				     .block_tokens = BT };

	(void)state;
	for (int t = 0; t < n_tables; t++) {
		for (int wi = 0; wi < 3; wi++) {
			uint32_t n = NTOK - P0, qd = NH * HD, win = windows[wi];
			float *q = malloc((size_t)n * qd * 4), *o4 = malloc((size_t)n * qd * 4);
			float *o32 = malloc((size_t)qd * 4);
			struct kvp_attn_scratch sc;
			struct twin w;

			s.dtype = KVP_DTYPE_INT4;
			assert_int_equal(kvp_geom_init(&w.q4.geom, &s), 0);
			s.dtype = KVP_DTYPE_F32;
			assert_int_equal(kvp_geom_init(&w.f32.geom, &s), 0);
			w.q4.n_blocks = w.f32.n_blocks = NB;
			w.q4.base = calloc(NB, w.q4.geom.block_stride);
			w.f32.base = calloc(NB, w.f32.geom.block_stride);
			w.k = malloc((size_t)NTOK * L * HKV * HD * 4);
			w.v = malloc((size_t)NTOK * L * HKV * HD * 4);
			assert_true(w.q4.base && w.f32.base && w.k && w.v && q && o4 && o32);
			assert_int_equal(kvp_stage_init(&w.st, &w.q4.geom, NB, NB), 0);
			assert_int_equal(w.st.window, KVP_KV_WINDOW_DEFAULT);
			w.st.window = win;
			w.q4.stage = &w.st;
			w.f32.stage = NULL;
			scratch_init(&sc, n, NH, BT, HD);
			for (size_t i = 0; i < (size_t)n * qd; i++)
				q[i] = frand();

			twin_call(&w, tables[t], table, 0, P0);
			kvp_kv4_release(&w.q4, table, 0, P0);
			twin_call(&w, tables[t], table, P0, NTOK);
			for (uint32_t layer = 0; layer < L; layer++) {
				kvp_attn(o4, q, &w.q4, table, layer, P0, n, NH, 0, HKV, tables[t],
					 &sc);
				for (uint32_t i = 0; i < n; i++) {
					twin_view_for(&w, table, P0 + i);
					kvp_attn(o32, q + (size_t)i * qd, &w.f32, table, layer,
						 P0 + i, 1, NH, 0, HKV, tables[t], &sc);
					for (uint32_t e = 0; e < qd; e++)
						if (bits(o32[e]) != bits(o4[(size_t)i * qd + e]))
							fail_msg(
								"%s window %u layer %u row %u elem "
								"%u: %g vs %g",
								tables[t]->name, win, layer, P0 + i,
								e, o4[(size_t)i * qd + e], o32[e]);
				}
			}
			kvp_kv4_release(&w.q4, table, P0, NTOK - P0);
			for (uint32_t b = 0; b < NB; b++)
				assert_true(!kvp_stage_get(&w.st, table[b]) ==
					    ((b + 1) * BT + win <= NTOK));
			for (uint32_t layer = 0; layer < L; layer++) {
				float *o = malloc((size_t)n * qd * 4);

				assert_non_null(o);
				kvp_attn(o, q, &w.q4, table, layer, P0, n, NH, 0, HKV, tables[t],
					 &sc);
				kvp_attn(o32, q + (size_t)(n - 1) * qd, &w.q4, table, layer,
					 NTOK - 1, 1, NH, 0, HKV, tables[t], &sc);
				assert_memory_equal(o32, o + (size_t)(n - 1) * qd, qd * 4);
				free(o);
			}
			scratch_free(&sc);
			kvp_stage_deinit(&w.st);
			free(w.q4.base);
			free(w.f32.base);
			free(w.k);
			free(w.v);
			free(q);
			free(o4);
			free(o32);
		}
	}
}

static struct kvp_model *gqa_model(void)
{
	struct kvp_mkmodel_opts o;

	assert_int_equal(kvp_mkmodel_preset(&o, "tiny"), 0);
	o.n_embd = 128;
	o.n_heads = 4;
	o.n_kv_heads = 2;
	o.n_layers = 2;
	o.n_ff = 256;
	o.n_ctx = 512;
	return ffix_model_open(&o);
}

/* Prefill @toks[pos0..pos0 + n) in chunks of @chunk; the last position's logits to @lg. */
static void prefill(struct kvp_fwd *f, struct ffix_pool *p, const uint32_t *table, uint32_t nt,
		    uint32_t pos0, const int32_t *toks, uint32_t n, uint32_t chunk, float *lg)
{
	for (uint32_t pos = pos0; pos < pos0 + n; pos += chunk) {
		uint32_t c = pos0 + n - pos < chunk ? pos0 + n - pos : chunk;

		assert_int_equal(kvp_fwd_prefill(f, &p->v, table, nt, pos, toks + pos, c, lg, 0),
				 0);
	}
}

static void decode1(struct kvp_fwd *f, struct ffix_pool *p, const uint32_t *table, uint32_t nt,
		    uint32_t pos, int32_t tok, float *lg)
{
	assert_int_equal(kvp_fwd_decode(f, &p->v,
					&(struct kvp_fwd_seq){ .table = table,
							       .n_table = nt,
							       .pos = pos,
							       .token = tok },
					1, lg),
			 0);
}

static void test_chunked_prefill_equals_one_call(void **state)
{
	/*
	 * One call, chunks of 7 and of 16 (window 20: blocks leave it mid-chunk): the same
	 * blocks hold a slot at the end, the same greedy tokens, logits within 1e-3 (the
	 * chunks take other matmul paths - decode-sized and prefill tiles - so f32 sums
	 * round differently, 2e-7 here; a query that read a block of its window quantized,
	 * or one out of it at full precision, moves them by the int4 error, ~1e-2).
	 */
	enum { BT = 16, NP = 100, NGEN = 12, NB = (NP + NGEN + BT - 1) / BT, WIN = 20 };
	static const uint32_t chunks[] = { NP, 7, 16 };
	struct kvp_model *m = gqa_model();
	uint32_t V = kvp_model_hparams(m)->n_vocab, table[NB];
	float *lg = malloc(V * 4), *ref = malloc((size_t)(NGEN + 1) * V * 4);
	int32_t toks[NP + NGEN];
	double worst = 0;

	(void)state;
	assert_true(lg && ref);
	ffix_prompt(toks, NP, 3);
	for (uint32_t i = 0; i < NB; i++)
		table[i] = i;
	for (int c = 0; c < 3; c++) {
		struct kvp_fwd *f = ffix_fwd_new(m, NULL, NP, 1);
		struct ffix_pool p;
		uint32_t held = 0;

		ffix_pool_init(&p, m, KVP_DTYPE_INT4, BT, NB);
		p.stage.window = WIN;
		ffix_pool_open(&p, table, NB);
		prefill(f, &p, table, NB, 0, toks, NP, chunks[c], lg);
		for (uint32_t s = 0; s <= NGEN; s++) {
			if (s)
				decode1(f, &p, table, NB, NP + s - 1, toks[NP + s - 1], lg);
			if (!c) {
				memcpy(ref + (size_t)s * V, lg, V * 4);
			} else {
				double e = ffix_rel_err(lg, ref + (size_t)s * V, V);

				worst = isnan(e) || e > worst ? e : worst;
			}
			if (s < NGEN) {
				if (!c)
					toks[NP + s] = kvp_sample_greedy(lg, V);
				else
					assert_int_equal(toks[NP + s], kvp_sample_greedy(lg, V));
			}
		}
		/* the blocks in the window hold a slot; the others are sealed */
		for (uint32_t b = 0; b < NB; b++) {
			int want = (b + 1) * BT + WIN > NP + NGEN;

			assert_int_equal(kvp_stage_get(&p.stage, b) != NULL, want);
			held += want;
		}
		assert_int_equal(p.stage.n_used, held);
		ffix_pool_deinit(&p);
		kvp_fwd_free(f);
	}
	print_message("chunked against one call: max relative logit error %.3g\n", worst);
	assert_true(worst < 1e-3);
	free(lg);
	free(ref);
	ffix_model_close(m);
}

/* kvq4_k of the best table, counting the runs it seals per block */
static const struct kvp_kernels *counted;
static const uint8_t *count_base;
static size_t count_stride;
static uint32_t count_of[16];

static void count_k(uint8_t *restrict run, const float *restrict x, uint32_t bt, uint32_t hd)
{
	count_of[(size_t)(run - count_base) / count_stride]++;
	counted->kvq4_k(run, x, bt, hd);
}

static void test_shared_block_sealed_once(void **state)
{
	/*
	 * a (40 tokens, window 16) forks into b: b shares blocks 0 and 1 (1 full but in
	 * the window) and copies partial block 2 on write, into block 9, with its residual.
	 * Both decode in the same steps: the step that takes block 1 out of the window
	 * quantizes it once, and b's logits are a's, bit for bit, every step.
	 */
	enum { BT = 16, NP = 40, NGEN = 14, NBLK = 12, WIN = 16, NT = 4 };
	struct kvp_model *m = gqa_model();
	const struct kvp_model_hparams *hp = kvp_model_hparams(m);
	uint32_t V = hp->n_vocab, ta[NT] = { 0, 1, 2, 3 }, tb[NT] = { 0, 1, 9, 10 }, all[NBLK];
	float *lg = malloc((size_t)2 * V * 4);
	struct kvp_kernels kt;
	struct kvp_fwd *f;
	struct ffix_pool p;
	int32_t toks[NP + NGEN];

	(void)state;
	assert_non_null(lg);
	assert_int_equal(kvp_kernels_best(&counted), 0);
	kt = *counted;
	kt.kvq4_k = count_k;
	f = ffix_fwd_new(m, &kt, NP, 2);
	ffix_pool_init(&p, m, KVP_DTYPE_INT4, BT, NBLK);
	p.stage.window = WIN;
	for (uint32_t i = 0; i < NBLK; i++)
		all[i] = i;
	ffix_pool_open(&p, all, NBLK);
	count_base = p.v.base;
	count_stride = p.v.geom.block_stride;
	ffix_prompt(toks, NP, 9);
	prefill(f, &p, ta, NT, 0, toks, NP, NP, lg);
	assert_non_null(kvp_stage_get(&p.stage, 1)); /* full, in the window */
	assert_null(kvp_stage_get(&p.stage, 0));
	/* the fork: copy-on-write of the partial block, its residual with it */
	memcpy(kvp_kv_block(&p.v, 9), kvp_kv_block(&p.v, 2), p.v.geom.block_bytes);
	assert_int_equal(kvp_stage_copy(&p.stage, 2, 9), 0);
	memset(count_of, 0, sizeof(count_of));
	for (uint32_t s = 0; s < NGEN; s++) {
		int32_t t = kvp_sample_greedy(lg, V);
		struct kvp_fwd_seq seqs[2] = {
			{ .table = ta, .n_table = NT, .pos = NP + s, .token = t },
			{ .table = tb, .n_table = NT, .pos = NP + s, .token = t },
		};

		assert_int_equal(kvp_fwd_decode(f, &p.v, seqs, 2, lg), 0);
		assert_memory_equal(lg, lg + V, V * 4);
	}
	/* block 1 left the window at 48 tokens, once for both; 0 was sealed before */
	assert_int_equal(count_of[1], hp->n_layers * hp->n_kv_heads);
	assert_int_equal(count_of[0], 0);
	assert_null(kvp_stage_get(&p.stage, 1));
	ffix_pool_deinit(&p);
	kvp_fwd_free(f);
	free(lg);
	ffix_model_close(m);
}

static void test_preempt_keeps_window(void **state)
{
	/*
	 * a runs 60 prompt tokens and 30 decoded; preempted at 70, it keeps what the
	 * daemon would have published (the sealed blocks 0 .. 2), its other blocks freed
	 * with their slots; resumed, it recomputes 48 .. 69 into new blocks, which hold the
	 * window again (f32, slots), and then follows the uninterrupted run closely.
	 */
	enum { BT = 16, NP = 60, NGEN = 30, CUT = 70, WIN = 20, NBLK = 16, NT = 6 };
	struct kvp_model *m = gqa_model();
	uint32_t V = kvp_model_hparams(m)->n_vocab, all[NBLK];
	uint32_t ta[NT] = { 0, 1, 2, 3, 4, 5 }, tb[NT] = { 0, 1, 2, 7, 8, 9 };
	float *lg = malloc(V * 4), *ref = malloc((size_t)NGEN * V * 4);
	struct kvp_fwd *f = ffix_fwd_new(m, NULL, 64, 1);
	uint32_t kept = (CUT - WIN) / BT;
	struct ffix_pool p;
	int32_t toks[NP + NGEN];
	double worst = 0;

	(void)state;
	assert_true(lg && ref);
	ffix_pool_init(&p, m, KVP_DTYPE_INT4, BT, NBLK);
	p.stage.window = WIN;
	for (uint32_t i = 0; i < NBLK; i++)
		all[i] = i;
	ffix_pool_open(&p, all, NBLK);
	ffix_prompt(toks, NP, 21);
	prefill(f, &p, ta, NT, 0, toks, NP, 64, lg);
	for (uint32_t s = 0; s < NGEN; s++) {
		toks[NP + s] = kvp_sample_greedy(lg, V);
		decode1(f, &p, ta, NT, NP + s, toks[NP + s], lg);
		memcpy(ref + (size_t)s * V, lg, V * 4);
	}
	/* preempted at CUT: its unsealed blocks freed (the pool drops their slots) */
	for (uint32_t b = kept; b < NT; b++)
		kvp_stage_drop(&p.stage, ta[b]);
	for (uint32_t b = 0; b < kept; b++)
		assert_null(kvp_stage_get(&p.stage, tb[b]));
	prefill(f, &p, tb, NT, kept * BT, toks, CUT - kept * BT, 64, lg);
	for (uint32_t b = kept; b * BT < CUT; b++)
		assert_non_null(kvp_stage_get(&p.stage, tb[b]));
	/* the logits of position CUT - 1, then of each decoded one */
	worst = ffix_rel_err(lg, ref + (size_t)(CUT - 1 - NP) * V, V);
	for (uint32_t s = CUT - NP; s < NGEN; s++) {
		double e;

		decode1(f, &p, tb, NT, NP + s, toks[NP + s], lg);
		e = ffix_rel_err(lg, ref + (size_t)s * V, V);
		if (isnan(e) || e > worst)
			worst = e;
	}
	print_message("resumed after preemption: max relative logit error %.3g\n", worst);
	assert_true(worst < 0.05);
	ffix_pool_deinit(&p);
	kvp_fwd_free(f);
	free(lg);
	free(ref);
	ffix_model_close(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_int4_equals_reference),
		cmocka_unit_test(test_int4_edges),
		cmocka_unit_test(test_per_channel_keys_beat_per_token),
		cmocka_unit_test(test_attn_int4_equals_dequantized),
		cmocka_unit_test(test_chunked_prefill_equals_one_call),
		cmocka_unit_test(test_shared_block_sealed_once),
		cmocka_unit_test(test_preempt_keeps_window),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
