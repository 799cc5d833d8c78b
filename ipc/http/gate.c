/* SPDX-License-Identifier: MIT */
/*
 * gate.c - kvpool-http's accept loop, limits, deadlines and relay (see gate.h).
 *
 * Each listen address has a table of slots, twice max_conns (plus a few).  A slot is a
 * connection the gate holds: PENDING (its first head not complete yet: peeked, not
 * read), RELAY (handed to libmicrohttpd through a socket pair, every byte relayed),
 * LINGER (refused or ended, its write side shut, drained before the close so the last
 * answer is not lost to a reset) or DONE (the gate is through with it, the library not
 * yet: waiting for its CLOSED callback).  Apart from that, @mhd says whether the library
 * holds the slot's pair end (HANDED before its STARTED callback, STARTED after).  A slot
 * is FREE once the gate is done and the library is too.  A slot "occupies" max_conns
 * (@occ) from its accept to the end of its relay.
 *
 * The relay of one connection: client -> @in (what the client sent) -> the framing
 * parser (relay.h) -> @c2m -> the pair -> libmicrohttpd; libmicrohttpd -> the pair ->
 * @m2c -> client, as it is.  All buffers are bounded: a side is not read while the
 * buffer it fills is full, so a slow reader slows its writer (the socket buffers and
 * these, no more).  The sockets are edge-triggered; @c_rd, @c_wr, @p_rd, @p_wr say
 * whether a side may have more to give or room to take (set by an event, cleared at
 * EAGAIN), and relay_pump() runs every transfer until none makes progress.
 *
 * A refusal on a later request waits for the answers to the requests before it: those
 * requests were passed to libmicrohttpd and their answers are still to come through the
 * pair.  The library reports each request's end (on_completed, as the HEAD phase) after
 * its last byte was written; once as many ended as came before the refused one and the
 * pair is drained, the pair is closed (the library then closes its end, having nothing
 * to answer), the refusal written after the answers, the client's write side shut.
 *
 * The bookkeeping is linear scans of the tables (per accept: the per-address count and,
 * at max_conns, the longest-waiting slot; per tick: the deadlines): microseconds at the
 * default 256, about a millisecond per accept at tens of thousands of connections,
 * where an index per address and a queue of waiting slots would be the next step.
 *
 * Everything but @mhd, @n_done, @n_early and @t_done_ns is the gate thread's, under
 * @lock (the loop holds it while it works); the HTTP threads report a request's end (and
 * an early answer) through those atomics and take @lock only for STARTED and CLOSED.
 */
#include "ipc/http/gate.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ipc/http/api.h"
#include "ipc/http/head.h"
#include "ipc/http/relay.h"
#include "util/log.h"
#include "util/time.h"

#define ACCEPT_BATCH 64		       /* accepts per wake-up: data of accepted ones goes between */
#define LINGER_NS 2000000000ull	       /* a refused connection is drained this long at most */
#define LINGER_BYTES (4u << 20)	       /* ... and this much (a body sent on regardless) */
#define HANDED_STALE_NS 10000000000ull /* a hand-off the library never started: forgotten */
#define TICK_MS 200
#define STOP_FLUSH_MS 1000    /* at stop, answers on their way to clients get this long */
#define BODY_ROOM (16u << 10) /* @c2m beyond a head: body bytes on their way */
#define M2C_ROOM (16u << 10)  /* @m2c: answer bytes on their way to the client */
#define REFUSAL_ROOM 2048u    /* @m2c's spare for a refusal written after the answers */

/* The epoll tags: the first int of what data.ptr points to. */
enum { TAG_LISTENER = 0, TAG_CLIENT, TAG_PAIR };

enum slot_state { S_FREE = 0, S_PENDING, S_RELAY, S_LINGER, S_DONE };
enum { MHD_NONE = 0, MHD_HANDED, MHD_STARTED };

struct listener;
struct slot;

struct pair_tag {
	int kind; /* TAG_PAIR */
	struct slot *s;
};

/* A relayed connection's buffers and parser (RELAY only). */
struct relay {
	struct kvp_http_relay p;
	char *in, *c2m, *m2c; /* one allocation */
	size_t in_len, in_cap;
	size_t c2m_off, c2m_len, c2m_cap;
	size_t m2c_off, m2c_len;
	bool c_rd, c_wr, p_rd, p_wr; /* may have bytes / room (edge-triggered) */
	bool c_eof;		     /* the client shut its write side */
	bool eof_passed;	     /* ... and the pair's write side was shut after it */
	bool m_eof;		     /* the library closed its end */
	bool refused;		     /* @p refused a request: its answer is to come */
	uint64_t ref_after;	     /* ... after this many requests ended */
	uint64_t t_head_ns;	     /* when @p last entered HEAD (the previous request passed) */
	uint64_t t_body_ns;	     /* when @p last passed a head */
	uint64_t t_wprog_ns; /* when an answer byte last reached the client, or none waited */
};

