/* SPDX-License-Identifier: MIT */
/*
 * numa.h - the machine's NUMA nodes (from hwloc) and how a pool is split over them.
 *
 * A pool is one segment whose block ids are cut into contiguous arenas, one per NUMA
 * node, each arena's pages bound to its node.  The split is pure arithmetic
 * (kvp_numa_split()), and binding is a separate step (kvp_numa_bind()) that does nothing
 * on a synthetic topology or a single-node machine, so the arena logic is tested with
 * hwloc synthetic topologies on any machine.
 *
 * Node numbers used across kvpool (arena index, "preferred node" of an allocation) are
 * hwloc logical indexes 0 .. n_nodes-1; kvp_numa_os_index() gives the kernel's number.
 *
 * Thread: built once at start; read-only afterwards (any thread may query it).
 */
#ifndef KVP_SHM_NUMA_H
#define KVP_SHM_NUMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Arenas (= NUMA nodes) one pool supports; more nodes are refused with -E2BIG. */
#define KVP_MAX_ARENAS 64

struct kvp_numa;

/* A contiguous range of block ids: [first, first + count). */
struct kvp_arena_range {
	uint32_t first;
	uint32_t count;
};

/**
 * kvp_numa_open() - load the topology
 * @out:       out; free with kvp_numa_close()
 * @synthetic: NULL for this machine, or an hwloc synthetic description such as
 *             "pack:2 numa:1 core:2 pu:1" (tests)
 * Return: 0; -EINVAL for a bad synthetic string; -E2BIG for more than KVP_MAX_ARENAS
 * nodes; -ENOMEM.
 */
int kvp_numa_open(struct kvp_numa **out, const char *synthetic);
void kvp_numa_close(struct kvp_numa *n);

/* NUMA nodes (>= 1; a machine hwloc reports without nodes counts as one). */
uint32_t kvp_numa_n_nodes(const struct kvp_numa *n);

/* Kernel node number of logical node @node (< n_nodes). */
uint32_t kvp_numa_os_index(const struct kvp_numa *n, uint32_t node);

/* Is memory really bound by kvp_numa_bind()?  (This machine, more than one node.) */
bool kvp_numa_binds(const struct kvp_numa *n);

/*
 * Test hook: when @on, kvp_numa_bind() really binds on this machine even with one node,
 * so the mbind path runs in tests on single-node machines.  No effect on a synthetic
 * topology (its nodes are not this machine's).
 */
void kvp_numa_debug_force_bind(struct kvp_numa *n, bool on);

/**
 * kvp_numa_node_of_cpu() - logical node whose CPUs include OS cpu number @cpu
 * For a compute thread: kvp_numa_node_of_cpu(n, sched_getcpu()) is its preferred node.
 * Return: node (>= 0), or -ENOENT.
 */
int kvp_numa_node_of_cpu(const struct kvp_numa *n, unsigned int cpu);

/**
 * kvp_numa_split() - cut @n_blocks ids into @n_arenas contiguous ranges
 *
 * Equal shares in id order, the first n_blocks % n_arenas arenas one block larger
 * (the nodes of one machine are symmetric in practice).  Arenas may be empty when
 * n_blocks < n_arenas.  @out has n_arenas entries.
 * Return: 0, or -EINVAL when n_arenas is 0 or above KVP_MAX_ARENAS.
 */
int kvp_numa_split(uint32_t n_blocks, uint32_t n_arenas, struct kvp_arena_range *out);

/**
 * kvp_numa_bind() - bind [@addr, @addr + @len) to logical node @node (mbind via hwloc)
 *
 * Strict binding (MPOL_BIND): pages of the range come from @node only, so a node out of
 * memory makes the pre-fault fail instead of silently using another node.
 * Call before the range is faulted in.  @addr and @len must be page aligned.  A no-op
 * returning 0 when kvp_numa_binds() is false (synthetic topology, single node).
 * Return: 0, -EINVAL, or -errno from the kernel.
 */
int kvp_numa_bind(const struct kvp_numa *n, uint32_t node, void *addr, size_t len);

#endif /* KVP_SHM_NUMA_H */
