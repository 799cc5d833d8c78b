/* SPDX-License-Identifier: MIT */
/*
 * bench_service.c - kvpoold as a service, each figure next to a baseline measured in the
 * same run:
 *
 *  1. round trip of a minimal request (1-token prompt, 1 generated token, tiny model)
 *     through the daemon, with one compute thread and with the daemon's default (one per
 *     online CPU), each against a raw Unix-socket ping-pong of 64 bytes measured right
 *     after it;
 *  2. time to first token of a 2,000-token request whose first 1,900 tokens are cached,
 *     against the same request cold (demo model);
 *  3. four clients at the same moment with the same 1,500-token system prompt and their
 *     own 100-token tails: how many computed the shared part (goal: once) and how many
 *     read it from the cache, and their TTFT p99 against a single warm request.
 *
 * TTFT is measured by the client: from just before the GENERATE is sent to the first
 * TOKEN frame.  Medians of several runs; a fresh cache salt per run keeps "cold" cold.
 * The daemons run with their default daemon.weights (copy); the demo daemon's load line
 * is printed.  The CPU regime is printed before and after.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvpool/kvpool.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

#define RTT_N 400
#define PING_N 4000
#define TTFT_RUNS 5
#define GROUP_RUNS 5

static uint64_t rng = 0x2545f4914f6cdd1dull;

static int32_t rnd_tok(void)
{
	return 3 + (int32_t)(kvp_test_xorshift(&rng) % 256);
}

static void fill(int32_t *t, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		t[i] = rnd_tok();
}

struct timed {
	double t_send;
	double t_first;
};

static int first_tok(void *arg, const int32_t *t, uint32_t n, const char *text, uint32_t tl)
{
	struct timed *tm = arg;

	if (!tm->t_first)
		tm->t_first = kvp_test_now_s();
	return 0;
}

/* One request; returns the client-side TTFT in ms (negative on failure). */
static double request(struct kvp_client *k, const int32_t *prompt, uint32_t n, uint32_t max_new,
		      const char *salt, struct kvp_usage *u)
{
	struct kvp_client_prompt pr = { .tokens = prompt, .n_tokens = n };
	struct kvp_client_params p;
	struct timed tm = { 0 };
	int r;

	kvp_client_params_init(&p);
	p.max_new_tokens = max_new;
	p.salt = salt;
	p.salt_len = salt ? strlen(salt) : 0;
	tm.t_send = kvp_test_now_s();
	r = kvp_client_generate(k, &pr, &p, first_tok, &tm, u);
	if (r) {
		fprintf(stderr, "bench: generate: %d %s\n", r, kvp_client_errmsg(k));
		return -1;
	}
	return (tm.t_first - tm.t_send) * 1e3;
}

/* ---- 1. round trip ---- */

static double raw_pingpong_us(void)
{
	double v[PING_N];
	char buf[64] = { 0 };
	int sv[2];
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		close(sv[0]);
		while (read(sv[1], buf, sizeof(buf)) == sizeof(buf))
			if (write(sv[1], buf, sizeof(buf)) != sizeof(buf))
				break;
		_exit(0);
	}
	close(sv[1]);
	for (int i = 0; i < PING_N; i++) {
		double t0 = kvp_test_now_s();

		if (write(sv[0], buf, sizeof(buf)) != sizeof(buf) ||
		    read(sv[0], buf, sizeof(buf)) != sizeof(buf))
			return -1;
		v[i] = (kvp_test_now_s() - t0) * 1e6;
	}
	close(sv[0]);
	waitpid(pid, NULL, 0);
	return kvp_test_median(v, PING_N);
}

/*
 * Round trip with @threads compute threads ("" = the daemon's default, one per online
 * CPU): one thread shows the service path alone; the default is what users get, where a
 * forward step may also wake a worker on another CPU.
 */
static int bench_rtt(const char *threads)
{
	struct kvpd d;
	char model[512];
	char name[160];
	const char *args[] = { "--model",      model,
			       "--pool-size",  "64M",
			       "--ignore-eos", *threads ? "--threads" : NULL,
			       threads,	       NULL };
	struct kvp_client *k = NULL;
	double v[RTT_N];
	struct kvp_usage u;
	int32_t tok = 65;
	double ping;

	if (kvpd_init(&d) || kvpd_model(&d, "tiny", model, sizeof(model)) ||
	    kvpd_start(&d, 60, args) || kvp_client_connect(&k, d.sock)) {
		kvpd_dump_log(&d);
		kvpd_cleanup(&d);
		return -1;
	}
	for (int i = 0; i < 50; i++) /* warm up */
		request(k, &tok, 1, 1, NULL, &u);
	for (int i = 0; i < RTT_N; i++) {
		double t0 = kvp_test_now_s();

		if (request(k, &tok, 1, 1, NULL, &u) < 0)
			return -1;
		v[i] = (kvp_test_now_s() - t0) * 1e6;
	}
	kvp_client_close(k);
	kvpd_cleanup(&d);
	ping = raw_pingpong_us();
	if (*threads)
		snprintf(name, sizeof(name),
			 "daemon round trip, 1-token prompt + 1 token "
			 "(tiny model, %s thread%s)",
			 threads, strcmp(threads, "1") ? "s" : "");
	else
		snprintf(name, sizeof(name),
			 "daemon round trip, 1-token prompt + 1 token "
			 "(tiny model, default threads = %ld)",
			 sysconf(_SC_NPROCESSORS_ONLN));
	kvp_bench_report(name, kvp_test_median(v, RTT_N), "us", "raw unix-socket ping-pong 64 B",
			 ping, "us");
	return 0;
}

