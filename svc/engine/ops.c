/* SPDX-License-Identifier: MIT */
/*
 * ops.c - the engine's operations: the inbox messages as a table of handlers (SUBMIT,
 * CANCEL, CLOSED, CANCEL_ALL, FLUSH_TIER, LEASE, RELEASE, UNPIN, FLUSH_CACHE,
 * WRITEBACK), the answers given at once (UNPIN, FLUSH, LEASE), and the end of a PIN
 * (a GENERATE-like request whose prompt, once computed, is pinned instead of decoded).
 * Thread: the engine thread.
 */
#include "svc/engine/engine_impl.h"

#include <stdlib.h>
#include <string.h>

/*
 * PIN: the prompt is computed and its full blocks published; pin them all, within
 * cache.pin_max.  Ends @q.
 */
void eng_pin_finish(struct kvp_sched *s, struct seq *q)
{
	uint32_t want = q->gen.n_prompt / s->block_tokens, fresh = 0;
	struct kvp_pool_stats ps;

	if (!want || q->n_indexed < want) {
		s->st.cache.pin_refused++;
		eng_seq_end(s, q, want ? KVP_E_INTERNAL : KVP_E_INVALID, true,
			    want ? "pin: the prompt's blocks could not be published" :
				   "pin: the prompt has no full block");
		return;
	}
	kvp_pool_stats(s->cfg.pool, &ps);
	for (uint32_t i = 0; i < want; i++)
		fresh += !kvp_pool_block(s->cfg.pool, q->table[i])->cpin;
	if ((uint64_t)ps.cpin_blocks + fresh > s->pin_max_blocks) {
		s->st.cache.pin_refused++;
		eng_seq_end(s, q, KVP_E_LIMIT, true, "pin: cache.pin_max would be exceeded");
		return;
	}
	for (uint32_t i = 0; i < want; i++)
		kvp_pool_cache_pin(s->cfg.pool, q->table[i]);
	q->cu_blocks = want;
	s->st.cache.pins++;
	eng_seq_end(s, q, KVP_OK, false, NULL);
}

/* Cancel request (@conn, @req_id): every continuation of it. */
static void cancel_req(struct kvp_sched *s, uint64_t conn, uint64_t req_id)
{
	struct seq_list *lists[] = { &s->queue, &s->waiting, &s->active };
	struct seq *q;
	size_t i;

	for (i = 0; i < 3; i++)
		for (q = lists[i]->first; q; q = q->next)
			if (q->conn == conn && q->req_id == req_id && !q->cancelled) {
				q->cancelled = true;
				q->cancel_status = KVP_E_CANCELLED;
			}
}

/* DONE (with cache usage: @blocks) or ERROR for a request the engine answers at once. */
static void answer_now(struct kvp_sched *s, const struct msg *m, uint32_t status, const char *err,
		       uint32_t prompt_tokens, uint32_t blocks)
{
	struct kvp_sched_event e = {
		.token = -1, .conn = m->conn, .req_id = m->req_id, .cont = -1
	};

	if (err) {
		size_t n = strlen(err) < sizeof(e.text) ? strlen(err) : sizeof(e.text);

		e.type = KVP_SCHED_EV_ERROR;
		e.status = status;
		memcpy(e.text, err, n);
		e.text_len = (uint32_t)n;
	} else {
		e.type = KVP_SCHED_EV_DONE;
		e.usage.status = KVP_OK;
		e.usage.prompt_tokens = prompt_tokens;
		e.has_cu = true;
		e.cu.blocks = blocks;
	}
	eng_push_event(s, &e);
}

/*
 * UNPIN: the full blocks of the prompt, found as a lookup finds them (with one token
 * more, so the last full block is covered too), each lose one cache pin - if every one
 * has a pin; else nothing changes and the answer is an ERROR.
 */
