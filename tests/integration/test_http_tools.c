/* SPDX-License-Identifier: MIT */
/*
 * test_http_tools.c - tools through kvpool-http with the official SDKs
 * (tests/node/http-tools.mjs), on models with real vocabularies and published chat
 * templates (tests/node/chat-models.mjs writes the vocabularies): Qwen2.5's ChatML,
 * Llama 3.2's and Mistral v0.3's and Nemo's (on the Llama 2 vocabulary) render tools,
 * Llama 3.0's does not and is refused; a call the model writes itself under tool_choice
 * auto ("qwen2call", a kvpd_chain_model() on Qwen2.5's template:
 * tests/node/http-toolauto.mjs); and OpenAI's logprobs and
 * n > 1 on the same models (tests/node/http-logprobs.mjs); and reasoning on Qwen3's template
 * (on the Qwen vocabulary: a tiny model steered by logit_bias, and "qwen3chain", one that
 * writes a fixed reasoning and answer, kvpd_chain_model()) and on Llama 3.0's, which has
 * none (tests/node/http-thinking.mjs).  For each family a
 * kvpoold (no --ignore-eos: a forced call ends when the grammar's value is whole) and a
 * kvpool-http are started, the script run, both stopped.  Without node the test skips;
 * with node, missing packages fail it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "compute/forward.h"
#include "compute/model.h"
#include "shm/geom.h"
#include "tests/integration/httpd.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

static char g_dir[256];

/* <think>Hmm</think>\n\nHi<|im_end|> after "\n", Hi<|im_end|> after "\n\n" (Qwen's pieces) */
static const char *const chain[][2] = {
	{ "\xc4\x8a", "<think>" },	    { "<think>", "Hmm" },	  { "Hmm", "</think>" },
	{ "</think>", "\xc4\x8a\xc4\x8a" }, { "\xc4\x8a\xc4\x8a", "Hi" }, { "Hi", "<|im_end|>" },
};

/* the same, but "Hmm" follows "Hmm": it reasons until </think> is forced (a budget) */
static const char *const loop[][2] = {
	{ "\xc4\x8a", "<think>" },	    { "<think>", "Hmm" },	  { "Hmm", "Hmm" },
	{ "</think>", "\xc4\x8a\xc4\x8a" }, { "\xc4\x8a\xc4\x8a", "Hi" }, { "Hi", "<|im_end|>" },
};

/* Qwen2.5's template: after the generation prompt a call of "now", then the end */
static const char *const call[][2] = {
	{ "\xc4\x8a", "<tool_call>" },
	{ "<tool_call>", "{\"" },
	{ "{\"", "name" },
	{ "name", "\":\"" },
	{ "\":\"", "now" },
	{ "now", "\",\"" },
	{ "\",\"", "arguments" },
	{ "arguments", "\":" },
	{ "\":", "{" },
	{ "{", "}}" },
	{ "}}", "</tool_call>" },
	{ "</tool_call>", "<|im_end|>" },
};

