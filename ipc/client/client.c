/* SPDX-License-Identifier: MIT */
/*
 * client.c - libkvpool: the blocking C client of kvpoold (include/kvpool/kvpool.h).
 *
 * One struct kvp_client is one Unix-socket connection.  Frames are read whole: the
 * 24-byte header (checked with the same ipc/proto.c code the daemon uses), then the
 * payload into c->buf, which therefore always starts 8-aligned, so the int32 ids of a
 * TOKEN frame are read in place.  Every read goes through recvmsg() so that the pool fd
 * riding on WELCOME (SCM_RIGHTS) is collected whichever read it arrives on; fds that
 * arrive at any other time are closed.
 *
 * A struct kvp_client_conv keeps a conversation for CHAT: its messages, and the ids
 * of what the daemon computed of it (the last IDS frame's prompt plus the TOKEN frames'
 * ids), which the next CHAT sends back as its context (docs/protocol.md, "CHAT").
 *
 * Invariants: c->in_flight counts requests submitted and not yet ended by DONE or
 * ERROR; c->dead is set once the connection cannot carry frames any more; a
 * conversation's context covers its first ctx_msgs messages, the last of which is the
 * assistant reply the context's last ids were generated for.
 * Thread: the caller's; a client is used by one thread at a time.
 */
#include "kvpool/kvpool.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ipc/proto.h"
#include "shm/poolhdr.h"

#define KVP_EXPORT __attribute__((visibility("default")))

/* Largest frame the client accepts from the daemon (TOKEN frames are small). */
#define CLIENT_MAX_FRAME (64u << 20)
/* Largest status report read (the daemon's are a few KiB). */
#define STATUS_MAX_BYTES (64u << 20)
/* fds collected from one connection before WELCOME is parsed. */
#define RX_FDS_MAX 4

struct kvp_client {
	int fd;
	int pool_fd;
	void *pool;
	size_t pool_len;
	struct kvp_welcome welcome;
	uint64_t next_id;
	unsigned int in_flight;
	bool dead;
	int rx_fds[RX_FDS_MAX];
	unsigned int n_rx_fds;
	bool fds_truncated;
	uint8_t *buf; /* payload of the current frame (+1 byte for a NUL) */
	size_t buf_cap;
	uint8_t *out; /* encoded outgoing frame */
	size_t out_cap;
	char errmsg[256];
	struct kvp_cache_ctl cc; /* kvp_client_set_cache(): sent with each request when set */
	bool has_cc;
	struct kvp_cache_usage last_cu; /* of the last DONE event, when it carried one */
	bool last_has_cu;
	struct kvp_spec_usage last_su; /* of the last DONE event, when it carried one */
	bool last_has_su;
	int32_t last_cont; /* continuation of the last TOKEN event, -1 none */
	/* kvp_client_set_sampling(): the section sent when set (bias and schema in samp_buf) */
	struct kvp_proto_sampling samp;
	bool has_samp;
	uint8_t *samp_buf;
	/* LOGPROBS: the pending one (for the next TOKEN of @lp_req), then the last TOKEN's */
	struct kvp_logprob *lp_pend, *lp_last;
	size_t lp_cap;
	uint64_t lp_req;
	uint32_t lp_pend_n, lp_last_n, lp_pend_top, lp_last_top;
};

static int set_err(struct kvp_client *c, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int set_err(struct kvp_client *c, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->errmsg, sizeof(c->errmsg), fmt, ap);
	va_end(ap);
	return code;
}

KVP_EXPORT void kvp_client_params_init(struct kvp_client_params *p)
{
	*p = (struct kvp_client_params){
		.max_new_tokens = 16,
		.temperature = 0.0f,
		.top_k = 0,
		.top_p = 1.0f,
		.priority = KVP_PRIORITY_DEFAULT,
	};
}

KVP_EXPORT const char *kvp_client_strerror(int code)
{
	if (code < 0)
		return strerror(-code);
	return kvp_proto_status_str((uint32_t)code);
}

KVP_EXPORT const char *kvp_client_errmsg(const struct kvp_client *c)
{
	return c ? c->errmsg : "out of memory";
}

KVP_EXPORT const struct kvp_welcome *kvp_client_welcome(const struct kvp_client *c)
{
	return &c->welcome;
}

KVP_EXPORT const void *kvp_client_pool(const struct kvp_client *c, size_t *len)
{
	if (len)
		*len = c->pool ? c->pool_len : 0;
	return c->pool;
}

KVP_EXPORT int kvp_client_pool_fd(const struct kvp_client *c)
{
	return c->pool_fd;
}

KVP_EXPORT int kvp_client_socket_fd(const struct kvp_client *c)
{
	return c->fd;
}

static int unix_connect(const char *path, int *fd_out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	while (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;

		if (e == EINTR)
			continue;
		close(fd);
		return -e;
	}
	*fd_out = fd;
	return 0;
}

static int send_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t r = send(fd, b, n, MSG_NOSIGNAL);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Keep (or close, when there are too many) the fds of one control message. */
static void collect_fds(struct kvp_client *c, struct msghdr *mh)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		size_t n;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (c->n_rx_fds < RX_FDS_MAX)
				c->rx_fds[c->n_rx_fds++] = fd;
			else
				close(fd);
		}
	}
	if (mh->msg_flags & MSG_CTRUNC)
		c->fds_truncated = true;
}

static void drop_rx_fds(struct kvp_client *c)
{
	for (unsigned int i = 0; i < c->n_rx_fds; i++)
		close(c->rx_fds[i]);
	c->n_rx_fds = 0;
}

/* Read exactly @n bytes.  Return: 0, 1 on EOF before the first byte, or -errno. */
static int recv_all(struct kvp_client *c, void *p, size_t n)
{
	uint8_t *b = p;
	size_t got = 0;

	while (got < n) {
		alignas(struct cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * RX_FDS_MAX)];
		struct iovec iov = { .iov_base = b + got, .iov_len = n - got };
		struct msghdr mh = { .msg_iov = &iov,
				     .msg_iovlen = 1,
				     .msg_control = ctl,
				     .msg_controllen = sizeof(ctl) };
		ssize_t r = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			/* a daemon closing with our bytes unread resets: the same as EOF here */
			if (errno == ECONNRESET && !got)
				return 1;
			return -errno;
		}
		if (mh.msg_controllen)
			collect_fds(c, &mh);
		if (r == 0)
			return got ? -EPROTO : 1;
		got += (size_t)r;
	}
	return 0;
}

/*
 * Can the connection carry frames?  The one liveness guard: of every read, send and
 * blocking call.  Return: 0, or -ENOTCONN (it says so).
 */
static int alive(struct kvp_client *c)
{
	if (c->dead || c->fd < 0)
		return set_err(c, -ENOTCONN, "connection closed");
	return 0;
}

/*
 * Read one daemon frame into @hdr and c->buf (NUL-terminated after the payload).
 * Return: 0, -ENOTCONN on a clean EOF, -EPROTO on garbage, or -errno.
 */
static int read_frame(struct kvp_client *c, struct kvp_frame_hdr *hdr)
{
	uint8_t raw[sizeof(*hdr)];
	const char *why = "";
	int r;

	r = alive(c);
	if (r)
		return r;
	r = recv_all(c, raw, sizeof(raw));
	if (r) {
		c->dead = true;
		if (r == 1)
			return set_err(c, -ENOTCONN, "daemon closed the connection");
		if (r == -EPROTO)
			return set_err(c, r, "daemon closed the connection mid-frame");
		return set_err(c, r, "receive: %s", strerror(-r));
	}
	r = kvp_proto_check_hdr(raw, sizeof(raw), CLIENT_MAX_FRAME, hdr, &why);
	if (r == KVP_OK && kvp_proto_from_client(hdr->type)) {
		r = KVP_E_PROTO;
		why = "client frame type sent by the daemon";
	}
	if (r != KVP_OK && raw[0] == '{') {
		/* the status socket's JSON answer to our HELLO */
		c->dead = true;
		return set_err(c, -EPROTO,
			       "this is kvpoold's status socket (it answered with JSON), not its "
			       "request socket");
	}
	if (r != KVP_OK) {
		c->dead = true;
		return set_err(c, -EPROTO, "bad frame from daemon: %s", why);
	}
	if ((size_t)hdr->len_bytes + 1 > c->buf_cap) {
		size_t cap = (size_t)hdr->len_bytes + 1;
		uint8_t *nb = realloc(c->buf, cap < 4096 ? 4096 : cap);

		if (!nb)
			return set_err(c, -ENOMEM, "out of memory");
		c->buf = nb;
		c->buf_cap = cap < 4096 ? 4096 : cap;
	}
	r = recv_all(c, c->buf, hdr->len_bytes);
	if (r) {
		c->dead = true;
		return set_err(c, r == 1 ? -EPROTO : r, "daemon closed the connection mid-frame");
	}
	c->buf[hdr->len_bytes] = 0;
	return 0;
}

