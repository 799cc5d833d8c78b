/* SPDX-License-Identifier: MIT */
/*
 * tier_fmt.h - the disk tier's on-disk format (docs/tier.md): a file header, then slots
 * of one block each, every slot a block header (with the block's tokens) and its K/V.
 *
 *	offset 0                 file header region (KVP_TIER_FILE_REGION bytes)
 *	data_offset + s * slot_bytes   slot s:
 *	    +0                   block header (struct kvp_tier_blk_hdr), the block's tokens
 *	                         (uint32 LE), zeros up to slot_hdr_bytes
 *	    +slot_hdr_bytes      K/V of the block, data_bytes of them, zeros up to 4 KiB
 *
 * Everything is fixed-width little-endian and a multiple of 4 KiB, so every read and
 * write is an O_DIRECT unit, and the K/V part is read straight into a pool block (whose
 * stride is the same 4 KiB multiple).  Reserved bytes are written as zeros and a header
 * with any of them set is refused.
 *
 * Checks.  A block carries two XXH3 sums: @csum (128 bits) over its header region (with
 * both sums zeroed) and its K/V, and @hdr_csum (64 bits) over its header region (with
 * @csum in place and @hdr_csum zeroed).  A fast scan reads the header region only and
 * trusts it by @hdr_csum; the K/V is trusted only after @csum, on every read.  A write
 * torn anywhere (in the header, in the K/V, or between them) fails @csum.
 *
 * These are daemon-private formats, not client ABI: nothing but kvpoold reads a tier
 * file (it is the daemon's, mode 0600), so the structs live here and not in
 * include/kvpool/.  They are still fixed layouts checked by static_assert, because a
 * file outlives the process that wrote it (and the remote tier will ship the same block
 * record between hosts).
 *
 * Parsing goes through a bounds-checked cursor, field by field; nothing is cast from the
 * buffer.  Pure code: no I/O, no state, thread-agnostic.
 */
#ifndef KVP_SHM_TIER_FMT_H
#define KVP_SHM_TIER_FMT_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool/layout.h"
#include "shm/index.h"

#define KVP_TIER_MAGIC 0x315245495450564bull	 /* "KVPTIER1" little-endian */
#define KVP_TIER_BLK_MAGIC 0x314b4c4250564b00ull /* "\0KVPBLK1": never all-ASCII text */
/* 2: the int8 K/V layout's revision 2 (kvpool/layout.h): a file of 1 is reset, not misread */
#define KVP_TIER_VERSION 2u

#define KVP_TIER_ALIGN 4096u	   /* every offset and length */
#define KVP_TIER_FILE_REGION 4096u /* bytes reserved for the file header */

/**
 * struct kvp_tier_file_hdr - first bytes of a tier file (little-endian, 256 bytes)
 * @magic:          KVP_TIER_MAGIC
 * @version:        KVP_TIER_VERSION
 * @hdr_bytes:      sizeof(struct kvp_tier_file_hdr)
 * @tier_id:        random, new each time the tier is (re)made or flushed; every block
 *                  carries it, so blocks of an earlier incarnation are foreign
 * @hash_seed:      random per tier: the prefix index's bucket placement seed
 * @shape:          K/V block shape (geometry) the blocks were written with
 * @model_fp:       model fingerprint
 * @kv_dtype:       enum kvp_dtype of the K/V (equal to @shape.dtype)
 * @align:          KVP_TIER_ALIGN
 * @block_bytes:    K/V bytes of one block (block size)
 * @slot_hdr_bytes: bytes of a slot's header region (multiple of @align)
 * @reserved0:      zero
 * @slot_bytes:     bytes of one slot: slot_hdr_bytes + block_bytes rounded up to @align
 * @data_offset:    offset of slot 0 (KVP_TIER_FILE_REGION)
 * @n_slots:        slots in the file
 * @file_bytes:     data_offset + n_slots * slot_bytes
 * @reserved:       zero
 * @csum:           XXH3-64 of the bytes before it
 */
