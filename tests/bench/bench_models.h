/* SPDX-License-Identifier: MIT */
/*
 * bench_models.h - the models the compute benchmarks run on: the GGUF paths given on
 * the command line, or else the `demo` and `1b` presets generated (f32) into a
 * temporary directory, one at a time, each deleted after its run (the 1b file is ~5 GB).
 */
#ifndef KVP_TESTS_BENCH_MODELS_H
#define KVP_TESTS_BENCH_MODELS_H

typedef int kvp_bench_model_fn(const char *path, void *arg);

/*
 * kvp_bench_each_model() - call @fn(path, @arg) for each model
 * @prog: program name for error messages
 * Return: 0 when every call returned 0 and every model could be made, else 1.
 */
int kvp_bench_each_model(const char *prog, int argc, char **argv, kvp_bench_model_fn *fn,
			 void *arg);

#endif /* KVP_TESTS_BENCH_MODELS_H */
