/* SPDX-License-Identifier: MIT */
/*
 * test_forward.c - the fast forward pass against the naive reference (compute/ref.c),
 * chunked prefill, shared prefix blocks, batched decode, K/V dtypes, argument checks,
 * and that generation touches only its own blocks.
 *
 * The K/V "pool" (tests/lib/fwdfix.h) is an aligned heap region laid out as the daemon's;
 * every byte starts as 0xff (NaN in f32, f16 and bf16), and under ASan every block not in
 * the sequence's table (and every block's padding) is poisoned, so a read outside the
 * sequence's blocks is an ASan report, and in a plain build a NaN in the logits.
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

#include <sanitizer/asan_interface.h>

#include "compute/forward.h"
#include "compute/gguf.h"
#include "compute/kernels/kernels.h"
#include "compute/mkmodel.h"
#include "compute/model.h"
#include "compute/ref.h"
#include "compute/sample.h"
#include "shm/geom.h"
#include "tests/lib/fwdfix.h"
#include "tests/lib/testlib.h"

static struct kvp_model *make_model(uint32_t embd, uint32_t heads, uint32_t kv_heads,
				    uint32_t layers, uint32_t ff, uint32_t type, int tied)
{
	struct kvp_mkmodel_opts o;

	assert_int_equal(kvp_mkmodel_preset(&o, "tiny"), 0);
	o.n_embd = embd;
	o.n_heads = heads;
	o.n_kv_heads = kv_heads;
	o.n_layers = layers;
	o.n_ff = ff;
	o.type = type;
	o.tied = tied;
	/* the model borrows the buffer; ffix_model_close() frees both */
	return ffix_model_open(&o);
}

/*
 * Prefill @n_prompt tokens, then decode @steps greedy tokens; at every step the cached
 * logits must equal the reference recomputation of the whole sequence.
 */
static void decode_vs_ref(struct kvp_model *m, uint32_t dtype, uint32_t bt, uint32_t n_prompt,
			  uint32_t steps, double tol)
{
	const struct kvp_model_hparams *hp = kvp_model_hparams(m);
	uint32_t V = hp->n_vocab, total = n_prompt + steps, nb = (total + bt - 1) / bt;
	int32_t *toks = malloc(total * sizeof(int32_t));
	float *lg = malloc(total * V * sizeof(float)), *ref = malloc(total * V * sizeof(float));
	uint32_t *table = malloc(nb * sizeof(uint32_t));
	struct kvp_fwd *f = ffix_fwd_new(m, NULL, n_prompt, 1);
	struct ffix_pool p;

	ffix_pool_init(&p, m, dtype, bt, nb * 2);
	for (uint32_t i = 0; i < nb; i++) /* scattered, reversed ids: no accidental contiguity */
		table[i] = 2 * nb - 1 - 2 * i;
	ffix_pool_open(&p, table, nb);
	ffix_prompt(toks, n_prompt, 7);

	/* prefill: every position's logits against the reference */
	assert_int_equal(kvp_fwd_prefill(f, &p.v, table, nb, 0, toks, n_prompt, lg, 1), 0);
	assert_int_equal(kvp_ref_forward(m, toks, n_prompt, ref), 0);
	assert_true(ffix_rel_err(lg, ref, (size_t)n_prompt * V) < tol);

	float *last = lg + (size_t)(n_prompt - 1) * V;
	for (uint32_t s = 0; s < steps; s++) {
		uint32_t pos = n_prompt + s;
		double e;

		toks[pos] = kvp_sample_greedy(last, V);
		assert_int_equal(kvp_fwd_decode(f, &p.v,
						&(struct kvp_fwd_seq){ .table = table,
								       .n_table = nb,
								       .pos = pos,
								       .token = toks[pos] },
						1, lg),
				 0);
		assert_int_equal(kvp_ref_forward(m, toks, pos + 1, ref), 0);
		e = ffix_rel_err(lg, ref + (size_t)pos * V, V);
		if (!(e < tol))
			fail_msg("step %u: relative error %g >= %g", s, e, tol);
		last = lg;
	}
	ffix_pool_deinit(&p);
	kvp_fwd_free(f);
	free(toks);
	free(lg);
	free(ref);
	free(table);
}

