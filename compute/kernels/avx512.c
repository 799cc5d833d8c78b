/* SPDX-License-Identifier: MIT */
/*
 * avx512.c - the AVX-512 kernel table (F/BW/DQ/VL with VNNI and BF16: Zen 4 and later,
 * Sapphire Rapids and later).  Built with those flags only; dispatch.c makes sure the
 * CPU has them before anything here runs.
 *
 * Integer weights (quant.h): a row is unpacked group by group (256 elements: one
 * K-quant super-block or 8 legacy blocks) into unsigned codes in the lane order of the
 * activations (struct kvp_act_q8) plus a scale and a correction per sub-block of 16
 * (struct wgrp), then dotted with vpdpbusd: the four 64-byte chunks of a group
 * accumulate into one register whose lane i is sub-block i's integer dot product, and
 * one float step per group and token applies the scales.
 *  - decode (up to GROUP tokens): each group is unpacked into registers and used at
 *    once by every token, so the row streams through exactly once;
 *  - prefill: MK_RW rows' groups are unpacked into a stack panel once per block of
 *    TOKEN_BLOCK tokens, and a register tile of MK_RW rows x MK_RT tokens runs over it,
 *    so each activation load feeds MK_RW rows and each weight load MK_RT tokens.
 *
 * Float weights: f32 through the shared GEMV (vec_f32.inc), f16 with vcvtph2ps + FMA,
 * bf16 with vdpbf16ps against bf16 activations.
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
#include "compute/kernels/kvq4.inc"

#define VLEN 16
#define GEMV_GROUP 8

typedef float vf16_t __attribute__((vector_size(64), aligned(4)));

static inline vf16_t vf_load_f16(const uint16_t *p)
{
	return (vf16_t)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

static inline void vf_store_f16(uint16_t *p, vf16_t v)
{
	_mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph((__m512)v, _MM_FROUND_TO_NEAREST_INT |
									     _MM_FROUND_NO_EXC));
}

#include "compute/kernels/vec_f32.inc"
#include "compute/kernels/kvqattn.inc"

/* Tokens per group of the dot micro-kernel (2 accumulators each in registers). */
#define GROUP 8
/* Tokens whose activations are kept hot while all rows pass (~160 KiB at k = 2048). */
#define TOKEN_BLOCK 64

/* ---- activations ---- */

/* max |x| over 32 floats */
static inline float absmax32(const float *x)
{
	__m512 m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x)),
				 _mm512_abs_ps(_mm512_loadu_ps(x + 16)));

	return _mm512_reduce_max_ps(m);
}

/*
 * 16 floats times id, rounded to nearest even, as int32 (as nearbyintf in quant.c);
 * a NaN (converted to INT_MIN) is clamped to -127, as the reference does
 */
static inline __m512i round16(const float *x, __m512 id)
{
	__m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), id));

	return _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-127)),
				_mm512_set1_epi32(127));
}

/*
 * KVP_ACT_Q8 (quant.h): per block of 32 a scale and int8 codes, stored in dot lane
 * order: sub-block i's elements 4c..4c+3 at bytes 64c + 4i.  Sub-block i's 16 codes are
 * one zmm of int32; narrowed to bytes, dword c of it goes to chunk c, lane i.
 */
static void act_q8(void *restrict dst, const float *restrict x, size_t k)
{
	for (size_t g = 0; g < (k + KVP_QG - 1) / KVP_QG; g++) {
		struct kvp_act_q8 *a = (struct kvp_act_q8 *)dst + g;
		uint32_t lanes[16][4]; /* [sub-block][chunk]: 4 codes each */

		memset(a, 0, sizeof(*a));
		memset(lanes, 0, sizeof(lanes));
		for (size_t b = 0; b < 8 && g * KVP_QG + b * KVP_QK < k; b++) {
			const float *xb = x + g * KVP_QG + b * KVP_QK;
			float d = absmax32(xb) / 127.0f;
			__m512 id = _mm512_set1_ps(d ? 1.0f / d : 0.0f);

			for (int h = 0; h < 2; h++) {
				__m512i q = round16(xb + 16 * h, id);

				_mm_storeu_si128((__m128i *)lanes[2 * b + h],
						 _mm512_cvtepi32_epi8(q));
				a->d[2 * b + h] = d;
				a->s[2 * b + h] = d * (float)_mm512_reduce_add_epi32(q);
			}
		}
		for (int c = 0; c < 4; c++)
			for (int i = 0; i < 16; i++)
				memcpy(a->q + 64 * c + 4 * i, &lanes[i][c], 4);
	}
}

