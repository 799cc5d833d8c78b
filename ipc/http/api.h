/* SPDX-License-Identifier: MIT */
/*
 * api.h - the request bodies kvpool-http accepts, parsed and checked into one struct
 * kvp_http_gen, and the error bodies it answers with, in each API's shape.
 *
 *   OpenAI    POST /v1/completions, POST /v1/chat/completions
 *   Anthropic POST /v1/messages
 *   Anthropic POST /v1/messages/count_tokens
 *   vLLM's    POST /tokenize, POST /detokenize
 *
 * Parsing is strict about what kvpool does (a wrong type or a value out of range is a
 * 400 naming the field) and about what it cannot do (best_of > 1, echo, images: a 400
 * saying it is not supported, never silently ignored; tools on a template without them
 * are kvpoold's 400); fields that change nothing
 * here (user, metadata, ...) and unknown fields are ignored, as the hosted APIs do for
 * fields they do not know.  docs/http.md lists every field.
 *
 * Thread: any; nothing here is shared.
 */
#ifndef KVP_IPC_HTTP_API_H
#define KVP_IPC_HTTP_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

enum kvp_http_api {
	KVP_HTTP_API_COMPLETIONS,  /* OpenAI /v1/completions */
	KVP_HTTP_API_CHAT,	   /* OpenAI /v1/chat/completions */
	KVP_HTTP_API_MESSAGES,	   /* Anthropic /v1/messages */
	KVP_HTTP_API_TOKENIZE,	   /* /tokenize */
	KVP_HTTP_API_DETOKENIZE,   /* /detokenize */
	KVP_HTTP_API_COUNT_TOKENS, /* Anthropic /v1/messages/count_tokens */
};

/* Which error body a request gets. */
enum kvp_http_shape {
	KVP_HTTP_SHAPE_OPENAI,	  /* {"error":{"message","type","param","code"}} */
	KVP_HTTP_SHAPE_ANTHROPIC, /* {"type":"error","error":{"type","message"}} */
};

/**
 * struct kvp_http_err - an error answer
 * @status:  HTTP status
 * @code:    OpenAI's error.code (a literal), or NULL
 * @param:   the request field at fault (a literal or a static name), or NULL
 * @message: the sentence
 */
struct kvp_http_err {
	unsigned int status;
	const char *code;
	const char *param;
	char message[512];
};

enum kvp_http_role {
	KVP_HTTP_ROLE_SYSTEM,
	KVP_HTTP_ROLE_USER,
	KVP_HTTP_ROLE_ASSISTANT,
	KVP_HTTP_ROLE_TOOL,	 /* a tool's result */
	KVP_HTTP_ROLE_TOOL_CALL, /* a call of the assistant message before it: "NAME\nARGS" */
};

/* tool_choice (OpenAI's auto / none / required / a function; Anthropic's auto / none /
 * any / tool) */
enum kvp_http_tool_choice {
	KVP_HTTP_TOOLS_AUTO = 0, /* the model may call: its text is parsed for calls */
	KVP_HTTP_TOOLS_NONE,	 /* tools rendered, the text is never taken for a call */
	KVP_HTTP_TOOLS_REQUIRED, /* a call of one of the tools, forced by the grammar */
	KVP_HTTP_TOOLS_NAMED,	 /* a call of @tool_choice_name, forced */
};

/* reasoning (OpenAI reasoning_effort / chat_template_kwargs.enable_thinking, Anthropic
 * thinking): kvpoold's KVP_CHAT_THINKING / KVP_CHAT_NO_THINKING */
enum kvp_http_thinking {
	KVP_HTTP_THINK_DEFAULT = 0, /* the template's default (OpenAI, not named) */
	KVP_HTTP_THINK_ON,	    /* asked for: refused where the template has none */
	KVP_HTTP_THINK_OFF,	    /* turned off (Anthropic's default) */
};

#define KVP_HTTP_TOOLS_MAX 128 /* tool definitions per request */

/* Anthropic cache_control TTLs. */
enum kvp_http_ttl {
	KVP_HTTP_TTL_NONE = 0,
	KVP_HTTP_TTL_5M,
	KVP_HTTP_TTL_1H,
};

/**
 * struct kvp_http_msg - one chat message, its text parts joined
 * @text:   owned, NUL-terminated, @len bytes of UTF-8
 * @cache:  the TTL of a cache_control breakpoint at the end of this message (the last
 *          marked block of its content), or KVP_HTTP_TTL_NONE
 * @id:     a call's id (OpenAI tool_calls[].id, Anthropic tool_use.id) or the one a
 *          result answers (tool_call_id, tool_use_id): owned, NUL-terminated; NULL when
 *          the body gave none
 */
struct kvp_http_msg {
	enum kvp_http_role role;
	char *text;
	size_t len;
	enum kvp_http_ttl cache;
	char *id;
};

#define KVP_HTTP_STOP_MAX 16	   /* stop strings per request */
#define KVP_HTTP_STOP_LEN_MAX 256  /* bytes of one */
#define KVP_HTTP_BREAKPOINTS_MAX 4 /* Anthropic's limit on cache_control blocks */
#define KVP_HTTP_CACHE_SALT_MAX 64
#define KVP_HTTP_PRIORITY_MIN (-1000) /* kvpoold's range (KVP_PRIORITY_MIN/MAX), negated */
#define KVP_HTTP_PRIORITY_MAX 1000

