/* SPDX-License-Identifier: MIT */
/*
 * fuzz_remote.c - the remote tier's value codec (shm/remote/codec.h): a value read from
 * the shared store, which another host (or anyone who can write the store) wrote, checked
 * against what the reader expects of block 0 or block 1 of the fixture's chain.  An
 * accepted value is re-encoded: it must be the same bytes (one record, one encoding).
 */
#include <string.h>

#include "shm/remote/codec.h"

#include "blkfix.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct blkfix f;
	static struct kvp_remote_codec c;
	static uint8_t *kv, *again;

	if (!kv) {
		blkfix_init(&f);
		if (kvp_remote_codec_init(&c, &f.shape, f.fp, "avx2"))
			abort();
		kv = malloc(c.lay.block_bytes);
		again = malloc(c.value_bytes);
		if (!kv || !again)
			abort();
	}
	for (int b = 0; b < 2; b++) {
		struct kvp_remote_expect e = {
			.digest = kvp_remote_digest(&c, f.rec[b].hash, f.key.seed),
			.hash = f.rec[b].hash,
			.phash = f.rec[b].phash,
			.key = &f.key,
			.tokens = f.tokens[b],
			.first = b == 0,
		};

		if (kvp_remote_value_check(data, size, &c, &e, kv))
			continue;
		kvp_remote_value_encode(again, &c, e.digest, &f.rec[b], kv);
		if (size != c.value_bytes || memcmp(again, data, size))
			__builtin_trap(); /* an accepted value is the encoding of what it holds */
	}
	return 0;
}
