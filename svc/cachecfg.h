/* SPDX-License-Identifier: MIT */
/*
 * cachecfg.h - the [cache] keys one at a time, for the sections that override them: a
 * [domain NAME] section (svc/domcfg.c) parses and prints its [cache] keys with the
 * bounds and words of [cache] itself, which config.c's key table defines once (parsed
 * and printed by util/keytab.h).  domcfg.c needs this and nothing else of config.c, so
 * it includes this header, not config.h (config.h includes domcfg.h: one direction).
 * Thread: main, before any other thread starts.
 */
#ifndef KVP_SVC_CACHECFG_H
#define KVP_SVC_CACHECFG_H

#include <stddef.h>

#include "svc/engine/cachepol.h"

/**
 * kvp_config_cache_key() - parse [cache] key @key into @p, with the bounds and words of
 * [cache] itself (a [domain NAME] section overrides these keys, svc/domcfg.c)
 * @err: out; "why" without the section and key
 * Return: 0; -ENOENT when @key is not a [cache] key; -EINVAL for a bad value.
 */
int kvp_config_cache_key(struct kvp_cache_policy *p, const char *key, const char *value, char *err,
			 size_t cap);

/* [cache] key @key of @p as text, as --check-config prints it.  Return: 0, or -ENOENT. */
int kvp_config_cache_text(const struct kvp_cache_policy *p, const char *key, char *buf, size_t cap);

#endif /* KVP_SVC_CACHECFG_H */
