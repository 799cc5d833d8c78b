/* SPDX-License-Identifier: MIT */
/*
 * test_remote_codec.c - the remote tier's keys and values, in memory: the key digest is
 * stable (a known answer) and changes with each of its inputs; key names are
 * well-formed and refuse names that would break a prefix; values round-trip and every
 * way a value can be wrong is refused: its length, any byte of its header region, its
 * K/V, a value under another key, and records whose sums are right but whose fields do
 * not match what the reader expects (tokens, parent, extra keys, first block, model).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "shm/remote/codec.h"

#define BT 16

/*
 * the key of chain hash {1, 2} under extra-keys digest {3, 4}, fixture codec; block
 * record version 2 (KVP_TIER_VERSION: the int8 layout's revision 2), so no record of
 * version 1 is ever fetched under it
 */
#define KNOWN_DIGEST_HEX "ed982fca0214953c30520d44961726f7"

static const struct kvp_model_shape shape = {
	.n_layers = 2,
	.n_kv_heads = 2,
	.head_dim = 24,
	.dtype = KVP_DTYPE_F16,
	.block_tokens = BT,
};
static const uint8_t fp[16] = "remote-test-mdl";

struct fixture {
	struct kvp_remote_codec c;
	struct kvp_prefix_key key;
	uint32_t tokens[BT], ctokens[BT];
	struct kvp_index_rec root, child;
	uint8_t *kv, *ckv, *out;
	uint8_t *val, *cval;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct kvp_extra_keys ek = { .kv_dtype = KVP_DTYPE_F16, .salt_len = 3, .salt = "abc" };

	if (!f)
		return -1;
	memcpy(ek.model_fp, fp, 16);
	if (kvp_remote_codec_init(&f->c, &shape, fp, "avx2") < 0 ||
	    kvp_prefix_key_init(&f->key, &ek) < 0)
		return -1;
	for (int i = 0; i < BT; i++) {
		f->tokens[i] = 100 + i;
		f->ctokens[i] = 5000 + 7 * i;
	}
	f->root = (struct kvp_index_rec){ .phash = f->key.seed,
					  .key = f->key,
					  .tokens = f->tokens };
	f->root.hash = kvp_chain_hash(f->root.phash, f->tokens, BT);
	f->child = (struct kvp_index_rec){ .phash = f->root.hash,
					   .key = f->key,
					   .tokens = f->ctokens };
	f->child.hash = kvp_chain_hash(f->child.phash, f->ctokens, BT);
	f->kv = malloc(f->c.lay.block_bytes);
	f->ckv = malloc(f->c.lay.block_bytes);
	f->out = malloc(f->c.lay.block_bytes);
	f->val = malloc(f->c.value_bytes + 16);
	f->cval = malloc(f->c.value_bytes + 16);
	if (!f->kv || !f->ckv || !f->out || !f->val || !f->cval)
		return -1;
	for (size_t i = 0; i < f->c.lay.block_bytes; i++) {
		f->kv[i] = (uint8_t)(i * 131 + 7);
		f->ckv[i] = (uint8_t)(i * 17 + 3);
	}
	kvp_remote_value_encode(f->val, &f->c, kvp_remote_digest(&f->c, f->root.hash, f->key.seed),
				&f->root, f->kv);
	kvp_remote_value_encode(f->cval, &f->c,
				kvp_remote_digest(&f->c, f->child.hash, f->key.seed), &f->child,
				f->ckv);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	free(f->kv);
	free(f->ckv);
	free(f->out);
	free(f->val);
	free(f->cval);
	free(f);
	return 0;
}

static struct kvp_remote_expect expect_root(const struct fixture *f)
{
	return (struct kvp_remote_expect){
		.digest = kvp_remote_digest(&f->c, f->root.hash, f->key.seed),
		.hash = f->root.hash,
		.phash = f->key.seed,
		.key = &f->key,
		.tokens = f->tokens,
		.first = true,
	};
}

static struct kvp_remote_expect expect_child(const struct fixture *f)
{
	return (struct kvp_remote_expect){
		.digest = kvp_remote_digest(&f->c, f->child.hash, f->key.seed),
		.hash = f->child.hash,
		.phash = f->root.hash,
		.key = &f->key,
		.tokens = f->ctokens,
		.first = false,
	};
}

