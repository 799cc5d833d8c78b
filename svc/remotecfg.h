/* SPDX-License-Identifier: MIT */
/*
 * remotecfg.h - the daemon's remote tier: the [remote] settings mapped onto the tier's
 * (shm/remote/config.h), the trust domains mapped onto the tier's domains and ACL users,
 * and the start-up (process-wide malloc thresholds, the tier made, its first answer
 * waited for and logged).  The engine's use of it is svc/engine/remoting.c.
 *
 * Domains.  Each daemon trust domain (svc/domain.h) is one remote domain of the same name
 * (keys `kvp1:NAME:...`) with its own ACL user and password: kvp_remotecfg_domain() is
 * the one place that says which.  A [domain NAME] with remote_user and
 * remote_password_file logs in as that user (an ACL user confined to `~kvp1:NAME:*`: the
 * store itself keeps the domains apart); any other domain takes remote.user and
 * remote.password_file (one ACL user for all of them: the daemon keeps them apart, the
 * store's ACL keeps other clients out).  The tier learns the domains that exist at start (groups,
 * single, and the daemon's own uid in per-uid mode); a uid's domain opened later has
 * memory and the disk tier only.
 *
 * Thread: the main thread, at start (and for --check-config).
 */
#ifndef KVP_SVC_REMOTECFG_H
#define KVP_SVC_REMOTECFG_H

#include <stddef.h>
#include <stdint.h>

#include "shm/remote/config.h"

struct kvp_config;
struct kvp_domains;
struct kvp_remote;
struct kvp_pool;

/**
 * struct kvp_remotecfg_domain - what one daemon domain is in the store
 * @name:          the remote domain (key prefix `kvp1:NAME:`)
 * @user:          its ACL user ("" = the store's default user)
 * @password_file: the file holding its password ("" = no AUTH)
 * @key:           the configuration key that named @password_file (for messages)
 * @keybuf:        room for @key
 */
struct kvp_remotecfg_domain {
	const char *name;
	const char *user;
	const char *password_file;
	const char *key;
	char keybuf[64];
};

/*
 * kvp_remotecfg_domain() - the remote domain, ACL user and password file of the daemon's
 * trust domain @domain_name (see top).
 */
void kvp_remotecfg_domain(const struct kvp_config *c, const char *domain_name,
			  struct kvp_remotecfg_domain *out);

/**
 * kvp_remotecfg_host() - this host's id in chain summary keys: remote.host_id, or the
 * host name when that is empty
 * @buf: out; KVP_REMOTE_HOST_ID_MAX bytes
 * Return: 0, or -EINVAL with @err naming remote.host_id (not 1..64 of [A-Za-z0-9_.-]).
 */
int kvp_remotecfg_host(const struct kvp_config *c, char *buf, size_t cap, char *err, size_t errcap);

/**
 * kvp_remotecfg_build() - @rc from [remote] and the domains of @doms
 * Each key set in [remote] goes through kvp_remote_config_set() under its own name; each
 * domain through kvp_remotecfg_domain() and kvp_remote_config_add_domain() (passwords
 * read from their files, which must be regular files no other user may read); domain ids
 * are the daemon's domain indexes.  Then kvp_remote_config_check(), and the host id when
 * summaries are on (kvp_remotecfg_host()).
 * Return: 0 (also when remote.url is empty: no tier, @rc->url ""), or -errno with @err
 * naming the key ("remote.ttl_s: ...", "remote.password_file: ...").
 */
int kvp_remotecfg_build(struct kvp_remote_config *rc, const struct kvp_config *c,
			const struct kvp_domains *doms, char *err, size_t cap);

/**
 * kvp_remotecfg_start() - make the remote tier for the daemon, or nothing without a URL
 * @out:      out; NULL without remote.url; else kvp_remote_free() it after the engine
 *            and before the pools
 * @pool:     a domain's pool (the block shape; every domain's is the same model's)
 * @model_fp: the model fingerprint
 * @numerics: the engine's kernel table name ("avx512", "avx2", "scalar")
 * Raises the process's malloc thresholds (kvp_remote_tune_malloc()), makes the tier,
 * waits up to remote.start_wait_ms for the store and logs one line either way (a store
 * that does not answer is not an error: the daemon serves local-only until it does).
 * Return: 0, or -errno for a configuration the tier refuses (logged).
 */
int kvp_remotecfg_start(struct kvp_remote **out, const struct kvp_config *c,
			const struct kvp_domains *doms, const struct kvp_pool *pool,
			const uint8_t model_fp[16], const char *numerics);

#endif /* KVP_SVC_REMOTECFG_H */
