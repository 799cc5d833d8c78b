/* SPDX-License-Identifier: MIT */
/*
 * test_sample.c - greedy, temperature, top-k, top-p and seeding of the sampler.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_greedy_is_argmax),
		cmocka_unit_test(test_frequencies_follow_softmax),
		cmocka_unit_test(test_seed_reproducible),
		cmocka_unit_test(test_top_k),
		cmocka_unit_test(test_top_p),
		cmocka_unit_test(test_extreme_temperatures_and_logits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
