/* SPDX-License-Identifier: MIT */
/*
 * test_index.c - the prefix index: hit, miss, partial hit, a changed middle token, the
 * last prompt token never covered, same tokens after another prefix, other extra keys,
 * forced hash collisions caught by the exact comparison, publish races, and eviction
 * (LRU order, leaves first, pinned and TTL-live blocks kept, -ENOMEM when nothing goes);
 * for the disk tier: stable unseeded chain hashes under any bucket seed, offload and reload
 * of an entry, dropped slots, orphans never matched, rebuild from records.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "shm/index.h"

#define BT 4	/* tokens per block: short prompts are many blocks */
#define MAXB 16 /* blocks per test prompt at most */

struct fixture {
	struct kvp_pool *pool;
	struct kvp_index *idx;
	struct kvp_prefix_key key;
};

static int setup_n(void **state, uint32_t n_blocks)
{
	struct kvp_pool_config cfg = {
		.shape = { .n_layers = 1,
			   .n_kv_heads = 1,
			   .head_dim = 8,
			   .dtype = KVP_DTYPE_F16,
			   .block_tokens = BT },
		.n_blocks = n_blocks,
		.pages = KVP_PAGES_AUTO,
		.name = "kvptest-index",
	};
	struct kvp_extra_keys ek = { .model_fp = "model-fp-0123456",
				     .kv_dtype = KVP_DTYPE_F16,
				     .rope_theta_bits = 0x461c4000,
				     .salt_len = 3,
				     .salt = "abc" };
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	if (kvp_pool_new(&f->pool, &cfg) < 0 || kvp_index_new(&f->idx, f->pool) < 0 ||
	    kvp_prefix_key_init(&f->key, &ek) < 0) {
		kvp_index_free(f->idx);
		kvp_pool_free(f->pool);
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int setup64(void **state)
{
	return setup_n(state, 64);
}

static int setup8(void **state)
{
	return setup_n(state, 8);
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kvp_index_free(f->idx);
	kvp_pool_free(f->pool);
	free(f);
	return 0;
}

/* tokens[i] = base + i */
static void fill(uint32_t *t, uint32_t n, uint32_t base)
{
	for (uint32_t i = 0; i < n; i++)
		t[i] = base + i;
}

/*
 * What a finished request leaves behind: its n_full full blocks allocated, published in
 * order and released.  Returns the block ids in @ids.
 */
static void cache_prompt(struct fixture *f, const struct kvp_prefix_key *key,
			 const uint32_t *tokens, uint32_t n_full, uint32_t *ids)
{
	uint32_t parent = KVP_BLOCK_NONE, out;

	for (uint32_t i = 0; i < n_full; i++) {
		assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &ids[i]), 0);
		assert_int_equal(kvp_index_publish(f->idx, key, parent, tokens + i * BT, ids[i],
						   &out),
				 0);
		assert_int_equal(out, ids[i]);
		parent = ids[i];
	}
	for (uint32_t i = 0; i < n_full; i++)
		assert_int_equal(kvp_pool_unref(f->pool, ids[i]), 0);
}

static void put_all(struct fixture *f, const uint32_t *ids, int n)
{
	for (int i = 0; i < n; i++)
		assert_int_equal(kvp_pool_unref(f->pool, ids[i]), 0);
}

static void test_hit_miss_partial(void **state)
{
	/* same prompt hits all its full blocks (refs taken); a longer one hits a prefix */
	struct fixture *f = *state;
	uint32_t t[MAXB * BT], ids[MAXB], hits[MAXB];
	struct kvp_index_stats st;

	fill(t, 5 * BT, 100);
	cache_prompt(f, &f->key, t, 3, ids);
	/* 13 tokens: 3 full blocks + 1 token to compute */
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, 3 * BT + 1, hits, MAXB), 3);
	assert_memory_equal(hits, ids, 3 * sizeof(uint32_t));
	for (int i = 0; i < 3; i++)
		assert_int_equal(kvp_pool_block(f->pool, ids[i])->refcount, 1);
	put_all(f, hits, 3);
	/* a longer prompt: partial hit of the 3 cached blocks */
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, 5 * BT, hits, MAXB), 3);
	put_all(f, hits, 3);
	/* the first token differs: miss */
	t[0] = 7;
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, 5 * BT, hits, MAXB), 0);
	/* max_hits bounds the answer */
	t[0] = 100;
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, 5 * BT, hits, 2), 2);
	put_all(f, hits, 2);
	kvp_index_stats(f->idx, &st);
	assert_int_equal(st.entries, 3);
	assert_int_equal(st.lookups, 4);
	assert_int_equal(st.hit_blocks, 3 + 3 + 0 + 2);
	assert_int_equal(st.lookup_blocks, 3 + 4 + 4 + 2);
}

static void test_changed_middle_token(void **state)
{
	/* one token changed in block 2 of 4: blocks 0 and 1 hit, 2 and after miss */
	struct fixture *f = *state;
	uint32_t t[MAXB * BT], ids[MAXB], hits[MAXB];

	fill(t, 4 * BT + 1, 500);
	cache_prompt(f, &f->key, t, 4, ids);
	t[2 * BT + 1] ^= 0xffff;
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, 4 * BT + 1, hits, MAXB), 2);
	assert_int_equal(hits[0], ids[0]);
	assert_int_equal(hits[1], ids[1]);
	put_all(f, hits, 2);
}

