/* SPDX-License-Identifier: MIT */
/*
 * model_cost.h - what one token costs a model: the operations of a prefill chunk and
 * the bytes of a decode step, the numerators of the compute and bandwidth rooflines.
 */
#ifndef KVP_TESTS_BENCH_MODEL_COST_H
#define KVP_TESTS_BENCH_MODEL_COST_H

#include <stddef.h>
#include <stdint.h>

#include "compute/model.h"

/*
 * kvp_bench_prefill_ops() - operations per token (2 per multiply-add) of a @chunk-token
 * prefill from position 0: every matrix but the output for each token, the output
 * matrix once (only the last position's logits are computed), and attention (QK and
 * PV over (@chunk + 1) / 2 keys on average).
 */
double kvp_bench_prefill_ops(const struct kvp_model *m, uint32_t chunk);

/*
 * kvp_bench_decode_bytes() - mean bytes one batch-1 decode step reads over @steps steps
 * after @depth positions: the weights once (kvp_model_info()->weight_bytes) and the
 * K/V of every position so far, @kv_token_bytes each.
 */
double kvp_bench_decode_bytes(const struct kvp_model *m, size_t kv_token_bytes, uint32_t depth,
			      uint32_t steps);

#endif /* KVP_TESTS_BENCH_MODEL_COST_H */
