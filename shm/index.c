/* SPDX-License-Identifier: MIT */
/*
 * index.c - prefix index: chain hashes of full blocks -> block ids (see index.h).
 *
 * Layout: one bucket array (power of two >= n_blocks, chained through hnext[]) and
 * per-block arrays indexed by block id (hash, extra-keys id, tokens), so publishing never
 * allocates: 24 + 4 * block_tokens bytes per pool block, plus 4 to 8 of bucket heads.  Distinct extra-key sets are
 * interned in a small growable table with use counts; entries hold the id, and ids are
 * recycled only when no entry uses them, so an id always denotes one exact key set.
 *
 * Invariants: block b is in the index iff ek_id[b] != KVP_BLOCK_NONE iff the pool shows
 * it cached; hash[b] = chain hash of (hash of its parent, or the request seed, and
 * tokens[b]); every indexed block's parent is indexed (the pool evicts leaves only).
 *
 * Thread: engine thread only, like the pool (index.h).
 */
#include "shm/index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shm/bigalloc.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "hash input is the host byte order");
static_assert(sizeof(struct kvp_extra_keys) == 112, "extra keys hashed as bytes: no padding");

#define NONE KVP_BLOCK_NONE
#define LOOKUP_GROUP 16			 /* blocks hashed and prefetched ahead in a lookup */
#define COLLIDE_LO 0x6b76706f6f6c2121ull /* any constant will do */

struct ek_entry {
	struct kvp_extra_keys ek; /* canonical */
	struct kvp_h128 digest;
	uint32_t uses; /* index entries referring to it */
	uint32_t next; /* bucket chain, or free list when unused */
};

struct kvp_index {
	struct kvp_pool *pool;
	uint32_t n_blocks;
	uint32_t bt;   /* block_tokens */
	uint32_t mask; /* bucket count - 1 */
	uint32_t *bucket;
	uint32_t *hnext;       /* per block: next in bucket chain */
	struct kvp_h128 *hash; /* per block */
	uint32_t *ek_id;       /* per block; NONE = not indexed */
	uint32_t *tokens;      /* per block: bt tokens */

	struct ek_entry *eks; /* interned extra keys */
	uint32_t n_eks, cap_eks;
	uint32_t ek_free;    /* free list of ids */
	uint32_t *ek_bucket; /* 2 * cap_eks heads */
	uint32_t ek_mask;
	uint32_t ek_live;

	int collide; /* test hook: every chain hash is equal */
	struct kvp_index_stats st;
};

int kvp_prefix_key_init(struct kvp_prefix_key *key, const struct kvp_extra_keys *ek)
{
	XXH128_hash_t h;

	if (!key || !ek || ek->salt_len > KVP_SALT_MAX)
		return -EINVAL;
	key->ek = *ek;
	key->ek.reserved = 0;
	memset(key->ek.salt + ek->salt_len, 0, KVP_SALT_MAX - ek->salt_len);
	h = XXH3_128bits(&key->ek, sizeof(key->ek));
	key->seed = (struct kvp_h128){ .lo = h.low64, .hi = h.high64 };
	return 0;
}

static int h128_eq(struct kvp_h128 a, struct kvp_h128 b)
{
	return a.lo == b.lo && a.hi == b.hi;
}

/* h_i = XXH3_128(h_{i-1} || tokens of block i) */
static struct kvp_h128 chain_hash(const struct kvp_index *idx, struct kvp_h128 prev,
				  const uint32_t *tokens)
{
	uint8_t buf[sizeof(prev) + KVP_INDEX_MAX_BLOCK_TOKENS * sizeof(uint32_t)];
	size_t n = sizeof(prev) + (size_t)idx->bt * sizeof(uint32_t);
	XXH128_hash_t h;

	if (idx->collide)
		return (struct kvp_h128){ .lo = COLLIDE_LO, .hi = COLLIDE_LO };
	memcpy(buf, &prev, sizeof(prev));
	memcpy(buf + sizeof(prev), tokens, (size_t)idx->bt * sizeof(uint32_t));
	h = XXH3_128bits(buf, n);
	return (struct kvp_h128){ .lo = h.low64, .hi = h.high64 };
}

