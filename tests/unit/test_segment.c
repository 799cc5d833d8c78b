/* SPDX-License-Identifier: MIT */
/*
 * test_segment.c - pool segments: page kinds and their fallback, header, pre-fault, seals
 * (in a child process, as a client would meet them), read-only reopen.
 *
 * Built twice: as test-segment (everything that runs on any machine, including the
 * "not enough huge pages" fallback path, which it forces by asking for more than is
 * free) and, through test_segment_hugetlb.c, as test-segment-hugetlb, which needs
 * reserved 2 MiB pages and exits 77 only when /proc/sys/vm/nr_hugepages left none free.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "shm/segment.h"
#include "tests/lib/testlib.h"

/* 1 layer, 1 head, dim 64, f32, 16 tokens: 8 KiB blocks */
static void small_geom(struct kvp_geom *g)
{
	struct kvp_model_shape s = { .n_layers = 1,
				     .n_kv_heads = 1,
				     .head_dim = 64,
				     .dtype = KVP_DTYPE_F32,
				     .block_tokens = 16 };

	assert_int_equal(kvp_geom_init(g, &s), 0);
}

/* Everything a client checks, read through a fresh read-only mapping of @fd. */
static void assert_header_ok(int fd, const struct kvp_segment *seg)
{
	struct kvp_pool_header *h = mmap(NULL, sizeof(*h), PROT_READ, MAP_SHARED, fd, 0);
	struct kvp_geom g;

	assert_ptr_not_equal(h, MAP_FAILED);
	assert_int_equal(kvp_pool_header_check(h, seg->bytes, &g), 0);
	assert_int_equal(h->n_blocks, seg->n_blocks);
	assert_int_equal(h->data_offset, seg->data_offset);
	assert_int_equal(h->page_kind, seg->kind);
	assert_int_equal(g.block_stride, seg->geom.block_stride);
	munmap(h, sizeof(*h));
}

/*
 * The child side of the seal test: exit codes name the check that failed; success is
 * death by SIGSEGV on the final write.
 */
static void child_probe_sealed(const struct kvp_segment *seg, int ro_fd)
{
	char path[64];
	uint8_t *p;
	int fd;

	/* the daemon's own fd, as a client that somehow had it: no writable mapping */
	if (mmap(NULL, seg->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, seg->fd, 0) != MAP_FAILED ||
	    errno != EPERM)
		_exit(10);
	/* the read-only reopen: not writable either */
	if (mmap(NULL, seg->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, ro_fd, 0) != MAP_FAILED)
		_exit(11);
	/* reopened read-write through /proc: the seal still refuses a writable mapping */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", ro_fd);
	fd = open(path, O_RDWR);
	if (fd >= 0 &&
	    (mmap(NULL, seg->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) != MAP_FAILED ||
	     errno != EPERM))
		_exit(12);
	/* write(2) to the fd: the seal refuses it (hugetlbfs has no write(2) at all) */
	if (fd >= 0 && (write(fd, "x", 1) != -1 ||
			errno != (seg->kind == KVP_PAGE_HUGETLB_2M ? EINVAL : EPERM)))
		_exit(13);
	p = mmap(NULL, seg->bytes, PROT_READ, MAP_SHARED, ro_fd, 0);
	if (p == MAP_FAILED)
		_exit(14);
	if (((const struct kvp_pool_header *)p)->magic != KVP_POOL_MAGIC)
		_exit(15);
	/* what the parent wrote after sealing is visible */
	if (p[seg->data_offset] != 0xa5)
		_exit(16);
	if (mprotect(p, seg->bytes, PROT_READ | PROT_WRITE) == 0 || errno != EACCES)
		_exit(17);
	/* die by the kernel's SIGSEGV, not a sanitizer's report of it */
	signal(SIGSEGV, SIG_DFL);
	((volatile uint8_t *)p)[seg->data_offset] = 1;
	_exit(18);
}

static void check_sealed_in_child(struct kvp_segment *seg)
{
	int ro_fd, status;
	pid_t pid;

	/* our own mapping stays writable after the seal */
	kvp_segment_data(seg)[0] = 0xa5;
	ro_fd = kvp_segment_reopen_ro(seg);
	assert_true(ro_fd >= 0);
	assert_int_equal(fcntl(ro_fd, F_GETFL) & O_ACCMODE, O_RDONLY);
	assert_header_ok(ro_fd, seg);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		child_probe_sealed(seg, ro_fd);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFEXITED(status))
		fail_msg("child exited %d instead of dying by SIGSEGV", WEXITSTATUS(status));
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGSEGV);
	/* the child's attempt changed nothing */
	assert_int_equal(kvp_segment_data(seg)[0], 0xa5);
	close(ro_fd);
}

