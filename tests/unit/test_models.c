/* SPDX-License-Identifier: MIT */
/*
 * test_models.c - model metadata: every architecture and math variant the loader
 * accepts (head size from key_length, rope_freqs, linear and YaRN scaling, qwen2's
 * biases and NEOX RoPE) computed by the fast path equal to the reference forward, on
 * every kernel table; prefix-cache splits equal to one-shot prefill; the NEOX layout
 * against llama's permuted-rows layout; refusals of math keys kvpool lacks (each named);
 * fingerprints that follow every math parameter.
 *
 * Shapes are tinyq's (n_embd 256, n_ff 512, 2 layers, 4 heads / 2 KV), so each case
 * runs in milliseconds.
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

#include "compute/arch.h"
#include "compute/forward.h"
#include "compute/gguf.h"
#include "compute/kernels/kernels.h"
#include "compute/mkmodel.h"
#include "compute/model.h"
#include "compute/ref.h"
#include "compute/rope.h"
#include "compute/sample.h"
#include "shm/geom.h"
#include "tests/lib/fwdfix.h"

/* ---- models ---- */

/* The tinyq shape in @type. */
static void base_opts(struct kvp_mkmodel_opts *o, uint32_t type)
{
	assert_int_equal(kvp_mkmodel_preset(o, "tinyq"), 0);
	o->type = type;
}

/* The math variants: each a change of the base options. */
enum variant {
	V_BASE,
	V_ROPE_FREQS,
	V_LINEAR,
	V_YARN,
	V_YARN_TUNED,
	V_HEAD_128,
	V_HEAD_32,
	V_LLAMA_BIAS,
	V_QWEN2,
	V_QWEN2_YARN,
	V__COUNT
};

static const char *const variant_name[V__COUNT] = {
	"llama",	"rope_freqs",  "linear x4",	 "yarn x4", "yarn tuned",
	"head_dim 128", "head_dim 32", "llama+qkv bias", "qwen2",   "qwen2+yarn tied",
};

/* extra keys of V_YARN_TUNED: the YaRN knobs a file may set */
static const struct kvp_mkmodel_kv yarn_tuned[] = {
	{ "llama.rope.scaling.attn_factor", KVP_GGUF_F32, 1.25, NULL },
	{ "llama.rope.scaling.yarn_beta_fast", KVP_GGUF_F32, 16, NULL },
	{ "llama.rope.scaling.yarn_beta_slow", KVP_GGUF_F32, 2, NULL },
};

/*
 * The variants' RoPE settings are chosen for short test sequences: an original context
 * of 64 puts Llama 3.1's transition band and YaRN's ramp in the middle of the pairs, so
 * every regime of the formulas shows within 40 positions.
 */
static void variant_opts(struct kvp_mkmodel_opts *o, uint32_t type, enum variant v)
{
	base_opts(o, type);
	switch (v) {
	case V_BASE:
		break;
	case V_ROPE_FREQS:
		o->rope_freqs = (struct kvp_mkmodel_rope_freqs){ 8.0f, 1.0f, 4.0f, 64 };
		break;
	case V_LINEAR:
		o->rope_scaling = "linear";
		o->rope_scaling_factor = 4.0f;
		break;
	case V_YARN:
	case V_QWEN2_YARN:
		o->rope_scaling = "yarn";
		o->rope_scaling_factor = 4.0f;
		o->rope_orig_ctx = 64;
		o->arch = v == V_QWEN2_YARN ? "qwen2" : NULL;
		o->tied = v == V_QWEN2_YARN; /* as the small Qwen2.5 models are */
		break;
	case V_YARN_TUNED:
		o->rope_scaling = "yarn";
		o->rope_scaling_factor = 8.0f;
		o->rope_orig_ctx = 48;
		o->extra = yarn_tuned;
		o->n_extra = 3;
		break;
	case V_HEAD_128:
		o->head_dim = 128; /* Q 512 wide on a 256 residual */
		break;
	case V_HEAD_32:
		o->head_dim = 32; /* Q 128 wide */
		break;
	case V_LLAMA_BIAS:
		o->qkv_bias = 1;
		break;
	case V_QWEN2:
		o->arch = "qwen2";
		break;
	default:
		fail();
	}
}

/* ---- fast path against the reference ---- */

/*
 * Prefill @n_prompt tokens (every position's logits), then greedy-decode @steps with
 * kernel table @k and K/V in @dtype; the reference then computes the whole sequence
 * once (@ref_flags) and the largest relative logit error over all positions is
 * returned.  *@differ counts greedy tokens that are not the reference's argmax.
 */
