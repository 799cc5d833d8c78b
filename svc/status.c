/* SPDX-License-Identifier: MIT */
/*
 * status.c - render a struct kvp_status_snap as JSON or Prometheus text (see status.h).
 *
 * One const table describes every figure once, in the style of config.c's key table:
 * where it goes in the JSON (object and member), its Prometheus family (name, labels,
 * type, help text, and the unit change from milliseconds to seconds), and its source,
 * a field of the snapshot.  Both renderers walk the table in order: the JSON opens an
 * object when the section changes; Prometheus writes HELP and TYPE at the first sample
 * of a family.  So a new counter is a field where it is counted and one row here.
 *
 * Output goes into the caller's buffer through a struct kvp_buf: once a write does not
 * fit, the render returns -ENOSPC, so a report is whole or absent.  The JSON goes
 * through util/json.h (strings escaped by jansson, ill-formed UTF-8 as \ufffd); numbers
 * that are not finite print as 0 in both formats.
 *
 * Thread: pure functions; any thread.
 */
#include "svc/status.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "util/buf.h"
#include "util/json.h"
#include "util/utf8.h"

enum kind {
	K_U64,	   /* uint64_t */
	K_U32,	   /* uint32_t */
	K_I64,	   /* int64_t */
	K_STR,	   /* char[size]; in Prometheus: 1, labelled {labels="<the string>"} */
	K_MS,	   /* double milliseconds: JSON %.3f */
	K_DBL,	   /* double: JSON %.6g */
	K_EXACT,   /* double that must read back exactly (a size): JSON %.15g */
	K_RATIO,   /* uint64_t at off / uint64_t at off2 (0 when that is 0): JSON %.6g */
	K_ARENAS,  /* sched.pool's arenas: a JSON array; Prometheus kvpool_arena_blocks */
	K_CONNS,   /* the listed connections: a JSON array */
	K_DOMAINS, /* the domains: a JSON array */
	K_ITL,	   /* sched's inter-token histogram: a JSON object; a Prometheus histogram */
	K_HIST,	   /* struct kvp_hist: a Prometheus histogram (seconds) */
	K_INFO,	   /* Prometheus only: 1, labelled {labels="<str at off>",labels2="<at off2>"} */
	K_TOP,	   /* a struct kvp_status_cache's top prefixes: a JSON array; Prometheus
		      kvpool_cache_prefix_hits by hash */
	K_DCACHE,  /* a domain's cache figures: a JSON object of dom_cache_defs */
};

/**
 * struct def - one figure of the report
 * @section:  JSON object it is a member of, NULL at the top level
 * @key:      JSON member name; NULL: Prometheus only
 * @kind:     how the source is read and printed
 * @off, @off2, @size: the source in struct kvp_status_snap (or in a list element)
 * @prom:     Prometheus family without "kvpool_"; NULL: JSON only
 * @labels:   the sample's labels ("{state=\"used\"}"), or a K_STR's label name
 * @type:     "gauge" or "counter"
 * @help:     HELP text, on the first sample of a family only
 * @div:      Prometheus value = source / div (1000: milliseconds to seconds)
 * @labels2, @size2: K_INFO's second label and the size of its source at @off2
 */
struct def {
	const char *section;
	const char *key;
	enum kind kind;
	size_t off;
	size_t off2;
	size_t size;
	const char *prom;
	const char *labels;
	const char *type;
	const char *help;
	double div;
	const char *labels2;
	size_t size2;
};

/* The tables below are laid out by hand, to be read as tables. */
/* clang-format off */
#define S(f) offsetof(struct kvp_status_snap, f)
#define SZ(f) sizeof(((struct kvp_status_snap *)0)->f)

/* A JSON-only figure. */
#define J(sec, k, kd, f) { .section = sec, .key = k, .kind = kd, .off = S(f), .size = SZ(f) }

/* A figure in both formats; the first of its Prometheus family carries the help text. */
#define JP(sec, k, kd, f, p, lab, t, h, d)						\
	{ .section = sec, .key = k, .kind = kd, .off = S(f), .size = SZ(f), .prom = p,	\
	  .labels = lab, .type = t, .help = h, .div = d }

/* A histogram of ended requests' times (Prometheus only). */
#define H(which, p, h)									\
	{ .section = "usage", .kind = K_HIST, .off = S(lat[which]), .size = SZ(lat[which]),	\
	  .prom = p, .labels = "", .type = "histogram", .help = h, .div = 1 }

/*
 * The prompt cache's figures, listed once: the daemon-wide "cache" section renders them
 * from the snapshot, and each domains[] entry's "cache" object from that domain's own
 * engine (struct kvp_status_domain has @sched and @cache members of the same types), so
 * both read alike.  Prometheus: kvpool_FAMILY for the daemon, kvpool_domain_FAMILY with
 * a domain="NAME" label for each domain.
 * R(JSON key, kind, source field, Prometheus family, labels, type, help)
 */
