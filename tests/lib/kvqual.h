/* SPDX-License-Identifier: MIT */
/*
 * kvqual.h - how far each K/V type moves a model's logits from f32 K/V: the quality
 * figures test_kvq_quality.c bounds and bench_kvq.c reports (the demo preset).
 *
 * One prompt is prefilled in chunks with f32 K/V, then 64 greedy tokens decoded: the
 * reference.  Each other type prefills the same prompt and decodes the reference's
 * tokens (teacher forcing, so every step compares logits of the same sequence): max and
 * mean |logit - reference| over the last prompt position and the decode steps.  Then it
 * decodes greedily on its own: the tokens equal to the reference's before the first
 * divergence.
 */
#ifndef KVP_TESTS_KVQUAL_H
#define KVP_TESTS_KVQUAL_H

#include <stdint.h>

#include "compute/model.h"

#define KVQUAL_GEN 64

/**
 * struct kvqual - one type's figures
 * @max_abs, @mean_abs: over (1 + KVQUAL_GEN) x n_vocab logits
 * @max_ref:  the reference's largest |logit| (scale of the above)
 * @agree:    greedy tokens equal to the reference's before the first divergence
 */
struct kvqual {
	double max_abs, mean_abs, max_ref;
	uint32_t agree;
};

/*
 * kvqual_measure() - @out[i] for @dtypes[i] (@n of them), against f32, for a prompt of
 * @n_prompt pseudo-random tokens prefilled in chunks of @chunk, blocks of 16 tokens.
 * Fails the running cmocka test on an error.
 */
void kvqual_measure(const struct kvp_model *m, uint32_t n_prompt, uint32_t chunk,
		    const uint32_t *dtypes, uint32_t n, struct kvqual *out);

struct kvp_kernels;

/**
 * struct kvqual_type - one K/V configuration to measure
 * @dtype:   enum kvp_dtype
 * @window:  int4: the residual window, tokens
 * @k:       the kernel table (NULL: the best); a test's own table can swap a quantizer
 */
struct kvqual_type {
	uint32_t dtype;
	uint32_t window;
	const struct kvp_kernels *k;
};

/* kvqual_measure() over @types: windows and kernel tables of their own. */
void kvqual_measure_types(const struct kvp_model *m, uint32_t n_prompt, uint32_t chunk,
			  const struct kvqual_type *types, uint32_t n, struct kvqual *out);

#endif /* KVP_TESTS_KVQUAL_H */
