/* SPDX-License-Identifier: MIT */
/*
 * test_tier_daemon.c - the disk tier inside a real kvpoold (tiny model, a pool of 128
 * blocks, low watermarks so cold blocks go to disk quickly):
 *
 *  - offload and reload round trip bit-exact: a prompt's blocks, hashed in the pool's
 *    read-only mapping, are found byte for byte in the tier file and, once read back, in
 *    the pool again; generation after the reload equals the same generation cold;
 *  - after a restart the prompt hits from disk (rebuilt index) with the same tokens;
 *    after `kvpool flush --tier` and a restart nothing comes back from disk;
 *  - flipped bytes in a block's K/V and in another's header, a truncated file, torn
 *    blocks (cut at 512-byte boundaries, garbage after the cut): detected, never served,
 *    recomputed with the right tokens;
 *  - a tier on a tiny file system fills up and a read-only tier degrades: the daemon
 *    logs it, counts it and keeps serving (these need root for the mounts; skipped
 *    without it);
 *  - SIGKILL during heavy offloading, then a restart: every block the rebuild can index
 *    (a sound block whose whole chain is in the file) is compared with K/V computed from
 *    scratch for its tokens: none differs beyond rounding (KILL_ROUNDS here; the 'slow'
 *    suite runs test_tier_daemon_long.c, 30 rounds; KVP_TIER_KILL_ROUNDS overrides).
 *
 * The tier file is read by the test itself with shm/tier_fmt.h: the format is the
 * contract, and reading it independently is what makes "on disk" checkable.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <xxhash.h>

#include "compute/forward.h"
#include "compute/kernels/quant.h"
#include "compute/model.h"
#include "kvpool/kvpool.h"
#include "shm/pool.h"
#include "shm/tier_fmt.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"
#include "tests/lib/tierfix.h"

#define BT 16
#define PROMPT 400 /* 25 blocks of the tiny model: 24 can be cached (the last token never is) */
#define GEN 8
#ifndef KILL_ROUNDS
#define KILL_ROUNDS 3 /* test_tier_daemon_long.c: many more, in the 'slow' suite */
#endif

struct fixture {
	struct kvpd d; /* first: kvpd_teardown() */
	char tier[600];
	char size[16];
	char high[8], low[8];
	char dtype[8]; /* --kv-dtype: f16 (the default) unless a test says otherwise */
};

static uint64_t rng = 0x853c49e6748fea9bull;

static void fill(int32_t *t, uint32_t n)
{
	kvp_test_fill_ids(&rng, t, n, 256);
}

static int start(struct fixture *f)
{
	const char *args[] = { "--model",      f->d.model,
			       "--pool-size",  "1M",
			       "--ignore-eos", "--tier-path",
			       f->tier,	       "--tier-size",
			       f->size,	       "--tier-high-watermark",
			       f->high,	       "--tier-low-watermark",
			       f->low,	       "--kv-dtype",
			       f->dtype,       NULL };
	int r = kvpd_start(&f->d, 60, args);

	if (r)
		kvpd_dump_log(&f->d);
	return r;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	*state = f;
	if (!f || kvpd_init(&f->d) || kvpd_model(&f->d, "tiny", f->d.model, sizeof(f->d.model)))
		return -1;
	snprintf(f->tier, sizeof(f->tier), "%s/tier", f->d.dir);
	strcpy(f->size, "8M");
	strcpy(f->high, "40");
	strcpy(f->low, "20");
	strcpy(f->dtype, "f16");
	return 0;
}

/* ---- requests ---- */

static int gen(struct fixture *f, const int32_t *prompt, uint32_t n, bool no_cache,
	       struct kvpd_gen *o)
{
	return kvpd_generate(f->d.sock, prompt, n, GEN, no_cache, o);
}

static double status_num(struct fixture *f, const char *path)
{
	return kvpd_status_num(&f->d, path, -1);
}

/* Push other prompts until the offloader has written @want blocks (or 15 s). */
static void push_out(struct fixture *f, double want)
{
	static int32_t other[PROMPT];
	struct kvpd_gen o;

	for (int i = 0; i < 40 && status_num(f, "tier.blocks") < want; i++) {
		fill(other, PROMPT);
		assert_int_equal(gen(f, other, PROMPT, false, &o), 0);
		usleep(50000);
	}
	assert_true(status_num(f, "tier.blocks") >= want);
}

/* ---- the tier file, as the format says ---- */

struct blk {
	uint64_t slot, uid, puid, generation;
	uint32_t tokens[BT];
	uint64_t data_off; /* file offset of its K/V */
};

