/* SPDX-License-Identifier: MIT */
/*
 * bench_decode.c - decode throughput per weight type at batch 1, 4 and 16 against the
 * memory-read roofline measured in the same run.
 *
 * For each model (bench_models.h: the 1b preset in every type, or the paths given): B
 * sequences each prefilled with a 128-token prompt, then decode steps of the whole
 * batch, median over several runs of 16 steps, at the machine's thread count, with the
 * weights mapped from the file and then copied into huge pages (kvp_model_opts).
 * Figure: tokens/s.  Baseline: the roofline, read bandwidth (all threads summing a
 * 1 GiB buffer) divided by the bytes a step reads (every weight once, plus each
 * sequence's K/V history); the ratio is the fraction of the roofline reached.  Also:
 * each type against the f32 file of the same weights in the same run (when the list
 * holds f32: today's path converted every type to it), and the resident memory of the
 * mapped model after decoding against the file size.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/forward.h"
#include "compute/kernels/kernels.h"
#include "compute/model.h"
#include "compute/sample.h"
#include "shm/geom.h"
#include "tests/bench/bench_models.h"
#include "tests/bench/stream.h"
#include "tests/lib/testlib.h"

#define PROMPT 128u
#define STEPS 16u
#define RUNS 5u
#define BT 16u
#define N_BATCH 8 /* most batch sizes one run takes */

/* KVP_BENCH_BATCHES=1,8,32 replaces them (at most N_BATCH, each 1..256) */
static uint32_t batches[N_BATCH] = { 1, 4, 16 };
static int n_batch = 3;

/* One model's decode state: its context, its own K/V blocks and sequences. */
struct lane {
	struct kvp_model *m;
	struct kvp_fwd *f;
	struct kvp_kv_view kv;
	struct kvp_fwd_seq *seq;
	uint32_t *tables;
	float *lg;
	double tps[RUNS], bytes_step[RUNS];
};

static int lane_init(struct lane *ln, struct kvp_model *m, int threads, uint32_t B)
{
	const struct kvp_model_hparams *hp = kvp_model_hparams(m);
	uint32_t ctx = PROMPT + RUNS * STEPS + 1, nb = (ctx + BT - 1) / BT;
	struct kvp_model_shape sh;
	int32_t toks[PROMPT];

	memset(ln, 0, sizeof(*ln));
	ln->m = m;
	ln->seq = calloc(B, sizeof(*ln->seq));
	ln->tables = malloc((size_t)B * nb * 4);
	ln->lg = malloc((size_t)B * hp->n_vocab * 4);
	kvp_model_kv_shape(m, KVP_DTYPE_F32, BT, &sh);
	kvp_geom_init(&ln->kv.geom, &sh);
	ln->kv.n_blocks = B * nb;
	ln->kv.base = aligned_alloc(KVP_BLOCK_ALIGN,
				    (size_t)ln->kv.n_blocks * ln->kv.geom.block_stride);
	if (!ln->seq || !ln->tables || !ln->lg || !ln->kv.base ||
	    kvp_fwd_new(&ln->f, m,
			&(struct kvp_fwd_opts){
				.n_threads = threads, .max_chunk = PROMPT, .max_batch = B }))
		return 1;
	memset(ln->kv.base, 0, (size_t)ln->kv.n_blocks * ln->kv.geom.block_stride);
	for (uint32_t s = 0; s < B; s++) {
		for (uint32_t i = 0; i < nb; i++)
			ln->tables[s * nb + i] = s * nb + i;
		for (uint32_t i = 0; i < PROMPT; i++)
			toks[i] = 3 + (int32_t)((i * 31u + s * 17u) % 256);
		kvp_fwd_prefill(ln->f, &ln->kv, ln->tables + s * nb, nb, 0, toks, PROMPT, ln->lg,
				0);
		ln->seq[s] = (struct kvp_fwd_seq){ .table = ln->tables + s * nb,
						   .n_table = nb,
						   .pos = PROMPT,
						   .token = kvp_sample_greedy(ln->lg,
									      hp->n_vocab) };
	}
	return 0;
}

/* Run @r: STEPS decode steps of the whole batch. */
static void lane_run(struct lane *ln, uint32_t B, uint32_t r)
{
	uint32_t n_vocab = kvp_model_hparams(ln->m)->n_vocab;
	double t0 = kvp_test_now_s(), kv_bytes = 0;

	for (uint32_t i = 0; i < STEPS; i++) {
		for (uint32_t s = 0; s < B; s++)
			kv_bytes += (double)(ln->seq[s].pos + 1) * ln->kv.geom.bytes_per_token;
		kvp_fwd_decode(ln->f, &ln->kv, ln->seq, B, ln->lg);
		for (uint32_t s = 0; s < B; s++) {
			ln->seq[s].token = kvp_sample_greedy(ln->lg + (size_t)s * n_vocab, n_vocab);
			ln->seq[s].pos++;
		}
	}
	ln->tps[r] = B * STEPS / (kvp_test_now_s() - t0);
	ln->bytes_step[r] = (double)kvp_model_info(ln->m)->weight_bytes + kv_bytes / STEPS;
}

static void lane_deinit(struct lane *ln)
{
	kvp_fwd_free(ln->f);
	free(ln->kv.base);
	free(ln->seq);
	free(ln->tables);
	free(ln->lg);
}

