/* SPDX-License-Identifier: MIT */
/*
 * test_http_emit.c - ipc/http/emit.c: answers in the OpenAI completions, OpenAI chat and
 * Anthropic Messages shapes, whole and streamed as server-sent events; every JSON text is
 * parsed back with jansson and checked field by field, events in their order.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>

#include "ipc/http/emit.h"
#include "ipc/http/toolcall.h"

static const struct kvp_usage usage = {
	.prompt_tokens = 100,
	.cached_tokens = 64,
	.cache_creation_tokens = 32,
	.recomputed_tokens = 36,
	.generated_tokens = 3,
	.ttft_ms = 1.5,
};

/* One server-sent event: its name (or "") and its data parsed (NULL for [DONE]). */
struct event {
	char name[32];
	json_t *data;
	bool done;
};

/* Split @text into events (at most @cap); every data line must be JSON or [DONE]. */
static size_t events(const char *text, struct event *ev, size_t cap)
{
	size_t n = 0;
	const char *p = text;

	while (*p) {
		const char *end = strstr(p, "\n\n");
		struct event *e = &ev[n];

		assert_non_null(end); /* every event ends with a blank line */
		assert_true(n < cap);
		memset(e, 0, sizeof(*e));
		if (!strncmp(p, "event: ", 7)) {
			const char *nl = strchr(p, '\n');

			snprintf(e->name, sizeof(e->name), "%.*s", (int)(nl - p - 7), p + 7);
			p = nl + 1;
		}
		assert_memory_equal(p, "data: ", 6);
		p += 6;
		if (!strncmp(p, "[DONE]\n\n", 8)) {
			e->done = true;
		} else {
			json_error_t je;

			e->data = json_loadb(p, (size_t)(end - p), 0, &je);
			if (!e->data)
				fail_msg("bad JSON in an event: %s: %.*s", je.text, (int)(end - p),
					 p);
		}
		p = end + 2;
		n++;
	}
	return n;
}

static void free_events(struct event *ev, size_t n)
{
	for (size_t i = 0; i < n; i++)
		json_decref(ev[i].data);
}

/* The value at a dotted path ("choices.0.delta.content": indices for arrays), or NULL. */
static json_t *at(json_t *o, const char *path)
{
	char key[64];
	const char *dot;

	while ((dot = strchr(path, '.'))) {
		snprintf(key, sizeof(key), "%.*s", (int)(dot - path), path);
		o = json_is_array(o) ? json_array_get(o, (size_t)atoi(key)) :
				       json_object_get(o, key);
		path = dot + 1;
	}
	o = json_is_array(o) ? json_array_get(o, (size_t)atoi(path)) : json_object_get(o, path);
	return o;
}

static const char *str(json_t *o, const char *path)
{
	o = at(o, path);
	return json_is_string(o) ? json_string_value(o) : json_is_null(o) ? "(null)" : NULL;
}

static json_int_t num(json_t *o, const char *path)
{
	o = at(o, path);
	if (!json_is_integer(o))
		fail_msg("%s: not an integer", path);
	return json_integer_value(o);
}

static json_t *whole(enum kvp_http_api api, bool ids, enum kvp_http_finish fin, const char *stop)
{
	static const int32_t a[] = { 10, 11 }, b[] = { 12 };
	struct kvp_http_emit e;
	struct kvp_buf out = KVP_BUF_INIT;
	json_t *j;

	kvp_http_emit_init(&e, api, false, false, ids, "id-1", 1700000000, "model-x");
	kvp_http_emit_text(&e, &out, "Hel", 3, a, 2);
	kvp_http_emit_text(&e, &out, "lo\xff", 3, b, 1); /* a bad byte: U+FFFD */
	assert_int_equal(out.len, 0);			 /* nothing before the end */
	kvp_http_emit_finish(&e, &out, fin, stop, stop ? strlen(stop) : 0, &usage, 3);
	j = json_loads(out.p, 0, NULL);
	assert_non_null(j);
	kvp_buf_deinit(&out);
	kvp_http_emit_deinit(&e);
	return j;
}

static void test_completion_whole(void **state)
{
	json_t *j = whole(KVP_HTTP_API_COMPLETIONS, true, KVP_HTTP_FINISH_LENGTH, NULL);

	/* text_completion with usage: prompt, completion, total, cached; kvpool's own */
	assert_string_equal(str(j, "object"), "text_completion");
	assert_string_equal(str(j, "id"), "id-1");
	assert_int_equal(num(j, "created"), 1700000000);
	assert_string_equal(str(j, "model"), "model-x");
	assert_string_equal(str(j, "choices.0.text"), "Hello\xef\xbf\xbd");
	assert_string_equal(str(j, "choices.0.finish_reason"), "length");
	assert_string_equal(str(j, "choices.0.logprobs"), "(null)");
	assert_int_equal(num(j, "choices.0.token_ids.2"), 12);
	assert_int_equal(num(j, "usage.prompt_tokens"), 100);
	assert_int_equal(num(j, "usage.completion_tokens"), 3);
	assert_int_equal(num(j, "usage.total_tokens"), 103);
	assert_int_equal(num(j, "usage.prompt_tokens_details.cached_tokens"), 64);
	assert_int_equal(num(j, "usage.kvpool.cache_creation_tokens"), 32);
	assert_int_equal(num(j, "usage.kvpool.recomputed_tokens"), 36);
	json_decref(j);
	j = whole(KVP_HTTP_API_COMPLETIONS, false, KVP_HTTP_FINISH_EOS, NULL);
	assert_string_equal(str(j, "choices.0.finish_reason"), "stop");
	assert_null(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "token_ids"));
	/* no speculation figures unless kvpoold's DONE carried them */
	assert_null(json_object_get(json_object_get(json_object_get(j, "usage"), "kvpool"),
				    "drafted_tokens"));
	json_decref(j);
}

/* A DONE that carried the drafted and accepted tokens: the usage's "kvpool" object says them. */
static void test_spec_usage(void **state)
{
	static const enum kvp_http_api apis[] = { KVP_HTTP_API_COMPLETIONS, KVP_HTTP_API_CHAT,
						  KVP_HTTP_API_MESSAGES };

	for (size_t i = 0; i < 3; i++) {
		for (int stream = 0; stream < 2; stream++) {
			struct kvp_http_emit e;
			struct kvp_buf out = KVP_BUF_INIT;
			const char *p;
			json_t *j;

			kvp_http_emit_init(&e, apis[i], stream, true, false, "id-1", 1700000000,
					   "model-x");
			kvp_http_emit_text(&e, &out, "Hi", 2, NULL, 0);
			e.has_su = true;
			e.su = (struct kvp_spec_usage){ .drafted = 17, .accepted = 5 };
			out.len = 0;
			kvp_http_emit_finish(&e, &out, KVP_HTTP_FINISH_LENGTH, NULL, 0, &usage, 3);
			assert_true(kvp_buf_finish(&out) > 0);
			/* streamed: the usage is in the last event with data */
			p = out.p;
			if (stream) {
				const char *last = NULL, *q = out.p;

				while ((q = strstr(q, "\"usage\""))) {
					last = q;
					q++;
				}
				assert_non_null(last);
				while (last > out.p && memcmp(last, "data: ", 6))
					last--;
				p = last + 6;
			}
			j = json_loadb(p, strcspn(p, "\n"), 0, NULL);
			assert_non_null(j);
			assert_int_equal(num(j, "usage.kvpool.drafted_tokens"), 17);
			assert_int_equal(num(j, "usage.kvpool.accepted_tokens"), 5);
			json_decref(j);
			kvp_buf_deinit(&out);
			kvp_http_emit_deinit(&e);
		}
	}
}

static void test_chat_whole(void **state)
{
	json_t *j = whole(KVP_HTTP_API_CHAT, false, KVP_HTTP_FINISH_STOP, "lo");

	/* chat.completion: the message of the assistant */
	assert_string_equal(str(j, "object"), "chat.completion");
	assert_string_equal(str(j, "choices.0.message.role"), "assistant");
	assert_string_equal(str(j, "choices.0.message.content"), "Hello\xef\xbf\xbd");
	assert_string_equal(str(j, "choices.0.finish_reason"), "stop");
	assert_int_equal(num(j, "usage.prompt_tokens_details.cached_tokens"), 64);
	json_decref(j);
}