static double vs_ref(const struct kvp_model *m, const struct kvp_kernels *k, uint32_t dtype,
		     uint32_t n_prompt, uint32_t steps, unsigned ref_flags, int *differ)
{
	uint32_t V = kvp_model_hparams(m)->n_vocab, total = n_prompt + steps, bt = 5;
	uint32_t nb = (total + bt - 1) / bt;
	int32_t *toks = malloc(total * sizeof(int32_t));
	float *lg = malloc((size_t)total * V * sizeof(float));
	float *ref = malloc((size_t)total * V * sizeof(float));
	uint32_t *table = malloc(nb * sizeof(uint32_t));
	struct kvp_fwd *f = ffix_fwd_new(m, k, n_prompt, 1);
	struct ffix_pool p;
	double worst = 0;

	ffix_pool_init(&p, m, dtype, bt, 2 * nb);
	for (uint32_t i = 0; i < nb; i++) /* scattered, reversed ids */
		table[i] = 2 * nb - 1 - 2 * i;
	ffix_pool_open(&p, table, nb);
	ffix_prompt(toks, n_prompt, 7);
	assert_int_equal(kvp_fwd_prefill(f, &p.v, table, nb, 0, toks, n_prompt, lg, 1), 0);
	for (uint32_t s = 0; s < steps; s++) {
		uint32_t pos = n_prompt + s;

		toks[pos] = kvp_sample_greedy(lg + (size_t)(pos - 1) * V, V);
		assert_int_equal(kvp_fwd_decode(f, &p.v,
						&(struct kvp_fwd_seq){ .table = table,
								       .n_table = nb,
								       .pos = pos,
								       .token = toks[pos] },
						1, lg + (size_t)pos * V),
				 0);
	}
	assert_int_equal(kvp_ref_forward_opts(m, toks, total, ref, ref_flags), 0);
	*differ = 0;
	for (uint32_t pos = 0; pos < total; pos++) {
		double e = ffix_rel_err(lg + (size_t)pos * V, ref + (size_t)pos * V, V);

		worst = e > worst ? e : worst;
		if (pos + 1 < total && pos + 1 >= n_prompt &&
		    toks[pos + 1] != kvp_sample_greedy(ref + (size_t)pos * V, V))
			(*differ)++;
	}
	ffix_pool_deinit(&p);
	kvp_fwd_free(f);
	free(toks);
	free(lg);
	free(ref);
	free(table);
	return worst;
}

static void test_variants_match_ref_f32(void **state)
{
	/*
	 * f32 weights: each variant's fast path (prefill of 12, 28 greedy steps, blocks of
	 * 5) within 1e-4 of the reference at every position, with f32 K/V, and every greedy
	 * token the reference's argmax; f16 K/V within 5e-3
	 */
	(void)state;
	for (int v = 0; v < V__COUNT; v++) {
		struct kvp_mkmodel_opts o;
		struct kvp_model *m;
		double e, e16;
		int differ, d16;

		variant_opts(&o, KVP_GGML_F32, v);
		m = ffix_model_open(&o);
		e = vs_ref(m, NULL, KVP_DTYPE_F32, 12, 28, 0, &differ);
		e16 = vs_ref(m, NULL, KVP_DTYPE_F16, 12, 8, 0, &d16);
		print_message("%-15s f32 K/V: max rel err %.1e, %d greedy differ; f16 K/V %.1e\n",
			      variant_name[v], e, differ, e16);
		if (!(e < 1e-4) || differ || !(e16 < 5e-3))
			fail_msg("%s: error %g (f16 K/V %g), %d greedy tokens differ",
				 variant_name[v], e, e16, differ);
		ffix_model_close(m);
	}
}

static void test_variants_match_ref_every_kernel_table(void **state)
{
	/*
	 * q4_k weights (q8_0 where Q is 128 wide, below a K-quant block), every kernel table
	 * this CPU runs: each variant within 4e-2 of the reference that rounds activations as
	 * the fast path does (test_forward's bound for the integer types), and at most two
	 * greedy tokens off its argmax
	 */
	(void)state;
	for (int v = 0; v < V__COUNT; v++) {
		struct kvp_mkmodel_opts o;
		struct kvp_model *m;

		variant_opts(&o, v == V_HEAD_32 ? KVP_GGML_Q8_0 : KVP_GGML_Q4_K, v);
		m = ffix_model_open(&o);
		for (uint32_t isa = 0; isa < KVP_ISA__COUNT; isa++) {
			const struct kvp_kernels *k = kvp_kernels_for(isa);
			double e;
			int differ;

			if (!k)
				continue;
			e = vs_ref(m, k, KVP_DTYPE_F32, 9, 16, kvp_ref_act_flags(k), &differ);
			print_message("%-15s %-5s %-6s max rel err %.1e, %d greedy differ\n",
				      variant_name[v], kvp_model_info(m)->file_type, k->name, e,
				      differ);
			if (!(e < 4e-2) || differ > 2)
				fail_msg("%s on %s: error %g, %d greedy tokens differ",
					 variant_name[v], k->name, e, differ);
		}
		ffix_model_close(m);
	}
}

