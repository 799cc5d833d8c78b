/* SPDX-License-Identifier: MIT */
/*
 * avx512.c - the AVX-512 kernel table (F/BW/DQ/VL with VNNI and BF16: Zen 4 and later,
 * Sapphire Rapids and later).  Built with those flags only; dispatch.c makes sure the
 * CPU has them before anything here runs.
 *
 * Integer weights (quant.h) are computed in two steps per output row:
 *  1. unpack: the row's blocks become a panel in scratch - unsigned codes in element
 *     order, int16 sub-block scales spread over the pair lanes vpmaddubsw produces,
 *     and the per-block floats - so the packed bit layouts are decoded once per row,
 *     not once per token;
 *  2. dot: for each group of up to GROUP tokens, the panel against their quantized
 *     activations: K-quants with vpmaddubsw (u8 x s8 -> pairs of int16) then vpdpwssd
 *     (pairs times the sub-block scale, accumulated in int32) so a whole super-block
 *     sums in integers before one float multiply; legacy types with vpdpbusd per block
 *     of 32 and a float multiply per block.
 * Tokens are taken in blocks of TOKEN_BLOCK so their activations stay in L2 while every
 * output row of the slice is unpacked and dotted against them: a weight row is read
 * from memory once per token block (once per step in decode).
 *
 * Float weights: f32 through the shared GEMV (vec_f32.inc), f16 with vcvtph2ps + FMA,
 * bf16 with vdpbf16ps against bf16 activations.
 */
#include "compute/kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

#define VLEN 16
#define GEMV_GROUP 8

typedef float vf16_t __attribute__((vector_size(64), aligned(4)));

