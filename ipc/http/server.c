/* SPDX-License-Identifier: MIT */
/*
 * server.c - routes, limits, API keys and the life of one HTTP request (see server.h).
 *
 * One struct hreq per request, reference counted: the HTTP library holds one from the
 * request's first call to its completion callback, the backend one from submit to its
 * job's end, a streamed response one until the library frees it, the status thread one
 * while it works.  The fields under @lock are shared with the backend thread; the rest
 * belong to the HTTP thread that serves the connection.
 *
 * Suspend and resume follow one rule: whoever suspends sets @suspended and calls
 * MHD_suspend_connection() under @lock, and only the backend or status thread resumes,
 * also under @lock and only when @suspended is set, so a resume never meets a connection
 * that is not suspended (the library's undefined behaviour).  The library takes no lock
 * of ours and calls us without holding one that resume needs, so the order is always
 * @lock, then the library's.
 */
#include "ipc/http/server.h"

#include <errno.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "ipc/http/api.h"
#include "ipc/http/cache.h"
#include "ipc/http/emit.h"
#include "ipc/http/gate.h"
#include "ipc/http/head.h"
#include "ipc/http/metrics.h"
#include "ipc/http/stop.h"
#include "util/log.h"
#include "util/json.h"
#include "util/time.h"

#define ALIASES_MAX 16

struct kvp_http_server {
	const struct kvp_http_config *cfg;
	const struct kvp_http_keys *keys;
	struct kvp_http_backend *be;
	struct kvp_http_metrics metrics;
	struct MHD_Daemon *mhd[KVP_HTTP_LISTEN_MAX];
	unsigned int n_mhd;
	struct kvp_http_gate *gate; /* accepts, limits, deadlines, first heads (gate.h) */
	long long started;	    /* Unix time, the models' "created" */
	char aliases[ALIASES_MAX][65];
	unsigned int n_aliases;
	uint64_t id_prefix; /* random, so ids differ between runs */
	atomic_uint_fast64_t id_next;

	/*
	 * @stopping is set once, on SIGTERM.  @open counts requests from their headers to
	 * their completion: a drain waits for them too, not only for those the backend has,
	 * so that a request received before the signal but still reading its body (or not
	 * yet submitted) is answered rather than cut off.
	 */
	atomic_bool stopping;
	atomic_uint open;

	/* the status thread (GET /metrics) */
	pthread_t status_thread;
	bool status_started;
	pthread_mutex_t status_lock;
	pthread_cond_t status_cond;
	struct hreq *status_head;
	bool status_stop;
};

/*
 * One answer of a request (OpenAI's choices[i]): continuation i of kvpoold's parallel
 * sampling.  Under the request's lock.
 * @n_completion: its generated tokens counted (up to a stop string that matched)
 */
struct choice {
	struct kvp_http_emit emit;
	struct kvp_http_stop stop;
	uint32_t n_completion;
};

struct hreq {
	struct kvp_http_job job; /* the backend's view */
	struct kvp_http_server *srv;
	struct MHD_Connection *conn;
	atomic_int refs;
	enum kvp_http_ep ep;
	enum kvp_http_api api;
	enum kvp_http_shape shape;
	int fd;		/* the client's socket, for the backend's hang-up watch */
	void *gate_ctx; /* the connection's slot in the gate (its socket context) */
	uint64_t t0_ns;
	uint64_t t_ready_ns; /* body complete: TTFT counts from here */
	char req_id[40];

	/* the HTTP thread's */
	struct kvp_buf body;
	uint64_t body_bytes; /* received, kept or not */
	bool too_big;
	bool early;		       /* @early_err is the answer, once the body is read */
	struct kvp_http_err early_err; /* found in the headers of a POST */
	bool submitted;		       /* to the backend or the status thread */
	bool late;		       /* its headers came after SIGTERM: 503 */
	bool via_status;
	bool close;	     /* the answer closes the connection (a framing refusal) */
	unsigned int status; /* of the response queued, 0 = none */
	struct kvp_http_gen gen;
	const struct kvp_http_tenant *tenant;
	uint8_t salt[KVP_SALT_MAX];
	size_t salt_len;
	char model[128];
	uint32_t n_ctx; /* kvpoold's, for /tokenize's max_model_len */

	pthread_mutex_t lock; /* what follows, shared with the backend/status thread */
	bool suspended;
	bool first;  /* a generation event arrived */
	bool ended;  /* the job (or the status fetch) ended */
	bool gone;   /* the client went away */
	bool failed; /* ended in an error before any output: @err says which */
	bool ttft_seen;
	bool got_ids; /* a tokenizer job's answer is in @out */
	struct kvp_http_err err;
	struct choice c0;  /* choice 0, in place: the one there is unless n > 1 */
	struct choice *ch; /* the choices: &@c0, or OpenAI's n of them */
	uint32_t n_ch;
	int32_t *prompt_ids; /* chat, n > 1: the prompt kvpoold rendered (its IDS) */
	size_t n_prompt_ids;
	bool rendering;	    /* chat, n > 1: the job renders the prompt, the GENERATE follows */
	struct kvp_buf out; /* stream: bytes not sent yet; else the whole body */
	size_t out_off;
	struct kvp_buf scratch;
	struct hreq *status_next;
};

static const struct kvp_http_job_ops job_ops;

/* ------------------------------------------------------------ requests */

static void hreq_ref(struct hreq *r)
{
	atomic_fetch_add(&r->refs, 1);
}

static void hreq_unref(struct hreq *r)
{
	if (atomic_fetch_sub(&r->refs, 1) != 1)
		return;
	kvp_buf_deinit(&r->body);
	kvp_http_gen_deinit(&r->gen);
	for (uint32_t i = 0; i < r->n_ch; i++) {
		kvp_http_emit_deinit(&r->ch[i].emit);
		kvp_http_stop_deinit(&r->ch[i].stop);
	}
	if (r->ch != &r->c0)
		free(r->ch);
	free(r->prompt_ids);
	kvp_buf_deinit(&r->out);
	kvp_buf_deinit(&r->scratch);
	pthread_mutex_destroy(&r->lock);
	free(r);
}

/* A fresh id: the process's random prefix and a counter, as 24 hex digits. */
static void new_id(struct kvp_http_server *srv, char *buf, size_t cap, const char *prefix)
{
	uint64_t n = atomic_fetch_add(&srv->id_next, 1);

	snprintf(buf, cap, "%s%012llx%012llx", prefix,
		 (unsigned long long)(srv->id_prefix & 0xffffffffffffull),
		 (unsigned long long)(n & 0xffffffffffffull));
}

/* splitmix64: a sampler seed for a request that gave none */
static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* ------------------------------------------------------------ responses */

static void add_common_headers(struct hreq *r, struct MHD_Response *resp)
{
	MHD_add_response_header(resp, "x-request-id", r->req_id);
	MHD_add_response_header(resp, "request-id", r->req_id);
	if (r->close || atomic_load(&r->srv->stopping))
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
}

