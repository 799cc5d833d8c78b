/* SPDX-License-Identifier: MIT */
/*
 * gate.h - kvpool-http's own accept loop and relay in front of libmicrohttpd: connection
 * limits, request deadlines and the framing checks of every request.
 *
 * libmicrohttpd 0.9.75 left alone stops accepting at its connection limit (new clients
 * wait in the backlog), counts only silence as a timeout, and answers some broken heads
 * twice (a malformed Content-Length), cuts others (a NUL in a value), answers an
 * over-long chunk line with 500, or reads an unknown transfer coding to a silent end,
 * before the application sees a thing.  So the gate accepts every connection itself,
 * keeps it until its first request head is complete (peeked with MSG_PEEK), checks that
 * head (head.h) and answers a refusal itself, once, with the connection closed.  A
 * sound connection is handed to libmicrohttpd as one end of a socketpair(AF_UNIX,
 * SOCK_STREAM) (MHD_add_connection() with the client's address, for the library's log);
 * the gate keeps the client's socket and relays every byte:
 *
 *   - client -> library through the framing parser (relay.h): each request head
 *     checked with kvp_http_head_check() as the first one was, each body delimited
 *     (Content-Length, or chunked with bounded lines, re-encoded canonically), so the
 *     library never meets a byte the gate did not judge.  A refused request is
 *     answered by the gate, once, with Connection: close, AFTER the answers to the
 *     requests before it (HTTP/1.1 answers in order): nothing more is relayed to the
 *     library; once it has ended as many requests as came before the refused one (its
 *     NOTIFY_COMPLETED, reported here as the HEAD phase, comes after its last byte was
 *     written) and the pair is drained, the pair is closed, the refusal written behind
 *     those answers, the client's write side shut and the connection closed after a
 *     short drain.  A request smuggled behind a refused one is never read.
 *   - library -> client as it is (answers, 100 Continue, streamed events).
 *
 * Backpressure: each side has a bounded buffer (the head limit plus 16 KiB towards the
 * library, 16 KiB towards the client); a side is not read while the buffer it fills is
 * full, so the socket buffers and these are all a connection holds.  Keep-alive and
 * pipelining go on as before; a client's EOF is passed on (the library sees its end of
 * the pair shut, and a generation whose client left is cancelled as before).
 *
 * The deadlines are the relay's own measures: the header block from the connection's
 * start or the previous request's end (not while an answer is being made), the body
 * from its head (of the request the library works on), and idle_timeout_s for a client
 * that reads no answer.  It also enforces per_addr_conns and, at max_conns, makes room
 * by closing the connection that has waited longest for a request head.
 *
 * The cost: one more copy of every byte and a hop through the gate thread each way
 * (docs/http.md, "Limits", has the measured figure).  The alternative, a peek at the
 * first head only, left later keep-alive requests to the library's own parser.
 *
 * Thread: one gate thread does all relaying; kvp_http_gate_started/closed/phase() are
 * called from the HTTP threads (libmicrohttpd's callbacks).
 */
#ifndef KVP_IPC_HTTP_GATE_H
#define KVP_IPC_HTTP_GATE_H

#include <stdbool.h>
#include <stddef.h>

#include "ipc/http/config.h"
#include "ipc/http/metrics.h"

struct kvp_http_gate;
struct MHD_Daemon;
struct MHD_Connection;

/* Where a connection libmicrohttpd holds is in its current request (the relay reads
 * the body's phases from the bytes; HEAD, reported at a request's end, counts it). */
enum kvp_http_phase {
	KVP_HTTP_PHASE_HEAD = 0, /* the request ended (answered or not): waiting for the next */
	KVP_HTTP_PHASE_BODY,	 /* headers in, body being read */
	KVP_HTTP_PHASE_BUSY,	 /* request complete: being answered (no deadline) */
	KVP_HTTP_PHASE_EARLY,	 /* answered before its body is in (Expect: 100-continue,
				  * a framing refusal): that answer is the request's one */
};

/**
 * kvp_http_gate_new() - a gate for @cfg's limits (borrowed; outlives the gate), counting
 * into @m, its thread started; raises the soft open-file limit to the hard one (a relayed
 * connection is three descriptors: the client's and both ends of its pair)
 * Return: 0 or -errno (@err says why).
 */
int kvp_http_gate_new(struct kvp_http_gate **out, const struct kvp_http_config *cfg,
		      struct kvp_http_metrics *m, char *err, size_t cap);

/*
 * kvp_http_gate_add() - accept on listening socket @fd and hand its connections to @mhd
 * (started with MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC); @name for the log.  Takes
 * ownership of @fd on success.  Return: 0 or -errno.
 */
int kvp_http_gate_add(struct kvp_http_gate *g, int fd, struct MHD_Daemon *mhd, const char *name);

/* Close the listening sockets (SIGTERM); connections already accepted go on. */
void kvp_http_gate_stop_accepting(struct kvp_http_gate *g);

/* Stop the thread and close the connections it still holds (the client sockets and its
 * ends of the pairs: libmicrohttpd then closes its own). */
void kvp_http_gate_stop(struct kvp_http_gate *g);

/* Free; after kvp_http_gate_stop() and after every libmicrohttpd daemon stopped. */
void kvp_http_gate_free(struct kvp_http_gate *g);

/* MHD_CONNECTION_NOTIFY_STARTED / _CLOSED: @socket_context is the one the library keeps. */
void kvp_http_gate_started(struct kvp_http_gate *g, struct MHD_Connection *c,
			   void **socket_context);
void kvp_http_gate_closed(struct kvp_http_gate *g, void *socket_context);

/* The connection whose socket context is @ctx (NULL: none) entered @phase, now: HEAD
 * from NOTIFY_COMPLETED, after the request's last answer byte was written; EARLY
 * before the answer is queued, so the relay never writes a refusal behind it. */
void kvp_http_gate_phase(void *ctx, enum kvp_http_phase phase);

#endif /* KVP_IPC_HTTP_GATE_H */
