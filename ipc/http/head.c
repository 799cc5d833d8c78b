/* SPDX-License-Identifier: MIT */
/*
 * head.c - request-head checks of RFC 9112 (see head.h).
 *
 * The rules, each a refusal with the connection closed after it (the body's end cannot
 * be known, so nothing after it may be read as another request):
 *   - Content-Length: exactly one field of 1..19 digits (a list, a sign, hex: 400; more
 *     digits: 413); never beside Transfer-Encoding (400: the smuggling shape, §6.1).
 *   - Transfer-Encoding: one field, exactly "chunked" (another coding: 501; chunked not
 *     last or twice: 400; in an HTTP/1.0 request: 400).
 *   - Field values: no control byte but HTAB (a NUL, CR, DEL: 400); names are tokens with
 *     the colon right after; no obs-fold line (400); HTTP/1.1 has one Host (400).
 *   - Request line: METHOD SP target SP HTTP/1.x (HTTP/2+: 505); the target in origin
 *     form or absolute form (http:// or https://, served as its path), or "*".
 * Lines end in CRLF or a bare LF (§2.2 lets a server accept it, as libmicrohttpd does).
 */
#include "ipc/http/head.h"

#include <string.h>
#include <strings.h>

static bool is_tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is_ctl(unsigned char c)
{
	return (c < 0x20 && c != '\t') || c == 0x7f;
}

static bool name_is(const char *name, size_t len, const char *want)
{
	return len == strlen(want) && !strncasecmp(name, want, len);
}

static void refuse(struct kvp_http_framing *f, unsigned int status, const char *why)
{
	if (!f->status) {
		f->status = status;
		f->why = why;
	}
}

/* Trim optional whitespace (SP, HTAB) on both sides of [*p, *p + *n). */
static void trim(const char **p, size_t *n)
{
	while (*n && (**p == ' ' || **p == '\t'))
		(*p)++, (*n)--;
	while (*n && ((*p)[*n - 1] == ' ' || (*p)[*n - 1] == '\t'))
		(*n)--;
}

static void content_length(struct kvp_http_framing *f, const char *v, size_t n)
{
	if (++f->n_cl > 1) {
		refuse(f, 400, "more than one Content-Length field");
		return;
	}
	trim(&v, &n);
	if (!n) {
		refuse(f, 400, "an empty Content-Length");
		return;
	}
	for (size_t i = 0; i < n; i++)
		if (v[i] < '0' || v[i] > '9') {
			refuse(f, 400, "a malformed Content-Length (digits only)");
			return;
		}
	if (n > 19) { /* 19 digits always fit in 64 bits */
		refuse(f, 413, "a Content-Length beyond any body this server takes");
		return;
	}
	f->length = 0;
	for (size_t i = 0; i < n; i++)
		f->length = f->length * 10 + (uint64_t)(v[i] - '0');
}

static void transfer_encoding(struct kvp_http_framing *f, const char *v, size_t n)
{
	unsigned int n_codings = 0, n_chunked = 0;
	bool last_chunked = false;

	if (++f->n_te > 1) {
		refuse(f, 400, "more than one Transfer-Encoding field");
		return;
	}
	while (n) {
		const char *comma = memchr(v, ',', n);
		size_t len = comma ? (size_t)(comma - v) : n;
		const char *c = v;
		size_t cn = len;

		trim(&c, &cn);
		if (cn) {
			n_codings++;
			last_chunked = name_is(c, cn, "chunked");
			n_chunked += last_chunked;
		}
		if (!comma)
			break;
		v = comma + 1;
		n -= len + 1;
	}
	if (!n_codings)
		refuse(f, 400, "an empty Transfer-Encoding");
	else if (n_chunked && (!last_chunked || n_chunked > 1))
		refuse(f, 400, "chunked is not the final transfer coding, or given twice");
	else if (n_codings > 1 || !last_chunked)
		refuse(f, 501, "a transfer coding other than chunked");
	else
		f->chunked = true;
}

void kvp_http_framing_add(struct kvp_http_framing *f, const char *name, size_t name_len,
			  const char *value, size_t value_len)
{
	for (size_t i = 0; i < value_len; i++)
		if (is_ctl((unsigned char)value[i])) {
			refuse(f, 400, "a control byte in a header value");
			return;
		}
	if (name_is(name, name_len, "content-length"))
		content_length(f, value, value_len);
	else if (name_is(name, name_len, "transfer-encoding"))
		transfer_encoding(f, value, value_len);
	else if (name_is(name, name_len, "host"))
		f->n_host++;
}

unsigned int kvp_http_framing_end(struct kvp_http_framing *f, bool http10)
{
	if (f->n_cl && f->n_te)
		refuse(f, 400, "both Content-Length and Transfer-Encoding");
	else if (f->n_te && http10)
		refuse(f, 400, "Transfer-Encoding in an HTTP/1.0 request");
	else if (!http10 && f->n_host != 1)
		refuse(f, 400, "an HTTP/1.1 request needs exactly one Host field");
	return f->status;
}

/* Where the line starting at @pos ends: the index of its LF, or -1 when not in @n. */
static long line_end(const char *p, size_t n, size_t pos)
{
	const char *lf = memchr(p + pos, '\n', n - pos);

	return lf ? lf - p : -1;
}

/* Bytes of the line [s, e) without its CR.  A CR elsewhere is a control byte. */
static size_t line_len(const char *p, size_t s, size_t e)
{
	return e > s && p[e - 1] == '\r' ? e - 1 - s : e - s;
}

static int head_refuse(struct kvp_http_head *h, unsigned int status, const char *why)
{
	h->status = status;
	h->why = why;
	return -1;
}