static void test_messages_whole(void **state)
{
	json_t *j = whole(KVP_HTTP_API_MESSAGES, false, KVP_HTTP_FINISH_STOP, "END");

	/* an Anthropic message; input_tokens counts what was neither read from nor
	 * written to the cache: 100 - 64 - 32 */
	assert_string_equal(str(j, "type"), "message");
	assert_string_equal(str(j, "role"), "assistant");
	assert_string_equal(str(j, "content.0.type"), "text");
	assert_string_equal(str(j, "content.0.text"), "Hello\xef\xbf\xbd");
	assert_string_equal(str(j, "stop_reason"), "stop_sequence");
	assert_string_equal(str(j, "stop_sequence"), "END");
	assert_int_equal(num(j, "usage.input_tokens"), 4);
	assert_int_equal(num(j, "usage.cache_read_input_tokens"), 64);
	assert_int_equal(num(j, "usage.cache_creation_input_tokens"), 32);
	assert_int_equal(num(j, "usage.output_tokens"), 3);
	json_decref(j);
	j = whole(KVP_HTTP_API_MESSAGES, false, KVP_HTTP_FINISH_EOS, NULL);
	assert_string_equal(str(j, "stop_reason"), "end_turn");
	assert_string_equal(str(j, "stop_sequence"), "(null)");
	json_decref(j);
	j = whole(KVP_HTTP_API_MESSAGES, false, KVP_HTTP_FINISH_LENGTH, NULL);
	assert_string_equal(str(j, "stop_reason"), "max_tokens");
	json_decref(j);
}

/* A streamed answer: two texts (one empty), then the end. */
static size_t stream(enum kvp_http_api api, bool include_usage, bool ids, struct event *ev,
		     size_t cap)
{
	static const int32_t a[] = { 10 }, b[] = { 11 };
	struct kvp_http_emit e;
	struct kvp_buf out = KVP_BUF_INIT;
	size_t n;

	kvp_http_emit_init(&e, api, true, include_usage, ids, "id-2", 1, "model-x");
	kvp_http_emit_text(&e, &out, "Hi", 2, a, 1);
	kvp_http_emit_text(&e, &out, "", 0, b, 1); /* a character still incomplete */
	kvp_http_emit_text(&e, &out, " there", 6, NULL, 0);
	kvp_http_emit_finish(&e, &out, KVP_HTTP_FINISH_LENGTH, NULL, 0, &usage, 3);
	n = events(out.p, ev, cap);
	kvp_buf_deinit(&out);
	kvp_http_emit_deinit(&e);
	return n;
}

static void test_completion_stream(void **state)
{
	struct event ev[16];
	size_t n = stream(KVP_HTTP_API_COMPLETIONS, true, false, ev, 16);

	/* text chunks (none for empty text), the finish chunk, the usage chunk with no
	 * choices, then [DONE] */
	assert_int_equal(n, 5);
	assert_string_equal(str(ev[0].data, "object"), "text_completion");
	assert_string_equal(str(ev[0].data, "choices.0.text"), "Hi");
	assert_string_equal(str(ev[0].data, "choices.0.finish_reason"), "(null)");
	assert_string_equal(str(ev[0].data, "usage"), "(null)");
	assert_string_equal(str(ev[1].data, "choices.0.text"), " there");
	assert_string_equal(str(ev[2].data, "choices.0.text"), "");
	assert_string_equal(str(ev[2].data, "choices.0.finish_reason"), "length");
	assert_int_equal(json_array_size(json_object_get(ev[3].data, "choices")), 0);
	assert_int_equal(num(ev[3].data, "usage.completion_tokens"), 3);
	assert_int_equal(num(ev[3].data, "usage.prompt_tokens_details.cached_tokens"), 64);
	assert_true(ev[4].done);
	free_events(ev, n);
	/* without include_usage: no usage member at all, no usage chunk */
	n = stream(KVP_HTTP_API_COMPLETIONS, false, false, ev, 16);
	assert_int_equal(n, 4);
	assert_null(json_object_get(ev[0].data, "usage"));
	assert_true(ev[3].done);
	free_events(ev, n);
	/* with return_token_ids: a chunk per TOKEN, even one with no text yet */
	n = stream(KVP_HTTP_API_COMPLETIONS, false, true, ev, 16);
	assert_int_equal(n, 5);
	assert_int_equal(num(ev[0].data, "choices.0.token_ids.0"), 10);
	assert_string_equal(str(ev[1].data, "choices.0.text"), "");
	assert_int_equal(num(ev[1].data, "choices.0.token_ids.0"), 11);
	free_events(ev, n);
}

static void test_chat_stream(void **state)
{
	struct event ev[16];
	size_t n = stream(KVP_HTTP_API_CHAT, true, false, ev, 16);

	/* the role first, content deltas, an empty delta with the finish, usage, [DONE] */
	assert_int_equal(n, 6);
	for (size_t i = 0; i < 5; i++)
		assert_string_equal(str(ev[i].data, "object"), "chat.completion.chunk");
	assert_string_equal(str(ev[0].data, "choices.0.delta.role"), "assistant");
	assert_string_equal(str(ev[0].data, "choices.0.delta.content"), "");
	assert_string_equal(str(ev[1].data, "choices.0.delta.content"), "Hi");
	assert_string_equal(str(ev[2].data, "choices.0.delta.content"), " there");
	assert_int_equal(json_object_size(json_object_get(json_array_get(json_object_get(ev[3].data,
											 "choices"),
									 0),
							  "delta")),
			 0);
	assert_string_equal(str(ev[3].data, "choices.0.finish_reason"), "length");
	assert_int_equal(num(ev[4].data, "usage.total_tokens"), 103);
	assert_true(ev[5].done);
	free_events(ev, n);
}

static void test_messages_stream(void **state)
{
	static const char *const names[] = {
		"message_start",       "content_block_start", "ping",
		"content_block_delta", "content_block_delta", "content_block_stop",
		"message_delta",       "message_stop"
	};
	struct event ev[16];
	size_t n = stream(KVP_HTTP_API_MESSAGES, false, true, ev, 16);

	/* Anthropic's event sequence; each event's data names its own type; the usage
	 * comes whole in message_delta */
	assert_int_equal(n, 8);
	for (size_t i = 0; i < n; i++) {
		assert_string_equal(ev[i].name, names[i]);
		assert_string_equal(str(ev[i].data, "type"), names[i]);
	}
	assert_string_equal(str(ev[0].data, "message.role"), "assistant");
	assert_string_equal(str(ev[0].data, "message.model"), "model-x");
	assert_int_equal(num(ev[0].data, "message.usage.input_tokens"), 0);
	assert_string_equal(str(ev[1].data, "content_block.type"), "text");
	assert_string_equal(str(ev[3].data, "delta.type"), "text_delta");
	assert_string_equal(str(ev[3].data, "delta.text"), "Hi");
	assert_string_equal(str(ev[4].data, "delta.text"), " there");
	assert_string_equal(str(ev[6].data, "delta.stop_reason"), "max_tokens");
	assert_int_equal(num(ev[6].data, "usage.output_tokens"), 3);
	assert_int_equal(num(ev[6].data, "usage.input_tokens"), 4);
	assert_int_equal(num(ev[6].data, "usage.cache_read_input_tokens"), 64);
	assert_int_equal(num(ev[6].data, "usage.cache_creation_input_tokens"), 32);
	free_events(ev, n);
}

