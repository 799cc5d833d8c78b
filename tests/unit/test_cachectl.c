/* SPDX-License-Identifier: MIT */
/*
 * test_cachectl.c - prompt-cache mechanics with an injected clock: TTL protection and
 * expiry (a TTL protects only while unprotected candidates exist), eviction order under
 * lru, lfu and priority, cache pins under pressure and flush, the recently-evicted set
 * (memory and disk), the other-keys probe (salt vs model keys), miss reasons, and the
 * resolution of a request's breakpoints and TTLs (svc/engine/cachectl.h).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "shm/index.h"
#include "shm/pool.h"
#include "svc/engine/cachectl.h"
#include "svc/engine/cachepol.h"

#define BT 4
#define NB 8

struct fixture {
	struct kvp_pool *pool;
	struct kvp_index *idx;
	struct kvp_prefix_key key;
	uint64_t now; /* the injected clock, ns */
};

static uint64_t clock_of(void *ctx)
{
	return ((struct fixture *)ctx)->now;
}

static struct kvp_extra_keys base_keys(const char *salt)
{
	struct kvp_extra_keys ek = { .model_fp = "model-fp-0123456",
				     .kv_dtype = KVP_DTYPE_F16,
				     .rope_theta_bits = 0x461c4000 };

	ek.salt_len = (uint32_t)strlen(salt);
	memcpy(ek.salt, salt, ek.salt_len);
	return ek;
}

static int setup(void **state)
{
	struct kvp_pool_config cfg = {
		.shape = { .n_layers = 1,
			   .n_kv_heads = 1,
			   .head_dim = 8,
			   .dtype = KVP_DTYPE_F16,
			   .block_tokens = BT },
		.n_blocks = NB,
		.pages = KVP_PAGES_AUTO,
		.name = "kvptest-cachectl",
	};
	struct kvp_extra_keys ek = base_keys("a");
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f || kvp_pool_new(&f->pool, &cfg) < 0 || kvp_index_new(&f->idx, f->pool) < 0 ||
	    kvp_prefix_key_init(&f->key, &ek) < 0)
		return -1;
	f->now = 1000;
	kvp_pool_set_clock(f->pool, clock_of, f);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kvp_index_free(f->idx);
	kvp_pool_free(f->pool);
	free(f);
	return 0;
}

static void fill(uint32_t *t, uint32_t n, uint32_t base)
{
	for (uint32_t i = 0; i < n; i++)
		t[i] = base + i;
}

/* A one-block prompt published and released; its block id. */
static uint32_t cache_one(struct fixture *f, const struct kvp_prefix_key *key, uint32_t base)
{
	uint32_t t[BT], id, out;

	fill(t, BT, base);
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &id), 0);
	assert_int_equal(kvp_index_publish(f->idx, key, KVP_BLOCK_NONE, t, id, &out), 0);
	assert_int_equal(kvp_pool_unref(f->pool, id), 0);
	return id;
}

/* Take every free block (held); how many. */
static uint32_t take_free(struct fixture *f, uint32_t *held)
{
	struct kvp_pool_stats st;
	uint32_t n = 0;

	kvp_pool_stats(f->pool, &st);
	for (uint32_t i = 0; i < st.arena[0].free; i++)
		assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &held[n++]), 0);
	return n;
}

/* Allocate one block under pressure: which cached block was evicted for it. */
static uint32_t evict_next(struct fixture *f)
{
	uint32_t id;

	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &id), 0);
	return id;
}

