/* SPDX-License-Identifier: MIT */
/*
 * kvq4.c - the reference of the int4 K/V type (kvq4.h): plain loops, written for
 * clarity; the tables' versions (kvq4.inc) must give the same bytes and floats.  The
 * scales (kvp_kvq4_params(), kvp_kvq4_unpack()) are computed here for every table: a
 * few per group, off the hot path.
 */
#include "compute/kernels/kvq4.h"

#include <math.h>

#include "compute/kernels/quant.h"
#include "kvpool/layout.h"

/* a range end past this would overflow f16 units (65504 * 31, 65504 * 63 * 15) */
#define RANGE_MAX 2.0e6f

/* f16 of @x >= 0, rounded up (so codes computed against it never overflow) */
static uint16_t f16_up(float x)
{
	uint16_t h;

	if (!(x <= 65504.0f))
		x = 65504.0f;
	h = kvp_f32_to_f16(x);
	if (kvp_f16_to_f32(h) < x && h < 0x7bff)
		h++;
	return h;
}

static void put_code(uint8_t *codes, uint32_t i, uint32_t c)
{
	uint32_t bit = 6 * i;

	codes[bit / 8] |= (uint8_t)(c << (bit % 8));
	if (bit % 8 > 2)
		codes[bit / 8 + 1] |= (uint8_t)(c >> (8 - bit % 8));
}

static uint32_t get_code(const uint8_t *codes, uint32_t i)
{
	uint32_t bit = 6 * i, w = codes[bit / 8];

	if (bit % 8 > 2)
		w |= (uint32_t)codes[bit / 8 + 1] << 8;
	return (w >> (bit % 8)) & 63;
}

static float clamp_range(float x)
{
	return x > RANGE_MAX ? RANGE_MAX : x < -RANGE_MAX ? -RANGE_MAX : x;
}

void kvp_kvq4_params(uint8_t *restrict scales, const float *restrict lo, const float *restrict hi,
		     uint32_t groups, float *restrict glo, float *restrict ginv)
{
	uint8_t *codes = scales + 4;
	float amax = 0, need_max = 0, dmin, d;
	uint16_t hd, hdmin;

	for (uint32_t i = 0; i < KVP_INT4_CODES_BYTES(groups); i++)
		codes[i] = 0;
	for (uint32_t g = 0; g < groups; g++) {
		/* a group of NaNs (lo > hi) holds zeros */
		float l = lo[g] <= hi[g] ? clamp_range(lo[g]) : 0;

		amax = fabsf(l) > amax ? fabsf(l) : amax;
	}
	hdmin = f16_up(amax / 31.0f);
	dmin = kvp_f16_to_f32(hdmin);
	for (uint32_t g = 0; g < groups; g++) {
		float l = lo[g] <= hi[g] ? clamp_range(lo[g]) : 0;
		float h = lo[g] <= hi[g] ? clamp_range(hi[g]) : 0;
		float m = dmin > 0 ? floorf(l / dmin) : 0;

		m = m > 31 ? 31 : m < -32 ? -32 : m;
		glo[g] = dmin * m;
		put_code(codes, 2 * g + 1, (uint32_t)(int32_t)m & 63);
		/* the step this group needs, kept in ginv until d is known */
		ginv[g] = (h - glo[g]) / 15.0f;
		need_max = ginv[g] > need_max ? ginv[g] : need_max;
	}
	hd = f16_up(need_max / 63.0f);
	d = kvp_f16_to_f32(hd);
	for (uint32_t g = 0; g < groups; g++) {
		float s = d > 0 ? ceilf(ginv[g] / d) : 0;
		float step;

		s = s > 63 ? 63 : s < 0 ? 0 : s;
		put_code(codes, 2 * g, (uint32_t)s);
		step = d * s;
		ginv[g] = step > 0 ? 1.0f / step : 0.0f;
	}
	scales[0] = (uint8_t)hd;
	scales[1] = (uint8_t)(hd >> 8);
	scales[2] = (uint8_t)hdmin;
	scales[3] = (uint8_t)(hdmin >> 8);
}

void kvp_kvq4_unpack(const uint8_t *restrict scales, uint32_t groups, float *restrict step,
		     float *restrict lo)
{
	float d = kvp_f16_to_f32((uint16_t)(scales[0] | scales[1] << 8));
	float dmin = kvp_f16_to_f32((uint16_t)(scales[2] | scales[3] << 8));

	for (uint32_t g = 0; g < groups; g++) {
		uint32_t m = get_code(scales + 4, 2 * g + 1);

		step[g] = d * (float)get_code(scales + 4, 2 * g);
		lo[g] = dmin * (float)((int32_t)m - (m & 32 ? 64 : 0));
	}
}

