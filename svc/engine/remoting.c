/* SPDX-License-Identifier: MIT */
/*
 * remoting.c - the engine's side of the remote tier (see remoting.h).
 *
 * Invariants: every entry of held[] carries one reference (ref) or one pin (pin) of ours
 * on its block and a publish in flight, at most queue_blocks of them (the tier's own
 * bound: a publish is never refused for a full queue, it waits in the backlog instead);
 * sent[b] is the generation + 1 of block b's life that was offered last (0: never), so a
 * block is offered once per life whatever the mode; n_fetch counts fetches whose
 * completion has not been handled.
 *
 * The backlog: a prompt's blocks come faster than the store takes them (a 4,096-token
 * prompt is 256 blocks at once; the tier holds queue_blocks).  Rather than drop what
 * does not fit, the ids wait in a bounded ring (no reference held) and are offered as
 * completions free room; a block evicted or reused meanwhile is skipped.  Only a full
 * backlog drops (counted here: backlog_drops).
 *
 * Thread: the engine thread.
 */
#include "svc/engine/remoting.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shm/remote/breaker.h"
#include "util/log.h"

#define POLL_BATCH 32u
#define BACKLOG 4096u
#define REFRESH_NS 250000000ull

struct held {
	uint32_t block;
	bool pin; /* selective eviction: unpin and evict on the completion */
};

struct backlog_ent {
	uint32_t block;
	uint32_t generation;
	uint32_t why;
};

struct kvp_remoting {
	struct kvp_remote *remote;
	uint32_t domain;
	struct kvp_pool *pool;
	struct kvp_index *index;
	uint32_t n_blocks;
	uint32_t mode; /* enum kvp_remote_publish_mode */
	uint32_t queue_blocks;
	uint32_t max_fetch;
	uint32_t high_pct, low_pct;
	kvp_remoting_fetch_fn on_fetch;
	void *ctx;
	struct held *held; /* queue_blocks */
	uint32_t n_held;
	uint64_t *sent; /* n_blocks: generation + 1 of the life offered */
	struct backlog_ent *backlog;
	uint32_t bl_head, bl_n;
	uint32_t n_fetch;
	void **dest; /* scratch: max_fetch pointers */
	bool offloading;
	bool was_up;
	struct kvp_remoting_stats st;
	uint64_t backlog_drops;
	uint64_t refreshed_ns;
};

int kvp_remoting_new(struct kvp_remoting **out, struct kvp_remote *remote, uint32_t domain,
		     struct kvp_pool *pool, struct kvp_index *index, uint32_t high_pct,
		     uint32_t low_pct, kvp_remoting_fetch_fn on_fetch, void *ctx)
{
	const struct kvp_remote_config *rc;
	struct kvp_remoting *t;

	if (!remote || !pool || !index || !on_fetch || low_pct >= high_pct || high_pct > 100)
		return -EINVAL;
	rc = kvp_remote_settings(remote);
	if (domain >= rc->n_domains || !rc->queue_blocks || !rc->max_fetch_blocks)
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->n_blocks = kvp_pool_n_blocks(pool);
	t->held = calloc(rc->queue_blocks, sizeof(*t->held));
	t->sent = calloc(t->n_blocks, sizeof(*t->sent));
	t->backlog = calloc(BACKLOG, sizeof(*t->backlog));
	t->dest = calloc(rc->max_fetch_blocks, sizeof(*t->dest));
	if (!t->held || !t->sent || !t->backlog || !t->dest) {
		free(t->dest);
		free(t->backlog);
		free(t->sent);
		free(t->held);
		free(t);
		return -ENOMEM;
	}
	t->remote = remote;
	t->domain = domain;
	t->pool = pool;
	t->index = index;
	t->mode = rc->publish;
	t->queue_blocks = rc->queue_blocks;
	t->max_fetch = rc->max_fetch_blocks;
	t->high_pct = high_pct;
	t->low_pct = low_pct;
	t->on_fetch = on_fetch;
	t->ctx = ctx;
	t->st.configured = true;
	kvp_remote_stats(remote, domain, &t->st.tier);
	t->was_up = t->st.tier.state == KVP_BREAKER_CLOSED; /* the start-up line said so */
	*out = t;
	return 0;
}

void kvp_remoting_free(struct kvp_remoting *t)
{
	if (!t)
		return;
	for (uint32_t i = 0; i < t->n_held; i++) {
		if (t->held[i].pin)
			kvp_pool_unpin(t->pool, t->held[i].block);
		else
			kvp_pool_unref(t->pool, t->held[i].block);
	}
	free(t->dest);
	free(t->backlog);
	free(t->sent);
	free(t->held);
	free(t);
}

int kvp_remoting_event_fd(const struct kvp_remoting *t)
{
	return t ? kvp_remote_domain_event_fd(t->remote, t->domain) : -1;
}

uint32_t kvp_remoting_in_flight(const struct kvp_remoting *t)
{
	return t ? t->n_held + t->n_fetch : 0;
}

bool kvp_remoting_usable(const struct kvp_remoting *t)
{
	return t && kvp_remote_domain_up(t->remote, t->domain);
}

