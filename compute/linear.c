/* SPDX-License-Identifier: MIT */
/*
 * linear.c - projections over typed weights (see linear.h).
 *
 * Threads: a call is at most two fork-joins on the context's pool - one to convert
 * the input rows into the activation formats the matrices take (skipped when small or
 * f32 only), one for the matmuls, each thread taking a contiguous slice of every
 * matrix's output rows.  F32 matrices with many rows of input may go to OpenBLAS's
 * sgemm, on OpenBLAS's own threads.  A single row does not go to its sgemv: ours
 * streams the weights as fast (Zen 5: 89 vs 86 tokens/s on the demo model), and a
 * woken OpenBLAS thread spins ~0.1 s after each call, taking the CPU from our workers
 * in the next step (a decode step of one stream beside mixed steps).
 *
 * Whether sgemm beats our f32 kernel depends on the CPU and on the kernel OpenBLAS
 * picked for it (Debian 12's 0.3.21 runs its Haswell kernel on Zen 5, slower than ours
 * at every row count up to 512; on a CPU it knows it reaches most of the FMA peak), so
 * the row count from which it is used is measured once per process and kernel table,
 * at the first f32 call that could use it (blas_from()).
 */
#include "compute/linear.h"

#include <cblas.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compute/threads.h"
#include "util/time.h"

/* Up to this many rows an f32 projection always uses our kernel (a decode batch). */
#define LIN_GEMV_ROWS 16u

/* The measurement: a CAL_DIM x CAL_DIM matrix (larger than L2) at these row counts. */
#define CAL_DIM 2048u
#define CAL_ROWS_LO 64u
#define CAL_ROWS_HI 256u
#define CAL_MARGIN 1.1 /* sgemm must be this much faster to be chosen */

/*
 * A job that reads fewer bytes than this runs on the calling thread alone, without
 * waking our workers: waking a sleeping worker costs tens of microseconds, while two
 * threads beat one only from ~64 KiB of weights.
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
	l->blas_rows = 0; /* not measured yet: blas_from() */
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

static void blas(float *out, const float *x, const struct kvp_tensor *w, size_t rows)
{
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)w->ne1, (int)w->ne0,
		    1.0f, x, (int)w->ne0, w->data, (int)w->ne0, 0.0f, out, (int)w->ne1);
}

/* Our kernel over one f32 matrix on @l's threads (as kvp_lin_run() would run it). */
static void own_f32(struct kvp_lin *l, float *out, const float *x, const struct kvp_tensor *w,
		    size_t rows)
{
	struct lin_job j = { .k = l->k, .x = x, .rows = rows, .kin = w->ne0, .n_mats = 1 };

	j.m[0].out = out;
	j.m[0].w = w;
	j.m[0].xa = x;
	j.m[0].xs = w->ne0 * sizeof(float);
	kvp_threads_run(l->pool, mat_part, &j);
}

/* Best of 3 of one path at @rows rows of the calibration matrix: seconds. */
static double time_path(struct kvp_lin *l, int use_sgemm, float *out, const float *x,
			const struct kvp_tensor *w, size_t rows)
{
	double best = 0;

	for (int i = 0; i < 4; i++) { /* the first is a warm-up: threads, caches */
		uint64_t t0 = kvp_now_ns();
		double t;

		if (use_sgemm)
			blas(out, x, w, rows);
		else
			own_f32(l, out, x, w, rows);
		t = kvp_ns_to_s(kvp_now_ns() - t0);
		if (i && (!best || t < best))
			best = t;
	}
	return best;
}

/*
 * The row count above which f32 projections go to sgemm on @l's kernel table: measured
 * at CAL_ROWS_LO and CAL_ROWS_HI rows; SIZE_MAX when sgemm wins at neither (or the
 * scratch cannot be had: our kernel is always correct).  Once per process and
 * table: every forward context of it gets the same answer, so the same input gives the
 * same output in every context.
 */
