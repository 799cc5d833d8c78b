/* SPDX-License-Identifier: MIT */
/*
 * test_pool.c - the block allocator: exhaustion, free and reuse with generations,
 * reference counts, copy-on-write, the kv view, and NUMA arenas on synthetic 2- and
 * 4-node topologies (spread and fallback when the preferred node is full), and arena
 * memory bound to its node on this machine.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cmocka.h>

#include <linux/mempolicy.h>

#include "shm/pool.h"

/* 1 layer, 1 kv head, head_dim 16, f32, 16 tokens: 2 KiB of K/V, 4 KiB stride */
static const struct kvp_model_shape tiny = {
	.n_layers = 1,
	.n_kv_heads = 1,
	.head_dim = 16,
	.dtype = KVP_DTYPE_F32,
	.block_tokens = 16,
};

static struct kvp_pool *make_pool(uint32_t n_blocks, const struct kvp_numa *numa)
{
	struct kvp_pool_config cfg = { .shape = tiny,
				       .n_blocks = n_blocks,
				       .pages = KVP_PAGES_AUTO,
				       .numa = numa,
				       .name = "kvptest-pool" };
	struct kvp_pool *p = NULL;

	assert_int_equal(kvp_pool_new(&p, &cfg), 0);
	return p;
}

static uint32_t refs(const struct kvp_pool *p, uint32_t id)
{
	return kvp_pool_block(p, id)->refcount;
}

static void test_exhaustion_free_reuse(void **state)
{
	/* n blocks hand out n distinct ids, then -ENOMEM; a freed id comes back, gen+1 */
	struct kvp_pool *p = make_pool(8, NULL);
	struct kvp_pool_stats st;
	uint32_t id[8], again, gen;
	uint8_t seen[8] = { 0 };

	for (int i = 0; i < 8; i++) {
		assert_int_equal(kvp_pool_alloc(p, KVP_NODE_ANY, &id[i]), 0);
		assert_true(id[i] < 8);
		assert_false(seen[id[i]]);
		seen[id[i]] = 1;
		assert_int_equal(refs(p, id[i]), 1);
	}
	assert_int_equal(kvp_pool_alloc(p, KVP_NODE_ANY, &again), -ENOMEM);
	kvp_pool_stats(p, &st);
	assert_int_equal(st.alloc_fails, 1);
	assert_int_equal(st.arena[0].used, 8);
	assert_int_equal(st.arena[0].free, 0);

	gen = kvp_pool_block(p, id[3])->generation;
	assert_int_equal(kvp_pool_unref(p, id[3]), 0);
	assert_int_equal(kvp_pool_alloc(p, KVP_NODE_ANY, &again), 0);
	assert_int_equal(again, id[3]);
	assert_int_equal(kvp_pool_block(p, again)->generation, gen + 1);

	for (int i = 0; i < 8; i++)
		assert_int_equal(kvp_pool_unref(p, id[i]), 0);
	kvp_pool_stats(p, &st);
	assert_int_equal(st.arena[0].free, 8);
	assert_int_equal(st.arena[0].used, 0);
	assert_int_equal(st.allocs, 9);
	kvp_pool_free(p);
}

static void test_refcounts(void **state)
{
	/* a block is free only after its last put; extra puts and gets of free ids fail */
	struct kvp_pool *p = make_pool(4, NULL);
	struct kvp_pool_stats st;
	uint32_t a;

	assert_int_equal(kvp_pool_alloc(p, KVP_NODE_ANY, &a), 0);
	assert_int_equal(kvp_pool_ref(p, a), 0);
	assert_int_equal(refs(p, a), 2);
	assert_int_equal(kvp_pool_unref(p, a), 0);
	kvp_pool_stats(p, &st);
	assert_int_equal(st.arena[0].used, 1);
	assert_int_equal(kvp_pool_unref(p, a), 0);
	kvp_pool_stats(p, &st);
	assert_int_equal(st.arena[0].used, 0);
	assert_int_equal(st.arena[0].free, 4);
	assert_int_equal(kvp_pool_unref(p, a), -EINVAL); /* double put */
	assert_int_equal(kvp_pool_ref(p, a), -EINVAL);	 /* free block */
	assert_int_equal(kvp_pool_ref(p, 4), -EINVAL);	 /* bad id */
	assert_int_equal(kvp_pool_unref(p, KVP_BLOCK_NONE), -EINVAL);
	assert_null(kvp_pool_block(p, 4));
	kvp_pool_free(p);
}

