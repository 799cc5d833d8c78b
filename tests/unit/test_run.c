/* SPDX-License-Identifier: MIT */
/*
 * test_run.c - the offline command lines, run in-process (their sources are compiled
 * into this test): kvpool-mkmodel writes a model that kvpool-run loads; kvpool-run's
 * --json object has the documented keys (docs/compute.md) and the same greedy tokens as
 * the forward pass driven directly, and its printer writes the same bytes as before the
 * JSON writers were merged; sampling flags are seeded; --help and bad arguments give the
 * documented exit statuses; the built binary with KVP_ISA=scalar names its kernels and
 * gives the scalar tokens.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/forward.h"
#include "compute/model.h"
#include "compute/run.h"
#include "compute/sample.h"
#include "compute/text/tokenizer.h"
#include "shm/geom.h"
#include "tests/lib/testlib.h"

struct fixture {
	char dir[256];
	char model[512];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char *argv[] = { "kvpool-mkmodel", "--preset", "tiny", "--type", "f16",
			 "--seed",	   "99",       "-o",   NULL,	 NULL };

	if (!f || kvp_test_tmpdir(f->dir, sizeof(f->dir)))
		return -1;
	snprintf(f->model, sizeof(f->model), "%s/tiny.gguf", f->dir);
	argv[8] = f->model;
	if (kvp_mkmodel_main(9, argv) != 0)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kvp_test_rmtree(f->dir);
	free(f);
	return 0;
}

/* Run kvpool-run with @args (NULL-terminated, argv[0] added); stdout into *@out. */
static int run(char **out, const char *const *args)
{
	char *argv[32] = { "kvpool-run" };
	size_t len;
	FILE *f;
	int argc = 1, rc;

	while (args[argc - 1])
		argv[argc] = (char *)args[argc - 1], argc++;
	f = open_memstream(out, &len);
	assert_non_null(f);
	rc = kvp_run_main(argc, argv, f);
	fclose(f);
	return rc;
}

/* The ids of the "tokens" array of a --json object; returns how many. */
static int json_tokens(const char *js, int32_t *ids, int cap)
{
	const char *p = strstr(js, "\"tokens\":[");
	int n = 0;

	assert_non_null(p);
	p += strlen("\"tokens\":[");
	while (*p != ']') {
		char *end;
		long v = strtol(p, &end, 10);

		assert_true(end != p && n < cap);
		ids[n++] = (int32_t)v;
		p = *end == ',' ? end + 1 : end;
	}
	return n;
}

