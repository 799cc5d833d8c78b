/* SPDX-License-Identifier: MIT */
/*
 * status.c - render a struct kvp_status_snap as JSON or Prometheus text (see status.h).
 *
 * Output goes through a bounded writer: once a write does not fit, the writer is
 * marked full and the render returns -ENOSPC, so a report is whole or absent.
 * Strings are escaped for JSON (control bytes as \u00XX); numbers that are not finite
 * print as 0 because JSON has no NaN.
 *
 * Thread: pure functions; any thread.
 */
#include "svc/status.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

struct out {
	char *buf;
	size_t cap;
	size_t len;
	bool full;
	bool first;	/* JSON: next member is the first of its object or array */
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->full)
		return;
	va_start(ap, fmt);
	n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= o->cap - o->len) {
		o->full = true;
		return;
	}
	o->len += (size_t)n;
}

/*
 * JSON members.  The writer places the commas: every member but the first of its
 * object or array is preceded by one, so a renderer lists fields and nothing else.
 */
static void sep(struct out *o)
{
	if (!o->first)
		put(o, ",");
	o->first = false;
}

/* Open an object or array ('{' or '['), as member @key, or as an element when NULL. */
static void open_(struct out *o, const char *key, char brace)
{
	sep(o);
	if (key)
		put(o, "\"%s\":", key);
	put(o, "%c", brace);
	o->first = true;
}

static void close_(struct out *o, char brace)
{
	put(o, "%c", brace);
	o->first = false;
}

/* "key": "escaped string" (at most @max bytes of @s) */
static void put_str(struct out *o, const char *key, const char *s, size_t max)
{
	size_t i;

	sep(o);
	put(o, "\"%s\":\"", key);
	for (i = 0; i < max && s[i]; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch == '"' || ch == '\\')
			put(o, "\\%c", ch);
		else if (ch < 0x20 || ch == 0x7f)
			put(o, "\\u%04x", ch);
		else
			put(o, "%c", ch);
	}
	put(o, "\"");
}

static double finite_or_zero(double v)
{
	return isfinite(v) ? v : 0.0;
}

static void put_u(struct out *o, const char *key, uint64_t v)
{
	sep(o);
	put(o, "\"%s\":%llu", key, (unsigned long long)v);
}

static void put_i(struct out *o, const char *key, long long v)
{
	sep(o);
	put(o, "\"%s\":%lld", key, v);
}

/* a ratio or rate: 6 significant digits */
static void put_d(struct out *o, const char *key, double v)
{
	sep(o);
	put(o, "\"%s\":%.6g", key, finite_or_zero(v));
}

/* milliseconds, to the microsecond */
static void put_ms(struct out *o, const char *key, double v)
{
	sep(o);
	put(o, "\"%s\":%.3f", key, finite_or_zero(v));
}

double kvp_status_ratio(uint64_t hits, uint64_t total)
{
	return total ? (double)hits / (double)total : 0.0;
}

static int finish(struct out *o)
{
	if (o->full)
		return -ENOSPC;
	return (int)o->len;
}

