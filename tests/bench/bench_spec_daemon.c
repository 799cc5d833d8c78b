/* SPDX-License-Identifier: MIT */
/*
 * bench_spec_daemon.c - speculative decoding through kvpoold and libkvpool (issue 28):
 * decode tokens/s of the same greedy requests with speculation on (KVP_SPECULATIVE_ON)
 * against off (KVP_SPECULATIVE_OFF), on one daemon (scheduler.speculative = yes, so the
 * request's flag alone decides), interleaved and in alternating order per round, medians
 * of RUNS rounds:
 *
 *  1. "code": a ~1,000-token C file followed by the request to repeat it with one
 *     identifier renamed, and the first lines of the copy (an editing agent's prompt);
 *  2. "chat": a conversation turn with little repetition (the floor when drafts
 *     fail is 0.97x; this file's greedy output repeats itself, so its drafts often
 *     stand), then the same turn sampled at temperature 1 with the same seed on and off
 *     (svc/engine/spec.c's rule: drafts now mostly fail; the tokens are the same);
 *  3. 8 concurrent streams (connections), four of each prompt: aggregate tokens/s.
 *
 * Each prompt is sent once first, not measured, so that every measured request reads its
 * prompt from the prefix cache and the figures are decode.  Per request, decode tokens/s
 * is the daemon's own usage (generated_tokens / decode_ms); the 8 streams' figure is
 * their tokens over the client's wall time from the first submit to the last DONE.
 * Beside each: the drafted and accepted tokens the DONEs reported (KVP_GEN_SPEC_USAGE),
 * and a check that the greedy tokens with and without speculation are the same (a
 * difference fails the benchmark).
 *
 * Model: KVP_BENCH_SPEC_MODEL, default /work/ext/models/1b-q4_k_m.gguf (synthetic
 * weights: the model does not copy the file; drafts are accepted where its greedy output
 * repeats the prompt or itself).  KVP_BENCH_SPEC_TOKENS: tokens per request (default 96;
 * the 8 streams take 2/3 of it).  The CPU, the load and the CPU regime are printed
 * before and after: on a shared machine figures are only comparable within one run.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvpool/kvpool.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

#define RUNS 3
#define N_STREAMS 8
#define MAX_GEN 1024

/* The file an agent is asked to quote back, edited: C of about 1,000 bytes (byte tokens). */
static const char code_file[] =
	"static uint32_t draft_blocks(struct sched *s, struct seq *q, uint32_t n_positions)\n"
	"{\n"
	"\tuint32_t want = blocks_of(s, n_positions);\n"
	"\n"
	"\twhile (q->n_table < want && q->n_table < q->cap_table &&\n"
	"\t       pool_n_free(s->pool) > s->reserved_total) {\n"
	"\t\tbool res = q->reserved > 0;\n"
	"\n"
	"\t\tif (take_block(s, q) < 0)\n"
	"\t\t\tbreak;\n"
	"\t\tq->spec_taken++;\n"
	"\t\tq->spec_res += res;\n"
	"\t}\n"
	"\treturn q->n_table * s->block_tokens;\n"
	"}\n"
	"\n"
	"static void draft_rollback(struct sched *s, struct seq *q)\n"
	"{\n"
	"\tuint32_t keep = blocks_of(s, q->n_past);\n"
	"\n"
	"\tif (keep < q->spec_table0)\n"
	"\t\tkeep = q->spec_table0;\n"
	"\twhile (q->n_table > keep && q->spec_taken) {\n"
	"\t\tif (q->spec_taken == q->spec_res) {\n"
	"\t\t\tq->reserved++;\n"
	"\t\t\ts->reserved_total++;\n"
	"\t\t\tq->spec_res--;\n"
	"\t\t}\n"
	"\t\tq->spec_taken--;\n"
	"\t\tpool_unref(s->pool, q->table[--q->n_table]);\n"
	"\t}\n"
	"\tq->spec_taken = q->spec_res = 0;\n"
	"}\n"
	"\n"
	"static uint32_t verify(struct sched *s, struct seq *q, uint32_t n, float *l)\n"
	"{\n"
	"\tuint32_t pos = q->n_past;\n"
	"\n"
	"\tfor (uint32_t i = 0;; i++) {\n"
	"\t\tint32_t id = sample(s, q, l + (size_t)i * s->n_vocab);\n"
	"\t\tbool agrees = spec_agrees(q->spec_rows, n, i, id);\n"
	"\n"
	"\t\tq->spec_accepted += agrees;\n"
	"\t\tq->n_past = pos + i + 1;\n"
	"\t\tif (!took_token(s, q, id))\n"
	"\t\t\treturn 0;\n"
	"\t\tif (!agrees)\n"
	"\t\t\treturn i + 1;\n"
	"\t}\n"
	"}\n";

