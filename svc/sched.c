/* SPDX-License-Identifier: MIT */
/*
 * sched.c - the engine thread: continuous batching with chunked prefill, prefix-cache
 * lookup and publish, blocks on demand with preemption, short-first prefill sized to a
 * time budget, priorities, cancellation (see sched.h; docs/daemon.md "Scheduling").
 *
 * One engine step:
 *
 *	1. handle the inbox (new requests, cancels, closed connections, cancel-all)
 *	2. end cancelled requests, putting back their blocks
 *	3. wake requests that waited for a prefix another request was computing
 *	4. admit queued requests (see "Admission"), preempting lower priorities for a
 *	   higher one that does not fit
 *	5. compute.  FAIR: one forward call (compute/forward.h kvp_fwd_step()) holding a
 *	   decode row of every sequence that is generating, each taking a block when its
 *	   positions cross into one (see "Blocks on demand"), and the prefill chunks that
 *	   fit the step's time with them (see "Prefill").  FIFO: prefill chunks, one call
 *	   each, then one batched decode call.  Each newly filled full block is published
 *	   in the index; a sequence whose prompt is done samples its first token from the
 *	   call's logits, and decodes from the next step on
 *	6. publish a counter snapshot; wake the loop if events were queued
 *
 * Generation stops at the model's end-of-generation set (kvp_gen_take()).  When a
 * request ends with a DONE (finished, or cancelled by its client; not failed, not
 * dropped with its connection), the full blocks of its prompt *and* of the tokens it
 * generated are published before the DONE is queued, so a conversation's next turn,
 * whose prompt starts with exactly those ids, finds them.
 *
 * Two policies (scheduler.policy).  FIFO is the first one, kept as it was for
 * comparison: admission in arrival order reserving every block a request may ever need,
 * prefill in admission order in fixed chunks.  FAIR is the default and is what the rest
 * of this comment describes where they differ.
 *
 * Admission.  The queue is ordered by priority (higher first), then requests resuming
 * after a preemption (in their first admission's order), then arrivals.  The head is
 * admitted when the pool can give it what it reserves: FIFO reserves
 * blocks_for(prompt, max_new) minus its hits; FAIR only the blocks its prefill and first
 * decode step write (plus, next to running sequences, a small headroom).  Invariant:
 * after every admission, free + cached-unreferenced (not pinned) >= reserved(all), so a
 * sequence never lacks a block its reservation promised.  The head that does not fit
 * waits, and so does everything behind it (no starvation of big requests), unless a
 * running sequence of lower priority can be preempted for it (FAIR).
 *
 * Blocks on demand (FAIR).  A decoding sequence whose next position starts a new block
 * takes one from outside every reservation; when there is none, the victim is the
 * running sequence of lowest priority, latest admitted (possibly itself).  A preempted
 * sequence publishes its full blocks (prompt and generated: their K/V is exact for
 * those tokens), drops every reference and goes back to the queue, in order.  When it is
 * admitted again it looks up its prompt plus the tokens it generated: what is still
 * cached is reused, the rest recomputed (positions only: nothing is sampled again, so
 * the tokens are those of an undisturbed run), and it goes on decoding.  A request
 * never fails because others grew.
 *
 * Prefill (FAIR).  Sequences take chunks in order of priority, then shortest remaining
 * prompt first, except that a sequence left without a chunk for aging_ms goes ahead of
 * every other of its priority (the earliest admitted first: among many overdue ones,
 * the longest left out would be a round robin that a flood of short prompts stretches
 * without bound): however many short prompts arrive, each prefill advances at least
 * once per aging_ms and step (no starvation).
 * The step's prefill is sized by time with the cost model of svc/stepcost.c, which
 * prices the step's one call as a whole (one fixed cost, every row alike): while
 * sequences decode, the step aims at step_target_ns including their rows; while none
 * does, at prefill_step_ns; a step that ends a prompt at no more than step_target_ns
 * (its first token should not wait for a long prefill step).  Every step gives its first
 * prefilling sequence at least one token, and a step of prefill alone at least a chunk
 * worth a forward call (its own work at least the call's fixed cost): prefill advances.
 *
 * Shared prefixes in flight.  Before admitting a request that hit h blocks, the engine
 * looks for a prefilling sequence that has the same extra keys and the same tokens for
 * block h (and maybe more) and has not published block h yet.  If one exists the request
 * waits, holding nothing, until that sequence has published the shared blocks (or ended),
 * then looks up again and finds them: the shared part is computed once.  Waiting is only
 * a scheduling decision; what a request may reuse is always decided by the exact index
 * lookup.
 *
 * Block table invariants of a sequence: table[0 .. n_indexed) are in the index (its hits,
 * then blocks it published, in order) and only read; positions >= n_past are not written
 * yet; the block holding position n_past is private to the sequence (the lookup never
 * covers the last known token, and only full blocks are shared).
 *
 * Threads: everything under "engine thread" below runs on the engine thread only, which
 * owns the pool, the index, the forward context and every struct seq once submitted.
 * The loop thread enters only through the public functions at the end of the file,
 * which touch the inbox (inbox_lock), the event ring (ev_lock), the stats snapshot
 * (stats_lock) and atomics.
 */
#include "svc/sched.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compute/forward.h"
#include "compute/gen.h"
#include "compute/model.h"
#include "compute/text/tokenizer.h"
#include "svc/leases.h"
#include "svc/log.h"
#include "svc/stepcost.h"
#include "svc/remoting.h"
#include "svc/routesum.h"
#include "svc/tiering.h"
#include "util/stats.h"
#include "util/time.h"

#define TTFT_RING 1024u
#define ITL_RING 4096u
#define STEP_RING 1024u

/* Calibration: a prefill of CAL_N tokens at context 0 and at CAL_CTX, decode steps. */
#define CAL_N 32u
#define CAL_CTX 128u
#define CAL_REPEAT 3

#define REMOTE_WAIT_MS 2 /* idle engine waiting for the remote tier: inbox latency bound */

/* Auto budgets, in units measured at start (docs/daemon.md "Scheduling"). */
#define AUTO_STEP_DECODES 2.5 /* step while decoding: this many decode steps of one, */
#define AUTO_STEP_CALLS 2.5   /* ... and at least this many fixed costs of a call */
#define AUTO_PREFILL_CALLS 10 /* prefill step alone: this many fixed costs of a call */

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

	/* prompt cache (svc/cachectl.h) */
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
	bool silent; /* connection gone: end without events */
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

	/* SEQ_LOADING, remote: table[r_from .. r_from + r_n) are fetched (svc/remoting.h) */
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

struct kvp_sched {
	struct kvp_sched_config cfg;
	uint32_t block_tokens;
	uint32_t n_blocks;
	uint32_t n_vocab;
	int32_t *eog; /* the end-of-generation ids, for the test_eog_after hook */
	size_t n_eog;
	bool fair;
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
	double step_target_ns;
	double prefill_step_ns;
	float *logits;		     /* max_running * n_vocab */
	float *fork_logits;	     /* n_vocab: the prompt's logits, kept for each continuation */
	uint32_t pin_max_blocks;     /* cache.pin_max in blocks */
	struct kvp_fwd_seq *batch;   /* max_running */
	struct seq **batch_seq;	     /* max_running */
	struct prefill_key *pkeys;   /* max_running: prefill order */
	struct kvp_fwd_part *parts;  /* max_running: FAIR's mixed step, decode rows first */
	struct seq **part_seq;	     /* max_running: the prefilling sequence of each chunk */
	struct kvp_sched_stats st;   /* engine's own copy, published to snap */
	double ttft_ring[TTFT_RING]; /* TTFT of the last TTFT_RING requests, ms */
	uint64_t ttft_n;	     /* samples ever taken; the next goes to % TTFT_RING */
	double itl_ring[ITL_RING];   /* the last inter-token gaps, ms */
	uint64_t itl_n;
	double step_ring[STEP_RING]; /* the last working steps, ms */
	uint64_t step_n;
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
	double snap_ttft[TTFT_RING];
	uint64_t snap_ttft_n;
	double snap_itl[ITL_RING];
	uint64_t snap_itl_n;
	double snap_step[STEP_RING];
	uint64_t snap_step_n;

	atomic_uint_fast64_t outstanding;
	atomic_bool draining;
};

static void list_add_tail(struct seq_list *l, struct seq *q)
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
static void list_add_after(struct seq_list *l, struct seq *after, struct seq *q)
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

static void list_del(struct seq_list *l, struct seq *q)
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

static struct seq_list *list_of(struct kvp_sched *s, struct seq *q)
{
	switch (q->state) {
	case SEQ_QUEUED:
		return &s->queue;
	case SEQ_WAITING:
		return &s->waiting;
	default:
		return &s->active;
	}
}

static void seq_free(struct seq *q)
{
	if (!q)
		return;
	if (q->grp && !q->grp->live)
		free(q->grp); /* the last of its group */
	kvp_sampler_free(q->sampler);
	free(q->disk);
	free(q->hist);
	free(q->table);
	free(q);
}

uint64_t kvp_sched_blocks_for(const struct kvp_sched *s, uint32_t n_prompt, uint32_t max_new)
{
	uint64_t positions = (uint64_t)n_prompt + max_new - 1;

	return (positions + s->block_tokens - 1) / s->block_tokens;
}

static uint32_t blocks_of(const struct kvp_sched *s, uint64_t positions)
{
	return (uint32_t)((positions + s->block_tokens - 1) / s->block_tokens);
}

static uint64_t now_ns(const struct kvp_sched *s)
{
	return s->cfg.hooks ? s->cfg.hooks->now_ns(s->cfg.hooks->ctx) : kvp_now_ns();
}

/* ---- engine thread: events ---- */

static void wake_loop(struct kvp_sched *s)
{
	uint64_t one = 1;

	/* an eventfd write only fails when the counter would overflow: then it is set */
	if (write(s->cfg.wake_fd, &one, sizeof(one)) < 0)
		return;
}

static void push_event(struct kvp_sched *s, const struct kvp_sched_event *e)
{
	pthread_mutex_lock(&s->ev_lock);
	while (s->ev_count == s->ev_cap && !s->loop_gone) {
		/* the loop may not know there is anything to take yet */
		wake_loop(s);
		pthread_cond_wait(&s->ev_space, &s->ev_lock);
	}
	if (!s->loop_gone) {
		s->ev[(s->ev_head + s->ev_count) % s->ev_cap] = *e;
		s->ev_count++;
		s->ev_pushed = true;
	} else {
		free(e->lease); /* nobody will take it */
	}
	pthread_mutex_unlock(&s->ev_lock);
}

/* Hand queued events to the loop now (not only at the end of the step). */
static void flush_events(struct kvp_sched *s)
{
	if (s->ev_pushed) {
		s->ev_pushed = false;
		wake_loop(s);
	}
}

static void emit_error(struct kvp_sched *s, struct seq *q, enum kvp_status status, const char *msg)
{
	struct kvp_sched_event e = { .type = KVP_SCHED_EV_ERROR,
				     .token = -1,
				     .status = status,
				     .conn = q->conn,
				     .req_id = q->req_id };
	size_t n = strlen(msg);

	if (q->silent)
		return;
	if (n > sizeof(e.text))
		n = sizeof(e.text);
	memcpy(e.text, msg, n);
	e.text_len = (uint32_t)n;
	push_event(s, &e);
}

/* TOKEN event(s) for kept @token: its text in slices that fit an event. */
static void emit_token(struct kvp_sched *s, struct seq *q, int32_t token)
{
	struct kvp_sched_event e = { .type = KVP_SCHED_EV_TOKEN,
				     .token = token,
				     .conn = q->conn,
				     .req_id = q->req_id,
				     .cont = q->grp ? (int32_t)q->cont : -1 };
	size_t off = 0;
	bool more;

	if (q->silent)
		return;
	do {
		e.text_len = (uint32_t)kvp_gen_text(&q->gen, token, &off, e.text, sizeof(e.text),
						    &more);
		push_event(s, &e);
		e.token = -1; /* the id goes with the first slice only */
	} while (more);
}

/* ---- engine thread: request end ---- */

static void fill_usage(struct kvp_sched *s, struct seq *q, uint32_t status, struct kvp_usage *u)
{
	uint64_t t = now_ns(s);

	memset(u, 0, sizeof(*u));
	/* a continuation forked from the first one shares its prompt: counted there */
	u->prompt_tokens = q->cont ? 0 : q->gen.n_prompt;
	u->cached_tokens = q->tok_cached;
	u->cache_creation_tokens = q->n_created * s->block_tokens;
	u->recomputed_tokens = q->tok_computed;
	u->generated_tokens = q->gen.n_generated;
	u->status = status;
	u->queue_ms = kvp_ns_to_ms((q->t_admit ? q->t_admit : t) - q->t_recv);
	u->ttft_ms = q->t_first ? kvp_ns_to_ms(q->t_first - q->t_recv) : 0;
	u->prefill_ms = kvp_ns_to_ms(q->prefill_ns);
	u->decode_ms = q->t_first ? kvp_ns_to_ms(q->t_last - q->t_first) : 0;
	u->preemptions = q->preemptions;
	u->resume_computed_tokens = q->tok_resume;
	u->cached_tokens_disk = q->tok_cached_disk;
	u->swapped_tokens = q->tok_swapped;
	u->cached_tokens_remote = q->tok_cached_remote;
}

static void fill_cache_usage(const struct seq *q, struct kvp_cache_usage *cu)
{
	*cu = (struct kvp_cache_usage){ .miss_reason = q->miss_reason,
					.miss_tier = q->miss_tier,
					.matched_blocks = q->matched,
					.evicted_tokens = q->evicted_toks,
					.ttl_s = q->no_cache ? 0 : q->cc.ttl_s,
					.n = q->cc.n,
					.blocks = q->cu_blocks };
}

/*
 * @q of a group ends with usage @u and @status: add them to the group's.  Return: true
 * when @q is the last (the group's DONE goes out now, with @u and @cu the group's).
 */
static bool group_end(struct seq *q, uint32_t status, struct kvp_usage *u,
		      struct kvp_cache_usage *cu)
{
	struct group *g = q->grp;
	struct kvp_usage *a = &g->u;

