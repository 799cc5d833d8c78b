/* SPDX-License-Identifier: MIT */
/*
 * tiering.c - the engine's side of the disk tier (see tiering.h).
 *
 * Invariants: every block in pinned[] carries one pin of ours and has a write in flight;
 * a block is written at most once at a time (pinned[] is checked first) and only when its
 * entry has no disk copy yet; in_flight counts the reads and writes queued and not reaped.
 *
 * Thread: the engine thread.
 */
#include "svc/engine/tiering.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

#define COOKIE_OFFLOAD 1u
#define COOKIE_SAVE 2u
#define POLL_BATCH 16u
#define REFRESH_NS 250000000ull /* the tier's counters (a sort of latencies) */
#define RATE_NS 1000000000ull	/* MB/s over at least this */

struct pending_read {
	uint64_t cookie;
	uint32_t block;
};

struct kvp_tiering {
	struct kvp_tier *tier;
	struct kvp_pool *pool;
	struct kvp_index *index;
	uint32_t n_blocks;
	uint32_t high_pct, low_pct;
	kvp_tiering_read_fn on_read;
	void *ctx;
	uint32_t *pinned; /* blocks with a write in flight; KVP_TIER_QD_MAX */
	uint32_t n_pinned;
	struct pending_read *reads; /* reads in flight; KVP_TIER_QD_MAX */
	uint32_t n_reads;
	uint32_t *chain; /* scratch: a block's ancestors; n_blocks */
	uint32_t *mark;	 /* scratch of kvp_tiering_pinned_idle(); n_blocks, by mark_gen */
	uint32_t mark_gen;
	uint32_t in_flight;
	uint32_t offload_in_flight;
	bool offloading; /* between crossing the high watermark and reaching the low one */
	bool logged;	 /* the tier's error has been logged */
	struct kvp_tiering_stats st;
	uint64_t refreshed_ns;
	uint64_t rate_ns;
	uint64_t rate_write_bytes, rate_read_bytes;
};

int kvp_tiering_new(struct kvp_tiering **out, struct kvp_tier *tier, struct kvp_pool *pool,
		    struct kvp_index *index, uint32_t high_pct, uint32_t low_pct,
		    kvp_tiering_read_fn on_read, void *ctx)
{
	struct kvp_tiering *t;

	if (!tier || !pool || !index || !on_read || low_pct >= high_pct || high_pct > 100)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->pinned = calloc(KVP_TIER_QD_MAX, sizeof(*t->pinned));
	t->reads = calloc(KVP_TIER_QD_MAX, sizeof(*t->reads));
	t->chain = calloc(kvp_pool_n_blocks(pool), sizeof(*t->chain));
	t->mark = calloc(kvp_pool_n_blocks(pool), sizeof(*t->mark));
	if (!t->pinned || !t->reads || !t->chain || !t->mark) {
		free(t->mark);
		free(t->chain);
		free(t->reads);
		free(t->pinned);
		free(t);
		return -ENOMEM;
	}
	t->tier = tier;
	t->pool = pool;
	t->index = index;
	t->n_blocks = kvp_pool_n_blocks(pool);
	t->high_pct = high_pct;
	t->low_pct = low_pct;
	t->on_read = on_read;
	t->ctx = ctx;
	kvp_tier_stats(tier, &t->st.tier);
	*out = t;
	return 0;
}

/* The tier turned itself off: say why, once (the tier counts it). */
static void check_off(struct kvp_tiering *t)
{
	const char *why = kvp_tier_error(t->tier);

	if (!t->logged && *why) {
		kvp_log(LOG_ERR, "%s", why);
		t->logged = true;
	}
}

bool kvp_tiering_usable(const struct kvp_tiering *t)
{
	return t && !*kvp_tier_error(t->tier);
}

uint32_t kvp_tiering_in_flight(const struct kvp_tiering *t)
{
	return t ? t->in_flight : 0;
}