static void test_ttl_protects_then_expires(void **state)
{
	struct fixture *f = *state;
	uint32_t a, b, c, held[NB];

	a = cache_one(f, &f->key, 100); /* oldest, TTL to 5000 */
	b = cache_one(f, &f->key, 200); /* no TTL */
	c = cache_one(f, &f->key, 300); /* newest, TTL to 3000 */
	/* TTLs are set while held (as the engine does on a hit or publish) */
	for (uint32_t x = 0; x < 2; x++) {
		uint32_t id = x ? c : a;

		assert_int_equal(kvp_pool_ref(f->pool, id), 0);
		assert_int_equal(kvp_pool_set_ttl(f->pool, id, x ? 3000 : 5000), 0);
		assert_int_equal(kvp_pool_unref(f->pool, id), 0);
	}
	take_free(f, held);
	/* at t=1000 b is the only unprotected one: it goes first although a is older */
	assert_int_equal(evict_next(f), b);
	/* nothing unprotected is left: the protected one closest to expiry goes (soft TTL) */
	assert_int_equal(evict_next(f), c);
	assert_int_equal(kvp_pool_block(f->pool, a)->cached, 1);
	{
		struct kvp_pool_stats st;

		kvp_pool_stats(f->pool, &st);
		assert_int_equal(st.evictions, 2);
		assert_int_equal(st.evictions_ttl, 1);
	}
}

static void test_ttl_expiry_reorders(void **state)
{
	struct fixture *f = *state;
	uint32_t a, b, c, held[NB];

	a = cache_one(f, &f->key, 100);
	b = cache_one(f, &f->key, 200);
	c = cache_one(f, &f->key, 300);
	assert_int_equal(kvp_pool_ref(f->pool, a), 0);
	assert_int_equal(kvp_pool_set_ttl(f->pool, a, 2000), 0);
	assert_int_equal(kvp_pool_unref(f->pool, a), 0);
	take_free(f, held);
	/* a is protected at t=1000: b, the least recently used of the others, goes */
	assert_int_equal(evict_next(f), b);
	/* c goes before a while a is protected, whatever their recency */
	assert_int_equal(kvp_pool_ref(f->pool, c), 0);
	assert_int_equal(kvp_pool_unref(f->pool, c), 0); /* c is now the most recent */
	/* the clock passes a's deadline: a is open again, and now the older of the two */
	f->now = 2001;
	assert_int_equal(evict_next(f), a);
	assert_int_equal(evict_next(f), c);
}

static void test_lfu_order(void **state)
{
	struct fixture *f = *state;
	uint32_t a, b, c, held[NB], hits[1], t[BT + 1];

	assert_int_equal(kvp_pool_set_policy(f->pool, KVP_EVICT_LFU), 0);
	a = cache_one(f, &f->key, 100);
	b = cache_one(f, &f->key, 200);
	c = cache_one(f, &f->key, 300);
	/* a is hit twice, c once, b never: b, c, a */
	for (int k = 0; k < 3; k++) {
		fill(t, BT + 1, k < 2 ? 100 : 300);
		assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, BT + 1, hits, 1), 1);
		assert_int_equal(kvp_pool_unref(f->pool, hits[0]), 0);
	}
	take_free(f, held);
	assert_int_equal(evict_next(f), b);
	assert_int_equal(evict_next(f), c);
	assert_int_equal(evict_next(f), a);
	assert_int_equal(kvp_pool_set_policy(f->pool, KVP_EVICT__COUNT), -EINVAL);
}

static void test_priority_order(void **state)
{
	struct fixture *f = *state;
	uint32_t id[3], held[NB];
	const uint32_t prio[3] = { 90, 10, 50 };

	assert_int_equal(kvp_pool_set_policy(f->pool, KVP_EVICT_PRIORITY), 0);
	for (int i = 0; i < 3; i++) {
		id[i] = cache_one(f, &f->key, 100 * (uint32_t)(i + 1));
		assert_int_equal(kvp_pool_ref(f->pool, id[i]), 0);
		kvp_pool_set_retain(f->pool, id[i], prio[i]);
		assert_int_equal(kvp_pool_unref(f->pool, id[i]), 0);
	}
	take_free(f, held);
	/* lowest retention priority first, whatever the recency */
	assert_int_equal(evict_next(f), id[1]);
	assert_int_equal(evict_next(f), id[2]);
	assert_int_equal(evict_next(f), id[0]);
}

