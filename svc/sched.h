/* SPDX-License-Identifier: MIT */
/*
 * sched.h - the engine: one thread that owns the pool, the prefix index and the forward
 * context, and runs every request through lookup, chunked prefill, batched decode.
 *
 * The loop thread talks to it only through this API:
 *
 *	loop -> engine   kvp_sched_submit(), kvp_sched_cancel(), kvp_sched_conn_closed(),
 *	                 kvp_sched_drain(), kvp_sched_cancel_all(): messages on a mutex-guarded
 *	                 inbox, bounded because submissions are bounded (max_queued +
 *	                 max_running outstanding requests, checked here) and cancels are
 *	                 only sent for requests the loop knows are outstanding
 *	engine -> loop   events (TOKEN, DONE, ERROR) on a bounded ring; after queueing some
 *	                 the engine writes the eventfd given in the config, which the loop
 *	                 registered with kvp_server_add_wakeup(); the loop then calls
 *	                 kvp_sched_poll_events().  When the ring is full the engine waits
 *	                 for the loop (the loop never waits for the engine).
 *	counters         kvp_sched_get_stats(): a copy of a snapshot the engine publishes
 *	                 after every step, under a mutex; the TTFT quantiles are computed
 *	                 by the caller from the copied samples, never in the engine's step.
 *
 * Every request ends with exactly one DONE or one ERROR event, except requests of a
 * connection reported closed (they end silently) and after kvp_sched_free().
 */
#ifndef KVP_SVC_SCHED_H
#define KVP_SVC_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "compute/sample.h"
#include "kvpool/proto.h"
#include "shm/index.h"
#include "shm/pool.h"

struct kvp_model;
struct kvp_tokenizer;
struct kvp_sched;

/**
 * struct kvp_sched_config - what the engine runs on
 * @pool, @index:    the default domain's pool and index (borrowed; the engine thread
 *                   owns them from kvp_sched_start() until kvp_sched_free())
 * @model, @tok:     model and tokenizer (borrowed, immutable)
 * @base_keys:       extra keys every request shares (model fingerprint, dtype, RoPE);
 *                   the request's salt is added per request
 * @n_threads:       BLAS threads for the forward pass (>= 1)
 * @max_running:     sequences admitted at once (decode batch bound)
 * @max_queued:      requests waiting for admission; kvp_sched_submit() refuses more
 * @prefill_chunk:   prefill tokens per step (all sequences together)
 * @event_capacity:  engine -> loop ring size (events)
 * @ignore_eos:      generate max_new tokens even past end-of-generation tokens (load
 *                   tests)
 * @test_eog_after:  tests only, 0 = off: once a request has kept this many tokens,
 *                   every end-of-generation id's logit is raised by 1e4, so models with
 *                   synthetic weights end their replies (docs/daemon.md)
 * @wake_fd:         eventfd the engine writes after queueing events (borrowed)
 */
struct kvp_sched_config {
	struct kvp_pool *pool;
	struct kvp_index *index;
	const struct kvp_model *model;
	const struct kvp_tokenizer *tok;
	struct kvp_extra_keys base_keys;
	uint32_t n_threads;
	uint32_t max_running;
	uint32_t max_queued;
	uint32_t prefill_chunk;
	uint32_t event_capacity;
	bool ignore_eos;
	uint32_t test_eog_after;
	int wake_fd;
};

/**
 * struct kvp_sched_req - one validated GENERATE, as the loop hands it over
 * @conn, @req_id:   who asked (answers go back with these)
 * @tokens:          prompt ids, each < n_vocab (checked by the caller); ownership passes
 *                   to the engine on success (malloc'd; the engine frees it)
 * @n_tokens:        >= 1
 * @max_new:         >= 1
 * @no_cache:        neither look up nor publish prefix blocks
 * @sample:          sampling parameters
 * @salt_len, @salt: cache salt (partitions the prefix cache)
 * @t_recv_ns:       CLOCK_MONOTONIC when the frame arrived (queue and TTFT start here)
 */
struct kvp_sched_req {
	uint64_t conn;
	uint64_t req_id;
	int32_t *tokens;
	uint32_t n_tokens;
	uint32_t max_new;
	bool no_cache;
	struct kvp_sample_params sample;
	uint32_t salt_len;
	uint8_t salt[KVP_SALT_MAX];
	uint64_t t_recv_ns;
};

enum kvp_sched_ev_type {
	KVP_SCHED_EV_TOKEN = 1, /* @token (or -1: text only) and @text */
	KVP_SCHED_EV_DONE,	/* @usage */
	KVP_SCHED_EV_ERROR,	/* @status and @text (message) */
};

#define KVP_SCHED_EV_TEXT 48

/**
 * struct kvp_sched_event - one answer from the engine
 * @type:     enum kvp_sched_ev_type
 * @token:    TOKEN: the sampled id, or -1 when the event only carries more text
 * @text_len: bytes in @text
 * @status:   ERROR: enum kvp_status
 * @text:     TOKEN: UTF-8 of complete characters so far; ERROR: message (no NUL)
 * @usage:    DONE: the request's usage (usage.status says why it stopped)
 */
