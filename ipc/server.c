/* SPDX-License-Identifier: MIT */
/*
 * server.c - the request and status sockets on one io_uring loop (ipc/server.h).
 *
 * Per connection: one multishot receive into the provided-buffer ring (bytes are
 * copied into the connection's reassembly buffer and the buffer handed back at once),
 * at most one sendmsg in flight covering the queued bytes of the output ring (a short
 * write consumes what went and resubmits the rest), and on the first send the dup()ed
 * pool fds as SCM_RIGHTS.  The listeners use multishot accept; the stop eventfd and
 * svc/'s wakeup eventfds are reads on the same ring.
 *
 * Connection life: OPEN -> (FLUSHING: reads ignored, an ERROR is being sent, bounded by
 * a 1 s linger timer) -> CLOSING: shutdown(2) makes the pending receive and send
 * complete, and the slot is freed (fd closed, generation bumped) once neither is left.
 * ops->closed runs exactly once, when a connection that reached ops->hello leaves OPEN.
 * A kvp_conn_id is (generation << 32 | slot): handles of freed slots are refused.
 *
 * Thread: the loop thread runs everything except kvp_server_stop().  An io_uring request
 * belongs to the task that submitted it: its completion work runs on that task, and it
 * is cancelled when that task exits.  So nothing is submitted outside kvp_server_run*():
 * kvp_server_new() and kvp_server_add_wakeup() only queue SQEs, and the loop thread must
 * be the same for every run and outlive the last one.
 */
#include "ipc/server.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ipc/conn.h"
#include "ipc/loop.h"
#include "ipc/ops.h"
#include "ipc/proto.h"
#include "util/fault.h"
#include "util/time.h"

/* Defaults for zero config fields (server.h). */
#define DEF_MAX_FRAME (1u << 20)
#define DEF_MAX_CONNS 256u
#define DEF_MAX_REQS 64u
#define DEF_MAX_PROMPT 32768u
#define DEF_MAX_NEW 4096u
#define DEF_OUTQ (1u << 20)
#define DEF_MAX_REFUSALS 16u /* refused requests in a row before the connection closes */

#define RECV_BUFS 256u
#define RECV_BUF_SIZE 16384u
#define LINGER_MS 1000
/* A request connection must say HELLO, a status connection its request, within this. */
#define IDLE_MS 10000
/* The idle sweep runs this often at most (and at a quarter of the timeout if shorter). */
#define TICK_MAX_MS 1000u
/* Out of fds with no reserve left: try accepting again after this. */
#define RETRY_MS 100u
/* A status request is one short line ("json\n"). */
#define STATUS_REQ_MAX 64u
#define STATUS_OUT_MAX (16u << 20)

/* ---------------------------------------------------------------- helpers */

kvp_conn_id kvp_srv_conn_id(const struct kvp_conn *c)
{
	return (uint64_t)c->gen << 32 | c->idx;
}

static struct kvp_conn *conn_lookup(struct kvp_server *srv, kvp_conn_id id)
{
	uint32_t idx = (uint32_t)id;
	struct kvp_conn *c;

	if (idx >= srv->n_slots)
		return NULL;
	c = &srv->conns[idx];
	if (c->gen != (uint32_t)(id >> 32) || c->state != KVP_CONN_OPEN ||
	    c->kind != KVP_CONN_REQUEST || !c->helloed)
		return NULL;
	return c;
}

static struct io_uring_sqe *sqe_for(struct kvp_server *srv, uint32_t idx, uint32_t gen, uint32_t op)
{
	struct io_uring_sqe *sqe = kvp_loop_sqe(&srv->loop);

	if (sqe)
		io_uring_sqe_set_data64(sqe, kvp_ud_pack(idx, gen, op));
	return sqe;
}

static void cancel_op(struct kvp_server *srv, uint64_t ud)
{
	struct io_uring_sqe *sqe = sqe_for(srv, 0, 0, KVP_UOP_IGNORE);

	if (sqe) {
		io_uring_prep_cancel64(sqe, ud, 0);
		io_uring_sqe_set_data64(sqe, kvp_ud_pack(0, 0, KVP_UOP_IGNORE));
	}
}

/* ---------------------------------------------------------------- connection life */

static void call_closed(struct kvp_server *srv, struct kvp_conn *c)
{
	if (c->helloed && !c->closed_sent) {
		c->closed_sent = true;
		srv->ops.closed(srv->ops.ctx, kvp_srv_conn_id(c));
	}
}

/*
 * @c stops being OPEN: it no longer counts against the connection limits (its slot
 * is freed a little later, which is why there are more slots than max_conns) and
 * svc/ is told.
 */
static void conn_leave_open(struct kvp_server *srv, struct kvp_conn *c)
{
	if (c->kind == KVP_CONN_REQUEST)
		srv->n_req_conns--;
	else
		srv->n_status_conns--;
	call_closed(srv, c);
}

static void conn_release(struct kvp_server *srv, struct kvp_conn *c)
{
	if (c->state != KVP_CONN_CLOSING || c->recv_armed || c->out.inflight)
		return;
	close(c->fd);
	kvp_conn_reset(c);
	c->gen = (c->gen + 1) & 0xffffff;
	c->next_free = srv->free_head;
	srv->free_head = c->idx;
}

/* Stop everything on @c now; the slot is freed when its operations have completed. */
static void conn_close(struct kvp_server *srv, struct kvp_conn *c)
{
	if (c->state == KVP_CONN_CLOSING || c->state == KVP_CONN_FREE)
		return;
	if (c->state == KVP_CONN_OPEN)
		conn_leave_open(srv, c);
	c->state = KVP_CONN_CLOSING;
	/* wakes the pending receive (EOF) and a send blocked on a full socket (EPIPE) */
	shutdown(c->fd, SHUT_RDWR);
	if (c->recv_armed)
		cancel_op(srv, kvp_ud_pack(c->idx, c->gen, KVP_UOP_RECV));
	if (c->out.inflight)
		cancel_op(srv, kvp_ud_pack(c->idx, c->gen, KVP_UOP_SEND));
	conn_release(srv, c);
}

static void send_kick(struct kvp_server *srv, struct kvp_conn *c);

/*
 * One timer per arming (kvp_ud LINGER); on expiry on_timer() decides from the state
 * what it bounded.  The kernel copies @ms's timespec at submission, so c->linger is
 * reused for the next arming.
 */
