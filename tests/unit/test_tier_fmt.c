/* SPDX-License-Identifier: MIT */
/*
 * test_tier_fmt.c - the disk tier's on-disk format, in memory: layout sizes, file header
 * and block header round trips, every single-byte change of a header refused, K/V changes
 * caught by the sum, foreign blocks told apart from corrupt ones, and records whose sums
 * are right but whose fields lie (hash chain, keys, uids) refused.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "shm/geom.h"
#include "shm/tier_fmt.h"

#define BT 16

static const struct kvp_model_shape shape = {
	.n_layers = 2,
	.n_kv_heads = 2,
	.head_dim = 24,
	.dtype = KVP_DTYPE_F16,
	.block_tokens = BT,
};
static const uint8_t fp[16] = "fmt-test-model!";

struct fixture {
	struct kvp_tier_layout lay;
	struct kvp_prefix_key key;
	uint32_t tokens[BT];
	struct kvp_index_rec root, child;
	uint32_t ctokens[BT];
	uint8_t *hdr;  /* slot_hdr_bytes */
	uint8_t *data; /* block_bytes */
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct kvp_extra_keys ek = { .kv_dtype = KVP_DTYPE_F16, .salt_len = 2, .salt = "xy" };

	if (!f)
		return -1;
	memcpy(ek.model_fp, fp, 16);
	if (kvp_tier_layout_init(&f->lay, &shape, fp, 1 << 20) < 0 ||
	    kvp_prefix_key_init(&f->key, &ek) < 0)
		return -1;
	for (int i = 0; i < BT; i++) {
		f->tokens[i] = 1000 + i;
		f->ctokens[i] = 2000 + 3 * i;
	}
	f->root = (struct kvp_index_rec){
		.phash = f->key.seed, .uid = 7, .puid = 0, .key = f->key, .tokens = f->tokens
	};
	f->root.hash = kvp_chain_hash(f->root.phash, f->tokens, BT);
	f->child = (struct kvp_index_rec){
		.phash = f->root.hash, .uid = 9, .puid = 7, .key = f->key, .tokens = f->ctokens
	};
	f->child.hash = kvp_chain_hash(f->child.phash, f->ctokens, BT);
	f->hdr = aligned_alloc(4096, f->lay.slot_hdr_bytes);
	f->data = malloc(f->lay.block_bytes);
	if (!f->hdr || !f->data)
		return -1;
	for (size_t i = 0; i < f->lay.block_bytes; i++)
		f->data[i] = (uint8_t)(i * 131 + 7);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	free(f->hdr);
	free(f->data);
	free(f);
	return 0;
}

static void test_layout(void **state)
{
	/* slots are 4 KiB multiples: header region (header + tokens) then the K/V */
	struct fixture *f = *state;
	struct kvp_tier_layout lay;
	struct kvp_model_shape big = shape;
	struct kvp_geom g;

	assert_int_equal(kvp_geom_init(&g, &shape), 0);
	assert_int_equal(f->lay.block_bytes, g.block_bytes);
	assert_int_equal(f->lay.slot_hdr_bytes, 4096);
	assert_int_equal(f->lay.slot_bytes, 4096 + g.block_stride);
	assert_int_equal(f->lay.data_offset, KVP_TIER_FILE_REGION);
	assert_int_equal(f->lay.n_slots, ((1 << 20) - 4096) / f->lay.slot_bytes);
	assert_int_equal(f->lay.file_bytes, 4096 + f->lay.n_slots * f->lay.slot_bytes);
	assert_int_equal(kvp_tier_slot_offset(&f->lay, 3), 4096 + 3 * f->lay.slot_bytes);
	/* 1024 tokens of 4 bytes after the 256-byte header: two pages of header region */
	big.block_tokens = 1024;
	assert_int_equal(kvp_tier_layout_init(&lay, &big, fp, 1ull << 32), 0);
	assert_int_equal(lay.slot_hdr_bytes, 8192);
	big.block_tokens = 1025;
	assert_int_equal(kvp_tier_layout_init(&lay, &big, fp, 1ull << 32), -EINVAL);
	/* smaller than one slot */
	assert_int_equal(kvp_tier_layout_init(&lay, &shape, fp, 4096 + f->lay.slot_bytes - 1),
			 -EINVAL);
	big = shape;
	big.dtype = 99;
	assert_int_equal(kvp_tier_layout_init(&lay, &big, fp, 1 << 20), -EINVAL);
}

