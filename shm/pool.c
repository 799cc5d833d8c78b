/* SPDX-License-Identifier: MIT */
/*
 * pool.c - the block allocator of one trust domain's pool (see pool.h for the states).
 *
 * Invariants, per arena:
 *   - free + used + cached == arena block count, where free = on the free list,
 *     used = refcount > 0, cached = cached with refcount 0;
 *   - a block is in one of the arena's two eviction heaps iff it is evictable-by-state:
 *     cached, refcount 0, no cached child, not pinned, in memory; which one is decided
 *     by its TTL when it enters, and expired ones move over at each eviction;
 *   - the open heap is a min-heap in the policy's order ending on last_use, whose values
 *     are unique (a pool-wide counter), so the order is exact and ties cannot occur;
 *   - a cached block's parent is cached, and parent->n_children counts its cached
 *     children, so only leaves of the prefix tree are ever evicted.
 *
 * Thread: engine thread only, no locks (pool.h).
 */
#include "shm/pool.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "shm/bigalloc.h"
#include "util/time.h"

/* A binary min-heap of block ids (see "eviction heaps"). */
struct bheap {
	uint32_t *v;
	uint32_t len;
};

struct arena {
	struct kvp_arena_range range;
	uint32_t free_head; /* KVP_BLOCK_NONE when empty */
	struct bheap open;  /* candidates outside their TTL, in policy order */
	struct bheap prot;  /* candidates inside their TTL, soonest deadline first */
	uint32_t n_free;
	uint32_t n_used;
	uint32_t n_cached;
};

struct kvp_pool {
	struct kvp_segment *seg;
	struct kvp_geom geom;
	uint32_t n_blocks;
	uint32_t n_arenas;
	const struct kvp_numa *numa;
	struct kvp_block *blocks; /* n_blocks */
	struct arena arenas[KVP_MAX_ARENAS];
	uint64_t tick; /* LRU clock */
	kvp_pool_evict_fn evictor;
	void *evict_ctx;
	uint64_t (*clock)(void *ctx); /* NULL: CLOCK_MONOTONIC */
	void *clock_ctx;
	enum kvp_evict_policy policy;
	uint32_t cpin_blocks, cpin_idle;
	uint64_t ttl_until; /* the latest deadline kvp_pool_set_ttl() was given */
	uint64_t allocs, alloc_fails, alloc_remote, evictions, evictions_ttl, flushed, cow_copies;
	struct kvp_kv_stage *stage; /* integer K/V types: partial blocks' keys; else NULL */
};

static struct kvp_block *blk(const struct kvp_pool *p, uint32_t id)
{
	return id < p->n_blocks ? &p->blocks[id] : NULL;
}

/*
 * ---- eviction heaps (per arena) ----
 *
 * Two heaps: the candidates outside their TTL ("open", in the policy's order) and those
 * inside one ("protected", soonest deadline first).  A block goes into one when it
 * becomes a candidate, by its deadline then; an eviction first moves every protected
 * block whose deadline has passed into the open heap (each block moves at most once per
 * release), so "is any open candidate left" is one look at a heap top.
 */

/* Eviction order: the policy's key first, then last use (unique, so never a tie). */
static int heap_less(const struct kvp_pool *p, uint32_t a, uint32_t b)
{
	const struct kvp_block *x = &p->blocks[a], *y = &p->blocks[b];

	if (x->prot) {
		if (x->ttl_deadline_ns != y->ttl_deadline_ns)
			return x->ttl_deadline_ns < y->ttl_deadline_ns;
		return x->last_use < y->last_use;
	}
	if (p->policy == KVP_EVICT_LFU && x->uses != y->uses)
		return x->uses < y->uses;
	if (p->policy == KVP_EVICT_PRIORITY && x->retain != y->retain)
		return x->retain < y->retain;
	return x->last_use < y->last_use;
}

static void heap_set(struct kvp_pool *p, struct bheap *h, uint32_t pos, uint32_t id)
{
	h->v[pos] = id;
	p->blocks[id].heap_pos = pos;
}

static void heap_up(struct kvp_pool *p, struct bheap *h, uint32_t pos)
{
	uint32_t id = h->v[pos];

	while (pos > 0) {
		uint32_t up = (pos - 1) / 2;

		if (!heap_less(p, id, h->v[up]))
			break;
		heap_set(p, h, pos, h->v[up]);
		pos = up;
	}
	heap_set(p, h, pos, id);
}