static bool arm_timer(struct kvp_server *srv, struct kvp_conn *c, unsigned int ms)
{
	struct io_uring_sqe *sqe = sqe_for(srv, c->idx, c->gen, KVP_UOP_LINGER);

	if (!sqe)
		return false;
	c->linger = (struct __kernel_timespec){ .tv_sec = ms / 1000,
						.tv_nsec = (long long)(ms % 1000) * 1000000 };
	io_uring_prep_timeout(sqe, &c->linger, 0, 0);
	io_uring_sqe_set_data64(sqe, kvp_ud_pack(c->idx, c->gen, KVP_UOP_LINGER));
	return true;
}

/* Close once the output queue is sent, but no later than LINGER_MS from now. */
static void conn_flush_close(struct kvp_server *srv, struct kvp_conn *c)
{
	if (c->state != KVP_CONN_OPEN)
		return;
	conn_leave_open(srv, c);
	c->state = KVP_CONN_FLUSHING;
	if (!c->out.used) {
		conn_close(srv, c);
		return;
	}
	if (!arm_timer(srv, c, LINGER_MS)) {
		conn_close(srv, c);
		return;
	}
	send_kick(srv, c);
}

/* ---------------------------------------------------------------- output */

static void send_kick(struct kvp_server *srv, struct kvp_conn *c)
{
	struct io_uring_sqe *sqe;
	unsigned int n;

	if (c->out.inflight || !c->out.used || c->state == KVP_CONN_CLOSING)
		return;
	n = kvp_outq_iov(&c->out, c->iov);
	c->msg = (struct msghdr){ .msg_iov = c->iov, .msg_iovlen = n };
	if (c->n_pass_fds && !c->n_sent_fds) {
		struct cmsghdr *cm;

		c->msg.msg_control = c->ctl;
		c->msg.msg_controllen = CMSG_SPACE(sizeof(int) * c->n_pass_fds);
		cm = CMSG_FIRSTHDR(&c->msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * c->n_pass_fds);
		memcpy(CMSG_DATA(cm), c->pass_fds, sizeof(int) * c->n_pass_fds);
	}
	sqe = sqe_for(srv, c->idx, c->gen, KVP_UOP_SEND);
	if (!sqe) {
		conn_close(srv, c);
		return;
	}
	io_uring_prep_sendmsg(sqe, c->fd, &c->msg, MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, kvp_ud_pack(c->idx, c->gen, KVP_UOP_SEND));
	c->out.inflight = c->out.used;
	if (c->msg.msg_control)
		c->n_sent_fds = c->n_pass_fds;
}

static void on_send(struct kvp_server *srv, struct kvp_conn *c, int res)
{
	c->out.inflight = 0;
	if (c->state == KVP_CONN_CLOSING) {
		conn_release(srv, c);
		return;
	}
	if (res <= 0) {
		/* the peer is gone (EPIPE, ECONNRESET) */
		conn_close(srv, c);
		return;
	}
	kvp_outq_consume(&c->out, (uint32_t)res);
	if (c->n_sent_fds) {
		/* the fds went with the first byte: ours can go */
		for (uint32_t i = 0; i < c->n_pass_fds; i++)
			close(c->pass_fds[i]);
		c->n_pass_fds = c->n_sent_fds = 0;
	}
	if (c->out.used) {
		send_kick(srv, c);
		return;
	}
	if (c->state == KVP_CONN_FLUSHING)
		conn_close(srv, c);
}

/*
 * Encode one frame into srv->scratch with @enc and queue it.  A frame that does not fit
 * what is left of the output queue means the client stopped reading: disconnect.
 * Return: 0, or -ENOTCONN (the connection was closed).
 */
static int queue_scratch(struct kvp_server *srv, struct kvp_conn *c, size_t len)
{
	int r;

	if (len > UINT32_MAX)
		return -EMSGSIZE;
	r = kvp_outq_append(&c->out, srv->scratch, (uint32_t)len);
	if (r == -ENOBUFS) {
		srv->st.slow_disconnects++;
		conn_close(srv, c);
		return -ENOTCONN;
	}
	if (r)
		return r;
	srv->st.frames_out++;
	c->last_active_ns = kvp_now_ns();
	send_kick(srv, c);
	return 0;
}

static int scratch_reserve(struct kvp_server *srv, size_t len)
{
	uint8_t *nb;

	if (len <= srv->scratch_cap)
		return 0;
	nb = realloc(srv->scratch, len);
	if (!nb)
		return -ENOMEM;
	srv->scratch = nb;
	srv->scratch_cap = len;
	return 0;
}

static int queue_error(struct kvp_server *srv, struct kvp_conn *c, uint64_t req_id, int status,
		       const char *msg)
{
	size_t mlen = msg ? strnlen(msg, 1024) : 0;
	size_t len = kvp_proto_encode_error(NULL, 0, req_id, (uint32_t)status, msg, (uint32_t)mlen);

	if (scratch_reserve(srv, len))
		return -ENOMEM;
	kvp_proto_encode_error(srv->scratch, srv->scratch_cap, req_id, (uint32_t)status, msg,
			       (uint32_t)mlen);
	return queue_scratch(srv, c, len);
}

/**
 * kvp_srv_fail() - connection-level fault: ERROR (req_id 0), then close
 * @status: KVP_E_PROTO, KVP_E_VERSION, KVP_E_LIMIT, or why svc/ refused
 * @why:    static message sent to the client
 * Return: -ECONNABORTED, for handlers to pass on.
 */
int kvp_srv_fail(struct kvp_server *srv, struct kvp_conn *c, int status, const char *why)
{
	if (status == KVP_E_PROTO || status == KVP_E_VERSION || status == KVP_E_LIMIT)
		srv->st.proto_errors++;
	if (c->state == KVP_CONN_OPEN && queue_error(srv, c, 0, status, why) == 0)
		conn_flush_close(srv, c);
	else
		conn_close(srv, c);
	return -ECONNABORTED;
}

/* ERROR for one request, which is no longer in flight.  Return: 0 or -ENOTCONN. */
int kvp_srv_reply_error(struct kvp_server *srv, struct kvp_conn *c, uint64_t req_id, int status,
			const char *msg)
{
	kvp_conn_req_del(c, req_id);
	return kvp_srv_refuse(srv, c, req_id, status, msg);
}

