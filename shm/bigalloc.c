/* SPDX-License-Identifier: MIT */
/*
 * bigalloc.c - large zeroed metadata arrays on transparent huge pages (see bigalloc.h).
 * The advice is best effort: with THP off the memory is ordinary pages, same contents.
 */
#include "shm/bigalloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE (2u << 20)

void *kvp_big_calloc(size_t n, size_t size)
{
	size_t bytes;
	void *p;

	if (__builtin_mul_overflow(n, size, &bytes))
		return NULL;
	if (bytes < HUGE)
		return calloc(n ? n : 1, size ? size : 1);
	bytes = (bytes + HUGE - 1) & ~(size_t)(HUGE - 1);
	if (posix_memalign(&p, HUGE, bytes))
		return NULL;
	(void)madvise(p, bytes, MADV_HUGEPAGE);
	memset(p, 0, bytes);
	return p;
}
