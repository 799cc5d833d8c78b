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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/convo.h"
#include "compute/convo_bp.h"
#include "compute/gen.h"
#include "compute/text/chat.h"
#include "compute/text/tokenizer.h"
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
		    struct kvp_welcome *welcome, int *fds, unsigned int *n_fds, char *why,
		    size_t why_cap)
{
	struct kvp_requests *q = ctx;
	struct kvp_domain *dom;
	struct kvp_conn_rec *c;
	int idx;

	idx = kvp_domains_for_peer(q->domains, peer->uid, peer->gid, why, why_cap);
	kvp_log(LOG_DEBUG,
		"server: connection %#llx: HELLO from pid %ld uid %ld gid %ld, "
		"client \"%s\", domain %d",
		(unsigned long long)conn, (long)peer->pid, (long)peer->uid, (long)peer->gid, client,
		idx);
	if (idx < 0) {
		/* the peer hears @why, or the class (ipc/ops.c words it); the log says more */
		kvp_log(LOG_NOTICE, "server: HELLO from pid %ld uid %ld gid %ld refused: %s%s%s",
			(long)peer->pid, (long)peer->uid, (long)peer->gid,
			idx == -EPERM  ? "in no trust domain (domains.mode = groups)" :
			idx == -EBUSY  ? "no room for another domain (domains.max)" :
			idx == -ENOMEM ? "no memory for another domain" :
					 "its domain could not be opened",
			*why ? ": " : "", why);
		return idx == -EPERM ? KVP_E_INVALID : KVP_E_BUSY;
	}
	/* -EEXIST cannot happen: ipc/ refuses a second HELLO on a connection */
	if (kvp_conns_add(&q->conns, &c, conn, peer, client, (uint32_t)idx) == -ENOMEM)
		return KVP_E_INTERNAL;
	dom = &q->domains->dom[idx];
	dom->n_conns++;
	dom->reclaim_ticket = 0; /* in use again: a new idle spell asks for a new write-back */
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
			   unsigned int flags, struct kvp_sched_req *r)
{
	int n;

	n = kvp_gen_tokenize(&r->tokens, &r->n_tokens, q->tok, text, len, flags,
			     q->max_prompt_tokens);
	if (n == -E2BIG)
		return KVP_E_LIMIT;
	if (n < 0)
		return KVP_E_INTERNAL;
	return r->n_tokens ? KVP_OK : KVP_E_INVALID;
}

/*
 * A request refused before the engine had it: counted and logged (svc/reqlog.h).
 * Return: @st.
 */
static int reject(struct kvp_requests *q, kvp_conn_id conn, uint64_t req_id, int st)
{
	struct kvp_conn_rec *c = kvp_conns_find(&q->conns, conn);

	q->rejected++;
	if (c)
		kvp_reqlog_end(&q->log, conn, req_id,
			       &(struct kvp_reqlog_who){ c->client, c->peer.uid },
			       (enum kvp_status)st, NULL, kvp_now_ns());
	return st;
}

/*
 * Hand @r (its tokens owned by us) to the engine.  Return: KVP_OK (the tokens now
 * belong to the engine), or the status to answer with (the tokens are freed).
 */
static int submit(struct kvp_requests *q, struct kvp_conn_rec *c, struct kvp_sched_req *r)
{
	int st = kvp_sched_submit(q->domains->dom[c->domain].sched, r);

	if (st == 0) {
		kvp_reqlog_start(&q->log, r->conn, r->req_id, r->t_recv_ns);
		c->in_flight++;
		c->requests++;
		q->domains->dom[c->domain].requests++;
		return KVP_OK;
	}
	free(r->tokens);
	r->tokens = NULL;
	return reject(q, r->conn, r->req_id, submit_status(st));
}

/*
 * The priority @c's request runs at: the one it asked for, or when it named none
 * (KVP_PRIORITY_DEFAULT) its domain's default (docs/daemon.md, "Trust domains").
 */
static int32_t request_priority(const struct kvp_requests *q, const struct kvp_conn_rec *c,
				int32_t asked)
{
	return asked != KVP_PRIORITY_DEFAULT ? asked : q->domains->dom[c->domain].priority;
}

