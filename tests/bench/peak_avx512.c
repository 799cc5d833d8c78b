/* SPDX-License-Identifier: MIT */
/*
 * peak_avx512.c - register-only throughput of the instructions the AVX-512 kernels are
 * built on, the ceilings the compute benchmarks divide by: vfmadd231ps zmm (f32),
 * vdpbf16ps (bf16), vpdpbusd (int8).  Twelve independent accumulators, no memory
 * traffic.  Built with AVX-512 flags; call only when kvp_isa_supported(KVP_ISA_AVX512).
 */
#include "tests/bench/peak.h"

#include <immintrin.h>

#define NACC 12
#define ITERS (1L << 22)

static volatile float sink;

__attribute__((noinline)) static void fma_zmm(long iters)
{
	__m512 acc[NACC];
	const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-6f);

	for (int i = 0; i < NACC; i++)
		acc[i] = _mm512_set1_ps((float)i);
	for (long n = 0; n < iters; n++)
#pragma GCC unroll 16
		for (int i = 0; i < NACC; i++)
			acc[i] = _mm512_fmadd_ps(acc[i], a, b);
	for (int i = 1; i < NACC; i++)
		acc[0] = _mm512_add_ps(acc[0], acc[i]);
	sink = _mm512_reduce_add_ps(acc[0]);
}

__attribute__((noinline)) static void dpbf16(long iters)
{
	__m512 acc[NACC];
	const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80),
		       b = (__m512bh)_mm512_set1_epi16(0x3380);

	for (int i = 0; i < NACC; i++)
		acc[i] = _mm512_set1_ps((float)i);
	for (long n = 0; n < iters; n++)
#pragma GCC unroll 16
		for (int i = 0; i < NACC; i++)
			acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
	for (int i = 1; i < NACC; i++)
		acc[0] = _mm512_add_ps(acc[0], acc[i]);
	sink = _mm512_reduce_add_ps(acc[0]);
}

__attribute__((noinline)) static void dpbusd(long iters)
{
	__m512i acc[NACC];
	const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);

	for (int i = 0; i < NACC; i++)
		acc[i] = _mm512_set1_epi32(i);
	for (long n = 0; n < iters; n++)
#pragma GCC unroll 16
		for (int i = 0; i < NACC; i++)
			acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
	for (int i = 1; i < NACC; i++)
		acc[0] = _mm512_add_epi32(acc[0], acc[i]);
	sink = (float)_mm_cvtsi128_si32(_mm512_castsi512_si128(acc[0])); /* the sums wrap */
}

void kvp_bench_peak_avx512(struct kvp_bench_peak *p, int threads)
{
	/* NACC instructions an iteration, of 16 lanes x 2 ops; x 2 pairs x 2; x 4 pairs x 2 */
	p->f32 = kvp_bench_peak_rate(fma_zmm, ITERS, NACC * 32, threads);
	p->bf16 = kvp_bench_peak_rate(dpbf16, ITERS, NACC * 64, threads);
	p->int8 = kvp_bench_peak_rate(dpbusd, ITERS, NACC * 128, threads);
	p->f32_insn = "vfmadd231ps zmm";
	p->bf16_insn = "vdpbf16ps zmm";
	p->int8_insn = "vpdpbusd zmm";
}
