/* SPDX-License-Identifier: MIT */
/*
 * tile_ceiling.c - what the AVX2 prefill tiles can reach at most on this CPU: their
 * exact per-step instruction mixes run from L1 (no unpacking, no cache misses), one
 * thread, in thread CPU time (best of 5, so a loaded machine shows less), beside the
 * roofs bench-matmul and vs_llamacpp.sh divide by, measured in the same run:
 *  - int8: the roof is vpmaddubsw + vpmaddwd + vpaddd (64 ops each, peak_avx2.c); the
 *    tiles of avx2.c's mat_tile() per half-group (128 weights) and token: Q8_0 with the
 *    sign trick (vpsignb per token, int16 pairs straight into vpmaddwd), Q4_0 with four
 *    chunks' int16 pairs summed before one vpmaddwd and the correction FMA, each scale
 *    step (vcvtdq2ps, 2 vmulps, vaddps) once per 8 blocks; and a naive per-32-block mix
 *    (vcvtdq2ps + vfmadd per 32 weights) for comparison.  A ratio above 1 is possible:
 *    the roof spends a vpmaddwd per vpmaddubsw, Q4_0 one per four.
 *  - f32: the roof is vfmadd231ps; vec_f32.inc's htile() step (4 panel rows x 3 tokens,
 *    7 loads, 12 FMAs) with the 3 tokens' activations in L1, and cycling through 132
 *    tokens (L2), as the panel form runs them.
 * Not a test and not a benchmark suite entry: `build/tests/bench/kvp-tile-ceiling`.
 */
#include "tests/bench/peak.h"

#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile float sink;

static double cpu_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* per token a code row, a scale row: distinct, so no token's work is another's */
#define NT 8
static int8_t wb[8192] __attribute__((aligned(64))), ab[NT][4096] __attribute__((aligned(64)));
static float fb[NT][1024] __attribute__((aligned(64)));

enum { MIX_Q8 = 0, MIX_Q4 = 1, MIX_NAIVE = 2 };

/* one half-group (128 weights) x RT tokens per iteration, the offsets cycling in L1 */
static inline __attribute__((always_inline)) void int_mix(long iters, const int mix, const int RT)
{
	const __m256i one = _mm256_set1_epi16(1);
	__m256 acc[NT];

	for (int t = 0; t < RT; t++)
		acc[t] = _mm256_setzero_ps();
	for (long n = 0; n < iters; n++) {
		size_t o = (size_t)(n * 128) & 4095, of = (size_t)(n * 8) & 1023;
		__m256i s[NT], p[NT];

#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
			__m256i w = _mm256_load_si256((const __m256i *)(wb + o + 32 * c));
			__m256i wa = _mm256_sign_epi8(w, w); /* shared by the tokens */

#pragma GCC unroll 8
			for (int t = 0; t < RT; t++) {
				__m256i a = _mm256_load_si256(
					(const __m256i *)(ab[t] + o + 32 * c));
				__m256i m;

				if (mix == MIX_Q4) {
					m = _mm256_maddubs_epi16(w, a);
					p[t] = c ? _mm256_add_epi16(p[t], m) : m;
					if (c < 3)
						continue;
					s[t] = _mm256_madd_epi16(p[t], one);
					continue;
				}
				m = _mm256_madd_epi16(_mm256_maddubs_epi16(wa,
									   _mm256_sign_epi8(a, w)),
						      one);
				if (mix == MIX_NAIVE)
					acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m),
								 _mm256_broadcast_ss(fb[t] + of +
										     c),
								 acc[t]);
				else
					s[t] = c ? _mm256_add_epi32(s[t], m) : m;
			}
		}
		if (mix == MIX_NAIVE)
			continue;
#pragma GCC unroll 8
		for (int t = 0; t < RT; t++) {
			__m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(s[t]),
						 _mm256_mul_ps(_mm256_load_ps(fb[0] + of),
							       _mm256_load_ps(fb[t] + of + 8)));

			if (mix == MIX_Q4)
				v = _mm256_fmadd_ps(_mm256_load_ps(fb[1] + of),
						    _mm256_load_ps(fb[t] + of + 16), v);
			acc[t] = _mm256_add_ps(acc[t], v);
		}
	}
	for (int t = 1; t < RT; t++)
		acc[0] = _mm256_add_ps(acc[0], acc[t]);
	sink = _mm256_cvtss_f32(acc[0]);
}

#define MIX(name, mix, rt) \
	__attribute__((noinline)) static void name(long iters) \
	{ \
		int_mix(iters, mix, rt); \
	}
MIX(q8_2, MIX_Q8, 2)
MIX(q8_3, MIX_Q8, 3)
MIX(q8_4, MIX_Q8, 4)
MIX(q4_3, MIX_Q4, 3)
MIX(q4_4, MIX_Q4, 4)
MIX(q4_6, MIX_Q4, 6)
MIX(naive_4, MIX_NAIVE, 4)

#define NACC KVP_BENCH_AVX2_NACC