struct tfile {
	uint8_t *buf;
	size_t len;
	struct kvp_tier_layout lay;
	uint64_t tier_id;
	struct blk *b;
	uint32_t n;
};

/* Read @path and list its sound blocks (header and K/V sums right). */
static void tfile_read(const char *path, struct tfile *t)
{
	struct kvp_tier_file_hdr h;
	FILE *fp = fopen(path, "rb");
	struct stat stt;

	memset(t, 0, sizeof(*t));
	assert_non_null(fp);
	assert_int_equal(fstat(fileno(fp), &stt), 0);
	t->len = (size_t)stt.st_size;
	t->buf = malloc(t->len);
	assert_non_null(t->buf);
	assert_int_equal(fread(t->buf, 1, t->len, fp), t->len);
	fclose(fp);
	assert_int_equal(kvp_tier_file_parse(t->buf, KVP_TIER_FILE_REGION, &h), 0);
	t->lay = (struct kvp_tier_layout){ .shape = h.shape,
					   .block_bytes = h.block_bytes,
					   .slot_hdr_bytes = h.slot_hdr_bytes,
					   .slot_bytes = h.slot_bytes,
					   .data_offset = h.data_offset,
					   .n_slots = h.n_slots,
					   .file_bytes = h.file_bytes };
	memcpy(t->lay.model_fp, h.model_fp, 16);
	t->tier_id = h.tier_id;
	t->b = calloc(h.n_slots, sizeof(*t->b));
	assert_non_null(t->b);
	for (uint64_t s = 0; s < h.n_slots; s++) {
		uint64_t off = kvp_tier_slot_offset(&t->lay, s);
		struct kvp_tier_blk_info info;
		uint32_t tok[BT];
		struct blk *b;

		if (off + t->lay.slot_bytes > t->len)
			break;
		if (kvp_tier_blk_parse(t->buf + off, t->lay.slot_hdr_bytes, &t->lay, t->tier_id, s,
				       tok, &info) ||
		    kvp_tier_blk_verify(t->buf + off, &t->lay, &info,
					t->buf + off + t->lay.slot_hdr_bytes))
			continue;
		b = &t->b[t->n++];
		b->slot = s;
		b->uid = info.rec.uid;
		b->puid = info.rec.puid;
		b->generation = info.generation;
		memcpy(b->tokens, tok, sizeof(tok));
		b->data_off = off + t->lay.slot_hdr_bytes;
	}
}

static void tfile_free(struct tfile *t)
{
	free(t->buf);
	free(t->b);
}

static const struct blk *by_uid(const struct tfile *t, uint64_t uid)
{
	const struct blk *best = NULL;

	for (uint32_t i = 0; i < t->n; i++)
		if (t->b[i].uid == uid && (!best || t->b[i].generation > best->generation))
			best = &t->b[i];
	return best;
}

/* The block of the file holding block @i of @prompt (its chain checked), or NULL. */
static const struct blk *find_block(const struct tfile *t, const int32_t *prompt, uint32_t i)
{
	uint64_t puid = 0;
	const struct blk *b = NULL;

	for (uint32_t k = 0; k <= i; k++) {
		b = NULL;
		for (uint32_t j = 0; j < t->n; j++) {
			bool same = t->b[j].puid == puid;

			for (uint32_t x = 0; same && x < BT; x++)
				same = t->b[j].tokens[x] == (uint32_t)prompt[k * BT + x];
			if (same && (!b || t->b[j].generation > b->generation))
				b = &t->b[j];
		}
		if (!b)
			return NULL;
		puid = b->uid;
	}
	return b;
}

/* XXH3-64 of every block of the pool mapping, sorted. */
static uint64_t *pool_hashes(struct kvp_client *k, uint32_t *n)
{
	const struct kvp_welcome *w = kvp_client_welcome(k);
	size_t len;
	const uint8_t *p = kvp_client_pool(k, &len);
	uint64_t *h = calloc(w->n_blocks, sizeof(*h));
	size_t bytes = (size_t)kvp_layout_block_bytes(&w->shape); /* the pool's dtype's */

	assert_non_null(p);
	assert_non_null(h);
	for (uint32_t i = 0; i < w->n_blocks; i++)
		h[i] = XXH3_64bits(p + w->data_offset + (size_t)i * w->block_stride, bytes);
	*n = w->n_blocks;
	return h;
}

static bool has_hash(const uint64_t *h, uint32_t n, uint64_t v)
{
	for (uint32_t i = 0; i < n; i++)
		if (h[i] == v)
			return true;
	return false;
}

