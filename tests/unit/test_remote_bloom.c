/* SPDX-License-Identifier: MIT */
/*
 * test_remote_bloom.c - the chain summary: no false negatives, a false-positive rate
 * near what it was sized for, the longest held prefix, an encoding that round-trips and
 * refuses every corrupted byte, a wrong size or a stale summary.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "shm/remote/bloom.h"

static struct kvp_h128 h_of(uint64_t i)
{
	uint32_t t[2] = { (uint32_t)i, (uint32_t)(i >> 32) };

	return kvp_chain_hash((struct kvp_h128){ 77, 78 }, t, 2);
}

/* Everything added tests positive; unseen items test positive at about the rate asked. */
static void test_rates(void **state)
{
	struct kvp_bloom *b;
	uint32_t fpos = 0;

	(void)state;
	assert_int_equal(kvp_bloom_new(&b, 10000, 0.01), 0);
	assert_int_equal(b->n_bits % 64, 0);
	assert_true(b->k >= 5 && b->k <= 8);
	for (uint64_t i = 0; i < 10000; i++)
		kvp_bloom_add(b, h_of(i));
	for (uint64_t i = 0; i < 10000; i++)
		assert_true(kvp_bloom_test(b, h_of(i)));
	for (uint64_t i = 100000; i < 200000; i++)
		fpos += kvp_bloom_test(b, h_of(i));
	/* 1% asked: between 0.3% and 2% measured */
	assert_true(fpos > 300 && fpos < 2000);
	kvp_bloom_clear(b);
	assert_false(kvp_bloom_test(b, h_of(1)));
	kvp_bloom_free(b);
	assert_int_equal(kvp_bloom_new(&b, 0, 0.01), -EINVAL);
	assert_int_equal(kvp_bloom_new(&b, 10, 0.9), -EINVAL);
	assert_int_equal(kvp_bloom_new(&b, 1ull << 40, 0.001), -E2BIG);
}

/* The longest prefix: a chain of 10 added, a prompt sharing its first 6 blocks. */
static void test_prefix(void **state)
{
	struct kvp_h128 chain[10], prompt[10];
	struct kvp_bloom *b;

	(void)state;
	assert_int_equal(kvp_bloom_new(&b, 1000, 0.001), 0);
	for (int i = 0; i < 10; i++) {
		chain[i] = h_of((uint64_t)i);
		prompt[i] = i < 6 ? chain[i] : h_of(1000 + (uint64_t)i);
		kvp_bloom_add(b, chain[i]);
	}
	assert_int_equal(kvp_bloom_prefix(b, chain, 10), 10);
	assert_int_equal(kvp_bloom_prefix(b, prompt, 10), 6);
	assert_int_equal(kvp_bloom_prefix(b, prompt, 0), 0);
	kvp_bloom_free(b);
}

/* Encode, decode: the same answers; every byte changed, a wrong size or a summary past
 * its TTL is refused. */
static void test_encoding(void **state)
{
	struct kvp_bloom *b, *d;
	size_t n;
	uint8_t *buf;

	(void)state;
	assert_int_equal(kvp_bloom_new(&b, 100, 0.01), 0);
	for (uint64_t i = 0; i < 100; i++)
		kvp_bloom_add(b, h_of(i));
	n = kvp_bloom_encoded_bytes(b);
	buf = malloc(n + 1);
	assert_non_null(buf);
	kvp_bloom_encode(b, buf, 1000, 60);
	assert_int_equal(kvp_bloom_decode(&d, buf, n, 1030), 0);
	assert_int_equal(d->k, b->k);
	assert_int_equal(d->n_bits, b->n_bits);
	assert_int_equal(d->n_items, 100);
	assert_int_equal(d->created_s, 1000);
	assert_int_equal(d->ttl_s, 60);
	assert_memory_equal(d->bits, b->bits, b->n_bits / 8);
	kvp_bloom_free(d);
	assert_int_equal(kvp_bloom_decode(&d, buf, n, 1061), -ESTALE);
	assert_int_equal(kvp_bloom_decode(&d, buf, n - 1, 1000), -EBADMSG);
	assert_int_equal(kvp_bloom_decode(&d, buf, n + 1, 1000), -EBADMSG);
	assert_int_equal(kvp_bloom_decode(&d, buf, 10, 1000), -EBADMSG);
	for (size_t i = 0; i < n; i++) {
		buf[i] ^= 0x10;
		assert_true(kvp_bloom_decode(&d, buf, n, 1000) < 0);
		buf[i] ^= 0x10;
	}
	free(buf);
	kvp_bloom_free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rates),
		cmocka_unit_test(test_prefix),
		cmocka_unit_test(test_encoding),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
