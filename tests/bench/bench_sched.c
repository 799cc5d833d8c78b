/* SPDX-License-Identifier: MIT */
/*
 * bench_sched.c - the scheduler under mixed load, the fair policy against the first one
 * (scheduler.policy = fifo) in the same run, on the demo model (docs/daemon.md
 * "Scheduling"):
 *
 *  1. concurrency: 16 requests of 100 prompt tokens with max_new 4,096 on a 1 GiB pool:
 *     how many run at once; and 8 on a 350 MiB pool, where the first policy admits 3 of
 *     them, as it did on the model with 1 GiB (its K/V per token is 2.5x the demo
 *     model's, whose 4 K/V heads let the first policy run 10 of 16 in 1 GiB);
 *  2. TTFT of a 16-token request arriving during a 4,000-token prefill, against the same
 *     request alone: one after another at random moments while the prefill lasts (at
 *     most ARRIVALS per prefill; the first policy serves one, after the whole prefill),
 *     medians over TTFT_RUNS prefills; the long prompt's first token next to the first
 *     policy's (the 1.1x for fair prefill);
 *  3. the largest gap between two tokens of a running stream while a 4,000-token prompt
 *     prefills, against its median gap alone (and the 99th percentile: the largest is
 *     one step of ~1,700 that met the machine's noise); the long prompt's time to its
 *     first token next to the first policy's;
 *  4. aggregate tokens/s of 8 and of 32 concurrent streams (100-token prompts, max_new
 *     4,096, each client stops after STREAM_TOKENS tokens: chat clients that ask for much
 *     and stop early), on 1 GiB, and the 8 on 350 MiB as in 1.;
 *  5. goodput: requests per second that met TTFT <= 1 s and every inter-token gap <= 100
 *     ms, at rising Poisson arrival rates (prompts of 50..400 tokens, 32..128 new ones;
 *     the same arrivals for both policies).
 *
 * Times are measured by the client (just before GENERATE is sent, each TOKEN frame).
 * Every figure is printed for both policies with the ratio fair / fifo (or the ratio the
 * issue names).  KVP_BENCH_QUICK=1 runs fewer and shorter rounds.  The CPU regime is
 * printed before and after.  KVP_BENCH_STEP_TARGET_MS=N tries another step target.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvpool/kvpool.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

#define TTFT_RUNS 3
#define ARRIVALS 6 /* short requests during one long prefill, at most */
#define STREAM_TOKENS 128
#define LONG_PROMPT 4000
#define MAX_GAPS 8192

static bool quick;
static char model[512];

static uint64_t rng = 0x2545f4914f6cdd1dull;
static pthread_mutex_t rng_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t rnd(void)
{
	uint64_t v;

	pthread_mutex_lock(&rng_lock);
	v = kvp_test_xorshift(&rng);
	pthread_mutex_unlock(&rng_lock);
	return v;
}

static void fill(int32_t *t, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		t[i] = 3 + (int32_t)(rnd() % 256);
}

static const char *const policies[2] = { "fair", "fifo" };

/* the pool of every run but one (SMALL_POOL: where fifo admits 3 of 8 chat streams) */
#define POOL "1G"
#define SMALL_POOL "350M"

static int start_pool(struct kvpd *d, const char *policy, bool ignore_eos, const char *pool)
{
	/* KVP_BENCH_STEP_TARGET_MS: the fair policy's step target instead of the calibrated */
	const char *step = getenv("KVP_BENCH_STEP_TARGET_MS");
	const char *args[12] = { "--model", model, "--pool-size", pool, "--sched-policy", policy };
	int n = 6;

	if (ignore_eos)
		args[n++] = "--ignore-eos";
	if (step) {
		args[n++] = "--step-target-ms";
		args[n++] = step;
	}
	args[n] = NULL;

	if (kvpd_init(d) || kvpd_start(d, 600, args)) {
		kvpd_dump_log(d);
		kvpd_cleanup(d);
		return -1;
	}
	return 0;
}

static int start(struct kvpd *d, const char *policy, bool ignore_eos)
{
	return start_pool(d, policy, ignore_eos, POOL);
}