/*
 * ERROR for a GENERATE refused before it was taken in flight.  The in-flight set is left
 * alone: if the client reused the id of a request still running, that one goes on and
 * its answers still reach the client.  Return: 0 or -ENOTCONN.
 */
int kvp_srv_refuse(struct kvp_server *srv, struct kvp_conn *c, uint64_t req_id, int status,
		   const char *msg)
{
	if (queue_error(srv, c, req_id, status, msg))
		return -ENOTCONN;
	/*
	 * the request's own fault, not a passing state (BUSY, SHUTDOWN) or an end the client
	 * asked for (CANCELLED): a client that sends nothing else is closed, so that a stream
	 * of refused frames costs it its connection, not the daemon its time
	 */
	if (status != KVP_E_INVALID && status != KVP_E_LIMIT && status != KVP_E_NOSPACE &&
	    status != KVP_E_DENIED)
		return 0;
	if (srv->cfg.max_refusals == UINT32_MAX || ++c->refusals < srv->cfg.max_refusals)
		return 0;
	srv->st.refusal_closes++;
	kvp_srv_fail(srv, c, KVP_E_LIMIT,
		     "too many refused requests in a row (server.max_refusals); closing");
	return -ENOTCONN;
}

/* WELCOME, the first bytes of the connection, with dup()s of @fds attached. */
int kvp_srv_queue_welcome(struct kvp_server *srv, struct kvp_conn *c, const struct kvp_welcome *w,
			  const int *fds, unsigned int n_fds)
{
	size_t len = kvp_proto_encode_welcome(NULL, 0, w);

	if (c->out.used || c->n_sent_fds)
		return -EPROTO;
	for (unsigned int i = 0; i < n_fds; i++) {
		int fd = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);

		if (fd < 0)
			return -errno;
		c->pass_fds[c->n_pass_fds++] = fd;
	}
	if (scratch_reserve(srv, len))
		return -ENOMEM;
	kvp_proto_encode_welcome(srv->scratch, srv->scratch_cap, w);
	return queue_scratch(srv, c, len);
}

/*
 * The connection of a reply of @len bytes to request @req_id, still in flight (the reply
 * does not end it), with the scratch buffer reserved for it; NULL with *@err set
 * (-ENOTCONN, -ENOENT, -EMSGSIZE, -ENOMEM) otherwise.
 */
static struct kvp_conn *reply_to(struct kvp_server *srv, kvp_conn_id conn, uint64_t req_id,
				 size_t len, int *err)
{
	struct kvp_conn *c = conn_lookup(srv, conn);

	if (!c)
		*err = -ENOTCONN;
	else if (!kvp_conn_req_has(c, req_id))
		*err = -ENOENT;
	else if (!len || len > c->out.cap)
		*err = -EMSGSIZE;
	else if (scratch_reserve(srv, len))
		*err = -ENOMEM;
	else
		return c;
	return NULL;
}

int kvp_server_send_tokens(struct kvp_server *srv, kvp_conn_id conn, uint64_t req_id,
			   const int32_t *tokens, uint32_t n_tokens, const char *text,
			   uint32_t text_len)
{
	return kvp_server_send_tokens_usage(srv, conn, req_id, tokens, n_tokens, text, text_len, -1,
					    NULL);
}

int kvp_server_send_ids(struct kvp_server *srv, kvp_conn_id conn, uint64_t req_id,
			const int32_t *ids, uint32_t n_ids, const char *text, uint32_t text_len)
{
	size_t len = kvp_proto_encode_ids(NULL, 0, req_id, ids, n_ids, text, text_len);
	struct kvp_conn *c;
	int r;

	c = reply_to(srv, conn, req_id, len, &r);
	if (!c)
		return r;
	kvp_proto_encode_ids(srv->scratch, srv->scratch_cap, req_id, ids, n_ids, text, text_len);
	return queue_scratch(srv, c, len);
}

int kvp_server_send_done(struct kvp_server *srv, kvp_conn_id conn, uint64_t req_id,
			 const struct kvp_usage *usage, const struct kvp_cache_usage *cu,
			 const struct kvp_spec_usage *su)
{
	struct kvp_conn *c = conn_lookup(srv, conn);
	size_t len = kvp_proto_encode_done(NULL, 0, req_id, usage, cu, su);

	if (!c)
		return -ENOTCONN;
	if (!kvp_conn_req_del(c, req_id))
		return -ENOENT;
	c->refusals = 0; /* a request served: the refusals are no longer in a row */
	if (scratch_reserve(srv, len))
		return -ENOMEM;
	kvp_proto_encode_done(srv->scratch, srv->scratch_cap, req_id, usage, cu, su);
	return queue_scratch(srv, c, len);
}

int kvp_server_send_lease(struct kvp_server *srv, kvp_conn_id conn, uint64_t req_id,
			  const struct kvp_lease *l, const struct kvp_lease_block *blocks)
{
	struct kvp_conn *c = conn_lookup(srv, conn);
	size_t len = kvp_proto_encode_lease(NULL, 0, req_id, l, blocks);

	if (!c)
		return -ENOTCONN;
	if (!len || len > c->out.cap)
		return -EMSGSIZE;
	if (!kvp_conn_req_del(c, req_id))
		return -ENOENT;
	c->refusals = 0; /* a request served: the refusals are no longer in a row */
	if (scratch_reserve(srv, len))
		return -ENOMEM;
	kvp_proto_encode_lease(srv->scratch, srv->scratch_cap, req_id, l, blocks);
	return queue_scratch(srv, c, len);
}

int kvp_server_send_logprobs(struct kvp_server *srv, kvp_conn_id conn, uint64_t req_id,
			     const struct kvp_logprobs *h, const struct kvp_logprob *entries)
{
	size_t len = kvp_proto_encode_logprobs(NULL, 0, req_id, h, entries);
	struct kvp_conn *c;
	int r;

	c = reply_to(srv, conn, req_id, len, &r);
	if (!c)
		return r;
	kvp_proto_encode_logprobs(srv->scratch, srv->scratch_cap, req_id, h, entries);
	return queue_scratch(srv, c, len);
}

