/* SPDX-License-Identifier: MIT */
/*
 * blkfix.h - the block every tier and remote fuzz input is read against, and that
 * mkseeds.c encodes into their seeds: a fixed shape, model fingerprint, extra keys and
 * two chained records (block 0 and the block after it).
 */
#ifndef KVP_TESTS_FUZZ_BLKFIX_H
#define KVP_TESTS_FUZZ_BLKFIX_H

#include <stdlib.h>
#include <string.h>

#include "shm/geom.h"
#include "shm/index.h"
#include "shm/tier_fmt.h"

#define BLKFIX_BT 16

struct blkfix {
	struct kvp_model_shape shape;
	uint8_t fp[16];
	struct kvp_tier_layout lay;
	struct kvp_prefix_key key;
	uint32_t tokens[2][BLKFIX_BT];
	struct kvp_index_rec rec[2];
};

/* Fill @f; aborts if the fixed shape is refused (a defect of the fixture). */
static inline void blkfix_init(struct blkfix *f)
{
	struct kvp_extra_keys ek = { .kv_dtype = KVP_DTYPE_F16, .salt_len = 2, .salt = "xy" };

	*f = (struct blkfix){
		.shape = { .n_layers = 2,
			   .n_kv_heads = 2,
			   .head_dim = 24,
			   .dtype = KVP_DTYPE_F16,
			   .block_tokens = BLKFIX_BT },
		.fp = "fuzz-test-model",
	};
	memcpy(ek.model_fp, f->fp, 16);
	if (kvp_tier_layout_init(&f->lay, &f->shape, f->fp, 1 << 20) < 0 ||
	    kvp_prefix_key_init(&f->key, &ek) < 0)
		abort();
	for (int i = 0; i < BLKFIX_BT; i++) {
		f->tokens[0][i] = 1000 + i;
		f->tokens[1][i] = 2000 + 3 * i;
	}
	f->rec[0] = (struct kvp_index_rec){
		.phash = f->key.seed, .uid = 7, .puid = 0, .key = f->key, .tokens = f->tokens[0]
	};
	f->rec[0].hash = kvp_chain_hash(f->rec[0].phash, f->tokens[0], BLKFIX_BT);
	f->rec[1] = (struct kvp_index_rec){
		.phash = f->rec[0].hash, .uid = 9, .puid = 7, .key = f->key, .tokens = f->tokens[1]
	};
	f->rec[1].hash = kvp_chain_hash(f->rec[1].phash, f->tokens[1], BLKFIX_BT);
}

#endif /* KVP_TESTS_FUZZ_BLKFIX_H */
