/* SPDX-License-Identifier: MIT */
/*
 * quant.c - the reference for every weight type: traits, exact f16/bf16 conversion,
 * dequantization, a round-to-nearest quantizer, activation quantization and the
 * integer view of a block that the integer kernels compute from.
 *
 * Written from the format definitions, plainly, one element at a time: this is the
 * oracle the vector kernels are tested against, so clarity beats speed here.
 * No state; any thread.
 */
#include "compute/kernels/quant.h"

#include <errno.h>
#include <math.h>
#include <string.h>

static const struct kvp_qtype qtypes[KVP_GGML_TYPE__COUNT] = {
	[KVP_GGML_F32] = { "f32", 1, 4, KVP_ACT_F32 },
	[KVP_GGML_F16] = { "f16", 1, 2, KVP_ACT_F32 },
	[KVP_GGML_BF16] = { "bf16", 1, 2, KVP_ACT_BF16 },
	[KVP_GGML_Q8_0] = { "q8_0", KVP_QK, 34, KVP_ACT_Q8 },
	[KVP_GGML_Q4_0] = { "q4_0", KVP_QK, 18, KVP_ACT_Q8 },
	[KVP_GGML_Q4_1] = { "q4_1", KVP_QK, 20, KVP_ACT_Q8 },
	[KVP_GGML_Q5_0] = { "q5_0", KVP_QK, 22, KVP_ACT_Q8 },
	[KVP_GGML_Q5_1] = { "q5_1", KVP_QK, 24, KVP_ACT_Q8 },
	[KVP_GGML_Q2_K] = { "q2_k", KVP_QK_K, 84, KVP_ACT_Q8 },
	[KVP_GGML_Q3_K] = { "q3_k", KVP_QK_K, 110, KVP_ACT_Q8 },
	[KVP_GGML_Q4_K] = { "q4_k", KVP_QK_K, 144, KVP_ACT_Q8 },
	[KVP_GGML_Q5_K] = { "q5_k", KVP_QK_K, 176, KVP_ACT_Q8 },
	[KVP_GGML_Q6_K] = { "q6_k", KVP_QK_K, 210, KVP_ACT_Q8 },
};

const struct kvp_qtype *kvp_qtype(uint32_t type)
{
	if (type >= KVP_GGML_TYPE__COUNT || !qtypes[type].name)
		return NULL;
	return &qtypes[type];
}

const char *kvp_qtype_list(void)
{
	return "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k";
}

size_t kvp_act_row_bytes(uint32_t act, size_t k)
{
	switch (act) {
	case KVP_ACT_F32:
		return k * 4;
	case KVP_ACT_BF16:
		return k * 2;
	case KVP_ACT_Q8:
		return (k + KVP_QG - 1) / KVP_QG * sizeof(struct kvp_act_q8);
	case KVP_ACT_Q8K:
		return (k + KVP_QG - 1) / KVP_QG * sizeof(struct kvp_act_q8k);
	}
	return 0;
}

