/* SPDX-License-Identifier: MIT */
/*
 * engine.h - the engine: one thread that owns the pool, the prefix index and the forward
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
#ifndef KVP_ENGINE_ENGINE_H
#define KVP_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compute/forward.h"
#include "compute/sample.h"
#include "kvpool/proto.h"
#include "shm/index.h"
#include "shm/pool.h"
#include "svc/engine/cachectl.h"
#include "svc/engine/cachepol.h"
#include "svc/engine/remoting.h"
#include "svc/engine/tiering.h"
#include "util/hist.h"

struct kvp_model;
struct kvp_tokenizer;
struct kvp_sched;
struct kvp_tier;

/* Scheduling policies (scheduler.policy). */
enum kvp_sched_policy {
	KVP_SCHED_FAIR = 0, /* blocks on demand + preemption, short-first prefill by time */
	KVP_SCHED_FIFO,	    /* the first policy: worst-case reservation, arrival order,
			     * fixed prefill chunks; kept for comparison (benchmarks) */
};

/* Priorities a request may ask for (the wire's); higher runs first.  0 is the default. */
#define KVP_SCHED_PRIO_MIN KVP_PRIORITY_MIN
#define KVP_SCHED_PRIO_MAX KVP_PRIORITY_MAX

/**
 * struct kvp_sched_hooks - replace the forward pass and the clock (tests)
 * @ctx:     passed to each
 * @prefill: as kvp_fwd_prefill() (logits of the last position only)
 * @decode:  as kvp_fwd_decode()
 * @now_ns:  CLOCK_MONOTONIC-like time in ns
 * @step:    as kvp_fwd_step() (FAIR's mixed steps), or NULL: then a mixed step runs as
 *           @decode over its decode rows followed by @prefill per chunk
 *
 * Every member but @step must be set.  The engine then makes no forward context; the
 * model is still read for its vocabulary size.
 */