/* Send an ERROR of our own words for a request in flight; what the ops return then. */
static int refuse(struct kvp_requests *q, kvp_conn_id conn, uint64_t req_id, enum kvp_status st,
		  const char *msg);

/*
 * @cc (NULL: none) into @r, once its prompt is known: breakpoints within the prompt.
 * Return: KVP_OK, or what refuse() returned (the tokens are freed).
 */
static int take_cache_ctl(struct kvp_requests *q, kvp_conn_id conn, uint64_t req_id,
			  const struct kvp_cache_ctl *cc, struct kvp_sched_req *r)
{
	if (!cc)
		return KVP_OK;
	r->cc = *cc;
	r->has_cc = true;
	if (cc->n_breakpoints && cc->breakpoints[cc->n_breakpoints - 1] > r->n_tokens) {
		free(r->tokens);
		r->tokens = NULL;
		return refuse(q, conn, req_id, KVP_E_INVALID,
			      "a cache breakpoint lies past the end of the prompt");
	}
	return KVP_OK;
}

static int generate(struct kvp_requests *q, kvp_conn_id conn, uint64_t req_id,
		    const struct kvp_generate *g, const struct kvp_cache_ctl *cc,
		    const int32_t *tokens, const char *text)
{
	struct kvp_sched_req r = { .conn = conn, .req_id = req_id, .t_recv_ns = kvp_now_ns() };
	struct kvp_conn_rec *c = kvp_conns_find(&q->conns, conn);
	int st;

	if (!c)
		return KVP_E_INTERNAL; /* ipc/ only passes GENERATE after a HELLO we took */
	/* ipc/ keeps at most max_reqs_per_conn ids, each once, in flight */
	assert(c->in_flight < q->max_reqs_per_conn);

	if (g->flags & KVP_GEN_TEXT) {
		st = tokenize_prompt(q, text, g->text_bytes,
				     g->flags & KVP_GEN_PARSE_SPECIAL ? KVP_TOK_PARSE_SPECIAL : 0,
				     &r);
		if (st != KVP_OK)
			return reject(q, conn, req_id, st);
	} else {
		r.tokens = malloc((size_t)g->n_tokens * sizeof(int32_t));
		if (!r.tokens)
			return reject(q, conn, req_id, KVP_E_INTERNAL);
		memcpy(r.tokens, tokens, (size_t)g->n_tokens * sizeof(int32_t));
		r.n_tokens = g->n_tokens;
	}
	r.max_new = g->max_new_tokens;
	r.no_cache = g->flags & KVP_GEN_NO_CACHE;
	r.priority = request_priority(q, c, g->priority);
	r.sample = (struct kvp_sample_params){
		.temperature = g->temperature, .top_k = g->top_k, .top_p = g->top_p, .seed = g->seed
	};
	r.salt_len = g->salt_len;
	memcpy(r.salt, g->salt, g->salt_len);
	st = take_cache_ctl(q, conn, req_id, cc, &r);
	if (!r.tokens)
		return st;
	return submit(q, c, &r);
}

static int op_generate(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, uint64_t req_id,
		       const struct kvp_generate *g, const int32_t *tokens, const char *text)
{
	(void)peer;
	return generate(ctx, conn, req_id, g, NULL, tokens, text);
}

static int op_generate_cc(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, uint64_t req_id,
			  const struct kvp_generate *g, const struct kvp_cache_ctl *cc,
			  const int32_t *tokens, const char *text)
{
	(void)peer;
	return generate(ctx, conn, req_id, g, cc, tokens, text);
}

/*
 * PIN, UNPIN and FLUSH are operators' commands: the daemon must allow them
 * (cache.pin_allowed) and the peer's domain must be one of operators (root's own in
 * per-uid mode, every peer in single mode, `operators = yes` in groups mode).
 */
static bool may_pin(const struct kvp_requests *q, const struct kvp_conn_rec *c)
{
	return q->cache && q->cache->pin_allowed && kvp_domain_may_pin(&q->domains->dom[c->domain]);
}

static const char *pin_denied_why(const struct kvp_requests *q, const struct kvp_conn_rec *c)
{
	if (!q->cache || !q->cache->pin_allowed)
		return "pin, unpin and flush are off (cache.pin_allowed = no)";
	return "pin, unpin and flush: this peer's trust domain has no operators";
}