/* Last-position logits of a 36-token prompt on the fast path, into @out (n_vocab). */
static void last_logits(const struct kvp_model *m, float *out)
{
	uint32_t bt = 16, nb = 3, table[3] = { 0, 1, 2 };
	int32_t toks[36];
	struct kvp_fwd *f = ffix_fwd_new(m, NULL, 36, 1);
	struct ffix_pool p;

	ffix_pool_init(&p, m, KVP_DTYPE_F32, bt, nb);
	ffix_pool_open(&p, table, nb);
	ffix_prompt(toks, 36, 3);
	assert_int_equal(kvp_fwd_prefill(f, &p.v, table, nb, 0, toks, 36, out, 0), 0);
	ffix_pool_deinit(&p);
	kvp_fwd_free(f);
}

static void test_rope_variants_change_the_output(void **state)
{
	/*
	 * same weights, only the RoPE metadata differs: rope_freqs, linear, YaRN and the
	 * YaRN knobs each move the logits (relative change > 1e-3), so none is ignored
	 */
	static const enum variant vs[] = { V_ROPE_FREQS, V_LINEAR, V_YARN, V_YARN_TUNED };
	struct kvp_mkmodel_opts o;
	struct kvp_model *base, *m;
	uint32_t V;
	float *a, *b;

	(void)state;
	variant_opts(&o, KVP_GGML_F32, V_BASE);
	base = ffix_model_open(&o);
	V = kvp_model_hparams(base)->n_vocab;
	a = malloc(V * sizeof(float));
	b = malloc(V * sizeof(float));
	last_logits(base, a);
	for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
		double d;

		variant_opts(&o, KVP_GGML_F32, vs[i]);
		m = ffix_model_open(&o);
		last_logits(m, b);
		d = ffix_rel_err(b, a, V);
		print_message("%-15s moves the logits by %.2e\n", variant_name[vs[i]], d);
		if (!(d > 1e-3))
			fail_msg("%s changes the logits by only %g", variant_name[vs[i]], d);
		ffix_model_close(m);
	}
	free(a);
	free(b);
	ffix_model_close(base);
}

/* ---- prefix-cache splits ---- */

static void test_prefix_splits_equal_one_shot(void **state)
{
	/*
	 * for every variant: one 37-token prefill, chunks of 5, and 8 blocks (32 tokens)
	 * shared from the first sequence plus a 5-token suffix give the same last logits
	 * (1e-4) and the same 16 greedy tokens; the shared blocks stay unmodified
	 */
	(void)state;
	for (int v = 0; v < V__COUNT; v++) {
		struct kvp_mkmodel_opts o;
		struct kvp_model *m;
		struct ffix_split sp;
		uint32_t V;

		variant_opts(&o, KVP_GGML_F32, v);
		m = ffix_model_open(&o);
		V = kvp_model_hparams(m)->n_vocab;
		ffix_split_init(&sp, m, 16);
		if (!(ffix_rel_err(sp.lb, sp.la, V) < 1e-4) ||
		    !(ffix_rel_err(sp.lc, sp.la, V) < 1e-4))
			fail_msg("%s: chunked %g, shared prefix %g", variant_name[v],
				 ffix_rel_err(sp.lb, sp.la, V), ffix_rel_err(sp.lc, sp.la, V));
		ffix_split_decode(&sp);
		ffix_split_deinit(&sp);
		ffix_model_close(m);
	}
}

/* ---- NEOX against llama's permuted layout ---- */

/* Replace every @from in [buf, buf + len) with @to (same length). */
static int replace_all(uint8_t *buf, size_t len, const char *from, const char *to)
{
	size_t n = strlen(from);
	int count = 0;

	assert_int_equal(strlen(to), n);
	for (uint8_t *p = buf; (p = memmem(p, len - (size_t)(p - buf), from, n)); p += n) {
		memcpy(p, to, n);
		count++;
	}
	return count;
}

/*
 * Rows of f32 tensor @name in @buf (parsed as @g) reordered per head of @hd rows as the
 * GGUF converter permutes llama's Q/K: new row 2i = old row i, new 2i+1 = old i + hd/2.
 */
static void permute_rows(uint8_t *buf, const struct kvp_gguf *g, const char *name, uint32_t hd)
{
	const struct kvp_gguf_tensor *t = kvp_gguf_tensor(g, name);
	size_t row, off;
	uint8_t *d, *tmp;

	assert_non_null(t);
	assert_int_equal(t->type, KVP_GGML_F32);
	row = (t->n_dims == 1 ? 1 : t->ne[0]) * sizeof(float);
	off = (size_t)((const uint8_t *)t->data - g->base);
	d = buf + off;
	tmp = malloc(row * hd);
	for (uint64_t h = 0; h < t->n_elems * sizeof(float) / row / hd; h++) {
		uint8_t *head = d + h * hd * row;

		for (uint32_t i = 0; i < hd / 2; i++) {
			memcpy(tmp + 2 * i * row, head + i * row, row);
			memcpy(tmp + (2 * i + 1) * row, head + (i + hd / 2) * row, row);
		}
		memcpy(head, tmp, row * hd);
	}
	free(tmp);
}

