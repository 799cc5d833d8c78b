/* SPDX-License-Identifier: MIT */
/*
 * forward.c - the fast forward pass over pool blocks.
 *
 * Prefill, decode and mixed steps share one path: a set of "rows" (token, position)
 * grouped into sequences (a run of consecutive positions with one block table).  Prefill
 * is one sequence of n rows; decode is n sequences of one row each; a mixed step
 * (kvp_fwd_step()) is any list of them, e.g. a decode batch plus a prefill chunk, so the
 * decode rows ride along the chunk's pass over the weights.  Per layer: RMSNorm, the
 * Q/K/V projections over all rows at once (one GEMM each) plus their biases where the
 * architecture has them, RoPE in the model's variant (compute/rope.h: pair layout,
 * frequency factors, scaling), K/V written into the blocks of their positions,
 * attention per sequence through its block table, the output projection, then the
 * SwiGLU FFN, again one GEMM per matrix for all rows.  At the end each sequence's last
 * row is gathered (unless every row's logits are wanted) so that the output norm and the
 * vocabulary projection run over one row per sequence.
 *
 * Invariants: every argument is validated before anything is written, so -EINVAL
 * leaves the blocks untouched; all scratch is allocated in kvp_fwd_new().  A context
 * is used by one thread at a time (the engine thread).
 *
 * Threads (n_threads in all): projections through kvp_lin_run() (compute/linear.c);
 * attention on our pool, split by (sequence, kv head), except when it reads too little
 * to pay for a fork-join (POOL_MIN_BYTES) and runs on the calling thread.
 */
#include "compute/forward.h"

#include <cblas.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compute/attn.h"
#include "compute/kernels/kernels.h"
#include "compute/kernels/kvq.h"
#include "compute/kernels/kvq4.h"
#include "compute/kv4.h"
#include "compute/linear.h"
#include "compute/model.h"
#include "compute/rope.h"
#include "compute/threads.h"

/* Larger contexts are configuration mistakes (scratch would run into gigabytes). */
#define ROWS_MAX 8192u

/* Attention reading fewer K/V bytes than this runs on the calling thread alone. */
#define POOL_MIN_BYTES ((size_t)256 << 10)

struct fwd_seq {
	const uint32_t *table;
	uint32_t pos0;
	uint32_t n;
	uint32_t row0;
	uint32_t n_out; /* its last n_out rows' logits (>= 1) */
};

struct kvp_fwd {
	const struct kvp_model *m;
	const struct kvp_kernels *k;
	struct kvp_lin lin;
	const struct kvp_model_hparams *hp;
	const struct kvp_weights *w;
	const struct kvp_rope *rope;
	struct kvp_fwd_opts o;
	uint32_t rows_max;
	float *x;		     /* (rows, n_embd) residual stream */
	float *xn;		     /* (rows, n_embd) normed input / projection output */
	float *q;		     /* (rows, n_heads * head_dim) */
	float *kk, *v;		     /* (rows, n_kv_heads * head_dim) keys, values */
	float *att;		     /* (rows, n_heads * head_dim) */
	float *hb, *hb2;	     /* (rows, n_ff) */
	float *rope_cs;		     /* (rows, n_rot) cos/sin per row */
	int32_t *tok;		     /* (rows) */
	uint32_t *pos;		     /* (rows) */
	struct fwd_seq *seqs;	     /* (max_batch) */
	struct kvp_fwd_part *parts;  /* (max_batch) kvp_fwd_decode()'s batch as parts */
	struct kvp_attn_scratch *as; /* (n_threads) */
	float *ml;		     /* (n_threads, 2 rows n_heads): each thread its own */
	struct kvp_threads *pool;
	/* the job being run on the pool */
	const struct kvp_kv_view *job_kv;
	uint32_t job_layer, job_seqs;
	uint32_t job_op, job_row0;  /* the per-row step being run (enum row_op) */
	const uint32_t **row_table; /* (rows) the block table of each row's sequence */
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
	size_t r, qd = (size_t)hp->n_heads * hp->head_dim,
		  kvd = (size_t)hp->n_kv_heads * hp->head_dim;

