/* SPDX-License-Identifier: MIT */
/*
 * engine_impl.h - the engine's own structs, shared by its files and by nothing else:
 * struct seq (one request), the lists, parallel-sampling groups, the inbox messages,
 * struct kvp_sched itself, and the functions one engine file calls in another
 * (prefixed eng_).  The design is in engine.c's opening comment.
 * Thread: everything here is the engine thread's, except what engine.c's loop-thread
 * side touches under inbox_lock, ev_lock and stats_lock (see struct kvp_sched).
 */
#ifndef KVP_ENGINE_ENGINE_IMPL_H
#define KVP_ENGINE_ENGINE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "compute/draft.h"
#include "compute/gen.h"
#include "svc/engine/engine.h"
#include "svc/engine/leases.h"
#include "svc/engine/remoting.h"
#include "svc/engine/routesum.h"
#include "svc/engine/stepcost.h"
#include "svc/engine/tiering.h"
#include "util/samples.h"
#include "util/time.h"

#define TTFT_RING 1024u
#define ITL_RING 4096u
#define STEP_RING 1024u

/* Calibration: a prefill of CAL_N tokens at context 0 and at CAL_CTX, decode steps. */
#define CAL_N 32u
#define CAL_CTX 128u
#define CAL_REPEAT 3

#define REMOTE_WAIT_MS 2 /* idle engine waiting for the remote tier: inbox latency bound */

/*
 * Auto budgets, in units of the model's measured cost (docs/daemon.md "Scheduling"):
 * while streams run, a step lasts itl_budget_pct of their decode step alone; a step of
 * prefill alone computes the chunk whose own work is AUTO_PREFILL_WORK fixed costs of
 * a call (the fixed cost at most 1/5 of the step: a long prompt's prefill within about
 * 1.25x of what whole chunks give it, the 1.3x, and a short request arriving
 * meanwhile waits at most 5 fixed costs, within 3x its time alone when that is at least
 * 2.5 of them, half a step on average).
 */
#define AUTO_ITL_BUDGET_PCT 200
#define AUTO_PREFILL_WORK 4.0

enum seq_state {
	SEQ_QUEUED = 0, /* waiting for admission (new, or preempted) */
	SEQ_WAITING,	/* waiting for another sequence's prefix blocks */
	SEQ_PREFILL,	/* admitted; prompt (or, after a preemption, history) computed */
	SEQ_DECODE,	/* generating */
	SEQ_LOADING,	/* admitted; prefix blocks being read back from the disk tier and/or
			 * fetched from the remote tier */
};

/* One request.  Owned by the engine thread from the moment it is taken off the inbox. */
struct seq {
	struct seq *prev, *next; /* in exactly one of queue, waiting, active */
	enum seq_state state;
	uint64_t conn;
	uint64_t req_id;
	int32_t *hist; /* owned: the prompt, then each kept token; n_prompt + max_new */
	int32_t priority;
	bool no_cache;
	struct kvp_prefix_key key;
	struct kvp_sampler *sampler;
	struct kvp_sample_params sp; /* as asked (continuation i samples with seed + i) */

	/* prompt cache (svc/engine/cachectl.h) */
	struct kvp_cachectl cc;
	bool has_cc;	       /* the DONE carries struct kvp_cache_usage */
	bool pin_op;	       /* KVP_SCHED_OP_PIN */
	uint32_t miss_reason;  /* enum kvp_miss_reason, at first admission */
	uint32_t miss_tier;    /* enum kvp_miss_tier */
	uint32_t matched;      /* full blocks served by the cache at first admission */
	uint32_t evicted_toks; /* prompt tokens computed again: their blocks were evicted */
	uint32_t cu_blocks;    /* PIN: blocks pinned */

	/* parallel sampling: continuation @cont of group @grp (NULL: a lone sequence) */
	struct group *grp;
	uint32_t cont;

	uint32_t *table; /* block ids; cap_table entries */
	uint32_t n_table;
	uint32_t cap_table; /* = blocks_for(n_prompt, max_new) */
	uint32_t n_indexed; /* table[0..n_indexed) are in the index */
	uint32_t n_created; /* blocks this sequence inserted in the index */
	bool publish_stopped;
	uint32_t reserved;  /* blocks it may still allocate from its reservation */
	uint32_t n_fill;    /* positions to compute before it decodes (again) */
	struct kvp_gen gen; /* positions computed, tokens kept, text held; prompt = hist */

	struct seq *wait_on;  /* SEQ_WAITING: the sequence computing our prefix */
	uint32_t wait_blocks; /* ... wake when it has indexed this many blocks */

