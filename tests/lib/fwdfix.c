/* SPDX-License-Identifier: MIT */
/*
 * fwdfix.c - forward-pass test fixtures (see fwdfix.h).
 */
#include "tests/lib/fwdfix.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <sanitizer/asan_interface.h>

#include "compute/gguf.h"
#include "compute/sample.h"

int ffix_model_try_open(struct kvp_model **out, const struct kvp_mkmodel_opts *o, char *err,
			size_t errlen)
{
	struct kvp_model *m;
	void *buf;
	size_t len;
	int r;

	assert_int_equal(kvp_mkmodel_write_mem(&buf, &len, o, err, errlen), 0);
	r = kvp_model_open_mem(&m, buf, len, err, errlen);
	if (r) {
		free(buf);
		return r;
	}
	*out = m;
	return 0;
}

struct kvp_model *ffix_model_open(const struct kvp_mkmodel_opts *o)
{
	struct kvp_model *m = NULL;
	char err[256];

	if (ffix_model_try_open(&m, o, err, sizeof(err)))
		fail_msg("open: %s", err);
	return m;
}

void ffix_model_close(struct kvp_model *m)
{
	void *buf = (void *)kvp_model_gguf(m)->base;

	kvp_model_close(m);
	free(buf);
}

void ffix_pool_init(struct ffix_pool *p, const struct kvp_model *m, uint32_t dtype, uint32_t bt,
		    uint32_t n_blocks)
{
	struct kvp_model_shape s;

	kvp_model_kv_shape(m, dtype, bt, &s);
	assert_int_equal(kvp_geom_init(&p->v.geom, &s), 0);
	p->v.n_blocks = n_blocks;
	p->bytes = (size_t)n_blocks * p->v.geom.block_stride;
	p->v.base = aligned_alloc(KVP_BLOCK_ALIGN, p->bytes);
	assert_non_null(p->v.base);
	memset(p->v.base, 0xff, p->bytes);
	ASAN_POISON_MEMORY_REGION(p->v.base, p->bytes);
	memset(&p->stage, 0, sizeof(p->stage));
	p->v.stage = NULL;
	if (kvp_dtype_is_int(dtype)) {
		assert_int_equal(kvp_stage_init(&p->stage, &p->v.geom, n_blocks, n_blocks), 0);
		p->v.stage = &p->stage;
	}
}

void ffix_pool_open(struct ffix_pool *p, const uint32_t *table, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		ASAN_UNPOISON_MEMORY_REGION(kvp_kv_block(&p->v, table[i]), p->v.geom.block_bytes);
}

void ffix_pool_deinit(struct ffix_pool *p)
{
	ASAN_UNPOISON_MEMORY_REGION(p->v.base, p->bytes);
	free(p->v.base);
	kvp_stage_deinit(&p->stage);
}

struct kvp_fwd *ffix_fwd_new(const struct kvp_model *m, const struct kvp_kernels *k, uint32_t chunk,
			     uint32_t batch)
{
	struct kvp_fwd *f;

	assert_int_equal(kvp_fwd_new(&f, m,
				     &(struct kvp_fwd_opts){ .n_threads = 2,
							     .max_chunk = chunk,
							     .max_batch = batch,
							     .kernels = k }),
			 0);
	return f;
}

void ffix_greedy(struct kvp_fwd *f, struct ffix_pool *p, const uint32_t *table, uint32_t nt,
		 uint32_t pos, float *lg, uint32_t V, int32_t *out, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		out[i] = kvp_sample_greedy(lg, V);
		assert_int_equal(kvp_fwd_decode(f, &p->v,
						&(struct kvp_fwd_seq){ .table = table,
								       .n_table = nt,
								       .pos = pos + i,
								       .token = out[i] },
						1, lg),
				 0);
	}
}

