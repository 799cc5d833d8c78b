/* SPDX-License-Identifier: MIT */
/*
 * vocab.h - private to compute/text/: the shared vocabulary behind struct kvp_tokenizer
 * (pieces, types, special ids, the piece hash, the end-of-generation set, BPE merges)
 * and the per-model encoders that work on it.  Users include compute/text/tokenizer.h.
 *
 * The struct is filled once by vocab.c and never written again, so every encoder may
 * read it from any thread; per-call state (queues, PCRE2 match data) lives on the
 * caller's side of each function.
 */
#ifndef KVP_COMPUTE_TEXT_VOCAB_H
#define KVP_COMPUTE_TEXT_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "compute/text/tokenizer.h"
#include "util/utf8.h"

#define KVP_SPM_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's visible space */
#define KVP_PIECE_MAX 1024u	     /* longest piece accepted, bytes */

struct kvp_pretok;

enum kvp_tok_model {
	KVP_TOKM_SPM, /* "llama": SentencePiece-style (or plain byte-level) */
	KVP_TOKM_BPE, /* "gpt2": byte-level BPE with merges */
};

/*
 * struct kvp_bpe_merges - (left id, right id) -> (rank, merged id), open addressing.
 * A merge whose parts or result are not in the vocabulary is left out: BPE only ever
 * merges symbols that are tokens, so it could never apply.
 */
struct kvp_bpe_merges {
	uint64_t *key; /* (uint64_t)left << 32 | right; UINT64_MAX = empty */
	uint32_t *rank;
	int32_t *result;
	uint32_t mask; /* slots - 1 (a power of two) */
	uint32_t n;    /* merges kept */
};

struct kvp_tokenizer {
	uint32_t n;
	enum kvp_tok_model model;
	const char **piece; /* raw pieces, NUL-terminated, into arena */
	uint32_t *piece_len;
	const char **text; /* what each token decodes to (into arena) */
	uint32_t *text_len;
	float *score;
	int32_t *type;
	/* SPM: the <0xXX> token of each byte; BPE: the token of its one-byte word */
	int32_t byte_id[256];
	int32_t bos, eos, unk, eot, eom;
	int add_bos, add_eos;
	int add_space_prefix; /* SPM: a U+2581 before the text (and after a special) */
	int spm;	      /* the vocabulary spells spaces as U+2581 */
	uint32_t *ht;	      /* piece hash: id + 1, 0 = empty */
	uint32_t ht_mask;
	char *arena;
	/* control/unknown/user tokens a text may spell, longest first */
	int32_t *special;
	uint32_t n_special;
	uint8_t special_first[256]; /* nonzero: some special piece starts with this byte */
	uint8_t *eog;		    /* n flags: ends a generation */
	/* BPE only */
	char byte_char[256][2]; /* kvp_bpe_byte_char() of each byte */
	uint8_t byte_char_len[256];
	struct kvp_bpe_merges merges;
	struct kvp_pretok *pre;
	int ignore_merges; /* a word that is a token is taken whole (Llama 3) */
};

/*
 * struct kvp_ids - where encoders put ids: the caller's buffer, counting past its end
 * so the caller learns the size it needs.
 */
struct kvp_ids {
	int32_t *ids;
	size_t cap;
	size_t count;
};

static inline void kvp_ids_put(struct kvp_ids *o, int32_t id)
{
	if (o->count < o->cap)
		o->ids[o->count] = id;
	o->count++;
}

/* kvp_vocab_lookup() - id of the piece equal to p[0..n), or -1 (first of duplicates). */
int32_t kvp_vocab_lookup(const struct kvp_tokenizer *t, const char *p, size_t n);

/*
 * kvp_spm_encode() - SentencePiece encoding of one run of text (no special tokens in
 * it): spaces to U+2581, a leading U+2581 when @space_prefix, best-score merges, byte
 * fallback.  Return: 0 or -ENOMEM.
 */
int kvp_spm_encode(const struct kvp_tokenizer *t, const char *text, size_t len, int space_prefix,
		   struct kvp_ids *out);

/* kvp_bpe_merges_build() - fill t->merges from "left right" strings; -EBADMSG/-ENOMEM. */
int kvp_bpe_merges_build(struct kvp_tokenizer *t, const char *const *merges, const uint32_t *lens,
			 uint32_t n, char *err, size_t errlen);
void kvp_bpe_merges_deinit(struct kvp_bpe_merges *m);

/*
 * kvp_bpe_byte_char() - the UTF-8 (1 or 2 bytes) of the printable character GPT-2
 * maps byte @b to, into @out.  Return: its length.
 */
size_t kvp_bpe_byte_char(uint8_t b, char out[2]);

/*
 * kvp_bpe_decode_piece() - a byte-level piece back to the bytes it stands for.
 * @out has room for @n bytes (never longer).  Return: bytes written.
 */
size_t kvp_bpe_decode_piece(const char *piece, size_t n, char *out);

/*
 * struct kvp_bpe_ctx - the per-call state of byte-level BPE (PCRE2 match data, merge
 * queue, word cache), made once per encode call and used for each run of text.
 */
struct kvp_bpe_ctx;

/* @text_len: the whole text's length (sizes the word cache); @out: where ids go. */
int kvp_bpe_ctx_new(struct kvp_bpe_ctx **out, const struct kvp_tokenizer *t, size_t text_len,
		    struct kvp_ids *ids);
void kvp_bpe_ctx_free(struct kvp_bpe_ctx *c);

/*
 * kvp_bpe_encode() - byte-level BPE of one run of text (no special tokens in it):
 * pre-tokenize, then merge each word.  Return: 0, -ENOMEM, or -EIO when the regular
 * expression engine fails (its resource limits).
 */
int kvp_bpe_encode(struct kvp_bpe_ctx *c, const char *text, size_t len);

/**
 * struct kvp_merge - a candidate merge of symbol @left with the one after it, in the
 * priority queue both tokenizers merge by (BPE: lowest rank first; SentencePiece:
 * highest score first, queued as -score)
 * @key:  the priority: the lowest pops first; on a tie the leftmost
 * @left: index of the left symbol
 * @len:  both symbols' bytes when queued (a later merge makes the entry stale)
 */
struct kvp_merge {
	float key;
	int32_t left;
	uint32_t len;
};

/*
 * kvp_merge_push() / kvp_merge_pop() - a binary min-heap of @n entries at @h (the caller
 * sized it).
 */
void kvp_merge_push(struct kvp_merge *h, size_t *n, struct kvp_merge e);
struct kvp_merge kvp_merge_pop(struct kvp_merge *h, size_t *n);

#endif /* KVP_COMPUTE_TEXT_VOCAB_H */
