/* SPDX-License-Identifier: MIT */
/*
 * kvq.c - the reference of the integer K/V types (kvq.h): plain loops, written for
 * clarity; the tables' versions (kvq.inc) must give the same bytes and floats.
 */
#include "compute/kernels/kvq.h"

#include <math.h>
#include <string.h>

#include "compute/kernels/quant.h"

uint16_t kvp_kvq_scale(float amax)
{
	float s = amax / 127.0f;

	/* a NaN or an infinity would poison the group: clamp to f16's largest finite value */
	if (!(s <= 65504.0f))
		s = 65504.0f;
	return kvp_f32_to_f16(s);
}

uint8_t kvp_kvq_code8(float amax)
{
	float s = amax / 127.0f;
	uint32_t u, c;

	if (!(s <= 240.0f))
		return 255;
	if (s <= 1.0f / 16777216.0f)
		return 0;
	memcpy(&u, &s, 4);
	/* exponent rebased to 2^-24, the top 3 mantissa bits, rounded up */
	c = ((u >> 23) - 127u + 24u) << 3 | (u >> 20 & 7u);
	return (uint8_t)(c + ((u & 0xfffffu) != 0));
}

/* 1 / the scale, or 0 for a group of zeros */
static float inv_of(uint8_t code)
{
	return 1.0f / kvp_int8_scale(code);
}

static int8_t q8(float x, float inv)
{
	float r = nearbyintf(x * inv);

	return (int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
}

void kvp_kvq_ref_row8(int8_t *restrict q, uint8_t *restrict code, const float *restrict x,
		      uint32_t hd)
{
	float amax = 0, inv;

	for (uint32_t d = 0; d < hd; d++)
		amax = fabsf(x[d]) > amax ? fabsf(x[d]) : amax;
	*code = kvp_kvq_code8(amax);
	inv = inv_of(*code);
	for (uint32_t d = 0; d < hd; d++)
		q[d] = q8(x[d], inv);
}

void kvp_kvq_ref_chan8(int8_t *restrict q, uint8_t *restrict code, const float *restrict k,
		       uint32_t rows, uint32_t hd)
{
	for (uint32_t d = 0; d < hd; d++) {
		float amax = 0, inv;

		for (uint32_t t = 0; t < rows; t++)
			amax = fabsf(k[(size_t)t * hd + d]) > amax ? fabsf(k[(size_t)t * hd + d]) :
								     amax;
		code[d] = kvp_kvq_code8(amax);
		inv = inv_of(code[d]);
		for (uint32_t t = 0; t < rows; t++)
			q[kvp_int8_k_index(rows, t, d)] = q8(k[(size_t)t * hd + d], inv);
	}
}

void kvp_kvq_ref_load_row8(float *restrict dst, const int8_t *restrict q,
			   const uint8_t *restrict code, uint32_t rows, uint32_t hd)
{
	for (uint32_t t = 0; t < rows; t++) {
		float s = kvp_int8_scale(code[t]);

		for (uint32_t d = 0; d < hd; d++)
			dst[(size_t)t * hd + d] = (float)q[(size_t)t * hd + d] * s;
	}
}

void kvp_kvq_ref_load_chan8(float *restrict dst, const int8_t *restrict q,
			    const uint8_t *restrict code, uint32_t rows, uint32_t hd)
{
	for (uint32_t t = 0; t < rows; t++)
		for (uint32_t d = 0; d < hd; d++)
			dst[(size_t)t * hd + d] = (float)q[kvp_int8_k_index(rows, t, d)] *
						  kvp_int8_scale(code[d]);
}
