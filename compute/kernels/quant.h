/* SPDX-License-Identifier: MIT */
/*
 * quant.h - the block layouts of the GGUF weight types the engine computes with, the
 * activation formats their dot products take, and the portable reference code for both
 * (quant.c): dequantize and quantize every type, quantize activations.
 *
 * Layouts are the ones GGUF files carry (ggml's block structs define them): little
 * endian, packed, scales as IEEE binary16 (stored here as uint16_t).  A block is the
 * unit a row is made of: 32 elements for the legacy types, 256 (a "super-block") for
 * the K-quants, 1 for F32/F16/BF16.
 *
 * Every integer type is computed as unsigned weight codes q (0..255) against signed
 * int8 activations, because that is what the int8 dot instructions take
 * (vpdpbusd/vpmaddubsw: u8 x s8):
 *   legacy:   w = d * (q - off) (+ m)                        per block of 32
 *   K-quants: w = d * s_j * (q - off) - dm * m_j             per sub-block j of 16 (or 32)
 * so a dot product is an integer sum of q * a plus corrections that need only the sum
 * of each activation sub-block.  Activations of every integer type share one format,
 * KVP_ACT_Q8: groups of 256 elements quantized per block of 32 (int8 codes, an f32
 * scale), their codes stored in the lane order of the int8 dot instructions (see
 * struct kvp_act_q8) so that all 64-byte chunks of a group accumulate into one
 * register whose 32-bit lane i is the dot product of sub-block i.  F32 and F16 weights
 * take f32 activations, BF16 weights bf16 activations.
 *
 * Pure functions, no state; any thread.
 */
#ifndef KVP_COMPUTE_KERNELS_QUANT_H
#define KVP_COMPUTE_KERNELS_QUANT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "compute/gguf.h"

#define KVP_QK 32    /* elements per legacy block */
#define KVP_QK_K 256 /* elements per K-quant super-block */

/* Q4_0: w = d * (q - 8), q the low nibbles (elements 0..15) then high (16..31). */
struct kvp_blk_q4_0 {
	uint16_t d;
	uint8_t qs[KVP_QK / 2];
};

/* Q4_1: w = d * q + m. */
struct kvp_blk_q4_1 {
	uint16_t d, m;
	uint8_t qs[KVP_QK / 2];
};

/* Q5_0: w = d * (q - 16), q = nibble | bit j of qh << 4. */
struct kvp_blk_q5_0 {
	uint16_t d;
	uint8_t qh[4];
	uint8_t qs[KVP_QK / 2];
};

/* Q5_1: w = d * q + m. */
struct kvp_blk_q5_1 {
	uint16_t d, m;
	uint8_t qh[4];
	uint8_t qs[KVP_QK / 2];
};

/* Q8_0: w = d * q, q signed. */
struct kvp_blk_q8_0 {
	uint16_t d;
	int8_t qs[KVP_QK];
};

/*
 * Q2_K: 16 sub-blocks of 16; scales[j] low nibble = scale, high nibble = min;
 * w = d * sc * q - dmin * m, q 2 bits.
 */
struct kvp_blk_q2_k {
	uint8_t scales[KVP_QK_K / 16];
	uint8_t qs[KVP_QK_K / 4];
	uint16_t d, dmin;
};

/* Q3_K: 16 sub-blocks of 16; 6-bit scales (packed in 12 bytes) biased by 32; q 3 bits. */
struct kvp_blk_q3_k {
	uint8_t hmask[KVP_QK_K / 8];
	uint8_t qs[KVP_QK_K / 4];
	uint8_t scales[12];
	uint16_t d;
};

/* Q4_K: 8 sub-blocks of 32; 6-bit scales and mins packed in 12 bytes; q 4 bits. */
struct kvp_blk_q4_k {
	uint16_t d, dmin;
	uint8_t scales[12];
	uint8_t qs[KVP_QK_K / 2];
};

/* Q5_K: as Q4_K with a fifth bit per element in qh. */
struct kvp_blk_q5_k {
	uint16_t d, dmin;
	uint8_t scales[12];
	uint8_t qh[KVP_QK_K / 8];
	uint8_t qs[KVP_QK_K / 2];
};

/* Q6_K: 16 sub-blocks of 16; int8 scales; w = d * sc * (q - 32), q 6 bits. */
struct kvp_blk_q6_k {
	uint8_t ql[KVP_QK_K / 2];
	uint8_t qh[KVP_QK_K / 4];
	int8_t scales[KVP_QK_K / 16];
	uint16_t d;
};

