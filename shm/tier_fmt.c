/* SPDX-License-Identifier: MIT */
/*
 * tier_fmt.c - encode and check the disk tier's file header and block headers (see
 * tier_fmt.h and docs/tier.md).  Pure functions over caller buffers.
 *
 * Reading goes through struct rcur: every take is bounds-checked against what is left,
 * every integer is read little-endian byte by byte, and a field is used only after it
 * was checked.  Writing goes through struct wcur over a buffer the caller sized from the
 * layout (an overflow there is our bug, so it asserts).
 */
#include "shm/tier_fmt.h"

#include <errno.h>
#include <string.h>

#include "shm/geom.h"

/*
 * libxxhash's _dispatch entry points pick the widest XXH3 loop the CPU has at run time:
 * the build targets the portable baseline, where the inlined code would be SSE2 (about a
 * third of the AVX2 speed; every block read is checksummed).
 */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xxh_x86dispatch.h> /* elsewhere the baseline has the vector loop (aarch64: NEON) */
#endif

#define BLK_HDR_BYTES ((uint32_t)sizeof(struct kvp_tier_blk_hdr))
#define FILE_HDR_BYTES ((uint32_t)sizeof(struct kvp_tier_file_hdr))
#define OFF_HDR_CSUM offsetof(struct kvp_tier_blk_hdr, hdr_csum)
#define OFF_CSUM offsetof(struct kvp_tier_blk_hdr, csum)
#define OFF_FILE_CSUM offsetof(struct kvp_tier_file_hdr, csum)
#define MAX_SLOTS (UINT32_MAX >> 1) /* the index's entry table is at most 2^31 */

static_assert(OFF_CSUM == OFF_HDR_CSUM + 8 && OFF_CSUM + 16 == BLK_HDR_BYTES,
	      "the two sums are the last 24 bytes of the block header");

/* ---- cursors ---- */

struct rcur {
	const uint8_t *p;
	size_t left;
};

static const uint8_t *take(struct rcur *c, size_t n)
{
	const uint8_t *p = c->p;

	if (n > c->left)
		return NULL;
	c->p += n;
	c->left -= n;
	return p;
}

static int get_u32(struct rcur *c, uint32_t *v)
{
	const uint8_t *p = take(c, 4);

	if (!p)
		return -EBADMSG;
	*v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	return 0;
}

static int get_u64(struct rcur *c, uint64_t *v)
{
	uint32_t lo, hi;

	if (get_u32(c, &lo) < 0 || get_u32(c, &hi) < 0)
		return -EBADMSG;
	*v = (uint64_t)hi << 32 | lo;
	return 0;
}

static int get_h128(struct rcur *c, struct kvp_h128 *h)
{
	return get_u64(c, &h->lo) < 0 || get_u64(c, &h->hi) < 0 ? -EBADMSG : 0;
}

static int get_bytes(struct rcur *c, void *out, size_t n)
{
	const uint8_t *p = take(c, n);

	if (!p)
		return -EBADMSG;
	memcpy(out, p, n);
	return 0;
}

struct wcur {
	uint8_t *p;
	size_t left;
};

static void put_bytes(struct wcur *c, const void *v, size_t n)
{
	assert(n <= c->left);
	memcpy(c->p, v, n);
	c->p += n;
	c->left -= n;
}

static void put_u32(struct wcur *c, uint32_t v)
{
	uint8_t b[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };

	put_bytes(c, b, 4);
}

static void put_u64(struct wcur *c, uint64_t v)
{
	put_u32(c, (uint32_t)v);
	put_u32(c, (uint32_t)(v >> 32));
}

static void put_h128(struct wcur *c, struct kvp_h128 h)
{
	put_u64(c, h.lo);
	put_u64(c, h.hi);
}

static int all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

static int h128_eq(struct kvp_h128 a, struct kvp_h128 b)
{
	return a.lo == b.lo && a.hi == b.hi;
}

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/* ---- shared pieces ---- */

static void put_shape(struct wcur *c, const struct kvp_model_shape *s)
{
	put_u32(c, s->n_layers);
	put_u32(c, s->n_kv_heads);
	put_u32(c, s->head_dim);
	put_u32(c, s->dtype);
	put_u32(c, s->block_tokens);
	put_u32(c, 0);
}

