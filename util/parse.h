/* SPDX-License-Identifier: MIT */
/*
 * parse.h - strict number parsing for flags, config values and environment variables.
 *
 * Strict means: the whole string is the number (no leading space or sign, no trailing
 * text), and a value that does not fit is an error, never a wrapped or clamped value.
 * Every function returns 0 with *@out set, -EINVAL for text that is not such a number,
 * or -ERANGE for a number outside the range asked for (or beyond the type); *@out is
 * left untouched on error.  Thread: any (no state; strtoull/strtof only).
 */
#ifndef KVP_UTIL_PARSE_H
#define KVP_UTIL_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* Decimal digits only, in [@min, @max]. */
int kvp_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out);

/* Decimal digits with an optional leading '-' (no '+'), in [@min, @max]. */
int kvp_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);

/**
 * kvp_parse_size() - a byte count: "512", "64K", "3m", "2G", "2GiB", "1TB"
 *
 * Suffixes K, M, G, T (either case) are powers of 1024 and may be followed by "B" or
 * "iB"; a bare number may end in "B".
 * Return: 0, -EINVAL, or -ERANGE when the bytes overflow 64 bits.
 */
int kvp_parse_size(const char *s, uint64_t *out);

/* A finite decimal number ("0.5", "-1", ".25", "1e-3") in [@min, @max]. */
int kvp_parse_float(const char *s, float min, float max, float *out);

/**
 * kvp_parse_ids() - "1,2,3" -> token ids, each in [0, INT32_MAX]
 * @ids: out; malloc()ed array (the caller frees it); set only on success
 * @n:   out; how many (>= 1)
 * Return: 0, -EINVAL (an empty list or element, or not a number), -ERANGE, -ENOMEM.
 */
int kvp_parse_ids(const char *s, int32_t **ids, size_t *n);

#endif /* KVP_UTIL_PARSE_H */
