/* SPDX-License-Identifier: MIT */
/*
 * neon.c - the aarch64 tables: Advanced SIMD (NEON, every aarch64 Linux CPU), and the
 * same code with the int8 dot products of ARMv8.2 dotprod (sdot) when compiled with
 * KVP_NEON_DOTPROD (kernels/meson.build builds this file twice, the second time with
 * -march=armv8.2-a+dotprod, as kvp_kernels_neondot).  dispatch.c takes the dotprod
 * table where the kernel reports asimddp (getauxval(AT_HWCAP)), the plain one elsewhere
 * (Cortex-A53/A57/A72, the Raspberry Pi 4).
 *
 * The float kernels are vec_f32.inc compiled for 4-lane vectors (f16 through fcvtl,
 * bf16 by widening, FMA throughout); the int8 K/V kernels are kvq.inc and kvq4.inc
 * vectorised by the compiler, int8 attention kvqattn.inc's portable loops.
 *
 * Every integer weight type takes struct kvp_act_q8 (a scale per block of 32, its codes
 * in the int8 dot instructions' lane order: 4 bytes of each of the 16 sub-blocks per
 * 64-byte chunk).  A weight group of 256 is unpacked once per output row and slice
 * (unpack_*: codes minus their offset as int8 - every type's fit - in element order,
 * then to the activations' lane order by ld4, whose de-interleave of 32-bit words is
 * the 4 x 4 transpose that takes 16 consecutive codes of 4 sub-blocks to one register
 * per chunk), and the input rows then read it from L1, RB at a time (2 with dotprod,
 * 1 without), each weight register loaded once for them: per group and row 16 dots of
 * 16 products (one sdot each; without dotprod smull/smlal pairs into int16
 * and sadalp into int32, the two chunks' sums of at most 2 * 128 * 127 fitting int16)
 * give the 16 sub-block dots in 4 registers, and two FMAs per register apply the
 * sub-block's weight scale times the activation scale and the correction (offset,
 * min) times the activation sum.  Each input row takes the same operations in the same
 * order whatever the batch, so a batch gives each row's bits.
 *
 * Not measured on hardware (built and tested under qemu-user only): docs/compute.md
 * has the instruction mix of the hot loops.
 */
#include "compute/kernels/kernels.h"

#include <arm_neon.h>
#include <string.h>

#include "compute/kernels/table.inc"

static inline float h2f(uint16_t h)
{
	return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* the integer K/V kernels (kvq.inc), vectorised by the compiler */
#define KVQ_H2F(h) h2f(h)
#define KVQ_SIMD _Pragma("omp simd")
#define KVQ_SIMD_MAX _Pragma("omp simd reduction(max : amax)")
#include "compute/kernels/kvq.inc"
#include "compute/kernels/kvq4.inc"

/* int8 attention: kvqattn.inc's portable loops (included before VLEN is defined) */
#include "compute/kernels/kvqattn.inc"

/* the float kernels: vec_f32.inc on 4-lane vectors (32 registers: 8-row GEMV groups) */
#define VLEN 4
#define GEMV_GROUP 8
#define VF_REG "w"

typedef float vf4_t __attribute__((vector_size(16), aligned(4)));

static inline vf4_t vf_load_f16(const uint16_t *p)
{
	return (vf4_t)vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}

static inline void vf_store_f16(uint16_t *p, vf4_t v)
{
	vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32((float32x4_t)v)));
}

#include "compute/kernels/vec_f32.inc"

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

static void dequant_f16(float *restrict dst, const void *restrict src, size_t n)
{
	kv_load_f16(dst, src, n);
}

static void dequant_bf16(float *restrict dst, const void *restrict src, size_t n)
{
	kv_load_bf16(dst, src, n);
}

/*
 * One weight group of 256 unpacked: @q the codes minus their offset in struct
 * kvp_act_q8's lane order, and per sub-block i of 16 the dot's scale @dw (times the
 * activation scale d_i) and correction @c (times the activation sum s_i):
 *   legacy:   w = d (q - off) + m        dw = d,       c = m
 *   K-quants: w = d sc (q - off) - dm mn  dw = d sc,   c = -dm mn
 */
