/* SPDX-License-Identifier: MIT */
/*
 * tierfix.h - fixtures for disk-tier tests and the tier benchmark: a pool in a temporary
 * directory, block records with consistent chain hashes, K/V contents derived from the
 * chain hash (so anyone can tell what a block must hold), and blocking write/read helpers
 * over the asynchronous tier API.  Also scratch file systems (a small tmpfs, a loop-mounted
 * ext4 image) for tests that need one; those need root and say so.
 */
#ifndef KVP_TESTS_TIERFIX_H
#define KVP_TESTS_TIERFIX_H

#include <stddef.h>
#include <stdint.h>

#include "shm/index.h"
#include "shm/pool.h"
#include "shm/tier.h"

/**
 * struct tfix - one pool + tier file path + record maker
 * @dir:      private temporary directory (removed by tfix_deinit())
 * @path:     the tier file in it (or elsewhere, set by the test)
 * @pool:     a pool of the fixture's shape
 * @key:      the prefix key all records use (model_fp = @fp)
 * @fp:       the model fingerprint
 * @next_uid: uid of the next record made
 * @rng:      token generator state
 */
struct tfix {
	char dir[256];
	char path[512];
	struct kvp_pool *pool;
	struct kvp_prefix_key key;
	uint8_t fp[16];
	uint64_t next_uid;
	uint64_t rng;
};

/* Make the directory and the pool (@n_blocks of @shape, 4 KiB pages).  0 or -errno. */
int tfix_init(struct tfix *f, const struct kvp_model_shape *shape, uint32_t n_blocks);

/* The same with the pool's pages as @pages (the daemon's default is KVP_PAGES_AUTO). */
int tfix_init_pages(struct tfix *f, const struct kvp_model_shape *shape, uint32_t n_blocks,
		    enum kvp_page_mode pages);
void tfix_deinit(struct tfix *f);

/* A tier config for f->path of @n_slots slots, @flags, short lock wait. */
struct kvp_tier_config tfix_cfg(const struct tfix *f, uint32_t n_slots, uint32_t flags);

/*
 * A record with fresh random tokens (into @tokens, block_tokens of them): a first block
 * when @parent is NULL, else its child.  uid = f->next_uid++.
 */
void tfix_rec(struct tfix *f, const struct kvp_index_rec *parent, uint32_t *tokens,
	      struct kvp_index_rec *out);

/* Fill pool block @block with the K/V pattern of @hash; 1 if it holds exactly that. */
void tfix_fill(const struct tfix *f, uint32_t block, struct kvp_h128 hash);
int tfix_holds(const struct tfix *f, uint32_t block, struct kvp_h128 hash);

/* The same pattern into / against plain memory of @n bytes. */
void tfix_pattern(uint8_t *buf, size_t n, struct kvp_h128 hash);

/* Queue a write / read and wait for exactly its completion (others are dropped on the
 * floor: use with nothing else in flight).  Write: slot >= 0 or -errno; read: result. */
int tfix_write_wait(struct kvp_tier *t, const struct kvp_index_rec *rec, uint32_t block);
int tfix_read_wait(struct kvp_tier *t, uint32_t slot, uint64_t uid, uint32_t block);

/* Wait until nothing is in flight; counts completions with result 0 and != 0. */
void tfix_drain(struct kvp_tier *t, uint32_t *ok, uint32_t *failed);

/* Run a shell command (sh -c); its exit status, or -1. */
int tfix_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * A tmpfs of @bytes mounted on @dir (created).  Return 0, or -errno (-EPERM when not
 * root or mounts are not allowed here).
 */
int tfix_mount_tmpfs(const char *dir, uint64_t bytes);

/*
 * An ext4 file system of @fs_bytes in a sparse image file @image (on whatever file
 * system holds it), loop-mounted on @dir.  Return 0 or -errno.
 */
int tfix_mount_ext4_image(const char *dir, const char *image, uint64_t fs_bytes);

/* Unmount @dir (lazily if busy) and detach its loop device, if any. */
void tfix_umount(const char *dir);

#endif /* KVP_TESTS_TIERFIX_H */