static void test_stream_errors(void **state)
{
	struct kvp_http_err err;
	struct kvp_http_emit e;
	struct kvp_buf out = KVP_BUF_INIT;
	struct event ev[8];
	size_t n;

	/* an error after the stream started: OpenAI's data {"error":...} then [DONE];
	 * Anthropic's "event: error" */
	kvp_http_err_set(&err, 503, NULL, NULL, "kvpoold is stopping");
	kvp_http_emit_init(&e, KVP_HTTP_API_COMPLETIONS, true, false, false, "id", 1, "m");
	kvp_http_emit_error(&e, &out, &err);
	n = events(out.p, ev, 8);
	assert_int_equal(n, 2);
	assert_string_equal(str(ev[0].data, "error.message"), "kvpoold is stopping");
	assert_string_equal(str(ev[0].data, "error.type"), "server_error");
	assert_true(ev[1].done);
	free_events(ev, n);
	kvp_buf_deinit(&out);
	kvp_http_emit_deinit(&e);
	kvp_http_emit_init(&e, KVP_HTTP_API_MESSAGES, true, false, false, "id", 1, "m");
	kvp_http_emit_error(&e, &out, &err);
	n = events(out.p, ev, 8);
	assert_int_equal(n, 1);
	assert_string_equal(ev[0].name, "error");
	assert_string_equal(str(ev[0].data, "type"), "error");
	assert_string_equal(str(ev[0].data, "error.type"), "overloaded_error");
	free_events(ev, n);
	kvp_buf_deinit(&out);
	kvp_http_emit_deinit(&e);
}

static void test_anthropic_split(void **state)
{
	struct kvp_http_anthropic_usage a;
	struct kvp_usage u = { .prompt_tokens = 100,
			       .cached_tokens = 48,
			       .cache_creation_tokens = 64,
			       .generated_tokens = 40 };

	/* kvpoold's cache_creation_tokens (64) also holds the generated tokens' blocks: the
	 * prompt's share is its full blocks (96) past what was read (48) */
	kvp_http_anthropic_split(&u, 16, &a);
	assert_int_equal(a.cache_read, 48);
	assert_int_equal(a.cache_creation, 48);
	assert_int_equal(a.input, 4);
	/* the disk tier's tokens were read from the cache too */
	u.cached_tokens = 32;
	u.cached_tokens_disk = 16;
	kvp_http_anthropic_split(&u, 16, &a);
	assert_int_equal(a.cache_read, 48);
	assert_int_equal(a.cache_creation + a.cache_read + a.input, 100);
	/* nothing published (no-cache, or every block there already) */
	u.cache_creation_tokens = 0;
	kvp_http_anthropic_split(&u, 16, &a);
	assert_int_equal(a.cache_creation, 0);
	assert_int_equal(a.input, 52);
	/* block size unknown: the whole prompt may count as written, never more than that */
	u = (struct kvp_usage){ .prompt_tokens = 10, .cache_creation_tokens = 99 };
	kvp_http_anthropic_split(&u, 0, &a);
	assert_int_equal(a.cache_creation, 10);
	assert_int_equal(a.input, 0);
}

/* The tokenizer endpoints' answer for @api, parsed. */
static json_t *ids_answer(enum kvp_http_api api)
{
	static const int32_t ids[] = { 1, 72, 105 };
	struct kvp_http_emit e;
	struct kvp_buf out = KVP_BUF_INIT;
	json_t *j;

	kvp_http_emit_init(&e, api, false, false, false, "id-3", 1, "model-x");
	kvp_http_emit_ids(&e, &out, ids, 3, api == KVP_HTTP_API_DETOKENIZE ? "Hi\xff" : NULL,
			  api == KVP_HTTP_API_DETOKENIZE ? 3 : 0, 4096);
	j = json_loads(out.p, 0, NULL);
	assert_non_null(j);
	kvp_buf_deinit(&out);
	kvp_http_emit_deinit(&e);
	return j;
}

static char *tool_names[] = { "get_weather", "now" };

static void test_tool_call_parse(void **state)
{
	/*
	 * the forms the templates teach: Qwen's <tool_call> blocks after text, Llama's (and a
	 * forced call's) whole-answer object with "parameters" or "arguments"; anything
	 * else, an unknown tool or JSON that does not parse, is no call (the text stays)
	 */
	static const char qwen[] =
		"Let me look.\n<tool_call>\n{\"name\": \"get_weather\", "
		"\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
		"<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
	static const char llama[] = " {\"name\": \"now\", \"parameters\": {\"tz\": \"UTC\"}}\n";
	static const char str_args[] = "{\"name\":\"now\",\"arguments\":\"{\\\"a\\\":1}\"}";
	static const char numbers[] =
		"{\"name\": \"now\", \"arguments\": {\"x\": 0.1, \"y\": 1.5e3, "
		"\"n\": 123456789012345678901, \"s\": \"\\u00e9\\\"}\"}}";
	static const char twice[] =
		"{\"arguments\": {\"a\":1}, \"name\": \"now\", \"arguments\":{\"b\":2}}";
	static const char *const none[] = {
		"Hello there",
		"{\"name\": \"rm_rf\", \"parameters\": {}}",
		"{\"name\": \"now\", \"parameters\": [1]}",
		"{\"name\": \"now\", \"parameters\": {} trailing",
		"<tool_call>\n{\"name\": \"now\", \"arguments\": {\n</tool_call>",
		"ok <tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call> <tool_call>oops",
	};
	struct kvp_http_calls c;
	const char *const *names = (const char *const *)tool_names;
	bool started;

	assert_int_equal(kvp_http_calls_parse(&c, qwen, strlen(qwen), names, 2), 1);
	assert_int_equal(c.n, 2);
	assert_string_equal(c.v[0].name, "get_weather");
	assert_string_equal(c.v[0].args, "{\"city\": \"Paris\"}"); /* as written */
	assert_string_equal(c.v[1].args, "{}");
	assert_string_equal(c.content, "Let me look.");
	kvp_http_calls_free(&c);
	assert_int_equal(kvp_http_calls_parse(&c, llama, strlen(llama), names, 2), 1);
	assert_int_equal(c.n, 1);
	assert_string_equal(c.v[0].args, "{\"tz\": \"UTC\"}");
	assert_int_equal(c.content_len, 0);
	kvp_http_calls_free(&c);
	/* the arguments' text is kept: numbers as written, an integer past 64 bits, escapes */
	assert_int_equal(kvp_http_calls_parse(&c, numbers, strlen(numbers), names, 2), 1);
	assert_string_equal(c.v[0].args, "{\"x\": 0.1, \"y\": 1.5e3, \"n\": 123456789012345678901, "
					 "\"s\": \"\\u00e9\\\"}\"}");
	kvp_http_calls_free(&c);
	/* given twice, the last (as jansson reads it) */
	assert_int_equal(kvp_http_calls_parse(&c, twice, strlen(twice), names, 2), 1);
	assert_string_equal(c.v[0].args, "{\"b\":2}");
	kvp_http_calls_free(&c);
	/* arguments given as a string of JSON */
	assert_int_equal(kvp_http_calls_parse(&c, str_args, strlen(str_args), names, 2), 1);
	assert_string_equal(c.v[0].args, "{\"a\":1}");
	kvp_http_calls_free(&c);
	for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
		assert_int_equal(kvp_http_calls_parse(&c, none[i], strlen(none[i]), names, 2), 0);
		assert_int_equal(c.n, 0);
		assert_null(c.content);
	}
	/* streaming: text goes out up to a call's possible start */
	assert_int_equal(kvp_http_calls_safe_prefix("  \n", 3, &started), 0);
	assert_false(started);
	assert_int_equal(kvp_http_calls_safe_prefix(" {\"na", 5, &started), 0);
	assert_true(started);
	assert_int_equal(kvp_http_calls_safe_prefix("Hi <tool_", 9, &started), 3);
	assert_false(started);
	assert_int_equal(kvp_http_calls_safe_prefix("Hi <b>", 6, &started), 6);
	assert_int_equal(kvp_http_calls_safe_prefix("Hi <tool_call>{", 15, &started), 3);
	assert_true(started);
}

/* An answer of @text in @n pieces, with tools, whole or streamed, into @out. */
static void tool_answer_f(enum kvp_http_api api, bool stream, bool forced,
			  const char *const *pieces, size_t n, enum kvp_http_finish fin,
			  struct kvp_buf *out)
{
	struct kvp_http_emit e;

	kvp_http_emit_init(&e, api, stream, false, false, "chatcmpl-7", 1700000000, "model-x");
	kvp_http_emit_tools(&e, tool_names, 2, forced);
	for (size_t i = 0; i < n; i++)
		kvp_http_emit_text(&e, out, pieces[i], strlen(pieces[i]), NULL, 0);
	kvp_http_emit_finish(&e, out, fin, NULL, 0, &usage, 3);
	kvp_http_emit_deinit(&e);
}