/* ---- the tests ---- */

static void roundtrip_reload_restart(struct fixture *f);

static void test_roundtrip_reload_restart(void **state)
{
	roundtrip_reload_restart(*state);
}

/* the same with int8 K/V: quantized blocks go to disk and back bit for bit */
static void test_roundtrip_reload_restart_int8(void **state)
{
	struct fixture *f = *state;

	strcpy(f->dtype, "int8");
	roundtrip_reload_restart(f);
}

/* f32 and bf16 K/V: their blocks go to disk and back bit for bit too */
static void test_roundtrip_reload_restart_f32(void **state)
{
	struct fixture *f = *state;

	strcpy(f->dtype, "f32");
	roundtrip_reload_restart(f);
}

static void test_roundtrip_reload_restart_bf16(void **state)
{
	struct fixture *f = *state;

	strcpy(f->dtype, "bf16");
	roundtrip_reload_restart(f);
}

/*
 * int4: only the blocks out of the residual window are published, so they are what
 * goes to disk; a prompt that hits them from memory, from disk after they were pushed
 * out, and from disk after a restart reads the same bytes from the same boundary, so
 * all three give the same tokens (not the cold ones: a hit's blocks are read quantized
 * where a cold run read its window in f32).
 */
static void test_roundtrip_reload_restart_int4(void **state)
{
	struct fixture *f = *state;
	static int32_t a[PROMPT];
	struct kvpd_gen cold, o, warm;
	uint32_t sealed;

	strcpy(f->dtype, "int4");
	assert_int_equal(start(f), 0);
	fill(a, PROMPT);
	assert_int_equal(gen(f, a, PROMPT, true, &cold), 0);
	assert_int_equal(gen(f, a, PROMPT, false, &o), 0);
	assert_memory_equal(o.ids, cold.ids, sizeof(cold.ids)); /* computed: the cold tokens */
	sealed = o.u.cache_creation_tokens;
	print_message("int4: %u of the prompt's %u tokens published\n", sealed, PROMPT);
	assert_true(sealed % BT == 0 && sealed >= (PROMPT - 32) / BT * BT && sealed < 25 * BT);
	assert_int_equal(gen(f, a, PROMPT, false, &warm), 0);
	assert_int_equal(warm.u.cached_tokens, sealed);
	push_out(f, 24);
	assert_int_equal(gen(f, a, PROMPT, false, &o), 0);
	assert_true(o.u.cached_tokens_disk > 0);
	assert_int_equal(o.u.cached_tokens + o.u.cached_tokens_disk, sealed);
	assert_memory_equal(o.ids, warm.ids, sizeof(warm.ids));
	assert_true(status_num(f, "tier.checksum_failures") == 0);
	push_out(f, 24);
	kvpd_stop(&f->d);
	assert_int_equal(start(f), 0);
	assert_true(status_num(f, "tier.rebuilt") >= sealed / BT);
	assert_int_equal(gen(f, a, PROMPT, false, &o), 0);
	assert_int_equal(o.u.cached_tokens_disk, sealed);
	assert_memory_equal(o.ids, warm.ids, sizeof(warm.ids));
	kvpd_stop(&f->d);
}

/*
 * A tier file written by an f16 daemon is not served to a daemon of quantized type @q
 * (the header's shape differs: the file is reset, nothing rebuilt, tier.type_resets 1),
 * and the other way round; the output is each type's cold one.
 */
