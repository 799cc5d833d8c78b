/* SPDX-License-Identifier: MIT */
/*
 * relay.c - the relay's request-framing parser (see relay.h).
 *
 * Each state consumes whole units only (a head, a line, a line end) or body bytes as
 * they come, so that a step stopped for want of input or room resumes where it was.
 */
#include "ipc/http/relay.h"

#include <stdio.h>
#include <string.h>

#include "ipc/http/head.h"

void kvp_http_relay_init(struct kvp_http_relay *r, size_t max_head)
{
	memset(r, 0, sizeof(*r));
	r->state = KVP_HTTP_RELAY_HEAD;
	r->max_head = max_head;
}

size_t kvp_http_relay_in_room(size_t max_head)
{
	return (max_head > KVP_HTTP_CHUNK_LINE_MAX ? max_head : KVP_HTTP_CHUNK_LINE_MAX) + 1;
}

static int refuse(struct kvp_http_relay *r, unsigned int status, const char *why)
{
	r->state = KVP_HTTP_RELAY_REFUSED;
	r->status = status;
	r->why = why;
	return -1;
}

static bool is_ctl(unsigned char c)
{
	return (c < 0x20 && c != '\t') || c == 0x7f;
}

static int hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* The line [l, l + len) without its LF (a CR before it is its end too). */
static size_t without_cr(const char *l, size_t len)
{
	return len && l[len - 1] == '\r' ? len - 1 : len;
}

/*
 * chunk-size [ chunk-ext ] (RFC 9112 §7.1): hex digits, then nothing or whitespace and
 * extensions starting with ';'.  The extensions are not interpreted (none is known
 * here), only kept free of control bytes; they are not passed on.
 */
static int chunk_line(struct kvp_http_relay *r, const char *l, size_t len, uint64_t *size)
{
	unsigned int sig = 0;
	size_t i = 0;
	int d;

	len = without_cr(l, len);
	*size = 0;
	for (; i < len && (d = hex_value(l[i])) >= 0; i++) {
		if (!sig && !d)
			continue; /* leading zeros: any number, within the line's bound */
		if (++sig > 16)
			return refuse(r, 413, "a chunk size beyond any body this server takes");
		*size = *size << 4 | (uint64_t)d;
	}
	if (!i)
		return refuse(r, 400, "a malformed chunk size");
	for (size_t j = i; j < len; j++)
		if (is_ctl((unsigned char)l[j]))
			return refuse(r, 400, "a control byte in a chunk line");
	while (i < len && (l[i] == ' ' || l[i] == '\t'))
		i++;
	if (i < len && l[i] != ';')
		return refuse(r, 400, "a malformed chunk size");
	return 0;
}

/* A trailer field line [l, l + len) without its LF: name ":" value, no control byte. */
static int trailer_line(struct kvp_http_relay *r, const char *l, size_t len)
{
	const char *colon;

	len = without_cr(l, len);
	colon = memchr(l, ':', len);
	if (!colon || colon == l || l[0] == ' ' || l[0] == '\t')
		return refuse(r, 400, "a malformed trailer field");
	for (const char *c = l; c < colon; c++)
		if (is_ctl((unsigned char)*c) || *c == ' ' || *c == '\t')
			return refuse(r, 400, "a malformed trailer field");
	for (size_t j = 0; j < len; j++)
		if (is_ctl((unsigned char)l[j]))
			return refuse(r, 400, "a control byte in a trailer field");
	return 0;
}

/* One request whole: its head and body passed. */
static void request_done(struct kvp_http_relay *r)
{
	r->state = KVP_HTTP_RELAY_HEAD;
	r->requests++;
}

/* HEAD: blank lines between requests dropped (RFC 9112 §2.2), then a whole head. */
static int step_head(struct kvp_http_relay *r, const char *in, size_t n, char *out, size_t cap,
		     size_t *used, size_t *made)
{
	struct kvp_http_head h;
	int rc;

	if (in[0] == '\n') {
		*used = 1;
		return 0;
	}
	if (in[0] == '\r' && n >= 2 && in[1] == '\n') {
		*used = 2;
		return 0;
	}
	if (in[0] == '\r' && n == 1)
		return 0;
	rc = kvp_http_head_check(in, n, r->max_head, &h);
	r->anthropic = h.anthropic;
	if (rc < 0)
		return refuse(r, h.status, h.why);
	if (!rc || h.len > cap)
		return 0;
	memcpy(out, in, h.len);
	*used = *made = h.len;
	r->heads++;
	if (h.body == KVP_HTTP_BODY_CHUNKED) {
		r->state = KVP_HTTP_RELAY_CHUNK_LINE;
	} else if (h.body == KVP_HTTP_BODY_LENGTH && h.length) {
		r->state = KVP_HTTP_RELAY_LENGTH;
		r->left = h.length;
	} else {
		request_done(r);
	}
	return 0;
}

