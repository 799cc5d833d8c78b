/* SPDX-License-Identifier: MIT */
/*
 * vocab.h - every token id's bytes, read once from kvpoold (the daemon owns the
 * tokenizer), for the answers that name tokens one by one: OpenAI's logprobs list each
 * generated token and its most likely alternatives as text and bytes.
 *
 * Thread: loaded and read by the backend thread only; immutable once loaded.
 */
#ifndef KVP_IPC_HTTP_VOCAB_H
#define KVP_IPC_HTTP_VOCAB_H

#include <stddef.h>
#include <stdint.h>

/**
 * struct kvp_http_vocab - the pieces of ids 0 .. @n-1
 * @model:  the model kvpoold served when it was read
 * @off:    id i's bytes are @bytes[@off[i] .. @off[i+1])
 */
struct kvp_http_vocab {
	char model[65];
	uint32_t n;
	uint32_t *off;
	char *bytes;
};

/**
 * kvp_http_vocab_load() - read the vocabulary of the kvpoold at @socket_path
 * On its own connection: control tokens as their text (KVP_DETOKENIZE_RENDER_SPECIAL),
 * every other id exactly the bytes it stands for (not UTF-8 when it is part of a
 * character).  @err gets the reason on failure.
 * Return: 0, -errno or kvpoold's enum kvp_status.
 */
int kvp_http_vocab_load(struct kvp_http_vocab **out, const char *socket_path, char *err,
			size_t cap);

void kvp_http_vocab_free(struct kvp_http_vocab *v);

/* The bytes of @id (*@len of them; not NUL-terminated); "" for an id out of range. */
const char *kvp_http_vocab_piece(const struct kvp_http_vocab *v, int32_t id, size_t *len);

/*
 * kvp_http_vocab_split() - the pieces of @n ids out of the DETOKENIZE text of
 * [sep, id0, sep, id1, ..., sep, id(n-1), sep], @sep being one byte no other piece holds:
 * piece i is @text[@off[i] .. @off[i+1] - 1) (@off has n + 1 entries; @off[n] = @len).
 * Return: 0, -EINVAL when the text is not n pieces between n + 1 separators (some piece
 * holds the byte: then each id is read alone).
 */
int kvp_http_vocab_split(const char *text, size_t len, char sep, uint32_t n, uint32_t *off);

#endif /* KVP_IPC_HTTP_VOCAB_H */