	const struct kvp_kernels *k = o->kernels;
	size_t k_max = hp->n_ff > hp->n_embd ? hp->n_ff : hp->n_embd;
	int err;

	*out = NULL;
	if (!o->n_threads || o->n_threads > 256 || !o->max_chunk || !o->max_batch ||
	    o->max_chunk > ROWS_MAX || o->max_batch > ROWS_MAX)
		return -EINVAL;
	if (!k && (err = kvp_kernels_best(&k)))
		return err;
	if (kvp_kernels_check(k) || kvp_lin_f32_gemm() < 0)
		return -EINVAL;
	k_max = qd > k_max ? qd : k_max;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->m = m;
	f->k = k;
	f->hp = hp;
	f->w = kvp_model_weights(m);
	f->rope = kvp_model_rope(m);
	f->o = *o;
	/* a mixed step holds a prefill chunk and a decode batch together */
	r = f->rows_max = o->max_chunk + o->max_batch;
	f->x = falloc(r * hp->n_embd);
	f->xn = falloc(r * hp->n_embd);
	f->q = falloc(r * qd);
	f->kk = falloc(r * kvd);
	f->v = falloc(r * kvd);
	f->att = falloc(r * qd);
	f->hb = falloc(r * hp->n_ff);
	f->hb2 = falloc(r * hp->n_ff);
	f->rope_cs = falloc(r * hp->n_rot);
	f->tok = malloc(r * sizeof(*f->tok));
	f->pos = malloc(r * sizeof(*f->pos));
	f->row_table = malloc(r * sizeof(*f->row_table));
	f->seqs = malloc(o->max_batch * sizeof(*f->seqs));
	f->parts = malloc(o->max_batch * sizeof(*f->parts));
	/*
	 * per thread: two threads may hold the same kv head of different sequences at once
	 * (odd kv head counts; a decode part next to a prefill part), and ml is indexed by
	 * the sequence's own rows
	 */
	f->ml = falloc((size_t)o->n_threads * 2 * r * hp->n_heads);
	f->as = calloc(o->n_threads, sizeof(*f->as));
	err = -ENOMEM;
	if (!f->x || !f->xn || !f->q || !f->kk || !f->v || !f->att || !f->hb || !f->hb2 ||
	    !f->rope_cs || !f->tok || !f->pos || !f->row_table || !f->seqs || !f->parts || !f->ml ||
	    !f->as)
		goto err_free;
	err = kvp_threads_new(&f->pool, o->n_threads);
	if (err)
		goto err_free;
	err = kvp_lin_init(&f->lin, k, f->pool, r, k_max);
	if (err)
		goto err_free;
	for (uint32_t t = 0; t < o->n_threads; t++) {
		f->as[t].ml = f->ml + (size_t)t * 2 * r * hp->n_heads;
		f->as[t].kbuf = falloc((size_t)BT_SCRATCH_MAX * hp->head_dim);
		f->as[t].vbuf = falloc((size_t)BT_SCRATCH_MAX * hp->head_dim);
		f->as[t].sbuf = falloc(BT_SCRATCH_MAX);
		if (!f->as[t].kbuf || !f->as[t].vbuf || !f->as[t].sbuf) {
			err = -ENOMEM;
			goto err_free;
		}
	}
	/* process-wide: OpenBLAS has one thread pool */
	openblas_set_num_threads((int)o->n_threads);
	*out = f;
	return 0;

err_free: /* every member: kvp_fwd_free() takes a partly made context */
	kvp_fwd_free(f);
	return err;
}

void kvp_fwd_free(struct kvp_fwd *f)
{
	if (!f)
		return;
	free(f->x);
	free(f->xn);
	free(f->q);
	free(f->kk);
	free(f->v);
	free(f->att);
	free(f->hb);
	free(f->hb2);
	free(f->rope_cs);
	free(f->tok);
	free(f->pos);
	free(f->row_table);
	free(f->seqs);
	free(f->parts);
	kvp_lin_deinit(&f->lin);
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

const struct kvp_kernels *kvp_fwd_kernels(const struct kvp_fwd *f)
{
	return f->k;
}

bool kvp_fwd_rows_exact(const struct kvp_fwd *f)
{
	if (f->w->output.type == KVP_GGML_F32)
		return false;
	for (uint32_t l = 0; l < f->hp->n_layers; l++) {
		const struct kvp_layer_weights *L = &f->w->layers[l];
		const struct kvp_tensor *m[] = { &L->wq,     &L->wk,   &L->wv,	  &L->wo,
						 &L->w_gate, &L->w_up, &L->w_down };

		for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++)
			if (m[i]->type == KVP_GGML_F32)
				return false;
	}
	return true;
}

