/* SPDX-License-Identifier: MIT */
/*
 * test_status.c - status rendering: the JSON parses with a strict parser and carries the
 * snapshot's figures under the documented names; hostile strings stay escaped; hit rates
 * are computed right; a too-small buffer gives -ENOSPC, never a cut report; the
 * Prometheus text has one HELP/TYPE per family and the same figures; both outputs of a
 * busy snapshot match tests/unit/golden/ byte for byte.
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

#include "svc/status.h"
#include "tests/integration/jsonq.h"
#include "tests/lib/testlib.h"

static void fill(struct kvp_status_snap *s)
{
	memset(s, 0, sizeof(*s));
	strcpy(s->version, "0.1.0");
	strcpy(s->model, "demo \"q\"\\\n\x01");
	strcpy(s->state, "serving");
	s->pid = 42;
	s->pool_bytes = 64 << 20;
	s->block_tokens = 16;
	s->block_bytes = 65536;
	strcpy(s->page_kind, "4K");
	strcpy(s->kv_dtype, "f32");
	s->bytes_per_token = 1032192.5; /* exactly, not to 6 digits */
	s->bytes_per_token_f32 = 2064384;
	s->blocks_total = 1000;
	s->blocks_used = 10;
	s->blocks_cached = 90;
	s->blocks_free = 900;
	s->sched.pool.n_arenas = 2;
	s->sched.pool.arena[0] = (struct kvp_arena_stats){
		.node_os_index = 0, .n_blocks = 500, .used = 5, .cached = 45, .free = 450
	};
	s->sched.pool.arena[1] = (struct kvp_arena_stats){
		.node_os_index = 1, .n_blocks = 500, .used = 5, .cached = 45, .free = 450
	};
	s->sched.index.entries = 95;
	s->sched.lookups = 8;
	s->sched.hit_requests = 6;
	s->sched.lookup_tokens = 4000;
	s->sched.hit_tokens = 3000;
	s->sched.pool.evictions = 7;
	s->sched.queued = 2;
	s->sched.running = 3;
	s->sched.cancels_received = 6;
	s->sched.req_done = 11;
	s->sched.ttft_p50_ms = 12.5;
	s->sched.ttft_p99_ms = 0.0 / 0.0; /* NaN must not reach the JSON */
	s->sched.prompt_tokens = 4100;
	s->sched.cached_tokens = 3000;
	s->sched.cache_creation_tokens = 48;
	s->sched.recomputed_tokens = 1100;
	s->sched.generated_tokens = 170;
	s->sched.queue_ms = 1234567.125;
	s->sched.ttft_ms = 2.5;
	s->sched.prefill_ms = 3.25;
	s->sched.decode_ms = 400.5;
	s->server.conns_open = 2;
	s->n_conns = 2;
	s->conns[0] = (struct kvp_status_conn){ .id = 1, .pid = 100, .uid = 0, .requests = 4 };
	s->conns[1] = (struct kvp_status_conn){ .id = 2, .pid = 101, .uid = 1000, .in_flight = 1 };
	strcpy(s->conns[1].client, "app \"v2\"\\");
	s->n_domains = 1;
	strcpy(s->domains[0].name, "default");
	s->domains[0].conns_open = 2;
	strcpy(s->model_fp, "00112233445566778899aabbccddeeff");
	kvp_hist_observe_ms(&s->lat[KVP_LAT_TTFT], 3);	    /* <= 0.005 */
	kvp_hist_observe_ms(&s->lat[KVP_LAT_TTFT], 40);	    /* <= 0.05 */
	kvp_hist_observe_ms(&s->lat[KVP_LAT_TTFT], 900000); /* past the last bound: +Inf */
}

/*
 * A snapshot as a busy daemon reports it: every field set and distinct, numbers that
 * exercise each format (%.3f milliseconds, %.6g ratios, %.15g Prometheus values),
 * strings that need escaping only for '"' and '\'.  Laid out by hand, as a table.
 */