static void act_f32(void *restrict dst, const float *restrict x, size_t k)
{
	memcpy(dst, x, k * 4);
}

static void act_bf16(void *restrict dst, const float *restrict x, size_t k)
{
	kv_store_bf16(dst, x, k);
}

/* ---- integer weights ---- */

/*
 * One group of 256 weights unpacked in the lane order of struct kvp_act_q8: the codes
 * (4 chunks), and per sub-block (lane) i the weight scale dw and the correction c, so
 * against activation group a it contributes
 *   sum_i dw_i * a.d_i * sum_c dpbusd(q_c, a.q_c)_i + c_i * a.s_i.
 * Kept in registers by decode, stored as a panel by prefill.
 */
struct wgrp {
	__m512i q[4];
	__m512 dw, c;
};

static_assert(sizeof(struct wgrp) == 384, "a 64-byte multiple");

static inline float h2f(uint16_t h)
{
	return _cvtsh_ss(h);
}

static inline uint16_t ld16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return v;
}

/* 32 bytes in both halves of a zmm, each half shifted right by its own count */
static inline __m512i bcast_shift(const uint8_t *p, int s0, int s1)
{
	__m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));

	return _mm512_srlv_epi16(v, _mm512_inserti64x4(_mm512_set1_epi16((short)s0),
						       _mm256_set1_epi16((short)s1), 1));
}

/*
 * Element order (4 registers of 64 consecutive elements) to lane order: output chunk c,
 * lane i = input dword 4i + c (register i / 4, lane 4 (i % 4) + c).  Two rounds of
 * two-register permutes, then the 256-bit halves.
 */
static inline void to_lanes(__m512i *r)
{
	static const int32_t idx[2][16] = {
		/* [c = 0 | c = 1] and [c = 2 | c = 3]: lane j <- reg (j % 8) / 4, lane 4 (j % 4) + c */
		{ 0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29 },
		{ 2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31 },
	};
	__m512i a = _mm512_loadu_si512(idx[0]), b = _mm512_loadu_si512(idx[1]);
	__m512i t01 = _mm512_permutex2var_epi32(r[0], a, r[1]);
	__m512i t23 = _mm512_permutex2var_epi32(r[0], b, r[1]);
	__m512i u01 = _mm512_permutex2var_epi32(r[2], a, r[3]);
	__m512i u23 = _mm512_permutex2var_epi32(r[2], b, r[3]);

	r[0] = _mm512_shuffle_i64x2(t01, u01, 0x44);
	r[1] = _mm512_shuffle_i64x2(t01, u01, 0xee);
	r[2] = _mm512_shuffle_i64x2(t23, u23, 0x44);
	r[3] = _mm512_shuffle_i64x2(t23, u23, 0xee);
}

/*
 * Q4_K/Q5_K 6-bit scales and mins, 8 each, from the 12 packed bytes (words w0..w2):
 * scales 0-3 are the low 6 bits of bytes 0-3, 4-7 the low nibbles of bytes 8-11 with
 * the top 2 bits of bytes 0-3 above them; mins likewise from bytes 4-7 and the high
 * nibbles of 8-11.  Out: bytes 0-7 scales, 8-15 mins.
 */
static inline __m128i k4_scales_mins(const uint8_t *s)
{
	/* 16 bytes from s: the 12 of the scales and 4 of the codes after them (ignored) */
	__m128i v = _mm_loadu_si128((const __m128i *)s);
	__m128i m6 = _mm_set1_epi8(0x3f), m4 = _mm_set1_epi8(0x0f), m2 = _mm_set1_epi8(3);
	__m128i lo = _mm_and_si128(v, m6); /* o0, o2 */
	__m128i w22 = _mm_srlv_epi32(_mm_shuffle_epi32(v, 0xaa), _mm_setr_epi32(0, 4, 0, 0));
	__m128i top = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(v, 6), m2), 4);
	__m128i hi = _mm_or_si128(_mm_and_si128(w22, m4), top); /* o1, o3 */

	return _mm_unpacklo_epi32(lo, hi);
}

/* per sub-block: dw = d sc, c = -(dw off + dm mn); sc, mn as 16 int16 */
static inline void k_scales(struct wgrp *w, __m256i sc, __m256i mn, float d, float dm, int off)
{
	__m512 fs = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(sc));
	__m512 fm = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(mn));

	w->dw = _mm512_mul_ps(fs, _mm512_set1_ps(d));
	w->c = _mm512_sub_ps(_mm512_mul_ps(w->dw, _mm512_set1_ps((float)-off)),
			     _mm512_mul_ps(fm, _mm512_set1_ps(dm)));
}

