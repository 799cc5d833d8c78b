/* SPDX-License-Identifier: MIT */
/*
 * test_cache.c - prompt-cache control against a real kvpoold (the tiny model, blocks of
 * 16 tokens, cache.min_tokens 8, pins allowed), each request built to cause one outcome:
 *  - every miss_reason the daemon can produce: no_prefix, none, salt_mismatch (and its
 *    paired control: the same salt hits), disabled (no-cache), below_minimum,
 *    below_block, evicted (memory, after a flush), with matched_blocks and the
 *    recomputed tokens; the status counters equal the requests made;
 *  - breakpoints publish exactly the prefix up to the last one;
 *  - pins survive a flush, unpin lets them go; a daemon without cache.pin_allowed
 *    refuses pin and flush with KVP_E_DENIED;
 *  - parallel sampling: n = 3 continuations, each equal to a run alone with seed + i,
 *    the prompt counted once, the partly filled last block copied n - 1 times;
 *  - multi-turn: a second turn hits the first turn's blocks, its reply's included.
 * All of it twice: with the default f16 K/V and with int8 K/V (group "cache-int8": hits
 * and reuse over quantized blocks, the copy of a partly filled block taking its staged
 * keys along, so that the continuations still equal the runs alone).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kvpool/kvpool.h"
#include "tests/integration/jsonq.h"
#include "tests/integration/kvpd.h"

#define BT 16
#define MAXT 64

struct fixture {
	struct kvpd d; /* first: kvpd_teardown() */
};

static int setup_args(void **state, const char *const *args)
{
	struct fixture *f = calloc(1, sizeof(*f));

	*state = f;
	if (!f)
		return -1;
	return kvpd_setup(&f->d, "tiny", args);
}

static int setup(void **state)
{
	const char *args[] = { "--pool-size",
			       "64M",
			       "--cache-min-tokens",
			       "8",
			       "--cache-pin-allowed",
			       "--ignore-eos",
			       "--threads",
			       "1",
			       NULL };

	return setup_args(state, args);
}

static int setup_int8(void **state)
{
	const char *args[] = { "--pool-size",
			       "64M",
			       "--cache-min-tokens",
			       "8",
			       "--cache-pin-allowed",
			       "--ignore-eos",
			       "--threads",
			       "1",
			       "--kv-dtype",
			       "int8",
			       NULL };
	int r = setup_args(state, args);

	if (!r &&
	    kvpd_status_num(&((struct fixture *)*state)->d, "pool.bytes_per_token", 0) !=
		    kvpd_status_num(&((struct fixture *)*state)->d, "pool.block_bytes", 0) / BT)
		return -1;
	return r;
}

static int setup_int4(void **state)
{
	const char *args[] = { "--pool-size", "64M", "--cache-min-tokens", "8",	   "--ignore-eos",
			       "--threads",   "1",   "--kv-dtype",	   "int4", NULL };
	int r = setup_args(state, args);

	if (!r &&
	    kvpd_status_num(&((struct fixture *)*state)->d, "pool.bytes_per_token", 0) !=
		    kvpd_status_num(&((struct fixture *)*state)->d, "pool.block_bytes", 0) / BT)
		return -1;
	return r;
}

static int setup_no_pin(void **state)
{
	const char *args[] = { "--pool-size", "64M", NULL };

	return setup_args(state, args);
}

/* ids base, base+1, ... (the tiny model's vocabulary is larger than any used here) */
static void fill(int32_t *t, uint32_t n, int32_t base)
{
	for (uint32_t i = 0; i < n; i++)
		t[i] = base + (int32_t)i;
}

/* What one request gave back. */
struct result {
	struct kvp_usage u;
	struct kvp_cache_usage cu;
	int32_t toks[KVP_PARALLEL_MAX][MAXT];
	uint32_t n_toks[KVP_PARALLEL_MAX];
};

/*
 * One request of @n tokens (salt @salt), @cc sent, greedy unless @temp; the tokens of
 * each continuation kept.  Return its status.
 */
