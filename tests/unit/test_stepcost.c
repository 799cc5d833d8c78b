/* SPDX-License-Identifier: MIT */
/*
 * test_stepcost.c - the engine's cost model of forward calls (svc/engine/stepcost.c): a mixed
 * step is priced as one call over all its rows, chunks fitted into a step that already
 * holds decode rows are the largest that fit, and observed steps move the scale; steps
 * of few rows are priced by their row count (a kernel that changes at a GEMV group).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "svc/engine/stepcost.h"

/* p0 11 ms, p1 1.3 ms a row, p2 700 ns a row per position, a decode step 13.5 ms */
static void demo(struct kvp_stepcost *c)
{
	kvp_stepcost_init(c, 11e6, 1.3e6, 700, 13.5e6);
}

static void test_step_prices_one_call(void **state)
{
	struct kvp_stepcost c;

	demo(&c);
	/* a chunk alone is a step of its rows: the same price as a prefill call */
	assert_true(fabs(kvp_stepcost_step_ns(&c, 40, 40 * (100 + 20.0)) -
			 kvp_stepcost_prefill_ns(&c, 40, 100)) < 1);
	/* one fixed cost for decode rows and a chunk together, not two */
	assert_true(fabs(kvp_stepcost_step_ns(&c, 8 + 40, 8 * 51.0 + 40 * 20.0) -
			 (11e6 + 48 * 1.3e6 + 700 * (8 * 51.0 + 40 * 20.0))) < 1);
	assert_true(kvp_stepcost_step_ns(&c, 0, 0) == 0);
}

static void test_fit_step_is_largest_within_budget(void **state)
{
	struct kvp_stepcost c;
	double rows = 3, attn = 3 * 200.0;

	demo(&c);
	for (double budget = 10e6; budget < 400e6; budget *= 1.37) {
		uint32_t n = kvp_stepcost_fit_step(&c, budget, rows, attn, 500, 4000);

		if (n)
			assert_true(kvp_stepcost_step_ns(&c, rows + n,
							 attn + n * (500 + n / 2.0)) <= budget);
		if (n < 4000)
			assert_true(kvp_stepcost_step_ns(&c, rows + n + 1,
							 attn + (n + 1) * (500 + (n + 1) / 2.0)) >
				    budget);
	}
	/* the decode rows alone over budget: no room */
	assert_int_equal(kvp_stepcost_fit_step(&c, 12e6, 8, 8, 0, 100), 0);
	/* capped */
	assert_int_equal(kvp_stepcost_fit_step(&c, 1e12, 1, 1, 0, 77), 77);
}

static void test_observed_steps_move_the_scale(void **state)
{
	struct kvp_stepcost c;
	double model, before;

	demo(&c);
	model = kvp_stepcost_step_ns(&c, 30, 900);
	/* steps that take twice the model: the prediction follows, within ~20 of them */
	for (int i = 0; i < 20; i++)
		kvp_stepcost_observe_step(&c, 30, 900, 2 * model);
	assert_true(kvp_stepcost_step_ns(&c, 30, 900) > 1.9 * model);
	assert_true(kvp_stepcost_step_ns(&c, 30, 900) <= 2.0 * model);
	/* one step stalled 10x moves it by at most 20% */
	before = kvp_stepcost_step_ns(&c, 30, 900);
	kvp_stepcost_observe_step(&c, 30, 900, 20 * model);
	assert_true(kvp_stepcost_step_ns(&c, 30, 900) <= before * 1.2 + 1e-3);
	/* nothing observed, nothing moved */
	before = kvp_stepcost_step_ns(&c, 30, 900);
	kvp_stepcost_observe_step(&c, 0, 0, 1e6);
	kvp_stepcost_observe_step(&c, 30, 900, 0);
	assert_true(kvp_stepcost_step_ns(&c, 30, 900) == before);
	/* decode-only steps keep their own figures */
	assert_true(c.k_dec == 1);
}

