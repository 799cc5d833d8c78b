/* SPDX-License-Identifier: MIT */
/*
 * test_sched.c - the scheduling policy against a real kvpoold (default policy, fair),
 * with a small synthetic model whose steps take milliseconds: a short prompt arriving
 * during a long prefill gets its first token first, within the prefill step under way
 * plus its own time; a running stream keeps gaps within the engine's measured step
 * budget while a long prompt prefills; the long prompt's own prefill stays close to its
 * time alone; sixteen
 * requests asking for 4,096 tokens all run at once; a high-priority request preempts
 * low-priority streams, and every request still gets kvpool-run's tokens.
 *
 * This machine is shared and noisy: the bounds are orders, and ratios of times measured
 * in the same run or reported by the daemon itself, with generous margins; never
 * absolute times.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kvpool/kvpool.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

#define LONG 2000
#define MAX_GAPS 8192

struct fixture {
	struct kvpd d; /* first: kvpd_teardown() */
};

static int setup_with(void **state, const char *pool)
{
	struct fixture *f = calloc(1, sizeof(*f));
	const char *args[] = { "--model",      f->d.model,  "--pool-size", pool,
			       "--ignore-eos", "--threads", "2",	   NULL };

	*state = f;
	if (!f || kvpd_init(&f->d) || kvpd_model_mid(&f->d, 8192))
		return -1;
	if (kvpd_start(&f->d, 120, args)) {
		kvpd_dump_log(&f->d);
		kvpd_cleanup(&f->d);
		return -1;
	}
	return 0;
}

static int setup(void **state)
{
	return setup_with(state, "256M");
}