static void heap_down(struct kvp_pool *p, struct bheap *h, uint32_t pos)
{
	uint32_t id = h->v[pos];

	for (;;) {
		uint32_t c = 2 * pos + 1;

		if (c >= h->len)
			break;
		if (c + 1 < h->len && heap_less(p, h->v[c + 1], h->v[c]))
			c++;
		if (!heap_less(p, h->v[c], id))
			break;
		heap_set(p, h, pos, h->v[c]);
		pos = c;
	}
	heap_set(p, h, pos, id);
}

/* The heap @id belongs in (by its prot flag). */
static struct bheap *heap_of(struct kvp_pool *p, uint32_t id)
{
	struct arena *a = &p->arenas[p->blocks[id].arena];

	return p->blocks[id].prot ? &a->prot : &a->open;
}

static void heap_push(struct kvp_pool *p, uint32_t id, bool prot)
{
	struct bheap *h;

	p->blocks[id].prot = prot;
	h = heap_of(p, id);
	h->v[h->len] = id;
	p->blocks[id].heap_pos = h->len++;
	heap_up(p, h, h->len - 1);
}

static void heap_remove(struct kvp_pool *p, uint32_t id)
{
	struct bheap *h = heap_of(p, id);
	uint32_t pos = p->blocks[id].heap_pos;
	uint32_t last = h->v[--h->len];

	p->blocks[id].heap_pos = KVP_BLOCK_NONE;
	if (pos == h->len)
		return;
	heap_set(p, h, pos, last);
	heap_down(p, h, pos);
	heap_up(p, h, p->blocks[last].heap_pos);
}

static int evictable_state(const struct kvp_block *b)
{
	return b->cached && !b->refcount && !b->n_children && !b->pin && !b->cpin &&
	       b->tier == KVP_TIER_MEM;
}

/* Put @id in or out of the heaps after any change to the fields above or its TTL. */
static void lru_sync(struct kvp_pool *p, uint32_t id)
{
	struct kvp_block *b = &p->blocks[id];

	if (b->heap_pos != KVP_BLOCK_NONE)
		heap_remove(p, id);
	if (evictable_state(b))
		heap_push(p, id, b->ttl_deadline_ns && b->ttl_deadline_ns > kvp_pool_now(p));
}

/* Protected candidates of arena @a whose TTL has passed join the open ones. */
static void expire(struct kvp_pool *p, struct arena *a, uint64_t now)
{
	while (a->prot.len && p->blocks[a->prot.v[0]].ttl_deadline_ns <= now) {
		uint32_t id = a->prot.v[0];

		heap_remove(p, id);
		heap_push(p, id, false);
	}
}

/* ---- free lists ---- */

static void free_push(struct kvp_pool *p, uint32_t id)
{
	struct kvp_block *b = &p->blocks[id];
	struct arena *a = &p->arenas[b->arena];

	b->free_next = a->free_head;
	a->free_head = id;
	b->pin = 0;
	b->cpin = 0;
	b->uses = 0;
	b->retain = 0;
	b->ttl_deadline_ns = 0;
	b->parent = KVP_BLOCK_NONE;
	a->n_free++;
	/* freed before it filled (a request ended, was cancelled or preempted) */
	if (p->stage)
		kvp_stage_drop(p->stage, id);
}

static uint32_t free_pop(struct kvp_pool *p, struct arena *a)
{
	uint32_t id = a->free_head;
	struct kvp_block *b = &p->blocks[id];

	a->free_head = b->free_next;
	b->free_next = KVP_BLOCK_NONE;
	b->refcount = 1;
	b->generation++;
	a->n_free--;
	a->n_used++;
	return id;
}

/* ---- eviction ---- */

/* @victim (out of the heap, evictable) leaves the index and goes to the free list. */
static void evict_one(struct kvp_pool *p, uint32_t victim)
{
	struct kvp_block *b = &p->blocks[victim];
	struct arena *a = &p->arenas[b->arena];
	uint32_t parent = b->parent;

	if (p->evictor)
		p->evictor(p->evict_ctx, victim);
	b->cached = 0;
	a->n_cached--;
	free_push(p, victim);
	if (parent != KVP_BLOCK_NONE) {
		p->blocks[parent].n_children--;
		lru_sync(p, parent); /* it may have just become a leaf */
	}
	p->evictions++;
}

/*
 * Evict the first candidate of arena @ai: an open one, or with @ttl_too the protected
 * one whose TTL ends first.  Returns its id or KVP_BLOCK_NONE.
 */
