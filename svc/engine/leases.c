/* SPDX-License-Identifier: MIT */
/*
 * leases.c - the engine's lease table (see leases.h).  A list: leases are few per
 * connection (leases.max_per_conn) and each operation is one walk.
 * Thread: the engine thread.
 */
#include "svc/engine/leases.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shm/pool.h"

struct kvp_lease_rec {
	struct kvp_lease_rec *next;
	uint64_t conn;
	uint64_t id;
	uint64_t deadline_ns;
	uint32_t n;
	uint32_t blocks[];
};

int kvp_leases_add(struct kvp_leases *l, uint64_t conn, const uint32_t *blocks, uint32_t n,
		   uint64_t deadline_ns, uint64_t *id)
{
	struct kvp_lease_rec *r = malloc(sizeof(*r) + (size_t)n * sizeof(uint32_t));

	if (!r)
		return -ENOMEM;
	r->conn = conn;
	r->id = ++l->next_id;
	r->deadline_ns = deadline_ns;
	r->n = n;
	memcpy(r->blocks, blocks, (size_t)n * sizeof(uint32_t));
	r->next = l->head;
	l->head = r;
	l->n++;
	l->granted++;
	*id = r->id;
	return 0;
}

uint32_t kvp_leases_count(const struct kvp_leases *l, uint64_t conn)
{
	uint32_t n = 0;

	for (const struct kvp_lease_rec *r = l->head; r; r = r->next)
		n += r->conn == conn;
	return n;
}

void kvp_leases_count_refs(const struct kvp_leases *l, uint32_t *refs)
{
	for (const struct kvp_lease_rec *r = l->head; r; r = r->next)
		for (uint32_t i = 0; i < r->n; i++)
			refs[r->blocks[i]]++;
}

/* Unlink *@pp, give its references back, free it. */
static void drop(struct kvp_leases *l, struct kvp_pool *pool, struct kvp_lease_rec **pp)
{
	struct kvp_lease_rec *r = *pp;

	*pp = r->next;
	for (uint32_t i = 0; i < r->n; i++)
		kvp_pool_unref(pool, r->blocks[i]);
	l->n--;
	free(r);
}

int kvp_leases_release(struct kvp_leases *l, struct kvp_pool *pool, uint64_t conn, uint64_t id)
{
	for (struct kvp_lease_rec **pp = &l->head; *pp; pp = &(*pp)->next) {
		if ((*pp)->id == id && (*pp)->conn == conn) {
			drop(l, pool, pp);
			l->released++;
			return 0;
		}
	}
	return -ENOENT;
}

void kvp_leases_conn_closed(struct kvp_leases *l, struct kvp_pool *pool, uint64_t conn)
{
	for (struct kvp_lease_rec **pp = &l->head; *pp;) {
		if ((*pp)->conn == conn) {
			drop(l, pool, pp);
			l->closed++;
		} else {
			pp = &(*pp)->next;
		}
	}
}

void kvp_leases_expire(struct kvp_leases *l, struct kvp_pool *pool, uint64_t now_ns)
{
	for (struct kvp_lease_rec **pp = &l->head; *pp;) {
		if ((*pp)->deadline_ns <= now_ns) {
			drop(l, pool, pp);
			l->expired++;
		} else {
			pp = &(*pp)->next;
		}
	}
}

void kvp_leases_deinit(struct kvp_leases *l, struct kvp_pool *pool)
{
	while (l->head)
		drop(l, pool, &l->head);
}
