/* SPDX-License-Identifier: MIT */
/*
 * bench_mixed.c - one mixed forward step (kvp_fwd_step(): a decode batch and a prefill
 * chunk in one call) against the same rows as two calls (kvp_fwd_decode() then
 * kvp_fwd_prefill()), in the same run, per weight type (bench_models.h; default here the
 * demo preset in f32, as the daemon's benchmarks use; KVP_BENCH_PRESET, KVP_BENCH_TYPES).
 *
 * B sequences decode after a 128-token history while one sequence prefills a chunk of C
 * tokens after 256 positions; each figure is the median of RUNS steps (the same
 * positions computed again each run: the K/V written is the same).  Figure: ms per
 * step, mixed; baseline: the two calls; the ratio below 1 is what one pass over the
 * weights saves (at most one call's fixed cost).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/forward.h"
#include "compute/model.h"
#include "compute/sample.h"
#include "shm/geom.h"
#include "tests/bench/bench_models.h"
#include "tests/lib/testlib.h"

#define HIST 128u
#define CTX 256u
#define BT 16u
#define RUNS 7
#define B_MAX 8u
#define C_MAX 256u

static const uint32_t batches[] = { 1, 8 };
static const uint32_t chunks[] = { 16, 64, 256 };

static int one_model(const char *path, const char *type, void *arg)
{
	uint32_t nb = (CTX + C_MAX + BT - 1) / BT;
	struct kvp_model *m;
	struct kvp_fwd *f;
	struct kvp_kv_view kv;
	struct kvp_model_shape sh;
	struct kvp_fwd_seq seq[B_MAX];
	struct kvp_fwd_part parts[B_MAX + 1];
	uint32_t tables[(B_MAX + 1) * ((CTX + C_MAX + BT - 1) / BT)];
	int32_t toks[CTX + C_MAX];
	float *lg;
	char err[256];
	int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);

	if (kvp_model_open(&m, path, err, sizeof(err))) {
		fprintf(stderr, "bench-mixed: %s\n", err);
		return 1;
	}
	kvp_model_kv_shape(m, KVP_DTYPE_F32, BT, &sh);
	kvp_geom_init(&kv.geom, &sh);
	kv.n_blocks = (B_MAX + 1) * nb;
	kv.base = aligned_alloc(KVP_BLOCK_ALIGN, (size_t)kv.n_blocks * kv.geom.block_stride);
	lg = malloc((size_t)(B_MAX + 1) * kvp_model_hparams(m)->n_vocab * sizeof(float));
	if (!kv.base || !lg ||
	    kvp_fwd_new(&f, m,
			&(struct kvp_fwd_opts){ .n_threads = threads < 1 ? 1 : (uint32_t)threads,
						.max_chunk = CTX + C_MAX,
						.max_batch = B_MAX + 1 })) {
		fprintf(stderr, "bench-mixed: out of memory\n");
		return 1;
	}
	memset(kv.base, 0, (size_t)kv.n_blocks * kv.geom.block_stride);
	for (uint32_t i = 0; i < CTX + C_MAX; i++)
		toks[i] = 3 + (int32_t)((i * 31u) % 256);
	/* sequence B_MAX prefills; 0 .. B_MAX - 1 decode */
	for (uint32_t s = 0; s <= B_MAX; s++) {
		for (uint32_t i = 0; i < nb; i++)
			tables[s * nb + i] = s * nb + i;
		kvp_fwd_prefill(f, &kv, tables + s * nb, nb, 0, toks, s < B_MAX ? HIST : CTX, lg,
				0);
		if (s < B_MAX)
			seq[s] = (struct kvp_fwd_seq){ .table = tables + s * nb,
						       .n_table = nb,
						       .pos = HIST,
						       .token = toks[HIST] };
	}
	printf("model %s (%s): decode rows after %u positions, a chunk after %u\n",
	       kvp_model_name(m), type, HIST, CTX);
	for (size_t bi = 0; bi < sizeof(batches) / sizeof(batches[0]); bi++)
		for (size_t ci = 0; ci < sizeof(chunks) / sizeof(chunks[0]); ci++) {
			uint32_t B = batches[bi], C = chunks[ci];
			double sep[RUNS], mix[RUNS];
			char name[160];

			for (uint32_t s = 0; s < B; s++)
				parts[s] = (struct kvp_fwd_part){ .table = seq[s].table,
								  .n_table = nb,
								  .pos0 = HIST,
								  .tokens = &seq[s].token,
								  .n = 1 };
			parts[B] = (struct kvp_fwd_part){ .table = tables + B_MAX * nb,
							  .n_table = nb,
							  .pos0 = CTX,
							  .tokens = toks + CTX,
							  .n = C };
			for (int r = 0; r < RUNS; r++) {
				double t0 = kvp_test_now_s();

				kvp_fwd_decode(f, &kv, seq, B, lg);
				kvp_fwd_prefill(f, &kv, tables + B_MAX * nb, nb, CTX, toks + CTX, C,
						lg, 0);
				sep[r] = (kvp_test_now_s() - t0) * 1e3;
				t0 = kvp_test_now_s();
				kvp_fwd_step(f, &kv, parts, B + 1, lg);
				mix[r] = (kvp_test_now_s() - t0) * 1e3;
			}
			snprintf(name, sizeof(name),
				 "%s: %u decode rows + %u-token chunk, one step", type, B, C);
			kvp_bench_report(name, kvp_test_median(mix, RUNS), "ms", "two calls",
					 kvp_test_median(sep, RUNS), "ms");
		}
	kvp_fwd_free(f);
	free(kv.base);
	free(lg);
	kvp_model_close(m);
	return 0;
}

int main(int argc, char **argv)
{
	int rc;

	if (!getenv("KVP_BENCH_PRESET"))
		setenv("KVP_BENCH_PRESET", "demo", 0);
	if (!getenv("KVP_BENCH_TYPES"))
		setenv("KVP_BENCH_TYPES", "f32", 0);
	kvp_bench_cpu_regime(1000);
	rc = kvp_bench_each_model("bench-mixed", argc, argv, one_model, NULL);
	kvp_bench_cpu_regime(1000);
	return rc;
}
