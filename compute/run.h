/* SPDX-License-Identifier: MIT */
/*
 * run.h - the offline tools' command lines: kvpool-run (one generation in-process, no
 * daemon, through the same model / forward / sampler / tokenizer code and the same
 * generation loop, compute/gen.c, as the engine, with K/V in a heap region laid out
 * exactly like pool blocks) and kvpool-mkmodel (synthetic GGUF models).
 *
 * These sources (run.c, mkmodel_cli.c) are compiled into their executables only
 * (kvpool-run.c and kvpool-mkmodel.c hold main()), and into the test that runs them in
 * process; no library of ours contains them.
 */
#ifndef KVP_COMPUTE_RUN_H
#define KVP_COMPUTE_RUN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "util/buf.h"

/**
 * kvp_run_main() - the kvpool-run command line
 * @argc, @argv: as main()'s; see kvpool-run --help
 * @out: where text (or the --json object) goes; diagnostics go to stderr
 * Return: process exit status (0 ok, 1 runtime failure, 2 usage).
 */
int kvp_run_main(int argc, char **argv, FILE *out);

/**
 * struct kvp_run_result - what one kvpool-run generation produced
 * @ids, @n_ids:       the kept tokens
 * @text, @text_len:   their text (whole UTF-8 characters)
 * @n_prompt:          prompt tokens
 * @prefill_s, @decode_s: wall time of the prefill, and of sampling + decoding
 * @n_steps:           decode steps run (the last kept token is never fed back)
 * @speculative:       drafts were verified (--speculative); the counts below are shown
 * @n_drafted, @n_accepted: drafts run as extra rows, and those the model agreed with
 *                     (each a kept token no step of its own produced)
 */
struct kvp_run_result {
	const int32_t *ids;
	uint32_t n_ids;
	const char *text;
	size_t text_len;
	uint32_t n_prompt;
	double prefill_s;
	double decode_s;
	uint32_t n_steps;
	bool speculative;
	uint64_t n_drafted, n_accepted;
};

/* The --json object of @res, newline-terminated, appended to @b (util/json.h). */
void kvp_run_json(struct kvp_buf *b, const struct kvp_run_result *res);

/**
 * kvp_mkmodel_main() - the kvpool-mkmodel command line (over kvp_mkmodel_write())
 * Return: process exit status.
 */
int kvp_mkmodel_main(int argc, char **argv);

#endif /* KVP_COMPUTE_RUN_H */
