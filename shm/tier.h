/* SPDX-License-Identifier: MIT */
/*
 * tier.h - the disk tier: cold KV blocks in a preallocated file, written and read back
 * with io_uring and O_DIRECT, checked on every read, found again after a restart.
 *
 * The file (format in shm/tier_fmt.h, docs/tier.md) is a header and fixed-size slots of
 * one block each.  A slot is FREE, WRITING (a write in flight) or VALID (a sound block,
 * maybe with reads in flight).  VALID slots form an LRU (write or read = most recent);
 * a write into a full tier takes the least recently used VALID slot nobody is reading,
 * and tells the owner through the drop callback (the index forgets the entry).
 *
 * I/O: one io_uring, up to queue_depth operations in flight, each moving one block
 * between the file and its pool block directly (no copy): one readv/writev of the header
 * region (an aligned buffer of the tier's) and the pool block.  The file is registered
 * with the ring.  Registering the pool as fixed buffers is opt-in (KVP_TIER_FIXED_BUFS):
 * it takes two requests per block instead of one vectored one, and it pins the whole
 * pool at start; whether it pays depends on the machine and the page size
 * (tests/bench/bench_tier.c measures both; figures in docs/tier.md).  When asked for and
 * refused (RLIMIT_MEMLOCK), plain I/O is used and the stats say so.
 *
 * Failures: an I/O error, ENOSPC, a file that cannot be opened, created, locked,
 * preallocated or opened O_DIRECT turns the tier off ("degraded"): every VALID slot is
 * dropped (callback), operations in flight complete with their result, and every later
 * call returns -ENODEV.  kvp_tier_error() says why, once, for the caller to log; the
 * counters say how often.  A block that fails its check on a read is dropped and reported
 * as -EBADMSG: never served (it is read again first: reads do go astray now and then,
 * docs/tier.md).  Nothing here aborts on bad input or a bad disk.
 *
 * Thread: a tier is used by one thread at a time, with no locks: opened at daemon start
 * (that blocks: preallocation and the rebuild scan), then driven by the engine thread.
 * Only kvp_tier_wait(), kvp_tier_flush() and kvp_tier_free() block afterwards; write and
 * read only queue I/O, kvp_tier_poll() only reaps what finished.  The pool's owner (the
 * same thread) keeps a block being written unchanged (pinned) and a block being read
 * into unused (held, not published) until its completion is reaped.
 */
#ifndef KVP_SHM_TIER_H
#define KVP_SHM_TIER_H

#include <stdint.h>
#include <sys/stat.h>

#include "shm/index.h"
#include "shm/pool.h"
#include "shm/tier_fmt.h"

/* Flags of struct kvp_tier_config. */
#define KVP_TIER_SCAN_FULL 1u  /* rebuild reads and checks every block's K/V too */
#define KVP_TIER_FIXED_BUFS 2u /* register the pool with io_uring (see below) */

#define KVP_TIER_QD_DEFAULT 32u
#define KVP_TIER_QD_MAX 256u
#define KVP_TIER_LAT_SAMPLES 1024u /* reload latencies kept for p50/p99 */
#define KVP_TIER_LOCK_WAIT_MS 5000u
#define KVP_TIER_REREADS 2u /* a read failing its check is read again this often */

/**
 * struct kvp_tier_config - what kvp_tier_open() makes
 * @path:        the tier file; created (mode 0600) if missing, its directory must exist
 * @max_bytes:   file size; rounded down to whole slots (at least one slot)
 * @model_fp:    fingerprint of the model the blocks belong to
 * @queue_depth: operations in flight, 1..KVP_TIER_QD_MAX (0: KVP_TIER_QD_DEFAULT)
 * @flags:       KVP_TIER_*
 * @lock_wait_ms: how long to wait for the file's lock (0: KVP_TIER_LOCK_WAIT_MS).  A
 *               killed predecessor's writes in flight keep the file, and its lock, until
 *               they land; waiting for the lock is what keeps the scan from racing them.
 *
 * The block shape is the pool's.
 */