static void tool_answer(enum kvp_http_api api, bool stream, const char *const *pieces, size_t n,
			struct kvp_buf *out)
{
	tool_answer_f(api, stream, false, pieces, n, KVP_HTTP_FINISH_EOS, out);
}

static void test_tool_answers(void **state)
{
	/*
	 * calls become OpenAI tool_calls (finish_reason "tool_calls") and Anthropic tool_use
	 * blocks (stop_reason "tool_use"), whole and streamed; text before a call streams
	 * as it comes, and an answer that is not a call streams whole, late
	 */
	static const char *const call[] = { "Sure.", " <tool",
					    "_call>\n{\"name\": \"get_weather\", ",
					    "\"arguments\": {\"city\": \"Rome\"}}\n</tool_call>" };
	static const char *const text[] = { "{not", " a call}" };
	struct kvp_buf out = KVP_BUF_INIT;
	struct event ev[16];
	json_t *j;
	size_t n;

	tool_answer(KVP_HTTP_API_CHAT, false, call, 4, &out);
	j = json_loads(out.p, 0, NULL);
	assert_non_null(j);
	assert_string_equal(str(j, "choices.0.finish_reason"), "tool_calls");
	assert_string_equal(str(j, "choices.0.message.content"), "Sure.");
	assert_string_equal(str(j, "choices.0.message.tool_calls.0.type"), "function");
	assert_string_equal(str(j, "choices.0.message.tool_calls.0.id"), "call_7_0");
	assert_string_equal(str(j, "choices.0.message.tool_calls.0.function.name"), "get_weather");
	assert_string_equal(str(j, "choices.0.message.tool_calls.0.function.arguments"),
			    "{\"city\": \"Rome\"}");
	json_decref(j);
	kvp_buf_deinit(&out);

	tool_answer(KVP_HTTP_API_CHAT, true, call, 4, &out);
	n = events(out.p, ev, 16);
	/* role, "Sure.", " " (then "<tool" is held: a call may start), the call, finish */
	assert_int_equal(n, 6);
	assert_string_equal(str(ev[1].data, "choices.0.delta.content"), "Sure.");
	assert_string_equal(str(ev[2].data, "choices.0.delta.content"), " ");
	assert_int_equal(num(ev[3].data, "choices.0.delta.tool_calls.0.index"), 0);
	assert_string_equal(str(ev[3].data, "choices.0.delta.tool_calls.0.function.name"),
			    "get_weather");
	assert_string_equal(str(ev[3].data, "choices.0.delta.tool_calls.0.function.arguments"),
			    "{\"city\": \"Rome\"}");
	assert_string_equal(str(ev[4].data, "choices.0.finish_reason"), "tool_calls");
	assert_true(ev[5].done);
	free_events(ev, n);
	kvp_buf_deinit(&out);

	tool_answer(KVP_HTTP_API_CHAT, true, text, 2, &out);
	n = events(out.p, ev, 16);
	assert_int_equal(n, 4); /* role, the whole text at the end, finish, [DONE] */
	assert_string_equal(str(ev[1].data, "choices.0.delta.content"), "{not a call}");
	assert_string_equal(str(ev[2].data, "choices.0.finish_reason"), "stop");
	free_events(ev, n);
	kvp_buf_deinit(&out);

	tool_answer(KVP_HTTP_API_MESSAGES, false, call, 4, &out);
	j = json_loads(out.p, 0, NULL);
	assert_non_null(j);
	assert_string_equal(str(j, "stop_reason"), "tool_use");
	assert_string_equal(str(j, "content.0.type"), "text");
	assert_string_equal(str(j, "content.0.text"), "Sure.");
	assert_string_equal(str(j, "content.1.type"), "tool_use");
	assert_string_equal(str(j, "content.1.id"), "toolu_7_0");
	assert_string_equal(str(j, "content.1.name"), "get_weather");
	assert_string_equal(str(j, "content.1.input.city"), "Rome");
	json_decref(j);
	kvp_buf_deinit(&out);

	tool_answer(KVP_HTTP_API_MESSAGES, true, call, 4, &out);
	n = events(out.p, ev, 16);
	{
		static const char *const names[] = { "message_start",	    "ping",
						     "content_block_start", "content_block_delta",
						     "content_block_delta", "content_block_stop",
						     "content_block_start", "content_block_delta",
						     "content_block_stop",  "message_delta",
						     "message_stop" };

		assert_int_equal(n, 11);
		for (size_t i = 0; i < n; i++)
			assert_string_equal(ev[i].name, names[i]);
	}
	assert_string_equal(str(ev[2].data, "content_block.type"), "text");
	assert_string_equal(str(ev[3].data, "delta.text"), "Sure.");
	assert_string_equal(str(ev[4].data, "delta.text"), " ");
	assert_int_equal(num(ev[5].data, "index"), 0);
	assert_int_equal(num(ev[6].data, "index"), 1);
	assert_string_equal(str(ev[6].data, "content_block.type"), "tool_use");
	assert_int_equal(json_object_size(
				 json_object_get(json_object_get(ev[6].data, "content_block"),
						 "input")),
			 0);
	assert_string_equal(str(ev[7].data, "delta.type"), "input_json_delta");
	assert_string_equal(str(ev[7].data, "delta.partial_json"), "{\"city\": \"Rome\"}");
	assert_int_equal(num(ev[8].data, "index"), 1);
	assert_string_equal(str(ev[9].data, "delta.stop_reason"), "tool_use");
	free_events(ev, n);
	kvp_buf_deinit(&out);
}

static void test_mistral_calls(void **state)
{
	/*
	 * Mistral's [TOOL_CALLS] [...]: the marker is a control token (no text), so the whole
	 * answer an array of calls is one, as is an array after the marker written out (the
	 * text before it the content); an array that is not all calls of declared tools,
	 * or has text after it, is the answer unchanged
	 */
	static const char two[] = " [{\"name\": \"get_weather\", \"arguments\": {\"city\": "
				  "\"Paris\"}}, {\"name\": \"now\", \"arguments\": {}}]\n";
	static const char marked[] =
		"Checking.[TOOL_CALLS] [{\"name\":\"now\",\"arguments\":{\"tz\": 1.50}}]";
	static const char *const none[] = {
		"[1, 2]",
		"[]",
		"[{\"name\": \"now\", \"arguments\": {}}] and more",
		"[{\"name\": \"now\", \"arguments\": {}}, 3]",
		"[{\"name\": \"now\", \"arguments\": {}}",
		"[{\"name\": \"rm\", \"arguments\": {}}]",
		"[TOOL_CALLS] not json",
		"[TOOL_CALLS] {\"name\": \"now\", \"arguments\": {}}",
	};
	static const char *const pieces[] = { " [{\"name\": \"get_",
					      "weather\", \"arguments\": {\"city\": \"Rome\"}}]" };
	static const char *const note[] = { "[1] is", " a note" };
	const char *const *names = (const char *const *)tool_names;
	struct kvp_http_calls c;
	struct kvp_buf out = KVP_BUF_INIT;
	struct event ev[16];
	char id[KVP_HTTP_CALL_ID9], id2[KVP_HTTP_CALL_ID9];
	bool started;
	size_t n;

	assert_int_equal(kvp_http_calls_parse(&c, two, strlen(two), names, 2), 1);
	assert_int_equal(c.n, 2);
	assert_string_equal(c.v[0].name, "get_weather");
	assert_string_equal(c.v[0].args, "{\"city\": \"Paris\"}");
	assert_string_equal(c.v[1].name, "now");
	assert_string_equal(c.content, "");
	kvp_http_calls_free(&c);
	assert_int_equal(kvp_http_calls_parse(&c, marked, strlen(marked), names, 2), 1);
	assert_int_equal(c.n, 1);
	assert_string_equal(c.v[0].args, "{\"tz\": 1.50}");
	assert_string_equal(c.content, "Checking.");
	kvp_http_calls_free(&c);
	for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
		assert_int_equal(kvp_http_calls_parse(&c, none[i], strlen(none[i]), names, 2), 0);
		assert_null(c.content);
	}
	/* streamed: held from the '[' on, then one tool_calls delta */
	assert_int_equal(kvp_http_calls_safe_prefix(" [", 2, &started), 0);
	assert_true(started);
	assert_int_equal(kvp_http_calls_safe_prefix("Hi [TOOL_", 9, &started), 3);
	assert_false(started);
	assert_int_equal(kvp_http_calls_safe_prefix("Hi [TOOL_CALLS][", 16, &started), 3);
	assert_true(started);
	tool_answer(KVP_HTTP_API_CHAT, true, pieces, 2, &out);
	n = events(out.p, ev, 16);
	assert_int_equal(n, 4); /* role, the call, finish, [DONE] */
	assert_string_equal(str(ev[1].data, "choices.0.delta.tool_calls.0.function.name"),
			    "get_weather");
	assert_string_equal(str(ev[1].data, "choices.0.delta.tool_calls.0.function.arguments"),
			    "{\"city\": \"Rome\"}");
	assert_string_equal(str(ev[2].data, "choices.0.finish_reason"), "tool_calls");
	free_events(ev, n);
	kvp_buf_deinit(&out);
	tool_answer(KVP_HTTP_API_CHAT, true, note, 2, &out);
	n = events(out.p, ev, 16);
	assert_int_equal(n, 4); /* role, the whole text at the end, finish, [DONE] */
	assert_string_equal(str(ev[1].data, "choices.0.delta.content"), "[1] is a note");
	assert_string_equal(str(ev[2].data, "choices.0.finish_reason"), "stop");
	free_events(ev, n);
	kvp_buf_deinit(&out);
	/* ids kvpoold gets: 9 letters and digits, kept when they are, the same for the same */
	kvp_http_call_id9("aB3dE5gH7", 9, id);
	assert_string_equal(id, "aB3dE5gH7");
	kvp_http_call_id9("call_7_0", 8, id);
	kvp_http_call_id9("call_7_1", 8, id2);
	assert_int_equal(strlen(id), 9);
	assert_int_equal(strspn(id,
				"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
			 9);
	assert_string_not_equal(id, id2);
	kvp_http_call_id9("call_7_1", 8, id);
	assert_string_equal(id, id2);
	kvp_http_call_id9("aB3dE5gH_", 9, id);
	assert_string_not_equal(id, "aB3dE5gH_");
}

