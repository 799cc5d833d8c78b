/* SPDX-License-Identifier: MIT */
/*
 * acl.h - the Redis ACL rules that confine each trust domain to its own keys.
 *
 * One ACL user per domain: its keys are `kvp1:DOMAIN:*` (key pattern `~kvp1:DOMAIN:*`)
 * and its commands exactly the ones the tier sends: GET, SET, EXISTS and PING (AUTH
 * needs no permission).  Everything else is denied (`-@all` first), in particular:
 *
 * - SCAN and KEYS: they take a pattern, not key names, so Redis does not filter them by
 *   the user's key patterns; a user allowed SCAN would list every domain's key names,
 *   and a key name is a digest of a prompt prefix: anyone who can guess a prompt could
 *   tell whether another tenant has sent it.
 * - DEL, FLUSHALL, CONFIG, DEBUG, MONITOR, CLIENT, pub/sub (resetchannels): nothing the
 *   tier needs, and each would reach beyond the domain.
 *
 * The router user (a front door reading the hosts' chain summaries) may only GET
 * summary keys `kvp1:*:r:*`, read-only (`%R~`); block keys never match that pattern
 * because no domain name, host id or digest holds ':'.
 *
 * Pure functions; any thread.
 */
#ifndef KVP_SHM_REMOTE_ACL_H
#define KVP_SHM_REMOTE_ACL_H

#include <stddef.h>

#include "shm/remote/config.h"

/* The commands a domain user is allowed (a domain user's rule tail). */
#define KVP_REMOTE_ACL_COMMANDS "-@all +get +set +exists +ping"

/* Which text to produce. */
enum kvp_remote_acl_form {
	KVP_REMOTE_ACL_COMMAND = 0, /* "ACL SETUSER name rules..." (redis-cli, a script) */
	KVP_REMOTE_ACL_FILE = 1,    /* "user name rules..." (an aclfile line) */
};

/**
 * kvp_remote_acl_domain() - the rules line for domain @d
 * e.g. "ACL SETUSER kvp-a reset on >secret resetkeys ~kvp1:a:* resetchannels -@all +get
 * +set +exists +ping" (one line, no newline).  `reset` first, so applying it again
 * replaces whatever the user had.
 * @buf, @cap: out
 * Return: the line's length; -EINVAL when @d has no user or no password (the default
 * user cannot be confined to one domain, and a user without a password would be open
 * to anyone who reaches the store); -ENOSPC when @cap is too small.
 */
int kvp_remote_acl_domain(char *buf, size_t cap, const struct kvp_remote_domain_config *d,
			  enum kvp_remote_acl_form form);

/**
 * kvp_remote_acl_router() - the rules line for a front door's read-only user
 * "ACL SETUSER router reset on >secret resetkeys %R~kvp1:*:r:* resetchannels -@all +get
 * +ping"
 * Return: as kvp_remote_acl_domain().
 */
int kvp_remote_acl_router(char *buf, size_t cap, const char *user, const char *password,
			  enum kvp_remote_acl_form form);

#endif /* KVP_SHM_REMOTE_ACL_H */
