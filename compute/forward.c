/* SPDX-License-Identifier: MIT */
/*
 * forward.c - the fast forward pass over pool blocks.
 *
 * Prefill and decode share one path: a set of "rows" (token, position) grouped into
 * sequences (a run of consecutive positions with one block table).  Prefill is one
 * sequence of n rows; decode is n sequences of one row each.  Per layer: RMSNorm, the
 * Q/K/V projections over all rows at once (one GEMM each), RoPE, K/V written into the
 * blocks of their positions, attention per sequence through its block table, the
 * output projection, then the SwiGLU FFN, again one GEMM per matrix for all rows.
 *
 * Invariants: every argument is validated before anything is written, so -EINVAL
 * leaves the blocks untouched; all scratch is allocated in kvp_fwd_new().  A context
 * is used by one thread at a time (the engine thread).
 *
 * Threads (n_threads in all): a matrix product over more than GEMV_ROWS_LIMIT rows
 * (prefill chunks) is one cblas_sgemm on OpenBLAS's threads, which reaches most of the
 * FMA peak there.  Up to GEMV_ROWS_LIMIT rows (decode batches) go through our
 * kvp_gemv_rows() split by output rows over our own pool, because decode is bound by
 * reading the weights and OpenBLAS's sgemm reads them several times slower at small M
 * while its sgemv takes only one input row.  Attention runs on our pool too, split
 * by (sequence, kv head), since OpenBLAS has nothing for it.  A job too small to pay
 * for a fork-join (POOL_MIN_BYTES: every matrix of a tiny model, short attention)
 * runs on the calling thread alone, with our kernel even for one row, so neither our
 * workers nor OpenBLAS's are woken: a woken OpenBLAS thread spins on sched_yield for
 * ~0.1 s afterwards, which a daemon answering 1-token requests paid in full.
 */
#include "compute/forward.h"

#include <cblas.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compute/attn.h"
#include "compute/kernels.h"
#include "compute/model.h"
#include "compute/threads.h"

/* Larger contexts are configuration mistakes (scratch would run into gigabytes). */
#define ROWS_MAX 8192u

/* Up to this many rows a projection uses kvp_gemv_rows() (measured: bench_decode). */
#define GEMV_ROWS_LIMIT 16u

/*
 * A pool job (or a one-row projection) that reads fewer bytes than this runs on the
 * calling thread alone, without waking our workers or OpenBLAS's.  Measured with L2-hot
 * weights: two threads beat one only from ~64 KiB at one row, and then by about a
 * microsecond, while waking a sleeping worker across vCPUs costs tens of microseconds
 * and a woken OpenBLAS thread then spins on sched_yield for ~0.1 s.  Every matrix of
 * the tiny model (a 1-token daemon request) is below it, every one of demo's above.
 */
#define POOL_MIN_BYTES ((size_t)256 << 10)

struct fwd_seq {
	const uint32_t *table;
	uint32_t pos0;
	uint32_t n;
	uint32_t row0;
};

struct kvp_fwd {
	const struct kvp_model *m;
	const struct kvp_model_hparams *hp;
	const struct kvp_weights *w;
	struct kvp_fwd_opts o;
	uint32_t rows_max;
	float *x;	/* (rows, n_embd) residual stream */
	float *xn;	/* (rows, n_embd) normed input / projection output */
	float *q;	/* (rows, n_heads * head_dim) */
	float *k, *v;	/* (rows, n_kv_heads * head_dim) */
	float *att;	/* (rows, n_heads * head_dim) */
	float *hb, *hb2;	/* (rows, n_ff) */
	float *rope;	/* (rows, n_rot) cos/sin per row */
	int32_t *tok;	/* (rows) */
	uint32_t *pos;	/* (rows) */
	struct fwd_seq *seqs;	/* (max_batch) */
	struct kvp_attn_scratch *as;	/* (n_threads), ml shared: heads are disjoint */
	float *ml;
	struct kvp_threads *pool;
	/* the job being run on the pool */
	const struct kvp_kv_view *job_kv;
	uint32_t job_layer, job_seqs;
};