int kvp_fwd_check_view(const struct kvp_fwd *f, const struct kvp_kv_view *kv)
{
	const struct kvp_model_shape *s = &kv->geom.shape;

	if (!kv->base || s->n_layers != f->hp->n_layers || s->n_kv_heads != f->hp->n_kv_heads ||
	    s->head_dim != f->hp->head_dim || s->dtype >= KVP_DTYPE__COUNT || !s->block_tokens ||
	    s->block_tokens > BT_SCRATCH_MAX || kv->geom.elem_bytes != kvp_dtype_bytes(s->dtype) ||
	    kv->geom.head_bytes != kvp_layout_run_bytes(s, 0) ||
	    kv->geom.v_head_bytes != kvp_layout_run_bytes(s, 1) ||
	    kv->geom.block_stride < kv->geom.block_bytes)
		return -EINVAL;
	/* the integer types stage partial blocks' keys (shm/geom.h) */
	if (kvp_dtype_is_int(s->dtype) &&
	    (!kv->stage || !kv->stage->n_slots || s->head_dim > KVP_KVQ_HEAD_DIM_MAX ||
	     kv->stage->slot_floats != (s->dtype == KVP_DTYPE_INT4 ? 2u : 1u) * s->n_layers *
					       s->n_kv_heads * s->block_tokens * s->head_dim))
		return -EINVAL;
	/* int4: K and V staged, the per-group arrays of kvq4.h on the stack */
	if (s->dtype == KVP_DTYPE_INT4 &&
	    (s->head_dim > KVP_KVQ4_GROUPS_MAX || s->block_tokens > KVP_KVQ4_GROUPS_MAX))
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

/*
 * Write K and V of row @r (position @pos) of layer @l into its block; int8: V quantized
 * per token into the block, K into the block's stage slot (taken by stage_take()).
 * Rows of one call go to disjoint places, so threads may split them.
 */
static void store_kv(struct kvp_fwd *f, const struct kvp_kv_view *kv, const uint32_t *table,
		     uint32_t l, uint32_t r, uint32_t pos)
{
	const struct kvp_geom *g = &kv->geom;
	uint32_t bt = g->shape.block_tokens, hd = g->shape.head_dim;
	uint8_t *blk = kvp_kv_block(kv, table[pos / bt]);
	size_t kvd = (size_t)g->shape.n_kv_heads * hd;

	if (g->shape.dtype == KVP_DTYPE_INT4) {
		kvp_kv4_store(kv, table, l, pos, f->kk + r * kvd, f->v + r * kvd);
		return;
	}
	if (g->shape.dtype == KVP_DTYPE_INT8) {
		float *slot = kvp_stage_get(kv->stage, table[pos / bt]);
		size_t rows = (size_t)bt * hd;

		for (uint32_t h = 0; h < g->shape.n_kv_heads; h++) {
			uint8_t *vr = blk + kvp_geom_run_offset(g, l, 1, h);

			memcpy(kvp_stage_row(g, slot, l, h, pos % bt),
			       f->kk + r * kvd + (size_t)h * hd, hd * sizeof(float));
			f->k->kvq_row8((int8_t *)vr + (size_t)(pos % bt) * hd, vr + rows + pos % bt,
				       f->v + r * kvd + (size_t)h * hd, hd);
		}
		return;
	}

	size_t row_off = (size_t)(pos % bt) * hd * g->elem_bytes;
	kvp_kv_store_fn *store = f->k->kv_store[g->shape.dtype];

	for (uint32_t h = 0; h < g->shape.n_kv_heads; h++) {
		store(blk + kvp_geom_run_offset(g, l, 0, h) + row_off,
		      f->kk + r * kvd + (size_t)h * hd, hd);
		store(blk + kvp_geom_run_offset(g, l, 1, h) + row_off,
		      f->v + r * kvd + (size_t)h * hd, hd);
	}
}

/*
 * int8: a stage slot for every block the rows of f->seqs write into (the partial one a
 * call starts in holds one already).  Return: 0, or -ENOSPC when the stage is full;
 * then nothing was written (slots taken stay with their blocks, given back when the
 * pool frees them).
 */
static int stage_take(struct kvp_fwd *f, const struct kvp_kv_view *kv, uint32_t n_seqs)
{
	uint32_t bt = kv->geom.shape.block_tokens;

	if (!kvp_dtype_is_int(kv->geom.shape.dtype))
		return 0;
	for (uint32_t s = 0; s < n_seqs; s++) {
		const struct fwd_seq *q = &f->seqs[s];

		for (uint32_t b = q->pos0 / bt; b <= (q->pos0 + q->n - 1) / bt; b++)
			if (!kvp_stage_take(kv->stage, q->table[b]))
				return -ENOSPC;
	}
	return 0;
}

/*
 * int8, after layer @l's K/V stores: quantize, per channel, the keys of each block
 * whose last row this call wrote (once: a block fills in exactly one call).
 */
static void stage_seal(struct kvp_fwd *f, const struct kvp_kv_view *kv, uint32_t n_seqs, uint32_t l)
{
	const struct kvp_geom *g = &kv->geom;
	uint32_t bt = g->shape.block_tokens, hd = g->shape.head_dim;
	size_t rows = (size_t)bt * hd;

	if (g->shape.dtype == KVP_DTYPE_INT4) {
		for (uint32_t s = 0; s < n_seqs; s++)
			kvp_kv4_seal(f->k, kv, f->seqs[s].table, f->seqs[s].pos0, f->seqs[s].n, l);
		return;
	}
	for (uint32_t s = 0; s < n_seqs; s++) {
		const struct fwd_seq *q = &f->seqs[s];

		for (uint32_t b = q->pos0 / bt; (b + 1) * bt <= q->pos0 + q->n; b++) {
			uint8_t *blk = kvp_kv_block(kv, q->table[b]);
			float *slot = kvp_stage_get(kv->stage, q->table[b]);

			for (uint32_t h = 0; h < g->shape.n_kv_heads; h++) {
				uint8_t *kr = blk + kvp_geom_run_offset(g, l, 0, h);

				f->k->kvq_chan8((int8_t *)kr, kr + rows,
						kvp_stage_row(g, slot, l, h, 0), bt, hd);
			}
		}
	}
}

/* int8, at the end of a call: the blocks it filled give their slots back. */
static void stage_release(struct kvp_fwd *f, const struct kvp_kv_view *kv, uint32_t n_seqs)
{
	uint32_t bt = kv->geom.shape.block_tokens;

	if (kv->geom.shape.dtype == KVP_DTYPE_INT4) {
		for (uint32_t s = 0; s < n_seqs; s++)
			kvp_kv4_release(kv, f->seqs[s].table, f->seqs[s].pos0, f->seqs[s].n);
		return;
	}
	for (uint32_t s = 0; s < n_seqs; s++) {
		const struct fwd_seq *q = &f->seqs[s];

		for (uint32_t b = q->pos0 / bt; (b + 1) * bt <= q->pos0 + q->n; b++)
			kvp_stage_drop(kv->stage, q->table[b]);
	}
}

/* out_i = x @ W_i^T for matrices sharing input x (rows of it) */
static void linear(struct kvp_fwd *f, const float *x, size_t rows, unsigned n, float *const *outs,
		   const struct kvp_tensor *const *ws)
{
	kvp_lin_run(&f->lin, x, rows, n, outs, ws);
}

/* x (rows, b.ne0) += b per row; nothing when the model has no such bias */
static void add_bias(float *x, const struct kvp_tensor *b, size_t rows)
{
	const float *v = b->data;

	if (!v)
		return;
	for (size_t r = 0; r < rows; r++)
		for (size_t i = 0; i < b->ne0; i++)
			x[r * b->ne0 + i] += v[i];
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
			 sq->table, f->job_layer, sq->pos0, sq->n, hp->n_heads, kh, kh + 1, f->k,
			 &f->as[i]);
	}
}

