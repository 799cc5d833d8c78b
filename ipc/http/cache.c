/* SPDX-License-Identifier: MIT */
/*
 * cache.c - cache_control onto kvpoold's prefix cache (see cache.h).
 */
#include "ipc/http/cache.h"

void kvp_http_cache_map(struct kvp_client_params *p, const struct kvp_http_gen *g,
			enum kvp_http_anthropic_cache mode)
{
	/* Anthropic without a breakpoint caches nothing: only explicit mode follows that */
	p->no_cache = g->api == KVP_HTTP_API_MESSAGES && !g->n_breakpoints &&
		      mode == KVP_HTTP_CACHE_EXPLICIT;
}
