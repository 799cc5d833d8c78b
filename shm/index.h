/* SPDX-License-Identifier: MIT */
/*
 * index.h - the prefix index of one trust domain: which cached full blocks hold the K/V
 * of which token prefix.
 *
 * Keys.  The extra keys of a request (everything besides the tokens that changes K/V:
 * model fingerprint, adapter, RoPE/position settings, KV dtype, cache salt) are hashed
 * once per request, with kvp_prefix_key_init(), into a 128-bit digest d.  The digest
 * seeds the chain:
 *
 *	h_-1 = d = XXH3_128(canonical extra keys)
 *	h_i  = XXH3_128(h_{i-1} || tokens of block i)       (tokens as uint32 little-endian)
 *
 * so every h_i depends on the extra keys and on the whole prefix, as
 * XXH3_128(h_{i-1} || tokens_i || extra keys) would, without rehashing the extra keys
 * per block.  Same text after a different prefix, or under different extra keys, gives
 * a different key.
 *
 * The hash only finds candidates.  A hit also requires, exactly: the stored tokens of
 * the block, the parent block (the block matched for i-1, or none for i = 0), and the
 * extra keys (each distinct set is stored once, in full, and entries refer to it by an
 * interned id compared exactly).  By induction over the chain no collision, accidental
 * or crafted, can return a block with other K/V.  Only full blocks are indexed.
 *
 * Memory: entries live in a table sized by the pool, plus the disk tier's slots when one
 * is attached (no allocation per publish), plus one table of distinct extra keys.
 * Eviction is the pool's (LRU leaves first); the index is told through the pool's
 * evictor callback and drops the entry, unless the entry has a copy in the disk tier:
 * then it stays, on disk only, until a lookup finds it and the block is read back.
 *
 * Entry identity.  Every entry gets a 64-bit uid when it is created, never reused for
 * another entry (the disk tier persists it, and restarts continue above the largest uid
 * it found).  An entry records its parent's uid, and a hit compares that uid exactly,
 * so an entry keeps its parent across moves between memory and disk, and a child whose
 * parent left the index can never be matched under a new entry.
 *
 * Bucket placement.  Chain hashes are unseeded and stable (the same on every host and
 * after every restart: the remote tier keys on them).  The bucket of a hash is a seeded
 * hash of it, with a random seed drawn at kvp_index_new() or taken from the disk tier
 * (kvp_index_set_seed()), so a client cannot craft prompts that crowd one bucket.
 *
 * Thread: an index is owned by the engine thread, like its pool; no locking.  One index
 * per pool, one pool per trust domain.
 */
#ifndef KVP_SHM_INDEX_H
#define KVP_SHM_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/pool.h"

#define KVP_SALT_MAX 64

/* Largest block_tokens the index accepts (a block's tokens are hashed from the stack). */
#define KVP_INDEX_MAX_BLOCK_TOKENS 1024

/**
 * struct kvp_extra_keys - everything besides the tokens that decides a block's K/V
 * @model_fp:        model fingerprint (weights + architecture), 16 bytes
 * @adapter_id:      LoRA/adapter in use, 0 for none
 * @kv_dtype:        enum kvp_dtype of the stored K/V (int8 and int4 each their own)
 * @rope_theta_bits: RoPE base frequency, IEEE-754 float bits (compared exactly)
 * @rope_scale_bits: RoPE/position scaling factor, float bits
 * @rope_flags:      RoPE variant / position-scheme flags
 * @pos_offset:      position of the first prompt token (0 normally)
 * @salt_len:        bytes of @salt used, <= KVP_SALT_MAX
 * @salt:            request cache salt; bytes past @salt_len are ignored
 *
 * Hashed and compared in canonical form (unused salt bytes and @reserved zeroed), so two
 * requests that differ only in ignored bytes share blocks.
 */
struct kvp_extra_keys {
	uint8_t model_fp[16];
	uint32_t adapter_id;
	uint32_t kv_dtype;
	uint32_t rope_theta_bits;
	uint32_t rope_scale_bits;
	uint32_t rope_flags;
	uint32_t pos_offset;
	uint32_t salt_len;
	uint32_t reserved;
	uint8_t salt[KVP_SALT_MAX];
};

/* A 128-bit chain hash (lo = XXH128_hash_t.low64). */
struct kvp_h128 {
	uint64_t lo;
	uint64_t hi;
};

/**
 * struct kvp_prefix_key - the per-request key: canonical extra keys and their digest
 * Made once per request by kvp_prefix_key_init(); read-only afterwards; holds no
 * reference into any index (so it can never go stale).
 */
struct kvp_prefix_key {
	struct kvp_extra_keys ek;
	struct kvp_h128 seed;
};

