/* SPDX-License-Identifier: MIT */
/*
 * attn.c - paged causal attention over pool blocks.
 *
 * Loop order: kv head, then block, then query row, then the query heads sharing that
 * kv head.  Each block's K and V run (block_tokens x head_dim, contiguous by the pool
 * layout) is read once per call while it is hot in cache, whatever the number of
 * queries; f16/bf16 runs are converted once into scratch.  Softmax is computed online:
 * per (query, head) a running max m and mass l, with the partial output rescaled by
 * exp(m_old - m_new) when a block raises the max.  Runs on the caller's thread.
 *
 * The per-(query, head, block) step is specialised for head_dim 64 and 128 (the Llama
 * family's): the query and the partial output stay in vector registers for the whole
 * block and each score's horizontal sum is a 4-step shuffle tree, where the generic
 * path calls kvp_dot()/kvp_axpy() per key and keeps the output in memory (measured on
 * batch-8 decode of the demo model: attention went from ~26% of a step to ~9%).
 */
#include "compute/attn.h"

#include <math.h>
#include <string.h>

#include "compute/kernels.h"

/* 16 floats (one AVX-512 register with -march=native); unaligned loads */
typedef float v16 __attribute__((vector_size(64), aligned(4)));
typedef int32_t v16i __attribute__((vector_size(64)));

/* Sum of the 16 lanes by halving: 4 shuffles and 4 adds (not 15 dependent adds). */
static inline float hsum16(v16 v)
{
	v = v + __builtin_shuffle(v, (v16i){ 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7 });
	v = v + __builtin_shuffle(v, (v16i){ 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11 });
	v = v + __builtin_shuffle(v, (v16i){ 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13 });
	v = v + __builtin_shuffle(v, (v16i){ 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14 });
	return v[0];
}

/*
 * One query head against keys/values 0 .. lim-1 of one block, online softmax:
 * qv (HD), K and V (lim, HD) row-major, o (HD) the running unnormalised output,
 * m[0] the running max, m[1] the running mass; sbuf holds lim scores.
 */
#define HEAD_BLOCK(HD)								\
static void head_block_##HD(float *restrict o, float *restrict m,		\
			    const float *restrict qv, const float *restrict K,	\
			    const float *restrict V, uint32_t lim, float scale,	\
			    float *restrict sbuf)				\
{										\
	v16 q[HD / 16], acc[HD / 16];						\
	float bmax = -INFINITY, c = 1.0f, l;					\
										\
	_Pragma("GCC unroll 8")							\
	for (int j = 0; j < HD / 16; j++)					\
		q[j] = *(const v16 *)(qv + 16 * j);				\
	for (uint32_t t = 0; t < lim; t++) {					\
		const float *k = K + (size_t)t * HD;				\
		v16 a = q[0] * *(const v16 *)k;					\
										\
		_Pragma("GCC unroll 8")						\
		for (int j = 1; j < HD / 16; j++)				\
			a += q[j] * *(const v16 *)(k + 16 * j);			\
		sbuf[t] = hsum16(a) * scale;					\
		bmax = sbuf[t] > bmax ? sbuf[t] : bmax;				\
	}									\
	if (bmax > m[0]) {							\
		c = expf(m[0] - bmax);	/* 0 on the first block */		\
		m[0] = bmax;							\
	}									\
	/* the exps first: a call clobbers every vector register, so none in the FMA loop */ \
	l = m[1] * c;								\
	for (uint32_t t = 0; t < lim; t++) {					\
		sbuf[t] = expf(sbuf[t] - m[0]);					\
		l += sbuf[t];							\
	}									\
	_Pragma("GCC unroll 8")							\
	for (int j = 0; j < HD / 16; j++)					\
		acc[j] = *(const v16 *)(o + 16 * j) * c;			\
	for (uint32_t t = 0; t < lim; t++) {					\
		const float *v = V + (size_t)t * HD;				\
										\
		_Pragma("GCC unroll 8")						\
		for (int j = 0; j < HD / 16; j++)				\
			acc[j] += sbuf[t] * *(const v16 *)(v + 16 * j);	\
	}									\
	_Pragma("GCC unroll 8")							\
	for (int j = 0; j < HD / 16; j++)					\
		*(v16 *)(o + 16 * j) = acc[j];					\
	m[1] = l;								\
}
HEAD_BLOCK(64)
HEAD_BLOCK(128)

