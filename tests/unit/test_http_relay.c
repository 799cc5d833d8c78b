/* SPDX-License-Identifier: MIT */
/*
 * test_http_relay.c - ipc/http/relay.c: the relay's request-framing parser.  Every input
 * is fed whole and in pieces of every size from 1 byte (a client's bytes come as they
 * come), with the output room short and ample: the bytes passed must be the same, the
 * refusals the same, at the same place.
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

#include "ipc/http/relay.h"

#define MAX_HEAD 2048
#define POST "POST /v1/completions HTTP/1.1\r\nHost: a\r\n"
#define GET "GET /health HTTP/1.1\r\nHost: a\r\n\r\n"

struct run {
	struct kvp_http_relay r;
	char out[1 << 17];
	size_t out_len;
	int rc;
};

/*
 * Feed @p (@n bytes) in pieces of @piece bytes with @room bytes of output room at a
 * time (the caller drains the output between steps, as the gate does), an input buffer
 * of the relay's own size.
 */
static void feed(struct run *x, const char *p, size_t n, size_t piece, size_t room)
{
	size_t in_cap = kvp_http_relay_in_room(MAX_HEAD), in_len = 0, off = 0;
	char *in = malloc(in_cap);

	assert_non_null(in);
	kvp_http_relay_init(&x->r, MAX_HEAD);
	x->out_len = 0;
	x->rc = 0;
	for (;;) {
		size_t k = n - off < piece ? n - off : piece, used, made;

		if (k > in_cap - in_len)
			k = in_cap - in_len;
		memcpy(in + in_len, p + off, k);
		in_len += k;
		off += k;
		x->rc = kvp_http_relay_step(&x->r, in, in_len, x->out + x->out_len,
					    room < sizeof(x->out) - x->out_len ?
						    room :
						    sizeof(x->out) - x->out_len,
					    &used, &made);
		memmove(in, in + used, in_len - used);
		in_len -= used;
		x->out_len += made;
		if (x->rc < 0 || (off == n && !used && !made))
			break;
	}
	free(in);
}

/* @in passes as @want (NULL: as it is), whole and in every piece size, any room. */
static void expect_passed(const char *in, size_t n, const char *want, uint64_t requests)
{
	static struct run x;
	static const size_t rooms[] = { MAX_HEAD, MAX_HEAD + 7, 1 << 16 };
	size_t wn = want ? strlen(want) : n;

	want = want ? want : in;
	for (size_t piece = 1; piece <= n; piece += piece < 40 ? 1 : 97)
		for (size_t i = 0; i < sizeof(rooms) / sizeof(rooms[0]); i++) {
			feed(&x, in, n, piece, rooms[i]);
			if (x.rc || x.out_len != wn || memcmp(x.out, want, wn) ||
			    x.r.requests != requests || x.r.state != KVP_HTTP_RELAY_HEAD)
				fail_msg("piece %zu room %zu: rc %d (%u %s), %zu bytes, %llu "
					 "requests:\n%.*s",
					 piece, rooms[i], x.rc, x.r.status, x.r.why ? x.r.why : "",
					 x.out_len, (unsigned long long)x.r.requests,
					 (int)x.out_len, x.out);
		}
}

/* @in (@n bytes; 0: strlen) is refused with @status after passing exactly @passed. */
static void expect_refused(const char *in, size_t n, unsigned int status, const char *passed)
{
	static struct run x;

	n = n ? n : strlen(in);
	for (size_t piece = 1; piece <= n; piece += piece < 40 ? 1 : 997) {
		feed(&x, in, n, piece, 1 << 16);
		if (x.rc != -1 || x.r.status != status || x.out_len != strlen(passed) ||
		    memcmp(x.out, passed, x.out_len))
			fail_msg("piece %zu: rc %d status %u (%s), %zu bytes passed, not %u "
				 "after %zu",
				 piece, x.rc, x.r.status, x.r.why ? x.r.why : "", x.out_len, status,
				 strlen(passed));
		assert_non_null(x.r.why);
		assert_int_equal(x.r.state, KVP_HTTP_RELAY_REFUSED);
	}
}