/* kB of a /proc/self/smaps_rollup line (Rss:), 0 when unreadable. */
static double smaps_kb(const char *key)
{
	FILE *fp = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	double v = 0;

	if (!fp)
		return 0;
	while (fgets(line, sizeof(line), fp))
		if (!strncmp(line, key, strlen(key)))
			v = strtod(line + strlen(key), NULL);
	fclose(fp);
	return v;
}

struct run_arg {
	int threads;
	double bw;
	double f32_tps[2][N_BATCH]; /* [placement][batch], 0 until the f32 file ran */
};

/* One placement of one model: every batch size; tokens/s into @tps. */
static int bench_placement(const char *type, struct kvp_model *m, int copied, struct run_arg *a,
			   double *tps)
{
	for (int b = 0; b < n_batch; b++) {
		uint32_t B = batches[b];
		struct lane ln;
		char name[160];
		double t, roof;

		if (lane_init(&ln, m, a->threads, B)) {
			fprintf(stderr, "bench-decode: no forward context\n");
			return 1;
		}
		for (uint32_t r = 0; r < RUNS; r++)
			lane_run(&ln, B, r);
		t = kvp_test_median(ln.tps, RUNS);
		roof = a->bw * 1e9 / kvp_test_median(ln.bytes_step, RUNS) * B;
		snprintf(name, sizeof(name), "decode %s, batch %u, %d threads, weights %s", type, B,
			 a->threads, copied ? "copied" : "mapped");
		kvp_bench_report(name, t, "tokens/s", "read bandwidth / bytes per step", roof,
				 "tokens/s");
		if (a->f32_tps[copied][b] > 0) {
			snprintf(name, sizeof(name), "decode %s vs f32, batch %u, weights %s", type,
				 B, copied ? "copied" : "mapped");
			kvp_bench_report(name, t, "tokens/s", "the f32 file", a->f32_tps[copied][b],
					 "tokens/s");
		}
		tps[b] = t;
		lane_deinit(&ln);
		fflush(stdout);
	}
	return 0;
}

static int bench_model(const char *path, const char *type, void *arg)
{
	struct run_arg *a = arg;
	double tps[2][N_BATCH], rss0 = smaps_kb("Rss:");
	int rc = 0;

	for (int copied = 0; !rc && copied < 2; copied++) {
		struct kvp_model *m;
		char err[256], types[512];
		double t0 = kvp_test_now_s();

		if (kvp_model_open_opts(&m, path,
					&(struct kvp_model_opts){
						.weights = copied ? KVP_MODEL_WEIGHTS_COPY :
								    KVP_MODEL_WEIGHTS_MAP },
					err, sizeof(err))) {
			fprintf(stderr, "bench-decode: %s\n", err);
			return 1;
		}
		if (!copied) {
			kvp_model_info_types(kvp_model_info(m), types, sizeof(types));
			printf("model %s (%s): %.1fM params, file %.1f MB, %.1f MB of weights per "
			       "step; %s\n",
			       kvp_model_name(m), type, kvp_model_info(m)->n_params / 1e6,
			       kvp_model_info(m)->file_bytes / 1e6,
			       kvp_model_info(m)->weight_bytes / 1e6, types);
		}
		printf("open, weights %s: %.0f ms\n", copied ? "copied" : "mapped",
		       (kvp_test_now_s() - t0) * 1e3);
		rc = bench_placement(type, m, copied, a, tps[copied]);
		if (!copied && !rc) {
			char name[160];

			snprintf(name, sizeof(name), "resident after decoding %s, weights mapped",
				 type);
			kvp_bench_report(name, (smaps_kb("Rss:") - rss0) / 1024.0, "MiB",
					 "file size", kvp_model_info(m)->file_bytes / 1048576.0,
					 "MiB");
		}
		kvp_model_close(m);
	}
	if (!rc && !strcmp(type, "f32"))
		memcpy(a->f32_tps, tps, sizeof(tps));
	return rc;
}

/* KVP_BENCH_BATCHES: a comma-separated list.  Return: 0, or -1 when it is not one. */
static int parse_batches(const char *v)
{
	int n = 0;

	while (*v) {
		char *end;
		unsigned long b = strtoul(v, &end, 10);

		if (end == v || !b || b > 256 || n == N_BATCH || (*end && *end != ','))
			return -1;
		batches[n++] = (uint32_t)b;
		v = *end ? end + 1 : end;
	}
	if (!n)
		return -1;
	n_batch = n;
	return 0;
}

int main(int argc, char **argv)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	struct run_arg a = { .threads = ncpu > 0 && ncpu < 64 ? (int)ncpu : 1 };
	const struct kvp_kernels *k;
	int rc;

	if (kvp_kernels_best(&k)) {
		fprintf(stderr, "bench-decode: KVP_ISA names no instruction set this CPU runs\n");
		return 1;
	}
	if (getenv("KVP_BENCH_BATCHES") && parse_batches(getenv("KVP_BENCH_BATCHES"))) {
		fprintf(stderr,
			"bench-decode: KVP_BENCH_BATCHES: want up to %d sizes 1..256, "
			"comma-separated, got '%s'\n",
			N_BATCH, getenv("KVP_BENCH_BATCHES"));
		return 1;
	}
	printf("kernels: %s\n", k->name);
	kvp_bench_cpu_regime(300);
	a.bw = kvp_bench_read_gbps(a.threads);
	printf("read bandwidth (%d threads): %.1f GB/s\n", a.threads, a.bw);
	rc = kvp_bench_each_model("bench-decode", argc, argv, bench_model, &a);
	kvp_bench_cpu_regime(300);
	return rc;
}
