/* SPDX-License-Identifier: MIT */
/*
 * test_server.c - the io_uring server (ipc/server.c) run in a thread of this process
 * with a test ops table, talked to over real Unix sockets by libkvpool and by raw
 * sockets that send malformed frames.  Nothing of the kernel is mocked.
 *
 * The test ops: HELLO passes a read-only fd of a real sealed pool segment (shm/segment.c,
 * 4 KiB pages) and WELCOME describes it; GENERATE with seed 0 echoes the prompt
 * ids back one TOKEN each then DONE, seed 2 holds the request until cancelled, seed 1
 * streams 4 KiB TOKEN frames from the wakeup eventfd until the connection goes away,
 * seed 3 is refused (NOSPACE), seed 4 is held and its cancels only counted; cancel
 * answers ERROR KVP_E_CANCELLED; status prints the server's counters.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "ipc/proto.h"
#include "ipc/server.h"
#include "kvpool/kvpool.h"
#include "shm/segment.h"
#include "tests/lib/testlib.h"

#define N_VOCAB 1000
#define POOL_BLOCKS 8u
#define MAX_FRAME 4096u
#define MAX_PROMPT 64u
#define MAX_NEW 128u
#define MAX_CONNS 8u
#define MAX_REQS 4u
#define OUTQ 65536u
#define STREAM_CHUNK 4096u
#define CLOSED_MAX 256

struct fixture {
	char dir[256];
	char sock[300];
	char status[300];
	struct kvp_server *srv;
	pthread_t thread;
	int run_ret;
	unsigned int drain_ms;
	struct kvp_segment *seg; /* its RW mapping can still write the header */
	int memfd;		 /* read-only reopen handed out with WELCOME */
	int efd;
	pthread_mutex_t lock;
	kvp_conn_id closed[CLOSED_MAX];
	unsigned int n_closed;
	atomic_uint n_hello;
	char client[KVP_CLIENT_NAME_MAX + 1]; /* of the last HELLO (under @lock) */
	/* streaming (seed 1) */
	kvp_conn_id stream_conn;
	uint64_t stream_req;
	bool streaming;
	atomic_bool stream_gone;
	atomic_ulong stream_sent;
	atomic_int credits; /* chunks the wakeup may still stream */
	uint64_t stream_limit;
	/* a handle that must be stale when the wakeup fires */
	kvp_conn_id stale_probe;
	atomic_bool stale_probe_set;
	atomic_int stale_result;
	/* GENERATEs with ids: prompts handed over as documented (struct kvp_prompt_ids) */
	atomic_uint prompts_ok, prompts_bad;
	/* seed 4: held, and its cancels are counted, not answered */
	kvp_conn_id deaf_conn;
	uint64_t deaf_req;
	atomic_uint n_cancels;
};

/* ------------------------------------------------------------ test ops (loop thread) */

static int t_hello(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, const char *client,
		   struct kvp_welcome *w, int *fds, unsigned int *n_fds, char *why, size_t why_cap)
{
	struct fixture *f = ctx;

	(void)why;
	(void)why_cap;
	atomic_fetch_add(&f->n_hello, 1);
	pthread_mutex_lock(&f->lock);
	snprintf(f->client, sizeof(f->client), "%s", client);
	pthread_mutex_unlock(&f->lock);
	if (peer->uid != getuid() || peer->pid != getpid())
		return KVP_E_INTERNAL; /* SO_PEERCRED must name this process */
	w->n_vocab = N_VOCAB;
	w->n_ctx = 512;
	w->eos_id = UINT32_MAX;
	w->bos_id = UINT32_MAX;
	w->shape = f->seg->geom.shape;
	w->block_stride = f->seg->geom.block_stride;
	w->data_offset = f->seg->data_offset;
	w->segment_bytes = f->seg->bytes;
	w->n_blocks = f->seg->n_blocks;
	strcpy(w->model, "test-model");
	fds[0] = f->memfd;
	*n_fds = 1;
	return KVP_OK;
}

static void t_wakeup(void *arg);

static int t_generate(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, uint64_t req_id,
		      const struct kvp_gen_req *g, struct kvp_prompt_ids *prompt)
{
	struct fixture *f = ctx;
	const int32_t *tokens = g->ids;
	const char *text = g->text;
	struct kvp_usage u = { 0 };
	int32_t *taken = NULL;
	char buf[32];
	int st;

	if (g->type == KVP_FRAME_GENERATE && !text) {
		/* the request's ids are the handed-over buffer, with room for max_new more */
		bool ok = prompt->ids && (const void *)prompt->ids == g->ids &&
			  prompt->n == g->n_ids && prompt->cap == g->n_ids + g->max_new_tokens;

		atomic_fetch_add(ok ? &f->prompts_ok : &f->prompts_bad, 1);
	} else if (prompt->ids) {
		atomic_fetch_add(&f->prompts_bad, 1); /* text and CHATs hand nothing over */
	}
	if (g->seed == 5 && prompt->ids) {
		/* taken: ours to free (ASan sees a double free if ipc/ freed it too) */
		taken = prompt->ids;
		prompt->ids = NULL;
		tokens = taken;
	}

	if (g->seed == 1) {
		f->stream_conn = conn;
		f->stream_req = req_id;
		f->streaming = true;
		t_wakeup(f); /* spend credits granted before this request arrived */
		return KVP_OK;
	}
	if (g->seed == 2)
		return KVP_OK;
	if (g->seed == 3)
		return KVP_E_NOSPACE;
	if (g->seed == 4) {
		f->deaf_conn = conn;
		f->deaf_req = req_id;
		return KVP_OK;
	}
	if (text) {
		/* text prompts: one TOKEN whose text is the prompt itself */
		int32_t id = (int32_t)strlen(text);

		kvp_server_send_tokens(f->srv, conn, req_id, &id, 1, text, g->text_bytes);
		u.prompt_tokens = g->text_bytes;
	} else {
		for (uint32_t i = 0; i < g->n_ids && i < g->max_new_tokens; i++) {
			int n = snprintf(buf, sizeof(buf), "t%d ", tokens[i]);

			kvp_server_send_tokens(f->srv, conn, req_id, &tokens[i], 1, buf,
					       (uint32_t)n);
			u.generated_tokens++;
		}
		u.prompt_tokens = g->n_ids;
	}
	u.ttft_ms = 1.5;
	st = kvp_server_send_done(f->srv, conn, req_id, &u, NULL, NULL) ? KVP_E_INTERNAL : KVP_OK;
	free(taken);
	return st;
}

static void t_cancel(void *ctx, kvp_conn_id conn, uint64_t req_id)
{
	struct fixture *f = ctx;

	atomic_fetch_add(&f->n_cancels, 1);
	if (conn == f->deaf_conn && req_id == f->deaf_req)
		return;
	kvp_server_send_error(f->srv, conn, req_id, KVP_E_CANCELLED, "cancelled");
}

static void t_closed(void *ctx, kvp_conn_id conn)
{
	struct fixture *f = ctx;

	pthread_mutex_lock(&f->lock);
	if (f->n_closed < CLOSED_MAX)
		f->closed[f->n_closed++] = conn;
	if (f->streaming && conn == f->stream_conn)
		f->streaming = false;
	pthread_mutex_unlock(&f->lock);
}

