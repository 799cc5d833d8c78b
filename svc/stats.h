/* SPDX-License-Identifier: MIT */
/*
 * stats.h - the status report's figures: a struct kvp_status_snap (svc/status.h) filled
 * at one moment from the engine's published counters, the server's, the connection
 * registry and the domains, then rendered as JSON or Prometheus text.
 * Thread: the loop thread (the status socket is served there).
 */
#ifndef KVP_SVC_STATS_H
#define KVP_SVC_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "ipc/server.h"

struct kvp_cache_policy;
struct kvp_domains;
struct kvp_requests;
struct kvp_sched;
struct kvp_status_snap;

/**
 * struct kvp_stats - where the figures come from (all borrowed; set by the owner)
 * @model:      the model's name
 * @model_fp:   its fingerprint, hex
 * @state:      the daemon's state word ("starting", "serving", "draining"), read at
 *              each report
 * @t_start_ns: when the daemon started (CLOCK_MONOTONIC)
 * @req:        the loop thread's requests: server, connections, refusals
 * @domains:    the trust domains, their pools and engines (the report sums the engines)
 * @cache:      [cache] as configured: the policy the daemon-wide cache section shows
 *              (each domain's own is in its entry); NULL: the first domain's
 * @snap:       owned scratch for one report (too big for the loop thread's stack)
 */
struct kvp_stats {
	const char *model;
	const char *model_fp;
	const char *const *state;
	uint64_t t_start_ns;
	const struct kvp_requests *req;
	const struct kvp_domains *domains;
	const struct kvp_cache_policy *cache;
	struct kvp_status_snap *snap;
};

/* Allocate the scratch; the caller then sets the sources.  Return: 0 or -ENOMEM. */
int kvp_stats_init(struct kvp_stats *st);
void kvp_stats_deinit(struct kvp_stats *st);

/* Fill @s from the sources now. */
void kvp_stats_fill(const struct kvp_stats *st, struct kvp_status_snap *s);

/*
 * The status socket's callback (kvp_status_report_fn, @arg a struct kvp_stats): fill,
 * then render.  Return: bytes written, or -ENOSPC.
 */
int kvp_stats_report(void *arg, enum kvp_status_fmt fmt, char *buf, size_t cap);

#endif /* KVP_SVC_STATS_H */
