/* SPDX-License-Identifier: MIT */
/*
 * config.c - the remote tier's settings: defaults, the store URL, keys by name, trust
 * domains, and the check (see config.h).
 */
#include "shm/remote/config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util/errmsg.h"
#include "util/parse.h"

void kvp_remote_config_defaults(struct kvp_remote_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->ttl_s = 3600;
	cfg->publish = KVP_REMOTE_PUBLISH_ALL;
	cfg->connect_timeout_ms = 100;
	cfg->op_timeout_ms = 250;
	cfg->fetch_timeout_ms = 1000;
	cfg->max_fetch_blocks = 256;
	cfg->queue_blocks = 32;
	cfg->fetch_queue = 8;
	cfg->breaker_errors = 3;
	cfg->breaker_probe_ms = 250;
	cfg->breaker_probe_max_ms = 5000;
	cfg->bandwidth_mbps = 1000;
}

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '-';
}

bool kvp_remote_name_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n >= KVP_REMOTE_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!name_char(s[i]))
			return false;
	return true;
}

const char *kvp_remote_publish_name(uint32_t mode)
{
	switch (mode) {
	case KVP_REMOTE_PUBLISH_ALL:
		return "all";
	case KVP_REMOTE_PUBLISH_SELECTIVE:
		return "selective";
	case KVP_REMOTE_PUBLISH_OFF:
		return "off";
	}
	return "?";
}

/* 127.0.0.0/8, ::1, ::ffff:127.x, or the name "localhost" (resolved by the C library to
 * loopback by convention; any other name counts as remote: no DNS at config time). */
static bool host_is_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (strcasecmp(host, "localhost") == 0)
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1) {
		if (IN6_IS_ADDR_LOOPBACK(&a6))
			return true;
		return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
	}
	return false;
}

static bool host_char(char c)
{
	return name_char(c) || c == '.';
}

static int parse_unix(struct kvp_remote_addr *a, const char *rest, const char *url, char *err,
		      size_t errlen)
{
	/* unix:/path or unix:///path (an empty authority) */
	if (strncmp(rest, "//", 2) == 0)
		rest += 2;
	if (rest[0] != '/') {
		kvp_errmsg(err, errlen, "remote url '%s': a Unix socket path must be absolute",
			   url);
		return -EINVAL;
	}
	if (strlen(rest) >= sizeof(a->path)) {
		kvp_errmsg(err, errlen, "remote url '%s': socket path longer than %zu bytes", url,
			   sizeof(a->path) - 1);
		return -ENAMETOOLONG;
	}
	a->transport = KVP_REMOTE_UNIX;
	a->loopback = true;
	strcpy(a->path, rest);
	return 0;
}