static int t_status(void *ctx, const struct kvp_peer *peer, enum kvp_status_fmt fmt, char *buf,
		    size_t cap)
{
	struct fixture *f = ctx;
	struct kvp_server_stats st;
	int n;

	(void)peer;
	kvp_server_get_stats(f->srv, &st);
	n = snprintf(buf, cap, "%s open=%lu total=%lu refused=%lu proto=%lu slow=%lu\n",
		     fmt == KVP_STATUS_PROM ? "prom" : "json", (unsigned long)st.conns_open,
		     (unsigned long)st.conns_total, (unsigned long)st.conns_refused,
		     (unsigned long)st.proto_errors, (unsigned long)st.slow_disconnects);
	return n >= 0 && (size_t)n < cap ? n : -ENOSPC;
}

static void t_wakeup(void *arg)
{
	struct fixture *f = arg;
	char chunk[STREAM_CHUNK];
	int32_t id = 7;

	if (atomic_exchange(&f->stale_probe_set, false)) {
		struct kvp_usage u = { 0 };

		atomic_store(&f->stale_result,
			     kvp_server_send_done(f->srv, f->stale_probe, 1, &u, NULL, NULL));
	}
	if (!f->streaming)
		return;
	memset(chunk, 'x', sizeof(chunk));
	while (atomic_load(&f->credits) > 0) {
		int r;

		atomic_fetch_sub(&f->credits, 1);
		if (f->stream_limit && atomic_load(&f->stream_sent) >= f->stream_limit) {
			struct kvp_usage u = { .generated_tokens = 1 };

			kvp_server_send_done(f->srv, f->stream_conn, f->stream_req, &u, NULL, NULL);
			f->streaming = false;
			return;
		}
		r = kvp_server_send_tokens(f->srv, f->stream_conn, f->stream_req, &id, 1, chunk,
					   sizeof(chunk));
		if (r) {
			f->streaming = false;
			atomic_store(&f->stream_gone, true);
			return;
		}
		atomic_fetch_add(&f->stream_sent, sizeof(chunk));
	}
}

static void *server_thread(void *arg)
{
	struct fixture *f = arg;

	f->run_ret = kvp_server_run(f->srv);
	/* io_uring requests die with the thread that submitted them: drain on this one */
	if (!f->run_ret && f->drain_ms)
		f->run_ret = kvp_server_run_for(f->srv, f->drain_ms);
	return NULL;
}