static int group_setup(void **state)
{
	const char *src = getenv("KVP_SOURCE_DIR");
	char cmd[1024];

	if (!src || system("command -v node >/dev/null 2>&1")) {
		fprintf(stderr, "http-tools: no node on this machine; skipped\n");
		return 0;
	}
	snprintf(cmd, sizeof(cmd), "%s/tests/node/node_modules/@anthropic-ai/sdk/package.json",
		 src);
	if (access(cmd, R_OK)) {
		fprintf(stderr, "node is here but %s is not: run tests/deps.sh\n", cmd);
		return -1;
	}
	if (kvp_test_tmpdir(g_dir, sizeof(g_dir)))
		return -1;
	snprintf(cmd, sizeof(cmd), "node '%s/tests/node/chat-models.mjs' '%s' >/dev/null", src,
		 g_dir);
	if (system(cmd) || kvpd_vocab_model(g_dir, "qwen2", "qwen2", NULL) ||
	    kvpd_vocab_model(g_dir, "llama3.2", "llama3", "llama3.2.llama-3.2-1b-instruct.jinja") ||
	    kvpd_vocab_model(g_dir, "llama3", "llama3", NULL) ||
	    kvpd_vocab_model(g_dir, "mistral-v3", "llama2",
			     "mistral-v3.mistral-7b-instruct-v0.3.jinja") ||
	    kvpd_vocab_model(g_dir, "mistral-nemo", "llama2",
			     "mistral-nemo.mistral-nemo-instruct-2407.jinja") ||
	    kvpd_vocab_model_untied(g_dir, "qwen3", "qwen2", "qwen3.qwen3-0.6b.jinja") ||
	    kvpd_chain_model(g_dir, "qwen3chain", "qwen2", "qwen3.qwen3-0.6b.jinja", chain,
			     sizeof(chain) / sizeof(chain[0])) ||
	    kvpd_chain_model(g_dir, "qwen3loop", "qwen2", "qwen3.qwen3-0.6b.jinja", loop,
			     sizeof(loop) / sizeof(loop[0])) ||
	    kvpd_chain_model(g_dir, "qwen2call", "qwen2", NULL, call,
			     sizeof(call) / sizeof(call[0])))
		return -1;
	return 0;
}

static int group_teardown(void **state)
{
	if (*g_dir)
		kvp_test_rmtree(g_dir);
	return 0;
}

/* @script (tests/node/) against kvpoold serving @fam's model, through kvpool-http. */
static void check_family(const char *fam, const char *script_name)
{
	static const char *const http_args[] = { "--listen", "127.0.0.1:0", NULL };
	char model[512], script[4096], cli[512];
	const char *args[] = { "--model", model, "--pool-size", "64M", "--threads", "1", NULL };
	struct kvpd d;
	struct httpd h;
	pid_t pid;
	int st;

	if (!*g_dir)
		skip();
	snprintf(model, sizeof(model), "%s/%s.gguf", g_dir, fam);
	snprintf(script, sizeof(script), "%s/tests/node/%s", getenv("KVP_SOURCE_DIR"), script_name);
	assert_int_equal(kvp_test_build_path(cli, sizeof(cli), "ipc/kvpool"), 0);
	assert_int_equal(kvpd_init(&d), 0);
	if (kvpd_start(&d, 60, args)) {
		kvpd_dump_log(&d);
		kvpd_cleanup(&d);
		fail_msg("kvpoold did not start on %s", model);
	}
	if (httpd_start(&h, d.dir, d.sock, http_args, 30) < 0 || !h.port) {
		httpd_dump_log(&h);
		kvpd_cleanup(&d);
		fail_msg("kvpool-http did not start");
	}
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		dup2(STDERR_FILENO, STDOUT_FILENO);
		setenv("KVP_HTTP_URL", h.url, 1);
		setenv("KVP_HTTP_KEY_A", "unused", 1);
		setenv("KVP_HTTP_KEY_B", "unused", 1);
		setenv("KVP_CLI", cli, 1);
		setenv("KVP_SOCKET", d.sock, 1);
		setenv("KVP_STATUS_SOCKET", d.status, 1);
		setenv("KVP_MODEL", fam, 1);
		setenv("KVP_MAX_BODY", "1048576", 1);
		setenv("KVP_FAMILY", fam, 1);
		execlp("node", "node", script, (char *)NULL);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		httpd_dump_log(&h);
		kvpd_dump_log(&d);
	}
	assert_int_equal(httpd_stop_clean(&h), 0);
	kvpd_cleanup(&d);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_qwen2(void **state)
{
	check_family("qwen2", "http-tools.mjs");
}

static void test_llama32(void **state)
{
	check_family("llama3.2", "http-tools.mjs");
}

static void test_mistral3(void **state)
{
	check_family("mistral-v3", "http-tools.mjs");
}

static void test_nemo(void **state)
{
	check_family("mistral-nemo", "http-tools.mjs");
}

static void test_llama3_refuses(void **state)
{
	check_family("llama3", "http-tools.mjs");
}

