/* SPDX-License-Identifier: MIT */
/*
 * kvqual.c - the K/V types' logit differences against f32 K/V (kvqual.h).
 */
#include "tests/lib/kvqual.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/forward.h"
#include "compute/sample.h"
#include "tests/lib/fwdfix.h"

#define BT 16u

/*
 * Prefill @toks[0..n_prompt) in @dtype, then KVQUAL_GEN steps: forced to @force's
 * tokens when given (logits of each step to @lg rows 1..), else greedy into @toks.
 * Row 0 of @lg: the last prompt position's logits.
 */
static void run_one(const struct kvp_model *m, const struct kvqual_type *ty, uint32_t n_prompt,
		    uint32_t chunk, int32_t *toks, const int32_t *force, float *lg)
{
	uint32_t V = kvp_model_hparams(m)->n_vocab, total = n_prompt + KVQUAL_GEN;
	uint32_t nb = (total + BT - 1) / BT, *table = malloc(nb * sizeof(uint32_t));
	struct kvp_fwd *f = ffix_fwd_new(m, ty->k, chunk, 1);
	struct ffix_pool p;

	assert_non_null(table);
	ffix_pool_init(&p, m, ty->dtype, BT, nb);
	if (ty->dtype == KVP_DTYPE_INT4)
		p.stage.window = ty->window;
	for (uint32_t i = 0; i < nb; i++)
		table[i] = i;
	ffix_pool_open(&p, table, nb);
	for (uint32_t pos = 0; pos < n_prompt; pos += chunk) {
		uint32_t n = n_prompt - pos < chunk ? n_prompt - pos : chunk;

		assert_int_equal(kvp_fwd_prefill(f, &p.v, table, nb, pos, toks + pos, n, lg, 0), 0);
	}
	for (uint32_t s = 0; s < KVQUAL_GEN; s++) {
		int32_t t = force ? force[s] : kvp_sample_greedy(lg + (size_t)s * V, V);

		toks[n_prompt + s] = t;
		assert_int_equal(kvp_fwd_decode(f, &p.v,
						&(struct kvp_fwd_seq){ .table = table,
								       .n_table = nb,
								       .pos = n_prompt + s,
								       .token = t },
						1, lg + (size_t)(s + 1) * V),
				 0);
	}
	ffix_pool_deinit(&p);
	kvp_fwd_free(f);
	free(table);
}

void kvqual_measure(const struct kvp_model *m, uint32_t n_prompt, uint32_t chunk,
		    const uint32_t *dtypes, uint32_t n, struct kvqual *out)
{
	struct kvqual_type ty[8];

	assert_true(n <= 8);
	for (uint32_t i = 0; i < n; i++)
		ty[i] = (struct kvqual_type){ .dtype = dtypes[i], .window = KVP_KV_WINDOW_DEFAULT };
	kvqual_measure_types(m, n_prompt, chunk, ty, n, out);
}

void kvqual_measure_types(const struct kvp_model *m, uint32_t n_prompt, uint32_t chunk,
			  const struct kvqual_type *types, uint32_t n, struct kvqual *out)
{
	const struct kvqual_type f32 = { .dtype = KVP_DTYPE_F32 };
	uint32_t V = kvp_model_hparams(m)->n_vocab, total = n_prompt + KVQUAL_GEN;
	size_t nl = (size_t)(KVQUAL_GEN + 1) * V;
	float *ref = malloc(nl * sizeof(float)), *lg = malloc(nl * sizeof(float));
	int32_t *rt = malloc(total * sizeof(int32_t)), *tt = malloc(total * sizeof(int32_t));
	double mx = 0;

	assert_true(ref && lg && rt && tt);
	ffix_prompt(rt, n_prompt, 11);
	run_one(m, &f32, n_prompt, chunk, rt, NULL, ref);
	for (size_t i = 0; i < nl; i++)
		mx = fabs(ref[i]) > mx ? fabs(ref[i]) : mx;
	for (uint32_t d = 0; d < n; d++) {
		struct kvqual *q = &out[d];
		double sum = 0;

		memset(q, 0, sizeof(*q));
		q->max_ref = mx;
		memcpy(tt, rt, n_prompt * sizeof(int32_t));
		run_one(m, &types[d], n_prompt, chunk, tt, rt + n_prompt, lg);
		for (size_t i = 0; i < nl; i++) {
			double e = fabs((double)lg[i] - ref[i]);

			q->max_abs = e > q->max_abs ? e : q->max_abs;
			sum += e;
		}
		q->mean_abs = sum / (double)nl;
		run_one(m, &types[d], n_prompt, chunk, tt, NULL, lg);
		while (q->agree < KVQUAL_GEN && tt[n_prompt + q->agree] == rt[n_prompt + q->agree])
			q->agree++;
	}
	free(ref);
	free(lg);
	free(rt);
	free(tt);
}