static int run(struct fixture *f, const int32_t *t, uint32_t n, const char *salt,
	       const struct kvp_cache_ctl *cc, bool no_cache, float temp, uint64_t seed,
	       uint32_t max_new, struct result *res)
{
	struct kvp_client_prompt pr = { .tokens = t, .n_tokens = n };
	struct kvp_cache_ctl none = { 0 };
	struct kvp_client_params p;
	struct kvp_client_event ev;
	struct kvp_client *c;
	uint64_t id;
	int r;

	memset(res, 0, sizeof(*res));
	r = kvp_client_connect(&c, f->d.sock);
	assert_int_equal(r, 0);
	assert_int_equal(kvp_client_set_cache(c, cc ? cc : &none), 0);
	kvp_client_params_init(&p);
	p.max_new_tokens = max_new;
	p.no_cache = no_cache;
	p.temperature = temp;
	p.seed = seed;
	p.salt = salt;
	p.salt_len = salt ? strlen(salt) : 0;
	r = kvp_client_submit(c, &pr, &p, &id);
	while (!r) {
		r = kvp_client_next(c, &ev);
		if (r)
			break;
		if (ev.type == KVP_EVENT_TOKEN) {
			int k = kvp_client_event_cont(c);

			k = k < 0 ? 0 : k;
			for (uint32_t i = 0; i < ev.n_tokens && res->n_toks[k] < MAXT; i++)
				res->toks[k][res->n_toks[k]++] = ev.tokens[i];
		} else if (ev.type == KVP_EVENT_DONE) {
			res->u = ev.usage;
			assert_int_equal(kvp_client_event_cache(c, &res->cu), 1);
			r = ev.status;
			break;
		} else if (ev.type == KVP_EVENT_ERROR) {
			r = ev.status;
			break;
		}
	}
	kvp_client_close(c);
	return r;
}

static double status_num(struct fixture *f, const char *path)
{
	struct jsonq *j = kvpd_status(&f->d);
	double v;

	assert_non_null(j);
	v = jsonq_num(j, path, -1);
	jsonq_free(j);
	return v;
}

/*
 * @path of the status report once it equals @want (the engine publishes its counters
 * at the end of a step, which may come just after the DONE the test saw); 5 s at most.
 */
static double status_wait(struct fixture *f, const char *path, double want)
{
	double v = -1;

	for (int i = 0; i < 500; i++) {
		v = status_num(f, path);
		if (v == want)
			break;
		usleep(10000);
	}
	return v;
}

static uint32_t do_flush(struct fixture *f, int want)
{
	struct kvp_client *c;
	uint32_t blocks = 0;

	assert_int_equal(kvp_client_connect(&c, f->d.sock), 0);
	assert_int_equal(kvp_client_flush(c, &blocks), want);
	kvp_client_close(c);
	return blocks;
}

static int do_pin(struct fixture *f, const int32_t *t, uint32_t n, bool unpin, uint32_t *blocks)
{
	struct kvp_client_prompt pr = { .tokens = t, .n_tokens = n };
	struct kvp_client *c;
	int r;

	assert_int_equal(kvp_client_connect(&c, f->d.sock), 0);
	r = kvp_client_pin(c, &pr, NULL, 0, unpin, blocks);
	kvp_client_close(c);
	return r;
}