struct slot {
	int kind; /* TAG_CLIENT */
	enum slot_state state;
	bool occ; /* counted in its listener's n_occ */
	int fd;	  /* the client's */
	int pfd;  /* RELAY: the gate's end of the pair, or -1 */
	int mfd;  /* the library's end (a number to match STARTED with; the library's to close) */
	struct pair_tag ptag;
	struct listener *l;
	struct sockaddr_storage addr;
	socklen_t addr_len;
	uint64_t t_accept_ns;
	uint64_t t_last_ns; /* PENDING: when its last new byte came (the idle timeout) */
	uint64_t t_linger_end_ns;
	size_t linger_left; /* LINGER: bytes it may still drain */
	size_t seen;	    /* PENDING: bytes of head seen at the last peek */
	struct relay *x;
	/* written by the HTTP threads */
	_Atomic int mhd;		/* MHD_NONE, _HANDED, _STARTED: under @lock */
	atomic_uint_fast64_t n_done;	/* requests the library ended */
	atomic_uint_fast64_t t_done_ns; /* when it last ended one */
	atomic_bool want_wake;		/* a refusal waits for n_done: wake the gate */
	atomic_uint_fast64_t n_early;	/* the request answered early, from 1 (0: none) */
};

struct listener {
	int kind; /* TAG_LISTENER */
	int fd;
	char name[KVP_HTTP_ADDR_MAX + 8];
	struct kvp_http_gate *g;
	struct MHD_Daemon *mhd;
	struct slot *slots;
	unsigned int n_slots;
	unsigned int n_occ; /* slots occupying max_conns */
	bool paused;	    /* out of descriptors: not watched for a tick's time */
	uint64_t t_paused_ns, t_warned_ns;
};

struct kvp_http_gate {
	const struct kvp_http_config *cfg;
	struct kvp_http_metrics *m;
	struct listener ls[KVP_HTTP_LISTEN_MAX];
	unsigned int n_ls;
	int epfd, evfd;
	pthread_t thread;
	bool started;
	atomic_bool stop, stop_accepting;
	pthread_mutex_t lock;
	char *peek; /* max_header_bytes + 1, the gate thread's */
	size_t peek_cap;
};

static uint64_t secs_ns(uint32_t s)
{
	return (uint64_t)s * 1000000000ull;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

static bool same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET)
		return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
		       ((const struct sockaddr_in *)b)->sin_addr.s_addr;
	if (a->ss_family == AF_INET6)
		return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
			       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
	return false;
}

static void unoccupy(struct slot *s)
{
	if (s->occ) {
		s->occ = false;
		s->l->n_occ--;
	}
}

/* The gate is through with @s: FREE if the library is too, else DONE until CLOSED. */
static void slot_done(struct slot *s)
{
	unoccupy(s);
	s->state = atomic_load(&s->mhd) == MHD_NONE ? S_FREE : S_DONE;
}

static void relay_free(struct slot *s)
{
	if (!s->x)
		return;
	free(s->x->in);
	free(s->x);
	s->x = NULL;
}

static void close_pair(struct kvp_http_gate *g, struct slot *s)
{
	if (s->pfd < 0)
		return;
	epoll_ctl(g->epfd, EPOLL_CTL_DEL, s->pfd, NULL);
	close(s->pfd); /* the library reads its end's EOF and closes it */
	s->pfd = -1;
}

/* Close what the gate holds of @s (any state): the client, the pair. */
static void slot_close(struct kvp_http_gate *g, struct slot *s)
{
	close_pair(g, s);
	relay_free(s);
	if (s->fd >= 0) {
		epoll_ctl(g->epfd, EPOLL_CTL_DEL, s->fd, NULL);
		close(s->fd);
		s->fd = -1;
	}
	slot_done(s);
}

/* Drain what the client sent; true once it closed (or the socket failed, or it sent
 * more than a linger takes: then the close's reset is its own doing). */
