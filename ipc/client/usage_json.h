/* SPDX-License-Identifier: MIT */
/*
 * usage_json.h - a DONE's usage figures as JSON members, for the kvpool CLI (--json) and
 * kvpool-http (the "kvpool" object of a response's usage), so both name and format
 * them alike.  Not part of libkvpool: each program compiles it in.
 * Thread: any.
 */
#ifndef KVP_CLIENT_USAGE_JSON_H
#define KVP_CLIENT_USAGE_JSON_H

#include "kvpool/kvpool.h"
#include "util/json.h"

/**
 * kvp_usage_json_members() - write the figures both programs report, in this order:
 * prompt_tokens, cached_tokens, cache_creation_tokens, recomputed_tokens,
 * generated_tokens, queue_ms, ttft_ms, prefill_ms, decode_ms (ms with 3 decimals),
 * cached_tokens_disk, preemptions
 * @j: inside an object the caller opened (and closes, after any members of its own)
 */
void kvp_usage_json_members(struct kvp_json *j, const struct kvp_usage *u);

#endif /* KVP_CLIENT_USAGE_JSON_H */
