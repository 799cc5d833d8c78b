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
 * @stage: the integer K/V types' staged keys (a slot per block: never short)
 */
struct ffix_pool {
	struct kvp_kv_view v;
	size_t bytes;
	struct kvp_kv_stage stage;
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

/*
 * Decode @n greedy tokens of one sequence (block table @table of @nt ids) at positions
 * @pos ..: the first is the argmax of @lg (position @pos - 1's logits), and each step's
 * logits go back into @lg; the tokens to @out.
 */
void ffix_greedy(struct kvp_fwd *f, struct ffix_pool *p, const uint32_t *table, uint32_t nt,
		 uint32_t pos, float *lg, uint32_t V, int32_t *out, uint32_t n);

/* The prefix-split scenario: its prompt, block size, shared prefix, longest decode. */
#define FFIX_SPLIT_PROMPT 37
#define FFIX_SPLIT_BT 4
#define FFIX_SPLIT_SHARED 8 /* blocks of a that c reuses: 32 tokens */
#define FFIX_SPLIT_GEN_MAX 32
#define FFIX_SPLIT_NB ((FFIX_SPLIT_PROMPT + FFIX_SPLIT_GEN_MAX + FFIX_SPLIT_BT - 1) / FFIX_SPLIT_BT)

/**
 * struct ffix_split - one prompt of FFIX_SPLIT_PROMPT tokens computed three ways, each
 * sequence in its own blocks of one pool (f32 K/V, FFIX_SPLIT_BT tokens per block):
 * a in one chunk, b in chunks of 5, c as a prefix hit on a's first FFIX_SPLIT_SHARED
 * blocks plus the rest of the prompt.
 * @la, @lb, @lc: the last prompt position's logits of each (n_vocab floats)
 * @gen:          tokens ffix_split_decode() generates (<= FFIX_SPLIT_GEN_MAX)
 * @nb:           blocks per sequence (prompt + @gen)
 * @snap:         a's shared blocks as prefilled, before c ran
 */
struct ffix_split {
	struct ffix_pool p;
	struct kvp_fwd *f;
	uint32_t n_vocab, gen, nb;
	uint32_t ta[FFIX_SPLIT_NB], tb[FFIX_SPLIT_NB], tc[FFIX_SPLIT_NB];
	float *la, *lb, *lc;
	uint8_t *snap;
};

/* Prefill the three sequences of @m (the caller compares @s->la, lb and lc). */
void ffix_split_init(struct ffix_split *s, const struct kvp_model *m, uint32_t gen);

/*
 * Decode @s->gen greedy tokens of each sequence, a before c, and check that all three
 * generate the same tokens and that a's shared blocks are still as prefilled (c wrote
 * only its own).
 */
void ffix_split_decode(struct ffix_split *s);

void ffix_split_deinit(struct ffix_split *s);

/* @n tokens: BOS, then pseudo-random byte tokens (ids 3..258) from @seed. */
void ffix_prompt(int32_t *t, uint32_t n, uint32_t seed);

/* max |a - b| / max |b| over @n values (NaN propagates). */
double ffix_rel_err(const float *a, const float *b, size_t n);

#endif /* KVP_TESTS_FWDFIX_H */
