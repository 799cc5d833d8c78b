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
#include <stdalign.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "compute/convo.h"
#include "compute/convo_bp.h"
#include "compute/gen.h"
#include "compute/text/chat.h"
#include "compute/text/tokenizer.h"
#include "svc/domain.h"
#include "util/log.h"
#include "svc/engine/engine.h"
#include "svc/engine/sampling.h"
#include "svc/textwork.h"
#include "util/time.h"

#define EVENT_BATCH 256u
#define TEXT_BATCH 64u

/*
 * Text work (svc/textwork.h): what a request hands the worker thread and what comes
 * back.  The loop copies the request's text out of the frame once, into @buf; the worker
 * renders and tokenizes and leaves the ids in @tokens, which the loop then moves (not
 * copies) into the engine's request.
 */
enum text_kind { TEXT_GENERATE, TEXT_PIN, TEXT_TOKENIZE, TEXT_CHAT };

#define TEXT_CANCELLED 0x1u /* loop_flags: CANCEL came while the worker had it */

struct text_job {
	struct kvp_textjob base; /* first: the worker hands back this pointer */
	const struct kvp_tokenizer *tok;
	enum text_kind kind;
	kvp_conn_id conn;
	uint64_t req_id;
	uint64_t t_recv_ns;
	union {
		struct kvp_gen_req gen; /* its fields, not its pointers (keep_fields()) */
		struct kvp_pin pin;
		struct kvp_tokenize t;
	} u;
	uint32_t pin_type;
	/* GENERATE, PIN, TOKENIZE: @text_len bytes of text at @buf; CHAT: the conversation */
	unsigned int tok_flags;
	uint32_t max_ids;
	uint32_t text_len;
	struct kvp_chat_template tmpl;
	struct kvp_convo cv;
	bool want_bp;			 /* CHAT: map message breakpoints (into @cc_tok) */
	struct kvp_cache_ctl cc_tok;	 /* their TTLs resolved on the loop, positions here */
	struct kvp_sched_sampling *samp; /* GENERATE, CHAT: the sampling section (owned) */
	/* the worker's answer */
	int r; /* 0, or -errno of the tokenizer or the template */
	int32_t *tokens;
	uint32_t n_tokens;
	char err[512];
	alignas(max_align_t) unsigned char buf[];
};

int kvp_requests_init(struct kvp_requests *q)
{
	memset(q, 0, sizeof(*q));
	q->text_efd = -1;
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
	q->lp_buf = malloc((size_t)EVENT_BATCH * (1 + KVP_TOP_LOGPROBS_MAX) * sizeof(*q->lp_buf));
	if (!q->lp_buf)
		goto err_text_buf;
	return 0;

err_text_buf:
	free(q->text_buf);
err_tok_buf:
	free(q->tok_buf);
err_evbuf:
	free(q->evbuf);
err:
	return -ENOMEM;
}

static void text_job_free(struct kvp_textjob *base);

int kvp_requests_start_text(struct kvp_requests *q)
{
	int r;

	q->text_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (q->text_efd < 0)
		return -errno;
	r = kvp_textwork_new(&q->tw, q->text_efd, 0);
	if (r < 0) {
		close(q->text_efd);
		q->text_efd = -1;
	}
	return r;
}

void kvp_requests_stop_text(struct kvp_requests *q)
{
	kvp_textwork_free(q->tw, text_job_free);
	q->tw = NULL;
	q->jobs = NULL;
	if (q->text_efd >= 0)
		close(q->text_efd);
	q->text_efd = -1;
}

void kvp_requests_deinit(struct kvp_requests *q)
{
	kvp_requests_stop_text(q);
	kvp_conns_deinit(&q->conns);
	kvp_reqlog_deinit(&q->log);
	free(q->lp_buf);
	free(q->text_buf);
	free(q->tok_buf);
	free(q->evbuf);
	q->lp_buf = NULL;
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

/*
 * The wire status of a text prompt's tokenization (kvp_gen_tokenize() returned @n, and
 * gave @n_tokens ids): KVP_OK, KVP_E_LIMIT, KVP_E_INVALID (no ids), KVP_E_INTERNAL.
 */
static int tokenize_status(int n, uint32_t n_tokens)
{
	if (n == -E2BIG)
		return KVP_E_LIMIT;
	if (n < 0)
		return KVP_E_INTERNAL;
	return n_tokens ? KVP_OK : KVP_E_INVALID;
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
	kvp_sched_sampling_free(r->samp);
	r->samp = NULL;
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
		kvp_sched_sampling_free(r->samp);
		r->samp = NULL;
		return refuse(q, conn, req_id, KVP_E_INVALID,
			      "a cache breakpoint lies past the end of the prompt");
	}
	return KVP_OK;
}

