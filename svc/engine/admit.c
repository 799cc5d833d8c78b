/* SPDX-License-Identifier: MIT */
/*
 * admit.c - who runs: the pool's blocks as the engine counts them (available,
 * unreserved, taken from a reservation or on demand), the queue order, the waits for a
 * prefix another request is computing, admission with its reservation, and preemption
 * with its victims (engine.c's opening comment: "Admission", "Blocks on demand",
 * "Shared prefixes in flight").
 * Thread: the engine thread.
 */
#include "svc/engine/engine_impl.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

/* Blocks that can be handed out now: free, and cached ones nobody holds or writes. */
uint64_t eng_pool_available(struct kvp_sched *s)
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
uint64_t eng_pool_unreserved(struct kvp_sched *s)
{
	uint64_t avail = eng_pool_available(s);

	return avail > s->reserved_total ? avail - s->reserved_total : 0;
}

/*
 * One more block at the end of @q's table: from its reservation, else (FAIR) from what
 * no reservation claims.  Return: 0, or -ENOSPC when there is none (FAIR: preempt).
 */
int eng_take_block(struct kvp_sched *s, struct seq *q)
{
	uint32_t id;

	if (q->n_table >= q->cap_table)
		return -ENOSPC; /* cannot happen: blocks_for() bounds positions */
	if (!q->reserved && (!s->pol->on_demand || !eng_pool_unreserved(s)))
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
int eng_ensure_blocks(struct kvp_sched *s, struct seq *q, uint32_t n_positions)
{
	uint32_t want = blocks_of(s, n_positions);

	while (q->n_table < want) {
		int r = eng_take_block(s, q);

		if (r < 0)
			return r;
	}
	return 0;
}

/* FIFO's queue order: does @a go before @b?  Arrival. */
bool eng_queue_fifo(const struct seq *a, const struct seq *b)
{
	return a->arrival < b->arrival;
}

/* FAIR's (see "Admission"): priority, then resuming after a preemption, then arrival. */
bool eng_queue_fair(const struct seq *a, const struct seq *b)
{
	if (a->priority != b->priority)
		return a->priority > b->priority;
	if (!a->admit_no != !b->admit_no)
		return a->admit_no != 0; /* resuming after a preemption goes first */
	if (a->admit_no)
		return a->admit_no < b->admit_no;
	return a->arrival < b->arrival;
}

void eng_queue_insert(struct kvp_sched *s, struct seq *q)
{
	struct seq *p = s->queue.last;

	q->state = SEQ_QUEUED;
	while (p && s->pol->queue_before(q, p))
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
struct seq *eng_pick_victim(struct kvp_sched *s, int64_t below)
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
void eng_preempt(struct kvp_sched *s, struct seq *v)
{
	eng_publish_upto(s, v, v->gen.n_past);
	/* with a disk tier, they go there too: back from disk rather than recomputed */
	if (!v->no_cache && kvp_tiering_save(s->tiering, v->table, v->n_indexed))
		s->st.preempt_swapped++;
	eng_release_blocks(s, v);
	eng_forget_waiters(s, v);
	list_del(&s->active, v);
	v->n_indexed = 0;
	v->publish_stopped = false;
	v->gen.n_past = 0;
	v->n_fill = v->gen.n_prompt + (v->gen.n_generated ? v->gen.n_generated - 1 : 0);
	v->preemptions++;
	s->st.preemptions++;
	eng_queue_insert(s, v);
}

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

	if (!s->pol->reserve_whole) {
		/* its prefill, and the block of its first decode step */
		uint32_t upto = blocks_of(s, (uint64_t)q->n_fill + 1);

		if (upto < want)
			want = upto;
	}
	return want > n_hit ? want - n_hit : 0;
}

/*
 * @q was admitted for the first time with @n blocks hit in memory and @n_disk on disk:
 * why it missed what it missed (svc/engine/cachectl.h), counted once per request.
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
			eng_unref_table(s, q);
			list_del(&s->queue, q);
			q->state = SEQ_WAITING;
			q->wait_on = owner;
			q->wait_blocks = until;
			list_add_tail(&s->waiting, q);
			s->st.prefix_waits++;
			return true;
		}
	}
	n_disk = eng_disk_lookup(s, q, (uint32_t)n);
	need = reservation(s, q, (uint32_t)n);
	room = eng_pool_unreserved(s);
	if (s->pol->headroom && s->active.n) /* next to running sequences: room to grow */
		room = room > s->headroom ? room - s->headroom : 0;
	if (need > room) {
		eng_unref_table(s, q);
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
		eng_start_load(s, q, n_disk);
	/* what memory and disk do not have, the store may: fetched meanwhile */
	eng_start_remote(s, q, q->n_table);
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
		eng_keep_block(s, q, (uint32_t)i, q->table[i]); /* a hit refreshes the TTL */
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

void eng_admit(struct kvp_sched *s)
{
	struct seq *q;

	while ((q = s->queue.first)) {
		struct seq *v;

		if (s->active.n < s->cfg.max_running && try_admit(s, q))
			continue;
		if (nothing_to_free(s)) {
			eng_seq_end(s, q, KVP_E_NOSPACE, true,
				    "pool: not enough blocks can be had for the request (the rest "
				    "are cache-pinned, leased or inside a TTL)");
			continue;
		}
		/*
		 * The head does not fit (batch or blocks): FAIR makes room from lower
		 * priorities when what they hold could be enough, else it waits.
		 */
		if (!s->pol->preempts)
			return;
		if (eng_pool_unreserved(s) + held_below(s, q->priority) < reservation(s, q, 0))
			return; /* (a batch slot alone would not let it in either) */
		v = eng_pick_victim(s, q->priority);
		if (!v)
			return;
		eng_preempt(s, v);
	}
}

/* Requests whose prefix owner published what they wait for (or ended) go back. */
void eng_wake_waiters(struct kvp_sched *s)
{
	struct seq *w = s->waiting.first;

	while (w) {
		struct seq *next = w->next;
		struct seq *o = w->wait_on;

		if (w->cancelled || !o || o->n_indexed >= w->wait_blocks ||
		    o->state != SEQ_PREFILL || o->publish_stopped) {
			list_del(&s->waiting, w);
			w->wait_on = NULL;
			eng_queue_insert(s, w); /* by arrival: ahead of what came after it */
		}
		w = next;
	}
}