uint32_t kvp_tiering_pinned_idle(struct kvp_tiering *t)
{
	uint32_t n = 0;

	if (!t)
		return 0;
	/* a new generation even with nothing pinned: pin_cost() reads these marks */
	if (!++t->mark_gen) {
		memset(t->mark, 0, t->n_blocks * sizeof(*t->mark));
		t->mark_gen = 1;
	}
	for (uint32_t i = 0; i < t->n_pinned; i++) {
		/* the pinned block, and the idle ancestors it keeps from being leaves */
		uint32_t b = t->pinned[i];

		while (b != KVP_BLOCK_NONE && t->mark[b] != t->mark_gen) {
			const struct kvp_block *bl = kvp_pool_block(t->pool, b);

			if (bl->refcount)
				break; /* held: not counted as available anyway, nor its parents */
			t->mark[b] = t->mark_gen;
			n++;
			b = bl->parent;
		}
	}
	return n;
}

static bool is_pinned(const struct kvp_tiering *t, uint32_t block)
{
	for (uint32_t i = 0; i < t->n_pinned; i++)
		if (t->pinned[i] == block)
			return true;
	return false;
}

static void unpin(struct kvp_tiering *t, uint32_t block)
{
	for (uint32_t i = 0; i < t->n_pinned; i++) {
		if (t->pinned[i] == block) {
			t->pinned[i] = t->pinned[--t->n_pinned];
			kvp_pool_unpin(t->pool, block);
			return;
		}
	}
}

/*
 * Blocks that pinning @block takes from the scheduler: it and its idle ancestors not
 * blocked yet (marks of the current generation: kvp_tiering_pinned_idle()); @set marks
 * them.
 */
static uint32_t pin_cost(struct kvp_tiering *t, uint32_t block, bool set)
{
	uint32_t n = 0;

	while (block != KVP_BLOCK_NONE && t->mark[block] != t->mark_gen) {
		const struct kvp_block *bl = kvp_pool_block(t->pool, block);

		if (bl->refcount)
			break;
		if (set)
			t->mark[block] = t->mark_gen;
		n++;
		block = bl->parent;
	}
	return n;
}

/*
 * Pin and write published @block.  *@spare: how many more blocks may become unavailable
 * to the scheduler (a pinned block nobody holds, and the idle ancestors it keeps from
 * being leaves; the marks of kvp_tiering_pinned_idle() are current); NULL: no limit.
 * Return: 0 queued; 1 nothing to do; -errno: stop.
 */
static int write_block(struct kvp_tiering *t, uint32_t block, uint64_t cookie, uint32_t *spare)
{
	uint32_t cost = spare ? pin_cost(t, block, false) : 0;
	struct kvp_index_rec rec;
	int slot;

	if (kvp_index_block_on_disk(t->index, block) || is_pinned(t, block))
		return 1;
	if (spare && cost > *spare)
		return -ENOSPC;
	if (t->n_pinned == KVP_TIER_QD_MAX || kvp_index_block_rec(t->index, block, &rec) < 0)
		return t->n_pinned == KVP_TIER_QD_MAX ? -EBUSY : 1;
	if (kvp_pool_pin(t->pool, block) < 0)
		return 1;
	slot = kvp_tier_write(t->tier, &rec, block, cookie);
	if (slot < 0) {
		kvp_pool_unpin(t->pool, block);
		check_off(t);
		return slot;
	}
	t->pinned[t->n_pinned++] = block;
	t->in_flight++;
	if (spare) {
		pin_cost(t, block, true);
		*spare -= cost;
	}
	return 0;
}

uint32_t kvp_tiering_save(struct kvp_tiering *t, const uint32_t *blocks, uint32_t n)
{
	uint32_t queued = 0;

	if (!kvp_tiering_usable(t))
		return 0;
	for (uint32_t i = 0; kvp_tiering_usable(t) && i < n; i++) {
		int r = write_block(t, blocks[i], COOKIE_SAVE, NULL);

		if (r < 0)
			break; /* the queue is full: the rest stays cached, as any block */
		queued += r == 0;
	}
	t->st.saved += queued;
	return queued;
}

/* Free blocks the low watermark asks for. */
static uint32_t target_free(const struct kvp_tiering *t)
{
	return t->n_blocks - (uint32_t)((uint64_t)t->n_blocks * t->low_pct / 100);
}

bool kvp_tiering_over_watermark(const struct kvp_tiering *t)
{
	uint32_t free_now;

	if (!kvp_tiering_usable(t))
		return false;
	free_now = kvp_pool_n_free(t->pool);
	if (t->offloading)
		return free_now + t->offload_in_flight < target_free(t);
	return (uint64_t)(t->n_blocks - free_now) * 100 > (uint64_t)t->n_blocks * t->high_pct;
}

