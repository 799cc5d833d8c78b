/* SPDX-License-Identifier: MIT */
/*
 * avx2.c - the AVX2 kernel table (AVX2 + FMA + F16C: every x86-64 CPU since Haswell
 * and Zen 1).  Built with those flags only; dispatch.c checks the CPU first.
 *
 * Same structure as avx512.c (a weight row unpacked into groups of 256 codes in the
 * activations' lane order, then dotted against a group of tokens), with 256-bit
 * registers and without VNNI: vpmaddubsw (u8 x s8 -> int16 pairs) then vpmaddwd by 1
 * sums each 4 products into a 32-bit lane.
 */
#include "compute/kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

#include "compute/kernels/table.inc"

/* the integer K/V kernels (kvq.inc), vectorised for this file's instruction set */
#define KVQ_H2F(h) _cvtsh_ss(h)
#define KVQ_SIMD _Pragma("omp simd")
#define KVQ_SIMD_MAX _Pragma("omp simd reduction(max : amax)")
#include "compute/kernels/kvq.inc"

#define VLEN 8
#define GEMV_GROUP 4

typedef float vf8_t __attribute__((vector_size(32), aligned(4)));

static inline vf8_t vf_load_f16(const uint16_t *p)
{
	return (vf8_t)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline void vf_store_f16(uint16_t *p, vf8_t v)
{
	_mm_storeu_si128((__m128i *)p,
			 _mm256_cvtps_ph((__m256)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

#include "compute/kernels/vec_f32.inc"

/* Tokens per group of the dot micro-kernel (16 registers: 2 per token + 4 operands). */
#define GROUP 4
#define TOKEN_BLOCK 64

static inline float hsum8(__m256 v)
{
	__m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));

	s = _mm_add_ps(s, _mm_movehl_ps(s, s));
	s = _mm_add_ss(s, _mm_movehdup_ps(s));
	return _mm_cvtss_f32(s);
}

/* ---- integer weights (see avx512.c for the group layout) ---- */

/*
 * One group of 256 weights in the lane order of struct kvp_act_q8, as 256-bit halves:
 * lo[c] = bytes 64c .. 64c + 31 (sub-blocks 0-7), hi[c] = the rest (8-15); per
 * sub-block the weight scale dw and the correction c.  Q8_0 keeps its codes signed
 * (@sgn): vpmaddubsw takes u8 x s8 into int16 pairs, and 255 x 127 twice would
 * saturate, so those go through |w| x sign(a, w) instead, with no offset to correct.
 */
struct wgrp {
	__m256i lo[4], hi[4];
	__m256 dw[2], c[2];
};

static inline uint16_t ld16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return v;
}

static inline float h2f(uint16_t h)
{
	return _cvtsh_ss(h);
}

/*
 * Element order (8 registers of 32 consecutive elements) to lane order, one half at a
 * time: out[c] lane i = register i / 2, dword 4 (i % 2) + c.  Per register the dwords
 * are paired by chunk, then the 64-bit pairs transposed across four registers.
 */
static inline void to_lanes_half(const __m256i *n, __m256i *out)
{
	const __m256i pair = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
	__m256i p0 = _mm256_permutevar8x32_epi32(n[0], pair),
		p1 = _mm256_permutevar8x32_epi32(n[1], pair);
	__m256i p2 = _mm256_permutevar8x32_epi32(n[2], pair),
		p3 = _mm256_permutevar8x32_epi32(n[3], pair);
	__m256i t0 = _mm256_unpacklo_epi64(p0, p1), t1 = _mm256_unpackhi_epi64(p0, p1);
	__m256i t2 = _mm256_unpacklo_epi64(p2, p3), t3 = _mm256_unpackhi_epi64(p2, p3);

	out[0] = _mm256_permute2x128_si256(t0, t2, 0x20);
	out[1] = _mm256_permute2x128_si256(t1, t3, 0x20);
	out[2] = _mm256_permute2x128_si256(t0, t2, 0x31);
	out[3] = _mm256_permute2x128_si256(t1, t3, 0x31);
}

static inline void to_lanes(const __m256i *n, struct wgrp *w)
{
	to_lanes_half(n, w->lo);
	to_lanes_half(n + 4, w->hi);
}

static inline __m256i ldy(const uint8_t *p)
{
	return _mm256_loadu_si256((const __m256i *)p);
}

/* bytes of @v shifted right by @s, masked to @m (16-bit shifts; the mask drops the spill) */
static inline __m256i bits(__m256i v, int s, int m)
{
	return _mm256_and_si256(_mm256_srli_epi16(v, s), _mm256_set1_epi8((char)m));
}

/* per sub-block dw = d sc, c = -(dw off + dm mn), from 16 int16 each */
static inline void k_scales(struct wgrp *w, const int16_t *sc, const int16_t *mn, float d, float dm,
			    int off)
{
	for (int h = 0; h < 2; h++) {
		__m256 fs = _mm256_cvtepi32_ps(
			_mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(sc + 8 * h))));
		__m256 fm = _mm256_cvtepi32_ps(
			_mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)(mn + 8 * h))));

		w->dw[h] = _mm256_mul_ps(fs, _mm256_set1_ps(d));
		w->c[h] = _mm256_sub_ps(_mm256_mul_ps(w->dw[h], _mm256_set1_ps((float)-off)),
					_mm256_mul_ps(fm, _mm256_set1_ps(dm)));
	}
}