/*
 * PIN / UNPIN (@type): operators only (cache.pin_allowed); PIN runs as a request that
 * computes and publishes the prompt's blocks, UNPIN and FLUSH the engine answers at once.
 */
static int op_pin(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, uint64_t req_id,
		  uint32_t type, const struct kvp_pin *p, const int32_t *tokens, const char *text)
{
	struct kvp_requests *q = ctx;
	struct kvp_sched_req r = { .conn = conn,
				   .req_id = req_id,
				   .t_recv_ns = kvp_now_ns(),
				   .max_new = 1,
				   .op = KVP_SCHED_OP_PIN,
				   .has_cc = true,
				   .sample = { .top_p = 1.0f } };
	struct kvp_conn_rec *c = kvp_conns_find(&q->conns, conn);
	int st;

	(void)peer;
	if (!c)
		return KVP_E_INTERNAL;
	if (!may_pin(q, c))
		return refuse(q, conn, req_id, KVP_E_DENIED, pin_denied_why(q, c));
	if (p->flags & KVP_GEN_TEXT) {
		st = tokenize_prompt(q, text, p->text_bytes,
				     p->flags & KVP_GEN_PARSE_SPECIAL ? KVP_TOK_PARSE_SPECIAL : 0,
				     &r);
		if (st != KVP_OK)
			return reject(q, conn, req_id, st);
	} else {
		r.tokens = malloc((size_t)p->n_tokens * sizeof(int32_t));
		if (!r.tokens)
			return reject(q, conn, req_id, KVP_E_INTERNAL);
		memcpy(r.tokens, tokens, (size_t)p->n_tokens * sizeof(int32_t));
		r.n_tokens = p->n_tokens;
	}
	r.salt_len = p->salt_len;
	memcpy(r.salt, p->salt, p->salt_len);
	r.priority = request_priority(q, c, KVP_PRIORITY_DEFAULT); /* PIN has no field */
	if (type == KVP_FRAME_PIN)
		return submit(q, c, &r);
	st = kvp_sched_unpin(q->domains->dom[c->domain].sched, conn, req_id, r.tokens, r.n_tokens,
			     r.salt_len, r.salt);
	if (st < 0) {
		free(r.tokens);
		return reject(q, conn, req_id, submit_status(st));
	}
	kvp_reqlog_start(&q->log, conn, req_id, r.t_recv_ns);
	c->in_flight++;
	c->requests++;
	return KVP_OK;
}

/*
 * FLUSH: the peer's own domain, or the one it names.  Another domain than its own only
 * for uid 0 (SO_PEERCRED): an operator of one domain must not empty another's cache.
 */
static int op_flush(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, uint64_t req_id,
		    const char *domain)
{
	struct kvp_requests *q = ctx;
	struct kvp_conn_rec *c = kvp_conns_find(&q->conns, conn);
	uint32_t target;
	char msg[96];
	int st;

	if (!c)
		return KVP_E_INTERNAL;
	if (!may_pin(q, c))
		return refuse(q, conn, req_id, KVP_E_DENIED, pin_denied_why(q, c));
	target = c->domain;
	if (domain) {
		for (target = 0;
		     target < q->domains->n_domains && strcmp(q->domains->dom[target].name, domain);
		     target++)
			;
		if (target == q->domains->n_domains) {
			snprintf(msg, sizeof(msg), "flush: no trust domain named '%s'", domain);
			return refuse(q, conn, req_id, KVP_E_INVALID, msg);
		}
		if (target != c->domain && peer->uid != 0) {
			snprintf(msg, sizeof(msg),
				 "flush: domain '%s' is not this peer's own (only uid 0 may "
				 "flush another)",
				 domain);
			return refuse(q, conn, req_id, KVP_E_DENIED, msg);
		}
	}
	st = kvp_sched_flush_cache(q->domains->dom[target].sched, conn, req_id);
	if (st < 0)
		return reject(q, conn, req_id, submit_status(st));
	kvp_reqlog_start(&q->log, conn, req_id, kvp_now_ns());
	c->in_flight++;
	c->requests++;
	return KVP_OK;
}

