/* SPDX-License-Identifier: MIT */
/*
 * tierfix.c - disk-tier test fixtures (see tierfix.h).
 */
#include "tests/lib/tierfix.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/lib/testlib.h"

int tfix_init(struct tfix *f, const struct kvp_model_shape *shape, uint32_t n_blocks)
{
	return tfix_init_pages(f, shape, n_blocks, KVP_PAGES_OFF);
}

int tfix_init_pages(struct tfix *f, const struct kvp_model_shape *shape, uint32_t n_blocks,
		    enum kvp_page_mode pages)
{
	struct kvp_pool_config pc = {
		.shape = *shape, .n_blocks = n_blocks, .pages = pages, .name = "kvptest-tier"
	};
	struct kvp_extra_keys ek = { .kv_dtype = shape->dtype,
				     .rope_theta_bits = 0x461c4000,
				     .salt_len = 4,
				     .salt = "salt" };
	int r;

	memset(f, 0, sizeof(*f));
	memcpy(f->fp, "tier-test-model!", 16);
	memcpy(ek.model_fp, f->fp, 16);
	f->next_uid = 1;
	f->rng = 0x243f6a8885a308d3ull;
	r = kvp_test_tmpdir(f->dir, sizeof(f->dir));
	if (r < 0)
		return r;
	snprintf(f->path, sizeof(f->path), "%s/tier", f->dir);
	r = kvp_prefix_key_init(&f->key, &ek);
	if (r < 0)
		return r;
	return kvp_pool_new(&f->pool, &pc);
}

/* Unmount whatever a failed test left mounted under @dir, deepest first. */
static void umount_under(const char *dir)
{
	size_t n = strlen(dir);

	for (int pass = 0; pass < 4; pass++) {
		char line[1024], mnt[1024], deepest[1024] = "";
		FILE *m = fopen("/proc/self/mounts", "r");

		if (!m)
			return;
		while (fgets(line, sizeof(line), m))
			if (sscanf(line, "%*s %1023s", mnt) == 1 && strncmp(mnt, dir, n) == 0 &&
			    mnt[n] == '/' && strlen(mnt) > strlen(deepest))
				strcpy(deepest, mnt);
		fclose(m);
		if (!deepest[0])
			return;
		tfix_umount(deepest);
	}
}

void tfix_deinit(struct tfix *f)
{
	kvp_pool_free(f->pool);
	f->pool = NULL;
	if (f->dir[0]) {
		umount_under(f->dir);
		kvp_test_rmtree(f->dir);
	}
}

struct kvp_tier_config tfix_cfg(const struct tfix *f, uint32_t n_slots, uint32_t flags)
{
	const struct kvp_geom *g = kvp_pool_geom(f->pool);
	struct kvp_tier_layout lay;
	struct kvp_tier_config c = { .path = f->path, .flags = flags, .lock_wait_ms = 200 };

	/* the size that holds exactly n_slots */
	kvp_tier_layout_init(&lay, &g->shape, f->fp, 1ull << 40);
	c.max_bytes = lay.data_offset + (uint64_t)n_slots * lay.slot_bytes;
	memcpy(c.model_fp, f->fp, 16);
	return c;
}

void tfix_rec(struct tfix *f, const struct kvp_index_rec *parent, uint32_t *tokens,
	      struct kvp_index_rec *out)
{
	uint32_t bt = kvp_pool_geom(f->pool)->shape.block_tokens;

	for (uint32_t i = 0; i < bt; i++)
		tokens[i] = (uint32_t)(kvp_test_xorshift(&f->rng) % 128000);
	memset(out, 0, sizeof(*out));
	out->key = f->key;
	out->uid = f->next_uid++;
	out->puid = parent ? parent->uid : 0;
	out->phash = parent ? parent->hash : f->key.seed;
	out->hash = kvp_chain_hash(out->phash, tokens, bt);
	out->tokens = tokens;
}