/* Queue @b (its text is handed to the library) with @status.  Return: MHD_YES/NO. */
static enum MHD_Result queue_buf(struct hreq *r, unsigned int status, struct kvp_buf *b,
				 const char *type)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	if (kvp_buf_finish(b) < 0) {
		kvp_buf_deinit(b);
		kvp_log(LOG_ERR, "http: %s: out of memory for the answer", r->req_id);
		return MHD_NO;
	}
	if (!b->p)
		kvp_buf_add(b, "", 0);
	resp = MHD_create_response_from_buffer(b->len, b->p, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		kvp_buf_deinit(b);
		return MHD_NO;
	}
	*b = (struct kvp_buf)KVP_BUF_INIT; /* the library frees it now */
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	add_common_headers(r, resp);
	if (status == 429 || status == 503)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
	if (status == 501)
		/* both SDKs retry 5xx unless told not to: this one will not change by retrying */
		MHD_add_response_header(resp, "x-should-retry", "false");
	if (status == 405)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW,
					r->ep == KVP_HTTP_EP_MODELS ||
							r->ep == KVP_HTTP_EP_HEALTH ||
							r->ep == KVP_HTTP_EP_METRICS ?
						"GET" :
						"POST");
	ret = MHD_queue_response(r->conn, status, resp);
	MHD_destroy_response(resp);
	if (ret == MHD_YES)
		r->status = status;
	return ret;
}

static enum MHD_Result queue_json(struct hreq *r, unsigned int status, struct kvp_buf *b)
{
	return queue_buf(r, status, b, "application/json");
}

static enum MHD_Result queue_error(struct hreq *r, const struct kvp_http_err *e)
{
	struct kvp_buf b = KVP_BUF_INIT;

	kvp_http_err_json(e, r->shape, &b);
	return queue_json(r, e->status, &b);
}