#define KVP_STATUS_CACHE_ROWS(R) \
	R("eviction", K_STR, cache.eviction, NULL, NULL, NULL, NULL) \
	R("ttl_default_s", K_U32, sched.cache_policy.ttl_default_s, NULL, NULL, NULL, NULL) \
	R("ttl_max_s", K_U32, sched.cache_policy.ttl_max_s, NULL, NULL, NULL, NULL) \
	R("min_tokens", K_U32, sched.cache_policy.min_tokens, NULL, NULL, NULL, NULL) \
	R("pin_max_bytes", K_U64, sched.cache_policy.pin_max_bytes, NULL, NULL, NULL, NULL) \
	R("retain_default", K_U32, sched.cache_policy.retain_default, NULL, NULL, NULL, NULL) \
	R("request_hit_rate", K_DBL, cache.request_hit_rate, "cache_request_hit_ratio", "", \
	  "gauge", "Requests that hit at least one cached block, of those that looked up.") \
	R("token_hit_rate", K_DBL, cache.token_hit_rate, "cache_token_hit_ratio", "", "gauge", \
	  "Prompt tokens served from memory, of those looked up.") \
	R("tokens_saved", K_U64, cache.tokens_saved, "cache_tokens_saved_total", "", "counter", \
	  "Prompt tokens not computed: read from memory or the disk tier.") \
	R("prefill_flops_saved", K_DBL, cache.flops_saved, "cache_prefill_flops_saved_total", "", \
	  "counter", "Prefill FLOPs those tokens would have cost (the model's figures).") \
	R("evictions", K_U64, sched.pool.evictions, "cache_evictions_total", "", "counter", \
	  "Cached blocks evicted from memory.") \
	R("evictions_ttl", K_U64, sched.pool.evictions_ttl, NULL, NULL, NULL, NULL) \
	R("recomputed_tokens", K_U64, sched.cache.evicted_tokens, "cache_recomputed_tokens_total", \
	  "", "counter", "Prompt tokens computed again because their blocks had been evicted.") \
	R("miss_none", K_U64, sched.cache.miss[KVP_MISS_NONE], "cache_requests_total", \
	  "{miss_reason=\"none\"}", "counter", \
	  "Requests by why the cache missed (none: a full hit).") \
	R("miss_no_prefix", K_U64, sched.cache.miss[KVP_MISS_NO_PREFIX], "cache_requests_total", \
	  "{miss_reason=\"no_prefix\"}", NULL, NULL) \
	R("miss_below_block", K_U64, sched.cache.miss[KVP_MISS_BELOW_BLOCK], \
	  "cache_requests_total", "{miss_reason=\"below_block\"}", NULL, NULL) \
	R("miss_below_minimum", K_U64, sched.cache.miss[KVP_MISS_BELOW_MINIMUM], \
	  "cache_requests_total", "{miss_reason=\"below_minimum\"}", NULL, NULL) \
	R("miss_evicted", K_U64, sched.cache.miss[KVP_MISS_EVICTED], "cache_requests_total", \
	  "{miss_reason=\"evicted\"}", NULL, NULL) \
	R("miss_evicted_memory", K_U64, sched.cache.miss_evicted_mem, NULL, NULL, NULL, NULL) \
	R("miss_evicted_disk", K_U64, sched.cache.miss_evicted_disk, NULL, NULL, NULL, NULL) \
	R("miss_salt_mismatch", K_U64, sched.cache.miss[KVP_MISS_SALT_MISMATCH], \
	  "cache_requests_total", "{miss_reason=\"salt_mismatch\"}", NULL, NULL) \
	R("miss_model_mismatch", K_U64, sched.cache.miss[KVP_MISS_MODEL_MISMATCH], \
	  "cache_requests_total", "{miss_reason=\"model_mismatch\"}", NULL, NULL) \
	R("miss_disabled", K_U64, sched.cache.miss[KVP_MISS_DISABLED], "cache_requests_total", \
	  "{miss_reason=\"disabled\"}", NULL, NULL) \
	R("miss_io_error", K_U64, sched.cache.miss[KVP_MISS_IO_ERROR], "cache_requests_total", \
	  "{miss_reason=\"io_error\"}", NULL, NULL) \
	R("pinned_blocks", K_U32, sched.pool.cpin_blocks, "cache_pinned_blocks", "", "gauge", \
	  "Blocks kept by `kvpool pin`.") \
	R("pinned_bytes", K_U64, cache.pinned_bytes, NULL, NULL, NULL, NULL) \
	R("pins", K_U64, sched.cache.pins, NULL, NULL, NULL, NULL) \
	R("unpins", K_U64, sched.cache.unpins, NULL, NULL, NULL, NULL) \
	R("pin_refused", K_U64, sched.cache.pin_refused, NULL, NULL, NULL, NULL) \
	R("flushes", K_U64, sched.cache.flushes, NULL, NULL, NULL, NULL) \
	R("flushed_blocks", K_U64, sched.cache.flushed_blocks, NULL, NULL, NULL, NULL) \
	R("written_never_read", K_U64, sched.index.evicted_unread, \
	  "cache_blocks_written_never_read_total", "", "counter", \
	  "Blocks evicted without ever being hit after they were written.") \
	R("cost_write_pct", K_U32, sched.cache_policy.cost_write_pct, NULL, NULL, NULL, NULL) \
	R("cost_read_pct", K_U32, sched.cache_policy.cost_read_pct, NULL, NULL, NULL, NULL) \
	R("cost_uncached", K_DBL, cache.cost_uncached, "cache_cost_tokens_total", \
	  "{view=\"uncached\"}", "counter", \
	  "Prompt cost in uncached-token units, without and with the cache.") \
	R("cost_cached", K_DBL, cache.cost_cached, "cache_cost_tokens_total", "{view=\"cached\"}", \
	  NULL, NULL) \
	R("cost_saved_ratio", K_DBL, cache.cost_saved_ratio, NULL, NULL, NULL, NULL) \
	R("parallel_requests", K_U64, sched.cache.parallel, NULL, NULL, NULL, NULL) \
	R("continuations", K_U64, sched.cache.continuations, NULL, NULL, NULL, NULL) \
	R("cow_copies", K_U64, sched.pool.cow_copies, NULL, NULL, NULL, NULL) \
	R("top_prefixes", K_TOP, cache, "cache_prefix_hits", "", "gauge", \
	  "Hits of the most hit prefixes, by the chain hash of their last block.")