int kvp_server_send_tokens_usage(struct kvp_server *srv, kvp_conn_id conn, uint64_t req_id,
				 const int32_t *tokens, uint32_t n_tokens, const char *text,
				 uint32_t text_len, int32_t cont, const struct kvp_usage *usage)
{
	size_t len = kvp_proto_encode_token(NULL, 0, req_id, tokens, n_tokens, text, text_len, cont,
					    usage);
	struct kvp_conn *c;
	int r;

	c = reply_to(srv, conn, req_id, len, &r);
	if (!c)
		return r;
	kvp_proto_encode_token(srv->scratch, srv->scratch_cap, req_id, tokens, n_tokens, text,
			       text_len, cont, usage);
	return queue_scratch(srv, c, len);
}

int kvp_server_send_error(struct kvp_server *srv, kvp_conn_id conn, uint64_t req_id,
			  enum kvp_status status, const char *msg)
{
	struct kvp_conn *c = conn_lookup(srv, conn);

	if (!c)
		return -ENOTCONN;
	if (!req_id) {
		kvp_srv_fail(srv, c, (int)status, msg);
		return 0;
	}
	if (!kvp_conn_req_has(c, req_id))
		return -ENOENT;
	return kvp_srv_reply_error(srv, c, req_id, (int)status, msg);
}

/* ---------------------------------------------------------------- input */

/* Parse and dispatch every whole frame in c->in. */
static void request_input(struct kvp_server *srv, struct kvp_conn *c)
{
	uint32_t off = 0;

	c->last_active_ns = kvp_now_ns();
	while (c->state == KVP_CONN_OPEN && c->in_len - off >= sizeof(struct kvp_frame_hdr)) {
		const struct kvp_op_def *d;
		struct kvp_frame_hdr hdr;
		const char *why = "";
		int r;

		r = kvp_proto_check_hdr(c->in + off, c->in_len - off, srv->cfg.max_frame_bytes,
					&hdr, &why);
		if (r) {
			kvp_srv_fail(srv, c, r, why);
			return;
		}
		d = &kvp_op_defs[hdr.type];
		if (!d->from_client) {
			kvp_srv_fail(srv, c, KVP_E_PROTO, "frame type not sent by clients");
			return;
		}
		if (hdr.len_bytes < d->min_len || hdr.len_bytes > d->max_len) {
			kvp_srv_fail(srv, c, KVP_E_PROTO,
				     "payload length wrong for the frame type");
			return;
		}
		if (c->in_len - off - sizeof(hdr) < hdr.len_bytes)
			break; /* the rest of the frame has not arrived yet */
		srv->st.frames_in++;
		/* util/fault.h: "GENERATE/alloc" fails allocations made handling a GENERATE */
		KVP_FAULT_SCOPE_ENTER(d->name);
		d->fn(srv, c, &hdr, c->in + off + sizeof(hdr));
		KVP_FAULT_SCOPE_LEAVE();
		off += (uint32_t)sizeof(hdr) + hdr.len_bytes;
	}
	if (c->state != KVP_CONN_OPEN) {
		c->in_len = 0;
		return;
	}
	memmove(c->in, c->in + off, c->in_len - off);
	c->in_len -= off;
}

static int status_render(struct kvp_server *srv, const struct kvp_peer *peer,
			 enum kvp_status_fmt fmt, char **out)
{
	size_t cap = 65536;
	char *buf = NULL;

	for (;;) {
		char *nb = realloc(buf, cap);
		int r;

		if (!nb) {
			free(buf);
			return -ENOMEM;
		}
		buf = nb;
		r = srv->ops.status(srv->ops.ctx, peer, fmt, buf, cap);
		if (r >= 0 && (size_t)r <= cap) {
			*out = buf;
			return r;
		}
		if (r != -ENOSPC || cap >= STATUS_OUT_MAX) {
			free(buf);
			return r < 0 ? r : -EOVERFLOW;
		}
		cap *= 2;
	}
}

/* A status connection: one request line, then the report, then close. */
static void status_input(struct kvp_server *srv, struct kvp_conn *c, bool eof)
{
	static const char bad[] =
		"{\"error\":\"unknown status request; send json, prom or flush-tier\"}\n";
	static const char fail[] = "{\"error\":\"status report failed\"}\n";
	enum kvp_status_fmt fmt = KVP_STATUS_JSON;
	char line[STATUS_REQ_MAX + 1];
	char *nl, *report = NULL;
	const char *out;
	size_t n;
	int len;

	if (c->state != KVP_CONN_OPEN)
		return;
	if (!c->in_len) {
		/*
		 * Nothing was asked (c->in may still be NULL): a peer that shut its side
		 * without a line, e.g. another kvpoold probing whether the socket is live.
		 */
		if (eof)
			conn_close(srv, c);
		return;
	}
	nl = memchr(c->in, '\n', c->in_len);
	if (!nl && !eof && c->in_len < STATUS_REQ_MAX)
		return; /* wait for the rest of the line */
	n = nl ? (size_t)(nl - (char *)c->in) : c->in_len;
	if (n > STATUS_REQ_MAX)
		n = STATUS_REQ_MAX;
	memcpy(line, c->in, n);
	while (n && (line[n - 1] == '\r' || line[n - 1] == ' '))
		n--;
	line[n] = 0;
	if (!strcmp(line, "prom")) {
		fmt = KVP_STATUS_PROM;
	} else if (!strcmp(line, "flush-tier")) {
		fmt = KVP_STATUS_FLUSH_TIER;
	} else if (strcmp(line, "json") && n) {
		out = bad;
		len = (int)sizeof(bad) - 1;
		goto queue;
	}
	len = status_render(srv, &c->peer, fmt, &report);
	out = report;
	if (len < 0) {
		out = fail;
		len = (int)sizeof(fail) - 1;
	}
queue:
	c->in_len = 0;
	c->out.cap = (uint32_t)len;
	if (len && kvp_outq_append(&c->out, out, (uint32_t)len)) {
		free(report);
		conn_close(srv, c);
		return;
	}
	free(report);
	conn_flush_close(srv, c);
}

static void rearm_recv(struct kvp_server *srv, struct kvp_conn *c)
{
	struct io_uring_sqe *sqe = sqe_for(srv, c->idx, c->gen, KVP_UOP_RECV);

	if (!sqe) {
		conn_close(srv, c);
		return;
	}
	kvp_loop_prep_recv(&srv->loop, sqe, c->fd);
	io_uring_sqe_set_data64(sqe, kvp_ud_pack(c->idx, c->gen, KVP_UOP_RECV));
	c->recv_armed = true;
}

