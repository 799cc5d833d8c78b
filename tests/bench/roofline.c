/* SPDX-License-Identifier: MIT */
/*
 * roofline.c - `kvp-roofline`: the rooflines of a benchmark written as a script
 * (tests/bench/vs_llamacpp.sh), as one JSON object on stdout.
 *
 *   kvp-roofline machine [THREADS]
 *     measures, with THREADS threads at once (1..64, default 2): the read bandwidth
 *     (stream.h) and the register peaks (peak.h) of every kernel table this CPU runs:
 *     {"threads":2,"read_gbps":41.2,"avx2":{"f32":...,"f32_insn":"...","int8":...,
 *      "int8_insn":"...","bf16":0},"avx512":{...}}; a table the CPU lacks is null.
 *   kvp-roofline model FILE.gguf [CHUNK DEPTH STEPS]
 *     what one token of FILE costs (model_cost.h), nothing measured: the operations per
 *     token of a CHUNK-token prefill (default 512), the mean bytes per batch-1 decode
 *     step over STEPS steps (default 128) after DEPTH positions (default 512) with f16
 *     K/V, and which peak its prefill is bound by ("ceiling": "f32", "bf16" or "int8",
 *     the activation format of the type holding most of the matrices' bytes).
 * Exit 0, 1 on a failure, 2 on a usage error.
 */
#include <stdio.h>
#include <string.h>

#include "compute/kernels/kernels.h"
#include "compute/model.h"
#include "shm/geom.h"
#include "tests/bench/model_cost.h"
#include "tests/bench/peak.h"
#include "tests/bench/stream.h"
#include "util/parse.h"

static int usage(void)
{
	fprintf(stderr, "usage: kvp-roofline machine [THREADS]\n"
			"       kvp-roofline model FILE.gguf [CHUNK DEPTH STEPS]\n");
	return 2;
}

static void print_peak(const char *isa, const struct kvp_bench_peak *p)
{
	printf(",\"%s\":", isa);
	if (!p) {
		printf("null");
		return;
	}
	printf("{\"f32\":%.1f,\"f32_insn\":\"%s\",\"int8\":%.1f,\"int8_insn\":\"%s\",\"bf16\":%.1f}",
	       p->f32, p->f32_insn, p->int8, p->int8_insn, p->bf16);
}

static int machine(int threads)
{
	struct kvp_bench_peak p2 = { 0 }, p5 = { 0 };
	int has2 = kvp_isa_supported(KVP_ISA_AVX2), has5 = kvp_isa_supported(KVP_ISA_AVX512);
	double bw = kvp_bench_read_gbps(threads);

	if (bw <= 0) {
		fprintf(stderr, "kvp-roofline: no memory for the 1 GiB read buffer\n");
		return 1;
	}
	if (has2)
		kvp_bench_peak_avx2(&p2, threads);
	if (has5)
		kvp_bench_peak_avx512(&p5, threads);
	printf("{\"threads\":%d,\"read_gbps\":%.2f", threads, bw);
	print_peak("avx2", has2 ? &p2 : NULL);
	print_peak("avx512", has5 ? &p5 : NULL);
	printf("}\n");
	return 0;
}

static int model(const char *path, uint32_t chunk, uint32_t depth, uint32_t steps)
{
	static const char *const ceil_name[KVP_ACT__COUNT] = { [KVP_ACT_F32] = "f32",
							       [KVP_ACT_BF16] = "bf16",
							       [KVP_ACT_Q8] = "int8",
							       [KVP_ACT_Q8K] = "int8" };
	struct kvp_model *m;
	struct kvp_model_shape sh;
	struct kvp_geom g;
	const struct kvp_model_info *mi;
	uint32_t act = KVP_ACT_F32;
	uint64_t most = 0;
	char err[256];

	if (kvp_model_open(&m, path, err, sizeof(err))) {
		fprintf(stderr, "kvp-roofline: %s\n", err);
		return 1;
	}
	kvp_model_kv_shape(m, KVP_DTYPE_F16, 16, &sh);
	if (kvp_geom_init(&g, &sh)) {
		fprintf(stderr, "kvp-roofline: %s: bad K/V block shape\n", path);
		kvp_model_close(m);
		return 1;
	}
	mi = kvp_model_info(m);
	for (uint32_t t = 0; t < KVP_GGML_TYPE__COUNT; t++) {
		const struct kvp_qtype *q = kvp_qtype(t);

		if (q && mi->type_bytes[t] > most && q->act < KVP_ACT__COUNT) {
			most = mi->type_bytes[t];
			act = q->act;
		}
	}
	printf("{\"file_type\":\"%s\",\"n_params\":%llu,\"weight_bytes\":%llu,\"chunk\":%u,"
	       "\"depth\":%u,\"steps\":%u,\"prefill_ops_per_token\":%.0f,"
	       "\"decode_bytes_per_step\":%.0f,\"ceiling\":\"%s\"}\n",
	       mi->file_type, (unsigned long long)mi->n_params,
	       (unsigned long long)mi->weight_bytes, chunk, depth, steps,
	       kvp_bench_prefill_ops(m, chunk),
	       kvp_bench_decode_bytes(m, g.bytes_per_token, depth, steps), ceil_name[act]);
	kvp_model_close(m);
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t v[3] = { 512, 512, 128 };

	if (argc >= 2 && !strcmp(argv[1], "machine") && argc <= 3) {
		uint64_t t = 2;

		if (argc == 3 && kvp_parse_u64(argv[2], 1, 64, &t))
			return usage();
		return machine((int)t);
	}
	if (argc >= 3 && !strcmp(argv[1], "model") && (argc == 3 || argc == 6)) {
		for (int i = 3; i < argc; i++)
			if (kvp_parse_u64(argv[i], i == 4 ? 0 : 1, 1u << 20, &v[i - 3]))
				return usage();
		return model(argv[2], (uint32_t)v[0], (uint32_t)v[1], (uint32_t)v[2]);
	}
	return usage();
}