static const struct def defs[] = {
	JP("daemon", "version", K_STR, version, "build_info", "version", "gauge",
	   "The daemon's version (1).", 1),
	J("daemon", "model", K_STR, model),
	J("daemon", "model_fingerprint", K_STR, model_fp),
	{ .section = "daemon", .kind = K_INFO, .off = S(model), .size = SZ(model),
	  .off2 = S(model_fp), .size2 = SZ(model_fp), .prom = "model_info", .labels = "name",
	  .labels2 = "fingerprint", .type = "gauge",
	  .help = "The model served: its name and fingerprint (1).", .div = 1 },
	J("daemon", "state", K_STR, state),
	J("daemon", "pid", K_U32, pid),
	J("daemon", "view", K_STR, view),
	J("daemon", "view_domain", K_STR, view_domain),
	JP("daemon", "uptime_ms", K_U64, uptime_ms, "uptime_seconds", "", "gauge",
	   "Seconds since the daemon started.", 1000),

	JP("pool", "bytes", K_U64, pool_bytes, "pool_bytes", "", "gauge",
	   "Size of the KV block pool.", 1),
	J("pool", "block_bytes", K_U64, block_bytes),
	J("pool", "block_tokens", K_U32, block_tokens),
	JP("pool", "page_kind", K_STR, page_kind, "pool_page_kind", "kind", "gauge",
	   "Page kind the pool obtained (1 for the kind).", 1),
	J("pool", "kv_dtype", K_STR, kv_dtype),
	/* exact: a 405B model's f16 K/V is 1,032,192 bytes a token, past 6 digits */
	J("pool", "bytes_per_token", K_EXACT, bytes_per_token),
	J("pool", "bytes_per_token_f32", K_U64, bytes_per_token_f32),
	JP("pool", "blocks_total", K_U64, blocks_total, "pool_blocks", "{state=\"total\"}",
	   "gauge", "KV blocks by state.", 1),
	JP("pool", "blocks_used", K_U64, blocks_used, "pool_blocks", "{state=\"used\"}", NULL,
	   NULL, 1),
	JP("pool", "blocks_cached", K_U64, blocks_cached, "pool_blocks", "{state=\"cached\"}",
	   NULL, NULL, 1),
	JP("pool", "blocks_free", K_U64, blocks_free, "pool_blocks", "{state=\"free\"}", NULL,
	   NULL, 1),
	JP("pool", "arenas", K_ARENAS, sched.pool, "arena_blocks", "", "gauge",
	   "KV blocks by NUMA arena and state.", 1),

	JP("index", "entries", K_U64, sched.index.entries, "index_entries", "", "gauge",
	   "Full blocks in the prefix index.", 1),
	JP("index", "lookups", K_U64, sched.lookups, "index_lookups_total", "", "counter",
	   "Requests that looked up the prefix index.", 1),
	JP("index", "hit_requests", K_U64, sched.hit_requests, "index_hit_requests_total", "",
	   "counter", "Lookups that hit at least one block.", 1),
	{ .section = "index", .key = "request_hit_rate", .kind = K_RATIO,
	  .off = S(sched.hit_requests), .off2 = S(sched.lookups) },
	JP("index", "lookup_tokens", K_U64, sched.lookup_tokens, "index_lookup_tokens_total", "",
	   "counter", "Prompt tokens looked up.", 1),
	JP("index", "hit_tokens", K_U64, sched.hit_tokens, "index_hit_tokens_total", "",
	   "counter", "Prompt tokens served from the cache.", 1),
	/* the request hit rate again: Prometheus has always listed it after the tokens */
	{ .section = "index", .kind = K_RATIO, .off = S(sched.hit_requests),
	  .off2 = S(sched.lookups), .prom = "index_request_hit_rate", .labels = "",
	  .type = "gauge", .help = "hit_requests / lookups.", .div = 1 },
	{ .section = "index", .key = "token_hit_rate", .kind = K_RATIO,
	  .off = S(sched.hit_tokens), .off2 = S(sched.lookup_tokens),
	  .prom = "index_token_hit_rate", .labels = "", .type = "gauge",
	  .help = "hit_tokens / lookup_tokens.", .div = 1 },
	J("index", "inserts", K_U64, index_inserts),
	JP("index", "evictions", K_U64, sched.pool.evictions, "index_evictions_total", "",
	   "counter", "Cached blocks evicted.", 1),

	JP("scheduler", "queued", K_U64, sched.queued, "sched_queued", "", "gauge",
	   "Requests waiting for admission.", 1),
	JP("scheduler", "running", K_U64, sched.running, "sched_running", "", "gauge",
	   "Sequences admitted and running.", 1),
	J("scheduler", "waiting_prefix", K_U64, sched.waiting_prefix),
	JP("scheduler", "cancels_received", K_U64, sched.cancels_received,
	   "sched_cancels_received_total", "", "counter",
	   "Cancels that reached the engine (at most one per request).", 1),
	J("scheduler", "requests_total", K_U64, req_total),
	JP("scheduler", "requests_done", K_U64, sched.req_done, "requests_total",
	   "{outcome=\"done\"}", "counter", "Requests by outcome.", 1),
	JP("scheduler", "requests_cancelled", K_U64, sched.req_cancelled, "requests_total",
	   "{outcome=\"cancelled\"}", NULL, NULL, 1),
	JP("scheduler", "requests_failed", K_U64, sched.req_failed, "requests_total",
	   "{outcome=\"failed\"}", NULL, NULL, 1),
	JP("scheduler", "requests_rejected", K_U64, req_rejected, "requests_total",
	   "{outcome=\"rejected\"}", NULL, NULL, 1),
	J("scheduler", "ttft_samples", K_U64, sched.ttft_samples),
	J("scheduler", "ttft_p50_ms", K_DBL, sched.ttft_p50_ms),
	J("scheduler", "ttft_p99_ms", K_DBL, sched.ttft_p99_ms),
	J("scheduler", "policy", K_STR, sched_policy),
	JP("scheduler", "queued_high", K_U64, sched.queued_high, "sched_queued_by_priority",
	   "{class=\"high\"}", "gauge", "Requests waiting for admission by priority (> 0, 0, < 0).",
	   1),
	JP("scheduler", "queued_normal", K_U64, sched.queued_normal, "sched_queued_by_priority",
	   "{class=\"normal\"}", NULL, NULL, 1),
	JP("scheduler", "queued_low", K_U64, sched.queued_low, "sched_queued_by_priority",
	   "{class=\"low\"}", NULL, NULL, 1),
	JP("scheduler", "preempted", K_U64, sched.preempted, "sched_preempted", "", "gauge",
	   "Preempted requests waiting to resume.", 1),
	JP("scheduler", "preemptions", K_U64, sched.preemptions, "sched_preemptions_total", "",
	   "counter", "Running requests preempted to make room for others.", 1),
	JP("scheduler", "preemptions_swapped", K_U64, sched.preempt_swapped,
	   "sched_preemptions_swapped_total", "", "counter",
	   "Preemptions whose blocks went to the disk tier (read back, not computed again).", 1),
	J("scheduler", "itl_p50_ms", K_DBL, sched.itl_p50_ms),
	J("scheduler", "itl_p99_ms", K_DBL, sched.itl_p99_ms),
	J("scheduler", "itl_max_ms", K_DBL, sched.itl_max_ms),
	JP("scheduler", "itl_histogram", K_ITL, sched.itl_le, "inter_token_seconds", "",
	   "histogram", "Time between two tokens of a request.", 1000),
	/* quantiles stay in the JSON: Prometheus gets histograms, which aggregate */
	J("scheduler", "step_p50_ms", K_DBL, sched.step_p50_ms),
	J("scheduler", "step_p99_ms", K_DBL, sched.step_p99_ms),
	J("scheduler", "step_max_ms", K_DBL, sched.step_max_ms),
	/* the same steps in counts: what the policy promises per step (tests read these) */
	J("scheduler", "steps", K_U64, sched.steps),
	J("scheduler", "decode_rows", K_U64, sched.decode_rows),
	J("scheduler", "prefill_steps", K_U64, sched.prefill_steps),
	J("scheduler", "prefill_tokens", K_U64, sched.prefill_tokens),
	/* the prompt's one copy: ids buffers kept as the history, and those grown first */
	J("scheduler", "prompts_moved", K_U64, sched.prompts_moved),
	J("scheduler", "prompts_grown", K_U64, sched.prompts_grown),
	/* speculative decoding: draft rows verified, kept, and the rate (svc/engine/spec.c) */
	JP("scheduler", "spec_drafted", K_U64, sched.spec_drafted, "sched_spec_drafted_total", "",
	   "counter", "Draft tokens verified in decode steps (speculative decoding).", 1),
	JP("scheduler", "spec_accepted", K_U64, sched.spec_accepted, "sched_spec_accepted_total",
	   "", "counter", "Draft tokens the model's pick agreed with (kept).", 1),
	{ .section = "scheduler", .key = "spec_acceptance", .kind = K_RATIO,
	  .off = S(sched.spec_accepted), .off2 = S(sched.spec_drafted),
	  .prom = "sched_spec_acceptance_ratio", .labels = "", .type = "gauge",
	  .help = "spec_accepted / spec_drafted.", .div = 1 },
	JP("scheduler", "step_target_ms", K_DBL, sched.step_target_ms, "sched_step_target_seconds",
	   "", "gauge", "Step time aimed at while requests generate (fair policy).", 1000),
	JP("scheduler", "prefill_step_ms", K_DBL, sched.prefill_step_ms,
	   "sched_prefill_step_seconds", "", "gauge",
	   "Longest prefill step while nothing generates (fair policy).", 1000),
	J("scheduler", "calib_decode_ms", K_DBL, sched.calib_decode_ms),
	J("scheduler", "calib_call_ms", K_DBL, sched.calib_call_ms),
	J("scheduler", "calib_token_ms", K_DBL, sched.calib_token_ms),

	JP("usage", "prompt_tokens", K_U64, sched.prompt_tokens, "tokens_total",
	   "{kind=\"prompt\"}", "counter", "Tokens by kind (DONE usage fields).", 1),
	JP("usage", "cached_tokens", K_U64, sched.cached_tokens, "tokens_total",
	   "{kind=\"cached\"}", NULL, NULL, 1),
	JP("usage", "cache_creation_tokens", K_U64, sched.cache_creation_tokens, "tokens_total",
	   "{kind=\"cache_creation\"}", NULL, NULL, 1),
	JP("usage", "recomputed_tokens", K_U64, sched.recomputed_tokens, "tokens_total",
	   "{kind=\"recomputed\"}", NULL, NULL, 1),
	JP("usage", "generated_tokens", K_U64, sched.generated_tokens, "tokens_total",
	   "{kind=\"generated\"}", NULL, NULL, 1),
	JP("usage", "cached_tokens_disk", K_U64, sched.cached_tokens_disk, "tokens_total",
	   "{kind=\"cached_disk\"}", NULL, NULL, 1),
	JP("usage", "swapped_tokens", K_U64, sched.swapped_tokens, "tokens_total",
	   "{kind=\"swapped\"}", NULL, NULL, 1),
	JP("usage", "resume_computed_tokens", K_U64, sched.resume_computed_tokens, "tokens_total",
	   "{kind=\"resume_computed\"}", NULL, NULL, 1),
	JP("usage", "cached_tokens_remote", K_U64, sched.cached_tokens_remote, "tokens_total",
	   "{kind=\"cached_remote\"}", NULL, NULL, 1),
	J("usage", "preemptions", K_U64, sched.preempt_usage),
	JP("usage", "queue_ms", K_MS, sched.queue_ms, "request_seconds_total",
	   "{phase=\"queue\"}", "counter",
	   "Usage times summed over ended requests (DONE usage fields).", 1000),
	JP("usage", "ttft_ms", K_MS, sched.ttft_ms, "request_seconds_total", "{phase=\"ttft\"}",
	   NULL, NULL, 1000),
	JP("usage", "prefill_ms", K_MS, sched.prefill_ms, "request_seconds_total",
	   "{phase=\"prefill\"}", NULL, NULL, 1000),
	JP("usage", "decode_ms", K_MS, sched.decode_ms, "request_seconds_total",
	   "{phase=\"decode\"}", NULL, NULL, 1000),
	H(KVP_LAT_TTFT, "ttft_seconds",
	  "Time to first token: receipt to the first generated token, per request."),
	H(KVP_LAT_QUEUE, "queue_seconds", "Receipt to admission (blocks reserved), per request."),
	H(KVP_LAT_PREFILL, "prefill_seconds", "Prefill compute time, per request."),
	H(KVP_LAT_DECODE, "decode_seconds", "First token to the last, per request."),

	J("tier", "state", K_STR, tier_state),
	J("tier", "slots", K_U64, sched.tier.tier.slots),
	J("tier", "file_bytes", K_U64, sched.tier.tier.file_bytes),
	JP("tier", "blocks", K_U64, sched.tier.tier.blocks, "tier_blocks", "", "gauge",
	   "Blocks in the disk tier.", 1),
	JP("tier", "bytes", K_U64, sched.tier.tier.bytes, "tier_bytes", "", "gauge",
	   "K/V bytes in the disk tier.", 1),
	JP("tier", "writes", K_U64, sched.tier.tier.writes, "tier_writes_total", "", "counter",
	   "Blocks written to the disk tier.", 1),
	JP("tier", "write_bytes", K_U64, sched.tier.tier.write_bytes, "tier_write_bytes_total", "",
	   "counter", "Bytes written to the disk tier.", 1),
	JP("tier", "reads", K_U64, sched.tier.tier.reads, "tier_reads_total", "", "counter",
	   "Blocks read back from the disk tier and checked.", 1),
	JP("tier", "read_bytes", K_U64, sched.tier.tier.read_bytes, "tier_read_bytes_total", "",
	   "counter", "Bytes read back from the disk tier.", 1),
	J("tier", "write_mb_s", K_DBL, sched.tier.write_mb_s),
	J("tier", "read_mb_s", K_DBL, sched.tier.read_mb_s),
	JP("tier", "checksum_failures", K_U64, sched.tier.tier.checksum_failures,
	   "tier_checksum_failures_total", "", "counter",
	   "Blocks that failed their check: dropped, never served.", 1),
	J("tier", "reread_recovered", K_U64, sched.tier.tier.reread_recovered),
	JP("tier", "errors", K_U64, sched.tier.tier.errors, "tier_errors_total", "", "counter",
	   "I/O and setup errors of the disk tier (the first turns it off).", 1),
	JP("tier", "degraded", K_I64, tier_degraded, "tier_degraded", "", "gauge",
	   "The -errno that turned the disk tier off (memory only); 0 while it works.", 1),
	JP("tier", "offloaded", K_U64, sched.tier.offloaded, "tier_offloaded_total", "",
	   "counter", "Cold blocks the watermark offloader wrote to the tier.", 1),
	J("tier", "offload_freed", K_U64, sched.tier.offload_freed),
	J("tier", "saved", K_U64, sched.tier.saved),
	J("tier", "reloads", K_U64, sched.tier.reloads),
	J("tier", "reload_failures", K_U64, sched.tier.reload_failures),
	J("tier", "reload_p50_ms", K_DBL, tier_reload_p50_ms),
	J("tier", "reload_p99_ms", K_DBL, tier_reload_p99_ms),
	J("tier", "flushes", K_U64, sched.tier.flushes),
	J("tier", "rebuilt", K_U64, sched.tier.tier.rebuilt),
	J("tier", "orphans", K_U64, sched.tier.tier.orphans),
	J("tier", "scan_corrupt", K_U64, sched.tier.tier.scan_corrupt),
	J("tier", "scan_foreign", K_U64, sched.tier.tier.scan_foreign),
	J("tier", "scan_ms", K_MS, tier_scan_ms),
	JP("tier", "type_resets", K_U64, sched.tier.tier.type_resets, "tier_type_resets_total", "",
	   "counter", "Tier files reset at start because they were written with another K/V type.",
	   1),

	/* the remote tier (docs/remote.md "In the daemon"); sched.remote.tier: this domain's */
	JP("remote", "state", K_STR, remote_state, "remote_state", "state", "gauge",
	   "Remote tier: off (none configured), on (breaker closed), open, probing (1).", 1),
	JP("remote", "breaker_opens", K_U64, sched.remote.tier.breaker_opens,
	   "remote_breaker_opens_total", "", "counter",
	   "Times the remote tier's circuit breaker opened (the tier off).", 1),
	J("remote", "probes", K_U64, sched.remote.tier.probes),
	J("remote", "connects", K_U64, sched.remote.tier.connects),
	JP("remote", "errors", K_U64, sched.remote.tier.errors, "remote_errors_total", "",
	   "counter", "Remote store connection errors (refused, reset, stalled, timed out).", 1),
	J("remote", "error_replies", K_U64, sched.remote.tier.error_replies),
	JP("remote", "fetches", K_U64, sched.remote.tier.fetches, "remote_fetches_total", "",
	   "counter", "Fetches the remote tier accepted.", 1),
	J("remote", "fetch_refused", K_U64, sched.remote.tier.fetch_refused),
	J("remote", "fetch_busy", K_U64, sched.remote.tier.fetch_busy),
	J("remote", "fetch_blocks", K_U64, sched.remote.fetch_blocks),
	J("remote", "exist_checked", K_U64, sched.remote.tier.exist_checked),
	J("remote", "exist_found", K_U64, sched.remote.tier.exist_found),
	JP("remote", "hit_blocks", K_U64, sched.remote.tier.hit_blocks, "remote_hit_blocks_total",
	   "", "counter", "Blocks fetched from the remote store and checked.", 1),
	JP("remote", "hit_bytes", K_U64, sched.remote.tier.hit_bytes, "remote_hit_bytes_total", "",
	   "counter", "K/V bytes fetched from the remote store and checked.", 1),
	J("remote", "loaded_blocks", K_U64, sched.remote.loaded_blocks),
	J("remote", "holes", K_U64, sched.remote.tier.holes),
	J("remote", "cost_skips", K_U64, sched.remote.tier.cost_skips),
	J("remote", "deadline_cuts", K_U64, sched.remote.tier.deadline_cuts),
	JP("remote", "verify_failures", K_U64, sched.remote.tier.verify_failures,
	   "remote_verify_failures_total", "", "counter",
	   "Remote values that failed their check (never served).", 1),
	J("remote", "offered", K_U64, sched.remote.offered),
	J("remote", "evict_offers", K_U64, sched.remote.evict_offers),
	JP("remote", "publishes", K_U64, sched.remote.tier.publishes, "remote_publishes_total", "",
	   "counter", "Blocks queued for the remote store.", 1),
	J("remote", "publish_skipped", K_U64, sched.remote.tier.publish_skipped),
	JP("remote", "publish_drops", K_U64, sched.remote.tier.publish_drops,
	   "remote_publish_drops_total", "{why=\"full\"}", "counter",
	   "Blocks not published to the remote store: queue full, or the tier off.", 1),
	JP("remote", "publish_off_drops", K_U64, sched.remote.tier.publish_off_drops,
	   "remote_publish_drops_total", "{why=\"off\"}", NULL, NULL, 1),
	J("remote", "backlog_drops", K_U64, sched.remote.backlog_drops),
	J("remote", "publish_lost", K_U64, sched.remote.tier.publish_lost),
	J("remote", "stored", K_U64, sched.remote.tier.stored),
	J("remote", "already", K_U64, sched.remote.tier.already),
	J("remote", "publish_errors", K_U64, sched.remote.tier.publish_errors),
	J("remote", "bytes_written", K_U64, sched.remote.tier.bytes_written),
	J("remote", "route_published", K_U64, sched.remote.tier.route_published),
	J("remote", "fetch_p50_ms", K_DBL, sched.remote.tier.fetch_p50_ms),
	JP("remote", "fetch_p99_ms", K_DBL, sched.remote.tier.fetch_p99_ms,
	   "remote_fetch_p99_seconds", "", "gauge",
	   "99th percentile of the last 1024 remote fetches, submit to completion.", 1000),
	J("remote", "rtt_ms", K_DBL, sched.remote.tier.rtt_ms),
	J("remote", "bw_mbps", K_DBL, sched.remote.tier.bw_mbps),
	J("remote", "last_error", K_STR, sched.remote.tier.last_error),

	JP("connections", "open", K_U64, server.conns_open, "connections_open", "", "gauge",
	   "Open client connections.", 1),
	JP("connections", "total", K_U64, server.conns_total, "connections_total", "",
	   "counter", "Connections accepted.", 1),
	JP("connections", "refused", K_U64, server.conns_refused, "connections_refused_total",
	   "", "counter", "Connections refused (limit).", 1),
	JP("connections", "refused_per_uid", K_U64, server.conns_refused_uid,
	   "connections_refused_per_uid_total", "", "counter",
	   "Connections refused because their uid held server.max_conns_per_uid.", 1),
	JP("connections", "refused_no_fds", K_U64, server.conns_refused_fds,
	   "connections_refused_no_fds_total", "", "counter",
	   "Connections answered BUSY because the daemon was out of file descriptors.", 1),
	JP("connections", "idle_closed", K_U64, server.idle_closes, "connections_idle_closed_total",
	   "", "counter", "Connections closed after server.idle_timeout_ms with nothing in flight.",
	   1),
	J("connections", "frames_in", K_U64, server.frames_in),
	J("connections", "frames_out", K_U64, server.frames_out),
	JP("connections", "protocol_errors", K_U64, server.proto_errors, "protocol_errors_total",
	   "", "counter", "Malformed frames answered with ERROR.", 1),
	JP("connections", "slow_disconnects", K_U64, server.slow_disconnects,
	   "slow_disconnects_total", "", "counter", "Clients dropped for not reading.", 1),
	JP("connections", "refusal_closes", K_U64, server.refusal_closes, "refusal_closes_total",
	   "", "counter",
	   "Connections closed after server.max_refusals refused requests in a row.", 1),
	J("connections", "list", K_CONNS, conns),

	JP("text", "jobs", K_U64, text_jobs, "text_jobs_total", "", "counter",
	   "Requests whose text the text worker rendered and tokenized (off the loop).", 1),
	JP("text", "bytes", K_U64, text_bytes, "text_bytes_total", "", "counter",
	   "Text bytes of those requests.", 1),
	JP("text", "pending", K_U64, text_pending, "text_pending", "", "gauge",
	   "Requests the text worker has now.", 1),

	JP("leases", "active", K_U64, sched.leases_active, "leases_active", "", "gauge",
	   "Leases held by clients now (their blocks stay referenced).", 1),
	JP("leases", "granted", K_U64, sched.leases_granted, "leases_total", "", "counter",
	   "Leases granted.", 1),
	JP("leases", "released", K_U64, sched.leases_released, "leases_ended_total",
	   "{how=\"released\"}", "counter", "Leases ended, by how.", 1),
	JP("leases", "expired", K_U64, sched.leases_expired, "leases_ended_total",
	   "{how=\"expired\"}", "counter", NULL, 1),
	JP("leases", "closed", K_U64, sched.leases_closed, "leases_ended_total",
	   "{how=\"closed\"}", "counter", NULL, 1),
	JP("leases", "refused", K_U64, sched.leases_refused, "leases_refused_total", "",
	   "counter", "LEASEs refused (leases.max_per_conn reached).", 1),
#define CROW_SNAP(k, kd, f, p, lab, t, h) JP("cache", k, kd, f, p, lab, t, h, 1),
	KVP_STATUS_CACHE_ROWS(CROW_SNAP)
#undef CROW_SNAP

	JP("domain_slots", "open", K_U64, slots.open, "domains_open", "", "gauge",
	   "Trust domains open now.", 1),
	J("domain_slots", "max", K_U64, slots.max),
	JP("domain_slots", "made", K_U64, slots.made, "domains_made_total", "", "counter",
	   "Per-uid domains made on a uid's first HELLO.", 1),
	JP("domain_slots", "reclaimed", K_U64, slots.reclaimed, "domains_reclaimed_total", "",
	   "counter", "Idle per-uid domains reclaimed (domains.idle_reclaim_ms).", 1),
	JP("domain_slots", "refused_max", K_U64, slots.refused_max, "domains_refused_total",
	   "{why=\"max\"}", "counter",
	   "HELLOs refused BUSY for want of a domain: domains.max open, or no memory.", 1),
	JP("domain_slots", "refused_memory", K_U64, slots.refused_memory, "domains_refused_total",
	   "{why=\"memory\"}", NULL, NULL, 1),
	J(NULL, "domains", K_DOMAINS, domains),
};

