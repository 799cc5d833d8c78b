/* SPDX-License-Identifier: MIT */
/*
 * fuzz_tier_rebuild.c - the disk tier's rebuild at start, whole: a tier file anyone
 * might have damaged, opened by kvp_tier_open() (header plan, rebuild scan, real
 * io_uring and O_DIRECT on a real file) and handed to a fresh index by
 * kvp_tier_attach_index(); then every prompt the found blocks describe is looked up,
 * its hits read back, and the tier written full so every rebuilt entry is evicted.
 *
 * The input describes the file, so a mutation stays a sound block unless it means to
 * damage one (a checksum a fuzzer cannot forge would otherwise hide everything past the
 * record parser, which fuzz_tier.c covers):
 *
 *	byte 0  mode: bit 0 full scan, bit 1 fixed buffers, bits 2-3 queue depth - 1,
 *	        bit 4 the file header names another slot count (byte 1 % 16 + 1: a resize),
 *	        bit 5 it names another model (a reset), bit 6 the file is cut at byte 2 *
 *	        512, bit 7 raw: bytes 3.. are the file image itself (zeros after)
 *	byte 3  records that follow (% 33), 8 bytes each:
 *	        r0: slot (& 7); bit 3 header names the next slot (misdirected), bit 4
 *	            another tier id, bit 5 the second extra keys, bit 6 the slot erased
 *	            instead, bit 7 a K/V byte flipped after the sums
 *	        r1: parent: 0 none, else the (r1 - 1) % n-th record made
 *	        r2: uid (0: the next of 256, 257, ...), r3: puid if not 0 (a lie),
 *	        r4: token seed (equal seeds and parents make equal blocks), r5: generation,
 *	        r6, r7: header byte r6 * 2 xor r7 (none when r7 is 0; bit 7 flips K/V byte
 *	            r6 * 24)
 *	then    3-byte damages to the end: file offset (LE 16 bits) * 2, xor byte
 *
 * What must hold, whatever the file: open and attach succeed (the tier may be off, never
 * the call failed), and the tier is off exactly when it says why; a file that is not a
 * tier file is left as it was; the scan's counts add up to the slots; the blocks found
 * are exactly the sound ones the input left intact (a block found is the one the input
 * wrote to that slot, field for field, and only under a sound, compatible file header);
 * rebuilt + orphans + duplicates = found, and the index holds exactly the rebuilt
 * entries; a prompt's lookup hits only slots whose block is that prompt's block (its
 * header, parsed from the file image, has the prompt's chain hash), a hit read back that
 * passes its check holds exactly the file's K/V (padding zeroed), and with no orphan and
 * no duplicate every found chain is hit whole; a full tier's evictions take every
 * rebuilt entry out of the index.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blkfix.h"
#include "fuzz.h"
#include "shm/tier.h"

#define TIER_ID 0x1234abcd5678ef01ull
#define NSLOT 8u
#define MAXREC 32u
#define MAXDEPTH (MAXREC + 1)
#define HDR_MAX 4096u /* a slot's header region, at most (checked at start) */

static struct {
	struct blkfix f;
	struct kvp_prefix_key key2; /* the second extra keys: another salt */
	struct kvp_tier_layout lay; /* NSLOT slots */
	struct kvp_pool *pool;
	char dir[256];
	char path[300];
	uint8_t *img; /* the file image, lay.file_bytes */
} g;

/* What the input wrote into a slot (the last record there). */
struct wrote {
	int set;
	int sound; /* every field as a reader accepts it (before any damage) */
	uint64_t generation;
	struct kvp_index_rec rec;
	uint32_t tokens[BLKFIX_BT];
	uint8_t hdr[HDR_MAX]; /* the header region as encoded */
};

/* Whether the scan must find a slot's block, must not, or may (see expect()). */
enum { MUST_NOT, MUST, MAY };

struct found {
	uint32_t slot;
	uint64_t generation;
	struct kvp_index_rec rec;
	uint32_t tokens[BLKFIX_BT];
};

