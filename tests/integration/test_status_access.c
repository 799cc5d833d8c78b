/* SPDX-License-Identifier: MIT */
/*
 * test_status_access.c - the status socket as a trust boundary, in a real kvpoold (the
 * per-uid default), with children that switch to uid 65534 (needs root; skipped, 77,
 * without):
 *  - the status socket is mode 0600 (0660 with group kvpool-status where that exists);
 *  - a peer of another uid that can reach the socket (the test widens it, as an admin
 *    could) sees its own domain only: no other domain's entry, prompt lengths,
 *    connections or shown hashes, in JSON and in Prometheus text, and daemon-wide sums
 *    that are its own domain's; its flush-tier is refused and flushes nothing;
 *  - an operator (root) sees every domain, and its flush-tier is done;
 *  - the same prompt in two domains, and in two daemons, shows different hashes;
 *  - a peer that connects and sends nothing (another kvpoold's start-up probe) is
 *    closed cleanly and the daemon goes on answering.
 */
#include <errno.h>
#include <grp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* Three full blocks of 16 tokens at least, with the tiny model's byte tokens. */
#define PROMPT \
	"The quick brown fox jumps over the lazy dog; the five boxing wizards jump quickly. " \
	"Pack my box with five dozen liquor jugs."

#define NOBODY 65534
#define TEXT_MAX (1u << 20)

static void need_root(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "needs root to run children as other uids\n");
		skip();
	}
}

/* Both sockets reachable by every uid (the test's directory is private otherwise). */
static void open_up(struct kvpd *d)
{
	assert_int_equal(chmod(d->dir, 0711), 0);
	assert_int_equal(chmod(d->sock, 0666), 0);
	assert_int_equal(chmod(d->status, 0666), 0);
}

/* @n greedy requests of PROMPT (2 new tokens each) on a connection of our own. */
static int run_prompt(const char *sock, int n)
{
	struct kvp_client_prompt pr = { .text = PROMPT, .text_len = strlen(PROMPT) };
	struct kvp_client_params p;
	struct kvp_client *k = NULL;
	int r = kvp_client_connect(&k, sock);

	kvp_client_params_init(&p);
	p.max_new_tokens = 2;
	for (int i = 0; i < n && !r; i++) {
		struct kvp_usage u = { 0 };

		r = kvp_client_generate(k, &pr, &p, NULL, NULL, &u);
	}
	kvp_client_close(k);
	return r;
}

/*
 * In a child running as uid/gid @id (no supplementary groups): with @sock, run PROMPT
 * twice first; then ask the status socket @fmt.  @out (TEXT_MAX bytes) gets the answer;
 * return what kvp_client_status() returned (or run_prompt()'s failure).
 */
