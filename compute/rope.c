/* SPDX-License-Identifier: MIT */
/*
 * rope.c - RoPE frequencies, scaling and the two pair layouts (see rope.h for the
 * formulas and where they come from).
 *
 * Derived values are computed in double once at init; per token only the angles
 * pos * freq_i are formed (in double, so a position in the millions keeps its
 * fraction of a turn) and rounded to float with their sine and cosine.
 */
#include "compute/rope.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "compute/kernels/kernels.h"

/* Pair index at which a pair turns @turns times over @orig_ctx positions. */
static double corr_dim(uint32_t n_rot, uint32_t orig_ctx, double turns, double base)
{
	return n_rot * log(orig_ctx / (turns * 2 * M_PI)) / (2 * log(base));
}

void kvp_rope_yarn_dims(uint32_t n_rot, uint32_t orig_ctx, float base, float beta_fast,
			float beta_slow, double dims[2])
{
	double lo = floor(corr_dim(n_rot, orig_ctx, beta_fast, base));
	double hi = ceil(corr_dim(n_rot, orig_ctx, beta_slow, base));

	dims[0] = lo > 0 ? lo : 0;
	dims[1] = hi < n_rot - 1 ? hi : n_rot - 1;
}

int kvp_rope_init(struct kvp_rope *r, const struct kvp_rope_params *p)
{
	uint32_t half = p->n_rot / 2;
	double s = 1.0, dims[2] = { 0, 0 };

	r->freq = NULL;
	if (!p->n_rot || p->n_rot % 2 || p->layout >= KVP_ROPE_LAYOUT__COUNT ||
	    p->scaling >= KVP_ROPE_SCALING__COUNT || !(p->base > 1.0f) || !isfinite(p->base) ||
	    !(p->factor > 0.0f) || !isfinite(p->factor) || !(p->attn_factor > 0.0f) ||
	    !isfinite(p->attn_factor))
		return -EINVAL;
	if (p->scaling == KVP_ROPE_SCALING_YARN &&
	    (!p->orig_ctx || !(p->beta_fast > 0.0f) || !(p->beta_slow > 0.0f) ||
	     !isfinite(p->beta_fast) || !isfinite(p->beta_slow)))
		return -EINVAL;
	for (uint32_t i = 0; p->freq_factors && i < half; i++)
		if (!(p->freq_factors[i] > 0.0f) || !isfinite(p->freq_factors[i]))
			return -EINVAL;
	r->freq = malloc(half * sizeof(*r->freq));
	if (!r->freq)
		return -ENOMEM;
	r->n_rot = p->n_rot;
	r->layout = p->layout;
	r->mscale = p->attn_factor;
	if (p->scaling != KVP_ROPE_SCALING_NONE)
		s = 1.0 / p->factor;
	if (p->scaling == KVP_ROPE_SCALING_YARN) {
		kvp_rope_yarn_dims(p->n_rot, p->orig_ctx, p->base, p->beta_fast, p->beta_slow,
				   dims);
		r->mscale *= 1.0 + 0.1 * log(p->factor);
	}
	for (uint32_t i = 0; i < half; i++) {
		double f = pow(p->base, -2.0 * i / p->n_rot);

		if (p->freq_factors)
			f /= p->freq_factors[i];
		if (p->scaling == KVP_ROPE_SCALING_YARN) {
			double span = dims[1] - dims[0] > 0.001 ? dims[1] - dims[0] : 0.001;
			double y = (i - dims[0]) / span;
			double ramp = 1.0 - (y < 0 ? 0 : y > 1 ? 1 : y);

			/* pos * f * (s (1 - ramp) + ramp): interpolated and kept, mixed */
			r->freq[i] = f * (s * (1.0 - ramp) + ramp);
		} else {
			r->freq[i] = f * s;
		}
	}
	return 0;
}

void kvp_rope_deinit(struct kvp_rope *r)
{
	free(r->freq);
	r->freq = NULL;
}

void kvp_rope_cs(const struct kvp_rope *r, float *restrict cs, uint32_t pos)
{
	for (uint32_t i = 0; i < r->n_rot / 2; i++) {
		double th = (double)pos * r->freq[i];

		cs[2 * i] = (float)(cos(th) * r->mscale);
		cs[2 * i + 1] = (float)(sin(th) * r->mscale);
	}
}

void kvp_rope_rotate(const struct kvp_rope *r, float *restrict x, uint32_t n_heads,
		     uint32_t head_dim, const float *restrict cs)
{
	uint32_t half = r->n_rot / 2;

	if (r->layout == KVP_ROPE_NORM) {
		/* the kernels' rotation is the adjacent-pair one; cs carries the scale */
		kvp_rope_apply(x, n_heads, head_dim, r->n_rot, cs);
		return;
	}
	for (uint32_t h = 0; h < n_heads; h++) {
		float *v = x + (size_t)h * head_dim;

		for (uint32_t i = 0; i < half; i++) {
			float c = cs[2 * i], s = cs[2 * i + 1];
			float a = v[i], b = v[i + half];

			v[i] = a * c - b * s;
			v[i + half] = a * s + b * c;
		}
	}
}

const char *kvp_rope_layout_name(uint32_t layout)
{
	static const char *const names[KVP_ROPE_LAYOUT__COUNT] = { "norm", "neox" };

	return layout < KVP_ROPE_LAYOUT__COUNT ? names[layout] : "?";
}

const char *kvp_rope_scaling_name(uint32_t scaling)
{
	static const char *const names[KVP_ROPE_SCALING__COUNT] = { "none", "linear", "yarn" };

	return scaling < KVP_ROPE_SCALING__COUNT ? names[scaling] : "?";
}
