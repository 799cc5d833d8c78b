/* SPDX-License-Identifier: MIT */
/*
 * pretok.h - private to compute/text/: pre-tokenizers of byte-level BPE vocabularies,
 * chosen by tokenizer.ggml.pre.  Each cuts text into words with a sequence of regular
 * expressions (Unicode categories, look-ahead) run by PCRE2 with UTF, UCP and JIT.
 *
 * A struct kvp_pretok is immutable after kvp_pretok_new() and may be shared by threads;
 * each call of kvp_pretok_split() brings its own struct kvp_pretok_state.
 */
#ifndef KVP_COMPUTE_TEXT_PRETOK_H
#define KVP_COMPUTE_TEXT_PRETOK_H

#include <stdbool.h>
#include <stddef.h>

struct kvp_pretok;
struct kvp_pretok_state;

/**
 * kvp_pretok_new() - compile the pre-tokenizer called @name
 * @name, @len: a tokenizer.ggml.pre value ("llama-bpe", "qwen2", ...), or NULL for a
 *              file without the key (the GPT-2-like "default" set)
 * @err, @errlen: on -ENOTSUP, "tokenizer: tokenizer.ggml.pre 'x' is not supported
 *              (known: ...)"
 * Return: 0, -ENOTSUP for an unknown name, -ENOMEM, or -EINVAL if PCRE2 rejects a
 * pattern (a bug here, reported with PCRE2's message).
 */
int kvp_pretok_new(struct kvp_pretok **out, const char *name, size_t len, char *err, size_t errlen);

/* kvp_pretok_free() - NULL is a no-op. */
void kvp_pretok_free(struct kvp_pretok *p);

/* kvp_pretok_name() - the canonical name ("llama-bpe", "default", ...). */
const char *kvp_pretok_name(const struct kvp_pretok *p);

/* kvp_pretok_ignore_merges() - does a word that is a whole token skip the merges? */
bool kvp_pretok_ignore_merges(const struct kvp_pretok *p);

/* kvp_pretok_adds_bos() - does this family add BOS when the file does not say? */
bool kvp_pretok_adds_bos(const struct kvp_pretok *p);

/* kvp_pretok_names() - the accepted names, comma-separated (for messages). */
const char *kvp_pretok_names(void);

/* Per-call state: PCRE2 match data and JIT stack.  Any thread; not shared. */
int kvp_pretok_state_new(struct kvp_pretok_state **out, const struct kvp_pretok *p);
void kvp_pretok_state_free(struct kvp_pretok_state *s);

/* Called with each word in order; a nonzero return stops the split and is returned. */
typedef int kvp_pretok_word_fn(void *ctx, const char *word, size_t len);

/**
 * kvp_pretok_split() - cut @text into words
 *
 * The first expression cuts the text into matches and the gaps between them; each
 * piece is cut again by the next expression, and so on; what the last leaves are the
 * words.  Bytes that are not valid UTF-8 are words of one byte each (they reach BPE as
 * their byte tokens; nothing is dropped or replaced).
 * Return: 0, what @fn returned, or -EIO when PCRE2 fails on resource limits.
 */
int kvp_pretok_split(const struct kvp_pretok *p, struct kvp_pretok_state *s, const char *text,
		     size_t len, kvp_pretok_word_fn *fn, void *ctx);

#endif /* KVP_COMPUTE_TEXT_PRETOK_H */
