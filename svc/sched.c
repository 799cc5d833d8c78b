/* SPDX-License-Identifier: MIT */
/*
 * sched.c - the engine thread: continuous batching with chunked prefill, prefix-cache
 * lookup and publish, admission bounded by free blocks, cancellation (see sched.h).
 *
 * One engine step:
 *
 *	1. handle the inbox (new requests, cancels, closed connections, cancel-all)
 *	2. end cancelled requests, putting back their blocks
 *	3. wake requests that waited for a prefix another request was computing
 *	4. admit queued requests in arrival order while the batch has room and the pool
 *	   has blocks for them (see "Admission")
 *	5. prefill: up to prefill_chunk prompt tokens in total, sequence by sequence in
 *	   admission order; each newly filled full prompt block is published in the index;
 *	   a sequence whose prompt is done samples its first token
 *	6. decode: one batched forward step over every sequence that is generating
 *	7. publish a counter snapshot; wake the loop if events were queued
 *
 * so a long prompt delays running streams by one chunk per step, never by its whole
 * prefill, and a new request joins the batch at the next step.
 *
 * Generation stops at the model's end-of-generation set (kvp_gen_take()).  When a
 * request ends with a DONE (finished, or cancelled by its client; not failed, not
 * dropped with its connection), the full blocks of its prompt *and* of the tokens it
 * generated are published before the DONE is queued, so a conversation's next turn,
 * whose prompt starts with exactly those ids, finds them.
 *
 * Admission.  A request may hold at most blocks_for(prompt, max_new) blocks: its hit
 * blocks (shared, read-only) plus blocks it allocates as its positions fill.  At
 * admission it reserves what it may still allocate; it is admitted only when
 *	free + cached-unreferenced - reserved(all running)  >=  its reservation
 * so an admitted request never runs out of blocks (kvp_pool_alloc() evicts
 * unreferenced cached blocks, LRU first, when no block is free).  Invariant: after every
 * admission, free + cached-unreferenced >= reserved.  A request that needs more blocks
 * than the pool has is refused at submission (NOSPACE); one that merely does not fit now
 * waits at the head of the queue (FIFO, no starvation of big requests).
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
 * then blocks it published, in prompt order) and only read; positions >= n_past are not
 * written yet; the block holding position n_past is private to the sequence (the lookup
 * never covers the last prompt token, and only full blocks are shared).
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
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compute/forward.h"
#include "compute/gen.h"
#include "compute/model.h"
#include "compute/text/tokenizer.h"
#include "util/stats.h"
#include "util/time.h"

#define TTFT_RING 1024u

enum seq_state {
	SEQ_QUEUED = 0, /* waiting for admission */
	SEQ_WAITING,	/* waiting for another sequence's prefix blocks */
	SEQ_PREFILL,	/* admitted; prompt being computed */
	SEQ_DECODE,	/* generating */
};

/* One request.  Owned by the engine thread from the moment it is taken off the inbox. */
struct seq {
	struct seq *prev, *next; /* in exactly one of queue, waiting, active */
	enum seq_state state;
	uint64_t conn;
	uint64_t req_id;
	int32_t *prompt; /* owned; n_prompt + max_new ids: the prompt, then gen.kept */
	bool no_cache;
	struct kvp_prefix_key key;
	struct kvp_sampler *sampler;

	uint32_t *table; /* block ids; cap_table entries */
	uint32_t n_table;
	uint32_t cap_table; /* = blocks_for(n_prompt, max_new) */
	uint32_t n_hit;	    /* blocks from the lookup */
	uint32_t n_indexed; /* table[0..n_indexed) are in the index */
	uint32_t n_created; /* blocks this sequence inserted in the index */
	bool publish_stopped;
	uint32_t reserved;  /* blocks it may still allocate */
	struct kvp_gen gen; /* positions computed, tokens kept, text held */

	struct seq *wait_on;  /* SEQ_WAITING: the sequence computing our prefix */
	uint32_t wait_blocks; /* ... wake when it has indexed this many blocks */

	bool cancelled;
	bool silent; /* connection gone: end without events */
	uint32_t cancel_status;

	uint64_t t_recv;
	uint64_t t_admit;
	uint64_t t_first;
	uint64_t t_last;
	uint64_t prefill_ns;
};

