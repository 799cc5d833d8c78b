/* SPDX-License-Identifier: MIT */
/*
 * bench_spec.c - speculative decoding (prompt-lookup drafts, compute/draft.h, verified
 * as extra rows of one step) against plain one-token decode steps, same run, batch 1.
 *
 * For each model (bench_models.h: the paths given, else the 1b preset in
 * KVP_BENCH_TYPES, default q4_k_m): two prompts of PROMPT tokens, "repetitive" (a
 * 128-token text repeated with a few tokens edited in each copy, as an agent quotes a
 * file back) and "non-repetitive" (seeded random ids), each prefilled once per mode,
 * then GEN greedy tokens decoded with and without drafts through compute/gen.c's
 * steps, median of RUNS.  Figure: decode tokens/s with speculation; baseline: without,
 * same prompt, same run; also the drafted and accepted counts and whether the greedy
 * tokens agree (they must); and first what a verify step of 1 + k rows costs against a
 * one-row step (KVP_BENCH_QUICK=1: that alone).  Synthetic weights give random text: drafts are accepted
 * only where the model happens to repeat the prompt or itself.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/draft.h"
#include "compute/forward.h"
#include "compute/gen.h"
#include "compute/model.h"
#include "compute/sample.h"
#include "shm/geom.h"
#include "tests/bench/bench_models.h"
#include "tests/lib/testlib.h"

#define PROMPT 512u
#define SEG 128u
#define GEN 64u
#define RUNS 3u
#define BT 16u

struct run_arg {
	int threads;
};

struct result {
	double tps;
	uint64_t drafted, accepted, steps;
	int32_t toks[GEN];
};

/* One generation of GEN tokens after @prompt: tokens/s of the decode part. */
static int generate(struct kvp_model *m, int threads, const int32_t *prompt, bool spec,
		    struct result *res)
{
	const struct kvp_model_hparams *hp = kvp_model_hparams(m);
	uint32_t nb = (PROMPT + GEN + BT - 1) / BT, V = hp->n_vocab;
	int32_t *hist = malloc((PROMPT + GEN) * sizeof(*hist));
	float *lg = malloc((size_t)(1 + KVP_DRAFT_K_DEFAULT) * V * sizeof(float));
	uint32_t *table = malloc(nb * sizeof(*table));
	struct kvp_kv_view kv = { 0 };
	struct kvp_model_shape sh;
	struct kvp_fwd *f = NULL;
	struct kvp_draft d;
	struct kvp_gen g;
	int32_t rows[1 + KVP_DRAFT_K_MAX], id;
	double t0, ts;
	int rc = 1;

