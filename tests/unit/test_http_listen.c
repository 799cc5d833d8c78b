/* SPDX-License-Identifier: MIT */
/*
 * test_http_listen.c - ipc/http/listen.c: listen addresses parsed, the loopback rule
 * without API keys, bound TCP and unix sockets (a stale socket file replaced, a live
 * one or a plain file refused, the file removed on close).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "ipc/http/listen.h"
#include "tests/lib/testlib.h"

static void test_parse(void **state)
{
	static const char *const bad[] = { "8080",
					   "host",
					   "127.0.0.1:",
					   "127.0.0.1:x",
					   "127.0.0.1:70000",
					   "::1:80",
					   "[::1]80",
					   "[::1",
					   "unix:relative",
					   ":8080",
					   "no.such.host.invalid:80" };
	struct sockaddr_storage ss;
	socklen_t len;
	char err[256];

	/* HOST:PORT, [IPV6]:PORT, unix:/PATH; everything else says why not */
	assert_int_equal(kvp_http_listen_parse("127.0.0.1:8080", &ss, &len, err, sizeof(err)), 0);
	assert_int_equal(ss.ss_family, AF_INET);
	assert_int_equal(ntohs(((struct sockaddr_in *)&ss)->sin_port), 8080);
	assert_int_equal(kvp_http_listen_parse("[::1]:0", &ss, &len, err, sizeof(err)), 0);
	assert_int_equal(ss.ss_family, AF_INET6);
	assert_int_equal(kvp_http_listen_parse("localhost:80", &ss, &len, err, sizeof(err)), 0);
	assert_true(kvp_http_addr_is_local((struct sockaddr *)&ss));
	assert_int_equal(kvp_http_listen_parse("unix:/run/x.sock", &ss, &len, err, sizeof(err)), 0);
	assert_int_equal(ss.ss_family, AF_UNIX);
	assert_string_equal(((struct sockaddr_un *)&ss)->sun_path, "/run/x.sock");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		if (kvp_http_listen_parse(bad[i], &ss, &len, err, sizeof(err)) != -EINVAL)
			fail_msg("'%s' accepted", bad[i]);
		assert_non_null(strstr(err, bad[i][0] == '[' ? "::1" : bad[i]));
	}
}

static bool local(const char *spec)
{
	struct sockaddr_storage ss;
	socklen_t len;
	char err[256];

	assert_int_equal(kvp_http_listen_parse(spec, &ss, &len, err, sizeof(err)), 0);
	return kvp_http_addr_is_local((struct sockaddr *)&ss);
}

static void test_loopback_rule(void **state)
{
	/* loopback: 127.0.0.0/8, ::1, v4-mapped 127/8, unix; nothing else */
	assert_true(local("127.0.0.1:1"));
	assert_true(local("127.200.3.4:1"));
	assert_true(local("[::1]:1"));
	assert_true(local("[::ffff:127.0.0.1]:1"));
	assert_true(local("unix:/x"));
	assert_false(local("0.0.0.0:1"));
	assert_false(local("10.0.0.1:1"));
	assert_false(local("128.0.0.1:1"));
	assert_false(local("[::]:1"));
	assert_false(local("[::ffff:10.0.0.1]:1"));
}

static void test_open_tcp(void **state)
{
	struct kvp_http_listener l;
	char err[512];

	/* without keys a wildcard address is refused; a loopback one is bound, and :0 gets
	 * the port the kernel chose in its name */
	assert_int_equal(kvp_http_listen_open(&l, "0.0.0.0:0", false, 16, err, sizeof(err)),
			 -EPERM);
	assert_non_null(strstr(err, "not a loopback address"));
	assert_int_equal(l.fd, -1);
	assert_int_equal(kvp_http_listen_open(&l, "0.0.0.0:0", true, 16, err, sizeof(err)), 0);
	kvp_http_listen_close(&l);
	assert_int_equal(kvp_http_listen_open(&l, "127.0.0.1:0", false, 16, err, sizeof(err)), 0);
	assert_true(l.fd >= 0);
	assert_int_equal(strncmp(l.name, "http://127.0.0.1:", 17), 0);
	assert_true(atoi(l.name + 17) > 0);
	kvp_http_listen_close(&l);
	assert_int_equal(l.fd, -1);
}

static void test_open_unix(void **state)
{
	struct kvp_http_listener l, l2;
	char dir[200], spec[300], path[260], err[512];
	struct stat st;
	FILE *fp;

	/* a unix socket: mode 0660, its file removed on close; a dead socket file is
	 * replaced, a live one or a plain file is refused */
	assert_int_equal(kvp_test_tmpdir(dir, sizeof(dir)), 0);
	snprintf(path, sizeof(path), "%s/h.sock", dir);
	snprintf(spec, sizeof(spec), "unix:%s", path);
	assert_int_equal(kvp_http_listen_open(&l, spec, false, 16, err, sizeof(err)), 0);
	assert_string_equal(l.name, spec);
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0660);
	assert_int_equal(kvp_http_listen_open(&l2, spec, false, 16, err, sizeof(err)), -EADDRINUSE);
	assert_non_null(strstr(err, "another server"));
	close(l.fd); /* dies without removing its file */
	l.fd = -1;
	l.unix_path[0] = '\0';
	assert_int_equal(kvp_http_listen_open(&l2, spec, false, 16, err, sizeof(err)), 0);
	kvp_http_listen_close(&l2);
	assert_int_equal(stat(path, &st), -1);
	fp = fopen(path, "w");
	assert_non_null(fp);
	fclose(fp);
	assert_int_equal(kvp_http_listen_open(&l2, spec, false, 16, err, sizeof(err)), -EEXIST);
	assert_non_null(strstr(err, "not a socket"));
	kvp_test_rmtree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_loopback_rule),
		cmocka_unit_test(test_open_tcp),
		cmocka_unit_test(test_open_unix),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
