/* SPDX-License-Identifier: MIT */
/*
 * emit.c - answers in the OpenAI and Anthropic shapes (see emit.h).
 *
 * Every JSON text goes through util/json.h, so generated text that is not well-formed
 * UTF-8 (a model may emit any bytes) comes out as U+FFFD, never as invalid JSON.
 */
#include "ipc/http/emit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/client/usage_json.h"
#include "ipc/http/toolcall.h"
#include "util/json.h"

static void str(struct kvp_json *j, const char *key, const char *s)
{
	kvp_json_str(j, key, s, strlen(s));
}

void kvp_http_emit_init(struct kvp_http_emit *e, enum kvp_http_api api, bool stream,
			bool include_usage, bool return_token_ids, const char *id,
			long long created, const char *model)
{
	*e = (struct kvp_http_emit){ .api = api,
				     .stream = stream,
				     .include_usage = include_usage,
				     .return_token_ids = return_token_ids,
				     .created = created,
				     .model = model,
				     .text = KVP_BUF_INIT,
				     .reason = KVP_BUF_INIT };
	snprintf(e->id, sizeof(e->id), "%s", id);
	kvp_http_think_init(&e->th);
}

void kvp_http_emit_thinking(struct kvp_http_emit *e)
{
	e->think = true;
}

void kvp_http_emit_deinit(struct kvp_http_emit *e)
{
	kvp_buf_deinit(&e->text);
	kvp_buf_deinit(&e->reason);
	kvp_http_think_deinit(&e->th);
	free(e->ids);
	e->ids = NULL;
	free(e->lp);
	e->lp = NULL;
}

/* ------------------------------------------------------------ logprobs */

void kvp_http_emit_logprobs(struct kvp_http_emit *e, const struct kvp_http_vocab *vocab,
			    const struct kvp_logprob *lp, size_t n, uint32_t n_top)
{
	size_t per = 1 + (size_t)n_top;

	if (!n)
		return;
	if (e->lp_n && n_top != e->lp_top) {
		kvp_buf_fail(&e->text, -EINVAL); /* kvpoold lists as many for every token */
		return;
	}
	if ((e->lp_n + n) * per > e->lp_cap) {
		size_t cap = (e->lp_n + n) * per * 2;
		struct kvp_logprob *p = realloc(e->lp, cap * sizeof(*p));

		if (!p) {
			kvp_buf_fail(&e->text, -ENOMEM); /* the answer is lost, and says so */
			return;
		}
		e->lp = p;
		e->lp_cap = cap;
	}
	memcpy(e->lp + e->lp_n * per, lp, n * per * sizeof(*lp));
	e->lp_n += n;
	e->lp_top = n_top;
	e->vocab = vocab;
}

/* OpenAI's floor for a log-probability that is not a number (JSON has no -inf). */
static void logprob_num(struct kvp_json *j, const char *key, float v)
{
	/* nine significant digits: the float read back is the same float */
	kvp_json_sig(j, key, v > -9999.0f ? v : -9999.0, 9);
}

/* Chat's entry for one id: token (its text), logprob, bytes. */
static void chat_token(struct kvp_http_emit *e, struct kvp_json *j, const struct kvp_logprob *x)
{
	size_t len;
	const char *p = kvp_http_vocab_piece(e->vocab, x->id, &len);

	kvp_json_str(j, "token", p, len);
	logprob_num(j, "logprob", x->logprob);
	kvp_json_begin(j, "bytes", '[');
	for (size_t i = 0; i < len; i++)
		kvp_json_u64(j, NULL, (unsigned char)p[i]);
	kvp_json_end(j, ']');
}