static void test_miss_reasons(void **state)
{
	struct fixture *f = *state;
	int32_t p[64], small[5], mid[12];
	struct result r;

	fill(p, 64, 10);
	fill(small, 5, 150);
	fill(mid, 12, 160);
	/* 1. never seen */
	assert_int_equal(run(f, p, 64, "a", NULL, false, 0, 0, 2, &r), 0);
	assert_int_equal(r.cu.miss_reason, KVP_MISS_NO_PREFIX);
	assert_int_equal(r.cu.matched_blocks, 0);
	assert_int_equal(r.cu.ttl_s, 300);
	/* 2. again: every block a lookup can cover ((64 - 1) / 16 = 3) */
	assert_int_equal(run(f, p, 64, "a", NULL, false, 0, 0, 2, &r), 0);
	assert_int_equal(r.cu.miss_reason, KVP_MISS_NONE);
	assert_int_equal(r.cu.matched_blocks, 3);
	assert_int_equal(r.u.cached_tokens, 48);
	/* 3. another salt: the prefix exists, not for it */
	assert_int_equal(run(f, p, 64, "b", NULL, false, 0, 0, 2, &r), 0);
	assert_int_equal(r.cu.miss_reason, KVP_MISS_SALT_MISMATCH);
	assert_int_equal(r.u.cached_tokens, 0);
	/* 4. the paired control: salt a still hits */
	assert_int_equal(run(f, p, 64, "a", NULL, false, 0, 0, 2, &r), 0);
	assert_int_equal(r.cu.miss_reason, KVP_MISS_NONE);
	/* 5. no-cache */
	assert_int_equal(run(f, p, 64, "a", NULL, true, 0, 0, 2, &r), 0);
	assert_int_equal(r.cu.miss_reason, KVP_MISS_DISABLED);
	assert_int_equal(r.u.cached_tokens, 0);
	assert_int_equal(r.u.cache_creation_tokens, 0);
	/* 6. below cache.min_tokens (8): neither read nor published, twice */
	assert_int_equal(run(f, small, 5, NULL, NULL, false, 0, 0, 20, &r), 0);
	assert_int_equal(r.cu.miss_reason, KVP_MISS_BELOW_MINIMUM);
	assert_int_equal(r.u.cache_creation_tokens, 0);
	/* 7. above the minimum, but no full block before its last token */
	assert_int_equal(run(f, mid, 12, NULL, NULL, false, 0, 0, 2, &r), 0);
	assert_int_equal(r.cu.miss_reason, KVP_MISS_BELOW_BLOCK);
	/* 8. flushed: the blocks of p were cached and evicted (from memory) */
	assert_true(do_flush(f, 0) > 0);
	assert_int_equal(run(f, p, 64, "a", NULL, false, 0, 0, 2, &r), 0);
	assert_int_equal(r.cu.miss_reason, KVP_MISS_EVICTED);
	assert_int_equal(r.cu.miss_tier, KVP_MISS_TIER_MEMORY);
	assert_int_equal(r.cu.evicted_tokens, 48);
	/* the status counts each request once, by its reason */
	assert_int_equal(status_wait(f, "cache.miss_no_prefix", 1), 1);
	assert_int_equal(status_wait(f, "cache.miss_none", 2), 2);
	assert_int_equal(status_wait(f, "cache.miss_salt_mismatch", 1), 1);
	assert_int_equal(status_wait(f, "cache.miss_disabled", 1), 1);
	assert_int_equal(status_wait(f, "cache.miss_below_minimum", 1), 1);
	assert_int_equal(status_wait(f, "cache.miss_below_block", 1), 1);
	assert_int_equal(status_wait(f, "cache.miss_evicted", 1), 1);
	assert_int_equal(status_wait(f, "cache.miss_evicted_memory", 1), 1);
	assert_int_equal(status_wait(f, "cache.recomputed_tokens", 48), 48);
	assert_int_equal(status_wait(f, "cache.flushes", 1), 1);
	assert_int_equal(status_wait(f, "cache.tokens_saved", 96), 96);
	assert_true(status_num(f, "cache.prefill_flops_saved") > 0);
}