static void test_file_header(void **state)
{
	/* round trip; all zero = new; foreign magic = not ours; any changed byte refused */
	struct fixture *f = *state;
	uint8_t *buf = aligned_alloc(4096, KVP_TIER_FILE_REGION);
	struct kvp_tier_file_hdr h;
	struct kvp_tier_layout other;
	struct kvp_model_shape s2 = shape;

	assert_non_null(buf);
	kvp_tier_file_encode(buf, &f->lay, 0x1122334455667788ull, 0xabcdefull);
	assert_int_equal(kvp_tier_file_parse(buf, KVP_TIER_FILE_REGION, &h), 0);
	assert_int_equal(h.tier_id, 0x1122334455667788ull);
	assert_int_equal(h.hash_seed, 0xabcdef);
	assert_int_equal(h.n_slots, f->lay.n_slots);
	assert_int_equal(h.kv_dtype, KVP_DTYPE_F16);
	assert_true(kvp_tier_file_compatible(&h, &f->lay));
	/* another fingerprint or shape is not compatible; another size is */
	assert_int_equal(kvp_tier_layout_init(&other, &shape, (const uint8_t *)"other-model-fp!!",
					      1 << 20),
			 0);
	assert_false(kvp_tier_file_compatible(&h, &other));
	s2.block_tokens = 32;
	assert_int_equal(kvp_tier_layout_init(&other, &s2, fp, 1 << 20), 0);
	assert_false(kvp_tier_file_compatible(&h, &other));
	assert_int_equal(kvp_tier_layout_init(&other, &shape, fp, 1 << 22), 0);
	assert_true(kvp_tier_file_compatible(&h, &other));

	for (size_t i = 0; i < KVP_TIER_FILE_REGION; i++) {
		int r;

		buf[i] ^= 0x5a;
		r = kvp_tier_file_parse(buf, KVP_TIER_FILE_REGION, &h);
		if (r == 0)
			fail_msg("byte %zu changed, header still accepted", i);
		buf[i] ^= 0x5a;
	}
	assert_int_equal(kvp_tier_file_parse(buf, KVP_TIER_FILE_REGION - 1, &h), -EBADMSG);
	memset(buf, 0, KVP_TIER_FILE_REGION);
	assert_int_equal(kvp_tier_file_parse(buf, KVP_TIER_FILE_REGION, &h), -ENODATA);
	memcpy(buf, "#!/bin/sh\necho hello\n", 21);
	assert_int_equal(kvp_tier_file_parse(buf, KVP_TIER_FILE_REGION, &h), -EMEDIUMTYPE);
	free(buf);
}