static void other_dtype_not_served(struct fixture *f, const char *q)
{
	static int32_t a[PROMPT];
	struct kvpd_gen cold8, cold16, o;

	fill(a, PROMPT);
	strcpy(f->dtype, q);
	assert_int_equal(start(f), 0);
	assert_true(status_num(f, "tier.type_resets") == 0); /* a new file */
	assert_int_equal(gen(f, a, PROMPT, true, &cold8), 0);
	kvpd_stop(&f->d);
	strcpy(f->dtype, "f16");
	assert_int_equal(start(f), 0);
	assert_true(status_num(f, "tier.type_resets") == 1); /* written by @q */
	assert_true(kvpd_log_has(&f->d, "written with another K/V type"));
	assert_int_equal(gen(f, a, PROMPT, true, &cold16), 0);
	assert_int_equal(gen(f, a, PROMPT, false, &o), 0);
	push_out(f, 24);
	kvpd_stop(&f->d);

	strcpy(f->dtype, q);
	assert_int_equal(start(f), 0);
	assert_true(status_num(f, "tier.rebuilt") == 0);
	assert_true(status_num(f, "tier.type_resets") == 1);
	assert_int_equal(gen(f, a, PROMPT, false, &o), 0);
	assert_int_equal(o.u.cached_tokens_disk, 0);
	assert_int_equal(o.u.cached_tokens, 0);
	assert_memory_equal(o.ids, cold8.ids, sizeof(o.ids));
	/* recomputed in @q (int4 publishes the blocks out of its window only) */
	if (strcmp(q, "int4"))
		assert_int_equal(o.u.cache_creation_tokens, PROMPT);
	else
		assert_true(o.u.cache_creation_tokens > 0);
	push_out(f, 24);
	kvpd_stop(&f->d);

	strcpy(f->dtype, "f16");
	assert_int_equal(start(f), 0);
	assert_true(status_num(f, "tier.rebuilt") == 0);
	assert_true(status_num(f, "tier.type_resets") == 1);
	assert_int_equal(gen(f, a, PROMPT, false, &o), 0);
	assert_int_equal(o.u.cached_tokens_disk, 0);
	assert_memory_equal(o.ids, cold16.ids, sizeof(o.ids));
	push_out(f, 24);
	kvpd_stop(&f->d);

	/* the same type again: the file is kept, nothing counted */
	assert_int_equal(start(f), 0);
	assert_true(status_num(f, "tier.type_resets") == 0);
	assert_true(status_num(f, "tier.rebuilt") > 0);
	kvpd_stop(&f->d);
}

static void test_other_dtype_not_served(void **state)
{
	other_dtype_not_served(*state, "int8");
}

static void test_other_dtype_not_served_int4(void **state)
{
	other_dtype_not_served(*state, "int4");
}

static void roundtrip_reload_restart(struct fixture *f)
{
	/*
	 * a prompt's blocks go to disk byte for byte as they were in memory and come back
	 * byte for byte; generation after the reload, and after a restart, equals cold
	 */
	static int32_t a[PROMPT];
	struct kvp_client *k = NULL;
	struct kvpd_gen cold, o;
	uint64_t *h0, *h1;
	uint32_t n0, n1, on_disk = 0;
	struct tfile t;

	assert_int_equal(start(f), 0);
	fill(a, PROMPT);
	assert_int_equal(gen(f, a, PROMPT, true, &cold), 0);
	assert_int_equal(cold.n, GEN);
	assert_int_equal(gen(f, a, PROMPT, false, &o), 0);
	assert_memory_equal(o.ids, cold.ids, sizeof(cold.ids));
	assert_int_equal(o.u.cache_creation_tokens, PROMPT); /* 25 full blocks */
	assert_int_equal(kvp_client_connect(&k, f->d.sock), 0);
	h0 = pool_hashes(k, &n0);
	push_out(f, 24);
	tfile_read(f->tier, &t);
	for (uint32_t i = 0; i < 24; i++) {
		const struct blk *b = find_block(&t, a, i);

		if (!b)
			continue;
		on_disk++;
		/* written bit-exact: the file holds what the pool held */
		assert_true(has_hash(h0, n0, XXH3_64bits(t.buf + b->data_off, t.lay.block_bytes)));
	}
	print_message("%u of the prompt's 24 blocks on disk\n", on_disk);
	assert_true(on_disk >= 20);
	/* reloaded: the same tokens as cold, read from disk, and the K/V back bit-exact */
	assert_int_equal(gen(f, a, PROMPT, false, &o), 0);
	assert_memory_equal(o.ids, cold.ids, sizeof(cold.ids));
	assert_true(o.u.cached_tokens_disk > 0);
	assert_int_equal(o.u.cached_tokens + o.u.cached_tokens_disk, 24 * BT);
	h1 = pool_hashes(k, &n1);
	for (uint32_t i = 0; i < 24; i++) {
		const struct blk *b = find_block(&t, a, i);

		if (b)
			assert_true(has_hash(h1, n1,
					     XXH3_64bits(t.buf + b->data_off, t.lay.block_bytes)));
	}
	tfile_free(&t);
	free(h0);
	free(h1);
	kvp_client_close(k);
	assert_true(status_num(f, "tier.reads") > 0);
	assert_true(status_num(f, "tier.checksum_failures") == 0);

	/* a restart rebuilds the index from the file: the prompt hits from disk */
	kvpd_stop(&f->d);
	assert_int_equal(start(f), 0);
	assert_true(kvpd_log_has(&f->d, "tier: ") && kvpd_log_has(&f->d, "s per GiB"));
	assert_true(status_num(f, "tier.rebuilt") >= 24);
	assert_true(status_num(f, "tier.type_resets") == 0); /* the same K/V type */
	assert_int_equal(gen(f, a, PROMPT, false, &o), 0);
	assert_memory_equal(o.ids, cold.ids, sizeof(cold.ids));
	assert_int_equal(o.u.cached_tokens_disk, 24 * BT);

	/* kvpool flush --tier (the operators' socket): nothing comes back, not even after a
	 * restart, where the flushed blocks are foreign; the output is still the cold one */
	{
		char cli[512], cmd[2048];

		assert_int_equal(kvp_test_build_path(cli, sizeof(cli), "ipc/kvpool"), 0);
		snprintf(cmd, sizeof(cmd), "'%s' --status-socket '%s' flush --tier >/dev/null", cli,
			 f->d.status);
		assert_int_equal(system(cmd), 0);
	}
	assert_true(status_num(f, "tier.flushes") == 1);
	kvpd_stop(&f->d);
	assert_int_equal(start(f), 0);
	assert_true(status_num(f, "tier.rebuilt") == 0);
	assert_true(status_num(f, "tier.scan_foreign") >= 24);
	assert_int_equal(gen(f, a, PROMPT, false, &o), 0);
	assert_memory_equal(o.ids, cold.ids, sizeof(cold.ids));
	assert_int_equal(o.u.cached_tokens_disk, 0);
	assert_int_equal(o.u.cached_tokens, 0);
	kvpd_stop(&f->d);
}

