/* SPDX-License-Identifier: MIT */
/*
 * test_http_api.c - ipc/http/api.c: request bodies of the OpenAI, Anthropic and
 * tokenize endpoints parsed and checked field by field, and the error bodies in each
 * API's shape (parsed back with jansson); ipc/http/cache.c's cache_control mapping.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "ipc/http/api.h"
#include "kvpool/proto.h"
#include "ipc/http/cache.h"

#define VOCAB 259

struct parsed {
	struct kvp_http_gen g;
	struct kvp_http_err e;
	int r;
};

static struct parsed *parse(enum kvp_http_api api, const char *body)
{
	struct parsed *p = calloc(1, sizeof(*p));

	assert_non_null(p);
	p->r = kvp_http_parse(&p->g, api, body, strlen(body), VOCAB, &p->e);
	return p;
}

static void done(struct parsed *p)
{
	kvp_http_gen_deinit(&p->g);
	free(p);
}

/* @body is refused with a 400 naming @param (NULL: none) and saying @words. */
static void refused(enum kvp_http_api api, const char *body, const char *param, const char *words)
{
	struct parsed *p = parse(api, body);

	if (p->r != -EINVAL)
		fail_msg("accepted: %s", body);
	assert_int_equal(p->e.status, 400);
	if (param && (!p->e.param || strcmp(p->e.param, param)))
		fail_msg("%s: param %s, want %s", body, p->e.param ? p->e.param : "(null)", param);
	if (words && !strstr(p->e.message, words))
		fail_msg("%s: message '%s' lacks '%s'", body, p->e.message, words);
	done(p);
}

#define C KVP_HTTP_API_COMPLETIONS
#define CHAT KVP_HTTP_API_CHAT
#define MSG KVP_HTTP_API_MESSAGES

static void test_completion_defaults(void **state)
{
	struct parsed *p = parse(C, "{\"model\":\"m\",\"prompt\":\"hi\"}");

	/* OpenAI's defaults: temperature 1, top_p 1, no top_k, no max_tokens given */
	assert_int_equal(p->r, 0);
	assert_string_equal(p->g.model, "m");
	assert_string_equal(p->g.text, "hi");
	assert_int_equal(p->g.text_len, 2);
	assert_null(p->g.tokens);
	assert_float_equal(p->g.temperature, 1.0, 0);
	assert_float_equal(p->g.top_p, 1.0, 0);
	assert_int_equal(p->g.top_k, 0);
	assert_int_equal(p->g.max_tokens, 0);
	assert_false(p->g.stream);
	assert_false(p->g.has_seed);
	done(p);
}

static void test_completion_fields(void **state)
{
	struct parsed
		*p = parse(C, "{\"prompt\":\"x\",\"max_tokens\":16.0,\"temperature\":0,"
			      "\"top_p\":0.5,\"top_k\":40,\"seed\":-3,\"stream\":true,"
			      "\"stream_options\":{\"include_usage\":true},\"stop\":[\"a\",\"bc\"],"
			      "\"cache_salt\":\"s1\",\"return_token_ids\":true,\"n\":1,"
			      "\"logprobs\":null,\"echo\":false,\"presence_penalty\":0,"
			      "\"user\":\"ignored\",\"unknown_field\":[1,2]}");

	/* every field kvpool honours is read; neutral values of the others pass */
	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.max_tokens, 16);
	assert_float_equal(p->g.temperature, 0, 0);
	assert_float_equal(p->g.top_p, 0.5, 1e-6);
	assert_int_equal(p->g.top_k, 40);
	assert_true(p->g.has_seed);
	assert_true(p->g.seed == (uint64_t)-3);
	assert_true(p->g.stream);
	assert_true(p->g.include_usage);
	assert_true(p->g.return_token_ids);
	assert_int_equal(p->g.n_stop, 2);
	assert_string_equal(p->g.stop[1], "bc");
	assert_int_equal(p->g.stop_len[1], 2);
	assert_memory_equal(p->g.cache_salt, "s1", 2);
	done(p);
	p = parse(C, "{\"prompt\":\"x\",\"top_k\":-1,\"stop\":\"only\"}");
	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.top_k, 0); /* -1: off, as vLLM */
	assert_int_equal(p->g.n_stop, 1);
	done(p);
}

static void test_prompt_forms(void **state)
{
	struct parsed *p;

	/* a string, [string], [ids] and [[ids]] are one prompt each */
	p = parse(C, "{\"prompt\":[\"one\"]}");
	assert_int_equal(p->r, 0);
	assert_string_equal(p->g.text, "one");
	done(p);
	p = parse(C, "{\"prompt\":[1,2,258]}");
	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.n_tokens, 3);
	assert_int_equal(p->g.tokens[2], 258);
	assert_null(p->g.text);
	done(p);
	p = parse(C, "{\"prompt\":[[5,6]]}");
	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.n_tokens, 2);
	done(p);
	/* what is not one prompt, or not a valid one */
	refused(C, "{}", "prompt", "required");
	refused(C, "{\"prompt\":\"\"}", "prompt", "empty");
	refused(C, "{\"prompt\":[]}", "prompt", NULL);
	refused(C, "{\"prompt\":5}", "prompt", NULL);
	refused(C, "{\"prompt\":[\"a\",\"b\"]}", "prompt", "one prompt");
	refused(C, "{\"prompt\":[1,259]}", "prompt", "out of range");
	refused(C, "{\"prompt\":[1,-1]}", "prompt", "out of range");
	refused(C, "{\"prompt\":[1,\"x\"]}", "prompt", "integers");
	refused(C, "{\"prompt\":[[1],[2]]}", "prompt", "one prompt");
}

