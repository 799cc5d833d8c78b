/* SPDX-License-Identifier: MIT */
/*
 * model.h - a Llama-family model loaded from a GGUF file.
 *
 * kvp_model_open() maps the file, checks it is an architecture of compute/arch.h's
 * table ("llama", "qwen2") whose every metadata key is one the loader implements or
 * knows to be neutral, with every tensor the forward pass needs at the shape the
 * hyper-parameters imply and no tensor it would ignore, and binds the
 * weights as typed tensors in the file's own types (F32, F16, BF16, the legacy quants
 * Q4_0 .. Q8_0 and the K-quants Q2_K .. Q6_K, mixed per tensor as the *_K_M recipes
 * do): used in place from the mapping, or, as an option, the same bytes copied into
 * huge-page memory the model owns.  Nothing is expanded to f32, so resident memory is
 * about the file size; kvp_model_info() reports bytes per type and what a copy cost, so
 * the caller can log it (compute/ does not log).
 *
 * A model is immutable after open: any number of threads may read it, and any
 * number of forward contexts (forward.h) may run over it at once.
 */
#ifndef KVP_COMPUTE_MODEL_H
#define KVP_COMPUTE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "compute/gguf.h"
#include "kvpool/layout.h"

struct kvp_model;
struct kvp_gguf;
struct kvp_rope;

/* Bytes of the model fingerprint (a 128-bit hash). */
#define KVP_MODEL_FP_BYTES 16

/**
 * struct kvp_model_hparams - hyper-parameters, from the GGUF "<prefix>.*" keys (the
 * prefix is the architecture's: compute/arch.h)
 * @arch:       enum kvp_arch_id
 * @n_vocab:    vocabulary size (rows of token_embd; = <prefix>.vocab_size when present)
 * @n_embd:     residual width (embedding_length)
 * @n_layers:   transformer blocks (block_count)
 * @n_heads:    query heads (attention.head_count)
 * @n_kv_heads: K/V heads (attention.head_count_kv; = n_heads when absent)
 * @head_dim:   per-head size of Q, K and V: attention.key_length (which
 *              attention.value_length must equal), n_embd / n_heads when absent;
 *              Q is n_heads * head_dim wide, which need not be n_embd
 * @n_ff:       FFN hidden width (feed_forward_length)
 * @n_rot:      dimensions of each head that RoPE rotates (rope.dimension_count; head_dim
 *              when absent)
 * @n_ctx_train: context_length (informative; positions are not limited by it)
 * @rope_base:  rope.freq_base (10000 when absent)
 * @rms_eps:    attention.layer_norm_rms_epsilon (1e-5 when absent)
 * @tied_output: 1 when there is no output.weight and token_embd is reused
 * @rope_layout: enum kvp_rope_layout (compute/rope.h): the architecture's pair layout
 * @rope_scaling: enum kvp_rope_scaling: rope.scaling.type ("linear" when absent but a
 *              factor is given, as llama.cpp reads it)
 * @rope_factor: rope.scaling.factor (or the older rope.scale_linear); 1 when absent
 * @rope_orig_ctx: rope.scaling.original_context_length (YaRN); n_ctx_train when absent
 * @yarn_beta_fast, @yarn_beta_slow: rope.scaling.yarn_beta_fast/_slow (32, 1)
 * @rope_attn_factor: rope.scaling.attn_factor: extra scale of cos and sin (1)
 * @rope_freqs: 1 when rope_freqs.weight (n_rot/2 factors) divides the frequencies
 * @qkv_bias:   1 when Q, K and V have biases (blk.N.attn_{q,k,v}.bias)
 * @o_bias:     1 when the attention output has a bias (blk.N.attn_output.bias)
 */
struct kvp_model_hparams {
	uint32_t arch;
	uint32_t n_vocab;
	uint32_t n_embd;
	uint32_t n_layers;
	uint32_t n_heads;
	uint32_t n_kv_heads;
	uint32_t head_dim;
	uint32_t n_ff;
	uint32_t n_rot;
	uint32_t n_ctx_train;
	float rope_base;
	float rms_eps;
	int tied_output;
	uint32_t rope_layout;
	uint32_t rope_scaling;
	float rope_factor;
	uint32_t rope_orig_ctx;
	float yarn_beta_fast;
	float yarn_beta_slow;
	float rope_attn_factor;
	int rope_freqs;
	int qkv_bias;
	int o_bias;
};

