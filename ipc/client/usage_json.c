/* SPDX-License-Identifier: MIT */
/*
 * usage_json.c - a DONE's usage figures as JSON members (see usage_json.h).
 */
#include "ipc/client/usage_json.h"

void kvp_usage_json_members(struct kvp_json *j, const struct kvp_usage *u)
{
	kvp_json_u64(j, "prompt_tokens", u->prompt_tokens);
	kvp_json_u64(j, "cached_tokens", u->cached_tokens);
	kvp_json_u64(j, "cache_creation_tokens", u->cache_creation_tokens);
	kvp_json_u64(j, "recomputed_tokens", u->recomputed_tokens);
	kvp_json_u64(j, "generated_tokens", u->generated_tokens);
	kvp_json_fixed(j, "queue_ms", u->queue_ms, 3);
	kvp_json_fixed(j, "ttft_ms", u->ttft_ms, 3);
	kvp_json_fixed(j, "prefill_ms", u->prefill_ms, 3);
	kvp_json_fixed(j, "decode_ms", u->decode_ms, 3);
	kvp_json_u64(j, "cached_tokens_disk", u->cached_tokens_disk);
	kvp_json_u64(j, "preemptions", u->preemptions);
}