/* Index counters for the status socket; totals since the index was made. */
struct kvp_index_stats {
	uint64_t entries;	     /* blocks in the index now */
	uint64_t extra_keys;	     /* distinct extra-key sets in use now */
	uint64_t lookups;	     /* kvp_index_lookup() calls */
	uint64_t lookup_blocks;	     /* full blocks those lookups could have hit */
	uint64_t hit_blocks;	     /* blocks they did hit */
	uint64_t publishes;	     /* blocks inserted */
	uint64_t publish_dups;	     /* publishes that found an equal entry already there */
	uint64_t evictions;	     /* entries dropped because the pool evicted the block */
	uint64_t collisions;	     /* equal 128-bit hash, different block (tokens/parent/keys) */
	uint64_t disk_entries;	     /* entries on disk only now (memory block freed) */
	uint64_t offloads;	     /* entries kept on disk when the pool evicted their block */
	uint64_t disk_lookup_blocks; /* blocks kvp_index_lookup_disk() looked for */
	uint64_t disk_hit_blocks;    /* on-disk entries it found */
	uint64_t reloads;	     /* on-disk entries given a memory block again (publish) */
	uint64_t disk_drops;	     /* on-disk entries dropped with their disk copy */
	uint64_t evicted_seen;	     /* hashes put in the recently-evicted set */
	uint64_t evicted_unread;     /* evictions (memory, no disk copy) of blocks never hit */
};

/* Where a block in the recently-evicted set was evicted from (kvp_index_evicted()). */
enum kvp_evicted_tier {
	KVP_EVICTED_NONE = 0,
	KVP_EVICTED_MEM = 1,  /* the pool evicted it and no disk copy was kept */
	KVP_EVICTED_DISK = 2, /* its disk copy was dropped (tier full, flushed, bad) */
};

/* The recently-evicted set: sets of KVP_INDEX_EVICTED_WAYS chain hashes, oldest replaced. */
#define KVP_INDEX_EVICTED_SETS 1024u
#define KVP_INDEX_EVICTED_WAYS 4u

/* kvp_index_probe_keys() answers */
enum kvp_probe {
	KVP_PROBE_NONE = 0,  /* no other extra keys hold the prefix */
	KVP_PROBE_SALT = 1,  /* the same keys but another salt hold it */
	KVP_PROBE_OTHER = 2, /* keys that differ besides the salt (model, RoPE, dtype) do */
};

struct kvp_index;

/**
 * kvp_prefix_key_init() - canonicalise @ek and hash it into @key->seed
 * Return: 0, or -EINVAL when salt_len > KVP_SALT_MAX.
 */
int kvp_prefix_key_init(struct kvp_prefix_key *key, const struct kvp_extra_keys *ek);

/**
 * kvp_index_new() - an empty index over @pool (registers itself as the pool's evictor)
 * @out: out; free with kvp_index_free() before the pool
 * Return: 0, -EINVAL (block_tokens above KVP_INDEX_MAX_BLOCK_TOKENS, or more than 2^31
 * blocks), -EBUSY (the pool already has an index), or -ENOMEM.
 */
int kvp_index_new(struct kvp_index **out, struct kvp_pool *pool);

/* Unregister from the pool and free.  Cached blocks keep their state in the pool. */
void kvp_index_free(struct kvp_index *idx);

/**
 * kvp_index_lookup() - longest cached prefix of @tokens
 * @idx:      index of the caller's trust domain
 * @key:      the request's prefix key
 * @tokens:   prompt token ids (borrowed); @n_tokens of them
 * @hits:     out; block ids in prompt order, one reference each taken for the caller
 * @max_hits: room in @hits
 *
 * Walks the chain from the first block and stops at the first full block that misses.
 * Never covers the last prompt token: at most (n_tokens - 1) / block_tokens blocks (and
 * at most @max_hits), so the logits of the final position are always computed.
 * The matched token count is the return value times block_tokens.
 * Return: number of hit blocks (>= 0), or -EINVAL.
 */
int kvp_index_lookup(struct kvp_index *idx, const struct kvp_prefix_key *key,
		     const uint32_t *tokens, uint32_t n_tokens, uint32_t *hits, uint32_t max_hits);