static void test_types_and_ranges(void **state)
{
	/* a wrong type or a value out of range names the field */
	refused(C, "{\"prompt\":\"x\",\"max_tokens\":\"16\"}", "max_tokens", "integer");
	refused(C, "{\"prompt\":\"x\",\"max_tokens\":1.5}", "max_tokens", "integer");
	refused(C, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens", "out of range");
	refused(C, "{\"prompt\":\"x\",\"temperature\":-0.1}", "temperature", "out of range");
	refused(C, "{\"prompt\":\"x\",\"temperature\":101}", "temperature", NULL);
	refused(C, "{\"prompt\":\"x\",\"temperature\":\"hot\"}", "temperature", "number");
	refused(C, "{\"prompt\":\"x\",\"top_p\":0}", "top_p", "out of range");
	refused(C, "{\"prompt\":\"x\",\"top_p\":1.01}", "top_p", NULL);
	refused(C, "{\"prompt\":\"x\",\"top_k\":-2}", "top_k", NULL);
	refused(C, "{\"prompt\":\"x\",\"stream\":\"yes\"}", "stream", "true or false");
	refused(C, "{\"prompt\":\"x\",\"stream_options\":true}", "stream_options", NULL);
	refused(C, "{\"prompt\":\"x\",\"stop\":5}", "stop", NULL);
	refused(C, "{\"prompt\":\"x\",\"stop\":[\"\"]}", "stop", "1 to 256");
	refused(C,
		"{\"prompt\":\"x\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\","
		"\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
		"stop", "at most 16");
	refused(C, "{\"prompt\":\"x\",\"cache_salt\":\"\"}", "cache_salt", NULL);
	refused(C,
		"{\"prompt\":\"x\",\"cache_salt\":\"0123456789012345678901234567890123456789012345"
		"6789012345678901234\"}",
		"cache_salt", "1 to 64");
	refused(C, "{\"prompt\":\"x\",\"model\":7}", "model", "string");
}

static void test_unsupported_is_refused(void **state)
{
	static const char *const cases[][2] = {
		{ "{\"prompt\":\"x\",\"n\":17}", "n" },
		{ "{\"prompt\":\"x\",\"best_of\":3}", "best_of" },
		{ "{\"prompt\":\"x\",\"echo\":true}", "echo" },
		{ "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\","
		  "\"json_schema\":{\"schema\":{\"type\":\"string\",\"pattern\":\"a\"}}}}",
		  "response_format" },
		{ "{\"prompt\":\"x\",\"suffix\":\"tail\"}", "suffix" },
	};

	/* what kvpool cannot do is a 400 that says so, never silently ignored */
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct parsed *p = parse(C, cases[i][0]);

		assert_int_equal(p->r, -EINVAL);
		assert_string_equal(p->e.param, cases[i][1]);
		assert_string_equal(p->e.code, "unsupported_parameter");
		done(p);
	}
	/* the limit is kvpoold's parallel sampling's, and the 400 says so */
	refused(C, "{\"prompt\":\"x\",\"n\":17}", "n", "above 16, the most choices kvpoold");
}

/* logprobs / top_logprobs in each API's form, and n, with OpenAI's limits */
static void test_logprobs_and_n(void **state)
{
	static const char *const chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],";
	char body[256];
	struct parsed *p;

	snprintf(body, sizeof(body), "%s\"logprobs\":true,\"top_logprobs\":20,\"n\":16}", chat);
	p = parse(CHAT, body);
	assert_int_equal(p->r, 0);
	assert_true(p->g.logprobs);
	assert_int_equal(p->g.top_logprobs, 20);
	assert_int_equal(p->g.n, 16);
	done(p);
	snprintf(body, sizeof(body), "%s\"logprobs\":true}", chat);
	p = parse(CHAT, body);
	assert_true(p->g.logprobs);
	assert_int_equal(p->g.top_logprobs, 0);
	assert_int_equal(p->g.n, 1);
	done(p);
	snprintf(body, sizeof(body), "%s\"logprobs\":false,\"top_logprobs\":null}", chat);
	p = parse(CHAT, body);
	assert_int_equal(p->r, 0);
	assert_false(p->g.logprobs);
	done(p);
	snprintf(body, sizeof(body), "%s\"logprobs\":true,\"top_logprobs\":21}", chat);
	refused(CHAT, body, "top_logprobs", "out of range [0, 20]");
	snprintf(body, sizeof(body), "%s\"top_logprobs\":3}", chat);
	refused(CHAT, body, "top_logprobs", "requires logprobs to be true");
	snprintf(body, sizeof(body), "%s\"logprobs\":3}", chat);
	refused(CHAT, body, "logprobs", "true or false");
	snprintf(body, sizeof(body), "%s\"n\":0}", chat);
	refused(CHAT, body, "n", "out of range [1, 128]");
	snprintf(body, sizeof(body), "%s\"n\":129}", chat);
	refused(CHAT, body, "n", "out of range [1, 128]");

	/* completions: logprobs is the number of alternatives */
	p = parse(C, "{\"prompt\":\"x\",\"logprobs\":5,\"n\":3}");
	assert_int_equal(p->r, 0);
	assert_true(p->g.logprobs);
	assert_int_equal(p->g.top_logprobs, 5);
	assert_int_equal(p->g.n, 3);
	done(p);
	p = parse(C, "{\"prompt\":\"x\",\"logprobs\":0}");
	assert_true(p->g.logprobs);
	assert_int_equal(p->g.top_logprobs, 0);
	done(p);
	p = parse(C, "{\"prompt\":\"x\",\"logprobs\":null}");
	assert_false(p->g.logprobs);
	done(p);
	refused(C, "{\"prompt\":\"x\",\"logprobs\":21}", "logprobs", "out of range [0, 20]");
	refused(C, "{\"prompt\":\"x\",\"logprobs\":true}", "logprobs", "an integer");
	refused(C, "{\"prompt\":\"x\",\"top_logprobs\":2}", "top_logprobs", "logprobs");

	/* Anthropic has no n: a client sending one expects several answers */
	refused(KVP_HTTP_API_MESSAGES,
		"{\"model\":\"m\",\"max_tokens\":4,\"n\":2,"
		"\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
		"n", "no n");
}

static void test_bad_bodies(void **state)
{
	/* not JSON, or not an object: a 400 that says which */
	refused(C, "{\"prompt\": bad", NULL, "not valid JSON");
	refused(C, "", NULL, "not valid JSON");
	refused(C, "[1,2]", NULL, "JSON object");
	refused(C, "{\"prompt\":\"a\\u0000b\"}", NULL, "not valid JSON"); /* NUL in text */
	refused(C, "{\"prompt\":\"x\"} trailing", NULL, "not valid JSON");
}