static bool drain(struct slot *s, char *buf, size_t cap)
{
	for (;;) {
		ssize_t n = recv(s->fd, buf, cap, MSG_DONTWAIT);

		if (n > 0) {
			if ((size_t)n >= s->linger_left)
				return true;
			s->linger_left -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
	}
}

/*
 * The client's last answer is out (or written to the socket): shut its write side,
 * drain what it still sends (a close with unread bytes would send a reset, which can
 * destroy the answer before the client reads it), close at its EOF or LINGER_NS.
 */
static void slot_linger(struct kvp_http_gate *g, struct slot *s)
{
	close_pair(g, s);
	relay_free(s);
	unoccupy(s);
	shutdown(s->fd, SHUT_WR);
	s->state = S_LINGER;
	s->t_linger_end_ns = kvp_now_ns() + LINGER_NS;
	s->linger_left = LINGER_BYTES;
	if (drain(s, g->peek, g->peek_cap))
		slot_close(g, s);
}

/* A refusal's bytes, Connection: close, into @dst (@cap).  Return its length or 0. */
static size_t refusal(unsigned int status, const char *why, bool anthropic, char *dst, size_t cap)
{
	struct kvp_http_err e = { .status = status };
	struct kvp_buf body = KVP_BUF_INIT;
	int hn;

	kvp_http_err_set(&e, status, status == 408 ? "request_timeout" : "invalid_request", NULL,
			 "%s", why);
	kvp_http_err_json(&e, anthropic ? KVP_HTTP_SHAPE_ANTHROPIC : KVP_HTTP_SHAPE_OPENAI, &body);
	/* x-should-retry: both SDKs retry a 5xx unless told not to; 501 and 505 will not
	 * change by retrying (server.c says the same of its 501s) */
	hn = snprintf(dst, cap,
		      "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\n"
		      "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
		      status, kvp_http_reason(status), body.len,
		      status >= 500 ? "x-should-retry: false\r\n" : "");
	if (hn < 0 || (size_t)hn + body.len > cap || body.err) {
		kvp_buf_deinit(&body);
		return 0;
	}
	memcpy(dst + hn, body.p, body.len);
	hn += (int)body.len;
	kvp_buf_deinit(&body);
	return (size_t)hn;
}

/* Answer a PENDING connection with @status once, then close it (the linger). */
static void slot_refuse(struct kvp_http_gate *g, struct slot *s, unsigned int status,
			const char *why, bool anthropic)
{
	char text[REFUSAL_ROOM];
	size_t n = refusal(status, why, anthropic, text, sizeof(text));

	/* the socket's send buffer is empty: a few hundred bytes fit at once */
	if (n)
		send(s->fd, text, n, MSG_NOSIGNAL | MSG_DONTWAIT);
	kvp_log(LOG_DEBUG, "http: %s: refused a request head: %u %s", s->l->name, status, why);
	slot_linger(g, s);
}

/* ------------------------------------------------------------ the relay */

/* Drop @n consumed bytes from the front of a buffer of @len. */
static void consume(char *buf, size_t *len, size_t n)
{
	memmove(buf, buf + n, *len - n);
	*len -= n;
}

/*
 * Client bytes in @in through the parser into @c2m.  Return true on progress.  A
 * refusal stops the client's bytes there: what was passed before it stays passed.
 */
static bool relay_parse(struct kvp_http_gate *g, struct slot *s, uint64_t now)
{
	struct relay *x = s->x;
	uint64_t heads = x->p.heads, reqs = x->p.requests;
	size_t used, made;
	int rc;

	if (x->refused || !x->in_len)
		return false;
	if (x->c2m_off) {
		consume(x->c2m, &x->c2m_len, x->c2m_off);
		x->c2m_off = 0;
	}
	rc = kvp_http_relay_step(&x->p, x->in, x->in_len, x->c2m + x->c2m_len,
				 x->c2m_cap - x->c2m_len, &used, &made);
	consume(x->in, &x->in_len, used);
	x->c2m_len += made;
	if (x->p.heads != heads)
		x->t_body_ns = now;
	if (x->p.requests != reqs)
		x->t_head_ns = now;
	if (rc < 0) {
		/* a refusal inside a body: the library has its head, its answer is ours */
		x->refused = true;
		x->ref_after = x->p.requests;
		x->in_len = 0;
		atomic_store(&s->want_wake, true);
		atomic_fetch_add(&g->m->framing_refused, 1);
		kvp_log(LOG_DEBUG, "http: %s: refused a request: %u %s", s->l->name, x->p.status,
			x->p.why);
		return true;
	}
	return used || made;
}

/* One transfer between the sockets and the buffers.  Return -1 when the client is
 * gone (the slot is to be closed), else whether anything moved. */
static int relay_io(struct kvp_http_gate *g, struct slot *s, uint64_t now)
{
	struct relay *x = s->x;
	bool moved = false, parsed;
	ssize_t k;

	if (x->c_rd && !x->c_eof && !x->refused && x->in_len < x->in_cap) {
		k = recv(s->fd, x->in + x->in_len, x->in_cap - x->in_len, MSG_DONTWAIT);
		if (k > 0)
			x->in_len += (size_t)k;
		else if (!k)
			x->c_eof = true;
		else if (errno == EAGAIN || errno == EWOULDBLOCK)
			x->c_rd = false;
		else if (errno != EINTR)
			return -1;
		moved |= k >= 0;
	}
	parsed = relay_parse(g, s, now);
	moved |= parsed;
	if (x->p_wr && s->pfd >= 0 && x->c2m_off < x->c2m_len) {
		k = send(s->pfd, x->c2m + x->c2m_off, x->c2m_len - x->c2m_off,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k > 0) {
			x->c2m_off += (size_t)k;
			if (x->c2m_off == x->c2m_len)
				x->c2m_off = x->c2m_len = 0;
			moved = true;
		} else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			x->p_wr = false;
		} else if (k < 0 && errno != EINTR) {
			x->p_wr = false; /* the library closed its end: its EOF follows */
			x->c2m_off = x->c2m_len = 0;
		}
	}
	/* the client's EOF passed on once all it sent before is (the library then ends);
	 * what is left in @in then is half a head or a line, which will never end */
	if (x->c_eof && !x->eof_passed && !x->refused && !x->c2m_len && !parsed && s->pfd >= 0) {
		x->in_len = 0;
		shutdown(s->pfd, SHUT_WR);
		x->eof_passed = true;
	}
	if (x->p_rd && s->pfd >= 0 && !x->m_eof) {
		if (x->m2c_off) {
			consume(x->m2c, &x->m2c_len, x->m2c_off);
			x->m2c_off = 0;
		}
		if (x->m2c_len < M2C_ROOM) {
			k = recv(s->pfd, x->m2c + x->m2c_len, M2C_ROOM - x->m2c_len, MSG_DONTWAIT);
			if (k > 0) {
				if (!x->m2c_len)
					x->t_wprog_ns = now;
				x->m2c_len += (size_t)k;
			} else if (!k ||
				   (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
				x->m_eof = true;
			} else if (errno != EINTR) {
				x->p_rd = false;
			}
			moved |= k >= 0 || x->m_eof;
		}
	}
	if (x->c_wr && x->m2c_off < x->m2c_len) {
		k = send(s->fd, x->m2c + x->m2c_off, x->m2c_len - x->m2c_off,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k > 0) {
			x->m2c_off += (size_t)k;
			if (x->m2c_off == x->m2c_len)
				x->m2c_off = x->m2c_len = 0;
			x->t_wprog_ns = now;
			moved = true;
		} else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			x->c_wr = false;
		} else if (k < 0 && errno != EINTR) {
			return -1;
		}
	}
	return moved;
}

