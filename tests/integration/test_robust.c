/* SPDX-License-Identifier: MIT */
/*
 * test_robust.c - a real kvpoold against hostile or careless clients:
 *  - malformed frames of every kind get an ERROR with the right status (and the
 *    connection closed when the frame itself is broken), while a concurrent client's
 *    stream completes with exactly the tokens kvpool-run computes offline;
 *  - a client SIGKILLed mid-stream leaves the pool counters back at their baseline;
 *  - a client cannot write the pool it maps (SIGSEGV), nor map it writable, reopen it
 *    writable, write(2) it or mprotect it writable;
 *  - the name a client gives in HELLO is in the debug log and its status entry;
 *  - a flood of CANCELs for one request reaches the engine once.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
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
#define MAX_NEW 8192
#define MAX_FRAME (64 << 10)

struct fixture {
	struct kvpd d; /* first: kvpd_teardown() frees the fixture through it */
};
static_assert(offsetof(struct fixture, d) == 0, "kvpd_teardown");

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	/*
	 * 576 blocks of 16 tokens (4 KiB each: f16 K/V, the default): less than MAX_PROMPT +
	 * MAX_NEW, so NOSPACE can be seen
	 */
	const char *args[] = { "--pool-size",  "2304K",
			       "--ignore-eos", "--max-prompt-tokens",
			       "2048",	       "--max-frame-bytes",
			       "64K",	       "--max-new-tokens",
			       "8192",	       "--log-level",
			       "debug",	       NULL };

	if (!f || kvpd_setup(&f->d, "tiny", args) < 0) {
		free(f);
		return -1;
	}
	*state = f;
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

static void send_all(int fd, const void *p, size_t n)
{
	assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
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

	s->rc = kvp_client_connect(&k, s->sock);
	if (!s->rc) {
		kvp_client_params_init(&p);
		p.max_new_tokens = 1200;
		s->rc = kvp_client_generate(k, &pr, &p, on_tok, s, &s->usage);
	}
	s->started = 1;
	kvp_client_close(k);
	return NULL;
}

/* One hostile frame (or frame sequence) and the ERROR the daemon must answer. */
struct bad_frame {
	const char *name;
	bool hello_first; /* a valid HELLO goes first */
	bool shut_wr;	  /* we end our side after it: the frame is truncated */
	uint32_t status;  /* the ERROR's status */
	uint64_t req_id;  /* the ERROR's req_id; 0: about the connection, which closes */
	uint8_t *buf;
	size_t len;
};

#define BAD_BUF (24 + sizeof(struct kvp_generate) + 4 * (MAX_PROMPT + 1))

/* Header + @n payload bytes from @p; @len_field is what the header claims. */
static size_t frame(uint8_t *b, uint32_t magic, uint16_t version, uint16_t type, uint32_t flags,
		    uint32_t len_field, uint64_t req_id, const void *p, size_t n)
{
	struct kvp_frame_hdr h = { .magic = magic,
				   .version = version,
				   .type = type,
				   .flags = flags,
				   .len_bytes = len_field,
				   .req_id = req_id };

	memcpy(b, &h, sizeof(h));
	if (n)
		memcpy(b + sizeof(h), p, n);
	return sizeof(h) + n;
}

static void send_hello(int fd)
{
	uint8_t b[24 + sizeof(struct kvp_hello)];
	struct kvp_hello h = { .flags = 0 };

	send_all(fd, b,
		 frame(b, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_HELLO, 0, sizeof(h), 0, &h,
		       sizeof(h)));
}

/* A GENERATE of @g and @body_len bytes of @body, its length field telling the truth. */
static size_t gen_frame(uint8_t *b, uint64_t req_id, const struct kvp_generate *g, const void *body,
			size_t body_len)
{
	size_t n = frame(b, KVP_WIRE_MAGIC, KVP_WIRE_VERSION, KVP_FRAME_GENERATE, 0,
			 (uint32_t)(sizeof(*g) + body_len), req_id, g, sizeof(*g));

	if (body_len)
		memcpy(b + n, body, body_len);
	return n + body_len;
}

