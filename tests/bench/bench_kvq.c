/* SPDX-License-Identifier: MIT */
/*
 * bench_kvq.c - the K/V types against f16 K/V, same run, on the demo preset:
 *  - tokens held per GiB of pool (block stride included), demo and 1b shapes;
 *  - decode tokens/s of one sequence at 512 and 8,192 tokens of context (demo in
 *    Q4_K_M: weights small enough that the K/V history is a fair part of a step's
 *    bytes), median of RUNS runs of STEPS steps, for f16, f32, bf16, int8 and int4;
 *    the history is filled with random K/V in each type's format (the speed of
 *    attention does not depend on the values; int4's history is all sealed);
 *  - prefill of a 512-token prompt (chunks of 256): time per type, ratio to f16 (the
 *    cost of quantizing on write);
 *  - quality on the demo preset (f32 weights, 2,048-token prompt, 64 generated;
 *    tests/lib/kvqual.h): max and mean |logit difference| against f32 K/V and greedy
 *    agreement.  KVP_BENCH_QUICK=1 skips it (a minute on 2 vCPUs).
 * Runs as one cmocka test, so the fixtures' checks apply.  Arguments, to profile one
 * part (valgrind --tool=callgrind counts instructions repeatably on a loaded machine):
 *   --ctx N       decode at N tokens of context only (repeatable; 0: no decode)
 *   --types LIST  the speed runs' types, comma-separated (f16 is always run, first)
 *   --runs N, --steps N   runs per median (odd; default 5), decode steps per run (16)
 *   --no-prefill  skip the prefill runs
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/forward.h"
#include "compute/kernels/kernels.h"
#include "compute/mkmodel.h"
#include "compute/sample.h"
#include "shm/geom.h"
#include "tests/lib/fwdfix.h"
#include "tests/lib/kvqual.h"
#include "tests/lib/testlib.h"

#define BT 16u
#define RUNS_MAX 15u
#define N_TYPES 4
#define N_SPEED 5

static const uint32_t types[N_TYPES] = { KVP_DTYPE_F16, KVP_DTYPE_F32, KVP_DTYPE_BF16,
					 KVP_DTYPE_INT8 };

/* the speed runs: f16 (the baseline) first */
static uint32_t speed_types[N_SPEED] = { KVP_DTYPE_F16, KVP_DTYPE_F32, KVP_DTYPE_BF16,
					 KVP_DTYPE_INT8, KVP_DTYPE_INT4 };
static int n_speed = N_SPEED;
static uint32_t ctxs[4] = { 512, 8192 }, n_ctxs = 2, RUNS = 5, STEPS = 16;
static int do_prefill = 1;

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, uint32_t n)
{
	qsort(v, n, sizeof(*v), cmp_d);
	return v[n / 2];
}

static void tokens_per_gib(void)
{
	static const char *const presets[] = { "demo", "1b" };

	for (int p = 0; p < 2; p++) {
		struct kvp_mkmodel_opts o;
		double f16 = 0;

		assert_int_equal(kvp_mkmodel_preset(&o, presets[p]), 0);
		for (int t = 0; t < N_TYPES; t++) {
			struct kvp_model_shape s = { .n_layers = o.n_layers,
						     .n_kv_heads = o.n_kv_heads,
						     .head_dim = o.n_embd / o.n_heads,
						     .dtype = types[t],
						     .block_tokens = BT };
			struct kvp_geom g;
			double tok;

			assert_int_equal(kvp_geom_init(&g, &s), 0);
			tok = (double)((1ull << 30) / g.block_stride) * BT;
			if (!t)
				f16 = tok;
			printf("tokens per GiB  %-5s %-5s %9.0f (%.1f bytes a token)  %.3fx f16\n",
			       presets[p], kvp_dtype_name(types[t]), tok,
			       (double)g.block_bytes / BT, tok / f16);
		}
	}
}

/*
 * int4 at 16- and 32-token blocks against f16 at the same block size: the pool's
 * tokens per GiB (block_stride: a block is padded to a page), and the payload.
 */