static void unpin(struct kvp_sched *s, struct msg *m)
{
	struct kvp_extra_keys ek = s->cfg.base_keys;
	uint32_t want = m->n_tokens / s->block_tokens;
	struct kvp_prefix_key key;
	uint32_t *hits = NULL, *toks = NULL;
	const char *err = NULL;
	int n = 0;

	ek.salt_len = m->salt_len;
	memcpy(ek.salt, m->salt, m->salt_len);
	if (!want) {
		err = "unpin: the prompt has no full block";
	} else if (kvp_prefix_key_init(&key, &ek) < 0 || !(hits = calloc(want, sizeof(*hits))) ||
		   !(toks = calloc((size_t)want * s->block_tokens + 1, sizeof(*toks)))) {
		err = "unpin: out of memory";
	} else {
		memcpy(toks, m->tokens, (size_t)want * s->block_tokens * sizeof(*toks));
		n = kvp_index_lookup(s->cfg.index, &key, toks, want * s->block_tokens + 1, hits,
				     want);
		if (n < 0)
			n = 0;
		for (int i = 0; i < n && !err; i++)
			if (!kvp_pool_block(s->cfg.pool, hits[i])->cpin)
				err = "unpin: that prompt is not pinned";
		if ((uint32_t)n < want)
			err = "unpin: that prompt is not pinned";
		for (int i = 0; i < n && !err; i++)
			kvp_pool_cache_unpin(s->cfg.pool, hits[i]);
		for (int i = 0; i < n; i++)
			kvp_pool_unref(s->cfg.pool, hits[i]);
	}
	if (err)
		s->st.cache.pin_refused++;
	else
		s->st.cache.unpins++;
	answer_now(s, m, err && !strstr(err, "memory") ? KVP_E_INVALID : KVP_E_INTERNAL, err,
		   m->n_tokens, want);
	free(hits);
	free(toks);
}

/* FLUSH: every evictable cached block goes (TTL or not); held and pinned ones stay. */
static void flush_cache(struct kvp_sched *s, struct msg *m)
{
	uint32_t n = kvp_pool_flush(s->cfg.pool);

	s->st.cache.flushes++;
	s->st.cache.flushed_blocks += n;
	answer_now(s, m, KVP_OK, NULL, 0, n);
}

static void mark_all(struct seq_list *l, uint64_t conn, bool any_conn, uint32_t status, bool silent)
{
	struct seq *q;

	for (q = l->first; q; q = q->next) {
		if (!any_conn && q->conn != conn)
			continue;
		if (!q->cancelled || silent) {
			q->cancelled = true;
			q->cancel_status = status;
		}
		if (silent)
			q->silent = true;
	}
}

/* ERROR event for a LEASE (not a sequence). */
static void lease_error(struct kvp_sched *s, const struct kvp_sched_lease_ask *a,
			enum kvp_status status, const char *msg)
{
	struct kvp_sched_event e = { .type = KVP_SCHED_EV_ERROR,
				     .token = -1,
				     .status = status,
				     .conn = a->conn,
				     .req_id = a->req_id };
	size_t n = strlen(msg);

	if (n > sizeof(e.text))
		n = sizeof(e.text);
	memcpy(e.text, msg, n);
	e.text_len = (uint32_t)n;
	s->st.leases_refused++;
	eng_push_event(s, &e);
}

/*
 * MSG_LEASE: the longest cached prefix of every full block of the tokens (one token
 * more is passed to the lookup, which never covers a prompt's last token), its blocks
 * held by a new lease, the answer as an event.
 */