/* A pool of 48 blocks of 16 tokens (4 KiB a token: 4 layers x 4 KV heads x 64, f16). */
static int setup_small_pool(void **state)
{
	return setup_with(state, "3M");
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static void fill(int32_t *t, uint32_t n)
{
	kvp_test_fill_ids(&rng, t, n, 256);
}

struct timed {
	double t_send, t_first, t_last;
	uint32_t n_tokens;
	uint32_t n_gaps;
	double gaps[MAX_GAPS];
	int32_t ids[512];
	atomic_bool *stop;
	struct kvp_usage usage;
	int rc;
};

static int on_tokens(void *arg, const int32_t *t, uint32_t n, const char *text, uint32_t tl)
{
	struct timed *tm = arg;
	double now = kvp_test_now_s();

	for (uint32_t i = 0; i < n && tm->n_tokens + i < 512; i++)
		tm->ids[tm->n_tokens + i] = t[i];
	if (n) {
		if (!tm->t_first)
			tm->t_first = now;
		else if (tm->n_gaps < MAX_GAPS)
			tm->gaps[tm->n_gaps++] = now - tm->t_last;
		tm->t_last = now;
		tm->n_tokens += n;
	}
	return tm->stop && atomic_load(tm->stop);
}

static int generate(const char *sock, const int32_t *prompt, uint32_t n, uint32_t max_new,
		    int32_t priority, bool cache, struct timed *tm)
{
	struct kvp_client_prompt pr = { .tokens = prompt, .n_tokens = n };
	struct kvp_client_params p;
	struct kvp_client *k = NULL;
	int r;

	kvp_client_params_init(&p);
	p.max_new_tokens = max_new;
	p.no_cache = !cache;
	p.priority = priority;
	r = kvp_client_connect(&k, sock);
	if (!r) {
		tm->t_send = kvp_test_now_s();
		r = kvp_client_generate(k, &pr, &p, on_tokens, tm, &tm->usage);
	}
	kvp_client_close(k);
	return r == KVP_E_CANCELLED ? 0 : r;
}

static double status_ms(struct fixture *f, const char *path)
{
	return kvpd_status_num(&f->d, path, 0);
}

struct bg {
	const char *sock;
	int32_t prompt[LONG];
	uint32_t n, max_new;
	int32_t priority;
	bool cache;
	struct timed tm;
	pthread_t th;
};

static void *bg_main(void *arg)
{
	struct bg *b = arg;

	b->tm.rc = generate(b->sock, b->prompt, b->n, b->max_new, b->priority, b->cache, &b->tm);
	return NULL;
}

static double median(const double *v, uint32_t n)
{
	double *c = malloc((n ? n : 1) * sizeof(double));
	double m = 0;

	if (c && n) {
		memcpy(c, v, n * sizeof(double));
		m = kvp_test_median(c, (int)n);
	}
	free(c);
	return m;
}

static void test_short_prompt_first(void **state)
{
	/*
	 * a 16-token request arriving during a 2,000-token prefill gets its first token
	 * before the long prompt does, after at most the prefill step under way and its
	 * own prefill (with a margin of 2x); the long
	 * prompt's own prefill time stays within 2x of its time alone (target 1.1x of one
	 * chunked in 256-token steps: test_sched_policy.c checks that on an exact clock)
	 */
	struct fixture *f = *state;
	static struct bg l;
	static struct timed alone, during, long_alone;
	int32_t s[16];

	static struct timed long_after;
	double prefill_alone;

	fill(s, 16);
	assert_int_equal(generate(f->d.sock, s, 16, 1, 0, false, &alone), 0);
	memset(&l, 0, sizeof(l));
	l.sock = f->d.sock;
	fill(l.prompt, LONG);
	assert_int_equal(generate(f->d.sock, l.prompt, LONG, 1, 0, false, &long_alone), 0);
	fill(l.prompt, LONG);
	l.n = LONG;
	l.max_new = 1;
	pthread_create(&l.th, NULL, bg_main, &l);
	usleep(50000 + (useconds_t)(1000 * 1000 * (long_alone.t_first - long_alone.t_send) / 8));
	fill(s, 16);
	assert_int_equal(generate(f->d.sock, s, 16, 1, 0, false, &during), 0);
	pthread_join(l.th, NULL);
	assert_int_equal(l.tm.rc, 0);
	/* the machine's load drifts: the long prompt alone before and after, the better */
	fill(l.prompt, LONG);
	assert_int_equal(generate(f->d.sock, l.prompt, LONG, 1, 0, false, &long_after), 0);
	prefill_alone = long_alone.usage.prefill_ms < long_after.usage.prefill_ms ?
				long_alone.usage.prefill_ms :
				long_after.usage.prefill_ms;
	print_message("short TTFT alone %.1f ms, during the long prefill %.1f ms; long prompt "
		      "prefill %.0f / %.0f ms alone, %.0f ms with the short one\n",
		      (alone.t_first - alone.t_send) * 1e3, (during.t_first - during.t_send) * 1e3,
		      long_alone.usage.prefill_ms, long_after.usage.prefill_ms,
		      l.tm.usage.prefill_ms);
	assert_true(during.t_first < l.tm.t_first);
	/* it waits for the prefill step under way at most, then its own prefill (x2: noise) */
	assert_true(during.t_first - during.t_send <=
		    2 * (status_ms(f, "scheduler.prefill_step_ms") / 1e3 +
			 (alone.t_first - alone.t_send)));
	assert_true(l.tm.usage.prefill_ms <= 2 * prefill_alone);
}

static void test_stream_gap_bounded(void **state)
{
	/*
	 * a stream keeps getting tokens while a 2,000-token prompt prefills (the first
	 * policy: a whole chunk of 256 tokens per gap)
	 */
	struct fixture *f = *state;
	static struct bg st;
	static struct timed l;
	static int32_t prompt[LONG];
	atomic_bool stop = false;
	uint32_t n_alone;
	double med, worst = 0, p90, target, chunk;

	memset(&st, 0, sizeof(st));
	st.sock = f->d.sock;
	fill(st.prompt, 16);
	st.n = 16;
	st.max_new = 4096;
	st.tm.stop = &stop;
	pthread_create(&st.th, NULL, bg_main, &st);
	while (st.tm.n_gaps < 40)
		usleep(10000);
	n_alone = st.tm.n_gaps;
	med = median(st.tm.gaps, n_alone);
	fill(prompt, LONG);
	assert_int_equal(generate(f->d.sock, prompt, LONG, 1, 0, false, &l), 0);
	for (uint32_t i = n_alone; i < st.tm.n_gaps; i++)
		if (st.tm.gaps[i] > worst)
			worst = st.tm.gaps[i];
	{
		struct jsonq *j = kvpd_status(&f->d);
		double sorted[MAX_GAPS];
		uint32_t nd = st.tm.n_gaps - n_alone;

		memcpy(sorted, st.tm.gaps + n_alone, nd * sizeof(double));
		kvp_test_median(sorted, (int)nd);
		p90 = kvp_test_percentile_sorted(sorted, (int)nd, 90);
		target = jsonq_num(j, "scheduler.step_target_ms", 0) / 1e3;
		chunk = l.usage.prefill_ms / 1e3 * 256 / LONG;
		print_message("stream: median gap alone %.2f ms, during the prefill: median %.2f, "
			      "p90 %.2f, p99 %.2f, largest %.2f ms (%u gaps); step target %.2f ms, "
			      "calibrated decode %.2f ms; the long prompt's prefill %.0f ms; "
			      "p90 = median alone + %.2f x target (bound 3), largest = median "
			      "alone + %.2f x target (bound 4) = %.2f x a 256-token chunk\n",
			      med * 1e3, kvp_test_percentile_sorted(sorted, (int)nd, 50) * 1e3,
			      p90 * 1e3, kvp_test_percentile_sorted(sorted, (int)nd, 99) * 1e3,
			      worst * 1e3, nd, target * 1e3,
			      jsonq_num(j, "scheduler.calib_decode_ms", 0), l.usage.prefill_ms,
			      (p90 - med) / target, (worst - med) / target, worst / chunk);
		/* the daemon's own view of the same stream: inter-token and step times */
		assert_true(jsonq_num(j, "scheduler.itl_p50_ms", 0) > 0);
		assert_true(jsonq_num(j, "scheduler.itl_p99_ms", 0) >=
			    jsonq_num(j, "scheduler.itl_p50_ms", 0));
		assert_true(jsonq_num(j, "scheduler.itl_max_ms", 0) >=
			    jsonq_num(j, "scheduler.itl_p99_ms", 0));
		assert_true(jsonq_num(j, "scheduler.itl_max_ms", 0) / 1e3 >= 0.5 * p90);
		assert_true(jsonq_num(j, "scheduler.step_p50_ms", 0) > 0);
		assert_true(jsonq_num(j, "scheduler.step_max_ms", 0) >=
			    jsonq_num(j, "scheduler.step_p50_ms", 0));
		jsonq_free(j);
	}
	atomic_store(&stop, true);
	pthread_join(st.th, NULL);
	assert_int_equal(st.tm.rc, 0);
	/*
	 * it kept streaming: tokens all through the prefill, each step within the step
	 * budget the engine measured for itself (the median within 2x, the 90th percentile
	 * within 3x), where the first policy's step is a whole 256-token chunk.  The
	 * largest gap is one sample, and this machine stalls processes now and then: within
	 * 4x the budget, or, on a loaded machine (load 12 on 2 vCPUs: one stall of a few
	 * hundred ms), below that 256-token chunk, timed by this same run's prefill.  So
	 * the largest gap alone bounds little; the 90th percentile bounds the tail that a
	 * single stall does not move.
	 */
	assert_true(st.tm.n_gaps - n_alone >= 16);
	assert_true(median(st.tm.gaps + n_alone, st.tm.n_gaps - n_alone) <= 2 * target + med);
	assert_true(p90 <= 3 * target + med);
	assert_true(worst <= 4 * target + med || worst < chunk);
}

static void test_early_stoppers_all_run(void **state)
{
	/* sixteen requests of 100 tokens asking for 4,096 each all run at once */
	struct fixture *f = *state;
	struct kvp_client *k = NULL;
	int32_t prompt[100];
	double best = 0;

	assert_int_equal(kvp_client_connect(&k, f->d.sock), 0);
	for (int i = 0; i < 16; i++) {
		struct kvp_client_prompt pr = { .tokens = prompt, .n_tokens = 100 };
		struct kvp_client_params p;
		uint64_t id;

		fill(prompt, 100);
		kvp_client_params_init(&p);
		p.max_new_tokens = 4096;
		assert_int_equal(kvp_client_submit(k, &pr, &p, &id), 0);
	}
	for (int t = 0; t < 100 && best < 16; t++) {
		struct jsonq *j;

		usleep(50000);
		j = kvpd_status(&f->d);
		assert_non_null(j);
		if (jsonq_num(j, "scheduler.running", 0) > best)
			best = jsonq_num(j, "scheduler.running", 0);
		jsonq_free(j);
	}
	kvp_client_close(k);
	assert_true(best == 16);
}

static void test_priority_preempts_same_tokens(void **state)
{
	/*
	 * a pool of 48 blocks: two low-priority streams grow into it (25 blocks each at the
	 * end); a high-priority request that does not fit preempts the later one; every
	 * request gets kvpool-run's tokens
	 */
	struct fixture *f = *state;
	static struct bg lo[2], hi;
	int32_t want[300];
	uint32_t n_want;
	struct jsonq *j;

	for (int i = 0; i < 2; i++) {
		memset(&lo[i], 0, sizeof(lo[i]));
		lo[i].sock = f->d.sock;
		fill(lo[i].prompt, 100);
		lo[i].n = 100;
		lo[i].max_new = 300; /* 25 blocks each at the end */
		lo[i].priority = -5;
		lo[i].cache = true; /* resumes through the prefix cache */
		pthread_create(&lo[i].th, NULL, bg_main, &lo[i]);
		while (!lo[i].tm.n_tokens)
			usleep(5000);
	}
	while (lo[1].tm.n_tokens < 100)
		usleep(5000);
	memset(&hi, 0, sizeof(hi));
	hi.sock = f->d.sock;
	fill(hi.prompt, 300); /* 19 blocks: more than the pool has left */
	hi.n = 300;
	hi.max_new = 20;
	hi.priority = 5;
	pthread_create(&hi.th, NULL, bg_main, &hi);
	pthread_join(hi.th, NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(lo[i].th, NULL);
	assert_int_equal(hi.tm.rc, 0);
	j = kvpd_status(&f->d);
	assert_non_null(j);
	print_message("preemptions %.0f; low streams preempted %u and %u times\n",
		      jsonq_num(j, "scheduler.preemptions", -1), lo[0].tm.usage.preemptions,
		      lo[1].tm.usage.preemptions);
	assert_true(jsonq_num(j, "scheduler.preemptions", 0) >= 1);
	jsonq_free(j);
	assert_int_equal(hi.tm.usage.preemptions, 0);
	assert_true(lo[1].tm.usage.preemptions >= 1);
	/* the same tokens as offline, preempted or not */
	assert_int_equal(kvpd_offline(f->d.model, hi.prompt, 300, 20, true, want, &n_want), 0);
	assert_int_equal(hi.tm.n_tokens, 20);
	assert_memory_equal(hi.tm.ids, want, 20 * sizeof(int32_t));
	for (int i = 0; i < 2; i++) {
		assert_int_equal(lo[i].tm.rc, 0);
		assert_int_equal(kvpd_offline(f->d.model, lo[i].prompt, 100, 300, true, want,
					      &n_want),
				 0);
		assert_int_equal(lo[i].tm.n_tokens, 300);
		assert_memory_equal(lo[i].tm.ids, want, 300 * sizeof(int32_t));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_short_prompt_first, setup, kvpd_teardown),
		cmocka_unit_test_setup_teardown(test_stream_gap_bounded, setup, kvpd_teardown),
		cmocka_unit_test_setup_teardown(test_early_stoppers_all_run, setup, kvpd_teardown),
		cmocka_unit_test_setup_teardown(test_priority_preempts_same_tokens,
						setup_small_pool, kvpd_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