	bool cancelled;
	bool silent;	 /* connection gone: end without events */
	bool usage_sent; /* the first token's event carried the prompt's usage */
	uint32_t cancel_status;

	uint64_t arrival;	  /* submission order */
	uint64_t admit_no;	  /* first admission order; 0 = never admitted */
	uint32_t preemptions;	  /* times preempted */
	bool resumed;		  /* admitted again after a preemption */
	uint32_t tok_cached;	  /* usage: prompt tokens hit in memory at first admission */
	uint32_t tok_computed;	  /* ... prompt tokens computed before any preemption */
	uint32_t tok_resume;	  /* ... positions computed again after preemptions */
	uint32_t tok_cached_disk; /* ... prompt tokens read back from the tier at first admission */
	uint32_t tok_swapped;	  /* ... tokens read back from the tier after preemptions */

	/* SEQ_LOADING: table[load_from + i] is read from disk[i], result in load_res[i] */
	struct kvp_index_disk_hit *disk; /* owned; cap_table entries, made when needed */
	int8_t *load_res;		 /* 1 pending, 0 sound, -1 failed */
	uint32_t load_from;
	uint32_t n_load;     /* blocks to read */
	uint32_t n_issued;   /* reads queued */
	uint32_t n_inflight; /* ... not completed yet */
	bool load_failed;    /* stop issuing: a read failed */

	/* SEQ_LOADING, remote: table[r_from .. r_from + r_n) are fetched (svc/engine/remoting.h) */
	uint32_t r_from;
	uint32_t r_n;
	uint32_t r_ok;		    /* leading blocks the fetch checked */
	bool r_pending;		    /* the fetch's completion has not come yet */
	uint32_t tok_cached_remote; /* usage: prompt tokens fetched at first admission */

	uint64_t t_recv;
	uint64_t t_admit;
	uint64_t t_first;
	uint64_t t_last;
	uint64_t t_served; /* last prefill chunk, or admission (aging) */
	uint64_t prefill_ns;
	uint64_t step_recv;  /* st.steps when the engine took it from the inbox */
	bool burst;	     /* FAIR: its prompt came with others', computed together (plan.c) */
	uint32_t ttft_steps; /* usage: computing steps to the first token, that one's included */

	/* speculative decoding (svc/engine/spec.c): drafts verified as extra decode rows */
	bool spec;				/* on for this request */
	struct kvp_draft draft;			/* its draft source, totals for usage */
	int32_t spec_rows[1 + KVP_DRAFT_K_MAX]; /* this step's rows: last, then the drafts */
	uint32_t spec_n;			/* ... how many (1: no drafts) */
	uint32_t spec_table0;			/* n_table before the drafts' blocks */
	uint32_t spec_taken;			/* blocks taken for the drafts this step */
	uint32_t spec_res;			/* ... of which from its reservation */
	uint32_t spec_drafted, spec_accepted;	/* usage: drafts verified, and kept */
	bool spec_usage;			/* the DONE carries struct kvp_spec_usage */
};

struct seq_list {
	struct seq *first, *last;
	uint32_t n;
};

/*
 * The continuations of one n > 1 request (see "Parallel sampling").  The request ends
 * with one DONE when the last of them ends: @u sums what they did.
 */
struct group {
	uint32_t n;	 /* continuations */
	uint32_t live;	 /* not ended yet */
	uint32_t status; /* the first status other than KVP_OK, else KVP_OK */
	struct kvp_usage u;
	struct kvp_cache_usage cu;
	struct kvp_spec_usage su;
};

/* A prefilling sequence and its place in this step's prefill order. */
struct prefill_key {
	struct seq *q;
	uint32_t left; /* positions still to compute */
	bool overdue;  /* left without a chunk for aging_ms */
};

enum msg_type {
	MSG_SUBMIT,
	MSG_CANCEL,
	MSG_CLOSED,
	MSG_CANCEL_ALL,
	MSG_FLUSH_TIER,
	MSG_LEASE,
	MSG_RELEASE,
	MSG_UNPIN,
	MSG_FLUSH_CACHE,
	MSG_WRITEBACK,
	MSG__COUNT
};

/* A LEASE on its way to the engine: the ask, its tokens after it (n_tokens + 1). */
struct lease_msg {
	struct kvp_sched_lease_ask ask;
	int32_t tokens[];
};

