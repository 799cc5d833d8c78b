/* SPDX-License-Identifier: MIT */
/*
 * test_http.c - kvpool-http in front of a real kvpoold, driven by the official SDKs:
 *  - tests/node/http-openai.mjs (npm `openai`): completions, plain and streamed, their
 *    usage (cached tokens on a repeated long prompt, tenants and cache_salt apart), the
 *    same tokens as `kvpool generate`, stop strings, typed errors, chat completions whole
 *    and streamed, a second turn read from the cache, priority, /tokenize and
 *    /detokenize, a disconnected stream cancelled in kvpoold, models;
 *  - tests/node/http-anthropic.mjs (npm `@anthropic-ai/sdk`): messages whole and
 *    streamed (events in order), the usage split, a second turn read from the cache,
 *    count_tokens against a real call, cache_control checks, priority, typed errors,
 *    models;
 * and from C: only loopback without API keys, bad command lines, kvpoold going away and
 * coming back, SIGTERM draining running requests (or cancelling them after the drain
 * timeout), a non-streamed request whose client hangs up cancelled in kvpoold, replies
 * ending at the model's end of generation ("stop", "end_turn") or at max_tokens, no chat
 * template, priorities as kvpoold queues them.
 * Without node the SDK tests skip; with node, missing packages fail them.
 */
#include <assert.h>
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/integration/httpc.h"
#include "tests/integration/httpd.h"
#include "tests/integration/jsonq.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

#define KEY_A "sk-alice-0123456789abcdef"
#define KEY_B "sk-bob-0123456789abcdef"
#define MAX_BODY (256 << 10)

struct fixture {
	struct kvpd d; /* first: kvpd_teardown() frees the fixture through it */
	struct httpd h;
	char keys[320];
	char conf[320];
	char model[80]; /* the name kvpoold serves */
};
static_assert(offsetof(struct fixture, d) == 0, "kvpd_teardown");

/*
 * ChatML: the synthetic model has no chat template of its own.  Its context_length is
 * 1024; the SDK scripts check the limit at 8192 (test_model_context checks the model's
 * own), which leaves room for the long generations that hold requests in flight.
 */
static const char *const daemon_args[] = { "--ignore-eos", "--pool-size",
					   "256M",	   "--chat-template",
					   "chatml",	   "--context-tokens",
					   "8192",	   NULL };

static void write_file(const char *path, const char *text)
{
	assert_int_equal(kvp_test_write_file(path, text), 0);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	const char *args[] = { "--config", f ? f->conf : "", "--api-keys", f ? f->keys : "",
			       "--listen", "127.0.0.1:0",    NULL };
	char text[256];

	if (!f || kvpd_setup(&f->d, "tinyq", daemon_args) < 0) {
		free(f);
		return -1;
	}
	snprintf(f->keys, sizeof(f->keys), "%s/keys", f->d.dir);
	snprintf(f->conf, sizeof(f->conf), "%s/http.conf", f->d.dir);
	snprintf(text, sizeof(text), "# test keys\n%s alice\n%s bob\n", KEY_A, KEY_B);
	write_file(f->keys, text);
	snprintf(text, sizeof(text),
		 "[http]\nmax_body_bytes = %d\nmodel_aliases = gpt-kvpool\nthreads = 2\n",
		 MAX_BODY);
	write_file(f->conf, text);
	if (httpd_start(&f->h, f->d.dir, f->d.sock, args, 30) < 0 || !f->h.port) {
		httpd_dump_log(&f->h);
		kvpd_cleanup(&f->d);
		free(f);
		return -1;
	}
	snprintf(f->model, sizeof(f->model), "kvpool-tinyq");
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	/* a clean stop after everything the tests did (under ASan: no leak either) */
	int r = httpd_stop_clean(&f->h);
	int t = kvpd_teardown(state);

	return r ? -1 : t;
}

/* ------------------------------------------------------------ the SDK scripts */

