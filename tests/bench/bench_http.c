/* SPDX-License-Identifier: MIT */
/*
 * bench_http.c - kvpool-http against the Unix socket it fronts, each figure next to its
 * baseline measured in the same run:
 *
 *  1. the same greedy requests (512-token prompt, 128 new tokens, demo model, cold: a
 *     fresh cache salt per request) streamed through kvpool-http (POST /v1/completions,
 *     stream, token ids) and sent straight through libkvpool, alternating: time to first
 *     token (target: HTTP within 1.1x of direct) and decode tokens/s after it (target:
 *     within 0.95x); and the whole non-streamed request;
 *  2. requests/s of tiny requests (4-token prompt, 1 new token, tiny model, not
 *     streamed) with 1, 8 and 64 concurrent HTTP clients, each a thread with its own
 *     keep-alive connection (a C load generator: tests/integration/httpc.c), against as
 *     many libkvpool clients doing the same straight to kvpoold;
 *  3. a slow-header flood: a good client's latency (a fresh connection, one tiny
 *     completion, the answer) while 10 x max_conns connections from 40 addresses each
 *     send a header line a second and reconnect when closed, against the same client's
 *     latency with no flood, the two taking turns four times (target: within 2x).
 *
 * KVP_BENCH_HTTP=rps, =stream or =flood runs one part only.
 *
 * Times are the client's: request written to first token (first SSE bytes, which the
 * front sends with the first token) and to the end.  Medians; the CPU regime is printed
 * before and after (on a shared machine, compare ratios of one run, not figures across runs).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvpool/kvpool.h"
#include "tests/integration/httpc.h"
#include "tests/integration/httpd.h"
#include "tests/integration/kvpd.h"
#include "tests/integration/rawc.h"
#include "tests/lib/testlib.h"

#define PROMPT 512
#define NEW 128
#define RUNS 7
#define RPS_SECONDS 3.0

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static int32_t rnd_tok(void)
{
	return 3 + (int32_t)(kvp_test_xorshift(&rng) % 256);
}

struct timing {
	double ttft_ms;
	double tok_s; /* decode rate after the first token */
	double total_ms;
	uint32_t generated;
};

/* ---- direct ---- */

struct direct_tm {
	double t_first, t_last;
};

static int on_direct(void *arg, const int32_t *t, uint32_t n, const char *text, uint32_t tl)
{
	struct direct_tm *tm = arg;

	if (!tm->t_first)
		tm->t_first = kvp_test_now_s();
	tm->t_last = kvp_test_now_s();
	return 0;
}

static int direct(struct kvp_client *k, const int32_t *prompt, uint32_t n, uint32_t max_new,
		  const char *salt, struct timing *out)
{
	struct kvp_client_prompt pr = { .tokens = prompt, .n_tokens = n };
	struct kvp_client_params p;
	struct direct_tm tm = { 0 };
	struct kvp_usage u;
	double t0, t_end;
	int r;

	kvp_client_params_init(&p);
	p.max_new_tokens = max_new;
	p.salt = salt;
	p.salt_len = salt ? strlen(salt) : 0;
	t0 = kvp_test_now_s();
	r = kvp_client_generate(k, &pr, &p, on_direct, &tm, &u);
	t_end = kvp_test_now_s();
	if (r) {
		fprintf(stderr, "bench_http: direct: %s\n", kvp_client_errmsg(k));
		return -1;
	}
	out->ttft_ms = (tm.t_first - t0) * 1e3;
	out->total_ms = (t_end - t0) * 1e3;
	out->generated = u.generated_tokens;
	out->tok_s = (u.generated_tokens - 1) / (t_end - tm.t_first);
	return 0;
}

/* ---- through HTTP ---- */