static void test_block_round_trip(void **state)
{
	/* what is encoded parses back field for field, and the K/V checks */
	struct fixture *f = *state;
	struct kvp_tier_blk_info info;
	uint32_t tok[BT];

	kvp_tier_blk_encode(f->hdr, &f->lay, 42, 5, 77, &f->child, f->data);
	assert_int_equal(kvp_tier_blk_parse(f->hdr, f->lay.slot_hdr_bytes, &f->lay, 42, 5, tok,
					    &info),
			 0);
	assert_int_equal(info.tier_id, 42);
	assert_int_equal(info.slot, 5);
	assert_int_equal(info.generation, 77);
	assert_int_equal(info.rec.uid, 9);
	assert_int_equal(info.rec.puid, 7);
	assert_memory_equal(&info.rec.hash, &f->child.hash, 16);
	assert_memory_equal(&info.rec.phash, &f->root.hash, 16);
	assert_memory_equal(&info.rec.key, &f->key, sizeof(f->key));
	assert_ptr_equal(info.rec.tokens, tok);
	assert_memory_equal(tok, f->ctokens, sizeof(tok));
	assert_int_equal(kvp_tier_blk_verify(f->hdr, &f->lay, &info, f->data), 0);
	/* a first block */
	kvp_tier_blk_encode(f->hdr, &f->lay, 42, 0, 1, &f->root, f->data);
	assert_int_equal(kvp_tier_blk_parse(f->hdr, f->lay.slot_hdr_bytes, &f->lay, 42, 0, tok,
					    &info),
			 0);
	assert_int_equal(info.rec.puid, 0);
	/* an empty slot, a short buffer */
	memset(f->hdr, 0, f->lay.slot_hdr_bytes);
	assert_int_equal(kvp_tier_blk_parse(f->hdr, f->lay.slot_hdr_bytes, &f->lay, 42, 0, tok,
					    &info),
			 -ENODATA);
	assert_int_equal(kvp_tier_blk_parse(f->hdr, f->lay.slot_hdr_bytes - 1, &f->lay, 42, 0, tok,
					    &info),
			 -EBADMSG);
}

static void test_every_header_byte_checked(void **state)
{
	/* any one changed byte of the header region (fields, tokens, padding) is refused */
	struct fixture *f = *state;
	struct kvp_tier_blk_info info;
	uint32_t tok[BT];

	kvp_tier_blk_encode(f->hdr, &f->lay, 42, 5, 77, &f->child, f->data);
	for (size_t i = 0; i < f->lay.slot_hdr_bytes; i++) {
		for (int bit = 0; bit < 8; bit += 3) {
			int r;

			f->hdr[i] ^= (uint8_t)(1u << bit);
			r = kvp_tier_blk_parse(f->hdr, f->lay.slot_hdr_bytes, &f->lay, 42, 5, tok,
					       &info);
			if (r == 0 && kvp_tier_blk_verify(f->hdr, &f->lay, &info, f->data) == 0)
				fail_msg("byte %zu bit %d changed, block still accepted", i, bit);
			if (r == 0)
				fail_msg("byte %zu bit %d changed, header accepted", i, bit);
			f->hdr[i] ^= (uint8_t)(1u << bit);
		}
	}
	assert_int_equal(kvp_tier_blk_parse(f->hdr, f->lay.slot_hdr_bytes, &f->lay, 42, 5, tok,
					    &info),
			 0);
}

static void test_data_checked(void **state)
{
	/* a changed byte anywhere in the K/V fails the sum */
	struct fixture *f = *state;
	struct kvp_tier_blk_info info;
	uint32_t tok[BT];

	kvp_tier_blk_encode(f->hdr, &f->lay, 42, 5, 77, &f->child, f->data);
	assert_int_equal(kvp_tier_blk_parse(f->hdr, f->lay.slot_hdr_bytes, &f->lay, 42, 5, tok,
					    &info),
			 0);
	for (size_t i = 0; i < f->lay.block_bytes; i += 97) {
		f->data[i] ^= 0x10;
		assert_int_equal(kvp_tier_blk_verify(f->hdr, &f->lay, &info, f->data), -EBADMSG);
		f->data[i] ^= 0x10;
	}
	f->data[f->lay.block_bytes - 1] ^= 1;
	assert_int_equal(kvp_tier_blk_verify(f->hdr, &f->lay, &info, f->data), -EBADMSG);
	f->data[f->lay.block_bytes - 1] ^= 1;
	assert_int_equal(kvp_tier_blk_verify(f->hdr, &f->lay, &info, f->data), 0);
}