/*
 * A refusal's turn: the requests before it ended and their answers are all read from
 * the pair (a read after seeing them end finds every byte they wrote).  The pair is
 * closed and the refusal queued behind those answers.  Return true when done so.
 */
static bool relay_refusal_due(struct slot *s)
{
	struct relay *x = s->x;
	uint64_t done = atomic_load(&s->n_done);
	size_t n = 0;

	if (done < x->ref_after)
		return false;
	for (;;) {
		ssize_t k;

		if (x->m2c_off) {
			consume(x->m2c, &x->m2c_len, x->m2c_off);
			x->m2c_off = 0;
		}
		if (x->m2c_len >= M2C_ROOM)
			return false; /* the client reads the answers first */
		k = recv(s->pfd, x->m2c + x->m2c_len, M2C_ROOM - x->m2c_len, MSG_DONTWAIT);
		if (k > 0) {
			x->m2c_len += (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		x->m_eof = true; /* the library closed: it answered the last itself */
		return false;
	}
	/* refused inside a body the library answered already (it may answer a request
	 * whose headers it refused before its body): that answer is the one.  Its end
	 * may not be reported yet, its bytes partly written: wait for the end (or the
	 * library's close).  Read after the drain: an answer marked later wrote nothing
	 * the drain took, and what it writes after is cut by the pair's close. */
	if (done == x->ref_after && atomic_load(&s->n_early) == x->ref_after + 1)
		return false;
	if (done == x->ref_after)
		n = refusal(x->p.status, x->p.why, x->p.anthropic, x->m2c + x->m2c_len,
			    M2C_ROOM + REFUSAL_ROOM - x->m2c_len);
	if (!x->m2c_len)
		x->t_wprog_ns = kvp_now_ns();
	x->m2c_len += n;
	return true;
}

/* Move what can move on a RELAY slot; end it when it is over. */
static void relay_pump(struct kvp_http_gate *g, struct slot *s)
{
	uint64_t now = kvp_now_ns();
	struct relay *x = s->x;
	int rc;

	while ((rc = relay_io(g, s, now)) > 0)
		;
	if (rc < 0) {
		slot_close(g, s); /* the client is gone */
		return;
	}
	if (x->refused && s->pfd >= 0 && !x->m_eof && relay_refusal_due(s)) {
		atomic_store(&s->want_wake, false);
		close_pair(g, s);
		x->m_eof = true;
		while ((rc = relay_io(g, s, now)) > 0)
			;
		if (rc < 0) {
			slot_close(g, s);
			return;
		}
	}
	if (x->m_eof && x->m2c_off == x->m2c_len) {
		/* the library closed (after a Connection: close answer, its own timeout, a
		 * refusal's turn): all it wrote is out; the client's turn to close */
		if (x->c_eof)
			slot_close(g, s);
		else
			slot_linger(g, s);
	}
}

/* Hand a PENDING slot whose head is sound to the library, through a socket pair. */
static void slot_hand(struct kvp_http_gate *g, struct slot *s)
{
	struct listener *l = s->l;
	size_t in_cap = kvp_http_relay_in_room(g->cfg->max_header_bytes);
	size_t c2m_cap = g->cfg->max_header_bytes + BODY_ROOM;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET };
	struct relay *x = calloc(1, sizeof(*x));
	int sv[2] = { -1, -1 }, one = 1, r;

	if (x)
		x->in = malloc(in_cap + c2m_cap + M2C_ROOM + REFUSAL_ROOM);
	if (!x || !x->in ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) {
		kvp_log(LOG_WARNING, "http: %s: no relay for a connection: %s", l->name,
			strerror(x && x->in ? errno : ENOMEM));
		if (x)
			free(x->in);
		free(x);
		slot_close(g, s);
		return;
	}
	x->c2m = x->in + in_cap;
	x->m2c = x->c2m + c2m_cap;
	x->in_cap = in_cap;
	x->c2m_cap = c2m_cap;
	x->c_rd = x->c_wr = x->p_rd = x->p_wr = true;
	x->t_head_ns = x->t_body_ns = s->t_accept_ns; /* the head's deadline runs on */
	x->t_wprog_ns = kvp_now_ns();
	kvp_http_relay_init(&x->p, g->cfg->max_header_bytes);
	s->x = x;
	s->pfd = sv[0];
	s->mfd = sv[1];
	s->ptag.kind = TAG_PAIR;
	s->ptag.s = s;
	atomic_store(&s->n_done, 0);
	atomic_store(&s->n_early, 0);
	atomic_store(&s->t_done_ns, 0);
	atomic_store(&s->want_wake, false);
	/* answers are relayed as they come, in pieces: Nagle would hold each second one */
	if (s->addr.ss_family == AF_INET || s->addr.ss_family == AF_INET6)
		setsockopt(s->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	ev.data.ptr = s;
	r = epoll_ctl(g->epfd, EPOLL_CTL_MOD, s->fd, &ev);
	ev.data.ptr = &s->ptag;
	if (!r)
		r = epoll_ctl(g->epfd, EPOLL_CTL_ADD, s->pfd, &ev);
	if (r) {
		close(sv[1]);
		slot_close(g, s);
		return;
	}
	s->state = S_RELAY;
	atomic_store(&s->mhd, MHD_HANDED);
	pthread_mutex_unlock(&g->lock);
	/* the library queues it for one of its threads, which calls STARTED; the client's
	 * address goes with it, for the library's log */
	r = MHD_add_connection(l->mhd, sv[1], (const struct sockaddr *)&s->addr, s->addr_len) !=
	    MHD_YES;
	pthread_mutex_lock(&g->lock);
	if (r) { /* the library closed its end */
		atomic_store(&s->mhd, MHD_NONE);
		kvp_log(LOG_WARNING, "http: %s: libmicrohttpd refused a connection", l->name);
		slot_close(g, s);
		return;
	}
	relay_pump(g, s); /* the first head is in the client's socket still */
}

/* ------------------------------------------------------------ accepting */

/* A PENDING slot may have more of its head: look at it. */
static void slot_peek(struct kvp_http_gate *g, struct slot *s, bool hup)
{
	struct kvp_http_head h;
	ssize_t n = recv(s->fd, g->peek, g->peek_cap, MSG_PEEK | MSG_DONTWAIT);
	int rc;

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) && !hup)
		return;
	if (n <= 0) {
		slot_close(g, s); /* gone before a whole head: nothing to answer */
		return;
	}
	if ((size_t)n > s->seen)
		s->t_last_ns = kvp_now_ns();
	s->seen = (size_t)n;
	rc = kvp_http_head_check(g->peek, (size_t)n, g->cfg->max_header_bytes, &h);
	if (rc > 0) {
		slot_hand(g, s);
	} else if (rc < 0) {
		atomic_fetch_add(&g->m->framing_refused, 1);
		slot_refuse(g, s, h.status, h.why, h.anthropic);
	} else if (hup) {
		slot_close(g, s); /* half-closed with half a head */
	}
}

