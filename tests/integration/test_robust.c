/* SPDX-License-Identifier: MIT */
/*
 * test_robust.c - a real kvpoold against hostile or careless clients:
 *  - malformed frames of every kind get an ERROR with the right status (and the
 *    connection closed when the frame itself is broken), while a concurrent client's
 *    stream completes with exactly the tokens kvpool-run computes offline;
 *  - a client SIGKILLed mid-stream leaves the pool counters back at their baseline;
 *  - a client cannot write the pool it maps (SIGSEGV), nor map it writable, reopen it
 *    writable, write(2) it or mprotect it writable.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "kvpool/kvpool.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

#define MAX_PROMPT 2048
#define MAX_FRAME (64 << 10)

struct fixture {
	struct kvpd d;
	char model[512];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	const char *args[] = { "--model", NULL, "--pool-size", "32M", "--ignore-eos",
			       "--max-prompt-tokens", "2048", "--max-frame-bytes", "64K",
			       "--max-new-tokens", "8192", NULL };

	if (!f || kvpd_init(&f->d) < 0 || kvpd_model(&f->d, "tiny", f->model,
						       sizeof(f->model)) < 0)
		return -1;
	args[1] = f->model;
	if (kvpd_start(&f->d, 60, args) < 0) {
		kvpd_dump_log(&f->d);
		return -1;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kvpd_cleanup(&f->d);
	free(f);
	return 0;
}

/* ---- raw frames, written here independently of ipc/proto.c ---- */

static int raw_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	memcpy(a.sun_path, path, strlen(path) + 1);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static void put_hdr(uint8_t *b, uint32_t magic, uint16_t version, uint16_t type,
		    uint32_t len, uint64_t req_id)
{
	struct kvp_frame_hdr h = { .magic = magic, .version = version, .type = type,
				   .len_bytes = len, .req_id = req_id };

	memcpy(b, &h, sizeof(h));
}

