/* SPDX-License-Identifier: MIT */
/*
 * test_reqlog.c - svc/reqlog.c and util/hist.c: the log line of an ended request (every
 * field, key=value, the client name quoted), the receipt-time table under many requests
 * in flight and removals in any order, the histograms' buckets; util/escape.c's
 * terminal escaping.
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

#include "util/hist.h"
#include "svc/reqlog.h"
#include "util/escape.h"

static void test_line_has_every_field(void **state)
{
	/* one line, key=value, the name quoted with its quotes escaped */
	const struct kvp_usage u = { .prompt_tokens = 12,
				     .cached_tokens = 8,
				     .cache_creation_tokens = 16,
				     .recomputed_tokens = 4,
				     .generated_tokens = 32,
				     .queue_ms = 0.125f,
				     .ttft_ms = 45.5f,
				     .decode_ms = 250.0f };
	const struct kvp_reqlog_who who = { .client = "app \"v2\"", .uid = 1000 };
	char line[512];

	kvp_reqlog_format(line, sizeof(line), 0x100000002ull, 7, &who, "ok", &u, 301.25);
	assert_string_equal(line, "id=7 conn=0x100000002 client=\"app \\\"v2\\\"\" uid=1000 "
				  "status=ok prompt=12 cached=8 created=16 recomputed=4 "
				  "generated=32 queue_ms=0.125 ttft_ms=45.500 total_ms=301.250");
	/* no receipt time known: total from the usage (first token to last) */
	kvp_reqlog_format(line, sizeof(line), 1, 2, &who, "cancelled", &u, -1);
	assert_non_null(strstr(line, "status=cancelled"));
	assert_non_null(strstr(line, "total_ms=295.500"));
	assert_null(strchr(line, '\n'));
	assert_string_equal(kvp_reqlog_status_word(KVP_E_SHUTDOWN), "shutdown");
	assert_string_equal(kvp_reqlog_status_word(KVP_E_BUSY), "busy");
	assert_string_equal(kvp_reqlog_status_word(999), "unknown");
}

static void test_table_under_load(void **state)
{
	/* 5000 requests in flight on 50 connections, ended in a scrambled order: each end
	 * finds its own receipt time (the DONE's total), closes drop the rest */
	struct kvp_reqlog rl;
	const struct kvp_usage u = { .generated_tokens = 1, .ttft_ms = 1 };
	const struct kvp_reqlog_who who = { .client = "t", .uid = 0 };

	kvp_reqlog_init(&rl);
	rl.enabled = false;
	for (uint64_t i = 0; i < 5000; i++)
		assert_int_equal(kvp_reqlog_start(&rl, i % 50, i / 50 + 1, 1000 + i), 0);
	assert_int_equal(rl.n, 5000);
	assert_int_equal(kvp_reqlog_start(&rl, 1, 0, 5), -EINVAL);
	for (uint64_t k = 0; k < 2500; k++) {
		uint64_t i = (k * 7919) % 5000;

		if (i % 2)
			continue;
		kvp_reqlog_end(&rl, i % 50, i / 50 + 1, &who, KVP_OK, &u, 2000000);
	}
	assert_int_equal(rl.n, 5000 - 1250);
	/* what remains is still found, once */
	kvp_reqlog_end(&rl, 3, 1, &who, KVP_OK, &u, 2000000); /* i = 3: odd, still there */
	assert_int_equal(rl.n, 5000 - 1251);
	kvp_reqlog_end(&rl, 3, 1, &who, KVP_OK, &u, 2000000); /* gone: nothing removed */
	assert_int_equal(rl.n, 5000 - 1251);
	for (uint64_t c = 0; c < 50; c++)
		kvp_reqlog_conn_closed(&rl, c, &who, 3000000);
	assert_int_equal(rl.n, 0);
	/* every DONE counted in the histograms, TTFT only with a token */
	assert_int_equal(rl.lat[KVP_LAT_TTFT].count, 1252);
	assert_int_equal(rl.lat[KVP_LAT_QUEUE].count, 1252);
	kvp_reqlog_deinit(&rl);
}

static void test_histogram_buckets(void **state)
{
	/* each observation lands in the first bucket whose bound holds it; past the last
	 * only in the count (+Inf); negative and NaN count as 0 */
	struct kvp_hist h = { 0 };

	kvp_hist_observe_ms(&h, 5);	 /* = 0.005 s: bucket 2 (le is inclusive) */
	kvp_hist_observe_ms(&h, 5.001);	 /* bucket 3 */
	kvp_hist_observe_ms(&h, 1000);	 /* le="1" */
	kvp_hist_observe_ms(&h, 400000); /* past 300 s */
	kvp_hist_observe_ms(&h, -3);
	kvp_hist_observe_ms(&h, 0.0 / 0.0);
	assert_int_equal(h.count, 6);
	assert_int_equal(kvp_hist_cumulative(&h, 0), 2); /* -3 and NaN count as 0 */
	assert_int_equal(kvp_hist_cumulative(&h, 2), 3);
	assert_int_equal(kvp_hist_cumulative(&h, 3), 4);
	assert_int_equal(kvp_hist_cumulative(&h, 9), 5);
	assert_true(kvp_hist_bounds_s[9] == 1.0);
	assert_int_equal(kvp_hist_cumulative(&h, KVP_HIST_BUCKETS - 1), 5);
	assert_float_equal(h.sum_s, 0.005 + 0.005001 + 1 + 400, 1e-9);
}

static void test_escape_for_terminal(void **state)
{
	/* controls, DEL, C1 and ill-formed bytes as \xNN; newline, tab and UTF-8 kept */
	static const char in[] = "a\x1b[1m\x07\x7f\n\t\xc2\x85\xc2\xa0\xe2\x82\xac\xff\xe2\x82";
	struct kvp_buf b = KVP_BUF_INIT;

	kvp_escape_tty(&b, in, sizeof(in) - 1);
	assert_int_equal(b.err, 0);
	kvp_buf_add(&b, "", 1);
	assert_string_equal(b.p, "a\\x1b[1m\\x07\\x7f\n\t\\xc2\\x85\xc2\xa0\xe2\x82\xac\\xff"
				 "\\xe2\\x82");
	kvp_buf_deinit(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_line_has_every_field),
		cmocka_unit_test(test_table_under_load),
		cmocka_unit_test(test_histogram_buckets),
		cmocka_unit_test(test_escape_for_terminal),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