static enum MHD_Result fail(struct hreq *r, unsigned int status, const char *code,
			    const char *param, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static enum MHD_Result fail(struct hreq *r, unsigned int status, const char *code,
			    const char *param, const char *fmt, ...)
{
	struct kvp_http_err e = { .status = status, .code = code, .param = param };
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(e.message, sizeof(e.message), fmt, ap);
	va_end(ap);
	return queue_error(r, &e);
}

/*
 * kvpoold's context refusal ("context: N + M > C: ...") in the words of @api's own
 * service, which clients and frameworks match on.  false: @msg is another limit.
 */
static bool context_error(enum kvp_http_api api, const char *msg, struct kvp_http_err *e)
{
	unsigned int n, m, c;

	if (!msg || sscanf(msg, "context: %u + %u > %u:", &n, &m, &c) != 3)
		return false;
	if (api == KVP_HTTP_API_MESSAGES)
		kvp_http_err_set(
			e, 400, "context_length_exceeded", NULL,
			"input length and `max_tokens` exceed context limit: %u + %u > %u, "
			"decrease input length or `max_tokens` and try again",
			n, m, c);
	else
		kvp_http_err_set(e, 400, "context_length_exceeded",
				 api == KVP_HTTP_API_COMPLETIONS ? "prompt" : "messages",
				 "This model's maximum context length is %u tokens. However, you "
				 "requested %u tokens (%u in the %s, %u in the completion). Please "
				 "reduce the length of the %s or completion.",
				 c, n + m, n,
				 api == KVP_HTTP_API_COMPLETIONS ? "prompt" : "messages", m,
				 api == KVP_HTTP_API_COMPLETIONS ? "prompt" : "messages");
	return true;
}

/* What a backend status means to an HTTP client of @api. */
static void map_status(enum kvp_http_api api, int status, const char *msg, struct kvp_http_err *e)
{
	const char *m = msg && *msg ? msg : NULL;

	switch (status) {
	case -ENOTCONN:
		kvp_http_err_set(e, 503, "backend_unavailable", NULL, "%s",
				 m ? m : "kvpoold is not reachable");
		break;
	case -ESHUTDOWN:
	case KVP_E_SHUTDOWN:
	case KVP_E_CANCELLED:
		kvp_http_err_set(e, 503, "service_unavailable", NULL, "%s",
				 status == -ESHUTDOWN ?
					 "kvpool-http is stopping" :
				 status == KVP_E_SHUTDOWN ?
					 "kvpoold is stopping" :
					 "the request was cancelled (the server is stopping)");
		break;
	case -EINVAL:
	case -EMSGSIZE:
	case KVP_E_INVALID:
		kvp_http_err_set(e, 400, NULL, NULL, "%s", m ? m : "invalid request");
		break;
	case KVP_E_LIMIT:
	case KVP_E_NOSPACE:
		if (status == KVP_E_LIMIT && context_error(api, m, e))
			break;
		kvp_http_err_set(e, 400, "context_length_exceeded", NULL, "%s",
				 m ? m : "the request exceeds the server's limits");
		break;
	case KVP_E_BUSY:
		kvp_http_err_set(e, 429, "rate_limit_exceeded", NULL, "%s",
				 m ? m : "kvpoold is busy; retry later");
		break;
	default:
		kvp_http_err_set(e, 500, "server_error", NULL, "kvpoold failed: %s",
				 m ? m : kvp_client_strerror(status));
		break;
	}
}

/* ------------------------------------------------------------ the backend's ops */

/* Resume a suspended connection; under @r->lock. */
static void resume_locked(struct hreq *r)
{
	if (!r->suspended)
		return;
	r->suspended = false;
	MHD_resume_connection(r->conn);
}

/* Every choice has matched a stop string: nothing more of the generation is wanted. */
static bool all_stopped(const struct hreq *r)
{
	for (uint32_t i = 0; i < r->n_ch; i++)
		if (!r->ch[i].stop.hit)
			return false;
	return true;
}

static bool on_tokens(struct kvp_http_job *job, const int32_t *ids, uint32_t n_ids,
		      const char *text, uint32_t len)
{
	struct hreq *r = (struct hreq *)job;
	struct kvp_http_server *srv = r->srv;
	struct choice *ch = &r->ch[job->cont < r->n_ch ? job->cont : 0];
	bool cancel;

	pthread_mutex_lock(&r->lock);
	if (r->gone) {
		pthread_mutex_unlock(&r->lock);
		return true;
	}
	if (!r->ttft_seen) {
		r->ttft_seen = true;
		kvp_http_metrics_ttft(&srv->metrics, r->ep,
				      kvp_ns_to_s(kvp_now_ns() - r->t_ready_ns));
	}
	if (!ch->stop.hit) {
		ch->n_completion += n_ids;
		if (r->gen.logprobs && job->lp)
			kvp_http_emit_logprobs(&ch->emit, job->vocab, job->lp, n_ids, job->lp_top);
		r->scratch.len = 0;
		kvp_http_stop_feed(&ch->stop, text, len, &r->scratch);
		kvp_http_emit_text(&ch->emit, &r->out, r->scratch.p ? r->scratch.p : "",
				   r->scratch.len, ids, n_ids);
	}
	/* one continuation cannot be cancelled alone: the request, once all have matched */
	cancel = all_stopped(r);
	if (r->out.err || r->scratch.err ||
	    (r->gen.stream && r->out.len - r->out_off > srv->cfg->stream_buffer_bytes)) {
		/* the client reads slower than it asks for text (or memory ran out): cut it */
		if (!r->out.err && !r->scratch.err)
			atomic_fetch_add(&srv->metrics.overflows, 1);
		r->gone = true;
		cancel = true;
	}
	/* a stream wakes for its first event (its headers go then) and for new bytes; a
	 * plain answer only at its end */
	if (r->gone || (r->gen.stream && (!r->first || r->out.len > r->out_off)))
		resume_locked(r);
	r->first = true;
	pthread_mutex_unlock(&r->lock);
	return cancel;
}

/* The prompt's counts, before the first tokens: Anthropic's message_start reports them. */
static void on_usage(struct kvp_http_job *job, const struct kvp_usage *u)
{
	struct hreq *r = (struct hreq *)job;

	pthread_mutex_lock(&r->lock);
	r->ch[0].emit.start = *u;
	r->ch[0].emit.has_start = true;
	pthread_mutex_unlock(&r->lock);
}

/*
 * A tokenizer job's answer; a chat of n > 1 choices keeps its rendered prompt for the
 * GENERATE that follows (a chat's own prompt ids are not needed: DONE counts them).
 */
static void on_ids(struct kvp_http_job *job, const int32_t *ids, uint32_t n_ids, const char *text,
		   uint32_t len)
{
	struct hreq *r = (struct hreq *)job;

	if (job->kind == KVP_HTTP_JOB_GENERATE || job->kind == KVP_HTTP_JOB_CHAT)
		return;
	pthread_mutex_lock(&r->lock);
	if (r->rendering) {
		free(r->prompt_ids);
		r->prompt_ids = n_ids ? malloc(n_ids * sizeof(*ids)) : NULL;
		if (r->prompt_ids)
			memcpy(r->prompt_ids, ids, n_ids * sizeof(*ids));
		r->n_prompt_ids = r->prompt_ids ? n_ids : 0;
		r->got_ids = true;
		pthread_mutex_unlock(&r->lock);
		return;
	}
	r->out.len = 0;
	kvp_http_emit_ids(&r->ch[0].emit, &r->out, ids, n_ids, text, len, r->n_ctx);
	r->got_ids = true;
	pthread_mutex_unlock(&r->lock);
}

/*
 * A chat of n > 1 choices: kvpoold's CHAT samples one continuation, so the prompt is
 * rendered first (CHAT, prompt only) and its ids sent as a GENERATE of n continuations,
 * with the same sampling section and limits.  true: the GENERATE is on its way (the
 * backend keeps its reference); false: @r ends now, @status and @msg say why.
 */
static bool chat_then_generate(struct hreq *r, const struct kvp_usage *u, int *status,
			       const char **msg)
{
	struct kvp_http_server *srv = r->srv;

	pthread_mutex_lock(&r->lock);
	r->rendering = false;
	if (!u || *status != KVP_OK || r->gone) {
		pthread_mutex_unlock(&r->lock);
		return false;
	}
	if (!r->got_ids || !r->n_prompt_ids) {
		pthread_mutex_unlock(&r->lock);
		*status = KVP_E_INTERNAL;
		*msg = r->got_ids ? "out of memory" : "kvpoold rendered no prompt";
		return false;
	}
	r->got_ids = false;
	pthread_mutex_unlock(&r->lock);
	if (kvp_http_backend_reserve(srv->be)) {
		*status = KVP_E_BUSY;
		*msg = "too many requests in flight and waiting; retry later";
		return false;
	}
	r->job.kind = KVP_HTTP_JOB_GENERATE;
	r->job.prompt = (struct kvp_client_prompt){ .tokens = r->prompt_ids,
						    .n_tokens = r->n_prompt_ids };
	r->job.msgs = NULL;
	r->job.n_msgs = 0;
	r->job.tools = NULL;
	r->job.tools_len = 0;
	kvp_http_backend_submit(srv->be, &r->job);
	return true;
}

/* Why choice @ch ended (@gen: its generated tokens, @stopped: at a stop string). */
static enum kvp_http_finish finish_of(const struct hreq *r, const struct kvp_usage *u, uint32_t gen,
				      bool stopped)
{
	if (stopped)
		return KVP_HTTP_FINISH_STOP;
	if (gen >= r->job.params.max_new_tokens ||
	    (r->job.params.fit_context && r->n_ctx && u->prompt_tokens + gen >= r->n_ctx))
		return KVP_HTTP_FINISH_LENGTH;
	return KVP_HTTP_FINISH_EOS;
}

static void on_end(struct kvp_http_job *job, const struct kvp_usage *u, int status, const char *msg)
{
	struct hreq *r = (struct hreq *)job;
	struct kvp_http_server *srv = r->srv;
	bool ok, tok;

	if (r->rendering && chat_then_generate(r, u, &status, &msg))
		return; /* the same request, its second job */
	ok = u && (status == KVP_OK || (status == KVP_E_CANCELLED && all_stopped(r)));
	tok = job->kind != KVP_HTTP_JOB_GENERATE && job->kind != KVP_HTTP_JOB_CHAT;
	atomic_fetch_sub(&srv->metrics.in_flight, 1);
	pthread_mutex_lock(&r->lock);
	r->ended = true;
	if (ok && tok && !r->got_ids) {
		ok = false;
		status = KVP_E_INTERNAL;
		msg = "kvpoold ended the request without its answer";
	}
	if (ok && tok) {
		if (r->out.err)
			r->gone = true; /* no memory for the answer: close rather than lie */
	} else if (ok) {
		struct kvp_http_emit *e[KVP_PARALLEL_MAX];
		enum kvp_http_finish fin[KVP_PARALLEL_MAX];
		uint32_t completion = 0;

		for (uint32_t i = 0; i < r->n_ch; i++) {
			struct choice *ch = &r->ch[i];

			if (!ch->stop.hit) {
				r->scratch.len = 0;
				kvp_http_stop_flush(&ch->stop, &r->scratch);
				if (r->scratch.len)
					kvp_http_emit_text(&ch->emit, &r->out, r->scratch.p,
							   r->scratch.len, NULL, 0);
				/* one choice: kvpoold's count (it includes what no TOKEN
				 * showed); several: each one's own */
				if (r->n_ch == 1)
					ch->n_completion = u->generated_tokens;
			}
			fin[i] = finish_of(r, u, ch->n_completion, ch->stop.hit);
			ch->emit.has_su = job->has_su;
			ch->emit.su = job->su;
			e[i] = &ch->emit;
			completion += ch->n_completion;
		}
		if (r->n_ch == 1)
			kvp_http_emit_finish(&r->ch[0].emit, &r->out, fin[0],
					     r->ch[0].stop.hit ? r->gen.stop[r->ch[0].stop.which] :
								 NULL,
					     r->ch[0].stop.hit ?
						     r->gen.stop_len[r->ch[0].stop.which] :
						     0,
					     u, completion);
		else
			kvp_http_emit_finish_n(e, r->n_ch, &r->out, fin, u, completion);
		kvp_http_metrics_usage(&srv->metrics, u->prompt_tokens, u->cached_tokens,
				       u->cache_creation_tokens, u->generated_tokens);
		if (r->out.err)
			r->gone = true; /* no memory for the answer: close rather than lie */
	} else if (!r->gone) {
		map_status(r->api, status, msg, &r->err);
		if (status == -ENOTCONN)
			atomic_fetch_add(&srv->metrics.backend_lost, 1);
		if (r->err.status == 429)
			atomic_fetch_add(&srv->metrics.busy, 1);
		if (r->gen.stream && r->first)
			kvp_http_emit_error(&r->ch[0].emit, &r->out, &r->err);
		else
			r->failed = true;
		kvp_log(LOG_DEBUG, "http: %s: %s", r->req_id, r->err.message);
	}
	resume_locked(r);
	pthread_mutex_unlock(&r->lock);
	hreq_unref(r); /* the backend's reference */
}

static int on_watch_fd(struct kvp_http_job *job)
{
	struct hreq *r = (struct hreq *)job;
	int fd;

	pthread_mutex_lock(&r->lock);
	fd = r->suspended && !r->gone ? r->fd : -1;
	pthread_mutex_unlock(&r->lock);
	return fd;
}

static void on_hangup(struct kvp_http_job *job)
{
	struct hreq *r = (struct hreq *)job;

	pthread_mutex_lock(&r->lock);
	if (!r->gone) {
		r->gone = true;
		atomic_fetch_add(&r->srv->metrics.disconnects, 1);
	}
	resume_locked(r); /* the library then closes the connection */
	pthread_mutex_unlock(&r->lock);
}

static const struct kvp_http_job_ops job_ops = {
	.tokens = on_tokens,
	.ids = on_ids,
	.usage = on_usage,
	.end = on_end,
	.watch_fd = on_watch_fd,
	.hangup = on_hangup,
};

/* ------------------------------------------------------------ streaming */

static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct hreq *r = cls;
	size_t n;

	pthread_mutex_lock(&r->lock);
	if (r->gone) {
		pthread_mutex_unlock(&r->lock);
		return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	n = r->out.len - r->out_off;
	if (n) {
		if (n > max)
			n = max;
		memcpy(buf, r->out.p + r->out_off, n);
		r->out_off += n;
		if (r->out_off == r->out.len) {
			r->out_off = r->out.len = 0;
			r->out.p[0] = '\0';
		}
		pthread_mutex_unlock(&r->lock);
		return (ssize_t)n;
	}
	if (r->ended) {
		pthread_mutex_unlock(&r->lock);
		return MHD_CONTENT_READER_END_OF_STREAM;
	}
	/* nothing to send yet: wait off the HTTP thread until the backend has more */
	r->suspended = true;
	MHD_suspend_connection(r->conn);
	pthread_mutex_unlock(&r->lock);
	kvp_http_backend_wake(r->srv->be); /* watch this socket for a hang-up meanwhile */
	return 0;
}

static void free_stream(void *cls)
{
	hreq_unref(cls);
}

static enum MHD_Result queue_stream(struct hreq *r)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, read_stream, r,
						 free_stream);
	if (!resp)
		return MHD_NO;
	hreq_ref(r); /* the response's */
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(resp, "X-Accel-Buffering", "no");
	add_common_headers(r, resp);
	ret = MHD_queue_response(r->conn, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	if (ret == MHD_YES)
		r->status = MHD_HTTP_OK;
	return ret;
}