/*
 * The sampling section of @req into *@out (NULL: none).  Return: true to go on; false
 * when the request was answered (a bias id past the vocabulary, a schema that does not
 * compile: refused in words), *@st then being what the op returns.
 */
static bool take_sampling(struct kvp_requests *q, kvp_conn_id conn, uint64_t req_id,
			  const struct kvp_gen_req *req, struct kvp_sched_sampling **out, int *st)
{
	const struct kvp_proto_sampling *ps = &req->samp;
	char why[400] = "";
	int r;

	*out = NULL;
	if (!req->has_samp)
		return true;
	r = kvp_sched_sampling_new(out, &ps->hdr, ps->bias, ps->schema,
				   q->tok ? kvp_tokenizer_n_vocab(q->tok) : UINT32_MAX, why,
				   sizeof(why));
	if (!r && (r = kvp_sched_sampling_think(*out, q->tok, why, sizeof(why)))) {
		kvp_sched_sampling_free(*out);
		*out = NULL;
	}
	if (!r)
		return true;
	*st = r == -EINVAL ? refuse(q, conn, req_id, KVP_E_INVALID, why) :
			     reject(q, conn, req_id, KVP_E_INTERNAL);
	return false;
}

/*
 * The prompt of @r (@n_tokens ids) and its max_new within the context: with @fit,
 * max_new is lowered to what is left.  Return: KVP_OK, or what refuse() returned (the
 * tokens are freed) when the prompt leaves no room, or leaves less than max_new without
 * @fit (the sampling section too).
 */
static int fit_context(struct kvp_requests *q, struct kvp_sched_req *r, bool fit)
{
	uint64_t want = (uint64_t)r->n_tokens + r->max_new;
	char msg[200];

	if (!q->n_ctx || want <= q->n_ctx)
		return KVP_OK;
	if (fit && r->n_tokens < q->n_ctx) {
		r->max_new = q->n_ctx - r->n_tokens;
		return KVP_OK;
	}
	/* "context: N + M > C": the front reads the three numbers back out (docs/protocol.md) */
	snprintf(msg, sizeof(msg),
		 "context: %u + %u > %u: the prompt (%u tokens) and max_new_tokens (%u) exceed the "
		 "model's context length (%u tokens)",
		 r->n_tokens, fit ? 1 : r->max_new, q->n_ctx, r->n_tokens, fit ? 1 : r->max_new,
		 q->n_ctx);
	free(r->tokens);
	r->tokens = NULL;
	kvp_sched_sampling_free(r->samp);
	r->samp = NULL;
	return refuse(q, r->conn, r->req_id, KVP_E_LIMIT, msg);
}

static int text_push(struct kvp_requests *q, struct text_job *j);
static struct text_job *text_job_new(struct kvp_requests *q, enum text_kind kind, kvp_conn_id conn,
				     uint64_t req_id, size_t buf_bytes);

/* @req's fields for a job that outlives the frame: its pointers (into the frame) cleared. */
static void keep_fields(struct kvp_gen_req *dst, const struct kvp_gen_req *req)
{
	*dst = *req;
	dst->ids = NULL;
	dst->text = NULL;
	dst->tools = NULL;
	dst->msgs = NULL;
	dst->samp.bias = NULL;
	dst->samp.schema = NULL;
}

/*
 * What every GENERATE and CHAT sets alike in @r: the sampling fields of @req, its salt,
 * its priority (or @c's domain's default).
 */
static void request_params(const struct kvp_requests *q, const struct kvp_conn_rec *c,
			   const struct kvp_gen_req *req, struct kvp_sched_req *r)
{
	r->max_new = req->max_new_tokens;
	r->no_cache = req->flags & KVP_GEN_NO_CACHE; /* KVP_CHAT_NO_CACHE: the same bit */
	r->speculative = req->flags & KVP_GEN_SPEC_ON  ? KVP_SCHED_SPEC_ON :
			 req->flags & KVP_GEN_SPEC_OFF ? KVP_SCHED_SPEC_OFF :
							 KVP_SCHED_SPEC_AUTO;
	r->spec_usage = req->flags & KVP_GEN_SPEC_USAGE; /* KVP_CHAT_SPEC_USAGE: the same */
	r->priority = request_priority(q, c, req->priority);
	r->sample = (struct kvp_sample_params){ .temperature = req->temperature,
						.top_k = req->top_k,
						.top_p = req->top_p,
						.seed = req->seed };
	r->salt_len = req->salt_len;
	memcpy(r->salt, req->salt, req->salt_len);
}

