/* SPDX-License-Identifier: MIT */
/*
 * remote.h - the remote tier: KV blocks shared between kvpoold hosts through a
 * Redis-protocol store (Redis 7, Valkey), below memory and the disk tier.
 *
 * Keys and values: codec.h (the disk tier's block record under a digest of chain hash,
 * extra keys, layout and numerics class).  Trust domains: one ACL user each, confined to
 * its key prefix (acl.h).  docs/remote.md has the whole picture.
 *
 * Write (kvp_remote_publish()): asynchronous.  The engine hands over a block's identity
 * and a pointer to its K/V; the I/O thread encodes the record (copying the K/V) and
 * sends `SET key value NX EX ttl`.  Each domain's queue is bounded: a publish that finds
 * it full is dropped and counted, never waited for.  In `selective` mode only blocks
 * used a second time or evicted are published.
 *
 * Read (kvp_remote_fetch()): after memory and the disk tier stopped at block i, the
 * engine asks for blocks i, i+1, ... (bounded) with one free buffer each.  The I/O
 * thread sends one pipelined EXISTS per block, counts the leading blocks found, weighs
 * fetching them against recomputing them (cost.h), then sends one pipelined GET per
 * block it decided to fetch, under the fetch's deadline, and checks each value as it
 * arrives, straight into its buffer.  The first block that is missing, fails its check or
 * misses the deadline ends the usable prefix; the completion says how many leading
 * buffers hold checked K/V.
 *
 * Failure: connects and replies have deadlines (conn.h); each domain has a circuit
 * breaker (breaker.h) that opens after repeated connection errors.  While it is open,
 * fetches are refused at once (-ENODEV) and publishes dropped: the engine never waits
 * for a store that is gone.  The I/O thread probes it back.  A new tier starts open and
 * probes at once; kvp_remote_wait_ready() gives the first probes' verdict for the
 * start-up log ("no store: local-only").
 *
 * Threading.  Every connection is owned by one I/O thread per tier, which runs its own
 * poll() loop over non-blocking hiredis contexts (two per domain: fetches never queue
 * behind uploads).  The engine thread only takes a mutex for O(1) queue work and writes
 * an eventfd; it never touches a socket, never waits on the network, and does none of
 * the encoding, checksumming or copying of K/V.  Why a thread and not non-blocking
 * hiredis on the engine's own loop: the engine spends tens of milliseconds at a time
 * inside forward passes, during which nobody would read replies (deadlines would measure
 * compute, not the store) and the checks of fetched blocks (~20 us per 512 KiB) would
 * land on it; a thread of its own overlaps the network with compute.
 *
 * Contract for the caller (the engine):
 * - kvp_remote_publish(): on 0, keep the K/V at @kv unchanged (a pinned or referenced
 *   pool block) until the completion with its @tag comes out of kvp_remote_poll(); that
 *   happens once the record has been encoded (copied), before the store answers.
 * - kvp_remote_fetch(): on 0, leave the @dest buffers alone (held, unpublished) until
 *   the completion with its @tag; it comes by the fetch's deadline (plus one poll
 *   interval).  Then publish dest[0 .. result) in order; compute the rest.
 * - Poll completions whenever the event fd is readable (or once per engine step).
 * - kvp_remote_free() stops the I/O thread: after it returns, no buffer is touched.
 * Publish, fetch, poll and the route summary may be called from any one thread (they
 * lock); kvp_remote_stats() from any thread.
 */
#ifndef KVP_SHM_REMOTE_REMOTE_H
#define KVP_SHM_REMOTE_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool/layout.h"
#include "shm/index.h"
#include "shm/remote/bloom.h"
#include "shm/remote/config.h"

#define KVP_REMOTE_LAT_SAMPLES 1024u /* fetch latencies kept for p50/p99 */

struct kvp_remote;

/* Why a block is offered for publishing (the publish mode decides). */
enum kvp_remote_why {
	KVP_REMOTE_WHY_CREATED = 0, /* filled (prompt blocks at once, generated at the end) */
	KVP_REMOTE_WHY_REUSED = 1,  /* hit by a second request */
	KVP_REMOTE_WHY_EVICTED = 2, /* about to leave memory */
};

