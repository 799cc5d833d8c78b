/* SPDX-License-Identifier: MIT */
/*
 * tokenizer.h - text <-> token ids for GGUF "llama" vocabularies.
 *
 * Two flavours, both from tokenizer.ggml.{tokens,scores,token_type}:
 *  - byte-level (the synthetic models: <unk>, <s>, </s>, then <0x00>..<0xFF>): every
 *    byte of the text is its byte token;
 *  - SentencePiece-style (Llama-2-family files, recognised by a "\xe2\x96\x81" (U+2581)
 *    piece in the vocabulary): spaces become U+2581, a leading one is added, adjacent
 *    pieces are merged best score first, and what has no piece falls back to byte
 *    tokens.
 * BOS is prepended when tokenizer.ggml.add_bos_token says so (default yes for
 * "llama"); EOS is never appended by encode.
 *
 * A tokenizer is immutable after construction; any thread may use it.
 */
#ifndef KVP_COMPUTE_TOKENIZER_H
#define KVP_COMPUTE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

struct kvp_model;
struct kvp_tokenizer;

/* Token types of tokenizer.ggml.token_type (the GGUF llama convention). */
enum kvp_tok_type {
	KVP_TOK_NORMAL = 1,
	KVP_TOK_UNKNOWN = 2,
	KVP_TOK_CONTROL = 3,
	KVP_TOK_USER = 4,
	KVP_TOK_UNUSED = 5,
	KVP_TOK_BYTE = 6,
};

/**
 * kvp_tokenizer_new() - build the tokenizer from a model's metadata
 * @out:    out; freed with kvp_tokenizer_free()
 * @m:      the model (only read during the call)
 * @err, @errlen: reason on failure (may be NULL)
 *
 * Return: 0; -ENOTSUP when tokenizer.ggml.model is not "llama"; -EBADMSG when the
 * vocabulary is missing, has the wrong size, or a byte token is absent; -ENOMEM.
 */
int kvp_tokenizer_new(struct kvp_tokenizer **out, const struct kvp_model *m, char *err,
		      size_t errlen);

/**
 * kvp_tokenizer_build() - build from explicit arrays (tests, other front ends)
 * @pieces: @n NUL-terminated UTF-8 pieces (copied)
 * @scores: @n merge scores, or NULL (all 0)
 * @types:  @n enum kvp_tok_type, or NULL (all normal, except "<0xXX>" = byte)
 * @bos, @eos, @unk: special ids (< n), or -1 for none
 * @add_bos: nonzero to prepend BOS in encode
 */
int kvp_tokenizer_build(struct kvp_tokenizer **out, const char *const *pieces,
			const float *scores, const int32_t *types, uint32_t n, int32_t bos,
			int32_t eos, int32_t unk, int add_bos);

void kvp_tokenizer_free(struct kvp_tokenizer *t);

uint32_t kvp_tokenizer_n_vocab(const struct kvp_tokenizer *t);
int32_t kvp_tokenizer_bos(const struct kvp_tokenizer *t);	/* -1 if none */
int32_t kvp_tokenizer_eos(const struct kvp_tokenizer *t);	/* -1 if none */

/**
 * kvp_tokenizer_encode() - text to token ids
 * @text, @len: UTF-8 (invalid bytes are encoded as their byte tokens)
 * @ids:    out; room for @cap ids
 *
 * Return: the number of ids the text needs (may exceed @cap: then only @cap were
 * written and the caller retries with a larger buffer), -E2BIG for @len > 256 MiB, or
 * -ENOMEM.  A vocabulary with all 256 byte tokens and a U+2581 piece that is not itself
 * a byte token (every Llama vocabulary, and the synthetic one) needs at most len + 2
 * ids; any vocabulary at most 3 * len + 4 (every space a 3-byte U+2581 by bytes).
 */
int kvp_tokenizer_encode(const struct kvp_tokenizer *t, const char *text, size_t len,
			 int32_t *ids, size_t cap);

/**
 * kvp_tokenizer_piece() - the bytes one token stands for
 * @id:   token id
 * @len:  out; number of bytes
 *
 * Byte tokens give their byte; control, unknown and unused tokens give nothing;
 * U+2581 in a SentencePiece piece is given as a space.  The bytes of a multi-byte
 * character may be split over several tokens: feed them to a struct kvp_utf8_stream.
 * Return: pointer to the bytes (borrowed, not NUL-terminated), or NULL for an id out
 * of range (then *len = 0).
 */
const char *kvp_tokenizer_piece(const struct kvp_tokenizer *t, int32_t id, size_t *len);

/*
 * struct kvp_utf8_stream - holds back an incomplete UTF-8 character between pieces,
 * so a streamed text is emitted one whole character at a time.  Zero-initialise.
 */
struct kvp_utf8_stream {
	uint8_t buf[4];
	uint8_t n;	/* bytes held in buf */
	uint8_t need;	/* total bytes of the character being held (2..4) */
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

#endif /* KVP_COMPUTE_TOKENIZER_H */