static void test_decode_matches_ref_mha(void **state)
{
	/* MHA (4 query = 4 kv heads): every one of 64 decode steps within 1e-4 of the reference */
	struct kvp_model *m = make_model(64, 4, 4, 2, 96, KVP_GGML_F32, 0);

	decode_vs_ref(m, KVP_DTYPE_F32, 4, 5, 64, 1e-4);
	ffix_model_close(m);
}

static void test_decode_matches_ref_gqa(void **state)
{
	/* GQA (8 query heads share 2 kv heads), tied output: 64 steps within 1e-4 */
	struct kvp_model *m = make_model(64, 8, 2, 2, 128, KVP_GGML_F32, 1);

	decode_vs_ref(m, KVP_DTYPE_F32, 3, 7, 64, 1e-4);
	ffix_model_close(m);
}

static void test_decode_matches_ref_llama_head_dims(void **state)
{
	/*
	 * head_dim 64 and 128 (attention's vectorised paths; the shapes of real Llama
	 * models): 48 steps within 1e-4 of the reference, blocks of 5 so a block's key count
	 * varies; and f16 K/V at head_dim 64 close to it
	 */
	struct kvp_model *a = make_model(128, 2, 1, 2, 96, KVP_GGML_F32, 0);
	struct kvp_model *b = make_model(256, 4, 2, 1, 64, KVP_GGML_F32, 0);

	assert_int_equal(kvp_model_hparams(a)->head_dim, 64);
	assert_int_equal(kvp_model_hparams(b)->head_dim, 64);
	decode_vs_ref(a, KVP_DTYPE_F32, 5, 9, 48, 1e-4);
	decode_vs_ref(b, KVP_DTYPE_F32, 5, 9, 48, 1e-4);
	decode_vs_ref(a, KVP_DTYPE_F16, 5, 9, 16, 5e-3);
	ffix_model_close(a);
	ffix_model_close(b);
	b = make_model(256, 2, 1, 1, 64, KVP_GGML_F32, 1);
	assert_int_equal(kvp_model_hparams(b)->head_dim, 128);
	decode_vs_ref(b, KVP_DTYPE_F32, 5, 9, 48, 1e-4);
	ffix_model_close(b);
}

/*
 * Greedy decode @steps tokens after a 9-token prompt with kernel table @k; at every
 * position the reference recomputes the whole sequence, once rounding each projection's
 * input as the fast path does (*@exact: the largest relative logit error) and once
 * exactly (*@model, *@mean: the largest and mean error against the model itself).
 * *@differ counts steps whose greedy token is not the exact reference's argmax;
 * *@ties those of them that are near-ties: the reference's logit of the chosen token
 * within @tie (relative to its largest logit) of its maximum.
 * With @force the tokens fed back are @force's (steps of them) instead of the greedy
 * ones; @toks (steps) and @logits ((steps + 1) x n_vocab, from the prompt's last
 * position on) receive the tokens fed and the fast path's logits.
 */
