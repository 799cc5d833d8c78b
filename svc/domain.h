/* SPDX-License-Identifier: MIT */
/*
 * domain.h - trust domains: which pool, prefix index and pool fd a peer may use.
 *
 * A trust domain is decided from the peer's SO_PEERCRED credentials only, never from a
 * request field.  Each domain owns its pool segment (its own sealed memfd), its index,
 * its disk tier file, its engine (svc/engine/engine.h) and the sealed read-only fd its clients
 * get in WELCOME, so a client can never map another domain's K/V, see its hits, or
 * evict its blocks.  domains.mode (svc/domcfg.h) fills the table:
 *
 *	single   one domain "all" for every peer
 *	groups   one per [domain NAME] section; a peer whose uid is listed, whose gid is
 *	         listed, or who is a member (/etc/group) of a listed group belongs to the
 *	         first section that matches; a peer in none is refused
 *	per-uid  one per uid, "uid-N", made on that uid's first HELLO (the daemon's own uid's
 *	         at start), at most domains.max open at once; one made on a HELLO is
 *	         reclaimed when idle (svc/reclaim.h), which frees its slot
 *
 * Thread: the table is built on the main thread before any other starts; per-uid
 * entries are added (appended) and removed (kvp_domains_remove(): the last entry moves
 * into the hole) by the loop thread, which alone reads the table while serving.  A
 * domain's name, fd and welcome are read-only once it is opened; @requests, @n_conns and
 * @idle_since_ns are the loop thread's; its pool, index and tier belong to its engine's
 * thread while that runs (svc/engine/engine.h).
 */
#ifndef KVP_SVC_DOMAIN_H
#define KVP_SVC_DOMAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvpool/proto.h"
#include "svc/engine/cachepol.h"

struct kvp_config;
struct kvp_domains;
struct kvp_index;
struct kvp_model;
struct kvp_notify;
struct kvp_numa;
struct kvp_pool;
struct kvp_sched;
struct kvp_tier;

#define KVP_DOMAIN_NAME_MAX 32
#define KVP_DOMAIN_DEFAULT 0u /* the first domain: "all", the first section, or our uid's */
#define KVP_DOMAINS_MAX 64
#define KVP_DOMAIN_IDS_MAX 64 /* uids (and gids) one [domain NAME] section may name */

/**
 * struct kvp_domain - one trust domain
 * @name:     for logs and the status report
 * @pool:     its K/V block pool (owned), NULL until kvp_domain_open()
 * @index:    its prefix index over @pool (owned)
 * @tier:     its disk tier (owned; NULL without tier.path), attached to @index; driven
 *            by the engine thread while it runs
 * @ro_fd:    read-only reopen of the pool segment, passed to its clients (owned; -1)
 * @welcome:  what its clients get in WELCOME: the model's figures and @pool's layout
 * @requests: GENERATEs accepted from its clients
 * @sched:    its engine (owned by the daemon, which makes and frees it); NULL until then
 * @pool_bytes, @tier_bytes: its shares (pool.size / tier.size or the configured share)
 * @tier_path: its disk tier file ("" = none): tier.path, or tier.path.NAME when there
 *            can be more than one domain
 * @operators: its members may pin prefixes (kvp_domain_may_pin())
 * @priority: the priority of its requests that name none (KVP_PRIORITY_DEFAULT): its
 *            [domain NAME]'s `priority`; 0 for per-uid and single domains
 * @cache:    its prompt-cache policy: [cache], with its [domain NAME] overrides in groups
 *            mode (kvp_domcfg_cache_policy()); its engine runs by it
 * @uid:      per-uid: the uid it is for
 * @uids, @n_uids, @gids, @n_gids: groups: who belongs (listed users and members of the
 *            listed groups; listed gids)
 * @on_hello: per-uid: made on a HELLO (not at start): it may be reclaimed when idle
 * @n_conns:  connections of its peers open now (loop thread)
 * @idle_since_ns: CLOCK_MONOTONIC when @n_conns last fell to 0 (or it was made)
 * @reclaim_ticket: svc/reclaim.c: the engine's write-back asked for this idle spell
 *            (kvp_sched_writeback()), 0 when none
 */
struct kvp_domain {
	char name[KVP_DOMAIN_NAME_MAX];
	struct kvp_pool *pool;
	struct kvp_index *index;
	struct kvp_tier *tier;
	int ro_fd;
	struct kvp_welcome welcome;
	uint64_t requests;
	struct kvp_sched *sched;
	uint64_t pool_bytes;
	uint64_t tier_bytes;
	char tier_path[4096];
	bool operators;
	int32_t priority;
	struct kvp_cache_policy cache;
	uint32_t uid;
	uint32_t n_uids, n_gids;
	uint32_t uids[KVP_DOMAIN_IDS_MAX];
	uint32_t gids[KVP_DOMAIN_IDS_MAX];
	bool on_hello;
	uint32_t n_conns;
	uint64_t idle_since_ns;
	uint64_t reclaim_ticket;
};