/* Numbers of a JSON array starting at the '[' at @p, to @v (at most @max); returns the count. */
static size_t json_numbers(const char *p, double *v, size_t max)
{
	size_t n = 0;
	char *e;

	assert_int_equal(*p, '[');
	for (p++; *p && *p != ']' && n < max; p = e) {
		if (*p == ',')
			p++;
		v[n++] = strtod(p, &e);
		assert_true(e != p);
	}
	return n;
}

#define REF_STEPS 6
#define REF_TOL 1e-4 /* same file, kernels and f16 K/V as kvpoold: only the JSON rounding */

/*
 * kvpool-http's logprobs against the engine's own logits: a greedy completion of a
 * token-id prompt with logprobs 5 (tests/node/http-logprobs-ref.mjs) on the Qwen2.5
 * vocabulary model; then the same prompt through a forward pass here over the same
 * file (best kernels, f16 K/V as kvpoold's default), greedy, and at each step the
 * log-softmax computed here: the reported token's logprob is the maximum, and every
 * reported alternative is one of the 6 largest here, in order, within REF_TOL.
 */
static void test_qwen2_logprobs_reference(void **state)
{
	char out[512], model[512], err[256], *js, *p;
	double tl[REF_STEPS], top[REF_STEPS][8];
	size_t nsteps, ntop[REF_STEPS];
	int32_t prompt[32];
	size_t np;
	struct kvp_model *m;
	struct kvp_model_shape shape;
	struct kvp_kv_view v = { 0 };
	struct kvp_fwd *f;
	uint32_t table[4] = { 0, 1, 2, 3 }, V;
	double worst = 0;
	size_t nalt = 0;
	float *lg;

	if (!*g_dir)
		skip();
	snprintf(out, sizeof(out), "%s/logprobs-ref.json", g_dir);
	setenv("KVP_LOGPROBS_OUT", out, 1);
	check_family("qwen2", "http-logprobs-ref.mjs");
	js = kvp_test_read_file(out, NULL);
	assert_non_null(js);
	{
		double d[32];

		p = strstr(js, "\"prompt\":");
		assert_non_null(p);
		np = json_numbers(p + 9, d, 32);
		for (size_t i = 0; i < np; i++)
			prompt[i] = (int32_t)d[i];
	}
	p = strstr(js, "\"token_logprobs\":");
	assert_non_null(p);
	nsteps = json_numbers(p + 17, tl, REF_STEPS);
	assert_true(nsteps >= 1);
	p = strstr(js, "\"top\":[");
	assert_non_null(p);
	p += 7;
	for (size_t s = 0; s < nsteps; s++) {
		p = strchr(p, '[');
		assert_non_null(p);
		ntop[s] = json_numbers(p, top[s], 8);
		assert_true(ntop[s] >= 1 && ntop[s] <= 6);
		p = strchr(p, ']') + 1;
	}

	snprintf(model, sizeof(model), "%s/qwen2.gguf", g_dir);
	if (kvp_model_open(&m, model, err, sizeof(err)))
		fail_msg("open %s: %s", model, err);
	V = kvp_model_hparams(m)->n_vocab;
	kvp_model_kv_shape(m, KVP_DTYPE_F16, 16, &shape);
	assert_int_equal(kvp_geom_init(&v.geom, &shape), 0);
	v.n_blocks = 4;
	v.base = aligned_alloc(KVP_BLOCK_ALIGN, 4 * v.geom.block_stride);
	assert_non_null(v.base);
	lg = malloc((size_t)V * sizeof(*lg));
	assert_non_null(lg);
	assert_int_equal(kvp_fwd_new(&f, m,
				     &(struct kvp_fwd_opts){
					     .n_threads = 1, .max_chunk = 32, .max_batch = 1 }),
			 0);
	assert_int_equal(kvp_fwd_prefill(f, &v, table, 4, 0, prompt, (uint32_t)np, lg, 0), 0);
	for (size_t s = 0; s < nsteps; s++) {
		double mx = -INFINITY, sum = 0, ref[6];
		int32_t arg = 0;

		for (uint32_t i = 0; i < V; i++)
			if (lg[i] > mx)
				mx = lg[i], arg = (int32_t)i;
		for (uint32_t i = 0; i < V; i++)
			sum += exp((double)lg[i] - mx);
		/* the 6 largest log-softmax values, best first (equal ones once) */
		for (int k = 0; k < 6; k++) {
			double best = -INFINITY;

			for (uint32_t i = 0; i < V; i++) {
				double x = (double)lg[i] - mx - log(sum);

				if (x > best && (!k || x < ref[k - 1]))
					best = x;
			}
			ref[k] = best;
		}
		worst = fmax(worst, fabs(tl[s] - ref[0]));
		if (fabs(tl[s] - ref[0]) > REF_TOL)
			fail_msg("step %zu: logprob %.7f, reference %.7f", s, tl[s], ref[0]);
		for (size_t k = 0; k < ntop[s]; k++) {
			bool found = false;

			for (int j = 0; j < 6; j++)
				if (fabs(top[s][k] - ref[j]) <= REF_TOL) {
					worst = fmax(worst, fabs(top[s][k] - ref[j]));
					found = true;
				}
			nalt++;
			if (!found)
				fail_msg("step %zu: alternative %zu logprob %.7f not among the "
					 "reference's 6 best (%.7f .. %.7f)",
					 s, k, top[s][k], ref[0], ref[5]);
		}
		assert_int_equal(kvp_fwd_decode(f, &v,
						&(struct kvp_fwd_seq){ .table = table,
								       .n_table = 4,
								       .pos = (uint32_t)np +
									      (uint32_t)s,
								       .token = arg },
						1, lg),
				 0);
	}
	fprintf(stderr,
		"logprobs reference: %zu steps, %zu alternatives, largest difference %.2g "
		"(tolerance %g)\n",
		nsteps, nalt, worst, REF_TOL);
	assert_true(nalt >= nsteps * 2); /* alternatives were compared, not only the token */
	kvp_fwd_free(f);
	kvp_model_close(m);
	free(v.base);
	free(lg);
	free(js);
	unsetenv("KVP_LOGPROBS_OUT");
}