struct kvp_tier_config {
	const char *path;
	uint64_t max_bytes;
	uint8_t model_fp[16];
	uint32_t queue_depth;
	uint32_t flags;
	uint32_t lock_wait_ms;
};

enum kvp_tier_op {
	KVP_TIER_OP_WRITE = 1,
	KVP_TIER_OP_READ = 2,
};

/**
 * struct kvp_tier_done - one finished operation (kvp_tier_poll())
 * @cookie: the caller's, as given to kvp_tier_write()/kvp_tier_read()
 * @uid:    the entry's uid
 * @op:     enum kvp_tier_op
 * @slot:   the slot
 * @block:  the pool block written from / read into
 * @result: 0; -EBADMSG for a read that failed its check (the slot is dropped, the block's
 *          contents are garbage); another -errno for an I/O error (the tier is degraded
 *          now; a failed write's slot is free, a failed read's block is garbage)
 */
struct kvp_tier_done {
	uint64_t cookie;
	uint64_t uid;
	uint32_t op;
	uint32_t slot;
	uint32_t block;
	int32_t result;
};

/**
 * struct kvp_tier_found - a sound block found by the rebuild scan
 * @slot:       where it is
 * @generation: its write sequence number
 * @rec:        its identity (rec.tokens owned by the tier, valid until the found list is
 *              released by kvp_tier_attach_index() or kvp_tier_forget_found())
 */
struct kvp_tier_found {
	uint32_t slot;
	uint64_t generation;
	struct kvp_index_rec rec;
};

/* Counters for the status socket; totals since open unless said otherwise. */
struct kvp_tier_stats {
	uint64_t slots;	     /* slots in the file */
	uint64_t slot_bytes; /* bytes per slot (header region + K/V) */
	uint64_t file_bytes;
	uint64_t blocks;      /* sound blocks on disk now (VALID slots) */
	uint64_t bytes;	      /* their K/V bytes */
	uint64_t writes;      /* blocks written */
	uint64_t write_bytes; /* bytes written (whole slots) */
	uint64_t reads;	      /* blocks read back and checked */
	uint64_t read_bytes;
	uint64_t evictions;	    /* sound blocks dropped to make room */
	uint64_t checksum_failures; /* blocks that failed their check twice: dropped,
					 * never served */
	uint64_t reread_recovered;  /* reads (and scan reads) that failed their check and
					 * passed when read again */
	uint64_t errors;	    /* I/O and setup errors (the first degrades) */
	uint64_t in_flight;	    /* operations queued now */
	int32_t degraded;	    /* 0, or the -errno that turned the tier off */
	uint32_t fixed_buffers;	    /* 1 if the pool is registered with io_uring */
	uint32_t sparse;	    /* 1 if the file system could not preallocate */
	uint32_t reset;		    /* 1 if open (re)initialised the file (new, other model...) */
	uint64_t type_resets;	    /* 1 if it did so because the file was written with
					 * another K/V type (its blocks recomputed) */
	/* the rebuild scan at open */
	uint64_t scan_slots;   /* slots looked at */
	uint64_t scan_valid;   /* sound blocks (kept) */
	uint64_t scan_empty;   /* never written */
	uint64_t scan_corrupt; /* torn or corrupt: dropped, space reused */
	uint64_t scan_foreign; /* sound but of another model/geometry/incarnation */
	uint64_t scan_bytes;   /* bytes read */
	uint64_t scan_ns;      /* time the scan took */
	/* kvp_tier_attach_index() */
	uint64_t rebuilt;    /* blocks given back to the index */
	uint64_t orphans;    /* blocks whose parent was not found: space reused */
	uint64_t duplicates; /* older copies of an entry found twice */
	/* reload latency (read submit to checked completion) over the last samples */
	uint64_t reload_samples;
	uint64_t reload_p50_ns;
	uint64_t reload_p99_ns;
};

