/* SPDX-License-Identifier: MIT */
/*
 * bench_matmul.c - one thread, one kernel table: every weight type's matmul against the
 * ceiling it is bound by, measured in the same run.
 *
 *  - prefill shape: a 2048 x 2048 matrix times 512 input rows (activations quantized
 *    once, as the forward pass does), in GOP/s (2 per multiply-add), against the
 *    register peak of the instruction the type's kernel is built on (int8 vpdpbusd for
 *    the integer types, vdpbf16ps for bf16, f32 FMA for f32 and f16; on the AVX2 table
 *    vpmaddubsw + vpmaddwd, none for bf16, f32 FMA ymm);
 *  - decode shape: an 8192 x 4096 matrix (larger than any cache) times 1, 4, 8, 16 and
 *    32 rows, in GB/s of weight bytes streamed, against the read bandwidth of one thread
 *    summing a 1 GiB buffer.
 * Medians of 5.  KVP_ISA=scalar|avx2|avxvnni|avx512 picks the table (default: the CPU's best);
 * arguments name types to run (default: all).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/kernels/kernels.h"
#include "tests/bench/peak.h"
#include "tests/lib/testlib.h"

static volatile double sink;

/* one thread summing @n bytes: GB/s */
static double read_gbps(void)
{
	size_t n = (size_t)1 << 30;
	uint64_t *b = malloc(n);
	double t[5];

	memset(b, 1, n);
	for (int r = 0; r < 5; r++) {
		double t0 = kvp_test_now_s();
		uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;

		for (size_t i = 0; i < n / 8; i += 4) {
			s0 += b[i];
			s1 += b[i + 1];
			s2 += b[i + 2];
			s3 += b[i + 3];
		}
		sink = (double)(s0 + s1 + s2 + s3);
		t[r] = n / (kvp_test_now_s() - t0) / 1e9;
	}
	free(b);
	return kvp_test_median(t, 5);
}

struct mat {
	uint32_t type;
	size_t d_out, k, rb;
	uint8_t *w;
};

static int mat_make(struct mat *m, uint32_t type, size_t d_out, size_t k)
{
	float *f = malloc(k * sizeof(float));

	m->type = type;
	m->d_out = d_out;
	m->k = k;
	m->rb = kvp_ggml_row_bytes(type, k);
	m->w = malloc(d_out * m->rb);
	if (!f || !m->w)
		return -1;
	for (size_t o = 0; o < d_out; o++) {
		for (size_t i = 0; i < k; i++)
			f[i] = (float)((o * 131 + i * 71) % 257) / 128.0f - 1.0f;
		kvp_quantize_ref(m->w + o * m->rb, f, type, k);
	}
	free(f);
	return 0;
}

/* seconds for one out = x @ W^T of @rows, activations quantized inside the timing */
static double run(const struct kvp_kernels *kt, const struct mat *m, size_t rows, const float *x,
		  void *xa, float *out)
{
	uint32_t act = kt->act[m->type];
	size_t xs = kvp_act_row_bytes(act, m->k);
	double t0 = kvp_test_now_s();

	for (size_t r = 0; r < rows; r++)
		kt->quant_act[act]((uint8_t *)xa + r * xs, x + r * m->k, m->k);
	kt->matmul[m->type](out, m->d_out, m->w, m->rb, xa, xs, rows, m->k, 0, m->d_out);
	return kvp_test_now_s() - t0;
}

static double median_run(const struct kvp_kernels *kt, const struct mat *m, size_t rows,
			 const float *x, void *xa, float *out)
{
	double t[5];

	run(kt, m, rows, x, xa, out); /* warm */
	for (int i = 0; i < 5; i++)
		t[i] = run(kt, m, rows, x, xa, out);
	if (getenv("KVP_BENCH_MIN")) { /* exploring on a busy machine: the least disturbed */
		for (int i = 1; i < 5; i++)
			t[0] = t[i] < t[0] ? t[i] : t[0];
		return t[0];
	}
	return kvp_test_median(t, 5);
}

int main(int argc, char **argv)
{
	const struct kvp_kernels *kt;
	struct kvp_bench_peak peak = { 0 };
	static const uint32_t all[] = {
		KVP_GGML_F32,  KVP_GGML_F16,  KVP_GGML_BF16, KVP_GGML_Q8_0, KVP_GGML_Q4_0,
		KVP_GGML_Q4_1, KVP_GGML_Q5_0, KVP_GGML_Q5_1, KVP_GGML_Q2_K, KVP_GGML_Q3_K,
		KVP_GGML_Q4_K, KVP_GGML_Q5_K, KVP_GGML_Q6_K,
	};
	enum { PK = 2048, PO = 2048, PROWS = 512, DK = 4096, DO = 8192 };
	float *x = malloc((size_t)PROWS * DK * sizeof(float));
	float *out = malloc((size_t)PROWS * DO * sizeof(float));
	void *xa = malloc((size_t)PROWS * DK * 4);
	double bw;
	int rc = 0;

	if (kvp_kernels_best(&kt)) {
		fprintf(stderr, "bench-matmul: KVP_ISA names no instruction set this CPU runs\n");
		return 1;
	}
	for (size_t i = 0; i < (size_t)PROWS * DK; i++)
		x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
	if (kt->isa == KVP_ISA_AVX512)
		kvp_bench_peak_avx512(&peak, 1);
	else if (kt->isa == KVP_ISA_AVX2)
		kvp_bench_peak_avx2(&peak, 1);
	bw = read_gbps();
	printf("kernels: %s; one thread\n", kt->name);
	kvp_bench_cpu_regime(300);
	if (peak.int8)
		printf("peak (same run): int8 %.0f GOP/s (%s), bf16 %.0f GFLOP/s, f32 %.0f GFLOP/s "
		       "(%s)\n",
		       peak.int8, peak.int8_insn, peak.bf16, peak.f32, peak.f32_insn);
	printf("read bandwidth (same run): %.1f GB/s\n", bw);
	printf("%-6s | prefill %dx%d x %d rows: GOP/s  ratio | decode %dx%d, GB/s of weights "
	       "(ratio to read bw) at rows 1, 4, 8, 16, 32\n",
	       "type", PO, PK, PROWS, DO, DK);
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		uint32_t type = all[i];
		const struct kvp_qtype *t = kvp_qtype(type);
		struct mat pm, dm;
		double s, gops, ceil;
		int want = argc < 2;

		for (int a = 1; a < argc; a++)
			want |= !strcmp(argv[a], t->name);
		if (!want)
			continue;
		if (mat_make(&pm, type, PO, PK) || mat_make(&dm, type, DO, DK)) {
			fprintf(stderr, "bench-matmul: out of memory\n");
			return 1;
		}
		s = median_run(kt, &pm, PROWS, x, xa, out);
		gops = 2.0 * PO * PK * PROWS / s / 1e9;
		ceil = t->act == KVP_ACT_F32  ? peak.f32 :
		       t->act == KVP_ACT_BF16 ? peak.bf16 :
						peak.int8;
		printf("%-6s | %7.1f  %5.2f |", t->name, gops, ceil ? gops / ceil : 0.0);
		for (size_t rows = 1; rows <= 32; rows = rows < 4 ? 4 : rows * 2) {
			double g = (double)DO * dm.rb / median_run(kt, &dm, rows, x, xa, out) / 1e9;

			printf(" %6.1f (%4.2f)", g, g / bw);
		}
		printf("\n");
		fflush(stdout);
		free(pm.w);
		free(dm.w);
	}
	free(x);
	free(out);
	free(xa);
	return rc;
}