static float *falloc(size_t n)
{
	return aligned_alloc(64, ((n ? n : 1) * sizeof(float) + 63) & ~(size_t)63);
}

/* Blocks up to this many tokens need no reallocation of the attention scratch. */
#define BT_SCRATCH_MAX 1024u

int kvp_fwd_new(struct kvp_fwd **out, const struct kvp_model *m, const struct kvp_fwd_opts *o)
{
	const struct kvp_model_hparams *hp = kvp_model_hparams(m);
	struct kvp_fwd *f;
	size_t r, qd = (size_t)hp->n_heads * hp->head_dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim;

	*out = NULL;
	if (!o->n_threads || o->n_threads > 256 || !o->max_chunk || !o->max_batch ||
	    o->max_chunk > ROWS_MAX || o->max_batch > ROWS_MAX)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->m = m;
	f->hp = hp;
	f->w = kvp_model_weights(m);
	f->o = *o;
	r = f->rows_max = o->max_chunk > o->max_batch ? o->max_chunk : o->max_batch;
	f->x = falloc(r * hp->n_embd);
	f->xn = falloc(r * hp->n_embd);
	f->q = falloc(r * qd);
	f->k = falloc(r * kvd);
	f->v = falloc(r * kvd);
	f->att = falloc(r * qd);
	f->hb = falloc(r * hp->n_ff);
	f->hb2 = falloc(r * hp->n_ff);
	f->rope = falloc(r * hp->n_rot);
	f->tok = malloc(r * sizeof(*f->tok));
	f->pos = malloc(r * sizeof(*f->pos));
	f->seqs = malloc(o->max_batch * sizeof(*f->seqs));
	f->ml = falloc(2 * r * hp->n_heads);
	f->as = calloc(o->n_threads, sizeof(*f->as));
	if (!f->x || !f->xn || !f->q || !f->k || !f->v || !f->att || !f->hb || !f->hb2 ||
	    !f->rope || !f->tok || !f->pos || !f->seqs || !f->ml || !f->as ||
	    kvp_threads_new(&f->pool, o->n_threads)) {
		kvp_fwd_free(f);
		return -ENOMEM;
	}
	for (uint32_t t = 0; t < o->n_threads; t++) {
		f->as[t].ml = f->ml;
		f->as[t].kbuf = falloc((size_t)BT_SCRATCH_MAX * hp->head_dim);
		f->as[t].vbuf = falloc((size_t)BT_SCRATCH_MAX * hp->head_dim);
		f->as[t].sbuf = falloc(BT_SCRATCH_MAX);
		if (!f->as[t].kbuf || !f->as[t].vbuf || !f->as[t].sbuf) {
			kvp_fwd_free(f);
			return -ENOMEM;
		}
	}
	/* process-wide: OpenBLAS has one thread pool */
	openblas_set_num_threads((int)o->n_threads);
	*out = f;
	return 0;
}

void kvp_fwd_free(struct kvp_fwd *f)
{
	if (!f)
		return;
	free(f->x);
	free(f->xn);
	free(f->q);
	free(f->k);
	free(f->v);
	free(f->att);
	free(f->hb);
	free(f->hb2);
	free(f->rope);
	free(f->tok);
	free(f->pos);
	free(f->seqs);
	kvp_threads_free(f->pool);
	for (uint32_t t = 0; f->as && t < f->o.n_threads; t++) {
		free(f->as[t].kbuf);
		free(f->as[t].vbuf);
		free(f->as[t].sbuf);
	}
	free(f->as);
	free(f->ml);
	free(f);
}

