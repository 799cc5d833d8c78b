/* SPDX-License-Identifier: MIT */
/*
 * bloom.h - a compact summary of the chains a host holds, for a front door that routes a
 * request to the host with the longest cached prefix (docs/remote.md, "Routing").
 *
 * A Bloom filter over chain hashes (the 128-bit h_i of shm/index.h, which already
 * cover the extra keys and the whole prefix): the front door computes h_0, h_1, ... of
 * a prompt and asks each host's summary how many leading blocks it may hold
 * (kvp_bloom_prefix()).  A false positive costs a routing choice, never a wrong K/V: the
 * host still looks its index up exactly.  Bit positions come from the hash's two
 * halves by double hashing; the chain hash is a good hash already.
 *
 * Encoded (little-endian), stored at `kvp1:DOMAIN:r:HOST` with SET EX ttl, so a host
 * that stops refreshing drops out of routing by itself:
 *
 *	0   magic "KVPBLM01"     8   version (1)      12  k (hash functions, 1..16)
 *	16  n_bits (multiple of 64, <= 2^30)          24  n_items added
 *	32  created (Unix seconds)                    40  ttl (seconds)   44  reserved (0)
 *	48  the bits (n_bits / 8 bytes)               then XXH3-64 of everything before
 *
 * The summary carries its creation time and TTL as well, so a reader can refuse a stale
 * copy kept elsewhere.  Decoding reads through the bounds-checked cursor and checks
 * every field.  Thread: a filter belongs to its caller; no locks.
 */
#ifndef KVP_SHM_REMOTE_BLOOM_H
#define KVP_SHM_REMOTE_BLOOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shm/index.h"

#define KVP_BLOOM_MAGIC 0x31304d4c4250564bull /* "KVPBLM01" little-endian */
#define KVP_BLOOM_VERSION 1u
#define KVP_BLOOM_HDR_BYTES 48u
#define KVP_BLOOM_MAX_BITS (1ull << 30)

/**
 * struct kvp_bloom - one filter
 * @n_bits:    bits (a multiple of 64)
 * @k:         positions per item
 * @n_items:   items added
 * @created_s: Unix time it was encoded / decoded from
 * @ttl_s:     its time to live
 * @bits:      n_bits / 64 words (owned)
 */
struct kvp_bloom {
	uint64_t n_bits;
	uint32_t k;
	uint64_t n_items;
	uint64_t created_s;
	uint32_t ttl_s;
	uint64_t *bits;
};

/**
 * kvp_bloom_new() - an empty filter sized for @expect_items at false-positive rate @fp
 * @out: out; kvp_bloom_free()
 * Return: 0; -EINVAL (@expect_items 0, @fp not in (0, 0.5]); -E2BIG (more than
 * KVP_BLOOM_MAX_BITS needed); -ENOMEM.
 */
int kvp_bloom_new(struct kvp_bloom **out, uint64_t expect_items, double fp);

void kvp_bloom_free(struct kvp_bloom *b);

/* Forget every item (a host rebuilds its summary from its index each period). */
void kvp_bloom_clear(struct kvp_bloom *b);

void kvp_bloom_add(struct kvp_bloom *b, struct kvp_h128 h);

/* May @h be in?  (false: certainly not) */
bool kvp_bloom_test(const struct kvp_bloom *b, struct kvp_h128 h);

/* How many of @hashes, from the first, test positive (the longest prefix held). */
uint32_t kvp_bloom_prefix(const struct kvp_bloom *b, const struct kvp_h128 *hashes, uint32_t n);

/* Bytes kvp_bloom_encode() writes. */
size_t kvp_bloom_encoded_bytes(const struct kvp_bloom *b);

/* Encode into @buf (kvp_bloom_encoded_bytes()), stamped @created_s and @ttl_s. */
void kvp_bloom_encode(const struct kvp_bloom *b, uint8_t *buf, uint64_t created_s, uint32_t ttl_s);

/**
 * kvp_bloom_decode() - read an encoded filter
 * @out:   out; kvp_bloom_free()
 * @now_s: the reader's Unix time
 * Return: 0; -EBADMSG (corrupt: size, magic, sum, a field out of range); -ESTALE
 * (created + ttl is before @now_s); -ENOMEM.
 */
int kvp_bloom_decode(struct kvp_bloom **out, const uint8_t *buf, size_t len, uint64_t now_s);

#endif /* KVP_SHM_REMOTE_BLOOM_H */
