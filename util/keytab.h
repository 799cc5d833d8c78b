/* SPDX-License-Identifier: MIT */
/*
 * keytab.h - the config key-table engine: a key's value type (string, number, size,
 * boolean, a word out of a list, a log level), parsed from text into its field with its
 * bounds and printed back as text, with one wording of every error.  kvpoold's config
 * (svc/config.c, svc/domcfg.c) and kvpool-http's (ipc/http/config.c) describe their keys
 * in their own tables and parse and print every value through this one engine.
 * Thread: any (pure functions on the caller's field).
 */
#ifndef KVP_UTIL_KEYTAB_H
#define KVP_UTIL_KEYTAB_H

#include <stddef.h>
#include <stdint.h>

enum kvp_key_type {
	KVP_KEY_STR,   /* char[cap]: at most cap - 1 bytes */
	KVP_KEY_U32,   /* uint32_t, a whole number in [min, max] */
	KVP_KEY_SIZE,  /* bytes with an optional K, M, G or T suffix, in [min, max]; cap 8:
			* a uint64_t field, else a uint32_t */
	KVP_KEY_BOOL,  /* bool: yes/no, true/false, on/off, 1/0 */
	KVP_KEY_ENUM,  /* uint32_t: the index of one of names[0 .. n_names) (any case) */
	KVP_KEY_LEVEL, /* int: a syslog priority (util/log.h kvp_log_level_parse()) */
};

/**
 * struct kvp_key - how one key's value is read and shown
 * @type:    enum kvp_key_type
 * @cap:     STR: the buffer's size; SIZE: the field's (8 or 4)
 * @min:     U32, SIZE: bounds, inclusive
 * @max:
 * @names:   ENUM: the word of each value (a NULL entry is never matched nor shown)
 * @n_names: ENUM: entries in @names
 * @words:   ENUM: the list an error shows ("a, b, c"); NULL: @names in order
 */
struct kvp_key {
	enum kvp_key_type type;
	size_t cap;
	uint64_t min, max;
	const char *const *names;
	uint32_t n_names;
	const char *words;
};

/*
 * kvp_key_parse() - parse @value as @k into @field
 * @err: out; on error, why, without the key's name ("'x' is not a whole number")
 * Return: 0, or -EINVAL (the field is unchanged).
 */
int kvp_key_parse(const struct kvp_key *k, void *field, const char *value, char *err, size_t cap);

/*
 * kvp_key_text() - @field as text that kvp_key_parse() reads back to the same value
 * (sizes with the largest of the G, M, K suffixes that divides them exactly).
 */
void kvp_key_text(const struct kvp_key *k, const void *field, char *buf, size_t cap);

#endif /* KVP_UTIL_KEYTAB_H */
