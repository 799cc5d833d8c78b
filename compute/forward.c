/* SPDX-License-Identifier: MIT */
/*
 * forward.c - the fast forward pass over pool blocks.
 *
 * Prefill and decode share one path: a set of "rows" (token, position) grouped into
 * sequences (a run of consecutive positions with one block table).  Prefill is one
 * sequence of n rows; decode is n sequences of one row each.  Per layer: RMSNorm, the
 * Q/K/V projections over all rows at once (one GEMM each) plus their biases where the
 * architecture has them, RoPE in the model's variant (compute/rope.h: pair layout,
 * frequency factors, scaling), K/V written into the blocks of their positions,
 * attention per sequence through its block table, the output projection, then the
 * SwiGLU FFN, again one GEMM per matrix for all rows.
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
	struct kvp_attn_scratch *as; /* (n_threads), ml shared: heads are disjoint */
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
	if (kvp_kernels_check(k))
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
	r = f->rows_max = o->max_chunk > o->max_batch ? o->max_chunk : o->max_batch;
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
	f->seqs = malloc(o->max_batch * sizeof(*f->seqs));
	f->ml = falloc(2 * r * hp->n_heads);
	f->as = calloc(o->n_threads, sizeof(*f->as));
	if (!f->x || !f->xn || !f->q || !f->kk || !f->v || !f->att || !f->hb || !f->hb2 ||
	    !f->rope_cs || !f->tok || !f->pos || !f->seqs || !f->ml || !f->as ||
	    kvp_threads_new(&f->pool, o->n_threads) ||
	    kvp_lin_init(&f->lin, k, f->pool, r, k_max)) {
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
	free(f->kk);
	free(f->v);
	free(f->att);
	free(f->hb);
	free(f->hb2);
	free(f->rope_cs);
	free(f->tok);
	free(f->pos);
	free(f->seqs);
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

int kvp_fwd_check_view(const struct kvp_fwd *f, const struct kvp_kv_view *kv)
{
	const struct kvp_model_shape *s = &kv->geom.shape;

	if (!kv->base || s->n_layers != f->hp->n_layers || s->n_kv_heads != f->hp->n_kv_heads ||
	    s->head_dim != f->hp->head_dim || s->dtype >= KVP_DTYPE__COUNT || !s->block_tokens ||
	    s->block_tokens > BT_SCRATCH_MAX || kv->geom.elem_bytes != kvp_dtype_bytes(s->dtype) ||
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

	kvp_kv_store_fn *store = f->k->kv_store[g->shape.dtype];

	for (uint32_t h = 0; h < g->shape.n_kv_heads; h++) {
		store(blk + kvp_geom_run_offset(g, l, 0, h) + row_off,
		      f->kk + r * kvd + (size_t)h * hd, hd);
		store(blk + kvp_geom_run_offset(g, l, 1, h) + row_off,
		      f->v + r * kvd + (size_t)h * hd, hd);
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
	return toks * 2 * f->hp->n_kv_heads * f->hp->head_dim * kv->geom.elem_bytes;
}

/*
 * Run all f->tok/f->pos rows (grouped in f->seqs) through the layers; then logits for
 * rows [out_row0, out_row0 + n_out) into @logits.
 */
static void run(struct kvp_fwd *f, const struct kvp_kv_view *kv, uint32_t rows, uint32_t n_seqs,
		uint32_t out_row0, uint32_t n_out, float *logits)
{
	const struct kvp_model_hparams *hp = f->hp;
	const struct kvp_weights *w = f->w;
	size_t E = hp->n_embd, qd = (size_t)hp->n_heads * hp->head_dim;
	size_t kvd = (size_t)hp->n_kv_heads * hp->head_dim, F = hp->n_ff;

	for (uint32_t r = 0; r < rows; r++) {
		const struct kvp_tensor *emb = &w->tok_embd;

		f->k->dequant[emb->type](f->x + r * E,
					 (const uint8_t *)emb->data +
						 (size_t)f->tok[r] * emb->row_bytes,
					 E);
		kvp_rope_cs(f->rope, f->rope_cs + (size_t)r * hp->n_rot, f->pos[r]);
	}
	for (uint32_t l = 0; l < hp->n_layers; l++) {
		const struct kvp_layer_weights *L = &w->layers[l];

		for (uint32_t r = 0; r < rows; r++)
			f->k->rmsnorm(f->xn + r * E, f->x + r * E, L->attn_norm.data, E,
				      hp->rms_eps);
		linear(f, f->xn, rows, 3, (float *[]){ f->q, f->kk, f->v },
		       (const struct kvp_tensor *[]){ &L->wq, &L->wk, &L->wv });
		add_bias(f->q, &L->bq, rows);
		add_bias(f->kk, &L->bk, rows);
		add_bias(f->v, &L->bv, rows);
		for (uint32_t s = 0; s < n_seqs; s++) {
			const struct fwd_seq *sq = &f->seqs[s];

			for (uint32_t i = 0; i < sq->n; i++) {
				uint32_t r = sq->row0 + i;
				const float *cs = f->rope_cs + (size_t)r * hp->n_rot;

				kvp_rope_rotate(f->rope, f->q + r * qd, hp->n_heads, hp->head_dim,
						cs);
				kvp_rope_rotate(f->rope, f->kk + r * kvd, hp->n_kv_heads,
						hp->head_dim, cs);
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
		linear(f, f->att, rows, 1, (float *[]){ f->xn },
		       (const struct kvp_tensor *[]){ &L->wo });
		add_bias(f->xn, &L->bo, rows);
		for (size_t i = 0; i < rows * E; i++)
			f->x[i] += f->xn[i];

		for (uint32_t r = 0; r < rows; r++)
			f->k->rmsnorm(f->xn + r * E, f->x + r * E, L->ffn_norm.data, E,
				      hp->rms_eps);
		linear(f, f->xn, rows, 2, (float *[]){ f->hb, f->hb2 },
		       (const struct kvp_tensor *[]){ &L->w_gate, &L->w_up });
		f->k->swiglu(f->hb, f->hb2, rows * F);
		linear(f, f->hb, rows, 1, (float *[]){ f->xn },
		       (const struct kvp_tensor *[]){ &L->w_down });
		for (size_t i = 0; i < rows * E; i++)
			f->x[i] += f->xn[i];
	}
	for (uint32_t r = out_row0; r < out_row0 + n_out; r++)
		f->k->rmsnorm(f->xn + r * E, f->x + r * E, w->output_norm.data, E, hp->rms_eps);
	linear(f, f->xn + (size_t)out_row0 * E, n_out, 1, (float *[]){ logits },
	       (const struct kvp_tensor *[]){ &w->output });
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

int kvp_fwd_decode(struct kvp_fwd *f, const struct kvp_kv_view *kv, const struct kvp_fwd_seq *seqs,
		   uint32_t n_seqs, float *logits)
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
		f->seqs[s] = (struct fwd_seq){
			.table = q->table, .pos0 = q->pos, .n = 1, .row0 = s
		};
	}
	run(f, kv, n_seqs, n_seqs, 0, n_seqs, logits);
	return 0;
}
