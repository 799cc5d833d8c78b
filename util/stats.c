/* SPDX-License-Identifier: MIT */
/*
 * stats.c - sorting and nearest-rank percentiles (see stats.h).
 */
#include "util/stats.h"

#include <math.h>
#include <stdlib.h>

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a;
	double y = *(const double *)b;

	return x < y ? -1 : x > y;
}

void kvp_sort_doubles(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
}

double kvp_percentile_sorted(const double *v, size_t n, double p)
{
	size_t rank;

	if (!n)
		return NAN;
	rank = (size_t)ceil(p / 100.0 * (double)n);
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return v[rank - 1];
}