/* One K-quant super-block (= one group) into @w. */
static inline __attribute__((always_inline)) void unpack_k(const uint8_t *blk, uint32_t type,
							   struct wgrp *w)
{
	const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3);
	const __m512i m1 = _mm512_set1_epi8(1);

	switch (type) {
	case KVP_GGML_Q4_K:
	case KVP_GGML_Q5_K: {
		int five = type == KVP_GGML_Q5_K;
		const uint8_t *qs = blk + (five ? 48 : 16);
		__m128i sm = k4_scales_mins(blk + 4);

#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
			__m512i q = _mm512_and_si512(bcast_shift(qs + 32 * c, 0, 4), m4);

			if (five)
				q = _mm512_or_si512(
					q,
					_mm512_slli_epi16(_mm512_and_si512(bcast_shift(blk + 16,
										       2 * c,
										       2 * c + 1),
									   m1),
							  4));
			w->q[c] = q;
		}
		/* per-32 scale and min, each duplicated to the per-16 granularity */
		k_scales(w, _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(sm, sm)),
			 _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(sm, sm)), h2f(ld16(blk)),
			 h2f(ld16(blk + 2)), 0);
		break;
	}
	case KVP_GGML_Q6_K: {
		__m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + 192)));

#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			__m512i l = _mm512_loadu_si512(blk + 64 * h);
			__m512i h01 = _mm512_and_si512(bcast_shift(blk + 128 + 32 * h, 0, 2), m2);
			__m512i h23 = _mm512_and_si512(bcast_shift(blk + 128 + 32 * h, 4, 6), m2);

			w->q[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4),
						      _mm512_slli_epi16(h01, 4));
			w->q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4),
									   m4),
							  _mm512_slli_epi16(h23, 4));
		}
		k_scales(w, sc, _mm256_setzero_si256(), h2f(ld16(blk + 208)), 0, 32);
		break;
	}
	case KVP_GGML_Q2_K: {
		__m256i s = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)blk));

#pragma GCC unroll 4
		for (int c = 0; c < 4; c++)
			w->q[c] = _mm512_and_si512(bcast_shift(blk + 16 + 32 * (c / 2), 4 * (c % 2),
							       4 * (c % 2) + 2),
						   m2);
		k_scales(w, _mm256_and_si256(s, _mm256_set1_epi16(0xf)), _mm256_srli_epi16(s, 4),
			 h2f(ld16(blk + 80)), h2f(ld16(blk + 82)), 0);
		break;
	}
	case KVP_GGML_Q3_K: {
		/*
		 * 16 6-bit scales: the low nibbles of bytes 0-7, then their high nibbles, each
		 * with 2 bits from bytes 8-11 above it.  The 12 bytes are read as 16 from 2
		 * before them (the block ends 2 bytes after them) and shifted down.
		 */
		__m128i v = _mm_srli_si128(_mm_loadu_si128((const __m128i *)(blk + 94)), 2);
		__m128i n = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, 0x44),
							 _mm_setr_epi32(0, 0, 4, 4)),
					  _mm_set1_epi8(0x0f));
		__m128i t = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, 0xaa),
							 _mm_setr_epi32(0, 2, 4, 6)),
					  _mm_set1_epi8(3));
		__m256i sc = _mm256_sub_epi16(_mm256_cvtepu8_epi16(
						      _mm_or_si128(n, _mm_slli_epi32(t, 4))),
					      _mm256_set1_epi16(32));

#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
			__m512i q = _mm512_and_si512(bcast_shift(blk + 32 + 32 * (c / 2),
								 4 * (c % 2), 4 * (c % 2) + 2),
						     m2);
			__m512i h = _mm512_and_si512(bcast_shift(blk, 2 * c, 2 * c + 1), m1);

			w->q[c] = _mm512_or_si512(q, _mm512_slli_epi16(h, 2));
		}
		k_scales(w, sc, _mm256_setzero_si256(), h2f(ld16(blk + 108)), 0, 4);
		break;
	}
	}
	to_lanes(w->q);
}

/*
 * The binary16 at @p + b * @stride for b < @nb, zero from @nb on, as 8 lanes (scalar
 * loads into lane inserts: no store-to-load round trip through memory)
 */