/* node on the machine?  Then the SDKs must be installed (tests/deps.sh). */
static bool have_node(void)
{
	const char *src = getenv("KVP_SOURCE_DIR");
	char p[4096];

	if (!src || system("command -v node >/dev/null 2>&1"))
		return false;
	snprintf(p, sizeof(p), "%s/tests/node/node_modules/openai/package.json", src);
	if (access(p, R_OK))
		fail_msg("node is here but %s is not: run tests/deps.sh", p);
	snprintf(p, sizeof(p), "%s/tests/node/node_modules/@anthropic-ai/sdk/package.json", src);
	if (access(p, R_OK))
		fail_msg("node is here but %s is not: run tests/deps.sh", p);
	return true;
}

static int run_script(struct fixture *f, const char *script)
{
	char path[4096], cli[512], maxb[32];
	pid_t pid;
	int st;

	snprintf(path, sizeof(path), "%s/tests/node/%s", getenv("KVP_SOURCE_DIR"), script);
	assert_int_equal(kvp_test_build_path(cli, sizeof(cli), "ipc/kvpool"), 0);
	snprintf(maxb, sizeof(maxb), "%d", MAX_BODY);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		dup2(STDERR_FILENO, STDOUT_FILENO); /* meson shows stderr on failure */
		setenv("KVP_HTTP_URL", f->h.url, 1);
		setenv("KVP_HTTP_KEY_A", KEY_A, 1);
		setenv("KVP_HTTP_KEY_B", KEY_B, 1);
		setenv("KVP_CLI", cli, 1);
		setenv("KVP_SOCKET", f->d.sock, 1);
		setenv("KVP_STATUS_SOCKET", f->d.status, 1);
		setenv("KVP_MODEL", f->model, 1);
		setenv("KVP_MAX_BODY", maxb, 1);
		execlp("node", "node", path, (char *)NULL);
		_exit(127);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_sdk_openai(void **state)
{
	struct fixture *f = *state;
	int r;

	/* every script check passes (each one prints ok/FAIL with its reason) */
	if (!have_node())
		skip();
	r = run_script(f, "http-openai.mjs");
	if (r)
		httpd_dump_log(&f->h);
	assert_int_equal(r, 0);
}

static void test_sdk_anthropic(void **state)
{
	struct fixture *f = *state;
	int r;

	/* every script check passes */
	if (!have_node())
		skip();
	r = run_script(f, "http-anthropic.mjs");
	if (r)
		httpd_dump_log(&f->h);
	assert_int_equal(r, 0);
}

/* ------------------------------------------------------------ from C */

/* The value of "path" in @r's JSON body, or @dflt. */
static double body_num(const struct httpc_resp *r, const char *path, double dflt)
{
	struct jsonq *j = jsonq_parse(r->body, r->body_len);
	double v = jsonq_num(j, path, dflt);

	jsonq_free(j);
	return v;
}

static bool body_str_is(const struct httpc_resp *r, const char *path, const char *want)
{
	struct jsonq *j = jsonq_parse(r->body, r->body_len);
	const char *s = jsonq_str(j, path);
	bool eq = s && !strcmp(s, want);

	jsonq_free(j);
	return eq;
}

static void test_loopback_only_without_keys(void **state)
{
	struct fixture *f = *state;
	const char *open_args[] = { "--config", "/dev/null", "--listen", "0.0.0.0:0", NULL };
	const char *keyed_args[] = { "--config",   "/dev/null", "--listen", "0.0.0.0:0",
				     "--api-keys", f->keys,	NULL };
	const char *local_args[] = { "--config", "/dev/null",	"--listen", "[::1]:0",
				     "--listen", "127.0.0.2:0", NULL };
	struct httpd h;

	/* a non-loopback address without API keys is refused at start, naming the reason */
	assert_int_equal(httpd_start(&h, f->d.dir, f->d.sock, open_args, 10), -ECHILD);
	assert_true(WIFEXITED(h.exit_status) && WEXITSTATUS(h.exit_status) == 1);
	assert_true(httpd_log_has(&h, "not a loopback address"));
	httpd_stop(&h);
	/* with keys it is allowed */
	assert_int_equal(httpd_start(&h, f->d.dir, f->d.sock, keyed_args, 10), 0);
	assert_int_equal(httpd_stop(&h), 0);
	/* other loopback addresses are fine without keys (::1 when the machine has IPv6) */
	if (httpd_start(&h, f->d.dir, f->d.sock, local_args, 10) == 0) {
		assert_int_equal(httpd_stop(&h), 0);
	} else {
		assert_true(httpd_log_has(&h, "[::1]:0"));
		httpd_stop(&h);
	}
}

static void test_bad_command_lines(void **state)
{
	struct fixture *f = *state;
	static const char *const bad[][6] = {
		{ "--bogus", NULL },
		{ "--listen", NULL },
		{ "--config", "/nonexistent/kvpool-http.conf", NULL },
		{ "--config", "/dev/null", "--api-keys", "/nonexistent/keys", NULL },
		{ "--config", "/dev/null", "--listen", "127.0.0.1:99999", NULL },
		{ "--config", "/dev/null", "--listen", "unix:relative.sock", NULL },
		{ "--config", "/dev/null", "--log-level", "chatty", NULL },
		{ "--config", "/dev/null", "stray", NULL },
	};
	static const char *const why[] = {
		"--bogus: unknown flag", "--listen: needs a value",
		"No such file",		 "api keys: /nonexistent/keys",
		"is not a port",	 "unix:/absolute/path",
		"is not a log level",	 "stray: unexpected argument",
	};
	char conf[400];

	/* each fails at start with exit status 1 and a message naming what is wrong */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct httpd h;

		assert_int_equal(httpd_start(&h, f->d.dir, f->d.sock, bad[i], 10), -ECHILD);
		assert_true(WIFEXITED(h.exit_status) && WEXITSTATUS(h.exit_status) == 1);
		if (!httpd_log_has(&h, why[i])) {
			httpd_dump_log(&h);
			fail_msg("case %zu: no '%s' in the log", i, why[i]);
		}
		httpd_stop(&h);
	}
	/* a config file with a key outside [http], and one with an unknown key */
	snprintf(conf, sizeof(conf), "%s/bad.conf", f->d.dir);
	write_file(conf, "[daemon]\nmodel = x\n");
	{
		const char *args[] = { "--config", conf, NULL };
		struct httpd h;

		assert_int_equal(httpd_start(&h, f->d.dir, f->d.sock, args, 10), -ECHILD);
		assert_true(httpd_log_has(&h, "bad.conf:2: daemon.model"));
		httpd_stop(&h);
		write_file(conf, "[http]\nthreads = 2\nmax_body = 1\n");
		assert_int_equal(httpd_start(&h, f->d.dir, f->d.sock, args, 10), -ECHILD);
		assert_true(httpd_log_has(&h, "bad.conf:3: http.max_body: unknown key"));
		httpd_stop(&h);
	}
}