/*
 * A GENERATE whose prompt ids are in @r (owned): the rest of the request, then the
 * engine.  Return: as submit().
 */
static int generate_submit(struct kvp_requests *q, struct kvp_conn_rec *c,
			   const struct kvp_gen_req *req, struct kvp_sched_req *r)
{
	int st;

	request_params(q, c, req, r);
	st = fit_context(q, r, req->flags & KVP_GEN_FIT_CONTEXT);
	if (!r->tokens)
		return st;
	st = take_cache_ctl(q, r->conn, r->req_id, req->has_cc ? &req->cc : NULL, r);
	if (!r->tokens)
		return st;
	return submit(q, c, r);
}

/*
 * A GENERATE: token ids to the engine now, moved (@prompt's buffer is taken here and
 * freed on every path that does not hand it on), text to the worker first.
 */
static int generate(struct kvp_requests *q, struct kvp_conn_rec *c, uint64_t req_id,
		    const struct kvp_gen_req *req, struct kvp_prompt_ids *prompt)
{
	kvp_conn_id conn = c->id;
	struct kvp_sched_req r = { .conn = conn, .req_id = req_id, .t_recv_ns = kvp_now_ns() };
	struct kvp_sched_sampling *ss;
	struct text_job *j;
	int st;

	if (!take_sampling(q, conn, req_id, req, &ss, &st))
		return st;
	if (req->flags & KVP_GEN_TEXT) {
		/* tokenized by the text worker; text_done() goes on from generate_submit() */
		j = text_job_new(q, TEXT_GENERATE, conn, req_id, req->text_bytes);
		if (!j) {
			kvp_sched_sampling_free(ss);
			return reject(q, conn, req_id, KVP_E_INTERNAL);
		}
		j->samp = ss;
		keep_fields(&j->u.gen, req);
		j->tok_flags = req->flags & KVP_GEN_PARSE_SPECIAL ? KVP_TOK_PARSE_SPECIAL : 0;
		j->max_ids = q->max_prompt_tokens;
		j->text_len = req->text_bytes;
		memcpy(j->buf, req->text, req->text_bytes);
		return text_push(q, j);
	}
	/* ours from here: generate_submit() hands it to the engine or frees it */
	r.tokens = prompt->ids;
	r.n_tokens = prompt->n;
	r.cap_tokens = prompt->cap;
	prompt->ids = NULL;
	r.samp = ss;
	return generate_submit(q, c, req, &r);
}

static int chat(struct kvp_requests *q, struct kvp_conn_rec *c, uint64_t req_id,
		const struct kvp_gen_req *req);