static inline vf16_t vf_load_f16(const uint16_t *p)
{
	return (vf16_t)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

static inline void vf_store_f16(uint16_t *p, vf16_t v)
{
	_mm256_storeu_si256((__m256i *)p,
			    _mm512_cvtps_ph((__m512)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

#include "compute/kernels/vec_f32.inc"

/* Tokens per group of the dot micro-kernel (2 accumulators each in registers). */
#define GROUP 8
/* Tokens whose activations are kept hot while all rows pass (~160 KiB at k = 2048). */
#define TOKEN_BLOCK 64

/* ---- activations ---- */

/* max |x| over n (a multiple of 16) floats */
static inline float absmax(const float *x, size_t n)
{
	__m512 m = _mm512_setzero_ps();

	for (size_t i = 0; i < n; i += 16)
		m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
	return _mm512_reduce_max_ps(m);
}

/* 16 floats times id, rounded to nearest even, as int32 (as nearbyintf in quant.c) */
static inline __m512i round16(const float *x, __m512 id)
{
	return _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), id));
}

static void act_q8_256(void *restrict dst, const float *restrict x, size_t k)
{
	for (size_t b = 0; b < k / KVP_QK_K; b++, x += KVP_QK_K) {
		struct kvp_act_q8_256 *a = (struct kvp_act_q8_256 *)dst + b;
		float d = absmax(x, KVP_QK_K) / 127.0f;
		__m512 id = _mm512_set1_ps(d ? 1.0f / d : 0.0f);

		for (int j = 0; j < 16; j++) {
			__m512i q = round16(x + 16 * j, id);

			_mm_storeu_si128((__m128i *)(a->q + 16 * j), _mm512_cvtepi32_epi8(q));
			a->bsum[j] = (int16_t)_mm512_reduce_add_epi32(q);
		}
		a->d = d;
		memset(a->pad, 0, sizeof(a->pad));
	}
}

static void act_q8_32(void *restrict dst, const float *restrict x, size_t k)
{
	int8_t *q = dst;
	float *d = (float *)(q + k), *ds = d + k / KVP_QK;

	for (size_t b = 0; b < k / KVP_QK; b++) {
		const float *xb = x + b * KVP_QK;
		float db = absmax(xb, KVP_QK) / 127.0f;
		__m512 id = _mm512_set1_ps(db ? 1.0f / db : 0.0f);
		__m512i q0 = round16(xb, id), q1 = round16(xb + 16, id);

		_mm_storeu_si128((__m128i *)(q + b * KVP_QK), _mm512_cvtepi32_epi8(q0));
		_mm_storeu_si128((__m128i *)(q + b * KVP_QK + 16), _mm512_cvtepi32_epi8(q1));
		d[b] = db;
		ds[b] = db * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
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

/* ---- K-quant panels ---- */

/*
 * One super-block, unpacked.  sc[c][i] is the scale of pair lane i of 64-element chunk
 * c (elements 64c + 2i, 2i + 1: sub-block 4c + i / 8); the row's contribution is
 *   d_a * (d * sum_j sc_j (q_j . a_j) - dm * sum_j mn_j bsum_j).
 */
struct kpanel {
	uint8_t q[KVP_QK_K];
	int16_t sc[4][32];
	int16_t mn[16];
	float d, dm;
	uint8_t pad[24];
};

static_assert(sizeof(struct kpanel) == 576, "64-byte multiple");

/* sc16 (16 sub-block scales) spread to the pair lanes of each chunk */
static inline void spread_scales(struct kpanel *p, __m256i sc16)
{
	static const int16_t idx[4][32] = {
#define I4(c) { 4*c, 4*c, 4*c, 4*c, 4*c, 4*c, 4*c, 4*c, 4*c+1, 4*c+1, 4*c+1, 4*c+1, 4*c+1, \
		4*c+1, 4*c+1, 4*c+1, 4*c+2, 4*c+2, 4*c+2, 4*c+2, 4*c+2, 4*c+2, 4*c+2, 4*c+2, \
		4*c+3, 4*c+3, 4*c+3, 4*c+3, 4*c+3, 4*c+3, 4*c+3, 4*c+3 }
		I4(0), I4(1), I4(2), I4(3)
#undef I4
	};
	__m512i s = _mm512_castsi256_si512(sc16);

	for (int c = 0; c < 4; c++)
		_mm512_storeu_si512(p->sc[c],
				    _mm512_permutexvar_epi16(_mm512_loadu_si512(idx[c]), s));
}

static inline __m512i join(__m256i lo, __m256i hi)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* 32 bytes, both halves of a zmm, shifted right per half by s0 / s1 bits (16-bit lanes) */
static inline __m512i bcast_shift(const uint8_t *p, int s0, int s1)
{
	__m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p));
	__m512i sh = _mm512_inserti64x4(_mm512_set1_epi16((short)s0), _mm256_set1_epi16((short)s1), 1);

	return _mm512_srlv_epi16(v, sh);
}

static void unpack_q4_k_or_q5_k(const uint8_t *blk, struct kpanel *p, int five)
{
	const struct kvp_blk_q4_k *b4 = (const void *)blk;
	const struct kvp_blk_q5_k *b5 = (const void *)blk;
	const uint8_t *qs = five ? b5->qs : b4->qs, *s = five ? b5->scales : b4->scales;
	const __m256i m4 = _mm256_set1_epi8(0x0f);
	int16_t sc[16], mn[16];

	for (int c = 0; c < 4; c++) {
		__m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
		__m512i q = join(_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));

		if (five) {
			__m512i h = _mm512_and_si512(bcast_shift(b5->qh, 2 * c, 2 * c + 1),
						     _mm512_set1_epi8(1));

			q = _mm512_or_si512(q, _mm512_slli_epi16(h, 4));
		}
		_mm512_storeu_si512(p->q + 64 * c, q);
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
	spread_scales(p, _mm256_loadu_si256((const __m256i *)sc));
	memcpy(p->mn, mn, sizeof(mn));
	p->d = kvp_f16_to_f32(b4->d);
	p->dm = kvp_f16_to_f32(b4->dmin);
}

static void unpack_q4_k(const uint8_t *blk, struct kpanel *p)
{
	unpack_q4_k_or_q5_k(blk, p, 0);
}