/* ---- one timed request ---- */

struct timed {
	double t_send;
	double t_first;
	double t_last;
	double max_gap;
	uint32_t n_tokens;
	uint32_t stop_after; /* cancel after this many tokens (0: never) */
	uint32_t n_gaps;
	double gaps[MAX_GAPS];
	atomic_bool *stop; /* cancel when it turns true */
	bool record_gaps;
};

static int on_tokens(void *arg, const int32_t *t, uint32_t n, const char *text, uint32_t tl)
{
	struct timed *tm = arg;
	double now = kvp_test_now_s();

	if (n) {
		if (!tm->t_first) {
			tm->t_first = now;
		} else {
			double gap = now - tm->t_last;

			if (gap > tm->max_gap)
				tm->max_gap = gap;
			if (tm->record_gaps && tm->n_gaps < MAX_GAPS)
				tm->gaps[tm->n_gaps++] = gap;
		}
		tm->t_last = now;
		tm->n_tokens += n;
	}
	if (tm->stop_after && tm->n_tokens >= tm->stop_after)
		return 1;
	return tm->stop && atomic_load(tm->stop);
}

/* One blocking request on @k; fills @tm.  Return: 0, or -1 when it failed. */
static int request(struct kvp_client *k, const int32_t *prompt, uint32_t n, uint32_t max_new,
		   bool no_cache, struct timed *tm, struct kvp_usage *u)
{
	struct kvp_client_prompt pr = { .tokens = prompt, .n_tokens = n };
	struct kvp_client_params p;
	struct kvp_usage local;
	int r;

	kvp_client_params_init(&p);
	p.max_new_tokens = max_new;
	p.no_cache = no_cache;
	tm->t_send = kvp_test_now_s();
	r = kvp_client_generate(k, &pr, &p, on_tokens, tm, u ? u : &local);
	if (r && r != KVP_E_CANCELLED) {
		fprintf(stderr, "bench: generate: %d %s\n", r, kvp_client_errmsg(k));
		return -1;
	}
	return 0;
}

static double ttft_ms(const struct timed *tm)
{
	return (tm->t_first - tm->t_send) * 1e3;
}

static double median_of(const double *v, uint32_t n)
{
	double *c = malloc(n * sizeof(double));
	double m;

	if (!c || !n) {
		free(c);
		return 0;
	}
	memcpy(c, v, n * sizeof(double));
	m = kvp_test_median(c, (int)n);
	free(c);
	return m;
}

/* ---- 1. concurrency ---- */

/* @n requests of 100 + max_new 4,096 on a @pool pool: how many run at once */
static int bench_concurrency(const char *pool, int n, double running[2])
{
	for (int pol = 0; pol < 2; pol++) {
		struct kvpd d;
		struct kvp_client *k = NULL;
		static int32_t prompt[100];
		double best = 0;

		if (start_pool(&d, policies[pol], true, pool) || kvp_client_connect(&k, d.sock))
			return -1;
		for (int i = 0; i < n; i++) {
			struct kvp_client_prompt pr = { .tokens = prompt, .n_tokens = 100 };
			struct kvp_client_params p;
			uint64_t id;

			fill(prompt, 100);
			kvp_client_params_init(&p);
			p.max_new_tokens = 4096;
			if (kvp_client_submit(k, &pr, &p, &id))
				return -1;
		}
		/* let admission settle: the most seen running over 3 s */
		for (int t = 0; t < 15; t++) {
			struct jsonq *j;

			usleep(200000);
			j = kvpd_status(&d);
			if (j && jsonq_num(j, "scheduler.running", 0) > best)
				best = jsonq_num(j, "scheduler.running", 0);
			jsonq_free(j);
		}
		running[pol] = best;
		printf("concurrency (%s, %s pool): %.0f of %d running at once\n", policies[pol],
		       pool, best, n);
		kvp_client_close(k); /* cancels them */
		kvpd_cleanup(&d);
	}
	return 0;
}

/* ---- 2. short TTFT during a long prefill; 3. stream gap during a long prefill ---- */

