/* SPDX-License-Identifier: MIT */
/*
 * reclaim.c - idle per-uid domains reclaimed off a timer in the loop's ring (see
 * reclaim.h).
 *
 * Invariant: a domain is closed only after its engine said it holds nothing
 * (kvp_sched_idle(): the write-back of this idle spell done, every message posted to it
 * handled) and while no connection of its uid is open; both hold until the free, since
 * only this thread posts to the engine and accepts HELLOs.
 * Thread: the loop thread (init/deinit: the main thread).
 */
#include "svc/reclaim.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "ipc/server.h"
#include "shm/pool.h"
#include "svc/conns.h"
#include "svc/domain.h"
#include "svc/domcfg.h"
#include "util/log.h"
#include "svc/engine/engine.h"
#include "util/time.h"

/* Free domain @i's engine and memory, keep its tier file, and give its slot back. */
static void reclaim(struct kvp_reclaim *r, uint32_t i, uint64_t now_ns)
{
	struct kvp_domains *d = r->domains;
	struct kvp_domain *dom = &d->dom[i];
	uint64_t pool_mib = dom->pool ? (uint64_t)kvp_pool_n_blocks(dom->pool) *
							kvp_pool_geom(dom->pool)->block_stride >>
						20 :
					0;
	double idle_s = (double)(now_ns - dom->idle_since_ns) / 1e9;
	bool tier = *dom->tier_path;
	char name[KVP_DOMAIN_NAME_MAX];
	uint32_t moved;

	snprintf(name, sizeof(name), "%s", dom->name);
	/* the thread stops and is joined; the tier's writes land first (kvp_tiering_free) */
	kvp_sched_free(dom->sched);
	dom->sched = NULL;
	kvp_domain_close(dom); /* the tier file is closed, not removed */
	moved = kvp_domains_remove(d, i);
	if (moved != i)
		kvp_conns_move_domain(r->conns, moved, i);
	d->reclaimed++;
	kvp_log(LOG_INFO,
		"domain %s: reclaimed after %.1f s idle: %llu MiB pool freed%s; %u domain(s) open",
		name, idle_s, (unsigned long long)pool_mib, tier ? ", tier file kept" : "",
		d->n_domains);
}

uint32_t kvp_reclaim_run(struct kvp_reclaim *r, uint64_t now_ns)
{
	struct kvp_domains *d = r->domains;
	uint32_t n = 0;

	/* from the last: a reclaimed slot takes the last entry, which was looked at already */
	for (uint32_t i = d->n_domains; i-- > 0;) {
		struct kvp_domain *dom = &d->dom[i];

		if (!dom->on_hello || dom->n_conns || !dom->sched ||
		    now_ns - dom->idle_since_ns < r->idle_ns)
			continue;
		if (!dom->reclaim_ticket) {
			dom->reclaim_ticket = kvp_sched_writeback(dom->sched);
			continue;
		}
		if (!kvp_sched_idle(dom->sched, dom->reclaim_ticket, now_ns))
			continue;
		reclaim(r, i, now_ns);
		n++;
	}
	return n;
}

static void on_tick(void *arg)
{
	kvp_reclaim_run(arg, kvp_now_ns());
}

int kvp_reclaim_init(struct kvp_reclaim *r, struct kvp_domains *domains, struct kvp_conns *conns,
		     uint32_t idle_ms, struct kvp_server *srv)
{
	uint32_t tick_ms = idle_ms / 4;
	struct itimerspec its = { 0 };
	int ret;

	r->fd = -1;
	r->domains = domains;
	r->conns = conns;
	r->idle_ns = (uint64_t)idle_ms * 1000000;
	if (domains->mode != KVP_DOMAINS_PER_UID || !idle_ms)
		return 0;
	tick_ms = tick_ms < 20 ? 20 : tick_ms > 1000 ? 1000 : tick_ms;
	r->fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (r->fd < 0) {
		ret = -errno;
		kvp_log(LOG_ERR, "domains: reclaim timer: %s", strerror(-ret));
		return ret;
	}
	its.it_interval.tv_sec = tick_ms / 1000;
	its.it_interval.tv_nsec = (long)(tick_ms % 1000) * 1000000;
	its.it_value = its.it_interval;
	if (timerfd_settime(r->fd, 0, &its, NULL) < 0) {
		ret = -errno;
		kvp_log(LOG_ERR, "domains: reclaim timer: %s", strerror(-ret));
		goto err_close;
	}
	ret = kvp_server_add_wakeup(srv, r->fd, on_tick, r);
	if (ret < 0) {
		kvp_log(LOG_ERR, "domains: register the reclaim timer: %s", strerror(-ret));
		goto err_close;
	}
	kvp_log(LOG_INFO,
		"domains: idle per-uid domains reclaimed after %u ms (checked every %u ms)",
		idle_ms, tick_ms);
	return 0;

err_close:
	close(r->fd);
	r->fd = -1;
	return ret;
}

void kvp_reclaim_deinit(struct kvp_reclaim *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
}