struct wgrp {
	int8_t q[KVP_QG];
	float dw[16];
	float c[16];
};

/* 256 codes in element order to the lane order (kvp_q8_pos()): ld4's 4 x 4 transposes */
static inline void to_lanes(const int8_t *restrict e, int8_t *restrict q)
{
#pragma GCC unroll 4
	for (int r = 0; r < 4; r++) {
		int32x4x4_t t = vld4q_s32((const int32_t *)(e + 64 * r));

		vst1q_s32((int32_t *)(q + 16 * r), t.val[0]);
		vst1q_s32((int32_t *)(q + 64 + 16 * r), t.val[1]);
		vst1q_s32((int32_t *)(q + 128 + 16 * r), t.val[2]);
		vst1q_s32((int32_t *)(q + 192 + 16 * r), t.val[3]);
	}
}

/* any type through the reference's integer view (kvp_qtype_codes()) */
static void unpack_ref(const uint8_t *wr, uint32_t type, size_t k, size_t g, int8_t *e,
		       struct wgrp *w)
{
	const struct kvp_qtype *t = kvp_qtype(type);
	uint8_t q[KVP_QG];
	int32_t sc[16], mn[16], off;
	float d, dmin;

	if (t->block == KVP_QK_K) {
		kvp_qtype_codes(wr + g * t->block_bytes, type, q, sc, mn, &d, &dmin, &off);
		for (int i = 0; i < KVP_QG; i++)
			e[i] = (int8_t)((int32_t)q[i] - off);
		for (int j = 0; j < 16; j++) {
			w->dw[j] = d * (float)sc[j];
			w->c[j] = -dmin * (float)mn[j];
		}
		return;
	}
	for (size_t b = 0; b < KVP_QG / KVP_QK; b++) {
		size_t blk = g * (KVP_QG / KVP_QK) + b;

		if (blk * KVP_QK >= k) { /* past the row's end: the activations are 0 there */
			memset(e + b * KVP_QK, 0, KVP_QK);
			w->dw[2 * b] = w->dw[2 * b + 1] = 0;
			w->c[2 * b] = w->c[2 * b + 1] = 0;
			continue;
		}
		kvp_qtype_codes(wr + blk * t->block_bytes, type, q, sc, mn, &d, &dmin, &off);
		for (int i = 0; i < KVP_QK; i++)
			e[b * KVP_QK + i] = (int8_t)((int32_t)q[i] - off);
		w->dw[2 * b] = w->dw[2 * b + 1] = d;
		w->c[2 * b] = w->c[2 * b + 1] = dmin;
	}
}

/* Q8_0 and Q4_0: their blocks of 32 in NEON; the rest of the legacy types as the reference */
static inline __attribute__((always_inline)) void
unpack_legacy(const uint8_t *wr, uint32_t type, size_t k, size_t g, int8_t *e, struct wgrp *w)
{
	const size_t bb = blk_bytes(type);

	if (type != KVP_GGML_Q8_0 && type != KVP_GGML_Q4_0) {
		unpack_ref(wr, type, k, g, e, w);
		return;
	}
	for (size_t b = 0; b < KVP_QG / KVP_QK; b++) {
		size_t blk = g * (KVP_QG / KVP_QK) + b;
		const uint8_t *p = wr + blk * bb;
		float d = 0;

		if (blk * KVP_QK >= k) {
			vst1q_s8(e + b * KVP_QK, vdupq_n_s8(0));
			vst1q_s8(e + b * KVP_QK + 16, vdupq_n_s8(0));
		} else if (type == KVP_GGML_Q8_0) {
			const struct kvp_blk_q8_0 *q = (const void *)p;

			vst1q_s8(e + b * KVP_QK, vld1q_s8(q->qs));
			vst1q_s8(e + b * KVP_QK + 16, vld1q_s8(q->qs + 16));
			d = h2f(q->d);
		} else {
			const struct kvp_blk_q4_0 *q = (const void *)p;
			uint8x16_t n = vld1q_u8(q->qs);
			int8x16_t eight = vdupq_n_s8(8);

			vst1q_s8(e + b * KVP_QK,
				 vsubq_s8(vreinterpretq_s8_u8(vandq_u8(n, vdupq_n_u8(0xf))),
					  eight));
			vst1q_s8(e + b * KVP_QK + 16,
				 vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(n, 4)), eight));
			d = h2f(q->d);
		}
		w->dw[2 * b] = w->dw[2 * b + 1] = d;
		w->c[2 * b] = w->c[2 * b + 1] = 0;
	}
}

