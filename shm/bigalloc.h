/* SPDX-License-Identifier: MIT */
/*
 * bigalloc.h - zeroed allocations of daemon-side metadata arrays (block metadata, index
 * entries) that may be tens of MiB and are read at random: backed by 2 MiB transparent
 * huge pages where the kernel allows, so a lookup's cache misses do not also miss the TLB.
 * Freed with free().  Thread-agnostic.
 */
#ifndef KVP_SHM_BIGALLOC_H
#define KVP_SHM_BIGALLOC_H

#include <stddef.h>

/* calloc(@n, @size), 2 MiB aligned and MADV_HUGEPAGE-advised when 2 MiB or more. */
void *kvp_big_calloc(size_t n, size_t size);

#endif /* KVP_SHM_BIGALLOC_H */
