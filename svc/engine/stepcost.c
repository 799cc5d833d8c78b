/* SPDX-License-Identifier: MIT */
/*
 * stepcost.c - the engine's forward cost model (see stepcost.h).
 *
 * The adaptation scales the two parts of a step separately, k_w the weights and rows
 * (p0 + R p1) and k_a the attention (A p2): calibrated at short contexts, the attention
 * part is the least certain (measured on the demo model: 3x its fit at 3,000 positions),
 * and one scale for both made a long prompt's attention inflate the predicted cost of
 * every step's fixed part.  After each step the two move along their shares of the
 * prediction (normalised least mean squares) so that the prediction closes 0.2 of its
 * error, the measurement first clamped to [1/2, 2] x the prediction: a shift in machine
 * load is followed within ~10 steps, while one step stalled by another process (on a
 * shared machine: 10x for a step, now and then) moves the prediction by at most 20%.
 * Each scale stays in [0.1, 10].
 *
 * Thread: the engine thread's.
 */
#include "svc/engine/stepcost.h"

#include <string.h>

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
	c->k_w = 1;
	c->k_a = 1;
	c->k_dec = 1;
}

void kvp_stepcost_fit(struct kvp_stepcost *c, const double n[3], const double ctx[3],
		      const double t[3], double d1)
{
	/* t_i = p0 + n_i p1 + n_i (ctx_i + n_i / 2) p2: three equations, Cramer's rule */
	double a[3][3], det, p[3];

	for (int i = 0; i < 3; i++) {
		a[i][0] = 1;
		a[i][1] = n[i];
		a[i][2] = n[i] * (ctx[i] + n[i] / 2);
	}
	det = a[0][0] * (a[1][1] * a[2][2] - a[1][2] * a[2][1]) -
	      a[0][1] * (a[1][0] * a[2][2] - a[1][2] * a[2][0]) +
	      a[0][2] * (a[1][0] * a[2][1] - a[1][1] * a[2][0]);
	for (int k = 0; k < 3 && det != 0; k++) {
		double m[3][3];

		memcpy(m, a, sizeof(m));
		for (int i = 0; i < 3; i++)
			m[i][k] = t[i];
		p[k] = (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) -
			m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
			m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0])) /
		       det;
	}
	if (det == 0) {
		p[0] = t[0] / 2;
		p[1] = t[0] / (2 * n[0]);
		p[2] = 0;
	}
	/* noise can make any of them absurd: keep each within what the timings allow */
	if (!(p[1] > 0))
		p[1] = t[0] / (4 * n[0]);
	if (!(p[0] > t[0] / 8))
		p[0] = t[0] / 8;
	/*
	 * attention that costs nothing could never be scaled up by the adaptation (it moves
	 * each part by its share): at least what makes 8,192 positions cost a token's matrix
	 * work
	 */
	if (!(p[2] >= p[1] / 8192))
		p[2] = p[1] / 8192;
	kvp_stepcost_init(c, p[0], p[1], p[2], d1);
}

/* the weights-and-rows part of a step of @rows rows, and its attention part, unscaled */
static double part_w(const struct kvp_stepcost *c, double rows)
{
	return c->p0 + rows * c->p1;
}

static double part_a(const struct kvp_stepcost *c, double attn)
{
	return attn * c->p2;
}

/* positions a chunk of @n tokens after @ctx reads in attention, in all */
static double chunk_attn(uint32_t n, uint32_t ctx)
{
	return n * ((double)ctx + n / 2.0);
}

/* whether row count @r (1 .. KVP_STEPCOST_ROWS) has ratios seen recently */
static bool rows_fresh(const struct kvp_stepcost *c, uint32_t r)
{
	return c->n_rk[r - 1] && c->n_small - c->rk_at[r - 1] <= KVP_STEPCOST_STALE;
}

/*
 * the row count's ratio of a step of @rows rows: 1 for many rows; a count without
 * recent ratios takes its nearest neighbour's (the one below first), which prices it
 * as the scales stand now, not at the line (a line that the scales bent to a cheap
 * count's steps would make every untried count look cheap), and 1 when no count has
 */
static double row_ratio(const struct kvp_stepcost *c, double rows)
{
	uint32_t r = (uint32_t)rows;

	if (r < 1 || r > KVP_STEPCOST_ROWS)
		return 1;
	for (uint32_t d = 0; d < KVP_STEPCOST_ROWS; d++) {
		if (r > d && rows_fresh(c, r - d))
			return c->rk[r - d - 1];
		if (r + d <= KVP_STEPCOST_ROWS && rows_fresh(c, r + d))
			return c->rk[r + d - 1];
	}
	return 1;
}

