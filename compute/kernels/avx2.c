/* SPDX-License-Identifier: MIT */
/*
 * avx2.c - the AVX2 kernel table (AVX2 + FMA + F16C: every x86-64 CPU since Haswell
 * and Zen 1).  Built with those flags only; dispatch.c checks the CPU first.
 *
 * Integer weights: the structure of avx512.c (a weight row unpacked into groups of 256
 * codes in the activations' lane order, then dotted against the tokens), with 256-bit
 * registers and without VNNI: vpmaddubsw (u8 x s8 -> int16 pairs), the chunks' pairs
 * summed in int16 where they cannot saturate, then vpmaddwd by 1 into 32-bit lanes.
 *  - decode (up to DEC_BATCH tokens): ymm_int.inc's dec_matmul(), shared with avxvnni.c:
 *    each half-group unpacked into registers and used at once by DEC_ROWS tokens, the
 *    row streaming through once, prefetched ahead;
 *  - more tokens (prefill): a row unpacked into an L1 panel once
 *    per TOKEN_BLOCK tokens, a 1 row x MK_RT token tile over it.
 * Both add the same terms in the same order, per slice of PANEL_MAX groups: a row's
 * result does not depend on the batch it came in.  Design and figures: docs/compute.md.
 */
#include "compute/kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

/* the K-quants take struct kvp_act_q8k (quant.h), the legacy types struct kvp_act_q8 */
#define KVP_ACT_KQUANT KVP_ACT_Q8K
#include "compute/kernels/table.inc"

#include "compute/kernels/ymm.inc"

#include "compute/kernels/ymm_int.inc"

/* Tokens whose activations stay hot while every row of the range passes. */
#define TOKEN_BLOCK 64

/* ---- integer weights (see avx512.c for the group layout) ---- */

/*
 * One group of 256 weights in the lane order of struct kvp_act_q8, as 256-bit halves:
 * q[0][c] = bytes 64c .. 64c + 31 (sub-blocks 0-7), q[1][c] = the rest (8-15); per
 * sub-block the weight scale dw and the correction c.  Q8_0 keeps its codes signed:
 * vpmaddubsw takes u8 x s8 into int16 pairs, and 255 x 127 twice would saturate, so
 * those go through |w| x sign(a, w) instead, with no offset to correct.
 */
struct wgrp {
	__m256i q[2][4];
	__m256 dw[2], c[2];
};

static_assert(sizeof(struct wgrp) == 384, "a 64-byte multiple");

static inline void to_lanes(const __m256i *n, struct wgrp *w)
{
	to_lanes_half(n, w->q[0]);
	to_lanes_half(n + 4, w->q[1]);
}

/* the binary16 at @p + @stride b, blocks b < @nb (0 past them), as 8 f32 */
static inline __m256 half8(const uint8_t *p, uint32_t stride, size_t nb)
{
	uint16_t h[8] = { 0 };

	for (size_t b = 0; b < nb; b++)
		h[b] = ld16(p + b * stride);
	return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
}

static inline __attribute__((always_inline)) void unpack_l(const uint8_t *blk, uint32_t type,
							   size_t nb, struct wgrp *w)
{
	const __m128i m4 = _mm_set1_epi8(0x0f);
	const __m256i lo4 = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3),
		      hi4 = _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7);
	uint32_t bb = blk_bytes(type);
	int off = type == KVP_GGML_Q4_0 ? 8 : type == KVP_GGML_Q5_0 ? 16 : 0;
	int one = type == KVP_GGML_Q4_1 || type == KVP_GGML_Q5_1;
	__m256 d = half8(blk, bb, nb), m = _mm256_set1_ps((float)-off);
	__m256i n[8];

	/* c = m - off d per block: the minimum (Q4_1, Q5_1) or the offset's share */
	m = one ? half8(blk + 2, bb, nb) : _mm256_mul_ps(m, d);
	for (size_t b = 0; b < 8; b++) {
		const uint8_t *x = blk + b * bb;

		if (b >= nb) {
			n[b] = _mm256_setzero_si256();
			continue;
		}
		switch (type) {
		case KVP_GGML_Q8_0: /* signed codes, no offset: see struct wgrp */
			n[b] = ldy(x + 2);
			break;
		case KVP_GGML_Q4_0:
		case KVP_GGML_Q4_1: {
			__m128i v = _mm_loadu_si128((const __m128i *)(x + (one ? 4 : 2)));

			n[b] = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4),
						_mm_and_si128(v, m4));
			break;
		}
		default: { /* Q5_0, Q5_1: nibbles plus bit e of qh as 16 */
			__m128i v = _mm_loadu_si128((const __m128i *)(x + (one ? 8 : 6)));

			n[b] = _mm256_or_si256(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4),
									      m4),
								_mm_and_si128(v, m4)),
					       bit16(ld32(x + (one ? 4 : 2))));
			break;
		}
		}
	}
	w->dw[0] = _mm256_permutevar8x32_ps(d, lo4);
	w->dw[1] = _mm256_permutevar8x32_ps(d, hi4);
	w->c[0] = _mm256_permutevar8x32_ps(m, lo4);
	w->c[1] = _mm256_permutevar8x32_ps(m, hi4);
	to_lanes(n, w);
}

