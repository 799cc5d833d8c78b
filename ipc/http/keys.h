/* SPDX-License-Identifier: MIT */
/*
 * keys.h - the API key file of kvpool-http: key -> tenant (name, cache salt).
 *
 * One key per line, `KEY NAME [SALT]`, separated by spaces or tabs; `#` starts a comment
 * line; blank lines are skipped.  KEY is 8..256 printable ASCII characters (no spaces),
 * NAME 1..64 of [A-Za-z0-9._@-], SALT 1..32 printable ASCII characters and NAME when
 * absent.  Several keys may name one tenant (key rotation): they must then give it the
 * same salt.  Tenants with different salts never share cached prefix blocks in kvpoold.
 *
 * Thread: loaded on the main thread before the server starts; read-only afterwards.
 */
#ifndef KVP_IPC_HTTP_KEYS_H
#define KVP_IPC_HTTP_KEYS_H

#include <stddef.h>
#include <stdint.h>

#define KVP_HTTP_KEY_MIN 8
#define KVP_HTTP_KEY_MAX 256
#define KVP_HTTP_NAME_MAX 64
#define KVP_HTTP_TENANT_SALT_MAX 32

/**
 * struct kvp_http_tenant - who a key belongs to
 * @name:     NUL-terminated, for logs
 * @salt:     the tenant's cache salt, @salt_len bytes (1..KVP_HTTP_TENANT_SALT_MAX)
 */
struct kvp_http_tenant {
	char name[KVP_HTTP_NAME_MAX + 1];
	uint8_t salt[KVP_HTTP_TENANT_SALT_MAX];
	size_t salt_len;
};

struct kvp_http_key {
	char *key; /* owned, NUL-terminated */
	size_t len;
	size_t tenant; /* index into tenants */
};

/**
 * struct kvp_http_keys - a loaded key file (all zero: no keys)
 * @keys:     @n_keys keys
 * @tenants:  @n_tenants distinct tenants
 */
struct kvp_http_keys {
	struct kvp_http_key *keys;
	size_t n_keys;
	struct kvp_http_tenant *tenants;
	size_t n_tenants;
};

/**
 * kvp_http_keys_load() - read @path into @k (empty before the call)
 * @err: out; "PATH:LINE: why" on failure
 * Return: 0, -ENOENT/-EACCES/... when the file cannot be read, -EINVAL for a bad line,
 * a duplicate key, a tenant given two salts or a file with no key at all; -ENOMEM.
 */
int kvp_http_keys_load(struct kvp_http_keys *k, const char *path, char *err, size_t cap);

/* Free what kvp_http_keys_load() built; safe on an all-zero struct. */
void kvp_http_keys_deinit(struct kvp_http_keys *k);

/**
 * kvp_http_keys_find() - the tenant of key @key (@len bytes), or NULL
 *
 * Compares against every key in the file, each in time that depends only on the stored
 * key's length, so the time taken says nothing about how much of a key was right.
 */
const struct kvp_http_tenant *kvp_http_keys_find(const struct kvp_http_keys *k, const char *key,
						 size_t len);

#endif /* KVP_IPC_HTTP_KEYS_H */