static void test_chat_messages(void **state)
{
	struct parsed *p = parse(
		CHAT,
		"{\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
		"{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
		"{\"type\":\"text\",\"text\":\"b\"}]},{\"role\":\"assistant\",\"content\":\"ok\"}],"
		"\"max_tokens\":9,\"max_completion_tokens\":7,\"response_format\":{\"type\":\"text\"}}");

	/* roles mapped (developer is system), text parts joined by newlines,
	 * max_completion_tokens preferred */
	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.n_msgs, 3);
	assert_int_equal(p->g.msgs[0].role, KVP_HTTP_ROLE_SYSTEM);
	assert_string_equal(p->g.msgs[0].text, "be brief");
	assert_int_equal(p->g.msgs[1].role, KVP_HTTP_ROLE_USER);
	assert_string_equal(p->g.msgs[1].text, "a\nb");
	assert_int_equal(p->g.msgs[1].len, 3);
	assert_int_equal(p->g.msgs[2].role, KVP_HTTP_ROLE_ASSISTANT);
	assert_int_equal(p->g.max_tokens, 7);
	done(p);
	refused(CHAT, "{\"messages\":[]}", "messages", "non-empty");
	refused(CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "messages", "content: required");
	refused(CHAT, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "messages",
		"role");
	refused(CHAT,
		"{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
		"\"image_url\":{\"url\":\"x\"}}]}]}",
		"messages", "image_url");
	refused(CHAT,
		"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
		"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":"
		"{\"$ref\":\"#/x\"}}}}",
		"response_format", "\"$ref\"");
	refused(CHAT,
		"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
		"\"response_format\":{\"type\":\"xml\"}}",
		"response_format", NULL);
}

/* response_format, logit_bias and the penalties become the request's sampling section */
static void test_sampling_fields(void **state)
{
	struct parsed *p = parse(
		CHAT,
		"{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
		"\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\","
		"\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{\"a\":"
		"{\"type\":\"integer\"}},\"required\":[\"a\"],\"additionalProperties\":false}}},"
		"\"logit_bias\":{\"5\":-100,\"7\":2.5},\"presence_penalty\":0.5,"
		"\"frequency_penalty\":-1}");

	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.grammar, KVP_GRAMMAR_JSON_SCHEMA);
	assert_non_null(strstr(p->g.schema, "\"required\":[\"a\"]"));
	assert_int_equal(p->g.n_bias, 2);
	assert_true(p->g.presence == 0.5f && p->g.frequency == -1.0f);
	done(p);
	p = parse(C, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_object\"}}");
	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.grammar, KVP_GRAMMAR_JSON_OBJECT);
	done(p);
	refused(C, "{\"prompt\":\"x\",\"logit_bias\":{\"abc\":1}}", "logit_bias", "token id");
	refused(C, "{\"prompt\":\"x\",\"logit_bias\":{\"1\":101}}", "logit_bias", NULL);
	refused(C, "{\"prompt\":\"x\",\"logit_bias\":[1]}", "logit_bias", NULL);
	refused(C, "{\"prompt\":\"x\",\"presence_penalty\":2.5}", "presence_penalty", NULL);
	refused(C, "{\"prompt\":\"x\",\"frequency_penalty\":\"a\"}", "frequency_penalty", NULL);
	/* Anthropic's temperature is [0, 1] */
	refused(MSG,
		"{\"model\":\"m\",\"max_tokens\":5,\"temperature\":1.5,"
		"\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
		"temperature", NULL);
}

static void test_messages_and_cache_control(void **state)
{
	struct parsed *p = parse(
		MSG,
		"{\"model\":\"m\",\"max_tokens\":5,\"stop_sequences\":[\"END\"],"
		"\"system\":[{\"type\":\"text\",\"text\":\"sys\",\"cache_control\":"
		"{\"type\":\"ephemeral\",\"ttl\":\"1h\"}}],"
		"\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"ctx\","
		"\"cache_control\":{\"type\":\"ephemeral\"}},{\"type\":\"text\",\"text\":\"q\"}]},"
		"{\"role\":\"assistant\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}],"
		"\"thinking\":{\"type\":\"disabled\"},\"metadata\":{\"user_id\":\"u\"}}");

	/* system first; breakpoints counted and kept on the message that ends with them;
	 * a cache_control without ttl is 5m */
	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.n_msgs, 4);
	assert_int_equal(p->g.msgs[0].role, KVP_HTTP_ROLE_SYSTEM);
	assert_int_equal(p->g.msgs[0].cache, KVP_HTTP_TTL_1H);
	assert_string_equal(p->g.msgs[1].text, "ctx\nq");
	assert_int_equal(p->g.msgs[1].cache, KVP_HTTP_TTL_5M);
	assert_int_equal(p->g.msgs[2].cache, KVP_HTTP_TTL_NONE);
	assert_int_equal(p->g.n_breakpoints, 2);
	assert_int_equal(p->g.max_tokens, 5);
	assert_string_equal(p->g.stop[0], "END");
	done(p);
	/* a top-level cache_control marks the end of the prompt */
	p = parse(MSG, "{\"model\":\"m\",\"max_tokens\":5,\"system\":\"s\","
		       "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
		       "\"cache_control\":{\"type\":\"ephemeral\",\"ttl\":\"5m\"}}");
	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.msgs[0].cache, KVP_HTTP_TTL_NONE);
	assert_int_equal(p->g.msgs[1].cache, KVP_HTTP_TTL_5M);
	assert_int_equal(p->g.n_breakpoints, 1);
	done(p);
}

#define MSG_HEAD "{\"model\":\"m\",\"max_tokens\":5,"
#define BLOCK(cc) "{\"type\":\"text\",\"text\":\"t\",\"cache_control\":" cc "}"
#define EPH "{\"type\":\"ephemeral\"}"