/* K/V bytes attention reads for the rows in f->seqs (each sequence reads its history). */
static size_t attn_bytes(const struct kvp_fwd *f, const struct kvp_kv_view *kv, uint32_t n_seqs)
{
	size_t toks = 0;

	for (uint32_t s = 0; s < n_seqs; s++)
		toks += (size_t)f->seqs[s].n * (f->seqs[s].pos0 + f->seqs[s].n);
	return toks * (kv->geom.block_bytes / kv->geom.shape.block_tokens / f->hp->n_layers);
}

/*
 * The per-row work between the projections, as steps a pool job can split by rows:
 * with a prefill chunk's hundreds of rows it is a few percent of the step, and on the
 * calling thread alone the other threads would wait for it.
 */
enum row_op {
	ROWS_EMBED,   /* x = embedding row; the row's RoPE angles */
	ROWS_ATTN_IN, /* x += xn (the previous layer's output; not in layer 0); xn = norm(x) */
	ROWS_QKV,     /* Q/K/V biases, RoPE, K/V into the blocks */
	ROWS_FFN_IN,  /* xn += output bias; x += xn; xn = norm(x) */
	ROWS_SWIGLU,  /* hb = silu(hb) * hb2 */
	ROWS_OUT,     /* x += xn (the last layer's output); xn = norm(x) */
};

