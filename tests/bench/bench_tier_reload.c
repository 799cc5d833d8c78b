/* SPDX-License-Identifier: MIT */
/*
 * bench_tier_reload.c - what the disk tier buys kvpoold, each figure next to its
 * same-run baseline:
 *
 *  1. time to first token of a prompt whose first 4,096 tokens are in the disk tier
 *     (read back: usage.cached_tokens_disk = 4,096) against the same prompt computed
 *     from scratch, on the demo model and on the 1b preset in Q4_K_M; the ratio is the
 *     point (far below 1);
 *  2. restart to READY=1 with a full tier (the index rebuilt from it) against the same
 *     daemon starting with an empty tier; the daemon's own log line gives the rebuild
 *     time per GiB.
 *
 * The tier is pushed to by watermarks of 1% / 0%: every cached block is written and
 * freed as soon as nobody holds it, so the second request finds its prefix on disk only.
 * KVP_BENCH_QUICK=1 runs the demo model only.  The CPU regime is printed before and after.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/mkmodel.h"
#include "kvpool/kvpool.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

#define PREFIX 4096
#define TAIL 16
#define RUNS 3

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static void fill(int32_t *t, uint32_t n)
{
	kvp_test_fill_ids(&rng, t, n, 256);
}

static int start(struct kvpd *d, const char *model, const char *tier, const char *tier_size,
		 const char *high, const char *low)
{
	const char *args[] = { "--model",
			       model,
			       "--pool-size",
			       "1G",
			       "--tier-path",
			       tier,
			       "--tier-size",
			       tier_size,
			       "--tier-high-watermark",
			       high,
			       "--tier-low-watermark",
			       low,
			       NULL };

	if (kvpd_start(d, 900, args)) {
		kvpd_dump_log(d);
		return -1;
	}
	return 0;
}

/* One request; its client-side TTFT (ms), or < 0. */
static double ttft(struct kvpd *d, const int32_t *prompt, uint32_t n, const char *salt,
		   struct kvp_usage *u)
{
	struct kvp_client_prompt pr = { .tokens = prompt, .n_tokens = n };
	struct kvp_client_params p;
	struct kvp_client *k = NULL;
	double t0;
	int r;

	kvp_client_params_init(&p);
	p.max_new_tokens = 1;
	p.salt = salt;
	p.salt_len = strlen(salt);
	r = kvp_client_connect(&k, d->sock);
	t0 = kvp_test_now_s();
	if (!r)
		r = kvp_client_generate(k, &pr, &p, NULL, NULL, u);
	kvp_client_close(k);
	return r ? -1 : (kvp_test_now_s() - t0) * 1e3;
}

/* Wait until the engine has nothing left to write (tier.blocks stops growing). */
static void settle(struct kvpd *d)
{
	double last = -1;

	for (int i = 0; i < 100; i++) {
		struct jsonq *j;
		double now;

		usleep(300000);
		j = kvpd_status(d);
		now = j ? jsonq_num(j, "tier.writes", 0) : 0;
		jsonq_free(j);
		if (now == last)
			return;
		last = now;
	}
}

static int bench_reload(const char *label, const char *model, int runs)
{
	static int32_t prompt[PREFIX + TAIL];
	double cold[RUNS], warm[RUNS];
	char tier[600], salt[32];
	struct kvp_usage u;
	struct kvpd d;

	if (kvpd_init(&d))
		return -1;
	snprintf(tier, sizeof(tier), "%s/tier", d.dir);
	if (start(&d, model, tier, "2G", "1", "0"))
		return -1;
	fill(prompt, 64);
	ttft(&d, prompt, 64, "warmup", &u);
	for (int r = 0; r < runs; r++) {
		fill(prompt, PREFIX + TAIL);
		snprintf(salt, sizeof(salt), "run-%d", r);
		/* computed from scratch (and published, then written out by the offloader) */
		cold[r] = ttft(&d, prompt, PREFIX + TAIL, salt, &u);
		if (cold[r] < 0 || u.cached_tokens || u.cached_tokens_disk)
			return -1;
		settle(&d);
		/* the same prefix, another tail: read back from disk */
		fill(prompt + PREFIX, TAIL);
		warm[r] = ttft(&d, prompt, PREFIX + TAIL, salt, &u);
		printf("  %s run %d: cold %.0f ms; from disk %.1f ms (cached_tokens_disk %u, "
		       "in memory %u, computed %u)\n",
		       label, r, cold[r], warm[r], u.cached_tokens_disk, u.cached_tokens,
		       u.recomputed_tokens);
		if (warm[r] < 0 || u.cached_tokens_disk + u.cached_tokens != PREFIX)
			return -1;
	}
	{
		char name[160];

		snprintf(name, sizeof(name), "TTFT, 4096-token prefix read back from the tier (%s)",
			 label);
		kvp_bench_report(name, kvp_test_median(warm, runs), "ms", "computed from scratch",
				 kvp_test_median(cold, runs), "ms");
	}
	kvpd_cleanup(&d);
	return 0;
}

