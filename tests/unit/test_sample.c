/* SPDX-License-Identifier: MIT */
/*
 * test_sample.c - greedy, temperature, top-k, top-p and seeding of the sampler; its extras
 * (logit bias, penalties, log-probabilities, a grammar) and fresh copies for n > 1.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "compute/grammar.h"
#include "compute/sample.h"

static void test_greedy_is_argmax(void **state)
{
	/* argmax, lowest id on ties, NaN never wins; temperature 0 is greedy */
	float l[6] = { 1, 3, NAN, 3, -INFINITY, 2 };
	float n[3] = { NAN, NAN, 0.5f };
	struct kvp_sampler *s;

	assert_int_equal(kvp_sample_greedy(l, 6), 1);
	assert_int_equal(kvp_sample_greedy(n, 3), 2);
	assert_int_equal(kvp_sampler_new(&s, 6, &(struct kvp_sample_params){ .temperature = 0 }),
			 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(kvp_sampler_sample(s, l), 1);
	kvp_sampler_free(s);
}

static void draw(const float *l, uint32_t n, struct kvp_sample_params p, int k, int *count)
{
	struct kvp_sampler *s;

	assert_int_equal(kvp_sampler_new(&s, n, &p), 0);
	for (int i = 0; i < k; i++) {
		int32_t id = kvp_sampler_sample(s, l);

		assert_true(id >= 0 && (uint32_t)id < n);
		count[id]++;
	}
	kvp_sampler_free(s);
}

static void test_frequencies_follow_softmax(void **state)
{
	/* at T = 1 the draw frequencies are the softmax probabilities (+-0.02 over 20000) */
	float l[4] = { logf(0.1f), logf(0.2f), logf(0.3f), logf(0.4f) };
	int c[4] = { 0 };

	draw(l, 4, (struct kvp_sample_params){ .temperature = 1, .top_p = 1, .seed = 5 }, 20000, c);
	for (int i = 0; i < 4; i++)
		assert_true(fabs(c[i] / 20000.0 - 0.1 * (i + 1)) < 0.02);
}

static void test_seed_reproducible(void **state)
{
	/* the same seed gives the same draws; another seed other draws */
	float l[16];
	struct kvp_sampler *a, *b, *c;
	struct kvp_sample_params p = { .temperature = 1.0f, .top_p = 1, .seed = 42 };
	int same = 1, diff = 0;

	for (int i = 0; i < 16; i++)
		l[i] = (float)(i % 5);
	assert_int_equal(kvp_sampler_new(&a, 16, &p), 0);
	assert_int_equal(kvp_sampler_new(&b, 16, &p), 0);
	p.seed = 43;
	assert_int_equal(kvp_sampler_new(&c, 16, &p), 0);
	for (int i = 0; i < 200; i++) {
		int32_t x = kvp_sampler_sample(a, l), y = kvp_sampler_sample(b, l);

		same &= x == y;
		diff += x != kvp_sampler_sample(c, l);
	}
	assert_true(same);
	assert_true(diff > 20);
	kvp_sampler_free(a);
	kvp_sampler_free(b);
	kvp_sampler_free(c);
}

static void test_top_k(void **state)
{
	/* top-k 3 only ever draws the 3 largest, each of them; top-k 1 is greedy */
	float l[100];
	int c[100] = { 0 }, g[100] = { 0 };

	for (int i = 0; i < 100; i++)
		l[i] = (float)((i * 37) % 100) / 50.0f; /* max at 27 (99), then 54 (98), 81 (97) */
	draw(l, 100, (struct kvp_sample_params){ .temperature = 5, .top_k = 3, .seed = 1 }, 3000,
	     c);
	for (int i = 0; i < 100; i++) {
		if (i == 81 || i == 54 || i == 27)
			assert_true(c[i] > 500);
		else
			assert_int_equal(c[i], 0);
	}
	draw(l, 100, (struct kvp_sample_params){ .temperature = 5, .top_k = 1, .seed = 1 }, 100, g);
	assert_int_equal(g[27], 100);
}

