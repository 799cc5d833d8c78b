/* SPDX-License-Identifier: MIT */
/*
 * test_preflight.c - the socket-path checks kvpoold makes before loading its model
 * (svc/preflight.c), each case with its return code and a message naming the key and
 * what to change: a path too long for sun_path, a missing directory, a directory that is
 * a file, a file that is not a socket, a live listener; a stale socket file and a fresh
 * path pass (the bind replaces or creates them).  The integration side (test_ops) shows
 * the daemon stopping on them before the model loads.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "svc/preflight.h"
#include "tests/lib/testlib.h"

/* A socket bound at @path; listening when @listen_too.  Return its fd. */
static int bound_socket(const char *path, int listen_too)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_true(strlen(path) < sizeof(sa.sun_path));
	strcpy(sa.sun_path, path);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	if (listen_too)
		assert_int_equal(listen(fd, 1), 0);
	return fd;
}

static void test_socket_paths(void **state)
{
	/* each refusal has its code and names the key, the path and what to do */
	char dir[256], path[512], err[512];
	FILE *f;
	int fd;

	assert_int_equal(kvp_test_tmpdir(dir, sizeof(dir)), 0);

	/* too long for a Unix socket address: the length and the limit */
	snprintf(path, sizeof(path), "%s/%0150d.sock", dir, 0);
	assert_int_equal(kvp_preflight_socket("server.socket", path, err, sizeof(err)),
			 -ENAMETOOLONG);
	assert_non_null(strstr(err, "server.socket: "));
	assert_non_null(strstr(err, "a Unix socket path holds at most 107"));

	/* no such directory */
	snprintf(path, sizeof(path), "%s/none/k.sock", dir);
	assert_int_equal(kvp_preflight_socket("server.socket", path, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "/none does not exist (create it"));

	/* the "directory" is a regular file */
	snprintf(path, sizeof(path), "%s/file", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/file/k.sock", dir);
	assert_int_equal(kvp_preflight_socket("server.status_socket", path, err, sizeof(err)),
			 -ENOTDIR);
	assert_non_null(strstr(err, "server.status_socket: "));
	assert_non_null(strstr(err, "/file is not a directory"));

	/* something that is not a socket at the path itself */
	snprintf(path, sizeof(path), "%s/file", dir);
	assert_int_equal(kvp_preflight_socket("server.socket", path, err, sizeof(err)), -EEXIST);
	assert_non_null(strstr(err, "exists and is not a socket; remove it or pick another path"));

	/* a live listener: refused; once it is gone, its stale file passes */
	snprintf(path, sizeof(path), "%s/k.sock", dir);
	assert_int_equal(kvp_preflight_socket("server.socket", path, err, sizeof(err)), 0);
	fd = bound_socket(path, 1);
	assert_int_equal(kvp_preflight_socket("server.socket", path, err, sizeof(err)),
			 -EADDRINUSE);
	assert_non_null(strstr(err, "another kvpoold (or another program) is listening there"));
	close(fd);
	assert_int_equal(access(path, F_OK), 0); /* the file stays behind */
	assert_int_equal(kvp_preflight_socket("server.socket", path, err, sizeof(err)), 0);

	kvp_test_rmtree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_socket_paths),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
