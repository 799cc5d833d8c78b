/* SPDX-License-Identifier: MIT */
/*
 * test_numa.c - NUMA topology from hwloc (synthetic 2- and 4-node machines and this
 * one), the arena split, binding being a no-op on a synthetic topology, and binding
 * really setting the kernel's policy on this machine.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cmocka.h>

#include <linux/mempolicy.h>

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

/* The kernel's policy for the page at @addr: mode, and whether @node is in its mask. */
static int policy_of(void *addr, unsigned int node, int *has_node)
{
	unsigned long mask[16] = { 0 };
	int mode = -1;

	if (syscall(SYS_get_mempolicy, &mode, mask, sizeof(mask) * 8, addr, MPOL_F_ADDR) < 0)
		return -errno;
	*has_node = node < sizeof(mask) * 8 && (mask[node / 64] >> (node % 64) & 1);
	return mode;
}

static void test_this_machine_binds(void **state)
{
	/*
	 * The real topology has at least one node.  With binding on (forced on a one-node
	 * machine), kvp_numa_bind() leaves an MPOL_BIND policy on node 0's kernel node for
	 * exactly the range given, and the page next to it keeps the default policy.
	 */
	struct kvp_numa *n;
	unsigned int os0;
	int has, mode;
	char *p;

	assert_int_equal(kvp_numa_open(&n, NULL), 0);
	assert_true(kvp_numa_n_nodes(n) >= 1);
	assert_true(kvp_numa_node_of_cpu(n, 0) >= 0);
	os0 = kvp_numa_os_index(n, 0);
	p = mmap(NULL, 2 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_ptr_not_equal(p, MAP_FAILED);
	assert_int_equal(kvp_numa_bind(n, 0, p + 1, 4096), -EINVAL);
	assert_int_equal(kvp_numa_bind(n, kvp_numa_n_nodes(n), p, 4096), -EINVAL);

	kvp_numa_debug_force_bind(n, 1);
	assert_int_equal(kvp_numa_binds(n), 1);
	assert_int_equal(kvp_numa_bind(n, 0, p, 1 << 20), 0);
	mode = policy_of(p, os0, &has);
	if (mode == -ENOSYS || mode == -EPERM) {
		munmap(p, 2 << 20);
		kvp_numa_close(n);
		skip(); /* no NUMA policy syscalls here (kernel or seccomp) */
	}
	assert_int_equal(mode, MPOL_BIND);
	assert_true(has);
	mode = policy_of(p + (1 << 20) - 4096, os0, &has);
	assert_int_equal(mode, MPOL_BIND);
	mode = policy_of(p + (1 << 20), os0, &has);
	assert_int_equal(mode, MPOL_DEFAULT);
	/* the page faults in fine under the policy */
	p[0] = 1;
	munmap(p, 2 << 20);
	kvp_numa_close(n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_split_equal_contiguous),
		cmocka_unit_test(test_synthetic_two_nodes),
		cmocka_unit_test(test_synthetic_four_nodes),
		cmocka_unit_test(test_bad_synthetic_string),
		cmocka_unit_test(test_this_machine_binds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