static int parse_tcp(struct kvp_remote_addr *a, const char *rest, const char *url, char *err,
		     size_t errlen)
{
	const char *host = rest, *host_end, *port = NULL;
	uint64_t p = KVP_REMOTE_DEFAULT_PORT;
	size_t n;

	if (strpbrk(rest, "@")) {
		kvp_errmsg(err, errlen,
			   "remote url '%s': no user or password in the URL (they are per trust "
			   "domain, and a command line is readable by every user)",
			   url);
		return -EINVAL;
	}
	if (rest[0] == '[') {
		host = rest + 1;
		host_end = strchr(host, ']');
		if (!host_end) {
			kvp_errmsg(err, errlen, "remote url '%s': unclosed '[' in the host", url);
			return -EINVAL;
		}
		if (host_end[1] == ':')
			port = host_end + 2;
		else if (host_end[1] != '\0' && strcmp(host_end + 1, "/") != 0)
			goto bad_tail;
	} else {
		host_end = host + strcspn(host, ":/");
		if (*host_end == ':')
			port = host_end + 1;
		else if (*host_end == '/' && host_end[1] != '\0')
			goto bad_tail;
		for (const char *c = host; c < host_end; c++)
			if (!host_char(*c)) {
				kvp_errmsg(err, errlen,
					   "remote url '%s': bad character in the host", url);
				return -EINVAL;
			}
	}
	n = (size_t)(host_end - host);
	if (n == 0) {
		kvp_errmsg(err, errlen, "remote url '%s': no host", url);
		return -EINVAL;
	}
	if (n >= sizeof(a->host)) {
		kvp_errmsg(err, errlen, "remote url '%s': host name too long", url);
		return -ENAMETOOLONG;
	}
	if (port) {
		char buf[8];
		size_t pn = strcspn(port, "/");

		if (port[pn] == '/' && port[pn + 1] != '\0')
			goto bad_tail;
		if (pn == 0 || pn >= sizeof(buf)) {
			kvp_errmsg(err, errlen, "remote url '%s': bad port", url);
			return -EINVAL;
		}
		memcpy(buf, port, pn);
		buf[pn] = '\0';
		if (kvp_parse_u64(buf, 1, 65535, &p) < 0) {
			kvp_errmsg(err, errlen, "remote url '%s': port must be 1..65535", url);
			return -EINVAL;
		}
	}
	a->transport = KVP_REMOTE_TCP;
	memcpy(a->host, host, n);
	a->host[n] = '\0';
	if (rest[0] == '[') {
		struct in6_addr a6;

		if (inet_pton(AF_INET6, a->host, &a6) != 1) {
			kvp_errmsg(err, errlen, "remote url '%s': '%s' is not an IPv6 address", url,
				   a->host);
			return -EINVAL;
		}
	}
	a->port = (uint16_t)p;
	a->loopback = host_is_loopback(a->host);
	return 0;

bad_tail:
	kvp_errmsg(err, errlen,
		   "remote url '%s': nothing may follow host:port (no database number: a "
		   "cluster has only database 0)",
		   url);
	return -EINVAL;
}