struct kvp_sched_hooks {
	void *ctx;
	int (*prefill)(void *ctx, const struct kvp_kv_view *kv, const uint32_t *table,
		       uint32_t n_table, uint32_t n_past, const int32_t *tokens, uint32_t n,
		       float *logits);
	int (*decode)(void *ctx, const struct kvp_kv_view *kv, const struct kvp_fwd_seq *seqs,
		      uint32_t n, float *logits);
	uint64_t (*now_ns)(void *ctx);
	int (*step)(void *ctx, const struct kvp_kv_view *kv, const struct kvp_fwd_part *parts,
		    uint32_t n_parts, float *logits);
};

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
 * @prefill_chunk:   most prefill tokens per step (all sequences together)
 * @event_capacity:  engine -> loop ring size (events)
 * @ignore_eos:      generate max_new tokens even past end-of-generation tokens (load
 *                   tests)
 * @test_eog_after:  tests only, 0 = off: once a request has kept this many tokens,
 *                   every end-of-generation id's logit is raised by 1e4, so models with
 *                   synthetic weights end their replies (docs/daemon.md)
 * @wake_fd:         eventfd the engine writes after queueing events (borrowed)
 * @policy:          enum kvp_sched_policy
 * @step_target_ns:  FAIR: engine step time to aim at while sequences are decoding
 *                   (0: @itl_budget_pct of their decode step alone, as measured)
 * @prefill_step_ns: FAIR: longest prefill step while nobody decodes (0: the chunk whose
 *                   own work is AUTO_PREFILL_WORK fixed costs of a call, as measured)
 * @itl_budget_pct:  FAIR: a running stream's gap between tokens while prompts prefill,
 *                   % of its gap alone (a decode step of the batch); 0: 200
 * @cost_call_ns, @cost_token_ns: FAIR: both set: the step-cost model's fixed cost of a
 *                   call and cost of a row, used as given (no calibration, no
 *                   adaptation: the plans are a function of the requests alone, for
 *                   tests); 0: measured at start and adapted after every step
 * @aging_ms:        FAIR: a prefilling sequence left without a chunk for this long goes
 *                   ahead of shorter ones (shortest first, with aging); 0: 250
 * @headroom_blocks: FAIR: blocks left free when admitting next to running sequences
 *                   (0: 1% of the pool, at least 1)
 * @hooks:           NULL, or the forward pass and clock to use instead (borrowed)
 * @tier:            the disk tier (borrowed; NULL: none), driven by the engine thread
 *                   from kvp_sched_start() on; opened and attached to @index before
 * @tier_high_pct, @tier_low_pct: pool use (blocks not free, %) above which cold cached
 *                   blocks are written to @tier and freed, and down to which (also the
 *                   remote tier's selective mode: published before they are evicted)
 * @cache:           the domain's prompt-cache policy (TTLs, minimum, pins, eviction)
 * @remote:          the remote tier (borrowed; NULL: none), below memory and @tier; it
 *                   must outlive the engine and be freed before @pool
 * @remote_domain:   the remote domain id of @pool's trust domain (svc/remotecfg.h)
 * @remote_host:     this host's id in the store (borrowed; outlives the engine)
 * @remote_summary_s: with @remote: publish @index's chain summary every this many seconds
 *                   (svc/engine/routesum.h; 0: never)
 * @speculative:     enum kvp_sched_spec: AUTO drafts for greedy requests (svc/engine/spec.c),
 *                   OFF never; a request may ask otherwise
 * @draft_max, @draft_ngram: a drafting request's kvp_draft_init() k_max and ngram_max
 *                   (0: compute/draft.h's defaults)
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
	uint32_t policy;
	uint64_t step_target_ns;
	uint64_t prefill_step_ns;
	uint32_t itl_budget_pct;
	uint64_t cost_call_ns;
	uint64_t cost_token_ns;
	uint32_t aging_ms;
	uint32_t headroom_blocks;
	const struct kvp_sched_hooks *hooks;
	struct kvp_tier *tier;
	uint32_t tier_high_pct;
	uint32_t tier_low_pct;
	struct kvp_cache_policy cache;
	struct kvp_remote *remote;
	uint32_t remote_domain;
	const char *remote_host;
	uint32_t remote_summary_s;
	uint32_t speculative;
	uint32_t draft_max;
	uint32_t draft_ngram;
};

struct kvp_sched_sampling;

/* What a submitted request does (struct kvp_sched_req.op). */
enum kvp_sched_op {
	KVP_SCHED_OP_GENERATE = 0, /* generate (GENERATE, CHAT) */
	KVP_SCHED_OP_PIN,	   /* compute and publish the prompt's full blocks, pin them */
};

/**
 * struct kvp_sched_req - one validated GENERATE, as the loop hands it over
 * @conn, @req_id:   who asked (answers go back with these)
 * @tokens:          prompt ids, each < n_vocab (checked by the caller); ownership passes
 *                   to the engine on success (malloc'd; the engine frees it), and on
 *                   failure stays with the caller, unchanged
 * @n_tokens:        >= 1
 * @cap_tokens:      the ids @tokens has room for (0: @n_tokens).  With room for the
 *                   prompt and max_new tokens the buffer becomes the sequence's history
 *                   as it is (moved: ipc/ allocates it so, copying the frame's ids once);
 *                   with less the engine grows it (realloc) first
 * @max_new:         >= 1
 * @no_cache:        neither look up nor publish prefix blocks
 * @priority:        KVP_SCHED_PRIO_MIN .. KVP_SCHED_PRIO_MAX; higher is admitted,
 *                   prefilled and kept (not preempted) first
 * @sample:          sampling parameters
 * @salt_len, @salt: cache salt (partitions the prefix cache)
 * @t_recv_ns:       CLOCK_MONOTONIC when the frame arrived (queue and TTFT start here)
 * @cc:              cache control (zero: automatic, the policy's defaults)
 * @has_cc:          the client sent @cc: its DONE carries struct kvp_cache_usage
 * @op:              enum kvp_sched_op
 * @samp:            the sampling section (svc/engine/sampling.h), or NULL; ownership passes to
 *                   the engine on success, as @tokens'
 * @speculative:     enum kvp_sched_spec: AUTO = the daemon's default
 * @spec_usage:      its DONE carries struct kvp_spec_usage (drafted, accepted)
 */
struct kvp_sched_req {
	uint64_t conn;
	uint64_t req_id;
	int32_t *tokens;
	uint32_t n_tokens;
	uint32_t cap_tokens;
	uint32_t max_new;
	bool no_cache;
	int32_t priority;
	struct kvp_sample_params sample;
	uint32_t salt_len;
	uint8_t salt[KVP_SALT_MAX];
	uint64_t t_recv_ns;
	struct kvp_cache_ctl cc;
	bool has_cc;
	uint32_t op;
	struct kvp_sched_sampling *samp;
	uint32_t speculative;
	bool spec_usage;
};

/* Speculative decoding asked for (struct kvp_sched_req.speculative, config.speculative). */
enum kvp_sched_spec {
	KVP_SCHED_SPEC_AUTO = 0, /* request: the daemon's default; config: on for greedy */
	KVP_SCHED_SPEC_ON,	 /* the request drafts, greedy or sampled (spec.c's rule) */
	KVP_SCHED_SPEC_OFF,	 /* never */
};

enum kvp_sched_ev_type {
	KVP_SCHED_EV_TOKEN = 1, /* @token (or -1: text only) and @text */
	KVP_SCHED_EV_DONE,	/* @usage */
	KVP_SCHED_EV_ERROR,	/* @status and @text (message) */
	KVP_SCHED_EV_LEASE,	/* @lease: the answer to kvp_sched_lease() */
};

/**
 * struct kvp_sched_lease - a LEASE's answer, as the wire's LEASED: @hdr then
 * @hdr.n_blocks blocks.  Malloc'd by the engine; the loop frees it after sending.
 */
struct kvp_sched_lease {
	struct kvp_lease hdr;
	struct kvp_lease_block blocks[];
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
 * @cont:     TOKEN: continuation index of an n > 1 request, else -1
 * @has_cu:   DONE: send @cu after the usage
 * @cu:       DONE: cache usage (miss reason, matched blocks, ...)
 * @has_lp:   TOKEN with an id, of a request that asked logprobs: @lp is the id's
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
	struct kvp_sched_lease *lease; /* LEASE: owned by whoever takes the event */
	int32_t cont;
	bool has_cu;
	struct kvp_cache_usage cu;
	bool has_su; /* DONE: send @su after the usage (and @cu) */
	struct kvp_spec_usage su;
	bool has_lp;
	struct kvp_sample_logprob lp;
	bool has_usage; /* TOKEN: @usage holds the prompt's counts (the request's first token) */
};

/* util/hist.h's bounds, then +Inf */
#define KVP_SCHED_ITL_BUCKETS (KVP_HIST_BUCKETS + 1)

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
	uint64_t steps;		   /* engine steps that computed something */
	uint64_t decode_rows;	   /* decode rows over those steps (a sequence each, a token) */
	uint64_t spec_drafted;	   /* draft rows verified (speculative decoding) */
	uint64_t spec_accepted;	   /* ... whose draft the model's pick agreed with */
	uint64_t prefill_steps;	   /* ... steps that computed prompt positions */
	uint64_t prefill_tokens;   /* ... prompt positions they computed (resumes included) */
	uint64_t prompts_moved;	   /* submitted prompt buffers kept as the history (no copy) */
	uint64_t prompts_grown;	   /* ... grown first, too small for prompt + max_new */
	uint64_t ttft_samples;
	double ttft_p50_ms;
	double ttft_p99_ms;

	/* the policy (enum kvp_sched_policy) and what it did */
	uint32_t policy;
	uint64_t queued_high;	     /* queued with priority > 0 */
	uint64_t queued_normal;	     /* ... = 0 */
	uint64_t queued_low;	     /* ... < 0 */
	uint64_t preempted;	     /* queued after a preemption, waiting to resume (in queued) */
	uint64_t preemptions;	     /* times a running sequence was preempted */
	uint64_t preempt_swapped;    /* ... whose blocks went to the disk tier */
	uint64_t cached_tokens_disk; /* usage sums, as the fields of struct kvp_usage */
	uint64_t swapped_tokens;
	uint64_t resume_computed_tokens;
	uint64_t preempt_usage; /* sum of usage.preemptions over ended requests */

	/* inter-token latency: a cumulative histogram since start (itl_le[i] counts the gaps
	 * <= kvp_sched_itl_bound_ms(i)), and quantiles over the last 4096 gaps */
	uint64_t itl_le[KVP_SCHED_ITL_BUCKETS];
	uint64_t itl_count;
	double itl_sum_ms;
	double itl_p50_ms;
	double itl_p99_ms;
	double itl_max_ms;

	/* engine steps that computed something, over the last 1024; the step budget */
	double step_p50_ms;
	double step_p99_ms;
	double step_max_ms;
	double step_target_ms;	/* FAIR: budget while sequences decode */
	double prefill_step_ms; /* FAIR: longest prefill step while nobody decodes */
	double calib_decode_ms; /* measured at start: a decode step of one sequence */
	double calib_call_ms;	/* ... the fixed cost of a prefill call */
	double calib_token_ms;	/* ... a prefill token at context 0 */

	/* the disk tier, when one is configured */
	uint32_t tier_configured;
	struct kvp_tiering_stats tier;

	/* leases (svc/engine/leases.h): held now, made, ended by RELEASE / deadline / close, refused */
	uint64_t leases_active;
	uint64_t leases_granted;
	uint64_t leases_released;
	uint64_t leases_expired;
	uint64_t leases_closed;
	uint64_t leases_refused;
	/* the prompt cache: miss reasons, pins, most-hit prefixes, its policy */
	struct kvp_cache_stats cache;
	struct kvp_cache_policy cache_policy;
	uint64_t block_bytes;
	/* the remote tier, when one is configured (remote.configured) */
	struct kvp_remoting_stats remote;
	uint64_t cached_tokens_remote; /* usage sum */
	/* reclaim (svc/reclaim.h): the last inbox message handled, the write-back done */
	uint64_t inbox_handled;
	uint64_t writeback_done;
};