static char *body_for(const int32_t *prompt, uint32_t n, uint32_t max_new, const char *salt,
		      bool stream)
{
	size_t cap = (size_t)n * 12 + 256, off = 0;
	char *b = malloc(cap);

	if (!b)
		return NULL;
	off += (size_t)snprintf(b + off, cap - off, "{\"prompt\":[");
	for (uint32_t i = 0; i < n; i++)
		off += (size_t)snprintf(b + off, cap - off, "%s%d", i ? "," : "", prompt[i]);
	snprintf(b + off, cap - off, "],\"max_tokens\":%u,\"temperature\":0%s%s%s%s}", max_new,
		 salt ? ",\"cache_salt\":\"" : "", salt ? salt : "", salt ? "\"" : "",
		 stream ? ",\"stream\":true,\"return_token_ids\":true,"
			  "\"stream_options\":{\"include_usage\":true}" :
			  "");
	return b;
}

struct http_tm {
	double t_first, t_last;
};

static void on_body(void *arg, const char *p, size_t n)
{
	struct http_tm *tm = arg;

	if (!tm->t_first)
		tm->t_first = kvp_test_now_s();
	tm->t_last = kvp_test_now_s();
}

/* completion_tokens from a body (the usage chunk of a stream, or the JSON answer) */
static uint32_t completion_tokens(const char *body)
{
	const char *p = strstr(body, "\"completion_tokens\":");

	return p ? (uint32_t)strtoul(p + 20, NULL, 10) : 0;
}

/*
 * One request on a connection of its own, opened inside the timed span (a localhost
 * connect is microseconds against a TTFT of many ms): a connection kept between requests
 * sits idle while the direct request runs, longer than kvpool-http's header deadline on
 * the demo model, and the front rightly closes it.
 */
static int http(struct httpc *c, int port, const int32_t *prompt, uint32_t n, uint32_t max_new,
		const char *salt, bool stream, struct timing *out)
{
	char *body = body_for(prompt, n, max_new, salt, stream);
	struct http_tm tm = { 0 };
	struct httpc_resp r = { 0 };
	double t0;
	int e;

	if (!body)
		return -1;
	t0 = kvp_test_now_s();
	e = httpc_open(c, port, 120);
	if (!e)
		e = httpc_send_request(c, "POST", "/v1/completions", NULL, body, strlen(body));
	if (!e)
		e = httpc_read(c, &r, on_body, &tm);
	free(body);
	httpc_close(c);
	if (e || r.status != 200) {
		fprintf(stderr, "bench_http: HTTP: %s, status %d: %s\n", strerror(-e), r.status,
			r.body ? r.body : "");
		httpc_resp_free(&r);
		return -1;
	}
	out->ttft_ms = (tm.t_first - t0) * 1e3;
	out->total_ms = (tm.t_last - t0) * 1e3;
	out->generated = completion_tokens(r.body);
	out->tok_s = (out->generated - 1) / (tm.t_last - tm.t_first);
	httpc_resp_free(&r);
	return 0;
}

