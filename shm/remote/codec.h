/* SPDX-License-Identifier: MIT */
/*
 * codec.h - the remote tier's keys and values.
 *
 * Key:  `kvp1:DOMAIN:b:HEX` where HEX is 32 hex digits of a 128-bit digest
 *
 *	XXH3_128("KVPRKEY1" || schema version || block record version || block shape ||
 *	         model fingerprint || chain hash || extra-keys digest || numerics class)
 *
 * (integers little-endian).  The chain hash is unseeded (shm/index.h), so the same
 * prefix gives the same key on every host and after every restart; the numerics class
 * is the kernel/ISA variant that produced the K/V ("avx512", "avx2", "scalar": the
 * engine's kernel table name), so hosts whose kernels round differently never exchange
 * K/V silently.  One key per block, no hash tag: every command names one key, so a
 * cluster client could replace the standalone one without a format change.
 * A host's chain summary (bloom.h) lives at `kvp1:DOMAIN:r:HOST`.
 *
 * Value: the disk tier's block record (shm/tier_fmt.h), i.e. its slot header region
 * (block header, tokens, zeros: slot_hdr_bytes) followed by the K/V (block_bytes),
 * nothing else.  The fields that mean a place in a file are bound to the key instead:
 * tier_id = digest.lo and slot = digest.hi, so a value copied under another key fails
 * the record's own misdirected-write check; uid/puid are 1/0 for a first block and 2/1
 * for any other (the tier's rule puid < uid, and "first block" is visible); the
 * generation is 1.
 *
 * Checks on every read (kvp_remote_value_check()): exact length; the record as the disk
 * tier checks it (magic, version, sizes, reserved bytes and padding zero, header sum,
 * extra keys canonical and hashing to their digest, chain hash recomputed from parent
 * hash and tokens, first block's parent = digest, model fingerprint, dtype, geometry);
 * then against what the reader expects: the key's digest, the chain hash, the parent's
 * chain hash (the block before, verified), the exact extra keys, the exact tokens, and
 * first-or-not; last, the 128-bit sum over header and K/V, computed on the K/V where it
 * was copied (what is served is what was checked).
 *
 * Pure functions; any thread.
 */
#ifndef KVP_SHM_REMOTE_CODEC_H
#define KVP_SHM_REMOTE_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool/layout.h"
#include "shm/index.h"
#include "shm/remote/config.h"
#include "shm/tier_fmt.h"

#define KVP_REMOTE_KEY_SCHEMA "kvp1" /* the key prefix: bump with any key or value change */
#define KVP_REMOTE_SCHEMA_VERSION 1u
#define KVP_REMOTE_KEY_MAX 80	  /* longest key + NUL: "kvp1:" 32 ":b:" 32 */
#define KVP_REMOTE_HOST_ID_MAX 65 /* a route summary's host id, NUL included */

/**
 * struct kvp_remote_codec - what keys and values of one model and geometry need
 * @lay:         the disk tier's layout of a record (shape, model fingerprint, sizes)
 * @numerics:    numerics class
 * @value_bytes: bytes of a value: lay.slot_hdr_bytes + lay.block_bytes
 */
struct kvp_remote_codec {
	struct kvp_tier_layout lay;
	char numerics[KVP_REMOTE_NAME_MAX];
	size_t value_bytes;
};

/**
 * kvp_remote_codec_init() - the codec of @shape, @model_fp and @numerics
 * @numerics: 1..32 of [A-Za-z0-9_-] (e.g. the kernel table's name, "avx512")
 * Return: 0, or -EINVAL (bad shape or numerics class).
 */
int kvp_remote_codec_init(struct kvp_remote_codec *c, const struct kvp_model_shape *shape,
			  const uint8_t model_fp[16], const char *numerics);

/* The key digest of the block with chain hash @hash under extra keys @ek_digest. */
struct kvp_h128 kvp_remote_digest(const struct kvp_remote_codec *c, struct kvp_h128 hash,
				  struct kvp_h128 ek_digest);

/* "kvp1:DOMAIN:b:HEX" into @buf (KVP_REMOTE_KEY_MAX); its length, or -EINVAL. */
int kvp_remote_block_key(char *buf, size_t cap, const char *domain, struct kvp_h128 digest);

/* "kvp1:DOMAIN:r:HOST" into @buf; its length, or -EINVAL (bad names, too small). */
int kvp_remote_route_key(char *buf, size_t cap, const char *domain, const char *host);

/* Is @s a valid host id (1..64 of [A-Za-z0-9_.-])? */
bool kvp_remote_host_ok(const char *s);

/**
 * kvp_remote_value_encode() - the value of one block
 * @val:    out; c->value_bytes
 * @digest: the key's digest (kvp_remote_digest())
 * @rec:    hash, phash, key and tokens of the block (uid and puid are not used: a block is
 *          first when rec->phash is the extra-keys digest)
 * @kv:     the K/V, c->lay.block_bytes (copied)
 */
void kvp_remote_value_encode(uint8_t *val, const struct kvp_remote_codec *c, struct kvp_h128 digest,
			     const struct kvp_index_rec *rec, const void *kv);

/**
 * struct kvp_remote_expect - what a fetched value must be
 * @digest: the key it was read from
 * @hash:   the block's chain hash (from the reader's own tokens)
 * @phash:  the previous block's chain hash, or the extra-keys digest for block 0
 * @key:    the reader's extra keys (compared exactly)
 * @tokens: the reader's tokens of this block (block_tokens of them, compared exactly)
 * @first:  block 0 of the chain
 */
struct kvp_remote_expect {
	struct kvp_h128 digest;
	struct kvp_h128 hash;
	struct kvp_h128 phash;
	const struct kvp_prefix_key *key;
	const uint32_t *tokens;
	bool first;
};

/**
 * kvp_remote_value_check() - check a value read from the store; copy its K/V out
 * @val, @len: the value (borrowed)
 * @kv_out:    out; c->lay.block_bytes; holds the checked K/V on 0, garbage otherwise
 * Return: 0; -EBADMSG (wrong length, a corrupt or forged record, a field that is not
 * what @e expects); -EXDEV (a sound record of another model, geometry or key).
 */
int kvp_remote_value_check(const uint8_t *val, size_t len, const struct kvp_remote_codec *c,
			   const struct kvp_remote_expect *e, void *kv_out);

#endif /* KVP_SHM_REMOTE_CODEC_H */