struct seq_list {
	struct seq *first, *last;
	uint32_t n;
};

enum msg_type {
	MSG_SUBMIT,
	MSG_CANCEL,
	MSG_CLOSED,
	MSG_CANCEL_ALL,
};

struct msg {
	struct msg *next;
	enum msg_type type;
	uint64_t conn;
	uint64_t req_id;
	uint32_t status;
	struct seq *seq;
};

struct kvp_sched {
	struct kvp_sched_config cfg;
	uint32_t block_tokens;
	uint32_t n_blocks;
	uint32_t n_vocab;
	int32_t *eog; /* the end-of-generation ids, for the test_eog_after hook */
	size_t n_eog;
	struct kvp_kv_view view;
	struct kvp_fwd *fwd;
	pthread_t thread;
	bool started;

	/* engine thread */
	struct seq_list queue;
	struct seq_list waiting;
	struct seq_list active;
	uint64_t reserved_total;
	float *logits;		   /* max_running * n_vocab */
	struct kvp_fwd_seq *batch; /* max_running */
	struct seq **batch_seq;
	struct kvp_sched_stats st;   /* engine's own copy, published to snap */
	double ttft_ring[TTFT_RING]; /* TTFT of the last TTFT_RING requests, ms */
	uint64_t ttft_n;	     /* samples ever taken; the next goes to % TTFT_RING */
	bool ev_pushed;

	/* inbox: loop -> engine */
	pthread_mutex_t inbox_lock;
	pthread_cond_t inbox_cv;
	struct msg *inbox_head, *inbox_tail;
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
	 * snapshot (stats_lock): the counters, and a copy of the TTFT ring that
	 * kvp_sched_get_stats() sorts for its quantiles.  Sorting there, when a report is
	 * asked for, keeps the engine's step free of it (a sort of 1024 samples per step
	 * was most of a short request's engine time).
	 */
	pthread_mutex_t stats_lock;
	struct kvp_sched_stats snap;
	double snap_ttft[TTFT_RING];
	uint64_t snap_ttft_n;

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
	kvp_sampler_free(q->sampler);
	free(q->prompt);
	free(q->table);
	free(q);
}

uint64_t kvp_sched_blocks_for(const struct kvp_sched *s, uint32_t n_prompt, uint32_t max_new)
{
	uint64_t positions = (uint64_t)n_prompt + max_new - 1;

	return (positions + s->block_tokens - 1) / s->block_tokens;
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
	}
	pthread_mutex_unlock(&s->ev_lock);
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
	struct kvp_sched_event e = {
		.type = KVP_SCHED_EV_TOKEN, .token = token, .conn = q->conn, .req_id = q->req_id
	};
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

static void publish_ready(struct kvp_sched *s, struct seq *q, bool generated);