/* ------------------------------------------------------------ GET endpoints */

static bool model_known(struct kvp_http_server *srv, const struct kvp_http_backend_info *info,
			const char *name)
{
	if (!strcmp(name, info->model))
		return true;
	for (unsigned int i = 0; i < srv->n_aliases; i++)
		if (!strcmp(name, srv->aliases[i]))
			return true;
	return false;
}

/* One model object, readable by both SDKs (OpenAI's and Anthropic's fields). */
static void model_json(struct kvp_http_server *srv, struct kvp_json *j, const char *name)
{
	char when[32];
	time_t t = (time_t)srv->started;
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	kvp_json_begin(j, NULL, '{');
	kvp_json_str(j, "id", name, strlen(name));
	kvp_json_str(j, "object", "model", 5);
	kvp_json_i64(j, "created", srv->started);
	kvp_json_str(j, "owned_by", "kvpool", 6);
	kvp_json_str(j, "type", "model", 5);
	kvp_json_str(j, "display_name", name, strlen(name));
	kvp_json_str(j, "created_at", when, strlen(when));
	kvp_json_end(j, '}');
}

static enum MHD_Result get_models(struct hreq *r, const char *url)
{
	struct kvp_http_server *srv = r->srv;
	struct kvp_http_backend_info info;
	struct kvp_buf b = KVP_BUF_INIT;
	const char *one = NULL;
	struct kvp_json j;

	kvp_http_backend_info(srv->be, &info);
	if (!info.known)
		return fail(r, 503, "backend_unavailable", NULL,
			    "kvpoold is not reachable at %s: the model is not known yet",
			    srv->cfg->socket_path);
	if (!strncmp(url, "/v1/models/", 11)) {
		one = url + 11;
		if (!model_known(srv, &info, one))
			return fail(r, 404, "model_not_found", "model",
				    "The model '%s' does not exist", one);
		kvp_json_init(&j, &b);
		model_json(srv, &j, one);
		return queue_json(r, 200, &b);
	}
	kvp_json_init(&j, &b);
	kvp_json_begin(&j, NULL, '{');
	kvp_json_str(&j, "object", "list", 4);
	kvp_json_begin(&j, "data", '[');
	model_json(srv, &j, info.model);
	for (unsigned int i = 0; i < srv->n_aliases; i++)
		model_json(srv, &j, srv->aliases[i]);
	kvp_json_end(&j, ']');
	kvp_json_bool(&j, "has_more", false);
	kvp_json_str(&j, "first_id", info.model, strlen(info.model));
	if (srv->n_aliases)
		kvp_json_str(&j, "last_id", srv->aliases[srv->n_aliases - 1],
			     strlen(srv->aliases[srv->n_aliases - 1]));
	else
		kvp_json_str(&j, "last_id", info.model, strlen(info.model));
	kvp_json_end(&j, '}');
	return queue_json(r, 200, &b);
}

static enum MHD_Result get_health(struct hreq *r)
{
	struct kvp_http_server *srv = r->srv;
	struct kvp_http_backend_info info;
	struct kvp_buf b = KVP_BUF_INIT;
	struct kvp_json j;
	bool ok;

	kvp_http_backend_info(srv->be, &info);
	ok = info.up && !atomic_load(&srv->stopping);
	kvp_json_init(&j, &b);
	kvp_json_begin(&j, NULL, '{');
	if (ok)
		kvp_json_str(&j, "status", "ok", 2);
	else
		kvp_json_str(&j, "status", "unavailable", 11);
	if (info.known)
		kvp_json_str(&j, "model", info.model, strlen(info.model));
	kvp_json_u64(&j, "backend_connections", kvp_http_backend_up(srv->be));
	kvp_json_u64(&j, "in_flight", kvp_http_backend_busy(srv->be));
	kvp_json_u64(&j, "requests_open", kvp_http_server_open(srv) - 1); /* this one aside */
	if (!ok) {
		char why[256];

		snprintf(why, sizeof(why), "%s",
			 atomic_load(&srv->stopping) ?
				 "kvpool-http is stopping" :
				 "no connection to kvpoold (see kvpool-http's log)");
		kvp_json_str(&j, "error", why, strlen(why));
	}
	kvp_json_end(&j, '}');
	return queue_json(r, ok ? 200 : 503, &b);
}

/* The status thread: /metrics needs kvpoold's report, a blocking socket round trip. */
static void *status_main(void *arg)
{
	struct kvp_http_server *srv = arg;

	pthread_mutex_lock(&srv->status_lock);
	for (;;) {
		struct hreq *r = srv->status_head;
		char *prom = NULL;
		size_t len = 0;
		int rc;

		if (!r) {
			if (srv->status_stop)
				break;
			pthread_cond_wait(&srv->status_cond, &srv->status_lock);
			continue;
		}
		srv->status_head = r->status_next;
		pthread_mutex_unlock(&srv->status_lock);

		rc = srv->status_stop ?
			     -ESHUTDOWN :
			     kvp_client_status(srv->cfg->status_path, "prom", &prom, &len);
		pthread_mutex_lock(&r->lock);
		kvp_http_metrics_prom(&srv->metrics, kvp_http_backend_up(srv->be), &r->out);
		kvp_buf_printf(&r->out,
			       "# HELP kvpool_http_backend_status_up Whether kvpoold's status "
			       "report could be read.\n# TYPE kvpool_http_backend_status_up gauge\n"
			       "kvpool_http_backend_status_up %d\n",
			       rc ? 0 : 1);
		if (rc)
			kvp_buf_printf(&r->out, "# kvpoold status %s: %s\n", srv->cfg->status_path,
				       strerror(-rc));
		else
			kvp_buf_add(&r->out, prom, len);
		r->ended = true;
		resume_locked(r);
		pthread_mutex_unlock(&r->lock);
		free(prom);
		hreq_unref(r);
		pthread_mutex_lock(&srv->status_lock);
	}
	pthread_mutex_unlock(&srv->status_lock);
	return NULL;
}

