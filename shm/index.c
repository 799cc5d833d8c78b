/* SPDX-License-Identifier: MIT */
/*
 * index.c - prefix index: chain hashes of full blocks -> block ids (see index.h).
 *
 * Layout: one bucket array (power of two >= entry capacity, chained through the
 * entries) and an entry table of n_blocks + n_disk entries (n_disk = slots of an attached
 * disk tier, 0 without), so publishing never allocates: 48 + 4 * block_tokens bytes per
 * entry, plus 4 to 8 of bucket heads, plus 4 per pool block and per slot for the reverse
 * maps.  An entry's id is stable while it lives, whether its K/V is in memory, on disk, or
 * both.  Distinct extra-key sets are interned in a small growable table with use counts;
 * entries hold the id, and ids are recycled only when no entry uses them, so an id always
 * denotes one exact key set.
 *
 * Invariants:
 *   - an entry is live iff ek_id != NONE; a live entry has a memory block, a disk slot,
 *     or both (block_entry[] and slot_entry[] map back);
 *   - an entry with a memory block is cached in the pool, and its parent entry has a
 *     memory block too (the pool evicts leaves only, and reloads publish root first);
 *   - hash = chain hash of (parent's hash, or the extra-keys digest, and tokens);
 *   - uids are unique among all entries ever made (next_uid only grows), so puid names
 *     exactly one entry, or none that lives: an orphan on disk can never be matched.
 * Mem entries are at most n_blocks and disk-only entries at most n_disk (each holds its
 * own block or slot), so the free list cannot run dry.
 *
 * Thread: engine thread only, like the pool (index.h).
 */
#include "shm/index.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "shm/bigalloc.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "hash input is the host byte order");
static_assert(sizeof(struct kvp_extra_keys) == 112, "extra keys hashed as bytes: no padding");

#define NONE KVP_BLOCK_NONE
#define LOOKUP_GROUP 16			 /* blocks hashed and prefetched ahead in a lookup */
#define COLLIDE_LO 0x6b76706f6f6c2121ull /* any constant will do */
#define MAX_ENTRIES (1u << 31)

struct ek_entry {
	struct kvp_extra_keys ek; /* canonical */
	struct kvp_h128 digest;
	uint32_t uses; /* index entries referring to it */
	uint32_t next; /* bucket chain, or free list when unused */
};

/* One index entry: what a lookup reads for a candidate, in one place. */
struct entry {
	struct kvp_h128 hash;
	uint64_t uid;
	uint64_t puid;	/* parent's uid, 0 for a first block */
	uint32_t ek_id; /* NONE = free entry */
	uint32_t block; /* memory block, or NONE (on disk only) */
	uint32_t slot;	/* disk tier slot holding a copy, or NONE */
	uint32_t hnext; /* bucket chain; free list when free */
};

struct kvp_index {
	struct kvp_pool *pool;
	uint32_t n_blocks;
	uint32_t n_disk; /* tier slots reserved */
	uint32_t cap;	 /* entries: n_blocks + n_disk */
	uint32_t bt;	 /* block_tokens */
	uint32_t mask;	 /* bucket count - 1 */
	uint64_t seed;	 /* bucket placement */
	uint32_t *bucket;
	struct entry *ent;     /* cap */
	uint32_t *tokens;      /* cap * bt */
	uint32_t *block_entry; /* n_blocks: entry of a memory block, or NONE */
	uint32_t *slot_entry;  /* n_disk: entry with a copy in the slot, or NONE */
	uint32_t efree;	       /* free entries */
	uint64_t next_uid;

	struct ek_entry *eks; /* interned extra keys */
	uint32_t n_eks, cap_eks;
	uint32_t ek_free;    /* free list of ids */
	uint32_t *ek_bucket; /* 2 * cap_eks heads */
	uint32_t ek_mask;
	uint32_t ek_live;

	int collide; /* test hook: every chain hash is equal */
	struct kvp_index_stats st;

	/* recently evicted chain hashes (kvp_index_evicted()), calloc'd on first use */
	struct evicted_way *evicted;
	uint64_t evicted_clock;
};