static struct kvp_generate gen(uint32_t n_tokens, uint32_t max_new)
{
	return (struct kvp_generate){ .n_tokens = n_tokens,
				      .max_new_tokens = max_new,
				      .top_p = 1.0f };
}

/* After a request-level ERROR the connection still serves: a 2-token request completes. */
static void expect_still_serving(int fd, uint64_t req_id)
{
	static const int32_t ok[4] = { 5, 6, 7, 8 };
	struct kvp_generate g = gen(4, 2);
	struct kvp_frame_hdr h;
	struct kvp_usage u;
	uint8_t b[256];

	send_all(fd, b, gen_frame(b, req_id, &g, ok, sizeof(ok)));
	do {
		assert_true(read_frame(fd, &h, &u, sizeof(u)));
		assert_int_equal(h.req_id, req_id);
		assert_int_not_equal(h.type, KVP_FRAME_ERROR);
	} while (h.type != KVP_FRAME_DONE);
	assert_int_equal(u.generated_tokens, 2);
}

static void test_malformed_frames(void **state)
{
	struct fixture *f = *state;
	struct streamer *s = calloc(1, sizeof(*s));
	static struct bad_frame cases[48];
	static const int32_t toks[9] = { 5, 6, 7, 8, 9, 10, 11, 12, 13 };
	struct kvp_hello hello = { 0 };
	struct kvp_generate g;
	int32_t *many = calloc(MAX_PROMPT + 1, sizeof(int32_t));
	char *text = calloc(1, MAX_PROMPT + 1);
	int32_t want[1200];
	uint32_t n_want = 0, n = 0, n_conn_errors = 0;
	double proto_before;
	struct jsonq *j;
	pthread_t th;
	struct bad_frame *b;

	assert_non_null(s);
	assert_non_null(many);
	assert_non_null(text);
	for (int i = 0; i <= MAX_PROMPT; i++)
		many[i] = 5;
	memset(text, 'a', MAX_PROMPT);
#define CASE(nm, hf, st, id) \
	(cases[n] = (struct bad_frame){ .name = nm, \
					.hello_first = hf, \
					.status = st, \
					.req_id = id, \
					.buf = calloc(1, BAD_BUF) }, \
	 assert_non_null(cases[n].buf), &cases[n++])
#define HDR(t, fl, ln, id) KVP_WIRE_MAGIC, KVP_WIRE_VERSION, t, fl, ln, id

	/* ---- the frame is malformed: ERROR with req_id 0, then the connection closes ---- */
	b = CASE("bad magic", false, KVP_E_PROTO, 0);
	b->len = frame(b->buf, 0xdeadbeef, 1, KVP_FRAME_HELLO, 0, 40, 0, &hello, 40);
	b = CASE("unsupported version", false, KVP_E_VERSION, 0);
	b->len = frame(b->buf, KVP_WIRE_MAGIC, 99, KVP_FRAME_HELLO, 0, 40, 0, &hello, 40);
	b = CASE("unknown type", true, KVP_E_PROTO, 0);
	b->len = frame(b->buf, HDR(77, 0, 0, 1), NULL, 0);
	b = CASE("a type only the daemon sends", true, KVP_E_PROTO, 0);
	b->len = frame(b->buf, HDR(KVP_FRAME_TOKEN, 0, 0, 1), NULL, 0);
	b = CASE("header flags", true, KVP_E_PROTO, 0);
	b->len = frame(b->buf, HDR(KVP_FRAME_CANCEL, 1, 0, 1), NULL, 0);
	b = CASE("length beyond the frame maximum", true, KVP_E_LIMIT, 0);
	b->len = frame(b->buf, HDR(KVP_FRAME_GENERATE, 0, MAX_FRAME + 1, 1), NULL, 0);
	b = CASE("length beyond any frame", true, KVP_E_LIMIT, 0);
	b->len = frame(b->buf, HDR(KVP_FRAME_GENERATE, 0, UINT32_MAX, 1), NULL, 0);
	b = CASE("HELLO of a length its type does not allow", false, KVP_E_PROTO, 0);
	b->len = frame(b->buf, HDR(KVP_FRAME_HELLO, 0, 8, 0), &hello, 8);
	b = CASE("HELLO reserved field", false, KVP_E_PROTO, 0);
	hello.reserved = 1;
	b->len = frame(b->buf, HDR(KVP_FRAME_HELLO, 0, 40, 0), &hello, 40);
	hello.reserved = 0;
	b = CASE("HELLO unknown flags", false, KVP_E_PROTO, 0);
	hello.flags = 0x80;
	b->len = frame(b->buf, HDR(KVP_FRAME_HELLO, 0, 40, 0), &hello, 40);
	hello.flags = 0;
	b = CASE("HELLO with a req_id", false, KVP_E_PROTO, 0);
	b->len = frame(b->buf, HDR(KVP_FRAME_HELLO, 0, 40, 3), &hello, 40);
	b = CASE("second HELLO", true, KVP_E_PROTO, 0);
	b->len = frame(b->buf, HDR(KVP_FRAME_HELLO, 0, 40, 0), &hello, 40);
	b = CASE("GENERATE before HELLO", false, KVP_E_PROTO, 0);
	g = gen(8, 4);
	b->len = gen_frame(b->buf, 1, &g, toks, 32);
	b = CASE("GENERATE with req_id 0", true, KVP_E_PROTO, 0);
	b->len = gen_frame(b->buf, 0, &g, toks, 32);
	b = CASE("GENERATE shorter than its struct", true, KVP_E_PROTO, 0);
	b->len = frame(b->buf, HDR(KVP_FRAME_GENERATE, 0, 50, 1), &g, 50);
	b = CASE("n_tokens beyond the frame", true, KVP_E_PROTO, 0);
	g = gen(100, 4);
	b->len = gen_frame(b->buf, 1, &g, toks, 32);
	b = CASE("bytes after the prompt", true, KVP_E_PROTO, 0);
	g = gen(8, 4);
	b->len = gen_frame(b->buf, 1, &g, toks, 36);
	b = CASE("both tokens and text", true, KVP_E_PROTO, 0);
	g = gen(8, 4);
	g.flags = KVP_GEN_TEXT;
	g.text_bytes = 32;
	b->len = gen_frame(b->buf, 1, &g, toks, 32);
	b = CASE("neither tokens nor text", true, KVP_E_PROTO, 0);
	g = gen(0, 4);
	b->len = gen_frame(b->buf, 1, &g, NULL, 0);
	b = CASE("unknown GENERATE flags", true, KVP_E_PROTO, 0);
	g = gen(8, 4);
	g.flags = 0x80;
	b->len = gen_frame(b->buf, 1, &g, toks, 32);
	b = CASE("salt longer than 64 bytes", true, KVP_E_PROTO, 0);
	g = gen(8, 4);
	g.salt_len = 65;
	b->len = gen_frame(b->buf, 1, &g, toks, 32);
	b = CASE("salt padding not zero", true, KVP_E_PROTO, 0);
	g = gen(8, 4);
	g.salt_len = 2;
	g.salt[10] = 1;
	b->len = gen_frame(b->buf, 1, &g, toks, 32);
	b = CASE("more prompt tokens than the limit", true, KVP_E_LIMIT, 0);
	g = gen(MAX_PROMPT + 1, 4);
	b->len = gen_frame(b->buf, 1, &g, many, 4 * (MAX_PROMPT + 1));
	b = CASE("max_new_tokens above the limit", true, KVP_E_LIMIT, 0);
	g = gen(8, MAX_NEW + 1);
	b->len = gen_frame(b->buf, 1, &g, toks, 32);
	b = CASE("CANCEL with a payload", true, KVP_E_PROTO, 0);
	b->len = frame(b->buf, HDR(KVP_FRAME_CANCEL, 0, 4, 1), toks, 4);
	b = CASE("truncated header", false, KVP_E_PROTO, 0);
	b->len = frame(b->buf, HDR(KVP_FRAME_HELLO, 0, 40, 0), &hello, 40) - 54;
	b->shut_wr = true;
	b = CASE("truncated payload", true, KVP_E_PROTO, 0);
	g = gen(8, 4);
	b->len = gen_frame(b->buf, 1, &g, toks, 32) - 20;
	b->shut_wr = true;
	n_conn_errors = n;

	/* ---- well-formed but refused: ERROR for that req_id, the connection stays ---- */
	b = CASE("token id past the vocabulary", true, KVP_E_INVALID, 7);
	g = gen(8, 4);
	b->len = gen_frame(b->buf, 7, &g, (int32_t[8]){ 5, 6, 7, 100000, 9, 10, 11, 12 }, 32);
	b = CASE("negative token id", true, KVP_E_INVALID, 7);
	b->len = gen_frame(b->buf, 7, &g, (int32_t[8]){ 5, 6, 7, -1, 9, 10, 11, 12 }, 32);
	b = CASE("max_new_tokens 0", true, KVP_E_INVALID, 7);
	g = gen(8, 0);
	b->len = gen_frame(b->buf, 7, &g, toks, 32);
	b = CASE("temperature NaN", true, KVP_E_INVALID, 7);
	g = gen(8, 4);
	g.temperature = NAN;
	b->len = gen_frame(b->buf, 7, &g, toks, 32);
	b = CASE("temperature above 100", true, KVP_E_INVALID, 7);
	g.temperature = 101.0f;
	b->len = gen_frame(b->buf, 7, &g, toks, 32);
	b = CASE("negative temperature", true, KVP_E_INVALID, 7);
	g.temperature = -0.5f;
	b->len = gen_frame(b->buf, 7, &g, toks, 32);
	b = CASE("top_p 0", true, KVP_E_INVALID, 7);
	g = gen(8, 4);
	g.top_p = 0.0f;
	b->len = gen_frame(b->buf, 7, &g, toks, 32);
	b = CASE("top_p above 1", true, KVP_E_INVALID, 7);
	g.top_p = 1.5f;
	b->len = gen_frame(b->buf, 7, &g, toks, 32);
	b = CASE("text with a NUL byte", true, KVP_E_INVALID, 7);
	g = gen(0, 4);
	g.flags = KVP_GEN_TEXT;
	g.text_bytes = 5;
	b->len = gen_frame(b->buf, 7, &g, "ab\0cd", 5);
	b = CASE("text that tokenizes beyond the prompt limit", true, KVP_E_LIMIT, 7);
	g.text_bytes = MAX_PROMPT; /* BOS + one id per byte */
	b->len = gen_frame(b->buf, 7, &g, text, MAX_PROMPT);
	b = CASE("prompt + new tokens beyond the whole pool", true, KVP_E_NOSPACE, 7);
	g = gen(MAX_PROMPT, MAX_NEW);
	b->len = gen_frame(b->buf, 7, &g, many, 4 * MAX_PROMPT);
	b = CASE("req_id of a request in flight", true, KVP_E_INVALID, 9);
	/* the original and its duplicate in one write: the first is surely in flight */
	g = gen(8, 64);
	b->len = gen_frame(b->buf, 9, &g, toks, 32);
	g = gen(8, 4);
	b->len += gen_frame(b->buf + b->len, 9, &g, toks, 32);
#undef HDR
#undef CASE

	s->sock = f->d.sock;
	for (int i = 0; i < 300; i++)
		s->prompt[i] = 3 + (i * 37) % 256;
	assert_int_equal(kvpd_offline(f->d.model, s->prompt, 300, 1200, true, want, &n_want), 0);
	j = kvpd_status(&f->d);
	assert_non_null(j);
	proto_before = jsonq_num(j, "connections.protocol_errors", -1);
	jsonq_free(j);
	assert_int_equal(pthread_create(&th, NULL, streamer_main, s), 0);
	while (!s->started)
		usleep(1000);

	for (uint32_t i = 0; i < n; i++) {
		int fd = raw_connect(f->d.sock);

		print_message("  %s\n", cases[i].name);
		if (cases[i].hello_first)
			send_hello(fd);
		send_all(fd, cases[i].buf, cases[i].len);
		if (cases[i].shut_wr)
			shutdown(fd, SHUT_WR);
		expect_error(fd, cases[i].status, cases[i].req_id);
		if (!cases[i].req_id) {
			expect_eof(fd);
		} else {
			if (cases[i].req_id == 9) {
				/* the request in flight under that id still ends normally */
				struct kvp_frame_hdr h;
				struct kvp_usage u;

				do {
					assert_true(read_frame(fd, &h, &u, sizeof(u)));
					assert_int_equal(h.req_id, 9);
					assert_int_not_equal(h.type, KVP_FRAME_ERROR);
				} while (h.type != KVP_FRAME_DONE);
				assert_int_equal(u.generated_tokens, 64);
			}
			expect_still_serving(fd, 8);
		}
		close(fd);
		free(cases[i].buf);
	}

	/* the concurrent stream was not disturbed */
	pthread_join(th, NULL);
	assert_int_equal(s->rc, 0);
	assert_int_equal(s->n_got, n_want);
	assert_memory_equal(s->got, want, n_want * sizeof(int32_t));
	/* every frame-level fault was counted, and only those */
	j = kvpd_status(&f->d);
	assert_non_null(j);
	assert_int_equal(jsonq_num(j, "connections.protocol_errors", -1) - proto_before,
			 n_conn_errors);
	jsonq_free(j);
	free(text);
	free(many);
	free(s);
}

