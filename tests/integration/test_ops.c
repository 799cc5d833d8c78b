/* SPDX-License-Identifier: MIT */
/*
 * test_ops.c - kvpoold as an operator runs it (a real daemon, the tiny model):
 *  - `kvpool status --prom` on a daemon that served requests passes `promtool check
 *    metrics` (Debian's prometheus package), with latency histograms, build and model info;
 *  - one key=value log line per ended request, and none with daemon.request_log = no;
 *  - a text prompt that is not well-formed UTF-8 is refused (KVP_E_INVALID, where);
 *  - server.max_conns_per_uid: children of several uids, one refused at its limit while
 *    the others still connect; the idle timeout closes a connection with nothing in
 *    flight and spares a busy one; both counted in the status report;
 *  - out of file descriptors (the daemon's RLIMIT_NOFILE lowered): connections are
 *    answered KVP_E_BUSY, at accept and at WELCOME, and served again once fds free up;
 *  - checks before the model loads: a socket directory that does not exist, a live
 *    daemon on the socket, --huge-pages require without enough pages;
 *  - KVP_ISA=scalar: the daemon names the kernels it uses and serves; an unknown set
 *    stops the start;
 *  - the memory guard in a memory cgroup the test creates: refused with the numbers,
 *    started when it fits, SIGKILLed by the OOM killer with the guard off (skipped, 77,
 *    only on a machine with no memory cgroup at all).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "kvpool/kvpool.h"
#include "tests/integration/jsonq.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

/* One greedy request of @n_new tokens on a fresh connection.  Return its status. */
static int one_request(const char *sock, const char *text, uint32_t n_new, struct kvp_usage *u)
{
	struct kvp_client_prompt pr = { .text = text, .text_len = strlen(text) };
	struct kvp_client_params p;
	struct kvp_client *k;
	int r;

	r = kvp_client_connect(&k, sock);
	if (r == 0) {
		kvp_client_params_init(&p);
		p.max_new_tokens = n_new;
		r = kvp_client_generate(k, &pr, &p, NULL, NULL, u);
	}
	kvp_client_close(k);
	return r;
}

static const char *promtool_path(void)
{
	static const char *const paths[] = { "/usr/bin/promtool", "/usr/local/bin/promtool" };

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		if (access(paths[i], X_OK) == 0)
			return paths[i];
	return NULL;
}

static void test_prom_passes_promtool(void **state)
{
	/* real output of a daemon that served requests: promtool finds nothing to say */
	const char *args[] = { "--pool-size", "64M", NULL };
	const char *promtool = promtool_path();
	struct kvp_usage u;
	struct kvpd d;
	char *text = NULL, path[400], cmd[1024];
	size_t len = 0;
	FILE *f;
	int st;

	if (!promtool) {
		fprintf(stderr, "promtool not found (bash tests/deps.sh installs prometheus)\n");
		skip();
	}
	assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(one_request(d.sock, "hello metrics", 4, &u), 0);
	assert_int_equal(kvp_client_status(d.status, "prom", &text, &len), 0);
	assert_non_null(strstr(text, "# TYPE kvpool_ttft_seconds histogram\n"));
	assert_non_null(strstr(text, "kvpool_ttft_seconds_count 3\n"));
	assert_non_null(strstr(text, "kvpool_queue_seconds_bucket{le=\"+Inf\"} 3\n"));
	assert_non_null(strstr(text, "kvpool_build_info{version=\""));
	assert_non_null(strstr(text, "kvpool_model_info{name=\"kvpool-tiny\",fingerprint=\""));
	assert_null(strstr(text, "quantile"));
	snprintf(path, sizeof(path), "%s/metrics.prom", d.dir);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	fclose(f);
	free(text);
	snprintf(cmd, sizeof(cmd),
		 "'%s' check metrics < '%s/metrics.prom' > '%s/promtool.out' 2>&1", promtool, d.dir,
		 d.dir);
	st = system(cmd);
	snprintf(path, sizeof(path), "%s/promtool.out", d.dir);
	text = kvp_test_read_file(path, NULL);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || (text && *text))
		fprintf(stderr, "promtool said (status %d):\n%s\n", st, text ? text : "");
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_true(!text || !*text); /* no lint warning either */
	free(text);
	kvpd_cleanup(&d);
}