/* The members of one element of a list: offsets into its own struct. */
#define E(type, k, kd, f) { .key = k, .kind = kd, .off = offsetof(type, f), \
			    .size = sizeof(((type *)0)->f) }

static const struct def arena_defs[] = {
	E(struct kvp_arena_stats, "node", K_U32, node_os_index),
	E(struct kvp_arena_stats, "blocks_total", K_U32, n_blocks),
	E(struct kvp_arena_stats, "blocks_used", K_U32, used),
	E(struct kvp_arena_stats, "blocks_cached", K_U32, cached),
	E(struct kvp_arena_stats, "blocks_free", K_U32, free),
};

static const struct def conn_defs[] = {
	E(struct kvp_status_conn, "id", K_U64, id),
	E(struct kvp_status_conn, "pid", K_I64, pid),
	E(struct kvp_status_conn, "uid", K_I64, uid),
	E(struct kvp_status_conn, "client", K_STR, client),
	E(struct kvp_status_conn, "domain", K_U32, domain),
	E(struct kvp_status_conn, "in_flight", K_U32, in_flight),
	E(struct kvp_status_conn, "requests", K_U64, requests),
	E(struct kvp_status_conn, "generated_tokens", K_U64, generated_tokens),
	E(struct kvp_status_conn, "cached_tokens", K_U64, cached_tokens),
};