static void tokens_per_gib_int4(void)
{
	static const char *const presets[] = { "demo", "1b" };

	for (int p = 0; p < 2; p++) {
		struct kvp_mkmodel_opts o;

		assert_int_equal(kvp_mkmodel_preset(&o, presets[p]), 0);
		for (uint32_t bt = 16; bt <= 32; bt *= 2) {
			struct kvp_model_shape s = { .n_layers = o.n_layers,
						     .n_kv_heads = o.n_kv_heads,
						     .head_dim = o.n_embd / o.n_heads,
						     .dtype = KVP_DTYPE_F16,
						     .block_tokens = bt };
			struct kvp_geom g16, g4;
			double t16, t4;

			assert_int_equal(kvp_geom_init(&g16, &s), 0);
			s.dtype = KVP_DTYPE_INT4;
			assert_int_equal(kvp_geom_init(&g4, &s), 0);
			t16 = (double)((1ull << 30) / g16.block_stride) * bt;
			t4 = (double)((1ull << 30) / g4.block_stride) * bt;
			printf("tokens per GiB  %-5s int4  block %2u %9.0f (%.1f bytes a token)  "
			       "%.3fx f16 (payload %.3fx)\n",
			       presets[p], bt, t4, (double)g4.block_bytes / bt, t4 / t16,
			       (double)g16.block_bytes / g4.block_bytes);
		}
	}
}

/* Random K/V for positions [0, n) of @table, stored as the forward pass stores them. */
static void fill_history(const struct kvp_kernels *k, struct ffix_pool *p, const uint32_t *table,
			 uint32_t n)
{
	const struct kvp_geom *g = &p->v.geom;
	uint32_t hd = g->shape.head_dim, rows = BT * hd;
	float *x = malloc((size_t)rows * 4);
	uint64_t r = 88172645463325252ull;

	assert_non_null(x);
	for (uint32_t b = 0; b < n / BT; b++)
		for (uint32_t l = 0; l < g->shape.n_layers; l++)
			for (uint32_t kv = 0; kv < 2; kv++)
				for (uint32_t h = 0; h < g->shape.n_kv_heads; h++) {
					uint8_t *run = kvp_kv_run(&p->v, table[b], l, kv, h);

					for (uint32_t i = 0; i < rows; i++) {
						r ^= r << 13;
						r ^= r >> 7;
						r ^= r << 17;
						x[i] = (float)(r >> 40) / 8388608.0f - 1.0f;
					}
					if (g->shape.dtype == KVP_DTYPE_INT4) {
						(kv ? k->kvq4_v : k->kvq4_k)(run, x, BT, hd);
					} else if (g->shape.dtype != KVP_DTYPE_INT8) {
						k->kv_store[g->shape.dtype](run, x, rows);
					} else if (kv) {
						for (uint32_t t = 0; t < BT; t++)
							k->kvq_row8((int8_t *)run + t * hd,
								    run + rows + t, x + t * hd, hd);
					} else {
						k->kvq_chan8((int8_t *)run, run + rows, x, BT, hd);
					}
				}
	free(x);
}

/* One type's pool and forward context for the speed runs. */
struct lane {
	struct ffix_pool p;
	struct kvp_fwd *f;
	uint32_t *table, nb;
	double t[RUNS_MAX];
};

static void lane_init(struct lane *ln, const struct kvp_model *m, uint32_t dtype, uint32_t nb,
		      uint32_t chunk)
{
	ln->nb = nb;
	ln->table = malloc(nb * sizeof(uint32_t));
	assert_non_null(ln->table);
	ln->f = ffix_fwd_new(m, NULL, chunk, 1);
	ffix_pool_init(&ln->p, m, dtype, BT, nb);
	for (uint32_t i = 0; i < nb; i++)
		ln->table[i] = i;
	ffix_pool_open(&ln->p, ln->table, nb);
}

