/* SPDX-License-Identifier: MIT */
/*
 * poolhdr.h - the check of a pool segment's header (struct kvp_pool_header), pure ABI.
 *
 * The daemon writes the header (shm/segment.c); a client that maps a segment read-only
 * checks it before trusting a single offset.  The check is pure arithmetic on the 128
 * bytes of the header and the segment size, so it is compiled into both the daemon's
 * kvp-shm library and the shared libkvpool (hidden there): one piece of code for both.
 */
#ifndef KVP_SHM_POOLHDR_H
#define KVP_SHM_POOLHDR_H

#include <stddef.h>

#include "kvpool/layout.h"
#include "shm/geom.h"

/* Page sizes a segment can have (kvp_pool_header.page_bytes follows from page_kind). */
#define KVP_SMALL_PAGE_BYTES 4096u
#define KVP_HUGE_PAGE_BYTES (2u << 20)

/**
 * kvp_pool_header_check() - does @hdr (read from a mapped segment of @seg_bytes) describe
 * a valid pool?  For clients and tests: magic, version, shape (kvp_geom_init), stride and
 * block sizes matching the shape, the page size matching the page kind, and page-aligned
 * blocks that fit inside the segment.
 * @hdr:       the header, at offset 0 of the mapping (borrowed)
 * @seg_bytes: bytes mapped; a shorter mapping than the header is rejected
 * @geom:      out (optional); the geometry derived from the header
 * Return: 0, -EPROTO (magic/version), or -EINVAL (inconsistent sizes).
 */
int kvp_pool_header_check(const struct kvp_pool_header *hdr, size_t seg_bytes,
			  struct kvp_geom *geom);

#endif /* KVP_SHM_POOLHDR_H */