static void test_neox_equals_permuted_llama(void **state)
{
	/*
	 * A qwen2 file (NEOX pairs (i, i + hd/2)) and the same weights as a llama file with
	 * Q/K rows and biases permuted the way the GGUF converter does for llama (adjacent
	 * pairs) compute the same function: logits equal within 1e-4 at every position, on
	 * the fast path and the reference, with YaRN scaling too; the unpermuted llama
	 * reading of the same bytes does not (> 1e-2)
	 */
	(void)state;
	for (int yarn = 0; yarn < 2; yarn++) {
		struct kvp_mkmodel_opts o;
		struct kvp_gguf *g;
		struct kvp_model *q, *l, *raw;
		void *buf;
		size_t len;
		uint8_t *cp, *cr;
		uint32_t V, hd, n = 24;
		int32_t toks[24];
		float *lq, *ll, *lr, *rq, *rl;
		char err[256], nm[64];

		variant_opts(&o, KVP_GGML_F32, yarn ? V_QWEN2_YARN : V_QWEN2);
		o.head_dim = 64;
		assert_int_equal(kvp_mkmodel_write_mem(&buf, &len, &o, err, sizeof(err)), 0);
		assert_int_equal(kvp_gguf_parse(&g, buf, len, err, sizeof(err)), 0);
		cp = malloc(len);
		cr = malloc(len);
		memcpy(cp, buf, len);
		hd = 64;
		for (uint32_t b = 0; b < o.n_layers; b++) {
			static const char *const sfx[] = { "attn_q.weight", "attn_k.weight",
							   "attn_q.bias", "attn_k.bias" };

			for (int i = 0; i < 4; i++) {
				snprintf(nm, sizeof(nm), "blk.%u.%s", b, sfx[i]);
				permute_rows(cp, g, nm, hd);
			}
		}
		/* every "qwen2" of the metadata (the architecture and the key prefix) */
		assert_true(replace_all(cp, g->data_off, "qwen2", "llama") >= 10);
		memcpy(cr, buf, len);
		replace_all(cr, g->data_off, "qwen2", "llama");
		kvp_gguf_close(g);
		assert_int_equal(kvp_model_open_mem(&q, buf, len, err, sizeof(err)), 0);
		assert_int_equal(kvp_model_open_mem(&l, cp, len, err, sizeof(err)), 0);
		assert_int_equal(kvp_model_open_mem(&raw, cr, len, err, sizeof(err)), 0);
		assert_int_equal(kvp_model_hparams(q)->rope_layout, KVP_ROPE_NEOX);
		assert_int_equal(kvp_model_hparams(l)->rope_layout, KVP_ROPE_NORM);
		assert_int_equal(kvp_model_hparams(l)->qkv_bias, 1);
		V = kvp_model_hparams(q)->n_vocab;
		lq = malloc((size_t)n * V * 4);
		ll = malloc((size_t)n * V * 4);
		lr = malloc((size_t)n * V * 4);
		rq = malloc((size_t)n * V * 4);
		rl = malloc((size_t)n * V * 4);
		ffix_prompt(toks, n, 5);
		{
			const struct kvp_model *ms[3] = { q, l, raw };
			float *outs[3] = { lq, ll, lr };

			for (int i = 0; i < 3; i++) {
				uint32_t table[2] = { 0, 1 };
				struct kvp_fwd *f = ffix_fwd_new(ms[i], NULL, n, 1);
				struct ffix_pool p;

				ffix_pool_init(&p, ms[i], KVP_DTYPE_F32, 16, 2);
				ffix_pool_open(&p, table, 2);
				assert_int_equal(kvp_fwd_prefill(f, &p.v, table, 2, 0, toks, n,
								 outs[i], 1),
						 0);
				ffix_pool_deinit(&p);
				kvp_fwd_free(f);
			}
		}
		assert_int_equal(kvp_ref_forward(q, toks, n, rq), 0);
		assert_int_equal(kvp_ref_forward(l, toks, n, rl), 0);
		print_message("%s: qwen2 vs permuted llama %.1e (ref %.1e), vs unpermuted %.1e\n",
			      yarn ? "yarn" : "plain", ffix_rel_err(ll, lq, (size_t)n * V),
			      ffix_rel_err(rl, rq, (size_t)n * V),
			      ffix_rel_err(lr, lq, (size_t)n * V));
		assert_true(ffix_rel_err(ll, lq, (size_t)n * V) < 1e-4);
		assert_true(ffix_rel_err(rl, rq, (size_t)n * V) < 1e-4);
		assert_true(ffix_rel_err(lq, rq, (size_t)n * V) < 1e-4);
		assert_true(ffix_rel_err(lr, lq, (size_t)n * V) > 1e-2);
		kvp_model_close(q);
		kvp_model_close(l);
		kvp_model_close(raw);
		free(buf);
		free(cp);
		free(cr);
		free(lq);
		free(ll);
		free(lr);
		free(rq);
		free(rl);
	}
}

