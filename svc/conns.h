/* SPDX-License-Identifier: MIT */
/*
 * conns.h - the connections that said HELLO, as svc/ knows them: peer, client name,
 * trust domain, requests in flight and per-connection counters for the status report.
 *
 * Which request ids are in flight, and whether each was cancelled already, is ipc/'s
 * request set (ipc/conn.h); this registry only counts them, so svc/ knows when a closed
 * connection still has requests in the engine.
 * Thread: the loop thread only.
 */
#ifndef KVP_SVC_CONNS_H
#define KVP_SVC_CONNS_H

#include <stdint.h>

#include "ipc/server.h"

#define KVP_CONNS_BUCKETS 256u

/**
 * struct kvp_conn_rec - one connection
 * @next:      hash chain
 * @id:        ipc/'s handle
 * @peer:      SO_PEERCRED, from ipc/
 * @client:    the name its HELLO gave (sanitized by ipc/)
 * @domain:    its trust domain (svc/domain.h)
 * @in_flight: requests the engine accepted and has not ended
 * @requests, @generated_tokens, @cached_tokens: totals of its ended and accepted requests
 */
struct kvp_conn_rec {
	struct kvp_conn_rec *next;
	kvp_conn_id id;
	struct kvp_peer peer;
	char client[KVP_CLIENT_NAME_MAX + 1];
	uint32_t domain;
	uint32_t in_flight;
	uint64_t requests;
	uint64_t generated_tokens;
	uint64_t cached_tokens;
};

/* struct kvp_conns - the registry: a hash of records by id, and their count */
struct kvp_conns {
	struct kvp_conn_rec *buckets[KVP_CONNS_BUCKETS];
	uint64_t n;
};

#define KVP_CONNS_INIT \
	{ \
		.n = 0 \
	}

/* Free every record; the registry is then empty (and may be used again). */
void kvp_conns_deinit(struct kvp_conns *t);

/**
 * kvp_conns_add() - record connection @id
 * @out:  out; the new record, owned by the registry (borrowed by the caller)
 * Return: 0, -EEXIST when @id is recorded already, or -ENOMEM.
 */
int kvp_conns_add(struct kvp_conns *t, struct kvp_conn_rec **out, kvp_conn_id id,
		  const struct kvp_peer *peer, const char *client, uint32_t domain);

/* The record of @id, or NULL. */
struct kvp_conn_rec *kvp_conns_find(const struct kvp_conns *t, kvp_conn_id id);

/* Every record of domain @from now belongs to domain @to (svc/reclaim.c moved it). */
void kvp_conns_move_domain(struct kvp_conns *t, uint32_t from, uint32_t to);

/* Forget @id (a no-op when unknown). */
void kvp_conns_drop(struct kvp_conns *t, kvp_conn_id id);

/* Iteration in no particular order: first, then next until NULL; no add or drop meanwhile. */
const struct kvp_conn_rec *kvp_conns_first(const struct kvp_conns *t);
const struct kvp_conn_rec *kvp_conns_next(const struct kvp_conns *t, const struct kvp_conn_rec *c);

#endif /* KVP_SVC_CONNS_H */
