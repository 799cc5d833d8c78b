/* SPDX-License-Identifier: MIT */
/*
 * bench_models.h - the models the compute benchmarks run on: the GGUF paths given on
 * the command line, or else one preset (KVP_BENCH_PRESET, default "1b") generated in
 * each weight type of KVP_BENCH_TYPES (comma-separated kvpool-mkmodel --type names;
 * default every type the engine computes with and the q4_k_m recipe) into a temporary
 * directory, one at a time, each deleted after its run (a 1b f32 file is ~4 GB).
 */
#ifndef KVP_TESTS_BENCH_MODELS_H
#define KVP_TESTS_BENCH_MODELS_H

/* @type: the --type name the file was generated with, or "file" for a given path */
typedef int kvp_bench_model_fn(const char *path, const char *type, void *arg);

/*
 * kvp_bench_each_model() - call @fn(path, type, @arg) for each model
 * @prog: program name for error messages
 * Return: 0 when every call returned 0 and every model could be made, else 1.
 */
int kvp_bench_each_model(const char *prog, int argc, char **argv, kvp_bench_model_fn *fn,
			 void *arg);

#endif /* KVP_TESTS_BENCH_MODELS_H */
