/* SPDX-License-Identifier: MIT */
/*
 * backend.h - kvpool-http's side of kvpoold: a pool of libkvpool connections served by
 * one thread, each carrying up to backend_reqs_per_conn generations at once (requests
 * multiplexed by id, their TOKEN/DONE/ERROR frames interleaved).
 *
 * A request is a struct kvp_http_job embedded in the caller's own request object.  The
 * caller reserves room (kvp_http_backend_reserve(): -EBUSY when every connection is
 * full and @queue jobs wait already, which the front answers with 429), then submits; a
 * job that finds every connection full waits, in arrival order, for a slot; from then on the backend thread
 * reports to the job through its ops until exactly one ops->end().  Connections are
 * opened as load needs them and reopened after kvpoold restarts; while none is open the
 * thread retries every second, so /health and the model's name recover by themselves.
 *
 * A job whose client waits with nothing to send (a long prefill, a non-streamed answer)
 * names the client's socket through ops->watch_fd(): the thread polls it for a hang-up
 * and cancels the request in kvpoold when the client goes away.
 *
 * Threads: one backend thread owns every kvp_client and calls the ops; the functions
 * below are called from any thread.
 */
#ifndef KVP_IPC_HTTP_BACKEND_H
#define KVP_IPC_HTTP_BACKEND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/http/api.h"
#include "ipc/http/vocab.h"
#include "kvpool/kvpool.h"

struct kvp_http_backend;
struct kvp_http_job;

/**
 * struct kvp_http_job_ops - how the backend thread reports to a job (the caller's code)
 * @tokens:   new tokens and their text; return true to cancel the request in kvpoold
 *            (a stop string matched, the client is gone, its buffer is full)
 * @end:      the end, exactly once: @u is DONE's usage (@status = usage.status), or NULL
 *            with @status an enum kvp_status from kvpoold's ERROR or a -errno of this
 *            side (-ENOTCONN: kvpoold unreachable or the connection broke; -ESHUTDOWN:
 *            this process is stopping; -EINVAL, -EMSGSIZE, -ENOSYS: refused before it was
 *            sent, or a kvp_status the client library decided, e.g. KVP_E_LIMIT) and @msg
 *            the reason.  After it returns the backend never touches the job again.
 * @watch_fd: the client socket to watch for a hang-up now, or -1
 * @hangup:   the watched socket hung up; the backend cancels the request itself
 * @usage:    the prompt's counts, known with the first tokens (before @tokens; may be NULL)
 * @ids:      kvpoold's IDS: a chat's prompt ids (before its tokens), the answer of a
 *            tokenize, detokenize or chat-prompt job (@text for detokenize); may be NULL
 */
struct kvp_http_job_ops {
	bool (*tokens)(struct kvp_http_job *job, const int32_t *ids, uint32_t n_ids,
		       const char *text, uint32_t len);
	void (*ids)(struct kvp_http_job *job, const int32_t *ids, uint32_t n_ids, const char *text,
		    uint32_t len);
	void (*usage)(struct kvp_http_job *job, const struct kvp_usage *u);
	void (*end)(struct kvp_http_job *job, const struct kvp_usage *u, int status,
		    const char *msg);
	int (*watch_fd)(struct kvp_http_job *job);
	void (*hangup)(struct kvp_http_job *job);
};

/* What a job asks kvpoold for. */
enum kvp_http_job_kind {
	KVP_HTTP_JOB_GENERATE = 0, /* GENERATE of @prompt */
	KVP_HTTP_JOB_CHAT,	   /* CHAT of @msgs: IDS (the prompt), TOKENs, DONE */
	KVP_HTTP_JOB_CHAT_PROMPT,  /* CHAT of @msgs, prompt only: IDS, DONE (counting) */
	KVP_HTTP_JOB_TOKENIZE,	   /* TOKENIZE of @prompt.text: IDS, DONE */
	KVP_HTTP_JOB_DETOKENIZE,   /* DETOKENIZE of @prompt.tokens: IDS (text), DONE */
};

