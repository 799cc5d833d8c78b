/* SPDX-License-Identifier: MIT */
/*
 * notify.h - the sd_notify datagram protocol, reimplemented (no libsystemd).
 *
 * systemd passes $NOTIFY_SOCKET (a path, or "@name" for the abstract namespace) to a
 * Type=notify service; the service sends newline-separated KEY=VALUE datagrams to it:
 * READY=1 once serving, STATUS=text, WATCHDOG=1 at least every $WATCHDOG_USEC (we send
 * at half of it), STOPPING=1 when draining.  Without $NOTIFY_SOCKET every call is a no-op.
 *
 * Thread: kvp_notify_open()/close() on the main thread; kvp_notify_send() from any
 * thread (one sendto(2) on a datagram socket).
 */
#ifndef KVP_UTIL_NOTIFY_H
#define KVP_UTIL_NOTIFY_H

#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

/**
 * struct kvp_notify - the notification channel
 * @fd:            datagram socket, -1 when not under a notify-aware manager
 * @addr:          $NOTIFY_SOCKET as an address
 * @addr_len:      bytes of @addr used
 * @watchdog_usec: $WATCHDOG_USEC when it applies to this process, else 0
 */
struct kvp_notify {
	int fd;
	struct sockaddr_un addr;
	socklen_t addr_len;
	uint64_t watchdog_usec;
};

#define KVP_NOTIFY_INIT \
	{ \
		.fd = -1 \
	}

/**
 * kvp_notify_open() - read $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID
 *
 * A missing $NOTIFY_SOCKET leaves @n disabled and returns 0.  $WATCHDOG_USEC counts only
 * when $WATCHDOG_PID is unset or names this process.
 * Return: 0, -EINVAL for a malformed variable, -EAFNOSUPPORT for an address family
 * other than AF_UNIX, or -errno of socket(2).
 */
int kvp_notify_open(struct kvp_notify *n);

/* Close the socket; safe on a disabled or never-opened channel. */
void kvp_notify_close(struct kvp_notify *n);

/**
 * kvp_notify_send() - send one datagram, e.g. "READY=1\nSTATUS=serving"
 * Return: 0 (also when disabled), or -errno of sendto(2).
 */
int kvp_notify_send(const struct kvp_notify *n, const char *msg);

/* "STATUS=<printf text>" */
int kvp_notify_status(const struct kvp_notify *n, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* How often to send WATCHDOG=1 (half of $WATCHDOG_USEC), or 0 when no watchdog is set. */
uint64_t kvp_notify_watchdog_interval_usec(const struct kvp_notify *n);

#endif /* KVP_UTIL_NOTIFY_H */