struct msg {
	struct msg *next;
	uint64_t serial; /* post() numbers every message: 1, 2, ... */
	enum msg_type type;
	uint64_t conn;
	uint64_t req_id;
	uint32_t status;
	struct seq *seq;
	struct lease_msg *lease; /* MSG_LEASE (owned) */
	/* MSG_UNPIN: the prompt (owned) and salt */
	int32_t *tokens;
	uint32_t n_tokens;
	uint32_t salt_len;
	uint8_t salt[KVP_SALT_MAX];
};

/*
 * A scheduling policy (scheduler.policy): what the engine asks where FIFO and FAIR
 * differ.  The two entries are plan.c's eng_policies[], indexed by enum kvp_sched_policy.
 */
struct eng_policy {
	const char *name;
	bool (*compute)(struct kvp_sched *s); /* the step's compute: whether anything ran */
	bool (*queue_before)(const struct seq *a, const struct seq *b); /* queue order */
	bool reserve_whole; /* admission reserves every block a request may need (else the
			     * blocks of its prefill and first decode step) */
	bool on_demand;	    /* a sequence past its reservation takes blocks none claims */
	bool headroom;	    /* admission next to running sequences leaves them headroom */
	bool preempts;	    /* a higher priority, or a decode short of a block, preempts */
	bool calibrates;    /* measures the model at start for its step budgets */
	bool forks;	    /* parallel sampling (n > 1) */
	bool drafts;	    /* speculative drafts as extra rows of its one mixed call (spec.c) */
};

struct kvp_sched {
	struct kvp_sched_config cfg;
	uint32_t block_tokens;
	uint32_t n_blocks;
	uint32_t n_vocab;
	int32_t *eog; /* the end-of-generation ids: the test_eog_after hook, a grammar's end */
	size_t n_eog;
	const struct eng_policy *pol; /* cfg->policy's entry of eng_policies */
	struct kvp_kv_view view;
	struct kvp_fwd *fwd;	       /* NULL with hooks */
	struct kvp_tiering *tiering;   /* NULL without a disk tier */
	struct kvp_remoting *remoting; /* NULL without a remote tier */
	struct kvp_routesum *routesum; /* NULL without chain summaries */
	struct kvp_leases leases;      /* engine thread */
	bool flush_tier;	       /* a flush was asked for */
	uint64_t handled;	       /* engine thread: serial of the last message handled */
	uint64_t wb_want;	       /* engine thread: serial of the write-back asked for */
	uint32_t wb_cursor;	       /* ... the next block it looks at */
	pthread_t thread;
	bool started;
	bool calibrated;

	/* engine thread */
	struct seq_list queue;
	struct seq_list waiting;
	struct seq_list active;
	uint64_t reserved_total;
	uint64_t arrivals;
	uint64_t admissions;
	uint32_t headroom;
	struct kvp_stepcost cost;
	double itl_x;	     /* itl_budget_pct / 100 */
	double fixed_ns;     /* the call's fixed cost the budgets count in (eng_calibrate()) */
	uint64_t burst_step; /* FAIR: st.steps when the last burst began (plan.c) */
	uint64_t burst_last; /* FAIR: the latest step_recv of its prompts (plan.c) */
	uint32_t burst_n;    /* FAIR: the prompts of that burst */
	/* structured output's view of the vocabulary: made on first use (sampling.h) */
	struct kvp_grammar_vocab *gvocab;
	float *logits;		    /* max_running * n_vocab */
	float *fork_logits;	    /* n_vocab: the prompt's logits, kept for each continuation */
	uint32_t pin_max_blocks;    /* cache.pin_max in blocks */
	struct kvp_fwd_seq *batch;  /* max_running */
	struct seq **batch_seq;	    /* max_running */
	struct prefill_key *pkeys;  /* max_running: prefill order */
	struct kvp_fwd_part *parts; /* max_running: FAIR's mixed step, decode rows first */
	uint32_t spec_max;	    /* most draft rows one step takes (0: speculation off) */
	uint32_t spec_rows;	    /* draft rows in this step's plan (logits rows past nd) */
	struct seq **part_seq;	    /* max_running: the prefilling sequence of each chunk */
	struct kvp_sched_stats st;  /* engine's own copy, published to snap */
	/* the sample rings (util/samples.h), ms: TTFT of the last TTFT_RING requests, the
	 * last inter-token gaps, the last working steps; over the buffers after them */
	struct kvp_samples ttft, itl, step;
	double ttft_buf[TTFT_RING];
	double itl_buf[ITL_RING];
	double step_buf[STEP_RING];
	bool ev_pushed;

	/* inbox: loop -> engine */
	pthread_mutex_t inbox_lock;
	pthread_cond_t inbox_cv;
	struct msg *inbox_head, *inbox_tail;
	uint64_t posted; /* messages ever posted (inbox_lock) */
	bool stop;

