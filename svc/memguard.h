/* SPDX-License-Identifier: MIT */
/*
 * memguard.h - refuse to start a daemon that cannot fit.  The pool is pre-faulted at
 * start; if it and the model exceed what the machine has free, or the memory cgroup the
 * daemon runs in (cgroup v2 memory.max, v1 memory.limit_in_bytes, the tightest of its
 * ancestors), the OOM killer ends the daemon a second into its start with no message,
 * and systemd restarts it into the same death.  So the sizes are compared first, and a
 * refusal gives the numbers.  daemon.memory_guard = no skips it (swap, overcommit, or a
 * limit the operator knows will be raised).
 *
 * The same holds for every per-uid domain made later, on its uid's first HELLO: its pool
 * is faulted in then, so it must fit what is left (kvp_memguard_check_domain()), or the
 * HELLO is refused BUSY with the figures and the daemon serves on.  daemon.memory_limit
 * adds a budget of the daemon's own, counted the same way as a cgroup's limit.
 * Thread: the main thread at start; the loop thread for a new domain.
 */
#ifndef KVP_SVC_MEMGUARD_H
#define KVP_SVC_MEMGUARD_H

#include <stddef.h>
#include <stdint.h>

/**
 * struct kvp_memguard_facts - what the machine allows now
 * @mem_available: /proc/meminfo MemAvailable, bytes; 0 when unknown
 * @cg_limit:      the tightest memory limit of the daemon's cgroup and its ancestors,
 *                 bytes; UINT64_MAX when none
 * @cg_file:       the file that set it ("memory.max" or "memory.limit_in_bytes")
 * @cg_dir:        the cgroup directory it is in
 * @cg_room:       the least, over the cgroup and its ancestors with a limit, of the limit
 *                 less what is charged there and cannot be reclaimed (usage less the file
 *                 cache, active and inactive); UINT64_MAX when none
 * @budget:        daemon.memory_limit (the caller sets it); UINT64_MAX when none
 */
struct kvp_memguard_facts {
	uint64_t mem_available;
	uint64_t cg_limit;
	const char *cg_file;
	char cg_dir[512];
	uint64_t cg_room;
	uint64_t budget;
};

/*
 * Read the facts for the calling process (@budget: UINT64_MAX).  Never fails: what
 * cannot be read is unknown.
 */
void kvp_memguard_read(struct kvp_memguard_facts *f);

/**
 * kvp_memguard_check() - do @pool_bytes and @model_bytes fit in @f?
 * @pool_bytes:  memory the pool will take outside hugetlb (0 when it gets 2 MiB pages,
 *               which neither MemAvailable nor a memory cgroup count)
 * @model_bytes: the model's resident size (its file size: a lower bound)
 * @model_note:  said after the model's size ("its file", "the demo model, not yet
 *               written")
 * @err:         out; the refusal with the numbers and what to do
 * Return: 0, or -ENOMEM.
 */
int kvp_memguard_check(const struct kvp_memguard_facts *f, uint64_t pool_bytes,
		       uint64_t model_bytes, const char *model_note, char *err, size_t cap);

/**
 * kvp_memguard_check_domain() - may a new domain fault its pool of @pool_bytes in now?
 * @pool_bytes: its pool outside hugetlb (0 when it gets 2 MiB pages)
 * @held:       what the daemon holds by its own count: the model's file and the pools of
 *              the @n_open domains open now (those outside hugetlb)
 *
 * @held + @pool_bytes must fit @f->budget and the cgroup's limit, and @pool_bytes what
 * is left now: MemAvailable and @f->cg_room (the engine's buffers, some MiB, are not
 * counted).
 * @err: out; the refusal with the figures (what the peer is told, and the log)
 * Return: 0, or -ENOMEM.
 */
int kvp_memguard_check_domain(const struct kvp_memguard_facts *f, uint64_t pool_bytes,
			      uint64_t held, uint32_t n_open, char *err, size_t cap);

#endif /* KVP_SVC_MEMGUARD_H */