/* ---- hyper-parameters ---- */

static void test_hparams_of_each_variant(void **state)
{
	/*
	 * the metadata reaches the hyper-parameters: architecture and its RoPE layout, head
	 * size (Q and O shapes follow), scaling type, factor, original context, YaRN knobs,
	 * rope_freqs and bias flags, tied output; the derived rotation has the YaRN mscale
	 */
	struct kvp_mkmodel_opts o;
	struct kvp_model *m;
	const struct kvp_model_hparams *hp;
	const struct kvp_weights *w;

	(void)state;
	variant_opts(&o, KVP_GGML_F32, V_BASE);
	m = ffix_model_open(&o);
	hp = kvp_model_hparams(m);
	assert_int_equal(hp->arch, KVP_ARCH_LLAMA);
	assert_int_equal(hp->rope_layout, KVP_ROPE_NORM);
	assert_int_equal(hp->rope_scaling, KVP_ROPE_SCALING_NONE);
	assert_true(hp->rope_factor == 1.0f);
	assert_int_equal(hp->rope_orig_ctx, hp->n_ctx_train);
	assert_int_equal(hp->rope_freqs, 0);
	assert_int_equal(hp->qkv_bias, 0);
	assert_null(kvp_model_weights(m)->rope_freqs.data);
	assert_null(kvp_model_weights(m)->layers[0].bq.data);
	ffix_model_close(m);

	variant_opts(&o, KVP_GGML_F32, V_HEAD_128);
	m = ffix_model_open(&o);
	hp = kvp_model_hparams(m);
	w = kvp_model_weights(m);
	assert_int_equal(hp->head_dim, 128);
	assert_int_equal(hp->n_rot, 128);
	assert_int_equal(w->layers[1].wq.ne1, 4 * 128);
	assert_int_equal(w->layers[1].wk.ne1, 2 * 128);
	assert_int_equal(w->layers[1].wo.ne0, 4 * 128);
	assert_int_equal(w->layers[1].wo.ne1, 256);
	ffix_model_close(m);

	variant_opts(&o, KVP_GGML_F32, V_YARN_TUNED);
	m = ffix_model_open(&o);
	hp = kvp_model_hparams(m);
	assert_int_equal(hp->rope_scaling, KVP_ROPE_SCALING_YARN);
	assert_true(hp->rope_factor == 8.0f);
	assert_int_equal(hp->rope_orig_ctx, 48);
	assert_true(hp->rope_attn_factor == 1.25f);
	assert_true(hp->yarn_beta_fast == 16.0f);
	assert_true(hp->yarn_beta_slow == 2.0f);
	assert_true(fabs(kvp_model_rope(m)->mscale - 1.25 * (1 + 0.1 * log(8.0))) < 1e-6);
	ffix_model_close(m);

	variant_opts(&o, KVP_GGML_F32, V_LINEAR);
	m = ffix_model_open(&o);
	assert_int_equal(kvp_model_hparams(m)->rope_scaling, KVP_ROPE_SCALING_LINEAR);
	assert_true(kvp_model_hparams(m)->rope_factor == 4.0f);
	/* linear: every pair's frequency divided by the factor, no mscale */
	assert_true(fabs(kvp_model_rope(m)->freq[1] - pow(10000.0, -2.0 / 64) / 4) < 1e-12);
	assert_true(kvp_model_rope(m)->mscale == 1.0);
	ffix_model_close(m);

	variant_opts(&o, KVP_GGML_F32, V_ROPE_FREQS);
	m = ffix_model_open(&o);
	assert_int_equal(kvp_model_hparams(m)->rope_freqs, 1);
	assert_int_equal(kvp_model_weights(m)->rope_freqs.ne0, 32);
	ffix_model_close(m);

	variant_opts(&o, KVP_GGML_F32, V_QWEN2);
	m = ffix_model_open(&o);
	hp = kvp_model_hparams(m);
	assert_int_equal(hp->arch, KVP_ARCH_QWEN2);
	assert_int_equal(hp->rope_layout, KVP_ROPE_NEOX);
	assert_int_equal(hp->qkv_bias, 1);
	assert_int_equal(hp->o_bias, 0);
	assert_non_null(kvp_model_weights(m)->layers[1].bv.data);
	assert_int_equal(kvp_model_weights(m)->layers[1].bk.ne0, 2 * 64);
	assert_int_equal(hp->tied_output, 0);
	ffix_model_close(m);

	variant_opts(&o, KVP_GGML_F32, V_QWEN2_YARN);
	m = ffix_model_open(&o);
	hp = kvp_model_hparams(m);
	assert_int_equal(hp->tied_output, 1);
	assert_ptr_equal(kvp_model_weights(m)->output.data, kvp_model_weights(m)->tok_embd.data);
	assert_int_equal(hp->rope_scaling, KVP_ROPE_SCALING_YARN);
	ffix_model_close(m);
}