	if (!q->cont) {
		/* the prompt's figures are the first continuation's */
		a->prompt_tokens = u->prompt_tokens;
		a->cached_tokens = u->cached_tokens;
		a->recomputed_tokens = u->recomputed_tokens;
		a->cached_tokens_disk = u->cached_tokens_disk;
		a->cached_tokens_remote = u->cached_tokens_remote;
		a->queue_ms = u->queue_ms;
		a->ttft_ms = u->ttft_ms;
		a->prefill_ms = u->prefill_ms;
		fill_cache_usage(q, &g->cu);
	}
	a->cache_creation_tokens += u->cache_creation_tokens;
	a->generated_tokens += u->generated_tokens;
	a->preemptions += u->preemptions;
	a->swapped_tokens += u->swapped_tokens;
	a->resume_computed_tokens += u->resume_computed_tokens;
	if (u->decode_ms > a->decode_ms)
		a->decode_ms = u->decode_ms;
	if (status != KVP_OK && g->status == KVP_OK)
		g->status = status;
	if (--g->live)
		return false;
	*u = *a;
	u->status = g->status;
	*cu = g->cu;
	return true;
}

/* Drop @q's reference on every block of its table (hits included); the table is empty. */
static void unref_table(struct kvp_sched *s, struct seq *q)
{
	uint32_t i;

	for (i = 0; i < q->n_table; i++)
		kvp_pool_unref(s->cfg.pool, q->table[i]);
	q->n_table = 0;
}

/* ... and give back what it had reserved. */
static void release_blocks(struct kvp_sched *s, struct seq *q)
{
	unref_table(s, q);
	s->reserved_total -= q->reserved;
	q->reserved = 0;
}

/* Whoever waited for @q's prefix looks up again at the next step. */
static void forget_waiters(struct kvp_sched *s, struct seq *q)
{
	struct seq *w;

	for (w = s->waiting.first; w; w = w->next)
		if (w->wait_on == q)
			w->wait_on = NULL;
}

/*
 * End @q: DONE (admitted requests, and cancels) or ERROR (@as_error: never admitted or
 * failed), then release everything.  @q is freed.
 */
static void publish_upto(struct kvp_sched *s, struct seq *q, uint32_t upto);

static void seq_end(struct kvp_sched *s, struct seq *q, uint32_t status, bool as_error,
		    const char *msg)
{
	struct kvp_usage u, gu;
	struct kvp_cache_usage cu;
	bool last = true;

	/*
	 * its K/V is good up to n_past: a next turn continuing on these ids reuses it (not
	 * when the client is gone: no conversation goes on from a reply nobody read)
	 */
	if (!as_error && !q->silent && (status == KVP_OK || status == KVP_E_CANCELLED) &&
	    (q->state == SEQ_PREFILL || q->state == SEQ_DECODE))
		publish_upto(s, q, q->gen.n_past);
	fill_usage(s, q, status, &gu);
	fill_cache_usage(q, &cu);
	if (q->grp) {
		/* a continuation: the group answers once, when its last one ends */
		last = group_end(q, status, &gu, &cu);
		as_error = false;
	}
	if (!q->silent) {
		if (as_error) {
			emit_error(s, q, status, msg ? msg : "request failed");
		} else {
			struct kvp_sched_event e = { .type = KVP_SCHED_EV_TOKEN,
						     .token = -1,
						     .conn = q->conn,
						     .req_id = q->req_id,
						     .cont = q->grp ? (int32_t)q->cont : -1 };
			int n = kvp_gen_flush(&q->gen, e.text, sizeof(e.text));

			if (n > 0) {
				e.text_len = (uint32_t)n;
				push_event(s, &e);
			}
			/* a continuation that is not the last: its text is out, the DONE later */
			if (last) {
				e = (struct kvp_sched_event){ .type = KVP_SCHED_EV_DONE,
							      .token = -1,
							      .conn = q->conn,
							      .req_id = q->req_id,
							      .usage = gu,
							      .has_cu = q->has_cc,
							      .cu = cu };
				push_event(s, &e);
			}
		}
	}
	/* the usage sums cover every request that ended, finished or not */
	fill_usage(s, q, status, &u);
	s->st.prompt_tokens += u.prompt_tokens;
	s->st.cached_tokens += u.cached_tokens;
	s->st.cache_creation_tokens += u.cache_creation_tokens;
	s->st.recomputed_tokens += u.recomputed_tokens;
	s->st.generated_tokens += u.generated_tokens;
	s->st.queue_ms += u.queue_ms;
	s->st.ttft_ms += u.ttft_ms;
	s->st.prefill_ms += u.prefill_ms;
	s->st.decode_ms += u.decode_ms;
	s->st.cached_tokens_disk += u.cached_tokens_disk;
	s->st.swapped_tokens += u.swapped_tokens;
	s->st.cached_tokens_remote += u.cached_tokens_remote;
	s->st.resume_computed_tokens += u.resume_computed_tokens;
	s->st.preempt_usage += u.preemptions;
	if (!last)
		; /* the group's request ends with its last continuation */
	else if (status == KVP_OK)
		s->st.req_done++;
	else if (status == KVP_E_CANCELLED || status == KVP_E_SHUTDOWN || q->silent)
		s->st.req_cancelled++;
	else
		s->st.req_failed++;
	release_blocks(s, q);
	forget_waiters(s, q);
	list_del(list_of(s, q), q);
	seq_free(q);
	atomic_fetch_sub(&s->outstanding, 1);
}

/* ---- engine thread: blocks ---- */

/* Blocks that can be handed out now: free, and cached ones nobody holds or writes. */
static uint64_t pool_available(struct kvp_sched *s)
{
	struct kvp_pool_stats ps;
	uint64_t avail = 0, pinned;
	uint32_t a;

	kvp_pool_stats(s->cfg.pool, &ps);
	for (a = 0; a < ps.n_arenas; a++)
		avail += (uint64_t)ps.arena[a].free + ps.arena[a].cached;
	/* cache-pinned blocks nobody holds are cached but never handed out */
	avail -= ps.cpin_idle;
	pinned = (uint64_t)kvp_tiering_pinned_idle(s->tiering) +
		 kvp_remoting_pinned_idle(s->remoting);
	return avail > pinned ? avail - pinned : 0;
}

/* ... of which no reservation has a claim on. */
static uint64_t pool_unreserved(struct kvp_sched *s)
{
	uint64_t avail = pool_available(s);

	return avail > s->reserved_total ? avail - s->reserved_total : 0;
}

/*
 * One more block at the end of @q's table: from its reservation, else (FAIR) from what
 * no reservation claims.  Return: 0, or -ENOSPC when there is none (FAIR: preempt).
 */
static int take_block(struct kvp_sched *s, struct seq *q)
{
	uint32_t id;

	if (q->n_table >= q->cap_table)
		return -ENOSPC; /* cannot happen: blocks_for() bounds positions */
	if (!q->reserved && (!s->fair || !pool_unreserved(s)))
		return -ENOSPC;
	if (kvp_pool_alloc(s->cfg.pool, KVP_NODE_ANY, &id) < 0)
		return -ENOSPC; /* every cached block pinned or inside a TTL */
	q->table[q->n_table++] = id;
	if (q->reserved) {
		q->reserved--;
		s->reserved_total--;
	}
	return 0;
}

/* Make the table cover @n_positions positions. */
static int ensure_blocks(struct kvp_sched *s, struct seq *q, uint32_t n_positions)
{
	uint32_t want = blocks_of(s, n_positions);

	while (q->n_table < want) {
		int r = take_block(s, q);

		if (r < 0)
			return r;
	}
	return 0;
}

/* @q publishes or hits block @i (@b): its TTL and retention priority are @q's. */
static void keep_block(struct kvp_sched *s, const struct seq *q, uint32_t i, uint32_t b)
{
	kvp_pool_set_ttl(s->cfg.pool, b,
			 kvp_pool_now(s->cfg.pool) + kvp_cachectl_block_ttl_ns(&q->cc, i));
	kvp_pool_set_retain(s->cfg.pool, b, q->cc.retain);
}

/*
 * Publish every full block of @q below position @upto not published yet, in order, up
 * to its breakpoints (no-cache requests publish nothing); int4: every sealed block
 * (the residual window's are not final yet: they are recomputed after a preemption,
 * and the next turn of a conversation recomputes them).
 */
static void publish_upto(struct kvp_sched *s, struct seq *q, uint32_t upto)
{
	uint32_t bt = s->block_tokens;
	/* int4: a block is final (sealed) only once it is out of the residual window */
	uint32_t w = s->view.geom.shape.dtype == KVP_DTYPE_INT4 ? s->view.stage->window : 0;
	uint32_t filled = upto > w ? (upto - w) / bt : 0;

	if (q->no_cache)
		return;
	if (filled > q->n_table)
		filled = q->n_table;
	if (filled > q->cc.publish_blocks)
		filled = q->cc.publish_blocks;
	while (!q->publish_stopped && q->n_indexed < filled) {
		uint32_t i = q->n_indexed;
		uint32_t parent = i ? q->table[i - 1] : KVP_BLOCK_NONE;
		uint32_t out = KVP_BLOCK_NONE;
		int r;

		r = kvp_index_publish(s->cfg.index, &q->key, parent,
				      (const uint32_t *)q->hist + (size_t)i * bt, q->table[i],
				      &out);
		if (r == 0) {
			q->n_created++;
			/* prompt blocks as they fill, generated ones when the request ends */
			kvp_remoting_offer(s->remoting, q->table[i], KVP_REMOTE_WHY_CREATED);
		} else if (r == 1) {
			/* computed twice after all (e.g. a lookup raced a prefill): share theirs */
			kvp_pool_unref(s->cfg.pool, q->table[i]);
			q->table[i] = out;
		} else {
			q->publish_stopped = true; /* later blocks would have no parent */
			break;
		}
		keep_block(s, q, i, q->table[i]);
		q->n_indexed++;
	}
}

/* ---- engine thread: preemption (FAIR) ---- */

/* Queue order (see "Admission"): does @a go before @b? */
static bool queue_before(const struct kvp_sched *s, const struct seq *a, const struct seq *b)
{
	if (!s->fair)
		return a->arrival < b->arrival;
	if (a->priority != b->priority)
		return a->priority > b->priority;
	if (!a->admit_no != !b->admit_no)
		return a->admit_no != 0; /* resuming after a preemption goes first */
	if (a->admit_no)
		return a->admit_no < b->admit_no;
	return a->arrival < b->arrival;
}

static void queue_insert(struct kvp_sched *s, struct seq *q)
{
	struct seq *p = s->queue.last;

	q->state = SEQ_QUEUED;
	while (p && queue_before(s, q, p))
		p = p->prev;
	list_add_after(&s->queue, p, q);
}

/* The victim of a preemption among the running: lowest priority, then latest admitted. */
static bool victim_before(const struct seq *a, const struct seq *b)
{
	if (a->priority != b->priority)
		return a->priority < b->priority;
	return a->admit_no > b->admit_no;
}

/* The running sequence to preempt first, if its priority is below @below (else NULL). */
static struct seq *pick_victim(struct kvp_sched *s, int64_t below)
{
	struct seq *v = NULL;
	struct seq *a;

	for (a = s->active.first; a; a = a->next) {
		if (a->cancelled || a->priority >= below || a->state == SEQ_LOADING)
			continue; /* blocks being read into are the tier's until it answers */
		if (!v || victim_before(a, v))
			v = a;
	}
	return v;
}

/*
 * Preempt running @v: publish its full blocks, drop every reference and reservation,
 * queue it to resume (see "Blocks on demand").
 */
static void preempt(struct kvp_sched *s, struct seq *v)
{
	publish_upto(s, v, v->gen.n_past);
	/* with a disk tier, they go there too: back from disk rather than recomputed */
	if (!v->no_cache && kvp_tiering_save(s->tiering, v->table, v->n_indexed))
		s->st.preempt_swapped++;
	release_blocks(s, v);
	forget_waiters(s, v);
	list_del(&s->active, v);
	v->n_indexed = 0;
	v->publish_stopped = false;
	v->gen.n_past = 0;
	v->n_fill = v->gen.n_prompt + (v->gen.n_generated ? v->gen.n_generated - 1 : 0);
	v->preemptions++;
	s->st.preemptions++;
	queue_insert(s, v);
}

/* ---- engine thread: admission ---- */

/*
 * Is block @h of @q's tokens (and maybe more) being computed right now by a prefilling
 * sequence?  Then *@owner is it and *@until the number of leading blocks @q shares with
 * it that @q could hit.
 */
static bool prefix_in_flight(struct kvp_sched *s, const struct seq *q, uint32_t h,
			     struct seq **owner, uint32_t *until)
{
	uint32_t bt = s->block_tokens;
	uint32_t n_known = q->gen.n_prompt + q->gen.n_generated;
	uint32_t q_max = (n_known - 1) / bt; /* most blocks a lookup can give @q */
	struct seq *a;

	if (h >= q_max)
		return false;
	for (a = s->active.first; a; a = a->next) {
		uint32_t a_full = a->n_fill / bt;
		uint32_t limit;
		uint32_t p;

		if (a_full > a->cc.publish_blocks)
			a_full = a->cc.publish_blocks; /* it publishes no further */
		if (a->state != SEQ_PREFILL || a->no_cache || a->publish_stopped ||
		    a->n_indexed > h || a_full <= h)
			continue;
		if (memcmp(&a->key.ek, &q->key.ek, sizeof(a->key.ek)))
			continue;
		limit = (a_full < q_max ? a_full : q_max) * bt;
		for (p = 0; p < limit && a->hist[p] == q->hist[p]; p++)
			;
		if (p / bt > h) {
			*owner = a;
			*until = p / bt;
			return true;
		}
	}
	return false;
}

/* Blocks @q reserves at admission with @n_hit blocks hit (see "Admission"). */
static uint32_t reservation(const struct kvp_sched *s, const struct seq *q, uint32_t n_hit)
{
	uint32_t want = q->cap_table;

	if (s->fair) {
		/* its prefill, and the block of its first decode step */
		uint32_t upto = blocks_of(s, (uint64_t)q->n_fill + 1);

		if (upto < want)
			want = upto;
	}
	return want > n_hit ? want - n_hit : 0;
}

/* ---- engine thread: reloads from the disk tier ---- */

