/* SPDX-License-Identifier: MIT */
/*
 * watchdog.c - WATCHDOG=1 pings off a timerfd in the loop's ring (see watchdog.h).
 *
 * A timerfd read gives 8 bytes, the expiry count, as an eventfd read does, so the
 * server's wakeup path (kvp_server_add_wakeup()) serves it as it serves the engine's
 * eventfd.
 */
#include "svc/watchdog.h"

#include <errno.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "ipc/server.h"
#include "util/log.h"
#include "util/notify.h"

static void on_tick(void *arg)
{
	struct kvp_watchdog *w = arg;

	/* sent from the loop: a wedged loop stops the pings and systemd restarts us */
	kvp_notify_send(w->notify, "WATCHDOG=1");
}

int kvp_watchdog_init(struct kvp_watchdog *w, const struct kvp_notify *notify,
		      struct kvp_server *srv)
{
	uint64_t usec = kvp_notify_watchdog_interval_usec(notify);
	struct itimerspec its = { 0 };
	int r;

	w->fd = -1;
	w->notify = notify;
	if (!usec)
		return 0;
	w->fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (w->fd < 0) {
		r = -errno;
		kvp_log(LOG_ERR, "notify: watchdog timer: %s", strerror(-r));
		return r;
	}
	its.it_interval.tv_sec = (time_t)(usec / 1000000);
	its.it_interval.tv_nsec = (long)(usec % 1000000) * 1000;
	its.it_value = its.it_interval;
	if (timerfd_settime(w->fd, 0, &its, NULL) < 0) {
		r = -errno;
		kvp_log(LOG_ERR, "notify: watchdog timer: %s", strerror(-r));
		goto err_close;
	}
	r = kvp_server_add_wakeup(srv, w->fd, on_tick, w);
	if (r < 0) {
		kvp_log(LOG_ERR, "notify: register the watchdog timer: %s", strerror(-r));
		goto err_close;
	}
	kvp_log(LOG_INFO, "notify: watchdog ping every %llu ms", (unsigned long long)(usec / 1000));
	return 0;

err_close:
	close(w->fd);
	w->fd = -1;
	return r;
}

void kvp_watchdog_deinit(struct kvp_watchdog *w)
{
	if (w->fd >= 0)
		close(w->fd);
	w->fd = -1;
}