/* A step over fewer elements than this stays on the calling thread. */
#define ROWS_POOL_MIN ((size_t)1 << 16)

static void rows_do(struct kvp_fwd *f, uint32_t op, uint32_t r0, uint32_t r1)
{
	const struct kvp_model_hparams *hp = f->hp;
	const struct kvp_weights *w = f->w;
	const struct kvp_layer_weights *L = &w->layers[f->job_layer];
	size_t E = hp->n_embd, qd = (size_t)hp->n_heads * hp->head_dim;
	size_t kvd = (size_t)hp->n_kv_heads * hp->head_dim, F = hp->n_ff;

	for (uint32_t r = r0; r < r1; r++) {
		float *x = f->x + r * E, *xn = f->xn + r * E;

		switch (op) {
		case ROWS_EMBED: {
			const struct kvp_tensor *emb = &w->tok_embd;

			f->k->dequant[emb->type](x,
						 (const uint8_t *)emb->data +
							 (size_t)f->tok[r] * emb->row_bytes,
						 E);
			kvp_rope_cs(f->rope, f->rope_cs + (size_t)r * hp->n_rot, f->pos[r]);
			break;
		}
		case ROWS_ATTN_IN:
			if (f->job_layer)
				for (size_t i = 0; i < E; i++)
					x[i] += xn[i];
			f->k->rmsnorm(xn, x, L->attn_norm.data, E, hp->rms_eps);
			break;
		case ROWS_QKV: {
			const float *cs = f->rope_cs + (size_t)r * hp->n_rot;

			add_bias(f->q + r * qd, &L->bq, 1);
			add_bias(f->kk + r * kvd, &L->bk, 1);
			add_bias(f->v + r * kvd, &L->bv, 1);
			kvp_rope_rotate(f->rope, f->q + r * qd, hp->n_heads, hp->head_dim, cs);
			kvp_rope_rotate(f->rope, f->kk + r * kvd, hp->n_kv_heads, hp->head_dim, cs);
			store_kv(f, f->job_kv, f->row_table[r], f->job_layer, r, f->pos[r]);
			break;
		}
		case ROWS_FFN_IN:
			add_bias(xn, &L->bo, 1);
			for (size_t i = 0; i < E; i++)
				x[i] += xn[i];
			f->k->rmsnorm(xn, x, L->ffn_norm.data, E, hp->rms_eps);
			break;
		case ROWS_SWIGLU:
			f->k->swiglu(f->hb + r * F, f->hb2 + r * F, F);
			break;
		case ROWS_OUT:
			for (size_t i = 0; i < E; i++)
				x[i] += xn[i];
			f->k->rmsnorm(xn, x, w->output_norm.data, E, hp->rms_eps);
			break;
		}
	}
}

