/* SPDX-License-Identifier: MIT */
/*
 * plan.c - what a step computes: the forward calls (or the test hooks), prefill chunks,
 * the decode batch, FAIR's one mixed call sized by the step-cost model, sampling with
 * parallel-sampling forks, and the calibration that measures the model at
 * start (engine.c's opening comment: "Prefill").
 * Thread: the engine thread.
 */
#include "svc/engine/engine_impl.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compute/forward.h"
#include "compute/model.h"
#include "util/log.h"

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
 * Return: whether @q still runs (false: it ended and is freed).
 */
bool eng_took_token(struct kvp_sched *s, struct seq *q, int32_t token)
{
	uint64_t t = now_ns(s);
	enum kvp_gen_next next;

	if (!q->t_first) {
		q->t_first = t;
		/* this step is counted once it is over (engine_step()): + 1 */
		q->ttft_steps = (uint32_t)(s->st.steps + 1 - q->step_recv);
		kvp_samples_add(&s->ttft, kvp_ns_to_ms(t - q->t_recv));
	}
	next = kvp_gen_take(&q->gen, token);
	if (next != KVP_GEN_EOS) {
		if (q->gen.n_generated > 1) {
			double gap = kvp_ns_to_ms(t - q->t_last);

			for (uint32_t b = kvp_hist_bucket(gap / 1000); b < KVP_SCHED_ITL_BUCKETS;
			     b++)
				s->st.itl_le[b]++;
			s->st.itl_count++;
			s->st.itl_sum_ms += gap;
			kvp_samples_add(&s->itl, gap);
		}
		q->t_last = t;
		q->hist[q->gen.n_prompt + q->gen.n_generated - 1] = token;
		eng_emit_token(s, q, token);
	}
	if (next == KVP_GEN_CONTINUE)
		return true;
	eng_seq_end(s, q, KVP_OK, false, NULL);
	return false;
}

/*
 * Sample @q's next token from @logits.  The test_eog_after hook (tests only) raises
 * every end-of-generation id once @q has kept that many tokens, so a model with
 * synthetic weights ends its turns like a trained one.
 */