void tfix_pattern(uint8_t *buf, size_t n, struct kvp_h128 hash)
{
	uint64_t s = hash.lo ^ (hash.hi * 0x9e3779b97f4a7c15ull) ^ 0x5bd1e995;
	size_t i = 0;

	if (!s)
		s = 1;
	for (; i + 8 <= n; i += 8) {
		uint64_t v = kvp_test_xorshift(&s);

		memcpy(buf + i, &v, 8);
	}
	for (uint64_t v = kvp_test_xorshift(&s); i < n; i++, v >>= 8)
		buf[i] = (uint8_t)v;
}

void tfix_fill(const struct tfix *f, uint32_t block, struct kvp_h128 hash)
{
	tfix_pattern(kvp_pool_data(f->pool, block), kvp_pool_geom(f->pool)->block_bytes, hash);
}

int tfix_holds(const struct tfix *f, uint32_t block, struct kvp_h128 hash)
{
	size_t n = kvp_pool_geom(f->pool)->block_bytes;
	uint8_t *want = malloc(n);
	int same;

	if (!want)
		return 0;
	tfix_pattern(want, n, hash);
	same = memcmp(want, kvp_pool_data(f->pool, block), n) == 0;
	free(want);
	return same;
}

static int wait_for(struct kvp_tier *t, uint32_t op, uint32_t slot, uint32_t block)
{
	struct kvp_tier_done d[8];

	for (;;) {
		int n = kvp_tier_wait(t, d, 8);

		if (n <= 0)
			return -ENOENT; /* it never completed: a bug in the tier */
		for (int i = 0; i < n; i++)
			if (d[i].op == op && d[i].slot == slot && d[i].block == block)
				return d[i].result;
	}
}

int tfix_write_wait(struct kvp_tier *t, const struct kvp_index_rec *rec, uint32_t block)
{
	int s = kvp_tier_write(t, rec, block, 0), r;

	if (s < 0)
		return s;
	r = wait_for(t, KVP_TIER_OP_WRITE, (uint32_t)s, block);
	return r < 0 ? r : s;
}

int tfix_read_wait(struct kvp_tier *t, uint32_t slot, uint64_t uid, uint32_t block)
{
	int r = kvp_tier_read(t, slot, uid, block, 0);

	if (r < 0)
		return r;
	return wait_for(t, KVP_TIER_OP_READ, slot, block);
}

void tfix_drain(struct kvp_tier *t, uint32_t *ok, uint32_t *failed)
{
	struct kvp_tier_done d[32];
	int n;

	while ((n = kvp_tier_wait(t, d, 32)) > 0)
		for (int i = 0; i < n; i++) {
			if (d[i].result == 0 && ok)
				(*ok)++;
			else if (d[i].result != 0 && failed)
				(*failed)++;
		}
}

int tfix_sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	if (st < 0 || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

int tfix_mount_tmpfs(const char *dir, uint64_t bytes)
{
	char opt[64];

	if (geteuid() != 0)
		return -EPERM;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	snprintf(opt, sizeof(opt), "size=%llu,mode=0700", (unsigned long long)bytes);
	if (mount("kvptest", dir, "tmpfs", MS_NOSUID | MS_NODEV, opt) < 0)
		return -errno;
	return 0;
}

int tfix_mount_ext4_image(const char *dir, const char *image, uint64_t fs_bytes)
{
	if (geteuid() != 0)
		return -EPERM;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	if (tfix_sh("truncate -s %llu '%s'", (unsigned long long)fs_bytes, image) != 0)
		return -EIO;
	/* no journal, no lazy init threads: the image stays small and quiet */
	if (tfix_sh("mkfs.ext4 -q -F -O ^has_journal -E nodiscard,lazy_itable_init=0 '%s' "
		    ">/dev/null 2>&1",
		    image) != 0)
		return -ENOEXEC;
	if (tfix_sh("mount -o loop,errors=continue '%s' '%s' 2>/dev/null", image, dir) != 0)
		return -ENODEV;
	return 0;
}

void tfix_umount(const char *dir)
{
	if (umount2(dir, 0) < 0)
		umount2(dir, MNT_DETACH);
	rmdir(dir);
}