static const struct def prefix_defs[] = {
	E(struct kvp_status_prefix, "hash", K_STR, hash),
	E(struct kvp_status_prefix, "tokens", K_U32, tokens),
	E(struct kvp_status_prefix, "hits", K_U64, hits),
};

static const struct def domain_defs[] = {
	E(struct kvp_status_domain, "name", K_STR, name),
	E(struct kvp_status_domain, "connections_open", K_U64, conns_open),
	E(struct kvp_status_domain, "requests", K_U64, requests),
	E(struct kvp_status_domain, "pool_bytes", K_U64, pool_bytes),
	E(struct kvp_status_domain, "blocks_total", K_U64, blocks_total),
	E(struct kvp_status_domain, "blocks_used", K_U64, blocks_used),
	E(struct kvp_status_domain, "blocks_cached", K_U64, blocks_cached),
	E(struct kvp_status_domain, "blocks_free", K_U64, blocks_free),
	E(struct kvp_status_domain, "lookups", K_U64, lookups),
	E(struct kvp_status_domain, "hit_requests", K_U64, hit_requests),
	E(struct kvp_status_domain, "prompt_tokens", K_U64, prompt_tokens),
	E(struct kvp_status_domain, "cached_tokens", K_U64, cached_tokens),
	E(struct kvp_status_domain, "evictions", K_U64, evictions),
	E(struct kvp_status_domain, "operators", K_U32, operators),
	E(struct kvp_status_domain, "priority", K_I64, priority),
	{ .key = "cache", .kind = K_DCACHE },
};

