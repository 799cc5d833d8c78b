/* SPDX-License-Identifier: MIT */
/*
 * api.c - request bodies in, error bodies out (see api.h).
 *
 * Bodies are parsed by jansson (strings are then well-formed UTF-8 without NUL: jansson
 * refuses the rest), fields are read through the small typed getters below, so every
 * wrong type or range is a 400 that names the field.  Numbers may be sent as integers
 * or, where an integer is wanted, as a float with no fraction (JavaScript clients).
 */
#include "ipc/http/api.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/grammar.h"
#include "kvpool/kvpool.h"
#include "kvpool/proto.h"
#include "util/json.h"

void kvp_http_err_set(struct kvp_http_err *e, unsigned int status, const char *code,
		      const char *param, const char *fmt, ...)
{
	va_list ap;

	e->status = status;
	e->code = code;
	e->param = param;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
}

const char *kvp_http_err_type(const struct kvp_http_err *e, enum kvp_http_shape shape)
{
	bool a = shape == KVP_HTTP_SHAPE_ANTHROPIC;

	switch (e->status) {
	case 401:
		return a ? "authentication_error" : "invalid_request_error";
	case 403:
		return a ? "permission_error" : "invalid_request_error";
	case 404:
		return a ? "not_found_error" : "invalid_request_error";
	case 413:
		return a ? "request_too_large" : "invalid_request_error";
	case 429:
		return a ? "rate_limit_error" : "rate_limit_error";
	case 503:
		return a ? "overloaded_error" : "server_error";
	default:
		if (e->status >= 500)
			return a ? "api_error" : "server_error";
		return "invalid_request_error";
	}
}

void kvp_http_err_json(const struct kvp_http_err *e, enum kvp_http_shape shape, struct kvp_buf *out)
{
	struct kvp_json j;

	kvp_json_init(&j, out);
	kvp_json_begin(&j, NULL, '{');
	if (shape == KVP_HTTP_SHAPE_ANTHROPIC) {
		kvp_json_str(&j, "type", "error", 5);
		kvp_json_begin(&j, "error", '{');
		kvp_json_str(&j, "type", kvp_http_err_type(e, shape),
			     strlen(kvp_http_err_type(e, shape)));
		kvp_json_str(&j, "message", e->message, strlen(e->message));
		kvp_json_end(&j, '}');
	} else {
		kvp_json_begin(&j, "error", '{');
		kvp_json_str(&j, "message", e->message, strlen(e->message));
		kvp_json_str(&j, "type", kvp_http_err_type(e, shape),
			     strlen(kvp_http_err_type(e, shape)));
		if (e->param)
			kvp_json_str(&j, "param", e->param, strlen(e->param));
		else
			kvp_json_null(&j, "param");
		if (e->code)
			kvp_json_str(&j, "code", e->code, strlen(e->code));
		else
			kvp_json_null(&j, "code");
		kvp_json_end(&j, '}');
	}
	kvp_json_end(&j, '}');
}

/* ------------------------------------------------------------ typed getters */

/* A member that is absent or null counts as not given. */
static json_t *member(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	return v && !json_is_null(v) ? v : NULL;
}

