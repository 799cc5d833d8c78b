/* SPDX-License-Identifier: MIT */
/*
 * leases.h - the engine's table of leases: blocks a client reads in place through its
 * read-only mapping (LEASE in docs/protocol.md).  A lease holds one pool reference on
 * each of its blocks, so they are neither evicted nor reused, until RELEASE, the
 * connection's end or its deadline, whichever comes first.
 *
 * Thread: the engine thread of the domain whose pool the blocks are in (svc/engine/engine.c).
 */
#ifndef KVP_ENGINE_LEASES_H
#define KVP_ENGINE_LEASES_H

#include <stdint.h>

struct kvp_pool;
struct kvp_lease_rec;

/**
 * struct kvp_leases - every live lease of one engine, and what happened to leases
 * @head:     the live ones, newest first
 * @n:        how many
 * @next_id:  the last id handed out (ids start at 1 and never repeat)
 * @granted, @released, @expired, @closed: leases made, and ended by RELEASE, by their
 *            deadline, with their connection
 */
struct kvp_leases {
	struct kvp_lease_rec *head;
	uint32_t n;
	uint64_t next_id;
	uint64_t granted;
	uint64_t released;
	uint64_t expired;
	uint64_t closed;
};

/**
 * kvp_leases_add() - record a lease of connection @conn over @blocks
 * @blocks:      @n block ids, one pool reference each, which the lease now owns
 *               (copied; the caller keeps the array)
 * @deadline_ns: when it ends by itself (the engine's clock)
 * @id:          out; its id
 * Return: 0, or -ENOMEM (the references are still the caller's).
 */
int kvp_leases_add(struct kvp_leases *l, uint64_t conn, const uint32_t *blocks, uint32_t n,
		   uint64_t deadline_ns, uint64_t *id);

/* Leases @conn holds now. */
uint32_t kvp_leases_count(const struct kvp_leases *l, uint64_t conn);

/* Add one to @refs[id] for each reference a live lease holds (kvp_sched_check()). */
void kvp_leases_count_refs(const struct kvp_leases *l, uint32_t *refs);

/* End lease @id of @conn: its references back to @pool.  Return: 0, or -ENOENT. */
int kvp_leases_release(struct kvp_leases *l, struct kvp_pool *pool, uint64_t conn, uint64_t id);

/* End every lease of @conn. */
void kvp_leases_conn_closed(struct kvp_leases *l, struct kvp_pool *pool, uint64_t conn);

/* End every lease whose deadline is <= @now_ns. */
void kvp_leases_expire(struct kvp_leases *l, struct kvp_pool *pool, uint64_t now_ns);

/* End them all (the engine stops). */
void kvp_leases_deinit(struct kvp_leases *l, struct kvp_pool *pool);

#endif /* KVP_ENGINE_LEASES_H */