static int setup(void **state)
{
	struct kvp_server_config cfg = {
		.socket_gid = (gid_t)-1,
		.status_gid = (gid_t)-1,
		.max_frame_bytes = MAX_FRAME,
		.max_conns = MAX_CONNS,
		.max_reqs_per_conn = MAX_REQS,
		.max_prompt_tokens = MAX_PROMPT,
		.max_new_tokens = MAX_NEW,
		.outq_bytes = OUTQ,
	};
	struct kvp_server_ops ops = { .hello = t_hello,
				      .generate = t_generate,
				      .cancel = t_cancel,
				      .closed = t_closed,
				      .status = t_status };
	const struct kvp_model_shape shape = { .n_layers = 2,
					       .n_kv_heads = 2,
					       .head_dim = 64,
					       .dtype = KVP_DTYPE_F32,
					       .block_tokens = 16 };
	struct fixture *f = calloc(1, sizeof(*f));
	struct kvp_geom geom;
	mode_t old_umask;
	uint8_t *p;

	assert_non_null(f);
	assert_int_equal(kvp_test_tmpdir(f->dir, sizeof(f->dir)), 0);
	snprintf(f->sock, sizeof(f->sock), "%s/kvpool.sock", f->dir);
	snprintf(f->status, sizeof(f->status), "%s/status.sock", f->dir);
	pthread_mutex_init(&f->lock, NULL);

	/* a real pool segment, its blocks filled with a known pattern, sealed */
	assert_int_equal(kvp_geom_init(&geom, &shape), 0);
	assert_int_equal(kvp_segment_open(&f->seg, &geom, POOL_BLOCKS, KVP_PAGES_OFF, "test-pool"),
			 0);
	p = kvp_segment_data(f->seg);
	for (size_t i = 0; i < POOL_BLOCKS * geom.block_stride; i++)
		p[i] = (uint8_t)(i * 31 + 7);
	assert_int_equal(kvp_segment_seal(f->seg), 0);
	f->memfd = kvp_segment_reopen_ro(f->seg);
	assert_true(f->memfd >= 0);

	cfg.socket_path = f->sock;
	cfg.status_path = f->status;
	ops.ctx = f;
	old_umask = umask(0); /* the most permissive umask must not leak into the mode */
	assert_int_equal(kvp_server_new(&f->srv, &cfg, &ops), 0);
	umask(old_umask);
	f->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	assert_true(f->efd >= 0);
	assert_int_equal(kvp_server_add_wakeup(f->srv, f->efd, t_wakeup, f), 0);
	assert_int_equal(pthread_create(&f->thread, NULL, server_thread, f), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kvp_server_stop(f->srv);
	pthread_join(f->thread, NULL);
	assert_int_equal(f->run_ret, 0);
	kvp_server_free(f->srv);
	/* free() unlinks the sockets it bound */
	assert_int_equal(access(f->sock, F_OK), -1);
	close(f->efd);
	close(f->memfd);
	kvp_segment_close(f->seg);
	kvp_test_rmtree(f->dir);
	pthread_mutex_destroy(&f->lock);
	free(f);
	return 0;
}

/* ------------------------------------------------------------ helpers */

/* Let the wakeup stream @n more chunks (when a stream is running) and wake it. */
static void kick(struct fixture *f, int n)
{
	uint64_t one = 1;

	atomic_fetch_add(&f->credits, n);
	assert_int_equal(write(f->efd, &one, sizeof(one)), sizeof(one));
}

static unsigned int closed_count(struct fixture *f, kvp_conn_id id, unsigned int *total)
{
	unsigned int n = 0;

	pthread_mutex_lock(&f->lock);
	for (unsigned int i = 0; i < f->n_closed; i++)
		n += f->closed[i] == id;
	if (total)
		*total = f->n_closed;
	pthread_mutex_unlock(&f->lock);
	return n;
}

static unsigned int closed_total(struct fixture *f)
{
	unsigned int t;

	closed_count(f, 0, &t);
	return t;
}

/* Wait up to 5 s for closed_total() to reach @n. */
static void wait_closed_total(struct fixture *f, unsigned int n)
{
	for (int i = 0; i < 5000 && closed_total(f) < n; i++)
		usleep(1000);
	assert_int_equal(closed_total(f), n);
}

static unsigned long status_field(struct fixture *f, const char *name)
{
	char *text, *p;
	size_t len;
	char key[32];
	unsigned long v;

	assert_int_equal(kvp_client_status(f->status, "json", &text, &len), 0);
	snprintf(key, sizeof(key), " %s=", name);
	p = strstr(text, key);
	assert_non_null(p);
	v = strtoul(p + strlen(key), NULL, 10);
	free(text);
	return v;
}

static int raw_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	strcpy(sa.sun_path, path);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void raw_send(int fd, const void *p, size_t n)
{
	assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Read exactly @n bytes within 5 s.  Return: 0, 1 on EOF, -errno. */
static int raw_read(int fd, void *p, size_t n)
{
	uint8_t *b = p;

	while (n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&pfd, 1, 5000) != 1)
			return -ETIMEDOUT;
		r = recv(fd, b, n, 0);
		if (r < 0)
			return -errno;
		if (r == 0)
			return 1;
		b += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Read one frame into @payload (cap bytes). */
static int raw_frame(int fd, struct kvp_frame_hdr *h, uint8_t *payload, size_t cap)
{
	int r = raw_read(fd, h, sizeof(*h));

	if (r)
		return r;
	assert_int_equal(h->magic, KVP_WIRE_MAGIC);
	assert_true(h->len_bytes <= cap);
	return raw_read(fd, payload, h->len_bytes);
}

static void raw_hello_named(int fd, const struct kvp_hello *h)
{
	struct kvp_frame_hdr hdr;
	uint8_t frame[256];
	size_t n = kvp_proto_encode_hello(frame, sizeof(frame), h);

	raw_send(fd, frame, n);
	assert_int_equal(raw_frame(fd, &hdr, frame, sizeof(frame)), 0);
	assert_int_equal(hdr.type, KVP_FRAME_WELCOME);
}

static void raw_hello(int fd)
{
	struct kvp_hello h = { 0 };

	raw_hello_named(fd, &h);
}

static void last_client(struct fixture *f, char *out, size_t cap)
{
	pthread_mutex_lock(&f->lock);
	snprintf(out, cap, "%s", f->client);
	pthread_mutex_unlock(&f->lock);
}

/* The next frame is ERROR @status for @req_id; with @then_eof, the server then closed. */
static void expect_error(int fd, uint64_t req_id, int status, bool then_eof)
{
	struct kvp_frame_hdr hdr;
	uint8_t payload[1100];
	struct kvp_error e;
	const char *msg, *why;
	char c;

	assert_int_equal(raw_frame(fd, &hdr, payload, sizeof(payload)), 0);
	assert_int_equal(hdr.type, KVP_FRAME_ERROR);
	assert_int_equal(hdr.req_id, req_id);
	assert_int_equal(kvp_proto_decode_error(payload, hdr.len_bytes, &e, &msg, &why), KVP_OK);
	assert_int_equal(e.status, status);
	if (then_eof) {
		/* closed: EOF, or a reset when the server closed with our bytes unread */
		int r = raw_read(fd, &c, 1);

		assert_true(r == 1 || r == -ECONNRESET);
	}
}

static struct kvp_generate gen_tokens(uint32_t n, uint64_t seed)
{
	return (struct kvp_generate){
		.n_tokens = n, .max_new_tokens = 8, .top_p = 1.0f, .seed = seed
	};
}

/*
 * A GENERATE frame as the wire lays it out: header, @g as it is (reserved fields, flags
 * and lengths however the case sets them), then the prompt @g's lengths say.
 */
static size_t raw_generate(void *buf, size_t cap, uint64_t req_id, const struct kvp_generate *g,
			   const void *body)
{
	size_t nb = g->flags & KVP_GEN_TEXT ? g->text_bytes : (size_t)g->n_tokens * 4;
	struct kvp_frame_hdr h;

	assert_true(sizeof(h) + sizeof(*g) + nb <= cap);
	kvp_proto_hdr_init(&h, KVP_FRAME_GENERATE, req_id, (uint32_t)(sizeof(*g) + nb));
	memcpy(buf, &h, sizeof(h));
	memcpy((uint8_t *)buf + sizeof(h), g, sizeof(*g));
	memcpy((uint8_t *)buf + sizeof(h) + sizeof(*g), body, nb);
	return sizeof(h) + sizeof(*g) + nb;
}

static void send_gen(int fd, uint64_t req_id, const struct kvp_generate *g, const void *body)
{
	uint8_t frame[MAX_FRAME * 2];
	size_t n = raw_generate(frame, sizeof(frame), req_id, g, body);

	raw_send(fd, frame, n);
}

/* A well-behaved client: echo of 3 ids comes back exactly. */
static void check_echo(struct kvp_client *c)
{
	int32_t ids[3] = { 5, 17, 999 };
	struct kvp_client_prompt pr = { .tokens = ids, .n_tokens = 3 };
	struct kvp_client_event ev;
	struct kvp_usage u;
	uint64_t id;
	int got = 0;

	assert_int_equal(kvp_client_submit(c, &pr, NULL, &id), 0);
	for (;;) {
		assert_int_equal(kvp_client_next(c, &ev), 0);
		assert_int_equal(ev.req_id, id);
		if (ev.type == KVP_EVENT_DONE)
			break;
		assert_int_equal(ev.type, KVP_EVENT_TOKEN);
		assert_int_equal(ev.n_tokens, 1);
		assert_int_equal(ev.tokens[0], ids[got]);
		got++;
	}
	assert_int_equal(got, 3);
	u = ev.usage;
	assert_int_equal(u.prompt_tokens, 3);
	assert_int_equal(u.generated_tokens, 3);
	assert_true(u.ttft_ms == 1.5);
}

/* ------------------------------------------------------------ tests */

static void test_hello_passes_readonly_pool(void **state)
{
	/* WELCOME carries the sealed memfd; the client maps it read-only and can't write it */
	struct fixture *f = *state;
	struct kvp_client *c;
	const struct kvp_welcome *w;
	const uint8_t *pool, *data;
	char want[64], got[64];
	struct stat st;
	size_t len;
	void *p;

	/*
	 * whatever the umask, the request socket is created 0660 and the status socket,
	 * with no group of its own (status_gid -1), 0600: the operators' only
	 */
	assert_int_equal(stat(f->sock, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0660);
	assert_int_equal(stat(f->status, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);

	assert_int_equal(kvp_client_connect(&c, f->sock), 0);
	w = kvp_client_welcome(c);
	assert_int_equal(w->n_vocab, N_VOCAB);
	assert_int_equal(w->n_fds, 1);
	assert_int_equal(w->max_new_tokens, MAX_NEW); /* filled from the config */
	assert_int_equal(w->max_prompt_tokens, MAX_PROMPT);
	assert_string_equal(w->model, "test-model");
	/* libkvpool names itself "<program>/<pid>" in HELLO */
	snprintf(want, sizeof(want), "test-server/%d", (int)getpid());
	last_client(f, got, sizeof(got));
	assert_string_equal(got, want);
	pool = kvp_client_pool(c, &len);
	assert_non_null(pool);
	assert_int_equal(len, f->seg->bytes);
	assert_int_equal(w->n_blocks, POOL_BLOCKS);
	data = pool + w->data_offset;
	for (size_t i = 0; i < POOL_BLOCKS * w->block_stride; i += 4093)
		assert_int_equal(data[i], (uint8_t)(i * 31 + 7));
	/* the mapping cannot be made writable, nor can the fd be mapped writable */
	assert_int_equal(mprotect((void *)pool, len, PROT_READ | PROT_WRITE), -1);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, kvp_client_pool_fd(c), 0);
	assert_true(p == MAP_FAILED);
	check_echo(c);
	kvp_client_close(c);
}

/* Connect with the segment header changed by @edit; expect -EPROTO and @msg in errmsg. */
static void expect_bad_pool(struct fixture *f, void (*edit)(struct kvp_pool_header *),
			    const char *msg)
{
	struct kvp_pool_header *h = (struct kvp_pool_header *)f->seg->base;
	struct kvp_pool_header saved = *h;
	struct kvp_client *c;
	size_t len = 1;

	edit(h); /* through the daemon-side RW mapping, the only writable one */
	assert_int_equal(kvp_client_connect(&c, f->sock), -EPROTO);
	if (!strstr(kvp_client_errmsg(c), msg))
		fail_msg("errmsg \"%s\" lacks \"%s\"", kvp_client_errmsg(c), msg);
	assert_null(kvp_client_pool(c, &len)); /* nothing stays mapped */
	assert_int_equal(len, 0);
	kvp_client_close(c);
	*h = saved;
}

static void bad_magic(struct kvp_pool_header *h)
{
	h->magic ^= 1;
}

static void bad_version(struct kvp_pool_header *h)
{
	h->version = KVP_POOL_VERSION + 1;
}

static void bad_stride(struct kvp_pool_header *h)
{
	h->block_stride += 4096; /* no longer what the shape gives */
}

static void fewer_blocks(struct kvp_pool_header *h)
{
	h->n_blocks--; /* still a valid header, but not the pool WELCOME describes */
}

static void other_head_dim(struct kvp_pool_header *h)
{
	/* a consistent header of another shape: same block bytes, other layout */
	h->shape.head_dim *= 2;
	h->shape.n_kv_heads /= 2;
}

static void test_hello_client_name_sanitized(void **state)
{
	/* svc/ gets the HELLO name up to its NUL, 31 bytes at most, printable ASCII only */
	struct fixture *f = *state;
	struct kvp_hello h = { 0 };
	char got[64];
	int fd;

	memcpy(h.client, "app\n\"x\"\xc3\xa9\x7f", 10);
	fd = raw_connect(f->sock);
	raw_hello_named(fd, &h);
	last_client(f, got, sizeof(got));
	assert_string_equal(got, "app?\"x\"???");
	close(fd);

	/* all 32 bytes used, no NUL: cut at 31 */
	memset(h.client, 'n', sizeof(h.client));
	fd = raw_connect(f->sock);
	raw_hello_named(fd, &h);
	last_client(f, got, sizeof(got));
	assert_int_equal(strlen(got), KVP_CLIENT_NAME_MAX);
	assert_int_equal(strspn(got, "n"), KVP_CLIENT_NAME_MAX);
	close(fd);
}

static void test_connect_checks_pool_header(void **state)
{
	/* a segment whose header is not the pool WELCOME describes fails connect, saying why */
	struct fixture *f = *state;
	struct kvp_client *c;

	expect_bad_pool(f, bad_magic, "header magic");
	{
		char want[64];

		snprintf(want, sizeof(want), "version %u; this library reads",
			 KVP_POOL_VERSION + 1);
		expect_bad_pool(f, bad_version, want);
	}
	expect_bad_pool(f, bad_stride, "inconsistent header");
	expect_bad_pool(f, fewer_blocks, "header says n_blocks 7, WELCOME says 8");
	expect_bad_pool(f, other_head_dim, "header says n_kv_heads 1, WELCOME says 2");
	/* the restored header is accepted again */
	assert_int_equal(kvp_client_connect(&c, f->sock), 0);
	check_echo(c);
	kvp_client_close(c);
}

static int append_text(void *arg, const int32_t *t, uint32_t n, const char *text, uint32_t len)
{
	strncat(arg, text, len);
	return 0;
}

static void test_generate_text_and_callback(void **state)
{
	/* text prompts arrive NUL-terminated; generate() streams through the callback */
	struct fixture *f = *state;
	struct kvp_client_prompt pr = { .text = "hello world", .text_len = 11 };
	struct kvp_client *c;
	struct kvp_usage u;
	char seen[64] = "";

	assert_int_equal(kvp_client_connect(&c, f->sock), 0);
	assert_int_equal(kvp_client_generate(c, &pr, NULL, append_text, seen, &u), 0);
	assert_string_equal(seen, "hello world");
	assert_int_equal(u.prompt_tokens, 11);
	kvp_client_close(c);
}

static int collect_ids(void *arg, const int32_t *t, uint32_t n, const char *text, uint32_t len)
{
	int32_t *got = arg;

	(void)text;
	(void)len;
	for (uint32_t i = 0; i < n && got[0] < 16; i++)
		got[1 + got[0]++] = t[i];
	return 0;
}

static void test_generate_ids_handed_over(void **state)
{
	/*
	 * a GENERATE's ids reach svc/ in a buffer of their own with room for max_new more
	 * (the engine keeps it as the history: no copy after the frame's), whether the
	 * callback takes it (seed 5: it frees it) or leaves it to ipc/ (seed 0)
	 */
	struct fixture *f = *state;
	const int32_t ids[5] = { 7, 3, 9, 4, 11 };
	struct kvp_client_prompt pr = { .tokens = ids, .n_tokens = 5 };
	struct kvp_client *c;
	struct kvp_usage u;

	assert_int_equal(kvp_client_connect(&c, f->sock), 0);
	for (uint64_t seed = 0; seed <= 5; seed += 5) {
		struct kvp_client_params p = { .max_new_tokens = 8, .top_p = 1.0f, .seed = seed };
		int32_t got[17] = { 0 };

		assert_int_equal(kvp_client_generate(c, &pr, &p, collect_ids, got, &u), 0);
		/* the echo of the prompt read from the buffer, taken or not */
		assert_int_equal(got[0], 5);
		assert_memory_equal(got + 1, ids, sizeof(ids));
		assert_int_equal(u.prompt_tokens, 5);
	}
	kvp_client_close(c);
	assert_int_equal(atomic_load(&f->prompts_ok), 2);
	assert_int_equal(atomic_load(&f->prompts_bad), 0);
}

struct bad_case {
	const char *name;
	bool hello_first;
	int status;
	uint8_t frame[512];
	size_t len;
	bool shut_wr; /* truncated: the client ends its side mid-frame */
};

static size_t mk_hdr(uint8_t *buf, uint32_t magic, uint16_t version, uint16_t type, uint32_t flags,
		     uint32_t len, uint64_t req_id)
{
	struct kvp_frame_hdr h = { .magic = magic,
				   .version = version,
				   .type = type,
				   .flags = flags,
				   .len_bytes = len,
				   .req_id = req_id };

	memcpy(buf, &h, sizeof(h));
	return sizeof(h);
}

static void test_malformed_frames_close_only_their_connection(void **state)
{
	/* each malformed frame gets ERROR (req 0) and EOF; a concurrent client is unaffected */
	struct fixture *f = *state;
	static struct bad_case cases[40];
	struct kvp_generate g;
	int32_t ids[100];
	struct kvp_client *good;
	unsigned int n = 0;
	unsigned long proto_before;

	for (int i = 0; i < 100; i++)
		ids[i] = i;
#define CASE(nm, hf, st) \
	(cases[n] = (struct bad_case){ .name = nm, .hello_first = hf, .status = st }, &cases[n++])
	struct bad_case *b;

	b = CASE("bad magic", false, KVP_E_PROTO);
	b->len = mk_hdr(b->frame, 0xdeadbeef, 1, KVP_FRAME_HELLO, 0, 40, 0);
	memset(b->frame + b->len, 0, 40), b->len += 40;
	b = CASE("bad version", false, KVP_E_VERSION);
	b->len = mk_hdr(b->frame, KVP_WIRE_MAGIC, KVP_WIRE_VERSION + 1, KVP_FRAME_HELLO, 0, 40, 0);
	memset(b->frame + b->len, 0, 40), b->len += 40;
	b = CASE("version 1 client", false, KVP_E_VERSION);
	b->len = mk_hdr(b->frame, KVP_WIRE_MAGIC, 1, KVP_FRAME_HELLO, 0, 40, 0);
	memset(b->frame + b->len, 0, 40), b->len += 40;
	b = CASE("GENERATE reserved", true, KVP_E_PROTO);
	g = gen_tokens(2, 0);
	g.reserved = 1;
	b->len = raw_generate(b->frame, sizeof(b->frame), 1, &g, ids);
	b = CASE("unknown type", true, KVP_E_PROTO);
	b->len = mk_hdr(b->frame, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, 77, 0, 0, 1);
	b = CASE("daemon-only type", true, KVP_E_PROTO);
	b->len = mk_hdr(b->frame, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_TOKEN, 0, 8, 1);
	memset(b->frame + b->len, 0, 8), b->len += 8;
	b = CASE("header flags", true, KVP_E_PROTO);
	b->len = mk_hdr(b->frame, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_CANCEL, 4, 0, 1);
	b = CASE("frame beyond max size", true, KVP_E_LIMIT);
	b->len = mk_hdr(b->frame, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_GENERATE, 0,
			MAX_FRAME, 1);
	b = CASE("length beyond u32 frame", true, KVP_E_LIMIT);
	b->len = mk_hdr(b->frame, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_GENERATE, 0,
			UINT32_MAX, 1);
	b = CASE("GENERATE shorter than its struct", true, KVP_E_PROTO);
	b->len = mk_hdr(b->frame, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_GENERATE, 0, 50, 1);
	memset(b->frame + b->len, 0, 50), b->len += 50;
	b = CASE("n_tokens beyond the frame", true, KVP_E_PROTO);
	g = gen_tokens(2, 0);
	b->len = raw_generate(b->frame, sizeof(b->frame), 1, &g, ids);
	g.n_tokens = 100;
	memcpy(b->frame + 24, &g, sizeof(g));
	b = CASE("trailing bytes", true, KVP_E_PROTO);
	g = gen_tokens(2, 0);
	b->len = raw_generate(b->frame, sizeof(b->frame), 1, &g, ids);
	g.n_tokens = 1;
	memcpy(b->frame + 24, &g, sizeof(g));
	b = CASE("tokens and text", true, KVP_E_PROTO);
	g = gen_tokens(2, 0);
	b->len = raw_generate(b->frame, sizeof(b->frame), 1, &g, ids);
	g.text_bytes = 8;
	g.n_tokens = 0;
	g.flags = KVP_GEN_TEXT;
	g.n_tokens = 2;
	memcpy(b->frame + 24, &g, sizeof(g));
	b = CASE("unknown GENERATE flags", true, KVP_E_PROTO);
	g = gen_tokens(2, 0);
	g.flags = 0x80;
	b->len = raw_generate(b->frame, sizeof(b->frame), 1, &g, ids);
	b = CASE("salt longer than 64", true, KVP_E_PROTO);
	g = gen_tokens(2, 0);
	g.salt_len = 65;
	b->len = raw_generate(b->frame, sizeof(b->frame), 1, &g, ids);
	b = CASE("prompt beyond the token limit", true, KVP_E_LIMIT);
	g = gen_tokens(MAX_PROMPT + 1, 0);
	b = &cases[n - 1];
	/* built in a bigger frame below: 65 ids do not fit b->frame with the header */
	b->len = 0;
	b = CASE("max_new_tokens beyond the limit", true, KVP_E_LIMIT);
	g = gen_tokens(2, 0);
	g.max_new_tokens = MAX_NEW + 1;
	b->len = raw_generate(b->frame, sizeof(b->frame), 1, &g, ids);
	b = CASE("req_id 0", true, KVP_E_PROTO);
	g = gen_tokens(2, 0);
	b->len = raw_generate(b->frame, sizeof(b->frame), 0, &g, ids);
	b = CASE("GENERATE before HELLO", false, KVP_E_PROTO);
	g = gen_tokens(2, 0);
	b->len = raw_generate(b->frame, sizeof(b->frame), 1, &g, ids);
	b = CASE("second HELLO", true, KVP_E_PROTO);
	b->len = mk_hdr(b->frame, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_HELLO, 0, 40, 0);
	memset(b->frame + b->len, 0, 40), b->len += 40;
	b = CASE("HELLO reserved", false, KVP_E_PROTO);
	b->len = mk_hdr(b->frame, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_HELLO, 0, 40, 0);
	memset(b->frame + b->len, 0, 40), b->frame[b->len + 4] = 1, b->len += 40;
	b = CASE("HELLO wrong length", false, KVP_E_PROTO);
	b->len = mk_hdr(b->frame, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_HELLO, 0, 39, 0);
	memset(b->frame + b->len, 0, 39), b->len += 39;
	b = CASE("CANCEL with payload", true, KVP_E_PROTO);
	b->len = mk_hdr(b->frame, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_CANCEL, 0, 4, 1);
	memset(b->frame + b->len, 0, 4), b->len += 4;
	b = CASE("truncated payload", true, KVP_E_PROTO);
	g = gen_tokens(2, 0);
	b->len = raw_generate(b->frame, sizeof(b->frame), 1, &g, ids) - 5;
	b->shut_wr = true;
	b = CASE("truncated header", true, KVP_E_PROTO);
	b->len = mk_hdr(b->frame, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_CANCEL, 0, 0, 1) - 10;
	b->shut_wr = true;
#undef CASE

	assert_int_equal(kvp_client_connect(&good, f->sock), 0);
	proto_before = status_field(f, "proto");
	for (unsigned int i = 0; i < n; i++) {
		int fd = raw_connect(f->sock);

		print_message("  malformed: %s\n", cases[i].name);
		if (cases[i].hello_first)
			raw_hello(fd);
		if (cases[i].len) {
			raw_send(fd, cases[i].frame, cases[i].len);
		} else {
			/* the oversized prompt */
			int32_t big[MAX_PROMPT + 1] = { 0 };

			g = gen_tokens(MAX_PROMPT + 1, 0);
			send_gen(fd, 1, &g, big);
		}
		if (cases[i].shut_wr)
			shutdown(fd, SHUT_WR);
		expect_error(fd, 0, cases[i].status, true);
		close(fd);
		check_echo(good);
	}
	assert_int_equal(status_field(f, "proto"), proto_before + n);
	kvp_client_close(good);
}

static void test_invalid_values_refuse_the_request_only(void **state)
{
	/* out-of-range values get ERROR for that req_id; the connection keeps working */
	struct fixture *f = *state;
	int32_t ids[2] = { 1, 2 }, bad_ids[2] = { 1, N_VOCAB };
	struct kvp_generate g;
	struct kvp_frame_hdr hdr;
	uint8_t payload[512];
	int fd = raw_connect(f->sock);

	raw_hello(fd);
	g = gen_tokens(2, 0);
	g.temperature = NAN;
	send_gen(fd, 10, &g, ids);
	expect_error(fd, 10, KVP_E_INVALID, false);
	g = gen_tokens(2, 0);
	g.top_p = 0.0f;
	send_gen(fd, 11, &g, ids);
	expect_error(fd, 11, KVP_E_INVALID, false);
	g = gen_tokens(2, 0);
	g.max_new_tokens = 0;
	send_gen(fd, 12, &g, ids);
	expect_error(fd, 12, KVP_E_INVALID, false);
	g = gen_tokens(2, 0);
	send_gen(fd, 13, &g, bad_ids);
	expect_error(fd, 13, KVP_E_INVALID, false);
	g = gen_tokens(2, 3); /* the ops refuse it: NOSPACE */
	send_gen(fd, 14, &g, ids);
	expect_error(fd, 14, KVP_E_NOSPACE, false);
	/* and a good request on the same connection still works */
	g = gen_tokens(2, 0);
	send_gen(fd, 15, &g, ids);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(raw_frame(fd, &hdr, payload, sizeof(payload)), 0);
		assert_int_equal(hdr.req_id, 15);
		assert_int_equal(hdr.type, i < 2 ? KVP_FRAME_TOKEN : KVP_FRAME_DONE);
	}
	close(fd);
}

static void test_reused_id_refused_original_goes_on(void **state)
{
	/*
	 * a GENERATE reusing the id of a request in flight is refused (INVALID, same id),
	 * also when it is invalid for another reason; the request in flight keeps its id:
	 * a CANCEL still reaches it and its answer still reaches the client
	 */
	struct fixture *f = *state;
	int32_t ids[2] = { 1, 2 }, bad_ids[2] = { 1, N_VOCAB };
	struct kvp_generate g = gen_tokens(2, 2); /* held until cancelled */
	uint8_t cancel[sizeof(struct kvp_frame_hdr)];
	int fd = raw_connect(f->sock);

	raw_hello(fd);
	send_gen(fd, 5, &g, ids);
	send_gen(fd, 5, &g, ids);
	expect_error(fd, 5, KVP_E_INVALID, false);
	g.temperature = NAN;
	send_gen(fd, 5, &g, ids);
	expect_error(fd, 5, KVP_E_INVALID, false);
	g = gen_tokens(2, 2);
	send_gen(fd, 5, &g, bad_ids);
	expect_error(fd, 5, KVP_E_INVALID, false);
	kvp_proto_encode_cancel(cancel, sizeof(cancel), 5);
	raw_send(fd, cancel, sizeof(cancel));
	expect_error(fd, 5, KVP_E_CANCELLED, false);
	close(fd);
}

static void test_cancel_passed_once(void **state)
{
	/*
	 * svc/ hears of a request's first CANCEL only, however many the client sends while
	 * it is in flight (here the request stays in flight: its cancel is not answered)
	 */
	struct fixture *f = *state;
	int32_t ids[2] = { 1, 2 };
	struct kvp_generate g = gen_tokens(2, 4);
	uint8_t cancels[3][sizeof(struct kvp_frame_hdr)];
	int fd = raw_connect(f->sock);

	raw_hello(fd);
	send_gen(fd, 9, &g, ids);
	for (int i = 0; i < 3; i++)
		kvp_proto_encode_cancel(cancels[i], sizeof(cancels[i]), 9);
	raw_send(fd, cancels, sizeof(cancels));
	/* a reuse of id 9 is refused: the cancels were read and 9 is still in flight */
	send_gen(fd, 9, &g, ids);
	expect_error(fd, 9, KVP_E_INVALID, false);
	assert_int_equal(atomic_load(&f->n_cancels), 1);
	close(fd);
}

static void test_requests_per_connection_limit_and_cancel(void **state)
{
	/* MAX_REQS held requests fill the connection; one more gets BUSY; cancel frees one */
	struct fixture *f = *state;
	struct kvp_client_params p;
	int32_t id0 = 1;
	struct kvp_client_prompt pr = { .tokens = &id0, .n_tokens = 1 };
	struct kvp_client_event ev;
	struct kvp_client *c;
	uint64_t ids[MAX_REQS + 1];

	kvp_client_params_init(&p);
	p.seed = 2; /* held */
	assert_int_equal(kvp_client_connect(&c, f->sock), 0);
	for (unsigned int i = 0; i <= MAX_REQS; i++)
		assert_int_equal(kvp_client_submit(c, &pr, &p, &ids[i]), 0);
	assert_int_equal(kvp_client_next(c, &ev), 0);
	assert_int_equal(ev.type, KVP_EVENT_ERROR);
	assert_int_equal(ev.req_id, ids[MAX_REQS]);
	assert_int_equal(ev.status, KVP_E_BUSY);
	assert_int_equal(kvp_client_cancel(c, ids[0]), 0);
	assert_int_equal(kvp_client_next(c, &ev), 0);
	assert_int_equal(ev.type, KVP_EVENT_ERROR);
	assert_int_equal(ev.req_id, ids[0]);
	assert_int_equal(ev.status, KVP_E_CANCELLED);
	/* a cancel of a request no longer in flight is ignored */
	assert_int_equal(kvp_client_cancel(c, ids[0]), 0);
	p.seed = 0;
	assert_int_equal(kvp_client_submit(c, &pr, &p, &ids[0]), 0);
	assert_int_equal(kvp_client_next(c, &ev), 0);
	assert_int_equal(ev.type, KVP_EVENT_TOKEN);
	assert_int_equal(ev.req_id, ids[0]);
	kvp_client_close(c);
}

static void test_disconnect_calls_closed_once(void **state)
{
	/* a client leaving with requests in flight: closed exactly once, its handle stale */
	struct fixture *f = *state;
	struct kvp_client_params p;
	int32_t id0 = 1;
	struct kvp_client_prompt pr = { .tokens = &id0, .n_tokens = 1 };
	struct kvp_client *c, *other;
	unsigned int before = closed_total(f);
	uint64_t req;
	kvp_conn_id gone;

	kvp_client_params_init(&p);
	p.seed = 2;
	assert_int_equal(kvp_client_connect(&c, f->sock), 0);
	assert_int_equal(kvp_client_submit(c, &pr, &p, &req), 0);
	assert_int_equal(kvp_client_submit(c, &pr, &p, &req), 0);
	kvp_client_close(c);
	wait_closed_total(f, before + 1);
	pthread_mutex_lock(&f->lock);
	gone = f->closed[before];
	pthread_mutex_unlock(&f->lock);

	/* the slot gets reused by a new connection; the old handle must not reach it */
	assert_int_equal(kvp_client_connect(&other, f->sock), 0);
	check_echo(other);
	atomic_store(&f->stale_result, 1);
	f->stale_probe = gone;
	atomic_store(&f->stale_probe_set, true);
	kick(f, 0);
	for (int i = 0; i < 2000 && atomic_load(&f->stale_result) == 1; i++)
		usleep(1000);
	assert_int_equal(atomic_load(&f->stale_result), -ENOTCONN);
	check_echo(other);
	assert_int_equal(closed_count(f, gone, NULL), 1);
	assert_int_equal(closed_total(f), before + 1);
	kvp_client_close(other);
	wait_closed_total(f, before + 2);
}

static void test_slow_reader_disconnected(void **state)
{
	/* a client that never reads fills its bounded queue and is dropped, once */
	struct fixture *f = *state;
	struct kvp_generate g = gen_tokens(1, 1);
	int32_t id0 = 1;
	unsigned int before = closed_total(f);
	int fd = raw_connect(f->sock);

	raw_hello(fd);
	send_gen(fd, 1, &g, &id0);
	/*
	 * Paced: 4 more chunks only once the last 4 were queued, so the queue fills because
	 * the client does not read, not because one burst was larger than the queue.
	 */
	for (int i = 0; i < 10000 && !atomic_load(&f->stream_gone); i++) {
		kick(f, atomic_load(&f->credits) <= 0 ? 4 : 0); /* always wake: see t_wakeup */
		usleep(500);
	}
	assert_true(atomic_load(&f->stream_gone));
	/* more than the queue was produced: the socket buffer absorbed some, then outq */
	assert_true(atomic_load(&f->stream_sent) > OUTQ);
	wait_closed_total(f, before + 1);
	assert_int_equal(status_field(f, "slow"), 1);
	close(fd);
}

static void test_fast_reader_gets_everything(void **state)
{
	/* a reading client receives a 4 MiB stream intact through many short writes */
	struct fixture *f = *state;
	int32_t id0 = 1;
	struct kvp_client_prompt pr = { .tokens = &id0, .n_tokens = 1 };
	struct kvp_client_params p;
	struct kvp_client_event ev;
	struct kvp_client *c;
	uint64_t req, bytes = 0;

	kvp_client_params_init(&p);
	p.seed = 1;
	f->stream_limit = 4u << 20;
	atomic_store(&f->stream_sent, 0);
	assert_int_equal(kvp_client_connect(&c, f->sock), 0);
	assert_int_equal(kvp_client_submit(c, &pr, &p, &req), 0);
	/*
	 * paced like a real engine: at most 4 chunks (16 KiB) ahead of the reader.  The
	 * queue needs room for twice that: bytes of a send in flight stay queued until the
	 * whole send completes, though the reader may have read most of them already.
	 */
	kick(f, 4);
	for (;;) {
		assert_int_equal(kvp_client_next(c, &ev), 0);
		kick(f, 1);
		if (ev.type == KVP_EVENT_DONE)
			break;
		assert_int_equal(ev.type, KVP_EVENT_TOKEN);
		assert_int_equal(ev.text_len, STREAM_CHUNK);
		assert_true(ev.text[0] == 'x' && ev.text[STREAM_CHUNK - 1] == 'x');
		bytes += ev.text_len;
	}
	assert_int_equal(bytes, 4u << 20);
	assert_false(atomic_load(&f->stream_gone));
	assert_int_equal(status_field(f, "slow"), 0);
	kvp_client_close(c);
}

static void test_connection_limit(void **state)
{
	/* MAX_CONNS clients fit; the next is refused with BUSY; a freed slot is usable */
	struct fixture *f = *state;
	struct kvp_client *c[MAX_CONNS + 1];
	unsigned int before = closed_total(f);

	for (unsigned int i = 0; i < MAX_CONNS; i++)
		assert_int_equal(kvp_client_connect(&c[i], f->sock), 0);
	assert_int_equal(kvp_client_connect(&c[MAX_CONNS], f->sock), KVP_E_BUSY);
	assert_non_null(strstr(kvp_client_errmsg(c[MAX_CONNS]), "too many"));
	kvp_client_close(c[MAX_CONNS]);
	assert_int_equal(status_field(f, "refused"), 1);
	assert_int_equal(status_field(f, "open"), MAX_CONNS);
	kvp_client_close(c[0]);
	wait_closed_total(f, before + 1);
	assert_int_equal(kvp_client_connect(&c[0], f->sock), 0);
	check_echo(c[0]);
	for (unsigned int i = 0; i < MAX_CONNS; i++)
		kvp_client_close(c[i]);
	wait_closed_total(f, before + 1 + MAX_CONNS);
}

static void test_status_socket(void **state)
{
	/* "json" and "prom" reach ops->status; anything else gets a JSON error */
	struct fixture *f = *state;
	char *text, buf[256];
	size_t len;
	int fd, n = 0, r;

	assert_int_equal(kvp_client_status(f->status, "json", &text, &len), 0);
	assert_true(len > 0 && !strncmp(text, "json ", 5));
	free(text);
	assert_int_equal(kvp_client_status(f->status, "prom", &text, &len), 0);
	assert_true(!strncmp(text, "prom ", 5));
	free(text);
	assert_int_equal(kvp_client_status(f->status, "xml", &text, &len), -EINVAL);

	fd = raw_connect(f->status);
	raw_send(fd, "yaml\n", 5);
	while ((r = (int)read(fd, buf + n, sizeof(buf) - 1 - (size_t)n)) > 0)
		n += r;
	buf[n] = 0;
	assert_non_null(strstr(buf, "\"error\""));
	close(fd);
}

/* Everything the status socket sends back until EOF (at most @cap - 1 bytes). */
static size_t read_to_eof(int fd, char *buf, size_t cap)
{
	size_t n = 0;
	ssize_t r;

	while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0)
		n += (size_t)r;
	buf[n] = 0;
	return n;
}

static void test_status_empty_request(void **state)
{
	/*
	 * A peer that shuts its side having sent nothing (another kvpoold's start-up probe
	 * does) is closed with no answer and the server goes on (c->in was still NULL: UB
	 * before the fix, an abort under UBSan); an empty line still means json.
	 */
	struct fixture *f = *state;
	char buf[256], *text;
	size_t len;
	int fd;

	for (int i = 0; i < 3; i++) {
		fd = raw_connect(f->status);
		assert_int_equal(shutdown(fd, SHUT_WR), 0);
		assert_int_equal(read_to_eof(fd, buf, sizeof(buf)), 0);
		close(fd);
	}
	fd = raw_connect(f->status);
	close(fd); /* gone before the server reads anything */
	fd = raw_connect(f->status);
	raw_send(fd, "\n", 1);
	assert_int_equal(shutdown(fd, SHUT_WR), 0);
	assert_true(read_to_eof(fd, buf, sizeof(buf)) > 0);
	assert_true(!strncmp(buf, "json ", 5));
	close(fd);
	assert_int_equal(kvp_client_status(f->status, "json", &text, &len), 0);
	assert_true(len > 0 && !strncmp(text, "json ", 5));
	free(text);
}

static void test_client_status_empty_answer(void **state)
{
	/* kvp_client_status() of a socket that answers nothing: -EPROTO, no text */
	struct fixture *f = *state;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char path[sizeof(f->dir) + 16], *text = (char *)1;
	int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), st;
	size_t len = 7;
	pid_t pid;

	assert_true(lfd >= 0);
	snprintf(path, sizeof(path), "%s/mute.sock", f->dir);
	assert_true(strlen(path) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 1), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char buf[64];
		int fd = accept(lfd, NULL, NULL);

		while (fd >= 0 && read(fd, buf, sizeof(buf)) > 0)
			;
		_exit(fd >= 0 ? 0 : 1);
	}
	close(lfd);
	assert_int_equal(kvp_client_status(path, "json", &text, &len), -EPROTO);
	assert_null(text);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_empty_payload_frames(void **state)
{
	/*
	 * Every client frame type with a zero-length payload, before and after HELLO: each
	 * is answered with an ERROR or taken as what it means (CANCEL, RELEASE, FLUSH), never
	 * read past its end; the server then serves a good client.
	 */
	struct fixture *f = *state;
	struct kvp_client *good;

	for (uint16_t t = 0; t < KVP_FRAME__COUNT + 1; t++) {
		for (int hello = 0; hello < 2; hello++) {
			struct kvp_frame_hdr hdr;
			uint8_t frame[1100];
			size_t n = mk_hdr(frame, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, t, 0, 0, 7);
			int fd = raw_connect(f->sock), r;

			if (hello)
				raw_hello(fd);
			raw_send(fd, frame, n);
			/* a frame that needs no answer: a CANCEL/RELEASE of nothing, ... */
			n = kvp_proto_encode_cancel(frame, sizeof(frame), 99);
			(void)send(fd, frame, n, MSG_NOSIGNAL);
			assert_int_equal(shutdown(fd, SHUT_WR), 0);
			/* ... so read what comes until the server closes: frames, then EOF */
			while ((r = raw_frame(fd, &hdr, frame, sizeof(frame))) == 0)
				assert_true(hdr.type == KVP_FRAME_ERROR ||
					    hdr.type == KVP_FRAME_DONE ||
					    hdr.type == KVP_FRAME_WELCOME);
			assert_true(r == 1 || r == -ECONNRESET);
			close(fd);
		}
	}
	assert_int_equal(kvp_client_connect(&good, f->sock), 0);
	check_echo(good);
	kvp_client_close(good);
}

