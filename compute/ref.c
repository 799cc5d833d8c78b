/* SPDX-License-Identifier: MIT */
/*
 * ref.c - naive forward for tests (every architecture of compute/arch.h: they differ
 * only in biases and RoPE): every position of the sequence recomputed,
 * K and V kept in plain (position, kv_dim) arrays, every sum a double loop, on weights
 * dequantized to f32 by the reference dequantizer (compute/kernels/quant.c) - so it
 * shares no kernel with the fast path, and for integer types it is exact where the fast
 * path quantizes its activations.  Any thread.
 */
#include "compute/ref.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kernels/kernels.h"
#include "compute/model.h"
#include "compute/rope.h"

/*
 * out (d_out) = W (d_out, d_in) @ x (d_in); with @round, x first rounded as the fast
 * path rounds the input of a matrix of @type (a copy: x is read again by others).
 */
static void matvec_t(float *out, const float *W, const float *xin, size_t d_out, size_t d_in,
		     uint32_t type, unsigned round)
{
	float x[d_in]; /* d_in <= n_ff: tens of KiB at most */
	uint32_t act = kvp_qtype(type)->act;

	memcpy(x, xin, d_in * sizeof(float));
	if ((round & KVP_REF_ROUND_Q8K) && type >= KVP_GGML_Q2_K && type <= KVP_GGML_Q6_K)
		act = KVP_ACT_Q8K;
	if (round & KVP_REF_ROUND_ACT)
		kvp_act_round_ref(x, act, d_in);
	for (size_t o = 0; o < d_out; o++) {
		double s = 0;

		for (size_t i = 0; i < d_in; i++)
			s += (double)W[o * d_in + i] * x[i];
		out[o] = (float)s;
	}
}

