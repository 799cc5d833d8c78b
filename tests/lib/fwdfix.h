/* SPDX-License-Identifier: MIT */
/*
 * fwdfix.h - fixtures for the tests of the forward pass (test_forward.c, test_models.c):
 * synthetic models opened from memory, a K/V pool laid out as the daemon's, a forward
 * context, pseudo-random prompts, and the relative error of logits.
 *
 * The pool is an aligned heap region: every byte starts as 0xff (NaN in f32, f16 and
 * bf16), and under ASan the whole region is poisoned until a test opens the blocks of
 * its tables (their padding stays poisoned), so a read outside a sequence's blocks is
 * an ASan report, and in a plain build a NaN in the logits.
 *
 * These fail the running cmocka test on any error: call them from inside a test.
 */
#ifndef KVP_TESTS_FWDFIX_H
#define KVP_TESTS_FWDFIX_H

#include <stddef.h>
#include <stdint.h>

#include "compute/forward.h"
#include "compute/mkmodel.h"
#include "compute/model.h"
#include "shm/geom.h"

/**
 * struct ffix_pool - a K/V pool in the heap
 * @v:     the view the forward pass is given
 * @bytes: size of the region at v.base
 */
struct ffix_pool {
	struct kvp_kv_view v;
	size_t bytes;
};

/*
 * ffix_model_try_open() - write the synthetic model @o describes into memory and open
 * it; the model borrows the bytes, and ffix_model_close() frees both.
 * @out: out; set only on success
 * Return: 0, or kvp_model_open_mem()'s error with @err filled (the bytes freed).
 */
int ffix_model_try_open(struct kvp_model **out, const struct kvp_mkmodel_opts *o, char *err,
			size_t errlen);

/* ffix_model_try_open() that fails the test, with the loader's message, on an error. */
struct kvp_model *ffix_model_open(const struct kvp_mkmodel_opts *o);

/* Close a model of ffix_model_*open() and free its bytes. */
void ffix_model_close(struct kvp_model *m);

/* @n_blocks blocks of @m's K/V shape in @dtype, @bt tokens each: 0xff, poisoned. */
void ffix_pool_init(struct ffix_pool *p, const struct kvp_model *m, uint32_t dtype, uint32_t bt,
		    uint32_t n_blocks);

/* Make the payload of the @n blocks of @table readable (the padding stays poisoned). */
void ffix_pool_open(struct ffix_pool *p, const uint32_t *table, uint32_t n);

void ffix_pool_deinit(struct ffix_pool *p);

/* A forward context on 2 threads: kernel table @k (NULL: the best one), chunk, batch. */
struct kvp_fwd *ffix_fwd_new(const struct kvp_model *m, const struct kvp_kernels *k, uint32_t chunk,
			     uint32_t batch);

/* @n tokens: BOS, then pseudo-random byte tokens (ids 3..258) from @seed. */
void ffix_prompt(int32_t *t, uint32_t n, uint32_t seed);

/* max |a - b| / max |b| over @n values (NaN propagates). */
double ffix_rel_err(const float *a, const float *b, size_t n);

#endif /* KVP_TESTS_FWDFIX_H */