static void on_recv(struct kvp_server *srv, struct kvp_conn *c, int res, uint32_t flags)
{
	const uint8_t *buf;
	uint32_t bid = 0;
	uint32_t max_in = srv->cfg.max_frame_bytes + RECV_BUF_SIZE;

	c->recv_armed = !!(flags & IORING_CQE_F_MORE);
	buf = kvp_loop_buf(&srv->loop, flags, &bid);
	if (res > 0 && buf && c->state == KVP_CONN_OPEN) {
		if (kvp_conn_in_reserve(c, (uint32_t)res, max_in)) {
			kvp_srv_fail(srv, c, KVP_E_INTERNAL, "out of memory");
		} else {
			memcpy(c->in + c->in_len, buf, (size_t)res);
			c->in_len += (uint32_t)res;
			if (c->kind == KVP_CONN_REQUEST)
				request_input(srv, c);
			else
				status_input(srv, c, false);
		}
	}
	if (buf)
		kvp_loop_buf_recycle(&srv->loop, bid);

	if (c->state == KVP_CONN_CLOSING) {
		conn_release(srv, c);
		return;
	}
	if (c->state != KVP_CONN_OPEN)
		return; /* FLUSHING: input is ignored; the linger timer bounds the wait */
	if (res == 0) {
		/* the client closed or shut down its side */
		if (c->kind == KVP_CONN_STATUS) {
			status_input(srv, c, true);
			return;
		}
		if (c->in_len) {
			kvp_srv_fail(srv, c, KVP_E_PROTO, "truncated frame");
			return;
		}
		conn_close(srv, c);
		return;
	}
	if (res < 0 && res != -ENOBUFS) {
		conn_close(srv, c);
		return;
	}
	if (!c->recv_armed)
		rearm_recv(srv, c); /* -ENOBUFS or a multishot the kernel ended */
}

/* ---------------------------------------------------------------- accept */

static void arm_accept(struct kvp_server *srv, unsigned int which)
{
	struct io_uring_sqe *sqe;

	if (srv->lfd[which] < 0 || srv->stopping)
		return;
	sqe = sqe_for(srv, which, 0, KVP_UOP_ACCEPT);
	if (!sqe)
		return;
	io_uring_prep_multishot_accept(sqe, srv->lfd[which], NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(sqe, kvp_ud_pack(which, 0, KVP_UOP_ACCEPT));
	srv->accept_armed[which] = true;
}

/* Over the connection limit: tell the client why, without a slot or the ring. */
static void refuse(struct kvp_server *srv, int fd, int status, const char *msg)
{
	uint8_t frame[256];
	size_t len = kvp_proto_encode_error(frame, sizeof(frame), 0, (uint32_t)status, msg,
					    (uint32_t)strlen(msg));

	if (len <= sizeof(frame))
		(void)!send(fd, frame, len, MSG_DONTWAIT | MSG_NOSIGNAL);
	shutdown(fd, SHUT_WR);
	close(fd);
	srv->st.conns_refused++;
}

/* Request connections of @uid open now. */
static uint32_t conns_of_uid(const struct kvp_server *srv, uid_t uid)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < srv->n_slots; i++) {
		const struct kvp_conn *c = &srv->conns[i];

		n += c->state == KVP_CONN_OPEN && c->kind == KVP_CONN_REQUEST && c->peer.uid == uid;
	}
	return n;
}

static bool arm_retry(struct kvp_server *srv, unsigned int which)
{
	struct io_uring_sqe *sqe = sqe_for(srv, which, 0, KVP_UOP_RETRY);

	if (!sqe)
		return false;
	srv->retry[which] = (struct __kernel_timespec){ .tv_nsec = RETRY_MS * 1000000ll };
	io_uring_prep_timeout(sqe, &srv->retry[which], 0, 0);
	io_uring_sqe_set_data64(sqe, kvp_ud_pack(which, 0, KVP_UOP_RETRY));
	return true;
}

/*
 * Out of file descriptors: the connections waiting in the backlog would hang there
 * unanswered, and a re-armed accept would fail at once, over and over.  So the reserve
 * fd is given up for a moment to take each waiting connection and answer it ERROR
 * KVP_E_BUSY (documented: try later), then taken back.  Return: whether accept may be
 * re-armed now (else a short timer re-arms it).
 */
static bool refuse_backlog(struct kvp_server *srv, unsigned int which)
{
	int lfd = srv->lfd[which];

	for (unsigned int n = 0; n < 64 && srv->reserve_fd >= 0; n++) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		int fd;

		if (poll(&p, 1, 0) <= 0)
			break;
		close(srv->reserve_fd);
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd >= 0) {
			srv->st.conns_refused_fds++;
			if (which == 1) {
				close(fd);
				srv->st.conns_refused++;
			} else {
				refuse(srv, fd, KVP_E_BUSY,
				       "daemon out of file descriptors; try later");
			}
		}
		srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			break;
	}
	if (srv->reserve_fd < 0)
		srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	return srv->reserve_fd >= 0;
}