static void send_all(int fd, const void *p, size_t n)
{
	assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

static void send_hello(int fd)
{
	uint8_t b[24 + sizeof(struct kvp_hello)] = { 0 };
	struct kvp_hello h = { .flags = 0 };

	put_hdr(b, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_HELLO, sizeof(h), 0);
	memcpy(b + 24, &h, sizeof(h));
	send_all(fd, b, sizeof(b));
}

/* Read exactly @n bytes within 10 s; returns bytes read (less on EOF). */
static size_t read_n(int fd, void *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, 10000) <= 0)
			break;
		r = read(fd, (char *)buf + got, n - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

/* Next frame's header; its payload (up to @cap bytes) into @payload. */
static bool read_frame(int fd, struct kvp_frame_hdr *h, void *payload, size_t cap)
{
	static uint8_t sink[1 << 16];

	if (read_n(fd, h, sizeof(*h)) != sizeof(*h))
		return false;
	assert_true(h->len_bytes <= sizeof(sink));
	if (read_n(fd, sink, h->len_bytes) != h->len_bytes)
		return false;
	memcpy(payload, sink, h->len_bytes < cap ? h->len_bytes : cap);
	return true;
}

/* Skip WELCOME/other frames until an ERROR; check its status and req_id. */
static void expect_error(int fd, uint32_t status, uint64_t req_id)
{
	struct kvp_frame_hdr h;
	uint8_t p[512];

	for (;;) {
		assert_true(read_frame(fd, &h, p, sizeof(p)));
		if (h.type == KVP_FRAME_ERROR)
			break;
	}
	assert_int_equal(h.magic, KVP_WIRE_MAGIC);
	assert_int_equal(h.req_id, req_id);
	assert_true(h.len_bytes >= sizeof(struct kvp_error));
	assert_int_equal(((struct kvp_error *)p)->status, status);
}

/* The daemon closes the connection after a frame-level error. */
static void expect_eof(int fd)
{
	char c;

	assert_int_equal(read_n(fd, &c, 1), 0);
}

static void send_generate(int fd, uint64_t req_id, uint32_t n_tokens_field,
			  const int32_t *tokens, uint32_t n_sent, uint32_t max_new)
{
	size_t len = sizeof(struct kvp_generate) + (size_t)n_sent * 4;
	uint8_t *b = calloc(1, 24 + len);
	struct kvp_generate g = { .n_tokens = n_tokens_field, .max_new_tokens = max_new,
				  .top_p = 1.0f };

	assert_non_null(b);
	put_hdr(b, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_GENERATE, (uint32_t)len, req_id);
	memcpy(b + 24, &g, sizeof(g));
	memcpy(b + 24 + sizeof(g), tokens, (size_t)n_sent * 4);
	send_all(fd, b, 24 + len);
	free(b);
}

/* ---- the concurrent, well-behaved client ---- */

struct streamer {
	const char *sock;
	int32_t prompt[300];
	int32_t got[1200];
	uint32_t n_got;
	int rc;
	struct kvp_usage usage;
	volatile int started;
};

static int on_tok(void *arg, const int32_t *t, uint32_t n, const char *text, uint32_t tl)
{
	struct streamer *s = arg;

	for (uint32_t i = 0; i < n && s->n_got < 1200; i++)
		s->got[s->n_got++] = t[i];
	s->started = 1;
	return 0;
}

static void *streamer_main(void *arg)
{
	struct streamer *s = arg;
	struct kvp_client *k = NULL;
	struct kvp_client_params p;
	struct kvp_client_prompt pr = { .tokens = s->prompt, .n_tokens = 300 };

	s->rc = kvp_client_connect(s->sock, &k);
	if (!s->rc) {
		kvp_client_params_init(&p);
		p.max_new_tokens = 1200;
		s->rc = kvp_client_generate(k, &pr, &p, on_tok, s, &s->usage);
	}
	s->started = 1;
	kvp_client_close(k);
	return NULL;
}

static void test_malformed_frames(void **state)
{
	struct fixture *f = *state;
	struct streamer *s = calloc(1, sizeof(*s));
	int32_t want[1200];
	uint32_t n_want = 0;
	int32_t toks[8] = { 5, 6, 7, 8, 9, 10, 11, 12 };
	uint8_t b[256];
	pthread_t th;
	int fd;

	assert_non_null(s);
	s->sock = f->d.sock;
	for (int i = 0; i < 300; i++)
		s->prompt[i] = 3 + (i * 37) % 256;
	assert_int_equal(kvpd_offline(f->model, s->prompt, 300, 1200, true, want, &n_want), 0);
	assert_int_equal(pthread_create(&th, NULL, streamer_main, s), 0);
	while (!s->started)
		usleep(1000);

	/* bad magic */
	fd = raw_connect(f->d.sock);
	put_hdr(b, 0xdeadbeef, KVP_WIRE_VERSION, KVP_FRAME_HELLO, sizeof(struct kvp_hello), 0);
	memset(b + 24, 0, sizeof(struct kvp_hello));
	send_all(fd, b, 24 + sizeof(struct kvp_hello));
	expect_error(fd, KVP_E_PROTO, 0);
	expect_eof(fd);
	close(fd);

	/* unsupported version */
	fd = raw_connect(f->d.sock);
	put_hdr(b, KVP_WIRE_MAGIC, 99, KVP_FRAME_HELLO, sizeof(struct kvp_hello), 0);
	send_all(fd, b, 24 + sizeof(struct kvp_hello));
	expect_error(fd, KVP_E_VERSION, 0);
	expect_eof(fd);
	close(fd);

	/* unknown type, and a type only the daemon may send */
	fd = raw_connect(f->d.sock);
	send_hello(fd);
	put_hdr(b, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, 77, 0, 1);
	send_all(fd, b, 24);
	expect_error(fd, KVP_E_PROTO, 0);
	expect_eof(fd);
	close(fd);
	fd = raw_connect(f->d.sock);
	send_hello(fd);
	put_hdr(b, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_TOKEN, 0, 1);
	send_all(fd, b, 24);
	expect_error(fd, KVP_E_PROTO, 0);
	expect_eof(fd);
	close(fd);

	/* a length beyond the configured frame maximum */
	fd = raw_connect(f->d.sock);
	send_hello(fd);
	put_hdr(b, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_GENERATE, MAX_FRAME + 1, 1);
	send_all(fd, b, 24);
	expect_error(fd, KVP_E_LIMIT, 0);
	expect_eof(fd);
	close(fd);

	/* HELLO with a payload length its type does not allow */
	fd = raw_connect(f->d.sock);
	put_hdr(b, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_HELLO, 8, 0);
	memset(b + 24, 0, 8);
	send_all(fd, b, 32);
	expect_error(fd, KVP_E_PROTO, 0);
	expect_eof(fd);
	close(fd);

	/* GENERATE whose n_tokens runs past the end of its frame */
	fd = raw_connect(f->d.sock);
	send_hello(fd);
	send_generate(fd, 1, 100, toks, 8, 4);
	expect_error(fd, KVP_E_PROTO, 0);
	expect_eof(fd);
	close(fd);

	/* GENERATE with more prompt tokens than the daemon's limit (frame itself fits) */
	{
		int32_t *many = calloc(MAX_PROMPT + 1, sizeof(int32_t));

		assert_non_null(many);
		for (int i = 0; i <= MAX_PROMPT; i++)
			many[i] = 5;
		fd = raw_connect(f->d.sock);
		send_hello(fd);
		send_generate(fd, 1, MAX_PROMPT + 1, many, MAX_PROMPT + 1, 4);
		expect_error(fd, KVP_E_LIMIT, 0);
		expect_eof(fd);
		close(fd);
		free(many);
	}

	/* GENERATE before HELLO */
	fd = raw_connect(f->d.sock);
	send_generate(fd, 1, 8, toks, 8, 4);
	expect_error(fd, KVP_E_PROTO, 0);
	expect_eof(fd);
	close(fd);

	/* truncated header, then truncated payload, each followed by EOF */
	fd = raw_connect(f->d.sock);
	put_hdr(b, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_HELLO, sizeof(struct kvp_hello), 0);
	send_all(fd, b, 10);
	shutdown(fd, SHUT_WR);
	expect_error(fd, KVP_E_PROTO, 0);
	expect_eof(fd);
	close(fd);
	fd = raw_connect(f->d.sock);
	send_hello(fd);
	put_hdr(b, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_GENERATE, 200, 1);
	send_all(fd, b, 24 + 50);
	shutdown(fd, SHUT_WR);
	expect_error(fd, KVP_E_PROTO, 0);
	expect_eof(fd);
	close(fd);

	/* well-formed but invalid: a token id past the vocabulary refuses that request
	 * only; the same connection then serves a valid one */
	fd = raw_connect(f->d.sock);
	send_hello(fd);
	toks[3] = 100000;
	send_generate(fd, 7, 8, toks, 8, 4);
	expect_error(fd, KVP_E_INVALID, 7);
	toks[3] = 8;
	send_generate(fd, 8, 8, toks, 8, 2);
	{
		struct kvp_frame_hdr h;
		struct kvp_usage u;

		do {
			assert_true(read_frame(fd, &h, &u, sizeof(u)));
			assert_int_not_equal(h.type, KVP_FRAME_ERROR);
		} while (h.type != KVP_FRAME_DONE);
		assert_int_equal(h.req_id, 8);
		assert_int_equal(u.generated_tokens, 2);
	}
	close(fd);

	/* the concurrent stream was not disturbed */
	pthread_join(th, NULL);
	assert_int_equal(s->rc, 0);
	assert_int_equal(s->n_got, n_want);
	assert_memory_equal(s->got, want, n_want * sizeof(int32_t));
	{
		struct jsonq *j = kvpd_status(&f->d);

		assert_non_null(j);
		assert_true(jsonq_num(j, "connections.protocol_errors", 0) >= 10);
		jsonq_free(j);
	}
	free(s);
}

/* Poll the status until no sequence runs, then return it. */
static struct jsonq *status_when_idle(struct kvpd *d)
{
	double t_end = kvp_test_now_s() + 20;

	while (kvp_test_now_s() < t_end) {
		struct jsonq *j = kvpd_status(d);

		if (j && jsonq_num(j, "scheduler.running", -1) == 0 &&
		    jsonq_num(j, "scheduler.queued", -1) == 0 &&
		    jsonq_num(j, "connections.open", -1) == 0)
			return j;
		jsonq_free(j);
		usleep(20000);
	}
	return NULL;
}

/* Fork a client that streams a long generation; SIGKILL it after its first token. */
static void kill_mid_stream(struct fixture *f, bool no_cache, uint32_t n_prompt)
{
	int ready[2];
	pid_t pid;
	int st;
	char c;

	assert_int_equal(pipe(ready), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct kvp_client *k = NULL;
		struct kvp_client_params p;
		struct kvp_client_event ev;
		int32_t prompt[512];
		struct kvp_client_prompt pr = { .tokens = prompt, .n_tokens = n_prompt };
		uint64_t id;

		for (uint32_t i = 0; i < n_prompt; i++)
			prompt[i] = 3 + (int32_t)((i * 101 + (no_cache ? 7 : 0)) % 256);
		if (kvp_client_connect(f->d.sock, &k))
			_exit(2);
		kvp_client_params_init(&p);
		p.max_new_tokens = 8000;
		p.no_cache = no_cache;
		if (kvp_client_submit(k, &pr, &p, &id))
			_exit(3);
		if (kvp_client_next(k, &ev) || ev.type != KVP_EVENT_TOKEN)
			_exit(4);
		if (write(ready[1], "x", 1) != 1)
			_exit(5);
		for (;;)
			if (kvp_client_next(k, &ev))
				_exit(6);
	}
	close(ready[1]);
	assert_int_equal(read(ready[0], &c, 1), 1);
	close(ready[0]);
	/* it is streaming right now: kill it without a chance to say goodbye */
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
}

static void test_killed_client_releases_blocks(void **state)
{
	struct fixture *f = *state;
	struct jsonq *base, *after;

	base = status_when_idle(&f->d);
	assert_non_null(base);

	/* no-cache request: every pool counter returns to exactly its baseline */
	kill_mid_stream(f, true, 200);
	after = status_when_idle(&f->d);
	assert_non_null(after);
	assert_int_equal(jsonq_num(after, "pool.blocks_used", -1), 0);
	assert_int_equal(jsonq_num(after, "pool.blocks_free", -1),
			 jsonq_num(base, "pool.blocks_free", -2));
	assert_int_equal(jsonq_num(after, "pool.blocks_cached", -1),
			 jsonq_num(base, "pool.blocks_cached", -2));
	assert_int_equal(jsonq_num(after, "scheduler.requests_cancelled", -1),
			 jsonq_num(base, "scheduler.requests_cancelled", -2) + 1);
	jsonq_free(after);

	/* cached request: its 12 full prompt blocks stay cached, nothing stays used */
	kill_mid_stream(f, false, 200);
	after = status_when_idle(&f->d);
	assert_non_null(after);
	assert_int_equal(jsonq_num(after, "pool.blocks_used", -1), 0);
	assert_int_equal(jsonq_num(after, "pool.blocks_cached", -1),
			 jsonq_num(base, "pool.blocks_cached", -2) + 200 / 16);
	assert_int_equal(jsonq_num(after, "pool.blocks_free", -1) +
				 jsonq_num(after, "pool.blocks_cached", -1),
			 jsonq_num(after, "pool.blocks_total", -2));
	jsonq_free(after);
	jsonq_free(base);
}

static void test_pool_mapping_is_read_only(void **state)
{
	struct fixture *f = *state;
	struct kvp_client *k = NULL;
	const struct kvp_pool_header *hdr;
	const void *pool;
	char path[64];
	size_t len = 0;
	void *p;
	pid_t pid;
	int fd, fd2, st;

	assert_int_equal(kvp_client_connect(f->d.sock, &k), 0);
	pool = kvp_client_pool(k, &len);
	assert_non_null(pool);
	assert_true(len > 0);
	assert_int_equal(len, kvp_client_welcome(k)->segment_bytes);
	/* the client really sees the pool: its header describes it */
	hdr = pool;
	assert_true(hdr->magic == KVP_POOL_MAGIC);
	assert_int_equal(hdr->n_blocks, kvp_client_welcome(k)->n_blocks);

	/* a write through the mapping kills the writer */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL);	/* cmocka's handler would catch it */
		*(volatile uint8_t *)((uintptr_t)pool + 4096) = 1;
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFSIGNALED(st));
	assert_int_equal(WTERMSIG(st), SIGSEGV);

	/* no writable mapping: not of the passed fd, not of a read-write reopen */
	fd = kvp_client_pool_fd(k);
	assert_true(fd >= 0);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(p == MAP_FAILED);
	assert_true(errno == EACCES || errno == EPERM);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	fd2 = open(path, O_RDWR);
	if (fd2 >= 0) {
		/* the seal, not the fd mode, is what protects the pool */
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd2, 0);
		assert_true(p == MAP_FAILED);
		assert_int_equal(errno, EPERM);
		assert_int_equal(pwrite(fd2, "x", 1, 4096), -1);
		close(fd2);
	}
	/* and the read-only mapping cannot be turned writable */
	assert_int_equal(mprotect((void *)pool, 4096, PROT_READ | PROT_WRITE), -1);
	assert_int_equal(errno, EACCES);
	kvp_client_close(k);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_malformed_frames),
		cmocka_unit_test(test_killed_client_releases_blocks),
		cmocka_unit_test(test_pool_mapping_is_read_only),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