struct bg {
	const char *sock;
	const int32_t *prompt;
	uint32_t n;
	uint32_t max_new;
	struct timed tm;
	struct kvp_usage u;
	int rc;
	atomic_bool done;
};

static void *bg_main(void *arg)
{
	struct bg *b = arg;
	struct kvp_client *k = NULL;

	b->rc = kvp_client_connect(&k, b->sock);
	if (!b->rc)
		b->rc = request(k, b->prompt, b->n, b->max_new, true, &b->tm, &b->u);
	kvp_client_close(k);
	atomic_store(&b->done, true);
	return NULL;
}

static int bench_ttft(double during[2], double alone[2], double long_first[2])
{
	static int32_t long_prompt[LONG_PROMPT];
	int32_t short_prompt[16];

	for (int pol = 0; pol < 2; pol++) {
		double a[TTFT_RUNS], w[TTFT_RUNS * ARRIVALS], lf[TTFT_RUNS];
		struct kvp_client *k = NULL;
		struct kvpd d;
		int runs = quick ? 1 : TTFT_RUNS;
		uint32_t n_w = 0;

		if (start(&d, policies[pol], false) || kvp_client_connect(&k, d.sock))
			return -1;
		for (int r = 0; r < runs; r++) {
			struct timed tm = { 0 };
			struct bg b = { .sock = d.sock,
					.prompt = long_prompt,
					.n = LONG_PROMPT,
					.max_new = 1 };
			struct timed sh[ARRIVALS];
			int n_sh = 0, n_during = 0;
			pthread_t th;

			fill(short_prompt, 16);
			if (request(k, short_prompt, 16, 1, true, &tm, NULL))
				return -1;
			a[r] = ttft_ms(&tm);
			fill(long_prompt, LONG_PROMPT);
			pthread_create(&th, NULL, bg_main, &b);
			/*
			 * arrive at random moments: the first in the prefill's first seconds,
			 * each next one 0.2 .. 1 s after the previous one's first token, while
			 * the prefill lasts (its first token is its end: max_new 1)
			 */
			usleep(500000 + (useconds_t)(rnd() % 1500000));
			do {
				memset(&sh[n_sh], 0, sizeof(sh[n_sh]));
				fill(short_prompt, 16);
				if (request(k, short_prompt, 16, 1, true, &sh[n_sh], NULL))
					return -1;
				n_sh++;
				usleep(200000 + (useconds_t)(rnd() % 800000));
			} while (n_sh < ARRIVALS && !atomic_load(&b.done));
			pthread_join(th, NULL);
			if (b.rc)
				return -1;
			lf[r] = ttft_ms(&b.tm);
			printf("  %s run %d: 16-token TTFT alone %.1f ms, during the prefill",
			       policies[pol], r, a[r]);
			for (int i = 0; i < n_sh; i++) {
				/* only those sent before the prefill ended */
				if (sh[i].t_send >= b.tm.t_first)
					continue;
				w[n_w++] = ttft_ms(&sh[i]);
				n_during++;
				printf(" %.1f", ttft_ms(&sh[i]));
			}
			printf(" ms (the long prompt: first token after %.0f ms)\n",
			       ttft_ms(&b.tm));
			if (!n_during) {
				fprintf(stderr,
					"bench: no short request came during the prefill\n");
				return -1;
			}
		}
		alone[pol] = median_of(a, (uint32_t)runs);
		during[pol] = median_of(w, n_w);
		long_first[pol] = median_of(lf, (uint32_t)runs);
		kvp_client_close(k);
		kvpd_cleanup(&d);
	}
	return 0;
}

struct stream {
	const char *sock;
	int32_t prompt[16];
	struct timed tm;
	atomic_bool stop;
	int rc;
};

static void *stream_main(void *arg)
{
	struct stream *s = arg;
	struct kvp_client *k = NULL;

	s->tm.stop = &s->stop;
	s->tm.record_gaps = true;
	s->rc = kvp_client_connect(&k, s->sock);
	if (!s->rc)
		s->rc = request(k, s->prompt, 16, 4096, true, &s->tm, NULL);
	kvp_client_close(k);
	return NULL;
}

