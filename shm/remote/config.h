/* SPDX-License-Identifier: MIT */
/*
 * config.h - what the remote tier is told: where the store is (`--remote URL`), each
 * trust domain's name and credentials, the TTL, the publish mode, the deadlines, the
 * queue bounds and the circuit breaker (docs/remote.md has the table).
 *
 * URLs: `redis://HOST[:PORT]` (HOST a name, an IPv4 literal or a bracketed IPv6 literal;
 * port 6379 by default) or `unix:/absolute/path` (also `unix:///absolute/path`).
 * Credentials never go in the URL (a command line is world-readable in /proc): they are
 * per domain.  `rediss://` is refused with a sentence saying why: Debian 12's hiredis
 * (0.14.1) has no TLS (hiredis_ssl came with 1.0).  A TCP store that is not on loopback
 * is refused unless @allow_plaintext says the network is trusted.
 *
 * Domain names, user names and host ids are restricted to [A-Za-z0-9_-] (host ids also
 * '.'): a domain's key prefix `kvp1:NAME:` then holds no glob character, no ':' and no
 * hash-tag brace, so one domain's ACL pattern can never match another domain's keys and
 * the keys stay cluster-safe.
 *
 * Thread: built and checked by the caller before kvp_remote_new() (which copies it).
 */
#ifndef KVP_SHM_REMOTE_CONFIG_H
#define KVP_SHM_REMOTE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVP_REMOTE_MAX_DOMAINS 16
#define KVP_REMOTE_NAME_MAX 33	/* domain, user and numerics names, NUL included */
#define KVP_REMOTE_PASS_MAX 129 /* a password, NUL included */
#define KVP_REMOTE_HOST_MAX 256 /* a TCP host name, NUL included */
#define KVP_REMOTE_PATH_MAX 108 /* sizeof(sun_path), NUL included */
#define KVP_REMOTE_URL_MAX 300	/* the URL as given, NUL included */
#define KVP_REMOTE_DEFAULT_PORT 6379

enum kvp_remote_transport {
	KVP_REMOTE_TCP = 1,
	KVP_REMOTE_UNIX = 2,
};

/* Which blocks are written to the store. */
enum kvp_remote_publish_mode {
	KVP_REMOTE_PUBLISH_ALL = 0,	  /* every full block, when it is created */
	KVP_REMOTE_PUBLISH_SELECTIVE = 1, /* only blocks used a second time or evicted */
	KVP_REMOTE_PUBLISH_OFF = 2,	  /* read only */
};

/**
 * struct kvp_remote_addr - a parsed store URL
 * @transport: enum kvp_remote_transport
 * @port:      TCP port
 * @loopback:  the store is on this host (a Unix socket, 127.0.0.0/8, ::1, "localhost")
 * @host:      TCP host (an IPv6 literal without its brackets)
 * @path:      Unix socket path
 */
struct kvp_remote_addr {
	uint32_t transport;
	uint16_t port;
	bool loopback;
	char host[KVP_REMOTE_HOST_MAX];
	char path[KVP_REMOTE_PATH_MAX];
};

/**
 * struct kvp_remote_domain_config - one trust domain's view of the store
 * @name:     the domain; keys are `kvp1:NAME:...`
 * @user:     its ACL user ("" = the server's default user)
 * @password: its password ("" = no AUTH)
 */
struct kvp_remote_domain_config {
	char name[KVP_REMOTE_NAME_MAX];
	char user[KVP_REMOTE_NAME_MAX];
	char password[KVP_REMOTE_PASS_MAX];
};

/**
 * struct kvp_remote_config - the remote tier's settings (kvp_remote_config_defaults())
 * @url:                 the store, as given
 * @addr:                @url parsed (kvp_remote_config_set("url", ...))
 * @ttl_s:               expiry of every block written (SET NX EX), seconds
 * @publish:             enum kvp_remote_publish_mode
 * @connect_timeout_ms:  a connection attempt (TCP/Unix connect) gives up after this
 * @op_timeout_ms:       a connection that owes replies and receives nothing for this
 *                       long is dead (stall); also bounds the handshake and the
 *                       existence check
 * @fetch_timeout_ms:    default deadline of a whole fetch (existence check + values)
 * @max_fetch_blocks:    blocks one fetch may look for (bounds the existence check)
 * @queue_blocks:        publishes queued per domain before new ones are dropped
 * @fetch_queue:         fetches queued per domain before new ones are refused
 * @breaker_errors:      consecutive connection errors that open the breaker
 * @breaker_probe_ms:    first probe this long after the breaker opened
 * @breaker_probe_max_ms: probes back off (doubling) up to this interval
 * @bandwidth_mbps:      transfer rate assumed before the first fetch measured one (MB/s)
 * @allow_plaintext:     talk to a non-loopback TCP store without TLS
 * @n_domains, @domains: the trust domains, indexed by their position (the domain id)
 */
