/* SPDX-License-Identifier: MIT */
/*
 * kernels.c - numeric kernels.  Loops are written so GCC vectorises them
 * (-fopenmp-simd pragmas for the reductions, where float reassociation is acceptable);
 * the type conversions are exact bit manipulations, with the F16C instructions used
 * when the build targets a CPU that has them (they give identical results).
 * No state; any thread.
 */
#include "compute/kernels.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "compute/mkmodel.h"
#include "kvpool/layout.h"

static inline uint32_t f2u(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static inline float u2f(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

float kvp_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff;

	if (exp == 0x1f)	/* inf / NaN: keep the payload, quiet bit as hardware does */
		return u2f(sign | 0x7f800000 | (man << 13) | (man ? 0x400000 : 0));
	if (exp == 0) {
		if (!man)
			return u2f(sign);
		/* subnormal: man * 2^-24, exact in f32 */
		return sign ? -(float)man * 0x1p-24f : (float)man * 0x1p-24f;
	}
	return u2f(sign | ((exp + 112) << 23) | (man << 13));
}

float kvp_bf16_to_f32(uint16_t b)
{
	return u2f((uint32_t)b << 16);
}

uint16_t kvp_f32_to_f16(float f)
{
	uint32_t u = f2u(f);
	uint32_t sign = (u >> 16) & 0x8000;
	uint32_t a = u & 0x7fffffff;

	if (a > 0x7f800000)	/* NaN */
		return sign | 0x7e00 | ((a >> 13) & 0x3ff);
	if (a >= 0x477ff000)	/* rounds to >= 65520: inf */
		return sign | 0x7c00;
	if (a < 0x38800000) {	/* below the smallest normal half: subnormal or zero */
		/* value = a_float; half subnormal unit is 2^-24: round(|f| * 2^24) */
		float v = u2f(a) * 0x1p24f;	/* exact: scaling by a power of two */
		uint32_t q = (uint32_t)v;
		float rem = v - (float)q;

		if (rem > 0.5f || (rem == 0.5f && (q & 1)))
			q++;
		return sign | q;	/* q <= 0x400 rolls into the smallest normal correctly */
	}
	/* normal: rebias, round to nearest even on the 13 dropped bits */
	uint32_t r = a - 0x38000000;	/* exponent 127 -> 15 */
	uint32_t lsb = (r >> 13) & 1;

	r += 0xfff + lsb;
	return sign | (r >> 13);
}

uint16_t kvp_f32_to_bf16(float f)
{
	uint32_t u = f2u(f);

	if ((u & 0x7fffffff) > 0x7f800000)
		return (u >> 16) | 0x40;	/* quiet NaN */
	return (u + 0x7fff + ((u >> 16) & 1)) >> 16;
}

static void f16_to_f32_n(float *restrict dst, const uint16_t *restrict src, size_t n)
{
	size_t i = 0;

#if defined(__F16C__)
	for (; i + 8 <= n; i += 8) {
		__m128i h = _mm_loadu_si128((const __m128i *)(src + i));
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
	}
#endif
	for (; i < n; i++)
		dst[i] = kvp_f16_to_f32(src[i]);
}

static void bf16_to_f32_n(float *restrict dst, const uint16_t *restrict src, size_t n)
{
#pragma omp simd
	for (size_t i = 0; i < n; i++)
		dst[i] = u2f((uint32_t)src[i] << 16);
}

int kvp_dequant(float *restrict dst, const void *restrict src, uint32_t type, size_t n)
{
	switch (type) {
	case KVP_GGML_F32:
		memcpy(dst, src, n * 4);
		return 0;
	case KVP_GGML_F16:
		f16_to_f32_n(dst, src, n);
		return 0;
	case KVP_GGML_BF16:
		bf16_to_f32_n(dst, src, n);
		return 0;
	case KVP_GGML_Q8_0: {
		const uint8_t *b = src;

		for (size_t blk = 0; blk < n / KVP_Q8_0_BLOCK; blk++, b += KVP_Q8_0_BYTES) {
			uint16_t dh;
			float d;
			const int8_t *q = (const int8_t *)(b + 2);

			memcpy(&dh, b, 2);
			d = kvp_f16_to_f32(dh);
			/* d * q is exact in f32 (11 + 8 significant bits) */
			for (int j = 0; j < KVP_Q8_0_BLOCK; j++)
				dst[blk * KVP_Q8_0_BLOCK + j] = d * (float)q[j];
		}
		return 0;
	}
	default:
		return -ENOTSUP;
	}
}

void kvp_kv_store(void *restrict dst, uint32_t dtype, const float *restrict src, size_t n)
{
	uint16_t *h = dst;
	size_t i = 0;

	switch (dtype) {
	case KVP_DTYPE_F32:
		memcpy(dst, src, n * 4);
		return;
	case KVP_DTYPE_F16:
#if defined(__F16C__)
		for (; i + 8 <= n; i += 8)
			_mm_storeu_si128((__m128i *)(h + i),
					 _mm256_cvtps_ph(_mm256_loadu_ps(src + i),
							 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
		for (; i < n; i++)
			h[i] = kvp_f32_to_f16(src[i]);
		return;
	case KVP_DTYPE_BF16:
		for (; i < n; i++)
			h[i] = kvp_f32_to_bf16(src[i]);
		return;
	}
}

void kvp_kv_load(float *restrict dst, const void *restrict src, uint32_t dtype, size_t n)
{
	switch (dtype) {
	case KVP_DTYPE_F32:
		memcpy(dst, src, n * 4);
		return;
	case KVP_DTYPE_F16:
		f16_to_f32_n(dst, src, n);
		return;
	case KVP_DTYPE_BF16:
		bf16_to_f32_n(dst, src, n);
		return;
	}
}

void kvp_rmsnorm(float *out, const float *x, const float *restrict w, size_t n, float eps)
{
	float ss = 0;

#pragma omp simd reduction(+ : ss)
	for (size_t i = 0; i < n; i++)
		ss += x[i] * x[i];
	float scale = 1.0f / sqrtf(ss / (float)n + eps);

	for (size_t i = 0; i < n; i++)
		out[i] = x[i] * scale * w[i];
}

void kvp_rope_table(float *restrict cs, uint32_t pos, uint32_t n_rot, float base)
{
	for (uint32_t i = 0; i < n_rot / 2; i++) {
		double theta = (double)pos * pow((double)base, -2.0 * i / (double)n_rot);

		cs[2 * i] = (float)cos(theta);
		cs[2 * i + 1] = (float)sin(theta);
	}
}

void kvp_rope_apply(float *restrict x, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot,
		    const float *restrict cs)
{
	for (uint32_t h = 0; h < n_heads; h++) {
		float *v = x + (size_t)h * head_dim;

		for (uint32_t i = 0; i < n_rot / 2; i++) {
			float c = cs[2 * i], s = cs[2 * i + 1];
			float a = v[2 * i], b = v[2 * i + 1];

			v[2 * i] = a * c - b * s;
			v[2 * i + 1] = a * s + b * c;
		}
	}
}

void kvp_softmax(float *x, size_t n)
{
	float mx = -INFINITY;
	double sum = 0;

	for (size_t i = 0; i < n; i++)
		mx = x[i] > mx ? x[i] : mx;
	for (size_t i = 0; i < n; i++) {
		x[i] = expf(x[i] - mx);
		sum += x[i];
	}
	float inv = (float)(1.0 / sum);

	for (size_t i = 0; i < n; i++)
		x[i] *= inv;
}

void kvp_swiglu(float *restrict gate, const float *restrict up, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float g = gate[i];

		gate[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

float kvp_dot(const float *restrict a, const float *restrict b, size_t n)
{
	float s = 0;

#pragma omp simd reduction(+ : s)
	for (size_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}

void kvp_axpy(float *restrict y, float a, const float *restrict x, size_t n)
{
#pragma omp simd
	for (size_t i = 0; i < n; i++)
		y[i] += a * x[i];
}

void kvp_linear(float *restrict out, const float *restrict x, const float *restrict w,
		size_t rows, size_t d_out, size_t d_in)
{
	if (rows == 1)
		cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)d_out, (int)d_in, 1.0f, w, (int)d_in,
			    x, 1, 0.0f, out, 1);
	else
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)d_out,
			    (int)d_in, 1.0f, x, (int)d_in, w, (int)d_in, 0.0f, out, (int)d_out);
}

/* 16 floats: one AVX-512 register when built with -march=native; unaligned loads */
typedef float v16 __attribute__((vector_size(64), aligned(4)));

typedef float v8 __attribute__((vector_size(32), aligned(4)));
typedef float v4 __attribute__((vector_size(16), aligned(4)));

/*
 * Sum of the 16 lanes as a tree (halves added, four adds deep): a lane-by-lane loop
 * is 15 dependent adds per output, which dominates small matrices (d_in = 64: four
 * FMA iterations per row).
 */
static inline float hsum(v16 v)
{
	v8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
	       __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
	v4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);

	return (b[0] + b[2]) + (b[1] + b[3]);
}

/*
 * R input rows against three output rows (o, o+1, o+2) at a time, each row streamed
 * whole: every W load feeds R FMAs and every x load three, and 3R accumulators + 4
 * operands fit the 32 vector registers at R = 8.  Decode is bound by streaming W, and
 * at R = 8 the FMAs take about a third of the time the stream does (measured: 30 GB/s
 * of L2-resident W per core vs 13 GB/s from DRAM); without help the two add up instead
 * of overlapping, because the FMA-heavy loop issues its misses late.  So each row is
 * prefetched GEMV_PF_BYTES ahead into L2 (prefetcht2), about 100 ns of work at R = 8,
 * and rows are not tiled along k: a tile boundary restarts the hardware prefetcher on
 * every row (tiling at 1024 floats, the previous kernel, read 30-50% slower).
 * Prefetches past the matrix's end are harmless (they never fault).
 */
#define GEMV_PF_BYTES 8192
#define GEMV_BODY(R)								\
	for (size_t o = o0; o < o1; o += 3) {					\
		const float *w0 = w + o * d_in;					\
		const float *w1 = o + 1 < o1 ? w0 + d_in : w0;			\
		const float *w2 = o + 2 < o1 ? w0 + 2 * d_in : w0;		\
		size_t kv = d_in / 16 * 16;					\
		v16 a0[R], a1[R], a2[R];					\
		_Pragma("GCC unroll 8")						\
		for (int r = 0; r < R; r++)					\
			a0[r] = a1[r] = a2[r] = (v16){ 0 };			\
		for (size_t k = 0; k < kv; k += 16) {				\
			v16 x0, x1, x2;						\
			__builtin_prefetch((const char *)(w0 + k) + GEMV_PF_BYTES, 0, 1); \
			__builtin_prefetch((const char *)(w1 + k) + GEMV_PF_BYTES, 0, 1); \
			__builtin_prefetch((const char *)(w2 + k) + GEMV_PF_BYTES, 0, 1); \
			x0 = *(const v16 *)(w0 + k);				\
			x1 = *(const v16 *)(w1 + k);				\
			x2 = *(const v16 *)(w2 + k);				\
			_Pragma("GCC unroll 8")					\
			for (int r = 0; r < R; r++) {				\
				v16 xr = *(const v16 *)(x + r * d_in + k);	\
				a0[r] += x0 * xr;				\
				a1[r] += x1 * xr;				\
				a2[r] += x2 * xr;				\
			}							\
		}								\
		_Pragma("GCC unroll 8")						\
		for (int r = 0; r < R; r++) {					\
			float s0 = hsum(a0[r]), s1 = hsum(a1[r]), s2 = hsum(a2[r]); \
			for (size_t k = kv; k < d_in; k++) {			\
				s0 += w0[k] * x[r * d_in + k];			\
				s1 += w1[k] * x[r * d_in + k];			\
				s2 += w2[k] * x[r * d_in + k];			\
			}							\
			out[r * d_out + o] = s0;				\
			if (o + 1 < o1)						\
				out[r * d_out + o + 1] = s1;			\
			if (o + 2 < o1)						\
				out[r * d_out + o + 2] = s2;			\
		}								\
	}

void kvp_gemv_rows(float *restrict out, const float *restrict x, const float *restrict w,
		   size_t rows, size_t d_out, size_t d_in, size_t o0, size_t o1)
{
	switch (rows) {
	case 1: GEMV_BODY(1) break;
	case 2: GEMV_BODY(2) break;
	case 3: GEMV_BODY(3) break;
	case 4: GEMV_BODY(4) break;
	case 5: GEMV_BODY(5) break;
	case 6: GEMV_BODY(6) break;
	case 7: GEMV_BODY(7) break;
	default: GEMV_BODY(8) break;
	}
}
