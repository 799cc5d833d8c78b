/* SPDX-License-Identifier: MIT */
/*
 * buf.c - text buffers (see buf.h).
 *
 * Invariant: len < cap whenever p is not NULL, and p[len] is NUL; once err is set the
 * buffer only ever changes through kvp_buf_deinit().
 */
#include "util/buf.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kvp_buf_init_fixed(struct kvp_buf *b, char *p, size_t cap)
{
	*b = (struct kvp_buf){ .p = p, .cap = cap, .fixed = true };
	if (!cap)
		b->err = -ENOSPC;
	else
		p[0] = '\0';
}

void kvp_buf_deinit(struct kvp_buf *b)
{
	if (!b->fixed)
		free(b->p);
	*b = (struct kvp_buf)KVP_BUF_INIT;
}

void kvp_buf_fail(struct kvp_buf *b, int err)
{
	if (!b->err)
		b->err = err;
}

/* Make room for @n more bytes and the NUL.  Return: whether it is there. */
static bool room(struct kvp_buf *b, size_t n)
{
	size_t cap;
	char *p;

	if (b->err)
		return false;
	if (b->p && n < b->cap - b->len)
		return true;
	if (b->fixed || n > SIZE_MAX / 2 - b->len) {
		b->err = b->fixed ? -ENOSPC : -ENOMEM;
		return false;
	}
	cap = b->cap ? b->cap : 256;
	while (cap <= b->len + n)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p) {
		b->err = -ENOMEM;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void kvp_buf_add(struct kvp_buf *b, const void *s, size_t n)
{
	if (!room(b, n))
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void kvp_buf_printf(struct kvp_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->err)
		return;
	/* first try in the room there is; most writes fit */
	va_start(ap, fmt);
	n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
	va_end(ap);
	if (n < 0) {
		b->err = -EINVAL;
		return;
	}
	if (b->p && (size_t)n < b->cap - b->len) {
		b->len += (size_t)n;
		return;
	}
	if (!room(b, (size_t)n)) {
		if (b->p)
			b->p[b->len] = '\0'; /* vsnprintf() may have written a partial tail */
		return;
	}
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

int kvp_buf_finish(const struct kvp_buf *b)
{
	if (b->err)
		return b->err;
	if (b->len > INT_MAX)
		return -EOVERFLOW;
	return (int)b->len;
}