int kvp_fwd_check_view(const struct kvp_fwd *f, const struct kvp_kv_view *kv)
{
	const struct kvp_model_shape *s = &kv->geom.shape;

	if (!kv->base || s->n_layers != f->hp->n_layers || s->n_kv_heads != f->hp->n_kv_heads ||
	    s->head_dim != f->hp->head_dim || s->dtype >= KVP_DTYPE__COUNT ||
	    !s->block_tokens || s->block_tokens > BT_SCRATCH_MAX ||
	    kv->geom.elem_bytes != kvp_dtype_bytes(s->dtype) ||
	    kv->geom.head_bytes != (size_t)s->block_tokens * s->head_dim * kv->geom.elem_bytes ||
	    kv->geom.block_stride < kv->geom.block_bytes)
		return -EINVAL;
	return 0;
}

/* Do @table's first entries cover positions 0 .. end - 1 with valid block ids? */
static int check_table(const struct kvp_kv_view *kv, const uint32_t *table, uint32_t n_table,
		       uint64_t end)
{
	uint64_t need = (end + kv->geom.shape.block_tokens - 1) / kv->geom.shape.block_tokens;

	if (!table || need > n_table)
		return -EINVAL;
	for (uint64_t i = 0; i < need; i++)
		if (table[i] >= kv->n_blocks)
			return -EINVAL;
	return 0;
}

/* Write K and V of row @r (position @pos) of layer @l into its block. */
static void store_kv(struct kvp_fwd *f, const struct kvp_kv_view *kv, const uint32_t *table,
		     uint32_t l, uint32_t r, uint32_t pos)
{
	const struct kvp_geom *g = &kv->geom;
	uint32_t bt = g->shape.block_tokens, hd = g->shape.head_dim;
	uint8_t *blk = kvp_kv_block(kv, table[pos / bt]);
	size_t row_off = (size_t)(pos % bt) * hd * g->elem_bytes;
	size_t kvd = (size_t)g->shape.n_kv_heads * hd;

	for (uint32_t h = 0; h < g->shape.n_kv_heads; h++) {
		kvp_kv_store(blk + kvp_geom_run_offset(g, l, 0, h) + row_off, g->shape.dtype,
			     f->k + r * kvd + (size_t)h * hd, hd);
		kvp_kv_store(blk + kvp_geom_run_offset(g, l, 1, h) + row_off, g->shape.dtype,
			     f->v + r * kvd + (size_t)h * hd, hd);
	}
}

/* Up to three matrices that share one input: Q/K/V, or gate/up (one pool job for all). */
#define LINEAR_MATS_MAX 3

struct linear_job {
	const float *x;		/* (rows, d_in) */
	size_t rows, d_in;
	unsigned int n_mats;
	struct {
		float *out;	/* (rows, d_out) */
		const float *w;	/* (d_out, d_in) */
		size_t d_out;
	} m[LINEAR_MATS_MAX];
};

/* Thread @i of @n: outputs [i, i+1) * d_out / n (rounded to 16) of each matrix, all rows. */
static void linear_part(void *arg, unsigned int i, unsigned int n)
{
	const struct linear_job *j = arg;

	for (unsigned int k = 0; k < j->n_mats; k++) {
		size_t d_out = j->m[k].d_out;
		size_t o0 = d_out * i / n / 16 * 16;
		size_t o1 = i + 1 == n ? d_out : d_out * (i + 1) / n / 16 * 16;

		for (size_t r = 0; r < j->rows; r += KVP_GEMV_ROWS_MAX) {
			size_t g = j->rows - r < KVP_GEMV_ROWS_MAX ? j->rows - r : KVP_GEMV_ROWS_MAX;

			kvp_gemv_rows(j->m[k].out + r * d_out, j->x + r * j->d_in, j->m[k].w, g,
				      d_out, j->d_in, o0, o1);
		}
	}
}

/*
 * out_k (rows, d_out_k) = x (rows, d_in) @ W_k^T for the @j->n_mats matrices of @j: see
 * the threads note at the top.  On the pool the matrices are one job, so one fork-join
 * covers Q, K and V (or gate and up) instead of one each.
 */
