/* SPDX-License-Identifier: MIT */
/*
 * kernels.h - the numeric building blocks: type conversion (F16, BF16, Q8_0 to f32 and
 * back for K/V), RMSNorm, RoPE, softmax, SwiGLU, dot/axpy, and the linear layer over
 * OpenBLAS.  Plain C with restrict pointers; every argument states its shape.
 * Stateless and thread-safe.
 */
#ifndef KVP_COMPUTE_KERNELS_H
#define KVP_COMPUTE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* Q8_0: blocks of 32 int8 with one f16 scale (the GGML layout: 34 bytes). */
#define KVP_Q8_0_BLOCK 32
#define KVP_Q8_0_BYTES 34

/* One IEEE binary16 / bfloat16 value to f32, exactly. */
float kvp_f16_to_f32(uint16_t h);
float kvp_bf16_to_f32(uint16_t b);

/* f32 to binary16 / bfloat16, round to nearest even; NaN stays NaN, overflow is inf. */
uint16_t kvp_f32_to_f16(float f);
uint16_t kvp_f32_to_bf16(float f);

/**
 * kvp_dequant() - @n elements of GGML type @type at @src to f32 at @dst
 * @type: KVP_GGML_F32, F16, BF16 or Q8_0 (n a multiple of 32 for Q8_0)
 * Return: 0, or -ENOTSUP for another type.
 */
int kvp_dequant(float *restrict dst, const void *restrict src, uint32_t type, size_t n);

/*
 * K/V element conversion: store @n f32 as enum kvp_dtype @dtype at @dst, or load them
 * back.  The caller has validated @dtype.
 */
void kvp_kv_store(void *restrict dst, uint32_t dtype, const float *restrict src, size_t n);
void kvp_kv_load(float *restrict dst, const void *restrict src, uint32_t dtype, size_t n);

/* out (n) = x (n) / rms(x) * w (n); out may equal x. */
void kvp_rmsnorm(float *out, const float *x, const float *restrict w, size_t n, float eps);

/*
 * kvp_rope_table() - cos/sin for one position: cs[2i] = cos(pos * base^(-2i/n_rot)),
 * cs[2i+1] = sin(...), i < n_rot / 2.  Computed in double.
 */
void kvp_rope_table(float *restrict cs, uint32_t pos, uint32_t n_rot, float base);

/*
 * kvp_rope_apply() - rotate the pairs (2i, 2i+1), i < n_rot / 2, of each of @n_heads
 * heads of @head_dim at @x by the angles of @cs (the GGUF "llama" RoPE layout).
 */
void kvp_rope_apply(float *restrict x, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot,
		    const float *restrict cs);

/* x (n) = softmax(x), max-subtracted; sums in double. */
void kvp_softmax(float *x, size_t n);

/* gate (n) = silu(gate) * up. */
void kvp_swiglu(float *restrict gate, const float *restrict up, size_t n);

/* sum a[i] * b[i], i < n. */
float kvp_dot(const float *restrict a, const float *restrict b, size_t n);

/* y (n) += a * x (n). */
void kvp_axpy(float *restrict y, float a, const float *restrict x, size_t n);

/**
 * kvp_linear() - out (rows, d_out) = x (rows, d_in) @ W^T, W row-major (d_out, d_in)
 *
 * One row goes through cblas_sgemv (it streams W at the memory bandwidth); several
 * through one cblas_sgemm.
 */
void kvp_linear(float *restrict out, const float *restrict x, const float *restrict w,
		size_t rows, size_t d_out, size_t d_in);

/* Most rows kvp_gemv_rows() takes: a decode batch is done in groups of this many. */
#define KVP_GEMV_ROWS_MAX 8

/**
 * kvp_gemv_rows() - out (rows, d_out) = x (rows, d_in) @ W^T for outputs [o0, o1) only
 * @rows: 1 .. KVP_GEMV_ROWS_MAX
 *
 * The decode kernel: each weight row is read from memory once and used for all
 * @rows inputs (OpenBLAS's sgemm reads W several times slower at small M, and sgemv
 * takes one input).  Threads split [0, d_out) into disjoint [o0, o1).
 */
void kvp_gemv_rows(float *restrict out, const float *restrict x, const float *restrict w,
		   size_t rows, size_t d_out, size_t d_in, size_t o0, size_t o1);

#endif /* KVP_COMPUTE_KERNELS_H */