static void test_messages_refusals(void **state)
{
	/* Anthropic's rules: cache_control ephemeral, ttl 5m|1h, at most 4, 1h before 5m */
	refused(MSG,
		MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":[" BLOCK(
			"{\"type\":\"ephemeral\",\"ttl\":\"2h\"}") "]}]}",
		"cache_control", "\"5m\" or \"1h\"");
	refused(MSG,
		MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":[" BLOCK(
			"{\"type\":\"persistent\"}") "]}]}",
		"cache_control", "ephemeral");
	refused(MSG, MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":[" BLOCK("5") "]}]}",
		"cache_control", "object");
	refused(MSG,
		MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":[" BLOCK(EPH) "," BLOCK(
			EPH) "," BLOCK(EPH) "," BLOCK(EPH) "," BLOCK(EPH) "]}]}",
		"cache_control", "maximum of 4");
	refused(MSG,
		MSG_HEAD
		"\"system\":[" BLOCK(EPH) "],\"messages\":[{\"role\":\"user\",\"content\":[" BLOCK(
			"{\"type\":\"ephemeral\",\"ttl\":\"1h\"}") "]}]}",
		"cache_control", "must not come after");
	/* the rest of the shape */
	refused(MSG, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
		"max_tokens", "required");
	refused(MSG, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
		"model", "required");
	refused(MSG, MSG_HEAD "\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", "messages",
		"user or assistant");
	refused(MSG,
		MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
			 "\"source\":{}}]}]}",
		"messages", "\"image\" is not supported");
	refused(MSG,
		MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
			 "\"thinking\":{\"type\":\"enabled\"}}",
		"thinking", "budget_tokens: required");
	refused(MSG,
		MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
			 "\"thinking\":{\"type\":\"sometimes\"}}",
		"thinking", "\"enabled\", \"adaptive\", \"between_tools\" or \"disabled\"");
	refused(MSG,
		MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
			 "\"thinking\":{\"type\":\"adaptive\",\"display\":\"full\"}}",
		"thinking", "thinking.display");
	refused(MSG, MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"system\":5}",
		"system", NULL);
}

#define CHAT_HEAD "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"

/* The reasoning switches of both APIs, and reasoning given back in the history. */
static void test_thinking(void **state)
{
	static const struct {
		enum kvp_http_api api;
		const char *body;
		enum kvp_http_thinking want;
	} cases[] = {
		{ CHAT, CHAT_HEAD "}", KVP_HTTP_THINK_DEFAULT },
		{ CHAT, CHAT_HEAD ",\"reasoning_effort\":null}", KVP_HTTP_THINK_DEFAULT },
		{ CHAT, CHAT_HEAD ",\"reasoning_effort\":\"none\"}", KVP_HTTP_THINK_OFF },
		{ CHAT, CHAT_HEAD ",\"reasoning_effort\":\"high\"}", KVP_HTTP_THINK_ON },
		{ CHAT, CHAT_HEAD ",\"reasoning_effort\":\"minimal\"}", KVP_HTTP_THINK_ON },
		{ CHAT, CHAT_HEAD ",\"reasoning_effort\":\"xhigh\"}", KVP_HTTP_THINK_ON },
		{ CHAT, CHAT_HEAD ",\"reasoning_effort\":\"max\"}", KVP_HTTP_THINK_ON },
		{ CHAT, CHAT_HEAD ",\"chat_template_kwargs\":{\"enable_thinking\":false}}",
		  KVP_HTTP_THINK_OFF },
		{ CHAT, CHAT_HEAD ",\"chat_template_kwargs\":{\"enable_thinking\":true}}",
		  KVP_HTTP_THINK_ON },
		{ CHAT, CHAT_HEAD ",\"chat_template_kwargs\":{}}", KVP_HTTP_THINK_DEFAULT },
		{ CHAT,
		  CHAT_HEAD ",\"reasoning_effort\":\"low\",\"chat_template_kwargs\":"
			    "{\"enable_thinking\":true}}",
		  KVP_HTTP_THINK_ON },
		/* Anthropic: off unless asked for */
		{ MSG, MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
		  KVP_HTTP_THINK_OFF },
		{ MSG,
		  MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
			   "\"thinking\":{\"type\":\"disabled\"}}",
		  KVP_HTTP_THINK_OFF },
		{ MSG,
		  MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
			   "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}}",
		  KVP_HTTP_THINK_ON },
		/* the model decides: the template's default, refused nowhere */
		{ MSG,
		  MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
			   "\"thinking\":{\"type\":\"adaptive\"}}",
		  KVP_HTTP_THINK_DEFAULT },
		{ MSG,
		  MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],"
			   "\"thinking\":{\"type\":\"between_tools\",\"display\":\"omitted\"}}",
		  KVP_HTTP_THINK_DEFAULT },
	};
	struct parsed *p;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		p = parse(cases[i].api, cases[i].body);
		if (p->r || p->g.thinking != cases[i].want)
			fail_msg("%s: r %d thinking %d, want %d", cases[i].body, p->r,
				 p->g.thinking, cases[i].want);
		/* display omitted: the blocks' text left out */
		assert_int_equal(p->g.think_omit, strstr(cases[i].body, "omitted") != NULL);
		done(p);
	}
	refused(CHAT, CHAT_HEAD ",\"reasoning_effort\":\"extreme\"}", "reasoning_effort",
		"none, minimal");
	refused(CHAT, CHAT_HEAD ",\"reasoning_effort\":1}", "reasoning_effort", NULL);
	refused(CHAT,
		CHAT_HEAD ",\"reasoning_effort\":\"none\",\"chat_template_kwargs\":"
			  "{\"enable_thinking\":true}}",
		"reasoning_effort", "disagree");
	refused(CHAT, CHAT_HEAD ",\"chat_template_kwargs\":{\"enable_thinking\":\"yes\"}}",
		"chat_template_kwargs", "boolean");
	refused(CHAT, CHAT_HEAD ",\"chat_template_kwargs\":{\"tools_in_user_message\":true}}",
		"chat_template_kwargs", "only enable_thinking");
	refused(CHAT, CHAT_HEAD ",\"chat_template_kwargs\":[]}", "chat_template_kwargs", "object");

	/* reasoning given back goes before the answer as the model wrote it */
	p = parse(CHAT, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
			"{\"role\":\"assistant\",\"content\":\"A\",\"reasoning_content\":\"R\"},"
			"{\"role\":\"assistant\",\"content\":\"B\",\"reasoning_content\":\"\"}]}");
	assert_int_equal(p->r, 0);
	assert_string_equal(p->g.msgs[1].text, "<think>\nR\n</think>\n\nA");
	assert_string_equal(p->g.msgs[2].text, "B");
	done(p);
	p = parse(MSG,
		  MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
			   "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\","
			   "\"thinking\":\"R\",\"signature\":\"\"},{\"type\":\"text\",\"text\":"
			   "\"A\"}]},{\"role\":\"user\",\"content\":\"q2\"},"
			   "{\"role\":\"assistant\",\"content\":[{\"type\":"
			   "\"redacted_thinking\",\"data\":\"x\"},{\"type\":\"text\",\"text\":"
			   "\"B\"}]}]}");
	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.n_msgs, 4);
	assert_string_equal(p->g.msgs[1].text, "<think>\nR\n</think>\n\n\nA");
	assert_string_equal(p->g.msgs[3].text, "B");
	done(p);
	refused(CHAT,
		"{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"content\":\"A\","
		"\"reasoning_content\":5}]}",
		"messages", "reasoning_content");
	refused(MSG,
		MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"thinking\","
			 "\"thinking\":\"R\"}]}]}",
		"messages", NULL);
}

