/* SPDX-License-Identifier: MIT */
/*
 * test_draft.c - compute/draft.c, prompt-lookup drafts: the longest suffix (of
 * ngram_max down to ngram_min tokens) wins, then the latest copy of it; the proposal is
 * what followed, cut at k, the caller's cap and the end of the tokens; no match, too
 * short a history and a suffix found only as itself propose nothing; k follows the
 * acceptance rate (grows on full acceptance, falls on rejections, stays in 1 .. k_max)
 * and the totals count; a brute-force matcher agrees on random sequences.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/draft.h"

#define N(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))

static void test_longest_suffix_wins(void **state)
{
	/*            0  1  2  3  4  5  6  7  8  9 10 11 12 */
	int32_t t[] = { 5, 1, 2, 3, 9, 8, 2, 3, 7, 7, 1, 2, 3 };
	struct kvp_draft d;
	int32_t out[16];
	uint32_t len;

	(void)state;
	kvp_draft_init(&d, 4, 1, 8);
	/* "1 2 3" occurs at 1..3 (then 9 8 ...); "2 3" alone later at 6..7 (then 7 7) */
	assert_int_equal(kvp_draft_find(&d, t, N(t), &len), 4);
	assert_int_equal(len, 3);
	assert_int_equal(kvp_draft_propose(&d, t, N(t), out, 16), 8); /* up to the end: 4..11 */
	assert_int_equal(out[0], 9);
	assert_int_equal(out[1], 8);
	assert_int_equal(out[7], 2);
	/* ngram_max 2: "2 3" at 6..7 is the latest copy */
	kvp_draft_init(&d, 2, 1, 8);
	assert_int_equal(kvp_draft_find(&d, t, N(t), &len), 8);
	assert_int_equal(len, 2);
	assert_int_equal(kvp_draft_propose(&d, t, N(t), out, 16), 5);
	assert_int_equal(out[0], 7);
	assert_int_equal(out[4], 3);
	/* the caller's cap and k cut the proposal */
	kvp_draft_init(&d, 4, 1, 3);
	assert_int_equal(kvp_draft_propose(&d, t, N(t), out, 16), 3);
	kvp_draft_init(&d, 4, 1, 8);
	assert_int_equal(kvp_draft_propose(&d, t, N(t), out, 2), 2);
	assert_int_equal(kvp_draft_propose(&d, t, N(t), out, 0), 0);
}

static void test_no_match(void **state)
{
	int32_t t[] = { 1, 2, 3, 4, 5, 6 }, one[] = { 7 }, rep[] = { 4, 4 };
	struct kvp_draft d;
	int32_t out[8];
	uint32_t len = 99;

	(void)state;
	kvp_draft_init(&d, 4, 1, 8);
	assert_int_equal(kvp_draft_find(&d, t, N(t), &len), 0);
	assert_int_equal(len, 0);
	assert_int_equal(kvp_draft_propose(&d, t, N(t), out, 8), 0);
	assert_int_equal(kvp_draft_propose(&d, one, 1, out, 8), 0);
	assert_int_equal(kvp_draft_propose(&d, one, 0, out, 8), 0);
	/* a run of one token: its copy is the token before, the draft the last one */
	assert_int_equal(kvp_draft_propose(&d, rep, 2, out, 8), 1);
	assert_int_equal(out[0], 4);
	/* ngram_min 2: a lone repeated token is not enough */
	int32_t u[] = { 9, 1, 5, 2, 1 };
	kvp_draft_init(&d, 4, 2, 8);
	assert_int_equal(kvp_draft_propose(&d, u, N(u), out, 8), 0);
	kvp_draft_init(&d, 4, 1, 8);
	assert_int_equal(kvp_draft_propose(&d, u, N(u), out, 8), 3);
	assert_int_equal(out[0], 5);
}

static void test_init_clamps(void **state)
{
	struct kvp_draft d;

	(void)state;
	kvp_draft_init(&d, 0, 0, 0);
	assert_int_equal(d.ngram_max, 4);
	assert_int_equal(d.ngram_min, 1);
	assert_int_equal(d.k_max, KVP_DRAFT_K_DEFAULT);
	assert_int_equal(d.k, KVP_DRAFT_K_DEFAULT);
	kvp_draft_init(&d, 99, 50, 1000);
	assert_int_equal(d.ngram_max, KVP_DRAFT_NGRAM_MAX);
	assert_int_equal(d.ngram_min, KVP_DRAFT_NGRAM_MAX);
	assert_int_equal(d.k_max, KVP_DRAFT_K_MAX);
}

static void test_k_follows_acceptance(void **state)
{
	struct kvp_draft d;

	(void)state;
	kvp_draft_init(&d, 4, 1, 8);
	/* nothing passes: k falls to 1 and stays there */
	for (int i = 0; i < 20; i++)
		kvp_draft_update(&d, d.k, 0);
	assert_int_equal(d.k, 1);
	assert_true(d.rate < 0.01f);
	assert_int_equal(d.accepted, 0);
	assert_int_equal(d.steps, 20);
	/* everything passes: k doubles back up to k_max and no further */
	kvp_draft_update(&d, 1, 1);
	assert_int_equal(d.k, 2);
	kvp_draft_update(&d, 2, 2);
	assert_int_equal(d.k, 4);
	for (int i = 0; i < 5; i++)
		kvp_draft_update(&d, d.k, d.k);
	assert_int_equal(d.k, 8);
	/* a partial acceptance keeps at least one more than passed */
	kvp_draft_update(&d, 8, 5);
	assert_true(d.k >= 6 && d.k <= 8);
	/* nothing drafted: no change; accepted beyond drafted counts as drafted */
	struct kvp_draft before = d;
	kvp_draft_update(&d, 0, 0);
	assert_memory_equal(&before, &d, sizeof(d));
	uint64_t dr = d.drafted, ac = d.accepted;
	kvp_draft_update(&d, 2, 7);
	assert_int_equal(d.drafted, dr + 2);
	assert_int_equal(d.accepted, ac + 2);
}