static void test_last_token_never_covered(void **state)
{
	/* a prompt of exactly 3 cached full blocks hits only 2: its last token is computed */
	struct fixture *f = *state;
	uint32_t t[MAXB * BT], ids[MAXB], hits[MAXB];

	fill(t, 3 * BT, 900);
	cache_prompt(f, &f->key, t, 3, ids);
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, 3 * BT, hits, MAXB), 2);
	put_all(f, hits, 2);
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, 1, hits, MAXB), 0);
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, BT, hits, MAXB), 0);
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, 0, hits, MAXB), 0);
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, BT + 1, hits, MAXB), 1);
	put_all(f, hits, 1);
}

static void test_same_tokens_other_prefix_miss(void **state)
{
	/* [P1 X] and [P2] cached: [P2 X] hits P2 only; X's K/V belongs after P1 */
	struct fixture *f = *state;
	uint32_t a[3 * BT], b[3 * BT], ids[MAXB], ids2[MAXB], hits[MAXB];

	fill(a, 2 * BT, 10);			       /* P1 X */
	fill(b, BT, 40);			       /* P2 */
	memcpy(b + BT, a + BT, BT * sizeof(uint32_t)); /* P2 X */
	b[2 * BT] = 1;
	cache_prompt(f, &f->key, a, 2, ids);
	cache_prompt(f, &f->key, b, 1, ids2);
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, b, 2 * BT + 1, hits, MAXB), 1);
	assert_int_equal(hits[0], ids2[0]);
	put_all(f, hits, 1);
}

static void test_extra_keys_must_match(void **state)
{
	/* other salt, model, adapter, dtype or RoPE: miss; ignored salt bytes: still hit */
	struct fixture *f = *state;
	uint32_t t[3 * BT], ids[MAXB], hits[MAXB];
	struct kvp_prefix_key k;
	struct kvp_extra_keys ek;

	fill(t, 2 * BT + 1, 77);
	cache_prompt(f, &f->key, t, 2, ids);

	ek = f->key.ek;
	ek.salt[1] = 'X';
	assert_int_equal(kvp_prefix_key_init(&k, &ek), 0);
	assert_int_equal(kvp_index_lookup(f->idx, &k, t, 2 * BT + 1, hits, MAXB), 0);
	ek = f->key.ek;
	ek.model_fp[15] ^= 1;
	assert_int_equal(kvp_prefix_key_init(&k, &ek), 0);
	assert_int_equal(kvp_index_lookup(f->idx, &k, t, 2 * BT + 1, hits, MAXB), 0);
	ek = f->key.ek;
	ek.adapter_id = 1;
	assert_int_equal(kvp_prefix_key_init(&k, &ek), 0);
	assert_int_equal(kvp_index_lookup(f->idx, &k, t, 2 * BT + 1, hits, MAXB), 0);
	/* every other K/V type, the quantized ones included: the same tokens, another key */
	for (uint32_t d = 0; d < KVP_DTYPE__COUNT; d++) {
		if (d == f->key.ek.kv_dtype)
			continue;
		ek = f->key.ek;
		ek.kv_dtype = d;
		assert_int_equal(kvp_prefix_key_init(&k, &ek), 0);
		assert_int_equal(kvp_index_lookup(f->idx, &k, t, 2 * BT + 1, hits, MAXB), 0);
	}
	ek = f->key.ek;
	ek.rope_theta_bits++;
	assert_int_equal(kvp_prefix_key_init(&k, &ek), 0);
	assert_int_equal(kvp_index_lookup(f->idx, &k, t, 2 * BT + 1, hits, MAXB), 0);
	ek = f->key.ek;
	ek.salt_len = 2; /* "ab" is not "abc" */
	assert_int_equal(kvp_prefix_key_init(&k, &ek), 0);
	assert_int_equal(kvp_index_lookup(f->idx, &k, t, 2 * BT + 1, hits, MAXB), 0);

	ek = f->key.ek;
	ek.salt[10] = 'Z'; /* past salt_len: ignored */
	ek.reserved = 9;
	assert_int_equal(kvp_prefix_key_init(&k, &ek), 0);
	assert_int_equal(kvp_index_lookup(f->idx, &k, t, 2 * BT + 1, hits, MAXB), 2);
	put_all(f, hits, 2);

	ek.salt_len = KVP_SALT_MAX + 1;
	assert_int_equal(kvp_prefix_key_init(&k, &ek), -EINVAL);
}