/* Greedy tokens of @prompt through the forward API, as kvpool-run should produce them. */
static void direct_greedy(const char *path, const char *prompt, int32_t *out, uint32_t n_gen)
{
	struct kvp_model *m;
	struct kvp_tokenizer *t;
	struct kvp_fwd *f;
	struct kvp_kv_view kv = { 0 };
	struct kvp_model_shape sh;
	int32_t ids[64];
	uint32_t table[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
	float *lg;
	int n;

	assert_int_equal(kvp_model_open(&m, path, NULL, 0), 0);
	assert_int_equal(kvp_tokenizer_new(&t, m, NULL, 0), 0);
	n = kvp_tokenizer_encode(t, prompt, strlen(prompt), ids, 64);
	assert_true(n > 0 && n < 64);
	lg = malloc(kvp_model_hparams(m)->n_vocab * sizeof(float));
	kvp_model_kv_shape(m, KVP_DTYPE_F32, 16, &sh);
	assert_int_equal(kvp_geom_init(&kv.geom, &sh), 0);
	kv.n_blocks = 8;
	kv.base = aligned_alloc(KVP_BLOCK_ALIGN, 8 * kv.geom.block_stride);
	assert_int_equal(kvp_fwd_new(&f, m,
				     &(struct kvp_fwd_opts){
					     .n_threads = 1, .max_chunk = 64, .max_batch = 1 }),
			 0);
	assert_int_equal(kvp_fwd_prefill(f, &kv, table, 8, 0, ids, (uint32_t)n, lg, 0), 0);
	for (uint32_t i = 0; i < n_gen; i++) {
		out[i] = kvp_sample_greedy(lg, kvp_model_hparams(m)->n_vocab);
		assert_int_equal(kvp_fwd_decode(f, &kv,
						&(struct kvp_fwd_seq){ table, 8, (uint32_t)n + i,
								       out[i] },
						1, lg),
				 0);
	}
	kvp_fwd_free(f);
	free(kv.base);
	free(lg);
	kvp_tokenizer_free(t);
	kvp_model_close(m);
}

static void test_json_matches_forward(void **state)
{
	/*
	 * -p "Hello" -n 16 --json: one object with tokens, text and the six timing keys;
	 * 6 prompt tokens (BOS + 5 bytes); the 16 greedy tokens equal the forward pass's
	 */
	struct fixture *f = *state;
	static const char *const keys[] = { "\"text\":",
					    "\"timings\":{",
					    "\"prompt_tokens\":6,",
					    "\"generated_tokens\":16,",
					    "\"prefill_ms\":",
					    "\"decode_ms\":",
					    "\"prefill_tok_s\":",
					    "\"decode_tok_s\":" };
	const char *args[] = { "-m", f->model, "-p", "Hello", "-n", "16", "--json", NULL };
	int32_t got[32], want[16];
	char *out;

	assert_int_equal(run(&out, args), 0);
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (!strstr(out, keys[i]))
			fail_msg("no %s in %s", keys[i], out);
	assert_true(out[0] == '{' && strstr(out, "}}\n") == out + strlen(out) - 3);
	assert_int_equal(json_tokens(out, got, 32), 16);
	direct_greedy(f->model, "Hello", want, 16);
	assert_memory_equal(got, want, sizeof(want));
	free(out);
}

/* The value of "@key": in a --json object, or -1 when it has none. */
static long long json_u64(const char *js, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(js, pat);
	return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* Seeded prompt ids: a segment repeated with an edit per copy, or no repetition planned. */
static void spec_prompt(char *list, size_t cap, uint32_t seed, int repetitive, uint32_t vocab)
{
	uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1);
	int32_t seg[12];
	size_t w = 0;
	uint32_t n = repetitive ? 48 : 20 + seed % 24;

	for (uint32_t i = 0; i < n; i++) {
		int32_t id;

		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		if (repetitive) {
			if (i < 12)
				seg[i] = 3 + (int32_t)(x % (vocab - 3));
			id = seg[i % 12];
			if (i >= 12 && i % 12 == (seed + i / 12) % 12)
				id = 3 + (int32_t)((x >> 20) % (vocab - 3)); /* the edit */
		} else {
			id = 3 + (int32_t)(x % (vocab - 3));
		}
		w += (size_t)snprintf(list + w, cap - w, "%s%d", i ? "," : "", id);
	}
}

static void test_speculative_same_tokens(void **state)
{
	/*
	 * Greedy tokens with --speculative on equal those with it off, over seeded prompts
	 * (repetitive and not), K/V types f32, f16 and int8 (whose drafts stay inside a block),
	 * small and default blocks, on the f16 tiny model and a q8_0 one; drafts are both
	 * accepted and rejected along the way (else this proves nothing).  Off prints no
	 * speculative counts; auto is on for greedy with these weights.
	 */
	struct fixture *f = *state;
	char q8[600], list[1024];
	char *mk[] = { "kvpool-mkmodel", "--preset", "tinyq", "--type", "q8_0", "-o", q8, NULL };
	const char *models[2] = { f->model, q8 };
	static const char *const kvs[][2] = { { "f32", "16" }, { "f16", "4" }, { "int8", "8" } };
	long long drafted = 0, accepted = 0;

	snprintf(q8, sizeof(q8), "%s/tinyq-q8.gguf", f->dir);
	assert_int_equal(kvp_mkmodel_main(7, mk), 0);
	for (uint32_t mi = 0; mi < 2; mi++)
		for (uint32_t seed = 0; seed < 16; seed++) {
			const char *const *kv = kvs[seed % 3];
			int32_t a[64], b[64];
			char *off, *on;
			int na, nb;

			spec_prompt(list, sizeof(list), seed, seed % 2 == 0, 259);
			{
				const char *args[] = { "-m",
						       models[mi],
						       "--tokens",
						       list,
						       "-n",
						       "40",
						       "--ignore-eos",
						       "--json",
						       "--threads",
						       "1",
						       "--kv-dtype",
						       kv[0],
						       "--block-tokens",
						       kv[1],
						       "--speculative",
						       "off",
						       NULL };

				assert_int_equal(run(&off, args), 0);
				args[15] = seed % 4 ? "on" : "auto";
				assert_int_equal(run(&on, args), 0);
			}
			na = json_tokens(off, a, 64);
			nb = json_tokens(on, b, 64);
			assert_int_equal(na, 40);
			assert_int_equal(nb, 40);
			if (memcmp(a, b, sizeof(a[0]) * 40))
				fail_msg("model %u seed %u K/V %s: tokens differ\noff: %s\non:  %s",
					 mi, seed, kv[0], off, on);
			assert_int_equal(json_u64(off, "drafted_tokens"), -1);
			assert_true(json_u64(on, "accepted_tokens") >= 0);
			assert_true(json_u64(on, "accepted_tokens") <=
				    json_u64(on, "drafted_tokens"));
			drafted += json_u64(on, "drafted_tokens");
			accepted += json_u64(on, "accepted_tokens");
			free(off);
			free(on);
		}
	print_message("speculative: %lld drafted, %lld accepted\n", drafted, accepted);
	assert_true(accepted > 0);
	assert_true(accepted < drafted);
	/* usage: a bad mode, on with sampling, draft sizes out of range */
	static const char *const bad[][2] = { { "--speculative", "maybe" },
					      { "--draft-max", "17" },
					      { "--draft-ngram", "0" },
					      { "--temperature", "0.7" } };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *args[] = { "-m", f->model,	"-p",	   "x", "--speculative",
				       "on", bad[i][0], bad[i][1], NULL };
		char *out;

		assert_int_equal(run(&out, args), 2);
		free(out);
	}
}