static void test_kvpoold_restart(void **state)
{
	struct fixture *f = *state;
	const char *auth = "Authorization: Bearer " KEY_A "\r\n";
	const char *req = "{\"prompt\":\"after a restart\",\"max_tokens\":4,\"temperature\":0}";
	const char *argv[12] = { "--model", f->d.model };
	struct httpc_resp r;
	double t_end;
	int n = 2;

	for (const char *const *a = daemon_args; *a; a++)
		argv[n++] = *a;
	/* kvpoold gone: health and generations answer 503, in each API's error shape */
	kvpd_stop(&f->d);
	assert_int_equal(httpc_request(f->h.port, "GET", "/health", NULL, NULL, &r), 0);
	assert_int_equal(r.status, 503);
	assert_true(body_str_is(&r, "status", "unavailable"));
	httpc_resp_free(&r);
	assert_int_equal(httpc_request(f->h.port, "POST", "/v1/completions", auth, req, &r), 0);
	assert_int_equal(r.status, 503);
	assert_true(body_str_is(&r, "error.code", "backend_unavailable"));
	httpc_resp_free(&r);
	/* kvpoold back: the front reconnects by itself within a few seconds */
	assert_int_equal(kvpd_start(&f->d, 60, argv), 0);
	t_end = kvp_test_now_s() + 10;
	do {
		assert_int_equal(httpc_request(f->h.port, "GET", "/health", NULL, NULL, &r), 0);
		httpc_resp_free(&r);
		if (r.status == 200)
			break;
		usleep(100000);
	} while (kvp_test_now_s() < t_end);
	assert_int_equal(r.status, 200);
	assert_int_equal(httpc_request(f->h.port, "POST", "/v1/completions", auth, req, &r), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal((int)body_num(&r, "usage.completion_tokens", -1), 4);
	httpc_resp_free(&r);
}

/* A non-streamed request of @max_tokens on its own connection, not yet read. */
static void send_long(struct httpc *c, int port, int max_tokens, bool stream)
{
	char body[256];

	snprintf(body, sizeof(body),
		 "{\"prompt\":\"drain me\",\"max_tokens\":%d,\"temperature\":0%s}", max_tokens,
		 stream ? ",\"stream\":true" : "");
	assert_int_equal(httpc_open(c, port, 60), 0);
	assert_int_equal(httpc_send_request(c, "POST", "/v1/completions", NULL, body, strlen(body)),
			 0);
}

/*
 * Wait until GET /health's @what (in_flight: generations at kvpoold; requests_open:
 * received, not yet answered) is at least @n: a connection still in the listen backlog
 * when SIGTERM comes is reset, not drained.
 */
static void wait_health(int port, const char *what, int n)
{
	double t_end = kvp_test_now_s() + 30;
	struct httpc_resp r;
	int got;

	do {
		assert_int_equal(httpc_request(port, "GET", "/health", NULL, NULL, &r), 0);
		got = (int)body_num(&r, what, -1);
		httpc_resp_free(&r);
		if (got >= n)
			return;
		usleep(10000);
	} while (kvp_test_now_s() < t_end);
	fail_msg("kvpool-http's %s stays %d, not %d", what, got, n);
}

static void test_sigterm_drains(void **state)
{
	struct fixture *f = *state;
	char conf[400];
	const char *args[] = { "--config", conf, "--listen", "127.0.0.1:0", NULL };
	const char *late = "{\"prompt\":\"sent in two\",\"max_tokens\":3,\"temperature\":0}";
	char late_head[128];
	struct httpc c, c2;
	struct httpc_resp r;
	struct httpd h;

	/*
	 * SIGTERM: a running request still completes within the drain time, and so does one
	 * whose headers came before the signal and its body after; exit 0
	 */
	snprintf(conf, sizeof(conf), "%s/drain.conf", f->d.dir);
	write_file(conf, "[http]\ndrain_timeout_ms = 30000\n");
	assert_int_equal(httpd_start(&h, f->d.dir, f->d.sock, args, 10), 0);
	send_long(&c, h.port, 1500, false);
	assert_int_equal(httpc_open(&c2, h.port, 60), 0);
	snprintf(late_head, sizeof(late_head),
		 "Content-Type: application/json\r\nContent-Length: %zu\r\n", strlen(late));
	assert_int_equal(httpc_send_request(&c2, "POST", "/v1/completions", late_head, NULL, 0), 0);
	assert_int_equal(httpc_send(&c2, late, 10), 0);
	wait_health(h.port, "in_flight", 1);
	wait_health(h.port, "requests_open", 2);
	kill(h.pid, SIGTERM);
	usleep(100000);
	assert_int_equal(httpc_send(&c2, late + 10, strlen(late) - 10), 0);
	assert_int_equal(httpc_read(&c, &r, NULL, NULL), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal((int)body_num(&r, "usage.completion_tokens", -1), 1500);
	httpc_resp_free(&r);
	assert_int_equal(httpc_read(&c2, &r, NULL, NULL), 0);
	assert_int_equal(r.status, 200);
	assert_int_equal((int)body_num(&r, "usage.completion_tokens", -1), 3);
	httpc_resp_free(&r);
	httpc_close(&c);
	httpc_close(&c2);
	assert_int_equal(httpd_wait(&h, 30), 0);
	assert_true(WIFEXITED(h.exit_status) && WEXITSTATUS(h.exit_status) == 0);
	assert_true(httpd_log_has(&h, "stopping"));
	httpd_stop(&h);

	/* a drain time too short: the requests are cancelled in kvpoold and say so (503 for
	 * the plain one; an error event in the started stream); exit 0 all the same */
	write_file(conf, "[http]\ndrain_timeout_ms = 50\n");
	assert_int_equal(httpd_start(&h, f->d.dir, f->d.sock, args, 10), 0);
	send_long(&c, h.port, 4000, false);
	send_long(&c2, h.port, 4000, true);
	wait_health(h.port, "in_flight", 2);
	kill(h.pid, SIGTERM);
	assert_int_equal(httpc_read(&c, &r, NULL, NULL), 0);
	assert_int_equal(r.status, 503);
	assert_true(body_str_is(&r, "error.type", "server_error"));
	httpc_resp_free(&r);
	assert_int_equal(httpc_read(&c2, &r, NULL, NULL), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "\"error\""));
	assert_non_null(strstr(r.body, "data: [DONE]"));
	httpc_resp_free(&r);
	httpc_close(&c);
	httpc_close(&c2);
	assert_int_equal(httpd_wait(&h, 30), 0);
	assert_true(WIFEXITED(h.exit_status) && WEXITSTATUS(h.exit_status) == 0);
	assert_true(httpd_log_has(&h, "drain: cancelling 2 requests"));
	httpd_stop(&h);
}

static void test_hangup_cancels_plain_request(void **state)
{
	struct fixture *f = *state;
	const char *auth = "Authorization: Bearer " KEY_A "\r\n";
	const char *body = "{\"prompt\":\"hang up on me\",\"max_tokens\":4000,\"temperature\":0}";
	struct jsonq *before, *after = NULL;
	struct httpc c;
	double t_end;

	/* a client that closes while its non-streamed answer is being generated (its
	 * connection waits suspended, watched by the backend) is cancelled in kvpoold */
	before = kvpd_status(&f->d);
	assert_non_null(before);
	assert_int_equal(httpc_open(&c, f->h.port, 60), 0);
	assert_int_equal(httpc_send_request(&c, "POST", "/v1/completions", auth, body,
					    strlen(body)),
			 0);
	usleep(100000);
	httpc_close(&c);
	t_end = kvp_test_now_s() + 10;
	while (kvp_test_now_s() < t_end) {
		jsonq_free(after);
		after = kvpd_status(&f->d);
		if (after && jsonq_delta(after, before, "scheduler.requests_cancelled") >= 1)
			break;
		usleep(50000);
	}
	assert_non_null(after);
	assert_true(jsonq_delta(after, before, "scheduler.requests_cancelled") >= 1);
	assert_true(jsonq_delta(after, before, "usage.generated_tokens") < 4000);
	jsonq_free(before);
	jsonq_free(after);
}

/* A second kvpoold (on the fixture's model, @extra flags) and a kvpool-http without keys. */
static void start_pair(struct fixture *f, struct kvpd *d, struct httpd *h, const char *const *extra)
{
	const char *argv[16] = { "--model", f->d.model, "--pool-size", "64M" };
	const char *hargs[] = { "--config", "/dev/null", "--listen", "127.0.0.1:0", NULL };
	int n = 4;

	for (; *extra; extra++)
		argv[n++] = *extra;
	assert_int_equal(kvpd_init(d), 0);
	if (kvpd_start(d, 60, argv)) {
		kvpd_dump_log(d);
		fail_msg("kvpoold did not start");
	}
	assert_int_equal(httpd_start(h, d->dir, d->sock, hargs, 30), 0);
}

static void stop_pair(struct kvpd *d, struct httpd *h)
{
	assert_int_equal(httpd_stop(h), 0);
	kvpd_cleanup(d);
}

/* POST @body to @path: the parsed answer, its HTTP status in *@status. */
static struct jsonq *post_json(int port, const char *path, const char *body, int *status)
{
	struct httpc_resp r;
	struct jsonq *j;

	assert_int_equal(httpc_request(port, "POST", path, NULL, body, &r), 0);
	*status = r.status;
	j = jsonq_parse(r.body, r.body_len);
	httpc_resp_free(&r);
	assert_non_null(j);
	return j;
}

static void test_end_of_generation(void **state)
{
	struct fixture *f = *state;
	const char *extra[] = { "--chat-template", "chatml", "--test-eog-after", "3", NULL };
	const char *chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
			   "\"max_tokens\":%d%s}";
	const char *msgs = "{\"model\":\"kvpool-tinyq\",\"messages\":[{\"role\":\"user\","
			   "\"content\":\"Hi\"}],\"max_tokens\":%d}";
	struct httpc_resp resp;
	struct kvpd d;
	struct httpd h;
	struct jsonq *j;
	char body[256];
	int st;

	/* a daemon whose replies end after 3 tokens (the model's end-of-generation token,
	 * as a trained model's would): the reply that ends so says "stop" / "end_turn", one
	 * cut by max_tokens "length" / "max_tokens" */
	start_pair(f, &d, &h, extra);
	snprintf(body, sizeof(body), chat, 16, "");
	j = post_json(h.port, "/v1/chat/completions", body, &st);
	assert_int_equal(st, 200);
	assert_string_equal(jsonq_str(j, "choices.0.finish_reason"), "stop");
	assert_true(jsonq_num(j, "usage.completion_tokens", -1) >= 1);
	assert_true(jsonq_num(j, "usage.completion_tokens", -1) <= 3);
	jsonq_free(j);
	snprintf(body, sizeof(body), chat, 2, "");
	j = post_json(h.port, "/v1/chat/completions", body, &st);
	assert_int_equal(st, 200);
	assert_string_equal(jsonq_str(j, "choices.0.finish_reason"), "length");
	assert_int_equal((int)jsonq_num(j, "usage.completion_tokens", -1), 2);
	jsonq_free(j);
	snprintf(body, sizeof(body), msgs, 16);
	j = post_json(h.port, "/v1/messages", body, &st);
	assert_int_equal(st, 200);
	assert_string_equal(jsonq_str(j, "stop_reason"), "end_turn");
	assert_true(jsonq_num(j, "usage.output_tokens", -1) <= 3);
	jsonq_free(j);
	snprintf(body, sizeof(body), msgs, 2);
	j = post_json(h.port, "/v1/messages", body, &st);
	assert_int_equal(st, 200);
	assert_string_equal(jsonq_str(j, "stop_reason"), "max_tokens");
	jsonq_free(j);
	/* streamed: the finish chunk and message_delta say the same */
	snprintf(body, sizeof(body), chat, 16, ",\"stream\":true");
	assert_int_equal(httpc_request(h.port, "POST", "/v1/chat/completions", NULL, body, &resp),
			 0);
	assert_int_equal(resp.status, 200);
	assert_non_null(strstr(resp.body, "\"finish_reason\":\"stop\""));
	assert_non_null(strstr(resp.body, "data: [DONE]"));
	httpc_resp_free(&resp);
	/* a model without a chat template (and none named): a clear 400 naming the template */
	stop_pair(&d, &h);
	start_pair(f, &d, &h, (const char *const[]){ NULL });
	snprintf(body, sizeof(body), chat, 4, "");
	j = post_json(h.port, "/v1/chat/completions", body, &st);
	assert_int_equal(st, 400);
	assert_non_null(strstr(jsonq_str(j, "error.message"), "template"));
	jsonq_free(j);
	stop_pair(&d, &h);
}

static void test_model_context(void **state)
{
	struct fixture *f = *state;
	struct kvpd d;
	struct httpd h;
	struct jsonq *j;
	char body[1400], prompt[1001];
	int st;

	/* a kvpoold with --context-tokens 0: the model's context_length (tinyq: 1024) is
	 * the limit of prompt + max_tokens, /tokenize says so, and beyond it is a 400 */
	memset(prompt, 'a', 1000);
	prompt[1000] = 0;
	start_pair(f, &d, &h,
		   (const char *const[]){ "--ignore-eos", "--context-tokens", "0", NULL });
	j = post_json(h.port, "/tokenize", "{\"prompt\":\"x\"}", &st);
	assert_int_equal(st, 200);
	assert_int_equal((int)jsonq_num(j, "max_model_len", -1), 1024);
	jsonq_free(j);
	snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"max_tokens\":100}", prompt);
	j = post_json(h.port, "/v1/completions", body, &st);
	assert_int_equal(st, 400);
	assert_string_equal(jsonq_str(j, "error.code"), "context_length_exceeded");
	assert_non_null(strstr(jsonq_str(j, "error.message"), "maximum context length is 1024"));
	jsonq_free(j);
	snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"max_tokens\":20}", prompt);
	j = post_json(h.port, "/v1/completions", body, &st);
	assert_int_equal(st, 200);
	assert_int_equal((int)jsonq_num(j, "usage.completion_tokens", -1), 20);
	jsonq_free(j);
	stop_pair(&d, &h);
}