/* A domain's "cache" object: the rows of the daemon-wide section, read from the domain. */
#define CROW_DOM(k, kd, f, p, lab, t, h)						\
	{ .section = "cache", .key = k, .kind = kd,					\
	  .off = offsetof(struct kvp_status_domain, f),					\
	  .size = sizeof(((struct kvp_status_domain *)0)->f), .prom = p, .labels = lab,	\
	  .type = t, .help = h, .div = 1 },
static const struct def dom_cache_defs[] = { KVP_STATUS_CACHE_ROWS(CROW_DOM) };
#undef CROW_DOM

/* clang-format on */

#define N(a) (sizeof(a) / sizeof((a)[0]))

static uint64_t u64_at(const void *base, size_t off)
{
	uint64_t v;

	memcpy(&v, (const char *)base + off, sizeof(v));
	return v;
}

static double dbl_at(const void *base, size_t off)
{
	double v;

	memcpy(&v, (const char *)base + off, sizeof(v));
	return v;
}

/* A numeric source as a double (K_STR and the lists have none). */
static double value(const struct def *d, const void *base)
{
	const char *p = (const char *)base + d->off;

	switch (d->kind) {
	case K_U64:
		return (double)u64_at(base, d->off);
	case K_U32:
		return (double)*(const uint32_t *)p;
	case K_I64:
		return (double)*(const int64_t *)p;
	case K_MS:
	case K_DBL:
	case K_EXACT:
		return dbl_at(base, d->off);
	case K_RATIO:
		return kvp_status_ratio(u64_at(base, d->off), u64_at(base, d->off2));
	default:
		return 0;
	}
}

static uint32_t n_arenas(const struct kvp_status_snap *s)
{
	return s->sched.pool.n_arenas < KVP_STATUS_MAX_ARENAS ? s->sched.pool.n_arenas :
								KVP_STATUS_MAX_ARENAS;
}

static void json_members(struct kvp_json *j, const struct def *defs_, size_t n, const void *base);

/* A K_TOP source: the struct kvp_status_cache at @d's offset in @base. */
static const struct kvp_status_cache *top_of(const struct def *d, const void *base)
{
	return (const struct kvp_status_cache *)((const char *)base + d->off);
}

static uint32_t n_top(const struct kvp_status_cache *c)
{
	return c->n_top < KVP_CACHE_TOP ? c->n_top : KVP_CACHE_TOP;
}

/* Bucket i's upper bound as text: "5", "2500", "+Inf" (ms; Prometheus: s with @div). */
static void itl_bound(char *buf, size_t cap, uint32_t i, double div)
{
	double b = kvp_sched_itl_bound_ms(i);

	if (isinf(b))
		snprintf(buf, cap, "+Inf");
	else
		snprintf(buf, cap, "%g", b / div);
}

/* The inter-token histogram: cumulative counts by upper bound (ms), their sum and count. */
static void json_itl(struct kvp_json *j, const char *key, const struct kvp_status_snap *s)
{
	char name[32];

	kvp_json_begin(j, key, '{');
	for (uint32_t i = 0; i < KVP_SCHED_ITL_BUCKETS; i++) {
		char b[16];

		itl_bound(b, sizeof(b), i, 1);
		snprintf(name, sizeof(name), "le_%s", b);
		kvp_json_u64(j, name, s->sched.itl_le[i]);
	}
	kvp_json_u64(j, "count", s->sched.itl_count);
	kvp_json_fixed(j, "sum_ms", s->sched.itl_sum_ms, 3);
	kvp_json_end(j, '}');
}

/* One JSON array of @n elements of @size bytes at @elems, each an object of @defs_. */
static void json_list(struct kvp_json *j, const char *key, const struct def *defs_, size_t n_defs,
		      const void *elems, size_t size, uint32_t n)
{
	kvp_json_begin(j, key, '[');
	for (uint32_t i = 0; i < n; i++) {
		kvp_json_begin(j, NULL, '{');
		json_members(j, defs_, n_defs, (const char *)elems + (size_t)i * size);
		kvp_json_end(j, '}');
	}
	kvp_json_end(j, ']');
}

