/* SPDX-License-Identifier: MIT */
/*
 * domcfg.c - [domain NAME] sections and the domains.mode words (see domcfg.h).
 *
 * Names in users/groups lists are resolved with getpwnam_r()/getgrnam_r(): once by
 * kvp_domcfg_check() (a typo fails the start, not a peer), and again when the domain
 * table is built (svc/domain.c).
 * Thread: main thread, before any other starts.
 */
#include "svc/domcfg.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kvpool/proto.h"
#include "svc/cachecfg.h"
#include "util/errmsg.h"
#include "util/parse.h"

static const char *const mode_names[] = {
	[KVP_DOMAINS_PER_UID] = "per-uid",
	[KVP_DOMAINS_GROUPS] = "groups",
	[KVP_DOMAINS_SINGLE] = "single",
};

/* K_CACHE and after: [cache] keys a section overrides, in the order of cache_keys[] */
enum {
	K_USERS,
	K_GROUPS,
	K_POOL,
	K_TIER,
	K_OPERATORS,
	K_RUSER,
	K_RPASS,
	K_PRIO,
	K_CACHE,
	K__COUNT = K_CACHE + 6
};
static const char *const key_names[K_CACHE] = {
	"users",
	"groups",
	"pool_size",
	"tier_size",
	"operators",
	"remote_user",
	"remote_password_file",
	"priority",
};

#define PF(f) offsetof(struct kvp_cache_policy, f), sizeof(((struct kvp_cache_policy *)0)->f)

/*
 * The [cache] keys a domain may set, and the field each one fills.  Not pin_allowed
 * (the daemon's switch; a domain's own is `operators`) nor the cost multipliers (the
 * report's prices, one for the whole daemon).
 */
static const struct {
	const char *key;
	size_t off, size;
} cache_keys[K__COUNT - K_CACHE] = {
	{ "ttl_default_s", PF(ttl_default_s) }, { "ttl_max_s", PF(ttl_max_s) },
	{ "min_tokens", PF(min_tokens) },	{ "pin_max", PF(pin_max_bytes) },
	{ "eviction", PF(eviction) },		{ "retain_default", PF(retain_default) },
};

#undef PF

static const char *key_name(uint32_t k)
{
	return k < K_CACHE ? key_names[k] : cache_keys[k - K_CACHE].key;
}

const char *kvp_domains_mode_name(uint32_t mode)
{
	return mode < KVP_DOMAINS__COUNT ? mode_names[mode] : NULL;
}