static int bad(struct kvp_http_err *err, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int bad(struct kvp_http_err *err, const char *param, const char *fmt, ...)
{
	va_list ap;

	err->status = 400;
	err->code = NULL;
	err->param = param;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* Refuse a feature kvpool does not have, naming it. */
static int unsupported(struct kvp_http_err *err, const char *param, const char *what)
{
	bad(err, param, "%s: %s", param, what);
	err->code = "unsupported_parameter";
	return -EINVAL;
}

static int get_bool(json_t *o, const char *key, bool *out, struct kvp_http_err *err)
{
	json_t *v = member(o, key);

	if (!v)
		return 0;
	if (!json_is_boolean(v))
		return bad(err, key, "%s: must be true or false", key);
	*out = json_is_true(v);
	return 0;
}

/* An integer in [min, max]; *@given says whether it was there. */
static int get_int(json_t *o, const char *key, long long min, long long max, bool *given,
		   long long *out, struct kvp_http_err *err)
{
	json_t *v = member(o, key);
	long long x;

	*given = false;
	if (!v)
		return 0;
	if (json_is_integer(v)) {
		x = json_integer_value(v);
	} else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
		   fabs(json_real_value(v)) < 9e15) {
		x = (long long)json_real_value(v);
	} else {
		return bad(err, key, "%s: must be an integer", key);
	}
	if (x < min || x > max)
		return bad(err, key, "%s: %lld is out of range [%lld, %lld]", key, x, min, max);
	*given = true;
	*out = x;
	return 0;
}

/* A finite number in [min, max] ((min, max] with @open_min), kept in *@out when given. */
static int get_num(json_t *o, const char *key, double min, double max, bool open_min, float *out,
		   struct kvp_http_err *err)
{
	json_t *v = member(o, key);
	double x;

	if (!v)
		return 0;
	if (!json_is_number(v))
		return bad(err, key, "%s: must be a number", key);
	x = json_number_value(v);
	if (!isfinite(x) || x < min || x > max || (open_min && x == min))
		return bad(err, key, "%s: %g is out of range %s%g, %g]", key, x,
			   open_min ? "(" : "[", min, max);
	*out = (float)x;
	return 0;
}

/* A string member: *@s borrowed from @o (NULL when absent). */
static int get_str(json_t *o, const char *key, const char **s, size_t *n, struct kvp_http_err *err)
{
	json_t *v = member(o, key);

	*s = NULL;
	*n = 0;
	if (!v)
		return 0;
	if (!json_is_string(v))
		return bad(err, key, "%s: must be a string", key);
	*s = json_string_value(v);
	*n = json_string_length(v);
	return 0;
}

/* A feature flag that must be off: absent, null, false, 0 or an empty array/object. */
static bool is_off(json_t *v)
{
	return !v || json_is_null(v) || json_is_false(v) ||
	       (json_is_integer(v) && !json_integer_value(v)) ||
	       (json_is_real(v) && json_real_value(v) == 0) ||
	       (json_is_array(v) && !json_array_size(v)) ||
	       (json_is_object(v) && !json_object_size(v));
}

static char *dup_n(const char *s, size_t n)
{
	char *d = malloc(n + 1);

	if (d) {
		memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

/* ------------------------------------------------------------ shared fields */

static int parse_stop(struct kvp_http_gen *g, json_t *o, const char *key, struct kvp_http_err *err)
{
	json_t *v = member(o, key);
	size_t n, i;

	if (!v)
		return 0;
	if (json_is_string(v)) {
		n = 1;
	} else if (json_is_array(v)) {
		n = json_array_size(v);
		if (n > KVP_HTTP_STOP_MAX)
			return bad(err, key, "%s: at most %d stop strings", key, KVP_HTTP_STOP_MAX);
	} else {
		return bad(err, key, "%s: must be a string or an array of strings", key);
	}
	for (i = 0; i < n; i++) {
		json_t *s = json_is_string(v) ? v : json_array_get(v, i);
		size_t len;

		if (!json_is_string(s))
			return bad(err, key, "%s: must be a string or an array of strings", key);
		len = json_string_length(s);
		if (!len || len > KVP_HTTP_STOP_LEN_MAX)
			return bad(err, key, "%s: each stop string must be 1 to %d bytes", key,
				   KVP_HTTP_STOP_LEN_MAX);
		g->stop[i] = dup_n(json_string_value(s), len);
		if (!g->stop[i])
			return -ENOMEM;
		g->stop_len[i] = len;
		g->n_stop = i + 1;
	}
	return 0;
}

/* model, max tokens, sampling, stream, cache_salt and return_token_ids. */
static int parse_common(struct kvp_http_gen *g, json_t *o, const char *max_key,
			struct kvp_http_err *err)
{
	const char *s;
	long long x;
	bool given;
	size_t n;
	int r;

	r = get_str(o, "model", &s, &n, err);
	if (r)
		return r;
	if (s) {
		g->model = dup_n(s, n);
		if (!g->model)
			return -ENOMEM;
	}
	r = get_int(o, max_key, 1, UINT32_MAX, &given, &x, err);
	if (r)
		return r;
	if (given)
		g->max_tokens = (uint32_t)x;
	g->temperature = 1.0f;
	g->top_p = 1.0f;
	r = get_num(o, "temperature", 0, 100, false, &g->temperature, err);
	if (!r)
		r = get_num(o, "top_p", 0, 1, true, &g->top_p, err);
	if (!r)
		r = get_int(o, "top_k", -1, UINT32_MAX, &given, &x, err);
	if (r)
		return r;
	if (given && x > 0)
		g->top_k = (uint32_t)x;
	r = get_int(o, "seed", INT64_MIN, INT64_MAX, &given, &x, err);
	if (r)
		return r;
	g->has_seed = given;
	g->seed = given ? (uint64_t)x : 0;
	r = get_bool(o, "stream", &g->stream, err);
	if (!r)
		r = get_bool(o, "return_token_ids", &g->return_token_ids, err);
	if (!r)
		r = get_str(o, "cache_salt", &s, &n, err);
	if (r)
		return r;
	r = get_int(o, "priority", KVP_HTTP_PRIORITY_MIN, KVP_HTTP_PRIORITY_MAX, &given, &x, err);
	if (r)
		return r;
	g->has_priority = given;
	g->priority = given ? (int32_t)x : 0;
	/* kvpool's: speculative decoding on or off for this request (absent: kvpoold's) */
	if (member(o, "speculative")) {
		bool on;

		r = get_bool(o, "speculative", &on, err);
		if (r)
			return r;
		g->speculative = on ? KVP_SPECULATIVE_ON : KVP_SPECULATIVE_OFF;
	}
	if (s) {
		if (!n || n > KVP_HTTP_CACHE_SALT_MAX)
			return bad(err, "cache_salt", "cache_salt: must be 1 to %d bytes",
				   KVP_HTTP_CACHE_SALT_MAX);
		g->cache_salt = dup_n(s, n);
		if (!g->cache_salt)
			return -ENOMEM;
		g->cache_salt_len = n;
	}
	return 0;
}

/* OpenAI's logit_bias: {"id": bias, ...}, ids below @n_vocab (when known). */
static int parse_logit_bias(struct kvp_http_gen *g, json_t *o, uint32_t n_vocab,
			    struct kvp_http_err *err)
{
	json_t *lb = member(o, "logit_bias"), *v;
	const char *k;
	size_t n;

	if (!lb)
		return 0;
	if (!json_is_object(lb))
		return bad(err, "logit_bias", "logit_bias: must be an object of token id: bias");
	n = json_object_size(lb);
	if (n > KVP_LOGIT_BIAS_MAX)
		return bad(err, "logit_bias", "logit_bias: at most %d entries", KVP_LOGIT_BIAS_MAX);
	if (!n)
		return 0;
	g->bias_ids = malloc(n * sizeof(*g->bias_ids));
	g->bias = malloc(n * sizeof(*g->bias));
	if (!g->bias_ids || !g->bias)
		return -ENOMEM;
	json_object_foreach(lb, k, v)
	{
		char *end;
		long long id;

		errno = 0;
		id = strtoll(k, &end, 10);
		if (!*k || *end || errno || id < 0 || id > INT32_MAX || (n_vocab && id >= n_vocab))
			return bad(err, "logit_bias",
				   "logit_bias: \"%s\" is not a token id in [0, %u)", k,
				   n_vocab ? n_vocab : (uint32_t)INT32_MAX);
		if (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)
			return bad(err, "logit_bias",
				   "logit_bias: biases must be numbers in [-100, 100]");
		g->bias_ids[g->n_bias] = (int32_t)id;
		g->bias[g->n_bias++] = (float)json_number_value(v);
	}
	return 0;
}

/*
 * A JSON Schema for the answer (@param: the field it came in): compiled here so that a
 * keyword the grammar cannot enforce is a 400 naming it; kvpoold compiles it again.
 */
static int take_schema(struct kvp_http_gen *g, json_t *schema, const char *param,
		       struct kvp_http_err *err)
{
	struct kvp_grammar *gr;
	char why[256];
	int r;

	g->schema = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
	if (!g->schema)
		return -ENOMEM;
	g->schema_len = strlen(g->schema);
	if (g->schema_len > KVP_SCHEMA_BYTES_MAX)
		return bad(err, param, "%s: the schema is above %u bytes", param,
			   KVP_SCHEMA_BYTES_MAX);
	r = kvp_grammar_compile(&gr, g->schema, g->schema_len, why, sizeof(why));
	if (r == -ENOMEM)
		return r;
	if (r) {
		char what[300];

		snprintf(what, sizeof(what), "json_schema: %s", why);
		return unsupported(err, param, what);
	}
	kvp_grammar_free(gr);
	g->grammar = KVP_GRAMMAR_JSON_SCHEMA;
	return 0;
}

/*
 * OpenAI's response_format: text, json_object, or json_schema {name, schema, strict}:
 * the schema is compiled here so that a keyword kvpool cannot enforce is a 400 naming
 * it (kvpoold compiles it again, and would refuse it the same way).
 */
static int parse_response_format(struct kvp_http_gen *g, json_t *o, struct kvp_http_err *err)
{
	json_t *rf = member(o, "response_format"), *t, *js, *schema;
	const char *type;

	if (!rf)
		return 0;
	t = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
	type = json_is_string(t) ? json_string_value(t) : "";
	if (!strcmp(type, "text"))
		return 0;
	if (!strcmp(type, "json_object")) {
		g->grammar = KVP_GRAMMAR_JSON_OBJECT;
		return 0;
	}
	if (strcmp(type, "json_schema"))
		return bad(err, "response_format",
			   "response_format.type: must be text, json_object or json_schema");
	js = json_object_get(rf, "json_schema");
	schema = json_is_object(js) ? json_object_get(js, "schema") : NULL;
	if (!schema)
		return bad(err, "response_format",
			   "response_format.json_schema.schema: required (a JSON Schema object)");
	return take_schema(g, schema, "response_format", err);
}

/*
 * Anthropic's output_config: format {"type": "json_schema", "schema"} is OpenAI's
 * response_format json_schema (the same grammar, the same refusals); effort (low .. max)
 * is checked and ignored: a hosted model's knob, which kvpool's models do not have.
 */
static int parse_output_config(struct kvp_http_gen *g, json_t *o, struct kvp_http_err *err)
{
	static const char *const efforts[] = { "low", "medium", "high", "xhigh", "max" };
	json_t *oc = member(o, "output_config"), *f, *t, *e, *schema;
	const char *type;
	size_t k = 0;

	if (!oc)
		return 0;
	if (!json_is_object(oc))
		return bad(err, "output_config", "output_config: must be an object");
	e = member(oc, "effort");
	if (e) {
		while (k < 5 && (!json_is_string(e) || strcmp(json_string_value(e), efforts[k])))
			k++;
		if (k == 5)
			return bad(err, "output_config",
				   "output_config.effort: must be low, medium, high, xhigh or max");
	}
	f = member(oc, "format");
	if (!f)
		return 0;
	t = json_is_object(f) ? json_object_get(f, "type") : NULL;
	type = json_is_string(t) ? json_string_value(t) : "";
	if (strcmp(type, "json_schema"))
		return bad(err, "output_config", "output_config.format.type: must be json_schema");
	schema = json_object_get(f, "schema");
	if (!json_is_object(schema))
		return bad(err, "output_config",
			   "output_config.format.schema: required (a JSON Schema object)");
	return take_schema(g, schema, "output_config", err);
}

/*
 * Chat: logprobs (bool) and top_logprobs (0..20, only with logprobs true, as OpenAI
 * answers); completions: logprobs (0..20, the legacy shape's count of alternatives; OpenAI
 * allows 5, vLLM 20).  kvpoold lists at most KVP_TOP_LOGPROBS_MAX alternatives.
 */
static int parse_logprobs(struct kvp_http_gen *g, json_t *o, struct kvp_http_err *err)
{
	json_t *lp = member(o, "logprobs");
	long long x;
	bool given;
	int r;

	if (g->api == KVP_HTTP_API_COMPLETIONS) {
		if (lp && json_is_boolean(lp))
			return bad(err, "logprobs",
				   "logprobs: must be an integer in [0, %d] on /v1/completions "
				   "(the number of alternatives per token)",
				   KVP_TOP_LOGPROBS_MAX);
		r = get_int(o, "logprobs", 0, KVP_TOP_LOGPROBS_MAX, &given, &x, err);
		if (r)
			return r;
		g->logprobs = given;
		g->top_logprobs = given ? (uint32_t)x : 0;
		if (member(o, "top_logprobs"))
			return bad(err, "top_logprobs",
				   "top_logprobs: not a field of /v1/completions; logprobs "
				   "(an integer) gives the alternatives");
		return 0;
	}
	if (lp && !json_is_boolean(lp))
		return bad(err, "logprobs", "logprobs: must be true or false");
	r = get_int(o, "top_logprobs", 0, KVP_TOP_LOGPROBS_MAX, &given, &x, err);
	if (r)
		return r;
	if (given && !json_is_true(lp))
		return bad(err, "top_logprobs", "top_logprobs: requires logprobs to be true");
	g->logprobs = json_is_true(lp);
	g->top_logprobs = given ? (uint32_t)x : 0;
	return 0;
}

/* OpenAI's n, logprobs, penalties, logit_bias, stream_options. */
static int parse_openai_extras(struct kvp_http_gen *g, json_t *o, uint32_t n_vocab,
			       struct kvp_http_err *err)
{
	static const char *const pen[] = { "presence_penalty", "frequency_penalty" };
	json_t *so;
	long long x;
	bool given;
	int r;

	/* OpenAI's range; kvpoold samples at most KVP_PARALLEL_MAX continuations */
	r = get_int(o, "n", 1, 128, &given, &x, err);
	if (r)
		return r;
	if (given && x > KVP_PARALLEL_MAX) {
		bad(err, "n", "n: %lld is above %d, the most choices kvpoold samples at once", x,
		    KVP_PARALLEL_MAX);
		err->code = "unsupported_parameter";
		return -EINVAL;
	}
	g->n = given ? (uint32_t)x : 1;
	r = get_int(o, "best_of", 1, 128, &given, &x, err);
	if (r)
		return r;
	if (given && x != 1)
		return unsupported(err, "best_of", "only best_of = 1 is supported");
	r = parse_logprobs(g, o, err);
	if (r)
		return r;
	if (!is_off(json_object_get(o, "echo")))
		return unsupported(err, "echo", "echoing the prompt is not supported");
	r = parse_logit_bias(g, o, n_vocab, err);
	if (r)
		return r;
	r = get_num(o, pen[0], -2, 2, false, &g->presence, err);
	if (!r)
		r = get_num(o, pen[1], -2, 2, false, &g->frequency, err);
	if (r)
		return r;
	so = member(o, "stream_options");
	if (so) {
		if (!json_is_object(so))
			return bad(err, "stream_options", "stream_options: must be an object");
		r = get_bool(so, "include_usage", &g->include_usage, err);
		if (r)
			return r;
	}
	return parse_stop(g, o, "stop", err);
}

/* ------------------------------------------------------------ prompts */

static int parse_ids(struct kvp_http_gen *g, json_t *a, const char *param, uint32_t n_vocab,
		     struct kvp_http_err *err)
{
	size_t n = json_array_size(a);

	if (!n)
		return bad(err, param, "%s: empty token list", param);
	g->tokens = malloc(n * sizeof(*g->tokens));
	if (!g->tokens)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		json_t *e = json_array_get(a, i);
		long long id;

		if (!json_is_integer(e))
			return bad(err, param, "%s: token ids must be integers", param);
		id = json_integer_value(e);
		if (id < 0 || id > INT32_MAX || (n_vocab && id >= n_vocab))
			return bad(err, param, "%s: token id %lld is out of range [0, %u)", param,
				   id, n_vocab ? n_vocab : (uint32_t)INT32_MAX);
		g->tokens[i] = (int32_t)id;
	}
	g->n_tokens = n;
	return 0;
}

/* OpenAI's prompt: a string, [string], [ids] or [[ids]] (exactly one prompt). */
static int parse_prompt(struct kvp_http_gen *g, json_t *o, uint32_t n_vocab,
			struct kvp_http_err *err)
{
	json_t *v = member(o, "prompt");
	json_t *e;

	if (!v)
		return bad(err, "prompt", "prompt: required");
	if (json_is_array(v) && json_array_size(v) > 0) {
		e = json_array_get(v, 0);
		if (json_is_integer(e))
			return parse_ids(g, v, "prompt", n_vocab, err);
		if (json_array_size(v) > 1)
			return unsupported(err, "prompt",
					   "one prompt per request (a batch needs parallel "
					   "sampling)");
		v = e;
		if (json_is_array(v))
			return parse_ids(g, v, "prompt", n_vocab, err);
	}
	if (!json_is_string(v))
		return bad(err, "prompt",
			   "prompt: must be a string, an array of token ids, or an array holding "
			   "one of those");
	if (!json_string_length(v))
		return bad(err, "prompt", "prompt: empty");
	g->text = dup_n(json_string_value(v), json_string_length(v));
	if (!g->text)
		return -ENOMEM;
	g->text_len = json_string_length(v);
	return 0;
}

/* ------------------------------------------------------------ chat messages */

/* Append @n bytes to a message's text, a newline between parts. */
static int msg_add(struct kvp_http_msg *m, const char *s, size_t n, bool sep)
{
	char *t = realloc(m->text, m->len + n + 2);

	if (!t)
		return -ENOMEM;
	m->text = t;
	if (sep && m->len)
		m->text[m->len++] = '\n';
	memcpy(m->text + m->len, s, n);
	m->len += n;
	m->text[m->len] = '\0';
	return 0;
}

/* Where the Anthropic breakpoints stand while a request is read. */
struct bp_state {
	unsigned int n;
	bool seen_5m;
};

/* Anthropic cache_control of @block at @where; *@ttl set when there is one. */
static int parse_cache_control(json_t *block, const char *where, struct bp_state *bp,
			       enum kvp_http_ttl *ttl, struct kvp_http_err *err)
{
	json_t *cc = member(block, "cache_control");
	json_t *t;
	const char *s;

	if (!cc)
		return 0;
	if (!json_is_object(cc))
		return bad(err, "cache_control", "%s.cache_control: must be an object", where);
	t = json_object_get(cc, "type");
	if (!json_is_string(t) || strcmp(json_string_value(t), "ephemeral"))
		return bad(err, "cache_control", "%s.cache_control.type: must be \"ephemeral\"",
			   where);
	t = member(cc, "ttl");
	*ttl = KVP_HTTP_TTL_5M;
	if (t) {
		s = json_is_string(t) ? json_string_value(t) : "";
		if (!strcmp(s, "1h"))
			*ttl = KVP_HTTP_TTL_1H;
		else if (strcmp(s, "5m"))
			return bad(err, "cache_control",
				   "%s.cache_control.ttl: must be \"5m\" or \"1h\"", where);
	}
	if (++bp->n > KVP_HTTP_BREAKPOINTS_MAX)
		return bad(err, "cache_control",
			   "a maximum of %d blocks with cache_control may be provided; found %u",
			   KVP_HTTP_BREAKPOINTS_MAX, bp->n);
	if (*ttl == KVP_HTTP_TTL_1H && bp->seen_5m)
		return bad(err, "cache_control",
			   "%s.cache_control.ttl: a \"1h\" breakpoint must not come after a "
			   "\"5m\" one",
			   where);
	if (*ttl == KVP_HTTP_TTL_5M)
		bp->seen_5m = true;
	return 0;
}

/*
 * Message content: a string, or an array of text parts/blocks ({"type":"text","text"}),
 * joined by newlines.  @bp is NULL for OpenAI (no cache_control there).
 */
static int parse_content(struct kvp_http_msg *m, json_t *c, const char *where, struct bp_state *bp,
			 const char *param, struct kvp_http_err *err)
{
	char at[96];
	int r;

	if (json_is_string(c))
		return msg_add(m, json_string_value(c), json_string_length(c), false);
	if (!json_is_array(c) || !json_array_size(c))
		return bad(err, param, "%s.content: must be a string or a non-empty array", where);
	for (size_t i = 0; i < json_array_size(c); i++) {
		json_t *b = json_array_get(c, i);
		json_t *t = json_is_object(b) ? json_object_get(b, "type") : NULL;
		json_t *text = json_is_object(b) ? json_object_get(b, "text") : NULL;
		enum kvp_http_ttl ttl = KVP_HTTP_TTL_NONE;

		snprintf(at, sizeof(at), "%s.content.%zu", where, i);
		if (!json_is_string(t))
			return bad(err, param, "%s.type: required", at);
		if (strcmp(json_string_value(t), "text"))
			return bad(err, param,
				   "%s: content of type \"%s\" is not supported (text only)", at,
				   json_string_value(t));
		if (!json_is_string(text))
			return bad(err, param, "%s.text: must be a string", at);
		if (bp) {
			r = parse_cache_control(b, at, bp, &ttl, err);
			if (r)
				return r;
			if (ttl)
				m->cache = ttl;
		}
		r = msg_add(m, json_string_value(text), json_string_length(text), true);
		if (r)
			return r;
	}
	return 0;
}

static struct kvp_http_msg *new_msg(struct kvp_http_gen *g, enum kvp_http_role role)
{
	struct kvp_http_msg *m = &g->msgs[g->n_msgs++];

	*m = (struct kvp_http_msg){ .role = role };
	return m;
}

/*
 * A call's or result's id, kept for the templates that write it (Mistral's); anything
 * but a non-empty string is none (the SDKs always send one).
 */
static int msg_id(struct kvp_http_msg *m, json_t *id)
{
	if (!json_is_string(id) || !json_string_length(id))
		return 0;
	m->id = strndup(json_string_value(id), json_string_length(id));
	return m->id ? 0 : -ENOMEM;
}

/* ------------------------------------------------------------ tools */

/* OpenAI's rule for function names, which keeps a name one line of plain text. */
static bool tool_name_ok(const char *s, size_t n)
{
	if (!n || n > 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-'))
			return false;
	return true;
}

/*
 * The schema a forced call follows: {"name": the tool's name, "arguments": its
 * parameters}, every tool's an alternative (anyOf) for REQUIRED, the named one's alone.
 * Compiled here so that a parameters keyword the grammar cannot enforce is a 400.
 */
static int tools_schema(struct kvp_http_gen *g, json_t *tools, const char *param,
			struct kvp_http_err *err)
{
	json_t *alts = json_array(), *schema;
	struct kvp_grammar *gr;
	char why[256];
	int r;

	if (!alts)
		return -ENOMEM;
	/* each tool an anyOf branch, all alive until the name tells them apart */
	if (g->tool_choice == KVP_HTTP_TOOLS_REQUIRED &&
	    json_array_size(tools) > KVP_GRAMMAR_ALTS_MAX) {
		char what[200];

		json_decref(alts);
		snprintf(what, sizeof(what),
			 "a forced call (required) among more than %u tools (%zu given): name "
			 "one, or pass fewer",
			 KVP_GRAMMAR_ALTS_MAX, json_array_size(tools));
		return unsupported(err, param, what);
	}
	for (size_t i = 0; i < json_array_size(tools); i++) {
		json_t *f = json_object_get(json_array_get(tools, i), "function");
		json_t *params = member(f, "parameters");
		json_t *name = json_object_get(f, "name"), *p;

		if (g->tool_choice == KVP_HTTP_TOOLS_NAMED &&
		    strcmp(json_string_value(name), g->tool_names[g->n_tools]))
			continue;
		p = params ? json_incref(params) : json_pack("{s:s}", "type", "object");
		json_array_append_new(alts, json_pack("{s:s,s:{s:{s:O},s:o},s:[s,s],s:b}", "type",
						      "object", "properties", "name", "const", name,
						      "arguments", p, "required", "name",
						      "arguments", "additionalProperties", 0));
	}
	schema = json_array_size(alts) == 1 ? json_incref(json_array_get(alts, 0)) :
					      json_pack("{s:O}", "anyOf", alts);
	json_decref(alts);
	if (!schema)
		return -ENOMEM;
	g->schema = json_dumps(schema, JSON_COMPACT);
	json_decref(schema);
	if (!g->schema)
		return -ENOMEM;
	g->schema_len = strlen(g->schema);
	if (g->schema_len > KVP_SCHEMA_BYTES_MAX)
		return bad(err, param, "%s: the tools' parameters are above %u bytes together",
			   param, KVP_SCHEMA_BYTES_MAX);
	r = kvp_grammar_compile(&gr, g->schema, g->schema_len, why, sizeof(why));
	if (r == -ENOMEM)
		return r;
	if (r) {
		char what[300];

		snprintf(what, sizeof(what), "a forced tool call's parameters: %s", why);
		return unsupported(err, param, what);
	}
	kvp_grammar_free(gr);
	g->grammar = KVP_GRAMMAR_JSON_SCHEMA;
	return 0;
}

/*
 * @tools (OpenAI-shaped, checked) become the request's: the JSON text for the template,
 * the names for the answer's parser, and with a forced choice the grammar.  @named: the
 * name tool_choice gives (NAMED), which must be among them.
 */
static int take_tools(struct kvp_http_gen *g, json_t *tools, const char *named, const char *param,
		      struct kvp_http_err *err)
{
	size_t n = json_array_size(tools);

	if (!n) {
		if (g->tool_choice == KVP_HTTP_TOOLS_REQUIRED ||
		    g->tool_choice == KVP_HTTP_TOOLS_NAMED)
			return bad(err, param, "%s: a tool must be called, and there are no tools",
				   param);
		return 0;
	}
	if (n > KVP_HTTP_TOOLS_MAX)
		return bad(err, "tools", "tools: at most %d tools", KVP_HTTP_TOOLS_MAX);
	if (g->grammar &&
	    (g->tool_choice == KVP_HTTP_TOOLS_REQUIRED || g->tool_choice == KVP_HTTP_TOOLS_NAMED))
		return unsupported(
			err, param,
			g->api == KVP_HTTP_API_CHAT ?
				"a forced tool call together with response_format is not "
				"supported" :
				"a forced tool call together with output_config.format is "
				"not supported");
	g->tools = json_dumps(tools, JSON_COMPACT);
	g->tool_names = calloc(n + 1, sizeof(*g->tool_names));
	if (!g->tools || !g->tool_names)
		return -ENOMEM;
	g->tools_len = strlen(g->tools);
	for (size_t i = 0; i < n; i++) {
		json_t *f = json_object_get(json_array_get(tools, i), "function");
		const char *s = json_string_value(json_object_get(f, "name"));

		for (size_t k = 0; k < g->n_tools; k++)
			if (!strcmp(g->tool_names[k], s))
				return bad(err, "tools", "tools: the name '%s' is given twice", s);
		g->tool_names[g->n_tools] = strdup(s);
		if (!g->tool_names[g->n_tools])
			return -ENOMEM;
		g->n_tools++;
	}
	if (g->tool_choice == KVP_HTTP_TOOLS_NAMED) {
		size_t k = 0;

		while (k < n && strcmp(g->tool_names[k], named))
			k++;
		if (k == n)
			return bad(err, param, "%s: no tool is named '%s'", param, named);
		/* tools_schema() finds the named one past the list's end */
		g->tool_names[n] = g->tool_names[k];
	}
	if (g->tool_choice == KVP_HTTP_TOOLS_REQUIRED || g->tool_choice == KVP_HTTP_TOOLS_NAMED) {
		int r = tools_schema(g, tools, param, err);

		g->tool_names[n] = NULL;
		return r;
	}
	return 0;
}

/* OpenAI's tools and tool_choice; functions / function_call (deprecated) are refused. */
static int parse_openai_tools(struct kvp_http_gen *g, json_t *o, struct kvp_http_err *err)
{
	json_t *tools = member(o, "tools"), *tc = member(o, "tool_choice");
	const char *named = NULL;

	if (!is_off(json_object_get(o, "functions")))
		return unsupported(err, "functions",
				   "the deprecated functions are not supported: "
				   "use tools");
	if (!is_off(json_object_get(o, "function_call")))
		return unsupported(
			err, "function_call",
			"the deprecated function_call is not supported: use tool_choice");
	if (json_is_string(tc)) {
		const char *s = json_string_value(tc);

		if (!strcmp(s, "auto"))
			g->tool_choice = KVP_HTTP_TOOLS_AUTO;
		else if (!strcmp(s, "none"))
			g->tool_choice = KVP_HTTP_TOOLS_NONE;
		else if (!strcmp(s, "required"))
			g->tool_choice = KVP_HTTP_TOOLS_REQUIRED;
		else
			return bad(err, "tool_choice",
				   "tool_choice: must be auto, none, required or a function");
	} else if (tc) {
		json_t *t = json_is_object(tc) ? json_object_get(tc, "type") : NULL;
		json_t *f = json_is_object(tc) ? json_object_get(tc, "function") : NULL;
		json_t *name = json_is_object(f) ? json_object_get(f, "name") : NULL;

		if (!json_is_string(t) || strcmp(json_string_value(t), "function") ||
		    !json_is_string(name))
			return bad(err, "tool_choice",
				   "tool_choice: must be auto, none, required or "
				   "{\"type\": \"function\", \"function\": {\"name\": ...}}");
		g->tool_choice = KVP_HTTP_TOOLS_NAMED;
		named = json_string_value(name);
	}
	if (tools && !json_is_array(tools))
		return bad(err, "tools", "tools: must be an array");
	for (size_t i = 0; tools && i < json_array_size(tools); i++) {
		json_t *t = json_array_get(tools, i);
		json_t *type = json_is_object(t) ? json_object_get(t, "type") : NULL;
		json_t *f = json_is_object(t) ? json_object_get(t, "function") : NULL;
		json_t *name = json_is_object(f) ? json_object_get(f, "name") : NULL;
		json_t *params = json_is_object(f) ? member(f, "parameters") : NULL;

		if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
			return unsupported(err, "tools",
					   "only tools of type \"function\" are supported");
		if (!json_is_string(name) ||
		    !tool_name_ok(json_string_value(name), json_string_length(name)))
			return bad(err, "tools",
				   "tools.%zu.function.name: must match ^[a-zA-Z0-9_-]{1,64}$", i);
		if (params && !json_is_object(params))
			return bad(err, "tools", "tools.%zu.function.parameters: must be an object",
				   i);
	}
	return take_tools(g, tools, named, "tool_choice", err);
}

/*
 * A call's arguments as the template takes them: JSON text.  OpenAI sends them as a
 * string holding JSON; one that does not parse is kept as a JSON string, as a template
 * given the raw string would write it.
 */
static char *call_text(const char *name, json_t *args)
{
	json_t *parsed = NULL;
	char *a, *out;
	size_t nl, al;

	if (json_is_string(args))
		parsed = json_loadb(json_string_value(args), json_string_length(args),
				    JSON_DECODE_ANY, NULL);
	a = parsed || args ? json_dumps(parsed ? parsed : args, JSON_COMPACT | JSON_ENCODE_ANY) :
			     strdup("{}");
	json_decref(parsed);
	if (!a)
		return NULL;
	nl = strlen(name);
	al = strlen(a);
	out = malloc(nl + 1 + al + 1);
	if (out) {
		memcpy(out, name, nl);
		out[nl] = '\n';
		memcpy(out + nl + 1, a, al + 1);
	}
	free(a);
	return out;
}

/* @id: the call's id (a JSON string, or anything else for none) */
static int add_call(struct kvp_http_gen *g, const char *name, json_t *args, json_t *id)
{
	struct kvp_http_msg *m = new_msg(g, KVP_HTTP_ROLE_TOOL_CALL);

	m->text = call_text(name, args);
	if (!m->text)
		return -ENOMEM;
	m->len = strlen(m->text);
	return msg_id(m, id);
}

/* An assistant message with tool_calls: its content (may be null) and one message per call. */
/*
 * An assistant message's reasoning given back (OpenAI's reasoning_content, Anthropic's
 * thinking blocks) put before its text as the model wrote it, "<think>\n...\n</think>\n\n":
 * the reasoning template (Qwen3) cuts it off again and keeps it where it keeps
 * reasoning (the turns after the last user message); the answer's reasoning is only ever
 * split out of such a block (think.h), so elsewhere it is the text the model wrote.
 */
static int msg_prefix_reasoning(struct kvp_http_msg *m, const char *s, size_t n)
{
	static const char open[] = "<think>\n", close[] = "\n</think>\n\n";
	size_t add = sizeof(open) - 1 + n + sizeof(close) - 1;
	char *t;

	if (!n)
		return 0;
	t = malloc(m->len + add + 1);
	if (!t)
		return -ENOMEM;
	memcpy(t, open, sizeof(open) - 1);
	memcpy(t + sizeof(open) - 1, s, n);
	memcpy(t + sizeof(open) - 1 + n, close, sizeof(close) - 1);
	if (m->len)
		memcpy(t + add, m->text, m->len);
	t[m->len + add] = '\0';
	free(m->text);
	m->text = t;
	m->len += add;
	return 0;
}

/* OpenAI's assistant reasoning_content (a string, or null), as msg_prefix_reasoning(). */
static int openai_reasoning(struct kvp_http_msg *a, json_t *m, const char *at,
			    struct kvp_http_err *err)
{
	json_t *rc = member(m, "reasoning_content");

	if (!rc)
		return 0;
	if (!json_is_string(rc))
		return bad(err, "messages", "%s.reasoning_content: must be a string", at);
	return msg_prefix_reasoning(a, json_string_value(rc), json_string_length(rc));
}

/*
 * OpenAI's reasoning switches: reasoning_effort "none" is off, minimal .. high on (the
 * effort itself is not a knob kvpool has: max_tokens bounds the reasoning with the
 * answer); chat_template_kwargs.enable_thinking (vLLM's, llama-server's) on or off.  Both
 * given, they must agree.
 */
static int parse_openai_thinking(struct kvp_http_gen *g, json_t *o, struct kvp_http_err *err)
{
	static const char *const on[] = { "minimal", "low", "medium", "high", "xhigh", "max" };
	json_t *effort = member(o, "reasoning_effort");
	json_t *kw = member(o, "chat_template_kwargs");
	enum kvp_http_thinking by_effort = KVP_HTTP_THINK_DEFAULT;

	if (effort) {
		const char *e = json_is_string(effort) ? json_string_value(effort) : "";

		if (!strcmp(e, "none"))
			by_effort = KVP_HTTP_THINK_OFF;
		for (size_t i = 0; i < sizeof(on) / sizeof(on[0]); i++)
			if (!strcmp(e, on[i]))
				by_effort = KVP_HTTP_THINK_ON;
		if (!by_effort)
			return bad(
				err, "reasoning_effort",
				"reasoning_effort: must be none, minimal, low, medium, high, xhigh "
				"or max");
	}
	g->thinking = by_effort;
	if (kw) {
		json_t *et = member(kw, "enable_thinking");
		const char *k;
		json_t *v;

		if (!json_is_object(kw))
			return bad(err, "chat_template_kwargs",
				   "chat_template_kwargs: must be an object");
		json_object_foreach(kw, k, v) if (strcmp(k, "enable_thinking")) return unsupported(
			err, "chat_template_kwargs",
			"only enable_thinking is supported (kvpool "
			"renders the template itself)");
		if (et && !json_is_boolean(et))
			return bad(err, "chat_template_kwargs",
				   "chat_template_kwargs.enable_thinking: must be a boolean");
		if (et) {
			enum kvp_http_thinking t = json_is_true(et) ? KVP_HTTP_THINK_ON :
								      KVP_HTTP_THINK_OFF;

			if (by_effort && by_effort != t)
				return bad(err, "reasoning_effort",
					   "reasoning_effort and "
					   "chat_template_kwargs.enable_thinking disagree");
			g->thinking = t;
		}
	}
	return 0;
}

static int parse_openai_calls(struct kvp_http_gen *g, json_t *m, json_t *content, const char *at,
			      struct kvp_http_err *err)
{
	json_t *calls = json_object_get(m, "tool_calls");
	struct kvp_http_msg *a = new_msg(g, KVP_HTTP_ROLE_ASSISTANT);
	int r;

	if (!json_is_array(calls))
		return bad(err, "messages", "%s.tool_calls: must be an array", at);
	if (content && (r = parse_content(a, content, at, NULL, "messages", err)))
		return r;
	if ((r = openai_reasoning(a, m, at, err)))
		return r;
	if (!a->text && !(a->text = strdup("")))
		return -ENOMEM;
	for (size_t k = 0; k < json_array_size(calls); k++) {
		json_t *c = json_array_get(calls, k);
		json_t *f = json_is_object(c) ? json_object_get(c, "function") : NULL;
		json_t *name = json_is_object(f) ? json_object_get(f, "name") : NULL;
		json_t *args = json_is_object(f) ? member(f, "arguments") : NULL;

		if (!json_is_string(name) ||
		    !tool_name_ok(json_string_value(name), json_string_length(name)))
			return bad(err, "messages",
				   "%s.tool_calls.%zu.function.name: must match "
				   "^[a-zA-Z0-9_-]{1,64}$",
				   at, k);
		if (args && !json_is_string(args))
			return bad(err, "messages",
				   "%s.tool_calls.%zu.function.arguments: must be a string", at, k);
		r = add_call(g, json_string_value(name), args, json_object_get(c, "id"));
		if (r)
			return r;
	}
	return 0;
}

static int parse_chat(struct kvp_http_gen *g, json_t *o, uint32_t n_vocab, struct kvp_http_err *err)
{
	/* audio out, predicted outputs, moderation results: nothing here makes them */
	static const char *const no[] = { "audio", "prediction", "moderation" };
	json_t *msgs = member(o, "messages");
	size_t n_calls = 0;
	long long x;
	bool given;
	int r;

	r = parse_common(g, o, "max_completion_tokens", err);
	if (r)
		return r;
	if (!g->max_tokens) {
		r = get_int(o, "max_tokens", 1, UINT32_MAX, &given, &x, err);
		if (r)
			return r;
		if (given)
			g->max_tokens = (uint32_t)x;
	}
	r = parse_openai_extras(g, o, n_vocab, err);
	if (!r)
		r = parse_openai_thinking(g, o, err);
	if (!r)
		r = parse_response_format(g, o, err);
	if (!r)
		r = parse_openai_tools(g, o, err);
	if (r)
		return r;
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (!is_off(json_object_get(o, no[i])))
			return unsupported(err, no[i], "is not supported");
	if (!json_is_array(msgs) || !json_array_size(msgs))
		return bad(err, "messages", "messages: must be a non-empty array");
	for (size_t i = 0; i < json_array_size(msgs); i++) {
		json_t *tc = json_object_get(json_array_get(msgs, i), "tool_calls");

		n_calls += json_is_array(tc) ? json_array_size(tc) : 0;
	}
	g->msgs = calloc(json_array_size(msgs) + n_calls, sizeof(*g->msgs));
	if (!g->msgs)
		return -ENOMEM;
	for (size_t i = 0; i < json_array_size(msgs); i++) {
		json_t *m = json_array_get(msgs, i);
		json_t *role = json_is_object(m) ? json_object_get(m, "role") : NULL;
		json_t *content = json_is_object(m) ? member(m, "content") : NULL;
		const char *rs = json_is_string(role) ? json_string_value(role) : "";
		enum kvp_http_role ro;
		char at[48];

		snprintf(at, sizeof(at), "messages.%zu", i);
		if (!json_is_object(m))
			return bad(err, "messages", "%s: must be an object", at);
		if (!strcmp(rs, "system") || !strcmp(rs, "developer"))
			ro = KVP_HTTP_ROLE_SYSTEM;
		else if (!strcmp(rs, "user"))
			ro = KVP_HTTP_ROLE_USER;
		else if (!strcmp(rs, "assistant"))
			ro = KVP_HTTP_ROLE_ASSISTANT;
		else if (!strcmp(rs, "tool"))
			ro = KVP_HTTP_ROLE_TOOL;
		else if (!strcmp(rs, "function"))
			return unsupported(
				err, "messages",
				"the deprecated function role is not supported: use tool");
		else
			return bad(err, "messages",
				   "%s.role: must be system, developer, user, assistant or tool",
				   at);
		if (ro == KVP_HTTP_ROLE_ASSISTANT && !is_off(json_object_get(m, "tool_calls"))) {
			r = parse_openai_calls(g, m, content, at, err);
			if (r)
				return r;
			continue;
		}
		if (!content)
			return bad(err, "messages", "%s.content: required", at);
		r = parse_content(new_msg(g, ro), content, at, NULL, "messages", err);
		if (!r && ro == KVP_HTTP_ROLE_ASSISTANT)
			r = openai_reasoning(&g->msgs[g->n_msgs - 1], m, at, err);
		if (!r && ro == KVP_HTTP_ROLE_TOOL)
			r = msg_id(&g->msgs[g->n_msgs - 1], json_object_get(m, "tool_call_id"));
		if (r)
			return r;
	}
	return 0;
}

/*
 * Anthropic's tools ([{name, description, input_schema}], client tools only) in OpenAI's
 * shape, and tool_choice (auto, any, tool + name, none).  A tool's cache_control counts
 * as a breakpoint; tools come first in the prompt, so it marks the end of the first
 * message, where the templates put them.
 */
static int parse_anthropic_tools(struct kvp_http_gen *g, json_t *o, struct bp_state *bp,
				 enum kvp_http_ttl *tools_ttl, struct kvp_http_err *err)
{
	json_t *tools = member(o, "tools"), *tc = member(o, "tool_choice"), *conv;
	const char *named = NULL;
	int r;

	if (tc) {
		json_t *t = json_is_object(tc) ? json_object_get(tc, "type") : NULL;
		const char *s = json_is_string(t) ? json_string_value(t) : "";
		json_t *name = json_object_get(tc, "name");

		if (!strcmp(s, "auto")) {
			g->tool_choice = KVP_HTTP_TOOLS_AUTO;
		} else if (!strcmp(s, "none")) {
			g->tool_choice = KVP_HTTP_TOOLS_NONE;
		} else if (!strcmp(s, "any")) {
			g->tool_choice = KVP_HTTP_TOOLS_REQUIRED;
		} else if (!strcmp(s, "tool") && json_is_string(name)) {
			g->tool_choice = KVP_HTTP_TOOLS_NAMED;
			named = json_string_value(name);
		} else {
			return bad(
				err, "tool_choice",
				"tool_choice.type: must be auto, any, tool (with a name) or none");
		}
	}
	if (tools && !json_is_array(tools))
		return bad(err, "tools", "tools: must be an array");
	conv = json_array();
	if (!conv)
		return -ENOMEM;
	for (size_t i = 0; tools && i < json_array_size(tools); i++) {
		json_t *t = json_array_get(tools, i);
		json_t *type = json_is_object(t) ? member(t, "type") : NULL;
		json_t *name = json_is_object(t) ? json_object_get(t, "name") : NULL;
		json_t *desc = json_is_object(t) ? member(t, "description") : NULL;
		json_t *schema = json_is_object(t) ? member(t, "input_schema") : NULL;
		json_t *f;
		char at[32];

		snprintf(at, sizeof(at), "tools.%zu", i);
		r = -EINVAL;
		if (type && (!json_is_string(type) || strcmp(json_string_value(type), "custom")))
			r = unsupported(err, "tools",
					"only client tools (name, description, input_schema) are "
					"supported, not server tools");
		else if (!json_is_string(name) ||
			 !tool_name_ok(json_string_value(name), json_string_length(name)))
			r = bad(err, "tools", "%s.name: must match ^[a-zA-Z0-9_-]{1,64}$", at);
		else if (!json_is_object(schema))
			r = bad(err, "tools", "%s.input_schema: required (a JSON Schema object)",
				at);
		else if (desc && !json_is_string(desc))
			r = bad(err, "tools", "%s.description: must be a string", at);
		else if (!(r = parse_cache_control(t, at, bp, tools_ttl, err)))
			r = 0;
		if (r) {
			json_decref(conv);
			return r;
		}
		f = json_pack("{s:O}", "name", name);
		if (desc)
			json_object_set(f, "description", desc);
		json_object_set(f, "parameters", schema);
		json_array_append_new(conv,
				      json_pack("{s:s,s:o}", "type", "function", "function", f));
	}
	r = take_tools(g, conv, named, "tool_choice", err);
	json_decref(conv);
	return r;
}

/* A tool_result's content: a string, or text blocks joined by newlines. */
static int tool_result_text(struct kvp_http_msg *m, json_t *c, const char *at,
			    struct kvp_http_err *err)
{
	if (!c)
		return msg_add(m, "", 0, false);
	if (json_is_string(c))
		return msg_add(m, json_string_value(c), json_string_length(c), false);
	if (!json_is_array(c))
		return bad(err, "messages", "%s.content: must be a string or text blocks", at);
	for (size_t k = 0; k < json_array_size(c); k++) {
		json_t *b = json_array_get(c, k);
		json_t *t = json_is_object(b) ? json_object_get(b, "type") : NULL;
		json_t *text = json_is_object(b) ? json_object_get(b, "text") : NULL;
		int r;

		if (!json_is_string(t) || strcmp(json_string_value(t), "text") ||
		    !json_is_string(text))
			return unsupported(err, "messages",
					   "a tool_result's content must be text (no images)");
		r = msg_add(m, json_string_value(text), json_string_length(text), true);
		if (r)
			return r;
	}
	return 0;
}

/*
 * A message whose content has tool_use (assistant) or tool_result (user) blocks: text
 * blocks go into messages of its role, each tool_use is a call of the assistant message
 * before it, each tool_result a tool message, in their order.
 */
static int parse_anthropic_blocks(struct kvp_http_gen *g, json_t *c, bool user, const char *where,
				  struct bp_state *bp, struct kvp_http_err *err)
{
	enum kvp_http_role role = user ? KVP_HTTP_ROLE_USER : KVP_HTTP_ROLE_ASSISTANT;
	struct kvp_http_msg *cur = NULL; /* the text message being filled */
	char at[96];
	int r;

	for (size_t i = 0; i < json_array_size(c); i++) {
		json_t *b = json_array_get(c, i);
		json_t *t = json_is_object(b) ? json_object_get(b, "type") : NULL;
		const char *type = json_is_string(t) ? json_string_value(t) : "";
		enum kvp_http_ttl ttl = KVP_HTTP_TTL_NONE;
		struct kvp_http_msg *m;

		snprintf(at, sizeof(at), "%s.content.%zu", where, i);
		if (!strcmp(type, "text")) {
			json_t *text = json_object_get(b, "text");

			if (!json_is_string(text))
				return bad(err, "messages", "%s.text: must be a string", at);
			if (!cur)
				cur = new_msg(g, role);
			m = cur;
			r = msg_add(m, json_string_value(text), json_string_length(text), true);
		} else if (!strcmp(type, "tool_use") && !user) {
			json_t *name = json_object_get(b, "name"), *input = member(b, "input");

			if (!json_is_string(name) ||
			    !tool_name_ok(json_string_value(name), json_string_length(name)))
				return bad(err, "messages",
					   "%s.name: must match ^[a-zA-Z0-9_-]{1,64}$", at);
			if (input && !json_is_object(input))
				return bad(err, "messages", "%s.input: must be an object", at);
			if (!cur &&
			    !(g->n_msgs &&
			      (g->msgs[g->n_msgs - 1].role == KVP_HTTP_ROLE_TOOL_CALL && i)))
				cur = new_msg(g, KVP_HTTP_ROLE_ASSISTANT);
			if (cur && !cur->text && (r = msg_add(cur, "", 0, false)))
				return r;
			r = add_call(g, json_string_value(name), input, json_object_get(b, "id"));
			m = &g->msgs[g->n_msgs - 1];
			cur = NULL; /* text after a call starts a new message */
			/* a call's message may not take more text: keep appending calls */
		} else if ((!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking")) &&
			   !user) {
			json_t *th = json_object_get(b, "thinking");

			/* redacted: nothing kvpool wrote, nothing to give back */
			if (!strcmp(type, "thinking") && !json_is_string(th))
				return bad(err, "messages", "%s.thinking: must be a string", at);
			if (!cur)
				cur = new_msg(g, role);
			m = cur;
			r = 0;
			if (!strcmp(type, "thinking") && json_string_length(th)) {
				/* in the message's text where it stands: before the answer */
				struct kvp_http_msg tmp = { 0 };

				r = msg_prefix_reasoning(&tmp, json_string_value(th),
							 json_string_length(th));
				if (!r)
					r = msg_add(m, tmp.text, tmp.len, false);
				free(tmp.text);
			}
			if (!r && !m->text)
				r = msg_add(m, "", 0, false);
		} else if (!strcmp(type, "tool_result") && user) {
			m = new_msg(g, KVP_HTTP_ROLE_TOOL);
			r = tool_result_text(m, member(b, "content"), at, err);
			if (!r)
				r = msg_id(m, json_object_get(b, "tool_use_id"));
			cur = NULL;
		} else {
			return unsupported(
				err, "messages",
				user ? "content blocks of user messages must be text or "
				       "tool_result" :
				       "content blocks of assistant messages must be text, "
				       "thinking or tool_use");
		}
		if (r)
			return r;
		r = parse_cache_control(b, at, bp, &ttl, err);
		if (r)
			return r;
		if (ttl)
			m->cache = ttl;
	}
	return 0;
}

static bool has_tool_blocks(json_t *c)
{
	for (size_t i = 0; i < json_array_size(c); i++) {
		json_t *t = json_object_get(json_array_get(c, i), "type");
		const char *s = json_is_string(t) ? json_string_value(t) : "";

		if (!strcmp(s, "tool_use") || !strcmp(s, "tool_result") || !strcmp(s, "thinking") ||
		    !strcmp(s, "redacted_thinking"))
			return true;
	}
	return false;
}

static int parse_messages(struct kvp_http_gen *g, json_t *o, struct kvp_http_err *err)
{
	json_t *msgs = member(o, "messages");
	json_t *sys = member(o, "system");
	json_t *think = member(o, "thinking");
	struct bp_state bp = { 0 };
	enum kvp_http_ttl ttl = KVP_HTTP_TTL_NONE, tools_ttl = KVP_HTTP_TTL_NONE;
	size_t n;
	int r;

	r = parse_common(g, o, "max_tokens", err);
	if (r)
		return r;
	if (!g->model)
		return bad(err, "model", "model: required");
	if (!g->max_tokens && g->api == KVP_HTTP_API_MESSAGES)
		return bad(err, "max_tokens", "max_tokens: required");
	if (g->temperature > 1.0f) /* Anthropic's range is [0, 1] */
		return bad(err, "temperature", "temperature: %g is out of range [0, 1]",
			   g->temperature);
	r = parse_stop(g, o, "stop_sequences", err);
	if (r)
		return r;
	if (member(o, "n")) /* not Anthropic's: a client that sends it expects n answers */
		return unsupported(err, "n", "the Messages API has no n (one answer per request)");
	r = parse_output_config(g, o, err); /* before the tools: a forced call refuses it */
	if (r)
		return r;
	/* breakpoints are counted and ordered as the prompt is laid out: tools, system,
	 * messages */
	r = parse_anthropic_tools(g, o, &bp, &tools_ttl, err);
	if (r)
		return r;
	/* Anthropic's default is no thinking: the reasoning section off where there is one */
	g->thinking = KVP_HTTP_THINK_OFF;
	if (think) {
		json_t *t = json_is_object(think) ? json_object_get(think, "type") : NULL;
		const char *ts = json_is_string(t) ? json_string_value(t) : "";
		long long x;
		bool given;

		if (!strcmp(ts, "enabled")) {
			/* enforced by kvpoold: </think> forced once the section holds it */
			r = get_int(think, "budget_tokens", 1, UINT32_MAX, &given, &x, err);
			if (r)
				return r;
			if (!given)
				return bad(err, "thinking", "thinking.budget_tokens: required");
			g->thinking = KVP_HTTP_THINK_ON;
			g->think_budget = (uint32_t)x;
		} else if (!strcmp(ts, "adaptive") || !strcmp(ts, "between_tools")) {
			/* the model decides: the template's default (Qwen3 reasons), and a
			 * template without a reasoning section is no refusal, it just has none */
			g->thinking = KVP_HTTP_THINK_DEFAULT;
		} else if (strcmp(ts, "disabled")) {
			return bad(err, "thinking",
				   "thinking.type: must be \"enabled\", \"adaptive\", "
				   "\"between_tools\" or \"disabled\"");
		}
		t = member(think, "display");
		ts = json_is_string(t) ? json_string_value(t) : "";
		if (t && strcmp(ts, "summarized") && strcmp(ts, "omitted"))
			return bad(err, "thinking",
				   "thinking.display: must be \"summarized\" or \"omitted\"");
		g->think_omit = t && !strcmp(ts, "omitted");
	}
	if (!json_is_array(msgs) || !json_array_size(msgs))
		return bad(err, "messages", "messages: must be a non-empty array");
	n = sys ? 1 : 0;
	for (size_t i = 0; i < json_array_size(msgs); i++) {
		json_t *c = json_object_get(json_array_get(msgs, i), "content");

		n += json_is_array(c) && json_array_size(c) ? json_array_size(c) + 1 : 1;
	}
	g->msgs = calloc(n, sizeof(*g->msgs));
	if (!g->msgs)
		return -ENOMEM;
	/* breakpoints are counted and ordered as the prompt is laid out: system, messages */
	if (sys) {
		struct kvp_http_msg *m = new_msg(g, KVP_HTTP_ROLE_SYSTEM);

		if (json_is_string(sys))
			r = msg_add(m, json_string_value(sys), json_string_length(sys), false);
		else if (json_is_array(sys) && json_array_size(sys))
			r = parse_content(m, sys, "system", &bp, "system", err);
		else
			r = bad(err, "system",
				"system: must be a string or an array of text blocks");
		if (r)
			return r;
	}
	for (size_t i = 0; i < json_array_size(msgs); i++) {
		json_t *m = json_array_get(msgs, i);
		json_t *role = json_is_object(m) ? json_object_get(m, "role") : NULL;
		json_t *content = json_is_object(m) ? member(m, "content") : NULL;
		const char *rs = json_is_string(role) ? json_string_value(role) : "";
		char at[48];

		snprintf(at, sizeof(at), "messages.%zu", i);
		if (!json_is_object(m))
			return bad(err, "messages", "%s: must be an object", at);
		if (strcmp(rs, "user") && strcmp(rs, "assistant"))
			return bad(err, "messages", "%s.role: must be user or assistant", at);
		if (!content)
			return bad(err, "messages", "%s.content: required", at);
		if (json_is_array(content) && has_tool_blocks(content))
			r = parse_anthropic_blocks(g, content, !strcmp(rs, "user"), at, &bp, err);
		else
			r = parse_content(new_msg(g, strcmp(rs, "user") ? KVP_HTTP_ROLE_ASSISTANT :
									  KVP_HTTP_ROLE_USER),
					  content, at, &bp, "messages", err);
		if (r)
			return r;
	}
	if (tools_ttl && !g->msgs[0].cache)
		g->msgs[0].cache = tools_ttl;
	/* a top-level cache_control marks the end of the prompt */
	r = parse_cache_control(o, "request", &bp, &ttl, err);
	if (r)
		return r;
	if (ttl)
		g->msgs[g->n_msgs - 1].cache = ttl;
	g->n_breakpoints = bp.n;
	return 0;
}

/*
 * vLLM's /tokenize: {"prompt": text} or {"messages": [...]} (the chat form, rendered as a
 * chat completion would be, with the generation prompt); add_special_tokens (default
 * true for a prompt) says whether the tokenizer adds its BOS.
 */
static int parse_tokenize(struct kvp_http_gen *g, json_t *o, uint32_t n_vocab,
			  struct kvp_http_err *err)
{
	bool special = true, gen_prompt = true;
	const char *s;
	size_t n;
	int r;

	if (member(o, "messages")) {
		r = parse_chat(g, o, n_vocab, err);
		if (!r)
			r = get_bool(o, "add_generation_prompt", &gen_prompt, err);
		if (!r && !gen_prompt)
			r = unsupported(err, "add_generation_prompt",
					"the chat form is rendered with the generation prompt, as "
					"a chat completion is");
		if (!r && !is_off(json_object_get(o, "continue_final_message")))
			r = unsupported(err, "continue_final_message",
					"continuing the final message is not supported");
		return r;
	}
	r = get_str(o, "model", &s, &n, err);
	if (r)
		return r;
	if (s && !(g->model = dup_n(s, n)))
		return -ENOMEM;
	r = get_bool(o, "add_special_tokens", &special, err);
	if (r)
		return r;
	g->no_special = !special;
	if (!is_off(json_object_get(o, "return_token_strs")))
		return unsupported(err, "return_token_strs", "token strings are not returned");
	r = parse_prompt(g, o, n_vocab, err);
	if (!r && g->tokens)
		r = bad(err, "prompt", "prompt: must be text");
	return r;
}

/* ------------------------------------------------------------ entry points */

int kvp_http_parse(struct kvp_http_gen *g, enum kvp_http_api api, const char *body, size_t len,
		   uint32_t n_vocab, struct kvp_http_err *err)
{
	json_error_t je;
	json_t *o;
	const char *s;
	size_t n;
	int r;

	*g = (struct kvp_http_gen){ .api = api };
	o = json_loadb(body, len, 0, &je);
	if (!o)
		return bad(err, NULL, "the body is not valid JSON: %s (line %d, column %d)",
			   je.text, je.line, je.column);
	if (!json_is_object(o)) {
		r = bad(err, NULL, "the body must be a JSON object");
		goto out;
	}
	switch (api) {
	case KVP_HTTP_API_COMPLETIONS:
		r = parse_common(g, o, "max_tokens", err);
		if (!r)
			r = parse_openai_extras(g, o, n_vocab, err);
		if (!r) /* vLLM's: structured output on completions too */
			r = parse_response_format(g, o, err);
		if (!r && !is_off(json_object_get(o, "suffix")))
			r = unsupported(err, "suffix", "suffix is not supported");
		if (!r)
			r = parse_prompt(g, o, n_vocab, err);
		break;
	case KVP_HTTP_API_CHAT:
		r = parse_chat(g, o, n_vocab, err);
		break;
	case KVP_HTTP_API_MESSAGES:
	case KVP_HTTP_API_COUNT_TOKENS:
		r = parse_messages(g, o, err);
		break;
	case KVP_HTTP_API_TOKENIZE:
		r = parse_tokenize(g, o, n_vocab, err);
		break;
	case KVP_HTTP_API_DETOKENIZE: {
		json_t *t = member(o, "tokens");

		r = get_str(o, "model", &s, &n, err);
		if (!r && s && !(g->model = dup_n(s, n)))
			r = -ENOMEM;
		if (!r && !json_is_array(t))
			r = bad(err, "tokens", "tokens: must be an array of token ids");
		if (!r)
			r = parse_ids(g, t, "tokens", n_vocab, err);
		break;
	}
	default:
		r = bad(err, NULL, "unknown API");
		break;
	}
out:
	json_decref(o);
	return r;
}

void kvp_http_gen_deinit(struct kvp_http_gen *g)
{
	free(g->model);
	free(g->text);
	free(g->tokens);
	for (size_t i = 0; i < g->n_msgs; i++) {
		free(g->msgs[i].text);
		free(g->msgs[i].id);
	}
	free(g->msgs);
	for (size_t i = 0; i < g->n_stop; i++)
		free(g->stop[i]);
	free(g->cache_salt);
	free(g->schema);
	free(g->bias_ids);
	free(g->bias);
	free(g->tools);
	for (size_t i = 0; i < g->n_tools; i++)
		free(g->tool_names[i]);
	free(g->tool_names);
	*g = (struct kvp_http_gen){ 0 };
}
