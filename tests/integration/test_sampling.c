/* SPDX-License-Identifier: MIT */
/*
 * test_sampling.c - the sampling section against a real kvpoold (the tiny model: a
 * byte-level vocabulary with random weights, so the grammar, not the model, makes the
 * text JSON):
 *  - json_schema and json_object: every seeded sample at temperature 1 parses and
 *    matches the schema, and ends by itself (EOS allowed only once the value is whole);
 *  - a schema keyword not supported is refused with its name, the connection kept;
 *  - logprobs: the first position's equal the log-softmax of the reference forward
 *    pass's logits (compute/ref.h), top-k in order; greedy picks the top one;
 *  - logit_bias -100 on the greedy token bans it; presence penalty changes a repetitive
 *    greedy run;
 *  - n = 3 continuations under a grammar, each equal to a run alone with seed + i.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/model.h"
#include "compute/ref.h"
#include "kvpool/kvpool.h"
#include "tests/integration/kvpd.h"

#define MAXT 600

struct fixture {
	struct kvpd d; /* first: kvpd_teardown() */
};

static int setup(void **state)
{
	const char *args[] = { "--pool-size", "64M", "--threads", "1", NULL };
	struct fixture *f = calloc(1, sizeof(*f));

	*state = f;
	if (!f)
		return -1;
	return kvpd_setup(&f->d, "tiny", args);
}

struct result {
	int status;
	char msg[512];
	int32_t toks[3][MAXT];
	uint32_t n_toks[3];
	char text[3][4 * MAXT];
	size_t text_len[3];
	float lp[MAXT];
	int32_t top_ids[MAXT][KVP_TOP_LOGPROBS_MAX];
	float top_lp[MAXT][KVP_TOP_LOGPROBS_MAX];
	uint32_t n_top;
	uint32_t n_lp;
	struct kvp_usage u;
};

static void run(struct fixture *f, const char *prompt, const struct kvp_client_sampling *sp,
		uint32_t n, float temp, uint64_t seed, uint32_t max_new, struct result *res)
{
	struct kvp_client_prompt pr = { .text = prompt, .text_len = strlen(prompt) };
	struct kvp_cache_ctl cc = { .n = n };
	struct kvp_client_params p;
	struct kvp_client_event ev;
	struct kvp_client *c;
	uint64_t id;
	int r;

	memset(res, 0, sizeof(*res));
	assert_int_equal(kvp_client_connect(&c, f->d.sock), 0);
	if (n > 1)
		assert_int_equal(kvp_client_set_cache(c, &cc), 0);
	assert_int_equal(kvp_client_set_sampling(c, sp), 0);
	kvp_client_params_init(&p);
	p.max_new_tokens = max_new;
	p.temperature = temp;
	p.seed = seed;
	p.no_cache = true;
	r = kvp_client_submit(c, &pr, &p, &id);
	assert_int_equal(r, 0);
	for (;;) {
		assert_int_equal(kvp_client_next(c, &ev), 0);
		if (ev.type == KVP_EVENT_TOKEN) {
			int k = kvp_client_event_cont(c);

			k = k < 0 ? 0 : k;
			for (uint32_t i = 0; i < ev.n_tokens && res->n_toks[k] < MAXT; i++) {
				const struct kvp_logprob *top;
				uint32_t nt;
				float lp;

				if (!kvp_client_event_logprob(c, i, &lp, &top, &nt) &&
				    res->n_lp < MAXT && !k) {
					res->lp[res->n_lp] = lp;
					res->n_top = nt;
					for (uint32_t j = 0; j < nt; j++) {
						res->top_ids[res->n_lp][j] = top[j].id;
						res->top_lp[res->n_lp][j] = top[j].logprob;
					}
					res->n_lp++;
				}
				res->toks[k][res->n_toks[k]++] = ev.tokens[i];
			}
			assert_true(res->text_len[k] + ev.text_len < sizeof(res->text[k]));
			memcpy(res->text[k] + res->text_len[k], ev.text, ev.text_len);
			res->text_len[k] += ev.text_len;
		} else if (ev.type == KVP_EVENT_DONE) {
			res->u = ev.usage;
			res->status = ev.status;
			break;
		} else if (ev.type == KVP_EVENT_ERROR) {
			res->status = ev.status;
			snprintf(res->msg, sizeof(res->msg), "%s", ev.message);
			break;
		}
	}
	/* the connection outlives a refused request */
	if (res->status != KVP_OK) {
		struct kvp_usage u;

		assert_int_equal(kvp_client_set_sampling(c, NULL), 0);
		p.max_new_tokens = 1;
		assert_int_equal(kvp_client_generate(c, &pr, &p, NULL, NULL, &u), 0);
	}
	kvp_client_close(c);
}