static void unpack_q5_k(const uint8_t *blk, struct kpanel *p)
{
	unpack_q4_k_or_q5_k(blk, p, 1);
}

static void unpack_q6_k(const uint8_t *blk, struct kpanel *p)
{
	const struct kvp_blk_q6_k *b = (const void *)blk;
	const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3);
	__m256i sc;

	for (int h = 0; h < 2; h++) {
		__m512i l = _mm512_loadu_si512(b->ql + 64 * h);
		__m512i lo = _mm512_and_si512(l, m4);
		__m512i hi = _mm512_and_si512(_mm512_srli_epi16(l, 4), m4);
		__m512i h01 = _mm512_and_si512(bcast_shift(b->qh + 32 * h, 0, 2), m2);
		__m512i h23 = _mm512_and_si512(bcast_shift(b->qh + 32 * h, 4, 6), m2);

		_mm512_storeu_si512(p->q + 128 * h, _mm512_or_si512(lo, _mm512_slli_epi16(h01, 4)));
		_mm512_storeu_si512(p->q + 128 * h + 64, _mm512_or_si512(hi, _mm512_slli_epi16(h23, 4)));
	}
	sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
	spread_scales(p, sc);
	/* w = d sc (q - 32): the offset as a "min" of 32 sc, with dm = d */
	_mm256_storeu_si256((__m256i *)p->mn, _mm256_slli_epi16(sc, 5));
	p->d = p->dm = kvp_f16_to_f32(b->d);
}

/* Q2_K and Q3_K share the 2-bit planes: element e at qs[32 (e/128) + e%32] >> 2 ((e%128)/32) */
static void unpack_q2_k_or_q3_k(const uint8_t *qs, const uint8_t *hmask, struct kpanel *p)
{
	const __m512i m2 = _mm512_set1_epi8(3), m1 = _mm512_set1_epi8(1);

	for (int c = 0; c < 4; c++) {
		int h = c / 2, pl = 2 * (c % 2);
		__m512i q = _mm512_and_si512(bcast_shift(qs + 32 * h, 2 * pl, 2 * pl + 2), m2);

		if (hmask) {
			__m512i hb = _mm512_and_si512(bcast_shift(hmask, 2 * c, 2 * c + 1), m1);

			q = _mm512_or_si512(q, _mm512_slli_epi16(hb, 2));
		}
		_mm512_storeu_si512(p->q + 64 * c, q);
	}
}

static void unpack_q2_k(const uint8_t *blk, struct kpanel *p)
{
	const struct kvp_blk_q2_k *b = (const void *)blk;
	__m128i s = _mm_loadu_si128((const __m128i *)b->scales);
	__m256i s16 = _mm256_cvtepu8_epi16(s);

	unpack_q2_k_or_q3_k(b->qs, NULL, p);
	spread_scales(p, _mm256_and_si256(s16, _mm256_set1_epi16(0xf)));
	_mm256_storeu_si256((__m256i *)p->mn, _mm256_srli_epi16(s16, 4));
	p->d = kvp_f16_to_f32(b->d);
	p->dm = kvp_f16_to_f32(b->dmin);
}

static void unpack_q3_k(const uint8_t *blk, struct kpanel *p)
{
	const struct kvp_blk_q3_k *b = (const void *)blk;
	int16_t sc[16];

	unpack_q2_k_or_q3_k(b->qs, b->hmask, p);
	for (int j = 0; j < 16; j++) {
		int lo = j < 8 ? b->scales[j] & 0xf : b->scales[j - 8] >> 4;
		int hi = (b->scales[8 + j % 4] >> (2 * (j / 4))) & 3;

		sc[j] = (int16_t)((lo | hi << 4) - 32);
	}
	spread_scales(p, _mm256_loadu_si256((const __m256i *)sc));
	/* w = d sc (q - 4) */
	_mm256_storeu_si256((__m256i *)p->mn,
			    _mm256_slli_epi16(_mm256_loadu_si256((const __m256i *)sc), 2));
	p->d = p->dm = kvp_f16_to_f32(b->d);
}