void ffix_split_init(struct ffix_split *s, const struct kvp_model *m, uint32_t gen)
{
	const uint32_t n = FFIX_SPLIT_PROMPT, shared = FFIX_SPLIT_SHARED;
	const uint32_t skip = shared * FFIX_SPLIT_BT;
	int32_t toks[FFIX_SPLIT_PROMPT];
	size_t bb;

	assert_true(gen <= FFIX_SPLIT_GEN_MAX);
	memset(s, 0, sizeof(*s));
	s->n_vocab = kvp_model_hparams(m)->n_vocab;
	s->gen = gen;
	s->nb = (n + gen + FFIX_SPLIT_BT - 1) / FFIX_SPLIT_BT;
	s->la = malloc(s->n_vocab * sizeof(float));
	s->lb = malloc(s->n_vocab * sizeof(float));
	s->lc = malloc(s->n_vocab * sizeof(float));
	assert_true(s->la && s->lb && s->lc);
	s->f = ffix_fwd_new(m, NULL, 64, 1);
	ffix_pool_init(&s->p, m, KVP_DTYPE_F32, FFIX_SPLIT_BT, 3 * s->nb);
	bb = s->p.v.geom.block_bytes;
	for (uint32_t i = 0; i < s->nb; i++) {
		s->ta[i] = i;
		s->tb[i] = s->nb + i;
		s->tc[i] = i < shared ? s->ta[i] : 2 * s->nb + i; /* a's first blocks shared */
	}
	ffix_pool_open(&s->p, s->ta, s->nb);
	ffix_pool_open(&s->p, s->tb, s->nb);
	ffix_pool_open(&s->p, s->tc, s->nb);
	ffix_prompt(toks, n, 99);

	assert_int_equal(kvp_fwd_prefill(s->f, &s->p.v, s->ta, s->nb, 0, toks, n, s->la, 0), 0);
	for (uint32_t done = 0; done < n; done += 5)
		assert_int_equal(kvp_fwd_prefill(s->f, &s->p.v, s->tb, s->nb, done, toks + done,
						 n - done < 5 ? n - done : 5, s->lb, 0),
				 0);
	s->snap = malloc(shared * bb);
	assert_non_null(s->snap);
	for (uint32_t i = 0; i < shared; i++)
		memcpy(s->snap + i * bb, kvp_kv_block(&s->p.v, s->ta[i]), bb);
	assert_int_equal(kvp_fwd_prefill(s->f, &s->p.v, s->tc, s->nb, skip, toks + skip, n - skip,
					 s->lc, 0),
			 0);
}

void ffix_split_decode(struct ffix_split *s)
{
	int32_t ga[FFIX_SPLIT_GEN_MAX], gb[FFIX_SPLIT_GEN_MAX], gc[FFIX_SPLIT_GEN_MAX];
	size_t bb = s->p.v.geom.block_bytes;
	uint32_t n = FFIX_SPLIT_PROMPT, V = s->n_vocab;

	/* decode a before c: a's own blocks after the prefix change, the shared ones must not */
	ffix_greedy(s->f, &s->p, s->ta, s->nb, n, s->la, V, ga, s->gen);
	ffix_greedy(s->f, &s->p, s->tb, s->nb, n, s->lb, V, gb, s->gen);
	ffix_greedy(s->f, &s->p, s->tc, s->nb, n, s->lc, V, gc, s->gen);
	assert_memory_equal(ga, gb, s->gen * sizeof(int32_t));
	assert_memory_equal(ga, gc, s->gen * sizeof(int32_t));
	for (uint32_t i = 0; i < FFIX_SPLIT_SHARED; i++)
		assert_memory_equal(s->snap + i * bb, kvp_kv_block(&s->p.v, s->ta[i]), bb);
}

void ffix_split_deinit(struct ffix_split *s)
{
	free(s->snap);
	ffix_pool_deinit(&s->p);
	kvp_fwd_free(s->f);
	free(s->la);
	free(s->lb);
	free(s->lc);
}

void ffix_prompt(int32_t *t, uint32_t n, uint32_t seed)
{
	t[0] = 1; /* BOS */
	for (uint32_t i = 1; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		t[i] = 3 + (int32_t)((seed >> 16) % 256);
	}
}

double ffix_rel_err(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;

	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)a[i] - b[i]);

		if (!(d <= num))
			num = d; /* NaN propagates */
		den = fabs(b[i]) > den ? fabs(b[i]) : den;
	}
	return num / (den > 0 ? den : 1);
}