static void test_yarn_ramp_and_llama3_factors(void **state)
{
	/*
	 * YaRN's correction range for the tinyq head (n_rot 64, base 10000, original
	 * context 64, betas 32 and 1): pairs [0, 9], as floor/ceil of
	 * n_rot ln(ctx / (2 pi beta)) / (2 ln base) give; pairs past it are interpolated
	 * (frequency / factor), pair 0 is kept.  Llama 3.1's factors (8, 1, 4, 8192, base
	 * 500000, head 64): 1 for the fast pairs, 8 for the slow ones, a monotone blend
	 * between, and the blend formula at its first pair.
	 */
	struct kvp_mkmodel_rope_freqs p = { 8.0f, 1.0f, 4.0f, 8192 };
	struct kvp_rope r = KVP_ROPE_INIT;
	double dims[2];
	float ff[32];
	int blended = 0;

	(void)state;
	kvp_rope_yarn_dims(64, 64, 10000.0f, 32.0f, 1.0f, dims);
	assert_true(dims[0] == 0 && dims[1] == 9);
	kvp_rope_yarn_dims(128, 4096, 10000.0f, 32.0f, 1.0f, dims); /* Llama 2 7B's head */
	assert_true(dims[0] == 20 && dims[1] == 46);
	assert_int_equal(kvp_rope_init(&r,
				       &(struct kvp_rope_params){ .n_rot = 64,
								  .layout = KVP_ROPE_NORM,
								  .base = 10000.0f,
								  .scaling = KVP_ROPE_SCALING_YARN,
								  .factor = 4.0f,
								  .orig_ctx = 64,
								  .beta_fast = 32.0f,
								  .beta_slow = 1.0f,
								  .attn_factor = 1.0f }),
			 0);
	assert_true(fabs(r.freq[0] - 1.0) < 1e-12);
	assert_true(fabs(r.freq[20] - pow(10000.0, -40.0 / 64) / 4) < 1e-15);
	assert_true(r.freq[5] < pow(10000.0, -10.0 / 64) &&
		    r.freq[5] > pow(10000.0, -10.0 / 64) / 4);
	assert_true(fabs(r.mscale - (1 + 0.1 * log(4.0))) < 1e-12);
	kvp_rope_deinit(&r);

	kvp_mkmodel_rope_freqs_llama3(ff, 64, 500000.0f, &p);
	assert_true(ff[0] == 1.0f);
	assert_true(ff[31] == 8.0f);
	for (int i = 1; i < 32; i++) {
		assert_true(ff[i] >= ff[i - 1]);
		if (ff[i] > 1.0f && ff[i] < 8.0f) {
			double wave = 2 * M_PI * pow(500000.0, 2.0 * i / 64);
			double a = (8192 / wave - 1) / 3;

			if (!blended++)
				assert_true(fabs(ff[i] - 1 / ((1 - a) / 8 + a)) < 1e-5);
		}
	}
	assert_true(blended >= 1);
}

/* ---- refusals ---- */

/* Open @o and expect -ENOTSUP or -EBADMSG with @needle in the message. */
static void expect_refused(const struct kvp_mkmodel_opts *o, int want, const char *needle)
{
	char err[512] = "";
	struct kvp_model *m = NULL;
	int r = ffix_model_try_open(&m, o, err, sizeof(err));

	if (!r)
		fail_msg("loaded, want refused naming '%s'", needle);
	if (r != want || !strstr(err, needle))
		fail_msg("error %d '%s', want %d naming '%s'", r, err, want, needle);
}

