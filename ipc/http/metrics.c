/* SPDX-License-Identifier: MIT */
/*
 * metrics.c - counters, histograms and their Prometheus text (see metrics.h).
 *
 * Names are kvpool_http_*, beside kvpoold's kvpool_* in the same scrape.  Series that
 * are still zero are left out of the per-code counter (99 mostly empty lines otherwise);
 * the histograms of an endpoint appear once it has answered a request.
 */
#include "ipc/http/metrics.h"

#include <assert.h>
#include <stddef.h>
#include <stdio.h>

static const char *const ep_names[] = {
	[KVP_HTTP_EP_COMPLETIONS] = "completions",
	[KVP_HTTP_EP_CHAT] = "chat_completions",
	[KVP_HTTP_EP_MESSAGES] = "messages",
	[KVP_HTTP_EP_MODELS] = "models",
	[KVP_HTTP_EP_HEALTH] = "health",
	[KVP_HTTP_EP_METRICS] = "metrics",
	[KVP_HTTP_EP_TOKENIZE] = "tokenize",
	[KVP_HTTP_EP_DETOKENIZE] = "detokenize",
	[KVP_HTTP_EP_OTHER] = "other",
};
static_assert(sizeof(ep_names) / sizeof(ep_names[0]) == KVP_HTTP_EP__COUNT, "one per endpoint");

static const unsigned int codes[KVP_HTTP_N_CODES - 1] = { 200, 400, 401, 404, 405,
							  413, 429, 500, 501, 503 };

const char *kvp_http_ep_name(enum kvp_http_ep ep)
{
	return (unsigned int)ep < KVP_HTTP_EP__COUNT ? ep_names[ep] : "other";
}

static unsigned int code_index(unsigned int status)
{
	for (unsigned int i = 0; i < KVP_HTTP_N_CODES - 1; i++)
		if (codes[i] == status)
			return i;
	return KVP_HTTP_N_CODES - 1;
}

static void observe(struct kvp_http_hist *h, double seconds)
{
	if (!(seconds >= 0))
		seconds = 0;
	atomic_fetch_add_explicit(&h->bucket[kvp_hist_bucket(seconds)], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_us, (uint_fast64_t)(seconds * 1e6 + 0.5),
				  memory_order_relaxed);
}

void kvp_http_metrics_request(struct kvp_http_metrics *m, enum kvp_http_ep ep, unsigned int status,
			      double seconds)
{
	if ((unsigned int)ep >= KVP_HTTP_EP__COUNT)
		ep = KVP_HTTP_EP_OTHER;
	atomic_fetch_add_explicit(&m->requests[ep][code_index(status)], 1, memory_order_relaxed);
	observe(&m->duration[ep], seconds);
}

void kvp_http_metrics_ttft(struct kvp_http_metrics *m, enum kvp_http_ep ep, double seconds)
{
	if ((unsigned int)ep < KVP_HTTP_EP__COUNT)
		observe(&m->ttft[ep], seconds);
}

void kvp_http_metrics_usage(struct kvp_http_metrics *m, uint32_t prompt, uint32_t cached,
			    uint32_t cache_creation, uint32_t generated)
{
	atomic_fetch_add_explicit(&m->tokens_prompt, prompt, memory_order_relaxed);
	atomic_fetch_add_explicit(&m->tokens_cached, cached, memory_order_relaxed);
	atomic_fetch_add_explicit(&m->tokens_cache_creation, cache_creation, memory_order_relaxed);
	atomic_fetch_add_explicit(&m->tokens_generated, generated, memory_order_relaxed);
}

static uint64_t get(atomic_uint_fast64_t *v)
{
	return (uint64_t)atomic_load_explicit(v, memory_order_relaxed);
}

