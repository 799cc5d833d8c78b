/* SPDX-License-Identifier: MIT */
/*
 * test_http_head.c - ipc/http/head.c: request heads checked raw (the gate's view of a
 * connection's first request) and field by field (the handler's view of later ones).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ipc/http/head.h"

#define H "POST /v1/completions HTTP/1.1\r\nHost: a\r\n"

/* The verdict on @p (@n bytes; 0: strlen) with a 4 KiB limit. */
static int check(const char *p, size_t n, struct kvp_http_head *h)
{
	return kvp_http_head_check(p, n ? n : strlen(p), 4096, h);
}

static void expect_refused(const char *p, size_t n, unsigned int status)
{
	struct kvp_http_head h;
	int rc = check(p, n, &h);

	if (rc != -1 || h.status != status)
		fail_msg("%s: rc %d status %u (%s), not %u", p, rc, h.status, h.why ? h.why : "",
			 status);
	assert_non_null(h.why);
}

static void test_sound_heads(void **state)
{
	static const char *const ok[] = {
		"GET /health HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /health HTTP/1.1\nHost: a\n\n", /* bare LF, as libmicrohttpd takes */
		"\r\nGET /health HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /health HTTP/1.0\r\n\r\n", /* no Host needed */
		H "Content-Length: 33\r\n\r\n",
		H "Content-Length:33 \r\n\r\n",
		H "Transfer-Encoding: chunked\r\n\r\n",
		H "transfer-encoding:  CHUNKED\t\r\n\r\n",
		"POST http://a:8080/v1/chat/completions HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET HTTPS://a HTTP/1.1\r\nHost: a\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: a\r\nX-Tab: a\tb\r\nX-High: caf\xc3\xa9\r\n\r\n",
	};
	struct kvp_http_head h;

	(void)state;
	/* well-formed heads pass; the length is the head's with its blank line */
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		int rc = check(ok[i], 0, &h);

		if (rc != 1)
			fail_msg("%s: rc %d (%u %s)", ok[i], rc, h.status, h.why ? h.why : "");
		assert_int_equal(h.len, strlen(ok[i]));
	}
	/* what follows the head is not looked at */
	assert_int_equal(check(H "Content-Length: 2\r\n\r\n{}GARBAGE\x01", 0, &h), 1);
	assert_int_equal(h.len, strlen(H "Content-Length: 2\r\n\r\n"));
}

static void test_incomplete(void **state)
{
	static const char full[] = H "Content-Length: 33\r\nX-A: b\r\n\r\n";
	struct kvp_http_head h;

	(void)state;
	/* every proper prefix of a sound head needs more bytes */
	for (size_t n = 1; n < strlen(full); n++)
		assert_int_equal(check(full, n, &h), 0);
	assert_int_equal(check(full, 0, &h), 1);
}

