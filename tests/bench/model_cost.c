/* SPDX-License-Identifier: MIT */
/* model_cost.c - the roofline numerators of model_cost.h from a model's shape. */
#include "tests/bench/model_cost.h"

double kvp_bench_prefill_ops(const struct kvp_model *m, uint32_t chunk)
{
	const struct kvp_model_hparams *hp = kvp_model_hparams(m);
	double out_params = (double)hp->n_vocab * hp->n_embd;
	/* the embedding table is a gather, not a matrix product; tied, it is the output */
	double mat_params = (double)kvp_model_info(m)->n_params -
			    out_params * (hp->tied_output ? 1 : 2);

	return 2.0 * mat_params + 2.0 * out_params / chunk +
	       4.0 * hp->n_layers * hp->n_heads * hp->head_dim * (chunk + 1) / 2.0;
}

double kvp_bench_decode_bytes(const struct kvp_model *m, size_t kv_token_bytes, uint32_t depth,
			      uint32_t steps)
{
	/* the step at position p reads p + 1 positions of K/V: p = depth .. depth + steps - 1 */
	return (double)kvp_model_info(m)->weight_bytes +
	       (double)kv_token_bytes * (depth + (steps + 1) / 2.0);
}