static const char chat_turn[] =
	"User: I am planning a weekend trip to the mountains in late October. What should I "
	"pack if the forecast says cold mornings, sunny afternoons and a chance of rain on "
	"Sunday? I will be hiking two moderate trails, staying in a small cabin without a "
	"kitchen, and driving about four hours each way. Also, any advice on keeping my phone "
	"charged and on what to do if the road over the pass closes early?\nAssistant:";

/* @temperature > 0: sampled with a seed per round, the same on and off */
struct prompt {
	const char *name;
	char *text;
	size_t len;
	float temperature;
};

struct req_out {
	int32_t ids[MAX_GEN];
	uint32_t n;
	struct kvp_usage u;
	struct kvp_spec_usage su;
	int rc;
};

static uint32_t g_gen = 96;
static const char *g_sock;

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int collect(void *arg, const int32_t *t, uint32_t n, const char *text, uint32_t tl)
{
	struct req_out *o = arg;

	(void)text, (void)tl;
	for (uint32_t i = 0; i < n && o->n < MAX_GEN; i++)
		o->ids[o->n++] = t[i];
	return 0;
}

/* One greedy request of @n tokens on @k, speculation @mode; its tokens and usage in @o. */
static int request(struct kvp_client *k, const struct prompt *p, uint32_t n, uint32_t mode,
		   uint64_t seed, struct req_out *o)
{
	struct kvp_client_prompt pr = { .text = p->text, .text_len = p->len };
	struct kvp_client_params cp;

	memset(o, 0, sizeof(*o));
	kvp_client_params_init(&cp);
	cp.max_new_tokens = n;
	cp.speculative = mode;
	cp.temperature = p->temperature;
	cp.seed = seed;
	o->rc = kvp_client_generate(k, &pr, &cp, collect, o, &o->u);
	if (!o->rc && !kvp_client_event_spec(k, &o->su))
		o->rc = -EPROTO; /* ON and OFF ask for the figures: a DONE without them */
	if (o->rc)
		fprintf(stderr, "bench_spec_daemon: %s: %s\n", p->name, kvp_client_errmsg(k));
	return o->rc;
}

/* "model name (family F, model M)" of the first CPU: a VM's name may say little */
static const char *cpu_name(void)
{
	static char name[320];
	char line[512], model[256] = "?";
	int fam = -1, mod = -1;
	FILE *f = fopen("/proc/cpuinfo", "r");

	while (f && fgets(line, sizeof(line), f)) {
		char *c = strchr(line, ':');

		if (!c)
			continue;
		if (!strncmp(line, "model name", 10)) {
			snprintf(model, sizeof(model), "%s", c + 2);
			model[strcspn(model, "\n")] = 0;
		} else if (!strncmp(line, "cpu family", 10)) {
			fam = atoi(c + 1);
		} else if (!strncmp(line, "model\t", 6)) {
			mod = atoi(c + 1);
		} else if (line[0] == '\n') {
			break; /* the first CPU's block ends */
		}
	}
	if (f)
		fclose(f);
	snprintf(name, sizeof(name), "%s (family %d, model %d)", model, fam, mod);
	return name;
}

