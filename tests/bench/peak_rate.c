/* SPDX-License-Identifier: MIT */
/*
 * peak_rate.c - the timing harness of the register peaks (peak.h): the same kernel on
 * every thread at once, the median of five runs.  Built for the portable baseline; the
 * kernels it times live in peak_<isa>.c, each built with its table's flags.
 */
#include "tests/bench/peak.h"

#include <pthread.h>

#include "tests/lib/testlib.h"

struct peak_job {
	void (*fn)(long);
	long iters;
};

static void *peak_run(void *p)
{
	struct peak_job *j = p;

	j->fn(j->iters);
	return NULL;
}

double kvp_bench_peak_rate(void (*fn)(long iters), long iters, double ops, int threads)
{
	double t[5];
	pthread_t th[64];
	struct peak_job j = { fn, iters };

	threads = threads < 1 ? 1 : threads > 64 ? 64 : threads;
	fn(iters / 8); /* wake the vector unit up */
	for (int r = 0; r < 5; r++) {
		double t0 = kvp_test_now_s();
		int n = 0; /* threads started besides this one */

		for (int i = 1; i < threads; i++)
			if (!pthread_create(&th[n], NULL, peak_run, &j))
				n++;
		fn(iters);
		for (int i = 0; i < n; i++)
			pthread_join(th[i], NULL);
		t[r] = (double)iters * ops * (n + 1) / (kvp_test_now_s() - t0) / 1e9;
	}
	return kvp_test_median(t, 5);
}