/* Upper bound (ms) of bucket @i of the inter-token latency histogram (the last: +Inf). */
static inline double kvp_sched_itl_bound_ms(uint32_t i)
{
	return i < KVP_HIST_BUCKETS ? kvp_hist_bounds_s[i] * 1000 : __builtin_inf();
}

/**
 * kvp_sched_new() - make the engine (forward context, buffers); no thread yet
 * Return: 0, -EINVAL for a bad config, -ENOMEM, or an error of kvp_fwd_new().
 */
int kvp_sched_new(struct kvp_sched **out, const struct kvp_sched_config *cfg);

/*
 * Measure the model on this machine (FAIR: a few forward calls in free blocks, logged),
 * then start the engine thread.  Return: 0 or -errno of pthread_create().
 */
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

/*
 * Empty the disk tier (`kvpool flush --tier`): the engine does it at its next step, after
 * the I/O in flight.  Loop thread.  Return: 0, or -ENODEV without a tier.
 */
int kvp_sched_flush_tier(struct kvp_sched *s);

/**
 * struct kvp_sched_lease_ask - a LEASE, as the loop hands it over
 * @conn, @req_id: who asked (the answer goes back with these)
 * @tokens:        @n_tokens ids (borrowed for the call)
 * @salt_len, @salt: cache salt
 * @ttl_ms:        the lifetime granted (the loop applied leases.max_ms)
 * @max_per_conn:  leases the connection may hold (leases.max_per_conn)
 */