static inline __attribute__((always_inline)) void unpack_k(const uint8_t *blk, uint32_t type,
							   struct wgrp *w)
{
	__m256i n[8];
	int16_t sc[16], mn[16] = { 0 };

	switch (type) {
	case KVP_GGML_Q4_K:
	case KVP_GGML_Q5_K: {
		int five = type == KVP_GGML_Q5_K;
		const uint8_t *qs = blk + (five ? 48 : 16), *s = blk + 4;

		for (int c = 0; c < 4; c++) {
			__m256i v = ldy(qs + 32 * c), lo = bits(v, 0, 0xf), hi = bits(v, 4, 0xf);

			if (five) {
				__m256i h = ldy(blk + 16);

				lo = _mm256_or_si256(lo, _mm256_slli_epi16(bits(h, 2 * c, 1), 4));
				hi = _mm256_or_si256(hi,
						     _mm256_slli_epi16(bits(h, 2 * c + 1, 1), 4));
			}
			n[2 * c] = lo;
			n[2 * c + 1] = hi;
		}
		for (int j = 0; j < 8; j++) {
			int a, m;

			if (j < 4) {
				a = s[j] & 63;
				m = s[j + 4] & 63;
			} else {
				a = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
				m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
			}
			sc[2 * j] = sc[2 * j + 1] = (int16_t)a;
			mn[2 * j] = mn[2 * j + 1] = (int16_t)m;
		}
		k_scales(w, sc, mn, h2f(ld16(blk)), h2f(ld16(blk + 2)), 0);
		break;
	}
	case KVP_GGML_Q6_K:
		for (int h = 0; h < 2; h++) {
			__m256i l0 = ldy(blk + 64 * h), l1 = ldy(blk + 64 * h + 32);
			__m256i q = ldy(blk + 128 + 32 * h);

			n[4 * h] = _mm256_or_si256(bits(l0, 0, 0xf),
						   _mm256_slli_epi16(bits(q, 0, 3), 4));
			n[4 * h + 1] = _mm256_or_si256(bits(l1, 0, 0xf),
						       _mm256_slli_epi16(bits(q, 2, 3), 4));
			n[4 * h + 2] = _mm256_or_si256(bits(l0, 4, 0xf),
						       _mm256_slli_epi16(bits(q, 4, 3), 4));
			n[4 * h + 3] = _mm256_or_si256(bits(l1, 4, 0xf),
						       _mm256_slli_epi16(bits(q, 6, 3), 4));
		}
		for (int j = 0; j < 16; j++)
			sc[j] = (int8_t)blk[192 + j];
		k_scales(w, sc, mn, h2f(ld16(blk + 208)), 0, 32);
		break;
	case KVP_GGML_Q2_K:
	case KVP_GGML_Q3_K: {
		int three = type == KVP_GGML_Q3_K;
		const uint8_t *qs = blk + (three ? 32 : 16);

		for (int c = 0; c < 4; c++) {
			__m256i v = ldy(qs + 32 * (c / 2));
			int pl = 2 * (c % 2);
			__m256i lo = bits(v, 2 * pl, 3), hi = bits(v, 2 * pl + 2, 3);

			if (three) {
				__m256i h = ldy(blk);

				lo = _mm256_or_si256(lo, _mm256_slli_epi16(bits(h, 2 * c, 1), 2));
				hi = _mm256_or_si256(hi,
						     _mm256_slli_epi16(bits(h, 2 * c + 1, 1), 2));
			}
			n[2 * c] = lo;
			n[2 * c + 1] = hi;
		}
		if (three) {
			for (int j = 0; j < 16; j++) {
				int lo = j < 8 ? blk[96 + j] & 0xf : blk[96 + j - 8] >> 4;
				int hi = (blk[104 + j % 4] >> (2 * (j / 4))) & 3;

				sc[j] = (int16_t)((lo | hi << 4) - 32);
			}
			k_scales(w, sc, mn, h2f(ld16(blk + 108)), 0, 4);
		} else {
			for (int j = 0; j < 16; j++) {
				sc[j] = blk[j] & 0xf;
				mn[j] = blk[j] >> 4;
			}
			k_scales(w, sc, mn, h2f(ld16(blk + 80)), h2f(ld16(blk + 82)), 0);
		}
		break;
	}
	}
	to_lanes(n, w);
}

