/* SPDX-License-Identifier: MIT */
/*
 * status.h - the status report: one plain snapshot of counters (struct kvp_status_snap),
 * rendered as JSON (what the status socket answers) or Prometheus text format.
 *
 * The snapshot is filled by the daemon (svc/stats.c) from the engine, the server, the
 * connections and the domains; rendering touches nothing else, so it can be tested on
 * its own.  docs/daemon.md lists every field.
 *
 * Thread: rendering is pure; callers own the snapshot.
 */
#ifndef KVP_SVC_STATUS_H
#define KVP_SVC_STATUS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ipc/server.h"	       /* struct kvp_server_stats */
#include "svc/reqlog.h"	       /* struct kvp_hist, enum kvp_lat */
#include "svc/engine/engine.h" /* struct kvp_sched_stats */

#define KVP_STATUS_MAX_ARENAS 16 /* arenas listed (the rest still summed) */
#define KVP_STATUS_MAX_CONNS 64	 /* connections listed one by one; the rest counted */
#define KVP_STATUS_MAX_DOMAINS 64

struct kvp_status_conn {
	uint64_t id;
	int64_t pid;
	int64_t uid;
	char client[32]; /* the name the client gave in HELLO */
	uint32_t domain;
	uint32_t in_flight; /* requests running or queued now */
	uint64_t requests;  /* GENERATEs accepted so far */
	uint64_t generated_tokens;
	uint64_t cached_tokens;
};

/*
 * One trust domain: its pool's blocks and its engine's counters (each domain has its
 * own), so an operator sees whose traffic fills what.
 */
/* One of the most-hit prefixes: its last block's chain hash, length, hits (no tokens). */
struct kvp_status_prefix {
	char hash[33];
	uint32_t tokens;
	uint64_t hits;
};

/**
 * struct kvp_status_cache - the prompt cache's figures derived for the report
 * (cache_derive() in svc/stats.c, from the @sched of the snapshot or of a domain)
 * @eviction:          the policy's name
 * @request_hit_rate:  requests that hit at least one block / requests that looked up
 * @token_hit_rate:    prompt tokens served from memory / prompt tokens looked up
 * @tokens_saved:      prompt tokens not computed: read from memory or from the disk tier
 * @flops_saved:       their prefill FLOPs (the model's figures)
 * @pinned_bytes:      K/V bytes pinned now
 * @cost_uncached:     the traffic's prompt cost without a cache, in uncached-token units
 * @cost_cached:       ... with it: computed 1, written cost_write_pct, read cost_read_pct
 * @cost_saved_ratio:  1 - cost_cached / cost_uncached
 * @top:               the most hit prefixes, @n_top of them
 */
struct kvp_status_cache {
	char eviction[12];
	double request_hit_rate;
	double token_hit_rate;
	uint64_t tokens_saved;
	double flops_saved;
	uint64_t pinned_bytes;
	double cost_uncached;
	double cost_cached;
	double cost_saved_ratio;
	uint32_t n_top;
	struct kvp_status_prefix top[KVP_CACHE_TOP];
};

struct kvp_status_domain {
	char name[32];
	uint64_t conns_open;
	uint64_t requests;
	uint64_t pool_bytes;
	uint64_t blocks_total;
	uint64_t blocks_used;
	uint64_t blocks_cached;
	uint64_t blocks_free;
	uint64_t lookups;      /* requests that looked up its index */
	uint64_t hit_requests; /* ... with at least one hit block */
	uint64_t prompt_tokens;
	uint64_t cached_tokens;
	uint64_t evictions;
	uint32_t operators; /* 1: its members may pin */
	int64_t priority;   /* of its requests that name none ([domain NAME] priority) */
	/* its engine's figures whole (its cache policy among them), and its cache figures
	 * derived from them as the daemon-wide @cache is from the sums: the "cache" object
	 * of its domains[] entry */
	struct kvp_sched_stats sched;
	struct kvp_status_cache cache;
};

