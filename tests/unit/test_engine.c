/* SPDX-License-Identifier: MIT */
/*
 * test_engine.c - the engine library (svc/engine/, kvp-engine) linked alone: this
 * executable has shm/, compute/ and util/ and nothing of svc/ or ipc/ (the meson
 * dependency is dep_kvp_engine only), and it runs the daemon's demo model (compute/
 * mkmodel.h preset "demo") through kvp_sched_step() with no engine thread: a prompt
 * is computed, tokens come out as events, the DONE's usage adds up, and the same prompt
 * again hits the blocks the first run published.  Both entries of the policy table run
 * it, and greedy sampling gives the same tokens under either.  A prompt buffer with room
 * for the tokens to come is kept as the history (scheduler.prompts_moved), one without
 * is grown (prompts_grown).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <cmocka.h>

#include "compute/mkmodel.h"
#include "compute/model.h"
#include "compute/text/tokenizer.h"
#include "shm/index.h"
#include "shm/pool.h"
#include "svc/engine/engine.h"

#define BT 16
#define N_PROMPT 40 /* two full blocks and part of a third */
#define MAX_NEW 4

struct demo {
	void *gguf;
	size_t gguf_len;
	struct kvp_model *model;
	struct kvp_tokenizer *tok;
};

struct run {
	struct kvp_pool *pool;
	struct kvp_index *index;
	struct kvp_sched *sched;
	int efd;
	int32_t ids[2][MAX_NEW + 1];
	uint32_t n_ids[2];
	struct kvp_usage usage[2];
	bool done[2];
	uint32_t steps;
};

static int setup(void **state)
{
	struct demo *d = calloc(1, sizeof(*d));
	struct kvp_mkmodel_opts o;

	*state = d;
	if (!d || kvp_mkmodel_preset(&o, "demo") ||
	    kvp_mkmodel_write_mem(&d->gguf, &d->gguf_len, &o, NULL, 0) ||
	    kvp_model_open_mem(&d->model, d->gguf, d->gguf_len, NULL, 0) ||
	    kvp_tokenizer_new(&d->tok, d->model, NULL, 0))
		return -1;
	return 0;
}

static int teardown(void **state)
{
	struct demo *d = *state;

	kvp_tokenizer_free(d->tok);
	kvp_model_close(d->model);
	free(d->gguf);
	free(d);
	return 0;
}

static void open_engine(struct run *r, const struct demo *d, enum kvp_sched_policy policy)
{
	struct kvp_pool_config pc = { 0 };
	struct kvp_sched_config sc = { 0 };

	memset(r, 0, sizeof(*r));
	kvp_model_kv_shape(d->model, KVP_DTYPE_F32, BT, &pc.shape);
	pc.n_blocks = 64;
	pc.pages = KVP_PAGES_OFF;
	assert_int_equal(kvp_pool_new(&r->pool, &pc), 0);
	assert_int_equal(kvp_index_new(&r->index, r->pool), 0);
	r->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	assert_true(r->efd >= 0);
	sc.pool = r->pool;
	sc.index = r->index;
	sc.model = d->model;
	sc.tok = d->tok;
	memcpy(sc.base_keys.model_fp, kvp_model_fingerprint(d->model), 16);
	sc.n_threads = 1;
	sc.max_running = 4;
	sc.max_queued = 8;
	sc.prefill_chunk = 64;
	sc.event_capacity = 64;
	sc.ignore_eos = true; /* synthetic weights: exactly MAX_NEW tokens */
	sc.wake_fd = r->efd;
	sc.policy = policy;
	assert_int_equal(kvp_sched_new(&r->sched, &sc), 0);
}

static void close_engine(struct run *r)
{
	kvp_sched_free(r->sched);
	close(r->efd);
	kvp_index_free(r->index);
	kvp_pool_free(r->pool);
}

/*
 * Request @id: 0's buffer has room for its tokens to come, which the engine keeps as
 * the history (moved, as ipc/ hands a prompt over), 1's only for the prompt (grown).
 */
