/* SPDX-License-Identifier: MIT */
/*
 * test_http_robust.c - kvpool-http against malformed and hostile HTTP over raw sockets:
 * bad request lines, huge headers, slow senders (slowloris) and idle connections, more
 * connections than allowed, bodies over the limit (sent, chunked, announced with
 * Expect: 100-continue, endless), pipelined requests, a stream reader that never reads.
 * Each case gets a 4xx (or the connection closed), never a crash; the server keeps
 * answering /health; its resident memory stays within a bound; what it cancels reaches
 * kvpoold.
 */
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/integration/httpc.h"
#include "tests/integration/httpd.h"
#include "tests/integration/jsonq.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

#define MAX_CONNS 32
#define MAX_BODY (64 << 10)
#define RSS_SLACK_KIB (24 << 10) /* growth allowed over a test: a bounded amount */

struct fixture {
	struct kvpd d; /* first: kvpd_teardown() frees the fixture through it */
	struct httpd h;
	char conf[320];
	char unix_sock[320]; /* a unix: listen address of the same server */
	char unix_arg[330];
	long rss0;
};
static_assert(offsetof(struct fixture, d) == 0, "kvpd_teardown");

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	const char *dargs[] = { "--ignore-eos", "--pool-size", "64M", NULL };
	const char *args[] = { "--config", f ? f->conf : "",	 "--listen", "127.0.0.1:0",
			       "--listen", f ? f->unix_arg : "", NULL };

	if (!f || kvpd_setup(&f->d, "tinyq", dargs) < 0) {
		free(f);
		return -1;
	}
	snprintf(f->conf, sizeof(f->conf), "%s/http.conf", f->d.dir);
	snprintf(f->unix_sock, sizeof(f->unix_sock), "%s/http.sock", f->d.dir);
	snprintf(f->unix_arg, sizeof(f->unix_arg), "unix:%s", f->unix_sock);
	if (httpd_start_conf(&f->h, f->d.dir, f->d.sock, f->conf, args,
			     "[http]\nmax_header_bytes = 4K\nmax_conns = %d\nidle_timeout_s = 2\n"
			     "max_body_bytes = %d\nstream_buffer_bytes = 4K\nthreads = 2\n",
			     MAX_CONNS, MAX_BODY) < 0) {
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
	/* a clean stop after everything the tests did (under ASan: no leak either) */
	int r = httpd_stop_clean(&f->h);
	int t = kvpd_teardown(state);

	return r ? -1 : t;
}

/* Before each test: the resident memory to compare against. */
static int before(void **state)
{
	struct fixture *f = *state;

	f->rss0 = httpd_rss_kib(&f->h);
	return f->rss0 > 0 ? 0 : -1;
}

/* The server still answers, and its memory grew by less than the bound. */
static void assert_healthy(struct fixture *f)
{
	struct httpc_resp r;
	long rss;

	assert_true(f->h.pid > 0 && waitpid(f->h.pid, NULL, WNOHANG) == 0);
	assert_int_equal(httpc_request(f->h.port, "GET", "/health", NULL, NULL, &r), 0);
	assert_int_equal(r.status, 200);
	httpc_resp_free(&r);
	rss = httpd_rss_kib(&f->h);
	if (rss - f->rss0 > RSS_SLACK_KIB)
		fail_msg("resident memory grew from %ld to %ld KiB", f->rss0, rss);
}

/*
 * Send @n raw bytes on a fresh connection, then read one response.
 * Return: its status, or 0 when the server closed without one.
 */
static int exchange(struct fixture *f, const void *p, size_t n, double timeout_s)
{
	struct httpc c;
	struct httpc_resp r;
	int status = 0;

	assert_int_equal(httpc_open(&c, f->h.port, timeout_s), 0);
	httpc_send(&c, p, n); /* may fail: the server may close before reading it all */
	if (httpc_read(&c, &r, NULL, NULL) == 0)
		status = r.status;
	httpc_resp_free(&r);
	httpc_close(&c);
	return status;
}

/* A refusal: the connection closed, or a 4xx (or 501/505: not implemented/version). */
static void assert_refused(int status, const char *what)
{
	if (status && (status < 400 || status >= 500) && status != 501 && status != 505)
		fail_msg("%s: answered %d", what, status);
}

