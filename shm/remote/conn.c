/* SPDX-License-Identifier: MIT */
/*
 * conn.c - one non-blocking hiredis connection with deadlines (see conn.h).
 */
#include "shm/remote/conn.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WRITE_ROUNDS 8 /* writes per pump while the socket takes bytes */

static void set_err(struct kvp_rconn *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void set_err(struct kvp_rconn *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->errstr, sizeof(c->errstr), fmt, ap);
	va_end(ap);
}

/*
 * A write to a socket the store closed raises SIGPIPE; the owning thread blocks it, so
 * it stays pending on the thread: take it off, or the next thread-wide unblock (or a
 * sigwait elsewhere) would see it.
 */
static void eat_sigpipe(void)
{
	static const struct timespec zero = { 0, 0 };
	sigset_t pipe_set, pending;

	if (sigpending(&pending) < 0 || !sigismember(&pending, SIGPIPE))
		return;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
		;
}

/*
 * The tier sends GET, SET, EXISTS, AUTH and PING: no reply is ever an array.  A reader
 * whose createArray fails refuses one at its header, so a store (or anything pretending
 * to be one) cannot make hiredis allocate an element vector of its choosing.  The table
 * is hiredis's default with that one entry changed, copied once from a reader.
 */
static redisReplyObjectFunctions no_arrays;
static pthread_once_t no_arrays_once = PTHREAD_ONCE_INIT;

static void *refuse_array(const redisReadTask *task, int elements)
{
	(void)task;
	(void)elements;
	return NULL;
}

static void no_arrays_init(void)
{
	redisReader *rd = redisReaderCreate();

	if (!rd)
		return;
	no_arrays = *rd->fn;
	no_arrays.createArray = refuse_array;
	redisReaderFree(rd);
}

void kvp_rconn_init(struct kvp_rconn *c, uint64_t connect_timeout_ns, uint64_t op_timeout_ns,
		    size_t max_reply_bytes)
{
	memset(c, 0, sizeof(*c));
	c->state = KVP_RCONN_DOWN;
	c->connect_timeout_ns = connect_timeout_ns;
	c->op_timeout_ns = op_timeout_ns;
	c->max_reply_bytes = max_reply_bytes;
}

void kvp_rconn_close(struct kvp_rconn *c)
{
	if (c->ctx)
		redisFree(c->ctx);
	c->ctx = NULL;
	c->state = KVP_RCONN_DOWN;
	c->owed = 0;
	c->hs_owed = 0;
}

int kvp_rconn_open(struct kvp_rconn *c, const struct kvp_remote_addr *a, const char *user,
		   const char *password, uint64_t now_ns)
{
	const char *argv[3];
	size_t lens[3];
	redisContext *ctx;
	int argc = 0;

	kvp_rconn_close(c);
	errno = 0;
	if (a->transport == KVP_REMOTE_UNIX)
		ctx = redisConnectUnixNonBlock(a->path);
	else
		ctx = redisConnectNonBlock(a->host, a->port);
	if (!ctx) {
		set_err(c, "connect: out of memory");
		return -ENOMEM;
	}
	if (ctx->err) {
		/* hiredis keeps errno for I/O errors; anything else is name resolution */
		int e = ctx->err == REDIS_ERR_IO && errno ? errno : EHOSTUNREACH;

		set_err(c, "connect: %s", ctx->errstr);
		redisFree(ctx);
		return -e;
	}
	/* keep the reader's buffer between replies: values are all the same size */
	ctx->reader->maxbuf = 0;
	pthread_once(&no_arrays_once, no_arrays_init);
	if (no_arrays.createString)
		ctx->reader->fn = &no_arrays;
	c->ctx = ctx;
	c->state = KVP_RCONN_CONNECTING;
	c->deadline_ns = now_ns + c->connect_timeout_ns;
	c->rx_bytes = 0;
	c->owed = 0;
	c->hs_owed = 0;
	c->errstr[0] = '\0';
	if (password && password[0]) {
		argv[argc] = "AUTH";
		lens[argc++] = 4;
		if (user && user[0]) {
			argv[argc] = user;
			lens[argc] = strlen(user);
			argc++;
		}
		argv[argc] = password;
		lens[argc] = strlen(password);
		argc++;
		if (redisAppendCommandArgv(ctx, argc, argv, lens) != REDIS_OK)
			goto err_nomem;
		c->hs_owed++;
	}
	argv[0] = "PING";
	lens[0] = 4;
	if (redisAppendCommandArgv(ctx, 1, argv, lens) != REDIS_OK)
		goto err_nomem;
	c->hs_owed++;
	return 0;

err_nomem:
	set_err(c, "connect: out of memory");
	kvp_rconn_close(c);
	return -ENOMEM;
}