/* clang-format off */
static void fill_busy(struct kvp_status_snap *s)
{
	*s = (struct kvp_status_snap){
		.version = "0.1.0",
		.model = "tinyllama-1.1b-chat",
		.model_fp = "0123456789abcdef0123456789abcdef",
		.state = "serving",
		.pid = 31337,
		.view = "all",
		.uptime_ms = 86400123,
		.pool_bytes = 1ull << 30,
		.block_tokens = 16,
		.block_bytes = 360448,
		.page_kind = "hugetlb-2m",
		.kv_dtype = "f16",
		.bytes_per_token = 22528, /* block_bytes / block_tokens */
		.bytes_per_token_f32 = 45056,
		.blocks_total = 2978,
		.blocks_used = 301,
		.blocks_cached = 1207,
		.blocks_free = 1470,
		.index_inserts = 4321,
		.req_total = 30123,
		.req_rejected = 45,
		.sched = {
			.pool = {
				.n_arenas = 2,
				.evictions = 3114,
				.arena = {
					{ .node_os_index = 0, .n_blocks = 1489, .used = 150,
					  .cached = 600, .free = 739 },
					{ .node_os_index = 1, .n_blocks = 1489, .used = 151,
					  .cached = 607, .free = 731 },
				},
			},
			.index = { .entries = 1207 },
			.lookups = 30000, .hit_requests = 20001,
			.lookup_tokens = 7340032, .hit_tokens = 5000000,
			.queued = 5, .running = 64, .waiting_prefix = 3, .cancels_received = 17,
			.req_done = 29990, .req_cancelled = 17, .req_failed = 2,
			.prompt_tokens = 7340032, .cached_tokens = 5000000,
			.cache_creation_tokens = 2200000, .recomputed_tokens = 140032,
			.generated_tokens = 1920000,
			.queue_ms = 123456.789, .ttft_ms = 2345678.0625, .prefill_ms = 1999999.5,
			.decode_ms = 98765432.1,
			.ttft_samples = 30000, .ttft_p50_ms = 41.2345678, .ttft_p99_ms = 812.5,
			.queued_high = 1, .queued_normal = 3, .queued_low = 1, .preempted = 2,
			.preemptions = 321, .preempt_swapped = 123, .cached_tokens_disk = 65536,
			.swapped_tokens = 4096,
			.resume_computed_tokens = 777, .preempt_usage = 319,
			.itl_le = { 10, 40, 100, 5000, 900000, 1500000, 1800000, 1900000,
				    1910000, 1915000, 1917000, 1918500, 1919000, 1919500,
				    1919800, 1919900, 1919950, 1919990 },
			.itl_count = 1919990, .itl_sum_ms = 40123456.5,
			.itl_p50_ms = 21.5, .itl_p99_ms = 230.25, .itl_max_ms = 3001.125,
			.step_p50_ms = 18.75, .step_p99_ms = 140.5, .step_max_ms = 2999.5,
			.steps = 2100000, .decode_rows = 1919990, .spec_drafted = 800000, .spec_accepted = 500000, .prefill_steps = 90000,
			.prefill_tokens = 11000000,
			.step_target_ms = 33.75, .prefill_step_ms = 123.5,
			.calib_decode_ms = 13.5, .calib_call_ms = 12.3, .calib_token_ms = 1.3125,
			.tier_configured = 1,
			.tier = {
				.tier = { .slots = 32000, .file_bytes = 16ull << 30, .blocks = 20000,
					  .bytes = 7208960000ull, .writes = 45000,
					  .write_bytes = 23600000000ull, .reads = 12000,
					  .read_bytes = 6300000000ull, .checksum_failures = 2,
					  .reread_recovered = 5, .errors = 1, .rebuilt = 18000,
					  .orphans = 3, .scan_corrupt = 4, .scan_foreign = 6,
					  .type_resets = 1 },
				.offloaded = 40000, .offload_freed = 39990, .saved = 5000,
				.reloads = 11998, .reload_failures = 2, .flushes = 1,
				.write_mb_s = 812.5, .read_mb_s = 1450.25,
			},
			.remote = {
				.configured = true,
				.tier = { .breaker_opens = 2, .connects = 5, .errors = 7,
					  .fetches = 300, .hit_blocks = 9000,
					  .hit_bytes = 9000ull * 524288, .verify_failures = 3,
					  .publishes = 12000, .publish_drops = 40,
					  .publish_off_drops = 60, .stored = 11000, .already = 900,
					  .fetch_p50_ms = 12.5, .fetch_p99_ms = 250.25,
					  .rtt_ms = 0.125, .bw_mbps = 350.5,
					  .last_error = "unix:/run/redis.sock: connect: refused" },
				.offered = 12000, .fetch_blocks = 9500, .loaded_blocks = 8990,
			},
			.cached_tokens_remote = 143840,
		},
		.sched_policy = "fair",
		.tier_state = "on",
		.remote_state = "on",
		.tier_reload_p50_ms = 0.625, .tier_reload_p99_ms = 4.5, .tier_scan_ms = 812.125,
		.server = { .conns_open = 3, .conns_total = 120, .conns_refused = 1,
			    .frames_in = 90000, .frames_out = 2000000, .proto_errors = 4,
			    .slow_disconnects = 2 },
		.n_conns = 3,
		.conns = {
			{ .id = 0x100000001ull, .pid = 4242, .uid = 1000, .client = "kvpool/4242",
			  .domain = 0, .in_flight = 2, .requests = 77, .generated_tokens = 4900,
			  .cached_tokens = 12000 },
			{ .id = 0x200000005ull, .pid = 1, .uid = 0, .client = "app \"v2\" \\ x" },
			{ .id = 7, .pid = -1, .uid = -1 },
		},
		.n_domains = 1,
		.domains = { { .name = "default", .conns_open = 3, .requests = 30078 } },
	};
	for (int i = 0; i < 100; i++) {
		kvp_hist_observe_ms(&s->lat[KVP_LAT_TTFT], 20.0 + i * 30);
		kvp_hist_observe_ms(&s->lat[KVP_LAT_QUEUE], i * 0.5);
		kvp_hist_observe_ms(&s->lat[KVP_LAT_PREFILL], 10.0 + i * 25);
		kvp_hist_observe_ms(&s->lat[KVP_LAT_DECODE], 1000.0 + i * 400);
	}
	/* the prompt cache: derived figures as svc/stats.c fills them */
	s->sched.cache.miss[KVP_MISS_NONE] = 3;
	s->sched.cache.miss[KVP_MISS_EVICTED] = 1;
	s->sched.cache.evicted_tokens = 32;
	strcpy(s->cache.eviction, "lru");
	s->cache.request_hit_rate = 0.75;
	s->cache.cost_uncached = 1200;
	s->cache.cost_cached = 412.5;
	s->cache.n_top = 1;
	strcpy(s->cache.top[0].hash, "0123456789abcdef0123456789abcdef");
	s->cache.top[0].tokens = 64;
	s->cache.top[0].hits = 3;
	/* a second domain with its own policy and figures: its entry's "cache" object and
	 * the kvpool_domain_cache_* samples (the first domain's are all 0) */
	s->n_domains = 2;
	strcpy(s->domains[1].name, "research");
	s->domains[1].requests = 9;
	s->domains[1].priority = -10;
	s->domains[1].sched.cache_policy = (struct kvp_cache_policy){
		.ttl_default_s = 60, .ttl_max_s = 600, .min_tokens = 64,
		.pin_max_bytes = 8u << 20, .eviction = 1, .retain_default = 90,
		.cost_write_pct = 125, .cost_read_pct = 10 };
	s->domains[1].sched.cache.miss[KVP_MISS_NONE] = 2;
	s->domains[1].sched.cache.miss[KVP_MISS_BELOW_MINIMUM] = 4;
	s->domains[1].sched.cache.evicted_tokens = 16;
	s->domains[1].sched.pool.evictions = 5;
	s->domains[1].sched.cache.flushes = 1;
	s->domains[1].sched.cache.flushed_blocks = 7;
	strcpy(s->domains[1].cache.eviction, "lfu");
	s->domains[1].cache.request_hit_rate = 0.25;
	s->domains[1].cache.token_hit_rate = 0.125;
	s->domains[1].cache.tokens_saved = 96;
	s->domains[1].cache.flops_saved = 1.5e9;
	s->domains[1].cache.cost_uncached = 400;
	s->domains[1].cache.cost_cached = 330.5;
	s->domains[1].cache.n_top = 2;
	strcpy(s->domains[1].cache.top[0].hash, "fedcba9876543210fedcba9876543210");
	s->domains[1].cache.top[0].tokens = 80;
	s->domains[1].cache.top[0].hits = 5;
	strcpy(s->domains[1].cache.top[1].hash, "00000000000000010000000000000002");
	s->domains[1].cache.top[1].tokens = 16;
	s->domains[1].cache.top[1].hits = 1;
}
/* clang-format on */

