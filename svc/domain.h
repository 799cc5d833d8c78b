/* SPDX-License-Identifier: MIT */
/*
 * domain.h - trust domains: which pool, prefix index and pool fd a peer may use.
 *
 * A trust domain is decided from the peer's SO_PEERCRED credentials only, never from a
 * request field.  Each domain owns its pool segment, its index and the sealed read-only
 * fd its clients get in WELCOME, so a client can never see another domain's K/V or its
 * hits.  For now there is one domain, "default", for every peer; the table is already
 * the mapping domain -> pool/index/fd, so per-domain pools (config sections naming
 * users and groups) add entries here and nothing else changes shape.
 *
 * Thread: the table is built on the main thread before any other starts.  Afterwards
 * names, fds and welcomes are read-only (any thread); @requests is the loop thread's;
 * a domain's pool and index belong to the engine thread while it runs (svc/sched.h).
 */
#ifndef KVP_SVC_DOMAIN_H
#define KVP_SVC_DOMAIN_H

#include <stdint.h>
#include <sys/types.h>

#include "kvpool/proto.h"

struct kvp_config;
struct kvp_index;
struct kvp_model;
struct kvp_notify;
struct kvp_numa;
struct kvp_pool;
struct kvp_tier;

#define KVP_DOMAIN_NAME_MAX 32
#define KVP_DOMAIN_DEFAULT 0u
#define KVP_DOMAINS_MAX 1

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
 */
struct kvp_domain {
	char name[KVP_DOMAIN_NAME_MAX];
	struct kvp_pool *pool;
	struct kvp_index *index;
	struct kvp_tier *tier;
	int ro_fd;
	struct kvp_welcome welcome;
	uint64_t requests;
};

/* struct kvp_domains - the table; indexes below @n_domains name a domain */
struct kvp_domains {
	uint32_t n_domains;
	struct kvp_domain dom[KVP_DOMAINS_MAX];
};

/* Fill @d with the single default domain, nothing opened yet. */
void kvp_domains_init_default(struct kvp_domains *d);

/* Close every domain (kvp_domain_close()); safe on a table never opened. */
void kvp_domains_deinit(struct kvp_domains *d);

/**
 * kvp_domain_of_peer() - the domain a peer with @uid / @gid belongs to
 * Return: a domain index (< n_domains), or -EPERM when the peer belongs to none
 * (not possible with the default table: every peer is in "default").
 */
int kvp_domain_of_peer(const struct kvp_domains *d, uid_t uid, gid_t gid);

/* Name of domain @idx, "?" when out of range. */
const char *kvp_domain_name(const struct kvp_domains *d, uint32_t idx);

/**
 * kvp_domain_open() - make @dom's pool (pre-faulted, sealed), index, disk tier (its
 * blocks back in the index) and client fd
 * @m:      the model (its K/V shape and fingerprint; borrowed)
 * @cfg:    pool.size, pool.block_size, pool.kv_dtype, pool.huge_pages, tier.path, tier.size
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
