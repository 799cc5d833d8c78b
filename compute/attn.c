/* SPDX-License-Identifier: MIT */
/*
 * attn.c - paged causal attention over pool blocks.
 *
 * Loop order: kv head, then block, then query row, then the query heads sharing that
 * kv head.  Each block's K and V run (block_tokens x head_dim, contiguous by the pool
 * layout) is read once per call while it is hot in cache, whatever the number of
 * queries; f16/bf16 runs are converted once into scratch (a block at a time, in L1: no
 * dequantized history is ever built).  int8 keys are
 * quantized per channel over the block once it is full: a query reads the keys of its
 * own block from the stage, in f32 as they were written (shm/geom.h), and scores the
 * keys of earlier (full) blocks as stored, in int8 (the table's attn_block8, which takes
 * the query heads of the kv head together, so each key and each value is unpacked once
 * for all of them; V read as stored too), whatever the chunking of the calls (so a prompt prefilled in chunks gives what
 * one call gives).  Softmax is computed online:
 * per (query, head) a running max m and mass l, with the partial output rescaled by
 * exp(m_old - m_new) when a block raises the max.  Runs on the caller's thread.
 *
 * The per-(query, head, block) step is the kernel table's attn_block, specialised
 * there for head_dim 64 and 128: the query and the partial output stay in vector
 * registers for the whole block (docs/compute.md has the measurement).
 */
#include "compute/attn.h"

#include <math.h>
#include <string.h>

#include "compute/kernels/kernels.h"
#include "compute/kv4.h"

/* V of (@layer, @kh) of an int8 block, @tn rows, to f32 in the scratch (L1). */
static const float *load_v8(const struct kvp_kernels *k, struct kvp_attn_scratch *s,
			    const struct kvp_geom *g, const uint8_t *blk, uint32_t layer,
			    uint32_t kh, uint32_t tn)
{
	const uint8_t *run = blk + kvp_geom_run_offset(g, layer, 1, kh);
	size_t rows = (size_t)g->shape.block_tokens * g->shape.head_dim;

	k->kvq_load_row8(s->vbuf, (const int8_t *)run, run + rows, tn, g->shape.head_dim);
	return s->vbuf;
}

/*
 * One cache line at @p into L1.  Not __builtin_prefetch: GCC 12 at -O1 and above
 * deleted kvp_attn_prefetch()'s loops of it as dead code (no prefetcht0 in attn.o), so
 * the prefetch never ran; a volatile asm is not removed.
 */
static inline void prefetch_line(const void *p)
{
#if defined(__x86_64__) || defined(__i386__)
	__asm__ volatile("prefetcht0 %0" : : "m"(*(const char *)p));
#elif defined(__aarch64__)
	__asm__ volatile("prfm pldl1keep, %0" : : "Q"(*(const char *)p));
#else
	__builtin_prefetch(p);
#endif
}

/*
 * Ask for block @id's K and V runs of (@layer, @kh) ahead of their turn: consecutive
 * blocks of one head are a block stride apart (another page, where the hardware
 * prefetcher does not follow), so each run would otherwise start with a miss.
 */
void kvp_attn_prefetch(const struct kvp_kv_view *kv, uint32_t id, uint32_t layer, uint32_t kh)
{
	const struct kvp_geom *g = &kv->geom;
	const uint8_t *blk = kvp_kv_block(kv, id);

	for (uint32_t kvi = 0; kvi < 2; kvi++) {
		const uint8_t *run = blk + kvp_geom_run_offset(g, layer, kvi, kh);
		size_t n = kvi ? g->v_head_bytes : g->head_bytes;

		for (size_t o = 0; o < n; o += 64)
			prefetch_line(run + o);
	}
}

/* The staged f32 keys of block @id's (@layer, @kh): its rows so far (NULL: none staged). */
static const float *staged_k(const struct kvp_kv_view *kv, uint32_t id, uint32_t layer, uint32_t kh)
{
	float *slot = kv->stage ? kvp_stage_get(kv->stage, id) : NULL;

	return slot ? kvp_stage_row(&kv->geom, slot, layer, kh, 0) : NULL;
}