/*
 * On-disk entries continuing @q's @n_hit memory hits (kvp_index_lookup_disk()): how many
 * blocks it can read back instead of computing.  0 without a usable tier.
 */
static uint32_t disk_lookup(struct kvp_sched *s, struct seq *q, uint32_t n_hit)
{
	int n;

	if (q->no_cache || !kvp_tiering_usable(s->tiering) || n_hit >= q->cap_table)
		return 0;
	if (!q->disk) {
		q->disk = malloc(q->cap_table * (sizeof(*q->disk) + sizeof(*q->load_res)));
		if (!q->disk)
			return 0; /* computed instead */
		q->load_res = (int8_t *)(q->disk + q->cap_table);
	}
	n = kvp_index_lookup_disk(s->cfg.index, &q->key, (const uint32_t *)q->hist,
				  q->gen.n_prompt + q->gen.n_generated, n_hit,
				  n_hit ? q->table[n_hit - 1] : KVP_BLOCK_NONE, q->disk,
				  q->cap_table - n_hit);
	return n > 0 ? (uint32_t)n : 0;
}

/* Queue the reads of loading @q that the tier takes now. */
static void issue_reads(struct kvp_sched *s, struct seq *q)
{
	while (q->n_issued < q->n_load && !q->load_failed && !q->cancelled) {
		uint32_t i = q->n_issued;
		int r = kvp_tiering_read(s->tiering, &q->disk[i], q->table[q->load_from + i],
					 (uint64_t)(uintptr_t)q);

		if (r == -EBUSY)
			return; /* the queue is full: more at the next step */
		if (r < 0) {
			q->load_failed = true; /* slot gone or tier off: computed instead */
			return;
		}
		q->load_res[i] = 1;
		q->n_issued++;
		q->n_inflight++;
	}
}

/*
 * Admitted @q reads its next @n blocks from disk: blocks from its reservation, taken now
 * and held, unpublished, until the reads come back (see kvp_tiering_read()).
 */
static void start_load(struct kvp_sched *s, struct seq *q, uint32_t n)
{
	uint32_t from = q->n_table;

	for (uint32_t i = 0; i < n; i++)
		if (take_block(s, q) < 0) {
			n = i; /* cannot happen: the reservation covers them */
			break;
		}
	if (!n)
		return;
	q->state = SEQ_LOADING;
	q->load_from = from;
	q->n_load = n;
	q->n_issued = q->n_inflight = 0;
	q->load_failed = false;
	issue_reads(s, q);
}

/* kvp_tiering_read_fn: a read of loading sequence @cookie finished. */
static void read_done(void *ctx, uint64_t cookie, uint32_t block, int result)
{
	struct seq *q = (struct seq *)(uintptr_t)cookie;

	(void)ctx;
	for (uint32_t i = 0; i < q->n_issued; i++) {
		if (q->table[q->load_from + i] != block)
			continue;
		q->load_res[i] = result ? -1 : 0;
		q->load_failed |= result != 0;
		break;
	}
	q->n_inflight--;
}

/*
 * Every read of @q has come back: publish the leading sound blocks in order (each gives
 * its on-disk entry a memory block again); from the first failure on, the positions are
 * computed (those blocks are private and get overwritten).
 */
/* ---- engine thread: fetches from the remote tier ---- */

/*
 * The remote tier's fetch of @q came back: publish its leading checked blocks in order,
 * after the memory and disk prefix (which must reach r_from: a disk read that failed
 * before leaves them unusable, their parent missing); from the first block not checked
 * on, the positions are computed (those blocks are private and get overwritten).
 */
static void finish_remote(struct kvp_sched *s, struct seq *q)
{
	uint32_t bt = s->block_tokens;
	uint32_t ok = 0;

	for (uint32_t i = 0; q->n_indexed == q->r_from && i < q->r_ok; i++) {
		uint32_t b = q->r_from + i;
		uint32_t out = KVP_BLOCK_NONE;
		int r = kvp_index_publish(s->cfg.index, &q->key,
					  b ? q->table[b - 1] : KVP_BLOCK_NONE,
					  (const uint32_t *)q->hist + (size_t)b * bt, q->table[b],
					  &out);

		if (r == 0) {
			kvp_remoting_mark(s->remoting, q->table[b]); /* from the store: not back */
		} else if (r == 1) {
			kvp_pool_unref(s->cfg.pool, q->table[b]);
			q->table[b] = out;
		} else {
			break;
		}
		keep_block(s, q, b, q->table[b]);
		ok++;
	}
	q->n_indexed += ok;
	q->gen.n_past = q->n_indexed * bt;
	if (q->resumed)
		q->tok_swapped += ok * bt;
	else
		q->tok_cached_remote += ok * bt;
	kvp_remoting_loaded(s->remoting, ok);
	q->r_n = 0;
}

/* kvp_remoting_fetch_fn: the fetch of loading sequence @cookie finished. */
static void fetch_done(void *ctx, uint64_t cookie, uint32_t n_ok, uint32_t stop)
{
	struct seq *q = (struct seq *)(uintptr_t)cookie;

	(void)ctx;
	(void)stop;
	q->r_ok = n_ok < q->r_n ? n_ok : q->r_n;
	q->r_pending = false;
}

/* Give back the last @n blocks of @q's table, taken from its reservation. */
static void give_back(struct kvp_sched *s, struct seq *q, uint32_t n)
{
	while (n--) {
		kvp_pool_unref(s->cfg.pool, q->table[--q->n_table]);
		q->reserved++;
		s->reserved_total++;
	}
}

/*
 * Admitted @q continues its local prefix (memory hits, then disk) from the remote tier:
 * the full blocks after the first @from (never the one holding the last known token,
 * at most max_fetch_blocks) are asked for, into blocks from its reservation held,
 * unpublished, until the completion; meanwhile @q is parked (SEQ_LOADING) and every
 * other request runs.  The tier refusing (breaker open, queue full) costs nothing: the
 * positions are computed.
 */
static void start_remote(struct kvp_sched *s, struct seq *q, uint32_t from)
{
	uint32_t bt = s->block_tokens;
	uint32_t full = (q->gen.n_prompt + q->gen.n_generated - 1) / bt;
	uint32_t n, got = 0;
	struct kvp_h128 parent = q->key.seed;
	double ns, tps;

	if (q->no_cache || from >= full || q->n_table != from || !kvp_remoting_usable(s->remoting))
		return;
	n = full - from;
	if (n > kvp_remoting_max_fetch(s->remoting))
		n = kvp_remoting_max_fetch(s->remoting);
	while (got < n && take_block(s, q) == 0)
		got++;
	if (!got)
		return;
	/* the chain hash is unseeded: the same here as on the host that published */
	for (uint32_t b = 0; b < from; b++)
		parent = kvp_chain_hash(parent, (const uint32_t *)q->hist + (size_t)b * bt, bt);
	ns = kvp_stepcost_prefill_ns(&s->cost, got * bt, from * bt);
	tps = ns > 0 ? (double)got * bt * 1e9 / ns : 0;
	if (kvp_remoting_fetch(s->remoting, &q->key, parent,
			       (const uint32_t *)q->hist + (size_t)from * bt, q->table + from, got,
			       tps, (uint64_t)(uintptr_t)q) < 0) {
		give_back(s, q, got);
		return;
	}
	q->r_from = from;
	q->r_n = got;
	q->r_ok = 0;
	q->r_pending = true;
	q->state = SEQ_LOADING;
}

static void finish_load(struct kvp_sched *s, struct seq *q)
{
	uint32_t bt = s->block_tokens;
	uint32_t i, ok = 0;

	for (i = 0; q->n_load && i < q->n_issued && q->load_res[i] == 0; i++) {
		uint32_t b = q->load_from + i;
		uint32_t parent = b ? q->table[b - 1] : KVP_BLOCK_NONE;
		uint32_t out = KVP_BLOCK_NONE;
		int r = kvp_index_publish(s->cfg.index, &q->key, parent,
					  (const uint32_t *)q->hist + (size_t)b * bt, q->table[b],
					  &out);

		if (r == 1) {
			/* brought back (or computed) by another request meanwhile: share it */
			kvp_pool_unref(s->cfg.pool, q->table[b]);
			q->table[b] = out;
		} else if (r < 0) {
			break;
		}
		keep_block(s, q, b, q->table[b]);
		ok++;
	}
	if (q->n_load) {
		if (ok < q->n_issued || q->load_failed) {
			/* counted as matched at admission; the tier could not give them back */
			if (!q->resumed && q->miss_reason != KVP_MISS_IO_ERROR) {
				s->st.cache.miss[q->miss_reason]--;
				s->st.cache.miss[KVP_MISS_IO_ERROR]++;
				q->miss_reason = KVP_MISS_IO_ERROR;
				q->matched -= q->n_load - ok;
			}
		}
		q->n_indexed = q->load_from + ok;
		q->gen.n_past = q->n_indexed * bt;
		if (q->resumed)
			q->tok_swapped += ok * bt;
		else
			q->tok_cached_disk += ok * bt;
	}
	if (q->r_n)
		finish_remote(s, q);
	q->n_load = 0;
	q->state = SEQ_PREFILL;
	q->t_served = now_ns(s);
}

/* Reap the tiers, feed loading sequences, and flush when asked. */
static void tier_step(struct kvp_sched *s)
{
	if (!s->tiering && !s->remoting)
		return;
	kvp_remoting_poll(s->remoting);
	if (s->routesum)
		(void)kvp_routesum_step(s->routesum, now_ns(s)); /* when due; retried itself */
	kvp_tiering_poll(s->tiering, false);
	if (s->flush_tier && s->tiering) {
		s->flush_tier = false;
		kvp_tiering_flush(s->tiering); /* waits for what is in flight, then empties */
	}
	for (struct seq *q = s->active.first; q; q = q->next) {
		if (q->state != SEQ_LOADING)
			continue;
		if (q->n_load)
			issue_reads(s, q);
		if (q->r_pending)
			continue; /* the store has its blocks until the fetch completes */
		if (!q->n_load || (!q->n_inflight &&
				   (q->n_issued == q->n_load || q->load_failed || q->cancelled)))
			finish_load(s, q);
	}
}

/*
 * @q was admitted for the first time with @n blocks hit in memory and @n_disk on disk:
 * why it missed what it missed (svc/cachectl.h), counted once per request.
 */
static void admitted_first(struct kvp_sched *s, struct seq *q, uint32_t n, uint32_t n_disk)
{
	struct kvp_h128 h;

	q->matched = n + n_disk;
	if (q->miss_reason == KVP_MISS_NONE && !q->no_cache)
		q->miss_reason = kvp_cachectl_miss(s->cfg.index, &q->key, (const uint32_t *)q->hist,
						   q->gen.n_prompt, s->block_tokens, q->matched,
						   &q->miss_tier, &q->evicted_toks);
	kvp_cache_stats_miss(&s->st.cache, q->miss_reason, q->miss_tier, q->evicted_toks);
	if (n && kvp_index_block_hash(s->cfg.index, q->table[n - 1], &h) == 0)
		kvp_cache_stats_hit(&s->st.cache, h, n * s->block_tokens);
}

/*
 * Try to admit the queue's head @q.  Return: true when it left the queue (admitted, or
 * waiting for a prefix in flight); false when it does not fit now.
 */
static bool try_admit(struct kvp_sched *s, struct seq *q)
{
	struct seq *owner = NULL;
	uint32_t until = 0, n_disk;
	uint64_t need, room;
	int n = 0;

	/* n continuations run at once: room for all of them in the batch */
	if (!q->grp && q->cc.n > 1 && s->active.n + q->cc.n > s->cfg.max_running)
		return false;
	if (!q->no_cache) {
		n = kvp_index_lookup(s->cfg.index, &q->key, (const uint32_t *)q->hist,
				     q->gen.n_prompt + q->gen.n_generated, q->table, q->cap_table);
		if (n < 0)
			n = 0; /* a failed lookup is a miss */
		q->n_table = (uint32_t)n;
		if (prefix_in_flight(s, q, (uint32_t)n, &owner, &until)) {
			unref_table(s, q);
			list_del(&s->queue, q);
			q->state = SEQ_WAITING;
			q->wait_on = owner;
			q->wait_blocks = until;
			list_add_tail(&s->waiting, q);
			s->st.prefix_waits++;
			return true;
		}
	}
	n_disk = disk_lookup(s, q, (uint32_t)n);
	need = reservation(s, q, (uint32_t)n);
	room = pool_unreserved(s);
	if (s->fair && s->active.n) /* next to running sequences, leave them room to grow */
		room = room > s->headroom ? room - s->headroom : 0;
	if (need > room) {
		unref_table(s, q);
		return false;
	}
	list_del(&s->queue, q);
	q->n_indexed = (uint32_t)n;
	q->gen.n_past = (uint32_t)n * s->block_tokens;
	q->reserved = (uint32_t)need;
	s->reserved_total += need;
	q->t_served = now_ns(s);
	q->state = SEQ_PREFILL;
	list_add_tail(&s->active, q);
	if (n_disk)
		start_load(s, q, n_disk);
	/* what memory and disk do not have, the store may: fetched meanwhile */
	start_remote(s, q, q->n_table);
	/* hit a second time: the selective mode publishes such blocks */
	for (int i = 0; i < n; i++)
		kvp_remoting_offer(s->remoting, q->table[i], KVP_REMOTE_WHY_REUSED);
	if (q->admit_no) {
		q->resumed = true;
		return true;
	}
	q->admit_no = ++s->admissions;
	q->t_admit = q->t_served;
	q->tok_cached = q->gen.n_past;
	for (int i = 0; i < n; i++)
		keep_block(s, q, (uint32_t)i, q->table[i]); /* a hit refreshes the TTL */
	admitted_first(s, q, (uint32_t)n, n_disk);
	if (!q->no_cache) {
		s->st.lookups++;
		s->st.lookup_tokens += q->gen.n_prompt;
		s->st.hit_tokens += q->gen.n_past;
		if (n > 0)
			s->st.hit_requests++;
	}
	return true;
}

/* Blocks (held or reserved) of running sequences of priority below @below. */
static uint64_t held_below(const struct kvp_sched *s, int32_t below)
{
	uint64_t n = 0;

	for (const struct seq *a = s->active.first; a; a = a->next)
		if (a->priority < below)
			n += (uint64_t)a->n_table + a->reserved;
	return n;
}

