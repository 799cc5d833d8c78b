/* SPDX-License-Identifier: MIT */
/*
 * poolhdr.c - is a mapped pool segment's header one we can trust?  Pure, no state, no
 * syscalls: built into kvp-shm and into libkvpool (see poolhdr.h).  Thread: any.
 */
#include "shm/poolhdr.h"

#include <errno.h>

int kvp_pool_header_check(const struct kvp_pool_header *hdr, size_t seg_bytes,
			  struct kvp_geom *geom)
{
	struct kvp_geom g;
	uint64_t end;

	if (seg_bytes < sizeof(*hdr))
		return -EINVAL;
	if (hdr->magic != KVP_POOL_MAGIC || hdr->version != KVP_POOL_VERSION)
		return -EPROTO;
	if (hdr->header_bytes != sizeof(*hdr) || kvp_geom_init(&g, &hdr->shape) < 0)
		return -EINVAL;
	if (hdr->block_bytes != g.block_bytes || hdr->block_stride != g.block_stride ||
	    hdr->segment_bytes != seg_bytes || hdr->data_offset < sizeof(*hdr) ||
	    hdr->data_offset % KVP_BLOCK_ALIGN || !hdr->n_blocks ||
	    hdr->page_kind >= KVP_PAGE__COUNT)
		return -EINVAL;
	/* the page size follows from the kind; blocks and the segment end on page bounds */
	if (hdr->page_bytes != (hdr->page_kind == KVP_PAGE_HUGETLB_2M ? KVP_HUGE_PAGE_BYTES :
									KVP_SMALL_PAGE_BYTES) ||
	    hdr->data_offset % hdr->page_bytes || seg_bytes % hdr->page_bytes)
		return -EINVAL;
	if (__builtin_mul_overflow((uint64_t)hdr->n_blocks, hdr->block_stride, &end) ||
	    __builtin_add_overflow(end, hdr->data_offset, &end) || end > seg_bytes)
		return -EINVAL;
	if (geom)
		*geom = g;
	return 0;
}
