/* SPDX-License-Identifier: MIT */
/*
 * test_numa.c - NUMA topology from hwloc (synthetic 2- and 4-node machines and this
 * one), the arena split, and binding being a no-op where there is nothing to bind.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <cmocka.h>

#include "shm/numa.h"

#define TOPO_2 "pack:2 numa:1 core:2 pu:1"
#define TOPO_4 "pack:4 numa:1 core:1 pu:2"

static void test_split_equal_contiguous(void **state)
{
	/* 10 ids over 4 arenas: 3,3,2,2, contiguous, in order, covering every id once */
	struct kvp_arena_range r[4];

	assert_int_equal(kvp_numa_split(10, 4, r), 0);
	assert_int_equal(r[0].first, 0);
	assert_int_equal(r[0].count, 3);
	assert_int_equal(r[1].first, 3);
	assert_int_equal(r[1].count, 3);
	assert_int_equal(r[2].first, 6);
	assert_int_equal(r[2].count, 2);
	assert_int_equal(r[3].first, 8);
	assert_int_equal(r[3].count, 2);
	/* fewer blocks than arenas: empty arenas at the end, still covering */
	assert_int_equal(kvp_numa_split(1, 4, r), 0);
	assert_int_equal(r[0].count, 1);
	assert_int_equal(r[3].count, 0);
	assert_int_equal(r[3].first, 1);
	assert_int_equal(kvp_numa_split(10, 0, r), -EINVAL);
	assert_int_equal(kvp_numa_split(10, KVP_MAX_ARENAS + 1, r), -EINVAL);
}

static void test_synthetic_two_nodes(void **state)
{
	/* two packages of one node each: 2 nodes, CPUs 0-1 on node 0, 2-3 on node 1 */
	struct kvp_numa *n;
	char buf[8192] __attribute__((aligned(4096)));

	assert_int_equal(kvp_numa_open(&n, TOPO_2), 0);
	assert_int_equal(kvp_numa_n_nodes(n), 2);
	assert_int_not_equal(kvp_numa_os_index(n, 0), kvp_numa_os_index(n, 1));
	assert_int_equal(kvp_numa_node_of_cpu(n, 0), 0);
	assert_int_equal(kvp_numa_node_of_cpu(n, 1), 0);
	assert_int_equal(kvp_numa_node_of_cpu(n, 2), 1);
	assert_int_equal(kvp_numa_node_of_cpu(n, 3), 1);
	assert_int_equal(kvp_numa_node_of_cpu(n, 4), -ENOENT);
	/* a synthetic machine is not this one: binding is skipped, and says so */
	assert_int_equal(kvp_numa_binds(n), 0);
	assert_int_equal(kvp_numa_bind(n, 1, buf, 4096), 0);
	assert_int_equal(kvp_numa_bind(n, 2, buf, 4096), -EINVAL);
	kvp_numa_close(n);
}

static void test_synthetic_four_nodes(void **state)
{
	/* four nodes, each with two PUs */
	struct kvp_numa *n;

	assert_int_equal(kvp_numa_open(&n, TOPO_4), 0);
	assert_int_equal(kvp_numa_n_nodes(n), 4);
	for (unsigned int cpu = 0; cpu < 8; cpu++)
		assert_int_equal(kvp_numa_node_of_cpu(n, cpu), (int)cpu / 2);
	for (uint32_t i = 0; i < 4; i++)
		for (uint32_t j = i + 1; j < 4; j++)
			assert_int_not_equal(kvp_numa_os_index(n, i), kvp_numa_os_index(n, j));
	kvp_numa_close(n);
}

static void test_bad_synthetic_string(void **state)
{
	/* a malformed description is an error, not this machine's topology */
	struct kvp_numa *n = NULL;

	assert_int_equal(kvp_numa_open(&n, "frobnicate:3"), -EINVAL);
	assert_null(n);
}

static void test_this_machine(void **state)
{
	/* the real topology has at least one node; binding a page range to node 0 works */
	struct kvp_numa *n;
	void *p;

	assert_int_equal(kvp_numa_open(&n, NULL), 0);
	assert_true(kvp_numa_n_nodes(n) >= 1);
	assert_true(kvp_numa_node_of_cpu(n, 0) >= 0);
	p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_ptr_not_equal(p, MAP_FAILED);
	assert_int_equal(kvp_numa_bind(n, 0, p, 1 << 20), 0);
	assert_int_equal(kvp_numa_bind(n, 0, (char *)p + 1, 4096), -EINVAL);
	munmap(p, 1 << 20);
	kvp_numa_close(n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_split_equal_contiguous),
		cmocka_unit_test(test_synthetic_two_nodes),
		cmocka_unit_test(test_synthetic_four_nodes),
		cmocka_unit_test(test_bad_synthetic_string),
		cmocka_unit_test(test_this_machine),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