/* Thread @i of @n: its share of the rows of the step in f->job_op. */
static void rows_part(void *arg, unsigned int i, unsigned int n)
{
	struct kvp_fwd *f = arg;
	uint32_t rows = f->job_seqs, r0 = f->job_row0;

	rows_do(f, f->job_op, r0 + rows * i / n, r0 + rows * (i + 1) / n);
}

/* Step @op over rows [r0, r0 + rows) (of @width elements each), on the pool when large. */
static void rows_run(struct kvp_fwd *f, uint32_t op, uint32_t r0, uint32_t rows, size_t width)
{
	if ((size_t)rows * width < ROWS_POOL_MIN) {
		rows_do(f, op, r0, r0 + rows);
		return;
	}
	f->job_op = op;
	f->job_row0 = r0;
	f->job_seqs = rows;
	kvp_threads_run(f->pool, rows_part, f);
}

/*
 * Move the last n_out rows of each sequence (x and xn) to the front, in order, so the
 * output norm and the vocabulary projection run over those rows, not every row of the
 * step.  Return: how many.  Safe in place: the d-th row gathered comes from a row >= d,
 * and sources grow with d, so a row is never overwritten before it is read.
 */
static uint32_t gather_out_rows(struct kvp_fwd *f, uint32_t n_seqs)
{
	size_t E = f->hp->n_embd;
	uint32_t d = 0;

	for (uint32_t s = 0; s < n_seqs; s++) {
		const struct fwd_seq *q = &f->seqs[s];

		for (uint32_t r = q->row0 + q->n - q->n_out; r < q->row0 + q->n; r++, d++) {
			if (r == d)
				continue;
			memcpy(f->x + d * E, f->x + r * E, E * sizeof(float));
			memcpy(f->xn + d * E, f->xn + r * E, E * sizeof(float));
		}
	}
	return d;
}

/*
 * Run all f->tok/f->pos rows (grouped in f->seqs) through the layers; then logits into
 * @logits: of every row when @all_rows, else of each sequence's last n_out rows (in
 * sequence order).
 */
static void run(struct kvp_fwd *f, const struct kvp_kv_view *kv, uint32_t rows, uint32_t n_seqs,
		int all_rows, float *logits)
{
	const struct kvp_model_hparams *hp = f->hp;
	const struct kvp_weights *w = f->w;
	size_t E = hp->n_embd;
	uint32_t n_out = rows;

	for (uint32_t s = 0; s < n_seqs; s++)
		for (uint32_t i = 0; i < f->seqs[s].n; i++)
			f->row_table[f->seqs[s].row0 + i] = f->seqs[s].table;
	f->job_kv = kv;
	f->job_layer = 0;
	rows_run(f, ROWS_EMBED, 0, rows, E);
	for (uint32_t l = 0; l < hp->n_layers; l++) {
		const struct kvp_layer_weights *L = &w->layers[l];

		f->job_layer = l;
		rows_run(f, ROWS_ATTN_IN, 0, rows, E);
		linear(f, f->xn, rows, 3, (float *[]){ f->q, f->kk, f->v },
		       (const struct kvp_tensor *[]){ &L->wq, &L->wk, &L->wv });
		rows_run(f, ROWS_QKV, 0, rows, (size_t)hp->n_heads * hp->head_dim);
		if (kvp_dtype_is_int(kv->geom.shape.dtype))
			stage_seal(f, kv, n_seqs, l);
		f->job_seqs = n_seqs;
		if (attn_bytes(f, kv, n_seqs) < POOL_MIN_BYTES)
			attn_part(f, 0, 1);
		else
			kvp_threads_run(f->pool, attn_part, f);
		linear(f, f->att, rows, 1, (float *[]){ f->xn },
		       (const struct kvp_tensor *[]){ &L->wo });
		rows_run(f, ROWS_FFN_IN, 0, rows, E);
		linear(f, f->xn, rows, 2, (float *[]){ f->hb, f->hb2 },
		       (const struct kvp_tensor *[]){ &L->w_gate, &L->w_up });
		rows_run(f, ROWS_SWIGLU, 0, rows, hp->n_ff);
		linear(f, f->hb, rows, 1, (float *[]){ f->xn },
		       (const struct kvp_tensor *[]){ &L->w_down });
	}
	if (!all_rows)
		n_out = gather_out_rows(f, n_seqs);
	rows_run(f, ROWS_OUT, 0, n_out, E);
	linear(f, f->xn, n_out, 1, (float *[]){ logits },
	       (const struct kvp_tensor *[]){ &w->output });
}