static enum MHD_Result get_metrics(struct hreq *r)
{
	struct kvp_http_server *srv = r->srv;
	bool queued = false;

	pthread_mutex_lock(&r->lock);
	r->suspended = true;
	MHD_suspend_connection(r->conn);
	pthread_mutex_unlock(&r->lock);
	hreq_ref(r);
	r->submitted = r->via_status = true;
	pthread_mutex_lock(&srv->status_lock);
	if (!srv->status_stop) {
		r->status_next = srv->status_head;
		srv->status_head = r;
		queued = true;
		pthread_cond_signal(&srv->status_cond);
	}
	pthread_mutex_unlock(&srv->status_lock);
	if (!queued) {
		pthread_mutex_lock(&r->lock);
		r->ended = r->failed = true;
		kvp_http_err_set(&r->err, 503, "service_unavailable", NULL,
				 "kvpool-http is stopping");
		resume_locked(r);
		pthread_mutex_unlock(&r->lock);
		hreq_unref(r);
	}
	return MHD_YES;
}

/* ------------------------------------------------------------ POST endpoints */

/* The caller's tenant from Authorization: Bearer KEY or x-api-key: KEY; false: @e says no. */
static bool check_key(struct hreq *r, struct kvp_http_err *e)
{
	const struct kvp_http_keys *keys = r->srv->keys;
	const char *h, *key = NULL;

	if (!keys->n_keys)
		return true; /* no key file: loopback only, every caller is welcome */
	h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (h && !strncasecmp(h, "Bearer ", 7)) {
		key = h + 7;
		while (*key == ' ')
			key++;
	}
	if (!key)
		key = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "x-api-key");
	if (!key) {
		kvp_http_err_set(
			e, 401, "invalid_api_key", NULL,
			"missing API key: send Authorization: Bearer KEY or x-api-key: KEY");
		return false;
	}
	r->tenant = kvp_http_keys_find(keys, key, strlen(key));
	if (!r->tenant) {
		kvp_http_err_set(e, 401, "invalid_api_key", NULL, "invalid API key");
		return false;
	}
	return true;
}

/* The cache salt kvpoold gets: the tenant's, then the request's cache_salt. */
static bool make_salt(struct hreq *r, struct kvp_http_err *e)
{
	const struct kvp_http_gen *g = &r->gen;
	size_t need;

	if (!r->tenant) {
		if (g->cache_salt_len)
			memcpy(r->salt, g->cache_salt, g->cache_salt_len);
		r->salt_len = g->cache_salt_len;
		return true;
	}
	/* [length of the tenant's salt] tenant salt, cache_salt: never ambiguous */
	need = 1 + r->tenant->salt_len + g->cache_salt_len;
	if (need > KVP_SALT_MAX) {
		kvp_http_err_set(e, 400, NULL, "cache_salt",
				 "cache_salt: at most %zu bytes with this API key",
				 (size_t)KVP_SALT_MAX - 1 - r->tenant->salt_len);
		return false;
	}
	r->salt[0] = (uint8_t)r->tenant->salt_len;
	memcpy(r->salt + 1, r->tenant->salt, r->tenant->salt_len);
	if (g->cache_salt_len)
		memcpy(r->salt + 1 + r->tenant->salt_len, g->cache_salt, g->cache_salt_len);
	r->salt_len = need;
	return true;
}

/* The job a tokenizer endpoint sends; false for the generating ones. */
static bool tokenizer_job(struct hreq *r)
{
	struct kvp_http_gen *g = &r->gen;

	switch (r->api) {
	case KVP_HTTP_API_COUNT_TOKENS:
		r->job.kind = KVP_HTTP_JOB_CHAT_PROMPT;
		break;
	case KVP_HTTP_API_TOKENIZE:
		/* the chat form counts as a chat completion would; text as a completion */
		r->job.kind = g->msgs ? KVP_HTTP_JOB_CHAT_PROMPT : KVP_HTTP_JOB_TOKENIZE;
		r->job.tok_flags = g->no_special ? KVP_TOKENIZE_NO_BOS : 0;
		break;
	case KVP_HTTP_API_DETOKENIZE:
		r->job.kind = KVP_HTTP_JOB_DETOKENIZE;
		break;
	default:
		return false;
	}
	r->job.prompt.text = g->text;
	r->job.prompt.text_len = g->text_len;
	r->job.prompt.tokens = g->tokens;
	r->job.prompt.n_tokens = g->n_tokens;
	r->job.msgs = g->msgs;
	r->job.n_msgs = g->n_msgs;
	g->stream = false; /* a body copied from a streamed call: one JSON answer all the same */
	return true;
}

/* A generating endpoint's job: sampling, priority and cache options.  false: @e says why. */
static bool generation_job(struct hreq *r, const struct kvp_http_backend_info *info,
			   struct kvp_http_err *e)
{
	struct kvp_http_server *srv = r->srv;
	const struct kvp_http_gen *g = &r->gen;
	struct kvp_client_params *p = &r->job.params;

	kvp_client_params_init(p);
	p->max_new_tokens = g->max_tokens ? g->max_tokens :
			    r->api == KVP_HTTP_API_COMPLETIONS ? 16 : /* OpenAI's default */
								   info->max_new_tokens;
	/* a chat that names no limit may use what the context leaves after its prompt */
	p->fit_context = !g->max_tokens && r->api == KVP_HTTP_API_CHAT;
	if (info->max_new_tokens && p->max_new_tokens > info->max_new_tokens) {
		kvp_http_err_set(e, 400, "context_length_exceeded",
				 r->api == KVP_HTTP_API_CHAT ? "max_completion_tokens" :
							       "max_tokens",
				 "max_tokens %u exceeds this server's limit of %u",
				 p->max_new_tokens, info->max_new_tokens);
		return false;
	}
	p->temperature = g->temperature;
	p->top_p = g->top_p;
	p->top_k = g->top_k;
	p->seed = g->has_seed ? g->seed : mix(srv->id_prefix ^ atomic_fetch_add(&srv->id_next, 1));
	/* vLLM's: lower first; kvpoold's: higher first.  None in the body: kvpoold gives
	 * the request its trust domain's default */
	p->priority = g->has_priority ? -g->priority : KVP_PRIORITY_DEFAULT;
	p->speculative = g->speculative;
	kvp_http_cache_map(p, &r->job.cc, &r->job.has_cc, g,
			   (enum kvp_http_anthropic_cache)srv->cfg->anthropic_cache);
	r->job.samp = (struct kvp_client_sampling){ .presence_penalty = g->presence,
						    .frequency_penalty = g->frequency,
						    .bias_ids = g->bias_ids,
						    .bias = g->bias,
						    .n_bias = g->n_bias,
						    .grammar = g->grammar,
						    .schema = g->schema,
						    .schema_len = g->schema_len,
						    .logprobs = g->logprobs,
						    .top_logprobs = g->top_logprobs,
						    .think_budget = g->think_budget };
	r->job.has_samp = g->grammar || g->n_bias || g->presence != 0 || g->frequency != 0 ||
			  g->logprobs || g->think_budget;
	if (g->n > 1) {
		/* kvpoold's parallel sampling: the prompt computed once, continuation i
		 * seeded seed + i */
		r->job.cc.n = g->n;
		r->job.has_cc = true;
	}
	if (g->msgs) {
		/* n > 1: CHAT samples one continuation; render first, then GENERATE */
		r->rendering = g->n > 1;
		r->job.kind = r->rendering ? KVP_HTTP_JOB_CHAT_PROMPT : KVP_HTTP_JOB_CHAT;
		r->job.msgs = g->msgs;
		r->job.n_msgs = g->n_msgs;
	} else {
		r->job.kind = KVP_HTTP_JOB_GENERATE;
		r->job.prompt.text = g->text;
		r->job.prompt.text_len = g->text_len;
		r->job.prompt.tokens = g->tokens;
		r->job.prompt.n_tokens = g->n_tokens;
	}
	return true;
}