static void json_member(struct kvp_json *j, const struct def *d, const void *base)
{
	const struct kvp_status_snap *s = base;
	const char *p = (const char *)base + d->off;

	switch (d->kind) {
	case K_U64:
		kvp_json_u64(j, d->key, u64_at(base, d->off));
		break;
	case K_U32:
		kvp_json_u64(j, d->key, *(const uint32_t *)p);
		break;
	case K_I64:
		kvp_json_i64(j, d->key, *(const int64_t *)p);
		break;
	case K_STR:
		kvp_json_str(j, d->key, p, strnlen(p, d->size));
		break;
	case K_MS:
		kvp_json_fixed(j, d->key, value(d, base), 3); /* to the microsecond */
		break;
	case K_DBL:
	case K_RATIO:
		kvp_json_sig(j, d->key, value(d, base), 6);
		break;
	case K_EXACT:
		kvp_json_sig(j, d->key, value(d, base), 15);
		break;
	case K_ARENAS:
		json_list(j, d->key, arena_defs, N(arena_defs), s->sched.pool.arena,
			  sizeof(s->sched.pool.arena[0]), n_arenas(s));
		break;
	case K_CONNS:
		json_list(j, d->key, conn_defs, N(conn_defs), s->conns, sizeof(s->conns[0]),
			  s->n_conns < KVP_STATUS_MAX_CONNS ? s->n_conns : KVP_STATUS_MAX_CONNS);
		break;
	case K_DOMAINS:
		json_list(j, d->key, domain_defs, N(domain_defs), s->domains, sizeof(s->domains[0]),
			  s->n_domains < KVP_STATUS_MAX_DOMAINS ? s->n_domains :
								  KVP_STATUS_MAX_DOMAINS);
		break;
	case K_TOP:
		json_list(j, d->key, prefix_defs, N(prefix_defs), top_of(d, base)->top,
			  sizeof(top_of(d, base)->top[0]), n_top(top_of(d, base)));
		break;
	case K_DCACHE:
		kvp_json_begin(j, d->key, '{');
		json_members(j, dom_cache_defs, N(dom_cache_defs), base);
		kvp_json_end(j, '}');
		break;
	case K_ITL:
		json_itl(j, d->key, s);
		break;
	case K_HIST:
	case K_INFO:
		break; /* Prometheus only */
	}
}

static void json_members(struct kvp_json *j, const struct def *defs_, size_t n, const void *base)
{
	for (size_t i = 0; i < n; i++)
		json_member(j, &defs_[i], base);
}