static void test_top_p(void **state)
{
	/* p = 0.7 over {0.5, 0.3, 0.15, 0.05} keeps the first two, renormalised to 5/8 : 3/8 */
	float l[4] = { logf(0.05f), logf(0.5f), logf(0.15f), logf(0.3f) };
	int c[4] = { 0 }, t[4] = { 0 };

	draw(l, 4, (struct kvp_sample_params){ .temperature = 1, .top_p = 0.7f, .seed = 9 }, 8000,
	     c);
	assert_int_equal(c[0], 0);
	assert_int_equal(c[2], 0);
	assert_true(fabs(c[1] / 8000.0 - 0.625) < 0.03);
	/* a tiny p keeps only the most likely token */
	draw(l, 4, (struct kvp_sample_params){ .temperature = 1, .top_p = 0.01f, .seed = 9 }, 100,
	     t);
	assert_int_equal(t[1], 100);
}

static void test_extreme_temperatures_and_logits(void **state)
{
	/*
	 * a temperature so small that logits / T overflows still picks the argmax (no NaN
	 * mass); a huge one spreads the draws over every token; a +inf logit wins
	 */
	float l[5] = { 1.0f, 30.0f, -5.0f, 29.999f, 12.0f };
	float inf[4] = { 0.0f, INFINITY, 1.0f, NAN };
	int c[5] = { 0 }, h[5] = { 0 }, g[4] = { 0 };

	draw(l, 5, (struct kvp_sample_params){ .temperature = 1e-38f, .top_p = 1, .seed = 3 }, 200,
	     c);
	assert_int_equal(c[1], 200);
	draw(l, 5, (struct kvp_sample_params){ .temperature = 1e30f, .top_p = 0.9f, .seed = 3 },
	     2000, h);
	for (int i = 0; i < 5; i++)
		assert_true(h[i] > 200);
	draw(inf, 4, (struct kvp_sample_params){ .temperature = 1, .top_p = 1, .seed = 3 }, 50, g);
	assert_int_equal(g[1], 50);
}

static void test_bias_and_penalties(void **state)
{
	/* -100 bans the argmax, +100 forces another; a frequency penalty moves greedy on */
	float l[4] = { 3, 2, 1, 0 };
	int32_t ids[2] = { 0, 3 };
	float b[2] = { -100, 100 };
	struct kvp_sampler *s;

	assert_int_equal(kvp_sampler_new(&s, 4, &(struct kvp_sample_params){ 0 }), 0);
	assert_int_equal(kvp_sampler_set_extra(s, &(struct kvp_sample_extra){ .bias_ids = ids,
									      .bias = b,
									      .n_bias = 2 }),
			 0);
	assert_int_equal(kvp_sampler_sample(s, l), 3);
	kvp_sampler_free(s);

	float eq[3] = { 1, 1, 0.5f };

	assert_int_equal(kvp_sampler_new(&s, 3, &(struct kvp_sample_params){ 0 }), 0);
	assert_int_equal(kvp_sampler_set_extra(s, &(struct kvp_sample_extra){ .frequency = 0.3f }),
			 0);
	assert_int_equal(kvp_sampler_sample(s, eq), 0); /* tie: lowest id */
	assert_int_equal(kvp_sampler_sample(s, eq), 1); /* 0 is at 0.7 now */
	assert_int_equal(kvp_sampler_sample(s, eq), 0); /* 0.7, 0.7, 0.5 */
	assert_int_equal(kvp_sampler_sample(s, eq), 1); /* 0.4, 0.7, 0.5 */
	assert_int_equal(kvp_sampler_sample(s, eq), 2); /* 0.4, 0.4, 0.5 */
	kvp_sampler_free(s);

	/* presence: once, whatever the count */
	assert_int_equal(kvp_sampler_new(&s, 3, &(struct kvp_sample_params){ 0 }), 0);
	assert_int_equal(kvp_sampler_set_extra(s, &(struct kvp_sample_extra){ .presence = 0.2f }),
			 0);
	assert_int_equal(kvp_sampler_sample(s, eq), 0);
	assert_int_equal(kvp_sampler_sample(s, eq), 1);
	assert_int_equal(kvp_sampler_sample(s, eq), 0); /* 0.8 vs 0.8 vs 0.5: lowest id */
	kvp_sampler_free(s);

	/* refused: an id out of range, a NaN bias, too many top_logprobs */
	int32_t bad_id = 4;
	float nan_b = NAN;

	assert_int_equal(kvp_sampler_new(&s, 4, &(struct kvp_sample_params){ 0 }), 0);
	assert_int_equal(kvp_sampler_set_extra(s, &(struct kvp_sample_extra){ .bias_ids = &bad_id,
									      .bias = b,
									      .n_bias = 1 }),
			 -EINVAL);
	assert_int_equal(kvp_sampler_set_extra(s, &(struct kvp_sample_extra){ .bias_ids = ids,
									      .bias = &nan_b,
									      .n_bias = 1 }),
			 -EINVAL);
	assert_int_equal(kvp_sampler_set_extra(s,
					       &(struct kvp_sample_extra){
						       .top_logprobs = KVP_SAMPLE_TOP_LOGPROBS_MAX +
								       1 }),
			 -EINVAL);
	kvp_sampler_free(s);
}

