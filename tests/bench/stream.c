/* SPDX-License-Identifier: MIT */
/*
 * stream.c - read bandwidth (stream.h): each thread sums its own contiguous part of a
 * 1 GiB buffer with four independent sums, so the loads, not an add chain, set the rate.
 */
#include "tests/bench/stream.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/lib/testlib.h"

struct read_arg {
	const uint64_t *p;
	size_t n;
	uint64_t sum;
};

static void *read_part(void *p)
{
	struct read_arg *a = p;
	uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;

	for (size_t i = 0; i < a->n; i += 4) {
		s0 += a->p[i];
		s1 += a->p[i + 1];
		s2 += a->p[i + 2];
		s3 += a->p[i + 3];
	}
	a->sum = s0 + s1 + s2 + s3;
	return NULL;
}

double kvp_bench_read_gbps(int threads)
{
	size_t n = (size_t)1 << 27, part; /* uint64 words */
	uint64_t *b = malloc(n * 8);
	pthread_t th[64];
	struct read_arg a[64];
	double t[5];

	if (!b)
		return 0;
	threads = threads < 1 ? 1 : threads > 64 ? 64 : threads;
	part = n / threads & ~(size_t)3;
	memset(b, 1, n * 8);
	for (int r = 0; r < 5; r++) {
		double t0 = kvp_test_now_s();
		int m = 1; /* parts read: this thread's and those of the threads started */

		for (int i = 1; i < threads; i++) {
			a[m] = (struct read_arg){ b + m * part, part, 0 };
			if (!pthread_create(&th[m], NULL, read_part, &a[m]))
				m++;
		}
		a[0] = (struct read_arg){ b, part, 0 };
		read_part(&a[0]);
		for (int i = 1; i < m; i++)
			pthread_join(th[i], NULL);
		t[r] = (double)part * m * 8 / (kvp_test_now_s() - t0) / 1e9;
	}
	free(b);
	return kvp_test_median(t, 5);
}
