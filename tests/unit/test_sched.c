/* SPDX-License-Identifier: MIT */
/*
 * test_sched.c - the engine on its own (no sockets): a tiny model, a small pool, events
 * read back through the eventfd as the loop would.  Admission is bounded by free
 * blocks, a request that can never fit is refused at once, cached blocks are evicted to
 * admit new work, cancellation and a closed connection give every block back, requests
 * sharing a prefix in flight wait for it instead of computing it again, shutdown
 * refuses new work and ends running requests with SHUTDOWN, and a request that ends
 * publishes the full blocks of its generated tokens as well as its prompt's.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
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
#include "svc/engine/engine.h"

#define BT 16

struct fixture {
	void *gguf;
	size_t gguf_len;
	struct kvp_model *model;
	struct kvp_tokenizer *tok;
	struct kvp_pool *pool;
	struct kvp_index *index;
	struct kvp_sched *sched;
	int efd;
	/* per-request results, indexed by req_id (1..15) */
	struct kvp_usage usage[16];
	uint32_t status[16];
	uint32_t n_tokens[16];
	int32_t ids[16][64]; /* the first 64 ids of each request */
	char text[16][4096]; /* its text, as the TOKEN events carried it */
	size_t text_len[16];
	bool done[16];
	uint64_t max_running_seen;
};

/*
 * A vocabulary for the tiny model's 259 ids whose pieces are 63 bytes long, with
 * two-byte characters: longer than one TOKEN event's text, so the engine must slice
 * them without losing or splitting a character.
 */
static int long_piece_tokenizer(struct kvp_tokenizer **out)
{
	/* 12 Greek letters, two bytes each */
	static const char greek[] = "\xce\xb1\xce\xb2\xce\xb3\xce\xb4\xce\xb5\xce\xb6"
				    "\xce\xb7\xce\xb8\xce\xb9\xce\xba\xce\xbb\xce\xbc";
	static char buf[259][80];
	const char *pieces[259];

	for (int i = 0; i < 259; i++) {
		snprintf(buf[i], sizeof(buf[i]), "[%03d%s0123456789%s]", i, greek, greek);
		pieces[i] = buf[i];
	}
	return kvp_tokenizer_build(out, pieces, NULL, NULL, 259, 1, 2, 0, 1);
}

static int make(struct fixture *f, uint32_t n_blocks, uint32_t max_running, bool long_pieces,
		bool start, enum kvp_sched_policy policy)
{
	struct kvp_mkmodel_opts o;
	struct kvp_pool_config pc = { 0 };
	struct kvp_sched_config sc = { 0 };
	int r;

	memset(f, 0, sizeof(*f));
	if (kvp_mkmodel_preset(&o, "tiny") ||
	    kvp_mkmodel_write_mem(&f->gguf, &f->gguf_len, &o, NULL, 0))
		return -1;
	if (kvp_model_open_mem(&f->model, f->gguf, f->gguf_len, NULL, 0))
		return -1;
	if (long_pieces ? long_piece_tokenizer(&f->tok) :
			  kvp_tokenizer_new(&f->tok, f->model, NULL, 0))
		return -1;
	kvp_model_kv_shape(f->model, KVP_DTYPE_F32, BT, &pc.shape);
	pc.n_blocks = n_blocks;
	pc.pages = KVP_PAGES_OFF;
	if (kvp_pool_new(&f->pool, &pc) || kvp_index_new(&f->index, f->pool))
		return -1;
	f->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	sc.pool = f->pool;
	sc.index = f->index;
	sc.model = f->model;
	sc.tok = f->tok;
	memcpy(sc.base_keys.model_fp, kvp_model_fingerprint(f->model), 16);
	sc.n_threads = 1;
	sc.max_running = max_running;
	sc.max_queued = 16;
	sc.prefill_chunk = 64;
	sc.event_capacity = 64;
	sc.ignore_eos = true;
	sc.wake_fd = f->efd;
	sc.policy = policy;
	r = kvp_sched_new(&f->sched, &sc);
	if (r)
		return r;
	return start ? kvp_sched_start(f->sched) : 0;
}