/*
 * R tokens against one unpacked row (nsb super-blocks): out[r * ldo] = the dot product.
 * Per super-block: vpmaddubsw + vpdpwssd per 64 elements and token into an int32
 * accumulator, then one float FMA with d * d_a, and the mins term from the token's
 * 16-element sums.
 */
static inline __attribute__((always_inline)) void
kdot(float *out, size_t ldo, const struct kpanel *p, size_t nsb, const uint8_t *x, size_t xs,
     const int R)
{
	__m512 acc[GROUP];

	for (int r = 0; r < R; r++)
		acc[r] = _mm512_setzero_ps();
	for (size_t b = 0; b < nsb; b++, p++) {
		__m512i ia[GROUP];
		__m256i mn = _mm256_loadu_si256((const __m256i *)p->mn);

		for (int r = 0; r < R; r++)
			ia[r] = _mm512_setzero_si512();
		for (int c = 0; c < 4; c++) {
			__m512i w = _mm512_loadu_si512(p->q + 64 * c);
			__m512i s = _mm512_loadu_si512(p->sc[c]);

			for (int r = 0; r < R; r++) {
				const struct kvp_act_q8_256 *a =
					(const struct kvp_act_q8_256 *)(x + r * xs) + b;
				__m512i pr = _mm512_maddubs_epi16(w, _mm512_loadu_si512(a->q + 64 * c));

				ia[r] = _mm512_dpwssd_epi32(ia[r], pr, s);
			}
		}
		for (int r = 0; r < R; r++) {
			const struct kvp_act_q8_256 *a = (const struct kvp_act_q8_256 *)(x + r * xs) + b;
			__m256i m = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsum), mn);
			__m512 fm = _mm512_cvtepi32_ps(_mm512_castsi256_si512(m));

			/* castsi256 leaves the upper lanes undefined: zero them */
			fm = _mm512_maskz_mov_ps(0x00ff, fm);
			acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[r]), _mm512_set1_ps(p->d * a->d),
						 acc[r]);
			acc[r] = _mm512_fmadd_ps(fm, _mm512_set1_ps(-p->dm * a->d), acc[r]);
		}
	}
	for (int r = 0; r < R; r++)
		out[r * ldo] = _mm512_reduce_add_ps(acc[r]);
}

typedef void unpack_k_fn(const uint8_t *blk, struct kpanel *p);

static void kdot_any(float *out, size_t ldo, const struct kpanel *p, size_t nsb, const uint8_t *x,
		     size_t xs, size_t R)
{
	switch (R) {
	case 1: kdot(out, ldo, p, nsb, x, xs, 1); break;
	case 2: kdot(out, ldo, p, nsb, x, xs, 2); break;
	case 3: kdot(out, ldo, p, nsb, x, xs, 3); break;
	case 4: kdot(out, ldo, p, nsb, x, xs, 4); break;
	case 5: kdot(out, ldo, p, nsb, x, xs, 5); break;
	case 6: kdot(out, ldo, p, nsb, x, xs, 6); break;
	case 7: kdot(out, ldo, p, nsb, x, xs, 7); break;
	default: kdot(out, ldo, p, nsb, x, xs, 8); break;
	}
}

/*
 * The panel lives on the stack for rows up to PANEL_SB_MAX super-blocks (k = 16384:
 * ~36 KiB); longer rows are done in slices of it, each slice's partial sums added.
 */
#define PANEL_SB_MAX 64

