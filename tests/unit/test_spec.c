/* SPDX-License-Identifier: MIT */
/*
 * test_spec.c - speculative verification through compute/gen.c's steps
 * (kvp_gen_spec_rows/_agrees/_done) against a run that never drafted, under random
 * accept/reject: drafts are the reference run's own next tokens or, at random, wrong
 * ones, so every step keeps some and rolls the rest back.  After every step the K/V of
 * every position below n_past is bit-equal to the reference's (float types row by row,
 * int8 whole sealed blocks), the kept tokens are the reference's greedy tokens, and
 * n_past is the positions whose inputs stood; the draft source's counts add up.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/draft.h"
#include "compute/forward.h"
#include "compute/gen.h"
#include "compute/mkmodel.h"
#include "compute/model.h"
#include "compute/sample.h"
#include "shm/geom.h"
#include "tests/lib/fwdfix.h"

#define BT 8
#define NB 12 /* 96 positions */
#define PROMPT 19
#define GEN 60
#define KMAX 6

/* Positions [0, n) of @a and @b equal (tables @ta, @tb): rows, or int8's sealed blocks. */
static void kv_equal_below(const struct kvp_kv_view *v, const uint32_t *ta, const uint32_t *tb,
			   uint32_t n)
{
	const struct kvp_geom *g = &v->geom;
	uint32_t hd = g->shape.head_dim;

	if (kvp_dtype_is_int(g->shape.dtype)) {
		for (uint32_t b = 0; b < n / BT; b++)
			assert_memory_equal(kvp_kv_block(v, ta[b]), kvp_kv_block(v, tb[b]),
					    g->block_bytes);
		return;
	}
	for (uint32_t t = 0; t < n; t++)
		for (uint32_t l = 0; l < g->shape.n_layers; l++)
			for (uint32_t kv = 0; kv < 2; kv++)
				for (uint32_t h = 0; h < g->shape.n_kv_heads; h++) {
					size_t off = kvp_geom_run_offset(g, l, kv, h) +
						     (size_t)(t % BT) * hd * g->elem_bytes;

					if (memcmp(kvp_kv_block(v, ta[t / BT]) + off,
						   kvp_kv_block(v, tb[t / BT]) + off,
						   hd * g->elem_bytes))
						fail_msg("position %u layer %u %s head %u differs",
							 t, l, kv ? "V" : "K", h);
				}
}

