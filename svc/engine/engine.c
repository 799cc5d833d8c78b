/* SPDX-License-Identifier: MIT */
/*
 * engine.c - the engine thread: continuous batching with chunked prefill, prefix-cache
 * lookup and publish, blocks on demand with preemption, short-first prefill sized to a
 * time budget, priorities, cancellation (see engine.h; docs/daemon.md "Scheduling").
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
 * The step's prefill is sized by time with the cost model of svc/engine/stepcost.c, which
 * prices the step's one call as a whole (one fixed cost, every row alike), measured at
 * start and adapted after every step (or given: cost_call_ns, cost_token_ns).  While
 * sequences decode, the step, their rows included, lasts itl_budget_pct of their decode
 * step alone (the median of the recent ones): their gap between tokens, bounded; prefill
 * gets what is left, at least one token.  While none does, a step of prefill alone
 * computes the chunk whose own work is AUTO_PREFILL_WORK fixed costs (a long prompt
 * pays the fixed cost for a fifth of its time at most: within 1.3x of whole chunks) and
 * a request arriving meanwhile waits for that step, then gets a step of its own: one that
 * ends a prompt takes only other prompts that end, and a prompt not started that fits
 * in twice the budget goes whole.  Prompts that arrive together (a burst) are computed
 * together before their streams are held to a gap: while only the burst's streams
 * decode, a step is a step alone as wide as the burst has prompts left, at most
 * prefill_chunk tokens (plan.c burst_held()).  step_target_ns and prefill_step_ns
 * replace the two budgets when set.
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
 * Where the parts are (svc/engine/, one library that uses shm/, compute/ and util/
 * only): this file owns the thread, the inbox, the event ring, the order of a step
 * (engine_step()), the end of a request and construction; admit.c the blocks as the
 * engine counts them, the queue order, admission and preemption; plan.c what a step
 * computes, FIFO and FAIR as the two entries of its policy table eng_policies[], and
 * calibration; load.c the one publish routine and the reloads from the tiers; ops.c the
 * inbox's messages; usage.c usage and the stats snapshot.  engine_impl.h has the structs.
 *
 * Threads: every function but the public ones runs on the engine thread only, which
 * owns the pool, the index, the forward context and every struct seq once submitted.
 * The loop thread enters only through the public functions at the end of this file
 * and kvp_sched_get_stats() (usage.c), which touch the inbox (inbox_lock), the event
 * ring (ev_lock), the stats snapshot (stats_lock) and atomics.
 */
#include "svc/engine/engine_impl.h"

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
#include "compute/grammar.h"
#include "compute/model.h"
#include "compute/text/tokenizer.h"
#include "svc/engine/sampling.h"
#include "util/log.h"

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

static void wake_loop(struct kvp_sched *s)
{
	uint64_t one = 1;

	/* an eventfd write only fails when the counter would overflow: then it is set */
	if (write(s->cfg.wake_fd, &one, sizeof(one)) < 0)
		return;
}

void eng_push_event(struct kvp_sched *s, const struct kvp_sched_event *e)
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
void eng_flush_events(struct kvp_sched *s)
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
	eng_push_event(s, &e);
}

/*
 * TOKEN event(s) for kept @token: its text in slices that fit an event.  The first
 * token's first event also carries the usage so far (the prompt's counts: read from the
 * cache, written to it, computed), for a client that reports them before the end.
 */
void eng_emit_token(struct kvp_sched *s, struct seq *q, int32_t token)
{
	struct kvp_sched_event e = { .type = KVP_SCHED_EV_TOKEN,
				     .token = token,
				     .conn = q->conn,
				     .req_id = q->req_id,
				     .cont = q->grp ? (int32_t)q->cont : -1 };
	const struct kvp_sample_logprob *lp = kvp_sampler_logprob(q->sampler);
	size_t off = 0;
	bool more;

	if (q->silent)
		return;
	if (lp) { /* with the id, on the first slice */
		e.has_lp = true;
		e.lp = *lp;
	}
	if (!q->usage_sent && !q->cont) {
		eng_fill_usage(s, q, KVP_OK, &e.usage);
		e.has_usage = true;
		q->usage_sent = true;
	}
	do {
		e.text_len = (uint32_t)kvp_gen_text(&q->gen, token, &off, e.text, sizeof(e.text),
						    &more);
		eng_push_event(s, &e);
		e.token = -1; /* the id goes with the first slice only */
		e.has_lp = false;
		e.has_usage = false;
	} while (more);
}

/* Drop @q's reference on every block of its table (hits included); the table is empty. */
void eng_unref_table(struct kvp_sched *s, struct seq *q)
{
	uint32_t i;

	for (i = 0; i < q->n_table; i++)
		kvp_pool_unref(s->cfg.pool, q->table[i]);
	q->n_table = 0;
}