/*
 * Nothing runs that could give blocks back, and no tier write is about to: what the pool
 * cannot hand out now (cache-pinned, leased, inside a TTL) waiting for the engine will
 * not bring, so a request that does not fit is refused rather than left waiting.
 */
static bool nothing_to_free(struct kvp_sched *s)
{
	return !s->active.n && !kvp_tiering_pinned_idle(s->tiering) &&
	       !kvp_remoting_pinned_idle(s->remoting);
}

static void admit(struct kvp_sched *s)
{
	struct seq *q;

	while ((q = s->queue.first)) {
		struct seq *v;

		if (s->active.n < s->cfg.max_running && try_admit(s, q))
			continue;
		if (nothing_to_free(s)) {
			seq_end(s, q, KVP_E_NOSPACE, true,
				"pool: not enough blocks can be had for the request (the rest "
				"are cache-pinned, leased or inside a TTL)");
			continue;
		}
		/*
		 * The head does not fit (batch or blocks): FAIR makes room from lower
		 * priorities when what they hold could be enough, else it waits.
		 */
		if (!s->fair)
			return;
		if (pool_unreserved(s) + held_below(s, q->priority) < reservation(s, q, 0))
			return; /* (a batch slot alone would not let it in either) */
		v = pick_victim(s, q->priority);
		if (!v)
			return;
		preempt(s, v);
	}
}

/* Requests whose prefix owner published what they wait for (or ended) go back. */
static void wake_waiters(struct kvp_sched *s)
{
	struct seq *w = s->waiting.first;

	while (w) {
		struct seq *next = w->next;
		struct seq *o = w->wait_on;

		if (w->cancelled || !o || o->n_indexed >= w->wait_blocks ||
		    o->state != SEQ_PREFILL || o->publish_stopped) {
			list_del(&s->waiting, w);
			w->wait_on = NULL;
			queue_insert(s, w); /* by arrival: ahead of what came after it */
		}
		w = next;
	}
}

/* ---- engine thread: compute ---- */

static int fwd_prefill_at(struct kvp_sched *s, const uint32_t *table, uint32_t n_table,
			  uint32_t n_past, const int32_t *tokens, uint32_t n)
{
	if (s->cfg.hooks)
		return s->cfg.hooks->prefill(s->cfg.hooks->ctx, &s->view, table, n_table, n_past,
					     tokens, n, s->logits);
	return kvp_fwd_prefill(s->fwd, &s->view, table, n_table, n_past, tokens, n, s->logits, 0);
}

static int fwd_prefill(struct kvp_sched *s, struct seq *q, uint32_t n)
{
	return fwd_prefill_at(s, q->table, q->n_table, q->gen.n_past, q->hist + q->gen.n_past, n);
}

static int fwd_decode(struct kvp_sched *s, uint32_t n)
{
	if (s->cfg.hooks)
		return s->cfg.hooks->decode(s->cfg.hooks->ctx, &s->view, s->batch, n, s->logits);
	return kvp_fwd_decode(s->fwd, &s->view, s->batch, n, s->logits);
}

/*
 * @q sampled @token: emit it, end the request when it should stop.  EOS ends the
 * request without being sent or counted, as kvpool-run does offline (compute/gen.c).
 */
static void took_token(struct kvp_sched *s, struct seq *q, int32_t token)
{
	uint64_t t = now_ns(s);
	enum kvp_gen_next next;

	if (!q->t_first) {
		q->t_first = t;
		s->ttft_ring[s->ttft_n++ % TTFT_RING] = kvp_ns_to_ms(t - q->t_recv);
	}
	next = kvp_gen_take(&q->gen, token);
	if (next != KVP_GEN_EOS) {
		if (q->gen.n_generated > 1) {
			double gap = kvp_ns_to_ms(t - q->t_last);
			uint32_t b = 0;

			while (b < KVP_SCHED_ITL_BUCKETS - 1 && gap > kvp_sched_itl_bound_ms(b))
				b++;
			for (; b < KVP_SCHED_ITL_BUCKETS; b++)
				s->st.itl_le[b]++;
			s->st.itl_count++;
			s->st.itl_sum_ms += gap;
			s->itl_ring[s->itl_n++ % ITL_RING] = gap;
		}
		q->t_last = t;
		q->hist[q->gen.n_prompt + q->gen.n_generated - 1] = token;
		emit_token(s, q, token);
	}
	if (next != KVP_GEN_CONTINUE)
		seq_end(s, q, KVP_OK, false, NULL);
}

/*
 * Sample @q's next token from @logits.  The test_eog_after hook (tests only) raises
 * every end-of-generation id once @q has kept that many tokens, so a model with
 * synthetic weights ends its turns like a trained one.
 */
static int32_t sample(struct kvp_sched *s, struct seq *q, float *logits)
{
	if (s->cfg.test_eog_after && q->gen.n_generated >= s->cfg.test_eog_after)
		for (size_t i = 0; i < s->n_eog; i++)
			logits[s->eog[i]] += 1e4f;
	return kvp_sampler_sample(q->sampler, logits);
}

/*
 * PIN: the prompt is computed and its full blocks published; pin them all, within
 * cache.pin_max.  Ends @q.
 */
static void pin_finish(struct kvp_sched *s, struct seq *q)
{
	uint32_t want = q->gen.n_prompt / s->block_tokens, fresh = 0;
	struct kvp_pool_stats ps;

	if (!want || q->n_indexed < want) {
		s->st.cache.pin_refused++;
		seq_end(s, q, want ? KVP_E_INTERNAL : KVP_E_INVALID, true,
			want ? "pin: the prompt's blocks could not be published" :
			       "pin: the prompt has no full block");
		return;
	}
	kvp_pool_stats(s->cfg.pool, &ps);
	for (uint32_t i = 0; i < want; i++)
		fresh += !kvp_pool_block(s->cfg.pool, q->table[i])->cpin;
	if ((uint64_t)ps.cpin_blocks + fresh > s->pin_max_blocks) {
		s->st.cache.pin_refused++;
		seq_end(s, q, KVP_E_LIMIT, true, "pin: cache.pin_max would be exceeded");
		return;
	}
	for (uint32_t i = 0; i < want; i++)
		kvp_pool_cache_pin(s->cfg.pool, q->table[i]);
	q->cu_blocks = want;
	s->st.cache.pins++;
	seq_end(s, q, KVP_OK, false, NULL);
}

/*
 * Parallel sampling: @q's prompt is computed and its logits are in fork_logits.  Make
 * continuations 1 .. n-1 of it: each holds a reference to every block of @q's table (the
 * partly filled last one is copied when first written, see writable_tail()), has its own
 * history and a sampler seeded seed + i, and samples its first token from the same
 * logits.  Return: 0, or -ENOMEM (the request then has fewer continuations: the group's
 * n says how many ran).
 */
static int fork_seq(struct kvp_sched *s, struct seq *q, uint32_t i)
{
	struct kvp_sample_params sp = q->sp;
	uint32_t total = q->gen.n_prompt + q->gen.max_new;
	struct seq *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->table = calloc(q->cap_table, sizeof(uint32_t));
	c->hist = malloc((size_t)total * sizeof(int32_t));
	sp.seed += i;
	if (!c->table || !c->hist || kvp_sampler_new(&c->sampler, s->n_vocab, &sp) < 0) {
		free(c->table);
		free(c->hist);
		free(c);
		return -ENOMEM;
	}
	memcpy(c->hist, q->hist, (size_t)q->gen.n_prompt * sizeof(int32_t));
	for (uint32_t k = 0; k < q->n_table; k++) {
		kvp_pool_ref(s->cfg.pool, q->table[k]); /* held by @q: cannot fail */
		c->table[k] = q->table[k];
	}
	c->n_table = q->n_table;
	c->cap_table = q->cap_table;
	c->n_indexed = q->n_indexed;
	c->publish_stopped = q->publish_stopped;
	c->n_fill = q->n_fill;
	kvp_gen_init(&c->gen, s->cfg.tok, c->hist, q->gen.n_prompt, q->gen.max_new,
		     q->gen.stop_eog);
	c->gen.n_past = q->gen.n_past;
	c->state = SEQ_DECODE;
	c->conn = q->conn;
	c->req_id = q->req_id;
	c->priority = q->priority;
	c->no_cache = q->no_cache;
	c->key = q->key;
	c->sp = sp;
	c->cc = q->cc;
	c->has_cc = q->has_cc;
	c->grp = q->grp;
	c->cont = i;
	c->arrival = q->arrival;
	c->admit_no = ++s->admissions;
	c->t_recv = q->t_recv;
	c->t_admit = q->t_admit;
	c->t_served = q->t_served;
	list_add_tail(&s->active, c);
	atomic_fetch_add(&s->outstanding, 1);
	q->grp->live++;
	s->st.cache.continuations++;
	/* its own sampler over the same logits: the copy, since sampling may change them */
	memcpy(s->fork_logits + s->n_vocab, s->fork_logits, (size_t)s->n_vocab * sizeof(float));
	took_token(s, c, sample(s, c, s->fork_logits + s->n_vocab));
	return 0;
}

/*
 * The positions before decoding are computed: sample the first token from @logits (its
 * last position's; NULL when no position was computed), or go on.
 */
static void prefill_done(struct kvp_sched *s, struct seq *q, float *logits)
{
	if (q->pin_op) {
		pin_finish(s, q);
		return;
	}
	q->state = SEQ_DECODE;
	if (!q->gen.n_generated) {
		assert(logits);
		if (q->cc.n > 1 && !q->grp) {
			q->grp = calloc(1, sizeof(*q->grp));
			if (q->grp) {
				q->grp->n = q->cc.n;
				q->grp->live = 1;
				s->st.cache.parallel++;
				s->st.cache.continuations++;
				memcpy(s->fork_logits, logits, (size_t)s->n_vocab * sizeof(float));
				for (uint32_t i = 1; i < q->cc.n; i++)
					if (fork_seq(s, q, i) < 0)
						break;
			}
		}
		took_token(s, q, sample(s, q, logits));
	}
}

/*
 * @q's next @n positions were computed in @dt ns, the last one's logits in @logits:
 * count them, publish the blocks they filled, and sample the first token when the
 * prompt is done.
 */
static void prefill_advanced(struct kvp_sched *s, struct seq *q, uint32_t n, uint64_t dt,
			     float *logits)
{
	q->prefill_ns += dt;
	if (q->resumed)
		q->tok_resume += n;
	else
		q->tok_computed += n;
	q->gen.n_past += n;
	q->t_served = now_ns(s);
	publish_upto(s, q, q->gen.n_past);
	if (q->gen.n_past == q->n_fill) {
		prefill_done(s, q, logits);
		flush_events(s); /* a first token leaves now, not after the step */
	}
}

/*
 * Compute the next @n positions of @q.  Return: 0; -ENOSPC when its reservation cannot
 * give a block (a bug: it ends the request); -errno of the forward pass.
 */
static int prefill_chunk(struct kvp_sched *s, struct seq *q, uint32_t n)
{
	uint64_t t0, dt;
	int r;

	r = ensure_blocks(s, q, q->gen.n_past + n);
	if (r < 0) {
		seq_end(s, q, KVP_E_NOSPACE, true, "pool: no block for the prompt");
		return r;
	}
	t0 = now_ns(s);
	r = fwd_prefill(s, q, n);
	dt = now_ns(s) - t0;
	if (r < 0) {
		q->prefill_ns += dt;
		seq_end(s, q, KVP_E_INTERNAL, true, "engine: prefill failed");
		return r;
	}
	kvp_stepcost_observe_prefill(&s->cost, n, q->gen.n_past, (double)dt);
	prefill_advanced(s, q, n, dt, s->logits);
	return 0;
}

/* FIFO: up to prefill_chunk tokens, in admission order. */
static bool prefill_fifo(struct kvp_sched *s)
{
	uint32_t budget = s->cfg.prefill_chunk;
	struct seq *q = s->active.first;
	bool worked = false;

	while (q && budget) {
		struct seq *next = q->next;
		uint32_t n;

		if (q->state == SEQ_PREFILL) {
			n = q->n_fill - q->gen.n_past;
			if (n > budget)
				n = budget;
			worked = true;
			if (prefill_chunk(s, q, n) == 0)
				budget -= n;
		}
		q = next;
	}
	return worked;
}

static int prefill_cmp(const void *a, const void *b)
{
	const struct prefill_key *x = a, *y = b;

	if (x->q->priority != y->q->priority)
		return x->q->priority > y->q->priority ? -1 : 1;
	if (x->overdue != y->overdue)
		return x->overdue ? -1 : 1;
	if (!x->overdue && x->left != y->left)
		return x->left < y->left ? -1 : 1;
	return x->q->admit_no < y->q->admit_no ? -1 : x->q->admit_no > y->q->admit_no;
}

/*
 * The block decode writes @q's next position into must be @q's alone: after a fork the
 * partly filled last block of the prompt is shared, and the first continuation to write
 * into it gets a copy (copy on write; the last one keeps the original).  The copy is a
 * block like one take_block() gives.  Return: 0, or -ENOSPC (as ensure_blocks()).
 */
static int writable_tail(struct kvp_sched *s, struct seq *q)
{
	uint32_t i = q->gen.n_past / s->block_tokens, copy;
	const struct kvp_block *b;

	if (i >= q->n_table)
		return 0;
	b = kvp_pool_block(s->cfg.pool, q->table[i]);
	if (b->refcount == 1 && !b->cached)
		return 0;
	if (!q->reserved && (!s->fair || !pool_unreserved(s)))
		return -ENOSPC;
	if (kvp_pool_cow(s->cfg.pool, q->table[i], KVP_NODE_ANY, &copy) < 0)
		return -ENOSPC;
	q->table[i] = copy;
	if (q->reserved) {
		q->reserved--;
		s->reserved_total--;
	}
	return 0;
}

/*
 * The decode batch of this step: every sequence that is generating (up to max_running),
 * each given the block of its next position first (a preemption may take any running
 * sequence, batched or not).  Fills s->batch and s->batch_seq.  Return: its size.
 */
