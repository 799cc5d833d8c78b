/* SPDX-License-Identifier: MIT */
/*
 * bench_remote_daemon.c - what the remote tier buys (and costs) kvpoold, each figure next
 * to its same-run baseline, two real daemons and one real redis-server (Unix socket):
 *
 *  1. time to first token on host B of a prompt whose first PREFIX tokens host A computed
 *     and published (fetched: usage.cached_tokens_remote = PREFIX) against the same
 *     prompt computed from scratch on A; the ratio is the point (issue target <= 0.05);
 *  2. TTFT and decode time per token of fresh prompts on a host publishing every block
 *     (remote.publish = all) against the same host with remote.publish = off, requests
 *     alternating between the two (issue target <= 1.05).
 *
 * Demo model by default (KVP_BENCH_PRESET=1b for the 1b preset in f32 weights);
 * KVP_BENCH_PREFIX (default 4096) and KVP_BENCH_RUNS (default 2) keep runs short on a
 * shared machine.  The CPU regime is printed before and after.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvpool/kvpool.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/redisfix.h"
#include "tests/lib/testlib.h"

#define TAIL 16
#define MAX_RUNS 9
#define DECODE_TOKENS 64
#define PUB_PROMPT 1024

static uint64_t rng = 0x2545f4914f6cdd1dull;

static void fill(int32_t *t, uint32_t n)
{
	kvp_test_fill_ids(&rng, t, n, 250);
}

static int start(struct kvpd *d, const char *model, const char *url, const char *publish)
{
	char pub[64];
	const char *args[] = { "--model",
			       model,
			       "--pool-size",
			       "1G",
			       "--ignore-eos",
			       "--remote",
			       url,
			       "--set",
			       pub,
			       "--set",
			       "remote.fetch_timeout_ms=10000",
			       "--max-prompt-tokens",
			       "16384",
			       NULL };

	snprintf(pub, sizeof(pub), "remote.publish=%s", publish);
	if (kvpd_start(d, 900, args)) {
		kvpd_dump_log(d);
		return -1;
	}
	return 0;
}

/* One request of @n_new tokens; client-side TTFT (ms) or < 0; usage in @u. */
static double request(struct kvpd *d, const int32_t *prompt, uint32_t n, uint32_t n_new,
		      struct kvp_usage *u)
{
	struct kvp_client_prompt pr = { .tokens = prompt, .n_tokens = n };
	struct kvp_client_params p;
	struct kvp_client *k = NULL;
	double t0;
	int r;

	kvp_client_params_init(&p);
	p.max_new_tokens = n_new;
	r = kvp_client_connect(&k, d->sock);
	t0 = kvp_test_now_s();
	if (!r)
		r = kvp_client_generate(k, &pr, &p, NULL, NULL, u);
	kvp_client_close(k);
	return r ? -1 : u->ttft_ms > 0 ? u->ttft_ms : (kvp_test_now_s() - t0) * 1e3;
}

static double status_num(struct kvpd *d, const char *path)
{
	return kvpd_status_num(d, path, -1);
}

/* Until A's store answered @want publishes (stored or there already), at most 120 s. */
static int wait_published(struct kvpd *a, double want)
{
	for (int i = 0; i < 6000; i++) {
		if (status_num(a, "remote.stored") + status_num(a, "remote.already") >= want)
			return 0;
		usleep(20000);
	}
	return -1;
}

static int bench_fetch(const char *model, const char *url, uint32_t prefix, int runs)
{
	static int32_t prompt[16384 + TAIL];
	double cold[MAX_RUNS], remote[MAX_RUNS];
	struct kvpd a, b;
	struct kvp_usage u;
	char name[160];
	int rc = -1;

	if (kvpd_init(&a) || kvpd_init(&b) || start(&a, model, url, "all") ||
	    start(&b, model, url, "all"))
		goto out;
	fill(prompt, 64);
	request(&a, prompt, 64, 1, &u); /* warm-up of both */
	request(&b, prompt, 64, 1, &u);
	for (int r = 0; r < runs; r++) {
		double before = status_num(&a, "remote.stored") + status_num(&a, "remote.already");

		fill(prompt, prefix + TAIL);
		cold[r] = request(&a, prompt, prefix + TAIL, 1, &u);
		if (cold[r] < 0 || u.cached_tokens || wait_published(&a, before + prefix / 16) < 0)
			goto out;
		remote[r] = request(&b, prompt, prefix + TAIL, 1, &u);
		printf("  run %d: computed on A %.0f ms; on B from the store %.1f ms "
		       "(cached_tokens_remote %u, computed %u)\n",
		       r, cold[r], remote[r], u.cached_tokens_remote, u.recomputed_tokens);
		if (remote[r] < 0 || u.cached_tokens_remote != prefix) {
			printf("  B: holes %.0f, cost skips %.0f, deadline cuts %.0f, verify "
			       "failures %.0f, rtt %.3f ms, %.0f MB/s: %s\n",
			       status_num(&b, "remote.holes"), status_num(&b, "remote.cost_skips"),
			       status_num(&b, "remote.deadline_cuts"),
			       status_num(&b, "remote.verify_failures"),
			       status_num(&b, "remote.rtt_ms"), status_num(&b, "remote.bw_mbps"),
			       "not all fetched");
			goto out;
		}
	}
	printf("  B: fetch p50 %.1f ms, p99 %.1f ms, rtt %.3f ms, %.0f MB/s\n",
	       status_num(&b, "remote.fetch_p50_ms"), status_num(&b, "remote.fetch_p99_ms"),
	       status_num(&b, "remote.rtt_ms"), status_num(&b, "remote.bw_mbps"));
	snprintf(name, sizeof(name), "TTFT, %u-token prefix fetched from the remote store", prefix);
	kvp_bench_report(name, kvp_test_median(remote, runs), "ms", "computed from scratch",
			 kvp_test_median(cold, runs), "ms");
	rc = 0;
out:
	kvpd_cleanup(&b);
	kvpd_cleanup(&a);
	return rc;
}