static int refuse(struct kvp_requests *q, kvp_conn_id conn, uint64_t req_id, enum kvp_status st,
		  const char *msg)
{
	kvp_server_send_error(q->srv, conn, req_id, st, msg);
	reject(q, conn, req_id, st);
	return KVP_OK;
}

/* IDS, then DONE with @n_ids as the prompt tokens: the end of TOKENIZE and DETOKENIZE. */
static int answer_ids(struct kvp_requests *q, kvp_conn_id conn, uint64_t req_id, const int32_t *ids,
		      uint32_t n_ids, const char *text, size_t len)
{
	struct kvp_usage u = { .prompt_tokens = n_ids, .status = KVP_OK };
	int r;

	if (len > UINT32_MAX)
		return refuse(q, conn, req_id, KVP_E_LIMIT, "answer too large for one frame");
	r = kvp_server_send_ids(q->srv, conn, req_id, ids, n_ids, text, (uint32_t)len);
	if (r == -EMSGSIZE)
		return refuse(q, conn, req_id, KVP_E_LIMIT,
			      "answer larger than the connection's output queue (outq_bytes)");
	if (r < 0)
		return r == -ENOMEM ? KVP_E_INTERNAL : KVP_OK; /* gone: closed follows */
	kvp_server_send_done(q->srv, conn, req_id, &u);
	return KVP_OK;
}

static int op_tokenize(void *ctx, kvp_conn_id conn, uint64_t req_id, const struct kvp_tokenize *t,
		       const char *text)
{
	struct kvp_requests *q = ctx;
	unsigned int flags = 0;
	int32_t *ids = NULL;
	uint32_t n = 0;
	int r;

	if (t->flags & KVP_TOKENIZE_PARSE_SPECIAL)
		flags |= KVP_TOK_PARSE_SPECIAL;
	if (t->flags & KVP_TOKENIZE_NO_BOS)
		flags |= KVP_TOK_NO_ADD_SPECIAL;
	/* the text is at most max_prompt_tokens bytes; no vocabulary needs 3 ids a byte + 4 */
	r = kvp_gen_tokenize(&ids, &n, q->tok, text, t->text_bytes, flags,
			     3 * q->max_prompt_tokens + 4);
	if (r < 0)
		return reject(q, conn, req_id, r == -E2BIG ? KVP_E_LIMIT : KVP_E_INTERNAL);
	r = answer_ids(q, conn, req_id, ids, n, NULL, 0);
	free(ids);
	return r;
}

static int op_detokenize(void *ctx, kvp_conn_id conn, uint64_t req_id,
			 const struct kvp_detokenize *d, const int32_t *ids)
{
	struct kvp_requests *q = ctx;
	unsigned int flags = d->flags & KVP_DETOKENIZE_RENDER_SPECIAL ? KVP_DETOK_RENDER_SPECIAL :
									0;
	size_t cap = (size_t)d->n_tokens * 8 + 16;
	char *text = NULL;
	long n;
	int r;

	for (;;) {
		char *grown = realloc(text, cap);

		if (!grown) {
			free(text);
			return reject(q, conn, req_id, KVP_E_INTERNAL);
		}
		text = grown;
		n = kvp_tokenizer_decode(q->tok, ids, d->n_tokens, flags, text, cap);
		if (n < 0 || (size_t)n <= cap)
			break;
		cap = (size_t)n;
	}
	if (n < 0) {
		free(text);
		/* ids were checked against n_vocab: cannot happen */
		return reject(q, conn, req_id, KVP_E_INVALID);
	}
	r = answer_ids(q, conn, req_id, NULL, 0, text, (size_t)n);
	free(text);
	return r;
}

static const enum kvp_chat_role chat_roles[KVP_ROLE__COUNT] = {
	[KVP_ROLE_SYSTEM] = KVP_CHAT_SYSTEM,
	[KVP_ROLE_USER] = KVP_CHAT_USER,
	[KVP_ROLE_ASSISTANT] = KVP_CHAT_ASSISTANT,
};