static uint32_t evict_from(struct kvp_pool *p, uint32_t ai, uint64_t now, bool ttl_too)
{
	struct arena *a = &p->arenas[ai];
	uint32_t victim;

	expire(p, a, now);
	if (a->open.len)
		victim = a->open.v[0];
	else if (ttl_too && a->prot.len)
		victim = a->prot.v[0];
	else
		return KVP_BLOCK_NONE;
	p->evictions_ttl += p->blocks[victim].prot;
	heap_remove(p, victim);
	evict_one(p, victim);
	return victim;
}

uint64_t kvp_pool_now(const struct kvp_pool *p)
{
	return p->clock ? p->clock(p->clock_ctx) : kvp_now_ns();
}

long kvp_pool_evict(struct kvp_pool *p, int node)
{
	uint32_t start = node < 0 ? 0 : (uint32_t)node;
	uint64_t now = kvp_pool_now(p);

	if (node >= (int)p->n_arenas)
		return -EINVAL;
	/* a TTL protects only while something unprotected is left (pool.h) */
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t i = 0; i < p->n_arenas; i++) {
			uint32_t id = evict_from(p, (start + i) % p->n_arenas, now, pass == 1);

			if (id != KVP_BLOCK_NONE)
				return id;
		}
	return -ENOMEM;
}

uint32_t kvp_pool_flush(struct kvp_pool *p)
{
	uint32_t n = 0;

	/* evicting a leaf may push its parent into the heap: loop until each is empty */
	for (uint32_t i = 0; i < p->n_arenas; i++) {
		struct arena *a = &p->arenas[i];

		while (a->open.len || a->prot.len) {
			uint32_t id = a->open.len ? a->open.v[0] : a->prot.v[0];

			heap_remove(p, id);
			evict_one(p, id);
			n++;
		}
	}
	p->flushed += n;
	return n;
}

int kvp_pool_evict_block(struct kvp_pool *p, uint32_t id)
{
	struct kvp_block *b = blk(p, id);

	if (!b)
		return -EINVAL;
	/* a TTL does not hold it: the caller keeps its entry (a disk copy) */
	if (b->heap_pos == KVP_BLOCK_NONE)
		return -EBUSY;
	heap_remove(p, id);
	evict_one(p, id);
	return 0;
}

long kvp_pool_lru_peek(const struct kvp_pool *p, int node)
{
	uint32_t best = KVP_BLOCK_NONE;

	if (node >= (int)p->n_arenas || node < KVP_NODE_ANY)
		return -EINVAL;
	for (uint32_t i = 0; i < p->n_arenas; i++) {
		const struct arena *a = &p->arenas[i];
		const struct bheap *h = a->open.len ? &a->open : &a->prot;

		if ((node >= 0 && i != (uint32_t)node) || !h->len)
			continue;
		/* open candidates first; among arenas the policy's (or the deadline's) order */
		if (best == KVP_BLOCK_NONE || (p->blocks[best].prot && !p->blocks[h->v[0]].prot) ||
		    (p->blocks[best].prot == p->blocks[h->v[0]].prot &&
		     heap_less(p, h->v[0], best)))
			best = h->v[0];
	}
	return best == KVP_BLOCK_NONE ? -ENOENT : (long)best;
}

/* ---- public allocator API ---- */

int kvp_pool_alloc(struct kvp_pool *p, int node, uint32_t *id)
{
	uint32_t start = node < 0 ? 0 : (uint32_t)node;
	long ev;

	if (node >= (int)p->n_arenas || node < KVP_NODE_ANY)
		return -EINVAL;
	for (uint32_t i = 0; i < p->n_arenas; i++) {
		struct arena *a = &p->arenas[(start + i) % p->n_arenas];

		if (a->free_head != KVP_BLOCK_NONE) {
			*id = free_pop(p, a);
			p->allocs++;
			p->alloc_remote += i && node >= 0;
			return 0;
		}
	}
	ev = kvp_pool_evict(p, node);
	if (ev < 0) {
		p->alloc_fails++;
		return -ENOMEM;
	}
	*id = free_pop(p, &p->arenas[p->blocks[ev].arena]);
	p->allocs++;
	p->alloc_remote += p->blocks[ev].arena != start && node >= 0;
	return 0;
}