static void lane_deinit(struct lane *ln)
{
	ffix_pool_deinit(&ln->p);
	kvp_fwd_free(ln->f);
	free(ln->table);
}

/* Seconds of STEPS decode steps of one sequence at positions @ctx .. */
static double decode_run(struct lane *ln, float *lg, uint32_t V, uint32_t ctx)
{
	double t0 = kvp_test_now_s();
	int32_t tok = 5;

	for (uint32_t s = 0; s < STEPS; s++) {
		assert_int_equal(kvp_fwd_decode(ln->f, &ln->p.v,
						&(struct kvp_fwd_seq){ .table = ln->table,
								       .n_table = ln->nb,
								       .pos = ctx + s,
								       .token = tok },
						1, lg),
				 0);
		tok = kvp_sample_greedy(lg, V);
	}
	return kvp_test_now_s() - t0;
}

/*
 * Decode at 512 and 8,192 tokens of context, then the 512-token prefill: every type's
 * run r before any type's run r + 1 (the machine is shared: a slow moment hits all
 * types alike), medians.
 */
static void speed(void)
{
	enum { N = 512, CHUNK = 256 };
	struct kvp_mkmodel_opts o;
	struct lane ln[N_SPEED];
	struct kvp_model *m;
	int32_t toks[N];
	float *lg;
	uint32_t V;

	assert_int_equal(kvp_mkmodel_preset(&o, "demo"), 0);
	o.type = KVP_MKMODEL_Q4_K_M;
	o.n_ctx = 16384;
	m = ffix_model_open(&o);
	V = kvp_model_hparams(m)->n_vocab;
	lg = malloc((size_t)V * 4);
	assert_non_null(lg);
	for (uint32_t c = 0; c < n_ctxs; c++) {
		for (int t = 0; t < n_speed; t++) {
			lane_init(&ln[t], m, speed_types[t], (ctxs[c] + STEPS) / BT + 1, 16);
			fill_history(kvp_fwd_kernels(ln[t].f), &ln[t].p, ln[t].table, ctxs[c]);
		}
		for (uint32_t r = 0; r < RUNS; r++)
			for (int t = 0; t < n_speed; t++)
				ln[t].t[r] = decode_run(&ln[t], lg, V, ctxs[c]);
		for (int t = 0; t < n_speed; t++) {
			double s = median(ln[t].t, RUNS);

			if (!t)
				ln[0].t[0] = s; /* f16's median, the baseline */
			printf("decode demo q4_k_m ctx %5u  %-5s %7.1f tokens/s  %.3fx f16\n",
			       ctxs[c], kvp_dtype_name(speed_types[t]), STEPS / s, ln[0].t[0] / s);
		}
		for (int t = 0; t < n_speed; t++)
			lane_deinit(&ln[t]);
		fflush(stdout);
	}
	if (!do_prefill)
		goto out;
	ffix_prompt(toks, N, 3);
	for (int t = 0; t < n_speed; t++)
		lane_init(&ln[t], m, speed_types[t], N / BT, CHUNK);
	for (uint32_t r = 0; r < RUNS; r++)
		for (int t = 0; t < n_speed; t++) {
			double t0 = kvp_test_now_s();

			for (uint32_t pos = 0; pos < N; pos += CHUNK)
				assert_int_equal(kvp_fwd_prefill(ln[t].f, &ln[t].p.v, ln[t].table,
								 ln[t].nb, pos, toks + pos, CHUNK,
								 lg, 0),
						 0);
			ln[t].t[r] = kvp_test_now_s() - t0;
		}
	for (int t = 0; t < n_speed; t++) {
		double s = median(ln[t].t, RUNS);

		if (!t)
			ln[0].t[0] = s;
		printf("prefill demo q4_k_m 512 tokens  %-5s %7.1f tokens/s  %.3fx f16\n",
		       kvp_dtype_name(speed_types[t]), N / s, ln[0].t[0] / s);
	}
	for (int t = 0; t < n_speed; t++)
		lane_deinit(&ln[t]);
out:
	free(lg);
	ffix_model_close(m);
}

