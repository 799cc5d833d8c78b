/* SPDX-License-Identifier: MIT */
/*
 * avxvnni.c - the AVX-VNNI table: AVX2 + FMA + F16C + BMI2 and the VEX-encoded
 * vpdpbusd (ymm), for the CPUs that have it without AVX-512 (Intel client cores from
 * Alder Lake on, the E-cores of the hybrid ones; AMD client Zen 5).  Built with those
 * flags only; dispatch.c checks CPUID.(7,1):EAX bit 4 first, and prefers the AVX-512
 * table where both are present.
 *
 * The float kernels are vec_f32.inc compiled here (ymm.inc); integer decode (up to
 * DEC_BATCH tokens) is ymm_int.inc's kernel, the one avx2.c uses, with its integer dot
 * one vpdpbusd per 32 products (KVP_YMM_VNNI) in place of vpmaddubsw, int16 sums and
 * vpmaddwd; more tokens (prefill) take the AVX2 table's tile.  Both
 * dots are exact integer sums and the float steps are the same, so every weight type
 * gives the AVX2 table's bits.  Not run on any machine so far (the Zen 4 it was
 * written on has AVX-512 VNNI but not AVX-VNNI, and Debian 12's qemu-user 7.2 does not
 * emulate it): its speed is unmeasured.
 *
 * For the tests, meson.build also compiles this file with KVP_YMM_VNNI_EVEX and AVX-512
 * VL + VNNI: the same code with vpdpbusd's EVEX encoding (the same operation on ymm),
 * as the table kvp_kernels_avxvnni_evex, which test_kernels checks on CPUs with AVX-512
 * VNNI (Zen 4), so the AVX-VNNI code runs somewhere.  Not in the daemon.
 */
#include "compute/kernels/kernels.h"

#include <immintrin.h>
#include <string.h>

/* the activation formats of the AVX2 table, whose tile this one calls */
#define KVP_ACT_KQUANT KVP_ACT_Q8K
#include "compute/kernels/table.inc"

#include "compute/kernels/ymm.inc"

#define KVP_YMM_VNNI 1
#include "compute/kernels/ymm_int.inc"

/* float weights: as avx2.c */
/* integer weights: decode here, the tile through the AVX2 table (see the top of the file) */
#define VNNI_MATMUL(name, TYPE) \
	static void matmul_##name(float *restrict out, size_t ldo, const void *restrict w, \
				  size_t w_row_bytes, const void *restrict x, size_t x_row_bytes, \
				  size_t rows, size_t k, size_t o0, size_t o1) \
	{ \
		if (rows <= DEC_BATCH) \
			dec_matmul(out, ldo, w, w_row_bytes, x, x_row_bytes, rows, k, o0, o1, \
				   TYPE); \
		else \
			kvp_kernels_avx2.matmul[TYPE](out, ldo, w, w_row_bytes, x, x_row_bytes, \
						      rows, k, o0, o1); \
	}

VNNI_MATMUL(q8_0, KVP_GGML_Q8_0)
VNNI_MATMUL(q4_0, KVP_GGML_Q4_0)
VNNI_MATMUL(q4_1, KVP_GGML_Q4_1)
VNNI_MATMUL(q5_0, KVP_GGML_Q5_0)
VNNI_MATMUL(q5_1, KVP_GGML_Q5_1)
VNNI_MATMUL(q2_k, KVP_GGML_Q2_K)
VNNI_MATMUL(q3_k, KVP_GGML_Q3_K)
VNNI_MATMUL(q4_k, KVP_GGML_Q4_K)
VNNI_MATMUL(q5_k, KVP_GGML_Q5_K)
VNNI_MATMUL(q6_k, KVP_GGML_Q6_K)

KVP_REF_ACT(f32, KVP_ACT_F32)
KVP_REF_ACT(bf16, KVP_ACT_BF16)
KVP_REF_ACT(q8, KVP_ACT_Q8) /* as avx2.c: the reference quantizer */

KVP_REF_DEQUANT_INTEGER

#ifdef KVP_YMM_VNNI_EVEX
KVP_KERNEL_TABLE(avxvnni_evex, KVP_ISA_AVXVNNI);
#else
KVP_KERNEL_TABLE(avxvnni, KVP_ISA_AVXVNNI);
#endif
