/* SPDX-License-Identifier: MIT */
/*
 * fuzz_http_relay.c - the relay's request-framing parser (ipc/http/relay.h) on a
 * client's raw bytes, as the gate feeds it: the input in pieces (their size from the
 * first byte) through an input buffer of the relay's own size, with an output room of
 * the gate's.  Properties: the verdict and the bytes passed are the same as with the
 * input given in one piece of the buffer's size; a refusal names its status and reason;
 * and what the relay passes is its own canonical form, which a second relay passes
 * unchanged and never refuses (libmicrohttpd meets no form the relay reads otherwise).
 */
#include <stdlib.h>
#include <string.h>

#include "ipc/http/relay.h"

#include "fuzz.h"

#define MAX_HEAD 2048
#define OUT_MAX (1 << 18)

struct run {
	struct kvp_http_relay r;
	char *out;
	size_t out_len;
	int rc;
};

static void feed(struct run *x, const char *p, size_t n, size_t piece, size_t room)
{
	size_t in_cap = kvp_http_relay_in_room(MAX_HEAD), in_len = 0, off = 0;
	char *in = malloc(in_cap);

	if (!in)
		abort();
	kvp_http_relay_init(&x->r, MAX_HEAD);
	x->out_len = 0;
	x->rc = 0;
	for (;;) {
		size_t k = n - off < piece ? n - off : piece, used, made, cap;

		if (k > in_cap - in_len)
			k = in_cap - in_len;
		memcpy(in + in_len, p + off, k);
		in_len += k;
		off += k;
		cap = OUT_MAX - x->out_len < room ? OUT_MAX - x->out_len : room;
		x->rc = kvp_http_relay_step(&x->r, in, in_len, x->out + x->out_len, cap, &used,
					    &made);
		if (used > in_len || made > cap)
			__builtin_trap();
		memmove(in, in + used, in_len - used);
		in_len -= used;
		x->out_len += made;
		if (x->rc < 0 || (off == n && !used && !made) || x->out_len == OUT_MAX)
			break;
	}
	free(in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct run a, b, c;
	size_t piece;

	if (!size || size > OUT_MAX / 4)
		return 0;
	if (!a.out) {
		a.out = malloc(OUT_MAX);
		b.out = malloc(OUT_MAX);
		c.out = malloc(OUT_MAX);
		if (!a.out || !b.out || !c.out)
			abort();
	}
	piece = 1 + data[0] % 64;
	data++, size--;
	feed(&a, (const char *)data, size, size ? size : 1, MAX_HEAD + (16u << 10));
	feed(&b, (const char *)data, size, piece, MAX_HEAD + piece * 7);
	if (a.rc != b.rc || a.out_len != b.out_len || memcmp(a.out, b.out, a.out_len) ||
	    a.r.status != b.r.status || a.r.requests != b.r.requests)
		__builtin_trap(); /* how the bytes came changed what passed */
	if (a.rc < 0 && (!a.r.status || !a.r.why))
		__builtin_trap();
	if (a.out_len == OUT_MAX)
		return 0;
	/* the canonical form passes as it is */
	feed(&c, a.out, a.out_len, a.out_len ? a.out_len : 1, MAX_HEAD + (16u << 10));
	if (c.rc < 0 || c.out_len != a.out_len || memcmp(c.out, a.out, a.out_len) ||
	    c.r.requests != a.r.requests)
		__builtin_trap();
	return 0;
}