static void test_request_log_lines(void **state)
{
	/* one info line per ended request, key=value, every field; none when turned off */
	/* f32 K/V: 2,048 tokens in the 1 MiB pool (f16 would hold the 4,000 below) */
	const char *args[] = { "--pool-size", "1M", "--kv-dtype", "f32", NULL };
	const char *off[] = { "--pool-size", "1M", "--kv-dtype", "f32", "--request-log=no", NULL };
	struct kvp_usage u, u2;
	struct kvpd d;
	char want[160];

	assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
	assert_int_equal(one_request(d.sock, "hello log", 5, &u), 0);
	/* more than the 1 MiB pool can ever hold: refused at once, logged too */
	assert_int_equal(one_request(d.sock, "hello log", 4000, &u2), KVP_E_NOSPACE);
	usleep(100000);
	snprintf(want, sizeof(want), "request: id=1 conn=");
	assert_true(kvpd_log_has(&d, want));
	/* the first request's own figures, in the documented order */
	snprintf(want, sizeof(want),
		 " uid=%ld status=ok prompt=%u cached=%u created=%u recomputed=%u generated=5 "
		 "queue_ms=",
		 (long)getuid(), u.prompt_tokens, u.cached_tokens, u.cache_creation_tokens,
		 u.recomputed_tokens);
	if (!kvpd_log_has(&d, want)) {
		kvpd_dump_log(&d);
		fail_msg("no log line with '%s'", want);
	}
	assert_true(u.prompt_tokens > 0);
	assert_true(kvpd_log_has(&d, " client=\"itest-ops/"));
	assert_true(kvpd_log_has(&d, " ttft_ms="));
	assert_true(kvpd_log_has(&d, " total_ms="));
	assert_true(kvpd_log_has(&d, " status=nospace prompt=0"));
	kvpd_cleanup(&d);

	assert_int_equal(kvpd_setup(&d, "tiny", off), 0);
	assert_int_equal(one_request(d.sock, "hello log", 5, &u), 0);
	usleep(100000);
	assert_false(kvpd_log_has(&d, "request: id="));
	kvpd_cleanup(&d);
}

static void test_text_must_be_utf8(void **state)
{
	/* a text prompt that is not UTF-8 (ff fe c3) is refused, saying where; the
	 * connection stays and serves the next request */
	const char *args[] = { "--pool-size", "64M", NULL };
	struct kvp_client_prompt bad = { .text = "ab\xff\xfe\xc3", .text_len = 5 };
	struct kvp_client_prompt good = { .text = "ab", .text_len = 2 };
	struct kvp_client_params p;
	struct kvp_client *k = NULL;
	struct kvp_usage u;
	struct kvpd d;

	assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
	assert_int_equal(kvp_client_connect(&k, d.sock), 0);
	kvp_client_params_init(&p);
	p.max_new_tokens = 2;
	assert_int_equal(kvp_client_generate(k, &bad, &p, NULL, NULL, &u), KVP_E_INVALID);
	assert_non_null(strstr(kvp_client_errmsg(k), "prompt text is not valid UTF-8 (at byte 2)"));
	assert_int_equal(kvp_client_generate(k, &good, &p, NULL, NULL, &u), 0);
	kvp_client_close(k);
	kvpd_cleanup(&d);
}

/*
 * A child running as @uid that opens @n connections, writes their results to @res_fd
 * ("r0 r1 ...|message of the last failure\n"), then holds them until @hold_fd closes.
 */