static inline __attribute__((always_inline)) void unpack(const uint8_t *wr, uint32_t type, size_t k,
							 size_t g, struct wgrp *w)
{
	size_t nb = (k - g * KVP_QG) / KVP_QK;
	const uint8_t *grp = wr + g * 8 * blk_bytes(type);

	/*
	 * A whole group as the decode kernel unpacks it (the same values: see
	 * dec_half_l()), its scales gathered without a store to the stack and loops over
	 * a variable block count; unpack_l() only for a short last group.  The panel's
	 * unpacking was ~6% of Q8_0 prefill samples on Zen 2 before.
	 */
	if (nb >= 8) {
		dec_half_l(grp, type, 0, 8, 1, w->q[0], &w->dw[0], &w->c[0]);
		dec_half_l(grp, type, 1, 8, 1, w->q[1], &w->dw[1], &w->c[1]);
		return;
	}
	unpack_l(grp, type, nb, w);
}

/*
 * A K-quant super-block unpacked for struct kvp_act_q8k: codes in lane order as struct
 * wgrp has them, and the integer scales of ymm_int.inc's kq_scales().
 */
struct wgrpk {
	__m256i q[2][4];
	struct kq_sc k;
};

static_assert(sizeof(struct wgrpk) == 384, "a 64-byte multiple");

static inline __attribute__((always_inline)) void unpack_kq(const uint8_t *wr, uint32_t type,
							    size_t g, struct wgrpk *w)
{
	const uint8_t *blk = wr + g * blk_bytes(type);

	kq_codes(blk, type, 0, w->q[0]);
	kq_codes(blk, type, 1, w->q[1]);
	kq_scales(blk, type, &w->k);
}

/* u8 x s8 (or, for Q8_0, s8 x s8 through the sign trick) 32 products, in int16 pairs */
static inline __m256i mad(__m256i w, __m256i a, uint32_t type)
{
	if (type == KVP_GGML_Q8_0)
		return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
	return _mm256_maddubs_epi16(w, a);
}

/*
 * Prefill and batched decode micro-kernel: one unpacked weight row (@panel) times RT
 * tokens over groups [0, ng) of the slice starting at group g0, a half-group at a time:
 * each weight load feeds RT tokens, and per token the integer dots (int16 sums, one
 * vpmaddwd) and two float accumulators (the scaled dots, the corrections: one
 * dependent FMA each per half).  Measured against 2 x 2 and 2 x 3 tiles (rows x
 * tokens), which spill their accumulators from the 16 registers: 1 x 4 was as fast or
 * faster (docs/compute.md).  Q8_0 takes 1 x 3 (MK_RT_Q8): its |w| takes one more
 * register, and 4 tokens spilled the float accumulators (1.05x on Zen 2); it has no
 * correction (c = 0: fma(c, s, v) is v, and an accumulator starting at +0 never
 * becomes -0, so leaving it out changes no bit), which frees a multiply and a load a
 * half (1.06x).
 */
#define MK_RT 4
#define MK_RT_Q8 3

static inline __attribute__((always_inline)) void mat_tile(float *out, size_t ldo,
							   const struct wgrp *panel, size_t g0,
							   size_t ng, const uint8_t *x, size_t xs,
							   const int RT, int add, uint32_t type)
{
	const __m256i one = _mm256_set1_epi16(1);
	const int pk = pairs_per_madd(type);
	__m256 acc[MK_RT][2];

#pragma GCC unroll 4
	for (int t = 0; t < RT; t++)
		acc[t][0] = acc[t][1] = _mm256_setzero_ps();
	for (size_t g = 0; g < ng; g++) {
		const struct wgrp *pw = &panel[g];

#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			__m256i s[MK_RT], p[MK_RT];

#pragma GCC unroll 4
			for (int c = 0; c < 4; c++) {
				__m256i wq = _mm256_load_si256(&pw->q[h][c]);

#pragma GCC unroll 4
				for (int t = 0; t < RT; t++) {
					const struct kvp_act_q8 *a =
						(const struct kvp_act_q8 *)(x + t * xs) + g0 + g;
					__m256i m = mad(wq,
							ldy((const uint8_t *)a->q + 64 * c +
							    32 * h),
							type);

					p[t] = c % pk ? _mm256_add_epi16(p[t], m) : m;
					if (c % pk < pk - 1)
						continue;
					m = _mm256_madd_epi16(p[t], one);
					s[t] = c < pk ? m : _mm256_add_epi32(s[t], m);
				}
			}
#pragma GCC unroll 4
			for (int t = 0; t < RT; t++) {
				const struct kvp_act_q8 *a = (const struct kvp_act_q8 *)(x +
											 t * xs) +
							     g0 + g;

				/* as gdot() does it, so a row's sums do not depend on the batch */
				__m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(s[t]),
							 _mm256_mul_ps(pw->dw[h],
								       _mm256_loadu_ps(a->d +
										       8 * h)));

				if (type != KVP_GGML_Q8_0)
					v = _mm256_fmadd_ps(pw->c[h], _mm256_loadu_ps(a->s + 8 * h),
							    v);
				else /* not contracted into an FMA with the add: gdot()'s rounding */
					__asm__("" : "+x"(v));
				acc[t][h] = _mm256_add_ps(acc[t][h], v);
			}
		}
	}
