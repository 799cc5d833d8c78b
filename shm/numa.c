/* SPDX-License-Identifier: MIT */
/*
 * numa.c - NUMA nodes from hwloc, the arena split, and binding arena memory to a node.
 *
 * Invariants: n_nodes >= 1 and <= KVP_MAX_ARENAS; node i is hwloc's logical NUMA node i
 * (or a single pseudo-node 0 covering every CPU when hwloc reports none); binding is
 * only ever attempted on the real machine with more than one node.
 *
 * Thread: built at start, read-only afterwards (hwloc queries are read-only too).
 */
#include "shm/numa.h"

#include <errno.h>
#include <hwloc.h>
#include <stdlib.h>

struct kvp_numa {
	hwloc_topology_t topo;
	uint32_t n_nodes;
	bool thissystem;		  /* the topology is this machine's (not synthetic) */
	bool binds;			  /* thissystem and more than one node (or the test hook) */
	hwloc_obj_t node[KVP_MAX_ARENAS]; /* NULL: the pseudo-node of a node-less topology */
};

int kvp_numa_open(struct kvp_numa **out, const char *synthetic)
{
	struct kvp_numa *n;
	int count, r = -EINVAL;

	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	if (hwloc_topology_init(&n->topo) < 0) {
		r = -ENOMEM;
		goto err_free;
	}
	if (synthetic && hwloc_topology_set_synthetic(n->topo, synthetic) < 0)
		goto err_topology;
	if (hwloc_topology_load(n->topo) < 0)
		goto err_topology;
	count = hwloc_get_nbobjs_by_type(n->topo, HWLOC_OBJ_NUMANODE);
	if (count > KVP_MAX_ARENAS) {
		r = -E2BIG;
		goto err_topology;
	}
	if (count <= 0) {
		n->n_nodes = 1;
	} else {
		n->n_nodes = (uint32_t)count;
		for (int i = 0; i < count; i++)
			n->node[i] = hwloc_get_obj_by_type(n->topo, HWLOC_OBJ_NUMANODE,
							   (unsigned)i);
	}
	n->thissystem = !synthetic && hwloc_topology_is_thissystem(n->topo);
	n->binds = n->thissystem && n->n_nodes > 1;
	*out = n;
	return 0;

err_topology:
	hwloc_topology_destroy(n->topo);
err_free:
	free(n);
	return r;
}

void kvp_numa_close(struct kvp_numa *n)
{
	if (!n)
		return;
	hwloc_topology_destroy(n->topo);
	free(n);
}

uint32_t kvp_numa_n_nodes(const struct kvp_numa *n)
{
	return n->n_nodes;
}

uint32_t kvp_numa_os_index(const struct kvp_numa *n, uint32_t node)
{
	if (node >= n->n_nodes || !n->node[node])
		return 0;
	return n->node[node]->os_index;
}

bool kvp_numa_binds(const struct kvp_numa *n)
{
	return n->binds;
}

void kvp_numa_debug_force_bind(struct kvp_numa *n, bool on)
{
	n->binds = n->thissystem && n->node[0] && (on || n->n_nodes > 1);
}

int kvp_numa_node_of_cpu(const struct kvp_numa *n, unsigned int cpu)
{
	for (uint32_t i = 0; i < n->n_nodes; i++) {
		if (!n->node[i])
			return 0;
		if (hwloc_bitmap_isset(n->node[i]->cpuset, cpu))
			return (int)i;
	}
	return -ENOENT;
}

int kvp_numa_split(uint32_t n_blocks, uint32_t n_arenas, struct kvp_arena_range *out)
{
	uint32_t share, extra, first = 0;

	if (!n_arenas || n_arenas > KVP_MAX_ARENAS)
		return -EINVAL;
	share = n_blocks / n_arenas;
	extra = n_blocks % n_arenas;
	for (uint32_t i = 0; i < n_arenas; i++) {
		out[i].first = first;
		out[i].count = share + (i < extra);
		first += out[i].count;
	}
	return 0;
}

int kvp_numa_bind(const struct kvp_numa *n, uint32_t node, void *addr, size_t len)
{
	if (node >= n->n_nodes || ((uintptr_t)addr | len) % 4096)
		return -EINVAL;
	if (!n->binds || !len)
		return 0;
	/*
	 * Strict: MPOL_BIND.  Without HWLOC_MEMBIND_STRICT hwloc asks Linux only for a
	 * preference (MPOL_PREFERRED_MANY), and an arena whose node is short of memory
	 * would be pre-faulted on another node without a word; bound, pre-fault fails
	 * with -ENOMEM instead, which the daemon reports.
	 */
	if (hwloc_set_area_membind(n->topo, addr, len, n->node[node]->nodeset, HWLOC_MEMBIND_BIND,
				   HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_STRICT) < 0)
		return errno ? -errno : -EIO;
	return 0;
}
