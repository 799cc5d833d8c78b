/* SPDX-License-Identifier: MIT */
/*
 * remoting.h - the engine's side of the remote tier (shm/remote/remote.h): which blocks
 * are offered to the store and when, what is held while the tier copies them, and where
 * fetches come back to.  The remote tier is the level below memory and the disk tier
 * (docs/remote.md "In the daemon").
 *
 *  - publish: a block offered (created, hit a second time, about to be evicted) takes one
 *    pool reference (or, evicted, a pin) of ours until the tier's completion says it has
 *    copied the K/V; each (block, generation) is offered once;
 *  - fetch: the scheduler hands over blocks it holds, unpublished, and the tokens and
 *    parent hash after its local prefix; the completion comes back through a callback
 *    from kvp_remoting_poll() with the number of leading blocks that hold checked K/V;
 *  - selective mode, eviction: like the disk tier's offloader, above the high watermark
 *    the coldest evictable cached blocks not offered yet are pinned and published, then
 *    unpinned and evicted on the completion.
 *
 * A tier whose breaker is open refuses at once: nothing here ever waits for the network.
 *
 * Thread: the engine thread (the pool and the index are its), except kvp_remoting_new()
 * and kvp_remoting_free() (main thread, the engine not running).
 */
#ifndef KVP_ENGINE_REMOTING_H
#define KVP_ENGINE_REMOTING_H

#include <stdbool.h>
#include <stdint.h>

#include "shm/index.h"
#include "shm/pool.h"
#include "shm/remote/remote.h"

struct kvp_remoting;

/**
 * struct kvp_remoting_stats - the tier's counters (this domain) and the engine's use
 * @tier:          kvp_remote_stats(), refreshed at most every 250 ms
 * @configured:    a remote tier is configured
 * @offered:       blocks handed to kvp_remote_publish() (queued)
 * @fetch_blocks:  blocks asked for by fetches
 * @loaded_blocks: blocks fetched, checked and published in the index
 * @evict_offers:  selective mode: blocks published before their eviction
 * @backlog_drops: blocks not offered: the engine's backlog behind the tier's queue full
 */
struct kvp_remoting_stats {
	struct kvp_remote_stats tier;
	bool configured;
	uint64_t offered;
	uint64_t fetch_blocks;
	uint64_t loaded_blocks;
	uint64_t evict_offers;
	uint64_t backlog_drops;
};

/* A fetch finished: @n_ok leading blocks hold checked K/V (0 when refused or failed). */
typedef void (*kvp_remoting_fetch_fn)(void *ctx, uint64_t cookie, uint32_t n_ok, uint32_t stop);

/**
 * kvp_remoting_new() - drive @remote's domain @domain for @pool and @index (borrowed)
 * @high_pct, @low_pct: selective mode: pool use (%) above which cold blocks not offered
 *                      yet are published before they are evicted, and down to which
 * @on_fetch, @ctx:     where fetch completions go
 * Return: 0, -EINVAL, -ENOMEM.
 */
int kvp_remoting_new(struct kvp_remoting **out, struct kvp_remote *remote, uint32_t domain,
		     struct kvp_pool *pool, struct kvp_index *index, uint32_t high_pct,
		     uint32_t low_pct, kvp_remoting_fetch_fn on_fetch, void *ctx);

/*
 * Drop the references and pins held for publishes not completed (the engine is stopped;
 * the tier must be freed before the pool: its I/O thread may still read them).  No fetch
 * callback runs.  NULL ok.
 */
void kvp_remoting_free(struct kvp_remoting *t);

/* An fd readable while completions wait (the tier's eventfd), or -1 for NULL. */
int kvp_remoting_event_fd(const struct kvp_remoting *t);

/* Operations whose completion has not been handled yet (publishes and fetches). */
uint32_t kvp_remoting_in_flight(const struct kvp_remoting *t);

/* Whether a fetch would be tried now (a tier, its breaker closed). */
bool kvp_remoting_usable(const struct kvp_remoting *t);

/* Most blocks one fetch may ask for (the tier's max_fetch_blocks); 0 for NULL. */
uint32_t kvp_remoting_max_fetch(const struct kvp_remoting *t);

/**
 * kvp_remoting_offer() - offer published @block (hash, tokens from the index) for the
 * store, @why a enum kvp_remote_why.  A block already offered in its current life, or
 * not in the index, is skipped; a full queue or an open breaker drops it (counted by the
 * tier).  Return: true when queued (one reference held until the completion).
 */
bool kvp_remoting_offer(struct kvp_remoting *t, uint32_t block, enum kvp_remote_why why);

/* Mark @block as offered in its current life (fetched from the store: not sent back). */
void kvp_remoting_mark(struct kvp_remoting *t, uint32_t block);

/**
 * kvp_remoting_fetch() - fetch the @n blocks after a local prefix into @blocks (held by
 * the caller, unpublished, untouched until the callback with @cookie)
 * @key:         the request's prefix key
 * @parent_hash: chain hash of the block before the first one (@key->seed at block 0)
 * @tokens:      @n * block_tokens ids
 * @prefill_tps: the engine's prefill speed for these tokens (the tier's cost check)
 * Return: 0 queued; -ENODEV (off, breaker open), -EBUSY (queue full), -EINVAL: compute.
 */
int kvp_remoting_fetch(struct kvp_remoting *t, const struct kvp_prefix_key *key,
		       struct kvp_h128 parent_hash, const uint32_t *tokens, const uint32_t *blocks,
		       uint32_t n, double prefill_tps, uint64_t cookie);

/* A fetch's blocks came back checked and were published in the index (statistics). */
void kvp_remoting_loaded(struct kvp_remoting *t, uint32_t n);

/*
 * Selective mode: publish cold blocks before they leave memory (see top), pinning at most
 * @spare blocks nobody references.  Return: publishes queued.
 */
uint32_t kvp_remoting_offload(struct kvp_remoting *t, uint32_t spare);

/* Blocks nobody references that our pins keep from eviction (their idle ancestors too). */
uint32_t kvp_remoting_pinned_idle(struct kvp_remoting *t);

/* Add the references we hold, per block, to @refs (kvp_sched_check()). */
void kvp_remoting_count_refs(const struct kvp_remoting *t, uint32_t *refs);

/* Handle completions (fetches to the callback) without waiting.  Return: how many. */
uint32_t kvp_remoting_poll(struct kvp_remoting *t);

/* Fill @st; the tier's counters are refreshed when @now_ns is 250 ms past the last. */
void kvp_remoting_stats(struct kvp_remoting *t, struct kvp_remoting_stats *st, uint64_t now_ns);

#endif /* KVP_ENGINE_REMOTING_H */