int kvp_rconn_fd(const struct kvp_rconn *c)
{
	return c->ctx ? c->ctx->fd : -1;
}

size_t kvp_rconn_unsent(const struct kvp_rconn *c)
{
	return c->ctx ? sdslen(c->ctx->obuf) : 0;
}

short kvp_rconn_events(const struct kvp_rconn *c)
{
	switch (c->state) {
	case KVP_RCONN_CONNECTING:
		return POLLOUT;
	case KVP_RCONN_HANDSHAKE:
	case KVP_RCONN_READY:
		/* always readable: a store that closes is seen at once */
		return (short)(POLLIN | (kvp_rconn_unsent(c) ? POLLOUT : 0));
	}
	return 0;
}

static int write_some(struct kvp_rconn *c)
{
	for (int i = 0; i < WRITE_ROUNDS && kvp_rconn_unsent(c); i++) {
		size_t before = kvp_rconn_unsent(c);
		int done = 0;

		errno = 0;
		if (redisBufferWrite(c->ctx, &done) != REDIS_OK) {
			int e = errno ? errno : EIO;

			eat_sigpipe();
			set_err(c, "write: %s", c->ctx->errstr);
			return -e;
		}
		if (kvp_rconn_unsent(c) == before)
			break; /* the socket is full: wait for POLLOUT */
	}
	return 0;
}

int kvp_rconn_pump(struct kvp_rconn *c, short revents, uint64_t now_ns)
{
	if (c->state == KVP_RCONN_DOWN)
		return -ENOTCONN;
	if (c->state == KVP_RCONN_CONNECTING) {
		int so = 0;
		socklen_t len = sizeof(so);

		if (!(revents & (POLLOUT | POLLERR | POLLHUP)))
			return 0;
		if (getsockopt(c->ctx->fd, SOL_SOCKET, SO_ERROR, &so, &len) < 0)
			so = errno;
		if (so) {
			set_err(c, "connect: %s", strerror(so));
			return -so;
		}
		c->state = KVP_RCONN_HANDSHAKE;
		c->deadline_ns = now_ns + c->op_timeout_ns;
		c->sent_ns = now_ns;
		c->last_rx_ns = now_ns;
		revents |= POLLOUT;
	}
	if ((revents & POLLERR) && !(revents & POLLIN)) {
		int so = 0;
		socklen_t len = sizeof(so);

		getsockopt(c->ctx->fd, SOL_SOCKET, SO_ERROR, &so, &len);
		set_err(c, "socket error: %s", strerror(so ? so : EIO));
		return -(so ? so : EIO);
	}
	if (revents & POLLOUT)
		return write_some(c);
	return 0;
}

