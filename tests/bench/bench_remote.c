/* SPDX-License-Identifier: MIT */
/*
 * bench_remote.c - the remote tier against redis-benchmark on the same redis-server, in
 * the same run, with the same value size (issue 15; target: ratio >= 0.5):
 *
 *  1. write: one host publishes a chain of NB blocks of a 1B-class model (16 layers x 8
 *     KV heads x 64 x f16 x 16 tokens: 512 KiB of K/V, a 528,384-byte record), from
 *     the first publish to the last SET answered (encode, checksum, copy, SET NX EX on
 *     one connection), against `redis-benchmark -t set -d 528384 -c 1 -P 8` storing new
 *     keys (-r 10^9), as publishing does;
 *  2. read: another host fetches the chain: the existence check, then pipelined GETs,
 *     every record checked and its K/V copied into a pool block, against
 *     `redis-benchmark -t get` of values of the same size (which checks nothing);
 *  3. the fetch of 4,096 tokens' worth of blocks (256 blocks), submit to completion, in
 *     milliseconds: the figure to compare with recomputing 4,096 tokens on the 1b preset
 *     once the daemon wiring measures that (issue 15, phase 2).
 *
 * Both over TCP to 127.0.0.1 (the store's usual transport; loopback, so the network is
 * memory copies and the figures are the client's and the server's CPU).  RUNS runs; each
 * tier figure right after its redis-benchmark run; printed: medians, their ratio, and the
 * median of the per-pair ratios.  The server is started here in a temporary directory
 * and stopped at the end (only that process).
 */
#include <errno.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm/pool.h"
#include "shm/remote/acl.h"
#include "shm/remote/remote.h"
#include "tests/lib/redisfix.h"
#include "tests/lib/testlib.h"

#ifndef RUNS
#define RUNS 5
#endif
#define NB 256 /* 4,096 tokens */
#define BT 16

static const struct kvp_model_shape shape = {
	.n_layers = 16,
	.n_kv_heads = 8,
	.head_dim = 64,
	.dtype = KVP_DTYPE_F16,
	.block_tokens = BT,
};
static const uint8_t fp[16] = "bench-remote-1b";

static struct redisfix rf;

static void die(const char *what, int err)
{
	fprintf(stderr, "bench_remote: %s: %s\n", what, strerror(err < 0 ? -err : err));
	redisfix_stop(&rf);
	exit(1);
}

/*
 * requests/s of one redis-benchmark test ("SET" or "GET") from its CSV output.  SET: keys
 * drawn from 10^9 (every SET stores a new key, as every published block does: the store
 * allocates and faults in fresh memory for each; overwriting a few keys, redis-benchmark's
 * usual -r, measured 5-6x faster here because the store reuses the memory).  GET: 16 keys
 * written first by the same invocation (the tier's fetches read distinct keys too, but a
 * GET costs the store the same for any existing key).
 */
static double rb_rps(const char *test, size_t value_bytes)
{
	char cmd[512], line[512], want[16];
	bool set = !strcmp(test, "SET");
	double rps = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "redis-benchmark -h 127.0.0.1 -p %u -t %s -d %zu -n %d -c 1 -P 8 -r %s "
		 "--csv 2>/dev/null",
		 rf.port, set ? "set" : "set,get", value_bytes, NB, set ? "1000000000" : "16");
	snprintf(want, sizeof(want), "\"%s\",\"", test);
	p = popen(cmd, "r");
	if (!p)
		die("popen redis-benchmark", errno);
	while (fgets(line, sizeof(line), p))
		if (!strncmp(line, want, strlen(want)))
			rps = strtod(line + strlen(want), NULL);
	pclose(p);
	if (rps <= 0)
		die("redis-benchmark gave no figure", EIO);
	return rps;
}

static void flushall(void)
{
	redisContext *a = redisfix_admin(&rf);
	redisReply *r = a ? redisCommand(a, "FLUSHALL") : NULL;

	if (!r)
		die("FLUSHALL", EIO);
	freeReplyObject(r);
	redisFree(a);
}