static uint32_t decode_prepare(struct kvp_sched *s)
{
	struct seq *q;
	uint32_t n = 0, m = 0;
	int r;

	for (q = s->active.first; q && m < s->cfg.max_running; q = q->next)
		if (q->state == SEQ_DECODE)
			s->batch_seq[m++] = q;
	for (uint32_t i = 0; i < m; i++) {
		q = s->batch_seq[i];
		if (q->state != SEQ_DECODE)
			continue; /* preempted for an earlier one */
		while ((r = ensure_blocks(s, q, q->gen.n_past + 1)) < 0 ||
		       (r = writable_tail(s, q)) < 0) {
			struct seq *v;

			/* blocks of an earlier victim still being written: this step needs them */
			if (kvp_tiering_pinned_idle(s->tiering)) {
				kvp_tiering_poll(s->tiering, true);
				continue;
			}
			v = s->fair ? pick_victim(s, INT64_MAX) : NULL;
			/* alone, it would only come back to the same shortage */
			if (!v || (v == q && s->active.n == 1)) {
				q->cancelled = true; /* ended by reap at the next step */
				q->cancel_status = KVP_E_NOSPACE;
				break;
			}
			preempt(s, v);
			if (v == q)
				break;
		}
	}
	for (uint32_t i = 0; i < m; i++) {
		q = s->batch_seq[i];
		if (q->state != SEQ_DECODE || q->cancelled)
			continue;
		s->batch[n] = kvp_gen_decode_seq(&q->gen, q->table, q->n_table);
		s->batch_seq[n++] = q;
	}
	return n;
}

/* The decode batch's forward call returned @r, logits of sequence i at row i: sample. */
static void decode_finish(struct kvp_sched *s, uint32_t n, int r)
{
	for (uint32_t i = 0; i < n; i++) {
		struct seq *q = s->batch_seq[i];

		if (r < 0) {
			seq_end(s, q, KVP_E_INTERNAL, true, "engine: decode failed");
			continue;
		}
		kvp_gen_decoded(&q->gen);
		took_token(s, q, sample(s, q, s->logits + (size_t)i * s->n_vocab));
	}
}

/* FIFO: one batched decode call over every generating sequence. */
static bool decode_step(struct kvp_sched *s)
{
	uint32_t n = decode_prepare(s);
	uint64_t t0;
	int r;

	if (!n)
		return false;
	t0 = now_ns(s);
	r = fwd_decode(s, n);
	kvp_stepcost_observe_decode(&s->cost, n, (double)(now_ns(s) - t0));
	decode_finish(s, n, r);
	return true;
}

/*
 * FAIR: after the @nd decode rows already in the step (*@rows rows, *@attn positions of
 * attention so far), choose the prefill chunks, by priority and shortest remaining
 * (aged), sized so the step fits its time budget; give each its blocks and add it to
 * s->parts after the decode rows (s->part_seq[i] its sequence).  Return: chunks planned.
 */
static uint32_t plan_prefill(struct kvp_sched *s, uint32_t nd, double *rows, double *attn)
{
	struct prefill_key *keys = s->pkeys;
	uint32_t n_keys = 0, n_plan = 0;
	uint32_t tokens_left = s->cfg.prefill_chunk;
	uint64_t t = now_ns(s);
	uint64_t aging_ns = (uint64_t)s->cfg.aging_ms * 1000000;
	double limit;

	for (struct seq *q = s->active.first; q && n_keys < s->cfg.max_running; q = q->next)
		if (q->state == SEQ_PREFILL)
			keys[n_keys++] = (struct prefill_key){
				.q = q,
				.left = q->n_fill - q->gen.n_past,
				.overdue = t - q->t_served > aging_ns,
			};
	if (!n_keys)
		return 0;
	qsort(keys, n_keys, sizeof(keys[0]), prefill_cmp);
	if (nd) {
		/*
		 * the whole step, decode rows included, aims at the target; and prefill gets
		 * at least what the decode rows cost: with many streams their rows alone pass
		 * the target, and prefill (new requests) would starve.  Their cost is the
		 * decode steps' own measurement: the step model's scales follow the chunks,
		 * whose attention at a long context priced one decode row at two steps
		 */
		double dec = kvp_stepcost_decode_ns(&s->cost, nd);

		limit = s->step_target_ns > 2 * dec ? s->step_target_ns : 2 * dec;
	} else {
		limit = s->prefill_step_ns;
	}
	for (uint32_t i = 0; i < n_keys && tokens_left && nd + n_plan < s->cfg.max_running; i++) {
		struct seq *q = keys[i].q;
		uint32_t ctx = q->gen.n_past;
		uint32_t left = q->n_fill - ctx;
		uint32_t cap = left < tokens_left ? left : tokens_left;
		uint32_t floor = 1, n;

		if (!left) {
			prefill_done(s, q, NULL); /* a resumed sequence found all of it cached */
			continue;
		}
		n = kvp_stepcost_fit_step(&s->cost, limit, *rows, *attn, ctx, cap);
		if (!nd) {
			/*
			 * a step of prefill alone is a call of its own: its first chunk is worth
			 * the call's fixed cost, but never more than a whole step (a noisy fit
			 * can make that huge)
			 */
			uint32_t whole = kvp_stepcost_fit_tokens(&s->cost, s->step_target_ns, ctx,
								 cap);

			floor = kvp_stepcost_min_chunk(&s->cost, ctx);
			floor = floor < whole ? floor : whole;
			floor = floor < 1 ? 1 : floor > cap ? cap : floor;
		}
		if (n < floor) {
			/* the step's first chunk always goes: prefill advances */
			if (n_plan)
				break;
			n = floor;
		}
		if (ensure_blocks(s, q, ctx + n) < 0) {
			seq_end(s, q, KVP_E_NOSPACE, true, "pool: no block for the prompt");
			continue;
		}
		/*
		 * a step that ends a prompt (a first token) lasts no longer than a step
		 * next to streams: a short prompt that came during a long one's prefill
		 * waits for its own chunk, not for a long prefill step
		 */
		if (n == left && limit > s->step_target_ns)
			limit = s->step_target_ns;
		s->part_seq[n_plan] = q;
		s->parts[nd + n_plan++] = (struct kvp_fwd_part){ .table = q->table,
								 .n_table = q->n_table,
								 .pos0 = ctx,
								 .tokens = q->hist + ctx,
								 .n = n };
		tokens_left -= n;
		*rows += n;
		*attn += n * ((double)ctx + n / 2.0);
	}
	return n_plan;
}

/*
 * FAIR: the step's one forward call over s->parts (@nd decode rows, then @np chunks).
 * Test hooks without a step hook get the decode batch and each chunk one after the
 * other, into the same logits rows.
 */
static int fwd_step(struct kvp_sched *s, uint32_t nd, uint32_t np)
{
	const struct kvp_sched_hooks *h = s->cfg.hooks;
	int r;

	if (!h)
		return kvp_fwd_step(s->fwd, &s->view, s->parts, nd + np, s->logits);
	if (h->step)
		return h->step(h->ctx, &s->view, s->parts, nd + np, s->logits);
	if (nd && (r = h->decode(h->ctx, &s->view, s->batch, nd, s->logits)) < 0)
		return r;
	for (uint32_t i = nd; i < nd + np; i++) {
		const struct kvp_fwd_part *p = &s->parts[i];

		r = h->prefill(h->ctx, &s->view, p->table, p->n_table, p->pos0, p->tokens, p->n,
			       s->logits + (size_t)i * s->n_vocab);
		if (r < 0)
			return r;
	}
	return 0;
}

/*
 * FAIR: one forward call for the whole step: the decode batch and the prefill chunks
 * that fit the step's time budget with it (compute/forward.h kvp_fwd_step()), so the
 * decode rows ride along the chunks' pass over the weights and streams never wait for
 * a separate prefill call.  Return: whether anything was computed.
 */
static bool mixed_step(struct kvp_sched *s)
{
	uint32_t nd = decode_prepare(s), np;
	double rows = nd, attn = 0;
	uint64_t t0, dt;
	int r;

	for (uint32_t i = 0; i < nd; i++) {
		s->parts[i] = (struct kvp_fwd_part){ .table = s->batch[i].table,
						     .n_table = s->batch[i].n_table,
						     .pos0 = s->batch[i].pos,
						     .tokens = &s->batch[i].token,
						     .n = 1 };
		attn += (double)s->batch[i].pos + 1;
	}
	np = plan_prefill(s, nd, &rows, &attn);
	if (!nd && !np)
		return false;
	t0 = now_ns(s);
	r = fwd_step(s, nd, np);
	dt = now_ns(s) - t0;
	if (np)
		kvp_stepcost_observe_step(&s->cost, rows, attn, (double)dt);
	else
		kvp_stepcost_observe_decode(&s->cost, nd, (double)dt);
	/* first tokens before the streams' next ones (prefill_advanced flushes them) */
	for (uint32_t i = 0; i < np; i++) {
		struct seq *q = s->part_seq[i];

		if (r < 0) {
			q->prefill_ns += dt;
			seq_end(s, q, KVP_E_INTERNAL, true, "engine: prefill failed");
			continue;
		}
		prefill_advanced(s, q, s->parts[nd + i].n, dt,
				 s->logits + (size_t)(nd + i) * s->n_vocab);
	}
	decode_finish(s, nd, r);
	return true;
}

/* ---- engine thread: calibration ---- */

/* Time @fn best of CAL_REPEAT; 0 when it failed. */
static double cal_prefill(struct kvp_sched *s, const uint32_t *table, uint32_t n_table,
			  uint32_t n_past, const int32_t *tokens, uint32_t n)
{
	double best = 0;

	for (int i = 0; i < CAL_REPEAT; i++) {
		uint64_t t0 = now_ns(s);
		int r = fwd_prefill_at(s, table, n_table, n_past, tokens, n);
		double dt = (double)(now_ns(s) - t0);

		if (r < 0)
			return 0;
		if (!best || dt < best)
			best = dt;
	}
	return best;
}

/*
 * Measure this model on this machine (FAIR): a prefill call of one token and of CAL_N
 * at context 0 and at CAL_CTX, a decode step of one sequence, in free blocks that are
 * given back unpublished.  Sets the cost model and the step budgets, and logs them.
 */
static void calibrate(struct kvp_sched *s)
{
	uint32_t n_cal = blocks_of(s, CAL_CTX + CAL_N + 1);
	uint32_t table[64];
	int32_t tokens[CAL_CTX + CAL_N];
	uint32_t got = 0, i;
	double ta = 0, tm = 0, tb = 0, d1 = 0, fixed;

	s->calibrated = true;
	if (!s->fair)
		return;
	for (i = 0; i < CAL_CTX + CAL_N; i++)
		tokens[i] = (int32_t)(i % s->n_vocab);
	if (n_cal <= 64 && pool_unreserved(s) >= n_cal)
		for (got = 0; got < n_cal; got++)
			if (kvp_pool_alloc(s->cfg.pool, KVP_NODE_ANY, &table[got]) < 0)
				break;
	if (got == n_cal) {
		struct kvp_fwd_seq one = {
			.table = table, .n_table = n_cal, .pos = CAL_CTX + CAL_N, .token = 1
		};

		cal_prefill(s, table, n_cal, 0, tokens, 1); /* warm-up: page faults, caches */
		ta = cal_prefill(s, table, n_cal, 0, tokens, CAL_N);
		/* the rest of the context in one bigger call, then CAL_N tokens after it */
		tm = cal_prefill(s, table, n_cal, CAL_N, tokens + CAL_N, CAL_CTX - CAL_N);
		if (tm > 0)
			tb = cal_prefill(s, table, n_cal, CAL_CTX, tokens, CAL_N);
		s->batch[0] = one;
		for (int k = 0; k < CAL_REPEAT; k++) {
			uint64_t t0 = now_ns(s);
			double dt;

			if (fwd_decode(s, 1) < 0)
				break;
			dt = (double)(now_ns(s) - t0);
			if (!d1 || dt < d1)
				d1 = dt;
		}
	}
	for (i = 0; i < got; i++)
		kvp_pool_unref(s->cfg.pool, table[i]);
	if (ta > 0 && tm > 0 && tb > 0) {
		const double n[3] = { CAL_N, CAL_CTX - CAL_N, CAL_N };
		const double ctx[3] = { 0, CAL_N, CAL_CTX };
		const double t[3] = { ta, tm, tb };

		kvp_stepcost_fit(&s->cost, n, ctx, t, d1);
	} else
		kvp_stepcost_init(&s->cost, 0, 0, 0, 0); /* no room to measure: defaults */
	/*
	 * The fixed cost is the fit's intercept, but a call of one token (the decode step)
	 * pays it too, less that token: the direct measurement bounds an intercept that the
	 * matmul's row tiles (12 rows at a time) can pull low, which made prefill steps
	 * alone too short and a long prompt up to 1.7x slower in some daemon starts.
	 */
	fixed = s->cost.d1 - s->cost.p1 > s->cost.p0 ? s->cost.d1 - s->cost.p1 : s->cost.p0;
	/*
	 * a step pays the call's fixed cost once (one mixed call), so 2.5 of whichever is
	 * larger, a decode step or that fixed cost, leaves prefill 1.5 of them per step
	 * while a stream's gap stays within 2.5 of its gap alone (2 starved a long prompt:
	 * at 4,000 positions a chunk's attention rereads the whole history, and 1 token per
	 * step was left); alone, a prefill step of 10 fixed costs loses a tenth to them
	 * (the issue's 1.1x for a long prompt) and keeps a short request arriving during
	 * it within about 3x its TTFT alone (half a step waited, then its own)
	 */
	s->step_target_ns = s->cfg.step_target_ns ? (double)s->cfg.step_target_ns :
			    AUTO_STEP_DECODES * s->cost.d1 > AUTO_STEP_CALLS * fixed ?
						    AUTO_STEP_DECODES * s->cost.d1 :
						    AUTO_STEP_CALLS * fixed;
	s->prefill_step_ns = s->cfg.prefill_step_ns ? (double)s->cfg.prefill_step_ns :
						      AUTO_PREFILL_CALLS * fixed;
	s->st.step_target_ms = s->step_target_ns / 1e6;
	s->st.prefill_step_ms = s->prefill_step_ns / 1e6;
	s->st.calib_decode_ms = s->cost.d1 / 1e6;
	s->st.calib_call_ms = s->cost.p0 / 1e6;
	s->st.calib_token_ms = s->cost.p1 / 1e6;
	kvp_log(LOG_INFO,
		"engine: measured a decode step of one sequence at %.2f ms, a prefill call at "
		"%.2f ms + %.3f ms per token + %.5f ms per token per position; step budget "
		"%.1f ms while decoding, %.1f ms otherwise",
		s->cost.d1 / 1e6, s->cost.p0 / 1e6, s->cost.p1 / 1e6, s->cost.p2 / 1e6,
		s->step_target_ns / 1e6, s->prefill_step_ns / 1e6);
}

