/* SPDX-License-Identifier: MIT */
/*
 * run.h - kvpool-run: one generation in-process, no daemon, through the same
 * model / forward / sampler / tokenizer code the daemon uses, with K/V in a heap
 * region laid out exactly like pool blocks.
 */
#ifndef KVP_COMPUTE_RUN_H
#define KVP_COMPUTE_RUN_H

#include <stdio.h>

/**
 * kvp_run_main() - the kvpool-run command line
 * @argc, @argv: as main()'s; see kvpool-run --help
 * @out: where text (or the --json object) goes; diagnostics go to stderr
 * Return: process exit status (0 ok, 1 runtime failure, 2 usage).
 */
int kvp_run_main(int argc, char **argv, FILE *out);

/**
 * kvp_mkmodel_main() - the kvpool-mkmodel command line (over kvp_mkmodel_write())
 * Return: process exit status.
 */
int kvp_mkmodel_main(int argc, char **argv);

#endif /* KVP_COMPUTE_RUN_H */
