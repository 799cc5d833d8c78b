/* SPDX-License-Identifier: MIT */
/*
 * ops.c - the frame dispatch table of the request socket and its handlers.
 *
 * server.c validates a frame's header and payload length against this table once,
 * then calls the handler, which decodes the payload (ipc/proto.c) and hands it to
 * svc/ through struct kvp_server_ops.  A frame type a client may not send has no
 * handler; the table has one entry per type, checked at build time, and
 * kvp_ops_check_table() verifies at start that no entry was left out.
 *
 * Fault classes (docs/protocol.md): KVP_E_PROTO, KVP_E_VERSION and KVP_E_LIMIT end the
 * connection after an ERROR with req_id 0; KVP_E_INVALID and KVP_E_BUSY refuse one
 * request with an ERROR carrying its req_id and leave the connection open.
 * Thread: the loop thread.
 */
#include "ipc/ops.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/utf8.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/*
 * The HELLO's client name as svc/ gets it: up to the first NUL, printable ASCII only
 * (it goes into log lines and the status JSON, so no control byte or stray UTF-8).
 */
static void client_name(const struct kvp_hello *h, char out[KVP_CLIENT_NAME_MAX + 1])
{
	size_t i;

	static_assert(sizeof(h->client) == KVP_CLIENT_NAME_MAX + 1, "HELLO client name");
	for (i = 0; i < KVP_CLIENT_NAME_MAX && h->client[i]; i++) {
		unsigned char ch = (unsigned char)h->client[i];

		out[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
	}
	out[i] = '\0';
}

static int on_hello(struct kvp_server *srv, struct kvp_conn *c, const struct kvp_frame_hdr *hdr,
		    const uint8_t *payload)
{
	char name[KVP_CLIENT_NAME_MAX + 1];
	struct kvp_welcome w = { 0 };
	int fds[KVP_CONN_PASS_FDS_MAX];
	unsigned int n_fds = KVP_CONN_PASS_FDS_MAX;
	struct kvp_hello h;
	const char *why = "";
	char refusal[384] = "";
	int r;

	if (c->helloed)
		return kvp_srv_fail(srv, c, KVP_E_PROTO, "second HELLO");
	if (hdr->req_id)
		return kvp_srv_fail(srv, c, KVP_E_PROTO, "HELLO req_id must be 0");
	r = kvp_proto_decode_hello(payload, hdr->len_bytes, &h, &why);
	if (r)
		return kvp_srv_fail(srv, c, r, why);

	c->helloed = true; /* from here on svc/ knows the connection: closed is owed */
	client_name(&h, name);
	r = srv->ops.hello(srv->ops.ctx, kvp_srv_conn_id(c), &c->peer, name, &w, fds, &n_fds,
			   refusal, sizeof(refusal));
	if (r != KVP_OK)
		return kvp_srv_fail(
			srv, c, r > 0 && r < KVP_STATUS__COUNT ? r : KVP_E_INTERNAL,
			*refusal ? refusal :
			r == KVP_E_INVALID ?
				   "HELLO refused: your uid and gid are in no trust domain "
				   "of this daemon (domains in kvpoold.conf)" :
			r == KVP_E_BUSY ? "HELLO refused: no trust domain can be opened "
					  "for you now (domains.max); try later" :
					  "HELLO refused");
	if (n_fds > KVP_CONN_PASS_FDS_MAX)
		return kvp_srv_fail(srv, c, KVP_E_INTERNAL, "too many fds for WELCOME");
	if (!(h.flags & KVP_HELLO_WANT_POOL_FD))
		n_fds = 0;
	if (!w.max_new_tokens || w.max_new_tokens > srv->cfg.max_new_tokens)
		w.max_new_tokens = srv->cfg.max_new_tokens;
	if (!w.max_prompt_tokens || w.max_prompt_tokens > srv->cfg.max_prompt_tokens)
		w.max_prompt_tokens = srv->cfg.max_prompt_tokens;
	w.n_fds = n_fds;
	c->n_vocab = w.n_vocab;
	r = kvp_srv_queue_welcome(srv, c, &w, fds, n_fds);
	if (r == -EMFILE || r == -ENFILE) {
		/* the pool fd could not be dup()ed: a passing shortage, as at accept */
		srv->st.conns_refused_fds++;
		return kvp_srv_fail(srv, c, KVP_E_BUSY,
				    "daemon out of file descriptors; try later");
	}
	if (r)
		return kvp_srv_fail(srv, c, KVP_E_INTERNAL, "cannot send WELCOME");
	return 0;
}

/*
 * Check @n ids (in @ids, aligned) against the connection's vocabulary; @what names the
 * ids in the refusal ("prompt").  Return: 0, or the refusal's return (an id is refused).
 */
static int check_ids(struct kvp_server *srv, struct kvp_conn *c, uint64_t req_id,
		     const int32_t *ids, uint32_t n, const char *what)
{
	for (uint32_t i = 0; i < n; i++) {
		char msg[160];

		if (ids[i] >= 0 && (!c->n_vocab || (uint32_t)ids[i] < c->n_vocab))
			continue;
		/* the id, where, and what the model has: enough to find the bug */
		snprintf(msg, sizeof(msg),
			 "token id %d (%s position %u) is outside the vocabulary: n_vocab %u, "
			 "ids 0..%u",
			 ids[i], what, i, c->n_vocab, c->n_vocab ? c->n_vocab - 1 : 0);
		return kvp_srv_refuse(srv, c, req_id, KVP_E_INVALID, msg) ? -ENOTCONN : 1;
	}
	return 0;
}

/*
 * Copy @n ids out of the frame into the aligned srv->ids (lent to svc/ for the call) and
 * check them (check_ids()).  Return: as check_ids().
 */
static int take_ids(struct kvp_server *srv, struct kvp_conn *c, uint64_t req_id, const void *body,
		    uint32_t n, const char *what, const int32_t **ids)
{
	int r;

	/* copied: the payload sits at any offset of the input buffer */
	if (n)
		memcpy(srv->ids, body, (size_t)n * sizeof(int32_t));
	r = check_ids(srv, c, req_id, srv->ids, n, what);
	if (!r)
		*ids = srv->ids;
	return r;
}

/*
 * A GENERATE's prompt ids out of the frame into a buffer of their own, handed over to
 * svc/ (struct kvp_prompt_ids): the one copy between the socket and the engine, with room
 * for the tokens to come (@max_new), so the engine keeps the buffer as the sequence's
 * history.  Return: 0 (*@p filled, its ids ours until the callback takes them), or the
 * refusal's return (nothing kept).
 */
static int move_ids(struct kvp_server *srv, struct kvp_conn *c, uint64_t req_id, const void *body,
		    uint32_t n, uint32_t max_new, struct kvp_prompt_ids *p)
{
	size_t cap = (size_t)n + max_new; /* both within the limits WELCOME announced */
	int r;

	p->ids = malloc(cap * sizeof(int32_t));
	if (!p->ids)
		return kvp_srv_refuse(srv, c, req_id, KVP_E_BUSY,
				      "daemon out of memory: try again") ?
			       -ENOTCONN :
			       1;
	memcpy(p->ids, body, (size_t)n * sizeof(int32_t));
	r = check_ids(srv, c, req_id, p->ids, n, "prompt");
	if (r) {
		free(p->ids);
		p->ids = NULL;
		return r;
	}
	p->n = n;
	p->cap = (uint32_t)cap;
	return 0;
}

/*
 * Take @req_id in flight.  Return: 0, or non-zero when it was refused (duplicate, too
 * many) or the connection failed.
 */
static int take_req(struct kvp_server *srv, struct kvp_conn *c, uint64_t req_id)
{
	int r = kvp_conn_req_add(c, req_id, srv->cfg.max_reqs_per_conn);

	if (r == -EEXIST)
		kvp_srv_refuse(srv, c, req_id, KVP_E_INVALID, "req_id already in flight");
	else if (r == -EBUSY)
		kvp_srv_refuse(srv, c, req_id, KVP_E_BUSY,
			       "too many requests in flight on this connection");
	else if (r)
		/* nothing of the request was kept: refuse it, the connection goes on */
		kvp_srv_refuse(srv, c, req_id, KVP_E_BUSY, "daemon out of memory: try again");
	return r;
}

/* svc/ answered a request in flight with status @r: anything but KVP_OK ends it. */
static int answered(struct kvp_server *srv, struct kvp_conn *c, uint64_t req_id, int r)
{
	if (r != KVP_OK && c->state == KVP_CONN_OPEN && kvp_conn_req_has(c, req_id)) {
		if (r <= 0 || r >= KVP_STATUS__COUNT)
			r = KVP_E_INTERNAL;
		return kvp_srv_reply_error(srv, c, req_id, r, kvp_proto_status_str((uint32_t)r));
	}
	return 0;
}

/* What every request frame checks first.  Return: 0, or the failure's return. */
static int request_ok(struct kvp_server *srv, struct kvp_conn *c, const struct kvp_frame_hdr *hdr)
{
	if (!c->helloed)
		return kvp_srv_fail(srv, c, KVP_E_PROTO, "request before HELLO");
	if (!hdr->req_id)
		return kvp_srv_fail(srv, c, KVP_E_PROTO, "req_id 0 is reserved");
	return 0;
}

/*
 * The prompt of a GENERATE or PIN: UTF-8 text (KVP_GEN_TEXT; ill-formed bytes are refused,
 * not guessed at) copied NUL-terminated into srv->text, or ids checked by take_ids().
 * Return: as take_ids(): 0, > 0 when refused (the connection stays), < 0 when failed.
 */
static int take_prompt(struct kvp_server *srv, struct kvp_conn *c, uint64_t req_id, uint32_t flags,
		       const void *body, uint32_t text_bytes, uint32_t n_tokens,
		       const int32_t **ids, const char **text)
{
	if (!(flags & KVP_GEN_TEXT))
		return take_ids(srv, c, req_id, body, n_tokens, "prompt", ids);
	for (uint32_t i = 0; i < text_bytes;) {
		size_t n = kvp_utf8_char_len((const uint8_t *)body + i, text_bytes - i);
		char msg[96];

		if (n) {
			i += (uint32_t)n;
			continue;
		}
		snprintf(msg, sizeof(msg), "prompt text is not valid UTF-8 (at byte %u)", i);
		return kvp_srv_refuse(srv, c, req_id, KVP_E_INVALID, msg) ? -ENOTCONN : 1;
	}
	memcpy(srv->text, body, text_bytes);
	srv->text[text_bytes] = 0;
	*text = srv->text;
	return 0;
}

/*
 * GENERATE and CHAT: one decoder (it says which faults end the connection: a CHAT's
 * limits are its own, since a conversation grows turn by turn and WELCOME announces no
 * message limit), the prompt's ids (a CHAT's context) and text checked, one callback.
 */
static int on_request(struct kvp_server *srv, struct kvp_conn *c, const struct kvp_frame_hdr *hdr,
		      const uint8_t *payload)
{
	struct kvp_prompt_ids prompt = { 0 };
	struct kvp_gen_req req;
	const int32_t *ids = NULL;
	const char *text = NULL;
	const char *why = "";
	bool conn_fault;
	int r;

	r = request_ok(srv, c, hdr);
	if (r)
		return r;
	/* refusals until the id is taken in flight never touch a request using it already */
	r = kvp_proto_decode_request(hdr->type, payload, hdr->len_bytes, &srv->lim, &req, srv->msgs,
				     &conn_fault, &why);
	if (r)
		return conn_fault ? kvp_srv_fail(srv, c, r, why) :
				    kvp_srv_refuse(srv, c, hdr->req_id, r, why);
	if (req.type == KVP_FRAME_CHAT)
		r = take_ids(srv, c, hdr->req_id, req.ids, req.n_ids, "context", &ids);
	else if (req.flags & KVP_GEN_TEXT)
		r = take_prompt(srv, c, hdr->req_id, req.flags, req.text, req.text_bytes, 0, &ids,
				&text);
	else if ((r = move_ids(srv, c, hdr->req_id, req.ids, req.n_ids, req.max_new_tokens,
			       &prompt)) == 0)
		ids = prompt.ids;
	if (r)
		return r < 0 ? r : 0;
	req.ids = req.n_ids ? ids : NULL; /* aligned, as svc/ gets them */
	req.text = text;
	if (take_req(srv, c, hdr->req_id)) {
		free(prompt.ids);
		return 0;
	}
	r = srv->ops.generate(srv->ops.ctx, kvp_srv_conn_id(c), &c->peer, hdr->req_id, &req,
			      &prompt);
	free(prompt.ids); /* NULL when svc/ took them */
	return answered(srv, c, hdr->req_id, r);
}

/* A request type svc/ did not take: refused, the connection stays. */
static int unsupported(struct kvp_server *srv, struct kvp_conn *c, uint64_t req_id,
		       const char *what)
{
	return kvp_srv_refuse(srv, c, req_id, KVP_E_INVALID, what);
}

static int on_tokenize(struct kvp_server *srv, struct kvp_conn *c, const struct kvp_frame_hdr *hdr,
		       const uint8_t *payload)
{
	struct kvp_tokenize t;
	const char *text, *why = "";
	int r;

	r = request_ok(srv, c, hdr);
	if (r)
		return r;
	r = kvp_proto_decode_tokenize(payload, hdr->len_bytes, &srv->lim, &t, &text, &why);
	if (r == KVP_E_INVALID)
		return kvp_srv_refuse(srv, c, hdr->req_id, r, why);
	if (r)
		return kvp_srv_fail(srv, c, r, why);
	if (!srv->ops.tokenize)
		return unsupported(srv, c, hdr->req_id, "TOKENIZE not supported here");
	memcpy(srv->text, text, t.text_bytes);
	srv->text[t.text_bytes] = 0;
	if (take_req(srv, c, hdr->req_id))
		return 0;
	r = srv->ops.tokenize(srv->ops.ctx, kvp_srv_conn_id(c), hdr->req_id, &t, srv->text);
	return answered(srv, c, hdr->req_id, r);
}

static int on_detokenize(struct kvp_server *srv, struct kvp_conn *c,
			 const struct kvp_frame_hdr *hdr, const uint8_t *payload)
{
	struct kvp_detokenize d;
	const int32_t *ids = NULL;
	const void *body;
	const char *why = "";
	int r;

	r = request_ok(srv, c, hdr);
	if (r)
		return r;
	r = kvp_proto_decode_detokenize(payload, hdr->len_bytes, &srv->lim, &d, &body, &why);
	if (r)
		return kvp_srv_fail(srv, c, r, why);
	if (!srv->ops.detokenize)
		return unsupported(srv, c, hdr->req_id, "DETOKENIZE not supported here");
	r = take_ids(srv, c, hdr->req_id, body, d.n_tokens, "DETOKENIZE", &ids);
	if (r)
		return r < 0 ? r : 0;
	if (take_req(srv, c, hdr->req_id))
		return 0;
	r = srv->ops.detokenize(srv->ops.ctx, kvp_srv_conn_id(c), hdr->req_id, &d, ids);
	return answered(srv, c, hdr->req_id, r);
}

static int on_cancel(struct kvp_server *srv, struct kvp_conn *c, const struct kvp_frame_hdr *hdr,
		     const uint8_t *payload)
{
	if (!c->helloed)
		return kvp_srv_fail(srv, c, KVP_E_PROTO, "CANCEL before HELLO");
	/*
	 * a request that already ended is no error: CANCEL races with DONE by nature; a
	 * repeated CANCEL is dropped too, so svc/ hears of each request's first one only
	 */
	if (kvp_conn_req_cancel(c, hdr->req_id))
		srv->ops.cancel(srv->ops.ctx, kvp_srv_conn_id(c), hdr->req_id);
	return 0;
}

static int on_lease(struct kvp_server *srv, struct kvp_conn *c, const struct kvp_frame_hdr *hdr,
		    const uint8_t *payload)
{
	struct kvp_lease_req l;
	const int32_t *ids = NULL;
	const void *body;
	const char *why = "";
	int r;

	r = request_ok(srv, c, hdr);
	if (r)
		return r;
	r = kvp_proto_decode_lease_req(payload, hdr->len_bytes, &srv->lim, &l, &body, &why);
	if (r == KVP_E_INVALID || r == KVP_E_LIMIT)
		return kvp_srv_refuse(srv, c, hdr->req_id, r, why);
	if (r)
		return kvp_srv_fail(srv, c, r, why);
	if (!srv->ops.lease)
		return unsupported(srv, c, hdr->req_id, "LEASE not supported here");
	r = take_ids(srv, c, hdr->req_id, body, l.n_tokens, "LEASE", &ids);
	if (r)
		return r < 0 ? r : 0;
	if (take_req(srv, c, hdr->req_id))
		return 0;
	r = srv->ops.lease(srv->ops.ctx, kvp_srv_conn_id(c), hdr->req_id, &l, ids);
	return answered(srv, c, hdr->req_id, r);
}

static int on_release(struct kvp_server *srv, struct kvp_conn *c, const struct kvp_frame_hdr *hdr,
		      const uint8_t *payload)
{
	(void)payload;
	if (!c->helloed)
		return kvp_srv_fail(srv, c, KVP_E_PROTO, "RELEASE before HELLO");
	if (srv->ops.release)
		srv->ops.release(srv->ops.ctx, kvp_srv_conn_id(c), hdr->req_id);
	return 0;
}

/* PIN and UNPIN: the prompt as GENERATE's (text UTF-8, ids in the vocabulary). */
static int on_pin(struct kvp_server *srv, struct kvp_conn *c, const struct kvp_frame_hdr *hdr,
		  const uint8_t *payload)
{
	struct kvp_pin pin;
	const void *body;
	const int32_t *ids = NULL;
	const char *text = NULL;
	const char *why = "";
	int r;

	r = request_ok(srv, c, hdr);
	if (r)
		return r;
	r = kvp_proto_decode_pin(payload, hdr->len_bytes, &srv->lim, &pin, &body, &why);
	if (r == KVP_E_INVALID)
		return kvp_srv_refuse(srv, c, hdr->req_id, r, why);
	if (r)
		return kvp_srv_fail(srv, c, r, why);
	if (!srv->ops.pin)
		return unsupported(srv, c, hdr->req_id, "PIN not supported here");
	r = take_prompt(srv, c, hdr->req_id, pin.flags, body, pin.text_bytes, pin.n_tokens, &ids,
			&text);
	if (r)
		return r < 0 ? r : 0;
	if (take_req(srv, c, hdr->req_id))
		return 0;
	r = srv->ops.pin(srv->ops.ctx, kvp_srv_conn_id(c), &c->peer, hdr->req_id, hdr->type, &pin,
			 ids, text);
	return answered(srv, c, hdr->req_id, r);
}

/*
 * FLUSH: no payload (the peer's own domain, as before the name was added) or a domain's
 * name; a malformed name refuses the request, the connection stays.
 */
static int on_flush(struct kvp_server *srv, struct kvp_conn *c, const struct kvp_frame_hdr *hdr,
		    const uint8_t *payload)
{
	char name[KVP_FLUSH_DOMAIN_MAX + 1];
	uint32_t n = hdr->len_bytes;
	int r;

	r = request_ok(srv, c, hdr);
	if (r)
		return r;
	if (!srv->ops.flush)
		return unsupported(srv, c, hdr->req_id, "FLUSH not supported here");
	for (uint32_t i = 0; i < n; i++) {
		if (!isalnum(payload[i]) && payload[i] != '-' && payload[i] != '_')
			return kvp_srv_refuse(srv, c, hdr->req_id, KVP_E_INVALID,
					      "FLUSH: a domain name is letters, digits, '-', '_'");
	}
	memcpy(name, payload, n); /* n <= KVP_FLUSH_DOMAIN_MAX: the table's max_len */
	name[n] = '\0';
	if (take_req(srv, c, hdr->req_id))
		return 0;
	r = srv->ops.flush(srv->ops.ctx, kvp_srv_conn_id(c), &c->peer, hdr->req_id,
			   n ? name : NULL);
	return answered(srv, c, hdr->req_id, r);
}

const struct kvp_op_def kvp_op_defs[] = {
	[KVP_FRAME_HELLO] = { .name = "HELLO",
			      .from_client = true,
			      .min_len = sizeof(struct kvp_hello),
			      .max_len = sizeof(struct kvp_hello),
			      .fn = on_hello },
	[KVP_FRAME_WELCOME] = { .name = "WELCOME" },
	[KVP_FRAME_GENERATE] = { .name = "GENERATE",
				 .from_client = true,
				 .min_len = sizeof(struct kvp_generate),
				 .max_len = UINT32_MAX,
				 .fn = on_request },
	[KVP_FRAME_TOKEN] = { .name = "TOKEN" },
	[KVP_FRAME_DONE] = { .name = "DONE" },
	[KVP_FRAME_CANCEL] = { .name = "CANCEL",
			       .from_client = true,
			       .min_len = 0,
			       .max_len = 0,
			       .fn = on_cancel },
	[KVP_FRAME_ERROR] = { .name = "ERROR" },
	[KVP_FRAME_TOKENIZE] = { .name = "TOKENIZE",
				 .from_client = true,
				 .min_len = sizeof(struct kvp_tokenize),
				 .max_len = UINT32_MAX,
				 .fn = on_tokenize },
	[KVP_FRAME_DETOKENIZE] = { .name = "DETOKENIZE",
				   .from_client = true,
				   .min_len = sizeof(struct kvp_detokenize),
				   .max_len = UINT32_MAX,
				   .fn = on_detokenize },
	[KVP_FRAME_CHAT] = { .name = "CHAT",
			     .from_client = true,
			     .min_len = sizeof(struct kvp_chat),
			     .max_len = UINT32_MAX,
			     .fn = on_request },
	[KVP_FRAME_IDS] = { .name = "IDS" },
	[KVP_FRAME_LEASE] = { .name = "LEASE",
			      .from_client = true,
			      .min_len = sizeof(struct kvp_lease_req),
			      .max_len = UINT32_MAX,
			      .fn = on_lease },
	[KVP_FRAME_LEASED] = { .name = "LEASED" },
	[KVP_FRAME_RELEASE] = { .name = "RELEASE",
				.from_client = true,
				.min_len = 0,
				.max_len = 0,
				.fn = on_release },
	[KVP_FRAME_PIN] = { .name = "PIN",
			    .from_client = true,
			    .min_len = sizeof(struct kvp_pin),
			    .max_len = UINT32_MAX,
			    .fn = on_pin },
	[KVP_FRAME_UNPIN] = { .name = "UNPIN",
			      .from_client = true,
			      .min_len = sizeof(struct kvp_pin),
			      .max_len = UINT32_MAX,
			      .fn = on_pin },
	[KVP_FRAME_FLUSH] = { .name = "FLUSH",
			      .from_client = true,
			      .min_len = 0,
			      .max_len = KVP_FLUSH_DOMAIN_MAX,
			      .fn = on_flush },
	[KVP_FRAME_LOGPROBS] = { .name = "LOGPROBS" },
};
static_assert(ARRAY_SIZE(kvp_op_defs) == KVP_FRAME__COUNT, "one entry per frame type");

/*
 * kvp_ops_check_table() - no gaps: every type is named, client types have a handler
 * and daemon types none, lengths are ordered.  Return: 0, or -EINVAL.
 */
int kvp_ops_check_table(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(kvp_op_defs); i++) {
		const struct kvp_op_def *d = &kvp_op_defs[i];

		if (!d->name || d->from_client != !!d->fn || d->min_len > d->max_len ||
		    d->from_client != kvp_proto_from_client((uint32_t)i))
			return -EINVAL;
	}
	return 0;
}
