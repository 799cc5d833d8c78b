/* SPDX-License-Identifier: MIT */
/*
 * draft.h - drafts for speculative decoding from the sequence's own tokens (prompt
 * lookup): when the last n tokens (n from ngram_max down to ngram_min) occurred before in
 * the prompt or the output, the tokens that followed them there are proposed as the
 * next ones.  The caller runs the last kept token and the drafts as rows of one forward
 * step, keeps the drafts the model's own picks agree with (plus the model's next token)
 * and tells kvp_draft_update() how many were kept, which adapts how many are drafted.
 *
 * No model, no allocation: a struct kvp_draft is a few counters per sequence.
 * Thread: the thread driving the sequence.
 */
#ifndef KVP_COMPUTE_DRAFT_H
#define KVP_COMPUTE_DRAFT_H

#include <stdint.h>

#define KVP_DRAFT_K_MAX 16 /* most drafts one step takes (rows = 1 + k) */
#define KVP_DRAFT_K_DEFAULT 8
#define KVP_DRAFT_NGRAM_MAX 8

/**
 * struct kvp_draft - one sequence's draft source
 * @ngram_max, @ngram_min: suffix lengths tried, longest first (1 <= min <= max <= 8)
 * @k_max:    most tokens drafted at once (1 .. KVP_DRAFT_K_MAX)
 * @k:        tokens the next proposal may hold (1 .. k_max), from the acceptance rate
 * @rate:     running acceptance rate (accepted / drafted, exponentially weighted)
 * @drafted, @accepted: totals (for usage and status)
 * @steps:    proposals verified (kvp_draft_update() calls with drafts)
 * @acc, @rej: decayed counts of accepted drafts and of rejections (a step that kept
 *            fewer than it drafted): the per-token acceptance acc / (acc + rej)
 * @cost:     decayed time of a step of n rows at cost[n] (0: not seen), from
 *            kvp_draft_step_cost(); once cost[1] is known k maximizes expected tokens
 *            per time, not the rate alone
 * @idle:     steps since the cost model last chose no drafts (every KVP_DRAFT_PROBE-th
 *            drafts one, so the acceptance stays measured)
 * @since1:   steps since the last one-row step (at KVP_DRAFT_RETIME, or while cost[1]
 *            is unknown, the next step drafts nothing: a baseline that drafts would
 *            never measure, and the machine's load moves it)
 */
struct kvp_draft {
	uint32_t ngram_max, ngram_min, k_max, k;
	float rate;
	uint64_t drafted, accepted, steps;
	float acc, rej;
	double cost[2 + KVP_DRAFT_K_MAX];
	uint32_t idle, since1;
};

#define KVP_DRAFT_PROBE 8
#define KVP_DRAFT_RETIME 64

/*
 * Start a source: suffixes of @ngram_max down to @ngram_min tokens, up to @k_max drafts
 * (0: the defaults 4, 1 and KVP_DRAFT_K_DEFAULT; out-of-range values are clamped).
 */
void kvp_draft_init(struct kvp_draft *d, uint32_t ngram_max, uint32_t ngram_min, uint32_t k_max);

/**
 * kvp_draft_find() - the matcher alone: where the longest suffix of @toks occurred before
 * @toks:  the sequence's tokens so far (@n of them; prompt then kept output)
 * @len:   out; the length of the suffix matched (0: none)
 *
 * For n = ngram_max .. ngram_min (the first n with a match wins), the latest j < n_tok - 1
 * with toks[j - n + 1 .. j] equal to the last n tokens.
 * Return: j + 1, the index of the first token that followed the match (0 when none; a
 * match's continuation is never empty, so 0 is no valid index).
 */
uint32_t kvp_draft_find(const struct kvp_draft *d, const int32_t *toks, uint32_t n_tok,
			uint32_t *len);

/**
 * kvp_draft_propose() - the drafts for the token after @toks
 * @out:  room for @cap tokens
 * @cap:  the caller's limit (rows left in the step, tokens left to generate, ...)
 * Return: drafts written (0 .. min(k, cap)): the tokens after the match of
 * kvp_draft_find(), as many as exist before the end of @toks.
 */
uint32_t kvp_draft_propose(const struct kvp_draft *d, const int32_t *toks, uint32_t n_tok,
			   int32_t *out, uint32_t cap);

/*
 * After a step verified @drafted > 0 drafts of which the first @accepted agreed: the
 * totals, the running rate, and k (grown on a full acceptance, cut to what the rate
 * says otherwise).  @drafted 0 is a no-op.
 */
void kvp_draft_update(struct kvp_draft *d, uint32_t drafted, uint32_t accepted);

/*
 * A step of @n_rows rows (1 + the drafts) took @ns: the cost model, and k chosen by it:
 * the k in 0 .. k_max with the most expected tokens, (1 - p^(k+1)) / (1 - p) for the
 * per-token acceptance p, per expected step time (rows not timed yet: a line through
 * the largest timed one, or a quarter of a one-row step each before any), 0 (drafting
 * one only every KVP_DRAFT_PROBE-th step) when none beats no drafts.  Where extra rows
 * are nearly free (memory-bound decode) this drafts long; where each costs about a row's
 * compute (a contended CPU) it drafts little or nothing, so failing drafts cost little.
 */
void kvp_draft_step_cost(struct kvp_draft *d, uint32_t n_rows, double ns);

#endif /* KVP_COMPUTE_DRAFT_H */