static int status_as(const char *sock, const char *status, uid_t id, const char *fmt, char *out)
{
	int fd[2], st, rc = -EIO;
	size_t n = 0;
	ssize_t got;
	pid_t pid;

	assert_int_equal(pipe(fd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char *text = NULL;
		size_t len = 0;
		int r = 0;

		close(fd[0]);
		if (setgroups(0, NULL) < 0 || setgid(id) < 0 || setuid(id) < 0)
			_exit(125);
		if (sock)
			r = run_prompt(sock, 2);
		if (!r)
			r = kvp_client_status(status, fmt, &text, &len);
		if (write(fd[1], &r, sizeof(r)) != (ssize_t)sizeof(r) ||
		    (text && write(fd[1], text, len) != (ssize_t)len))
			_exit(126);
		_exit(0);
	}
	close(fd[1]);
	assert_int_equal(read(fd[0], &rc, sizeof(rc)), (ssize_t)sizeof(rc));
	while (n + 1 < TEXT_MAX && (got = read(fd[0], out + n, TEXT_MAX - 1 - n)) > 0)
		n += (size_t)got;
	out[n] = 0;
	close(fd[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	return rc;
}

/* Index of the domain named @name in the status report's list, or -1. */
static int domain_at(const struct jsonq *j, const char *name)
{
	return jsonq_index_of(j, "domains", "name", name);
}

/* Domain @name's most hit prefix's shown hash (copied into @out), asserted present. */
static void top_hash(const struct jsonq *j, const char *name, char *out, size_t cap)
{
	char path[96];
	const char *h;
	int i = domain_at(j, name);

	assert_true(i >= 0);
	snprintf(path, sizeof(path), "domains.%d.cache.top_prefixes.0.hash", i);
	h = jsonq_str(j, path);
	assert_non_null(h);
	assert_int_equal(strlen(h), 32);
	snprintf(out, cap, "%s", h);
}

/* Whether the report's connection list has one of @uid. */
static bool listed_uid(const struct jsonq *j, double uid)
{
	char path[64];

	for (int i = 0; i < 64; i++) {
		double u;

		snprintf(path, sizeof(path), "connections.list.%d.uid", i);
		u = jsonq_num(j, path, -2);
		if (u == -2)
			return false;
		if (u == uid)
			return true;
	}
	return false;
}

static void test_other_uid_sees_own_domain_only(void **state)
{
	char tier[400], root_hash[40], own_hash[40];
	const char *args[] = {
		"--pool-size", "32M", "--tier-path", tier, "--tier-size", "16M", NULL
	};
	struct kvp_client *held = NULL;
	struct jsonq *op, *j, *after;
	double flushes;
	char *text = malloc(TEXT_MAX);
	struct kvpd d;

	(void)state;
	need_root();
	assert_non_null(text);
	assert_int_equal(kvpd_init(&d), 0);
	snprintf(tier, sizeof(tier), "%s/tier", d.dir);
	assert_int_equal(kvpd_model(&d, "tiny", d.model, sizeof(d.model)), 0);
	{
		const char *full[] = { "--model", d.model, args[0], args[1], args[2],
				       args[3],	  args[4], args[5], NULL };

		if (kvpd_start(&d, 60, full)) {
			kvpd_dump_log(&d);
			fail_msg("kvpoold did not start");
		}
	}
	/* the status socket is the operators': group kvpool-status, else the owner's only */
	{
		struct group *g = getgrnam("kvpool-status");
		struct stat st;

		assert_int_equal(stat(d.status, &st), 0);
		if (g) {
			assert_int_equal(st.st_mode & 0777, 0660);
			assert_int_equal(st.st_gid, g->gr_gid);
		} else {
			assert_int_equal(st.st_mode & 0777, 0600);
		}
		assert_int_equal(stat(d.sock, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0660);
	}
	open_up(&d);

	/* root's domain: its prompt cached and hit; one connection of root's held open */
	assert_int_equal(run_prompt(d.sock, 2), 0);
	assert_int_equal(kvp_client_connect(&held, d.sock), 0);

	/* nobody: the same prompt in its own domain, then its view of the report */
	assert_int_equal(status_as(d.sock, d.status, NOBODY, "json", text), 0);
	j = jsonq_parse(text, strlen(text));
	assert_non_null(j);
	op = kvpd_status(&d);
	assert_non_null(op);

	/* the operator sees both domains, root's connection, and different shown hashes */
	assert_string_equal(jsonq_str(op, "daemon.view"), "all");
	top_hash(op, "uid-0", root_hash, sizeof(root_hash));
	top_hash(op, "uid-65534", own_hash, sizeof(own_hash));
	if (!strcmp(root_hash, own_hash))
		fail_msg("the same prompt shows the same hash %s in two domains", root_hash);
	assert_true(listed_uid(op, 0));

	/* nobody sees its own domain only */
	assert_string_equal(jsonq_str(j, "daemon.view"), "domain");
	assert_string_equal(jsonq_str(j, "daemon.view_domain"), "uid-65534");
	assert_int_equal(domain_at(j, "uid-65534"), 0);
	assert_int_equal(domain_at(j, "uid-0"), -1);
	assert_null(jsonq_get(j, "domains.1"));
	for (int i = 0; i < 64; i++) {
		char path[64];
		double uid;

		snprintf(path, sizeof(path), "connections.list.%d.uid", i);
		uid = jsonq_num(j, path, -2);
		if (uid == -2)
			break;
		if (uid != NOBODY)
			fail_msg("a connection of uid %g is listed to uid %d", uid, NOBODY);
	}
	if (strstr(text, root_hash))
		fail_msg("root's shown hash %s is in uid %d's report", root_hash, NOBODY);
	/* its daemon-wide figures are its own domain's: root's prompts are not in them */
	assert_true(jsonq_num(j, "usage.prompt_tokens", -1) ==
		    jsonq_num(j, "domains.0.prompt_tokens", -2));
	assert_true(jsonq_num(op, "usage.prompt_tokens", -1) >
		    jsonq_num(j, "usage.prompt_tokens", -1));
	assert_true(jsonq_num(j, "connections.total", -1) == 0);
	jsonq_free(j);

	/* ... and in Prometheus text */
	assert_int_equal(status_as(NULL, d.status, NOBODY, "prom", text), 0);
	assert_non_null(strstr(text, "domain=\"uid-65534\""));
	assert_null(strstr(text, "domain=\"uid-0\""));
	assert_null(strstr(text, root_hash));

	/* flush-tier: refused to nobody, nothing flushed; done for root */
	flushes = jsonq_num(op, "tier.flushes", -1);
	assert_true(flushes >= 0);
	assert_int_equal(status_as(NULL, d.status, NOBODY, "flush-tier", text), 0);
	assert_non_null(strstr(text, "\"error\""));
	assert_non_null(strstr(text, "denied"));
	assert_int_equal(run_prompt(d.sock, 1), 0); /* an engine step, where a flush would run */
	after = kvpd_status(&d);
	assert_non_null(after);
	assert_true(jsonq_num(after, "tier.flushes", -1) == flushes);
	jsonq_free(after);
	assert_int_equal(status_as(NULL, d.status, 0, "flush-tier", text), 0);
	assert_non_null(strstr(text, "\"flush\":\"requested\""));
	for (int i = 0; i < 200 && kvpd_status_num(&d, "tier.flushes", -1) == flushes; i++)
		usleep(50000);
	assert_true(kvpd_status_num(&d, "tier.flushes", -1) > flushes);

	jsonq_free(op);
	kvp_client_close(held);
	free(text);
	kvpd_cleanup(&d);
}

static void test_two_daemons_show_different_hashes(void **state)
{
	/* one model, one prompt, two daemons: each shows its own keyed value */
	const char *args[] = { "--pool-size", "32M", NULL };
	char h[2][40];

	(void)state;
	for (int i = 0; i < 2; i++) {
		struct jsonq *j;
		struct kvpd d;
		char me[32];

		assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
		assert_int_equal(run_prompt(d.sock, 2), 0);
		j = kvpd_status(&d);
		assert_non_null(j);
		snprintf(me, sizeof(me), "uid-%u", (unsigned int)geteuid());
		top_hash(j, me, h[i], sizeof(h[i]));
		/* the daemon-wide list shows the same value as the domain's own */
		assert_string_equal(jsonq_str(j, "cache.top_prefixes.0.hash"), h[i]);
		jsonq_free(j);
		kvpd_cleanup(&d);
	}
	if (!strcmp(h[0], h[1]))
		fail_msg("two daemons show the same hash %s for one prompt", h[0]);
}

static void test_empty_status_request(void **state)
{
	/*
	 * Connect and shut the write side having sent nothing: closed with no answer; then
	 * a second kvpoold on the same sockets probes them, refuses to start, and the first
	 * still answers (under ASan+UBSan: no report, no abort).
	 */
	const char *args[] = { "--pool-size", "32M", NULL };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct kvpd d, second;
	char buf[64];
	int fd;

	(void)state;
	assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
	for (int i = 0; i < 3; i++) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(fd >= 0);
		assert_true(strlen(d.status) < sizeof(sa.sun_path));
		memcpy(sa.sun_path, d.status, strlen(d.status) + 1);
		assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
		assert_int_equal(shutdown(fd, SHUT_WR), 0);
		assert_int_equal(read(fd, buf, sizeof(buf)), 0);
		close(fd);
	}
	assert_true(kvpd_status_num(&d, "daemon.pid", -1) == (double)d.pid);

	assert_int_equal(kvpd_init(&second), 0);
	assert_int_equal(kvpd_model(&second, "tiny", second.model, sizeof(second.model)), 0);
	snprintf(second.sock, sizeof(second.sock), "%s", d.sock);
	snprintf(second.status, sizeof(second.status), "%s", d.status);
	{
		const char *full[] = { "--model", second.model, "--pool-size", "32M", NULL };

		assert_int_equal(kvpd_start(&second, 60, full), -ECHILD);
	}
	assert_true(kvpd_status_num(&d, "daemon.pid", -1) == (double)d.pid);
	assert_int_equal(run_prompt(d.sock, 1), 0);
	kvpd_cleanup(&second);
	kvpd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_other_uid_sees_own_domain_only),
		cmocka_unit_test(test_two_daemons_show_different_hashes),
		cmocka_unit_test(test_empty_status_request),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
