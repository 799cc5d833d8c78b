/* SPDX-License-Identifier: MIT */
/*
 * keys.c - the API key file (see keys.h).
 */
#include "ipc/http/keys.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errmsg.h"

static bool printable(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x21 || (unsigned char)s[i] > 0x7e)
			return false;
	return true;
}

static bool name_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '@' || c == '-'))
			return false;
	}
	return n >= 1 && n <= KVP_HTTP_NAME_MAX;
}

/* Split @line into at most 4 whitespace-separated fields.  Return: the count. */
static int fields(char *line, char **f, size_t *len)
{
	int n = 0;
	char *p = line;

	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
			p++;
		if (!*p || n == 4)
			return *p ? 5 : n;
		f[n] = p;
		while (*p && *p != ' ' && *p != '\t' && *p != '\r' && *p != '\n')
			p++;
		len[n] = (size_t)(p - f[n]);
		n++;
	}
}

/* Add one parsed line.  Return: 0, -EINVAL (@why says why) or -ENOMEM. */
static int add_key(struct kvp_http_keys *k, char **f, size_t *len, int nf, const char **why)
{
	const char *salt = nf == 3 ? f[2] : f[1];
	size_t salt_len = nf == 3 ? len[2] : len[1];
	struct kvp_http_key *nk;
	size_t t;

	if (len[0] < KVP_HTTP_KEY_MIN || len[0] > KVP_HTTP_KEY_MAX) {
		*why = "the key must be 8 to 256 characters";
		return -EINVAL;
	}
	if (!name_ok(f[1], len[1])) {
		*why = "the name must be 1 to 64 of A-Z a-z 0-9 . _ @ -";
		return -EINVAL;
	}
	if (salt_len > KVP_HTTP_TENANT_SALT_MAX || !printable(salt, salt_len)) {
		*why = "the salt must be 1 to 32 printable characters";
		return -EINVAL;
	}
	for (size_t i = 0; i < k->n_keys; i++) {
		if (k->keys[i].len == len[0] && !memcmp(k->keys[i].key, f[0], len[0])) {
			*why = "this key is already listed";
			return -EINVAL;
		}
	}
	for (t = 0; t < k->n_tenants; t++) {
		struct kvp_http_tenant *tn = &k->tenants[t];

		if (strlen(tn->name) != len[1] || memcmp(tn->name, f[1], len[1]))
			continue;
		if (tn->salt_len != salt_len || memcmp(tn->salt, salt, salt_len)) {
			*why = "this name was given another salt on an earlier line";
			return -EINVAL;
		}
		break;
	}
	if (t == k->n_tenants) {
		struct kvp_http_tenant *nt = realloc(k->tenants,
						     (k->n_tenants + 1) * sizeof(*k->tenants));

		if (!nt)
			return -ENOMEM;
		k->tenants = nt;
		memset(&nt[t], 0, sizeof(nt[t]));
		memcpy(nt[t].name, f[1], len[1]);
		memcpy(nt[t].salt, salt, salt_len);
		nt[t].salt_len = salt_len;
		k->n_tenants++;
	}
	nk = realloc(k->keys, (k->n_keys + 1) * sizeof(*k->keys));
	if (!nk)
		return -ENOMEM;
	k->keys = nk;
	nk[k->n_keys].key = strndup(f[0], len[0]);
	if (!nk[k->n_keys].key)
		return -ENOMEM;
	nk[k->n_keys].len = len[0];
	nk[k->n_keys].tenant = t;
	k->n_keys++;
	return 0;
}

int kvp_http_keys_load(struct kvp_http_keys *k, const char *path, char *err, size_t cap)
{
	FILE *f = fopen(path, "re");
	char *line = NULL;
	size_t line_cap = 0;
	unsigned int lineno = 0;
	ssize_t n;
	int r = 0;

	*k = (struct kvp_http_keys){ 0 };
	if (!f) {
		r = -errno;
		kvp_errmsg(err, cap, "%s: %s", path, strerror(-r));
		return r;
	}
	while ((n = getline(&line, &line_cap, f)) >= 0) {
		const char *why = NULL;
		char *fl[4];
		size_t len[4];
		int nf;

		lineno++;
		if ((size_t)n != strlen(line)) {
			why = "a NUL byte in the line";
			r = -EINVAL;
		} else {
			nf = fields(line, fl, len);
			if (nf == 0 || fl[0][0] == '#')
				continue;
			if (nf < 2 || nf > 3) {
				why = "want KEY NAME [SALT]";
				r = -EINVAL;
			} else {
				r = add_key(k, fl, len, nf, &why);
			}
		}
		if (r) {
			if (r == -ENOMEM)
				kvp_errmsg(err, cap, "%s: out of memory", path);
			else
				kvp_errmsg(err, cap, "%s:%u: %s", path, lineno, why);
			goto err_free;
		}
	}
	if (ferror(f)) {
		r = -EIO;
		kvp_errmsg(err, cap, "%s: read error", path);
		goto err_free;
	}
	if (!k->n_keys) {
		r = -EINVAL;
		kvp_errmsg(err, cap, "%s: no key in the file", path);
		goto err_free;
	}
	free(line);
	fclose(f);
	return 0;

err_free:
	free(line);
	fclose(f);
	kvp_http_keys_deinit(k);
	return r;
}

void kvp_http_keys_deinit(struct kvp_http_keys *k)
{
	for (size_t i = 0; i < k->n_keys; i++) {
		/* keys are secrets: do not leave them in freed memory */
		explicit_bzero(k->keys[i].key, k->keys[i].len);
		free(k->keys[i].key);
	}
	free(k->keys);
	free(k->tenants);
	*k = (struct kvp_http_keys){ 0 };
}

const struct kvp_http_tenant *kvp_http_keys_find(const struct kvp_http_keys *k, const char *key,
						 size_t len)
{
	const struct kvp_http_tenant *found = NULL;

	for (size_t i = 0; i < k->n_keys; i++) {
		const struct kvp_http_key *e = &k->keys[i];
		volatile unsigned char diff = len != e->len;

		for (size_t j = 0; j < e->len; j++)
			diff |= (unsigned char)e->key[j] ^ (unsigned char)(j < len ? key[j] : 0);
		if (!diff)
			found = &k->tenants[e->tenant];
	}
	return found;
}
