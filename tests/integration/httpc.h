/* SPDX-License-Identifier: MIT */
/*
 * httpc.h - a small HTTP/1.1 client for the tests and the benchmark: one connection,
 * requests written as raw bytes (so tests can also send malformed ones), one response
 * read at a time (Content-Length, chunked, or until close), keep-alive kept.
 */
#ifndef KVP_TESTS_HTTPC_H
#define KVP_TESTS_HTTPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct httpc {
	int fd;
	char buf[16384];
	size_t off, len; /* unread bytes: buf[off .. len) */
};

/* Called with body bytes as they arrive (after de-chunking). */
typedef void (*httpc_body_fn)(void *arg, const char *p, size_t n);

/**
 * struct httpc_resp - one response
 * @status:  HTTP status (0 when none arrived)
 * @head:    the status line and headers, NUL-terminated (cut at 8 KiB)
 * @body:    malloc()ed, NUL-terminated, @body_len bytes
 * @closed:  the server closed the connection after it
 */
struct httpc_resp {
	int status;
	char head[8192];
	char *body;
	size_t body_len;
	bool closed;
};

/* Connect to 127.0.0.1:@port (reads time out after @timeout_s).  Return 0 or -errno. */
int httpc_open(struct httpc *c, int port, double timeout_s);
void httpc_close(struct httpc *c);

/* Connect to the unix socket at @path instead.  Return 0 or -errno. */
int httpc_open_unix(struct httpc *c, const char *path, double timeout_s);

/* Write all of @p.  Return 0 or -errno. */
int httpc_send(struct httpc *c, const void *p, size_t n);

/*
 * httpc_send_request() - "METHOD PATH HTTP/1.1" with Host, Content-Length (when @body),
 * Content-Type: application/json, @extra ("Name: value\r\n" lines, or NULL), and @body.
 */
int httpc_send_request(struct httpc *c, const char *method, const char *path, const char *extra,
		       const char *body, size_t body_len);

/* Read one response into @r (httpc_resp_free() after); @fn may be NULL.  0 or -errno. */
int httpc_read(struct httpc *c, struct httpc_resp *r, httpc_body_fn fn, void *arg);

void httpc_resp_free(struct httpc_resp *r);

/* Header @name's value in @r (case-insensitive), copied into @out; false when absent. */
bool httpc_header(const struct httpc_resp *r, const char *name, char *out, size_t cap);

/* One request on a fresh connection (closed after).  Return 0 or -errno. */
int httpc_request(int port, const char *method, const char *path, const char *extra,
		  const char *body, struct httpc_resp *r);

#endif /* KVP_TESTS_HTTPC_H */