/**
 * kvp_index_publish() - insert a newly filled full block (or one read back from the tier)
 * @key:       the request's prefix key
 * @parent:    the block before it in the request's block table (itself published, or
 *             a hit), or KVP_BLOCK_NONE for the first block of the prompt
 * @tokens:    the block_tokens token ids the block holds (borrowed)
 * @block:     the block; the caller holds a reference and has written all its K/V
 * @out_block: out; the block now in the index for this prefix
 *
 * Publish blocks in prompt order: a block's parent must be in the index already.
 * If an equal entry (same parent, tokens and extra keys) already exists, e.g. two
 * requests with the same prompt prefilled at once, nothing is inserted: *@out_block is
 * the existing block with one reference taken for the caller, who should switch its
 * block table to it and kvp_pool_unref() its own @block (its later blocks then chain
 * under the existing one).  @block itself is never released here.  An equal entry that
 * is on disk only takes @block as its memory block (a reload: return 0, the entry keeps
 * its uid, its children on disk and its disk copy).
 * Return: 0 inserted (*out_block == block), 1 an equal entry exists (see above),
 * -ENOENT when @parent is not in the index (evicted or never published), -EEXIST when
 * @block is already published, -EINVAL for bad ids, a block without a reference or a
 * @parent published under other extra keys (a chain never changes keys midway),
 * -ENOMEM when the table of extra keys cannot grow.
 */
int kvp_index_publish(struct kvp_index *idx, const struct kvp_prefix_key *key, uint32_t parent,
		      const uint32_t *tokens, uint32_t block, uint32_t *out_block);

/* Chain hash of a published block (for the disk tier); -ENOENT if not published. */
int kvp_index_block_hash(const struct kvp_index *idx, uint32_t block, struct kvp_h128 *h);

/*
 * kvp_chain_hash() - h_i = XXH3_128(@prev || @tokens as uint32 little-endian), unseeded:
 * the same on every host and across restarts.  @n_tokens <= KVP_INDEX_MAX_BLOCK_TOKENS.
 */
struct kvp_h128 kvp_chain_hash(struct kvp_h128 prev, const uint32_t *tokens, uint32_t n_tokens);

/**
 * kvp_index_set_seed() - place buckets with @seed from now on (rehashes every entry)
 * A new index has a random per-start seed; a disk tier brings its own (per tier), set
 * before the rebuild.  Chain hashes do not change.
 */
void kvp_index_set_seed(struct kvp_index *idx, uint64_t seed);

/* --- the disk tier (shm/tier.c) --- */

/**
 * struct kvp_index_rec - what identifies an entry, as the disk tier stores it with the K/V
 * @hash:   chain hash of the block
 * @phash:  chain hash of the parent block; the extra-keys digest (@key.seed) for a first
 *          block
 * @uid:    the entry's identity (never 0)
 * @puid:   the parent entry's uid, 0 for a first block
 * @key:    the canonical extra keys and their digest (kvp_prefix_key_init())
 * @tokens: the block_tokens token ids of the block (borrowed)
 */
struct kvp_index_rec {
	struct kvp_h128 hash;
	struct kvp_h128 phash;
	uint64_t uid;
	uint64_t puid;
	struct kvp_prefix_key key;
	const uint32_t *tokens;
};

/* One on-disk entry found by kvp_index_lookup_disk(): read @slot, expect @uid. */
struct kvp_index_disk_hit {
	uint32_t slot;
	uint32_t reserved;
	uint64_t uid;
};

/**
 * kvp_index_reserve_disk() - room for entries that live on disk only, in @n_slots slots
 * Call once a tier is open, before any on-disk entry exists (grows the entry table).
 * Return: 0; -EBUSY if on-disk entries exist already; -EINVAL if @n_slots is smaller
 * than before or the table would pass 2^31 entries; -ENOMEM.
 */
int kvp_index_reserve_disk(struct kvp_index *idx, uint32_t n_slots);

/**
 * kvp_index_block_rec() - the identity of published @block, to write it to the tier
 * @rec: out; @rec->tokens points into the index, valid while the entry exists
 * Return: 0, or -ENOENT when @block is not published.
 */
int kvp_index_block_rec(const struct kvp_index *idx, uint32_t block, struct kvp_index_rec *rec);

/**
 * kvp_index_set_disk() - the tier holds a verified copy of @block's entry in @slot
 * @uid: the uid the copy was written with (kvp_index_block_rec()): the entry must still
 *       be the same one
 * From now on, when the pool evicts @block the entry stays, on disk only.
 * Return: 0; -ESTALE when @block's entry is gone or another (the caller frees the slot);
 * -EEXIST when the entry has a disk copy already; -EBUSY when @slot is taken; -EINVAL.
 */
int kvp_index_set_disk(struct kvp_index *idx, uint32_t block, uint64_t uid, uint32_t slot);

/* Whether published @block's entry has a copy in the disk tier (false if not published). */
bool kvp_index_block_on_disk(const struct kvp_index *idx, uint32_t block);

/**
 * kvp_index_disk_dropped() - the tier no longer holds @slot (evicted, failed a check,
 * flushed, or the tier degraded)
 * An entry on disk only leaves the index; an entry in memory just loses its copy.
 * Return: 0, or -ENOENT when no entry uses @slot.
 */
int kvp_index_disk_dropped(struct kvp_index *idx, uint32_t slot);

