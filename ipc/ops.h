/* SPDX-License-Identifier: MIT */
/*
 * ops.h - private to ipc/: the server's state, shared by server.c (loop, connections,
 * output) and ops.c (the frame dispatch table and its handlers).
 *
 * Thread: the loop thread only.
 */
#ifndef KVP_IPC_OPS_H
#define KVP_IPC_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "ipc/conn.h"
#include "ipc/loop.h"
#include "ipc/proto.h"
#include "ipc/server.h"

#define KVP_WAKEUPS_MAX 8
/* Status connections at once; they live for one request each. */
#define KVP_STATUS_CONNS_MAX 16

/* Operations in user_data (loop.h). */
enum kvp_uop {
	KVP_UOP_ACCEPT = 1, /* idx: listener (0 request, 1 status) */
	KVP_UOP_RECV,	    /* idx, gen: connection */
	KVP_UOP_SEND,	    /* idx, gen: connection */
	KVP_UOP_LINGER,	    /* idx, gen: connection; its timer (idle, flush bounds) */
	KVP_UOP_WAKEUP,	    /* idx: wakeup slot */
	KVP_UOP_STOP,	    /* the stop eventfd */
	KVP_UOP_IGNORE,	    /* cancellations: nothing to do on completion */
	KVP_UOP_TICK,	    /* the idle sweep's timer */
	KVP_UOP_RETRY,	    /* idx: listener; re-arm its accept after running out of fds */
};

struct kvp_wakeup {
	int efd;
	void (*fn)(void *arg);
	void *arg;
	uint64_t val;
};

struct kvp_server {
	struct kvp_server_config cfg; /* paths point at the copies below */
	char *socket_path;
	char *status_path;
	struct kvp_server_ops ops;
	struct kvp_proto_limits lim;
	struct kvp_loop loop;
	int lfd[2];
	bool accept_armed[2];
	bool bound[2]; /* we created the socket file: unlink it at the end */
	int stop_efd;
	uint64_t stop_val;
	bool stopping;	 /* kvp_server_stop() seen: no more accepts */
	bool break_loop; /* return from the current run at the next turn */
	struct kvp_conn *conns;
	uint32_t n_slots;
	uint32_t free_head; /* free-slot list through next_free; n_slots = empty */
	uint32_t n_req_conns;
	uint32_t n_status_conns;
	struct kvp_wakeup wakeups[KVP_WAKEUPS_MAX];
	unsigned int n_wakeups;
	uint8_t *scratch; /* one encoded outgoing frame */
	size_t scratch_cap;
	int32_t *ids;		    /* aligned copy of a prompt's ids (max_prompt_tokens) */
	char *text;		    /* NUL-terminated copy of a prompt's text */
	struct kvp_proto_msg *msgs; /* a CHAT's messages (KVP_CHAT_MESSAGES_MAX) */
	struct kvp_server_stats st;
	int reserve_fd; /* /dev/null, closed to accept-and-refuse when fds run out */
	struct __kernel_timespec tick, retry[2];
};

/*
 * A handler gets a frame whose header passed kvp_proto_check_hdr(), whose type the
 * table lists as sent by clients and whose payload length lies in [min_len, max_len].
 * Return: 0 (the frame was handled, possibly by refusing its request), or the negative
 * value of kvp_srv_fail() after a fault that ends the connection.
 */
typedef int kvp_op_fn(struct kvp_server *srv, struct kvp_conn *c, const struct kvp_frame_hdr *hdr,
		      const uint8_t *payload);

struct kvp_op_def {
	const char *name;
	bool from_client;
	uint32_t min_len;
	uint32_t max_len;
	kvp_op_fn *fn;
};

extern const struct kvp_op_def kvp_op_defs[KVP_FRAME__COUNT];
int kvp_ops_check_table(void);

/* server.c services for the handlers */
kvp_conn_id kvp_srv_conn_id(const struct kvp_conn *c);
int kvp_srv_fail(struct kvp_server *srv, struct kvp_conn *c, int status, const char *why);
int kvp_srv_reply_error(struct kvp_server *srv, struct kvp_conn *c, uint64_t req_id, int status,
			const char *msg);
int kvp_srv_refuse(struct kvp_server *srv, struct kvp_conn *c, uint64_t req_id, int status,
		   const char *msg);
int kvp_srv_queue_welcome(struct kvp_server *srv, struct kvp_conn *c, const struct kvp_welcome *w,
			  const int *fds, unsigned int n_fds);

#endif /* KVP_IPC_OPS_H */
