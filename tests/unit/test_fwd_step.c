/* SPDX-License-Identifier: MIT */
/*
 * test_fwd_step.c - the mixed forward step (kvp_fwd_step()): a decode batch and prefill
 * chunks in one call give the logits and the K/V of the same rows run as separate
 * kvp_fwd_prefill() and kvp_fwd_decode() calls, on every kernel table this CPU runs and
 * for float, bf16 and integer weight types; bad steps write nothing.
 *
 * Two copies ("worlds") of the same sequences live in one pool (tests/lib/fwdfix.h: NaN
 * filled, the blocks of no table poisoned under ASan).  Both get the same history
 * through the same calls, so their blocks are byte-identical before the step under test;
 * then world 0 runs the rows as separate calls and world 1 as one mixed step.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/forward.h"
#include "compute/kernels/kernels.h"
#include "compute/mkmodel.h"
#include "compute/model.h"
#include "compute/sample.h"
#include "shm/geom.h"
#include "tests/lib/fwdfix.h"

/* Sequences of each world: 3 decoding, a prefill chunk after a cached prefix, a fresh one */
#define N_DEC 3
#define N_SEQ (N_DEC + 2)
#define BT 4
#define NB 16 /* blocks per sequence: 64 positions */
#define CHUNK_CTX 10
#define CHUNK_N 20
#define FRESH_N 7
#define AFTER 4 /* decode steps after the mixed one, on the K/V it wrote */

static struct kvp_model *make_model(uint32_t type)
{
	struct kvp_mkmodel_opts o;

	assert_int_equal(kvp_mkmodel_preset(&o, "tiny"), 0);
	o.n_embd = 256; /* K-quant rows are 256 long */
	o.n_heads = 4;
	o.n_kv_heads = 2;
	o.n_layers = 2;
	o.n_ff = 512;
	o.type = type;
	return ffix_model_open(&o);
}

/* Largest |a - b| over the floats of @n bytes relative to max |b|; equal bytes count 0. */
static double kv_rel_err(const uint8_t *a, const uint8_t *b, size_t n)
{
	const float *x = (const float *)a, *y = (const float *)b;
	double mx = 0, d = 0;

	for (size_t i = 0; i < n / sizeof(float); i++)
		if (isfinite(y[i]) && fabs(y[i]) > mx)
			mx = fabs(y[i]);
	for (size_t i = 0; i < n / sizeof(float); i++) {
		if (!memcmp(&x[i], &y[i], sizeof(float)))
			continue;
		if (!isfinite(x[i]) || !isfinite(y[i]))
			return INFINITY; /* a position written in one world only */
		d = fabs((double)x[i] - y[i]) > d ? fabs((double)x[i] - y[i]) : d;
	}
	return mx ? d / mx : d;
}

struct world {
	uint32_t table[N_SEQ][NB];
	uint32_t len[N_SEQ]; /* positions in the blocks */
	int32_t next[N_SEQ]; /* decoding sequences: the token to decode */
};

/*
 * Mixed step vs separate calls for one model and kernel table.  *@lg_err: largest
 * relative logit error of the step and the AFTER decode steps; *@kv_err: of the K/V;
 * *@same: the greedy tokens of both worlds agree.
 */