static void test_text_limit_in_tokens(void **state)
{
	struct fixture *f = *state;
	enum { BYTES = 40000 }; /* well past the old 16,384-byte cap on text prompts */
	struct kvpd d;
	struct httpd h;
	struct jsonq *j;
	char *body = malloc(BYTES + 200), *text = malloc(BYTES + 1), want[96];
	int st, count;

	/* text prompts on /tokenize and /v1/completions are limited in tokens, not bytes:
	 * a 40,000-byte text is tokenized whole, and a completion of it is refused by the
	 * context (in tokens, the same count /tokenize gives), not by a byte cap */
	assert_non_null(body);
	assert_non_null(text);
	for (int i = 0; i < BYTES; i++)
		text[i] = "the cat sat "[i % 12];
	text[BYTES] = 0;
	start_pair(f, &d, &h,
		   (const char *const[]){ "--ignore-eos", "--max-prompt-tokens", "65536",
					  "--context-tokens", "0", NULL });
	snprintf(body, BYTES + 200, "{\"prompt\":\"%s\"}", text);
	j = post_json(h.port, "/tokenize", body, &st);
	assert_int_equal(st, 200);
	count = (int)jsonq_num(j, "count", -1);
	assert_true(count > 1024); /* past the context: counted all the same */
	jsonq_free(j);
	snprintf(body, BYTES + 200, "{\"prompt\":\"%s\",\"max_tokens\":8}", text);
	j = post_json(h.port, "/v1/completions", body, &st);
	assert_int_equal(st, 400);
	assert_string_equal(jsonq_str(j, "error.code"), "context_length_exceeded");
	snprintf(want, sizeof(want), "(%d in the prompt, 8 in the completion)", count);
	assert_non_null(strstr(jsonq_str(j, "error.message"), want));
	jsonq_free(j);
	stop_pair(&d, &h);
	free(text);
	free(body);
}

