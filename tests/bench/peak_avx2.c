/* SPDX-License-Identifier: MIT */
/*
 * peak_avx2.c - register-only throughput of the instructions the AVX2 kernels are built
 * on, the ceilings the compute benchmarks divide by on the AVX2 table: vfmadd231ps ymm
 * (f32) and the int8 dot product of CPUs without VNNI, vpmaddubsw (u8 x s8 pairs into
 * int16) + vpmaddwd by 1 (into int32) + vpaddd.  Twelve independent accumulators, no
 * memory traffic.  Built with the AVX2 table's flags; call only where AVX2 and FMA run.
 */
#include "tests/bench/peak.h"

#include <immintrin.h>

#define NACC KVP_BENCH_AVX2_NACC
#define ITERS (1L << 22)

static volatile float sink;

__attribute__((noinline)) void kvp_bench_fma_ymm(long iters)
{
	__m256 acc[NACC];
	const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-6f);

	for (int i = 0; i < NACC; i++)
		acc[i] = _mm256_set1_ps((float)i);
	for (long n = 0; n < iters; n++)
#pragma GCC unroll 16
		for (int i = 0; i < NACC; i++)
			acc[i] = _mm256_fmadd_ps(acc[i], a, b);
	for (int i = 1; i < NACC; i++)
		acc[0] = _mm256_add_ps(acc[0], acc[i]);
	sink = _mm256_cvtss_f32(acc[0]);
}

/*
 * The accumulator is also the u8 operand, so the compiler cannot hoist the products out
 * of the loop; the loop-carried chain (3 dependent instructions) is covered by NACC
 * chains in flight.  The values wrap: only the rate matters.
 */
__attribute__((noinline)) void kvp_bench_maddubs_ymm(long iters)
{
	__m256i acc[NACC];
	const __m256i b = _mm256_set1_epi8(-2), one = _mm256_set1_epi16(1);

	for (int i = 0; i < NACC; i++)
		acc[i] = _mm256_set1_epi32(i);
	for (long n = 0; n < iters; n++)
#pragma GCC unroll 16
		for (int i = 0; i < NACC; i++)
			acc[i] = _mm256_add_epi32(acc[i],
						  _mm256_madd_epi16(_mm256_maddubs_epi16(acc[i], b),
								    one));
	for (int i = 1; i < NACC; i++)
		acc[0] = _mm256_add_epi32(acc[0], acc[i]);
	sink = (float)_mm256_extract_epi32(acc[0], 0);
}

void kvp_bench_peak_avx2(struct kvp_bench_peak *p, int threads)
{
	/* per iteration NACC times: 8 lanes x multiply + add; 32 u8 x s8 pairs x 2 */
	p->f32 = kvp_bench_peak_rate(kvp_bench_fma_ymm, ITERS, NACC * 16, threads);
	p->int8 = kvp_bench_peak_rate(kvp_bench_maddubs_ymm, ITERS, NACC * 64, threads);
	p->bf16 = 0;
	p->f32_insn = "vfmadd231ps ymm";
	p->int8_insn = "vpmaddubsw+vpmaddwd+vpaddd ymm";
	p->bf16_insn = NULL;
}
