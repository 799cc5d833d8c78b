/* SPDX-License-Identifier: MIT */
/*
 * mkmodel.h - write synthetic Llama/Qwen2 GGUF models with seeded random weights.
 *
 * The files are ordinary GGUF v3 "llama" models with a byte-level vocabulary (<unk>,
 * <s>, </s>, then the 256 byte tokens <0x00>..<0xFF>) written as a llama-style
 * tokenizer, so they load in other GGUF tools too.  Weights are uniform with variance
 * 1 / fan_in (the residual stream keeps unit scale through every projection), norms are
 * 1, so activations stay well-behaved; an untied output matrix is pushed away from each
 * token's own embedding so greedy output does not settle on repeating one token.
 * The same options and seed always give the same bytes.
 */
#ifndef KVP_COMPUTE_MKMODEL_H
#define KVP_COMPUTE_MKMODEL_H

#include <stddef.h>
#include <stdint.h>

struct kvp_mkmodel_vocab;

#include "compute/gguf.h"

/*
 * Mixed-type recipes, after llama.cpp's: most matrices in the base K type; attn_v and
 * ffn_down in Q6_K for the first and last eighth of the layers and every third one
 * between (the *_K_M "more bits" rule); the output matrix in Q6_K.  Values are above
 * every GGML type.
 */
enum kvp_mkmodel_recipe {
	KVP_MKMODEL_Q4_K_M = 0x100,
	KVP_MKMODEL_Q5_K_M = 0x101,
	KVP_MKMODEL_Q4_K_S = 0x102, /* Q4_K everywhere but the output (Q6_K) */
};

/**
 * struct kvp_mkmodel_rope_freqs - Llama 3.1's RoPE frequency factors, written as the
 * rope_freqs.weight tensor (n_rot/2 f32) the way the GGUF converter computes them from
 * the Hugging Face "llama3" rope_scaling: pair i of frequency w_i = base^(-2i/n_rot) and
 * wavelength L_i = 2 pi / w_i gets factor 1 when L_i < @orig_ctx / @high_freq_factor,
 * @factor when L_i > @orig_ctx / @low_freq_factor, and 1 / ((1 - a) / factor + a), with
 * a = (@orig_ctx / L_i - low) / (high - low), between.  Llama 3.1: 8, 1, 4, 8192.
 * @factor: 0 writes no tensor
 */
struct kvp_mkmodel_rope_freqs {
	float factor;
	float low_freq_factor;
	float high_freq_factor;
	uint32_t orig_ctx;
};

/**
 * struct kvp_mkmodel_kv - one more metadata key to write (tests of the loader's refusals)
 * @key:  full name
 * @type: KVP_GGUF_U32, KVP_GGUF_I32, KVP_GGUF_F32, KVP_GGUF_BOOL or KVP_GGUF_STRING
 * @num:  the value of a number or boolean (converted to @type)
 * @str:  the value of a string
 */
struct kvp_mkmodel_kv {
	const char *key;
	uint32_t type;
	double num;
	const char *str;
};

/**
 * struct kvp_mkmodel_opts - shape and contents of a synthetic model
 * @name:       general.name
 * @n_embd, @n_layers, @n_heads, @n_kv_heads, @n_ff: the shape (n_embd % n_heads == 0,
 *              n_heads % n_kv_heads == 0, head_dim even)
 * @n_ctx:      llama.context_length
 * @tied:       nonzero: no output.weight (token_embd is reused)
 * @type:       enum kvp_ggml_type of the matrices (norms are always f32), or an enum
 *              kvp_mkmodel_recipe mixing types per tensor; the legacy quants need n_embd
 *              and n_ff multiples of 32, the K-quants multiples of 256
 * @seed:       PRNG seed
 * @rope_base:  llama.rope.freq_base
 * @rms_eps:    llama.attention.layer_norm_rms_epsilon
 * @vocab:      a real tokenizer to write (borrowed; compute/mkvocab.h), or NULL for the
 *              synthetic byte-level one; the vocabulary dimension follows it
 * @chat_template: tokenizer.chat_template (borrowed), or NULL (then @vocab's, if any)
 * @arch:       general.architecture and key prefix: NULL or "llama", or "qwen2" (which
 *              also gets Q/K/V biases, and is read with the NEOX RoPE layout)
 * @head_dim:   0: n_embd / n_heads; else the head size, written as attention.key_length
 *              and value_length (Q and the attention output are n_heads * head_dim wide)
 * @qkv_bias:   nonzero: Q/K/V biases for a llama file too (blk.N.attn_{q,k,v}.bias)
 * @rope_freqs: frequency factors to write (factor 0: none)
 * @rope_scaling: rope.scaling.type to write ("none", "linear", "yarn"; anything else is
 *              written as given, for refusal tests), or NULL for no key
 * @rope_scaling_factor: rope.scaling.factor, or 0 for no key
 * @rope_orig_ctx: rope.scaling.original_context_length, or 0 for no key
 * @extra, @n_extra: more metadata keys (borrowed)
 *
 * The new fields zeroed write exactly the bytes the presets always had.
 */