static void test_heads_and_lengths(void **state)
{
	static const char two[] = GET POST "Content-Length: 5\r\n\r\nhello" GET;
	static const char blank[] = GET "\r\n\n" POST "Content-Length: 0\r\n\r\n" GET;
	static const char inner[] = POST "Content-Length: 33\r\n\r\n" GET;

	(void)state;
	/* bodiless and Content-Length requests pass as they came, one after another */
	expect_passed(two, strlen(two), NULL, 3);
	/* blank lines between requests (RFC 9112 §2.2) are dropped */
	expect_passed(blank, strlen(blank), GET POST "Content-Length: 0\r\n\r\n" GET, 3);
	/* a body's bytes are the body's, whatever they look like */
	expect_passed(inner, strlen(inner), NULL, 1);
}

static void test_chunked_canonical(void **state)
{
	static const char in[] = POST "Transfer-Encoding: chunked\r\n\r\n"
				      "0000A;x=1;y=\"q\"\r\n0123456789\r\n"
				      "1f \t;ext\n0123456789012345678901234567890\n"
				      "0;z\r\nX-Trailer: t\r\nY: u\n\r\n" GET;
	static const char want[] = POST "Transfer-Encoding: chunked\r\n\r\n"
					"a\r\n0123456789\r\n"
					"1f\r\n0123456789012345678901234567890\r\n"
					"0\r\n\r\n" GET;

	(void)state;
	/* sizes in lower-case hex without zeros, no extensions, CRLF, no trailer fields */
	expect_passed(in, strlen(in), want, 2);
}

static void test_chunk_refusals(void **state)
{
	static const char head[] = POST "Transfer-Encoding: chunked\r\n\r\n";
	char *big = malloc(KVP_HTTP_CHUNK_LINE_MAX * 2 + 512);
	size_t h = strlen(head), n;

	(void)state;
	assert_non_null(big);
	/* a line of KVP_HTTP_CHUNK_LINE_MAX bytes without its end: 413; one byte less: fine */
	memcpy(big, head, h);
	memset(big + h, '0', KVP_HTTP_CHUNK_LINE_MAX);
	expect_refused(big, h + KVP_HTTP_CHUNK_LINE_MAX, 413, head);
	memcpy(big + h + KVP_HTTP_CHUNK_LINE_MAX - 2, "\r\n", 2);
	memcpy(big + h + KVP_HTTP_CHUNK_LINE_MAX, "\r\n", 2);
	n = h + KVP_HTTP_CHUNK_LINE_MAX + 2;
	{
		char want[512];

		snprintf(want, sizeof(want), "%s0\r\n\r\n", head);
		expect_passed(big, n, want, 1);
	}
	/* an extension that long: 413 too */
	memcpy(big + h, "1;a=", 4);
	memset(big + h + 4, 'b', KVP_HTTP_CHUNK_LINE_MAX);
	expect_refused(big, h + 4 + KVP_HTTP_CHUNK_LINE_MAX, 413, head);
	free(big);
	/* 17 significant digits: 413; 16 (with zeros before) pass the line */
	expect_refused(POST "Transfer-Encoding: chunked\r\n\r\n00011111111111111111\r\n", 0, 413,
		       head);
	{
		static struct run x;
		static const char s16[] = POST "Transfer-Encoding: chunked\r\n\r\n"
					       "000ffffffffffffffff\r\nab";

		feed(&x, s16, strlen(s16), 1 << 16, 1 << 16);
		assert_int_equal(x.rc, 0);
		assert_int_equal(x.r.state, KVP_HTTP_RELAY_CHUNK_DATA);
		assert_true(x.r.left == UINT64_MAX - 2);
	}
	/* malformed: 400 */
	expect_refused(POST "Transfer-Encoding: chunked\r\n\r\nzz\r\n", 0, 400, head);
	expect_refused(POST "Transfer-Encoding: chunked\r\n\r\n;a\r\n", 0, 400, head);
	expect_refused(POST "Transfer-Encoding: chunked\r\n\r\n5 x\r\n", 0, 400, head);
	expect_refused(POST "Transfer-Encoding: chunked\r\n\r\n5;a=\001\r\n", 0, 400, head);
	expect_refused(POST "Transfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n", 0, 400,
		       POST "Transfer-Encoding: chunked\r\n\r\n2\r\nab");
	expect_refused(POST "Transfer-Encoding: chunked\r\n\r\n0\r\nno colon\r\n\r\n", 0, 400,
		       POST "Transfer-Encoding: chunked\r\n\r\n0\r\n");
	expect_refused(POST "Transfer-Encoding: chunked\r\n\r\n0\r\nA: \001\r\n\r\n", 0, 400,
		       POST "Transfer-Encoding: chunked\r\n\r\n0\r\n");
}