/* Tokens [@from, @to) of the logprobs as the member "logprobs" of a choice. */
static void logprobs_json(struct kvp_http_emit *e, struct kvp_json *j, size_t from, size_t to)
{
	size_t per = 1 + (size_t)e->lp_top;

	if (!e->logprobs || e->api == KVP_HTTP_API_MESSAGES) {
		kvp_json_null(j, "logprobs");
		return;
	}
	kvp_json_begin(j, "logprobs", '{');
	if (e->api == KVP_HTTP_API_CHAT) {
		kvp_json_begin(j, "content", '[');
		for (size_t t = from; t < to; t++) {
			const struct kvp_logprob *x = e->lp + t * per;

			kvp_json_begin(j, NULL, '{');
			chat_token(e, j, x);
			kvp_json_begin(j, "top_logprobs", '[');
			for (uint32_t k = 0; k < e->lp_top; k++) {
				kvp_json_begin(j, NULL, '{');
				chat_token(e, j, &x[1 + k]);
				kvp_json_end(j, '}');
			}
			kvp_json_end(j, ']');
			kvp_json_end(j, '}');
		}
		kvp_json_end(j, ']');
		kvp_json_null(j, "refusal");
		kvp_json_end(j, '}');
		return;
	}
	/* completions' legacy shape: four arrays of one entry per token */
	kvp_json_begin(j, "tokens", '[');
	for (size_t t = from; t < to; t++) {
		size_t len;
		const char *p = kvp_http_vocab_piece(e->vocab, e->lp[t * per].id, &len);

		kvp_json_str(j, NULL, p, len);
	}
	kvp_json_end(j, ']');
	kvp_json_begin(j, "token_logprobs", '[');
	for (size_t t = from; t < to; t++)
		logprob_num(j, NULL, e->lp[t * per].logprob);
	kvp_json_end(j, ']');
	/* the alternatives by their text, and the sampled token's too (OpenAI's "up to
	 * logprobs + 1") */
	kvp_json_begin(j, "top_logprobs", '[');
	for (size_t t = from; t < to; t++) {
		const struct kvp_logprob *x = e->lp + t * per;
		bool seen = false;
		size_t len;
		const char *p;

		kvp_json_begin(j, NULL, '{');
		for (uint32_t k = 0; k < e->lp_top; k++) {
			/* a member name is the program's literal in util/json.h: keys are
			 * written as escaped strings by hand here */
			p = kvp_http_vocab_piece(e->vocab, x[1 + k].id, &len);
			seen |= x[1 + k].id == x->id;
			kvp_json_str(j, NULL, p, len);
			kvp_buf_add(j->out, ":", 1);
			j->first = true;
			logprob_num(j, NULL, x[1 + k].logprob);
		}
		if (!seen) {
			p = kvp_http_vocab_piece(e->vocab, x->id, &len);
			kvp_json_str(j, NULL, p, len);
			kvp_buf_add(j->out, ":", 1);
			j->first = true;
			logprob_num(j, NULL, x->logprob);
		}
		kvp_json_end(j, '}');
	}
	kvp_json_end(j, ']');
	kvp_json_begin(j, "text_offset", '[');
	for (size_t t = from; t < to; t++) {
		size_t len;

		kvp_json_u64(j, NULL, e->lp_text);
		kvp_http_vocab_piece(e->vocab, e->lp[t * per].id, &len);
		e->lp_text += len;
	}
	kvp_json_end(j, ']');
	kvp_json_end(j, '}');
}

/* Stream: the logprobs of the tokens that came since the last chunk. */
static void logprobs_pending(struct kvp_http_emit *e, struct kvp_json *j)
{
	logprobs_json(e, j, e->lp_sent, e->lp_n);
	e->lp_sent = e->lp_n;
}

/* "data: " + JSON + "\n\n" around what @fn writes; @event names an Anthropic event. */
static void sse_begin(struct kvp_buf *out, const char *event, struct kvp_json *j)
{
	if (event)
		kvp_buf_printf(out, "event: %s\n", event);
	kvp_buf_add(out, "data: ", 6);
	kvp_json_init(j, out);
}

static void sse_end(struct kvp_buf *out)
{
	kvp_buf_add(out, "\n\n", 2);
}

/* The fields every OpenAI object starts with. */
static void openai_head(struct kvp_http_emit *e, struct kvp_json *j, const char *object)
{
	str(j, "id", e->id);
	str(j, "object", object);
	kvp_json_i64(j, "created", e->created);
	str(j, "model", e->model);
}

static void ids_array(struct kvp_json *j, const int32_t *ids, size_t n)
{
	kvp_json_begin(j, "token_ids", '[');
	for (size_t i = 0; i < n; i++)
		kvp_json_i64(j, NULL, ids[i]);
	kvp_json_end(j, ']');
}

static void kvpool_usage(const struct kvp_http_emit *e, struct kvp_json *j,
			 const struct kvp_usage *u)
{
	kvp_json_begin(j, "kvpool", '{');
	kvp_usage_json_members(j, u);
	/* requests that named "speculative": kvpoold's DONE carried the figures */
	if (e->has_su) {
		kvp_json_u64(j, "drafted_tokens", e->su.drafted);
		kvp_json_u64(j, "accepted_tokens", e->su.accepted);
	}
	kvp_json_end(j, '}');
}

/* Prompt tokens whose K/V came from the cache, memory or disk: not computed. */
static uint64_t cache_read(const struct kvp_usage *u)
{
	uint64_t n = (uint64_t)u->cached_tokens + u->cached_tokens_disk;

	return n < u->prompt_tokens ? n : u->prompt_tokens;
}

void kvp_http_anthropic_split(const struct kvp_usage *u, uint32_t block_tokens,
			      struct kvp_http_anthropic_usage *out)
{
	uint64_t full = block_tokens ? u->prompt_tokens / block_tokens * block_tokens :
				       u->prompt_tokens;

	out->cache_read = cache_read(u);
	/* kvpoold's cache_creation_tokens also counts the blocks of the generated tokens it
	 * published at the end: the prompt's share is at most its full blocks past the read */
	out->cache_creation = full > out->cache_read ? full - out->cache_read : 0;
	if (out->cache_creation > u->cache_creation_tokens)
		out->cache_creation = u->cache_creation_tokens;
	out->input = u->prompt_tokens - out->cache_read - out->cache_creation;
}

static void openai_usage(const struct kvp_http_emit *e, struct kvp_json *j,
			 const struct kvp_usage *u, uint32_t completion)
{
	kvp_json_begin(j, "usage", '{');
	kvp_json_u64(j, "prompt_tokens", u->prompt_tokens);
	kvp_json_u64(j, "completion_tokens", completion);
	kvp_json_u64(j, "total_tokens", (uint64_t)u->prompt_tokens + completion);
	kvp_json_begin(j, "prompt_tokens_details", '{');
	kvp_json_u64(j, "cached_tokens", cache_read(u));
	kvp_json_end(j, '}');
	kvpool_usage(e, j, u);
	kvp_json_end(j, '}');
}

