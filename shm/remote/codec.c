/* SPDX-License-Identifier: MIT */
/*
 * codec.c - keys and values of the remote tier (see codec.h).  The value is the disk
 * tier's record: encoding and checking go through shm/tier_fmt.c; what is added here is
 * the binding of its file-place fields to the key and the comparison with what the
 * reader expects.
 */
#include "shm/remote/codec.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#define UID_FIRST 1u /* a first block's record: uid 1, puid 0 */
#define UID_NEXT 2u  /* any other: uid 2, puid 1 */

int kvp_remote_codec_init(struct kvp_remote_codec *c, const struct kvp_model_shape *shape,
			  const uint8_t model_fp[16], const char *numerics)
{
	struct kvp_tier_layout lay;

	if (!numerics || !kvp_remote_name_ok(numerics))
		return -EINVAL;
	/* the layout of some tier file: only the record's sizes are used */
	if (kvp_tier_layout_init(&lay, shape, model_fp, 1ull << 40) < 0)
		return -EINVAL;
	memset(c, 0, sizeof(*c));
	c->lay = lay;
	strcpy(c->numerics, numerics);
	c->value_bytes = lay.slot_hdr_bytes + lay.block_bytes;
	return 0;
}

static uint8_t *put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
	return p + 4;
}

static uint8_t *put64(uint8_t *p, uint64_t v)
{
	return put32(put32(p, (uint32_t)v), (uint32_t)(v >> 32));
}

struct kvp_h128 kvp_remote_digest(const struct kvp_remote_codec *c, struct kvp_h128 hash,
				  struct kvp_h128 ek_digest)
{
	const struct kvp_model_shape *s = &c->lay.shape;
	uint8_t buf[8 + 4 + 4 + 24 + 16 + 32 + 4 + KVP_REMOTE_NAME_MAX], *p = buf;
	size_t nlen = strlen(c->numerics);
	XXH128_hash_t h;

	memcpy(p, "KVPRKEY1", 8);
	p = put32(p + 8, KVP_REMOTE_SCHEMA_VERSION);
	p = put32(p, KVP_TIER_VERSION);
	p = put32(p, s->n_layers);
	p = put32(p, s->n_kv_heads);
	p = put32(p, s->head_dim);
	p = put32(p, s->dtype);
	p = put32(p, s->block_tokens);
	p = put32(p, 0);
	memcpy(p, c->lay.model_fp, 16);
	p = put64(p + 16, hash.lo);
	p = put64(p, hash.hi);
	p = put64(p, ek_digest.lo);
	p = put64(p, ek_digest.hi);
	p = put32(p, (uint32_t)nlen);
	memcpy(p, c->numerics, nlen);
	p += nlen;
	h = XXH3_128bits(buf, (size_t)(p - buf));
	return (struct kvp_h128){ .lo = h.low64, .hi = h.high64 };
}

int kvp_remote_block_key(char *buf, size_t cap, const char *domain, struct kvp_h128 digest)
{
	int n;

	if (!kvp_remote_name_ok(domain))
		return -EINVAL;
	n = snprintf(buf, cap, KVP_REMOTE_KEY_SCHEMA ":%s:b:%016llx%016llx", domain,
		     (unsigned long long)digest.hi, (unsigned long long)digest.lo);
	return n < 0 || (size_t)n >= cap ? -EINVAL : n;
}

bool kvp_remote_host_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n >= KVP_REMOTE_HOST_ID_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.'))
			return false;
	}
	return true;
}

int kvp_remote_route_key(char *buf, size_t cap, const char *domain, const char *host)
{
	int n;

	if (!kvp_remote_name_ok(domain) || !kvp_remote_host_ok(host))
		return -EINVAL;
	n = snprintf(buf, cap, KVP_REMOTE_KEY_SCHEMA ":%s:r:%s", domain, host);
	return n < 0 || (size_t)n >= cap ? -EINVAL : n;
}

static bool h128_eq(struct kvp_h128 a, struct kvp_h128 b)
{
	return a.lo == b.lo && a.hi == b.hi;
}

void kvp_remote_value_encode(uint8_t *val, const struct kvp_remote_codec *c, struct kvp_h128 digest,
			     const struct kvp_index_rec *rec, const void *kv)
{
	struct kvp_index_rec r = *rec;
	bool first = h128_eq(rec->phash, rec->key.seed);

	r.uid = first ? UID_FIRST : UID_NEXT;
	r.puid = r.uid - 1;
	kvp_tier_blk_encode(val, &c->lay, digest.lo, digest.hi, 1, &r, kv);
	memcpy(val + c->lay.slot_hdr_bytes, kv, c->lay.block_bytes);
}

int kvp_remote_value_check(const uint8_t *val, size_t len, const struct kvp_remote_codec *c,
			   const struct kvp_remote_expect *e, void *kv_out)
{
	uint32_t tokens[KVP_INDEX_MAX_BLOCK_TOKENS];
	uint32_t bt = c->lay.shape.block_tokens;
	struct kvp_tier_blk_info info;
	const struct kvp_index_rec *rec = &info.rec;
	uint64_t uid = e->first ? UID_FIRST : UID_NEXT;
	int r;

	if (len != c->value_bytes)
		return -EBADMSG; /* truncated, or more than a record */
	/* the record as the disk tier checks it, bound to the key it was read from */
	r = kvp_tier_blk_parse(val, len, &c->lay, e->digest.lo, e->digest.hi, tokens, &info);
	if (r < 0)
		return r == -EXDEV ? -EXDEV : -EBADMSG;
	/* what this reader expects: the exact chain, keys and tokens */
	if (!h128_eq(rec->hash, e->hash) || !h128_eq(rec->phash, e->phash) ||
	    !h128_eq(rec->key.seed, e->key->seed) ||
	    memcmp(&rec->key.ek, &e->key->ek, sizeof(rec->key.ek)) != 0 ||
	    memcmp(tokens, e->tokens, 4ull * bt) != 0 || rec->uid != uid || rec->puid != uid - 1)
		return -EBADMSG;
	memcpy(kv_out, val + c->lay.slot_hdr_bytes, c->lay.block_bytes);
	return kvp_tier_blk_verify(val, &c->lay, &info, kv_out);
}
