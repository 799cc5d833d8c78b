/* SPDX-License-Identifier: MIT */
/*
 * test_http_structured.c - tests/node/http-structured.mjs (the official `openai` SDK and
 * the `ajv` JSON Schema validator) against kvpool-http in front of a real kvpoold that
 * stops at end of generation (no --ignore-eos: a grammar's answer ends once it is one
 * whole value).  Without node the test skips; with node, missing packages fail it.
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

#define KEY_A "sk-alice-0123456789abcdef"
#define KEY_B "sk-bob-0123456789abcdef"

struct fixture {
	struct kvpd d; /* first: kvpd_teardown() */
	struct httpd h;
	char keys[320];
	char conf[320];
};

static int setup(void **state)
{
	static const char *const daemon_args[] = { "--pool-size", "128M", "--chat-template",
						   "chatml", NULL };
	struct fixture *f = calloc(1, sizeof(*f));
	const char *args[] = { "--config", f ? f->conf : "", "--api-keys", f ? f->keys : "",
			       "--listen", "127.0.0.1:0",    NULL };
	char text[256];

	if (!f || kvpd_setup(&f->d, "tiny", daemon_args) < 0) {
		free(f);
		return -1;
	}
	snprintf(f->keys, sizeof(f->keys), "%s/keys", f->d.dir);
	snprintf(f->conf, sizeof(f->conf), "%s/http.conf", f->d.dir);
	snprintf(text, sizeof(text), "%s alice\n%s bob\n", KEY_A, KEY_B);
	assert_int_equal(kvp_test_write_file(f->keys, text), 0);
	assert_int_equal(kvp_test_write_file(f->conf, "[http]\nthreads = 2\n"), 0);
	if (httpd_start(&f->h, f->d.dir, f->d.sock, args, 30) < 0 || !f->h.port) {
		httpd_dump_log(&f->h);
		kvpd_cleanup(&f->d);
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	int r = httpd_stop_clean(&f->h);
	int t = kvpd_teardown(state);

	return r ? -1 : t;
}

static void test_sdk_structured(void **state)
{
	struct fixture *f = *state;
	const char *src = getenv("KVP_SOURCE_DIR");
	char path[4096], cli[512];
	pid_t pid;
	int st;

	if (!src || system("command -v node >/dev/null 2>&1"))
		skip();
	snprintf(path, sizeof(path), "%s/tests/node/node_modules/ajv/package.json", src);
	if (access(path, R_OK))
		fail_msg("node is here but %s is not: run tests/deps.sh", path);
	snprintf(path, sizeof(path), "%s/tests/node/http-structured.mjs", src);
	assert_int_equal(kvp_test_build_path(cli, sizeof(cli), "ipc/kvpool"), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		dup2(STDERR_FILENO, STDOUT_FILENO);
		setenv("KVP_HTTP_URL", f->h.url, 1);
		setenv("KVP_HTTP_KEY_A", KEY_A, 1);
		setenv("KVP_HTTP_KEY_B", KEY_B, 1);
		setenv("KVP_CLI", cli, 1);
		setenv("KVP_SOCKET", f->d.sock, 1);
		setenv("KVP_STATUS_SOCKET", f->d.status, 1);
		setenv("KVP_MODEL", "kvpool-tiny", 1);
		setenv("KVP_MAX_BODY", "1048576", 1);
		execlp("node", "node", path, (char *)NULL);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		httpd_dump_log(&f->h);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sdk_structured),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
