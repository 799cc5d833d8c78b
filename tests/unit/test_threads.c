/* SPDX-License-Identifier: MIT */
/*
 * test_threads.c - compute/'s fork-join pool: every index runs exactly once per job and
 * kvp_threads_run() returns only after all have finished, whether the workers were
 * spinning or asleep and whether the caller had to sleep for a slow worker; and neither
 * side burns CPU while it waits (idle workers and a waiting caller sleep on a futex).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "compute/threads.h"

#define MAX_N 4

struct job {
	_Atomic unsigned int runs[MAX_N]; /* times index i ran */
	_Atomic unsigned int bad_n;	  /* calls that saw another n */
	unsigned int want_n;
	unsigned int sleep_us[MAX_N]; /* how long index i takes */
};

static void sleep_us(unsigned int us)
{
	struct timespec ts = { us / 1000000, (long)(us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static void job_fn(void *arg, unsigned int i, unsigned int n)
{
	struct job *j = arg;

	if (n != j->want_n || i >= n) {
		atomic_fetch_add(&j->bad_n, 1);
		return;
	}
	if (j->sleep_us[i])
		sleep_us(j->sleep_us[i]);
	atomic_fetch_add(&j->runs[i], 1);
}

static double cpu_s(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_each_index_once_per_job(void **state)
{
	/*
	 * n = 1..4, 3000 back-to-back jobs (workers spinning), then jobs 300 us apart
	 * (workers asleep) and jobs whose workers take 300 us (the caller asleep): after
	 * every kvp_threads_run() each index has run exactly once more, with the pool's n.
	 */
	for (unsigned int n = 1; n <= MAX_N; n++) {
		struct kvp_threads *t;
		struct job j;

		memset(&j, 0, sizeof(j));
		j.want_n = n;
		assert_int_equal(kvp_threads_new(&t, n), 0);
		assert_int_equal(kvp_threads_count(t), n);
		for (unsigned int k = 1; k <= 3300; k++) {
			if (k > 3000 && k <= 3150)
				sleep_us(300);
			for (unsigned int i = 1; i < n; i++)
				j.sleep_us[i] = k > 3150 ? 300 : 0;
			kvp_threads_run(t, job_fn, &j);
			for (unsigned int i = 0; i < n; i++)
				if (atomic_load(&j.runs[i]) != k)
					fail_msg("n %u job %u: index %u ran %u times", n, k, i,
						 atomic_load(&j.runs[i]));
		}
		assert_int_equal(atomic_load(&j.bad_n), 0);
		kvp_threads_free(t);
	}
	kvp_threads_free(NULL);
	assert_int_equal(kvp_threads_new(&(struct kvp_threads *){ NULL }, 0), -EINVAL);
}

static void test_waiting_burns_no_cpu(void **state)
{
	/*
	 * The caller waits 30 ms for a slow worker: it spends well under 30 ms of CPU
	 * doing so (it sleeps after a bounded spin instead of yielding in a loop).  Then
	 * the pool idles 100 ms: the whole process uses well under 100 ms of CPU (the
	 * workers sleep instead of spinning).
	 */
	struct kvp_threads *t;
	struct job j;
	double c0, p0;

	memset(&j, 0, sizeof(j));
	j.want_n = 2;
	assert_int_equal(kvp_threads_new(&t, 2), 0);
	kvp_threads_run(t, job_fn, &j); /* the worker is up */
	j.sleep_us[1] = 30000;
	c0 = cpu_s(CLOCK_THREAD_CPUTIME_ID);
	kvp_threads_run(t, job_fn, &j);
	assert_int_equal(atomic_load(&j.runs[1]), 2);
	assert_true(cpu_s(CLOCK_THREAD_CPUTIME_ID) - c0 < 0.010);
	p0 = cpu_s(CLOCK_PROCESS_CPUTIME_ID);
	sleep_us(100000);
	assert_true(cpu_s(CLOCK_PROCESS_CPUTIME_ID) - p0 < 0.020);
	kvp_threads_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_each_index_once_per_job),
		cmocka_unit_test(test_waiting_burns_no_cpu),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
