/* SPDX-License-Identifier: MIT */
/*
 * emit.h - generated text out, in each API's shape: one JSON body, or server-sent
 * events as the text arrives.
 *
 *   completions  {"object":"text_completion", choices[0].text}; stream: chunks of the same
 *                shape, then an optional usage chunk (stream_options.include_usage),
 *                then "data: [DONE]"
 *   chat         {"object":"chat.completion", choices[0].message}; stream:
 *                "chat.completion.chunk"s with a delta (role first), usage, [DONE]
 *   messages     Anthropic {"type":"message", content[0].text}; stream: message_start,
 *                content_block_start, ping, content_block_delta..., content_block_stop,
 *                message_delta (stop_reason and the usage), message_stop
 *
 * Usage: OpenAI's prompt_tokens, completion_tokens, total_tokens and
 * prompt_tokens_details.cached_tokens (read from kvpoold's cache, memory or disk tier);
 * Anthropic's input_tokens (prompt tokens neither read from nor written to the cache),
 * cache_read_input_tokens, cache_creation_input_tokens (see kvp_http_anthropic_split()),
 * output_tokens; and in both, kvpool's own DONE fields
 * under usage.kvpool.  Anthropic's message_start has no usage yet (kvpoold reports it at
 * the end), so it carries zeros and message_delta carries every counter.
 *
 * Thread: an emitter belongs to its request (used under the request's lock).
 */
#ifndef KVP_IPC_HTTP_EMIT_H
#define KVP_IPC_HTTP_EMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/http/api.h"
#include "ipc/http/think.h"
#include "ipc/http/vocab.h"
#include "kvpool/proto.h"
#include "util/buf.h"

enum kvp_http_finish {
	KVP_HTTP_FINISH_LENGTH, /* max_tokens generated */
	KVP_HTTP_FINISH_EOS,	/* the model ended its answer */
	KVP_HTTP_FINISH_STOP,	/* a stop string matched */
	KVP_HTTP_FINISH_TOOLS,	/* the answer is tool calls (set by the emitter) */
};

/**
 * struct kvp_http_emit - the answer being written
 * @api, @stream, @include_usage, @return_token_ids: what was asked
 * @id:       "cmpl-...", "chatcmpl-..." or "msg_..."
 * @created:  Unix time of the request
 * @model:    the model name answered (borrowed)
 * @opened:   stream: the opening events are out
 * @text:     not streaming: the answer so far
 * @ids:      not streaming, @return_token_ids: the generated ids so far (@n_ids)
 * @block_tokens: kvpoold's cache block size, for Anthropic's usage (0: not known);
 *            set after kvp_http_emit_init()
 */
struct kvp_http_emit {
	enum kvp_http_api api;
	bool stream, include_usage, return_token_ids;
	char id[48];
	long long created;
	const char *model;
	bool opened;
	struct kvp_buf text;
	int32_t *ids;
	size_t n_ids, cap_ids;
	uint32_t block_tokens;
	struct kvp_usage start; /* the prompt's counts for the opening event (@has_start) */
	bool has_start;
	/* kvp_http_emit_tools(): the answer is parsed for calls of these tools */
	const char *const *tool_names;
	size_t n_tools;
	size_t sent;	  /* stream, tools: bytes of @text streamed as content */
	bool held;	  /* stream, tools: a call began; the rest waits for the end */
	bool block_open;  /* Anthropic stream, tools: the text block has started */
	bool forced;	  /* tools: the grammar forces one call */
	int live;	  /* stream, forced: 1 its arguments are streaming, -1 no call, 0 not yet */
	size_t live_tool; /* live: the tool's index in @tool_names */
	size_t args_at, args_sent; /* live: the arguments' offset in @text, bytes sent */
	/* kvp_http_emit_logprobs(): per token its struct kvp_logprob and @lp_top more */
	uint32_t index; /* OpenAI n > 1: the choice this emitter writes (choices[].index) */
	bool no_tail;	/* stream: not the last choice (no usage chunk nor [DONE]) */
	bool logprobs;
	const struct kvp_http_vocab *vocab;
	struct kvp_logprob *lp;
	size_t lp_n, lp_cap;
	uint32_t lp_top;
	size_t lp_sent;	  /* stream: tokens whose logprobs went out */
	uint64_t lp_text; /* completions: bytes of the tokens before lp_sent (text_offset) */
	/* kvp_http_emit_thinking(): a leading <think> block is the answer's reasoning */
	bool think;
	struct kvp_http_think th;
	struct kvp_buf reason; /* not streaming: the reasoning so far */
	bool think_open;       /* Anthropic stream: the thinking block has started */
	bool think_omit;       /* Anthropic: thinking blocks without their text (display omitted) */
	uint32_t block_base;   /* Anthropic: index of the text block (1 after a thinking one) */
	/* set before the finish: the usage's "kvpool" object adds drafted and accepted */
	bool has_su;
	struct kvp_spec_usage su;
};

/**
 * struct kvp_http_anthropic_usage - a prompt split as Anthropic's usage splits it
 * @input:          tokens neither read from nor written to the cache (input_tokens)
 * @cache_read:     read from the cache, memory or disk tier (cache_read_input_tokens)
 * @cache_creation: written to it (cache_creation_input_tokens): the prompt's full blocks
 *                  kvpoold newly published, not the generated tokens' blocks it also counts
 * The three add up to kvpoold's prompt_tokens.
 */
struct kvp_http_anthropic_usage {
	uint64_t input;
	uint64_t cache_read;
	uint64_t cache_creation;
};

