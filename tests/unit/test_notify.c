/* SPDX-License-Identifier: MIT */
/*
 * test_notify.c - sd_notify without libsystemd: datagrams reach $NOTIFY_SOCKET (path and
 * abstract), the watchdog interval is half of $WATCHDOG_USEC and only for our pid, and
 * without $NOTIFY_SOCKET every call is a harmless no-op.  And the other half of the
 * sd-daemon contract, the logger: "<N>" priority prefixes on stderr, one line per call.
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

#include "util/log.h"
#include "util/notify.h"
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

/* Run kvp_log() calls with stderr going to a file; return what they wrote. */
static void capture(bool prefix, int level, char *out, size_t cap)
{
	char path[] = "/tmp/kvp-log-XXXXXX";
	int fd = mkstemp(path), saved = dup(STDERR_FILENO);
	char longer[2000];
	ssize_t n;

	assert_true(fd >= 0 && saved >= 0);
	unlink(path);
	memset(longer, 'x', sizeof(longer) - 1);
	longer[sizeof(longer) - 1] = '\0';
	kvp_log_init(level, prefix);
	assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
	errno = EAGAIN;
	kvp_log(LOG_ERR, "pool: create %u blocks: %s", 4u, "no memory");
	assert_int_equal(errno, EAGAIN); /* preserved */
	kvp_log(LOG_WARNING, "notify: unusable");
	kvp_log(LOG_INFO, "daemon: serving");
	kvp_log(LOG_DEBUG, "engine: step");
	kvp_log(LOG_NOTICE, "%s", longer);
	assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
	close(saved);
	n = pread(fd, out, cap - 1, 0);
	assert_true(n > 0);
	out[n] = '\0';
	close(fd);
	kvp_log_init(LOG_INFO, true);
}

static void test_log_prefixes(void **state)
{
	char buf[8192];
	const char *last;

	static const char journald[] = "<3>pool: create 4 blocks: no memory\n"
				       "<4>notify: unusable\n<6>daemon: serving\n<5>xxx";
	static const char terminal[] = "kvpoold: err: pool: create 4 blocks: no memory\n"
				       "kvpoold: warning: notify: unusable\n"
				       "kvpoold: daemon: serving\nkvpoold: engine: step\n"
				       "kvpoold: xxx";

	/* journald form: "<N>" + message, one line each; debug dropped at level info */
	capture(true, LOG_INFO, buf, sizeof(buf));
	assert_memory_equal(buf, journald, sizeof(journald) - 1);
	assert_null(strstr(buf, "engine: step"));
	/* a line longer than the buffer is cut, still one line */
	last = strstr(buf, "<5>");
	assert_non_null(last);
	assert_non_null(strchr(last, '\n'));
	assert_int_equal(strchr(last, '\n')[1], '\0');
	assert_true(strlen(last) <= 1024);

	/* terminal form: "kvpoold: ", the level named for errors and warnings; debug shown */
	capture(false, LOG_DEBUG, buf, sizeof(buf));
	assert_memory_equal(buf, terminal, sizeof(terminal) - 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_path_socket),  cmocka_unit_test(test_abstract_socket),
		cmocka_unit_test(test_watchdog_env), cmocka_unit_test(test_disabled_and_bad),
		cmocka_unit_test(test_log_prefixes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
