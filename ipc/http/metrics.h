/* SPDX-License-Identifier: MIT */
/*
 * metrics.h - kvpool-http's own counters and latency histograms, and their Prometheus
 * text (GET /metrics serves it followed by kvpoold's report from the status socket).
 *
 * Every figure is a relaxed atomic: the HTTP threads and the backend thread add to them
 * without locks, and a report reads each one once (a report is a consistent view of
 * each figure, not of all of them together, as with any Prometheus target).
 */
#ifndef KVP_IPC_HTTP_METRICS_H
#define KVP_IPC_HTTP_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/hist.h"

/* The endpoints, as counted and labelled (endpoint="..."). */
enum kvp_http_ep {
	KVP_HTTP_EP_COMPLETIONS, /* POST /v1/completions */
	KVP_HTTP_EP_CHAT,	 /* POST /v1/chat/completions */
	KVP_HTTP_EP_MESSAGES,	 /* POST /v1/messages */
	KVP_HTTP_EP_MODELS,	 /* GET /v1/models, /v1/models/{id} */
	KVP_HTTP_EP_HEALTH,	 /* GET /health */
	KVP_HTTP_EP_METRICS,	 /* GET /metrics */
	KVP_HTTP_EP_TOKENIZE,	 /* POST /tokenize */
	KVP_HTTP_EP_DETOKENIZE,	 /* POST /detokenize */
	KVP_HTTP_EP_OTHER,	 /* anything else (404, 405) */
	KVP_HTTP_EP__COUNT
};

#define KVP_HTTP_N_CODES 11 /* 200 400 401 404 405 413 429 500 501 503, other */

/**
 * struct kvp_http_hist - a Prometheus histogram of seconds, on util/hist.h's bounds
 * @bucket:  observations per bucket (not cumulative; the report sums them)
 * @sum_us:  sum of the observations, microseconds
 */
struct kvp_http_hist {
	atomic_uint_fast64_t bucket[KVP_HIST_BUCKETS + 1]; /* the last: +Inf */
	atomic_uint_fast64_t sum_us;
};

/**
 * struct kvp_http_metrics - everything kvpool-http counts (zero-initialize it)
 * @requests:      answered requests by endpoint and status code
 * @duration:      request received to response complete, by endpoint
 * @ttft:          request received to first generated text, generation endpoints
 * @tokens_prompt, @tokens_cached, @tokens_cache_creation, @tokens_generated: usage sums
 * @disconnects:   clients gone before their generation ended (each cancelled in kvpoold)
 * @overflows:     streams cut because the client read slower than the stream buffer allows
 * @busy:          requests refused with 429 (front full, or kvpoold busy)
 * @backend_lost:  requests failed because the connection to kvpoold broke
 * @in_flight:     generation requests between submit and end
 * @connections:   open HTTP connections
 * @conns_refused: connections closed at once, by reason: [0] max_conns (none waiting
 *                 to take the place of), [1] per_addr_conns
 * @conns_evicted: connections closed for a new one (the longest waiting for a head)
 * @conns_timed_out: connections closed at header_timeout_s or body_timeout_s
 * @framing_refused: request heads refused by kvpool-http's own checks (head.h)
 */
struct kvp_http_metrics {
	atomic_uint_fast64_t requests[KVP_HTTP_EP__COUNT][KVP_HTTP_N_CODES];
	struct kvp_http_hist duration[KVP_HTTP_EP__COUNT];
	struct kvp_http_hist ttft[KVP_HTTP_EP__COUNT];
	atomic_uint_fast64_t tokens_prompt, tokens_cached, tokens_cache_creation, tokens_generated;
	atomic_uint_fast64_t disconnects, overflows, busy, backend_lost;
	atomic_int in_flight;
	atomic_int connections;
	atomic_uint_fast64_t conns_refused[2], conns_evicted, conns_timed_out, framing_refused;
};

/* "completions", "chat_completions", ... (the label value). */
const char *kvp_http_ep_name(enum kvp_http_ep ep);

/* One answered request: its endpoint, HTTP status and duration in seconds. */
void kvp_http_metrics_request(struct kvp_http_metrics *m, enum kvp_http_ep ep, unsigned int status,
			      double seconds);

/* Time to first token of a generation request, in seconds. */
void kvp_http_metrics_ttft(struct kvp_http_metrics *m, enum kvp_http_ep ep, double seconds);

/* Add one finished generation's usage. */
void kvp_http_metrics_usage(struct kvp_http_metrics *m, uint32_t prompt, uint32_t cached,
			    uint32_t cache_creation, uint32_t generated);

/**
 * kvp_http_metrics_prom() - the Prometheus text of @m, appended to @out
 * @backend_up: kvpoold connections open now (a gauge the backend owns)
 */
void kvp_http_metrics_prom(struct kvp_http_metrics *m, unsigned int backend_up,
			   struct kvp_buf *out);

#endif /* KVP_IPC_HTTP_METRICS_H */