static void mixed_vs_separate(struct kvp_model *m, const struct kvp_kernels *k, double *lg_err,
			      double *kv_err, int *same)
{
	uint32_t V = kvp_model_hparams(m)->n_vocab;
	struct kvp_fwd *f = ffix_fwd_new(m, k, 32, 8);
	struct world w[2];
	struct ffix_pool p;
	int32_t toks[N_SEQ][NB * BT];
	float *l1 = malloc((size_t)N_SEQ * V * sizeof(float));
	float *ls = malloc((size_t)N_SEQ * V * sizeof(float));
	float *lm = malloc((size_t)N_SEQ * V * sizeof(float));
	struct kvp_fwd_part parts[N_SEQ];
	struct kvp_fwd_seq seq[N_SEQ];
	/* the order of the step's parts: prefill chunks between and after decode rows */
	static const uint32_t order[N_SEQ] = { 0, N_DEC, 1, 2, N_DEC + 1 };

	assert_non_null(l1);
	assert_non_null(ls);
	assert_non_null(lm);
	ffix_pool_init(&p, m, KVP_DTYPE_F32, BT, 2 * N_SEQ * NB);
	*lg_err = *kv_err = 0;
	*same = 1;
	/* history: the same calls in both worlds; blocks interleaved across all sequences */
	for (uint32_t x = 0; x < 2; x++)
		for (uint32_t s = 0; s < N_SEQ; s++) {
			for (uint32_t i = 0; i < NB; i++)
				w[x].table[s][i] = (x * N_SEQ + s) + i * 2 * N_SEQ;
			ffix_pool_open(&p, w[x].table[s], NB);
			ffix_prompt(toks[s], NB * BT, 31 + s);
			w[x].len[s] = s < N_DEC ? 5 + 6 * s : s == N_DEC ? CHUNK_CTX : 0;
			if (!w[x].len[s])
				continue;
			assert_int_equal(kvp_fwd_prefill(f, &p.v, w[x].table[s], NB, 0, toks[s],
							 w[x].len[s], l1, 0),
					 0);
			w[x].next[s] = kvp_sample_greedy(l1, V);
		}
	for (uint32_t s = 0; s < N_DEC; s++)
		assert_int_equal(w[0].next[s], w[1].next[s]);

	/* world 0: separate calls; the decode batch's logits to rows 0.., the chunks' after */
	for (uint32_t s = 0; s < N_DEC; s++)
		seq[s] = (struct kvp_fwd_seq){ .table = w[0].table[s],
					       .n_table = NB,
					       .pos = w[0].len[s],
					       .token = w[0].next[s] };
	assert_int_equal(kvp_fwd_decode(f, &p.v, seq, N_DEC, ls), 0);
	assert_int_equal(kvp_fwd_prefill(f, &p.v, w[0].table[N_DEC], NB, CHUNK_CTX,
					 toks[N_DEC] + CHUNK_CTX, CHUNK_N, ls + (size_t)N_DEC * V,
					 0),
			 0);
	assert_int_equal(kvp_fwd_prefill(f, &p.v, w[0].table[N_DEC + 1], NB, 0, toks[N_DEC + 1],
					 FRESH_N, ls + (size_t)(N_DEC + 1) * V, 0),
			 0);
	/* world 1: one step */
	for (uint32_t i = 0; i < N_SEQ; i++) {
		uint32_t s = order[i];

		parts[i] = (struct kvp_fwd_part){
			.table = w[1].table[s],
			.n_table = NB,
			.pos0 = w[1].len[s],
			.tokens = s < N_DEC  ? &w[1].next[s] :
				  s == N_DEC ? toks[s] + CHUNK_CTX :
					       toks[s],
			.n = s < N_DEC	? 1 :
			     s == N_DEC ? CHUNK_N :
					  FRESH_N,
		};
	}
	assert_int_equal(kvp_fwd_step(f, &p.v, parts, N_SEQ, lm), 0);
	for (uint32_t i = 0; i < N_SEQ; i++) {
		uint32_t s = order[i];
		const float *a = lm + (size_t)i * V, *b = ls + (size_t)s * V;
		double e = ffix_rel_err(a, b, V);

		*lg_err = e > *lg_err ? e : *lg_err;
		*same &= kvp_sample_greedy(a, V) == kvp_sample_greedy(b, V);
	}
	for (uint32_t x = 0; x < 2; x++)
		for (uint32_t s = 0; s < N_SEQ; s++) {
			w[x].len[s] += s < N_DEC ? 1 : s == N_DEC ? CHUNK_N : FRESH_N;
			w[x].next[s] = kvp_sample_greedy(ls + (size_t)s * V, V);
		}
	/* the K/V each world wrote (and every other position) */
	for (uint32_t s = 0; s < N_SEQ; s++)
		for (uint32_t i = 0; i < NB; i++) {
			double e = kv_rel_err(kvp_kv_block(&p.v, w[1].table[s][i]),
					      kvp_kv_block(&p.v, w[0].table[s][i]),
					      p.v.geom.block_bytes);

			*kv_err = e > *kv_err ? e : *kv_err;
		}
	/* decode on after the step, both worlds alike: their K/V must serve the same way */
	for (uint32_t t = 0; t < AFTER; t++) {
		for (uint32_t x = 0; x < 2; x++) {
			for (uint32_t s = 0; s < N_SEQ; s++)
				seq[s] = (struct kvp_fwd_seq){ .table = w[x].table[s],
							       .n_table = NB,
							       .pos = w[x].len[s],
							       .token = w[x].next[s] };
			assert_int_equal(kvp_fwd_decode(f, &p.v, seq, N_SEQ, x ? lm : ls), 0);
		}
		for (uint32_t s = 0; s < N_SEQ; s++) {
			const float *a = lm + (size_t)s * V, *b = ls + (size_t)s * V;
			double e = ffix_rel_err(a, b, V);

			*lg_err = e > *lg_err ? e : *lg_err;
			*same &= kvp_sample_greedy(a, V) == kvp_sample_greedy(b, V);
			for (uint32_t x = 0; x < 2; x++) {
				w[x].len[s]++;
				w[x].next[s] = kvp_sample_greedy(ls + (size_t)s * V, V);
			}
		}
	}
	ffix_pool_deinit(&p);
	kvp_fwd_free(f);
	free(l1);
	free(ls);
	free(lm);
}