int main(void)
{
	double w_tier[RUNS], w_rb[RUNS], r_tier[RUNS], r_rb[RUNS], f_ms[RUNS], wr[RUNS], rr[RUNS];
	struct kvp_pool_config pc = { .shape = shape, .n_blocks = NB, .pages = KVP_PAGES_AUTO };
	struct kvp_pool *pa, *pb;
	struct kvp_remote *ra, *rbk;
	struct kvp_remote_config cfg;
	uint32_t ba[NB], bb[NB], id;
	uint32_t *tokens = malloc(sizeof(uint32_t) * NB * BT);
	void *dest[NB];
	char err[512], line[512];
	size_t vb, kvb;
	uint64_t seed = 42;
	int r;

	kvp_remote_tune_malloc(); /* as kvpoold does at start-up */
	signal(SIGPIPE, SIG_IGN);
	if (!redisfix_available() || system("command -v redis-benchmark >/dev/null 2>&1")) {
		printf("redis-server / redis-benchmark not installed (tests/deps.sh): skipped\n");
		return KVP_TEST_SKIP;
	}
	r = redisfix_start(&rf, NULL);
	if (r < 0)
		die("redis-server", r);
	kvp_remote_config_defaults(&cfg);
	if (kvp_remote_config_set(&cfg, "url", rf.url_tcp, err, sizeof(err)) < 0 ||
	    kvp_remote_config_add_domain(&cfg, &id, "bench", "kvp-bench", "pw", err, sizeof(err)) <
		    0)
		die(err, EINVAL);
	cfg.fetch_timeout_ms = 30000;
	cfg.max_fetch_blocks = NB;
	{
		redisContext *a = redisfix_admin(&rf);

		if (!a ||
		    kvp_remote_acl_domain(line, sizeof(line), &cfg.domains[0],
					  KVP_REMOTE_ACL_COMMAND) < 0 ||
		    redisfix_line(a, line, err, sizeof(err)) < 0)
			die("ACL SETUSER", EIO);
		redisFree(a);
	}
	r = kvp_pool_new(&pa, &pc);
	if (!r)
		r = kvp_pool_new(&pb, &pc);
	if (r < 0)
		die("pool", r);
	if (kvp_remote_new(&ra, &cfg, &shape, fp, "avx2", err, sizeof(err)) < 0 ||
	    kvp_remote_new(&rbk, &cfg, &shape, fp, "avx2", err, sizeof(err)) < 0 ||
	    kvp_remote_wait_ready(ra, 5000, err, sizeof(err)) < 0 ||
	    kvp_remote_wait_ready(rbk, 5000, err, sizeof(err)) < 0)
		die(err, EIO);
	vb = kvp_remote_value_bytes(ra);
	kvb = kvp_remote_block_bytes(ra);
	for (int i = 0; i < NB; i++) {
		if (kvp_pool_alloc(pa, KVP_NODE_ANY, &ba[i]) < 0 ||
		    kvp_pool_alloc(pb, KVP_NODE_ANY, &bb[i]) < 0)
			die("pool alloc", ENOMEM);
		for (size_t j = 0; j < kvb; j += 8) {
			uint64_t v = kvp_test_xorshift(&seed);

			memcpy(kvp_pool_data(pa, ba[i]) + j, &v, 8);
		}
		dest[i] = kvp_pool_data(pb, bb[i]);
	}
	printf("remote tier vs redis-benchmark: %d blocks of %zu K/V bytes (%zu-byte records), "
	       "TCP 127.0.0.1, %d runs\n",
	       NB, kvb, vb, RUNS);
	kvp_bench_cpu_regime(300);

	/* run -1 warms up (first faults of the store's and our buffers): not counted */
	for (int run = -1; run < RUNS; run++) {
		struct kvp_prefix_key key;
		struct kvp_extra_keys ek = { .kv_dtype = shape.dtype };
		struct kvp_remote_done d[64];
		struct kvp_remote_fetch f = { .n_blocks = NB, .key = &key, .dest = dest };
		struct kvp_h128 h;
		int slot = run < 0 ? 0 : run; /* the warm-up's figures are overwritten */
		uint64_t t0;
		int got = 0;

		for (int i = 0; i < NB * BT; i++)
			tokens[i] = (uint32_t)(kvp_test_xorshift(&seed) % 128000);
		memcpy(ek.model_fp, fp, 16);
		ek.salt_len = 4;
		memcpy(ek.salt, &run, 4);
		kvp_prefix_key_init(&key, &ek);

		flushall();
		w_rb[slot] = rb_rps("SET", vb) * (double)vb / 1e6;
		flushall();
		r_rb[slot] = rb_rps("GET", vb) * (double)vb / 1e6;
		flushall();

		/* write: every block published, until the last SET is answered */
		t0 = kvp_test_now_ns();
		h = key.seed;
		for (int i = 0; i < NB;) {
			struct kvp_index_rec rec = { .phash = h,
						     .key = key,
						     .tokens = tokens + i * BT };

			rec.hash = kvp_chain_hash(h, rec.tokens, BT);
			r = kvp_remote_publish(ra, 0, KVP_REMOTE_WHY_CREATED, &rec,
					       kvp_pool_data(pa, ba[i]), (uint64_t)i);
			if (r == -ENOBUFS) {
				kvp_remote_wait(ra, 100);
				kvp_remote_poll(ra, d, 64);
				continue;
			}
			if (r < 0)
				die("publish", r);
			h = rec.hash;
			i++;
		}
		if (kvp_remote_drain(ra, 60000) < 0)
			die("drain", ETIMEDOUT);
		w_tier[slot] = (double)NB * (double)vb / ((double)(kvp_test_now_ns() - t0) / 1e9) /
			       1e6;
		while (kvp_remote_poll(ra, d, 64) > 0)
			;

		/* read: the whole chain fetched, checked, copied into pool blocks */
		f.parent_hash = key.seed;
		f.tokens = tokens;
		t0 = kvp_test_now_ns();
		if (kvp_remote_fetch(rbk, &f) < 0)
			die("fetch", EIO);
		while (!got) {
			kvp_remote_wait(rbk, 1000);
			for (int i = 0, n = kvp_remote_poll(rbk, d, 64); i < n; i++)
				if (d[i].kind == KVP_REMOTE_DONE_FETCH) {
					if (d[i].result != NB) {
						struct kvp_remote_stats st;

						kvp_remote_stats(rbk, 0, &st);
						fprintf(stderr,
							"fetch: %d of %u found, stop %s (%s) rtt %.3f ms bw %.0f MB/s\n",
							d[i].result, d[i].n_found,
							kvp_remote_stop_name(d[i].stop),
							st.last_error, st.rtt_ms, st.bw_mbps);
						die("fetch incomplete", EIO);
					}
					got = 1;
				}
		}
		f_ms[slot] = (double)(kvp_test_now_ns() - t0) / 1e6;
		r_tier[slot] = (double)NB * (double)vb / (f_ms[slot] / 1e3) / 1e6;
		wr[slot] = w_tier[slot] / w_rb[slot];
		rr[slot] = r_tier[slot] / r_rb[slot];
		if (run < 0)
			continue;
		printf("run %d: write %.0f MB/s (redis-benchmark %.0f), read %.0f MB/s "
		       "(redis-benchmark %.0f), 4096-token fetch %.1f ms\n",
		       run + 1, w_tier[slot], w_rb[slot], r_tier[slot], r_rb[slot], f_ms[slot]);
	}

	kvp_bench_report("remote write (publish, SET NX EX)", kvp_test_median(w_tier, RUNS), "MB/s",
			 "redis-benchmark SET -c 1 -P 8, new keys", kvp_test_median(w_rb, RUNS),
			 "MB/s");
	printf("  median of per-run ratios: %.2f\n", kvp_test_median(wr, RUNS));
	kvp_bench_report("remote read (fetch, checked, copied)", kvp_test_median(r_tier, RUNS),
			 "MB/s", "redis-benchmark GET -c 1 -P 8", kvp_test_median(r_rb, RUNS),
			 "MB/s");
	printf("  median of per-run ratios: %.2f\n", kvp_test_median(rr, RUNS));
	printf("remote fetch of 4096 tokens (256 blocks, 1b geometry): %.1f ms median\n",
	       kvp_test_median(f_ms, RUNS));

	kvp_remote_free(ra);
	kvp_remote_free(rbk);
	kvp_pool_free(pa);
	kvp_pool_free(pb);
	free(tokens);
	redisfix_stop(&rf);
	return 0;
}
