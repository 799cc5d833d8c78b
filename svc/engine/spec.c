/* SPDX-License-Identifier: MIT */
/*
 * spec.c - speculative decoding in the engine's step (issue 28): a generating sequence
 * whose request speculates proposes drafts from its own tokens (compute/draft.h, prompt
 * lookup), and its decode row in FAIR's mixed step becomes the part {last, d1 .. dk}
 * with every row's logits.  After the step the picks are taken in order while each is
 * the next row's draft (the first other one is kept too: the model's own next token),
 * exactly as one decode step per token would have taken them, so greedy output is the
 * same with and without drafts.
 *
 * What a rejected draft leaves behind is taken back before anything can see it:
 *  - its K/V stays past n_past, where nothing reads (a query attends to positions up to
 *    its own) and the next step writes again; n_past counts only rows whose input
 *    stood, so eng_publish_upto() never publishes a block holding a rejected row;
 *  - a block taken only for draft rows that did not stand is given back (to the
 *    reservation it came from), so the table has what one decode step per token gives;
 *  - draft rows never take a block that is not free and unclaimed (no eviction of a
 *    cached block, no preemption, no other request's reservation), so the prefix cache
 *    and every other request see the pool as without drafts.
 *
 * Budget: the draft rows go into the step before its prefill chunks, through the step
 * cost model (svc/engine/stepcost.h): they fit in the step budget the streams' gap
 * allows (eng_budget_decoding()), half of what it leaves over the decode rows while a
 * prompt waits, and they leave prefill at least one of the step's prefill_chunk rows.
 * Each sequence's k follows its acceptance and what its rows cost (kvp_draft_step_cost():
 * the step's time when it ran alone, else the cost model's price of its rows alone).
 *
 * Sampled requests (temperature > 0) draft when they ask for it (KVP_SCHED_SPEC_ON; the
 * daemon's default drafts for greedy ones only), with the same rule: row i's token is
 * drawn by the sequence's own sampler from row i's logits, one draw per token in order,
 * as a step per token would have drawn it, and the draft stands when the draw equals it.
 * For a draft that is one token (prompt lookup proposes, it does not sample: q = 1 on
 * the draft) this is the speculative-sampling rule: the draft d is kept with probability
 * p(d) = min(1, p(d) / q(d)), and on rejection the token is drawn from p without d,
 * renormalized (the residual max(0, p - q)).  So the output is not only distributed as
 * without drafts: with the same seed it is the same tokens (rows exact, below).
 *
 * FAIR only (FIFO's decode call takes one row per sequence), and only where a row's
 * result does not depend on the rows beside it (kvp_fwd_rows_exact(): no f32
 * projection) and the K/V type lets rows be taken back (kvp_gen_spec_kv_cap(): none
 * for int4, int8 within the block).  Parallel continuations (n > 1) do not draft.
 * Thread: the engine thread.
 */
#include "svc/engine/engine_impl.h"

#include <errno.h>
#include <stdlib.h>

#include "compute/forward.h"
#include "shm/pool.h"
#include "util/log.h"

#define SPEC_ROWS_MAX 64u /* draft rows in one step, all sequences together */

int eng_spec_setup(struct kvp_sched *s)
{
	float *l;

	s->spec_max = 0;
	if (s->cfg.speculative == KVP_SCHED_SPEC_OFF || !s->pol->drafts)
		return 0;
	/* test hooks: only when asked for (ON), and with a step hook for the rows */
	if (s->cfg.hooks ? !s->cfg.hooks->step || s->cfg.speculative != KVP_SCHED_SPEC_ON :
			   !kvp_fwd_rows_exact(s->fwd))
		return 0;
	if (s->view.geom.shape.dtype == KVP_DTYPE_INT4 || s->cfg.prefill_chunk < 2)
		return 0;
	s->spec_max = s->cfg.prefill_chunk - 1 < SPEC_ROWS_MAX ? s->cfg.prefill_chunk - 1 :
								 SPEC_ROWS_MAX;
	/* the drafts' logits rows come after the decode rows, before the chunks' */
	l = realloc(s->logits,
		    ((size_t)s->cfg.max_running + s->spec_max) * s->n_vocab * sizeof(float));
	if (!l) {
		s->spec_max = 0;
		return -ENOMEM;
	}
	s->logits = l;
	kvp_log(LOG_INFO,
		"engine: speculative decoding on for greedy requests, and sampled ones "
		"that ask (up to %u draft rows a step)",
		s->spec_max);
	return 0;
}

void eng_spec_init(struct kvp_sched *s, struct seq *q, uint32_t mode)
{
	/* sampled requests when they ask: the default is on for greedy ones (what pays most) */
	q->spec = s->spec_max && mode != KVP_SCHED_SPEC_OFF &&
		  (q->sp.temperature <= 0 || mode == KVP_SCHED_SPEC_ON);
	kvp_draft_init(&q->draft, s->cfg.draft_ngram, 1, s->cfg.draft_max);
	/* the drafts are looked up in prompt and reply as one array (kvp_gen_spec_rows()) */
	if (q->spec)
		q->gen.kept = q->hist + q->gen.n_prompt;
}

/*
 * Blocks for @q's positions below @n_positions, as far as free blocks no reservation
 * claims allow (drafts never evict, preempt or take another request's blocks).
 * Return: positions the table covers.
 */
