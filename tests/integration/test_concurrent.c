/* SPDX-License-Identifier: MIT */
/*
 * test_concurrent.c - 64 concurrent clients sharing a 1,000-token prefix, against a real
 * kvpoold: every client gets exactly the greedy tokens kvpool-run computes offline for
 * its prompt; the usage is exact (the shared prefix is computed once, every other
 * client reads matched full blocks x block size from the cache); the status JSON parses
 * and its counters moved by exactly what was sent; the pool is back to no used blocks.
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kvpool/kvpool.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

#define N_CLIENTS 64
#define PREFIX 1000
#define N_GEN 16
#define BT 16

struct client {
	pthread_t thread;
	pthread_barrier_t *start;
	const char *sock;
	int32_t prompt[PREFIX + 32];
	uint32_t n_prompt;
	int32_t got[N_GEN + 8];
	uint32_t n_got;
	int32_t want[N_GEN];
	uint32_t n_want;
	struct kvp_usage usage;
	int rc;
};

struct fixture {
	struct kvpd d; /* first: kvpd_teardown() frees the fixture through it */
	struct client c[N_CLIENTS];
	pthread_barrier_t start;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
	return (uint32_t)kvp_test_xorshift(&rng_state);
}

static int on_tokens(void *arg, const int32_t *tokens, uint32_t n, const char *text,
		     uint32_t text_len)
{
	struct client *c = arg;

	for (uint32_t i = 0; i < n && c->n_got < N_GEN + 8; i++)
		c->got[c->n_got++] = tokens[i];
	return 0;
}

static void *client_main(void *arg)
{
	struct client *c = arg;
	struct kvp_client *k = NULL;
	struct kvp_client_params p;
	struct kvp_client_prompt pr = { .tokens = c->prompt, .n_tokens = c->n_prompt };

	c->rc = kvp_client_connect(&k, c->sock);
	pthread_barrier_wait(c->start);
	if (c->rc) {
		kvp_client_close(k);
		return NULL;
	}
	kvp_client_params_init(&p);
	p.max_new_tokens = N_GEN;
	c->rc = kvp_client_generate(k, &pr, &p, on_tokens, c, &c->usage);
	kvp_client_close(k);
	return NULL;
}

static_assert(offsetof(struct fixture, d) == 0, "kvpd_teardown");

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	const char *args[] = { "--pool-size", "64M", "--ignore-eos", "--max-running", "64", NULL };
	int32_t prefix[PREFIX];
	int r;

	if (!f || kvpd_setup(&f->d, "tiny", args) < 0) {
		free(f);
		return -1;
	}
	*state = f; /* kvpd_teardown(state) now undoes all of it */
	for (int i = 0; i < PREFIX; i++)
		prefix[i] = 3 + (int32_t)(rnd() % 256);
	for (int i = 0; i < N_CLIENTS; i++) {
		struct client *c = &f->c[i];
		uint32_t tail = 16 + i % 5;

		memcpy(c->prompt, prefix, sizeof(prefix));
		for (uint32_t t = 0; t < tail; t++)
			c->prompt[PREFIX + t] = 3 + (int32_t)(rnd() % 256);
		c->n_prompt = PREFIX + tail;
		r = kvpd_offline(f->d.model, c->prompt, c->n_prompt, N_GEN, true, c->want,
				 &c->n_want);
		if (r < 0) {
			fprintf(stderr, "kvpool-run failed: %d\n", r);
			kvpd_teardown(state);
			return -1;
		}
	}
	return 0;
}

