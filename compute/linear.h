/* SPDX-License-Identifier: MIT */
/*
 * linear.h - projections over typed weights: out = x @ W^T for one or several matrices
 * that share an input, in whatever GGUF type each matrix has.
 *
 * The input rows are converted once per call into each activation format the matrices
 * take (quant.h: int8 blocks for the integer types, bf16 for BF16, f32 as is), then
 * the output rows of all matrices are split over the thread pool and each slice runs
 * the kernel table's matmul for the matrix's type.  F32 weights with many rows go to
 * OpenBLAS's sgemm instead when it was measured faster on this CPU (once per process,
 * kvp_lin_blas_rows(); docs/compute.md).
 * Jobs too small for a fork-join run on the calling thread alone, so neither our
 * workers nor OpenBLAS's are woken for a tiny model's 1-token request.
 *
 * A struct kvp_lin belongs to one forward context (one thread at a time) and holds the
 * activation scratch, sized at init: nothing allocates per call.
 */
#ifndef KVP_COMPUTE_LINEAR_H
#define KVP_COMPUTE_LINEAR_H

#include <stddef.h>
#include <stdint.h>

#include "compute/kernels/kernels.h"
#include "compute/model.h"

struct kvp_threads;

/* Most matrices one kvp_lin_run() call takes (Q/K/V share an input). */
#define KVP_LIN_MATS_MAX 3

/**
 * struct kvp_lin - the projection engine of one forward context
 * @k:        the kernel table (borrowed, static)
 * @pool:     the context's threads (borrowed)
 * @rows_max: most input rows per call
 * @k_max:    longest input row
 * @blas_rows: f32 calls of more rows than this go to sgemm (0: not measured yet)
 * @act:      per enum kvp_act, rows_max rows of k_max elements in that format
 */
struct kvp_lin {
	const struct kvp_kernels *k;
	struct kvp_threads *pool;
	size_t rows_max;
	size_t k_max;
	size_t blas_rows;
	void *act[KVP_ACT__COUNT];
};

/**
 * kvp_lin_init() - size the scratch
 * @l:        out; released with kvp_lin_deinit() (also after a failed init)
 * @k, @pool: kernels and threads (borrowed; must outlive @l)
 * @rows_max, @k_max: the largest call
 *
 * Return: 0 or -ENOMEM.
 */
int kvp_lin_init(struct kvp_lin *l, const struct kvp_kernels *k, struct kvp_threads *pool,
		 size_t rows_max, size_t k_max);

/* kvp_lin_deinit() - free the scratch; safe on a zeroed or failed @l. */
void kvp_lin_deinit(struct kvp_lin *l);

/**
 * kvp_lin_run() - out_i (rows, W_i.ne1) = x (rows, W_i.ne0) @ W_i^T, i < @n
 * @x:    (rows, k) f32 input, row stride k; k = every W_i's ne0 (<= k_max)
 * @rows: 1 .. rows_max
 * @n:    1 .. KVP_LIN_MATS_MAX matrices sharing the input (one fork-join for all)
 * @outs: @n outputs, row stride W_i.ne1; must not alias @x
 * @ws:   @n matrices (borrowed)
 */
void kvp_lin_run(struct kvp_lin *l, const float *x, size_t rows, unsigned n, float *const *outs,
		 const struct kvp_tensor *const *ws);

/* What KVP_F32_GEMM asks of f32 projections of more than 16 rows. */
enum kvp_f32_gemm {
	KVP_F32_GEMM_AUTO,     /* unset, empty or "auto": the faster, measured */
	KVP_F32_GEMM_KVPOOL,   /* "kvpool": our kernel */
	KVP_F32_GEMM_OPENBLAS, /* "openblas": OpenBLAS's sgemm */
};

/**
 * kvp_lin_f32_gemm() - read KVP_F32_GEMM
 *
 * A measured choice can differ between processes (a loaded machine), and the two paths
 * sum in different orders: fixing it makes f32 results bit-identical between processes.
 * Return: enum kvp_f32_gemm, or -EINVAL for another value.
 */
int kvp_lin_f32_gemm(void);

/**
 * kvp_lin_blas_rows() - the row count above which f32 projections go to sgemm
 *
 * KVP_F32_GEMM=kvpool: SIZE_MAX; =openblas: 16.  Otherwise measured at the first call
 * (tens of ms: sgemm against our kernel on a 2048 x 2048 matrix at 64 and 256 rows),
 * then the same for every context of the process with the same kernel table.
 * Return: 16 .. SIZE_MAX (never).
 */
size_t kvp_lin_blas_rows(struct kvp_lin *l);

/* kvp_lin_set_blas_rows() - use sgemm above @rows (>= 16) instead: tests of both paths. */
void kvp_lin_set_blas_rows(struct kvp_lin *l, size_t rows);

#endif /* KVP_COMPUTE_LINEAR_H */