/* Read tests/unit/golden/@name (KVP_SOURCE_DIR) into a malloc'd NUL-terminated buffer. */
static char *golden(const char *name, size_t *len)
{
	const char *src = getenv("KVP_SOURCE_DIR");
	char path[1024];
	char *buf;

	snprintf(path, sizeof(path), "%s/tests/unit/golden/%s", src ? src : ".", name);
	buf = kvp_test_read_file(path, len);
	assert_non_null(buf);
	return buf;
}

/*
 * With KVP_GOLDEN_RECORD=1 in the environment the test writes the files instead (to
 * record a deliberate change of the output; the diff then shows it).
 */
static void check_golden(const char *name, const char *out, size_t n)
{
	char *want;
	size_t len;

	if (getenv("KVP_GOLDEN_RECORD")) {
		const char *src = getenv("KVP_SOURCE_DIR");
		char path[1024];
		FILE *f;

		snprintf(path, sizeof(path), "%s/tests/unit/golden/%s", src ? src : ".", name);
		f = fopen(path, "wb");
		assert_non_null(f);
		assert_int_equal(fwrite(out, 1, n, f), n);
		fclose(f);
		return;
	}
	want = golden(name, &len);
	assert_int_equal(n, len);
	assert_memory_equal(out, want, n);
	free(want);
}