/*
 * Write @block's ancestors that have no disk copy, the first block first (they stay in
 * memory): what goes to disk is whole chains, so a restart finds every block's parent
 * (a child on disk whose parent lived only in memory would be an orphan then).
 * Return: 0, or -errno when the queue filled (the rest comes at the next call).
 */
static int write_ancestors(struct kvp_tiering *t, uint32_t block, uint32_t *spare)
{
	uint32_t n = 0;
	uint32_t p = kvp_pool_block(t->pool, block)->parent;

	while (p != KVP_BLOCK_NONE && n < t->n_blocks && !kvp_index_block_on_disk(t->index, p)) {
		t->chain[n++] = p;
		p = kvp_pool_block(t->pool, p)->parent;
	}
	while (n--) {
		int r = write_block(t, t->chain[n], COOKIE_SAVE, spare);

		if (r < 0)
			return r;
		t->st.saved += r == 0;
	}
	return 0;
}

uint32_t kvp_tiering_offload(struct kvp_tiering *t, uint32_t spare)
{
	uint32_t free_now, want, queued = 0;

	if (!kvp_tiering_usable(t))
		return 0;
	free_now = kvp_pool_n_free(t->pool);
	if (!t->offloading &&
	    (uint64_t)(t->n_blocks - free_now) * 100 > (uint64_t)t->n_blocks * t->high_pct)
		t->offloading = true;
	if (!t->offloading)
		return 0;
	want = target_free(t);
	if (free_now >= want) {
		t->offloading = false;
		return 0;
	}
	kvp_tiering_pinned_idle(t); /* marks what is blocked already (pin_cost()) */
	while (free_now + t->offload_in_flight < want) {
		long b = kvp_pool_lru_peek(t->pool, KVP_NODE_ANY);
		int r;

		if (b < 0)
			break; /* nothing cached is evictable: the pool is in use */
		if (kvp_index_block_on_disk(t->index, (uint32_t)b)) {
			/* on disk already: its entry stays there when it leaves memory */
			if (kvp_pool_evict_block(t->pool, (uint32_t)b) < 0)
				break;
			free_now++;
			t->st.offload_freed++;
			continue;
		}
		r = write_ancestors(t, (uint32_t)b, &spare);
		if (r == 0)
			r = write_block(t, (uint32_t)b, COOKIE_OFFLOAD, &spare);
		if (r != 0)
			break; /* queue full, tier off, or not a block of the index: later */
		t->offload_in_flight++;
		t->st.offloaded++;
		queued++;
	}
	return queued;
}

bool kvp_tiering_writeback(struct kvp_tiering *t, uint32_t *cursor)
{
	struct kvp_index_rec rec;

	while (kvp_tiering_usable(t) && *cursor < t->n_blocks) {
		uint32_t b = *cursor;
		int r;

		if (!kvp_index_block_on_disk(t->index, b) &&
		    kvp_index_block_rec(t->index, b, &rec) == 0) {
			r = write_ancestors(t, b, NULL);
			if (r == 0)
				r = write_block(t, b, COOKIE_SAVE, NULL);
			if (r == -EBUSY)
				return false; /* the queue is full: from here after completions */
			if (r < 0)
				return true; /* the tier turned off */
			t->st.saved += r == 0;
		}
		(*cursor)++;
	}
	return true;
}

int kvp_tiering_read(struct kvp_tiering *t, const struct kvp_index_disk_hit *hit, uint32_t block,
		     uint64_t cookie)
{
	int r;

	if (!kvp_tiering_usable(t))
		return -ENODEV;
	if (t->n_reads == KVP_TIER_QD_MAX)
		return -EBUSY;
	r = kvp_tier_read(t->tier, hit->slot, hit->uid, block, cookie);
	if (r < 0) {
		check_off(t);
		return r;
	}
	t->reads[t->n_reads++] = (struct pending_read){ .cookie = cookie, .block = block };
	t->in_flight++;
	return 0;
}