static int get_shape(struct rcur *c, struct kvp_model_shape *s)
{
	if (get_u32(c, &s->n_layers) < 0 || get_u32(c, &s->n_kv_heads) < 0 ||
	    get_u32(c, &s->head_dim) < 0 || get_u32(c, &s->dtype) < 0 ||
	    get_u32(c, &s->block_tokens) < 0 || get_u32(c, &s->reserved0) < 0)
		return -EBADMSG;
	return 0;
}

static void put_ek(struct wcur *c, const struct kvp_extra_keys *ek)
{
	put_bytes(c, ek->model_fp, sizeof(ek->model_fp));
	put_u32(c, ek->adapter_id);
	put_u32(c, ek->kv_dtype);
	put_u32(c, ek->rope_theta_bits);
	put_u32(c, ek->rope_scale_bits);
	put_u32(c, ek->rope_flags);
	put_u32(c, ek->pos_offset);
	put_u32(c, ek->salt_len);
	put_u32(c, ek->reserved);
	put_bytes(c, ek->salt, sizeof(ek->salt));
}

static int get_ek(struct rcur *c, struct kvp_extra_keys *ek)
{
	if (get_bytes(c, ek->model_fp, sizeof(ek->model_fp)) < 0 ||
	    get_u32(c, &ek->adapter_id) < 0 || get_u32(c, &ek->kv_dtype) < 0 ||
	    get_u32(c, &ek->rope_theta_bits) < 0 || get_u32(c, &ek->rope_scale_bits) < 0 ||
	    get_u32(c, &ek->rope_flags) < 0 || get_u32(c, &ek->pos_offset) < 0 ||
	    get_u32(c, &ek->salt_len) < 0 || get_u32(c, &ek->reserved) < 0 ||
	    get_bytes(c, ek->salt, sizeof(ek->salt)) < 0)
		return -EBADMSG;
	return 0;
}

/* ---- layout ---- */

int kvp_tier_layout_init(struct kvp_tier_layout *lay, const struct kvp_model_shape *shape,
			 const uint8_t model_fp[16], uint64_t max_bytes)
{
	struct kvp_geom g;
	uint64_t n;

	if (!lay || !shape || !model_fp || kvp_geom_init(&g, shape) < 0 ||
	    shape->block_tokens > KVP_INDEX_MAX_BLOCK_TOKENS)
		return -EINVAL;
	memset(lay, 0, sizeof(*lay));
	lay->shape = g.shape;
	memcpy(lay->model_fp, model_fp, sizeof(lay->model_fp));
	lay->block_bytes = g.block_bytes;
	lay->slot_hdr_bytes = (uint32_t)round_up(BLK_HDR_BYTES + 4ull * shape->block_tokens,
						 KVP_TIER_ALIGN);
	lay->slot_bytes = lay->slot_hdr_bytes + round_up(g.block_bytes, KVP_TIER_ALIGN);
	lay->data_offset = KVP_TIER_FILE_REGION;
	if (max_bytes < lay->data_offset + lay->slot_bytes)
		return -EINVAL;
	n = (max_bytes - lay->data_offset) / lay->slot_bytes;
	if (n > MAX_SLOTS)
		return -EFBIG;
	lay->n_slots = n;
	lay->file_bytes = lay->data_offset + n * lay->slot_bytes;
	return 0;
}

/* ---- file header ---- */

void kvp_tier_file_encode(uint8_t *buf, const struct kvp_tier_layout *lay, uint64_t tier_id,
			  uint64_t hash_seed)
{
	struct wcur c = { buf, FILE_HDR_BYTES };

	memset(buf, 0, KVP_TIER_FILE_REGION);
	put_u64(&c, KVP_TIER_MAGIC);
	put_u32(&c, KVP_TIER_VERSION);
	put_u32(&c, FILE_HDR_BYTES);
	put_u64(&c, tier_id);
	put_u64(&c, hash_seed);
	put_shape(&c, &lay->shape);
	put_bytes(&c, lay->model_fp, sizeof(lay->model_fp));
	put_u32(&c, lay->shape.dtype);
	put_u32(&c, KVP_TIER_ALIGN);
	put_u64(&c, lay->block_bytes);
	put_u32(&c, lay->slot_hdr_bytes);
	put_u32(&c, 0);
	put_u64(&c, lay->slot_bytes);
	put_u64(&c, lay->data_offset);
	put_u64(&c, lay->n_slots);
	put_u64(&c, lay->file_bytes);
	c.p += sizeof(((struct kvp_tier_file_hdr *)0)->reserved); /* zeros */
	c.left -= sizeof(((struct kvp_tier_file_hdr *)0)->reserved);
	put_u64(&c, XXH3_64bits(buf, OFF_FILE_CSUM));
	assert(c.left == 0);
}