static void test_binary_forced_scalar(void **state)
{
	/* the built kvpool-run with KVP_ISA=scalar (SIMD paths off) says so on stderr and
	 * gives the greedy tokens of the scalar kernels driven directly */
	struct fixture *f = *state;
	char exe[512], cmd[2048], errpath[600], line[4096] = "", *err = NULL;
	size_t n = 0, cap = 0;
	int32_t got[16], want[8];
	FILE *p;

	assert_int_equal(kvp_test_build_path(exe, sizeof(exe), "compute/kvpool-run"), 0);
	snprintf(errpath, sizeof(errpath), "%s/scalar.err", f->dir);
	snprintf(cmd, sizeof(cmd), "KVP_ISA=scalar '%s' -m '%s' -p Hello -n 8 --json 2>'%s'", exe,
		 f->model, errpath);
	p = popen(cmd, "r");
	assert_non_null(p);
	n = fread(line, 1, sizeof(line) - 1, p);
	line[n] = '\0';
	assert_int_equal(pclose(p), 0);
	p = fopen(errpath, "r");
	assert_non_null(p);
	assert_true(getdelim(&err, &cap, '\0', p) > 0);
	fclose(p);
	if (!strstr(err, "; kernels scalar"))
		fail_msg("kvpool-run with KVP_ISA=scalar said: %s", err);
	free(err);
	assert_int_equal(json_tokens(line, got, 16), 8);
	assert_int_equal(setenv("KVP_ISA", "scalar", 1), 0);
	direct_greedy(f->model, "Hello", want, 8);
	unsetenv("KVP_ISA");
	assert_memory_equal(got, want, sizeof(want));
}

