/* SPDX-License-Identifier: MIT */
/*
 * threads.c - fork-join pool: a generation counter the workers watch, and a done
 * counter the caller watches.  Both sides spin for a bounded time (SPIN_NS), then
 * sleep on a futex, so neither ever busy-waits on sched_yield.
 *
 * Why both spin at all: decode issues one job per projection, a few microseconds
 * apart, and waking a sleeping thread on another CPU costs far more than that on a
 * virtual machine (docs/compute.md has the measurement).  Why the spin is bounded by
 * time: an idle pool, or one waiting on a thread whose CPU was taken away, must leave
 * the CPUs to the daemon's loop and engine threads instead of burning them (a
 * sched_yield loop showed up as a quarter of a daemon's samples under a stream of
 * 1-token requests).
 *
 * Ordering: the caller publishes fn/arg, then increments gen (seq_cst); a worker that
 * sees the new gen sees fn/arg.  A worker announces itself in `sleepers` before
 * futex-waiting on the generation it has seen; the caller wakes only when sleepers is
 * nonzero.  Both sides use seq_cst, so either the caller sees the sleeper and wakes it,
 * or the worker's futex_wait sees the new gen and returns at once: no lost wake-up.
 * The caller's sleep on `done` is the mirror image: it sets `caller_waits` and
 * re-reads done before futex_wait(done, seen); the worker that brings done to n - 1
 * reads caller_waits after its increment and wakes it.
 * The pool is driven by one caller thread (the engine thread).
 */
#include "compute/threads.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/time.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
/* the spin-wait hint (as pause on x86): lets an SMT sibling run */
#define cpu_relax() __asm__ volatile("yield" ::: "memory")
#else
#define cpu_relax() \
	do { \
	} while (0)
#endif

/*
 * How long a waiting side spins before it sleeps: well above the gap between two
 * jobs of one decode step (the caller's norms, RoPE and K/V stores: a few us), well
 * below a daemon's idle gaps; about what the old count of 4000 pauses took on a core
 * with short pauses.  Not tuned further: the daemon's 1-token round trip no longer
 * reaches the pool (forward.c keeps small jobs on the caller).
 */
#define SPIN_NS 50000u
/* pauses between two clock reads (a pause is 10..140 cycles depending on the core) */
#define SPIN_CHECK 64

struct kvp_threads {
	unsigned int n;
	unsigned int n_started; /* while starting: threads running, the caller counted */
	pthread_t *th;
	kvp_thread_fn *fn;
	void *arg;
	_Atomic unsigned int gen;
	_Atomic unsigned int done;
	_Atomic unsigned int sleepers;
	_Atomic unsigned int caller_waits;
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

/* Spin up to SPIN_NS while *addr == val; true if it changed. */
static bool spin_while(_Atomic unsigned int *addr, unsigned int val)
{
	uint64_t end = 0;

	for (unsigned int k = 1;; k++) {
		if (atomic_load_explicit(addr, memory_order_relaxed) != val)
			return true;
		cpu_relax();
		if (k % SPIN_CHECK)
			continue;
		if (!end)
			end = kvp_now_ns() + SPIN_NS;
		else if (kvp_now_ns() >= end)
			return false;
	}
}

static void *worker(void *p)
{
	struct worker_arg *wa = p;
	struct kvp_threads *t = wa->t;
	unsigned int i = wa->i, seen = 0;

	free(wa);
	for (;;) {
		while (atomic_load(&t->gen) == seen && !spin_while(&t->gen, seen)) {
			atomic_fetch_add(&t->sleepers, 1);
			futex_wait(&t->gen, seen);
			atomic_fetch_sub(&t->sleepers, 1);
		}
		seen = atomic_load(&t->gen);
		if (atomic_load(&t->stop))
			return NULL;
		t->fn(t->arg, i, t->n);
		if (atomic_fetch_add(&t->done, 1) + 1 == t->n - 1 && atomic_load(&t->caller_waits))
			futex_wake(&t->done);
	}
}

int kvp_threads_new(struct kvp_threads **out, unsigned int n)
{
	struct kvp_threads *t;
	int r;

	*out = NULL;
	if (!n || n > 256)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->n = n;
	t->n_started = 1;
	t->th = calloc(n, sizeof(*t->th));
	if (!t->th) {
		r = -ENOMEM;
		goto err_free;
	}
	for (unsigned int i = 1; i < n; i++) {
		struct worker_arg *wa = malloc(sizeof(*wa));

		if (!wa) {
			r = -ENOMEM;
			goto err_workers;
		}
		*wa = (struct worker_arg){ t, i };
		r = pthread_create(&t->th[i], NULL, worker, wa);
		if (r) {
			free(wa);
			r = -r;
			goto err_workers;
		}
		t->n_started = i + 1;
	}
	*out = t;
	return 0;

err_workers: /* stop and join the workers started so far */
	t->n = t->n_started;
	kvp_threads_free(t);
	return r;
err_free:
	free(t);
	return r;
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
	unsigned int d;

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
	while ((d = atomic_load(&t->done)) != t->n - 1) {
		if (spin_while(&t->done, d))
			continue;
		/* a worker is slow or descheduled: sleep until the last one ends */
		atomic_store(&t->caller_waits, 1);
		d = atomic_load(&t->done);
		if (d != t->n - 1)
			futex_wait(&t->done, d);
		atomic_store(&t->caller_waits, 0);
	}
}