/* Q4_K's 6-bit scale and min of sub-block @j of 32 from the 12 packed bytes @s */
static inline void scale_min_q4k(int j, const uint8_t *s, int *sc, int *mn)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*mn = s[j + 4] & 63;
	} else {
		*sc = (s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4;
		*mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
	}
}

/* Q4_K and Q6_K in NEON; the other K-quants as the reference */
static inline __attribute__((always_inline)) void
unpack_kq(const uint8_t *wr, uint32_t type, size_t k, size_t g, int8_t *e, struct wgrp *w)
{
	if (type == KVP_GGML_Q4_K) {
		const struct kvp_blk_q4_k *b = (const void *)(wr + g * sizeof(*b));
		float d = h2f(b->d), dm = h2f(b->dmin);

/* 32 bytes per 64 elements: low nibbles the first 32, high the next */
#pragma GCC unroll 4
		for (int c = 0; c < 4; c++) {
			uint8x16_t n0 = vld1q_u8(b->qs + 32 * c),
				   n1 = vld1q_u8(b->qs + 32 * c + 16);
			uint8x16_t m = vdupq_n_u8(0xf);
			int sc, mn;

			vst1q_s8(e + 64 * c, vreinterpretq_s8_u8(vandq_u8(n0, m)));
			vst1q_s8(e + 64 * c + 16, vreinterpretq_s8_u8(vandq_u8(n1, m)));
			vst1q_s8(e + 64 * c + 32, vreinterpretq_s8_u8(vshrq_n_u8(n0, 4)));
			vst1q_s8(e + 64 * c + 48, vreinterpretq_s8_u8(vshrq_n_u8(n1, 4)));
#pragma GCC unroll 4
			for (int h = 0; h < 2; h++) {
				scale_min_q4k(2 * c + h, b->scales, &sc, &mn);
				w->dw[4 * c + 2 * h] = w->dw[4 * c + 2 * h + 1] = d * (float)sc;
				w->c[4 * c + 2 * h] = w->c[4 * c + 2 * h + 1] = -dm * (float)mn;
			}
		}
		return;
	}
	if (type == KVP_GGML_Q6_K) {
		const struct kvp_blk_q6_k *b = (const void *)(wr + g * sizeof(*b));
		float d = h2f(b->d);
		int8x16_t off = vdupq_n_s8(32);
		uint8x16_t m4 = vdupq_n_u8(0xf), m2 = vdupq_n_u8(3);

/*
		 * per half of 128: ql's 64 bytes give the low nibbles of elements 0..63 and
		 * the high ones of 64..127, qh's 32 bytes the top two bits of 32-element
		 * quarter r at bits 2r
		 */
#pragma GCC unroll 4
		for (int hf = 0; hf < 2; hf++) {
#pragma GCC unroll 2
			for (int l = 0; l < 32; l += 16) {
				uint8x16_t a = vld1q_u8(b->ql + 64 * hf + l);
				uint8x16_t c = vld1q_u8(b->ql + 64 * hf + 32 + l);
				uint8x16_t h = vld1q_u8(b->qh + 32 * hf + l);
				int8_t *o = e + 128 * hf + l;

				vst1q_s8(o,
					 vsubq_s8(vreinterpretq_s8_u8(
							  vorrq_u8(vandq_u8(a, m4),
								   vshlq_n_u8(vandq_u8(h, m2), 4))),
						  off));
				vst1q_s8(o + 32,
					 vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(
							  vandq_u8(c, m4),
							  vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 2), m2),
								     4))),
						  off));
				vst1q_s8(o + 64,
					 vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(
							  vshrq_n_u8(a, 4),
							  vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 4), m2),
								     4))),
						  off));
				vst1q_s8(o + 96,
					 vsubq_s8(vreinterpretq_s8_u8(
							  vorrq_u8(vshrq_n_u8(c, 4),
								   vshlq_n_u8(vshrq_n_u8(h, 6),
									      4))),
						  off));
			}
		}
		for (int j = 0; j < 16; j++) {
			w->dw[j] = d * (float)b->scales[j];
			w->c[j] = 0;
		}
		return;
	}
	unpack_ref(wr, type, k, g, e, w);
}