/* ---- interned extra keys ---- */

static uint32_t ek_find(const struct kvp_index *idx, const struct kvp_prefix_key *key)
{
	if (!idx->ek_bucket)
		return NONE;
	for (uint32_t id = idx->ek_bucket[key->seed.lo & idx->ek_mask]; id != NONE;
	     id = idx->eks[id].next) {
		const struct ek_entry *e = &idx->eks[id];

		if (h128_eq(e->digest, key->seed) && memcmp(&e->ek, &key->ek, sizeof(e->ek)) == 0)
			return id;
	}
	return NONE;
}

static int ek_grow(struct kvp_index *idx)
{
	uint32_t cap = idx->cap_eks ? idx->cap_eks * 2 : 8;
	struct ek_entry *eks;
	uint32_t *bucket;

	/* live sets <= indexed blocks <= n_blocks, so cap never needs to pass 2 * n_blocks */
	if (idx->cap_eks > UINT32_MAX / 4)
		return -ENOMEM;
	eks = realloc(idx->eks, (size_t)cap * sizeof(*eks));
	if (!eks)
		return -ENOMEM;
	idx->eks = eks;
	bucket = malloc((size_t)cap * 2 * sizeof(*bucket));
	if (!bucket)
		return -ENOMEM;
	for (uint32_t i = 0; i < cap * 2; i++)
		bucket[i] = NONE;
	/* rehash live entries; free ones stay on the free list */
	for (uint32_t id = 0; id < idx->n_eks; id++) {
		struct ek_entry *e = &idx->eks[id];
		uint32_t b;

		if (!e->uses)
			continue;
		b = e->digest.lo & (cap * 2 - 1);
		e->next = bucket[b];
		bucket[b] = id;
	}
	free(idx->ek_bucket);
	idx->ek_bucket = bucket;
	idx->ek_mask = cap * 2 - 1;
	idx->cap_eks = cap;
	return 0;
}

/* A new interned entry for @key with no uses yet; NONE on -ENOMEM. */
static uint32_t ek_create(struct kvp_index *idx, const struct kvp_prefix_key *key)
{
	struct ek_entry *e;
	uint32_t id, b;

	if (idx->ek_free != NONE) {
		id = idx->ek_free;
		idx->ek_free = idx->eks[id].next;
	} else {
		if (idx->n_eks == idx->cap_eks && ek_grow(idx) < 0)
			return NONE;
		id = idx->n_eks++;
	}
	e = &idx->eks[id];
	e->ek = key->ek;
	e->digest = key->seed;
	e->uses = 0;
	b = e->digest.lo & idx->ek_mask;
	e->next = idx->ek_bucket[b];
	idx->ek_bucket[b] = id;
	idx->ek_live++;
	return id;
}

static void ek_release(struct kvp_index *idx, uint32_t id)
{
	struct ek_entry *e = &idx->eks[id];
	uint32_t *pp;

	if (--e->uses)
		return;
	for (pp = &idx->ek_bucket[e->digest.lo & idx->ek_mask]; *pp != id; pp = &idx->eks[*pp].next)
		;
	*pp = e->next;
	e->next = idx->ek_free;
	idx->ek_free = id;
	idx->ek_live--;
}

/* ---- block entries ---- */

static uint32_t entry_find(struct kvp_index *idx, struct kvp_h128 h, uint32_t parent, uint32_t ek,
			   const uint32_t *tokens)
{
	for (uint32_t id = idx->bucket[h.lo & idx->mask]; id != NONE; id = idx->hnext[id]) {
		if (!h128_eq(idx->hash[id], h))
			continue;
		if (idx->ek_id[id] == ek && kvp_pool_block(idx->pool, id)->parent == parent &&
		    memcmp(&idx->tokens[(size_t)id * idx->bt], tokens,
			   (size_t)idx->bt * sizeof(uint32_t)) == 0)
			return id;
		idx->st.collisions++;
	}
	return NONE;
}