static void test_stop_refuses_new_connections(void **state)
{
	/* after a stop, connects are refused while open connections are still served */
	struct fixture *f = *state;
	struct kvp_client *c, *late = NULL;
	int r = 0;

	f->drain_ms = 20000; /* the teardown's stop ends the drain early */
	assert_int_equal(kvp_client_connect(&c, f->sock), 0);
	kvp_server_stop(f->srv);
	for (int i = 0; i < 2000; i++) {
		r = kvp_client_connect(&late, f->sock);
		kvp_client_close(late);
		if (r)
			break;
		usleep(1000);
	}
	/* refused by the kernel (the listener is closed) or by the stopping server */
	assert_true(r < 0 || r == KVP_E_SHUTDOWN);
	check_echo(c);
	kvp_client_close(c);
}

/* After HELLO, GENERATE 15 (echo of 2 ids) answers TOKEN TOKEN DONE: the connection lives. */
static void expect_alive(int fd)
{
	int32_t ids[2] = { 1, 2 };
	struct kvp_generate g = gen_tokens(2, 0);
	struct kvp_frame_hdr hdr;
	uint8_t payload[512];

	send_gen(fd, 15, &g, ids);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(raw_frame(fd, &hdr, payload, sizeof(payload)), 0);
		assert_int_equal(hdr.req_id, 15);
		assert_int_equal(hdr.type, i < 2 ? KVP_FRAME_TOKEN : KVP_FRAME_DONE);
	}
}