/* ---- engine thread: inbox, cancellation, stats ---- */

/* Cancel request (@conn, @req_id): every continuation of it. */
static void cancel_req(struct kvp_sched *s, uint64_t conn, uint64_t req_id)
{
	struct seq_list *lists[] = { &s->queue, &s->waiting, &s->active };
	struct seq *q;
	size_t i;

	for (i = 0; i < 3; i++)
		for (q = lists[i]->first; q; q = q->next)
			if (q->conn == conn && q->req_id == req_id && !q->cancelled) {
				q->cancelled = true;
				q->cancel_status = KVP_E_CANCELLED;
			}
}

/* DONE (with cache usage: @blocks) or ERROR for a request the engine answers at once. */
static void answer_now(struct kvp_sched *s, const struct msg *m, uint32_t status, const char *err,
		       uint32_t prompt_tokens, uint32_t blocks)
{
	struct kvp_sched_event e = {
		.token = -1, .conn = m->conn, .req_id = m->req_id, .cont = -1
	};

	if (err) {
		size_t n = strlen(err) < sizeof(e.text) ? strlen(err) : sizeof(e.text);

		e.type = KVP_SCHED_EV_ERROR;
		e.status = status;
		memcpy(e.text, err, n);
		e.text_len = (uint32_t)n;
	} else {
		e.type = KVP_SCHED_EV_DONE;
		e.usage.status = KVP_OK;
		e.usage.prompt_tokens = prompt_tokens;
		e.has_cu = true;
		e.cu.blocks = blocks;
	}
	push_event(s, &e);
}

/*
 * UNPIN: the full blocks of the prompt, found as a lookup finds them (with one token
 * more, so the last full block is covered too), each lose one cache pin - if every one
 * has a pin; else nothing changes and the answer is an ERROR.
 */
static void unpin(struct kvp_sched *s, struct msg *m)
{
	struct kvp_extra_keys ek = s->cfg.base_keys;
	uint32_t want = m->n_tokens / s->block_tokens;
	struct kvp_prefix_key key;
	uint32_t *hits = NULL, *toks = NULL;
	const char *err = NULL;
	int n = 0;

	ek.salt_len = m->salt_len;
	memcpy(ek.salt, m->salt, m->salt_len);
	if (!want) {
		err = "unpin: the prompt has no full block";
	} else if (kvp_prefix_key_init(&key, &ek) < 0 || !(hits = calloc(want, sizeof(*hits))) ||
		   !(toks = calloc((size_t)want * s->block_tokens + 1, sizeof(*toks)))) {
		err = "unpin: out of memory";
	} else {
		memcpy(toks, m->tokens, (size_t)want * s->block_tokens * sizeof(*toks));
		n = kvp_index_lookup(s->cfg.index, &key, toks, want * s->block_tokens + 1, hits,
				     want);
		if (n < 0)
			n = 0;
		for (int i = 0; i < n && !err; i++)
			if (!kvp_pool_block(s->cfg.pool, hits[i])->cpin)
				err = "unpin: that prompt is not pinned";
		if ((uint32_t)n < want)
			err = "unpin: that prompt is not pinned";
		for (int i = 0; i < n && !err; i++)
			kvp_pool_cache_unpin(s->cfg.pool, hits[i]);
		for (int i = 0; i < n; i++)
			kvp_pool_unref(s->cfg.pool, hits[i]);
	}
	if (err)
		s->st.cache.pin_refused++;
	else
		s->st.cache.unpins++;
	answer_now(s, m, err && !strstr(err, "memory") ? KVP_E_INVALID : KVP_E_INTERNAL, err,
		   m->n_tokens, want);
	free(hits);
	free(toks);
}

/* FLUSH: every evictable cached block goes (TTL or not); held and pinned ones stay. */
static void flush_cache(struct kvp_sched *s, struct msg *m)
{
	uint32_t n = kvp_pool_flush(s->cfg.pool);

	s->st.cache.flushes++;
	s->st.cache.flushed_blocks += n;
	answer_now(s, m, KVP_OK, NULL, 0, n);
}

static void mark_all(struct seq_list *l, uint64_t conn, bool any_conn, uint32_t status, bool silent)
{
	struct seq *q;

	for (q = l->first; q; q = q->next) {
		if (!any_conn && q->conn != conn)
			continue;
		if (!q->cancelled || silent) {
			q->cancelled = true;
			q->cancel_status = status;
		}
		if (silent)
			q->silent = true;
	}
}

/* ERROR event for a LEASE (not a sequence). */
static void lease_error(struct kvp_sched *s, const struct kvp_sched_lease_ask *a,
			enum kvp_status status, const char *msg)
{
	struct kvp_sched_event e = { .type = KVP_SCHED_EV_ERROR,
				     .token = -1,
				     .status = status,
				     .conn = a->conn,
				     .req_id = a->req_id };
	size_t n = strlen(msg);

	if (n > sizeof(e.text))
		n = sizeof(e.text);
	memcpy(e.text, msg, n);
	e.text_len = (uint32_t)n;
	s->st.leases_refused++;
	push_event(s, &e);
}

/*
 * MSG_LEASE: the longest cached prefix of every full block of the tokens (one token
 * more is passed to the lookup, which never covers a prompt's last token), its blocks
 * held by a new lease, the answer as an event.
 */
static void do_lease(struct kvp_sched *s, struct msg *m)
{
	const struct kvp_sched_lease_ask *a = &m->lease->ask;
	const struct kvp_segment *seg = kvp_pool_segment(s->cfg.pool);
	const struct kvp_geom *g = kvp_pool_geom(s->cfg.pool);
	struct kvp_extra_keys ek = s->cfg.base_keys;
	struct kvp_sched_event e = { .type = KVP_SCHED_EV_LEASE,
				     .conn = a->conn,
				     .req_id = a->req_id };
	struct kvp_sched_lease *res;
	struct kvp_prefix_key key;
	uint32_t cap = a->n_tokens / s->block_tokens;
	uint32_t *table;
	int n;

	if (kvp_leases_count(&s->leases, a->conn) >= a->max_per_conn) {
		lease_error(s, a, KVP_E_BUSY, "too many leases (leases.max_per_conn)");
		return;
	}
	ek.salt_len = a->salt_len;
	memcpy(ek.salt, a->salt, a->salt_len);
	res = calloc(1, sizeof(*res) + (size_t)cap * sizeof(res->blocks[0]));
	table = calloc(cap ? cap : 1, sizeof(*table));
	if (!res || !table || kvp_prefix_key_init(&key, &ek) < 0) {
		free(res);
		free(table);
		lease_error(s, a, KVP_E_INTERNAL, "lease: out of memory");
		return;
	}
	n = cap ? kvp_index_lookup(s->cfg.index, &key, (const uint32_t *)m->lease->tokens,
				   a->n_tokens + 1, table, cap) :
		  0;
	if (n < 0)
		n = 0;
	if (n > 0 &&
	    kvp_leases_add(&s->leases, a->conn, table, (uint32_t)n,
			   now_ns(s) + (uint64_t)a->ttl_ms * 1000000, &res->hdr.lease_id) < 0) {
		for (int i = 0; i < n; i++)
			kvp_pool_unref(s->cfg.pool, table[i]);
		free(res);
		free(table);
		lease_error(s, a, KVP_E_INTERNAL, "lease: out of memory");
		return;
	}
	res->hdr.n_blocks = (uint32_t)n;
	res->hdr.ttl_ms = n ? a->ttl_ms : 0;
	res->hdr.block_stride = g->block_stride;
	res->hdr.data_offset = seg->data_offset;
	res->hdr.shape = g->shape;
	for (int i = 0; i < n; i++) {
		res->blocks[i].block = table[i];
		res->blocks[i].generation = kvp_pool_block(s->cfg.pool, table[i])->generation;
		res->blocks[i].offset = seg->data_offset + (uint64_t)table[i] * g->block_stride;
	}
	free(table);
	e.lease = res;
	push_event(s, &e);
}

static void handle_msg(struct kvp_sched *s, struct msg *m)
{
	struct seq *q;

	switch (m->type) {
	case MSG_SUBMIT:
		q = m->seq;
		q->arrival = ++s->arrivals;
		queue_insert(s, q);
		s->st.req_total++;
		break;
	case MSG_CANCEL:
		s->st.cancels_received++;
		cancel_req(s, m->conn, m->req_id);
		break;
	case MSG_UNPIN:
		unpin(s, m);
		break;
	case MSG_FLUSH_CACHE:
		flush_cache(s, m);
		break;
	case MSG_CLOSED:
		kvp_leases_conn_closed(&s->leases, s->cfg.pool, m->conn);
		mark_all(&s->queue, m->conn, false, KVP_E_CANCELLED, true);
		mark_all(&s->waiting, m->conn, false, KVP_E_CANCELLED, true);
		mark_all(&s->active, m->conn, false, KVP_E_CANCELLED, true);
		break;
	case MSG_CANCEL_ALL:
		mark_all(&s->queue, 0, true, m->status, false);
		mark_all(&s->waiting, 0, true, m->status, false);
		mark_all(&s->active, 0, true, m->status, false);
		break;
	case MSG_FLUSH_TIER:
		s->flush_tier = true;
		break;
	case MSG_LEASE:
		do_lease(s, m);
		break;
	case MSG_RELEASE:
		kvp_leases_release(&s->leases, s->cfg.pool, m->conn, m->req_id);
		break;
	case MSG_WRITEBACK:
		s->wb_want = m->serial;
		s->wb_cursor = 0;
		break;
	}
	s->handled = m->serial;
}

static bool writeback_pending(const struct kvp_sched *s)
{
	return s->wb_want != s->st.writeback_done;
}

/*
 * kvp_sched_writeback(): every cached block without a disk copy goes to the tier, a
 * queue's worth per step; done once the scan has passed the last block and the writes
 * landed (or at once without a usable tier).
 */
static void writeback_step(struct kvp_sched *s)
{
	if (kvp_tiering_usable(s->tiering) && (!kvp_tiering_writeback(s->tiering, &s->wb_cursor) ||
					       kvp_tiering_in_flight(s->tiering)))
		return;
	s->st.writeback_done = s->wb_want;
}

static void reap_list(struct kvp_sched *s, struct seq_list *l, bool admitted)
{
	struct seq *q = l->first;

	while (q) {
		struct seq *next = q->next;

		if (q->cancelled && (q->n_inflight || q->r_pending)) {
			q = next; /* the tier still writes into its blocks: after its answer */
			continue;
		}
		if (q->cancelled) {
			/* never admitted and not cancelled by its client: an ERROR says why */
			bool as_error = !admitted && !q->admit_no &&
					q->cancel_status != KVP_E_CANCELLED;

			seq_end(s, q, q->cancel_status, as_error,
				q->cancel_status == KVP_E_SHUTDOWN ? "daemon: shutting down" :
				q->cancel_status == KVP_E_NOSPACE  ? "pool: out of blocks" :
								     "request cancelled");
		}
		q = next;
	}
}

static bool has_work(const struct kvp_sched *s);

static void publish_stats(struct kvp_sched *s)
{
	uint64_t i;

	kvp_pool_stats(s->cfg.pool, &s->st.pool);
	kvp_index_stats(s->cfg.index, &s->st.index);
	if (s->tiering)
		kvp_tiering_stats(s->tiering, &s->st.tier, now_ns(s),
				  !has_work(s) && !kvp_tiering_in_flight(s->tiering));
	if (s->remoting)
		kvp_remoting_stats(s->remoting, &s->st.remote, now_ns(s));
	s->st.queued = s->queue.n;
	s->st.waiting_prefix = s->waiting.n;
	s->st.running = s->active.n;
	s->st.reserved_blocks = s->reserved_total;
	s->st.leases_active = s->leases.n;
	s->st.leases_granted = s->leases.granted;
	s->st.leases_released = s->leases.released;
	s->st.leases_expired = s->leases.expired;
	s->st.leases_closed = s->leases.closed;
	s->st.inbox_handled = s->handled;
	s->st.queued_high = s->st.queued_normal = s->st.queued_low = s->st.preempted = 0;
	for (const struct seq *q = s->queue.first; q; q = q->next) {
		if (q->priority > 0)
			s->st.queued_high++;
		else if (q->priority < 0)
			s->st.queued_low++;
		else
			s->st.queued_normal++;
		s->st.preempted += q->admit_no != 0;
	}
	pthread_mutex_lock(&s->stats_lock);
	s->snap = s->st;
	/* only the samples taken since the last publish (the rings keep the newest) */
	i = s->snap_ttft_n;
	if (s->ttft_n - i > TTFT_RING)
		i = s->ttft_n - TTFT_RING;
	for (; i < s->ttft_n; i++)
		s->snap_ttft[i % TTFT_RING] = s->ttft_ring[i % TTFT_RING];
	s->snap_ttft_n = s->ttft_n;
	i = s->snap_itl_n;
	if (s->itl_n - i > ITL_RING)
		i = s->itl_n - ITL_RING;
	for (; i < s->itl_n; i++)
		s->snap_itl[i % ITL_RING] = s->itl_ring[i % ITL_RING];
	s->snap_itl_n = s->itl_n;
	i = s->snap_step_n;
	if (s->step_n - i > STEP_RING)
		i = s->step_n - STEP_RING;
	for (; i < s->step_n; i++)
		s->snap_step[i % STEP_RING] = s->step_ring[i % STEP_RING];
	s->snap_step_n = s->step_n;
	pthread_mutex_unlock(&s->stats_lock);
}

static bool has_work(const struct kvp_sched *s)
{
	return s->active.n || s->waiting.n || s->queue.n;
}

