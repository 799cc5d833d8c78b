/* SPDX-License-Identifier: MIT */
/*
 * pool.c - the block allocator of one trust domain's pool (see pool.h for the states).
 *
 * Invariants, per arena:
 *   - free + used + cached == arena block count, where free = on the free list,
 *     used = refcount > 0, cached = cached with refcount 0;
 *   - a block is in the arena's eviction heap iff it is evictable-by-state: cached,
 *     refcount 0, no cached child, not pinned, in memory (TTL is checked at eviction
 *     time because it expires by itself);
 *   - the heap is a min-heap on last_use, and last_use values are unique (a pool-wide
 *     counter), so "least recently used" is exact and ties cannot occur;
 *   - a cached block's parent is cached, and parent->n_children counts its cached
 *     children, so only leaves of the prefix tree are ever evicted.
 *
 * Thread: engine thread only, no locks (pool.h).
 */
#include "shm/pool.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shm/bigalloc.h"
#include "util/time.h"

struct arena {
	struct kvp_arena_range range;
	uint32_t free_head; /* KVP_BLOCK_NONE when empty */
	uint32_t *heap;	    /* eviction candidates, min-heap on last_use */
	uint32_t heap_len;
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
	uint32_t *stash; /* eviction scratch: TTL-live candidates set aside */
	uint64_t tick;	 /* LRU clock */
	kvp_pool_evict_fn evictor;
	void *evict_ctx;
	uint64_t allocs, alloc_fails, alloc_remote, evictions, cow_copies;
};

static struct kvp_block *blk(const struct kvp_pool *p, uint32_t id)
{
	return id < p->n_blocks ? &p->blocks[id] : NULL;
}

/* ---- eviction heap (per arena, min on last_use) ---- */

static int heap_less(const struct kvp_pool *p, uint32_t a, uint32_t b)
{
	return p->blocks[a].last_use < p->blocks[b].last_use;
}

static void heap_set(struct kvp_pool *p, struct arena *a, uint32_t pos, uint32_t id)
{
	a->heap[pos] = id;
	p->blocks[id].heap_pos = pos;
}

static void heap_up(struct kvp_pool *p, struct arena *a, uint32_t pos)
{
	uint32_t id = a->heap[pos];

	while (pos > 0) {
		uint32_t up = (pos - 1) / 2;

		if (!heap_less(p, id, a->heap[up]))
			break;
		heap_set(p, a, pos, a->heap[up]);
		pos = up;
	}
	heap_set(p, a, pos, id);
}

static void heap_down(struct kvp_pool *p, struct arena *a, uint32_t pos)
{
	uint32_t id = a->heap[pos];

	for (;;) {
		uint32_t c = 2 * pos + 1;

		if (c >= a->heap_len)
			break;
		if (c + 1 < a->heap_len && heap_less(p, a->heap[c + 1], a->heap[c]))
			c++;
		if (!heap_less(p, a->heap[c], id))
			break;
		heap_set(p, a, pos, a->heap[c]);
		pos = c;
	}
	heap_set(p, a, pos, id);
}

static void heap_push(struct kvp_pool *p, struct arena *a, uint32_t id)
{
	a->heap[a->heap_len] = id;
	p->blocks[id].heap_pos = a->heap_len++;
	heap_up(p, a, a->heap_len - 1);
}

static void heap_remove(struct kvp_pool *p, struct arena *a, uint32_t id)
{
	uint32_t pos = p->blocks[id].heap_pos;
	uint32_t last = a->heap[--a->heap_len];

	p->blocks[id].heap_pos = KVP_BLOCK_NONE;
	if (pos == a->heap_len)
		return;
	heap_set(p, a, pos, last);
	heap_down(p, a, pos);
	heap_up(p, a, p->blocks[last].heap_pos);
}

static int evictable_state(const struct kvp_block *b)
{
	return b->cached && !b->refcount && !b->n_children && !b->pin && b->tier == KVP_TIER_MEM;
}

/* Put @id in or out of its arena's heap after any change to the fields above. */
static void lru_sync(struct kvp_pool *p, uint32_t id)
{
	struct kvp_block *b = &p->blocks[id];
	struct arena *a = &p->arenas[b->arena];
	int in = b->heap_pos != KVP_BLOCK_NONE;

	if (evictable_state(b) && !in)
		heap_push(p, a, id);
	else if (!evictable_state(b) && in)
		heap_remove(p, a, id);
}

/* ---- free lists ---- */