struct kvp_tier;

/* Called when a VALID slot stops holding its block (evicted, failed a check, flushed, or
 * the tier degraded).  Not called for kvp_tier_release(). */
typedef void (*kvp_tier_drop_fn)(void *ctx, uint32_t slot, uint64_t uid);

/**
 * kvp_tier_open() - open or create the tier file, preallocate it, scan it
 * @out:  out; free with kvp_tier_free() (before the pool)
 * @cfg:  configuration (copied)
 * @pool: the pool blocks move from and to (borrowed; must outlive the tier)
 *
 * A file with a sound header of the same geometry and model keeps its blocks (and its
 * tier id and hash seed); anything else of ours is re-initialised (new ids: old blocks
 * become foreign).  A file that is not a tier file is never overwritten.  The scan reads
 * every slot's header region (every slot's K/V as well with KVP_TIER_SCAN_FULL) and
 * keeps the sound blocks as VALID, in the LRU by write order; kvp_tier_found() lists them.
 * A file or I/O problem does not fail the call: the tier comes back degraded.
 * Return: 0 (check kvp_tier_stats().degraded); -EINVAL for a bad config (no path, a
 * size below one slot, a bad queue depth); -ENOMEM.
 */
int kvp_tier_open(struct kvp_tier **out, const struct kvp_tier_config *cfg, struct kvp_pool *pool);

/* Wait for operations in flight (their results are discarded), close, free.  NULL ok. */
void kvp_tier_free(struct kvp_tier *t);

/**
 * kvp_tier_check_dir() - may a tier file live in the directory of @path?
 *
 * Only in a directory owned by the daemon's euid that neither its group nor others may
 * write: anyone else who can write there could plant a link or a file of theirs as a
 * tier file.  kvp_tier_open() checks the directory it opens the file in the same way,
 * opens the file O_NOFOLLOW and refuses an existing one that is not a regular file of
 * the daemon's euid with one name (the tier is off then, saying why).
 * @err: out; the refusal, naming the directory, its mode and owner
 * Return: 0; -EPERM (not ours, or writable by others), -ENOTDIR; or the -errno of
 * stat() (-ENOENT: no such directory, @err untouched).
 */
int kvp_tier_check_dir(const char *path, char *err, size_t cap);

/* kvp_tier_check_dir() of directory @dir, stat()ed as @st. */
int kvp_tier_check_dir_stat(const char *dir, const struct stat *st, char *err, size_t cap);

/* Sound blocks found by the scan, in slot order. */
uint32_t kvp_tier_n_found(const struct kvp_tier *t);
const struct kvp_tier_found *kvp_tier_found(const struct kvp_tier *t, uint32_t i);
void kvp_tier_forget_found(struct kvp_tier *t);

/* The tier's random hash seed (for kvp_index_set_seed()). */
uint64_t kvp_tier_hash_seed(const struct kvp_tier *t);

/* Largest uid or puid among the sound blocks found (for kvp_index_set_uid_floor()). */
uint64_t kvp_tier_uid_floor(const struct kvp_tier *t);

/* Register @fn for dropped slots (one; NULL unregisters). */
void kvp_tier_set_drop(struct kvp_tier *t, kvp_tier_drop_fn fn, void *ctx);

/**
 * kvp_tier_attach_index() - give the tier's blocks to an empty index and keep it told
 * Seeds @idx's buckets with the tier's seed, reserves an entry per slot, inserts the
 * found blocks parents first (ascending uid; of two copies of one uid the newer), releases
 * the slots of orphans and duplicates, sets the uid floor, registers the index as the
 * drop callback, and forgets the found list.  A degraded tier only seeds the index.
 * Call before the index is used: uids of new entries must come after the tier's.
 * Return: 0; -EBUSY if @idx has entries; -EINVAL if @idx is over another pool; -ENOMEM.
 */