static void test_logprobs(void **state)
{
	/* the chosen one's and the top 5 are the log-softmax of the logits, in order */
	enum { N = 50 };
	float l[N];
	uint64_t x = 7;
	struct kvp_sampler *s;
	const struct kvp_sample_logprob *lp;

	for (int i = 0; i < N; i++) {
		x = x * 6364136223846793005ull + 1;
		l[i] = (float)(x >> 40) / (float)(1 << 20);
	}
	assert_int_equal(kvp_sampler_new(&s, N,
					 &(struct kvp_sample_params){ .temperature = 0.7f,
								      .seed = 3 }),
			 0);
	assert_null(kvp_sampler_logprob(s));
	assert_int_equal(kvp_sampler_set_extra(s, &(struct kvp_sample_extra){ .logprobs = true,
									      .top_logprobs = 5 }),
			 0);
	for (int k = 0; k < 20; k++) {
		int32_t id = kvp_sampler_sample(s, l);
		double mx = -1e9, sum = 0;

		for (int i = 0; i < N; i++)
			mx = l[i] > mx ? l[i] : mx;
		for (int i = 0; i < N; i++)
			sum += exp(l[i] - mx);
		lp = kvp_sampler_logprob(s);
		assert_non_null(lp);
		assert_true(fabs(lp->lp - (l[id] - mx - log(sum))) < 1e-5);
		assert_int_equal(lp->n_top, 5);
		assert_int_equal(lp->top_ids[0], kvp_sample_greedy(l, N));
		for (uint32_t i = 0; i < lp->n_top; i++) {
			assert_true(fabs(lp->top_lp[i] - (l[lp->top_ids[i]] - mx - log(sum))) <
				    1e-5);
			if (i)
				assert_true(lp->top_lp[i] <= lp->top_lp[i - 1]);
		}
		/* nothing outside the top 5 is more likely than the 5th */
		for (int i = 0; i < N; i++) {
			bool top = false;

			for (uint32_t j = 0; j < lp->n_top; j++)
				top |= lp->top_ids[j] == i;
			assert_true(top || l[i] <= l[lp->top_ids[4]]);
		}
	}
	kvp_sampler_free(s);
}

/*
 * A grammar over a byte vocabulary plus an EOS: whatever the (random) logits, the text is
 * JSON of the schema and EOS comes only when it is whole; a copy from new_like with the
 * same seed gives the same text.
 */
static void sample_json(const struct kvp_grammar *g, const struct kvp_grammar_vocab *v,
			struct kvp_sampler *s, char *text, size_t cap, size_t *len)
{
	enum { N = 257 };
	float l[N];
	uint64_t x = 11;

	*len = 0;
	for (;;) {
		int32_t id;

		for (int i = 0; i < N; i++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			l[i] = (float)(x >> 40) / (float)(1 << 22);
		}
		l[N - 1] += 2; /* EOS is keen: it must wait for the value to be whole */
		id = kvp_sampler_sample(s, l);
		if (id == N - 1)
			break;
		assert_true(*len < cap - 1);
		text[(*len)++] = (char)id;
	}
	text[*len] = 0;
}

