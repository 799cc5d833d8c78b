/* SPDX-License-Identifier: MIT */
/*
 * test_http_metrics.c - ipc/http/metrics.c: request counters by endpoint and code,
 * cumulative histogram buckets with sum and count, usage counters, in the Prometheus
 * text format.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ipc/http/metrics.h"

static char *report(struct kvp_http_metrics *m)
{
	struct kvp_buf b = KVP_BUF_INIT;

	kvp_http_metrics_prom(m, 3, &b);
	assert_true(kvp_buf_finish(&b) > 0);
	return b.p;
}

static void has(const char *text, const char *line)
{
	if (!strstr(text, line))
		fail_msg("no '%s' in:\n%s", line, text);
}

static void test_counters_and_histograms(void **state)
{
	struct kvp_http_metrics *m = calloc(1, sizeof(*m));
	char *t;

	/* codes by endpoint; buckets cumulative; +Inf equals the count; the sum in s */
	assert_non_null(m);
	kvp_http_metrics_request(m, KVP_HTTP_EP_COMPLETIONS, 200, 0.0005);
	kvp_http_metrics_request(m, KVP_HTTP_EP_COMPLETIONS, 200, 0.003);
	kvp_http_metrics_request(m, KVP_HTTP_EP_COMPLETIONS, 429, 100);
	kvp_http_metrics_request(m, KVP_HTTP_EP_OTHER, 418, 0.001);
	kvp_http_metrics_ttft(m, KVP_HTTP_EP_MESSAGES, 0.02);
	kvp_http_metrics_usage(m, 100, 64, 32, 7);
	atomic_fetch_add(&m->disconnects, 2);
	t = report(m);
	has(t, "# TYPE kvpool_http_requests_total counter\n");
	has(t, "kvpool_http_requests_total{endpoint=\"completions\",code=\"200\"} 2\n");
	has(t, "kvpool_http_requests_total{endpoint=\"completions\",code=\"429\"} 1\n");
	has(t, "kvpool_http_requests_total{endpoint=\"other\",code=\"other\"} 1\n");
	assert_null(strstr(t, "code=\"404\"")); /* zero series are left out */
	has(t,
	    "kvpool_http_request_duration_seconds_bucket{endpoint=\"completions\",le=\"0.001\"} 1\n");
	has(t,
	    "kvpool_http_request_duration_seconds_bucket{endpoint=\"completions\",le=\"0.005\"} 2\n");
	has(t,
	    "kvpool_http_request_duration_seconds_bucket{endpoint=\"completions\",le=\"60\"} 2\n");
	has(t,
	    "kvpool_http_request_duration_seconds_bucket{endpoint=\"completions\",le=\"+Inf\"} 3\n");
	has(t, "kvpool_http_request_duration_seconds_count{endpoint=\"completions\"} 3\n");
	has(t, "kvpool_http_request_duration_seconds_sum{endpoint=\"completions\"} 100.003500\n");
	has(t, "kvpool_http_ttft_seconds_bucket{endpoint=\"messages\",le=\"0.01\"} 0\n");
	has(t, "kvpool_http_ttft_seconds_bucket{endpoint=\"messages\",le=\"0.025\"} 1\n");
	assert_null(strstr(t, "kvpool_http_ttft_seconds_count{endpoint=\"completions\"}"));
	has(t, "kvpool_http_tokens_total{kind=\"cached\"} 64\n");
	has(t, "kvpool_http_tokens_total{kind=\"generated\"} 7\n");
	has(t, "kvpool_http_client_disconnects_total 2\n");
	has(t, "kvpool_http_backend_connections 3\n");
	free(t);
	free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counters_and_histograms),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