static void test_mixed_step_equals_separate_calls(void **state)
{
	/*
	 * Bounds: f32 weights differ only by summation order (the step's 30 rows take
	 * sgemm where the 3-row decode batch and the 7-token chunk took the GEMV kernel;
	 * measured 3-8e-7), held to the bound test_forward's batch test uses.  Every other
	 * type runs our matmul kernels, which compute each row alone from activations
	 * converted row by row: the step must be bit-equal to the separate calls.  Greedy
	 * tokens must agree in every case.
	 */
	static const struct {
		uint32_t type;
		double bound;
	} cases[] = {
		{ KVP_GGML_F32, 1e-4 },	   { KVP_GGML_F16, 0 },	 { KVP_GGML_BF16, 0 },
		{ KVP_GGML_Q8_0, 0 },	   { KVP_GGML_Q4_0, 0 }, { KVP_GGML_Q4_K, 0 },
		{ KVP_MKMODEL_Q4_K_M, 0 },
	};

	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		struct kvp_model *m = make_model(cases[c].type);
		int tables = 0;

		for (uint32_t isa = 0; isa < KVP_ISA__COUNT; isa++) {
			const struct kvp_kernels *k = kvp_kernels_for(isa);
			double lg, kv;
			int same;

			if (!k)
				continue;
			tables++;
			mixed_vs_separate(m, k, &lg, &kv, &same);
			print_message("%-6s %-6s mixed step vs separate calls: logits %.1e, K/V "
				      "%.1e%s\n",
				      kvp_model_info(m)->file_type, k->name, lg, kv,
				      same ? "" : ", greedy tokens differ");
			if (!(lg <= cases[c].bound) || !(kv <= cases[c].bound) || !same)
				fail_msg(
					"%s on %s: logit error %g, K/V error %g (bound %g), greedy "
					"tokens %s",
					kvp_model_info(m)->file_type, k->name, lg, kv,
					cases[c].bound, same ? "agree" : "differ");
		}
		assert_true(tables >= 1); /* scalar runs everywhere */
		ffix_model_close(m);
	}
}

