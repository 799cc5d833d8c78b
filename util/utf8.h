/* SPDX-License-Identifier: MIT */
/*
 * utf8.h - UTF-8 validation, RFC 3629: what a strict JSON parser accepts.
 *
 * Well-formed means no overlong forms, no surrogates (U+D800..U+DFFF) and nothing above
 * U+10FFFF; every other byte sequence is ill-formed.  kvpool's one policy for
 * ill-formed input (status JSON, the CLI, kvpool-run, the engine's text) is that each
 * byte that does not begin a well-formed character stands for U+FFFD.
 * Thread: any (pure functions).
 */
#ifndef KVP_UTIL_UTF8_H
#define KVP_UTIL_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Length (1..4) of the well-formed character at @p, of which @n > 0 bytes are
 * available, or 0 when the bytes there do not begin one (ill-formed, or cut short).
 */
size_t kvp_utf8_char_len(const void *p, size_t n);

/* Whether all @n bytes at @p are well-formed UTF-8. */
bool kvp_utf8_valid(const void *p, size_t n);

#endif /* KVP_UTIL_UTF8_H */
