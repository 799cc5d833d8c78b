/* SPDX-License-Identifier: MIT */
/*
 * tokenizer.h - text <-> token ids for GGUF vocabularies: the one public header of
 * compute/text/'s tokenizers.
 *
 * Two models, chosen by tokenizer.ggml.model:
 *  - "llama": SentencePiece-style (Llama 2, Mistral v0.1, Phi-3, TinyLlama, and the
 *    synthetic byte-level models).  Spaces become U+2581, a leading one is added unless
 *    tokenizer.ggml.add_space_prefix is false, adjacent pieces are merged best score
 *    first, and what has no piece falls back to byte tokens <0xXX>.  A vocabulary with
 *    no U+2581 piece is plain byte-level: every byte its byte token.
 *  - "gpt2": byte-level BPE (Llama 3, Qwen2, SmolLM, DeepSeek, GPT-2 families).  The
 *    text is cut into words by the pre-tokenizer named by tokenizer.ggml.pre (regular
 *    expressions run by PCRE2), each word's bytes are mapped to printable characters as
 *    GPT-2 does, and tokenizer.ggml.merges are applied lowest rank first.
 * User-defined (added) tokens written in the text are always recognised, before
 * pre-tokenization, longest first; control tokens only with KVP_TOK_PARSE_SPECIAL (off
 * by default, so a raw prompt cannot forge "<|eot_id|>").
 * BOS/EOS are added as tokenizer.ggml.add_bos_token / add_eos_token say.
 *
 * A tokenizer is immutable after construction; any thread may use it at once.
 */
#ifndef KVP_COMPUTE_TEXT_TOKENIZER_H
#define KVP_COMPUTE_TEXT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvp_gguf;
struct kvp_model;
struct kvp_tokenizer;

/* Token types of tokenizer.ggml.token_type (the GGUF llama convention). */
enum kvp_tok_type {
	KVP_TOK_NORMAL = 1,
	KVP_TOK_UNKNOWN = 2,
	KVP_TOK_CONTROL = 3,
	KVP_TOK_USER = 4, /* user-defined: an added token matched as a whole */
	KVP_TOK_UNUSED = 5,
	KVP_TOK_BYTE = 6,
};

/* Flags of kvp_tokenizer_encode_flags(). */
enum kvp_tok_flags {
	/* control tokens written in the text become their ids (user-defined ones always do) */
	KVP_TOK_PARSE_SPECIAL = 1u << 0,
	/* do not add BOS/EOS even when the vocabulary asks for them */
	KVP_TOK_NO_ADD_SPECIAL = 1u << 1,
	/* (1u << 2 was KVP_TOK_PARSE_USER: user-defined tokens are now always parsed) */
	/* the text continues earlier text (the rest of a conversation after its exact ids):
	 * a SentencePiece vocabulary gives its first run no word-start space */
	KVP_TOK_CONTINUE = 1u << 3,
};

/* Flags of kvp_tokenizer_decode(). */
enum kvp_detok_flags {
	/* control tokens are written as their text ("<|eot_id|>") instead of nothing */
	KVP_DETOK_RENDER_SPECIAL = 1u << 0,
	/* keep the space a SentencePiece vocabulary put before the first word */
	KVP_DETOK_KEEP_PREFIX_SPACE = 1u << 1,
};

/**
 * kvp_tokenizer_new() - build the tokenizer from a model's metadata
 * @out:    out; freed with kvp_tokenizer_free()
 * @m:      the model (only read during the call)
 * @err, @errlen: reason on failure (may be NULL)
 *
 * Return: 0; -ENOTSUP for a tokenizer.ggml.model other than "llama" or "gpt2", or a
 * tokenizer.ggml.pre no pre-tokenizer here implements (the message names it and the
 * known ones); -EBADMSG when the vocabulary is missing, has the wrong size, or merges
 * are malformed; -ENOMEM.
 */
int kvp_tokenizer_new(struct kvp_tokenizer **out, const struct kvp_model *m, char *err,
		      size_t errlen);

/**
 * kvp_tokenizer_new_gguf() - as kvp_tokenizer_new() from a parsed GGUF alone
 * @g:       the file (only read during the call); a vocabulary-only file will do
 * @n_vocab: the model's vocabulary size the token list must have, or 0 for any
 */
int kvp_tokenizer_new_gguf(struct kvp_tokenizer **out, const struct kvp_gguf *g, uint32_t n_vocab,
			   char *err, size_t errlen);

/**
 * kvp_tokenizer_build() - a SentencePiece-style tokenizer from explicit arrays (tests,
 * other front ends)
 * @pieces: @n NUL-terminated UTF-8 pieces (copied)
 * @scores: @n merge scores, or NULL (all 0)
 * @types:  @n enum kvp_tok_type, or NULL (all normal, except "<0xXX>" = byte)
 * @bos, @eos, @unk: special ids (< n), or -1 for none
 * @add_bos: nonzero to prepend BOS in encode
 */
int kvp_tokenizer_build(struct kvp_tokenizer **out, const char *const *pieces, const float *scores,
			const int32_t *types, uint32_t n, int32_t bos, int32_t eos, int32_t unk,
			int add_bos);

/* kvp_tokenizer_free() - NULL is a no-op. */
void kvp_tokenizer_free(struct kvp_tokenizer *t);

uint32_t kvp_tokenizer_n_vocab(const struct kvp_tokenizer *t);
int32_t kvp_tokenizer_bos(const struct kvp_tokenizer *t); /* -1 if none */
int32_t kvp_tokenizer_eos(const struct kvp_tokenizer *t); /* -1 if none */
/* "llama" or "gpt2"; and the pre-tokenizer's name ("" for SentencePiece) */
const char *kvp_tokenizer_model_name(const struct kvp_tokenizer *t);
const char *kvp_tokenizer_pre_name(const struct kvp_tokenizer *t);

