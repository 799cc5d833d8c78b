/* SPDX-License-Identifier: MIT */
/*
 * mkvocab.h - a real family's tokenizer for kvpool-mkmodel: vocabulary, merges,
 * pre-tokenizer, special ids and chat template, read from a JSON file whose keys are
 * the GGUF tokenizer.ggml.* keys without the prefix:
 *
 *   { "model": "gpt2", "pre": "llama-bpe",
 *     "tokens": ["!", "\"", ...], "token_type": [1, 1, ..., 3],
 *     "scores": [...], "merges": ["Ġ t", "Ġ a", ...],
 *     "bos_token_id": 128000, "eos_token_id": 128009, "eot_token_id": 128009,
 *     "eom_token_id": 128008, "unknown_token_id": 0, "padding_token_id": 128004,
 *     "add_bos_token": true, "add_eos_token": false, "add_space_prefix": false,
 *     "chat_template": "{% for message in messages %}..." }
 *
 * Only "model" and "tokens" are required.  The weights stay synthetic: the model's
 * vocabulary dimension becomes the token count.
 */
#ifndef KVP_COMPUTE_MKVOCAB_H
#define KVP_COMPUTE_MKVOCAB_H

#include <stddef.h>
#include <stdint.h>

/**
 * struct kvp_mkmodel_vocab - a tokenizer to write into a synthetic model
 * @model:        tokenizer.ggml.model ("llama" or "gpt2")
 * @pre:          tokenizer.ggml.pre, or NULL
 * @tokens:       @n_tokens pieces (NUL-terminated UTF-8)
 * @scores:       @n_tokens scores, or NULL
 * @types:        @n_tokens enum kvp_tok_type values, or NULL
 * @merges:       @n_merges "left right" strings, or NULL
 * @bos, @eos, @unk, @eot, @eom, @pad: special ids, -1 when absent
 * @add_bos, @add_eos, @add_space_prefix: 0/1, or -1 when absent
 * @chat_template: tokenizer.chat_template, or NULL
 */
struct kvp_mkmodel_vocab {
	char *model;
	char *pre;
	uint32_t n_tokens;
	char **tokens;
	float *scores;
	int32_t *types;
	uint32_t n_merges;
	char **merges;
	int64_t bos, eos, unk, eot, eom, pad;
	int add_bos, add_eos, add_space_prefix;
	char *chat_template;
};

/**
 * kvp_mkmodel_vocab_load() - read a vocabulary JSON file (format above)
 * @out:  out; freed with kvp_mkmodel_vocab_free()
 * @err, @errlen: reason on failure, naming the key at fault
 * Return: 0, -errno from reading, -EBADMSG for bad JSON or a bad key, -ENOMEM.
 */
int kvp_mkmodel_vocab_load(struct kvp_mkmodel_vocab **out, const char *path, char *err,
			   size_t errlen);

/* kvp_mkmodel_vocab_free() - NULL is a no-op. */
void kvp_mkmodel_vocab_free(struct kvp_mkmodel_vocab *v);

/**
 * kvp_mkmodel_read_text() - a whole text file (a chat template) as a NUL-terminated
 * string; @out is freed with free().  Return: 0, -errno, -EBADMSG (holds a NUL byte).
 */
int kvp_mkmodel_read_text(char **out, const char *path, char *err, size_t errlen);

#endif /* KVP_COMPUTE_MKVOCAB_H */