static void test_k_follows_step_cost(void **state)
{
	/*
	 * With step times known, k maximizes expected tokens per time: extra rows nearly
	 * free (memory-bound) and acceptance high: all k_max; each row a whole step's cost
	 * (compute-bound): none, but one every KVP_DRAFT_PROBE-th step; a middle cost and
	 * acceptance: in between.
	 */
	struct kvp_draft d;
	uint32_t probes = 0;

	(void)state;
	kvp_draft_init(&d, 4, 1, 8);
	for (uint32_t n = 1; n <= 9; n++)
		kvp_draft_step_cost(&d, n, 100.0 + n);
	for (int i = 0; i < 10; i++)
		kvp_draft_update(&d, 8, 8);
	kvp_draft_step_cost(&d, 9, 109.0);
	assert_int_equal(d.k, 8);

	kvp_draft_init(&d, 4, 1, 8);
	for (uint32_t n = 1; n <= 9; n++)
		kvp_draft_step_cost(&d, n, 100.0 * n);
	for (int i = 0; i < 10; i++)
		kvp_draft_update(&d, 2, 1); /* p = 1/2 */
	for (int i = 0; i < 4 * KVP_DRAFT_PROBE; i++) {
		kvp_draft_step_cost(&d, 1, 100.0);
		assert_true(d.k <= 1);
		probes += d.k;
	}
	assert_int_equal(probes, 4);

	/* one extra row at 1.2x, more at a row's cost each; p = 0.8: one draft */
	kvp_draft_init(&d, 4, 1, 8);
	for (uint32_t n = 1; n <= 9; n++)
		kvp_draft_step_cost(&d, n, n == 1 ? 100.0 : n == 2 ? 120.0 : 100.0 * n - 60.0);
	for (int i = 0; i < 30; i++)
		kvp_draft_update(&d, 5, 4);
	kvp_draft_step_cost(&d, 2, 120.0);
	assert_int_equal(d.k, 1);
	/* drafting steps only: one in KVP_DRAFT_RETIME drafts nothing, to time a plain one */
	uint32_t plain = 0;
	for (int i = 0; i < 4 * KVP_DRAFT_RETIME; i++) {
		kvp_draft_step_cost(&d, 1 + d.k, d.k ? 120.0 : 100.0);
		plain += !d.k;
	}
	assert_int_equal(plain, 4);
	/* before any one-row step: the next one is plain */
	kvp_draft_init(&d, 4, 1, 8);
	kvp_draft_step_cost(&d, 9, 400.0);
	assert_int_equal(d.k, 0);
	/* no drafts proposed while k is 0 */
	int32_t t[] = { 1, 2, 1, 2 }, out[8];
	d.k = 0;
	assert_int_equal(kvp_draft_propose(&d, t, 4, out, 8), 0);
}

/* The definition, spelt out: longest n first, latest copy first. */
static uint32_t brute_find(const struct kvp_draft *d, const int32_t *t, uint32_t n_tok,
			   uint32_t *len)
{
	for (uint32_t n = d->ngram_max; n >= d->ngram_min; n--) {
		for (int64_t j = (int64_t)n_tok - 2; j - (int64_t)n + 1 >= 0; j--) {
			if (!memcmp(t + j - n + 1, t + n_tok - n, n * sizeof(*t))) {
				*len = n;
				return (uint32_t)j + 1;
			}
		}
	}
	*len = 0;
	return 0;
}

static void test_matches_brute_force(void **state)
{
	struct kvp_draft d;
	int32_t t[64];
	uint64_t x = 0x9e3779b97f4a7c15ull;
	uint32_t found = 0;

	(void)state;
	for (int c = 0; c < 3000; c++) {
		uint32_t n_tok = 1 + (uint32_t)(c % 64), alpha = 2 + (uint32_t)(c % 5);
		uint32_t lmax = 1 + (uint32_t)(c % 6), lmin = 1 + (uint32_t)(c / 7 % lmax);
		uint32_t la, lb, a, b;

		for (uint32_t i = 0; i < n_tok; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			t[i] = (int32_t)(x % alpha);
		}
		kvp_draft_init(&d, lmax, lmin, 8);
		a = kvp_draft_find(&d, t, n_tok, &la);
		b = brute_find(&d, t, n_tok, &lb);
		assert_int_equal(a, b);
		assert_int_equal(la, lb);
		found += a != 0;
	}
	assert_true(found > 1000); /* small alphabets: most histories hold a match */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_longest_suffix_wins),
		cmocka_unit_test(test_no_match),
		cmocka_unit_test(test_init_clamps),
		cmocka_unit_test(test_k_follows_acceptance),
		cmocka_unit_test(test_k_follows_step_cost),
		cmocka_unit_test(test_matches_brute_force),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