/* ... and give back what it had reserved. */
void eng_release_blocks(struct kvp_sched *s, struct seq *q)
{
	eng_unref_table(s, q);
	s->reserved_total -= q->reserved;
	q->reserved = 0;
}

/* Whoever waited for @q's prefix looks up again at the next step. */
void eng_forget_waiters(struct kvp_sched *s, struct seq *q)
{
	struct seq *w;

	for (w = s->waiting.first; w; w = w->next)
		if (w->wait_on == q)
			w->wait_on = NULL;
}

void eng_seq_end(struct kvp_sched *s, struct seq *q, uint32_t status, bool as_error,
		 const char *msg)
{
	struct kvp_usage gu;
	struct kvp_cache_usage cu;
	struct kvp_spec_usage su;
	bool last = true;

	/*
	 * its K/V is good up to n_past: a next turn continuing on these ids reuses it (not
	 * when the client is gone: no conversation goes on from a reply nobody read)
	 */
	if (!as_error && !q->silent && (status == KVP_OK || status == KVP_E_CANCELLED) &&
	    (q->state == SEQ_PREFILL || q->state == SEQ_DECODE))
		eng_publish_upto(s, q, q->gen.n_past);
	eng_fill_usage(s, q, status, &gu);
	eng_fill_cache_usage(q, &cu);
	if (q->grp) {
		/* a continuation: the group answers once, when its last one ends */
		last = eng_group_end(q, status, &gu, &cu);
		as_error = false;
	}
	eng_fill_spec_usage(q, &su);
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
				eng_push_event(s, &e);
			}
			/* a continuation that is not the last: its text is out, the DONE later */
			if (last) {
				e = (struct kvp_sched_event){ .type = KVP_SCHED_EV_DONE,
							      .token = -1,
							      .conn = q->conn,
							      .req_id = q->req_id,
							      .usage = gu,
							      .has_cu = q->has_cc,
							      .cu = cu,
							      .has_su = q->spec_usage,
							      .su = su };
				eng_push_event(s, &e);
			}
		}
	}
	eng_usage_sum(s, q, status);
	if (!last)
		; /* the group's request ends with its last continuation */
	else if (status == KVP_OK)
		s->st.req_done++;
	else if (status == KVP_E_CANCELLED || status == KVP_E_SHUTDOWN || q->silent)
		s->st.req_cancelled++;
	else
		s->st.req_failed++;
	eng_release_blocks(s, q);
	eng_forget_waiters(s, q);
	list_del(list_of(s, q), q);
	seq_free(q);
	atomic_fetch_sub(&s->outstanding, 1);
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

			eng_seq_end(s, q, q->cancel_status, as_error,
				    q->cancel_status == KVP_E_SHUTDOWN ? "daemon: shutting down" :
				    q->cancel_status == KVP_E_NOSPACE  ? "pool: out of blocks" :
									 "request cancelled");
		}
		q = next;
	}
}

bool eng_has_work(const struct kvp_sched *s)
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
		eng_calibrate(s);
	eng_tier_step(s);
	reap_list(s, &s->queue, false);
	reap_list(s, &s->waiting, false);
	reap_list(s, &s->active, true);
	eng_wake_waiters(s);
	active_before = s->active.n;
	eng_admit(s);
	t0 = now_ns(s);
	worked = s->pol->compute(s);
	if (worked) {
		s->st.steps++;
		kvp_samples_add(&s->step, kvp_ns_to_ms(now_ns(s) - t0));
	}
	if (s->tiering)
		kvp_tiering_offload(s->tiering, (uint32_t)eng_pool_unreserved(s));
	if (eng_writeback_pending(s))
		eng_writeback_step(s);
	if (s->remoting)
		kvp_remoting_offload(s->remoting, (uint32_t)eng_pool_unreserved(s));
	eng_publish_stats(s);
	eng_flush_events(s);
	return worked || s->active.n != active_before ||
	       ended_before != s->st.req_done + s->st.req_cancelled + s->st.req_failed;
}