/* METHOD SP target SP HTTP/1.x.  Return 0, or -1 with @h set; @http10 out. */
static int request_line(const char *l, size_t n, struct kvp_http_head *h, bool *http10)
{
	const char *sp1 = memchr(l, ' ', n), *sp2, *t;
	size_t tn, vn;

	if (!sp1 || sp1 == l)
		return head_refuse(h, 400, "a malformed request line");
	for (const char *c = l; c < sp1; c++)
		if (!is_tchar((unsigned char)*c))
			return head_refuse(h, 400, "a malformed method");
	t = sp1 + 1;
	sp2 = memchr(t, ' ', n - (size_t)(t - l));
	if (!sp2 || sp2 == t)
		return head_refuse(h, 400, "a malformed request line");
	tn = (size_t)(sp2 - t);
	for (size_t i = 0; i < tn; i++)
		if (is_ctl((unsigned char)t[i]) || t[i] == '\t')
			return head_refuse(h, 400, "a control byte in the request target");
	vn = n - (size_t)(sp2 + 1 - l);
	if (vn != 8 || strncmp(sp2 + 1, "HTTP/", 5) || sp2[6] < '0' || sp2[6] > '9' ||
	    sp2[7] != '.' || sp2[8] < '0' || sp2[8] > '9')
		return head_refuse(h, 400, "a malformed HTTP version");
	if (sp2[6] != '1')
		return head_refuse(h, 505, "only HTTP/1.x is served");
	*http10 = sp2[8] == '0';
	if (tn > 7 && !strncasecmp(t, "http://", 7)) {
		t += 7, tn -= 7;
	} else if (tn > 8 && !strncasecmp(t, "https://", 8)) {
		t += 8, tn -= 8;
	} else if (t[0] == '/' || (tn == 1 && t[0] == '*')) {
		h->anthropic = tn >= 12 && !strncmp(t, "/v1/messages", 12);
		return 0;
	} else {
		return head_refuse(h, 400, "a request target neither in origin nor absolute form");
	}
	/* absolute form: the path follows the authority */
	{
		const char *slash = memchr(t, '/', tn);

		h->anthropic = slash && tn - (size_t)(slash - t) >= 12 &&
			       !strncmp(slash, "/v1/messages", 12);
	}
	return 0;
}

/* One field line [l, l + n).  Return 0, or -1 with @h set. */
static int field_line(const char *l, size_t n, struct kvp_http_framing *f, struct kvp_http_head *h)
{
	const char *colon = memchr(l, ':', n);

	if (l[0] == ' ' || l[0] == '\t')
		return head_refuse(h, 400, "a folded header line (obs-fold)");
	if (!colon || colon == l)
		return head_refuse(h, 400, "a header line without a name and colon");
	for (const char *c = l; c < colon; c++)
		if (!is_tchar((unsigned char)*c))
			return head_refuse(h, 400, "a malformed header name");
	kvp_http_framing_add(f, l, (size_t)(colon - l), colon + 1, n - (size_t)(colon + 1 - l));
	if (f->status)
		return head_refuse(h, f->status, f->why);
	return 0;
}

int kvp_http_head_check(const char *p, size_t n, size_t max_bytes, struct kvp_http_head *h)
{
	struct kvp_http_framing f = KVP_HTTP_FRAMING_INIT;
	bool http10 = false, have_line = false;
	size_t pos = 0;

	memset(h, 0, sizeof(*h));
	for (;;) {
		long e = line_end(p, n, pos);
		size_t len;

		if (e < 0) {
			/* incomplete: refuse bad bytes seen so far rather than wait for more */
			for (size_t i = pos; i < n; i++)
				if (is_ctl((unsigned char)p[i]) && !(p[i] == '\r' && i + 1 == n))
					return head_refuse(h, 400, "a control byte in the head");
			if (n >= max_bytes)
				return head_refuse(h, have_line ? 431 : 414,
						   have_line ? "the request head is too large" :
							       "the request line is too long");
			return 0;
		}
		if ((size_t)e + 1 > max_bytes)
			return head_refuse(h, have_line ? 431 : 414,
					   have_line ? "the request head is too large" :
						       "the request line is too long");
		len = line_len(p, pos, (size_t)e);
		for (size_t i = 0; i < len; i++)
			if ((unsigned char)p[pos + i] < 0x20 && p[pos + i] != '\t')
				return head_refuse(h, 400, "a control byte in the head");
			else if (p[pos + i] == 0x7f)
				return head_refuse(h, 400, "a control byte in the head");
		if (!have_line) {
			if (len) { /* empty lines before the request line are ignored (§2.2) */
				if (request_line(p + pos, len, h, &http10) < 0)
					return -1;
				have_line = true;
			}
		} else if (!len) {
			unsigned int st = kvp_http_framing_end(&f, http10);

			if (st)
				return head_refuse(h, st, f.why);
			h->len = (size_t)e + 1;
			h->body = f.chunked ? KVP_HTTP_BODY_CHUNKED :
				  f.n_cl    ? KVP_HTTP_BODY_LENGTH :
					      KVP_HTTP_BODY_NONE;
			h->length = f.length;
			return 1;
		} else if (field_line(p + pos, len, &f, h) < 0) {
			return -1;
		}
		pos = (size_t)e + 1;
	}
}

const char *kvp_http_reason(unsigned int status)
{
	switch (status) {
	case 400:
		return "Bad Request";
	case 408:
		return "Request Timeout";
	case 413:
		return "Content Too Large";
	case 414:
		return "URI Too Long";
	case 431:
		return "Request Header Fields Too Large";
	case 501:
		return "Not Implemented";
	case 503:
		return "Service Unavailable";
	case 505:
		return "HTTP Version Not Supported";
	default:
		return "Error";
	}
}
