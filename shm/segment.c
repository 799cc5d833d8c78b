/* SPDX-License-Identifier: MIT */
/*
 * segment.c - a pool segment: memfd, page kind, pre-fault, seals, read-only reopen.
 *
 * Invariants: after kvp_segment_open() the header at offset 0 describes the segment
 * and data_offset + n_blocks * block_stride <= bytes; the fd is never resized after
 * creation (sealed against it once kvp_segment_seal() ran); our mapping is the only
 * writable one that can ever exist once sealed.  Only a memfd can be sealed, and it
 * leaves no name behind in /dev/shm after a crash (docs/architecture.md).
 *
 * Thread: created, faulted and sealed by one thread at start; see segment.h.
 */
#include "shm/segment.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <linux/memfd.h>

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008u /* Linux 6.3; older kernels refuse it with EINVAL */
#endif

/* memfd_create(2): longer names are EINVAL, which must not read as "no hugetlb" */
#define MEMFD_NAME_MAX 249u

static const char *const kind_names[] = {
	[KVP_PAGE_4K] = "4k",
	[KVP_PAGE_THP] = "thp-2m",
	[KVP_PAGE_HUGETLB_2M] = "hugetlb-2m",
};

static const char *const mode_names[] = {
	[KVP_PAGES_AUTO] = "auto",
	[KVP_PAGES_REQUIRE_HUGE] = "require",
	[KVP_PAGES_OFF] = "off",
};

const char *kvp_page_kind_name(enum kvp_page_kind kind)
{
	if ((unsigned int)kind >= KVP_PAGE__COUNT)
		return "?";
	return kind_names[kind];
}

enum kvp_page_kind kvp_segment_page_kind(const struct kvp_segment *seg)
{
	return seg->kind;
}

const char *kvp_page_mode_name(enum kvp_page_mode mode)
{
	if ((unsigned int)mode > KVP_PAGES_OFF)
		return "?";
	return mode_names[mode];
}

int kvp_page_mode_parse(const char *s, enum kvp_page_mode *out)
{
	for (unsigned int i = 0; i <= KVP_PAGES_OFF; i++) {
		if (s && strcmp(s, mode_names[i]) == 0) {
			*out = (enum kvp_page_mode)i;
			return 0;
		}
	}
	return -EINVAL;
}

long kvp_hugetlb_free_pages(void)
{
	FILE *f = fopen("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "re");
	long n = -1;

	if (!f)
		return -errno;
	if (fscanf(f, "%ld", &n) != 1)
		n = -EIO;
	fclose(f);
	return n;
}

static size_t round_up(size_t v, size_t a)
{
	return (v + a - 1) / a * a;
}

/* memfd_create, asking for MFD_NOEXEC_SEAL where the kernel knows it (quiet on 6.3+). */
static int make_memfd(const char *name, unsigned int flags)
{
	int fd = memfd_create(name, flags | MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);

	if (fd < 0 && errno == EINVAL)
		fd = memfd_create(name, flags | MFD_CLOEXEC | MFD_ALLOW_SEALING);
	return fd < 0 ? -errno : fd;
}

/* Segment bytes for @n_blocks after @data_offset, rounded to @page; 0 on overflow. */
static size_t segment_size(const struct kvp_geom *g, uint32_t n_blocks, size_t data_offset,
			   size_t page)
{
	size_t data, total;

	/* ftruncate() takes an off_t: stay below its maximum after rounding too */
	if (__builtin_mul_overflow((size_t)n_blocks, g->block_stride, &data) ||
	    __builtin_add_overflow(data, data_offset, &total) || total > (size_t)INT64_MAX - page)
		return 0;
	return round_up(total, page);
}

/*
 * Try one page kind: memfd, ftruncate, mmap.  For hugetlb the mapping is where the
 * kernel reserves the pages, so a short reserve fails here with ENOMEM, not later
 * with SIGBUS on first touch.
 */
static int try_map(struct kvp_segment *seg, const char *name, enum kvp_page_kind kind)
{
	unsigned int flags = kind == KVP_PAGE_HUGETLB_2M ? MFD_HUGETLB | MFD_HUGE_2MB : 0;
	size_t page = kind == KVP_PAGE_HUGETLB_2M ? KVP_HUGE_PAGE_BYTES : KVP_SMALL_PAGE_BYTES;
	/* one page of header; on hugetlb the first block starts on the next huge page */
	size_t data_offset = page;
	size_t bytes = segment_size(&seg->geom, seg->n_blocks, data_offset, page);
	void *p;
	int fd, r;

	if (!bytes)
		return -EINVAL;
	fd = make_memfd(name, flags);
	/* the name was checked: EINVAL here means this kernel has no hugetlb memfds */
	if (fd == -EINVAL && kind == KVP_PAGE_HUGETLB_2M)
		return -EOPNOTSUPP;
	if (fd < 0)
		return fd;
	if (ftruncate(fd, (off_t)bytes) < 0) {
		r = -errno;
		goto err_close;
	}
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		r = -errno;
		goto err_close;
	}
	if (kind == KVP_PAGE_THP && madvise(p, bytes, MADV_HUGEPAGE) < 0) {
		r = -errno;
		goto err_unmap;
	}
	if (kind == KVP_PAGE_4K)
		(void)madvise(p, bytes, MADV_NOHUGEPAGE); /* "off" means off; may be unsupported */
	seg->fd = fd;
	seg->base = p;
	seg->bytes = bytes;
	seg->data_offset = data_offset;
	seg->kind = kind;
	seg->page_bytes = page;
	return 0;
err_unmap:
	munmap(p, bytes);
err_close:
	close(fd);
	return r;
}