	kvp_model_kv_shape(m, KVP_DTYPE_F32, BT, &sh);
	kvp_geom_init(&kv.geom, &sh);
	kv.n_blocks = nb;
	kv.base = aligned_alloc(KVP_BLOCK_ALIGN, (size_t)nb * kv.geom.block_stride);
	if (!hist || !lg || !table || !kv.base ||
	    kvp_fwd_new(&f, m,
			&(struct kvp_fwd_opts){ .n_threads = (uint32_t)threads,
						.max_chunk = 256,
						.max_batch = 1 + KVP_DRAFT_K_DEFAULT }))
		goto out;
	for (uint32_t i = 0; i < nb; i++)
		table[i] = i;
	memcpy(hist, prompt, PROMPT * sizeof(*hist));
	kvp_gen_init(&g, NULL, hist, PROMPT, GEN, false);
	g.kept = hist + PROMPT;
	kvp_draft_init(&d, 4, 1, KVP_DRAFT_K_DEFAULT);
	while (!kvp_gen_prefilled(&g))
		if (kvp_gen_prefill(&g, f, &kv, table, nb, kvp_gen_prefill_next(&g, 256), lg))
			goto out;
	memset(res, 0, sizeof(*res));
	t0 = kvp_test_now_s();
	id = kvp_sample_greedy(lg, V);
	for (;;) {
		uint32_t n_rows, i;

		if (kvp_gen_take(&g, id) == KVP_GEN_LAST)
			break;
		n_rows = spec ? kvp_gen_spec_rows(&g, &d, UINT32_MAX, rows) : 1;
		rows[0] = g.last;
		ts = kvp_test_now_s();
		if (kvp_fwd_step(f, &kv,
				 &(struct kvp_fwd_part){ .table = table,
							 .n_table = nb,
							 .pos0 = g.n_past,
							 .tokens = rows,
							 .n = n_rows,
							 .n_logits = n_rows },
				 1, lg))
			goto out;
		ts = kvp_test_now_s() - ts;
		res->steps++;
		res->drafted += n_rows - 1;
		for (i = 0;; i++) {
			id = kvp_sample_greedy(lg + (size_t)i * V, V);
			if (!kvp_gen_spec_agrees(rows, n_rows, i, id))
				break;
			res->accepted++;
			if (kvp_gen_take(&g, id) == KVP_GEN_LAST)
				goto done;
		}
		kvp_gen_spec_done(&g, &d, n_rows, i + 1);
		kvp_draft_step_cost(&d, n_rows, ts * 1e9);
	}
done:
	res->tps = (GEN - 1) / (kvp_test_now_s() - t0); /* the first came from the prefill */
	memcpy(res->toks, hist + PROMPT, sizeof(res->toks));
	rc = 0;
out:
	kvp_fwd_free(f);
	free(kv.base);
	free(hist);
	free(lg);
	free(table);
	return rc;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/*
 * What a verify step costs: one step of 1 + k rows at position PROMPT against a
 * one-row step there (median of 5 each, the same positions written again and again).
 */
static int step_cost(struct kvp_model *m, int threads, const int32_t *prompt, const char *type)
{
	static const uint32_t ks[] = { 1, 2, 4, 8 };
	uint32_t nb = (PROMPT + GEN + BT - 1) / BT;
	float *lg = malloc((size_t)(1 + KVP_DRAFT_K_DEFAULT) * kvp_model_hparams(m)->n_vocab *
			   sizeof(float));
	uint32_t *table = malloc(nb * sizeof(*table));
	struct kvp_kv_view kv = { 0 };
	struct kvp_model_shape sh;
	struct kvp_fwd *f = NULL;
	double t[1 + sizeof(ks) / sizeof(ks[0])][5];
	int rc = 1;

	kvp_model_kv_shape(m, KVP_DTYPE_F32, BT, &sh);
	kvp_geom_init(&kv.geom, &sh);
	kv.n_blocks = nb;
	kv.base = aligned_alloc(KVP_BLOCK_ALIGN, (size_t)nb * kv.geom.block_stride);
	if (!lg || !table || !kv.base ||
	    kvp_fwd_new(&f, m,
			&(struct kvp_fwd_opts){ .n_threads = (uint32_t)threads,
						.max_chunk = 256,
						.max_batch = 1 + KVP_DRAFT_K_DEFAULT }))
		goto out;
	for (uint32_t i = 0; i < nb; i++)
		table[i] = i;
	for (uint32_t c = 0; c < PROMPT; c += 256)
		if (kvp_fwd_prefill(f, &kv, table, nb, c, prompt + c, 256, lg, 0))
			goto out;
	for (uint32_t r = 0; r < 5; r++)
		for (uint32_t i = 0; i <= sizeof(ks) / sizeof(ks[0]); i++) {
			uint32_t n = i ? 1 + ks[i - 1] : 1;
			double t0 = kvp_test_now_s();

			if (kvp_fwd_step(f, &kv,
					 &(struct kvp_fwd_part){ .table = table,
								 .n_table = nb,
								 .pos0 = PROMPT,
								 .tokens = prompt,
								 .n = n,
								 .n_logits = n },
					 1, lg))
				goto out;
			t[i][r] = kvp_test_now_s() - t0;
		}
	for (uint32_t i = 0; i <= sizeof(ks) / sizeof(ks[0]); i++)
		qsort(t[i], 5, sizeof(double), cmp_double);
	for (uint32_t i = 1; i <= sizeof(ks) / sizeof(ks[0]); i++) {
		char name[160];

		snprintf(name, sizeof(name), "verify step %s, 1 + %u rows, %d threads", type,
			 ks[i - 1], threads);
		kvp_bench_report(name, t[i][2] * 1e3, "ms", "a one-row step", t[0][2] * 1e3, "ms");
	}
	fflush(stdout);
	rc = 0;
out:
	kvp_fwd_free(f);
	free(kv.base);
	free(lg);
	free(table);
	return rc;
}

static int bench_model(const char *path, const char *type, void *arg)
{
	struct run_arg *a = arg;
	struct kvp_model *m;
	char err[256], name[200];
	int32_t prompt[2][PROMPT];
	static const char *const kinds[2] = { "repetitive", "non-repetitive" };
	uint64_t x = 0x2545f4914f6cdd1dull;
	uint32_t V;

	if (kvp_model_open_opts(&m, path,
				&(struct kvp_model_opts){ .weights = KVP_MODEL_WEIGHTS_MAP }, err,
				sizeof(err))) {
		fprintf(stderr, "bench-spec: %s\n", err);
		return 1;
	}
	V = kvp_model_hparams(m)->n_vocab;
	printf("model %s (%s): %.1fM params, %u prompt tokens, %u generated\n", kvp_model_name(m),
	       type, kvp_model_info(m)->n_params / 1e6, PROMPT, GEN);
	for (uint32_t i = 0; i < PROMPT; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		prompt[1][i] = 3 + (int32_t)(x % (V - 3));
		/* the text: the first SEG random ids; each later copy with 3 tokens edited */
		prompt[0][i] = i < SEG ? prompt[1][i] : prompt[0][i - SEG];
		if (i >= SEG && (x >> 32) % SEG < 3)
			prompt[0][i] = 3 + (int32_t)((x >> 12) % (V - 3));
	}
	if (step_cost(m, a->threads, prompt[1], type)) {
		fprintf(stderr, "bench-spec: step failed\n");
		kvp_model_close(m);
		return 1;
	}
	for (int k = 0; k < 2 && !getenv("KVP_BENCH_QUICK"); k++) {
		struct result on, off;
		double ton[RUNS], toff[RUNS];
		bool same = true;

		for (uint32_t r = 0; r < RUNS; r++) {
			if (generate(m, a->threads, prompt[k], false, &off) ||
			    generate(m, a->threads, prompt[k], true, &on)) {
				fprintf(stderr, "bench-spec: generation failed\n");
				kvp_model_close(m);
				return 1;
			}
			toff[r] = off.tps;
			ton[r] = on.tps;
			same &= !memcmp(on.toks, off.toks, sizeof(on.toks));
		}
		qsort(ton, RUNS, sizeof(double), cmp_double);
		qsort(toff, RUNS, sizeof(double), cmp_double);
		printf("%s prompt: %llu steps, %llu drafted, %llu accepted (%.0f%%), greedy tokens "
		       "%s\n",
		       kinds[k], (unsigned long long)on.steps, (unsigned long long)on.drafted,
		       (unsigned long long)on.accepted,
		       on.drafted ? 100.0 * on.accepted / on.drafted : 0.0,
		       same ? "equal" : "DIFFER");
		snprintf(name, sizeof(name), "decode %s, %s prompt, speculative, %d threads", type,
			 kinds[k], a->threads);
		kvp_bench_report(name, ton[RUNS / 2], "tokens/s", "without speculation",
				 toff[RUNS / 2], "tokens/s");
		fflush(stdout);
		if (!same) {
			kvp_model_close(m);
			return 1;
		}
	}
	kvp_model_close(m);
	return 0;
}

int main(int argc, char **argv)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct run_arg a = { .threads = ncpu > 0 && ncpu < 64 ? (int)ncpu : 1 };
	int rc;

	setenv("KVP_BENCH_TYPES", "q4_k_m", 0);
	kvp_bench_cpu_regime(300);
	rc = kvp_bench_each_model("bench-spec", argc, argv, bench_model, &a);
	kvp_bench_cpu_regime(300);
	return rc;
}