static void test_tokenize_bodies(void **state)
{
	struct parsed *p = parse(KVP_HTTP_API_TOKENIZE, "{\"model\":\"m\",\"prompt\":\"hello\"}");

	/* /tokenize takes text, /detokenize ids */
	assert_int_equal(p->r, 0);
	assert_string_equal(p->g.text, "hello");
	done(p);
	p = parse(KVP_HTTP_API_DETOKENIZE, "{\"tokens\":[1,2,3]}");
	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.n_tokens, 3);
	done(p);
	refused(KVP_HTTP_API_TOKENIZE, "{\"prompt\":[1,2]}", "prompt", "text");
	refused(KVP_HTTP_API_DETOKENIZE, "{\"tokens\":\"abc\"}", "tokens", NULL);
	refused(KVP_HTTP_API_DETOKENIZE, "{\"tokens\":[999]}", "tokens", "out of range");
}

static void test_tokenize_fields(void **state)
{
	struct parsed *p = parse(KVP_HTTP_API_TOKENIZE,
				 "{\"prompt\":\"x\",\"add_special_tokens\":false}");

	/* vLLM's add_special_tokens: false means no BOS */
	assert_int_equal(p->r, 0);
	assert_true(p->g.no_special);
	done(p);
	p = parse(KVP_HTTP_API_TOKENIZE, "{\"prompt\":\"x\"}");
	assert_false(p->g.no_special);
	done(p);
	/* the chat form: messages, as a chat completion has them (model read once) */
	p = parse(KVP_HTTP_API_TOKENIZE,
		  "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},"
		  "{\"role\":\"user\",\"content\":\"u\"}],\"add_generation_prompt\":true}");
	assert_int_equal(p->r, 0);
	assert_string_equal(p->g.model, "m");
	assert_int_equal(p->g.n_msgs, 2);
	assert_null(p->g.text);
	done(p);
	refused(KVP_HTTP_API_TOKENIZE,
		"{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],"
		"\"add_generation_prompt\":false}",
		"add_generation_prompt", NULL);
	refused(KVP_HTTP_API_TOKENIZE, "{\"prompt\":\"x\",\"return_token_strs\":true}",
		"return_token_strs", "not");
	refused(KVP_HTTP_API_TOKENIZE, "{\"prompt\":\"x\",\"add_special_tokens\":1}",
		"add_special_tokens", "true or false");
}

static void test_count_tokens_bodies(void **state)
{
	const char *body = "{\"model\":\"m\",\"system\":\"s\",\"messages\":[{\"role\":"
			   "\"user\",\"content\":\"u\"}]}";
	struct parsed *p = parse(KVP_HTTP_API_COUNT_TOKENS, body);

	/* Anthropic's count_tokens: a messages body without max_tokens */
	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.n_msgs, 2);
	assert_int_equal(p->g.msgs[0].role, KVP_HTTP_ROLE_SYSTEM);
	done(p);
	/* which /v1/messages itself still requires */
	refused(MSG, body, "max_tokens", "required");
	refused(KVP_HTTP_API_COUNT_TOKENS, "{\"model\":\"m\",\"messages\":[]}", "messages", NULL);
	refused(KVP_HTTP_API_COUNT_TOKENS, "{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}]}",
		"model", "required");
}

static void test_priority(void **state)
{
	static const char *const bodies[] = {
		"{\"prompt\":\"x\",\"priority\":%s}",
		"{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"priority\":%s}",
		"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\","
		"\"content\":\"u\"}],\"priority\":%s}",
	};
	static const enum kvp_http_api apis[] = { C, CHAT, MSG };
	char b[256];

	/* vLLM's priority in every generating endpoint: an integer in [-1000, 1000] */
	for (size_t i = 0; i < 3; i++) {
		struct parsed *p;

		snprintf(b, sizeof(b), bodies[i], "-1000");
		p = parse(apis[i], b);
		assert_int_equal(p->r, 0);
		assert_int_equal(p->g.priority, -1000);
		done(p);
		snprintf(b, sizeof(b), bodies[i], "7.0"); /* JavaScript's integers */
		p = parse(apis[i], b);
		assert_int_equal(p->g.priority, 7);
		done(p);
		snprintf(b, sizeof(b), bodies[i], "1001");
		refused(apis[i], b, "priority", "out of range");
		snprintf(b, sizeof(b), bodies[i], "-1001");
		refused(apis[i], b, "priority", "out of range");
		snprintf(b, sizeof(b), bodies[i], "0.5");
		refused(apis[i], b, "priority", "integer");
		snprintf(b, sizeof(b), bodies[i], "\"high\"");
		refused(apis[i], b, "priority", "integer");
	}
	{
		struct parsed *p = parse(C, "{\"prompt\":\"x\"}");

		assert_false(p->g.has_priority); /* absent: kvpoold's domain default */
		assert_int_equal(p->g.priority, 0);
		done(p);
	}
}