static void test_empty_payloads(void **state)
{
	/*
	 * every frame type with no payload at all: the types whose payload has a struct are
	 * malformed (ERROR req 0, closed), CANCEL and RELEASE are taken (nothing answers),
	 * FLUSH is a request of its own (refused here: the test ops have none)
	 */
	struct fixture *f = *state;
	uint8_t frame[64];

	for (uint16_t t = 0; t < KVP_FRAME__COUNT; t++) {
		bool taken = t == KVP_FRAME_CANCEL || t == KVP_FRAME_RELEASE ||
			     t == KVP_FRAME_FLUSH;
		int fd = raw_connect(f->sock);
		size_t n;

		if (t != KVP_FRAME_HELLO)
			raw_hello(fd);
		n = mk_hdr(frame, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, t, 0, 0, 7);
		raw_send(fd, frame, n);
		if (!taken) {
			expect_error(fd, 0, KVP_E_PROTO, true);
		} else {
			if (t == KVP_FRAME_FLUSH)
				expect_error(fd, 7, KVP_E_INVALID, false);
			expect_alive(fd);
		}
		close(fd);
	}
}

static void test_refusals_in_a_row_close(void **state)
{
	/*
	 * 16 refused requests in a row (the default max_refusals) close the connection with
	 * ERROR KVP_E_LIMIT (req 0); a request served between resets the count
	 */
	struct fixture *f = *state;
	int32_t ids[2] = { 1, 2 };
	struct kvp_generate g = gen_tokens(2, 0);
	int fd = raw_connect(f->sock);

	raw_hello(fd);
	g.temperature = NAN;
	for (int round = 0; round < 2; round++) {
		for (uint64_t i = 0; i < 15; i++) {
			send_gen(fd, 100 + i, &g, ids);
			expect_error(fd, 100 + i, KVP_E_INVALID, false);
		}
		expect_alive(fd);
	}
	for (uint64_t i = 0; i < 16; i++) {
		send_gen(fd, 200 + i, &g, ids);
		expect_error(fd, 200 + i, KVP_E_INVALID, false);
	}
	expect_error(fd, 0, KVP_E_LIMIT, true);
	close(fd);
	/* NOSPACE (the ops' refusal) counts too; another connection was never affected */
	fd = raw_connect(f->sock);
	raw_hello(fd);
	g = gen_tokens(2, 3);
	for (uint64_t i = 0; i < 16; i++) {
		send_gen(fd, 300 + i, &g, ids);
		expect_error(fd, 300 + i, KVP_E_NOSPACE, false);
	}
	expect_error(fd, 0, KVP_E_LIMIT, true);
	close(fd);
}