int kvp_tier_file_parse(const uint8_t *buf, size_t len, struct kvp_tier_file_hdr *h)
{
	struct rcur c = { buf, len };
	struct kvp_geom g;
	uint64_t n;

	if (len < KVP_TIER_FILE_REGION)
		return -EBADMSG;
	if (all_zero(buf, KVP_TIER_FILE_REGION))
		return -ENODATA;
	memset(h, 0, sizeof(*h));
	if (get_u64(&c, &h->magic) < 0 || h->magic != KVP_TIER_MAGIC)
		return -EMEDIUMTYPE;
	if (get_u32(&c, &h->version) < 0 || h->version != KVP_TIER_VERSION)
		return -EPROTONOSUPPORT;
	if (get_u32(&c, &h->hdr_bytes) < 0 || h->hdr_bytes != FILE_HDR_BYTES ||
	    get_u64(&c, &h->tier_id) < 0 || get_u64(&c, &h->hash_seed) < 0 ||
	    get_shape(&c, &h->shape) < 0 || get_bytes(&c, h->model_fp, sizeof(h->model_fp)) < 0 ||
	    get_u32(&c, &h->kv_dtype) < 0 || get_u32(&c, &h->align) < 0 ||
	    get_u64(&c, &h->block_bytes) < 0 || get_u32(&c, &h->slot_hdr_bytes) < 0 ||
	    get_u32(&c, &h->reserved0) < 0 || get_u64(&c, &h->slot_bytes) < 0 ||
	    get_u64(&c, &h->data_offset) < 0 || get_u64(&c, &h->n_slots) < 0 ||
	    get_u64(&c, &h->file_bytes) < 0 ||
	    get_bytes(&c, h->reserved, sizeof(h->reserved)) < 0 || get_u64(&c, &h->csum) < 0)
		return -EBADMSG;
	if (h->csum != XXH3_64bits(buf, OFF_FILE_CSUM))
		return -EBADMSG;
	/* every field, against what the geometry makes of it */
	if (h->shape.reserved0 || h->reserved0 || !all_zero(h->reserved, sizeof(h->reserved)) ||
	    !all_zero(buf + FILE_HDR_BYTES, KVP_TIER_FILE_REGION - FILE_HDR_BYTES))
		return -EBADMSG;
	if (kvp_geom_init(&g, &h->shape) < 0 ||
	    h->shape.block_tokens > KVP_INDEX_MAX_BLOCK_TOKENS || h->kv_dtype != h->shape.dtype ||
	    h->align != KVP_TIER_ALIGN || h->block_bytes != g.block_bytes ||
	    h->slot_hdr_bytes !=
		    round_up(BLK_HDR_BYTES + 4ull * h->shape.block_tokens, KVP_TIER_ALIGN) ||
	    h->slot_bytes != h->slot_hdr_bytes + round_up(g.block_bytes, KVP_TIER_ALIGN) ||
	    h->data_offset != KVP_TIER_FILE_REGION || h->n_slots < 1 || h->n_slots > MAX_SLOTS ||
	    __builtin_mul_overflow(h->n_slots, h->slot_bytes, &n) ||
	    __builtin_add_overflow(n, h->data_offset, &n) || h->file_bytes != n)
		return -EBADMSG;
	return 0;
}

int kvp_tier_file_compatible(const struct kvp_tier_file_hdr *h, const struct kvp_tier_layout *lay)
{
	return memcmp(&h->shape, &lay->shape, sizeof(h->shape)) == 0 &&
	       memcmp(h->model_fp, lay->model_fp, sizeof(h->model_fp)) == 0 &&
	       h->block_bytes == lay->block_bytes && h->slot_hdr_bytes == lay->slot_hdr_bytes &&
	       h->slot_bytes == lay->slot_bytes && h->data_offset == lay->data_offset;
}