static void greedy_vs_ref(struct kvp_model *m, const struct kvp_kernels *k, uint32_t steps,
			  double tie, double *exact, int *differ, int *ties, double *model,
			  double *mean, const int32_t *force, int32_t *fed, float *logits)
{
	const struct kvp_model_hparams *hp = kvp_model_hparams(m);
	uint32_t V = hp->n_vocab, n_prompt = 9, total = n_prompt + steps, bt = 16;
	uint32_t nb = (total + bt - 1) / bt;
	int32_t *toks = malloc(total * sizeof(int32_t));
	float *lg = malloc(total * V * sizeof(float)), *ref = malloc(total * V * sizeof(float));
	float *ex = malloc(total * V * sizeof(float));
	uint32_t *table = malloc(nb * sizeof(uint32_t));
	struct kvp_fwd *f;
	struct ffix_pool p;
	double sum = 0;

	assert_int_equal(kvp_fwd_new(&f, m,
				     &(struct kvp_fwd_opts){ .n_threads = 2,
							     .max_chunk = n_prompt,
							     .max_batch = 1,
							     .kernels = k }),
			 0);
	ffix_pool_init(&p, m, KVP_DTYPE_F32, bt, nb);
	for (uint32_t i = 0; i < nb; i++)
		table[i] = i;
	ffix_pool_open(&p, table, nb);
	ffix_prompt(toks, n_prompt, 11);
	/* the fast path's logits of positions n_prompt - 1 .. total - 1, greedy tokens */
	float *out = lg + (size_t)(n_prompt - 1) * V;
	assert_int_equal(kvp_fwd_prefill(f, &p.v, table, nb, 0, toks, n_prompt, out, 0), 0);
	for (uint32_t s = 0; s < steps; s++) {
		uint32_t pos = n_prompt + s;

		toks[pos] = force ? force[s] : kvp_sample_greedy(out, V);
		out += V;
		assert_int_equal(kvp_fwd_decode(f, &p.v,
						&(struct kvp_fwd_seq){ .table = table,
								       .n_table = nb,
								       .pos = pos,
								       .token = toks[pos] },
						1, out),
				 0);
	}
	memcpy(fed, toks + n_prompt, steps * sizeof(int32_t));
	memcpy(logits, lg + (size_t)(n_prompt - 1) * V, (size_t)(steps + 1) * V * sizeof(float));
	/* the references, once each: position i's logits depend on tokens 0 .. i only */
	assert_int_equal(kvp_ref_forward_opts(m, toks, total, ex, kvp_ref_act_flags(k)), 0);
	assert_int_equal(kvp_ref_forward(m, toks, total, ref), 0);
	*differ = *ties = 0;
	*exact = *model = 0;
	for (uint32_t pos = n_prompt - 1; pos < total; pos++) {
		const float *a = lg + (size_t)pos * V, *r = ref + (size_t)pos * V;
		double e = ffix_rel_err(a, ex + (size_t)pos * V, V), mx = 0;
		int32_t best;

		*exact = e > *exact ? e : *exact;
		e = ffix_rel_err(a, r, V);
		*model = e > *model ? e : *model;
		sum += e;
		if (pos + 1 == total)
			break;
		best = kvp_sample_greedy(r, V);
		for (uint32_t i = 0; i < V; i++)
			mx = fabs(r[i]) > mx ? fabs(r[i]) : mx;
		if (toks[pos + 1] != best) {
			(*differ)++;
			if (r[toks[pos + 1]] >= r[best] - tie * mx)
				(*ties)++;
		}
	}
	*mean = sum / (steps + 1);
	ffix_pool_deinit(&p);
	kvp_fwd_free(f);
	free(toks);
	free(lg);
	free(ref);
	free(ex);
	free(table);
}

/*
 * The scalar table fed the @greedy tokens another table chose: each must be the scalar
 * table's argmax at that step, or a near-tie of its logits (within @tie of the largest
 * |logit|), at most two.  @sl: room for the scalar logits.
 */
static void greedy_vs_scalar(struct kvp_model *m, double tie, const int32_t *greedy, float *sl,
			     const char *name)
{
	uint32_t V = kvp_model_hparams(m)->n_vocab;
	double exact, model, mean;
	int differ, ties, near = 0;
	int32_t fed[32];

	greedy_vs_ref(m, &kvp_kernels_scalar, 32, tie, &exact, &differ, &ties, &model, &mean,
		      greedy, fed, sl);
	for (int s = 0; s < 32; s++) {
		const float *r = sl + (size_t)s * V;
		int32_t best = kvp_sample_greedy(r, V);
		double mx = 0;

		for (uint32_t i = 0; i < V; i++)
			mx = fabs(r[i]) > mx ? fabs(r[i]) : mx;
		if (greedy[s] == best)
			continue;
		if (!(r[greedy[s]] >= r[best] - tie * mx) || ++near > 2)
			fail_msg("%s on %s: greedy token %d is %d, the scalar table's %d "
				 "(logits %g vs %g)",
				 kvp_model_info(m)->file_type, name, s, greedy[s], best,
				 r[greedy[s]], r[best]);
	}
}