struct kvp_mkmodel_opts {
	const char *name;
	uint32_t n_embd;
	uint32_t n_layers;
	uint32_t n_heads;
	uint32_t n_kv_heads;
	uint32_t n_ff;
	uint32_t n_ctx;
	int tied;
	uint32_t type;
	uint64_t seed;
	float rope_base;
	float rms_eps;
	const struct kvp_mkmodel_vocab *vocab;
	const char *chat_template;
	const char *arch;
	uint32_t head_dim;
	int qkv_bias;
	struct kvp_mkmodel_rope_freqs rope_freqs;
	const char *rope_scaling;
	float rope_scaling_factor;
	uint32_t rope_orig_ctx;
	const struct kvp_mkmodel_kv *extra;
	uint32_t n_extra;
};

/*
 * kvp_mkmodel_rope_freqs_llama3() - fill @out (@n_rot / 2 factors) from @p and the
 * rope base, as struct kvp_mkmodel_rope_freqs describes.
 */
void kvp_mkmodel_rope_freqs_llama3(float *out, uint32_t n_rot, float base,
				   const struct kvp_mkmodel_rope_freqs *p);

/**
 * kvp_mkmodel_preset() - fill @o with a named preset
 * @preset: "tiny" (unit tests: n_embd 64, 2 layers, 4 heads / 2 KV, f32),
 *          "tinyq" (unit tests of every type: n_embd 256, n_ff 512, 2 layers, 4 heads /
 *          2 KV, head_dim 64, f32),
 *          "demo" (~104M params: n_embd 768, 12 layers, 12 heads / 4 KV, n_ff 3072,
 *          untied, f32 so it maps with no conversion; the daemon's built-in model),
 *          "1b" (Llama-3.2-1B-like: n_embd 2048, 16 layers, 32 heads / 8 KV, n_ff 8192,
 *          rope base 500000, untied, f32)
 * Return: 0, or -EINVAL for an unknown name.
 */
int kvp_mkmodel_preset(struct kvp_mkmodel_opts *o, const char *preset);

/*
 * kvp_mkmodel_type_parse() - a type name ("f32", "q4_k", ... every type the engine computes
 * with) to enum kvp_ggml_type, or a recipe name ("q4_k_m", "q5_k_m", "q4_k_s") to enum
 * kvp_mkmodel_recipe; -EINVAL for anything else.  kvp_mkmodel_type_list() - the accepted
 * names, for usage messages.
 */
int kvp_mkmodel_type_parse(const char *s);
const char *kvp_mkmodel_type_list(void);

/**
 * kvp_mkmodel_write() - write the model to @path (created or truncated, then renamed
 * into place from a temporary file in the same directory, so a reader never sees a
 * half-written model)
 * @err, @errlen: reason on failure (may be NULL)
 * Return: 0, -EINVAL for a bad shape, or -errno from the file system.
 */
int kvp_mkmodel_write(const char *path, const struct kvp_mkmodel_opts *o, char *err, size_t errlen);

/**
 * kvp_mkmodel_write_mem() - the same bytes into a malloc'd buffer (tests)
 * @buf, @len: out; free(*buf) when done
 */
int kvp_mkmodel_write_mem(void **buf, size_t *len, const struct kvp_mkmodel_opts *o, char *err,
			  size_t errlen);

#endif /* KVP_COMPUTE_MKMODEL_H */