/* Items 1 and 2: @p alone, RUNS rounds of off and on (order alternating). */
static int bench_single(struct kvp_client *k, const struct prompt *p)
{
	double tps[2][RUNS];
	uint64_t drafted = 0, accepted = 0, gen = 0;
	struct req_out *o = malloc(2 * sizeof(*o));
	bool same = true;

	if (!o || request(k, p, 8, KVP_SPECULATIVE_OFF, 1, &o[0])) /* the prompt into the cache */
		return -1;
	for (int r = 0; r < RUNS; r++) {
		for (int i = 0; i < 2; i++) {
			int on = (r + i) % 2; /* off first in even rounds, on first in odd ones */

			if (request(k, p, g_gen, on ? KVP_SPECULATIVE_ON : KVP_SPECULATIVE_OFF,
				    100 + (uint64_t)r, &o[on])) {
				free(o);
				return -1;
			}
			tps[on][r] = o[on].u.generated_tokens / o[on].u.decode_ms * 1e3;
		}
		same = same && o[0].n == o[1].n &&
		       !memcmp(o[0].ids, o[1].ids, o[0].n * sizeof(int32_t));
		drafted += o[1].su.drafted;
		accepted += o[1].su.accepted;
		gen += o[1].u.generated_tokens;
		if (o[0].su.drafted) {
			fprintf(stderr, "bench_spec_daemon: %s: drafted with speculation off\n",
				p->name);
			same = false;
		}
	}
	printf("  %s (%u prompt tokens, cached; %u generated): ", p->name, o[0].u.prompt_tokens,
	       g_gen);
	kvp_bench_report("decode with speculation", kvp_test_median(tps[1], RUNS), "tok/s",
			 "without", kvp_test_median(tps[0], RUNS), "tok/s");
	printf("    drafted %llu, accepted %llu (%.0f%%; %.2f accepted per generated token), "
	       "same tokens: %s\n",
	       (unsigned long long)drafted, (unsigned long long)accepted,
	       drafted ? 100.0 * accepted / drafted : 0.0, gen ? (double)accepted / gen : 0.0,
	       same ? "yes" : "NO");
	free(o);
	return same ? 0 : -1;
}

struct stream {
	const struct prompt *p;
	uint32_t mode;
	pthread_barrier_t *go;
	struct req_out o;
};

static void *stream_run(void *arg)
{
	struct stream *st = arg;
	struct kvp_client *k = NULL;

	st->o.rc = kvp_client_connect(&k, g_sock);
	pthread_barrier_wait(st->go);
	if (!st->o.rc)
		request(k, st->p, g_gen * 2 / 3, st->mode, 1, &st->o);
	kvp_client_close(k);
	return NULL;
}

/* One round of N_STREAMS at once (prompts alternating), speculation @mode: tokens/s. */
static double streams_once(const struct prompt *p, uint32_t mode, struct stream *st,
			   uint64_t *drafted, uint64_t *accepted)
{
	pthread_t t[N_STREAMS];
	pthread_barrier_t go;
	double t0, tok = 0;

	pthread_barrier_init(&go, NULL, N_STREAMS + 1);
	for (int i = 0; i < N_STREAMS; i++) {
		st[i] = (struct stream){ .p = &p[i % 2], .mode = mode, .go = &go };
		if (pthread_create(&t[i], NULL, stream_run, &st[i]))
			abort();
	}
	pthread_barrier_wait(&go);
	t0 = now_ms();
	for (int i = 0; i < N_STREAMS; i++)
		pthread_join(t[i], NULL);
	t0 = now_ms() - t0;
	pthread_barrier_destroy(&go);
	for (int i = 0; i < N_STREAMS; i++) {
		if (st[i].o.rc)
			return -1;
		tok += st[i].o.u.generated_tokens;
		*drafted += st[i].o.su.drafted;
		*accepted += st[i].o.su.accepted;
	}
	return tok / t0 * 1e3;
}

/* Item 3: N_STREAMS concurrent streams, RUNS rounds of off and on. */
static int bench_streams(const struct prompt *p)
{
	static struct stream st[2][N_STREAMS];
	double tps[2][RUNS];
	uint64_t drafted = 0, accepted = 0, off_d = 0, off_a = 0;
	bool same = true;

	for (int r = 0; r < RUNS; r++) {
		for (int i = 0; i < 2; i++) {
			int on = (r + i) % 2;

			tps[on][r] = streams_once(p, on ? KVP_SPECULATIVE_ON : KVP_SPECULATIVE_OFF,
						  st[on], on ? &drafted : &off_d,
						  on ? &accepted : &off_a);
			if (tps[on][r] < 0)
				return -1;
		}
		for (int i = 0; i < N_STREAMS; i++)
			same = same && st[0][i].o.n == st[1][i].o.n &&
			       !memcmp(st[0][i].o.ids, st[1][i].o.ids,
				       st[0][i].o.n * sizeof(int32_t));
	}
	printf("  %d concurrent streams (%d of each prompt, %u tokens each): ", N_STREAMS,
	       N_STREAMS / 2, g_gen * 2 / 3);
	kvp_bench_report("aggregate with speculation", kvp_test_median(tps[1], RUNS), "tok/s",
			 "without", kvp_test_median(tps[0], RUNS), "tok/s");
	printf("    drafted %llu, accepted %llu (%.0f%%), same greedy tokens: %s\n",
	       (unsigned long long)drafted, (unsigned long long)accepted,
	       drafted ? 100.0 * accepted / drafted : 0.0, same && !off_d ? "yes" : "NO");
	return same && !off_d ? 0 : -1;
}

