/* SPDX-License-Identifier: MIT */
/*
 * gate.c - kvpool-http's accept loop, limits and deadlines (see gate.h).
 *
 * Each listen address has a table of slots, twice max_conns (plus a few): a slot is a
 * connection the gate holds (PENDING: its first head not complete yet; LINGER: refused,
 * being drained before the close so the refusal is not lost to a reset), one handed to
 * libmicrohttpd (HANDED until its STARTED callback, then MHD), or FREE.  A slot
 * "occupies" max_conns while PENDING, HANDED or MHD and not yet evicted; the spare half
 * of the table holds connections being closed (an evicted MHD one stays in its slot
 * until the library reports it closed).
 *
 * Why peek and not read: libmicrohttpd has no way to be handed bytes already read, and
 * a second copy of every request through a socket pair would cost each request two more
 * thread hand-offs; a peek leaves the bytes for the library to read.  The price: only a
 * connection's first request is seen raw.  Later requests on a keep-alive connection
 * are checked from the fields libmicrohttpd parsed (server.c), which covers the framing
 * but not what the library drops before (docs/http.md, "Limits").
 *
 * The bookkeeping is linear scans of the tables (per accept: the per-address count and,
 * at max_conns, the longest-waiting slot; per tick: the deadlines): microseconds at the
 * default 256, about a millisecond per accept at tens of thousands of connections,
 * where an index per address and a queue of waiting slots would be the next step.
 *
 * Deadlines and eviction run on the gate thread under @lock; the HTTP threads report
 * phases through two atomics of the slot (its socket context) and take @lock only for
 * STARTED and CLOSED.  A slot's fd is shut down only under @lock and only while the slot
 * is MHD: the library closes the fd after its CLOSED callback, which takes @lock first,
 * so the number cannot have been reused by then.
 */
#include "ipc/http/gate.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ipc/http/api.h"
#include "ipc/http/head.h"
#include "util/log.h"
#include "util/time.h"

#define ACCEPT_BATCH 64		       /* accepts per wake-up: data of accepted ones goes between */
#define LINGER_NS 2000000000ull	       /* a refused connection is drained this long at most */
#define HANDED_STALE_NS 10000000000ull /* a hand-off the library never started: forgotten */
#define TICK_MS 200

enum slot_state { S_FREE = 0, S_PENDING, S_LINGER, S_HANDED, S_MHD };

struct listener;

struct slot {
	int kind; /* 1: a slot (epoll tag) */
	enum slot_state state;
	bool evicted; /* MHD: shut down, its place given to another */
	int fd;
	struct listener *l;
	struct sockaddr_storage addr;
	socklen_t addr_len;
	uint64_t t_accept_ns;
	uint64_t t_last_ns; /* PENDING: when its last new byte came (the idle timeout) */
	uint64_t t_linger_end_ns;
	size_t seen; /* PENDING: bytes of head seen at the last peek */
	/* MHD: written by the HTTP thread serving it, read by the gate under @lock */
	atomic_int phase;
	atomic_uint_fast64_t since_ns;
};