static int setup_big(void **state)
{
	struct fixture *f = malloc(sizeof(*f));

	*state = f;
	return f ? make(f, 256, 8, false, true, KVP_SCHED_FAIR) : -1;
}

/* The first policy (FIFO), kept for comparison. */
static int setup_big_fifo(void **state)
{
	struct fixture *f = malloc(sizeof(*f));

	*state = f;
	return f ? make(f, 256, 8, false, true, KVP_SCHED_FIFO) : -1;
}

/* As setup_big, but the engine thread is not started: the test starts it. */
static int setup_big_stopped(void **state)
{
	struct fixture *f = malloc(sizeof(*f));

	*state = f;
	return f ? make(f, 256, 8, false, false, KVP_SCHED_FAIR) : -1;
}

static int setup_long_pieces(void **state)
{
	struct fixture *f = malloc(sizeof(*f));

	*state = f;
	return f ? make(f, 64, 8, true, true, KVP_SCHED_FAIR) : -1;
}

static int setup_small(void **state)
{
	struct fixture *f = malloc(sizeof(*f));

	*state = f;
	return f ? make(f, 40, 8, false, true, KVP_SCHED_FAIR) : -1;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kvp_sched_free(f->sched);
	close(f->efd);
	kvp_index_free(f->index);
	kvp_pool_free(f->pool);
	kvp_tokenizer_free(f->tok);
	kvp_model_close(f->model);
	free(f->gguf);
	free(f);
	return 0;
}

static int submit(struct fixture *f, uint64_t id, uint32_t n_prompt, uint32_t max_new,
		  bool no_cache, uint32_t tail_seed)
{
	struct kvp_sched_req r = { .conn = 1,
				   .req_id = id,
				   .n_tokens = n_prompt,
				   .max_new = max_new,
				   .no_cache = no_cache };
	int ret;

	r.tokens = malloc(n_prompt * sizeof(int32_t));
	for (uint32_t i = 0; i < n_prompt; i++)
		r.tokens[i] = 3 + (int32_t)((i * 7 + (i >= 96 ? tail_seed * 31 : 0)) % 256);
	r.sample.top_p = 1.0f;
	{
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		r.t_recv_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	}
	ret = kvp_sched_submit(f->sched, &r);
	if (ret)
		free(r.tokens);
	return ret;
}

/* Take events as the loop would, for about @ms milliseconds. */
static void pump(struct fixture *f, int ms)
{
	struct kvp_sched_event ev[64];
	struct pollfd p = { .fd = f->efd, .events = POLLIN };
	struct kvp_sched_stats st;
	uint64_t v;
	unsigned int n;

	poll(&p, 1, ms);
	if (read(f->efd, &v, sizeof(v)) < 0)
		v = 0;
	kvp_sched_get_stats(f->sched, &st);
	if (st.running > f->max_running_seen)
		f->max_running_seen = st.running;
	while ((n = kvp_sched_poll_events(f->sched, ev, 64)) > 0) {
		for (unsigned int i = 0; i < n; i++) {
			uint64_t r = ev[i].req_id;

			assert_true(r < 16);
			if (ev[i].type == KVP_SCHED_EV_TOKEN) {
				assert_true(ev[i].text_len <= sizeof(ev[i].text));
				if (f->text_len[r] + ev[i].text_len <= sizeof(f->text[r])) {
					memcpy(f->text[r] + f->text_len[r], ev[i].text,
					       ev[i].text_len);
					f->text_len[r] += ev[i].text_len;
				}
			}
			if (ev[i].type == KVP_SCHED_EV_TOKEN && ev[i].token >= 0) {
				if (f->n_tokens[r] < 64)
					f->ids[r][f->n_tokens[r]] = ev[i].token;
				f->n_tokens[r]++;
			}
			if (ev[i].type == KVP_SCHED_EV_DONE) {
				f->usage[r] = ev[i].usage;
				f->status[r] = ev[i].usage.status;
				f->done[r] = true;
			}
			if (ev[i].type == KVP_SCHED_EV_ERROR) {
				f->status[r] = ev[i].status;
				f->done[r] = true;
			}
		}
	}
}

