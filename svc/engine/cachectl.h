/* SPDX-License-Identifier: MIT */
/*
 * cachectl.h - prompt-cache control of one request, and the cache's accounting: what a
 * request's struct kvp_cache_ctl means under the domain's struct kvp_cache_policy
 * (which blocks it publishes, their TTL and retention priority), why its lookup missed
 * (enum kvp_miss_reason), and the counters of the status report (miss reasons,
 * recomputations, most-hit prefixes).  The engine (svc/engine/engine.c) calls these; nothing
 * here locks or allocates.
 */
#ifndef KVP_ENGINE_CACHECTL_H
#define KVP_ENGINE_CACHECTL_H

#include <stdint.h>

#include "kvpool/proto.h"
#include "shm/index.h"
#include "svc/engine/cachepol.h"

struct kvp_model_hparams;

/* Prefixes whose hits are counted (space-saving: the least counted is replaced). */
#define KVP_CACHE_TRACK 32
/* ... of which the status report shows the most hit. */
#define KVP_CACHE_TOP 8

/* No limit on the blocks a request publishes (automatic caching). */
#define KVP_CACHECTL_ALL UINT32_MAX

/**
 * struct kvp_cachectl - one request's cache control, resolved
 * @publish_blocks: full prompt blocks it may publish (KVP_CACHECTL_ALL: every full block,
 *                  prompt and generated)
 * @n_bp:           breakpoints
 * @bp_blocks:      full blocks covered by breakpoint i
 * @bp_ttl_ns:      their TTL
 * @ttl_ns:         TTL of the rest (hits past the breakpoints, automatic mode)
 * @ttl_s:          the request's TTL in seconds (for its DONE)
 * @retain:         retention priority 0..100
 * @n:              continuations (>= 1)
 */
struct kvp_cachectl {
	uint32_t publish_blocks;
	uint32_t n_bp;
	uint32_t bp_blocks[KVP_CACHE_BREAKPOINTS_MAX];
	uint64_t bp_ttl_ns[KVP_CACHE_BREAKPOINTS_MAX];
	uint64_t ttl_ns;
	uint32_t ttl_s;
	uint32_t retain;
	uint32_t n;
};

/* One tracked prefix: its last block's chain hash, length and hits (never its tokens). */
struct kvp_cache_prefix {
	struct kvp_h128 hash;
	uint32_t tokens;
	uint64_t hits;
};

/**
 * struct kvp_cache_stats - the engine's cache counters (totals since start)
 * @miss:            requests by enum kvp_miss_reason (at first admission)
 * @miss_evicted_mem, @miss_evicted_disk: KVP_MISS_EVICTED by tier
 * @evicted_tokens:  prompt tokens computed again because their blocks had been evicted
 * @pins, @unpins:   PIN / UNPIN done; @pin_refused: refused (cap, not allowed, not pinned)
 * @flushes, @flushed_blocks: FLUSH done and the blocks they dropped
 * @parallel:        requests with n > 1; @continuations: their continuations
 * @flops_per_token: prefill FLOPs of one token (model figures; 0 unknown)
 * @prefixes:        tracked prefixes, @n_prefixes of them
 */
struct kvp_cache_stats {
	uint64_t miss[KVP_MISS__COUNT];
	uint64_t miss_evicted_mem;
	uint64_t miss_evicted_disk;
	uint64_t evicted_tokens;
	uint64_t pins;
	uint64_t unpins;
	uint64_t pin_refused;
	uint64_t flushes;
	uint64_t flushed_blocks;
	uint64_t parallel;
	uint64_t continuations;
	uint64_t flops_per_token;
	struct kvp_cache_prefix prefixes[KVP_CACHE_TRACK];
	uint32_t n_prefixes;
};

/**
 * kvp_cachectl_resolve() - @cc (NULL: the defaults) under @pol for a prompt of @n_prompt
 * tokens and blocks of @block_tokens
 * TTLs are cut to pol->ttl_max_s; 0 means pol->ttl_default_s.
 * Return: 0, or -EINVAL with *@why when a breakpoint lies past the prompt.
 */
int kvp_cachectl_resolve(struct kvp_cachectl *out, const struct kvp_cache_policy *pol,
			 const struct kvp_cache_ctl *cc, uint32_t n_prompt, uint32_t block_tokens,
			 const char **why);

/* TTL (ns) of block @block of the request: the longest of the breakpoints covering it. */
uint64_t kvp_cachectl_block_ttl_ns(const struct kvp_cachectl *c, uint32_t block);

/**
 * kvp_cachectl_miss() - why a lookup of @tokens that matched @matched full blocks did not
 * match all it could (see enum kvp_miss_reason)
 * @n_tokens:       tokens looked up (the last is never covered)
 * @tier:           out; enum kvp_miss_tier
 * @evicted_tokens: out; tokens of the consecutive evicted blocks from the first miss on
 * Return: enum kvp_miss_reason: NONE, BELOW_BLOCK, EVICTED, SALT_MISMATCH,
 * MODEL_MISMATCH or NO_PREFIX (the caller decides DISABLED, BELOW_MINIMUM, IO_ERROR).
 */
uint32_t kvp_cachectl_miss(struct kvp_index *idx, const struct kvp_prefix_key *key,
			   const uint32_t *tokens, uint32_t n_tokens, uint32_t block_tokens,
			   uint32_t matched, uint32_t *tier, uint32_t *evicted_tokens);

/* Count a request's miss reason (and its recomputation) in @st. */
void kvp_cache_stats_miss(struct kvp_cache_stats *st, uint32_t reason, uint32_t tier,
			  uint32_t evicted_tokens);

/* A hit of @tokens tokens ending in the block of chain hash @h. */
void kvp_cache_stats_hit(struct kvp_cache_stats *st, struct kvp_h128 h, uint32_t tokens);

/* The most hit tracked prefixes, most first: up to @max into @out; returns how many. */
uint32_t kvp_cache_stats_top(const struct kvp_cache_stats *st, struct kvp_cache_prefix *out,
			     uint32_t max);

/* Prefill FLOPs of one token from the model's figures (2 per weight of its matrices). */
uint64_t kvp_cache_flops_per_token(const struct kvp_model_hparams *hp);

#endif /* KVP_ENGINE_CACHECTL_H */