static void test_math_keys_refused_by_name(void **state)
{
	/*
	 * for both architectures, each key on the list that changes the math: at a value
	 * other than its neutral one (or at all, for the refused ones) the file is refused
	 * with -ENOTSUP and the message names the key; at the neutral value it loads; so do
	 * the global keys (split.count, adapter.type); a key under the prefix that is not on
	 * the list is refused too, a key of another prefix is not the loader's business
	 */
	static const char *const archs[] = { "llama", "qwen2" };
	int n_checked = 0;

	(void)state;
	for (int a = 0; a < 2; a++) {
		const struct kvp_arch *ar = kvp_arch_find(archs[a], strlen(archs[a]));
		size_t n_global;
		const struct kvp_meta_key *global = kvp_arch_global_keys(&n_global);

		assert_non_null(ar);
		for (size_t i = 0; i < ar->n_keys + n_global; i++) {
			const struct kvp_meta_key *k = i < ar->n_keys ? &ar->keys[i] :
									&global[i - ar->n_keys];
			char key[128];
			struct kvp_mkmodel_kv kv;
			struct kvp_mkmodel_opts o;

			if (k->use == KVP_META_USED || k->use == KVP_META_INFO)
				continue;
			if (i < ar->n_keys)
				snprintf(key, sizeof(key), "%s.%s", ar->prefix, k->name);
			else
				snprintf(key, sizeof(key), "%s", k->name);
			variant_opts(&o, KVP_GGML_F32, a ? V_QWEN2 : V_BASE);
			o.n_embd = 64; /* tiny's shape: 240 files */
			o.n_ff = 128;
			o.head_dim = 16;
			o.extra = &kv;
			o.n_extra = 1;
			kv = (struct kvp_mkmodel_kv){ key, KVP_GGUF_F32, k->neutral + 1, NULL };
			expect_refused(&o, -ENOTSUP, key);
			kv.type = KVP_GGUF_STRING;
			kv.str = "x";
			expect_refused(&o, -ENOTSUP, key);
			if (k->use == KVP_META_NEUTRAL) {
				kv = (struct kvp_mkmodel_kv){ key, KVP_GGUF_U32, k->neutral, NULL };
				ffix_model_close(ffix_model_open(&o));
			}
			n_checked++;
		}
	}
	print_message("%d math keys refused by name\n", n_checked);
	assert_true(n_checked > 100);
	{
		struct kvp_mkmodel_kv kv[2] = {
			{ "llama.foo_bar", KVP_GGUF_U32, 1, NULL },
			{ "gemma.foo_bar", KVP_GGUF_U32, 1, NULL },
		};
		struct kvp_mkmodel_opts o;

		variant_opts(&o, KVP_GGML_F32, V_BASE);
		o.extra = kv;
		o.n_extra = 1;
		expect_refused(&o, -ENOTSUP, "llama.foo_bar");
		o.extra = kv + 1;
		ffix_model_close(ffix_model_open(&o));
	}
}

static void test_other_refusals(void **state)
{
	/*
	 * a scaling type other than none/linear/yarn, YaRN below factor 1, K and V head
	 * sizes that differ, vocab_size against token_embd, a missing qwen2 bias, and a
	 * tensor no architecture reads: each refused, named; none/linear/yarn load
	 */
	static const char *const ok[] = { "none", "linear", "yarn" };
	struct kvp_mkmodel_opts o;
	struct kvp_mkmodel_kv kv = { "llama.attention.value_length", KVP_GGUF_U32, 32, NULL };
	void *buf;
	size_t len;
	uint8_t *b, *k;
	struct kvp_model *m;
	char err[512];

	(void)state;
	variant_opts(&o, KVP_GGML_F32, V_BASE);
	o.rope_scaling = "longrope";
	expect_refused(&o, -ENOTSUP, "llama.rope.scaling.type 'longrope'");
	for (int i = 0; i < 3; i++) {
		o.rope_scaling = ok[i];
		ffix_model_close(ffix_model_open(&o));
	}
	o.rope_scaling = "yarn";
	o.rope_scaling_factor = 0.5f;
	expect_refused(&o, -ENOTSUP, "llama.rope.scaling.factor");

	variant_opts(&o, KVP_GGML_F32, V_BASE);
	o.extra = &kv; /* head size 64, value_length 32 */
	o.n_extra = 1;
	expect_refused(&o, -ENOTSUP, "llama.attention.value_length 32");
	kv.num = 64; /* equal: fine */
	ffix_model_close(ffix_model_open(&o));

	/* vocab_size 259 -> 258 */
	variant_opts(&o, KVP_GGML_F32, V_BASE);
	assert_int_equal(kvp_mkmodel_write_mem(&buf, &len, &o, NULL, 0), 0);
	b = buf;
	k = memmem(b, len, "llama.vocab_size", 16);
	assert_non_null(k);
	assert_int_equal(k[16 + 4], 259 & 0xff);
	k[16 + 4]--;
	assert_int_equal(kvp_model_open_mem(&m, b, len, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "llama.vocab_size 258"));
	free(buf);

	/* a qwen2 file without blk.1.attn_k.bias; a llama file with blk.1.attn_x.bias */
	variant_opts(&o, KVP_GGML_F32, V_QWEN2);
	assert_int_equal(kvp_mkmodel_write_mem(&buf, &len, &o, NULL, 0), 0);
	b = buf;
	k = memmem(b, len, "blk.1.attn_k.bias", 17);
	assert_non_null(k);
	k[11] = 'x';
	assert_int_equal(kvp_model_open_mem(&m, b, len, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "blk.1.attn_k.bias"));
	free(buf);
	variant_opts(&o, KVP_GGML_F32, V_LLAMA_BIAS);
	assert_int_equal(kvp_mkmodel_write_mem(&buf, &len, &o, NULL, 0), 0);
	b = buf;
	k = memmem(b, len, "blk.1.attn_k.bias", 17);
	assert_non_null(k);
	k[11] = 'x';
	assert_int_equal(kvp_model_open_mem(&m, b, len, err, sizeof(err)), -ENOTSUP);
	assert_non_null(strstr(err, "blk.1.attn_x.bias"));
	free(buf);
}

