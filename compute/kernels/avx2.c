/* SPDX-License-Identifier: MIT */
/*
 * avx2.c - the AVX2 kernel table (AVX2 + FMA + F16C: every x86-64 CPU since Haswell
 * and Zen 1).  Built with those flags only; dispatch.c checks the CPU first.
 *
 * Same structure as avx512.c (unpack a weight row into a panel of unsigned codes and
 * int16 sub-block scales, then dot it against a group of tokens), with 256-bit
 * registers and without VNNI: K-quants use vpmaddubsw (u8 x s8 -> int16 pairs) then
 * vpmaddwd against the scales; legacy types are unpacked to signed int8 so the
 * products go through vpmaddubsw(|w|, sign(a, w)) without saturating (a Q8_0 code of
 * 255 against 127 would), their offsets already removed.
 */
#include "compute/kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

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

/* ---- K-quant panels (same layout as avx512.c's) ---- */

struct kpanel {
	uint8_t q[KVP_QK_K];
	int16_t sc[4][32];
	int16_t mn[16];
	float d, dm;
	uint8_t pad[24];
};

/* sc16[j], j < 16, spread to the pair lanes: lane i of chunk c gets sc16[4c + i / 8] */
static inline void spread_scales(struct kpanel *p, const int16_t *sc16)
{
	for (int c = 0; c < 4; c++) {
		_mm256_storeu_si256((__m256i *)p->sc[c],
				    _mm256_set_m128i(_mm_set1_epi16(sc16[4 * c + 1]),
						     _mm_set1_epi16(sc16[4 * c])));
		_mm256_storeu_si256((__m256i *)(p->sc[c] + 16),
				    _mm256_set_m128i(_mm_set1_epi16(sc16[4 * c + 3]),
						     _mm_set1_epi16(sc16[4 * c + 2])));
	}
}

static inline __m256i bits(__m256i v, int shift, int mask)
{
	return _mm256_and_si256(_mm256_srli_epi16(v, shift), _mm256_set1_epi8((char)mask));
}

static inline __m256i ld(const uint8_t *p)
{
	return _mm256_loadu_si256((const __m256i *)p);
}

static inline void st(uint8_t *p, __m256i v)
{
	_mm256_storeu_si256((__m256i *)p, v);
}

static void unpack_q4_k_or_q5_k(const uint8_t *blk, struct kpanel *p, int five)
{
	const struct kvp_blk_q4_k *b4 = (const void *)blk;
	const struct kvp_blk_q5_k *b5 = (const void *)blk;
	const uint8_t *qs = five ? b5->qs : b4->qs, *s = five ? b5->scales : b4->scales;
	int16_t sc[16];

	for (int c = 0; c < 4; c++) {
		__m256i v = ld(qs + 32 * c), lo = bits(v, 0, 0xf), hi = bits(v, 4, 0xf);

		if (five) {
			__m256i h = ld(b5->qh);

			lo = _mm256_or_si256(lo, _mm256_slli_epi16(bits(h, 2 * c, 1), 4));
			hi = _mm256_or_si256(hi, _mm256_slli_epi16(bits(h, 2 * c + 1, 1), 4));
		}
		st(p->q + 64 * c, lo);
		st(p->q + 64 * c + 32, hi);
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
		p->mn[2 * j] = p->mn[2 * j + 1] = (int16_t)m;
	}
	spread_scales(p, sc);
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
	int16_t sc[16];

	for (int h = 0; h < 2; h++) {
		__m256i l0 = ld(b->ql + 64 * h), l1 = ld(b->ql + 64 * h + 32), q = ld(b->qh + 32 * h);
		uint8_t *o = p->q + 128 * h;

		st(o, _mm256_or_si256(bits(l0, 0, 0xf), _mm256_slli_epi16(bits(q, 0, 3), 4)));
		st(o + 32, _mm256_or_si256(bits(l1, 0, 0xf), _mm256_slli_epi16(bits(q, 2, 3), 4)));
		st(o + 64, _mm256_or_si256(bits(l0, 4, 0xf), _mm256_slli_epi16(bits(q, 4, 3), 4)));
		st(o + 96, _mm256_or_si256(bits(l1, 4, 0xf), _mm256_slli_epi16(bits(q, 6, 3), 4)));
	}
	for (int j = 0; j < 16; j++) {
		sc[j] = b->scales[j];
		p->mn[j] = (int16_t)(32 * sc[j]);	/* w = d sc (q - 32) */
	}
	spread_scales(p, sc);
	p->d = p->dm = kvp_f16_to_f32(b->d);
}