static void test_output_matches_golden(void **state)
{
	struct kvp_status_snap *s = calloc(1, sizeof(*s));
	static char buf[65536];
	int n;

	/* byte for byte what earlier releases printed for the same figures */
	assert_non_null(s);
	fill_busy(s);
	n = kvp_status_render_json(s, buf, sizeof(buf));
	assert_true(n > 0);
	check_golden("status.json", buf, (size_t)n);
	n = kvp_status_render_prom(s, buf, sizeof(buf));
	assert_true(n > 0);
	check_golden("status.prom", buf, (size_t)n);
	free(s);
}

static void test_json_parses_with_values(void **state)
{
	struct kvp_status_snap *s = calloc(1, sizeof(*s));
	static char buf[65536];
	struct jsonq *j;
	int n;

	/* every documented field is present with the snapshot's value */
	fill(s);
	n = kvp_status_render_json(s, buf, sizeof(buf));
	assert_true(n > 0);
	assert_int_equal(strlen(buf), n);
	j = jsonq_parse(buf, (size_t)n);
	assert_non_null(j);
	assert_string_equal(jsonq_str(j, "daemon.model"), "demo \"q\"\\\n\x01");
	assert_string_equal(jsonq_str(j, "pool.page_kind"), "4K");
	assert_true(jsonq_num(j, "pool.bytes_per_token", -1) == 1032192.5);
	assert_int_equal(jsonq_num(j, "pool.bytes_per_token_f32", -1), 2064384);
	assert_int_equal(jsonq_num(j, "pool.blocks_total", -1), 1000);
	assert_int_equal(jsonq_num(j, "pool.blocks_used", -1), 10);
	assert_int_equal(jsonq_num(j, "pool.blocks_cached", -1), 90);
	assert_int_equal(jsonq_num(j, "pool.blocks_free", -1), 900);
	assert_int_equal(jsonq_num(j, "pool.arenas.1.node", -1), 1);
	assert_int_equal(jsonq_num(j, "pool.arenas.1.blocks_free", -1), 450);
	assert_int_equal(jsonq_num(j, "index.entries", -1), 95);
	assert_int_equal(jsonq_num(j, "index.lookups", -1), 8);
	assert_int_equal(jsonq_num(j, "index.evictions", -1), 7);
	assert_float_equal(jsonq_num(j, "index.request_hit_rate", -1), 0.75, 1e-9);
	assert_float_equal(jsonq_num(j, "index.token_hit_rate", -1), 0.75, 1e-9);
	assert_int_equal(jsonq_num(j, "scheduler.queued", -1), 2);
	assert_int_equal(jsonq_num(j, "scheduler.running", -1), 3);
	assert_int_equal(jsonq_num(j, "scheduler.cancels_received", -1), 6);
	assert_float_equal(jsonq_num(j, "scheduler.ttft_p50_ms", -1), 12.5, 1e-9);
	assert_float_equal(jsonq_num(j, "scheduler.ttft_p99_ms", -1), 0, 0);
	/* the usage sums carry every DONE usage name */
	assert_int_equal(jsonq_num(j, "usage.prompt_tokens", -1), 4100);
	assert_int_equal(jsonq_num(j, "usage.cached_tokens", -1), 3000);
	assert_int_equal(jsonq_num(j, "usage.cache_creation_tokens", -1), 48);
	assert_int_equal(jsonq_num(j, "usage.recomputed_tokens", -1), 1100);
	assert_int_equal(jsonq_num(j, "usage.generated_tokens", -1), 170);
	assert_float_equal(jsonq_num(j, "usage.queue_ms", -1), 1234567.125, 1e-9);
	assert_float_equal(jsonq_num(j, "usage.ttft_ms", -1), 2.5, 1e-9);
	assert_float_equal(jsonq_num(j, "usage.prefill_ms", -1), 3.25, 1e-9);
	assert_float_equal(jsonq_num(j, "usage.decode_ms", -1), 400.5, 1e-9);
	assert_int_equal(jsonq_num(j, "connections.open", -1), 2);
	assert_int_equal(jsonq_num(j, "connections.list.1.uid", -1), 1000);
	assert_int_equal(jsonq_num(j, "connections.list.1.in_flight", -1), 1);
	assert_string_equal(jsonq_str(j, "connections.list.1.client"), "app \"v2\"\\");
	assert_string_equal(jsonq_str(j, "connections.list.0.client"), "");
	assert_string_equal(jsonq_str(j, "domains.0.name"), "default");
	jsonq_free(j);
	free(s);
}