	/* events: engine -> loop */
	pthread_mutex_t ev_lock;
	pthread_cond_t ev_space;
	struct kvp_sched_event *ev;
	uint32_t ev_cap;
	uint32_t ev_head; /* next to take */
	uint32_t ev_count;
	bool loop_gone;

	/*
	 * snapshot (stats_lock): the counters, and copies of the sample rings that
	 * kvp_sched_get_stats() sorts for its quantiles.  Sorting there, when a report is
	 * asked for, keeps the engine's step free of it (a sort of 1024 samples per step
	 * was most of a short request's engine time).
	 */
	pthread_mutex_t stats_lock;
	struct kvp_sched_stats snap;
	struct kvp_samples snap_ttft, snap_itl, snap_step; /* caught up with the rings */
	double snap_ttft_buf[TTFT_RING];
	double snap_itl_buf[ITL_RING];
	double snap_step_buf[STEP_RING];

	atomic_uint_fast64_t outstanding;
	atomic_bool draining;
	/* kvp_sched_submit() (loop thread): prompt buffers kept as they came, and grown */
	atomic_uint_fast64_t prompts_moved, prompts_grown;
};

static inline void list_add_tail(struct seq_list *l, struct seq *q)
{
	q->next = NULL;
	q->prev = l->last;
	if (l->last)
		l->last->next = q;
	else
		l->first = q;
	l->last = q;
	l->n++;
}

/* Put @q into @l right after @after (NULL: at the head). */
static inline void list_add_after(struct seq_list *l, struct seq *after, struct seq *q)
{
	q->prev = after;
	q->next = after ? after->next : l->first;
	if (q->next)
		q->next->prev = q;
	else
		l->last = q;
	if (after)
		after->next = q;
	else
		l->first = q;
	l->n++;
}

static inline void list_del(struct seq_list *l, struct seq *q)
{
	if (q->prev)
		q->prev->next = q->next;
	else
		l->first = q->next;
	if (q->next)
		q->next->prev = q->prev;
	else
		l->last = q->prev;
	q->prev = q->next = NULL;
	l->n--;
}

static inline uint32_t blocks_of(const struct kvp_sched *s, uint64_t positions)
{
	return (uint32_t)((positions + s->block_tokens - 1) / s->block_tokens);
}

static inline uint64_t now_ns(const struct kvp_sched *s)
{
	return s->cfg.hooks ? s->cfg.hooks->now_ns(s->cfg.hooks->ctx) : kvp_now_ns();
}

/* engine.c (events, request end, the step) */
/* TOKEN event(s) for @q's kept @token */
void eng_emit_token(struct kvp_sched *s, struct seq *q, int32_t token);
/* hand queued events to the loop now */
void eng_flush_events(struct kvp_sched *s);
/* whoever waited for @q's prefix looks up again */
void eng_forget_waiters(struct kvp_sched *s, struct seq *q);
/* anything queued, waiting or running */
bool eng_has_work(const struct kvp_sched *s);
/* queue @e for the loop (waits while the ring is full) */
void eng_push_event(struct kvp_sched *s, const struct kvp_sched_event *e);
/* drop @q's table and reservation */
void eng_release_blocks(struct kvp_sched *s, struct seq *q);
/* end @q with DONE or ERROR; frees it */
void eng_seq_end(struct kvp_sched *s, struct seq *q, uint32_t status, bool as_error,
		 const char *msg);
/* drop @q's reference on every block of its table */
void eng_unref_table(struct kvp_sched *s, struct seq *q);

/* admit.c (blocks, queue order, admission, preemption) */
/* the policies' queue orders: does @a go before @b? */
bool eng_queue_fifo(const struct seq *a, const struct seq *b);
bool eng_queue_fair(const struct seq *a, const struct seq *b);
/* admit the queue's head while it fits (FAIR: preempting lower priorities) */
void eng_admit(struct kvp_sched *s);
/* make @q's table cover @n_positions; -ENOSPC */
int eng_ensure_blocks(struct kvp_sched *s, struct seq *q, uint32_t n_positions);
/* the running sequence to preempt first, priority below @below */
struct seq *eng_pick_victim(struct kvp_sched *s, int64_t below);
/* blocks the pool can hand out now / of which no reservation claims */
uint64_t eng_pool_available(struct kvp_sched *s);
uint64_t eng_pool_unreserved(struct kvp_sched *s);
/* publish, release and requeue running @v */
void eng_preempt(struct kvp_sched *s, struct seq *v);
/* @q into the queue in policy order */
void eng_queue_insert(struct kvp_sched *s, struct seq *q);
/* one more block for @q: its reservation, else (on demand) an unclaimed one */
int eng_take_block(struct kvp_sched *s, struct seq *q);
/* requests whose prefix owner published (or ended) go back to the queue */
void eng_wake_waiters(struct kvp_sched *s);