static void test_breakpoints_publish_their_prefix(void **state)
{
	struct fixture *f = *state;
	struct kvp_cache_ctl cc = { .n_breakpoints = 2, .breakpoints = { 20, 40 } };
	int32_t q[80];
	struct result r;
	double before;

	fill(q, 80, 20);
	do_flush(f, 0);
	before = status_num(f, "index.entries");
	assert_int_equal(run(f, q, 80, NULL, &cc, false, 0, 0, 2, &r), 0);
	/* 40 tokens: exactly two full blocks, nothing of the rest nor of the reply */
	assert_int_equal(r.u.cache_creation_tokens, 32);
	assert_int_equal(status_wait(f, "index.entries", before + 2), before + 2);
	/* automatic caching of the same prompt then finds those two only */
	assert_int_equal(run(f, q, 80, NULL, NULL, false, 0, 0, 2, &r), 0);
	assert_int_equal(r.cu.matched_blocks, 2);
	assert_int_equal(r.u.cached_tokens, 32);
	assert_int_equal(r.cu.miss_reason, KVP_MISS_NO_PREFIX);
}

static void test_pins_survive_flush(void **state)
{
	struct fixture *f = *state;
	int32_t t[48];
	uint32_t blocks = 0;
	struct result r;

	fill(t, 48, 30);
	assert_int_equal(do_pin(f, t, 48, false, &blocks), 0);
	assert_int_equal(blocks, 3);
	assert_int_equal(status_wait(f, "cache.pinned_blocks", 3), 3);
	do_flush(f, 0);
	assert_int_equal(run(f, t, 48, NULL, NULL, false, 0, 0, 2, &r), 0);
	assert_int_equal(r.cu.miss_reason, KVP_MISS_NONE);
	assert_int_equal(r.cu.matched_blocks, 2); /* (48 - 1) / 16 */
	assert_int_equal(do_pin(f, t, 48, true, &blocks), 0);
	assert_int_equal(blocks, 3);
	assert_int_equal(status_wait(f, "cache.pinned_blocks", 0), 0);
	/* unpinned twice: the second is refused, nothing changes */
	assert_int_equal(do_pin(f, t, 48, true, &blocks), KVP_E_INVALID);
	do_flush(f, 0);
	assert_int_equal(run(f, t, 48, NULL, NULL, false, 0, 0, 2, &r), 0);
	assert_int_equal(r.cu.miss_reason, KVP_MISS_EVICTED);
}

static void test_parallel_equals_alone(void **state)
{
	struct fixture *f = *state;
	struct kvp_cache_ctl cc = { .n = 3 };
	static struct result par, alone;
	double cow0, cont0;
	int32_t t[40];

	fill(t, 40, 40);
	cow0 = status_num(f, "cache.cow_copies");
	cont0 = status_num(f, "cache.continuations");
	assert_int_equal(run(f, t, 40, "par", &cc, false, 1.0f, 77, 12, &par), 0);
	assert_int_equal(par.cu.n, 3);
	assert_int_equal(par.u.prompt_tokens, 40); /* counted once */
	assert_int_equal(par.u.generated_tokens, 36);
	assert_int_equal(status_wait(f, "cache.continuations", cont0 + 3), cont0 + 3);
	/* 40 tokens: the last block holds 8 of them and is shared; 2 of 3 copy it */
	assert_int_equal(status_wait(f, "cache.cow_copies", cow0 + 2), cow0 + 2);
	for (uint32_t i = 0; i < 3; i++) {
		assert_int_equal(par.n_toks[i], 12);
		assert_int_equal(run(f, t, 40, "par", NULL, false, 1.0f, 77 + i, 12, &alone), 0);
		assert_int_equal(alone.n_toks[0], 12);
		assert_memory_equal(par.toks[i], alone.toks[0], 12 * sizeof(int32_t));
	}
	/* sampled at temperature 1: the continuations are not all the same */
	assert_true(memcmp(par.toks[0], par.toks[1], sizeof(par.toks[0])) ||
		    memcmp(par.toks[0], par.toks[2], sizeof(par.toks[0])));
}

/*
 * int4, parallel sampling: the forks share the prompt's full blocks while they are in
 * the residual window (f32, staged) and copy the partial one with its residual; the
 * block that leaves the window during the decode is quantized once for all three.  So
 * each continuation equals a run alone that computes the prompt itself (no_cache: a
 * hit would read the sealed blocks at 4 bits where the forks read them in f32).
 */
