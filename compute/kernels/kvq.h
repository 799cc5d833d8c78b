/* SPDX-License-Identifier: MIT */
/*
 * kvq.h - the integer K/V types' quantization (include/kvpool/layout.h defines the
 * runs): the portable reference every kernel table is tested against, bit for bit.
 *
 * int8 is symmetric: a group's scale is the one-byte code kvp_kvq_code8(amax), the
 * smallest kvp_int8_scale() at or above amax / 127; its elements are
 * q = clamp(nearbyint(x * (1 / scale)), -127, 127), so that q * scale is the nearest
 * value the group can hold; a group of zeros holds zeros.  V groups are rows (one token
 * of one kv head); K groups are channels over the block's tokens, quantized once the
 * block is full (shm/geom.h: the stage), stored in channel quads (kvp_int8_k_index()).
 */
#ifndef KVP_COMPUTE_KERNELS_KVQ_H
#define KVP_COMPUTE_KERNELS_KVQ_H

#include <stddef.h>
#include <stdint.h>

#include "kvpool/layout.h"

/* Largest head_dim the integer K/V kernels take (their per-channel scales on the stack). */
#define KVP_KVQ_HEAD_DIM_MAX 1024u

/* The f16 scale of a group whose largest magnitude is @amax (kvq.c: clamped to f16). */
uint16_t kvp_kvq_scale(float amax);

/*
 * kvp_kvq_code8() - the int8 scale code of a group whose largest magnitude is @amax:
 * the smallest kvp_int8_scale() >= amax / 127 (255 for a NaN, an infinity or more
 * than the largest; 0 for a group of zeros).  Integer math on the float's bits, so
 * every table gets the same byte.
 */
uint8_t kvp_kvq_code8(float amax);

/* kvp_kvq_ref_row8() - one V row of @hd values to int8 @q and its scale *@code. */
void kvp_kvq_ref_row8(int8_t *restrict q, uint8_t *restrict code, const float *restrict x,
		      uint32_t hd);

/*
 * kvp_kvq_ref_chan8() - a full block's K, @rows x @hd f32 at @k, to int8 @q (the run's
 * channel quads, @rows tokens) and @hd per-channel scale codes.
 */
void kvp_kvq_ref_chan8(int8_t *restrict q, uint8_t *restrict code, const float *restrict k,
		       uint32_t rows, uint32_t hd);

/* kvp_kvq_ref_load_row8() - @rows V rows back to f32: dst[t][d] = q[t][d] * scale(t). */
void kvp_kvq_ref_load_row8(float *restrict dst, const int8_t *restrict q,
			   const uint8_t *restrict code, uint32_t rows, uint32_t hd);

/*
 * kvp_kvq_ref_load_chan8() - a K run of @rows tokens back to f32 rows:
 * dst[t][d] = q[kvp_int8_k_index(rows, t, d)] * scale(d).
 */
void kvp_kvq_ref_load_chan8(float *restrict dst, const int8_t *restrict q,
			    const uint8_t *restrict code, uint32_t rows, uint32_t hd);

#endif /* KVP_COMPUTE_KERNELS_KVQ_H */