static void on_accept(struct kvp_server *srv, unsigned int which, int res, uint32_t flags)
{
	struct kvp_conn *c;
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	bool status = which == 1;

	srv->accept_armed[which] = !!(flags & IORING_CQE_F_MORE);
	if (res >= 0 && getsockopt(res, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
		close(res);
		srv->st.conns_refused++;
	} else if (res >= 0) {
		if (srv->stopping) {
			refuse(srv, res, KVP_E_SHUTDOWN, "daemon shutting down");
		} else if (status ? srv->n_status_conns >= KVP_STATUS_CONNS_MAX :
				    srv->n_req_conns >= srv->cfg.max_conns) {
			if (status) {
				close(res);
				srv->st.conns_refused++;
			} else {
				refuse(srv, res, KVP_E_BUSY, "too many connections");
			}
		} else if (!status && srv->cfg.max_conns_per_uid &&
			   conns_of_uid(srv, cred.uid) >= srv->cfg.max_conns_per_uid) {
			char msg[128];

			snprintf(
				msg, sizeof(msg),
				"too many connections from uid %ld (server.max_conns_per_uid = %u)",
				(long)cred.uid, srv->cfg.max_conns_per_uid);
			srv->st.conns_refused_uid++;
			refuse(srv, res, KVP_E_BUSY, msg);
		} else if (srv->free_head == srv->n_slots) {
			refuse(srv, res, KVP_E_BUSY, "too many connections closing");
		} else {
			c = &srv->conns[srv->free_head];
			srv->free_head = c->next_free;
			c->fd = res;
			c->kind = status ? KVP_CONN_STATUS : KVP_CONN_REQUEST;
			c->state = KVP_CONN_OPEN;
			c->peer = (struct kvp_peer){ .pid = cred.pid,
						     .uid = cred.uid,
						     .gid = cred.gid };
			c->last_active_ns = kvp_now_ns();
			c->out.cap = srv->cfg.outq_bytes;
			if (status) {
				srv->n_status_conns++;
			} else {
				srv->n_req_conns++;
				srv->st.conns_total++;
			}
			rearm_recv(srv, c);
			if (c->state == KVP_CONN_OPEN && !arm_timer(srv, c, IDLE_MS))
				conn_close(srv, c);
		}
	}
	if (srv->accept_armed[which])
		return;
	if (srv->stopping || res == -ECANCELED)
		return;
	if ((res == -EMFILE || res == -ENFILE) && !refuse_backlog(srv, which)) {
		if (!arm_retry(srv, which))
			arm_accept(srv, which);
		return;
	}
	arm_accept(srv, which); /* other errors end a multishot accept too: re-arm */
}

/* ---------------------------------------------------------------- eventfds */

static void arm_read(struct kvp_server *srv, int fd, uint64_t *val, uint32_t idx, uint32_t op)
{
	struct io_uring_sqe *sqe = sqe_for(srv, idx, 0, op);

	if (!sqe)
		return;
	io_uring_prep_read(sqe, fd, val, sizeof(*val), 0);
	io_uring_sqe_set_data64(sqe, kvp_ud_pack(idx, 0, op));
}

/*
 * Only an old kernel completes an eventfd read at once with -EAGAIN (a non-blocking
 * fd); then wait for POLLIN first, linked to the read, instead of spinning.
 */
static void arm_read_after_poll(struct kvp_server *srv, int fd, uint64_t *val, uint32_t idx,
				uint32_t op)
{
	struct io_uring_sqe *sqe = sqe_for(srv, 0, 0, KVP_UOP_IGNORE);

	if (!sqe)
		return;
	io_uring_prep_poll_add(sqe, fd, POLLIN);
	io_uring_sqe_set_data64(sqe, kvp_ud_pack(0, 0, KVP_UOP_IGNORE));
	sqe->flags |= IOSQE_IO_LINK;
	arm_read(srv, fd, val, idx, op);
}

static void on_stop(struct kvp_server *srv, int res)
{
	if (res == -EAGAIN) {
		arm_read_after_poll(srv, srv->stop_efd, &srv->stop_val, 0, KVP_UOP_STOP);
		return;
	}
	if (res < 0)
		return; /* the ring is going away */
	srv->break_loop = true;
	if (!srv->stopping) {
		/*
		 * Close the listeners now: once the cancel (by user_data, so a reused fd
		 * number is never hit) has dropped the accept's file reference, connects
		 * are refused by the kernel instead of waiting in a backlog nobody serves.
		 */
		srv->stopping = true;
		for (unsigned int i = 0; i < 2; i++) {
			if (srv->accept_armed[i])
				cancel_op(srv, kvp_ud_pack(i, 0, KVP_UOP_ACCEPT));
			if (srv->lfd[i] >= 0)
				close(srv->lfd[i]);
			srv->lfd[i] = -1;
		}
	}
	/* re-armed: a later stop ends a kvp_server_run_for() early */
	arm_read(srv, srv->stop_efd, &srv->stop_val, 0, KVP_UOP_STOP);
}

static void on_wakeup(struct kvp_server *srv, uint32_t idx, int res)
{
	struct kvp_wakeup *w;

	if (idx >= srv->n_wakeups)
		return;
	w = &srv->wakeups[idx];
	if (res == -EAGAIN) {
		arm_read_after_poll(srv, w->efd, &w->val, idx, KVP_UOP_WAKEUP);
		return;
	}
	if (res < 0)
		return; /* the ring is going away, or @efd is no eventfd */
	arm_read(srv, w->efd, &w->val, idx, KVP_UOP_WAKEUP);
	w->fn(w->arg);
}

/* ---------------------------------------------------------------- idle sweep */

static void arm_tick(struct kvp_server *srv)
{
	unsigned int ms = srv->cfg.idle_timeout_ms / 4;
	struct io_uring_sqe *sqe;

	if (!srv->cfg.idle_timeout_ms)
		return;
	ms = ms < 1 ? 1 : ms > TICK_MAX_MS ? TICK_MAX_MS : ms;
	sqe = sqe_for(srv, 0, 0, KVP_UOP_TICK);
	if (!sqe)
		return;
	srv->tick = (struct __kernel_timespec){ .tv_sec = ms / 1000,
						.tv_nsec = (long long)(ms % 1000) * 1000000 };
	io_uring_prep_timeout(sqe, &srv->tick, 0, 0);
	io_uring_sqe_set_data64(sqe, kvp_ud_pack(0, 0, KVP_UOP_TICK));
}

/*
 * Close the request connections that said HELLO and have been idle for idle_timeout_ms:
 * nothing in flight, nothing queued to send, no frame either way.  So a client that
 * opens connections and sits on them cannot hold max_conns (or its uid's share) forever.
 */
static void on_tick(struct kvp_server *srv, int res)
{
	uint64_t now = kvp_now_ns(), idle = (uint64_t)srv->cfg.idle_timeout_ms * 1000000u;
	char msg[96];

	if (res != -ETIME)
		return; /* cancelled: the ring is going away */
	snprintf(msg, sizeof(msg),
		 "connection idle for %u ms with nothing in flight (server.idle_timeout_ms)",
		 srv->cfg.idle_timeout_ms);
	for (uint32_t i = 0; i < srv->n_slots; i++) {
		struct kvp_conn *c = &srv->conns[i];

		if (c->state != KVP_CONN_OPEN || c->kind != KVP_CONN_REQUEST || !c->helloed ||
		    c->n_reqs || c->out.used || now - c->last_active_ns < idle)
			continue;
		srv->st.idle_closes++;
		kvp_srv_fail(srv, c, KVP_E_BUSY, msg);
	}
	arm_tick(srv);
}

/* ---------------------------------------------------------------- dispatch */

/* A connection's timer expired: end what it bounded, if that is still going on. */
static void on_timer(struct kvp_server *srv, struct kvp_conn *c)
{
	if (c->state == KVP_CONN_FLUSHING)
		conn_close(srv, c); /* the client does not read its ERROR or report */
	else if (c->state == KVP_CONN_OPEN && c->kind == KVP_CONN_STATUS)
		conn_close(srv, c); /* no status request line */
	else if (c->state == KVP_CONN_OPEN && !c->helloed)
		kvp_srv_fail(srv, c, KVP_E_PROTO, "no HELLO within 10 s");
}

static void on_cqe(void *arg, uint64_t ud, int res, uint32_t flags)
{
	struct kvp_server *srv = arg;
	uint32_t idx = kvp_ud_idx(ud), op = kvp_ud_op(ud);
	struct kvp_conn *c = NULL;

	if (op == KVP_UOP_RECV || op == KVP_UOP_SEND || op == KVP_UOP_LINGER) {
		if (idx >= srv->n_slots || srv->conns[idx].gen != kvp_ud_gen(ud) ||
		    srv->conns[idx].state == KVP_CONN_FREE) {
			/* a stale completion: give back a buffer it may hold, nothing else */
			uint32_t bid;

			if (op == KVP_UOP_RECV && kvp_loop_buf(&srv->loop, flags, &bid))
				kvp_loop_buf_recycle(&srv->loop, bid);
			return;
		}
		c = &srv->conns[idx];
	}
	switch (op) {
	case KVP_UOP_ACCEPT:
		if (idx < 2)
			on_accept(srv, idx, res, flags);
		break;
	case KVP_UOP_RECV:
		on_recv(srv, c, res, flags);
		break;
	case KVP_UOP_SEND:
		on_send(srv, c, res);
		break;
	case KVP_UOP_LINGER:
		on_timer(srv, c);
		break;
	case KVP_UOP_WAKEUP:
		on_wakeup(srv, idx, res);
		break;
	case KVP_UOP_STOP:
		on_stop(srv, res);
		break;
	case KVP_UOP_TICK:
		on_tick(srv, res);
		break;
	case KVP_UOP_RETRY:
		if (idx < 2 && !srv->accept_armed[idx] && !srv->stopping)
			arm_accept(srv, idx);
		break;
	default:
		break;
	}
}

static int run_until(struct kvp_server *srv, int64_t deadline_ns)
{
	srv->break_loop = false;
	while (!srv->break_loop) {
		int timeout = -1, r;

		if (deadline_ns) {
			int64_t now = (int64_t)kvp_now_ns();

			if (now >= deadline_ns)
				break;
			timeout = (int)((deadline_ns - now + 999999) / 1000000);
		}
		r = kvp_loop_wait(&srv->loop, timeout);
		if (r)
			return r;
		kvp_loop_dispatch(&srv->loop, on_cqe, srv);
	}
	srv->break_loop = false;
	return io_uring_submit(&srv->loop.ring) < 0 ? -EIO : 0;
}

int kvp_server_run(struct kvp_server *srv)
{
	return run_until(srv, 0);
}

int kvp_server_run_for(struct kvp_server *srv, unsigned int timeout_ms)
{
	return run_until(srv, (int64_t)kvp_now_ns() + (int64_t)timeout_ms * 1000000 + 1);
}

void kvp_server_stop(struct kvp_server *srv)
{
	uint64_t one = 1;

	/* async-signal-safe: one write(2) */
	(void)!write(srv->stop_efd, &one, sizeof(one));
}

int kvp_server_add_wakeup(struct kvp_server *srv, int efd, void (*fn)(void *arg), void *arg)
{
	struct kvp_wakeup *w;

	if (efd < 0 || !fn)
		return -EINVAL;
	if (srv->n_wakeups == KVP_WAKEUPS_MAX)
		return -ENOSPC;
	w = &srv->wakeups[srv->n_wakeups];
	*w = (struct kvp_wakeup){ .efd = efd, .fn = fn, .arg = arg };
	arm_read(srv, efd, &w->val, srv->n_wakeups, KVP_UOP_WAKEUP); /* submitted by run */
	srv->n_wakeups++;
	return 0;
}

void kvp_server_get_stats(const struct kvp_server *srv, struct kvp_server_stats *st)
{
	*st = srv->st;
	st->conns_open = srv->n_req_conns;
}

/* ---------------------------------------------------------------- setup */

/*
 * Bind @path as a listening socket, mode 0660, group @gid.  The bind happens under
 * umask 0177 so the socket is never more open than 0600 before chown and chmod; umask
 * is process-wide, which is why kvp_server_new() belongs before other threads start.
 * A stale socket file is replaced, a live one (something answers) is -EADDRINUSE.
 */
static int listen_unix(const char *path, gid_t gid, mode_t mode, int *out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	mode_t old;
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	if (lstat(path, &st) == 0) {
		int probe;

		if (!S_ISSOCK(st.st_mode))
			return -EEXIST;
		probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0) {
			r = connect(probe, (struct sockaddr *)&sa, sizeof(sa));
			close(probe);
			if (r == 0)
				return -EADDRINUSE;
		}
		if (unlink(path) < 0)
			return -errno;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	old = umask(0177);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0) {
		r = -errno;
		goto err_close;
	}
	if ((gid != (gid_t)-1 && chown(path, (uid_t)-1, gid) < 0) || chmod(path, mode) < 0 ||
	    listen(fd, 512) < 0) {
		r = -errno;
		goto err_unlink;
	}
	*out = fd;
	return 0;

err_unlink:
	unlink(path);
err_close:
	close(fd);
	return r;
}