int kvp_pool_ref(struct kvp_pool *p, uint32_t id)
{
	struct kvp_block *b = blk(p, id);

	if (!b || (!b->refcount && !b->cached))
		return -EINVAL;
	if (b->refcount == UINT32_MAX)
		return -EOVERFLOW;
	if (!b->refcount++) {
		struct arena *a = &p->arenas[b->arena];

		a->n_cached--;
		a->n_used++;
		p->cpin_idle -= b->cpin != 0;
		lru_sync(p, id);
	}
	return 0;
}

int kvp_pool_unref(struct kvp_pool *p, uint32_t id)
{
	struct kvp_block *b = blk(p, id);
	struct arena *a;

	if (!b || !b->refcount)
		return -EINVAL;
	if (--b->refcount)
		return 0;
	a = &p->arenas[b->arena];
	a->n_used--;
	b->last_use = ++p->tick;
	if (b->cached) {
		a->n_cached++;
		p->cpin_idle += b->cpin != 0;
		lru_sync(p, id);
	} else {
		free_push(p, id);
	}
	return 0;
}

int kvp_pool_cow(struct kvp_pool *p, uint32_t id, int node, uint32_t *out_id)
{
	struct kvp_block *b = blk(p, id);
	uint32_t copy;
	int r;

	if (!b || !b->refcount)
		return -EINVAL;
	if (b->refcount == 1 && !b->cached) {
		*out_id = id;
		return 0;
	}
	/* @id holds our reference, so the allocation cannot evict it */
	r = kvp_pool_alloc(p, node, &copy);
	if (r < 0)
		return r;
	memcpy(kvp_pool_data(p, copy), kvp_pool_data(p, id), p->geom.block_bytes);
	/* a partial block's staged keys are part of it (integer K/V types) */
	if (p->stage && kvp_stage_copy(p->stage, id, copy) < 0) {
		kvp_pool_unref(p, copy);
		return -ENOMEM;
	}
	kvp_pool_unref(p, id);
	p->cow_copies++;
	*out_id = copy;
	return 1;
}

int kvp_pool_pin(struct kvp_pool *p, uint32_t id)
{
	struct kvp_block *b = blk(p, id);

	if (!b || (!b->refcount && !b->cached))
		return -EINVAL;
	if (b->pin == UINT32_MAX)
		return -EOVERFLOW;
	b->pin++;
	lru_sync(p, id);
	return 0;
}

int kvp_pool_unpin(struct kvp_pool *p, uint32_t id)
{
	struct kvp_block *b = blk(p, id);

	if (!b || !b->pin)
		return -EINVAL;
	b->pin--;
	lru_sync(p, id);
	return 0;
}

int kvp_pool_cache_pin(struct kvp_pool *p, uint32_t id)
{
	struct kvp_block *b = blk(p, id);

	/* cached blocks only: they leave the pool by eviction alone, which a pin prevents */
	if (!b || !b->cached)
		return -EINVAL;
	if (b->cpin == UINT32_MAX)
		return -EOVERFLOW;
	if (!b->cpin++) {
		p->cpin_blocks++;
		p->cpin_idle += !b->refcount;
	}
	lru_sync(p, id);
	return 0;
}

int kvp_pool_cache_unpin(struct kvp_pool *p, uint32_t id)
{
	struct kvp_block *b = blk(p, id);

	if (!b || !b->cpin)
		return -EINVAL;
	if (!--b->cpin) {
		p->cpin_blocks--;
		p->cpin_idle -= !b->refcount;
	}
	lru_sync(p, id);
	return 0;
}

void kvp_pool_set_clock(struct kvp_pool *p, uint64_t (*now)(void *ctx), void *ctx)
{
	p->clock = now;
	p->clock_ctx = ctx;
}

int kvp_pool_set_policy(struct kvp_pool *p, enum kvp_evict_policy policy)
{
	if ((unsigned int)policy >= KVP_EVICT__COUNT)
		return -EINVAL;
	p->policy = policy;
	for (uint32_t i = 0; i < p->n_arenas; i++) {
		struct arena *a = &p->arenas[i];

		/* heapify again under the new order */
		for (uint32_t k = a->open.len / 2; k-- > 0;)
			heap_down(p, &a->open, k);
	}
	return 0;
}

void kvp_pool_set_retain(struct kvp_pool *p, uint32_t id, uint32_t prio)
{
	struct kvp_block *b = blk(p, id);

	if (b)
		b->retain = (uint8_t)(prio > KVP_RETAIN_MAX ? KVP_RETAIN_MAX : prio);
}

