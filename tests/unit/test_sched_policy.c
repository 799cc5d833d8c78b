/* SPDX-License-Identifier: MIT */
/*
 * test_sched_policy.c - the engine's scheduling policy, driven step by step
 * (kvp_sched_step()) through an injected forward pass and clock:
 *
 *  - a fake forward pass that writes, for every position, a hash chain of the tokens up
 *    to it into the position's K/V row and checks the chain of every earlier position
 *    before it computes: a block holding another prefix, a position never written, a
 *    table too short are caught where they happen.  Its "logits" pick the next token
 *    from the chain, so the tokens a request gets are a function of its prompt alone:
 *    the same tokens whatever the schedule, preemptions included;
 *  - a fake clock that the fake forward pass advances by a cost model shaped like the
 *    demo model on this machine (a fixed cost per call, a cost per token growing with
 *    the context; a mixed step pays the fixed cost once for its decode rows and
 *    chunks), so time budgets, aging and inter-token gaps are exact.
 *
 * The property test runs thousands of random schedules (arrivals, sizes, priorities,
 * cancels, closed connections, tiny pools that force preemption, speculative drafts
 * verified and mostly rolled back, since the chain's picks rarely repeat an n-gram)
 * and checks the block accounting after every step (kvp_sched_check()), the pool back
 * to its baseline at the end, and every request's tokens.  The other tests pin the policy's promises: early
 * stoppers with a large max_new never block others, priorities order admission and
 * preemption, preemption by recompute gives the undisturbed tokens on the real model,
 * short prompts go first, running streams keep a bounded gap, aging prevents starvation,
 * and the long prompt's prefill stays within 1.3x of the first policy's.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <cmocka.h>

#include "compute/mkmodel.h"
#include "compute/model.h"
#include "compute/text/tokenizer.h"
#include "shm/index.h"
#include "shm/pool.h"
#include "shm/tier.h"
#include "svc/engine/engine.h"
#include "tests/lib/testlib.h"

#define MAX_REQ 128
#define MAX_GEN 4096
#define SEED 0x6b76706f6f6cull

/* ---- the model, shared by every test ---- */

struct model {
	void *gguf;
	size_t gguf_len;
	struct kvp_model *m;
	struct kvp_tokenizer *tok;
	uint32_t n_vocab;
};

static struct model M;

static int group_setup(void **state)
{
	struct kvp_mkmodel_opts o;

	if (kvp_mkmodel_preset(&o, "tiny") ||
	    kvp_mkmodel_write_mem(&M.gguf, &M.gguf_len, &o, NULL, 0) ||
	    kvp_model_open_mem(&M.m, M.gguf, M.gguf_len, NULL, 0) ||
	    kvp_tokenizer_new(&M.tok, M.m, NULL, 0))
		return -1;
	M.n_vocab = kvp_model_hparams(M.m)->n_vocab;
	return 0;
}

static int group_teardown(void **state)
{
	kvp_tokenizer_free(M.tok);
	kvp_model_close(M.m);
	free(M.gguf);
	return 0;
}

/* ---- one simulated daemon ---- */

struct req {
	int32_t prompt[2048 + 4096];
	uint32_t n_prompt;
	uint32_t max_new;
	int32_t priority;
	uint64_t conn;
	bool no_cache;
	uint32_t salt;
	bool submitted, cancelled, closed, ended;
	uint32_t status;
	bool error;
	struct kvp_usage usage;
	int32_t got[MAX_GEN];
	uint32_t n_got;
	uint64_t t_submit, t_first, t_last, t_end; /* fake clock */
	uint64_t max_gap;			   /* largest gap between two tokens */
	uint64_t gaps[MAX_GEN];
};

struct sim {
	struct kvp_pool *pool;
	struct kvp_index *index;
	struct kvp_tier *tier; /* NULL, or a disk tier in tier_dir */
	char tier_dir[256];
	struct kvp_sched *sched;
	struct kvp_sched_hooks hooks;
	int efd;
	uint32_t bt;
	uint64_t clock;		   /* ns */
	double p0, p1, p2, d0, d1; /* fake costs, ns */
	uint64_t violations;
	char why[256];
	struct req r[MAX_REQ];
	uint32_t n_req;
	bool real;		   /* the real forward pass (no hooks, no fake clock) */
	uint64_t step_t0, step_t1; /* the last step, on the clock */
	uint64_t lease_id;	   /* the last lease granted, and its blocks */
	uint32_t lease_blocks;
};

/* Demo model on this machine, roughly: a call ~11 ms, 1.3 ms a token, attention on top. */
static void demo_costs(struct sim *m)
{
	m->p0 = 11e6;
	m->p1 = 1.3e6;
	m->p2 = 700;
	m->d0 = 13e6;
	m->d1 = 0.5e6;
}

static uint64_t mix(uint64_t h, uint64_t t)
{
	h ^= t + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
	h *= 0xff51afd7ed558ccdull;
	return h ^ (h >> 33);
}

/* The K/V row of position @p: { chain hash up to p, token at p }. */
static uint64_t *row(const struct kvp_kv_view *kv, const uint32_t *table, uint32_t p)
{
	uint32_t bt = kv->geom.shape.block_tokens;

	return (uint64_t *)(kvp_kv_run(kv, table[p / bt], 0, 0, 0) +
			    (size_t)(p % bt) * kv->geom.shape.head_dim * kv->geom.elem_bytes);
}