/* The daemon's "model: loaded in ..." line: what the weight placement cost at start. */
static void print_load_line(const struct kvpd *d)
{
	char line[512];
	FILE *f = fopen(d->log, "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "model: loaded in"))
			printf("daemon: %s", line);
	fclose(f);
}

/* ---- 3. four clients at once ---- */

struct group_client {
	pthread_barrier_t *go;
	const char *sock;
	const char *salt;
	int32_t prompt[1600];
	double ttft_ms;
	struct kvp_usage usage;
	int rc;
};

static void *group_main(void *arg)
{
	struct group_client *g = arg;
	struct kvp_client *k = NULL;

	g->rc = kvp_client_connect(&k, g->sock);
	pthread_barrier_wait(g->go);
	if (!g->rc) {
		g->ttft_ms = request(k, g->prompt, 1600, 1, g->salt, &g->usage);
		g->rc = g->ttft_ms < 0;
	}
	kvp_client_close(k);
	return NULL;
}

static int bench_demo(void)
{
	struct kvpd d;
	const char *args[] = { "--pool-size", "1G", NULL };
	struct kvp_client *k = NULL;
	static int32_t prompt[2000];
	double cold[TTFT_RUNS], warm[TTFT_RUNS];
	double group_ttft[4 * GROUP_RUNS], single[GROUP_RUNS];
	uint32_t computed = 0, reused = 0, groups_once = 0;
	struct kvp_usage u;
	char salt[32];

	if (kvpd_init(&d) || kvpd_start(&d, 600, args) || kvp_client_connect(&k, d.sock)) {
		kvpd_dump_log(&d);
		return -1;
	}
	print_load_line(&d);
	fill(prompt, 2000);
	request(k, prompt, 64, 1, "warmup", &u);

	/* 2. 2,000 tokens: 1,900 cached vs cold */
	for (int r = 0; r < TTFT_RUNS; r++) {
		snprintf(salt, sizeof(salt), "cold-%d", r);
		cold[r] = request(k, prompt, 2000, 1, salt, &u);
		if (u.cached_tokens != 0)
			return -1;
		snprintf(salt, sizeof(salt), "warm-%d", r);
		request(k, prompt, 1900, 1, salt, &u); /* puts the 1,900-token prefix in */
		warm[r] = request(k, prompt, 2000, 1, salt, &u);
		if (r == 0)
			printf("warm request usage: prompt %u cached %u recomputed %u "
			       "(daemon ttft %.1f ms, prefill %.1f ms)\n",
			       u.prompt_tokens, u.cached_tokens, u.recomputed_tokens, u.ttft_ms,
			       u.prefill_ms);
	}
	kvp_bench_report("TTFT, 2000-token prompt with 1900 cached (demo)",
			 kvp_test_median(warm, TTFT_RUNS), "ms", "same request cold",
			 kvp_test_median(cold, TTFT_RUNS), "ms");

	/* 3. four clients at once, shared 1,500-token system prompt */
	for (int r = 0; r < GROUP_RUNS; r++) {
		struct group_client g[4];
		pthread_barrier_t go;
		pthread_t th[4];
		uint32_t n_computed = 0;

		snprintf(salt, sizeof(salt), "group-%d", r);
		pthread_barrier_init(&go, NULL, 4);
		fill(prompt, 1500);
		for (int i = 0; i < 4; i++) {
			g[i] = (struct group_client){ .go = &go, .sock = d.sock, .salt = salt };
			memcpy(g[i].prompt, prompt, 1500 * sizeof(int32_t));
			fill(g[i].prompt + 1500, 100);
			pthread_create(&th[i], NULL, group_main, &g[i]);
		}
		for (int i = 0; i < 4; i++) {
			pthread_join(th[i], NULL);
			if (g[i].rc)
				return -1;
			group_ttft[r * 4 + i] = g[i].ttft_ms;
			if (g[i].usage.cached_tokens >= 1488)
				reused++;
			else
				n_computed++;
		}
		pthread_barrier_destroy(&go);
		computed += n_computed;
		groups_once += n_computed == 1;
		/* baseline: one request alone, the same system prompt cached, its own tail */
		fill(prompt + 1500, 100);
		single[r] = request(k, prompt, 1600, 1, salt, &u);
	}
	printf("four clients at once, shared 1500-token prompt: the shared part was computed "
	       "%u times in %d rounds (goal: once per round; %u of %d rounds), %u of %d clients "
	       "read it from the cache\n",
	       computed, GROUP_RUNS, groups_once, GROUP_RUNS, reused, 4 * GROUP_RUNS);
	{
		double sorted[4 * GROUP_RUNS];

		memcpy(sorted, group_ttft, sizeof(sorted));
		kvp_test_median(sorted, 4 * GROUP_RUNS); /* sorts */
		kvp_bench_report("TTFT p99, 4 clients at once sharing 1500 tokens (demo)",
				 kvp_test_percentile_sorted(sorted, 4 * GROUP_RUNS, 99), "ms",
				 "single warm request", kvp_test_median(single, GROUP_RUNS), "ms");
		printf("(4-client TTFT p50 %.1f ms)\n",
		       kvp_test_percentile_sorted(sorted, 4 * GROUP_RUNS, 50));
	}
	kvp_client_close(k);
	kvpd_cleanup(&d);
	return 0;
}

int main(void)
{
	kvp_bench_cpu_regime(1000);
	if (bench_rtt("1") < 0) {
		fprintf(stderr, "bench_service: round trip failed\n");
		return 1;
	}
	kvp_bench_cpu_regime(1000); /* the two-thread figure depends on it */
	if (bench_rtt("") < 0) {
		fprintf(stderr, "bench_service: round trip (default threads) failed\n");
		return 1;
	}
	if (bench_demo() < 0) {
		fprintf(stderr, "bench_service: demo-model figures failed\n");
		return 1;
	}
	kvp_bench_cpu_regime(1000);
	return 0;
}