/* kvpool's "speculative": true / false on every generating endpoint, absent the default */
static void test_speculative(void **state)
{
	static const char *const bodies[] = {
		"{\"prompt\":\"x\",\"speculative\":%s}",
		"{\"messages\":[{\"role\":\"user\",\"content\":\"u\"}],\"speculative\":%s}",
		"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\","
		"\"content\":\"u\"}],\"speculative\":%s}",
	};
	static const enum kvp_http_api apis[] = { C, CHAT, MSG };
	char b[256];

	for (size_t i = 0; i < 3; i++) {
		struct parsed *p;

		snprintf(b, sizeof(b), bodies[i], "true");
		p = parse(apis[i], b);
		assert_int_equal(p->r, 0);
		assert_int_equal(p->g.speculative, KVP_SPECULATIVE_ON);
		done(p);
		snprintf(b, sizeof(b), bodies[i], "false");
		p = parse(apis[i], b);
		assert_int_equal(p->r, 0);
		assert_int_equal(p->g.speculative, KVP_SPECULATIVE_OFF);
		done(p);
		snprintf(b, sizeof(b), bodies[i], "null");
		p = parse(apis[i], b);
		assert_int_equal(p->r, 0);
		assert_int_equal(p->g.speculative, KVP_SPECULATIVE_DEFAULT);
		done(p);
		snprintf(b, sizeof(b), bodies[i], "\"on\"");
		refused(apis[i], b, "speculative", "true or false");
		snprintf(b, sizeof(b), bodies[i], "1");
		refused(apis[i], b, "speculative", "true or false");
	}
	{
		struct parsed *p = parse(C, "{\"prompt\":\"x\"}");

		assert_int_equal(p->g.speculative, KVP_SPECULATIVE_DEFAULT);
		done(p);
	}
}