/* the 2-bit planes of Q2_K/Q3_K, plus Q3_K's high bit */
static void unpack_planes(const uint8_t *qs, const uint8_t *hmask, struct kpanel *p)
{
	for (int c = 0; c < 4; c++) {
		__m256i v = ld(qs + 32 * (c / 2));
		int pl = 2 * (c % 2);
		__m256i lo = bits(v, 2 * pl, 3), hi = bits(v, 2 * pl + 2, 3);

		if (hmask) {
			__m256i h = ld(hmask);

			lo = _mm256_or_si256(lo, _mm256_slli_epi16(bits(h, 2 * c, 1), 2));
			hi = _mm256_or_si256(hi, _mm256_slli_epi16(bits(h, 2 * c + 1, 1), 2));
		}
		st(p->q + 64 * c, lo);
		st(p->q + 64 * c + 32, hi);
	}
}

static void unpack_q2_k(const uint8_t *blk, struct kpanel *p)
{
	const struct kvp_blk_q2_k *b = (const void *)blk;
	int16_t sc[16];

	unpack_planes(b->qs, NULL, p);
	for (int j = 0; j < 16; j++) {
		sc[j] = b->scales[j] & 0xf;
		p->mn[j] = b->scales[j] >> 4;
	}
	spread_scales(p, sc);
	p->d = kvp_f16_to_f32(b->d);
	p->dm = kvp_f16_to_f32(b->dmin);
}

static void unpack_q3_k(const uint8_t *blk, struct kpanel *p)
{
	const struct kvp_blk_q3_k *b = (const void *)blk;
	int16_t sc[16];

	unpack_planes(b->qs, b->hmask, p);
	for (int j = 0; j < 16; j++) {
		int lo = j < 8 ? b->scales[j] & 0xf : b->scales[j - 8] >> 4;
		int hi = (b->scales[8 + j % 4] >> (2 * (j / 4))) & 3;

		sc[j] = (int16_t)((lo | hi << 4) - 32);
		p->mn[j] = (int16_t)(4 * sc[j]);	/* w = d sc (q - 4) */
	}
	spread_scales(p, sc);
	p->d = p->dm = kvp_f16_to_f32(b->d);
}

static inline __attribute__((always_inline)) void
kdot(float *out, const struct kpanel *p, size_t nsb, const uint8_t *x, size_t xs, const int R)
{
	__m256 acc[GROUP];

	for (int r = 0; r < R; r++)
		acc[r] = _mm256_setzero_ps();
	for (size_t b = 0; b < nsb; b++, p++) {
		__m256i ia[GROUP];
		__m256i mn = _mm256_loadu_si256((const __m256i *)p->mn);

		for (int r = 0; r < R; r++)
			ia[r] = _mm256_setzero_si256();
		for (int h = 0; h < 8; h++) {
			__m256i w = ld(p->q + 32 * h);
			__m256i s = _mm256_loadu_si256((const __m256i *)(p->sc[h / 2] + 16 * (h % 2)));

			for (int r = 0; r < R; r++) {
				const struct kvp_act_q8_256 *a =
					(const struct kvp_act_q8_256 *)(x + r * xs) + b;
				__m256i pr = _mm256_maddubs_epi16(w, ld((const uint8_t *)a->q + 32 * h));

				ia[r] = _mm256_add_epi32(ia[r], _mm256_madd_epi16(pr, s));
			}
		}
		for (int r = 0; r < R; r++) {
			const struct kvp_act_q8_256 *a = (const struct kvp_act_q8_256 *)(x + r * xs) + b;
			__m256i m = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsum), mn);

			acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[r]), _mm256_set1_ps(p->d * a->d),
						 acc[r]);
			acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(-p->dm * a->d),
						 acc[r]);
		}
	}
	for (int r = 0; r < R; r++)
		out[r] = hsum8(acc[r]);
}