static void test_copy_on_write(void **state)
{
	/* a private block is written in place; a shared one is copied and our ref moves */
	struct kvp_pool *p = make_pool(2, NULL);
	const struct kvp_geom *g = kvp_pool_geom(p);
	uint32_t a, b, c, out;

	assert_int_equal(kvp_pool_alloc(p, KVP_NODE_ANY, &a), 0);
	memset(kvp_pool_data(p, a), 0x5c, g->block_bytes);
	assert_int_equal(kvp_pool_cow(p, a, KVP_NODE_ANY, &out), 0);
	assert_int_equal(out, a);

	assert_int_equal(kvp_pool_ref(p, a), 0); /* another sequence shares it */
	assert_int_equal(kvp_pool_cow(p, a, KVP_NODE_ANY, &b), 1);
	assert_int_not_equal(b, a);
	assert_int_equal(refs(p, a), 1);
	assert_int_equal(refs(p, b), 1);
	assert_memory_equal(kvp_pool_data(p, a), kvp_pool_data(p, b), g->block_bytes);
	kvp_pool_data(p, b)[0] = 0x11;
	assert_int_equal(kvp_pool_data(p, a)[0], 0x5c);

	/* shared and the pool full: -ENOMEM, and the caller still holds its reference */
	assert_int_equal(kvp_pool_ref(p, b), 0);
	assert_int_equal(kvp_pool_cow(p, b, KVP_NODE_ANY, &c), -ENOMEM);
	assert_int_equal(refs(p, b), 2);
	kvp_pool_free(p);
}

static void test_cow_of_cached_block_copies(void **state)
{
	/* refcount 1 but cached: the prefix cache still shares it, so it is copied */
	struct kvp_pool *p = make_pool(2, NULL);
	uint32_t a, b;

	assert_int_equal(kvp_pool_alloc(p, KVP_NODE_ANY, &a), 0);
	assert_int_equal(kvp_pool_mark_cached(p, a, KVP_BLOCK_NONE), 0);
	assert_int_equal(kvp_pool_cow(p, a, KVP_NODE_ANY, &b), 1);
	assert_int_not_equal(a, b);
	assert_int_equal(refs(p, a), 0);
	assert_true(kvp_pool_block(p, a)->cached);
	kvp_pool_free(p);
}

static void test_pin_and_ttl_bookkeeping(void **state)
{
	/*
	 * Pins nest (two pins need two unpins before eviction), a TTL only ever moves later,
	 * and a block freed and handed out again starts with neither.
	 */
	struct kvp_pool *p = make_pool(1, NULL);
	uint32_t a, x;

	assert_int_equal(kvp_pool_alloc(p, KVP_NODE_ANY, &a), 0);
	assert_int_equal(kvp_pool_mark_cached(p, a, KVP_BLOCK_NONE), 0);
	assert_int_equal(kvp_pool_set_ttl(p, a, 500), 0);
	assert_int_equal(kvp_pool_set_ttl(p, a, 100), 0); /* earlier: ignored */
	assert_int_equal(kvp_pool_block(p, a)->ttl_deadline_ns, 500);
	assert_int_equal(kvp_pool_pin(p, a), 0);
	assert_int_equal(kvp_pool_pin(p, a), 0);
	assert_int_equal(kvp_pool_unref(p, a), 0); /* cached, unreferenced, pinned twice */
	assert_int_equal(kvp_pool_alloc(p, KVP_NODE_ANY, &x), -ENOMEM);
	assert_int_equal(kvp_pool_unpin(p, a), 0);
	assert_int_equal(kvp_pool_alloc(p, KVP_NODE_ANY, &x), -ENOMEM);
	assert_int_equal(kvp_pool_unpin(p, a), 0);
	/* TTL 500 ns after boot is long past: evicted now */
	assert_int_equal(kvp_pool_alloc(p, KVP_NODE_ANY, &x), 0);
	assert_int_equal(x, a);
	assert_int_equal(kvp_pool_block(p, x)->pin, 0);
	assert_int_equal(kvp_pool_block(p, x)->ttl_deadline_ns, 0);
	assert_false(kvp_pool_block(p, x)->cached);
	assert_int_equal(kvp_pool_unpin(p, x), -EINVAL);
	assert_int_equal(kvp_pool_unref(p, x), 0);
	assert_int_equal(kvp_pool_pin(p, x), -EINVAL); /* free block */
	assert_int_equal(kvp_pool_set_ttl(p, x, 1), -EINVAL);
	kvp_pool_free(p);
}