static inline uint32_t f2u(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static inline float u2f(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

float kvp_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t man = h & 0x3ff;

	if (exp == 0x1f) /* inf / NaN: keep the payload, quiet bit as hardware does */
		return u2f(sign | 0x7f800000 | (man << 13) | (man ? 0x400000 : 0));
	if (exp == 0) {
		if (!man)
			return u2f(sign);
		/* subnormal: man * 2^-24, exact in f32 */
		return sign ? -(float)man * 0x1p-24f : (float)man * 0x1p-24f;
	}
	return u2f(sign | ((exp + 112) << 23) | (man << 13));
}

float kvp_bf16_to_f32(uint16_t b)
{
	return u2f((uint32_t)b << 16);
}

uint16_t kvp_f32_to_f16(float f)
{
	uint32_t u = f2u(f);
	uint32_t sign = (u >> 16) & 0x8000;
	uint32_t a = u & 0x7fffffff;

	if (a > 0x7f800000) /* NaN */
		return sign | 0x7e00 | ((a >> 13) & 0x3ff);
	if (a >= 0x477ff000) /* rounds to >= 65520: inf */
		return sign | 0x7c00;
	if (a < 0x38800000) { /* below the smallest normal half: subnormal or zero */
		/* half subnormal unit is 2^-24: round(|f| * 2^24), exact scaling */
		float v = u2f(a) * 0x1p24f;
		uint32_t q = (uint32_t)v;
		float rem = v - (float)q;

		if (rem > 0.5f || (rem == 0.5f && (q & 1)))
			q++;
		return sign | q; /* q <= 0x400 rolls into the smallest normal correctly */
	}
	/* normal: rebias, round to nearest even on the 13 dropped bits */
	uint32_t r = a - 0x38000000; /* exponent 127 -> 15 */
	uint32_t lsb = (r >> 13) & 1;

	r += 0xfff + lsb;
	return sign | (r >> 13);
}

uint16_t kvp_f32_to_bf16(float f)
{
	uint32_t u = f2u(f);

	if ((u & 0x7fffffff) > 0x7f800000)
		return (u >> 16) | 0x40; /* quiet NaN */
	return (u + 0x7fff + ((u >> 16) & 1)) >> 16;
}

static float h2f(uint16_t h)
{
	return kvp_f16_to_f32(h);
}

/* Q4_K/Q5_K: the 6-bit scale and min of sub-block @j (0..7) from the 12 packed bytes. */
static void scale_min_k4(int j, const uint8_t *s, int32_t *sc, int32_t *m)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*m = s[j + 4] & 63;
	} else {
		*sc = (s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4);
		*m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
	}
}

/* Q3_K: the 16 6-bit scales (0..63, bias 32 not removed) from the 12 packed bytes. */
static void scales_q3k(const uint8_t *s, int32_t *out)
{
	for (int j = 0; j < 16; j++) {
		int lo = j < 8 ? s[j] & 0xf : s[j - 8] >> 4;
		int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;

		out[j] = lo | hi << 4;
	}
}