/**
 * struct kvp_http_job - one request to kvpoold as the backend sees it
 * @ops:      set by the caller
 * @kind:     set by the caller: enum kvp_http_job_kind
 * @prompt:   set by the caller for a completion: tokens or text (borrowed until @end);
 *            the text to tokenize, the ids to detokenize
 * @msgs:     set by the caller for a chat (@n_msgs, borrowed until @end)
 * @params:   sampling and cache options (the salt borrowed until @end)
 * @tok_flags: KVP_TOKENIZE_* / KVP_DETOKENIZE_* for those kinds
 * @cc, @has_cc: set by the caller: cache control sent with this request only
 *            (kvp_http_cache_map()), when @has_cc
 * @lp, @lp_top: during ops->tokens of a request asking logprobs (samp.logprobs): per id,
 *            its struct kvp_logprob then @lp_top alternatives (NULL: none came)
 * @cont:     during ops->tokens: the continuation the ids belong to (0 when n is 1)
 * @vocab:    during ops->tokens of a request asking logprobs: the pieces of ids (the
 *            backend's)
 * (the rest is the backend's)
 */
struct kvp_http_job {
	const struct kvp_http_job_ops *ops;
	enum kvp_http_job_kind kind;
	struct kvp_client_prompt prompt;
	const struct kvp_http_msg *msgs;
	size_t n_msgs;
	struct kvp_client_params params;
	unsigned int tok_flags;
	struct kvp_cache_ctl cc;
	bool has_cc;
	struct kvp_client_sampling samp; /* its pointers borrowed from the request */
	bool has_samp;
	const char *tools; /* a chat's tool definitions (JSON, borrowed), NULL: none */
	size_t tools_len;
	int thinking; /* a chat's enum kvp_client_thinking */

	const struct kvp_logprob *lp;
	uint32_t lp_top;
	uint32_t cont;
	const struct kvp_http_vocab *vocab;
	struct kvp_spec_usage su; /* DONE: its speculative decoding, when @has_su */
	bool has_su;

	struct kvp_http_job *next;
	atomic_bool cancel;
	bool cancel_sent;
	bool hung_up;
	int conn;
	uint64_t req_id;
};

/**
 * struct kvp_http_backend_info - what the last WELCOME said
 * @up:     a connection is open now
 * @known:  a WELCOME was ever received (the fields below are set)
 * @block_tokens: tokens per cache block (the pool's shape)
 */
struct kvp_http_backend_info {
	bool up;
	bool known;
	char model[65];
	uint32_t n_vocab;
	uint32_t n_ctx;
	uint32_t max_new_tokens;
	uint32_t max_prompt_tokens;
	uint32_t block_tokens;
};

/**
 * kvp_http_backend_new() - start the backend thread (and try a first connection)
 * @socket_path: kvpoold's request socket (copied)
 * @n_conns:     connections at most; @per_conn generations on each
 * @queue:       jobs that may wait for a slot when all are taken
 * Return: 0 or -errno.  An unreachable kvpoold is not an error: see the header comment.
 */
int kvp_http_backend_new(struct kvp_http_backend **out, const char *socket_path,
			 unsigned int n_conns, unsigned int per_conn, unsigned int queue);

/* Stop the thread; jobs still there end with -ESHUTDOWN.  NULL is ok. */
void kvp_http_backend_free(struct kvp_http_backend *be);

/* Room for one more job: 0, or -EBUSY when n_conns x per_conn + queue jobs are there. */
int kvp_http_backend_reserve(struct kvp_http_backend *be);

/* Give back a reservation that was not submitted. */
void kvp_http_backend_unreserve(struct kvp_http_backend *be);

/* Hand @job over (after a reservation); it ends through job->ops->end. */
void kvp_http_backend_submit(struct kvp_http_backend *be, struct kvp_http_job *job);

/* Ask for @job to be cancelled (in kvpoold if it is there); it still ends through @end. */
void kvp_http_backend_cancel(struct kvp_http_backend *be, struct kvp_http_job *job);

/* Cancel every job (shutdown). */
void kvp_http_backend_cancel_all(struct kvp_http_backend *be);

/* Make the thread look at the jobs' watch_fd() again (a job started waiting). */
void kvp_http_backend_wake(struct kvp_http_backend *be);

/* Jobs reserved or running. */
unsigned int kvp_http_backend_busy(struct kvp_http_backend *be);

/* Connections open now. */
unsigned int kvp_http_backend_up(struct kvp_http_backend *be);

/* A copy of what kvpoold announced (see struct kvp_http_backend_info). */
void kvp_http_backend_info(struct kvp_http_backend *be, struct kvp_http_backend_info *info);

#endif /* KVP_IPC_HTTP_BACKEND_H */