/* Anthropic splits the prompt: read from the cache, written to it, and the rest. */
static void anthropic_usage(struct kvp_http_emit *e, struct kvp_json *j, const struct kvp_usage *u,
			    uint32_t completion, bool ext)
{
	struct kvp_http_anthropic_usage a;

	kvp_http_anthropic_split(u, e->block_tokens, &a);
	kvp_json_begin(j, "usage", '{');
	kvp_json_u64(j, "input_tokens", a.input);
	kvp_json_u64(j, "cache_creation_input_tokens", a.cache_creation);
	kvp_json_u64(j, "cache_read_input_tokens", a.cache_read);
	kvp_json_u64(j, "output_tokens", completion);
	if (ext)
		kvpool_usage(e, j, u);
	kvp_json_end(j, '}');
}

/* A member whose value is JSON text already (a call's arguments object). */
static void raw(struct kvp_json *j, const char *key, const char *json)
{
	kvp_json_null(j, key);
	if (j->out->len < 4 || memcmp(j->out->p + j->out->len - 4, "null", 4))
		return;	  /* the buffer failed: it says so at the end */
	j->out->len -= 4; /* the null's place, for the text */
	kvp_buf_add(j->out, json, strlen(json));
}

void kvp_http_emit_tools(struct kvp_http_emit *e, char *const *names, size_t n, bool forced)
{
	e->tool_names = (const char *const *)names;
	e->n_tools = n;
	e->forced = forced;
}

/* A call's id: the answer's id after its prefix, and the call's index. */
static void call_id(const struct kvp_http_emit *e, size_t i, char *out, size_t cap)
{
	const char *s = strchr(e->id, '-') ? strchr(e->id, '-') + 1 :
			strchr(e->id, '_') ? strchr(e->id, '_') + 1 :
					     e->id;

	snprintf(out, cap, "%s%s_%zu", e->api == KVP_HTTP_API_MESSAGES ? "toolu_" : "call_", s, i);
}

static void openai_calls(struct kvp_http_emit *e, struct kvp_json *j,
			 const struct kvp_http_calls *c, bool delta)
{
	char id[80];

	kvp_json_begin(j, "tool_calls", '[');
	for (size_t i = 0; i < c->n; i++) {
		kvp_json_begin(j, NULL, '{');
		if (delta)
			kvp_json_u64(j, "index", i);
		call_id(e, i, id, sizeof(id));
		str(j, "id", id);
		str(j, "type", "function");
		kvp_json_begin(j, "function", '{');
		str(j, "name", c->v[i].name);
		str(j, "arguments", c->v[i].args);
		kvp_json_end(j, '}');
		kvp_json_end(j, '}');
	}
	kvp_json_end(j, ']');
}

static void anthropic_tool_use(struct kvp_http_emit *e, struct kvp_json *j,
			       const struct kvp_http_call *c, size_t i, bool empty_input)
{
	char id[80];

	call_id(e, i, id, sizeof(id));
	str(j, "type", "tool_use");
	str(j, "id", id);
	str(j, "name", c->name);
	raw(j, "input", empty_input ? "{}" : c->args);
}

static const char *openai_finish(enum kvp_http_finish f)
{
	return f == KVP_HTTP_FINISH_LENGTH ? "length" :
	       f == KVP_HTTP_FINISH_TOOLS  ? "tool_calls" :
					     "stop";
}

static const char *anthropic_finish(enum kvp_http_finish f)
{
	return f == KVP_HTTP_FINISH_LENGTH ? "max_tokens" :
	       f == KVP_HTTP_FINISH_STOP   ? "stop_sequence" :
	       f == KVP_HTTP_FINISH_TOOLS  ? "tool_use" :
					     "end_turn";
}

static void block_stop(struct kvp_buf *out, size_t index);

/* Anthropic stream: end the thinking block, if one is open (the answer follows). */
static void thinking_block_stop(struct kvp_http_emit *e, struct kvp_buf *out)
{
	if (!e->think_open)
		return;
	e->think_open = false;
	kvp_buf_printf(out,
		       "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
		       "\"index\":%u,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"\"}}"
		       "\n\n",
		       e->block_base);
	block_stop(out, e->block_base);
	e->block_base++;
}

/* An Anthropic content_block_start of @type ("text" or "thinking"), empty; a thinking block
 * carries the signature field kvpool leaves empty. */
static void block_start(struct kvp_http_emit *e, struct kvp_buf *out, const char *type)
{
	struct kvp_json j;

	sse_begin(out, "content_block_start", &j);
	kvp_json_begin(&j, NULL, '{');
	str(&j, "type", "content_block_start");
	kvp_json_u64(&j, "index", e->block_base);
	kvp_json_begin(&j, "content_block", '{');
	str(&j, "type", type);
	str(&j, type, "");
	if (!strcmp(type, "thinking"))
		str(&j, "signature", "");
	kvp_json_end(&j, '}');
	kvp_json_end(&j, '}');
	sse_end(out);
}

static void text_block_start(struct kvp_http_emit *e, struct kvp_buf *out)
{
	thinking_block_stop(e, out);
	e->block_open = true;
	block_start(e, out, "text");
}

static void block_stop(struct kvp_buf *out, size_t index)
{
	kvp_buf_printf(out,
		       "event: content_block_stop\ndata: {\"type\":\"content_block_stop\","
		       "\"index\":%zu}\n\n",
		       index);
}