/* ---- block header ---- */

void kvp_tier_blk_encode(uint8_t *buf, const struct kvp_tier_layout *lay, uint64_t tier_id,
			 uint64_t slot, uint64_t generation, const struct kvp_index_rec *rec,
			 const void *data)
{
	uint32_t bt = lay->shape.block_tokens;
	struct wcur c = { buf, lay->slot_hdr_bytes };
	XXH3_state_t st;
	XXH128_hash_t h;

	memset(buf, 0, lay->slot_hdr_bytes);
	put_u64(&c, KVP_TIER_BLK_MAGIC);
	put_u32(&c, KVP_TIER_VERSION);
	put_u32(&c, BLK_HDR_BYTES);
	put_u64(&c, tier_id);
	put_u64(&c, slot);
	put_u64(&c, generation);
	put_u64(&c, rec->uid);
	put_u64(&c, rec->puid);
	put_h128(&c, rec->hash);
	put_h128(&c, rec->phash);
	put_h128(&c, rec->key.seed);
	put_ek(&c, &rec->key.ek);
	put_u32(&c, bt);
	put_u32(&c, lay->slot_hdr_bytes);
	put_u64(&c, lay->block_bytes);
	assert(c.p == buf + OFF_HDR_CSUM);
	c.p += BLK_HDR_BYTES - OFF_HDR_CSUM; /* both sums zero while summing */
	c.left -= BLK_HDR_BYTES - OFF_HDR_CSUM;
	for (uint32_t i = 0; i < bt; i++)
		put_u32(&c, rec->tokens[i]);

	XXH3_128bits_reset(&st);
	XXH3_128bits_update(&st, buf, lay->slot_hdr_bytes);
	XXH3_128bits_update(&st, data, lay->block_bytes);
	h = XXH3_128bits_digest(&st);
	c = (struct wcur){ buf + OFF_CSUM, 16 };
	put_h128(&c, (struct kvp_h128){ .lo = h.low64, .hi = h.high64 });
	c = (struct wcur){ buf + OFF_HDR_CSUM, 8 };
	put_u64(&c, XXH3_64bits(buf, lay->slot_hdr_bytes));
}

/* XXH3-64 of the header region with hdr_csum read as zero. */
static uint64_t hdr_sum(const uint8_t *buf, uint32_t region)
{
	static const uint8_t zero[8];
	XXH3_state_t st;

	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, buf, OFF_HDR_CSUM);
	XXH3_64bits_update(&st, zero, sizeof(zero));
	XXH3_64bits_update(&st, buf + OFF_CSUM, region - OFF_CSUM);
	return XXH3_64bits_digest(&st);
}

/* Canonical extra keys (as kvp_prefix_key_init() leaves them) hashing to @digest. */
static int ek_sound(const struct kvp_extra_keys *ek, struct kvp_h128 digest)
{
	struct kvp_prefix_key k;

	if (ek->salt_len > KVP_SALT_MAX || ek->reserved ||
	    !all_zero(ek->salt + ek->salt_len, KVP_SALT_MAX - ek->salt_len))
		return 0;
	if (kvp_prefix_key_init(&k, ek) < 0)
		return 0;
	return h128_eq(k.seed, digest);
}

int kvp_tier_blk_parse(const uint8_t *buf, size_t len, const struct kvp_tier_layout *lay,
		       uint64_t tier_id, uint64_t slot, uint32_t *tokens,
		       struct kvp_tier_blk_info *info)
{
	struct kvp_tier_blk_hdr h;
	struct rcur c = { buf, len };
	struct kvp_index_rec *rec = &info->rec;
	size_t tok_end;