/**
 * struct kvp_http_gen - one parsed request (all zero before parsing)
 * @api:              which endpoint's body this is
 * @model:            owned; NULL when not given
 * @text, @text_len:  completions/tokenize: the prompt text (owned), or
 * @tokens, @n_tokens: completions/detokenize: token ids (owned)
 * @msgs, @n_msgs:    chat/messages: the conversation, system first (owned)
 * @n_breakpoints:    messages: cache_control blocks seen (<= KVP_HTTP_BREAKPOINTS_MAX)
 * @max_tokens:       0 = not given (the server picks the API's default)
 * @temperature, @top_p, @top_k, @seed (@has_seed): sampling; defaults 1, 1, 0
 * @stop, @stop_len, @n_stop: stop strings (owned)
 * @stream:           answer with server-sent events
 * @include_usage:    OpenAI stream_options.include_usage
 * @return_token_ids: vLLM's return_token_ids: generated ids in the answer
 * @cache_salt:       vLLM's cache_salt (owned), @cache_salt_len bytes
 * @priority:         vLLM's priority, lower is served first (kvpoold's is the other
 *                    way round): in [KVP_HTTP_PRIORITY_MIN, KVP_HTTP_PRIORITY_MAX]
 * @has_priority:     the body named one (else kvpoold applies its domain's default;
 *                    @priority is 0)
 * @no_special:       tokenize: add_special_tokens false (no BOS)
 * @grammar:          enum kvp_grammar_kind (response_format json_object / json_schema)
 * @schema, @schema_len: json_schema's schema, compact JSON (owned), checked to compile
 * @presence, @frequency: OpenAI's presence_penalty / frequency_penalty, [-2, 2]
 * @bias_ids, @bias, @n_bias: OpenAI's logit_bias (owned)
 * @tools, @tools_len: the tool definitions in OpenAI's shape as a JSON array (owned;
 *                    Anthropic's converted), NULL without tools
 * @tool_names, @n_tools: their function names (owned), for the answer's parser
 * @logprobs:         OpenAI logprobs (chat: true; completions: an integer given)
 * @top_logprobs:     alternatives per token: chat top_logprobs, completions logprobs
 *                    (0 .. KVP_TOP_LOGPROBS_MAX)
 * @n:                OpenAI n: choices (1 .. KVP_PARALLEL_MAX; 0 before parsing = 1)
 * @tool_choice:      enum kvp_http_tool_choice; REQUIRED and NAMED set @grammar and
 *                    @schema to the calls' schema ({"name": const, "arguments": the
 *                    tool's parameters}, anyOf for several)
 * @thinking:         enum kvp_http_thinking (chat and messages)
 * @think_omit:       Anthropic thinking.display "omitted": thinking blocks without their text
 * @think_budget:     Anthropic thinking.budget_tokens (0: none): kvpoold closes the
 *                    reasoning section once it holds that many tokens
 * @speculative:      kvpool's "speculative" true / false: KVP_SPECULATIVE_ON / _OFF;
 *                    absent, KVP_SPECULATIVE_DEFAULT (kvpoold's scheduler.speculative)
 */
struct kvp_http_gen {
	enum kvp_http_api api;
	char *model;
	char *text;
	size_t text_len;
	int32_t *tokens;
	size_t n_tokens;
	struct kvp_http_msg *msgs;
	size_t n_msgs;
	unsigned int n_breakpoints;
	uint32_t max_tokens;
	float temperature;
	float top_p;
	uint32_t top_k;
	uint64_t seed;
	bool has_seed;
	char *stop[KVP_HTTP_STOP_MAX];
	size_t stop_len[KVP_HTTP_STOP_MAX];
	size_t n_stop;
	bool stream;
	bool include_usage;
	bool return_token_ids;
	char *cache_salt;
	size_t cache_salt_len;
	int32_t priority;
	bool has_priority;
	bool no_special;
	uint32_t grammar;
	char *schema;
	size_t schema_len;
	float presence, frequency;
	int32_t *bias_ids;
	float *bias;
	uint32_t n_bias;
	char *tools;
	size_t tools_len;
	char **tool_names;
	size_t n_tools;
	enum kvp_http_tool_choice tool_choice;
	bool logprobs;
	uint32_t top_logprobs;
	uint32_t n;
	enum kvp_http_thinking thinking;
	bool think_omit;
	uint32_t think_budget;
	uint32_t speculative;
};

/**
 * kvp_http_parse() - parse and check a request body
 * @g:       out; filled on success, left for kvp_http_gen_deinit() either way
 * @n_vocab: token ids must be below it (0: not known, not checked here)
 * @err:     out; the 400 to answer on failure
 * Return: 0, -EINVAL (a bad request: @err), or -ENOMEM.
 */
int kvp_http_parse(struct kvp_http_gen *g, enum kvp_http_api api, const char *body, size_t len,
		   uint32_t n_vocab, struct kvp_http_err *err);

/* Free what kvp_http_parse() allocated; safe on an all-zero struct. */
void kvp_http_gen_deinit(struct kvp_http_gen *g);

/* Set @e (printf-style message). */
void kvp_http_err_set(struct kvp_http_err *e, unsigned int status, const char *code,
		      const char *param, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* The error's type string in @shape ("invalid_request_error", "not_found_error", ...). */
const char *kvp_http_err_type(const struct kvp_http_err *e, enum kvp_http_shape shape);

/* The error body of @e in @shape, appended to @out. */
void kvp_http_err_json(const struct kvp_http_err *e, enum kvp_http_shape shape,
		       struct kvp_buf *out);

#endif /* KVP_IPC_HTTP_API_H */