#ifndef KVP_TEST_HUGETLB_ONLY

static long read_long(const char *path)
{
	FILE *f = fopen(path, "re");
	long v = 0;

	if (!f)
		return 0;
	if (fscanf(f, "%ld", &v) != 1)
		v = 0;
	fclose(f);
	return v;
}

/*
 * The most 2 MiB pages hugetlb could hand out right now: every reserved page plus the
 * surplus it may still allocate.  Asking for more fails whatever other tests (or a
 * kvpoold) take or give back meanwhile; asking for "free + 1" would race with them.
 */
static long huge_pages_possible(void)
{
	return read_long("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages") +
	       read_long("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_overcommit_hugepages");
}

/* 1 when shmem THP is off for MADV_HUGEPAGE mappings ("[never]" or "[deny]" selected). */
static int shmem_thp_off(void)
{
	char buf[256] = "";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "re");

	if (!f)
		return 1; /* no THP at all */
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	return strstr(buf, "[never]") || strstr(buf, "[deny]");
}

static void test_off_mode_4k_and_header(void **state)
{
	/* "off" gives 4 KiB pages, a one-page header, and blocks that fit the segment */
	struct kvp_segment *seg;
	struct kvp_geom g;

	small_geom(&g);
	assert_int_equal(kvp_segment_open(&seg, &g, 100, KVP_PAGES_OFF, "kvptest"), 0);
	assert_int_equal(kvp_segment_page_kind(seg), KVP_PAGE_4K);
	assert_string_equal(kvp_page_kind_name(seg->kind), "4k");
	assert_int_equal(seg->data_offset, 4096);
	assert_true(seg->data_offset + 100 * g.block_stride <= seg->bytes);
	assert_int_equal(seg->bytes % 4096, 0);
	assert_int_equal(kvp_segment_prefault(seg), 0);
	assert_int_equal(kvp_segment_page_kind(seg), KVP_PAGE_4K);
	assert_int_equal(kvp_segment_seal(seg), 0);
	assert_header_ok(seg->fd, seg);
	kvp_segment_close(seg);
}

static void test_sealed_segment_readonly_in_child(void **state)
{
	/* after the seal a client gets EPERM / EACCES / SIGSEGV, and changes nothing */
	struct kvp_segment *seg;
	struct kvp_geom g;

	small_geom(&g);
	assert_int_equal(kvp_segment_open(&seg, &g, 64, KVP_PAGES_AUTO, "kvptest"), 0);
	assert_int_equal(kvp_segment_prefault(seg), 0);
	assert_int_equal(kvp_segment_seal(seg), 0);
	check_sealed_in_child(seg);
	kvp_segment_close(seg);
}

static void test_reopen_refused_before_seal(void **state)
{
	/* an unsealed memfd could be reopened read-write: no fd is handed out before */
	struct kvp_segment *seg;
	struct kvp_geom g;

	small_geom(&g);
	assert_int_equal(kvp_segment_open(&seg, &g, 4, KVP_PAGES_OFF, "kvptest"), 0);
	assert_int_equal(kvp_segment_reopen_ro(seg), -EPERM);
	kvp_segment_close(seg);
}

static void test_short_of_huge_pages_falls_back(void **state)
{
	/*
	 * More huge pages than hugetlb can give: "require" fails clearly with -ENOMEM (or
	 * -EOPNOTSUPP without hugetlb), "auto" falls back to a non-hugetlb kind that it
	 * reports.  Runs whether or not pages are reserved (it asks for one page more than
	 * could ever be had; nothing is faulted in).
	 */
	struct kvp_segment *seg;
	struct kvp_geom g;
	uint32_t n_blocks;
	int r;

	small_geom(&g);
	n_blocks = (uint32_t)((huge_pages_possible() + 1) * (KVP_HUGE_PAGE_BYTES / g.block_stride));
	r = kvp_segment_open(&seg, &g, n_blocks, KVP_PAGES_REQUIRE_HUGE, "kvptest");
	assert_true(r == -ENOMEM || r == -EOPNOTSUPP);
	assert_int_equal(kvp_segment_open(&seg, &g, n_blocks, KVP_PAGES_AUTO, "kvptest"), 0);
	assert_int_not_equal(seg->kind, KVP_PAGE_HUGETLB_2M);
	assert_int_equal(seg->page_bytes, 4096);
	assert_header_ok(seg->fd, seg);
	kvp_segment_close(seg);
}