static uint32_t draft_blocks(struct kvp_sched *s, struct seq *q, uint32_t n_positions)
{
	uint32_t want = blocks_of(s, n_positions);

	while (q->n_table < want && q->n_table < q->cap_table &&
	       kvp_pool_n_free(s->cfg.pool) > s->reserved_total) {
		bool res = q->reserved > 0;

		if (eng_take_block(s, q) < 0)
			break;
		q->spec_taken++;
		q->spec_res += res;
	}
	return q->n_table * s->block_tokens;
}

/* Give back the draft blocks past what @q's n_past needs (the newest taken first). */
static void draft_rollback(struct kvp_sched *s, struct seq *q)
{
	uint32_t keep = blocks_of(s, q->gen.n_past);

	if (keep < q->spec_table0)
		keep = q->spec_table0;
	while (q->n_table > keep && q->spec_taken) {
		/* eng_take_block() drew from the reservation first: those go back last */
		if (q->spec_taken == q->spec_res) {
			q->reserved++;
			s->reserved_total++;
			q->spec_res--;
		}
		q->spec_taken--;
		kvp_pool_unref(s->cfg.pool, q->table[--q->n_table]);
	}
	q->spec_taken = q->spec_res = 0;
}

void eng_spec_plan(struct kvp_sched *s, uint32_t nd, double *rows, double *attn)
{
	double limit, dec;
	uint32_t left = s->spec_max;
	bool waiting = false;

	for (struct seq *q = s->active.first; q && !waiting; q = q->next)
		waiting = q->state == SEQ_PREFILL;
	dec = kvp_stepcost_step_ns(&s->cost, *rows, *attn);
	limit = eng_budget_decoding(s, nd);
	/* a waiting prompt keeps half of what the budget leaves over the decode rows */
	if (waiting && limit > dec)
		limit = dec + (limit - dec) / 2;
	for (uint32_t i = 0; i < nd; i++) {
		struct seq *q = s->batch_seq[i];
		struct kvp_fwd_part *p = &s->parts[i];
		uint32_t pos = q->gen.n_past, cap, n;

		q->spec_n = 1;
		q->spec_table0 = q->n_table;
		q->spec_taken = q->spec_res = 0;
		if (!q->spec || !left)
			continue;
		cap = kvp_gen_spec_kv_cap(s->view.geom.shape.dtype, s->block_tokens, pos);
		cap = cap < left ? cap : left;
		cap = kvp_stepcost_fit_step(&s->cost, limit, *rows, *attn, pos + 1, cap);
		if (!cap)
			continue;
		n = kvp_gen_spec_rows(&q->gen, &q->draft, cap, q->spec_rows);
		if (n < 2)
			continue;
		/* rows at pos + 1 .. pos + n - 1: cut to the blocks it can have */
		cap = draft_blocks(s, q, pos + n) - pos;
		n = cap < n ? cap : n;
		if (n < 2) {
			draft_rollback(s, q);
			continue;
		}
		q->spec_n = n;
		p->table = q->table;
		p->n_table = q->n_table;
		p->tokens = q->spec_rows;
		p->n = n;
		p->n_logits = n;
		left -= n - 1;
		s->spec_rows += n - 1;
		*rows += n - 1;
		*attn += (n - 1) * ((double)pos + 1 + (n - 1) / 2.0);
	}
}

/*
 * @q's part of @n rows ran, their logits at @l: take the picks while they agree with
 * the drafts.  Return: rows whose input stood (1 .. n), 0 when @q ended (freed).
 */
static uint32_t verify(struct kvp_sched *s, struct seq *q, uint32_t n, float *l)
{
	uint32_t pos = q->gen.n_past;

	for (uint32_t i = 0;; i++) {
		int32_t id = eng_sample(s, q, l + (size_t)i * s->n_vocab);
		bool agrees = kvp_gen_spec_agrees(q->spec_rows, n, i, id);

		/* counted before the token: it may end @q, whose usage reports them */
		q->spec_accepted += agrees;
		s->st.spec_accepted += agrees;

		/* rows 0 .. i stood: their K/V is what one step per token would have written */
		q->gen.n_past = pos + i + 1;
		if (!eng_took_token(s, q, id))
			return 0;
		if (!agrees)
			return i + 1;
	}
}

void eng_spec_finish(struct kvp_sched *s, uint32_t nd, uint32_t np, int r, uint64_t dt)
{
	uint32_t row = 0;

	for (uint32_t i = 0; i < nd; i++) {
		struct seq *q = s->batch_seq[i];
		uint32_t n = q->spec_n ? q->spec_n : 1, valid;
		double attn = (double)n * ((double)q->gen.n_past + (n + 1) / 2.0);
		double ns;

		q->spec_n = 1;
		if (r < 0) {
			eng_seq_end(s, q, KVP_E_INTERNAL, true, "engine: decode failed");
			continue;
		}
		/*
		 * what its rows cost: the step alone, else the cost model's price of them
		 * (always that when the figures were given: plans from the requests alone)
		 */
		ns = nd == 1 && !np && !s->cost.frozen ? (double)dt :
							 kvp_stepcost_step_ns(&s->cost, n, attn);
		s->st.spec_drafted += n - 1;
		q->spec_drafted += n - 1;
		if (q->spec)
			kvp_draft_step_cost(&q->draft, n, ns);
		valid = verify(s, q, n, s->logits + (size_t)row * s->n_vocab);
		row += n;
		if (!valid)
			continue; /* ended: its blocks went with it */
		if (n > 1)
			kvp_draft_update(&q->draft, n - 1, valid - 1);
		draft_rollback(s, q);
	}
}