static void test_backend_queue(void **state)
{
	struct fixture *f = *state;
	const char *dargs[] = { "--model", f->d.model, "--pool-size", "64M", "--ignore-eos", NULL };
	char conf[320], text[160];
	const char *hargs[] = { "--config", conf, "--listen", "127.0.0.1:0", NULL };
	struct httpc c[4];
	struct httpc_resp r;
	struct kvpd d;
	struct httpd h;

	/*
	 * one backend slot (1 connection x 1 request): requests past it wait for the slot
	 * and are all served, in order, rather than refused; with backend_queue = 0 the
	 * second of two at once is a 429 at once
	 */
	snprintf(conf, sizeof(conf), "%s/queue.conf", f->d.dir);
	snprintf(text, sizeof(text),
		 "[http]\nbackend_conns = 1\nbackend_reqs_per_conn = 1\nbackend_queue = 8\n");
	write_file(conf, text);
	assert_int_equal(kvpd_init(&d), 0);
	assert_int_equal(kvpd_start(&d, 60, dargs), 0);
	assert_int_equal(httpd_start(&h, d.dir, d.sock, hargs, 30), 0);
	for (int i = 0; i < 4; i++)
		send_long(&c[i], h.port, 200, false);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(httpc_read(&c[i], &r, NULL, NULL), 0);
		assert_int_equal(r.status, 200);
		assert_int_equal((int)body_num(&r, "usage.completion_tokens", -1), 200);
		httpc_resp_free(&r);
		httpc_close(&c[i]);
	}
	httpd_stop(&h);
	snprintf(text, sizeof(text),
		 "[http]\nbackend_conns = 1\nbackend_reqs_per_conn = 1\nbackend_queue = 0\n");
	write_file(conf, text);
	assert_int_equal(httpd_start(&h, d.dir, d.sock, hargs, 30), 0);
	send_long(&c[0], h.port, 600, false);
	wait_health(h.port, "in_flight", 1);
	send_long(&c[1], h.port, 1, false);
	assert_int_equal(httpc_read(&c[1], &r, NULL, NULL), 0);
	assert_int_equal(r.status, 429);
	httpc_resp_free(&r);
	assert_int_equal(httpc_read(&c[0], &r, NULL, NULL), 0);
	assert_int_equal(r.status, 200);
	httpc_resp_free(&r);
	httpc_close(&c[0]);
	httpc_close(&c[1]);
	stop_pair(&d, &h);
}