static void matmul_k(float *restrict out, size_t ldo, const uint8_t *restrict w,
		     size_t w_row_bytes, const uint8_t *restrict x, size_t xs, size_t rows,
		     size_t k, size_t o0, size_t o1, uint32_t blk_bytes, unpack_k_fn *unpack)
{
	struct kpanel panel[PANEL_SB_MAX] __attribute__((aligned(64)));
	size_t nsb = k / KVP_QK_K;

	for (size_t t0 = 0; t0 < rows; t0 += TOKEN_BLOCK) {
		size_t tn = rows - t0 < TOKEN_BLOCK ? rows - t0 : TOKEN_BLOCK;

		for (size_t o = o0; o < o1; o++) {
			const uint8_t *wr = w + o * w_row_bytes;

			for (size_t s0 = 0; s0 < nsb; s0 += PANEL_SB_MAX) {
				size_t sn = nsb - s0 < PANEL_SB_MAX ? nsb - s0 : PANEL_SB_MAX;
				const uint8_t *xa = x + s0 * sizeof(struct kvp_act_q8_256);

				for (size_t b = 0; b < sn; b++) {
					__builtin_prefetch(wr + (s0 + b + 4) * blk_bytes, 0, 1);
					unpack(wr + (s0 + b) * blk_bytes, &panel[b]);
				}
				for (size_t t = t0; t < t0 + tn; t += GROUP) {
					size_t g = t0 + tn - t < GROUP ? t0 + tn - t : GROUP;
					float part[GROUP];

					kdot_any(part, 1, panel, sn, xa + t * xs, xs, g);
					for (size_t r = 0; r < g; r++)
						out[(t + r) * ldo + o] = s0 ? out[(t + r) * ldo + o] + part[r] :
									      part[r];
				}
			}
		}
	}
}

#define MATMUL_K(type, blk)                                                                  \
	static void matmul_##type(float *restrict out, size_t ldo, const void *restrict w,    \
				  size_t w_row_bytes, const void *restrict x,                 \
				  size_t x_row_bytes, size_t rows, size_t k, size_t o0,       \
				  size_t o1)                                                  \
	{                                                                                    \
		matmul_k(out, ldo, w, w_row_bytes, x, x_row_bytes, rows, k, o0, o1,          \
			 sizeof(blk), unpack_##type);                                        \
	}

MATMUL_K(q2_k, struct kvp_blk_q2_k)
MATMUL_K(q3_k, struct kvp_blk_q3_k)
MATMUL_K(q4_k, struct kvp_blk_q4_k)
MATMUL_K(q5_k, struct kvp_blk_q5_k)
MATMUL_K(q6_k, struct kvp_blk_q6_k)

/* ---- legacy panels ---- */

/*
 * A row of legacy blocks, unpacked: codes in element order, and per block its scale
 * and the correction factor c2 = m - off * d, so the row's dot product with a Q8_32
 * activation row is  sum_b d_b d_a,b (q_b . a_b) + c2_b ds_b.
 */
struct lpanel {
	uint8_t *q;	/* k codes */
	float *d;	/* k / 32 */
	float *c2;	/* k / 32 */
};

static void unpack_legacy(const uint8_t *row, uint32_t type, size_t nb, struct lpanel *p)
{
	const __m128i m4 = _mm_set1_epi8(0x0f);

	for (size_t b = 0; b < nb; b++) {
		uint8_t *q = p->q + b * KVP_QK;
		float d, m = 0;
		int off = 0;

		switch (type) {
		case KVP_GGML_Q8_0: {
			const struct kvp_blk_q8_0 *x = (const void *)(row + b * 34);

			_mm256_storeu_si256((__m256i *)q,
					    _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x->qs),
							     _mm256_set1_epi8((char)0x80)));
			d = kvp_f16_to_f32(x->d);
			off = 128;
			break;
		}
		case KVP_GGML_Q4_0:
		case KVP_GGML_Q4_1: {
			const uint8_t *qs = type == KVP_GGML_Q4_0 ? row + b * 18 + 2 : row + b * 20 + 4;
			__m128i v = _mm_loadu_si128((const __m128i *)qs);

			_mm_storeu_si128((__m128i *)q, _mm_and_si128(v, m4));
			_mm_storeu_si128((__m128i *)(q + 16), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
			if (type == KVP_GGML_Q4_0) {
				d = kvp_f16_to_f32(((const struct kvp_blk_q4_0 *)(row + b * 18))->d);
				off = 8;
			} else {
				const struct kvp_blk_q4_1 *x = (const void *)(row + b * 20);

				d = kvp_f16_to_f32(x->d);
				m = kvp_f16_to_f32(x->m);
			}
			break;
		}
		default: {	/* Q5_0, Q5_1: nibbles plus bit e of qh as 16 */
			int one = type == KVP_GGML_Q5_1;
			const uint8_t *bb = row + b * (one ? 24 : 22);
			__m128i v = _mm_loadu_si128((const __m128i *)(bb + (one ? 8 : 6)));
			__m256i n = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m4)),
							    _mm_and_si128(_mm_srli_epi16(v, 4), m4), 1);
			uint32_t qh;
			uint16_t h;

			memcpy(&qh, bb + (one ? 4 : 2), 4);
			n = _mm256_or_si256(n, _mm256_maskz_mov_epi8((__mmask32)qh, _mm256_set1_epi8(16)));
			_mm256_storeu_si256((__m256i *)q, n);
			memcpy(&h, bb, 2);
			d = kvp_f16_to_f32(h);
			if (one) {
				memcpy(&h, bb + 2, 2);
				m = kvp_f16_to_f32(h);
			} else {
				off = 16;
			}
			break;
		}
		}
		p->d[b] = d;
		p->c2[b] = m - (float)off * d;
	}
}