struct kvp_sched_lease_ask {
	uint64_t conn;
	uint64_t req_id;
	const int32_t *tokens;
	uint32_t n_tokens;
	uint32_t salt_len;
	uint8_t salt[KVP_SALT_MAX];
	uint32_t ttl_ms;
	uint32_t max_per_conn;
};

/**
 * kvp_sched_lease() - look up the longest cached prefix of @a's tokens and hold its
 * blocks for the client (loop thread); answered by one KVP_SCHED_EV_LEASE event (0
 * blocks when nothing is cached) or an ERROR event (BUSY: max_per_conn reached)
 * Return: 0, -EINVAL, -ESHUTDOWN after kvp_sched_drain(), or -ENOMEM.
 */
int kvp_sched_lease(struct kvp_sched *s, const struct kvp_sched_lease_ask *a);

/* End lease @lease_id of @conn (an unknown one is ignored).  Loop thread. */
void kvp_sched_release(struct kvp_sched *s, uint64_t conn, uint64_t lease_id);

/**
 * kvp_sched_unpin() - UNPIN: drop one cache pin from every full block of @tokens under
 * @salt (loop thread).  Answered by a DONE event (cu.blocks: blocks unpinned) or ERROR
 * (not pinned).
 * @tokens: ownership passes to the engine on success
 * Return: 0, -ENOMEM, -ESHUTDOWN.
 */
