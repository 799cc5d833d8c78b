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

struct cand {
	float v;
	int32_t id;
};

struct kvp_sampler {
	struct kvp_sample_params p;
	uint32_t n_vocab;
	uint64_t s[4];	/* xoshiro256** state */
	struct cand *c; /* n_vocab scratch */
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
	free(s);
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

int32_t kvp_sampler_sample(struct kvp_sampler *s, const float *logits)
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