/*
 * One unit of @in: *used and *made say what it took and gave (both 0: it needs more
 * input or more room).  Return 0 or -1 (refused).
 */
static int step_one(struct kvp_http_relay *r, const char *in, size_t n, char *out, size_t cap,
		    size_t *used, size_t *made)
{
	const char *lf;
	size_t k, len;
	uint64_t size;

	*used = *made = 0;
	switch (r->state) {
	case KVP_HTTP_RELAY_HEAD:
		return step_head(r, in, n, out, cap, used, made);
	case KVP_HTTP_RELAY_LENGTH:
	case KVP_HTTP_RELAY_CHUNK_DATA:
		k = n < cap ? n : cap;
		if (k > r->left)
			k = (size_t)r->left;
		memcpy(out, in, k);
		*used = *made = k;
		r->left -= k;
		if (!r->left) {
			if (r->state == KVP_HTTP_RELAY_LENGTH)
				request_done(r);
			else
				r->state = KVP_HTTP_RELAY_CHUNK_END;
		}
		return 0;
	case KVP_HTTP_RELAY_CHUNK_LINE:
		lf = memchr(in, '\n', n < KVP_HTTP_CHUNK_LINE_MAX ? n : KVP_HTTP_CHUNK_LINE_MAX);
		if (!lf) {
			if (n >= KVP_HTTP_CHUNK_LINE_MAX)
				return refuse(r, 413, "a chunk-size line longer than 4096 bytes");
			/* refuse what cannot become a chunk line rather than wait for it */
			if (hex_value(in[0]) < 0)
				return refuse(r, 400, "a malformed chunk size");
			return 0;
		}
		if (cap < KVP_HTTP_CHUNK_OUT_MAX + 2)
			return 0;
		len = (size_t)(lf - in);
		if (chunk_line(r, in, len, &size) < 0)
			return -1;
		*used = len + 1;
		if (!size) {
			memcpy(out, "0\r\n", 3);
			*made = 3;
			r->state = KVP_HTTP_RELAY_TRAILER;
			r->trailer = 0;
		} else {
			*made = (size_t)snprintf(out, cap, "%llx\r\n", (unsigned long long)size);
			r->state = KVP_HTTP_RELAY_CHUNK_DATA;
			r->left = size;
		}
		return 0;
	case KVP_HTTP_RELAY_CHUNK_END:
		if (cap < 2)
			return 0;
		if (in[0] == '\n')
			*used = 1;
		else if (in[0] == '\r' && n >= 2 && in[1] == '\n')
			*used = 2;
		else if (in[0] == '\r' && n == 1)
			return 0;
		else
			return refuse(r, 400, "a chunk's data not followed by its line end");
		memcpy(out, "\r\n", 2);
		*made = 2;
		r->state = KVP_HTTP_RELAY_CHUNK_LINE;
		return 0;
	case KVP_HTTP_RELAY_TRAILER: {
		size_t room = r->max_head - r->trailer;

		lf = memchr(in, '\n', n < room ? n : room);
		if (!lf) {
			if (n >= room)
				return refuse(r, 431, "the trailer fields are too large");
			return 0;
		}
		if (cap < 2)
			return 0;
		len = (size_t)(lf - in);
		*used = len + 1;
		r->trailer += len + 1;
		if (!without_cr(in, len)) {
			memcpy(out, "\r\n", 2); /* the fields dropped: the chunked body's end */
			*made = 2;
			request_done(r);
			return 0;
		}
		return trailer_line(r, in, len);
	}
	case KVP_HTTP_RELAY_REFUSED:
	default:
		return -1;
	}
}

int kvp_http_relay_step(struct kvp_http_relay *r, const char *in, size_t n, char *out, size_t cap,
			size_t *used, size_t *made)
{
	*used = *made = 0;
	if (r->state == KVP_HTTP_RELAY_REFUSED)
		return -1;
	while (*used < n) {
		size_t u, m;

		if (step_one(r, in + *used, n - *used, out + *made, cap - *made, &u, &m) < 0)
			return -1;
		if (!u && !m)
			break;
		*used += u;
		*made += m;
	}
	return 0;
}
