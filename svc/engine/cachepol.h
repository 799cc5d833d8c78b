/* SPDX-License-Identifier: MIT */
/*
 * cachepol.h - the prompt-cache policy of a trust domain: TTLs, minimum length, pins,
 * eviction order, retention priority and the cost multipliers of the status report.
 *
 * Today one policy, from the [cache] section of the config, applies to the one domain
 * ("default"); the struct is what a domain section will override key by key, so every
 * cache setting lives here and nowhere else (docs/daemon.md, "Prompt cache").
 */
#ifndef KVP_ENGINE_CACHEPOL_H
#define KVP_ENGINE_CACHEPOL_H

#include <stdbool.h>
#include <stdint.h>

/**
 * struct kvp_cache_policy - [cache] settings
 * @ttl_default_s:  TTL of blocks a request publishes or hits when it names none (s)
 * @ttl_max_s:      longest TTL a request may ask for (s); longer asks are cut to it
 * @min_tokens:     prompts shorter than this are neither looked up nor published (0: all)
 * @pin_allowed:    PIN, UNPIN and FLUSH are accepted (operators only: the lead maps this
 *                  onto a domain's operator flag)
 * @pin_max_bytes:  most K/V bytes pinned at once (0: a quarter of the pool)
 * @eviction:       enum kvp_evict_policy (lru, lfu, priority)
 * @retain_default: retention priority of requests that name none (0..100)
 * @cost_write_pct: cost of a token written to the cache, % of an uncached token (125)
 * @cost_read_pct:  cost of a token read from the cache, % of an uncached token (10)
 */
struct kvp_cache_policy {
	uint32_t ttl_default_s;
	uint32_t ttl_max_s;
	uint32_t min_tokens;
	bool pin_allowed;
	uint64_t pin_max_bytes;
	uint32_t eviction;
	uint32_t retain_default;
	uint32_t cost_write_pct;
	uint32_t cost_read_pct;
};

/* The defaults (docs/daemon.md): 5 min, 1 h cap, no minimum, no pins, lru, 50, 125%, 10%. */
static inline void kvp_cache_policy_defaults(struct kvp_cache_policy *p)
{
	*p = (struct kvp_cache_policy){
		.ttl_default_s = 300,
		.ttl_max_s = 3600,
		.retain_default = 50,
		.cost_write_pct = 125,
		.cost_read_pct = 10,
	};
}

#endif /* KVP_ENGINE_CACHEPOL_H */
