/* SPDX-License-Identifier: MIT */
/*
 * requests.h - the loop thread's side of requests: what ipc/ hands svc/ becomes work for
 * the engine, and what the engine answers becomes frames.
 *
 *	HELLO     the peer's trust domain (svc/domain.h) -> that domain's WELCOME and fd
 *	GENERATE  a text prompt is tokenized by the text worker (svc/textwork.h,
 *	          compute/gen.h; special tokens parsed when asked); the request goes to
 *	          the engine (kvp_sched_submit()), whose -errno becomes the wire status
 *	TOKENIZE  tokenized by the text worker, answered when it is done (IDS, DONE)
 *	DETOKENIZE  answered here at once (IDS, then DONE): a copy of each id's bytes
 *	CHAT      the text worker renders the conversation's prompt ids (compute/convo.h:
 *	          the chat template, special tokens parsed, exact context ids continued);
 *	          they go back in an IDS, then the request goes to the engine like a
 *	          GENERATE
 *	PIN       a text prompt as GENERATE's
 *
 * The loop thread never renders or tokenizes: a request with text is copied out of its
 * frame once into a job for the worker, and the ids the worker makes are moved into the
 * engine's request.  A CANCEL of a request the worker still has is answered when the
 * worker hands it back (ERROR KVP_E_CANCELLED).
 *	CANCEL    to the engine (ipc/ passes each request's first CANCEL only)
 *	LEASE     to the domain's engine (kvp_sched_lease()), answered by LEASED
 *	RELEASE   to the domain's engine
 *	closed    the engine drops the connection's requests and leases
 *	events    TOKEN / DONE / ERROR from the engine's ring -> kvp_server_send_*(),
 *	          consecutive TOKENs of one request coalesced into one frame
 *	status    handed to the status reporter (svc/stats.h)
 *
 * GENERATE arrives fully validated by ipc/ (frame, limits, sampling values, token ids
 * against WELCOME's n_vocab, req_id unique in flight, max_reqs_per_conn); what is left
 * here needs the model or the pool: tokenizing a text prompt and its limit, and (in the
 * engine) whether the request can ever fit in the pool.  Every request the engine
 * accepts ends with exactly one DONE or ERROR event.
 *
 * Thread: the loop thread, after kvp_requests_init() on the main thread.
 */
#ifndef KVP_SVC_REQUESTS_H
#define KVP_SVC_REQUESTS_H

#include <stdint.h>

#include "ipc/server.h"
#include "svc/conns.h"
#include "svc/reqlog.h"

struct kvp_cache_policy;
struct kvp_chat_template;
struct kvp_domains;
struct kvp_sched;
struct kvp_sched_event;
struct kvp_textjob;
struct kvp_textwork;
struct kvp_tokenizer;

/*
 * Render the status report in @fmt into @buf (@cap bytes) for status peer @peer (what it
 * may see and do follows from its credentials); the ipc/ status callback.
 */
typedef int kvp_status_report_fn(void *arg, const struct kvp_peer *peer, enum kvp_status_fmt fmt,
				 char *buf, size_t cap);

/**
 * struct kvp_requests - the loop thread's request state
 * @domains, @tok:  borrowed; set before the server starts (each domain has its engine)
 * @tmpl:          the chat template CHATs naming none use (borrowed), or NULL: then
 *                 @tmpl_err says why there is none
 * @srv:           the server answering (borrowed); set once it exists
 * @max_prompt_tokens, @max_reqs_per_conn, @lease_max_per_conn, @lease_max_ms: the
 *                 configured limits
 * @n_ctx:         prompt + max_new_tokens of one request at most (the model's context
 *                 length, or limits.context_tokens)
 * @cache:         the prompt-cache policy (cache.pin_allowed gates PIN, UNPIN, FLUSH)
 * @report, @report_arg: the status reporter
 * @conns:         the connections that said HELLO
 * @rejected:      GENERATEs refused here or by the engine's admission
 * @evbuf, @tok_buf, @text_buf: one batch of engine events and its coalesced TOKEN
 * @lp_buf:        ... and its LOGPROBS entries (EVENT_BATCH * (1 + KVP_TOP_LOGPROBS_MAX))
 * @log:           each ended request's log line and latency histograms
 */
struct kvp_requests {
	struct kvp_domains *domains;
	const struct kvp_tokenizer *tok;
	const struct kvp_chat_template *tmpl;
	const char *tmpl_err;
	struct kvp_server *srv;
	uint32_t max_prompt_tokens;
	uint32_t n_ctx;
	uint32_t max_reqs_per_conn;
	uint32_t lease_max_per_conn;
	uint32_t lease_max_ms;
	const struct kvp_cache_policy *cache;
	kvp_status_report_fn *report;
	void *report_arg;

	struct kvp_conns conns;
	uint64_t rejected;
	struct kvp_sched_event *evbuf;
	int32_t *tok_buf;
	char *text_buf;
	struct kvp_logprob *lp_buf;
	struct kvp_reqlog log;
	struct kvp_textwork *tw;  /* the text worker (kvp_requests_start_text()) */
	int text_efd;		  /* its eventfd, -1 before the start */
	struct kvp_textjob *jobs; /* the jobs the worker has, for CANCEL */
	uint64_t text_jobs;	  /* jobs the worker ran, and their bytes (status) */
	uint64_t text_bytes;
};

/**
 * kvp_requests_init() - empty registry, event buffers
 * The caller sets the borrowed members (domains .. report_arg) before the server runs.
 * Return: 0 or -ENOMEM (nothing to deinit then).
 */
int kvp_requests_init(struct kvp_requests *q);

/* Free the registry and buffers; after kvp_server_free() (which reports every close). */
void kvp_requests_deinit(struct kvp_requests *q);

/*
 * Start the text worker thread; register @q->text_efd with kvp_server_add_wakeup(),
 * kvp_requests_on_text() its callback.  Return: 0 or -errno.
 */
int kvp_requests_start_text(struct kvp_requests *q);

/*
 * Stop the text worker (jobs it still has are dropped): before the tokenizer is freed,
 * after kvp_server_free().  Also done by kvp_requests_deinit(); a no-op when stopped.
 */
void kvp_requests_stop_text(struct kvp_requests *q);

/* The text worker's eventfd fired: answer or submit the requests it rendered. */
void kvp_requests_on_text(void *arg);

/* Requests the text worker has (the daemon drains them like the engines' requests). */
uint64_t kvp_requests_pending(const struct kvp_requests *q);

/* The ipc/ callbacks, @q as their context. */
void kvp_requests_ops(struct kvp_requests *q, struct kvp_server_ops *ops);

/*
 * The engine's eventfd fired: turn the queued events into frames.  Register it with
 * kvp_server_add_wakeup(), @arg being the struct kvp_requests.
 */
void kvp_requests_on_events(void *arg);

#endif /* KVP_SVC_REQUESTS_H */
