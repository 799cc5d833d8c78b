/* SPDX-License-Identifier: MIT */
/*
 * pool.h - the KV block pool of one trust domain: a sealed memfd segment of fixed-size
 * blocks, split into one arena per NUMA node, with reference counts, generations,
 * copy-on-write, and the LRU of cached blocks that nobody references.
 *
 * Block states (block metadata lives here, in daemon memory, never in the segment):
 *
 *	free     on its arena's free list; refcount 0, not cached
 *	used     refcount > 0 (held by sequences, lookups, leases); may also be cached
 *	cached   published in the prefix index (kvp_index_publish()); when its refcount
 *	         falls to 0 it stays in memory and becomes an eviction candidate
 *
 * Eviction takes the first *evictable* cached block in the order of the pool's policy
 * (enum kvp_evict_policy: least recently used by default; least frequently used; lowest
 * retention priority): refcount 0, no cached child (a leaf of the prefix tree: evicting
 * a parent would orphan its children), not pinned (kvp_pool_pin() or
 * kvp_pool_cache_pin()), and past its TTL deadline.  A TTL protects softly: blocks inside
 * a live TTL are evicted only when no candidate outside one is left in any arena, so a
 * pool full of TTL-protected blocks still serves requests; pins protect always.
 * Evicting a leaf may make its parent a leaf.  Each arena keeps its candidates in a
 * binary heap ordered by the policy: alloc/free from a free list are O(1), releasing a
 * cached block O(log n), and an eviction O(log n) plus O(log n) for each TTL-live
 * candidate before the victim (TTL expires by itself, so it is checked when eviction
 * meets a block, not kept in the heap order).  The clock TTLs are compared with is
 * CLOCK_MONOTONIC unless kvp_pool_set_clock() gives another (tests).  The index
 * registers an evictor callback so an evicted block also leaves the index.
 *
 * The one call the scheduler makes for a block is kvp_pool_alloc(): a free block of the
 * preferred node, else of another node, else it evicts one cached block (preferred
 * arena first) and takes that; -ENOMEM only when nothing at all can be evicted.
 *
 * The disk tier keeps its own state (shm/tier.h, and the index entry of a block that went
 * to disk): a block written there leaves the pool as an ordinary eviction.
 *
 * Room for later: int8 K/V with scales
 * (geometry only), one pool + one index per trust domain (nothing here is global).
 *
 * Thread: a pool is owned by the engine thread; no function here locks.  compute/
 * threads may read and write block contents through the kv view while the engine thread
 * waits for them, never the metadata.
 */
#ifndef KVP_SHM_POOL_H
#define KVP_SHM_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "shm/geom.h"
#include "shm/numa.h"
#include "shm/segment.h"

/* "No block": a parent of a first block, an empty link. */
#define KVP_BLOCK_NONE UINT32_MAX

/* Preferred node of an allocation when the caller has none (starts at arena 0). */
#define KVP_NODE_ANY (-1)

/*
 * Where a block's K/V lives.  A pool block is always MEM: a block offloaded to the disk
 * tier is freed, and its index entry (shm/index.h) remembers the tier slot.
 */
enum kvp_block_tier {
	KVP_TIER_MEM = 0,
	KVP_TIER_DISK = 1,
};

/* Eviction order among the candidates (cache.eviction). */
enum kvp_evict_policy {
	KVP_EVICT_LRU = 0,  /* least recently used first */
	KVP_EVICT_LFU,	    /* fewest uses (hits) first, then least recently used */
	KVP_EVICT_PRIORITY, /* lowest retention priority first, then least recently used */
	KVP_EVICT__COUNT
};

/* Highest retention priority (kvp_pool_set_retain()); 0 is the lowest. */
#define KVP_RETAIN_MAX 100

struct kvp_pool;

