/* SPDX-License-Identifier: MIT */
/*
 * arch.c - the architecture table and the metadata keys each one knows.
 *
 * The key names are llama.cpp's (llama-arch.cpp), the writer of nearly every GGUF
 * model file; what each one does is described there and in the model code that reads
 * it.  The list covers the keys an architecture-generic loader reads, so a file of a
 * supported family that uses any of them for math we lack is refused by name.
 * Immutable tables; any thread.
 */
#include "compute/arch.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util/errmsg.h"
#include "compute/gguf.h"
#include "compute/rope.h"

#define USED(n) \
	{ \
		n, KVP_META_USED, 0, NULL \
	}
#define INFO(n) \
	{ \
		n, KVP_META_INFO, 0, NULL \
	}
#define NEUTRAL(n, v, w) \
	{ \
		n, KVP_META_NEUTRAL, v, w \
	}
#define REFUSED(n, w) \
	{ \
		n, KVP_META_REFUSED, 0, w \
	}

/*
 * The keys of the pre-norm RMSNorm / GQA / RoPE / SwiGLU decoder (llama, qwen2).  USED
 * ones are read by model.c; the rest change the math in some family and are accepted
 * only where they do not.
 */
static const struct kvp_meta_key decoder_keys[] = {
	USED("context_length"),
	USED("embedding_length"),
	USED("block_count"),
	USED("feed_forward_length"),
	USED("vocab_size"),
	USED("attention.head_count"),
	USED("attention.head_count_kv"),
	USED("attention.key_length"),
	USED("attention.value_length"),
	USED("attention.layer_norm_rms_epsilon"),
	USED("rope.dimension_count"),
	USED("rope.freq_base"),
	USED("rope.scaling.type"),
	USED("rope.scaling.factor"),
	USED("rope.scale_linear"),
	USED("rope.scaling.original_context_length"),
	USED("rope.scaling.attn_factor"),
	USED("rope.scaling.yarn_beta_fast"),
	USED("rope.scaling.yarn_beta_slow"),
	/* whether the weights were fine-tuned for the scaling: the scaling is the same */
	INFO("rope.scaling.finetuned"),
	/* how an old converter read its source; the GGUF tensors are in GGML order anyway */
	INFO("tensor_data_layout"),

	NEUTRAL("expert_count", 0, "a mixture of experts"),
	NEUTRAL("expert_used_count", 0, "a mixture of experts"),
	NEUTRAL("expert_shared_count", 0, "shared experts"),
	NEUTRAL("expert_group_count", 0, "grouped experts"),
	NEUTRAL("expert_group_used_count", 0, "grouped experts"),
	NEUTRAL("expert_feed_forward_length", 0, "expert FFNs"),
	NEUTRAL("expert_shared_feed_forward_length", 0, "shared expert FFNs"),
	NEUTRAL("leading_dense_block_count", 0, "dense layers before expert layers"),
	NEUTRAL("moe_every_n_layers", 0, "interleaved expert layers"),
	NEUTRAL("interleave_moe_layer_step", 0, "interleaved expert layers"),
	NEUTRAL("nextn_predict_layers", 0, "multi-token prediction layers"),
	NEUTRAL("pooling_type", 0, "embedding pooling (an embedding model)"),
	NEUTRAL("attention.causal", 1, "non-causal (bidirectional) attention"),
	NEUTRAL("attention.max_alibi_bias", 0, "ALiBi position biases"),
	NEUTRAL("attention.clamp_kqv", 0, "clamping of Q, K and V"),
	NEUTRAL("attention.sliding_window", 0, "sliding-window attention"),
	NEUTRAL("attention.q_lora_rank", 0, "multi-head latent attention"),
	NEUTRAL("attention.kv_lora_rank", 0, "multi-head latent attention"),
	NEUTRAL("attn_logit_softcapping", 0, "attention logit soft-capping"),
	NEUTRAL("final_logit_softcapping", 0, "final logit soft-capping"),
	NEUTRAL("router_logit_softcapping", 0, "router logit soft-capping"),
	NEUTRAL("logit_scale", 1, "an output logit scale"),
	NEUTRAL("embedding_scale", 1, "an embedding scale"),
	NEUTRAL("residual_scale", 1, "a residual scale"),
	NEUTRAL("use_parallel_residual", 0, "parallel attention and FFN"),
	NEUTRAL("swin_norm", 0, "Swin-style norms"),
	NEUTRAL("rope.scaling.yarn_log_multiplier", 0, "YaRN's mscale_all_dim"),

	/*
	 * Written from Hugging Face's attention_factor / extrapolation_factor, which replace
	 * YaRN's default mscale and mix; llama.cpp reads them for other families only, with
	 * other conventions: no value is safe to assume.
	 */
	REFUSED("rope.scaling.yarn_attn_factor", "a YaRN attention factor replacing the default"),
	REFUSED("rope.scaling.yarn_ext_factor", "a YaRN extrapolation mix other than the default"),
	REFUSED("rope.scaling.alpha", "NTK-aware RoPE alpha scaling"),
	REFUSED("rope.dimension_sections", "multimodal RoPE sections"),
	REFUSED("rope.dimension_count_swa", "RoPE of sliding-window layers"),
	REFUSED("rope.freq_base_swa", "RoPE of sliding-window layers"),
	REFUSED("attention.layer_norm_epsilon", "LayerNorm (kvpool has RMSNorm)"),
	REFUSED("attention.group_norm_epsilon", "group norm"),
	REFUSED("attention.group_norm_groups", "group norm"),
	REFUSED("attention.scale", "an attention scale other than 1/sqrt(head_dim)"),
	REFUSED("attention.output_scale", "an attention output scale"),
	REFUSED("attention.value_scale", "a value scale"),
	REFUSED("attention.temperature_length", "attention temperature tuning"),
	REFUSED("attention.temperature_scale", "attention temperature tuning"),
	REFUSED("attention.sliding_window_pattern", "sliding-window layers"),
	REFUSED("attention.key_length_mla", "multi-head latent attention"),
	REFUSED("attention.value_length_mla", "multi-head latent attention"),
	REFUSED("attention.key_length_swa", "head sizes of sliding-window layers"),
	REFUSED("attention.value_length_swa", "head sizes of sliding-window layers"),
	REFUSED("attention.shared_kv_layers", "K/V shared between layers"),
	REFUSED("hidden_activation", "an FFN activation other than SiLU"),
	REFUSED("swiglu_clamp_exp", "SwiGLU clamping"),
	REFUSED("swiglu_clamp_shexp", "SwiGLU clamping"),
	REFUSED("expert_weights_scale", "a mixture of experts"),
	REFUSED("expert_weights_norm", "a mixture of experts"),
	REFUSED("expert_gating_func", "a mixture of experts"),
	REFUSED("embedding_length_out", "an output projection of another width"),
	REFUSED("embedding_length_per_layer_input", "per-layer input embeddings"),
	REFUSED("full_attention_interval", "hybrid attention layers"),
};