/*
 * R tokens against @nb unpacked legacy blocks that start at block @s0 of the row: each
 * token's codes, scales and sums are taken from block @s0 on.
 */
static inline __attribute__((always_inline)) void
ldot(float *out, const struct lpanel *p, size_t s0, size_t nb, const uint8_t *x, size_t xs,
     size_t k, const int R)
{
	__m256 acc[GROUP];
	float cor[GROUP];

	for (int r = 0; r < R; r++) {
		const float *ds = kvp_act_q8_32_d(x + r * xs, k) + k / KVP_QK + s0;
		float c = 0;

		acc[r] = _mm256_setzero_ps();
		for (size_t b = 0; b < nb; b++)
			c += p->c2[b] * ds[b];
		cor[r] = c;
	}
	for (size_t b = 0; b < nb; b++) {
		__m256i w = _mm256_loadu_si256((const __m256i *)(p->q + b * KVP_QK));

		for (int r = 0; r < R; r++) {
			const uint8_t *xr = x + r * xs;
			const float *ad = kvp_act_q8_32_d(xr, k) + s0;
			__m256i a = _mm256_loadu_si256((const __m256i *)(xr + (s0 + b) * KVP_QK));
			__m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, a);

			acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(p->d[b] * ad[b]),
						 acc[r]);
		}
	}
	for (int r = 0; r < R; r++) {
		__m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[r]), _mm256_extractf128_ps(acc[r], 1));

		s = _mm_add_ps(s, _mm_movehl_ps(s, s));
		s = _mm_add_ss(s, _mm_movehdup_ps(s));
		out[r] = _mm_cvtss_f32(s) + cor[r];
	}
}

static void ldot_any(float *out, const struct lpanel *p, size_t s0, size_t nb, const uint8_t *x,
		     size_t xs, size_t k, size_t R)
{
	switch (R) {
	case 1: ldot(out, p, s0, nb, x, xs, k, 1); break;
	case 2: ldot(out, p, s0, nb, x, xs, k, 2); break;
	case 3: ldot(out, p, s0, nb, x, xs, k, 3); break;
	case 4: ldot(out, p, s0, nb, x, xs, k, 4); break;
	case 5: ldot(out, p, s0, nb, x, xs, k, 5); break;
	case 6: ldot(out, p, s0, nb, x, xs, k, 6); break;
	case 7: ldot(out, p, s0, nb, x, xs, k, 7); break;
	default: ldot(out, p, s0, nb, x, xs, k, 8); break;
	}
}