int kvp_domains_mode_parse(const char *s, uint32_t *out)
{
	for (uint32_t i = 0; i < KVP_DOMAINS__COUNT; i++) {
		if (!strcasecmp(s, mode_names[i])) {
			*out = i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *kvp_domcfg_section(const char *section)
{
	if (strncmp(section, "domain ", 7))
		return NULL;
	section += 7;
	while (*section == ' ')
		section++;
	return section;
}

/* 1..@cap-1 of [A-Za-z0-9_-] */
static bool valid_name(const char *s, size_t cap)
{
	if (!*s || strlen(s) >= cap)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_')
			return false;
	return true;
}

static int set_size(const char *value, uint64_t *out, char *err, size_t cap)
{
	uint64_t v;

	if (kvp_parse_size(value, &v) < 0) {
		kvp_errmsg(err, cap,
			   "'%s' is not a size (a number with an optional K, M, G or T suffix)",
			   value);
		return -EINVAL;
	}
	if (v && v < (1ull << 20)) {
		kvp_errmsg(err, cap, "%s is below 1M (0: an even share)", value);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

/* GENERATE.priority's range, written as an integer with an optional '-'. */
static int set_priority(const char *value, int32_t *out, char *err, size_t cap)
{
	int64_t v;
	int r = kvp_parse_i64(value, KVP_PRIORITY_MIN, KVP_PRIORITY_MAX, &v);

	if (r == -EINVAL)
		kvp_errmsg(err, cap, "'%s' is not an integer", value);
	else if (r < 0)
		kvp_errmsg(err, cap, "'%s' is out of range [%d, %d]", value, KVP_PRIORITY_MIN,
			   KVP_PRIORITY_MAX);
	else
		*out = (int32_t)v;
	return r < 0 ? -EINVAL : 0;
}

int kvp_domcfg_set(struct kvp_domcfg *tab, uint32_t *n, const char *name, const char *key,
		   const char *value, char *err, size_t cap)
{
	struct kvp_domcfg *d = NULL;
	uint32_t k;

	for (k = 0; k < K__COUNT && strcmp(key, key_name(k)); k++)
		;
	if (k == K__COUNT) {
		kvp_errmsg(err, cap,
			   "unknown key (users, groups, pool_size, tier_size, operators, "
			   "remote_user, remote_password_file, priority, "
			   "ttl_default_s, ttl_max_s, min_tokens, pin_max, eviction, "
			   "retain_default)");
		return -ENOENT;
	}
	if (!valid_name(name, KVP_DOMCFG_NAME_MAX)) {
		kvp_errmsg(err, cap, "domain name '%s': 1..%d letters, digits, '-' or '_'", name,
			   KVP_DOMCFG_NAME_MAX - 1);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < *n; i++)
		if (!strcmp(tab[i].name, name))
			d = &tab[i];
	if (!d) {
		if (*n >= KVP_DOMCFG_MAX) {
			kvp_errmsg(err, cap, "more than %d [domain NAME] sections", KVP_DOMCFG_MAX);
			return -EINVAL;
		}
		d = &tab[(*n)++];
		memset(d, 0, sizeof(*d));
		strcpy(d->name, name);
	}
	if (d->seen & (1u << k)) {
		kvp_errmsg(err, cap, "set twice");
		return -EINVAL;
	}
	switch (k) {
	case K_USERS:
	case K_GROUPS:
		if (strlen(value) >= KVP_DOMCFG_LIST_MAX) {
			kvp_errmsg(err, cap, "too long (at most %d bytes)",
				   KVP_DOMCFG_LIST_MAX - 1);
			return -EINVAL;
		}
		strcpy(k == K_USERS ? d->users : d->groups, value);
		break;
	case K_POOL:
	case K_TIER:
		if (set_size(value, k == K_POOL ? &d->pool_bytes : &d->tier_bytes, err, cap) < 0)
			return -EINVAL;
		break;
	case K_OPERATORS:
		if (!strcasecmp(value, "yes") || !strcasecmp(value, "true") || !strcmp(value, "1"))
			d->operators = true;
		else if (!strcasecmp(value, "no") || !strcasecmp(value, "false") ||
			 !strcmp(value, "0"))
			d->operators = false;
		else {
			kvp_errmsg(err, cap, "'%s' is not a boolean (yes, no, true, false, 1, 0)",
				   value);
			return -EINVAL;
		}
		break;
	case K_RUSER:
		/* the store's rule for ACL user names (shm/remote/config.h), said early */
		if (!valid_name(value, KVP_DOMCFG_RUSER_MAX)) {
			kvp_errmsg(err, cap, "user name '%s': 1..%d letters, digits, '-' or '_'",
				   value, KVP_DOMCFG_RUSER_MAX - 1);
			return -EINVAL;
		}
		strcpy(d->remote_user, value);
		break;
	case K_RPASS:
		if (!*value || strlen(value) >= sizeof(d->remote_password_file)) {
			kvp_errmsg(err, cap, "a path of 1..%zu bytes",
				   sizeof(d->remote_password_file) - 1);
			return -EINVAL;
		}
		strcpy(d->remote_password_file, value);
		break;
	case K_PRIO:
		if (set_priority(value, &d->priority, err, cap) < 0)
			return -EINVAL;
		break;
	default:
		/* [cache]'s own parser and bounds: the value means what it means there */
		if (kvp_config_cache_key(&d->cache, key, value, err, cap) < 0)
			return -EINVAL;
		break;
	}
	d->seen |= 1u << k;
	return 0;
}

void kvp_domcfg_cache_policy(struct kvp_cache_policy *out, const struct kvp_domcfg *d,
			     const struct kvp_cache_policy *base)
{
	*out = *base;
	if (!d)
		return;
	for (uint32_t k = K_CACHE; k < K__COUNT; k++)
		if (d->seen & (1u << k))
			memcpy((char *)out + cache_keys[k - K_CACHE].off,
			       (const char *)&d->cache + cache_keys[k - K_CACHE].off,
			       cache_keys[k - K_CACHE].size);
}

int kvp_domcfg_check_cache(const struct kvp_domcfg *tab, uint32_t n,
			   const struct kvp_cache_policy *base, char *err, size_t cap)
{
	for (uint32_t i = 0; i < n; i++) {
		struct kvp_cache_policy p;

		kvp_domcfg_cache_policy(&p, &tab[i], base);
		if (p.ttl_default_s > p.ttl_max_s) {
			/* name the key the section set; the other one is [cache]'s */
			if (tab[i].seen & (1u << K_CACHE)) /* ttl_default_s */
				kvp_errmsg(err, cap,
					   "domain %s.ttl_default_s: %u is above ttl_max_s = %u",
					   tab[i].name, p.ttl_default_s, p.ttl_max_s);
			else
				kvp_errmsg(err, cap,
					   "domain %s.ttl_max_s: %u is below the ttl_default_s "
					   "of [cache] (%u)",
					   tab[i].name, p.ttl_max_s, p.ttl_default_s);
			return -EINVAL;
		}
	}
	return 0;
}

int kvp_domcfg_next_id(const char **p, bool is_user, uint32_t *id)
{
	char item[128];
	char buf[4096];
	const char *s = *p;
	size_t len;
	uint64_t v;

	while (*s == ',' || isspace((unsigned char)*s))
		s++;
	len = strcspn(s, ", \t");
	*p = s + len;
	if (!len)
		return 0;
	if (len >= sizeof(item))
		return -ENOENT;
	memcpy(item, s, len);
	item[len] = '\0';
	if (kvp_parse_u64(item, 0, UINT32_MAX - 1, &v) == 0) {
		*id = (uint32_t)v;
		return 1;
	}
	if (is_user) {
		struct passwd pw, *res = NULL;

		if (getpwnam_r(item, &pw, buf, sizeof(buf), &res) || !res)
			return -ENOENT;
		*id = res->pw_uid;
	} else {
		struct group gr, *res = NULL;

		if (getgrnam_r(item, &gr, buf, sizeof(buf), &res) || !res)
			return -ENOENT;
		*id = res->gr_gid;
	}
	return 1;
}

/* Every item of @list resolves.  Return: 0, or -EINVAL with the first bad one named. */
static int check_list(const struct kvp_domcfg *d, const char *list, bool is_user, char *err,
		      size_t cap)
{
	const char *p = list;
	uint32_t id;
	int r;

	while ((r = kvp_domcfg_next_id(&p, is_user, &id)) != 0) {
		if (r < 0) {
			const char *end = p;
			const char *start = end;

			while (start > list && start[-1] != ',' &&
			       !isspace((unsigned char)start[-1]))
				start--;
			kvp_errmsg(err, cap, "domain %s.%s: no %s named '%.*s'", d->name,
				   is_user ? "users" : "groups", is_user ? "user" : "group",
				   (int)(end - start), start);
			return -EINVAL;
		}
	}
	return 0;
}

int kvp_domcfg_check(const struct kvp_domcfg *tab, uint32_t n, char *err, size_t cap)
{
	for (uint32_t i = 0; i < n; i++) {
		const struct kvp_domcfg *d = &tab[i];

		if (!*d->users && !*d->groups) {
			kvp_errmsg(err, cap, "domain %s: names no users and no groups", d->name);
			return -EINVAL;
		}
		/* a user without its password (or one for another user) cannot log in */
		if (!*d->remote_user != !*d->remote_password_file) {
			kvp_errmsg(err, cap,
				   "domain %s: remote_user and remote_password_file go together "
				   "(neither: the [remote] user and password_file)",
				   d->name);
			return -EINVAL;
		}
		if (check_list(d, d->users, true, err, cap) < 0 ||
		    check_list(d, d->groups, false, err, cap) < 0)
			return -EINVAL;
	}
	return 0;
}

static void print_size(FILE *f, const char *key, uint64_t v)
{
	if (v && !(v & ((1ull << 20) - 1)))
		fprintf(f, "%s = %lluM\n", key, (unsigned long long)(v >> 20));
	else
		fprintf(f, "%s = %llu\n", key, (unsigned long long)v);
}

void kvp_domcfg_print(const struct kvp_domcfg *tab, uint32_t n, const struct kvp_cache_policy *base,
		      FILE *f)
{
	char val[64];

	for (uint32_t i = 0; i < n; i++) {
		struct kvp_cache_policy p;

		fprintf(f, "\n[domain %s]\n", tab[i].name);
		fprintf(f, "users = %s\n", tab[i].users);
		fprintf(f, "groups = %s\n", tab[i].groups);
		print_size(f, "pool_size", tab[i].pool_bytes);
		print_size(f, "tier_size", tab[i].tier_bytes);
		fprintf(f, "operators = %s\n", tab[i].operators ? "yes" : "no");
		fprintf(f, "priority = %d\n", (int)tab[i].priority);
		if (*tab[i].remote_user)
			fprintf(f, "remote_user = %s\nremote_password_file = %s\n",
				tab[i].remote_user, tab[i].remote_password_file);
		/* only the overrides as keys, so the output reads back to the same config */
		for (uint32_t k = K_CACHE; k < K__COUNT; k++) {
			if (!(tab[i].seen & (1u << k)))
				continue;
			kvp_config_cache_text(&tab[i].cache, key_name(k), val, sizeof(val));
			fprintf(f, "%s = %s\n", key_name(k), val);
		}
		kvp_domcfg_cache_policy(&p, &tab[i], base);
		fprintf(f, "; cache policy in effect:");
		for (uint32_t k = K_CACHE; k < K__COUNT; k++) {
			kvp_config_cache_text(&p, key_name(k), val, sizeof(val));
			fprintf(f, " %s=%s", key_name(k), val);
		}
		fprintf(f, "\n");
	}
}
