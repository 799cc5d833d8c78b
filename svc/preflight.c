/* SPDX-License-Identifier: MIT */
/*
 * preflight.c - start-up checks that need no model and no pool (see preflight.h).
 * Thread: the main thread, at start.
 */
#include "svc/preflight.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "shm/poolhdr.h"
#include "shm/segment.h"
#include "shm/tier.h"
#include "svc/config.h"
#include "util/errmsg.h"

int kvp_preflight_socket(const char *key, const char *path, char *err, size_t cap)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *slash = strrchr(path, '/');
	char dir[sizeof(sa.sun_path)];
	struct stat st;
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		kvp_errmsg(err, cap, "%s: %s is %zu bytes; a Unix socket path holds at most %zu",
			   key, path, strlen(path), sizeof(sa.sun_path) - 1);
		return -ENAMETOOLONG;
	}
	snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
	if (!*dir)
		strcpy(dir, "/");
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		r = stat(dir, &st) < 0 ? -errno : -ENOTDIR;
		kvp_errmsg(err, cap,
			   "%s: %s: directory %s %s (create it; under systemd, "
			   "RuntimeDirectory= does)",
			   key, path, dir, r == -ENOTDIR ? "is not a directory" : "does not exist");
		return r;
	}
	if (access(dir, W_OK | X_OK) < 0) {
		r = -errno;
		kvp_errmsg(err, cap, "%s: %s: cannot create a socket in %s: %s", key, path, dir,
			   strerror(-r));
		return r;
	}
	if (lstat(path, &st) < 0)
		return 0; /* nothing there yet */
	if (!S_ISSOCK(st.st_mode)) {
		kvp_errmsg(err, cap,
			   "%s: %s exists and is not a socket; remove it or pick another "
			   "path",
			   key, path);
		return -EEXIST;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0; /* the bind will say what is wrong */
	r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	if (r == 0) {
		kvp_errmsg(err, cap,
			   "%s: %s: another kvpoold (or another program) is listening there; stop "
			   "it or pick another path",
			   key, path);
		return -EADDRINUSE;
	}
	return 0; /* a stale socket file: the bind replaces it */
}

int kvp_preflight(const struct kvp_config *c, char *err, size_t cap)
{
	uint64_t need;
	long free_pages;
	int r;

	r = kvp_preflight_socket("server.socket", c->socket_path, err, cap);
	if (r < 0)
		return r;
	if (*c->status_path) {
		r = kvp_preflight_socket("server.status_socket", c->status_path, err, cap);
		if (r < 0)
			return r;
	}
	if (*c->tier_path) {
		/* per-uid domains open tier.path.uid-N later: the directory is checked now */
		r = kvp_tier_check_dir(c->tier_path, err, cap);
		if (r == -EPERM || r == -ENOTDIR)
			return r;
	}
	if (c->huge_pages != KVP_HUGE_REQUIRE)
		return 0;
	/* the blocks alone, a lower bound of what the segment will ask for */
	need = (c->pool_bytes + KVP_HUGE_PAGE_BYTES - 1) / KVP_HUGE_PAGE_BYTES;
	free_pages = kvp_hugetlb_free_pages();
	if (free_pages < 0 || (uint64_t)free_pages < need) {
		kvp_errmsg(err, cap,
			   "pool: huge pages required (pool.huge_pages = require), but the pool "
			   "(pool.size %llu MiB) needs at least %llu free 2 MiB huge pages and %ld "
			   "are free (reserve more with vm.nr_hugepages, or use huge_pages = auto)",
			   (unsigned long long)(c->pool_bytes >> 20), (unsigned long long)need,
			   free_pages < 0 ? 0 : free_pages);
		return -ENOMEM;
	}
	return 0;
}