static void test_tokens_and_sampling_flags(void **state)
{
	/*
	 * --tokens runs the same prompt as its text; sampling with a seed repeats exactly,
	 * another seed differs; f16 K/V, 2-token blocks and 2-token chunks give the greedy
	 * tokens of the defaults, and so do weights copied into huge pages (--weights copy)
	 */
	struct fixture *f = *state;
	const char *text[] = { "-m", f->model, "-p", "Hello", "-n", "12", "--json", NULL };
	const char *ids[] = { "-m", f->model, "--tokens", "1,75,104,111,111,114",
			      "-n", "12",     "--json",	  NULL };
	const char *small[] = { "-m", f->model,	 "-p",	      "Hello",	   "-n",
				"12", "--json",	 "--kv-type", "f16",	   "--block-tokens",
				"2",  "--chunk", "2",	      "--threads", "1",
				NULL };
	const char *copy[] = { "-m", f->model, "-p",	    "Hello", "-n",
			       "12", "--json", "--weights", "copy",  NULL };
	const char *s1[] = { "-m",     f->model,	"-p",  "Hello",	  "-n", "24",
			     "--json", "--temperature", "1.5", "--top-k", "50", "--top-p",
			     "0.95",   "--seed",	"7",   NULL };
	const char *s2[] = { "-m",     f->model,	"-p",  "Hello",	  "-n", "24",
			     "--json", "--temperature", "1.5", "--top-k", "50", "--top-p",
			     "0.95",   "--seed",	"8",   NULL };
	char *a, *b, *c, *d, *e, *g;
	int32_t ta[32], tb[32], tc[32];

	assert_int_equal(run(&a, text), 0);
	assert_int_equal(run(&b, ids), 0);
	assert_int_equal(json_tokens(a, ta, 32), 12);
	assert_int_equal(json_tokens(b, tb, 32), 12);
	assert_memory_equal(ta, tb, 12 * sizeof(int32_t));
	assert_int_equal(run(&c, small), 0);
	assert_int_equal(json_tokens(c, tc, 32), 12);
	assert_memory_equal(ta, tc, 12 * sizeof(int32_t));
	free(c);
	assert_int_equal(run(&c, copy), 0);
	assert_int_equal(json_tokens(c, tc, 32), 12);
	assert_memory_equal(ta, tc, 12 * sizeof(int32_t));
	assert_int_equal(run(&d, s1), 0);
	assert_int_equal(run(&e, s1), 0);
	assert_int_equal(run(&g, s2), 0);
	assert_int_equal(json_tokens(d, ta, 32), 24);
	assert_int_equal(json_tokens(e, tb, 32), 24);
	assert_memory_equal(ta, tb, 24 * sizeof(int32_t));
	assert_int_equal(json_tokens(g, tc, 32), 24);
	assert_memory_not_equal(ta, tc, 24 * sizeof(int32_t));
	free(a);
	free(b);
	free(c);
	free(d);
	free(e);
	free(g);
}

static void test_stops_at_eos(void **state)
{
	/*
	 * near-uniform sampling (T = 1e30) draws EOS within 1500 tokens: the run stops
	 * there without emitting it; with --ignore-eos the same seed gives the same tokens,
	 * then EOS, then the rest up to -n
	 */
	struct fixture *f = *state;
	const char *stop[] = { "-m",	 f->model,	  "-p",	  "Hi",	    "-n", "1500",
			       "--json", "--temperature", "1e30", "--seed", "5",  NULL };
	const char *cont[] = { "-m",	 f->model,	  "-p",	  "Hi",	    "-n", "1500",
			       "--json", "--temperature", "1e30", "--seed", "5",  "--ignore-eos",
			       NULL };
	int32_t *a = malloc(1500 * sizeof(int32_t)), *b = malloc(1500 * sizeof(int32_t));
	char *oa, *ob;
	int na, nb;

	assert_int_equal(run(&oa, stop), 0);
	assert_int_equal(run(&ob, cont), 0);
	na = json_tokens(oa, a, 1500);
	nb = json_tokens(ob, b, 1500);
	assert_true(na < 1500);
	assert_int_equal(nb, 1500);
	for (int i = 0; i < na; i++)
		assert_int_not_equal(a[i], 2);
	assert_memory_equal(a, b, (size_t)na * sizeof(int32_t));
	assert_int_equal(b[na], 2); /* </s> */
	free(a);
	free(b);
	free(oa);
	free(ob);
}

static void test_help_and_bad_arguments(void **state)
{
	/* --help: usage on stdout, exit 0; every bad argument: exit 2, nothing on stdout */
	struct fixture *f = *state;
	const char *help[] = { "--help", NULL };
	const char *const bad[][10] = {
		{ "-m", f->model, NULL }, /* no prompt */
		{ "-p", "x", NULL },	  /* no model */
		{ "-m", f->model, "-p", "x", "--tokens", "1", NULL },
		{ "-m", f->model, "-p", "x", "-n", "0", NULL },
		{ "-m", f->model, "-p", "x", "--temperature", "-1", NULL },
		{ "-m", f->model, "-p", "x", "--top-p", "1.5", NULL },
		{ "-m", f->model, "-p", "x", "--kv-type", "q8_0", NULL },
		{ "-m", f->model, "-p", "x", "--weights", "huge", NULL },
		{ "-m", f->model, "--tokens", "1,,2", NULL },
		{ "-m", f->model, "--tokens", "1,259", NULL }, /* id past the vocabulary */
		{ "-m", f->model, "-p", "x", "stray", NULL },
		{ "-m", f->model, "--tokenize", "--tokens", "1", NULL },
		{ "-m", f->model, "--detokenize", "-p", "x", NULL },
		{ "-m", f->model, "--tokenize", "--detokenize", "-p", "x", NULL },
		{ "-m", f->model, "--detokenize", "--tokens", "1,259", NULL },
		{ "-m", f->model, "--detokenize", "--tokens", "1,,2", NULL },
		{ "-m", f->model, "-p", "x", "--prompt-file", "/dev/null", NULL },
	};
	char *out;

	assert_int_equal(run(&out, help), 0);
	assert_non_null(strstr(out, "--top-p"));
	assert_non_null(strstr(out, "--json"));
	free(out);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = run(&out, bad[i]);

		if (rc != 2)
			fail_msg("case %zu: exit %d, want 2", i, rc);
		assert_string_equal(out, "");
		free(out);
	}
}