static void test_step_rejects_bad_arguments(void **state)
{
	/*
	 * A step with one bad part (token, block id, short table, no rows, too many rows or
	 * parts, NULL tokens) is refused whole: -EINVAL and no block written, not even those
	 * of the good parts before it.
	 */
	struct kvp_model *m = make_model(KVP_GGML_F32);
	uint32_t V = kvp_model_hparams(m)->n_vocab, ta[4] = { 0, 1, 2, 3 }, tb[4] = { 4, 5, 6, 7 },
		 bad[4] = { 4, 5, 99, 7 };
	int32_t toks[12] = { 1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 }, badtok[2] = { 1, 259 };
	float *lg = malloc(4 * V * sizeof(float));
	struct kvp_fwd *f = ffix_fwd_new(m, NULL, 8, 2); /* rows: at most 8 + 2 */
	struct ffix_pool p;
	size_t bb;
	uint8_t *copy;
	struct kvp_fwd_part good = { .table = ta, .n_table = 4, .pos0 = 0, .tokens = toks, .n = 2 };
	struct kvp_fwd_part cases[][2] = {
		{ good, { tb, 4, 0, badtok, 2, 0 } },
		{ good, { bad, 4, 0, toks, 8, 0 } },
		{ good, { tb, 2, 0, toks, 8, 0 } }, /* 8 positions need 4 blocks of 2 */
		{ good, { tb, 4, 0, toks, 0, 0 } },
		{ good, { tb, 4, 0, NULL, 2, 0 } },
		{ { ta, 4, 0, toks, 4, 0 }, { tb, 4, 0, toks, 7, 0 } }, /* 11 rows > 8 + 2 */
	};

	assert_non_null(lg);
	ffix_pool_init(&p, m, KVP_DTYPE_F32, 2, 8);
	bb = p.v.geom.block_bytes;
	ffix_pool_open(&p, ta, 4);
	ffix_pool_open(&p, tb, 4);
	copy = malloc(8 * bb);
	assert_non_null(copy);
	for (uint32_t i = 0; i < 8; i++)
		memcpy(copy + i * bb, kvp_kv_block(&p.v, i), bb);
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
		assert_int_equal(kvp_fwd_step(f, &p.v, cases[c], 2, lg), -EINVAL);
	assert_int_equal(kvp_fwd_step(f, &p.v, cases[0], 0, lg), -EINVAL);
	struct kvp_fwd_part three[3] = { good, good, good };
	assert_int_equal(kvp_fwd_step(f, &p.v, three, 3, lg), -EINVAL); /* > max_batch parts */
	assert_int_equal(kvp_fwd_step(f, &p.v, &good, 1, NULL), -EINVAL);
	for (uint32_t i = 0; i < 8; i++)
		assert_memory_equal(copy + i * bb, kvp_kv_block(&p.v, i), bb);
	/* and the largest step that fits: 8 + 2 rows in two parts */
	struct kvp_fwd_part full[2] = { { ta, 4, 0, toks, 5, 0 }, { tb, 4, 0, toks + 2, 5, 0 } };
	assert_int_equal(kvp_fwd_step(f, &p.v, full, 2, lg), 0);
	for (uint32_t i = 0; i < 2 * V; i++)
		assert_true(isfinite(lg[i]));
	free(copy);
	ffix_pool_deinit(&p);
	kvp_fwd_free(f);
	free(lg);
	ffix_model_close(m);
}

/*
 * Speculative verification: one sequence's last token and K drafts as 1 + K rows of one
 * step with every row's logits (n_logits), beside another sequence's decode row, against
 * the same K + 1 positions decoded one at a time.  Per row the logits and the K/V must
 * be bit-equal (float K/V, batch-invariant kernels), so greedy decoding with drafts picks
 * what it would without; f32 weights are not row-exact (kvp_fwd_rows_exact()).
 */
#define SPEC_K 6
#define SPEC_CTX 13