static inline __m128i half8(const uint8_t *p, uint32_t stride, size_t nb)
{
#define H(b) (short)((b) < nb ? ld16(p + (b)*stride) : 0)
	return _mm_set_epi16(H(7), H(6), H(5), H(4), H(3), H(2), H(1), H(0));
#undef H
}

/*
 * Up to 8 legacy blocks (one group) into @w; missing blocks (a row's tail) are zero.
 * Each block is 32 codes as [lo nibbles | hi nibbles] (or the bytes), two per register.
 */
static inline __attribute__((always_inline)) void unpack_l(const uint8_t *blk, uint32_t type,
							   size_t nb, struct wgrp *w)
{
	const __m128i m4 = _mm_set1_epi8(0x0f);
	uint32_t bb = blk_bytes(type);
	int has_m = type == KVP_GGML_Q4_1 || type == KVP_GGML_Q5_1;
	__m128i dh = half8(blk, bb, nb), mh = has_m ? half8(blk + 2, bb, nb) : _mm_setzero_si128();
	__m256i q[8];
	float off = type == KVP_GGML_Q8_0 ? 128 :
		    type == KVP_GGML_Q4_0 ? 8 :
		    type == KVP_GGML_Q5_0 ? 16 :
					    0;

#pragma GCC unroll 8
	for (size_t b = 0; b < 8; b++) {
		const uint8_t *x = blk + b * bb;

		if (b >= nb) {
			q[b] = _mm256_setzero_si256();
			continue;
		}
		switch (type) {
		case KVP_GGML_Q8_0:
			q[b] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(x + 2)),
						_mm256_set1_epi8((char)0x80));
			break;
		case KVP_GGML_Q4_0:
		case KVP_GGML_Q4_1: {
			__m128i v = _mm_loadu_si128(
				(const __m128i *)(x + (type == KVP_GGML_Q4_0 ? 2 : 4)));

			q[b] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m4)),
						       _mm_and_si128(_mm_srli_epi16(v, 4), m4), 1);
			break;
		}
		default: { /* Q5_0, Q5_1: nibbles plus bit e of qh as 16 */
			int one = type == KVP_GGML_Q5_1;
			__m128i v = _mm_loadu_si128((const __m128i *)(x + (one ? 8 : 6)));
			uint32_t qh;

			memcpy(&qh, x + (one ? 4 : 2), 4);
			q[b] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m4)),
						       _mm_and_si128(_mm_srli_epi16(v, 4), m4), 1);
			q[b] = _mm256_or_si256(q[b], _mm256_maskz_mov_epi8((__mmask32)qh,
									   _mm256_set1_epi8(16)));
			break;
		}
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < 4; r++)
		w->q[r] = _mm512_inserti64x4(_mm512_castsi256_si512(q[2 * r]), q[2 * r + 1], 1);
	{
		/* per block d and m, each to both of its sub-blocks (lanes 2b, 2b + 1) */
		const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0,
						     0);
		__m512 d = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_cvtph_ps(dh)));
		__m512 m = _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_cvtph_ps(mh)));

		w->dw = d;
		w->c = _mm512_fnmadd_ps(d, _mm512_set1_ps(off), m); /* m - off d */
	}
	to_lanes(w->q);
}

/* acc[r] += token r's dot with group @w, activation group @g of each row */
static inline __attribute__((always_inline)) void
gdot(const struct wgrp *w, const uint8_t *x, size_t xs, size_t g, const int R, __m512 *acc)
{
#pragma GCC unroll 8
	for (int r = 0; r < R; r++) {
		const struct kvp_act_q8 *a = (const struct kvp_act_q8 *)(x + r * xs) + g;
		__m512i dot = _mm512_setzero_si512();

#pragma GCC unroll 4
		for (int c = 0; c < 4; c++)
			dot = _mm512_dpbusd_epi32(dot, w->q[c], _mm512_loadu_si512(a->q + 64 * c));
		acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
					 _mm512_mul_ps(w->dw, _mm512_loadu_ps(a->d)), acc[r]);
		acc[r] = _mm512_fmadd_ps(w->c, _mm512_loadu_ps(a->s), acc[r]);
	}
}

/* Unpack group @g (of @ng) of weight row @wr. */
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

/*
 * Decode (rows <= GROUP): each group is unpacked into registers and used at once for
 * every row, so a weight row streams through exactly once.
 */