/* ---- fingerprints ---- */

static void fp_of(const struct kvp_mkmodel_opts *o, uint8_t *fp)
{
	struct kvp_model *m = ffix_model_open(o);

	memcpy(fp, kvp_model_fingerprint(m), KVP_MODEL_FP_BYTES);
	ffix_model_close(m);
}

static void test_fingerprints_follow_math(void **state)
{
	/*
	 * every variant has its own fingerprint, and so does each change of one math
	 * parameter that leaves the tensors alone (scaling type, factor, original context,
	 * attention factor, YaRN betas); the qwen2 file read as llama (same tensor bytes, the
	 * other RoPE layout) hashes apart from the qwen2 reading and equal to the identical
	 * llama file with biases; the same options give the same fingerprint
	 */
	enum { N_EXTRA = 6 };
	static const struct kvp_mkmodel_kv knobs[] = {
		{ "llama.rope.scaling.attn_factor", KVP_GGUF_F32, 1.5, NULL },
		{ "llama.rope.scaling.yarn_beta_fast", KVP_GGUF_F32, 31, NULL },
		{ "llama.rope.scaling.yarn_beta_slow", KVP_GGUF_F32, 1.5, NULL },
	};
	uint8_t fps[V__COUNT + N_EXTRA][KVP_MODEL_FP_BYTES], again[KVP_MODEL_FP_BYTES];
	struct kvp_mkmodel_opts o;
	int n = 0;

	(void)state;
	for (int v = 0; v < V__COUNT; v++) {
		variant_opts(&o, KVP_GGML_F32, v);
		fp_of(&o, fps[n++]);
	}
	variant_opts(&o, KVP_GGML_F32, V_YARN);
	o.rope_scaling_factor = 4.5f;
	fp_of(&o, fps[n++]);
	variant_opts(&o, KVP_GGML_F32, V_YARN);
	o.rope_orig_ctx = 65;
	fp_of(&o, fps[n++]);
	variant_opts(&o, KVP_GGML_F32, V_YARN);
	o.rope_scaling = "linear"; /* same factor, other scaling */
	fp_of(&o, fps[n++]);
	for (int i = 0; i < 3; i++) {
		variant_opts(&o, KVP_GGML_F32, V_YARN);
		o.extra = &knobs[i];
		o.n_extra = 1;
		fp_of(&o, fps[n++]);
	}
	assert_int_equal(n, V__COUNT + N_EXTRA);
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (!memcmp(fps[i], fps[j], KVP_MODEL_FP_BYTES))
				fail_msg("fingerprints %d and %d are equal", i, j);
	{ /* the qwen2 file read as llama: same bytes of every tensor, other RoPE layout */
		struct kvp_gguf *g;
		struct kvp_model *m;
		void *buf;
		size_t len;

		variant_opts(&o, KVP_GGML_F32, V_QWEN2);
		assert_int_equal(kvp_mkmodel_write_mem(&buf, &len, &o, NULL, 0), 0);
		assert_int_equal(kvp_gguf_parse(&g, buf, len, NULL, 0), 0);
		replace_all(buf, g->data_off, "qwen2", "llama");
		kvp_gguf_close(g);
		assert_int_equal(kvp_model_open_mem(&m, buf, len, NULL, 0), 0);
		assert_memory_not_equal(kvp_model_fingerprint(m), fps[V_QWEN2], KVP_MODEL_FP_BYTES);
		assert_memory_equal(kvp_model_fingerprint(m), fps[V_LLAMA_BIAS],
				    KVP_MODEL_FP_BYTES);
		kvp_model_close(m);
		free(buf);
	}
	variant_opts(&o, KVP_GGML_F32, V_QWEN2_YARN);
	fp_of(&o, again);
	assert_memory_equal(again, fps[V_QWEN2_YARN], KVP_MODEL_FP_BYTES);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hparams_of_each_variant),
		cmocka_unit_test(test_yarn_ramp_and_llama3_factors),
		cmocka_unit_test(test_variants_match_ref_f32),
		cmocka_unit_test(test_variants_match_ref_every_kernel_table),
		cmocka_unit_test(test_rope_variants_change_the_output),
		cmocka_unit_test(test_prefix_splits_equal_one_shot),
		cmocka_unit_test(test_neox_equals_permuted_llama),
		cmocka_unit_test(test_math_keys_refused_by_name),
		cmocka_unit_test(test_other_refusals),
		cmocka_unit_test(test_fingerprints_follow_math),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
