/* SPDX-License-Identifier: MIT */
/*
 * escape.c - text made safe for a terminal (see escape.h).
 * Thread: the caller's.
 */
#include "util/escape.h"

#include <stdbool.h>
#include <stdint.h>

#include "util/utf8.h"

static void hex_bytes(struct kvp_buf *out, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		kvp_buf_printf(out, "\\x%02x", p[i]);
}

void kvp_escape_tty(struct kvp_buf *out, const char *text, size_t n)
{
	const unsigned char *p = (const unsigned char *)text;
	size_t i = 0, run = 0; /* run: printable bytes from i - run on, not yet appended */

	while (i < n) {
		unsigned char c = p[i];
		size_t len = c < 0x80 ? 1 : kvp_utf8_char_len(p + i, n - i);
		bool ok;

		if (c < 0x80)
			ok = c == '\n' || c == '\t' || (c >= 0x20 && c != 0x7f);
		else /* C1 controls are U+0080..U+009F: 0xc2 0x80..0x9f */
			ok = len && !(len == 2 && c == 0xc2 && p[i + 1] < 0xa0);
		if (ok) {
			run += len;
			i += len;
			continue;
		}
		kvp_buf_add(out, text + i - run, run);
		run = 0;
		hex_bytes(out, p + i, len ? len : 1);
		i += len ? len : 1;
	}
	kvp_buf_add(out, text + i - run, run);
}
