/* SPDX-License-Identifier: MIT */
/*
 * cachectl.c - one request's cache control resolved, miss reasons, cache counters
 * (see cachectl.h; docs/daemon.md "Prompt cache").
 */
#include "svc/engine/cachectl.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "compute/model.h"

#define NS_PER_S 1000000000ull

/* A TTL in seconds as the policy allows it: 0 = the default, cut to the maximum. */
static uint32_t ttl_of(const struct kvp_cache_policy *pol, uint32_t ttl_s)
{
	if (!ttl_s)
		ttl_s = pol->ttl_default_s;
	return ttl_s < pol->ttl_max_s ? ttl_s : pol->ttl_max_s;
}

int kvp_cachectl_resolve(struct kvp_cachectl *out, const struct kvp_cache_policy *pol,
			 const struct kvp_cache_ctl *cc, uint32_t n_prompt, uint32_t block_tokens,
			 const char **why)
{
	memset(out, 0, sizeof(*out));
	out->publish_blocks = KVP_CACHECTL_ALL;
	out->ttl_s = ttl_of(pol, cc ? cc->ttl_s : 0);
	out->ttl_ns = out->ttl_s * NS_PER_S;
	out->retain = cc && (cc->flags & KVP_CC_RETAIN) ? cc->retain : pol->retain_default;
	out->n = cc && cc->n > 1 ? cc->n : 1;
	if (!cc || !cc->n_breakpoints)
		return 0;
	out->n_bp = cc->n_breakpoints;
	for (uint32_t i = 0; i < out->n_bp; i++) {
		if (cc->breakpoints[i] > n_prompt) {
			*why = "a cache breakpoint lies past the end of the prompt";
			return -EINVAL;
		}
		out->bp_blocks[i] = cc->breakpoints[i] / block_tokens;
		out->bp_ttl_ns[i] = (uint64_t)ttl_of(pol, cc->bp_ttl_s[i] ? cc->bp_ttl_s[i] :
									    cc->ttl_s) *
				    NS_PER_S;
	}
	/* only the prefix up to the last breakpoint, in full blocks */
	out->publish_blocks = out->bp_blocks[out->n_bp - 1];
	return 0;
}

uint64_t kvp_cachectl_block_ttl_ns(const struct kvp_cachectl *c, uint32_t block)
{
	uint64_t t = 0;

	for (uint32_t i = 0; i < c->n_bp; i++)
		if (block < c->bp_blocks[i] && c->bp_ttl_ns[i] > t)
			t = c->bp_ttl_ns[i];
	return c->n_bp && t ? t : c->ttl_ns;
}

uint32_t kvp_cachectl_miss(struct kvp_index *idx, const struct kvp_prefix_key *key,
			   const uint32_t *tokens, uint32_t n_tokens, uint32_t block_tokens,
			   uint32_t matched, uint32_t *tier, uint32_t *evicted_tokens)
{
	uint32_t n_full = n_tokens ? (n_tokens - 1) / block_tokens : 0;
	uint32_t et = KVP_EVICTED_NONE;
	int k, probe;

	*tier = KVP_MISS_TIER_NONE;
	*evicted_tokens = 0;
	if (!n_full)
		return KVP_MISS_BELOW_BLOCK;
	if (matched >= n_full)
		return KVP_MISS_NONE;
	k = kvp_index_evicted(idx, key, tokens, n_tokens, matched, &et);
	if (k > 0) {
		*tier = et == KVP_EVICTED_DISK ? KVP_MISS_TIER_DISK : KVP_MISS_TIER_MEMORY;
		*evicted_tokens = (uint32_t)k * block_tokens;
		return KVP_MISS_EVICTED;
	}
	probe = kvp_index_probe_keys(idx, key, tokens, n_tokens, matched);
	if (probe == KVP_PROBE_SALT)
		return KVP_MISS_SALT_MISMATCH;
	if (probe == KVP_PROBE_OTHER)
		return KVP_MISS_MODEL_MISMATCH;
	return KVP_MISS_NO_PREFIX;
}

void kvp_cache_stats_miss(struct kvp_cache_stats *st, uint32_t reason, uint32_t tier,
			  uint32_t evicted_tokens)
{
	if (reason >= KVP_MISS__COUNT)
		return;
	st->miss[reason]++;
	if (reason == KVP_MISS_EVICTED) {
		st->miss_evicted_mem += tier == KVP_MISS_TIER_MEMORY;
		st->miss_evicted_disk += tier == KVP_MISS_TIER_DISK;
	}
	st->evicted_tokens += evicted_tokens;
}

void kvp_cache_stats_hit(struct kvp_cache_stats *st, struct kvp_h128 h, uint32_t tokens)
{
	struct kvp_cache_prefix *min = NULL;

	for (uint32_t i = 0; i < st->n_prefixes; i++) {
		struct kvp_cache_prefix *p = &st->prefixes[i];

		if (p->hash.lo == h.lo && p->hash.hi == h.hi) {
			p->hits++;
			return;
		}
		if (!min || p->hits < min->hits)
			min = p;
	}
	if (st->n_prefixes < KVP_CACHE_TRACK) {
		st->prefixes[st->n_prefixes++] = (struct kvp_cache_prefix){ .hash = h,
									    .tokens = tokens,
									    .hits = 1 };
		return;
	}
	/* space-saving: the newcomer inherits the least count, so counts never undercount */
	*min = (struct kvp_cache_prefix){ .hash = h, .tokens = tokens, .hits = min->hits + 1 };
}

uint32_t kvp_cache_stats_top(const struct kvp_cache_stats *st, struct kvp_cache_prefix *out,
			     uint32_t max)
{
	uint32_t n = 0;
	bool used[KVP_CACHE_TRACK] = { false };

	while (n < max && n < st->n_prefixes) {
		uint32_t best = UINT32_MAX;

		for (uint32_t i = 0; i < st->n_prefixes; i++) {
			if (used[i])
				continue;
			/* most hits first; ties by the longer prefix, then the hash (stable) */
			if (best == UINT32_MAX || st->prefixes[i].hits > st->prefixes[best].hits ||
			    (st->prefixes[i].hits == st->prefixes[best].hits &&
			     (st->prefixes[i].tokens > st->prefixes[best].tokens ||
			      (st->prefixes[i].tokens == st->prefixes[best].tokens &&
			       st->prefixes[i].hash.lo < st->prefixes[best].hash.lo))))
				best = i;
		}
		used[best] = true;
		out[n++] = st->prefixes[best];
	}
	return n;
}

uint64_t kvp_cache_flops_per_token(const struct kvp_model_hparams *hp)
{
	uint64_t d = hp->n_embd, q = (uint64_t)hp->n_heads * hp->head_dim;
	uint64_t kv = (uint64_t)hp->n_kv_heads * hp->head_dim;
	/* per layer: Q, K, V and output projections, gate/up/down of the feed-forward */
	uint64_t per_layer = d * q + 2 * d * kv + q * d + 3 * d * hp->n_ff;

	return 2 * per_layer * hp->n_layers;
}
