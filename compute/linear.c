/* SPDX-License-Identifier: MIT */
/*
 * linear.c - projections over typed weights (see linear.h).
 *
 * Threads: a call is at most two fork-joins on the context's pool - one to convert
 * the input rows into the activation formats the matrices take (skipped when small or
 * f32 only), one for the matmuls, each thread taking a contiguous slice of every
 * matrix's output rows.  F32 matrices with more than LIN_GEMV_ROWS rows of input go to
 * OpenBLAS's sgemm (prefill: it reaches most of the FMA peak), and a single row of a
 * large f32 matrix to its sgemv, both on OpenBLAS's own threads.
 */
#include "compute/linear.h"

#include <cblas.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compute/threads.h"

/* Up to this many rows an f32 projection uses our kernel (docs/compute.md, Threads). */
#define LIN_GEMV_ROWS 16u

/*
 * A job (or a one-row f32 projection) that reads fewer bytes than this runs on the
 * calling thread alone, without waking our workers or OpenBLAS's: waking a sleeping
 * worker costs tens of microseconds and a woken OpenBLAS thread then spins on
 * sched_yield for ~0.1 s, while two threads beat one only from ~64 KiB of weights.
 */
#define POOL_MIN_BYTES ((size_t)256 << 10)

/* Converting fewer input elements than this stays on the caller. */
#define ACT_POOL_MIN ((size_t)1 << 16)

int kvp_lin_init(struct kvp_lin *l, const struct kvp_kernels *k, struct kvp_threads *pool,
		 size_t rows_max, size_t k_max)
{
	memset(l, 0, sizeof(*l));
	l->k = k;
	l->pool = pool;
	l->rows_max = rows_max;
	l->k_max = k_max;
	for (uint32_t a = 0; a < KVP_ACT__COUNT; a++) {
		/* rows rounded to whole blocks: a row is a multiple of its format's block */
		size_t kb = (k_max + KVP_QK_K - 1) / KVP_QK_K * KVP_QK_K;
		size_t bytes = rows_max * kvp_act_row_bytes(a, kb);

		if (a == KVP_ACT_F32)
			continue; /* f32 weights read the input in place */
		l->act[a] = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
		if (!l->act[a])
			return -ENOMEM;
	}
	return 0;
}

void kvp_lin_deinit(struct kvp_lin *l)
{
	for (uint32_t a = 0; a < KVP_ACT__COUNT; a++)
		free(l->act[a]);
	memset(l->act, 0, sizeof(l->act));
}

struct lin_job {
	const struct kvp_kernels *k;
	const float *x; /* (rows, kin) */
	size_t rows, kin;
	unsigned n_mats;
	struct {
		float *out;
		const struct kvp_tensor *w;
		const void *xa; /* input rows in the matrix's activation format */
		size_t xs;	/* their stride */
	} m[KVP_LIN_MATS_MAX];
	/* activation formats to fill before the matmuls */
	uint32_t n_acts;
	uint32_t acts[KVP_LIN_MATS_MAX];
	void *act_buf[KVP_LIN_MATS_MAX];
};

/* Thread @i of @n: input rows [i, i+1) * rows / n into every format the job needs. */
static void act_part(void *arg, unsigned int i, unsigned int n)
{
	const struct lin_job *j = arg;
	size_t r0 = j->rows * i / n, r1 = j->rows * (i + 1) / n;

	for (uint32_t a = 0; a < j->n_acts; a++) {
		size_t xs = kvp_act_row_bytes(j->acts[a], j->kin);

		for (size_t r = r0; r < r1; r++)
			j->k->quant_act[j->acts[a]]((uint8_t *)j->act_buf[a] + r * xs,
						    j->x + r * j->kin, j->kin);
	}
}

/* Thread @i of @n: output rows [i, i+1) * d_out / n of every matrix, all input rows. */
static void mat_part(void *arg, unsigned int i, unsigned int n)
{
	const struct lin_job *j = arg;

	for (unsigned int q = 0; q < j->n_mats; q++) {
		const struct kvp_tensor *w = j->m[q].w;
		size_t d_out = w->ne1;
		size_t o0 = d_out * i / n / 16 * 16;
		size_t o1 = i + 1 == n ? d_out : d_out * (i + 1) / n / 16 * 16;

		if (o1 > o0)
			j->k->matmul[w->type](j->m[q].out, d_out, w->data, w->row_bytes, j->m[q].xa,
					      j->m[q].xs, j->rows, j->kin, o0, o1);
	}
}

/* f32 weights where OpenBLAS is faster: prefill chunks, and one row of a big matrix */
static int use_blas(const struct kvp_tensor *w, size_t rows)
{
	return w->type == KVP_GGML_F32 &&
	       (rows > LIN_GEMV_ROWS || (rows == 1 && w->row_bytes * w->ne1 >= POOL_MIN_BYTES));
}

static void blas(float *out, const float *x, const struct kvp_tensor *w, size_t rows)
{
	if (rows == 1)
		cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)w->ne1, (int)w->ne0, 1.0f, w->data,
			    (int)w->ne0, x, 1, 0.0f, out, 1);
	else
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)w->ne1,
			    (int)w->ne0, 1.0f, x, (int)w->ne0, w->data, (int)w->ne0, 0.0f, out,
			    (int)w->ne1);
}

void kvp_lin_run(struct kvp_lin *l, const float *x, size_t rows, unsigned n, float *const *outs,
		 const struct kvp_tensor *const *ws)
{
	struct lin_job j = { .k = l->k, .x = x, .rows = rows, .kin = ws[0]->ne0 };
	size_t bytes = 0;

	for (unsigned q = 0; q < n; q++) {
		const struct kvp_tensor *w = ws[q];
		uint32_t act = kvp_qtype(w->type)->act;
		uint32_t a;

		if (use_blas(w, rows)) {
			blas(outs[q], x, w, rows);
			continue;
		}
		bytes += w->row_bytes * w->ne1;
		j.m[j.n_mats].out = outs[q];
		j.m[j.n_mats].w = w;
		if (act == KVP_ACT_F32) {
			j.m[j.n_mats].xa = x;
			j.m[j.n_mats].xs = j.kin * sizeof(float);
		} else {
			for (a = 0; a < j.n_acts && j.acts[a] != act; a++)
				;
			if (a == j.n_acts) {
				j.acts[j.n_acts] = act;
				j.act_buf[j.n_acts++] = l->act[act];
			}
			j.m[j.n_mats].xa = l->act[act];
			j.m[j.n_mats].xs = kvp_act_row_bytes(act, j.kin);
		}
		j.n_mats++;
	}
	if (!j.n_mats)
		return;
	if (j.n_acts) {
		if (rows * j.kin < ACT_POOL_MIN)
			act_part(&j, 0, 1);
		else
			kvp_threads_run(l->pool, act_part, &j);
	}
	if (bytes < POOL_MIN_BYTES)
		mat_part(&j, 0, 1);
	else
		kvp_threads_run(l->pool, mat_part, &j);
}