static void quality(void)
{
	static const uint32_t qtypes[] = { KVP_DTYPE_F16, KVP_DTYPE_BF16, KVP_DTYPE_INT8 };
	struct kvp_mkmodel_opts o;
	struct kvqual q[3];
	struct kvp_model *m;

	assert_int_equal(kvp_mkmodel_preset(&o, "demo"), 0);
	m = ffix_model_open(&o);
	kvqual_measure(m, 2048, 256, qtypes, 3, q);
	for (int i = 0; i < 3; i++) {
		printf("quality demo 2048+64  %-5s max |dlogit| %.4g  mean %.4g  (logits up to "
		       "%.3g)  greedy agrees %u/%u\n",
		       kvp_dtype_name(qtypes[i]), q[i].max_abs, q[i].mean_abs, q[i].max_ref,
		       q[i].agree, KVQUAL_GEN);
	}
	ffix_model_close(m);
}

/* int4 (window 32 and none) on the demo preset, 2,048 + 64 tokens, against f32 K/V */
static void quality_int4(void)
{
	static const struct kvqual_type ty[] = { { .dtype = KVP_DTYPE_INT4, .window = 32 },
						 { .dtype = KVP_DTYPE_INT4, .window = 0 } };
	struct kvp_mkmodel_opts o;
	struct kvqual q[2];
	struct kvp_model *m;

	assert_int_equal(kvp_mkmodel_preset(&o, "demo"), 0);
	m = ffix_model_open(&o);
	kvqual_measure_types(m, 2048, 256, ty, 2, q);
	for (int i = 0; i < 2; i++)
		printf("quality demo 2048+64  int4 window %2u max |dlogit| %.4g  mean %.4g  "
		       "(logits up to %.3g)  greedy agrees %u/%u\n",
		       ty[i].window, q[i].max_abs, q[i].mean_abs, q[i].max_ref, q[i].agree,
		       KVQUAL_GEN);
	ffix_model_close(m);
}

static void test_kvq(void **state)
{
	const struct kvp_kernels *k;

	(void)state;
	assert_int_equal(kvp_kernels_best(&k), 0);
	printf("kernels %s; medians of %u runs, the types' runs interleaved\n", k->name, RUNS);
	tokens_per_gib();
	tokens_per_gib_int4();
	speed();
	if (!getenv("KVP_BENCH_QUICK")) {
		quality();
		quality_int4();
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: bench-kvq [--ctx N]... [--types f16,int8,...] [--runs N] "
			"[--steps N] [--no-prefill]\n");
	exit(2);
}

/* --types: f16 first, then the others named, in their order */
static void parse_types(char *list)
{
	n_speed = 1;
	for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
		uint32_t d;

		if (kvp_dtype_parse(tok, &d))
			usage();
		if (d != KVP_DTYPE_F16 && n_speed < N_SPEED)
			speed_types[n_speed++] = d;
	}
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kvq),
	};
	int user_ctx = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "--no-prefill")) {
			do_prefill = 0;
			continue;
		}
		if (i + 1 >= argc)
			usage();
		if (!strcmp(a, "--ctx")) {
			uint32_t c = (uint32_t)strtoul(argv[++i], NULL, 10);

			if (!user_ctx)
				n_ctxs = 0;
			user_ctx = 1;
			if (c && n_ctxs < 4)
				ctxs[n_ctxs++] = c;
		} else if (!strcmp(a, "--types")) {
			parse_types(argv[++i]);
		} else if (!strcmp(a, "--runs")) {
			RUNS = (uint32_t)strtoul(argv[++i], NULL, 10);
			if (!RUNS || RUNS > RUNS_MAX)
				usage();
		} else if (!strcmp(a, "--steps")) {
			STEPS = (uint32_t)strtoul(argv[++i], NULL, 10);
			if (!STEPS)
				usage();
		} else {
			usage();
		}
	}

	return cmocka_run_group_tests(tests, NULL, NULL);
}