static int bench_stream(void)
{
	const char *dargs[] = { "--pool-size", "1G", NULL };
	const char *hargs[] = { "--config", "/dev/null", "--listen", "127.0.0.1:0", NULL };
	double d_ttft[RUNS], h_ttft[RUNS], d_rate[RUNS], h_rate[RUNS], d_total[RUNS], h_total[RUNS];
	static int32_t prompt[PROMPT];
	struct kvp_client *k_cl = NULL;
	struct timing t;
	struct httpd h = { 0 };
	struct httpc c = { .fd = -1 };
	struct kvpd d;
	char salt[64];
	int ret = -1;

	/* the demo model (generated into the daemon's state directory on first start) */
	if (kvpd_init(&d) || kvpd_start(&d, 600, dargs) || kvp_client_connect(&k_cl, d.sock) ||
	    httpd_start(&h, d.dir, d.sock, hargs, 30)) {
		kvpd_dump_log(&d);
		httpd_dump_log(&h);
		goto out;
	}
	for (int i = 0; i < PROMPT; i++)
		prompt[i] = rnd_tok();
	/* warm-up: both paths once (connections, pages) */
	if (direct(k_cl, prompt, 16, 4, "warm-d", &t) ||
	    http(&c, h.port, prompt, 16, 4, "warm-h", true, &t))
		goto out;
	for (int r = 0; r < RUNS; r++) {
		/* a fresh salt per request keeps every prompt cold; who goes first alternates */
		for (int k = 0; k < 2; k++) {
			bool via_http = (k + r) % 2;

			snprintf(salt, sizeof(salt), "%c%d-%llu", via_http ? 'h' : 'd', r,
				 (unsigned long long)kvp_test_now_ns());
			if (via_http ? http(&c, h.port, prompt, PROMPT, NEW, salt, true, &t) :
				       direct(k_cl, prompt, PROMPT, NEW, salt, &t))
				goto out;
			if (t.generated != NEW)
				goto out;
			(via_http ? h_ttft : d_ttft)[r] = t.ttft_ms;
			(via_http ? h_rate : d_rate)[r] = t.tok_s;
		}
		for (int k = 0; k < 2; k++) {
			bool via_http = (k + r) % 2;

			snprintf(salt, sizeof(salt), "%c%d-%llu", via_http ? 'H' : 'D', r,
				 (unsigned long long)kvp_test_now_ns());
			if (via_http ? http(&c, h.port, prompt, PROMPT, NEW, salt, false, &t) :
				       direct(k_cl, prompt, PROMPT, NEW, salt, &t))
				goto out;
			(via_http ? h_total : d_total)[r] = t.total_ms;
		}
	}
	kvp_bench_report("TTFT, 512-token cold prompt, streamed through kvpool-http (demo)",
			 kvp_test_median(h_ttft, RUNS), "ms", "direct libkvpool",
			 kvp_test_median(d_ttft, RUNS), "ms");
	kvp_bench_report("decode rate after the first token, through kvpool-http (demo)",
			 kvp_test_median(h_rate, RUNS), "tok/s", "direct libkvpool",
			 kvp_test_median(d_rate, RUNS), "tok/s");
	kvp_bench_report("whole request, 512 + 128 tokens, not streamed, through kvpool-http",
			 kvp_test_median(h_total, RUNS), "ms", "direct libkvpool",
			 kvp_test_median(d_total, RUNS), "ms");
	ret = 0;
out:
	httpc_close(&c);
	kvp_client_close(k_cl);
	httpd_stop(&h);
	kvpd_cleanup(&d);
	return ret;
}

/* ---- requests/s ---- */

struct rps_arg {
	pthread_t th;
	int port; /* > 0: HTTP; else straight to @sock */
	const char *sock;
	double t_end;
	unsigned int done;
	unsigned int failed;
};

static atomic_int rps_ready;

static void *rps_http(void *p)
{
	struct rps_arg *a = p;
	static const char body[] = "{\"prompt\":[1,72,105,33],\"max_tokens\":1,\"temperature\":0}";
	struct httpc c;

	if (httpc_open(&c, a->port, 60)) {
		a->failed++;
		atomic_fetch_add(&rps_ready, 1);
		return NULL;
	}
	atomic_fetch_add(&rps_ready, 1);
	while (kvp_test_now_s() < a->t_end) {
		struct httpc_resp r;

		if (httpc_send_request(&c, "POST", "/v1/completions", NULL, body,
				       sizeof(body) - 1) ||
		    httpc_read(&c, &r, NULL, NULL)) {
			a->failed++;
			break;
		}
		if (r.status == 200)
			a->done++;
		else
			a->failed++;
		httpc_resp_free(&r);
	}
	httpc_close(&c);
	return NULL;
}

