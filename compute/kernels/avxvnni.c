/* SPDX-License-Identifier: MIT */
/*
 * avxvnni.c - the AVX-VNNI table: AVX2 + FMA + F16C + BMI2 and the VEX-encoded
 * vpdpbusd (ymm), for the CPUs that have it without AVX-512 (Intel client cores from
 * Alder Lake on, the E-cores of the hybrid ones; AMD client Zen 5).  Built with those
 * flags only; dispatch.c checks CPUID.(7,1):EAX bit 4 first, and prefers the AVX-512
 * table where both are present.
 *
 * Today this is the AVX2 table under its own flags and name: the float kernels are
 * vec_f32.inc compiled here, and the integer slots (and their activation quantizer)
 * call the AVX2 table's, so every weight type computes as on AVX2.  Next step: the
 * integer dot of avx2.c (vpmaddubsw + vpmaddwd, and the sign trick for Q8_0) written
 * over a macro and included here with vpdpbusd in its place (one instruction per 32
 * products instead of two, and no int16 saturation).  Not run on any machine so far
 * (the Zen 4 it was written on has AVX-512 VNNI but not AVX-VNNI, and Debian 12's
 * qemu-user 7.2 does not emulate it): its speed is unmeasured.
 */
#include "compute/kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

#include "compute/kernels/table.inc"

#include "compute/kernels/ymm.inc"

/* float weights: as avx2.c */
/* integer weights: the AVX2 table's (see the top of the file) */
#define AVX2_MATMUL(name, TYPE) \
	static void matmul_##name(float *restrict out, size_t ldo, const void *restrict w, \
				  size_t w_row_bytes, const void *restrict x, size_t x_row_bytes, \
				  size_t rows, size_t k, size_t o0, size_t o1) \
	{ \
		kvp_kernels_avx2.matmul[TYPE](out, ldo, w, w_row_bytes, x, x_row_bytes, rows, k, \
					      o0, o1); \
	}

AVX2_MATMUL(q8_0, KVP_GGML_Q8_0)
AVX2_MATMUL(q4_0, KVP_GGML_Q4_0)
AVX2_MATMUL(q4_1, KVP_GGML_Q4_1)
AVX2_MATMUL(q5_0, KVP_GGML_Q5_0)
AVX2_MATMUL(q5_1, KVP_GGML_Q5_1)
AVX2_MATMUL(q2_k, KVP_GGML_Q2_K)
AVX2_MATMUL(q3_k, KVP_GGML_Q3_K)
AVX2_MATMUL(q4_k, KVP_GGML_Q4_K)
AVX2_MATMUL(q5_k, KVP_GGML_Q5_K)
AVX2_MATMUL(q6_k, KVP_GGML_Q6_K)

KVP_REF_ACT(f32, KVP_ACT_F32)
KVP_REF_ACT(bf16, KVP_ACT_BF16)
KVP_REF_ACT(q8, KVP_ACT_Q8) /* as avx2.c: the reference quantizer */

KVP_REF_DEQUANT_INTEGER

KVP_KERNEL_TABLE(avxvnni, KVP_ISA_AVXVNNI);