static int bench_publish(const char *model, const char *url, int runs)
{
	static int32_t prompt[PUB_PROMPT];
	double ttft[2][MAX_RUNS], dec[2][MAX_RUNS];
	struct kvpd d[2]; /* [0] publish = all, [1] publish = off */
	struct kvp_usage u;
	int rc = -1;

	if (kvpd_init(&d[0]) || kvpd_init(&d[1]) || start(&d[0], model, url, "all") ||
	    start(&d[1], model, url, "off"))
		goto out;
	fill(prompt, 64);
	request(&d[0], prompt, 64, 1, &u);
	request(&d[1], prompt, 64, 1, &u);
	for (int r = 0; r < runs; r++) {
		for (int k = 0; k < 2; k++) {
			int i = (r & 1) ? 1 - k : k; /* alternate which goes first */

			fill(prompt, PUB_PROMPT);
			ttft[i][r] = request(&d[i], prompt, PUB_PROMPT, DECODE_TOKENS, &u);
			if (ttft[i][r] < 0 || u.generated_tokens < 2)
				goto out;
			dec[i][r] = u.decode_ms / (u.generated_tokens - 1);
		}
		printf("  run %d: publish on: TTFT %.0f ms, decode %.2f ms/token; off: TTFT %.0f "
		       "ms, decode %.2f ms/token\n",
		       r, ttft[0][r], dec[0][r], ttft[1][r], dec[1][r]);
	}
	printf("  publishing host: %.0f blocks offered, %.0f stored, %.0f dropped\n",
	       status_num(&d[0], "remote.offered"), status_num(&d[0], "remote.stored"),
	       status_num(&d[0], "remote.publish_drops") +
		       status_num(&d[0], "remote.backlog_drops"));
	kvp_bench_report("TTFT of a 1,024-token prompt, publishing on",
			 kvp_test_median(ttft[0], runs), "ms", "publishing off",
			 kvp_test_median(ttft[1], runs), "ms");
	kvp_bench_report("decode per token (64 tokens), publishing on",
			 kvp_test_median(dec[0], runs), "ms", "publishing off",
			 kvp_test_median(dec[1], runs), "ms");
	rc = 0;
out:
	kvpd_cleanup(&d[1]);
	kvpd_cleanup(&d[0]);
	return rc;
}

int main(void)
{
	const char *preset = getenv("KVP_BENCH_PRESET") ? getenv("KVP_BENCH_PRESET") : "demo";
	uint32_t prefix = getenv("KVP_BENCH_PREFIX") ? (uint32_t)atoi(getenv("KVP_BENCH_PREFIX")) :
						       4096;
	int runs = getenv("KVP_BENCH_RUNS") ? atoi(getenv("KVP_BENCH_RUNS")) : 2;
	struct redisfix rf = { 0 };
	struct kvpd md;
	char model[600];
	int r;

	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (runs < 1 || runs > MAX_RUNS || prefix < 16 || prefix > 16384 || prefix % 16) {
		fprintf(stderr, "KVP_BENCH_RUNS 1..%d, KVP_BENCH_PREFIX a multiple of 16\n",
			MAX_RUNS);
		return 1;
	}
	r = redisfix_start(&rf, NULL);
	if (r == -ENOENT) {
		printf("redis-server not installed (tests/deps.sh): skipped\n");
		return KVP_TEST_SKIP;
	}
	if (r || kvpd_init(&md) || kvpd_model(&md, preset, model, sizeof(model))) {
		redisfix_stop(&rf);
		return 1;
	}
	kvp_bench_cpu_regime(1000);
	printf("%s model, one redis-server on a Unix socket, %d runs\n", preset, runs);
	r = bench_fetch(model, rf.url_unix, prefix, runs);
	if (!r)
		r = bench_publish(model, rf.url_unix, runs + 1);
	kvp_bench_cpu_regime(1000);
	kvpd_cleanup(&md);
	redisfix_stop(&rf);
	if (r)
		fprintf(stderr, "bench_remote_daemon: a run failed\n");
	return r ? 1 : 0;
}
