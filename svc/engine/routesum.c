/* SPDX-License-Identifier: MIT */
/*
 * routesum.c - a trust domain's chain summary for routing (see routesum.h).
 *
 * Cost: one pass over the index's entry table (48 bytes an entry) and k bit sets per
 * entry, every period (30 s by default): a million entries is a few milliseconds once
 * per period on the engine thread; the tier encodes and copies the filter under its
 * lock and its I/O thread sends it.
 */
#include "svc/engine/routesum.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shm/remote/codec.h"

#define MIN_ITEMS 1024u
#define RETRY_NS 1000000000ull /* the tier was off: try again this soon */

struct kvp_routesum {
	struct kvp_remote *remote;
	uint32_t domain;
	const struct kvp_index *index;
	char host[KVP_REMOTE_HOST_ID_MAX];
	uint64_t period_ns;
	uint32_t ttl_s;
	uint64_t next_ns; /* 0: due */
	struct kvp_bloom *bloom;
	uint64_t sized_for; /* items the filter was made for */
};

int kvp_routesum_new(struct kvp_routesum **out, struct kvp_remote *remote, uint32_t domain,
		     const struct kvp_index *index, const char *host, uint32_t period_s)
{
	struct kvp_routesum *rs;

	*out = NULL;
	if (!remote || !index || !period_s || !host || !kvp_remote_host_ok(host))
		return -EINVAL;
	rs = calloc(1, sizeof(*rs));
	if (!rs)
		return -ENOMEM;
	rs->remote = remote;
	rs->domain = domain;
	rs->index = index;
	strcpy(rs->host, host); /* kvp_remote_host_ok(): fits */
	rs->period_ns = (uint64_t)period_s * 1000000000ull;
	rs->ttl_s = period_s * KVP_ROUTESUM_TTL_PERIODS;
	if (rs->ttl_s / KVP_ROUTESUM_TTL_PERIODS != period_s)
		rs->ttl_s = UINT32_MAX;
	*out = rs;
	return 0;
}

void kvp_routesum_free(struct kvp_routesum *rs)
{
	if (!rs)
		return;
	kvp_bloom_free(rs->bloom);
	free(rs);
}

uint32_t kvp_routesum_due_in_ms(const struct kvp_routesum *rs, uint64_t now_ns)
{
	uint64_t ms;

	if (!rs)
		return UINT32_MAX;
	if (now_ns >= rs->next_ns)
		return 0;
	ms = (rs->next_ns - now_ns + 999999) / 1000000;
	return ms < UINT32_MAX ? (uint32_t)ms : UINT32_MAX - 1;
}

static void count_one(void *ctx, struct kvp_h128 h)
{
	(void)h;
	(*(uint64_t *)ctx)++;
}

static void add_one(void *ctx, struct kvp_h128 h)
{
	kvp_bloom_add(ctx, h);
}

int kvp_routesum_step(struct kvp_routesum *rs, uint64_t now_ns)
{
	uint64_t n = 0;
	int r;

	if (!rs || now_ns < rs->next_ns)
		return 0;
	kvp_index_for_each_hash(rs->index, count_one, &n);
	if (!rs->bloom || n > rs->sized_for) {
		/* room to grow: a filter over its size loses its false-positive rate */
		uint64_t want = n * 2 > MIN_ITEMS ? n * 2 : MIN_ITEMS;
		struct kvp_bloom *b;

		r = kvp_bloom_new(&b, want, KVP_ROUTESUM_FP);
		if (r < 0) {
			rs->next_ns = now_ns + rs->period_ns;
			return r;
		}
		kvp_bloom_free(rs->bloom);
		rs->bloom = b;
		rs->sized_for = want;
	} else {
		kvp_bloom_clear(rs->bloom);
	}
	kvp_index_for_each_hash(rs->index, add_one, rs->bloom);
	r = kvp_remote_route_publish(rs->remote, rs->domain, rs->host, rs->bloom, rs->ttl_s);
	rs->next_ns = now_ns + (r == -ENODEV ? RETRY_NS : rs->period_ns);
	return r < 0 ? r : 1;
}