enum kvp_remote_done_kind {
	KVP_REMOTE_DONE_PUBLISH = 1,
	KVP_REMOTE_DONE_FETCH = 2,
};

/* Why a fetch stopped where it did. */
enum kvp_remote_stop {
	KVP_REMOTE_STOP_END = 0,      /* every block asked for was served */
	KVP_REMOTE_STOP_MISS = 1,     /* a block is not in the store (never written, expired,
				       * evicted): a hole ends the prefix */
	KVP_REMOTE_STOP_COST = 2,     /* recomputing is estimated to be faster */
	KVP_REMOTE_STOP_DEADLINE = 3, /* the deadline, or what could arrive before it */
	KVP_REMOTE_STOP_VERIFY = 4,   /* a value failed its check (counted, never served) */
	KVP_REMOTE_STOP_ERROR = 5,    /* a connection error or an error reply */
	KVP_REMOTE_STOP_OFF = 6,      /* the breaker opened, or the tier is stopping */
};

/**
 * struct kvp_remote_done - one finished operation (kvp_remote_poll())
 * @tag:     the caller's
 * @kind:    enum kvp_remote_done_kind
 * @domain:  the domain id
 * @result:  publish: 0 when the K/V was taken (copied; the store's answer is counted in
 *           the stats), -ENODEV when dropped because the breaker opened, -ECANCELED at
 *           shutdown.  Fetch: the number of leading @dest buffers holding checked K/V.
 * @n_found: fetch: leading blocks the existence check found
 * @stop:    fetch: enum kvp_remote_stop
 * @elapsed_ns: fetch: submit to completion
 */
struct kvp_remote_done {
	uint64_t tag;
	uint32_t kind;
	uint32_t domain;
	int32_t result;
	uint32_t n_found;
	uint32_t stop;
	uint32_t reserved;
	uint64_t elapsed_ns;
};

/**
 * struct kvp_remote_fetch - one fetch request
 * @tag:         the caller's, returned in the completion
 * @domain:      domain id
 * @n_blocks:    blocks to look for, 1..max_fetch_blocks (full blocks only, never the one
 *               holding the prompt's last token)
 * @key:         the request's prefix key (copied)
 * @parent_hash: chain hash of the block before the first one asked for; @key->seed when
 *               the first one is block 0 of the prompt
 * @tokens:      n_blocks * block_tokens token ids (copied)
 * @dest:        n_blocks buffers of block_bytes each (borrowed until the completion)
 * @prefill_tps: the engine's prefill speed in tokens/s for the cost check; 0: no check
 * @timeout_ms:  deadline from now; 0: the configured fetch_timeout_ms
 */
struct kvp_remote_fetch {
	uint64_t tag;
	uint32_t domain;
	uint32_t n_blocks;
	const struct kvp_prefix_key *key;
	struct kvp_h128 parent_hash;
	const uint32_t *tokens;
	void *const *dest;
	double prefill_tps;
	uint32_t timeout_ms;
};

