/* SPDX-License-Identifier: MIT */
/*
 * bench_models.c - the model loop shared by bench_prefill and bench_decode.
 */
#include "tests/bench/bench_models.h"

#include <stdio.h>
#include <unistd.h>

#include "compute/mkmodel.h"
#include "tests/lib/testlib.h"

int kvp_bench_each_model(const char *prog, int argc, char **argv, kvp_bench_model_fn *fn,
			 void *arg)
{
	static const char *const presets[] = { "demo", "1b" };
	char dir[256], path[512], err[256];
	int rc = 0;

	if (argc > 1) {
		for (int i = 1; i < argc; i++)
			rc |= fn(argv[i], arg) != 0;
		return rc;
	}
	if (kvp_test_tmpdir(dir, sizeof(dir))) {
		fprintf(stderr, "%s: cannot make a temporary directory\n", prog);
		return 1;
	}
	for (size_t i = 0; i < sizeof(presets) / sizeof(presets[0]); i++) {
		struct kvp_mkmodel_opts o;

		kvp_mkmodel_preset(&o, presets[i]);
		snprintf(path, sizeof(path), "%s/%s.gguf", dir, presets[i]);
		if (kvp_mkmodel_write(path, &o, err, sizeof(err))) {
			fprintf(stderr, "%s: %s\n", prog, err);
			rc = 1;
			break;
		}
		rc |= fn(path, arg) != 0;
		unlink(path);
	}
	kvp_test_rmtree(dir);
	return rc;
}