static void kdot_any(float *out, const struct kpanel *p, size_t nsb, const uint8_t *x, size_t xs,
		     size_t R)
{
	switch (R) {
	case 1: kdot(out, p, nsb, x, xs, 1); break;
	case 2: kdot(out, p, nsb, x, xs, 2); break;
	case 3: kdot(out, p, nsb, x, xs, 3); break;
	default: kdot(out, p, nsb, x, xs, 4); break;
	}
}

typedef void unpack_k_fn(const uint8_t *blk, struct kpanel *p);

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

					kdot_any(part, panel, sn, xa + t * xs, xs, g);
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

/* ---- legacy ---- */

/* Signed codes w = q - off, per block its scale d and its min m (the only correction). */
struct lpanel {
	int8_t *w;
	float *d;
	float *m;
};

static void unpack_legacy(const uint8_t *row, uint32_t type, size_t nb, struct lpanel *p)
{
	const struct kvp_qtype *t = kvp_qtype(type);

	for (size_t b = 0; b < nb; b++) {
		const uint8_t *blk = row + b * t->block_bytes;
		int8_t *w = p->w + b * KVP_QK;
		uint8_t q[KVP_QK_K];
		int32_t sc[16], mn[16], off;
		float d, dmin;

		if (type == KVP_GGML_Q8_0) {	/* already signed */
			memcpy(w, ((const struct kvp_blk_q8_0 *)blk)->qs, KVP_QK);
			p->d[b] = kvp_f16_to_f32(((const struct kvp_blk_q8_0 *)blk)->d);
			p->m[b] = 0;
			continue;
		}
		kvp_qtype_codes(blk, type, q, sc, mn, &d, &dmin, &off);
		st((uint8_t *)w, _mm256_sub_epi8(ld(q), _mm256_set1_epi8((char)off)));
		p->d[b] = d;
		p->m[b] = dmin;
	}
}

static inline __attribute__((always_inline)) void
ldot(float *out, const struct lpanel *p, size_t s0, size_t nb, const uint8_t *x, size_t xs,
     size_t k, const int R)
{
	const __m256i ones = _mm256_set1_epi16(1);
	__m256 acc[GROUP];
	float cor[GROUP];

	for (int r = 0; r < R; r++) {
		const float *ds = kvp_act_q8_32_d(x + r * xs, k) + k / KVP_QK + s0;
		float c = 0;

		acc[r] = _mm256_setzero_ps();
		for (size_t b = 0; b < nb; b++)
			c += p->m[b] * ds[b];
		cor[r] = c;
	}
	for (size_t b = 0; b < nb; b++) {
		__m256i w = ld((const uint8_t *)(p->w + b * KVP_QK)), aw = _mm256_sign_epi8(w, w);

		for (int r = 0; r < R; r++) {
			const uint8_t *xr = x + r * xs;
			const float *ad = kvp_act_q8_32_d(xr, k) + s0;
			__m256i a = _mm256_sign_epi8(ld(xr + (s0 + b) * KVP_QK), w);
			__m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, a), ones);

			acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(p->d[b] * ad[b]),
						 acc[r]);
		}
	}
	for (int r = 0; r < R; r++)
		out[r] = hsum8(acc[r]) + cor[r];
}

