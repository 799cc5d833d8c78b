/* SPDX-License-Identifier: MIT */
/*
 * kvq4.h - the int4 K/V type's quantization (include/kvpool/layout.h defines the runs):
 * the portable reference every kernel table is tested against, bit for bit, and the
 * two steps every table shares (a run's scales from its groups' ranges, and back).
 *
 * Asymmetric, KIVI's grouping: a K run has a group per channel over the block's tokens,
 * a V run a group per token.  A group spanning [lo, hi] gets an offset lo' <= lo on the
 * grid of the run's f16 dmin (6-bit signed code m, lo' = dmin * m) and a step on the grid
 * of the run's f16 d (6-bit code s, step = d * s) with lo' + 15 * step >= hi, both
 * units rounded up so that every group's codes fit; an element is
 * q = clamp(nearbyint((x - lo') * (1 / step)), 0, 15) and reads back as
 * fmaf(q, step, lo') (fused, so every table and the reference round alike).  Every
 * element comes back within half its group's step; a constant group exactly when its
 * value is a multiple of dmin (then s = 0).  NaN elements read back as lo' + 15 * step
 * (and do not move the range); infinities are clamped to what the f16 units can span.
 */
#ifndef KVP_COMPUTE_KERNELS_KVQ4_H
#define KVP_COMPUTE_KERNELS_KVQ4_H

#include <stddef.h>
#include <stdint.h>

/* Largest head_dim and block_tokens the int4 kernels take (per-group arrays on the stack). */
#define KVP_KVQ4_GROUPS_MAX 1024u

/*
 * kvp_kvq4_params() - the scales of a run from its @groups groups' ranges
 * [@lo[g], @hi[g]]: writes d, dmin and the codes at @scales (the run's bytes from
 * KVP_INT4_SCALES_OFFSET on), and each group's offset and 1 / step (0 for a step of 0)
 * to @glo and @ginv for quantizing.
 */
void kvp_kvq4_params(uint8_t *restrict scales, const float *restrict lo, const float *restrict hi,
		     uint32_t groups, float *restrict glo, float *restrict ginv);

/* kvp_kvq4_unpack() - each group's step and offset, in f32, from a run's @scales. */
void kvp_kvq4_unpack(const uint8_t *restrict scales, uint32_t groups, float *restrict step,
		     float *restrict lo);

/* kvp_kvq4_ref_k() - a full block's K, @bt x @hd f32 at @k, into the K run at @run. */
void kvp_kvq4_ref_k(uint8_t *restrict run, const float *restrict k, uint32_t bt, uint32_t hd);

/* kvp_kvq4_ref_v() - a full block's V, @bt rows of @hd, into the V run at @run. */
void kvp_kvq4_ref_v(uint8_t *restrict run, const float *restrict v, uint32_t bt, uint32_t hd);

/* kvp_kvq4_ref_load_k() - the first @rows rows of a K run of @bt rows back to f32. */
void kvp_kvq4_ref_load_k(float *restrict dst, const uint8_t *restrict run, uint32_t rows,
			 uint32_t bt, uint32_t hd);

/* kvp_kvq4_ref_load_v() - the first @rows rows of a V run back to f32. */
void kvp_kvq4_ref_load_v(float *restrict dst, const uint8_t *restrict run, uint32_t rows,
			 uint32_t bt, uint32_t hd);

#endif /* KVP_COMPUTE_KERNELS_KVQ4_H */
