/* SPDX-License-Identifier: MIT */
/*
 * cursor.c - the bounds-checked read cursor (see cursor.h).
 *
 * Invariant: off <= size, so size - off never wraps; a take compares against what is
 * left rather than computing off + n, which could overflow for a hostile length.
 */
#include "util/cursor.h"

#include <errno.h>

const void *kvp_cur_take(struct kvp_cur *c, uint64_t n)
{
	static const uint8_t none[1];
	const void *p;

	if (n > c->size - c->off)
		return NULL;
	/* no input at all (NULL, 0): zero bytes are still there; NULL + 0 is undefined */
	if (!c->base)
		return none;
	p = c->base + c->off;
	c->off += (size_t)n;
	return p;
}

int kvp_cur_le32(struct kvp_cur *c, uint32_t *v)
{
	const uint8_t *p = kvp_cur_take(c, 4);

	if (!p)
		return -EBADMSG;
	*v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	return 0;
}

int kvp_cur_le64(struct kvp_cur *c, uint64_t *v)
{
	uint32_t lo, hi;

	/* both halves or neither: a short read leaves the cursor where it was */
	if (kvp_cur_left(c) < 8)
		return -EBADMSG;
	if (kvp_cur_le32(c, &lo) < 0 || kvp_cur_le32(c, &hi) < 0)
		return -EBADMSG;
	*v = (uint64_t)hi << 32 | lo;
	return 0;
}