/*
 * A streamed OpenAI chunk around its one choice: chunk_open() writes the event up to
 * choice 0's "index"; the caller writes the choice's fields; chunk_close() ends the
 * choice and the chunk ("usage": null where the client asked for a usage chunk).
 */
static void chunk_open(struct kvp_http_emit *e, struct kvp_buf *out, struct kvp_json *j)
{
	sse_begin(out, NULL, j);
	kvp_json_begin(j, NULL, '{');
	openai_head(e, j,
		    e->api == KVP_HTTP_API_CHAT ? "chat.completion.chunk" : "text_completion");
	kvp_json_begin(j, "choices", '[');
	kvp_json_begin(j, NULL, '{');
	kvp_json_u64(j, "index", e->index);
}

static void chunk_close(struct kvp_http_emit *e, struct kvp_buf *out, struct kvp_json *j)
{
	kvp_json_end(j, '}');
	kvp_json_end(j, ']');
	if (e->include_usage)
		kvp_json_null(j, "usage");
	kvp_json_end(j, '}');
	sse_end(out);
}

void kvp_http_emit_open(struct kvp_http_emit *e, struct kvp_buf *out)
{
	static const struct kvp_usage zero;
	struct kvp_json j;

	if (!e->stream || e->opened)
		return;
	e->opened = true;
	if (e->api == KVP_HTTP_API_CHAT) {
		chunk_open(e, out, &j);
		kvp_json_begin(&j, "delta", '{');
		str(&j, "role", "assistant");
		str(&j, "content", "");
		kvp_json_end(&j, '}');
		kvp_json_null(&j, "logprobs");
		kvp_json_null(&j, "finish_reason");
		chunk_close(e, out, &j);
	} else if (e->api == KVP_HTTP_API_MESSAGES) {
		sse_begin(out, "message_start", &j);
		kvp_json_begin(&j, NULL, '{');
		str(&j, "type", "message_start");
		kvp_json_begin(&j, "message", '{');
		str(&j, "id", e->id);
		str(&j, "type", "message");
		str(&j, "role", "assistant");
		kvp_json_begin(&j, "content", '[');
		kvp_json_end(&j, ']');
		str(&j, "model", e->model);
		kvp_json_null(&j, "stop_reason");
		kvp_json_null(&j, "stop_sequence");
		/* the prompt's counts, which kvpoold sends with the first token */
		anthropic_usage(e, &j, e->has_start ? &e->start : &zero, 0, false);
		kvp_json_end(&j, '}');
		kvp_json_end(&j, '}');
		sse_end(out);
		/* with tools the answer may have no text block: it starts with its first text;
		 * with reasoning, a thinking block may come first */
		if (!e->n_tools && !e->think)
			text_block_start(e, out);
		kvp_buf_add(out, "event: ping\ndata: {\"type\":\"ping\"}\n\n", 35);
	}
}

/* An Anthropic content_block_delta at @index of @type carrying @len bytes of @text under @key. */
static void block_delta_at(struct kvp_buf *out, size_t index, const char *type, const char *key,
			   const char *text, size_t len)
{
	struct kvp_json j;

	sse_begin(out, "content_block_delta", &j);
	kvp_json_begin(&j, NULL, '{');
	str(&j, "type", "content_block_delta");
	kvp_json_u64(&j, "index", index);
	kvp_json_begin(&j, "delta", '{');
	str(&j, "type", type);
	kvp_json_str(&j, key, text, len);
	kvp_json_end(&j, '}');
	kvp_json_end(&j, '}');
	sse_end(out);
}

/* The same at the current text or thinking block. */
static void block_delta(struct kvp_http_emit *e, struct kvp_buf *out, const char *type,
			const char *key, const char *text, size_t len)
{
	block_delta_at(out, e->block_base, type, key, text, len);
}

/* An OpenAI chunk carrying @text: in the chat delta under @key, or as a completion's text. */
static void chunk_delta(struct kvp_http_emit *e, struct kvp_buf *out, const char *key,
			const char *text, size_t len, const int32_t *ids, size_t n_ids)
{
	struct kvp_json j;

	chunk_open(e, out, &j);
	if (e->api == KVP_HTTP_API_CHAT) {
		kvp_json_begin(&j, "delta", '{');
		kvp_json_str(&j, key, text, len);
		kvp_json_end(&j, '}');
	} else {
		kvp_json_str(&j, "text", text, len);
	}
	logprobs_pending(e, &j);
	kvp_json_null(&j, "finish_reason");
	if (e->return_token_ids)
		ids_array(&j, ids, n_ids);
	chunk_close(e, out, &j);
}

/* One streamed piece of text. */
static void stream_text(struct kvp_http_emit *e, struct kvp_buf *out, const char *text, size_t len,
			const int32_t *ids, size_t n_ids)
{
	if (e->api == KVP_HTTP_API_MESSAGES) {
		if (!e->block_open)
			text_block_start(e, out);
		block_delta(e, out, "text_delta", "text", text, len);
		return;
	}
	chunk_delta(e, out, "content", text, len, ids, n_ids);
}

