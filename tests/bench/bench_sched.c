/* SPDX-License-Identifier: MIT */
/*
 * bench_sched.c - the scheduler's bounds per model, the fair policy against the first one
 * (scheduler.policy = fifo) in the same run (docs/daemon.md "Scheduling"; issue 27's
 * "bounds that hold": whatever the model size, weight type and kernel table).
 *
 * For each model (default: the demo model, a 110M f32 one with 12 K/V heads, and the
 * 1B Q4_K_M one; bench-sched --help), one daemon per policy, on the kernel table the
 * machine has, and on it:
 *
 *  1. TTFT of a 16-token request arriving during a LONG-token prefill, against the same
 *     request alone: requests one after another at random moments while the prefill
 *     lasts (at most ARRIVALS per prefill; the first policy serves one, after the whole
 *     prefill), the median over every arrival of --runs prefills (bound: <= 3x); the
 *     long prompt's first token against the first policy's (its first-come time; bound:
 *     <= 1.3x), medians of the runs;
 *  2. the largest gap between two tokens of a running stream while a LONG-token prompt
 *     prefills, against its median gap alone (bound: <= 3x; and the 99th percentile: the
 *     largest is one step that met the machine's noise); the long prompt's first token
 *     next to the stream against the first policy's (what the gap bound costs it);
 *  3. aggregate tokens/s of 8 and of 32 concurrent streams (100-token prompts, max_new
 *     4,096, each client stops after --tokens tokens: chat clients that ask for much and
 *     stop early), fair / fifo (target >= 1.0x); and of 8 on a SMALL_POOL pool, where
 *     the first policy's reservations of max_new run 3 at a time (target >= 1.3x).
 *
 * --full adds, on the first model: how many of 16 (1 GiB pool) and 8 (350 MiB) requests
 * with max_new 4,096 run at once, and goodput (requests per second meeting TTFT <= 1 s
 * and every gap <= 100 ms) at rising Poisson arrival rates, the same arrivals for both.
 *
 * Times are measured by the client (just before GENERATE is sent, each TOKEN frame).
 * Every figure is printed for both policies with its same-run baseline and ratio, then a
 * summary line per model.  The CPU regime is printed before and after: on a loaded
 * machine the figures are indicative (the bounds are ratios to figures of the same run).
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

#include "compute/mkmodel.h"
#include "kvpool/kvpool.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

#define ARRIVALS 6 /* short requests during one long prefill, at most */
#define MAX_GAPS 8192
#define MAX_MODELS 8

static bool quick;
static char model[512];
static uint32_t runs = 1;	    /* --runs */
static uint32_t stream_tokens = 64; /* --tokens */
static uint32_t long_n;		    /* --long (0: per model) */
static uint32_t this_long;	    /* the current model's */

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