/* Does the (checked) pool header @h describe the pool WELCOME announced? */
static int pool_matches_welcome(struct kvp_client *c, const struct kvp_pool_header *h)
{
	const struct kvp_welcome *w = &c->welcome;
	const struct {
		const char *name;
		uint64_t pool;
		uint64_t welcome;
	} same[] = {
		{ "n_layers", h->shape.n_layers, w->shape.n_layers },
		{ "n_kv_heads", h->shape.n_kv_heads, w->shape.n_kv_heads },
		{ "head_dim", h->shape.head_dim, w->shape.head_dim },
		{ "dtype", h->shape.dtype, w->shape.dtype },
		{ "block_tokens", h->shape.block_tokens, w->shape.block_tokens },
		{ "block_stride", h->block_stride, w->block_stride },
		{ "data_offset", h->data_offset, w->data_offset },
		{ "segment_bytes", h->segment_bytes, w->segment_bytes },
		{ "n_blocks", h->n_blocks, w->n_blocks },
	};

	for (size_t i = 0; i < sizeof(same) / sizeof(same[0]); i++)
		if (same[i].pool != same[i].welcome)
			return set_err(c, -EPROTO,
				       "pool segment header says %s %llu, WELCOME "
				       "says %llu",
				       same[i].name, (unsigned long long)same[i].pool,
				       (unsigned long long)same[i].welcome);
	return 0;
}

/*
 * Is the header of the mapped pool (@p, @len bytes) one this library can read, and does
 * it describe the same pool as WELCOME?  Offsets a caller computes from WELCOME are
 * then offsets inside this mapping.  The header is copied first so that the check and
 * the comparison see the same bytes.
 */
static int check_pool(struct kvp_client *c, const void *p, size_t len)
{
	struct kvp_pool_header h;
	int r;

	if (len < sizeof(h))
		return set_err(c, -EPROTO, "pool segment: %zu bytes, shorter than its header", len);
	memcpy(&h, p, sizeof(h));
	r = kvp_pool_header_check(&h, len, NULL);
	if (r == -EPROTO)
		return set_err(c, -EPROTO,
			       "pool segment: header magic %#llx version %u; this "
			       "library reads magic %#llx version %u",
			       (unsigned long long)h.magic, h.version,
			       (unsigned long long)KVP_POOL_MAGIC, KVP_POOL_VERSION);
	if (r)
		return set_err(c, -EPROTO,
			       "pool segment: inconsistent header (shape, block "
			       "sizes, page kind or extent do not add up for %zu bytes)",
			       len);
	return pool_matches_welcome(c, &h);
}

/* Map the pool fd that came with WELCOME, read-only, and check its header. */
static int map_pool(struct kvp_client *c)
{
	struct stat st;
	void *p;
	int r;

	if (c->fds_truncated || c->n_rx_fds != c->welcome.n_fds) {
		drop_rx_fds(c);
		return set_err(c, -EPROTO, "WELCOME announced %u fds, %s", c->welcome.n_fds,
			       "a different number arrived");
	}
	if (!c->welcome.n_fds)
		return 0;
	c->pool_fd = c->rx_fds[0];
	c->n_rx_fds = 0;
	if (fstat(c->pool_fd, &st) < 0)
		return set_err(c, -errno, "pool fd: fstat: %s", strerror(errno));
	if (st.st_size <= 0 || (uint64_t)st.st_size < c->welcome.segment_bytes)
		return set_err(c, -EPROTO, "pool fd smaller (%lld bytes) than WELCOME says",
			       (long long)st.st_size);
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, c->pool_fd, 0);
	if (p == MAP_FAILED)
		return set_err(c, -errno, "pool fd: mmap read-only: %s", strerror(errno));
	r = check_pool(c, p, (size_t)st.st_size);
	if (r) {
		munmap(p, (size_t)st.st_size);
		return r;
	}
	c->pool = p;
	c->pool_len = (size_t)st.st_size;
	return 0;
}

KVP_EXPORT int kvp_client_connect(struct kvp_client **out, const char *path)
{
	struct kvp_hello hello = { .flags = KVP_HELLO_WANT_POOL_FD };
	struct kvp_frame_hdr hdr;
	uint8_t frame[sizeof(hdr) + sizeof(hello)];
	struct kvp_client *c;
	const char *why = "";
	int r;

	*out = NULL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	*out = c;
	c->fd = -1;
	c->pool_fd = -1;
	c->next_id = 1;
	c->last_cont = -1;
	if (!path)
		path = KVP_DEFAULT_SOCKET;

	r = unix_connect(path, &c->fd);
	if (r)
		return set_err(c, r, "connect %s: %s", path, strerror(-r));
	/* "<program>/<pid>": what the daemon's debug log and status list show */
	snprintf(hello.client, sizeof(hello.client), "%.20s/%d", program_invocation_short_name,
		 (int)getpid() % 10000000);
	kvp_proto_encode_hello(frame, sizeof(frame), &hello);
	r = send_all(c->fd, frame, sizeof(frame));
	if (r) {
		/* a refusing daemon may have sent ERROR and closed before reading HELLO */
		int sr = r;

		if (read_frame(c, &hdr) || hdr.type != KVP_FRAME_ERROR)
			return set_err(c, sr, "send HELLO: %s", strerror(-sr));
	} else {
		r = read_frame(c, &hdr);
		if (r)
			return r;
	}
	if (hdr.type == KVP_FRAME_ERROR) {
		struct kvp_error e;
		const char *msg;

		c->dead = true;
		if (kvp_proto_decode_error(c->buf, hdr.len_bytes, &e, &msg, &why))
			return set_err(c, -EPROTO, "bad ERROR from daemon: %s", why);
		if (!e.status || e.status > INT32_MAX)
			e.status = KVP_E_INTERNAL;
		return set_err(c, (int)e.status, "daemon refused HELLO: %.*s", (int)e.msg_bytes,
			       msg);
	}
	if (hdr.type != KVP_FRAME_WELCOME) {
		c->dead = true;
		return set_err(c, -EPROTO, "daemon answered HELLO with %s",
			       kvp_proto_type_name(hdr.type));
	}
	if (kvp_proto_decode_welcome(c->buf, hdr.len_bytes, &c->welcome, &why)) {
		c->dead = true;
		drop_rx_fds(c);
		return set_err(c, -EPROTO, "bad WELCOME: %s", why);
	}
	c->welcome.model[sizeof(c->welcome.model) - 1] = 0;
	return map_pool(c);
}

KVP_EXPORT void kvp_client_close(struct kvp_client *c)
{
	if (!c)
		return;
	if (c->pool)
		munmap(c->pool, c->pool_len);
	if (c->pool_fd >= 0)
		close(c->pool_fd);
	drop_rx_fds(c);
	if (c->fd >= 0)
		close(c->fd);
	free(c->buf);
	free(c->out);
	free(c->samp_buf);
	free(c->lp_pend);
	free(c->lp_last);
	free(c);
}

/* Room for an encoded frame of @need bytes in c->out (0 from an encoder: too large). */
static int out_reserve(struct kvp_client *c, size_t need)
{
	uint8_t *nb;

	if (!need)
		return set_err(c, -EMSGSIZE, "request too large for one frame");
	if (need <= c->out_cap)
		return 0;
	nb = realloc(c->out, need);
	if (!nb)
		return set_err(c, -ENOMEM, "out of memory");
	c->out = nb;
	c->out_cap = need;
	return 0;
}

/*
 * Send the request frame in c->out (@len bytes) under a fresh id.  A daemon that refuses
 * a frame (too large, say) sends ERROR and closes, possibly while we still write: then
 * that ERROR, not the broken pipe, is what the caller hears.
 */