static void cleanup(void)
{
	unlink(g.path);
	rmdir(g.dir);
	kvp_pool_free(g.pool);
	free(g.img);
}

/*
 * The tier file lives in a private directory (mode 0700, as kvp_tier_open() demands)
 * on /dev/shm when it is there: O_DIRECT reads of a file just written on a disk file
 * system would write it back to the disk first, every execution.
 */
static void init(void)
{
	struct kvp_extra_keys ek = { .kv_dtype = KVP_DTYPE_F16, .salt_len = 2, .salt = "zw" };
	struct kvp_pool_config pc = { .n_blocks = NSLOT + 1,
				      .pages = KVP_PAGES_OFF,
				      .name = "fuzz-tier" };
	const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");

	blkfix_init(&g.f);
	memcpy(ek.model_fp, g.f.fp, 16);
	pc.shape = g.f.shape;
	snprintf(g.dir, sizeof(g.dir), "%s/kvp-fuzz-tier.XXXXXX", base && *base ? base : "/tmp");
	if (kvp_prefix_key_init(&g.key2, &ek) < 0 ||
	    kvp_tier_layout_init(&g.lay, &g.f.shape, g.f.fp,
				 KVP_TIER_FILE_REGION + NSLOT * g.f.lay.slot_bytes) < 0 ||
	    g.lay.n_slots != NSLOT || g.lay.slot_hdr_bytes > HDR_MAX || !mkdtemp(g.dir) ||
	    kvp_pool_new(&g.pool, &pc) < 0)
		abort();
	snprintf(g.path, sizeof(g.path), "%s/tier", g.dir);
	g.img = malloc(g.lay.file_bytes);
	if (!g.img)
		abort();
	atexit(cleanup);
}

static void kv_pattern(uint8_t *kv, size_t n, struct kvp_h128 h)
{
	for (size_t k = 0; k < n; k++)
		kv[k] = (uint8_t)((h.lo >> (k % 8 * 8)) ^ (k * 131) ^ (h.hi >> (k % 7 * 8)));
}

/* The structured input's records into the image (see the top); returns the bytes used. */
static size_t build_records(const uint8_t *d, size_t size, struct wrote *w)
{
	struct kvp_index_rec made[MAXREC];
	uint32_t tok[MAXREC][BLKFIX_BT];
	uint32_t n_rec = size > 3 ? d[3] % (MAXREC + 1) : 0, n_made = 0;
	uint64_t next_uid = 256;
	size_t off = 4;

	for (uint32_t i = 0; i < n_rec && off + 8 <= size; i++, off += 8) {
		const uint8_t *r = d + off;
		uint32_t slot = r[0] & 7u;
		uint8_t *s = g.img + kvp_tier_slot_offset(&g.lay, slot);
		const struct kvp_index_rec *par = r[1] && n_made ? &made[(r[1] - 1u) % n_made] :
								   NULL;
		struct kvp_index_rec *rec = &made[n_made];

		if (r[0] & 0x40) {
			memset(s, 0, g.lay.slot_bytes);
			w[slot].set = 0;
			continue;
		}
		for (uint32_t k = 0; k < BLKFIX_BT; k++)
			tok[n_made][k] = r[4] * 977u + k * 13u;
		*rec = (struct kvp_index_rec){ .key = r[0] & 0x20 ? g.key2 : g.f.key,
					       .tokens = tok[n_made] };
		rec->uid = r[2] ? r[2] : next_uid++;
		rec->puid = r[3] ? r[3] : par ? par->uid : 0;
		rec->phash = par ? par->hash : rec->key.seed;
		rec->hash = kvp_chain_hash(rec->phash, rec->tokens, BLKFIX_BT);
		kv_pattern(s + g.lay.slot_hdr_bytes, g.lay.block_bytes, rec->hash);
		kvp_tier_blk_encode(s, &g.lay, r[0] & 0x10 ? TIER_ID ^ 1 : TIER_ID,
				    r[0] & 8 ? slot + 1 : slot, r[5], rec,
				    s + g.lay.slot_hdr_bytes);
		w[slot] = (struct wrote){ .set = 1,
					  .sound = !(r[0] & 0x18) && r[5] && rec->puid < rec->uid,
					  .generation = r[5],
					  .rec = *rec };
		memcpy(w[slot].hdr, s, g.lay.slot_hdr_bytes);
		if (r[7])
			s[r[6] * 2u] ^= r[7];
		if (r[0] & 0x80)
			s[g.lay.slot_hdr_bytes + r[6] * 24u] ^= r[7] | 1u;
		memcpy(w[slot].tokens, rec->tokens, sizeof(w[slot].tokens));
		w[slot].rec.tokens = NULL;
		n_made++;
	}
	return off;
}