static void fill_usage(struct kvp_sched *s, struct seq *q, uint32_t status, struct kvp_usage *u)
{
	uint64_t t = kvp_now_ns();
	uint32_t computed = q->gen.n_past < q->gen.n_prompt ? q->gen.n_past : q->gen.n_prompt;

	memset(u, 0, sizeof(*u));
	u->prompt_tokens = q->gen.n_prompt;
	u->cached_tokens = q->n_hit * s->block_tokens;
	u->cache_creation_tokens = q->n_created * s->block_tokens;
	u->recomputed_tokens = computed > u->cached_tokens ? computed - u->cached_tokens : 0;
	u->generated_tokens = q->gen.n_generated;
	u->status = status;
	u->queue_ms = kvp_ns_to_ms((q->t_admit ? q->t_admit : t) - q->t_recv);
	u->ttft_ms = q->t_first ? kvp_ns_to_ms(q->t_first - q->t_recv) : 0;
	u->prefill_ms = kvp_ns_to_ms(q->prefill_ns);
	u->decode_ms = q->t_first ? kvp_ns_to_ms(q->t_last - q->t_first) : 0;
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

/*
 * End @q: DONE (admitted requests, and cancels) or ERROR (@as_error: never admitted or
 * failed), then release everything.  @q is freed.
 */
static void seq_end(struct kvp_sched *s, struct seq *q, uint32_t status, bool as_error,
		    const char *msg)
{
	struct seq *w;

	/*
	 * its K/V is good up to n_past: a next turn continuing on these ids reuses it (not
	 * when the client is gone: no conversation goes on from a reply nobody read)
	 */
	if (!as_error && !q->silent && (status == KVP_OK || status == KVP_E_CANCELLED) &&
	    (q->state == SEQ_PREFILL || q->state == SEQ_DECODE))
		publish_ready(s, q, true);
	if (!q->silent) {
		if (as_error) {
			emit_error(s, q, status, msg ? msg : "request failed");
		} else {
			struct kvp_sched_event e = { .type = KVP_SCHED_EV_TOKEN,
						     .token = -1,
						     .conn = q->conn,
						     .req_id = q->req_id };
			int n = kvp_gen_flush(&q->gen, e.text, sizeof(e.text));

			if (n > 0) {
				e.text_len = (uint32_t)n;
				push_event(s, &e);
			}
			e = (struct kvp_sched_event){ .type = KVP_SCHED_EV_DONE,
						      .token = -1,
						      .conn = q->conn,
						      .req_id = q->req_id };
			fill_usage(s, q, status, &e.usage);
			push_event(s, &e);
		}
	}
	{
		struct kvp_usage u;

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
	}
	if (status == KVP_OK)
		s->st.req_done++;
	else if (status == KVP_E_CANCELLED || status == KVP_E_SHUTDOWN || q->silent)
		s->st.req_cancelled++;
	else
		s->st.req_failed++;
	release_blocks(s, q);
	/* whoever waited for our prefix looks up again at the next step */
	for (w = s->waiting.first; w; w = w->next)
		if (w->wait_on == q)
			w->wait_on = NULL;
	list_del(list_of(s, q), q);
	seq_free(q);
	atomic_fetch_sub(&s->outstanding, 1);
}

/* ---- engine thread: admission ---- */

static uint64_t pool_available(struct kvp_sched *s)
{
	struct kvp_pool_stats ps;
	uint64_t avail = 0;
	uint32_t a;

	kvp_pool_stats(s->cfg.pool, &ps);
	for (a = 0; a < ps.n_arenas; a++)
		avail += (uint64_t)ps.arena[a].free + ps.arena[a].cached;
	return avail > s->reserved_total ? avail - s->reserved_total : 0;
}

/*
 * Is block @h of @q's prompt (and maybe more) being computed right now by a prefilling
 * sequence?  Then *@owner is it and *@until the number of leading blocks @q shares with
 * it that @q could hit.
 */
static bool prefix_in_flight(struct kvp_sched *s, const struct seq *q, uint32_t h,
			     struct seq **owner, uint32_t *until)
{
	uint32_t bt = s->block_tokens;
	uint32_t q_max = (q->gen.n_prompt - 1) / bt; /* most blocks a lookup can give @q */
	struct seq *a;

	if (h >= q_max)
		return false;
	for (a = s->active.first; a; a = a->next) {
		uint32_t a_full = a->gen.n_prompt / bt;
		uint32_t limit;
		uint32_t p;

		if (a->state != SEQ_PREFILL || a->no_cache || a->publish_stopped ||
		    a->n_indexed > h || a_full <= h)
			continue;
		if (memcmp(&a->key.ek, &q->key.ek, sizeof(a->key.ek)))
			continue;
		limit = (a_full < q_max ? a_full : q_max) * bt;
		for (p = 0; p < limit && a->prompt[p] == q->prompt[p]; p++)
			;
		if (p / bt > h) {
			*owner = a;
			*until = p / bt;
			return true;
		}
	}
	return false;
}

static void admit(struct kvp_sched *s)
{
	struct seq *q = s->queue.first;

	while (q && s->active.n < s->cfg.max_running) {
		struct seq *next = q->next;
		struct seq *owner = NULL;
		uint32_t until = 0;
		uint64_t need;
		int n = 0;

		if (!q->no_cache) {
			n = kvp_index_lookup(s->cfg.index, &q->key, (const uint32_t *)q->prompt,
					     q->gen.n_prompt, q->table, q->cap_table);
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
				q = next;
				continue;
			}
		}
		need = q->cap_table - (uint32_t)n;
		if (need > pool_available(s)) {
			unref_table(s, q);
			break; /* FIFO: the head waits for blocks */
		}
		list_del(&s->queue, q);
		q->n_hit = q->n_indexed = (uint32_t)n;
		q->gen.n_past = (uint32_t)n * s->block_tokens;
		q->reserved = (uint32_t)need;
		s->reserved_total += need;
		q->t_admit = kvp_now_ns();
		q->state = SEQ_PREFILL;
		list_add_tail(&s->active, q);
		if (!q->no_cache) {
			s->st.lookups++;
			s->st.lookup_tokens += q->gen.n_prompt;
			s->st.hit_tokens += q->gen.n_past;
			if (n > 0)
				s->st.hit_requests++;
		}
		q = next;
	}
}