static void test_int4_parallel_equals_alone(void **state)
{
	struct fixture *f = *state;
	struct kvp_cache_ctl cc = { .n = 3 };
	static struct result par, alone;
	int32_t t[40];

	fill(t, 40, 60);
	assert_int_equal(run(f, t, 40, "par4", &cc, false, 1.0f, 91, 12, &par), 0);
	assert_int_equal(par.cu.n, 3);
	for (uint32_t i = 0; i < 3; i++) {
		assert_int_equal(par.n_toks[i], 12);
		assert_int_equal(run(f, t, 40, "par4", NULL, true, 1.0f, 91 + i, 12, &alone), 0);
		assert_memory_equal(par.toks[i], alone.toks[0], 12 * sizeof(int32_t));
	}
}

/*
 * Multi-turn: a first turn publishes its full blocks, the reply's too (int4: those out of
 * its residual window of @window tokens only); the second turn (the first's prompt, its
 * reply, more) hits exactly those and recomputes the rest; the same two turns under
 * another salt give the same hit and tokens.
 */
static void multi_turn(struct fixture *f, uint32_t window)
{
	static struct result t1, t2, t2b;
	int32_t t[100 + 20 + 10];

	fill(t, 100, 20);
	assert_int_equal(run(f, t, 100, NULL, NULL, false, 0.0f, 0, 20, &t1), 0);
	assert_int_equal(t1.n_toks[0], 20);
	memcpy(t + 100, t1.toks[0], 20 * sizeof(int32_t));
	fill(t + 120, 10, 200);
	assert_int_equal(run(f, t, 130, NULL, NULL, false, 0.0f, 0, 8, &t2), 0);
	/* the first turn wrote 119 positions (its last token is never computed) */
	assert_int_equal(t2.u.cached_tokens, (119 - window) / BT * BT);
	/* the same two turns under another salt: the same hit, the same tokens */
	assert_int_equal(run(f, t, 100, "b", NULL, false, 0.0f, 0, 20, &t1), 0);
	assert_memory_equal(t1.toks[0], t + 100, 20 * sizeof(int32_t));
	assert_int_equal(run(f, t, 130, "b", NULL, false, 0.0f, 0, 8, &t2b), 0);
	assert_int_equal(t2b.u.cached_tokens, t2.u.cached_tokens);
	assert_memory_equal(t2.toks[0], t2b.toks[0], 8 * sizeof(int32_t));
}

/* f16 and int8: every full block of the first turn, its reply's included */
static void test_multi_turn(void **state)
{
	multi_turn(*state, 0);
}

/* int4: the blocks out of the window of 32 tokens (the default) */
static void test_int4_multi_turn(void **state)
{
	multi_turn(*state, 32);
}

static void test_pin_denied(void **state)
{
	struct fixture *f = *state;
	int32_t t[32];
	uint32_t blocks = 0;

	fill(t, 32, 10);
	assert_int_equal(do_pin(f, t, 32, false, &blocks), KVP_E_DENIED);
	do_flush(f, KVP_E_DENIED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_miss_reasons),
		cmocka_unit_test(test_breakpoints_publish_their_prefix),
		cmocka_unit_test(test_pins_survive_flush),
		cmocka_unit_test(test_parallel_equals_alone),
		cmocka_unit_test(test_multi_turn),
	};
	const struct CMUnitTest int4[] = {
		cmocka_unit_test(test_int4_parallel_equals_alone),
		cmocka_unit_test(test_int4_multi_turn),
	};
	const struct CMUnitTest denied[] = {
		cmocka_unit_test(test_pin_denied),
	};
	int r = cmocka_run_group_tests_name("cache", tests, setup, kvpd_teardown);

	r |= cmocka_run_group_tests_name("cache-int8", tests, setup_int8, kvpd_teardown);
	r |= cmocka_run_group_tests_name("cache-int4", int4, setup_int4, kvpd_teardown);
	return r | cmocka_run_group_tests_name("cache-denied", denied, setup_no_pin, kvpd_teardown);
}