static int h_eq(struct kvp_h128 a, struct kvp_h128 b)
{
	return a.lo == b.lo && a.hi == b.hi;
}

/* The digest is a pure function of its inputs (a known answer pins it across hosts and
 * versions: changing it needs a new schema prefix) and changes with each input. */
static void test_digest(void **state)
{
	struct fixture *f = *state;
	struct kvp_remote_codec o;
	struct kvp_model_shape s2 = shape;
	uint8_t fp2[16];
	struct kvp_h128 base = kvp_remote_digest(&f->c, f->root.hash, f->key.seed);
	struct kvp_h128 v[8];
	char key[KVP_REMOTE_KEY_MAX];
	int n = 0;

	assert_true(h_eq(base, kvp_remote_digest(&f->c, f->root.hash, f->key.seed)));
	/* a known answer: fixed chain hash and extra-keys digest */
	assert_int_equal(kvp_remote_block_key(key, sizeof(key), "dom",
					      kvp_remote_digest(&f->c, (struct kvp_h128){ 1, 2 },
								(struct kvp_h128){ 3, 4 })),
			 11 + 32);
	assert_string_equal(key, "kvp1:dom:b:" KNOWN_DIGEST_HEX);

	v[n++] = kvp_remote_digest(&f->c, f->child.hash, f->key.seed); /* chain hash */
	v[n++] = kvp_remote_digest(&f->c, f->root.hash, f->root.hash); /* extra keys */
	assert_int_equal(kvp_remote_codec_init(&o, &shape, fp, "avx512"), 0);
	v[n++] = kvp_remote_digest(&o, f->root.hash, f->key.seed); /* numerics class */
	memcpy(fp2, fp, 16);
	fp2[15] ^= 1;
	assert_int_equal(kvp_remote_codec_init(&o, &shape, fp2, "avx2"), 0);
	v[n++] = kvp_remote_digest(&o, f->root.hash, f->key.seed); /* model */
	s2.block_tokens = 32;
	assert_int_equal(kvp_remote_codec_init(&o, &s2, fp, "avx2"), 0);
	v[n++] = kvp_remote_digest(&o, f->root.hash, f->key.seed); /* geometry */
	s2 = shape;
	s2.dtype = KVP_DTYPE_BF16;
	assert_int_equal(kvp_remote_codec_init(&o, &s2, fp, "avx2"), 0);
	v[n++] = kvp_remote_digest(&o, f->root.hash, f->key.seed); /* dtype */
	for (int i = 0; i < n; i++) {
		assert_false(h_eq(v[i], base));
		for (int j = i + 1; j < n; j++)
			assert_false(h_eq(v[i], v[j]));
	}
	/* a numerics class must be a plain name */
	assert_int_equal(kvp_remote_codec_init(&o, &shape, fp, "avx 2"), -EINVAL);
	assert_int_equal(kvp_remote_codec_init(&o, &shape, fp, ""), -EINVAL);
	assert_int_equal(kvp_remote_codec_init(&o, &shape, fp, "a:b"), -EINVAL);
}

/* Keys: "kvp1:DOMAIN:b:HEX" and "kvp1:DOMAIN:r:HOST"; names that could widen an ACL
 * pattern (glob characters, ':'), add a hash tag ('{') or overflow are refused. */