/* Low 2 bits of element @e of a Q2_K/Q3_K super-block. */
static inline int q2bits(const uint8_t *qs, int e)
{
	return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

/* Low 4 bits of element @e of a Q4_K/Q5_K super-block. */
static inline int q4bits_k(const uint8_t *qs, int e)
{
	int c = e / 64, w = e % 64;

	return w < 32 ? qs[32 * c + w] & 0xf : qs[32 * c + w - 32] >> 4;
}

/* The 6-bit code of element @e of a Q6_K super-block. */
static inline int q6code(const struct kvp_blk_q6_k *b, int e)
{
	int h = e / 128, qr = (e % 128) / 32, l = e % 32;
	int lo = b->ql[64 * h + l + 32 * (qr & 1)];

	lo = qr < 2 ? lo & 0xf : lo >> 4;
	return lo | ((b->qh[32 * h + l] >> (2 * qr)) & 3) << 4;
}

int kvp_qtype_codes(const void *blk, uint32_t type, uint8_t *q, int32_t *sc, int32_t *mn, float *d,
		    float *dmin, int32_t *off)
{
	*dmin = 0;
	*off = 0;
	switch (type) {
	case KVP_GGML_Q4_0:
	case KVP_GGML_Q4_1: {
		const uint8_t *qs = type == KVP_GGML_Q4_0 ? ((const struct kvp_blk_q4_0 *)blk)->qs :
							    ((const struct kvp_blk_q4_1 *)blk)->qs;

		for (int e = 0; e < KVP_QK; e++)
			q[e] = e < 16 ? qs[e] & 0xf : qs[e - 16] >> 4;
		if (type == KVP_GGML_Q4_0) {
			*d = h2f(((const struct kvp_blk_q4_0 *)blk)->d);
			*off = 8;
		} else {
			*d = h2f(((const struct kvp_blk_q4_1 *)blk)->d);
			*dmin = h2f(((const struct kvp_blk_q4_1 *)blk)->m);
		}
		break;
	}
	case KVP_GGML_Q5_0:
	case KVP_GGML_Q5_1: {
		const uint8_t *qs, *qhb;
		uint32_t qh;

		if (type == KVP_GGML_Q5_0) {
			const struct kvp_blk_q5_0 *b = blk;

			qs = b->qs;
			qhb = b->qh;
			*d = h2f(b->d);
			*off = 16;
		} else {
			const struct kvp_blk_q5_1 *b = blk;

			qs = b->qs;
			qhb = b->qh;
			*d = h2f(b->d);
			*dmin = h2f(b->m);
		}
		memcpy(&qh, qhb, 4);
		for (int e = 0; e < KVP_QK; e++)
			q[e] = (e < 16 ? qs[e] & 0xf : qs[e - 16] >> 4) | ((qh >> e) & 1) << 4;
		break;
	}
	case KVP_GGML_Q8_0: {
		const struct kvp_blk_q8_0 *b = blk;

		for (int e = 0; e < KVP_QK; e++)
			q[e] = (uint8_t)(b->qs[e] + 128);
		*d = h2f(b->d);
		*off = 128;
		break;
	}
	case KVP_GGML_Q2_K: {
		const struct kvp_blk_q2_k *b = blk;

		for (int e = 0; e < KVP_QK_K; e++)
			q[e] = q2bits(b->qs, e);
		for (int j = 0; j < 16; j++) {
			sc[j] = b->scales[j] & 0xf;
			mn[j] = b->scales[j] >> 4;
		}
		*d = h2f(b->d);
		*dmin = h2f(b->dmin);
		return 0;
	}
	case KVP_GGML_Q3_K: {
		const struct kvp_blk_q3_k *b = blk;

		for (int e = 0; e < KVP_QK_K; e++)
			q[e] = q2bits(b->qs, e) | ((b->hmask[e % 32] >> (e / 32)) & 1) << 2;
		scales_q3k(b->scales, sc);
		for (int j = 0; j < 16; j++) {
			sc[j] -= 32;
			mn[j] = 0;
		}
		*d = h2f(b->d);
		*off = 4;
		return 0;
	}
	case KVP_GGML_Q4_K:
	case KVP_GGML_Q5_K: {
		const uint8_t *scales, *qs;

		if (type == KVP_GGML_Q4_K) {
			const struct kvp_blk_q4_k *b = blk;

			scales = b->scales;
			qs = b->qs;
			*d = h2f(b->d);
			*dmin = h2f(b->dmin);
			for (int e = 0; e < KVP_QK_K; e++)
				q[e] = q4bits_k(qs, e);
		} else {
			const struct kvp_blk_q5_k *b = blk;

			scales = b->scales;
			qs = b->qs;
			*d = h2f(b->d);
			*dmin = h2f(b->dmin);
			for (int e = 0; e < KVP_QK_K; e++)
				q[e] = q4bits_k(qs, e) | ((b->qh[e % 32] >> (e / 32)) & 1) << 4;
		}
		for (int j = 0; j < 8; j++) {
			scale_min_k4(j, scales, &sc[2 * j], &mn[2 * j]);
			sc[2 * j + 1] = sc[2 * j];
			mn[2 * j + 1] = mn[2 * j];
		}
		return 0;
	}
	case KVP_GGML_Q6_K: {
		const struct kvp_blk_q6_k *b = blk;

		for (int e = 0; e < KVP_QK_K; e++)
			q[e] = q6code(b, e);
		for (int j = 0; j < 16; j++) {
			sc[j] = b->scales[j];
			mn[j] = 0;
		}
		*d = h2f(b->d);
		*off = 32;
		return 0;
	}
	default:
		return -ENOTSUP;
	}
	/* legacy types: one scale for the block */
	sc[0] = sc[1] = 1;
	mn[0] = mn[1] = 0;
	return 0;
}

int kvp_dequant_ref(float *restrict dst, const void *restrict src, uint32_t type, size_t n)
{
	const struct kvp_qtype *t = kvp_qtype(type);
	const uint8_t *b = src;

	if (!t)
		return -ENOTSUP;
	switch (type) {
	case KVP_GGML_F32:
		memcpy(dst, src, n * 4);
		return 0;
	case KVP_GGML_F16:
	case KVP_GGML_BF16:
		for (size_t i = 0; i < n; i++) {
			uint16_t h;

			memcpy(&h, b + 2 * i, 2);
			dst[i] = type == KVP_GGML_F16 ? kvp_f16_to_f32(h) : kvp_bf16_to_f32(h);
		}
		return 0;
	}
	for (size_t i = 0; i < n / t->block; i++, b += t->block_bytes, dst += t->block) {
		uint8_t q[KVP_QK_K];
		int32_t sc[16], mn[16], off;
		float d, dmin;

		kvp_qtype_codes(b, type, q, sc, mn, &d, &dmin, &off);
		if (t->block == KVP_QK) {
			/* d * (q - off) (+ m), as ggml evaluates it */
			int has_min = type == KVP_GGML_Q4_1 || type == KVP_GGML_Q5_1;

			for (uint32_t e = 0; e < KVP_QK; e++)
				dst[e] = has_min ? (float)q[e] * d + dmin :
						   (float)((int)q[e] - off) * d;
			continue;
		}
		/* (d * sc) * (q - off) - dmin * m, as ggml evaluates it */
		for (uint32_t e = 0; e < KVP_QK_K; e++) {
			float dl = d * (float)sc[e / 16];

			dst[e] = dl * (float)((int)q[e] - off) - dmin * (float)mn[e / 16];
		}
	}
	return 0;
}

/* Nearest integer, ties away from zero (as roundf). */
static int nearest(float x)
{
	return (int)lroundf(x);
}

static int clampi(int v, int lo, int hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

/* The value of largest magnitude in x[0..n), with its sign. */
static float max_signed(const float *x, int n)
{
	float m = 0;

	for (int i = 0; i < n; i++)
		if (fabsf(x[i]) > fabsf(m))
			m = x[i];
	return m;
}

/* Legacy types: symmetric (q4_0, q5_0, q8_0) or with a minimum (q4_1, q5_1). */
static void quant_legacy(uint8_t *out, const float *x, uint32_t type)
{
	uint8_t q[KVP_QK];
	int levels = type == KVP_GGML_Q5_0 || type == KVP_GGML_Q5_1 ? 32 : 16;
	uint16_t dh, mh = 0;

	if (type == KVP_GGML_Q8_0) {
		float amax = fabsf(max_signed(x, KVP_QK)), d, id;
		struct kvp_blk_q8_0 *b = (void *)out;

		b->d = kvp_f32_to_f16(amax / 127.0f);
		d = kvp_f16_to_f32(b->d);
		id = d ? 1.0f / d : 0.0f;
		for (int e = 0; e < KVP_QK; e++)
			b->qs[e] = (int8_t)clampi(nearest(x[e] * id), -127, 127);
		return;
	}
	if (type == KVP_GGML_Q4_0 || type == KVP_GGML_Q5_0) {
		/* the extreme value maps to -levels/2 exactly: one more level on its side */
		float d = max_signed(x, KVP_QK) / (float)(-levels / 2);

		dh = kvp_f32_to_f16(d);
		d = kvp_f16_to_f32(dh);
		for (int e = 0; e < KVP_QK; e++)
			q[e] = (uint8_t)(d ? clampi(nearest(x[e] / d) + levels / 2, 0, levels - 1) :
					     levels / 2);
	} else {
		float lo = x[0], hi = x[0], d, m;

		for (int e = 1; e < KVP_QK; e++) {
			lo = x[e] < lo ? x[e] : lo;
			hi = x[e] > hi ? x[e] : hi;
		}
		dh = kvp_f32_to_f16((hi - lo) / (float)(levels - 1));
		mh = kvp_f32_to_f16(lo);
		d = kvp_f16_to_f32(dh);
		m = kvp_f16_to_f32(mh);
		for (int e = 0; e < KVP_QK; e++)
			q[e] = (uint8_t)(d ? clampi(nearest((x[e] - m) / d), 0, levels - 1) : 0);
	}
	switch (type) {
	case KVP_GGML_Q4_0: {
		struct kvp_blk_q4_0 *b = (void *)out;

		b->d = dh;
		for (int j = 0; j < 16; j++)
			b->qs[j] = q[j] | q[j + 16] << 4;
		break;
	}
	case KVP_GGML_Q4_1: {
		struct kvp_blk_q4_1 *b = (void *)out;

		b->d = dh;
		b->m = mh;
		for (int j = 0; j < 16; j++)
			b->qs[j] = q[j] | q[j + 16] << 4;
		break;
	}
	default: { /* q5_0, q5_1: same nibbles, the fifth bits in qh */
		uint32_t qh = 0;
		uint8_t *qs, *qhp;

		if (type == KVP_GGML_Q5_0) {
			struct kvp_blk_q5_0 *b = (void *)out;

			b->d = dh;
			qs = b->qs;
			qhp = b->qh;
		} else {
			struct kvp_blk_q5_1 *b = (void *)out;

			b->d = dh;
			b->m = mh;
			qs = b->qs;
			qhp = b->qh;
		}
		for (int j = 0; j < 16; j++)
			qs[j] = (q[j] & 0xf) | (q[j + 16] & 0xf) << 4;
		for (int e = 0; e < KVP_QK; e++)
			qh |= (uint32_t)(q[e] >> 4) << e;
		memcpy(qhp, &qh, 4);
		break;
	}
	}
}

/*
 * A super-block scale for @n sub-block scales @s, quantized to integers in
 * [lo, hi] (symmetric types: the extreme maps to lo, like the elements do).
 */
static float super_scale(const float *s, int n, int lo, int hi, int32_t *out, uint16_t *dh)
{
	float d, m = max_signed(s, n);

	d = lo < 0 ? m / (float)lo : m / (float)hi;
	*dh = kvp_f32_to_f16(d);
	d = kvp_f16_to_f32(*dh);
	for (int j = 0; j < n; j++)
		out[j] = d ? clampi(nearest(s[j] / d), lo, hi) : 0;
	return d;
}

/* Q2_K, Q4_K, Q5_K: per sub-block scale and min, both quantized against a super scale. */
static void quant_k_min(uint8_t *out, const float *x, uint32_t type)
{
	int sub = type == KVP_GGML_Q2_K ? 16 : 32, nsub = KVP_QK_K / sub;
	int qmax = type == KVP_GGML_Q2_K ? 3 : type == KVP_GGML_Q4_K ? 15 : 31;
	int smax = type == KVP_GGML_Q2_K ? 15 : 63;
	float scale[16], mins[16], d, dmin;
	int32_t sc[16], mn[16];
	uint8_t q[KVP_QK_K];
	uint16_t dh, dminh;

	for (int j = 0; j < nsub; j++) {
		float lo = 0, hi = 0; /* lo <= 0: the min term only subtracts */

		for (int i = 0; i < sub; i++) {
			lo = x[j * sub + i] < lo ? x[j * sub + i] : lo;
			hi = x[j * sub + i] > hi ? x[j * sub + i] : hi;
		}
		scale[j] = (hi - lo) / (float)qmax;
		mins[j] = -lo;
	}
	d = super_scale(scale, nsub, 0, smax, sc, &dh);
	dmin = super_scale(mins, nsub, 0, smax, mn, &dminh);
	for (int e = 0; e < KVP_QK_K; e++) {
		int j = e / sub;
		float dl = d * (float)sc[j], ml = dmin * (float)mn[j];

		q[e] = (uint8_t)(dl ? clampi(nearest((x[e] + ml) / dl), 0, qmax) : 0);
	}
	if (type == KVP_GGML_Q2_K) {
		struct kvp_blk_q2_k *b = (void *)out;

		memset(b, 0, sizeof(*b));
		for (int j = 0; j < 16; j++)
			b->scales[j] = (uint8_t)(sc[j] | mn[j] << 4);
		for (int e = 0; e < KVP_QK_K; e++)
			b->qs[32 * (e / 128) + e % 32] |= q[e] << (2 * ((e % 128) / 32));
		b->d = dh;
		b->dmin = dminh;
		return;
	}
	{
		uint8_t *scales, *qs;

		if (type == KVP_GGML_Q4_K) {
			struct kvp_blk_q4_k *b = (void *)out;

			memset(b, 0, sizeof(*b));
			b->d = dh;
			b->dmin = dminh;
			scales = b->scales;
			qs = b->qs;
		} else {
			struct kvp_blk_q5_k *b = (void *)out;

			memset(b, 0, sizeof(*b));
			b->d = dh;
			b->dmin = dminh;
			scales = b->scales;
			qs = b->qs;
			for (int e = 0; e < KVP_QK_K; e++)
				b->qh[e % 32] |= (uint8_t)((q[e] >> 4) << (e / 32));
		}
		for (int j = 0; j < 4; j++) {
			scales[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
			scales[j + 4] = (uint8_t)((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
			scales[j + 8] = (uint8_t)((sc[j + 4] & 0xf) | (mn[j + 4] & 0xf) << 4);
		}
		for (int e = 0; e < KVP_QK_K; e++) {
			int c = e / 64, w = e % 64;

			if (w < 32)
				qs[32 * c + w] |= q[e] & 0xf;
			else
				qs[32 * c + w - 32] |= (q[e] & 0xf) << 4;
		}
	}
}

/* Q3_K and Q6_K: symmetric per 16, signed integer sub-block scales. */
static void quant_k_sym(uint8_t *out, const float *x, uint32_t type)
{
	int half = type == KVP_GGML_Q3_K ? 4 : 32; /* codes -half .. half-1 */
	float scale[16], d;
	int32_t sc[16];
	uint8_t q[KVP_QK_K];
	uint16_t dh;

	for (int j = 0; j < 16; j++)
		scale[j] = max_signed(x + 16 * j, 16) / (float)-half;
	if (type == KVP_GGML_Q3_K)
		d = super_scale(scale, 16, -32, 31, sc, &dh);
	else
		d = super_scale(scale, 16, -128, 127, sc, &dh);
	for (int e = 0; e < KVP_QK_K; e++) {
		float dl = d * (float)sc[e / 16];

		q[e] = (uint8_t)((dl ? clampi(nearest(x[e] / dl), -half, half - 1) : 0) + half);
	}
	if (type == KVP_GGML_Q3_K) {
		struct kvp_blk_q3_k *b = (void *)out;

		memset(b, 0, sizeof(*b));
		for (int j = 0; j < 16; j++) {
			int l = sc[j] + 32;

			if (j < 8)
				b->scales[j] |= (uint8_t)(l & 0xf);
			else
				b->scales[j - 8] |= (uint8_t)((l & 0xf) << 4);
			b->scales[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
		}
		for (int e = 0; e < KVP_QK_K; e++) {
			b->qs[32 * (e / 128) + e % 32] |= (q[e] & 3) << (2 * ((e % 128) / 32));
			b->hmask[e % 32] |= (uint8_t)((q[e] >> 2) << (e / 32));
		}
		b->d = dh;
		return;
	}
	{
		struct kvp_blk_q6_k *b = (void *)out;

		memset(b, 0, sizeof(*b));
		for (int j = 0; j < 16; j++)
			b->scales[j] = (int8_t)sc[j];
		for (int e = 0; e < KVP_QK_K; e++) {
			int h = e / 128, qr = (e % 128) / 32, l = e % 32;
			uint8_t *lo = &b->ql[64 * h + l + 32 * (qr & 1)];

			*lo |= qr < 2 ? q[e] & 0xf : (q[e] & 0xf) << 4;
			b->qh[32 * h + l] |= (uint8_t)((q[e] >> 4) << (2 * qr));
		}
		b->d = dh;
	}
}

int kvp_quantize_ref(void *restrict dst, const float *restrict src, uint32_t type, size_t n)
{
	const struct kvp_qtype *t = kvp_qtype(type);
	uint8_t *b = dst;

	if (!t)
		return -ENOTSUP;
	switch (type) {
	case KVP_GGML_F32:
		memcpy(dst, src, n * 4);
		return 0;
	case KVP_GGML_F16:
	case KVP_GGML_BF16:
		for (size_t i = 0; i < n; i++) {
			uint16_t h = type == KVP_GGML_F16 ? kvp_f32_to_f16(src[i]) :
							    kvp_f32_to_bf16(src[i]);

			memcpy(b + 2 * i, &h, 2);
		}
		return 0;
	}
	for (size_t i = 0; i < n / t->block; i++, b += t->block_bytes, src += t->block) {
		if (t->block == KVP_QK)
			quant_legacy(b, src, type);
		else if (type == KVP_GGML_Q3_K || type == KVP_GGML_Q6_K)
			quant_k_sym(b, src, type);
		else
			quant_k_min(b, src, type);
	}
	return 0;
}

/*
 * Symmetric int8 quantization of @n values: d = amax / 127, q = round(x / d).  The
 * vector quantizers multiply by 1/d rather than divide: so does this reference, with
 * the same float operations, so they agree bit for bit.
 */
static float quant_i8(int8_t *q, const float *x, int n)
{
	float amax = 0, d, id;

	for (int i = 0; i < n; i++)
		amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
	d = amax / 127.0f;
	id = d ? 1.0f / d : 0.0f;
	for (int i = 0; i < n; i++) {
		float v = nearbyintf(x[i] * id);

		/* only NaN input falls outside: -127, as the vector conversions give it */
		q[i] = (int8_t)(v >= -127.0f && v <= 127.0f ? v : -127.0f);
	}
	return d;
}

void kvp_quant_act_ref(void *restrict dst, uint32_t act, const float *restrict x, size_t k)
{
	switch (act) {
	case KVP_ACT_F32:
		memcpy(dst, x, k * 4);
		return;
	case KVP_ACT_BF16:
		for (size_t i = 0; i < k; i++)
			((uint16_t *)dst)[i] = kvp_f32_to_bf16(x[i]);
		return;
	case KVP_ACT_Q8:
		for (size_t g = 0; g < (k + KVP_QG - 1) / KVP_QG; g++) {
			struct kvp_act_q8 *a = (struct kvp_act_q8 *)dst + g;

			memset(a, 0, sizeof(*a));
			for (size_t b = 0; b < 8 && g * KVP_QG + b * KVP_QK < k; b++) {
				int8_t q[KVP_QK];
				float d = quant_i8(q, x + g * KVP_QG + b * KVP_QK, KVP_QK);

				for (int h = 0; h < 2; h++) {
					int32_t sum = 0;

					for (int e = 0; e < 16; e++) {
						a->q[kvp_q8_pos(32 * b + 16 * h + e)] =
							q[16 * h + e];
						sum += q[16 * h + e];
					}
					a->d[2 * b + h] = d;
					a->s[2 * b + h] = d * (float)sum;
				}
			}
		}
		return;
	case KVP_ACT_Q8K:
		for (size_t g = 0; g < (k + KVP_QG - 1) / KVP_QG; g++) {
			struct kvp_act_q8k *a = (struct kvp_act_q8k *)dst + g;
			size_t n = k - g * KVP_QG < KVP_QG ? k - g * KVP_QG : KVP_QG;
			int8_t q[KVP_QG] = { 0 };

			memset(a, 0, sizeof(*a));
			a->d = quant_i8(q, x + g * KVP_QG, (int)n);
			for (int e = 0; e < KVP_QG; e++) {
				a->q[kvp_q8k_pos(e)] = q[e];
				a->s[e / 16] += q[e];
			}
		}
		return;
	}
}

void kvp_act_round_ref(float *x, uint32_t act, size_t k)
{
	switch (act) {
	case KVP_ACT_BF16:
		for (size_t i = 0; i < k; i++)
			x[i] = kvp_bf16_to_f32(kvp_f32_to_bf16(x[i]));
		return;
	case KVP_ACT_Q8:
		for (size_t b = 0; b < k / KVP_QK; b++) {
			int8_t q[KVP_QK];
			float d = quant_i8(q, x + b * KVP_QK, KVP_QK);

			for (size_t e = 0; e < KVP_QK; e++)
				x[b * KVP_QK + e] = d * (float)q[e];
		}
		return;
	case KVP_ACT_Q8K:
		for (size_t g = 0; g < (k + KVP_QG - 1) / KVP_QG; g++) {
			size_t n = k - g * KVP_QG < KVP_QG ? k - g * KVP_QG : KVP_QG;
			int8_t q[KVP_QG];
			float d = quant_i8(q, x + g * KVP_QG, (int)n);

			for (size_t e = 0; e < n; e++)
				x[g * KVP_QG + e] = d * (float)q[e];
		}
		return;
	}
}