static inline __attribute__((always_inline)) void unpack(const uint8_t *wr, uint32_t type, size_t k,
							 size_t g, struct wgrp *w)
{
	int8_t e[KVP_QG] __attribute__((aligned(16)));

	if (kvp_qtype(type)->block == KVP_QK_K)
		unpack_kq(wr, type, k, g, e, w);
	else
		unpack_legacy(wr, type, k, g, e, w);
	to_lanes(e, w->q);
}

/*
 * Input rows per pass over a group: with dotprod each weight register loaded feeds two
 * rows' sdot (4 rows spilled registers and had as many instructions per product);
 * without, the pair sums of one row take 8 registers and a second row spilled
 * (objdump: 273 instructions per 512 products at 2 rows, 123 per 256 at 1)
 */
#ifdef KVP_NEON_DOTPROD
#define RB 2
#else
#define RB 1
#endif

/*
 * The 16 sub-block dots of weight group @wq against the groups @aq[r] of @nr (1 or RB)
 * input rows: lane j of d[r][v] is sub-block 4v + j's
 */
static inline __attribute__((always_inline)) void
dot_rows(int32x4_t d[RB][4], const int8_t *restrict wq, const int8_t *const aq[RB], const int nr)
{
#ifdef KVP_NEON_DOTPROD
#pragma GCC unroll 4
	for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
		for (int v = 0; v < 4; v++)
			d[r][v] = vdupq_n_s32(0);
#pragma GCC unroll 4
	for (int c = 0; c < 4; c++) {
		int8x16_t w[4];

#pragma GCC unroll 4
		for (int v = 0; v < 4; v++)
			w[v] = vld1q_s8(wq + 64 * c + 16 * v);
#pragma GCC unroll 4
		for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
			for (int v = 0; v < 4; v++)
				d[r][v] = vdotq_s32(d[r][v], w[v],
						    vld1q_s8(aq[r] + 64 * c + 16 * v));
	}
#else
	/* per register, the low and the high 8 bytes' pair sums, two chunks per sadalp */
	int32x4_t lo[RB][4], hi[RB][4];

#pragma GCC unroll 4
	for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
		for (int v = 0; v < 4; v++)
			lo[r][v] = hi[r][v] = vdupq_n_s32(0);
#pragma GCC unroll 2
	for (int c = 0; c < 4; c += 2) {
#pragma GCC unroll 4
		for (int v = 0; v < 4; v++) {
			int8x16_t w0 = vld1q_s8(wq + 64 * c + 16 * v);
			int8x16_t w1 = vld1q_s8(wq + 64 * (c + 1) + 16 * v);

#pragma GCC unroll 4
			for (int r = 0; r < nr; r++) {
				int8x16_t a0 = vld1q_s8(aq[r] + 64 * c + 16 * v);
				int8x16_t a1 = vld1q_s8(aq[r] + 64 * (c + 1) + 16 * v);
				int16x8_t pl = vmull_s8(vget_low_s8(w0), vget_low_s8(a0));
				int16x8_t ph = vmull_high_s8(w0, a0);

				pl = vmlal_s8(pl, vget_low_s8(w1), vget_low_s8(a1));
				ph = vmlal_high_s8(ph, w1, a1);
				lo[r][v] = vpadalq_s16(lo[r][v], pl);
				hi[r][v] = vpadalq_s16(hi[r][v], ph);
			}
		}
	}
	/* lanes (0+1, 2+3) of lo are words 0 and 1, of hi words 2 and 3 */
#pragma GCC unroll 4
	for (int r = 0; r < nr; r++)
#pragma GCC unroll 4
		for (int v = 0; v < 4; v++)
			d[r][v] = vpaddq_s32(lo[r][v], hi[r][v]);
#endif
}