int kvp_pool_set_ttl(struct kvp_pool *p, uint32_t id, uint64_t deadline_ns)
{
	struct kvp_block *b = blk(p, id);

	if (!b || (!b->refcount && !b->cached))
		return -EINVAL;
	if (deadline_ns > p->ttl_until)
		p->ttl_until = deadline_ns;
	if (deadline_ns > b->ttl_deadline_ns) {
		b->ttl_deadline_ns = deadline_ns;
		if (b->heap_pos != KVP_BLOCK_NONE)
			lru_sync(p, id); /* it may be protected now */
	}
	return 0;
}

int kvp_pool_set_evictor(struct kvp_pool *p, kvp_pool_evict_fn fn, void *ctx)
{
	if (fn && p->evictor)
		return -EBUSY;
	p->evictor = fn;
	p->evict_ctx = ctx;
	return 0;
}

int kvp_pool_mark_cached(struct kvp_pool *p, uint32_t id, uint32_t parent)
{
	struct kvp_block *b = blk(p, id);
	struct kvp_block *pb = parent == KVP_BLOCK_NONE ? NULL : blk(p, parent);

	if (!b || !b->refcount || b->cached || id == parent)
		return -EINVAL;
	if (parent != KVP_BLOCK_NONE && (!pb || !pb->cached))
		return -EINVAL;
	b->cached = 1;
	b->parent = parent;
	if (pb) {
		pb->n_children++;
		lru_sync(p, parent);
	}
	return 0;
}

void kvp_pool_touch(struct kvp_pool *p, uint32_t id)
{
	struct kvp_block *b = blk(p, id);

	if (!b)
		return;
	b->last_use = ++p->tick;
	if (b->uses < UINT32_MAX)
		b->uses++;
	if (b->heap_pos != KVP_BLOCK_NONE)
		lru_sync(p, id);
}

/* ---- construction ---- */

/* Bind each arena's pages to its node; arena boundaries round down to a page. */
static int bind_arenas(struct kvp_pool *p)
{
	struct kvp_segment *s = p->seg;

	for (uint32_t i = 0; i < p->n_arenas; i++) {
		const struct kvp_arena_range *r = &p->arenas[i].range;
		size_t start = i ? s->data_offset + (size_t)r->first * p->geom.block_stride : 0;
		size_t end = i + 1 < p->n_arenas ? s->data_offset + (size_t)(r->first + r->count) *
									    p->geom.block_stride :
						   s->bytes;
		int err;

		start -= start % s->page_bytes;
		end -= end % s->page_bytes;
		if (end <= start)
			continue;
		err = kvp_numa_bind(p->numa, i, s->base + start, end - start);
		if (err < 0)
			return err;
	}
	return 0;
}

/* The block metadata and the arenas' heaps (NULLs are fine). */
static void free_arrays(struct kvp_pool *p)
{
	for (uint32_t i = 0; i < p->n_arenas; i++) {
		free(p->arenas[i].open.v);
		free(p->arenas[i].prot.v);
	}
	free(p->blocks);
}

