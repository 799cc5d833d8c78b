/* SPDX-License-Identifier: MIT */
/*
 * gate.h - kvpool-http's own accept loop in front of libmicrohttpd: connection limits,
 * request-head deadlines and the framing checks of a connection's first request.
 *
 * libmicrohttpd 0.9.75 left alone stops accepting at its connection limit (new clients
 * wait in the backlog), counts only silence as a timeout, and answers some broken heads
 * twice (a malformed Content-Length) or reads them to a silent end (an unknown transfer
 * coding) before the application sees a thing.  So the gate accepts every connection
 * itself, keeps it until its first request head is complete (peeked with MSG_PEEK, not
 * read, so libmicrohttpd reads the same bytes), checks that head (head.h) and answers a
 * refusal itself, once, with the connection closed; a sound head is handed over with
 * MHD_add_connection().  It also closes connections at their deadlines (the header block
 * from the connection's start or the previous answer's end, the body after its headers)
 * whoever holds them (shutdown() of a connection libmicrohttpd holds, which it then
 * closes), enforces per_addr_conns and, at max_conns, makes room by closing the
 * connection that has waited longest for a request head.
 *
 * Thread: one gate thread; kvp_http_gate_started/closed/phase() are called from the
 * HTTP threads (libmicrohttpd's callbacks) and take the gate's lock.
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

/* Where a connection libmicrohttpd holds is in its current request. */
enum kvp_http_phase {
	KVP_HTTP_PHASE_HEAD = 0, /* waiting for a request line and headers */
	KVP_HTTP_PHASE_BODY,	 /* headers in, body being read */
	KVP_HTTP_PHASE_BUSY,	 /* request complete: being answered (no deadline) */
};

/**
 * kvp_http_gate_new() - a gate for @cfg's limits (borrowed; outlives the gate), counting
 * into @m, its thread started; raises the soft open-file limit to the hard one (max_conns
 * per address, plus the ones being refused, are descriptors)
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

/* Stop the thread and close the connections it still holds (not libmicrohttpd's). */
void kvp_http_gate_stop(struct kvp_http_gate *g);

/* Free; after kvp_http_gate_stop() and after every libmicrohttpd daemon stopped. */
void kvp_http_gate_free(struct kvp_http_gate *g);

/* MHD_CONNECTION_NOTIFY_STARTED / _CLOSED: @socket_context is the one the library keeps. */
void kvp_http_gate_started(struct kvp_http_gate *g, struct MHD_Connection *c,
			   void **socket_context);
void kvp_http_gate_closed(struct kvp_http_gate *g, void *socket_context);

/* The connection whose socket context is @ctx (NULL: none) entered @phase, now. */
void kvp_http_gate_phase(void *ctx, enum kvp_http_phase phase);

#endif /* KVP_IPC_HTTP_GATE_H */