static int bench_gap(double max_gap[2], double p99_gap[2], double median_alone[2],
		     double long_ttft[2])
{
	static int32_t long_prompt[LONG_PROMPT];

	for (int pol = 0; pol < 2; pol++) {
		static struct stream s;
		struct kvp_client *k = NULL;
		struct timed tm = { 0 };
		struct kvpd d;
		pthread_t th;
		uint32_t n_alone;
		double worst;

		if (start(&d, policies[pol], true) || kvp_client_connect(&k, d.sock))
			return -1;
		memset(&s, 0, sizeof(s));
		s.sock = d.sock;
		fill(s.prompt, 16);
		pthread_create(&th, NULL, stream_main, &s);
		sleep(2); /* its gaps alone */
		n_alone = s.tm.n_gaps;
		median_alone[pol] = median_of(s.tm.gaps, n_alone);
		fill(long_prompt, LONG_PROMPT);
		if (request(k, long_prompt, LONG_PROMPT, 1, true, &tm, NULL))
			return -1;
		worst = 0;
		for (uint32_t i = n_alone; i < s.tm.n_gaps; i++)
			if (s.tm.gaps[i] > worst)
				worst = s.tm.gaps[i];
		max_gap[pol] = worst;
		p99_gap[pol] = 0;
		if (s.tm.n_gaps > n_alone) {
			uint32_t n = s.tm.n_gaps - n_alone;

			kvp_test_median(s.tm.gaps + n_alone, (int)n); /* sorts them */
			p99_gap[pol] = kvp_test_percentile_sorted(s.tm.gaps + n_alone, (int)n, 99);
		}
		long_ttft[pol] = ttft_ms(&tm);
		atomic_store(&s.stop, true);
		pthread_join(th, NULL);
		printf("  %s: stream median gap alone %.1f ms (%u gaps), largest during the "
		       "4000-token prefill %.1f ms (%u gaps); the long prompt's first token after "
		       "%.0f ms\n",
		       policies[pol], median_alone[pol] * 1e3, n_alone, worst * 1e3,
		       s.tm.n_gaps - n_alone, long_ttft[pol]);
		kvp_client_close(k);
		kvpd_cleanup(&d);
	}
	return 0;
}

/* ---- 4. aggregate tokens/s ---- */

struct chat {
	const char *sock;
	pthread_barrier_t *go;
	struct timed tm;
	int rc;
};

static void *chat_main(void *arg)
{
	struct chat *c = arg;
	struct kvp_client *k = NULL;
	int32_t prompt[100];

	fill(prompt, 100);
	c->tm.stop_after = STREAM_TOKENS;
	c->rc = kvp_client_connect(&k, c->sock);
	pthread_barrier_wait(c->go);
	if (!c->rc)
		c->rc = request(k, prompt, 100, 4096, true, &c->tm, NULL);
	kvp_client_close(k);
	return NULL;
}

static int bench_throughput(uint32_t n, const char *pool, double tps[2])
{
	for (int pol = 0; pol < 2; pol++) {
		struct chat *c = calloc(n, sizeof(*c));
		pthread_t *th = calloc(n, sizeof(*th));
		pthread_barrier_t go;
		struct kvpd d;
		double t0 = 0, t1 = 0;
		uint64_t tokens = 0;

		if (!c || !th || start_pool(&d, policies[pol], true, pool))
			return -1;
		pthread_barrier_init(&go, NULL, n + 1);
		for (uint32_t i = 0; i < n; i++) {
			c[i] = (struct chat){ .sock = d.sock, .go = &go };
			pthread_create(&th[i], NULL, chat_main, &c[i]);
		}
		pthread_barrier_wait(&go);
		t0 = kvp_test_now_s();
		for (uint32_t i = 0; i < n; i++) {
			pthread_join(th[i], NULL);
			if (c[i].rc)
				return -1;
			tokens += c[i].tm.n_tokens;
			if (c[i].tm.t_last > t1)
				t1 = c[i].tm.t_last;
		}
		tps[pol] = (double)tokens / (t1 - t0);
		printf("  %s: %u streams x %u tokens, %s pool: %llu tokens in %.2f s\n",
		       policies[pol], n, STREAM_TOKENS, pool, (unsigned long long)tokens, t1 - t0);
		pthread_barrier_destroy(&go);
		kvpd_cleanup(&d);
		free(c);
		free(th);
	}
	return 0;
}