/* Flip one byte at @off of the file. */
static void flip(const char *path, uint64_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t c;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &c, 1, (off_t)off), 1);
	c ^= 0x20;
	assert_int_equal(pwrite(fd, &c, 1, (off_t)off), 1);
	close(fd);
}

/* Overwrite [@off, @end) of the file with garbage (a write torn at @off). */
static void tear(const char *path, uint64_t off, uint64_t end)
{
	int fd = open(path, O_RDWR);
	uint8_t junk[512];

	assert_true(fd >= 0);
	for (; off < end; off += sizeof(junk)) {
		fill((int32_t *)junk, sizeof(junk) / 4);
		assert_int_equal(pwrite(fd, junk, sizeof(junk), (off_t)off), (ssize_t)sizeof(junk));
	}
	close(fd);
}

/* Start, cache @a, push it to disk, stop; the file's blocks of @a in @t. */
static void offload_prompt(struct fixture *f, const int32_t *a, struct kvpd_gen *cold,
			   struct tfile *t)
{
	struct kvpd_gen o;

	assert_int_equal(start(f), 0);
	assert_int_equal(gen(f, a, PROMPT, true, cold), 0);
	assert_int_equal(gen(f, a, PROMPT, false, &o), 0);
	push_out(f, 24);
	kvpd_stop(&f->d);
	tfile_read(f->tier, t);
	for (uint32_t i = 0; i < 24; i++)
		assert_non_null(find_block(t, a, i));
}

static void test_corruption_never_served(void **state)
{
	/*
	 * a flipped byte in block 3's K/V and in block 10's header: after a restart blocks
	 * 0-2 come from disk, the rest is recomputed, with the cold tokens; then the file
	 * truncated inside block 0's K/V: nothing served from it
	 */
	struct fixture *f = *state;
	static int32_t a[PROMPT];
	struct kvpd_gen cold, o;
	struct tfile t;

	fill(a, PROMPT);
	offload_prompt(f, a, &cold, &t);
	flip(f->tier, find_block(&t, a, 3)->data_off + 1000);
	flip(f->tier, kvp_tier_slot_offset(&t.lay, find_block(&t, a, 10)->slot) + 300);
	assert_int_equal(start(f), 0);
	assert_true(status_num(f, "tier.scan_corrupt") >= 1);
	assert_int_equal(gen(f, a, PROMPT, false, &o), 0);
	assert_memory_equal(o.ids, cold.ids, sizeof(cold.ids));
	assert_int_equal(o.u.cached_tokens_disk, 3 * BT);
	assert_int_equal(o.u.recomputed_tokens, PROMPT - 3 * BT);
	assert_true(status_num(f, "tier.checksum_failures") >= 1);
	/* the read that failed is the request's miss reason (docs/protocol.md) */
	assert_true(status_num(f, "cache.miss_io_error") == 1);
	kvpd_stop(&f->d);

	/* truncated in the middle of block 0's K/V (and everything after it) */
	assert_int_equal(truncate(f->tier,
				  (off_t)(find_block(&t, a, 0)->data_off + t.lay.block_bytes / 2)),
			 0);
	tfile_free(&t);
	assert_int_equal(start(f), 0);
	assert_int_equal(gen(f, a, PROMPT, false, &o), 0);
	assert_memory_equal(o.ids, cold.ids, sizeof(cold.ids));
	assert_int_equal(o.u.cached_tokens_disk, 0);
	kvpd_stop(&f->d);
}