static_assert(sizeof(struct kvp_blk_q4_0) == 18, "GGUF layout");
static_assert(sizeof(struct kvp_blk_q4_1) == 20, "GGUF layout");
static_assert(sizeof(struct kvp_blk_q5_0) == 22, "GGUF layout");
static_assert(sizeof(struct kvp_blk_q5_1) == 24, "GGUF layout");
static_assert(sizeof(struct kvp_blk_q8_0) == 34, "GGUF layout");
static_assert(sizeof(struct kvp_blk_q2_k) == 84, "GGUF layout");
static_assert(sizeof(struct kvp_blk_q3_k) == 110, "GGUF layout");
static_assert(sizeof(struct kvp_blk_q4_k) == 144, "GGUF layout");
static_assert(sizeof(struct kvp_blk_q5_k) == 176, "GGUF layout");
static_assert(sizeof(struct kvp_blk_q6_k) == 210, "GGUF layout");
static_assert(offsetof(struct kvp_blk_q2_k, d) == 80, "GGUF layout");
static_assert(offsetof(struct kvp_blk_q3_k, d) == 108, "GGUF layout");
static_assert(offsetof(struct kvp_blk_q5_k, qs) == 48, "GGUF layout");
static_assert(offsetof(struct kvp_blk_q6_k, d) == 208, "GGUF layout");

/*
 * Activation formats (what a weight type's dot product takes).  Which one a type takes
 * is the kernel table's choice (struct kvp_kernels.act): struct kvp_qtype.act is the
 * default, what the AVX-512 table takes.
 */
enum kvp_act {
	KVP_ACT_F32 = 0,
	KVP_ACT_BF16 = 1,
	KVP_ACT_Q8 = 2,	 /* struct kvp_act_q8: a scale per block of 32 */
	KVP_ACT_Q8K = 3, /* struct kvp_act_q8k: one scale per 256, code sums per 16 */
	KVP_ACT__COUNT
};

#define KVP_QG 256 /* elements per KVP_ACT_Q8 group */

/**
 * struct kvp_act_q8 - 256 activations (16 sub-blocks of 16, 8 blocks of 32)
 * @q: int8 codes, element 16i + 4c + j (sub-block i, c < 4, j < 4) at byte 64c + 4i + j:
 *     each 64-byte chunk c holds 4 elements of every sub-block, sub-block i in its
 *     32-bit lane i (kvp_q8_pos())
 * @d: per sub-block i, the scale of the block of 32 holding it: x = d * q
 * @s: per sub-block i, d[i] times the sum of its 16 codes
 *
 * A row of k elements is ceil(k / 256) groups; the last one is padded with zero codes,
 * scales and sums.  A weight row unpacked into the same lane order (codes, and per
 * sub-block a scale dw and a correction c) gives its dot product as
 *   sum over groups and lanes i of  dw_i * d_i * (q . a)_i + c_i * s_i.
 */
struct kvp_act_q8 {
	int8_t q[KVP_QG];
	float d[16];
	float s[16];
};

static_assert(sizeof(struct kvp_act_q8) == 384, "activation group");

/**
 * struct kvp_act_q8k - 256 activations with one scale (the K-quants' format on the
 * 256-bit tables and the scalar one)
 * @q: int8 codes, element 16i + 4c + j (sub-block i, c < 4, j < 4) at byte
 *     64c + 32h + 4l + j, h = i / 8 and lane l = kvp_q8k_lane(i % 8)
 *     (kvp_q8k_pos()): per half h and chunk c a 256-bit register whose 32-bit lane l
 *     holds 4 codes of one sub-block - struct kvp_act_q8's order with the sub-blocks of
 *     a half in the order 0, 2, 4, 6, 1, 3, 5, 7, which a weight half of 4 registers of
 *     32 consecutive elements reaches by a 4 x 4 transpose of 32-bit words inside each
 *     128-bit lane (no lane-crossing shuffle: slow on Zen 2)
 * @s: per sub-block i of 16 (elements 16i .. 16i + 15), the sum of its codes
 * @d: x = d * q for the whole group
 *
 * With one scale per 256, a K-quant super-block's integer sub-block scales multiply
 * the integer dots before any float step (vpmaddwd by the scales in place of ones), and
 * its mins or offset take the integer code sums: one float step per super-block and
 * token where struct kvp_act_q8 needs one per sub-block.  The dot of a K-quant block,
 * in 8 int32 lanes l (the 256-bit kernels' registers, which the scalar table mirrors):
 *   L_l = sum_h sc[i] qdot[i] - off (sc[2l] s[2l] + sc[2l + 1] s[2l + 1]),
 *         i = 8h + kvp_q8k_sub(l), the sub-block in lane l of half h
 *   M_l = mn[2l] s[2l] + mn[2l + 1] s[2l + 1]
 *   acc_l = fma(M_l, -dmin d, fma(L_l, dw d, acc_l))    (dw d, -dmin d: one rounding)
 * (the mins' step only for the types with mins); a row's acc lanes summed as hsum8()
 * in ymm_int.inc does it, per PANEL_MAX slice.  A last partial group is padded with
 * zero codes.
 */
struct kvp_act_q8k {
	int8_t q[KVP_QG];
	int16_t s[16];
	float d;
	uint8_t pad[28];
};