static void test_attention_scaled_apart(void **state)
{
	/*
	 * the machine's attention costs 3x the calibrated figure, its matrix work as
	 * calibrated: steps at short and at long contexts, in turn, teach both scales, so
	 * both kinds are predicted within 10% (one scale for both would price the short
	 * steps by the long ones' error)
	 */
	struct kvp_stepcost c, truth;

	demo(&c);
	truth = c;
	truth.k_a = 3;
	for (int i = 0; i < 200; i++) {
		double attn = i % 2 ? 8 * 3000.0 : 64 * 32.0, rows = i % 2 ? 9 : 65;

		kvp_stepcost_observe_step(&c, rows, attn, kvp_stepcost_step_ns(&truth, rows, attn));
	}
	for (int k = 0; k < 2; k++) {
		double attn = k ? 8 * 3000.0 : 64 * 32.0, rows = k ? 9 : 65;
		double want = kvp_stepcost_step_ns(&truth, rows, attn);

		assert_true(fabs(kvp_stepcost_step_ns(&c, rows, attn) - want) < 0.1 * want);
	}
	/* and a step of decode rows alone (little attention) is priced as calibrated */
	assert_true(fabs(c.k_w - 1) < 0.1);
}

/*
 * A machine whose steps of up to 4 rows read the weights once (0.7 of the line) and
 * whose steps of 5 to 16 rows pay a packed tile (1.3 of it), as the demo model's f32
 * projections on AVX2 (a stream's row and 3 prompt tokens at 3,500 positions 23 ms, 4
 * tokens 40 ms, the line 32 for both).
 */
static double gemv_truth(const struct kvp_stepcost *line, double rows, double attn)
{
	return (rows <= 4 ? 0.7 : rows <= 16 ? 1.3 : 1) * kvp_stepcost_step_ns(line, rows, attn);
}

static void test_rows_priced_by_count(void **state)
{
	/*
	 * steps of a stream's row and a chunk at 3,500 positions, the chunk as the fit
	 * gives it: both sides of the group are learned from the steps taken, and the
	 * budget that the line fills with 4 tokens (5 rows: 1.24 x the budget) gets the 3
	 * that fit (4 rows), though 1 and 2 would too
	 */
	struct kvp_stepcost c, line;
	const double ctx = 3500, attn0 = 3501;
	double budget;
	uint32_t n = 0;

	demo(&line);
	c = line;
	budget = 1.05 * kvp_stepcost_step_ns(&line, 5, attn0 + 4 * (ctx + 2));
	assert_int_equal(kvp_stepcost_fit_step(&c, budget, 1, attn0, ctx, 256), 4);
	for (int i = 0; i < 40; i++) {
		double attn;

		n = kvp_stepcost_fit_step(&c, budget, 1, attn0, ctx, 256);
		assert_true(n >= 1);
		attn = attn0 + n * (ctx + n / 2.0);
		kvp_stepcost_observe_step(&c, 1 + n, attn, gemv_truth(&line, 1 + n, attn));
	}
	/* settled: the 4-row step, whose price is what it takes within 10% */
	assert_int_equal(n, 3);
	assert_true(fabs(kvp_stepcost_step_ns(&c, 4, attn0 + 3 * (ctx + 1.5)) -
			 gemv_truth(&line, 4, attn0 + 3 * (ctx + 1.5))) <
		    0.1 * gemv_truth(&line, 4, attn0 + 3 * (ctx + 1.5)));
	/* the 5-row step, tried, is priced above the budget */
	assert_true(kvp_stepcost_step_ns(&c, 5, attn0 + 4 * (ctx + 2)) > budget);
	/*
	 * a count not seen in KVP_STEPCOST_STALE small steps takes its neighbour's ratio
	 * (the 4-row one's): tried again, it measures again
	 */
	for (int i = 0; i < KVP_STEPCOST_STALE + 1; i++)
		kvp_stepcost_observe_step(&c, 4, attn0 + 3 * (ctx + 1.5),
					  gemv_truth(&line, 4, attn0 + 3 * (ctx + 1.5)));
	assert_true(kvp_stepcost_fit_step(&c, budget, 1, attn0, ctx, 256) > 3);
}