static void test_weight_types_match_ref(void **state)
{
	/*
	 * every weight type, used in place, on every kernel table this CPU runs, 32 greedy
	 * steps against the reference forward on the dequantized weights: the logits stay
	 * within the type's bound (measured, with margin: docs/compute.md) and every greedy
	 * token is the reference's, except where the reference's top logits are closer than
	 * that bound (a near-tie; at most two).  The float types differ only by rounding,
	 * so for them the bound is tight and the rounded reference must agree to 1e-4; the
	 * integer types quantize each projection's input to int8 blocks, and bf16 rounds it.
	 * And every table's greedy tokens are the scalar table's (the oracle the vector
	 * kernels are written against) on the same sequence, again but for near-ties of
	 * the scalar table's logits (summation order differs; a last-bit difference can
	 * move an activation across an int8 rounding boundary in the next layer).
	 */
	static const struct {
		uint32_t type;
		double bound;
	} cases[] = {
		{ KVP_GGML_F32, 1e-5 },	 { KVP_GGML_F16, 1e-5 },       { KVP_GGML_BF16, 1e-2 },
		{ KVP_GGML_Q8_0, 4e-2 }, { KVP_GGML_Q4_0, 4e-2 },      { KVP_GGML_Q4_1, 4e-2 },
		{ KVP_GGML_Q5_0, 4e-2 }, { KVP_GGML_Q5_1, 4e-2 },      { KVP_GGML_Q2_K, 4e-2 },
		{ KVP_GGML_Q3_K, 4e-2 }, { KVP_GGML_Q4_K, 4e-2 },      { KVP_GGML_Q5_K, 4e-2 },
		{ KVP_GGML_Q6_K, 4e-2 }, { KVP_MKMODEL_Q4_K_M, 4e-2 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kvp_model *m = make_model(256, 4, 2, 2, 512, cases[i].type, 0);
		int is_float = cases[i].type == KVP_GGML_F32 || cases[i].type == KVP_GGML_F16;
		int32_t greedy[32];
		uint32_t V = kvp_model_hparams(m)->n_vocab;
		float *lg = malloc(33 * V * sizeof(float)), *sl = malloc(33 * V * sizeof(float));

		assert_int_equal(kvp_model_info(m)->n_converted, 0);
		for (uint32_t isa = 0; isa < KVP_ISA__COUNT; isa++) {
			const struct kvp_kernels *k = kvp_kernels_for(isa);
			double exact, model, mean;
			int differ, ties;

			if (!k)
				continue;
			greedy_vs_ref(m, k, 32, cases[i].bound, &exact, &differ, &ties, &model,
				      &mean, NULL, greedy, lg);
			print_message("%-6s %-6s logits vs model: max %.2e mean %.2e; vs rounded "
				      "ref %.1e; greedy: %d of 32 differ (%d near-ties)\n",
				      kvp_model_info(m)->file_type, k->name, model, mean, exact,
				      differ, ties);
			if (!(model < cases[i].bound) || differ > ties || ties > 2 ||
			    (is_float && !(exact < 1e-4)))
				fail_msg("%s on %s: logit error %g (bound %g), %d greedy tokens "
					 "differ, %d of them near-ties",
					 kvp_model_info(m)->file_type, k->name, model,
					 cases[i].bound, differ, ties);
			/*
			 * only against a scalar table that rounds the activations the same
			 * way: the AVX-512 table keeps one scale per 32 for the K-quants
			 * where scalar takes struct kvp_act_q8k's one per 256, a different
			 * int8 rounding, not a summation order (the rounded reference above
			 * checks that table in its own format)
			 */
			if (isa != KVP_ISA_SCALAR &&
			    !memcmp(k->act, kvp_kernels_scalar.act, sizeof(k->act)))
				greedy_vs_scalar(m, cases[i].bound, greedy, sl, k->name);
		}
		free(lg);
		free(sl);
		ffix_model_close(m);
	}
}

/* kB of a /proc/self/smaps_rollup line ("Rss:"), -1 when unreadable */
static long rss_kb(void)
{
	FILE *fp = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	long v = -1;

	if (!fp)
		return -1;
	while (fgets(line, sizeof(line), fp))
		if (!strncmp(line, "Rss:", 4))
			v = strtol(line + 4, NULL, 10);
	fclose(fp);
	return v;
}

static void test_resident_is_file_size(void **state)
{
	/*
	 * a Q4_K_M file of the demo shape used in place: after a prefill and some decode
	 * steps the process grew by about the file (it used to be 4-5x: every type was
	 * expanded to f32), nothing was converted or copied
	 */
	char dir[256], path[512], err[256];
	struct kvp_mkmodel_opts o;
	struct kvp_model *m;
	struct kvp_fwd *f;
	struct ffix_pool p;
	uint32_t table[8];
	int32_t toks[64];
	float *lg;
	long before, after;
	double file;

	assert_int_equal(kvp_test_tmpdir(dir, sizeof(dir)), 0);
	snprintf(path, sizeof(path), "%s/demo-q4km.gguf", dir);
	assert_int_equal(kvp_mkmodel_preset(&o, "demo"), 0);
	o.type = KVP_MKMODEL_Q4_K_M;
	assert_int_equal(kvp_mkmodel_write(path, &o, err, sizeof(err)), 0);
	before = rss_kb();
	assert_int_equal(kvp_model_open(&m, path, err, sizeof(err)), 0);
	file = (double)kvp_model_info(m)->file_bytes;
	assert_int_equal(kvp_model_info(m)->n_converted, 0);
	assert_int_equal(kvp_model_info(m)->arena_bytes, 0);
	f = ffix_fwd_new(m, NULL, 64, 1);
	lg = malloc(kvp_model_hparams(m)->n_vocab * 4);
	ffix_pool_init(&p, m, KVP_DTYPE_F16, 16, 8);
	for (uint32_t i = 0; i < 8; i++)
		table[i] = i;
	ffix_pool_open(&p, table, 8);
	ffix_prompt(toks, 64, 5);
	assert_int_equal(kvp_fwd_prefill(f, &p.v, table, 8, 0, toks, 64, lg, 0), 0);
	ffix_greedy(f, &p, table, 8, 64, lg, kvp_model_hparams(m)->n_vocab, toks, 8);
	after = rss_kb();
	print_message("file %.1f MiB; process grew by %.1f MiB\n", file / 1048576,
		      (after - before) / 1024.0);
	if (before > 0 && after > 0)
		assert_true((after - before) * 1024.0 < file * 1.15 + 48.0 * 1048576);
	ffix_pool_deinit(&p);
	free(lg);
	kvp_fwd_free(f);
	kvp_model_close(m);
	kvp_test_rmtree(dir);
}

static void test_kv_f16_bf16_close_to_f32(void **state)
{
	/* f16/bf16 K/V round K and V on write: logits stay close to the f32 reference */
	struct kvp_model *m = make_model(64, 4, 2, 2, 128, KVP_GGML_F32, 0);

	decode_vs_ref(m, KVP_DTYPE_F16, 4, 6, 16, 5e-3);
	decode_vs_ref(m, KVP_DTYPE_BF16, 4, 6, 16, 3e-2);
	decode_vs_ref(m, KVP_DTYPE_INT8, 4, 6, 16, 3e-2);
	ffix_model_close(m);
}

/*
 * One chunk, chunks of 5, and "8 shared prefix blocks of another sequence + suffix"
 * give the same last logits (@tol) and the same 32 greedy tokens; the shared blocks
 * are not modified by the second sequence.
 */
static void chunked_and_shared(struct kvp_model *m, double tol)
{
	uint32_t V = kvp_model_hparams(m)->n_vocab;
	struct ffix_split sp;

	ffix_split_init(&sp, m, 32);
	assert_true(ffix_rel_err(sp.lb, sp.la, V) < tol);
	assert_true(ffix_rel_err(sp.lc, sp.la, V) < tol);
	ffix_split_decode(&sp);
	ffix_split_deinit(&sp);
}

static void test_chunked_and_shared_prefix_prefill(void **state)
{
	/*
	 * f32 within 1e-4; a Q4_K_M file (prefix hits on a quantized model) within 1e-3:
	 * a chunk of 5 rows and one of 37 take different kernel paths (decode-sized and
	 * prefill tiles), so sums round differently and an activation's int8 rounding may
	 * flip; the greedy tokens must still be the same
	 */
	struct kvp_model *m = make_model(64, 4, 2, 2, 128, KVP_GGML_F32, 0);

	chunked_and_shared(m, 1e-4);
	ffix_model_close(m);
	m = make_model(256, 4, 2, 2, 512, KVP_MKMODEL_Q4_K_M, 0);
	chunked_and_shared(m, 1e-3);
	ffix_model_close(m);
	m = make_model(256, 4, 2, 2, 512, KVP_GGML_Q8_0, 1);
	chunked_and_shared(m, 1e-3);
	ffix_model_close(m);
}

/*
 * @B sequences of different lengths: decoded as one batch they give the logits (1e-4)
 * and the 16 greedy tokens of each decoded alone.
 */
static void batch_vs_alone(uint32_t B)
{
	struct kvp_model *m = make_model(64, 4, 2, 2, 128, KVP_GGML_F32, 0);
	uint32_t V = kvp_model_hparams(m)->n_vocab, bt = 4, steps = 16, nb = 12;
	uint32_t *tab = malloc(2 * B * nb * sizeof(uint32_t)), *len = malloc(B * sizeof(uint32_t));
	int32_t *toks = malloc(17 * sizeof(int32_t)), *cur = malloc(2 * B * sizeof(int32_t));
	int32_t *out = malloc(2 * B * steps * sizeof(int32_t));
	struct kvp_fwd_seq *seq = malloc(B * sizeof(*seq));
	float *lg = malloc(B * V * 4), *l1 = malloc(V * 4), *lb = malloc(B * V * 4);
	struct kvp_fwd *f = ffix_fwd_new(m, NULL, 32, B);
	struct ffix_pool p;

	ffix_pool_init(&p, m, KVP_DTYPE_F32, bt, 2 * B * nb);
	/* w = 0: each alone; w = 1: one batch; blocks interleaved across all 2B sequences */
	for (uint32_t w = 0; w < 2; w++)
		for (uint32_t s = 0; s < B; s++) {
			uint32_t *t = tab + (w * B + s) * nb;

			len[s] = 3 + (s * 7) % 15; /* 3 .. 17 tokens */
			for (uint32_t i = 0; i < nb; i++)
				t[i] = (w * B + s) + i * 2 * B;
			ffix_pool_open(&p, t, nb);
			ffix_prompt(toks, len[s], 11 + s);
			assert_int_equal(kvp_fwd_prefill(f, &p.v, t, nb, 0, toks, len[s], l1, 0),
					 0);
			cur[w * B + s] = kvp_sample_greedy(l1, V);
		}
	for (uint32_t i = 0; i < steps; i++) {
		for (uint32_t s = 0; s < B; s++) {
			out[s * steps + i] = cur[s];
			assert_int_equal(kvp_fwd_decode(f, &p.v,
							&(struct kvp_fwd_seq){ .table = tab +
											s * nb,
									       .n_table = nb,
									       .pos = len[s] + i,
									       .token = cur[s] },
							1, l1),
					 0);
			cur[s] = kvp_sample_greedy(l1, V);
			memcpy(lg + s * V, l1, V * 4); /* keep alone logits for comparison */
			seq[s] = (struct kvp_fwd_seq){ .table = tab + (B + s) * nb,
						       .n_table = nb,
						       .pos = len[s] + i,
						       .token = cur[B + s] };
			out[(B + s) * steps + i] = cur[B + s];
		}
		assert_int_equal(kvp_fwd_decode(f, &p.v, seq, B, lb), 0);
		for (uint32_t s = 0; s < B; s++) {
			double e = ffix_rel_err(lb + s * V, lg + s * V, V);

			if (!(e < 1e-4))
				fail_msg("batch %u, step %u, sequence %u: relative error %g", B, i,
					 s, e);
			cur[B + s] = kvp_sample_greedy(lb + s * V, V);
		}
	}
	assert_memory_equal(out, out + B * steps, B * steps * sizeof(int32_t));
	ffix_pool_deinit(&p);
	kvp_fwd_free(f);
	free(tab);
	free(len);
	free(toks);
	free(cur);
	free(out);
	free(seq);
	free(lg);
	free(l1);
	free(lb);
	ffix_model_close(m);
}

static void test_batch_equals_alone(void **state)
{
	/*
	 * batches of 4 (one kvp_gemv_rows group), 12 (groups of 8 + 4) and 20 (past the
	 * GEMV limit: sgemm) each equal decoding every sequence alone (sgemv)
	 */
	batch_vs_alone(4);
	batch_vs_alone(12);
	batch_vs_alone(20);
}

static void test_sgemm_prefill_matches_ref(void **state)
{
	/* a 40-token chunk (sgemm projections) and 8 steps after it match the reference */
	struct kvp_model *m = make_model(64, 8, 2, 2, 128, KVP_GGML_F32, 0);

	decode_vs_ref(m, KVP_DTYPE_F32, 16, 40, 8, 1e-4);
	ffix_model_close(m);
}

static void test_greedy_not_degenerate(void **state)
{
	/* the tiny preset's greedy continuation of a prompt uses many distinct tokens */
	struct kvp_mkmodel_opts o;
	struct kvp_model *m;
	void *buf;
	size_t len;
	uint32_t nb = 8, table[8], V, distinct = 0;
	int32_t toks[4] = { 1, 3 + 'H', 3 + 'i', 3 + '!' }, out[32];
	uint8_t seen[512] = { 0 };
	struct kvp_fwd *f;
	struct ffix_pool p;
	float *lg;

	assert_int_equal(kvp_mkmodel_preset(&o, "tiny"), 0);
	assert_int_equal(kvp_mkmodel_write_mem(&buf, &len, &o, NULL, 0), 0);
	assert_int_equal(kvp_model_open_mem(&m, buf, len, NULL, 0), 0);
	V = kvp_model_hparams(m)->n_vocab;
	lg = malloc(V * 4);
	f = ffix_fwd_new(m, NULL, 4, 1);
	ffix_pool_init(&p, m, KVP_DTYPE_F32, 16, nb);
	for (uint32_t i = 0; i < nb; i++)
		table[i] = i;
	ffix_pool_open(&p, table, nb);
	assert_int_equal(kvp_fwd_prefill(f, &p.v, table, nb, 0, toks, 4, lg, 0), 0);
	ffix_greedy(f, &p, table, nb, 4, lg, V, out, 32);
	for (int i = 0; i < 32; i++) {
		distinct += !seen[out[i]];
		seen[out[i]] = 1;
	}
	if (distinct < 8)
		fail_msg("only %u distinct tokens in 32 greedy steps", distinct);
	ffix_pool_deinit(&p);
	kvp_fwd_free(f);
	free(lg);
	ffix_model_close(m);
}

static void test_rejects_bad_arguments(void **state)
{
	/* bad token, block id, short table, oversize chunk, mismatched view: -EINVAL, no write */
	struct kvp_model *m = make_model(64, 4, 2, 2, 128, KVP_GGML_F32, 0);
	uint32_t V = kvp_model_hparams(m)->n_vocab, table[4] = { 0, 1, 2, 3 },
		 bad[4] = { 0, 1, 9, 3 };
	int32_t toks[8] = { 1, 5, 6, 7, 8, 9, 10, 11 }, badtok[2] = { 1, 259 };
	float *lg = malloc(8 * V * 4);
	struct kvp_fwd *f = ffix_fwd_new(m, NULL, 8, 2);
	struct kvp_kv_view wrong;
	struct kvp_model_shape s;
	struct ffix_pool p;
	uint8_t *copy;

	ffix_pool_init(&p, m, KVP_DTYPE_F32, 2, 4);
	ffix_pool_open(&p, table, 4);
	copy = malloc(4 * p.v.geom.block_bytes);
	for (int i = 0; i < 4; i++)
		memcpy(copy + i * p.v.geom.block_bytes, kvp_kv_block(&p.v, i),
		       p.v.geom.block_bytes);

	assert_int_equal(kvp_fwd_prefill(f, &p.v, table, 4, 0, badtok, 2, lg, 0), -EINVAL);
	assert_int_equal(kvp_fwd_prefill(f, &p.v, bad, 4, 0, toks, 8, lg, 0), -EINVAL);
	assert_int_equal(kvp_fwd_prefill(f, &p.v, table, 3, 0, toks, 8, lg, 0), -EINVAL);
	assert_int_equal(kvp_fwd_prefill(f, &p.v, table, 4, 1, toks, 8, lg, 0), -EINVAL);
	assert_int_equal(kvp_fwd_prefill(f, &p.v, table, 4, 0, toks, 0, lg, 0), -EINVAL);
	assert_int_equal(kvp_fwd_decode(f, &p.v,
					&(struct kvp_fwd_seq){ .table = table,
							       .n_table = 4,
							       .pos = 8,
							       .token = 5 },
					1, lg),
			 -EINVAL);
	assert_int_equal(kvp_fwd_decode(f, &p.v,
					&(struct kvp_fwd_seq){ .table = table,
							       .n_table = 4,
							       .pos = 0,
							       .token = -1 },
					1, lg),
			 -EINVAL);
	struct kvp_fwd_seq three[3] = { { table, 4, 0, 5 },
					{ table, 4, 1, 5 },
					{ table, 4, 2, 5 } };
	assert_int_equal(kvp_fwd_decode(f, &p.v, three, 3, lg), -EINVAL); /* > max_batch */
	kvp_model_kv_shape(m, KVP_DTYPE_F32, 2, &s);
	s.n_layers = 3;
	wrong = p.v;
	assert_int_equal(kvp_geom_init(&wrong.geom, &s), 0);
	assert_int_equal(kvp_fwd_check_view(f, &wrong), -EINVAL);
	assert_int_equal(kvp_fwd_prefill(f, &wrong, table, 4, 0, toks, 2, lg, 0), -EINVAL);
	for (int i = 0; i < 4; i++)
		assert_memory_equal(copy + i * p.v.geom.block_bytes, kvp_kv_block(&p.v, i),
				    p.v.geom.block_bytes);
	free(copy);
	ffix_pool_deinit(&p);
	kvp_fwd_free(f);
	free(lg);
	ffix_model_close(m);
}

static void test_reads_only_own_blocks(void **state)
{
	/*
	 * With tiny 2-token blocks scattered through a pool whose every other block is
	 * poisoned (ASan) and NaN-filled, a 40-token generation gives finite logits equal
	 * to the same generation in a contiguous table, and leaves other blocks untouched.
	 */
	struct kvp_model *m = make_model(64, 4, 2, 2, 128, KVP_GGML_F32, 0);
	uint32_t V = kvp_model_hparams(m)->n_vocab, bt = 2, n = 40, nb = 20, pool_n = 64;
	uint32_t scat[20], cont[20];
	int32_t toks[6] = { 1, 40, 50, 60, 70, 80 }, ga[34], gb[34];
	float *la = malloc(V * 4), *lb = malloc(V * 4);
	struct kvp_fwd *f = ffix_fwd_new(m, NULL, 6, 1);
	struct ffix_pool p, q;
	uint8_t used[64] = { 0 };

	ffix_pool_init(&p, m, KVP_DTYPE_F32, bt, pool_n);
	ffix_pool_init(&q, m, KVP_DTYPE_F32, bt, nb);
	for (uint32_t i = 0; i < nb; i++) {
		scat[i] = (i * 37 + 5) % pool_n; /* 37 is coprime with 64: distinct ids */
		cont[i] = i;
		used[scat[i]] = 1;
	}
	ffix_pool_open(&p, scat, nb);
	ffix_pool_open(&q, cont, nb);
	assert_int_equal(kvp_fwd_prefill(f, &p.v, scat, nb, 0, toks, 6, la, 0), 0);
	assert_int_equal(kvp_fwd_prefill(f, &q.v, cont, nb, 0, toks, 6, lb, 0), 0);
	ffix_greedy(f, &p, scat, nb, 6, la, V, ga, n - 6);
	ffix_greedy(f, &q, cont, nb, 6, lb, V, gb, n - 6);
	for (uint32_t i = 0; i < V; i++)
		assert_true(isfinite(la[i]));
	assert_true(ffix_rel_err(la, lb, V) < 1e-6);
	assert_memory_equal(ga, gb, sizeof(ga));
	ASAN_UNPOISON_MEMORY_REGION(p.v.base, p.bytes);
	for (uint32_t b = 0; b < pool_n; b++) {
		const uint8_t *blk = kvp_kv_block(&p.v, b);

		for (size_t i = 0; i < p.v.geom.block_stride; i++)
			if (!used[b] || i >= p.v.geom.block_bytes)
				assert_int_equal(blk[i], 0xff);
	}
	ffix_pool_deinit(&p);
	ffix_pool_deinit(&q);
	kvp_fwd_free(f);
	free(la);
	free(lb);
	ffix_model_close(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decode_matches_ref_mha),
		cmocka_unit_test(test_decode_matches_ref_gqa),
		cmocka_unit_test(test_decode_matches_ref_llama_head_dims),
		cmocka_unit_test(test_weight_types_match_ref),
		cmocka_unit_test(test_kv_f16_bf16_close_to_f32),
		cmocka_unit_test(test_chunked_and_shared_prefix_prefill),
		cmocka_unit_test(test_resident_is_file_size),
		cmocka_unit_test(test_batch_equals_alone),
		cmocka_unit_test(test_sgemm_prefill_matches_ref),
		cmocka_unit_test(test_greedy_not_degenerate),
		cmocka_unit_test(test_rejects_bad_arguments),
		cmocka_unit_test(test_reads_only_own_blocks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
