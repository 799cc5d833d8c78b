/* SPDX-License-Identifier: MIT */
/*
 * bloom.c - the chain summary's Bloom filter and its encoding (see bloom.h).
 */
#include "shm/remote/bloom.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "util/cursor.h"

#define MAX_K 16u

static int alloc_bits(struct kvp_bloom **out, uint64_t n_bits, uint32_t k)
{
	struct kvp_bloom *b = calloc(1, sizeof(*b));

	if (!b)
		return -ENOMEM;
	b->bits = calloc(n_bits / 64, sizeof(uint64_t));
	if (!b->bits) {
		free(b);
		return -ENOMEM;
	}
	b->n_bits = n_bits;
	b->k = k;
	*out = b;
	return 0;
}

int kvp_bloom_new(struct kvp_bloom **out, uint64_t expect_items, double fp)
{
	double m, k;

	if (!expect_items || !(fp > 0 && fp <= 0.5))
		return -EINVAL;
	/* the textbook optimum: m = -n ln p / (ln 2)^2, k = m/n ln 2 */
	m = ceil(-(double)expect_items * log(fp) / (M_LN2 * M_LN2));
	if (m > (double)KVP_BLOOM_MAX_BITS)
		return -E2BIG;
	m = ceil(m / 64) * 64;
	k = round(m / (double)expect_items * M_LN2);
	if (k < 1)
		k = 1;
	if (k > MAX_K)
		k = MAX_K;
	return alloc_bits(out, (uint64_t)m, (uint32_t)k);
}

void kvp_bloom_free(struct kvp_bloom *b)
{
	if (!b)
		return;
	free(b->bits);
	free(b);
}

void kvp_bloom_clear(struct kvp_bloom *b)
{
	memset(b->bits, 0, b->n_bits / 8);
	b->n_items = 0;
}

/* Position i of @h: (lo + i * hi) scaled onto [0, n_bits) without a division. */
static uint64_t pos(const struct kvp_bloom *b, struct kvp_h128 h, uint32_t i)
{
	uint64_t x = h.lo + (uint64_t)i * (h.hi | 1);

	return (uint64_t)(((unsigned __int128)x * b->n_bits) >> 64);
}

void kvp_bloom_add(struct kvp_bloom *b, struct kvp_h128 h)
{
	for (uint32_t i = 0; i < b->k; i++) {
		uint64_t p = pos(b, h, i);

		b->bits[p / 64] |= 1ull << (p % 64);
	}
	b->n_items++;
}

bool kvp_bloom_test(const struct kvp_bloom *b, struct kvp_h128 h)
{
	for (uint32_t i = 0; i < b->k; i++) {
		uint64_t p = pos(b, h, i);

		if (!(b->bits[p / 64] >> (p % 64) & 1))
			return false;
	}
	return true;
}

uint32_t kvp_bloom_prefix(const struct kvp_bloom *b, const struct kvp_h128 *hashes, uint32_t n)
{
	uint32_t i = 0;

	while (i < n && kvp_bloom_test(b, hashes[i]))
		i++;
	return i;
}

size_t kvp_bloom_encoded_bytes(const struct kvp_bloom *b)
{
	return KVP_BLOOM_HDR_BYTES + b->n_bits / 8 + 8;
}

static uint8_t *put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
	return p + 4;
}

static uint8_t *put64(uint8_t *p, uint64_t v)
{
	return put32(put32(p, (uint32_t)v), (uint32_t)(v >> 32));
}

void kvp_bloom_encode(const struct kvp_bloom *b, uint8_t *buf, uint64_t created_s, uint32_t ttl_s)
{
	uint8_t *p = buf;

	p = put64(p, KVP_BLOOM_MAGIC);
	p = put32(p, KVP_BLOOM_VERSION);
	p = put32(p, b->k);
	p = put64(p, b->n_bits);
	p = put64(p, b->n_items);
	p = put64(p, created_s);
	p = put32(p, ttl_s);
	p = put32(p, 0);
	for (uint64_t w = 0; w < b->n_bits / 64; w++)
		p = put64(p, b->bits[w]);
	put64(p, XXH3_64bits(buf, (size_t)(p - buf)));
}

int kvp_bloom_decode(struct kvp_bloom **out, const uint8_t *buf, size_t len, uint64_t now_s)
{
	uint64_t magic, n_bits, n_items, created, sum;
	uint32_t version, k, ttl, reserved;
	struct kvp_bloom *b;
	struct kvp_cur c;
	int r;

	kvp_cur_init(&c, buf, len);
	if (kvp_cur_le64(&c, &magic) < 0 || magic != KVP_BLOOM_MAGIC ||
	    kvp_cur_le32(&c, &version) < 0 || version != KVP_BLOOM_VERSION ||
	    kvp_cur_le32(&c, &k) < 0 || k < 1 || k > MAX_K || kvp_cur_le64(&c, &n_bits) < 0 ||
	    n_bits < 64 || n_bits % 64 || n_bits > KVP_BLOOM_MAX_BITS ||
	    kvp_cur_le64(&c, &n_items) < 0 || kvp_cur_le64(&c, &created) < 0 ||
	    kvp_cur_le32(&c, &ttl) < 0 || kvp_cur_le32(&c, &reserved) < 0 || reserved)
		return -EBADMSG;
	/* the size is exact: header, the bits, the sum */
	if (len != KVP_BLOOM_HDR_BYTES + n_bits / 8 + 8)
		return -EBADMSG;
	kvp_cur_init(&c, buf + len - 8, 8);
	if (kvp_cur_le64(&c, &sum) < 0 || sum != XXH3_64bits(buf, len - 8))
		return -EBADMSG;
	if (created > UINT64_MAX - ttl || created + ttl < now_s)
		return -ESTALE;
	r = alloc_bits(&b, n_bits, k);
	if (r < 0)
		return r;
	kvp_cur_init(&c, buf + KVP_BLOOM_HDR_BYTES, n_bits / 8);
	for (uint64_t w = 0; w < n_bits / 64; w++)
		kvp_cur_le64(&c, &b->bits[w]); /* in bounds: the size was checked */
	b->n_items = n_items;
	b->created_s = created;
	b->ttl_s = ttl;
	*out = b;
	return 0;
}