static void test_forced_call_head(void **state)
{
	/*
	 * a forced call's head, read from every prefix of the text: not yet (0) until the
	 * arguments' first byte, then 1 with the tool and that byte's offset; the arguments'
	 * end once the object closes; other text, or an undeclared name, is no call (-1)
	 */
	static const char call[] = " {\"name\" : \"now\",\n \"arguments\": {\"a\": [1, \"}\"]} }";
	static const char *const not_calls[] = { "{\"x\"", "{\"name\": \"rm_rf\"", "[1",
						 "{\"name\": \"now\", \"parameters\"" };
	const char *const *names = (const char *const *)tool_names;
	size_t args_at = strstr(call, "{\"a\"") - call, args_end = strrchr(call, ' ') - call;
	size_t tool, at;

	for (size_t n = 0; n <= strlen(call); n++) {
		int r = kvp_http_calls_head(call, n, names, 2, &tool, &at);

		if (n <= args_at) {
			assert_int_equal(r, 0);
			continue;
		}
		assert_int_equal(r, 1);
		assert_int_equal(tool, 1);
		assert_int_equal(at, args_at);
		assert_int_equal(kvp_http_calls_args_end(call, n, at), n < args_end ? n : args_end);
	}
	for (size_t i = 0; i < sizeof(not_calls) / sizeof(not_calls[0]); i++)
		assert_int_equal(kvp_http_calls_head(not_calls[i], strlen(not_calls[i]), names, 2,
						     &tool, &at),
				 -1);
}

static void test_forced_call_streamed(void **state)
{
	/*
	 * a forced call streams as it is written, one byte a piece here: OpenAI's first
	 * tool_calls delta has the id, the name and "" arguments, the next ones pieces of the
	 * arguments, joined the text the whole answer gives; Anthropic's tool_use block
	 * the same in input_json_delta; cut short (max_tokens), what was written, finish
	 * "length" / "max_tokens"
	 */
	static const char text[] =
		"{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Ro\\\"me\", \"t\": 0.1}}";
	const char *args = strstr(text, "{\"city");
	size_t n_args = strlen(args) - 1, len = strlen(text);
	const char *pieces[sizeof(text)];
	char one[sizeof(text)][2];
	struct kvp_buf out = KVP_BUF_INIT, joined = KVP_BUF_INIT;
	struct event ev[160];
	size_t n, deltas;

	for (size_t i = 0; i < len; i++) {
		one[i][0] = text[i];
		one[i][1] = 0;
		pieces[i] = one[i];
	}
	for (int cut = 0; cut < 2; cut++) {
		size_t np = cut ? len - 6 : len; /* cut: inside the arguments */

		tool_answer_f(KVP_HTTP_API_CHAT, true, true, pieces, np,
			      cut ? KVP_HTTP_FINISH_LENGTH : KVP_HTTP_FINISH_EOS, &out);
		n = events(out.p, ev, 160);
		deltas = 0;
		for (size_t i = 1; i + 2 < n; i++) {
			const char *a = str(ev[i].data,
					    "choices.0.delta.tool_calls.0.function.arguments");

			assert_non_null(a);
			assert_int_equal(num(ev[i].data, "choices.0.delta.tool_calls.0.index"), 0);
			if (i == 1) {
				assert_string_equal(a, "");
				assert_string_equal(str(ev[i].data,
							"choices.0.delta.tool_calls.0.id"),
						    "call_7_0");
				assert_string_equal(
					str(ev[i].data,
					    "choices.0.delta.tool_calls.0.function.name"),
					"get_weather");
				continue;
			}
			assert_null(at(ev[i].data, "choices.0.delta.tool_calls.0.id"));
			kvp_buf_add(&joined, a, strlen(a));
			deltas++;
		}
		assert_string_equal(str(ev[n - 2].data, "choices.0.finish_reason"),
				    cut ? "length" : "tool_calls");
		assert_true(ev[n - 1].done);
		assert_true(deltas > 10); /* piece by piece, not at the end */
		assert_int_equal(joined.len, cut ? n_args - 5 : n_args);
		assert_memory_equal(joined.p, args, joined.len);
		free_events(ev, n);
		kvp_buf_deinit(&out);
		kvp_buf_deinit(&joined);

		tool_answer_f(KVP_HTTP_API_MESSAGES, true, true, pieces, np,
			      cut ? KVP_HTTP_FINISH_LENGTH : KVP_HTTP_FINISH_EOS, &out);
		n = events(out.p, ev, 160);
		assert_string_equal(ev[0].name, "message_start");
		assert_string_equal(ev[1].name, "ping");
		assert_string_equal(ev[2].name, "content_block_start");
		assert_string_equal(str(ev[2].data, "content_block.type"), "tool_use");
		assert_string_equal(str(ev[2].data, "content_block.name"), "get_weather");
		assert_int_equal(num(ev[2].data, "index"), 0);
		deltas = 0;
		for (size_t i = 3; i + 3 < n; i++) {
			const char *a = str(ev[i].data, "delta.partial_json");

			assert_string_equal(ev[i].name, "content_block_delta");
			assert_string_equal(str(ev[i].data, "delta.type"), "input_json_delta");
			assert_int_equal(num(ev[i].data, "index"), 0);
			kvp_buf_add(&joined, a, strlen(a));
			deltas++;
		}
		assert_string_equal(ev[n - 3].name, "content_block_stop");
		assert_string_equal(str(ev[n - 2].data, "delta.stop_reason"),
				    cut ? "max_tokens" : "tool_use");
		assert_true(deltas > 10);
		assert_int_equal(joined.len, cut ? n_args - 5 : n_args);
		assert_memory_equal(joined.p, args, joined.len);
		free_events(ev, n);
		kvp_buf_deinit(&out);
		kvp_buf_deinit(&joined);
	}
	/* not forced, the same call goes out whole at the end (it must parse first) */
	tool_answer_f(KVP_HTTP_API_CHAT, true, false, pieces, len, KVP_HTTP_FINISH_EOS, &out);
	n = events(out.p, ev, 160);
	assert_int_equal(n, 4); /* role, the call, finish, [DONE] */
	assert_string_equal(str(ev[1].data, "choices.0.delta.tool_calls.0.function.arguments"),
			    "{\"city\": \"Ro\\\"me\", \"t\": 0.1}");
	free_events(ev, n);
	kvp_buf_deinit(&out);
}