/* the median of @n values of @ring (at most KVP_STEPCOST_RING) */
static double ring_median(const double *ring, uint32_t n)
{
	double v[KVP_STEPCOST_RING];

	/* insertion sort: at most 8 */
	for (uint32_t i = 0; i < n; i++) {
		uint32_t j = i;

		for (; j > 0 && v[j - 1] > ring[i]; j--)
			v[j] = v[j - 1];
		v[j] = ring[i];
	}
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * A step of @rows (<= KVP_STEPCOST_ROWS) took @ns where the scaled line says @line: the
 * ratio joins its row count's ring, clamped to [1/4, 4] (one stalled step among the
 * ring's moves its median not at all)
 */
static void observe_rows(struct kvp_stepcost *c, uint32_t rows, double line, double ns)
{
	uint32_t b = rows - 1, n;

	if (c->n_small - c->rk_at[b] > KVP_STEPCOST_STALE)
		c->n_rk[b] = 0; /* forgotten: what it costs now */
	c->rk_at[b] = ++c->n_small;
	c->rk_ring[b][c->n_rk[b]++ % KVP_STEPCOST_RING] = clampd(ns / line, 0.25, 4);
	n = c->n_rk[b] < KVP_STEPCOST_RING ? c->n_rk[b] : KVP_STEPCOST_RING;
	c->rk[b] = ring_median(c->rk_ring[b], n);
}

/*
 * The scales close part of the line's error, whatever the row count (they follow the
 * machine's load in steps of every size), and a step of few rows adds what it took
 * against the line to its count's ratios: those hold how such a count departs from
 * the line where it stands now.
 */
static void observe_scales(struct kvp_stepcost *c, double rows, double attn, double ns)
{
	double w = part_w(c, rows), a = part_a(c, attn);
	double line = c->k_w * w + c->k_a * a, norm = w * w + a * a, e;

	if (c->frozen || !(line > 0) || !(norm > 0) || !(ns > 0))
		return;
	if (rows <= KVP_STEPCOST_ROWS)
		observe_rows(c, (uint32_t)rows, line, ns);
	e = clampd(ns, line / 2, line * 2) - line;
	c->k_w = clampd(c->k_w + ALPHA * e * w / norm, K_MIN, K_MAX);
	c->k_a = clampd(c->k_a + ALPHA * e * a / norm, K_MIN, K_MAX);
}

double kvp_stepcost_step_ns(const struct kvp_stepcost *c, double rows, double attn)
{
	if (!(rows > 0))
		return 0;
	return row_ratio(c, rows) * (c->k_w * part_w(c, rows) + c->k_a * part_a(c, attn));
}

uint32_t kvp_stepcost_fit_step(const struct kvp_stepcost *c, double budget_ns, double rows,
			       double attn, uint32_t ctx, uint32_t max)
{
	uint32_t small = rows < KVP_STEPCOST_ROWS ? KVP_STEPCOST_ROWS - (uint32_t)rows : 0;
	uint32_t lo, hi = max;

	/*
	 * beyond KVP_STEPCOST_ROWS rows the cost grows with the chunk: the most that fits,
	 * by bisection; below, each row count has its own ratio and fewer tokens may cost
	 * more: the largest that fits, one by one
	 */
	if (small > max)
		small = max;
	if (small == max || kvp_stepcost_step_ns(c, rows + small + 1,
						 attn + chunk_attn(small + 1, ctx)) > budget_ns) {
		for (lo = small; lo > 0; lo--)
			if (kvp_stepcost_step_ns(c, rows + lo, attn + chunk_attn(lo, ctx)) <=
			    budget_ns)
				break;
		return lo;
	}
	lo = small + 1;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo + 1) / 2;

		if (kvp_stepcost_step_ns(c, rows + mid, attn + chunk_attn(mid, ctx)) <= budget_ns)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

void kvp_stepcost_observe_step(struct kvp_stepcost *c, double rows, double attn, double ns)
{
	if (rows > 0)
		observe_scales(c, rows, attn, ns);
}

double kvp_stepcost_prefill_ns(const struct kvp_stepcost *c, uint32_t n, uint32_t ctx)
{
	return kvp_stepcost_step_ns(c, n, chunk_attn(n, ctx));
}

uint32_t kvp_stepcost_floor_tokens(const struct kvp_stepcost *c, double fixed_ns, double work_x,
				   uint32_t ctx, uint32_t max)
{
	double want = work_x * c->k_w * fixed_ns;
	uint32_t lo = 1, hi = max ? max : 1;

	/* the work of n tokens grows with n: the smallest n that reaches @want */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		double work = c->k_w * mid * c->p1 + c->k_a * part_a(c, chunk_attn(mid, ctx));

		if (work >= want)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
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
		return c->dec[batch - 1] *
		       (c->k_w_dec > 0 ? clampd(c->k_w / c->k_w_dec, 0.5, 2) : 1);
	return c->k_dec * decode_model(c, batch);
}

void kvp_stepcost_observe_prefill(struct kvp_stepcost *c, uint32_t n, uint32_t ctx, double ns)
{
	if (n)
		observe_scales(c, n, chunk_attn(n, ctx), ns);
}

void kvp_stepcost_observe_decode(struct kvp_stepcost *c, uint32_t batch, double ns)
{
	double m;

	if (c->frozen || !batch || !(ns > 0))
		return;
	c->k_w_dec = c->k_w;
	m = decode_model(c, batch);
	c->k_dec = clampd((1 - ALPHA) * c->k_dec +
				  ALPHA * clampd(ns / m, c->k_dec / 2, c->k_dec * 2),
			  K_MIN, K_MAX);
	if (batch <= KVP_STEPCOST_MAX_BATCH) {
		uint32_t b = batch - 1, n;

		c->ring[b][c->n_ring[b]++ % KVP_STEPCOST_RING] = ns;
		n = c->n_ring[b] < KVP_STEPCOST_RING ? c->n_ring[b] : KVP_STEPCOST_RING;
		c->dec[b] = ring_median(c->ring[b], n);
	}
}