/* The file image from the input; its length (a cut file is shorter). */
static size_t build_image(const uint8_t *d, size_t size, struct wrote *w)
{
	uint8_t mode = size ? d[0] : 0;
	size_t len = g.lay.file_bytes;

	memset(g.img, 0, len);
	memset(w, 0, NSLOT * sizeof(*w));
	if (mode & 0x80) {
		if (size > 3)
			memcpy(g.img, d + 3, size - 3 < len ? size - 3 : len);
	} else {
		struct kvp_tier_layout hl = g.lay;
		uint8_t fp[16];
		size_t off;

		memcpy(fp, g.f.fp, 16);
		if (mode & 0x20)
			fp[0] ^= 1;
		if (kvp_tier_layout_init(&hl, &g.f.shape, fp,
					 KVP_TIER_FILE_REGION +
						 (mode & 0x10 ? (size > 1 ? d[1] % 16u : 0) + 1 :
								NSLOT) *
							 g.lay.slot_bytes) < 0)
			abort();
		kvp_tier_file_encode(g.img, &hl, TIER_ID, 0x5eed);
		off = build_records(d, size, w);
		for (; off + 3 <= size; off += 3) {
			size_t at = ((size_t)d[off] | (size_t)d[off + 1] << 8) * 2u;

			if (at < len)
				g.img[at] ^= d[off + 2];
		}
	}
	if (mode & 0x40) {
		size_t cut = (size > 2 ? d[2] : 0) * 512u;

		if (cut < len)
			len = cut;
	}
	memset(g.img + len, 0, g.lay.file_bytes - len); /* the image is the file */
	return len;
}

static void write_file(size_t len)
{
	int fd = open(g.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0 || write(fd, g.img, len) != (ssize_t)len || close(fd) < 0)
		abort(); /* the harness's own file: not the code under test */
}

/*
 * What the scan must make of slot @s of the (damaged, cut) image, given whether the file
 * header is sound and of our layout: a sound record whose header region is as encoded
 * must be found (also its K/V, in a full scan); anything else must not.  Only bytes a
 * reader has no sum over (the K/V's padding to 4 KiB) leave it open in a full scan.
 */
static int expect(const struct wrote *w, uint32_t s, int file_ok, int full)
{
	const uint8_t *p = g.img + kvp_tier_slot_offset(&g.lay, s);
	const uint8_t *kv = p + g.lay.slot_hdr_bytes;
	uint8_t want[HDR_MAX * 2];
	int pad_zero = 1;

	if (!file_ok || !w->set || !w->sound || memcmp(p, w->hdr, g.lay.slot_hdr_bytes))
		return MUST_NOT;
	if (!full)
		return MUST;
	if (g.lay.block_bytes > sizeof(want))
		abort();
	kv_pattern(want, g.lay.block_bytes, w->rec.hash);
	if (memcmp(kv, want, g.lay.block_bytes))
		return MUST_NOT;
	for (size_t k = g.lay.block_bytes; k < g.lay.slot_bytes - g.lay.slot_hdr_bytes; k++)
		pad_zero &= !kv[k];
	return pad_zero ? MUST : MAY;
}