static void head(struct kvp_buf *out, const char *name, const char *type, const char *help)
{
	kvp_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One histogram's series for endpoint @ep; nothing when it has no observation. */
static void hist(struct kvp_buf *out, const char *name, enum kvp_http_ep ep,
		 struct kvp_http_hist *h)
{
	uint64_t n[KVP_HIST_BUCKETS + 1], total = 0;

	for (unsigned int i = 0; i <= KVP_HIST_BUCKETS; i++)
		total += n[i] = get(&h->bucket[i]);
	if (!total)
		return;
	total = 0;
	for (unsigned int i = 0; i <= KVP_HIST_BUCKETS; i++) {
		total += n[i];
		if (i < KVP_HIST_BUCKETS)
			kvp_buf_printf(out, "%s_bucket{endpoint=\"%s\",le=\"%g\"} %llu\n", name,
				       ep_names[ep], kvp_hist_bounds_s[i],
				       (unsigned long long)total);
		else
			kvp_buf_printf(out, "%s_bucket{endpoint=\"%s\",le=\"+Inf\"} %llu\n", name,
				       ep_names[ep], (unsigned long long)total);
	}
	kvp_buf_printf(out, "%s_sum{endpoint=\"%s\"} %.6f\n", name, ep_names[ep],
		       (double)get(&h->sum_us) / 1e6);
	kvp_buf_printf(out, "%s_count{endpoint=\"%s\"} %llu\n", name, ep_names[ep],
		       (unsigned long long)total);
}

void kvp_http_metrics_prom(struct kvp_http_metrics *m, unsigned int backend_up, struct kvp_buf *out)
{
	static const char *const kinds[] = { "prompt", "cached", "cache_creation", "generated" };
	atomic_uint_fast64_t *tok[] = { &m->tokens_prompt, &m->tokens_cached,
					&m->tokens_cache_creation, &m->tokens_generated };

	head(out, "kvpool_http_requests_total", "counter",
	     "HTTP requests answered, by endpoint and status code.");
	for (unsigned int e = 0; e < KVP_HTTP_EP__COUNT; e++) {
		for (unsigned int c = 0; c < KVP_HTTP_N_CODES; c++) {
			uint64_t v = get(&m->requests[e][c]);
			char code[16];

			if (!v)
				continue;
			if (c < KVP_HTTP_N_CODES - 1)
				snprintf(code, sizeof(code), "%u", codes[c]);
			else
				snprintf(code, sizeof(code), "other");
			kvp_buf_printf(
				out,
				"kvpool_http_requests_total{endpoint=\"%s\",code=\"%s\"} %llu\n",
				ep_names[e], code, (unsigned long long)v);
		}
	}
	head(out, "kvpool_http_request_duration_seconds", "histogram",
	     "Request received to response complete.");
	for (unsigned int e = 0; e < KVP_HTTP_EP__COUNT; e++)
		hist(out, "kvpool_http_request_duration_seconds", e, &m->duration[e]);
	head(out, "kvpool_http_ttft_seconds", "histogram",
	     "Request received to first generated text.");
	for (unsigned int e = 0; e < KVP_HTTP_EP__COUNT; e++)
		hist(out, "kvpool_http_ttft_seconds", e, &m->ttft[e]);
	head(out, "kvpool_http_tokens_total", "counter",
	     "Tokens of finished generations through this front (DONE usage fields).");
	for (unsigned int i = 0; i < 4; i++)
		kvp_buf_printf(out, "kvpool_http_tokens_total{kind=\"%s\"} %llu\n", kinds[i],
			       (unsigned long long)get(tok[i]));
	head(out, "kvpool_http_client_disconnects_total", "counter",
	     "Clients gone before their generation ended; each was cancelled in kvpoold.");
	kvp_buf_printf(out, "kvpool_http_client_disconnects_total %llu\n",
		       (unsigned long long)get(&m->disconnects));
	head(out, "kvpool_http_stream_overflows_total", "counter",
	     "Streams cut because the client read slower than stream_buffer_bytes allows.");
	kvp_buf_printf(out, "kvpool_http_stream_overflows_total %llu\n",
		       (unsigned long long)get(&m->overflows));
	head(out, "kvpool_http_busy_total", "counter",
	     "Requests refused with 429 (this front full, or kvpoold busy).");
	kvp_buf_printf(out, "kvpool_http_busy_total %llu\n", (unsigned long long)get(&m->busy));
	head(out, "kvpool_http_backend_lost_total", "counter",
	     "Requests failed because the connection to kvpoold broke.");
	kvp_buf_printf(out, "kvpool_http_backend_lost_total %llu\n",
		       (unsigned long long)get(&m->backend_lost));
	head(out, "kvpool_http_connections_refused_total", "counter",
	     "Connections closed at once: max_conns reached with none waiting for a head, or "
	     "per_addr_conns reached.");
	kvp_buf_printf(out,
		       "kvpool_http_connections_refused_total{reason=\"max_conns\"} %llu\n"
		       "kvpool_http_connections_refused_total{reason=\"per_addr_conns\"} %llu\n",
		       (unsigned long long)get(&m->conns_refused[0]),
		       (unsigned long long)get(&m->conns_refused[1]));
	head(out, "kvpool_http_connections_evicted_total", "counter",
	     "Connections closed to make room: the one waiting longest for a request head.");
	kvp_buf_printf(out, "kvpool_http_connections_evicted_total %llu\n",
		       (unsigned long long)get(&m->conns_evicted));
	head(out, "kvpool_http_connections_timed_out_total", "counter",
	     "Connections closed at header_timeout_s or body_timeout_s.");
	kvp_buf_printf(out, "kvpool_http_connections_timed_out_total %llu\n",
		       (unsigned long long)get(&m->conns_timed_out));
	head(out, "kvpool_http_framing_refused_total", "counter",
	     "Requests refused for their framing or header bytes (400, 413, 414, 431, 501, 505).");
	kvp_buf_printf(out, "kvpool_http_framing_refused_total %llu\n",
		       (unsigned long long)get(&m->framing_refused));
	head(out, "kvpool_http_in_flight", "gauge", "Generation requests being served now.");
	kvp_buf_printf(out, "kvpool_http_in_flight %d\n",
		       atomic_load_explicit(&m->in_flight, memory_order_relaxed));
	head(out, "kvpool_http_connections_open", "gauge", "Open HTTP connections.");
	kvp_buf_printf(out, "kvpool_http_connections_open %d\n",
		       atomic_load_explicit(&m->connections, memory_order_relaxed));
	head(out, "kvpool_http_backend_connections", "gauge", "Open connections to kvpoold.");
	kvp_buf_printf(out, "kvpool_http_backend_connections %u\n", backend_up);
}
