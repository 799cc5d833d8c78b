/* SPDX-License-Identifier: MIT */
/*
 * test_http_slow.c - slow and many clients at kvpool-http: a slow-header flood of ten
 * times max_conns from many addresses while a good client asks for /health, the header
 * and body deadlines (counted while bytes keep coming, unlike the idle timeout), an idle
 * keep-alive connection closed at the header deadline, per_addr_conns, and max_conns
 * making room by closing the connection waiting longest for its head.  Only orders and
 * generous bounds are asserted (served or not, closed before a bound or not), never
 * latencies: bench_http prints those.
 */
#include <assert.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/integration/httpc.h"
#include "tests/integration/httpd.h"
#include "tests/integration/kvpd.h"
#include "tests/integration/rawc.h"
#include "tests/lib/testlib.h"

#define MAX_CONNS 16
#define PER_ADDR 4
#define HEADER_S 3
#define BODY_S 3
#define SLACK_S 8 /* generous: a deadline is met within this after it passes */

struct fixture {
	struct kvpd d; /* first: kvpd_teardown() frees the fixture through it */
	struct httpd h;
	char conf[320];
};
static_assert(offsetof(struct fixture, d) == 0, "kvpd_teardown");

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	const char *dargs[] = { "--ignore-eos", "--pool-size", "64M", NULL };
	const char *args[] = { "--config", f ? f->conf : "", "--listen", "127.0.0.1:0", NULL };
	struct rlimit rl;

	if (!getrlimit(RLIMIT_NOFILE, &rl)) { /* the flood's sockets */
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (!f || kvpd_setup(&f->d, "tinyq", dargs) < 0) {
		free(f);
		return -1;
	}
	snprintf(f->conf, sizeof(f->conf), "%s/http.conf", f->d.dir);
	/* the idle timeout is long: what closes the slow clients here is a deadline */
	if (httpd_start_conf(&f->h, f->d.dir, f->d.sock, f->conf, args,
			     "[http]\nmax_conns = %d\nper_addr_conns = %d\nidle_timeout_s = 60\n"
			     "header_timeout_s = %d\nbody_timeout_s = %d\nthreads = 2\n",
			     MAX_CONNS, PER_ADDR, HEADER_S, BODY_S) < 0) {
		kvpd_cleanup(&f->d);
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	int r = httpd_stop_clean(&f->h);
	int t = kvpd_teardown(state);

	return r ? -1 : t;
}

/* GET /health on @port from 127.0.0.1 with a bounded wait.  Return: the status, 0 when none. */
static int good_client_at(int port)
{
	struct httpc c;
	struct httpc_resp r = { 0 }; /* freed below even when no answer came */
	int st = 0;

	if (httpc_open(&c, port, 10))
		return 0;
	if (!httpc_send_request(&c, "GET", "/health", NULL, NULL, 0) &&
	    !httpc_read(&c, &r, NULL, NULL))
		st = r.status;
	httpc_resp_free(&r);
	httpc_close(&c);
	return st;
}

static int good_client(struct fixture *f)
{
	return good_client_at(f->h.port);
}

/* Whether the server closed @fd (EOF or reset) by now; never blocks. */
static bool gone(int fd)
{
	char b[4096];
	ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);

	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

struct slowc {
	int fd;
	double t_open, t_closed; /* t_closed 0: still open */
	int lines;
};

/* One more header line on each open slow client; note the ones the server closed. */
static void trickle(struct slowc *s, int n, double now)
{
	for (int i = 0; i < n; i++) {
		char line[64];
		int len;

		if (s[i].t_closed)
			continue;
		len = snprintf(line, sizeof(line), "X-Slow-%d: %d\r\n", s[i].lines++, i);
		if (gone(s[i].fd) ||
		    send(s[i].fd, line, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
			s[i].t_closed = now;
	}
}

static void test_slow_header_flood(void **state)
{
	struct fixture *f = *state;
	enum { N = 10 * MAX_CONNS };
	static const char start[] = "GET /health HTTP/1.1\r\nHost: a\r\n";
	struct slowc s[N];
	double t0 = kvp_test_now_s(), end;
	int served = 0;

	/* ten times max_conns slow-header clients, PER_ADDR from each of N / PER_ADDR
	 * addresses, each sending one header line every 0.3 s: a good client is served
	 * during the flood, and every slow client is closed by the header deadline */
	for (int i = 0; i < N; i++) {
		char src[32];

		snprintf(src, sizeof(src), "127.0.1.%d", 1 + i / PER_ADDR);
		s[i].fd = rawc_connect(f->h.port, src, true);
		assert_true(s[i].fd >= 0);
		s[i].t_open = kvp_test_now_s();
		s[i].t_closed = 0;
		s[i].lines = 0;
		send(s[i].fd, start, strlen(start), MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	end = t0 + HEADER_S + SLACK_S;
	for (int round = 0; kvp_test_now_s() < end; round++) {
		int open = 0;

		trickle(s, N, kvp_test_now_s());
		for (int i = 0; i < N; i++)
			open += !s[i].t_closed;
		if (round < 3 && good_client(f) == 200)
			served++; /* asked while the flood is on (its first second) */
		if (!open)
			break;
		usleep(300000);
	}
	assert_int_equal(served, 3);
	for (int i = 0; i < N; i++) {
		if (!s[i].t_closed)
			fail_msg("slow client %d still open %.1f s after it connected", i,
				 kvp_test_now_s() - s[i].t_open);
		close(s[i].fd);
	}
	assert_int_equal(good_client(f), 200);
}

static void test_header_deadline(void **state)
{
	struct fixture *f = *state;
	static const char start[] = "POST /v1/completions HTTP/1.1\r\nHost: a\r\n";
	static const char good[] = "GET /health HTTP/1.1\r\nHost: a\r\n\r\n";
	struct slowc s = { .fd = rawc_connect(f->h.port, NULL, true) };
	double end;
	int fd;

	/* one slow sender, well inside the idle timeout between its lines: closed at the
	 * header deadline all the same */
	assert_true(s.fd >= 0);
	send(s.fd, start, strlen(start), MSG_NOSIGNAL);
	s.t_open = kvp_test_now_s();
	end = s.t_open + HEADER_S + SLACK_S;
	while (!s.t_closed && kvp_test_now_s() < end) {
		trickle(&s, 1, kvp_test_now_s());
		usleep(200000);
	}
	assert_true(s.t_closed > 0);
	close(s.fd);

	/* a keep-alive connection after its answer waits for its next head at most that
	 * long too (libmicrohttpd holds it then: the deadline reaches it there) */
	fd = rawc_connect(f->h.port, NULL, false);
	assert_true(fd >= 0);
	assert_int_equal(rawc_send(fd, good, strlen(good)), 0);
	assert_true(rawc_closed_within(fd, HEADER_S + SLACK_S));
	close(fd);

	/* and a second request's head, sent slowly on such a connection */
	fd = rawc_connect(f->h.port, NULL, true);
	assert_true(fd >= 0);
	s = (struct slowc){ .fd = fd, .t_open = kvp_test_now_s() };
	assert_int_equal(rawc_send(fd, good, strlen(good)), 0);
	usleep(200000);
	send(fd, start, strlen(start), MSG_NOSIGNAL);
	end = s.t_open + HEADER_S + SLACK_S;
	while (!s.t_closed && kvp_test_now_s() < end) {
		trickle(&s, 1, kvp_test_now_s());
		usleep(200000);
	}
	assert_true(s.t_closed > 0);
	close(fd);
}

static void test_body_deadline(void **state)
{
	struct fixture *f = *state;
	static const char head[] = "POST /v1/completions HTTP/1.1\r\nHost: a\r\n"
				   "Content-Type: application/json\r\nContent-Length: 200\r\n\r\n";
	int fd = rawc_connect(f->h.port, NULL, true);
	double t0 = kvp_test_now_s();
	bool closed = false;

	/* a body sent a byte every 0.2 s (200 bytes: 40 s) is closed at the body deadline */
	assert_true(fd >= 0);
	send(fd, head, strlen(head), MSG_NOSIGNAL);
	while (!closed && kvp_test_now_s() < t0 + BODY_S + SLACK_S) {
		closed = gone(fd) || send(fd, " ", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0;
		usleep(200000);
	}
	assert_true(closed);
	close(fd);
	assert_int_equal(good_client(f), 200);
}

static void test_per_addr_cap(void **state)
{
	struct fixture *f = *state;
	static const char good[] = "GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
	int fd[PER_ADDR], extra, other;
	char text[4096];
	bool closed;

	/* per_addr_conns from one address are held; one more from it is closed at once
	 * while they stay open; another address is served */
	for (int i = 0; i < PER_ADDR; i++) {
		fd[i] = rawc_connect(f->h.port, "127.0.2.1", true);
		assert_true(fd[i] >= 0);
	}
	extra = rawc_connect(f->h.port, "127.0.2.1", false);
	assert_true(extra >= 0);
	assert_true(rawc_closed_within(extra, 1.5));
	close(extra);
	for (int i = 0; i < PER_ADDR; i++)
		assert_false(gone(fd[i]));
	other = rawc_connect(f->h.port, "127.0.2.2", false);
	assert_true(other >= 0);
	assert_int_equal(rawc_send(other, good, strlen(good)), 0);
	rawc_read_all(other, text, sizeof(text), 10, &closed);
	assert_int_equal(rawc_first_status(text), 200);
	close(other);
	/* one of the four gone: its address may open another */
	close(fd[0]);
	usleep(300000);
	fd[0] = rawc_connect(f->h.port, "127.0.2.1", false);
	assert_true(fd[0] >= 0);
	assert_int_equal(rawc_send(fd[0], good, strlen(good)), 0);
	rawc_read_all(fd[0], text, sizeof(text), 10, &closed);
	assert_int_equal(rawc_first_status(text), 200);
	for (int i = 0; i < PER_ADDR; i++)
		close(fd[i]);
}

static void test_max_conns_makes_room(void **state)
{
	struct fixture *f = *state;
	int fd[MAX_CONNS];

	/* max_conns silent connections: a new one with a request takes the place of the
	 * one that waited longest (the first), and is served; the last ones stay */
	for (int i = 0; i < MAX_CONNS; i++) {
		char src[32];

		snprintf(src, sizeof(src), "127.0.3.%d", 1 + i / PER_ADDR);
		fd[i] = rawc_connect(f->h.port, src, true);
		assert_true(fd[i] >= 0);
		usleep(10000); /* an order the server sees */
	}
	usleep(200000);
	assert_int_equal(good_client(f), 200);
	assert_true(rawc_closed_within(fd[0], 1.5));
	assert_false(gone(fd[MAX_CONNS - 1]));
	for (int i = 0; i < MAX_CONNS; i++)
		close(fd[i]);
}

/* Whether "HTTP/1.1 100 Continue" arrived on @fd within @timeout_s. */
static bool got_continue(int fd, double timeout_s)
{
	char b[256];
	size_t n = 0;
	double end = kvp_test_now_s() + timeout_s;

	while (n < sizeof(b) - 1 && kvp_test_now_s() < end) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t k;

		if (poll(&p, 1, 100) <= 0)
			continue;
		k = recv(fd, b + n, sizeof(b) - 1 - n, 0);
		if (k <= 0)
			return false;
		n += (size_t)k;
		b[n] = 0;
		if (strstr(b, " 100 "))
			return true;
	}
	return false;
}

static void test_max_conns_all_busy(void **state)
{
	struct fixture *f = *state;
	enum { BUSY = 4 };
	static const char head[] = "POST /v1/completions HTTP/1.1\r\nHost: a\r\n"
				   "Content-Type: application/json\r\nContent-Length: 200\r\n"
				   "Expect: 100-continue\r\n\r\n";
	const char *args[] = { "--config", NULL, "--listen", "127.0.0.1:0", NULL };
	struct httpd h2 = { 0 };
	char conf[340];
	int fd[BUSY], extra;

	/* A front of its own whose deadlines (60 s) cannot close the busy ones while the
	 * test runs, however loaded the machine: max_conns connections each inside a
	 * request body, so none waits for a head; one more is closed at once (docs/http.md:
	 * "when every connection is busy with a request, a new one is closed at once"),
	 * the busy ones stay, and once they are gone the front serves again */
	snprintf(conf, sizeof(conf), "%s/http-busy.conf", f->d.dir);
	args[1] = conf;
	assert_int_equal(httpd_start_conf(&h2, f->d.dir, f->d.sock, conf, args,
					  "[http]\nmax_conns = %d\nper_addr_conns = 64\n"
					  "idle_timeout_s = 60\nheader_timeout_s = 60\n"
					  "body_timeout_s = 60\nthreads = 2\n",
					  BUSY),
			 0);
	for (int i = 0; i < BUSY; i++) {
		fd[i] = rawc_connect(h2.port, NULL, false);
		assert_true(fd[i] >= 0);
		assert_int_equal(rawc_send(fd[i], head, strlen(head)), 0);
		/* "100 Continue" back: the head was read, the connection is in its body */
		assert_true(got_continue(fd[i], 30));
	}
	extra = rawc_connect(h2.port, "127.0.4.1", false);
	assert_true(extra >= 0);
	assert_true(rawc_closed_within(extra, 10));
	close(extra);
	for (int i = 0; i < BUSY; i++) {
		assert_false(gone(fd[i]));
		close(fd[i]);
	}
	/* slots freed: a good client is served by this front again */
	for (int tries = 0; good_client_at(h2.port) != 200; tries++) {
		assert_true(tries < 50); /* the closes are seen within 5 s */
		usleep(100000);
	}
	assert_int_equal(httpd_stop_clean(&h2), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slow_header_flood),
		cmocka_unit_test(test_header_deadline),
		cmocka_unit_test(test_body_deadline),
		cmocka_unit_test(test_per_addr_cap),
		cmocka_unit_test(test_max_conns_makes_room),
		cmocka_unit_test(test_max_conns_all_busy),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