static void test_lease_salt_padding_closes(void **state)
{
	/* LEASE with bytes past salt_len: a malformed frame, as for GENERATE and PIN */
	struct fixture *f = *state;
	struct kvp_lease_req l = { .n_tokens = 1, .salt_len = 2, .salt = { 'a', 'b', 0, 9 } };
	int32_t id = 1;
	uint8_t frame[256];
	int fd = raw_connect(f->sock);
	size_t n;

	raw_hello(fd);
	n = kvp_proto_encode_lease_req(frame, sizeof(frame), 5, &l, &id);
	raw_send(fd, frame, n);
	expect_error(fd, 0, KVP_E_PROTO, true);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_hello_passes_readonly_pool, setup, teardown),
		cmocka_unit_test_setup_teardown(test_connect_checks_pool_header, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hello_client_name_sanitized, setup, teardown),
		cmocka_unit_test_setup_teardown(test_generate_text_and_callback, setup, teardown),
		cmocka_unit_test_setup_teardown(test_generate_ids_handed_over, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed_frames_close_only_their_connection,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_invalid_values_refuse_the_request_only, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_reused_id_refused_original_goes_on, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_cancel_passed_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_requests_per_connection_limit_and_cancel,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_disconnect_calls_closed_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slow_reader_disconnected, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fast_reader_gets_everything, setup, teardown),
		cmocka_unit_test_setup_teardown(test_connection_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_status_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_status_empty_request, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_payload_frames, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_status_empty_answer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stop_refuses_new_connections, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_payloads, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusals_in_a_row_close, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lease_salt_padding_closes, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