/**
 * struct kvp_model_info - what loading did, for the caller's log
 * @file_type:      GGML type name of the file's matrices ("f32", "q4_k", ...) or "mixed"
 * @n_params:       parameters of all tensors bound
 * @file_bytes:     size of the mapped file
 * @type_tensors:   per enum kvp_ggml_type, tensors bound of that type
 * @type_bytes:     per enum kvp_ggml_type, their bytes
 * @n_converted:    vectors converted to f32 at load (f16/bf16 norms; matrices never are)
 * @converted_bytes: memory those conversions cost
 * @weight_bytes:   bytes of weights one forward step reads: every matrix and norm, the
 *                  token embedding excluded unless it is also the output (the decode
 *                  roofline's numerator)
 * @weights_copied: 1 when the tensors were copied out of the file (KVP_MODEL_WEIGHTS_COPY)
 * @copied_bytes:   memory those copies cost (0 when the tensors are used in place)
 * @arena_bytes:    the anonymous, huge-page-advised mapping that holds the converted and
 *                  copied tensors (their bytes rounded up to 2 MiB; 0 when none)
 */
struct kvp_model_info {
	const char *file_type;
	uint64_t n_params;
	uint64_t file_bytes;
	uint32_t type_tensors[KVP_GGML_TYPE__COUNT];
	uint64_t type_bytes[KVP_GGML_TYPE__COUNT];
	uint32_t n_converted;
	uint64_t converted_bytes;
	uint64_t weight_bytes;
	int weights_copied;
	uint64_t copied_bytes;
	uint64_t arena_bytes;
};

/*
 * kvp_model_info_types() - "q4_k 145 tensors 590.2 MiB, q6_k 17 tensors 97.1 MiB, ..."
 * (the bytes per tensor type of @mi) into @buf; truncated to @len.
 */
void kvp_model_info_types(const struct kvp_model_info *mi, char *buf, size_t len);

/**
 * enum kvp_model_weights - where the weights live after open
 * @KVP_MODEL_WEIGHTS_DEFAULT: KVP_MODEL_WEIGHTS_DEFAULT_IS (chosen by measurement)
 * @KVP_MODEL_WEIGHTS_MAP:     tensors used in place from the file mapping: no extra
 *                             memory, 4 KiB pages (page cache)
 * @KVP_MODEL_WEIGHTS_COPY:    tensors copied at open (same bytes) into anonymous memory advised
 *                             MADV_HUGEPAGE: faster decode (the weight stream walks 2 MiB
 *                             pages) for a slower open (the copy, huge-page faults, and
 *                             memory compaction when 2 MiB pages are scarce: seconds
 *                             for a 1B model).  The file's pages are dropped from the
 *                             process tensor by tensor, so the resident size is about
 *                             the mapped one; the file stays in the page cache
 *                             (reclaimable) until the kernel needs the memory
 */
enum kvp_model_weights {
	KVP_MODEL_WEIGHTS_DEFAULT = 0,
	KVP_MODEL_WEIGHTS_MAP = 1,
	KVP_MODEL_WEIGHTS_COPY = 2,
};

/* What KVP_MODEL_WEIGHTS_DEFAULT means (docs/compute.md has the measurement). */
#define KVP_MODEL_WEIGHTS_DEFAULT_IS KVP_MODEL_WEIGHTS_MAP

/**
 * struct kvp_model_opts - options of kvp_model_open_opts(); zero-initialise
 * @weights: enum kvp_model_weights
 */
struct kvp_model_opts {
	uint32_t weights;
};

/**
 * kvp_model_open() - map and bind a GGUF llama model
 * @out:    out; the model, freed with kvp_model_close()
 * @path:   GGUF file (mapped read-only and kept mapped until close)
 * @err:    out; on failure a one-line reason naming the key, tensor or offset at fault
 *          (may be NULL)
 * @errlen: size of @err
 *
 * Hashes the hyper-parameters and all tensor data into the fingerprint, so opening
 * reads the whole file once.
 * Return: 0; -ENOENT/-EACCES/... from open; -EBADMSG for a malformed file;
 * -ENOTSUP for another architecture, a metadata key asking for math kvpool does not
 * implement (the message names the key), a tensor the forward pass would not use, or a
 * tensor type without kernels (the message names the tensor, its type and the supported
 * list); -ENOMEM.
 */
int kvp_model_open(struct kvp_model **out, const char *path, char *err, size_t errlen);

/**
 * kvp_model_open_opts() - kvp_model_open() with options
 * @o: options (NULL: all defaults)
 *
 * Return: as kvp_model_open(); -EINVAL for an unknown @o->weights.
 */
int kvp_model_open_opts(struct kvp_model **out, const char *path, const struct kvp_model_opts *o,
			char *err, size_t errlen);

/**
 * kvp_model_open_mem() - as kvp_model_open(), over a caller's buffer
 * @buf, @len: a whole GGUF file; borrowed, must outlive the model
 *
 * For tests (truncation, byte flips) and embedded models.
 */
int kvp_model_open_mem(struct kvp_model **out, const void *buf, size_t len, char *err,
		       size_t errlen);

