/* SPDX-License-Identifier: MIT */
/*
 * arch.h - the model architectures kvpool runs, as a table, and the metadata keys it
 * knows for each.
 *
 * An architecture is what general.architecture names: its metadata prefix, the RoPE
 * pair layout its files expect, and which projection biases its tensors carry.  The
 * forward pass is the same pre-norm decoder for all of them (RMSNorm, GQA attention with
 * RoPE, SwiGLU FFN); a family that differs only in those traits is one more table entry.
 *
 * Metadata keys under the prefix are checked against a list (kvp_arch_keys()): each is
 * either read by the loader, known to leave the math alone, or math kvpool does not
 * implement, accepted only at the value that leaves the math unchanged (expert_count 0,
 * attention.causal true, ...).  A key that is not on the list is refused too: a file
 * must never load with part of its math silently ignored.
 */
#ifndef KVP_COMPUTE_ARCH_H
#define KVP_COMPUTE_ARCH_H

#include <stddef.h>
#include <stdint.h>

struct kvp_gguf;

enum kvp_arch_id { KVP_ARCH_LLAMA = 0, KVP_ARCH_QWEN2 = 1, KVP_ARCH__COUNT };

/**
 * enum kvp_arch_need - whether a tensor family is part of an architecture
 * @KVP_ARCH_ABSENT:   never (a file that has it is refused)
 * @KVP_ARCH_OPTIONAL: used when the file has it
 * @KVP_ARCH_REQUIRED: the file must have it
 */
enum kvp_arch_need {
	KVP_ARCH_ABSENT = 0,
	KVP_ARCH_OPTIONAL = 1,
	KVP_ARCH_REQUIRED = 2,
};

/**
 * enum kvp_meta_use - what the loader does with a metadata key
 * @KVP_META_USED:    read (and range-checked) by the loader
 * @KVP_META_INFO:    informative: no effect on the computation
 * @KVP_META_NEUTRAL: math kvpool does not implement; accepted only at @neutral
 * @KVP_META_REFUSED: math kvpool does not implement; refused whatever its value
 */
enum kvp_meta_use {
	KVP_META_USED = 0,
	KVP_META_INFO = 1,
	KVP_META_NEUTRAL = 2,
	KVP_META_REFUSED = 3,
};

/**
 * struct kvp_meta_key - one known key
 * @name:    the key after "<prefix>." (or in full, for the global list)
 * @use:     enum kvp_meta_use
 * @neutral: KVP_META_NEUTRAL: the value that leaves the math unchanged (booleans 0/1)
 * @what:    what the key does, for the refusal message
 */
struct kvp_meta_key {
	const char *name;
	uint32_t use;
	double neutral;
	const char *what;
};

/**
 * struct kvp_arch - one architecture
 * @name:        general.architecture value
 * @prefix:      metadata key prefix (keys are "<prefix>.<name>")
 * @id:          enum kvp_arch_id
 * @rope_layout: enum kvp_rope_layout (compute/rope.h) its Q/K rows are laid out for
 * @qkv_bias:    enum kvp_arch_need of blk.N.attn_{q,k,v}.bias
 * @o_bias:      enum kvp_arch_need of blk.N.attn_output.bias
 * @keys:        @n_keys known keys under @prefix
 */
struct kvp_arch {
	const char *name;
	const char *prefix;
	uint32_t id;
	uint32_t rope_layout;
	uint32_t qkv_bias;
	uint32_t o_bias;
	const struct kvp_meta_key *keys;
	size_t n_keys;
};

/* kvp_arch_find() - the architecture called @name (@len bytes, not NUL-terminated), or NULL. */
const struct kvp_arch *kvp_arch_find(const char *name, size_t len);

/* kvp_arch_get() - the architecture @id, or NULL. */
const struct kvp_arch *kvp_arch_get(uint32_t id);

/* kvp_arch_list() - "llama, qwen2": the supported names, for messages. */
const char *kvp_arch_list(void);

/*
 * kvp_arch_global_keys() - keys outside any prefix that change what a file is
 * ("split.count", "adapter.type"), checked like the prefixed ones; @n gets the count.
 */
const struct kvp_meta_key *kvp_arch_global_keys(size_t *n);

/**
 * kvp_arch_check_keys() - refuse a file whose metadata asks for math kvpool lacks
 * @a:   the file's architecture
 * @g:   the file
 * @err: out; on refusal "model: <key> = <value>: <what> is not supported" or, for a key
 *       not on the list, a sentence naming it
 *
 * Every key "<prefix>.*" must be on @a's list, and a NEUTRAL one at its neutral value
 * (a number or a boolean); REFUSED ones must be absent; likewise the global keys.
 * USED keys are the loader's to check.
 * Return: 0, or -ENOTSUP.
 */
int kvp_arch_check_keys(const struct kvp_arch *a, const struct kvp_gguf *g, char *err,
			size_t errlen);

#endif /* KVP_COMPUTE_ARCH_H */