struct evicted_way {
	struct kvp_h128 hash;
	uint64_t when; /* evicted_clock at insertion; 0 = empty */
	uint32_t tier; /* enum kvp_evicted_tier */
	uint32_t reserved;
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

struct kvp_h128 kvp_chain_hash(struct kvp_h128 prev, const uint32_t *tokens, uint32_t n_tokens)
{
	uint8_t buf[sizeof(prev) + KVP_INDEX_MAX_BLOCK_TOKENS * sizeof(uint32_t)];
	size_t n = sizeof(prev) + (size_t)n_tokens * sizeof(uint32_t);
	XXH128_hash_t h;

	assert(n_tokens <= KVP_INDEX_MAX_BLOCK_TOKENS);
	memcpy(buf, &prev, sizeof(prev));
	memcpy(buf + sizeof(prev), tokens, (size_t)n_tokens * sizeof(uint32_t));
	h = XXH3_128bits(buf, n);
	return (struct kvp_h128){ .lo = h.low64, .hi = h.high64 };
}

/* h_i = XXH3_128(h_{i-1} || tokens of block i) */
static struct kvp_h128 chain_hash(const struct kvp_index *idx, struct kvp_h128 prev,
				  const uint32_t *tokens)
{
	if (idx->collide)
		return (struct kvp_h128){ .lo = COLLIDE_LO, .hi = COLLIDE_LO };
	return kvp_chain_hash(prev, tokens, idx->bt);
}

/* Keyed placement: unseeded chain hashes are public, bucket numbers must not be. */
static uint64_t placement(const struct kvp_index *idx, struct kvp_h128 h)
{
	return XXH3_64bits_withSeed(&h, sizeof(h), idx->seed);
}

static uint32_t bucket_of(const struct kvp_index *idx, struct kvp_h128 h)
{
	return (uint32_t)placement(idx, h) & idx->mask;
}

static uint64_t random_seed(void)
{
	uint64_t s;
	struct timespec ts;

	if (getrandom(&s, sizeof(s), GRND_NONBLOCK) == (ssize_t)sizeof(s))
		return s;
	/* entropy pool not ready (early boot): weaker, still unknown to a remote client */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return XXH3_64bits_withSeed(&ts, sizeof(ts), (uint64_t)getpid() ^ (uintptr_t)&s);
}

/* ---- interned extra keys ---- */

static uint32_t ek_bucket_of(const struct kvp_index *idx, struct kvp_h128 digest)
{
	return (uint32_t)placement(idx, digest) & idx->ek_mask;
}

static uint32_t ek_find(const struct kvp_index *idx, const struct kvp_prefix_key *key)
{
	if (!idx->ek_bucket)
		return NONE;
	for (uint32_t id = idx->ek_bucket[ek_bucket_of(idx, key->seed)]; id != NONE;
	     id = idx->eks[id].next) {
		const struct ek_entry *e = &idx->eks[id];

		if (h128_eq(e->digest, key->seed) && memcmp(&e->ek, &key->ek, sizeof(e->ek)) == 0)
			return id;
	}
	return NONE;
}

/* Relink every live interned set into ek_bucket (after a resize or a new seed). */
static void ek_rehash(struct kvp_index *idx)
{
	for (uint32_t i = 0; i <= idx->ek_mask; i++)
		idx->ek_bucket[i] = NONE;
	for (uint32_t id = 0; id < idx->n_eks; id++) {
		struct ek_entry *e = &idx->eks[id];
		uint32_t b;

		if (!e->uses)
			continue; /* free ones stay on the free list */
		b = ek_bucket_of(idx, e->digest);
		e->next = idx->ek_bucket[b];
		idx->ek_bucket[b] = id;
	}
}

static int ek_grow(struct kvp_index *idx)
{
	uint32_t cap = idx->cap_eks ? idx->cap_eks * 2 : 8;
	struct ek_entry *eks;
	uint32_t *bucket;

	/* live sets <= indexed entries <= 2^31, so cap never needs to pass 2^32 / 4 */
	if (idx->cap_eks > UINT32_MAX / 4)
		return -ENOMEM;
	eks = realloc(idx->eks, (size_t)cap * sizeof(*eks));
	if (!eks)
		return -ENOMEM;
	idx->eks = eks;
	bucket = malloc((size_t)cap * 2 * sizeof(*bucket));
	if (!bucket)
		return -ENOMEM;
	free(idx->ek_bucket);
	idx->ek_bucket = bucket;
	idx->ek_mask = cap * 2 - 1;
	idx->cap_eks = cap;
	ek_rehash(idx);
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
	b = ek_bucket_of(idx, e->digest);
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
	for (pp = &idx->ek_bucket[ek_bucket_of(idx, e->digest)]; *pp != id;
	     pp = &idx->eks[*pp].next)
		;
	*pp = e->next;
	e->next = idx->ek_free;
	idx->ek_free = id;
	idx->ek_live--;
}

/* The interned id of @key, made (with no uses yet) if new; NONE on -ENOMEM. */
static uint32_t ek_get(struct kvp_index *idx, const struct kvp_prefix_key *key, int *fresh)
{
	uint32_t ek = ek_find(idx, key);

	*fresh = 0;
	if (ek != NONE)
		return ek;
	ek = ek_create(idx, key);
	*fresh = ek != NONE;
	return ek;
}

/* Undo ek_get() of a fresh set that no entry took. */
static void ek_unget(struct kvp_index *idx, uint32_t ek, int fresh)
{
	if (!fresh)
		return;
	idx->eks[ek].uses = 1;
	ek_release(idx, ek);
}

/* ---- entries ---- */

static const uint32_t *ent_tokens(const struct kvp_index *idx, uint32_t e)
{
	return &idx->tokens[(size_t)e * idx->bt];
}

static void bucket_link(struct kvp_index *idx, uint32_t e)
{
	uint32_t b = bucket_of(idx, idx->ent[e].hash);

	idx->ent[e].hnext = idx->bucket[b];
	idx->bucket[b] = e;
}

static void bucket_unlink(struct kvp_index *idx, uint32_t e)
{
	uint32_t *pp = &idx->bucket[bucket_of(idx, idx->ent[e].hash)];

	while (*pp != e)
		pp = &idx->ent[*pp].hnext;
	*pp = idx->ent[e].hnext;
}

/* A live entry made from the given fields, linked in its bucket. */
static uint32_t entry_new(struct kvp_index *idx, struct kvp_h128 h, uint64_t uid, uint64_t puid,
			  uint32_t ek, const uint32_t *tokens)
{
	uint32_t e = idx->efree;
	struct entry *en;

	assert(e != NONE); /* capacity covers every block and slot (top of file) */
	en = &idx->ent[e];
	idx->efree = en->hnext;
	*en = (struct entry){
		.hash = h, .uid = uid, .puid = puid, .ek_id = ek, .block = NONE, .slot = NONE
	};
	idx->eks[ek].uses++;
	memcpy(&idx->tokens[(size_t)e * idx->bt], tokens, (size_t)idx->bt * sizeof(uint32_t));
	bucket_link(idx, e);
	return e;
}

/* Unlink and free a live entry that holds neither a block nor a slot any more. */
static void entry_drop(struct kvp_index *idx, uint32_t e)
{
	struct entry *en = &idx->ent[e];

	assert(en->block == NONE && en->slot == NONE);
	bucket_unlink(idx, e);
	ek_release(idx, en->ek_id);
	en->ek_id = NONE;
	en->hnext = idx->efree;
	idx->efree = e;
}

static uint32_t entry_find(struct kvp_index *idx, struct kvp_h128 h, uint64_t puid, uint32_t ek,
			   const uint32_t *tokens)
{
	for (uint32_t e = idx->bucket[bucket_of(idx, h)]; e != NONE; e = idx->ent[e].hnext) {
		const struct entry *en = &idx->ent[e];

		if (!h128_eq(en->hash, h))
			continue;
		if (en->ek_id == ek && en->puid == puid &&
		    memcmp(ent_tokens(idx, e), tokens, (size_t)idx->bt * sizeof(uint32_t)) == 0)
			return e;
		idx->st.collisions++;
	}
	return NONE;
}

/* The live entry with @uid among those whose hash is @h, or NONE. */
static uint32_t entry_by_uid(const struct kvp_index *idx, struct kvp_h128 h, uint64_t uid)
{
	for (uint32_t e = idx->bucket[bucket_of(idx, h)]; e != NONE; e = idx->ent[e].hnext)
		if (idx->ent[e].uid == uid && h128_eq(idx->ent[e].hash, h))
			return e;
	return NONE;
}

/* Remember that the entry of chain hash @h left the index from @tier. */
static void evicted_note(struct kvp_index *idx, struct kvp_h128 h, uint32_t tier)
{
	struct evicted_way *set, *w;

	if (!idx->evicted) {
		idx->evicted = calloc((size_t)KVP_INDEX_EVICTED_SETS * KVP_INDEX_EVICTED_WAYS,
				      sizeof(*idx->evicted));
		if (!idx->evicted)
			return; /* a hint only: miss reasons say no_prefix instead */
	}
	set = &idx->evicted[(placement(idx, h) % KVP_INDEX_EVICTED_SETS) * KVP_INDEX_EVICTED_WAYS];
	w = &set[0];
	for (uint32_t k = 0; k < KVP_INDEX_EVICTED_WAYS; k++) {
		if (set[k].when && h128_eq(set[k].hash, h)) {
			w = &set[k]; /* evicted again: refresh */
			break;
		}
		if (set[k].when < w->when)
			w = &set[k]; /* the oldest (or an empty) way */
	}
	*w = (struct evicted_way){ .hash = h, .when = ++idx->evicted_clock, .tier = tier };
	idx->st.evicted_seen++;
}

static uint32_t evicted_tier(const struct kvp_index *idx, struct kvp_h128 h)
{
	const struct evicted_way *set;

	if (!idx->evicted)
		return KVP_EVICTED_NONE;
	set = &idx->evicted[(placement(idx, h) % KVP_INDEX_EVICTED_SETS) * KVP_INDEX_EVICTED_WAYS];
	for (uint32_t k = 0; k < KVP_INDEX_EVICTED_WAYS; k++)
		if (set[k].when && h128_eq(set[k].hash, h))
			return set[k].tier;
	return KVP_EVICTED_NONE;
}

/* The pool evicted @block: it leaves the index, or stays on disk when it has a copy. */
static void on_evict(void *ctx, uint32_t block)
{
	struct kvp_index *idx = ctx;
	uint32_t e = idx->block_entry[block];

	if (e == NONE)
		return;
	idx->block_entry[block] = NONE;
	idx->ent[e].block = NONE;
	idx->st.entries--;
	if (idx->ent[e].slot != NONE) {
		idx->st.disk_entries++;
		idx->st.offloads++;
		return;
	}
	evicted_note(idx, idx->ent[e].hash, KVP_EVICTED_MEM);
	entry_drop(idx, e);
	idx->st.evictions++;
	/* written and never read: no lookup hit or duplicate publish ever touched it */
	idx->st.evicted_unread += !kvp_pool_block(idx->pool, block)->uses;
}

/* Size the bucket array for @cap entries and relink every live entry. */
static int buckets_resize(struct kvp_index *idx, uint32_t cap)
{
	uint32_t nb = 1, *bucket;

	while (nb < cap)
		nb <<= 1;
	if (idx->bucket && nb == idx->mask + 1) {
		bucket = idx->bucket;
	} else {
		bucket = kvp_big_calloc(nb, sizeof(*bucket));
		if (!bucket)
			return -ENOMEM;
		free(idx->bucket);
		idx->bucket = bucket;
		idx->mask = nb - 1;
	}
	memset(bucket, 0xff, (size_t)nb * sizeof(*bucket));
	for (uint32_t e = 0; e < idx->cap; e++)
		if (idx->ent[e].ek_id != NONE)
			bucket_link(idx, e);
	return 0;
}

/* Grow the entry table to @cap; new entries go on the free list. */
static int entries_grow(struct kvp_index *idx, uint32_t cap)
{
	struct entry *ent = kvp_big_calloc(cap, sizeof(*ent));
	uint32_t *tokens = kvp_big_calloc((size_t)cap * idx->bt, sizeof(*tokens));

	if (!ent || !tokens) {
		free(ent);
		free(tokens);
		return -ENOMEM;
	}
	if (idx->ent) {
		memcpy(ent, idx->ent, (size_t)idx->cap * sizeof(*ent));
		memcpy(tokens, idx->tokens, (size_t)idx->cap * idx->bt * sizeof(*tokens));
	}
	free(idx->ent);
	free(idx->tokens);
	idx->ent = ent;
	idx->tokens = tokens;
	/* push in reverse so low ids come out first */
	for (uint32_t e = cap; e-- > idx->cap;) {
		ent[e].ek_id = NONE;
		ent[e].hnext = idx->efree;
		idx->efree = e;
	}
	idx->cap = cap;
	return 0;
}

/* Everything an index allocates besides itself (NULLs are fine). */
static void free_arrays(struct kvp_index *idx)
{
	free(idx->bucket);
	free(idx->ent);
	free(idx->tokens);
	free(idx->block_entry);
	free(idx->slot_entry);
	free(idx->eks);
	free(idx->ek_bucket);
	free(idx->evicted);
}

int kvp_index_new(struct kvp_index **out, struct kvp_pool *pool)
{
	struct kvp_index *idx;
	uint32_t n = kvp_pool_n_blocks(pool);
	uint32_t bt = kvp_pool_geom(pool)->shape.block_tokens;
	int r;

	/* the bucket count is a uint32_t power of two >= n */
	if (bt > KVP_INDEX_MAX_BLOCK_TOKENS || n > MAX_ENTRIES)
		return -EINVAL;
	idx = calloc(1, sizeof(*idx));
	if (!idx)
		return -ENOMEM;
	idx->pool = pool;
	idx->n_blocks = n;
	idx->bt = bt;
	idx->ek_free = NONE;
	idx->efree = NONE;
	idx->next_uid = 1;
	idx->seed = random_seed();
	idx->block_entry = kvp_big_calloc(n, sizeof(*idx->block_entry));
	if (!idx->block_entry) {
		r = -ENOMEM;
		goto err_arrays;
	}
	memset(idx->block_entry, 0xff, (size_t)n * sizeof(*idx->block_entry));
	r = entries_grow(idx, n);
	if (r < 0)
		goto err_arrays;
	r = buckets_resize(idx, n);
	if (r < 0)
		goto err_arrays;
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

void kvp_index_set_seed(struct kvp_index *idx, uint64_t seed)
{
	idx->seed = seed;
	/* the evicted set is placed by the seed too: start it afresh */
	free(idx->evicted);
	idx->evicted = NULL;
	buckets_resize(idx, idx->cap); /* same size: cannot fail */
	if (idx->ek_bucket)
		ek_rehash(idx);
}

int kvp_index_lookup(struct kvp_index *idx, const struct kvp_prefix_key *key,
		     const uint32_t *tokens, uint32_t n_tokens, uint32_t *hits, uint32_t max_hits)
{
	struct kvp_h128 h = key ? key->seed : (struct kvp_h128){ 0, 0 };
	uint32_t n_full, ek, i;
	uint64_t puid = 0;

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
		uint32_t bs[LOOKUP_GROUP];
		uint32_t g = n_full - i < LOOKUP_GROUP ? n_full - i : LOOKUP_GROUP;

		for (uint32_t k = 0; k < g; k++) {
			h = chain_hash(idx, h, tokens + (size_t)(i + k) * idx->bt);
			hs[k] = h;
			bs[k] = bucket_of(idx, h);
			__builtin_prefetch(&idx->bucket[bs[k]]);
		}
		for (uint32_t k = 0; k < g; k++) {
			uint32_t head = idx->bucket[bs[k]];

			if (head == NONE)
				continue;
			__builtin_prefetch(&idx->ent[head]);
			__builtin_prefetch(ent_tokens(idx, head));
		}
		for (uint32_t k = 0; k < g; k++, i++) {
			const uint32_t *t = tokens + (size_t)i * idx->bt;
			uint32_t e = entry_find(idx, hs[k], puid, ek, t);
			uint32_t b = e == NONE ? NONE : idx->ent[e].block;

			/* stop at a miss, and at an entry on disk only (kvp_index_lookup_disk) */
			if (b == NONE || kvp_pool_ref(idx->pool, b) < 0)
				goto out;
			kvp_pool_touch(idx->pool, b);
			hits[i] = b;
			puid = idx->ent[e].uid;
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
	uint32_t ek, pe = NONE, existing;
	uint64_t puid = 0;
	int fresh, r;

	if (!idx || !key || !tokens || !out_block || block >= idx->n_blocks)
		return -EINVAL;
	if (parent != NONE && parent >= idx->n_blocks)
		return -EINVAL;
	b = kvp_pool_block(idx->pool, block);
	if (!b->refcount)
		return -EINVAL;
	if (idx->block_entry[block] != NONE || b->cached)
		return -EEXIST;
	if (parent != NONE) {
		pe = idx->block_entry[parent];
		if (pe == NONE)
			return -ENOENT;
		puid = idx->ent[pe].uid;
	}

	ek = ek_find(idx, key);
	/* a chain never changes extra keys midway: the parent's must be the request's */
	if (pe != NONE && idx->ent[pe].ek_id != ek)
		return -EINVAL;
	h = chain_hash(idx, pe == NONE ? key->seed : idx->ent[pe].hash, tokens);
	existing = ek == NONE ? NONE : entry_find(idx, h, puid, ek, tokens);
	if (existing != NONE && idx->ent[existing].block != NONE) {
		uint32_t eb = idx->ent[existing].block;

		r = kvp_pool_ref(idx->pool, eb);
		if (r < 0)
			return r;
		kvp_pool_touch(idx->pool, eb);
		idx->st.publish_dups++;
		*out_block = eb;
		return 1;
	}
	if (existing != NONE) {
		/* on disk only: @block (read back, or computed again) becomes its memory */
		r = kvp_pool_mark_cached(idx->pool, block, parent);
		if (r < 0)
			return r;
		idx->ent[existing].block = block;
		idx->block_entry[block] = existing;
		idx->st.entries++;
		idx->st.disk_entries--;
		idx->st.reloads++;
		*out_block = block;
		return 0;
	}
	ek = ek_get(idx, key, &fresh);
	if (ek == NONE)
		return -ENOMEM;
	r = kvp_pool_mark_cached(idx->pool, block, parent);
	if (r < 0) {
		ek_unget(idx, ek, fresh);
		return r;
	}
	existing = entry_new(idx, h, idx->next_uid++, puid, ek, tokens);
	idx->ent[existing].block = block;
	idx->block_entry[block] = existing;
	idx->st.entries++;
	idx->st.publishes++;
	*out_block = block;
	return 0;
}

int kvp_index_block_hash(const struct kvp_index *idx, uint32_t block, struct kvp_h128 *h)
{
	if (block >= idx->n_blocks || idx->block_entry[block] == NONE)
		return -ENOENT;
	*h = idx->ent[idx->block_entry[block]].hash;
	return 0;
}

/* ---- disk tier ---- */

int kvp_index_reserve_disk(struct kvp_index *idx, uint32_t n_slots)
{
	uint32_t *se;
	int r;

	if (n_slots < idx->n_disk || (uint64_t)idx->n_blocks + n_slots > MAX_ENTRIES)
		return -EINVAL;
	if (idx->st.disk_entries)
		return -EBUSY;
	if (n_slots == idx->n_disk)
		return 0;
	se = kvp_big_calloc(n_slots, sizeof(*se));
	if (!se)
		return -ENOMEM;
	memset(se, 0xff, (size_t)n_slots * sizeof(*se));
	if (idx->slot_entry)
		memcpy(se, idx->slot_entry, (size_t)idx->n_disk * sizeof(*se));
	r = entries_grow(idx, idx->n_blocks + n_slots);
	if (r < 0)
		goto fail;
	r = buckets_resize(idx, idx->cap);
	if (r < 0)
		goto fail;
	free(idx->slot_entry);
	idx->slot_entry = se;
	idx->n_disk = n_slots;
	return 0;
fail:
	free(se);
	return r;
}

int kvp_index_block_rec(const struct kvp_index *idx, uint32_t block, struct kvp_index_rec *rec)
{
	const struct entry *en;
	uint32_t e;

	if (block >= idx->n_blocks || (e = idx->block_entry[block]) == NONE)
		return -ENOENT;
	en = &idx->ent[e];
	rec->hash = en->hash;
	rec->uid = en->uid;
	rec->puid = en->puid;
	rec->key.ek = idx->eks[en->ek_id].ek;
	rec->key.seed = idx->eks[en->ek_id].digest;
	rec->tokens = ent_tokens(idx, e);
	if (!en->puid) {
		rec->phash = rec->key.seed;
	} else {
		/* an entry in memory has its parent in memory (top of file) */
		uint32_t pb = kvp_pool_block(idx->pool, block)->parent;

		assert(pb != NONE && idx->block_entry[pb] != NONE);
		rec->phash = idx->ent[idx->block_entry[pb]].hash;
	}
	return 0;
}

int kvp_index_set_disk(struct kvp_index *idx, uint32_t block, uint64_t uid, uint32_t slot)
{
	uint32_t e;

	if (block >= idx->n_blocks || slot >= idx->n_disk)
		return -EINVAL;
	e = idx->block_entry[block];
	if (e == NONE || idx->ent[e].uid != uid)
		return -ESTALE;
	if (idx->ent[e].slot != NONE)
		return -EEXIST;
	if (idx->slot_entry[slot] != NONE)
		return -EBUSY;
	idx->ent[e].slot = slot;
	idx->slot_entry[slot] = e;
	return 0;
}

bool kvp_index_block_on_disk(const struct kvp_index *idx, uint32_t block)
{
	uint32_t e;

	if (block >= idx->n_blocks || (e = idx->block_entry[block]) == NONE)
		return false;
	return idx->ent[e].slot != NONE;
}

int kvp_index_disk_dropped(struct kvp_index *idx, uint32_t slot)
{
	uint32_t e;

	if (slot >= idx->n_disk || (e = idx->slot_entry[slot]) == NONE)
		return -ENOENT;
	idx->slot_entry[slot] = NONE;
	idx->ent[e].slot = NONE;
	if (idx->ent[e].block == NONE) {
		/* its children on disk become orphans: their puid names no live entry */
		evicted_note(idx, idx->ent[e].hash, KVP_EVICTED_DISK);
		entry_drop(idx, e);
		idx->st.disk_entries--;
		idx->st.disk_drops++;
	}
	return 0;
}

int kvp_index_lookup_disk(struct kvp_index *idx, const struct kvp_prefix_key *key,
			  const uint32_t *tokens, uint32_t n_tokens, uint32_t n_hit,
			  uint32_t parent, struct kvp_index_disk_hit *out, uint32_t max)
{
	struct kvp_h128 h;
	uint32_t n_full, ek, k = 0;
	uint64_t puid = 0;

	if (!idx || !key || (n_tokens && !tokens) || (max && !out))
		return -EINVAL;
	if (n_hit == 0) {
		if (parent != NONE)
			return -EINVAL;
		h = key->seed;
	} else {
		uint32_t pe;

		if (parent >= idx->n_blocks || (pe = idx->block_entry[parent]) == NONE)
			return -EINVAL;
		h = idx->ent[pe].hash;
		puid = idx->ent[pe].uid;
	}
	n_full = n_tokens ? (n_tokens - 1) / idx->bt : 0;
	if (n_full <= n_hit || !idx->st.disk_entries)
		return 0;
	if (n_full - n_hit < max)
		max = n_full - n_hit;
	idx->st.disk_lookup_blocks += max;
	ek = ek_find(idx, key);
	if (ek == NONE)
		return 0;
	for (; k < max; k++) {
		const uint32_t *t = tokens + (size_t)(n_hit + k) * idx->bt;
		uint32_t e;

		h = chain_hash(idx, h, t);
		e = entry_find(idx, h, puid, ek, t);
		if (e == NONE || idx->ent[e].block != NONE)
			break;
		out[k] = (struct kvp_index_disk_hit){ .slot = idx->ent[e].slot,
						      .uid = idx->ent[e].uid };
		puid = idx->ent[e].uid;
	}
	idx->st.disk_hit_blocks += k;
	return (int)k;
}

int kvp_index_insert_disk(struct kvp_index *idx, const struct kvp_index_rec *rec, uint32_t slot)
{
	struct kvp_prefix_key key;
	struct kvp_h128 h;
	uint32_t ek, e, pe = NONE;
	int fresh;

	if (!idx || !rec || !rec->tokens || !rec->uid || slot >= idx->n_disk)
		return -EINVAL;
	if (idx->slot_entry[slot] != NONE)
		return -EBUSY;
	/* the keys must be canonical and hash to the stated digest */
	if (kvp_prefix_key_init(&key, &rec->key.ek) < 0 ||
	    memcmp(&key.ek, &rec->key.ek, sizeof(key.ek)) != 0 || !h128_eq(key.seed, rec->key.seed))
		return -EBADMSG;
	h = chain_hash(idx, rec->phash, rec->tokens);
	if (!h128_eq(h, rec->hash))
		return -EBADMSG;
	if (!rec->puid && !h128_eq(rec->phash, key.seed))
		return -EBADMSG;
	ek = ek_find(idx, &key);
	if (rec->puid) {
		pe = entry_by_uid(idx, rec->phash, rec->puid);
		if (pe == NONE)
			return -ENOENT;
		if (idx->ent[pe].ek_id != ek)
			return -EBADMSG;
	}
	if (entry_by_uid(idx, rec->hash, rec->uid) != NONE ||
	    (ek != NONE && entry_find(idx, h, rec->puid, ek, rec->tokens) != NONE))
		return -EEXIST;
	ek = ek_get(idx, &key, &fresh);
	if (ek == NONE)
		return -ENOMEM;
	e = entry_new(idx, h, rec->uid, rec->puid, ek, rec->tokens);
	idx->ent[e].slot = slot;
	idx->slot_entry[slot] = e;
	if (rec->uid >= idx->next_uid)
		idx->next_uid = rec->uid + 1;
	if (rec->puid >= idx->next_uid)
		idx->next_uid = rec->puid + 1;
	idx->st.disk_entries++;
	return 0;
}

void kvp_index_set_uid_floor(struct kvp_index *idx, uint64_t uid)
{
	if (uid >= idx->next_uid)
		idx->next_uid = uid + 1;
}

int kvp_index_evicted(struct kvp_index *idx, const struct kvp_prefix_key *key,
		      const uint32_t *tokens, uint32_t n_tokens, uint32_t first, uint32_t *tier)
{
	struct kvp_h128 h;
	uint32_t n_full, k = 0;

	if (!idx || !key || !tier || (n_tokens && !tokens))
		return -EINVAL;
	*tier = KVP_EVICTED_NONE;
	h = key->seed;
	n_full = n_tokens ? (n_tokens - 1) / idx->bt : 0;
	for (uint32_t b = 0; b < n_full; b++) {
		uint32_t t;

		h = chain_hash(idx, h, tokens + (size_t)b * idx->bt);
		if (b < first)
			continue;
		t = evicted_tier(idx, h);
		if (t == KVP_EVICTED_NONE)
			break;
		if (!k++)
			*tier = t;
	}
	return (int)k;
}

/* Does the chain of blocks 0..@block of @tokens exist under interned keys @ek? */
static bool chain_under(struct kvp_index *idx, uint32_t ek, const uint32_t *tokens, uint32_t block)
{
	struct kvp_h128 h = idx->eks[ek].digest;
	uint64_t puid = 0;

	for (uint32_t b = 0; b <= block; b++) {
		const uint32_t *t = tokens + (size_t)b * idx->bt;
		uint32_t e;

		h = chain_hash(idx, h, t);
		e = entry_find(idx, h, puid, ek, t);
		if (e == NONE)
			return false;
		puid = idx->ent[e].uid;
	}
	return true;
}

int kvp_index_probe_keys(struct kvp_index *idx, const struct kvp_prefix_key *key,
			 const uint32_t *tokens, uint32_t n_tokens, uint32_t block)
{
	uint32_t mine, looked = 0;
	int best = KVP_PROBE_NONE;

	if (!idx || !key || !tokens || (uint64_t)(block + 1) * idx->bt > n_tokens)
		return -EINVAL;
	mine = ek_find(idx, key);
	for (uint32_t id = 0; id < idx->n_eks && looked < 64; id++) {
		struct kvp_extra_keys other;

		if (id == mine || !idx->eks[id].uses)
			continue;
		looked++;
		if (!chain_under(idx, id, tokens, block))
			continue;
		/* the same keys with our salt: then the salt alone differs */
		other = idx->eks[id].ek;
		other.salt_len = key->ek.salt_len;
		memcpy(other.salt, key->ek.salt, sizeof(other.salt));
		if (memcmp(&other, &key->ek, sizeof(other)) == 0)
			return KVP_PROBE_SALT;
		best = KVP_PROBE_OTHER;
	}
	return best;
}

void kvp_index_stats(const struct kvp_index *idx, struct kvp_index_stats *st)
{
	*st = idx->st;
	st->extra_keys = idx->ek_live;
}

uint64_t kvp_index_for_each_hash(const struct kvp_index *idx,
				 void (*fn)(void *ctx, struct kvp_h128 h), void *ctx)
{
	uint64_t n = 0;

	for (uint32_t e = 0; e < idx->cap; e++) {
		if (idx->ent[e].ek_id == NONE)
			continue; /* free */
		fn(ctx, idx->ent[e].hash);
		n++;
	}
	return n;
}

void kvp_index_debug_force_collisions(struct kvp_index *idx, int on)
{
	idx->collide = !!on;
}
