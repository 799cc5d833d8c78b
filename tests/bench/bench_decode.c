/* SPDX-License-Identifier: MIT */
/*
 * bench_decode.c - decode throughput at batch 1 and 8 against the memory-bandwidth
 * roofline measured in the same run.
 *
 * For each model (demo and 1b presets as f32 in a temporary directory, or the paths
 * given): B sequences each prefilled with a 128-token prompt, then decode steps of
 * the whole batch, median over several runs of 16 steps, at the machine's thread count.
 * Figure: bytes a step must read (all weights once, plus every sequence's K/V history)
 * times steps/s; baseline: copy bandwidth of a 1 GiB memcpy split over the same number
 * of threads, counted as bytes read + written (the STREAM convention); the ratio is
 * the fraction of the roofline reached.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/forward.h"
#include "compute/mkmodel.h"
#include "compute/model.h"
#include "compute/sample.h"
#include "shm/geom.h"
#include "tests/lib/testlib.h"

#define PROMPT 128u
#define STEPS 16u
#define RUNS 3u
#define BT 16u

struct copy_arg {
	uint8_t *dst;
	const uint8_t *src;
	size_t n;
};

static void *copy_part(void *p)
{
	struct copy_arg *a = p;

	memcpy(a->dst, a->src, a->n);
	return NULL;
}

static double copy_gbps(int threads)
{
	size_t n = 1ull << 30, part = n / threads;
	uint8_t *src = malloc(n), *dst = malloc(n);
	double t[5];
	pthread_t th[64];
	struct copy_arg a[64];

	memset(src, 1, n);
	memset(dst, 2, n);
	for (int r = 0; r < 5; r++) {
		double t0 = kvp_test_now_s();

		for (int i = 0; i < threads; i++) {
			a[i] = (struct copy_arg){ dst + i * part, src + i * part, part };
			if (i)
				pthread_create(&th[i], NULL, copy_part, &a[i]);
		}
		copy_part(&a[0]);
		for (int i = 1; i < threads; i++)
			pthread_join(th[i], NULL);
		t[r] = 2.0 * part * threads / (kvp_test_now_s() - t0) / 1e9;
	}
	free(src);
	free(dst);
	return kvp_test_median(t, 5);
}

static int bench_batch(struct kvp_model *m, int threads, uint32_t B, double bw)
{
	const struct kvp_model_hparams *hp = kvp_model_hparams(m);
	uint32_t ctx = PROMPT + RUNS * STEPS + 1, nb = (ctx + BT - 1) / BT;
	struct kvp_fwd *f;
	struct kvp_kv_view kv = { 0 };
	struct kvp_model_shape sh;
	struct kvp_fwd_seq *seq = calloc(B, sizeof(*seq));
	uint32_t *tables = malloc((size_t)B * nb * 4);
	int32_t *toks = malloc(PROMPT * 4);
	float *lg = malloc((size_t)B * hp->n_vocab * 4);
	double tps[RUNS], bytes_s[RUNS];
	char name[160];

	kvp_model_kv_shape(m, KVP_DTYPE_F32, BT, &sh);
	kvp_geom_init(&kv.geom, &sh);
	kv.n_blocks = B * nb;
	kv.base = aligned_alloc(KVP_BLOCK_ALIGN, (size_t)kv.n_blocks * kv.geom.block_stride);
	memset(kv.base, 0, (size_t)kv.n_blocks * kv.geom.block_stride);
	if (kvp_fwd_new(&f, m, &(struct kvp_fwd_opts){ threads, PROMPT, B }))
		return 1;
	for (uint32_t s = 0; s < B; s++) {
		for (uint32_t i = 0; i < nb; i++)
			tables[s * nb + i] = s * nb + i;
		for (uint32_t i = 0; i < PROMPT; i++)
			toks[i] = 3 + (int32_t)((i * 31u + s * 17u) % 256);
		kvp_fwd_prefill(f, &kv, tables + s * nb, nb, 0, toks, PROMPT, lg, 0);
		seq[s] = (struct kvp_fwd_seq){ .table = tables + s * nb, .n_table = nb, .pos = PROMPT,
					       .token = kvp_sample_greedy(lg, hp->n_vocab) };
	}
	for (uint32_t r = 0; r < RUNS; r++) {
		double t0 = kvp_test_now_s(), kv_bytes = 0;

		for (uint32_t i = 0; i < STEPS; i++) {
			for (uint32_t s = 0; s < B; s++)
				kv_bytes += (double)(seq[s].pos + 1) * kv.geom.bytes_per_token;
			kvp_fwd_decode(f, &kv, seq, B, lg);
			for (uint32_t s = 0; s < B; s++) {
				seq[s].token = kvp_sample_greedy(lg + (size_t)s * hp->n_vocab, hp->n_vocab);
				seq[s].pos++;
			}
		}
		double dt = kvp_test_now_s() - t0;

		tps[r] = B * STEPS / dt;
		bytes_s[r] = (STEPS * (double)kvp_model_info(m)->weight_bytes + kv_bytes) / dt;
	}
	snprintf(name, sizeof(name), "decode %s, batch %u, %d threads", kvp_model_name(m), B, threads);
	printf("%s: %.1f tokens/s (%.1f steps/s)\n", name, kvp_test_median(tps, RUNS),
	       kvp_test_median(tps, RUNS) / B);
	kvp_bench_report(name, kvp_test_median(bytes_s, RUNS) / 1e9, "GB/s read",
			 "memcpy copy bandwidth", bw, "GB/s");
	fflush(stdout);
	kvp_fwd_free(f);
	free(kv.base);
	free(seq);
	free(tables);
	free(toks);
	free(lg);
	return 0;
}

static int bench_model(const char *path, int threads, double bw)
{
	struct kvp_model *m;
	char err[256];
	int rc;

	if (kvp_model_open(&m, path, err, sizeof(err))) {
		fprintf(stderr, "bench-decode: %s\n", err);
		return 1;
	}
	printf("model %s: %.1fM params, %.1f MB of weights read per step\n", kvp_model_name(m),
	       kvp_model_info(m)->n_params / 1e6, kvp_model_info(m)->weight_bytes / 1e6);
	rc = bench_batch(m, threads, 1, bw) | bench_batch(m, threads, 8, bw);
	kvp_model_close(m);
	return rc;
}

int main(int argc, char **argv)
{
	static const char *const presets[] = { "demo", "1b" };
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int threads = ncpu > 0 && ncpu < 64 ? (int)ncpu : 1, rc = 0;
	char dir[256], path[512], err[256];
	double bw;

	kvp_bench_cpu_regime(300);
	bw = copy_gbps(threads);
	printf("copy bandwidth (%d threads, read + write): %.1f GB/s\n", threads, bw);
	if (argc > 1) {
		for (int i = 1; i < argc; i++)
			rc |= bench_model(argv[i], threads, bw);
		return rc;
	}
	if (kvp_test_tmpdir(dir, sizeof(dir)))
		return 1;
	for (size_t i = 0; i < 2; i++) {
		struct kvp_mkmodel_opts o;

		kvp_mkmodel_preset(&o, presets[i]);
		snprintf(path, sizeof(path), "%s/%s.gguf", dir, presets[i]);
		if (kvp_mkmodel_write(path, &o, err, sizeof(err))) {
			fprintf(stderr, "bench-decode: %s\n", err);
			rc = 1;
			break;
		}
		rc |= bench_model(path, threads, bw);
		unlink(path);
	}
	kvp_bench_cpu_regime(300);
	kvp_test_rmtree(dir);
	return rc;
}