static int violation(struct sim *m, const char *fmt, ...)
{
	va_list ap;

	if (!m->violations++) {
		va_start(ap, fmt);
		vsnprintf(m->why, sizeof(m->why), fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* Check positions 0 .. @n_past-1 of @table; Return: the chain hash after them, or 0. */
static uint64_t check_chain(struct sim *m, const struct kvp_kv_view *kv, const uint32_t *table,
			    uint32_t n_table, uint32_t n_past, int *bad)
{
	uint32_t bt = kv->geom.shape.block_tokens;
	uint64_t h = SEED;

	*bad = 0;
	if ((uint64_t)n_table * bt < n_past) {
		*bad = violation(m, "table of %u blocks for %u positions", n_table, n_past);
		return 0;
	}
	for (uint32_t i = 0; i < n_table; i++)
		if (table[i] >= kv->n_blocks) {
			*bad = violation(m, "block %u out of range", table[i]);
			return 0;
		}
	for (uint32_t p = 0; p < n_past; p++) {
		const uint64_t *w = row(kv, table, p);

		h = mix(h, w[1]);
		if (w[0] != h) {
			*bad = violation(m, "position %u of %u: wrong K/V (block %u)", p, n_past,
					 table[p / bt]);
			return 0;
		}
	}
	return h;
}

static void logits_of(struct sim *m, uint64_t h, float *logits)
{
	memset(logits, 0, M.n_vocab * sizeof(float));
	logits[(h >> 11) % M.n_vocab] = 1.0f;
}

/*
 * @n positions of one sequence from @n_past: check the chain before, write theirs; the
 * logits of the last max(1, @n_logits) of them at @logits, in position order.
 */
static int fake_rows(struct sim *m, const struct kvp_kv_view *kv, const uint32_t *table,
		     uint32_t n_table, uint32_t n_past, const int32_t *tokens, uint32_t n,
		     uint32_t n_logits, float *logits)
{
	uint32_t bt = kv->geom.shape.block_tokens;
	int bad;
	uint64_t h = check_chain(m, kv, table, n_table, n_past, &bad);

	if (bad)
		return bad;
	if ((uint64_t)n_table * bt < (uint64_t)n_past + n)
		return violation(m, "prefill past the table (%u + %u > %u blocks)", n_past, n,
				 n_table);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t *w = row(kv, table, n_past + i);

		h = mix(h, (uint64_t)tokens[i]);
		w[0] = h;
		w[1] = (uint64_t)tokens[i];
		if (i + (n_logits > 1 ? n_logits : 1) >= n)
			logits_of(m, h, logits), logits += M.n_vocab;
	}
	return 0;
}

static int fake_prefill(void *ctx, const struct kvp_kv_view *kv, const uint32_t *table,
			uint32_t n_table, uint32_t n_past, const int32_t *tokens, uint32_t n,
			float *logits)
{
	struct sim *m = ctx;
	int r = fake_rows(m, kv, table, n_table, n_past, tokens, n, 1, logits);

	if (r)
		return r;
	m->clock += (uint64_t)(m->p0 + n * (m->p1 + m->p2 * (n_past + n / 2.0)));
	return 0;
}

/*
 * The mixed step (kvp_fwd_step()): every part as fake_rows(), no two writing one block.
 * Cost: one call's fixed cost and every row at a prefill token's cost, as the real step
 * carries decode rows through the chunk's matrix products; decode rows alone cost what
 * fake_decode() charges (the GEMV path).
 */
static int fake_step(void *ctx, const struct kvp_kv_view *kv, const struct kvp_fwd_part *parts,
		     uint32_t n_parts, float *logits)
{
	struct sim *m = ctx;
	uint32_t bt = kv->geom.shape.block_tokens, rows = 0;
	double attn = 0;

	for (uint32_t i = 0; i < n_parts; i++) {
		const struct kvp_fwd_part *p = &parts[i];
		int r;

		if (!p->n)
			return violation(m, "an empty part");
		for (uint32_t j = 0; j < i; j++)
			for (uint32_t a = p->pos0 / bt; a <= (p->pos0 + p->n - 1) / bt; a++)
				for (uint32_t b = parts[j].pos0 / bt;
				     b <= (parts[j].pos0 + parts[j].n - 1) / bt; b++)
					if (a < p->n_table && b < parts[j].n_table &&
					    p->table[a] == parts[j].table[b])
						return violation(m, "two parts write one block");
		r = fake_rows(m, kv, p->table, p->n_table, p->pos0, p->tokens, p->n, p->n_logits,
			      logits);
		if (r)
			return r;
		logits += (size_t)(p->n_logits > 1 ? p->n_logits : 1) * M.n_vocab;
		rows += p->n;
		attn += p->n * (p->pos0 + p->n / 2.0);
	}
	if (rows == n_parts)
		m->clock += (uint64_t)(m->d0 + m->d1 * n_parts);
	else
		m->clock += (uint64_t)(m->p0 + rows * m->p1 + m->p2 * attn);
	return 0;
}

static int fake_decode(void *ctx, const struct kvp_kv_view *kv, const struct kvp_fwd_seq *seqs,
		       uint32_t n, float *logits)
{
	struct sim *m = ctx;
	uint32_t bt = kv->geom.shape.block_tokens;

	for (uint32_t i = 0; i < n; i++) {
		int bad;
		uint64_t h = check_chain(m, kv, seqs[i].table, seqs[i].n_table, seqs[i].pos, &bad);
		uint64_t *w;

		if (bad)
			return bad;
		if ((uint64_t)seqs[i].n_table * bt <= seqs[i].pos)
			return violation(m, "decode past the table");
		for (uint32_t j = 0; j < i; j++)
			if (seqs[j].table[seqs[j].pos / bt] == seqs[i].table[seqs[i].pos / bt])
				return violation(m, "two sequences write one block");
		w = row(kv, seqs[i].table, seqs[i].pos);
		h = mix(h, (uint64_t)seqs[i].token);
		w[0] = h;
		w[1] = (uint64_t)seqs[i].token;
		logits_of(m, h, logits + (size_t)i * M.n_vocab);
	}
	m->clock += (uint64_t)(m->d0 + m->d1 * n);
	return 0;
}

static uint64_t fake_now(void *ctx)
{
	return ((struct sim *)ctx)->clock;
}

/* The tokens any correct schedule gives @r (greedy over the fake's logits). */
static void reference(const struct req *r, int32_t *out)
{
	uint64_t h = SEED;

	for (uint32_t i = 0; i < r->n_prompt; i++)
		h = mix(h, (uint64_t)r->prompt[i]);
	for (uint32_t k = 0; k < r->max_new; k++) {
		out[k] = (int32_t)((h >> 11) % M.n_vocab);
		h = mix(h, (uint64_t)out[k]);
	}
}

struct sim_opts {
	uint32_t n_blocks;
	uint32_t bt;
	uint32_t max_running;
	uint32_t prefill_chunk;
	enum kvp_sched_policy policy;
	uint32_t aging_ms;
	bool real;
	uint32_t tier_slots; /* a disk tier of this many slots (0: none) */
	bool speculative;    /* drafts on (KVP_SCHED_SPEC_ON), else off */
};

static int sim_new(struct sim *m, const struct sim_opts *o)
{
	struct kvp_pool_config pc = { 0 };
	struct kvp_sched_config sc = { 0 };

	memset(m, 0, sizeof(*m));
	m->real = o->real;
	m->bt = o->bt;
	m->clock = 1000000000ull;
	demo_costs(m);
	kvp_model_kv_shape(M.m, KVP_DTYPE_F32, o->bt, &pc.shape);
	pc.n_blocks = o->n_blocks;
	pc.pages = KVP_PAGES_OFF;
	pc.no_prefault = 1;
	if (kvp_pool_new(&m->pool, &pc) || kvp_index_new(&m->index, m->pool))
		return -1;
	if (o->tier_slots) {
		struct kvp_tier_config tc = { .queue_depth = 8, .lock_wait_ms = 100 };
		char path[320];

		if (kvp_test_tmpdir(m->tier_dir, sizeof(m->tier_dir)) < 0)
			return -1;
		snprintf(path, sizeof(path), "%s/tier", m->tier_dir);
		tc.path = path;
		memcpy(tc.model_fp, kvp_model_fingerprint(M.m), 16);
		tc.max_bytes = 4096 +
			       (uint64_t)o->tier_slots * 2 * kvp_pool_geom(m->pool)->block_stride;
		if (kvp_tier_open(&m->tier, &tc, m->pool) ||
		    kvp_tier_attach_index(m->tier, m->index))
			return -1;
	}
	m->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	m->hooks = (struct kvp_sched_hooks){
		.ctx = m,
		.prefill = fake_prefill,
		.decode = fake_decode,
		.now_ns = fake_now,
		.step = fake_step,
	};
	sc.pool = m->pool;
	sc.index = m->index;
	sc.model = M.m;
	sc.tok = M.tok;
	memcpy(sc.base_keys.model_fp, kvp_model_fingerprint(M.m), 16);
	sc.n_threads = 1;
	sc.max_running = o->max_running;
	sc.max_queued = MAX_REQ;
	sc.prefill_chunk = o->prefill_chunk ? o->prefill_chunk : 256;
	sc.event_capacity = 1 << 16;
	sc.ignore_eos = true;
	sc.wake_fd = m->efd;
	sc.policy = o->policy;
	sc.aging_ms = o->aging_ms ? o->aging_ms : 100;
	sc.hooks = o->real ? NULL : &m->hooks;
	sc.tier = m->tier;
	sc.tier_high_pct = 50;
	sc.tier_low_pct = 25;
	sc.speculative = o->speculative ? KVP_SCHED_SPEC_ON : KVP_SCHED_SPEC_OFF;
	return kvp_sched_new(&m->sched, &sc);
}

static void sim_free(struct sim *m)
{
	kvp_sched_free(m->sched);
	if (m->efd >= 0)
		close(m->efd);
	kvp_tier_free(m->tier);
	if (*m->tier_dir)
		kvp_test_rmtree(m->tier_dir);
	kvp_index_free(m->index);
	kvp_pool_free(m->pool);
}

static uint64_t sim_now(struct sim *m)
{
	struct timespec ts;

	if (!m->real)
		return m->clock;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A request slot with @n prompt tokens from @seed (tokens 3..258). */
static struct req *add_req(struct sim *m, uint32_t n, uint32_t max_new, uint32_t seed)
{
	struct req *r = &m->r[m->n_req++];
	uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

	assert_true(m->n_req <= MAX_REQ);
	memset(r, 0, sizeof(*r));
	r->n_prompt = n;
	r->max_new = max_new;
	r->conn = 1;
	kvp_test_fill_ids(&x, r->prompt, n, 256);
	return r;
}

/* Submit @r as received at @t_recv (the clock's now when 0). */
static int submit_at(struct sim *m, struct req *r, uint64_t t_recv)
{
	struct kvp_sched_req q = { .conn = r->conn,
				   .req_id = (uint64_t)(r - m->r) + 1,
				   .n_tokens = r->n_prompt,
				   .max_new = r->max_new,
				   .no_cache = r->no_cache,
				   .priority = r->priority,
				   .t_recv_ns = t_recv ? t_recv : sim_now(m) };
	int ret;

	q.tokens = malloc(r->n_prompt * sizeof(int32_t));
	memcpy(q.tokens, r->prompt, r->n_prompt * sizeof(int32_t));
	q.sample.top_p = 1.0f;
	if (r->salt) {
		q.salt_len = 4;
		memcpy(q.salt, &r->salt, 4);
	}
	ret = kvp_sched_submit(m->sched, &q);
	if (ret)
		free(q.tokens);
	else
		r->submitted = true;
	r->t_submit = q.t_recv_ns;
	return ret;
}

static int submit(struct sim *m, struct req *r)
{
	return submit_at(m, r, 0);
}

/*
 * Submit @r as arriving halfway through the last step, as a request reaching a busy
 * engine does on average: it waits for the rest of that step.
 */
static int submit_mid_step(struct sim *m, struct req *r)
{
	return submit_at(m, r, m->step_t0 + (m->step_t1 - m->step_t0) / 2);
}

/* Take every event: tokens, gaps, ends. */
static void drain_events(struct sim *m)
{
	struct kvp_sched_event ev[256];
	unsigned int n;

	while ((n = kvp_sched_poll_events(m->sched, ev, 256)) > 0) {
		for (unsigned int i = 0; i < n; i++) {
			struct req *r;

			if (ev[i].type == KVP_SCHED_EV_LEASE) {
				m->lease_id = ev[i].lease->hdr.lease_id;
				m->lease_blocks = ev[i].lease->hdr.n_blocks;
				free(ev[i].lease);
				continue;
			}
			assert_true(ev[i].req_id >= 1 && ev[i].req_id <= m->n_req);
			r = &m->r[ev[i].req_id - 1];
			if (r->closed)
				continue; /* queued before the close reached the engine */
			assert_false(r->ended);
			if (ev[i].type == KVP_SCHED_EV_TOKEN && ev[i].token >= 0) {
				uint64_t t = sim_now(m);

				assert_true(r->n_got < r->max_new);
				if (r->n_got) {
					r->gaps[r->n_got - 1] = t - r->t_last;
					if (t - r->t_last > r->max_gap)
						r->max_gap = t - r->t_last;
				} else {
					r->t_first = t;
				}
				r->t_last = t;
				r->got[r->n_got++] = ev[i].token;
			} else if (ev[i].type == KVP_SCHED_EV_DONE) {
				r->ended = true;
				r->usage = ev[i].usage;
				r->status = ev[i].usage.status;
				r->t_end = sim_now(m);
			} else if (ev[i].type == KVP_SCHED_EV_ERROR) {
				r->ended = true;
				r->error = true;
				r->status = ev[i].status;
				r->t_end = sim_now(m);
			}
		}
	}
}

/* One step, its events, and the accounting check. */
static bool step(struct sim *m)
{
	char err[256];
	bool more;

	m->step_t0 = sim_now(m);
	more = kvp_sched_step(m->sched);
	m->step_t1 = sim_now(m);
	drain_events(m);
	if (kvp_sched_check(m->sched, err, sizeof(err)))
		fail_msg("accounting: %s", err);
	if (m->violations)
		fail_msg("forward: %s", m->why);
	return more;
}

static void run_until_idle(struct sim *m, uint32_t max_steps)
{
	uint32_t i;

	for (i = 0; i < max_steps && step(m); i++)
		;
	assert_true(i < max_steps);
}

static void run_until(struct sim *m, const struct req *r, bool first_token, uint32_t max_steps)
{
	for (uint32_t i = 0; i < max_steps; i++) {
		if (first_token ? r->n_got > 0 : r->ended)
			return;
		step(m);
	}
	fail_msg("request never %s", first_token ? "got a token" : "ended");
}

static void expect_reference(const struct req *r)
{
	static int32_t want[MAX_GEN];

	reference(r, want);
	assert_int_equal(r->status, KVP_OK);
	assert_false(r->error);
	assert_int_equal(r->n_got, r->max_new);
	assert_memory_equal(r->got, want, r->n_got * sizeof(int32_t));
}

static uint32_t used_blocks(struct sim *m)
{
	struct kvp_pool_stats ps;
	uint32_t used = 0;

	kvp_pool_stats(m->pool, &ps);
	for (uint32_t a = 0; a < ps.n_arenas; a++)
		used += ps.arena[a].used;
	return used;
}

/* ---- the property test ---- */

static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
	uint64_t v = kvp_test_xorshift(&rng_state);

	return n ? (uint32_t)(v % n) : 0;
}

struct totals {
	uint64_t requests, preemptions, resumed_hits, cancels, closes, steps;
	uint64_t tiered, swapped, from_disk, offloaded;
	uint64_t drafting, drafted, accepted; /* schedules with drafts on, their draft rows */
};

static void one_schedule(uint64_t seed, struct totals *tot)
{
	static struct sim m;
	static int32_t want[MAX_GEN];
	static const uint32_t bts[] = { 4, 8, 16 };
	struct sim_opts o = { 0 };
	uint32_t n_planned, next = 0, steps = 0;
	uint32_t prefixes[3];

	rng_state = seed * 0x2545f4914f6cdd1dull + 7;
	o.bt = bts[rnd(3)];
	o.n_blocks = 6 + rnd(40);
	o.max_running = 1 + rnd(8);
	o.prefill_chunk = 4 + rnd(64);
	o.policy = rnd(5) ? KVP_SCHED_FAIR : KVP_SCHED_FIFO;
	o.aging_ms = 1 + rnd(200);
	o.tier_slots = rnd(3) ? 0 : 8 + rnd(64); /* a third with a disk tier: swap, reloads */
	/* half draft (FAIR only): every draft is verified, most rolled back, some kept */
	o.speculative = rnd(2);
	assert_int_equal(sim_new(&m, &o), 0);
	tot->tiered += o.tier_slots != 0;
	tot->drafting += o.speculative && o.policy == KVP_SCHED_FAIR;
	m.p0 = 1e6 * (1 + rnd(10));
	m.p1 = 1e5 * (1 + rnd(20));
	m.d0 = 1e6 * (1 + rnd(10));
	for (int i = 0; i < 3; i++)
		prefixes[i] = 1 + rnd(1000);
	n_planned = 1 + rnd(16);
	for (uint32_t i = 0; i < n_planned; i++) {
		uint32_t cap = o.n_blocks * o.bt; /* positions the pool holds */
		uint32_t n = 1 + rnd(cap < 160 ? cap : 160);
		uint32_t max_new = 1 + rnd(80);
		struct req *r;

		if (n + max_new - 1 > cap)
			max_new = cap - n + 1;
		r = add_req(&m, n, max_new, prefixes[rnd(3)]);
		/* a shared prefix of random length, then a tail of its own */
		for (uint32_t k = rnd(n + 1); k < n; k++)
			r->prompt[k] = 3 + (int32_t)rnd(256);
		r->priority = (int32_t)rnd(3) - 1;
		r->no_cache = !rnd(10);
		r->salt = rnd(4) ? 0 : 1 + rnd(2);
		r->conn = 1 + rnd(3);
	}
	for (;;) {
		bool more;

		/* arrivals, cancels, closes: between steps, as the loop thread would */
		while (next < m.n_req && !rnd(3)) {
			struct req *r = &m.r[next++];
			bool closed = false;

			for (uint32_t k = 0; k < m.n_req; k++)
				closed |= m.r[k].closed && m.r[k].conn == r->conn;
			if (closed) {
				r->closed = true; /* a closed connection sends nothing more */
				continue;
			}
			assert_int_equal(submit(&m, r), 0);
			tot->requests++;
		}
		if (!rnd(40)) {
			struct req *r = &m.r[rnd(m.n_req)];

			if (r->submitted && !r->ended && !r->cancelled && !r->closed) {
				kvp_sched_cancel(m.sched, r->conn, (uint64_t)(r - m.r) + 1);
				r->cancelled = true;
				tot->cancels++;
			}
		}
		if (!rnd(150)) {
			uint64_t conn = 1 + rnd(3);

			kvp_sched_conn_closed(m.sched, conn);
			for (uint32_t k = 0; k < m.n_req; k++)
				if (m.r[k].conn == conn)
					m.r[k].closed = true;
			tot->closes++;
		}
		more = step(&m);
		steps++;
		assert_true(steps < 50000);
		if (!more && next >= m.n_req)
			break;
	}
	/* everything ended, exactly once, with the tokens any schedule must give */
	assert_int_equal(kvp_sched_outstanding(m.sched), 0);
	for (uint32_t k = 0; k < m.n_req; k++) {
		struct req *r = &m.r[k];

		if (r->closed || !r->submitted)
			continue;
		assert_true(r->ended);
		if (r->error)
			fail_msg("schedule %llu, request %u: ERROR %u", (unsigned long long)seed, k,
				 r->status);
		reference(r, want);
		assert_memory_equal(r->got, want, r->n_got * sizeof(int32_t));
		if (!r->cancelled) {
			assert_int_equal(r->status, KVP_OK);
			assert_int_equal(r->n_got, r->max_new);
		} else {
			assert_true(r->status == KVP_OK || r->status == KVP_E_CANCELLED);
		}
		assert_int_equal(r->usage.generated_tokens, r->n_got);
		tot->preemptions += r->usage.preemptions;
		tot->swapped += r->usage.swapped_tokens;
		tot->from_disk += r->usage.cached_tokens_disk;
		if (r->usage.preemptions &&
		    r->usage.resume_computed_tokens < r->n_prompt + (r->n_got ? r->n_got - 1 : 0))
			tot->resumed_hits++;
	}
	/* the pool is back to its baseline: nothing held, the rest free or cached */
	assert_int_equal(used_blocks(&m), 0);
	tot->steps += steps;
	{
		struct kvp_sched_stats st;

		kvp_sched_get_stats(m.sched, &st);
		assert_true(st.spec_accepted <= st.spec_drafted);
		tot->drafted += st.spec_drafted;
		tot->accepted += st.spec_accepted;
	}
	if (m.tier) {
		struct kvp_tier_stats ts;

		kvp_tier_stats(m.tier, &ts);
		tot->offloaded += ts.writes;
		assert_int_equal(ts.checksum_failures, 0);
		assert_int_equal(ts.degraded, 0);
	}
	sim_free(&m);
}

static void test_random_schedules(void **state)
{
	/*
	 * thousands of random schedules: exact accounting after every step, no block leaked
	 * or held twice, no K/V mixed up, the pool back to baseline, the same tokens as any
	 * undisturbed run, whatever the preemptions
	 */
	struct totals tot = { 0 };
	uint32_t n = getenv("KVP_SCHED_SCHEDULES") ? (uint32_t)atoi(getenv("KVP_SCHED_SCHEDULES")) :
						     2000;

	for (uint32_t i = 0; i < n; i++)
		one_schedule(i + 1, &tot);
	print_message(
		"%u schedules: %llu requests, %llu steps, %llu preemptions "
		"(%llu resumed with cached blocks), %llu cancels, %llu closes; %llu with a disk "
		"tier: %llu blocks written, %llu tokens read back at admission, %llu after "
		"a preemption; %llu drafting: %llu draft rows verified, %llu kept\n",
		n, (unsigned long long)tot.requests, (unsigned long long)tot.steps,
		(unsigned long long)tot.preemptions, (unsigned long long)tot.resumed_hits,
		(unsigned long long)tot.cancels, (unsigned long long)tot.closes,
		(unsigned long long)tot.tiered, (unsigned long long)tot.offloaded,
		(unsigned long long)tot.from_disk, (unsigned long long)tot.swapped,
		(unsigned long long)tot.drafting, (unsigned long long)tot.drafted,
		(unsigned long long)tot.accepted);
	/* the schedules did exercise what they are for */
	assert_true(tot.preemptions > 100);
	assert_true(tot.resumed_hits > 10);
	assert_true(tot.cancels > 100);
	assert_true(tot.offloaded > 100);
	assert_true(tot.from_disk > 0);
	assert_true(tot.swapped > 0);
	assert_true(tot.drafted > 1000);
	assert_true(tot.accepted > 0);
}

/* ---- the policy's promises ---- */

static void test_early_stoppers_never_block(void **state)
{
	/*
	 * a request asking for 4,096 tokens that stops early takes blocks as it goes, so
	 * four more requests run next to it at once (FIFO, reserving the worst case, runs
	 * two of them); they finish while it still generates
	 */
	static struct sim m;
	struct sim_opts o = { .n_blocks = 300, .bt = 16, .max_running = 8 };
	struct kvp_sched_stats st;
	struct req *big;

	for (int pol = KVP_SCHED_FAIR; pol <= KVP_SCHED_FIFO; pol++) {
		o.policy = (enum kvp_sched_policy)pol;
		assert_int_equal(sim_new(&m, &o), 0);
		big = add_req(&m, 100, 4096, 1);
		assert_int_equal(submit(&m, big), 0);
		step(&m);
		for (uint32_t i = 0; i < 4; i++)
			assert_int_equal(submit(&m, add_req(&m, 100, 100, 10 + i)), 0);
		step(&m);
		kvp_sched_get_stats(m.sched, &st);
		if (pol == KVP_SCHED_FAIR) {
			assert_int_equal(st.running, 5);
			assert_int_equal(st.queued, 0);
			for (uint32_t i = 1; i <= 4; i++)
				run_until(&m, &m.r[i], false, 10000);
			assert_false(big->ended);
			assert_true(big->n_got > 0 && big->n_got < 4096);
			for (uint32_t i = 1; i <= 4; i++) {
				expect_reference(&m.r[i]);
				assert_int_equal(m.r[i].usage.preemptions, 0);
			}
		} else {
			assert_int_equal(st.running, 3); /* 263 + 2 x 13 of 300 blocks */
			assert_int_equal(st.queued, 2);
		}
		/* it stops early (its client had enough) */
		kvp_sched_cancel(m.sched, 1, 1);
		run_until_idle(&m, 100000);
		assert_int_equal(big->status, KVP_E_CANCELLED);
		assert_int_equal(used_blocks(&m), 0);
		sim_free(&m);
	}
}

/* Cache-pin @n of the cached blocks among @m's @n_blocks.  Return: how many it pinned. */
static uint32_t pin_cached(struct sim *m, uint32_t n_blocks, uint32_t n)
{
	uint32_t pinned = 0;

	for (uint32_t id = 0; pinned < n && id < n_blocks; id++)
		if (!kvp_pool_cache_pin(m->pool, id))
			pinned++;
	return pinned;
}

static void test_pinned_pool_refuses(void **state)
{
	/*
	 * 20 blocks, 10 of them cache-pinned: nothing running can free them, so a request
	 * that does not fit in the other 10 is refused, not left waiting (both policies),
	 * and one the fair policy admits (a short prompt) that outgrows them alone ends
	 * with the error after the tokens it had (FIFO refuses it: its worst case is 17)
	 */
	static struct sim m;
	struct sim_opts o = { .n_blocks = 20, .bt = 16, .max_running = 4 };

	(void)state;
	for (int pol = KVP_SCHED_FAIR; pol <= KVP_SCHED_FIFO; pol++) {
		struct req *seed, *big, *grows, *fits;

		o.policy = (enum kvp_sched_policy)pol;
		assert_int_equal(sim_new(&m, &o), 0);
		seed = add_req(&m, 160, 1, 1);
		assert_int_equal(submit(&m, seed), 0);
		run_until_idle(&m, 1000);
		expect_reference(seed);
		assert_int_equal(pin_cached(&m, o.n_blocks, 10), 10);

		big = add_req(&m, 200, 64, 2); /* 13 blocks of prompt */
		assert_int_equal(submit(&m, big), 0);
		run_until(&m, big, false, 100);
		assert_int_equal(big->status, KVP_E_NOSPACE);
		assert_int_equal(big->n_got, 0);

		grows = add_req(&m, 32, 240, 3); /* 17 blocks at the end */
		assert_int_equal(submit(&m, grows), 0);
		run_until(&m, grows, false, 1000);
		assert_int_equal(grows->status, KVP_E_NOSPACE);
		if (pol == KVP_SCHED_FAIR)
			assert_true(grows->n_got >= 100 && grows->n_got < 240);
		else
			assert_int_equal(grows->n_got, 0);

		/* what fits still runs, and nothing leaked */
		fits = add_req(&m, 32, 32, 4);
		assert_int_equal(submit(&m, fits), 0);
		run_until_idle(&m, 1000);
		expect_reference(fits);
		assert_int_equal(used_blocks(&m), 0);
		sim_free(&m);
	}
}

static void test_lease_holds_blocks(void **state)
{
	/*
	 * a lease's references are the accounting's too (kvp_sched_check() after every
	 * step): requests run beside it, pressure does not take its blocks, and RELEASE
	 * gives them back
	 */
	static struct sim m;
	struct sim_opts o = { .n_blocks = 24, .bt = 16, .max_running = 4 };
	struct kvp_sched_lease_ask a = {
		.conn = 9, .req_id = 1000, .ttl_ms = 60000, .max_per_conn = 4
	};
	struct req *first;

	(void)state;
	assert_int_equal(sim_new(&m, &o), 0);
	first = add_req(&m, 64, 1, 1);
	assert_int_equal(submit(&m, first), 0);
	run_until_idle(&m, 1000);
	a.tokens = first->prompt;
	a.n_tokens = first->n_prompt;
	assert_int_equal(kvp_sched_lease(m.sched, &a), 0);
	step(&m);
	assert_int_equal(m.lease_blocks, 4);
	assert_int_equal(used_blocks(&m), 4);
	for (uint32_t i = 0; i < 6; i++) /* 6 x 3 blocks through the other 20 */
		assert_int_equal(submit(&m, add_req(&m, 40, 2, 10 + i)), 0);
	run_until_idle(&m, 10000);
	for (uint32_t i = 1; i <= 6; i++)
		expect_reference(&m.r[i]);
	assert_int_equal(used_blocks(&m), 4);
	kvp_sched_release(m.sched, 9, m.lease_id);
	step(&m);
	assert_int_equal(used_blocks(&m), 0);
	sim_free(&m);
}

static void test_priority_orders_admission(void **state)
{
	/* one slot: low, normal, high queued in that order are admitted high, normal, low */
	static struct sim m;
	struct sim_opts o = { .n_blocks = 200, .bt = 16, .max_running = 1 };
	struct req *blocker, *lo, *mid, *hi;

	assert_int_equal(sim_new(&m, &o), 0);
	blocker = add_req(&m, 32, 20, 1);
	blocker->priority = 5; /* nothing queued outranks it: no preemption */
	assert_int_equal(submit(&m, blocker), 0);
	step(&m);
	lo = add_req(&m, 32, 4, 2);
	lo->priority = -1;
	mid = add_req(&m, 32, 4, 3);
	hi = add_req(&m, 32, 4, 4);
	hi->priority = 1;
	assert_int_equal(submit(&m, lo), 0);
	assert_int_equal(submit(&m, mid), 0);
	assert_int_equal(submit(&m, hi), 0);
	run_until_idle(&m, 10000);
	expect_reference(hi);
	expect_reference(mid);
	expect_reference(lo);
	assert_true(blocker->t_end <= hi->t_first);
	assert_true(hi->t_end <= mid->t_first);
	assert_true(mid->t_end <= lo->t_first);
	assert_int_equal(blocker->usage.preemptions, 0);
	sim_free(&m);
}

static void test_priority_orders_preemption(void **state)
{
	/*
	 * a full pool of normal requests: a high-priority one that does not fit preempts the
	 * latest admitted and starts at once; when blocks run short for growth, the latest
	 * admitted of the lowest priority goes; every request still gets its tokens
	 */
	static struct sim m;
	struct sim_opts o = { .n_blocks = 30, .bt = 16, .max_running = 8 };
	struct req *a, *b, *h;

	assert_int_equal(sim_new(&m, &o), 0);
	a = add_req(&m, 150, 200, 1); /* 10 blocks, up to 22 */
	b = add_req(&m, 150, 200, 2);
	assert_int_equal(submit(&m, a), 0);
	step(&m);
	assert_int_equal(submit(&m, b), 0);
	run_until(&m, b, true, 1000);
	h = add_req(&m, 120, 10, 3); /* needs 9 of the 30 - 21 held: does not fit */
	h->priority = 10;
	assert_int_equal(submit(&m, h), 0);
	step(&m);
	run_until(&m, h, false, 10000);
	expect_reference(h);
	assert_int_equal(h->usage.preemptions, 0);
	assert_true(h->usage.queue_ms < 1000); /* admitted at its first step */
	run_until_idle(&m, 100000);
	expect_reference(a);
	expect_reference(b);
	/* b was admitted after a: it is the victim, a never is */
	assert_int_equal(a->usage.preemptions, 0);
	assert_true(b->usage.preemptions >= 1);
	assert_int_equal(used_blocks(&m), 0);
	sim_free(&m);
}

/* The fake-clock time of @r's first token after its longest wait (a preemption). */
static uint64_t resumed_at(const struct req *r)
{
	uint64_t t = r->t_first, at = 0, longest = 0;

	for (uint32_t i = 0; i + 1 < r->n_got; i++) {
		t += r->gaps[i];
		if (r->gaps[i] > longest) {
			longest = r->gaps[i];
			at = t;
		}
	}
	return at;
}

static void test_preempted_resume_in_order(void **state)
{
	/*
	 * three normal requests run; a high-priority one needs the blocks of two: the latest
	 * admitted (c) goes, then b.  They come back in admission order (b, then c), both
	 * before a normal request that arrived after the preemption; all give their tokens
	 */
	static struct sim m;
	struct sim_opts o = { .n_blocks = 40, .bt = 16, .max_running = 3 };
	struct req *a, *b, *c, *h, *n;

	(void)state;
	assert_int_equal(sim_new(&m, &o), 0);
	a = add_req(&m, 100, 40, 1); /* 7 blocks of prompt, 9 at the end */
	b = add_req(&m, 100, 40, 2);
	c = add_req(&m, 100, 40, 3);
	assert_int_equal(submit(&m, a), 0);
	step(&m);
	assert_int_equal(submit(&m, b), 0);
	step(&m);
	assert_int_equal(submit(&m, c), 0);
	run_until(&m, c, true, 1000);
	h = add_req(&m, 480, 4, 4); /* 31 blocks: two of the three must go */
	h->priority = 10;
	assert_int_equal(submit(&m, h), 0);
	step(&m);
	n = add_req(&m, 100, 40, 5);
	assert_int_equal(submit(&m, n), 0);
	run_until_idle(&m, 100000);
	expect_reference(a);
	expect_reference(b);
	expect_reference(c);
	expect_reference(h);
	expect_reference(n);
	assert_int_equal(h->usage.preemptions, 0);
	assert_true(b->usage.preemptions >= 1);
	assert_true(c->usage.preemptions >= 1);
	assert_true(resumed_at(b) < resumed_at(c));
	assert_true(resumed_at(c) < n->t_first);
	if (a->usage.preemptions) /* when h's growth took a's blocks too */
		assert_true(resumed_at(a) < resumed_at(b));
	assert_int_equal(used_blocks(&m), 0);
	sim_free(&m);
}

static void test_priority_orders_prefill(void **state)
{
	/*
	 * two 2,000-token prompts: the normal one started first (less of it is left, and it
	 * soon waits past the aging time), the one of priority 5 came a step later; the
	 * prefill share goes by priority first, so the later one's first token comes first
	 */
	static struct sim m;
	struct sim_opts o = { .n_blocks = 400, .bt = 16, .max_running = 4 };
	struct req *lo, *hi;

	(void)state;
	assert_int_equal(sim_new(&m, &o), 0);
	lo = add_req(&m, 2000, 4, 1);
	hi = add_req(&m, 2000, 4, 2);
	hi->priority = 5;
	assert_int_equal(submit(&m, lo), 0);
	step(&m);
	assert_int_equal(submit(&m, hi), 0);
	run_until_idle(&m, 100000);
	expect_reference(lo);
	expect_reference(hi);
	assert_true(hi->t_first < lo->t_first);
	assert_int_equal(used_blocks(&m), 0);
	sim_free(&m);
}

static void test_preempt_real_model_same_tokens(void **state)
{
	/*
	 * the real forward pass: two requests that cannot both grow in the pool; the later
	 * is preempted and both give exactly the tokens each gives alone, whether its K/V
	 * comes back by recompute (through the prefix cache) or by swap (the disk tier)
	 */
	static struct sim m;
	struct sim_opts o = { .n_blocks = 20, .bt = 16, .max_running = 4, .real = true };
	int32_t alone[2][200];
	struct req *a, *c;

	for (int i = 0; i < 2; i++) {
		assert_int_equal(sim_new(&m, &o), 0);
		a = add_req(&m, 40, 200, 7 + i);
		assert_int_equal(submit(&m, a), 0);
		run_until_idle(&m, 100000);
		assert_int_equal(a->status, KVP_OK);
		assert_int_equal(a->n_got, 200);
		memcpy(alone[i], a->got, sizeof(alone[i]));
		sim_free(&m);
	}
	for (int swap = 0; swap < 2; swap++) {
		struct kvp_sched_stats st;

		o.tier_slots = swap ? 64 : 0;
		assert_int_equal(sim_new(&m, &o), 0);
		a = add_req(&m, 40, 200, 7);
		c = add_req(&m, 40, 200, 8);
		assert_int_equal(submit(&m, a), 0);
		assert_int_equal(submit(&m, c), 0);
		run_until_idle(&m, 100000);
		print_message("%s: preempted %u times, %u positions computed again, %u tokens "
			      "back from disk\n",
			      swap ? "swap" : "recompute", c->usage.preemptions,
			      c->usage.resume_computed_tokens, c->usage.swapped_tokens);
		assert_int_equal(a->status, KVP_OK);
		assert_int_equal(c->status, KVP_OK);
		assert_int_equal(a->usage.preemptions, 0);
		assert_true(c->usage.preemptions >= 1);
		if (swap)
			assert_true(c->usage.swapped_tokens > 0);
		else
			assert_true(c->usage.resume_computed_tokens > 0);
		/* the status report's scheduler.preemptions_swapped: only with the tier */
		kvp_sched_get_stats(m.sched, &st);
		assert_true(st.preemptions >= 1);
		if (swap)
			assert_true(st.preempt_swapped > 0);
		else
			assert_int_equal(st.preempt_swapped, 0);
		assert_true(st.preempt_swapped <= st.preemptions);
		assert_int_equal(a->n_got, 200);
		assert_int_equal(c->n_got, 200);
		assert_memory_equal(a->got, alone[0], sizeof(alone[0]));
		assert_memory_equal(c->got, alone[1], sizeof(alone[1]));
		assert_int_equal(used_blocks(&m), 0);
		sim_free(&m);
	}
}

/* TTFT (fake ns) of a 16-token request alone. */
static uint64_t short_alone(enum kvp_sched_policy pol)
{
	static struct sim m;
	struct sim_opts o = { .n_blocks = 400, .bt = 16, .max_running = 8, .policy = pol };
	struct req *r;
	uint64_t t;

	assert_int_equal(sim_new(&m, &o), 0);
	step(&m); /* calibration */
	r = add_req(&m, 16, 1, 99);
	assert_int_equal(submit(&m, r), 0);
	run_until_idle(&m, 100);
	t = (uint64_t)(r->usage.ttft_ms * 1e6);
	sim_free(&m);
	return t;
}

static void test_short_prompt_goes_first(void **state)
{
	/*
	 * a 16-token request arriving while a 4,000-token prompt prefills gets its first
	 * token long before the long one, within 3x its time alone (FIFO: far beyond, it
	 * waits for the whole prefill)
	 */
	static struct sim m;
	struct sim_opts o = { .n_blocks = 400, .bt = 16, .max_running = 8 };
	uint64_t alone = short_alone(KVP_SCHED_FAIR);
	double ratio[2];

	for (int pol = KVP_SCHED_FAIR; pol <= KVP_SCHED_FIFO; pol++) {
		struct req *l, *s;

		o.policy = (enum kvp_sched_policy)pol;
		assert_int_equal(sim_new(&m, &o), 0);
		l = add_req(&m, 4000, 1, 1);
		assert_int_equal(submit(&m, l), 0);
		for (int i = 0; i < 4; i++)
			step(&m);
		s = add_req(&m, 16, 1, 2);
		assert_int_equal(submit_mid_step(&m, s), 0);
		run_until_idle(&m, 100000);
		expect_reference(l);
		expect_reference(s);
		/* the engine's TTFT: from receipt to the token leaving the engine */
		ratio[pol] = s->usage.ttft_ms * 1e6 / (double)alone;
		if (pol == KVP_SCHED_FAIR)
			assert_true(s->usage.ttft_ms < l->usage.ttft_ms);
		sim_free(&m);
	}
	print_message("16-token TTFT during a 4000-token prefill / alone: fair %.2f, fifo %.2f\n",
		      ratio[KVP_SCHED_FAIR], ratio[KVP_SCHED_FIFO]);
	/*
	 * the prefill step under way (the chunk worth 4 fixed costs of a call: the long
	 * prompt's 1.3x) and its own: the 3x (the clock is the test's:
	 * deterministic)
	 */
	assert_true(ratio[KVP_SCHED_FAIR] <= 3.0);
	assert_true(ratio[KVP_SCHED_FIFO] > 10.0);
}

static uint64_t median_gap(const struct req *r)
{
	static uint64_t v[MAX_GEN];
	uint32_t n = r->n_got > 1 ? r->n_got - 1 : 0;

	memcpy(v, r->gaps, n * sizeof(v[0]));
	for (uint32_t i = 1; i < n; i++)
		for (uint32_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
			uint64_t t = v[j];

			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	return n ? v[n / 2] : 0;
}

static void test_stream_gap_bounded(void **state)
{
	/*
	 * a stream generating while a 4,000-token prompt prefills: its largest gap between
	 * tokens stays within 3x its median alone (FIFO: a whole 256-token chunk per gap)
	 */
	static struct sim m;
	struct sim_opts o = { .n_blocks = 600, .bt = 16, .max_running = 8 };
	double ratio[2];

	for (int pol = KVP_SCHED_FAIR; pol <= KVP_SCHED_FIFO; pol++) {
		struct req *st, *l;
		uint64_t med;

		o.policy = (enum kvp_sched_policy)pol;
		assert_int_equal(sim_new(&m, &o), 0);
		st = add_req(&m, 16, 4000, 1);
		assert_int_equal(submit(&m, st), 0);
		for (int i = 0; i < 40; i++)
			step(&m);
		med = median_gap(st);
		st->max_gap = 0;
		l = add_req(&m, 4000, 1, 2);
		assert_int_equal(submit(&m, l), 0);
		run_until(&m, l, false, 100000);
		assert_false(st->ended);
		ratio[pol] = (double)st->max_gap / (double)med;
		expect_reference(l);
		kvp_sched_cancel(m.sched, 1, 1);
		run_until_idle(&m, 100000);
		sim_free(&m);
	}
	print_message("largest gap during a 4000-token prefill / median alone: fair %.2f, "
		      "fifo %.2f\n",
		      ratio[KVP_SCHED_FAIR], ratio[KVP_SCHED_FIFO]);
	/*
	 * the step budget: itl_budget_pct (200) of a decode step of one here (27 ms; one
	 * mixed call per step carries the stream's row with the chunk), a decode step alone
	 * 13.5: the 3x
	 */
	assert_true(ratio[KVP_SCHED_FAIR] <= 3.0);
	assert_true(ratio[KVP_SCHED_FIFO] > 10.0);
}

static void test_stream_gap_bounded_drafting(void **state)
{
	/*
	 * the same with speculative decoding on: the stream's draft rows (prompt lookup
	 * over its own tokens; the fake model's picks rarely agree, so nearly every draft
	 * is verified and rolled back, each row paid for) come out of the step's time
	 * budget beside the prefill chunk, so its largest gap during the 4,000-token
	 * prefill stays within 3x its median gap alone without drafts, and its tokens
	 * and the long prompt's are what any schedule gives them
	 */
	static struct sim m;
	struct sim_opts o = { .n_blocks = 600, .bt = 16, .max_running = 8 };
	uint64_t med_plain = 0, max_gap = 0;
	struct kvp_sched_stats st0, st1;

	for (int spec = 0; spec <= 1; spec++) {
		struct req *s, *l;

		o.speculative = spec;
		assert_int_equal(sim_new(&m, &o), 0);
		s = add_req(&m, 16, 2000, 1);
		assert_int_equal(submit(&m, s), 0);
		for (int i = 0; i < 40; i++)
			step(&m);
		if (!spec)
			med_plain = median_gap(s);
		s->max_gap = 0;
		kvp_sched_get_stats(m.sched, &st0);
		l = add_req(&m, 4000, 1, 2);
		assert_int_equal(submit(&m, l), 0);
		run_until(&m, l, false, 100000);
		kvp_sched_get_stats(m.sched, &st1);
		assert_false(s->ended);
		expect_reference(l);
		if (spec) {
			max_gap = s->max_gap;
			/* the stream drafted during the prefill: the rows were there to pay for */
			assert_true(st1.spec_drafted > st0.spec_drafted);
		} else {
			assert_int_equal(st1.spec_drafted, 0);
		}
		run_until(&m, s, false, 100000);
		expect_reference(s);
		assert_int_equal(m.violations, 0);
		run_until_idle(&m, 100000);
		assert_int_equal(used_blocks(&m), 0);
		sim_free(&m);
	}
	print_message("largest gap during a 4000-token prefill with drafts / median alone "
		      "without: %.2f\n",
		      (double)max_gap / (double)med_plain);
	assert_true(med_plain > 0);
	assert_true((double)max_gap <= 3.0 * (double)med_plain);
}

static void test_long_prefill_within_bound(void **state)
{
	/*
	 * a 4,000-token prompt with short requests arriving during its prefill: they go
	 * first, and its own prefill (the time computing it) and its first token (after
	 * theirs too) take at most 1.3x what the first policy gives it (the bound:
	 * a prefill step alone pays a call's fixed cost for 4 of its own work, 1.25x at
	 * most, and is short enough for a request arriving during it: 3x its time alone)
	 */
	static struct sim m;
	struct sim_opts o = { .n_blocks = 600, .bt = 16, .max_running = 16 };
	double ttft[2], prefill[2];

	for (int pol = KVP_SCHED_FAIR; pol <= KVP_SCHED_FIFO; pol++) {
		struct req *l;

		o.policy = (enum kvp_sched_policy)pol;
		assert_int_equal(sim_new(&m, &o), 0);
		step(&m);
		l = add_req(&m, 4000, 1, 1);
		assert_int_equal(submit(&m, l), 0);
		for (uint32_t i = 0; i < 6; i++) {
			for (int k = 0; k < 5; k++)
				step(&m);
			assert_int_equal(submit_mid_step(&m, add_req(&m, 16, 1, 10 + i)), 0);
		}
		run_until_idle(&m, 100000);
		expect_reference(l);
		ttft[pol] = l->usage.ttft_ms;
		prefill[pol] = l->usage.prefill_ms;
		sim_free(&m);
	}
	print_message("4000-token prompt with 6 short requests, fair / fifo: prefill time %.3f, "
		      "first token %.3f\n",
		      prefill[KVP_SCHED_FAIR] / prefill[KVP_SCHED_FIFO],
		      ttft[KVP_SCHED_FAIR] / ttft[KVP_SCHED_FIFO]);
	/* its own prefill: the price of smaller chunks; its first token: also the shorts' */
	assert_true(prefill[KVP_SCHED_FAIR] <= 1.3 * prefill[KVP_SCHED_FIFO]);
	assert_true(ttft[KVP_SCHED_FAIR] <= 1.3 * ttft[KVP_SCHED_FIFO]);
}

/*
 * @n clients that send a 100-token prompt at once, each asking for @max_new tokens and
 * stopping after @keep (chat clients that ask for much and stop early, as bench-sched's
 * throughput runs), on a pool of @n_blocks: the fake time from their arrival to the
 * last one's last token.  *@first_gap: the largest gap between a client's first and
 * second token, *@later_gap the largest after that; *@ttft_steps: the most steps a
 * client's first token took (usage.ttft_steps).
 */
static uint64_t burst_time(enum kvp_sched_policy pol, uint32_t n, uint32_t max_new, uint32_t keep,
			   uint32_t n_blocks, uint64_t *first_gap, uint64_t *later_gap,
			   uint32_t *ttft_steps)
{
	static struct sim m;
	struct sim_opts o = { .n_blocks = n_blocks, .bt = 16, .max_running = 64, .policy = pol };
	uint64_t t0, end = 0;
	uint32_t left = n;

	assert_int_equal(sim_new(&m, &o), 0);
	step(&m); /* calibration */
	t0 = sim_now(&m);
	for (uint32_t i = 0; i < n; i++)
		assert_int_equal(submit(&m, add_req(&m, 100, max_new, 10 + i)), 0);
	for (uint32_t k = 0; left && k < 100000; k++) {
		step(&m);
		for (uint32_t i = 0; i < n; i++) {
			struct req *r = &m.r[i];

			if (r->cancelled || r->n_got < keep)
				continue;
			if (!r->ended)
				kvp_sched_cancel(m.sched, r->conn, i + 1);
			r->cancelled = true;
			left--;
		}
	}
	assert_int_equal(left, 0);
	run_until_idle(&m, 100000);
	*first_gap = *later_gap = 0;
	*ttft_steps = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct req *r = &m.r[i];
		uint64_t t_keep = r->t_first;

		for (uint32_t g = 0; g + 1 < keep; g++) {
			uint64_t *w = g ? later_gap : first_gap;

			t_keep += r->gaps[g];
			*w = r->gaps[g] > *w ? r->gaps[g] : *w;
		}
		end = t_keep > end ? t_keep : end;
		if (r->usage.ttft_steps > *ttft_steps)
			*ttft_steps = r->usage.ttft_steps;
		assert_int_equal(r->usage.preemptions, 0);
	}
	sim_free(&m);
	return end - t0;
}

static void test_burst_throughput(void **state)
{
	/*
	 * prompts that arrive together are computed together before the streams they start
	 * are held to a gap: 8 and 32 clients at once take no longer than the first policy
	 * gives them where it can run them all (max_new 64, pool for all), and 1.3x less
	 * where its reservations of the worst case limit it (max_new 4,096 on 300 blocks:
	 * it runs one at a time); the clock is the test's (deterministic)
	 */
	static const struct {
		uint32_t n, max_new, n_blocks;
		double least;
	} c[] = {
		{ 8, 64, 600, 1.0 },
		{ 32, 64, 1200, 1.0 },
		{ 8, 4096, 300, 1.3 },
	};

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		uint64_t t[2], g1[2], g[2];
		uint32_t steps[2];

		for (int pol = KVP_SCHED_FAIR; pol <= KVP_SCHED_FIFO; pol++)
			t[pol] = burst_time((enum kvp_sched_policy)pol, c[i].n, c[i].max_new, 64,
					    c[i].n_blocks, &g1[pol], &g[pol], &steps[pol]);
		print_message("%u clients at once (max_new %u, %u blocks): tokens/s fair / fifo "
			      "%.2f; the last first token after %u / %u steps; largest gap %.1f / "
			      "%.1f ms (the first %.1f / %.1f)\n",
			      c[i].n, c[i].max_new, c[i].n_blocks,
			      (double)t[KVP_SCHED_FIFO] / (double)t[KVP_SCHED_FAIR],
			      steps[KVP_SCHED_FAIR], steps[KVP_SCHED_FIFO], g[KVP_SCHED_FAIR] / 1e6,
			      g[KVP_SCHED_FIFO] / 1e6, g1[KVP_SCHED_FAIR] / 1e6,
			      g1[KVP_SCHED_FIFO] / 1e6);
		assert_true((double)t[KVP_SCHED_FIFO] >= c[i].least * (double)t[KVP_SCHED_FAIR]);
		/*
		 * the burst's prompts whole, as many a step as fit in the first policy's
		 * 256 tokens (2), and one step more
		 */
		assert_true(steps[KVP_SCHED_FAIR] <= (c[i].n + 1) / 2 + 1);
	}
}

static void test_burst_short_not_widened(void **state)
{
	/*
	 * a 16-token prompt that arrives with a 4,000-token one (one burst, two wide) gets
	 * its first token from a step of its own, not from one that also holds a chunk of
	 * the long prompt as wide as the burst: within 3x its time alone (a step two steps
	 * alone wide would be 3.8x here)
	 */
	static struct sim m;
	struct sim_opts o = { .n_blocks = 400, .bt = 16, .max_running = 8 };
	uint64_t alone = short_alone(KVP_SCHED_FAIR);
	struct req *l, *sh;

	assert_int_equal(sim_new(&m, &o), 0);
	step(&m); /* calibration */
	l = add_req(&m, 4000, 1, 1);
	sh = add_req(&m, 16, 1, 2);
	assert_int_equal(submit(&m, l), 0);
	assert_int_equal(submit(&m, sh), 0);
	run_until_idle(&m, 100000);
	expect_reference(l);
	expect_reference(sh);
	print_message("16-token prompt arriving with a 4000-token one: TTFT / alone %.2f\n",
		      sh->usage.ttft_ms * 1e6 / (double)alone);
	assert_int_equal(sh->usage.ttft_steps, 1);
	assert_true(sh->usage.ttft_ms * 1e6 <= 3.0 * (double)alone);
}

static void test_burst_keeps_stream_gap(void **state)
{
	/*
	 * a stream generating when 8 clients send their prompts at once is held to its gap
	 * (it is not of their burst): its largest gap while they prefill stays within 3x
	 * its median alone, and every one of them gets its tokens
	 */
	static struct sim m;
	struct sim_opts o = { .n_blocks = 600, .bt = 16, .max_running = 16 };
	struct req *st;
	uint64_t med;

	assert_int_equal(sim_new(&m, &o), 0);
	st = add_req(&m, 16, 4000, 1);
	assert_int_equal(submit(&m, st), 0);
	for (int i = 0; i < 40; i++)
		step(&m);
	med = median_gap(st);
	st->max_gap = 0;
	for (uint32_t i = 0; i < 8; i++)
		assert_int_equal(submit(&m, add_req(&m, 100, 8, 10 + i)), 0);
	for (uint32_t i = 1; i <= 8; i++)
		run_until(&m, &m.r[i], false, 100000);
	assert_false(st->ended);
	print_message("a stream's largest gap while 8 prompts at once prefill / median alone: "
		      "%.2f\n",
		      (double)st->max_gap / (double)med);
	assert_true(st->max_gap <= 3 * med);
	for (uint32_t i = 1; i <= 8; i++)
		expect_reference(&m.r[i]);
	kvp_sched_cancel(m.sched, 1, 1);
	run_until_idle(&m, 100000);
	sim_free(&m);
}

/*
 * @n 100-token prompts sent at once, arriving over @spread steps (a third of them after
 * each step) as a loaded machine's clients do; a fresh sim each.  Return: the steps from
 * the first arrival until every one has its first token.
 */
static uint32_t straggled_burst_steps(uint32_t n, uint32_t spread)
{
	static struct sim m;
	struct sim_opts o = { .n_blocks = 600, .bt = 16, .max_running = 64 };
	uint32_t sent = 0, steps = 0, firsts = 0;

	assert_int_equal(sim_new(&m, &o), 0);
	step(&m); /* calibration */
	while (firsts < n) {
		/* after step k (k < spread), the k-th share of them */
		uint32_t upto = steps < spread ? n * (steps + 1) / (spread + 1) : n;

		for (; sent < upto; sent++)
			assert_int_equal(submit(&m, add_req(&m, 100, 8, 10 + sent)), 0);
		step(&m);
		steps++;
		firsts = 0;
		for (uint32_t i = 0; i < sent; i++)
			firsts += m.r[i].n_got > 0;
		assert_true(steps < 1000);
	}
	run_until_idle(&m, 100000);
	for (uint32_t i = 0; i < n; i++)
		expect_reference(&m.r[i]);
	sim_free(&m);
	return steps;
}

static void test_burst_stragglers_join(void **state)
{
	/*
	 * 8 prompts sent at once whose last ones reach the engine a step or two after the
	 * first (a loaded machine's client threads) are still one burst: their first tokens
	 * come as soon, counted from the last arrival, as when all arrive together, not
	 * after the narrow steps a prompt arriving later brings back (orders of steps on
	 * the fake clock: deterministic)
	 */
	uint32_t together = straggled_burst_steps(8, 0);
	uint32_t straggled = straggled_burst_steps(8, 2);

	print_message("8 prompts at once: every first token after %u steps; arriving over 3 "
		      "steps: after %u\n",
		      together, straggled);
	assert_true(straggled <= together + 2);
}

static void test_burst_stragglers_share_prefix(void **state)
{
	/*
	 * four clients sending one fresh 1,500-token prefix (each its own tail), one
	 * arriving after each step: the prefix is computed once, by the first; the others
	 * wait for it (prefix_waits), then compute only their tails from the blocks it
	 * published, and all are of the first one's burst
	 */
	static struct sim m;
	struct sim_opts o = { .n_blocks = 600, .bt = 16, .max_running = 16 };
	const uint32_t prefix = 1500, shared = prefix / 16 * 16;
	struct kvp_sched_stats a, b;
	uint64_t computed = 0;
	uint32_t owners = 0;

	assert_int_equal(sim_new(&m, &o), 0);
	step(&m); /* calibration */
	kvp_sched_get_stats(m.sched, &a);
	for (uint32_t i = 0; i < 4; i++) {
		struct req *r = add_req(&m, prefix + 16 + i, 8, 20 + i);

		if (i)
			memcpy(r->prompt, m.r[0].prompt, prefix * sizeof(int32_t));
		assert_int_equal(submit(&m, r), 0);
		step(&m);
	}
	run_until_idle(&m, 100000);
	kvp_sched_get_stats(m.sched, &b);
	for (uint32_t i = 0; i < 4; i++) {
		const struct req *r = &m.r[i];

		expect_reference(r);
		computed += r->usage.recomputed_tokens;
		if (!r->usage.cached_tokens) {
			owners++;
			assert_int_equal(r->usage.recomputed_tokens, r->n_prompt);
		} else {
			assert_int_equal(r->usage.cached_tokens, shared);
			assert_int_equal(r->usage.recomputed_tokens, r->n_prompt - shared);
		}
	}
	assert_int_equal(owners, 1);
	assert_int_equal(b.prefix_waits - a.prefix_waits, 3);
	/* every prompt position computed is one of those: the prefix once */
	assert_int_equal(b.prefill_tokens - a.prefill_tokens, computed);
	assert_int_equal(computed, prefix + 16 + 3 * (prefix - shared) + 17 + 18 + 19);
	sim_free(&m);
}

static void test_aging_prevents_starvation(void **state)
{
	/*
	 * short prompts arriving faster than a step can take them would keep a long prompt
	 * waiting forever under plain shortest-first; with aging it finishes while they
	 * still arrive
	 */
	static struct sim m;
	struct sim_opts o = { .n_blocks = 2000, .bt = 16, .max_running = 64, .aging_ms = 250 };
	struct req *l;
	uint32_t flood = 0;

	assert_int_equal(sim_new(&m, &o), 0);
	step(&m);
	l = add_req(&m, 400, 1, 1);
	assert_int_equal(submit(&m, l), 0);
	while (!l->ended && m.n_req < MAX_REQ - 3) {
		for (int k = 0; k < 3; k++) {
			struct req *r = add_req(&m, 48, 1, 100 + m.n_req);

			assert_int_equal(submit(&m, r), 0);
			flood++;
		}
		step(&m);
		step(&m);
	}
	print_message("long prompt done after %u short requests arrived\n", flood);
	assert_true(l->ended);
	run_until_idle(&m, 100000);
	expect_reference(l);
	sim_free(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_schedules),
		cmocka_unit_test(test_early_stoppers_never_block),
		cmocka_unit_test(test_pinned_pool_refuses),
		cmocka_unit_test(test_lease_holds_blocks),
		cmocka_unit_test(test_priority_orders_admission),
		cmocka_unit_test(test_priority_orders_preemption),
		cmocka_unit_test(test_preempted_resume_in_order),
		cmocka_unit_test(test_priority_orders_prefill),
		cmocka_unit_test(test_preempt_real_model_same_tokens),
		cmocka_unit_test(test_short_prompt_goes_first),
		cmocka_unit_test(test_stream_gap_bounded),
		cmocka_unit_test(test_stream_gap_bounded_drafting),
		cmocka_unit_test(test_long_prefill_within_bound),
		cmocka_unit_test(test_aging_prevents_starvation),
		cmocka_unit_test(test_burst_throughput),
		cmocka_unit_test(test_burst_short_not_widened),
		cmocka_unit_test(test_burst_keeps_stream_gap),
		cmocka_unit_test(test_burst_stragglers_join),
		cmocka_unit_test(test_burst_stragglers_share_prefix),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