/* The one request callback: a GENERATE or a CHAT (ipc/ checked it all). */
static int op_generate(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, uint64_t req_id,
		       const struct kvp_gen_req *req, struct kvp_prompt_ids *prompt)
{
	struct kvp_requests *q = ctx;
	struct kvp_conn_rec *c = kvp_conns_find(&q->conns, conn);

	(void)peer;
	if (!c)
		return KVP_E_INTERNAL; /* ipc/ only passes requests after a HELLO we took */
	/* ipc/ keeps at most max_reqs_per_conn ids, each once, in flight */
	assert(c->in_flight < q->max_reqs_per_conn);
	return req->type == KVP_FRAME_CHAT ? chat(q, c, req_id, req) :
					     generate(q, c, req_id, req, prompt);
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
 * PIN or UNPIN (@type) with its prompt ids in @r (owned): PIN runs as a request that
 * computes and publishes the prompt's blocks, UNPIN the engine answers at once.
 * Return: as submit().
 */
static int pin_submit(struct kvp_requests *q, struct kvp_conn_rec *c, uint32_t type,
		      const struct kvp_pin *p, struct kvp_sched_req *r)
{
	int st;

	r->max_new = 1;
	r->op = KVP_SCHED_OP_PIN;
	r->has_cc = true;
	r->sample = (struct kvp_sample_params){ .top_p = 1.0f };
	r->salt_len = p->salt_len;
	memcpy(r->salt, p->salt, p->salt_len);
	r->priority = request_priority(q, c, KVP_PRIORITY_DEFAULT); /* PIN has no field */
	if (type == KVP_FRAME_PIN)
		return submit(q, c, r);
	st = kvp_sched_unpin(q->domains->dom[c->domain].sched, r->conn, r->req_id, r->tokens,
			     r->n_tokens, r->salt_len, r->salt);
	if (st < 0) {
		free(r->tokens);
		return reject(q, r->conn, r->req_id, submit_status(st));
	}
	kvp_reqlog_start(&q->log, r->conn, r->req_id, r->t_recv_ns);
	c->in_flight++;
	c->requests++;
	return KVP_OK;
}

/* PIN / UNPIN (@type): operators only (cache.pin_allowed); a text prompt goes to the worker. */
static int op_pin(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, uint64_t req_id,
		  uint32_t type, const struct kvp_pin *p, const int32_t *tokens, const char *text)
{
	struct kvp_requests *q = ctx;
	struct kvp_sched_req r = { .conn = conn, .req_id = req_id, .t_recv_ns = kvp_now_ns() };
	struct kvp_conn_rec *c = kvp_conns_find(&q->conns, conn);
	struct text_job *j;

	(void)peer;
	if (!c)
		return KVP_E_INTERNAL;
	if (!may_pin(q, c))
		return refuse(q, conn, req_id, KVP_E_DENIED, pin_denied_why(q, c));
	if (p->flags & KVP_GEN_TEXT) {
		j = text_job_new(q, TEXT_PIN, conn, req_id, p->text_bytes);
		if (!j)
			return reject(q, conn, req_id, KVP_E_INTERNAL);
		j->u.pin = *p;
		j->pin_type = type;
		j->tok_flags = p->flags & KVP_GEN_PARSE_SPECIAL ? KVP_TOK_PARSE_SPECIAL : 0;
		j->max_ids = q->max_prompt_tokens;
		j->text_len = p->text_bytes;
		memcpy(j->buf, text, p->text_bytes);
		return text_push(q, j);
	}
	r.tokens = malloc((size_t)p->n_tokens * sizeof(int32_t));
	if (!r.tokens)
		return reject(q, conn, req_id, KVP_E_INTERNAL);
	memcpy(r.tokens, tokens, (size_t)p->n_tokens * sizeof(int32_t));
	r.n_tokens = p->n_tokens;
	return pin_submit(q, c, type, p, &r);
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
	kvp_server_send_done(q->srv, conn, req_id, &u, NULL, NULL);
	return KVP_OK;
}

/* TOKENIZE: on the worker; text_done() answers. */
static int op_tokenize(void *ctx, kvp_conn_id conn, uint64_t req_id, const struct kvp_tokenize *t,
		       const char *text)
{
	struct kvp_requests *q = ctx;
	struct text_job *j = text_job_new(q, TEXT_TOKENIZE, conn, req_id, t->text_bytes);

	if (!j)
		return reject(q, conn, req_id, KVP_E_INTERNAL);
	j->u.t = *t;
	if (t->flags & KVP_TOKENIZE_PARSE_SPECIAL)
		j->tok_flags |= KVP_TOK_PARSE_SPECIAL;
	if (t->flags & KVP_TOKENIZE_NO_BOS)
		j->tok_flags |= KVP_TOK_NO_ADD_SPECIAL;
	/*
	 * no vocabulary needs 3 ids a byte + 4; more than max_prompt_tokens ids is a prompt
	 * no request could be given (-E2BIG: KVP_E_LIMIT), as vLLM refuses one past the model
	 */
	j->max_ids = 3 * (uint64_t)t->text_bytes + 4 < q->max_prompt_tokens ?
			     3 * t->text_bytes + 4 :
			     q->max_prompt_tokens;
	j->text_len = t->text_bytes;
	memcpy(j->buf, text, t->text_bytes);
	return text_push(q, j);
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
	[KVP_ROLE_SYSTEM] = KVP_CHAT_SYSTEM,	   [KVP_ROLE_USER] = KVP_CHAT_USER,
	[KVP_ROLE_ASSISTANT] = KVP_CHAT_ASSISTANT, [KVP_ROLE_TOOL] = KVP_CHAT_TOOL,
	[KVP_ROLE_TOOL_CALL] = KVP_CHAT_TOOL_CALL,
};

/*
 * @cc's message breakpoints (KVP_CC_BP_MESSAGES), before the worker maps them onto token
 * positions (kvp_convo_breakpoints()) into @out: each breakpoint's TTL is resolved first
 * (0 = the request's, then the default of @c's domain) so that two landing on one
 * position keep the longer one.
 */
static void message_breakpoints_ttl(const struct kvp_requests *q, const struct kvp_conn_rec *c,
				    const struct kvp_cache_ctl *cc, struct kvp_cache_ctl *out)
{
	/* the peer's domain's policy: its engine resolves the TTLs by it */
	uint32_t ttl = cc->ttl_s ? cc->ttl_s : q->domains->dom[c->domain].cache.ttl_default_s;

	*out = *cc;
	out->flags &= ~KVP_CC_BP_MESSAGES;
	for (uint32_t i = 0; i < out->n_breakpoints; i++)
		if (!out->bp_ttl_s[i])
			out->bp_ttl_s[i] = ttl;
}

/*
 * CHAT: checked here, rendered and tokenized by the worker (the messages and context ids
 * copied into the job once), answered by chat_done().
 */
static int chat(struct kvp_requests *q, struct kvp_conn_rec *c, uint64_t req_id,
		const struct kvp_gen_req *req)
{
	kvp_conn_id conn = c->id;
	const struct kvp_cache_ctl *cc = req->has_cc ? &req->cc : NULL;
	const struct kvp_proto_msg *msgs = req->msgs;
	size_t cm_bytes = (size_t)req->n_messages * sizeof(struct kvp_chat_msg);
	size_t ctx_bytes = (size_t)req->n_ids * sizeof(int32_t);
	size_t text_bytes = 0;
	struct kvp_chat_msg *cm;
	struct text_job *j;
	char err[512] = "";
	uint32_t tools_len = req->tools_len;
	const char *tools = req->tools;
	char *text;
	int st;

	if (cc && cc->n > 1)
		return refuse(q, conn, req_id, KVP_E_INVALID,
			      "chat: parallel sampling (n > 1) is GENERATE's only");
	for (uint32_t i = 0; i < req->n_messages; i++)
		text_bytes += msgs[i].len;
	text_bytes += tools_len;
	j = text_job_new(q, TEXT_CHAT, conn, req_id, cm_bytes + ctx_bytes + text_bytes);
	if (!j)
		return reject(q, conn, req_id, KVP_E_INTERNAL);
	if (req->template_name[0]) {
		char name[KVP_CHAT_TEMPLATE_NAME_MAX + 1] = "";

		memcpy(name, req->template_name, KVP_CHAT_TEMPLATE_NAME_MAX);
		if (kvp_chat_template_named(&j->tmpl, name, err, sizeof(err)) < 0) {
			free(j);
			return refuse(q, conn, req_id, KVP_E_INVALID, err);
		}
	} else if (q->tmpl) {
		j->tmpl = *q->tmpl;
	} else {
		free(j);
		return refuse(q, conn, req_id, KVP_E_INVALID, q->tmpl_err);
	}
	if ((req->flags & KVP_CHAT_THINKING) && !kvp_chat_reasons(&j->tmpl)) {
		kvp_chat_thinking_refused(&j->tmpl, err, sizeof(err));
		free(j);
		return refuse(q, conn, req_id, KVP_E_INVALID, err);
	}
	keep_fields(&j->u.gen, req);
	if (cc) {
		j->want_bp = (cc->flags & KVP_CC_BP_MESSAGES) &&
			     !(req->flags & KVP_CHAT_PROMPT_ONLY);
		if (j->want_bp)
			message_breakpoints_ttl(q, c, cc, &j->cc_tok);
	}
	/* the job's buffer: messages, context ids, texts (cm_bytes keeps the ids aligned) */
	cm = (struct kvp_chat_msg *)(void *)j->buf;
	text = (char *)j->buf + cm_bytes + ctx_bytes;
	if (ctx_bytes)
		memcpy(j->buf + cm_bytes, req->ids, ctx_bytes);
	for (uint32_t i = 0; i < req->n_messages; i++) {
		if (msgs[i].len)
			memcpy(text, msgs[i].text, msgs[i].len);
		cm[i] = (struct kvp_chat_msg){ .role = chat_roles[msgs[i].role],
					       .content = text,
					       .len = msgs[i].len };
		if (msgs[i].role == KVP_ROLE_TOOL_CALL) { /* "NAME\nARGUMENTS" (proto.c) */
			const char *nl = memchr(text, '\n', msgs[i].len);

			cm[i].name = text;
			cm[i].name_len = (size_t)(nl - text);
			cm[i].content = nl + 1;
			cm[i].len = msgs[i].len - cm[i].name_len - 1;
		}
		if ((req->flags & KVP_CHAT_CALL_IDS) &&
		    (msgs[i].role == KVP_ROLE_TOOL_CALL || msgs[i].role == KVP_ROLE_TOOL)) {
			/* "ID\n" before the arguments or the result (checked by proto.c) */
			const char *nl = memchr(cm[i].content, '\n', cm[i].len);

			cm[i].id = cm[i].content;
			cm[i].id_len = (size_t)(nl - cm[i].content);
			cm[i].len -= cm[i].id_len + 1;
			cm[i].content = nl + 1;
		}
		text += msgs[i].len;
	}
	if (tools)
		memcpy(text, tools, tools_len);
	j->cv = (struct kvp_convo){ .msgs = cm,
				    .n_msgs = req->n_messages,
				    .context = (const int32_t *)(void *)(j->buf + cm_bytes),
				    .n_context = req->n_ids,
				    .context_msgs = req->context_msgs,
				    .tools = tools ? text : NULL,
				    .tools_len = tools_len,
				    .no_thinking = req->flags & KVP_CHAT_NO_THINKING };
	j->max_ids = q->max_prompt_tokens;
	j->base.bytes = text_bytes + ctx_bytes;
	if (!(req->flags & KVP_CHAT_PROMPT_ONLY) &&
	    !take_sampling(q, conn, req_id, req, &j->samp, &st)) {
		text_job_free(&j->base);
		return st;
	}
	return text_push(q, j);
}

/* The worker rendered and tokenized @j, a CHAT: answer it or hand it to the engine. */
static int chat_done(struct kvp_requests *q, struct kvp_conn_rec *c, struct text_job *j)
{
	const struct kvp_gen_req *req = &j->u.gen;
	const struct kvp_cache_ctl *cc = req->has_cc ? (j->want_bp ? &j->cc_tok : &req->cc) : NULL;
	struct kvp_sched_req r = { .conn = j->conn,
				   .req_id = j->req_id,
				   .t_recv_ns = j->t_recv_ns,
				   .tokens = j->tokens,
				   .n_tokens = j->n_tokens };
	kvp_conn_id conn = j->conn;
	uint64_t req_id = j->req_id;
	char err[600];
	int st;

	if (j->r == -E2BIG) {
		snprintf(err, sizeof(err),
			 "chat: the conversation is longer than max_prompt_tokens (%u tokens)",
			 q->max_prompt_tokens);
		return refuse(q, conn, req_id, KVP_E_LIMIT, err);
	}
	if (j->r == -EINVAL)
		return refuse(q, conn, req_id, KVP_E_INVALID, j->err);
	if (j->r < 0)
		return reject(q, conn, req_id, KVP_E_INTERNAL);
	j->tokens = NULL; /* moved into @r; on a refusal above text_job_free() frees them */
	if (req->flags & KVP_CHAT_PROMPT_ONLY) { /* counting: answered as a TOKENIZE is */
		st = answer_ids(q, conn, req_id, r.tokens, r.n_tokens, NULL, 0);
		free(r.tokens);
		return st;
	}
	request_params(q, c, req, &r);
	st = fit_context(q, &r, req->flags & KVP_CHAT_FIT_CONTEXT);
	if (!r.tokens)
		return st;
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
	r.samp = j->samp; /* moved into @r */
	j->samp = NULL;
	st = take_cache_ctl(q, conn, req_id, cc, &r);
	if (!r.tokens)
		return st;
	return submit(q, c, &r);
}

/* ---- the text worker's jobs (svc/textwork.h) ---- */

/* On the worker thread: render and tokenize; reads only the job and the tokenizer. */
static void text_run(struct kvp_textjob *base)
{
	struct text_job *j = (struct text_job *)base;

	if (j->kind != TEXT_CHAT) {
		j->r = kvp_gen_tokenize(&j->tokens, &j->n_tokens, j->tok, (const char *)j->buf,
					j->text_len, j->tok_flags, j->max_ids);
		return;
	}
	j->r = kvp_convo_prompt(&j->tokens, &j->n_tokens, j->tok, &j->tmpl, &j->cv, j->max_ids,
				j->err, sizeof(j->err));
	if (j->r == 0 && j->want_bp) {
		j->r = kvp_convo_breakpoints(j->cc_tok.breakpoints, j->cc_tok.bp_ttl_s,
					     &j->cc_tok.n_breakpoints, j->tok, &j->tmpl, &j->cv,
					     j->tokens, j->n_tokens, j->max_ids, j->err,
					     sizeof(j->err));
		if (j->r < 0) {
			free(j->tokens);
			j->tokens = NULL;
		}
	}
}

/* A job for @buf_bytes of request text (one more, zeroed: text stays NUL-terminated). */
static struct text_job *text_job_new(struct kvp_requests *q, enum text_kind kind, kvp_conn_id conn,
				     uint64_t req_id, size_t buf_bytes)
{
	struct text_job *j = calloc(1, sizeof(*j) + buf_bytes + 1);

	if (!j)
		return NULL;
	j->base.run = text_run;
	j->base.key = conn;
	j->base.bytes = buf_bytes;
	j->tok = q->tok;
	j->kind = kind;
	j->conn = conn;
	j->req_id = req_id;
	j->t_recv_ns = kvp_now_ns();
	return j;
}

static void text_job_free(struct kvp_textjob *base)
{
	struct text_job *j = (struct text_job *)base;

	free(j->tokens);
	kvp_sched_sampling_free(j->samp);
	free(j);
}

/*
 * Hand @j to the worker (it is in flight for ipc/ already; text_done() answers it).
 * Return: KVP_OK, or KVP_E_BUSY when the worker's queue is full (@j freed).
 */
static int text_push(struct kvp_requests *q, struct text_job *j)
{
	kvp_conn_id conn = j->conn;
	uint64_t req_id = j->req_id;

	if (kvp_textwork_push(q->tw, &j->base) < 0) {
		text_job_free(&j->base);
		return reject(q, conn, req_id, KVP_E_BUSY);
	}
	/* the loop's list of jobs out, for CANCEL */
	j->base.loop_prev = NULL;
	j->base.loop_next = q->jobs;
	if (q->jobs)
		q->jobs->loop_prev = &j->base;
	q->jobs = &j->base;
	return KVP_OK;
}

/* The worker is done with @j: go on where the request left off, on the loop thread. */
static void text_done(struct kvp_requests *q, struct text_job *j)
{
	struct kvp_conn_rec *c = kvp_conns_find(&q->conns, j->conn);
	struct kvp_sched_req r = { .conn = j->conn,
				   .req_id = j->req_id,
				   .t_recv_ns = j->t_recv_ns,
				   .tokens = j->tokens,
				   .n_tokens = j->n_tokens };
	int st;

	if (j->base.loop_prev)
		j->base.loop_prev->loop_next = j->base.loop_next;
	else
		q->jobs = j->base.loop_next;
	if (j->base.loop_next)
		j->base.loop_next->loop_prev = j->base.loop_prev;
	q->text_jobs++;
	q->text_bytes += j->base.bytes;
	if (!c) { /* the connection is gone, and ipc/ forgot its requests */
		text_job_free(&j->base);
		return;
	}
	if (j->base.loop_flags & TEXT_CANCELLED) {
		kvp_server_send_error(q->srv, j->conn, j->req_id, KVP_E_CANCELLED,
				      "cancelled before it was tokenized");
		kvp_reqlog_end(&q->log, j->conn, j->req_id,
			       &(struct kvp_reqlog_who){ c->client, c->peer.uid }, KVP_E_CANCELLED,
			       NULL, kvp_now_ns());
		text_job_free(&j->base);
		return;
	}
	if (j->kind == TEXT_CHAT) {
		st = chat_done(q, c, j);
	} else {
		j->tokens = NULL; /* moved into @r */
		st = j->kind == TEXT_TOKENIZE ?
			     (j->r < 0 ? (j->r == -E2BIG ? KVP_E_LIMIT : KVP_E_INTERNAL) : KVP_OK) :
			     tokenize_status(j->r, r.n_tokens);
		if (st != KVP_OK) {
			free(r.tokens);
			st = reject(q, j->conn, j->req_id, st);
		} else if (j->kind == TEXT_TOKENIZE) {
			st = answer_ids(q, j->conn, j->req_id, r.tokens, r.n_tokens, NULL, 0);
			free(r.tokens);
		} else if (j->kind == TEXT_GENERATE) {
			r.samp = j->samp; /* moved into @r */
			j->samp = NULL;
			st = generate_submit(q, c, &j->u.gen, &r);
		} else {
			st = pin_submit(q, c, j->pin_type, &j->u.pin, &r);
		}
	}
	/* what ipc/ answers for a handler's status: here no handler is left to do it */
	if (st != KVP_OK)
		kvp_server_send_error(
			q->srv, j->conn, j->req_id, (enum kvp_status)st,
			st == KVP_E_LIMIT ?
				"the text tokenizes to more than max_prompt_tokens ids" :
				kvp_proto_status_str((uint32_t)st));
	text_job_free(&j->base);
}

/* The worker's eventfd fired: finish the jobs it has done. */
void kvp_requests_on_text(void *arg)
{
	struct kvp_requests *q = arg;
	struct kvp_textjob *done[TEXT_BATCH];
	unsigned int n;

	while ((n = kvp_textwork_poll(q->tw, done, TEXT_BATCH)) > 0)
		for (unsigned int i = 0; i < n; i++)
			text_done(q, (struct text_job *)done[i]);
}

uint64_t kvp_requests_pending(const struct kvp_requests *q)
{
	return kvp_textwork_pending(q->tw);
}

static void op_cancel(void *ctx, kvp_conn_id conn, uint64_t req_id)
{
	struct kvp_requests *q = ctx;
	struct kvp_conn_rec *c = kvp_conns_find(&q->conns, conn);

	if (!c)
		return;
	/* still with the text worker: answered CANCELLED when it comes back */
	for (struct kvp_textjob *j = q->jobs; j; j = j->loop_next) {
		const struct text_job *t = (const struct text_job *)j;

		if (t->conn == conn && t->req_id == req_id) {
			j->loop_flags |= TEXT_CANCELLED;
			return;
		}
	}
	/* in flight, and its first CANCEL: ipc/ checked both */
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
		.status = op_status,
		.lease = op_lease,
		.release = op_release,
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
	const struct kvp_usage *usage = NULL;
	uint32_t n_tok = 0, n_lp = 0, n_top = 0;
	uint32_t n_text = 0;
	unsigned int j = i;

	while (j < n && q->evbuf[j].type == KVP_SCHED_EV_TOKEN && q->evbuf[j].conn == e->conn &&
	       q->evbuf[j].req_id == e->req_id && q->evbuf[j].cont == e->cont &&
	       n_tok < EVENT_BATCH) {
		if (q->evbuf[j].token >= 0)
			q->tok_buf[n_tok++] = q->evbuf[j].token;
		if (q->evbuf[j].token >= 0 && q->evbuf[j].has_lp) {
			const struct kvp_sample_logprob *lp = &q->evbuf[j].lp;
			struct kvp_logprob *o = q->lp_buf +
						(size_t)n_lp * (1 + KVP_TOP_LOGPROBS_MAX);

			/* packed below once the batch's top count is known (one per request) */
			o[0] = (struct kvp_logprob){ .id = q->evbuf[j].token, .logprob = lp->lp };
			for (uint32_t k = 0; k < lp->n_top && k < KVP_TOP_LOGPROBS_MAX; k++)
				o[1 + k] = (struct kvp_logprob){ .id = lp->top_ids[k],
								 .logprob = lp->top_lp[k] };
			n_top = lp->n_top;
			n_lp++;
		}
		memcpy(q->text_buf + n_text, q->evbuf[j].text, q->evbuf[j].text_len);
		n_text += q->evbuf[j].text_len;
		if (q->evbuf[j].has_usage)
			usage = &q->evbuf[j].usage;
		j++;
	}
	if (known && n_lp && n_lp == n_tok) { /* LOGPROBS goes right before its TOKEN */
		for (uint32_t k = 1; k < n_lp; k++)
			memmove(q->lp_buf + (size_t)k * (1 + n_top),
				q->lp_buf + (size_t)k * (1 + KVP_TOP_LOGPROBS_MAX),
				(1 + n_top) * sizeof(*q->lp_buf));
		kvp_server_send_logprobs(q->srv, e->conn, e->req_id,
					 &(struct kvp_logprobs){ .n_tokens = n_lp, .n_top = n_top },
					 q->lp_buf);
	}
	if (known)
		kvp_server_send_tokens_usage(q->srv, e->conn, e->req_id, q->tok_buf, n_tok,
					     q->text_buf, n_text, e->cont, usage);
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
				kvp_server_send_done(q->srv, e->conn, e->req_id, &e->usage,
						     e->has_cu ? &e->cu : NULL,
						     e->has_su ? &e->su : NULL);
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
