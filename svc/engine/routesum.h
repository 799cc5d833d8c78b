/* SPDX-License-Identifier: MIT */
/*
 * routesum.h - a trust domain's chain summary for routing: every period the engine
 * thread puts the chain hash of each entry of the domain's prefix index (in memory or on
 * disk only) in a Bloom filter (shm/remote/bloom.h) and stores it in the remote tier at
 * `kvp1:DOMAIN:r:HOST` (kvp_remote_route_publish(), SET EX), so a front door can send a
 * request to the host holding its longest prefix (docs/remote.md "Routing").
 *
 * The summary lives three periods in the store: a host that stops refreshing (stopped,
 * partitioned, its tier off) drops out of routing by itself after at most that long.
 * While the tier's breaker is open a summary cannot be sent; it is tried again every
 * second until it goes.  The filter is sized for twice the entries it last held (at
 * least 1,024) at 1% false positives, and grows when the index outgrows it.
 *
 * Thread: the engine thread of the domain (the index is its own); _new/_free on the main
 * thread with the engine stopped.
 */
#ifndef KVP_ENGINE_ROUTESUM_H
#define KVP_ENGINE_ROUTESUM_H

#include <stdint.h>

#include "shm/index.h"
#include "shm/remote/remote.h"

#define KVP_ROUTESUM_FP 0.01	    /* false-positive rate the filter is sized for */
#define KVP_ROUTESUM_TTL_PERIODS 3u /* the summary's TTL, in periods */

struct kvp_routesum;

/**
 * kvp_routesum_new() - publish @index's chain summary for @remote's domain @domain every
 * @period_s seconds as host @host (copied; kvp_remote_host_ok())
 * The first is due at once (the host says it is up, holding what it holds).
 * Return: 0; -EINVAL (no tier, @period_s 0, a bad host id); -ENOMEM.
 */
int kvp_routesum_new(struct kvp_routesum **out, struct kvp_remote *remote, uint32_t domain,
		     const struct kvp_index *index, const char *host, uint32_t period_s);

/* NULL ok. */
void kvp_routesum_free(struct kvp_routesum *rs);

/* Milliseconds from @now_ns until the next summary is due (0: due now); UINT32_MAX for NULL. */
uint32_t kvp_routesum_due_in_ms(const struct kvp_routesum *rs, uint64_t now_ns);

/**
 * kvp_routesum_step() - when due at @now_ns (monotonic), build and hand over the summary
 * Return: 1 handed to the tier (it sends it; route_published counts the store's OK), 0 not
 * due (or NULL), -ENODEV the tier is off (retried in a second), -ENOMEM.
 */
int kvp_routesum_step(struct kvp_routesum *rs, uint64_t now_ns);

#endif /* KVP_ENGINE_ROUTESUM_H */
