/* SPDX-License-Identifier: MIT */
/*
 * demo.c - write the built-in demo model (see demo.h).
 *
 * The model is written inside a directory of its own, <state_dir>/demo.tmp, and renamed
 * into place: whatever a killed earlier attempt left there (mkmodel's temporary file)
 * is ours to remove, whatever its name, and a reader of demo.gguf never sees a partial
 * model.
 * Thread: the main thread.
 */
#include "svc/demo.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compute/mkmodel.h"
#include "util/log.h"
#include "util/notify.h"
#include "util/fs.h"
#include "util/time.h"

/* Remove every entry of directory @path (not recursive: it holds only files of ours). */
static int empty_dir(const char *path)
{
	struct dirent *e;
	DIR *dir = opendir(path);
	int r = 0;

	if (!dir)
		return errno == ENOENT ? 0 : -errno;
	while ((e = readdir(dir)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    unlinkat(dirfd(dir), e->d_name, 0) < 0 && !r)
			r = -errno;
	closedir(dir);
	return r;
}

int kvp_demo_write(const char *state_dir, const char *path, const struct kvp_notify *notify)
{
	struct kvp_mkmodel_opts o;
	char err[256] = "";
	char dir[PATH_MAX];
	char tmp[PATH_MAX + 16];
	uint64_t t0;
	int r;

	r = kvp_mkdir_p(state_dir, 0750);
	if (r < 0) {
		kvp_log(LOG_ERR, "model: create state directory %s: %s", state_dir, strerror(-r));
		return r;
	}
	r = kvp_mkmodel_preset(&o, "demo");
	if (r < 0)
		return r;
	if (snprintf(dir, sizeof(dir), "%s/demo.tmp", state_dir) >= (int)sizeof(dir))
		return -ENAMETOOLONG;
	snprintf(tmp, sizeof(tmp), "%s/demo.gguf", dir);
	r = empty_dir(dir);
	if (r == 0 && mkdir(dir, 0750) < 0 && errno != EEXIST)
		r = -errno;
	if (r < 0) {
		kvp_log(LOG_ERR, "model: prepare %s: %s", dir, strerror(-r));
		return r;
	}
	kvp_notify_status(notify, "generating the demo model into %s", path);
	kvp_log(LOG_NOTICE, "model: generating the built-in demo model into %s (once)", path);
	t0 = kvp_now_ns();
	r = kvp_mkmodel_write(tmp, &o, err, sizeof(err));
	if (r < 0)
		kvp_log(LOG_ERR, "model: write demo model %s: %s", tmp, *err ? err : strerror(-r));
	if (r == 0 && rename(tmp, path) < 0) {
		r = -errno;
		kvp_log(LOG_ERR, "model: rename %s to %s: %s", tmp, path, strerror(-r));
	}
	empty_dir(dir);
	rmdir(dir);
	if (r < 0)
		return r;
	kvp_log(LOG_INFO, "model: demo model written in %.1f s", kvp_ns_to_s(kvp_now_ns() - t0));
	return 0;
}