/*
 * @cc's message breakpoints (KVP_CC_BP_MESSAGES) as token positions of @r's prompt, in
 * @out.  Each breakpoint's TTL is resolved first (0 = the request's, then the default of
 * @c's domain) so that two landing on one position keep the longer one.
 * Return: 0, or as kvp_convo_breakpoints() (@err says why on -EINVAL).
 */
static int message_breakpoints(const struct kvp_requests *q, const struct kvp_conn_rec *c,
			       const struct kvp_cache_ctl *cc, const struct kvp_chat_template *tmpl,
			       const struct kvp_convo *cv, const struct kvp_sched_req *r,
			       struct kvp_cache_ctl *out, char *err, size_t errlen)
{
	/* the peer's domain's policy: its engine resolves the TTLs by it */
	uint32_t ttl = cc->ttl_s ? cc->ttl_s : q->domains->dom[c->domain].cache.ttl_default_s;

	*out = *cc;
	out->flags &= ~KVP_CC_BP_MESSAGES;
	for (uint32_t i = 0; i < out->n_breakpoints; i++)
		if (!out->bp_ttl_s[i])
			out->bp_ttl_s[i] = ttl;
	return kvp_convo_breakpoints(out->breakpoints, out->bp_ttl_s, &out->n_breakpoints, q->tok,
				     tmpl, cv, r->tokens, r->n_tokens, q->max_prompt_tokens, err,
				     errlen);
}

static int chat(struct kvp_requests *q, kvp_conn_id conn, uint64_t req_id,
		const struct kvp_chat *ch, const struct kvp_cache_ctl *cc, const int32_t *context,
		const struct kvp_proto_msg *msgs)
{
	struct kvp_sched_req r = { .conn = conn, .req_id = req_id, .t_recv_ns = kvp_now_ns() };
	struct kvp_conn_rec *c = kvp_conns_find(&q->conns, conn);
	const struct kvp_chat_template *tmpl = q->tmpl;
	struct kvp_chat_template named;
	struct kvp_cache_ctl cc_tok;
	struct kvp_chat_msg *cm;
	struct kvp_convo cv = { .context = context,
				.n_context = ch->n_context,
				.context_msgs = ch->context_msgs,
				.n_msgs = ch->n_messages };
	char err[512] = "";
	int st;

	if (!c)
		return KVP_E_INTERNAL;
	assert(c->in_flight < q->max_reqs_per_conn);
	if (cc && cc->n > 1)
		return refuse(q, conn, req_id, KVP_E_INVALID,
			      "chat: parallel sampling (n > 1) is GENERATE's only");
	if (ch->template_name[0]) {
		char name[KVP_CHAT_TEMPLATE_NAME_MAX + 1] = "";

		memcpy(name, ch->template_name, KVP_CHAT_TEMPLATE_NAME_MAX);
		if (kvp_chat_template_named(&named, name, err, sizeof(err)) < 0)
			return refuse(q, conn, req_id, KVP_E_INVALID, err);
		tmpl = &named;
	} else if (!tmpl) {
		return refuse(q, conn, req_id, KVP_E_INVALID, q->tmpl_err);
	}
	cm = malloc(ch->n_messages * sizeof(*cm));
	if (!cm)
		return reject(q, conn, req_id, KVP_E_INTERNAL);
	for (uint32_t i = 0; i < ch->n_messages; i++)
		cm[i] = (struct kvp_chat_msg){ .role = chat_roles[msgs[i].role],
					       .content = msgs[i].text,
					       .len = msgs[i].len };
	cv.msgs = cm;
	st = kvp_convo_prompt(&r.tokens, &r.n_tokens, q->tok, tmpl, &cv, q->max_prompt_tokens, err,
			      sizeof(err));
	if (st == 0 && cc && (cc->flags & KVP_CC_BP_MESSAGES) &&
	    !(ch->flags & KVP_CHAT_PROMPT_ONLY)) {
		st = message_breakpoints(q, c, cc, tmpl, &cv, &r, &cc_tok, err, sizeof(err));
		if (st < 0) {
			free(r.tokens);
			r.tokens = NULL;
		}
		cc = &cc_tok;
	}
	free(cm);
	if (st == -E2BIG) {
		snprintf(err, sizeof(err),
			 "chat: the conversation is longer than max_prompt_tokens (%u tokens)",
			 q->max_prompt_tokens);
		return refuse(q, conn, req_id, KVP_E_LIMIT, err);
	}
	if (st == -EINVAL)
		return refuse(q, conn, req_id, KVP_E_INVALID, err);
	if (st < 0)
		return reject(q, conn, req_id, KVP_E_INTERNAL);
	if (ch->flags & KVP_CHAT_PROMPT_ONLY) { /* counting: answered as a TOKENIZE is */
		st = answer_ids(q, conn, req_id, r.tokens, r.n_tokens, NULL, 0);
		free(r.tokens);
		return st;
	}
	/* the prompt's ids first: the client continues the conversation on them */
	st = kvp_server_send_ids(q->srv, conn, req_id, r.tokens, r.n_tokens, NULL, 0);
	if (st < 0) {
		free(r.tokens);
		if (st == -EMSGSIZE)
			return refuse(q, conn, req_id, KVP_E_LIMIT,
				      "prompt larger than the connection's output queue");
		q->rejected++;
		return st == -ENOMEM ? KVP_E_INTERNAL : KVP_OK; /* gone: closed follows */
	}
	r.max_new = ch->max_new_tokens;
	r.no_cache = ch->flags & KVP_CHAT_NO_CACHE;
	r.priority = request_priority(q, c, ch->priority);
	r.sample = (struct kvp_sample_params){ .temperature = ch->temperature,
					       .top_k = ch->top_k,
					       .top_p = ch->top_p,
					       .seed = ch->seed };
	r.salt_len = ch->salt_len;
	memcpy(r.salt, ch->salt, ch->salt_len);
	st = take_cache_ctl(q, conn, req_id, cc, &r);
	if (!r.tokens)
		return st;
	return submit(q, c, &r);
}

