/* SPDX-License-Identifier: MIT */
/*
 * domcfg.h - the configuration of trust domains: the [domains] keys live in config.c's
 * key table; each [domain NAME] section (its users, groups, memory and disk shares and
 * whether its members may pin) is parsed here, because its name is not known in
 * advance.  svc/domain.h builds the running table from it.
 *
 *	[domains]
 *	mode = per-uid | groups | single
 *	[domain research]
 *	users = alice, 1005
 *	groups = ml
 *	pool_size = 256M
 *	tier_size = 4G
 *	operators = yes
 *	remote_user = kvp-research
 *	remote_password_file = /etc/kvpool/research.pw
 *	priority = -10         ; its requests that name no priority get this one
 *	min_tokens = 64        ; any of these [cache] keys overrides [cache] for it:
 *	eviction = lfu         ; ttl_default_s, ttl_max_s, min_tokens, pin_max,
 *	                       ; eviction, retain_default
 *
 * Thread: main thread, before any other starts.
 */
#ifndef KVP_SVC_DOMCFG_H
#define KVP_SVC_DOMCFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <limits.h>
#include <stdio.h>

#include "svc/engine/cachepol.h"

#define KVP_DOMCFG_MAX 16	/* [domain NAME] sections */
#define KVP_DOMCFG_NAME_MAX 24	/* a domain's name, NUL included */
#define KVP_DOMCFG_LIST_MAX 256 /* users = / groups = lists, NUL included */
#define KVP_DOMCFG_RUSER_MAX 33 /* remote_user, NUL included (the store's ACL user names) */

/* domains.mode: how peers are sorted into trust domains */
enum kvp_domains_mode {
	KVP_DOMAINS_PER_UID = 0, /* every uid its own domain, made on its first HELLO */
	KVP_DOMAINS_GROUPS,	 /* the [domain NAME] sections; a peer in none is refused */
	KVP_DOMAINS_SINGLE,	 /* one domain for every peer (no isolation between users) */
	KVP_DOMAINS__COUNT
};

/**
 * struct kvp_domcfg - one [domain NAME] section
 * @name:       the section's NAME: letters, digits, '-', '_'
 * @users:      user names or numeric uids, separated by commas or blanks
 * @groups:     group names or numeric gids: a peer whose gid is one of them, or whose
 *              uid is a listed member of one (/etc/group), belongs
 * @pool_bytes: its pool (0: pool.size divided evenly among the sections)
 * @tier_bytes: its disk tier file (0: tier.size divided evenly among the sections)
 * @operators:  its members may pin prefixes (kvp_domain_may_pin())
 * @remote_user, @remote_password_file: its own ACL user in the remote store and the file
 *              holding its password, set together ("": the [remote] user and
 *              password_file; svc/remotecfg.c reads and checks the file)
 * @priority:   the priority its requests get when they name none (KVP_PRIORITY_DEFAULT
 *              on the wire): KVP_PRIORITY_MIN .. KVP_PRIORITY_MAX, as the request field; 0
 * @cache:      its [cache] overrides: only the fields whose key is in @seen count
 *              (kvp_domcfg_cache_policy())
 * @seen:       keys set so far (bit per key), to refuse one set twice
 */
struct kvp_domcfg {
	char name[KVP_DOMCFG_NAME_MAX];
	char users[KVP_DOMCFG_LIST_MAX];
	char groups[KVP_DOMCFG_LIST_MAX];
	uint64_t pool_bytes;
	uint64_t tier_bytes;
	bool operators;
	char remote_user[KVP_DOMCFG_RUSER_MAX];
	char remote_password_file[PATH_MAX];
	int32_t priority;
	struct kvp_cache_policy cache;
	uint32_t seen;
};

/* Names of enum kvp_domains_mode ("per-uid", "groups", "single"); NULL when out of range. */
const char *kvp_domains_mode_name(uint32_t mode);

/* Parse a domains.mode word.  Return: 0, or -EINVAL. */
int kvp_domains_mode_parse(const char *s, uint32_t *out);

/*
 * Is @section a "domain NAME" section?  Return: NAME (inside @section), or NULL.
 */
const char *kvp_domcfg_section(const char *section);

/**
 * kvp_domcfg_set() - set @key of [domain @name] in @tab (a section seen first is added)
 * @n:    in/out: sections in @tab
 * @err:  out; "why" without the section and key
 * Return: 0; -ENOENT for an unknown key; -EINVAL for a bad value or name, a key set
 * twice, or one section too many.
 */
int kvp_domcfg_set(struct kvp_domcfg *tab, uint32_t *n, const char *name, const char *key,
		   const char *value, char *err, size_t cap);

/**
 * kvp_domcfg_check() - every listed user and group exists; names are unique;
 * remote_user and remote_password_file are set together
 * Return: 0, or -EINVAL with "domain NAME.key: why" in @err.
 */
int kvp_domcfg_check(const struct kvp_domcfg *tab, uint32_t n, char *err, size_t cap);

/**
 * kvp_domcfg_cache_policy() - the prompt-cache policy of a domain: @base ([cache]) with
 * the keys @d sets in its section put over it
 * @out: out; the effective policy
 * @d:   the domain's section, or NULL (per-uid and single domains): @base as it is
 */
void kvp_domcfg_cache_policy(struct kvp_cache_policy *out, const struct kvp_domcfg *d,
			     const struct kvp_cache_policy *base);

/**
 * kvp_domcfg_check_cache() - each section's effective policy over @base is coherent
 * (its ttl_default_s not above its ttl_max_s)
 * Return: 0, or -EINVAL with "domain NAME.key: why" in @err.
 */
int kvp_domcfg_check_cache(const struct kvp_domcfg *tab, uint32_t n,
			   const struct kvp_cache_policy *base, char *err, size_t cap);

/*
 * Print the sections as INI that kvp_domcfg_set() reads back: the keys a section sets,
 * then as a comment its whole effective cache policy over @base.
 */
void kvp_domcfg_print(const struct kvp_domcfg *tab, uint32_t n, const struct kvp_cache_policy *base,
		      FILE *f);

/**
 * kvp_domcfg_next_id() - the next id of a users/groups list
 * @p:       in/out: where to read from; advanced past the item
 * @is_user: users (getpwnam) or groups (getgrnam)
 * @id:      out; the uid or gid
 * Return: 1 with @id set, 0 at the end of the list, -ENOENT for a name that does not
 * exist (@p still advanced).
 */
int kvp_domcfg_next_id(const char **p, bool is_user, uint32_t *id);

#endif /* KVP_SVC_DOMCFG_H */
