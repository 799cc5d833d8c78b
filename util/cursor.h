/* SPDX-License-Identifier: MIT */
/*
 * cursor.h - a bounds-checked read cursor over untrusted bytes.
 *
 * Client frames (ipc/proto.c) and GGUF files (compute/gguf.c) are read only through
 * it: every read asks for a length first and gets NULL (or -EBADMSG) when fewer bytes
 * remain, so no parser ever computes a pointer past the end of its input.  Integers are
 * read little-endian, the byte order of both formats.
 * Thread: a cursor belongs to the thread parsing with it.
 */
#ifndef KVP_UTIL_CURSOR_H
#define KVP_UTIL_CURSOR_H

#include <stddef.h>
#include <stdint.h>

/**
 * struct kvp_cur - a position in @size bytes at @base
 * @base: first byte (borrowed; must outlive the cursor)
 * @off:  bytes consumed so far (<= @size)
 * @size: bytes in all
 */
struct kvp_cur {
	const uint8_t *base;
	size_t off;
	size_t size;
};

static inline void kvp_cur_init(struct kvp_cur *c, const void *p, size_t n)
{
	*c = (struct kvp_cur){ .base = p, .off = 0, .size = n };
}

/* Bytes not consumed yet. */
static inline size_t kvp_cur_left(const struct kvp_cur *c)
{
	return c->size - c->off;
}

/*
 * The current position advanced by @n, or NULL (and no move) when fewer remain.  Taking
 * 0 bytes never fails, also from a cursor over no input (NULL, 0): a non-NULL pointer
 * to nothing.
 */
const void *kvp_cur_take(struct kvp_cur *c, uint64_t n);

/* A little-endian integer; 0, or -EBADMSG (no move) when the input is short. */
int kvp_cur_le32(struct kvp_cur *c, uint32_t *v);
int kvp_cur_le64(struct kvp_cur *c, uint64_t *v);

#endif /* KVP_UTIL_CURSOR_H */