/* plan.c (the step plan, compute, calibration) */
extern const struct eng_policy eng_policies[];
/* @q sampled @token: emit it, or end @q.  Return: whether @q is still running */
bool eng_took_token(struct kvp_sched *s, struct seq *q, int32_t token);
/* @q's next token from @logits */
int32_t eng_sample(struct kvp_sched *s, struct seq *q, float *logits);
/* the time a step may take while @nd sequences decode (FAIR) */
double eng_budget_decoding(struct kvp_sched *s, uint32_t nd);
/* measure the model for the step budgets (the policies that use them) */
void eng_calibrate(struct kvp_sched *s);

/* load.c (publish, disk reloads, remote fetches) */
/* blocks @q can read back from the disk tier after its @n_hit hits */
uint32_t eng_disk_lookup(struct kvp_sched *s, struct seq *q, uint32_t n_hit);
/* the tiers' completion callbacks */
void eng_fetch_done(void *ctx, uint64_t cookie, uint32_t n_ok, uint32_t stop);
/* @q's TTL and retention on block @b (its @i-th) */
void eng_keep_block(struct kvp_sched *s, const struct seq *q, uint32_t i, uint32_t b);
/* publish @q's full blocks below position @upto */
void eng_publish_upto(struct kvp_sched *s, struct seq *q, uint32_t upto);
void eng_read_done(void *ctx, uint64_t cookie, uint32_t block, int result);
/* read @q's next @n blocks back from disk / fetch from the remote tier */
void eng_start_load(struct kvp_sched *s, struct seq *q, uint32_t n);
void eng_start_remote(struct kvp_sched *s, struct seq *q, uint32_t from);
/* reap the tiers, feed loading sequences, flush when asked */
void eng_tier_step(struct kvp_sched *s);
/* the write-back asked for by kvp_sched_writeback(), not done yet; a step of it */
bool eng_writeback_pending(const struct kvp_sched *s);
void eng_writeback_step(struct kvp_sched *s);

/* ops.c (the inbox messages, PIN's end) */
/* PIN: pin the computed prompt's blocks; ends @q */
void eng_pin_finish(struct kvp_sched *s, struct seq *q);
/* one inbox message (the table of handlers) */
void eng_handle_msg(struct kvp_sched *s, struct msg *m);

/* spec.c (speculative decoding: drafts as extra decode rows, verification, rollback) */
/* the engine can draft (policy, forward, K/V type): sets spec_max; -ENOMEM */
int eng_spec_setup(struct kvp_sched *s);
/* whether a new request @q asking @mode (enum kvp_sched_spec) drafts */
void eng_spec_init(struct kvp_sched *s, struct seq *q, uint32_t mode);
/*
 * FAIR, after the @nd decode rows of s->parts: the drafts of each speculating sequence
 * as extra rows of its part, within the step's time budget (*@rows, *@attn grow), with
 * the blocks they write; sets s->spec_rows
 */
void eng_spec_plan(struct kvp_sched *s, uint32_t nd, double *rows, double *attn);
/*
 * The step of @nd decode parts (drafts included) ran in @dt ns, returning @r; @np
 * prefill parts ran with them: verify, keep, sample, roll back what was rejected
 */
void eng_spec_finish(struct kvp_sched *s, uint32_t nd, uint32_t np, int r, uint64_t dt);

/* usage.c (usage and the stats snapshot) */
/* add ending @q's usage to the sums */
void eng_usage_sum(struct kvp_sched *s, struct seq *q, uint32_t status);
/* @q's usage and cache usage; a group's, summed at its last continuation */
void eng_fill_cache_usage(const struct seq *q, struct kvp_cache_usage *cu);
void eng_fill_usage(struct kvp_sched *s, struct seq *q, uint32_t status, struct kvp_usage *u);
bool eng_group_end(struct seq *q, uint32_t status, struct kvp_usage *u, struct kvp_cache_usage *cu);
/* @q's drafted and accepted tokens (a group's: after eng_group_end(), the sums so far) */
void eng_fill_spec_usage(const struct seq *q, struct kvp_spec_usage *su);
/* the counters and the sample rings into the snapshot */
void eng_publish_stats(struct kvp_sched *s);

#endif /* KVP_ENGINE_ENGINE_IMPL_H */