static inline __attribute__((always_inline)) void unpack_l(const uint8_t *blk, uint32_t type,
							   size_t nb, struct wgrp *w)
{
	const __m128i m4 = _mm_set1_epi8(0x0f);
	uint32_t bb = blk_bytes(type);
	int off = type == KVP_GGML_Q4_0 ? 8 : type == KVP_GGML_Q5_0 ? 16 : 0;
	float d[16] = { 0 }, c[16] = { 0 };
	__m256i n[8];

	for (size_t b = 0; b < 8; b++) {
		const uint8_t *x = blk + b * bb;
		float db, m = 0;

		if (b >= nb) {
			n[b] = _mm256_setzero_si256();
			continue;
		}
		db = h2f(ld16(x));
		switch (type) {
		case KVP_GGML_Q8_0: /* signed codes, no offset: see struct wgrp */
			n[b] = ldy(x + 2);
			break;
		case KVP_GGML_Q4_0:
		case KVP_GGML_Q4_1: {
			__m128i v = _mm_loadu_si128(
				(const __m128i *)(x + (type == KVP_GGML_Q4_0 ? 2 : 4)));

			n[b] = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4),
						_mm_and_si128(v, m4));
			if (type == KVP_GGML_Q4_1)
				m = h2f(ld16(x + 2));
			break;
		}
		default: { /* Q5_0, Q5_1: nibbles plus bit e of qh as 16 */
			int one = type == KVP_GGML_Q5_1;
			__m128i v = _mm_loadu_si128((const __m128i *)(x + (one ? 8 : 6)));
			uint8_t hb[32];
			uint32_t qh;

			memcpy(&qh, x + (one ? 4 : 2), 4);
			for (int e = 0; e < 32; e++)
				hb[e] = (uint8_t)(((qh >> e) & 1) << 4);
			n[b] = _mm256_or_si256(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4),
									      m4),
								_mm_and_si128(v, m4)),
					       ldy(hb));
			if (one)
				m = h2f(ld16(x + 2));
			break;
		}
		}
		d[2 * b] = d[2 * b + 1] = db;
		c[2 * b] = c[2 * b + 1] = m - (float)off * db;
	}
	w->dw[0] = _mm256_loadu_ps(d);
	w->dw[1] = _mm256_loadu_ps(d + 8);
	w->c[0] = _mm256_loadu_ps(c);
	w->c[1] = _mm256_loadu_ps(c + 8);
	to_lanes(n, w);
}

/* u8 x s8 (or, @sgn, s8 x s8 through the sign trick) 32 products, summed per 4 into int32 */
static inline __m256i dot4(__m256i w, __m256i a, int sgn)
{
	__m256i p = sgn ? _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)) :
			  _mm256_maddubs_epi16(w, a);

	return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

static inline __attribute__((always_inline)) void
gdot(const struct wgrp *w, const uint8_t *x, size_t xs, size_t g, const int R, __m256 *acc, int sgn)
{
#pragma GCC unroll 4
	for (int r = 0; r < R; r++) {
		const struct kvp_act_q8 *a = (const struct kvp_act_q8 *)(x + r * xs) + g;
		__m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();

#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
			lo = _mm256_add_epi32(lo, dot4(w->lo[c],
						       ldy((const uint8_t *)a->q + 64 * c), sgn));
			hi = _mm256_add_epi32(hi,
					      dot4(w->hi[c],
						   ldy((const uint8_t *)a->q + 64 * c + 32), sgn));
		}
		acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo),
					 _mm256_mul_ps(w->dw[0], _mm256_loadu_ps(a->d)), acc[r]);
		acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi),
					 _mm256_mul_ps(w->dw[1], _mm256_loadu_ps(a->d + 8)),
					 acc[r]);
		acc[r] = _mm256_fmadd_ps(w->c[0], _mm256_loadu_ps(a->s), acc[r]);
		acc[r] = _mm256_fmadd_ps(w->c[1], _mm256_loadu_ps(a->s + 8), acc[r]);
	}
}

static inline __attribute__((always_inline)) void unpack(const uint8_t *wr, uint32_t type, size_t k,
							 size_t g, struct wgrp *w)
{
	if (type >= KVP_GGML_Q2_K) {
		unpack_k(wr + g * blk_bytes(type), type, w);
	} else {
		size_t nb = (k - g * KVP_QG) / KVP_QK;

		unpack_l(wr + g * 8 * blk_bytes(type), type, nb < 8 ? nb : 8, w);
	}
}

