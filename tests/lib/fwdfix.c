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