static void *rps_direct(void *p)
{
	struct rps_arg *a = p;
	static const int32_t prompt[] = { 1, 72, 105, 33 };
	struct kvp_client_prompt pr = { .tokens = prompt, .n_tokens = 4 };
	struct kvp_client_params params;
	struct kvp_client *k;

	if (kvp_client_connect(&k, a->sock)) {
		kvp_client_close(k);
		a->failed++;
		atomic_fetch_add(&rps_ready, 1);
		return NULL;
	}
	kvp_client_params_init(&params);
	params.max_new_tokens = 1;
	atomic_fetch_add(&rps_ready, 1);
	while (kvp_test_now_s() < a->t_end) {
		if (kvp_client_generate(k, &pr, &params, NULL, NULL, NULL))
			a->failed++;
		else
			a->done++;
	}
	kvp_client_close(k);
	return NULL;
}

/* @n clients for RPS_SECONDS; requests/s, or -1 when any failed. */
static double rps(int n, int port, const char *sock)
{
	struct rps_arg *a = calloc((size_t)n, sizeof(*a));
	unsigned int done = 0, failed = 0;
	double t0;

	if (!a)
		return -1;
	atomic_store(&rps_ready, 0);
	t0 = kvp_test_now_s() + 0.5; /* every client connected before the clock starts */
	for (int i = 0; i < n; i++) {
		a[i] = (struct rps_arg){ .port = port, .sock = sock, .t_end = t0 + RPS_SECONDS };
		pthread_create(&a[i].th, NULL, port ? rps_http : rps_direct, &a[i]);
	}
	for (int i = 0; i < n; i++) {
		pthread_join(a[i].th, NULL);
		done += a[i].done;
		failed += a[i].failed;
	}
	free(a);
	if (failed)
		fprintf(stderr, "bench_http: %u of %u requests failed\n", failed, done + failed);
	return failed ? -1 : done / (kvp_test_now_s() - t0);
}

static int bench_rps(void)
{
	const char *dargs[] = { "--max-conns", "512", NULL };
	char conf[320];
	const char *hargs[] = { "--config", conf, "--listen", "127.0.0.1:0", NULL };
	static const int clients[] = { 1, 8, 64 };
	struct httpd h = { 0 };
	struct kvpd d;
	FILE *c;
	int ret = -1;

	if (kvpd_setup(&d, "tiny", dargs) < 0)
		return -1;
	/* every client is 127.0.0.1: one round's 64 and the last round's closing ones */
	snprintf(conf, sizeof(conf), "%s/http.conf", d.dir);
	c = fopen(conf, "w");
	if (c) {
		fputs("[http]\nper_addr_conns = 256\n", c);
		fclose(c);
	}
	if (!c || httpd_start(&h, d.dir, d.sock, hargs, 30)) {
		httpd_dump_log(&h);
		goto out;
	}
	for (size_t i = 0; i < sizeof(clients) / sizeof(clients[0]); i++) {
		double base = rps(clients[i], 0, d.sock);
		double via = rps(clients[i], h.port, NULL);
		char name[128];

		if (base < 0 || via < 0)
			goto out;
		snprintf(name, sizeof(name),
			 "requests/s, 4-token prompt + 1 token, %d HTTP clients (tiny)",
			 clients[i]);
		kvp_bench_report(name, via, "req/s", "as many libkvpool clients", base, "req/s");
	}
	ret = 0;
out:
	httpd_stop(&h);
	kvpd_cleanup(&d);
	return ret;
}

/* ---- a slow-header flood ---- */

#define FLOOD_CONNS (10 * 256) /* 10 x the default max_conns */
#define FLOOD_PER_ADDR 64      /* the default per_addr_conns */
#define GOOD_RUNS 200
#define GOOD_CYCLES 4 /* flood off, flood on, four times */

/* The flood runs in a child process: an attacker is not a thread of its victim's client. */
struct flood {
	pid_t pid;
	int port;
	int stop_fd;  /* the child's: EOF when the parent says stop */
	int ready_fd; /* the child's: a byte once every connection opened, then the counts */
	unsigned long opened, closed; /* connections made, and closed by the server */
};

