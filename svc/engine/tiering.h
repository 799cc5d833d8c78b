/* SPDX-License-Identifier: MIT */
/*
 * tiering.h - the engine's side of the disk tier (shm/tier.h): which cached blocks go to
 * disk and when, what becomes of a write once it lands, and where reads come back to.
 *
 *  - the offloader: above the high watermark of pool use (blocks not free), the coldest
 *    evictable cached blocks are written to the tier and, once written, freed in memory,
 *    down to the low watermark; their index entries stay, on disk (a block whose entry
 *    has a disk copy already is freed at once);
 *  - saves: the published blocks of a preempted sequence are written right away, so they
 *    come back from disk rather than being recomputed if memory needs them meanwhile;
 *  - reads: the scheduler reads on-disk prefix blocks into blocks it holds; completions
 *    come back through a callback, from kvp_tiering_poll();
 *  - a block being written is pinned (never evicted, never changed: only published
 *    blocks are written) until its write completes; then its entry is marked on disk
 *    (kvp_index_set_disk()).
 *
 * The tier turning itself off (EIO, ENOSPC, a short transfer) is logged once here, with
 * the tier's own sentence, and counted; from then on every call is a no-op and the daemon
 * serves from memory.
 *
 * Thread: the engine thread (the tier, the pool and the index are its).
 */
#ifndef KVP_ENGINE_TIERING_H
#define KVP_ENGINE_TIERING_H

#include <stdbool.h>
#include <stdint.h>

#include "shm/index.h"
#include "shm/pool.h"
#include "shm/tier.h"

/**
 * struct kvp_tiering_stats - the tier's counters and the engine's use of it
 * @tier:            kvp_tier_stats(), refreshed at most every 250 ms (it sorts latencies)
 * @offloaded:       blocks the offloader wrote
 * @offload_freed:   ... and freed in memory once written
 * @saved:           blocks written for preempted sequences
 * @reloads:         blocks read back and checked
 * @reload_failures: reads that failed (a checksum, the tier gone): recomputed instead
 * @flushes:         kvp_tiering_flush() calls that emptied the tier
 * @write_mb_s, @read_mb_s: bytes moved per second over the last refresh interval (>= 1 s)
 */
struct kvp_tiering_stats {
	struct kvp_tier_stats tier;
	uint64_t offloaded;
	uint64_t offload_freed;
	uint64_t saved;
	uint64_t reloads;
	uint64_t reload_failures;
	uint64_t flushes;
	double write_mb_s;
	double read_mb_s;
};

struct kvp_tiering;

/* A read finished: @result 0 (the block holds the K/V), or -errno (it holds garbage). */
typedef void (*kvp_tiering_read_fn)(void *ctx, uint64_t cookie, uint32_t block, int result);

/**
 * kvp_tiering_new() - drive @tier for @pool and @index (all borrowed; @tier attached to
 * @index already)
 * @high_pct, @low_pct: watermarks of pool use, low < high <= 100
 * @on_read, @ctx:      where read completions go
 * Return: 0, -EINVAL, -ENOMEM.
 */
int kvp_tiering_new(struct kvp_tiering **out, struct kvp_tier *tier, struct kvp_pool *pool,
		    struct kvp_index *index, uint32_t high_pct, uint32_t low_pct,
		    kvp_tiering_read_fn on_read, void *ctx);

/* Wait for every operation in flight (completions dispatched), unpin, free.  NULL ok. */
void kvp_tiering_free(struct kvp_tiering *t);

/* Whether reads and writes can be queued (a tier, not turned off). */
bool kvp_tiering_usable(const struct kvp_tiering *t);

/* Operations in flight. */
uint32_t kvp_tiering_in_flight(const struct kvp_tiering *t);

/*
 * Cached blocks nobody references that cannot be evicted until writes land: those being
 * written, and their idle ancestors (a block is evicted only as a leaf).
 */
uint32_t kvp_tiering_pinned_idle(struct kvp_tiering *t);

/**
 * kvp_tiering_read() - queue the read of on-disk entry @hit into @block (held by the
 * caller, unpublished, untouched until the completion)
 * Return: 0; -EBUSY (queue full: try again later); -ESTALE (the slot changed since the
 * lookup); -ENODEV (the tier is off).
 */
int kvp_tiering_read(struct kvp_tiering *t, const struct kvp_index_disk_hit *hit, uint32_t block,
		     uint64_t cookie);

/* Queue writes of published @blocks without a disk copy (a preempted sequence's). */
uint32_t kvp_tiering_save(struct kvp_tiering *t, const uint32_t *blocks, uint32_t n);

/*
 * Write-back: queue writes of every published block without a disk copy (ancestors
 * first, as the offloader does), scanning blocks from *@cursor on; they stay in memory.
 * Return: true once the scan has passed the last block (or the tier is off); false when
 * the queue filled (call again after completions, from *@cursor).
 */
bool kvp_tiering_writeback(struct kvp_tiering *t, uint32_t *cursor);

/*
 * The offloader (see top): queue what the watermarks ask for, pinning at most @spare
 * blocks nobody references (a pinned block cannot be handed out until its write lands:
 * the scheduler passes what no reservation claims).  Return: offload writes queued.
 */
uint32_t kvp_tiering_offload(struct kvp_tiering *t, uint32_t spare);

/* Whether the offloader would write something now. */
bool kvp_tiering_over_watermark(const struct kvp_tiering *t);

/*
 * Reap completions (reads to the callback); with @wait, first wait for at least one when
 * anything is in flight.  Return: completions handled.
 */
uint32_t kvp_tiering_poll(struct kvp_tiering *t, bool wait);

/*
 * Empty the tier (`kvpool flush --tier`): wait for everything in flight (completions
 * dispatched), then kvp_tier_flush().  Return: 0, -ENODEV when off, or its -errno.
 */
int kvp_tiering_flush(struct kvp_tiering *t);

/*
 * Fill @st; the tier's own counters are refreshed when @now_ns is 250 ms past the last,
 * or with @now (the engine about to sleep: the report must not stay stale).
 */
void kvp_tiering_stats(struct kvp_tiering *t, struct kvp_tiering_stats *st, uint64_t now_ns,
		       bool now);

#endif /* KVP_ENGINE_TIERING_H */