static inline __attribute__((always_inline)) void
mat_fused(float *restrict out, size_t ldo, const uint8_t *restrict w, size_t w_row_bytes,
	  const uint8_t *restrict x, size_t xs, size_t k, size_t o0, size_t o1, uint32_t type,
	  const int R)
{
	size_t ng = (k + KVP_QG - 1) / KVP_QG;

	for (size_t o = o0; o < o1; o++) {
		const uint8_t *wr = w + o * w_row_bytes;
		__m512 acc[GROUP];

#pragma GCC unroll 8
		for (int r = 0; r < R; r++)
			acc[r] = _mm512_setzero_ps();
		_mm_prefetch((const char *)(wr + w_row_bytes), _MM_HINT_T0);
		for (size_t g = 0; g < ng; g++) {
			struct wgrp wg;

			unpack(wr, type, k, g, &wg);
			gdot(&wg, x, xs, g, R, acc);
		}
#pragma GCC unroll 8
		for (int r = 0; r < R; r++)
			out[r * ldo + o] = _mm512_reduce_add_ps(acc[r]);
	}
}

/*
 * Prefill micro-kernel: RW weight rows (unpacked, @panel rows @ps groups apart) times RT
 * tokens over groups [0, ng) of the slice starting at group g0.  Each activation load
 * feeds RW rows and each weight load RT tokens: with one row at a time the activations
 * (re-read from L2 for every output row) were the bottleneck.  4 x 3: 24 accumulators
 * (12 float, 12 int) plus 4 operands fill the 32 registers.
 */
#define MK_RW 4
#define MK_RT 3

static inline __attribute__((always_inline)) void mat_tile(float *out, size_t ldo,
							   const struct wgrp *panel, size_t ps,
							   size_t g0, size_t ng, const uint8_t *x,
							   size_t xs, const int RW, const int RT,
							   __m512 *carry, int first, int last)
{
	__m512 acc[MK_RW][MK_RT];

#pragma GCC unroll 4
	for (int w = 0; w < RW; w++)
#pragma GCC unroll 3
		for (int t = 0; t < RT; t++)
			acc[w][t] = first ? _mm512_setzero_ps() : carry[t * MK_RW + w];
	for (size_t g = 0; g < ng; g++) {
		__m512i dot[MK_RW][MK_RT];

#pragma GCC unroll 4
		for (int w = 0; w < RW; w++)
#pragma GCC unroll 3
			for (int t = 0; t < RT; t++)
				dot[w][t] = _mm512_setzero_si512();
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
			__m512i a[MK_RT];

#pragma GCC unroll 3
			for (int t = 0; t < RT; t++)
				a[t] = _mm512_loadu_si512(
					((const struct kvp_act_q8 *)(x + t * xs) + g0 + g)->q +
					64 * c);
#pragma GCC unroll 4
			for (int w = 0; w < RW; w++) {
				__m512i wq = _mm512_load_si512(&panel[w * ps + g].q[c]);

#pragma GCC unroll 3
				for (int t = 0; t < RT; t++)
					dot[w][t] = _mm512_dpbusd_epi32(dot[w][t], wq, a[t]);
			}
		}
#pragma GCC unroll 3
		for (int t = 0; t < RT; t++) {
			const struct kvp_act_q8 *a = (const struct kvp_act_q8 *)(x + t * xs) + g0 +
						     g;
			__m512 ad = _mm512_loadu_ps(a->d), as = _mm512_loadu_ps(a->s);

#pragma GCC unroll 4
			for (int w = 0; w < RW; w++) {
				const struct wgrp *pw = &panel[w * ps + g];

				acc[w][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[w][t]),
							    _mm512_mul_ps(pw->dw, ad), acc[w][t]);
				acc[w][t] = _mm512_fmadd_ps(pw->c, as, acc[w][t]);
			}
		}
	}
#pragma GCC unroll 4
	for (int w = 0; w < RW; w++)
#pragma GCC unroll 3
		for (int t = 0; t < RT; t++) {
			if (last)
				out[t * ldo + w] = _mm512_reduce_add_ps(acc[w][t]);
			else
				carry[t * MK_RW + w] = acc[w][t];
		}
}