static void test_domain_cache_figures(void **state)
{
	struct kvp_status_snap *s = calloc(1, sizeof(*s));
	static char buf[65536];
	struct jsonq *j;
	int n;

	/* each domains[] entry carries the cache section's members, from its own figures */
	assert_non_null(s);
	fill_busy(s);
	n = kvp_status_render_json(s, buf, sizeof(buf));
	assert_true(n > 0);
	j = jsonq_parse(buf, (size_t)n);
	assert_non_null(j);
	assert_string_equal(jsonq_str(j, "domains.1.name"), "research");
	assert_string_equal(jsonq_str(j, "domains.1.cache.eviction"), "lfu");
	assert_int_equal(jsonq_num(j, "domains.1.cache.min_tokens", -1), 64);
	assert_int_equal(jsonq_num(j, "domains.1.cache.ttl_default_s", -1), 60);
	assert_int_equal(jsonq_num(j, "domains.1.cache.pin_max_bytes", -1), 8 << 20);
	assert_int_equal(jsonq_num(j, "domains.1.cache.retain_default", -1), 90);
	assert_float_equal(jsonq_num(j, "domains.1.cache.request_hit_rate", -1), 0.25, 0);
	assert_float_equal(jsonq_num(j, "domains.1.cache.token_hit_rate", -1), 0.125, 0);
	assert_int_equal(jsonq_num(j, "domains.1.cache.tokens_saved", -1), 96);
	assert_float_equal(jsonq_num(j, "domains.1.cache.prefill_flops_saved", -1), 1.5e9, 0);
	assert_int_equal(jsonq_num(j, "domains.1.cache.evictions", -1), 5);
	assert_int_equal(jsonq_num(j, "domains.1.cache.recomputed_tokens", -1), 16);
	assert_int_equal(jsonq_num(j, "domains.1.cache.miss_below_minimum", -1), 4);
	assert_int_equal(jsonq_num(j, "domains.1.cache.flushed_blocks", -1), 7);
	assert_float_equal(jsonq_num(j, "domains.1.cache.cost_cached", -1), 330.5, 0);
	assert_int_equal(jsonq_num(j, "domains.1.cache.top_prefixes.0.hits", -1), 5);
	assert_int_equal(jsonq_num(j, "domains.1.cache.top_prefixes.1.tokens", -1), 16);
	assert_int_equal(jsonq_get(j, "domains.1.cache.top_prefixes")->n_children, 2);
	/* the other domain's are its own, not the sums */
	assert_int_equal(jsonq_num(j, "domains.0.cache.miss_none", -1), 0);
	assert_int_equal(jsonq_get(j, "domains.0.cache.top_prefixes")->n_children, 0);
	assert_int_equal(jsonq_num(j, "cache.miss_none", -1), 3);
	jsonq_free(j);

	/* Prometheus: the cache families again, labelled by domain */
	n = kvp_status_render_prom(s, buf, sizeof(buf));
	assert_true(n > 0);
	assert_non_null(strstr(buf, "\nkvpool_domain_cache_requests_total{domain=\"research\","
				    "miss_reason=\"below_minimum\"} 4\n"));
	assert_non_null(strstr(buf, "\nkvpool_domain_cache_request_hit_ratio{domain="
				    "\"research\"} 0.25\n"));
	assert_non_null(strstr(buf, "\nkvpool_domain_cache_prefix_hits{domain=\"research\",hash="
				    "\"fedcba9876543210fedcba9876543210\",tokens=\"80\"} 5\n"));
	assert_non_null(strstr(buf, "\nkvpool_domain_cache_recomputed_tokens_total{domain="
				    "\"default\"} 0\n"));
	/* each family declared once */
	assert_non_null(strstr(buf, "# TYPE kvpool_domain_cache_requests_total counter\n"));
	assert_null(strstr(strstr(buf, "# TYPE kvpool_domain_cache_requests_total") + 1,
			   "# TYPE kvpool_domain_cache_requests_total"));
	free(s);
}