/* Requests the engine has ended, however (done, cancelled, failed), in @j. */
static double ended(const struct jsonq *j)
{
	return jsonq_num(j, "scheduler.requests_done", 0) +
	       jsonq_num(j, "scheduler.requests_cancelled", 0) +
	       jsonq_num(j, "scheduler.requests_failed", 0);
}

/*
 * Poll the status until no sequence runs and the engine has ended at least @n_ended
 * requests, then return it.  The count matters: a client can see its first token (sent
 * during the step) and be gone, its connection closed by the loop, before the engine
 * publishes that step's counters; the snapshot still showing the step before, with
 * nothing running, is not the idle after the request.  (A deadline, not a bound.)
 */
static struct jsonq *status_when_idle(struct kvpd *d, double n_ended)
{
	double t_end = kvp_test_now_s() + 20;

	while (kvp_test_now_s() < t_end) {
		struct jsonq *j = kvpd_status(d);

		if (j && jsonq_num(j, "scheduler.running", -1) == 0 &&
		    jsonq_num(j, "scheduler.queued", -1) == 0 &&
		    jsonq_num(j, "connections.open", -1) == 0 && ended(j) >= n_ended)
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
		if (kvp_client_connect(&k, f->d.sock))
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

	base = status_when_idle(&f->d, 0);
	assert_non_null(base);

	/* no-cache request: every pool counter returns to exactly its baseline */
	kill_mid_stream(f, true, 200);
	after = status_when_idle(&f->d, ended(base) + 1);
	assert_non_null(after);
	assert_int_equal(jsonq_num(after, "pool.blocks_used", -1), 0);
	assert_int_equal(jsonq_delta(after, base, "pool.blocks_free"), 0);
	assert_int_equal(jsonq_delta(after, base, "pool.blocks_cached"), 0);
	assert_int_equal(jsonq_delta(after, base, "scheduler.requests_cancelled"), 1);
	jsonq_free(after);

	/* cached request: its 12 full prompt blocks stay cached, nothing stays used */
	kill_mid_stream(f, false, 200);
	after = status_when_idle(&f->d, ended(base) + 2);
	assert_non_null(after);
	assert_int_equal(jsonq_num(after, "pool.blocks_used", -1), 0);
	assert_int_equal(jsonq_delta(after, base, "pool.blocks_cached"), 200 / 16);
	assert_int_equal(jsonq_num(after, "pool.blocks_free", -1) +
				 jsonq_num(after, "pool.blocks_cached", -1),
			 jsonq_num(after, "pool.blocks_total", -2));
	jsonq_free(after);
	jsonq_free(base);
}

static void test_client_name_in_log_and_status(void **state)
{
	/* libkvpool's HELLO says "<program>/<pid>"; the daemon logs it and lists it */
	struct fixture *f = *state;
	struct kvp_client *k = NULL;
	const struct jsonq *e;
	struct jsonq *j;
	char want[64], line[80];
	int found = 0;

	snprintf(want, sizeof(want), "itest-robust/%d", (int)getpid());
	snprintf(line, sizeof(line), "client \"%s\"", want);
	assert_int_equal(kvp_client_connect(&k, f->d.sock), 0);
	assert_true(kvpd_log_has(&f->d, line));
	j = kvpd_status(&f->d);
	assert_non_null(j);
	e = jsonq_get(j, "connections.list");
	assert_non_null(e);
	for (e = e->child; e; e = e->next) {
		if (jsonq_num(e, "pid", -1) != getpid())
			continue;
		assert_string_equal(jsonq_str(e, "client"), want);
		found++;
	}
	assert_int_equal(found, 1);
	jsonq_free(j);
	kvp_client_close(k);
}

static void test_cancel_flood_reaches_engine_once(void **state)
{
	/* 500 CANCELs of one running request: one reaches the engine, the request ends once */
	struct fixture *f = *state;
	struct kvp_client *k = NULL;
	struct kvp_client_params p;
	struct kvp_client_event ev;
	int32_t prompt[32];
	struct kvp_client_prompt pr = { .tokens = prompt, .n_tokens = 32 };
	struct jsonq *before, *after;
	uint64_t id;
	int ends = 0;

	for (int i = 0; i < 32; i++)
		prompt[i] = 3 + (int32_t)((i * 29) % 256);
	before = status_when_idle(&f->d, 0);
	assert_non_null(before);
	assert_int_equal(kvp_client_connect(&k, f->d.sock), 0);
	kvp_client_params_init(&p);
	p.max_new_tokens = 8000; /* --ignore-eos: runs until cancelled */
	assert_int_equal(kvp_client_submit(k, &pr, &p, &id), 0);
	assert_int_equal(kvp_client_next(k, &ev), 0);
	assert_int_equal(ev.type, KVP_EVENT_TOKEN);
	for (int i = 0; i < 500; i++)
		assert_int_equal(kvp_client_cancel(k, id), 0);
	/* exactly one end: DONE with usage.status CANCELLED; nothing after it */
	while (!ends) {
		assert_int_equal(kvp_client_next(k, &ev), 0);
		assert_int_equal(ev.req_id, id);
		if (ev.type == KVP_EVENT_DONE) {
			assert_int_equal(ev.status, KVP_E_CANCELLED);
			ends++;
		}
		assert_int_not_equal(ev.type, KVP_EVENT_ERROR);
	}
	kvp_client_close(k);
	after = status_when_idle(&f->d, ended(before) + 1);
	assert_non_null(after);
	assert_int_equal(jsonq_delta(after, before, "scheduler.cancels_received"), 1);
	assert_int_equal(jsonq_delta(after, before, "scheduler.requests_cancelled"), 1);
	jsonq_free(after);
	jsonq_free(before);
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

	assert_int_equal(kvp_client_connect(&k, f->d.sock), 0);
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
		signal(SIGSEGV, SIG_DFL); /* cmocka's handler would catch it */
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
		cmocka_unit_test(test_client_name_in_log_and_status),
		cmocka_unit_test(test_cancel_flood_reaches_engine_once),
	};

	return cmocka_run_group_tests(tests, setup, kvpd_teardown);
}
