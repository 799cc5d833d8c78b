/* SPDX-License-Identifier: MIT */
/*
 * test_notify.c - sd_notify without libsystemd: datagrams reach $NOTIFY_SOCKET (path and
 * abstract), the watchdog interval is half of $WATCHDOG_USEC and only for our pid, and
 * without $NOTIFY_SOCKET every call is a harmless no-op.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "svc/notify.h"
#include "tests/lib/testlib.h"

/* Bind a datagram socket at @name (path, or "@abstract"). */
static int listen_dgram(const char *name)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	socklen_t len;
	int fd;

	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	strcpy(a.sun_path, name);
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(name));
	if (name[0] == '@')
		a.sun_path[0] = '\0';
	else
		len++;
	assert_int_equal(bind(fd, (struct sockaddr *)&a, len), 0);
	return fd;
}

static void recv_expect(int fd, const char *want)
{
	char buf[512];
	ssize_t n;

	n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_string_equal(buf, want);
}

static void test_path_socket(void **state)
{
	struct kvp_notify n = KVP_NOTIFY_INIT;
	char dir[256];
	char path[300];
	int fd;

	/* READY, STATUS (newlines flattened) and WATCHDOG arrive as separate datagrams */
	assert_int_equal(kvp_test_tmpdir(dir, sizeof(dir)), 0);
	snprintf(path, sizeof(path), "%s/notify", dir);
	fd = listen_dgram(path);
	setenv("NOTIFY_SOCKET", path, 1);
	unsetenv("WATCHDOG_USEC");
	assert_int_equal(kvp_notify_open(&n), 0);
	assert_true(n.fd >= 0);
	assert_int_equal(kvp_notify_send(&n, "READY=1"), 0);
	assert_int_equal(kvp_notify_status(&n, "serving %d\nmodels", 1), 0);
	assert_int_equal(kvp_notify_send(&n, "WATCHDOG=1"), 0);
	recv_expect(fd, "READY=1");
	recv_expect(fd, "STATUS=serving 1 models");
	recv_expect(fd, "WATCHDOG=1");
	assert_int_equal(kvp_notify_watchdog_interval_usec(&n), 0);
	kvp_notify_close(&n);
	close(fd);
	kvp_test_rmtree(dir);
}

static void test_abstract_socket(void **state)
{
	struct kvp_notify n = KVP_NOTIFY_INIT;
	char name[64];
	int fd;

	/* "@name" addresses the abstract namespace, as systemd may pass it */
	snprintf(name, sizeof(name), "@kvp-notify-test-%d", (int)getpid());
	fd = listen_dgram(name);
	setenv("NOTIFY_SOCKET", name, 1);
	assert_int_equal(kvp_notify_open(&n), 0);
	assert_int_equal(kvp_notify_send(&n, "STOPPING=1"), 0);
	recv_expect(fd, "STOPPING=1");
	kvp_notify_close(&n);
	close(fd);
}

static void test_watchdog_env(void **state)
{
	struct kvp_notify n = KVP_NOTIFY_INIT;
	char pid[32];

	/* half of WATCHDOG_USEC, and only when WATCHDOG_PID is ours or unset */
	unsetenv("NOTIFY_SOCKET");
	setenv("WATCHDOG_USEC", "30000000", 1);
	unsetenv("WATCHDOG_PID");
	assert_int_equal(kvp_notify_open(&n), 0);
	assert_int_equal(kvp_notify_watchdog_interval_usec(&n), 15000000);
	snprintf(pid, sizeof(pid), "%d", (int)getpid() + 1);
	setenv("WATCHDOG_PID", pid, 1);
	assert_int_equal(kvp_notify_open(&n), 0);
	assert_int_equal(kvp_notify_watchdog_interval_usec(&n), 0);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	setenv("WATCHDOG_PID", pid, 1);
	assert_int_equal(kvp_notify_open(&n), 0);
	assert_int_equal(kvp_notify_watchdog_interval_usec(&n), 15000000);
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
}

static void test_disabled_and_bad(void **state)
{
	struct kvp_notify n = KVP_NOTIFY_INIT;

	/* no socket: sends succeed doing nothing; a foreign address family is refused */
	unsetenv("NOTIFY_SOCKET");
	assert_int_equal(kvp_notify_open(&n), 0);
	assert_int_equal(n.fd, -1);
	assert_int_equal(kvp_notify_send(&n, "READY=1"), 0);
	kvp_notify_close(&n);
	setenv("NOTIFY_SOCKET", "vsock:2:1234", 1);
	assert_int_equal(kvp_notify_open(&n), -EAFNOSUPPORT);
	unsetenv("NOTIFY_SOCKET");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_path_socket),
		cmocka_unit_test(test_abstract_socket),
		cmocka_unit_test(test_watchdog_env),
		cmocka_unit_test(test_disabled_and_bad),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
