/* SPDX-License-Identifier: MIT */
/*
 * requests.c - ipc/'s callbacks and the engine's events, on the loop thread (see
 * requests.h).
 *
 * Invariant: a connection's in_flight counts its requests the engine accepted and has
 * not ended with DONE or ERROR; a closed connection with some tells the engine, which
 * then ends them silently.
 * Thread: the loop thread.
 */
#include "svc/requests.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compute/gen.h"
#include "svc/domain.h"
#include "svc/log.h"
#include "svc/sched.h"
#include "util/time.h"

#define EVENT_BATCH 256u

int kvp_requests_init(struct kvp_requests *q)
{
	memset(q, 0, sizeof(*q));
	q->conns = (struct kvp_conns)KVP_CONNS_INIT;
	kvp_reqlog_init(&q->log);
	q->evbuf = calloc(EVENT_BATCH, sizeof(*q->evbuf));
	if (!q->evbuf)
		goto err;
	q->tok_buf = calloc(EVENT_BATCH, sizeof(*q->tok_buf));
	if (!q->tok_buf)
		goto err_evbuf;
	q->text_buf = malloc((size_t)EVENT_BATCH * KVP_SCHED_EV_TEXT);
	if (!q->text_buf)
		goto err_tok_buf;
	return 0;

err_tok_buf:
	free(q->tok_buf);
err_evbuf:
	free(q->evbuf);
err:
	return -ENOMEM;
}

void kvp_requests_deinit(struct kvp_requests *q)
{
	kvp_conns_deinit(&q->conns);
	kvp_reqlog_deinit(&q->log);
	free(q->text_buf);
	free(q->tok_buf);
	free(q->evbuf);
	q->text_buf = NULL;
	q->tok_buf = NULL;
	q->evbuf = NULL;
}

static int op_hello(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, const char *client,
		    struct kvp_welcome *welcome, int *fds, unsigned int *n_fds)
{
	struct kvp_requests *q = ctx;
	const struct kvp_domain *dom;
	struct kvp_conn_rec *c;
	int idx;

	idx = kvp_domain_of_peer(q->domains, peer->uid, peer->gid);
	kvp_log(LOG_DEBUG,
		"server: connection %#llx: HELLO from pid %ld uid %ld gid %ld, "
		"client \"%s\", domain %d",
		(unsigned long long)conn, (long)peer->pid, (long)peer->uid, (long)peer->gid, client,
		idx);
	if (idx < 0)
		return KVP_E_INVALID;
	/* -EEXIST cannot happen: ipc/ refuses a second HELLO on a connection */
	if (kvp_conns_add(&q->conns, &c, conn, peer, client, (uint32_t)idx) == -ENOMEM)
		return KVP_E_INTERNAL;
	dom = &q->domains->dom[idx];
	*welcome = dom->welcome;
	if (*n_fds >= 1) {
		fds[0] = dom->ro_fd; /* borrowed: the server sends it, never closes it */
		*n_fds = 1;
		welcome->n_fds = 1;
	} else {
		*n_fds = 0;
	}
	return KVP_OK;
}

/* The wire status of a kvp_sched_submit() failure. */
static int submit_status(int r)
{
	switch (r) {
	case -EAGAIN:
		return KVP_E_BUSY;
	case -ENOSPC:
		return KVP_E_NOSPACE; /* prompt + max_new_tokens beyond the whole pool */
	case -ESHUTDOWN:
		return KVP_E_SHUTDOWN;
	case -EINVAL:
		return KVP_E_INVALID;
	default:
		return KVP_E_INTERNAL;
	}
}

/* A text prompt as ids in @r: KVP_OK, KVP_E_LIMIT, KVP_E_INVALID (no ids), KVP_E_INTERNAL. */
static int tokenize_prompt(struct kvp_requests *q, const char *text, uint32_t len,
			   struct kvp_sched_req *r)
{
	int n;

	n = kvp_gen_tokenize(&r->tokens, &r->n_tokens, q->tok, text, len, q->max_prompt_tokens);
	if (n == -E2BIG)
		return KVP_E_LIMIT;
	if (n < 0)
		return KVP_E_INTERNAL;
	return r->n_tokens ? KVP_OK : KVP_E_INVALID;
}

static int op_generate(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, uint64_t req_id,
		       const struct kvp_generate *g, const int32_t *tokens, const char *text)
{
	struct kvp_requests *q = ctx;
	struct kvp_sched_req r = { .conn = conn, .req_id = req_id, .t_recv_ns = kvp_now_ns() };
	struct kvp_conn_rec *c = kvp_conns_find(&q->conns, conn);
	int st;

	(void)peer;
	if (!c)
		return KVP_E_INTERNAL; /* ipc/ only passes GENERATE after a HELLO we took */
	/* ipc/ keeps at most max_reqs_per_conn ids, each once, in flight */
	assert(c->in_flight < q->max_reqs_per_conn);

	if (g->flags & KVP_GEN_TEXT) {
		st = tokenize_prompt(q, text, g->text_bytes, &r);
		if (st != KVP_OK)
			goto refuse;
	} else {
		r.tokens = malloc((size_t)g->n_tokens * sizeof(int32_t));
		if (!r.tokens) {
			st = KVP_E_INTERNAL;
			goto refuse;
		}
		memcpy(r.tokens, tokens, (size_t)g->n_tokens * sizeof(int32_t));
		r.n_tokens = g->n_tokens;
	}
	r.max_new = g->max_new_tokens;
	r.no_cache = g->flags & KVP_GEN_NO_CACHE;
	r.sample = (struct kvp_sample_params){
		.temperature = g->temperature, .top_k = g->top_k, .top_p = g->top_p, .seed = g->seed
	};
	r.salt_len = g->salt_len;
	memcpy(r.salt, g->salt, g->salt_len);
	st = kvp_sched_submit(q->sched, &r);
	if (st == 0) {
		kvp_reqlog_start(&q->log, conn, req_id, r.t_recv_ns);
		c->in_flight++;
		c->requests++;
		q->domains->dom[c->domain].requests++;
		return KVP_OK;
	}
	st = submit_status(st);
refuse:
	free(r.tokens);
	q->rejected++;
	kvp_reqlog_end(&q->log, conn, req_id, &(struct kvp_reqlog_who){ c->client, c->peer.uid },
		       (enum kvp_status)st, NULL, kvp_now_ns());
	return st;
}