/*
 * Validate @parts and lay their rows out in f->tok, f->pos and f->seqs; then run them.
 * Nothing reaches the blocks before every part was checked.
 */
static int step(struct kvp_fwd *f, const struct kvp_kv_view *kv, const struct kvp_fwd_part *parts,
		uint32_t n_parts, int all_rows, float *logits)
{
	uint32_t rows = 0;

	if (!n_parts || n_parts > f->o.max_batch || !parts || !logits || kvp_fwd_check_view(f, kv))
		return -EINVAL;
	for (uint32_t s = 0; s < n_parts; s++) {
		const struct kvp_fwd_part *p = &parts[s];

		if (!p->n || !p->tokens || p->n > f->rows_max - rows || p->n_logits > p->n ||
		    (uint64_t)p->pos0 + p->n > UINT32_MAX ||
		    check_table(kv, p->table, p->n_table, (uint64_t)p->pos0 + p->n))
			return -EINVAL;
		for (uint32_t i = 0; i < p->n; i++) {
			if (p->tokens[i] < 0 || (uint32_t)p->tokens[i] >= f->hp->n_vocab)
				return -EINVAL;
			f->tok[rows + i] = p->tokens[i];
			f->pos[rows + i] = p->pos0 + i;
		}
		f->seqs[s] = (struct fwd_seq){ .table = p->table,
					       .pos0 = p->pos0,
					       .n = p->n,
					       .row0 = rows,
					       .n_out = p->n_logits ? p->n_logits : 1 };
		rows += p->n;
	}
	if (stage_take(f, kv, n_parts) < 0)
		return -ENOSPC;
	run(f, kv, rows, n_parts, all_rows, logits);
	if (kvp_dtype_is_int(kv->geom.shape.dtype))
		stage_release(f, kv, n_parts);
	return 0;
}

int kvp_fwd_step(struct kvp_fwd *f, const struct kvp_kv_view *kv, const struct kvp_fwd_part *parts,
		 uint32_t n_parts, float *logits)
{
	return step(f, kv, parts, n_parts, 0, logits);
}

int kvp_fwd_prefill(struct kvp_fwd *f, const struct kvp_kv_view *kv, const uint32_t *table,
		    uint32_t n_table, uint32_t n_past, const int32_t *tokens, uint32_t n,
		    float *logits, int all_logits)
{
	struct kvp_fwd_part p = {
		.table = table, .n_table = n_table, .pos0 = n_past, .tokens = tokens, .n = n
	};

	if (n > f->o.max_chunk)
		return -EINVAL;
	return step(f, kv, &p, 1, all_logits, logits);
}

int kvp_fwd_decode(struct kvp_fwd *f, const struct kvp_kv_view *kv, const struct kvp_fwd_seq *seqs,
		   uint32_t n_seqs, float *logits)
{
	struct kvp_fwd_part *parts = f->parts;

	if (!n_seqs || n_seqs > f->o.max_batch || !seqs)
		return -EINVAL;
	for (uint32_t s = 0; s < n_seqs; s++) {
		if (seqs[s].pos == UINT32_MAX)
			return -EINVAL;
		parts[s] = (struct kvp_fwd_part){ .table = seqs[s].table,
						  .n_table = seqs[s].n_table,
						  .pos0 = seqs[s].pos,
						  .tokens = &seqs[s].token,
						  .n = 1 };
	}
	return step(f, kv, parts, n_seqs, 0, logits);
}
