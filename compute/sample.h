/* SPDX-License-Identifier: MIT */
/*
 * sample.h - choosing the next token from logits: greedy, temperature, top-k, top-p.
 *
 * A sampler owns its scratch (one index per vocabulary entry) and its PRNG, so a
 * sequence's sampler gives the same tokens for the same seed and logits, whatever
 * else runs.  One sampler per sequence; not shared between threads.
 */
#ifndef KVP_COMPUTE_SAMPLE_H
#define KVP_COMPUTE_SAMPLE_H

#include <stdint.h>

struct kvp_sampler;

/**
 * struct kvp_sample_params - how to pick
 * @temperature: <= 0 picks greedily (argmax, lowest id on ties); else logits / T
 *               (however small T is; NaN logits never win; a +inf logit is taken greedily)
 * @top_k:       keep the k most likely (0 = all)
 * @top_p:       then keep the smallest most-likely set whose mass reaches p
 *               (>= 1 or <= 0 = all)
 * @seed:        PRNG seed
 */
struct kvp_sample_params {
	float temperature;
	uint32_t top_k;
	float top_p;
	uint64_t seed;
};

/**
 * kvp_sampler_new() - sampler over a vocabulary of @n_vocab
 * Return: 0, -EINVAL (n_vocab 0, temperature NaN, top_p NaN), -ENOMEM.
 */
int kvp_sampler_new(struct kvp_sampler **out, uint32_t n_vocab, const struct kvp_sample_params *p);

void kvp_sampler_free(struct kvp_sampler *s);

/**
 * kvp_sampler_sample() - pick a token from @logits (n_vocab floats, not modified)
 * Return: the token id (>= 0).
 */
int32_t kvp_sampler_sample(struct kvp_sampler *s, const float *logits);

/* kvp_sample_greedy() - argmax of @logits[0..n), lowest id on ties, NaN never wins. */
int32_t kvp_sample_greedy(const float *logits, uint32_t n);

#endif /* KVP_COMPUTE_SAMPLE_H */
