/* SPDX-License-Identifier: MIT */
/*
 * reclaim.h - per-uid trust domains that nobody uses any more give their memory and
 * their slot back (domains.idle_reclaim_ms).
 *
 * A domain made on a HELLO (not the daemon's own, made at start) is idle when nothing of
 * its clients is held: no connection of its uid is open, its engine has no request
 * queued or running, no lease, no block with a cache pin (PIN) and no TTL given that has
 * not run out (a TTL is a promise to keep the blocks; the domain waits for it).  Once it
 * has been idle for idle_reclaim_ms, its engine writes every cached block that has no disk
 * copy to the domain's tier file (kvp_sched_writeback()); when that is done and it is
 * still idle, the engine thread is stopped and joined, the pool segment, the index and
 * the read-only fd are freed, the tier file is closed (kept, never deleted), and the
 * slot is free for any uid.  The same uid coming back later gets a new domain whose index
 * is rebuilt from that file, so its prefixes hit from disk.
 *
 * The checks run off a timerfd in the loop's ring, every idle_reclaim_ms / 4 (20 ms ..
 * 1 s); only a HELLO of the domain's uid interrupts it (the write-back is harmless: the
 * blocks stay in memory too).
 * Thread: init and deinit on the main thread; the checks on the loop thread.
 */
#ifndef KVP_SVC_RECLAIM_H
#define KVP_SVC_RECLAIM_H

#include <stdint.h>

struct kvp_conns;
struct kvp_domains;
struct kvp_server;

/**
 * struct kvp_reclaim - the idle-domain reaper
 * @fd:      timerfd, -1 when off (not per-uid mode, or idle_reclaim_ms = 0)
 * @domains: the table (borrowed)
 * @conns:   the connection registry, whose domain indexes follow a moved entry (borrowed)
 * @idle_ns: domains.idle_reclaim_ms
 */
struct kvp_reclaim {
	int fd;
	struct kvp_domains *domains;
	struct kvp_conns *conns;
	uint64_t idle_ns;
};

#define KVP_RECLAIM_INIT \
	{ \
		.fd = -1 \
	}

/**
 * kvp_reclaim_init() - arm the check timer in @srv's loop (per-uid mode, @idle_ms > 0)
 * Return: 0 (also when off), or -errno (logged).
 */
int kvp_reclaim_init(struct kvp_reclaim *r, struct kvp_domains *domains, struct kvp_conns *conns,
		     uint32_t idle_ms, struct kvp_server *srv);

/*
 * One round of checks at CLOCK_MONOTONIC @now_ns (the timer's callback; loop thread).
 * Return: domains reclaimed.
 */
uint32_t kvp_reclaim_run(struct kvp_reclaim *r, uint64_t now_ns);

/* Close the timer; safe after KVP_RECLAIM_INIT.  The server must be freed first. */
void kvp_reclaim_deinit(struct kvp_reclaim *r);

#endif /* KVP_SVC_RECLAIM_H */