int kvp_status_render_json(const struct kvp_status_snap *s, char *buf, size_t cap)
{
	struct out out = { .buf = buf, .cap = cap, .first = true };
	struct out *o = &out;
	uint32_t i;

	if (!cap)
		return -ENOSPC;
	open_(o, NULL, '{');

	open_(o, "daemon", '{');
	put_str(o, "version", s->version, sizeof(s->version));
	put_str(o, "model", s->model, sizeof(s->model));
	put_str(o, "state", s->state, sizeof(s->state));
	put_u(o, "pid", s->pid);
	put_u(o, "uptime_ms", s->uptime_ms);
	close_(o, '}');

	open_(o, "pool", '{');
	put_u(o, "bytes", s->pool_bytes);
	put_u(o, "block_bytes", s->block_bytes);
	put_u(o, "block_tokens", s->block_tokens);
	put_str(o, "page_kind", s->page_kind, sizeof(s->page_kind));
	put_str(o, "kv_dtype", s->kv_dtype, sizeof(s->kv_dtype));
	put_u(o, "blocks_total", s->blocks_total);
	put_u(o, "blocks_used", s->blocks_used);
	put_u(o, "blocks_cached", s->blocks_cached);
	put_u(o, "blocks_free", s->blocks_free);
	open_(o, "arenas", '[');
	for (i = 0; i < s->n_arenas && i < KVP_STATUS_MAX_ARENAS; i++) {
		const struct kvp_status_arena *a = &s->arenas[i];

		open_(o, NULL, '{');
		put_u(o, "node", a->node);
		put_u(o, "blocks_total", a->blocks_total);
		put_u(o, "blocks_used", a->blocks_used);
		put_u(o, "blocks_cached", a->blocks_cached);
		put_u(o, "blocks_free", a->blocks_free);
		close_(o, '}');
	}
	close_(o, ']');
	close_(o, '}');

	open_(o, "index", '{');
	put_u(o, "entries", s->index_entries);
	put_u(o, "lookups", s->index_lookups);
	put_u(o, "hit_requests", s->index_hit_requests);
	put_d(o, "request_hit_rate", kvp_status_ratio(s->index_hit_requests, s->index_lookups));
	put_u(o, "lookup_tokens", s->index_lookup_tokens);
	put_u(o, "hit_tokens", s->index_hit_tokens);
	put_d(o, "token_hit_rate", kvp_status_ratio(s->index_hit_tokens, s->index_lookup_tokens));
	put_u(o, "inserts", s->index_inserts);
	put_u(o, "evictions", s->index_evictions);
	close_(o, '}');

	open_(o, "scheduler", '{');
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
	close_(o, '}');

	open_(o, "usage", '{');
	put_u(o, "prompt_tokens", s->prompt_tokens);
	put_u(o, "cached_tokens", s->cached_tokens);
	put_u(o, "cache_creation_tokens", s->cache_creation_tokens);
	put_u(o, "recomputed_tokens", s->recomputed_tokens);
	put_u(o, "generated_tokens", s->generated_tokens);
	put_ms(o, "queue_ms", s->queue_ms);
	put_ms(o, "ttft_ms", s->ttft_ms);
	put_ms(o, "prefill_ms", s->prefill_ms);
	put_ms(o, "decode_ms", s->decode_ms);
	close_(o, '}');

	open_(o, "connections", '{');
	put_u(o, "open", s->server.conns_open);
	put_u(o, "total", s->server.conns_total);
	put_u(o, "refused", s->server.conns_refused);
	put_u(o, "frames_in", s->server.frames_in);
	put_u(o, "frames_out", s->server.frames_out);
	put_u(o, "protocol_errors", s->server.proto_errors);
	put_u(o, "slow_disconnects", s->server.slow_disconnects);
	open_(o, "list", '[');
	for (i = 0; i < s->n_conns && i < KVP_STATUS_MAX_CONNS; i++) {
		const struct kvp_status_conn *c = &s->conns[i];

		open_(o, NULL, '{');
		put_u(o, "id", c->id);
		put_i(o, "pid", (long long)c->pid);
		put_i(o, "uid", (long long)c->uid);
		put_str(o, "client", c->client, sizeof(c->client));
		put_u(o, "domain", c->domain);
		put_u(o, "in_flight", c->in_flight);
		put_u(o, "requests", c->requests);
		put_u(o, "generated_tokens", c->generated_tokens);
		put_u(o, "cached_tokens", c->cached_tokens);
		close_(o, '}');
	}
	close_(o, ']');
	close_(o, '}');

	open_(o, "domains", '[');
	for (i = 0; i < s->n_domains && i < KVP_STATUS_MAX_DOMAINS; i++) {
		const struct kvp_status_domain *d = &s->domains[i];

		open_(o, NULL, '{');
		put_str(o, "name", d->name, sizeof(d->name));
		put_u(o, "connections_open", d->conns_open);
		put_u(o, "requests", d->requests);
		close_(o, '}');
	}
	close_(o, ']');

	close_(o, '}');
	put(o, "\n");
	return finish(o);
}

/* One metric family: HELP and TYPE lines, then a sample. */
static void prom(struct out *o, const char *name, const char *type, const char *help,
		 const char *labels, double v)
{
	put(o, "# HELP kvpool_%s %s\n# TYPE kvpool_%s %s\n", name, help, name, type);
	put(o, "kvpool_%s%s %.15g\n", name, labels, finite_or_zero(v));
}

/* Another sample of the family just opened. */
static void prom_more(struct out *o, const char *name, const char *labels, double v)
{
	put(o, "kvpool_%s%s %.15g\n", name, labels, finite_or_zero(v));
}

int kvp_status_render_prom(const struct kvp_status_snap *s, char *buf, size_t cap)
{
	struct out out = { .buf = buf, .cap = cap };
	struct out *o = &out;
	char lab[96];
	uint32_t i;

	if (!cap)
		return -ENOSPC;
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
			put(o, "# HELP kvpool_arena_blocks KV blocks by NUMA arena and state.\n"
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
	return finish(o);
}
