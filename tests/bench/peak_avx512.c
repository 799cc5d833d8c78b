/* SPDX-License-Identifier: MIT */
/*
 * peak_avx512.c - register-only throughput of the instructions the AVX-512 kernels are
 * built on, the ceilings the compute benchmarks divide by: vfmadd231ps zmm (f32),
 * vdpbf16ps (bf16), vpdpbusd (int8).  Twelve independent accumulators, no memory
 * traffic.  Built with AVX-512 flags; call only when kvp_isa_supported(KVP_ISA_AVX512).
 */
#include "tests/bench/peak.h"

#include <immintrin.h>
#include <pthread.h>

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
	sink = (float)_mm512_reduce_add_epi32(acc[0]);
}

struct peak_job {
	void (*fn)(long);
};

static void *peak_run(void *p)
{
	((struct peak_job *)p)->fn(ITERS);
	return NULL;
}

/* GOP/s of @threads threads each running @fn at ITERS (@ops per instruction) */
static double rate(void (*fn)(long), double ops, int threads)
{
	double t[5];
	pthread_t th[64];
	struct peak_job j = { fn };

	fn(ITERS / 8); /* wake the vector unit up */
	for (int r = 0; r < 5; r++) {
		double t0 = kvp_test_now_s();

		for (int i = 1; i < threads; i++)
			pthread_create(&th[i], NULL, peak_run, &j);
		fn(ITERS);
		for (int i = 1; i < threads; i++)
			pthread_join(th[i], NULL);
		t[r] = (double)ITERS * NACC * ops * threads / (kvp_test_now_s() - t0) / 1e9;
	}
	return kvp_test_median(t, 5);
}

void kvp_bench_peak_avx512(struct kvp_bench_peak *p, int threads)
{
	threads = threads < 1 ? 1 : threads > 64 ? 64 : threads;
	p->f32 = rate(fma_zmm, 32, threads);  /* 16 lanes x multiply + add */
	p->bf16 = rate(dpbf16, 64, threads);  /* 16 lanes x 2 pairs x 2 */
	p->int8 = rate(dpbusd, 128, threads); /* 16 lanes x 4 pairs x 2 */
}