int kvp_tier_attach_index(struct kvp_tier *t, struct kvp_index *idx);

/**
 * kvp_tier_write() - queue the write of @block to a slot
 * @rec:    the block's identity (kvp_index_block_rec()); copied
 * @block:  the pool block; its K/V must not change until the completion (pin it)
 * @cookie: returned in the completion
 *
 * Takes a free slot, else evicts the least recently used sound block nobody reads
 * (drop callback).  The K/V is summed now, on the calling thread.  On success, complete
 * with kvp_index_set_disk(idx, block, rec->uid, slot).
 * Return: the slot (>= 0); -ENODEV when the tier is off; -EBUSY when queue_depth
 * operations are in flight or every slot is busy (reap completions and retry); -EINVAL.
 */
int kvp_tier_write(struct kvp_tier *t, const struct kvp_index_rec *rec, uint32_t block,
		   uint64_t cookie);

/**
 * kvp_tier_read() - queue the read of @slot into @block
 * @slot, @uid: from kvp_index_lookup_disk()
 * @block:  a pool block the caller holds and nobody else uses until the completion
 * @cookie: returned in the completion
 *
 * The completion checks the header (tier, slot, uid, chain hash, every field) and the
 * sum of header and K/V before it reports 0; the bytes past block_bytes are zeroed.  A
 * read that fails the check is read again (up to KVP_TIER_REREADS times) before the
 * block is dropped (-EBADMSG).
 * Return: 0; -ENODEV when the tier is off; -ESTALE when @slot no longer holds @uid;
 * -EBUSY when queue_depth operations are in flight; -EINVAL.
 */
int kvp_tier_read(struct kvp_tier *t, uint32_t slot, uint64_t uid, uint32_t block, uint64_t cookie);

/**
 * kvp_tier_poll() - reap finished operations without waiting
 * @done: out; up to @max completions
 *
 * Each read returned has been checked here, on the calling thread (a sum over every byte
 * of the block: docs/tier.md gives a measured cost).  A caller that wants the disk kept
 * busy reaps a few at a time and queues more in between, rather than checking a whole
 * queue's worth while the device idles.
 * Return: number filled (>= 0).
 */
int kvp_tier_poll(struct kvp_tier *t, struct kvp_tier_done *done, uint32_t max);

/**
 * kvp_tier_wait() - like kvp_tier_poll(), but waits for at least one completion when
 * operations are in flight (for a step that needs a block being read)
 * Return: number filled; 0 only when nothing is in flight.
 */
int kvp_tier_wait(struct kvp_tier *t, struct kvp_tier_done *done, uint32_t max);

/* The caller gives up the block in a VALID @slot (no callback).  0, -EBUSY, -EINVAL. */
int kvp_tier_release(struct kvp_tier *t, uint32_t slot);

/**
 * kvp_tier_flush() - empty the tier: a new tier id in the header (every block on disk is
 * foreign from now on, also after a restart), every VALID slot dropped (callback)
 * Return: 0; -EBUSY while operations are in flight; -ENODEV when off; -errno of the
 * header write (the tier is degraded then).
 */
int kvp_tier_flush(struct kvp_tier *t);

/* Fill @st (sorts the latency samples: O(KVP_TIER_LAT_SAMPLES log)). */
void kvp_tier_stats(const struct kvp_tier *t, struct kvp_tier_stats *st);

/* Why the tier is off, e.g. "tier: open /var/lib/x: Read-only file system; memory-only";
 * "" while it is on. */
const char *kvp_tier_error(const struct kvp_tier *t);

/*
 * Test hook: the next @n reads to complete lose their data (a byte of the block changes
 * before the check), as a read whose DMA went astray would.
 */
void kvp_tier_debug_lose_reads(struct kvp_tier *t, uint32_t n);

/* The layout in use (slot count, sizes). */
const struct kvp_tier_layout *kvp_tier_layout(const struct kvp_tier *t);

#endif /* KVP_SHM_TIER_H */