static const char *const schema =
	"{\"type\":\"object\",\"properties\":{"
	"\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":12},"
	"\"age\":{\"type\":\"integer\"},"
	"\"score\":{\"type\":\"number\"},"
	"\"kind\":{\"enum\":[\"cat\",\"dog\",7,null]},"
	"\"ok\":{\"type\":\"boolean\"},"
	"\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":4},"
	"\"minItems\":1,\"maxItems\":3},"
	"\"nick\":{\"type\":[\"string\",\"null\"],\"maxLength\":5}},"
	"\"required\":[\"name\",\"age\",\"kind\",\"tags\"],\"additionalProperties\":false}";

/* @j against the schema above: what JSON Schema says, checked by hand */
static void check_person(json_t *j, const char *text)
{
	static const char *const known[] = { "name", "age", "score", "kind", "ok", "tags", "nick" };
	json_t *v, *kind, *tags;
	const char *k;

	if (!json_is_object(j))
		fail_msg("not an object: %s", text);
	json_object_foreach(j, k, v)
	{
		bool ok = false;

		for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
			ok |= !strcmp(k, known[i]);
		if (!ok)
			fail_msg("property %s: %s", k, text);
	}
	v = json_object_get(j, "name");
	assert_true(json_is_string(v) && json_string_length(v) >= 1);
	assert_true(json_is_integer(json_object_get(j, "age")));
	if (json_object_get(j, "score"))
		assert_true(json_is_number(json_object_get(j, "score")));
	kind = json_object_get(j, "kind");
	assert_true(kind && (json_is_null(kind) ||
			     (json_is_integer(kind) && json_integer_value(kind) == 7) ||
			     (json_is_string(kind) && (!strcmp(json_string_value(kind), "cat") ||
						       !strcmp(json_string_value(kind), "dog")))));
	if (json_object_get(j, "ok"))
		assert_true(json_is_boolean(json_object_get(j, "ok")));
	tags = json_object_get(j, "tags");
	assert_true(json_is_array(tags) && json_array_size(tags) >= 1 &&
		    json_array_size(tags) <= 3);
	for (size_t i = 0; i < json_array_size(tags); i++)
		assert_true(json_is_string(json_array_get(tags, i)));
	v = json_object_get(j, "nick");
	if (v)
		assert_true(json_is_null(v) || json_is_string(v));
}

static void test_json_schema_samples_valid(void **state)
{
	struct fixture *f = *state;
	struct kvp_client_sampling sp = { .grammar = KVP_GRAMMAR_JSON_SCHEMA,
					  .schema = schema,
					  .schema_len = strlen(schema) };
	static struct result r;

	for (uint64_t seed = 1; seed <= 12; seed++) {
		json_t *j;

		run(f, "Describe a pet as JSON:", &sp, 1, 1.0f, seed, MAXT, &r);
		assert_int_equal(r.status, KVP_OK);
		if (r.n_toks[0] >= MAXT)
			fail_msg("%u tokens, last %d %d: %.*s", r.n_toks[0], r.toks[0][MAXT - 2],
				 r.toks[0][MAXT - 1], (int)r.text_len[0], r.text[0]);
		r.text[0][r.text_len[0]] = 0;
		j = json_loadb(r.text[0], r.text_len[0], 0, NULL);
		if (!j)
			fail_msg("seed %llu: not JSON: %s", (unsigned long long)seed, r.text[0]);
		check_person(j, r.text[0]);
		json_decref(j);
	}
}