/**
 * kvp_tokenizer_is_eog() - does @id end a generation?
 *
 * The end-of-generation set: eos, eot and eom ids from the metadata
 * (tokenizer.ggml.{eos,eot,eom}_token_id), and every control token whose text is a
 * known end-of-turn marker ("<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>",
 * "<end_of_turn>", "<|endoftext|>", "<|EOT|>", "</s>", ...).
 */
bool kvp_tokenizer_is_eog(const struct kvp_tokenizer *t, int32_t id);

/**
 * kvp_tokenizer_eog() - the end-of-generation ids, ascending
 * @ids: out; room for @cap
 * Return: how many there are (may exceed @cap: only @cap written).
 */
size_t kvp_tokenizer_eog(const struct kvp_tokenizer *t, int32_t *ids, size_t cap);

/* kvp_tokenizer_type() - enum kvp_tok_type of @id, or 0 when out of range. */
int kvp_tokenizer_type(const struct kvp_tokenizer *t, int32_t id);

/**
 * kvp_tokenizer_find() - the id whose piece is exactly @text (e.g. "<|im_end|>")
 * Return: the id, or -1.
 */
int32_t kvp_tokenizer_find(const struct kvp_tokenizer *t, const char *text, size_t len);

/**
 * kvp_tokenizer_encode_flags() - text to token ids
 * @text, @len: UTF-8; bytes that are not (valid UTF-8) are encoded as their byte tokens
 * @flags:  enum kvp_tok_flags
 * @ids:    out; room for @cap ids
 *
 * Return: the number of ids the text needs (may exceed @cap: then only @cap were
 * written and the caller retries with a larger buffer), -E2BIG for @len > 256 MiB,
 * -ENOMEM.  Every vocabulary needs at most 3 * len + 4 ids (a SentencePiece space
 * spelled as the 3 bytes of U+2581, + BOS and EOS); ordinary ones (all 256 byte
 * tokens, and U+2581 a piece of its own) at most len + 2.
 */
int kvp_tokenizer_encode_flags(const struct kvp_tokenizer *t, const char *text, size_t len,
			       unsigned int flags, int32_t *ids, size_t cap);

/* kvp_tokenizer_encode() - kvp_tokenizer_encode_flags() with no flags (raw prompts). */
int kvp_tokenizer_encode(const struct kvp_tokenizer *t, const char *text, size_t len, int32_t *ids,
			 size_t cap);

/**
 * kvp_tokenizer_piece() - the bytes one token stands for
 * @id:   token id
 * @len:  out; number of bytes
 *
 * Byte tokens give their byte; control, unknown and unused tokens give nothing;
 * U+2581 in a SentencePiece piece is given as a space; a byte-level BPE piece is given
 * as the bytes it encodes.  The bytes of a multi-byte character may be split over
 * several tokens: feed them to a struct kvp_utf8_stream.
 * Return: pointer to the bytes (borrowed, not NUL-terminated), or NULL for an id out
 * of range (then *len = 0).
 */
const char *kvp_tokenizer_piece(const struct kvp_tokenizer *t, int32_t id, size_t *len);

/**
 * kvp_tokenizer_token_text() - the token's piece as stored in the vocabulary
 * ("Ġthe", "▁the", "<|eot_id|>", "<0x0A>"); NULL for an id out of range.
 */
const char *kvp_tokenizer_token_text(const struct kvp_tokenizer *t, int32_t id, size_t *len);

/**
 * kvp_tokenizer_decode() - token ids back to text
 * @ids, @n: the tokens
 * @flags:   enum kvp_detok_flags
 * @out:     out; room for @cap bytes (not NUL-terminated)
 *
 * The pieces are concatenated; a SentencePiece tokenizer that added a space before the
 * first word removes it again, so decode(encode(s)) == s for any valid UTF-8 s, but
 * that SentencePiece reads a U+2581 written in s as the space it marks (as the
 * reference engines do: the model was trained on it so) and gives it back as one.  The
 * bytes are written as they are, not checked as UTF-8 (a prefix may end mid-character).
 * Return: bytes the text needs (may exceed @cap: only @cap written), or -EINVAL for an
 * id out of range.
 */
long kvp_tokenizer_decode(const struct kvp_tokenizer *t, const int32_t *ids, size_t n,
			  unsigned int flags, char *out, size_t cap);

/*
 * struct kvp_utf8_stream - holds back an incomplete UTF-8 character between pieces,
 * so a streamed text is emitted one whole character at a time.  Zero-initialise.
 */
struct kvp_utf8_stream {
	uint8_t buf[4];
	uint8_t n;    /* bytes held in buf */
	uint8_t need; /* total bytes of the character being held (2..4) */
};

/**
 * kvp_utf8_feed() - append bytes, emit the complete characters
 * @s:    the stream
 * @in:   @n bytes (e.g. one token's piece)
 * @out:  out; room for @cap bytes, at least 3 * n + 3 (room for U+FFFD replacements)
 *
 * A byte that cannot start or continue a character is emitted as U+FFFD.
 * Return: bytes written to @out, or -ENOBUFS when @cap < 3 * n + 3 (nothing consumed).
 */
int kvp_utf8_feed(struct kvp_utf8_stream *s, const void *in, size_t n, char *out, size_t cap);

/*
 * kvp_utf8_flush() - end of stream: a held incomplete character becomes U+FFFD.
 * @out needs 3 bytes.  Return: bytes written (0 or 3).
 */
int kvp_utf8_flush(struct kvp_utf8_stream *s, char *out, size_t cap);

#endif /* KVP_COMPUTE_TEXT_TOKENIZER_H */