static int send_request(struct kvp_client *c, size_t len, const char *what, uint64_t *req_id)
{
	struct kvp_frame_hdr hdr = { 0 };
	struct kvp_error e;
	const char *msg, *why;
	int r;

	r = send_all(c->fd, c->out, len);
	if (!r) {
		*req_id = c->next_id++;
		c->in_flight++;
		return 0;
	}
	/* the connection is over either way; read what the daemon said before closing */
	if (!read_frame(c, &hdr) && hdr.type == KVP_FRAME_ERROR &&
	    !kvp_proto_decode_error(c->buf, hdr.len_bytes, &e, &msg, &why)) {
		c->dead = true;
		if (!e.status || e.status > INT32_MAX)
			e.status = KVP_E_INTERNAL;
		return set_err(c, (int)e.status, "daemon: %.*s", (int)e.msg_bytes, msg);
	}
	c->dead = true;
	return set_err(c, r, "send %s: %s", what, strerror(-r));
}

/*
 * struct out_req - a request frame to encode: @gen for GENERATE and CHAT; else the
 * type's fixed struct @fixed and what follows it, @body (TOKENIZE's text, DETOKENIZE's
 * and LEASE's ids, PIN's prompt, FLUSH's domain name)
 */
struct out_req {
	uint32_t type;
	const struct kvp_gen_req *gen;
	const void *fixed;
	const void *body;
};

/* @o into @buf with ipc/proto.c's encoder of its type.  Return: as the encoders. */
static size_t encode(const struct out_req *o, void *buf, size_t cap, uint64_t req_id)
{
	switch (o->type) {
	case KVP_FRAME_TOKENIZE:
		return kvp_proto_encode_tokenize(buf, cap, req_id, o->fixed, o->body);
	case KVP_FRAME_DETOKENIZE:
		return kvp_proto_encode_detokenize(buf, cap, req_id, o->fixed, o->body);
	case KVP_FRAME_LEASE:
		return kvp_proto_encode_lease_req(buf, cap, req_id, o->fixed, o->body);
	case KVP_FRAME_PIN:
	case KVP_FRAME_UNPIN:
		return kvp_proto_encode_pin(buf, cap, o->type, req_id, o->fixed, o->body);
	case KVP_FRAME_FLUSH:
		return kvp_proto_encode_flush_domain(buf, cap, req_id, o->body);
	default:
		return kvp_proto_encode_request(buf, cap, req_id, o->gen);
	}
}

/*
 * Encode @o into c->out (again, into a larger buffer, when it did not fit) and send it
 * under a fresh id, *@req_id.  Return: 0, or as send_request().
 */
static int submit_frame(struct kvp_client *c, const struct out_req *o, uint64_t *req_id)
{
	size_t need, cap0 = c->out_cap;
	int r;

	r = alive(c);
	if (r)
		return r;
	need = encode(o, c->out, cap0, c->next_id);
	r = out_reserve(c, need);
	if (r)
		return r;
	if (need > cap0) /* it did not fit, and nothing was written */
		encode(o, c->out, c->out_cap, c->next_id);
	return send_request(c, need, kvp_proto_type_name(o->type), req_id);
}

static int check_params(struct kvp_client *c, const struct kvp_client_prompt *pr,
			const struct kvp_client_params *p)
{
	const struct kvp_welcome *w = &c->welcome;
	size_t n;

	if (!pr || (!pr->n_tokens) == (!pr->text_len))
		return set_err(c, -EINVAL, "give exactly one of tokens or text");
	if ((pr->n_tokens && !pr->tokens) || (pr->text_len && !pr->text))
		return set_err(c, -EINVAL, "prompt pointer is NULL");
	if (pr->text_len && memchr(pr->text, 0, pr->text_len))
		return set_err(c, -EINVAL, "prompt text contains a NUL byte");
	/* a text's tokens are counted by the daemon, which knows the tokenizer */
	n = pr->n_tokens ? pr->n_tokens : pr->text_len;
	if (n > UINT32_MAX || (w->max_prompt_tokens && pr->n_tokens > w->max_prompt_tokens))
		return set_err(c, KVP_E_LIMIT, "prompt of %zu %s exceeds the daemon's limit %u", n,
			       pr->n_tokens ? "tokens" : "bytes", w->max_prompt_tokens);
	if (!p->max_new_tokens)
		return set_err(c, -EINVAL, "max_new_tokens must be at least 1");
	if (w->max_new_tokens && p->max_new_tokens > w->max_new_tokens)
		return set_err(c, KVP_E_LIMIT, "max_new_tokens %u exceeds the daemon's limit %u",
			       p->max_new_tokens, w->max_new_tokens);
	if (!isfinite(p->temperature) || p->temperature < 0.0f ||
	    p->temperature > KVP_TEMPERATURE_MAX)
		return set_err(c, -EINVAL, "temperature must be in [0, 100]");
	if (!isfinite(p->top_p) || !(p->top_p > 0.0f) || p->top_p > 1.0f)
		return set_err(c, -EINVAL, "top_p must be in (0, 1]");
	if (p->salt_len > KVP_SALT_MAX || (p->salt_len && !p->salt))
		return set_err(c, -EINVAL, "salt must be at most %d bytes", KVP_SALT_MAX);
	if ((p->priority < KVP_PRIORITY_MIN || p->priority > KVP_PRIORITY_MAX) &&
	    p->priority != KVP_PRIORITY_DEFAULT)
		return set_err(c, -EINVAL, "priority must be in [%d, %d] or KVP_PRIORITY_DEFAULT",
			       KVP_PRIORITY_MIN, KVP_PRIORITY_MAX);
	return 0;
}

/*
 * What a GENERATE and a CHAT of @c take alike: @p's sampling fields, salt, priority and
 * flags, and the sections set on @c (cache control, sampling) into @r.
 */
static void request_of(const struct kvp_client *c, const struct kvp_client_params *p, uint32_t type,
		       struct kvp_gen_req *r)
{
	*r = (struct kvp_gen_req){ .type = type,
				   .max_new_tokens = p->max_new_tokens,
				   .top_k = p->top_k,
				   .temperature = p->temperature,
				   .top_p = p->top_p,
				   .seed = p->seed,
				   .priority = p->priority,
				   .salt_len = (uint32_t)p->salt_len,
				   .has_cc = c->has_cc,
				   .cc = c->cc,
				   .has_samp = c->has_samp,
				   .samp = c->samp };
	if (p->salt_len)
		memcpy(r->salt, p->salt, p->salt_len);
	/* the bits of these are GENERATE's and CHAT's alike (ipc/proto.h) */
	if (p->no_cache)
		r->flags |= KVP_GEN_NO_CACHE;
	if (p->fit_context)
		r->flags |= KVP_GEN_FIT_CONTEXT;
	if (p->speculative == KVP_SPECULATIVE_ON)
		r->flags |= KVP_GEN_SPEC_ON;
	else if (p->speculative == KVP_SPECULATIVE_OFF)
		r->flags |= KVP_GEN_SPEC_OFF;
	/*
	 * a caller that names speculation gets its figures; one that does not sends what
	 * every daemon since version 2 takes (an older one refuses the flag)
	 */
	if (p->speculative == KVP_SPECULATIVE_ON || p->speculative == KVP_SPECULATIVE_OFF)
		r->flags |= KVP_GEN_SPEC_USAGE;
}

KVP_EXPORT int kvp_client_submit(struct kvp_client *c, const struct kvp_client_prompt *prompt,
				 const struct kvp_client_params *params, uint64_t *req_id)
{
	struct kvp_client_params defaults;
	struct kvp_gen_req g;
	int r;

	if (!params) {
		kvp_client_params_init(&defaults);
		params = &defaults;
	}
	r = check_params(c, prompt, params);
	if (r)
		return r;
	request_of(c, params, KVP_FRAME_GENERATE, &g);
	if (prompt->text_len) {
		g.flags |= KVP_GEN_TEXT;
		if (params->parse_special)
			g.flags |= KVP_GEN_PARSE_SPECIAL;
		g.text_bytes = (uint32_t)prompt->text_len;
		g.text = prompt->text;
	} else {
		g.n_ids = (uint32_t)prompt->n_tokens;
		g.ids = prompt->tokens;
	}
	return submit_frame(c, &(struct out_req){ .type = KVP_FRAME_GENERATE, .gen = &g }, req_id);
}