/* Split @u's prompt for Anthropic (@block_tokens: the cache's block size, 0 = unknown). */
void kvp_http_anthropic_split(const struct kvp_usage *u, uint32_t block_tokens,
			      struct kvp_http_anthropic_usage *out);

/* Start an answer; @id is copied, @model borrowed. */
void kvp_http_emit_init(struct kvp_http_emit *e, enum kvp_http_api api, bool stream,
			bool include_usage, bool return_token_ids, const char *id,
			long long created, const char *model);

void kvp_http_emit_deinit(struct kvp_http_emit *e);

/*
 * kvp_http_emit_tools() - parse the answer for calls of @names (borrowed, @n of them;
 * ipc/http/toolcall.h): calls found become tool_calls / tool_use blocks and the finish
 * "tool_calls" / "tool_use".  Streaming, text goes out as it comes until a call may be
 * starting; what follows is held until the end (then sent as calls, or as text if it
 * does not parse).  @forced (tool_choice required / named: the grammar writes one call,
 * see kvp_http_calls_head()): streamed, the call goes out as it is written instead, its
 * head once the name is whole, then the arguments' text piece by piece (OpenAI
 * tool_calls deltas of partial "arguments", Anthropic input_json_delta); cut short (by
 * max_tokens or a stop string), it ends there, unfinished, with the finish given (the
 * whole answer is then the text, as an unparsed call is).  Call before any text.
 */
void kvp_http_emit_tools(struct kvp_http_emit *e, char *const *names, size_t n, bool forced);

/*
 * kvp_http_emit_thinking() - split the reasoning off the answer (ipc/http/think.h): a
 * block the text opens with becomes OpenAI's message.reasoning_content (streamed:
 * delta.reasoning_content) and Anthropic's thinking content block before the text one
 * (streamed: content_block_start, thinking_delta..., signature_delta, content_block_stop;
 * its signature is "": kvpool signs nothing, and checks no signature given back); the
 * content, the tool calls parsed from it, then hold the answer alone.  Call before any
 * text.
 */
void kvp_http_emit_thinking(struct kvp_http_emit *e);

/*
 * kvp_http_emit_logprobs() - the logprobs of the next @n generated tokens: for each, its
 * struct kvp_logprob then @n_top alternatives, most likely first (kvpoold's LOGPROBS
 * layout); @vocab names the ids (borrowed until the answer is finished).  Call before the
 * tokens' kvp_http_emit_text(): OpenAI's answers then carry choices[].logprobs, chat's
 * {"content": [{token, logprob, bytes, top_logprobs}]} and completions' legacy {tokens,
 * token_logprobs, top_logprobs, text_offset}; streamed, each chunk the entries of the
 * tokens that came since the last.  A log-probability that is not finite (an id the
 * grammar or a bias of -100 removed) is written as -9999, OpenAI's floor.
 */
void kvp_http_emit_logprobs(struct kvp_http_emit *e, const struct kvp_http_vocab *vocab,
			    const struct kvp_logprob *lp, size_t n, uint32_t n_top);

/* Stream: the opening events (a no-op after the first call or when not streaming). */
void kvp_http_emit_open(struct kvp_http_emit *e, struct kvp_buf *out);

/**
 * kvp_http_emit_text() - new text and the ids that produced it
 * Stream: one chunk appended to @out (none for empty text unless ids are returned);
 * otherwise kept for kvp_http_emit_finish().
 */
void kvp_http_emit_text(struct kvp_http_emit *e, struct kvp_buf *out, const char *text, size_t len,
			const int32_t *ids, size_t n_ids);

/**
 * kvp_http_emit_finish() - the end: closing events, or the whole JSON body
 * @stop:       the stop string that matched (@finish KVP_HTTP_FINISH_STOP), else NULL
 * @u:          kvpoold's usage
 * @completion: generated tokens the answer counts (up to a matched stop string)
 */
void kvp_http_emit_finish(struct kvp_http_emit *e, struct kvp_buf *out, enum kvp_http_finish finish,
			  const char *stop, size_t stop_len, const struct kvp_usage *u,
			  uint32_t completion);

/*
 * kvp_http_emit_finish_n() - the end of an OpenAI answer of @n choices, choice i written
 * by @e[i] (its index set to i) and ended by @finish[i]: one body with every choice, or
 * each choice's closing chunk and then one usage chunk and [DONE]; @completion counts
 * the generated tokens over all choices (OpenAI's usage: the prompt once).
 */
void kvp_http_emit_finish_n(struct kvp_http_emit *const *e, size_t n, struct kvp_buf *out,
			    const enum kvp_http_finish *finish, const struct kvp_usage *u,
			    uint32_t completion);

/**
 * kvp_http_emit_ids() - the whole answer of a tokenizer endpoint, from kvpoold's IDS
 * /tokenize: {"count", "max_model_len" (@n_ctx), "tokens", "token_strs": null};
 * /detokenize: {"prompt": @text}; count_tokens: {"input_tokens"}.
 */
void kvp_http_emit_ids(struct kvp_http_emit *e, struct kvp_buf *out, const int32_t *ids,
		       size_t n_ids, const char *text, size_t len, uint32_t n_ctx);

/* Stream: an error event after the stream started (and [DONE] for OpenAI). */
void kvp_http_emit_error(struct kvp_http_emit *e, struct kvp_buf *out,
			 const struct kvp_http_err *err);

#endif /* KVP_IPC_HTTP_EMIT_H */
