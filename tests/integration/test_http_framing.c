/* SPDX-License-Identifier: MIT */
/*
 * test_http_framing.c - request framing at kvpool-http over raw sockets (RFC 9112 §6):
 * Content-Length beside Transfer-Encoding (the smuggling shape), duplicate and malformed
 * Content-Length, unknown and stacked transfer codings, NUL and control bytes in header
 * values, chunk-size lines and extensions too long or malformed.  Each gets exactly one
 * response with its status and the connection closed (read until EOF, status lines
 * counted), both as a connection's first request and behind a good one; a request
 * smuggled behind the body is never answered.  Chunked bodies in every sound form, and
 * pipelined keep-alive requests, are served through the relay (gate.h).  An absolute-form
 * target is served as its path.  An answer given before a body that then turns out
 * malformed (Expect: 100-continue) is the request's only one.
 */
#include <assert.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/integration/httpd.h"
#include "tests/integration/kvpd.h"
#include "tests/integration/rawc.h"

struct fixture {
	struct kvpd d; /* first: kvpd_teardown() frees the fixture through it */
	struct httpd h;
	char conf[320];
};
static_assert(offsetof(struct fixture, d) == 0, "kvpd_teardown");

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	const char *dargs[] = { "--ignore-eos", "--pool-size", "64M", NULL };
	const char *args[] = { "--config", f ? f->conf : "", "--listen", "127.0.0.1:0", NULL };

	if (!f || kvpd_setup(&f->d, "tinyq", dargs) < 0) {
		free(f);
		return -1;
	}
	snprintf(f->conf, sizeof(f->conf), "%s/http.conf", f->d.dir);
	if (httpd_start_conf(&f->h, f->d.dir, f->d.sock, f->conf, args,
			     "[http]\nmax_conns = 64\nidle_timeout_s = 30\nthreads = 2\n") < 0) {
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

#define GOOD "GET /health HTTP/1.1\r\nHost: a\r\n\r\n"
#define POST_HEAD "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
#define BODY "{\"prompt\":[1,2,3],\"max_tokens\":1}"

struct framing_case {
	const char *what;
	const char *req;
	size_t len; /* 0: strlen(req) */
	int status, status_alt;
};

/*
 * Send @req (after @prefix, a good request, when non-NULL) on a fresh connection and
 * read until the server closes.  Return: the responses seen; @text keeps what came.
 */
static int send_and_count(struct fixture *f, const char *prefix, const char *req, size_t len,
			  char *text, size_t cap, bool *closed)
{
	char *buf = malloc((prefix ? strlen(prefix) : 0) + len);
	size_t n = 0;
	int fd = rawc_connect(f->h.port, NULL, false);

	assert_non_null(buf);
	assert_true(fd >= 0);
	if (prefix) {
		memcpy(buf, prefix, strlen(prefix));
		n = strlen(prefix);
	}
	memcpy(buf + n, req, len);
	n += len;
	rawc_send(fd, buf, n); /* may fail half-way: the server may close first */
	free(buf);
	/* generous: a refusal comes at once, the 60 s hang this guards against does not */
	rawc_read_all(fd, text, cap, 15, closed);
	close(fd);
	return rawc_count_status(text);
}

static void check_case(struct fixture *f, const struct framing_case *c, bool behind_good)
{
	static char text[65536];
	size_t len = c->len ? c->len : strlen(c->req);
	bool closed;
	int n = send_and_count(f, behind_good ? GOOD : NULL, c->req, len, text, sizeof(text),
			       &closed);
	const char *second = text;
	int st;

	if (behind_good) {
		/* the good request's answer first, then the refusal */
		assert_int_equal(rawc_first_status(text), 200);
		second = strstr(text + 1, "HTTP/1.");
		second = second ? second : "";
	}
	if (n != (behind_good ? 2 : 1) || !closed)
		fail_msg("%s%s: %d responses, %s:\n%.600s", c->what, behind_good ? " (behind)" : "",
			 n, closed ? "closed" : "left open", text);
	st = rawc_first_status(second);
	if (st != c->status && st != c->status_alt)
		fail_msg("%s%s: answered %d, not %d:\n%.600s", c->what,
			 behind_good ? " (behind)" : "", st, c->status, text);
	if (!strcasestr(second, "\r\nConnection: close\r\n"))
		fail_msg("%s: no Connection: close:\n%.600s", c->what, second);
}

/* Every shape that frames a body two ways, or in a way nobody can read, is refused. */
static const struct framing_case cases[] = {
	{ "CL + TE, a request smuggled behind",
	  POST_HEAD "Content-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" GOOD, 0,
	  400, 400 },
	{ "TE + CL", POST_HEAD "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
	  0, 400, 400 },
	{ "two different Content-Lengths",
	  POST_HEAD "Content-Length: 2\r\nContent-Length: 33\r\n\r\n" BODY, 0, 400, 400 },
	{ "two equal Content-Lengths",
	  POST_HEAD "Content-Length: 33\r\nContent-Length: 33\r\n\r\n" BODY, 0, 400, 400 },
	{ "Content-Length -1", POST_HEAD "Content-Length: -1\r\n\r\n" BODY, 0, 400, 400 },
	{ "Content-Length 0x24", POST_HEAD "Content-Length: 0x24\r\n\r\n" BODY, 0, 400, 400 },
	{ "Content-Length +33", POST_HEAD "Content-Length: +33\r\n\r\n" BODY, 0, 400, 400 },
	{ "Content-Length of 20 digits",
	  POST_HEAD "Content-Length: 12345678901234567890\r\n\r\n" BODY, 0, 400, 413 },
	{ "Content-Length list", POST_HEAD "Content-Length: 33, 34\r\n\r\n" BODY, 0, 400, 400 },
	{ "Transfer-Encoding xchunked",
	  POST_HEAD "Transfer-Encoding: xchunked\r\n\r\n22\r\n" BODY "\r\n0\r\n\r\n", 0, 501, 400 },
	{ "Transfer-Encoding chunked, identity",
	  POST_HEAD "Transfer-Encoding: chunked, identity\r\n\r\n22\r\n" BODY "\r\n0\r\n\r\n", 0,
	  501, 400 },
	{ "Transfer-Encoding gzip, chunked",
	  POST_HEAD "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 0, 501, 400 },
	{ "two Transfer-Encoding headers",
	  POST_HEAD "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 0,
	  400, 501 },
	{ "a control byte in a header value",
	  "GET /health HTTP/1.1\r\nHost: a\r\nX-A: a\001b\r\n\r\n", 0, 400, 400 },
	{ "DEL in a header value", "GET /health HTTP/1.1\r\nHost: a\r\nX-A: a\177b\r\n\r\n", 0, 400,
	  400 },
};

static void test_refused_first(void **state)
{
	struct fixture *f = *state;

	/* as a connection's first request: one response, its status, closed */
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_case(f, &cases[i], false);
}

static void test_refused_behind_good(void **state)
{
	struct fixture *f = *state;

	/* behind a good request on the same connection: its answer, then one refusal */
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_case(f, &cases[i], true);
}

static void test_nul_in_header(void **state)
{
	struct fixture *f = *state;
	static const char req[] = "GET /health HTTP/1.1\r\nHost: a\r\nX-A: a\0b\r\n\r\n";
	const struct framing_case c = { "a NUL byte in a header value", req, sizeof(req) - 1, 400,
					400 };

	/* a NUL in a value is refused, not cut off there: first and behind a good one */
	check_case(f, &c, false);
	check_case(f, &c, true);
}

static void test_smuggled_never_answered(void **state)
{
	struct fixture *f = *state;
	static char text[65536];
	static const char req[] = POST_HEAD
		"Content-Length: 38\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
		"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n";
	bool closed;

	/* the request hidden behind a CL + TE body never gets an answer, first or behind */
	assert_int_equal(send_and_count(f, NULL, req, strlen(req), text, sizeof(text), &closed), 1);
	assert_null(strstr(text, "\"object\":\"list\""));
	assert_int_equal(send_and_count(f, GOOD, req, strlen(req), text, sizeof(text), &closed), 2);
	assert_null(strstr(text, "\"object\":\"list\""));
}

/* A chunked POST whose one chunk-size line is @line (then @tail): a buffer to free. */
static char *chunked(const char *line, size_t line_len, const char *tail, size_t *len)
{
	size_t h = strlen(POST_HEAD "Transfer-Encoding: chunked\r\n\r\n"), t = strlen(tail);
	char *req = malloc(h + line_len + t);

	assert_non_null(req);
	memcpy(req, POST_HEAD "Transfer-Encoding: chunked\r\n\r\n", h);
	memcpy(req + h, line, line_len);
	memcpy(req + h + line_len, tail, t);
	*len = h + line_len + t;
	return req;
}

static void test_chunk_lines(void **state)
{
	struct fixture *f = *state;
	size_t big = 100 * 1024, ext = 1024 * 1024, len;
	char *line = malloc(ext + 8);
	struct framing_case c = { .status = 413, .status_alt = 400 };

	/*
	 * A chunk-size line or a chunk extension longer than the relay takes (relay.h): one
	 * 413 (never the 500 libmicrohttpd gave when it met them itself), the connection
	 * closed, the request smuggled behind never answered; first and behind a good one.
	 */
	assert_non_null(line);
	memset(line, '0', big - 1);
	line[big - 1] = '1';
	c.what = "a 100 kB chunk-size line";
	c.req = chunked(line, big, "\r\nx\r\n0\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n",
			&len);
	c.len = len;
	check_case(f, &c, false);
	check_case(f, &c, true);
	free((char *)c.req);
	memcpy(line, "1;a=", 4);
	memset(line + 4, 'b', ext);
	c.what = "a 1 MB chunk extension";
	c.req = chunked(line, ext + 4,
			"\r\nx\r\n0\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n", &len);
	c.len = len;
	check_case(f, &c, false);
	check_case(f, &c, true);
	free((char *)c.req);
	/* 17 significant hex digits: a size beyond any body (leading zeros are no digits) */
	c.what = "a 17-digit chunk size";
	c.req = chunked("000011111111111111111", 21, "\r\nx\r\n0\r\n\r\n", &len);
	c.len = len;
	check_case(f, &c, false);
	check_case(f, &c, true);
	free((char *)c.req);
	free(line);
}

static void test_chunks_malformed(void **state)
{
	struct fixture *f = *state;
	static const struct {
		const char *what, *body;
	} bad[] = {
		{ "a chunk size not in hex", "zz\r\n" BODY "\r\n0\r\n\r\n" },
		{ "a chunk size followed by junk", "22 x\r\n" BODY "\r\n0\r\n\r\n" },
		{ "a control byte in a chunk extension", "21;a=\001\r\n" BODY "\r\n0\r\n\r\n" },
		{ "a chunk longer than its size", "20\r\n" BODY "\r\n0\r\n\r\n" },
		{ "a malformed trailer field", "21\r\n" BODY "\r\n0\r\nno colon\r\n\r\n" },
	};

	/* a chunked body framed wrong: one 400, closed, first and behind a good one */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		size_t len;
		struct framing_case c = { .what = bad[i].what, .status = 400, .status_alt = 400 };

		c.req = chunked(bad[i].body, strlen(bad[i].body), GOOD, &len);
		c.len = len;
		check_case(f, &c, false);
		check_case(f, &c, true);
		free((char *)c.req);
	}
}

static void test_chunked_served(void **state)
{
	struct fixture *f = *state;
	static char text[65536];
	/* leading zeros, extensions, bare LF line ends, a trailer field: all served, as the
	 * same body; then a second request on the same connection */
	static const char req[] = POST_HEAD
		"Transfer-Encoding: chunked\r\n\r\n"
		"0000a;x=1;y=\"q\"\r\n{\"prompt\":\r\n"
		"17\n[1,2,3],\"max_tokens\":1}\n"
		"0;z\r\nX-Trailer: t\r\n\r\n"
		"GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
	bool closed;

	assert_int_equal(send_and_count(f, NULL, req, strlen(req), text, sizeof(text), &closed), 2);
	assert_int_equal(rawc_first_status(text), 200);
	assert_non_null(strstr(text, "\"text_completion\""));
	assert_non_null(strstr(text, "\"status\":\"ok\""));
	assert_true(closed);
}

static void test_keepalive_pipelined(void **state)
{
	struct fixture *f = *state;
	static char text[65536];
	char req[4096];
	size_t n = 0;
	bool closed;
	int count = 0;
	const char *p = text;

	/* keep-alive goes on through the relay: ten requests in one write (GETs and
	 * POSTs with a body), ten answers in order, the last one asked to close */
	for (int i = 0; i < 9; i++)
		n += (size_t)snprintf(req + n, sizeof(req) - n, "%s",
				      i % 2 ? GOOD : POST_HEAD "Content-Length: 33\r\n\r\n" BODY);
	n += (size_t)snprintf(req + n, sizeof(req) - n,
			      "GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
	assert_int_equal(send_and_count(f, NULL, req, n, text, sizeof(text), &closed), 10);
	assert_true(closed);
	for (int i = 0; i < 10; i++) {
		const char *next = strstr(p + 1, "HTTP/1.1 ");

		assert_int_equal(rawc_first_status(p), 200);
		/* the POSTs' answers are completions, the GETs' health */
		assert_non_null(
			strstr(p, i % 2 || i == 9 ? "\"status\":\"ok\"" : "\"text_completion\""));
		count++;
		if (!next)
			break;
		p = next;
	}
	assert_int_equal(count, 10);
}

static void test_absolute_form(void **state)
{
	struct fixture *f = *state;
	static char text[65536];
	static const char get[] = "GET http://a:8080/health HTTP/1.1\r\nHost: a:8080\r\n"
				  "Connection: close\r\n\r\n";
	static const char post[] = "POST http://a/v1/completions HTTP/1.1\r\nHost: a\r\n"
				   "Content-Type: application/json\r\nContent-Length: 33\r\n"
				   "Connection: close\r\n\r\n" BODY;
	bool closed;

	/* RFC 9112 §3.2.2: a server accepts the absolute form; it is served as its path */
	assert_int_equal(send_and_count(f, NULL, get, strlen(get), text, 4096, &closed), 1);
	assert_int_equal(rawc_first_status(text), 200);
	assert_non_null(strstr(text, "\"status\":\"ok\""));
	assert_int_equal(send_and_count(f, NULL, post, strlen(post), text, sizeof(text), &closed),
			 1);
	assert_int_equal(rawc_first_status(text), 200);
	assert_non_null(strstr(text, "\"text_completion\""));
}

static void test_half_request_then_eof(void **state)
{
	struct fixture *f = *state;
	static const char req[] = GOOD "GET /heal";
	static char text[4096];
	bool closed;
	int fd = rawc_connect(f->h.port, NULL, false);

	/* a client that sends half a head and shuts its side: the relay passes the EOF on
	 * (half a head never ends), so the connection closes at once, not at a timeout */
	assert_true(fd >= 0);
	assert_int_equal(rawc_send(fd, req, strlen(req)), 0);
	shutdown(fd, SHUT_WR);
	rawc_read_all(fd, text, sizeof(text), 10, &closed);
	close(fd);
	assert_true(closed);
	assert_true(rawc_count_status(text) <= 1);
}

static void test_refusal_after_slow_answers(void **state)
{
	struct fixture *f = *state;
	static char text[262144];
	static const char slow[] = POST_HEAD "Content-Length: 34\r\n\r\n"
					     "{\"prompt\":[1,2,3],\"max_tokens\":48}";
	static const char stream[] = POST_HEAD
		"Content-Length: 48\r\n\r\n"
		"{\"prompt\":[1,2,3],\"max_tokens\":24,\"stream\":true}";
	static const char bad[] = POST_HEAD "Content-Length: +33\r\n\r\n" BODY GOOD;
	char req[1024];
	const char *refusal, *done;
	bool closed;
	int n;

	/* a generation, a streamed one, then a refused request, in one write: both answers
	 * whole and first, then the one refusal (it waits for them), nothing after it */
	n = snprintf(req, sizeof(req), "%s%s%s", slow, stream, bad);
	assert_int_equal(send_and_count(f, NULL, req, (size_t)n, text, sizeof(text), &closed), 3);
	assert_true(closed);
	assert_int_equal(rawc_first_status(text), 200);
	assert_non_null(strstr(text, "\"completion_tokens\":48"));
	done = strstr(text, "data: [DONE]");
	refusal = strstr(text, "HTTP/1.1 400 ");
	assert_non_null(done);
	assert_non_null(refusal);
	assert_true(done < refusal);
	assert_non_null(strstr(refusal, "\r\nConnection: close\r\n"));
	assert_null(strstr(refusal, "\"status\":\"ok\""));
}

/*
 * Expect: 100-continue to a route that does not exist: the handler answers 404 before
 * the body, then the chunked body turns out malformed.  Exactly one answer either way:
 * the 404 when it was given before the relay refused (the relay waits for its end, even
 * while its bytes are still being written), else the relay's 400; closed.  Sent in one
 * write (the relay usually refuses first) and with the body sent only once the 404's
 * head was read (the handler first, its end racing the refusal).
 */
static void test_early_answer_then_bad_chunk(void **state)
{
	struct fixture *f = *state;
	static char text[65536];
	static const char head[] = "POST /nowhere HTTP/1.1\r\nHost: a\r\n"
				   "Expect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n";
	static const char bad[] = "zz\r\n" BODY "\r\n0\r\n\r\n" GOOD;

	for (int i = 0; i < 20; i++) {
		bool late = i & 1, closed;
		int fd = rawc_connect(f->h.port, NULL, false);
		size_t n = 0;
		int st;

		assert_true(fd >= 0);
		if (late) {
			assert_int_equal(rawc_send(fd, head, strlen(head)), 0);
			while (!strstr(text, "\r\n\r\n")) {
				ssize_t k = recv(fd, text + n, sizeof(text) - 1 - n, 0);

				assert_true(k > 0);
				n += (size_t)k;
				text[n] = 0;
			}
			rawc_send(fd, bad, strlen(bad)); /* may fail: the server may close first */
		} else {
			char both[sizeof(head) + sizeof(bad)];

			snprintf(both, sizeof(both), "%s%s", head, bad);
			rawc_send(fd, both, strlen(both));
		}
		rawc_read_all(fd, text + n, sizeof(text) - n, 15, &closed);
		close(fd);
		st = rawc_first_status(text);
		/* the 404 was read before the body went: it is the one */
		if (rawc_count_status(text) != 1 || !closed || (st != 404 && (late || st != 400)))
			fail_msg("round %d (%s): %d answers, %s:\n%.800s", i,
				 late ? "body after the answer" : "one write",
				 rawc_count_status(text), closed ? "closed" : "left open", text);
		assert_null(strstr(text, "\"status\":\"ok\""));
		text[0] = 0;
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refused_first),
		cmocka_unit_test(test_refused_behind_good),
		cmocka_unit_test(test_nul_in_header),
		cmocka_unit_test(test_smuggled_never_answered),
		cmocka_unit_test(test_absolute_form),
		cmocka_unit_test(test_chunk_lines),
		cmocka_unit_test(test_chunks_malformed),
		cmocka_unit_test(test_chunked_served),
		cmocka_unit_test(test_keepalive_pipelined),
		cmocka_unit_test(test_half_request_then_eof),
		cmocka_unit_test(test_refusal_after_slow_answers),
		cmocka_unit_test(test_early_answer_then_bad_chunk),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