static void ldot_any(float *out, const struct lpanel *p, size_t s0, size_t nb, const uint8_t *x,
		     size_t xs, size_t k, size_t R)
{
	switch (R) {
	case 1: ldot(out, p, s0, nb, x, xs, k, 1); break;
	case 2: ldot(out, p, s0, nb, x, xs, k, 2); break;
	case 3: ldot(out, p, s0, nb, x, xs, k, 3); break;
	default: ldot(out, p, s0, nb, x, xs, k, 4); break;
	}
}

#define LPANEL_MAX 256

static void matmul_legacy(float *restrict out, size_t ldo, const uint8_t *restrict w,
			  size_t w_row_bytes, const uint8_t *restrict x, size_t xs, size_t rows,
			  size_t k, size_t o0, size_t o1, uint32_t type)
{
	int8_t q[LPANEL_MAX * KVP_QK] __attribute__((aligned(64)));
	float d[LPANEL_MAX], m[LPANEL_MAX];
	struct lpanel p = { q, d, m };
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

/* ---- bf16: both operands widened to f32 (exact), FMA ---- */

static inline __m256 bf16x8(const uint16_t *p)
{
	__m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));

	return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static void matmul_bf16(float *restrict out, size_t ldo, const void *restrict w,
			size_t w_row_bytes, const void *restrict x, size_t x_row_bytes, size_t rows,
			size_t k, size_t o0, size_t o1)
{
	size_t kv = k / 8 * 8;

	for (size_t r0 = 0; r0 < rows; r0 += GROUP) {
		size_t g = rows - r0 < GROUP ? rows - r0 : GROUP;

		for (size_t o = o0; o < o1; o++) {
			const uint16_t *wr = (const uint16_t *)((const uint8_t *)w + o * w_row_bytes);
			__m256 acc[GROUP];

			for (size_t r = 0; r < g; r++)
				acc[r] = _mm256_setzero_ps();
			for (size_t i = 0; i < kv; i += 8) {
				__m256 wv = bf16x8(wr + i);

				for (size_t r = 0; r < g; r++) {
					const uint16_t *xr =
						(const uint16_t *)((const uint8_t *)x + (r0 + r) * x_row_bytes);

					acc[r] = _mm256_fmadd_ps(wv, bf16x8(xr + i), acc[r]);
				}
			}
			for (size_t r = 0; r < g; r++) {
				const uint16_t *xr =
					(const uint16_t *)((const uint8_t *)x + (r0 + r) * x_row_bytes);
				float s = hsum8(acc[r]);

				for (size_t i = kv; i < k; i++)
					s += kvp_bf16_to_f32(wr[i]) * kvp_bf16_to_f32(xr[i]);
				out[(r0 + r) * ldo + o] = s;
			}
		}
	}
}

/* ---- the rest: the reference where it is not on a hot path ---- */

#define QUANT_ACT(name, act)                                                      \
	static void act_##name(void *restrict dst, const float *restrict x, size_t k) \
	{                                                                         \
		kvp_quant_act_ref(dst, act, x, k);                                \
	}

QUANT_ACT(f32, KVP_ACT_F32)
QUANT_ACT(bf16, KVP_ACT_BF16)
QUANT_ACT(q8_32, KVP_ACT_Q8_32)
QUANT_ACT(q8_256, KVP_ACT_Q8_256)

static void dequant_f16(float *restrict dst, const void *restrict src, size_t n)
{
	kv_load_f16(dst, src, n);
}

static void dequant_bf16(float *restrict dst, const void *restrict src, size_t n)
{
	kv_load_bf16(dst, src, n);
}

#define DEQUANT_REF(name, type)                                                          \
	static void dequant_##name(float *restrict dst, const void *restrict src, size_t n) \
	{                                                                                \
		kvp_dequant_ref(dst, src, type, n);                                       \
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

const struct kvp_kernels kvp_kernels_avx2 = {
	.name = "avx2",
	.isa = KVP_ISA_AVX2,
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