/* Take the inbox (the caller holds inbox_lock) and handle it. */
static void take_inbox(struct kvp_sched *s, struct msg *m)
{
	while (m) {
		struct msg *next = m->next;

		eng_handle_msg(s, m);
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
	eng_publish_stats(s);
	for (;;) {
		bool disk_io = kvp_tiering_in_flight(s->tiering) > 0;
		bool io = disk_io || kvp_remoting_in_flight(s->remoting) > 0;
		struct msg *m;

		pthread_mutex_lock(&s->inbox_lock);
		while (!s->stop && !s->inbox_head && (!eng_has_work(s) || !progress) && !io &&
		       !eng_writeback_pending(s)) {
			/* queued work that cannot be admitted yet, or leases that may expire:
			 * look again soon; a chain summary due: wake for it (idle hosts too
			 * keep theirs in the store) */
			uint32_t ms = eng_has_work(s) || s->leases.n ?
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
	return eng_has_work(s);
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
	if (!r && eng_pool_available(s) < s->reserved_total) {
		struct kvp_pool_stats ps;

		kvp_pool_stats(s->cfg.pool, &ps);
		r = check_fail(err, cap,
			       "available blocks %llu below the reservations %llu (free %u, "
			       "cached %u, written now %u)",
			       (unsigned long long)eng_pool_available(s),
			       (unsigned long long)s->reserved_total, ps.arena[0].free,
			       ps.arena[0].cached, kvp_tiering_pinned_idle(s->tiering));
	}
	free(refs);
	return r;
}

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
	kvp_samples_init(&s->ttft, s->ttft_buf, TTFT_RING);
	kvp_samples_init(&s->itl, s->itl_buf, ITL_RING);
	kvp_samples_init(&s->step, s->step_buf, STEP_RING);
	kvp_samples_init(&s->snap_ttft, s->snap_ttft_buf, TTFT_RING);
	kvp_samples_init(&s->snap_itl, s->snap_itl_buf, ITL_RING);
	kvp_samples_init(&s->snap_step, s->snap_step_buf, STEP_RING);
	s->pol = &eng_policies[cfg->policy];
	hp = kvp_model_hparams(cfg->model);
	s->n_vocab = hp->n_vocab;
	if (cfg->tok) { /* the test_eog_after hook; a grammar's end (svc/engine/sampling.h) */
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
	if (eng_spec_setup(s) < 0) /* may grow s->logits for the drafts' rows */
		goto err_bufs;
	if (cfg->tier) {
		r = kvp_tiering_new(&s->tiering, cfg->tier, cfg->pool, cfg->index,
				    cfg->tier_high_pct, cfg->tier_low_pct, eng_read_done, s);
		if (r < 0)
			goto err_bufs;
	}
	if (cfg->remote) {
		r = kvp_remoting_new(&s->remoting, cfg->remote, cfg->remote_domain, cfg->pool,
				     cfg->index, cfg->tier_high_pct, cfg->tier_low_pct,
				     eng_fetch_done, s);
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
	eng_calibrate(s);
	eng_publish_stats(s);
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
		eng_release_blocks(s, q);
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
	kvp_grammar_vocab_free(s->gvocab);
	free(s->pkeys);
	free(s->batch_seq);
	free(s->batch);
	free(s->logits);
	kvp_fwd_free(s->fwd);
	free(s->eog);
	free(s);
}

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
	size_t need;
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
	if (cc.n > 1 &&
	    (!s->pol->forks || cc.n > s->cfg.max_running || r->op != KVP_SCHED_OP_GENERATE))
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
		goto err_msg;
	ret = kvp_sampler_new(&q->sampler, s->n_vocab, &sp);
	if (ret < 0)
		goto err_msg;
	if (r->samp) { /* logit bias, penalties, logprobs, a grammar */
		ret = kvp_sched_sampling_apply(q->sampler, r->samp, &s->gvocab, s->cfg.tok, s->eog,
					       s->n_eog);
		if (ret < 0) {
			kvp_sampler_free(q->sampler);
			goto err_msg;
		}
	}
	/*
	 * The prompt's buffer becomes the history, the prompt then the tokens generated:
	 * kept as it came when it has room for both (ipc/ allocates it so), else grown.
	 * The last step that can fail: until it succeeds @r->tokens is the caller's.
	 */
	need = (size_t)r->n_tokens + r->max_new;
	if ((size_t)(r->cap_tokens ? r->cap_tokens : r->n_tokens) >= need) {
		q->hist = r->tokens;
		atomic_fetch_add(&s->prompts_moved, 1);
	} else {
		q->hist = realloc(r->tokens, need * sizeof(int32_t));
		if (!q->hist) {
			kvp_sampler_free(q->sampler);
			ret = -ENOMEM;
			goto err_msg;
		}
		atomic_fetch_add(&s->prompts_grown, 1);
	}
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
	eng_spec_init(s, q, r->speculative);
	q->spec_usage = r->spec_usage;
	kvp_sched_sampling_free(r->samp); /* the sampler holds what it needs */
	m->type = MSG_SUBMIT;
	m->seq = q;
	atomic_fetch_add(&s->outstanding, 1);
	post(s, m);
	return 0;

err_msg:
	free(m);
err_seq:
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