static pid_t hold_conns(const char *sock, uid_t uid, int n, int res_fd, const int hold[2])
{
	pid_t pid = fork();
	int hold_fd = hold[0];

	if (pid != 0)
		return pid;
	close(hold[1]); /* else the read below never sees the parent close it */
	{
		struct kvp_client *k[16] = { 0 };
		char line[512] = "", msg[256] = "";
		char b;
		int i;

		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(uid) < 0)
			_exit(125);
		for (i = 0; i < n && i < 16; i++) {
			int r = kvp_client_connect(&k[i], sock);
			size_t l = strlen(line);

			snprintf(line + l, sizeof(line) - l, "%d ", r);
			if (r)
				snprintf(msg, sizeof(msg), "%s", kvp_client_errmsg(k[i]));
		}
		dprintf(res_fd, "%s|%s\n", line, msg);
		(void)!read(hold_fd, &b, 1);
		for (i = 0; i < n && i < 16; i++)
			kvp_client_close(k[i]);
		_exit(0);
	}
}

static void read_line(int fd, char *buf, size_t cap)
{
	size_t n = 0;

	while (n + 1 < cap && read(fd, buf + n, 1) == 1 && buf[n] != '\n')
		n++;
	buf[n] = '\0';
}

static void test_per_uid_limit(void **state)
{
	/* uid 60001 holds its 2; its 3rd is refused BUSY naming the uid and the key; uid
	 * 60002 and root still connect; the refusal is counted */
	const char *args[] = { "--pool-size",	      "64M", "--max-conns", "8",
			       "--max-conns-per-uid", "2",   NULL };
	int res[2], hold[2], st;
	char line[600], v[32];
	struct kvp_client *k = NULL;
	struct jsonq *j;
	struct kvpd d;
	pid_t a, b;

	if (geteuid() != 0) {
		fprintf(stderr, "needs root to run children as other uids\n");
		skip();
	}
	assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
	assert_int_equal(chmod(d.dir, 0711), 0);
	assert_int_equal(chmod(d.sock, 0666), 0);
	assert_int_equal(pipe(res), 0);
	assert_int_equal(pipe(hold), 0);
	a = hold_conns(d.sock, 60001, 3, res[1], hold);
	read_line(res[0], line, sizeof(line));
	snprintf(v, sizeof(v), "0 0 %d |", KVP_E_BUSY);
	assert_non_null(strstr(line, v));
	assert_non_null(strstr(line, "too many connections from uid 60001 "
				     "(server.max_conns_per_uid = 2)"));
	b = hold_conns(d.sock, 60002, 2, res[1], hold);
	read_line(res[0], line, sizeof(line));
	assert_string_equal(line, "0 0 |");
	assert_int_equal(kvp_client_connect(&k, d.sock), 0);
	j = kvpd_status(&d);
	assert_non_null(j);
	assert_int_equal(jsonq_num(j, "connections.open", -1), 5);
	assert_int_equal(jsonq_num(j, "connections.refused_per_uid", -1), 1);
	assert_int_equal(jsonq_num(j, "connections.refused", -1), 1);
	jsonq_free(j);
	kvp_client_close(k);
	close(hold[1]);
	assert_int_equal(waitpid(a, &st, 0), a);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_int_equal(waitpid(b, &st, 0), b);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	close(hold[0]);
	close(res[0]);
	close(res[1]);
	kvpd_cleanup(&d);
}

