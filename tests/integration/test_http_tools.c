/* SPDX-License-Identifier: MIT */
/*
 * test_http_tools.c - tools through kvpool-http with the official SDKs
 * (tests/node/http-tools.mjs), on models with real vocabularies and published chat
 * templates (tests/node/chat-models.mjs writes the vocabularies): Qwen2.5's ChatML and
 * Llama 3.2's render tools, Llama 3.0's does not and is refused; and OpenAI's logprobs and
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
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/integration/httpd.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

static char g_dir[256];

/* <think>Hmm</think>\n\nHi<|im_end|> after "\n", Hi<|im_end|> after "\n\n" (Qwen's pieces) */
static const char *const chain[][2] = {
	{ "\xc4\x8a", "<think>" },	    { "<think>", "Hmm" },	  { "Hmm", "</think>" },
	{ "</think>", "\xc4\x8a\xc4\x8a" }, { "\xc4\x8a\xc4\x8a", "Hi" }, { "Hi", "<|im_end|>" },
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
	    kvpd_vocab_model_untied(g_dir, "qwen3", "qwen2", "qwen3.qwen3-0.6b.jinja") ||
	    kvpd_chain_model(g_dir, "qwen3chain", "qwen2", "qwen3.qwen3-0.6b.jinja", chain,
			     sizeof(chain) / sizeof(chain[0])))
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

static void test_llama3_refuses(void **state)
{
	check_family("llama3", "http-tools.mjs");
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

/* Anthropic's thinking end to end on a model that writes a fixed reasoning and answer */
static void test_qwen3_thinking_chain(void **state)
{
	check_family("qwen3chain", "http-thinking.mjs");
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
		cmocka_unit_test(test_llama3_refuses),
		cmocka_unit_test(test_qwen2_logprobs),
		cmocka_unit_test(test_llama32_logprobs),
		cmocka_unit_test(test_qwen3_thinking),
		cmocka_unit_test(test_qwen3_thinking_chain),
		cmocka_unit_test(test_llama3_thinking_refused),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