/*
 * Since when a RELAY slot waits for its client's next head (0: it does not: a request
 * is being read or answered, or a refusal is on its way).
 */
static uint64_t head_wait_since(const struct slot *s)
{
	const struct relay *x = s->x;

	/* an answer still on its way to a slow reader is not over yet either */
	if (x->refused || x->c_eof || x->p.state != KVP_HTTP_RELAY_HEAD ||
	    atomic_load(&s->n_done) < x->p.heads || x->m2c_off < x->m2c_len)
		return 0;
	return max_u64(max_u64(x->t_head_ns, atomic_load(&s->t_done_ns)), x->t_wprog_ns);
}

/* The slot that has waited longest for a request head, or NULL. */
static struct slot *longest_waiting(struct listener *l)
{
	struct slot *best = NULL;
	uint64_t best_t = UINT64_MAX;

	for (unsigned int i = 0; i < l->n_slots; i++) {
		struct slot *s = &l->slots[i];
		uint64_t t;

		if (s->state == S_PENDING)
			t = s->t_accept_ns;
		else if (s->state == S_RELAY && s->occ)
			t = head_wait_since(s);
		else
			continue;
		if (t && t < best_t) {
			best_t = t;
			best = s;
		}
	}
	return best;
}

static void accept_one(struct kvp_http_gate *g, struct listener *l, int fd,
		       const struct sockaddr_storage *addr, socklen_t addr_len)
{
	const struct kvp_http_config *cfg = g->cfg;
	struct slot *s = NULL;
	struct epoll_event ev;

	if (addr->ss_family == AF_INET || addr->ss_family == AF_INET6) {
		unsigned int n = 0;

		for (unsigned int j = 0; j < g->n_ls; j++)
			for (unsigned int i = 0; i < g->ls[j].n_slots; i++)
				n += g->ls[j].slots[i].occ &&
				     same_addr(&g->ls[j].slots[i].addr, addr);
		if (n >= cfg->per_addr_conns) {
			atomic_fetch_add(&g->m->conns_refused[1], 1);
			close(fd);
			return;
		}
	}
	if (l->n_occ >= cfg->max_conns) {
		struct slot *v = longest_waiting(l);

		if (!v) {
			atomic_fetch_add(&g->m->conns_refused[0], 1);
			close(fd);
			return;
		}
		atomic_fetch_add(&g->m->conns_evicted, 1);
		slot_close(g, v);
	}
	for (unsigned int i = 0; i < l->n_slots && !s; i++)
		if (l->slots[i].state == S_FREE)
			s = &l->slots[i];
	if (!s) { /* every spare slot holds a connection being closed */
		atomic_fetch_add(&g->m->conns_refused[0], 1);
		close(fd);
		return;
	}
	memset(&s->addr, 0, sizeof(s->addr));
	memcpy(&s->addr, addr, addr_len);
	s->addr_len = addr_len;
	s->fd = fd;
	s->pfd = s->mfd = -1;
	s->l = l;
	s->seen = 0;
	s->t_accept_ns = s->t_last_ns = kvp_now_ns();
	s->state = S_PENDING;
	s->occ = true;
	l->n_occ++;
	/* edge-triggered: a peek leaves the bytes unread, so only new bytes may wake us */
	ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
	ev.data.ptr = s;
	if (epoll_ctl(g->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		slot_close(g, s);
		return;
	}
	slot_peek(g, s, false); /* its head may be there already */
}

static void on_listener(struct kvp_http_gate *g, struct listener *l)
{
	for (int i = 0; i < ACCEPT_BATCH && l->fd >= 0; i++) {
		struct sockaddr_storage a;
		socklen_t alen = sizeof(a);
		int fd = accept4(l->fd, (struct sockaddr *)&a, &alen, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			int e = errno;

			/* the connection stays in the backlog and the socket readable: stop
			 * watching it for a tick's time rather than spin (and log at most
			 * every 10 s) */
			if (e == EMFILE || e == ENFILE) {
				struct epoll_event ev = { .events = 0, .data.ptr = l };
				uint64_t now = kvp_now_ns();

				epoll_ctl(g->epfd, EPOLL_CTL_MOD, l->fd, &ev);
				l->paused = true;
				l->t_paused_ns = now;
				if (now - l->t_warned_ns > 10000000000ull) {
					l->t_warned_ns = now;
					kvp_log(LOG_WARNING, "http: %s: accept: %s", l->name,
						strerror(e));
				}
			}
			return;
		}
		accept_one(g, l, fd, &a, alen);
	}
}

/* A RELAY slot's deadlines: its next head, its body, its client reading the answers. */
static void relay_tick(struct kvp_http_gate *g, struct slot *s, uint64_t now)
{
	uint64_t head_ns = secs_ns(g->cfg->header_timeout_s);
	uint64_t body_ns = secs_ns(g->cfg->body_timeout_s);
	uint64_t idle_ns = secs_ns(g->cfg->idle_timeout_s);
	struct relay *x = s->x;
	uint64_t since = head_wait_since(s);
	bool late = false;

	if (x->refused) {
		relay_pump(g, s); /* the requests before it may have ended */
		if (s->state != S_RELAY)
			return;
	}
	if (since) {
		late = now >= since && now - since >= head_ns;
	} else if (!x->refused && x->p.state != KVP_HTTP_RELAY_HEAD &&
		   atomic_load(&s->n_done) + 1 == x->p.heads) {
		/* the body of the request the library works on (not one queued behind) */
		since = max_u64(x->t_body_ns, atomic_load(&s->t_done_ns));
		late = now >= since && now - since >= body_ns;
	}
	if (x->m2c_off < x->m2c_len && now - x->t_wprog_ns >= idle_ns)
		late = true; /* the client reads no answer */
	if (late) {
		atomic_fetch_add(&g->m->conns_timed_out, 1);
		slot_close(g, s);
	}
}

/* Deadlines: heads, bodies, refused connections' drains, hand-offs never started. */
static void tick(struct kvp_http_gate *g, uint64_t now)
{
	uint64_t head_ns = secs_ns(g->cfg->header_timeout_s);
	uint64_t idle_ns = secs_ns(g->cfg->idle_timeout_s);

	for (unsigned int j = 0; j < g->n_ls; j++) {
		struct listener *l = &g->ls[j];

		if (l->paused && l->fd >= 0 && now - l->t_paused_ns >= TICK_MS * 1000000ull) {
			struct epoll_event ev = { .events = EPOLLIN, .data.ptr = l };

			epoll_ctl(g->epfd, EPOLL_CTL_MOD, l->fd, &ev);
			l->paused = false;
		}
		for (unsigned int i = 0; i < l->n_slots; i++) {
			struct slot *s = &l->slots[i];

			switch (s->state) {
			case S_PENDING:
				/* the head's deadline, or silence as long as the library allows */
				if (now - s->t_accept_ns < head_ns && now - s->t_last_ns < idle_ns)
					break;
				atomic_fetch_add(&g->m->conns_timed_out, 1);
				if (s->seen)
					slot_refuse(g, s, 408, "the request head took too long",
						    false);
				else
					slot_close(g, s);
				break;
			case S_RELAY:
				relay_tick(g, s, now);
				break;
			case S_LINGER:
				if (now >= s->t_linger_end_ns || drain(s, g->peek, g->peek_cap))
					slot_close(g, s);
				break;
			case S_DONE:
				if (atomic_load(&s->mhd) == MHD_HANDED &&
				    now - s->t_accept_ns >= HANDED_STALE_NS + head_ns) {
					atomic_store(&s->mhd, MHD_NONE);
					s->state = S_FREE;
				}
				break;
			default:
				break;
			}
		}
	}
}

/* Woken: a refusal may be due (a request before it ended). */
static void pump_refusals(struct kvp_http_gate *g)
{
	for (unsigned int j = 0; j < g->n_ls; j++)
		for (unsigned int i = 0; i < g->ls[j].n_slots; i++) {
			struct slot *s = &g->ls[j].slots[i];

			if (s->state == S_RELAY && s->x->refused)
				relay_pump(g, s);
		}
}

static void on_slot_event(struct kvp_http_gate *g, void *tag, uint32_t e)
{
	int kind = *(int *)tag;
	struct slot *s = kind == TAG_PAIR ? ((struct pair_tag *)tag)->s : tag;
	bool hup = e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR);

	if (s->state == S_PENDING && kind == TAG_CLIENT) {
		slot_peek(g, s, hup);
	} else if (s->state == S_LINGER && kind == TAG_CLIENT) {
		if (drain(s, g->peek, g->peek_cap))
			slot_close(g, s);
	} else if (s->state == S_RELAY) {
		bool rd = e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR);
		bool wr = e & (EPOLLOUT | EPOLLHUP | EPOLLERR);

		if (kind == TAG_CLIENT) {
			s->x->c_rd |= rd;
			s->x->c_wr |= wr;
		} else {
			s->x->p_rd |= rd;
			s->x->p_wr |= wr;
		}
		relay_pump(g, s);
	}
}