static void test_cache_pin_survives_pressure_and_flush(void **state)
{
	struct fixture *f = *state;
	uint32_t a, b, held[NB], x;
	struct kvp_pool_stats st;

	a = cache_one(f, &f->key, 100);
	b = cache_one(f, &f->key, 200);
	assert_int_equal(kvp_pool_cache_pin(f->pool, a), 0);
	assert_int_equal(kvp_pool_cache_pin(f->pool, a), 0); /* pins nest */
	kvp_pool_stats(f->pool, &st);
	assert_int_equal(st.cpin_blocks, 1);
	assert_int_equal(st.cpin_idle, 1);
	take_free(f, held);
	assert_int_equal(evict_next(f), b);
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &x), -ENOMEM);
	assert_int_equal(kvp_pool_flush(f->pool), 0); /* pinned: flush leaves it */
	assert_int_equal(kvp_pool_block(f->pool, a)->cached, 1);
	assert_int_equal(kvp_pool_cache_unpin(f->pool, a), 0);
	assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &x), -ENOMEM);
	assert_int_equal(kvp_pool_cache_unpin(f->pool, a), 0);
	kvp_pool_stats(f->pool, &st);
	assert_int_equal(st.cpin_blocks, 0);
	assert_int_equal(st.cpin_idle, 0);
	assert_int_equal(kvp_pool_flush(f->pool), 1);
	assert_int_equal(kvp_pool_block(f->pool, a)->cached, 0);
	assert_int_equal(kvp_pool_cache_unpin(f->pool, a), -EINVAL);
}

static void test_flush_ignores_ttl_keeps_held(void **state)
{
	struct fixture *f = *state;
	uint32_t a, b;

	a = cache_one(f, &f->key, 100);
	b = cache_one(f, &f->key, 200);
	assert_int_equal(kvp_pool_ref(f->pool, a), 0);
	assert_int_equal(kvp_pool_set_ttl(f->pool, a, 1ull << 60), 0);
	assert_int_equal(kvp_pool_unref(f->pool, a), 0);
	assert_int_equal(kvp_pool_ref(f->pool, b), 0); /* held: stays */
	assert_int_equal(kvp_pool_flush(f->pool), 1);
	assert_int_equal(kvp_pool_block(f->pool, a)->cached, 0);
	assert_int_equal(kvp_pool_block(f->pool, b)->cached, 1);
	assert_int_equal(kvp_pool_unref(f->pool, b), 0);
}