struct listener {
	int kind; /* 0: a listener (epoll tag) */
	int fd;
	char name[KVP_HTTP_ADDR_MAX + 8];
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

static bool occupies(const struct slot *s)
{
	return (s->state == S_PENDING || s->state == S_HANDED || s->state == S_MHD) && !s->evicted;
}

/* Free a slot the gate holds (PENDING, or LINGER: no longer occupying): out of epoll, closed. */
static void slot_close(struct kvp_http_gate *g, struct slot *s)
{
	if (s->state == S_PENDING)
		s->l->n_occ--;
	epoll_ctl(g->epfd, EPOLL_CTL_DEL, s->fd, NULL);
	close(s->fd);
	s->fd = -1;
	s->state = S_FREE;
}

/* Give up an MHD slot's place: shut its socket down; the library closes it. */
static void slot_evict_mhd(struct slot *s)
{
	shutdown(s->fd, SHUT_RDWR);
	s->evicted = true;
	s->l->n_occ--;
}

/* Drain what the client sent; true once it closed (or the socket failed). */
static bool drain(struct slot *s, char *buf, size_t cap)
{
	for (;;) {
		ssize_t n = recv(s->fd, buf, cap, MSG_DONTWAIT);

		if (n > 0)
			continue;
		if (n < 0 && errno == EINTR)
			continue;
		return !(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
	}
}

/*
 * Answer a PENDING connection with @status once, then close it: the response, the write
 * side shut down, the unread head drained (a close with unread bytes would send a reset,
 * which can destroy the response before the client reads it), the close at its EOF.
 */
static void slot_refuse(struct kvp_http_gate *g, struct slot *s, unsigned int status,
			const char *why, bool anthropic)
{
	struct kvp_http_err e = { .status = status };
	struct kvp_buf body = KVP_BUF_INIT;
	char head[256];
	int hn;

	kvp_http_err_set(&e, status, status == 408 ? "request_timeout" : "invalid_request", NULL,
			 "%s", why);
	kvp_http_err_json(&e, anthropic ? KVP_HTTP_SHAPE_ANTHROPIC : KVP_HTTP_SHAPE_OPENAI, &body);
	/* x-should-retry: both SDKs retry a 5xx unless told not to; 501 and 505 will not
	 * change by retrying (server.c says the same of its 501s) */
	hn = snprintf(head, sizeof(head),
		      "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\n"
		      "Content-Length: %zu\r\n%sConnection: close\r\n\r\n",
		      status, kvp_http_reason(status), body.len,
		      status >= 500 ? "x-should-retry: false\r\n" : "");
	/* the socket's send buffer is empty: a few hundred bytes fit at once */
	if (send(s->fd, head, (size_t)hn, MSG_NOSIGNAL | MSG_DONTWAIT) == hn && body.len)
		send(s->fd, body.p, body.len, MSG_NOSIGNAL | MSG_DONTWAIT);
	kvp_buf_deinit(&body);
	kvp_log(LOG_DEBUG, "http: %s: refused a request head: %u %s", s->l->name, status, why);
	shutdown(s->fd, SHUT_WR);
	s->l->n_occ--;
	s->state = S_LINGER;
	s->t_linger_end_ns = kvp_now_ns() + LINGER_NS;
	if (drain(s, g->peek, g->peek_cap))
		slot_close(g, s);
}

/* Hand a PENDING slot whose head is sound to the library. */
static void slot_hand(struct kvp_http_gate *g, struct slot *s)
{
	struct listener *l = s->l;
	int fd = s->fd;

	epoll_ctl(g->epfd, EPOLL_CTL_DEL, fd, NULL);
	s->state = S_HANDED;
	atomic_store(&s->phase, KVP_HTTP_PHASE_HEAD);
	atomic_store(&s->since_ns, s->t_accept_ns); /* the head's deadline runs on */
	pthread_mutex_unlock(&g->lock);
	/* the library queues it for one of its threads, which calls STARTED */
	if (MHD_add_connection(l->mhd, fd, (const struct sockaddr *)&s->addr, s->addr_len) !=
	    MHD_YES) {
		pthread_mutex_lock(&g->lock);
		if (s->state == S_HANDED) { /* the library closed the socket */
			s->state = S_FREE;
			s->fd = -1;
			l->n_occ--;
		}
		kvp_log(LOG_WARNING, "http: %s: libmicrohttpd refused a connection", l->name);
		return;
	}
	pthread_mutex_lock(&g->lock);
}

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
		else if (s->state == S_MHD && !s->evicted &&
			 atomic_load(&s->phase) == KVP_HTTP_PHASE_HEAD)
			t = atomic_load(&s->since_ns);
		else
			continue;
		if (t < best_t) {
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
				n += occupies(&g->ls[j].slots[i]) &&
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
		if (v->state == S_PENDING)
			slot_close(g, v);
		else
			slot_evict_mhd(v);
	}
	for (unsigned int i = 0; i < l->n_slots && !s; i++) {
		struct slot *c = &l->slots[i];

		if (c->state == S_HANDED && c->fd == fd)
			c->state = S_FREE, l->n_occ--; /* the library closed it unannounced */
		if (c->state == S_FREE)
			s = c;
	}
	if (!s) { /* every spare slot holds a connection being closed */
		atomic_fetch_add(&g->m->conns_refused[0], 1);
		close(fd);
		return;
	}
	memset(&s->addr, 0, sizeof(s->addr));
	memcpy(&s->addr, addr, addr_len);
	s->addr_len = addr_len;
	s->fd = fd;
	s->l = l;
	s->evicted = false;
	s->seen = 0;
	s->t_accept_ns = s->t_last_ns = kvp_now_ns();
	s->state = S_PENDING;
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

/* Deadlines: heads, bodies, refused connections' drains, hand-offs never started. */
static void tick(struct kvp_http_gate *g, uint64_t now)
{
	uint64_t head_ns = secs_ns(g->cfg->header_timeout_s);
	uint64_t body_ns = secs_ns(g->cfg->body_timeout_s);
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
			case S_LINGER:
				if (now >= s->t_linger_end_ns || drain(s, g->peek, g->peek_cap))
					slot_close(g, s);
				break;
			case S_HANDED:
				if (now - s->t_accept_ns >= HANDED_STALE_NS + head_ns) {
					s->state = S_FREE;
					l->n_occ--;
				}
				break;
			case S_MHD: {
				int ph = atomic_load(&s->phase);
				uint64_t since = atomic_load(&s->since_ns);

				if (s->evicted || ph == KVP_HTTP_PHASE_BUSY || now < since)
					break;
				if (now - since >=
				    (ph == KVP_HTTP_PHASE_HEAD ? head_ns : body_ns)) {
					atomic_fetch_add(&g->m->conns_timed_out, 1);
					slot_evict_mhd(s);
				}
				break;
			}
			default:
				break;
			}
		}
	}
}