/* One streamed piece of reasoning (with the ids and logprobs of the tokens so far). */
static void stream_reasoning(struct kvp_http_emit *e, struct kvp_buf *out, const char *text,
			     size_t len, const int32_t *ids, size_t n_ids)
{
	if (e->api == KVP_HTTP_API_MESSAGES) {
		if (!e->think_open) {
			e->think_open = true;
			block_start(e, out, "thinking");
		}
		if (!e->think_omit)
			block_delta(e, out, "thinking_delta", "thinking", text, len);
		return;
	}
	/* reasoning is a chat-only field: a completion never sets think */
	chunk_delta(e, out, "reasoning_content", text, len, ids, n_ids);
}

/* Anthropic stream: call @i's tool_use block opens at @index, its input {} so far. */
static void tool_block_start(struct kvp_http_emit *e, struct kvp_buf *out, size_t index,
			     const struct kvp_http_call *c, size_t i)
{
	struct kvp_json j;

	sse_begin(out, "content_block_start", &j);
	kvp_json_begin(&j, NULL, '{');
	str(&j, "type", "content_block_start");
	kvp_json_u64(&j, "index", index);
	kvp_json_begin(&j, "content_block", '{');
	anthropic_tool_use(e, &j, c, i, true);
	kvp_json_end(&j, '}');
	kvp_json_end(&j, '}');
	sse_end(out);
}

/* Anthropic stream: @len bytes of the input of the tool_use block at @index. */
static void tool_input_delta(struct kvp_buf *out, size_t index, const char *text, size_t len)
{
	block_delta_at(out, index, "input_json_delta", "partial_json", text, len);
}

/*
 * OpenAI stream: a chunk with one tool_calls delta for call 0: its head (@name given: id,
 * type, name, "" arguments) or @len more bytes of its arguments.
 */
static void call_delta(struct kvp_http_emit *e, struct kvp_buf *out, const char *name,
		       const char *text, size_t len)
{
	struct kvp_json j;
	char id[80];

	chunk_open(e, out, &j);
	kvp_json_begin(&j, "delta", '{');
	kvp_json_begin(&j, "tool_calls", '[');
	kvp_json_begin(&j, NULL, '{');
	kvp_json_u64(&j, "index", 0);
	if (name) {
		call_id(e, 0, id, sizeof(id));
		str(&j, "id", id);
		str(&j, "type", "function");
	}
	kvp_json_begin(&j, "function", '{');
	if (name)
		str(&j, "name", name);
	kvp_json_str(&j, "arguments", text, len);
	kvp_json_end(&j, '}');
	kvp_json_end(&j, '}');
	kvp_json_end(&j, ']');
	kvp_json_end(&j, '}');
	logprobs_pending(e, &j);
	kvp_json_null(&j, "finish_reason");
	chunk_close(e, out, &j);
}

/* Stream, forced: the live call's head (its id and name, no arguments yet). */
static void live_start(struct kvp_http_emit *e, struct kvp_buf *out)
{
	struct kvp_http_call c = { .name = (char *)e->tool_names[e->live_tool] };

	if (e->api != KVP_HTTP_API_MESSAGES) {
		call_delta(e, out, c.name, "", 0);
		return;
	}
	thinking_block_stop(e, out); /* the call's block follows a thinking one */
	tool_block_start(e, out, e->block_base, &c, 0);
}

/* Stream, forced: @len more bytes of the live call's arguments. */
static void live_args(struct kvp_http_emit *e, struct kvp_buf *out, const char *text, size_t len)
{
	if (e->api == KVP_HTTP_API_MESSAGES)
		tool_input_delta(out, e->block_base, text, len);
	else
		call_delta(e, out, NULL, text, len);
}

/* Stream, forced: what the text so far adds to the call (0: nothing to add, or no call). */
static void live_feed(struct kvp_http_emit *e, struct kvp_buf *out)
{
	size_t end;

	if (!e->live) {
		e->live = kvp_http_calls_head(e->text.p, e->text.len, e->tool_names, e->n_tools,
					      &e->live_tool, &e->args_at);
		if (e->live <= 0)
			return;
		live_start(e, out);
	}
	end = kvp_http_calls_args_end(e->text.p, e->text.len, e->args_at);
	if (end > e->args_at + e->args_sent) {
		live_args(e, out, e->text.p + e->args_at + e->args_sent,
			  end - e->args_at - e->args_sent);
		e->args_sent = end - e->args_at;
	}
}

static void answer_text(struct kvp_http_emit *e, struct kvp_buf *out, const char *text, size_t len,
			const int32_t *ids, size_t n_ids)
{
	if (e->stream && e->n_tools) { /* the text so far decides what may go out */
		size_t safe;

		kvp_http_emit_open(e, out);
		kvp_buf_add(&e->text, text, len);
		if (e->text.err)
			return;
		if (e->forced && e->live >= 0) {
			live_feed(e, out);
			if (e->live >= 0)
				return;
		}
		if (e->held)
			return;
		safe = kvp_http_calls_safe_prefix(e->text.p, e->text.len, &e->held);
		if (safe > e->sent) {
			stream_text(e, out, e->text.p + e->sent, safe - e->sent, ids, n_ids);
			e->sent = safe;
		}
		return;
	}
	if (e->stream) {
		bool with_ids = e->return_token_ids && e->api != KVP_HTTP_API_MESSAGES;

		kvp_http_emit_open(e, out);
		if (len || (with_ids && n_ids) ||
		    (e->logprobs && e->api != KVP_HTTP_API_MESSAGES && e->lp_n > e->lp_sent))
			stream_text(e, out, text, len, ids, n_ids);
		return;
	}
	kvp_buf_add(&e->text, text, len);
	if (!e->return_token_ids || !n_ids)
		return;
	if (e->n_ids + n_ids > e->cap_ids) {
		size_t cap = (e->n_ids + n_ids) * 2;
		int32_t *p = realloc(e->ids, cap * sizeof(*p));

		if (!p) {
			kvp_buf_fail(&e->text, -ENOMEM); /* the answer is lost, and says so */
			return;
		}
		e->ids = p;
		e->cap_ids = cap;
	}
	memcpy(e->ids + e->n_ids, ids, n_ids * sizeof(*ids));
	e->n_ids += n_ids;
}