/* Pump until request @id has ended (at most ~20 s). */
static void pump_until(struct fixture *f, uint64_t id)
{
	for (int spins = 0; spins < 2000 && !f->done[id]; spins++)
		pump(f, 10);
	assert_true(f->done[id]);
}

static void wait_idle(struct fixture *f, struct kvp_sched_stats *st)
{
	for (int i = 0; i < 500; i++) {
		kvp_sched_get_stats(f->sched, st);
		if (!st->running && !st->queued && !st->waiting_prefix)
			return;
		usleep(2000);
	}
	fail_msg("engine never became idle");
}

static uint32_t used_blocks(const struct kvp_sched_stats *st)
{
	uint32_t used = 0;

	for (uint32_t a = 0; a < st->pool.n_arenas; a++)
		used += st->pool.arena[a].used;
	return used;
}

static void test_never_fits_refused_at_once(void **state)
{
	struct fixture *f = *state;

	/* 40 blocks hold 640 positions: 600 + 100 can never fit, 600 + 40 can */
	assert_int_equal(kvp_sched_blocks_for(f->sched, 600, 41), 40);
	assert_int_equal(submit(f, 1, 600, 100, true, 0), -ENOSPC);
	assert_int_equal(submit(f, 2, 600, 41, true, 0), 0);
	pump_until(f, 2);
	assert_int_equal(f->status[2], KVP_OK);
}