/* Requests whose prefix owner published what they wait for (or ended) go first. */
static void wake_waiters(struct kvp_sched *s)
{
	struct seq_list woken = { 0 };
	struct seq *w = s->waiting.first;

	while (w) {
		struct seq *next = w->next;
		struct seq *o = w->wait_on;

		if (w->cancelled || !o || o->n_indexed >= w->wait_blocks ||
		    o->state != SEQ_PREFILL || o->publish_stopped) {
			list_del(&s->waiting, w);
			w->state = SEQ_QUEUED;
			w->wait_on = NULL;
			list_add_tail(&woken, w);
		}
		w = next;
	}
	if (!woken.n)
		return;
	/* splice @woken in front of the queue: they arrived before what is queued now */
	woken.last->next = s->queue.first;
	if (s->queue.first)
		s->queue.first->prev = woken.last;
	else
		s->queue.last = woken.last;
	s->queue.first = woken.first;
	s->queue.n += woken.n;
}

/* ---- engine thread: compute ---- */

/* Make the table cover @n_positions positions, allocating from the reservation. */
static int ensure_blocks(struct kvp_sched *s, struct seq *q, uint32_t n_positions)
{
	uint32_t want = (n_positions + s->block_tokens - 1) / s->block_tokens;

	while (q->n_table < want) {
		uint32_t id;
		int r;

		if (q->n_table >= q->cap_table || !q->reserved)
			return -ENOSPC; /* cannot happen: blocks_for() bounds positions */
		r = kvp_pool_alloc(s->cfg.pool, KVP_NODE_ANY, &id);
		if (r < 0)
			return r;
		q->table[q->n_table++] = id;
		q->reserved--;
		s->reserved_total--;
	}
	return 0;
}

/*
 * Publish every full block filled since the last call, in order: of the prompt only
 * while it is computed; with @generated (at the end) of the generated tokens too, whose
 * ids follow the prompt's in q->prompt.
 */
static void publish_ready(struct kvp_sched *s, struct seq *q, bool generated)
{
	uint32_t bt = s->block_tokens;
	uint32_t upto = q->gen.n_past < q->gen.n_prompt || generated ? q->gen.n_past :
								       q->gen.n_prompt;
	uint32_t filled = upto / bt;

	if (q->no_cache)
		return;
	while (!q->publish_stopped && q->n_indexed < filled) {
		uint32_t i = q->n_indexed;
		uint32_t parent = i ? q->table[i - 1] : KVP_BLOCK_NONE;
		uint32_t out = KVP_BLOCK_NONE;
		int r;

		r = kvp_index_publish(s->cfg.index, &q->key, parent,
				      (const uint32_t *)q->prompt + (size_t)i * bt, q->table[i],
				      &out);
		if (r == 0) {
			q->n_created++;
		} else if (r == 1) {
			/* computed twice after all (e.g. a lookup raced a prefill): share theirs */
			kvp_pool_unref(s->cfg.pool, q->table[i]);
			q->table[i] = out;
		} else {
			q->publish_stopped = true; /* later blocks would have no parent */
			break;
		}
		q->n_indexed++;
	}
}

/*
 * @q sampled @token: emit it, end the request when it should stop.  EOS ends the
 * request without being sent or counted, as kvpool-run does offline (compute/gen.c).
 */