static void test_foreign_and_misdirected(void **state)
{
	/* other tier id, model or geometry: foreign (reusable); other slot: corrupt */
	struct fixture *f = *state;
	struct kvp_tier_blk_info info;
	struct kvp_tier_layout lay2;
	struct kvp_model_shape s2 = shape;
	uint32_t tok[BT];

	kvp_tier_blk_encode(f->hdr, &f->lay, 42, 5, 77, &f->child, f->data);
	assert_int_equal(kvp_tier_blk_parse(f->hdr, f->lay.slot_hdr_bytes, &f->lay, 43, 5, tok,
					    &info),
			 -EXDEV);
	assert_int_equal(kvp_tier_blk_parse(f->hdr, f->lay.slot_hdr_bytes, &f->lay, 42, 6, tok,
					    &info),
			 -EBADMSG);
	assert_int_equal(kvp_tier_layout_init(&lay2, &shape, (const uint8_t *)"other-model-fp!!",
					      1 << 20),
			 0);
	assert_int_equal(kvp_tier_blk_parse(f->hdr, f->lay.slot_hdr_bytes, &lay2, 42, 5, tok,
					    &info),
			 -EXDEV);
	s2.head_dim = 32; /* same tokens, other block size */
	assert_int_equal(kvp_tier_layout_init(&lay2, &s2, fp, 1 << 20), 0);
	assert_int_equal(kvp_tier_blk_parse(f->hdr, f->lay.slot_hdr_bytes, &lay2, 42, 5, tok,
					    &info),
			 -EXDEV);
	s2 = shape;
	s2.block_tokens = 8; /* fewer tokens per block */
	assert_int_equal(kvp_tier_layout_init(&lay2, &s2, fp, 1 << 20), 0);
	assert_int_equal(kvp_tier_blk_parse(f->hdr, f->lay.slot_hdr_bytes, &lay2, 42, 5, tok,
					    &info),
			 -EXDEV);
}

/* Encode @rec (sums right) and expect the parser to refuse it. */
static void expect_refused(struct fixture *f, const struct kvp_index_rec *rec, uint64_t gen)
{
	struct kvp_tier_blk_info info;
	uint32_t tok[BT];

	kvp_tier_blk_encode(f->hdr, &f->lay, 42, 5, gen, rec, f->data);
	assert_int_equal(kvp_tier_blk_parse(f->hdr, f->lay.slot_hdr_bytes, &f->lay, 42, 5, tok,
					    &info),
			 -EBADMSG);
}

static void test_lying_fields_refused(void **state)
{
	/* sums right, fields inconsistent: chain hash, first-block parent, keys, uids, gen */
	struct fixture *f = *state;
	struct kvp_index_rec r;

	r = f->child;
	r.hash.hi ^= 1; /* not XXH3_128(phash || tokens) */
	expect_refused(f, &r, 1);
	r = f->root;
	r.phash.lo ^= 1; /* a first block's parent hash must be the digest */
	r.hash = kvp_chain_hash(r.phash, r.tokens, BT);
	expect_refused(f, &r, 1);
	r = f->child;
	r.key.seed.lo ^= 1; /* digest of other keys */
	expect_refused(f, &r, 1);
	r = f->child;
	r.key.ek.salt[40] = 'q'; /* salt bytes past salt_len: not canonical */
	expect_refused(f, &r, 1);
	r = f->child;
	r.key.ek.salt_len = KVP_SALT_MAX + 1;
	expect_refused(f, &r, 1);
	r = f->child;
	r.puid = r.uid; /* a parent is always older */
	expect_refused(f, &r, 1);
	r = f->child;
	r.uid = 0;
	r.puid = 0;
	expect_refused(f, &r, 1);
	expect_refused(f, &f->child, 0); /* generation 0 is never written */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_layout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_header, setup, teardown),
		cmocka_unit_test_setup_teardown(test_block_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_every_header_byte_checked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_data_checked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_foreign_and_misdirected, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lying_fields_refused, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
