/* SPDX-License-Identifier: MIT */
/*
 * segment.h - one pool segment: a sealed memfd holding a kvp_pool_header and the blocks.
 *
 * Life of a segment (kvp_pool_new() drives it; other callers rarely need to):
 *
 *	kvp_segment_open()      memfd (hugetlb / THP-advised / 4 KiB), sized, mapped RW,
 *	                        header written; nothing faulted in yet
 *	(bind NUMA ranges)      kvp_numa_bind() on arena ranges, before any page exists
 *	kvp_segment_prefault()  fault every page in once (memory stays for the pool's life)
 *	kvp_segment_seal()      F_SEAL_SHRINK|GROW|FUTURE_WRITE|SEAL: from now on only our
 *	                        existing mapping can write; every new mapping is read-only
 *	kvp_segment_reopen_ro() O_RDONLY fds for clients (defence in depth on top of the seal)
 *
 * Page modes: AUTO tries MFD_HUGETLB (2 MiB, needs pages reserved in
 * /proc/sys/vm/nr_hugepages), then a plain memfd advised MADV_HUGEPAGE, then 4 KiB.
 * REQUIRE_HUGE accepts only MFD_HUGETLB (reserved pages are the only huge pages the
 * kernel guarantees; THP may be refused or split) and fails with -ENOMEM when too few are
 * free, -EOPNOTSUPP when the kernel has no hugetlb memfd.  OFF uses 4 KiB pages only.
 * The kind obtained is read back with kvp_segment_page_kind(); after prefault a THP
 * segment is verified in /proc/self/smaps and reported as 4 KiB when it got no huge page.
 *
 * Thread: a segment is created and sealed on one thread (daemon start); afterwards it is
 * immutable except for block contents, which the pool's owner writes.
 */
#ifndef KVP_SHM_SEGMENT_H
#define KVP_SHM_SEGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "kvpool/layout.h"
#include "shm/geom.h"
#include "shm/poolhdr.h" /* KVP_*_PAGE_BYTES; kvp_pool_header_check() */

/* How hard to try for huge pages (config "pool_pages = auto|require|off"). */
enum kvp_page_mode {
	KVP_PAGES_AUTO = 0,
	KVP_PAGES_REQUIRE_HUGE,
	KVP_PAGES_OFF,
};

/**
 * struct kvp_segment - a mapped pool segment; owned by the pool (engine thread)
 * @fd:          the memfd (O_RDWR, sealed after kvp_segment_seal(); close-on-exec)
 * @base:        read-write mapping of the whole segment
 * @bytes:       segment size (multiple of @page_bytes)
 * @data_offset: offset of block 0 (4096, or 2 MiB on hugetlb so blocks align to pages)
 * @n_blocks:    blocks in the segment
 * @geom:        block geometry (copied)
 * @kind:        enum kvp_page_kind obtained
 * @page_bytes:  4096 or KVP_HUGE_PAGE_BYTES
 * @sealed:      seals applied
 */
struct kvp_segment {
	int fd;
	uint8_t *base;
	size_t bytes;
	size_t data_offset;
	uint32_t n_blocks;
	struct kvp_geom geom;
	enum kvp_page_kind kind;
	size_t page_bytes;
	int sealed;
};

/**
 * kvp_page_size_check() - can a pool segment live on pages of @page bytes?
 * @page: the kernel's base page size (sysconf(_SC_PAGESIZE))
 *
 * The pool layout is 4 KiB-page based: the header page, block_stride (KVP_BLOCK_ALIGN)
 * and every block's start are 4 KiB multiples, and mbind/madvise per block need them
 * page aligned.  On a 16 or 64 KiB page kernel (some aarch64 distributions) those
 * calls would fail or straddle blocks, so such a kernel is refused, not half served.
 * Return: 0 for 4 KiB pages; -ENOTSUP otherwise.
 */
int kvp_page_size_check(long page);

/**
 * kvp_segment_open() - make, size and map a segment for @n_blocks blocks of @geom
 * @out:      out; the new segment (free with kvp_segment_close())
 * @geom:     block geometry (from kvp_geom_init())
 * @n_blocks: blocks, >= 1
 * @mode:     page mode (see top of file)
 * @name:     memfd name (shows in /proc/<pid>/fd), e.g. "kvpool:default"; at most 249
 *            bytes (the memfd limit); NULL means "kvpool"
 *
 * The header is written; no data page is faulted in yet (so NUMA policy can still be set).
 * Return: 0; -EINVAL for bad arguments, a too long @name or a size overflow; -ENOMEM /
 * -EOPNOTSUPP when @mode is REQUIRE_HUGE and hugetlb is short / absent; -ENOTSUP when
 * the kernel's page size is not 4 KiB (kvp_page_size_check()); other -errno from
 * memfd/mmap.  On Linux ENOTSUP and EOPNOTSUPP are one value: a caller that must tell
 * the two apart asks kvp_page_size_check() (as kvp_domain_open() does).
 */
int kvp_segment_open(struct kvp_segment **out, const struct kvp_geom *geom, uint32_t n_blocks,
		     enum kvp_page_mode mode, const char *name);

/**
 * kvp_segment_prefault() - fault in every page of @seg once, writable
 *
 * Uses MADV_POPULATE_WRITE, or touches one byte per page on kernels without it.  For a
 * THP-advised segment, then checks /proc/self/smaps and sets @seg->kind to
 * KVP_PAGE_THP or KVP_PAGE_4K from what the kernel really gave (and rewrites the header).
 * Return: 0 or -errno (-ENOMEM when memory ran out).
 */
int kvp_segment_prefault(struct kvp_segment *seg);

/**
 * kvp_segment_seal() - apply F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_FUTURE_WRITE|F_SEAL_SEAL
 *
 * Our read-write mapping keeps working; any later writable mmap of the fd (in any
 * process) fails with EPERM and mprotect to writable of a read-only one with EACCES.
 * Return: 0 or -errno.
 */
int kvp_segment_seal(struct kvp_segment *seg);

/**
 * kvp_segment_reopen_ro() - a new O_RDONLY|O_CLOEXEC fd of the segment, for a client
 *
 * Reopened through /proc/self/fd, so it is a new open file description: the client
 * cannot turn it read-write with fcntl.  The caller owns the fd.  Refuses an unsealed
 * segment: without the seal a reader could reopen it read-write.
 * Return: fd (>= 0), -EPERM when not sealed yet, or -errno.
 */
int kvp_segment_reopen_ro(const struct kvp_segment *seg);

/* Unmap and close; NULL is fine.  Clients' fds and mappings stay valid (memfd semantics). */
void kvp_segment_close(struct kvp_segment *seg);

/* Start of block 0 in our read-write mapping. */
static inline uint8_t *kvp_segment_data(const struct kvp_segment *seg)
{
	return seg->base + seg->data_offset;
}

/* Page kind obtained, and its name: "4k", "thp-2m", "hugetlb-2m" ("?" if unknown). */
enum kvp_page_kind kvp_segment_page_kind(const struct kvp_segment *seg);
const char *kvp_page_kind_name(enum kvp_page_kind kind);

/* "auto", "require", "off" <-> enum kvp_page_mode.  parse returns 0 or -EINVAL. */
int kvp_page_mode_parse(const char *s, enum kvp_page_mode *out);
const char *kvp_page_mode_name(enum kvp_page_mode mode);

/* Free 2 MiB hugetlb pages right now (/sys/kernel/mm/hugepages/...), or -errno. */
long kvp_hugetlb_free_pages(void);

#endif /* KVP_SHM_SEGMENT_H */
