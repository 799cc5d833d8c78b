/* SPDX-License-Identifier: MIT */
/*
 * test_remoting.c - the engine's side of the remote tier (svc/engine/remoting.c) against a real
 * redis-server (tests/lib/redisfix.c), with a pool and a prefix index of its own:
 *
 *  - a chain of 24 published blocks offered with a tier queue of 4: every block reaches
 *    the store (the backlog feeds the queue in order), each once; the references taken
 *    are all given back; a block evicted and reused while in the backlog is not sent;
 *  - a fetch on a second pool serves the chain back bit-exact through the callback;
 *  - selective mode: creation is not published, a reuse is; above the watermark the
 *    coldest blocks are pinned, published, then evicted, and counted unavailable while
 *    pinned.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "shm/index.h"
#include "shm/pool.h"
#include "shm/remote/remote.h"
#include "svc/engine/remoting.h"
#include "tests/lib/redisfix.h"
#include "tests/lib/testlib.h"

#define BT 16
#define NB 64
#define CHAIN 24
#define SEL_CHAIN 40 /* test_selective: 40 of the 64 blocks cached */

static const struct kvp_model_shape shape = {
	.n_layers = 2,
	.n_kv_heads = 2,
	.head_dim = 64,
	.dtype = KVP_DTYPE_F16,
	.block_tokens = BT,
};
static const uint8_t fp[16] = "remoting-test-m";

struct host {
	struct kvp_pool *pool;
	struct kvp_index *index;
	struct kvp_remote *r;
	struct kvp_remoting *t;
	uint32_t n_done, n_ok;
};

struct world {
	struct redisfix rf;
	struct host a, b;
	struct kvp_prefix_key key;
	uint32_t tokens[SEL_CHAIN * BT];
};

static void on_fetch(void *ctx, uint64_t cookie, uint32_t n_ok, uint32_t stop)
{
	struct host *h = ctx;

	(void)cookie;
	(void)stop;
	h->n_done++;
	h->n_ok = n_ok;
}

static void host_up(struct host *h, const char *url, const char *publish, uint32_t queue)
{
	struct kvp_pool_config pc = {
		.shape = shape, .n_blocks = NB, .pages = KVP_PAGES_OFF, .name = "kvptest-remoting"
	};
	struct kvp_remote_config c;
	char err[512], q[16];
	uint32_t id;

	memset(h, 0, sizeof(*h));
	kvp_remote_config_defaults(&c);
	snprintf(q, sizeof(q), "%u", queue);
	assert_int_equal(kvp_remote_config_set(&c, "url", url, err, sizeof(err)), 0);
	assert_int_equal(kvp_remote_config_set(&c, "publish", publish, err, sizeof(err)), 0);
	assert_int_equal(kvp_remote_config_set(&c, "queue_blocks", q, err, sizeof(err)), 0);
	assert_int_equal(kvp_remote_config_add_domain(&c, &id, "default", NULL, NULL, err,
						      sizeof(err)),
			 0);
	assert_int_equal(kvp_pool_new(&h->pool, &pc), 0);
	assert_int_equal(kvp_index_new(&h->index, h->pool), 0);
	assert_int_equal(kvp_remote_new(&h->r, &c, &shape, fp, "avx2", err, sizeof(err)), 0);
	assert_int_equal(kvp_remote_wait_ready(h->r, 3000, err, sizeof(err)), 0);
	/* watermarks 50% / 25% of 64 blocks (the selective offloader) */
	assert_int_equal(kvp_remoting_new(&h->t, h->r, 0, h->pool, h->index, 50, 25, on_fetch, h),
			 0);
}

static void host_down(struct host *h)
{
	kvp_remoting_free(h->t);
	kvp_remote_free(h->r);
	kvp_index_free(h->index);
	kvp_pool_free(h->pool);
}