static void test_forced_collisions_caught(void **state)
{
	/* every chain hash equal: tokens, parent and extra keys still pick the right block */
	struct fixture *f = *state;
	uint32_t a[4 * BT], b[4 * BT], c[4 * BT], ida[MAXB], idb[MAXB], hits[MAXB], out;
	struct kvp_index_stats st;
	struct kvp_extra_keys ek = f->key.ek;
	struct kvp_prefix_key k2;

	kvp_index_debug_force_collisions(f->idx, 1);
	fill(a, 3 * BT + 1, 1000);
	fill(b, 3 * BT + 1, 2000);
	fill(c, 3 * BT + 1, 3000);
	cache_prompt(f, &f->key, a, 3, ida);
	cache_prompt(f, &f->key, b, 3, idb);

	assert_int_equal(kvp_index_lookup(f->idx, &f->key, a, 3 * BT + 1, hits, MAXB), 3);
	assert_memory_equal(hits, ida, 3 * sizeof(uint32_t));
	put_all(f, hits, 3);
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, b, 3 * BT + 1, hits, MAXB), 3);
	assert_memory_equal(hits, idb, 3 * sizeof(uint32_t));
	put_all(f, hits, 3);
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, c, 3 * BT + 1, hits, MAXB), 0);
	/* a's block 1 tokens after b's block 0: equal hash, equal tokens, wrong parent */
	memcpy(c, b, BT * sizeof(uint32_t));
	memcpy(c + BT, a + BT, 2 * BT * sizeof(uint32_t));
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, c, 3 * BT + 1, hits, MAXB), 1);
	assert_int_equal(hits[0], idb[0]);
	put_all(f, hits, 1);
	/* same tokens, other extra keys, equal hash: miss */
	ek.adapter_id = 5;
	assert_int_equal(kvp_prefix_key_init(&k2, &ek), 0);
	cache_prompt(f, &k2, c, 1, hits); /* make k2's keys known to the index */
	assert_int_equal(kvp_index_lookup(f->idx, &k2, a, 3 * BT + 1, hits, MAXB), 0);
	/* publishing a's first block again finds the existing one, not b's */
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &c[0]), 0);
	assert_int_equal(kvp_index_publish(f->idx, &f->key, KVP_BLOCK_NONE, a, c[0], &out), 1);
	assert_int_equal(out, ida[0]);
	put_all(f, &out, 1);
	put_all(f, &c[0], 1);
	kvp_index_stats(f->idx, &st);
	assert_true(st.collisions > 0);
}

static void test_publish_race_returns_existing(void **state)
{
	/* two requests fill the same block: the second learns the first's block, with a ref */
	struct fixture *f = *state;
	uint32_t t[2 * BT], a, b, out;
	struct kvp_index_stats st;

	fill(t, 2 * BT, 60);
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &a), 0);
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &b), 0);
	assert_int_equal(kvp_index_publish(f->idx, &f->key, KVP_BLOCK_NONE, t, a, &out), 0);
	assert_int_equal(out, a);
	assert_int_equal(kvp_index_publish(f->idx, &f->key, KVP_BLOCK_NONE, t, b, &out), 1);
	assert_int_equal(out, a);
	assert_int_equal(kvp_pool_block(f->pool, a)->refcount, 2);
	assert_int_equal(kvp_pool_block(f->pool, b)->refcount, 1); /* untouched */
	assert_false(kvp_pool_block(f->pool, b)->cached);
	kvp_index_stats(f->idx, &st);
	assert_int_equal(st.publish_dups, 1);
	assert_int_equal(st.entries, 1);
	put_all(f, &b, 1);
	put_all(f, &a, 1);
	put_all(f, &a, 1);
}

static void test_publish_errors(void **state)
{
	/* unknown parent, republish, a block without a reference: refused */
	struct fixture *f = *state;
	uint32_t t[2 * BT], a, b, out;

	fill(t, 2 * BT, 5);
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &a), 0);
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &b), 0);
	assert_int_equal(kvp_index_publish(f->idx, &f->key, b, t + BT, a, &out), -ENOENT);
	assert_int_equal(kvp_index_publish(f->idx, &f->key, KVP_BLOCK_NONE, t, a, &out), 0);
	assert_int_equal(kvp_index_publish(f->idx, &f->key, KVP_BLOCK_NONE, t, a, &out), -EEXIST);
	assert_int_equal(kvp_index_publish(f->idx, &f->key, a, t + BT, 9999, &out), -EINVAL);
	put_all(f, &b, 1);
	assert_int_equal(kvp_index_publish(f->idx, &f->key, a, t + BT, b, &out), -EINVAL);
	put_all(f, &a, 1);
}

static void test_publish_under_other_keys_refused(void **state)
{
	/* a child published under other extra keys than its parent's: -EINVAL, nothing kept */
	struct fixture *f = *state;
	struct kvp_extra_keys ek = f->key.ek;
	struct kvp_index_stats st;
	struct kvp_prefix_key k2;
	uint32_t t[2 * BT], a, b, out;

	fill(t, 2 * BT, 5);
	ek.salt_len = 0;
	assert_int_equal(kvp_prefix_key_init(&k2, &ek), 0);
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &a), 0);
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &b), 0);
	assert_int_equal(kvp_index_publish(f->idx, &f->key, KVP_BLOCK_NONE, t, a, &out), 0);
	assert_int_equal(kvp_index_publish(f->idx, &k2, a, t + BT, b, &out), -EINVAL);
	assert_false(kvp_pool_block(f->pool, b)->cached);
	kvp_index_stats(f->idx, &st);
	assert_int_equal(st.entries, 1);
	assert_int_equal(st.extra_keys, 1);
	put_all(f, &b, 1);
	put_all(f, &a, 1);
}

