/* SPDX-License-Identifier: MIT */
/*
 * peak_avx512.c - register-only throughput of the instructions the AVX-512 kernels are
 * built on, the ceilings the compute benchmarks divide by: vfmadd231ps zmm (f32),
 * vdpbf16ps (bf16), vpdpbusd (int8).  Twelve independent accumulators, no memory
 * traffic.  Built with AVX-512 flags; call only when kvp_isa_supported(KVP_ISA_AVX512).
 */
#include "tests/bench/peak.h"

#include <immintrin.h>

#include "tests/lib/testlib.h"

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
	const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);

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
	sink = (float)_mm512_reduce_add_epi32(acc[0]);
}

/* operations per call of @fn at ITERS: NACC instructions of @ops each */
static double rate(void (*fn)(long), double ops)
{
	double t[5];

	fn(ITERS / 8);	/* wake the vector unit up */
	for (int r = 0; r < 5; r++) {
		double t0 = kvp_test_now_s();

		fn(ITERS);
		t[r] = (double)ITERS * NACC * ops / (kvp_test_now_s() - t0) / 1e9;
	}
	return kvp_test_median(t, 5);
}

void kvp_bench_peak_avx512(struct kvp_bench_peak *p)
{
	p->f32 = rate(fma_zmm, 32);	/* 16 lanes x multiply + add */
	p->bf16 = rate(dpbf16, 64);	/* 16 lanes x 2 pairs x 2 */
	p->int8 = rate(dpbusd, 128);	/* 16 lanes x 4 pairs x 2 */
}