/* Poll kvpoold's status until @path is @want (10 s at most). */
static bool status_reaches(struct kvpd *d, const char *path, double want)
{
	double t_end = kvp_test_now_s() + 10;

	do {
		struct jsonq *s = kvpd_status(d);
		double v = s ? jsonq_num(s, path, -1) : -1;

		jsonq_free(s);
		if (v == want)
			return true;
		usleep(50000);
	} while (kvp_test_now_s() < t_end);
	return false;
}

static void test_priority_reaches_kvpoold(void **state)
{
	struct fixture *f = *state;
	const char *extra[] = { "--ignore-eos", "--max-running", "1", NULL };
	const char *body = "{\"prompt\":\"p\",\"max_tokens\":%d,\"priority\":%d}";
	struct httpc busy, hi, lo;
	struct httpc_resp r;
	struct kvpd d;
	struct httpd h;
	char b[128];

	/* one request at a time: a long one runs, the next ones wait for admission, and
	 * kvpoold counts the waiting by priority class.  vLLM's field: lower is served
	 * first, so priority -5 waits as kvpoold's high class (+5), 5 as its low one (-5);
	 * the running one has -10 (kvpoold's 10), so neither preempts it */
	start_pair(f, &d, &h, extra);
	snprintf(b, sizeof(b), body, 4000, -10); /* above the others: never preempted */
	assert_int_equal(httpc_open(&busy, h.port, 60), 0);
	assert_int_equal(httpc_send_request(&busy, "POST", "/v1/completions", NULL, b, strlen(b)),
			 0);
	assert_true(status_reaches(&d, "scheduler.running", 1));
	snprintf(b, sizeof(b), body, 1, -5);
	assert_int_equal(httpc_open(&hi, h.port, 60), 0);
	assert_int_equal(httpc_send_request(&hi, "POST", "/v1/completions", NULL, b, strlen(b)), 0);
	assert_true(status_reaches(&d, "scheduler.queued_high", 1));
	snprintf(b, sizeof(b), body, 1, 5);
	assert_int_equal(httpc_open(&lo, h.port, 60), 0);
	assert_int_equal(httpc_send_request(&lo, "POST", "/v1/completions", NULL, b, strlen(b)), 0);
	assert_true(status_reaches(&d, "scheduler.queued_low", 1));
	/* the long one goes (its client hangs up): both waiting ones are then served */
	httpc_close(&busy);
	assert_int_equal(httpc_read(&hi, &r, NULL, NULL), 0);
	assert_int_equal(r.status, 200);
	httpc_resp_free(&r);
	assert_int_equal(httpc_read(&lo, &r, NULL, NULL), 0);
	assert_int_equal(r.status, 200);
	httpc_resp_free(&r);
	httpc_close(&hi);
	httpc_close(&lo);
	stop_pair(&d, &h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sdk_openai),
		cmocka_unit_test(test_sdk_anthropic),
		cmocka_unit_test(test_loopback_only_without_keys),
		cmocka_unit_test(test_bad_command_lines),
		cmocka_unit_test(test_hangup_cancels_plain_request),
		cmocka_unit_test(test_sigterm_drains),
		cmocka_unit_test(test_kvpoold_restart),
		cmocka_unit_test(test_end_of_generation),
		cmocka_unit_test(test_model_context),
		cmocka_unit_test(test_text_limit_in_tokens),
		cmocka_unit_test(test_backend_queue),
		cmocka_unit_test(test_priority_reaches_kvpoold),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
