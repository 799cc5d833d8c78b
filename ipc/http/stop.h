/* SPDX-License-Identifier: MIT */
/*
 * stop.h - stop strings over streamed text (OpenAI `stop`, Anthropic `stop_sequences`).
 *
 * Generated text arrives in pieces; a stop string may be split across them.  The matcher
 * holds back the shortest tail that could still grow into a stop string and releases the
 * rest, so a client never sees a byte of a stop string (nor anything after it), and
 * streamed text is delayed only by as many bytes as the longest stop string minus one.
 * The earliest occurrence in the text wins; the released text ends right before it.  When
 * one stop string contains another, the first to be complete as the text arrives wins
 * (a match is declared as soon as one is whole, as vLLM does per token).
 *
 * Thread: a matcher belongs to its request (used under the request's lock).
 */
#ifndef KVP_IPC_HTTP_STOP_H
#define KVP_IPC_HTTP_STOP_H

#include <stdbool.h>
#include <stddef.h>

#include "util/buf.h"

/**
 * struct kvp_http_stop - a matcher
 * @stops:  the stop strings (borrowed; each non-empty), @n of them; @n 0 = a pass-through
 * @lens:   their lengths (borrowed)
 * @held:   text received but not released yet
 * @hit:    a stop string matched; nothing more is released
 * @which:  index of the stop string that matched (when @hit)
 */
struct kvp_http_stop {
	char *const *stops;
	const size_t *lens;
	size_t n;
	struct kvp_buf held;
	bool hit;
	size_t which;
};

/* Start a matcher over @n stop strings (borrowed for the matcher's life). */
void kvp_http_stop_init(struct kvp_http_stop *s, char *const *stops, const size_t *lens, size_t n);

/* Free the held text. */
void kvp_http_stop_deinit(struct kvp_http_stop *s);

/**
 * kvp_http_stop_feed() - take @len more bytes of generated text
 * @out: the text that can be released now is appended here
 * Return: true when a stop string matched (now or before): generation should stop.
 */
bool kvp_http_stop_feed(struct kvp_http_stop *s, const char *text, size_t len, struct kvp_buf *out);

/* Generation ended without a match: release what is held. */
void kvp_http_stop_flush(struct kvp_http_stop *s, struct kvp_buf *out);

#endif /* KVP_IPC_HTTP_STOP_H */