static uint8_t q4(float x, float lo, float inv)
{
	float r = nearbyintf((x - lo) * inv);

	/* written so that a NaN lands on 15, never on a float-to-int conversion */
	r = r < 15.0f ? r : 15.0f;
	r = r > 0.0f ? r : 0.0f;
	return (uint8_t)r;
}

static void put_nibble(uint8_t *q, size_t e, uint8_t v)
{
	q[e / 2] = (uint8_t)(e % 2 ? (q[e / 2] & 0x0f) | v << 4 : (q[e / 2] & 0xf0) | v);
}

void kvp_kvq4_ref_k(uint8_t *restrict run, const float *restrict k, uint32_t bt, uint32_t hd)
{
	float lo[KVP_KVQ4_GROUPS_MAX], hi[KVP_KVQ4_GROUPS_MAX];
	float glo[KVP_KVQ4_GROUPS_MAX], ginv[KVP_KVQ4_GROUPS_MAX];

	for (uint32_t d = 0; d < hd; d++) {
		lo[d] = INFINITY;
		hi[d] = -INFINITY;
		for (uint32_t t = 0; t < bt; t++) {
			float x = k[(size_t)t * hd + d];

			lo[d] = x < lo[d] ? x : lo[d];
			hi[d] = x > hi[d] ? x : hi[d];
		}
	}
	kvp_kvq4_params(run + KVP_INT4_SCALES_OFFSET(bt, hd), lo, hi, hd, glo, ginv);
	for (uint32_t t = 0; t < bt; t++)
		for (uint32_t d = 0; d < hd; d++)
			put_nibble(run, (size_t)t * hd + d,
				   q4(k[(size_t)t * hd + d], glo[d], ginv[d]));
}

void kvp_kvq4_ref_v(uint8_t *restrict run, const float *restrict v, uint32_t bt, uint32_t hd)
{
	float lo[KVP_KVQ4_GROUPS_MAX], hi[KVP_KVQ4_GROUPS_MAX];
	float glo[KVP_KVQ4_GROUPS_MAX], ginv[KVP_KVQ4_GROUPS_MAX];

	lo[0] = hi[0] = 0; /* bt >= 1; this tells the compiler so */
	for (uint32_t t = 0; t < bt; t++) {
		lo[t] = INFINITY;
		hi[t] = -INFINITY;
		for (uint32_t d = 0; d < hd; d++) {
			float x = v[(size_t)t * hd + d];

			lo[t] = x < lo[t] ? x : lo[t];
			hi[t] = x > hi[t] ? x : hi[t];
		}
	}
	kvp_kvq4_params(run + KVP_INT4_SCALES_OFFSET(bt, hd), lo, hi, bt, glo, ginv);
	for (uint32_t t = 0; t < bt; t++)
		for (uint32_t d = 0; d < hd; d++)
			put_nibble(run, (size_t)t * hd + d,
				   q4(v[(size_t)t * hd + d], glo[t], ginv[t]));
}

static float nibble(const uint8_t *q, size_t e)
{
	return (float)(e % 2 ? q[e / 2] >> 4 : q[e / 2] & 15);
}

void kvp_kvq4_ref_load_k(float *restrict dst, const uint8_t *restrict run, uint32_t rows,
			 uint32_t bt, uint32_t hd)
{
	float step[KVP_KVQ4_GROUPS_MAX], lo[KVP_KVQ4_GROUPS_MAX];

	kvp_kvq4_unpack(run + KVP_INT4_SCALES_OFFSET(bt, hd), hd, step, lo);
	for (uint32_t t = 0; t < rows; t++)
		for (uint32_t d = 0; d < hd; d++)
			dst[(size_t)t * hd + d] = fmaf(nibble(run, (size_t)t * hd + d), step[d],
						       lo[d]);
}

void kvp_kvq4_ref_load_v(float *restrict dst, const uint8_t *restrict run, uint32_t rows,
			 uint32_t bt, uint32_t hd)
{
	float step[KVP_KVQ4_GROUPS_MAX], lo[KVP_KVQ4_GROUPS_MAX];

	kvp_kvq4_unpack(run + KVP_INT4_SCALES_OFFSET(bt, hd), bt, step, lo);
	for (uint32_t t = 0; t < rows; t++)
		for (uint32_t d = 0; d < hd; d++)
			dst[(size_t)t * hd + d] = fmaf(nibble(run, (size_t)t * hd + d), step[t],
						       lo[t]);
}