struct kvp_tier_file_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t hdr_bytes;
	uint64_t tier_id;
	uint64_t hash_seed;
	struct kvp_model_shape shape;
	uint8_t model_fp[16];
	uint32_t kv_dtype;
	uint32_t align;
	uint64_t block_bytes;
	uint32_t slot_hdr_bytes;
	uint32_t reserved0;
	uint64_t slot_bytes;
	uint64_t data_offset;
	uint64_t n_slots;
	uint64_t file_bytes;
	uint8_t reserved[120];
	uint64_t csum;
};
static_assert(sizeof(struct kvp_tier_file_hdr) == 256, "tier format");
static_assert(offsetof(struct kvp_tier_file_hdr, shape) == 32, "tier format");
static_assert(offsetof(struct kvp_tier_file_hdr, model_fp) == 56, "tier format");
static_assert(offsetof(struct kvp_tier_file_hdr, block_bytes) == 80, "tier format");
static_assert(offsetof(struct kvp_tier_file_hdr, slot_bytes) == 96, "tier format");
static_assert(offsetof(struct kvp_tier_file_hdr, file_bytes) == 120, "tier format");
static_assert(offsetof(struct kvp_tier_file_hdr, csum) == 248, "tier format");

/**
 * struct kvp_tier_blk_hdr - start of every slot (little-endian, 256 bytes, then tokens)
 * @magic:       KVP_TIER_BLK_MAGIC (0 means an empty slot)
 * @version:     KVP_TIER_VERSION
 * @hdr_bytes:   sizeof(struct kvp_tier_blk_hdr); the tokens follow at this offset
 * @tier_id:     the file header's tier_id when written
 * @slot:        the slot it was written to (a misdirected write is caught)
 * @generation:  write sequence number in this tier (newer wins between two copies)
 * @uid:         index entry uid (never 0)
 * @puid:        parent entry's uid, 0 for a first block; always below @uid
 * @hash:        chain hash: XXH3_128(@phash || tokens)
 * @phash:       parent's chain hash; @ek_digest for a first block
 * @ek_digest:   XXH3_128 of the canonical extra keys
 * @ek:          the canonical extra keys themselves (so a hit after a restart compares
 *               them exactly, as in memory; a salt never leaves the daemon's own file)
 * @n_tokens:    tokens of the block (block_tokens)
 * @data_offset: offset of the K/V from the slot start (slot_hdr_bytes)
 * @data_bytes:  bytes of K/V (the block's length)
 * @hdr_csum:    XXH3-64 of the header region, with @hdr_csum zeroed
 * @csum:        XXH3-128 of the header region (@hdr_csum and @csum zeroed) and the K/V
 */
struct kvp_tier_blk_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t hdr_bytes;
	uint64_t tier_id;
	uint64_t slot;
	uint64_t generation;
	uint64_t uid;
	uint64_t puid;
	struct kvp_h128 hash;
	struct kvp_h128 phash;
	struct kvp_h128 ek_digest;
	struct kvp_extra_keys ek;
	uint32_t n_tokens;
	uint32_t data_offset;
	uint64_t data_bytes;
	uint64_t hdr_csum;
	struct kvp_h128 csum;
};
static_assert(sizeof(struct kvp_tier_blk_hdr) == 256, "tier format");
static_assert(offsetof(struct kvp_tier_blk_hdr, hash) == 56, "tier format");
static_assert(offsetof(struct kvp_tier_blk_hdr, ek) == 104, "tier format");
static_assert(offsetof(struct kvp_tier_blk_hdr, n_tokens) == 216, "tier format");
static_assert(offsetof(struct kvp_tier_blk_hdr, hdr_csum) == 232, "tier format");
static_assert(offsetof(struct kvp_tier_blk_hdr, csum) == 240, "tier format");

/**
 * struct kvp_tier_layout - where things are in a tier file of a given geometry
 * (kvp_tier_layout_init()); also what a block header is checked against
 * @shape:          block shape
 * @model_fp:       model fingerprint
 * @block_bytes:    K/V bytes per block
 * @slot_hdr_bytes: header region of a slot
 * @slot_bytes:     one slot
 * @data_offset:    slot 0
 * @n_slots:        slots
 * @file_bytes:     data_offset + n_slots * slot_bytes
 */
struct kvp_tier_layout {
	struct kvp_model_shape shape;
	uint8_t model_fp[16];
	uint64_t block_bytes;
	uint32_t slot_hdr_bytes;
	uint64_t slot_bytes;
	uint64_t data_offset;
	uint64_t n_slots;
	uint64_t file_bytes;
};

/**
 * kvp_tier_layout_init() - the layout of a tier of at most @max_bytes for @shape
 * @lay:       out
 * @shape:     block shape (kvp_geom_init() must accept it; block_tokens at most
 *             KVP_INDEX_MAX_BLOCK_TOKENS)
 * @model_fp:  16 bytes
 * @max_bytes: file size limit; rounded down to whole slots
 * Return: 0; -EINVAL for a bad shape or fewer than one slot; -EFBIG above 2^31 slots.
 */
int kvp_tier_layout_init(struct kvp_tier_layout *lay, const struct kvp_model_shape *shape,
			 const uint8_t model_fp[16], uint64_t max_bytes);