static void test_idle_timeout(void **state)
{
	/* a connection with nothing in flight is closed after idle_timeout_ms (ERROR BUSY
	 * saying why); one that keeps sending requests is not; counted in status */
	const char *args[] = { "--pool-size", "64M", "--idle-timeout-ms", "400", NULL };
	struct kvp_client_prompt pr = { .text = "busy", .text_len = 4 };
	struct kvp_client_params p;
	struct kvp_client *idle = NULL, *busy = NULL;
	struct kvp_usage u;
	struct jsonq *j;
	struct kvpd d;
	double t_end;

	assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
	assert_int_equal(kvp_client_connect(&idle, d.sock), 0);
	assert_int_equal(kvp_client_connect(&busy, d.sock), 0);
	kvp_client_params_init(&p);
	p.max_new_tokens = 2;
	t_end = kvp_test_now_s() + 1.5;
	while (kvp_test_now_s() < t_end) {
		assert_int_equal(kvp_client_generate(busy, &pr, &p, NULL, NULL, &u), 0);
		usleep(100000);
	}
	assert_true(kvp_client_generate(idle, &pr, &p, NULL, NULL, &u) != 0);
	if (!strstr(kvp_client_errmsg(idle), "idle"))
		fail_msg("closed idle, but the client says: %s", kvp_client_errmsg(idle));
	j = kvpd_status(&d);
	assert_non_null(j);
	assert_int_equal(jsonq_num(j, "connections.idle_closed", -1), 1);
	assert_int_equal(jsonq_num(j, "connections.open", -1), 1);
	jsonq_free(j);
	kvp_client_close(idle);
	kvp_client_close(busy);
	kvpd_cleanup(&d);
}

/*
 * The RLIMIT_NOFILE that leaves @pid exactly @n_free fd numbers to open: new fds take
 * the lowest free numbers, so count the holes from 0 up.  Return it, or -1.
 */
static int limit_leaving(pid_t pid, int n_free)
{
	static bool used[4096];
	char path[64];
	struct dirent *e;
	DIR *dir;
	int lim = 0;

	memset(used, 0, sizeof(used));
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	dir = opendir(path);
	if (!dir)
		return -1;
	while ((e = readdir(dir))) {
		int fd = atoi(e->d_name);

		if (e->d_name[0] != '.' && fd >= 0 && fd < 4096)
			used[fd] = true;
	}
	closedir(dir);
	while (lim < 4096 && n_free > 0)
		n_free -= !used[lim++];
	return n_free ? -1 : lim;
}