/* The body is complete: parse, check, and hand the request to the backend. */
static enum MHD_Result post_ready(struct hreq *r)
{
	struct kvp_http_server *srv = r->srv;
	struct kvp_http_backend_info info;
	struct kvp_http_gen *g = &r->gen;
	struct kvp_http_err e;
	const char *prefix;
	char id[48];
	int rc;

	if (r->too_big)
		return fail(r, 413, "request_too_large", NULL,
			    "the request body is larger than %llu bytes",
			    (unsigned long long)srv->cfg->max_body_bytes);
	kvp_http_backend_info(srv->be, &info);
	rc = kvp_http_parse(g, r->api, r->body.p ? r->body.p : "", r->body.len, info.n_vocab, &e);
	kvp_buf_deinit(&r->body);
	if (rc == -ENOMEM)
		return fail(r, 500, "server_error", NULL, "out of memory");
	if (rc)
		return queue_error(r, &e);
	if (!info.known)
		return fail(r, 503, "backend_unavailable", NULL, "kvpoold is not reachable at %s",
			    srv->cfg->socket_path);
	if (g->model && !model_known(srv, &info, g->model))
		return fail(r, 404, "model_not_found", "model",
			    "The model '%s' does not exist; this server has '%s' (GET /v1/models)",
			    g->model, info.model);
	snprintf(r->model, sizeof(r->model), "%s", g->model ? g->model : info.model);
	r->n_ctx = info.n_ctx;
	if (!make_salt(r, &e))
		return queue_error(r, &e);
	if (!tokenizer_job(r) && !generation_job(r, &info, &e))
		return queue_error(r, &e);
	r->job.params.salt = r->salt;
	r->job.params.salt_len = r->salt_len;
	r->job.tools = g->tools;
	r->job.tools_len = g->tools_len;
	r->job.thinking = g->thinking == KVP_HTTP_THINK_ON  ? KVP_THINKING_ON :
			  g->thinking == KVP_HTTP_THINK_OFF ? KVP_THINKING_OFF :
							      KVP_THINKING_DEFAULT;
	r->job.ops = &job_ops;

	prefix = r->api == KVP_HTTP_API_CHAT	 ? "chatcmpl-" :
		 r->api == KVP_HTTP_API_MESSAGES ? "msg_" :
						   "cmpl-";
	new_id(srv, id, sizeof(id), prefix);
	if (g->n > 1) {
		r->ch = calloc(g->n, sizeof(*r->ch));
		if (!r->ch) {
			r->ch = &r->c0;
			return fail(r, 500, "server_error", NULL, "out of memory");
		}
		r->n_ch = g->n;
	}
	for (uint32_t i = 0; i < r->n_ch; i++) {
		struct kvp_http_emit *em = &r->ch[i].emit;

		kvp_http_emit_init(em, r->api, g->stream, g->include_usage, g->return_token_ids, id,
				   (long long)time(NULL), r->model);
		em->index = i;
		em->block_tokens = info.block_tokens;
		em->logprobs = g->logprobs;
		if (g->n_tools && g->tool_choice != KVP_HTTP_TOOLS_NONE)
			kvp_http_emit_tools(em, g->tool_names, g->n_tools,
					    g->tool_choice == KVP_HTTP_TOOLS_REQUIRED ||
						    g->tool_choice == KVP_HTTP_TOOLS_NAMED);
		if ((r->api == KVP_HTTP_API_CHAT || r->api == KVP_HTTP_API_MESSAGES) &&
		    g->thinking != KVP_HTTP_THINK_OFF)
			kvp_http_emit_thinking(em);
		em->think_omit = g->think_omit;
		kvp_http_stop_init(&r->ch[i].stop, g->stop, g->stop_len, g->n_stop);
	}

	rc = r->late ? -ESHUTDOWN : kvp_http_backend_reserve(srv->be);
	if (rc == -ESHUTDOWN)
		return fail(r, 503, "service_unavailable", NULL, "kvpool-http is stopping");
	if (rc) {
		atomic_fetch_add(&srv->metrics.busy, 1);
		return fail(r, 429, "rate_limit_exceeded", NULL,
			    "too many requests in flight (%u) and waiting (%u); retry later",
			    srv->cfg->backend_conns * srv->cfg->backend_reqs_per_conn,
			    srv->cfg->backend_queue);
	}
	/* suspend before the backend can answer: it resumes only what is suspended */
	pthread_mutex_lock(&r->lock);
	r->suspended = true;
	MHD_suspend_connection(r->conn);
	pthread_mutex_unlock(&r->lock);
	r->submitted = true;
	r->t_ready_ns = kvp_now_ns();
	hreq_ref(r); /* the backend's */
	atomic_fetch_add(&srv->metrics.in_flight, 1);
	kvp_http_backend_submit(srv->be, &r->job);
	return MHD_YES;
}

/* Called again after a resume: answer with what the backend (or status thread) left. */
static enum MHD_Result resumed(struct hreq *r)
{
	struct kvp_http_err e;
	bool gone, failed, ended;

	pthread_mutex_lock(&r->lock);
	gone = r->gone;
	failed = r->failed;
	ended = r->ended;
	e = r->err;
	pthread_mutex_unlock(&r->lock);
	if (gone)
		return MHD_NO; /* closes the connection */
	if (failed)
		return queue_error(r, &e);
	if (r->via_status) {
		struct kvp_buf b;

		pthread_mutex_lock(&r->lock);
		b = r->out;
		r->out = (struct kvp_buf)KVP_BUF_INIT;
		pthread_mutex_unlock(&r->lock);
		return queue_buf(r, 200, &b, "text/plain; version=0.0.4; charset=utf-8");
	}
	if (r->gen.stream)
		return queue_stream(r);
	if (!ended)
		return MHD_NO; /* cannot happen: a plain answer resumes only at its end */
	{
		struct kvp_buf b;

		pthread_mutex_lock(&r->lock);
		b = r->out;
		r->out = (struct kvp_buf)KVP_BUF_INIT;
		pthread_mutex_unlock(&r->lock);
		return queue_json(r, 200, &b);
	}
}

/* ------------------------------------------------------------ routing */

struct route {
	const char *path;
	bool prefix; /* @path is a prefix (/v1/models/{id}) */
	bool post;
	enum kvp_http_ep ep;
	enum kvp_http_api api; /* POST: the body's shape */
};