/*
 * @nr input rows from @r0 against the @sn unpacked groups @wg of output @o (groups
 * @s0 on of the row): per group and row, the sub-block dots times dw d, plus c s, in two
 * accumulators; the row's sum added to its output (set by the first slice).  The same
 * operations for a row whatever @nr, so a batch gives each row's bits.
 */
static inline __attribute__((always_inline)) void
rows_block(float *restrict out, size_t ldo, const struct wgrp *restrict wg, size_t sn, size_t s0,
	   const uint8_t *restrict x, size_t x_row_bytes, size_t r0, const int nr, size_t o)
{
	const struct kvp_act_q8 *a[RB];
	float32x4_t acc[RB][2];

#pragma GCC unroll 4
	for (int r = 0; r < RB; r++) {
		a[r] = (const struct kvp_act_q8 *)(x + (r0 + (r < nr ? r : 0)) * x_row_bytes) + s0;
		acc[r][0] = acc[r][1] = vdupq_n_f32(0);
	}
	for (size_t g = 0; g < sn; g++) {
		const int8_t *aq[RB];
		int32x4_t d[RB][4];

#pragma GCC unroll 4
		for (int r = 0; r < RB; r++)
			aq[r] = a[r][g].q;
		dot_rows(d, wg[g].q, aq, nr);
#pragma GCC unroll 4
		for (int r = 0; r < nr; r++) {
#pragma GCC unroll 4
			for (int i = 0; i < 4; i++) {
				float32x4_t sd = vmulq_f32(vld1q_f32(wg[g].dw + 4 * i),
							   vld1q_f32(a[r][g].d + 4 * i));

				acc[r][i / 2] = vfmaq_f32(acc[r][i / 2], vcvtq_f32_s32(d[r][i]),
							  sd);
				acc[r][i / 2] = vfmaq_f32(acc[r][i / 2], vld1q_f32(wg[g].c + 4 * i),
							  vld1q_f32(a[r][g].s + 4 * i));
			}
		}
	}
#pragma GCC unroll 4
	for (int r = 0; r < nr; r++) {
		float v = vaddvq_f32(vaddq_f32(acc[r][0], acc[r][1]));
		float *po = out + (r0 + r) * ldo + o;

		*po = s0 ? *po + v : v;
	}
}

/* groups unpacked at a time (6 KiB: in L1 while every input row reads them) */
#define SLICE 16

static inline __attribute__((always_inline)) void
matmul_int(float *restrict out, size_t ldo, const void *restrict w, size_t w_row_bytes,
	   const void *restrict x, size_t x_row_bytes, size_t rows, size_t k, size_t o0, size_t o1,
	   const uint32_t type)
{
	size_t ng = (k + KVP_QG - 1) / KVP_QG;
	struct wgrp wg[SLICE];

	for (size_t o = o0; o < o1; o++) {
		const uint8_t *wr = (const uint8_t *)w + o * w_row_bytes;

		for (size_t s0 = 0; s0 < ng; s0 += SLICE) {
			size_t sn = ng - s0 < SLICE ? ng - s0 : SLICE, r = 0;

			for (size_t g = 0; g < sn; g++)
				unpack(wr, type, k, s0 + g, &wg[g]);
			for (; r + RB <= rows; r += RB)
				rows_block(out, ldo, wg, sn, s0, x, x_row_bytes, r, RB, o);
			for (; r < rows; r++)
				rows_block(out, ldo, wg, sn, s0, x, x_row_bytes, r, 1, o);
		}
	}
}

KVP_MATMUL_INT_ALL

KVP_REF_ACT(f32, KVP_ACT_F32)
KVP_REF_ACT(bf16, KVP_ACT_BF16)
KVP_REF_ACT(q8, KVP_ACT_Q8)

KVP_REF_DEQUANT_INTEGER

#ifdef KVP_NEON_DOTPROD
KVP_KERNEL_TABLE(neondot, KVP_ISA_NEONDOT);
#else
KVP_KERNEL_TABLE(neon, KVP_ISA_NEON);
#endif
