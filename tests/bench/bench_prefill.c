/* SPDX-License-Identifier: MIT */
/*
 * bench_prefill.c - prefill throughput per weight type against the compute ceiling of
 * the instruction its kernels are built on, measured in the same run.
 *
 * For each model (bench_models.h: the 1b preset in every type, or the paths given):
 * one 512-token chunk prefilled from position 0, median of several runs, at the
 * machine's thread count.  Figure: achieved GOP/s (model operations per token x
 * tokens/s, 2 per multiply-add).  Baselines, all threads at once, of the kernel table's
 * instructions (peak.h: AVX-512 or AVX2): for the integer types the int8 dot register
 * peak, for bf16 the vdpbf16ps peak (the f32 FMA peak on AVX2), for f16 the f32 FMA
 * peak, for f32 cblas_sgemm at M=512, K=N=2048 (f32 prefill takes it where it was
 * measured faster than our kernel: compute/linear.c; not on Zen 5); and each
 * type against the f32 file of the same weights in the same run (today's path
 * converted every type to f32).
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/forward.h"
#include "compute/kernels/kernels.h"
#include "compute/model.h"
#include "shm/geom.h"
#include "tests/bench/bench_models.h"
#include "tests/bench/model_cost.h"
#include "tests/bench/peak.h"
#include "tests/lib/testlib.h"

#define CHUNK 512u
#define RUNS 3

static double sgemm_gflops(void)
{
	const int M = 512, N = 2048, K = 2048;
	float *a = malloc((size_t)M * K * 4), *b = malloc((size_t)N * K * 4),
	      *c = malloc((size_t)M * N * 4);
	double t[9];

	for (size_t i = 0; i < (size_t)M * K; i++)
		a[i] = (float)(i % 13) * 0.01f;
	for (size_t i = 0; i < (size_t)N * K; i++)
		b[i] = (float)(i % 7) * 0.01f;
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, a, K, b, K, 0, c, N);
	for (int r = 0; r < 9; r++) {
		double t0 = kvp_test_now_s();

		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1, a, K, b, K, 0, c,
			    N);
		t[r] = 2.0 * M * N * K / (kvp_test_now_s() - t0) / 1e9;
	}
	free(a);
	free(b);
	free(c);
	return kvp_test_median(t, 9);
}

struct run_arg {
	int threads;
	double sgemm;
	struct kvp_bench_peak peak;
	double f32_tps; /* 0 until the f32 file ran */
};

static int bench_model(const char *path, const char *type, void *arg)
{
	struct run_arg *a = arg;
	struct kvp_model *m;
	struct kvp_fwd *f;
	struct kvp_kv_view kv = { 0 };
	struct kvp_model_shape sh;
	const struct kvp_model_hparams *hp;
	uint32_t nb, *table;
	int32_t *toks;
	float *lg;
	double tps[RUNS], flops_tok, ceil;
	const char *ceil_name;
	char err[256], name[160];

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
	if (kvp_fwd_new(&f, m,
			&(struct kvp_fwd_opts){
				.n_threads = a->threads, .max_chunk = CHUNK, .max_batch = 1 })) {
		fprintf(stderr, "bench-prefill: no forward context\n");
		return 1;
	}
	kvp_fwd_prefill(f, &kv, table, nb, 0, toks, CHUNK, lg, 0); /* warm-up: faults, caches */
	for (int r = 0; r < RUNS; r++) {
		double t0 = kvp_test_now_s();

		kvp_fwd_prefill(f, &kv, table, nb, 0, toks, CHUNK, lg, 0);
		tps[r] = CHUNK / (kvp_test_now_s() - t0);
	}
	flops_tok = kvp_bench_prefill_ops(m, CHUNK);
	double med = kvp_test_median(tps, RUNS);

	if (!strcmp(type, "f32") || !strcmp(type, "file")) {
		ceil = a->sgemm;
		ceil_name = "sgemm M=512 K=N=2048";
	} else if (!strcmp(type, "f16") || (!strcmp(type, "bf16") && !a->peak.bf16)) {
		ceil = a->peak.f32;
		ceil_name = "f32 FMA register peak";
	} else if (!strcmp(type, "bf16")) {
		ceil = a->peak.bf16;
		ceil_name = "vdpbf16ps register peak";
	} else {
		ceil = a->peak.int8;
		ceil_name = "int8 dot register peak";
	}
	printf("model %s (%s): %.1fM params, %.2f GOP/token\n", kvp_model_name(m), type,
	       kvp_model_info(m)->n_params / 1e6, flops_tok / 1e9);
	snprintf(name, sizeof(name), "prefill %s, %u-token chunk, %d threads", type, CHUNK,
		 a->threads);
	printf("%s: %.1f tokens/s\n", name, med);
	if (ceil > 0)
		kvp_bench_report(name, med * flops_tok / 1e9, "GOP/s", ceil_name, ceil, "GOP/s");
	if (a->f32_tps > 0) {
		snprintf(name, sizeof(name), "prefill %s vs f32", type);
		kvp_bench_report(name, med, "tokens/s", "the f32 file", a->f32_tps, "tokens/s");
	}
	if (!strcmp(type, "f32"))
		a->f32_tps = med;
	fflush(stdout);
	kvp_fwd_free(f);
	kvp_model_close(m);
	free(kv.base);
	free(table);
	free(toks);
	free(lg);
	return 0;
}

int main(int argc, char **argv)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct run_arg a = { .threads = ncpu > 0 && ncpu < 64 ? (int)ncpu : 1 };
	const struct kvp_kernels *k;
	int rc;

	if (kvp_kernels_best(&k)) {
		fprintf(stderr, "bench-prefill: KVP_ISA names no instruction set this CPU runs\n");
		return 1;
	}
	printf("kernels: %s\n", k->name);
	kvp_bench_cpu_regime(300);
	openblas_set_num_threads(a.threads);
	a.sgemm = sgemm_gflops();
	if (k->isa == KVP_ISA_AVX512)
		kvp_bench_peak_avx512(&a.peak, a.threads);
	else if (k->isa == KVP_ISA_AVX2)
		kvp_bench_peak_avx2(&a.peak, a.threads);
	printf("ceilings (%d threads, same run): sgemm %.0f GFLOP/s; register peaks f32 %.0f (%s), "
	       "bf16 %.0f (%s), int8 %.0f (%s) GOP/s\n",
	       a.threads, a.sgemm, a.peak.f32, a.peak.f32_insn ? a.peak.f32_insn : "-", a.peak.bf16,
	       a.peak.bf16_insn ? a.peak.bf16_insn : "-", a.peak.int8,
	       a.peak.int8_insn ? a.peak.int8_insn : "-");
	rc = kvp_bench_each_model("bench-prefill", argc, argv, bench_model, &a);
	kvp_bench_cpu_regime(300);
	return rc;
}