/* An answer of @n pieces with reasoning split off (and tools when @tools), into @out. */
static bool g_omit; /* think_answer(): Anthropic display omitted */

static void think_answer(enum kvp_http_api api, bool stream, bool tools, const char *const *pieces,
			 size_t n, enum kvp_http_finish fin, struct kvp_buf *out)
{
	struct kvp_http_emit e;

	kvp_http_emit_init(&e, api, stream, false, false, "chatcmpl-7", 1700000000, "model-x");
	if (tools)
		kvp_http_emit_tools(&e, tool_names, 2, false);
	kvp_http_emit_thinking(&e);
	e.think_omit = g_omit;
	for (size_t i = 0; i < n; i++)
		kvp_http_emit_text(&e, out, pieces[i], strlen(pieces[i]), NULL, 0);
	kvp_http_emit_finish(&e, out, fin, NULL, 0, &usage, 3);
	kvp_http_emit_deinit(&e);
}

static void test_thinking_answers(void **state)
{
	/* the tags split across pieces as tokens may split them */
	static const char *const think[] = { "<th", "ink>\nHm", "m.\n</", "think>\n\nHi", "!" };
	static const char *const open[] = { "<think>\nhalf", " a thought" };
	static const char *const plain[] = { "Hi <think>", "!" };
	static const char *const call[] = { "<think>\nweather</think>\n\n",
					    "<tool_call>\n{\"name\": \"get_weather\", "
					    "\"arguments\": {\"city\": \"Rome\"}}\n</tool_call>" };
	struct kvp_buf out = KVP_BUF_INIT;
	struct event ev[24];
	json_t *j;
	size_t n;

	think_answer(KVP_HTTP_API_CHAT, false, false, think, 5, KVP_HTTP_FINISH_EOS, &out);
	j = json_loads(out.p, 0, NULL);
	assert_non_null(j);
	assert_string_equal(str(j, "choices.0.message.content"), "Hi!");
	assert_string_equal(str(j, "choices.0.message.reasoning_content"), "Hmm.");
	assert_int_equal(num(j, "usage.completion_tokens"), 3); /* reasoning counted */
	json_decref(j);
	kvp_buf_deinit(&out);

	/* unterminated at max_tokens: all reasoning, finish "length" */
	think_answer(KVP_HTTP_API_CHAT, false, false, open, 2, KVP_HTTP_FINISH_LENGTH, &out);
	j = json_loads(out.p, 0, NULL);
	assert_non_null(j);
	assert_string_equal(str(j, "choices.0.message.content"), "");
	assert_string_equal(str(j, "choices.0.message.reasoning_content"), "half a thought");
	assert_string_equal(str(j, "choices.0.finish_reason"), "length");
	json_decref(j);
	kvp_buf_deinit(&out);

	/* no leading block: the text as it is, no reasoning_content */
	think_answer(KVP_HTTP_API_CHAT, false, false, plain, 2, KVP_HTTP_FINISH_EOS, &out);
	j = json_loads(out.p, 0, NULL);
	assert_non_null(j);
	assert_string_equal(str(j, "choices.0.message.content"), "Hi <think>!");
	assert_null(at(j, "choices.0.message.reasoning_content"));
	json_decref(j);
	kvp_buf_deinit(&out);

	think_answer(KVP_HTTP_API_CHAT, true, false, think, 5, KVP_HTTP_FINISH_EOS, &out);
	n = events(out.p, ev, 24);
	{
		struct kvp_buf r = KVP_BUF_INIT, c = KVP_BUF_INIT;

		for (size_t i = 0; i < n; i++) {
			const char *rs = str(ev[i].data, "choices.0.delta.reasoning_content");
			const char *cs = str(ev[i].data, "choices.0.delta.content");

			if (rs)
				kvp_buf_add(&r, rs, strlen(rs));
			if (cs)
				kvp_buf_add(&c, cs, strlen(cs));
			if (rs && c.len) /* reasoning before the answer */
				fail_msg("reasoning after content in event %zu", i);
		}
		assert_int_equal(r.len, 4);
		assert_memory_equal(r.p, "Hmm.", 4);
		assert_int_equal(c.len, 3);
		assert_memory_equal(c.p, "Hi!", 3);
		kvp_buf_deinit(&r);
		kvp_buf_deinit(&c);
	}
	free_events(ev, n);
	kvp_buf_deinit(&out);

	think_answer(KVP_HTTP_API_MESSAGES, false, false, think, 5, KVP_HTTP_FINISH_EOS, &out);
	j = json_loads(out.p, 0, NULL);
	assert_non_null(j);
	assert_string_equal(str(j, "content.0.type"), "thinking");
	assert_string_equal(str(j, "content.0.thinking"), "Hmm.");
	assert_string_equal(str(j, "content.0.signature"), "");
	assert_string_equal(str(j, "content.1.type"), "text");
	assert_string_equal(str(j, "content.1.text"), "Hi!");
	assert_null(at(j, "content.2"));
	json_decref(j);
	kvp_buf_deinit(&out);

	think_answer(KVP_HTTP_API_MESSAGES, true, false, think, 5, KVP_HTTP_FINISH_EOS, &out);
	n = events(out.p, ev, 24);
	{
		static const char *const names[] = { "message_start",	    "ping",
						     "content_block_start", "content_block_delta",
						     "content_block_delta", "content_block_delta",
						     "content_block_stop",  "content_block_start",
						     "content_block_delta", "content_block_delta",
						     "content_block_stop",  "message_delta",
						     "message_stop" };

		assert_int_equal(n, 13);
		for (size_t i = 0; i < n; i++)
			assert_string_equal(ev[i].name, names[i]);
	}
	assert_string_equal(str(ev[2].data, "content_block.type"), "thinking");
	assert_string_equal(str(ev[2].data, "content_block.signature"), "");
	assert_int_equal(num(ev[2].data, "index"), 0);
	assert_string_equal(str(ev[3].data, "delta.type"), "thinking_delta");
	assert_string_equal(str(ev[3].data, "delta.thinking"), "Hm");
	assert_string_equal(str(ev[4].data, "delta.thinking"), "m.");
	assert_string_equal(str(ev[5].data, "delta.type"), "signature_delta");
	assert_int_equal(num(ev[6].data, "index"), 0);
	assert_string_equal(str(ev[7].data, "content_block.type"), "text");
	assert_int_equal(num(ev[7].data, "index"), 1);
	assert_string_equal(str(ev[8].data, "delta.text"), "Hi");
	assert_int_equal(num(ev[8].data, "index"), 1);
	assert_string_equal(str(ev[9].data, "delta.text"), "!");
	assert_int_equal(num(ev[10].data, "index"), 1);
	free_events(ev, n);
	kvp_buf_deinit(&out);

	/* display omitted: the thinking block without its text, whole and streamed */
	g_omit = true;
	think_answer(KVP_HTTP_API_MESSAGES, false, false, think, 5, KVP_HTTP_FINISH_EOS, &out);
	j = json_loads(out.p, 0, NULL);
	assert_non_null(j);
	assert_string_equal(str(j, "content.0.type"), "thinking");
	assert_string_equal(str(j, "content.0.thinking"), "");
	assert_string_equal(str(j, "content.1.text"), "Hi!");
	json_decref(j);
	kvp_buf_deinit(&out);
	think_answer(KVP_HTTP_API_MESSAGES, true, false, think, 5, KVP_HTTP_FINISH_EOS, &out);
	n = events(out.p, ev, 24);
	assert_int_equal(n, 11); /* the two thinking_deltas fewer */
	assert_string_equal(str(ev[2].data, "content_block.type"), "thinking");
	assert_string_equal(str(ev[3].data, "delta.type"), "signature_delta");
	assert_string_equal(ev[4].name, "content_block_stop");
	assert_string_equal(str(ev[6].data, "delta.text"), "Hi");
	free_events(ev, n);
	kvp_buf_deinit(&out);
	g_omit = false;

	/* unterminated, streamed: the thinking block, then an empty text block */
	think_answer(KVP_HTTP_API_MESSAGES, true, false, open, 2, KVP_HTTP_FINISH_LENGTH, &out);
	n = events(out.p, ev, 24);
	assert_string_equal(str(ev[2].data, "content_block.type"), "thinking");
	assert_string_equal(str(ev[n - 2].data, "delta.stop_reason"), "max_tokens");
	assert_string_equal(str(ev[n - 4].data, "content_block.type"), "text");
	assert_int_equal(num(ev[n - 4].data, "index"), 1);
	free_events(ev, n);
	kvp_buf_deinit(&out);

	/* reasoning, then a call: the call parsed from the answer alone */
	think_answer(KVP_HTTP_API_MESSAGES, false, true, call, 2, KVP_HTTP_FINISH_EOS, &out);
	j = json_loads(out.p, 0, NULL);
	assert_non_null(j);
	assert_string_equal(str(j, "stop_reason"), "tool_use");
	assert_string_equal(str(j, "content.0.type"), "thinking");
	assert_string_equal(str(j, "content.0.thinking"), "weather");
	assert_string_equal(str(j, "content.1.type"), "tool_use");
	json_decref(j);
	kvp_buf_deinit(&out);

	think_answer(KVP_HTTP_API_MESSAGES, true, true, call, 2, KVP_HTTP_FINISH_EOS, &out);
	n = events(out.p, ev, 24);
	{
		static const char *const names[] = { "message_start",	    "ping",
						     "content_block_start", "content_block_delta",
						     "content_block_delta", "content_block_stop",
						     "content_block_start", "content_block_delta",
						     "content_block_stop",  "message_delta",
						     "message_stop" };

		assert_int_equal(n, 11);
		for (size_t i = 0; i < n; i++)
			assert_string_equal(ev[i].name, names[i]);
	}
	assert_string_equal(str(ev[6].data, "content_block.type"), "tool_use");
	assert_int_equal(num(ev[6].data, "index"), 1);
	assert_string_equal(str(ev[9].data, "delta.stop_reason"), "tool_use");
	free_events(ev, n);
	kvp_buf_deinit(&out);

	think_answer(KVP_HTTP_API_CHAT, false, true, call, 2, KVP_HTTP_FINISH_EOS, &out);
	j = json_loads(out.p, 0, NULL);
	assert_non_null(j);
	assert_string_equal(str(j, "choices.0.finish_reason"), "tool_calls");
	assert_string_equal(str(j, "choices.0.message.reasoning_content"), "weather");
	assert_string_equal(str(j, "choices.0.message.content"), "(null)");
	json_decref(j);
	kvp_buf_deinit(&out);
}