static void test_json_object_samples_valid(void **state)
{
	struct fixture *f = *state;
	struct kvp_client_sampling sp = { .grammar = KVP_GRAMMAR_JSON_OBJECT };
	static struct result r;

	for (uint64_t seed = 1; seed <= 6; seed++) {
		json_t *j;

		run(f, "{", &sp, 1, 1.0f, seed, 200, &r);
		assert_int_equal(r.status, KVP_OK);
		if (r.n_toks[0] == 200) /* any object may go on and on: a cut one is not JSON */
			continue;
		j = json_loadb(r.text[0], r.text_len[0], 0, NULL);
		if (!j || !json_is_object(j))
			fail_msg("seed %llu: %.*s", (unsigned long long)seed, (int)r.text_len[0],
				 r.text[0]);
		json_decref(j);
	}
}

static void test_unsupported_keyword_refused(void **state)
{
	struct fixture *f = *state;
	const char *bad = "{\"type\":\"string\",\"pattern\":\"^a+$\"}";
	struct kvp_client_sampling sp = { .grammar = KVP_GRAMMAR_JSON_SCHEMA,
					  .schema = bad,
					  .schema_len = strlen(bad) };
	int32_t big = 1 << 30;
	float b = 5;
	static struct result r;

	run(f, "x", &sp, 1, 0, 0, 4, &r);
	assert_int_equal(r.status, KVP_E_INVALID);
	assert_non_null(strstr(r.msg, "\"pattern\""));
	sp = (struct kvp_client_sampling){ .bias_ids = &big, .bias = &b, .n_bias = 1 };
	run(f, "x", &sp, 1, 0, 0, 4, &r);
	assert_int_equal(r.status, KVP_E_INVALID);
	assert_non_null(strstr(r.msg, "logit_bias"));
}

static void test_logprobs_match_reference(void **state)
{
	struct fixture *f = *state;
	struct kvp_client_sampling sp = { .logprobs = true, .top_logprobs = 5 };
	const char *prompt = "The reference pass";
	static struct result r;
	struct kvp_model *m;
	int32_t ids[64];
	float *logits;
	uint32_t n_vocab, n = 0;
	double mx = -INFINITY, sum = 0, lse;

	run(f, prompt, &sp, 1, 0, 0, 8, &r);
	assert_int_equal(r.status, KVP_OK);
	assert_int_equal(r.n_lp, r.n_toks[0]);
	assert_int_equal(r.n_top, 5);
	for (uint32_t i = 0; i < r.n_lp; i++) {
		assert_int_equal(r.top_ids[i][0], r.toks[0][i]); /* greedy: the most likely */
		assert_true(fabsf(r.top_lp[i][0] - r.lp[i]) < 1e-6f);
		for (uint32_t k = 1; k < r.n_top; k++)
			assert_true(r.top_lp[i][k] <= r.top_lp[i][k - 1]);
		double mass = 0;

		for (uint32_t k = 0; k < r.n_top; k++)
			mass += exp(r.top_lp[i][k]);
		assert_true(mass <= 1.0 + 1e-4 && r.lp[i] <= 0);
	}
	/* the first position against the reference forward pass over the prompt's ids */
	{
		int32_t *pids;
		size_t np;
		struct kvp_client *c;

		assert_int_equal(kvp_client_connect(&c, f->d.sock), 0);
		assert_int_equal(kvp_client_tokenize(c, prompt, strlen(prompt), 0, &pids, &np), 0);
		kvp_client_close(c);
		assert_true(np > 0 && np <= 64);
		memcpy(ids, pids, np * sizeof(int32_t));
		n = (uint32_t)np;
		free(pids);
	}
	assert_int_equal(kvp_model_open(&m, f->d.model, NULL, 0), 0);
	n_vocab = kvp_model_hparams(m)->n_vocab;
	logits = malloc((size_t)n * n_vocab * sizeof(float));
	assert_non_null(logits);
	assert_int_equal(kvp_ref_forward(m, ids, n, logits), 0);
	const float *last = logits + (size_t)(n - 1) * n_vocab;

	for (uint32_t i = 0; i < n_vocab; i++)
		mx = last[i] > mx ? last[i] : mx;
	for (uint32_t i = 0; i < n_vocab; i++)
		sum += exp(last[i] - mx);
	lse = mx + log(sum);
	for (uint32_t k = 0; k < r.n_top; k++) {
		double want = last[r.top_ids[0][k]] - lse;

		if (fabs(r.top_lp[0][k] - want) > 2e-3)
			fail_msg("top %u: id %d logprob %f, reference %f", k, r.top_ids[0][k],
				 r.top_lp[0][k], want);
	}
	/* nothing outside the top 5 is more likely than the 5th (reference, with margin) */
	for (uint32_t i = 0; i < n_vocab; i++) {
		bool in = false;

		for (uint32_t k = 0; k < r.n_top; k++)
			in |= r.top_ids[0][k] == (int32_t)i;
		assert_true(in || last[i] - lse <= r.top_lp[0][r.n_top - 1] + 2e-3);
	}
	free(logits);
	kvp_model_close(m);
}