static_assert(sizeof(struct kvp_act_q8k) == 320, "activation group");

/* Byte position in a group of its element @e (0..255). */
static inline unsigned int kvp_q8_pos(unsigned int e)
{
	return 64 * ((e % 16) / 4) + 4 * (e / 16) + e % 4;
}

/* struct kvp_act_q8k: the lane of sub-block @t (0..7) of a half, and its inverse */
static inline unsigned int kvp_q8k_lane(unsigned int t)
{
	return t % 2 * 4 + t / 2;
}

static inline unsigned int kvp_q8k_sub(unsigned int l)
{
	return l % 4 * 2 + l / 4;
}

/* Byte position in a struct kvp_act_q8k group of its element @e (0..255). */
static inline unsigned int kvp_q8k_pos(unsigned int e)
{
	unsigned int i = e / 16;

	return 64 * ((e % 16) / 4) + 32 * (i / 8) + 4 * kvp_q8k_lane(i % 8) + e % 4;
}

/**
 * struct kvp_qtype - what the engine knows of one weight type
 * @name:        as gguf.h names it
 * @block:       elements per block
 * @block_bytes: bytes per block
 * @act:         enum kvp_act its dot product takes
 */
struct kvp_qtype {
	const char *name;
	uint32_t block;
	uint32_t block_bytes;
	uint32_t act;
};

/*
 * kvp_qtype() - the weight type @type (enum kvp_ggml_type) if the engine computes with
 * it, else NULL.  kvp_qtype_list() - the names of all of them, for error messages
 * ("f32, f16, bf16, q8_0, ...").
 */
const struct kvp_qtype *kvp_qtype(uint32_t type);
const char *kvp_qtype_list(void);

/*
 * kvp_act_row_bytes() - bytes of one row of @k activations in format @act (k a multiple
 * of 32 for KVP_ACT_Q8).
 */
size_t kvp_act_row_bytes(uint32_t act, size_t k);

/* One IEEE binary16 / bfloat16 value to f32, exactly. */
float kvp_f16_to_f32(uint16_t h);
float kvp_bf16_to_f32(uint16_t b);

/* f32 to binary16 / bfloat16, round to nearest even; NaN stays NaN, overflow is inf. */
uint16_t kvp_f32_to_f16(float f);
uint16_t kvp_f32_to_bf16(float f);

/**
 * kvp_dequant_ref() - @n elements of weight type @type at @src to f32 at @dst
 * @n: a multiple of the type's block
 *
 * The reference: the format's definition evaluated in the order ggml documents it,
 * so results are exact where the definition is (every product of a binary16 scale and
 * a small integer is).
 * Return: 0, or -ENOTSUP for a type without kernels.
 */
int kvp_dequant_ref(float *restrict dst, const void *restrict src, uint32_t type, size_t n);

/**
 * kvp_quantize_ref() - @n f32 values to weight type @type (round to nearest)
 * @n: a multiple of the type's block
 *
 * For the synthetic-model writer and tests: simple per-block scale search (max
 * magnitude for symmetric types, min/max for types with a minimum), not the
 * error-minimising search of llama.cpp's quantizers.
 * Return: 0, or -ENOTSUP.
 */
int kvp_quantize_ref(void *restrict dst, const float *restrict src, uint32_t type, size_t n);

/*
 * kvp_quant_act_ref() - @k f32 activations to format @act at @dst (the reference the
 * vector activation quantizers must equal exactly).  @k a multiple of 32 for Q8.
 */
void kvp_quant_act_ref(void *restrict dst, uint32_t act, const float *restrict x, size_t k);

/*
 * kvp_act_round_ref() - @x (k values) replaced by what the kernels see of it in format
 * @act: quantized and dequantized (d * q per block of 32), bf16-rounded, or unchanged
 * for f32.
 * The reference forward uses it to compute exactly what the fast path computes.
 */
void kvp_act_round_ref(float *x, uint32_t act, size_t k);

/*
 * kvp_qtype_codes() - the integer view of block @blk (index in the row) of a row of
 * weight type @type: unsigned codes q (@q: block elements), per-16-element integer scales
 * @sc and mins @mn, and the float scales @d, @dmin, @off, such that element i is
 *   d * sc[i/16] * (q[i] - off) - dmin * mn[i/16]          (K-quants)
 *   d * (q[i] - off) + dmin                                (legacy: sc = 1, mn = 0)
 * The scalar kernels compute from this; tests check it against kvp_dequant_ref.
 * Return: 0 or -ENOTSUP (F32, F16, BF16: no integer view).
 */
int kvp_qtype_codes(const void *blk, uint32_t type, uint8_t *q, int32_t *sc, int32_t *mn, float *d,
		    float *dmin, int32_t *off);

#endif /* KVP_COMPUTE_KERNELS_QUANT_H */
