/* SPDX-License-Identifier: MIT */
/*
 * peak_none.c - the peak.h functions in a build for another architecture than x86: the
 * benchmarks call them only on the AVX2 and AVX-512 tables, which such a build lacks, so
 * they report no ceiling (0 GOP/s, no instruction) rather than a wrong one.
 */
#include "tests/bench/peak.h"

#include <string.h>

void kvp_bench_peak_avx512(struct kvp_bench_peak *p, int threads)
{
	memset(p, 0, sizeof(*p));
}

void kvp_bench_peak_avx2(struct kvp_bench_peak *p, int threads)
{
	memset(p, 0, sizeof(*p));
}