static void test_bias_and_penalty(void **state)
{
	struct fixture *f = *state;
	static struct result plain, banned, pen;
	struct kvp_client_sampling sp = { 0 };
	float b = -100;

	run(f, "abc", NULL, 1, 0, 0, 16, &plain);
	assert_int_equal(plain.status, KVP_OK);
	sp.bias_ids = &plain.toks[0][0];
	sp.bias = &b;
	sp.n_bias = 1;
	run(f, "abc", &sp, 1, 0, 0, 16, &banned);
	assert_int_equal(banned.status, KVP_OK);
	for (uint32_t i = 0; i < banned.n_toks[0]; i++)
		assert_int_not_equal(banned.toks[0][i], plain.toks[0][0]);
	/* a presence penalty of 2 makes greedy avoid what it wrote: the run changes */
	sp = (struct kvp_client_sampling){ .presence_penalty = 2 };
	run(f, "abc", &sp, 1, 0, 0, 16, &pen);
	assert_int_equal(pen.status, KVP_OK);
	assert_int_equal(pen.n_toks[0], plain.n_toks[0]);
	assert_memory_not_equal(pen.toks[0], plain.toks[0], plain.n_toks[0] * sizeof(int32_t));
}

static void test_parallel_with_grammar_equals_alone(void **state)
{
	struct fixture *f = *state;
	struct kvp_client_sampling sp = { .grammar = KVP_GRAMMAR_JSON_SCHEMA,
					  .schema = schema,
					  .schema_len = strlen(schema),
					  .logprobs = true };
	static struct result par, alone;

	run(f, "pets:", &sp, 3, 1.0f, 500, MAXT, &par);
	assert_int_equal(par.status, KVP_OK);
	for (uint32_t i = 0; i < 3; i++) {
		run(f, "pets:", &sp, 1, 1.0f, 500 + i, MAXT, &alone);
		assert_int_equal(alone.status, KVP_OK);
		assert_int_equal(par.n_toks[i], alone.n_toks[0]);
		assert_memory_equal(par.toks[i], alone.toks[0], alone.n_toks[0] * sizeof(int32_t));
	}
	assert_true(par.n_toks[0] != par.n_toks[1] || par.n_toks[0] != par.n_toks[2] ||
		    memcmp(par.toks[0], par.toks[1], par.n_toks[0] * sizeof(int32_t)));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json_schema_samples_valid),
		cmocka_unit_test(test_json_object_samples_valid),
		cmocka_unit_test(test_unsupported_keyword_refused),
		cmocka_unit_test(test_logprobs_match_reference),
		cmocka_unit_test(test_bias_and_penalty),
		cmocka_unit_test(test_parallel_with_grammar_equals_alone),
	};

	return cmocka_run_group_tests_name("sampling", tests, setup, kvpd_teardown);
}