static void *gate_main(void *arg)
{
	struct kvp_http_gate *g = arg;
	struct epoll_event evs[64];
	uint64_t t_tick = 0;

	while (!atomic_load(&g->stop)) {
		int n = epoll_wait(g->epfd, evs, 64, TICK_MS);
		bool woken = false;
		uint64_t now;

		pthread_mutex_lock(&g->lock);
		if (atomic_load(&g->stop_accepting))
			for (unsigned int j = 0; j < g->n_ls; j++)
				if (g->ls[j].fd >= 0) {
					epoll_ctl(g->epfd, EPOLL_CTL_DEL, g->ls[j].fd, NULL);
					close(g->ls[j].fd);
					g->ls[j].fd = -1;
				}
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr == (void *)g) {
				uint64_t v;

				if (read(g->evfd, &v, sizeof(v)) < 0) {
					/* nothing to do: the flags are read above */
				}
				woken = true;
			} else if (*(int *)evs[i].data.ptr == TAG_LISTENER) {
				on_listener(g, evs[i].data.ptr);
			} else {
				on_slot_event(g, evs[i].data.ptr, evs[i].events);
			}
		}
		/* the deadlines at a tick's pace, not at every batch of relayed bytes */
		now = kvp_now_ns();
		if (now - t_tick >= TICK_MS * 1000000ull / 2) {
			tick(g, now);
			t_tick = now;
		} else if (woken) {
			pump_refusals(g);
		}
		pthread_mutex_unlock(&g->lock);
	}
	return NULL;
}

