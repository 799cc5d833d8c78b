/* SPDX-License-Identifier: MIT */
/*
 * draft.c - prompt-lookup drafts (see draft.h).
 *
 * The search is a backward scan over the sequence: O(n_tok * ngram_max) compares per
 * step at worst, a few microseconds for thousands of tokens, against a forward step
 * that reads every weight.  The latest occurrence wins: in edited or quoted text the
 * nearest copy is the likeliest to continue the same way.
 */
#include "compute/draft.h"

#include <stdbool.h>
#include <stddef.h>

/* Weight of the newest step in the running acceptance rate. */
#define RATE_ALPHA 0.25f

static uint32_t clamp(uint32_t v, uint32_t lo, uint32_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

void kvp_draft_init(struct kvp_draft *d, uint32_t ngram_max, uint32_t ngram_min, uint32_t k_max)
{
	ngram_max = clamp(ngram_max ? ngram_max : 4, 1, KVP_DRAFT_NGRAM_MAX);
	ngram_min = clamp(ngram_min ? ngram_min : 1, 1, ngram_max);
	k_max = clamp(k_max ? k_max : KVP_DRAFT_K_DEFAULT, 1, KVP_DRAFT_K_MAX);
	/* start optimistic: a sequence that repeats itself pays off from its first match */
	*d = (struct kvp_draft){
		.ngram_max = ngram_max,
		.ngram_min = ngram_min,
		.k_max = k_max,
		.k = k_max,
		.rate = 1.0f,
		.acc = 1.0f,
	};
}

uint32_t kvp_draft_find(const struct kvp_draft *d, const int32_t *toks, uint32_t n_tok,
			uint32_t *len)
{
	*len = 0;
	for (uint32_t n = d->ngram_max; n >= d->ngram_min; n--) {
		const int32_t *suf;

		if (n_tok < n + 1)
			continue; /* the suffix and one earlier copy's last token at least */
		suf = toks + n_tok - n;
		/* j: the last token of a candidate copy, before the suffix's own last token */
		for (uint32_t j = n_tok - 2; j + 1 >= n; j--) {
			uint32_t i = 0;

			while (i < n && toks[j - i] == suf[n - 1 - i])
				i++;
			if (i == n) {
				*len = n;
				return j + 1;
			}
			if (!j)
				break;
		}
	}
	return 0;
}

uint32_t kvp_draft_propose(const struct kvp_draft *d, const int32_t *toks, uint32_t n_tok,
			   int32_t *out, uint32_t cap)
{
	uint32_t len, at = kvp_draft_find(d, toks, n_tok, &len), n;

	if (!at || !d->k)
		return 0;
	n = n_tok - at;
	n = n < d->k ? n : d->k;
	n = n < cap ? n : cap;
	for (uint32_t i = 0; i < n; i++)
		out[i] = toks[at + i];
	return n;
}

/* The expected time of a step of @n rows (cost[1] known). */
static double step_ns(const struct kvp_draft *d, uint32_t n)
{
	uint32_t top = 0;

	if (d->cost[n] > 0)
		return d->cost[n];
	for (uint32_t i = 2; i <= 1 + KVP_DRAFT_K_MAX; i++)
		if (d->cost[i] > 0)
			top = i;
	if (!top)
		return d->cost[1] * (1.0 + 0.25 * (n - 1));
	return d->cost[1] + (d->cost[top] - d->cost[1]) / (top - 1) * (n - 1);
}

/*
 * The k with the most expected tokens per expected time (see kvp_draft_step_cost());
 * 0 becomes 1 on a probe step (@step: counting this one).
 */
static uint32_t best_k(struct kvp_draft *d, bool step)
{
	double p = d->acc / (d->acc + d->rej), best = 1.0 / step_ns(d, 1), e = 1, pk = 1;
	uint32_t k = 0;

	p = p < 0.99 ? p : 0.99;
	for (uint32_t i = 1; i <= d->k_max; i++) {
		double v;

		pk *= p;
		e += pk; /* 1 + p + ... + p^i */
		v = e / step_ns(d, 1 + i);
		if (v > best)
			best = v, k = i;
	}
	if (k) {
		d->idle = 0;
		return k;
	}
	if (step)
		d->idle++;
	return d->idle % KVP_DRAFT_PROBE == 0 ? 1 : 0;
}

void kvp_draft_update(struct kvp_draft *d, uint32_t drafted, uint32_t accepted)
{
	uint32_t k;

	if (!drafted)
		return;
	accepted = accepted < drafted ? accepted : drafted;
	d->drafted += drafted;
	d->accepted += accepted;
	d->steps++;
	d->rate += RATE_ALPHA * ((float)accepted / (float)drafted - d->rate);
	d->acc = (1 - RATE_ALPHA) * d->acc + (float)accepted;
	d->rej = (1 - RATE_ALPHA) * d->rej + (accepted < drafted);
	if (accepted == drafted) {
		/* all agreed: the next proposal may be longer (doubling, as a run repeats) */
		k = d->k * 2;
	} else {
		/*
		 * a rejection: about what the rate expects to pass, and at least one more than
		 * passed now; a failing source keeps drafting one (a row costs little beside
		 * the weights a step reads anyway)
		 */
		k = (uint32_t)(d->rate * (float)d->k_max + 0.5f);
		k = k > accepted + 1 ? k : accepted + 1;
	}
	d->k = clamp(k, 1, d->k_max);
	if (d->cost[1] > 0)
		d->k = best_k(d, false);
}

void kvp_draft_step_cost(struct kvp_draft *d, uint32_t n_rows, double ns)
{
	if (!n_rows || n_rows > 1 + KVP_DRAFT_K_MAX || !(ns > 0))
		return;
	d->cost[n_rows] = d->cost[n_rows] > 0 ?
				  d->cost[n_rows] + RATE_ALPHA * (ns - d->cost[n_rows]) :
				  ns;
	d->since1 = n_rows == 1 ? 0 : d->since1 + 1;
	if (d->cost[1] > 0)
		d->k = best_k(d, true);
	/* the baseline: a sequence that always finds drafts would never time it */
	if (!(d->cost[1] > 0) || d->since1 >= KVP_DRAFT_RETIME)
		d->k = 0;
}