/* Counters of one domain; totals since the tier was made unless said otherwise. */
struct kvp_remote_stats {
	uint32_t state;		    /* enum kvp_breaker_state now */
	uint32_t conn_state;	    /* enum kvp_rconn_state of the fetch connection now */
	uint64_t breaker_opens;	    /* times the breaker opened */
	uint64_t probes;	    /* probes started */
	uint64_t connects;	    /* connections made (handshake done) */
	uint64_t errors;	    /* connection errors: refused, reset, stalled, timed out */
	uint64_t error_replies;	    /* error replies (NOPERM, OOM, ...) */
	uint64_t fetches;	    /* fetches accepted */
	uint64_t fetch_refused;	    /* refused: breaker open */
	uint64_t fetch_busy;	    /* refused: fetch queue full */
	uint64_t exist_checked;	    /* keys asked for with EXISTS */
	uint64_t exist_found;	    /* leading keys found */
	uint64_t hit_blocks;	    /* blocks served (checked) */
	uint64_t hit_bytes;	    /* K/V bytes served */
	uint64_t holes;		    /* fetches that stopped at a missing block */
	uint64_t cost_skips;	    /* fetches not made: recompute estimated faster */
	uint64_t deadline_cuts;	    /* fetches trimmed or cut by their deadline */
	uint64_t verify_failures;   /* values that failed their check (never served) */
	uint64_t publishes;	    /* blocks queued for publishing */
	uint64_t publish_skipped;   /* not published: the mode */
	uint64_t publish_drops;	    /* dropped: queue full */
	uint64_t publish_off_drops; /* dropped: breaker open */
	uint64_t publish_lost;	    /* sent, then the connection failed before the answer */
	uint64_t stored;	    /* SET NX stored */
	uint64_t already;	    /* SET NX found the key there */
	uint64_t publish_errors;    /* SET answered with an error (OOM, NOPERM, ...) */
	uint64_t bytes_written;	    /* value bytes sent */
	uint64_t route_published;   /* chain summaries stored */
	double fetch_p50_ms;	    /* over the last KVP_REMOTE_LAT_SAMPLES fetches that */
	double fetch_p99_ms;	    /*   reached the store; NaN before the first */
	double rtt_ms;		    /* round trip estimate (tier-wide) */
	double bw_mbps;		    /* transfer rate estimate, MB/s (tier-wide) */
	char last_error[224];	    /* the last connection error, "" if none */
};

/**
 * kvp_remote_new() - make the tier and start its I/O thread (no network yet: the first
 * probes run on the I/O thread)
 * @out:      out; kvp_remote_free()
 * @cfg:      checked with kvp_remote_config_check() here; copied
 * @shape:    the pool's block shape
 * @model_fp: the model fingerprint
 * @numerics: the numerics class (the engine's kernel table name, e.g. "avx512")
 * Return: 0; -EINVAL/-EPERM (the config, with @err); -ENOMEM; -errno from thread or
 * eventfd creation.
 */
int kvp_remote_new(struct kvp_remote **out, const struct kvp_remote_config *cfg,
		   const struct kvp_model_shape *shape, const uint8_t model_fp[16],
		   const char *numerics, char *err, size_t errlen);

/*
 * kvp_remote_tune_malloc() - raise glibc's mmap and trim thresholds (16 MiB, 128 MiB) so
 * hiredis's per-command and per-reply buffers of ~0.5 MiB come from the heap instead of
 * a fresh mmap each (8-12x faster transfers measured; remote.c says more).  Process-wide:
 * for the program to call once at start-up (kvpoold does); the tier never calls it.
 */
void kvp_remote_tune_malloc(void);

/* Stop the I/O thread, close the connections, free.  Operations not completed are not
 * reported; their buffers are no longer touched once this returns.  NULL is fine. */
void kvp_remote_free(struct kvp_remote *r);

/**
 * kvp_remote_wait_ready() - wait (at most @timeout_ms) for every domain's first probe
 * Blocks the caller: for start-up only.
 * Return: 0 when every domain's store answered; else the first failing domain's -errno
 * (-ETIMEDOUT if still probing) with @err saying, e.g., "remote: domain a:
 * unix:/run/redis.sock: connect: No such file or directory; local-only until it
 * answers".  The tier keeps probing either way.
 */
int kvp_remote_wait_ready(struct kvp_remote *r, uint32_t timeout_ms, char *err, size_t errlen);

/**
 * kvp_remote_publish() - offer a full block for the store
 * @why: enum kvp_remote_why (the publish mode decides whether it goes)
 * @rec: hash, phash, key and tokens of the block (copied; uid/puid unused)
 * @kv:  its K/V, block_bytes (borrowed until the completion, see the contract above)
 * @tag: returned in the completion
 * Return: 0 queued (a completion follows); 1 not published by the mode (no completion);
 * -ENOBUFS queue full, -ENODEV breaker open (dropped, counted, no completion);
 * -EINVAL.
 */