static int raw_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (strlen(path) >= sizeof(sa.sun_path)) {
		close(fd);
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static void test_busy_when_out_of_fds(void **state)
{
	/* with its RLIMIT_NOFILE 3 above what it uses, 3 silent connections take the
	 * daemon's last fds: the next is answered BUSY at accept; one closed, the next gets
	 * an fd but no dup of the pool fd for WELCOME: BUSY again; two closed, served */
	const char *args[] = { "--pool-size", "64M", NULL };
	struct kvp_client *k = NULL;
	struct rlimit rl;
	struct jsonq *j;
	struct kvpd d;
	int raw[3], lim, r;

	assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
	lim = limit_leaving(d.pid, 3);
	assert_true(lim > 3);
	assert_int_equal(prlimit(d.pid, RLIMIT_NOFILE, NULL, &rl), 0);
	rl.rlim_cur = (rlim_t)lim;
	assert_int_equal(prlimit(d.pid, RLIMIT_NOFILE, &rl, NULL), 0);
	for (int i = 0; i < 3; i++) {
		raw[i] = raw_connect(d.sock);
		assert_true(raw[i] >= 0);
	}
	usleep(200000); /* accepted: the daemon is at its limit */
	r = kvp_client_connect(&k, d.sock);
	assert_int_equal(r, KVP_E_BUSY);
	assert_non_null(strstr(kvp_client_errmsg(k), "out of file descriptors"));
	kvp_client_close(k);
	close(raw[0]);
	usleep(200000);
	r = kvp_client_connect(&k, d.sock);
	assert_int_equal(r, KVP_E_BUSY);
	assert_non_null(strstr(kvp_client_errmsg(k), "out of file descriptors"));
	kvp_client_close(k);
	close(raw[1]);
	close(raw[2]);
	usleep(200000);
	assert_int_equal(kvp_client_connect(&k, d.sock), 0);
	kvp_client_close(k);
	usleep(100000);
	j = kvpd_status(&d);
	assert_non_null(j);
	assert_int_equal(jsonq_num(j, "connections.refused_no_fds", -1), 2);
	jsonq_free(j);
	kvpd_cleanup(&d);
}

/* Start a daemon that must fail before loading its model; return its log. */
static char *start_fails_early(struct kvpd *d, const char *const *args)
{
	char model[512];

	assert_int_equal(kvpd_model(d, "tiny", model, sizeof(model)), 0);
	{
		const char *argv[16] = { "--model", model };
		int n = 2;

		while (*args && n < 15)
			argv[n++] = *args++;
		argv[n] = NULL;
		assert_int_equal(kvpd_start(d, 30, argv), -ECHILD);
	}
	assert_true(WIFEXITED(d->exit_status) && WEXITSTATUS(d->exit_status) == 1);
	assert_false(kvpd_log_has(d, "model: ")); /* failed before the model loaded */
	return kvp_test_read_file(d->log, NULL);
}

static void test_checks_before_model_loads(void **state)
{
	/* a missing socket directory, a live daemon on the socket, and required huge pages
	 * that are not there: each refused with why, before the model is loaded */
	struct kvpd d, d2;
	char sock[400], pool[32];
	const char *a1[] = { "--socket", sock, NULL };
	const char *a2[] = { "--pool-size", "64M", NULL };
	const char *a3[] = { "--huge-pages", "require", "--pool-size", pool, NULL };
	long free_pages = 0;
	FILE *f;
	char *log;

	assert_int_equal(kvpd_init(&d), 0);
	snprintf(sock, sizeof(sock), "%s/no-such-dir/k.sock", d.dir);
	log = start_fails_early(&d, a1);
	assert_non_null(strstr(log, "server.socket: "));
	assert_non_null(strstr(log, "no-such-dir does not exist"));
	free(log);
	kvpd_cleanup(&d);

	assert_int_equal(kvpd_setup(&d, "tiny", a2), 0);
	assert_int_equal(kvpd_init(&d2), 0);
	snprintf(sock, sizeof(sock), "%s", d.sock); /* the first daemon's, live */
	log = start_fails_early(&d2, a1);
	assert_non_null(strstr(log, "another kvpoold (or another program) is listening there"));
	free(log);
	kvpd_cleanup(&d2);
	kvpd_cleanup(&d);

	f = fopen("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "r");
	if (f) {
		if (fscanf(f, "%ld", &free_pages) != 1)
			free_pages = 0;
		fclose(f);
	}
	/* 64 MiB more than the free huge pages hold */
	snprintf(pool, sizeof(pool), "%ldM", free_pages * 2 + 64);
	assert_int_equal(kvpd_init(&d), 0);
	log = start_fails_early(&d, a3);
	assert_non_null(
		strstr(log, "huge pages required (pool.huge_pages = require), but the pool"));
	assert_non_null(strstr(log, "free 2 MiB huge pages"));
	free(log);
	kvpd_cleanup(&d);
}

/* With @var=@value in its environment the daemon does not start, and logs @msg. */
static void env_refused(const char *var, const char *value, const char *msg)
{
	char model[512];
	const char *argv[] = { "--model", model, "--pool-size", "64M", NULL };
	struct kvpd d;
	char *log;

	assert_int_equal(setenv(var, value, 1), 0);
	assert_int_equal(kvpd_init(&d), 0);
	assert_int_equal(kvpd_model(&d, "tiny", model, sizeof(model)), 0);
	assert_int_equal(kvpd_start(&d, 30, argv), -ECHILD);
	unsetenv(var);
	assert_true(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 1);
	log = kvp_test_read_file(d.log, NULL);
	assert_non_null(log);
	assert_non_null(strstr(log, msg));
	free(log);
	kvpd_cleanup(&d);
}

static void test_forced_scalar_kernels(void **state)
{
	/* KVP_ISA=scalar (the SIMD paths off): the daemon says which kernels it uses and
	 * serves; a kernel set this build does not know stops the start, naming it, as does
	 * an f32 path KVP_F32_GEMM does not know */
	const char *args[] = { "--pool-size", "64M", NULL };
	struct kvp_usage u;
	struct kvpd d;

	(void)state;
	assert_int_equal(setenv("KVP_ISA", "scalar", 1), 0); /* the daemon inherits it */
	assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
	assert_true(kvpd_log_has(&d, "; kernels scalar"));
	assert_int_equal(one_request(d.sock, "hello scalar", 4, &u), 0);
	assert_int_equal(u.generated_tokens, 4);
	kvpd_cleanup(&d);
	env_refused("KVP_ISA", "avx9", "KVP_ISA=avx9: no such kernel set");
	env_refused("KVP_F32_GEMM", "fast", "KVP_F32_GEMM=fast: not auto, kvpool or openblas");
}

static void test_memory_guard_in_cgroup(void **state)
{
	/* a 512 MiB pool in a 256 MiB cgroup: refused at once with the numbers; a 32 MiB
	 * pool starts; with the guard off the same 512 MiB pool gets the daemon killed */
	const char *big[] = { "--pool-size", "512M", "--huge-pages", "off", NULL };
	const char *small[] = { "--pool-size", "32M", "--huge-pages", "off", NULL };
	const char *off[] = { "--pool-size",	   "512M", "--huge-pages", "off",
			      "--memory-guard=no", NULL };
	char cg[500], model[512];
	const char *argv[12];
	struct kvpd d;
	char *log;
	int r;

	assert_int_equal(kvpd_init(&d), 0);
	if (kvpd_memcg_make(cg, sizeof(cg), 256ull << 20) < 0) {
		kvpd_cleanup(&d);
		fprintf(stderr, "no memory cgroup (v1 or v2) can be made here\n");
		skip();
	}
	snprintf(d.cgroup, sizeof(d.cgroup), "%s", cg);
	assert_int_equal(kvpd_model(&d, "tiny", model, sizeof(model)), 0);
	argv[0] = "--model";
	argv[1] = model;
	for (int i = 0; i < 5; i++)
		argv[2 + i] = big[i];
	assert_int_equal(kvpd_start(&d, 30, argv), -ECHILD);
	assert_true(WIFEXITED(d.exit_status) && WEXITSTATUS(d.exit_status) == 1);
	log = kvp_test_read_file(d.log, NULL);
	assert_non_null(log);
	assert_non_null(strstr(log, "memory: the pool (512.0 MiB) and the model ("));
	assert_non_null(strstr(log, "more than the memory cgroup allows: 256.0 MiB ("));
	assert_non_null(strstr(log, "--memory-guard=no"));
	assert_null(strstr(log, "model: ")); /* refused before loading */
	free(log);

	for (int i = 0; i < 5; i++)
		argv[2 + i] = small[i];
	assert_int_equal(kvpd_start(&d, 30, argv), 0);
	assert_true(kvpd_log_has(&d, "memory: pool 32.0 MiB + model"));
	assert_int_equal(kvpd_stop(&d), 0);

	for (int i = 0; i < 6; i++)
		argv[2 + i] = off[i];
	r = kvpd_start(&d, 60, argv);
	if (r == 0) {
		kvpd_dump_log(&d);
		fail_msg("a 512 MiB pool started in a 256 MiB cgroup without swap");
	}
	assert_int_equal(r, -ECHILD);
	assert_true(kvpd_log_has(&d, "memory: not checked (daemon.memory_guard = no)"));
	assert_true(WIFSIGNALED(d.exit_status) && WTERMSIG(d.exit_status) == SIGKILL);
	kvpd_cleanup(&d);
	rmdir(cg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prom_passes_promtool),
		cmocka_unit_test(test_request_log_lines),
		cmocka_unit_test(test_text_must_be_utf8),
		cmocka_unit_test(test_per_uid_limit),
		cmocka_unit_test(test_idle_timeout),
		cmocka_unit_test(test_busy_when_out_of_fds),
		cmocka_unit_test(test_checks_before_model_loads),
		cmocka_unit_test(test_forced_scalar_kernels),
		cmocka_unit_test(test_memory_guard_in_cgroup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