static void write_done(struct kvp_tiering *t, const struct kvp_tier_done *d)
{
	int r = d->result;

	if (r == 0) {
		r = kvp_index_set_disk(t->index, d->block, d->uid, d->slot);
		if (r < 0)
			kvp_tier_release(t->tier, d->slot); /* the entry changed meanwhile */
	}
	unpin(t, d->block);
	if (d->cookie == COOKIE_OFFLOAD) {
		t->offload_in_flight--;
		/* written: it leaves memory unless someone took it meanwhile */
		if (r == 0 && kvp_pool_evict_block(t->pool, d->block) == 0)
			t->st.offload_freed++;
	}
}

static void read_done(struct kvp_tiering *t, uint64_t cookie, uint32_t block, int result)
{
	for (uint32_t i = 0; i < t->n_reads; i++) {
		if (t->reads[i].block == block && t->reads[i].cookie == cookie) {
			t->reads[i] = t->reads[--t->n_reads];
			break;
		}
	}
	if (result == 0)
		t->st.reloads++;
	else
		t->st.reload_failures++;
	t->on_read(t->ctx, cookie, block, result);
}

/*
 * A wait came back empty with operations of ours in flight: the tier holds none any more
 * (its ring broke: they were never submitted).  They are lost: reads fail, pins go.
 */
static void forget_in_flight(struct kvp_tiering *t)
{
	while (t->n_reads) {
		struct pending_read r = t->reads[t->n_reads - 1];

		read_done(t, r.cookie, r.block, -ENODEV);
	}
	while (t->n_pinned)
		unpin(t, t->pinned[t->n_pinned - 1]);
	t->in_flight = 0;
	t->offload_in_flight = 0;
}

uint32_t kvp_tiering_poll(struct kvp_tiering *t, bool wait)
{
	struct kvp_tier_done done[POLL_BATCH];
	uint32_t total = 0;
	int n;

	if (!t || !t->in_flight)
		return 0;
	n = wait ? kvp_tier_wait(t->tier, done, POLL_BATCH) :
		   kvp_tier_poll(t->tier, done, POLL_BATCH);
	while (n > 0) {
		for (int i = 0; i < n; i++) {
			t->in_flight--;
			if (done[i].op == KVP_TIER_OP_WRITE) {
				write_done(t, &done[i]);
				continue;
			}
			read_done(t, done[i].cookie, done[i].block, done[i].result);
		}
		total += (uint32_t)n;
		n = t->in_flight ? kvp_tier_poll(t->tier, done, POLL_BATCH) : 0;
	}
	check_off(t);
	if (wait && !total && t->in_flight)
		forget_in_flight(t);
	return total;
}

int kvp_tiering_flush(struct kvp_tiering *t)
{
	int r;

	if (!kvp_tiering_usable(t))
		return -ENODEV;
	while (t->in_flight)
		if (!kvp_tiering_poll(t, true))
			break;
	if (t->in_flight)
		return -ENODEV; /* the tier turned off while waiting */
	r = kvp_tier_flush(t->tier);
	check_off(t);
	if (r == 0) {
		t->st.flushes++;
		t->offloading = false;
	}
	return r;
}

void kvp_tiering_stats(struct kvp_tiering *t, struct kvp_tiering_stats *st, uint64_t now_ns,
		       bool now)
{
	if (now || now_ns - t->refreshed_ns >= REFRESH_NS) {
		t->refreshed_ns = now_ns;
		kvp_tier_stats(t->tier, &t->st.tier);
		if (now_ns - t->rate_ns >= RATE_NS) {
			double s = (double)(now_ns - t->rate_ns) / 1e9;

			if (t->rate_ns) {
				t->st.write_mb_s = (double)(t->st.tier.write_bytes -
							    t->rate_write_bytes) /
						   s / 1e6;
				t->st.read_mb_s = (double)(t->st.tier.read_bytes -
							   t->rate_read_bytes) /
						  s / 1e6;
			}
			t->rate_ns = now_ns;
			t->rate_write_bytes = t->st.tier.write_bytes;
			t->rate_read_bytes = t->st.tier.read_bytes;
		}
	}
	*st = t->st;
}

void kvp_tiering_free(struct kvp_tiering *t)
{
	if (!t)
		return;
	while (t->in_flight)
		if (!kvp_tiering_poll(t, true))
			break; /* nothing came back: the tier forgot it (a broken ring) */
	forget_in_flight(t);
	free(t->mark);
	free(t->chain);
	free(t->reads);
	free(t->pinned);
	free(t);
}
