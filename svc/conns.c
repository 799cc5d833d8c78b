/* SPDX-License-Identifier: MIT */
/*
 * conns.c - the registry of connections that said HELLO (see conns.h).
 *
 * Invariant: n is the number of records, each in the bucket of its id exactly once.
 * Thread: the loop thread only.
 */
#include "svc/conns.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* Fibonacci hashing: an id is generation << 32 | slot index; the multiply mixes both. */
static uint32_t bucket_of(kvp_conn_id id)
{
	return (uint32_t)((id * 0x9e3779b97f4a7c15ull) >> 56) % KVP_CONNS_BUCKETS;
}

void kvp_conns_deinit(struct kvp_conns *t)
{
	for (uint32_t b = 0; b < KVP_CONNS_BUCKETS; b++) {
		struct kvp_conn_rec *c;

		while ((c = t->buckets[b])) {
			t->buckets[b] = c->next;
			free(c);
		}
	}
	t->n = 0;
}

struct kvp_conn_rec *kvp_conns_find(const struct kvp_conns *t, kvp_conn_id id)
{
	struct kvp_conn_rec *c;

	for (c = t->buckets[bucket_of(id)]; c; c = c->next)
		if (c->id == id)
			return c;
	return NULL;
}

int kvp_conns_add(struct kvp_conns *t, struct kvp_conn_rec **out, kvp_conn_id id,
		  const struct kvp_peer *peer, const char *client, uint32_t domain)
{
	struct kvp_conn_rec *c;
	uint32_t b = bucket_of(id);

	if (kvp_conns_find(t, id))
		return -EEXIST;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->id = id;
	c->peer = *peer;
	snprintf(c->client, sizeof(c->client), "%s", client);
	c->domain = domain;
	c->next = t->buckets[b];
	t->buckets[b] = c;
	t->n++;
	*out = c;
	return 0;
}

void kvp_conns_move_domain(struct kvp_conns *t, uint32_t from, uint32_t to)
{
	for (uint32_t b = 0; b < KVP_CONNS_BUCKETS; b++)
		for (struct kvp_conn_rec *c = t->buckets[b]; c; c = c->next)
			if (c->domain == from)
				c->domain = to;
}

void kvp_conns_drop(struct kvp_conns *t, kvp_conn_id id)
{
	struct kvp_conn_rec **pp = &t->buckets[bucket_of(id)];

	while (*pp) {
		struct kvp_conn_rec *c = *pp;

		if (c->id == id) {
			*pp = c->next;
			free(c);
			t->n--;
			return;
		}
		pp = &c->next;
	}
}

/* The first record in bucket @b or after it. */
static const struct kvp_conn_rec *from_bucket(const struct kvp_conns *t, uint32_t b)
{
	for (; b < KVP_CONNS_BUCKETS; b++)
		if (t->buckets[b])
			return t->buckets[b];
	return NULL;
}

const struct kvp_conn_rec *kvp_conns_first(const struct kvp_conns *t)
{
	return from_bucket(t, 0);
}

const struct kvp_conn_rec *kvp_conns_next(const struct kvp_conns *t, const struct kvp_conn_rec *c)
{
	return c->next ? c->next : from_bucket(t, bucket_of(c->id) + 1);
}