/* kvp_model_close() - unmap and free; NULL is a no-op. */
void kvp_model_close(struct kvp_model *m);

/* Hyper-parameters (borrowed, valid until close). */
const struct kvp_model_hparams *kvp_model_hparams(const struct kvp_model *m);

/* What loading converted and cost (borrowed). */
const struct kvp_model_info *kvp_model_info(const struct kvp_model *m);

/*
 * kvp_model_describe() - the architecture and the math traits that vary between files,
 * for logs: "qwen2, head_dim 64, RoPE neox base 1e+06, yarn x4 from 32768, Q/K/V biases"
 * into @buf (truncated to @len).
 */
void kvp_model_describe(const struct kvp_model *m, char *buf, size_t len);

/* general.name, or "" when absent (borrowed, NUL-terminated, at most 255 bytes). */
const char *kvp_model_name(const struct kvp_model *m);

/*
 * kvp_model_fingerprint() - 16-byte hash of the architecture, every hyper-parameter
 * (head sizes, RoPE layout, scaling and the derived per-pair frequencies included) and
 * the tensor data (biases and rope_freqs included): the prefix index's extra key that
 * keeps K/V of differently computed models apart.
 */
const uint8_t *kvp_model_fingerprint(const struct kvp_model *m);

/**
 * kvp_model_kv_shape() - the pool block shape for this model
 * @dtype:        enum kvp_dtype of the stored K/V (f32, f16, bf16)
 * @block_tokens: tokens per block
 * @out:          filled; pass to kvp_geom_init()
 */
void kvp_model_kv_shape(const struct kvp_model *m, uint32_t dtype, uint32_t block_tokens,
			struct kvp_model_shape *out);

/**
 * struct kvp_tensor - a weight as the file stores it, in its own type
 * @type:      enum kvp_ggml_type (one the kernels compute with: compute/kernels/quant.h)
 * @data:      first byte: in the file mapping, or in the model's arena when copied
 * @ne0:       elements per row (a matrix's input dimension), a multiple of the type's block
 * @ne1:       rows (a matrix's output dimension); 1 for a vector
 * @row_bytes: bytes per row
 *
 * Vectors (norms) are always f32 (a file's f16/bf16 norm is converted at load: a few KiB).
 */
struct kvp_tensor {
	uint32_t type;
	const void *data;
	uint64_t ne0;
	uint64_t ne1;
	size_t row_bytes;
};

/**
 * struct kvp_layer_weights - one transformer block; matrices row-major (out, in)
 * @attn_norm: (n_embd) f32
 * @wq:        (n_heads * head_dim, n_embd)
 * @wk, @wv:   (n_kv_heads * head_dim, n_embd)
 * @wo:        (n_embd, n_heads * head_dim)
 * @bq, @bk, @bv: f32 biases of Q (n_heads * head_dim), K and V (n_kv_heads * head_dim),
 *             added after the projection; data NULL when the model has none
 * @bo:        f32 bias of the attention output (n_embd); data NULL when none
 * @ffn_norm:  (n_embd) f32
 * @w_gate, @w_up: (n_ff, n_embd)
 * @w_down:    (n_embd, n_ff)
 */
struct kvp_layer_weights {
	struct kvp_tensor attn_norm;
	struct kvp_tensor wq, wk, wv, wo;
	struct kvp_tensor bq, bk, bv, bo;
	struct kvp_tensor ffn_norm;
	struct kvp_tensor w_gate, w_up, w_down;
};

/**
 * struct kvp_weights - every weight the forward pass reads
 * @tok_embd:    (n_vocab, n_embd): rows looked up (and dequantized) one per token
 * @output_norm: (n_embd) f32
 * @output:      (n_vocab, n_embd); == tok_embd when tied
 * @rope_freqs:  (n_rot / 2) f32 frequency factors; data NULL when none
 * @layers:      n_layers entries
 */
struct kvp_weights {
	struct kvp_tensor tok_embd;
	struct kvp_tensor output_norm;
	struct kvp_tensor output;
	struct kvp_tensor rope_freqs;
	const struct kvp_layer_weights *layers;
};

/* The bound weights (borrowed; for forward.c and ref.c). */
const struct kvp_weights *kvp_model_weights(const struct kvp_model *m);

/*
 * kvp_model_rope() - the model's rotation (compute/rope.h), derived from the
 * hyper-parameters and rope_freqs at open (borrowed; for forward.c).
 */
const struct kvp_rope *kvp_model_rope(const struct kvp_model *m);

/* The parsed file (for the tokenizer's metadata); borrowed. */
const struct kvp_gguf *kvp_model_gguf(const struct kvp_model *m);

#endif /* KVP_COMPUTE_MODEL_H */
