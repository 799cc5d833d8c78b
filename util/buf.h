/* SPDX-License-Identifier: MIT */
/*
 * buf.h - a text being built, in memory that grows or in a caller's fixed buffer.
 *
 * Writes never fail on their own: the first failure (the fixed buffer is full, or
 * memory ran out) is kept in @err and every later write is dropped, so a caller writes
 * its whole text and checks once, with kvp_buf_finish().  A text is whole or reported
 * failed, never silently cut.  The text stays NUL-terminated (a fixed buffer keeps one
 * byte for the NUL: a write fits when len + n < cap, as with snprintf()).
 * Thread: a buffer belongs to the thread writing it.
 */
#ifndef KVP_UTIL_BUF_H
#define KVP_UTIL_BUF_H

#include <stdbool.h>
#include <stddef.h>

/**
 * struct kvp_buf - text under construction
 * @p:     the text (NULL until the first write of a growable buffer)
 * @len:   bytes written (without the NUL)
 * @cap:   bytes at @p
 * @fixed: @p is the caller's and is never grown
 * @err:   0, -ENOSPC (a fixed buffer was too small) or -ENOMEM
 */
struct kvp_buf {
	char *p;
	size_t len;
	size_t cap;
	bool fixed;
	int err;
};

/* A growable buffer; kvp_buf_deinit() frees it. */
#define KVP_BUF_INIT \
	{ \
		.p = NULL \
	}

/* Write into @cap bytes at @p (the caller's); deinit is then a no-op. */
void kvp_buf_init_fixed(struct kvp_buf *b, char *p, size_t cap);

/* Free a growable buffer's memory; safe after KVP_BUF_INIT and on fixed buffers. */
void kvp_buf_deinit(struct kvp_buf *b);

/* Append @n bytes of @s. */
void kvp_buf_add(struct kvp_buf *b, const void *s, size_t n);

/* Append printf output. */
void kvp_buf_printf(struct kvp_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Record a failure of the caller's own (e.g. a library call that failed): the text is lost. */
void kvp_buf_fail(struct kvp_buf *b, int err);

/* Return: the length of the text (fits in an int), or the first failure (-errno). */
int kvp_buf_finish(const struct kvp_buf *b);

#endif /* KVP_UTIL_BUF_H */