static void test_keys(void **state)
{
	static const char *const bad[] = {
		"",    "a:b", "a*",  "a?", "[a]",
		"{a}", "a b", "a\\", "é",  "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	};
	char key[KVP_REMOTE_KEY_MAX + KVP_REMOTE_HOST_ID_MAX];
	struct kvp_h128 d = { 0x0123456789abcdefull, 0xfedcba9876543210ull };

	(void)state;
	assert_int_equal(kvp_remote_block_key(key, sizeof(key), "tenant-1", d), 48);
	assert_string_equal(key, "kvp1:tenant-1:b:fedcba98765432100123456789abcdef");
	assert_int_equal(kvp_remote_block_key(key, 20, "tenant-1", d), -EINVAL);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(kvp_remote_block_key(key, sizeof(key), bad[i], d), -EINVAL);
	assert_true(kvp_remote_route_key(key, sizeof(key), "a", "host-1.example") > 0);
	assert_string_equal(key, "kvp1:a:r:host-1.example");
	assert_int_equal(kvp_remote_route_key(key, sizeof(key), "a", "h:1"), -EINVAL);
	assert_int_equal(kvp_remote_route_key(key, sizeof(key), "a", "h*"), -EINVAL);
	assert_int_equal(kvp_remote_route_key(key, sizeof(key), "a", ""), -EINVAL);
}

/* A value is the disk tier's record: header region then K/V; it checks and copies the
 * K/V out bit-exact, as first block and as child. */
static void test_round_trip(void **state)
{
	struct fixture *f = *state;
	struct kvp_remote_expect e = expect_root(f);

	assert_int_equal(f->c.value_bytes, f->c.lay.slot_hdr_bytes + f->c.lay.block_bytes);
	assert_int_equal(kvp_remote_value_check(f->val, f->c.value_bytes, &f->c, &e, f->out), 0);
	assert_memory_equal(f->out, f->kv, f->c.lay.block_bytes);
	assert_memory_equal(f->val + f->c.lay.slot_hdr_bytes, f->kv, f->c.lay.block_bytes);
	e = expect_child(f);
	assert_int_equal(kvp_remote_value_check(f->cval, f->c.value_bytes, &f->c, &e, f->out), 0);
	assert_memory_equal(f->out, f->ckv, f->c.lay.block_bytes);
}

/* Truncated, extended or empty values are refused. */
static void test_length(void **state)
{
	struct fixture *f = *state;
	struct kvp_remote_expect e = expect_root(f);
	size_t lens[] = { 0, 1, f->c.lay.slot_hdr_bytes, f->c.value_bytes - 1,
			  f->c.value_bytes + 1 };

	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++)
		assert_int_equal(kvp_remote_value_check(f->val, lens[i], &f->c, &e, f->out),
				 -EBADMSG);
}

/* Any single byte changed in the header region (header, tokens, padding) is refused,
 * and so is any changed K/V byte we try. */
static void test_every_byte(void **state)
{
	struct fixture *f = *state;
	struct kvp_remote_expect e = expect_root(f);
	size_t kvo = f->c.lay.slot_hdr_bytes, kvn = f->c.lay.block_bytes;
	size_t kv_at[] = { 0, 1, kvn / 2, kvn - 1 };

	for (size_t i = 0; i < f->c.lay.slot_hdr_bytes; i++) {
		f->val[i] ^= 0x20;
		assert_true(kvp_remote_value_check(f->val, f->c.value_bytes, &f->c, &e, f->out) <
			    0);
		f->val[i] ^= 0x20;
	}
	for (size_t i = 0; i < sizeof(kv_at) / sizeof(kv_at[0]); i++) {
		f->val[kvo + kv_at[i]] ^= 1;
		assert_int_equal(kvp_remote_value_check(f->val, f->c.value_bytes, &f->c, &e,
							f->out),
				 -EBADMSG);
		f->val[kvo + kv_at[i]] ^= 1;
	}
	assert_int_equal(kvp_remote_value_check(f->val, f->c.value_bytes, &f->c, &e, f->out), 0);
}

/* A sound value stored under another block's key, or read by a host with another
 * numerics class, is refused: the record is bound to its key's digest. */
static void test_misdirected(void **state)
{
	struct fixture *f = *state;
	struct kvp_remote_expect e = expect_child(f);
	struct kvp_remote_codec o;

	e.tokens = f->tokens; /* even with the root's own tokens and hashes */
	e.hash = f->root.hash;
	e.phash = f->key.seed;
	e.first = true;
	assert_true(kvp_remote_value_check(f->val, f->c.value_bytes, &f->c, &e, f->out) < 0);
	assert_int_equal(kvp_remote_codec_init(&o, &shape, fp, "scalar"), 0);
	e = expect_root(f);
	e.digest = kvp_remote_digest(&o, f->root.hash, f->key.seed);
	assert_true(kvp_remote_value_check(f->val, f->c.value_bytes, &o, &e, f->out) < 0);
}

/* A sound value read by someone expecting something else: other tokens, parent, chain
 * hash, extra keys, or first-or-not. */