static void test_empty_snapshot_is_valid(void **state)
{
	struct kvp_status_snap *s = calloc(1, sizeof(*s));
	char buf[8192];
	struct jsonq *j;
	int n;

	/* nothing served yet: rates are 0, arrays empty, still valid JSON */
	n = kvp_status_render_json(s, buf, sizeof(buf));
	assert_true(n > 0);
	j = jsonq_parse(buf, (size_t)n);
	assert_non_null(j);
	assert_float_equal(jsonq_num(j, "index.token_hit_rate", -1), 0, 0);
	assert_int_equal(jsonq_get(j, "pool.arenas")->n_children, 0);
	jsonq_free(j);
	free(s);
}

static void test_small_buffer_enospc(void **state)
{
	struct kvp_status_snap *s = calloc(1, sizeof(*s));
	static char buf[65536];
	int full;
	int n;

	/* every buffer shorter than the report fails whole; the exact size fits */
	fill(s);
	full = kvp_status_render_json(s, buf, sizeof(buf));
	assert_true(full > 0);
	for (n = 0; n <= full; n += 7)
		assert_int_equal(kvp_status_render_json(s, buf, (size_t)n), -ENOSPC);
	assert_int_equal(kvp_status_render_json(s, buf, (size_t)full + 1), full);
	full = kvp_status_render_prom(s, buf, sizeof(buf));
	assert_true(full > 0);
	assert_int_equal(kvp_status_render_prom(s, buf, (size_t)full), -ENOSPC);
	free(s);
}

