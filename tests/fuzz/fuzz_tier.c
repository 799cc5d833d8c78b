/* SPDX-License-Identifier: MIT */
/*
 * fuzz_tier.c - the disk tier's records (shm/tier_fmt.h) as read back from a file
 * anyone might have damaged: the input is a file header region, or a slot (header
 * region, then K/V) read at slot 0 or 1 of the fixture's tier.  An accepted block's
 * K/V is verified against its sum; an accepted file header is compared with the
 * tier's layout.
 */
#include <string.h>

#include "blkfix.h"
#include "fuzz.h"

#define TIER_ID 0x1234abcd5678ef01ull

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct blkfix f;
	static uint8_t *kv;
	struct kvp_tier_file_hdr hdr;
	struct kvp_tier_blk_info info;
	uint32_t tokens[BLKFIX_BT];

	if (!kv) {
		blkfix_init(&f);
		kv = calloc(1, f.lay.block_bytes);
		if (!kv)
			abort();
	}
	if (!kvp_tier_file_parse(data, size, &hdr))
		kvp_tier_file_compatible(&hdr, &f.lay);
	for (uint64_t slot = 0; slot < 2 && size >= f.lay.slot_hdr_bytes; slot++) {
		if (kvp_tier_blk_parse(data, size, &f.lay, TIER_ID, slot, tokens, &info))
			continue;
		if (info.rec.tokens != tokens)
			__builtin_trap(); /* the tokens are the parser's copy, not the buffer */
		if (size >= f.lay.slot_hdr_bytes + f.lay.block_bytes)
			kvp_tier_blk_verify(data, &f.lay, &info, data + f.lay.slot_hdr_bytes);
		else
			kvp_tier_blk_verify(data, &f.lay, &info, kv);
	}
	return 0;
}