static void test_bad_request_lines(void **state)
{
	struct fixture *f = *state;
	static const char *const cases[] = {
		"GARBAGE\r\n\r\n",
		"GET\r\n\r\n",
		"GET / HTTP/9.9\r\nHost: a\r\n\r\n",
		" GET /health HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /health HTTP/1.1\r\nHost: a\r\nNo colon in this line\r\n\r\n",
		"GET /health HTTP/1.1\rHost: a\r\n\r\n",
		"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: -5\r\n\r\n",
		"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: "
		"99999999999999999999999999\r\n\r\n",
		"POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
		"zz\r\nxx\r\n",
		"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
		"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 9\r\n\r\n{\"prompt\"",
		"DELETE /v1/completions HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /../../etc/passwd HTTP/1.1\r\nHost: a\r\n\r\n",
	};
	char junk[512], *uri;
	size_t n;

	/* every malformed request is refused (4xx or closed) and the server lives on */
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_refused(exchange(f, cases[i], strlen(cases[i]), 5), cases[i]);
	srand(7);
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (char)rand();
	memcpy(junk + sizeof(junk) - 4, "\r\n\r\n", 4);
	assert_refused(exchange(f, junk, sizeof(junk), 5), "binary junk");
	/* a 100 KB request target */
	n = 100000;
	uri = malloc(n + 64);
	assert_non_null(uri);
	memcpy(uri, "GET /", 5);
	memset(uri + 5, 'a', n);
	strcpy(uri + 5 + n, " HTTP/1.1\r\nHost: a\r\n\r\n");
	assert_refused(exchange(f, uri, strlen(uri), 5), "a 100 KB URI");
	free(uri);
	assert_healthy(f);
}

static void test_huge_headers(void **state)
{
	struct fixture *f = *state;
	size_t n = 64 << 10;
	char *req = malloc(n + 256);
	size_t len;
	int status;

	/* headers beyond max_header_bytes: 431 (or a closed connection) */
	assert_non_null(req);
	len = (size_t)sprintf(req, "GET /health HTTP/1.1\r\nHost: a\r\nX-Big: ");
	memset(req + len, 'b', n);
	strcpy(req + len + n, "\r\n\r\n");
	status = exchange(f, req, strlen(req), 5);
	assert_refused(status, "64 KB header");
	/* many small headers adding up to too much */
	strcpy(req, "GET /health HTTP/1.1\r\nHost: a\r\n");
	for (int i = 0; i < 2000; i++)
		sprintf(req + strlen(req), "X-H%d: v\r\n", i);
	strcat(req, "\r\n");
	assert_refused(exchange(f, req, strlen(req), 5), "2000 headers");
	/* within the limit: answered */
	len = (size_t)sprintf(req, "GET /health HTTP/1.1\r\nHost: a\r\nX-Ok: ");
	memset(req + len, 'o', 2000);
	strcpy(req + len + 2000, "\r\n\r\n");
	assert_int_equal(exchange(f, req, strlen(req), 5), 200);
	free(req);
	assert_healthy(f);
}

/* Whether the server closes @c within @timeout_s (read gives EOF or a reset). */
static bool closed_by_server(struct httpc *c, double timeout_s)
{
	double end = kvp_test_now_s() + timeout_s;
	char b[256];

	while (kvp_test_now_s() < end) {
		ssize_t n = recv(c->fd, b, sizeof(b), 0);

		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
			return true;
	}
	return false;
}

