/* SPDX-License-Identifier: MIT */
/*
 * head.h - the checks kvpool-http makes of a request head itself, before and beside
 * libmicrohttpd's parser: the message framing of RFC 9112 §6 (Content-Length and
 * Transfer-Encoding, each given once and in one form) and the bytes a header may hold.
 *
 * Two entry points share one set of rules.  kvp_http_head_check() reads a raw head (the
 * gate peeks at a connection's first request with it, so bytes libmicrohttpd would
 * silently cut, such as a NUL in a value, are seen).  struct kvp_http_framing gathers
 * header fields one by one (the request handler feeds it the fields libmicrohttpd
 * parsed, for requests that reach it without the gate: a keep-alive connection's later
 * ones).  Pure functions; any thread.
 */
#ifndef KVP_IPC_HTTP_HEAD_H
#define KVP_IPC_HTTP_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/**
 * struct kvp_http_framing - what the header fields seen so far say about the framing
 * @n_cl:        Content-Length fields
 * @n_te:        Transfer-Encoding fields
 * @n_host:      Host fields
 * @status:      the first refusal found (400, 413, 501), 0 while none
 * @why:         its reason (static text), NULL while none
 * @length:      the Content-Length's value (when one sound field was seen)
 * @chunked:     a sound Transfer-Encoding: chunked was seen
 */
struct kvp_http_framing {
	unsigned int n_cl;
	unsigned int n_te;
	unsigned int n_host;
	unsigned int status;
	const char *why;
	uint64_t length;
	bool chunked;
};

#define KVP_HTTP_FRAMING_INIT \
	{ \
		0 \
	}

/* Add one field (@name is not NUL-terminated: @name_len bytes; @value likewise). */
void kvp_http_framing_add(struct kvp_http_framing *f, const char *name, size_t name_len,
			  const char *value, size_t value_len);

/*
 * kvp_http_framing_end() - the verdict once every field is in
 * @http10: the request is HTTP/1.0 (a Transfer-Encoding is then faulty framing, and Host
 *          is not required)
 * Return: 0 when the framing is sound, else the status to refuse with (@f->why says why).
 */
unsigned int kvp_http_framing_end(struct kvp_http_framing *f, bool http10);

/* How the body of a request whose head was accepted is delimited (RFC 9112 §6.3). */
enum kvp_http_body {
	KVP_HTTP_BODY_NONE = 0, /* neither field: no body */
	KVP_HTTP_BODY_LENGTH,	/* Content-Length bytes (kvp_http_head.length) */
	KVP_HTTP_BODY_CHUNKED,	/* the chunked coding */
};

/**
 * struct kvp_http_head - kvp_http_head_check()'s verdict
 * @status:    refusal status (400, 413, 414, 431, 501, 505); 0 when acceptable
 * @why:       the refusal's reason (static text)
 * @len:       complete and acceptable: bytes of the head, its blank line included
 * @anthropic: the target is under /v1/messages (a refusal takes Anthropic's shape)
 * @body:      complete and acceptable: how its body is delimited
 * @length:    KVP_HTTP_BODY_LENGTH: the body's bytes
 */
struct kvp_http_head {
	unsigned int status;
	const char *why;
	size_t len;
	bool anthropic;
	enum kvp_http_body body;
	uint64_t length;
};

/*
 * kvp_http_head_check() - check the request head at the start of @p (@n bytes so far)
 * @max_bytes: the head may have this many bytes (request line, fields, blank line)
 *
 * Return: 1 when the head is complete and acceptable (@h->len), 0 when it is incomplete
 * and may still become acceptable (more bytes needed), -1 when it is refused (@h->status,
 * @h->why); a head longer than @max_bytes is refused (414 while its request line is not
 * complete, else 431).
 */
int kvp_http_head_check(const char *p, size_t n, size_t max_bytes, struct kvp_http_head *h);

/* The reason phrase of @status, for a response written by hand. */
const char *kvp_http_reason(unsigned int status);

#endif /* KVP_IPC_HTTP_HEAD_H */
