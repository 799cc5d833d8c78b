/* SPDX-License-Identifier: MIT */
/*
 * memguard.c - pool + model against MemAvailable and the memory cgroup (see memguard.h).
 *
 * The cgroup is found as the kernel shows it: /proc/self/cgroup names the path (v2:
 * the "0::" line; v1: the line whose controllers include "memory"), /proc/self/mountinfo
 * where that hierarchy is mounted and which of its paths the mount shows (a container
 * sees its own cgroup as the mount's root).  The limit is the smallest along the path
 * up to the mount, since a parent's limit binds its children too.
 *
 * Thread: the main thread at start; the loop thread for a new domain.
 */
#include "svc/memguard.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errmsg.h"

/* v1 reports "no limit" as a huge page-rounded number; anything this large is none */
#define NO_LIMIT (1ull << 60)

static uint64_t meminfo_available(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	char line[256];
	unsigned long long kb;
	uint64_t v = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			v = (uint64_t)kb * 1024;
	fclose(f);
	return v;
}

/* @v2: the unified hierarchy; else v1's memory controller.  Path from /proc/self/cgroup. */
static bool cgroup_path(bool v2, char *out, size_t cap)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[1024];
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		bool match;

		if (!c2)
			continue;
		*c2 = '\0';
		if (v2) {
			match = !strncmp(line, "0:", 2) && c2 == c1 + 1;
		} else {
			char *tok, *save = NULL;

			match = false;
			for (tok = strtok_r(c1 + 1, ",", &save); tok && !match;
			     tok = strtok_r(NULL, ",", &save))
				match = !strcmp(tok, "memory");
		}
		if (match) {
			c2[1 + strcspn(c2 + 1, "\n")] = '\0';
			snprintf(out, cap, "%s", c2 + 1);
			found = true;
		}
	}
	fclose(f);
	return found;
}

/* Mount point and root of the hierarchy (@v2, or v1 with "memory" in its options). */
static bool cgroup_mount(bool v2, char *mnt, size_t mcap, char *root, size_t rcap)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[4096];
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		char r[1024], m[1024], fstype[64], opts[1024];
		char *sep = strstr(line, " - ");

		if (!sep || sscanf(line, "%*s %*s %*s %1023s %1023s", r, m) != 2 ||
		    sscanf(sep + 3, "%63s %*s %1023s", fstype, opts) != 2)
			continue;
		if (v2 ? strcmp(fstype, "cgroup2") :
			 strcmp(fstype, "cgroup") || !strstr(opts, "memory"))
			continue;
		if (!v2) {
			/* "memory" as a whole option, not a part of another */
			char *tok, *save = NULL;
			bool has = false;

			for (tok = strtok_r(opts, ",", &save); tok && !has;
			     tok = strtok_r(NULL, ",", &save))
				has = !strcmp(tok, "memory");
			if (!has)
				continue;
		}
		found = snprintf(mnt, mcap, "%s", m) < (int)mcap &&
			snprintf(root, rcap, "%s", r) < (int)rcap;
	}
	fclose(f);
	return found;
}

/* A limit file's value: bytes, UINT64_MAX for "max" or none, 0 when unreadable. */
static uint64_t read_limit(const char *dir, const char *file)
{
	char path[1100], buf[64];
	unsigned long long v;
	FILE *f;

	if (snprintf(path, sizeof(path), "%s/%s", dir, file) >= (int)sizeof(path))
		return 0;
	f = fopen(path, "re");
	if (!f)
		return 0;
	if (!fgets(buf, sizeof(buf), f)) {
		fclose(f);
		return 0;
	}
	fclose(f);
	if (!strncmp(buf, "max", 3))
		return UINT64_MAX;
	if (sscanf(buf, "%llu", &v) != 1)
		return 0;
	return v >= NO_LIMIT ? UINT64_MAX : (uint64_t)v;
}

/*
 * What is charged to cgroup @dir and cannot be reclaimed: the usage less the file cache
 * (memory.stat's active_file + inactive_file; v1: total_*, the hierarchy's).  Shared
 * memory (the pools) is not file cache there: it sits on the anon lists.  UINT64_MAX
 * when the usage cannot be read.
 */
static uint64_t unreclaimable(const char *dir, bool v2)
{
	const char *usage_file = v2 ? "memory.current" : "memory.usage_in_bytes";
	const char *active = v2 ? "active_file" : "total_active_file";
	const char *inactive = v2 ? "inactive_file" : "total_inactive_file";
	uint64_t usage = read_limit(dir, usage_file), cache = 0;
	char path[1100], line[256], key[64];
	unsigned long long v;
	FILE *f;

	if (!usage || usage == UINT64_MAX)
		return UINT64_MAX;
	if (snprintf(path, sizeof(path), "%s/memory.stat", dir) < (int)sizeof(path) &&
	    (f = fopen(path, "re"))) {
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "%63s %llu", key, &v) == 2 &&
			    (!strcmp(key, active) || !strcmp(key, inactive)))
				cache += v;
		fclose(f);
	}
	return cache < usage ? usage - cache : 0;
}

