/* SPDX-License-Identifier: MIT */
/*
 * scalar.c - the portable kernel table: plain C, one element at a time, built for the
 * baseline x86-64 (or any) target.
 *
 * It is the oracle the vector tables are tested against and the path a CPU without
 * AVX2 runs, so it computes exactly what the vector kernels compute - the same integer
 * dot products over the same quantized activations, the same corrections - only in
 * the plainest order.  Integer types go through kvp_qtype_codes() (quant.c), the one
 * place the block layouts are decoded for it.
 */
#include "compute/kernels/kernels.h"

#include <math.h>
#include <string.h>

/* the K-quants take struct kvp_act_q8k, as the 256-bit tables do (their oracle) */
#define KVP_ACT_KQUANT KVP_ACT_Q8K
#include "compute/kernels/table.inc"

/* the integer K/V kernels (kvq.inc): plain loops here */
#define KVQ_H2F(h) kvp_f16_to_f32(h)
#define KVQ_SIMD
#define KVQ_SIMD_MAX
#include "compute/kernels/kvq.inc"
#include "compute/kernels/kvq4.inc"

/* Float weights (f32, f16, bf16) against f32 or bf16 activations, summed in order. */
static float dot_float(const void *w, uint32_t wtype, const void *x, size_t k)
{
	float s = 0;

	for (size_t i = 0; i < k; i++) {
		float wi, xi;

		if (wtype == KVP_GGML_F32) {
			wi = ((const float *)w)[i];
			xi = ((const float *)x)[i];
		} else if (wtype == KVP_GGML_F16) {
			wi = kvp_f16_to_f32(((const uint16_t *)w)[i]);
			xi = ((const float *)x)[i];
		} else {
			wi = kvp_bf16_to_f32(((const uint16_t *)w)[i]);
			xi = kvp_bf16_to_f32(((const uint16_t *)x)[i]);
		}
		s += wi * xi;
	}
	return s;
}

/*
 * One weight row of an integer type against one KVP_ACT_Q8 activation row, group by
 * group of 256: per sub-block i of the group its integer dot product, then
 *   dw_i * d_i * dot_i + c_i * s_i
 * with dw_i the weight scale of the sub-block and c_i its offset/min correction
 * (quant.h, struct kvp_act_q8).
 */
static float dot_int(const uint8_t *w, uint32_t wtype, const void *x, size_t k)
{
	const struct kvp_qtype *t = kvp_qtype(wtype);
	float s = 0;

	for (size_t g = 0; g < (k + KVP_QG - 1) / KVP_QG; g++) {
		const struct kvp_act_q8 *a = (const struct kvp_act_q8 *)x + g;
		uint8_t q[KVP_QG] = { 0 };
		float dw[16] = { 0 }, c[16] = { 0 };

		/* the group's weight codes in element order, and per sub-block dw and c */
		for (size_t b = 0; b < KVP_QG / t->block && g * KVP_QG + b * t->block < k; b++) {
			int32_t sc[16], mn[16], off;
			float d, dmin;

			kvp_qtype_codes(w, wtype, q + b * t->block, sc, mn, &d, &dmin, &off);
			w += t->block_bytes;
			if (t->block == KVP_QK) { /* legacy: d (q - off) + m, two sub-blocks */
				dw[2 * b] = dw[2 * b + 1] = d;
				c[2 * b] = c[2 * b + 1] = dmin - (float)off * d;
				continue;
			}
			for (int i = 0; i < 16; i++) { /* d sc (q - off) - dmin mn */
				dw[i] = d * (float)sc[i];
				c[i] = -(dw[i] * (float)off + dmin * (float)mn[i]);
			}
		}
		for (int i = 0; i < 16; i++) {
			int32_t dot = 0;

			for (int e = 16 * i; e < 16 * i + 16; e++)
				dot += q[e] * a->q[kvp_q8_pos(e)];
			s += dw[i] * a->d[i] * (float)dot + c[i] * a->s[i];
		}
	}
	return s;
}

/*
 * One K-quant weight row against one struct kvp_act_q8k row: per super-block the
 * integer lanes L and M of quant.h (struct kvp_act_q8k) in 64 bits, then per lane one
 * fused step each (fmaf: the vector kernels' FMA), the lanes summed per PANEL_MAX-group
 * slice as ymm_int.inc's hsum8() sums them.  So the 256-bit tables give these bits.
 */
static float dot_kq(const uint8_t *w, uint32_t wtype, const void *x, size_t k)
{
	const struct kvp_qtype *t = kvp_qtype(wtype);
	size_t ng = k / KVP_QK_K;
	float out = 0;

	for (size_t s0 = 0; s0 < ng; s0 += 16) {
		float acc[8] = { 0 };

		for (size_t g = s0; g < ng && g < s0 + 16; g++) {
			const struct kvp_act_q8k *a = (const struct kvp_act_q8k *)x + g;
			uint8_t q[KVP_QK_K];
			int32_t sc[16], mn[16], off;
			int64_t qd[16];
			float d, dmin;

			kvp_qtype_codes(w + g * t->block_bytes, wtype, q, sc, mn, &d, &dmin, &off);
			for (int j = 0; j < 16; j++) {
				qd[j] = 0;
				for (int e = 16 * j; e < 16 * j + 16; e++)
					qd[j] += q[e] * a->q[kvp_q8k_pos(e)];
			}
			for (int l = 0; l < 8; l++) {
				int i = (int)kvp_q8k_sub((unsigned int)l);
				int64_t L = sc[i] * qd[i] + sc[8 + i] * qd[8 + i] -
					    off * ((int64_t)sc[2 * l] * a->s[2 * l] +
						   (int64_t)sc[2 * l + 1] * a->s[2 * l + 1]);
				int64_t M = (int64_t)mn[2 * l] * a->s[2 * l] +
					    (int64_t)mn[2 * l + 1] * a->s[2 * l + 1];

				acc[l] = fmaf((float)L, d * a->d, acc[l]);
				if (wtype != KVP_GGML_Q3_K && wtype != KVP_GGML_Q6_K) /* mins */
					acc[l] = fmaf((float)M, -dmin * a->d, acc[l]);
			}
		}
		float v = ((acc[0] + acc[4]) + (acc[2] + acc[6])) +
			  ((acc[1] + acc[5]) + (acc[3] + acc[7]));

		out = s0 ? out + v : v;
	}
	return out;
}