static void test_kv_view_and_client_mapping(void **state)
{
	/* compute/'s view and a client's read-only map see a block at the same place */
	struct kvp_pool *p = make_pool(4, NULL);
	const struct kvp_segment *seg = kvp_pool_segment(p);
	struct kvp_kv_view v;
	uint8_t *ro;
	uint32_t id;
	int fd;

	kvp_pool_kv_view(p, &v);
	assert_int_equal(v.n_blocks, 4);
	assert_ptr_equal(v.base, kvp_pool_data(p, 0));
	assert_int_equal(v.geom.block_stride, 4096);
	assert_int_equal(kvp_pool_alloc(p, KVP_NODE_ANY, &id), 0);
	assert_int_equal(kvp_pool_alloc(p, KVP_NODE_ANY, &id), 0);
	assert_ptr_equal(kvp_kv_block(&v, id), kvp_pool_data(p, id));
	memset(kvp_kv_block(&v, id), 0x42, v.geom.block_bytes);

	fd = kvp_segment_reopen_ro(seg);
	assert_true(fd >= 0);
	ro = mmap(NULL, seg->bytes, PROT_READ, MAP_SHARED, fd, 0);
	assert_ptr_not_equal(ro, MAP_FAILED);
	assert_int_equal(kvp_pool_header_check((const void *)ro, seg->bytes, NULL), 0);
	assert_int_equal(ro[seg->data_offset + id * v.geom.block_stride], 0x42);
	assert_int_equal(ro[seg->data_offset + id * v.geom.block_stride + v.geom.block_bytes - 1],
			 0x42);
	munmap(ro, seg->bytes);
	close(fd);
	kvp_pool_free(p);
}

static void test_two_node_arenas_and_fallback(void **state)
{
	/* 2 nodes: ids 0-4 on node 0, 5-9 on node 1; node 1 full falls back to node 0 */
	struct kvp_numa *n;
	struct kvp_pool *p;
	struct kvp_pool_stats st;
	uint32_t id;

	assert_int_equal(kvp_numa_open(&n, "pack:2 numa:1 core:2 pu:1"), 0);
	p = make_pool(10, n);
	assert_int_equal(kvp_pool_n_arenas(p), 2);
	assert_int_equal(kvp_pool_arena(p, 0).first, 0);
	assert_int_equal(kvp_pool_arena(p, 0).count, 5);
	assert_int_equal(kvp_pool_arena(p, 1).first, 5);
	assert_int_equal(kvp_pool_arena(p, 1).count, 5);
	kvp_pool_stats(p, &st);
	assert_int_equal(st.arena[0].node_os_index, kvp_numa_os_index(n, 0));
	assert_int_equal(st.arena[1].node_os_index, kvp_numa_os_index(n, 1));
	assert_int_not_equal(st.arena[0].node_os_index, st.arena[1].node_os_index);

	for (int i = 0; i < 5; i++) {
		assert_int_equal(kvp_pool_alloc(p, 1, &id), 0);
		assert_true(id >= 5 && id < 10);
		assert_int_equal(kvp_pool_block(p, id)->arena, 1);
	}
	assert_int_equal(kvp_pool_alloc(p, 1, &id), 0); /* node 1 full */
	assert_true(id < 5);
	kvp_pool_stats(p, &st);
	assert_int_equal(st.alloc_remote, 1);
	assert_int_equal(st.arena[1].free, 0);
	assert_int_equal(st.arena[0].free, 4);
	assert_int_equal(kvp_pool_alloc(p, 2, &id), -EINVAL); /* no node 2 */
	kvp_pool_free(p);
	kvp_numa_close(n);
}