/* 1. on @d (policy @pol): the short request's TTFT alone and during the long prefill */
static int bench_ttft(struct kvpd *d, int pol, double *during, double *alone, double *long_first)
{
	static int32_t long_prompt[16384];
	int32_t short_prompt[16];
	double a[16], w[16 * ARRIVALS], lf[16];
	struct kvp_client *k = NULL;
	uint32_t n_w = 0;

	if (kvp_client_connect(&k, d->sock))
		return -1;
	for (uint32_t r = 0; r < runs; r++) {
		struct timed tm = { 0 };
		struct bg b = {
			.sock = d->sock, .prompt = long_prompt, .n = this_long, .max_new = 1
		};
		struct timed sh[ARRIVALS];
		int n_sh = 0, n_during = 0;
		pthread_t th;

		fill(short_prompt, 16);
		if (request(k, short_prompt, 16, 1, true, &tm, NULL))
			return -1;
		a[r] = ttft_ms(&tm);
		fill(long_prompt, this_long);
		pthread_create(&th, NULL, bg_main, &b);
		/*
		 * arrive at random moments: the first in the prefill's first second, each
		 * next one 0.2 .. 1 s after the previous one's first token, while the
		 * prefill lasts (its first token is its end: max_new 1)
		 */
		usleep(200000 + (useconds_t)(rnd() % 800000));
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
		printf("  %s run %u: 16-token TTFT alone %.1f ms, during the prefill",
		       policies[pol], r, a[r]);
		for (int i = 0; i < n_sh; i++) {
			/* only those sent before the prefill ended */
			if (sh[i].t_send >= b.tm.t_first)
				continue;
			w[n_w++] = ttft_ms(&sh[i]);
			n_during++;
			printf(" %.1f", ttft_ms(&sh[i]));
		}
		printf(" ms (the %u-token prompt: first token after %.0f ms)\n", this_long,
		       ttft_ms(&b.tm));
		if (!n_during) {
			fprintf(stderr, "bench: no short request came during the prefill\n");
			return -1;
		}
	}
	*alone = median_of(a, runs);
	*during = median_of(w, n_w);
	*long_first = median_of(lf, runs);
	kvp_client_close(k);
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

/* 2. on @d (policy @pol): a stream's gaps alone and during the long prefill */
static int bench_gap(struct kvpd *d, int pol, double *max_gap, double *p99_gap,
		     double *median_alone, double *long_ttft)
{
	static int32_t long_prompt[16384];
	static struct stream s;
	struct kvp_client *k = NULL;
	struct timed tm = { 0 };
	pthread_t th;
	uint32_t n_alone;
	double worst, t_end;

	if (kvp_client_connect(&k, d->sock))
		return -1;
	memset(&s, 0, sizeof(s));
	s.sock = d->sock;
	fill(s.prompt, 16);
	pthread_create(&th, NULL, stream_main, &s);
	/* its gaps alone: 2 s, and at least 16 of them */
	t_end = kvp_test_now_s() + 2;
	while ((kvp_test_now_s() < t_end || s.tm.n_gaps < 16) && !s.rc)
		usleep(10000);
	n_alone = s.tm.n_gaps;
	*median_alone = median_of(s.tm.gaps, n_alone);
	fill(long_prompt, this_long);
	if (request(k, long_prompt, this_long, 1, true, &tm, NULL))
		return -1;
	worst = 0;
	for (uint32_t i = n_alone; i < s.tm.n_gaps; i++)
		if (s.tm.gaps[i] > worst)
			worst = s.tm.gaps[i];
	*max_gap = worst;
	*p99_gap = 0;
	if (s.tm.n_gaps > n_alone) {
		uint32_t n = s.tm.n_gaps - n_alone;

		kvp_test_median(s.tm.gaps + n_alone, (int)n); /* sorts them */
		*p99_gap = kvp_test_percentile_sorted(s.tm.gaps + n_alone, (int)n, 99);
	}
	*long_ttft = ttft_ms(&tm);
	atomic_store(&s.stop, true);
	pthread_join(th, NULL);
	printf("  %s: stream median gap alone %.1f ms (%u gaps), largest during the %u-token "
	       "prefill %.1f ms (%u gaps); the long prompt's first token after %.0f ms\n",
	       policies[pol], *median_alone * 1e3, n_alone, this_long, worst * 1e3,
	       s.tm.n_gaps - n_alone, *long_ttft);
	kvp_client_close(k);
	return s.rc ? -1 : 0;
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
	c->tm.stop_after = stream_tokens;
	c->rc = kvp_client_connect(&k, c->sock);
	pthread_barrier_wait(c->go);
	if (!c->rc)
		c->rc = request(k, prompt, 100, 4096, true, &c->tm, NULL);
	kvp_client_close(k);
	return NULL;
}

/* 3. on @d (policy @pol): aggregate tokens/s of @n streams */
static int bench_throughput(struct kvpd *d, int pol, uint32_t n, double *tps)
{
	struct chat *c = calloc(n, sizeof(*c));
	pthread_t *th = calloc(n, sizeof(*th));
	pthread_barrier_t go;
	double t0 = 0, t1 = 0;
	uint64_t tokens = 0;
	int rc = 0;

	if (!c || !th) {
		free(c);
		free(th);
		return -1;
	}
	pthread_barrier_init(&go, NULL, n + 1);
	for (uint32_t i = 0; i < n; i++) {
		c[i] = (struct chat){ .sock = d->sock, .go = &go };
		pthread_create(&th[i], NULL, chat_main, &c[i]);
	}
	pthread_barrier_wait(&go);
	t0 = kvp_test_now_s();
	for (uint32_t i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		if (c[i].rc)
			rc = -1;
		tokens += c[i].tm.n_tokens;
		if (c[i].tm.t_last > t1)
			t1 = c[i].tm.t_last;
	}
	*tps = (double)tokens / (t1 - t0);
	printf("  %s: %u streams x %u tokens: %llu tokens in %.2f s\n", policies[pol], n,
	       stream_tokens, (unsigned long long)tokens, t1 - t0);
	pthread_barrier_destroy(&go);
	free(c);
	free(th);
	return rc;
}

/* --ab: both policies' throughput runs at the same time, on daemons of their own */
struct ab_run {
	struct kvpd *d;
	int pol;
	uint32_t n;
	double tps;
	int rc;
};

static void *ab_main(void *arg)
{
	struct ab_run *a = arg;

	a->rc = bench_throughput(a->d, a->pol, a->n, &a->tps);
	return NULL;
}

/*
 * On a loaded machine the load moves between the fair run and the fifo one, minutes
 * apart; run side by side, both meet the same load (and each other: the ratio, not
 * either figure, is what they say).  *@ratio: fair / fifo tokens/s of @n streams.
 */
static int bench_ab(const char *pool, uint32_t n, double *ratio)
{
	struct kvpd d[2];
	struct ab_run a[2];
	pthread_t th[2];
	int rc = 0;

	for (int pol = 0; pol < 2; pol++)
		if (start_pool(&d[pol], policies[pol], true, pool)) {
			if (pol)
				kvpd_cleanup(&d[0]);
			return -1;
		}
	for (int pol = 0; pol < 2; pol++) {
		a[pol] = (struct ab_run){ .d = &d[pol], .pol = pol, .n = n };
		pthread_create(&th[pol], NULL, ab_main, &a[pol]);
	}
	for (int pol = 0; pol < 2; pol++) {
		pthread_join(th[pol], NULL);
		rc |= a[pol].rc;
		kvpd_cleanup(&d[pol]);
	}
	*ratio = a[1].tps > 0 ? a[0].tps / a[1].tps : 0;
	printf("  side by side, %u streams, %s pool: fair %.2f tok/s, fifo %.2f tok/s: %.2fx\n", n,
	       pool, a[0].tps, a[1].tps, *ratio);
	return rc;
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

/* ---- the models ---- */

struct bmodel {
	char name[64];
	char path[512];
	uint32_t long_n, tokens; /* the defaults for this model */
};

/*
 * @arg: demo, 110m or 1b (generated into @dir; 1b: KVP_BENCH_1B names a file instead),
 * or a GGUF path.  Return: 0, or -1 (a message printed).
 */
static int model_of(const char *arg, const char *dir, struct bmodel *m)
{
	struct kvp_mkmodel_opts o;
	const char *env = getenv("KVP_BENCH_1B");
	char err[256];

	snprintf(m->name, sizeof(m->name), "%s", arg);
	m->long_n = quick ? 2000 : 4000;
	m->tokens = quick ? 32 : 64;
	if (strcmp(arg, "demo") && strcmp(arg, "110m") && strcmp(arg, "1b")) {
		snprintf(m->path, sizeof(m->path), "%s", arg);
		return access(arg, R_OK) ?
			       (fprintf(stderr, "bench-sched: cannot read %s\n", arg), -1) :
			       0;
	}
	if (!strcmp(arg, "1b")) {
		/* a 4,000-token prefill of a 1B model takes minutes on a small CPU */
		m->long_n = quick ? 500 : 1000;
		m->tokens = quick ? 16 : 32;
		snprintf(m->name, sizeof(m->name), "1b-q4_k_m");
		if (env && *env) {
			snprintf(m->path, sizeof(m->path), "%s", env);
			return 0;
		}
	}
	kvp_mkmodel_preset(&o, !strcmp(arg, "1b") ? "1b" : "demo");
	if (!strcmp(arg, "110m")) {
		/* the demo shape with a K/V head per query head: 113M, 3x the K/V */
		o.n_kv_heads = o.n_heads;
		o.name = "kvpool-110m";
	}
	if (!strcmp(arg, "1b"))
		o.type = (uint32_t)kvp_mkmodel_type_parse("q4_k_m");
	snprintf(m->path, sizeof(m->path), "%s/%s.gguf", dir, m->name);
	printf("bench-sched: writing %s\n", m->path);
	fflush(stdout);
	if (kvp_mkmodel_write(m->path, &o, err, sizeof(err))) {
		fprintf(stderr, "bench-sched: %s\n", err);
		return -1;
	}
	return 0;
}

/* The figures of one model, [fair, fifo]. */
struct figures {
	double alone[2], during[2], long_first[2];
	double gap_med[2], gap_max[2], gap_p99[2], long_stream[2];
	double tps8[2], tps32[2], tps8s[2];
};

static int bench_model(const struct bmodel *bm, struct figures *f)
{
	char name[160];

	snprintf(model, sizeof(model), "%s", bm->path);
	this_long = long_n ? long_n : bm->long_n;
	stream_tokens = stream_tokens ? stream_tokens : bm->tokens;
	printf("== %s (%s): %u-token long prompt, streams of %u tokens, %u run(s)\n", bm->name,
	       bm->path, this_long, stream_tokens, runs);
	for (int pol = 0; pol < 2; pol++) {
		struct kvpd d;
		struct jsonq *j;

		if (start(&d, policies[pol], true))
			return -1;
		j = kvpd_status(&d);
		if (j && pol == 0)
			printf("  fair budgets: %.1f ms next to one stream, %.1f ms for prefill alone "
			       "(measured: decode step %.2f ms, call %.2f ms + %.3f ms a token)\n",
			       jsonq_num(j, "scheduler.step_target_ms", 0),
			       jsonq_num(j, "scheduler.prefill_step_ms", 0),
			       jsonq_num(j, "scheduler.calib_decode_ms", 0),
			       jsonq_num(j, "scheduler.calib_call_ms", 0),
			       jsonq_num(j, "scheduler.calib_token_ms", 0));
		jsonq_free(j);
		if (bench_ttft(&d, pol, &f->during[pol], &f->alone[pol], &f->long_first[pol]) ||
		    bench_gap(&d, pol, &f->gap_max[pol], &f->gap_p99[pol], &f->gap_med[pol],
			      &f->long_stream[pol]) ||
		    bench_throughput(&d, pol, 8, &f->tps8[pol]) ||
		    bench_throughput(&d, pol, 32, &f->tps32[pol])) {
			kvpd_dump_log(&d);
			kvpd_cleanup(&d);
			return -1;
		}
		kvpd_cleanup(&d);
		/* where the pool limits the first policy: its reservations of max_new each */
		if (start_pool(&d, policies[pol], true, SMALL_POOL))
			return -1;
		if (bench_throughput(&d, pol, 8, &f->tps8s[pol])) {
			kvpd_dump_log(&d);
			kvpd_cleanup(&d);
			return -1;
		}
		kvpd_cleanup(&d);
	}
	for (int pol = 0; pol < 2; pol++) {
		snprintf(name, sizeof(name), "%s: 16-token TTFT during a %u-token prefill (%s)",
			 bm->name, this_long, policies[pol]);
		kvp_bench_report(name, f->during[pol], "ms", "same request alone", f->alone[pol],
				 "ms");
		snprintf(name, sizeof(name), "%s: largest gap during a %u-token prefill (%s)",
			 bm->name, this_long, policies[pol]);
		kvp_bench_report(name, f->gap_max[pol] * 1e3, "ms", "median gap alone",
				 f->gap_med[pol] * 1e3, "ms");
		snprintf(name, sizeof(name), "%s: p99 gap during a %u-token prefill (%s)", bm->name,
			 this_long, policies[pol]);
		kvp_bench_report(name, f->gap_p99[pol] * 1e3, "ms", "median gap alone",
				 f->gap_med[pol] * 1e3, "ms");
	}
	snprintf(name, sizeof(name),
		 "%s: %u-token prompt's first token, short ones arriving (fair)", bm->name,
		 this_long);
	kvp_bench_report(name, f->long_first[0], "ms", "fifo (first come)", f->long_first[1], "ms");
	snprintf(name, sizeof(name), "%s: %u-token prompt's first token next to a stream (fair)",
		 bm->name, this_long);
	kvp_bench_report(name, f->long_stream[0], "ms", "fifo", f->long_stream[1], "ms");
	snprintf(name, sizeof(name), "%s: aggregate tokens/s, 8 streams (fair)", bm->name);
	kvp_bench_report(name, f->tps8[0], "tok/s", "fifo", f->tps8[1], "tok/s");
	snprintf(name, sizeof(name), "%s: aggregate tokens/s, 32 streams (fair)", bm->name);
	kvp_bench_report(name, f->tps32[0], "tok/s", "fifo", f->tps32[1], "tok/s");
	snprintf(name, sizeof(name),
		 "%s: aggregate tokens/s, 8 streams, " SMALL_POOL " pool (fair)", bm->name);
	kvp_bench_report(name, f->tps8s[0], "tok/s", "fifo", f->tps8s[1], "tok/s");
	return 0;
}

static void usage(FILE *to)
{
	fprintf(to,
		"usage: bench-sched [--runs N] [--long N] [--tokens N] [--ab] [--full] [MODEL ...]\n"
		"The scheduler's bounds per model, the fair policy against fifo in the same run\n"
		"(one daemon per policy and model, on the kernel table this machine has):\n"
		"  - a 16-token request's TTFT during a long prefill / alone (bound <= 3x),\n"
		"    the median of every arrival (up to %d per prefill);\n"
		"  - a running stream's largest (and p99) gap during a long prefill / its\n"
		"    median gap alone (bound <= 3x);\n"
		"  - the long prompt's first token with short ones arriving / fifo's, its\n"
		"    first-come time (bound <= 1.3x); and next to the stream / fifo's;\n"
		"  - aggregate tokens/s of 8 and 32 streams (100-token prompts), fair / fifo,\n"
		"    and of 8 on a " SMALL_POOL " pool (the first policy runs 3 at a time).\n"
		"MODEL: demo (the demo preset, 104M f32), 110m (the demo shape with 12 K/V\n"
		"heads, 113M f32), 1b (the 1b preset in q4_k_m; KVP_BENCH_1B=FILE uses that\n"
		"file instead of writing one, which takes a while), or a GGUF path.\n"
		"Default: demo 110m 1b.\n"
		"  --runs N    long prefills per figure, medians over them (default 1)\n"
		"  --long N    the long prompt's tokens (default 4000; 1b: 1000, whose\n"
		"              4,000-token prefill takes minutes on a small CPU)\n"
		"  --tokens N  tokens each stream of the throughput runs takes (default 64;\n"
		"              1b: 32)\n"
		"  --ab        only the throughput runs, fair and fifo side by side (the\n"
		"              same load for both on a loaded machine)\n"
		"  --full      also, on the first model: requests running at once with\n"
		"              max_new 4096 (1 GiB and 350 MiB pools) and goodput at rising\n"
		"              Poisson arrival rates (about 10 more minutes)\n"
		"KVP_BENCH_QUICK=1 halves the default sizes; KVP_BENCH_STEP_TARGET_MS=N gives the\n"
		"fair policy that step target.  Times are the client's; on a loaded machine the\n"
		"figures are indicative, the ratios are to figures of the same run.\n",
		ARRIVALS);
}

static int bench_full(void)
{
	double a[2];

	if (bench_concurrency(POOL, 16, a) < 0)
		return -1;
	kvp_bench_report("requests running at once, 16 x (100 + max_new 4096), 1 GiB (fair)", a[0],
			 "", "fifo", a[1], "");
	if (bench_concurrency(SMALL_POOL, 8, a) < 0)
		return -1;
	kvp_bench_report("requests running at once, 8 x (100 + max_new 4096), " SMALL_POOL
			 " (fair)",
			 a[0], "", "fifo", a[1], "");
	return bench_goodput();
}

int main(int argc, char **argv)
{
	static struct bmodel models[MAX_MODELS];
	static const char *const dflt[] = { "demo", "110m", "1b" };
	const char *names[MAX_MODELS];
	struct figures f[MAX_MODELS];
	uint32_t n_models = 0, tokens_arg = 0;
	bool full = false, ab = false;
	char dir[256];
	int rc = 0;

	setvbuf(stdout, NULL, _IOLBF, 0); /* progress as it goes, into a file too */
	quick = getenv("KVP_BENCH_QUICK") != NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--full")) {
			full = true;
		} else if (!strcmp(argv[i], "--ab")) {
			ab = true;
		} else if (i + 1 < argc && !strcmp(argv[i], "--runs")) {
			runs = (uint32_t)atoi(argv[++i]);
		} else if (i + 1 < argc && !strcmp(argv[i], "--long")) {
			long_n = (uint32_t)atoi(argv[++i]);
		} else if (i + 1 < argc && !strcmp(argv[i], "--tokens")) {
			tokens_arg = (uint32_t)atoi(argv[++i]);
		} else if (argv[i][0] == '-' || n_models == MAX_MODELS) {
			usage(stderr);
			return 2;
		} else {
			names[n_models++] = argv[i];
		}
	}
	if (!runs || runs > 16 || long_n > 16384 || (long_n && long_n < 64)) {
		usage(stderr);
		return 2;
	}
	if (!n_models)
		for (uint32_t i = 0; i < 3; i++)
			names[n_models++] = dflt[i];
	if (kvp_test_tmpdir(dir, sizeof(dir))) {
		fprintf(stderr, "bench-sched: cannot make a temporary directory\n");
		return 1;
	}
	kvp_bench_cpu_regime(1000);
	for (uint32_t i = 0; i < n_models && !rc; i++) {
		stream_tokens = tokens_arg;
		if (model_of(names[i], dir, &models[i]))
			rc = 1;
		else if (ab) {
			double r8, r32, r8s;

			snprintf(model, sizeof(model), "%s", models[i].path);
			stream_tokens = tokens_arg ? tokens_arg : models[i].tokens;
			printf("== %s: throughput, fair and fifo side by side\n", models[i].name);
			if (bench_ab(POOL, 8, &r8) || bench_ab(POOL, 32, &r32) ||
			    bench_ab(SMALL_POOL, 8, &r8s))
				rc = 1;
			else
				printf("  %-12s tokens/s fair/fifo side by side: 8 streams %.2f, 32 "
				       "streams %.2f, 8 streams on " SMALL_POOL " %.2f\n",
				       models[i].name, r8, r32, r8s);
		} else if (bench_model(&models[i], &f[i]))
			rc = 1;
		if (models[i].path[0] && !strncmp(models[i].path, dir, strlen(dir)))
			unlink(models[i].path);
	}
	if (!rc && full) {
		if (model_of(names[0], dir, &models[0]))
			rc = 1;
		else
			snprintf(model, sizeof(model), "%s", models[0].path);
		if (!rc && bench_full() < 0)
			rc = 1;
	}
	if (!ab)
		printf("\nsummary (fair; the bounds: TTFT <= 3x alone, largest gap <= 3x median alone, "
		       "long prompt <= 1.3x first come; fifo's in brackets):\n");
	for (uint32_t i = 0; i < n_models && !rc && !ab; i++)
		printf("  %-12s TTFT %.2fx (%.1fx), gap %.2fx p99 %.2fx (%.1fx), long %.2fx, "
		       "next to a stream %.2fx; tokens/s fair/fifo: 8 streams %.2f, 32 streams "
		       "%.2f, 8 streams on " SMALL_POOL " %.2f\n",
		       models[i].name, f[i].during[0] / f[i].alone[0],
		       f[i].during[1] / f[i].alone[1], f[i].gap_max[0] / f[i].gap_med[0],
		       f[i].gap_p99[0] / f[i].gap_med[0], f[i].gap_max[1] / f[i].gap_med[1],
		       f[i].long_first[0] / f[i].long_first[1],
		       f[i].long_stream[0] / f[i].long_stream[1], f[i].tps8[0] / f[i].tps8[1],
		       f[i].tps32[0] / f[i].tps32[1], f[i].tps8s[0] / f[i].tps8s[1]);
	kvp_bench_cpu_regime(1000);
	kvp_test_rmtree(dir);
	if (rc)
		fprintf(stderr, "bench-sched: a run failed\n");
	return rc;
}