static void spec_vs_plain(struct kvp_model *m, uint32_t dtype, uint64_t seed)
{
	uint32_t V = kvp_model_hparams(m)->n_vocab;
	struct kvp_fwd *f = ffix_fwd_new(m, NULL, 32, 1 + KMAX);
	struct ffix_pool p;
	uint32_t ta[NB], tb[NB];
	int32_t hist[PROMPT + GEN], ref[GEN + 1], rows[1 + KVP_DRAFT_K_MAX];
	float *lg = malloc((size_t)(1 + KMAX) * V * sizeof(float));
	struct kvp_draft d;
	struct kvp_gen g;
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1, rejected = 0, steps = 0;

	assert_non_null(lg);
	assert_true(kvp_fwd_rows_exact(f));
	ffix_pool_init(&p, m, dtype, BT, 2 * NB);
	for (uint32_t i = 0; i < NB; i++)
		ta[i] = 2 * i, tb[i] = 2 * i + 1;
	ffix_pool_open(&p, ta, NB);
	ffix_pool_open(&p, tb, NB);
	ffix_prompt(hist, PROMPT, (uint32_t)seed);

	/* the reference: one token per decode step */
	assert_int_equal(kvp_fwd_prefill(f, &p.v, ta, NB, 0, hist, PROMPT, lg, 0), 0);
	ffix_greedy(f, &p, ta, NB, PROMPT, lg, V, ref, GEN + 1);

	/* speculative: the same prompt, drafts from an oracle that lies at random */
	kvp_gen_init(&g, NULL, hist, PROMPT, GEN, false);
	g.kept = hist + PROMPT;
	kvp_draft_init(&d, 4, 1, KMAX);
	assert_int_equal(kvp_gen_prefill(&g, f, &p.v, tb, NB, PROMPT, lg), 0);
	int32_t id = kvp_sample_greedy(lg, V);
	for (;;) {
		enum kvp_gen_next next = kvp_gen_take(&g, id);
		uint32_t n_rows, want, i, cap;

		assert_int_equal(id, ref[g.n_generated - 1]);
		if (next == KVP_GEN_LAST)
			break;
		/* kvp_gen_spec_rows() caps by what max_new allows and the caller's cap */
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		cap = kvp_gen_spec_kv_cap(dtype, BT, g.n_past);
		cap = cap < (uint32_t)(x % (KMAX + 1)) ? cap : (uint32_t)(x % (KMAX + 1));
		d.k = KMAX; /* the test picks the count, not the rate */
		n_rows = kvp_gen_spec_rows(&g, &d, cap, rows);
		assert_int_equal(rows[0], g.last);
		assert_true(n_rows - 1 <= cap && n_rows - 1 <= GEN - g.n_generated);
		/* overwrite the history's drafts: the true next tokens, each wrong at 1 in 4 */
		want = n_rows;
		for (i = 1; i < n_rows; i++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			rows[i] = ref[g.n_generated - 1 + i];
			if (x % 4 == 0) {
				rows[i] = (rows[i] + 1 + (int32_t)((x >> 8) % (V - 1))) %
					  (int32_t)V;
				want = want < i ? want : i;
			}
		}
		assert_int_equal(kvp_fwd_step(f, &p.v,
					      &(struct kvp_fwd_part){ .table = tb,
								      .n_table = NB,
								      .pos0 = g.n_past,
								      .tokens = rows,
								      .n = n_rows,
								      .n_logits = n_rows },
					      1, lg),
				 0);
		steps++;
		for (i = 0;; i++) {
			id = kvp_sample_greedy(lg + (size_t)i * V, V);
			if (!kvp_gen_spec_agrees(rows, n_rows, i, id))
				break;
			next = kvp_gen_take(&g, id);
			assert_int_equal(id, ref[g.n_generated - 1]);
			if (next == KVP_GEN_LAST)
				goto done;
		}
		/* the rows up to the first wrong draft stood, no more, no fewer */
		assert_int_equal(i + 1, want);
		rejected += n_rows - want;
		kvp_gen_spec_done(&g, &d, n_rows, i + 1);
		/* every kept token fed back; the pick @id is taken next */
		assert_int_equal(g.n_past, PROMPT + g.n_generated);
		kv_equal_below(&p.v, ta, tb, g.n_past);
		/*
		 * int8: free stage slots as another sequence would leave them, so a block sealed
		 * by a rejected row and staged again could not find its old keys there
		 */
		for (uint32_t s = 0; p.v.stage && s < p.stage.n_slots; s++)
			if (p.stage.owner[s] == KVP_STAGE_NONE)
				memset(p.stage.data + (size_t)s * p.stage.slot_floats, 0xff,
				       p.stage.slot_floats * sizeof(float));
	}
done:
	assert_int_equal(g.n_generated, GEN);
	assert_memory_equal(hist + PROMPT, ref, GEN * sizeof(int32_t));
	assert_true(d.accepted <= d.drafted);
	assert_true(d.steps <= steps);
	assert_true(rejected > 0 && d.accepted > 0);
	kv_equal_below(&p.v, ta, tb, g.n_past);
	ffix_pool_deinit(&p);
	kvp_fwd_free(f);
	free(lg);
}

static void test_rollback_matches_plain_decode(void **state)
{
	struct kvp_mkmodel_opts o;
	struct kvp_model *m;
	static const uint32_t dtypes[] = { KVP_DTYPE_F32, KVP_DTYPE_F16, KVP_DTYPE_BF16,
					   KVP_DTYPE_INT8 };

	(void)state;
	assert_int_equal(kvp_mkmodel_preset(&o, "tinyq"), 0);
	o.type = KVP_GGML_Q8_0;
	m = ffix_model_open(&o);
	for (size_t t = 0; t < sizeof(dtypes) / sizeof(dtypes[0]); t++)
		for (uint64_t seed = 1; seed <= 4; seed++)
			spec_vs_plain(m, dtypes[t], seed);
	ffix_model_close(m);
}

static void test_kv_cap(void **state)
{
	(void)state;
	/* float K/V: no limit; int8: inside the block, short of its last row; int4: none */
	assert_int_equal(kvp_gen_spec_kv_cap(KVP_DTYPE_F16, 16, 15), UINT32_MAX);
	assert_int_equal(kvp_gen_spec_kv_cap(KVP_DTYPE_INT8, 16, 0), 14);
	assert_int_equal(kvp_gen_spec_kv_cap(KVP_DTYPE_INT8, 16, 17), 13);
	assert_int_equal(kvp_gen_spec_kv_cap(KVP_DTYPE_INT8, 16, 14), 0);
	assert_int_equal(kvp_gen_spec_kv_cap(KVP_DTYPE_INT8, 16, 15), 0);
	assert_int_equal(kvp_gen_spec_kv_cap(KVP_DTYPE_INT8, 1, 5), 0);
	assert_int_equal(kvp_gen_spec_kv_cap(KVP_DTYPE_INT4, 16, 0), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rollback_matches_plain_decode),
		cmocka_unit_test(test_kv_cap),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