static void test_slow_senders(void **state)
{
	struct fixture *f = *state;
	static const char req[] = "GET /health HTTP/1.1\r\nHost: a\r\n\r\n";
	struct httpc slow[MAX_CONNS - 4], c;
	struct httpc_resp r;
	char part[2100];

	/* slowloris: connections that send part of their headers and stall hold bounded
	 * memory, do not keep others out, and are closed after idle_timeout_s (2 s) */
	snprintf(part, sizeof(part), "GET /health HTTP/1.1\r\nHost: a\r\nX-Slow: %02000d", 0);
	for (size_t i = 0; i < sizeof(slow) / sizeof(slow[0]); i++) {
		assert_int_equal(httpc_open(&slow[i], f->h.port, 0.2), 0);
		assert_int_equal(httpc_send(&slow[i], part, strlen(part)), 0);
	}
	usleep(200000);
	assert_healthy(f);
	for (size_t i = 0; i < sizeof(slow) / sizeof(slow[0]); i++) {
		assert_true(closed_by_server(&slow[i], 6));
		httpc_close(&slow[i]);
	}
	/* a sender slow but within the idle timeout is served */
	assert_int_equal(httpc_open(&c, f->h.port, 5), 0);
	for (size_t i = 0; i < strlen(req); i++) {
		assert_int_equal(httpc_send(&c, req + i, 1), 0);
		usleep(40000);
	}
	assert_int_equal(httpc_read(&c, &r, NULL, NULL), 0);
	assert_int_equal(r.status, 200);
	httpc_resp_free(&r);
	httpc_close(&c);
	/* one that stalls in the middle of its body is closed too */
	assert_int_equal(httpc_open(&c, f->h.port, 0.2), 0);
	static const char body_start[] =
		"POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{\"pro";
	assert_int_equal(httpc_send(&c, body_start, strlen(body_start)), 0);
	assert_true(closed_by_server(&c, 6));
	httpc_close(&c);
	assert_healthy(f);
}

static void test_connection_limit(void **state)
{
	struct fixture *f = *state;
	enum { N = MAX_CONNS + 16 };
	struct httpc c[N];
	int kept = 0;

	/* beyond max_conns, connections are closed at once; the rest stay; all is well
	 * once they are gone */
	for (int i = 0; i < N; i++)
		assert_int_equal(httpc_open(&c[i], f->h.port, 0.05), 0);
	usleep(300000);
	for (int i = 0; i < N; i++)
		if (!closed_by_server(&c[i], 0.1))
			kept++;
	assert_true(kept >= 1);
	assert_true(kept <= MAX_CONNS);
	for (int i = 0; i < N; i++)
		httpc_close(&c[i]);
	usleep(100000);
	assert_healthy(f);
}

static void test_body_limits(void **state)
{
	struct fixture *f = *state;
	size_t n = 100 << 10;
	char *big = malloc(n + 1);
	char head[256];
	struct httpc c;
	struct httpc_resp r;

	assert_non_null(big);
	memset(big, ' ', n);
	big[n] = '\0';
	/* a body over max_body_bytes, sent whole: 413 in the OpenAI error shape */
	assert_int_equal(httpc_open(&c, f->h.port, 10), 0);
	assert_int_equal(httpc_send_request(&c, "POST", "/v1/completions", NULL, big, n), 0);
	assert_int_equal(httpc_read(&c, &r, NULL, NULL), 0);
	assert_int_equal(r.status, 413);
	assert_non_null(strstr(r.body, "\"code\":\"request_too_large\""));
	httpc_resp_free(&r);
	httpc_close(&c);
	/* chunked */
	assert_int_equal(httpc_open(&c, f->h.port, 10), 0);
	snprintf(head, sizeof(head),
		 "POST /v1/messages HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
	assert_int_equal(httpc_send(&c, head, strlen(head)), 0);
	for (int i = 0; i < 10; i++) {
		snprintf(head, sizeof(head), "%zx\r\n", n / 10);
		httpc_send(&c, head, strlen(head));
		httpc_send(&c, big, n / 10);
		httpc_send(&c, "\r\n", 2);
	}
	httpc_send(&c, "0\r\n\r\n", 5);
	assert_int_equal(httpc_read(&c, &r, NULL, NULL), 0);
	assert_int_equal(r.status, 413);
	assert_non_null(strstr(r.body, "\"type\":\"request_too_large\"")); /* Anthropic's */
	httpc_resp_free(&r);
	httpc_close(&c);
	/* announced with Expect: 100-continue: refused before the body is sent */
	assert_int_equal(httpc_open(&c, f->h.port, 5), 0);
	snprintf(head, sizeof(head),
		 "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: %zu\r\n"
		 "Expect: 100-continue\r\n\r\n",
		 n);
	/* the body is never sent: an answer at all is one given before it */
	assert_int_equal(httpc_send(&c, head, strlen(head)), 0);
	assert_int_equal(httpc_read(&c, &r, NULL, NULL), 0);
	assert_int_equal(r.status, 413);
	httpc_resp_free(&r);
	httpc_close(&c);
	/* an endless body: read and dropped up to a bound, then the connection is closed */
	assert_int_equal(httpc_open(&c, f->h.port, 10), 0);
	snprintf(head, sizeof(head),
		 "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: %llu\r\n\r\n",
		 1ull << 40);
	assert_int_equal(httpc_send(&c, head, strlen(head)), 0);
	{
		int r2 = 0;

		for (int i = 0; i < 1000 && !r2; i++) /* up to 100 MB */
			r2 = httpc_send(&c, big, n);
		assert_true(r2 == -EPIPE || r2 == -ECONNRESET);
	}
	httpc_close(&c);
	free(big);
	assert_healthy(f);
}

static void test_pipelined(void **state)
{
	struct fixture *f = *state;
	static const char two[] = "GET /health HTTP/1.1\r\nHost: a\r\n\r\n"
				  "GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n";
	struct httpc c;
	struct httpc_resp r;

	/* two requests in one write: two answers, in order, on the same connection */
	assert_int_equal(httpc_open(&c, f->h.port, 5), 0);
	assert_int_equal(httpc_send(&c, two, strlen(two)), 0);
	assert_int_equal(httpc_read(&c, &r, NULL, NULL), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "\"status\":\"ok\""));
	httpc_resp_free(&r);
	assert_int_equal(httpc_read(&c, &r, NULL, NULL), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "\"object\":\"list\""));
	httpc_resp_free(&r);
	httpc_close(&c);
	assert_healthy(f);
}