int32_t eng_sample(struct kvp_sched *s, struct seq *q, float *logits)
{
	if (s->cfg.test_eog_after && q->gen.n_generated >= s->cfg.test_eog_after)
		for (size_t i = 0; i < s->n_eog; i++)
			logits[s->eog[i]] += 1e4f;
	return kvp_sampler_sample(q->sampler, logits);
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
	/* the same extras (bias, penalties, logprobs, its grammar from the start) */
	if (!c->table || !c->hist || kvp_sampler_new_like(&c->sampler, q->sampler, sp.seed) < 0) {
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
	c->spec_usage = q->spec_usage;
	c->grp = q->grp;
	c->burst = q->burst; /* held to a gap with its prompt's burst, not before */
	c->cont = i;
	c->arrival = q->arrival;
	c->admit_no = ++s->admissions;
	c->t_recv = q->t_recv;
	c->step_recv = q->step_recv;
	c->t_admit = q->t_admit;
	c->t_served = q->t_served;
	list_add_tail(&s->active, c);
	atomic_fetch_add(&s->outstanding, 1);
	q->grp->live++;
	s->st.cache.continuations++;
	/* its own sampler over the same logits: the copy, since sampling may change them */
	memcpy(s->fork_logits + s->n_vocab, s->fork_logits, (size_t)s->n_vocab * sizeof(float));
	eng_took_token(s, c, eng_sample(s, c, s->fork_logits + s->n_vocab));
	return 0;
}

/*
 * The positions before decoding are computed: sample the first token from @logits (its
 * last position's; NULL when no position was computed), or go on.
 */
static void prefill_done(struct kvp_sched *s, struct seq *q, float *logits)
{
	if (q->pin_op) {
		eng_pin_finish(s, q);
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
		eng_took_token(s, q, eng_sample(s, q, logits));
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
	eng_publish_upto(s, q, q->gen.n_past);
	if (q->gen.n_past == q->n_fill) {
		prefill_done(s, q, logits);
		eng_flush_events(s); /* a first token leaves now, not after the step */
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

	r = eng_ensure_blocks(s, q, q->gen.n_past + n);
	if (r < 0) {
		eng_seq_end(s, q, KVP_E_NOSPACE, true, "pool: no block for the prompt");
		return r;
	}
	t0 = now_ns(s);
	r = fwd_prefill(s, q, n);
	dt = now_ns(s) - t0;
	if (r < 0) {
		q->prefill_ns += dt;
		eng_seq_end(s, q, KVP_E_INTERNAL, true, "engine: prefill failed");
		return r;
	}
	kvp_stepcost_observe_prefill(&s->cost, n, q->gen.n_past, (double)dt);
	s->st.prefill_tokens += n;
	prefill_advanced(s, q, n, dt, s->logits);
	return 0;
}

/* FIFO: up to prefill_chunk tokens, in admission order. */
static bool prefill_fifo(struct kvp_sched *s)
{
	uint32_t budget = s->cfg.prefill_chunk;
	struct seq *q = s->active.first;
	bool worked = false;
	uint64_t tokens_before = s->st.prefill_tokens;

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
	s->st.prefill_steps += s->st.prefill_tokens != tokens_before;
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
 * block like one eng_take_block() gives.  Return: 0, or -ENOSPC (as eng_ensure_blocks()).
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
	if (!q->reserved && (!s->pol->on_demand || !eng_pool_unreserved(s)))
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
		while ((r = eng_ensure_blocks(s, q, q->gen.n_past + 1)) < 0 ||
		       (r = writable_tail(s, q)) < 0) {
			struct seq *v;

			/* blocks of an earlier victim still being written: this step needs them */
			if (kvp_tiering_pinned_idle(s->tiering)) {
				kvp_tiering_poll(s->tiering, true);
				continue;
			}
			v = s->pol->preempts ? eng_pick_victim(s, INT64_MAX) : NULL;
			/* alone, it would only come back to the same shortage */
			if (!v || (v == q && s->active.n == 1)) {
				q->cancelled = true; /* ended by reap at the next step */
				q->cancel_status = KVP_E_NOSPACE;
				break;
			}
			eng_preempt(s, v);
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
			eng_seq_end(s, q, KVP_E_INTERNAL, true, "engine: decode failed");
			continue;
		}
		kvp_gen_decoded(&q->gen);
		eng_took_token(s, q, eng_sample(s, q, s->logits + (size_t)i * s->n_vocab));
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
	s->st.decode_rows += n;
	decode_finish(s, n, r);
	return true;
}

/*
 * FAIR's step budgets (docs/daemon.md "Steps sized by time").  While @nd sequences
 * decode, the whole step, their rows included, lasts what their gap between tokens may:
 * itl_budget_pct of their decode step alone, as measured for that batch (the step
 * model's scales follow the chunks, whose attention at a long context priced one decode
 * row at two steps); prefill gets the rest, at least one token.  An explicit
 * step_target_ms replaces it, with prefill given at least what the rows cost.
 */
double eng_budget_decoding(struct kvp_sched *s, uint32_t nd)
{
	double dec = kvp_stepcost_decode_ns(&s->cost, nd), t;

	if (s->cfg.step_target_ns)
		t = (double)s->cfg.step_target_ns > 2 * dec ? (double)s->cfg.step_target_ns :
							      2 * dec;
	else
		t = s->itl_x * dec;
	s->st.step_target_ms = t / 1e6;
	return t;
}

/*
 * While nothing decodes, a step of prefill alone whose first chunk starts after @ctx
 * positions: the chunk whose own work is AUTO_PREFILL_WORK fixed costs (a count of
 * tokens from the model's shape, so the machine's load does not move it), and at least
 * a stream's inter-token budget.  An explicit prefill_step_ms replaces it.
 */
static double budget_alone(struct kvp_sched *s, uint32_t ctx)
{
	double t, one = s->itl_x * kvp_stepcost_decode_ns(&s->cost, 1);
	uint32_t n;

	if (s->cfg.prefill_step_ns) {
		t = (double)s->cfg.prefill_step_ns;
	} else {
		n = kvp_stepcost_floor_tokens(&s->cost, s->fixed_ns, AUTO_PREFILL_WORK, ctx,
					      s->cfg.prefill_chunk);
		/*
		 * and at least the smallest chunk the model was fitted on: below it the
		 * kernels' token blocks run part empty and a token costs more than the line
		 * says (1b Q4_K_M here: 8-token steps made a long prompt 3x the first
		 * policy's)
		 */
		if (n < CAL_N)
			n = CAL_N < s->cfg.prefill_chunk ? CAL_N : s->cfg.prefill_chunk;
		t = kvp_stepcost_prefill_ns(&s->cost, n, ctx);
		t = t > one ? t : one;
	}
	s->st.prefill_step_ms = t / 1e6;
	return t;
}

/*
 * FAIR: prompts that arrive together are computed together (a burst) before the streams
 * they start are held to the inter-token budget.  A stream's gap is the price of every
 * row beside it, and beside the first stream of a burst to start the others' prompts
 * got only what fits in two of its decode steps: 8 clients at once had 0.77x the first
 * policy's throughput in test_sched_policy's fake model (100-token prompts, 64 tokens
 * each).  So while no decoding stream is held to a gap (nothing decodes, or only
 * streams of the burst), a step is a prefill step alone with the burst's decode rows
 * riding along, and it counts the burst: as many steps alone as the burst has prompts
 * (the tokens still at most prefill_chunk_tokens, the first policy's chunk), in one
 * call, until its last prompt is computed (as many as it has left made the steps
 * narrower as its streams started, and its last prompts were cut small again).  The
 * burst is what was taken from the inbox by the end of the step it began in, and the
 * stragglers after it: prompts sent at once reach the engine over a few steps on a
 * loaded machine (with only the first step's arrivals, 8 prompts of which the last 3
 * came two steps late took 28 steps to their first tokens, against 4 arriving
 * together: a later prompt brings back steps alone one budget wide).  A straggler is
 * taken by the end of the step after the burst's last arrival, within BURST_JOIN_STEPS
 * of its first: a request that comes steps into a long prefill is not one (it would
 * widen the long prompt's steps, and the next short request would wait for those),
 * and arrivals that keep coming do not keep the burst open.  It closes when the last of its
 * prompts is computed, and from the next step on its streams are held like any other.
 * A prompt arriving later is not in it: it waits for the step under way, then the steps
 * are steps alone again (its TTFT bound), and once it decodes the budget is its gap.
 * *@width: the steps alone this step may hold (1 unless a burst's prompts alone wait).
 * Return: the decode rows of this step (s->batch_seq[0 .. @nd)) held to a gap.
 */
/*
 * Steps after a burst's first within which stragglers (each taken by the end of the step
 * after the last arrival) join it: a sending spread over a few steps under load; 4
 * bounds how long its streams can go unheld for joiners.
 */
#define BURST_JOIN_STEPS 4

static uint32_t burst_held(struct kvp_sched *s, uint32_t nd, uint32_t *width)
{
	uint32_t held = 0, pending = 0;
	bool later = false;
	struct seq *q;

	for (q = s->active.first; q; q = q->next)
		pending += q->burst && q->state == SEQ_PREFILL;
	if (!pending)
		for (q = s->active.first; q; q = q->next)
			q->burst = false;
	for (uint32_t i = 0; i < nd; i++)
		held += !s->batch_seq[i]->burst;
	*width = 1;
	if (held)
		return held;
	if (!pending) {
		s->burst_step = s->burst_last = s->st.steps;
		s->burst_n = 0;
	}
	/* by arrival (the active list's order within a step's admissions): stragglers chain */
	for (q = s->active.first; q; q = q->next) {
		if (q->state != SEQ_PREFILL || q->burst)
			continue;
		if (q->resumed || q->tok_computed || q->step_recv > s->burst_last + 1 ||
		    q->step_recv > s->burst_step + BURST_JOIN_STEPS) {
			later = true; /* a later prompt waits: steps alone */
			continue;
		}
		q->burst = true;
		pending++;
		s->burst_n++;
		if (q->step_recv > s->burst_last)
			s->burst_last = q->step_recv;
	}
	*width = pending && !later ? s->burst_n : 1;
	return 0;
}

/*
 * FAIR: after the @nd decode rows already in the step (*@rows rows, *@attn positions of
 * attention so far), @held of them held to a gap, the step alone @width wide
 * (burst_held()), choose the prefill chunks, by priority and shortest remaining (aged), sized so the
 * step fits its time budget; give each its blocks and add it to s->parts after the
 * decode rows (s->part_seq[i] its sequence).  Return: chunks planned.
 */
static uint32_t plan_prefill(struct kvp_sched *s, uint32_t nd, uint32_t held, uint32_t width,
			     double *rows, double *attn)
{
	struct prefill_key *keys = s->pkeys;
	uint32_t n_keys = 0, n_plan = 0;
	/* draft rows come out of the same rows (eng_spec_plan() leaves at least one) */
	uint32_t tokens_left = s->cfg.prefill_chunk - s->spec_rows;
	uint64_t t = now_ns(s);
	uint64_t aging_ns = (uint64_t)s->cfg.aging_ms * 1000000;
	bool ended = false;
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
	if (held) {
		limit = eng_budget_decoding(s, nd);
	} else {
		/*
		 * a step alone, and what the burst's rows riding along add to it (priced
		 * past the few-row counts: their share of a step, not a count's ratio)
		 */
		limit = budget_alone(s, keys[0].q->gen.n_past) * width;
		if (nd)
			limit += kvp_stepcost_step_ns(&s->cost, KVP_STEPCOST_ROWS + *rows, *attn) -
				 kvp_stepcost_step_ns(&s->cost, KVP_STEPCOST_ROWS, 0);
	}
	for (uint32_t i = 0; i < n_keys && tokens_left && nd + n_plan < s->cfg.max_running; i++) {
		struct seq *q = keys[i].q;
		uint32_t ctx = q->gen.n_past;
		uint32_t left = q->n_fill - ctx;
		uint32_t cap = left < tokens_left ? left : tokens_left;
		uint32_t n;

		if (!left) {
			prefill_done(s, q, NULL); /* a resumed sequence found all of it cached */
			continue;
		}
		n = kvp_stepcost_fit_step(&s->cost, limit, *rows, *attn, ctx, cap);
		if (!n) {
			/* the step's first chunk always goes: prefill advances */
			if (n_plan)
				break;
			n = 1;
		}
		/*
		 * no stream held to a gap, a prompt not started that fits in twice the
		 * budget goes whole: a short prompt is not cut at a long one's chunk (its
		 * first token a fixed cost sooner)
		 */
		if (!held && !n_plan && n < left && cap == left && !q->tok_computed &&
		    !q->tok_resume && kvp_stepcost_prefill_ns(&s->cost, left, ctx) <= 2 * limit)
			n = left;
		/*
		 * with no stream held to a gap, a step that ends a prompt (a first token)
		 * takes only other prompts that end: a short request that came during a
		 * long prefill waits for the step under way and then its own chunk, not for
		 * the long prompt's next one too (with streams the budget is their gap
		 * already); in a burst too: a short prompt of it is not made to wait for a
		 * long one's chunk as wide as the burst
		 */
		if (ended && n < left)
			break;
		if (eng_ensure_blocks(s, q, ctx + n) < 0) {
			eng_seq_end(s, q, KVP_E_NOSPACE, true, "pool: no block for the prompt");
			continue;
		}
		if (n == left && !held)
			ended = true;
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
	uint32_t nd = decode_prepare(s), np, held, width;
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
	s->spec_rows = 0;
	if (s->spec_max)
		eng_spec_plan(s, nd, &rows, &attn); /* drafts: rows of their decode parts */
	held = burst_held(s, nd, &width);
	np = plan_prefill(s, nd, held, width, &rows, &attn);
	if (!nd && !np)
		return false;
	t0 = now_ns(s);
	r = fwd_step(s, nd, np);
	dt = now_ns(s) - t0;
	/* a step with drafts is no decode step of nd alone */
	if (np || s->spec_rows)
		kvp_stepcost_observe_step(&s->cost, rows, attn, (double)dt);
	else
		kvp_stepcost_observe_decode(&s->cost, nd, (double)dt);
	s->st.decode_rows += nd;
	s->st.prefill_steps += np != 0;
	s->st.prefill_tokens += (uint64_t)(rows - nd - s->spec_rows);
	/* first tokens before the streams' next ones (prefill_advanced flushes them) */
	for (uint32_t i = 0; i < np; i++) {
		struct seq *q = s->part_seq[i];

		if (r < 0) {
			q->prefill_ns += dt;
			eng_seq_end(s, q, KVP_E_INTERNAL, true, "engine: prefill failed");
			continue;
		}
		prefill_advanced(s, q, s->parts[nd + i].n, dt,
				 s->logits + (size_t)(nd + s->spec_rows + i) * s->n_vocab);
	}
	if (s->spec_max)
		eng_spec_finish(s, nd, np, r, dt);
	else
		decode_finish(s, nd, r);
	return true;
}

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
 * What noise on a shared machine can make of the fit (three calls, three unknowns: an
 * error in one timing moves all three), bounded by what the model's shape and the
 * decode step say: a call's fixed cost is at most a decode step of one (which pays it;
 * measured: an intercept of 248 ms next to a 31 ms decode step made the prefill step
 * alone 1.2 s), and attention per position is within 4x either way of the share its
 * multiply-adds have of a token's (2 per head dimension and layer, QK and AV, against
 * the matrices': fitted at 128 positions it came out 60x that, a 4,000-token prompt's
 * last chunks a few tokens each).  When either moved, the cost per token is fitted again
 * to the three timings with the other two fixed.
 */
static void cal_bound(struct kvp_sched *s, const double n[3], const double ctx[3],
		      const double t[3])
{
	const struct kvp_model_hparams *hp = kvp_model_hparams(s->cfg.model);
	struct kvp_stepcost *c = &s->cost;
	double qd = (double)hp->n_heads * hp->head_dim, kvd = (double)hp->n_kv_heads * hp->head_dim;
	double mat = (double)hp->n_layers * (2 * hp->n_embd * qd + 2 * hp->n_embd * kvd +
					     3.0 * hp->n_embd * hp->n_ff) +
		     (double)hp->n_embd * hp->n_vocab;
	double prior = c->p1 * 2.0 * hp->n_layers * qd / mat;
	double p0 = c->p0, p2 = c->p2, sn = 0, sd = 0;

	if (p0 > c->d1)
		p0 = c->d1;
	if (p2 > 4 * prior)
		p2 = 4 * prior;
	else if (p2 < prior / 4)
		p2 = prior / 4;
	if (p0 == c->p0 && p2 == c->p2)
		return;
	/* least squares of t_i - p0 - p2 a_i = n_i p1 */
	for (int i = 0; i < 3; i++) {
		sn += (t[i] - p0 - p2 * n[i] * (ctx[i] + n[i] / 2)) * n[i];
		sd += n[i] * n[i];
	}
	kvp_stepcost_init(c, p0, sn / sd > 0 ? sn / sd : c->p1, p2, c->d1);
}

/*
 * Measure this model on this machine (FAIR): a prefill call of one token and of CAL_N
 * at context 0 and at CAL_CTX, a decode step of one sequence, in free blocks that are
 * given back unpublished.  Sets the cost model and the step budgets, and logs them.
 * With cost_call_ns and cost_token_ns given, the model is those figures, frozen.
 */
void eng_calibrate(struct kvp_sched *s)
{
	uint32_t n_cal = blocks_of(s, CAL_CTX + CAL_N + 1);
	uint32_t table[64];
	int32_t tokens[CAL_CTX + CAL_N];
	uint32_t got = 0, i;
	double ta = 0, tm = 0, tb = 0, d1 = 0;
	bool given = s->cfg.cost_call_ns && s->cfg.cost_token_ns;

	s->calibrated = true;
	s->itl_x = (s->cfg.itl_budget_pct ? s->cfg.itl_budget_pct : AUTO_ITL_BUDGET_PCT) / 100.0;
	if (!s->pol->calibrates)
		return;
	for (i = 0; i < CAL_CTX + CAL_N; i++)
		tokens[i] = (int32_t)(i % s->n_vocab);
	if (!given && n_cal <= 64 && eng_pool_unreserved(s) >= n_cal)
		for (got = 0; got < n_cal; got++)
			if (kvp_pool_alloc(s->cfg.pool, KVP_NODE_ANY, &table[got]) < 0)
				break;
	if (!given && got == n_cal) {
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
	if (given) {
		double call = (double)s->cfg.cost_call_ns, tok = (double)s->cfg.cost_token_ns;

		kvp_stepcost_init(&s->cost, call, tok, 0, call + tok);
		s->cost.frozen = true;
	} else if (ta > 0 && tm > 0 && tb > 0) {
		const double n[3] = { CAL_N, CAL_CTX - CAL_N, CAL_N };
		const double ctx[3] = { 0, CAL_N, CAL_CTX };
		const double t[3] = { ta, tm, tb };

		kvp_stepcost_fit(&s->cost, n, ctx, t, d1);
		cal_bound(s, n, ctx, t);
	} else {
		kvp_stepcost_init(&s->cost, 0, 0, 0, 0); /* no room to measure: defaults */
	}
	/*
	 * The fixed cost is the fit's intercept, but a call of one token (the decode step)
	 * pays it too, less that token: the direct measurement bounds an intercept that the
	 * matmul's row tiles (12 rows at a time) can pull low, which made prefill steps
	 * alone too short and a long prompt up to 1.7x slower in some daemon starts.
	 */
	s->fixed_ns = s->cost.d1 - s->cost.p1 > s->cost.p0 ? s->cost.d1 - s->cost.p1 : s->cost.p0;
	s->st.calib_decode_ms = s->cost.d1 / 1e6;
	s->st.calib_call_ms = s->cost.p0 / 1e6;
	s->st.calib_token_ms = s->cost.p1 / 1e6;
	kvp_log(LOG_INFO,
		"engine: %s a decode step of one sequence at %.2f ms, a prefill call at %.2f ms "
		"+ %.3f ms per token + %.5f ms per token per position; step budget %.1f ms "
		"while one stream decodes (%.0f%% of its step), %.1f ms for prefill alone",
		given ? "given" : "measured", s->cost.d1 / 1e6, s->cost.p0 / 1e6, s->cost.p1 / 1e6,
		s->cost.p2 / 1e6, eng_budget_decoding(s, 1) / 1e6, s->itl_x * 100,
		budget_alone(s, 0) / 1e6);
}

/* FIFO's step: prefill chunks in admission order, one call each, then one decode call. */
static bool step_fifo(struct kvp_sched *s)
{
	bool worked = prefill_fifo(s);

	eng_flush_events(s); /* first tokens leave before the decode step */
	return decode_step(s) || worked;
}

/*
 * The two policies (scheduler.policy; engine.c's opening comment): the engine asks the
 * policy what to do where they differ, never which one it runs.
 */
const struct eng_policy eng_policies[] = {
	[KVP_SCHED_FAIR] = { .name = "fair",
			     .compute = mixed_step,
			     .queue_before = eng_queue_fair,
			     .reserve_whole = false,
			     .on_demand = true,
			     .headroom = true,
			     .preempts = true,
			     .calibrates = true,
			     .forks = true,
			     .drafts = true },
	[KVP_SCHED_FIFO] = { .name = "fifo",
			     .compute = step_fifo,
			     .queue_before = eng_queue_fifo,
			     .reserve_whole = true,
			     .on_demand = false,
			     .headroom = false,
			     .preempts = false,
			     .calibrates = false,
			     .forks = false,
			     .drafts = false },
};
static_assert(sizeof(eng_policies) / sizeof(eng_policies[0]) == KVP_SCHED_FIFO + 1,
	      "one entry per enum kvp_sched_policy");
