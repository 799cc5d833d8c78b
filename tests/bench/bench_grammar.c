/* SPDX-License-Identifier: MIT */
/*
 * bench_grammar.c - structured output's costs, each beside a baseline of the same run:
 *
 *  1. compiling a JSON Schema of 50 properties (target <= 50 ms) and the first token
 *     mask, over the demo model's vocabulary and (with node: tests/node/chat-models.mjs
 *     writes it) the real Llama 3 vocabulary of 128,256 tokens, beside the time the
 *     vocabulary's trie took (built once per daemon);
 *  2. the mask's cost per step on the Llama 3 vocabulary, over random walks through the
 *     50-property schema (the per-state cache hit or not, as it comes);
 *  3. decode tokens/s of the same requests through a real kvpoold with a json_schema
 *     constraint against none (target >= 0.9): interleaved runs, tokens/s from the
 *     daemon's own usage (generated_tokens / decode_ms).  The demo model, then the
 *     synthetic 1B file when present (KVP_BENCH_GRAMMAR_MODEL, default
 *     /work/ext/models/1b-q4_k_m.gguf; KVP_BENCH_GRAMMAR_1B=0 skips it).  Those models
 *     have byte vocabularies; for a 128k vocabulary the ratio is estimated from the 1B
 *     step time and item 2's mask cost, and printed as such.
 *
 * The constraint keeps the text inside an array of strings, so every step is masked and
 * the value never completes before max_tokens (the daemon runs with --ignore-eos for
 * both).  The CPU regime is printed before and after.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compute/grammar.h"
#include "compute/mkmodel.h"
#include "compute/mkvocab.h"
#include "compute/model.h"
#include "compute/text/tokenizer.h"
#include "kvpool/kvpool.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

#define COMPILE_RUNS 21
#define DECODE_RUNS 3

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* 50 properties of every kind the grammar knows, half of them required */
static char *schema_50(void)
{
	static const char *const kinds[] = {
		"{\"type\":\"string\",\"maxLength\":40}",
		"{\"type\":\"integer\"}",
		"{\"type\":\"number\"}",
		"{\"type\":\"boolean\"}",
		"{\"enum\":[\"low\",\"medium\",\"high\",null]}",
		"{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":5}",
		"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}]}",
		"{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\"},\"y\":{\"type\":"
		"\"number\"}},\"required\":[\"x\",\"y\"],\"additionalProperties\":false}",
	};
	size_t cap = 1 << 16, n = 0;
	char *s = malloc(cap);

	if (!s)
		return NULL;
	n += (size_t)snprintf(s + n, cap - n, "{\"type\":\"object\",\"properties\":{");
	for (int i = 0; i < 50; i++)
		n += (size_t)snprintf(s + n, cap - n, "%s\"field_%02d\":%s", i ? "," : "", i,
				      kinds[i % 8]);
	n += (size_t)snprintf(s + n, cap - n, "},\"required\":[");
	for (int i = 0; i < 50; i += 2)
		n += (size_t)snprintf(s + n, cap - n, "%s\"field_%02d\"", i ? "," : "", i);
	snprintf(s + n, cap - n, "],\"additionalProperties\":false}");
	return s;
}

/* The grammar's vocabulary of @path's tokenizer (as svc/sampling.c builds it). */
static int vocab_of(const char *path, struct kvp_grammar_vocab **out, double *ms)
{
	struct kvp_model *m;
	struct kvp_tokenizer *t;
	const char **p;
	size_t *l;
	uint32_t n;
	double t0;
	int r;

	if (kvp_model_open(&m, path, NULL, 0))
		return -1;
	if (kvp_tokenizer_new(&t, m, NULL, 0)) {
		kvp_model_close(m);
		return -1;
	}
	n = kvp_tokenizer_n_vocab(t);
	p = calloc(n, sizeof(*p));
	l = calloc(n, sizeof(*l));
	for (uint32_t i = 0; p && l && i < n; i++) {
		int ty = kvp_tokenizer_type(t, (int32_t)i);

		if (ty != KVP_TOK_CONTROL && ty != KVP_TOK_UNKNOWN && ty != KVP_TOK_UNUSED)
			p[i] = kvp_tokenizer_piece(t, (int32_t)i, &l[i]);
	}
	t0 = now_ms();
	r = p && l ? kvp_grammar_vocab_new(out, n, p, l) : -ENOMEM;
	*ms = now_ms() - t0;
	free(p);
	free(l);
	kvp_tokenizer_free(t);
	kvp_model_close(m);
	return r;
}

