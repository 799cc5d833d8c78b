/* SPDX-License-Identifier: MIT */
/*
 * domain.h - trust domains: which pool and index a peer may use.
 *
 * A trust domain is decided from the peer's SO_PEERCRED credentials only, never from a
 * request field.  For now there is one domain, "default", for every peer; this module
 * is the single place that maps (uid, gid) to a domain, so per-domain pools (config
 * sections naming users and groups, one pool + index + fd each) slot in here later.
 *
 * Thread: the table is built on the main thread before the loop starts; afterwards it is
 * read-only and kvp_domain_of_peer() may run on any thread.
 */
#ifndef KVP_SVC_DOMAIN_H
#define KVP_SVC_DOMAIN_H

#include <stdint.h>
#include <sys/types.h>

#define KVP_DOMAIN_NAME_MAX 32
#define KVP_DOMAIN_DEFAULT 0u

/**
 * struct kvp_domains - the domain table
 * @n_domains: domains defined (1: "default")
 * @names:     their names
 */
struct kvp_domains {
	uint32_t n_domains;
	char names[1][KVP_DOMAIN_NAME_MAX];
};

/* Fill @d with the single default domain. */
void kvp_domains_init_default(struct kvp_domains *d);

/**
 * kvp_domain_of_peer() - the domain a peer with @uid / @gid belongs to
 * Return: a domain index (< n_domains), or -EPERM when the peer belongs to none
 * (not possible with the default table: every peer is in "default").
 */
int kvp_domain_of_peer(const struct kvp_domains *d, uid_t uid, gid_t gid);

/* Name of domain @idx, "?" when out of range. */
const char *kvp_domain_name(const struct kvp_domains *d, uint32_t idx);

#endif /* KVP_SVC_DOMAIN_H */
