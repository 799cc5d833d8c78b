/* SPDX-License-Identifier: MIT */
/*
 * cache.h - how a request's cache wishes map onto kvpoold's prefix cache: the one place
 * that decides it, so it changes in one place when kvpoold learns more.
 *
 * Today kvpoold caches every full block of every prompt (LRU) and a request can only
 * opt out (no-cache: neither read nor publish); it has no breakpoints and no TTLs yet.
 * So Anthropic's cache_control breakpoints and their TTLs (5m, 1h) are checked and
 * counted by the parser (api.c) and mapped here onto the opt-out alone: with
 * anthropic_cache = auto every request reads and publishes, with explicit only requests
 * carrying a breakpoint do (Anthropic caches only at breakpoints).  When kvpoold has
 * breakpoints and TTLs (the cache-semantics issue), this function passes the positions
 * (struct kvp_http_msg.cache of each message) and TTLs on instead.
 *
 * Thread: any.
 */
#ifndef KVP_IPC_HTTP_CACHE_H
#define KVP_IPC_HTTP_CACHE_H

#include "ipc/http/api.h"
#include "ipc/http/config.h"
#include "kvpool/kvpool.h"

/**
 * kvp_http_cache_map() - set @p's cache options for request @g
 * @mode: the front's anthropic_cache setting (enum kvp_http_anthropic_cache)
 * OpenAI requests and /tokenize always use the cache; the salt is set elsewhere.
 */
void kvp_http_cache_map(struct kvp_client_params *p, const struct kvp_http_gen *g,
			enum kvp_http_anthropic_cache mode);

#endif /* KVP_IPC_HTTP_CACHE_H */