static void test_small_pool_prefault_and_thp_report(void **state)
{
	/*
	 * Pre-faulting an "auto" segment that is not hugetlb reports what it really got:
	 * with shmem THP off (shmem_enabled "never"/"deny") it must say 4 KiB, not THP.
	 */
	struct kvp_segment *seg;
	struct kvp_geom g;
	uint32_t n_blocks;

	small_geom(&g);
	/* at least 8 MiB and more than hugetlb can give: the THP-advised memfd path */
	n_blocks = (uint32_t)((huge_pages_possible() + 4) * (KVP_HUGE_PAGE_BYTES / g.block_stride));
	assert_int_equal(kvp_segment_open(&seg, &g, n_blocks, KVP_PAGES_AUTO, "kvptest"), 0);
	assert_int_equal(seg->kind, KVP_PAGE_THP); /* advised, not yet verified */
	if (n_blocks * (size_t)g.block_stride > (64u << 20)) {
		/* many pages free: do not fault in this much just for a unit test */
		kvp_segment_close(seg);
		skip();
	}
	assert_int_equal(kvp_segment_prefault(seg), 0);
	assert_true(seg->kind == KVP_PAGE_THP || seg->kind == KVP_PAGE_4K);
	if (shmem_thp_off())
		assert_int_equal(seg->kind, KVP_PAGE_4K);
	/* the header a client reads says the same as the query */
	assert_int_equal(((const struct kvp_pool_header *)seg->base)->page_kind, seg->kind);
	assert_header_ok(seg->fd, seg);
	kvp_segment_close(seg);
}

static void test_bad_arguments(void **state)
{
	/*
	 * Zero blocks, a size that overflows, an unknown mode, a name memfd_create refuses:
	 * -EINVAL in every mode, never -EOPNOTSUPP ("no hugetlb") for a caller's mistake.
	 */
	struct kvp_segment *seg;
	struct kvp_geom g;
	enum kvp_page_mode m;
	char name[300];

	small_geom(&g);
	assert_int_equal(kvp_segment_open(&seg, &g, 0, KVP_PAGES_OFF, "x"), -EINVAL);
	assert_int_equal(kvp_segment_open(&seg, &g, 4, (enum kvp_page_mode)7, "x"), -EINVAL);
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = 0;
	assert_int_equal(kvp_segment_open(&seg, &g, 4, KVP_PAGES_REQUIRE_HUGE, name), -EINVAL);
	assert_int_equal(kvp_segment_open(&seg, &g, 4, KVP_PAGES_AUTO, name), -EINVAL);
	name[249] = 0; /* the longest name memfd takes */
	assert_int_equal(kvp_segment_open(&seg, &g, 4, KVP_PAGES_OFF, name), 0);
	kvp_segment_close(seg);
	g.block_stride = SIZE_MAX / 2 & ~(size_t)4095;
	for (int mode = KVP_PAGES_AUTO; mode <= KVP_PAGES_OFF; mode++)
		assert_int_equal(kvp_segment_open(&seg, &g, 4, (enum kvp_page_mode)mode, "x"),
				 -EINVAL);
	assert_int_equal(kvp_page_mode_parse("require", &m), 0);
	assert_int_equal(m, KVP_PAGES_REQUIRE_HUGE);
	assert_int_equal(kvp_page_mode_parse("huge", &m), -EINVAL);
}

static void test_header_check_rejects(void **state)
{
	/* a client refuses a wrong magic, version, blocks beyond the segment, bad page sizes */
	struct kvp_segment *seg;
	struct kvp_pool_header h;
	struct kvp_geom g;

	small_geom(&g);
	assert_int_equal(kvp_segment_open(&seg, &g, 8, KVP_PAGES_OFF, "kvptest"), 0);
	memcpy(&h, seg->base, sizeof(h));
	assert_int_equal(kvp_pool_header_check(&h, seg->bytes, NULL), 0);
	h.version++;
	assert_int_equal(kvp_pool_header_check(&h, seg->bytes, NULL), -EPROTO);
	memcpy(&h, seg->base, sizeof(h));
	h.n_blocks = 1000;
	assert_int_equal(kvp_pool_header_check(&h, seg->bytes, NULL), -EINVAL);
	memcpy(&h, seg->base, sizeof(h));
	h.block_stride += 4096;
	assert_int_equal(kvp_pool_header_check(&h, seg->bytes, NULL), -EINVAL);
	memcpy(&h, seg->base, sizeof(h));
	assert_int_equal(kvp_pool_header_check(&h, seg->bytes - 4096, NULL), -EINVAL);
	/* a 4 KiB segment claiming 2 MiB pages, or a kind that does not fit its page size */
	memcpy(&h, seg->base, sizeof(h));
	h.page_bytes = KVP_HUGE_PAGE_BYTES;
	assert_int_equal(kvp_pool_header_check(&h, seg->bytes, NULL), -EINVAL);
	memcpy(&h, seg->base, sizeof(h));
	h.page_kind = KVP_PAGE_HUGETLB_2M;
	assert_int_equal(kvp_pool_header_check(&h, seg->bytes, NULL), -EINVAL);
	memcpy(&h, seg->base, sizeof(h));
	h.page_kind = KVP_PAGE__COUNT;
	assert_int_equal(kvp_pool_header_check(&h, seg->bytes, NULL), -EINVAL);
	/* what a hugetlb segment of these blocks says (checked here on any machine) */
	memcpy(&h, seg->base, sizeof(h));
	h.page_kind = KVP_PAGE_HUGETLB_2M;
	h.page_bytes = KVP_HUGE_PAGE_BYTES;
	h.data_offset = KVP_HUGE_PAGE_BYTES;
	h.segment_bytes = 2 * (uint64_t)KVP_HUGE_PAGE_BYTES;
	assert_int_equal(kvp_pool_header_check(&h, h.segment_bytes, NULL), 0);
	assert_int_equal(kvp_pool_header_check(&h, h.segment_bytes + 4096, NULL), -EINVAL);
	h.segment_bytes += 4096;
	assert_int_equal(kvp_pool_header_check(&h, h.segment_bytes, NULL), -EINVAL);
	kvp_segment_close(seg);
}