static void test_cache_map(void **state)
{
	const char *plain = "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":"
			    "\"user\",\"content\":\"u\"}]}";
	const char *marked = "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":"
			     "\"user\",\"content\":[{\"type\":\"text\",\"text\":\"u\","
			     "\"cache_control\":{\"type\":\"ephemeral\",\"ttl\":\"1h\"}}]}]}";
	/* system (1h), message 2 (5m, its first block of two), top level (the end, 5m) */
	const char *three =
		"{\"model\":\"m\",\"max_tokens\":1,\"system\":[{\"type\":\"text\",\"text\":\"s\","
		"\"cache_control\":{\"type\":\"ephemeral\",\"ttl\":\"1h\"}}],\"messages\":["
		"{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":[{"
		"\"type\":\"text\",\"text\":\"b\",\"cache_control\":{\"type\":\"ephemeral\"}},"
		"{\"type\":\"text\",\"text\":\"c\"}]},{\"role\":\"user\",\"content\":\"d\"}],"
		"\"cache_control\":{\"type\":\"ephemeral\"}}";
	struct parsed *a = parse(MSG, plain), *b = parse(MSG, marked),
		      *c = parse(C, "{\"prompt\":\"x\"}"), *d = parse(MSG, three);
	struct kvp_client_params p;
	struct kvp_cache_ctl cc;
	bool has_cc = true;

	/* no breakpoint: automatic caching, or (explicit) no-cache; no cache control */
	assert_int_equal(b->g.msgs[0].cache, KVP_HTTP_TTL_1H);
	kvp_client_params_init(&p);
	kvp_http_cache_map(&p, &cc, &has_cc, &a->g, KVP_HTTP_CACHE_AUTO);
	assert_false(p.no_cache);
	assert_false(has_cc);
	kvp_http_cache_map(&p, &cc, &has_cc, &a->g, KVP_HTTP_CACHE_EXPLICIT);
	assert_true(p.no_cache);
	assert_false(has_cc);
	/* OpenAI: always cached, never breakpoints */
	kvp_http_cache_map(&p, &cc, &has_cc, &c->g, KVP_HTTP_CACHE_EXPLICIT);
	assert_false(p.no_cache);
	assert_false(has_cc);
	/* a breakpoint: message breakpoints in either mode, with their TTLs */
	for (int mode = KVP_HTTP_CACHE_AUTO; mode <= KVP_HTTP_CACHE_EXPLICIT; mode++) {
		kvp_http_cache_map(&p, &cc, &has_cc, &b->g, (enum kvp_http_anthropic_cache)mode);
		assert_false(p.no_cache);
		assert_true(has_cc);
		assert_int_equal(cc.flags, KVP_CC_BP_MESSAGES);
		assert_int_equal(cc.n_breakpoints, 1);
		assert_int_equal(cc.breakpoints[0], 1);
		assert_int_equal(cc.bp_ttl_s[0], 3600);
		assert_int_equal(cc.breakpoints[1], 0);
	}
	kvp_http_cache_map(&p, &cc, &has_cc, &d->g, KVP_HTTP_CACHE_EXPLICIT);
	assert_true(has_cc);
	assert_int_equal(cc.n_breakpoints, 3);
	assert_int_equal(cc.breakpoints[0], 1); /* system */
	assert_int_equal(cc.breakpoints[1], 3); /* the assistant message */
	assert_int_equal(cc.breakpoints[2], 4); /* the top level: the last message */
	assert_int_equal(cc.bp_ttl_s[0], 3600);
	assert_int_equal(cc.bp_ttl_s[1], 300);
	assert_int_equal(cc.bp_ttl_s[2], 300);
	assert_int_equal(cc.ttl_s, 0);
	assert_false(p.no_cache);
	done(a);
	done(b);
	done(c);
	done(d);
}

/* The error body of @status in @shape, parsed. */
static json_t *err_body(unsigned int status, enum kvp_http_shape shape)
{
	struct kvp_http_err e;
	struct kvp_buf b = KVP_BUF_INIT;
	json_t *j;

	kvp_http_err_set(&e, status, status == 404 ? "model_not_found" : NULL,
			 status == 404 ? "model" : NULL, "went \"wrong\" %d", 42);
	kvp_http_err_json(&e, shape, &b);
	assert_int_equal(kvp_buf_finish(&b) >= 0, 1);
	j = json_loads(b.p, 0, NULL);
	assert_non_null(j);
	kvp_buf_deinit(&b);
	return j;
}

#define TOOL_W \
	"{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\"," \
	"\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}," \
	"\"required\":[\"city\"]}}}"
#define TOOL_T "{\"type\":\"function\",\"function\":{\"name\":\"now\"}}"
#define USER_X "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"

static void test_tools(void **state)
{
	/*
	 * OpenAI tools: the definitions kept as JSON for the template, their names for the
	 * answer's parser; tool_choice auto / none / required / named, the forced ones as a
	 * schema of {"name": const, "arguments": parameters}; assistant tool_calls and tool
	 * results become messages of their own; what cannot be done is refused by name
	 */
	struct parsed *p = parse(CHAT, "{" USER_X ",\"tools\":[" TOOL_W "," TOOL_T "]}");

	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.n_tools, 2);
	assert_string_equal(p->g.tool_names[0], "get_weather");
	assert_string_equal(p->g.tool_names[1], "now");
	assert_non_null(strstr(p->g.tools, "\"description\":\"d\""));
	assert_int_equal(p->g.tools[0], '[');
	assert_int_equal(p->g.tool_choice, KVP_HTTP_TOOLS_AUTO);
	assert_int_equal(p->g.grammar, 0);
	done(p);
	p = parse(CHAT,
		  "{" USER_X ",\"tools\":[" TOOL_W "," TOOL_T "],\"tool_choice\":\"required\"}");
	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.tool_choice, KVP_HTTP_TOOLS_REQUIRED);
	assert_int_equal(p->g.grammar, KVP_GRAMMAR_JSON_SCHEMA);
	assert_non_null(strstr(p->g.schema, "\"anyOf\""));
	assert_non_null(strstr(p->g.schema, "{\"const\":\"now\"}"));
	assert_non_null(strstr(p->g.schema, "\"arguments\":{\"type\":\"object\",\"properties\""));
	done(p);
	p = parse(CHAT, "{" USER_X ",\"tools\":[" TOOL_W "," TOOL_T "],\"tool_choice\":{\"type\":"
			"\"function\",\"function\":{\"name\":\"now\"}}}");
	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.tool_choice, KVP_HTTP_TOOLS_NAMED);
	assert_null(strstr(p->g.schema, "anyOf"));
	assert_null(strstr(p->g.schema, "get_weather"));
	assert_non_null(strstr(p->g.schema, "{\"const\":\"now\"}"));
	done(p);
	p = parse(CHAT, "{" USER_X ",\"tools\":[" TOOL_W "],\"tool_choice\":\"none\"}");
	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.tool_choice, KVP_HTTP_TOOLS_NONE);
	assert_int_equal(p->g.n_tools, 1);
	done(p);
	/* a two-step loop's second request */
	p = parse(CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":"
			"\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":"
			"\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
			"\"{\\\"city\\\": \\\"Paris\\\"}\"}},{\"id\":\"c2\",\"type\":\"function\","
			"\"function\":{\"name\":\"now\",\"arguments\":\"not json\"}}]},{\"role\":"
			"\"tool\",\"tool_call_id\":\"c1\",\"content\":\"21 C\"}],\"tools\":[" TOOL_W
			"," TOOL_T "]}");
	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.n_msgs, 5);
	assert_int_equal(p->g.msgs[1].role, KVP_HTTP_ROLE_ASSISTANT);
	assert_string_equal(p->g.msgs[1].text, "");
	assert_int_equal(p->g.msgs[2].role, KVP_HTTP_ROLE_TOOL_CALL);
	assert_string_equal(p->g.msgs[2].text, "get_weather\n{\"city\":\"Paris\"}");
	assert_int_equal(p->g.msgs[3].role, KVP_HTTP_ROLE_TOOL_CALL);
	assert_string_equal(p->g.msgs[3].text, "now\n\"not json\""); /* kept, as a string */
	assert_int_equal(p->g.msgs[4].role, KVP_HTTP_ROLE_TOOL);
	assert_string_equal(p->g.msgs[4].text, "21 C");
	done(p);
	refused(CHAT, "{" USER_X ",\"tools\":[{}]}", "tools", "function");
	refused(CHAT,
		"{" USER_X ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}",
		"tools", "name");
	refused(CHAT, "{" USER_X ",\"tools\":[" TOOL_T "," TOOL_T "]}", "tools", "twice");
	refused(CHAT, "{" USER_X ",\"tool_choice\":\"required\"}", "tool_choice", "no tools");
	refused(CHAT,
		"{" USER_X ",\"tools\":[" TOOL_T "],\"tool_choice\":{\"type\":\"function\","
		"\"function\":{\"name\":\"x\"}}}",
		"tool_choice", "no tool is named 'x'");
	refused(CHAT, "{" USER_X ",\"tools\":[" TOOL_T "],\"tool_choice\":\"sometimes\"}",
		"tool_choice", NULL);
	refused(CHAT, "{" USER_X ",\"functions\":[{\"name\":\"f\"}]}", "functions", "tools");
	refused(CHAT,
		"{" USER_X ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
		"\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\","
		"\"pattern\":\"x\"}}}}}],\"tool_choice\":\"required\"}",
		"tool_choice", "pattern");
	refused(CHAT,
		"{" USER_X ",\"tools\":[" TOOL_T "],\"tool_choice\":\"required\","
		"\"response_format\":{\"type\":\"json_object\"}}",
		"tool_choice", "response_format");
	refused(CHAT, "{\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", "messages",
		"tool");
	/* a forced call among 16 tools compiles (every name reachable: test_grammar); 17 not */
	for (int n = 16; n <= 17; n++) {
		char body[4096];
		int len = snprintf(body, sizeof(body),
				   "{" USER_X ",\"tool_choice\":\"required\","
				   "\"tools\":[");

		for (int i = 0; i < n; i++)
			len += snprintf(body + len, sizeof(body) - (size_t)len,
					"%s{\"type\":\"function\",\"function\":{\"name\":\"t%d\"}}",
					i ? "," : "", i);
		snprintf(body + len, sizeof(body) - (size_t)len, "]}");
		if (n == 17) {
			refused(CHAT, body, "tool_choice", "more than 16 tools (17 given)");
			continue;
		}
		p = parse(CHAT, body);
		assert_int_equal(p->r, 0);
		assert_int_equal(p->g.grammar, KVP_GRAMMAR_JSON_SCHEMA);
		assert_non_null(strstr(p->g.schema, "{\"const\":\"t15\"}"));
		done(p);
	}

	/* Anthropic: tools in OpenAI's shape, tool_use / tool_result blocks as messages */
	p = parse(MSG, MSG_HEAD
		  "\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":"
		  "\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Checking.\"},{\"type\":"
		  "\"tool_use\",\"id\":\"t1\",\"name\":\"get_weather\",\"input\":{\"city\":"
		  "\"Rome\"}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
		  "\"tool_use_id\":\"t1\",\"content\":[{\"type\":\"text\",\"text\":\"sunny\"}]},"
		  "{\"type\":\"text\",\"text\":\"and?\"}]}],\"tools\":[{\"name\":\"get_weather\","
		  "\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}}],"
		  "\"tool_choice\":{\"type\":\"any\"}}");
	assert_int_equal(p->r, 0);
	assert_string_equal(p->g.tools, "[{\"type\":\"function\",\"function\":{\"name\":"
					"\"get_weather\",\"description\":\"d\",\"parameters\":{"
					"\"type\":\"object\"}}}]");
	assert_int_equal(p->g.tool_choice, KVP_HTTP_TOOLS_REQUIRED);
	assert_int_equal(p->g.grammar, KVP_GRAMMAR_JSON_SCHEMA);
	assert_int_equal(p->g.n_msgs, 5);
	assert_int_equal(p->g.msgs[1].role, KVP_HTTP_ROLE_ASSISTANT);
	assert_string_equal(p->g.msgs[1].text, "Checking.");
	assert_int_equal(p->g.msgs[2].role, KVP_HTTP_ROLE_TOOL_CALL);
	assert_string_equal(p->g.msgs[2].text, "get_weather\n{\"city\":\"Rome\"}");
	assert_int_equal(p->g.msgs[3].role, KVP_HTTP_ROLE_TOOL);
	assert_string_equal(p->g.msgs[3].text, "sunny");
	assert_int_equal(p->g.msgs[4].role, KVP_HTTP_ROLE_USER);
	assert_string_equal(p->g.msgs[4].text, "and?");
	done(p);
	p = parse(MSG, MSG_HEAD USER_X ",\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],"
				       "\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\"}}");
	assert_int_equal(p->r, 0);
	assert_int_equal(p->g.tool_choice, KVP_HTTP_TOOLS_NAMED);
	done(p);
	refused(MSG, MSG_HEAD USER_X ",\"tools\":[{}]}", "tools", "name");
	refused(MSG,
		MSG_HEAD USER_X ",\"tools\":[{\"type\":\"web_search_20250305\",\"name\":"
				"\"web_search\"}]}",
		"tools", "server tools");
	refused(MSG, MSG_HEAD USER_X ",\"tools\":[{\"name\":\"f\"}]}", "tools", "input_schema");
	refused(MSG, MSG_HEAD USER_X ",\"tool_choice\":{\"type\":\"any\"}}", "tool_choice",
		"no tools");
	refused(MSG,
		MSG_HEAD "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
			 "\"tool_use\",\"id\":\"t\",\"name\":\"f\",\"input\":{}}]}]}",
		"messages", "tool_result");
}