/* The code prompt: the file, the request, and the first lines of the edited copy. */
static void make_code_prompt(struct prompt *p)
{
	static const char ask[] = "\nRepeat the file above exactly, with `n_past` renamed to "
				  "`pos` everywhere. Output only the code.\n";
	size_t head = 200, n = 0;
	char *t = malloc(2 * sizeof(code_file) + sizeof(ask) + 64);

	if (!t)
		abort();
	n += (size_t)sprintf(t, "Here is a C file:\n");
	memcpy(t + n, code_file, sizeof(code_file) - 1);
	n += sizeof(code_file) - 1;
	memcpy(t + n, ask, sizeof(ask) - 1);
	n += sizeof(ask) - 1;
	memcpy(t + n, code_file, head); /* the copy has begun: its first lines */
	n += head;
	t[n] = 0;
	*p = (struct prompt){ .name = "code (repeat a file with an edit)", .text = t, .len = n };
}

int main(void)
{
	const char *model = getenv("KVP_BENCH_SPEC_MODEL");
	const char *ntok = getenv("KVP_BENCH_SPEC_TOKENS");
	struct prompt p[2];
	struct kvp_client *k = NULL;
	struct kvpd d;
	int ret = 0;

	if (!model)
		model = "/work/ext/models/1b-q4_k_m.gguf";
	if (ntok)
		g_gen = (uint32_t)strtoul(ntok, NULL, 10);
	if (g_gen < 8 || g_gen > MAX_GEN) {
		fprintf(stderr, "bench_spec_daemon: KVP_BENCH_SPEC_TOKENS: 8 .. %d\n", MAX_GEN);
		return 1;
	}
	if (access(model, R_OK)) {
		printf("bench_spec_daemon: %s not readable: skipped\n", model);
		return 77;
	}
	printf("bench_spec_daemon: %s; CPU %s, %ld online; load %s\n", model, cpu_name(),
	       sysconf(_SC_NPROCESSORS_ONLN), kvp_test_loadavg());
	printf("bench_spec_daemon: before, two spinning threads lost %.0f%% of their time\n",
	       100 * kvp_bench_cpu_regime(1000));
	make_code_prompt(&p[0]);
	p[1] = (struct prompt){ .name = "chat (little repetition)",
				.text = strdup(chat_turn),
				.len = sizeof(chat_turn) - 1 };
	{
		const char *args[] = { "--model", model,	  "--pool-size",
				       "1G",	  "--ignore-eos", "--speculative=yes",
				       NULL };

		if (kvpd_init(&d) || kvpd_start(&d, 900, args) || kvp_client_connect(&k, d.sock)) {
			kvpd_dump_log(&d);
			return 1;
		}
	}
	g_sock = d.sock;
	printf("decode tokens/s, speculation on vs off, same daemon, medians of %d "
	       "interleaved rounds\n",
	       RUNS);
	ret |= bench_single(k, &p[0]) < 0;
	ret |= bench_single(k, &p[1]) < 0;
	/* drafts that mostly fail: the same turn sampled (svc/engine/spec.c's rule) */
	{
		struct prompt ps = p[1];

		ps.name = "chat sampled (temperature 1, same seed on and off)";
		ps.temperature = 1.0f;
		ret |= bench_single(k, &ps) < 0;
	}
	ret |= bench_streams(p) < 0;
	printf("bench_spec_daemon: daemon's totals: drafted %.0f, accepted %.0f; load %s\n",
	       kvpd_status_num(&d, "scheduler.spec_drafted", -1),
	       kvpd_status_num(&d, "scheduler.spec_accepted", -1), kvp_test_loadavg());
	printf("bench_spec_daemon: after, two spinning threads lost %.0f%% of their time\n",
	       100 * kvp_bench_cpu_regime(1000));
	kvp_client_close(k);
	kvpd_stop(&d);
	kvpd_cleanup(&d);
	free(p[0].text);
	free(p[1].text);
	return ret;
}
