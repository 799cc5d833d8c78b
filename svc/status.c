/* SPDX-License-Identifier: MIT */
/*
 * status.c - render a struct kvp_status_snap as JSON or Prometheus text (see status.h).
 *
 * Output goes into the caller's buffer through a struct kvp_buf: once a write does not
 * fit, the render returns -ENOSPC, so a report is whole or absent.  The JSON goes
 * through util/json.h (strings escaped by jansson, ill-formed UTF-8 as \ufffd); numbers
 * that are not finite print as 0 because JSON has no NaN.
 *
 * Thread: pure functions; any thread.
 */
#include "svc/status.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util/buf.h"
#include "util/json.h"

/* Member helpers in the formats of the report: counts, ratios, milliseconds, strings. */
static void put_u(struct kvp_json *j, const char *key, uint64_t v)
{
	kvp_json_u64(j, key, v);
}

static void put_i(struct kvp_json *j, const char *key, long long v)
{
	kvp_json_i64(j, key, v);
}

/* a ratio or rate: 6 significant digits */
static void put_d(struct kvp_json *j, const char *key, double v)
{
	kvp_json_sig(j, key, v, 6);
}

/* milliseconds, to the microsecond */
static void put_ms(struct kvp_json *j, const char *key, double v)
{
	kvp_json_fixed(j, key, v, 3);
}

/* a string field of at most @max bytes (NUL-terminated when shorter) */
static void put_str(struct kvp_json *j, const char *key, const char *s, size_t max)
{
	kvp_json_str(j, key, s, strnlen(s, max));
}

double kvp_status_ratio(uint64_t hits, uint64_t total)
{
	return total ? (double)hits / (double)total : 0.0;
}

int kvp_status_render_json(const struct kvp_status_snap *s, char *buf, size_t cap)
{
	struct kvp_buf out;
	struct kvp_json js;
	struct kvp_json *o = &js;
	uint32_t i;

	kvp_buf_init_fixed(&out, buf, cap);
	kvp_json_init(o, &out);
	kvp_json_open(o, NULL, '{');

	kvp_json_open(o, "daemon", '{');
	put_str(o, "version", s->version, sizeof(s->version));
	put_str(o, "model", s->model, sizeof(s->model));
	put_str(o, "state", s->state, sizeof(s->state));
	put_u(o, "pid", s->pid);
	put_u(o, "uptime_ms", s->uptime_ms);
	kvp_json_close(o, '}');

	kvp_json_open(o, "pool", '{');
	put_u(o, "bytes", s->pool_bytes);
	put_u(o, "block_bytes", s->block_bytes);
	put_u(o, "block_tokens", s->block_tokens);
	put_str(o, "page_kind", s->page_kind, sizeof(s->page_kind));
	put_str(o, "kv_dtype", s->kv_dtype, sizeof(s->kv_dtype));
	put_u(o, "blocks_total", s->blocks_total);
	put_u(o, "blocks_used", s->blocks_used);
	put_u(o, "blocks_cached", s->blocks_cached);
	put_u(o, "blocks_free", s->blocks_free);
	kvp_json_open(o, "arenas", '[');
	for (i = 0; i < s->n_arenas && i < KVP_STATUS_MAX_ARENAS; i++) {
		const struct kvp_status_arena *a = &s->arenas[i];

		kvp_json_open(o, NULL, '{');
		put_u(o, "node", a->node);
		put_u(o, "blocks_total", a->blocks_total);
		put_u(o, "blocks_used", a->blocks_used);
		put_u(o, "blocks_cached", a->blocks_cached);
		put_u(o, "blocks_free", a->blocks_free);
		kvp_json_close(o, '}');
	}
	kvp_json_close(o, ']');
	kvp_json_close(o, '}');

	kvp_json_open(o, "index", '{');
	put_u(o, "entries", s->index_entries);
	put_u(o, "lookups", s->index_lookups);
	put_u(o, "hit_requests", s->index_hit_requests);
	put_d(o, "request_hit_rate", kvp_status_ratio(s->index_hit_requests, s->index_lookups));
	put_u(o, "lookup_tokens", s->index_lookup_tokens);
	put_u(o, "hit_tokens", s->index_hit_tokens);
	put_d(o, "token_hit_rate", kvp_status_ratio(s->index_hit_tokens, s->index_lookup_tokens));
	put_u(o, "inserts", s->index_inserts);
	put_u(o, "evictions", s->index_evictions);
	kvp_json_close(o, '}');

	kvp_json_open(o, "scheduler", '{');
	put_u(o, "queued", s->sched_queued);
	put_u(o, "running", s->sched_running);
	put_u(o, "waiting_prefix", s->sched_waiting_prefix);
	put_u(o, "cancels_received", s->sched_cancels);
	put_u(o, "requests_total", s->req_total);
	put_u(o, "requests_done", s->req_done);
	put_u(o, "requests_cancelled", s->req_cancelled);
	put_u(o, "requests_failed", s->req_failed);
	put_u(o, "requests_rejected", s->req_rejected);
	put_u(o, "ttft_samples", s->ttft_samples);
	put_d(o, "ttft_p50_ms", s->ttft_p50_ms);
	put_d(o, "ttft_p99_ms", s->ttft_p99_ms);
	kvp_json_close(o, '}');

	kvp_json_open(o, "usage", '{');
	put_u(o, "prompt_tokens", s->prompt_tokens);
	put_u(o, "cached_tokens", s->cached_tokens);
	put_u(o, "cache_creation_tokens", s->cache_creation_tokens);
	put_u(o, "recomputed_tokens", s->recomputed_tokens);
	put_u(o, "generated_tokens", s->generated_tokens);
	put_ms(o, "queue_ms", s->queue_ms);
	put_ms(o, "ttft_ms", s->ttft_ms);
	put_ms(o, "prefill_ms", s->prefill_ms);
	put_ms(o, "decode_ms", s->decode_ms);
	kvp_json_close(o, '}');

	kvp_json_open(o, "connections", '{');
	put_u(o, "open", s->server.conns_open);
	put_u(o, "total", s->server.conns_total);
	put_u(o, "refused", s->server.conns_refused);
	put_u(o, "frames_in", s->server.frames_in);
	put_u(o, "frames_out", s->server.frames_out);
	put_u(o, "protocol_errors", s->server.proto_errors);
	put_u(o, "slow_disconnects", s->server.slow_disconnects);
	kvp_json_open(o, "list", '[');
	for (i = 0; i < s->n_conns && i < KVP_STATUS_MAX_CONNS; i++) {
		const struct kvp_status_conn *c = &s->conns[i];

		kvp_json_open(o, NULL, '{');
		put_u(o, "id", c->id);
		put_i(o, "pid", (long long)c->pid);
		put_i(o, "uid", (long long)c->uid);
		put_str(o, "client", c->client, sizeof(c->client));
		put_u(o, "domain", c->domain);
		put_u(o, "in_flight", c->in_flight);
		put_u(o, "requests", c->requests);
		put_u(o, "generated_tokens", c->generated_tokens);
		put_u(o, "cached_tokens", c->cached_tokens);
		kvp_json_close(o, '}');
	}
	kvp_json_close(o, ']');
	kvp_json_close(o, '}');

	kvp_json_open(o, "domains", '[');
	for (i = 0; i < s->n_domains && i < KVP_STATUS_MAX_DOMAINS; i++) {
		const struct kvp_status_domain *d = &s->domains[i];

		kvp_json_open(o, NULL, '{');
		put_str(o, "name", d->name, sizeof(d->name));
		put_u(o, "connections_open", d->conns_open);
		put_u(o, "requests", d->requests);
		kvp_json_close(o, '}');
	}
	kvp_json_close(o, ']');

	kvp_json_close(o, '}');
	kvp_buf_add(&out, "\n", 1);
	return kvp_buf_finish(&out);
}

