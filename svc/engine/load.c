/* SPDX-License-Identifier: MIT */
/*
 * load.c - blocks entering the prefix index: publishing what a sequence computed, and
 * reloading a prefix from the disk tier (svc/engine/tiering.h) or fetching it from the
 * remote tier (svc/engine/remoting.h), the sequence parked (SEQ_LOADING) meanwhile;
 * the tiers' per-step work and the write-back.
 * Thread: the engine thread.
 */
#include "svc/engine/engine_impl.h"

#include <errno.h>
#include <stdlib.h>

/* @q publishes or hits block @i (@b): its TTL and retention priority are @q's. */
void eng_keep_block(struct kvp_sched *s, const struct seq *q, uint32_t i, uint32_t b)
{
	kvp_pool_set_ttl(s->cfg.pool, b,
			 kvp_pool_now(s->cfg.pool) + kvp_cachectl_block_ttl_ns(&q->cc, i));
	kvp_pool_set_retain(s->cfg.pool, b, q->cc.retain);
}

/* Where the blocks a sequence publishes came from: what a new index entry does next. */
enum pub_from {
	PUB_COMPUTED, /* counted as created, offered to the remote tier */
	PUB_DISK,     /* nothing more: its on-disk entry has a memory block again */
	PUB_REMOTE,   /* marked as the store's own: never offered back to it */
};

/*
 * The one publish routine: put @q's table[@from .. @from + @n) in the index, in order,
 * each block the parent of the next.  A block another request published meanwhile
 * (computed twice after all, e.g. a lookup raced a prefill, or brought back by another
 * request) is shared: ours is let go, theirs taken.  Each block in the index gets @q's
 * TTL and retention.  It stops at the first the index refuses: every later block would
 * lack its parent.  Return: how many went in (moving n_indexed is the caller's).
 */
static uint32_t publish_blocks(struct kvp_sched *s, struct seq *q, uint32_t from, uint32_t n,
			       enum pub_from src)
{
	uint32_t bt = s->block_tokens;
	uint32_t ok;

	for (ok = 0; ok < n; ok++) {
		uint32_t b = from + ok;
		uint32_t parent = b ? q->table[b - 1] : KVP_BLOCK_NONE;
		uint32_t out = KVP_BLOCK_NONE;
		int r = kvp_index_publish(s->cfg.index, &q->key, parent,
					  (const uint32_t *)q->hist + (size_t)b * bt, q->table[b],
					  &out);

		if (r < 0)
			break;
		if (r == 1) {
			kvp_pool_unref(s->cfg.pool, q->table[b]);
			q->table[b] = out;
		} else if (src == PUB_COMPUTED) {
			q->n_created++;
			/* prompt blocks as they fill, generated ones when the request ends */
			kvp_remoting_offer(s->remoting, q->table[b], KVP_REMOTE_WHY_CREATED);
		} else if (src == PUB_REMOTE) {
			kvp_remoting_mark(s->remoting, q->table[b]); /* from the store: not back */
		}
		eng_keep_block(s, q, b, q->table[b]);
	}
	return ok;
}

/*
 * Publish every full block of @q below position @upto not published yet, in order, up
 * to its breakpoints (no-cache requests publish nothing); int4: every sealed block
 * (the residual window's are not final yet: they are recomputed after a preemption,
 * and the next turn of a conversation recomputes them).
 */
void eng_publish_upto(struct kvp_sched *s, struct seq *q, uint32_t upto)
{
	/* int4: a block is final (sealed) only once it is out of the residual window */
	uint32_t w = s->view.geom.shape.dtype == KVP_DTYPE_INT4 ? s->view.stage->window : 0;
	uint32_t filled = upto > w ? (upto - w) / s->block_tokens : 0;
	uint32_t n, ok;

	if (q->no_cache)
		return;
	if (filled > q->n_table)
		filled = q->n_table;
	if (filled > q->cc.publish_blocks)
		filled = q->cc.publish_blocks;
	if (q->publish_stopped || q->n_indexed >= filled)
		return;
	n = filled - q->n_indexed;
	ok = publish_blocks(s, q, q->n_indexed, n, PUB_COMPUTED);
	q->n_indexed += ok;
	if (ok < n)
		q->publish_stopped = true; /* later blocks would have no parent */
}

/*
 * On-disk entries continuing @q's @n_hit memory hits (kvp_index_lookup_disk()): how many
 * blocks it can read back instead of computing.  0 without a usable tier.
 */
uint32_t eng_disk_lookup(struct kvp_sched *s, struct seq *q, uint32_t n_hit)
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
void eng_start_load(struct kvp_sched *s, struct seq *q, uint32_t n)
{
	uint32_t from = q->n_table;

	for (uint32_t i = 0; i < n; i++)
		if (eng_take_block(s, q) < 0) {
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
void eng_read_done(void *ctx, uint64_t cookie, uint32_t block, int result)
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
 * The remote tier's fetch of @q came back: publish its leading checked blocks in order,
 * after the memory and disk prefix (which must reach r_from: a disk read that failed
 * before leaves them unusable, their parent missing); from the first block not checked
 * on, the positions are computed (those blocks are private and get overwritten).
 */
static void finish_remote(struct kvp_sched *s, struct seq *q)
{
	uint32_t bt = s->block_tokens;
	uint32_t ok = 0;

	if (q->n_indexed == q->r_from)
		ok = publish_blocks(s, q, q->r_from, q->r_ok, PUB_REMOTE);
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
void eng_fetch_done(void *ctx, uint64_t cookie, uint32_t n_ok, uint32_t stop)
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
void eng_start_remote(struct kvp_sched *s, struct seq *q, uint32_t from)
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
	while (got < n && eng_take_block(s, q) == 0)
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

/*
 * Every read of @q has come back: publish the leading sound blocks in order (each gives
 * its on-disk entry a memory block again); from the first failure on, the positions are
 * computed (those blocks are private and get overwritten).  Then the remote fetch's.
 */
static void finish_load(struct kvp_sched *s, struct seq *q)
{
	uint32_t bt = s->block_tokens;
	uint32_t sound = 0, ok = 0;

	if (q->n_load) {
		while (sound < q->n_issued && q->load_res[sound] == 0)
			sound++;
		ok = publish_blocks(s, q, q->load_from, sound, PUB_DISK);
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
void eng_tier_step(struct kvp_sched *s)
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

bool eng_writeback_pending(const struct kvp_sched *s)
{
	return s->wb_want != s->st.writeback_done;
}

/*
 * kvp_sched_writeback(): every cached block without a disk copy goes to the tier, a
 * queue's worth per step; done once the scan has passed the last block and the writes
 * landed (or at once without a usable tier).
 */
void eng_writeback_step(struct kvp_sched *s)
{
	if (kvp_tiering_usable(s->tiering) && (!kvp_tiering_writeback(s->tiering, &s->wb_cursor) ||
					       kvp_tiering_in_flight(s->tiering)))
		return;
	s->st.writeback_done = s->wb_want;
}