static void test_torn_blocks_never_served(void **state)
{
	/*
	 * blocks torn at 512-byte boundaries, garbage after the cut: in block 2's header
	 * region and in block 5's K/V; restart: at most blocks 0-1 served, the cold tokens
	 */
	struct fixture *f = *state;
	static int32_t a[PROMPT];
	struct kvpd_gen cold, o;
	struct tfile t;
	const struct blk *b2, *b5;

	fill(a, PROMPT);
	offload_prompt(f, a, &cold, &t);
	b2 = find_block(&t, a, 2);
	b5 = find_block(&t, a, 5);
	tear(f->tier, kvp_tier_slot_offset(&t.lay, b2->slot) + 512,
	     kvp_tier_slot_offset(&t.lay, b2->slot) + t.lay.slot_bytes);
	tear(f->tier, b5->data_off + 1536,
	     kvp_tier_slot_offset(&t.lay, b5->slot) + t.lay.slot_bytes);
	tfile_free(&t);
	assert_int_equal(start(f), 0);
	assert_int_equal(gen(f, a, PROMPT, false, &o), 0);
	assert_memory_equal(o.ids, cold.ids, sizeof(cold.ids));
	assert_true(o.u.cached_tokens_disk <= 2 * BT);
	assert_true(status_num(f, "tier.scan_corrupt") >= 1);
	kvpd_stop(&f->d);
}

/* Serving while the tier is off: requests answered with the cold tokens. */
static void still_serves(struct fixture *f)
{
	static int32_t a[PROMPT];
	struct kvpd_gen cold, o;

	fill(a, PROMPT);
	assert_int_equal(gen(f, a, PROMPT, true, &cold), 0);
	assert_int_equal(gen(f, a, PROMPT, false, &o), 0);
	assert_memory_equal(o.ids, cold.ids, sizeof(cold.ids));
	assert_int_equal(gen(f, a, PROMPT, false, &o), 0);
	assert_memory_equal(o.ids, cold.ids, sizeof(cold.ids));
}

static void test_tiny_filesystem_fills(void **state)
{
	/* an ext4 image on an 8 MiB tmpfs that runs out under the tier: degraded, serving */
	struct fixture *f = *state;
	char outer[400], dir[420], image[420];
	static int32_t other[PROMPT];
	struct kvpd_gen o;
	int r;

	snprintf(outer, sizeof(outer), "%s/thin", f->d.dir);
	r = tfix_mount_tmpfs(outer, 8u << 20);
	if (r < 0) {
		print_message("skipped: a tmpfs mount needs root (%s)\n", strerror(-r));
		skip();
	}
	snprintf(dir, sizeof(dir), "%s/mnt", outer);
	snprintf(image, sizeof(image), "%s/disk.img", outer);
	r = tfix_mount_ext4_image(dir, image, 64u << 20);
	if (r < 0) {
		tfix_umount(outer);
		print_message("skipped: ext4 loop image: %s\n", strerror(-r));
		skip();
	}
	snprintf(f->tier, sizeof(f->tier), "%s/tier", dir);
	strcpy(f->size, "32M");
	assert_int_equal(start(f), 0);
	assert_true(status_num(f, "tier.degraded") == 0);
	for (int i = 0; i < 200 && status_num(f, "tier.degraded") == 0; i++) {
		fill(other, PROMPT);
		assert_int_equal(gen(f, other, PROMPT, false, &o), 0);
	}
	print_message("degraded after %.0f blocks written: %.0f\n", status_num(f, "tier.writes"),
		      status_num(f, "tier.degraded"));
	assert_true(status_num(f, "tier.degraded") < 0);
	assert_true(status_num(f, "tier.errors") >= 1);
	assert_true(kvpd_log_has(&f->d, "memory-only"));
	still_serves(f);
	kvpd_stop(&f->d);
	tfix_umount(dir);
	tfix_umount(outer);
}

