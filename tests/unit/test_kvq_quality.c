/* SPDX-License-Identifier: MIT */
/*
 * test_kvq_quality.c - what each K/V type does to the logits, against f32 K/V, on a
 * GQA model with YaRN RoPE scaling (4 query heads on 2 kv heads of 64, 4 layers, a
 * context of 4,096 scaled 4x from 1,024, so the prompt runs past the unscaled context;
 * 2,048 prompt tokens in chunks of 256, then 64 decoded; tests/lib/kvqual.h): max and
 * mean |logit difference| and the greedy tokens that agree before the first
 * divergence; int4 against a plain per-token int4 of the same bits.
 *
 * The bounds are the measured figures with a margin of about 3x (printed on every run;
 * docs/compute.md has them and the demo preset's): the model, prompt and kernels are
 * deterministic, so the figures move only when the arithmetic does, and 3x leaves room
 * for another instruction set's rounding (the vector tables sum in another order) while
 * still failing on a real regression - a wrong scale, a block read twice, a staged key
 * lost - which moves them by orders of magnitude.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "compute/kernels/kernels.h"
#include "compute/kernels/kvq4.h"
#include "compute/mkmodel.h"
#include "tests/lib/fwdfix.h"
#include "tests/lib/kvqual.h"

static void test_logits_close_to_f32(void **state)
{
	static const uint32_t dtypes[] = { KVP_DTYPE_F16, KVP_DTYPE_BF16, KVP_DTYPE_INT8 };
	/*
	 * measured (Zen 2, avx2 table, 2026-12-02): f16 max 6.6e-4 mean 1.1e-4, bf16
	 * 6.0e-3 / 8.5e-4, int8 1.84e-2 / 2.95e-3, all 64 greedy tokens equal (at 512
	 * prompt tokens on Zen 4 the scalar, avx2 and avx512 tables were within 5% of
	 * each other).  Agreement is bounded lower than measured: one near-tie that
	 * another table's rounding flips ends it, and that is not a regression.
	 */
	static const double max_bound[] = { 0.002, 0.018, 0.055 };
	static const double mean_bound[] = { 0.00035, 0.0026, 0.009 };
	static const uint32_t agree_min[] = { 32, 16, 16 };
	struct kvp_mkmodel_opts o;
	struct kvqual q[3];
	struct kvp_model *m;

	(void)state;
	assert_int_equal(kvp_mkmodel_preset(&o, "tiny"), 0);
	o.n_embd = 256;
	o.n_heads = 4;
	o.n_kv_heads = 2;
	o.n_layers = 4;
	o.n_ff = 512;
	o.n_ctx = 4096;
	o.rope_scaling = "yarn";
	o.rope_scaling_factor = 4.0f;
	o.rope_orig_ctx = 1024;
	m = ffix_model_open(&o);
	kvqual_measure(m, 2048, 256, dtypes, 3, q);
	for (int i = 0; i < 3; i++) {
		print_message(
			"%-5s max |dlogit| %.4g, mean %.4g (logits up to %.3g); greedy agrees "
			"for %u of %u tokens\n",
			kvp_dtype_name(dtypes[i]), q[i].max_abs, q[i].mean_abs, q[i].max_ref,
			q[i].agree, KVQUAL_GEN);
		assert_true(q[i].max_abs < max_bound[i]);
		assert_true(q[i].mean_abs < mean_bound[i]);
		assert_true(q[i].agree >= agree_min[i]);
	}
	ffix_model_close(m);
}

/*
 * The test's plain per-token int4: keys quantized as values are, a group per token (the
 * V format, which fits in a K run: block_tokens groups instead of head_dim, so a few
 * bytes fewer), everything else as the int4 type's.
 */
static void per_token_k(uint8_t *restrict run, const float *restrict x, uint32_t bt, uint32_t hd)
{
	kvp_kvq4_ref_v(run, x, bt, hd);
}

static void per_token_load_k(float *restrict dst, const uint8_t *restrict run, uint32_t rows,
			     uint32_t bt, uint32_t hd)
{
	kvp_kvq4_ref_load_v(dst, run, rows, bt, hd);
}

