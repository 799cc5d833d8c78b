/* SPDX-License-Identifier: MIT */
/* fuzzfile.c - an input as a file, for decoders that read a path; the sink (fuzz.h). */
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"

volatile uint8_t fuzz_sink;

int fuzz_file(const uint8_t *data, size_t size, char *path, size_t cap)
{
	int fd = memfd_create("fuzz-input", MFD_CLOEXEC);
	size_t off = 0;

	if (fd < 0)
		return -1;
	while (off < size) {
		ssize_t w = write(fd, data + off, size - off);

		if (w <= 0) {
			close(fd);
			return -1;
		}
		off += (size_t)w;
	}
	snprintf(path, cap, "/proc/self/fd/%d", fd);
	return fd;
}