static void rmsnorm(float *out, const float *x, const float *w, size_t n, float eps)
{
	double ss = 0;

	for (size_t i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	double scale = 1.0 / sqrt(ss / n + eps);

	for (size_t i = 0; i < n; i++)
		out[i] = (float)(x[i] * scale * w[i]);
}

/*
 * RoPE of @n_heads heads at @pos, straight from llama.cpp's formulas (rope.h states
 * them), in double and pair by pair: the extrapolated angle t, the interpolated one
 * s t, YaRN's ramp mixing them, cos and sin times mscale; pairs (2i, 2i+1) or, NEOX,
 * (i, i + n_rot/2).  Written independently of rope.c (nothing precomputed) on purpose.
 */
static void rope(float *x, uint32_t n_heads, const struct kvp_model_hparams *hp, const float *ff,
		 uint32_t pos)
{
	uint32_t n = hp->n_rot, hd = hp->head_dim;
	int yarn = hp->rope_scaling == KVP_ROPE_SCALING_YARN;
	double s = hp->rope_scaling == KVP_ROPE_SCALING_NONE ? 1.0 : 1.0 / hp->rope_factor;
	double mscale = hp->rope_attn_factor, lo = 0, hi = 0;

	if (yarn) {
		/* the pair indices turning beta_fast and beta_slow times over orig_ctx */
		double lb = 2 * log(hp->rope_base);

		lo = floor(n * log(hp->rope_orig_ctx / (hp->yarn_beta_fast * 2 * M_PI)) / lb);
		hi = ceil(n * log(hp->rope_orig_ctx / (hp->yarn_beta_slow * 2 * M_PI)) / lb);
		lo = fmax(0, lo);
		hi = fmin(n - 1, hi);
		mscale *= 1 + 0.1 * log(1 / s);
	}
	for (uint32_t h = 0; h < n_heads; h++) {
		for (uint32_t i = 0; i < n / 2; i++) {
			double t = pos * pow(hp->rope_base, -2.0 * i / n) / (ff ? ff[i] : 1.0);
			double th = s * t;
			size_t a = h * hd + (hp->rope_layout == KVP_ROPE_NEOX ? i : 2 * i);
			size_t b = h * hd +
				   (hp->rope_layout == KVP_ROPE_NEOX ? i + n / 2 : 2 * i + 1);
			double xa = x[a], xb = x[b];

			if (yarn) {
				double y = (i - lo) / fmax(0.001, hi - lo);
				double mix = 1 - fmin(1, fmax(0, y));

				th = th * (1 - mix) + t * mix;
			}
			x[a] = (float)((xa * cos(th) - xb * sin(th)) * mscale);
			x[b] = (float)((xa * sin(th) + xb * cos(th)) * mscale);
		}
	}
}

/* x (n) += bias, when there is one */
static void add_bias(float *x, const struct kvp_tensor *b)
{
	const float *v = b->data;

	for (size_t i = 0; v && i < b->ne0; i++)
		x[i] += v[i];
}

/* A malloc'd f32 copy of @t (NULL on allocation failure). */
static float *deq(const struct kvp_tensor *t)
{
	float *f = malloc(t->ne0 * t->ne1 * sizeof(float));

	if (f)
		kvp_dequant_ref(f, t->data, t->type, t->ne0 * t->ne1);
	return f;
}

/* One layer's matrices in f32. */
struct ref_layer {
	float *wq, *wk, *wv, *wo, *w_gate, *w_up, *w_down;
};

static void ref_layer_free(struct ref_layer *R)
{
	free(R->wq);
	free(R->wk);
	free(R->wv);
	free(R->wo);
	free(R->w_gate);
	free(R->w_up);
	free(R->w_down);
	memset(R, 0, sizeof(*R));
}

static int ref_layer_load(struct ref_layer *R, const struct kvp_layer_weights *L)
{
	R->wq = deq(&L->wq);
	R->wk = deq(&L->wk);
	R->wv = deq(&L->wv);
	R->wo = deq(&L->wo);
	R->w_gate = deq(&L->w_gate);
	R->w_up = deq(&L->w_up);
	R->w_down = deq(&L->w_down);
	if (!R->wq || !R->wk || !R->wv || !R->wo || !R->w_gate || !R->w_up || !R->w_down) {
		ref_layer_free(R);
		return -ENOMEM;
	}
	return 0;
}

unsigned kvp_ref_act_flags(const struct kvp_kernels *k)
{
	return KVP_REF_ROUND_ACT | (k->act[KVP_GGML_Q4_K] == KVP_ACT_Q8K ? KVP_REF_ROUND_Q8K : 0);
}

int kvp_ref_forward(const struct kvp_model *m, const int32_t *tokens, uint32_t n, float *logits)
{
	return kvp_ref_forward_opts(m, tokens, n, logits, 0);
}

int kvp_ref_forward_opts(const struct kvp_model *m, const int32_t *tokens, uint32_t n,
			 float *logits, unsigned flags)
{
	const struct kvp_model_hparams *hp = kvp_model_hparams(m);
	const struct kvp_weights *w = kvp_model_weights(m);
	size_t E = hp->n_embd, hd = hp->head_dim, qd = hp->n_heads * hd;
	size_t kvd = hp->n_kv_heads * hd, F = hp->n_ff, grp = hp->n_heads / hp->n_kv_heads;
	float *x = malloc(n * E * sizeof(float)), *xn = malloc(E * sizeof(float));
	float *q = malloc(n * qd * sizeof(float)), *K = malloc(n * kvd * sizeof(float));
	float *V = malloc(n * kvd * sizeof(float)), *att = malloc(qd * sizeof(float));
	float *tmp = malloc((E > F ? E : F) * sizeof(float)), *g = malloc(F * sizeof(float));
	float *u = malloc(F * sizeof(float));
	double *sc = malloc(n * sizeof(double));
	float *emb = deq(&w->tok_embd), *out = deq(&w->output);
	struct ref_layer R = { 0 }, *L = &R;
	const float *ff = w->rope_freqs.data;
	int r = -ENOMEM;
	unsigned rd = flags;

	if (!x || !xn || !q || !K || !V || !att || !tmp || !g || !u || !sc || !emb || !out)
		goto out;
	for (uint32_t p = 0; p < n; p++)
		memcpy(x + p * E, emb + (size_t)tokens[p] * E, E * sizeof(float));
	for (uint32_t l = 0; l < hp->n_layers; l++) {
		const struct kvp_layer_weights *T = &w->layers[l];
		const float *attn_norm = w->layers[l].attn_norm.data;
		const float *ffn_norm = w->layers[l].ffn_norm.data;

		ref_layer_free(&R);
		if (ref_layer_load(&R, &w->layers[l]))
			goto out;

		for (uint32_t p = 0; p < n; p++) {
			rmsnorm(xn, x + p * E, attn_norm, E, hp->rms_eps);
			matvec_t(q + p * qd, L->wq, xn, qd, E, T->wq.type, rd);
			matvec_t(K + p * kvd, L->wk, xn, kvd, E, T->wk.type, rd);
			matvec_t(V + p * kvd, L->wv, xn, kvd, E, T->wv.type, rd);
			add_bias(q + p * qd, &T->bq);
			add_bias(K + p * kvd, &T->bk);
			add_bias(V + p * kvd, &T->bv);
			rope(q + p * qd, hp->n_heads, hp, ff, p);
			rope(K + p * kvd, hp->n_kv_heads, hp, ff, p);
		}
		for (uint32_t p = 0; p < n; p++) {
			for (size_t h = 0; h < hp->n_heads; h++) {
				size_t kh = h / grp;
				double mx = -INFINITY, sum = 0;

				for (uint32_t t = 0; t <= p; t++) {
					double s = 0;

					for (size_t d = 0; d < hd; d++)
						s += (double)q[p * qd + h * hd + d] *
						     K[t * kvd + kh * hd + d];
					sc[t] = s / sqrt((double)hd);
					mx = sc[t] > mx ? sc[t] : mx;
				}
				for (uint32_t t = 0; t <= p; t++) {
					sc[t] = exp(sc[t] - mx);
					sum += sc[t];
				}
				for (size_t d = 0; d < hd; d++) {
					double o = 0;

					for (uint32_t t = 0; t <= p; t++)
						o += sc[t] / sum * V[t * kvd + kh * hd + d];
					att[h * hd + d] = (float)o;
				}
			}
			matvec_t(tmp, L->wo, att, E, qd, T->wo.type, rd);
			add_bias(tmp, &T->bo);
			for (size_t i = 0; i < E; i++)
				x[p * E + i] += tmp[i];
			rmsnorm(xn, x + p * E, ffn_norm, E, hp->rms_eps);
			matvec_t(g, L->w_gate, xn, F, E, T->w_gate.type, rd);
			matvec_t(u, L->w_up, xn, F, E, T->w_up.type, rd);
			for (size_t i = 0; i < F; i++)
				g[i] = (float)(g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
			matvec_t(tmp, L->w_down, g, E, F, T->w_down.type, rd);
			for (size_t i = 0; i < E; i++)
				x[p * E + i] += tmp[i];
		}
	}
	for (uint32_t p = 0; p < n; p++) {
		rmsnorm(xn, x + p * E, w->output_norm.data, E, hp->rms_eps);
		matvec_t(logits + (size_t)p * hp->n_vocab, out, xn, hp->n_vocab, E, w->output.type,
			 rd);
	}
	r = 0;
out:
	free(x);
	free(xn);
	free(q);
	free(K);
	free(V);
	free(att);
	free(tmp);
	free(g);
	free(u);
	free(sc);
	free(emb);
	free(out);
	ref_layer_free(&R);
	return r;
}
