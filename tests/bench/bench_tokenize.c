/* SPDX-License-Identifier: MIT */
/*
 * bench_tokenize.c - how fast a long prompt becomes token ids: the Llama 3 (byte-level
 * BPE) and Llama 2 (SentencePiece) tokenizers on 100 KB of mixed text, against two
 * baselines measured in the same run: the reference JavaScript tokenizer of the same
 * vocabulary (tests/node/tok-bench.mjs, V8 JIT) and a memcpy of the same bytes.
 *
 * The text is the oracle corpus (tests/node/tok-oracle.mjs: prose in 15 scripts, code,
 * whitespace and digit runs, emoji) cut to 100 KB; raw text, no special tokens, no
 * BOS.  Median of 9 runs after a warm-up.  Figures: tokens/s and MB/s, kvpool's time
 * over the JavaScript's and over memcpy's.  Needs node and tests/node/node_modules
 * (tests/deps.sh); exits 77 without them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compute/mkmodel.h"
#include "compute/mkvocab.h"
#include "compute/model.h"
#include "compute/text/tokenizer.h"

#define TEXT_BYTES (100u * 1000u)
#define RUNS 9

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int dcmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int hexval(int c)
{
	return c <= '9' ? c - '0' : c - 'a' + 10;
}

/* 100 KB of the corpus in @dir/cases.txt, one string per line ("r" cases only). */
static size_t make_text(const char *dir, char *text)
{
	char path[256], *line = NULL;
	size_t n = 0, cap = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/cases.txt", dir);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (n < TEXT_BYTES && getline(&line, &cap, f) > 0) {
		char *h = line + 2;

		if (line[0] != 'r')
			continue;
		for (; *h && *h != ' ' && n < TEXT_BYTES; h += 2)
			text[n++] = (char)(hexval(h[0]) << 4 | hexval(h[1]));
		if (n < TEXT_BYTES)
			text[n++] = '\n';
	}
	free(line);
	fclose(f);
	/* do not end inside a character: the JavaScript side reads the file as UTF-8 */
	while (n && ((uint8_t)text[n - 1] & 0xc0) == 0x80)
		n--;
	if (n && (uint8_t)text[n - 1] >= 0xc0)
		n--;
	return n;
}

static int bench_family(const char *family, const char *src)
{
	char dir[] = "/tmp/kvp-bench-tok.XXXXXX", cmd[8192], path[256], err[512];
	struct kvp_mkmodel_vocab *v = NULL;
	struct kvp_mkmodel_opts o;
	struct kvp_model *m = NULL;
	struct kvp_tokenizer *t = NULL;
	char *text = malloc(TEXT_BYTES + 8), *copy = malloc(TEXT_BYTES + 8);
	int32_t *ids = malloc((TEXT_BYTES + 8) * sizeof(int32_t));
	double tk[RUNS], tc[RUNS], js_ms = 0;
	void *buf = NULL;
	size_t len, blen;
	int k = 0, js_n = 0, r = 1;
	FILE *p;

	if (!text || !copy || !ids || !mkdtemp(dir))
		goto out;
	snprintf(cmd, sizeof(cmd), "node '%s/tests/node/tok-oracle.mjs' %s '%s' 2400 >/dev/null",
		 src, family, dir);
	if (system(cmd))
		goto out;
	len = make_text(dir, text);
	snprintf(path, sizeof(path), "%s/text.txt", dir);
	p = fopen(path, "wb");
	if (!p || fwrite(text, 1, len, p) != len || fclose(p))
		goto out;
	snprintf(path, sizeof(path), "%s/vocab.json", dir);
	if (kvp_mkmodel_vocab_load(&v, path, err, sizeof(err)) || kvp_mkmodel_preset(&o, "tiny"))
		goto out;
	o.n_embd = 16;
	o.n_heads = 2;
	o.n_kv_heads = 1;
	o.n_ff = 32;
	o.n_layers = 1;
	o.vocab = v;
	if (kvp_mkmodel_write_mem(&buf, &blen, &o, err, sizeof(err)) ||
	    kvp_model_open_mem(&m, buf, blen, err, sizeof(err)) ||
	    kvp_tokenizer_new(&t, m, err, sizeof(err)))
		goto out;

	k = kvp_tokenizer_encode_flags(t, text, len, KVP_TOK_NO_ADD_SPECIAL, ids, TEXT_BYTES + 8);
	for (int i = 0; i < RUNS; i++) {
		double t0 = now_s();

		k = kvp_tokenizer_encode_flags(t, text, len, KVP_TOK_NO_ADD_SPECIAL, ids,
					       TEXT_BYTES + 8);
		tk[i] = now_s() - t0;
		t0 = now_s();
		memcpy(copy, text, len);
		__asm__ volatile("" ::"r"(copy) : "memory");
		tc[i] = now_s() - t0;
	}
	qsort(tk, RUNS, sizeof(double), dcmp);
	qsort(tc, RUNS, sizeof(double), dcmp);

	snprintf(cmd, sizeof(cmd), "node '%s/tests/node/tok-bench.mjs' %s '%s/text.txt' %d", src,
		 family, dir, RUNS);
	p = popen(cmd, "r");
	if (!p || fscanf(p, "%d %lf", &js_n, &js_ms) != 2)
		js_ms = 0;
	if (p)
		pclose(p);

	printf("%-7s %zu bytes -> %d tokens (JavaScript: %d)\n", family, len, k, js_n);
	printf("        kvpool     %8.3f ms  %10.0f tokens/s  %7.1f MB/s\n", tk[RUNS / 2] * 1e3,
	       k / tk[RUNS / 2], len / tk[RUNS / 2] / 1e6);
	if (js_ms > 0)
		printf("        JavaScript %8.3f ms  %10.0f tokens/s  -> kvpool is %.1fx the reference's speed\n",
		       js_ms, js_n / (js_ms / 1e3), js_ms / 1e3 / tk[RUNS / 2]);
	printf("        memcpy     %8.4f ms  %10.1f GB/s    -> tokenizing costs %.0fx a copy\n",
	       tc[RUNS / 2] * 1e3, len / tc[RUNS / 2] / 1e9, tk[RUNS / 2] / tc[RUNS / 2]);
	r = k == js_n ? 0 : 1;
	if (r)
		printf("        token counts differ from the reference\n");
out:
	if (r && err[0])
		fprintf(stderr, "bench_tokenize: %s\n", err);
	kvp_tokenizer_free(t);
	kvp_model_close(m);
	kvp_mkmodel_vocab_free(v);
	free(buf);
	free(text);
	free(copy);
	free(ids);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (dir[0] && system(cmd))
		fprintf(stderr, "bench_tokenize: could not remove %s\n", dir);
	return r;
}

int main(void)
{
	const char *src = getenv("KVP_SOURCE_DIR");
	char p[4096];

	if (!src || system("command -v node >/dev/null 2>&1"))
		return 77;
	snprintf(p, sizeof(p), "%s/tests/node/node_modules/llama3-tokenizer-js/package.json", src);
	if (access(p, R_OK))
		return 77;
	return bench_family("llama3", src) | bench_family("llama2", src);
}