static void wake(struct kvp_http_gate *g)
{
	uint64_t one = 1;

	if (write(g->evfd, &one, sizeof(one)) < 0) {
		/* the counter is full: the thread is awake anyway */
	}
}

/* ------------------------------------------------------------ the HTTP threads' side */

void kvp_http_gate_started(struct kvp_http_gate *g, struct MHD_Connection *c, void **socket_context)
{
	const union MHD_ConnectionInfo
		*ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	int fd = ci ? ci->connect_fd : -1;

	*socket_context = NULL;
	pthread_mutex_lock(&g->lock);
	for (unsigned int j = 0; j < g->n_ls && !*socket_context; j++)
		for (unsigned int i = 0; i < g->ls[j].n_slots; i++) {
			struct slot *s = &g->ls[j].slots[i];

			if (atomic_load(&s->mhd) == MHD_HANDED && s->mfd == fd) {
				atomic_store(&s->mhd, MHD_STARTED);
				*socket_context = s;
				break;
			}
		}
	pthread_mutex_unlock(&g->lock);
}

void kvp_http_gate_closed(struct kvp_http_gate *g, void *socket_context)
{
	struct slot *s = socket_context;

	if (!s)
		return;
	pthread_mutex_lock(&g->lock);
	if (atomic_load(&s->mhd) != MHD_NONE) {
		atomic_store(&s->mhd, MHD_NONE);
		s->mfd = -1;
		if (s->state == S_DONE)
			s->state = S_FREE;
	}
	pthread_mutex_unlock(&g->lock);
}

void kvp_http_gate_phase(void *ctx, enum kvp_http_phase phase)
{
	struct slot *s = ctx;

	if (s && phase == KVP_HTTP_PHASE_EARLY) {
		/* requests end in order: the one being answered is number n_done + 1 */
		atomic_store(&s->n_early, atomic_load(&s->n_done) + 1);
		return;
	}
	/* only a request's end matters: the relay sees the rest in the bytes themselves */
	if (!s || phase != KVP_HTTP_PHASE_HEAD)
		return;
	/* the time before the count: the gate never pairs a new count with an old time */
	atomic_store(&s->t_done_ns, kvp_now_ns());
	atomic_fetch_add(&s->n_done, 1);
	if (atomic_load(&s->want_wake))
		wake(s->l->g);
}

/* ------------------------------------------------------------ life cycle */

int kvp_http_gate_new(struct kvp_http_gate **out, const struct kvp_http_config *cfg,
		      struct kvp_http_metrics *m, char *err, size_t cap)
{
	struct kvp_http_gate *g = calloc(1, sizeof(*g));
	struct epoll_event ev = { .events = EPOLLIN };
	struct rlimit rl;
	int r;