int kvp_sched_unpin(struct kvp_sched *s, uint64_t conn, uint64_t req_id, int32_t *tokens,
		    uint32_t n_tokens, uint32_t salt_len, const uint8_t *salt);

/*
 * FLUSH: drop every unreferenced, unpinned cached block (loop thread); answered by a
 * DONE event (cu.blocks: blocks dropped).  Return: 0, -ENOMEM, -ESHUTDOWN.
 */
int kvp_sched_flush_cache(struct kvp_sched *s, uint64_t conn, uint64_t req_id);

/**
 * kvp_sched_writeback() - write every cached block that has no disk copy to the tier,
 * keeping it in memory (loop thread): before the domain is reclaimed, so its uid's
 * prefixes come back from its tier file
 * Return: the ticket kvp_sched_idle() takes (0: no memory, nothing asked).
 */
uint64_t kvp_sched_writeback(struct kvp_sched *s);

/**
 * kvp_sched_idle() - may the engine be freed with nothing of its clients lost (loop
 * thread)?  The write-back of @ticket is done, every message posted since was handled
 * (the snapshot is that late), nothing is outstanding, no lease is held, no block has a
 * cache pin, and no TTL given lasts past @now_ns.
 */
bool kvp_sched_idle(struct kvp_sched *s, uint64_t ticket, uint64_t now_ns);

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
 * samples, the inter-token and step quantiles over theirs (sorts: call it for a report,
 * not in a hot loop).  Any thread.
 */
void kvp_sched_get_stats(struct kvp_sched *s, struct kvp_sched_stats *st);

/* ---- tests: the engine driven step by step on the caller's thread ---- */

/*
 * kvp_sched_step() - one engine step (inbox, admission, prefill, decode, events) on the
 * calling thread; only for an engine whose thread was never started.  The first call
 * calibrates the cost model as the thread would.
 * Return: true when requests are still queued or running.
 */
bool kvp_sched_step(struct kvp_sched *s);

/*
 * kvp_sched_check() - verify the engine's block accounting (after a step, or with the
 * thread stopped): every block's references are exactly the tables holding it, the
 * reservations add up, and free + evictable blocks cover them.
 * Return: 0, or -EUCLEAN with @err saying what is wrong.
 */
int kvp_sched_check(struct kvp_sched *s, char *err, size_t cap);

#endif /* KVP_ENGINE_ENGINE_H */