KVP_EXPORT int kvp_client_cancel(struct kvp_client *c, uint64_t req_id)
{
	uint8_t frame[sizeof(struct kvp_frame_hdr)];
	int r;

	r = alive(c);
	if (r)
		return r;
	kvp_proto_encode_cancel(frame, sizeof(frame), req_id);
	r = send_all(c->fd, frame, sizeof(frame));
	if (r)
		return set_err(c, r, "send CANCEL: %s", strerror(-r));
	return 0;
}

KVP_EXPORT int kvp_client_next(struct kvp_client *c, struct kvp_client_event *ev)
{
	struct kvp_frame_hdr hdr;
	const char *why = "";
	int r;

	*ev = (struct kvp_client_event){ 0 };
	r = read_frame(c, &hdr);
	if (r)
		return r;
	drop_rx_fds(c); /* fds are only expected with WELCOME */
	ev->req_id = hdr.req_id;
	switch (hdr.type) {
	case KVP_FRAME_TOKEN: {
		struct kvp_token t;
		const void *ids;
		bool has_usage;

		/* a request's first TOKEN carries the prompt's usage so far: in @ev->usage */
		if (kvp_proto_decode_token(c->buf, hdr.len_bytes, &t, &ids, &ev->text,
					   &c->last_cont, &ev->usage, &has_usage, &why))
			break;
		/* the LOGPROBS just before, when it describes these ids */
		c->lp_last_n = 0;
		if (c->lp_pend_n && c->lp_req == hdr.req_id && c->lp_pend_n == t.n_tokens) {
			struct kvp_logprob *x = c->lp_last;

			c->lp_last = c->lp_pend;
			c->lp_pend = x;
			c->lp_last_n = c->lp_pend_n;
			c->lp_last_top = c->lp_pend_top;
		}
		c->lp_pend_n = 0;
		ev->type = KVP_EVENT_TOKEN;
		ev->tokens = ids; /* c->buf + 8: aligned (see the header comment) */
		ev->n_tokens = t.n_tokens;
		ev->text_len = t.text_bytes;
		return 0;
	}
	case KVP_FRAME_LOGPROBS: {
		struct kvp_logprobs h;
		const void *entries;
		size_t n;

		if (kvp_proto_decode_logprobs(c->buf, hdr.len_bytes, &h, &entries, &why))
			break;
		n = (size_t)h.n_tokens * (1 + h.n_top);
		if (n > c->lp_cap) {
			struct kvp_logprob *a = realloc(c->lp_pend, n * sizeof(*a));
			struct kvp_logprob *b = a ? realloc(c->lp_last, n * sizeof(*b)) : NULL;

			if (a)
				c->lp_pend = a;
			if (!b)
				return set_err(c, -ENOMEM, "out of memory");
			c->lp_last = b;
			c->lp_cap = n;
		}
		memcpy(c->lp_pend, entries, n * sizeof(*c->lp_pend));
		c->lp_pend_n = h.n_tokens;
		c->lp_pend_top = h.n_top;
		c->lp_req = hdr.req_id;
		return kvp_client_next(c, ev); /* not an event: it goes with the next TOKEN */
	}
	case KVP_FRAME_IDS: {
		struct kvp_ids t;
		const void *ids;

		if (kvp_proto_decode_ids(c->buf, hdr.len_bytes, &t, &ids, &ev->text, &why))
			break;
		ev->type = KVP_EVENT_IDS;
		ev->tokens = ids; /* c->buf + 8: aligned */
		ev->n_tokens = t.n_tokens;
		ev->text_len = t.text_bytes;
		return 0;
	}
	case KVP_FRAME_DONE:
		if (kvp_proto_decode_done(c->buf, hdr.len_bytes, &ev->usage, &c->last_cu,
					  &c->last_has_cu, &c->last_su, &c->last_has_su, &why))
			break;
		ev->type = KVP_EVENT_DONE;
		ev->status = (int)ev->usage.status;
		if (c->in_flight)
			c->in_flight--;
		return 0;
	case KVP_FRAME_ERROR: {
		struct kvp_error e;
		const char *msg;

		if (kvp_proto_decode_error(c->buf, hdr.len_bytes, &e, &msg, &why))
			break;
		c->buf[sizeof(e) + e.msg_bytes] = 0;
		ev->type = KVP_EVENT_ERROR;
		ev->status = e.status && e.status <= INT32_MAX ? (int)e.status : KVP_E_INTERNAL;
		ev->message = msg;
		if (!hdr.req_id) {
			c->dead = true; /* the daemon closes the connection after this */
			set_err(c, ev->status, "daemon: %s", msg);
		} else if (c->in_flight) {
			c->in_flight--;
		}
		return 0;
	}
	default:
		why = "unexpected frame type";
		break;
	}
	c->dead = true;
	return set_err(c, -EPROTO, "bad %s frame from daemon: %s", kvp_proto_type_name(hdr.type),
		       why);
}

KVP_EXPORT int kvp_client_set_cache(struct kvp_client *c, const struct kvp_cache_ctl *cc)
{
	if (!cc) {
		c->has_cc = false;
		memset(&c->cc, 0, sizeof(c->cc));
		return 0;
	}
	if (cc->n_breakpoints > KVP_CACHE_BREAKPOINTS_MAX)
		return set_err(c, -EINVAL, "at most %d cache breakpoints",
			       KVP_CACHE_BREAKPOINTS_MAX);
	for (uint32_t i = 0; i < cc->n_breakpoints; i++)
		if (!cc->breakpoints[i] || (i && cc->breakpoints[i] <= cc->breakpoints[i - 1]))
			return set_err(c, -EINVAL,
				       "cache breakpoints must increase and be above 0");
	if (cc->retain > 100 || cc->n > KVP_PARALLEL_MAX)
		return set_err(c, -EINVAL, "retain must be at most 100, n at most %d",
			       KVP_PARALLEL_MAX);
	c->cc = *cc;
	c->cc.flags &= KVP_CC__ALL;
	memset(c->cc.reserved, 0, sizeof(c->cc.reserved));
	for (uint32_t i = cc->n_breakpoints; i < KVP_CACHE_BREAKPOINTS_MAX; i++)
		c->cc.breakpoints[i] = c->cc.bp_ttl_s[i] = 0;
	if (!(c->cc.flags & KVP_CC_RETAIN))
		c->cc.retain = 0;
	c->has_cc = true;
	return 0;
}

KVP_EXPORT int kvp_client_set_sampling(struct kvp_client *c, const struct kvp_client_sampling *sp)
{
	struct kvp_sampling h = { 0 };
	size_t nb;
	uint8_t *o;

	free(c->samp_buf);
	c->samp_buf = NULL;
	c->has_samp = false;
	if (!sp)
		return 0;
	if (sp->top_logprobs > KVP_TOP_LOGPROBS_MAX || sp->n_bias > KVP_LOGIT_BIAS_MAX ||
	    sp->grammar >= KVP_GRAMMAR__COUNT || sp->schema_len > KVP_SCHEMA_BYTES_MAX ||
	    (sp->grammar == KVP_GRAMMAR_JSON_SCHEMA) != (sp->schema_len > 0))
		return set_err(c, -EINVAL,
			       "sampling: top_logprobs <= %d, at most %d bias entries, a schema "
			       "exactly with KVP_GRAMMAR_JSON_SCHEMA (at most %u bytes)",
			       KVP_TOP_LOGPROBS_MAX, KVP_LOGIT_BIAS_MAX, KVP_SCHEMA_BYTES_MAX);
	h.flags = (sp->logprobs ? KVP_SAMP_LOGPROBS : 0) |
		  (sp->think_budget ? KVP_SAMP_THINK_BUDGET : 0);
	h.think_budget = sp->think_budget;
	h.top_logprobs = sp->logprobs ? sp->top_logprobs : 0;
	h.presence_penalty = sp->presence_penalty;
	h.frequency_penalty = sp->frequency_penalty;
	h.n_bias = sp->n_bias;
	h.grammar = sp->grammar;
	h.schema_bytes = (uint32_t)sp->schema_len;
	/* the bias entries as the wire has them, then the schema: what the frame holds */
	nb = (size_t)h.n_bias * sizeof(struct kvp_logit_bias);
	o = malloc(nb + sp->schema_len + 1);
	if (!o)
		return set_err(c, -ENOMEM, "out of memory");
	for (uint32_t i = 0; i < h.n_bias; i++) {
		struct kvp_logit_bias b = { .id = sp->bias_ids[i], .bias = sp->bias[i] };

		memcpy(o + i * sizeof(b), &b, sizeof(b));
	}
	if (sp->schema_len)
		memcpy(o + nb, sp->schema, sp->schema_len);
	c->samp_buf = o;
	c->samp = (struct kvp_proto_sampling){ .hdr = h, .bias = o, .schema = (char *)o + nb };
	c->has_samp = true;
	return 0;
}