static int config_fill(struct kvp_server_config *c)
{
	if (!c->socket_path || !*c->socket_path)
		return -EINVAL;
	if (!c->max_frame_bytes)
		c->max_frame_bytes = DEF_MAX_FRAME;
	if (!c->max_conns)
		c->max_conns = DEF_MAX_CONNS;
	if (!c->max_reqs_per_conn)
		c->max_reqs_per_conn = DEF_MAX_REQS;
	if (!c->max_prompt_tokens)
		c->max_prompt_tokens = DEF_MAX_PROMPT;
	if (!c->max_new_tokens)
		c->max_new_tokens = DEF_MAX_NEW;
	if (!c->outq_bytes)
		c->outq_bytes = DEF_OUTQ;
	if (!c->max_refusals)
		c->max_refusals = DEF_MAX_REFUSALS;
	if (c->max_frame_bytes < 256 || c->max_frame_bytes > (64u << 20) || c->max_conns > 65536 ||
	    c->max_reqs_per_conn > 4096 || c->max_prompt_tokens > (16u << 20) ||
	    c->outq_bytes < 4096 || c->outq_bytes > (1u << 30))
		return -EINVAL;
	return 0;
}

/* What kvp_server_new() allocates besides the server itself (NULLs are fine). */
static void free_arrays(struct kvp_server *srv)
{
	free(srv->socket_path);
	free(srv->status_path);
	free(srv->conns);
	free(srv->ids);
	free(srv->text);
	free(srv->msgs);
	free(srv->scratch);
}

