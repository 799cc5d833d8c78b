/* SPDX-License-Identifier: MIT */
/*
 * fault_wrap.c - a wrapper for each library call of util/fault.h that a test executable
 * links through (-Wl,--wrap=NAME, kvp_fault_link_args: the project's calls of NAME
 * reach __wrap_NAME here, which calls __real_NAME unless the call is to fail).  Its own
 * object in the archive on purpose: an executable linked without those arguments never
 * refers to a __wrap_ symbol, so never pulls this in (and needs no __real_ one).  The
 * project is built with _FILE_OFFSET_BITS=64, so its calls of ftruncate, fallocate,
 * mmap, pread and pwrite are to the *64 symbols: those are the ones wrapped.
 * Compiled only with -Dfault_injection=true.
 */
#include "util/fault.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct io_uring; /* liburing.h: only passed through */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
int __real_memfd_create(const char *name, unsigned int flags);
int __real_ftruncate64(int fd, off_t len);
int __real_fallocate64(int fd, int mode, off_t off, off_t len);
void *__real_mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off);
ssize_t __real_read(int fd, void *buf, size_t n);
ssize_t __real_write(int fd, const void *buf, size_t n);
ssize_t __real_pread64(int fd, void *buf, size_t n, off_t off);
ssize_t __real_pwrite64(int fd, const void *buf, size_t n, off_t off);
int __real_io_uring_submit(struct io_uring *ring);
int __real_io_uring_submit_and_wait(struct io_uring *ring, unsigned int wait_nr);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
void *__wrap_aligned_alloc(size_t align, size_t n);
int __wrap_posix_memalign(void **p, size_t align, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_memfd_create(const char *name, unsigned int flags);
int __wrap_ftruncate64(int fd, off_t len);
int __wrap_fallocate64(int fd, int mode, off_t off, off_t len);
void *__wrap_mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off);
ssize_t __wrap_read(int fd, void *buf, size_t n);
ssize_t __wrap_write(int fd, const void *buf, size_t n);
ssize_t __wrap_pread64(int fd, void *buf, size_t n, off_t off);
ssize_t __wrap_pwrite64(int fd, const void *buf, size_t n, off_t off);
int __wrap_io_uring_submit(struct io_uring *ring);
int __wrap_io_uring_submit_and_wait(struct io_uring *ring, unsigned int wait_nr);

/* An allocation that fails: NULL with ENOMEM whatever @how says (as malloc does). */
#define ALLOC_FAILS(site) (kvp_fault_take(site, "alloc") ? (errno = ENOMEM, 1) : 0)
/* A call that fails with -@how in errno, returning @ret. */
#define FAIL_WITH(how, ret) (errno = -(how), (ret))

void *__wrap_malloc(size_t n)
{
	return ALLOC_FAILS("malloc") ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
	return ALLOC_FAILS("calloc") ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
	return ALLOC_FAILS("realloc") ? NULL : __real_realloc(p, n);
}

void *__wrap_aligned_alloc(size_t align, size_t n)
{
	return ALLOC_FAILS("aligned_alloc") ? NULL : __real_aligned_alloc(align, n);
}

int __wrap_posix_memalign(void **p, size_t align, size_t n)
{
	return ALLOC_FAILS("posix_memalign") ? ENOMEM : __real_posix_memalign(p, align, n);
}

char *__wrap_strdup(const char *s)
{
	return ALLOC_FAILS("strdup") ? NULL : __real_strdup(s);
}

char *__wrap_strndup(const char *s, size_t n)
{
	return ALLOC_FAILS("strndup") ? NULL : __real_strndup(s, n);
}

int __wrap_memfd_create(const char *name, unsigned int flags)
{
	int how = kvp_fault_take("memfd_create", NULL);

	return how < 0 ? FAIL_WITH(how, -1) : __real_memfd_create(name, flags);
}

int __wrap_ftruncate64(int fd, off_t len)
{
	int how = kvp_fault_take("ftruncate", NULL);

	return how < 0 ? FAIL_WITH(how, -1) : __real_ftruncate64(fd, len);
}

int __wrap_fallocate64(int fd, int mode, off_t off, off_t len)
{
	int how = kvp_fault_take("fallocate", NULL);

	return how < 0 ? FAIL_WITH(how, -1) : __real_fallocate64(fd, mode, off, len);
}

void *__wrap_mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	int how = kvp_fault_take("mmap", NULL);

	return how < 0 ? FAIL_WITH(how, MAP_FAILED) :
			 __real_mmap64(addr, len, prot, flags, fd, off);
}

/* A transfer of @n bytes as @how says: -1 with errno, or (KVP_FAULT_SHORT) half of it. */
#define XFER(how, n, call_n) \
	((how) < 0 ? FAIL_WITH(how, (ssize_t)-1) : \
		     (ssize_t)(call_n((how) == KVP_FAULT_SHORT && (n) > 1 ? (n) / 2 : (n))))

ssize_t __wrap_read(int fd, void *buf, size_t n)
{
	int how = kvp_fault_take("read", NULL);
#define CALL(k) __real_read(fd, buf, k)
	return XFER(how, n, CALL);
#undef CALL
}

ssize_t __wrap_write(int fd, const void *buf, size_t n)
{
	int how = kvp_fault_take("write", NULL);
#define CALL(k) __real_write(fd, buf, k)
	return XFER(how, n, CALL);
#undef CALL
}

ssize_t __wrap_pread64(int fd, void *buf, size_t n, off_t off)
{
	int how = kvp_fault_take("pread", NULL);
#define CALL(k) __real_pread64(fd, buf, k, off)
	return XFER(how, n, CALL);
#undef CALL
}

ssize_t __wrap_pwrite64(int fd, const void *buf, size_t n, off_t off)
{
	int how = kvp_fault_take("pwrite", NULL);
#define CALL(k) __real_pwrite64(fd, buf, k, off)
	return XFER(how, n, CALL);
#undef CALL
}

int __wrap_io_uring_submit(struct io_uring *ring)
{
	int how = kvp_fault_take("io_uring_submit", NULL);

	return how < 0 ? how : __real_io_uring_submit(ring);
}

int __wrap_io_uring_submit_and_wait(struct io_uring *ring, unsigned int wait_nr)
{
	int how = kvp_fault_take("io_uring_submit_and_wait", NULL);

	return how < 0 ? how : __real_io_uring_submit_and_wait(ring, wait_nr);
}
