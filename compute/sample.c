/* SPDX-License-Identifier: MIT */
/*
 * sample.c - next-token selection.
 *
 * Order of operations: temperature scaling, top-k (partial selection of the k
 * largest), softmax over the survivors, top-p (smallest prefix of the sorted
 * survivors whose mass reaches p), then one draw from the renormalised mass with the
 * sampler's own xoshiro256** stream.  Greedy (temperature <= 0) skips all of it.
 * One sampler per sequence; owned by the thread that samples for it.
 */
#include "compute/sample.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/grammar.h"

struct cand {
	float v;
	int32_t id;
};

struct kvp_sampler {
	struct kvp_sample_params p;
	uint32_t n_vocab;
	uint64_t s[4];	/* xoshiro256** state */
	struct cand *c; /* n_vocab scratch */

	/* extras (kvp_sampler_set_extra()); has_extra false: none of it is used */
	bool has_extra;
	struct kvp_sample_extra x; /* its arrays point at the copies below */
	int32_t *bias_ids, *eog;
	float *bias;
	uint32_t *counts; /* n_vocab: times generated (penalties only) */
	struct kvp_grammar_matcher *gm;
	uint32_t *mask; /* (n_vocab + 31) / 32 */
	float *w;	/* n_vocab: the logits as changed by the extras */
	float *eog_w;	/* n_eog */
	struct kvp_sample_logprob lp;
	bool has_lp;
	/* the reasoning section (x.think_budget): not yet opened, open (@think_n tokens in
	 * it), closed */
	enum { THINK_BEFORE, THINK_OPEN, THINK_DONE } think;
	uint32_t think_n;
};

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t next_u64(struct kvp_sampler *sp)
{
	uint64_t *s = sp->s, r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

int kvp_sampler_new(struct kvp_sampler **out, uint32_t n_vocab, const struct kvp_sample_params *p)
{
	struct kvp_sampler *s;
	uint64_t z;

	*out = NULL;
	if (!n_vocab || isnan(p->temperature) || isnan(p->top_p))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->c = malloc((size_t)n_vocab * sizeof(*s->c));
	if (!s->c) {
		free(s);
		return -ENOMEM;
	}
	s->p = *p;
	s->n_vocab = n_vocab;
	z = p->seed;
	for (int i = 0; i < 4; i++) { /* splitmix64 expands the seed into the state */
		uint64_t x = (z += 0x9e3779b97f4a7c15ull);

		x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
		x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
		s->s[i] = x ^ (x >> 31);
	}
	*out = s;
	return 0;
}

void kvp_sampler_free(struct kvp_sampler *s)
{
	if (!s)
		return;
	free(s->c);
	free(s->bias_ids);
	free(s->bias);
	free(s->eog);
	free(s->counts);
	kvp_grammar_matcher_free(s->gm);
	if (s->has_extra)
		kvp_grammar_free(s->x.grammar);
	free(s->mask);
	free(s->w);
	free(s->eog_w);
	free(s);
}

int kvp_sampler_set_extra(struct kvp_sampler *s, const struct kvp_sample_extra *x)
{
	uint32_t n = s->n_vocab;

	if (s->has_extra || !isfinite(x->presence) || !isfinite(x->frequency) ||
	    x->top_logprobs > KVP_SAMPLE_TOP_LOGPROBS_MAX || x->n_bias > KVP_SAMPLE_BIAS_MAX ||
	    (x->grammar && (!x->vocab || kvp_grammar_vocab_size(x->vocab) != n)))
		return -EINVAL;
	for (uint32_t i = 0; i < x->n_bias; i++)
		if (x->bias_ids[i] < 0 || (uint32_t)x->bias_ids[i] >= n || !isfinite(x->bias[i]))
			return -EINVAL;
	for (uint32_t i = 0; i < x->n_eog; i++)
		if (x->eog[i] < 0 || (uint32_t)x->eog[i] >= n)
			return -EINVAL;
	if (x->think_budget && (x->think_open < 0 || (uint32_t)x->think_open >= n ||
				x->think_close < 0 || (uint32_t)x->think_close >= n))
		return -EINVAL;
	s->x = *x;
	s->w = malloc((size_t)n * sizeof(float));
	if (!s->w)
		return -ENOMEM;
	if (x->n_bias) {
		s->bias_ids = malloc(x->n_bias * sizeof(int32_t));
		s->bias = malloc(x->n_bias * sizeof(float));
		if (!s->bias_ids || !s->bias)
			return -ENOMEM;
		memcpy(s->bias_ids, x->bias_ids, x->n_bias * sizeof(int32_t));
		memcpy(s->bias, x->bias, x->n_bias * sizeof(float));
	}
	if (x->n_eog) {
		s->eog = malloc(x->n_eog * sizeof(int32_t));
		if (!s->eog)
			return -ENOMEM;
		memcpy(s->eog, x->eog, x->n_eog * sizeof(int32_t));
		s->eog_w = malloc(x->n_eog * sizeof(float));
		if (!s->eog_w)
			return -ENOMEM;
	}
	s->x.bias_ids = s->bias_ids;
	s->x.bias = s->bias;
	s->x.eog = s->eog;
	if ((x->presence != 0 || x->frequency != 0) && !(s->counts = calloc(n, sizeof(uint32_t))))
		return -ENOMEM;
	if (x->grammar) {
		s->mask = malloc(((size_t)n + 31) / 32 * sizeof(uint32_t));
		if (!s->mask || kvp_grammar_matcher_new(&s->gm, x->grammar, x->vocab))
			return -ENOMEM;
	}
	if (x->grammar)
		kvp_grammar_ref(x->grammar);
	s->has_extra = true;
	return 0;
}

int kvp_sampler_new_like(struct kvp_sampler **out, const struct kvp_sampler *proto, uint64_t seed)
{
	struct kvp_sample_params p = proto->p;
	int r;

	p.seed = seed;
	r = kvp_sampler_new(out, proto->n_vocab, &p);
	if (r || !proto->has_extra)
		return r;
	r = kvp_sampler_set_extra(*out, &proto->x);
	if (r) {
		kvp_sampler_free(*out);
		*out = NULL;
	}
	return r;
}

const struct kvp_sample_logprob *kvp_sampler_logprob(const struct kvp_sampler *s)
{
	return s->has_lp ? &s->lp : NULL;
}

int32_t kvp_sample_greedy(const float *logits, uint32_t n)
{
	int32_t best = 0;

	for (uint32_t i = 1; i < n; i++)
		if (logits[i] > logits[best] || (isnan(logits[best]) && !isnan(logits[i])))
			best = (int32_t)i;
	return best;
}

/* descending by value, ascending id on ties: a total order, so results are stable */
static int cand_cmp(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->v != y->v)
		return x->v > y->v ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/*
 * Move the k largest of c[0..n) to the front, sorted.  Small k keeps a sorted window
 * by insertion (one pass, O(n) for the usual top-k of tens); large k sorts everything.
 */
static void select_top(struct cand *c, uint32_t n, uint32_t k)
{
	if (k > 64) {
		qsort(c, n, sizeof(*c), cand_cmp);
		return;
	}
	qsort(c, k, sizeof(*c), cand_cmp);
	for (uint32_t i = k; i < n; i++) {
		struct cand x = c[i];
		uint32_t j = k - 1;

		if (cand_cmp(&x, &c[j]) >= 0)
			continue;
		while (j > 0 && cand_cmp(&x, &c[j - 1]) < 0) {
			c[j] = c[j - 1];
			j--;
		}
		c[j] = x;
	}
}

static int32_t sample_core(struct kvp_sampler *s, const float *logits)
{
	uint32_t n = s->n_vocab, k = s->p.top_k && s->p.top_k < n ? s->p.top_k : n, m = 0;
	double t = s->p.temperature, sum = 0, acc, r;
	float lmax = -INFINITY;
	struct cand *c = s->c;

	if (!(s->p.temperature > 0.0f))
		return kvp_sample_greedy(logits, n);
	for (uint32_t i = 0; i < n; i++)
		lmax = logits[i] > lmax ? logits[i] : lmax;
	if (lmax == -INFINITY || isinf(lmax)) /* all NaN/-inf, or an infinite winner */
		return kvp_sample_greedy(logits, n);
	/*
	 * Subtract the max before dividing by T, in double: every value is then <= 0 and
	 * the best is exactly 0, so a tiny T gives -inf (weight 0), never inf - inf = NaN.
	 */
	for (uint32_t i = 0; i < n; i++) {
		if (isnan(logits[i]))
			continue;
		c[m].v = (float)(((double)logits[i] - lmax) / t);
		c[m].id = (int32_t)i;
		m++;
	}
	if (k > m)
		k = m;
	if (k < m || (s->p.top_p > 0.0f && s->p.top_p < 1.0f))
		select_top(c, m, k);
	for (uint32_t i = 0; i < k; i++) {
		c[i].v = expf(c[i].v);
		sum += c[i].v;
	}
	if (s->p.top_p > 0.0f && s->p.top_p < 1.0f) { /* c[] is sorted here */
		uint32_t keep = 0;

		acc = 0;
		while (keep < k) {
			acc += c[keep++].v;
			if (acc >= s->p.top_p * sum)
				break;
		}
		k = keep;
		sum = acc;
	}
	r = (double)(next_u64(s) >> 11) * 0x1p-53 * sum;
	acc = 0;
	for (uint32_t i = 0; i < k; i++) {
		acc += c[i].v;
		if (r < acc)
			return c[i].id;
	}
	return c[k - 1].id;
}

static bool is_eog(const struct kvp_sampler *s, int32_t id)
{
	for (uint32_t i = 0; i < s->x.n_eog; i++)
		if (s->x.eog[i] == id)
			return true;
	return false;
}

/* The extras applied to @w (a copy of the logits), in the order the header gives. */
static void apply_extra(struct kvp_sampler *s, float *w)
{
	uint32_t n = s->n_vocab;

	for (uint32_t i = 0; i < s->x.n_bias; i++)
		w[s->x.bias_ids[i]] += s->x.bias[i];
	if (s->counts)
		for (uint32_t i = 0; i < n; i++)
			if (s->counts[i])
				w[i] -= s->x.presence + s->x.frequency * (float)s->counts[i];
	if (s->gm) {
		uint32_t allowed = kvp_grammar_mask(s->gm, s->mask);
		bool end = kvp_grammar_accepting(s->gm) || !allowed;

		/*
		 * !allowed and not complete cannot happen with a vocabulary that has every
		 * byte; ending is then the one way out that writes no invalid byte.  The eog
		 * ids have no bytes in the grammar's vocabulary, so the mask clears them: their
		 * logits (bias and penalties applied) are put back where the end is allowed,
		 * never below a finite floor, so they can win when nothing else may.
		 */
		for (uint32_t i = 0; i < s->x.n_eog; i++)
			s->eog_w[i] = w[s->x.eog[i]];
		for (uint32_t i = 0; i < n; i++)
			if (!(s->mask[i / 32] >> (i % 32) & 1))
				w[i] = -INFINITY;
		for (uint32_t i = 0; i < s->x.n_eog; i++)
			w[s->x.eog[i]] = !end		      ? -INFINITY :
					 s->eog_w[i] > -1e30f ? s->eog_w[i] :
								-1e30f;
	}
}

/* log-softmax of @w: the chosen token's and the top ones (struct kvp_sample_logprob) */
static void record_logprobs(struct kvp_sampler *s, const float *w, int32_t id)
{
	uint32_t n = s->n_vocab, k = s->x.top_logprobs, m = 0;
	float mx = -INFINITY;
	double sum = 0, lse;

	for (uint32_t i = 0; i < n; i++)
		if (w[i] > mx)
			mx = w[i];
	for (uint32_t i = 0; i < n; i++)
		if (w[i] > -INFINITY)
			sum += exp((double)w[i] - mx);
	lse = mx + log(sum);
	s->lp.lp = (float)((double)w[id] - lse);
	s->lp.n_top = 0;
	if (k) {
		for (uint32_t i = 0; i < n; i++)
			if (!isnan(w[i])) {
				s->c[m].v = w[i];
				s->c[m].id = (int32_t)i;
				m++;
			}
		if (k > m)
			k = m;
		select_top(s->c, m, k);
		for (uint32_t i = 0; i < k; i++) {
			s->lp.top_ids[i] = s->c[i].id;
			s->lp.top_lp[i] = (float)((double)s->c[i].v - lse);
		}
		s->lp.n_top = k;
	}
	s->has_lp = true;
}

int32_t kvp_sampler_sample(struct kvp_sampler *s, const float *logits)
{
	int32_t id;

	if (!s->has_extra)
		return sample_core(s, logits);
	memcpy(s->w, logits, (size_t)s->n_vocab * sizeof(float));
	apply_extra(s, s->w);
	id = sample_core(s, s->w);
	if (s->x.think_budget) { /* the budget spent: the section ends here */
		if (s->think == THINK_OPEN && s->think_n >= s->x.think_budget)
			id = s->x.think_close;
		if (s->think == THINK_BEFORE && id == s->x.think_open)
			s->think = THINK_OPEN;
		else if (s->think == THINK_OPEN && id == s->x.think_close)
			s->think = THINK_DONE;
		else if (s->think == THINK_OPEN)
			s->think_n++;
	}
	if (s->x.logprobs)
		record_logprobs(s, s->w, id);
	if (s->counts)
		s->counts[id]++;
	/* an eog (or a token the grammar refused, which cannot be picked) leaves it as is */
	if (s->gm && !is_eog(s, id))
		(void)kvp_grammar_accept(s->gm, id);
	return id;
}
