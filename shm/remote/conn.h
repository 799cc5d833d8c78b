/* SPDX-License-Identifier: MIT */
/*
 * conn.h - one connection to the store: a hiredis context in non-blocking mode, driven
 * by the caller's poll loop, with deadlines on every wait.
 *
 * hiredis formats the commands (redisAppendCommandArgv) and parses the replies (its
 * reader); this file moves the bytes, so no wait is ever longer than its deadline:
 *
 *	DOWN --open--> CONNECTING --writable, SO_ERROR 0--> HANDSHAKE --AUTH OK, PONG--> READY
 *
 * The handshake (AUTH user password when there is a password, then PING) is queued at
 * open, so it leaves with the first write; PING's answer also gives a round-trip time.
 * Commands may be appended in any state but DOWN: they are sent after the handshake's.
 *
 * Deadlines: the connect must complete within connect_timeout; the handshake within
 * op_timeout; and whenever replies are owed, some byte must arrive at least every
 * op_timeout (a stopped or wedged store is found out in op_timeout, however long the
 * transfer in progress).  kvp_rconn_timeout_ns() gives the next one for poll().
 * Memory: a reply larger than @max_reply_bytes is a protocol error (a store cannot make
 * the reader buffer grow without bound).
 *
 * Errors close nothing by themselves: every call that fails returns -errno and leaves
 * @errstr; the caller closes (kvp_rconn_close()) and decides what it means.
 *
 * Thread: one connection belongs to one thread.  That thread must block SIGPIPE (or
 * ignore it): hiredis writes with write(2), and a write to a closed socket would kill
 * the process; a SIGPIPE left pending by such a write is consumed here.
 */
#ifndef KVP_SHM_REMOTE_CONN_H
#define KVP_SHM_REMOTE_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shm/remote/config.h"

struct redisContext;
struct redisReply;

enum kvp_rconn_state {
	KVP_RCONN_DOWN = 0,
	KVP_RCONN_CONNECTING = 1,
	KVP_RCONN_HANDSHAKE = 2,
	KVP_RCONN_READY = 3,
};

/**
 * struct kvp_rconn - one connection
 * @ctx:             the hiredis context (NULL when DOWN)
 * @state:           enum kvp_rconn_state
 * @hs_owed:         handshake replies still to come
 * @owed:            replies owed for the caller's commands
 * @connect_timeout_ns, @op_timeout_ns: see above
 * @max_reply_bytes: largest reply accepted
 * @deadline_ns:     end of the connect or handshake
 * @last_rx_ns:      last byte received (or when replies started to be owed)
 * @sent_ns:         when the handshake was sent (for @rtt_ns)
 * @rtt_ns:          round trip of the handshake's PING
 * @rx_bytes:        bytes received since open
 * @errstr:          what the last failure was
 */
struct kvp_rconn {
	struct redisContext *ctx;
	uint32_t state;
	uint32_t hs_owed;
	uint32_t owed;
	uint64_t connect_timeout_ns;
	uint64_t op_timeout_ns;
	size_t max_reply_bytes;
	uint64_t deadline_ns;
	uint64_t last_rx_ns;
	uint64_t sent_ns;
	uint64_t rtt_ns;
	uint64_t rx_bytes;
	char errstr[192];
};

/* A DOWN connection with these limits. */
void kvp_rconn_init(struct kvp_rconn *c, uint64_t connect_timeout_ns, uint64_t op_timeout_ns,
		    size_t max_reply_bytes);

/**
 * kvp_rconn_open() - start connecting (never waits; TCP names are resolved here)
 * @user, @password: AUTH credentials ("" password: no AUTH)
 * Return: 0 (CONNECTING); -errno when the attempt failed at once (a missing socket,
 * refused, a name that does not resolve: -EHOSTUNREACH), @errstr says it.
 */
int kvp_rconn_open(struct kvp_rconn *c, const struct kvp_remote_addr *a, const char *user,
		   const char *password, uint64_t now_ns);

/* Drop the connection (replies owed are lost).  DOWN afterwards; fine when DOWN. */
void kvp_rconn_close(struct kvp_rconn *c);

/* The fd to poll and its events (0 when DOWN). */
int kvp_rconn_fd(const struct kvp_rconn *c);
short kvp_rconn_events(const struct kvp_rconn *c);

/**
 * kvp_rconn_pump() - act on poll's @revents: finish the connect, write what is queued
 * Return: 0, or -errno (the connection failed).
 */
int kvp_rconn_pump(struct kvp_rconn *c, short revents, uint64_t now_ns);

/**
 * kvp_rconn_read() - read once into @buf (the caller's scratch) and feed the reader
 * Return: bytes read (> 0), 0 when nothing was there, or -errno (closed by the store:
 * -ECONNRESET; a reply over the size limit: -EMSGSIZE).
 */
ssize_t kvp_rconn_read(struct kvp_rconn *c, uint8_t *buf, size_t cap, uint64_t now_ns);

/**
 * kvp_rconn_reply() - the next complete reply to the caller's commands
 * @out: out; free with kvp_rconn_reply_free()
 * Handshake replies are consumed here: an AUTH or PING refused is -EACCES (@errstr has
 * the store's words, e.g. WRONGPASS).
 * Return: 1 with *@out set, 0 when no complete reply is there, or -errno (-EPROTO: the
 * bytes are not RESP).
 */
int kvp_rconn_reply(struct kvp_rconn *c, struct redisReply **out, uint64_t now_ns);

void kvp_rconn_reply_free(struct redisReply *reply);

/* Queue one command (copied).  Return: 0, -ENOTCONN (DOWN), -ENOMEM. */
int kvp_rconn_append(struct kvp_rconn *c, int argc, const char **argv, const size_t *lens,
		     uint64_t now_ns);

/* Bytes queued and not yet written. */
size_t kvp_rconn_unsent(const struct kvp_rconn *c);

static inline bool kvp_rconn_ready(const struct kvp_rconn *c)
{
	return c->state == KVP_RCONN_READY;
}

/* The next deadline (UINT64_MAX: none). */
uint64_t kvp_rconn_timeout_ns(const struct kvp_rconn *c);

/* -ETIMEDOUT (with @errstr) when a deadline has passed at @now_ns, else 0. */
int kvp_rconn_check_time(struct kvp_rconn *c, uint64_t now_ns);

#endif /* KVP_SHM_REMOTE_CONN_H */