/* Allocate until @n blocks came out by eviction; @ev gets the evicted ids in order. */
static void evict_n(struct fixture *f, uint32_t *ev, int n)
{
	for (int i = 0; i < n; i++)
		assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &ev[i]), 0);
}

static void test_eviction_lru_order(void **state)
{
	/* 4 single-block prompts A B C D released in order, B looked up again: A C D B */
	struct fixture *f = *state; /* 8 blocks */
	uint32_t t[4][BT + 1], id[4], hits[1], fr[4], ev[4];
	struct kvp_index_stats st;
	struct kvp_pool_stats ps;

	for (int i = 0; i < 4; i++) {
		fill(t[i], BT + 1, 100 * (i + 1));
		cache_prompt(f, &f->key, t[i], 1, &id[i]);
	}
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t[1], BT + 1, hits, 1), 1);
	put_all(f, hits, 1);
	kvp_pool_stats(f->pool, &ps);
	assert_int_equal(ps.arena[0].cached, 4);
	assert_int_equal(ps.arena[0].free, 4);
	evict_n(f, fr, 4); /* the 4 free blocks, no eviction yet */
	kvp_index_stats(f->idx, &st);
	assert_int_equal(st.evictions, 0);
	evict_n(f, ev, 4);
	assert_int_equal(ev[0], id[0]);
	assert_int_equal(ev[1], id[2]);
	assert_int_equal(ev[2], id[3]);
	assert_int_equal(ev[3], id[1]);
	kvp_index_stats(f->idx, &st);
	assert_int_equal(st.evictions, 4);
	assert_int_equal(st.entries, 0);
	assert_int_equal(st.extra_keys, 0);
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &fr[0]), -ENOMEM);
	/* gone from the index too */
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t[1], BT + 1, hits, 1), 0);
}

static void test_eviction_leaves_first(void **state)
{
	/* a chain R -> C1 -> C2 released root first: C2 goes first, then C1, then R */
	struct fixture *f = *state; /* 8 blocks */
	uint32_t t[3 * BT + 1], id[3], fr[5], ev[3], g0;

	fill(t, 3 * BT + 1, 42);
	cache_prompt(f, &f->key, t, 3, id); /* puts R, C1, C2: R is the oldest */
	g0 = kvp_pool_block(f->pool, id[2])->generation;
	evict_n(f, fr, 5);
	evict_n(f, ev, 3);
	assert_int_equal(ev[0], id[2]);
	assert_int_equal(ev[1], id[1]);
	assert_int_equal(ev[2], id[0]);
	/* the reused block carries a new generation */
	assert_int_equal(kvp_pool_block(f->pool, id[2])->generation, g0 + 1);
}

static void test_pinned_and_ttl_kept(void **state)
{
	/*
	 * pinned blocks are never evicted; TTL-live ones only when nothing else is left
	 * (the TTL protects softly: pool.h); then -ENOMEM
	 */
	struct fixture *f = *state; /* 8 blocks */
	uint32_t t[3][BT + 1], id[3], fr[5], ev, x;
	struct timespec now;
	uint64_t now_ns;

	clock_gettime(CLOCK_MONOTONIC, &now);
	now_ns = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
	for (int i = 0; i < 3; i++) {
		fill(t[i], BT + 1, 10 * (i + 1));
		cache_prompt(f, &f->key, t[i], 1, &id[i]);
	}
	assert_int_equal(kvp_pool_pin(f->pool, id[0]), 0);
	assert_int_equal(kvp_pool_set_ttl(f->pool, id[1], now_ns + 3600ull * 1000000000ull), 0);
	assert_int_equal(kvp_pool_set_ttl(f->pool, id[2], now_ns - 1), 0); /* expired */
	evict_n(f, fr, 5);
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &ev), 0);
	assert_int_equal(ev, id[2]);
	assert_true(kvp_pool_block(f->pool, id[1])->cached);
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &ev), 0);
	assert_int_equal(ev, id[1]); /* inside its TTL, but nothing else could go */
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &x), -ENOMEM);
	assert_true(kvp_pool_block(f->pool, id[0])->cached);
	/* unpinned, it can go */
	assert_int_equal(kvp_pool_unpin(f->pool, id[0]), 0);
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &x), 0);
	assert_int_equal(x, id[0]);
	assert_int_equal(kvp_pool_unpin(f->pool, id[0]), -EINVAL);
}

static void test_referenced_blocks_not_evicted(void **state)
{
	/* a block held by a lookup stays, even when it is the least recently used */
	struct fixture *f = *state; /* 8 blocks */
	uint32_t t[2][BT + 1], id[2], hits[1], fr[6], ev, x;

	for (int i = 0; i < 2; i++) {
		fill(t[i], BT + 1, 7 * (i + 1));
		cache_prompt(f, &f->key, t[i], 1, &id[i]);
	}
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t[0], BT + 1, hits, 1), 1);
	evict_n(f, fr, 6);
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &ev), 0);
	assert_int_equal(ev, id[1]);
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &x), -ENOMEM);
	put_all(f, hits, 1);
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &x), 0);
	assert_int_equal(x, id[0]);
}

