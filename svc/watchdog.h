/* SPDX-License-Identifier: MIT */
/*
 * watchdog.h - systemd's watchdog: WATCHDOG=1 from the loop thread at half of
 * $WATCHDOG_USEC, off a timerfd in the loop's ring, so a wedged loop stops the pings
 * and systemd restarts the daemon.  Without $WATCHDOG_USEC it does nothing.
 * Thread: init and deinit on the main thread; the pings on the loop thread.
 */
#ifndef KVP_SVC_WATCHDOG_H
#define KVP_SVC_WATCHDOG_H

struct kvp_notify;
struct kvp_server;

/**
 * struct kvp_watchdog - the ping timer
 * @fd:     timerfd, -1 when no watchdog is asked for
 * @notify: where the pings go (borrowed)
 */
struct kvp_watchdog {
	int fd;
	const struct kvp_notify *notify;
};

#define KVP_WATCHDOG_INIT \
	{ \
		.fd = -1 \
	}

/**
 * kvp_watchdog_init() - arm the timer and register it with @srv's loop
 * @w: KVP_WATCHDOG_INIT or deinit'ed
 * Logs the interval, or on failure what failed.
 * Return: 0 (also when systemd asked for no watchdog), or -errno.
 */
int kvp_watchdog_init(struct kvp_watchdog *w, const struct kvp_notify *notify,
		      struct kvp_server *srv);

/* Close the timer; safe after KVP_WATCHDOG_INIT.  The server must be freed first. */
void kvp_watchdog_deinit(struct kvp_watchdog *w);

#endif /* KVP_SVC_WATCHDOG_H */