static void mat_tile_any(float *out, size_t ldo, const struct wgrp *panel, size_t ps, size_t g0,
			 size_t ng, const uint8_t *x, size_t xs, size_t rw, size_t rt,
			 __m512 *carry, int first, int last)
{
#define T(a, b) mat_tile(out, ldo, panel, ps, g0, ng, x, xs, a, b, carry, first, last)
	switch (rw * 4 + rt) {
	case 4 * 4 + 3:
		T(4, 3);
		break;
	case 4 * 4 + 2:
		T(4, 2);
		break;
	case 4 * 4 + 1:
		T(4, 1);
		break;
	case 3 * 4 + 3:
		T(3, 3);
		break;
	case 3 * 4 + 2:
		T(3, 2);
		break;
	case 3 * 4 + 1:
		T(3, 1);
		break;
	case 2 * 4 + 3:
		T(2, 3);
		break;
	case 2 * 4 + 2:
		T(2, 2);
		break;
	case 2 * 4 + 1:
		T(2, 1);
		break;
	case 1 * 4 + 3:
		T(1, 3);
		break;
	case 1 * 4 + 2:
		T(1, 2);
		break;
	default:
		T(1, 1);
		break;
	}
#undef T
}

#define R_CASES(CALL) \
	switch (R) { \
	case 1: \
		CALL(1); \
		break; \
	case 2: \
		CALL(2); \
		break; \
	case 3: \
		CALL(3); \
		break; \
	case 4: \
		CALL(4); \
		break; \
	case 5: \
		CALL(5); \
		break; \
	case 6: \
		CALL(6); \
		break; \
	case 7: \
		CALL(7); \
		break; \
	default: \
		CALL(8); \
		break; \
	}

/*
 * The panel of MK_RW unpacked rows covers PANEL_MAX groups (4096 elements, 24 KiB: it
 * stays in L1 beside the activations streaming from L2); longer rows are done in
 * slices (a larger panel spills out of L1: docs/compute.md), each tile's accumulators
 * carried from one slice to the next in @carry (stored and reloaded: exact), so a row
 * sums whole as the decode path does and its result does not depend on the batch
 * (partial sums added per slice differed in the last bits at k > 4096).
 */
#define PANEL_MAX 16

static inline __attribute__((always_inline)) void
matmul_int(float *restrict out, size_t ldo, const uint8_t *restrict w, size_t w_row_bytes,
	   const uint8_t *restrict x, size_t xs, size_t rows, size_t k, size_t o0, size_t o1,
	   uint32_t type)
{
	struct wgrp panel[MK_RW * PANEL_MAX];
	__m512 carry[TOKEN_BLOCK * MK_RW];
	size_t ng = (k + KVP_QG - 1) / KVP_QG;

	if (rows <= GROUP) {
		size_t R = rows;
#define FUSED(n) mat_fused(out, ldo, w, w_row_bytes, x, xs, k, o0, o1, type, n)
		R_CASES(FUSED)
#undef FUSED
		return;
	}
	for (size_t t0 = 0; t0 < rows; t0 += TOKEN_BLOCK) {
		size_t tn = rows - t0 < TOKEN_BLOCK ? rows - t0 : TOKEN_BLOCK;

		for (size_t o = o0; o < o1; o += MK_RW) {
			size_t rw = o1 - o < MK_RW ? o1 - o : MK_RW;

			for (size_t s0 = 0; s0 < ng; s0 += PANEL_MAX) {
				size_t sn = ng - s0 < PANEL_MAX ? ng - s0 : PANEL_MAX;

				for (size_t r = 0; r < rw; r++)
					for (size_t g = 0; g < sn; g++)
						unpack(w + (o + r) * w_row_bytes, type, k, s0 + g,
						       &panel[r * PANEL_MAX + g]);
				for (size_t t = t0; t < t0 + tn; t += MK_RT) {
					size_t rt = t0 + tn - t < MK_RT ? t0 + tn - t : MK_RT;

					mat_tile_any(out + t * ldo + o, ldo, panel, PANEL_MAX, s0,
						     sn, x + t * xs, xs, rw, rt,
						     carry + (t - t0) * MK_RW, s0 == 0,
						     s0 + sn == ng);
				}
			}
		}
	}
}

KVP_MATMUL_INT_ALL

/* ---- bf16 ---- */

/*
 * Prefill of the 16-bit float types: FT_RW weight rows times FT_RT tokens per tile, 32
 * elements a step, so each weight load feeds FT_RT tokens and each activation load
 * FT_RW rows.  BF16 weights against bf16 activations with vdpbf16ps; F16 weights
 * widened with vcvtph2ps against f32 activations with FMA.  Each output sums as the
 * decode path does (a row's result does not depend on its batch): F16 as the GEMV of
 * vec_f32.inc (16 lanes along k, one more 16-element step where 16 are left, the
 * tail after the lane sum), BF16 as matmul_bf16()'s loop (32 a step, the tail after).
 */
