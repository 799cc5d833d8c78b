/* SPDX-License-Identifier: MIT */
/*
 * threads.c - fork-join pool: a generation counter the workers watch (spin, then
 * futex), and a done counter the caller watches.
 *
 * Ordering: the caller publishes fn/arg, then increments gen (seq_cst); a worker that
 * sees the new gen sees fn/arg.  A worker announces itself in `sleepers` before
 * futex-waiting on the generation it has seen; the caller wakes only when sleepers is
 * nonzero.  Both sides use seq_cst, so either the caller sees the sleeper and wakes it,
 * or the worker's futex_wait sees the new gen and returns at once: no lost wake-up.
 * The pool is driven by one caller thread (the engine thread).
 */
#include "compute/threads.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() do { } while (0)
#endif

/* ~50-100 us of pause: longer than the gap between two projections of a decode step */
#define SPIN_ITERS 4000

struct kvp_threads {
	unsigned int n;
	pthread_t *th;
	kvp_thread_fn *fn;
	void *arg;
	_Atomic unsigned int gen;
	_Atomic unsigned int done;
	_Atomic unsigned int sleepers;
	_Atomic int stop;
};

struct worker_arg {
	struct kvp_threads *t;
	unsigned int i;
};

static void futex_wait(_Atomic unsigned int *addr, unsigned int val)
{
	syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake(_Atomic unsigned int *addr)
{
	syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void *worker(void *p)
{
	struct worker_arg *wa = p;
	struct kvp_threads *t = wa->t;
	unsigned int i = wa->i, seen = 0;

	free(wa);
	for (;;) {
		int k = 0;

		while (atomic_load(&t->gen) == seen) {
			if (++k < SPIN_ITERS) {
				cpu_relax();
				continue;
			}
			atomic_fetch_add(&t->sleepers, 1);
			futex_wait(&t->gen, seen);
			atomic_fetch_sub(&t->sleepers, 1);
		}
		seen = atomic_load(&t->gen);
		if (atomic_load(&t->stop))
			return NULL;
		t->fn(t->arg, i, t->n);
		atomic_fetch_add(&t->done, 1);
	}
}

int kvp_threads_new(struct kvp_threads **out, unsigned int n)
{
	struct kvp_threads *t;

	*out = NULL;
	if (!n || n > 256)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->n = n;
	t->th = calloc(n, sizeof(*t->th));
	if (!t->th) {
		free(t);
		return -ENOMEM;
	}
	for (unsigned int i = 1; i < n; i++) {
		struct worker_arg *wa = malloc(sizeof(*wa));
		int r;

		if (!wa) {
			t->n = i;
			kvp_threads_free(t);
			return -ENOMEM;
		}
		*wa = (struct worker_arg){ t, i };
		r = pthread_create(&t->th[i], NULL, worker, wa);
		if (r) {
			free(wa);
			t->n = i;
			kvp_threads_free(t);
			return -r;
		}
	}
	*out = t;
	return 0;
}

void kvp_threads_free(struct kvp_threads *t)
{
	if (!t)
		return;
	atomic_store(&t->stop, 1);
	atomic_fetch_add(&t->gen, 1);
	futex_wake(&t->gen);
	for (unsigned int i = 1; i < t->n; i++)
		pthread_join(t->th[i], NULL);
	free(t->th);
	free(t);
}

unsigned int kvp_threads_count(const struct kvp_threads *t)
{
	return t->n;
}

void kvp_threads_run(struct kvp_threads *t, kvp_thread_fn *fn, void *arg)
{
	unsigned int k = 0;

	if (t->n == 1) {
		fn(arg, 0, 1);
		return;
	}
	t->fn = fn;
	t->arg = arg;
	atomic_store(&t->done, 0);
	atomic_fetch_add(&t->gen, 1);
	if (atomic_load(&t->sleepers))
		futex_wake(&t->gen);
	fn(arg, 0, t->n);
	while (atomic_load(&t->done) != t->n - 1) {
		if (++k < SPIN_ITERS)
			cpu_relax();
		else
			sched_yield();	/* a worker was descheduled (shared vCPUs): let it run */
	}
}
