/* SPDX-License-Identifier: MIT */
/*
 * cpu_regime.c - `kvp-cpu-regime [MS]`: print whether each of two threads has a CPU of
 * its own right now ("cpu regime: dedicated|shared ..."), for benchmarks written as
 * scripts (tests/bench/vs_llamacpp.sh); the C benchmarks call kvp_bench_cpu_regime()
 * themselves.  MS: how long the two threads spin, 1..10000 (default 300).  Exit 0, or 2
 * on a bad argument.
 */
#include <stdio.h>

#include "tests/lib/testlib.h"
#include "util/parse.h"

int main(int argc, char **argv)
{
	uint64_t ms = 300;

	if (argc > 2 || (argc == 2 && kvp_parse_u64(argv[1], 1, 10000, &ms))) {
		fprintf(stderr, "usage: kvp-cpu-regime [MS]  (MS: 1..10000, default 300)\n");
		return 2;
	}
	kvp_bench_cpu_regime((unsigned int)ms);
	return 0;
}