struct kvp_remote_config {
	char url[KVP_REMOTE_URL_MAX];
	struct kvp_remote_addr addr;
	uint32_t ttl_s;
	uint32_t publish;
	uint32_t connect_timeout_ms;
	uint32_t op_timeout_ms;
	uint32_t fetch_timeout_ms;
	uint32_t max_fetch_blocks;
	uint32_t queue_blocks;
	uint32_t fetch_queue;
	uint32_t breaker_errors;
	uint32_t breaker_probe_ms;
	uint32_t breaker_probe_max_ms;
	uint32_t bandwidth_mbps;
	bool allow_plaintext;
	uint32_t n_domains;
	struct kvp_remote_domain_config domains[KVP_REMOTE_MAX_DOMAINS];
};

/* Defaults: no URL (the tier is off), TTL 1 h, publish all, connect 100 ms, op 250 ms,
 * fetch 1000 ms, 256 blocks per fetch, 32 publishes and 8 fetches queued per domain,
 * breaker after 3 errors, probes from 250 ms backing off to 5 s, 1000 MB/s assumed. */
void kvp_remote_config_defaults(struct kvp_remote_config *cfg);

/**
 * kvp_remote_url_parse() - parse a store URL
 * @addr: out; valid on 0
 * Return: 0; -EINVAL (bad syntax, port, or a user name/password in the URL);
 * -EPROTONOSUPPORT (rediss://: no TLS in this hiredis build; another scheme);
 * -ENAMETOOLONG.  @err says which.
 */
int kvp_remote_url_parse(struct kvp_remote_addr *addr, const char *url, char *err, size_t errlen);

/**
 * kvp_remote_config_set() - set one key from a config file or a flag
 * Keys: url, ttl_s, publish (all|selective|off), connect_timeout_ms, op_timeout_ms,
 * fetch_timeout_ms, max_fetch_blocks, queue_blocks, fetch_queue, breaker_errors,
 * breaker_probe_ms, breaker_probe_max_ms, bandwidth_mbps, allow_plaintext (0|1).
 * Return: 0; -ENOENT for an unknown key; -EINVAL (-ERANGE) for a bad value.
 */
int kvp_remote_config_set(struct kvp_remote_config *cfg, const char *key, const char *value,
			  char *err, size_t errlen);

/**
 * kvp_remote_config_add_domain() - add a trust domain; its id is its position
 * @id:       out; the domain id (0, 1, ...)
 * @user:     ACL user, or NULL/"" for the default user
 * @password: or NULL/"" for none
 * Return: 0; -EINVAL (bad name or user, a user without a password, a password with
 * spaces or control characters);
 * -EEXIST (the name is taken); -ENOSPC (KVP_REMOTE_MAX_DOMAINS).
 */
int kvp_remote_config_add_domain(struct kvp_remote_config *cfg, uint32_t *id, const char *name,
				 const char *user, const char *password, char *err, size_t errlen);

/**
 * kvp_remote_config_check() - is @cfg usable?
 * Return: 0; -EINVAL (no URL, no domain, a value out of range, a probe interval above
 * its maximum); -EPERM (a non-loopback store without allow_plaintext).
 */
int kvp_remote_config_check(const struct kvp_remote_config *cfg, char *err, size_t errlen);

/* Is @s a valid domain or user name (1..32 of [A-Za-z0-9_-])? */
bool kvp_remote_name_ok(const char *s);

/* The mode's name ("all", "selective", "off"). */
const char *kvp_remote_publish_name(uint32_t mode);

#endif /* KVP_SHM_REMOTE_CONFIG_H */