/* Does the file hold exactly the image's first @len bytes? */
static int file_is(size_t len)
{
	int fd = open(g.path, O_RDONLY | O_CLOEXEC);
	uint8_t *buf = malloc(len + 1);
	ssize_t n = fd < 0 || !buf ? -1 : pread(fd, buf, len + 1, 0);
	int same = n == (ssize_t)len && !memcmp(buf, g.img, len);

	if (fd >= 0)
		close(fd);
	free(buf);
	return same;
}

static int wait_for(struct kvp_tier *t, uint64_t cookie)
{
	struct kvp_tier_done d[4];

	for (;;) {
		int n = kvp_tier_wait(t, d, 4);

		if (n <= 0)
			__builtin_trap(); /* nothing in flight: the operation was lost */
		for (int i = 0; i < n; i++)
			if (d[i].cookie == cookie)
				return d[i].result;
	}
}

static const struct found *by_uid(const struct found *fd, uint32_t n, uint64_t uid)
{
	const struct found *best = NULL;

	for (uint32_t i = 0; i < n; i++)
		if (fd[i].rec.uid == uid && (!best || fd[i].generation > best->generation))
			best = &fd[i];
	return best;
}

/*
 * The prompt of found block @leaf (its ancestors' tokens first, then one more token so
 * the lookup may cover every block); its depth, or 0 when its chain does not reach a
 * first block among the found ones.
 */
static uint32_t prompt_of(const struct found *fd, uint32_t n, const struct found *leaf,
			  uint32_t *tokens, const struct found **chain)
{
	const struct found *c = leaf;
	uint32_t depth = 0;

	while (c && depth < MAXDEPTH - 1) {
		chain[depth++] = c;
		if (!c->rec.puid)
			break;
		c = by_uid(fd, n, c->rec.puid);
	}
	if (!c || c->rec.puid)
		return 0;
	for (uint32_t i = 0; i < depth; i++) {
		const struct found *x = chain[depth - 1 - i];

		memcpy(tokens + i * BLKFIX_BT, x->tokens, sizeof(x->tokens));
	}
	for (uint32_t i = 0; i < depth / 2; i++) {
		const struct found *x = chain[i];

		chain[i] = chain[depth - 1 - i];
		chain[depth - 1 - i] = x;
	}
	tokens[depth * BLKFIX_BT] = 1;
	return depth;
}

/* Look the prompt of every found block up; check each hit (see the top). */
static void check_lookups(struct kvp_tier *t, struct kvp_index *idx, const struct found *fd,
			  uint32_t n, int whole, uint64_t tier_id)
{
	const size_t stride = kvp_pool_geom(g.pool)->block_stride;
	uint32_t tokens[MAXDEPTH * BLKFIX_BT + 1];
	const struct found *chain[MAXDEPTH];
	struct kvp_index_disk_hit hits[MAXDEPTH];

	for (uint32_t i = 0; i < n; i++) {
		uint32_t depth = prompt_of(fd, n, &fd[i], tokens, chain);
		struct kvp_h128 h;
		int nh;

		if (!depth)
			continue;
		nh = kvp_index_lookup_disk(idx, &fd[i].rec.key, tokens, depth * BLKFIX_BT + 1, 0,
					   KVP_BLOCK_NONE, hits, MAXDEPTH);
		if (nh < 0 || (uint32_t)nh > depth || (whole && (uint32_t)nh != depth))
			__builtin_trap();
		h = fd[i].rec.key.seed;
		for (int j = 0; j < nh; j++) {
			const uint8_t *s = g.img + kvp_tier_slot_offset(&g.lay, hits[j].slot);
			uint32_t tk[BLKFIX_BT];
			struct kvp_tier_blk_info info;
			uint8_t *blk = kvp_pool_data(g.pool, NSLOT);
			int r;

			h = kvp_chain_hash(h, tokens + j * BLKFIX_BT, BLKFIX_BT);
			if (hits[j].slot >= NSLOT ||
			    kvp_tier_blk_parse(s, g.lay.slot_hdr_bytes, &g.lay, tier_id,
					       hits[j].slot, tk, &info) ||
			    info.rec.uid != hits[j].uid || info.rec.hash.lo != h.lo ||
			    info.rec.hash.hi != h.hi)
				__builtin_trap(); /* the index points at another block */
			memset(blk, 0xa5, stride);
			r = kvp_tier_read(t, hits[j].slot, hits[j].uid, NSLOT, 7);
			if (r == 0)
				r = wait_for(t, 7);
			if (r == -EBADMSG || r == -ENODEV) {
				/* K/V damaged (a headers-only scan cannot tell): the slot is
				 * dropped, so later prompts through it stop short */
				whole = 0;
				continue;
			}
			if (r == -ESTALE || r == -EBUSY)
				continue; /* dropped by an earlier read's failed check */
			if (r)
				__builtin_trap();
			if (memcmp(blk, s + g.lay.slot_hdr_bytes, g.lay.block_bytes))
				__builtin_trap(); /* served K/V that is not the file's */
			for (size_t k = g.lay.block_bytes; k < stride; k++)
				if (blk[k])
					__builtin_trap();
		}
	}
}