static void test_one_index_per_pool(void **state)
{
	/* a second index over the same pool is refused */
	struct fixture *f = *state;
	struct kvp_index *other;

	assert_int_equal(kvp_index_new(&other, f->pool), -EBUSY);
}

/* ---- disk tier support ---- */

/* Write @block's entry "to disk" at @slot (the tier's part is faked) and evict it. */
static void offload(struct fixture *f, uint32_t block, uint32_t slot)
{
	struct kvp_index_rec rec;

	assert_int_equal(kvp_index_block_rec(f->idx, block, &rec), 0);
	assert_int_equal(kvp_index_set_disk(f->idx, block, rec.uid, slot), 0);
	assert_int_equal(kvp_pool_evict_block(f->pool, block), 0);
}

static void test_chain_hash_stable_and_seed_free(void **state)
{
	/* chain hashes are XXH3_128(prev || tokens), unseeded; a new bucket seed keeps hits */
	struct fixture *f = *state;
	uint32_t t[2 * BT + 1], ids[2], hits[2];
	struct kvp_h128 h0, h1, e0, e1;

	fill(t, 2 * BT + 1, 500);
	cache_prompt(f, &f->key, t, 2, ids);
	e0 = kvp_chain_hash(f->key.seed, t, BT);
	e1 = kvp_chain_hash(e0, t + BT, BT);
	assert_int_equal(kvp_index_block_hash(f->idx, ids[0], &h0), 0);
	assert_int_equal(kvp_index_block_hash(f->idx, ids[1], &h1), 0);
	assert_memory_equal(&h0, &e0, sizeof(h0));
	assert_memory_equal(&h1, &e1, sizeof(h1));
	for (uint64_t seed = 1; seed < 40; seed += 7) {
		kvp_index_set_seed(f->idx, seed * 0x9e3779b97f4a7c15ull);
		assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, 2 * BT + 1, hits, 2), 2);
		assert_memory_equal(hits, ids, sizeof(ids));
		put_all(f, hits, 2);
		assert_int_equal(kvp_index_block_hash(f->idx, ids[1], &h1), 0);
		assert_memory_equal(&h1, &e1, sizeof(h1));
	}
}

static void test_offload_then_reload(void **state)
{
	/* a block with a disk copy keeps its entry when evicted; publish gives it memory back */
	struct fixture *f = *state;
	uint32_t t[3 * BT + 1], ids[3], hits[3], m, out;
	struct kvp_index_disk_hit dh[3];
	struct kvp_index_rec rec, rec2;
	struct kvp_index_stats st;

	assert_int_equal(kvp_index_reserve_disk(f->idx, 8), 0);
	fill(t, 3 * BT + 1, 70);
	cache_prompt(f, &f->key, t, 3, ids);
	assert_int_equal(kvp_index_block_rec(f->idx, ids[2], &rec), 0);
	/* the identity a tier record carries */
	assert_memory_equal(&rec.phash, &(struct kvp_h128){ 0 }, 0);
	assert_int_equal(kvp_index_block_hash(f->idx, ids[1], &rec2.hash), 0);
	assert_memory_equal(&rec.phash, &rec2.hash, sizeof(rec.phash));
	assert_memory_equal(rec.tokens, t + 2 * BT, BT * sizeof(uint32_t));
	assert_memory_equal(&rec.key, &f->key, sizeof(rec.key));
	assert_true(rec.uid != 0 && rec.puid != 0);
	offload(f, ids[2], 5);
	kvp_index_stats(f->idx, &st);
	assert_int_equal(st.entries, 2);
	assert_int_equal(st.disk_entries, 1);
	assert_int_equal(st.offloads, 1);
	assert_int_equal(st.evictions, 0);
	assert_false(kvp_pool_block(f->pool, ids[2])->cached);

	/* memory hits stop before it; the disk lookup continues from there */
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, 3 * BT + 1, hits, 3), 2);
	assert_int_equal(kvp_index_lookup_disk(f->idx, &f->key, t, 3 * BT + 1, 2, hits[1], dh, 3),
			 1);
	assert_int_equal(dh[0].slot, 5);
	assert_int_equal(dh[0].uid, rec.uid);
	/* never the last prompt token */
	assert_int_equal(kvp_index_lookup_disk(f->idx, &f->key, t, 3 * BT, 2, hits[1], dh, 3), 0);
	/* a wrong parent: -EINVAL; a changed token: miss */
	assert_int_equal(kvp_index_lookup_disk(f->idx, &f->key, t, 3 * BT + 1, 2, KVP_BLOCK_NONE,
					       dh, 3),
			 -EINVAL);
	t[2 * BT + 3]++;
	assert_int_equal(kvp_index_lookup_disk(f->idx, &f->key, t, 3 * BT + 1, 2, hits[1], dh, 3),
			 0);
	t[2 * BT + 3]--;

	/* read back into a fresh block and published: same entry, memory again */
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &m), 0);
	assert_int_equal(kvp_index_publish(f->idx, &f->key, hits[1], t + 2 * BT, m, &out), 0);
	assert_int_equal(out, m);
	assert_int_equal(kvp_index_block_rec(f->idx, m, &rec2), 0);
	assert_int_equal(rec2.uid, rec.uid);
	kvp_index_stats(f->idx, &st);
	assert_int_equal(st.entries, 3);
	assert_int_equal(st.disk_entries, 0);
	assert_int_equal(st.reloads, 1);
	put_all(f, &m, 1);
	put_all(f, hits, 2);
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, 3 * BT + 1, hits, 3), 3);
	assert_int_equal(hits[2], m);
	put_all(f, hits, 3);
	/* it still has its copy: evicted again, it stays on disk without another write */
	assert_int_equal(kvp_index_set_disk(f->idx, m, rec.uid, 6), -EEXIST);
	assert_int_equal(kvp_pool_evict_block(f->pool, m), 0);
	kvp_index_stats(f->idx, &st);
	assert_int_equal(st.disk_entries, 1);
	assert_int_equal(st.offloads, 2);
}