struct kvp_sched_event {
	uint32_t type;
	int32_t token;
	uint32_t text_len;
	uint32_t status;
	uint64_t conn;
	uint64_t req_id;
	char text[KVP_SCHED_EV_TEXT];
	struct kvp_usage usage;
};

/**
 * struct kvp_sched_stats - engine-side counters for the status report
 * Pool and index figures are copied from kvp_pool_stats()/kvp_index_stats() at the end
 * of the engine's last step; request figures are totals since start.
 */
struct kvp_sched_stats {
	struct kvp_pool_stats pool;
	struct kvp_index_stats index;
	uint64_t queued;
	uint64_t running;
	uint64_t waiting_prefix;
	uint64_t reserved_blocks;
	uint64_t req_total;
	uint64_t req_done;
	uint64_t req_cancelled;
	uint64_t req_failed;
	uint64_t lookups;	/* requests that looked up the index (final lookup) */
	uint64_t hit_requests;	/* ... with at least one hit block */
	uint64_t lookup_tokens; /* prompt tokens of those requests */
	uint64_t hit_tokens;	/* cached tokens of those requests */
	uint64_t prompt_tokens;
	uint64_t cached_tokens;
	uint64_t cache_creation_tokens;
	uint64_t recomputed_tokens;
	uint64_t generated_tokens;
	double queue_ms; /* sums of the usage times of ended requests */
	double ttft_ms;
	double prefill_ms;
	double decode_ms;
	uint64_t prefix_waits;	   /* times a request waited for another's prefix */
	uint64_t cancels_received; /* cancel messages taken from the inbox */
	uint64_t steps;
	uint64_t ttft_samples;
	double ttft_p50_ms;
	double ttft_p99_ms;
};

/**
 * kvp_sched_new() - make the engine (forward context, buffers); no thread yet
 * Return: 0, -EINVAL for a bad config, -ENOMEM, or an error of kvp_fwd_new().
 */
int kvp_sched_new(struct kvp_sched **out, const struct kvp_sched_config *cfg);

/* Start the engine thread.  Return: 0 or -errno of pthread_create(). */
int kvp_sched_start(struct kvp_sched *s);

/*
 * Stop the engine thread (requests still running end without events), put back every
 * block it holds, free everything.  NULL is fine.  Call after the loop has stopped
 * polling events.
 */
void kvp_sched_free(struct kvp_sched *s);

/**
 * kvp_sched_blocks_for() - blocks a request of @n_prompt tokens and @max_new generated
 * tokens holds at most: K/V of n_prompt + max_new - 1 positions (the last sampled token
 * is never fed back)
 */
uint64_t kvp_sched_blocks_for(const struct kvp_sched *s, uint32_t n_prompt, uint32_t max_new);

/**
 * kvp_sched_submit() - queue a request (loop thread)
 * @r: the request; on success its @tokens belong to the engine
 * Return: 0; -EAGAIN when max_queued + max_running requests are outstanding (answer
 * BUSY); -ENOSPC when the request can never fit in the pool (answer NOSPACE);
 * -ESHUTDOWN after kvp_sched_drain(); -ENOMEM.  On error the caller keeps @tokens.
 */
int kvp_sched_submit(struct kvp_sched *s, const struct kvp_sched_req *r);

/* Cancel one request (it ends with DONE, usage.status KVP_E_CANCELLED).  Loop thread. */
void kvp_sched_cancel(struct kvp_sched *s, uint64_t conn, uint64_t req_id);

/* The connection is gone: end its requests silently and release their blocks. */
void kvp_sched_conn_closed(struct kvp_sched *s, uint64_t conn);

/*
 * Shutdown, phase 1: refuse new submissions (-ESHUTDOWN).  Every request already
 * submitted, queued or running, goes on; kvp_sched_cancel_all() ends what is left.
 */
void kvp_sched_drain(struct kvp_sched *s);

/* Shutdown, phase 2: every request still running ends now with DONE, status @why. */
void kvp_sched_cancel_all(struct kvp_sched *s, enum kvp_status why);

/* Requests submitted and not yet ended (queued, waiting or running).  Any thread. */
uint64_t kvp_sched_outstanding(const struct kvp_sched *s);

/**
 * kvp_sched_poll_events() - take up to @max events, oldest first (loop thread)
 * Return: number taken.
 */
unsigned int kvp_sched_poll_events(struct kvp_sched *s, struct kvp_sched_event *ev,
				   unsigned int max);

/*
 * The loop will not poll any more (it is being torn down): from now on the engine
 * drops events instead of waiting for room.
 */
void kvp_sched_loop_gone(struct kvp_sched *s);

/*
 * Copy the latest engine snapshot and compute the TTFT quantiles over its last 1024
 * samples (a sort: call it for a report, not in a hot loop).  Any thread.
 */
void kvp_sched_get_stats(struct kvp_sched *s, struct kvp_sched_stats *st);

#endif /* KVP_SVC_SCHED_H */