/* Open one flood connection (@i picks its address) with a request line; -1 if refused. */
static int flood_open(struct flood *fl, int i)
{
	static const char start[] = "POST /v1/completions HTTP/1.1\r\nHost: a\r\n";
	char src[32];
	int fd;

	snprintf(src, sizeof(src), "127.0.1.%d", 1 + i / FLOOD_PER_ADDR);
	fd = rawc_connect(fl->port, src, true);
	if (fd >= 0) {
		fl->opened++;
		send(fd, start, sizeof(start) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	return fd;
}

/* Keep FLOOD_CONNS slow-header connections open (in the child): all opened at once, then each sends a
 * header line a second (well inside the idle timeout) and is opened again when the
 * server closes it. */
static void *flood_main(void *p)
{
	struct flood *fl = p;
	static int fd[FLOOD_CONNS];
	unsigned int next = 0;

	for (int i = 0; i < FLOOD_CONNS; i++)
		fd[i] = flood_open(fl, i);
	if (write(fl->ready_fd, "r", 1) != 1)
		return NULL;
	for (;;) {
		struct pollfd pf = { .fd = fl->stop_fd, .events = POLLIN };

		if (poll(&pf, 1, 0) > 0)
			break; /* the parent closed its end */
		/* a hundredth of them every 10 ms: each about once a second */
		for (int k = 0; k < FLOOD_CONNS / 100; k++, next = (next + 1) % FLOOD_CONNS) {
			char b[256];
			ssize_t n;

			if (fd[next] >= 0) {
				n = recv(fd[next], b, sizeof(b), MSG_DONTWAIT);
				if (n == 0 || (n < 0 && errno != EAGAIN) ||
				    send(fd[next], "X-Slow: 1\r\n", 11,
					 MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
					close(fd[next]);
					fd[next] = -1;
					fl->closed++;
				}
			}
			if (fd[next] < 0)
				fd[next] = flood_open(fl, (int)next);
		}
		usleep(10000);
	}
	for (int i = 0; i < FLOOD_CONNS; i++)
		if (fd[i] >= 0)
			close(fd[i]);
	return NULL;
}

/* Start the flood child.  Return: 0 once every flood connection is open, or -1. */
static int flood_start(struct flood *fl, int *stop_w, int *ready_r)
{
	int ctl[2], rdy[2];
	char c;

	if (pipe(ctl) || pipe(rdy))
		return -1;
	fl->pid = fork();
	if (fl->pid < 0)
		return -1;
	if (!fl->pid) {
		unsigned long counts[2];

		close(ctl[1]);
		close(rdy[0]);
		fl->stop_fd = ctl[0];
		fl->ready_fd = rdy[1];
		fl->opened = fl->closed = 0;
		flood_main(fl);
		counts[0] = fl->opened;
		counts[1] = fl->closed;
		_exit(write(rdy[1], counts, sizeof(counts)) == sizeof(counts) ? 0 : 1);
	}
	close(ctl[0]);
	close(rdy[1]);
	*stop_w = ctl[1];
	*ready_r = rdy[0];
	return read(rdy[0], &c, 1) == 1 ? 0 : -1;
}

/* Stop the flood child and add its counts to @fl. */
static void flood_stop(struct flood *fl, int stop_w, int ready_r)
{
	unsigned long counts[2] = { 0, 0 };

	close(stop_w);
	if (read(ready_r, counts, sizeof(counts)) == sizeof(counts)) {
		fl->opened += counts[0];
		fl->closed += counts[1];
	}
	close(ready_r);
	waitpid(fl->pid, NULL, 0);
}

/* The good client: a fresh connection, a tiny completion, its answer.  ms, or -1. */
static double good_request(int port)
{
	static const char body[] = "{\"prompt\":[1,72,105,33],\"max_tokens\":1,\"temperature\":0}";
	double t0 = kvp_test_now_s();
	struct httpc_resp r = { 0 };
	int e = httpc_request(port, "POST", "/v1/completions", NULL, body, &r);
	int st = r.status;

	httpc_resp_free(&r);
	return e || st != 200 ? -1 : (kvp_test_now_s() - t0) * 1e3;
}

static int bench_flood(void)
{
	const char *hargs[] = { "--config", "/dev/null", "--listen", "127.0.0.1:0", NULL };
	double idle[GOOD_RUNS], during[GOOD_RUNS];
	int n_idle = 0, n_during = 0;
	struct flood fl = { 0 };
	struct httpd h = { 0 };
	struct rlimit rl;
	struct kvpd d;
	int ret = -1;

	if (!getrlimit(RLIMIT_NOFILE, &rl)) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (kvpd_setup(&d, "tiny", NULL) < 0)
		return -1;
	if (httpd_start(&h, d.dir, d.sock, hargs, 30)) {
		httpd_dump_log(&h);
		goto out;
	}
	for (int i = 0; i < 5; i++) /* warm-up */
		good_request(h.port);
	/* flood and no flood take turns, so both see the same background load */
	for (int cyc = 0; cyc < GOOD_CYCLES; cyc++) {
		int stop_w, ready_r;

		for (int i = 0; i < GOOD_RUNS / GOOD_CYCLES; i++) {
			idle[n_idle++] = good_request(h.port);
			usleep(20000);
		}
		fl.port = h.port;
		if (flood_start(&fl, &stop_w, &ready_r)) {
			fprintf(stderr, "bench_http: the flood did not start\n");
			goto out;
		}
		usleep(1000000); /* the server full, the flood reconnecting what it closed */
		for (int i = 0; i < GOOD_RUNS / GOOD_CYCLES; i++) {
			during[n_during++] = good_request(h.port);
			usleep(20000);
		}
		flood_stop(&fl, stop_w, ready_r);
		usleep(500000); /* the server closes its ends */
	}
	/* a failed good request (closed before it was answered) is counted, not timed */
	n_idle = n_during = 0;
	for (int i = 0; i < GOOD_RUNS; i++) {
		if (idle[i] >= 0)
			idle[n_idle++] = idle[i];
		if (during[i] >= 0)
			during[n_during++] = during[i];
	}
	printf("good requests failed: %d of %d with no flood, %d of %d during it\n",
	       GOOD_RUNS - n_idle, GOOD_RUNS, GOOD_RUNS - n_during, GOOD_RUNS);
	if (!n_idle || !n_during)
		goto out;
	printf("flood: %lu slow-header connections opened, %lu closed by the server\n", fl.opened,
	       fl.closed);
	kvp_bench_report("good client, fresh connection + tiny completion, during a "
			 "slow-header flood of 10 x max_conns",
			 kvp_test_median(during, n_during), "ms", "no flood",
			 kvp_test_median(idle, n_idle), "ms");
	ret = 0;
out:
	httpd_stop(&h);
	kvpd_cleanup(&d);
	return ret;
}

int main(void)
{
	const char *part = getenv("KVP_BENCH_HTTP");
	int r = 0;

	kvp_bench_cpu_regime(1000);
	if ((!part || !strcmp(part, "rps")) && bench_rps() < 0) {
		fprintf(stderr, "bench_http: requests/s failed\n");
		r = 1;
	}
	kvp_bench_cpu_regime(1000);
	if ((!part || !strcmp(part, "stream")) && bench_stream() < 0) {
		fprintf(stderr, "bench_http: streaming figures failed\n");
		r = 1;
	}
	kvp_bench_cpu_regime(1000);
	if ((!part || !strcmp(part, "flood")) && bench_flood() < 0) {
		fprintf(stderr, "bench_http: the flood figure failed\n");
		r = 1;
	}
	kvp_bench_cpu_regime(1000);
	return r;
}
