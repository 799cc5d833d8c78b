/* SPDX-License-Identifier: MIT */
/*
 * stats.h - the status report's figures: a struct kvp_status_snap (svc/status.h) filled
 * at one moment from the engine's published counters, the server's, the connection
 * registry and the domains, then rendered as JSON or Prometheus text.
 * Who sees what (docs/daemon.md, "Status socket"): the peer's SO_PEERCRED decides.  An
 * operator (uid 0, the daemon's own uid, or a member of server.status_operators: its gid,
 * or a uid /etc/group lists in it, resolved at start) gets every domain and may send
 * commands (flush-tier); any other
 * peer gets the report as if the daemon had only its own domain (none: no domain's
 * figures at all), with the daemon-wide counters that sum other domains' traffic (the
 * server's, the request log's) zeroed, and its commands are refused.  Chain hashes are
 * shown keyed: XXH3-128 of the hash and the domain's name under a secret drawn at start
 * (kvp_stats_init()), so a shown hash confirms no guessed prompt, differs between domains
 * and between daemons, and the real chain hashes (index, disk and remote tier keys) stay
 * as they are.
 *
 * Thread: the loop thread (the status socket is served there).
 */
#ifndef KVP_SVC_STATS_H
#define KVP_SVC_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ipc/server.h"
#include "shm/index.h" /* struct kvp_h128 */

struct kvp_cache_policy;
struct kvp_domains;
struct kvp_requests;
struct kvp_sched;
struct kvp_status_snap;

/* Bytes of the secret shown hashes are keyed with (XXH3 wants at least 136). */
#define KVP_STATS_KEY_BYTES 192
/* Members of server.status_operators listed by uid (more: an error at start). */
#define KVP_STATS_OPERATORS_MAX 64

/**
 * struct kvp_stats - where the figures come from (all borrowed; set by the owner)
 * @model:      the model's name
 * @model_fp:   its fingerprint, hex
 * @state:      the daemon's state word ("starting", "serving", "draining"), read at
 *              each report
 * @t_start_ns: when the daemon started (CLOCK_MONOTONIC)
 * @req:        the loop thread's requests: server, connections, refusals
 * @domains:    the trust domains, their pools and engines (the report sums the engines)
 * @cache:      [cache] as configured: the policy the daemon-wide cache section shows
 *              (each domain's own is in its entry); NULL: the first domain's
 * @snap:       owned scratch for one report (too big for the loop thread's stack)
 * @self_uid:   the daemon's own uid (an operator of its status socket), set by init
 * @hash_key:   the secret shown hashes are keyed with, drawn by init (never shown)
 * @op_gid:     server.status_operators' gid, (gid_t)-1 for none
 * @op_uids, @n_op_uids: its members (/etc/group), as kvp_stats_set_operators() found them
 */
struct kvp_stats {
	const char *model;
	const char *model_fp;
	const char *const *state;
	uint64_t t_start_ns;
	const struct kvp_requests *req;
	const struct kvp_domains *domains;
	const struct kvp_cache_policy *cache;
	struct kvp_status_snap *snap;
	uid_t self_uid;
	uint8_t hash_key[KVP_STATS_KEY_BYTES];
	gid_t op_gid;
	uint32_t n_op_uids;
	uid_t op_uids[KVP_STATS_OPERATORS_MAX];
};

/**
 * struct kvp_stats_view - what one status peer is shown
 * @all:    an operator: every domain, and commands allowed
 * @domain: otherwise its own domain's index, or -1 when it has none (yet)
 */
struct kvp_stats_view {
	bool all;
	int domain;
};

/*
 * Allocate the scratch and draw the hash key (getrandom); the caller then sets the
 * sources.  Return: 0, -ENOMEM, or the -errno of getrandom().
 */
int kvp_stats_init(struct kvp_stats *st);
void kvp_stats_deinit(struct kvp_stats *st);

/*
 * Make the members of group @name (its gid, and the users /etc/group lists in it) the
 * status socket's operators, besides uid 0 and the daemon's own; "" for none.  Main
 * thread, before the server starts (name service lookups).
 * Return: 0, -ENOENT (no such group: none set), or -E2BIG (more than
 * KVP_STATS_OPERATORS_MAX members).
 */
int kvp_stats_set_operators(struct kvp_stats *st, const char *name);

/* What status peer @peer is shown and may do (the rules above). */
void kvp_stats_view_of(const struct kvp_stats *st, const struct kvp_peer *peer,
		       struct kvp_stats_view *v);

/* What the report shows for @h, a chain hash of domain @name (never @h itself). */
struct kvp_h128 kvp_stats_shown_hash(const struct kvp_stats *st, const char *name,
				     struct kvp_h128 h);

/* Fill @s from the sources now, as @v may see them. */
void kvp_stats_fill(const struct kvp_stats *st, const struct kvp_stats_view *v,
		    struct kvp_status_snap *s);

/*
 * The status socket's callback (kvp_status_report_fn, @arg a struct kvp_stats): decide
 * @peer's view, fill, then render; a command from a peer who is no operator gets a JSON
 * error and changes nothing.  Return: bytes written, or -ENOSPC.
 */
int kvp_stats_report(void *arg, const struct kvp_peer *peer, enum kvp_status_fmt fmt, char *buf,
		     size_t cap);

#endif /* KVP_SVC_STATS_H */