static void test_floor_tokens(void **state)
{
	/*
	 * the floor of a prefill step alone: the fewest tokens whose own work is 4 fixed
	 * costs (their rows and attention); fewer at a long context (attention grows), a
	 * count the machine's load does not move (both scales doubled), capped
	 */
	struct kvp_stepcost c;
	uint32_t n0, n4k;

	demo(&c);
	n0 = kvp_stepcost_floor_tokens(&c, 11e6, 4, 0, 256);
	assert_true(kvp_stepcost_prefill_ns(&c, n0, 0) - 11e6 >= 4 * 11e6);
	assert_true(kvp_stepcost_prefill_ns(&c, n0 - 1, 0) - 11e6 < 4 * 11e6);
	n4k = kvp_stepcost_floor_tokens(&c, 11e6, 4, 4000, 256);
	assert_true(n4k < n0 / 2 && n4k >= 1);
	c.k_w = c.k_a = 2;
	assert_int_equal(kvp_stepcost_floor_tokens(&c, 11e6, 4, 0, 256), n0);
	assert_int_equal(kvp_stepcost_floor_tokens(&c, 11e6, 4, 0, 10), 10);
}

static void test_decode_follows_load(void **state)
{
	/*
	 * a decode step alone measured, then only mixed steps (a prompt prefilling next to
	 * the stream) on a machine twice as slow: the decode step alone is priced with
	 * their weights scale, so the streams' budget follows the load (within 2x); a
	 * decode step alone seen again is the figure again
	 */
	struct kvp_stepcost c, slow;

	demo(&c);
	for (int i = 0; i < KVP_STEPCOST_RING; i++)
		kvp_stepcost_observe_decode(&c, 1, 13.5e6);
	assert_true(kvp_stepcost_decode_ns(&c, 1) == 13.5e6);
	slow = c;
	slow.k_w = slow.k_a = 2;
	for (int i = 0; i < 100; i++)
		kvp_stepcost_observe_step(&c, 40, 40 * 120.0,
					  kvp_stepcost_step_ns(&slow, 40, 40 * 120.0));
	assert_true(fabs(kvp_stepcost_decode_ns(&c, 1) - 27e6) < 0.1 * 27e6);
	for (int i = 0; i < 100; i++)
		kvp_stepcost_observe_step(&c, 40, 40 * 120.0,
					  10 * kvp_stepcost_step_ns(&slow, 40, 40 * 120.0));
	assert_true(kvp_stepcost_decode_ns(&c, 1) <= 2 * 13.5e6 + 1);
	kvp_stepcost_observe_decode(&c, 1, 13.5e6);
	assert_true(kvp_stepcost_decode_ns(&c, 1) == 13.5e6);
}

static void test_decode_median(void **state)
{
	/*
	 * a decode step of a batch size is the median of its recent ones: a step stalled
	 * 10x by another process among them leaves it where it was, a lasting change of
	 * load moves it within half the ring
	 */
	struct kvp_stepcost c;

	demo(&c);
	for (int i = 0; i < 7; i++)
		kvp_stepcost_observe_decode(&c, 1, 10e6);
	kvp_stepcost_observe_decode(&c, 1, 100e6);
	assert_true(kvp_stepcost_decode_ns(&c, 1) == 10e6);
	for (int i = 0; i < KVP_STEPCOST_RING / 2 + 1; i++)
		kvp_stepcost_observe_decode(&c, 1, 20e6);
	assert_true(kvp_stepcost_decode_ns(&c, 1) == 20e6);
	/* another batch size keeps its own; a frozen model learns nothing */
	assert_true(kvp_stepcost_decode_ns(&c, 2) != 20e6);
	c.frozen = true;
	kvp_stepcost_observe_decode(&c, 3, 1e9);
	kvp_stepcost_observe_step(&c, 30, 900, 1e9);
	assert_true(c.dec[2] == 0 && c.k_w == 1 && c.k_a == 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_step_prices_one_call),
		cmocka_unit_test(test_fit_step_is_largest_within_budget),
		cmocka_unit_test(test_observed_steps_move_the_scale),
		cmocka_unit_test(test_attention_scaled_apart),
		cmocka_unit_test(test_rows_priced_by_count),
		cmocka_unit_test(test_floor_tokens),
		cmocka_unit_test(test_decode_median),
		cmocka_unit_test(test_decode_follows_load),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