#define PANEL_MAX 64

static inline __attribute__((always_inline)) void mat_rows(float *out, size_t ldo, size_t o,
							   const struct wgrp *panel, size_t g0,
							   size_t ng, const uint8_t *x, size_t xs,
							   const int R, int sgn, int add)
{
	__m256 acc[GROUP];

#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		acc[r] = _mm256_setzero_ps();
	for (size_t g = 0; g < ng; g++)
		gdot(&panel[g], x, xs, g0 + g, R, acc, sgn);
#pragma GCC unroll 4
	for (int r = 0; r < R; r++)
		out[r * ldo + o] = add ? out[r * ldo + o] + hsum8(acc[r]) : hsum8(acc[r]);
}

static inline __attribute__((always_inline)) void
matmul_int(float *restrict out, size_t ldo, const uint8_t *restrict w, size_t w_row_bytes,
	   const uint8_t *restrict x, size_t xs, size_t rows, size_t k, size_t o0, size_t o1,
	   uint32_t type)
{
	struct wgrp panel[PANEL_MAX];
	size_t ng = (k + KVP_QG - 1) / KVP_QG;
	int sgn = type == KVP_GGML_Q8_0;

	for (size_t t0 = 0; t0 < rows; t0 += TOKEN_BLOCK) {
		size_t tn = rows - t0 < TOKEN_BLOCK ? rows - t0 : TOKEN_BLOCK;

		for (size_t o = o0; o < o1; o++) {
			const uint8_t *wr = w + o * w_row_bytes;

			for (size_t s0 = 0; s0 < ng; s0 += PANEL_MAX) {
				size_t sn = ng - s0 < PANEL_MAX ? ng - s0 : PANEL_MAX;

				for (size_t g = 0; g < sn; g++)
					unpack(wr, type, k, s0 + g, &panel[g]);
				for (size_t t = t0; t < t0 + tn; t += GROUP) {
					size_t R = t0 + tn - t < GROUP ? t0 + tn - t : GROUP;
					float *ot = out + t * ldo;
					const uint8_t *xt = x + t * xs;

					switch (R) {
					case 1:
						mat_rows(ot, ldo, o, panel, s0, sn, xt, xs, 1, sgn,
							 s0 > 0);
						break;
					case 2:
						mat_rows(ot, ldo, o, panel, s0, sn, xt, xs, 2, sgn,
							 s0 > 0);
						break;
					case 3:
						mat_rows(ot, ldo, o, panel, s0, sn, xt, xs, 3, sgn,
							 s0 > 0);
						break;
					default:
						mat_rows(ot, ldo, o, panel, s0, sn, xt, xs, 4, sgn,
							 s0 > 0);
						break;
					}
				}
			}
		}
	}
}

KVP_MATMUL_INT_ALL

/* ---- f16, bf16: vec_f32.inc's GEMV and dot tile over converted weights ---- */

/*
 * Up to GEMV_GROUP rows the GEMV (each weight vector converted once for every row),
 * above the dot tile (4 weight rows x 3 tokens, the same sums: see dtile()); F16C for
 * f16, 16-bit shifts for bf16 (both exact, the products are the scalar oracle's).
 * F16 prefill went one weight row at a time before: 0.11 of the FMA peak on Zen 3.
 */
static void matmul_f16(float *restrict out, size_t ldo, const void *restrict w, size_t w_row_bytes,
		       const void *restrict x, size_t x_row_bytes, size_t rows, size_t k, size_t o0,
		       size_t o1)
{
	matmul_half(out, ldo, w, w_row_bytes, x, x_row_bytes, rows, k, o0, o1, WT_F16);
}

static void matmul_bf16(float *restrict out, size_t ldo, const void *restrict w, size_t w_row_bytes,
			const void *restrict x, size_t x_row_bytes, size_t rows, size_t k,
			size_t o0, size_t o1)
{
	matmul_half(out, ldo, w, w_row_bytes, x, x_row_bytes, rows, k, o0, o1, WT_BF16);
}

KVP_REF_ACT(f32, KVP_ACT_F32)
KVP_REF_ACT(bf16, KVP_ACT_BF16)
KVP_REF_ACT(q8, KVP_ACT_Q8)

static void dequant_f16(float *restrict dst, const void *restrict src, size_t n)
{
	kv_load_f16(dst, src, n);
}

static void dequant_bf16(float *restrict dst, const void *restrict src, size_t n)
{
	kv_load_bf16(dst, src, n);
}

KVP_REF_DEQUANT_INTEGER

KVP_KERNEL_TABLE(avx2, KVP_ISA_AVX2);