static void linear_multi(struct kvp_fwd *f, struct linear_job *j)
{
	size_t bytes = 0;

	for (unsigned int k = 0; k < j->n_mats; k++)
		bytes += j->m[k].d_out * j->d_in * sizeof(float);
	if (j->rows <= GEMV_ROWS_LIMIT && bytes < POOL_MIN_BYTES) {
		linear_part(j, 0, 1);
		return;
	}
	if (j->rows == 1 || j->rows > GEMV_ROWS_LIMIT) {
		for (unsigned int k = 0; k < j->n_mats; k++)
			kvp_linear(j->m[k].out, j->x, j->m[k].w, j->rows, j->m[k].d_out, j->d_in);
		return;
	}
	kvp_threads_run(f->pool, linear_part, j);
}

static void linear(struct kvp_fwd *f, float *out, const float *x, const float *w, size_t rows,
		   size_t d_out, size_t d_in)
{
	struct linear_job j = { .x = x, .rows = rows, .d_in = d_in, .n_mats = 1,
				.m = { { out, w, d_out } } };

	linear_multi(f, &j);
}

/* Thread @i of @n: attention units (sequence, kv head) i, i + n, ... */
static void attn_part(void *arg, unsigned int i, unsigned int n)
{
	struct kvp_fwd *f = arg;
	const struct kvp_model_hparams *hp = f->hp;
	size_t qd = (size_t)hp->n_heads * hp->head_dim;

	for (uint32_t u = i; u < f->job_seqs * hp->n_kv_heads; u += n) {
		const struct fwd_seq *sq = &f->seqs[u / hp->n_kv_heads];
		uint32_t kh = u % hp->n_kv_heads;

		kvp_attn(f->att + (size_t)sq->row0 * qd, f->q + (size_t)sq->row0 * qd, f->job_kv,
			 sq->table, f->job_layer, sq->pos0, sq->n, hp->n_heads, kh, kh + 1, &f->as[i]);
	}
}

/* K/V bytes attention reads for the rows in f->seqs (each sequence reads its history). */
static size_t attn_bytes(const struct kvp_fwd *f, const struct kvp_kv_view *kv, uint32_t n_seqs)
{
	size_t toks = 0;

	for (uint32_t s = 0; s < n_seqs; s++)
		toks += (size_t)f->seqs[s].n * (f->seqs[s].pos0 + f->seqs[s].n);
	return toks * 2 * f->hp->n_kv_heads * f->hp->head_dim * kv->geom.elem_bytes;
}

/*
 * Run all f->tok/f->pos rows (grouped in f->seqs) through the layers; then logits for
 * rows [out_row0, out_row0 + n_out) into @logits.
 */