/**
 * struct kvp_block - metadata of one block (daemon memory; read with kvp_pool_block())
 * @refcount:   holders; 0 means free or cached-unreferenced
 * @generation: bumped each time the block is handed out by kvp_pool_alloc(), so a
 *              (block id, generation) handle held elsewhere can tell it was reused
 * @pin:        pin count; a pinned block is never evicted
 * @parent:     previous block of its prefix chain when cached, else KVP_BLOCK_NONE
 * @n_children: cached blocks whose @parent is this block (0 = leaf)
 * @free_next:  next block on the arena free list (free blocks only)
 * @heap_pos:   position in the arena's eviction heap, KVP_BLOCK_NONE when not in it
 * @arena:      arena (= logical NUMA node) the block belongs to
 * @tier:       enum kvp_block_tier
 * @cached:     1 while published in the prefix index
 * @retain:     retention priority 0..KVP_RETAIN_MAX (the last request that used it)
 * @last_use:   LRU clock (a pool-wide counter) at the last release or lookup hit
 * @ttl_deadline_ns: ns (the pool's clock) before which a cached block is evicted only
 *              when nothing else can be
 * @uses:       times published or hit (kvp_pool_touch()), the LFU count
 * @cpin:       cache pins (kvp_pool_cache_pin(): `kvpool pin`), counted apart from @pin
 * @prot:       1 while it waits for eviction among the TTL-protected candidates
 */
struct kvp_block {
	uint32_t refcount;
	uint32_t generation;
	uint32_t pin;
	uint32_t parent;
	uint32_t n_children;
	uint32_t free_next;
	uint32_t heap_pos;
	uint8_t arena;
	uint8_t tier;
	uint8_t cached;
	uint8_t retain;
	uint64_t last_use;
	uint64_t ttl_deadline_ns;
	uint32_t uses;
	uint32_t cpin;
	uint8_t prot;
	uint8_t reserved1[3];
};

/**
 * struct kvp_pool_config - what kvp_pool_new() builds
 * @shape:       K/V block shape (validated with kvp_geom_init())
 * @n_blocks:    blocks in the pool (>= 1)
 * @pages:       enum kvp_page_mode for the segment
 * @numa:        topology to split arenas over, or NULL for one arena and no binding
 *               (borrowed; must outlive the pool)
 * @name:        memfd name, e.g. "kvpool:default" (NULL: "kvpool")
 * @no_prefault: leave pages to be faulted on first touch (benchmarks that never touch
 *               block contents only; the daemon always pre-faults)
 * @stage_slots: integer K/V types: partial blocks whose keys can be staged at once
 *               (shm/geom.h struct kvp_kv_stage; about one per running sequence plus
 *               one prefill chunk's blocks); 0: KVP_POOL_STAGE_SLOTS
 * @kv_window:   int4: the residual window, tokens (struct kvp_kv_stage.window)
 */
struct kvp_pool_config {
	struct kvp_model_shape shape;
	uint32_t n_blocks;
	enum kvp_page_mode pages;
	const struct kvp_numa *numa;
	const char *name;
	int no_prefault;
	uint32_t stage_slots;
	uint32_t kv_window;
};

#define KVP_POOL_STAGE_SLOTS 64u

/* Per-arena counts; free + used + cached == n_blocks of the arena. */
struct kvp_arena_stats {
	uint32_t node_os_index; /* kernel NUMA node (0 without a topology) */
	uint32_t first;		/* first block id of the arena */
	uint32_t n_blocks;
	uint32_t free;	 /* on the free list */
	uint32_t used;	 /* refcount > 0 */
	uint32_t cached; /* cached with refcount 0 (evictable unless pinned/TTL) */
};

/* Pool counters for the status socket; totals since the pool was made. */
struct kvp_pool_stats {
	uint32_t n_arenas;
	uint32_t page_kind;    /* enum kvp_page_kind */
	uint64_t allocs;       /* successful kvp_pool_alloc() */
	uint64_t alloc_fails;  /* -ENOMEM returned */
	uint64_t alloc_remote; /* allocations served by a node other than the preferred */
	uint64_t evictions;
	uint64_t evictions_ttl; /* ... of blocks inside a live TTL (nothing else was left) */
	uint64_t flushed;	/* ... by kvp_pool_flush() */
	uint64_t cow_copies;
	uint32_t policy;       /* enum kvp_evict_policy */
	uint32_t cpin_blocks;  /* blocks with a cache pin */
	uint32_t cpin_idle;    /* ... of which cached and unreferenced */
	uint64_t ttl_until_ns; /* the latest TTL deadline ever given to a block (0: none) */
	struct kvp_arena_stats arena[KVP_MAX_ARENAS];
};

/*
 * Called by the pool just before an evicted cached block goes back to the free list,
 * so the index can drop its entry.  Registered by kvp_index_new().
 */
typedef void (*kvp_pool_evict_fn)(void *ctx, uint32_t block);

/**
 * kvp_pool_new() - make a pool: segment (page mode as configured), arenas bound to
 * their nodes, every page faulted in once, the segment sealed, all blocks free
 * @out: out; free with kvp_pool_free()
 * Return: 0; -EINVAL for a bad config; -ENOMEM/-EOPNOTSUPP (see kvp_segment_open());
 * -E2BIG if the topology has more than KVP_MAX_ARENAS nodes; other -errno.
 */