KVP_EXPORT int kvp_client_event_logprob(const struct kvp_client *c, uint32_t i, float *logprob,
					const struct kvp_logprob **top, uint32_t *n_top)
{
	const struct kvp_logprob *e;

	if (i >= c->lp_last_n)
		return -ENOENT;
	e = c->lp_last + (size_t)i * (1 + c->lp_last_top);
	*logprob = e->logprob;
	*top = e + 1;
	*n_top = c->lp_last_top;
	return 0;
}

KVP_EXPORT int kvp_client_event_cache(const struct kvp_client *c, struct kvp_cache_usage *cu)
{
	if (!c->last_has_cu)
		return 0;
	*cu = c->last_cu;
	return 1;
}

KVP_EXPORT int kvp_client_event_spec(const struct kvp_client *c, struct kvp_spec_usage *su)
{
	if (!c->last_has_su)
		return 0;
	*su = c->last_su;
	return 1;
}

KVP_EXPORT const char *kvp_client_miss_reason_name(uint32_t reason)
{
	return kvp_proto_miss_reason_name(reason);
}

KVP_EXPORT int kvp_client_event_cont(const struct kvp_client *c)
{
	return c->last_cont;
}

/* Send a PIN, UNPIN or FLUSH and wait for its answer. */
static int operator_request(struct kvp_client *c, const struct out_req *o, uint32_t *blocks)
{
	const char *what = kvp_proto_type_name(o->type);
	struct kvp_client_event ev;
	uint64_t id;
	int r;

	r = submit_frame(c, o, &id);
	if (r)
		return r;
	for (;;) {
		r = kvp_client_next(c, &ev);
		if (r)
			return r;
		if (ev.req_id != id && ev.req_id != 0)
			continue;
		if (ev.type == KVP_EVENT_ERROR)
			return set_err(c, ev.status, "daemon: %s", ev.message);
		if (ev.type != KVP_EVENT_DONE)
			continue;
		if (blocks)
			*blocks = c->last_has_cu ? c->last_cu.blocks : 0;
		return ev.status ? set_err(c, ev.status, "%s failed", what) : 0;
	}
}

/*
 * A blocking call (one request, then its answer) may start: the connection is alive
 * (a dead one says so before anything else) and nothing else is in flight on it.
 */
static int blocking_ok(struct kvp_client *c)
{
	if (alive(c))
		return -ENOTCONN;
	if (c->in_flight)
		return set_err(c, -EBUSY, "another request is in flight on this client");
	return 0;
}

KVP_EXPORT int kvp_client_pin(struct kvp_client *c, const struct kvp_client_prompt *prompt,
			      const void *salt, size_t salt_len, bool unpin, uint32_t *blocks)
{
	struct kvp_pin pin = { 0 };
	uint32_t type = unpin ? KVP_FRAME_UNPIN : KVP_FRAME_PIN;
	const void *body;
	int r;

	r = blocking_ok(c);
	if (r)
		return r;
	if (!prompt || (!prompt->n_tokens == !prompt->text_len) || salt_len > KVP_SALT_MAX ||
	    prompt->n_tokens > UINT32_MAX || prompt->text_len > UINT32_MAX)
		return set_err(c, -EINVAL,
			       "pin: give exactly one of tokens or text, a salt of "
			       "at most 64 bytes");
	if (prompt->text_len) {
		pin.flags = KVP_GEN_TEXT;
		pin.text_bytes = (uint32_t)prompt->text_len;
		body = prompt->text;
	} else {
		pin.n_tokens = (uint32_t)prompt->n_tokens;
		body = prompt->tokens;
	}
	pin.salt_len = (uint32_t)salt_len;
	if (salt_len)
		memcpy(pin.salt, salt, salt_len);
	return operator_request(c, &(struct out_req){ .type = type, .fixed = &pin, .body = body },
				blocks);
}

KVP_EXPORT int kvp_client_flush(struct kvp_client *c, uint32_t *blocks)
{
	return kvp_client_flush_domain(c, NULL, blocks);
}

KVP_EXPORT int kvp_client_flush_domain(struct kvp_client *c, const char *domain, uint32_t *blocks)
{
	int r;

	r = blocking_ok(c);
	if (r)
		return r;
	if (domain && (!*domain || strlen(domain) > KVP_FLUSH_DOMAIN_MAX))
		return set_err(c, -EINVAL, "a domain name is 1..31 bytes");
	return operator_request(c, &(struct out_req){ .type = KVP_FRAME_FLUSH, .body = domain },
				blocks);
}

static int run_to_done(struct kvp_client *c, const struct kvp_client_prompt *prompt,
		       struct kvp_client_conv *cv, const struct kvp_client_params *params,
		       kvp_client_token_fn fn, void *arg, struct kvp_usage *usage);

KVP_EXPORT int kvp_client_generate(struct kvp_client *c, const struct kvp_client_prompt *prompt,
				   const struct kvp_client_params *params, kvp_client_token_fn fn,
				   void *arg, struct kvp_usage *usage)
{
	return run_to_done(c, prompt, NULL, params, fn, arg, usage);
}

/* ---- tokenizer through the daemon ---- */

/*
 * Wait for @id's answer: IDS (copied into *@ids / *@text when they are not NULL) then
 * DONE.  Return: 0, the daemon's status, or -errno.
 */
static int wait_ids(struct kvp_client *c, uint64_t id, int32_t **ids, size_t *n_ids, char **text,
		    size_t *len)
{
	struct kvp_client_event ev;
	int r;

	for (;;) {
		r = kvp_client_next(c, &ev);
		if (r)
			return r;
		if (ev.req_id != id && ev.req_id != 0)
			continue;
		switch (ev.type) {
		case KVP_EVENT_IDS:
			if (ids) {
				free(*ids);
				*ids = malloc(ev.n_tokens ? ev.n_tokens * sizeof(int32_t) : 1);
				if (!*ids)
					return set_err(c, -ENOMEM, "out of memory");
				memcpy(*ids, ev.tokens, ev.n_tokens * sizeof(int32_t));
				*n_ids = ev.n_tokens;
			}
			if (text) {
				free(*text);
				*text = malloc((size_t)ev.text_len + 1);
				if (!*text)
					return set_err(c, -ENOMEM, "out of memory");
				memcpy(*text, ev.text, ev.text_len);
				(*text)[ev.text_len] = 0;
				*len = ev.text_len;
			}
			break;
		case KVP_EVENT_DONE:
			if (ev.status)
				return set_err(c, ev.status, "daemon: %s",
					       kvp_proto_status_str((uint32_t)ev.status));
			if ((ids && !*ids) || (text && !*text))
				return set_err(c, -EPROTO, "daemon ended without an answer");
			return 0;
		case KVP_EVENT_ERROR:
			return set_err(c, ev.status, "daemon: %s", ev.message);
		default:
			break; /* a TOKEN has no place here: ignored */
		}
	}
}

KVP_EXPORT int kvp_client_tokenize_submit(struct kvp_client *c, const char *text, size_t len,
					  unsigned int flags, uint64_t *req_id)
{
	struct kvp_tokenize t = { .flags = flags };

	if ((len && !text) || (flags & ~KVP_TOKENIZE__ALL) || (len && memchr(text, 0, len)))
		return set_err(c, -EINVAL, "tokenize: bad text or flags");
	if (len > UINT32_MAX)
		return set_err(c, KVP_E_LIMIT, "text of %zu bytes is too long", len);
	t.text_bytes = (uint32_t)len;
	return submit_frame(c,
			    &(struct out_req){
				    .type = KVP_FRAME_TOKENIZE, .fixed = &t, .body = text },
			    req_id);
}