static void test_trailer_bound(void **state)
{
	static const char head[] = POST "Transfer-Encoding: chunked\r\n\r\n0\r\n";
	char *t = malloc(MAX_HEAD * 2);
	size_t h = strlen(head), n = h;

	(void)state;
	assert_non_null(t);
	memcpy(t, head, h);
	while (n < h + MAX_HEAD + 16) {
		memcpy(t + n, "X-T: 0123456789\r\n", 17);
		n += 17;
	}
	/* a trailer section beyond the head limit: 431 */
	expect_refused(t, n, 431, head);
	free(t);
}

static void test_head_refusals(void **state)
{
	static const char later[] = GET POST "Content-Length: 0x24\r\n\r\n";
	static const char nul[] = GET "GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n";

	(void)state;
	/* a later request's head is checked as a first one is: the first passes, the second
	 * is refused (kvp_http_head_check()'s status), nothing of it passes */
	expect_refused(later, strlen(later), 400, GET);
	expect_refused(nul, sizeof(nul) - 1, 400, GET);
	expect_refused(GET POST "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", 0, 400,
		       GET);
	expect_refused(GET POST "Transfer-Encoding: gzip\r\n\r\n", 0, 501, GET);
	/* the shape of the refused request is known */
	{
		static struct run x;
		static const char a[] = "POST /v1/messages HTTP/1.1\r\nHost: a\r\n"
					"Content-Length: -1\r\n\r\n";

		feed(&x, a, strlen(a), 1 << 16, 1 << 16);
		assert_int_equal(x.rc, -1);
		assert_true(x.r.anthropic);
	}
}

static void test_room(void **state)
{
	static struct run x;
	static char in[MAX_HEAD + 64];
	size_t used, made, n;
	char out[64];

	(void)state;
	/* a head waits for room for all of it; a body passes as room allows */
	n = (size_t)snprintf(in, sizeof(in), POST "Content-Length: 10\r\n\r\n0123456789");
	kvp_http_relay_init(&x.r, MAX_HEAD);
	assert_int_equal(kvp_http_relay_step(&x.r, in, n, out, 10, &used, &made), 0);
	assert_int_equal(used, 0);
	assert_int_equal(made, 0);
	assert_int_equal(kvp_http_relay_step(&x.r, in, n, out, 64, &used, &made), 0);
	assert_int_equal(made, n - 10 + 3 > 64 ? 64 : made);
	assert_int_equal(x.r.heads, 1);
	/* a refused parser passes nothing more */
	kvp_http_relay_init(&x.r, MAX_HEAD);
	assert_int_equal(kvp_http_relay_step(&x.r, "GET / HTTP/1.1\r\nHost: a\r\nX: \001\r\n\r\n",
					     33, out, 64, &used, &made),
			 -1);
	assert_int_equal(kvp_http_relay_step(&x.r, GET, strlen(GET), out, 64, &used, &made), -1);
	assert_int_equal(made, 0);
	assert_int_equal(used, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_heads_and_lengths), cmocka_unit_test(test_chunked_canonical),
		cmocka_unit_test(test_chunk_refusals),	  cmocka_unit_test(test_trailer_bound),
		cmocka_unit_test(test_head_refusals),	  cmocka_unit_test(test_room),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
