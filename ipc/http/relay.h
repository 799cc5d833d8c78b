/* SPDX-License-Identifier: MIT */
/*
 * relay.h - the request-framing parser of kvpool-http's relay: what the client sends,
 * request by request, checked and delimited before libmicrohttpd reads a byte of it.
 *
 * The gate (gate.h) reads every byte a client sends and writes to libmicrohttpd only
 * what this parser passes: each request head as it came, once kvp_http_head_check()
 * accepted it; its body delimited by its Content-Length or by the chunked coding.  A
 * chunked body is passed re-encoded in one canonical form (the size in lower-case hex
 * without leading zeros, no extensions, CRLF line ends, the trailer fields dropped, as
 * RFC 9110 §6.5.1 lets a recipient do), so the library's chunk parser meets no form it
 * could read differently from this one, nor a line longer than this one allows.
 *
 * What is refused, and then nothing more of the connection is passed:
 *   - a head kvp_http_head_check() refuses (its status);
 *   - a chunk-size line or its extensions longer than KVP_HTTP_CHUNK_LINE_MAX: 413;
 *   - a chunk size of more than 16 significant hex digits: 413;
 *   - a malformed chunk-size line, a control byte in it, a chunk's data not followed by
 *     its line end, a malformed trailer field: 400;
 *   - a trailer section longer than the head limit: 431.
 *
 * Pure functions of the bytes given; any thread, one parser per connection.
 */
#ifndef KVP_IPC_HTTP_RELAY_H
#define KVP_IPC_HTTP_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A chunk-size line (size, extensions, line end) has at most this many bytes. */
#define KVP_HTTP_CHUNK_LINE_MAX 4096

/* The most a chunk's header line becomes once re-encoded: 16 hex digits and CRLF. */
#define KVP_HTTP_CHUNK_OUT_MAX 18

enum kvp_http_relay_state {
	KVP_HTTP_RELAY_HEAD = 0,   /* between requests: a head (or blank lines) next */
	KVP_HTTP_RELAY_LENGTH,	   /* a Content-Length body: @left bytes to go */
	KVP_HTTP_RELAY_CHUNK_LINE, /* a chunk-size line next */
	KVP_HTTP_RELAY_CHUNK_DATA, /* a chunk's data: @left bytes to go */
	KVP_HTTP_RELAY_CHUNK_END,  /* the line end after a chunk's data */
	KVP_HTTP_RELAY_TRAILER,	   /* trailer fields, up to a blank line */
	KVP_HTTP_RELAY_REFUSED,	   /* refused: nothing more passes */
};

/**
 * struct kvp_http_relay - one connection's request stream, as far as it was parsed
 * @state:     where the stream is
 * @max_head:  a head (and a trailer section) may have this many bytes
 * @left:      LENGTH, CHUNK_DATA: bytes still to pass
 * @trailer:   TRAILER: bytes of trailer fields so far
 * @heads:     request heads passed
 * @requests:  requests passed whole (head and body)
 * @status:    REFUSED: the status to answer with (400, 413, 414, 431, 501, 505)
 * @why:       REFUSED: its reason (static text)
 * @anthropic: the current (or refused) request is under /v1/messages
 */
struct kvp_http_relay {
	enum kvp_http_relay_state state;
	size_t max_head;
	uint64_t left;
	size_t trailer;
	uint64_t heads;
	uint64_t requests;
	unsigned int status;
	const char *why;
	bool anthropic;
};

/* A parser at the start of a connection whose heads may have @max_head bytes. */
void kvp_http_relay_init(struct kvp_http_relay *r, size_t max_head);

/*
 * kvp_http_relay_step() - pass what can be passed of @in (@n bytes the client sent and
 * this parser did not consume yet) into @out (@cap bytes of room)
 * @used: out; bytes of @in consumed (the caller drops them before the next call)
 * @made: out; bytes written to @out, for libmicrohttpd
 *
 * Goes as far as @in and @cap allow: it stops at a head or a line not complete in @in
 * (a head needs max_head + 1 bytes of input room to be judged; a chunk line
 * KVP_HTTP_CHUNK_LINE_MAX + 1), and at a head longer than the room left in @out (it
 * needs max_head bytes of room).
 * Return: 0, or -1 once refused (@r->status, @r->why; bytes passed before stay passed).
 */
int kvp_http_relay_step(struct kvp_http_relay *r, const char *in, size_t n, char *out, size_t cap,
			size_t *used, size_t *made);

/* The bytes of input room the relay needs: a whole head or a whole chunk line. */
size_t kvp_http_relay_in_room(size_t max_head);

#endif /* KVP_IPC_HTTP_RELAY_H */