int kvp_pool_new(struct kvp_pool **out, const struct kvp_pool_config *cfg)
{
	struct kvp_arena_range ranges[KVP_MAX_ARENAS];
	struct kvp_pool *p;
	int r;

	if (!out || !cfg || !cfg->n_blocks || cfg->n_blocks == KVP_BLOCK_NONE)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	r = kvp_geom_init(&p->geom, &cfg->shape);
	if (r < 0)
		goto err_free;
	p->n_blocks = cfg->n_blocks;
	p->numa = cfg->numa;
	if (kvp_dtype_is_int(cfg->shape.dtype)) {
		p->stage = calloc(1, sizeof(*p->stage));
		r = p->stage ? kvp_stage_init(p->stage, &p->geom, p->n_blocks,
					      cfg->stage_slots ? cfg->stage_slots :
								 KVP_POOL_STAGE_SLOTS) :
			       -ENOMEM;
		if (r < 0)
			goto err_free;
		if (cfg->shape.dtype == KVP_DTYPE_INT4)
			p->stage->window = cfg->kv_window;
	}
	p->n_arenas = cfg->numa ? kvp_numa_n_nodes(cfg->numa) : 1;
	r = kvp_numa_split(p->n_blocks, p->n_arenas, ranges);
	if (r < 0)
		goto err_free;

	p->blocks = kvp_big_calloc(p->n_blocks, sizeof(*p->blocks));
	if (!p->blocks) {
		r = -ENOMEM;
		goto err_free;
	}
	for (uint32_t i = 0; i < p->n_arenas; i++) {
		struct arena *a = &p->arenas[i];

		a->range = ranges[i];
		a->free_head = KVP_BLOCK_NONE;
		a->open.v = malloc(((size_t)a->range.count + 1) * sizeof(*a->open.v));
		a->prot.v = malloc(((size_t)a->range.count + 1) * sizeof(*a->prot.v));
		if (!a->open.v || !a->prot.v) {
			r = -ENOMEM;
			goto err_arrays;
		}
		/* push in reverse so the lowest ids come out first */
		for (uint32_t k = a->range.count; k-- > 0;) {
			uint32_t id = a->range.first + k;

			p->blocks[id].arena = (uint8_t)i;
			p->blocks[id].heap_pos = KVP_BLOCK_NONE;
			free_push(p, id);
		}
	}

	r = kvp_segment_open(&p->seg, &p->geom, p->n_blocks, cfg->pages, cfg->name);
	if (r < 0)
		goto err_arrays;
	if (p->numa) {
		r = bind_arenas(p);
		if (r < 0)
			goto err_segment;
	}
	if (!cfg->no_prefault) {
		r = kvp_segment_prefault(p->seg);
		if (r < 0)
			goto err_segment;
	}
	r = kvp_segment_seal(p->seg);
	if (r < 0)
		goto err_segment;
	*out = p;
	return 0;

err_segment:
	kvp_segment_close(p->seg);
err_arrays:
	free_arrays(p);
err_free:
	if (p->stage)
		kvp_stage_deinit(p->stage);
	free(p->stage);
	free(p);
	return r;
}

void kvp_pool_free(struct kvp_pool *p)
{
	if (!p)
		return;
	kvp_segment_close(p->seg);
	free_arrays(p);
	if (p->stage)
		kvp_stage_deinit(p->stage);
	free(p->stage);
	free(p);
}

/* ---- queries ---- */

const struct kvp_block *kvp_pool_block(const struct kvp_pool *p, uint32_t id)
{
	return blk(p, id);
}

uint8_t *kvp_pool_data(const struct kvp_pool *p, uint32_t id)
{
	return kvp_segment_data(p->seg) + (size_t)id * p->geom.block_stride;
}

void kvp_pool_kv_view(const struct kvp_pool *p, struct kvp_kv_view *view)
{
	view->base = kvp_segment_data(p->seg);
	view->n_blocks = p->n_blocks;
	view->geom = p->geom;
	view->stage = p->stage;
}

uint32_t kvp_pool_n_blocks(const struct kvp_pool *p)
{
	return p->n_blocks;
}

uint32_t kvp_pool_n_free(const struct kvp_pool *p)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < p->n_arenas; i++)
		n += p->arenas[i].n_free;
	return n;
}

const struct kvp_geom *kvp_pool_geom(const struct kvp_pool *p)
{
	return &p->geom;
}

uint32_t kvp_pool_n_arenas(const struct kvp_pool *p)
{
	return p->n_arenas;
}

struct kvp_arena_range kvp_pool_arena(const struct kvp_pool *p, uint32_t arena)
{
	struct kvp_arena_range none = { 0, 0 };

	return arena < p->n_arenas ? p->arenas[arena].range : none;
}

const struct kvp_segment *kvp_pool_segment(const struct kvp_pool *p)
{
	return p->seg;
}

void kvp_pool_stats(const struct kvp_pool *p, struct kvp_pool_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->n_arenas = p->n_arenas;
	st->page_kind = p->seg->kind;
	st->allocs = p->allocs;
	st->alloc_fails = p->alloc_fails;
	st->alloc_remote = p->alloc_remote;
	st->evictions = p->evictions;
	st->evictions_ttl = p->evictions_ttl;
	st->flushed = p->flushed;
	st->cow_copies = p->cow_copies;
	st->policy = p->policy;
	st->cpin_blocks = p->cpin_blocks;
	st->cpin_idle = p->cpin_idle;
	st->ttl_until_ns = p->ttl_until;
	for (uint32_t i = 0; i < p->n_arenas; i++) {
		const struct arena *a = &p->arenas[i];

		st->arena[i] = (struct kvp_arena_stats){
			.node_os_index = p->numa ? kvp_numa_os_index(p->numa, i) : 0,
			.first = a->range.first,
			.n_blocks = a->range.count,
			.free = a->n_free,
			.used = a->n_used,
			.cached = a->n_cached,
		};
	}
}