/* Restart to READY with a full tier, against an empty one. */
static int bench_restart(const char *model)
{
	static int32_t prompt[2048];
	double full[RUNS], empty[RUNS];
	char tier[600], empty_tier[600], line[512];
	struct kvp_usage u;
	struct kvpd d;
	double blocks = 0, slots = 1;
	FILE *f;

	if (kvpd_init(&d))
		return -1;
	snprintf(tier, sizeof(tier), "%s/tier", d.dir);
	snprintf(empty_tier, sizeof(empty_tier), "%s/empty", d.dir);
	if (start(&d, model, tier, "256M", "1", "0"))
		return -1;
	/* fill it: prompts of 2,048 tokens until the tier holds as many blocks as it has slots */
	for (int i = 0; i < 40 && blocks < slots; i++) {
		struct jsonq *j;

		fill(prompt, 2048);
		if (ttft(&d, prompt, 2048, "fill", &u) < 0)
			return -1;
		settle(&d);
		j = kvpd_status(&d);
		blocks = jsonq_num(j, "tier.blocks", 0);
		slots = jsonq_num(j, "tier.slots", 1);
		jsonq_free(j);
	}
	printf("  tier: %.0f blocks in %.0f slots\n", blocks, slots);
	for (int r = 0; r < RUNS; r++) {
		double t0;

		kvpd_stop(&d);
		t0 = kvp_test_now_s();
		if (start(&d, model, tier, "256M", "90", "75"))
			return -1;
		full[r] = (kvp_test_now_s() - t0) * 1e3;
		kvpd_stop(&d);
		unlink(empty_tier);
		t0 = kvp_test_now_s();
		if (start(&d, model, empty_tier, "256M", "90", "75"))
			return -1;
		empty[r] = (kvp_test_now_s() - t0) * 1e3;
	}
	kvpd_stop(&d);
	kvp_bench_report("restart to READY, full 256 MiB tier (demo)", kvp_test_median(full, RUNS),
			 "ms", "empty tier", kvp_test_median(empty, RUNS), "ms");
	f = fopen(d.log, "r");
	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "rebuilt") && strstr(line, "/tier:") &&
		    !strstr(line, "rebuilt 0 "))
			printf("  daemon: %s", line);
	if (f)
		fclose(f);
	kvpd_cleanup(&d);
	return 0;
}

int main(void)
{
	struct kvpd md;
	struct kvp_mkmodel_opts o;
	char demo[600], q1b[600];
	bool quick = getenv("KVP_BENCH_QUICK") != NULL;

	kvp_bench_cpu_regime(1000);
	if (kvpd_init(&md) || kvpd_model(&md, "demo", demo, sizeof(demo)))
		return 1;
	if (bench_reload("demo", demo, RUNS) < 0)
		goto fail;
	if (!quick) {
		kvp_mkmodel_preset(&o, "1b");
		o.type = KVP_MKMODEL_Q4_K_M;
		snprintf(q1b, sizeof(q1b), "%s/1b-q4_k_m.gguf", md.dir);
		if (kvp_mkmodel_write(q1b, &o, NULL, 0) < 0 ||
		    bench_reload("1b q4_k_m", q1b, 2) < 0)
			goto fail;
	}
	if (bench_restart(demo) < 0)
		goto fail;
	kvp_bench_cpu_regime(1000);
	kvpd_cleanup(&md);
	return 0;
fail:
	fprintf(stderr, "bench_tier_reload: a run failed\n");
	kvpd_cleanup(&md);
	return 1;
}