static void test_disk_dropped(void **state)
{
	/* a dropped slot: an on-disk entry leaves the index, one in memory only loses its copy */
	struct fixture *f = *state;
	uint32_t t[2 * BT + 1], ids[2], hits[2];
	struct kvp_index_disk_hit dh[2];
	struct kvp_index_stats st;

	assert_int_equal(kvp_index_reserve_disk(f->idx, 4), 0);
	fill(t, 2 * BT + 1, 300);
	cache_prompt(f, &f->key, t, 2, ids);
	offload(f, ids[1], 1);
	assert_int_equal(kvp_index_disk_dropped(f->idx, 1), 0);
	assert_int_equal(kvp_index_disk_dropped(f->idx, 1), -ENOENT);
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, 2 * BT + 1, hits, 2), 1);
	assert_int_equal(kvp_index_lookup_disk(f->idx, &f->key, t, 2 * BT + 1, 1, hits[0], dh, 2),
			 0);
	put_all(f, hits, 1);
	kvp_index_stats(f->idx, &st);
	assert_int_equal(st.disk_entries, 0);
	assert_int_equal(st.disk_drops, 1);

	/* in memory with a copy: the drop keeps the entry, a later eviction then drops it */
	assert_int_equal(kvp_index_set_disk(f->idx, ids[0], ({
						    struct kvp_index_rec r;
						    kvp_index_block_rec(f->idx, ids[0], &r);
						    r.uid;
					    }),
					    2),
			 0);
	assert_int_equal(kvp_index_disk_dropped(f->idx, 2), 0);
	assert_int_equal(kvp_pool_evict_block(f->pool, ids[0]), 0);
	kvp_index_stats(f->idx, &st);
	assert_int_equal(st.entries, 0);
	assert_int_equal(st.disk_entries, 0);
	assert_int_equal(st.evictions, 1);
}

static void test_set_disk_errors(void **state)
{
	/* the copy must be of the same entry (uid), one copy per entry, one entry per slot */
	struct fixture *f = *state;
	uint32_t t[2 * BT], ids[2];
	struct kvp_index_rec r0, r1;

	fill(t, 2 * BT, 900);
	cache_prompt(f, &f->key, t, 2, ids);
	assert_int_equal(kvp_index_block_rec(f->idx, ids[0], &r0), 0);
	assert_int_equal(kvp_index_block_rec(f->idx, ids[1], &r1), 0);
	assert_int_equal(kvp_index_set_disk(f->idx, ids[0], r0.uid, 0), -EINVAL); /* no slots */
	assert_int_equal(kvp_index_reserve_disk(f->idx, 4), 0);
	assert_int_equal(kvp_index_set_disk(f->idx, ids[0], r1.uid, 0), -ESTALE);
	assert_int_equal(kvp_index_set_disk(f->idx, ids[0], r0.uid, 4), -EINVAL);
	assert_int_equal(kvp_index_set_disk(f->idx, ids[0], r0.uid, 0), 0);
	assert_int_equal(kvp_index_set_disk(f->idx, ids[1], r1.uid, 0), -EBUSY);
	assert_int_equal(kvp_index_set_disk(f->idx, ids[0], r0.uid, 1), -EEXIST);
	assert_int_equal(kvp_index_block_rec(f->idx, 63, &r0), -ENOENT);
	assert_int_equal(kvp_index_reserve_disk(f->idx, 2), -EINVAL); /* never shrinks */
	/* a block evicted (and its id reused) is no longer the entry the write was of */
	assert_int_equal(kvp_index_set_disk(f->idx, ids[1], r1.uid, 1), 0);
	assert_int_equal(kvp_pool_evict_block(f->pool, ids[1]), 0);
	assert_int_equal(kvp_index_set_disk(f->idx, ids[1], r1.uid, 2), -ESTALE);
	assert_int_equal(kvp_index_reserve_disk(f->idx, 8), -EBUSY); /* disk entries exist */
}