static void test_grammar_in_sampler(void **state)
{
	enum { N = 257 };
	static char bytes[256];
	const char *p[N];
	size_t pl[N];
	int32_t eos = N - 1;
	const char *schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\","
			     "\"maxLength\":5},\"b\":{\"enum\":[1,2]}},\"required\":[\"a\",\"b\"],"
			     "\"additionalProperties\":false}";
	struct kvp_grammar_vocab *v;
	struct kvp_grammar *g;
	char err[128], t1[4096], t2[4096];
	size_t n1, n2;

	for (int i = 0; i < 256; i++) {
		bytes[i] = (char)i;
		p[i] = &bytes[i];
		pl[i] = 1;
	}
	p[eos] = NULL;
	pl[eos] = 0;
	assert_int_equal(kvp_grammar_vocab_new(&v, N, p, pl), 0);
	assert_int_equal(kvp_grammar_compile(&g, schema, strlen(schema), err, sizeof(err)), 0);
	for (uint64_t seed = 1; seed <= 20; seed++) {
		struct kvp_sampler *s, *c;
		json_t *j;

		assert_int_equal(kvp_sampler_new(&s, N,
						 &(struct kvp_sample_params){ .temperature = 1,
									      .seed = seed }),
				 0);
		assert_int_equal(kvp_sampler_set_extra(s, &(struct kvp_sample_extra){ .grammar = g,
										      .vocab = v,
										      .eog = &eos,
										      .n_eog = 1 }),
				 0);
		assert_int_equal(kvp_sampler_new_like(&c, s, seed), 0);
		sample_json(g, v, s, t1, sizeof(t1), &n1);
		sample_json(g, v, c, t2, sizeof(t2), &n2);
		assert_int_equal(n1, n2);
		assert_memory_equal(t1, t2, n1);
		j = json_loads(t1, 0, NULL);
		if (!j || !json_is_string(json_object_get(j, "a")) ||
		    !json_is_integer(json_object_get(j, "b")) || json_object_size(j) != 2)
			fail_msg("seed %llu: %s", (unsigned long long)seed, t1);
		json_decref(j);
		kvp_sampler_free(s);
		kvp_sampler_free(c);
	}
	kvp_grammar_free(g);
	kvp_grammar_vocab_free(v);
}

static void test_think_budget(void **state)
{
	/*
	 * a reasoning budget: once the open id (1) is picked and 3 more after it, the close
	 * id (2) is the next pick whatever the logits favour (0 here), once; without the
	 * budget the section never closes; a continuation (new_like) counts from the start
	 */
	const float open_first[4] = { 0, 0, -5, 9 }, rest[4] = { 9, 0, -5, 0 };
	float l[4];
	static const int32_t want[] = { 3, 0, 1, 0, 0, 0, 2, 0, 0, 1, 0 };
	struct kvp_sample_extra x = { .think_open = 1, .think_close = 2, .think_budget = 3 };
	struct kvp_sampler *s, *c;

	(void)state;
	for (int budget = 0; budget < 2; budget++) {
		x.think_budget = budget ? 3 : 0;
		assert_int_equal(kvp_sampler_new(&s, 4, &(struct kvp_sample_params){ 0 }), 0);
		assert_int_equal(kvp_sampler_set_extra(s, &x), 0);
		assert_int_equal(kvp_sampler_new_like(&c, s, 7), 0);
		for (int k = 0; k < 2; k++) {
			struct kvp_sampler *t = k ? c : s;

			for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
				/* the open id wins at 2 and 9 (a second <think> counts for nothing) */
				memcpy(l, i == 0 ? open_first : rest, sizeof(l));
				if (i == 2 || i == 9)
					l[1] = 20;
				assert_int_equal(kvp_sampler_sample(t, l),
						 budget || want[i] != 2 ? want[i] : 0);
			}
		}
		kvp_sampler_free(c);
		kvp_sampler_free(s);
	}
	x.think_budget = 3, x.think_close = 4; /* an id past the vocabulary */
	assert_int_equal(kvp_sampler_new(&s, 4, &(struct kvp_sample_params){ 0 }), 0);
	assert_int_equal(kvp_sampler_set_extra(s, &x), -EINVAL);
	kvp_sampler_free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_greedy_is_argmax),
		cmocka_unit_test(test_frequencies_follow_softmax),
		cmocka_unit_test(test_seed_reproducible),
		cmocka_unit_test(test_top_k),
		cmocka_unit_test(test_top_p),
		cmocka_unit_test(test_extreme_temperatures_and_logits),
		cmocka_unit_test(test_bias_and_penalties),
		cmocka_unit_test(test_logprobs),
		cmocka_unit_test(test_grammar_in_sampler),
		cmocka_unit_test(test_think_budget),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