static int setup(void **state)
{
	struct world *w = calloc(1, sizeof(*w));
	struct kvp_extra_keys ek = { .kv_dtype = KVP_DTYPE_F16 };
	int r;

	if (!w)
		return -1;
	r = redisfix_start(&w->rf, NULL);
	if (r == -ENOENT) {
		free(w);
		print_message("redis-server not installed (tests/deps.sh): skipped\n");
		exit(KVP_TEST_SKIP);
	}
	if (r)
		return -1;
	memcpy(ek.model_fp, fp, 16);
	if (kvp_prefix_key_init(&w->key, &ek))
		return -1;
	for (uint32_t i = 0; i < SEL_CHAIN * BT; i++)
		w->tokens[i] = 1000 + i * 7;
	*state = w;
	return 0;
}

static int teardown(void **state)
{
	struct world *w = *state;

	redisfix_stop(&w->rf);
	free(w);
	return 0;
}

/* Publish a chain of @n blocks in @h's index (K/V: a pattern of the block number); the
 * caller's references are kept in @blocks. */
static void make_chain(struct host *h, const struct world *w, uint32_t *blocks, uint32_t n)
{
	size_t bb = kvp_pool_geom(h->pool)->block_bytes;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t out;

		assert_int_equal(kvp_pool_alloc(h->pool, KVP_NODE_ANY, &blocks[i]), 0);
		memset(kvp_pool_data(h->pool, blocks[i]), 0x40 + (int)i, bb);
		assert_int_equal(kvp_index_publish(h->index, &w->key,
						   i ? blocks[i - 1] : KVP_BLOCK_NONE,
						   w->tokens + i * BT, blocks[i], &out),
				 0);
	}
}

/* Poll until the tier answered @want publishes (stored + already), at most 10 s. */
static void settle(struct host *h, uint64_t want)
{
	struct kvp_remote_stats st;

	for (int i = 0; i < 1000; i++) {
		kvp_remoting_poll(h->t);
		kvp_remote_stats(h->r, 0, &st);
		if (st.stored + st.already >= want && !kvp_remoting_in_flight(h->t))
			return;
		usleep(10000);
	}
	fail_msg("stored %llu + already %llu of %llu", (unsigned long long)st.stored,
		 (unsigned long long)st.already, (unsigned long long)want);
}

static void test_backlog_and_fetch(void **state)
{
	struct world *w = *state;
	uint32_t blocks[CHAIN], dest[CHAIN], refs[NB] = { 0 };
	struct kvp_remoting_stats st;
	size_t bb;

	host_up(&w->a, w->rf.url_unix, "all", 4);
	make_chain(&w->a, w, blocks, CHAIN);
	for (uint32_t i = 0; i < CHAIN; i++)
		kvp_remoting_offer(w->a.t, blocks[i], KVP_REMOTE_WHY_CREATED);
	/* 4 in the tier's queue, each holding a reference; the rest wait, holding none */
	assert_int_equal(kvp_remoting_in_flight(w->a.t), 4);
	kvp_remoting_count_refs(w->a.t, refs);
	for (uint32_t i = 0; i < CHAIN; i++)
		assert_int_equal(refs[blocks[i]], i < 4);
	/* offered twice, sent once */
	assert_false(kvp_remoting_offer(w->a.t, blocks[0], KVP_REMOTE_WHY_CREATED));
	settle(&w->a, CHAIN);
	kvp_remoting_stats(w->a.t, &st, 0);
	assert_int_equal(st.offered, CHAIN);
	assert_int_equal(st.backlog_drops, 0);
	for (uint32_t i = 0; i < CHAIN; i++)
		assert_int_equal(kvp_pool_block(w->a.pool, blocks[i])->refcount, 1); /* ours */

	/* host B fetches the chain back into its own blocks */
	host_up(&w->b, w->rf.url_unix, "all", 4);
	bb = kvp_pool_geom(w->b.pool)->block_bytes;
	for (uint32_t i = 0; i < CHAIN; i++)
		assert_int_equal(kvp_pool_alloc(w->b.pool, KVP_NODE_ANY, &dest[i]), 0);
	assert_int_equal(kvp_remoting_fetch(w->b.t, &w->key, w->key.seed, w->tokens, dest, CHAIN, 0,
					    7),
			 0);
	for (int i = 0; i < 500 && !w->b.n_done; i++) {
		kvp_remote_wait(w->b.r, 20);
		kvp_remoting_poll(w->b.t);
	}
	assert_int_equal(w->b.n_done, 1);
	assert_int_equal(w->b.n_ok, CHAIN);
	for (uint32_t i = 0; i < CHAIN; i++)
		assert_memory_equal(kvp_pool_data(w->b.pool, dest[i]),
				    kvp_pool_data(w->a.pool, blocks[i]), bb);
	host_down(&w->b);
	host_down(&w->a);
}