static const struct route routes[] = {
	{ "/v1/completions", false, true, KVP_HTTP_EP_COMPLETIONS, KVP_HTTP_API_COMPLETIONS },
	{ "/v1/chat/completions", false, true, KVP_HTTP_EP_CHAT, KVP_HTTP_API_CHAT },
	{ "/v1/messages", false, true, KVP_HTTP_EP_MESSAGES, KVP_HTTP_API_MESSAGES },
	{ "/v1/messages/count_tokens", false, true, KVP_HTTP_EP_TOKENIZE,
	  KVP_HTTP_API_COUNT_TOKENS },
	{ "/tokenize", false, true, KVP_HTTP_EP_TOKENIZE, KVP_HTTP_API_TOKENIZE },
	{ "/detokenize", false, true, KVP_HTTP_EP_DETOKENIZE, KVP_HTTP_API_DETOKENIZE },
	{ "/v1/models", false, false, KVP_HTTP_EP_MODELS, KVP_HTTP_API_COMPLETIONS /* unused */ },
	{ "/v1/models/", true, false, KVP_HTTP_EP_MODELS, KVP_HTTP_API_COMPLETIONS /* unused */ },
	{ "/health", false, false, KVP_HTTP_EP_HEALTH, KVP_HTTP_API_COMPLETIONS /* unused */ },
	{ "/metrics", false, false, KVP_HTTP_EP_METRICS, KVP_HTTP_API_COMPLETIONS /* unused */ },
};

static const struct route *route_of(const char *url)
{
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		const struct route *rt = &routes[i];

		if (rt->prefix ?
			    !strncmp(url, rt->path, strlen(rt->path)) && url[strlen(rt->path)] :
			    !strcmp(url, rt->path))
			return rt;
	}
	return NULL;
}

static struct hreq *hreq_new(struct kvp_http_server *srv, struct MHD_Connection *conn,
			     const char *url)
{
	const union MHD_ConnectionInfo *ci;
	const struct route *rt = route_of(url);
	struct hreq *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	atomic_init(&r->refs, 1);
	atomic_init(&r->job.cancel, false);
	pthread_mutex_init(&r->lock, NULL);
	r->srv = srv;
	r->conn = conn;
	r->t0_ns = kvp_now_ns();
	r->ep = rt ? rt->ep : KVP_HTTP_EP_OTHER;
	r->api = rt ? rt->api : KVP_HTTP_API_COMPLETIONS;
	r->shape = !strncmp(url, "/v1/messages", 12) ? KVP_HTTP_SHAPE_ANTHROPIC :
						       KVP_HTTP_SHAPE_OPENAI;
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	r->fd = ci ? ci->connect_fd : -1;
	ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	r->gate_ctx = ci ? ci->socket_context : NULL;
	r->body = r->out = r->scratch = (struct kvp_buf)KVP_BUF_INIT;
	r->ch = &r->c0;
	r->n_ch = 1;
	new_id(srv, r->req_id, sizeof(r->req_id), "req_");
	/* counted before @stopping is read: a drain that saw no request sees this one late */
	atomic_fetch_add(&srv->open, 1);
	r->late = atomic_load(&srv->stopping);
	return r;
}

/* MHD_get_connection_values()' iterator: each field into a struct kvp_http_framing. */
static enum MHD_Result framing_field(void *cls, enum MHD_ValueKind kind, const char *key,
				     size_t key_size, const char *value, size_t value_size)
{
	(void)kind;
	kvp_http_framing_add(cls, key, key_size, value ? value : "", value ? value_size : 0);
	return MHD_YES;
}

/*
 * The framing of a request as libmicrohttpd parsed it, checked as the gate checks a
 * head: a second line only, since the gate's relay passes no head kvp_http_head_check()
 * refused (gate.h), so a request here passes this too.  false: @e is the refusal,
 * answered at once and with the connection closed, as its body cannot be delimited.
 */
static bool framing_ok(struct hreq *r, const char *version, struct kvp_http_err *e)
{
	struct kvp_http_framing f = KVP_HTTP_FRAMING_INIT;
	unsigned int st;

	MHD_get_connection_values_n(r->conn, MHD_HEADER_KIND, framing_field, &f);
	st = kvp_http_framing_end(&f, !strcmp(version, MHD_HTTP_VERSION_1_0));
	if (!st)
		return true;
	kvp_http_err_set(e, st, "invalid_request", NULL, "%s", f.why);
	atomic_fetch_add(&r->srv->metrics.framing_refused, 1);
	return false;
}

/*
 * Headers are in: route, method, key, limits.  An error found here is the answer, given
 * once the request is complete: a response queued before that makes the library close
 * the connection (no keep-alive), and a client still sending its body would get a reset
 * connection instead of the answer.  Only a client that asked first (Expect:
 * 100-continue) is answered at once, before it sends the body; and a framing refusal,
 * with the connection closed: where such a body ends cannot be known.
 */
static enum MHD_Result first_call(struct hreq *r, const char *url, const char *method,
				  const char *version)
{
	struct kvp_http_server *srv = r->srv;
	const struct route *rt = route_of(url);
	bool is_post = !strcmp(method, MHD_HTTP_METHOD_POST);
	bool is_get = !strcmp(method, MHD_HTTP_METHOD_GET);
	const char *cl = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
						     MHD_HTTP_HEADER_CONTENT_LENGTH);
	const char *expect = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
							 MHD_HTTP_HEADER_EXPECT);
	bool asked = expect && !strcasecmp(expect, "100-continue");
	struct kvp_http_err e = { 0 };

	kvp_http_gate_phase(r->gate_ctx, KVP_HTTP_PHASE_BODY);
	if (!framing_ok(r, version, &e)) {
		r->close = true;
		kvp_http_gate_phase(r->gate_ctx, KVP_HTTP_PHASE_EARLY);
		return queue_error(r, &e);
	}
	if (!rt)
		kvp_http_err_set(&e, 404, "not_found", NULL, "no route for %s %s", method, url);
	else if ((rt->post && !is_post) || (!rt->post && !is_get))
		kvp_http_err_set(&e, 405, "method_not_allowed", NULL, "%s %s: use %s", method, url,
				 rt->post ? "POST" : "GET");
	else if (r->ep != KVP_HTTP_EP_HEALTH && !check_key(r, &e))
		; /* @e is the 401 */
	else if (r->ep != KVP_HTTP_EP_HEALTH && r->late)
		kvp_http_err_set(&e, 503, "service_unavailable", NULL, "kvpool-http is stopping");
	else if (is_post && cl && strtoull(cl, NULL, 10) > srv->cfg->max_body_bytes)
		kvp_http_err_set(&e, 413, "request_too_large", NULL,
				 "the request body is larger than %llu bytes",
				 (unsigned long long)srv->cfg->max_body_bytes);
	if (e.status && asked) {
		kvp_http_gate_phase(r->gate_ctx, KVP_HTTP_PHASE_EARLY);
		return queue_error(r, &e);
	}
	if (e.status) {
		r->early = true;
		r->early_err = e;
	}
	return MHD_YES;
}

/* The request is complete (body and all): answer, or start the work. */
static enum MHD_Result ready(struct hreq *r, const char *url)
{
	kvp_http_gate_phase(r->gate_ctx, KVP_HTTP_PHASE_BUSY);
	if (r->early)
		return queue_error(r, &r->early_err);
	switch (r->ep) {
	case KVP_HTTP_EP_HEALTH:
		return get_health(r);
	case KVP_HTTP_EP_MODELS:
		return get_models(r, url);
	case KVP_HTTP_EP_METRICS:
		return get_metrics(r);
	default:
		return post_ready(r);
	}
}

/*
 * The path of an absolute-form target ("http://host/v1/completions": RFC 9112 §3.2.2
 * says a server must accept it, as a proxy would send it), else @url as it is.
 */