/* Keys outside a prefix that make a file something other than one whole model. */
static const struct kvp_meta_key global_keys[] = {
	NEUTRAL("split.count", 1, "a model split over several files (merge them first)"),
	REFUSED("adapter.type", "an adapter (LoRA), not a model"),
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const struct kvp_arch archs[KVP_ARCH__COUNT] = {
	[KVP_ARCH_LLAMA] = {
		.name = "llama", .prefix = "llama", .id = KVP_ARCH_LLAMA,
		/* the converter permutes Q/K rows for adjacent pairs; biases are rare but allowed */
		.rope_layout = KVP_ROPE_NORM,
		.qkv_bias = KVP_ARCH_OPTIONAL, .o_bias = KVP_ARCH_OPTIONAL,
		.keys = decoder_keys, .n_keys = N(decoder_keys),
	},
	[KVP_ARCH_QWEN2] = {
		.name = "qwen2", .prefix = "qwen2", .id = KVP_ARCH_QWEN2,
		/* Q/K rows as Hugging Face has them (rotate_half); Q/K/V have biases, O none */
		.rope_layout = KVP_ROPE_NEOX,
		.qkv_bias = KVP_ARCH_REQUIRED, .o_bias = KVP_ARCH_ABSENT,
		.keys = decoder_keys, .n_keys = N(decoder_keys),
	},
};

const struct kvp_arch *kvp_arch_find(const char *name, size_t len)
{
	for (uint32_t i = 0; i < KVP_ARCH__COUNT; i++)
		if (strlen(archs[i].name) == len && !memcmp(archs[i].name, name, len))
			return &archs[i];
	return NULL;
}

const struct kvp_arch *kvp_arch_get(uint32_t id)
{
	return id < KVP_ARCH__COUNT ? &archs[id] : NULL;
}

const char *kvp_arch_list(void)
{
	return "llama, qwen2";
}

const struct kvp_meta_key *kvp_arch_global_keys(size_t *n)
{
	*n = N(global_keys);
	return global_keys;
}

static const struct kvp_meta_key *lookup(const struct kvp_meta_key *keys, size_t n,
					 const char *name, size_t len)
{
	for (size_t i = 0; i < n; i++)
		if (strlen(keys[i].name) == len && !memcmp(keys[i].name, name, len))
			return &keys[i];
	return NULL;
}

/* Refuse @kv (a known key) if its use and value say so. */
static int check_one(const struct kvp_meta_key *k, const struct kvp_gguf_kv *kv, char *err,
		     size_t errlen)
{
	int klen = (int)(kv->key.len > 128 ? 128 : kv->key.len);
	double v;

	if (k->use == KVP_META_USED || k->use == KVP_META_INFO)
		return 0;
	if (k->use == KVP_META_NEUTRAL) {
		if (!kvp_gguf_kv_f64(kv, &v) && v == k->neutral)
			return 0;
		if (!kvp_gguf_kv_f64(kv, &v))
			kvp_errmsg(err, errlen, "model: %.*s = %g: %s is not supported (only %g)",
				   klen, kv->key.p, v, k->what, k->neutral);
		else
			kvp_errmsg(err, errlen, "model: %.*s is not a number: %s is not supported",
				   klen, kv->key.p, k->what);
		return -ENOTSUP;
	}
	kvp_errmsg(err, errlen, "model: %.*s is set: %s is not supported", klen, kv->key.p,
		   k->what);
	return -ENOTSUP;
}

int kvp_arch_check_keys(const struct kvp_arch *a, const struct kvp_gguf *g, char *err,
			size_t errlen)
{
	size_t plen = strlen(a->prefix);

	for (uint64_t i = 0; i < g->n_kv; i++) {
		const struct kvp_gguf_kv *kv = &g->kv[i];
		const struct kvp_meta_key *k;
		int r;

		k = lookup(global_keys, N(global_keys), kv->key.p, kv->key.len);
		if (k && (r = check_one(k, kv, err, errlen)))
			return r;
		if (kv->key.len <= plen + 1 || memcmp(kv->key.p, a->prefix, plen) ||
		    kv->key.p[plen] != '.')
			continue;
		k = lookup(a->keys, a->n_keys, kv->key.p + plen + 1, kv->key.len - plen - 1);
		if (!k) {
			kvp_errmsg(err, errlen,
				   "model: %.*s is not a key kvpool knows for architecture %s; "
				   "refused rather than ignored (it may change the math)",
				   (int)(kv->key.len > 128 ? 128 : kv->key.len), kv->key.p,
				   a->name);
			return -ENOTSUP;
		}
		if ((r = check_one(k, kv, err, errlen)))
			return r;
	}
	return 0;
}