static void test_ids_answers(void **state)
{
	json_t *j = ids_answer(KVP_HTTP_API_TOKENIZE);

	/* vLLM's /tokenize and /detokenize, Anthropic's count_tokens */
	assert_int_equal(num(j, "count"), 3);
	assert_int_equal(num(j, "max_model_len"), 4096);
	assert_int_equal(num(j, "tokens.0"), 1);
	assert_int_equal(num(j, "tokens.2"), 105);
	assert_string_equal(str(j, "token_strs"), "(null)");
	json_decref(j);
	j = ids_answer(KVP_HTTP_API_DETOKENIZE);
	assert_string_equal(str(j, "prompt"), "Hi\xef\xbf\xbd"); /* not UTF-8: U+FFFD */
	json_decref(j);
	j = ids_answer(KVP_HTTP_API_COUNT_TOKENS);
	assert_int_equal(num(j, "input_tokens"), 3);
	assert_int_equal(json_object_size(j), 1);
	json_decref(j);
}

/* ------------------------------------------------------------ logprobs, n > 1 */

/* Four pieces: "A", " b", one byte of a character, a control token's text. */
static const char vocab_bytes[] = "A b\xe2<|eot|>";
static uint32_t vocab_off[] = { 0, 1, 3, 4, 11 };
static const struct kvp_http_vocab vocab = {
	.model = "m", .n = 4, .off = vocab_off, .bytes = (char *)vocab_bytes
};

/* Token t of three (ids 0, 2, 1), each with two alternatives as kvpoold lists them. */
static const struct kvp_logprob lp3[] = {
	{ 0, -0.5f },  { 0, -0.5f }, { 1, -1.25f },	      /* "A": the likeliest */
	{ 2, -2.0f },  { 3, -0.1f }, { 2, -2.0f },	      /* a part of a character */
	{ 1, -0.75f }, { 3, -0.2f }, { 0, -(float)INFINITY }, /* " b": not among its top */
};

static double real(json_t *o, const char *path)
{
	o = at(o, path);
	if (!json_is_number(o))
		fail_msg("%s: not a number", path);
	return json_number_value(o);
}

/* The three tokens, one TOKEN each (the partial one with no text), whole or streamed. */
static void feed3(struct kvp_http_emit *e, struct kvp_buf *out)
{
	static const int32_t ids[] = { 0, 2, 1 };
	static const char *const text[] = { "A", "", "\xef\xbf\xbd b" };

	for (size_t t = 0; t < 3; t++) {
		kvp_http_emit_logprobs(e, &vocab, &lp3[t * 3], 1, 2);
		kvp_http_emit_text(e, out, text[t], strlen(text[t]), &ids[t], 1);
	}
	kvp_http_emit_finish(e, out, KVP_HTTP_FINISH_LENGTH, NULL, 0, &usage, 3);
}

static void test_logprobs_chat(void **state)
{
	struct kvp_http_emit e;
	struct kvp_buf out = KVP_BUF_INIT;
	struct event ev[16];
	json_t *j;
	size_t n;

	kvp_http_emit_init(&e, KVP_HTTP_API_CHAT, false, false, false, "id-1", 1, "model-x");
	e.logprobs = true;
	feed3(&e, &out);
	j = json_loads(out.p, 0, NULL);
	assert_non_null(j);
	assert_int_equal(json_array_size(at(j, "choices.0.logprobs.content")), 3);
	assert_string_equal(str(j, "choices.0.logprobs.content.0.token"), "A");
	assert_true(real(j, "choices.0.logprobs.content.0.logprob") == -0.5);
	assert_int_equal(num(j, "choices.0.logprobs.content.0.bytes.0"), 'A');
	assert_string_equal(str(j, "choices.0.logprobs.content.0.top_logprobs.1.token"), " b");
	assert_true(real(j, "choices.0.logprobs.content.0.top_logprobs.1.logprob") == -1.25);
	/* a part of a character: U+FFFD as its token, its byte as it is */
	assert_string_equal(str(j, "choices.0.logprobs.content.1.token"), "\xef\xbf\xbd");
	assert_int_equal(json_array_size(at(j, "choices.0.logprobs.content.1.bytes")), 1);
	assert_int_equal(num(j, "choices.0.logprobs.content.1.bytes.0"), 0xe2);
	assert_string_equal(str(j, "choices.0.logprobs.content.1.top_logprobs.0.token"), "<|eot|>");
	/* an id the grammar removed: OpenAI's floor, not a number JSON cannot carry */
	assert_true(real(j, "choices.0.logprobs.content.2.top_logprobs.1.logprob") == -9999.0);
	assert_string_equal(str(j, "choices.0.logprobs.refusal"), "(null)");
	json_decref(j);
	kvp_buf_deinit(&out);
	kvp_http_emit_deinit(&e);

	/* streamed: each token's entry in its chunk, the empty-text one too */
	out = (struct kvp_buf)KVP_BUF_INIT;
	kvp_http_emit_init(&e, KVP_HTTP_API_CHAT, true, false, false, "id-1", 1, "model-x");
	e.logprobs = true;
	feed3(&e, &out);
	n = events(out.p, ev, 16);
	assert_int_equal(n, 6); /* role, three tokens, finish, [DONE] */
	assert_string_equal(str(ev[0].data, "choices.0.logprobs"), "(null)");
	for (size_t t = 0; t < 3; t++)
		assert_int_equal(json_array_size(at(ev[1 + t].data, "choices.0.logprobs.content")),
				 1);
	assert_string_equal(str(ev[2].data, "choices.0.delta.content"), "");
	assert_int_equal(num(ev[2].data, "choices.0.logprobs.content.0.bytes.0"), 0xe2);
	assert_int_equal(json_array_size(at(ev[4].data, "choices.0.logprobs.content")), 0);
	assert_true(ev[5].done);
	free_events(ev, n);
	kvp_buf_deinit(&out);
	kvp_http_emit_deinit(&e);
}