uint32_t kvp_remoting_max_fetch(const struct kvp_remoting *t)
{
	return t ? t->max_fetch : 0;
}

static bool offered(const struct kvp_remoting *t, uint32_t block)
{
	return t->sent[block] == (uint64_t)kvp_pool_block(t->pool, block)->generation + 1;
}

void kvp_remoting_mark(struct kvp_remoting *t, uint32_t block)
{
	if (t && block < t->n_blocks)
		t->sent[block] = (uint64_t)kvp_pool_block(t->pool, block)->generation + 1;
}

/* Would the mode send a block offered for @why? */
static bool mode_takes(const struct kvp_remoting *t, enum kvp_remote_why why)
{
	if (t->mode == KVP_REMOTE_PUBLISH_ALL)
		return why == KVP_REMOTE_WHY_CREATED;
	if (t->mode == KVP_REMOTE_PUBLISH_SELECTIVE)
		return why == KVP_REMOTE_WHY_REUSED || why == KVP_REMOTE_WHY_EVICTED;
	return false;
}

static void backlog_push(struct kvp_remoting *t, uint32_t block, enum kvp_remote_why why)
{
	if (t->bl_n == BACKLOG) {
		t->backlog_drops++;
		return;
	}
	t->backlog[(t->bl_head + t->bl_n) % BACKLOG] = (struct backlog_ent){
		.block = block, .generation = kvp_pool_block(t->pool, block)->generation, .why = why
	};
	t->bl_n++;
	kvp_remoting_mark(t, block); /* offered: in the backlog, not twice */
}

/*
 * Hand published @block to the tier, holding it (a pin for an eviction: the block is
 * idle, a reference would make it "used"; a reference otherwise).  Return: 0 queued;
 * 1 nothing to do; -errno: not taken (dropped by the tier, counted there).
 */
static int send_block(struct kvp_remoting *t, uint32_t block, enum kvp_remote_why why)
{
	struct kvp_index_rec rec;
	bool pin = why == KVP_REMOTE_WHY_EVICTED;
	int r;

	if (kvp_index_block_rec(t->index, block, &rec) < 0)
		return 1; /* not (or no longer) in the index */
	r = pin ? kvp_pool_pin(t->pool, block) : kvp_pool_ref(t->pool, block);
	if (r < 0)
		return 1;
	r = kvp_remote_publish(t->remote, t->domain, why, &rec, kvp_pool_data(t->pool, block),
			       block);
	if (r != 0) {
		if (pin)
			kvp_pool_unpin(t->pool, block);
		else
			kvp_pool_unref(t->pool, block);
		return r > 0 ? 1 : r;
	}
	t->held[t->n_held++] = (struct held){ .block = block, .pin = pin };
	t->st.offered++;
	kvp_remoting_mark(t, block);
	return 0;
}

bool kvp_remoting_offer(struct kvp_remoting *t, uint32_t block, enum kvp_remote_why why)
{
	if (!t || block >= t->n_blocks || !mode_takes(t, why) || offered(t, block))
		return false;
	if (t->n_held == t->queue_blocks || t->bl_n) {
		backlog_push(t, block, why); /* in order: behind what waits already */
		return false;
	}
	return send_block(t, block, why) == 0;
}

/* Offer what waits in the backlog while the tier has room. */
static void drain_backlog(struct kvp_remoting *t)
{
	while (t->bl_n && t->n_held < t->queue_blocks) {
		struct backlog_ent e = t->backlog[t->bl_head];
		const struct kvp_block *bl = kvp_pool_block(t->pool, e.block);

		t->bl_head = (t->bl_head + 1) % BACKLOG;
		t->bl_n--;
		if (bl->generation != e.generation || !bl->cached)
			continue; /* evicted or reused meanwhile: gone */
		if (send_block(t, e.block, e.why) == -ENODEV) {
			/* the breaker opened: what waits would be dropped one by one */
			t->bl_n = 0;
			return;
		}
	}
}

int kvp_remoting_fetch(struct kvp_remoting *t, const struct kvp_prefix_key *key,
		       struct kvp_h128 parent_hash, const uint32_t *tokens, const uint32_t *blocks,
		       uint32_t n, double prefill_tps, uint64_t cookie)
{
	struct kvp_remote_fetch f = {
		.tag = cookie,
		.domain = t ? t->domain : 0,
		.n_blocks = n,
		.key = key,
		.parent_hash = parent_hash,
		.tokens = tokens,
		.prefill_tps = prefill_tps,
	};
	int r;

	if (!t)
		return -ENODEV;
	if (!n || n > t->max_fetch)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		t->dest[i] = kvp_pool_data(t->pool, blocks[i]);
	f.dest = (void *const *)t->dest;
	r = kvp_remote_fetch(t->remote, &f);
	if (r == 0) {
		t->n_fetch++;
		t->st.fetch_blocks += n;
	}
	return r;
}

void kvp_remoting_loaded(struct kvp_remoting *t, uint32_t n)
{
	if (t)
		t->st.loaded_blocks += n;
}

