/* SPDX-License-Identifier: MIT */
/*
 * utf8.c - RFC 3629 validation (see utf8.h).
 *
 * The lead byte gives the length; the range of the second byte is what excludes
 * overlong forms (E0, F0), surrogates (ED) and code points past U+10FFFF (F4); later
 * bytes are plain continuation bytes.
 */
#include "util/utf8.h"

#include <stdint.h>

size_t kvp_utf8_char_len(const void *s, size_t n)
{
	const uint8_t *p = s;
	uint8_t lo = 0x80, hi = 0xbf;
	size_t len;

	if (p[0] < 0x80)
		return 1;
	if (p[0] < 0xc2 || p[0] > 0xf4)
		return 0;
	len = p[0] < 0xe0 ? 2 : p[0] < 0xf0 ? 3 : 4;
	if (len > n)
		return 0;
	if (p[0] == 0xe0)
		lo = 0xa0;
	else if (p[0] == 0xed)
		hi = 0x9f;
	else if (p[0] == 0xf0)
		lo = 0x90;
	else if (p[0] == 0xf4)
		hi = 0x8f;
	if (p[1] < lo || p[1] > hi)
		return 0;
	for (size_t k = 2; k < len; k++)
		if ((p[k] & 0xc0) != 0x80)
			return 0;
	return len;
}

bool kvp_utf8_valid(const void *s, size_t n)
{
	const uint8_t *p = s;
	size_t i = 0;

	while (i < n) {
		size_t len = kvp_utf8_char_len(p + i, n - i);

		if (!len)
			return false;
		i += len;
	}
	return true;
}
