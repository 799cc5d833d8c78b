/* SPDX-License-Identifier: MIT */
/*
 * notify.c - sd_notify datagrams without libsystemd (see notify.h for the protocol).
 *
 * Invariant: when @fd >= 0, @addr/@addr_len hold a valid AF_UNIX address (path or
 * abstract).  Sending never blocks: the socket is non-blocking, and a full manager
 * queue loses a STATUS line rather than stalling the daemon.
 */
#include "util/notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/parse.h"

int kvp_notify_open(struct kvp_notify *n)
{
	const char *path = getenv("NOTIFY_SOCKET");
	const char *wd = getenv("WATCHDOG_USEC");
	const char *wd_pid = getenv("WATCHDOG_PID");
	size_t len;
	uint64_t v;

	n->fd = -1;
	n->watchdog_usec = 0;
	if (wd && kvp_parse_u64(wd, 0, UINT64_MAX, &v) == 0 && v > 0) {
		uint64_t pid;

		if (!wd_pid ||
		    (kvp_parse_u64(wd_pid, 0, UINT64_MAX, &pid) == 0 && pid == (uint64_t)getpid()))
			n->watchdog_usec = v;
	}
	if (!path || !*path)
		return 0;
	if (path[0] != '/' && path[0] != '@')
		return -EAFNOSUPPORT; /* e.g. "vsock:": not for a local daemon */
	len = strlen(path);
	if (len >= sizeof(n->addr.sun_path))
		return -EINVAL;
	memset(&n->addr, 0, sizeof(n->addr));
	n->addr.sun_family = AF_UNIX;
	memcpy(n->addr.sun_path, path, len);
	if (path[0] == '@')
		n->addr.sun_path[0] = '\0'; /* abstract: no NUL terminator counted */
	n->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
				  (path[0] == '/' ? 1 : 0));
	n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (n->fd < 0)
		return -errno;
	return 0;
}

void kvp_notify_close(struct kvp_notify *n)
{
	if (n->fd >= 0)
		close(n->fd);
	n->fd = -1;
}

int kvp_notify_send(const struct kvp_notify *n, const char *msg)
{
	ssize_t r;

	if (n->fd < 0)
		return 0;
	r = sendto(n->fd, msg, strlen(msg), MSG_NOSIGNAL, (const struct sockaddr *)&n->addr,
		   n->addr_len);
	if (r < 0)
		return -errno;
	return 0;
}

int kvp_notify_status(const struct kvp_notify *n, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	if (n->fd < 0)
		return 0;
	strcpy(msg, "STATUS=");
	va_start(ap, fmt);
	vsnprintf(msg + 7, sizeof(msg) - 7, fmt, ap);
	va_end(ap);
	/* the protocol is line based: a newline in the text would start a new key */
	for (char *p = msg; *p; p++)
		if (*p == '\n')
			*p = ' ';
	return kvp_notify_send(n, msg);
}

uint64_t kvp_notify_watchdog_interval_usec(const struct kvp_notify *n)
{
	return n->watchdog_usec / 2;
}