static void test_admission_waits_for_blocks(void **state)
{
	struct fixture *f = *state;
	struct kvp_sched_stats st;
	struct timespec t0, t1;
	double gap_ms;

	/* two requests of 30 blocks each in a 40-block pool never run together */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(submit(f, 1, 400, 80, true, 1), 0);
	assert_int_equal(submit(f, 2, 400, 80, true, 2), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	/* the second arrived at most gap_ms after the first (more on a loaded machine) */
	gap_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
	pump_until(f, 1);
	pump_until(f, 2);
	assert_int_equal(f->status[1], KVP_OK);
	assert_int_equal(f->status[2], KVP_OK);
	assert_int_equal(f->n_tokens[2], 80);
	assert_int_equal(f->max_running_seen, 1);
	/* the second was admitted only after the first had ended */
	assert_true(f->usage[2].queue_ms >=
		    f->usage[1].ttft_ms + f->usage[1].decode_ms - gap_ms - 0.01);
	wait_idle(f, &st);
	assert_int_equal(used_blocks(&st), 0);
	/* the TTFT quantiles of the status report are these two requests' TTFTs */
	assert_int_equal(st.ttft_samples, 2);
	assert_true(st.ttft_p50_ms == fmin(f->usage[1].ttft_ms, f->usage[2].ttft_ms));
	assert_true(st.ttft_p99_ms == fmax(f->usage[1].ttft_ms, f->usage[2].ttft_ms));
}

static void test_cached_blocks_evicted_for_new_work(void **state)
{
	struct fixture *f = *state;
	struct kvp_sched_stats st;

	/* a cached request leaves 25 full blocks cached; a no-cache one needing 30 evicts */
	assert_int_equal(submit(f, 1, 400, 2, false, 3), 0);
	pump_until(f, 1);
	wait_idle(f, &st);
	assert_int_equal(st.index.entries, 400 / BT);
	assert_int_equal(submit(f, 2, 400, 80, true, 4), 0);
	pump_until(f, 2);
	assert_int_equal(f->status[2], KVP_OK);
	wait_idle(f, &st);
	assert_true(st.pool.evictions > 0);
	assert_int_equal(st.index.entries, 400 / BT - st.pool.evictions);
	assert_int_equal(used_blocks(&st), 0);
}

static void test_cancel_and_close_release(void **state)
{
	struct fixture *f = *state;
	struct kvp_sched_stats st;

	/* a cancelled request ends with DONE/CANCELLED; a closed one ends silently */
	assert_int_equal(submit(f, 1, 100, 2000, true, 5), 0);
	for (int i = 0; i < 2000 && !f->n_tokens[1]; i++)
		pump(f, 5);
	assert_true(f->n_tokens[1] > 0);
	kvp_sched_cancel(f->sched, 1, 1);
	pump_until(f, 1);
	assert_int_equal(f->status[1], KVP_E_CANCELLED);
	assert_true(f->usage[1].generated_tokens < 2000);
	assert_int_equal(f->usage[1].generated_tokens, f->n_tokens[1]);

	assert_int_equal(submit(f, 2, 100, 2000, true, 6), 0);
	for (int i = 0; i < 2000 && !f->n_tokens[2]; i++)
		pump(f, 5);
	kvp_sched_conn_closed(f->sched, 1);
	wait_idle(f, &st);
	pump(f, 50);
	assert_false(f->done[2]);
	assert_int_equal(kvp_sched_outstanding(f->sched), 0);
	assert_int_equal(used_blocks(&st), 0);
	assert_int_equal(st.req_cancelled, 2);
}

static void test_shared_prefix_computed_once(void **state)
{
	struct fixture *f = *state;
	struct kvp_sched_stats st;
	int computed = 0;

	/* four requests arrive together: 96 shared tokens (6 blocks) + their own 64 */
	for (uint64_t id = 1; id <= 4; id++)
		assert_int_equal(submit(f, id, 160, 4, false, (uint32_t)id), 0);
	/*
	 * "together" for sure: the engine starts with all four in its inbox (started as
	 * they were submitted, it could finish the first prefill before the next arrived)
	 */
	assert_int_equal(kvp_sched_start(f->sched), 0);
	for (uint64_t id = 1; id <= 4; id++)
		pump_until(f, id);
	for (uint64_t id = 1; id <= 4; id++) {
		assert_int_equal(f->status[id], KVP_OK);
		if (f->usage[id].cached_tokens == 0) {
			computed++;
			assert_int_equal(f->usage[id].cache_creation_tokens, 160);
		} else {
			assert_int_equal(f->usage[id].cached_tokens, 96);
			assert_int_equal(f->usage[id].recomputed_tokens, 64);
			assert_int_equal(f->usage[id].cache_creation_tokens, 64);
		}
	}
	assert_int_equal(computed, 1);
	wait_idle(f, &st);
	assert_int_equal(st.prefix_waits, 3);
	assert_int_equal(st.hit_requests, 3);
}

static void test_prefill_interleaves_with_decode(void **state)
{
	struct fixture *f = *state;
	struct kvp_sched_stats st;
	uint32_t before, during;

	/*
	 * FIFO: a 2,048-token prompt arriving while another request streams joins the batch
	 * and is prefilled in 64-token chunks between decode steps: the running stream gets
	 * a token at every one of those 32 steps instead of waiting for the whole prefill
	 */
	assert_int_equal(submit(f, 1, 16, 1500, true, 9), 0);
	for (int i = 0; i < 2000 && !f->n_tokens[1]; i++)
		pump(f, 5);
	assert_true(f->n_tokens[1] > 0);
	pump(f, 0);
	before = f->n_tokens[1];
	assert_int_equal(submit(f, 2, 2048, 4, true, 10), 0);
	for (int i = 0; i < 4000 && !f->n_tokens[2]; i++)
		pump(f, 5);
	assert_true(f->n_tokens[2] > 0);
	during = f->n_tokens[1] - before;
	assert_true(during >= 2048 / 64 / 2);
	assert_false(f->done[1]);
	assert_int_equal(f->max_running_seen, 2);
	pump_until(f, 2);
	assert_int_equal(f->usage[2].recomputed_tokens, 2048);
	kvp_sched_cancel(f->sched, 1, 1);
	pump_until(f, 1);
	wait_idle(f, &st);
	assert_int_equal(used_blocks(&st), 0);
}

static void test_long_pieces_sliced_whole(void **state)
{
	struct fixture *f = *state;
	const struct kvp_tokenizer *t = f->tok;
	char want[4096];
	size_t n = 0;

	/* TOKEN text is exactly the pieces of the generated ids, however long they are */
	assert_int_equal(submit(f, 1, 20, 24, true, 11), 0);
	pump_until(f, 1);
	assert_int_equal(f->status[1], KVP_OK);
	assert_int_equal(f->n_tokens[1], 24);
	for (uint32_t i = 0; i < 24; i++) {
		size_t len;
		const char *p = kvp_tokenizer_piece(t, f->ids[1][i], &len);

		assert_non_null(p);
		assert_true(len > KVP_SCHED_EV_TEXT);
		memcpy(want + n, p, len);
		n += len;
	}
	assert_int_equal(f->text_len[1], n);
	assert_memory_equal(f->text[1], want, n);
}

static void test_generated_blocks_published(void **state)
{
	/*
	 * a request's generated tokens are published when it ends: a second request whose
	 * prompt is the first's prompt, its 30 generated ids and 5 more finds every full
	 * block of the positions the first computed (40 + 29: the last token is never fed
	 * back), 4 blocks, not just the 2 of the first prompt
	 */
	struct fixture *f = *state;
	struct kvp_sched_req r = { .conn = 1, .req_id = 2, .n_tokens = 75, .max_new = 1 };
	int32_t first[40];

	for (int i = 0; i < 40; i++)
		first[i] = 3 + (int32_t)((i * 7) % 256); /* what submit() writes */
	assert_int_equal(submit(f, 1, 40, 30, false, 0), 0);
	pump_until(f, 1);
	assert_int_equal(f->usage[1].status, KVP_OK);
	assert_int_equal(f->usage[1].generated_tokens, 30);
	assert_int_equal(f->usage[1].cache_creation_tokens, (40 + 29) / BT * BT);

	r.tokens = malloc(75 * sizeof(int32_t));
	assert_non_null(r.tokens);
	memcpy(r.tokens, first, sizeof(first));
	memcpy(r.tokens + 40, f->ids[1], 30 * sizeof(int32_t));
	for (int i = 70; i < 75; i++)
		r.tokens[i] = 3 + i;
	r.sample.top_p = 1.0f;
	assert_int_equal(kvp_sched_submit(f->sched, &r), 0);
	pump_until(f, 2);
	assert_int_equal(f->usage[2].status, KVP_OK);
	assert_int_equal(f->usage[2].cached_tokens, 4 * BT);
	assert_int_equal(f->usage[2].recomputed_tokens, 75 - 4 * BT);
}

static void test_drain_and_cancel_all(void **state)
{
	struct fixture *f = *state;
	struct kvp_sched_stats st;

	assert_int_equal(submit(f, 1, 50, 3000, true, 7), 0);
	usleep(20000);
	kvp_sched_drain(f->sched);
	assert_int_equal(submit(f, 2, 50, 10, true, 8), -ESHUTDOWN);
	kvp_sched_cancel_all(f->sched, KVP_E_SHUTDOWN);
	pump_until(f, 1);
	assert_int_equal(f->status[1], KVP_E_SHUTDOWN);
	wait_idle(f, &st);
	assert_int_equal(used_blocks(&st), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_never_fits_refused_at_once, setup_small,
						teardown),
		cmocka_unit_test_setup_teardown(test_admission_waits_for_blocks, setup_small,
						teardown),
		cmocka_unit_test_setup_teardown(test_cached_blocks_evicted_for_new_work,
						setup_small, teardown),
		cmocka_unit_test_setup_teardown(test_cancel_and_close_release, setup_big, teardown),
		cmocka_unit_test_setup_teardown(test_shared_prefix_computed_once, setup_big_stopped,
						teardown),
		cmocka_unit_test_setup_teardown(test_prefill_interleaves_with_decode,
						setup_big_fifo, teardown),
		cmocka_unit_test_setup_teardown(test_long_pieces_sliced_whole, setup_long_pieces,
						teardown),
		cmocka_unit_test_setup_teardown(test_drain_and_cancel_all, setup_big, teardown),
		cmocka_unit_test_setup_teardown(test_generated_blocks_published, setup_big,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