/* Idle blocks (no reference) that pinning @block keeps from eviction: it and its chain. */
static uint32_t idle_chain(const struct kvp_remoting *t, uint32_t block)
{
	uint32_t n = 0;

	while (block != KVP_BLOCK_NONE && n < t->n_blocks) {
		const struct kvp_block *bl = kvp_pool_block(t->pool, block);

		if (bl->refcount)
			break;
		n++;
		block = bl->parent;
	}
	return n;
}

uint32_t kvp_remoting_pinned_idle(struct kvp_remoting *t)
{
	uint32_t n = 0;

	if (!t)
		return 0;
	/* counts a chain shared by two pins twice: the cautious side (fewer available) */
	for (uint32_t i = 0; i < t->n_held; i++)
		if (t->held[i].pin)
			n += idle_chain(t, t->held[i].block);
	return n;
}

uint32_t kvp_remoting_offload(struct kvp_remoting *t, uint32_t spare)
{
	uint32_t free_now, want, used, queued = 0, pinned = 0;

	if (!t || t->mode != KVP_REMOTE_PUBLISH_SELECTIVE)
		return 0;
	free_now = kvp_pool_n_free(t->pool);
	used = t->n_blocks - free_now;
	want = t->n_blocks - (uint32_t)((uint64_t)t->n_blocks * t->low_pct / 100);
	if (!t->offloading && (uint64_t)used * 100 > (uint64_t)t->n_blocks * t->high_pct)
		t->offloading = true;
	if (!t->offloading)
		return 0;
	for (uint32_t i = 0; i < t->n_held; i++)
		pinned += t->held[i].pin;
	if (free_now + pinned >= want) {
		t->offloading = free_now < want;
		return 0;
	}
	while (t->n_held < t->queue_blocks && free_now + pinned < want) {
		long b = kvp_pool_lru_peek(t->pool, KVP_NODE_ANY);
		uint32_t cost;
		int r;

		if (b < 0)
			break;
		if (offered(t, (uint32_t)b)) {
			/* in the store already (or on its way): nothing to save first */
			if (kvp_pool_evict_block(t->pool, (uint32_t)b) < 0)
				break;
			free_now++;
			continue;
		}
		cost = idle_chain(t, (uint32_t)b);
		if (cost > spare)
			break;
		r = send_block(t, (uint32_t)b, KVP_REMOTE_WHY_EVICTED);
		if (r != 0)
			break; /* breaker open, or not the index's: the pool evicts it as usual */
		spare -= cost;
		pinned++;
		queued++;
		t->st.evict_offers++;
	}
	return queued;
}

void kvp_remoting_count_refs(const struct kvp_remoting *t, uint32_t *refs)
{
	if (!t)
		return;
	for (uint32_t i = 0; i < t->n_held; i++)
		if (!t->held[i].pin)
			refs[t->held[i].block]++;
}

static void publish_done(struct kvp_remoting *t, const struct kvp_remote_done *d)
{
	uint32_t block = (uint32_t)d->tag;

	for (uint32_t i = 0; i < t->n_held; i++) {
		if (t->held[i].block != block)
			continue;
		if (t->held[i].pin) {
			kvp_pool_unpin(t->pool, block);
			/* copied (or dropped: the pool evicts it as it would have anyway) */
			kvp_pool_evict_block(t->pool, block);
		} else {
			kvp_pool_unref(t->pool, block);
		}
		t->held[i] = t->held[--t->n_held];
		return;
	}
}

uint32_t kvp_remoting_poll(struct kvp_remoting *t)
{
	struct kvp_remote_done done[POLL_BATCH];
	uint32_t total = 0;
	int n;

	if (!t)
		return 0;
	/* this domain's only: another engine's completions carry its cookies and blocks */
	while ((n = kvp_remote_poll_domain(t->remote, t->domain, done, POLL_BATCH)) > 0) {
		for (int i = 0; i < n; i++) {
			if (done[i].kind == KVP_REMOTE_DONE_PUBLISH) {
				publish_done(t, &done[i]);
				continue;
			}
			t->n_fetch--;
			t->on_fetch(t->ctx, done[i].tag,
				    done[i].result > 0 ? (uint32_t)done[i].result : 0,
				    done[i].stop);
		}
		total += (uint32_t)n;
	}
	drain_backlog(t);
	return total;
}

void kvp_remoting_stats(struct kvp_remoting *t, struct kvp_remoting_stats *st, uint64_t now_ns)
{
	if (now_ns - t->refreshed_ns >= REFRESH_NS) {
		bool up;

		t->refreshed_ns = now_ns;
		kvp_remote_stats(t->remote, t->domain, &t->st.tier);
		up = t->st.tier.state == KVP_BREAKER_CLOSED;
		if (up != t->was_up)
			kvp_log(up ? LOG_NOTICE : LOG_WARNING, "remote: domain %s: %s%s%s",
				kvp_remote_settings(t->remote)->domains[t->domain].name,
				up ? "store answering; tier on" : "tier off, local-only",
				!up && *t->st.tier.last_error ? ": " : "",
				up ? "" : t->st.tier.last_error);
		t->was_up = up;
	}
	*st = t->st;
	st->backlog_drops = t->backlog_drops;
}