#pragma GCC unroll 4
	for (int t = 0; t < RT; t++) {
		float v = hsum8(_mm256_add_ps(acc[t][0], acc[t][1]));

		out[t * ldo] = add ? out[t * ldo] + v : v;
	}
}

/*
 * The K-quants' tile (struct kvp_act_q8k): as mat_tile(), per token the scaled integer
 * dots of both halves (kq_hdot()) and one float step per super-block (kq_step()): the
 * decode kernel's sums in its order (dec_group_k()).
 */
static inline __attribute__((always_inline)) void mat_tile_k(float *out, size_t ldo,
							     const struct wgrpk *panel, size_t g0,
							     size_t ng, const uint8_t *x, size_t xs,
							     const int RT, int add, uint32_t type)
{
	__m256 acc[MK_RT];

#pragma GCC unroll 4
	for (int t = 0; t < RT; t++)
		acc[t] = _mm256_setzero_ps();
	for (size_t g = 0; g < ng; g++) {
		const struct wgrpk *pw = &panel[g];
		__m256i s[MK_RT];

#pragma GCC unroll 2
		for (int h = 0; h < 2; h++) {
			__m256i q[4], sv = _mm256_load_si256(&pw->k.sv[h]);

#pragma GCC unroll 4
			for (int c = 0; c < 4; c++)
				q[c] = _mm256_load_si256(&pw->q[h][c]);
#pragma GCC unroll 4
			for (int t = 0; t < RT; t++) {
				const struct kvp_act_q8k *a = (const struct kvp_act_q8k *)(x +
											   t * xs) +
							      g0 + g;

				s[t] = kq_hdot(h ? s[t] : _mm256_setzero_si256(), q, a->q, h, sv,
					       type);
			}
		}
#pragma GCC unroll 4
		for (int t = 0; t < RT; t++)
			acc[t] = kq_step(acc[t], s[t], &pw->k,
					 (const struct kvp_act_q8k *)(x + t * xs) + g0 + g, type);
	}
#pragma GCC unroll 4
	for (int t = 0; t < RT; t++) {
		float v = hsum8(acc[t]);

		out[t * ldo] = add ? out[t * ldo] + v : v;
	}
}

/*
 * Weight rows per pass of the token loop: each token tile runs over PF_NRW rows'
 * panels in turn, so its activations (L2 for the first row) are in L1 for the next.
 * Zen 2, 2048 x 2048 x 512 rows, three rounds alternated against 1: Q8_0 1.01-1.02x,
 * Q4_0 1.02-1.06x, Q4_K 1.04-1.05x, Q6_K 1.03-1.09x (the same bits).
 */
#define PF_NRW 2

/*
 * Prefill's loops, one for both panel kinds: per TOKEN_BLOCK tokens and per slice of
 * PANEL_MAX groups, PF_NRW weight rows at a time unpacked (UNPACK(g, panel entry) of
 * row wr), then TILE(n, row's panel) (mat_tile* over @n tokens at ot/xt, n <= RTN <=
 * MK_RT) over the block's tokens, each tile for every row.  The slices go outside the
 * rows, so one slice of the block's activations (64 tokens x 4096 codes, ~330 KiB)
 * stays in L2 while every row passes, where a row's two slices of 8192 took ~660 KiB
 * per row pair from L3 (Zen 2, 2048 x 8192 x 512: Q8_0 0.87x, Q4_0 0.84x the rate of
 * k = 2048); each output still adds its slices in order, the same bits.  Expects out,
 * ldo, w, w_row_bytes, x, xs, rows, o0, o1, ng and panel[PF_NRW][PANEL_MAX] in scope.
 */
