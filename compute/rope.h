/* SPDX-License-Identifier: MIT */
/*
 * rope.h - rotary position embedding with every variant the supported models use:
 * the pair layout (adjacent pairs for GGUF "llama", halves for "qwen2"), per-pair
 * frequency factors (Llama 3.1's rope_freqs.weight), and position scaling (linear, YaRN).
 *
 * The formulas are llama.cpp's (ggml's rope op), which GGUF files are made for.  Pair i
 * of n_rot/2 turns by theta_i, with
 *
 *	t_i = pos * base^(-2i / n_rot) / ff_i	(ff_i: frequency factor, 1 when none)
 *	u_i = s * t_i				(s = 1 / factor: linear, YaRN; 1: none)
 *	theta_i = u_i * (1 - r_i) + t_i * r_i	(YaRN; theta_i = u_i otherwise)
 *	r_i = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1)
 *
 * where [lo, hi] are YaRN's correction dimensions of beta_fast and beta_slow
 * (kvp_rope_yarn_dims()).  Cosine and sine are both multiplied by mscale = attn_factor,
 * times (1 + 0.1 ln(factor)) under YaRN, which scales the attention logits by mscale^2
 * (the YaRN paper's attention temperature).  Dimensions past n_rot are left alone.
 *
 * Everything but the position is folded at init into one angular frequency per pair
 * (theta_i = pos * freq_i: every term above is linear in pos) and the scale, so the
 * per-token work is n_rot/2 sin/cos pairs and a rotation.  Immutable after init; any
 * thread.
 */
#ifndef KVP_COMPUTE_ROPE_H
#define KVP_COMPUTE_ROPE_H

#include <stdint.h>

/**
 * enum kvp_rope_layout - which two dimensions of a head one rotation pairs
 * @KVP_ROPE_NORM: (2i, 2i+1): GGUF "llama" (its converter permutes the Q/K rows so)
 * @KVP_ROPE_NEOX: (i, i + n_rot/2): GPT-NeoX / Hugging Face "rotate_half" order, as
 *                 GGUF "qwen2" keeps it
 */
enum kvp_rope_layout { KVP_ROPE_NORM = 0, KVP_ROPE_NEOX = 1, KVP_ROPE_LAYOUT__COUNT };

/**
 * enum kvp_rope_scaling - <arch>.rope.scaling.type
 * @KVP_ROPE_SCALING_NONE:   positions as they are
 * @KVP_ROPE_SCALING_LINEAR: positions divided by the factor ("position interpolation")
 * @KVP_ROPE_SCALING_YARN:   YaRN (Peng et al. 2023): interpolation for the slow pairs,
 *                           none for the fast ones, a ramp between, plus mscale
 */
enum kvp_rope_scaling {
	KVP_ROPE_SCALING_NONE = 0,
	KVP_ROPE_SCALING_LINEAR = 1,
	KVP_ROPE_SCALING_YARN = 2,
	KVP_ROPE_SCALING__COUNT
};

/* Defaults of YaRN's ramp bounds (llama.cpp's and the paper's alpha / beta). */
#define KVP_YARN_BETA_FAST 32.0f
#define KVP_YARN_BETA_SLOW 1.0f

/**
 * struct kvp_rope_params - what a model file says about RoPE
 * @n_rot:       dimensions rotated per head (even, >= 2)
 * @layout:      enum kvp_rope_layout
 * @base:        frequency base (rope.freq_base)
 * @scaling:     enum kvp_rope_scaling
 * @factor:      scaling factor (> 0; 1 means none)
 * @orig_ctx:    YaRN: the context length the model was trained with (> 0)
 * @beta_fast, @beta_slow: YaRN ramp bounds, in rotations over orig_ctx
 * @attn_factor: extra scale of cos and sin (rope.scaling.attn_factor; 1 when absent)
 * @freq_factors: n_rot/2 factors dividing the frequencies, or NULL (borrowed: read at
 *               init only)
 */
struct kvp_rope_params {
	uint32_t n_rot;
	uint32_t layout;
	float base;
	uint32_t scaling;
	float factor;
	uint32_t orig_ctx;
	float beta_fast;
	float beta_slow;
	float attn_factor;
	const float *freq_factors;
};

/**
 * struct kvp_rope - the derived rotation, ready per token
 * @n_rot:  as the params
 * @layout: enum kvp_rope_layout
 * @mscale: scale of cos and sin
 * @freq:   n_rot/2 angular frequencies (radians per position), owned
 */
struct kvp_rope {
	uint32_t n_rot;
	uint32_t layout;
	double mscale;
	double *freq;
};

#define KVP_ROPE_INIT \
	{ \
		.n_rot = 0, .freq = 0 \
	}

/**
 * kvp_rope_init() - derive the per-pair frequencies and the scale
 * @r: out; released with kvp_rope_deinit() (safe after a failed init)
 * @p: the parameters
 *
 * Return: 0; -EINVAL for an odd or zero n_rot, an unknown layout or scaling, a base
 * <= 1, a factor <= 0, a zero orig_ctx under YaRN, a frequency factor that is not
 * finite and positive; -ENOMEM.
 */
int kvp_rope_init(struct kvp_rope *r, const struct kvp_rope_params *p);

/* kvp_rope_deinit() - free; safe on a zeroed or failed @r. */
void kvp_rope_deinit(struct kvp_rope *r);

/*
 * kvp_rope_yarn_dims() - YaRN's correction range [dims[0], dims[1]] in pair indices:
 * the pairs that turn more than @beta_fast times over @orig_ctx positions keep their
 * frequency, those turning fewer than @beta_slow times are fully interpolated (ggml's
 * ggml_rope_yarn_corr_dims: floor / ceil, clamped to [0, n_rot - 1]).
 */
void kvp_rope_yarn_dims(uint32_t n_rot, uint32_t orig_ctx, float base, float beta_fast,
			float beta_slow, double dims[2]);

/*
 * kvp_rope_cs() - cos and sin of every pair at @pos, each times mscale:
 * cs[2i] = mscale cos(pos freq_i), cs[2i+1] = mscale sin(pos freq_i), i < n_rot / 2.
 */
void kvp_rope_cs(const struct kvp_rope *r, float *restrict cs, uint32_t pos);

/*
 * kvp_rope_rotate() - rotate @n_heads heads of @head_dim at @x by the angles of @cs
 * (kvp_rope_cs()), in the rope's layout; dimensions n_rot .. head_dim - 1 unchanged.
 */
void kvp_rope_rotate(const struct kvp_rope *r, float *restrict x, uint32_t n_heads,
		     uint32_t head_dim, const float *restrict cs);

/* kvp_rope_layout_name() / kvp_rope_scaling_name() - "norm", "neox"; "none", "linear", "yarn". */
const char *kvp_rope_layout_name(uint32_t layout);
const char *kvp_rope_scaling_name(uint32_t scaling);

#endif /* KVP_COMPUTE_ROPE_H */