static void test_expectations(void **state)
{
	struct fixture *f = *state;
	struct kvp_extra_keys ek = f->key.ek;
	struct kvp_prefix_key other;
	uint32_t tok[BT];
	struct kvp_remote_expect e;

	memcpy(tok, f->tokens, sizeof(tok));
	tok[BT - 1]++;
	e = expect_root(f);
	e.tokens = tok;
	assert_int_equal(kvp_remote_value_check(f->val, f->c.value_bytes, &f->c, &e, f->out),
			 -EBADMSG);
	e = expect_child(f);
	e.phash = f->child.hash;
	assert_int_equal(kvp_remote_value_check(f->cval, f->c.value_bytes, &f->c, &e, f->out),
			 -EBADMSG);
	e = expect_child(f);
	e.hash = f->root.hash;
	assert_int_equal(kvp_remote_value_check(f->cval, f->c.value_bytes, &f->c, &e, f->out),
			 -EBADMSG);
	ek.salt[0] ^= 1;
	assert_int_equal(kvp_prefix_key_init(&other, &ek), 0);
	e = expect_root(f);
	e.key = &other;
	assert_int_equal(kvp_remote_value_check(f->val, f->c.value_bytes, &f->c, &e, f->out),
			 -EBADMSG);
	e = expect_root(f);
	e.first = false;
	assert_int_equal(kvp_remote_value_check(f->val, f->c.value_bytes, &f->c, &e, f->out),
			 -EBADMSG);
	e = expect_child(f);
	e.first = true;
	assert_int_equal(kvp_remote_value_check(f->cval, f->c.value_bytes, &f->c, &e, f->out),
			 -EBADMSG);
}

/* Forged records: right sums, stored under the right key, but other tokens (with a
 * consistent chain hash), other extra keys, or another model: all refused. */
static void test_forged(void **state)
{
	struct fixture *f = *state;
	struct kvp_remote_expect e = expect_root(f);
	struct kvp_extra_keys ek = f->key.ek;
	struct kvp_index_rec rec = f->root;
	struct kvp_remote_codec o;
	struct kvp_prefix_key other;
	uint8_t fp2[16];
	uint32_t tok[BT];

	memcpy(tok, f->tokens, sizeof(tok));
	tok[0] = 99999;
	rec.tokens = tok;
	rec.hash = kvp_chain_hash(rec.phash, tok, BT);
	kvp_remote_value_encode(f->val, &f->c, e.digest, &rec, f->kv);
	assert_int_equal(kvp_remote_value_check(f->val, f->c.value_bytes, &f->c, &e, f->out),
			 -EBADMSG);

	ek.salt_len = 0;
	memset(ek.salt, 0, sizeof(ek.salt));
	assert_int_equal(kvp_prefix_key_init(&other, &ek), 0);
	rec = (struct kvp_index_rec){ .phash = other.seed, .key = other, .tokens = f->tokens };
	rec.hash = kvp_chain_hash(rec.phash, f->tokens, BT);
	kvp_remote_value_encode(f->val, &f->c, e.digest, &rec, f->kv);
	assert_int_equal(kvp_remote_value_check(f->val, f->c.value_bytes, &f->c, &e, f->out),
			 -EBADMSG);

	/* another model's record (its extra keys name its fingerprint): foreign */
	memcpy(fp2, fp, 16);
	fp2[0] ^= 1;
	ek = f->key.ek;
	memcpy(ek.model_fp, fp2, 16);
	assert_int_equal(kvp_prefix_key_init(&other, &ek), 0);
	assert_int_equal(kvp_remote_codec_init(&o, &shape, fp2, "avx2"), 0);
	rec = (struct kvp_index_rec){ .phash = other.seed, .key = other, .tokens = f->tokens };
	rec.hash = kvp_chain_hash(rec.phash, f->tokens, BT);
	kvp_remote_value_encode(f->val, &o, e.digest, &rec, f->kv);
	assert_int_equal(kvp_remote_value_check(f->val, f->c.value_bytes, &f->c, &e, f->out),
			 -EXDEV);

	/* and the genuine record still checks */
	kvp_remote_value_encode(f->val, &f->c, e.digest, &f->root, f->kv);
	assert_int_equal(kvp_remote_value_check(f->val, f->c.value_bytes, &f->c, &e, f->out), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_digest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_length, setup, teardown),
		cmocka_unit_test_setup_teardown(test_every_byte, setup, teardown),
		cmocka_unit_test_setup_teardown(test_misdirected, setup, teardown),
		cmocka_unit_test_setup_teardown(test_expectations, setup, teardown),
		cmocka_unit_test_setup_teardown(test_forged, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
