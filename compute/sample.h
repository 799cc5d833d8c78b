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

#include <stdbool.h>
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

struct kvp_grammar;
struct kvp_grammar_vocab;

#define KVP_SAMPLE_TOP_LOGPROBS_MAX 20
#define KVP_SAMPLE_BIAS_MAX 300 /* logit_bias entries (OpenAI's limit) */

/**
 * struct kvp_sample_extra - what OpenAI's and Anthropic's APIs add to the pick; applied
 * in this order to a copy of the logits, before the temperature and the top-k/top-p cut:
 * @bias, @bias_ids, @n_bias: added to those tokens' logits (-100 bans, +100 forces)
 * @presence, @frequency:     subtracted from the logit of each token generated so far:
 *                            @presence once, @frequency times its count (OpenAI's rule)
 * @grammar, @vocab:          the text must stay inside @grammar (the sampler takes a
 *                            reference: kvp_grammar_ref(); @vocab is borrowed and must
 *                            outlive the sampler): every other token's logit is -inf, and
 *                            the end-of-generation ids @eog are allowed only where the
 *                            text is one whole value (and are then the only choice once
 *                            nothing may follow)
 * @eog, @n_eog:              end-of-generation ids (copied)
 * @logprobs:                 record the chosen token's log-probability and the
 *                            @top_logprobs most likely (<= KVP_SAMPLE_TOP_LOGPROBS_MAX):
 *                            the log-softmax of the logits after bias, penalties and
 *                            grammar, before temperature (what the model gives the
 *                            token, not the sampler's cut distribution)
 * @think_open, @think_close, @think_budget: a reasoning section's bounds (Qwen3's
 *                            <think> and </think> ids) and its budget (0: none): once
 *                            @think_open has been picked, @think_budget picks later the
 *                            section is closed by returning @think_close, whatever the
 *                            logits say (unless it was picked already); its log-
 *                            probability is the model's, as for any pick
 */
struct kvp_sample_extra {
	const int32_t *bias_ids;
	const float *bias;
	uint32_t n_bias;
	float presence, frequency;
	struct kvp_grammar *grammar;
	const struct kvp_grammar_vocab *vocab;
	const int32_t *eog;
	uint32_t n_eog;
	bool logprobs;
	uint32_t top_logprobs;
	int32_t think_open, think_close;
	uint32_t think_budget;
};

/**
 * kvp_sampler_set_extra() - add @x to a sampler that has not sampled yet
 * Return: 0, -EINVAL (an id >= n_vocab, a bias or penalty not finite, top_logprobs
 * above the max, a grammar over a vocabulary of another size), -ENOMEM.
 */
int kvp_sampler_set_extra(struct kvp_sampler *s, const struct kvp_sample_extra *x);

/**
 * kvp_sampler_new_like() - a fresh sampler with @proto's parameters and extras (its
 * grammar from the start, no penalty counts) and @seed (a continuation of n > 1)
 */
int kvp_sampler_new_like(struct kvp_sampler **out, const struct kvp_sampler *proto, uint64_t seed);

/**
 * struct kvp_sample_logprob - the last pick's log-probabilities (extra.logprobs)
 * @lp:    the chosen token's
 * @n_top: entries in @top_ids / @top_lp, most likely first (lowest id on ties)
 */
struct kvp_sample_logprob {
	float lp;
	uint32_t n_top;
	int32_t top_ids[KVP_SAMPLE_TOP_LOGPROBS_MAX];
	float top_lp[KVP_SAMPLE_TOP_LOGPROBS_MAX];
};

/* kvp_sampler_logprob() - the last pick's, or NULL (no extra.logprobs, nothing picked). */
const struct kvp_sample_logprob *kvp_sampler_logprob(const struct kvp_sampler *s);

/* kvp_sample_greedy() - argmax of @logits[0..n), lowest id on ties, NaN never wins. */
int32_t kvp_sample_greedy(const float *logits, uint32_t n);

#endif /* KVP_COMPUTE_SAMPLE_H */