/* logprobs and n > 1 (tests/node/http-logprobs.mjs) on two real vocabularies */
static void test_qwen2_logprobs(void **state)
{
	check_family("qwen2", "http-logprobs.mjs");
}

static void test_llama32_logprobs(void **state)
{
	check_family("llama3.2", "http-logprobs.mjs");
}

/* reasoning (tests/node/http-thinking.mjs): Qwen3's <think> section, and Llama 3's none */
static void test_qwen3_thinking(void **state)
{
	check_family("qwen3", "http-thinking.mjs");
}

/* a call the model writes itself under tool_choice auto (tests/node/http-toolauto.mjs) */
static void test_qwen2_auto_call(void **state)
{
	check_family("qwen2call", "http-toolauto.mjs");
}

/* Anthropic's thinking end to end on a model that writes a fixed reasoning and answer */
static void test_qwen3_thinking_chain(void **state)
{
	check_family("qwen3chain", "http-thinking.mjs");
}

static void test_qwen3_thinking_budget(void **state)
{
	check_family("qwen3loop", "http-thinking.mjs");
}

static void test_llama3_thinking_refused(void **state)
{
	check_family("llama3", "http-thinking.mjs");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_qwen2),
		cmocka_unit_test(test_llama32),
		cmocka_unit_test(test_mistral3),
		cmocka_unit_test(test_nemo),
		cmocka_unit_test(test_llama3_refuses),
		cmocka_unit_test(test_qwen2_logprobs),
		cmocka_unit_test(test_qwen2_auto_call),
		cmocka_unit_test(test_llama32_logprobs),
		cmocka_unit_test(test_qwen2_logprobs_reference),
		cmocka_unit_test(test_qwen3_thinking),
		cmocka_unit_test(test_qwen3_thinking_chain),
		cmocka_unit_test(test_qwen3_thinking_budget),
		cmocka_unit_test(test_llama3_thinking_refused),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