KVP_EXPORT int kvp_client_tokenize(struct kvp_client *c, const char *text, size_t len,
				   unsigned int flags, int32_t **ids, size_t *n_ids)
{
	int32_t *v = NULL;
	size_t n = 0;
	uint64_t id;
	int r;

	r = blocking_ok(c);
	if (r)
		return r;
	r = kvp_client_tokenize_submit(c, text, len, flags, &id);
	if (r)
		return r;
	r = wait_ids(c, id, &v, &n, NULL, NULL);
	if (r) {
		free(v);
		return r;
	}
	*ids = v;
	*n_ids = n;
	return 0;
}

KVP_EXPORT int kvp_client_detokenize_submit(struct kvp_client *c, const int32_t *ids, size_t n_ids,
					    unsigned int flags, uint64_t *req_id)
{
	struct kvp_detokenize d = { .flags = flags };
	const struct kvp_welcome *w = &c->welcome;

	if ((n_ids && !ids) || (flags & ~KVP_DETOKENIZE__ALL))
		return set_err(c, -EINVAL, "detokenize: bad ids or flags");
	if (n_ids > UINT32_MAX || (w->max_prompt_tokens && n_ids > w->max_prompt_tokens))
		return set_err(c, KVP_E_LIMIT, "%zu ids exceed the daemon's limit %u", n_ids,
			       w->max_prompt_tokens);
	d.n_tokens = (uint32_t)n_ids;
	return submit_frame(c,
			    &(struct out_req){
				    .type = KVP_FRAME_DETOKENIZE, .fixed = &d, .body = ids },
			    req_id);
}

KVP_EXPORT int kvp_client_detokenize(struct kvp_client *c, const int32_t *ids, size_t n_ids,
				     unsigned int flags, char **text, size_t *len)
{
	size_t n = 0;
	char *out = NULL;
	uint64_t id;
	int r;

	r = blocking_ok(c);
	if (r)
		return r;
	r = kvp_client_detokenize_submit(c, ids, n_ids, flags, &id);
	if (r)
		return r;
	r = wait_ids(c, id, NULL, NULL, &out, &n);
	if (r) {
		free(out);
		return r;
	}
	*text = out;
	*len = n;
	return 0;
}

/* ---- conversations ---- */

struct conv_msg {
	int role;
	char *text; /* NUL-terminated */
	size_t len;
};

/* A growable array of ids. */
struct idvec {
	int32_t *v;
	size_t n, cap;
};