static void bench_compile(const char *name, const char *path)
{
	struct kvp_grammar_vocab *v;
	struct kvp_grammar *g;
	struct kvp_grammar_matcher *mt;
	char *s = schema_50();
	double c[COMPILE_RUNS], first[COMPILE_RUNS], trie_ms;
	uint32_t *bits, allowed = 0;

	if (!s || vocab_of(path, &v, &trie_ms)) {
		printf("  %s: vocabulary not read from %s\n", name, path);
		free(s);
		return;
	}
	bits = calloc((kvp_grammar_vocab_size(v) + 31) / 32, sizeof(uint32_t));
	for (int i = 0; i < COMPILE_RUNS; i++) {
		double t0 = now_ms();

		if (kvp_grammar_compile(&g, s, strlen(s), NULL, 0))
			abort();
		c[i] = now_ms() - t0;
		t0 = now_ms();
		if (kvp_grammar_matcher_new(&mt, g, v))
			abort();
		allowed = kvp_grammar_mask(mt, bits);
		first[i] = now_ms() - t0;
		kvp_grammar_matcher_free(mt);
		kvp_grammar_free(g);
	}
	printf("  %s (%u tokens): compile a 50-property schema %.3f ms (target <= 50), "
	       "first mask %.3f ms (%u allowed); baseline: the vocabulary trie, built once, "
	       "%.1f ms\n",
	       name, kvp_grammar_vocab_size(v), kvp_test_median(c, COMPILE_RUNS),
	       kvp_test_median(first, COMPILE_RUNS), allowed, trie_ms);
	free(bits);
	free(s);
	kvp_grammar_vocab_free(v);
}

/* generated tokens and decode ms of one request */
static int request(struct kvp_client *k, const struct kvp_client_sampling *sp, uint32_t n,
		   uint64_t seed, struct kvp_usage *u)
{
	static const char prompt[] = "Write a list of words as JSON: ";
	struct kvp_client_prompt pr = { .text = prompt, .text_len = sizeof(prompt) - 1 };
	struct kvp_client_params p;
	int r;

	kvp_client_params_init(&p);
	p.max_new_tokens = n;
	p.temperature = 1.0f;
	p.seed = seed;
	p.no_cache = true;
	r = kvp_client_set_sampling(k, sp);
	if (!r)
		r = kvp_client_generate(k, &pr, &p, NULL, NULL, u);
	return r;
}

static double g_step_ms; /* the last bench_decode()'s unconstrained ms per token */

static int bench_decode(const char *name, const char *model, uint32_t n)
{
	static const char schema[] = "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}";
	struct kvp_client_sampling sp = { .grammar = KVP_GRAMMAR_JSON_SCHEMA,
					  .schema = schema,
					  .schema_len = sizeof(schema) - 1 };
	const char *args[] = { "--pool-size", "1G", "--ignore-eos", model ? "--model" : NULL,
			       model,	      NULL };
	double tok[2] = { 0 }, ms[2] = { 0 };
	struct kvp_client *k = NULL;
	struct kvp_usage u;
	struct kvpd d;

	if (kvpd_init(&d) || kvpd_start(&d, 900, args) || kvp_client_connect(&k, d.sock)) {
		kvpd_dump_log(&d);
		return -1;
	}
	request(k, NULL, 8, 1, &u); /* warm up */
	for (int r = 0; r < DECODE_RUNS; r++)
		for (int c = 0; c < 2; c++) { /* interleaved: the load changes alike for both */
			if (request(k, c ? &sp : NULL, n, 100 + (uint64_t)r, &u)) {
				fprintf(stderr, "bench_grammar: %s\n", kvp_client_errmsg(k));
				kvp_client_close(k);
				kvpd_stop(&d);
				kvpd_cleanup(&d);
				return -1;
			}
			tok[c] += u.generated_tokens;
			ms[c] += u.decode_ms;
		}
	printf("  %s: decode %.1f tokens/s with a json_schema constraint vs %.1f without, "
	       "ratio %.3f (target >= 0.9; %d runs of %u tokens each)\n",
	       name, tok[1] / ms[1] * 1e3, tok[0] / ms[0] * 1e3,
	       (tok[1] / ms[1]) / (tok[0] / ms[0]), DECODE_RUNS, n);
	g_step_ms = ms[0] / tok[0];
	kvp_client_close(k);
	kvpd_stop(&d);
	kvpd_cleanup(&d);
	return 0;
}

static uint64_t rng(uint64_t *x)
{
	*x = *x * 6364136223846793005ull + 1442695040888963407ull;
	return *x >> 33;
}