static void *gate_main(void *arg)
{
	struct kvp_http_gate *g = arg;
	struct epoll_event evs[64];

	while (!atomic_load(&g->stop)) {
		int n = epoll_wait(g->epfd, evs, 64, TICK_MS);

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
			} else if (*(int *)evs[i].data.ptr == 0) {
				on_listener(g, evs[i].data.ptr);
			} else {
				struct slot *s = evs[i].data.ptr;
				bool hup = evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR);

				if (s->state == S_PENDING)
					slot_peek(g, s, hup);
				else if (s->state == S_LINGER && drain(s, g->peek, g->peek_cap))
					slot_close(g, s);
			}
		}
		tick(g, kvp_now_ns());
		pthread_mutex_unlock(&g->lock);
	}
	return NULL;
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

			if (s->state == S_HANDED && s->fd == fd) {
				s->state = S_MHD;
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
	if (s->state == S_MHD) {
		if (!s->evicted)
			s->l->n_occ--;
		s->state = S_FREE;
		s->fd = -1;
	}
	pthread_mutex_unlock(&g->lock);
}

void kvp_http_gate_phase(void *ctx, enum kvp_http_phase phase)
{
	struct slot *s = ctx;

	if (!s)
		return;
	/* since before phase: the gate never pairs a new phase with an old time */
	atomic_store(&s->since_ns, kvp_now_ns());
	atomic_store(&s->phase, (int)phase);
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
	/* each connection is a descriptor, and so is each one being refused */
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
		slots[i].kind = 1;
		slots[i].fd = -1;
	}
	pthread_mutex_lock(&g->lock);
	if (g->n_ls == KVP_HTTP_LISTEN_MAX) {
		r = -ENOSPC;
		goto out_unlock;
	}
	l = &g->ls[g->n_ls];
	l->kind = 0;
	l->fd = fd;
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

static void wake(struct kvp_http_gate *g)
{
	uint64_t one = 1;

	if (write(g->evfd, &one, sizeof(one)) < 0) {
		/* the counter is full: the thread is awake anyway */
	}
}

void kvp_http_gate_stop_accepting(struct kvp_http_gate *g)
{
	if (!g)
		return;
	atomic_store(&g->stop_accepting, true);
	wake(g);
}

void kvp_http_gate_stop(struct kvp_http_gate *g)
{
	if (!g)
		return;
	if (g->started) {
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
			if (l->slots[i].state == S_PENDING || l->slots[i].state == S_LINGER)
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