#define MATMUL(name, type, dotfn) \
	static void name(float *restrict out, size_t ldo, const void *restrict w, \
			 size_t w_row_bytes, const void *restrict x, size_t x_row_bytes, \
			 size_t rows, size_t k, size_t o0, size_t o1) \
	{ \
		for (size_t o = o0; o < o1; o++) \
			for (size_t r = 0; r < rows; r++) \
				out[r * ldo + o] = dotfn((const uint8_t *)w + o * w_row_bytes, \
							 type, \
							 (const uint8_t *)x + r * x_row_bytes, k); \
	}

MATMUL(matmul_f32, KVP_GGML_F32, dot_float)
MATMUL(matmul_f16, KVP_GGML_F16, dot_float)
MATMUL(matmul_bf16, KVP_GGML_BF16, dot_float)
MATMUL(matmul_q8_0, KVP_GGML_Q8_0, dot_int)
MATMUL(matmul_q4_0, KVP_GGML_Q4_0, dot_int)
MATMUL(matmul_q4_1, KVP_GGML_Q4_1, dot_int)
MATMUL(matmul_q5_0, KVP_GGML_Q5_0, dot_int)
MATMUL(matmul_q5_1, KVP_GGML_Q5_1, dot_int)
MATMUL(matmul_q2_k, KVP_GGML_Q2_K, dot_kq)
MATMUL(matmul_q3_k, KVP_GGML_Q3_K, dot_kq)
MATMUL(matmul_q4_k, KVP_GGML_Q4_K, dot_kq)
MATMUL(matmul_q5_k, KVP_GGML_Q5_K, dot_kq)
MATMUL(matmul_q6_k, KVP_GGML_Q6_K, dot_kq)

KVP_REF_DEQUANT_INTEGER
KVP_REF_DEQUANT(f16, KVP_GGML_F16)
KVP_REF_DEQUANT(bf16, KVP_GGML_BF16)

KVP_REF_ACT(f32, KVP_ACT_F32)
KVP_REF_ACT(bf16, KVP_ACT_BF16)
KVP_REF_ACT(q8, KVP_ACT_Q8)

static void kv_store_f32(void *restrict dst, const float *restrict src, size_t n)
{
	memcpy(dst, src, n * 4);
}

static void kv_store_f16(void *restrict dst, const float *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((uint16_t *)dst)[i] = kvp_f32_to_f16(src[i]);
}

static void kv_store_bf16(void *restrict dst, const float *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		((uint16_t *)dst)[i] = kvp_f32_to_bf16(src[i]);
}

static void kv_load_f32(float *restrict dst, const void *restrict src, size_t n)
{
	memcpy(dst, src, n * 4);
}

static void kv_load_f16(float *restrict dst, const void *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = kvp_f16_to_f32(((const uint16_t *)src)[i]);
}

static void kv_load_bf16(float *restrict dst, const void *restrict src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = kvp_bf16_to_f32(((const uint16_t *)src)[i]);
}

static void rmsnorm(float *out, const float *x, const float *restrict w, size_t n, float eps)
{
	float ss = 0;

	for (size_t i = 0; i < n; i++)
		ss += x[i] * x[i];
	float scale = 1.0f / sqrtf(ss / (float)n + eps);

	for (size_t i = 0; i < n; i++)
		out[i] = x[i] * scale * w[i];
}

static void swiglu(float *restrict gate, const float *restrict up, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		float g = gate[i];

		gate[i] = g / (1.0f + expf(-g)) * up[i];
	}
}

static void attn_block(float *restrict o, float *restrict m, const float *restrict q,
		       const float *restrict K, const float *restrict V, uint32_t lim, float scale,
		       float *restrict sbuf, uint32_t hd)
{
	float bmax = -INFINITY;

	for (uint32_t t = 0; t < lim; t++) {
		float s = 0;

		for (uint32_t d = 0; d < hd; d++)
			s += q[d] * K[(size_t)t * hd + d];
		sbuf[t] = s * scale;
		bmax = sbuf[t] > bmax ? sbuf[t] : bmax;
	}
	if (bmax > m[0]) {
		float c = expf(m[0] - bmax); /* 0 on the first block */

		for (uint32_t d = 0; d < hd; d++)
			o[d] *= c;
		m[1] *= c;
		m[0] = bmax;
	}
	for (uint32_t t = 0; t < lim; t++) {
		float p = expf(sbuf[t] - m[0]);

		m[1] += p;
		for (uint32_t d = 0; d < hd; d++)
			o[d] += p * V[(size_t)t * hd + d];
	}
}

#include "compute/kernels/kvqattn.inc"

KVP_KERNEL_TABLE(scalar, KVP_ISA_SCALAR);