/* 16/64 KiB page kernels (some aarch64 distributions) are refused, 4 KiB served */
static void test_page_size_check(void **state)
{
	(void)state;
	assert_int_equal(kvp_page_size_check(4096), 0);
	assert_int_equal(kvp_page_size_check(16384), -ENOTSUP);
	assert_int_equal(kvp_page_size_check(65536), -ENOTSUP);
	assert_int_equal(kvp_page_size_check(-1), -ENOTSUP);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_off_mode_4k_and_header),
		cmocka_unit_test(test_sealed_segment_readonly_in_child),
		cmocka_unit_test(test_reopen_refused_before_seal),
		cmocka_unit_test(test_short_of_huge_pages_falls_back),
		cmocka_unit_test(test_small_pool_prefault_and_thp_report),
		cmocka_unit_test(test_bad_arguments),
		cmocka_unit_test(test_header_check_rejects),
		cmocka_unit_test(test_page_size_check),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

#else /* KVP_TEST_HUGETLB_ONLY */

/* 3 huge pages: header page + 2 pages of blocks */
#define HUGE_TEST_PAGES 3

static void test_hugetlb_auto_and_require(void **state)
{
	/* with pages free, both modes get hugetlb, blocks start on a 2 MiB boundary */
	for (int mode = KVP_PAGES_AUTO; mode <= KVP_PAGES_REQUIRE_HUGE; mode++) {
		struct kvp_segment *seg;
		struct kvp_geom g;

		small_geom(&g);
		assert_int_equal(kvp_segment_open(&seg, &g,
						  2 * KVP_HUGE_PAGE_BYTES / g.block_stride,
						  (enum kvp_page_mode)mode, "kvptest"),
				 0);
		assert_int_equal(kvp_segment_page_kind(seg), KVP_PAGE_HUGETLB_2M);
		assert_string_equal(kvp_page_kind_name(seg->kind), "hugetlb-2m");
		assert_int_equal(seg->data_offset, KVP_HUGE_PAGE_BYTES);
		assert_int_equal(seg->bytes, HUGE_TEST_PAGES * (size_t)KVP_HUGE_PAGE_BYTES);
		assert_int_equal(kvp_segment_prefault(seg), 0);
		assert_int_equal(kvp_segment_page_kind(seg), KVP_PAGE_HUGETLB_2M);
		assert_int_equal(kvp_segment_seal(seg), 0);
		assert_header_ok(seg->fd, seg);
		kvp_segment_close(seg);
	}
}

static void test_hugetlb_sealed_readonly_in_child(void **state)
{
	/* the seal holds on a hugetlb memfd too */
	struct kvp_segment *seg;
	struct kvp_geom g;

	small_geom(&g);
	assert_int_equal(kvp_segment_open(&seg, &g, KVP_HUGE_PAGE_BYTES / g.block_stride,
					  KVP_PAGES_REQUIRE_HUGE, "kvptest"),
			 0);
	assert_int_equal(kvp_segment_prefault(seg), 0);
	assert_int_equal(kvp_segment_seal(seg), 0);
	check_sealed_in_child(seg);
	kvp_segment_close(seg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hugetlb_auto_and_require),
		cmocka_unit_test(test_hugetlb_sealed_readonly_in_child),
	};
	long free_pages = kvp_hugetlb_free_pages();

	if (free_pages < HUGE_TEST_PAGES) {
		/* test-segment covers the none-reserved fallback in this case */
		fprintf(stderr, "skip: %ld free 2 MiB huge pages, need %d\n", free_pages,
			HUGE_TEST_PAGES);
		return KVP_TEST_SKIP;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif /* KVP_TEST_HUGETLB_ONLY */