static void test_read_only_tier(void **state)
{
	/* a tier on a read-only mount: logged, counted, memory-only, serving */
	struct fixture *f = *state;
	char dir[400];
	struct jsonq *j;
	int r;

	snprintf(dir, sizeof(dir), "%s/ro", f->d.dir);
	r = tfix_mount_tmpfs(dir, 16u << 20);
	if (r < 0) {
		print_message("skipped: a tmpfs mount needs root (%s)\n", strerror(-r));
		skip();
	}
	snprintf(f->tier, sizeof(f->tier), "%s/tier", dir);
	assert_int_equal(tfix_sh("touch '%s' && mount -o remount,ro '%s'", f->tier, dir), 0);
	assert_int_equal(start(f), 0);
	assert_true(kvpd_log_has(&f->d, "Read-only file system; memory-only"));
	j = kvpd_status(&f->d);
	assert_non_null(j);
	assert_string_equal(jsonq_str(j, "tier.state"), "degraded");
	assert_true(jsonq_num(j, "tier.degraded", 0) == -EROFS);
	jsonq_free(j);
	still_serves(f);
	kvpd_stop(&f->d);
	tfix_umount(dir);
}

/* ---- SIGKILL during offloading ---- */

struct load {
	struct fixture *f;
	atomic_bool stop;
	int32_t prefixes[4][200];
};

static void *load_main(void *arg)
{
	struct load *l = arg;
	struct kvp_client_params p;
	struct kvp_client *k = NULL;
	int32_t prompt[PROMPT];
	uint64_t x = 0x1234567;

	kvp_client_params_init(&p);
	p.max_new_tokens = 2;
	while (!atomic_load(&l->stop)) {
		struct kvp_client_prompt pr = { .tokens = prompt, .n_tokens = PROMPT };

		if (!k && kvp_client_connect(&k, l->f->d.sock))
			break; /* the daemon is gone */
		memcpy(prompt, l->prefixes[kvp_test_xorshift(&x) % 4], sizeof(l->prefixes[0]));
		kvp_test_fill_ids(&x, prompt + 200, PROMPT - 200, 256);
		if (kvp_client_generate(k, &pr, &p, NULL, NULL, NULL) < 0)
			break;
	}
	kvp_client_close(k);
	return NULL;
}

/* Blocks of f32 or f16 K/V equal but for rounding (another thread count, another order). */
static bool close_kv(const uint8_t *got, const uint8_t *want, size_t bytes, uint32_t dtype)
{
	size_t n = dtype == KVP_DTYPE_F32 ? bytes / 4 : bytes / 2;

	assert_true(dtype == KVP_DTYPE_F32 || dtype == KVP_DTYPE_F16);
	for (size_t e = 0; e < n; e++) {
		float g, w;

		if (dtype == KVP_DTYPE_F32) {
			memcpy(&g, got + 4 * e, 4);
			memcpy(&w, want + 4 * e, 4);
		} else {
			g = kvp_f16_to_f32((uint16_t)(got[2 * e] | got[2 * e + 1] << 8));
			w = kvp_f16_to_f32((uint16_t)(want[2 * e] | want[2 * e + 1] << 8));
		}
		/* f16: its own rounding (2^-11 relative) may flip a unit either way */
		if (!(fabsf(g - w) <= 1e-3f + 2e-3f * fabsf(w)))
			return false;
	}
	return true;
}

/*
 * Every block the rebuild can index (its chain whole in the file) against K/V computed
 * from scratch for its tokens.  Return: blocks checked; *@bad those that differ.
 */
static uint32_t verify_file(struct fixture *f, uint32_t *bad)
{
	struct kvp_pool_config pc = { .n_blocks = 64, .pages = KVP_PAGES_OFF };
	struct kvp_fwd_opts fo = { .n_threads = 1, .max_chunk = 256, .max_batch = 1 };
	struct kvp_model *m = NULL;
	struct kvp_pool *pool = NULL;
	struct kvp_fwd *fwd = NULL;
	struct kvp_kv_view v;
	uint32_t table[64], checked = 0;
	int32_t tokens[64 * BT];
	float *logits;
	struct tfile t;

	*bad = 0;
	tfile_read(f->tier, &t);
	assert_int_equal(kvp_model_open(&m, f->d.model, NULL, 0), 0);
	kvp_model_kv_shape(m, t.lay.shape.dtype, BT, &pc.shape); /* the daemon's K/V type */
	assert_int_equal(kvp_pool_new(&pool, &pc), 0);
	assert_int_equal(kvp_fwd_new(&fwd, m, &fo), 0);
	kvp_pool_kv_view(pool, &v);
	logits = malloc(kvp_model_hparams(m)->n_vocab * sizeof(float));
	for (uint32_t i = 0; i < 64; i++)
		table[i] = i;
	for (uint32_t i = 0; i < t.n; i++) {
		const struct blk *chain[64];
		const struct blk *b = &t.b[i];
		uint32_t depth = 0, pos = 0;
		const uint8_t *got, *want;

		if (by_uid(&t, b->uid) != b)
			continue; /* an older copy: the rebuild keeps the newer */
		while (b && depth < 64) {
			chain[depth++] = b;
			b = b->puid ? by_uid(&t, b->puid) : NULL;
			if (!b && chain[depth - 1]->puid)
				depth = 65; /* an orphan: not indexed */
		}
		if (depth > 64)
			continue;
		for (uint32_t k = 0; k < depth; k++)
			for (uint32_t x = 0; x < BT; x++)
				tokens[k * BT + x] = (int32_t)chain[depth - 1 - k]->tokens[x];
		while (pos < depth * BT) {
			uint32_t n = depth * BT - pos < 256 ? depth * BT - pos : 256;

			assert_int_equal(kvp_fwd_prefill(fwd, &v, table, 64, pos, tokens + pos, n,
							 logits, 0),
					 0);
			pos += n;
		}
		got = t.buf + t.b[i].data_off;
		want = kvp_kv_block(&v, table[depth - 1]);
		if (!close_kv(got, want, t.lay.block_bytes, t.lay.shape.dtype))
			(*bad)++;
		checked++;
	}
	free(logits);
	kvp_fwd_free(fwd);
	kvp_pool_free(pool);
	kvp_model_close(m);
	tfile_free(&t);
	return checked;
}