static void test_backlog_skips_reused(void **state)
{
	struct world *w = *state;
	uint32_t blocks[CHAIN], id;
	struct kvp_remote_stats st;

	/* another salt: other keys than the first test's */
	w->key.ek.salt_len = 1;
	w->key.ek.salt[0] = 'x';
	assert_int_equal(kvp_prefix_key_init(&w->key, &w->key.ek), 0);
	host_up(&w->a, w->rf.url_unix, "all", 2);
	make_chain(&w->a, w, blocks, 4);
	for (uint32_t i = 0; i < 4; i++)
		kvp_remoting_offer(w->a.t, blocks[i], KVP_REMOTE_WHY_CREATED);
	/* block 3 waits in the backlog: evicted and handed out again meanwhile */
	assert_int_equal(kvp_pool_unref(w->a.pool, blocks[3]), 0);
	assert_int_equal(kvp_pool_evict_block(w->a.pool, blocks[3]), 0);
	assert_int_equal(kvp_pool_alloc(w->a.pool, KVP_NODE_ANY, &id), 0);
	settle(&w->a, 3);
	usleep(100000);
	kvp_remoting_poll(w->a.t);
	kvp_remote_stats(w->a.r, 0, &st);
	assert_int_equal(st.publishes, 3);
	kvp_pool_unref(w->a.pool, id);
	host_down(&w->a);
}

static void test_selective(void **state)
{
	struct world *w = *state;
	uint32_t blocks[SEL_CHAIN];
	struct kvp_remote_stats st;
	struct kvp_remoting_stats rs;
	uint32_t queued;

	w->key.ek.salt[0] = 'y';
	assert_int_equal(kvp_prefix_key_init(&w->key, &w->key.ek), 0);
	host_up(&w->a, w->rf.url_unix, "selective", 8);
	make_chain(&w->a, w, blocks, SEL_CHAIN);
	/* created: not this mode's; reused: sent */
	assert_false(kvp_remoting_offer(w->a.t, blocks[0], KVP_REMOTE_WHY_CREATED));
	assert_true(kvp_remoting_offer(w->a.t, blocks[0], KVP_REMOTE_WHY_REUSED));
	settle(&w->a, 1);
	/* 40 of 64 blocks cached and idle (62% used > 50%): the coldest leaves are published
	 * before they go; pinned meanwhile, so they are not available */
	for (uint32_t i = 0; i < SEL_CHAIN; i++)
		kvp_pool_unref(w->a.pool, blocks[i]);
	queued = kvp_remoting_offload(w->a.t, NB);
	assert_true(queued >= 1);
	assert_true(kvp_remoting_pinned_idle(w->a.t) >= queued);
	for (int i = 0; i < 200 && kvp_remoting_in_flight(w->a.t); i++) {
		kvp_remote_wait(w->a.r, 20);
		kvp_remoting_poll(w->a.t);
		kvp_remoting_offload(w->a.t, NB);
	}
	kvp_remoting_stats(w->a.t, &rs, 0);
	assert_true(rs.evict_offers >= 1);
	assert_int_equal(kvp_remoting_pinned_idle(w->a.t), 0);
	kvp_remote_stats(w->a.r, 0, &st);
	assert_int_equal(st.publishes, 1 + rs.evict_offers);
	/* down to the low watermark (25% of 64: 48 free), the published ones evicted */
	{
		struct kvp_pool_stats ps;

		kvp_pool_stats(w->a.pool, &ps);
		assert_true(ps.arena[0].free >= 48);
	}
	host_down(&w->a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_backlog_and_fetch),
		cmocka_unit_test(test_backlog_skips_reused),
		cmocka_unit_test(test_selective),
	};

	kvp_remote_tune_malloc();
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, setup, teardown);
}