static void submit(struct run *r, uint64_t id)
{
	struct kvp_sched_req q = { .conn = 1,
				   .req_id = id,
				   .n_tokens = N_PROMPT,
				   .cap_tokens = id ? 0 : N_PROMPT + MAX_NEW,
				   .max_new = MAX_NEW };

	q.tokens = malloc((N_PROMPT + MAX_NEW) * sizeof(int32_t));
	assert_non_null(q.tokens);
	for (uint32_t i = 0; i < N_PROMPT; i++)
		q.tokens[i] = 3 + (int32_t)((i * 7) % 250);
	q.sample.temperature = 0; /* greedy: the policies must agree on every token */
	q.sample.top_p = 1.0f;
	assert_int_equal(kvp_sched_submit(r->sched, &q), 0);
}

/* Step the engine on this thread until request @id (0 or 1) is done. */
static void run_until_done(struct run *r, uint64_t id)
{
	struct kvp_sched_event ev[16];
	unsigned int n;

	for (int i = 0; i < 200 && !r->done[id]; i++) {
		kvp_sched_step(r->sched);
		r->steps++;
		while ((n = kvp_sched_poll_events(r->sched, ev, 16)) > 0) {
			for (unsigned int k = 0; k < n; k++) {
				uint64_t q = ev[k].req_id;

				assert_true(q < 2);
				assert_int_not_equal(ev[k].type, KVP_SCHED_EV_ERROR);
				if (ev[k].type == KVP_SCHED_EV_TOKEN && ev[k].token >= 0) {
					assert_true(r->n_ids[q] < MAX_NEW);
					r->ids[q][r->n_ids[q]++] = ev[k].token;
				}
				if (ev[k].type == KVP_SCHED_EV_DONE) {
					r->usage[q] = ev[k].usage;
					r->done[q] = true;
				}
			}
		}
	}
	assert_true(r->done[id]);
}

/* One policy: a cold run, then the same prompt again finds the published blocks. */
static void run_policy(const struct demo *d, enum kvp_sched_policy policy, struct run *r)
{
	struct kvp_sched_stats st;
	char err[256];

	open_engine(r, d, policy);
	submit(r, 0);
	run_until_done(r, 0);
	assert_int_equal(r->usage[0].status, KVP_OK);
	assert_int_equal(r->n_ids[0], MAX_NEW);
	assert_int_equal(r->usage[0].generated_tokens, MAX_NEW);
	assert_int_equal(r->usage[0].prompt_tokens, N_PROMPT);
	assert_int_equal(r->usage[0].cached_tokens, 0);
	assert_int_equal(r->usage[0].recomputed_tokens, N_PROMPT);
	/* the prompt's and generated tokens' full blocks: (40 + 4 - 1) / 16 = 2 */
	assert_int_equal(r->usage[0].cache_creation_tokens, 2 * BT);
	for (uint32_t i = 0; i < MAX_NEW; i++)
		assert_true(r->ids[0][i] >= 0 &&
			    (uint32_t)r->ids[0][i] < kvp_model_hparams(d->model)->n_vocab);

	submit(r, 1);
	run_until_done(r, 1);
	assert_int_equal(r->usage[1].status, KVP_OK);
	assert_int_equal(r->usage[1].cached_tokens, 2 * BT);
	assert_int_equal(r->usage[1].recomputed_tokens, N_PROMPT - 2 * BT);
	/* the same prompt, greedy: the same tokens, cached or computed */
	assert_memory_equal(r->ids[1], r->ids[0], MAX_NEW * sizeof(int32_t));
	assert_int_equal(kvp_sched_check(r->sched, err, sizeof(err)), 0);
	assert_false(kvp_sched_step(r->sched)); /* nothing left */
	kvp_sched_get_stats(r->sched, &st);
	assert_int_equal(st.prompts_moved, 1);
	assert_int_equal(st.prompts_grown, 1);
}

static void test_demo_step_fair_and_fifo(void **state)
{
	const struct demo *d = *state;
	struct run fair, fifo;

	run_policy(d, KVP_SCHED_FAIR, &fair);
	run_policy(d, KVP_SCHED_FIFO, &fifo);
	assert_memory_equal(fifo.ids[0], fair.ids[0], MAX_NEW * sizeof(int32_t));
	close_engine(&fair);
	close_engine(&fifo);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_demo_step_fair_and_fifo),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
