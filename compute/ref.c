/* SPDX-License-Identifier: MIT */
/*
 * ref.c - naive Llama forward for tests: every position of the sequence recomputed,
 * K and V kept in plain (position, kv_dim) arrays, every sum a double loop.  It shares
 * no kernel with the fast path, only the weights.  Any thread.
 */
#include "compute/ref.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/model.h"

/* out (d_out) = W (d_out, d_in) @ x (d_in) */
static void matvec(float *out, const float *W, const float *x, size_t d_out, size_t d_in)
{
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

/* rotate pairs (2i, 2i+1) of each head by pos * base^(-2i/n_rot) */
static void rope(float *x, uint32_t n_heads, uint32_t hd, uint32_t n_rot, uint32_t pos,
		 float base)
{
	for (uint32_t h = 0; h < n_heads; h++) {
		for (uint32_t i = 0; i < n_rot / 2; i++) {
			double th = pos * pow(base, -2.0 * i / n_rot);
			double a = x[h * hd + 2 * i], b = x[h * hd + 2 * i + 1];

			x[h * hd + 2 * i] = (float)(a * cos(th) - b * sin(th));
			x[h * hd + 2 * i + 1] = (float)(a * sin(th) + b * cos(th));
		}
	}
}

int kvp_ref_forward(const struct kvp_model *m, const int32_t *tokens, uint32_t n, float *logits)
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
	int r = -ENOMEM;

	if (!x || !xn || !q || !K || !V || !att || !tmp || !g || !u || !sc)
		goto out;
	for (uint32_t p = 0; p < n; p++)
		memcpy(x + p * E, w->tok_embd + (size_t)tokens[p] * E, E * sizeof(float));
	for (uint32_t l = 0; l < hp->n_layers; l++) {
		const struct kvp_layer_weights *L = &w->layers[l];

		for (uint32_t p = 0; p < n; p++) {
			rmsnorm(xn, x + p * E, L->attn_norm, E, hp->rms_eps);
			matvec(q + p * qd, L->wq, xn, qd, E);
			matvec(K + p * kvd, L->wk, xn, kvd, E);
			matvec(V + p * kvd, L->wv, xn, kvd, E);
			rope(q + p * qd, hp->n_heads, hd, hp->n_rot, p, hp->rope_base);
			rope(K + p * kvd, hp->n_kv_heads, hd, hp->n_rot, p, hp->rope_base);
		}
		for (uint32_t p = 0; p < n; p++) {
			for (size_t h = 0; h < hp->n_heads; h++) {
				size_t kh = h / grp;
				double mx = -INFINITY, sum = 0;

				for (uint32_t t = 0; t <= p; t++) {
					double s = 0;

					for (size_t d = 0; d < hd; d++)
						s += (double)q[p * qd + h * hd + d] * K[t * kvd + kh * hd + d];
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
			matvec(tmp, L->wo, att, E, qd);
			for (size_t i = 0; i < E; i++)
				x[p * E + i] += tmp[i];
			rmsnorm(xn, x + p * E, L->ffn_norm, E, hp->rms_eps);
			matvec(g, L->w_gate, xn, F, E);
			matvec(u, L->w_up, xn, F, E);
			for (size_t i = 0; i < F; i++)
				g[i] = (float)(g[i] / (1.0 + exp(-(double)g[i])) * u[i]);
			matvec(tmp, L->w_down, g, E, F);
			for (size_t i = 0; i < E; i++)
				x[p * E + i] += tmp[i];
		}
	}
	for (uint32_t p = 0; p < n; p++) {
		rmsnorm(xn, x + p * E, w->output_norm, E, hp->rms_eps);
		matvec(logits + (size_t)p * hp->n_vocab, w->output, xn, hp->n_vocab, E);
	}
	r = 0;
out:
	free(x); free(xn); free(q); free(K); free(V); free(att); free(tmp); free(g); free(u);
	free(sc);
	return r;
}
