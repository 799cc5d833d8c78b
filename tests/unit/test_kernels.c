/* SPDX-License-Identifier: MIT */
/*
 * test_kernels.c - type conversions exactly against scalar references written here
 * from the format definitions, and the float kernels against their formulas.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/kernels.h"
#include "compute/mkmodel.h"
#include "kvpool/layout.h"

static uint32_t bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

/* IEEE binary16 by definition: (-1)^s * 2^(e-15) * (1 + m/1024), subnormal 2^-14 * m/1024 */
static float half_ref(uint16_t h)
{
	int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
	double v;

	if (e == 31)
		return m ? NAN : (s ? -INFINITY : INFINITY);
	v = e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
	return (float)(s ? -v : v);
}

static void test_f16_all_values_exact(void **state)
{
	/* all 65536 halves: scalar and bulk (F16C) paths equal the definition, bit for bit */
	uint16_t *h = malloc(65536 * 2);
	float *f = malloc(65536 * 4);

	for (uint32_t i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	assert_int_equal(kvp_dequant(f, h, KVP_GGML_F16, 65536), 0);
	for (uint32_t i = 0; i < 65536; i++) {
		float r = half_ref((uint16_t)i), s = kvp_f16_to_f32((uint16_t)i);

		if (isnan(r)) {
			assert_true(isnan(s) && isnan(f[i]));
			assert_int_equal(bits(s), bits(f[i]));	/* same NaN payload both ways */
		} else {
			assert_int_equal(bits(s), bits(r));
			assert_int_equal(bits(f[i]), bits(r));
		}
	}
	free(h);
	free(f);
}

static void test_bf16_all_values_exact(void **state)
{
	/* bf16 is the top half of an f32: all 65536 patterns */
	uint16_t *h = malloc(65536 * 2);
	float *f = malloc(65536 * 4);

	for (uint32_t i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	assert_int_equal(kvp_dequant(f, h, KVP_GGML_BF16, 65536), 0);
	for (uint32_t i = 0; i < 65536; i++) {
		assert_int_equal(bits(f[i]), i << 16);
		assert_int_equal(bits(kvp_bf16_to_f32((uint16_t)i)), i << 16);
	}
	free(h);
	free(f);
}

static void test_q8_0_exact(void **state)
{
	/* Q8_0 blocks: value = half(d) * q, for random scales and every int8 value */
	enum { NB = 64 };
	uint8_t blk[NB * 34];
	float f[NB * 32];
	uint64_t s = 12345;

	for (int b = 0; b < NB; b++) {
		uint16_t d = (uint16_t)((s = s * 6364136223846793005ull + 1) >> 48) & 0x7bff;

		memcpy(blk + b * 34, &d, 2);
		for (int j = 0; j < 32; j++)
			blk[b * 34 + 2 + j] = (uint8_t)(b * 32 + j);	/* all 256 values over 8 blocks */
	}
	assert_int_equal(kvp_dequant(f, blk, KVP_GGML_Q8_0, NB * 32), 0);
	for (int b = 0; b < NB; b++) {
		uint16_t d;

		memcpy(&d, blk + b * 34, 2);
		for (int j = 0; j < 32; j++) {
			double want = (double)half_ref(d) * (int8_t)blk[b * 34 + 2 + j];

			assert_int_equal(bits(f[b * 32 + j]), bits((float)want));
		}
	}
	assert_int_equal(kvp_dequant(f, blk, 2 /* q4_0 */, 32), -ENOTSUP);
}

static void test_f32_to_f16_round_nearest_even(void **state)
{
	/*
	 * every finite half round-trips; the midpoint between neighbours goes to the even
	 * one; bulk K/V store equals the scalar conversion on random values of all sizes
	 */
	uint64_t s = 777;
	float src[4096];
	uint16_t out[4096];

	for (uint32_t i = 0; i < 0x7c00; i++) {
		for (uint32_t sign = 0; sign < 2; sign++) {
			uint16_t h = (uint16_t)(i | sign << 15);

			assert_int_equal(kvp_f32_to_f16(kvp_f16_to_f32(h)), h);
			if (i + 1 < 0x7c00) {
				float mid = (kvp_f16_to_f32((uint16_t)i) + kvp_f16_to_f32((uint16_t)(i + 1))) / 2;
				uint16_t want = (i & 1) ? i + 1 : i;

				assert_int_equal(kvp_f32_to_f16(mid), want);
			}
		}
	}
	assert_int_equal(kvp_f32_to_f16(70000.0f), 0x7c00);
	assert_int_equal(kvp_f32_to_f16(-INFINITY), 0xfc00);
	assert_true((kvp_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (kvp_f32_to_f16(NAN) & 0x3ff));
	for (int i = 0; i < 4096; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		src[i] = ldexpf((float)(s >> 40) / (1 << 24), (int)((s >> 8) % 50) - 30) *
			 ((s & 1) ? -1 : 1);
	}
	kvp_kv_store(out, KVP_DTYPE_F16, src, 4096);
	for (int i = 0; i < 4096; i++)
		assert_int_equal(out[i], kvp_f32_to_f16(src[i]));
	kvp_kv_store(out, KVP_DTYPE_BF16, src, 4096);
	for (int i = 0; i < 4096; i++) {
		uint32_t u = bits(src[i]), lo = u & 0xffff, hi = u >> 16;
		uint16_t want = (uint16_t)(lo > 0x8000 || (lo == 0x8000 && (hi & 1)) ? hi + 1 : hi);

		assert_int_equal(out[i], want);
	}
}

static void test_float_kernels_match_formulas(void **state)
{
	/* rmsnorm, rope, softmax, swiglu, dot and the BLAS linear layer vs direct formulas */
	enum { N = 64, R = 5, O = 24 };
	float x[N], w[N], o[N], cs[N], y[N], W[O * N], X[R * N], out[R * O];
	double ss = 0;

	for (int i = 0; i < N; i++) {
		x[i] = sinf(i * 0.7f) * 3;
		w[i] = 0.5f + i / 64.0f;
		ss += (double)x[i] * x[i];
	}
	kvp_rmsnorm(o, x, w, N, 1e-5f);
	for (int i = 0; i < N; i++)
		assert_true(fabs(o[i] - x[i] / sqrt(ss / N + 1e-5) * w[i]) < 1e-5);

	kvp_rope_table(cs, 17, N / 2, 10000.0f);
	memcpy(y, x, sizeof(x));
	kvp_rope_apply(y, 2, N / 2, N / 2, cs);	/* 2 heads of 32, all rotated */
	for (int h = 0; h < 2; h++)
		for (int i = 0; i < N / 4; i++) {
			double th = 17 * pow(10000.0, -2.0 * i / (N / 2));
			double a = x[h * 32 + 2 * i], b = x[h * 32 + 2 * i + 1];

			assert_true(fabs(y[h * 32 + 2 * i] - (a * cos(th) - b * sin(th))) < 1e-5);
			assert_true(fabs(y[h * 32 + 2 * i + 1] - (a * sin(th) + b * cos(th))) < 1e-5);
		}

	memcpy(y, x, sizeof(x));
	kvp_softmax(y, N);
	double mx = -1e30, sum = 0;
	for (int i = 0; i < N; i++)
		mx = x[i] > mx ? x[i] : mx;
	for (int i = 0; i < N; i++)
		sum += exp(x[i] - mx);
	for (int i = 0; i < N; i++)
		assert_true(fabs(y[i] - exp(x[i] - mx) / sum) < 1e-6);

	memcpy(y, x, sizeof(x));
	kvp_swiglu(y, w, N);
	for (int i = 0; i < N; i++)
		assert_true(fabs(y[i] - x[i] / (1 + exp(-x[i])) * w[i]) < 1e-5);

	double d = 0;
	for (int i = 0; i < N; i++)
		d += (double)x[i] * w[i];
	assert_true(fabs(kvp_dot(x, w, N) - d) < 1e-4);

	for (int i = 0; i < O * N; i++)
		W[i] = cosf(i * 0.013f);
	for (int i = 0; i < R * N; i++)
		X[i] = sinf(i * 0.029f);
	for (int rows = 1; rows <= R; rows += R - 1) {
		kvp_linear(out, X, W, rows, O, N);
		for (int r = 0; r < rows; r++)
			for (int j = 0; j < O; j++) {
				double want = 0;

				for (int k = 0; k < N; k++)
					want += (double)X[r * N + k] * W[j * N + k];
				assert_true(fabs(out[r * O + j] - want) < 1e-4);
			}
	}
}

/* kvp_gemv_rows() for every row count on a (DO, @di) matrix, outputs [16, 33) only */
static void gemv_rows_vs_naive(int di)
{
	enum { DO = 40 };
	float *w = malloc((size_t)DO * di * 4), *x = malloc((size_t)8 * di * 4), out[8 * DO];

	for (int i = 0; i < DO * di; i++)
		w[i] = sinf(i * 0.37f);
	for (int i = 0; i < 8 * di; i++)
		x[i] = cosf(i * 0.11f);
	for (int rows = 1; rows <= KVP_GEMV_ROWS_MAX; rows++) {
		for (int i = 0; i < 8 * DO; i++)
			out[i] = -1234.0f;
		kvp_gemv_rows(out, x, w, rows, DO, di, 16, 33);
		for (int r = 0; r < 8; r++)
			for (int o = 0; o < DO; o++) {
				double want = 0, mag = 0;

				if (r >= rows || o < 16 || o >= 33) {
					assert_true(out[r * DO + o] == -1234.0f);	/* untouched */
					continue;
				}
				for (int k = 0; k < di; k++) {
					want += (double)x[r * di + k] * w[o * di + k];
					mag += fabs((double)x[r * di + k] * w[o * di + k]);
				}
				if (!(fabs(out[r * DO + o] - want) < 1e-5 * mag + 1e-6))
					fail_msg("d_in %d, rows %d, out (%d, %d): %g, want %g", di, rows,
						 r, o, out[r * DO + o], want);
			}
	}
	free(w);
	free(x);
}

static void test_gemv_rows_matches_naive(void **state)
{
	/*
	 * the decode kernel: every row count 1..8, an odd sub-range of outputs, a d_in with
	 * a scalar tail, and one spanning several k tiles with a partial last tile
	 */
	gemv_rows_vs_naive(77);
	gemv_rows_vs_naive(2 * 1024 + 100);
	gemv_rows_vs_naive(8192);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_f16_all_values_exact),
		cmocka_unit_test(test_bf16_all_values_exact),
		cmocka_unit_test(test_q8_0_exact),
		cmocka_unit_test(test_f32_to_f16_round_nearest_even),
		cmocka_unit_test(test_float_kernels_match_formulas),
		cmocka_unit_test(test_gemv_rows_matches_naive),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