/* ---- 5. goodput under Poisson arrivals ---- */

struct arrival {
	const char *sock;
	uint32_t n_prompt, max_new;
	struct timed tm;
	int rc;
	bool good;
};

static void *arrival_main(void *arg)
{
	struct arrival *a = arg;
	struct kvp_client *k = NULL;
	int32_t prompt[400];

	fill(prompt, a->n_prompt);
	a->rc = kvp_client_connect(&k, a->sock);
	if (!a->rc)
		a->rc = request(k, prompt, a->n_prompt, a->max_new, true, &a->tm, NULL);
	kvp_client_close(k);
	a->good = !a->rc && a->tm.t_first && ttft_ms(&a->tm) <= 1000 && a->tm.max_gap <= 0.100 &&
		  a->tm.n_tokens == a->max_new;
	return NULL;
}

/* Requests/s meeting both bounds at @rate arrivals/s over @secs of arrivals. */
/*
 * Requests that met the bounds, per second, at @rate for @secs; *@offered: how many came.
 * The arrival times and sizes come from @seed alone, so both policies get the same ones.
 */
static double goodput(const char *sock, double rate, double secs, uint64_t seed, double *p99_ttft,
		      uint32_t *offered)
{
	uint32_t cap = (uint32_t)(rate * secs * 3) + 16, n = 0, good = 0;
	uint64_t x = seed;
	struct arrival *a = calloc(cap, sizeof(*a));
	pthread_t *th = calloc(cap, sizeof(*th));
	double t = kvp_test_now_s(), end = t + secs;
	double *ttft;

	if (!a || !th)
		return -1;
	while (n < cap) {
		/* exponential gaps: a Poisson process of @rate */
		double u = ((double)(kvp_test_xorshift(&x) >> 11) + 0.5) / 9007199254740992.0;

		t += -log(u) / rate;
		if (t >= end)
			break;
		while (kvp_test_now_s() < t)
			usleep(1000);
		a[n] = (struct arrival){ .sock = sock,
					 .n_prompt = 50 + (uint32_t)(kvp_test_xorshift(&x) % 351),
					 .max_new = 32 + (uint32_t)(kvp_test_xorshift(&x) % 97) };
		pthread_create(&th[n], NULL, arrival_main, &a[n]);
		n++;
	}
	ttft = calloc(n + 1, sizeof(double));
	for (uint32_t i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		good += a[i].good;
		if (ttft)
			ttft[i] = a[i].tm.t_first ? ttft_ms(&a[i].tm) : 1e9;
	}
	if (ttft && n) {
		kvp_test_median(ttft, (int)n);
		*p99_ttft = kvp_test_percentile_sorted(ttft, (int)n, 99);
	}
	free(ttft);
	free(a);
	free(th);
	*offered = n;
	return good / secs;
}

static int bench_goodput(void)
{
	static const double rates[] = { 0.5, 1, 1.5, 2, 3 };
	double secs = quick ? 8 : 15;
	double g[2][5], p99[2][5];
	uint32_t n_rates = quick ? 3 : 5;

	for (int pol = 0; pol < 2; pol++) {
		struct kvpd d;

		if (start(&d, policies[pol], false))
			return -1;
		for (uint32_t r = 0; r < n_rates; r++) {
			uint32_t offered = 0;

			g[pol][r] = goodput(d.sock, rates[r], secs, 0x9e3779b9u * (r + 1),
					    &p99[pol][r], &offered);
			printf("  %s: %.1f req/s offered: goodput %.2f req/s, %.0f of %u requests "
			       "(TTFT p99 %.0f ms)\n",
			       policies[pol], rates[r], g[pol][r], g[pol][r] * secs, offered,
			       p99[pol][r]);
			sleep(2); /* drain */
		}
		kvpd_cleanup(&d);
	}
	for (uint32_t r = 0; r < n_rates; r++) {
		char name[96];

		snprintf(name, sizeof(name), "goodput at %.1f req/s offered (fair)", rates[r]);
		kvp_bench_report(name, g[0][r], "req/s", "fifo", g[1][r], "req/s");
	}
	return 0;
}