static int op_chat(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, uint64_t req_id,
		   const struct kvp_chat *ch, const int32_t *context,
		   const struct kvp_proto_msg *msgs)
{
	(void)peer;
	return chat(ctx, conn, req_id, ch, NULL, context, msgs);
}

static int op_chat_cc(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, uint64_t req_id,
		      const struct kvp_chat *ch, const struct kvp_cache_ctl *cc,
		      const int32_t *context, const struct kvp_proto_msg *msgs)
{
	(void)peer;
	return chat(ctx, conn, req_id, ch, cc, context, msgs);
}

static void op_cancel(void *ctx, kvp_conn_id conn, uint64_t req_id)
{
	struct kvp_requests *q = ctx;
	struct kvp_conn_rec *c = kvp_conns_find(&q->conns, conn);

	/* in flight, and its first CANCEL: ipc/ checked both */
	if (c)
		kvp_sched_cancel(q->domains->dom[c->domain].sched, conn, req_id);
}

static void op_closed(void *ctx, kvp_conn_id conn)
{
	struct kvp_requests *q = ctx;
	struct kvp_conn_rec *c = kvp_conns_find(&q->conns, conn);

	if (!c)
		return;
	/* always: the engine may hold leases of it even with nothing in flight */
	kvp_sched_conn_closed(q->domains->dom[c->domain].sched, conn);
	if (q->domains->dom[c->domain].n_conns && !--q->domains->dom[c->domain].n_conns)
		q->domains->dom[c->domain].idle_since_ns = kvp_now_ns();
	if (c->in_flight) {
		kvp_reqlog_conn_closed(&q->log, conn,
				       &(struct kvp_reqlog_who){ c->client, c->peer.uid },
				       kvp_now_ns());
	}
	kvp_conns_drop(&q->conns, conn);
}

