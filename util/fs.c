/* SPDX-License-Identifier: MIT */
/*
 * fs.c - filesystem helpers (see fs.h).
 */
#include "util/fs.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>

int kvp_mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	size_t i;

	if (strlen(path) >= sizeof(buf))
		return -ENAMETOOLONG;
	strcpy(buf, path);
	/* each parent in turn; an existing one (EEXIST) is what we want */
	for (i = 1; buf[i]; i++) {
		if (buf[i] != '/')
			continue;
		buf[i] = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -errno;
		buf[i] = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}