/**
 * kvp_index_lookup_disk() - continue a lookup past its memory hits, into on-disk entries
 * @key, @tokens, @n_tokens: as given to kvp_index_lookup()
 * @n_hit:  blocks kvp_index_lookup() hit (the walk starts at block @n_hit)
 * @parent: the last of those blocks, or KVP_BLOCK_NONE when @n_hit is 0
 * @out:    out; for blocks @n_hit, @n_hit + 1, ...: the slot to read and its uid
 * @max:    room in @out
 *
 * Stops at the first block that misses or is not on disk only, and never covers the
 * last prompt token.  Takes no reference; the caller reads each slot into a fresh block
 * (kvp_tier_read()) and, once read, publishes the blocks in order with
 * kvp_index_publish(), which gives each on-disk entry its block back.
 * Return: number of on-disk hits (>= 0), or -EINVAL (bad arguments, @parent not an
 * indexed block).
 */
int kvp_index_lookup_disk(struct kvp_index *idx, const struct kvp_prefix_key *key,
			  const uint32_t *tokens, uint32_t n_tokens, uint32_t n_hit,
			  uint32_t parent, struct kvp_index_disk_hit *out, uint32_t max);

/**
 * kvp_index_insert_disk() - an entry found in the tier at start (rebuild), on disk only
 * @rec:  as read from the tier (every field is checked again here)
 * @slot: where it lives
 *
 * Insert parents before children (ascending uid does it: a parent is always created
 * before its children).  The parent is found by its uid and must have hash @rec->phash
 * and the same extra keys; a first block must have phash == the extra-keys digest.
 * Later uids start above the largest seen.
 * Return: 0; -ENOENT when the parent is not in the index (an orphan: free the slot);
 * -EEXIST when an entry with this uid, or an equal entry, is in already; -EBADMSG when
 * the hashes do not agree with the tokens and keys; -EBUSY when @slot is taken; -EINVAL.
 */
int kvp_index_insert_disk(struct kvp_index *idx, const struct kvp_index_rec *rec, uint32_t slot);

/*
 * New entries get uids above @uid from now on.  The tier passes the largest uid and
 * puid of every sound record it found, orphans included: a record left on disk must
 * never name a later entry as its parent.
 */
void kvp_index_set_uid_floor(struct kvp_index *idx, uint64_t uid);

/**
 * kvp_index_evicted() - why did block @first of @tokens miss: was it evicted recently?
 * @key, @tokens, @n_tokens: as given to kvp_index_lookup()
 * @first:  the first block that missed (blocks before it are hashed, not looked at)
 * @tier:   out; enum kvp_evicted_tier of block @first (KVP_EVICTED_NONE when not in the
 *          set)
 *
 * Every entry that leaves the index (the pool evicted its block and it had no disk copy;
 * or, on disk only, its copy was dropped) leaves its chain hash in a small
 * set-associative set (KVP_INDEX_EVICTED_SETS x KVP_INDEX_EVICTED_WAYS, the oldest of a
 * set replaced): a hint for miss reasons and recomputation counts, never used to serve
 * K/V, so the hash alone is enough.
 * Return: how many consecutive blocks from @first on (never covering the last prompt
 * token) are in the set, 0 when block @first is not; -EINVAL.
 */
int kvp_index_evicted(struct kvp_index *idx, const struct kvp_prefix_key *key,
		      const uint32_t *tokens, uint32_t n_tokens, uint32_t first, uint32_t *tier);

/**
 * kvp_index_probe_keys() - is block @block of @tokens (and every block before it) in the
 * index under extra keys other than @key's?  Looks at up to 64 other key sets.
 * Return: enum kvp_probe, or -EINVAL.
 */
int kvp_index_probe_keys(struct kvp_index *idx, const struct kvp_prefix_key *key,
			 const uint32_t *tokens, uint32_t n_tokens, uint32_t block);

/* Fill @st. */
void kvp_index_stats(const struct kvp_index *idx, struct kvp_index_stats *st);

/*
 * kvp_index_for_each_hash() - call @fn with the chain hash of every entry, in memory or
 * on disk only, in no particular order (the remote tier's chain summary, svc/engine/routesum.c).
 * Return: entries visited.
 */
uint64_t kvp_index_for_each_hash(const struct kvp_index *idx,
				 void (*fn)(void *ctx, struct kvp_h128 h), void *ctx);

/*
 * Test hook: when @on, every chain hash of this index is the same constant, so every
 * lookup and publish meets "equal hash, maybe different block" and only the exact
 * comparison of tokens, parent and extra keys separates entries.  Turn it on only on an
 * empty index (entries keep the hash they were inserted with).
 */
void kvp_index_debug_force_collisions(struct kvp_index *idx, int on);

#endif /* KVP_SHM_INDEX_H */