static void test_64_clients_shared_prefix(void **state)
{
	struct fixture *f = *state;
	struct jsonq *before, *after;
	uint32_t shared = (PREFIX / BT) * BT; /* 62 full blocks of the shared prefix */
	int computed = 0;
	uint64_t gen_sum = 0, prompt_sum = 0, created_sum = 0, recomputed_sum = 0;
	double ttft_sum = 0, queue_sum = 0, prefill_sum = 0, decode_sum = 0;

	before = kvpd_status(&f->d);
	assert_non_null(before);
	pthread_barrier_init(&f->start, NULL, N_CLIENTS);
	for (int i = 0; i < N_CLIENTS; i++) {
		f->c[i].start = &f->start;
		f->c[i].sock = f->d.sock;
		assert_int_equal(pthread_create(&f->c[i].thread, NULL, client_main, &f->c[i]), 0);
	}
	for (int i = 0; i < N_CLIENTS; i++)
		pthread_join(f->c[i].thread, NULL);
	pthread_barrier_destroy(&f->start);

	for (int i = 0; i < N_CLIENTS; i++) {
		struct client *c = &f->c[i];
		const struct kvp_usage *u = &c->usage;
		/* full blocks of prompt and generated tokens, published when it ends (the
		 * last generated token is never computed) */
		uint32_t full = (c->n_prompt + N_GEN - 1) / BT;

		if (c->rc)
			kvpd_dump_log(&f->d);
		assert_int_equal(c->rc, 0);
		/* the same greedy tokens as the offline run of the same prompt */
		assert_int_equal(c->n_got, c->n_want);
		assert_memory_equal(c->got, c->want, c->n_want * sizeof(int32_t));
		assert_int_equal(u->prompt_tokens, c->n_prompt);
		assert_int_equal(u->generated_tokens, N_GEN);
		assert_int_equal(u->status, KVP_OK);
		if (u->cached_tokens == 0) {
			/* the one client that computed the prefix published all its full blocks */
			computed++;
			assert_int_equal(u->cache_creation_tokens, full * BT);
			assert_int_equal(u->recomputed_tokens, c->n_prompt);
		} else {
			/* everyone else: matched full blocks x block size, and only its tail */
			assert_int_equal(u->cached_tokens, shared);
			assert_int_equal(u->cache_creation_tokens, (full - shared / BT) * BT);
			assert_int_equal(u->recomputed_tokens, c->n_prompt - shared);
		}
		assert_true(u->ttft_ms > 0);
		gen_sum += u->generated_tokens;
		prompt_sum += u->prompt_tokens;
		created_sum += u->cache_creation_tokens;
		recomputed_sum += u->recomputed_tokens;
		ttft_sum += u->ttft_ms;
		queue_sum += u->queue_ms;
		prefill_sum += u->prefill_ms;
		decode_sum += u->decode_ms;
	}
	/* the shared part was computed once */
	assert_int_equal(computed, 1);

	after = kvpd_status(&f->d);
	assert_non_null(after);
#define DELTA(path) jsonq_delta(after, before, path)
	assert_int_equal(DELTA("scheduler.requests_done"), N_CLIENTS);
	assert_int_equal(DELTA("scheduler.requests_failed"), 0);
	/* each prompt's ids came to the engine in the buffer ipc/ copied them into, kept */
	assert_int_equal(DELTA("scheduler.prompts_moved"), N_CLIENTS);
	assert_int_equal(DELTA("scheduler.prompts_grown"), 0);
	/* the status usage sums moved by exactly the 64 DONE usages */
	assert_int_equal(DELTA("usage.generated_tokens"), gen_sum);
	assert_int_equal(DELTA("usage.prompt_tokens"), prompt_sum);
	assert_int_equal(DELTA("usage.cached_tokens"), (N_CLIENTS - 1) * shared);
	assert_int_equal(DELTA("usage.cache_creation_tokens"), created_sum);
	assert_int_equal(DELTA("usage.recomputed_tokens"), recomputed_sum);
	assert_float_equal(DELTA("usage.ttft_ms"), ttft_sum, 0.01);
	assert_float_equal(DELTA("usage.queue_ms"), queue_sum, 0.01);
	assert_float_equal(DELTA("usage.prefill_ms"), prefill_sum, 0.01);
	assert_float_equal(DELTA("usage.decode_ms"), decode_sum, 0.01);
	assert_int_equal(DELTA("index.lookups"), N_CLIENTS);
	assert_int_equal(DELTA("index.hit_requests"), N_CLIENTS - 1);
	assert_int_equal(DELTA("index.hit_tokens"), (N_CLIENTS - 1) * shared);
	assert_int_equal(DELTA("connections.total"), N_CLIENTS);
	assert_int_equal(jsonq_num(after, "scheduler.running", -1), 0);
	assert_int_equal(jsonq_num(after, "scheduler.queued", -1), 0);
	assert_int_equal(jsonq_num(after, "pool.blocks_used", -1), 0);
	/* every cached block is an index entry; the three states cover the pool */
	assert_int_equal(jsonq_num(after, "pool.blocks_cached", -1),
			 jsonq_num(after, "index.entries", -2));
	assert_int_equal(jsonq_num(after, "pool.blocks_cached", 0) +
				 jsonq_num(after, "pool.blocks_free", 0),
			 jsonq_num(after, "pool.blocks_total", -1));
	assert_true(jsonq_num(after, "scheduler.ttft_p99_ms", 0) >=
		    jsonq_num(after, "scheduler.ttft_p50_ms", 1));
#undef DELTA
	jsonq_free(before);
	jsonq_free(after);
}

static void test_full_prompt_hit_recomputes_last(void **state)
{
	struct fixture *f = *state;
	struct client *c = &f->c[0];
	struct kvp_client *k = NULL;
	struct kvp_client_params p;
	struct kvp_client_prompt pr;
	uint32_t n = 64; /* exactly four blocks */

	/* a prompt whose every block is cached still computes its last block's tokens */
	pr = (struct kvp_client_prompt){ .tokens = c->prompt, .n_tokens = n };
	assert_int_equal(kvp_client_connect(&k, f->d.sock), 0);
	kvp_client_params_init(&p);
	p.max_new_tokens = 4;
	assert_int_equal(kvp_client_generate(k, &pr, &p, NULL, NULL, &c->usage), 0);
	assert_int_equal(kvp_client_generate(k, &pr, &p, NULL, NULL, &c->usage), 0);
	assert_int_equal(c->usage.cached_tokens, n - BT);
	assert_int_equal(c->usage.recomputed_tokens, BT);
	assert_int_equal(c->usage.cache_creation_tokens, 0);
	/* a different salt shares nothing */
	p.salt = "tenant-b";
	p.salt_len = 8;
	assert_int_equal(kvp_client_generate(k, &pr, &p, NULL, NULL, &c->usage), 0);
	assert_int_equal(c->usage.cached_tokens, 0);
	assert_int_equal(c->usage.cache_creation_tokens, n);
	/* no-cache neither reads nor publishes */
	p.salt_len = 0;
	p.no_cache = true;
	assert_int_equal(kvp_client_generate(k, &pr, &p, NULL, NULL, &c->usage), 0);
	assert_int_equal(c->usage.cached_tokens, 0);
	assert_int_equal(c->usage.cache_creation_tokens, 0);
	assert_int_equal(c->usage.recomputed_tokens, n);
	kvp_client_close(k);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_64_clients_shared_prefix),
		cmocka_unit_test(test_full_prompt_hit_recomputes_last),
	};

	return cmocka_run_group_tests(tests, setup, kvpd_teardown);
}