#define PREFILL_LOOPS(UNPACK, TILE, RTN) \
	for (size_t t0 = 0; t0 < rows; t0 += TOKEN_BLOCK) { \
		size_t tn = rows - t0 < TOKEN_BLOCK ? rows - t0 : TOKEN_BLOCK; \
\
		for (size_t s0 = 0; s0 < ng; s0 += PANEL_MAX) { \
			size_t sn = ng - s0 < PANEL_MAX ? ng - s0 : PANEL_MAX; \
\
			for (size_t o = o0; o < o1; o += PF_NRW) { \
				size_t nr = o1 - o < PF_NRW ? o1 - o : PF_NRW; \
				const uint8_t *wo = w + o * w_row_bytes; \
\
				/* the rows' last pass: fetch the next rows' slice start */ \
				if (t0 + tn == rows) \
					for (size_t r = 0; r < nr; r++) \
						_mm_prefetch((const char *)(wo + \
									    (nr + r) * \
										    w_row_bytes + \
									    s0 * (w_row_bytes / \
										  ng)), \
							     _MM_HINT_T0); \
				for (size_t r = 0; r < nr; r++) { \
					const uint8_t *wr = wo + r * w_row_bytes; \
\
					for (size_t g = 0; g < sn; g++) \
						UNPACK(s0 + g, &panel[r][g]); \
				} \
				for (size_t t = t0; t < t0 + tn; t += (RTN)) { \
					size_t rt = t0 + tn - t < (RTN) ? t0 + tn - t : (RTN); \
					const uint8_t *xt = x + t * xs; \
\
					for (size_t r = 0; r < nr; r++) { \
						float *ot = out + t * ldo + o + r; \
\
						if ((RTN) >= 4 && rt == 4) \
							TILE(4, panel[r]); \
						else if (rt == 3) \
							TILE(3, panel[r]); \
						else if (rt == 2) \
							TILE(2, panel[r]); \
						else \
							TILE(1, panel[r]); \
					} \
				} \
			} \
		} \
	}

/* prefill of the K-quants: matmul_int()'s loops over struct wgrpk panels */
static inline __attribute__((always_inline)) void
matmul_kq(float *restrict out, size_t ldo, const uint8_t *restrict w, size_t w_row_bytes,
	  const uint8_t *restrict x, size_t xs, size_t rows, size_t k, size_t o0, size_t o1,
	  uint32_t type)
{
	struct wgrpk panel[PF_NRW][PANEL_MAX];
	size_t ng = k / KVP_QK_K;

#define UNPACK_KQ(g, p) unpack_kq(wr, type, g, p)
#define TILE_KQ(n, pan) mat_tile_k(ot, ldo, pan, s0, sn, xt, xs, n, s0 > 0, type)
	PREFILL_LOOPS(UNPACK_KQ, TILE_KQ, MK_RT)
#undef UNPACK_KQ
#undef TILE_KQ
}

static inline __attribute__((always_inline)) void
matmul_int(float *restrict out, size_t ldo, const uint8_t *restrict w, size_t w_row_bytes,
	   const uint8_t *restrict x, size_t xs, size_t rows, size_t k, size_t o0, size_t o1,
	   uint32_t type)
{
	struct wgrp panel[PF_NRW][PANEL_MAX];
	size_t ng = (k + KVP_QG - 1) / KVP_QG;

	if (rows <= DEC_BATCH) {
		dec_matmul(out, ldo, w, w_row_bytes, x, xs, rows, k, o0, o1, type);
		return;
	}
	if (type >= KVP_GGML_Q2_K) {
		matmul_kq(out, ldo, w, w_row_bytes, x, xs, rows, k, o0, o1, type);
		return;
	}
#define UNPACK_INT(g, p) unpack(wr, type, k, g, p)
#define TILE_INT(n, pan) mat_tile(ot, ldo, pan, s0, sn, xt, xs, n, s0 > 0, type)
	PREFILL_LOOPS(UNPACK_INT, TILE_INT, type == KVP_GGML_Q8_0 ? MK_RT_Q8 : MK_RT)
#undef UNPACK_INT
#undef TILE_INT
}

KVP_MATMUL_INT_ALL

/* ---- f16, bf16: vec_f32.inc's GEMV and dot tile over converted weights ---- */

/*
 * Up to GEMV_GROUP rows the GEMV (each weight vector converted once for every row),
 * above the dot tile (4 weight rows x 3 tokens, the same sums: see dtile()), from 32
 * rows the same tile over an f32 panel converted once per 96 tokens (matmul_hpanel());
 * F16C for f16, 16-bit shifts for bf16 (both exact, the products are the scalar oracle's).
 * F16 prefill went one weight row at a time before: 0.11 of the FMA peak on Zen 3.
 */
KVP_REF_ACT(f32, KVP_ACT_F32)
KVP_REF_ACT(bf16, KVP_ACT_BF16)
KVP_REF_ACT(q8, KVP_ACT_Q8)

KVP_REF_DEQUANT_INTEGER

KVP_KERNEL_TABLE(avx2, KVP_ISA_AVX2);