static void test_tokenize_and_detokenize(void **state)
{
	/*
	 * --tokenize prints the text's ids and exits: BOS unless --no-bos, special-token text
	 * ("</s>") one id only with --parse-special, from -p or --prompt-file alike;
	 * --detokenize gives the text back (control tokens shown with --render-special); a
	 * generation's prompt follows the same flags
	 */
	struct fixture *f = *state;
	const int32_t raw[] = { 1, 3 + 'a', 3 + '<', 3 + '/', 3 + 's', 3 + '>', 3 + 'b' };
	const int32_t parsed[] = { 1, 3 + 'a', 2, 3 + 'b' };
	char file[300], *out;
	int32_t ids[16];
	FILE *fp;

	snprintf(file, sizeof(file), "%s/prompt.txt", f->dir);
	fp = fopen(file, "w");
	assert_non_null(fp);
	fputs("a</s>b", fp);
	fclose(fp);
	{
		const char *a[] = { "-m", f->model, "--tokenize", "-p", "a</s>b", "--json", NULL };

		assert_int_equal(run(&out, a), 0);
		assert_int_equal(json_tokens(out, ids, 16), 7);
		assert_memory_equal(ids, raw, sizeof(raw));
		free(out);
	}
	{
		const char *a[] = { "-m", f->model, "--tokenize",      "--prompt-file",
				    file, "--json", "--parse-special", NULL };

		assert_int_equal(run(&out, a), 0);
		assert_int_equal(json_tokens(out, ids, 16), 4);
		assert_memory_equal(ids, parsed, sizeof(parsed));
		free(out);
	}
	{
		const char *a[] = { "-m",     f->model,	  "--tokenize",	     "-p",
				    "a</s>b", "--no-bos", "--parse-special", NULL };

		assert_int_equal(run(&out, a), 0);
		assert_string_equal(out, "100,2,101\n");
		free(out);
	}
	{
		const char *a[] = { "-m",     f->model, "--detokenize", "--tokens", "1,100,2,101",
				    "--json", NULL };
		const char *b[] = { "-m",	   f->model, "--detokenize",	 "--tokens",
				    "1,100,2,101", "--json", "--render-special", NULL };

		assert_int_equal(run(&out, a), 0);
		assert_string_equal(out, "{\"text\":\"ab\"}\n");
		free(out);
		assert_int_equal(run(&out, b), 0);
		assert_string_equal(out, "{\"text\":\"<s>a</s>b\"}\n");
		free(out);
	}
	{
		const char *a[] = { "-m", f->model, "-p", "a</s>b", "-n", "1", "--json", NULL };
		const char *b[] = { "-m",     f->model,		 "-p", "a</s>b", "-n", "1",
				    "--json", "--parse-special", NULL };

		assert_int_equal(run(&out, a), 0);
		assert_non_null(strstr(out, "\"prompt_tokens\":7,"));
		free(out);
		assert_int_equal(run(&out, b), 0);
		assert_non_null(strstr(out, "\"prompt_tokens\":4,"));
		free(out);
	}
	{
		const char *a[] = { "-m", f->model, "--tokenize", "--prompt-file", "/nonexistent/x",
				    NULL };

		assert_int_equal(run(&out, a), 1);
		free(out);
	}
}