static void test_orphan_never_matches(void **state)
{
	/* a child on disk whose parent left the index stays unmatched under a new parent */
	struct fixture *f = *state;
	uint32_t t[2 * BT + 1], ids[2], again[1], hits[2];
	struct kvp_index_disk_hit dh[2];

	assert_int_equal(kvp_index_reserve_disk(f->idx, 4), 0);
	fill(t, 2 * BT + 1, 1234);
	cache_prompt(f, &f->key, t, 2, ids);
	offload(f, ids[1], 3);
	assert_int_equal(kvp_pool_evict_block(f->pool, ids[0]), 0); /* no copy: dropped */
	cache_prompt(f, &f->key, t, 1, again);			    /* same tokens, a new entry */
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, 2 * BT + 1, hits, 2), 1);
	assert_int_equal(kvp_index_lookup_disk(f->idx, &f->key, t, 2 * BT + 1, 1, hits[0], dh, 2),
			 0);
	put_all(f, hits, 1);
}

/* Records of a chain of @n blocks of @t cached in @f (tokens copied into @tok). */
static void capture(struct fixture *f, const uint32_t *ids, int n, struct kvp_index_rec *recs,
		    uint32_t *tok)
{
	for (int i = 0; i < n; i++) {
		assert_int_equal(kvp_index_block_rec(f->idx, ids[i], &recs[i]), 0);
		memcpy(tok + i * BT, recs[i].tokens, BT * sizeof(uint32_t));
		recs[i].tokens = tok + i * BT;
	}
}

static void test_rebuild_from_records(void **state)
{
	/* records inserted parents first give back every chain; bad ones are refused */
	struct fixture *f = *state, *g = NULL;
	uint32_t t[3 * BT + 1], u[2 * BT + 1], ida[3], idb[2], tok[5 * BT], hits[3], m, out;
	struct kvp_index_rec rec[5], bad;
	struct kvp_index_disk_hit dh[3];
	struct kvp_index_stats st;

	fill(t, 3 * BT + 1, 10);
	memcpy(u, t, BT * sizeof(uint32_t)); /* u shares t's first block, then branches */
	fill(u + BT, BT + 1, 777);
	cache_prompt(f, &f->key, t, 3, ida);
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, u, 2 * BT + 1, idb, 2), 1);
	assert_int_equal(idb[0], ida[0]); /* the shared block */
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &m), 0);
	assert_int_equal(kvp_index_publish(f->idx, &f->key, idb[0], u + BT, m, &idb[1]), 0);
	put_all(f, idb, 2);
	capture(f, ida, 3, rec, tok);
	capture(f, idb + 1, 1, rec + 3, tok + 3 * BT);

	/* a "restarted" index over a fresh pool */
	assert_int_equal(setup_n((void **)&g, 16), 0);
	assert_int_equal(kvp_index_reserve_disk(g->idx, 8), 0);
	assert_int_equal(kvp_index_insert_disk(g->idx, &rec[1], 1), -ENOENT); /* parent first */
	bad = rec[0];
	bad.hash.lo ^= 1;
	assert_int_equal(kvp_index_insert_disk(g->idx, &bad, 0), -EBADMSG);
	bad = rec[0];
	bad.key.seed.hi ^= 1;
	assert_int_equal(kvp_index_insert_disk(g->idx, &bad, 0), -EBADMSG);
	bad = rec[0];
	bad.phash.hi ^= 1; /* a first block's parent hash is the digest */
	assert_int_equal(kvp_index_insert_disk(g->idx, &bad, 0), -EBADMSG);
	bad = rec[0];
	bad.key.ek.salt[60] = 1; /* not canonical (past salt_len) */
	assert_int_equal(kvp_index_insert_disk(g->idx, &bad, 0), -EBADMSG);
	assert_int_equal(kvp_index_insert_disk(g->idx, &rec[0], 8), -EINVAL);
	for (int i = 0; i < 4; i++)
		assert_int_equal(kvp_index_insert_disk(g->idx, &rec[i], i), 0);
	assert_int_equal(kvp_index_insert_disk(g->idx, &rec[2], 5), -EEXIST); /* uid */
	assert_int_equal(kvp_index_insert_disk(g->idx, &rec[2], 2), -EBUSY);  /* slot */
	bad = rec[3];
	bad.puid = rec[1].uid; /* a parent of another hash */
	assert_int_equal(kvp_index_insert_disk(g->idx, &bad, 6), -ENOENT);
	kvp_index_stats(g->idx, &st);
	assert_int_equal(st.disk_entries, 4);
	assert_int_equal(st.entries, 0);

	/* both chains are found on disk from the root, and reload in order */
	assert_int_equal(kvp_index_lookup(g->idx, &g->key, t, 3 * BT + 1, hits, 3), 0);
	assert_int_equal(kvp_index_lookup_disk(g->idx, &g->key, t, 3 * BT + 1, 0, KVP_BLOCK_NONE,
					       dh, 3),
			 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(dh[i].slot, i);
	assert_int_equal(kvp_index_lookup_disk(g->idx, &g->key, u, 2 * BT + 1, 0, KVP_BLOCK_NONE,
					       dh, 3),
			 2);
	assert_int_equal(dh[1].slot, 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(kvp_pool_alloc(g->pool, KVP_NODE_ANY, &m), 0);
		assert_int_equal(kvp_index_publish(g->idx, &g->key,
						   i ? hits[i - 1] : KVP_BLOCK_NONE, t + i * BT, m,
						   &out),
				 0);
		hits[i] = m;
	}
	put_all(g, hits, 3);
	assert_int_equal(kvp_index_lookup(g->idx, &g->key, t, 3 * BT + 1, hits, 3), 3);
	put_all(g, hits, 3);
	/* new entries get uids above every rebuilt one */
	fill(t, 2 * BT, 5555);
	cache_prompt(g, &g->key, t, 1, &m);
	assert_int_equal(kvp_index_block_rec(g->idx, m, &bad), 0);
	for (int i = 0; i < 4; i++)
		assert_true(bad.uid > rec[i].uid);
	teardown((void **)&g);
}