static const char *origin_path(const char *url)
{
	const char *p;

	if (!strncasecmp(url, "http://", 7))
		p = url + 7;
	else if (!strncasecmp(url, "https://", 8))
		p = url + 8;
	else
		return url;
	p = strchr(p, '/');
	return p ? p : "/";
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	struct kvp_http_server *srv = cls;
	struct hreq *r = *con_cls;

	url = origin_path(url);
	if (!r) {
		r = hreq_new(srv, conn, url);
		if (!r)
			return MHD_NO;
		*con_cls = r;
		return first_call(r, url, method, version);
	}
	if (*upload_data_size) {
		size_t n = *upload_data_size;
		uint64_t drop_max = srv->cfg->max_body_bytes * 4 + (16u << 20);

		*upload_data_size = 0;
		r->body_bytes += n;
		if (r->body_bytes > drop_max)
			return MHD_NO; /* reading and dropping has a limit too */
		if (r->body_bytes > srv->cfg->max_body_bytes)
			r->too_big = true;
		if (r->too_big || r->early)
			kvp_buf_deinit(&r->body); /* read and dropped */
		else
			kvp_buf_add(&r->body, upload_data, n);
		return r->body.err ? MHD_NO : MHD_YES;
	}
	if (r->status)
		return MHD_YES; /* answered already */
	if (!r->submitted)
		return ready(r, url);
	return resumed(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct kvp_http_server *srv = cls;
	struct hreq *r = *con_cls;
	const union MHD_ConnectionInfo
		*ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	bool cancel = false;

	/* the answer is out (or the request ended otherwise): the next head's deadline runs */
	kvp_http_gate_phase(ci ? ci->socket_context : NULL, KVP_HTTP_PHASE_HEAD);
	if (!r)
		return;
	*con_cls = NULL;
	pthread_mutex_lock(&r->lock);
	if (r->submitted && !r->via_status && !r->ended) {
		if (!r->gone)
			atomic_fetch_add(&srv->metrics.disconnects, 1);
		r->gone = true;
		cancel = true;
	}
	pthread_mutex_unlock(&r->lock);
	if (cancel)
		kvp_http_backend_cancel(srv->be, &r->job);
	if (r->status)
		kvp_http_metrics_request(&srv->metrics, r->ep, r->status,
					 kvp_ns_to_s(kvp_now_ns() - r->t0_ns));
	hreq_unref(r);
	atomic_fetch_sub(&srv->open, 1);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct kvp_http_server *srv = cls;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED)
		kvp_http_gate_started(srv->gate, conn, socket_context);
	else
		kvp_http_gate_closed(srv->gate, *socket_context);
	atomic_fetch_add(&srv->metrics.connections, toe == MHD_CONNECTION_NOTIFY_STARTED ? 1 : -1);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[512];
	size_t n;

	if (!kvp_log_enabled(LOG_DEBUG))
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = '\0';
	kvp_log(LOG_DEBUG, "http: libmicrohttpd: %s", msg);
}

/* ------------------------------------------------------------ life cycle */

int kvp_http_server_new(struct kvp_http_server **out, const struct kvp_http_config *cfg,
			const struct kvp_http_keys *keys, struct kvp_http_backend *be, char *err,
			size_t cap)
{
	struct kvp_http_server *srv = calloc(1, sizeof(*srv));
	const char *p;
	int r;

	if (!srv)
		return -ENOMEM;
	srv->cfg = cfg;
	srv->keys = keys;
	srv->be = be;
	srv->started = (long long)time(NULL);
	if (getrandom(&srv->id_prefix, sizeof(srv->id_prefix), 0) != sizeof(srv->id_prefix))
		srv->id_prefix = mix(kvp_now_ns());
	pthread_mutex_init(&srv->status_lock, NULL);
	pthread_cond_init(&srv->status_cond, NULL);
	for (p = cfg->model_aliases; *p;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);

		while (n && *p == ' ')
			p++, n--;
		while (n && p[n - 1] == ' ')
			n--;
		if (n) {
			if (srv->n_aliases == ALIASES_MAX || n >= sizeof(srv->aliases[0])) {
				snprintf(err, cap,
					 "http.model_aliases: at most %d names of 64 bytes",
					 ALIASES_MAX);
				r = -EINVAL;
				goto err_free;
			}
			memcpy(srv->aliases[srv->n_aliases], p, n);
			srv->aliases[srv->n_aliases++][n] = '\0';
		}
		if (!comma)
			break;
		p = comma + 1;
	}
	r = kvp_http_gate_new(&srv->gate, cfg, &srv->metrics, err, cap);
	if (r)
		goto err_free;
	r = -pthread_create(&srv->status_thread, NULL, status_main, srv);
	if (r) {
		snprintf(err, cap, "start the status thread: %s", strerror(-r));
		goto err_free;
	}
	srv->status_started = true;
	*out = srv;
	return 0;

err_free:
	kvp_http_server_free(srv);
	return r;
}

int kvp_http_server_listen(struct kvp_http_server *srv, struct kvp_http_listener *l, char *err,
			   size_t cap)
{
	const struct kvp_http_config *cfg = srv->cfg;
	/* the gate accepts and hands connections over (gate.h) */
	unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
			     MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG |
			     MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
	struct MHD_OptionItem opts[] = {
		/* first, so that the library's complaints about later options come here too */
		{ MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)on_mhd_log, srv },
		/* the gate keeps max_conns; this only bounds the library's own tables, with
		 * room for connections being closed after the gate gave their place away */
		{ MHD_OPTION_CONNECTION_LIMIT, cfg->max_conns * 2 + 16, NULL },
		/* spaces in the target, HTTP/1.1 without Host: refused by the library too */
		{ MHD_OPTION_STRICT_FOR_CLIENT, 1, NULL },
		{ MHD_OPTION_CONNECTION_TIMEOUT, cfg->idle_timeout_s, NULL },
		/* the request line and headers live in this pool, beside the answer's
		 * headers and send buffer: twice the header limit leaves room for both */
		{ MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)cfg->max_header_bytes * 2, NULL },
		{ MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, srv },
		{ MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, srv },
		{ cfg->threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, cfg->threads,
		  NULL },
		{ MHD_OPTION_END, 0, NULL },
	};
	struct MHD_Daemon *d;
	int r;

	if (srv->n_mhd == KVP_HTTP_LISTEN_MAX)
		return -ENOSPC;
	d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_ARRAY, opts,
			     MHD_OPTION_END);
	if (!d) {
		snprintf(err, cap, "%s: libmicrohttpd could not start on it", l->name);
		return -EIO;
	}
	r = kvp_http_gate_add(srv->gate, l->fd, d, l->name);
	if (r) {
		snprintf(err, cap, "%s: accept on it: %s", l->name, strerror(-r));
		MHD_stop_daemon(d);
		return r;
	}
	l->fd = -1; /* the gate's now */
	srv->mhd[srv->n_mhd++] = d;
	return 0;
}

unsigned int kvp_http_server_open(struct kvp_http_server *srv)
{
	return atomic_load(&srv->open);
}

void kvp_http_server_stop_accepting(struct kvp_http_server *srv)
{
	atomic_store(&srv->stopping, true);
	kvp_http_gate_stop_accepting(srv->gate);
}

void kvp_http_server_free(struct kvp_http_server *srv)
{
	if (!srv)
		return;
	if (srv->status_started) {
		pthread_mutex_lock(&srv->status_lock);
		srv->status_stop = true;
		pthread_cond_signal(&srv->status_cond);
		pthread_mutex_unlock(&srv->status_lock);
		pthread_join(srv->status_thread, NULL);
	}
	kvp_http_gate_stop(srv->gate); /* no more hand-overs */
	for (unsigned int i = 0; i < srv->n_mhd; i++)
		MHD_stop_daemon(srv->mhd[i]);
	kvp_http_gate_free(srv->gate); /* after the library's CLOSED callbacks */
	pthread_cond_destroy(&srv->status_cond);
	pthread_mutex_destroy(&srv->status_lock);
	free(srv);
}
