/* SPDX-License-Identifier: MIT */
/*
 * kv4.c - the int4 K/V type's residual window (kv4.h).
 *
 * A block b of a sequence is sealed - its K runs quantized per channel, its V runs per
 * token, into the segment - by the call whose last position reaches
 * (b + 1) * block_tokens + window; until then its rows are in the stage in f32.  A
 * query at position p reads b quantized iff (b + 1) * block_tokens + window <= p + 1:
 * for the last query of a call that is "sealed by the end of the call", and every
 * block sealed earlier or sealed now still has its slot (dropped only when the call
 * ends), so the rule depends on positions only, not on how a prompt was chunked.
 */
#include "compute/kv4.h"

#include <math.h>
#include <string.h>

#include "compute/attn.h"
#include "compute/kernels/kernels.h"

void kvp_kv4_store(const struct kvp_kv_view *kv, const uint32_t *table, uint32_t l, uint32_t pos,
		   const float *k, const float *v)
{
	const struct kvp_geom *g = &kv->geom;
	uint32_t bt = g->shape.block_tokens, hd = g->shape.head_dim;
	float *slot = kvp_stage_get(kv->stage, table[pos / bt]);

	for (uint32_t h = 0; h < g->shape.n_kv_heads; h++) {
		memcpy(kvp_stage_row(g, slot, l, h, pos % bt), k + (size_t)h * hd,
		       hd * sizeof(float));
		memcpy(kvp_stage_vrow(g, slot, l, h, pos % bt), v + (size_t)h * hd,
		       hd * sizeof(float));
	}
}

/* The blocks [*b0, *b1) a call writing [pos0, pos0 + n) takes out of the window. */
static void sealed_by(const struct kvp_kv_view *kv, uint32_t pos0, uint32_t n, uint32_t *b0,
		      uint32_t *b1)
{
	uint32_t bt = kv->geom.shape.block_tokens, w = kv->stage->window;
	uint64_t end = (uint64_t)pos0 + n;

	/* (b + 1) * bt + w in (pos0, end] */
	*b0 = pos0 >= w ? (pos0 - w) / bt : 0;
	*b1 = end >= w ? (uint32_t)((end - w) / bt) : 0;
}

void kvp_kv4_seal(const struct kvp_kernels *k, const struct kvp_kv_view *kv, const uint32_t *table,
		  uint32_t pos0, uint32_t n, uint32_t l)
{
	const struct kvp_geom *g = &kv->geom;
	uint32_t bt = g->shape.block_tokens, hd = g->shape.head_dim, b0, b1;

	sealed_by(kv, pos0, n, &b0, &b1);
	for (uint32_t b = b0; b < b1; b++) {
		uint32_t id = table[b], si = kv->stage->slot_of[id];
		uint8_t *blk = kvp_kv_block(kv, id);
		float *slot;

		/* no slot: sealed already (a published block: a prefix hit's) */
		if (si == KVP_STAGE_NONE || kv->stage->sealed[si] > l)
			continue;
		slot = kvp_stage_get(kv->stage, id);
		for (uint32_t h = 0; h < g->shape.n_kv_heads; h++) {
			k->kvq4_k(blk + kvp_geom_run_offset(g, l, 0, h),
				  kvp_stage_row(g, slot, l, h, 0), bt, hd);
			k->kvq4_v(blk + kvp_geom_run_offset(g, l, 1, h),
				  kvp_stage_vrow(g, slot, l, h, 0), bt, hd);
		}
		kv->stage->sealed[si] = l + 1;
	}
}

void kvp_kv4_release(const struct kvp_kv_view *kv, const uint32_t *table, uint32_t pos0, uint32_t n)
{
	uint32_t b0, b1;

	sealed_by(kv, pos0, n, &b0, &b1);
	for (uint32_t b = b0; b < b1; b++) {
		uint32_t si = kv->stage->slot_of[table[b]];

		if (si != KVP_STAGE_NONE && kv->stage->sealed[si] == kv->geom.shape.n_layers)
			kvp_stage_drop(kv->stage, table[b]);
	}
}

void kvp_attn4(float *restrict out, const float *restrict q, const struct kvp_kv_view *kv,
	       const uint32_t *table, uint32_t layer, uint32_t pos0, uint32_t n, uint32_t n_heads,
	       uint32_t kh0, uint32_t kh1, const struct kvp_kernels *k, struct kvp_attn_scratch *s)
{
	const struct kvp_geom *g = &kv->geom;
	uint32_t bt = g->shape.block_tokens, hd = g->shape.head_dim, w = kv->stage->window;
	uint32_t grp = n_heads / g->shape.n_kv_heads;
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
			float *slot = kvp_stage_get(kv->stage, table[b]);
			const float *Kq = NULL, *Vq = NULL, *Kf = NULL, *Vf = NULL;
			/* queries from this position on read the block quantized */
			uint64_t qpos = (uint64_t)(b + 1) * bt + w - 1;

			/* the next block's runs (as kvp_attn(): a block stride away) */
			if (b < last / bt)
				kvp_attn_prefetch(kv, table[b + 1], layer, kh);
			if (slot) {
				Kf = kvp_stage_row(g, slot, layer, kh, 0);
				Vf = kvp_stage_vrow(g, slot, layer, kh, 0);
			}
			/* rows before t0 cannot see this block */
			for (uint32_t i = t0 > pos0 ? t0 - pos0 : 0; i < n; i++) {
				uint32_t lim = pos0 + i - t0 + 1 < tn ? pos0 + i - t0 + 1 : tn;
				const float *Ki = Kf, *Vi = Vf;

				if (!slot || pos0 + i >= qpos) {
					if (!Kq) {
						k->kvq4_load_k(s->kbuf,
							       blk + kvp_geom_run_offset(g, layer,
											 0, kh),
							       tn, bt, hd);
						k->kvq4_load_v(s->vbuf,
							       blk + kvp_geom_run_offset(g, layer,
											 1, kh),
							       tn, bt, hd);
						Kq = s->kbuf;
						Vq = s->vbuf;
					}
					Ki = Kq;
					Vi = Vq;
				}
				for (uint32_t h = kh * grp; h < (kh + 1) * grp; h++) {
					const float *qv = q + (size_t)i * qd + (size_t)h * hd;
					float *o = out + (size_t)i * qd + (size_t)h * hd;
					float *m = &s->ml[2 * ((size_t)i * n_heads + h)];

					k->attn_block(o, m, qv, Ki, Vi, lim, scale, s->sbuf, hd);
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