int kvp_server_new(struct kvp_server **out, const struct kvp_server_config *cfg,
		   const struct kvp_server_ops *ops)
{
	struct kvp_server *srv;
	int r;

	if (!ops->hello || !ops->generate || !ops->cancel || !ops->closed || !ops->status)
		return -EINVAL;
	r = kvp_ops_check_table();
	if (r)
		return r;
	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	srv->lfd[0] = srv->lfd[1] = srv->stop_efd = srv->reserve_fd = -1;
	srv->cfg = *cfg;
	srv->ops = *ops;
	r = config_fill(&srv->cfg);
	if (r)
		goto err_free;
	srv->lim = (struct kvp_proto_limits){ .max_frame_bytes = srv->cfg.max_frame_bytes,
					      .max_prompt_tokens = srv->cfg.max_prompt_tokens,
					      .max_new_tokens = srv->cfg.max_new_tokens,
					      .max_text_bytes = srv->cfg.max_text_bytes };
	r = -ENOMEM;
	srv->socket_path = strdup(cfg->socket_path);
	srv->status_path = cfg->status_path ? strdup(cfg->status_path) : NULL;
	/* twice the limits: slots of closed connections are freed only when their
	 * last completion arrives */
	srv->n_slots = 2 * (srv->cfg.max_conns + KVP_STATUS_CONNS_MAX);
	srv->conns = calloc(srv->n_slots, sizeof(*srv->conns));
	srv->ids = malloc((size_t)srv->cfg.max_prompt_tokens * sizeof(int32_t));
	/* a text prompt is bounded by max_text_bytes and the frame, not by max_prompt_tokens */
	srv->text = malloc(
		(srv->cfg.max_text_bytes && srv->cfg.max_text_bytes < srv->cfg.max_frame_bytes ?
			 (size_t)srv->cfg.max_text_bytes :
			 (size_t)srv->cfg.max_frame_bytes) +
		1);
	srv->msgs = malloc(KVP_CHAT_MESSAGES_MAX * sizeof(*srv->msgs));
	if (!srv->socket_path || (cfg->status_path && !srv->status_path) || !srv->conns ||
	    !srv->ids || !srv->text || !srv->msgs)
		goto err_arrays;
	srv->cfg.socket_path = srv->socket_path;
	srv->cfg.status_path = srv->status_path;
	for (uint32_t i = 0; i < srv->n_slots; i++) {
		srv->conns[i].fd = -1;
		srv->conns[i].idx = i;
		srv->conns[i].next_free = i + 1;
	}
	srv->free_head = 0;

	srv->stop_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); /* never blocks a signal handler */
	if (srv->stop_efd < 0) {
		r = -errno;
		goto err_arrays;
	}
	r = kvp_loop_init(&srv->loop, 256, 8192, RECV_BUFS, RECV_BUF_SIZE);
	if (r)
		goto err_stop;
	r = listen_unix(srv->socket_path, cfg->socket_gid, 0660, &srv->lfd[0]);
	if (r)
		goto err_loop;
	srv->bound[0] = true;
	if (srv->status_path) {
		/* operators' only: its group, or nobody but the daemon's user (and root) */
		r = listen_unix(srv->status_path, cfg->status_gid,
				cfg->status_gid == (gid_t)-1 ? 0600 : 0660, &srv->lfd[1]);
		if (r)
			goto err_listen;
		srv->bound[1] = true;
	}
	/* the fd that lets an accept answer BUSY when the process runs out of fds */
	srv->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	arm_accept(srv, 0);
	arm_accept(srv, 1);
	arm_read(srv, srv->stop_efd, &srv->stop_val, 0, KVP_UOP_STOP);
	arm_tick(srv);
	/* not submitted here: see "Thread" at the top */
	*out = srv;
	return 0;

err_listen:
	close(srv->lfd[0]);
	unlink(srv->socket_path);
err_loop:
	kvp_loop_deinit(&srv->loop);
err_stop:
	close(srv->stop_efd);
err_arrays:
	free_arrays(srv);
err_free:
	free(srv);
	return r;
}

void kvp_server_free(struct kvp_server *srv)
{
	if (!srv)
		return;
	for (uint32_t i = 0; srv->conns && i < srv->n_slots; i++) {
		struct kvp_conn *c = &srv->conns[i];

		if (c->state == KVP_CONN_FREE)
			continue;
		call_closed(srv, c);
		shutdown(c->fd, SHUT_RDWR);
	}
	/* the ring goes first: no operation may still point into the buffers below */
	kvp_loop_deinit(&srv->loop);
	for (uint32_t i = 0; srv->conns && i < srv->n_slots; i++) {
		struct kvp_conn *c = &srv->conns[i];

		if (c->state == KVP_CONN_FREE)
			continue;
		close(c->fd);
		kvp_conn_reset(c);
	}
	for (unsigned int i = 0; i < 2; i++) {
		const char *path = i ? srv->status_path : srv->socket_path;

		if (srv->lfd[i] >= 0)
			close(srv->lfd[i]);
		if (srv->bound[i])
			unlink(path);
	}
	if (srv->stop_efd >= 0)
		close(srv->stop_efd);
	if (srv->reserve_fd >= 0)
		close(srv->reserve_fd);
	free_arrays(srv);
	free(srv);
}