static int op_lease(void *ctx, kvp_conn_id conn, uint64_t req_id, const struct kvp_lease_req *l,
		    const int32_t *ids)
{
	struct kvp_requests *q = ctx;
	struct kvp_conn_rec *c = kvp_conns_find(&q->conns, conn);
	struct kvp_sched_lease_ask a = { .conn = conn,
					 .req_id = req_id,
					 .tokens = ids,
					 .n_tokens = l->n_tokens,
					 .salt_len = l->salt_len,
					 .max_per_conn = q->lease_max_per_conn };
	int r;

	if (!c)
		return KVP_E_INTERNAL;
	if (!q->lease_max_per_conn) {
		kvp_server_send_error(q->srv, conn, req_id, KVP_E_INVALID,
				      "leases are off (leases.max_per_conn = 0)");
		return KVP_OK;
	}
	a.ttl_ms = l->ttl_ms && l->ttl_ms < q->lease_max_ms ? l->ttl_ms : q->lease_max_ms;
	memcpy(a.salt, l->salt, l->salt_len);
	r = kvp_sched_lease(q->domains->dom[c->domain].sched, &a);
	if (r < 0)
		return submit_status(r);
	c->in_flight++;
	return KVP_OK;
}

static void op_release(void *ctx, kvp_conn_id conn, uint64_t lease_id)
{
	struct kvp_requests *q = ctx;
	struct kvp_conn_rec *c = kvp_conns_find(&q->conns, conn);

	if (c)
		kvp_sched_release(q->domains->dom[c->domain].sched, conn, lease_id);
}

static int op_status(void *ctx, const struct kvp_peer *peer, enum kvp_status_fmt fmt, char *buf,
		     size_t cap)
{
	struct kvp_requests *q = ctx;

	return q->report(q->report_arg, peer, fmt, buf, cap);
}

void kvp_requests_ops(struct kvp_requests *q, struct kvp_server_ops *ops)
{
	*ops = (struct kvp_server_ops){
		.ctx = q,
		.hello = op_hello,
		.generate = op_generate,
		.cancel = op_cancel,
		.closed = op_closed,
		.tokenize = op_tokenize,
		.detokenize = op_detokenize,
		.chat = op_chat,
		.status = op_status,
		.lease = op_lease,
		.release = op_release,
		.generate_cc = op_generate_cc,
		.chat_cc = op_chat_cc,
		.pin = op_pin,
		.flush = op_flush,
	};
}

static void domain_events(struct kvp_requests *q, struct kvp_sched *s);

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
	       q->evbuf[j].req_id == e->req_id && q->evbuf[j].cont == e->cont &&
	       n_tok < EVENT_BATCH) {
		if (q->evbuf[j].token >= 0)
			q->tok_buf[n_tok++] = q->evbuf[j].token;
		memcpy(q->text_buf + n_text, q->evbuf[j].text, q->evbuf[j].text_len);
		n_text += q->evbuf[j].text_len;
		j++;
	}
	if (known && e->cont >= 0)
		kvp_server_send_tokens_cc(q->srv, e->conn, e->req_id, q->tok_buf, n_tok,
					  q->text_buf, n_text, (uint32_t)e->cont);
	else if (known)
		kvp_server_send_tokens(q->srv, e->conn, e->req_id, q->tok_buf, n_tok, q->text_buf,
				       n_text);
	return j;
}

void kvp_requests_on_events(void *arg)
{
	struct kvp_requests *q = arg;

	/* every domain's engine writes the one eventfd: ask each */
	for (uint32_t d = 0; d < q->domains->n_domains; d++)
		domain_events(q, q->domains->dom[d].sched);
}

/* Turn the events queued by one engine into frames. */
static void domain_events(struct kvp_requests *q, struct kvp_sched *s)
{
	unsigned int n;

	while ((n = kvp_sched_poll_events(s, q->evbuf, EVENT_BATCH)) > 0) {
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
			if (e->type == KVP_SCHED_EV_LEASE) {
				if (c) {
					ended(c);
					kvp_server_send_lease(q->srv, e->conn, e->req_id,
							      &e->lease->hdr, e->lease->blocks);
				}
				free(e->lease);
			} else if (c && e->type == KVP_SCHED_EV_DONE) {
				ended(c);
				c->generated_tokens += e->usage.generated_tokens;
				c->cached_tokens += e->usage.cached_tokens;
				kvp_reqlog_end(&q->log, e->conn, e->req_id,
					       &(struct kvp_reqlog_who){ c->client, c->peer.uid },
					       KVP_OK, &e->usage, kvp_now_ns());
				if (e->has_cu)
					kvp_server_send_done_cc(q->srv, e->conn, e->req_id,
								&e->usage, &e->cu);
				else
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