static void test_prom_text(void **state)
{
	struct kvp_status_snap *s = calloc(1, sizeof(*s));
	static char buf[65536];
	const char *p;
	int n;

	/* families declared once, samples carry the snapshot figures */
	fill(s);
	n = kvp_status_render_prom(s, buf, sizeof(buf));
	assert_true(n > 0);
	assert_non_null(strstr(buf, "kvpool_pool_blocks{state=\"used\"} 10\n"));
	assert_non_null(strstr(buf, "kvpool_pool_blocks{state=\"free\"} 900\n"));
	assert_non_null(strstr(buf, "kvpool_pool_page_kind{kind=\"4K\"} 1\n"));
	assert_non_null(strstr(buf, "kvpool_arena_blocks{node=\"1\",state=\"cached\"} 45\n"));
	assert_non_null(strstr(buf, "kvpool_index_token_hit_rate 0.75\n"));
	/* latency as histograms (no quantile gauges): cumulative buckets, sum, count */
	assert_null(strstr(buf, "quantile"));
	assert_non_null(strstr(buf, "# TYPE kvpool_ttft_seconds histogram\n"));
	assert_non_null(strstr(buf, "kvpool_ttft_seconds_bucket{le=\"0.005\"} 1\n"));
	assert_non_null(strstr(buf, "kvpool_ttft_seconds_bucket{le=\"0.025\"} 1\n"));
	assert_non_null(strstr(buf, "kvpool_ttft_seconds_bucket{le=\"0.05\"} 2\n"));
	assert_non_null(strstr(buf, "kvpool_ttft_seconds_bucket{le=\"300\"} 2\n"));
	assert_non_null(strstr(buf, "kvpool_ttft_seconds_bucket{le=\"+Inf\"} 3\n"));
	assert_non_null(strstr(buf, "kvpool_ttft_seconds_sum 900.043\n"));
	assert_non_null(strstr(buf, "kvpool_ttft_seconds_count 3\n"));
	assert_non_null(strstr(buf, "# TYPE kvpool_queue_seconds histogram\n"));
	assert_non_null(strstr(buf, "kvpool_prefill_seconds_count 0\n"));
	assert_non_null(strstr(buf, "kvpool_decode_seconds_bucket{le=\"+Inf\"} 0\n"));
	/* build and model as info gauges; label values escaped */
	assert_non_null(strstr(buf, "kvpool_build_info{version=\"0.1.0\"} 1\n"));
	assert_non_null(strstr(buf, "kvpool_model_info{name=\"demo \\\"q\\\"\\\\\\n?\","
				    "fingerprint=\"00112233445566778899aabbccddeeff\"} 1\n"));
	assert_non_null(strstr(buf, "kvpool_request_seconds_total{phase=\"decode\"} 0.4005\n"));
	assert_non_null(strstr(buf, "kvpool_sched_cancels_received_total 6\n"));
	p = strstr(buf, "# TYPE kvpool_pool_blocks gauge");
	assert_non_null(p);
	assert_null(strstr(p + 1, "# TYPE kvpool_pool_blocks gauge"));
	assert_null(strstr(buf, "nan"));
	free(s);
}

static void test_jsonq_is_strict(void **state)
{
	const char *bad[] = {
		"{\"a\":1,}",	       "[01]", "{\"a\" 1}", "\"\x01\"", "[1] x", "NaN",
		"{\"a\":\"\\ud800\"}", "[",    ""
	};
	struct jsonq *j;

	/* the checker used on the status output refuses what real parsers refuse */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_null(jsonq_parse(bad[i], strlen(bad[i])));
	{
		const char *ok = " {\"a\":[1,-2.5e3,true,null,\"\\u00e9\"]} ";

		j = jsonq_parse(ok, strlen(ok));
	}
	assert_non_null(j);
	assert_float_equal(jsonq_num(j, "a.1", 0), -2500, 0);
	assert_string_equal(jsonq_str(j, "a.4"), "\xc3\xa9");
	jsonq_free(j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json_parses_with_values),
		cmocka_unit_test(test_domain_cache_figures),
		cmocka_unit_test(test_empty_snapshot_is_valid),
		cmocka_unit_test(test_small_buffer_enospc),
		cmocka_unit_test(test_prom_text),
		cmocka_unit_test(test_jsonq_is_strict),
		cmocka_unit_test(test_output_matches_golden),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
