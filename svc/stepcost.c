/* SPDX-License-Identifier: MIT */
/*
 * stepcost.c - the engine's forward cost model (see stepcost.h).
 *
 * The adaptation is an exponentially weighted mean of measured/predicted with weight
 * 0.2 per observation, each observation first clamped to [1/2, 2] x the current ratio:
 * a shift in machine load is followed within ~10 steps, while one step stalled by
 * another process (on a shared machine: 10x for a step, now and then) moves the estimate
 * by at most 20%.  The ratio itself stays in [0.1, 10].
 *
 * Thread: the engine thread's.
 */
#include "svc/stepcost.h"

#include <math.h>

#define ALPHA 0.2
#define K_MIN 0.1
#define K_MAX 10.0
#define DEC_SLOPE 0.06 /* each sequence in a decode batch, relative to one alone */

static double clampd(double v, double lo, double hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

void kvp_stepcost_init(struct kvp_stepcost *c, double p0, double p1, double p2, double d1)
{
	*c = (struct kvp_stepcost){ 0 };
	/* a model of nothing would fit every chunk in any budget: keep it finite */
	c->p0 = p0 > 0 ? p0 : 1e5;
	c->p1 = p1 > 0 ? p1 : 1e4;
	c->p2 = p2 > 0 ? p2 : 0;
	c->d1 = d1 > 0 ? d1 : c->p0;
	c->k_pre = 1;
	c->k_dec = 1;
}

void kvp_stepcost_fit(struct kvp_stepcost *c, double t1, double ta, uint32_t na, double tb,
		      uint32_t nb, uint32_t ctx_b, double d1)
{
	double p1 = na > 1 ? (ta - t1) / (na - 1) : 0;
	double p0, p2 = 0;

	if (p1 <= 0)
		p1 = t1 / 8; /* noise swallowed the slope: one token is surely < 1/8 of a call */
	/* t1 = p0 + p1 (its one token's attention is nothing) */
	p0 = t1 - p1 > t1 / 4 ? t1 - p1 : t1 / 4;
	if (nb && ctx_b) {
		/* tb = p0 + nb (p1 + p2 (ctx_b + nb / 2)): what p0 and p1 leave is attention */
		p2 = (tb - p0 - nb * p1) / ((double)nb * (ctx_b + nb / 2.0));
		if (p2 < 0)
			p2 = 0;
	}
	kvp_stepcost_init(c, p0, p1, p2, d1);
}

static double prefill_model(const struct kvp_stepcost *c, uint32_t n, uint32_t ctx)
{
	return c->p0 + n * (c->p1 + c->p2 * ((double)ctx + n / 2.0));
}

double kvp_stepcost_prefill_ns(const struct kvp_stepcost *c, uint32_t n, uint32_t ctx)
{
	return n ? c->k_pre * prefill_model(c, n, ctx) : 0;
}

uint32_t kvp_stepcost_fit_tokens(const struct kvp_stepcost *c, double budget_ns, uint32_t ctx,
				 uint32_t max)
{
	uint32_t lo = 0, hi = max;

	/* the cost grows with n: the largest n within budget, by bisection */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo + 1) / 2;

		if (kvp_stepcost_prefill_ns(c, mid, ctx) <= budget_ns)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

uint32_t kvp_stepcost_min_chunk(const struct kvp_stepcost *c, uint32_t ctx)
{
	double per_tok = c->p1 + c->p2 * (double)ctx;
	double n = per_tok > 0 ? ceil(c->p0 / per_tok) : 1;

	return n < 1 ? 1 : n > 65536 ? 65536 : (uint32_t)n;
}

static double decode_model(const struct kvp_stepcost *c, uint32_t batch)
{
	return c->d1 * (1.0 + DEC_SLOPE * (batch - 1));
}

double kvp_stepcost_decode_ns(const struct kvp_stepcost *c, uint32_t batch)
{
	if (!batch)
		return 0;
	if (batch <= KVP_STEPCOST_MAX_BATCH && c->dec[batch - 1] > 0)
		return c->dec[batch - 1];
	return c->k_dec * decode_model(c, batch);
}

void kvp_stepcost_observe_prefill(struct kvp_stepcost *c, uint32_t n, uint32_t ctx, double ns)
{
	double m = prefill_model(c, n, ctx);

	if (!n || m <= 0 || !(ns > 0))
		return;
	c->k_pre = clampd((1 - ALPHA) * c->k_pre +
				  ALPHA * clampd(ns / m, c->k_pre / 2, c->k_pre * 2),
			  K_MIN, K_MAX);
}

void kvp_stepcost_observe_decode(struct kvp_stepcost *c, uint32_t batch, double ns)
{
	double m;

	if (!batch || !(ns > 0))
		return;
	m = decode_model(c, batch);
	c->k_dec = clampd((1 - ALPHA) * c->k_dec +
				  ALPHA * clampd(ns / m, c->k_dec / 2, c->k_dec * 2),
			  K_MIN, K_MAX);
	if (batch <= KVP_STEPCOST_MAX_BATCH) {
		double *d = &c->dec[batch - 1];

		*d = *d > 0 ? (1 - ALPHA) * *d + ALPHA * clampd(ns, *d / 2, *d * 2) : ns;
	}
}