static void test_error_shapes(void **state)
{
	static const struct {
		unsigned int status;
		const char *openai, *anthropic;
	} types[] = {
		{ 400, "invalid_request_error", "invalid_request_error" },
		{ 401, "invalid_request_error", "authentication_error" },
		{ 404, "invalid_request_error", "not_found_error" },
		{ 413, "invalid_request_error", "request_too_large" },
		{ 429, "rate_limit_error", "rate_limit_error" },
		{ 500, "server_error", "api_error" },
		{ 501, "server_error", "api_error" },
		{ 503, "server_error", "overloaded_error" },
	};

	/* OpenAI: {"error":{message,type,param,code}}; Anthropic: {"type":"error",
	 * "error":{type,message}}; each status with the type its SDK expects */
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		json_t *o = err_body(types[i].status, KVP_HTTP_SHAPE_OPENAI);
		json_t *a = err_body(types[i].status, KVP_HTTP_SHAPE_ANTHROPIC);
		json_t *oe = json_object_get(o, "error"), *ae = json_object_get(a, "error");

		assert_string_equal(json_string_value(json_object_get(oe, "message")),
				    "went \"wrong\" 42");
		assert_string_equal(json_string_value(json_object_get(oe, "type")),
				    types[i].openai);
		assert_non_null(json_object_get(oe, "param"));
		assert_non_null(json_object_get(oe, "code"));
		assert_string_equal(json_string_value(json_object_get(a, "type")), "error");
		assert_string_equal(json_string_value(json_object_get(ae, "type")),
				    types[i].anthropic);
		assert_string_equal(json_string_value(json_object_get(ae, "message")),
				    "went \"wrong\" 42");
		if (types[i].status == 404) {
			assert_string_equal(json_string_value(json_object_get(oe, "code")),
					    "model_not_found");
			assert_string_equal(json_string_value(json_object_get(oe, "param")),
					    "model");
		} else {
			assert_true(json_is_null(json_object_get(oe, "code")));
		}
		json_decref(o);
		json_decref(a);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_completion_defaults),
		cmocka_unit_test(test_completion_fields),
		cmocka_unit_test(test_prompt_forms),
		cmocka_unit_test(test_types_and_ranges),
		cmocka_unit_test(test_unsupported_is_refused),
		cmocka_unit_test(test_logprobs_and_n),
		cmocka_unit_test(test_bad_bodies),
		cmocka_unit_test(test_chat_messages),
		cmocka_unit_test(test_sampling_fields),
		cmocka_unit_test(test_messages_and_cache_control),
		cmocka_unit_test(test_messages_refusals),
		cmocka_unit_test(test_thinking),
		cmocka_unit_test(test_tokenize_bodies),
		cmocka_unit_test(test_tokenize_fields),
		cmocka_unit_test(test_count_tokens_bodies),
		cmocka_unit_test(test_priority),
		cmocka_unit_test(test_speculative),
		cmocka_unit_test(test_cache_map),
		cmocka_unit_test(test_tools),
		cmocka_unit_test(test_error_shapes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