static void op_cancel(void *ctx, kvp_conn_id conn, uint64_t req_id)
{
	struct kvp_requests *q = ctx;

	/* in flight, and its first CANCEL: ipc/ checked both */
	kvp_sched_cancel(q->sched, conn, req_id);
}

static void op_closed(void *ctx, kvp_conn_id conn)
{
	struct kvp_requests *q = ctx;
	struct kvp_conn_rec *c = kvp_conns_find(&q->conns, conn);

	if (!c)
		return;
	if (c->in_flight) {
		kvp_sched_conn_closed(q->sched, conn);
		kvp_reqlog_conn_closed(&q->log, conn,
				       &(struct kvp_reqlog_who){ c->client, c->peer.uid },
				       kvp_now_ns());
	}
	kvp_conns_drop(&q->conns, conn);
}

static int op_status(void *ctx, enum kvp_status_fmt fmt, char *buf, size_t cap)
{
	struct kvp_requests *q = ctx;

	return q->report(q->report_arg, fmt, buf, cap);
}

void kvp_requests_ops(struct kvp_requests *q, struct kvp_server_ops *ops)
{
	*ops = (struct kvp_server_ops){
		.ctx = q,
		.hello = op_hello,
		.generate = op_generate,
		.cancel = op_cancel,
		.closed = op_closed,
		.status = op_status,
	};
}

/* A request ended (DONE or ERROR sent): its connection has one fewer in flight. */
static void ended(struct kvp_conn_rec *c)
{
	assert(c->in_flight > 0);
	c->in_flight--;
}

/*
 * Consecutive TOKEN events of one request from @i on, as one frame.  -ENOTCONN from the
 * send means the client is gone; its closed callback cleans up.  Return: the index after
 * them.
 */
static unsigned int send_tokens(struct kvp_requests *q, unsigned int i, unsigned int n, bool known)
{
	const struct kvp_sched_event *e = &q->evbuf[i];
	uint32_t n_tok = 0;
	uint32_t n_text = 0;
	unsigned int j = i;

	while (j < n && q->evbuf[j].type == KVP_SCHED_EV_TOKEN && q->evbuf[j].conn == e->conn &&
	       q->evbuf[j].req_id == e->req_id && n_tok < EVENT_BATCH) {
		if (q->evbuf[j].token >= 0)
			q->tok_buf[n_tok++] = q->evbuf[j].token;
		memcpy(q->text_buf + n_text, q->evbuf[j].text, q->evbuf[j].text_len);
		n_text += q->evbuf[j].text_len;
		j++;
	}
	if (known)
		kvp_server_send_tokens(q->srv, e->conn, e->req_id, q->tok_buf, n_tok, q->text_buf,
				       n_text);
	return j;
}

void kvp_requests_on_events(void *arg)
{
	struct kvp_requests *q = arg;
	unsigned int n;

	while ((n = kvp_sched_poll_events(q->sched, q->evbuf, EVENT_BATCH)) > 0) {
		unsigned int i = 0;

		while (i < n) {
			const struct kvp_sched_event *e = &q->evbuf[i];
			struct kvp_conn_rec *c = kvp_conns_find(&q->conns, e->conn);

			if (e->type == KVP_SCHED_EV_TOKEN) {
				i = send_tokens(q, i, n, c != NULL);
				continue;
			}
			/*
			 * @c is updated before the send: a send that overflows a slow client's
			 * output queue closes the connection, and the closed callback frees @c
			 */
			if (c && e->type == KVP_SCHED_EV_DONE) {
				ended(c);
				c->generated_tokens += e->usage.generated_tokens;
				c->cached_tokens += e->usage.cached_tokens;
				kvp_reqlog_end(&q->log, e->conn, e->req_id,
					       &(struct kvp_reqlog_who){ c->client, c->peer.uid },
					       KVP_OK, &e->usage, kvp_now_ns());
				kvp_server_send_done(q->srv, e->conn, e->req_id, &e->usage);
			} else if (c && e->type == KVP_SCHED_EV_ERROR) {
				char msg[KVP_SCHED_EV_TEXT + 1];

				memcpy(msg, e->text, e->text_len);
				msg[e->text_len] = '\0';
				ended(c);
				kvp_reqlog_end(&q->log, e->conn, e->req_id,
					       &(struct kvp_reqlog_who){ c->client, c->peer.uid },
					       (enum kvp_status)e->status, NULL, kvp_now_ns());
				kvp_server_send_error(q->srv, e->conn, e->req_id,
						      (enum kvp_status)e->status, msg);
			}
			i++;
		}
	}
}