static void run(struct kvp_fwd *f, const struct kvp_kv_view *kv, uint32_t rows,
		uint32_t n_seqs, uint32_t out_row0, uint32_t n_out, float *logits)
{
	const struct kvp_model_hparams *hp = f->hp;
	const struct kvp_weights *w = f->w;
	size_t E = hp->n_embd, qd = (size_t)hp->n_heads * hp->head_dim;
	size_t kvd = (size_t)hp->n_kv_heads * hp->head_dim, F = hp->n_ff;

	for (uint32_t r = 0; r < rows; r++) {
		memcpy(f->x + r * E, w->tok_embd + (size_t)f->tok[r] * E, E * sizeof(float));
		kvp_rope_table(f->rope + (size_t)r * hp->n_rot, f->pos[r], hp->n_rot, hp->rope_base);
	}
	for (uint32_t l = 0; l < hp->n_layers; l++) {
		const struct kvp_layer_weights *L = &w->layers[l];

		for (uint32_t r = 0; r < rows; r++)
			kvp_rmsnorm(f->xn + r * E, f->x + r * E, L->attn_norm, E, hp->rms_eps);
		linear_multi(f, &(struct linear_job){ .x = f->xn, .rows = rows, .d_in = E, .n_mats = 3,
			.m = { { f->q, L->wq, qd }, { f->k, L->wk, kvd }, { f->v, L->wv, kvd } } });
		for (uint32_t s = 0; s < n_seqs; s++) {
			const struct fwd_seq *sq = &f->seqs[s];

			for (uint32_t i = 0; i < sq->n; i++) {
				uint32_t r = sq->row0 + i;
				const float *cs = f->rope + (size_t)r * hp->n_rot;

				kvp_rope_apply(f->q + r * qd, hp->n_heads, hp->head_dim, hp->n_rot, cs);
				kvp_rope_apply(f->k + r * kvd, hp->n_kv_heads, hp->head_dim, hp->n_rot, cs);
				store_kv(f, kv, sq->table, l, r, sq->pos0 + i);
			}
		}
		f->job_kv = kv;
		f->job_layer = l;
		f->job_seqs = n_seqs;
		if (attn_bytes(f, kv, n_seqs) < POOL_MIN_BYTES)
			attn_part(f, 0, 1);
		else
			kvp_threads_run(f->pool, attn_part, f);
		linear(f, f->xn, f->att, L->wo, rows, E, qd);
		for (size_t i = 0; i < rows * E; i++)
			f->x[i] += f->xn[i];

		for (uint32_t r = 0; r < rows; r++)
			kvp_rmsnorm(f->xn + r * E, f->x + r * E, L->ffn_norm, E, hp->rms_eps);
		linear_multi(f, &(struct linear_job){ .x = f->xn, .rows = rows, .d_in = E, .n_mats = 2,
			.m = { { f->hb, L->w_gate, F }, { f->hb2, L->w_up, F } } });
		kvp_swiglu(f->hb, f->hb2, rows * F);
		linear(f, f->xn, f->hb, L->w_down, rows, E, F);
		for (size_t i = 0; i < rows * E; i++)
			f->x[i] += f->xn[i];
	}
	for (uint32_t r = out_row0; r < out_row0 + n_out; r++)
		kvp_rmsnorm(f->xn + r * E, f->x + r * E, w->output_norm, E, hp->rms_eps);
	linear(f, logits, f->xn + (size_t)out_row0 * E, w->output, n_out, hp->n_vocab, E);
}

int kvp_fwd_prefill(struct kvp_fwd *f, const struct kvp_kv_view *kv, const uint32_t *table,
		    uint32_t n_table, uint32_t n_past, const int32_t *tokens, uint32_t n,
		    float *logits, int all_logits)
{
	if (!n || n > f->o.max_chunk || !tokens || !logits || kvp_fwd_check_view(f, kv) ||
	    check_table(kv, table, n_table, (uint64_t)n_past + n) ||
	    (uint64_t)n_past + n > UINT32_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		if (tokens[i] < 0 || (uint32_t)tokens[i] >= f->hp->n_vocab)
			return -EINVAL;
		f->tok[i] = tokens[i];
		f->pos[i] = n_past + i;
	}
	f->seqs[0] = (struct fwd_seq){ .table = table, .pos0 = n_past, .n = n, .row0 = 0 };
	run(f, kv, n, 1, all_logits ? 0 : n - 1, all_logits ? n : 1, logits);
	return 0;
}

int kvp_fwd_decode(struct kvp_fwd *f, const struct kvp_kv_view *kv,
		   const struct kvp_fwd_seq *seqs, uint32_t n_seqs, float *logits)
{
	if (!n_seqs || n_seqs > f->o.max_batch || !seqs || !logits || kvp_fwd_check_view(f, kv))
		return -EINVAL;
	for (uint32_t s = 0; s < n_seqs; s++) {
		const struct kvp_fwd_seq *q = &seqs[s];

		if (q->token < 0 || (uint32_t)q->token >= f->hp->n_vocab || q->pos == UINT32_MAX ||
		    check_table(kv, q->table, q->n_table, (uint64_t)q->pos + 1))
			return -EINVAL;
		f->tok[s] = q->token;
		f->pos[s] = q->pos;
		f->seqs[s] = (struct fwd_seq){ .table = q->table, .pos0 = q->pos, .n = 1, .row0 = s };
	}
	run(f, kv, n_seqs, n_seqs, 0, n_seqs, logits);
	return 0;
}