static void kill_rounds(struct fixture *f, uint32_t rounds)
{
	static struct load l;
	uint32_t total = 0, bad_total = 0;

	strcpy(f->high, "20");
	strcpy(f->low, "5");
	memset(&l, 0, sizeof(l));
	l.f = f;
	for (int i = 0; i < 4; i++)
		fill(l.prefixes[i], 200);
	for (uint32_t r = 0; r < rounds; r++) {
		pthread_t th;
		uint32_t bad, checked;
		double rebuilt;

		assert_int_equal(start(f), 0);
		rebuilt = status_num(f, "tier.rebuilt");
		atomic_store(&l.stop, false);
		pthread_create(&th, NULL, load_main, &l);
		usleep(300000 + (useconds_t)(rng % 700000));
		kill(f->d.pid, SIGKILL);
		kvpd_wait(&f->d, 30);
		atomic_store(&l.stop, true);
		pthread_join(th, NULL);
		checked = verify_file(f, &bad);
		print_message("round %u: rebuilt %.0f at its start; after the kill %u indexable "
			      "blocks checked, %u differ\n",
			      r, rebuilt, checked, bad);
		total += checked;
		bad_total += bad;
	}
	/* the last state once more through the daemon: what it rebuilds, it serves right */
	assert_int_equal(start(f), 0);
	assert_true(status_num(f, "tier.rebuilt") > 0);
	still_serves(f);
	kvpd_stop(&f->d);
	assert_true(total > 0);
	assert_int_equal(bad_total, 0);
}

static void test_sigkill_during_offload(void **state)
{
	/* quick rounds of SIGKILL while offloading: no block of the rebuild is wrong */
	const char *env = getenv("KVP_TIER_KILL_ROUNDS");

	kill_rounds(*state, env ? (uint32_t)atoi(env) : KILL_ROUNDS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_roundtrip_reload_restart, setup,
						kvpd_teardown),
		cmocka_unit_test_setup_teardown(test_roundtrip_reload_restart_f32, setup,
						kvpd_teardown),
		cmocka_unit_test_setup_teardown(test_roundtrip_reload_restart_bf16, setup,
						kvpd_teardown),
		cmocka_unit_test_setup_teardown(test_roundtrip_reload_restart_int8, setup,
						kvpd_teardown),
		cmocka_unit_test_setup_teardown(test_other_dtype_not_served, setup, kvpd_teardown),
		cmocka_unit_test_setup_teardown(test_roundtrip_reload_restart_int4, setup,
						kvpd_teardown),
		cmocka_unit_test_setup_teardown(test_other_dtype_not_served_int4, setup,
						kvpd_teardown),
		cmocka_unit_test_setup_teardown(test_corruption_never_served, setup, kvpd_teardown),
		cmocka_unit_test_setup_teardown(test_torn_blocks_never_served, setup,
						kvpd_teardown),
		cmocka_unit_test_setup_teardown(test_tiny_filesystem_fills, setup, kvpd_teardown),
		cmocka_unit_test_setup_teardown(test_read_only_tier, setup, kvpd_teardown),
		cmocka_unit_test_setup_teardown(test_sigkill_during_offload, setup, kvpd_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
