/* SPDX-License-Identifier: MIT */
/*
 * keytab.c - the config key-table engine (see keytab.h).
 */
#include "util/keytab.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util/errmsg.h"
#include "util/log.h"
#include "util/parse.h"

/* @k's words as an error lists them: @words, else the names in order. */
static void enum_words(const struct kvp_key *k, char *buf, size_t cap)
{
	size_t len = 0;

	buf[0] = '\0';
	if (k->words) {
		snprintf(buf, cap, "%s", k->words);
		return;
	}
	for (uint32_t i = 0; i < k->n_names; i++) {
		int n;

		if (!k->names[i])
			continue;
		n = snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", k->names[i]);
		if (n < 0 || (size_t)n >= cap - len)
			return; /* cut: still a list */
		len += (size_t)n;
	}
}

static int parse_number(const struct kvp_key *k, void *field, const char *value, char *err,
			size_t cap)
{
	bool size = k->type == KVP_KEY_SIZE;
	uint64_t v;
	int r;

	r = size ? kvp_parse_size(value, &v) : kvp_parse_u64(value, 0, UINT64_MAX, &v);
	if (r < 0) {
		kvp_errmsg(err, cap,
			   size ? "'%s' is not a size (a number with an optional K, M, G or T "
				  "suffix)" :
				  "'%s' is not a whole number",
			   value);
		return -EINVAL;
	}
	if (v < k->min || v > k->max) {
		kvp_errmsg(err, cap, "%s is out of range [%llu, %llu]", value,
			   (unsigned long long)k->min, (unsigned long long)k->max);
		return -EINVAL;
	}
	if (size && k->cap == sizeof(uint64_t))
		*(uint64_t *)field = v;
	else
		*(uint32_t *)field = (uint32_t)v;
	return 0;
}

int kvp_key_parse(const struct kvp_key *k, void *field, const char *value, char *err, size_t cap)
{
	char words[256];
	int prio;

	switch (k->type) {
	case KVP_KEY_STR:
		if (strlen(value) >= k->cap) {
			kvp_errmsg(err, cap, "too long (at most %zu bytes)", k->cap - 1);
			return -EINVAL;
		}
		strcpy(field, value);
		return 0;
	case KVP_KEY_U32:
	case KVP_KEY_SIZE:
		return parse_number(k, field, value, err, cap);
	case KVP_KEY_BOOL:
		if (!strcasecmp(value, "yes") || !strcasecmp(value, "true") ||
		    !strcasecmp(value, "on") || !strcmp(value, "1")) {
			*(bool *)field = true;
		} else if (!strcasecmp(value, "no") || !strcasecmp(value, "false") ||
			   !strcasecmp(value, "off") || !strcmp(value, "0")) {
			*(bool *)field = false;
		} else {
			kvp_errmsg(err, cap, "'%s' is not a boolean (yes, no, true, false, 1, 0)",
				   value);
			return -EINVAL;
		}
		return 0;
	case KVP_KEY_ENUM:
		for (uint32_t i = 0; i < k->n_names; i++) {
			if (k->names[i] && !strcasecmp(value, k->names[i])) {
				*(uint32_t *)field = i;
				return 0;
			}
		}
		enum_words(k, words, sizeof(words));
		kvp_errmsg(err, cap, "'%s' is not one of %s", value, words);
		return -EINVAL;
	case KVP_KEY_LEVEL:
		if (kvp_log_level_parse(value, &prio) < 0) {
			kvp_errmsg(err, cap,
				   "'%s' is not a log level (err, warning, notice, info, debug or "
				   "0..7)",
				   value);
			return -EINVAL;
		}
		*(int *)field = prio;
		return 0;
	}
	kvp_errmsg(err, cap, "no such value type");
	return -EINVAL;
}

void kvp_key_text(const struct kvp_key *k, const void *field, char *buf, size_t cap)
{
	uint64_t v;
	uint32_t e;

	switch (k->type) {
	case KVP_KEY_STR:
		snprintf(buf, cap, "%s", (const char *)field);
		return;
	case KVP_KEY_U32:
		snprintf(buf, cap, "%u", *(const uint32_t *)field);
		return;
	case KVP_KEY_SIZE:
		v = k->cap == sizeof(uint64_t) ? *(const uint64_t *)field :
						 *(const uint32_t *)field;
		if (v && !(v & ((1ull << 30) - 1)))
			snprintf(buf, cap, "%lluG", (unsigned long long)(v >> 30));
		else if (v && !(v & ((1ull << 20) - 1)))
			snprintf(buf, cap, "%lluM", (unsigned long long)(v >> 20));
		else if (v && !(v & ((1ull << 10) - 1)))
			snprintf(buf, cap, "%lluK", (unsigned long long)(v >> 10));
		else
			snprintf(buf, cap, "%llu", (unsigned long long)v);
		return;
	case KVP_KEY_BOOL:
		snprintf(buf, cap, "%s", *(const bool *)field ? "yes" : "no");
		return;
	case KVP_KEY_ENUM:
		e = *(const uint32_t *)field;
		snprintf(buf, cap, "%s", e < k->n_names && k->names[e] ? k->names[e] : "");
		return;
	case KVP_KEY_LEVEL:
		snprintf(buf, cap, "%s", kvp_log_level_name(*(const int *)field));
		return;
	}
	if (cap)
		buf[0] = '\0';
}