static void write_header(struct kvp_segment *seg)
{
	struct kvp_pool_header h = {
		.magic = KVP_POOL_MAGIC,
		.version = KVP_POOL_VERSION,
		.header_bytes = sizeof(h),
		.shape = seg->geom.shape,
		.block_bytes = seg->geom.block_bytes,
		.block_stride = seg->geom.block_stride,
		.data_offset = seg->data_offset,
		.segment_bytes = seg->bytes,
		.n_blocks = seg->n_blocks,
		.page_kind = seg->kind,
		.page_bytes = seg->page_bytes,
	};

	memcpy(seg->base, &h, sizeof(h));
}

int kvp_page_size_check(long page)
{
	return page == KVP_SMALL_PAGE_BYTES ? 0 : -ENOTSUP;
}

int kvp_segment_open(struct kvp_segment **out, const struct kvp_geom *geom, uint32_t n_blocks,
		     enum kvp_page_mode mode, const char *name)
{
	struct kvp_segment *seg;
	int r;

	if (!name)
		name = "kvpool";
	if (!out || !geom || !n_blocks || (unsigned int)mode > KVP_PAGES_OFF ||
	    !geom->block_stride || geom->block_stride % KVP_BLOCK_ALIGN ||
	    strlen(name) > MEMFD_NAME_MAX)
		return -EINVAL;
	r = kvp_page_size_check(sysconf(_SC_PAGESIZE));
	if (r < 0)
		return r;
	seg = calloc(1, sizeof(*seg));
	if (!seg)
		return -ENOMEM;
	seg->fd = -1;
	seg->geom = *geom;
	seg->n_blocks = n_blocks;

	r = -EOPNOTSUPP;
	if (mode != KVP_PAGES_OFF) {
		r = try_map(seg, name, KVP_PAGE_HUGETLB_2M);
		if (r < 0 && mode == KVP_PAGES_REQUIRE_HUGE)
			goto err_free;
		if (r < 0)
			r = try_map(seg, name, KVP_PAGE_THP);
	}
	if (r < 0)
		r = try_map(seg, name, KVP_PAGE_4K);
	if (r < 0)
		goto err_free;
	write_header(seg);
	*out = seg;
	return 0;
err_free:
	free(seg);
	return r;
}

/*
 * Bytes of PMD-mapped shmem in the smaps entry that starts at @addr: the proof that
 * MADV_HUGEPAGE really produced huge pages (shmem THP is often "never" by default).
 */
static long smaps_pmd_kb(const void *addr)
{
	char line[256];
	char want[32];
	long kb = 0, v;
	int in = 0;
	FILE *f = fopen("/proc/self/smaps", "re");

	if (!f)
		return -errno;
	snprintf(want, sizeof(want), "%lx-", (unsigned long)addr);
	while (fgets(line, sizeof(line), f)) {
		/* a mapping line: "start-end perms ..." in lowercase hex; fields are "Name: v" */
		if ((isdigit((unsigned char)line[0]) || (line[0] >= 'a' && line[0] <= 'f')) &&
		    strchr(line, '-') && strchr(line, '-') < strchr(line, ' ')) {
			if (in)
				break;
			in = strncmp(line, want, strlen(want)) == 0;
			continue;
		}
		if (in && (sscanf(line, "ShmemPmdMapped: %ld kB", &v) == 1 ||
			   sscanf(line, "FilePmdMapped: %ld kB", &v) == 1))
			kb += v;
	}
	fclose(f);
	return kb;
}

int kvp_segment_prefault(struct kvp_segment *seg)
{
	if (madvise(seg->base, seg->bytes, MADV_POPULATE_WRITE) < 0) {
		if (errno != EINVAL)
			return errno == EFAULT ? -ENOMEM : -errno;
		/* before Linux 5.14: touch one byte per page; the header page keeps its bytes */
		for (size_t off = seg->page_bytes; off < seg->bytes; off += seg->page_bytes)
			((volatile uint8_t *)seg->base)[off] = 0;
	}
	if (seg->kind == KVP_PAGE_THP && smaps_pmd_kb(seg->base) <= 0) {
		seg->kind = KVP_PAGE_4K;
		write_header(seg);
	}
	return 0;
}

int kvp_segment_seal(struct kvp_segment *seg)
{
	if (fcntl(seg->fd, F_ADD_SEALS,
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0)
		return -errno;
	seg->sealed = 1;
	return 0;
}

int kvp_segment_reopen_ro(const struct kvp_segment *seg)
{
	char path[64];
	int fd;

	if (!seg->sealed)
		return -EPERM;
	snprintf(path, sizeof(path), "/proc/self/fd/%d", seg->fd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

void kvp_segment_close(struct kvp_segment *seg)
{
	if (!seg)
		return;
	if (seg->base)
		munmap(seg->base, seg->bytes);
	if (seg->fd >= 0)
		close(seg->fd);
	free(seg);
}
