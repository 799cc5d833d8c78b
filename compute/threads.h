/* SPDX-License-Identifier: MIT */
/*
 * threads.h - a tiny fork-join pool for the compute kernels that OpenBLAS does not
 * run (batched decode projections, attention).
 *
 * kvp_threads_run() runs fn(arg, i, n) for i = 0 .. n-1, i = 0 on the caller, and
 * returns when all are done.  Workers spin up to 50 us after a job (decode issues one
 * job per projection, microseconds apart), then sleep on a futex; the caller waiting
 * for a slow worker does the same, so an idle pool costs nothing and a descheduled
 * worker is waited for without burning a CPU.  One caller at a time.  Callers keep
 * jobs too small for a fork-join off the pool (linear.c, forward.c: POOL_MIN_BYTES).
 */
#ifndef KVP_COMPUTE_THREADS_H
#define KVP_COMPUTE_THREADS_H

struct kvp_threads;

typedef void kvp_thread_fn(void *arg, unsigned int i, unsigned int n);

/* kvp_threads_new() - a pool of @n threads in all (the caller counts as one; n >= 1). */
int kvp_threads_new(struct kvp_threads **out, unsigned int n);

/* kvp_threads_free() - stop and join the workers; NULL is a no-op. */
void kvp_threads_free(struct kvp_threads *t);

/* kvp_threads_count() - n given at creation. */
unsigned int kvp_threads_count(const struct kvp_threads *t);

/* kvp_threads_run() - fn(arg, i, n) on every thread; returns when all have finished. */
void kvp_threads_run(struct kvp_threads *t, kvp_thread_fn *fn, void *arg);

#endif /* KVP_COMPUTE_THREADS_H */