static void test_evicted_set_and_miss_reasons(void **state)
{
	struct fixture *f = *state;
	struct kvp_extra_keys ekb = base_keys("b"), ekm = base_keys("a");
	struct kvp_prefix_key kb, km;
	uint32_t t[3 * BT + 1], ids[3], hits[3], parent = KVP_BLOCK_NONE, out, tier, ev;

	ekm.rope_theta_bits++; /* other model keys, same salt */
	assert_int_equal(kvp_prefix_key_init(&kb, &ekb), 0);
	assert_int_equal(kvp_prefix_key_init(&km, &ekm), 0);
	fill(t, 3 * BT + 1, 500);
	/* a prompt never seen: no_prefix; shorter than a block: below_block */
	assert_int_equal(kvp_cachectl_miss(f->idx, &f->key, t, 3 * BT + 1, BT, 0, &tier, &ev),
			 KVP_MISS_NO_PREFIX);
	assert_int_equal(kvp_cachectl_miss(f->idx, &f->key, t, BT, BT, 0, &tier, &ev),
			 KVP_MISS_BELOW_BLOCK);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(kvp_pool_alloc(f->pool, KVP_NODE_ANY, &ids[i]), 0);
		assert_int_equal(kvp_index_publish(f->idx, &f->key, parent, t + i * BT, ids[i],
						   &out),
				 0);
		parent = ids[i];
	}
	for (int i = 0; i < 3; i++)
		assert_int_equal(kvp_pool_unref(f->pool, ids[i]), 0);
	/* all three hit: none */
	assert_int_equal(kvp_cachectl_miss(f->idx, &f->key, t, 3 * BT + 1, BT, 3, &tier, &ev),
			 KVP_MISS_NONE);
	/* the same tokens under another salt, and under other model keys */
	assert_int_equal(kvp_cachectl_miss(f->idx, &kb, t, 3 * BT + 1, BT, 0, &tier, &ev),
			 KVP_MISS_SALT_MISMATCH);
	assert_int_equal(kvp_cachectl_miss(f->idx, &km, t, 3 * BT + 1, BT, 0, &tier, &ev),
			 KVP_MISS_MODEL_MISMATCH);
	/* evict the last two (leaves first): evicted from memory, 2 blocks to recompute */
	assert_int_equal(kvp_pool_evict_block(f->pool, ids[2]), 0);
	assert_int_equal(kvp_pool_evict_block(f->pool, ids[1]), 0);
	assert_int_equal(kvp_index_lookup(f->idx, &f->key, t, 3 * BT + 1, hits, 3), 1);
	assert_int_equal(kvp_pool_unref(f->pool, hits[0]), 0);
	assert_int_equal(kvp_cachectl_miss(f->idx, &f->key, t, 3 * BT + 1, BT, 1, &tier, &ev),
			 KVP_MISS_EVICTED);
	assert_int_equal(tier, KVP_MISS_TIER_MEMORY);
	assert_int_equal(ev, 2 * BT);
	assert_int_equal(kvp_index_evicted(f->idx, &f->key, t, 3 * BT + 1, 1, &tier), 2);
	assert_int_equal(tier, KVP_EVICTED_MEM);
	/* the paired control: a prompt never cached is not "evicted" */
	fill(t, 3 * BT + 1, 900);
	assert_int_equal(kvp_index_evicted(f->idx, &f->key, t, 3 * BT + 1, 0, &tier), 0);
	assert_int_equal(tier, KVP_EVICTED_NONE);
	{
		struct kvp_index_stats st;

		kvp_index_stats(f->idx, &st);
		assert_int_equal(st.evicted_seen, 2);
		assert_int_equal(st.evicted_unread, 2); /* never hit after they were written */
	}
}

static void test_resolve_breakpoints(void **state)
{
	struct kvp_cache_policy pol;
	struct kvp_cache_ctl cc = {
		.n_breakpoints = 2, .breakpoints = { 20, 40 }, .bp_ttl_s = { 7200, 0 }, .ttl_s = 60
	};
	struct kvp_cachectl r;
	const char *why = NULL;

	(void)state;
	kvp_cache_policy_defaults(&pol);
	assert_int_equal(kvp_cachectl_resolve(&r, &pol, NULL, 100, 16, &why), 0);
	assert_int_equal(r.publish_blocks, KVP_CACHECTL_ALL);
	assert_int_equal(r.ttl_s, 300); /* the default */
	assert_int_equal(r.retain, 50);
	assert_int_equal(r.n, 1);
	assert_int_equal(kvp_cachectl_resolve(&r, &pol, &cc, 100, 16, &why), 0);
	assert_int_equal(r.publish_blocks, 2); /* 40 tokens: two full blocks of 16 */
	/* block 0 lies under both breakpoints: the longer TTL, cut to ttl_max (1 h) */
	assert_int_equal(kvp_cachectl_block_ttl_ns(&r, 0), 3600ull * 1000000000ull);
	assert_int_equal(kvp_cachectl_block_ttl_ns(&r, 1), 60ull * 1000000000ull);
	assert_int_equal(kvp_cachectl_resolve(&r, &pol, &cc, 39, 16, &why), -EINVAL);
	assert_non_null(why);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ttl_protects_then_expires, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ttl_expiry_reorders, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lfu_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_priority_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_pin_survives_pressure_and_flush, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_flush_ignores_ttl_keeps_held, setup, teardown),
		cmocka_unit_test_setup_teardown(test_evicted_set_and_miss_reasons, setup, teardown),
		cmocka_unit_test(test_resolve_breakpoints),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