static void test_pool_peek_and_evict_block(void **state)
{
	/* the peek gives the coldest leaf; pinning it shows the next; evict_block takes one */
	struct fixture *f = *state; /* 8 blocks */
	uint32_t t[2][2 * BT + 1], a[2], b[2];

	fill(t[0], 2 * BT + 1, 1);
	fill(t[1], 2 * BT + 1, 100);
	assert_int_equal(kvp_pool_lru_peek(f->pool, KVP_NODE_ANY), -ENOENT);
	cache_prompt(f, &f->key, t[0], 2, a);
	cache_prompt(f, &f->key, t[1], 2, b);
	/* leaves only: a[1] released before b[1] */
	assert_int_equal(kvp_pool_lru_peek(f->pool, KVP_NODE_ANY), a[1]);
	assert_int_equal(kvp_pool_lru_peek(f->pool, 0), a[1]);
	assert_int_equal(kvp_pool_lru_peek(f->pool, 1), -EINVAL);
	assert_int_equal(kvp_pool_pin(f->pool, a[1]), 0);
	assert_int_equal(kvp_pool_lru_peek(f->pool, KVP_NODE_ANY), b[1]);
	assert_int_equal(kvp_pool_evict_block(f->pool, a[1]), -EBUSY); /* pinned */
	assert_int_equal(kvp_pool_evict_block(f->pool, a[0]), -EBUSY); /* has a child */
	assert_int_equal(kvp_pool_evict_block(f->pool, 99), -EINVAL);
	assert_int_equal(kvp_pool_unpin(f->pool, a[1]), 0);
	assert_int_equal(kvp_pool_evict_block(f->pool, b[1]), 0);
	assert_false(kvp_pool_block(f->pool, b[1])->cached);
	/* its parent is a leaf now: after a[1] (released earlier), before nothing else */
	assert_int_equal(kvp_pool_lru_peek(f->pool, KVP_NODE_ANY), a[1]);
	assert_int_equal(kvp_pool_pin(f->pool, a[1]), 0);
	assert_int_equal(kvp_pool_lru_peek(f->pool, KVP_NODE_ANY), b[0]);
	assert_int_equal(kvp_pool_unpin(f->pool, a[1]), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_hit_miss_partial, setup64, teardown),
		cmocka_unit_test_setup_teardown(test_changed_middle_token, setup64, teardown),
		cmocka_unit_test_setup_teardown(test_last_token_never_covered, setup64, teardown),
		cmocka_unit_test_setup_teardown(test_same_tokens_other_prefix_miss, setup64,
						teardown),
		cmocka_unit_test_setup_teardown(test_extra_keys_must_match, setup64, teardown),
		cmocka_unit_test_setup_teardown(test_forced_collisions_caught, setup64, teardown),
		cmocka_unit_test_setup_teardown(test_publish_race_returns_existing, setup64,
						teardown),
		cmocka_unit_test_setup_teardown(test_publish_errors, setup64, teardown),
		cmocka_unit_test_setup_teardown(test_publish_under_other_keys_refused, setup64,
						teardown),
		cmocka_unit_test_setup_teardown(test_eviction_lru_order, setup8, teardown),
		cmocka_unit_test_setup_teardown(test_eviction_leaves_first, setup8, teardown),
		cmocka_unit_test_setup_teardown(test_pinned_and_ttl_kept, setup8, teardown),
		cmocka_unit_test_setup_teardown(test_referenced_blocks_not_evicted, setup8,
						teardown),
		cmocka_unit_test_setup_teardown(test_one_index_per_pool, setup8, teardown),
		cmocka_unit_test_setup_teardown(test_chain_hash_stable_and_seed_free, setup64,
						teardown),
		cmocka_unit_test_setup_teardown(test_offload_then_reload, setup64, teardown),
		cmocka_unit_test_setup_teardown(test_disk_dropped, setup64, teardown),
		cmocka_unit_test_setup_teardown(test_set_disk_errors, setup64, teardown),
		cmocka_unit_test_setup_teardown(test_orphan_never_matches, setup64, teardown),
		cmocka_unit_test_setup_teardown(test_rebuild_from_records, setup64, teardown),
		cmocka_unit_test_setup_teardown(test_pool_peek_and_evict_block, setup8, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