/* Item 2: mean ms per mask over random walks (random allowed tokens, the end when whole). */
static double bench_mask_walk(const char *path)
{
	struct kvp_grammar_vocab *v;
	struct kvp_grammar *g;
	char *s = schema_50();
	double trie, total = 0;
	uint64_t x = 9;
	uint32_t *bits, steps = 0;

	if (!s || vocab_of(path, &v, &trie) || kvp_grammar_compile(&g, s, strlen(s), NULL, 0)) {
		free(s);
		return -1;
	}
	bits = calloc((kvp_grammar_vocab_size(v) + 31) / 32, sizeof(uint32_t));
	for (int w = 0; w < 4; w++) {
		struct kvp_grammar_matcher *m;

		if (kvp_grammar_matcher_new(&m, g, v))
			abort();
		for (int k = 0; k < 300; k++) {
			double t0 = now_ms();
			uint32_t n = kvp_grammar_mask(m, bits), pick, seen = 0;

			total += now_ms() - t0;
			steps++;
			if (!n)
				break;
			pick = (uint32_t)(rng(&x) % n);
			for (uint32_t t = 0; t < kvp_grammar_vocab_size(v); t++)
				if ((bits[t / 32] >> (t % 32) & 1) && seen++ == pick) {
					kvp_grammar_accept(m, (int32_t)t);
					break;
				}
		}
		kvp_grammar_matcher_free(m);
	}
	printf("  Llama 3 vocabulary (%u tokens): %.3f ms per mask, mean of %u steps of 4 random "
	       "walks through the 50-property schema\n",
	       kvp_grammar_vocab_size(v), total / steps, steps);
	free(bits);
	free(s);
	kvp_grammar_free(g);
	kvp_grammar_vocab_free(v);
	return total / steps;
}

/* dir/llama3.gguf: the real Llama 3 vocabulary on the tiny preset (node writes it). */
static int llama3_model(const char *dir, char *path, size_t cap)
{
	struct kvp_mkmodel_vocab *v = NULL;
	struct kvp_mkmodel_opts o;
	char cmd[8192], vp[4096];
	const char *src = getenv("KVP_SOURCE_DIR");

	if (!src || system("command -v node >/dev/null 2>&1"))
		return -1;
	snprintf(cmd, sizeof(cmd), "node '%s/tests/node/chat-models.mjs' '%s' >/dev/null", src,
		 dir);
	snprintf(vp, sizeof(vp), "%s/llama3/vocab.json", dir);
	if (system(cmd) || kvp_mkmodel_vocab_load(&v, vp, NULL, 0))
		return -1;
	kvp_mkmodel_preset(&o, "tiny");
	o.n_embd = 16;
	o.n_heads = 2;
	o.n_kv_heads = 1;
	o.n_ff = 32;
	o.n_layers = 1;
	o.vocab = v;
	snprintf(path, cap, "%s/llama3.gguf", dir);
	int r = kvp_mkmodel_write(path, &o, NULL, 0);

	kvp_mkmodel_vocab_free(v);
	return r;
}

int main(void)
{
	const char *big = getenv("KVP_BENCH_GRAMMAR_MODEL");
	const char *skip_1b = getenv("KVP_BENCH_GRAMMAR_1B");
	char demo[4096], l3[4096];
	double mask_ms = -1;
	bool have_l3;
	struct kvpd d;
	int ret = 0;

	if (!big)
		big = "/work/ext/models/1b-q4_k_m.gguf";
	printf("bench_grammar: two spinning threads lost %.0f%% of their time (load: %s)\n",
	       100 * kvp_bench_cpu_regime(1000), kvp_test_loadavg());
	if (kvpd_init(&d) || kvpd_model(&d, "demo", demo, sizeof(demo))) {
		fprintf(stderr, "bench_grammar: cannot write the demo model\n");
		return 1;
	}
	have_l3 = !llama3_model(d.dir, l3, sizeof(l3));
	printf("1. compile and first mask\n");
	bench_compile("demo vocabulary", demo);
	if (have_l3)
		bench_compile("Llama 3 vocabulary", l3);
	else
		printf("  Llama 3 vocabulary: skipped (no node, or tests/deps.sh not run)\n");
	printf("2. the mask per step\n");
	if (have_l3)
		mask_ms = bench_mask_walk(l3);
	kvpd_cleanup(&d);
	printf("3. decode, constrained vs not (same daemon, same run)\n");
	ret |= bench_decode("demo model", NULL, 256) < 0;
	if (!access(big, R_OK) && !(skip_1b && !strcmp(skip_1b, "0"))) {
		ret |= bench_decode("1B q4_k_m (byte vocabulary)", big, 32) < 0;
		if (mask_ms >= 0 && g_step_ms > 0)
			printf("  estimate for a 1B model with the Llama 3 vocabulary: %.1f ms per "
			       "step + %.3f ms of mask = ratio %.3f (target >= 0.9)\n",
			       g_step_ms, mask_ms, g_step_ms / (g_step_ms + mask_ms));
	}
	printf("bench_grammar: after, two spinning threads lost %.0f%% of their time\n",
	       100 * kvp_bench_cpu_regime(1000));
	return ret;
}