/* The pool evicted @block: it leaves the index. */
static void on_evict(void *ctx, uint32_t block)
{
	struct kvp_index *idx = ctx;
	uint32_t *pp;

	if (idx->ek_id[block] == NONE)
		return;
	for (pp = &idx->bucket[idx->hash[block].lo & idx->mask]; *pp != block;
	     pp = &idx->hnext[*pp])
		;
	*pp = idx->hnext[block];
	idx->hnext[block] = NONE;
	ek_release(idx, idx->ek_id[block]);
	idx->ek_id[block] = NONE;
	idx->st.entries--;
	idx->st.evictions++;
}

/* Everything an index allocates besides itself (NULLs are fine). */
static void free_arrays(struct kvp_index *idx)
{
	free(idx->bucket);
	free(idx->hnext);
	free(idx->hash);
	free(idx->ek_id);
	free(idx->tokens);
	free(idx->eks);
	free(idx->ek_bucket);
}

int kvp_index_new(struct kvp_index **out, struct kvp_pool *pool)
{
	struct kvp_index *idx;
	uint32_t n = kvp_pool_n_blocks(pool);
	uint32_t bt = kvp_pool_geom(pool)->shape.block_tokens;
	uint32_t nb = 1;
	int r;

	/* the bucket count is a uint32_t power of two >= n */
	if (bt > KVP_INDEX_MAX_BLOCK_TOKENS || n > 1u << 31)
		return -EINVAL;
	while (nb < n)
		nb <<= 1;
	idx = calloc(1, sizeof(*idx));
	if (!idx)
		return -ENOMEM;
	idx->pool = pool;
	idx->n_blocks = n;
	idx->bt = bt;
	idx->mask = nb - 1;
	idx->ek_free = NONE;
	idx->bucket = kvp_big_calloc(nb, sizeof(*idx->bucket));
	idx->hnext = kvp_big_calloc(n, sizeof(*idx->hnext));
	idx->hash = kvp_big_calloc(n, sizeof(*idx->hash));
	idx->ek_id = kvp_big_calloc(n, sizeof(*idx->ek_id));
	idx->tokens = kvp_big_calloc((size_t)n * bt, sizeof(*idx->tokens));
	if (!idx->bucket || !idx->hnext || !idx->hash || !idx->ek_id || !idx->tokens) {
		r = -ENOMEM;
		goto err_arrays;
	}
	memset(idx->bucket, 0xff, (size_t)nb * sizeof(*idx->bucket));
	memset(idx->hnext, 0xff, (size_t)n * sizeof(*idx->hnext));
	memset(idx->ek_id, 0xff, (size_t)n * sizeof(*idx->ek_id));
	r = kvp_pool_set_evictor(pool, on_evict, idx);
	if (r < 0)
		goto err_arrays;
	*out = idx;
	return 0;

err_arrays:
	free_arrays(idx);
	free(idx);
	return r;
}

void kvp_index_free(struct kvp_index *idx)
{
	if (!idx)
		return;
	kvp_pool_set_evictor(idx->pool, NULL, NULL);
	free_arrays(idx);
	free(idx);
}

int kvp_index_lookup(struct kvp_index *idx, const struct kvp_prefix_key *key,
		     const uint32_t *tokens, uint32_t n_tokens, uint32_t *hits, uint32_t max_hits)
{
	struct kvp_h128 h = key ? key->seed : (struct kvp_h128){ 0, 0 };
	uint32_t parent = NONE, n_full, ek, i;

	if (!idx || !key || (n_tokens && !tokens) || (max_hits && !hits))
		return -EINVAL;
	idx->st.lookups++;
	/* the last prompt token is always computed: never cover it */
	n_full = n_tokens ? (n_tokens - 1) / idx->bt : 0;
	if (n_full > max_hits)
		n_full = max_hits;
	idx->st.lookup_blocks += n_full;
	ek = n_full ? ek_find(idx, key) : NONE;
	if (ek == NONE)
		return 0;
	/*
	 * In groups: the chain hashes of a group depend only on the tokens (a hit's stored
	 * hash equals the computed one), so hash the group first and prefetch its buckets
	 * and entries, then verify in order.  On a 1M-block index the entries are cache
	 * misses; overlapping them is most of the lookup time.  A miss wastes at most
	 * LOOKUP_GROUP - 1 block hashes.
	 */
	for (i = 0; i < n_full;) {
		struct kvp_h128 hs[LOOKUP_GROUP];
		uint32_t g = n_full - i < LOOKUP_GROUP ? n_full - i : LOOKUP_GROUP;

		for (uint32_t k = 0; k < g; k++) {
			h = chain_hash(idx, h, tokens + (size_t)(i + k) * idx->bt);
			hs[k] = h;
			__builtin_prefetch(&idx->bucket[h.lo & idx->mask]);
		}
		for (uint32_t k = 0; k < g; k++) {
			uint32_t head = idx->bucket[hs[k].lo & idx->mask];

			if (head == NONE)
				continue;
			__builtin_prefetch(&idx->hash[head]);
			__builtin_prefetch(&idx->tokens[(size_t)head * idx->bt]);
			__builtin_prefetch(kvp_pool_block(idx->pool, head));
		}
		for (uint32_t k = 0; k < g; k++, i++) {
			const uint32_t *t = tokens + (size_t)i * idx->bt;
			uint32_t id = entry_find(idx, hs[k], parent, ek, t);

			if (id == NONE || kvp_pool_ref(idx->pool, id) < 0)
				goto out;
			kvp_pool_touch(idx->pool, id);
			hits[i] = id;
			parent = id;
		}
	}
out:
	idx->st.hit_blocks += i;
	return (int)i;
}