	if (!g)
		return -ENOMEM;
	g->cfg = cfg;
	g->m = m;
	g->epfd = g->evfd = -1;
	pthread_mutex_init(&g->lock, NULL);
	g->peek_cap = cfg->max_header_bytes + 1;
	g->peek = malloc(g->peek_cap);
	if (!g->peek) {
		r = -ENOMEM;
		goto err_free;
	}
	g->epfd = epoll_create1(EPOLL_CLOEXEC);
	g->evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (g->epfd < 0 || g->evfd < 0) {
		r = -errno;
		snprintf(err, cap, "gate: epoll/eventfd: %s", strerror(-r));
		goto err_free;
	}
	ev.data.ptr = g;
	if (epoll_ctl(g->epfd, EPOLL_CTL_ADD, g->evfd, &ev) < 0) {
		r = -errno;
		snprintf(err, cap, "gate: epoll_ctl: %s", strerror(-r));
		goto err_free;
	}
	/* a relayed connection is three descriptors (the client's, both ends of its pair),
	 * one being refused is one */
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	r = -pthread_create(&g->thread, NULL, gate_main, g);
	if (r) {
		snprintf(err, cap, "gate: start its thread: %s", strerror(-r));
		goto err_free;
	}
	g->started = true;
	*out = g;
	return 0;

err_free:
	kvp_http_gate_free(g);
	return r;
}

int kvp_http_gate_add(struct kvp_http_gate *g, int fd, struct MHD_Daemon *mhd, const char *name)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct listener *l;
	struct slot *slots;
	unsigned int n = g->cfg->max_conns * 2 + 16;
	int r = 0;

	slots = calloc(n, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	for (unsigned int i = 0; i < n; i++) {
		slots[i].kind = TAG_CLIENT;
		slots[i].fd = slots[i].pfd = slots[i].mfd = -1;
	}
	pthread_mutex_lock(&g->lock);
	if (g->n_ls == KVP_HTTP_LISTEN_MAX) {
		r = -ENOSPC;
		goto out_unlock;
	}
	l = &g->ls[g->n_ls];
	l->kind = TAG_LISTENER;
	l->fd = fd;
	l->g = g;
	l->mhd = mhd;
	l->slots = slots;
	l->n_slots = n;
	l->n_occ = 0;
	snprintf(l->name, sizeof(l->name), "%s", name);
	ev.data.ptr = l;
	if (epoll_ctl(g->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		r = -errno;
		l->slots = NULL;
		goto out_unlock;
	}
	slots = NULL;
	g->n_ls++;
out_unlock:
	pthread_mutex_unlock(&g->lock);
	free(slots);
	return r;
}

void kvp_http_gate_stop_accepting(struct kvp_http_gate *g)
{
	if (!g)
		return;
	atomic_store(&g->stop_accepting, true);
	wake(g);
}

/* Whether a relay still has answer bytes on their way to a client. */
static bool relays_busy(struct kvp_http_gate *g)
{
	bool busy = false;

	pthread_mutex_lock(&g->lock);
	for (unsigned int j = 0; j < g->n_ls && !busy; j++)
		for (unsigned int i = 0; i < g->ls[j].n_slots && !busy; i++) {
			struct slot *s = &g->ls[j].slots[i];
			int unread = 0;

			if (s->state != S_RELAY)
				continue;
			busy = s->x->m2c_off < s->x->m2c_len ||
			       (s->pfd >= 0 && !ioctl(s->pfd, FIONREAD, &unread) && unread > 0);
		}
	pthread_mutex_unlock(&g->lock);
	return busy;
}

void kvp_http_gate_stop(struct kvp_http_gate *g)
{
	if (!g)
		return;
	if (g->started) {
		/* the last answers libmicrohttpd wrote (a drain's) reach their clients first,
		 * for STOP_FLUSH_MS at most (a client that reads nothing does not hold us) */
		for (int i = 0; i < STOP_FLUSH_MS / 5 && relays_busy(g); i++)
			usleep(5000);
		atomic_store(&g->stop, true);
		wake(g);
		pthread_join(g->thread, NULL);
		g->started = false;
	}
	pthread_mutex_lock(&g->lock);
	for (unsigned int j = 0; j < g->n_ls; j++) {
		struct listener *l = &g->ls[j];

		if (l->fd >= 0) {
			close(l->fd);
			l->fd = -1;
		}
		for (unsigned int i = 0; i < l->n_slots; i++)
			if (l->slots[i].state == S_PENDING || l->slots[i].state == S_RELAY ||
			    l->slots[i].state == S_LINGER)
				slot_close(g, &l->slots[i]);
	}
	pthread_mutex_unlock(&g->lock);
}

void kvp_http_gate_free(struct kvp_http_gate *g)
{
	if (!g)
		return;
	kvp_http_gate_stop(g);
	for (unsigned int j = 0; j < g->n_ls; j++)
		free(g->ls[j].slots);
	if (g->epfd >= 0)
		close(g->epfd);
	if (g->evfd >= 0)
		close(g->evfd);
	free(g->peek);
	pthread_mutex_destroy(&g->lock);
	free(g);
}