int kvp_pool_new(struct kvp_pool **out, const struct kvp_pool_config *cfg);

/* Free the pool and unmap its segment (free the index first).  NULL is fine. */
void kvp_pool_free(struct kvp_pool *pool);

/**
 * kvp_pool_alloc() - take a block with one reference, generation bumped
 * @node: preferred arena (logical NUMA node), or KVP_NODE_ANY
 * @id:   out; the block
 *
 * Order: free list of @node, then the others (node+1, node+2, ... wrapping); when all
 * are empty, evict the least recently used evictable cached block of @node's arena,
 * then of the others, and hand that block out.  The contents are not cleared.
 * Return: 0; -ENOMEM when no block is free and none can be evicted; -EINVAL for a bad
 * @node.
 */
int kvp_pool_alloc(struct kvp_pool *pool, int node, uint32_t *id);

/**
 * kvp_pool_ref() - one more reference on a used or cached block
 * A cached unreferenced block leaves the eviction candidates and counts as used.
 * Return: 0; -EINVAL for a bad or free @id; -EOVERFLOW at UINT32_MAX references.
 */
int kvp_pool_ref(struct kvp_pool *pool, uint32_t id);

/**
 * kvp_pool_unref() - drop one reference
 * At zero, an uncached block returns to its arena's free list, a cached one becomes an
 * eviction candidate (most recently used).
 * Return: 0, or -EINVAL for a bad id or a block with no reference (a double unref).
 */
int kvp_pool_unref(struct kvp_pool *pool, uint32_t id);

/**
 * kvp_pool_cow() - make sure the caller's reference is to a block nobody else sees
 * @id:     a block the caller holds a reference to
 * @node:   preferred node for the copy
 * @out_id: out; the block to write into
 *
 * A block is private when its refcount is 1 and it is not cached; then *@out_id = @id.
 * Otherwise a new block is allocated (kvp_pool_alloc(): may evict), the block_bytes of
 * @id are copied into it, the caller's reference to @id is dropped, and *@out_id is the
 * copy (refcount 1).  On error the caller still holds @id.
 * Return: 0 (private already), 1 (copied), -ENOMEM, or -EINVAL.
 */
int kvp_pool_cow(struct kvp_pool *pool, uint32_t id, int node, uint32_t *out_id);

/*
 * Pin / unpin a used or cached block (leases).  A pin keeps a cached block from eviction;
 * it is not a reference: an uncached block is freed at its last kvp_pool_unref() whatever
 * its pins, and they go with it (a lease holds a reference besides its pin).
 * Return 0, -EINVAL (bad id, free block, unpin without a pin), or -EOVERFLOW.
 */
int kvp_pool_pin(struct kvp_pool *pool, uint32_t id);
int kvp_pool_unpin(struct kvp_pool *pool, uint32_t id);

/**
 * kvp_pool_set_ttl() - keep a block from eviction until CLOCK_MONOTONIC @deadline_ns
 * A later deadline replaces an earlier one, never the reverse (several requests may
 * share the block).  The deadline is cleared when the block is freed.
 * Return: 0, or -EINVAL for a bad or free block.
 */
int kvp_pool_set_ttl(struct kvp_pool *pool, uint32_t id, uint64_t deadline_ns);

/**
 * kvp_pool_evict() - evict one evictable cached block, preferring arena @node
 * Used by kvp_pool_alloc(); exposed for a scheduler that wants headroom.
 * Return: the evicted block id (now free), or -ENOMEM when none is evictable.
 */
long kvp_pool_evict(struct kvp_pool *pool, int node);

/**
 * kvp_pool_evict_block() - evict @id now, if it is evictable (a disk-tier offload: the
 * block whose copy was just written, not whichever is coldest by then).  A TTL does not
 * hold it: the entry stays cached on disk.
 * Return: 0; -EBUSY when @id is not an evictable cached block (referenced, pinned, with
 * a cached child); -EINVAL for a bad id.
 */
int kvp_pool_evict_block(struct kvp_pool *pool, uint32_t id);

/**
 * kvp_pool_lru_peek() - the block kvp_pool_evict() would consider first: the first
 * evictable cached block of arena @node, or of all arenas (KVP_NODE_ANY), in the policy's
 * order; those inside a TTL come after all others (soonest deadline first).  The offloader pins what it writes, which takes it out of the
 * candidates, so the next peek gives the next coldest.
 * Return: the block id, -ENOENT when there is none, -EINVAL for a bad @node.
 */