static void test_logprobs_completions(void **state)
{
	struct kvp_http_emit e;
	struct kvp_buf out = KVP_BUF_INIT;
	struct event ev[16];
	json_t *j, *top;
	size_t n;

	kvp_http_emit_init(&e, KVP_HTTP_API_COMPLETIONS, false, false, false, "id-1", 1, "m");
	e.logprobs = true;
	feed3(&e, &out);
	j = json_loads(out.p, 0, NULL);
	assert_non_null(j);
	assert_string_equal(str(j, "choices.0.logprobs.tokens.0"), "A");
	assert_string_equal(str(j, "choices.0.logprobs.tokens.2"), " b");
	assert_true(real(j, "choices.0.logprobs.token_logprobs.1") == -2.0);
	/* text_offset: bytes before each token */
	assert_int_equal(num(j, "choices.0.logprobs.text_offset.0"), 0);
	assert_int_equal(num(j, "choices.0.logprobs.text_offset.1"), 1);
	assert_int_equal(num(j, "choices.0.logprobs.text_offset.2"), 2);
	/* the alternatives by text; the sampled token added when it is not among them */
	top = at(j, "choices.0.logprobs.top_logprobs.0");
	assert_int_equal(json_object_size(top), 2);
	assert_true(json_real_value(json_object_get(top, "A")) == -0.5);
	top = at(j, "choices.0.logprobs.top_logprobs.2");
	assert_int_equal(json_object_size(top), 3);
	assert_true(json_real_value(json_object_get(top, " b")) == -0.75);
	/* nine digits: read back as a float it is the same float */
	assert_true((float)json_real_value(json_object_get(top, "<|eot|>")) == -0.2f);
	json_decref(j);
	kvp_buf_deinit(&out);
	kvp_http_emit_deinit(&e);

	out = (struct kvp_buf)KVP_BUF_INIT;
	kvp_http_emit_init(&e, KVP_HTTP_API_COMPLETIONS, true, false, false, "id-1", 1, "m");
	e.logprobs = true;
	feed3(&e, &out);
	n = events(out.p, ev, 16);
	assert_int_equal(n, 5); /* three tokens, finish, [DONE] */
	assert_int_equal(num(ev[2].data, "choices.0.logprobs.text_offset.0"), 2);
	assert_string_equal(str(ev[2].data, "choices.0.logprobs.tokens.0"), " b");
	free_events(ev, n);
	kvp_buf_deinit(&out);
	kvp_http_emit_deinit(&e);
}

/* n = 2: choices 0 and 1, usage once over both (the prompt once), one [DONE]. */
static void test_choices(void **state)
{
	static const enum kvp_http_finish fin[] = { KVP_HTTP_FINISH_LENGTH, KVP_HTTP_FINISH_EOS };
	for (int stream = 0; stream < 2; stream++) {
		struct kvp_http_emit e[2], *ep[2] = { &e[0], &e[1] };
		struct kvp_buf out = KVP_BUF_INIT;
		struct event ev[16];
		json_t *j;
		size_t n;

		for (uint32_t i = 0; i < 2; i++) {
			kvp_http_emit_init(&e[i], KVP_HTTP_API_CHAT, stream, true, false, "id-1", 1,
					   "m");
			e[i].index = i;
		}
		kvp_http_emit_text(&e[1], &out, "one", 3, NULL, 0);
		kvp_http_emit_text(&e[0], &out, "zero", 4, NULL, 0);
		kvp_http_emit_finish_n(ep, 2, &out, fin, &usage, 7);
		if (!stream) {
			j = json_loads(out.p, 0, NULL);
			assert_non_null(j);
			assert_int_equal(json_array_size(json_object_get(j, "choices")), 2);
			assert_int_equal(num(j, "choices.1.index"), 1);
			assert_string_equal(str(j, "choices.0.message.content"), "zero");
			assert_string_equal(str(j, "choices.1.message.content"), "one");
			assert_string_equal(str(j, "choices.0.finish_reason"), "length");
			assert_string_equal(str(j, "choices.1.finish_reason"), "stop");
			assert_int_equal(num(j, "usage.prompt_tokens"), 100);
			assert_int_equal(num(j, "usage.completion_tokens"), 7);
			json_decref(j);
		} else {
			/* role and text of 1, of 0, a finish chunk each, usage, [DONE] */
			n = events(out.p, ev, 16);
			assert_int_equal(n, 8);
			assert_int_equal(num(ev[0].data, "choices.0.index"), 1);
			assert_string_equal(str(ev[1].data, "choices.0.delta.content"), "one");
			assert_int_equal(num(ev[2].data, "choices.0.index"), 0);
			assert_string_equal(str(ev[4].data, "choices.0.finish_reason"), "length");
			assert_int_equal(num(ev[5].data, "choices.0.index"), 1);
			assert_string_equal(str(ev[5].data, "choices.0.finish_reason"), "stop");
			assert_int_equal(json_array_size(json_object_get(ev[6].data, "choices")),
					 0);
			assert_int_equal(num(ev[6].data, "usage.completion_tokens"), 7);
			assert_true(ev[7].done);
			free_events(ev, n);
		}
		kvp_buf_deinit(&out);
		kvp_http_emit_deinit(&e[0]);
		kvp_http_emit_deinit(&e[1]);
	}
}

/* DETOKENIZE of [sep, a, sep, b, sep] split back into a's and b's pieces. */
static void test_vocab_split(void **state)
{
	uint32_t off[4];

	assert_int_equal(kvp_http_vocab_split("\xff"
					      "ab\xff\xff"
					      "c\xff",
					      7, '\xff', 3, off),
			 0);
	assert_int_equal(off[0], 1);
	assert_int_equal(off[1], 4); /* "ab", then an empty piece */
	assert_int_equal(off[2], 5);
	assert_int_equal(off[3], 7);
	/* a piece holding the separator: more pieces than ids; fewer; no leading one */
	assert_int_equal(kvp_http_vocab_split("\xff"
					      "a\xff"
					      "b\xff",
					      5, '\xff', 1, off),
			 -EINVAL);
	assert_int_equal(kvp_http_vocab_split("\xff"
					      "a\xff",
					      3, '\xff', 2, off),
			 -EINVAL);
	assert_int_equal(kvp_http_vocab_split("a\xff", 2, '\xff', 1, off), -EINVAL);
	assert_int_equal(kvp_http_vocab_split("", 0, '\xff', 0, off), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_completion_whole),
		cmocka_unit_test(test_spec_usage),
		cmocka_unit_test(test_chat_whole),
		cmocka_unit_test(test_messages_whole),
		cmocka_unit_test(test_completion_stream),
		cmocka_unit_test(test_chat_stream),
		cmocka_unit_test(test_messages_stream),
		cmocka_unit_test(test_stream_errors),
		cmocka_unit_test(test_anthropic_split),
		cmocka_unit_test(test_thinking_answers),
		cmocka_unit_test(test_ids_answers),
		cmocka_unit_test(test_tool_call_parse),
		cmocka_unit_test(test_tool_answers),
		cmocka_unit_test(test_mistral_calls),
		cmocka_unit_test(test_forced_call_head),
		cmocka_unit_test(test_forced_call_streamed),
		cmocka_unit_test(test_logprobs_chat),
		cmocka_unit_test(test_logprobs_completions),
		cmocka_unit_test(test_choices),
		cmocka_unit_test(test_vocab_split),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