#define FT_RW 4
#define FT_RT 6

static inline __attribute__((always_inline)) void ftile(float *out, size_t ldo, const uint8_t *w,
							size_t wrb, const uint8_t *x, size_t xs,
							size_t k, int bf, const int RW,
							const int RT)
{
	size_t k32 = k / 32 * 32, kv = bf ? k32 : k / 16 * 16;
	__m512 acc[FT_RW][FT_RT];

#pragma GCC unroll 8
	for (int r = 0; r < RW; r++)
#pragma GCC unroll 8
		for (int t = 0; t < RT; t++)
			acc[r][t] = _mm512_setzero_ps();
	for (size_t i = 0; i < kv; i += 32) {
		/* F16: the last step may be 16 wide (i + 16 == kv) */
		__mmask16 m1 = i + 32 <= kv ? (__mmask16)0xffff : 0;

		if (bf) {
			__m512i a[FT_RT];

#pragma GCC unroll 8
			for (int t = 0; t < RT; t++)
				a[t] = _mm512_loadu_si512(x + t * xs + 2 * i);
#pragma GCC unroll 8
			for (int r = 0; r < RW; r++) {
				__m512bh wv = (__m512bh)_mm512_loadu_si512(w + r * wrb + 2 * i);

#pragma GCC unroll 8
				for (int t = 0; t < RT; t++)
					acc[r][t] = _mm512_dpbf16_ps(acc[r][t], wv, (__m512bh)a[t]);
			}
		} else {
			/* the two 16-element halves in turn: one activation register a token */
#pragma GCC unroll 2
			for (int hh = 0; hh < 2; hh++) {
				__mmask16 m = hh ? m1 : (__mmask16)0xffff;
				__m512 a[FT_RT];

#pragma GCC unroll 8
				for (int t = 0; t < RT; t++)
					a[t] = _mm512_maskz_loadu_ps(m,
								     (const float *)(x + t * xs) +
									     i + 16 * hh);
#pragma GCC unroll 8
				for (int r = 0; r < RW; r++) {
					const uint16_t *wr = (const uint16_t *)(w + r * wrb) + i;
					__m512 wv = _mm512_cvtph_ps(
						_mm256_maskz_loadu_epi16(m, wr + 16 * hh));

					/* a 16-wide last step adds nothing more (the GEMV's order) */
#pragma GCC unroll 8
					for (int t = 0; t < RT; t++)
						acc[r][t] = _mm512_mask3_fmadd_ps(wv, a[t],
										  acc[r][t], m);
				}
			}
		}
	}
#pragma GCC unroll 8
	for (int r = 0; r < RW; r++)
#pragma GCC unroll 8
		for (int t = 0; t < RT; t++) {
			const uint16_t *wr = (const uint16_t *)(w + r * wrb);
			const uint8_t *xr = x + t * xs;
			float s = _mm512_reduce_add_ps(acc[r][t]);

			for (size_t i = kv; i < k; i++)
				s += bf ? kvp_bf16_to_f32(wr[i]) *
						     kvp_bf16_to_f32(((const uint16_t *)xr)[i]) :
					  kvp_f16_to_f32(wr[i]) * ((const float *)xr)[i];
			out[t * ldo + r] = s;
		}
}

static void ftile_any(float *out, size_t ldo, const uint8_t *w, size_t wrb, const uint8_t *x,
		      size_t xs, size_t k, int bf, size_t rw, size_t rt)
{
#define T(a, b) \
	(bf ? ftile(out, ldo, w, wrb, x, xs, k, 1, a, b) : \
	      ftile(out, ldo, w, wrb, x, xs, k, 0, a, b))
	switch (rw * 8 + rt) {
	case 4 * 8 + 6:
		T(4, 6);
		break;
	case 4 * 8 + 5:
		T(4, 5);
		break;
	case 4 * 8 + 4:
		T(4, 4);
		break;
	case 4 * 8 + 3:
		T(4, 3);
		break;
	case 4 * 8 + 2:
		T(4, 2);
		break;
	case 4 * 8 + 1:
		T(4, 1);
		break;
	case 3 * 8 + 6:
		T(3, 6);
		break;
	case 2 * 8 + 6:
		T(2, 6);
		break;
	case 1 * 8 + 6:
		T(1, 6);
		break;
	default:
		for (size_t r = 0; r < rw; r++)
			for (size_t t = 0; t < rt; t++)
				bf ? ftile(out + t * ldo + r, ldo, w + r * wrb, wrb, x + t * xs, xs,
					   k, 1, 1, 1) :
				     ftile(out + t * ldo + r, ldo, w + r * wrb, wrb, x + t * xs, xs,
					   k, 0, 1, 1);
		break;
	}
#undef T
}