/*
 * One step after the inbox was taken (see the top of the file).  Return: whether it
 * made progress (admitted, computed or ended something).
 */
static bool engine_step(struct kvp_sched *s)
{
	uint64_t ended_before = s->st.req_done + s->st.req_cancelled + s->st.req_failed;
	uint64_t t0;
	uint32_t active_before;
	bool worked;

	if (!s->calibrated)
		calibrate(s);
	tier_step(s);
	reap_list(s, &s->queue, false);
	reap_list(s, &s->waiting, false);
	reap_list(s, &s->active, true);
	wake_waiters(s);
	active_before = s->active.n;
	admit(s);
	t0 = now_ns(s);
	if (s->fair) {
		worked = mixed_step(s);
	} else {
		worked = prefill_fifo(s);
		flush_events(s); /* first tokens leave before the decode step */
		worked = decode_step(s) || worked;
	}
	if (worked) {
		s->st.steps++;
		s->step_ring[s->step_n++ % STEP_RING] = kvp_ns_to_ms(now_ns(s) - t0);
	}
	if (s->tiering)
		kvp_tiering_offload(s->tiering, (uint32_t)pool_unreserved(s));
	if (writeback_pending(s))
		writeback_step(s);
	if (s->remoting)
		kvp_remoting_offload(s->remoting, (uint32_t)pool_unreserved(s));
	publish_stats(s);
	flush_events(s);
	return worked || s->active.n != active_before ||
	       ended_before != s->st.req_done + s->st.req_cancelled + s->st.req_failed;
}

/* Take the inbox (the caller holds inbox_lock) and handle it. */
static void take_inbox(struct kvp_sched *s, struct msg *m)
{
	while (m) {
		struct msg *next = m->next;

		handle_msg(s, m);
		free(m->lease);
		free(m->tokens);
		free(m);
		m = next;
	}
}

/*
 * Nothing to compute, the remote tier owes answers: sleep until its event fd says a
 * completion is there, or REMOTE_WAIT_MS (the inbox is a condition variable poll() cannot
 * watch: a request arriving meanwhile waits at most that long).
 */
static void remote_wait(struct kvp_sched *s)
{
	struct pollfd pfd = { .fd = kvp_remoting_event_fd(s->remoting), .events = POLLIN };

	if (pfd.fd >= 0)
		(void)poll(&pfd, 1, REMOTE_WAIT_MS);
}

static void *engine_main(void *arg)
{
	struct kvp_sched *s = arg;
	bool progress = true;

	pthread_setname_np(pthread_self(), "kvp-engine");
	publish_stats(s);
	for (;;) {
		bool disk_io = kvp_tiering_in_flight(s->tiering) > 0;
		bool io = disk_io || kvp_remoting_in_flight(s->remoting) > 0;
		struct msg *m;

		pthread_mutex_lock(&s->inbox_lock);
		while (!s->stop && !s->inbox_head && (!has_work(s) || !progress) && !io &&
		       !writeback_pending(s)) {
			/* queued work that cannot be admitted yet, or leases that may expire:
			 * look again soon; a chain summary due: wake for it (idle hosts too
			 * keep theirs in the store) */
			uint32_t ms = has_work(s) || s->leases.n ?
					      20 :
					      kvp_routesum_due_in_ms(s->routesum, now_ns(s));

			if (ms != UINT32_MAX) {
				struct timespec ts;

				if (ms > 60000)
					ms = 60000;
				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_sec += ms / 1000;
				ts.tv_nsec += (long)(ms % 1000) * 1000000;
				if (ts.tv_nsec >= 1000000000) {
					ts.tv_sec++;
					ts.tv_nsec -= 1000000000;
				}
				pthread_cond_timedwait(&s->inbox_cv, &s->inbox_lock, &ts);
				break;
			}
			pthread_cond_wait(&s->inbox_cv, &s->inbox_lock);
		}
		if (s->stop) {
			pthread_mutex_unlock(&s->inbox_lock);
			break;
		}
		m = s->inbox_head;
		s->inbox_head = s->inbox_tail = NULL;
		pthread_mutex_unlock(&s->inbox_lock);
		take_inbox(s, m);
		if (s->leases.n)
			kvp_leases_expire(&s->leases, s->cfg.pool, now_ns(s));
		/* nothing to compute but the disk answers: wait for it (offloads, reloads) */
		if (disk_io && !progress && !m)
			kvp_tiering_poll(s->tiering, true);
		else if (io && !progress && !m)
			remote_wait(s);
		progress = engine_step(s);
	}
	return NULL;
}

bool kvp_sched_step(struct kvp_sched *s)
{
	struct msg *m;

	assert(!s->started);
	pthread_mutex_lock(&s->inbox_lock);
	m = s->inbox_head;
	s->inbox_head = s->inbox_tail = NULL;
	pthread_mutex_unlock(&s->inbox_lock);
	take_inbox(s, m);
	engine_step(s);
	return has_work(s);
}

static int check_fail(char *err, size_t cap, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, cap, fmt, ap);
	va_end(ap);
	return -EUCLEAN;
}

int kvp_sched_check(struct kvp_sched *s, char *err, size_t cap)
{
	uint32_t *refs = calloc(s->n_blocks, sizeof(*refs));
	uint64_t reserved = 0;
	int r = 0;

	if (!refs)
		return -ENOMEM;
	for (const struct seq *q = s->queue.first; q && !r; q = q->next)
		if (q->n_table || q->reserved)
			r = check_fail(err, cap, "queued request %llu holds %u blocks, %u reserved",
				       (unsigned long long)q->req_id, q->n_table, q->reserved);
	for (const struct seq *q = s->waiting.first; q && !r; q = q->next)
		if (q->n_table || q->reserved)
			r = check_fail(err, cap, "waiting request %llu holds blocks",
				       (unsigned long long)q->req_id);
	for (const struct seq *q = s->active.first; q && !r; q = q->next) {
		reserved += q->reserved;
		if (q->n_table > q->cap_table || q->n_indexed > q->n_table ||
		    (uint64_t)q->n_table * s->block_tokens < q->gen.n_past)
			r = check_fail(err, cap, "request %llu: table %u/%u, indexed %u, n_past %u",
				       (unsigned long long)q->req_id, q->n_table, q->cap_table,
				       q->n_indexed, q->gen.n_past);
		for (uint32_t i = 0; i < q->n_table && !r; i++) {
			if (q->table[i] >= s->n_blocks)
				r = check_fail(err, cap, "block id %u out of range", q->table[i]);
			else
				refs[q->table[i]]++;
			for (uint32_t j = 0; j < i && !r; j++)
				if (q->table[j] == q->table[i])
					r = check_fail(err, cap, "block %u twice in one table",
						       q->table[i]);
		}
	}
	kvp_remoting_count_refs(s->remoting, refs); /* blocks being copied to the store */
	kvp_leases_count_refs(&s->leases, refs);
	for (uint32_t b = 0; b < s->n_blocks && !r; b++) {
		const struct kvp_block *bl = kvp_pool_block(s->cfg.pool, b);

		if (bl->refcount != refs[b])
			r = check_fail(err, cap, "block %u: refcount %u, held by %u tables", b,
				       bl->refcount, refs[b]);
	}
	if (!r && reserved != s->reserved_total)
		r = check_fail(err, cap, "reserved %llu, sum of requests %llu",
			       (unsigned long long)s->reserved_total, (unsigned long long)reserved);
	if (!r && pool_available(s) < s->reserved_total) {
		struct kvp_pool_stats ps;

		kvp_pool_stats(s->cfg.pool, &ps);
		r = check_fail(err, cap,
			       "available blocks %llu below the reservations %llu (free %u, "
			       "cached %u, written now %u)",
			       (unsigned long long)pool_available(s),
			       (unsigned long long)s->reserved_total, ps.arena[0].free,
			       ps.arena[0].cached, kvp_tiering_pinned_idle(s->tiering));
	}
	free(refs);
	return r;
}

/* ---- construction ---- */

int kvp_sched_new(struct kvp_sched **out, const struct kvp_sched_config *cfg)
{
	const struct kvp_model_hparams *hp;
	struct kvp_fwd_opts fo;
	struct kvp_sched *s;
	int r;

	if (!cfg->pool || !cfg->index || !cfg->model || !cfg->tok || cfg->wake_fd < 0 ||
	    !cfg->max_running || !cfg->max_queued || !cfg->prefill_chunk || !cfg->n_threads ||
	    cfg->event_capacity < 16 || cfg->policy > KVP_SCHED_FIFO)
		return -EINVAL;
	if (cfg->hooks && (!cfg->hooks->prefill || !cfg->hooks->decode || !cfg->hooks->now_ns))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	s->fair = cfg->policy == KVP_SCHED_FAIR;
	hp = kvp_model_hparams(cfg->model);
	s->n_vocab = hp->n_vocab;
	if (cfg->test_eog_after) {
		s->n_eog = kvp_tokenizer_eog(cfg->tok, NULL, 0);
		s->eog = calloc(s->n_eog ? s->n_eog : 1, sizeof(*s->eog));
		if (!s->eog) {
			free(s);
			return -ENOMEM;
		}
		kvp_tokenizer_eog(cfg->tok, s->eog, s->n_eog);
	}
	kvp_pool_kv_view(cfg->pool, &s->view);
	s->block_tokens = s->view.geom.shape.block_tokens;
	s->n_blocks = kvp_pool_n_blocks(cfg->pool);
	if (!s->cfg.aging_ms)
		s->cfg.aging_ms = 250;
	s->headroom = cfg->headroom_blocks ? cfg->headroom_blocks :
					     (s->n_blocks / 100 ? s->n_blocks / 100 : 1);
	s->st.policy = cfg->policy;
	s->st.tier_configured = cfg->tier != NULL;
	s->st.cache_policy = cfg->cache;
	s->st.block_bytes = s->view.geom.block_bytes;
	s->st.cache.flops_per_token = kvp_cache_flops_per_token(hp);
	{
		uint64_t pin_bytes = cfg->cache.pin_max_bytes ?
					     cfg->cache.pin_max_bytes :
					     (uint64_t)s->n_blocks * s->view.geom.block_bytes / 4;

		s->pin_max_blocks = (uint32_t)(pin_bytes / s->view.geom.block_bytes);
	}
	/* TTLs are measured on the engine's clock (a test's, with hooks) */
	if (cfg->hooks)
		kvp_pool_set_clock(cfg->pool, cfg->hooks->now_ns, cfg->hooks->ctx);
	r = kvp_pool_set_policy(cfg->pool, (enum kvp_evict_policy)cfg->cache.eviction);
	if (r < 0)
		goto err_free;
	kvp_stepcost_init(&s->cost, 0, 0, 0, 0);
	if (!cfg->hooks) {
		fo = (struct kvp_fwd_opts){ .n_threads = cfg->n_threads,
					    .max_chunk = cfg->prefill_chunk > CAL_CTX ?
								 cfg->prefill_chunk :
								 CAL_CTX,
					    .max_batch = cfg->max_running };
		r = kvp_fwd_new(&s->fwd, cfg->model, &fo);
		if (r < 0)
			goto err_free;
		r = kvp_fwd_check_view(s->fwd, &s->view);
		if (r < 0)
			goto err_fwd;
	}
	r = -ENOMEM;
	s->logits = calloc((size_t)cfg->max_running * s->n_vocab, sizeof(float));
	s->batch = calloc(cfg->max_running, sizeof(*s->batch));
	s->batch_seq = calloc(cfg->max_running, sizeof(*s->batch_seq));
	s->pkeys = calloc(cfg->max_running, sizeof(*s->pkeys));
	s->parts = calloc(cfg->max_running, sizeof(*s->parts));
	s->part_seq = calloc(cfg->max_running, sizeof(*s->part_seq));
	s->fork_logits = calloc(2 * (size_t)s->n_vocab, sizeof(float));
	s->ev_cap = cfg->event_capacity;
	s->ev = calloc(s->ev_cap, sizeof(*s->ev));
	if (!s->logits || !s->batch || !s->batch_seq || !s->pkeys || !s->parts || !s->part_seq ||
	    !s->ev || !s->fork_logits)
		goto err_bufs;
	if (cfg->tier) {
		r = kvp_tiering_new(&s->tiering, cfg->tier, cfg->pool, cfg->index,
				    cfg->tier_high_pct, cfg->tier_low_pct, read_done, s);
		if (r < 0)
			goto err_bufs;
	}
	if (cfg->remote) {
		r = kvp_remoting_new(&s->remoting, cfg->remote, cfg->remote_domain, cfg->pool,
				     cfg->index, cfg->tier_high_pct, cfg->tier_low_pct, fetch_done,
				     s);
		if (r < 0)
			goto err_tiering;
	}
	if (cfg->remote && cfg->remote_summary_s) {
		r = kvp_routesum_new(&s->routesum, cfg->remote, cfg->remote_domain, cfg->index,
				     cfg->remote_host, cfg->remote_summary_s);
		if (r < 0) {
			kvp_remoting_free(s->remoting);
			goto err_tiering;
		}
	}
	s->st.remote.configured = cfg->remote != NULL;
	pthread_mutex_init(&s->inbox_lock, NULL);
	pthread_cond_init(&s->inbox_cv, NULL);
	pthread_mutex_init(&s->ev_lock, NULL);
	pthread_cond_init(&s->ev_space, NULL);
	pthread_mutex_init(&s->stats_lock, NULL);
	atomic_init(&s->outstanding, 0);
	atomic_init(&s->draining, false);
	*out = s;
	return 0;
err_tiering:
	kvp_tiering_free(s->tiering);
err_bufs:
	free(s->fork_logits);
	free(s->ev);
	free(s->part_seq);
	free(s->parts);
	free(s->pkeys);
	free(s->batch_seq);
	free(s->batch);
	free(s->logits);
err_fwd:
	kvp_fwd_free(s->fwd);
err_free:
	free(s->eog);
	free(s);
	return r;
}

int kvp_sched_start(struct kvp_sched *s)
{
	int r;

	/* before the thread: the first requests never wait for it, and READY=1 follows it */
	calibrate(s);
	publish_stats(s);
	r = pthread_create(&s->thread, NULL, engine_main, s);
	if (r)
		return -r;
	s->started = true;
	return 0;
}

