/* SPDX-License-Identifier: MIT */
/*
 * cache.h - how a request's cache wishes map onto kvpoold's prefix cache: the one place
 * that decides it, so it changes in one place when kvpoold learns more.
 *
 * Anthropic's cache_control breakpoints and their TTLs (5m, 1h) are checked by the
 * parser (api.c), which records each on the message it ends (struct kvp_http_msg.cache).
 * Here they become kvpoold's message breakpoints (KVP_CC_BP_MESSAGES, docs/protocol.md):
 * breakpoint k = the prefix ending after the k-th message, which kvpoold maps onto the
 * prompt's ids (the front cannot: kvpoold renders the template), with the TTL of each
 * (5m = 300 s, 1h = 3600 s).  kvpoold then publishes only the full blocks up to the last
 * breakpoint, as Anthropic caches only at breakpoints, and reads every cached prefix.
 * A breakpoint on a block before a message's last one covers the whole message here: a
 * message is the finest unit kvpoold counts.
 *
 * Requests without a breakpoint follow anthropic_cache: with auto every request reads
 * and publishes every full block (as OpenAI requests do), with explicit they go with
 * no-cache (neither read nor publish).
 *
 * Thread: any.
 */
#ifndef KVP_IPC_HTTP_CACHE_H
#define KVP_IPC_HTTP_CACHE_H

#include <stdbool.h>

#include "ipc/http/api.h"
#include "ipc/http/config.h"
#include "kvpool/kvpool.h"

/**
 * kvp_http_cache_map() - set @p's cache options for request @g, and its cache control
 * @cc:     out; the request's struct kvp_cache_ctl (zeroed when there is none)
 * @has_cc: out; @cc is to be sent with this request (kvp_client_set_cache())
 * @mode:   the front's anthropic_cache setting (enum kvp_http_anthropic_cache)
 * OpenAI requests and /tokenize always use the cache; the salt is set elsewhere.
 */
void kvp_http_cache_map(struct kvp_client_params *p, struct kvp_cache_ctl *cc, bool *has_cc,
			const struct kvp_http_gen *g, enum kvp_http_anthropic_cache mode);

#endif /* KVP_IPC_HTTP_CACHE_H */