/* The two parts the splitter released, @r the reasoning and @a the answer, out. */
static void think_out(struct kvp_http_emit *e, struct kvp_buf *out, struct kvp_buf *r,
		      struct kvp_buf *a, const int32_t *ids, size_t n_ids)
{
	const char *at = a->p ? a->p : ""; /* an empty buffer has no storage */

	if (r->err || a->err) {
		kvp_buf_fail(&e->text, r->err ? r->err : a->err);
		return;
	}
	if (!e->stream) {
		if (r->len)
			kvp_buf_add(&e->reason, r->p, r->len);
		answer_text(e, out, at, a->len, ids, n_ids);
		return;
	}
	if (r->len) { /* the tokens' ids and logprobs go with the reasoning they made */
		kvp_http_emit_open(e, out);
		stream_reasoning(e, out, r->p, r->len, ids, n_ids);
		ids = NULL;
		n_ids = 0;
	}
	if (a->len || n_ids || !r->len)
		answer_text(e, out, at, a->len, ids, n_ids);
}

void kvp_http_emit_text(struct kvp_http_emit *e, struct kvp_buf *out, const char *text, size_t len,
			const int32_t *ids, size_t n_ids)
{
	struct kvp_buf r = KVP_BUF_INIT, a = KVP_BUF_INIT;

	if (!e->think || (e->th.state == KVP_HTTP_THINK_ANSWER && !e->th.held.len)) {
		answer_text(e, out, text, len, ids, n_ids);
		return;
	}
	kvp_http_think_feed(&e->th, text, len, &r, &a);
	think_out(e, out, &r, &a, ids, n_ids);
	kvp_buf_deinit(&r);
	kvp_buf_deinit(&a);
}

/* The end of the text: what the splitter held goes out (or into the answer). */
static void think_flush(struct kvp_http_emit *e, struct kvp_buf *out)
{
	struct kvp_buf r = KVP_BUF_INIT, a = KVP_BUF_INIT;

	if (!e->think)
		return;
	kvp_http_think_flush(&e->th, &r, &a);
	if (r.len || a.len)
		think_out(e, out, &r, &a, NULL, 0);
	kvp_buf_deinit(&r);
	kvp_buf_deinit(&a);
}

/* Stream: the calls, after the text: OpenAI tool_calls deltas, Anthropic tool_use blocks. */
static void stream_calls(struct kvp_http_emit *e, struct kvp_buf *out,
			 const struct kvp_http_calls *c)
{
	struct kvp_json j;

	if (e->api == KVP_HTTP_API_MESSAGES) {
		size_t base;

		thinking_block_stop(e, out);
		base = e->block_base + e->block_open;
		if (e->block_open)
			block_stop(out, e->block_base);
		for (size_t i = 0; i < c->n; i++) {
			tool_block_start(e, out, base + i, &c->v[i], i);
			tool_input_delta(out, base + i, c->v[i].args, strlen(c->v[i].args));
			block_stop(out, base + i);
		}
		return;
	}
	chunk_open(e, out, &j);
	kvp_json_begin(&j, "delta", '{');
	openai_calls(e, &j, c, true);
	kvp_json_end(&j, '}');
	kvp_json_null(&j, "logprobs");
	kvp_json_null(&j, "finish_reason");
	chunk_close(e, out, &j);
}