static void free_push(struct kvp_pool *p, uint32_t id)
{
	struct kvp_block *b = &p->blocks[id];
	struct arena *a = &p->arenas[b->arena];

	b->free_next = a->free_head;
	a->free_head = id;
	b->pin = 0;
	b->ttl_deadline_ns = 0;
	b->parent = KVP_BLOCK_NONE;
	a->n_free++;
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

/* Evict the LRU evictable block of arena @ai; returns its id or KVP_BLOCK_NONE. */
static uint32_t evict_from(struct kvp_pool *p, uint32_t ai, uint64_t now)
{
	struct arena *a = &p->arenas[ai];
	uint32_t victim = KVP_BLOCK_NONE, n_stash = 0;

	while (a->heap_len) {
		uint32_t id = a->heap[0];

		heap_remove(p, a, id);
		if (p->blocks[id].ttl_deadline_ns > now) {
			p->stash[n_stash++] = id; /* still inside its TTL: skip, keep */
			continue;
		}
		victim = id;
		break;
	}
	while (n_stash)
		heap_push(p, a, p->stash[--n_stash]);
	if (victim != KVP_BLOCK_NONE)
		evict_one(p, victim);
	return victim;
}

long kvp_pool_evict(struct kvp_pool *p, int node)
{
	uint32_t start = node < 0 ? 0 : (uint32_t)node;
	uint64_t now = kvp_now_ns();

	if (node >= (int)p->n_arenas)
		return -EINVAL;
	for (uint32_t i = 0; i < p->n_arenas; i++) {
		uint32_t id = evict_from(p, (start + i) % p->n_arenas, now);

		if (id != KVP_BLOCK_NONE)
			return id;
	}
	return -ENOMEM;
}

int kvp_pool_evict_block(struct kvp_pool *p, uint32_t id)
{
	struct kvp_block *b = blk(p, id);

	if (!b)
		return -EINVAL;
	if (b->heap_pos == KVP_BLOCK_NONE || b->ttl_deadline_ns > kvp_now_ns())
		return -EBUSY;
	heap_remove(p, &p->arenas[b->arena], id);
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

		if ((node >= 0 && i != (uint32_t)node) || !a->heap_len)
			continue;
		if (best == KVP_BLOCK_NONE || heap_less(p, a->heap[0], best))
			best = a->heap[0];
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

int kvp_pool_set_ttl(struct kvp_pool *p, uint32_t id, uint64_t deadline_ns)
{
	struct kvp_block *b = blk(p, id);

	if (!b || (!b->refcount && !b->cached))
		return -EINVAL;
	if (deadline_ns > b->ttl_deadline_ns)
		b->ttl_deadline_ns = deadline_ns;
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
	if (b->heap_pos != KVP_BLOCK_NONE) {
		struct arena *a = &p->arenas[b->arena];

		heap_remove(p, a, id);
		heap_push(p, a, id);
	}
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

/* The block metadata, the arenas' heaps and the stash (NULLs are fine). */
static void free_arrays(struct kvp_pool *p)
{
	for (uint32_t i = 0; i < p->n_arenas; i++)
		free(p->arenas[i].heap);
	free(p->stash);
	free(p->blocks);
}

int kvp_pool_new(struct kvp_pool **out, const struct kvp_pool_config *cfg)
{
	struct kvp_arena_range ranges[KVP_MAX_ARENAS];
	struct kvp_pool *p;
	uint32_t max_arena = 0;
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
		a->heap = malloc(((size_t)a->range.count + 1) * sizeof(*a->heap));
		if (!a->heap) {
			r = -ENOMEM;
			goto err_arrays;
		}
		if (a->range.count > max_arena)
			max_arena = a->range.count;
		/* push in reverse so the lowest ids come out first */
		for (uint32_t k = a->range.count; k-- > 0;) {
			uint32_t id = a->range.first + k;

			p->blocks[id].arena = (uint8_t)i;
			p->blocks[id].heap_pos = KVP_BLOCK_NONE;
			free_push(p, id);
		}
	}
	p->stash = malloc(((size_t)max_arena + 1) * sizeof(*p->stash));
	if (!p->stash) {
		r = -ENOMEM;
		goto err_arrays;
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
	free(p);
	return r;
}

void kvp_pool_free(struct kvp_pool *p)
{
	if (!p)
		return;
	kvp_segment_close(p->seg);
	free_arrays(p);
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
}

uint32_t kvp_pool_n_blocks(const struct kvp_pool *p)
{
	return p->n_blocks;
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
	st->cow_copies = p->cow_copies;
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