/* htile()'s step: 4 panel rows (HP_PS floats apart) x 3 tokens (@xs floats apart) */
#define PS 520
#define KC 512
#define XS 2048
static float pan[8 * PS] __attribute__((aligned(64)));
static float *act;
static size_t act_tokens;

__attribute__((noinline)) static void htile_step(const float *p, const float *x, __m256 *c)
{
	__m256 a[4][3];

#pragma GCC unroll 4
	for (int r = 0; r < 4; r++)
#pragma GCC unroll 3
		for (int t = 0; t < 3; t++)
			a[r][t] = c[3 * r + t];
	for (size_t i = 0; i < KC; i += 8) {
		__m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + XS + i),
		       x2 = _mm256_loadu_ps(x + 2 * XS + i);

		__asm__("" : "+x"(x0), "+x"(x1), "+x"(x2)); /* one load each */
#pragma GCC unroll 4
		for (int r = 0; r < 4; r++) {
			__m256 w = _mm256_load_ps(p + r * PS + i);

			a[r][0] = _mm256_fmadd_ps(w, x0, a[r][0]);
			a[r][1] = _mm256_fmadd_ps(w, x1, a[r][1]);
			a[r][2] = _mm256_fmadd_ps(w, x2, a[r][2]);
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < 4; r++)
#pragma GCC unroll 3
		for (int t = 0; t < 3; t++)
			c[3 * r + t] = a[r][t];
}

/* per iteration one 3-token tile over the 8-row panel, as matmul_hpanel() runs it */
static void htile_run(long iters)
{
	__m256 c[12] = { 0 };

	for (long n = 0; n < iters; n++) {
		size_t t = (size_t)n * 3 % act_tokens;

		htile_step(pan, act + t * XS, c);
		htile_step(pan + 4 * PS, act + t * XS, c);
	}
	sink = c[0][0] + c[11][7];
}

static void htile_l1(long iters)
{
	act_tokens = 3;
	htile_run(iters);
}

static void htile_l2(long iters)
{
	act_tokens = 132;
	htile_run(iters);
}

/* GOP/s of @fn(@iters), @ops per iteration: best of 5 in thread CPU time */
static double rate(void (*fn)(long), long iters, double ops)
{
	double best = 1e30;

	fn(iters / 8);
	for (int r = 0; r < 5; r++) {
		double t0 = cpu_s();

		fn(iters);
		double t = cpu_s() - t0;

		best = t < best ? t : best;
	}
	return (double)iters * ops / best / 1e9;
}

int main(void)
{
	static const struct {
		void (*fn)(long);
		int rt;
		const char *what;
	} mixes[] = {
		{ q8_2, 2, "Q8_0 tile, 1 row x 2 tokens" },
		{ q8_3, 3, "Q8_0 tile, 1 x 3 (avx2.c's)" },
		{ q8_4, 4, "Q8_0 tile, 1 x 4" },
		{ q4_3, 3, "Q4_0 tile, 1 x 3" },
		{ q4_4, 4, "Q4_0 tile, 1 x 4 (avx2.c's)" },
		{ q4_6, 6, "Q4_0 tile, 1 x 6" },
		{ naive_4, 4, "Q8_0, a scale step per 32, 1 x 4" },
	};
	long it = 1L << 22;
	double roof, fma;

	act = aligned_alloc(64, 132 * XS * sizeof(float));
	if (!act)
		return 1;
	for (int i = 0; i < 8192; i++)
		wb[i] = (int8_t)(i * 37);
	for (int t = 0; t < NT; t++) {
		for (int i = 0; i < 4096; i++)
			ab[t][i] = (int8_t)(i * 11 + t);
		for (int i = 0; i < 1024; i++)
			fb[t][i] = 1e-3f * (float)((i + t) % 7);
	}
	for (size_t i = 0; i < 132 * XS; i++)
		act[i] = 1e-3f * (float)(i % 13);
	for (int i = 0; i < 8 * PS; i++)
		pan[i] = 1e-3f * (float)(i % 7);

	roof = rate(kvp_bench_maddubs_ymm, it, NACC * 64);
	printf("one thread, thread CPU time, best of 5\n");
	printf("int8 roof (vpmaddubsw+vpmaddwd+vpaddd): %.1f GOP/s\n", roof);
	for (size_t m = 0; m < sizeof(mixes) / sizeof(mixes[0]); m++) {
		double g = rate(mixes[m].fn, it, 128.0 * 2 * mixes[m].rt);

		printf("  %-34s %6.1f GOP/s  %.2f of the roof\n", mixes[m].what, g, g / roof);
	}
	fma = rate(kvp_bench_fma_ymm, it, NACC * 16);
	printf("f32 roof (vfmadd231ps ymm): %.1f GFLOP/s\n", fma);
	for (int l = 0; l < 2; l++) {
		double g = rate(l ? htile_l2 : htile_l1, it / 64, 2.0 * 2 * 12 * KC);

		printf("  %-34s %6.1f GFLOP/s  %.2f of the roof\n",
		       l ? "F16 htile 4x3, tokens from L2" : "F16 htile 4x3, tokens in L1", g,
		       g / fma);
	}
	free(act);
	return 0;
}