static void took_token(struct kvp_sched *s, struct seq *q, int32_t token)
{
	uint64_t t = kvp_now_ns();
	enum kvp_gen_next next;

	if (!q->t_first) {
		q->t_first = t;
		s->ttft_ring[s->ttft_n++ % TTFT_RING] = kvp_ns_to_ms(t - q->t_recv);
	}
	q->t_last = t;
	next = kvp_gen_take(&q->gen, token);
	if (next != KVP_GEN_EOS)
		emit_token(s, q, token);
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

static void prefill_step(struct kvp_sched *s)
{
	uint32_t budget = s->cfg.prefill_chunk;
	struct seq *q = s->active.first;

	while (q && budget) {
		struct seq *next = q->next;
		uint32_t n;
		uint64_t t0;
		int r;

		if (q->state != SEQ_PREFILL) {
			q = next;
			continue;
		}
		n = kvp_gen_prefill_next(&q->gen, budget);
		r = ensure_blocks(s, q, q->gen.n_past + n);
		if (r < 0) {
			seq_end(s, q, KVP_E_NOSPACE, true, "pool: no block for the prompt");
			q = next;
			continue;
		}
		t0 = kvp_now_ns();
		r = kvp_gen_prefill(&q->gen, s->fwd, &s->view, q->table, q->n_table, n, s->logits);
		q->prefill_ns += kvp_now_ns() - t0;
		if (r < 0) {
			seq_end(s, q, KVP_E_INTERNAL, true, "engine: prefill failed");
			q = next;
			continue;
		}
		budget -= n;
		publish_ready(s, q, false);
		if (kvp_gen_prefilled(&q->gen)) {
			q->state = SEQ_DECODE;
			took_token(s, q, sample(s, q, s->logits));
		}
		q = next;
	}
}

static void decode_step(struct kvp_sched *s)
{
	struct seq *q;
	uint32_t n = 0;
	uint32_t i;
	int r;

	for (q = s->active.first; q && n < s->cfg.max_running; q = q->next) {
		if (q->state != SEQ_DECODE)
			continue;
		if (ensure_blocks(s, q, q->gen.n_past + 1) < 0) {
			q->cancelled = true; /* ended by reap at the next step */
			q->cancel_status = KVP_E_NOSPACE;
			continue;
		}
		s->batch[n] = kvp_gen_decode_seq(&q->gen, q->table, q->n_table);
		s->batch_seq[n++] = q;
	}
	if (!n)
		return;
	r = kvp_fwd_decode(s->fwd, &s->view, s->batch, n, s->logits);
	for (i = 0; i < n; i++) {
		q = s->batch_seq[i];
		if (r < 0) {
			seq_end(s, q, KVP_E_INTERNAL, true, "engine: decode failed");
			continue;
		}
		kvp_gen_decoded(&q->gen);
		took_token(s, q, sample(s, q, s->logits + (size_t)i * s->n_vocab));
	}
}

/* ---- engine thread: inbox, cancellation, stats ---- */

static struct seq *find_seq(struct kvp_sched *s, uint64_t conn, uint64_t req_id)
{
	struct seq_list *lists[] = { &s->queue, &s->waiting, &s->active };
	struct seq *q;
	size_t i;

	for (i = 0; i < 3; i++)
		for (q = lists[i]->first; q; q = q->next)
			if (q->conn == conn && q->req_id == req_id)
				return q;
	return NULL;
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

static void handle_msg(struct kvp_sched *s, struct msg *m)
{
	struct seq *q;

	switch (m->type) {
	case MSG_SUBMIT:
		q = m->seq;
		q->state = SEQ_QUEUED;
		list_add_tail(&s->queue, q);
		s->st.req_total++;
		break;
	case MSG_CANCEL:
		s->st.cancels_received++;
		q = find_seq(s, m->conn, m->req_id);
		if (q && !q->cancelled) {
			q->cancelled = true;
			q->cancel_status = KVP_E_CANCELLED;
		}
		break;
	case MSG_CLOSED:
		mark_all(&s->queue, m->conn, false, KVP_E_CANCELLED, true);
		mark_all(&s->waiting, m->conn, false, KVP_E_CANCELLED, true);
		mark_all(&s->active, m->conn, false, KVP_E_CANCELLED, true);
		break;
	case MSG_CANCEL_ALL:
		mark_all(&s->queue, 0, true, m->status, false);
		mark_all(&s->waiting, 0, true, m->status, false);
		mark_all(&s->active, 0, true, m->status, false);
		break;
	}
}

static void reap_list(struct kvp_sched *s, struct seq_list *l, bool admitted)
{
	struct seq *q = l->first;

	while (q) {
		struct seq *next = q->next;

		if (q->cancelled) {
			/* never admitted and not cancelled by its client: an ERROR says why */
			bool as_error = !admitted && q->cancel_status != KVP_E_CANCELLED;

			seq_end(s, q, q->cancel_status, as_error,
				q->cancel_status == KVP_E_SHUTDOWN ? "daemon: shutting down" :
				q->cancel_status == KVP_E_NOSPACE  ? "pool: out of blocks" :
								     "request cancelled");
		}
		q = next;
	}
}

static void publish_stats(struct kvp_sched *s)
{
	uint64_t i;

	kvp_pool_stats(s->cfg.pool, &s->st.pool);
	kvp_index_stats(s->cfg.index, &s->st.index);
	s->st.queued = s->queue.n;
	s->st.waiting_prefix = s->waiting.n;
	s->st.running = s->active.n;
	s->st.reserved_blocks = s->reserved_total;
	pthread_mutex_lock(&s->stats_lock);
	s->snap = s->st;
	/* only the samples taken since the last publish (the ring keeps the newest) */
	i = s->snap_ttft_n;
	if (s->ttft_n - i > TTFT_RING)
		i = s->ttft_n - TTFT_RING;
	for (; i < s->ttft_n; i++)
		s->snap_ttft[i % TTFT_RING] = s->ttft_ring[i % TTFT_RING];
	s->snap_ttft_n = s->ttft_n;
	pthread_mutex_unlock(&s->stats_lock);
}

static bool has_work(const struct kvp_sched *s)
{
	return s->active.n || s->waiting.n || s->queue.n;
}

static void *engine_main(void *arg)
{
	struct kvp_sched *s = arg;
	bool progress = true;

	pthread_setname_np(pthread_self(), "kvp-engine");
	publish_stats(s);
	for (;;) {
		struct msg *m;
		uint64_t steps_before;

		pthread_mutex_lock(&s->inbox_lock);
		while (!s->stop && !s->inbox_head && (!has_work(s) || !progress)) {
			if (has_work(s)) {
				/* queued work that cannot be admitted yet: look again soon */
				struct timespec ts;

				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_nsec += 20 * 1000000;
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

		while (m) {
			struct msg *next = m->next;

			handle_msg(s, m);
			free(m);
			m = next;
		}

		steps_before = s->st.generated_tokens + s->st.req_done + s->st.req_cancelled +
			       s->st.req_failed;
		reap_list(s, &s->queue, false);
		reap_list(s, &s->waiting, false);
		reap_list(s, &s->active, true);
		wake_waiters(s);
		{
			uint32_t before = s->active.n;

			admit(s);
			progress = s->active.n != before || s->active.n > 0;
		}
		prefill_step(s);
		decode_step(s);
		s->st.steps++;
		progress = progress || steps_before != s->st.generated_tokens + s->st.req_done +
							       s->st.req_cancelled +
							       s->st.req_failed;
		publish_stats(s);
		if (s->ev_pushed) {
			s->ev_pushed = false;
			wake_loop(s);
		}
	}
	return NULL;
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
	    cfg->event_capacity < 16)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
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
	fo = (struct kvp_fwd_opts){ .n_threads = cfg->n_threads,
				    .max_chunk = cfg->prefill_chunk,
				    .max_batch = cfg->max_running };
	r = kvp_fwd_new(&s->fwd, cfg->model, &fo);
	if (r < 0)
		goto err_free;
	r = kvp_fwd_check_view(s->fwd, &s->view);
	if (r < 0)
		goto err_fwd;
	r = -ENOMEM;
	s->logits = calloc((size_t)cfg->max_running * s->n_vocab, sizeof(float));
	s->batch = calloc(cfg->max_running, sizeof(*s->batch));
	s->batch_seq = calloc(cfg->max_running, sizeof(*s->batch_seq));
	s->ev_cap = cfg->event_capacity;
	s->ev = calloc(s->ev_cap, sizeof(*s->ev));
	if (!s->logits || !s->batch || !s->batch_seq || !s->ev)
		goto err_bufs;
	pthread_mutex_init(&s->inbox_lock, NULL);
	pthread_cond_init(&s->inbox_cv, NULL);
	pthread_mutex_init(&s->ev_lock, NULL);
	pthread_cond_init(&s->ev_space, NULL);
	pthread_mutex_init(&s->stats_lock, NULL);
	atomic_init(&s->outstanding, 0);
	atomic_init(&s->draining, false);
	*out = s;
	return 0;
err_bufs:
	free(s->ev);
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
	/* the engine thread is gone: this thread owns the pool now */
	free_list(s, &s->queue);
	free_list(s, &s->waiting);
	free_list(s, &s->active);
	m = s->inbox_head;
	while (m) {
		struct msg *next = m->next;

		seq_free(m->type == MSG_SUBMIT ? m->seq : NULL);
		free(m);
		m = next;
	}
	pthread_mutex_destroy(&s->inbox_lock);
	pthread_cond_destroy(&s->inbox_cv);
	pthread_mutex_destroy(&s->ev_lock);
	pthread_cond_destroy(&s->ev_space);
	pthread_mutex_destroy(&s->stats_lock);
	free(s->ev);
	free(s->batch_seq);
	free(s->batch);
	free(s->logits);
	kvp_fwd_free(s->fwd);
	free(s->eog);
	free(s);
}

/* ---- loop thread side ---- */

static void post(struct kvp_sched *s, struct msg *m)
{
	pthread_mutex_lock(&s->inbox_lock);
	m->next = NULL;
	if (s->inbox_tail)
		s->inbox_tail->next = m;
	else
		s->inbox_head = m;
	s->inbox_tail = m;
	pthread_cond_signal(&s->inbox_cv);
	pthread_mutex_unlock(&s->inbox_lock);
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
	if (!r->n_tokens || !r->max_new || r->salt_len > KVP_SALT_MAX)
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
	if (!q->table) {
		ret = -ENOMEM;
		goto err_msg;
	}
	ek.salt_len = r->salt_len;
	memcpy(ek.salt, r->salt, r->salt_len);
	ret = kvp_prefix_key_init(&q->key, &ek); /* fills @q->key, allocates nothing */
	if (ret < 0)
		goto err_table;
	ret = kvp_sampler_new(&q->sampler, s->n_vocab, &sp);
	if (ret < 0)
		goto err_table;
	q->conn = r->conn;
	q->req_id = r->req_id;
	q->no_cache = r->no_cache;
	q->cap_table = (uint32_t)blocks;
	q->t_recv = r->t_recv_ns;
	/* the prompt, then room for what it generates (published at the end) */
	q->prompt = malloc(((size_t)r->n_tokens + r->max_new) * sizeof(*q->prompt));
	if (!q->prompt) {
		ret = -ENOMEM;
		goto err_sampler;
	}
	memcpy(q->prompt, r->tokens, (size_t)r->n_tokens * sizeof(*q->prompt));
	free(r->tokens); /* ownership passes now that nothing can fail */
	kvp_gen_init(&q->gen, s->cfg.tok, q->prompt, r->n_tokens, r->max_new, !s->cfg.ignore_eos);
	q->gen.kept = q->prompt + r->n_tokens;
	m->type = MSG_SUBMIT;
	m->seq = q;
	atomic_fetch_add(&s->outstanding, 1);
	post(s, m);
	return 0;

err_sampler:
	kvp_sampler_free(q->sampler);
err_table:
	free(q->table);
err_msg:
	free(m);
err_seq:
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

void kvp_sched_get_stats(struct kvp_sched *s, struct kvp_sched_stats *st)
{
	double v[TTFT_RING];
	uint32_t n;

	pthread_mutex_lock(&s->stats_lock);
	*st = s->snap;
	n = s->snap_ttft_n < TTFT_RING ? (uint32_t)s->snap_ttft_n : TTFT_RING;
	memcpy(v, s->snap_ttft, n * sizeof(double));
	st->ttft_samples = s->snap_ttft_n;
	pthread_mutex_unlock(&s->stats_lock);
	/* the order of the samples does not matter for quantiles: sort the copy */
	kvp_sort_doubles(v, n);
	st->ttft_p50_ms = n ? kvp_percentile_sorted(v, n, 50) : 0;
	st->ttft_p99_ms = n ? kvp_percentile_sorted(v, n, 99) : 0;
}
