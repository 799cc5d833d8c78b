/* SPDX-License-Identifier: MIT */
/*
 * think.h - a reasoning block split off the front of generated text.
 *
 * Templates with a reasoning section (Qwen3's, compute/text/chat.h kvp_chat_reasons())
 * have the model open its answer with "<think>\n...\n</think>\n\n" and then answer.  The
 * splitter reads the text as it arrives and hands the two parts out apart: the reasoning
 * (OpenAI's reasoning_content, Anthropic's thinking block) and the answer.  As with tool
 * calls (toolcall.h), kvpool-http does not know the model's template: a "<think>" is taken
 * for reasoning only as the first thing the model wrote (whitespace before it allowed),
 * where a template that reasons puts it; anywhere else it is text, and text that does
 * not open with it is the answer, unchanged.
 *
 * The parts are trimmed as the Qwen3 template trims them when it renders reasoning back
 * (reasoning.strip('\n'), content.lstrip('\n')), so an answer given back in the history
 * renders as the model wrote it.  An unterminated block (max_tokens came first) is
 * reasoning up to the end, and the answer is empty.
 *
 * Streamed, a byte is held only while it may still be part of "<think>" at the start, of
 * "</think>", or newlines the trim may drop: at most the tag's length plus a run of
 * newlines.
 *
 * Thread: a splitter belongs to its request (used under the request's lock).
 */
#ifndef KVP_IPC_HTTP_THINK_H
#define KVP_IPC_HTTP_THINK_H

#include <stdbool.h>
#include <stddef.h>

#include "util/buf.h"

#define KVP_HTTP_THINK_OPEN "<think>"
#define KVP_HTTP_THINK_CLOSE "</think>"

enum kvp_http_think_state {
	KVP_HTTP_THINK_START = 0, /* nothing but whitespace yet: a block may open */
	KVP_HTTP_THINK_LEAD,	  /* "<think>" seen: its leading newlines are dropped */
	KVP_HTTP_THINK_REASON,	  /* in the block */
	KVP_HTTP_THINK_AFTER,	  /* "</think>" seen: the answer's leading newlines dropped */
	KVP_HTTP_THINK_ANSWER,	  /* the rest is the answer, passed through */
};

/**
 * struct kvp_http_think - a splitter
 * @state: enum kvp_http_think_state
 * @held:  text received and not released yet
 * @opened: the text opened with a reasoning block
 */
struct kvp_http_think {
	enum kvp_http_think_state state;
	struct kvp_buf held;
	bool opened;
};

void kvp_http_think_init(struct kvp_http_think *t);
void kvp_http_think_deinit(struct kvp_http_think *t);

/*
 * kvp_http_think_feed() - @len more bytes of generated text: what can be released now is
 * appended to @reason (the block's text) and @answer (the text after it, or all of it
 * when there is no block).
 */
void kvp_http_think_feed(struct kvp_http_think *t, const char *text, size_t len,
			 struct kvp_buf *reason, struct kvp_buf *answer);

/* The end of the text: what is held is released (an open block's rest is reasoning). */
void kvp_http_think_flush(struct kvp_http_think *t, struct kvp_buf *reason, struct kvp_buf *answer);

/* Did the text open with a reasoning block? */
static inline bool kvp_http_think_opened(const struct kvp_http_think *t)
{
	return t->opened;
}

#endif /* KVP_IPC_HTTP_THINK_H */