int kvp_remote_url_parse(struct kvp_remote_addr *addr, const char *url, char *err, size_t errlen)
{
	struct kvp_remote_addr a;
	int r;

	memset(&a, 0, sizeof(a));
	if (!url || !url[0]) {
		kvp_errmsg(err, errlen, "remote url: empty");
		return -EINVAL;
	}
	if (strlen(url) >= KVP_REMOTE_URL_MAX) {
		kvp_errmsg(err, errlen, "remote url: longer than %d bytes", KVP_REMOTE_URL_MAX - 1);
		return -ENAMETOOLONG;
	}
	if (strncmp(url, "redis://", 8) == 0) {
		r = parse_tcp(&a, url + 8, url, err, errlen);
	} else if (strncmp(url, "unix:", 5) == 0) {
		r = parse_unix(&a, url + 5, url, err, errlen);
	} else if (strncmp(url, "rediss://", 9) == 0) {
		/* the tier never links hiredis_ssl: with hiredis >= 1.0 the reason is ours */
#if HIREDIS_MAJOR >= 1
		kvp_errmsg(err, errlen,
			   "remote url '%s': TLS is not available: kvpool does not use hiredis_ssl "
			   "yet (hiredis %d.%d.%d); use a Unix socket or loopback to a local TLS "
			   "tunnel (docs/remote.md)",
			   url, HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
#else
		kvp_errmsg(err, errlen,
			   "remote url '%s': TLS is not available: this build's hiredis (%d.%d.%d) "
			   "has no TLS support (hiredis_ssl came with hiredis 1.0); use a Unix "
			   "socket or loopback to a local TLS tunnel (docs/remote.md)",
			   url, HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
#endif
		return -EPROTONOSUPPORT;
	} else {
		kvp_errmsg(err, errlen,
			   "remote url '%s': expected redis://HOST[:PORT] or unix:/PATH", url);
		return -EPROTONOSUPPORT;
	}
	if (r < 0)
		return r;
	*addr = a;
	return 0;
}

/* A key's numeric value in [lo, hi] into *@out. */
static int set_u32(const char *key, const char *value, uint64_t lo, uint64_t hi, uint32_t *out,
		   char *err, size_t errlen)
{
	uint64_t v;
	int r = kvp_parse_u64(value, lo, hi, &v);

	if (r < 0) {
		kvp_errmsg(err, errlen, "remote.%s: '%s' is not a number in %llu..%llu", key, value,
			   (unsigned long long)lo, (unsigned long long)hi);
		return r;
	}
	*out = (uint32_t)v;
	return 0;
}

int kvp_remote_config_set(struct kvp_remote_config *cfg, const char *key, const char *value,
			  char *err, size_t errlen)
{
	static const struct {
		const char *key;
		size_t off;
		uint32_t lo, hi;
	} nums[] = {
		{ "ttl_s", offsetof(struct kvp_remote_config, ttl_s), 1, 30u * 86400 },
		{ "connect_timeout_ms", offsetof(struct kvp_remote_config, connect_timeout_ms), 1,
		  60000 },
		{ "op_timeout_ms", offsetof(struct kvp_remote_config, op_timeout_ms), 1, 60000 },
		{ "fetch_timeout_ms", offsetof(struct kvp_remote_config, fetch_timeout_ms), 1,
		  600000 },
		{ "max_fetch_blocks", offsetof(struct kvp_remote_config, max_fetch_blocks), 1,
		  65536 },
		{ "queue_blocks", offsetof(struct kvp_remote_config, queue_blocks), 1, 65536 },
		{ "fetch_queue", offsetof(struct kvp_remote_config, fetch_queue), 1, 1024 },
		{ "breaker_errors", offsetof(struct kvp_remote_config, breaker_errors), 1, 1000 },
		{ "breaker_probe_ms", offsetof(struct kvp_remote_config, breaker_probe_ms), 1,
		  3600000 },
		{ "breaker_probe_max_ms", offsetof(struct kvp_remote_config, breaker_probe_max_ms),
		  1, 3600000 },
		{ "bandwidth_mbps", offsetof(struct kvp_remote_config, bandwidth_mbps), 1,
		  1000000 },
	};

	if (strcmp(key, "url") == 0) {
		struct kvp_remote_addr a;
		int r = kvp_remote_url_parse(&a, value, err, errlen);

		if (r < 0)
			return r;
		strcpy(cfg->url, value);
		cfg->addr = a;
		return 0;
	}
	if (strcmp(key, "publish") == 0) {
		for (uint32_t m = 0; m <= KVP_REMOTE_PUBLISH_OFF; m++)
			if (strcmp(value, kvp_remote_publish_name(m)) == 0) {
				cfg->publish = m;
				return 0;
			}
		kvp_errmsg(err, errlen, "remote.publish: '%s' is not all, selective or off", value);
		return -EINVAL;
	}
	if (strcmp(key, "allow_plaintext") == 0) {
		uint32_t v;
		int r = set_u32(key, value, 0, 1, &v, err, errlen);

		if (r == 0)
			cfg->allow_plaintext = v;
		return r;
	}
	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
		if (strcmp(key, nums[i].key) == 0)
			return set_u32(key, value, nums[i].lo, nums[i].hi,
				       (uint32_t *)((char *)cfg + nums[i].off), err, errlen);
	kvp_errmsg(err, errlen, "remote.%s: unknown key", key);
	return -ENOENT;
}

/* Printable ASCII without spaces: a password goes into one ACL rule (">password"). */
static bool password_ok(const char *p)
{
	for (; *p; p++)
		if (*p <= ' ' || *p > '~')
			return false;
	return true;
}

int kvp_remote_config_add_domain(struct kvp_remote_config *cfg, uint32_t *id, const char *name,
				 const char *user, const char *password, char *err, size_t errlen)
{
	struct kvp_remote_domain_config *d;

	if (!kvp_remote_name_ok(name)) {
		kvp_errmsg(err, errlen, "remote domain '%s': a name is 1..%d of [A-Za-z0-9_-]",
			   name ? name : "", KVP_REMOTE_NAME_MAX - 1);
		return -EINVAL;
	}
	if (user && user[0] && !kvp_remote_name_ok(user)) {
		kvp_errmsg(err, errlen,
			   "remote domain '%s': user '%s': a name is 1..%d of [A-Za-z0-9_-]", name,
			   user, KVP_REMOTE_NAME_MAX - 1);
		return -EINVAL;
	}
	if (user && user[0] && (!password || !password[0])) {
		kvp_errmsg(err, errlen, "remote domain '%s': user '%s' needs a password", name,
			   user);
		return -EINVAL;
	}
	if (password && (strlen(password) >= KVP_REMOTE_PASS_MAX || !password_ok(password))) {
		kvp_errmsg(err, errlen,
			   "remote domain '%s': a password is at most %d printable characters "
			   "without spaces",
			   name, KVP_REMOTE_PASS_MAX - 1);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < cfg->n_domains; i++)
		if (strcmp(cfg->domains[i].name, name) == 0) {
			kvp_errmsg(err, errlen, "remote domain '%s': defined twice", name);
			return -EEXIST;
		}
	if (cfg->n_domains >= KVP_REMOTE_MAX_DOMAINS) {
		kvp_errmsg(err, errlen, "remote domain '%s': more than %d domains", name,
			   KVP_REMOTE_MAX_DOMAINS);
		return -ENOSPC;
	}
	d = &cfg->domains[cfg->n_domains];
	memset(d, 0, sizeof(*d));
	strcpy(d->name, name);
	if (user)
		strcpy(d->user, user);
	if (password)
		strcpy(d->password, password);
	*id = cfg->n_domains++;
	return 0;
}

int kvp_remote_config_check(const struct kvp_remote_config *cfg, char *err, size_t errlen)
{
	const struct kvp_remote_addr *a = &cfg->addr;

	if (!cfg->url[0] || !a->transport) {
		kvp_errmsg(err, errlen, "remote: no url");
		return -EINVAL;
	}
	if (cfg->n_domains == 0) {
		kvp_errmsg(err, errlen, "remote: no trust domain");
		return -EINVAL;
	}
	if (a->transport == KVP_REMOTE_TCP && !a->loopback && !cfg->allow_plaintext) {
		kvp_errmsg(err, errlen,
			   "remote url '%s': the store is not on this host and there is no TLS: "
			   "K/V and passwords would cross the network in plaintext; set "
			   "remote.allow_plaintext=1 only on a trusted network (docs/remote.md)",
			   cfg->url);
		return -EPERM;
	}
	if (!cfg->ttl_s || !cfg->connect_timeout_ms || !cfg->op_timeout_ms ||
	    !cfg->fetch_timeout_ms || !cfg->max_fetch_blocks || !cfg->queue_blocks ||
	    !cfg->fetch_queue || !cfg->breaker_errors || !cfg->breaker_probe_ms ||
	    !cfg->bandwidth_mbps || cfg->publish > KVP_REMOTE_PUBLISH_OFF) {
		kvp_errmsg(err, errlen, "remote: a setting is zero or out of range");
		return -EINVAL;
	}
	if (cfg->breaker_probe_max_ms < cfg->breaker_probe_ms) {
		kvp_errmsg(err, errlen,
			   "remote: breaker_probe_max_ms (%u) is below breaker_probe_ms (%u)",
			   cfg->breaker_probe_max_ms, cfg->breaker_probe_ms);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < cfg->n_domains; i++)
		if (!kvp_remote_name_ok(cfg->domains[i].name)) {
			kvp_errmsg(err, errlen, "remote: domain %u has a bad name", i);
			return -EINVAL;
		}
	return 0;
}
