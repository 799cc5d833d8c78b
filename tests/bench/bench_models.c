/* SPDX-License-Identifier: MIT */
/*
 * bench_models.c - the model loop shared by bench_prefill and bench_decode.
 */
#include "tests/bench/bench_models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/mkmodel.h"
#include "tests/lib/testlib.h"

#define DEFAULT_TYPES "f32,f16,bf16,q8_0,q4_0,q4_1,q5_0,q5_1,q2_k,q3_k,q4_k,q5_k,q6_k,q4_k_m"

int kvp_bench_each_model(const char *prog, int argc, char **argv, kvp_bench_model_fn *fn, void *arg)
{
	const char *preset = getenv("KVP_BENCH_PRESET"), *types = getenv("KVP_BENCH_TYPES");
	char dir[256], path[512], err[256], list[512], *save = NULL;
	int rc = 0;

	if (argc > 1) {
		for (int i = 1; i < argc; i++)
			rc |= fn(argv[i], "file", arg) != 0;
		return rc;
	}
	if (kvp_test_tmpdir(dir, sizeof(dir))) {
		fprintf(stderr, "%s: cannot make a temporary directory\n", prog);
		return 1;
	}
	snprintf(list, sizeof(list), "%s", types && *types ? types : DEFAULT_TYPES);
	for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		struct kvp_mkmodel_opts o;
		int type = kvp_mkmodel_type_parse(t);

		if (kvp_mkmodel_preset(&o, preset && *preset ? preset : "1b") || type < 0) {
			fprintf(stderr, "%s: bad KVP_BENCH_PRESET or type '%s'\n", prog, t);
			rc = 1;
			break;
		}
		o.type = (uint32_t)type;
		snprintf(path, sizeof(path), "%s/%s-%s.gguf", dir, o.name, t);
		if (kvp_mkmodel_write(path, &o, err, sizeof(err))) {
			fprintf(stderr, "%s: %s\n", prog, err);
			rc = 1;
			break;
		}
		rc |= fn(path, t, arg) != 0;
		unlink(path);
	}
	kvp_test_rmtree(dir);
	return rc;
}