static void stream_finish(struct kvp_http_emit *e, struct kvp_buf *out, enum kvp_http_finish finish,
			  const char *stop, size_t stop_len, const struct kvp_usage *u,
			  uint32_t completion)
{
	struct kvp_json j;

	kvp_http_emit_open(e, out);
	think_flush(e, out);
	if (e->live > 0) { /* a forced call streamed as written: its end */
		struct kvp_http_calls c = { 0 };
		int r = e->text.err ? 0 :
				      kvp_http_calls_parse(&c, e->text.p, e->text.len,
							   e->tool_names, e->n_tools);

		if (r > 0 && c.n == 1 && strlen(c.v[0].args) > e->args_sent)
			live_args(e, out, c.v[0].args + e->args_sent,
				  strlen(c.v[0].args) - e->args_sent);
		if (r > 0)
			finish = KVP_HTTP_FINISH_TOOLS;
		kvp_http_calls_free(&c);
		if (e->api == KVP_HTTP_API_MESSAGES)
			block_stop(out, e->block_base);
	} else if (e->n_tools) { /* what was held: calls, or the rest of the text */
		struct kvp_http_calls c = { 0 };
		int r = e->text.err ? 0 :
				      kvp_http_calls_parse(&c, e->text.p ? e->text.p : "",
							   e->text.len, e->tool_names, e->n_tools);

		if (r > 0) {
			/* the content went out up to the first call: its rest, if any */
			if (c.content_len > e->sent)
				stream_text(e, out, c.content + e->sent, c.content_len - e->sent,
					    NULL, 0);
			stream_calls(e, out, &c);
			finish = KVP_HTTP_FINISH_TOOLS;
		} else if (e->text.len > e->sent) {
			stream_text(e, out, e->text.p + e->sent, e->text.len - e->sent, NULL, 0);
		}
		kvp_http_calls_free(&c);
	}
	if (e->api == KVP_HTTP_API_MESSAGES) {
		if (!e->block_open && finish != KVP_HTTP_FINISH_TOOLS && e->live <= 0)
			text_block_start(e, out); /* an empty answer still has its text block */
		if (e->block_open && !(e->n_tools && finish == KVP_HTTP_FINISH_TOOLS))
			block_stop(out, e->block_base);
		sse_begin(out, "message_delta", &j);
		kvp_json_begin(&j, NULL, '{');
		str(&j, "type", "message_delta");
		kvp_json_begin(&j, "delta", '{');
		str(&j, "stop_reason", anthropic_finish(finish));
		if (stop)
			kvp_json_str(&j, "stop_sequence", stop, stop_len);
		else
			kvp_json_null(&j, "stop_sequence");
		kvp_json_end(&j, '}');
		anthropic_usage(e, &j, u, completion, true);
		kvp_json_end(&j, '}');
		sse_end(out);
		kvp_buf_add(out, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
			    strlen("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
		return;
	}
	chunk_open(e, out, &j);
	if (e->api == KVP_HTTP_API_CHAT) {
		kvp_json_begin(&j, "delta", '{');
		kvp_json_end(&j, '}');
	} else {
		str(&j, "text", "");
	}
	logprobs_pending(e, &j);
	str(&j, "finish_reason", openai_finish(finish));
	chunk_close(e, out, &j);
	if (e->no_tail)
		return; /* n > 1: the last choice writes the usage and [DONE] */
	if (e->include_usage) {
		sse_begin(out, NULL, &j);
		kvp_json_begin(&j, NULL, '{');
		openai_head(e, &j,
			    e->api == KVP_HTTP_API_CHAT ? "chat.completion.chunk" :
							  "text_completion");
		kvp_json_begin(&j, "choices", '[');
		kvp_json_end(&j, ']');
		openai_usage(e, &j, u, completion);
		kvp_json_end(&j, '}');
		sse_end(out);
	}
	kvp_buf_add(out, "data: [DONE]\n\n", 14);
}

/* One choice of a whole OpenAI answer: its text or @c's calls, logprobs, finish. */
static void openai_choice(struct kvp_http_emit *e, struct kvp_json *j,
			  const struct kvp_http_calls *c, enum kvp_http_finish finish)
{
	kvp_json_begin(j, NULL, '{');
	kvp_json_u64(j, "index", e->index);
	if (e->api == KVP_HTTP_API_CHAT) {
		kvp_json_begin(j, "message", '{');
		str(j, "role", "assistant");
		if (c->n && c->content_len)
			kvp_json_str(j, "content", c->content, c->content_len);
		else if (c->n)
			kvp_json_null(j, "content");
		else
			kvp_json_str(j, "content", e->text.p ? e->text.p : "", e->text.len);
		if (kvp_http_think_opened(&e->th))
			kvp_json_str(j, "reasoning_content", e->reason.p ? e->reason.p : "",
				     e->reason.len);
		kvp_json_null(j, "refusal");
		if (c->n)
			openai_calls(e, j, c, false);
		kvp_json_end(j, '}');
	} else {
		kvp_json_str(j, "text", e->text.p ? e->text.p : "", e->text.len);
	}
	logprobs_json(e, j, 0, e->lp_n);
	str(j, "finish_reason", openai_finish(finish));
	if (e->return_token_ids)
		ids_array(j, e->ids, e->n_ids);
	kvp_json_end(j, '}');
}

void kvp_http_emit_finish(struct kvp_http_emit *e, struct kvp_buf *out, enum kvp_http_finish finish,
			  const char *stop, size_t stop_len, const struct kvp_usage *u,
			  uint32_t completion)
{
	struct kvp_http_calls c = { 0 };
	struct kvp_json j;

	if (e->stream) {
		stream_finish(e, out, finish, stop, stop_len, u, completion);
		return;
	}
	think_flush(e, out);
	if (e->text.err) {
		kvp_buf_fail(out, e->text.err);
		return;
	}
	if (e->n_tools) {
		int r = kvp_http_calls_parse(&c, e->text.p ? e->text.p : "", e->text.len,
					     e->tool_names, e->n_tools);

		if (r < 0) {
			kvp_buf_fail(out, r);
			return;
		}
		if (r > 0)
			finish = KVP_HTTP_FINISH_TOOLS;
	}
	kvp_json_init(&j, out);
	kvp_json_begin(&j, NULL, '{');
	if (e->api == KVP_HTTP_API_MESSAGES) {
		str(&j, "id", e->id);
		str(&j, "type", "message");
		str(&j, "role", "assistant");
		str(&j, "model", e->model);
		kvp_json_begin(&j, "content", '[');
		if (kvp_http_think_opened(&e->th) && e->reason.len) {
			kvp_json_begin(&j, NULL, '{');
			str(&j, "type", "thinking");
			kvp_json_str(&j, "thinking", e->reason.p,
				     e->think_omit ? 0 : e->reason.len);
			str(&j, "signature", "");
			kvp_json_end(&j, '}');
		}
		if (!c.n || c.content_len) {
			kvp_json_begin(&j, NULL, '{');
			str(&j, "type", "text");
			if (c.n)
				kvp_json_str(&j, "text", c.content, c.content_len);
			else
				kvp_json_str(&j, "text", e->text.p ? e->text.p : "", e->text.len);
			kvp_json_end(&j, '}');
		}
		for (size_t i = 0; i < c.n; i++) {
			kvp_json_begin(&j, NULL, '{');
			anthropic_tool_use(e, &j, &c.v[i], i, false);
			kvp_json_end(&j, '}');
		}
		kvp_json_end(&j, ']');
		str(&j, "stop_reason", anthropic_finish(finish));
		if (stop)
			kvp_json_str(&j, "stop_sequence", stop, stop_len);
		else
			kvp_json_null(&j, "stop_sequence");
		anthropic_usage(e, &j, u, completion, true);
		kvp_json_end(&j, '}');
		kvp_http_calls_free(&c);
		return;
	}
	openai_head(e, &j, e->api == KVP_HTTP_API_CHAT ? "chat.completion" : "text_completion");
	kvp_json_begin(&j, "choices", '[');
	openai_choice(e, &j, &c, finish);
	kvp_json_end(&j, ']');
	openai_usage(e, &j, u, completion);
	kvp_json_end(&j, '}');
	kvp_http_calls_free(&c);
}

void kvp_http_emit_finish_n(struct kvp_http_emit *const *e, size_t n, struct kvp_buf *out,
			    const enum kvp_http_finish *finish, const struct kvp_usage *u,
			    uint32_t completion)
{
	struct kvp_json j;

	if (e[0]->stream) {
		for (size_t i = 0; i < n; i++) {
			e[i]->no_tail = i + 1 < n;
			stream_finish(e[i], out, finish[i], NULL, 0, u, completion);
		}
		return;
	}
	for (size_t i = 0; i < n; i++)
		think_flush(e[i], out);
	for (size_t i = 0; i < n; i++)
		if (e[i]->text.err) {
			kvp_buf_fail(out, e[i]->text.err);
			return;
		}
	kvp_json_init(&j, out);
	kvp_json_begin(&j, NULL, '{');
	openai_head(e[0], &j,
		    e[0]->api == KVP_HTTP_API_CHAT ? "chat.completion" : "text_completion");
	kvp_json_begin(&j, "choices", '[');
	for (size_t i = 0; i < n; i++) {
		struct kvp_http_calls c = { 0 };
		enum kvp_http_finish f = finish[i];

		if (e[i]->n_tools) {
			int r = kvp_http_calls_parse(&c, e[i]->text.p ? e[i]->text.p : "",
						     e[i]->text.len, e[i]->tool_names,
						     e[i]->n_tools);

			if (r < 0) {
				kvp_buf_fail(out, r);
				return;
			}
			if (r > 0)
				f = KVP_HTTP_FINISH_TOOLS;
		}
		openai_choice(e[i], &j, &c, f);
		kvp_http_calls_free(&c);
	}
	kvp_json_end(&j, ']');
	openai_usage(e[0], &j, u, completion);
	kvp_json_end(&j, '}');
}

void kvp_http_emit_error(struct kvp_http_emit *e, struct kvp_buf *out,
			 const struct kvp_http_err *err)
{
	if (e->api == KVP_HTTP_API_MESSAGES) {
		kvp_buf_add(out, "event: error\ndata: ", 19);
		kvp_http_err_json(err, KVP_HTTP_SHAPE_ANTHROPIC, out);
		kvp_buf_add(out, "\n\n", 2);
		return;
	}
	kvp_buf_add(out, "data: ", 6);
	kvp_http_err_json(err, KVP_HTTP_SHAPE_OPENAI, out);
	kvp_buf_add(out, "\n\ndata: [DONE]\n\n", 16);
}

void kvp_http_emit_ids(struct kvp_http_emit *e, struct kvp_buf *out, const int32_t *ids,
		       size_t n_ids, const char *text, size_t len, uint32_t n_ctx)
{
	struct kvp_json j;

	kvp_json_init(&j, out);
	kvp_json_begin(&j, NULL, '{');
	switch (e->api) {
	case KVP_HTTP_API_COUNT_TOKENS:
		kvp_json_u64(&j, "input_tokens", n_ids);
		break;
	case KVP_HTTP_API_DETOKENIZE:
		kvp_json_str(&j, "prompt", text ? text : "", len);
		break;
	default:
		kvp_json_u64(&j, "count", n_ids);
		kvp_json_u64(&j, "max_model_len", n_ctx);
		kvp_json_begin(&j, "tokens", '[');
		for (size_t i = 0; i < n_ids; i++)
			kvp_json_i64(&j, NULL, ids[i]);
		kvp_json_end(&j, ']');
		kvp_json_null(&j, "token_strs");
		break;
	}
	kvp_json_end(&j, '}');
}
