/* SPDX-License-Identifier: MIT */
/*
 * httpc.c - the tests' HTTP client (see httpc.h).
 */
#include "tests/integration/httpc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

int httpc_open(struct httpc *c, int port, double timeout_s)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct timeval tv = { .tv_sec = (time_t)timeout_s,
			      .tv_usec = (suseconds_t)((timeout_s - (time_t)timeout_s) * 1e6) };
	int one = 1;

	c->off = c->len = 0;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int r = -errno;

		close(c->fd);
		c->fd = -1;
		return r;
	}
	return 0;
}

int httpc_open_unix(struct httpc *c, const char *path, double timeout_s)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = (time_t)timeout_s,
			      .tv_usec = (suseconds_t)((timeout_s - (time_t)timeout_s) * 1e6) };

	c->off = c->len = 0;
	if (strlen(path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	strcpy(a.sun_path, path);
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int r = -errno;

		close(c->fd);
		c->fd = -1;
		return r;
	}
	return 0;
}

void httpc_close(struct httpc *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

int httpc_send(struct httpc *c, const void *p, size_t n)
{
	const char *b = p;

	while (n) {
		ssize_t w = send(c->fd, b, n, MSG_NOSIGNAL);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

int httpc_send_request(struct httpc *c, const char *method, const char *path, const char *extra,
		       const char *body, size_t body_len)
{
	char head[4096];
	int n, r;

	n = snprintf(head, sizeof(head), "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s", method, path,
		     extra ? extra : "", body ? "Content-Type: application/json\r\n" : "");
	if (body)
		n += snprintf(head + n, sizeof(head) - (size_t)n, "Content-Length: %zu\r\n",
			      body_len);
	n += snprintf(head + n, sizeof(head) - (size_t)n, "\r\n");
	r = httpc_send(c, head, (size_t)n);
	if (!r && body)
		r = httpc_send(c, body, body_len);
	return r;
}

/* More bytes into the buffer.  Return: bytes read, 0 at EOF, or -errno. */
static ssize_t fill(struct httpc *c)
{
	ssize_t n;

	if (c->off && c->off == c->len)
		c->off = c->len = 0;
	if (c->len == sizeof(c->buf)) {
		memmove(c->buf, c->buf + c->off, c->len - c->off);
		c->len -= c->off;
		c->off = 0;
	}
	if (c->len == sizeof(c->buf))
		return -ENOBUFS;
	do
		n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	c->len += (size_t)n;
	return n;
}

/* One line (without CRLF) into @out.  Return 0, -EPROTO at EOF, -errno. */
static int line(struct httpc *c, char *out, size_t cap)
{
	for (;;) {
		char *nl = memchr(c->buf + c->off, '\n', c->len - c->off);

		if (nl) {
			size_t n = (size_t)(nl - (c->buf + c->off));

			if (n && nl[-1] == '\r')
				n--;
			if (n >= cap)
				n = cap - 1;
			memcpy(out, c->buf + c->off, n);
			out[n] = '\0';
			c->off = (size_t)(nl - c->buf) + 1;
			return 0;
		}
		ssize_t r = fill(c);

		if (r <= 0)
			return r < 0 ? (int)r : -EPROTO;
	}
}

static int body_add(struct httpc_resp *r, const char *p, size_t n, httpc_body_fn fn, void *arg)
{
	char *b = realloc(r->body, r->body_len + n + 1);

	if (!b)
		return -ENOMEM;
	r->body = b;
	memcpy(b + r->body_len, p, n);
	r->body_len += n;
	b[r->body_len] = '\0';
	if (fn)
		fn(arg, p, n);
	return 0;
}

/* @n body bytes (or, with @n SIZE_MAX, everything until EOF). */
static int take(struct httpc *c, struct httpc_resp *r, size_t n, httpc_body_fn fn, void *arg)
{
	while (n) {
		size_t have = c->len - c->off;
		int e;

		if (!have) {
			ssize_t got = fill(c);

			if (got < 0)
				return (int)got;
			if (!got) {
				r->closed = true;
				return n == SIZE_MAX ? 0 : -EPROTO;
			}
			continue;
		}
		if (have > n)
			have = n;
		e = body_add(r, c->buf + c->off, have, fn, arg);
		if (e)
			return e;
		c->off += have;
		if (n != SIZE_MAX)
			n -= have;
	}
	return 0;
}

bool httpc_header(const struct httpc_resp *r, const char *name, char *out, size_t cap)
{
	size_t len = strlen(name);

	for (const char *p = strchr(r->head, '\n'); p; p = strchr(p, '\n')) {
		p++;
		if (!strncasecmp(p, name, len) && p[len] == ':') {
			const char *v = p + len + 1, *e;

			while (*v == ' ')
				v++;
			e = strpbrk(v, "\r\n");
			if (!e)
				e = v + strlen(v);
			snprintf(out, cap, "%.*s", (int)(e - v), v);
			return true;
		}
	}
	return false;
}

int httpc_read(struct httpc *c, struct httpc_resp *r, httpc_body_fn fn, void *arg)
{
	char ln[8192], v[64];
	size_t hl = 0;
	int e;

	memset(r, 0, sizeof(*r));
	e = line(c, ln, sizeof(ln));
	if (e)
		return e;
	if (sscanf(ln, "HTTP/1.%*d %d", &r->status) != 1)
		return -EPROTO;
	hl = (size_t)snprintf(r->head, sizeof(r->head), "%s\n", ln);
	for (;;) {
		e = line(c, ln, sizeof(ln));
		if (e)
			return e;
		if (!ln[0])
			break;
		if (hl < sizeof(r->head))
			hl += (size_t)snprintf(r->head + hl, sizeof(r->head) - hl, "%s\n", ln);
	}
	body_add(r, "", 0, NULL, NULL);
	if (httpc_header(r, "Transfer-Encoding", v, sizeof(v)) && strcasestr(v, "chunked")) {
		for (;;) {
			unsigned long n;

			e = line(c, ln, sizeof(ln));
			if (e)
				return e;
			n = strtoul(ln, NULL, 16);
			if (!n)
				break;
			e = take(c, r, n, fn, arg);
			if (!e)
				e = line(c, ln, sizeof(ln)); /* the CRLF after the chunk */
			if (e)
				return e;
		}
		do /* trailers, up to the empty line */
			e = line(c, ln, sizeof(ln));
		while (!e && ln[0]);
		return e;
	}
	if (httpc_header(r, "Content-Length", v, sizeof(v)))
		return take(c, r, strtoull(v, NULL, 10), fn, arg);
	if (r->status == 204 || r->status == 304)
		return 0;
	return take(c, r, SIZE_MAX, fn, arg);
}

void httpc_resp_free(struct httpc_resp *r)
{
	free(r->body);
	r->body = NULL;
}

int httpc_request(int port, const char *method, const char *path, const char *extra,
		  const char *body, struct httpc_resp *r)
{
	struct httpc c;
	int e;

	memset(r, 0, sizeof(*r));
	e = httpc_open(&c, port, 60);
	if (e)
		return e;
	e = httpc_send_request(&c, method, path, extra, body, body ? strlen(body) : 0);
	if (!e)
		e = httpc_read(&c, r, NULL, NULL);
	httpc_close(&c);
	return e;
}
