/* SPDX-License-Identifier: MIT */
/*
 * test_remote_breaker.c - the remote tier's circuit breaker and cost check, on
 * simulated time: a new breaker probes at once; it opens after the configured run of
 * failures (a success resets the run), probes after the interval, backs off by
 * doubling up to the cap, and closes on a good probe.  The plan fetches only when it
 * beats recomputing and only what fits the deadline; the estimates follow samples.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "shm/remote/breaker.h"
#include "shm/remote/cost.h"

#define MS 1000000ull

/* A new breaker is open with a probe due now; a good probe closes it. */
static void test_start(void **state)
{
	struct kvp_breaker b;

	(void)state;
	kvp_breaker_init(&b, 3, 100 * MS, 800 * MS, 1000 * MS);
	assert_false(kvp_breaker_closed(&b));
	assert_int_equal(kvp_breaker_next_ns(&b), 1000 * MS);
	assert_true(kvp_breaker_probe_due(&b, 1000 * MS));
	assert_int_equal(b.state, KVP_BREAKER_PROBING);
	assert_false(kvp_breaker_probe_due(&b, 1001 * MS)); /* one probe at a time */
	assert_int_equal(kvp_breaker_next_ns(&b), UINT64_MAX);
	kvp_breaker_probe_done(&b, true, 1002 * MS);
	assert_true(kvp_breaker_closed(&b));
	assert_int_equal(b.opens, 0);
	assert_string_equal(kvp_breaker_state_name(b.state), "closed");
}

/* Threshold consecutive failures open it; a success in between resets the count. */
static void test_open(void **state)
{
	struct kvp_breaker b;

	(void)state;
	kvp_breaker_init(&b, 3, 100 * MS, 800 * MS, 0);
	assert_true(kvp_breaker_probe_due(&b, 0));
	kvp_breaker_probe_done(&b, true, 0);
	assert_false(kvp_breaker_failure(&b, 10 * MS));
	assert_false(kvp_breaker_failure(&b, 11 * MS));
	kvp_breaker_success(&b);
	assert_false(kvp_breaker_failure(&b, 12 * MS));
	assert_false(kvp_breaker_failure(&b, 13 * MS));
	assert_true(kvp_breaker_closed(&b));
	assert_true(kvp_breaker_failure(&b, 14 * MS));
	assert_false(kvp_breaker_closed(&b));
	assert_int_equal(b.opens, 1);
	assert_false(kvp_breaker_failure(&b, 15 * MS)); /* already open */
	assert_false(kvp_breaker_probe_due(&b, 113 * MS));
	assert_true(kvp_breaker_probe_due(&b, 114 * MS));
}

/* Failed probes back off 100, 200, 400, 800, 800 ms; a good one closes and resets. */
static void test_backoff(void **state)
{
	static const uint64_t want[] = { 100, 200, 400, 800, 800 };
	struct kvp_breaker b;
	uint64_t t = 0;

	(void)state;
	kvp_breaker_init(&b, 1, 100 * MS, 800 * MS, 0);
	assert_true(kvp_breaker_probe_due(&b, 0));
	kvp_breaker_probe_done(&b, true, 0);
	assert_true(kvp_breaker_failure(&b, 0));
	t = 100 * MS;
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		assert_false(kvp_breaker_probe_due(&b, t - 1));
		assert_true(kvp_breaker_probe_due(&b, t));
		kvp_breaker_probe_done(&b, false, t);
		assert_int_equal(kvp_breaker_next_ns(&b) - t, want[i] * MS);
		t += want[i] * MS;
	}
	assert_true(kvp_breaker_probe_due(&b, t));
	kvp_breaker_probe_done(&b, true, t);
	assert_true(kvp_breaker_closed(&b));
	assert_true(kvp_breaker_failure(&b, t));
	assert_int_equal(kvp_breaker_next_ns(&b) - t, 100 * MS);
	assert_int_equal(b.opens, 2);
}

/* The plan: fetch when rtt + k*size/bw < k*block/prefill; none when recomputing is as
 * fast; only what fits 3/4 of the time left; everything when not asked to compare. */
static void test_plan(void **state)
{
	struct kvp_remote_est e;
	size_t vb = 528384; /* a 1B-class block record */

	(void)state;
	kvp_remote_est_init(&e, 1e9, 200e3); /* 1 GB/s, 0.2 ms */
	/* 256 blocks at 1 GB/s: ~135 ms; recomputing 4096 tokens at 1000 tok/s: 4 s */
	assert_int_equal(kvp_remote_plan(&e, 256, vb, 16, 1000, 2000 * MS), 256);
	/* a prefill of 1e6 tokens/s recomputes 4096 tokens in 4 ms: not worth it */
	assert_int_equal(kvp_remote_plan(&e, 256, vb, 16, 1e6, 2000 * MS), 0);
	/* no comparison asked */
	assert_int_equal(kvp_remote_plan(&e, 256, vb, 16, 0, 2000 * MS), 256);
	/* 40 ms left: 3/4 of it less the round trip fits 56 values */
	assert_int_equal(kvp_remote_plan(&e, 256, vb, 16, 0, 40 * MS), 56);
	assert_int_equal(kvp_remote_plan(&e, 256, vb, 16, 0, 100e3), 0);
	assert_int_equal(kvp_remote_plan(&e, 0, vb, 16, 0, 2000 * MS), 0);
}

/* The estimates: the first sample replaces the hint, later ones are smoothed. */
static void test_est(void **state)
{
	struct kvp_remote_est e;

	(void)state;
	kvp_remote_est_init(&e, 1e9, 200e3);
	kvp_remote_est_rtt(&e, 100e3);
	assert_true(fabs(e.rtt_ns - 100e3) < 1);
	kvp_remote_est_rtt(&e, 500e3);
	assert_true(fabs(e.rtt_ns - 200e3) < 1); /* 100 + (500 - 100) / 4 */
	kvp_remote_est_bw(&e, 2000000, 1000000); /* 2 GB/s */
	assert_true(fabs(e.bw_bps - 2e9) < 1);
	kvp_remote_est_bw(&e, 0, 5); /* ignored */
	assert_true(fabs(e.bw_bps - 2e9) < 1);
	assert_true(fabs(kvp_remote_est_fetch_ns(&e, 10, 200000) - (200e3 + 1e6)) < 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_start),	cmocka_unit_test(test_open),
		cmocka_unit_test(test_backoff), cmocka_unit_test(test_plan),
		cmocka_unit_test(test_est),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