/**
 * struct kvp_status_snap - every figure of one report, copied at one moment
 *
 * The engine's counters (@sched) and the server's (@server) are copied whole: a counter
 * is defined where it is counted and described once, in status.c's table, which names
 * its JSON member, its Prometheus family, type and help text, and this field as its
 * source.  The fields below them are what is derived when the report is filled: the
 * pool's block states summed over its arenas, the page kind and K/V type by name, the
 * request totals that include refusals made before the engine saw a request.
 */
struct kvp_status_snap {
	char version[16];
	char model[64];
	char model_fp[33]; /* the model's fingerprint, hex */
	char state[16];	   /* "starting", "serving", "draining" */
	uint64_t uptime_ms;
	uint32_t pid;
	char view[8];	      /* "all" (an operator's report) or "domain" (svc/stats.h) */
	char view_domain[32]; /* "domain": the peer's own domain, "" when it has none */

	struct kvp_sched_stats sched;	/* as kvp_sched_get_stats() gives them */
	struct kvp_server_stats server; /* as kvp_server_get_stats() gives them */

	uint64_t pool_bytes;
	uint64_t block_bytes;
	uint32_t block_tokens;
	char page_kind[16]; /* "hugetlb-2m", "thp-2m", "4k" */
	char kv_dtype[8];
	double bytes_per_token;	      /* block_bytes / block_tokens: K/V and their scales */
	uint64_t bytes_per_token_f32; /* what the same model's f32 K/V would take */
	uint64_t blocks_total;	      /* the arenas' n_blocks, used, cached, free, summed */
	uint64_t blocks_used;
	uint64_t blocks_cached;
	uint64_t blocks_free;
	uint64_t index_inserts;		     /* publishes that added an entry */
	uint64_t req_total;		     /* the engine's, plus @req_rejected */
	uint64_t req_rejected;		     /* refused before or at submission */
	uint64_t text_jobs;		     /* requests the text worker rendered/tokenized */
	uint64_t text_bytes;		     /* their text bytes */
	uint64_t text_pending;		     /* requests the text worker has now */
	struct kvp_hist lat[KVP_LAT__COUNT]; /* per-request times of ended requests */
	char sched_policy[8];		     /* "fair", "fifo" */
	char tier_state[12];		     /* "off" (none configured), "on", "degraded" */
	int64_t tier_degraded;		     /* the -errno that turned the tier off, 0 */
	double tier_reload_p50_ms;
	double tier_reload_p99_ms;
	double tier_scan_ms;   /* the rebuild scan at start */
	char remote_state[12]; /* "off" (none configured), "on", "open", "probing" */

	uint32_t n_conns; /* listed in @conns (at most KVP_STATUS_MAX_CONNS) */
	struct kvp_status_conn conns[KVP_STATUS_MAX_CONNS];

	uint32_t n_domains;
	struct kvp_status_domain domains[KVP_STATUS_MAX_DOMAINS];
	/* the domain table (svc/domain.h): open now, its max, and per-uid since start */
	struct {
		uint64_t open, max, made, reclaimed, refused_max, refused_memory;
	} slots;

	struct kvp_status_cache cache; /* derived from @sched (its policy: the first domain's) */
};

/**
 * kvp_status_render_json() - one JSON object, newline-terminated
 * Return: bytes written (without a NUL; one is added when room allows), or -ENOSPC.
 */
int kvp_status_render_json(const struct kvp_status_snap *s, char *buf, size_t cap);

/**
 * kvp_status_render_prom() - Prometheus text exposition format 0.0.4
 * Return: bytes written, or -ENOSPC.
 */
int kvp_status_render_prom(const struct kvp_status_snap *s, char *buf, size_t cap);

/* hits / total, 0 when total is 0 */
double kvp_status_ratio(uint64_t hits, uint64_t total);

#endif /* KVP_SVC_STATUS_H */