static void test_mkmodel_cli(void **state)
{
	/* kvpool-mkmodel: shape flags and --type reach the file; bad values exit 2 */
	struct fixture *f = *state;
	char path[600];
	char *ok[] = { "kvpool-mkmodel",
		       "--n-embd",
		       "96",
		       "--n-layers",
		       "3",
		       "--n-heads",
		       "6",
		       "--n-kv-heads",
		       "3",
		       "--n-ff",
		       "64",
		       "--type",
		       "q8_0",
		       "--tied",
		       "-o",
		       path,
		       NULL };
	char *bad_type[] = { "kvpool-mkmodel", "--type", "iq2_xs", "-o", path, NULL };
	char *bad_shape[] = {
		"kvpool-mkmodel", "--n-embd", "100", "--n-heads", "3", "-o", path, NULL
	};
	char *no_out[] = { "kvpool-mkmodel", "--preset", "demo", NULL };
	struct kvp_model *m;
	const struct kvp_model_hparams *hp;

	snprintf(path, sizeof(path), "%s/shape.gguf", f->dir);
	assert_int_equal(kvp_mkmodel_main(16, ok), 0);
	assert_int_equal(kvp_model_open(&m, path, NULL, 0), 0);
	hp = kvp_model_hparams(m);
	assert_int_equal(hp->n_embd, 96);
	assert_int_equal(hp->n_layers, 3);
	assert_int_equal(hp->n_heads, 6);
	assert_int_equal(hp->n_kv_heads, 3);
	assert_int_equal(hp->n_ff, 64);
	assert_int_equal(hp->tied_output, 1);
	assert_string_equal(kvp_model_info(m)->file_type, "q8_0");
	kvp_model_close(m);
	assert_int_equal(kvp_mkmodel_main(5, bad_type), 2);
	assert_int_equal(kvp_mkmodel_main(7, bad_shape), 2);
	assert_int_equal(kvp_mkmodel_main(3, no_out), 2);
}

static void test_json_same_bytes_as_before(void **state)
{
	static const int32_t ids[] = { 1, 22, 333, 4444, 0 };
	static const char text[] = "Hi \"x\" \\ y\nz \xc3\xa9\xf0\x9f\x98\x80 \xef\xbf\xbd/";
	struct kvp_run_result a = { .ids = ids,
				    .n_ids = 5,
				    .text = text,
				    .text_len = sizeof(text) - 1,
				    .n_prompt = 6,
				    .prefill_s = 0.0012345,
				    .decode_s = 0.0456789,
				    .n_steps = 4 };
	struct kvp_run_result b = { .ids = ids, .text = "", .n_prompt = 1 };
	struct kvp_buf out = KVP_BUF_INIT;

	/*
	 * byte for byte what kvpool-run's own printer wrote for the same figures (recorded
	 * from it before the JSON writers were merged), including an empty generation
	 */
	kvp_run_json(&out, &a);
	kvp_run_json(&out, &b);
	assert_int_equal(kvp_buf_finish(&out), (int)out.len);
	assert_string_equal(
		out.p,
		"{\"tokens\":[1,22,333,4444,0],\"text\":\"Hi \\\"x\\\" \\\\ y\\nz \xc3\xa9\xf0\x9f"
		"\x98\x80 \xef\xbf\xbd/\",\"timings\":{\"prompt_tokens\":6,\"generated_tokens\":5,"
		"\"prefill_ms\":1.234,\"decode_ms\":45.679,\"prefill_tok_s\":4860.27,"
		"\"decode_tok_s\":87.57}}\n"
		"{\"tokens\":[],\"text\":\"\",\"timings\":{\"prompt_tokens\":1,"
		"\"generated_tokens\":0,\"prefill_ms\":0.000,\"decode_ms\":0.000,"
		"\"prefill_tok_s\":0.00,\"decode_tok_s\":0.00}}\n");
	kvp_buf_deinit(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json_matches_forward),
		cmocka_unit_test(test_speculative_same_tokens),
		cmocka_unit_test(test_json_same_bytes_as_before),
		cmocka_unit_test(test_binary_forced_scalar),
		cmocka_unit_test(test_tokens_and_sampling_flags),
		cmocka_unit_test(test_stops_at_eos),
		cmocka_unit_test(test_help_and_bad_arguments),
		cmocka_unit_test(test_tokenize_and_detokenize),
		cmocka_unit_test(test_mkmodel_cli),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