void kvp_attn(float *restrict out, const float *restrict q, const struct kvp_kv_view *kv,
	      const uint32_t *table, uint32_t layer, uint32_t pos0, uint32_t n, uint32_t n_heads,
	      uint32_t kh0, uint32_t kh1, const struct kvp_kernels *k, struct kvp_attn_scratch *s)
{
	const struct kvp_geom *g = &kv->geom;
	uint32_t bt = g->shape.block_tokens, hd = g->shape.head_dim;
	uint32_t grp = n_heads / g->shape.n_kv_heads, dtype = g->shape.dtype;
	uint32_t last = pos0 + n - 1, qd = n_heads * hd;
	float scale = 1.0f / sqrtf((float)hd);

	/* int4: its residual window decides, per query, where a block is read from */
	if (dtype == KVP_DTYPE_INT4) {
		kvp_attn4(out, q, kv, table, layer, pos0, n, n_heads, kh0, kh1, k, s);
		return;
	}
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
			const float *K = NULL, *V = NULL, *Kstage = NULL;
			const uint8_t *Krun = NULL, *Vrun = NULL;

			if (b < last / bt)
				kvp_attn_prefetch(kv, table[b + 1], layer, kh);

			if (dtype == KVP_DTYPE_F32) {
				K = (const float *)(blk + kvp_geom_run_offset(g, layer, 0, kh));
				V = (const float *)(blk + kvp_geom_run_offset(g, layer, 1, kh));
			} else if (dtype == KVP_DTYPE_INT8) {
				Krun = blk + kvp_geom_run_offset(g, layer, 0, kh);
				Vrun = blk + kvp_geom_run_offset(g, layer, 1, kh);
				/* queries in this block see its keys as written (f32, staged) and
				 * its V in f32 (attn_block): every block from pos0's on is written
				 * by this call, so staged; earlier ones have no such queries */
				if (b >= pos0 / bt) {
					Kstage = staged_k(kv, table[b], layer, kh);
					V = load_v8(k, s, g, blk, layer, kh, tn);
				}
			} else {
				k->kv_load[dtype](s->kbuf,
						  blk + kvp_geom_run_offset(g, layer, 0, kh),
						  (size_t)tn * hd);
				k->kv_load[dtype](s->vbuf,
						  blk + kvp_geom_run_offset(g, layer, 1, kh),
						  (size_t)tn * hd);
				K = s->kbuf;
				V = s->vbuf;
			}
			/* rows before t0 cannot see this block */
			for (uint32_t i = t0 > pos0 ? t0 - pos0 : 0; i < n; i++) {
				uint32_t lim = pos0 + i - t0 + 1 < tn ? pos0 + i - t0 + 1 : tn;
				const float *Ki = K;
				/* int8: a (full) block before the query's own is scored as stored */
				int own = dtype == KVP_DTYPE_INT8 && (pos0 + i) / bt == b;

				if (dtype == KVP_DTYPE_INT8 && !own) {
					/* the group's heads together: the keys read once */
					size_t h0 = (size_t)kh * grp;

					k->attn_block8(out + (size_t)i * qd + h0 * hd,
						       &s->ml[2 * ((size_t)i * n_heads + h0)],
						       q + (size_t)i * qd + h0 * hd, grp,
						       (const int8_t *)Krun, Krun + (size_t)bt * hd,
						       (const int8_t *)Vrun, Vrun + (size_t)bt * hd,
						       bt, scale, s->sbuf, hd);
					continue;
				}
				if (own)
					Ki = Kstage;
				for (uint32_t h = kh * grp; h < (kh + 1) * grp; h++) {
					const float *qv = q + (size_t)i * qd + (size_t)h * hd;
					float *o = out + (size_t)i * qd + (size_t)h * hd;
					float *m = &s->ml[2 * ((size_t)i * n_heads + h)];

					k->attn_block(o, m, qv, Ki, V, lim, scale, s->sbuf, hd);
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