/* rows > GROUP: token blocks, then FT_RW x FT_RT tiles */
static void matmul_float_tiles(float *restrict out, size_t ldo, const uint8_t *restrict w,
			       size_t wrb, const uint8_t *restrict x, size_t xs, size_t rows,
			       size_t k, size_t o0, size_t o1, int bf)
{
	for (size_t t0 = 0; t0 < rows; t0 += TOKEN_BLOCK) {
		size_t tn = rows - t0 < TOKEN_BLOCK ? rows - t0 : TOKEN_BLOCK;

		for (size_t o = o0; o < o1; o += FT_RW) {
			size_t rw = o1 - o < FT_RW ? o1 - o : FT_RW;

			for (size_t t = t0; t < t0 + tn; t += FT_RT) {
				size_t rt = t0 + tn - t < FT_RT ? t0 + tn - t : FT_RT;

				ftile_any(out + t * ldo + o, ldo, w + o * wrb, wrb, x + t * xs, xs,
					  k, bf, rw, rt);
			}
		}
	}
}

static void matmul_f16(float *restrict out, size_t ldo, const void *restrict w, size_t w_row_bytes,
		       const void *restrict x, size_t x_row_bytes, size_t rows, size_t k, size_t o0,
		       size_t o1)
{
	if (rows > GROUP)
		matmul_float_tiles(out, ldo, w, w_row_bytes, x, x_row_bytes, rows, k, o0, o1, 0);
	else
		gemv_rows(out, ldo, w, w_row_bytes, x, x_row_bytes, rows, k, o0, o1, WT_F16);
}

/* BF16 weights against bf16 activations: vdpbf16ps, 32 products per instruction. */
static void matmul_bf16(float *restrict out, size_t ldo, const void *restrict w, size_t w_row_bytes,
			const void *restrict x, size_t x_row_bytes, size_t rows, size_t k,
			size_t o0, size_t o1)
{
	size_t kv = k / 32 * 32;

	if (rows > GROUP) {
		matmul_float_tiles(out, ldo, w, w_row_bytes, x, x_row_bytes, rows, k, o0, o1, 1);
		return;
	}

	for (size_t r0 = 0; r0 < rows; r0 += GROUP) {
		size_t g = rows - r0 < GROUP ? rows - r0 : GROUP;

		for (size_t o = o0; o < o1; o++) {
			const uint16_t *wr = (const uint16_t *)((const uint8_t *)w +
								o * w_row_bytes);
			__m512 acc[GROUP];

			for (size_t r = 0; r < g; r++)
				acc[r] = _mm512_setzero_ps();
			for (size_t i = 0; i < kv; i += 32) {
				__m512bh wv = (__m512bh)_mm512_loadu_si512(wr + i);

				__builtin_prefetch((const char *)(wr + i) + 4096, 0, 1);
				for (size_t r = 0; r < g; r++) {
					const uint16_t *xr = (const uint16_t *)((const uint8_t *)x +
										(r0 +
										 r) * x_row_bytes);

					acc[r] = _mm512_dpbf16_ps(acc[r], wv,
								  (__m512bh)_mm512_loadu_si512(xr +
											       i));
				}
			}
			for (size_t r = 0; r < g; r++) {
				const uint16_t *xr = (const uint16_t *)((const uint8_t *)x +
									(r0 + r) * x_row_bytes);
				float s = _mm512_reduce_add_ps(acc[r]);

				for (size_t i = kv; i < k; i++)
					s += kvp_bf16_to_f32(wr[i]) * kvp_bf16_to_f32(xr[i]);
				out[(r0 + r) * ldo + o] = s;
			}
		}
	}
}

/* ---- dequantization (embedding rows) ---- */

static void dequant_f16(float *restrict dst, const void *restrict src, size_t n)
{
	kv_load_f16(dst, src, n);
}

static void dequant_bf16(float *restrict dst, const void *restrict src, size_t n)
{
	kv_load_bf16(dst, src, n);
}

KVP_REF_DEQUANT_INTEGER

KVP_KERNEL_TABLE(avx512, KVP_ISA_AVX512);