int kvp_index_publish(struct kvp_index *idx, const struct kvp_prefix_key *key, uint32_t parent,
		      const uint32_t *tokens, uint32_t block, uint32_t *out_block)
{
	const struct kvp_block *b;
	struct kvp_h128 h;
	uint32_t ek, existing;
	int fresh = 0, r;

	if (!idx || !key || !tokens || !out_block || block >= idx->n_blocks)
		return -EINVAL;
	if (parent != NONE && parent >= idx->n_blocks)
		return -EINVAL;
	b = kvp_pool_block(idx->pool, block);
	if (!b->refcount)
		return -EINVAL;
	if (idx->ek_id[block] != NONE || b->cached)
		return -EEXIST;
	if (parent != NONE && idx->ek_id[parent] == NONE)
		return -ENOENT;

	ek = ek_find(idx, key);
	/* a chain never changes extra keys midway: the parent's must be the request's */
	if (parent != NONE && idx->ek_id[parent] != ek)
		return -EINVAL;
	h = chain_hash(idx, parent == NONE ? key->seed : idx->hash[parent], tokens);
	existing = ek == NONE ? NONE : entry_find(idx, h, parent, ek, tokens);
	if (existing != NONE) {
		r = kvp_pool_ref(idx->pool, existing);
		if (r < 0)
			return r;
		kvp_pool_touch(idx->pool, existing);
		idx->st.publish_dups++;
		*out_block = existing;
		return 1;
	}
	if (ek == NONE) {
		ek = ek_create(idx, key);
		if (ek == NONE)
			return -ENOMEM;
		fresh = 1;
	}
	r = kvp_pool_mark_cached(idx->pool, block, parent);
	if (r < 0) {
		if (fresh) {
			idx->eks[ek].uses = 1;
			ek_release(idx, ek);
		}
		return r;
	}
	idx->eks[ek].uses++;
	idx->ek_id[block] = ek;
	idx->hash[block] = h;
	memcpy(&idx->tokens[(size_t)block * idx->bt], tokens, (size_t)idx->bt * sizeof(uint32_t));
	idx->hnext[block] = idx->bucket[h.lo & idx->mask];
	idx->bucket[h.lo & idx->mask] = block;
	idx->st.entries++;
	idx->st.publishes++;
	*out_block = block;
	return 0;
}

int kvp_index_block_hash(const struct kvp_index *idx, uint32_t block, struct kvp_h128 *h)
{
	if (block >= idx->n_blocks || idx->ek_id[block] == NONE)
		return -ENOENT;
	*h = idx->hash[block];
	return 0;
}

void kvp_index_stats(const struct kvp_index *idx, struct kvp_index_stats *st)
{
	*st = idx->st;
	st->extra_keys = idx->ek_live;
}

void kvp_index_debug_force_collisions(struct kvp_index *idx, int on)
{
	idx->collide = !!on;
}