/*
 * Keys as trained models have them (KIVI's observation): a few channels - here the
 * RoPE pairs (2i, 2i+1) with i % 8 == 2 - many times larger than the rest, in every
 * token.  The synthetic weights are random, so scale those rows of W_k (f32, read in
 * place from the test's buffer) by @f.
 */
static void key_outlier_channels(struct kvp_model *m, float f)
{
	const struct kvp_model_hparams *hp = kvp_model_hparams(m);
	const struct kvp_weights *w = kvp_model_weights(m);

	for (uint32_t l = 0; l < hp->n_layers; l++) {
		const struct kvp_tensor *t = &w->layers[l].wk;

		assert_int_equal(t->type, KVP_GGML_F32);
		for (uint64_t r = 0; r < t->ne1; r++) {
			float *row = (float *)((uintptr_t)t->data + r * t->row_bytes);

			if ((r % hp->head_dim) / 2 % 8 != 2)
				continue;
			for (uint64_t e = 0; e < t->ne0; e++)
				row[e] *= f;
		}
	}
}

static void test_int4_kivi_beats_per_token(void **state)
{
	/*
	 * 2,048 prompt tokens (chunks of 256) and 64 decoded on the GQA / YaRN model: int4
	 * as built (K per channel, V per token, a window of 32), the same without the
	 * window, and the plain per-token int4 of the same bits with and without it, on
	 * keys with outlier channels.  The asymmetry must earn its place: int4, with or
	 * without its window, beats plain per-token int4 on max and mean |dlogit|.  The
	 * window's own effect is printed, not bounded: this model's attention is spread
	 * over the whole 2,048 tokens (random weights), so the 32 most recent carry little
	 * of it, and the figures move by a few percent either way; on the unscaled
	 * weights (no outliers) per channel and per token are within 10%.
	 */
	const struct kvp_kernels *best;
	struct kvp_kernels tok;
	struct kvp_mkmodel_opts o;
	struct kvqual q[4];
	struct kvp_model *m;
	static const char *const names[] = { "int4 (KIVI, window 32)", "int4 (KIVI, no window)",
					     "int4 per-token, window 32",
					     "int4 per-token, no window" };

	(void)state;
	assert_int_equal(kvp_kernels_best(&best), 0);
	tok = *best;
	tok.kvq4_k = per_token_k;
	tok.kvq4_load_k = per_token_load_k;
	assert_int_equal(kvp_mkmodel_preset(&o, "tiny"), 0);
	o.n_embd = 256;
	o.n_heads = 4;
	o.n_kv_heads = 2;
	o.n_layers = 4;
	o.n_ff = 512;
	o.n_ctx = 4096;
	o.rope_scaling = "yarn";
	o.rope_scaling_factor = 4.0f;
	o.rope_orig_ctx = 1024;
	m = ffix_model_open(&o);
	key_outlier_channels(m, 6.0f);
	kvqual_measure_types(m, 2048, 256,
			     (const struct kvqual_type[]){
				     { .dtype = KVP_DTYPE_INT4, .window = 32 },
				     { .dtype = KVP_DTYPE_INT4, .window = 0 },
				     { .dtype = KVP_DTYPE_INT4, .window = 32, .k = &tok },
				     { .dtype = KVP_DTYPE_INT4, .window = 0, .k = &tok },
			     },
			     4, q);
	for (int i = 0; i < 4; i++)
		print_message("%-26s max |dlogit| %.4g, mean %.4g (logits up to %.3g); greedy "
			      "agrees for %u of %u tokens\n",
			      names[i], q[i].max_abs, q[i].mean_abs, q[i].max_ref, q[i].agree,
			      KVQUAL_GEN);
	/* measured 2.4x on both (Zen 4); asserted at 1.5x */
	for (int i = 0; i < 2; i++) {
		assert_true(q[i].mean_abs * 1.5 < q[3].mean_abs);
		assert_true(q[i].max_abs * 1.5 < q[3].max_abs);
	}
	ffix_model_close(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_logits_close_to_f32),
		cmocka_unit_test(test_int4_kivi_beats_per_token),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
