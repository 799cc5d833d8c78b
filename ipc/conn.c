/* SPDX-License-Identifier: MIT */
/*
 * conn.c - connection buffers: input reassembly, the bounded output ring, the set of
 * requests in flight.
 *
 * Invariants: out.used <= out.cap and out.inflight <= out.used (see struct kvp_outq);
 * in_len <= in_cap <= the reserve bound given by the server (max frame + one receive
 * buffer); n_reqs <= the server's max_reqs_per_conn.
 * Thread: the loop thread only.
 */
#include "ipc/conn.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Free the buffers and close the fds of a slot, keeping @gen, @idx and @next_free. */
void kvp_conn_reset(struct kvp_conn *c)
{
	for (uint32_t i = 0; i < c->n_pass_fds; i++)
		close(c->pass_fds[i]);
	free(c->in);
	free(c->out.buf);
	free(c->reqs);
	c->fd = -1;
	c->kind = KVP_CONN_REQUEST;
	c->state = KVP_CONN_FREE;
	c->recv_armed = false;
	c->helloed = false;
	c->closed_sent = false;
	c->peer = (struct kvp_peer){ 0 };
	c->n_vocab = 0;
	c->refusals = 0;
	c->in = NULL;
	c->in_len = c->in_cap = 0;
	c->out = (struct kvp_outq){ 0 };
	c->reqs = NULL;
	c->n_reqs = 0;
	c->n_pass_fds = 0;
	c->n_sent_fds = 0;
}

/*
 * kvp_conn_in_reserve() - make room for @n more input bytes, never beyond @max in all
 * Return: 0, -E2BIG past @max, or -ENOMEM.
 */
int kvp_conn_in_reserve(struct kvp_conn *c, uint32_t n, uint32_t max)
{
	uint32_t want, cap;
	uint8_t *nb;

	if (n > max || c->in_len > max - n)
		return -E2BIG;
	want = c->in_len + n;
	if (want <= c->in_cap)
		return 0;
	cap = c->in_cap ? c->in_cap : 4096;
	while (cap < want)
		cap = cap > max / 2 ? max : cap * 2;
	nb = realloc(c->in, cap);
	if (!nb)
		return -ENOMEM;
	c->in = nb;
	c->in_cap = cap;
	return 0;
}

/*
 * kvp_outq_append() - append @n bytes, all or nothing
 * Return: 0, -ENOBUFS when they do not fit in what is left of @cap, or -ENOMEM.
 */
int kvp_outq_append(struct kvp_outq *q, const void *p, uint32_t n)
{
	uint32_t tail, first;

	if (n > q->cap - q->used)
		return -ENOBUFS;
	if (!q->buf) {
		q->buf = malloc(q->cap);
		if (!q->buf)
			return -ENOMEM;
	}
	tail = (uint32_t)(((uint64_t)q->head + q->used) % q->cap);
	first = q->cap - tail < n ? q->cap - tail : n;
	memcpy(q->buf + tail, p, first);
	memcpy(q->buf, (const uint8_t *)p + first, n - first);
	q->used += n;
	return 0;
}

/* The queued bytes as up to two iovecs (the ring may wrap).  Return: how many. */
unsigned int kvp_outq_iov(const struct kvp_outq *q, struct iovec iov[2])
{
	uint32_t first;

	if (!q->used)
		return 0;
	first = q->cap - q->head < q->used ? q->cap - q->head : q->used;
	iov[0] = (struct iovec){ .iov_base = q->buf + q->head, .iov_len = first };
	if (first == q->used)
		return 1;
	iov[1] = (struct iovec){ .iov_base = q->buf, .iov_len = q->used - first };
	return 2;
}

/* Drop @n sent bytes from the front (n <= used). */
void kvp_outq_consume(struct kvp_outq *q, uint32_t n)
{
	q->head = (uint32_t)(((uint64_t)q->head + n) % q->cap);
	q->used -= n;
	if (!q->used)
		q->head = 0; /* keep the next frames contiguous */
}

/*
 * kvp_conn_req_add() - record @req_id as in flight
 * Return: 0, -EEXIST if it already is, -EBUSY when @max are in flight, -ENOMEM.
 */
int kvp_conn_req_add(struct kvp_conn *c, uint64_t req_id, uint32_t max)
{
	if (kvp_conn_req_has(c, req_id))
		return -EEXIST;
	if (c->n_reqs >= max)
		return -EBUSY;
	if (!c->reqs) {
		c->reqs = calloc(max, sizeof(*c->reqs));
		if (!c->reqs)
			return -ENOMEM;
	}
	c->reqs[c->n_reqs++] = (struct kvp_conn_req){ .id = req_id };
	return 0;
}

/* Linear scan: max_reqs_per_conn is small (tens), and the set is per connection. */
static struct kvp_conn_req *req_find(const struct kvp_conn *c, uint64_t req_id)
{
	for (uint32_t i = 0; i < c->n_reqs; i++)
		if (c->reqs[i].id == req_id)
			return &c->reqs[i];
	return NULL;
}

bool kvp_conn_req_has(const struct kvp_conn *c, uint64_t req_id)
{
	return req_find(c, req_id) != NULL;
}

/* Forget @req_id.  Return: whether it was in flight. */
bool kvp_conn_req_del(struct kvp_conn *c, uint64_t req_id)
{
	struct kvp_conn_req *r = req_find(c, req_id);

	if (!r)
		return false;
	*r = c->reqs[--c->n_reqs];
	return true;
}

/*
 * A CANCEL of @req_id arrived.  Return: true when it is in flight and this is its first
 * CANCEL (pass it on), so svc/'s engine inbox holds at most one cancel per request.
 */
bool kvp_conn_req_cancel(struct kvp_conn *c, uint64_t req_id)
{
	struct kvp_conn_req *r = req_find(c, req_id);

	if (!r || r->cancel_passed)
		return false;
	r->cancel_passed = true;
	return true;
}