/* Legacy rows are unpacked onto the stack in slices of this many blocks (k = 8192). */
#define LPANEL_MAX 256

static void matmul_legacy(float *restrict out, size_t ldo, const uint8_t *restrict w,
			  size_t w_row_bytes, const uint8_t *restrict x, size_t xs, size_t rows,
			  size_t k, size_t o0, size_t o1, uint32_t type)
{
	uint8_t q[LPANEL_MAX * KVP_QK] __attribute__((aligned(64)));
	float d[LPANEL_MAX], c2[LPANEL_MAX];
	struct lpanel p = { q, d, c2 };
	size_t nb = k / KVP_QK, bb = kvp_qtype(type)->block_bytes;

	for (size_t t0 = 0; t0 < rows; t0 += TOKEN_BLOCK) {
		size_t tn = rows - t0 < TOKEN_BLOCK ? rows - t0 : TOKEN_BLOCK;

		for (size_t o = o0; o < o1; o++) {
			const uint8_t *wr = w + o * w_row_bytes;

			for (size_t s0 = 0; s0 < nb; s0 += LPANEL_MAX) {
				size_t sn = nb - s0 < LPANEL_MAX ? nb - s0 : LPANEL_MAX;

				unpack_legacy(wr + s0 * bb, type, sn, &p);
				for (size_t t = t0; t < t0 + tn; t += GROUP) {
					size_t g = t0 + tn - t < GROUP ? t0 + tn - t : GROUP;
					float part[GROUP];

					ldot_any(part, &p, s0, sn, x + t * xs, xs, k, g);
					for (size_t r = 0; r < g; r++)
						out[(t + r) * ldo + o] = s0 ? out[(t + r) * ldo + o] + part[r] :
									      part[r];
				}
			}
		}
	}
}

#define MATMUL_L(name, type)                                                                 \
	static void matmul_##name(float *restrict out, size_t ldo, const void *restrict w,    \
				  size_t w_row_bytes, const void *restrict x,                 \
				  size_t x_row_bytes, size_t rows, size_t k, size_t o0,       \
				  size_t o1)                                                  \
	{                                                                                    \
		matmul_legacy(out, ldo, w, w_row_bytes, x, x_row_bytes, rows, k, o0, o1, type); \
	}

MATMUL_L(q8_0, KVP_GGML_Q8_0)
MATMUL_L(q4_0, KVP_GGML_Q4_0)
MATMUL_L(q4_1, KVP_GGML_Q4_1)
MATMUL_L(q5_0, KVP_GGML_Q5_0)
MATMUL_L(q5_1, KVP_GGML_Q5_1)

/* ---- bf16 ---- */