static int idvec_add(struct idvec *a, const int32_t *ids, size_t n)
{
	if (a->n + n > a->cap) {
		size_t cap = (a->n + n) * 2 + 16;
		int32_t *nv = realloc(a->v, cap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		a->v = nv;
		a->cap = cap;
	}
	if (n)
		memcpy(a->v + a->n, ids, n * sizeof(*ids));
	a->n += n;
	return 0;
}

/**
 * struct kvp_client_conv - a conversation
 * @msgs, @n_msgs, @cap_msgs: the messages
 * @ctx, @ctx_msgs:  the exact ids of the first ctx_msgs messages (0: none yet)
 * @tmpl:            template family name, "" for the model's
 * @pending:         req_id of the CHAT in flight, 0 when none
 * @prompt:          its prompt ids (from IDS), @got_prompt once they came
 * @reply, @text:    its reply ids and text so far
 */
struct kvp_client_conv {
	struct conv_msg *msgs;
	size_t n_msgs, cap_msgs;
	struct idvec ctx;
	size_t ctx_msgs;
	char tmpl[KVP_CHAT_TEMPLATE_NAME_MAX];
	char *tools; /* kvp_client_conv_set_tools(), NULL: none */
	size_t tools_len;
	uint32_t think_flags; /* kvp_client_conv_set_thinking(): KVP_CHAT_(NO_)THINKING */
	uint32_t id_flags;    /* kvp_client_conv_set_call_ids(): KVP_CHAT_CALL_IDS */
	uint64_t pending;
	struct idvec prompt;
	bool got_prompt;
	struct idvec reply;
	char *text;
	size_t text_len, text_cap;
};

KVP_EXPORT int kvp_client_conv_new(struct kvp_client_conv **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

KVP_EXPORT void kvp_client_conv_free(struct kvp_client_conv *cv)
{
	if (!cv)
		return;
	for (size_t i = 0; i < cv->n_msgs; i++)
		free(cv->msgs[i].text);
	free(cv->msgs);
	free(cv->tools);
	free(cv->ctx.v);
	free(cv->prompt.v);
	free(cv->reply.v);
	free(cv->text);
	free(cv);
}

KVP_EXPORT int kvp_client_conv_set_template(struct kvp_client_conv *cv, const char *name)
{
	size_t n = name ? strlen(name) : 0;

	if (n >= sizeof(cv->tmpl))
		return -EINVAL;
	memset(cv->tmpl, 0, sizeof(cv->tmpl));
	if (n)
		memcpy(cv->tmpl, name, n);
	return 0;
}

KVP_EXPORT int kvp_client_conv_set_tools(struct kvp_client_conv *cv, const char *json, size_t len)
{
	char *copy = NULL;

	if (json) {
		if (len > UINT32_MAX)
			return -EINVAL;
		copy = malloc(len + 1);
		if (!copy)
			return -ENOMEM;
		memcpy(copy, json, len);
		copy[len] = 0;
	}
	free(cv->tools);
	cv->tools = copy;
	cv->tools_len = json ? len : 0;
	return 0;
}

KVP_EXPORT int kvp_client_conv_set_thinking(struct kvp_client_conv *cv, int mode)
{
	switch (mode) {
	case KVP_THINKING_DEFAULT:
		cv->think_flags = 0;
		return 0;
	case KVP_THINKING_ON:
		cv->think_flags = KVP_CHAT_THINKING;
		return 0;
	case KVP_THINKING_OFF:
		cv->think_flags = KVP_CHAT_NO_THINKING;
		return 0;
	}
	return -EINVAL;
}

KVP_EXPORT void kvp_client_conv_set_call_ids(struct kvp_client_conv *cv, bool on)
{
	cv->id_flags = on ? KVP_CHAT_CALL_IDS : 0;
}

KVP_EXPORT int kvp_client_conv_add(struct kvp_client_conv *cv, int role, const char *text,
				   size_t len)
{
	char *copy;

	if (role < 0 || role >= KVP_ROLE__COUNT || (len && !text) || len > UINT32_MAX)
		return -EINVAL;
	if (cv->n_msgs == cv->cap_msgs) {
		size_t cap = cv->cap_msgs * 2 + 8;
		struct conv_msg *nm = realloc(cv->msgs, cap * sizeof(*nm));

		if (!nm)
			return -ENOMEM;
		cv->msgs = nm;
		cv->cap_msgs = cap;
	}
	copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	if (len)
		memcpy(copy, text, len);
	copy[len] = 0;
	cv->msgs[cv->n_msgs++] = (struct conv_msg){ .role = role, .text = copy, .len = len };
	return 0;
}

KVP_EXPORT int kvp_client_conv_pop(struct kvp_client_conv *cv)
{
	if (!cv->n_msgs)
		return -ENOENT;
	free(cv->msgs[--cv->n_msgs].text);
	if (cv->ctx_msgs > cv->n_msgs) { /* the context ended in that message */
		cv->ctx.n = 0;
		cv->ctx_msgs = 0;
	}
	return 0;
}

KVP_EXPORT size_t kvp_client_conv_n_messages(const struct kvp_client_conv *cv)
{
	return cv->n_msgs;
}

KVP_EXPORT int kvp_client_conv_message(const struct kvp_client_conv *cv, size_t i, int *role,
				       const char **text, size_t *len)
{
	if (i >= cv->n_msgs)
		return -ENOENT;
	if (role)
		*role = cv->msgs[i].role;
	if (text)
		*text = cv->msgs[i].text;
	if (len)
		*len = cv->msgs[i].len;
	return 0;
}

KVP_EXPORT const int32_t *kvp_client_conv_context(const struct kvp_client_conv *cv, size_t *n,
						  size_t *n_msgs)
{
	if (n)
		*n = cv->ctx_msgs ? cv->ctx.n : 0;
	if (n_msgs)
		*n_msgs = cv->ctx_msgs;
	return cv->ctx_msgs ? cv->ctx.v : NULL;
}

/* A CHAT of @cv with CHAT @flags; @req_id set.  See kvp_client_chat_submit(). */
static int send_chat(struct kvp_client *c, struct kvp_client_conv *cv,
		     const struct kvp_client_params *params, uint32_t flags, uint64_t *req_id)
{
	const struct kvp_welcome *w = &c->welcome;
	struct kvp_client_params defaults;
	struct kvp_client_prompt pr = { .text = "-", .text_len = 1 };
	struct kvp_proto_msg *msgs;
	struct kvp_gen_req ch;
	int r;

	if (!params) {
		kvp_client_params_init(&defaults);
		params = &defaults;
	}
	if (!cv->n_msgs)
		return set_err(c, -EINVAL, "chat: the conversation has no messages");
	if (cv->pending)
		return set_err(c, -EINVAL, "chat: the conversation has a CHAT in flight");
	if (cv->n_msgs > UINT32_MAX)
		return set_err(c, -EINVAL, "chat: too many messages");
	r = check_params(c, &pr, params); /* the sampling part; the prompt is the messages */
	if (r)
		return r;
	if (cv->ctx_msgs && w->max_prompt_tokens && cv->ctx.n > w->max_prompt_tokens)
		return set_err(c, KVP_E_LIMIT,
			       "chat: the conversation (%zu tokens) exceeds the daemon's limit %u",
			       cv->ctx.n, w->max_prompt_tokens);
	request_of(c, params, KVP_FRAME_CHAT, &ch);
	ch.flags |= flags | cv->think_flags | cv->id_flags;
	if (flags & KVP_CHAT_PROMPT_ONLY) /* nothing is sampled */
		ch.has_samp = false;
	ch.n_messages = (uint32_t)cv->n_msgs;
	ch.n_ids = cv->ctx_msgs ? (uint32_t)cv->ctx.n : 0;
	ch.ids = ch.n_ids ? cv->ctx.v : NULL;
	ch.context_msgs = ch.n_ids ? (uint32_t)cv->ctx_msgs : 0;
	ch.tools = cv->tools;
	ch.tools_len = (uint32_t)cv->tools_len;
	memcpy(ch.template_name, cv->tmpl, sizeof(ch.template_name));
	msgs = calloc(cv->n_msgs, sizeof(*msgs));
	if (!msgs)
		return set_err(c, -ENOMEM, "out of memory");
	for (size_t i = 0; i < cv->n_msgs; i++)
		msgs[i] = (struct kvp_proto_msg){ .role = (uint32_t)cv->msgs[i].role,
						  .len = (uint32_t)cv->msgs[i].len,
						  .text = cv->msgs[i].text };
	ch.msgs = msgs;
	r = submit_frame(c, &(struct out_req){ .type = KVP_FRAME_CHAT, .gen = &ch }, req_id);
	free(msgs);
	return r;
}

KVP_EXPORT int kvp_client_chat_submit(struct kvp_client *c, struct kvp_client_conv *cv,
				      const struct kvp_client_params *params, uint64_t *req_id)
{
	int r;

	r = send_chat(c, cv, params, 0, req_id);
	if (r)
		return r;
	cv->pending = *req_id;
	cv->got_prompt = false;
	cv->prompt.n = 0;
	cv->reply.n = 0;
	cv->text_len = 0;
	return 0;
}

KVP_EXPORT int kvp_client_chat_prompt_submit(struct kvp_client *c, struct kvp_client_conv *cv,
					     uint64_t *req_id)
{
	struct kvp_client_params p;

	kvp_client_params_init(&p);
	p.max_new_tokens = 1; /* checked as a CHAT's; nothing is generated */
	return send_chat(c, cv, &p, KVP_CHAT_PROMPT_ONLY, req_id);
}

KVP_EXPORT int kvp_client_chat_prompt(struct kvp_client *c, struct kvp_client_conv *cv,
				      int32_t **ids, size_t *n_ids)
{
	int32_t *v = NULL;
	size_t n = 0;
	uint64_t id;
	int r;

	r = blocking_ok(c);
	if (r)
		return r;
	r = kvp_client_chat_prompt_submit(c, cv, &id);
	if (r)
		return r;
	r = wait_ids(c, id, &v, &n, NULL, NULL);
	if (r) {
		free(v);
		return r;
	}
	*ids = v;
	*n_ids = n;
	return 0;
}

/* The reply ended with DONE: it joins the conversation, and prompt + reply its context. */
static int conv_reply_done(struct kvp_client_conv *cv)
{
	struct idvec ctx = { 0 };
	int r;

	r = kvp_client_conv_add(cv, KVP_ROLE_ASSISTANT, cv->text ? cv->text : "", cv->text_len);
	if (r)
		return r;
	if (!cv->got_prompt) { /* cannot happen with this daemon: re-render next time */
		cv->ctx.n = 0;
		cv->ctx_msgs = 0;
		return 0;
	}
	if (idvec_add(&ctx, cv->prompt.v, cv->prompt.n) ||
	    idvec_add(&ctx, cv->reply.v, cv->reply.n)) {
		free(ctx.v);
		kvp_client_conv_pop(cv);
		return -ENOMEM;
	}
	free(cv->ctx.v);
	cv->ctx = ctx;
	cv->ctx_msgs = cv->n_msgs;
	return 0;
}

KVP_EXPORT int kvp_client_conv_feed(struct kvp_client_conv *cv, const struct kvp_client_event *ev)
{
	int r;

	if (!cv->pending || (ev->req_id != cv->pending && ev->req_id != 0))
		return 0;
	switch (ev->type) {
	case KVP_EVENT_IDS:
		cv->prompt.n = 0;
		if (idvec_add(&cv->prompt, ev->tokens, ev->n_tokens))
			return -ENOMEM;
		cv->got_prompt = true;
		return 0;
	case KVP_EVENT_TOKEN:
		if (idvec_add(&cv->reply, ev->tokens, ev->n_tokens))
			return -ENOMEM;
		if (cv->text_len + ev->text_len + 1 > cv->text_cap) {
			size_t cap = (cv->text_len + ev->text_len) * 2 + 64;
			char *nt = realloc(cv->text, cap);

			if (!nt)
				return -ENOMEM;
			cv->text = nt;
			cv->text_cap = cap;
		}
		memcpy(cv->text + cv->text_len, ev->text, ev->text_len);
		cv->text_len += ev->text_len;
		cv->text[cv->text_len] = 0;
		return 0;
	case KVP_EVENT_DONE:
		cv->pending = 0;
		r = conv_reply_done(cv);
		return r ? r : 1;
	case KVP_EVENT_ERROR:
		cv->pending = 0;
		return 1;
	default:
		return 0;
	}
}

/*
 * Wait for request @id to end, handing its tokens to @fn (non-zero: cancel it, once);
 * with @cv, every event is fed to the conversation too, and a failure of the connection
 * drops the pending turn.  Return: as kvp_client_generate().
 */
static int wait_done(struct kvp_client *c, uint64_t id, struct kvp_client_conv *cv,
		     kvp_client_token_fn fn, void *arg, struct kvp_usage *usage)
{
	struct kvp_client_event ev;
	bool cancelled = false;
	int r;

	for (;;) {
		r = kvp_client_next(c, &ev);
		if (r)
			goto out_drop;
		if (ev.req_id != id && ev.req_id != 0)
			continue;
		if (cv) {
			r = kvp_client_conv_feed(cv, &ev);
			if (r < 0)
				return set_err(c, r, "out of memory");
		}
		if (ev.type == KVP_EVENT_TOKEN && fn && !cancelled &&
		    fn(arg, ev.tokens, ev.n_tokens, ev.text, ev.text_len)) {
			cancelled = true;
			r = kvp_client_cancel(c, id);
			if (r)
				goto out_drop;
		}
		if (ev.type == KVP_EVENT_DONE) {
			if (usage)
				*usage = ev.usage;
			if (cancelled)
				return set_err(c, KVP_E_CANCELLED, "cancelled by the callback");
			if (ev.status)
				return set_err(c, ev.status, "generation stopped: %s",
					       kvp_proto_status_str((uint32_t)ev.status));
			return 0;
		}
		if (ev.type == KVP_EVENT_ERROR)
			return set_err(c, ev.status, "daemon: %s", ev.message);
	}
out_drop:
	if (cv)
		cv->pending = 0;
	return r;
}

/*
 * Submit @prompt (GENERATE), or with @cv the conversation's turn (CHAT), and wait for
 * its end.  Return: as kvp_client_generate().
 */
static int run_to_done(struct kvp_client *c, const struct kvp_client_prompt *prompt,
		       struct kvp_client_conv *cv, const struct kvp_client_params *params,
		       kvp_client_token_fn fn, void *arg, struct kvp_usage *usage)
{
	uint64_t id;
	int r;

	if (c->in_flight)
		return set_err(c, -EBUSY, "another request is in flight on this client");
	r = cv ? kvp_client_chat_submit(c, cv, params, &id) :
		 kvp_client_submit(c, prompt, params, &id);
	if (r)
		return r;
	return wait_done(c, id, cv, fn, arg, usage);
}

KVP_EXPORT int kvp_client_chat(struct kvp_client *c, struct kvp_client_conv *cv,
			       const struct kvp_client_params *params, kvp_client_token_fn fn,
			       void *arg, struct kvp_usage *usage)
{
	return run_to_done(c, NULL, cv, params, fn, arg, usage);
}

KVP_EXPORT int kvp_client_status(const char *path, const char *fmt, char **out, size_t *len)
{
	char req[16];
	size_t cap = 16384, n = 0;
	char *buf;
	int fd, r;

	*out = NULL;
	if (!fmt)
		fmt = "json";
	if (strcmp(fmt, "json") && strcmp(fmt, "prom") && strcmp(fmt, "flush-tier"))
		return -EINVAL;
	r = unix_connect(path ? path : KVP_DEFAULT_STATUS_SOCKET, &fd);
	if (r)
		return r;
	snprintf(req, sizeof(req), "%s\n", fmt);
	r = send_all(fd, req, strlen(req));
	if (r)
		goto out_close;
	shutdown(fd, SHUT_WR);
	buf = malloc(cap);
	if (!buf) {
		r = -ENOMEM;
		goto out_close;
	}
	for (;;) {
		ssize_t got;

		if (n + 1 == cap) {
			char *nb = cap >= STATUS_MAX_BYTES ? NULL : realloc(buf, cap * 2);

			if (!nb) {
				r = cap >= STATUS_MAX_BYTES ? -EFBIG : -ENOMEM;
				free(buf);
				goto out_close;
			}
			buf = nb;
			cap *= 2;
		}
		got = read(fd, buf + n, cap - 1 - n);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			free(buf);
			goto out_close;
		}
		if (!got)
			break;
		n += (size_t)got;
	}
	if (!n) {
		free(buf);
		r = -EPROTO;
		goto out_close;
	}
	buf[n] = 0;
	*out = buf;
	if (len)
		*len = n;
	r = 0;
out_close:
	close(fd);
	return r;
}

/* ---- leases ---- */

struct kvp_client_lease {
	struct kvp_lease hdr;
	struct kvp_lease_block blocks[];
};

/* Wait for @id's LEASED (into *@out) or ERROR.  Return: 0, the daemon's status, -errno. */
static int wait_lease(struct kvp_client *c, uint64_t id, struct kvp_client_lease **out)
{
	struct kvp_frame_hdr hdr;
	const char *why = "";
	int r;

	for (;;) {
		r = read_frame(c, &hdr);
		if (r)
			return r;
		drop_rx_fds(c);
		if (hdr.type == KVP_FRAME_LEASED && hdr.req_id == id) {
			struct kvp_lease l;
			const void *blocks;
			struct kvp_client_lease *res;

			if (kvp_proto_decode_lease(c->buf, hdr.len_bytes, &l, &blocks, &why))
				break;
			if (c->in_flight)
				c->in_flight--;
			res = malloc(sizeof(*res) + (size_t)l.n_blocks * sizeof(res->blocks[0]));
			if (!res)
				return set_err(c, -ENOMEM, "out of memory");
			res->hdr = l;
			memcpy(res->blocks, blocks, (size_t)l.n_blocks * sizeof(res->blocks[0]));
			*out = res;
			return 0;
		}
		if (hdr.type == KVP_FRAME_ERROR) {
			struct kvp_error e;
			const char *msg;

			if (kvp_proto_decode_error(c->buf, hdr.len_bytes, &e, &msg, &why))
				break;
			if (hdr.req_id && hdr.req_id != id)
				continue;
			if (!hdr.req_id)
				c->dead = true;
			else if (c->in_flight)
				c->in_flight--;
			if (!e.status || e.status > INT32_MAX)
				e.status = KVP_E_INTERNAL;
			return set_err(c, (int)e.status, "daemon: %.*s", (int)e.msg_bytes, msg);
		}
		/* another request's frame: not ours to take (one request at a time) */
	}
	c->dead = true;
	return set_err(c, -EPROTO, "bad %s frame from daemon: %s", kvp_proto_type_name(hdr.type),
		       why);
}

KVP_EXPORT int kvp_client_lease(struct kvp_client *c, const int32_t *ids, size_t n_ids,
				const void *salt, size_t salt_len, uint32_t ttl_ms,
				struct kvp_client_lease **out)
{
	struct kvp_lease_req l = { .ttl_ms = ttl_ms };
	uint64_t id;
	int r;

	*out = NULL;
	r = blocking_ok(c);
	if (r)
		return r;
	if (!ids || !n_ids || n_ids > UINT32_MAX || salt_len > KVP_SALT_MAX || (salt_len && !salt))
		return set_err(c, -EINVAL, "lease: bad ids or salt");
	l.n_tokens = (uint32_t)n_ids;
	l.salt_len = (uint32_t)salt_len;
	if (salt_len)
		memcpy(l.salt, salt, salt_len);
	r = submit_frame(c, &(struct out_req){ .type = KVP_FRAME_LEASE, .fixed = &l, .body = ids },
			 &id);
	if (r)
		return r;
	return wait_lease(c, id, out);
}

KVP_EXPORT int kvp_client_release(struct kvp_client *c, struct kvp_client_lease *l)
{
	size_t need;
	int r = 0;

	if (!l)
		return 0;
	if (l->hdr.lease_id && !c->dead && c->fd >= 0) {
		need = kvp_proto_encode_release(NULL, 0, l->hdr.lease_id);
		r = out_reserve(c, need);
		if (!r) {
			kvp_proto_encode_release(c->out, c->out_cap, l->hdr.lease_id);
			r = send_all(c->fd, c->out, need);
			if (r)
				r = set_err(c, r, "send RELEASE: %s", strerror(-r));
		}
	}
	free(l);
	return r;
}

KVP_EXPORT void kvp_client_lease_free(struct kvp_client_lease *l)
{
	free(l);
}

KVP_EXPORT const struct kvp_lease *kvp_client_lease_info(const struct kvp_client_lease *l)
{
	return &l->hdr;
}

KVP_EXPORT const struct kvp_lease_block *kvp_client_lease_block(const struct kvp_client_lease *l,
								uint32_t i)
{
	return i < l->hdr.n_blocks ? &l->blocks[i] : NULL;
}

KVP_EXPORT const void *kvp_client_lease_kv(const struct kvp_client *c,
					   const struct kvp_client_lease *l, uint32_t i,
					   uint32_t layer, int v, uint32_t head)
{
	const struct kvp_model_shape *s = &l->hdr.shape;
	uint64_t run = kvp_layout_run_bytes(s, v == 1), off;

	if (!c->pool || i >= l->hdr.n_blocks || layer >= s->n_layers || head >= s->n_kv_heads ||
	    (v != 0 && v != 1) || !run)
		return NULL;
	/* [layer][k|v][kv_head] runs, rows then scales (include/kvpool/layout.h) */
	off = l->blocks[i].offset + kvp_layout_run_offset(s, layer, (uint32_t)v, head);
	if (off + run > c->pool_len)
		return NULL;
	return (const uint8_t *)c->pool + off;
}