ssize_t kvp_rconn_read(struct kvp_rconn *c, uint8_t *buf, size_t cap, uint64_t now_ns)
{
	redisReader *rd;
	ssize_t n;

	if (c->state != KVP_RCONN_HANDSHAKE && c->state != KVP_RCONN_READY)
		return 0;
	n = read(c->ctx->fd, buf, cap);
	if (n < 0) {
		if (errno == EAGAIN || errno == EINTR)
			return 0;
		set_err(c, "read: %s", strerror(errno));
		return -errno;
	}
	if (n == 0) {
		set_err(c, "the store closed the connection");
		return -ECONNRESET;
	}
	c->rx_bytes += (uint64_t)n;
	c->last_rx_ns = now_ns;
	rd = c->ctx->reader;
	if (redisReaderFeed(rd, (const char *)buf, (size_t)n) != REDIS_OK) {
		set_err(c, "read: out of memory");
		return -ENOMEM;
	}
	/* the caller takes every complete reply after each read: what stays is part of
	 * one reply and this read */
	if (rd->len - rd->pos > c->max_reply_bytes + cap) {
		set_err(c, "a reply larger than %zu bytes", c->max_reply_bytes);
		return -EMSGSIZE;
	}
	return n;
}

int kvp_rconn_reply(struct kvp_rconn *c, struct redisReply **out, uint64_t now_ns)
{
	while (c->ctx) {
		void *rep = NULL;
		redisReply *r;

		if (redisReaderGetReply(c->ctx->reader, &rep) != REDIS_OK) {
			set_err(c, "protocol error: %s", c->ctx->reader->errstr);
			return -EPROTO;
		}
		if (!rep)
			return 0;
		r = rep;
		if (c->hs_owed) {
			/* AUTH (when sent) and PING, in that order */
			int is_ping = c->hs_owed == 1;

			c->hs_owed--;
			if (r->type == REDIS_REPLY_ERROR ||
			    (is_ping &&
			     (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "PONG")))) {
				set_err(c, "%s refused: %.120s", is_ping ? "PING" : "AUTH",
					r->type == REDIS_REPLY_ERROR ? r->str :
								       "(unexpected reply)");
				freeReplyObject(r);
				return -EACCES;
			}
			freeReplyObject(r);
			if (!c->hs_owed) {
				c->state = KVP_RCONN_READY;
				c->rtt_ns = now_ns - c->sent_ns;
				c->last_rx_ns = now_ns;
			}
			continue;
		}
		if (c->owed)
			c->owed--;
		c->last_rx_ns = now_ns;
		*out = r;
		return 1;
	}
	return 0;
}

void kvp_rconn_reply_free(struct redisReply *reply)
{
	if (reply)
		freeReplyObject(reply);
}

int kvp_rconn_append(struct kvp_rconn *c, int argc, const char **argv, const size_t *lens,
		     uint64_t now_ns)
{
	if (c->state == KVP_RCONN_DOWN)
		return -ENOTCONN;
	if (!c->owed && !c->hs_owed)
		c->last_rx_ns = now_ns; /* the stall clock starts when replies are owed */
	if (redisAppendCommandArgv(c->ctx, argc, argv, lens) != REDIS_OK)
		return -ENOMEM;
	c->owed++;
	return 0;
}

uint64_t kvp_rconn_timeout_ns(const struct kvp_rconn *c)
{
	switch (c->state) {
	case KVP_RCONN_CONNECTING:
	case KVP_RCONN_HANDSHAKE:
		return c->deadline_ns;
	case KVP_RCONN_READY:
		return c->owed ? c->last_rx_ns + c->op_timeout_ns : UINT64_MAX;
	}
	return UINT64_MAX;
}

int kvp_rconn_check_time(struct kvp_rconn *c, uint64_t now_ns)
{
	if (now_ns < kvp_rconn_timeout_ns(c))
		return 0;
	switch (c->state) {
	case KVP_RCONN_CONNECTING:
		set_err(c, "connect: timed out after %llu ms",
			(unsigned long long)(c->connect_timeout_ns / 1000000));
		break;
	case KVP_RCONN_HANDSHAKE:
		set_err(c, "no answer to AUTH/PING within %llu ms",
			(unsigned long long)(c->op_timeout_ns / 1000000));
		break;
	default:
		set_err(c, "no reply for %llu ms",
			(unsigned long long)(c->op_timeout_ns / 1000000));
	}
	return -ETIMEDOUT;
}
