/* SPDX-License-Identifier: MIT */
/*
 * test_textwork.c - the text worker (svc/textwork.c) with jobs of the test's own: every
 * job runs once on the worker thread and comes back through poll after the eventfd
 * fires; connections are served in turn (a flood of one key waits behind another key's
 * first job); the byte bound refuses a backlog, never a lone job; free hands back
 * what it still holds.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <cmocka.h>

#include "svc/textwork.h"

struct tjob {
	struct kvp_textjob base; /* first */
	int tag;
	pthread_t ran_on;
};

/* what the jobs record, and the gate the first one may wait at */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int order[16];
static int n_order;
static bool gate_closed, at_gate;
static int dropped;

static void run(struct kvp_textjob *base)
{
	struct tjob *j = (struct tjob *)base;

	pthread_mutex_lock(&lock);
	j->ran_on = pthread_self();
	order[n_order++] = j->tag;
	at_gate = true;
	pthread_cond_broadcast(&cond);
	while (gate_closed)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
}

static struct tjob *job(uint64_t key, int tag, uint64_t bytes)
{
	struct tjob *j = calloc(1, sizeof(*j));

	assert_non_null(j);
	j->base.run = run;
	j->base.key = key;
	j->base.bytes = bytes;
	j->tag = tag;
	return j;
}

static void drop(struct kvp_textjob *base)
{
	dropped++;
	free(base);
}

/* Poll until @want jobs came back (each after the eventfd fired). */
static void collect(struct kvp_textwork *w, int efd, int want)
{
	struct kvp_textjob *out[16];
	int got = 0;

	while (got < want) {
		struct pollfd p = { .fd = efd, .events = POLLIN };
		uint64_t v;

		assert_int_equal(poll(&p, 1, 10000), 1);
		assert_int_equal(read(efd, &v, sizeof(v)), sizeof(v));
		for (unsigned int n; (n = kvp_textwork_poll(w, out, 16)) > 0;) {
			for (unsigned int i = 0; i < n; i++) {
				assert_false(pthread_equal(((struct tjob *)out[i])->ran_on,
							   pthread_self()));
				free(out[i]);
			}
			got += (int)n;
		}
	}
	assert_int_equal(got, want);
}

static void test_fair_order(void **state)
{
	/* key 1 queues four jobs, then key 2 one: 2's waits behind one of 1's, not three */
	int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	struct kvp_textwork *w;

	(void)state;
	n_order = 0;
	gate_closed = true;
	at_gate = false;
	assert_int_equal(kvp_textwork_new(&w, efd, 0), 0);
	assert_int_equal(kvp_textwork_push(w, &job(1, 10, 1)->base), 0);
	pthread_mutex_lock(&lock);
	while (!at_gate) /* the worker runs job 10 and holds there */
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	assert_int_equal(kvp_textwork_push(w, &job(1, 11, 1)->base), 0);
	assert_int_equal(kvp_textwork_push(w, &job(1, 12, 1)->base), 0);
	assert_int_equal(kvp_textwork_push(w, &job(1, 13, 1)->base), 0);
	assert_int_equal(kvp_textwork_push(w, &job(2, 20, 1)->base), 0);
	assert_int_equal(kvp_textwork_pending(w), 5);
	pthread_mutex_lock(&lock);
	gate_closed = false;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	collect(w, efd, 5);
	assert_int_equal(kvp_textwork_pending(w), 0);
	assert_int_equal(n_order, 5);
	assert_int_equal(order[0], 10);
	assert_int_equal(order[1], 11);
	assert_int_equal(order[2], 20);
	assert_int_equal(order[3], 12);
	assert_int_equal(order[4], 13);
	kvp_textwork_free(w, drop);
	close(efd);
}

static void test_byte_bound_and_free(void **state)
{
	/* a backlog past max_bytes is refused (the job stays the caller's); free drops the rest */
	int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	struct kvp_textwork *w;
	struct tjob *big, *more;

	(void)state;
	n_order = 0;
	dropped = 0;
	gate_closed = true;
	at_gate = false;
	assert_int_equal(kvp_textwork_new(&w, efd, 100), 0);
	assert_int_equal(kvp_textwork_push(w, &job(1, 1, 1)->base), 0); /* runs, held */
	pthread_mutex_lock(&lock);
	while (!at_gate)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	big = job(2, 2, 1000); /* alone in the queue: taken, whatever its size */
	assert_int_equal(kvp_textwork_push(w, &big->base), 0);
	more = job(3, 3, 1);
	assert_int_equal(kvp_textwork_push(w, &more->base), -EAGAIN);
	free(more);
	assert_int_equal(kvp_textwork_pending(w), 2);
	pthread_mutex_lock(&lock);
	gate_closed = false;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	/* whatever ran or waits, free hands every job back exactly once */
	kvp_textwork_free(w, drop);
	assert_int_equal(dropped, 2);
	close(efd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fair_order),
		cmocka_unit_test(test_byte_bound_and_free),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