	if (len < lay->slot_hdr_bytes || lay->slot_hdr_bytes < BLK_HDR_BYTES)
		return -EBADMSG;
	c.left = lay->slot_hdr_bytes;
	if (get_u64(&c, &h.magic) < 0)
		return -EBADMSG;
	if (!h.magic)
		return -ENODATA;
	if (h.magic != KVP_TIER_BLK_MAGIC)
		return -EBADMSG;
	if (get_u32(&c, &h.version) < 0 || h.version != KVP_TIER_VERSION ||
	    get_u32(&c, &h.hdr_bytes) < 0 || h.hdr_bytes != BLK_HDR_BYTES ||
	    get_u64(&c, &h.tier_id) < 0 || get_u64(&c, &h.slot) < 0 ||
	    get_u64(&c, &h.generation) < 0 || get_u64(&c, &h.uid) < 0 || get_u64(&c, &h.puid) < 0 ||
	    get_h128(&c, &h.hash) < 0 || get_h128(&c, &h.phash) < 0 ||
	    get_h128(&c, &h.ek_digest) < 0 || get_ek(&c, &h.ek) < 0 ||
	    get_u32(&c, &h.n_tokens) < 0 || get_u32(&c, &h.data_offset) < 0 ||
	    get_u64(&c, &h.data_bytes) < 0 || get_u64(&c, &h.hdr_csum) < 0 ||
	    get_h128(&c, &h.csum) < 0)
		return -EBADMSG;
	/* the header sum first: nothing below is looked at in a torn header */
	if (h.hdr_csum != hdr_sum(buf, lay->slot_hdr_bytes))
		return -EBADMSG;
	if (h.n_tokens == 0 || h.n_tokens > KVP_INDEX_MAX_BLOCK_TOKENS)
		return -EBADMSG;
	tok_end = BLK_HDR_BYTES + 4ull * h.n_tokens;
	if (tok_end > lay->slot_hdr_bytes)
		return -EXDEV; /* sound, but written with longer blocks than ours */

	/* sound, but not ours: another incarnation, model, dtype or geometry */
	if (h.tier_id != tier_id || h.n_tokens != lay->shape.block_tokens ||
	    h.data_offset != lay->slot_hdr_bytes || h.data_bytes != lay->block_bytes ||
	    memcmp(h.ek.model_fp, lay->model_fp, sizeof(h.ek.model_fp)) != 0 ||
	    h.ek.kv_dtype != lay->shape.dtype)
		return -EXDEV;

	if (h.slot != slot || !h.generation || !h.uid || h.puid >= h.uid)
		return -EBADMSG;
	for (uint32_t i = 0; i < h.n_tokens; i++)
		if (get_u32(&c, &tokens[i]) < 0)
			return -EBADMSG;
	if (!all_zero(buf + tok_end, lay->slot_hdr_bytes - tok_end))
		return -EBADMSG;
	if (!ek_sound(&h.ek, h.ek_digest))
		return -EBADMSG;
	if (!h.puid && !h128_eq(h.phash, h.ek_digest))
		return -EBADMSG;
	if (!h128_eq(h.hash, kvp_chain_hash(h.phash, tokens, h.n_tokens)))
		return -EBADMSG;

	info->tier_id = h.tier_id;
	info->slot = h.slot;
	info->generation = h.generation;
	info->csum = h.csum;
	rec->hash = h.hash;
	rec->phash = h.phash;
	rec->uid = h.uid;
	rec->puid = h.puid;
	rec->key.ek = h.ek;
	rec->key.seed = h.ek_digest;
	rec->tokens = tokens;
	return 0;
}

int kvp_tier_blk_verify(const uint8_t *hdr, const struct kvp_tier_layout *lay,
			const struct kvp_tier_blk_info *info, const void *data)
{
	static const uint8_t zero[BLK_HDR_BYTES - OFF_HDR_CSUM];
	XXH3_state_t st;
	XXH128_hash_t h;

	XXH3_128bits_reset(&st);
	XXH3_128bits_update(&st, hdr, OFF_HDR_CSUM);
	XXH3_128bits_update(&st, zero, sizeof(zero));
	XXH3_128bits_update(&st, hdr + BLK_HDR_BYTES, lay->slot_hdr_bytes - BLK_HDR_BYTES);
	XXH3_128bits_update(&st, data, lay->block_bytes);
	h = XXH3_128bits_digest(&st);
	return h.low64 == info->csum.lo && h.high64 == info->csum.hi ? 0 : -EBADMSG;
}