/* Prometheus takes NaN, but a report of ours never means it: print 0 as the JSON does. */
static double finite_or_zero(double v)
{
	return isfinite(v) ? v : 0.0;
}

/* One metric family: HELP and TYPE lines, then a sample. */
static void prom(struct kvp_buf *o, const char *name, const char *type, const char *help,
		 const char *labels, double v)
{
	kvp_buf_printf(o, "# HELP kvpool_%s %s\n# TYPE kvpool_%s %s\n", name, help, name, type);
	kvp_buf_printf(o, "kvpool_%s%s %.15g\n", name, labels, finite_or_zero(v));
}

/* Another sample of the family just opened. */
static void prom_more(struct kvp_buf *o, const char *name, const char *labels, double v)
{
	kvp_buf_printf(o, "kvpool_%s%s %.15g\n", name, labels, finite_or_zero(v));
}

int kvp_status_render_prom(const struct kvp_status_snap *s, char *buf, size_t cap)
{
	struct kvp_buf out;
	struct kvp_buf *o = &out;
	char lab[96];
	uint32_t i;

	kvp_buf_init_fixed(o, buf, cap);
	prom(o, "uptime_seconds", "gauge", "Seconds since the daemon started.", "",
	     (double)s->uptime_ms / 1000.0);
	prom(o, "pool_bytes", "gauge", "Size of the KV block pool.", "", (double)s->pool_bytes);
	snprintf(lab, sizeof(lab), "{kind=\"%s\"}", s->page_kind);
	prom(o, "pool_page_kind", "gauge", "Page kind the pool obtained (1 for the kind).", lab, 1);
	prom(o, "pool_blocks", "gauge", "KV blocks by state.", "{state=\"total\"}",
	     (double)s->blocks_total);
	prom_more(o, "pool_blocks", "{state=\"used\"}", (double)s->blocks_used);
	prom_more(o, "pool_blocks", "{state=\"cached\"}", (double)s->blocks_cached);
	prom_more(o, "pool_blocks", "{state=\"free\"}", (double)s->blocks_free);
	for (i = 0; i < s->n_arenas && i < KVP_STATUS_MAX_ARENAS; i++) {
		const struct kvp_status_arena *a = &s->arenas[i];

		if (i == 0)
			kvp_buf_printf(o, "# HELP kvpool_arena_blocks KV blocks by NUMA arena and state.\n"
			       "# TYPE kvpool_arena_blocks gauge\n");
		snprintf(lab, sizeof(lab), "{node=\"%u\",state=\"used\"}", a->node);
		prom_more(o, "arena_blocks", lab, (double)a->blocks_used);
		snprintf(lab, sizeof(lab), "{node=\"%u\",state=\"cached\"}", a->node);
		prom_more(o, "arena_blocks", lab, (double)a->blocks_cached);
		snprintf(lab, sizeof(lab), "{node=\"%u\",state=\"free\"}", a->node);
		prom_more(o, "arena_blocks", lab, (double)a->blocks_free);
	}
	prom(o, "index_entries", "gauge", "Full blocks in the prefix index.", "",
	     (double)s->index_entries);
	prom(o, "index_lookups_total", "counter", "Requests that looked up the prefix index.", "",
	     (double)s->index_lookups);
	prom(o, "index_hit_requests_total", "counter", "Lookups that hit at least one block.", "",
	     (double)s->index_hit_requests);
	prom(o, "index_lookup_tokens_total", "counter", "Prompt tokens looked up.", "",
	     (double)s->index_lookup_tokens);
	prom(o, "index_hit_tokens_total", "counter", "Prompt tokens served from the cache.", "",
	     (double)s->index_hit_tokens);
	prom(o, "index_request_hit_rate", "gauge", "hit_requests / lookups.", "",
	     kvp_status_ratio(s->index_hit_requests, s->index_lookups));
	prom(o, "index_token_hit_rate", "gauge", "hit_tokens / lookup_tokens.", "",
	     kvp_status_ratio(s->index_hit_tokens, s->index_lookup_tokens));
	prom(o, "index_evictions_total", "counter", "Cached blocks evicted.", "",
	     (double)s->index_evictions);
	prom(o, "sched_queued", "gauge", "Requests waiting for admission.", "",
	     (double)s->sched_queued);
	prom(o, "sched_running", "gauge", "Sequences admitted and running.", "",
	     (double)s->sched_running);
	prom(o, "sched_cancels_received_total", "counter",
	     "Cancels that reached the engine (at most one per request).", "",
	     (double)s->sched_cancels);
	prom(o, "requests_total", "counter", "Requests by outcome.", "{outcome=\"done\"}",
	     (double)s->req_done);
	prom_more(o, "requests_total", "{outcome=\"cancelled\"}", (double)s->req_cancelled);
	prom_more(o, "requests_total", "{outcome=\"failed\"}", (double)s->req_failed);
	prom_more(o, "requests_total", "{outcome=\"rejected\"}", (double)s->req_rejected);
	prom(o, "ttft_seconds", "gauge", "Time to first token over recent requests.",
	     "{quantile=\"0.5\"}", s->ttft_p50_ms / 1000.0);
	prom_more(o, "ttft_seconds", "{quantile=\"0.99\"}", s->ttft_p99_ms / 1000.0);
	prom(o, "tokens_total", "counter", "Tokens by kind (DONE usage fields).",
	     "{kind=\"prompt\"}", (double)s->prompt_tokens);
	prom_more(o, "tokens_total", "{kind=\"cached\"}", (double)s->cached_tokens);
	prom_more(o, "tokens_total", "{kind=\"cache_creation\"}", (double)s->cache_creation_tokens);
	prom_more(o, "tokens_total", "{kind=\"recomputed\"}", (double)s->recomputed_tokens);
	prom_more(o, "tokens_total", "{kind=\"generated\"}", (double)s->generated_tokens);
	prom(o, "request_seconds_total", "counter",
	     "Usage times summed over ended requests (DONE usage fields).", "{phase=\"queue\"}",
	     s->queue_ms / 1000.0);
	prom_more(o, "request_seconds_total", "{phase=\"ttft\"}", s->ttft_ms / 1000.0);
	prom_more(o, "request_seconds_total", "{phase=\"prefill\"}", s->prefill_ms / 1000.0);
	prom_more(o, "request_seconds_total", "{phase=\"decode\"}", s->decode_ms / 1000.0);
	prom(o, "connections_open", "gauge", "Open client connections.", "",
	     (double)s->server.conns_open);
	prom(o, "connections_total", "counter", "Connections accepted.", "",
	     (double)s->server.conns_total);
	prom(o, "connections_refused_total", "counter", "Connections refused (limit).", "",
	     (double)s->server.conns_refused);
	prom(o, "protocol_errors_total", "counter", "Malformed frames answered with ERROR.", "",
	     (double)s->server.proto_errors);
	prom(o, "slow_disconnects_total", "counter", "Clients dropped for not reading.", "",
	     (double)s->server.slow_disconnects);
	return kvp_buf_finish(o);
}