/* The same for any head_dim, through the generic kernels. */
static void head_block_any(float *restrict o, float *restrict m, const float *restrict qv,
			   const float *restrict K, const float *restrict V, uint32_t lim,
			   float scale, float *restrict sbuf, uint32_t hd)
{
	float bmax = -INFINITY;

	for (uint32_t t = 0; t < lim; t++) {
		sbuf[t] = kvp_dot(qv, K + (size_t)t * hd, hd) * scale;
		bmax = sbuf[t] > bmax ? sbuf[t] : bmax;
	}
	if (bmax > m[0]) {
		float c = expf(m[0] - bmax);	/* 0 on the first block */

		for (uint32_t d = 0; d < hd; d++)
			o[d] *= c;
		m[1] *= c;
		m[0] = bmax;
	}
	for (uint32_t t = 0; t < lim; t++) {
		float p = expf(sbuf[t] - m[0]);

		m[1] += p;
		kvp_axpy(o, p, V + (size_t)t * hd, hd);
	}
}

void kvp_attn(float *restrict out, const float *restrict q, const struct kvp_kv_view *kv,
	      const uint32_t *table, uint32_t layer, uint32_t pos0, uint32_t n,
	      uint32_t n_heads, uint32_t kh0, uint32_t kh1, struct kvp_attn_scratch *s)
{
	const struct kvp_geom *g = &kv->geom;
	uint32_t bt = g->shape.block_tokens, hd = g->shape.head_dim;
	uint32_t grp = n_heads / g->shape.n_kv_heads, dtype = g->shape.dtype;
	uint32_t last = pos0 + n - 1, qd = n_heads * hd;
	float scale = 1.0f / sqrtf((float)hd);

	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t h = kh0 * grp; h < kh1 * grp; h++) {
			s->ml[2 * (i * n_heads + h)] = -INFINITY;
			s->ml[2 * (i * n_heads + h) + 1] = 0.0f;
		}
		memset(out + (size_t)i * qd + (size_t)kh0 * grp * hd, 0,
		       (size_t)(kh1 - kh0) * grp * hd * sizeof(float));
	}

	for (uint32_t kh = kh0; kh < kh1; kh++) {
		for (uint32_t b = 0; b <= last / bt; b++) {
			uint32_t t0 = b * bt, tn = last + 1 - t0 < bt ? last + 1 - t0 : bt;
			const uint8_t *blk = kvp_kv_block(kv, table[b]);
			const float *K, *V;

			if (dtype == KVP_DTYPE_F32) {
				K = (const float *)(blk + kvp_geom_run_offset(g, layer, 0, kh));
				V = (const float *)(blk + kvp_geom_run_offset(g, layer, 1, kh));
			} else {
				kvp_kv_load(s->kbuf, blk + kvp_geom_run_offset(g, layer, 0, kh), dtype,
					    (size_t)tn * hd);
				kvp_kv_load(s->vbuf, blk + kvp_geom_run_offset(g, layer, 1, kh), dtype,
					    (size_t)tn * hd);
				K = s->kbuf;
				V = s->vbuf;
			}
			/* rows before t0 cannot see this block */
			for (uint32_t i = t0 > pos0 ? t0 - pos0 : 0; i < n; i++) {
				uint32_t lim = pos0 + i - t0 + 1 < tn ? pos0 + i - t0 + 1 : tn;

				for (uint32_t h = kh * grp; h < (kh + 1) * grp; h++) {
					const float *qv = q + (size_t)i * qd + (size_t)h * hd;
					float *o = out + (size_t)i * qd + (size_t)h * hd;
					float *m = &s->ml[2 * ((size_t)i * n_heads + h)];

					if (hd == 64)
						head_block_64(o, m, qv, K, V, lim, scale, s->sbuf);
					else if (hd == 128)
						head_block_128(o, m, qv, K, V, lim, scale, s->sbuf);
					else
						head_block_any(o, m, qv, K, V, lim, scale, s->sbuf, hd);
				}
			}
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		for (uint32_t h = kh0 * grp; h < kh1 * grp; h++) {
			float inv = 1.0f / s->ml[2 * (i * n_heads + h) + 1];
			float *o = out + (size_t)i * qd + (size_t)h * hd;

			for (uint32_t d = 0; d < hd; d++)
				o[d] *= inv;
		}
	}
}