/*
 * Open a new per-uid domain (the memory guard, kvp_domain_open(), its welcome and its
 * engine): the daemon's; 0 or -errno (-ENOMEM: the memory guard refused it, @why says
 * why with the figures), and on failure @dom is as before.
 */
typedef int kvp_domain_open_fn(void *arg, struct kvp_domain *dom, char *why, size_t cap);

/**
 * struct kvp_domains - the table; indexes below @n_domains name a domain
 * @mode:         enum kvp_domains_mode
 * @max:          per-uid: most domains
 * @open, @open_arg: per-uid: how a uid's domain is opened on its first HELLO
 * @uid_cache:    per-uid: each new domain's cache policy ([cache])
 * @made, @reclaimed, @refused_max, @refused_memory: per-uid, since start: domains made on
 *                a HELLO, reclaimed idle, and HELLOs refused because domains.max were
 *                open or because the memory guard refused the new domain's pool
 */
struct kvp_domains {
	uint32_t mode;
	uint32_t max;
	uint32_t n_domains;
	kvp_domain_open_fn *open;
	void *open_arg;
	uint64_t uid_pool_bytes; /* per-uid: each new domain's shares and tier base path */
	uint64_t uid_tier_bytes;
	char tier_base[4096];
	struct kvp_cache_policy uid_cache;
	uint64_t made, reclaimed, refused_max, refused_memory;
	struct kvp_domain dom[KVP_DOMAINS_MAX];
};

/**
 * kvp_domains_init() - the table of @cfg's domains.mode, nothing opened yet
 * @self: the daemon's own uid: per-uid mode makes its domain now (an HTTP front or an
 *        operator's tools usually run as it)
 * Return: 0, or -EINVAL (a listed name no longer resolves, too many ids; logged).
 */
int kvp_domains_init(struct kvp_domains *d, const struct kvp_config *cfg, uid_t self);

/* Fill @d with the single default domain "default", nothing opened yet (tests). */
void kvp_domains_init_default(struct kvp_domains *d);

/* Close every domain (kvp_domain_close()); safe on a table never opened. */
void kvp_domains_deinit(struct kvp_domains *d);

/**
 * kvp_domain_of_peer() - the domain a peer with @uid / @gid belongs to
 * Return: a domain index (< n_domains); -EPERM when the peer belongs to none (groups);
 * -ENOENT when per-uid mode has no domain for @uid yet.
 */
int kvp_domain_of_peer(const struct kvp_domains *d, uid_t uid, gid_t gid);

/**
 * kvp_domains_for_peer() - kvp_domain_of_peer(), and in per-uid mode a uid seen first
 * gets its domain, opened through @d->open (loop thread)
 * @why: out on a refusal: what the peer is told ("" when nothing particular)
 * Return: a domain index; -EPERM (in no domain); -EBUSY (per-uid: domains.max open);
 * -ENOMEM (the memory guard refused its pool); or the -errno of opening it.
 */
int kvp_domains_for_peer(struct kvp_domains *d, uid_t uid, gid_t gid, char *why, size_t cap);

/**
 * kvp_domains_remove() - take closed domain @idx out of the table (loop thread)
 * The last entry moves into its slot, so indexes below n_domains stay domains.
 * Return: the index the moved entry had (the caller renumbers what refers to it), or
 * @idx when @idx was the last.
 */
uint32_t kvp_domains_remove(struct kvp_domains *d, uint32_t idx);

/* May members of @dom pin prefixes (the operators flag of its [domain NAME])? */
bool kvp_domain_may_pin(const struct kvp_domain *dom);

/* Name of domain @idx, "?" when out of range. */
const char *kvp_domain_name(const struct kvp_domains *d, uint32_t idx);

/**
 * kvp_domain_open() - make @dom's pool (pre-faulted, sealed), index, disk tier (its
 * blocks back in the index) and client fd
 * @m:      the model (its K/V shape and fingerprint; borrowed)
 * @cfg:    pool.block_size, pool.kv_dtype, pool.huge_pages (sizes and tier path are
 *          @dom's own)
 * @numa:   the NUMA topology the arenas follow (borrowed; must outlive @dom)
 * @notify: where startup progress goes (borrowed)
 *
 * Logs what it made, and on failure what failed and why (huge pages it could not get
 * with pool.huge_pages = require: how many were free and how many it needed).  A tier
 * file that cannot be used (missing directory, read-only, no space, not a tier file)
 * is logged as an error and the domain runs memory-only: that is not a failure.
 * Return: 0, or -errno (@dom is then as before).
 */
int kvp_domain_open(struct kvp_domain *dom, const struct kvp_model *m, const struct kvp_config *cfg,
		    struct kvp_numa *numa, const struct kvp_notify *notify);

/* Free @dom's fd, index and pool (NULL and -1 are fine); @dom can be opened again. */
void kvp_domain_close(struct kvp_domain *dom);

/*
 * Set @dom's WELCOME from @base (the model's figures and the configured limits) and its
 * pool's layout; the longest request is also cut to what the pool holds.
 */
void kvp_domain_set_welcome(struct kvp_domain *dom, const struct kvp_welcome *base);

#endif /* KVP_SVC_DOMAIN_H */
