/* SPDX-License-Identifier: MIT */
/*
 * bench_prefill.c - prefill throughput against the sgemm peak measured in the same run.
 *
 * For each model (the demo and 1b presets, generated as f32 into a temporary directory,
 * or the GGUF paths given as arguments): one 512-token chunk prefilled from position 0,
 * median of several runs, at the machine's thread count.  Figure: achieved GFLOP/s
 * (model FLOPs per token x tokens/s); baseline: cblas_sgemm at M=512, K=N=2048, median
 * of 9 runs in this process; the ratio is the fraction of the roofline reached.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/forward.h"
#include "compute/model.h"
#include "shm/geom.h"
#include "tests/bench/bench_models.h"
#include "tests/lib/testlib.h"

#define CHUNK 512u
#define RUNS 3

static double sgemm_gflops(void)
{
	const int M = 512, N = 2048, K = 2048;
	float *a = malloc((size_t)M * K * 4), *b = malloc((size_t)N * K * 4), *c = malloc((size_t)M * N * 4);
	double t[9];

	for (size_t i = 0; i < (size_t)M * K; i++)
		a[i] = (float)(i % 13) * 0.01f;
	for (size_t i = 0; i < (size_t)N * K; i++)
		b[i] = (float)(i % 7) * 0.01f;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, a, K, b, K, 0, c, N);
	for (int r = 0; r < 9; r++) {
		double t0 = kvp_test_now_s();

		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, a, K, b, K, 0, c, N);
		t[r] = 2.0 * M * N * K / (kvp_test_now_s() - t0) / 1e9;
	}
	free(a);
	free(b);
	free(c);
	return kvp_test_median(t, 9);
}

static int bench_model(const char *path, int threads)
{
	struct kvp_model *m;
	struct kvp_fwd *f;
	struct kvp_kv_view kv = { 0 };
	struct kvp_model_shape sh;
	const struct kvp_model_hparams *hp;
	uint32_t nb, *table;
	int32_t *toks;
	float *lg;
	double tps[RUNS], flops_tok, peak;
	char err[256], name[128];

	if (kvp_model_open(&m, path, err, sizeof(err))) {
		fprintf(stderr, "bench-prefill: %s\n", err);
		return 1;
	}
	hp = kvp_model_hparams(m);
	kvp_model_kv_shape(m, KVP_DTYPE_F32, 16, &sh);
	kvp_geom_init(&kv.geom, &sh);
	nb = CHUNK / 16;
	kv.n_blocks = nb;
	kv.base = aligned_alloc(KVP_BLOCK_ALIGN, nb * kv.geom.block_stride);
	memset(kv.base, 0, nb * kv.geom.block_stride);
	table = malloc(nb * 4);
	toks = malloc(CHUNK * 4);
	lg = malloc(hp->n_vocab * 4);
	for (uint32_t i = 0; i < nb; i++)
		table[i] = i;
	for (uint32_t i = 0; i < CHUNK; i++)
		toks[i] = 3 + (int32_t)((i * 7919u) % 256);
	if (kvp_fwd_new(&f, m, &(struct kvp_fwd_opts){ .n_threads = threads, .max_chunk = CHUNK, .max_batch = 1 })) {
		fprintf(stderr, "bench-prefill: no forward context\n");
		return 1;
	}
	kvp_fwd_prefill(f, &kv, table, nb, 0, toks, CHUNK, lg, 0);	/* warm-up: faults, caches */
	for (int r = 0; r < RUNS; r++) {
		double t0 = kvp_test_now_s();

		kvp_fwd_prefill(f, &kv, table, nb, 0, toks, CHUNK, lg, 0);
		tps[r] = CHUNK / (kvp_test_now_s() - t0);
	}
	/*
	 * matrices (2 flops per weight; the output matrix only for the chunk's last
	 * position, as prefill computes only its logits) + attention (QK and PV over
	 * (n+1)/2 keys on average)
	 */
	double out_params = (double)hp->n_vocab * hp->n_embd;

	flops_tok = 2.0 * (kvp_model_info(m)->weight_bytes / 4 - out_params) +
		    2.0 * out_params / CHUNK +
		    4.0 * hp->n_layers * hp->n_heads * hp->head_dim * (CHUNK + 1) / 2.0;
	peak = sgemm_gflops();
	double med = kvp_test_median(tps, RUNS);

	printf("model %s: %.1fM params, %.2f GFLOP/token\n", kvp_model_name(m),
	       kvp_model_info(m)->n_params / 1e6, flops_tok / 1e9);
	snprintf(name, sizeof(name), "prefill %s, %u-token chunk, %d threads", kvp_model_name(m),
		 CHUNK, threads);
	printf("%s: %.1f tokens/s\n", name, med);
	kvp_bench_report(name, med * flops_tok / 1e9, "GFLOP/s", "sgemm M=512 K=N=2048", peak,
			 "GFLOP/s");
	fflush(stdout);
	kvp_fwd_free(f);
	kvp_model_close(m);
	free(kv.base);
	free(table);
	free(toks);
	free(lg);
	return 0;
}

static int run_model(const char *path, void *arg)
{
	return bench_model(path, *(int *)arg);
}

int main(int argc, char **argv)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int threads = ncpu > 0 ? (int)ncpu : 1;
	int rc;

	kvp_bench_cpu_regime(300);
	rc = kvp_bench_each_model("bench-prefill", argc, argv, run_model, &threads);
	kvp_bench_cpu_regime(300);
	return rc;
}