int main(void)
{
	struct kvpd md;
	double a[2], b[2], c[2], p99[2];

	quick = getenv("KVP_BENCH_QUICK") != NULL;
	kvp_bench_cpu_regime(1000);
	if (kvpd_init(&md) || kvpd_model(&md, "demo", model, sizeof(model))) {
		fprintf(stderr, "bench_sched: cannot write the demo model\n");
		return 1;
	}
	if (bench_concurrency(POOL, 16, a) < 0)
		goto fail;
	kvp_bench_report("requests running at once, 16 x (100 + max_new 4096), 1 GiB (fair)", a[0],
			 "", "fifo", a[1], "");
	if (bench_concurrency(SMALL_POOL, 8, a) < 0)
		goto fail;
	kvp_bench_report("requests running at once, 8 x (100 + max_new 4096), " SMALL_POOL
			 " (fair)",
			 a[0], "", "fifo", a[1], "");
	if (bench_ttft(a, b, c) < 0)
		goto fail;
	kvp_bench_report("16-token TTFT during a 4000-token prefill (fair)", a[0], "ms",
			 "same request alone (fair)", b[0], "ms");
	kvp_bench_report("16-token TTFT during a 4000-token prefill (fifo)", a[1], "ms",
			 "same request alone (fifo)", b[1], "ms");
	kvp_bench_report("4000-token prompt's first token, a short one arriving (fair)", c[0], "ms",
			 "fifo", c[1], "ms");
	if (bench_gap(a, p99, b, c) < 0)
		goto fail;
	kvp_bench_report("largest inter-token gap during a 4000-token prefill (fair)", a[0] * 1e3,
			 "ms", "median gap alone (fair)", b[0] * 1e3, "ms");
	kvp_bench_report("largest inter-token gap during a 4000-token prefill (fifo)", a[1] * 1e3,
			 "ms", "median gap alone (fifo)", b[1] * 1e3, "ms");
	/* the largest is one step that met the machine's noise: the tail next to it */
	kvp_bench_report("p99 inter-token gap during a 4000-token prefill (fair)", p99[0] * 1e3,
			 "ms", "median gap alone (fair)", b[0] * 1e3, "ms");
	kvp_bench_report("p99 inter-token gap during a 4000-token prefill (fifo)", p99[1] * 1e3,
			 "ms", "median gap alone (fifo)", b[1] * 1e3, "ms");
	kvp_bench_report("4000-token prompt's first token next to a stream (fair)", c[0], "ms",
			 "fifo", c[1], "ms");
	if (bench_throughput(8, POOL, a) < 0)
		goto fail;
	kvp_bench_report("aggregate tokens/s, 8 streams (fair)", a[0], "tok/s", "fifo", a[1],
			 "tok/s");
	if (bench_throughput(8, SMALL_POOL, a) < 0)
		goto fail;
	kvp_bench_report("aggregate tokens/s, 8 streams, " SMALL_POOL " pool (fair)", a[0], "tok/s",
			 "fifo", a[1], "tok/s");
	if (bench_throughput(32, POOL, a) < 0)
		goto fail;
	kvp_bench_report("aggregate tokens/s, 32 streams (fair)", a[0], "tok/s", "fifo", a[1],
			 "tok/s");
	if (bench_goodput() < 0)
		goto fail;
	kvp_bench_cpu_regime(1000);
	kvpd_cleanup(&md);
	return 0;
fail:
	fprintf(stderr, "bench_sched: a run failed\n");
	kvpd_cleanup(&md);
	return 1;
}