static void test_four_node_arenas_spread(void **state)
{
	/* 4 nodes, 18 blocks: arenas of 5,5,4,4; node 2 full goes to node 3, then 0 */
	struct kvp_numa *n;
	struct kvp_pool *p;
	uint32_t id, expect_first[4] = { 0, 5, 10, 14 }, expect_count[4] = { 5, 5, 4, 4 };

	assert_int_equal(kvp_numa_open(&n, "pack:4 numa:1 core:1 pu:2"), 0);
	p = make_pool(18, n);
	assert_int_equal(kvp_pool_n_arenas(p), 4);
	for (uint32_t a = 0; a < 4; a++) {
		assert_int_equal(kvp_pool_arena(p, a).first, expect_first[a]);
		assert_int_equal(kvp_pool_arena(p, a).count, expect_count[a]);
		for (uint32_t k = 0; k < expect_count[a]; k++)
			assert_int_equal(kvp_pool_block(p, expect_first[a] + k)->arena, a);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(kvp_pool_alloc(p, 2, &id), 0);
		assert_int_equal(kvp_pool_block(p, id)->arena, 2);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(kvp_pool_alloc(p, 2, &id), 0);
		assert_int_equal(kvp_pool_block(p, id)->arena, 3);
	}
	assert_int_equal(kvp_pool_alloc(p, 2, &id), 0);
	assert_int_equal(kvp_pool_block(p, id)->arena, 0);
	/* a free returns the block to its own arena: node 2 gets it back */
	assert_int_equal(kvp_pool_unref(p, 11), 0);
	assert_int_equal(kvp_pool_alloc(p, 2, &id), 0);
	assert_int_equal(id, 11);
	kvp_pool_free(p);
	kvp_numa_close(n);
}

static void test_arena_memory_bound_on_this_machine(void **state)
{
	/*
	 * On the real topology with binding on (forced when this machine has one node), the
	 * pool binds each arena's pages before pre-faulting them: the first and the last
	 * block carry MPOL_BIND to their arena's kernel node, and the pre-fault succeeded.
	 */
	struct kvp_numa *n;
	struct kvp_pool *p;
	const struct kvp_segment *seg;
	uint32_t last;
	int mode = -1;

	assert_int_equal(kvp_numa_open(&n, NULL), 0);
	kvp_numa_debug_force_bind(n, 1);
	p = make_pool(64, n);
	seg = kvp_pool_segment(p);
	last = kvp_pool_n_blocks(p) - 1;
	for (int i = 0; i < 2; i++) {
		uint32_t id = i ? last : 0;
		uint32_t arena = kvp_pool_block(p, id)->arena;
		unsigned int os = kvp_numa_os_index(n, arena);
		unsigned long mask[16] = { 0 };

		if (syscall(SYS_get_mempolicy, &mode, mask, sizeof(mask) * 8, kvp_pool_data(p, id),
			    MPOL_F_ADDR) < 0) {
			assert_true(errno == ENOSYS || errno == EPERM);
			break; /* no policy syscalls here: nothing to check */
		}
		assert_int_equal(mode, MPOL_BIND);
		assert_true(mask[os / 64] >> (os % 64) & 1);
	}
	/* pre-faulted under the policy and writable through our mapping */
	memset(kvp_pool_data(p, last), 0x3c, seg->geom.block_bytes);
	kvp_pool_free(p);
	kvp_numa_close(n);
	if (mode < 0)
		skip();
}

static void test_bad_config(void **state)
{
	/* zero blocks and invalid shapes are refused before any memory is made */
	struct kvp_pool_config cfg = { .shape = tiny, .n_blocks = 0 };
	struct kvp_pool *p = NULL;

	assert_int_equal(kvp_pool_new(&p, &cfg), -EINVAL);
	cfg.n_blocks = 4;
	cfg.shape.head_dim = 0;
	assert_int_equal(kvp_pool_new(&p, &cfg), -EINVAL);
	assert_null(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exhaustion_free_reuse),
		cmocka_unit_test(test_refcounts),
		cmocka_unit_test(test_copy_on_write),
		cmocka_unit_test(test_cow_of_cached_block_copies),
		cmocka_unit_test(test_pin_and_ttl_bookkeeping),
		cmocka_unit_test(test_kv_view_and_client_mapping),
		cmocka_unit_test(test_two_node_arenas_and_fallback),
		cmocka_unit_test(test_four_node_arenas_spread),
		cmocka_unit_test(test_arena_memory_bound_on_this_machine),
		cmocka_unit_test(test_bad_config),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