static void test_framing_refused(void **state)
{
	(void)state;
	/* the smuggling shape and its variants */
	expect_refused(H "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 0, 400);
	expect_refused(H "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", 0, 400);
	expect_refused(H "Content-Length: 2\r\nContent-Length: 30\r\n\r\n", 0, 400);
	expect_refused(H "Content-Length: 2\r\nContent-Length: 2\r\n\r\n", 0, 400);
	expect_refused(H "Content-Length: 2, 2\r\n\r\n", 0, 400);
	expect_refused(H "Content-Length: -1\r\n\r\n", 0, 400);
	expect_refused(H "Content-Length: 0x24\r\n\r\n", 0, 400);
	expect_refused(H "Content-Length: +33\r\n\r\n", 0, 400);
	expect_refused(H "Content-Length: \r\n\r\n", 0, 400);
	expect_refused(H "Content-Length: 12345678901234567890\r\n\r\n", 0, 413);
	expect_refused(H "Transfer-Encoding: xchunked\r\n\r\n", 0, 501);
	expect_refused(H "Transfer-Encoding: gzip, chunked\r\n\r\n", 0, 501);
	expect_refused(H "Transfer-Encoding: chunked, identity\r\n\r\n", 0, 400);
	expect_refused(H "Transfer-Encoding: chunked, chunked\r\n\r\n", 0, 400);
	expect_refused(H "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 0,
		       400);
	expect_refused(H "Transfer-Encoding: ,\r\n\r\n", 0, 400);
	expect_refused("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 0, 400);
}

static void test_bytes_refused(void **state)
{
	static const char nul[] = "GET / HTTP/1.1\r\nHost: a\r\nX-A: a\0b\r\n\r\n";
	static const char part[] = "GET / HTTP/1.1\r\nHost: a\r\nX-A: a\0";

	(void)state;
	/* NUL, CR alone, other controls, DEL: in a value, a name, the request line */
	expect_refused(nul, sizeof(nul) - 1, 400);
	expect_refused("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\rb\r\n\r\n", 0, 400);
	expect_refused("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\x01\r\n\r\n", 0, 400);
	expect_refused("GET / HTTP/1.1\r\nHost: a\r\nX-A: \x7f\r\n\r\n", 0, 400);
	expect_refused("GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n", 0, 400);
	/* refused as soon as seen, without the rest of the head */
	expect_refused(part, sizeof(part) - 1, 400);
	/* field syntax */
	expect_refused("GET / HTTP/1.1\r\nHost : a\r\n\r\n", 0, 400);
	expect_refused("GET / HTTP/1.1\r\nHost: a\r\nNo colon\r\n\r\n", 0, 400);
	expect_refused("GET / HTTP/1.1\r\nHost: a\r\n: v\r\n\r\n", 0, 400);
	expect_refused("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\r\n b\r\n\r\n", 0, 400);
	expect_refused("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 0, 400);
	expect_refused("GET / HTTP/1.1\r\n\r\n", 0, 400);
}

static void test_request_line(void **state)
{
	(void)state;
	expect_refused("GARBAGE\r\n\r\n", 0, 400);
	expect_refused("GET\r\n\r\n", 0, 400);
	expect_refused("GET /  HTTP/1.1\r\nHost: a\r\n\r\n", 0, 400);
	expect_refused("G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 0, 400);
	expect_refused("GET / HTTP/1.1x\r\nHost: a\r\n\r\n", 0, 400);
	expect_refused("GET / HTTP/2.0\r\nHost: a\r\n\r\n", 0, 505);
	expect_refused("GET a.b:80 HTTP/1.1\r\nHost: a\r\n\r\n", 0, 400);
	expect_refused("GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n", 0, 400);
}

static void test_sizes(void **state)
{
	char *p = malloc(8192);
	struct kvp_http_head h;

	(void)state;
	assert_non_null(p);
	/* a request line over the limit: 414; fields over it: 431; both without the end */
	memset(p, 'a', 8192);
	memcpy(p, "GET /", 5);
	assert_int_equal(kvp_http_head_check(p, 4096, 4096, &h), -1);
	assert_int_equal(h.status, 414);
	snprintf(p, 8192, "GET / HTTP/1.1\r\nHost: a\r\nX-Big: ");
	memset(p + strlen(p), 'b', 8192 - strlen(p));
	assert_int_equal(kvp_http_head_check(p, 4096, 4096, &h), -1);
	assert_int_equal(h.status, 431);
	/* the blank line past the limit counts too */
	snprintf(p, 8192, "GET / HTTP/1.1\r\nHost: a\r\n\r\n");
	assert_int_equal(kvp_http_head_check(p, strlen(p), strlen(p) - 1, &h), -1);
	assert_int_equal(h.status, 431);
	assert_int_equal(kvp_http_head_check(p, strlen(p), strlen(p), &h), 1);
	free(p);
}

static void test_shape(void **state)
{
	struct kvp_http_head h;

	(void)state;
	/* a refusal under /v1/messages takes Anthropic's shape, the absolute form too */
	assert_int_equal(check("POST /v1/messages HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n", 0, &h),
			 -1);
	assert_true(h.anthropic);
	assert_int_equal(check("POST http://a/v1/messages HTTP/1.1\r\nHost: a\r\nX: \x01\r\n\r\n",
			       0, &h),
			 -1);
	assert_true(h.anthropic);
	assert_int_equal(check(H "X: \x01\r\n\r\n", 0, &h), -1);
	assert_false(h.anthropic);
}

static void test_fields_one_by_one(void **state)
{
	struct kvp_http_framing f = KVP_HTTP_FRAMING_INIT;

	(void)state;
	/* the handler's path: the same rules from parsed fields */
	kvp_http_framing_add(&f, "Host", 4, "a", 1);
	kvp_http_framing_add(&f, "Content-Length", 14, "5", 1);
	assert_int_equal(kvp_http_framing_end(&f, false), 0);
	kvp_http_framing_add(&f, "Transfer-Encoding", 17, "chunked", 7);
	assert_int_equal(kvp_http_framing_end(&f, false), 400);
	f = (struct kvp_http_framing)KVP_HTTP_FRAMING_INIT;
	kvp_http_framing_add(&f, "host", 4, "a", 1);
	kvp_http_framing_add(&f, "transfer-encoding", 17, "xchunked", 8);
	assert_int_equal(kvp_http_framing_end(&f, false), 501);
	f = (struct kvp_http_framing)KVP_HTTP_FRAMING_INIT;
	kvp_http_framing_add(&f, "Host", 4, "a", 1);
	kvp_http_framing_add(&f, "X-A", 3, "a\x02", 2);
	assert_int_equal(kvp_http_framing_end(&f, false), 400);
	/* the first refusal is the one kept */
	f = (struct kvp_http_framing)KVP_HTTP_FRAMING_INIT;
	kvp_http_framing_add(&f, "Content-Length", 14, "x", 1);
	kvp_http_framing_add(&f, "Transfer-Encoding", 17, "gzip", 4);
	assert_int_equal(kvp_http_framing_end(&f, true), 400);
	assert_non_null(strstr(f.why, "Content-Length"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sound_heads),	cmocka_unit_test(test_incomplete),
		cmocka_unit_test(test_framing_refused), cmocka_unit_test(test_bytes_refused),
		cmocka_unit_test(test_request_line),	cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_shape),		cmocka_unit_test(test_fields_one_by_one),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