long kvp_pool_lru_peek(const struct kvp_pool *pool, int node);

/**
 * kvp_pool_set_clock() - the clock TTL deadlines are compared with (tests inject one)
 * @now: returns ns; NULL for CLOCK_MONOTONIC
 */
void kvp_pool_set_clock(struct kvp_pool *pool, uint64_t (*now)(void *ctx), void *ctx);

/* The pool's clock now (ns). */
uint64_t kvp_pool_now(const struct kvp_pool *pool);

/**
 * kvp_pool_set_policy() - order eviction candidates by @policy from now on (reorders
 * every arena's heap).  Return: 0, or -EINVAL for an unknown policy.
 */
int kvp_pool_set_policy(struct kvp_pool *pool, enum kvp_evict_policy policy);

/*
 * Retention priority of @id (KVP_EVICT_PRIORITY): @prio clamped to KVP_RETAIN_MAX.  Set
 * while the block is held (hit or published); it orders the block when released.
 */
void kvp_pool_set_retain(struct kvp_pool *pool, uint32_t id, uint32_t prio);

/*
 * Cache pins (`kvpool pin`): like kvp_pool_pin() they keep a cached block from eviction
 * and flush, but are counted apart (kvp_pool_stats(): cpin_blocks, cpin_idle) so the
 * scheduler can leave pinned blocks out of what it can hand out, and the pinned bytes
 * can be capped.  Only cached blocks take one.  Return 0, -EINVAL (bad id, a block not
 * cached, unpin without a pin), -EOVERFLOW.
 */
int kvp_pool_cache_pin(struct kvp_pool *pool, uint32_t id);
int kvp_pool_cache_unpin(struct kvp_pool *pool, uint32_t id);

/**
 * kvp_pool_flush() - evict every evictable cached block now, TTL or not (`kvpool flush`):
 * what is held, pinned or has a held child stays
 * Return: blocks evicted.
 */
uint32_t kvp_pool_flush(struct kvp_pool *pool);

/* --- used by the prefix index (shm/index.c) only --- */

/* Register the evictor (one per pool); NULL unregisters.  Return 0, or -EBUSY if taken. */
int kvp_pool_set_evictor(struct kvp_pool *pool, kvp_pool_evict_fn fn, void *ctx);

/**
 * kvp_pool_mark_cached() - @id (held by the caller) is now published with @parent
 * @parent: a cached block, or KVP_BLOCK_NONE; it gains a child and stops being a leaf
 * Return: 0, -EINVAL (bad ids, @id free or already cached, @parent not cached).
 */
int kvp_pool_mark_cached(struct kvp_pool *pool, uint32_t id, uint32_t parent);

/* Update the LRU clock and the use count of @id (a lookup hit, a publish). */
void kvp_pool_touch(struct kvp_pool *pool, uint32_t id);

/* --- queries --- */

/* Metadata of @id (read-only; NULL for a bad id). */
const struct kvp_block *kvp_pool_block(const struct kvp_pool *pool, uint32_t id);

/* Start of block @id's K/V in the daemon's read-write mapping; the id must be valid. */
uint8_t *kvp_pool_data(const struct kvp_pool *pool, uint32_t id);

/* The view compute/ needs: base = block 0, n_blocks, geometry. */
void kvp_pool_kv_view(const struct kvp_pool *pool, struct kvp_kv_view *view);

uint32_t kvp_pool_n_blocks(const struct kvp_pool *pool);
/* Free blocks over all arenas (no cached ones): what the tiers' watermarks compare. */
uint32_t kvp_pool_n_free(const struct kvp_pool *pool);
const struct kvp_geom *kvp_pool_geom(const struct kvp_pool *pool);
uint32_t kvp_pool_n_arenas(const struct kvp_pool *pool);
struct kvp_arena_range kvp_pool_arena(const struct kvp_pool *pool, uint32_t arena);

/* The segment: fd, data offset, size, page kind (for WELCOME and the status socket). */
const struct kvp_segment *kvp_pool_segment(const struct kvp_pool *pool);

/* Fill @st (arena counters are kept incrementally: O(arenas)). */
void kvp_pool_stats(const struct kvp_pool *pool, struct kvp_pool_stats *st);

#endif /* KVP_SHM_POOL_H */