int kvp_remote_publish(struct kvp_remote *r, uint32_t domain, enum kvp_remote_why why,
		       const struct kvp_index_rec *rec, const void *kv, uint64_t tag);

/**
 * kvp_remote_fetch() - look for and fetch the blocks after a local prefix
 * Return: 0 queued (a completion follows); -ENODEV breaker open, -EBUSY fetch queue
 * full (refused at once, counted, no completion); -EINVAL.
 */
int kvp_remote_fetch(struct kvp_remote *r, const struct kvp_remote_fetch *f);

/**
 * kvp_remote_route_publish() - store this host's chain summary for domain @domain
 * at `kvp1:DOMAIN:r:HOST` (SET EX @ttl_s; it replaces the previous one).  Encoded and
 * copied here; a summary not yet sent is replaced by a newer one.  No completion.
 * Return: 0; -ENODEV breaker open; -EINVAL (bad host id or domain); -ENOMEM.
 */
int kvp_remote_route_publish(struct kvp_remote *r, uint32_t domain, const char *host,
			     const struct kvp_bloom *b, uint32_t ttl_s);

/**
 * kvp_remote_poll() - take finished operations, without waiting
 * Return: how many were written to @out (0..@max).
 */
int kvp_remote_poll(struct kvp_remote *r, struct kvp_remote_done *out, uint32_t max);

/**
 * kvp_remote_poll_domain() - take finished operations of @domain only, without waiting
 * Each engine of a tier shared by several domains polls its own: a completion carries
 * its caller's tag and K/V pointers, which only that caller may act on.
 * Return: how many were written to @out (0..@max), or -EINVAL for a bad @domain.
 */
int kvp_remote_poll_domain(struct kvp_remote *r, uint32_t domain, struct kvp_remote_done *out,
			   uint32_t max);

/* An fd that is readable while completions wait (eventfd; kvp_remote_poll() resets it;
 * it may stay readable after kvp_remote_poll_domain() took them: look, then wait again). */
int kvp_remote_event_fd(const struct kvp_remote *r);

/* The same for @domain's completions (kvp_remote_poll_domain() resets it); -1 if none. */
int kvp_remote_domain_event_fd(const struct kvp_remote *r, uint32_t domain);

/* Wait until a completion is there or @timeout_ms passed (tests, benchmarks, shutdown).
 * Return: 1 ready, 0 timed out. */
int kvp_remote_wait(struct kvp_remote *r, uint32_t timeout_ms);

/**
 * kvp_remote_drain() - wait until every queued publish was sent and answered (or
 * dropped) and no fetch is queued, at most @timeout_ms
 * Return: 0, or -ETIMEDOUT.
 */
int kvp_remote_drain(struct kvp_remote *r, uint32_t timeout_ms);

/* Counters of @domain (zeros for a bad id). */
void kvp_remote_stats(struct kvp_remote *r, uint32_t domain, struct kvp_remote_stats *st);

/* The settings the tier runs with (checked, copied at kvp_remote_new()). */
const struct kvp_remote_config *kvp_remote_settings(const struct kvp_remote *r);

/* Whether @domain's breaker is closed now (fetches and publishes are taken). */
bool kvp_remote_domain_up(struct kvp_remote *r, uint32_t domain);

/* Bytes of one value and of one block's K/V (the size of each fetch buffer). */
size_t kvp_remote_value_bytes(const struct kvp_remote *r);
size_t kvp_remote_block_bytes(const struct kvp_remote *r);

/* "end", "miss", "cost", "deadline", "verify", "error", "off". */
const char *kvp_remote_stop_name(uint32_t stop);

/**
 * Test hook: called on the I/O thread after a fetch's existence check, before its
 * values are asked for (a test deletes keys there to make a hole appear mid-fetch).
 */
typedef void (*kvp_remote_hook_fn)(void *ctx, uint32_t domain, uint32_t n_found);
void kvp_remote_debug_set_hook(struct kvp_remote *r, kvp_remote_hook_fn fn, void *ctx);

#endif /* KVP_SHM_REMOTE_REMOTE_H */
