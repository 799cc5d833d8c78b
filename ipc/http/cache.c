/* SPDX-License-Identifier: MIT */
/*
 * cache.c - cache_control onto kvpoold's prefix cache (see cache.h).
 */
#include "ipc/http/cache.h"

#include <string.h>

static uint32_t ttl_seconds(enum kvp_http_ttl t)
{
	return t == KVP_HTTP_TTL_1H ? 3600 : 300;
}

void kvp_http_cache_map(struct kvp_client_params *p, struct kvp_cache_ctl *cc, bool *has_cc,
			const struct kvp_http_gen *g, enum kvp_http_anthropic_cache mode)
{
	uint32_t n = 0;

	memset(cc, 0, sizeof(*cc));
	*has_cc = false;
	/* Anthropic without a breakpoint caches nothing: only explicit mode follows that */
	p->no_cache = g->api == KVP_HTTP_API_MESSAGES && !g->n_breakpoints &&
		      mode == KVP_HTTP_CACHE_EXPLICIT;
	if (g->api != KVP_HTTP_API_MESSAGES)
		return;
	/* the parser allows KVP_HTTP_BREAKPOINTS_MAX (4) blocks, so as many messages */
	for (size_t i = 0; i < g->n_msgs && n < KVP_CACHE_BREAKPOINTS_MAX; i++) {
		if (g->msgs[i].cache == KVP_HTTP_TTL_NONE)
			continue;
		cc->breakpoints[n] = (uint32_t)i + 1;
		cc->bp_ttl_s[n] = ttl_seconds(g->msgs[i].cache);
		n++;
	}
	if (!n)
		return;
	cc->flags = KVP_CC_BP_MESSAGES;
	cc->n_breakpoints = n;
	*has_cc = true;
}