static bool same_section(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

double kvp_status_ratio(uint64_t hits, uint64_t total)
{
	return total ? (double)hits / (double)total : 0.0;
}

int kvp_status_render_json(const struct kvp_status_snap *s, char *buf, size_t cap)
{
	const char *section = NULL;
	struct kvp_buf out;
	struct kvp_json j;

	kvp_buf_init_fixed(&out, buf, cap);
	kvp_json_init(&j, &out);
	kvp_json_begin(&j, NULL, '{');
	for (size_t i = 0; i < N(defs); i++) {
		const struct def *d = &defs[i];

		if (!d->key)
			continue;
		if (!same_section(d->section, section)) {
			if (section)
				kvp_json_end(&j, '}');
			if (d->section)
				kvp_json_begin(&j, d->section, '{');
			section = d->section;
		}
		json_member(&j, d, s);
	}
	if (section)
		kvp_json_end(&j, '}');
	kvp_json_end(&j, '}');
	kvp_buf_add(&out, "\n", 1);
	return kvp_buf_finish(&out);
}

/* Prometheus takes NaN, but a report of ours never means it: print 0 as the JSON does. */
static double finite_or_zero(double v)
{
	return isfinite(v) ? v : 0.0;
}

static void prom_sample(struct kvp_buf *o, const char *name, const char *labels, double v)
{
	kvp_buf_printf(o, "kvpool_%s%s %.15g\n", name, labels, finite_or_zero(v));
}

/*
 * A label value as the text format wants it: backslash, quote and newline escaped; other
 * control characters and bytes that are not well-formed UTF-8 (a model's name is what
 * its file says) become '?', so the exposition always parses.
 */
static void prom_label(char *out, size_t cap, const char *p, size_t n)
{
	size_t k = 0;

	n = strnlen(p, n);
	for (size_t i = 0; i < n && k + 5 < cap;) {
		unsigned char c = (unsigned char)p[i];
		size_t len = c < 0x80 ? 1 : kvp_utf8_char_len(p + i, n - i);

		if (c >= 0x80 && len) {
			memcpy(out + k, p + i, len);
			k += len;
			i += len;
			continue;
		}
		if (c == '\\' || c == '"' || c == '\n') {
			out[k++] = '\\';
			out[k++] = c == '\n' ? 'n' : (char)c;
		} else {
			out[k++] = c < 0x20 || c >= 0x7f ? '?' : (char)c;
		}
		i++;
	}
	out[k] = '\0';
}

/* kvpool_<name>_bucket{le=...} (cumulative), _sum and _count of one histogram. */
static void prom_hist(struct kvp_buf *o, const struct def *d, const struct kvp_status_snap *s)
{
	struct kvp_hist h;

	memcpy(&h, (const char *)s + d->off, sizeof(h));
	for (unsigned int i = 0; i < KVP_HIST_BUCKETS; i++)
		kvp_buf_printf(o, "kvpool_%s_bucket{le=\"%g\"} %llu\n", d->prom,
			       kvp_hist_bounds_s[i],
			       (unsigned long long)kvp_hist_cumulative(&h, i));
	kvp_buf_printf(o, "kvpool_%s_bucket{le=\"+Inf\"} %llu\n", d->prom,
		       (unsigned long long)h.count);
	kvp_buf_printf(o, "kvpool_%s_sum %.15g\nkvpool_%s_count %llu\n", d->prom,
		       finite_or_zero(h.sum_s), d->prom, (unsigned long long)h.count);
}

/* kvpool_arena_blocks: each listed arena's blocks by state (the total is pool_blocks). */
static void prom_arenas(struct kvp_buf *o, const struct def *d, const struct kvp_status_snap *s)
{
	static const char *const states[] = { "used", "cached", "free" };
	char lab[96];

	for (uint32_t i = 0; i < n_arenas(s); i++) {
		const struct kvp_arena_stats *a = &s->sched.pool.arena[i];
		const uint32_t v[] = { a->used, a->cached, a->free };

		/* the family is declared only when it has a sample */
		if (i == 0)
			kvp_buf_printf(o, "# HELP kvpool_%s %s\n# TYPE kvpool_%s %s\n", d->prom,
				       d->help, d->prom, d->type);
		for (size_t k = 0; k < N(states); k++) {
			snprintf(lab, sizeof(lab), "{node=\"%u\",state=\"%s\"}", a->node_os_index,
				 states[k]);
			prom_sample(o, d->prom, lab, (double)v[k]);
		}
	}
}

/* kvpool_inter_token_seconds: a Prometheus histogram (cumulative buckets, sum, count). */
static void prom_itl(struct kvp_buf *o, const struct def *d, const struct kvp_status_snap *s)
{
	char lab[64], b[16];

	kvp_buf_printf(o, "# HELP kvpool_%s %s\n# TYPE kvpool_%s %s\n", d->prom, d->help, d->prom,
		       d->type);
	for (uint32_t i = 0; i < KVP_SCHED_ITL_BUCKETS; i++) {
		itl_bound(b, sizeof(b), i, d->div);
		snprintf(lab, sizeof(lab), "_bucket{le=\"%s\"}", b);
		prom_sample(o, d->prom, lab, (double)s->sched.itl_le[i]);
	}
	prom_sample(o, d->prom, "_sum", s->sched.itl_sum_ms / d->div);
	prom_sample(o, d->prom, "_count", (double)s->sched.itl_count);
}

/* The per-domain families, each sample labelled with its domain's name. */
static void prom_domains(struct kvp_buf *o, const struct kvp_status_snap *s)
{
	static const struct {
		const char *name, *type, *help;
		size_t off;
	} fam[] = {
		{ "domain_blocks_used", "gauge", "Blocks referenced now, by trust domain.",
		  offsetof(struct kvp_status_domain, blocks_used) },
		{ "domain_blocks_cached", "gauge", "Cached unreferenced blocks, by trust domain.",
		  offsetof(struct kvp_status_domain, blocks_cached) },
		{ "domain_blocks_free", "gauge", "Free blocks, by trust domain.",
		  offsetof(struct kvp_status_domain, blocks_free) },
		{ "domain_requests_total", "counter", "Requests accepted, by trust domain.",
		  offsetof(struct kvp_status_domain, requests) },
		{ "domain_hit_requests_total", "counter",
		  "Requests with at least one cached block, by trust domain.",
		  offsetof(struct kvp_status_domain, hit_requests) },
		{ "domain_cached_tokens_total", "counter",
		  "Prompt tokens served from the cache, by trust domain.",
		  offsetof(struct kvp_status_domain, cached_tokens) },
		{ "domain_evictions_total", "counter", "Cached blocks evicted, by trust domain.",
		  offsetof(struct kvp_status_domain, evictions) },
	};
	uint32_t n = s->n_domains < KVP_STATUS_MAX_DOMAINS ? s->n_domains : KVP_STATUS_MAX_DOMAINS;
	char name[2 * 32 + 1], lab[160];

	if (!n)
		return;
	for (size_t f = 0; f < N(fam); f++) {
		kvp_buf_printf(o, "# HELP kvpool_%s %s\n# TYPE kvpool_%s %s\n", fam[f].name,
			       fam[f].help, fam[f].name, fam[f].type);
		for (uint32_t i = 0; i < n; i++) {
			uint64_t v;

			memcpy(&v, (const char *)&s->domains[i] + fam[f].off, sizeof(v));
			prom_label(name, sizeof(name), s->domains[i].name,
				   sizeof(s->domains[i].name));
			snprintf(lab, sizeof(lab), "{domain=\"%s\"}", name);
			prom_sample(o, fam[f].name, lab, (double)v);
		}
	}
}

/* The samples of @c's most hit prefixes, each labelled @pre (empty, or "domain=\"x\","). */
static void prom_top(struct kvp_buf *o, const char *family, const char *pre,
		     const struct kvp_status_cache *c)
{
	char lab[400];

	for (uint32_t k = 0; k < n_top(c); k++) {
		snprintf(lab, sizeof(lab), "{%shash=\"%s\",tokens=\"%u\"}", pre, c->top[k].hash,
			 c->top[k].tokens);
		prom_sample(o, family, lab, (double)c->top[k].hits);
	}
}

/*
 * The cache families again, by domain: kvpool_domain_FAMILY{domain="NAME",...}, one
 * sample per domain, from the rows the daemon-wide ones come from.
 */
static void prom_domain_cache(struct kvp_buf *o, const struct kvp_status_snap *s)
{
	uint32_t n = s->n_domains < KVP_STATUS_MAX_DOMAINS ? s->n_domains : KVP_STATUS_MAX_DOMAINS;
	char name[2 * 32 + 1], family[96], pre[96], lab[256];

	if (!n)
		return;
	for (size_t i = 0; i < N(dom_cache_defs); i++) {
		const struct def *d = &dom_cache_defs[i];

		if (!d->prom)
			continue;
		snprintf(family, sizeof(family), "domain_%s", d->prom);
		if (d->help)
			kvp_buf_printf(
				o, "# HELP kvpool_%s %s (by trust domain)\n# TYPE kvpool_%s %s\n",
				family, d->help, family, d->type);
		for (uint32_t k = 0; k < n; k++) {
			const struct kvp_status_domain *dom = &s->domains[k];

			prom_label(name, sizeof(name), dom->name, sizeof(dom->name));
			snprintf(pre, sizeof(pre), "domain=\"%s\",", name);
			if (d->kind == K_TOP) {
				prom_top(o, family, pre, top_of(d, dom));
				continue;
			}
			/* d->labels: "" or "{miss_reason=\"none\"}": the domain's label first */
			snprintf(lab, sizeof(lab), "{domain=\"%s\"%s%.*s}", name,
				 *d->labels ? "," : "", *d->labels ? (int)strlen(d->labels) - 2 : 0,
				 *d->labels ? d->labels + 1 : "");
			prom_sample(o, family, lab, value(d, dom) / d->div);
		}
	}
}

int kvp_status_render_prom(const struct kvp_status_snap *s, char *buf, size_t cap)
{
	struct kvp_buf out;
	char lab[400];

	kvp_buf_init_fixed(&out, buf, cap);
	for (size_t i = 0; i < N(defs); i++) {
		const struct def *d = &defs[i];

		if (!d->prom)
			continue;
		if (d->kind == K_ARENAS) {
			prom_arenas(&out, d, s);
			continue;
		}
		if (d->kind == K_ITL) {
			prom_itl(&out, d, s);
			continue;
		}
		if (d->kind == K_TOP) {
			kvp_buf_printf(&out, "# HELP kvpool_%s %s\n# TYPE kvpool_%s %s\n", d->prom,
				       d->help, d->prom, d->type);
			prom_top(&out, d->prom, "", top_of(d, s));
			continue;
		}
		if (d->help)
			kvp_buf_printf(&out, "# HELP kvpool_%s %s\n# TYPE kvpool_%s %s\n", d->prom,
				       d->help, d->prom, d->type);
		if (d->kind == K_HIST) {
			prom_hist(&out, d, s);
			continue;
		}
		if (d->kind == K_STR || d->kind == K_INFO) {
			const char *p = (const char *)s + d->off;
			char v1[2 * 64 + 1], v2[2 * 64 + 1] = "";

			prom_label(v1, sizeof(v1), p, d->size);
			if (d->kind == K_INFO)
				prom_label(v2, sizeof(v2), (const char *)s + d->off2, d->size2);
			if (d->kind == K_INFO)
				snprintf(lab, sizeof(lab), "{%s=\"%s\",%s=\"%s\"}", d->labels, v1,
					 d->labels2, v2);
			else
				snprintf(lab, sizeof(lab), "{%s=\"%s\"}", d->labels, v1);
			prom_sample(&out, d->prom, lab, 1);
			continue;
		}
		prom_sample(&out, d->prom, d->labels, value(d, s) / d->div);
	}
	prom_domains(&out, s);
	prom_domain_cache(&out, s);
	return kvp_buf_finish(&out);
}