static void test_stream_reader_never_reads(void **state)
{
	struct fixture *f = *state;
	static const char body[] =
		"{\"prompt\":\"flood\",\"max_tokens\":4000,\"temperature\":0,\"stream\":true}";
	struct jsonq *s0 = kvpd_status(&f->d), *s1 = NULL;
	struct httpc c;
	struct httpc_resp r;
	int small = 4096;
	double end;

	/* a stream client that never reads: its unsent output is bounded
	 * (stream_buffer_bytes), then it is cut off and the request cancelled in kvpoold.
	 * Over the unix: listen address, whose kernel buffers are fixed (a loopback TCP
	 * connection would take megabytes before the server felt any back-pressure). */
	assert_non_null(s0);
	assert_int_equal(httpc_open_unix(&c, f->unix_sock, 30), 0);
	setsockopt(c.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	assert_int_equal(httpc_send_request(&c, "POST", "/v1/completions", NULL, body,
					    strlen(body)),
			 0);
	end = kvp_test_now_s() + 20;
	while (kvp_test_now_s() < end) {
		jsonq_free(s1);
		s1 = kvpd_status(&f->d);
		if (s1 && jsonq_delta(s1, s0, "scheduler.requests_cancelled") >= 1)
			break;
		usleep(50000);
	}
	assert_non_null(s1);
	assert_true(jsonq_delta(s1, s0, "scheduler.requests_cancelled") >= 1);
	assert_true(jsonq_delta(s1, s0, "usage.generated_tokens") < 4000);
	httpc_close(&c);
	assert_int_equal(httpc_request(f->h.port, "GET", "/metrics", NULL, NULL, &r), 0);
	assert_non_null(strstr(r.body, "kvpool_http_stream_overflows_total 1"));
	httpc_resp_free(&r);
	jsonq_free(s0);
	jsonq_free(s1);
	assert_healthy(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_bad_request_lines, before),
		cmocka_unit_test_setup(test_huge_headers, before),
		cmocka_unit_test_setup(test_slow_senders, before),
		cmocka_unit_test_setup(test_connection_limit, before),
		cmocka_unit_test_setup(test_body_limits, before),
		cmocka_unit_test_setup(test_pipelined, before),
		cmocka_unit_test_setup(test_stream_reader_never_reads, before),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
