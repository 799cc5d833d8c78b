/* SPDX-License-Identifier: MIT */
/*
 * domain.c - peer credentials -> trust domain (see domain.h).
 *
 * Invariant: every index returned is < n_domains, so callers index their per-domain
 * arrays with it directly.  Thread: read-only after init; any thread.
 */
#include "svc/domain.h"

#include <errno.h>
#include <string.h>

void kvp_domains_init_default(struct kvp_domains *d)
{
	memset(d, 0, sizeof(*d));
	d->n_domains = 1;
	strcpy(d->names[KVP_DOMAIN_DEFAULT], "default");
}

int kvp_domain_of_peer(const struct kvp_domains *d, uid_t uid, gid_t gid)
{
	(void)uid;
	(void)gid;
	if (d->n_domains == 0)
		return -EPERM;
	/* one domain for everyone until domains are configured by user and group */
	return KVP_DOMAIN_DEFAULT;
}

const char *kvp_domain_name(const struct kvp_domains *d, uint32_t idx)
{
	return idx < d->n_domains ? d->names[idx] : "?";
}
