/* SPDX-License-Identifier: MIT */
/*
 * textwork.h - the text worker: one thread that renders chat templates and tokenizes
 * text prompts, so the io_uring loop never does (a 1 MiB CHAT takes ~100 ms to
 * tokenize: on the loop, every other connection would wait that long).
 *
 *	loop thread    kvp_textwork_push(job)  -> queue (fair across connections)
 *	worker thread  job->run(job)           (tokenize, render: pure work, no I/O)
 *	loop thread    eventfd fires -> kvp_textwork_poll() -> the jobs that ran
 *
 * A job is the caller's struct with struct kvp_textjob embedded; from push until poll
 * hands it back the worker owns it, and the loop touches none of its fields but
 * @loop_* ones.  Jobs are queued by round: a connection's k-th job waiting is served
 * after every other connection's (k-1)-th, so one client flooding the worker delays
 * another's text by at most one job per connection, not by its whole backlog.
 *
 * Thread: push, poll, round and free on the loop thread; run on the worker.
 */
#ifndef KVP_SVC_TEXTWORK_H
#define KVP_SVC_TEXTWORK_H

#include <stdint.h>

struct kvp_textwork;

/**
 * struct kvp_textjob - a unit of text work
 * @run:      called once on the worker thread
 * @key:      who queued it (a connection id): jobs of one key keep their order
 * @bytes:    its input size, for the queue's bound
 * @round:    set by push (fair order); private
 * @next:     queue link; private
 * @loop_next, @loop_prev, @loop_flags: the loop thread's own (e.g. a list of jobs in flight)
 */
struct kvp_textjob {
	void (*run)(struct kvp_textjob *job);
	uint64_t key;
	uint64_t bytes;
	uint64_t round;
	struct kvp_textjob *next;
	struct kvp_textjob *loop_next, *loop_prev;
	uint32_t loop_flags;
};

/**
 * kvp_textwork_new() - start the worker thread
 * @efd:      an eventfd (borrowed) written each time jobs have run; register it with the
 *            loop (kvp_server_add_wakeup()) and call kvp_textwork_poll() from its callback
 * @max_bytes: most input bytes queued at once (0: 64 MiB); a push beyond is -EAGAIN
 * Return: 0, or -errno.
 */
int kvp_textwork_new(struct kvp_textwork **out, int efd, uint64_t max_bytes);

/*
 * Stop and join the thread; jobs not yet handed back are passed to @drop (the caller
 * frees them).  NULL is a no-op.
 */
void kvp_textwork_free(struct kvp_textwork *w, void (*drop)(struct kvp_textjob *job));

/*
 * Queue @job (the worker owns it until poll returns it).  Return: 0, or -EAGAIN when the
 * queue holds max_bytes already (the job stays the caller's).
 */
int kvp_textwork_push(struct kvp_textwork *w, struct kvp_textjob *job);

/* Up to @max jobs that have run, in the order they ran.  Return: how many. */
unsigned int kvp_textwork_poll(struct kvp_textwork *w, struct kvp_textjob **out, unsigned int max);

/* Jobs pushed and not yet handed back by poll. */
uint64_t kvp_textwork_pending(const struct kvp_textwork *w);

#endif /* KVP_SVC_TEXTWORK_H */