/* Byte offset of slot @slot in the file. */
static inline uint64_t kvp_tier_slot_offset(const struct kvp_tier_layout *lay, uint64_t slot)
{
	return lay->data_offset + slot * lay->slot_bytes;
}

/**
 * kvp_tier_file_encode() - the file header region for @lay, @tier_id and @hash_seed
 * @buf: out; KVP_TIER_FILE_REGION bytes (the header, then zeros)
 */
void kvp_tier_file_encode(uint8_t *buf, const struct kvp_tier_layout *lay, uint64_t tier_id,
			  uint64_t hash_seed);

/**
 * kvp_tier_file_parse() - read and check a file header region
 * @buf, @len: the bytes read from offset 0 (borrowed)
 * @hdr:       out; the fields, valid on 0
 * Return: 0; -ENODATA when the region is all zeros (a new file); -EMEDIUMTYPE when it
 * does not start with KVP_TIER_MAGIC (not a tier file: never overwrite it);
 * -EPROTONOSUPPORT for another version; -EBADMSG for a bad sum or an inconsistent field.
 */
int kvp_tier_file_parse(const uint8_t *buf, size_t len, struct kvp_tier_file_hdr *hdr);

/*
 * Were the blocks of the file described by @hdr written for @lay (same geometry, model
 * fingerprint and slot layout)?  The slot count may differ: a resized tier keeps the
 * blocks that still fit.  Return 1 or 0.
 */
int kvp_tier_file_compatible(const struct kvp_tier_file_hdr *hdr,
			     const struct kvp_tier_layout *lay);

/**
 * struct kvp_tier_blk_info - what a block header says, parsed
 * @tier_id, @slot, @generation: as in struct kvp_tier_blk_hdr
 * @rec:  identity; rec.tokens points into the token buffer given to the parser
 * @csum: the sum to check the K/V with (kvp_tier_blk_verify())
 */
struct kvp_tier_blk_info {
	uint64_t tier_id;
	uint64_t slot;
	uint64_t generation;
	struct kvp_index_rec rec;
	struct kvp_h128 csum;
};

/**
 * kvp_tier_blk_encode() - write the header region of a slot, sums included
 * @buf:        out; lay->slot_hdr_bytes bytes (4 KiB aligned for O_DIRECT)
 * @lay:        the tier's layout
 * @tier_id:    the tier's id
 * @slot:       where it goes
 * @generation: write sequence number (> 0)
 * @rec:        identity of the block (tokens: block_tokens of them)
 * @data:       the K/V, lay->block_bytes of them (hashed, not copied)
 */
void kvp_tier_blk_encode(uint8_t *buf, const struct kvp_tier_layout *lay, uint64_t tier_id,
			 uint64_t slot, uint64_t generation, const struct kvp_index_rec *rec,
			 const void *data);

/**
 * kvp_tier_blk_parse() - read and check a slot's header region (not the K/V)
 * @buf, @len:  the region as read (borrowed); @len >= lay->slot_hdr_bytes
 * @lay:        the layout the block must have been written for
 * @tier_id:    the tier's id
 * @slot:       the slot it was read from
 * @tokens:     out; room for lay->shape.block_tokens ids (@info->rec.tokens points here)
 * @info:       out; valid on 0
 *
 * Every field is checked: magic, version, sizes, reserved bytes and padding zero,
 * @hdr_csum, slot, extra keys canonical and hashing to their digest, the chain hash
 * recomputed from the parent hash and tokens, a first block's parent hash being the
 * digest, puid < uid.
 * Return: 0; -ENODATA for an empty slot (magic 0); -EXDEV for a sound block of another
 * tier incarnation, model fingerprint, dtype or geometry (reusable space); -EBADMSG for
 * anything else (torn, corrupt, misdirected).
 */
int kvp_tier_blk_parse(const uint8_t *buf, size_t len, const struct kvp_tier_layout *lay,
		       uint64_t tier_id, uint64_t slot, uint32_t *tokens,
		       struct kvp_tier_blk_info *info);

/**
 * kvp_tier_blk_verify() - does the K/V at @data match the header region at @hdr?
 * @hdr:  the header region, already accepted by kvp_tier_blk_parse()
 * @data: lay->block_bytes of K/V as read
 * Return: 0, or -EBADMSG when @csum does not match.
 */
int kvp_tier_blk_verify(const uint8_t *hdr, const struct kvp_tier_layout *lay,
			const struct kvp_tier_blk_info *info, const void *data);

#endif /* KVP_SHM_TIER_FMT_H */