static void do_lease(struct kvp_sched *s, struct msg *m)
{
	const struct kvp_sched_lease_ask *a = &m->lease->ask;
	const struct kvp_segment *seg = kvp_pool_segment(s->cfg.pool);
	const struct kvp_geom *g = kvp_pool_geom(s->cfg.pool);
	struct kvp_extra_keys ek = s->cfg.base_keys;
	struct kvp_sched_event e = { .type = KVP_SCHED_EV_LEASE,
				     .conn = a->conn,
				     .req_id = a->req_id };
	struct kvp_sched_lease *res;
	struct kvp_prefix_key key;
	uint32_t cap = a->n_tokens / s->block_tokens;
	uint32_t *table;
	int n;

	if (kvp_leases_count(&s->leases, a->conn) >= a->max_per_conn) {
		lease_error(s, a, KVP_E_BUSY, "too many leases (leases.max_per_conn)");
		return;
	}
	ek.salt_len = a->salt_len;
	memcpy(ek.salt, a->salt, a->salt_len);
	res = calloc(1, sizeof(*res) + (size_t)cap * sizeof(res->blocks[0]));
	table = calloc(cap ? cap : 1, sizeof(*table));
	if (!res || !table || kvp_prefix_key_init(&key, &ek) < 0) {
		free(res);
		free(table);
		lease_error(s, a, KVP_E_INTERNAL, "lease: out of memory");
		return;
	}
	n = cap ? kvp_index_lookup(s->cfg.index, &key, (const uint32_t *)m->lease->tokens,
				   a->n_tokens + 1, table, cap) :
		  0;
	if (n < 0)
		n = 0;
	if (n > 0 &&
	    kvp_leases_add(&s->leases, a->conn, table, (uint32_t)n,
			   now_ns(s) + (uint64_t)a->ttl_ms * 1000000, &res->hdr.lease_id) < 0) {
		for (int i = 0; i < n; i++)
			kvp_pool_unref(s->cfg.pool, table[i]);
		free(res);
		free(table);
		lease_error(s, a, KVP_E_INTERNAL, "lease: out of memory");
		return;
	}
	res->hdr.n_blocks = (uint32_t)n;
	res->hdr.ttl_ms = n ? a->ttl_ms : 0;
	res->hdr.block_stride = g->block_stride;
	res->hdr.data_offset = seg->data_offset;
	res->hdr.shape = g->shape;
	for (int i = 0; i < n; i++) {
		res->blocks[i].block = table[i];
		res->blocks[i].generation = kvp_pool_block(s->cfg.pool, table[i])->generation;
		res->blocks[i].offset = seg->data_offset + (uint64_t)table[i] * g->block_stride;
	}
	free(table);
	e.lease = res;
	eng_push_event(s, &e);
}

static void on_submit(struct kvp_sched *s, struct msg *m)
{
	struct seq *q = m->seq;

	q->arrival = ++s->arrivals;
	q->step_recv = s->st.steps;
	eng_queue_insert(s, q);
	s->st.req_total++;
}

static void on_cancel(struct kvp_sched *s, struct msg *m)
{
	s->st.cancels_received++;
	cancel_req(s, m->conn, m->req_id);
}

/* The connection is gone: its leases end, its requests end without events. */
static void on_closed(struct kvp_sched *s, struct msg *m)
{
	kvp_leases_conn_closed(&s->leases, s->cfg.pool, m->conn);
	mark_all(&s->queue, m->conn, false, KVP_E_CANCELLED, true);
	mark_all(&s->waiting, m->conn, false, KVP_E_CANCELLED, true);
	mark_all(&s->active, m->conn, false, KVP_E_CANCELLED, true);
}

static void on_cancel_all(struct kvp_sched *s, struct msg *m)
{
	mark_all(&s->queue, 0, true, m->status, false);
	mark_all(&s->waiting, 0, true, m->status, false);
	mark_all(&s->active, 0, true, m->status, false);
}

static void on_flush_tier(struct kvp_sched *s, struct msg *m)
{
	s->flush_tier = true; /* done by the next tier step */
}

static void on_release(struct kvp_sched *s, struct msg *m)
{
	kvp_leases_release(&s->leases, s->cfg.pool, m->conn, m->req_id);
}

static void on_writeback(struct kvp_sched *s, struct msg *m)
{
	s->wb_want = m->serial;
	s->wb_cursor = 0;
}

/* The inbox's messages, one handler each (indexed by enum msg_type). */
static void (*const msg_defs[MSG__COUNT])(struct kvp_sched *s, struct msg *m) = {
	[MSG_SUBMIT] = on_submit,	  [MSG_CANCEL] = on_cancel,
	[MSG_CLOSED] = on_closed,	  [MSG_CANCEL_ALL] = on_cancel_all,
	[MSG_FLUSH_TIER] = on_flush_tier, [MSG_LEASE] = do_lease,
	[MSG_RELEASE] = on_release,	  [MSG_UNPIN] = unpin,
	[MSG_FLUSH_CACHE] = flush_cache,  [MSG_WRITEBACK] = on_writeback,
};

void eng_handle_msg(struct kvp_sched *s, struct msg *m)
{
	if ((unsigned int)m->type < MSG__COUNT && msg_defs[m->type])
		msg_defs[m->type](s, m);
	s->handled = m->serial;
}
