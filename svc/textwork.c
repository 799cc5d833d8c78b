/* SPDX-License-Identifier: MIT */
/*
 * textwork.c - the text worker thread and its two queues (see textwork.h).
 *
 * Invariants: @queue is sorted by round, ties in push order; a key's jobs have strictly
 * increasing rounds, so they run in push order.  A new key's job gets the round being
 * served (@cur_round) and one of a key with jobs waiting the round after its last: that
 * is start-time fair queuing with a unit cost per job.  @queued_bytes sums the bytes of
 * @queue.  Both queues and those counters are under @lock; @pending is the loop's.
 */
#include "svc/textwork.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "util/log.h"

#define DEF_MAX_BYTES (64ull << 20)

struct kvp_textwork {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int efd;
	uint64_t max_bytes;
	struct kvp_textjob *queue; /* waiting, by round */
	struct kvp_textjob *done_head, *done_tail;
	uint64_t queued_bytes;
	uint64_t cur_round;
	bool stop;
	uint64_t pending; /* loop thread: pushed and not yet polled */
};

static void *worker(void *arg)
{
	struct kvp_textwork *w = arg;
	uint64_t one = 1;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct kvp_textjob *j;

		while (!w->stop && !w->queue)
			pthread_cond_wait(&w->cond, &w->lock);
		if (w->stop)
			break;
		j = w->queue;
		w->queue = j->next;
		w->queued_bytes -= j->bytes;
		w->cur_round = j->round;
		pthread_mutex_unlock(&w->lock);

		j->run(j);

		pthread_mutex_lock(&w->lock);
		j->next = NULL;
		if (w->done_tail)
			w->done_tail->next = j;
		else
			w->done_head = j;
		w->done_tail = j;
		/* under the lock: poll() may not take the job before the write is queued */
		if (write(w->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			kvp_log(LOG_ERR, "textwork: eventfd: %m");
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

int kvp_textwork_new(struct kvp_textwork **out, int efd, uint64_t max_bytes)
{
	struct kvp_textwork *w = calloc(1, sizeof(*w));
	int r;

	if (!w)
		return -ENOMEM;
	w->efd = efd;
	w->max_bytes = max_bytes ? max_bytes : DEF_MAX_BYTES;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	r = pthread_create(&w->thread, NULL, worker, w);
	if (r) {
		pthread_cond_destroy(&w->cond);
		pthread_mutex_destroy(&w->lock);
		free(w);
		return -r;
	}
	pthread_setname_np(w->thread, "kvp-text");
	*out = w;
	return 0;
}

static void drop_list(struct kvp_textjob *j, void (*drop)(struct kvp_textjob *job))
{
	while (j) {
		struct kvp_textjob *next = j->next;

		drop(j);
		j = next;
	}
}

void kvp_textwork_free(struct kvp_textwork *w, void (*drop)(struct kvp_textjob *job))
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	drop_list(w->queue, drop);
	drop_list(w->done_head, drop);
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

int kvp_textwork_push(struct kvp_textwork *w, struct kvp_textjob *job)
{
	struct kvp_textjob **at;
	uint64_t round;

	pthread_mutex_lock(&w->lock);
	/* one job, however large, always gets in: only a backlog is refused */
	if (w->queue && w->queued_bytes + job->bytes > w->max_bytes) {
		pthread_mutex_unlock(&w->lock);
		return -EAGAIN;
	}
	round = w->cur_round;
	for (struct kvp_textjob *j = w->queue; j; j = j->next)
		if (j->key == job->key && j->round >= round)
			round = j->round + 1;
	job->round = round;
	at = &w->queue;
	while (*at && (*at)->round <= round)
		at = &(*at)->next;
	job->next = *at;
	*at = job;
	w->queued_bytes += job->bytes;
	w->pending++;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	return 0;
}

unsigned int kvp_textwork_poll(struct kvp_textwork *w, struct kvp_textjob **out, unsigned int max)
{
	unsigned int n = 0;

	pthread_mutex_lock(&w->lock);
	while (n < max && w->done_head) {
		struct kvp_textjob *j = w->done_head;

		w->done_head = j->next;
		if (!w->done_head)
			w->done_tail = NULL;
		j->next = NULL;
		out[n++] = j;
	}
	pthread_mutex_unlock(&w->lock);
	w->pending -= n;
	return n;
}

uint64_t kvp_textwork_pending(const struct kvp_textwork *w)
{
	return w ? w->pending : 0;
}
