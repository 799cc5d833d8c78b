/* SPDX-License-Identifier: MIT */
/*
 * status.h - the status report: one plain snapshot of counters (struct kvp_status_snap),
 * rendered as JSON (what the status socket answers) or Prometheus text format.
 *
 * The snapshot is filled by the daemon from the pool, the index, the scheduler and the
 * server; rendering touches nothing else, so it can be tested on its own.  docs/daemon.md
 * lists every field.
 *
 * Thread: rendering is pure; callers own the snapshot.
 */
#ifndef KVP_SVC_STATUS_H
#define KVP_SVC_STATUS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ipc/server.h"	/* struct kvp_server_stats */

#define KVP_STATUS_MAX_ARENAS 16
#define KVP_STATUS_MAX_CONNS 64		/* connections listed one by one; the rest counted */
#define KVP_STATUS_MAX_DOMAINS 8

struct kvp_status_arena {
	uint32_t node;			/* NUMA node */
	uint64_t blocks_total;
	uint64_t blocks_used;		/* referenced by a running sequence or lease */
	uint64_t blocks_cached;		/* unreferenced, kept for prefix hits (evictable) */
	uint64_t blocks_free;
};

struct kvp_status_conn {
	uint64_t id;
	int64_t pid;
	int64_t uid;
	char client[32];		/* the name the client gave in HELLO */
	uint32_t domain;
	uint32_t in_flight;		/* requests running or queued now */
	uint64_t requests;		/* GENERATEs accepted so far */
	uint64_t generated_tokens;
	uint64_t cached_tokens;
};

struct kvp_status_domain {
	char name[32];
	uint64_t conns_open;
	uint64_t requests;
};

/**
 * struct kvp_status_snap - every figure of one report, copied at one moment
 *
 * Pool: blocks_* as in struct kvp_status_arena, summed; page_kind is what the segment
 * got ("hugetlb-2m", "thp-2m", "4k").  Index: lookups counts requests that looked up
 * (no-cache ones do not); hit_requests those with at least one hit block;
 * lookup_tokens / hit_tokens the prompt tokens looked up / served from the cache.
 * Scheduler: queued/running now; ttft over the last samples.  Server: ipc/'s counters,
 * copied whole.
 */
struct kvp_status_snap {
	char version[16];
	char model[64];
	char state[16];			/* "starting", "serving", "draining" */
	uint64_t uptime_ms;
	uint32_t pid;

	uint64_t pool_bytes;
	uint64_t block_bytes;
	uint32_t block_tokens;
	char page_kind[16];
	char kv_dtype[8];
	uint64_t blocks_total;
	uint64_t blocks_used;
	uint64_t blocks_cached;
	uint64_t blocks_free;
	uint32_t n_arenas;
	struct kvp_status_arena arenas[KVP_STATUS_MAX_ARENAS];

	uint64_t index_entries;
	uint64_t index_lookups;
	uint64_t index_hit_requests;
	uint64_t index_lookup_tokens;
	uint64_t index_hit_tokens;
	uint64_t index_inserts;
	uint64_t index_evictions;

	uint64_t sched_queued;
	uint64_t sched_running;
	uint64_t sched_waiting_prefix;	/* admitted, waiting for a prefix another computes */
	uint64_t sched_cancels;		/* cancels that reached the engine (<= 1 per request) */
	uint64_t req_total;
	uint64_t req_done;
	uint64_t req_cancelled;
	uint64_t req_failed;
	uint64_t req_rejected;
	uint64_t prompt_tokens;
	uint64_t cached_tokens;
	uint64_t cache_creation_tokens;
	uint64_t recomputed_tokens;
	uint64_t generated_tokens;
	double queue_ms;		/* usage times summed over ended requests */
	double ttft_ms;
	double prefill_ms;
	double decode_ms;
	uint64_t ttft_samples;
	double ttft_p50_ms;
	double ttft_p99_ms;

	struct kvp_server_stats server;	/* as kvp_server_get_stats() gives them */
	uint32_t n_conns;		/* listed in @conns (at most KVP_STATUS_MAX_CONNS) */
	struct kvp_status_conn conns[KVP_STATUS_MAX_CONNS];

	uint32_t n_domains;
	struct kvp_status_domain domains[KVP_STATUS_MAX_DOMAINS];
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