/* The tightest limit from the process's cgroup up to the mount, into @fa. */
static void cgroup_limit(bool v2, struct kvp_memguard_facts *fa)
{
	const char *file = v2 ? "memory.max" : "memory.limit_in_bytes";
	char path[512], mnt[512], root[512], dir[1024];
	const char *rel;
	size_t rlen;

	if (!cgroup_path(v2, path, sizeof(path)) ||
	    !cgroup_mount(v2, mnt, sizeof(mnt), root, sizeof(root)))
		return;
	/* the mount shows the hierarchy from @root down: the path below it */
	rlen = strcmp(root, "/") ? strlen(root) : 0;
	rel = !strncmp(path, root, rlen) ? path + rlen : path;
	if (snprintf(dir, sizeof(dir), "%s%s", mnt, rel) >= (int)sizeof(dir))
		return;
	for (;;) {
		uint64_t v = read_limit(dir, file);
		char *slash;

		if (v && v < fa->cg_limit &&
		    snprintf(fa->cg_dir, sizeof(fa->cg_dir), "%s", dir) < (int)sizeof(fa->cg_dir)) {
			fa->cg_limit = v;
			fa->cg_file = file;
		}
		if (v && v != UINT64_MAX) {
			uint64_t held = unreclaimable(dir, v2);
			uint64_t room = held == UINT64_MAX ? v : held < v ? v - held : 0;

			if (room < fa->cg_room)
				fa->cg_room = room;
		}
		if (strlen(dir) <= strlen(mnt))
			break;
		slash = strrchr(dir, '/');
		if (!slash)
			break;
		*slash = '\0';
	}
}

void kvp_memguard_read(struct kvp_memguard_facts *f)
{
	memset(f, 0, sizeof(*f));
	f->cg_limit = UINT64_MAX;
	f->cg_room = UINT64_MAX;
	f->budget = UINT64_MAX;
	f->mem_available = meminfo_available();
	cgroup_limit(true, f);
	cgroup_limit(false, f);
}

static const char *mib(uint64_t v, char *buf, size_t cap)
{
	snprintf(buf, cap, "%.1f MiB", (double)v / (1 << 20));
	return buf;
}

int kvp_memguard_check(const struct kvp_memguard_facts *f, uint64_t pool_bytes,
		       uint64_t model_bytes, const char *model_note, char *err, size_t cap)
{
	uint64_t need = pool_bytes + model_bytes;
	char a[32], b[32], c[32], d[32];

	if (f->budget != UINT64_MAX && need > f->budget) {
		kvp_errmsg(err, cap,
			   "memory: the pool (%s) and the model (%s, %s) need %s, more than "
			   "daemon.memory_limit allows: %s.  Lower pool.size or raise the limit",
			   mib(pool_bytes, a, sizeof(a)), mib(model_bytes, b, sizeof(b)),
			   model_note, mib(need, c, sizeof(c)), mib(f->budget, d, sizeof(d)));
		return -ENOMEM;
	}
	if (f->cg_limit != UINT64_MAX && need > f->cg_limit) {
		kvp_errmsg(err, cap,
			   "memory: the pool (%s) and the model (%s, %s) need %s, more than the "
			   "memory cgroup allows: %s (%s/%s); the OOM killer would end kvpoold "
			   "while the pool is pre-faulted.  Lower pool.size, raise the limit "
			   "(MemoryMax= under systemd), or start anyway with --memory-guard=no",
			   mib(pool_bytes, a, sizeof(a)), mib(model_bytes, b, sizeof(b)),
			   model_note, mib(need, c, sizeof(c)), mib(f->cg_limit, d, sizeof(d)),
			   f->cg_dir, f->cg_file);
		return -ENOMEM;
	}
	if (f->mem_available && need > f->mem_available) {
		kvp_errmsg(err, cap,
			   "memory: the pool (%s) and the model (%s, %s) need %s, more than the "
			   "machine has available: %s (MemAvailable in /proc/meminfo).  Lower "
			   "pool.size, or start anyway with --memory-guard=no",
			   mib(pool_bytes, a, sizeof(a)), mib(model_bytes, b, sizeof(b)),
			   model_note, mib(need, c, sizeof(c)),
			   mib(f->mem_available, d, sizeof(d)));
		return -ENOMEM;
	}
	return 0;
}

int kvp_memguard_check_domain(const struct kvp_memguard_facts *f, uint64_t pool_bytes,
			      uint64_t held, uint32_t n_open, char *err, size_t cap)
{
	uint64_t need = held + pool_bytes;
	char a[32], b[32], c[32], d[32];
	const char *what = NULL;
	uint64_t limit = 0;

	if (f->budget != UINT64_MAX && need > f->budget) {
		what = "daemon.memory_limit";
		limit = f->budget;
	} else if (f->cg_limit != UINT64_MAX && need > f->cg_limit) {
		what = "the memory cgroup's limit";
		limit = f->cg_limit;
	}
	if (what) {
		kvp_errmsg(err, cap,
			   "no memory for a new trust domain: its pool (%s) and what kvpoold holds "
			   "(%s: the model and %u domain pool(s)) need %s, more than %s (%s); try "
			   "later (idle domains are reclaimed: domains.idle_reclaim_ms)",
			   mib(pool_bytes, a, sizeof(a)), mib(held, b, sizeof(b)), n_open,
			   mib(need, c, sizeof(c)), what, mib(limit, d, sizeof(d)));
		return -ENOMEM;
	}
	if (f->mem_available && pool_bytes > f->mem_available) {
		what = "the machine has available (MemAvailable)";
		limit = f->mem_available;
	} else if (f->cg_room != UINT64_MAX && pool_bytes > f->cg_room) {
		what = "the memory cgroup has left";
		limit = f->cg_room;
	}
	if (what) {
		kvp_errmsg(err, cap,
			   "no memory for a new trust domain: its pool (%s) is more than %s: %s; "
			   "try later",
			   mib(pool_bytes, a, sizeof(a)), what, mib(limit, d, sizeof(d)));
		return -ENOMEM;
	}
	return 0;
}