static void free_list(struct kvp_sched *s, struct seq_list *l)
{
	while (l->first) {
		struct seq *q = l->first;

		if (q->grp)
			q->grp->live--; /* the last one frees the group */
		release_blocks(s, q);
		list_del(l, q);
		seq_free(q);
	}
}

void kvp_sched_free(struct kvp_sched *s)
{
	struct msg *m;

	if (!s)
		return;
	if (s->started) {
		pthread_mutex_lock(&s->inbox_lock);
		s->stop = true;
		pthread_cond_signal(&s->inbox_cv);
		pthread_mutex_unlock(&s->inbox_lock);
		kvp_sched_loop_gone(s);
		pthread_join(s->thread, NULL);
	}
	/* the engine thread is gone: this thread owns the pool now; the tier answers first */
	kvp_tiering_free(s->tiering);
	kvp_leases_deinit(&s->leases, s->cfg.pool);
	for (uint32_t i = 0; s->ev && i < s->ev_count; i++)
		free(s->ev[(s->ev_head + i) % s->ev_cap].lease); /* answers never taken */
	/* our references go; the tier's I/O thread may still read or write blocks until
	 * kvp_remote_free(), which the daemon calls before the pool goes */
	kvp_remoting_free(s->remoting);
	kvp_routesum_free(s->routesum);
	free_list(s, &s->queue);
	free_list(s, &s->waiting);
	free_list(s, &s->active);
	m = s->inbox_head;
	while (m) {
		struct msg *next = m->next;

		seq_free(m->type == MSG_SUBMIT ? m->seq : NULL);
		free(m->lease);
		free(m->tokens);
		free(m);
		m = next;
	}
	pthread_mutex_destroy(&s->inbox_lock);
	pthread_cond_destroy(&s->inbox_cv);
	pthread_mutex_destroy(&s->ev_lock);
	pthread_cond_destroy(&s->ev_space);
	pthread_mutex_destroy(&s->stats_lock);
	free(s->ev);
	free(s->part_seq);
	free(s->parts);
	free(s->fork_logits);
	free(s->pkeys);
	free(s->batch_seq);
	free(s->batch);
	free(s->logits);
	kvp_fwd_free(s->fwd);
	free(s->eog);
	free(s);
}

/* ---- loop thread side ---- */

/* Return: @m's serial (@m itself may be gone by then: the engine frees what it takes). */
static uint64_t post(struct kvp_sched *s, struct msg *m)
{
	uint64_t serial;

	pthread_mutex_lock(&s->inbox_lock);
	m->next = NULL;
	m->serial = serial = ++s->posted;
	if (s->inbox_tail)
		s->inbox_tail->next = m;
	else
		s->inbox_head = m;
	s->inbox_tail = m;
	pthread_cond_signal(&s->inbox_cv);
	pthread_mutex_unlock(&s->inbox_lock);
	return serial;
}

int kvp_sched_submit(struct kvp_sched *s, const struct kvp_sched_req *r)
{
	struct kvp_extra_keys ek = s->cfg.base_keys;
	struct kvp_sample_params sp = r->sample;
	struct seq *q;
	struct msg *m;
	uint64_t blocks;
	int ret;

	if (atomic_load(&s->draining))
		return -ESHUTDOWN;
	struct kvp_cachectl cc;
	const char *why = NULL;

	if (!r->n_tokens || !r->max_new || r->salt_len > KVP_SALT_MAX ||
	    r->priority < KVP_SCHED_PRIO_MIN || r->priority > KVP_SCHED_PRIO_MAX ||
	    r->op > KVP_SCHED_OP_PIN)
		return -EINVAL;
	if (kvp_cachectl_resolve(&cc, &s->cfg.cache, r->has_cc ? &r->cc : NULL, r->n_tokens,
				 s->block_tokens, &why) < 0)
		return -EINVAL;
	/* continuations take blocks on demand (FAIR) and run in one batch */
	if (cc.n > 1 && (!s->fair || cc.n > s->cfg.max_running || r->op != KVP_SCHED_OP_GENERATE))
		return -EINVAL;
	if (atomic_load(&s->outstanding) >= (uint64_t)s->cfg.max_queued + s->cfg.max_running)
		return -EAGAIN;
	blocks = kvp_sched_blocks_for(s, r->n_tokens, r->max_new);
	if (blocks > s->n_blocks)
		return -ENOSPC;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	m = calloc(1, sizeof(*m));
	if (!m) {
		ret = -ENOMEM;
		goto err_seq;
	}
	q->table = calloc(blocks, sizeof(uint32_t));
	q->hist = malloc(((size_t)r->n_tokens + r->max_new) * sizeof(int32_t));
	if (!q->table || !q->hist) {
		ret = -ENOMEM;
		goto err_msg;
	}
	ek.salt_len = r->salt_len;
	memcpy(ek.salt, r->salt, r->salt_len);
	ret = kvp_prefix_key_init(&q->key, &ek); /* fills @q->key, allocates nothing */
	if (ret < 0)
		goto err_msg;
	ret = kvp_sampler_new(&q->sampler, s->n_vocab, &sp);
	if (ret < 0)
		goto err_msg;
	memcpy(q->hist, r->tokens, (size_t)r->n_tokens * sizeof(int32_t));
	q->conn = r->conn;
	q->req_id = r->req_id;
	q->no_cache = r->no_cache;
	q->priority = r->priority;
	q->sp = sp;
	q->cc = cc;
	q->has_cc = r->has_cc;
	q->pin_op = r->op == KVP_SCHED_OP_PIN;
	if (r->no_cache && !q->pin_op) {
		q->miss_reason = KVP_MISS_DISABLED;
	} else if (r->n_tokens < s->cfg.cache.min_tokens && !q->pin_op) {
		/* below the minimum: treated as no-cache, and said so */
		q->no_cache = true;
		q->miss_reason = KVP_MISS_BELOW_MINIMUM;
	}
	q->no_cache = q->no_cache && !q->pin_op; /* a pin publishes whatever it was asked */
	q->cap_table = (uint32_t)blocks;
	q->n_fill = r->n_tokens;
	q->t_recv = r->t_recv_ns;
	kvp_gen_init(&q->gen, s->cfg.tok, q->hist, r->n_tokens, r->max_new, !s->cfg.ignore_eos);
	free(r->tokens); /* ownership passes now that nothing can fail */
	m->type = MSG_SUBMIT;
	m->seq = q;
	atomic_fetch_add(&s->outstanding, 1);
	post(s, m);
	return 0;

err_msg:
	free(m);
err_seq:
	free(q->hist);
	free(q->table);
	free(q);
	return ret;
}

static void post_simple(struct kvp_sched *s, enum msg_type type, uint64_t conn, uint64_t req_id,
			uint32_t status)
{
	struct msg *m = calloc(1, sizeof(*m));

	if (!m)
		return; /* the request then runs to its end; nothing is leaked */
	m->type = type;
	m->conn = conn;
	m->req_id = req_id;
	m->status = status;
	post(s, m);
}

int kvp_sched_lease(struct kvp_sched *s, const struct kvp_sched_lease_ask *a)
{
	struct msg *m;

	if (atomic_load(&s->draining))
		return -ESHUTDOWN;
	if (!a->n_tokens || a->salt_len > KVP_SALT_MAX)
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	/* one token more: the lookup never covers a prompt's last token (do_lease()) */
	m->lease = malloc(sizeof(*m->lease) + ((size_t)a->n_tokens + 1) * sizeof(int32_t));
	if (!m->lease) {
		free(m);
		return -ENOMEM;
	}
	m->lease->ask = *a;
	m->lease->ask.tokens = NULL;
	memcpy(m->lease->tokens, a->tokens, (size_t)a->n_tokens * sizeof(int32_t));
	m->lease->tokens[a->n_tokens] = 0;
	m->type = MSG_LEASE;
	m->conn = a->conn;
	m->req_id = a->req_id;
	post(s, m);
	return 0;
}

void kvp_sched_release(struct kvp_sched *s, uint64_t conn, uint64_t lease_id)
{
	post_simple(s, MSG_RELEASE, conn, lease_id, 0);
}

void kvp_sched_cancel(struct kvp_sched *s, uint64_t conn, uint64_t req_id)
{
	post_simple(s, MSG_CANCEL, conn, req_id, KVP_E_CANCELLED);
}

void kvp_sched_conn_closed(struct kvp_sched *s, uint64_t conn)
{
	post_simple(s, MSG_CLOSED, conn, 0, KVP_E_CANCELLED);
}

void kvp_sched_drain(struct kvp_sched *s)
{
	atomic_store(&s->draining, true);
}

void kvp_sched_cancel_all(struct kvp_sched *s, enum kvp_status why)
{
	post_simple(s, MSG_CANCEL_ALL, 0, 0, why);
}

int kvp_sched_unpin(struct kvp_sched *s, uint64_t conn, uint64_t req_id, int32_t *tokens,
		    uint32_t n_tokens, uint32_t salt_len, const uint8_t *salt)
{
	struct msg *m;

	if (atomic_load(&s->draining))
		return -ESHUTDOWN;
	if (salt_len > KVP_SALT_MAX)
		return -EINVAL;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->type = MSG_UNPIN;
	m->conn = conn;
	m->req_id = req_id;
	m->tokens = tokens;
	m->n_tokens = n_tokens;
	m->salt_len = salt_len;
	memcpy(m->salt, salt, salt_len);
	post(s, m);
	return 0;
}

int kvp_sched_flush_cache(struct kvp_sched *s, uint64_t conn, uint64_t req_id)
{
	struct msg *m;

	if (atomic_load(&s->draining))
		return -ESHUTDOWN;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->type = MSG_FLUSH_CACHE;
	m->conn = conn;
	m->req_id = req_id;
	post(s, m);
	return 0;
}

int kvp_sched_flush_tier(struct kvp_sched *s)
{
	if (!s->cfg.tier)
		return -ENODEV;
	post_simple(s, MSG_FLUSH_TIER, 0, 0, 0);
	return 0;
}

uint64_t kvp_sched_writeback(struct kvp_sched *s)
{
	struct msg *m = calloc(1, sizeof(*m));

	if (!m)
		return 0;
	m->type = MSG_WRITEBACK;
	return post(s, m);
}

bool kvp_sched_idle(struct kvp_sched *s, uint64_t ticket, uint64_t now_ns)
{
	uint64_t posted;
	bool idle;

	pthread_mutex_lock(&s->inbox_lock);
	posted = s->posted;
	pthread_mutex_unlock(&s->inbox_lock);
	if (atomic_load(&s->outstanding))
		return false;
	pthread_mutex_lock(&s->stats_lock);
	idle = ticket && s->snap.inbox_handled == posted && s->snap.writeback_done == ticket &&
	       !s->snap.leases_active && !s->snap.pool.cpin_blocks &&
	       s->snap.pool.ttl_until_ns <= now_ns;
	pthread_mutex_unlock(&s->stats_lock);
	return idle;
}

uint64_t kvp_sched_outstanding(const struct kvp_sched *s)
{
	return atomic_load(&((struct kvp_sched *)s)->outstanding);
}

unsigned int kvp_sched_poll_events(struct kvp_sched *s, struct kvp_sched_event *ev,
				   unsigned int max)
{
	unsigned int n = 0;

	pthread_mutex_lock(&s->ev_lock);
	while (n < max && s->ev_count) {
		ev[n++] = s->ev[s->ev_head];
		s->ev_head = (s->ev_head + 1) % s->ev_cap;
		s->ev_count--;
	}
	if (n)
		pthread_cond_signal(&s->ev_space);
	pthread_mutex_unlock(&s->ev_lock);
	return n;
}

void kvp_sched_loop_gone(struct kvp_sched *s)
{
	pthread_mutex_lock(&s->ev_lock);
	s->loop_gone = true;
	pthread_cond_broadcast(&s->ev_space);
	pthread_mutex_unlock(&s->ev_lock);
}

/* Nearest-rank quantiles of the last min(@n, @cap) samples of @ring (sorted in place). */
static void quantiles(double *ring, uint64_t n, uint32_t cap, double *p50, double *p99, double *max)
{
	uint32_t k = n < cap ? (uint32_t)n : cap;

	kvp_sort_doubles(ring, k);
	*p50 = k ? kvp_percentile_sorted(ring, k, 50) : 0;
	*p99 = k ? kvp_percentile_sorted(ring, k, 99) : 0;
	if (max)
		*max = k ? ring[k - 1] : 0;
}

void kvp_sched_get_stats(struct kvp_sched *s, struct kvp_sched_stats *st)
{
	/* copies: the sorts happen outside the lock, on the caller's time */
	double *v = malloc((TTFT_RING + ITL_RING + STEP_RING) * sizeof(double));
	uint64_t n_ttft, n_itl, n_step;

	pthread_mutex_lock(&s->stats_lock);
	*st = s->snap;
	n_ttft = s->snap_ttft_n;
	n_itl = s->snap_itl_n;
	n_step = s->snap_step_n;
	if (v) {
		memcpy(v, s->snap_ttft, sizeof(s->snap_ttft));
		memcpy(v + TTFT_RING, s->snap_itl, sizeof(s->snap_itl));
		memcpy(v + TTFT_RING + ITL_RING, s->snap_step, sizeof(s->snap_step));
	}
	pthread_mutex_unlock(&s->stats_lock);
	st->ttft_samples = n_ttft;
	/* the store answers while the engine sleeps: its counters now, not at the last step */
	if (s->cfg.remote)
		kvp_remote_stats(s->cfg.remote, s->cfg.remote_domain, &st->remote.tier);
	if (!v)
		return; /* no quantiles this time; the counters are there */
	/* the order of the samples does not matter for quantiles: sort the copies */
	quantiles(v, n_ttft, TTFT_RING, &st->ttft_p50_ms, &st->ttft_p99_ms, NULL);
	quantiles(v + TTFT_RING, n_itl, ITL_RING, &st->itl_p50_ms, &st->itl_p99_ms,
		  &st->itl_max_ms);
	quantiles(v + TTFT_RING + ITL_RING, n_step, STEP_RING, &st->step_p50_ms, &st->step_p99_ms,
		  &st->step_max_ms);
	free(v);
}