static size_t blas_from(struct kvp_lin *l)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static struct {
		const struct kvp_kernels *k;
		size_t rows;
	} seen[8];
	static unsigned n_seen;
	size_t rows = SIZE_MAX;
	float *wd = NULL, *x = NULL, *out = NULL;
	struct kvp_tensor w;
	unsigned i;

	pthread_mutex_lock(&lock);
	for (i = 0; i < n_seen; i++)
		if (seen[i].k == l->k) {
			rows = seen[i].rows;
			goto out;
		}
	wd = aligned_alloc(64, (size_t)CAL_DIM * CAL_DIM * sizeof(float));
	x = aligned_alloc(64, (size_t)CAL_ROWS_HI * CAL_DIM * sizeof(float));
	out = aligned_alloc(64, (size_t)CAL_ROWS_HI * CAL_DIM * sizeof(float));
	if (wd && x && out) {
		for (size_t e = 0; e < (size_t)CAL_DIM * CAL_DIM; e++)
			wd[e] = (float)((e * 2654435761u) % 2001) * 1e-3f - 1.0f;
		for (size_t e = 0; e < (size_t)CAL_ROWS_HI * CAL_DIM; e++)
			x[e] = (float)((e * 40503u) % 1001) * 1e-3f - 0.5f;
		w = (struct kvp_tensor){ .type = KVP_GGML_F32,
					 .data = wd,
					 .ne0 = CAL_DIM,
					 .ne1 = CAL_DIM,
					 .row_bytes = CAL_DIM * sizeof(float) };
		if (time_path(l, 0, out, x, &w, CAL_ROWS_LO) >
		    CAL_MARGIN * time_path(l, 1, out, x, &w, CAL_ROWS_LO))
			rows = LIN_GEMV_ROWS;
		else if (time_path(l, 0, out, x, &w, CAL_ROWS_HI) >
			 CAL_MARGIN * time_path(l, 1, out, x, &w, CAL_ROWS_HI))
			rows = (CAL_ROWS_LO + CAL_ROWS_HI) / 2;
		/* OpenBLAS's threads spin for ~0.1 s after a call: not into the caller's step */
		if (rows == SIZE_MAX)
			nanosleep(&(struct timespec){ .tv_nsec = 150000000 }, NULL);
		/* remembered only when measured: no memory now is not the answer for good */
		if (n_seen < sizeof(seen) / sizeof(seen[0]))
			seen[n_seen++] = (typeof(seen[0])){ .k = l->k, .rows = rows };
	}
out:
	pthread_mutex_unlock(&lock);
	free(wd);
	free(x);
	free(out);
	return rows;
}

int kvp_lin_f32_gemm(void)
{
	static const char *const names[] = {
		[KVP_F32_GEMM_AUTO] = "auto",
		[KVP_F32_GEMM_KVPOOL] = "kvpool",
		[KVP_F32_GEMM_OPENBLAS] = "openblas",
	};
	const char *v = getenv("KVP_F32_GEMM");

	if (!v || !*v)
		return KVP_F32_GEMM_AUTO;
	for (int i = 0; i < (int)(sizeof(names) / sizeof(names[0])); i++)
		if (!strcmp(v, names[i]))
			return i;
	return -EINVAL;
}

size_t kvp_lin_blas_rows(struct kvp_lin *l)
{
	if (!l->blas_rows) {
		switch (kvp_lin_f32_gemm()) {
		case KVP_F32_GEMM_KVPOOL:
			l->blas_rows = SIZE_MAX;
			break;
		case KVP_F32_GEMM_OPENBLAS:
			l->blas_rows = LIN_GEMV_ROWS;
			break;
		default: /* auto; kvp_fwd_new() refused another value */
			l->blas_rows = blas_from(l);
		}
	}
	return l->blas_rows;
}

void kvp_lin_set_blas_rows(struct kvp_lin *l, size_t rows)
{
	l->blas_rows = rows < LIN_GEMV_ROWS ? LIN_GEMV_ROWS : rows;
}

/* f32 weights where OpenBLAS's sgemm was measured faster (blas_from()) */
static int use_blas(struct kvp_lin *l, const struct kvp_tensor *w, size_t rows)
{
	return w->type == KVP_GGML_F32 && rows > LIN_GEMV_ROWS && rows > kvp_lin_blas_rows(l);
}

void kvp_lin_run(struct kvp_lin *l, const float *x, size_t rows, unsigned n, float *const *outs,
		 const struct kvp_tensor *const *ws)
{
	struct lin_job j = { .k = l->k, .x = x, .rows = rows, .kin = ws[0]->ne0 };
	size_t bytes = 0;

	for (unsigned q = 0; q < n; q++) {
		const struct kvp_tensor *w = ws[q];
		uint32_t act = l->k->act[w->type];
		uint32_t a;

		if (use_blas(l, w, rows)) {
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