/* BF16 weights against bf16 activations: vdpbf16ps, 32 products per instruction. */
static void matmul_bf16(float *restrict out, size_t ldo, const void *restrict w,
			size_t w_row_bytes, const void *restrict x, size_t x_row_bytes, size_t rows,
			size_t k, size_t o0, size_t o1)
{
	size_t kv = k / 32 * 32;

	for (size_t r0 = 0; r0 < rows; r0 += GROUP) {
		size_t g = rows - r0 < GROUP ? rows - r0 : GROUP;

		for (size_t o = o0; o < o1; o++) {
			const uint16_t *wr = (const uint16_t *)((const uint8_t *)w + o * w_row_bytes);
			__m512 acc[GROUP];

			for (size_t r = 0; r < g; r++)
				acc[r] = _mm512_setzero_ps();
			for (size_t i = 0; i < kv; i += 32) {
				__m512bh wv = (__m512bh)_mm512_loadu_si512(wr + i);

				__builtin_prefetch((const char *)(wr + i) + 4096, 0, 1);
				for (size_t r = 0; r < g; r++) {
					const uint16_t *xr =
						(const uint16_t *)((const uint8_t *)x + (r0 + r) * x_row_bytes);

					acc[r] = _mm512_dpbf16_ps(acc[r], wv,
								  (__m512bh)_mm512_loadu_si512(xr + i));
				}
			}
			for (size_t r = 0; r < g; r++) {
				const uint16_t *xr =
					(const uint16_t *)((const uint8_t *)x + (r0 + r) * x_row_bytes);
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

#define DEQUANT_REF(name, type)                                                  \
	static void dequant_##name(float *restrict dst, const void *restrict src, size_t n) \
	{                                                                        \
		kvp_dequant_ref(dst, src, type, n);                               \
	}

DEQUANT_REF(f32, KVP_GGML_F32)
DEQUANT_REF(q8_0, KVP_GGML_Q8_0)
DEQUANT_REF(q4_0, KVP_GGML_Q4_0)
DEQUANT_REF(q4_1, KVP_GGML_Q4_1)
DEQUANT_REF(q5_0, KVP_GGML_Q5_0)
DEQUANT_REF(q5_1, KVP_GGML_Q5_1)
DEQUANT_REF(q2_k, KVP_GGML_Q2_K)
DEQUANT_REF(q3_k, KVP_GGML_Q3_K)
DEQUANT_REF(q4_k, KVP_GGML_Q4_K)
DEQUANT_REF(q5_k, KVP_GGML_Q5_K)
DEQUANT_REF(q6_k, KVP_GGML_Q6_K)

const struct kvp_kernels kvp_kernels_avx512 = {
	.name = "avx512",
	.isa = KVP_ISA_AVX512,
	.matmul = {
		[KVP_GGML_F32] = matmul_f32,	[KVP_GGML_F16] = matmul_f16,
		[KVP_GGML_BF16] = matmul_bf16,	[KVP_GGML_Q8_0] = matmul_q8_0,
		[KVP_GGML_Q4_0] = matmul_q4_0,	[KVP_GGML_Q4_1] = matmul_q4_1,
		[KVP_GGML_Q5_0] = matmul_q5_0,	[KVP_GGML_Q5_1] = matmul_q5_1,
		[KVP_GGML_Q2_K] = matmul_q2_k,	[KVP_GGML_Q3_K] = matmul_q3_k,
		[KVP_GGML_Q4_K] = matmul_q4_k,	[KVP_GGML_Q5_K] = matmul_q5_k,
		[KVP_GGML_Q6_K] = matmul_q6_k,
	},
	.dequant = {
		[KVP_GGML_F32] = dequant_f32,	[KVP_GGML_F16] = dequant_f16,
		[KVP_GGML_BF16] = dequant_bf16,	[KVP_GGML_Q8_0] = dequant_q8_0,
		[KVP_GGML_Q4_0] = dequant_q4_0,	[KVP_GGML_Q4_1] = dequant_q4_1,
		[KVP_GGML_Q5_0] = dequant_q5_0,	[KVP_GGML_Q5_1] = dequant_q5_1,
		[KVP_GGML_Q2_K] = dequant_q2_k,	[KVP_GGML_Q3_K] = dequant_q3_k,
		[KVP_GGML_Q4_K] = dequant_q4_k,	[KVP_GGML_Q5_K] = dequant_q5_k,
		[KVP_GGML_Q6_K] = dequant_q6_k,
	},
	.quant_act = {
		[KVP_ACT_F32] = act_f32,	[KVP_ACT_BF16] = act_bf16,
		[KVP_ACT_Q8_32] = act_q8_32,	[KVP_ACT_Q8_256] = act_q8_256,
	},
	.kv_store = {
		[KVP_DTYPE_F32] = kv_store_f32, [KVP_DTYPE_F16] = kv_store_f16,
		[KVP_DTYPE_BF16] = kv_store_bf16,
	},
	.kv_load = {
		[KVP_DTYPE_F32] = kv_load_f32, [KVP_DTYPE_F16] = kv_load_f16,
		[KVP_DTYPE_BF16] = kv_load_bf16,
	},
	.rmsnorm = rmsnorm,
	.swiglu = swiglu,
	.attn_block = attn_block,
};
