/* SPDX-License-Identifier: MIT */
/*
 * escape.h - text made safe for a terminal: what a model generates is arbitrary bytes
 * (a synthetic model's especially), and raw control characters would move the cursor,
 * change colours or ring the bell.  Uses none of kvpool's code.
 */
#ifndef KVP_UTIL_ESCAPE_H
#define KVP_UTIL_ESCAPE_H

#include <stddef.h>

#include "util/buf.h"

/**
 * kvp_escape_tty() - append @n bytes of @p to @out, escaped for a terminal
 *
 * Newline and tab pass as they are, and so does every well-formed UTF-8 character that
 * is not a control character.  The other C0 controls, DEL, the C1 controls
 * (U+0080..U+009F) and each byte that does not begin a well-formed character are
 * written as \xNN (of each byte), so nothing reaches the terminal that it would
 * interpret.  A failed append is recorded in @out as kvp_buf records it.
 */
void kvp_escape_tty(struct kvp_buf *out, const char *p, size_t n);

#endif /* KVP_UTIL_ESCAPE_H */