/*
 * Write the tier full of new blocks (pool blocks 0..NSLOT-1, as many in flight as the
 * queue takes): every rebuilt entry is evicted from the index.
 */
static void fill_tier(struct kvp_tier *t, struct kvp_index *idx, uint64_t uid_floor)
{
	uint32_t tokens[NSLOT][BLKFIX_BT], done = 0;
	struct kvp_tier_done d[4];
	struct kvp_index_stats ist;
	struct kvp_tier_stats st;

	for (uint32_t i = 0; i < NSLOT;) {
		struct kvp_index_rec rec = { .key = g.f.key, .uid = uid_floor + 1 + i };
		int r;

		for (uint32_t k = 0; k < BLKFIX_BT; k++)
			tokens[i][k] = 90000u + i * BLKFIX_BT + k;
		rec.tokens = tokens[i];
		rec.phash = rec.key.seed;
		rec.hash = kvp_chain_hash(rec.phash, tokens[i], BLKFIX_BT);
		kv_pattern(kvp_pool_data(g.pool, i), g.lay.block_bytes, rec.hash);
		r = kvp_tier_write(t, &rec, i, 100 + i);
		if (r == -ENODEV)
			return;
		if (r >= 0) {
			i++;
			continue;
		}
		if (r != -EBUSY)
			__builtin_trap();   /* a sound tier's write into a free or evictable slot */
		r = kvp_tier_wait(t, d, 4); /* the queue is full: reap, then retry */
		for (int k = 0; k < r; k++, done++)
			if (d[k].result)
				__builtin_trap();
	}
	while (done < NSLOT) {
		int r = kvp_tier_wait(t, d, 4);

		if (r <= 0)
			__builtin_trap();
		for (int k = 0; k < r; k++, done++)
			if (d[k].result)
				__builtin_trap();
	}
	kvp_tier_stats(t, &st);
	kvp_index_stats(idx, &ist);
	if (!st.degraded && (ist.disk_entries || st.blocks != NSLOT))
		__builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct wrote w[NSLOT];
	static struct found fd[NSLOT];
	uint8_t mode = size ? data[0] : 0;
	struct kvp_tier_config cfg = { .max_bytes = 0,
				       .queue_depth = 1u + (mode >> 2 & 3u),
				       .flags = (mode & 1 ? KVP_TIER_SCAN_FULL : 0) |
						(mode & 2 ? KVP_TIER_FIXED_BUFS : 0),
				       .lock_wait_ms = 1 };
	struct kvp_tier_file_hdr fh;
	struct kvp_tier_stats st;
	struct kvp_index_stats ist;
	struct kvp_index *idx;
	struct kvp_tier *t;
	uint32_t n;
	uint8_t at[NSLOT] = { 0 }; /* blocks found per slot */
	size_t len;
	int sound, hr;

	if (!g.pool)
		init();
	len = build_image(data, size, w);
	write_file(len);
	cfg.path = g.path;
	cfg.max_bytes = g.lay.file_bytes;
	memcpy(cfg.model_fp, g.f.fp, 16);
	/* what the file header says, as the tier should read it */
	hr = kvp_tier_file_parse(g.img, KVP_TIER_FILE_REGION, &fh); /* zeros past a cut */
	sound = hr == 0 && kvp_tier_file_compatible(&fh, &g.lay);

	if (kvp_tier_open(&t, &cfg, g.pool) || kvp_index_new(&idx, g.pool))
		__builtin_trap(); /* a file never fails the call: the tier is off instead */
	kvp_tier_stats(t, &st);
	n = kvp_tier_n_found(t);
	if (!st.degraded != !kvp_tier_error(t)[0])
		__builtin_trap(); /* off, and saying why; or on and silent */
	if (hr == -EMEDIUMTYPE && (st.degraded != -EMEDIUMTYPE || !file_is(len)))
		__builtin_trap(); /* not a tier file: never touched */
	if (st.scan_slots && !st.degraded && st.scan_slots != NSLOT)
		__builtin_trap();
	if (st.scan_valid + st.scan_empty + st.scan_corrupt + st.scan_foreign != st.scan_slots ||
	    n > NSLOT || (!st.degraded && n != st.scan_valid) || (n && !sound))
		__builtin_trap();
	for (uint32_t i = 0; i < n; i++) {
		const struct kvp_tier_found *x = kvp_tier_found(t, i);
		const struct wrote *y = x->slot < NSLOT ? &w[x->slot] : NULL;

		fd[i] = (struct found){ .slot = x->slot,
					.generation = x->generation,
					.rec = x->rec };
		memcpy(fd[i].tokens, x->rec.tokens, sizeof(fd[i].tokens));
		fd[i].rec.tokens = fd[i].tokens;
		if (!y || (!(mode & 0x80) &&
			   (!y->set || y->generation != x->generation ||
			    memcmp(&y->rec.hash, &x->rec.hash, sizeof(x->rec.hash)) ||
			    memcmp(&y->rec.phash, &x->rec.phash, sizeof(x->rec.phash)) ||
			    y->rec.uid != x->rec.uid || y->rec.puid != x->rec.puid ||
			    memcmp(&y->rec.key, &x->rec.key, sizeof(x->rec.key)) ||
			    memcmp(y->tokens, x->rec.tokens, sizeof(y->tokens)))))
			__builtin_trap(); /* found a block the file does not hold there */
		if (x->slot < NSLOT)
			at[x->slot]++;
	}
	for (uint32_t s = 0; s < NSLOT && !(mode & 0x80) && !st.degraded; s++) {
		int e = expect(&w[s], s, sound && !st.reset, (mode & 1) != 0);

		if (at[s] > 1 || (e == MUST && !at[s]) || (e == MUST_NOT && at[s]))
			__builtin_trap(); /* a sound block lost, or a refused one kept */
	}
	if (kvp_tier_attach_index(t, idx))
		__builtin_trap();
	kvp_tier_stats(t, &st);
	kvp_index_stats(idx, &ist);
	if (!st.degraded && (st.rebuilt + st.orphans + st.duplicates != n ||
			     ist.disk_entries != st.rebuilt || st.blocks != st.rebuilt))
		__builtin_trap();
	if (!st.degraded && n) {
		check_lookups(t, idx, fd, n, !st.orphans && !st.duplicates, fh.tier_id);
		fill_tier(t, idx, kvp_tier_uid_floor(t));
	}
	kvp_tier_free(t);
	kvp_index_free(idx);
	return 0;
}
