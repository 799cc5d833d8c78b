/* SPDX-License-Identifier: MIT */
/*
 * conn.h - one client connection of the server: peer credentials, input reassembly
 * buffer, bounded output queue, fds waiting to be passed, requests in flight.
 *
 * Thread: the loop thread only.
 */
#ifndef KVP_IPC_CONN_H
#define KVP_IPC_CONN_H

#include <stdalign.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <linux/time_types.h>

#include "ipc/server.h"

#define KVP_CONN_PASS_FDS_MAX 4

enum kvp_conn_kind {
	KVP_CONN_REQUEST = 0, /* request socket: HELLO, GENERATE, CANCEL */
	KVP_CONN_STATUS,      /* status socket: one request line, one report */
};

enum kvp_conn_state {
	KVP_CONN_FREE = 0, /* slot unused */
	KVP_CONN_OPEN,	   /* reading and writing */
	KVP_CONN_FLUSHING, /* reads stopped; closes once the output queue is sent */
	KVP_CONN_CLOSING,  /* shut down; the slot is freed when no operation is left */
};

/*
 * struct kvp_outq - bounded output queue: a byte ring of @cap bytes (allocated on first
 * use).  Bytes [head, head + used) modulo @cap are queued; the first @inflight of them
 * belong to the send in flight, which the kernel may be reading, so they are never
 * moved or overwritten until it completes.  Appends go after head + used.
 */
struct kvp_outq {
	uint8_t *buf;
	uint32_t cap;
	uint32_t head;
	uint32_t used;
	uint32_t inflight;
};

/* A request in flight on a connection. */
struct kvp_conn_req {
	uint64_t id;
	bool cancel_passed; /* its first CANCEL went to svc/; repeats are dropped */
};

/**
 * struct kvp_conn - a connection slot
 * @fd:          the socket, -1 when free
 * @gen:         generation, bumped when the slot is freed (24 bits used in handles)
 * @idx:         index of this slot
 * @recv_armed:  a multishot receive is active (more CQEs will come)
 * @helloed:     ops->hello ran, so ops->closed is owed exactly once
 * @closed_sent: ops->closed ran
 * @peer:        SO_PEERCRED, read on accept
 * @n_vocab:     from WELCOME, to check token ids (0: unchecked)
 * @in:          bytes received and not yet consumed as frames (@in_len of @in_cap)
 * @reqs:        requests in flight (@n_reqs, at most max_reqs_per_conn): the one set
 *               of them; svc/ keeps none of its own
 * @pass_fds:    dup()ed fds to attach (SCM_RIGHTS) to the next send, which starts at
 *               the first byte of WELCOME; closed once sent
 */
struct kvp_conn {
	int fd;
	uint32_t gen;
	uint32_t idx;
	uint8_t kind;
	uint8_t state;
	bool recv_armed;
	bool helloed;
	bool closed_sent;
	struct kvp_peer peer;
	uint64_t last_active_ns; /* last frame in, or last request ended (idle timeout) */
	uint32_t n_vocab;
	uint32_t refusals; /* requests refused in a row (max_refusals) */
	uint8_t *in;
	uint32_t in_len;
	uint32_t in_cap;
	struct kvp_outq out;
	struct kvp_conn_req *reqs;
	uint32_t n_reqs;
	int pass_fds[KVP_CONN_PASS_FDS_MAX];
	uint32_t n_pass_fds;
	uint32_t n_sent_fds;
	/* the sendmsg in flight reads these until it completes */
	struct msghdr msg;
	struct iovec iov[2];
	alignas(struct cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * KVP_CONN_PASS_FDS_MAX)];
	struct __kernel_timespec linger;
	uint32_t next_free;
};

void kvp_conn_reset(struct kvp_conn *c);
int kvp_conn_in_reserve(struct kvp_conn *c, uint32_t n, uint32_t max);

int kvp_outq_append(struct kvp_outq *q, const void *p, uint32_t n);
unsigned int kvp_outq_iov(const struct kvp_outq *q, struct iovec iov[2]);
void kvp_outq_consume(struct kvp_outq *q, uint32_t n);

int kvp_conn_req_add(struct kvp_conn *c, uint64_t req_id, uint32_t max);
bool kvp_conn_req_has(const struct kvp_conn *c, uint64_t req_id);
bool kvp_conn_req_del(struct kvp_conn *c, uint64_t req_id);
bool kvp_conn_req_cancel(struct kvp_conn *c, uint64_t req_id);

#endif /* KVP_IPC_CONN_H */