static void test_verify_rows_equal_decodes(void **state)
{
	static const uint32_t types[] = { KVP_GGML_F32,	 KVP_GGML_F16,	KVP_GGML_BF16,
					  KVP_GGML_Q8_0, KVP_GGML_Q4_K, KVP_MKMODEL_Q4_K_M };
	static const uint32_t dtypes[] = { KVP_DTYPE_F32, KVP_DTYPE_F16, KVP_DTYPE_BF16 };

	(void)state;
	for (size_t c = 0; c < sizeof(types) / sizeof(types[0]); c++)
		for (size_t dt = 0; dt < sizeof(dtypes) / sizeof(dtypes[0]); dt++) {
			struct kvp_model *m = make_model(types[c]);
			uint32_t V = kvp_model_hparams(m)->n_vocab;
			struct kvp_fwd *f = ffix_fwd_new(m, NULL, 32, 8);
			struct ffix_pool p;
			uint32_t tab[2][2][NB]; /* [world][sequence] */
			int32_t toks[2][NB * BT];
			float *one = malloc((size_t)(SPEC_K + 2) * V * sizeof(float));
			float *all = malloc((size_t)(SPEC_K + 2) * V * sizeof(float));

			assert_non_null(one);
			assert_non_null(all);
			ffix_pool_init(&p, m, dtypes[dt], BT, 4 * NB);
			for (uint32_t x = 0; x < 2; x++)
				for (uint32_t s = 0; s < 2; s++) {
					for (uint32_t i = 0; i < NB; i++)
						tab[x][s][i] = (x * 2 + s) + i * 4;
					ffix_pool_open(&p, tab[x][s], NB);
					ffix_prompt(toks[s], NB * BT, 7 + s);
					assert_int_equal(kvp_fwd_prefill(f, &p.v, tab[x][s], NB, 0,
									 toks[s], SPEC_CTX + s, one,
									 0),
							 0);
				}
			/* world 0: sequence 0's K + 1 tokens one decode at a time, then 1's */
			for (uint32_t i = 0; i <= SPEC_K; i++) {
				struct kvp_fwd_seq q = { tab[0][0], NB, SPEC_CTX + i,
							 toks[0][SPEC_CTX + i] };

				assert_int_equal(kvp_fwd_decode(f, &p.v, &q, 1,
								one + (size_t)i * V),
						 0);
			}
			struct kvp_fwd_seq q1 = { tab[0][1], NB, SPEC_CTX + 1,
						  toks[1][SPEC_CTX + 1] };
			assert_int_equal(kvp_fwd_decode(f, &p.v, &q1, 1,
							one + (size_t)(SPEC_K + 1) * V),
					 0);
			/* world 1: sequence 1's row, then 0's 1 + K rows with all logits */
			struct kvp_fwd_part parts[2] = {
				{ .table = tab[1][1],
				  .n_table = NB,
				  .pos0 = SPEC_CTX + 1,
				  .tokens = toks[1] + SPEC_CTX + 1,
				  .n = 1 },
				{ .table = tab[1][0],
				  .n_table = NB,
				  .pos0 = SPEC_CTX,
				  .tokens = toks[0] + SPEC_CTX,
				  .n = SPEC_K + 1,
				  .n_logits = SPEC_K + 1 },
			};
			assert_int_equal(kvp_fwd_step(f, &p.v, parts, 2, all), 0);
			if (!kvp_fwd_rows_exact(f)) {
				/* f32 weights: the GEMV kernel's 8-row order; greedy may differ */
				assert_int_equal(types[c], KVP_GGML_F32);
				goto next;
			}
			assert_int_not_equal(types[c], KVP_GGML_F32);
			assert_memory_equal(all, one + (size_t)(SPEC_K + 1) * V, V * sizeof(float));
			assert_memory_equal(all + V, one, (size_t)(SPEC_K + 1) * V * sizeof(float));
			for (uint32_t s = 0; s < 2; s++)
				for (uint32_t i = 0; i < NB; i++)
					assert_memory_equal(kvp_kv_block(&p.v, tab[0][s][i]),
							    kvp_kv_block(&p.v, tab[1][s][i]),
							    p.v.geom.block_bytes);
			/* n_logits beyond the part's rows is refused */
			parts[1].n_logits = SPEC_K + 2;
			assert_int_equal(kvp_fwd_step(f, &p.v, parts, 2, all), -EINVAL);
next:
			ffix_pool_deinit(&p);
			kvp_fwd_free(f);
			free(one);
			free(all);
			ffix_model_close(m);
		}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mixed_step_equals_separate_calls),
		cmocka_unit_test(test_step_rejects_bad_arguments),
		cmocka_unit_test(test_verify_rows_equal_decodes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
