/* SPDX-License-Identifier: MIT */
/*
 * tier.c - the disk tier (see tier.h): slot allocator and LRU, io_uring O_DIRECT I/O
 * between slots and pool blocks, the rebuild scan, and turning off cleanly on errors.
 *
 * Invariants:
 *   - a slot is on the free list iff FREE; in the LRU iff VALID;
 *   - a VALID slot's uid and hash are those of the sound block on disk in it;
 *   - readers counts the reads in flight of a slot; a VALID slot with readers is never
 *     taken for a write, and one marked drop (it failed a check, or the tier degraded)
 *     is dropped when its last read completes;
 *   - an io entry is free iff parts == 0; a CQE is matched to its entry by index and
 *     generation (user_data), so nothing stale is ever taken for a live operation;
 *   - st.blocks == number of VALID slots; in_flight == number of busy io entries.
 *
 * Thread: one at a time, no locks (tier.h).
 */
#include "shm/tier.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "shm/geom.h"
#include "util/fault.h"
#include "util/samples.h"
#include "util/time.h"

#define NONE UINT32_MAX
#define SCAN_BUF_BYTES (32u << 20)     /* read buffers of the rebuild scan, at most */
#define FIXED_CHUNK_BYTES (1ull << 30) /* io_uring's limit per registered buffer */

enum { SLOT_FREE = 0, SLOT_WRITING, SLOT_VALID };

struct slot {
	uint64_t uid;
	struct kvp_h128 hash;
	uint32_t prev; /* LRU toward colder, NONE at the head */
	uint32_t next; /* LRU toward warmer; free list link when FREE */
	uint16_t readers;
	uint8_t state;
	uint8_t drop;
};

/* One operation in flight: a block write or read (one SQE, or two with fixed buffers). */
struct tio {
	uint64_t cookie;
	uint64_t uid;
	uint64_t t0;  /* submit time, ns */
	uint32_t gen; /* bumped at each use: matches CQEs to this use */
	uint32_t slot;
	uint32_t block;
	uint32_t next_free;
	uint32_t len[2]; /* bytes each part must move */
	int32_t res;	 /* first error of its parts */
	uint8_t op;
	uint8_t parts;	 /* CQEs still to come; 0 = free */
	uint8_t retried; /* times a read was read again after failing its check */
	uint8_t *hdr;	 /* its header region buffer (4 KiB aligned) */
	struct iovec iov[2];
};

struct kvp_tier {
	char *path;
	uint32_t flags;
	struct kvp_pool *pool;
	struct kvp_tier_layout lay;
	uint64_t tier_id;
	uint64_t hash_seed;
	int fd;
	int ring_ok;
	struct io_uring ring;
	int fd_ref;		/* 0 (registered file) or the fd */
	unsigned int sqe_flags; /* IOSQE_FIXED_FILE when registered */
	int fixed_bufs;
	uint32_t blocks_per_buf; /* pool blocks per registered buffer */
	uint32_t qd;
	struct tio *io;
	uint32_t io_free;
	uint32_t in_flight;
	uint8_t *hdr_arena; /* qd header regions */
	struct slot *slots;
	uint32_t free_head;
	uint32_t lru_head, lru_tail; /* coldest, warmest */
	uint64_t next_gen;
	uint64_t uid_floor;
	kvp_tier_drop_fn drop;
	void *drop_ctx;
	struct kvp_tier_found *found;
	uint32_t *found_tokens;
	uint32_t n_found, cap_found;
	struct kvp_samples lat; /* reload latencies, ns (over lat_buf) */
	double lat_buf[KVP_TIER_LAT_SAMPLES];
	uint32_t debug_lose_reads; /* test hook: completed reads to spoil */
	struct kvp_tier_stats st;
	char err[320];
};

static uint64_t random_u64(void)
{
	uint64_t v = 0;
	struct timespec ts;

	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v) && v)
		return v;
	/* early boot, no entropy yet: unique enough for an incarnation id */
	clock_gettime(CLOCK_REALTIME, &ts);
	v ^= (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 40;
	return v ? v : 1;
}

static uint32_t data_len(const struct kvp_tier *t)
{
	return (uint32_t)(t->lay.slot_bytes - t->lay.slot_hdr_bytes);
}

/* ---- slots: free list and LRU ---- */

static void free_push(struct kvp_tier *t, uint32_t s)
{
	t->slots[s].state = SLOT_FREE;
	t->slots[s].drop = 0;
	t->slots[s].uid = 0;
	t->slots[s].next = t->free_head;
	t->free_head = s;
}

static void lru_append(struct kvp_tier *t, uint32_t s)
{
	struct slot *sl = &t->slots[s];

	sl->prev = t->lru_tail;
	sl->next = NONE;
	if (t->lru_tail != NONE)
		t->slots[t->lru_tail].next = s;
	else
		t->lru_head = s;
	t->lru_tail = s;
}

static void lru_remove(struct kvp_tier *t, uint32_t s)
{
	struct slot *sl = &t->slots[s];

	if (sl->prev != NONE)
		t->slots[sl->prev].next = sl->next;
	else
		t->lru_head = sl->next;
	if (sl->next != NONE)
		t->slots[sl->next].prev = sl->prev;
	else
		t->lru_tail = sl->prev;
	sl->prev = sl->next = NONE;
}

/* A VALID slot becomes FREE; @notify: tell the owner (not for kvp_tier_release()). */
static void slot_drop(struct kvp_tier *t, uint32_t s, int notify)
{
	uint64_t uid = t->slots[s].uid;

	lru_remove(t, s);
	free_push(t, s);
	t->st.blocks--;
	if (notify && t->drop)
		t->drop(t->drop_ctx, s, uid);
}

/* A slot to write into: a free one, else the coldest sound block nobody reads. */
static uint32_t slot_take(struct kvp_tier *t)
{
	uint32_t s = t->free_head;

	if (s != NONE) {
		t->free_head = t->slots[s].next;
		return s;
	}
	for (s = t->lru_head; s != NONE; s = t->slots[s].next)
		if (!t->slots[s].readers && !t->slots[s].drop)
			break;
	if (s == NONE)
		return NONE;
	slot_drop(t, s, 1);
	t->st.evictions++;
	t->free_head = t->slots[s].next;
	return s;
}

/* ---- degrading ---- */

static void set_error(struct kvp_tier *t, int err, const char *what)
{
	t->st.errors++;
	if (t->st.degraded)
		return;
	t->st.degraded = err;
	snprintf(t->err, sizeof(t->err), "tier: %s %s: %s; memory-only", what, t->path,
		 strerror(-err));
}

/* Turn the tier off: every sound block is dropped (at its last read if being read). */
static void degrade(struct kvp_tier *t, int err, const char *what)
{
	int was = t->st.degraded;

	set_error(t, err, what);
	if (was || !t->slots)
		return;
	for (uint32_t s = 0; s < t->lay.n_slots; s++) {
		struct slot *sl = &t->slots[s];

		if (sl->state != SLOT_VALID)
			continue;
		if (sl->readers)
			sl->drop = 1;
		else
			slot_drop(t, s, 1);
	}
}

/* ---- submission ---- */

static struct tio *io_get(struct kvp_tier *t)
{
	struct tio *io;

	if (t->io_free == NONE)
		return NULL;
	io = &t->io[t->io_free];
	t->io_free = io->next_free;
	io->gen++;
	io->res = 0;
	io->retried = 0;
	return io;
}

static void io_put(struct kvp_tier *t, struct tio *io)
{
	io->parts = 0;
	io->next_free = t->io_free;
	t->io_free = (uint32_t)(io - t->io);
}

static uint64_t ud_pack(const struct kvp_tier *t, const struct tio *io, uint32_t part)
{
	return (uint64_t)io->gen << 32 | part << 16 | (uint32_t)(io - t->io);
}

static struct io_uring_sqe *sqe_get(struct kvp_tier *t)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);

	if (!sqe) {
		/* the ring has 2 * qd entries and we submit at once: only leftovers of a
		 * short submit can fill it; push them and try again */
		io_uring_submit(&t->ring);
		sqe = io_uring_get_sqe(&t->ring);
	}
	return sqe;
}

/* Queue the header region and the K/V of @io's slot, from or to pool memory @data. */
static int submit_rw(struct kvp_tier *t, struct tio *io, uint8_t *data)
{
	uint64_t off = kvp_tier_slot_offset(&t->lay, io->slot);
	uint32_t hb = t->lay.slot_hdr_bytes, db = data_len(t);
	int wr = io->op == KVP_TIER_OP_WRITE;
	struct io_uring_sqe *sqe;
	int r;

	if (t->fixed_bufs) {
		struct io_uring_sqe *s2;
		int bi = 1 + (int)(io->block / t->blocks_per_buf);

		sqe = sqe_get(t);
		s2 = sqe ? sqe_get(t) : NULL;
		if (!sqe || !s2)
			return -EBUSY;
		if (wr) {
			io_uring_prep_write_fixed(sqe, t->fd_ref, io->hdr, hb, off, 0);
			io_uring_prep_write_fixed(s2, t->fd_ref, data, db, off + hb, bi);
		} else {
			io_uring_prep_read_fixed(sqe, t->fd_ref, io->hdr, hb, off, 0);
			io_uring_prep_read_fixed(s2, t->fd_ref, data, db, off + hb, bi);
		}
		sqe->flags |= t->sqe_flags;
		s2->flags |= t->sqe_flags;
		io_uring_sqe_set_data64(sqe, ud_pack(t, io, 0));
		io_uring_sqe_set_data64(s2, ud_pack(t, io, 1));
		io->len[0] = hb;
		io->len[1] = db;
		io->parts = 2;
	} else {
		sqe = sqe_get(t);
		if (!sqe)
			return -EBUSY;
		io->iov[0] = (struct iovec){ io->hdr, hb };
		io->iov[1] = (struct iovec){ data, db };
		if (wr)
			io_uring_prep_writev(sqe, t->fd_ref, io->iov, 2, off);
		else
			io_uring_prep_readv(sqe, t->fd_ref, io->iov, 2, off);
		sqe->flags |= t->sqe_flags;
		io_uring_sqe_set_data64(sqe, ud_pack(t, io, 0));
		io->len[0] = hb + db;
		io->parts = 1;
	}
	t->in_flight++;
	r = io_uring_submit(&t->ring);
	/* the SQEs are in the ring either way: a failed submit is retried by the next one
	 * (or by a wait); only a ring that refuses everything is an error */
	if (r < 0 && r != -EAGAIN && r != -EBUSY && r != -EINTR)
		set_error(t, r, "submit on");
	return 0;
}

int kvp_tier_write(struct kvp_tier *t, const struct kvp_index_rec *rec, uint32_t block,
		   uint64_t cookie)
{
	struct tio *io;
	struct slot *sl;
	uint8_t *data;
	uint32_t s;

	if (!t || !rec || !rec->tokens || !rec->uid || block >= kvp_pool_n_blocks(t->pool))
		return -EINVAL;
	if (t->st.degraded)
		return -ENODEV;
	if (t->io_free == NONE)
		return -EBUSY;
	s = slot_take(t);
	if (s == NONE)
		return -EBUSY;
	io = io_get(t);
	data = kvp_pool_data(t->pool, block);
	sl = &t->slots[s];
	sl->state = SLOT_WRITING;
	sl->uid = rec->uid;
	sl->hash = rec->hash;
	sl->readers = 0;
	sl->drop = 0;
	io->op = KVP_TIER_OP_WRITE;
	io->slot = s;
	io->block = block;
	io->cookie = cookie;
	io->uid = rec->uid;
	io->t0 = kvp_now_ns();
	kvp_tier_blk_encode(io->hdr, &t->lay, t->tier_id, s, t->next_gen++, rec, data);
	if (submit_rw(t, io, data) < 0) {
		free_push(t, s);
		io_put(t, io);
		return -EBUSY;
	}
	return (int)s;
}

int kvp_tier_read(struct kvp_tier *t, uint32_t slot, uint64_t uid, uint32_t block, uint64_t cookie)
{
	struct tio *io;
	struct slot *sl;

	if (!t || block >= kvp_pool_n_blocks(t->pool) || slot >= t->lay.n_slots)
		return -EINVAL;
	if (t->st.degraded)
		return -ENODEV;
	sl = &t->slots[slot];
	if (sl->state != SLOT_VALID || sl->uid != uid || sl->drop)
		return -ESTALE;
	if (sl->readers == UINT16_MAX || t->io_free == NONE)
		return -EBUSY;
	io = io_get(t);
	io->op = KVP_TIER_OP_READ;
	io->slot = slot;
	io->block = block;
	io->cookie = cookie;
	io->uid = uid;
	io->t0 = kvp_now_ns();
	if (submit_rw(t, io, kvp_pool_data(t->pool, block)) < 0) {
		io_put(t, io);
		return -EBUSY;
	}
	sl->readers++;
	/* most recently used: the last to be evicted */
	lru_remove(t, slot);
	lru_append(t, slot);
	return 0;
}

/* ---- completion ---- */

/* Is the block just read into @io's buffers the one the slot holds, sound? */
static int check_read(struct kvp_tier *t, struct tio *io)
{
	uint32_t tokens[KVP_INDEX_MAX_BLOCK_TOKENS];
	const struct slot *sl = &t->slots[io->slot];
	struct kvp_tier_blk_info info;
	uint8_t *data = kvp_pool_data(t->pool, io->block);
	int r;

	if (t->debug_lose_reads) {
		/* as if the K/V never arrived: the block keeps (a changed copy of) old bytes */
		t->debug_lose_reads--;
		data[t->lay.block_bytes / 2] ^= 0x5a;
	}

	r = kvp_tier_blk_parse(io->hdr, t->lay.slot_hdr_bytes, &t->lay, t->tier_id, io->slot,
			       tokens, &info);
	if (r < 0)
		return -EBADMSG;
	if (info.rec.uid != sl->uid || info.rec.hash.lo != sl->hash.lo ||
	    info.rec.hash.hi != sl->hash.hi)
		return -EBADMSG;
	r = kvp_tier_blk_verify(io->hdr, &t->lay, &info, data);
	if (r < 0)
		return r;
	/* the padding past the K/V came from the file: never show it in the pool */
	memset(data + t->lay.block_bytes, 0, data_len(t) - t->lay.block_bytes);
	return 0;
}

static void lat_sample(struct kvp_tier *t, uint64_t ns)
{
	kvp_samples_add(&t->lat, (double)ns);
}

/* An operation's last part completed: account for it and fill @d (return 1), or, for a
 * read queued again, return 0. */
static int finish(struct kvp_tier *t, struct tio *io, struct kvp_tier_done *d)
{
	struct slot *sl = &t->slots[io->slot];
	int res = io->res;

	t->in_flight--;
	if (io->op == KVP_TIER_OP_WRITE) {
		if (res < 0) {
			free_push(t, io->slot);
			degrade(t, res, "write to");
		} else if (t->st.degraded) {
			free_push(t, io->slot); /* landed after the tier went off */
			res = -ENODEV;
		} else {
			sl->state = SLOT_VALID;
			lru_append(t, io->slot);
			t->st.blocks++;
			t->st.writes++;
			t->st.write_bytes += t->lay.slot_bytes;
		}
	} else {
		if (res >= 0) {
			res = check_read(t, io);
			/*
			 * Read it again before believing the disk: on some virtual disks an
			 * O_DIRECT read into 4 KiB pages at queue depth > 1 now and then
			 * completes in full without its data arriving, in bursts (docs/tier.md),
			 * and the copy on disk is fine.  A torn or corrupt block fails every
			 * time.
			 */
			if (res < 0 && io->retried < KVP_TIER_REREADS && !t->st.degraded &&
			    !sl->drop) {
				io->retried++;
				io->gen++;
				io->res = 0;
				if (submit_rw(t, io, kvp_pool_data(t->pool, io->block)) == 0)
					return 0;
			}
			if (res < 0) {
				t->st.checksum_failures++;
				sl->drop = 1;
			} else {
				t->st.reads++;
				t->st.read_bytes += t->lay.slot_bytes;
				t->st.reread_recovered += io->retried != 0;
				lat_sample(t, kvp_now_ns() - io->t0);
			}
		} else {
			degrade(t, res, "read from");
		}
		sl->readers--;
		if (sl->drop && !sl->readers && sl->state == SLOT_VALID)
			slot_drop(t, io->slot, 1);
	}
	*d = (struct kvp_tier_done){ .cookie = io->cookie,
				     .uid = io->uid,
				     .op = io->op,
				     .slot = io->slot,
				     .block = io->block,
				     .result = res };
	io_put(t, io);
	return 1;
}

/* One CQE; returns 1 when it finished an operation (filled @d). */
static int reap_one(struct kvp_tier *t, const struct io_uring_cqe *cqe, struct kvp_tier_done *d)
{
	uint64_t ud = io_uring_cqe_get_data64(cqe);
	uint32_t i = (uint32_t)(ud & 0xffff), part = (uint32_t)(ud >> 16) & 1;
	struct tio *io;
	int res = cqe->res;

	if (i >= t->qd)
		return 0;
	io = &t->io[i];
	if (!io->parts || io->gen != (uint32_t)(ud >> 32))
		return 0; /* not ours (stale): nothing to do */
	/* util/fault.h: a test's EIO or short transfer in place of the device's result */
	res = KVP_FAULT_RES("tier.cqe", res);
	if (res >= 0 && (uint32_t)res != io->len[part])
		res = -EIO; /* short: the file shrank under us, or the device lied */
	if (res < 0 && !io->res)
		io->res = res;
	if (--io->parts)
		return 0;
	return finish(t, io, d);
}

static int reap(struct kvp_tier *t, struct kvp_tier_done *done, uint32_t max)
{
	struct io_uring_cqe *cqe;
	int n = 0;

	while ((uint32_t)n < max && io_uring_peek_cqe(&t->ring, &cqe) == 0) {
		n += reap_one(t, cqe, &done[n]);
		io_uring_cqe_seen(&t->ring, cqe);
	}
	return n;
}

int kvp_tier_poll(struct kvp_tier *t, struct kvp_tier_done *done, uint32_t max)
{
	if (!t || !t->ring_ok || !t->in_flight || !max)
		return 0;
	return reap(t, done, max);
}

int kvp_tier_wait(struct kvp_tier *t, struct kvp_tier_done *done, uint32_t max)
{
	struct io_uring_cqe *cqe;
	int n;

	if (!t || !t->ring_ok || !max)
		return 0;
	while (t->in_flight) {
		n = reap(t, done, max);
		if (n)
			return n;
		/* submits leftovers too; EINTR (a signal) just waits again */
		n = io_uring_submit_and_wait(&t->ring, 1);
		if (n < 0 && n != -EINTR && n != -EAGAIN && n != -EBUSY &&
		    io_uring_peek_cqe(&t->ring, &cqe) != 0) {
			/* the ring itself is broken: nothing will ever complete */
			degrade(t, n, "wait on");
			return 0;
		}
	}
	return 0;
}

int kvp_tier_release(struct kvp_tier *t, uint32_t slot)
{
	if (!t || slot >= t->lay.n_slots || t->slots[slot].state != SLOT_VALID)
		return -EINVAL;
	if (t->slots[slot].readers)
		return -EBUSY;
	slot_drop(t, slot, 0);
	return 0;
}

/* ---- open: file, header, ring, scan ---- */

/* Write the file header for the current ids and layout, durably. */
static int write_file_header(struct kvp_tier *t)
{
	uint8_t *buf = aligned_alloc(KVP_TIER_ALIGN, KVP_TIER_FILE_REGION);
	ssize_t n;
	int r = 0;

	if (!buf)
		return -ENOMEM;
	kvp_tier_file_encode(buf, &t->lay, t->tier_id, t->hash_seed);
	n = pwrite(t->fd, buf, KVP_TIER_FILE_REGION, 0);
	if (n < 0)
		r = -errno;
	else if (n != KVP_TIER_FILE_REGION)
		r = -EIO;
	else if (fdatasync(t->fd) < 0)
		r = -errno;
	free(buf);
	return r;
}

/*
 * One daemon per tier file.  The lock belongs to the open file, which a dead owner's
 * io_uring keeps until its last write landed: poll for it a while rather than fail.
 */
static int lock_file(int fd, uint32_t wait_ms)
{
	uint64_t end = kvp_now_ns() + (uint64_t)wait_ms * 1000000ull;

	for (;;) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		if (errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		if (kvp_now_ns() >= end)
			return -EBUSY;
		usleep(10000);
	}
}

/* Refuse @st unless it is a regular file of the daemon's euid with one name. */
static int check_file(struct kvp_tier *t, const struct stat *st);

int kvp_tier_check_dir_stat(const char *dir, const struct stat *st, char *err, size_t cap)
{
	uid_t me = geteuid();

	if (!S_ISDIR(st->st_mode)) {
		snprintf(err, cap, "tier: %s is not a directory; refused", dir);
		return -ENOTDIR;
	}
	if (st->st_uid != me || (st->st_mode & (S_IWGRP | S_IWOTH))) {
		snprintf(err, cap,
			 "tier: directory %s (mode %04o, owner uid %u) must be owned by the "
			 "daemon's uid %u and writable by nobody else (another user could plant a "
			 "link there); refused",
			 dir, (unsigned int)(st->st_mode & 07777), (unsigned int)st->st_uid,
			 (unsigned int)me);
		return -EPERM;
	}
	return 0;
}

int kvp_tier_check_dir(const char *path, char *err, size_t cap)
{
	const char *slash = strrchr(path, '/');
	char dir[4096];
	struct stat st;

	if (snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1,
		     slash ? path : ".") >= (int)sizeof(dir))
		return -ENAMETOOLONG;
	if (!*dir)
		strcpy(dir, "/");
	if (stat(dir, &st) < 0)
		return -errno;
	return kvp_tier_check_dir_stat(dir, &st, err, cap);
}

/* Refuse with @fmt's sentence as the tier's error (off from now on); return @err. */
static int refuse(struct kvp_tier *t, int err, const char *fmt, ...)
{
	va_list ap;

	t->st.errors++;
	if (t->st.degraded)
		return err;
	t->st.degraded = err;
	va_start(ap, fmt);
	vsnprintf(t->err, sizeof(t->err), fmt, ap);
	va_end(ap);
	return err;
}

static int check_file(struct kvp_tier *t, const struct stat *st)
{
	if (S_ISLNK(st->st_mode))
		return refuse(t, -ELOOP,
			      "tier: %s is a symbolic link: refused (a tier file is never "
			      "followed); memory-only",
			      t->path);
	if (!S_ISREG(st->st_mode))
		return refuse(t, -EINVAL,
			      "tier: %s is not a regular file (mode %06o): refused; "
			      "memory-only",
			      t->path, (unsigned int)st->st_mode);
	if (st->st_uid != geteuid())
		return refuse(t, -EPERM,
			      "tier: %s is owned by uid %u, not the daemon's uid %u: refused; "
			      "memory-only",
			      t->path, (unsigned int)st->st_uid, (unsigned int)geteuid());
	if (st->st_nlink > 1)
		return refuse(t, -EMLINK,
			      "tier: %s has %lu names (hard links): refused; memory-only", t->path,
			      (unsigned long)st->st_nlink);
	return 0;
}

/*
 * Open (or create) the tier file, trusting nothing on the way: its directory is opened
 * and checked (kvp_tier_check_dir_stat()) through the fd the file is then opened at,
 * so the directory checked is the one used; the file is never followed if a link
 * (O_NOFOLLOW), and an existing one must be a regular file of ours with no other name
 * (checked before the open, so no device or FIFO is ever opened, and again after).
 * Return: the fd, or -errno with the tier off, saying why.
 */
static int open_file(struct kvp_tier *t)
{
	const char *slash = strrchr(t->path, '/');
	const char *base = slash ? slash + 1 : t->path;
	char dir[4096], why[sizeof(t->err)];
	struct stat st;
	int dfd, fd, r;

	if (snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - t->path) : 1,
		     slash ? t->path : ".") >= (int)sizeof(dir) ||
	    !*base) {
		set_error(t, -EINVAL, "no file name in");
		return -EINVAL;
	}
	if (!*dir)
		strcpy(dir, "/");
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		r = -errno;
		set_error(t, r, "open the directory of");
		return r;
	}
	if (fstat(dfd, &st) < 0) {
		r = -errno;
		set_error(t, r, "stat the directory of");
		goto out;
	}
	r = kvp_tier_check_dir_stat(dir, &st, why, sizeof(why));
	if (r < 0) {
		refuse(t, r, "%s; memory-only", why);
		goto out;
	}
	if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		r = check_file(t, &st);
		if (r < 0)
			goto out;
	}
	fd = openat(dfd, base, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		r = -errno;
		if (r == -ELOOP)
			refuse(t, r,
			       "tier: %s is a symbolic link: refused (a tier file is never "
			       "followed); memory-only",
			       t->path);
		else
			set_error(t, r, "open");
		goto out;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		set_error(t, r, "stat");
		close(fd);
		goto out;
	}
	r = check_file(t, &st);
	if (r < 0) {
		close(fd);
		goto out;
	}
	r = fd;
out:
	close(dfd);
	return r;
}

/* What open does with the file it found. */
enum file_plan {
	PLAN_KEEP,   /* same tier: keep ids and blocks */
	PLAN_RESIZE, /* same tier, other slot count: keep ids, rewrite the header */
	PLAN_NEW,    /* empty file: new ids, nothing to scan */
	PLAN_RESET,  /* ours but unusable, or of another model/geometry: new ids;
				 * scanned (headers) only to count what is left */
};

/* Read the existing header (if any) and decide what to do with the file. */
static int read_file_header(struct kvp_tier *t, const struct stat *st, enum file_plan *plan)
{
	struct kvp_tier_file_hdr h;
	uint8_t *buf = aligned_alloc(KVP_TIER_ALIGN, KVP_TIER_FILE_REGION);
	ssize_t n = 0;
	int r;

	if (!buf)
		return -ENOMEM;
	memset(buf, 0, KVP_TIER_FILE_REGION);
	if (st->st_size > 0)
		n = pread(t->fd, buf, KVP_TIER_FILE_REGION, 0);
	if (n < 0) {
		r = -errno;
		free(buf);
		return r;
	}
	r = kvp_tier_file_parse(buf, KVP_TIER_FILE_REGION, &h);
	free(buf);
	if (r == -EMEDIUMTYPE)
		return r; /* someone else's file: never overwrite it */
	if (r == 0 && kvp_tier_file_compatible(&h, &t->lay)) {
		t->tier_id = h.tier_id;
		t->hash_seed = h.hash_seed;
		*plan = h.n_slots == t->lay.n_slots ? PLAN_KEEP : PLAN_RESIZE;
		return 0;
	}
	if (r == -ENODATA && st->st_size <= KVP_TIER_FILE_REGION) {
		*plan = PLAN_NEW;
		return 0;
	}
	t->st.reset = 1;
	/* counted apart: a K/V type change is an operator's choice that costs a recompute of
	 * everything the file held, not damage */
	if (r == 0 && h.shape.dtype != t->lay.shape.dtype)
		t->st.type_resets = 1;
	*plan = PLAN_RESET;
	return 0;
}

static int size_file(struct kvp_tier *t, const struct stat *st)
{
	off_t want = (off_t)t->lay.file_bytes;

	if (st->st_size > want && ftruncate(t->fd, want) < 0)
		return -errno;
	if (fallocate(t->fd, 0, 0, want) == 0)
		return 0;
	if (errno != EOPNOTSUPP)
		return -errno;
	/* no preallocation here: a sparse file; running out of space later degrades */
	t->st.sparse = 1;
	if (st->st_size < want && ftruncate(t->fd, want) < 0)
		return -errno;
	return 0;
}

static int setup_ring(struct kvp_tier *t)
{
	struct io_uring_params p;
	unsigned int entries = 2 * t->qd;
	int r;

	/* completions wait for our next syscall instead of interrupting the engine thread;
	 * liburing enters the kernel for them when the SQ flag says some are pending */
	memset(&p, 0, sizeof(p));
	p.flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG | IORING_SETUP_SUBMIT_ALL;
	r = io_uring_queue_init_params(entries, &t->ring, &p);
	if (r == -EINVAL) {
		memset(&p, 0, sizeof(p));
		r = io_uring_queue_init_params(entries, &t->ring, &p);
	}
	if (r < 0)
		return r;
	t->ring_ok = 1;
	/*
	 * No io_uring_register_ring_fd(): a registered ring fd is an index into the
	 * registering thread's own table, and the tier is opened on the daemon's main thread
	 * and driven by its engine thread: every enter from there failed with EINVAL.
	 */
	t->fd_ref = t->fd;
	if (io_uring_register_files(&t->ring, &t->fd, 1) == 0) {
		t->fd_ref = 0;
		t->sqe_flags = IOSQE_FIXED_FILE;
	}
	return 0;
}

/* Register the header arena and the pool (in chunks of whole blocks) as fixed buffers. */
static void setup_fixed_buffers(struct kvp_tier *t)
{
	const struct kvp_geom *g = kvp_pool_geom(t->pool);
	uint32_t nb = kvp_pool_n_blocks(t->pool), per, n_bufs;
	struct iovec *iov;

	if (!(t->flags & KVP_TIER_FIXED_BUFS))
		return;
	per = (uint32_t)(FIXED_CHUNK_BYTES / g->block_stride);
	if (!per)
		return;
	n_bufs = 1 + (nb + per - 1) / per;
	iov = calloc(n_bufs, sizeof(*iov));
	if (!iov)
		return;
	iov[0] = (struct iovec){ t->hdr_arena, (size_t)t->qd * t->lay.slot_hdr_bytes };
	for (uint32_t i = 1; i < n_bufs; i++) {
		uint32_t first = (i - 1) * per, cnt = nb - first < per ? nb - first : per;

		iov[i] = (struct iovec){ kvp_pool_data(t->pool, first),
					 (size_t)cnt * g->block_stride };
	}
	/* may fail (RLIMIT_MEMLOCK, a kernel refusing this memory): plain I/O then */
	if (io_uring_register_buffers(&t->ring, iov, n_bufs) == 0) {
		t->fixed_bufs = 1;
		t->blocks_per_buf = per;
	}
	free(iov);
}

static int found_add(struct kvp_tier *t, uint32_t slot, const struct kvp_tier_blk_info *info)
{
	uint32_t bt = t->lay.shape.block_tokens;

	if (t->n_found == t->cap_found) {
		uint32_t cap = t->cap_found ? t->cap_found * 2 : 64;
		struct kvp_tier_found *f = realloc(t->found, (size_t)cap * sizeof(*f));
		uint32_t *tk;

		if (!f)
			return -ENOMEM;
		t->found = f;
		tk = realloc(t->found_tokens, (size_t)cap * bt * sizeof(*tk));
		if (!tk)
			return -ENOMEM;
		t->found_tokens = tk;
		t->cap_found = cap;
	}
	memcpy(&t->found_tokens[(size_t)t->n_found * bt], info->rec.tokens, bt * sizeof(uint32_t));
	t->found[t->n_found] = (struct kvp_tier_found){ .slot = slot,
							.generation = info->generation,
							.rec = info->rec };
	t->found[t->n_found].rec.tokens = NULL; /* set when the array stops moving */
	t->n_found++;
	return 0;
}

/* Sort the scan's sound blocks into their places: VALID, LRU by write order. */
static int cmp_gen(const void *a, const void *b)
{
	const struct kvp_tier_found *x = *(struct kvp_tier_found *const *)a;
	const struct kvp_tier_found *y = *(struct kvp_tier_found *const *)b;

	return x->generation < y->generation ? -1 : x->generation > y->generation;
}

static int check_slot(struct kvp_tier *t, uint32_t slot, const uint8_t *buf, int full,
		      uint32_t *tokens, struct kvp_tier_blk_info *info)
{
	int r = kvp_tier_blk_parse(buf, t->lay.slot_hdr_bytes, &t->lay, t->tier_id, slot, tokens,
				   info);

	if (r == 0 && full)
		r = kvp_tier_blk_verify(buf, &t->lay, info, buf + t->lay.slot_hdr_bytes);
	return r;
}

static int classify(struct kvp_tier *t, uint32_t slot, uint8_t *buf, int full)
{
	uint32_t tokens[KVP_INDEX_MAX_BLOCK_TOKENS];
	struct kvp_tier_blk_info info;
	uint32_t len = full ? (uint32_t)t->lay.slot_bytes : t->lay.slot_hdr_bytes;
	int r;

	r = check_slot(t, slot, buf, full, tokens, &info);
	if (r == -EBADMSG) {
		/* one synchronous read again (see finish()): a good block is not lost to a
		 * read that went astray */
		if (pread(t->fd, buf, len, (off_t)kvp_tier_slot_offset(&t->lay, slot)) == len) {
			t->st.scan_bytes += len;
			r = check_slot(t, slot, buf, full, tokens, &info);
			if (r == 0)
				t->st.reread_recovered++;
		}
	}
	if (r == -ENODATA) {
		t->st.scan_empty++;
		return 0;
	}
	if (r == -EXDEV) {
		t->st.scan_foreign++;
		return 0;
	}
	if (r < 0) {
		t->st.scan_corrupt++;
		return 0;
	}
	r = found_add(t, slot, &info);
	if (r < 0)
		return r;
	t->st.scan_valid++;
	t->slots[slot].state = SLOT_VALID;
	t->slots[slot].uid = info.rec.uid;
	t->slots[slot].hash = info.rec.hash;
	if (info.generation >= t->next_gen)
		t->next_gen = info.generation + 1;
	if (info.rec.uid > t->uid_floor)
		t->uid_floor = info.rec.uid;
	if (info.rec.puid > t->uid_floor)
		t->uid_floor = info.rec.puid;
	return 0;
}

/* The rebuild scan's reads in flight: buffers, which are free, which slot is next. */
struct scan_state {
	uint8_t *bufs;
	uint32_t *stack; /* free buffers */
	uint32_t top;
	uint32_t len;	 /* bytes read per slot */
	uint32_t queued; /* reads in flight */
	uint64_t next;	 /* next slot to read */
	int stop;	 /* an error: queue nothing more, drain */
};

/* Queue reads into every free buffer; returns how many were queued. */
static uint32_t scan_fill(struct kvp_tier *t, struct scan_state *ss)
{
	uint32_t n = 0;

	while (!ss->stop && ss->top && ss->next < t->lay.n_slots) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
		uint32_t b;

		if (!sqe)
			break;
		b = ss->stack[--ss->top];
		io_uring_prep_read(sqe, t->fd_ref, ss->bufs + (size_t)b * ss->len, ss->len,
				   kvp_tier_slot_offset(&t->lay, ss->next));
		sqe->flags |= t->sqe_flags;
		io_uring_sqe_set_data64(sqe, ss->next << 16 | b);
		ss->next++;
		ss->queued++;
		n++;
	}
	return n;
}

/*
 * Read every slot (header regions, or whole slots when @full) and keep the sound blocks.
 * A buffer goes back into the queue as soon as its slot is checked, so checking (a sum of
 * a whole block in a full scan) overlaps the reads still in flight.
 */
static int scan(struct kvp_tier *t, int full)
{
	uint64_t t0 = kvp_now_ns();
	struct scan_state ss = { .len = full ? (uint32_t)t->lay.slot_bytes :
					       t->lay.slot_hdr_bytes };
	uint32_t nq = SCAN_BUF_BYTES / ss.len;
	size_t bytes;
	int r = 0, io_err = 0, stuck = 0;

	if (nq > t->qd)
		nq = t->qd;
	if (!nq)
		nq = 1;
	/* 2 MiB pages where the kernel gives them: fewer DMA segments per read (docs/tier.md) */
	bytes = ((size_t)nq * ss.len + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
	ss.bufs = aligned_alloc(2u << 20, bytes);
	if (ss.bufs)
		madvise(ss.bufs, bytes, MADV_HUGEPAGE);
	ss.stack = calloc(nq, sizeof(*ss.stack));
	if (!ss.bufs || !ss.stack) {
		r = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < nq; i++)
		ss.stack[ss.top++] = i;
	scan_fill(t, &ss);
	while (ss.queued) {
		struct io_uring_cqe *cqe;
		int w = io_uring_submit_and_wait(&t->ring, 1);

		if (w < 0 && w != -EINTR && w != -EAGAIN && w != -EBUSY) {
			/* cannot even wait: the kernel may still write into the buffers */
			io_err = w;
			stuck = 1;
			break;
		}
		while (io_uring_peek_cqe(&t->ring, &cqe) == 0) {
			uint64_t ud = io_uring_cqe_get_data64(cqe);
			uint32_t b = (uint32_t)(ud & 0xffff), slot = (uint32_t)(ud >> 16);
			int res = cqe->res;

			io_uring_cqe_seen(&t->ring, cqe);
			ss.queued--;
			t->st.scan_slots++;
			if (res >= 0)
				t->st.scan_bytes += (uint64_t)res;
			if (res >= 0 && (uint32_t)res != ss.len)
				res = -EIO;
			if (res < 0 && !io_err)
				io_err = res;
			if (res >= 0 && !r && !io_err)
				r = classify(t, slot, ss.bufs + (size_t)b * ss.len, full);
			ss.stack[ss.top++] = b;
			ss.stop = r || io_err;
			/* a whole block's sum is long enough to refill at once; a 4 KiB header's
			 * is not worth a syscall: those go out with the next wait */
			if (scan_fill(t, &ss) && full)
				io_uring_submit(&t->ring);
		}
	}
out:
	if (!stuck)
		free(ss.bufs); /* else leaked on purpose: reads may still land in it */
	free(ss.stack);
	t->st.scan_ns = kvp_now_ns() - t0;
	if (io_err)
		set_error(t, io_err, "scan of");
	return r;
}

/* After the scan: free list of the rest, LRU in write order, stable token pointers. */
static int place_found(struct kvp_tier *t)
{
	struct kvp_tier_found **order;
	uint32_t bt = t->lay.shape.block_tokens;

	for (uint32_t s = (uint32_t)t->lay.n_slots; s-- > 0;)
		if (t->slots[s].state != SLOT_VALID)
			free_push(t, s);
	for (uint32_t i = 0; i < t->n_found; i++)
		t->found[i].rec.tokens = &t->found_tokens[(size_t)i * bt];
	if (!t->n_found)
		return 0;
	order = malloc((size_t)t->n_found * sizeof(*order));
	if (!order)
		return -ENOMEM;
	for (uint32_t i = 0; i < t->n_found; i++)
		order[i] = &t->found[i];
	qsort(order, t->n_found, sizeof(*order), cmp_gen);
	for (uint32_t i = 0; i < t->n_found; i++)
		lru_append(t, order[i]->slot);
	t->st.blocks = t->n_found;
	free(order);
	return 0;
}

int kvp_tier_open(struct kvp_tier **out, const struct kvp_tier_config *cfg, struct kvp_pool *pool)
{
	const struct kvp_geom *g;
	enum file_plan plan = PLAN_NEW;
	struct kvp_tier *t;
	struct stat st;
	int r;

	if (!out || !cfg || !cfg->path || !*cfg->path || !pool ||
	    cfg->queue_depth > KVP_TIER_QD_MAX)
		return -EINVAL;
	g = kvp_pool_geom(pool);
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->fd = -1;
	kvp_samples_init(&t->lat, t->lat_buf, KVP_TIER_LAT_SAMPLES);
	t->free_head = t->lru_head = t->lru_tail = t->io_free = NONE;
	t->pool = pool;
	t->flags = cfg->flags;
	t->qd = cfg->queue_depth ? cfg->queue_depth : KVP_TIER_QD_DEFAULT;
	t->next_gen = 1;
	t->path = strdup(cfg->path);
	if (!t->path) {
		r = -ENOMEM;
		goto fail;
	}
	r = kvp_tier_layout_init(&t->lay, &g->shape, cfg->model_fp, cfg->max_bytes);
	if (r < 0)
		goto fail;
	if (data_len(t) != g->block_stride) {
		r = -EINVAL; /* the K/V part of a slot is read into a block stride */
		goto fail;
	}
	t->tier_id = random_u64();
	t->hash_seed = random_u64();
	t->st.slots = t->lay.n_slots;
	t->st.slot_bytes = t->lay.slot_bytes;
	t->st.file_bytes = t->lay.file_bytes;

	t->slots = calloc(t->lay.n_slots, sizeof(*t->slots));
	t->io = calloc(t->qd, sizeof(*t->io));
	t->hdr_arena = aligned_alloc(KVP_TIER_ALIGN, (size_t)t->qd * t->lay.slot_hdr_bytes);
	if (!t->slots || !t->io || !t->hdr_arena) {
		r = -ENOMEM;
		goto fail;
	}
	for (uint32_t s = 0; s < t->lay.n_slots; s++)
		t->slots[s].prev = t->slots[s].next = NONE;
	for (uint32_t i = t->qd; i-- > 0;) {
		t->io[i].hdr = t->hdr_arena + (size_t)i * t->lay.slot_hdr_bytes;
		io_put(t, &t->io[i]);
	}
	*out = t;

	/* from here on a problem turns the tier off; the caller still gets it */
	t->fd = open_file(t);
	if (t->fd < 0)
		goto done;
	r = lock_file(t->fd, cfg->lock_wait_ms ? cfg->lock_wait_ms : KVP_TIER_LOCK_WAIT_MS);
	if (r < 0) {
		set_error(t, r, r == -EBUSY ? "lock (in use by another process?)" : "lock");
		goto done;
	}
	if (fstat(t->fd, &st) < 0) {
		set_error(t, -errno, "stat");
		goto done;
	}
	if (!S_ISREG(st.st_mode)) {
		set_error(t, -EINVAL, "not a regular file:");
		goto done;
	}
	r = read_file_header(t, &st, &plan);
	if (r == -EMEDIUMTYPE) {
		set_error(t, r, "not a kvpool tier file, left untouched:");
		goto done;
	}
	if (r < 0) {
		set_error(t, r, "read header of");
		goto done;
	}
	r = size_file(t, &st);
	if (r < 0) {
		set_error(t, r, "preallocate");
		goto done;
	}
	if (plan != PLAN_KEEP) {
		r = write_file_header(t);
		if (r < 0) {
			set_error(t, r, "write header of");
			goto done;
		}
	}
	if (fcntl(t->fd, F_SETFL, fcntl(t->fd, F_GETFL) | O_DIRECT) < 0) {
		set_error(t, -errno, "O_DIRECT on");
		goto done;
	}
	r = setup_ring(t);
	if (r < 0) {
		set_error(t, r, "io_uring for");
		goto done;
	}
	setup_fixed_buffers(t);
	t->st.fixed_buffers = (uint32_t)t->fixed_bufs;
	if (plan != PLAN_NEW) {
		r = scan(t, plan != PLAN_RESET && (t->flags & KVP_TIER_SCAN_FULL));
		if (r < 0)
			goto fail_out;
	}
done:
	r = place_found(t);
	if (r < 0)
		goto fail_out;
	if (t->st.degraded) {
		/* nothing found can be served by a tier that is off */
		while (t->lru_head != NONE)
			slot_drop(t, t->lru_head, 0);
		kvp_tier_forget_found(t);
	}
	return 0;
fail_out:
	*out = NULL;
fail:
	kvp_tier_free(t);
	return r;
}

void kvp_tier_free(struct kvp_tier *t)
{
	struct io_uring_cqe *cqe;

	if (!t)
		return;
	t->drop = NULL; /* the owner may be gone already: no more callbacks */
	if (t->ring_ok) {
		/* the kernel still writes into pool blocks until these complete */
		while (t->in_flight) {
			struct kvp_tier_done d;

			if (io_uring_wait_cqe(&t->ring, &cqe) < 0)
				break;
			reap_one(t, cqe, &d);
			io_uring_cqe_seen(&t->ring, cqe);
		}
		/*
		 * The ring's own teardown is asynchronous: left registered, the file (and so
		 * its lock, and a remount) and the pinned pool pages would outlive this call.
		 * Unregistering is synchronous.
		 */
		if (t->sqe_flags & IOSQE_FIXED_FILE)
			io_uring_unregister_files(&t->ring);
		if (t->fixed_bufs)
			io_uring_unregister_buffers(&t->ring);
		io_uring_queue_exit(&t->ring);
	}
	if (t->fd >= 0)
		close(t->fd);
	kvp_tier_forget_found(t);
	free(t->slots);
	free(t->io);
	free(t->hdr_arena);
	free(t->path);
	free(t);
}

/* ---- found list and the index ---- */

uint32_t kvp_tier_n_found(const struct kvp_tier *t)
{
	return t->n_found;
}

const struct kvp_tier_found *kvp_tier_found(const struct kvp_tier *t, uint32_t i)
{
	return i < t->n_found ? &t->found[i] : NULL;
}

void kvp_tier_forget_found(struct kvp_tier *t)
{
	free(t->found);
	free(t->found_tokens);
	t->found = NULL;
	t->found_tokens = NULL;
	t->n_found = t->cap_found = 0;
}

uint64_t kvp_tier_hash_seed(const struct kvp_tier *t)
{
	return t->hash_seed;
}

uint64_t kvp_tier_uid_floor(const struct kvp_tier *t)
{
	return t->uid_floor;
}

void kvp_tier_set_drop(struct kvp_tier *t, kvp_tier_drop_fn fn, void *ctx)
{
	t->drop = fn;
	t->drop_ctx = ctx;
}

static void drop_to_index(void *ctx, uint32_t slot, uint64_t uid)
{
	kvp_index_disk_dropped(ctx, slot);
}

/* Ascending uid; of equal uids the newer copy first. */
static int cmp_uid(const void *a, const void *b)
{
	const struct kvp_tier_found *x = *(struct kvp_tier_found *const *)a;
	const struct kvp_tier_found *y = *(struct kvp_tier_found *const *)b;

	if (x->rec.uid != y->rec.uid)
		return x->rec.uid < y->rec.uid ? -1 : 1;
	return x->generation > y->generation ? -1 : x->generation < y->generation;
}

int kvp_tier_attach_index(struct kvp_tier *t, struct kvp_index *idx)
{
	struct kvp_tier_found **order = NULL;
	struct kvp_index_stats ist;
	int r;

	if (!t || !idx)
		return -EINVAL;
	kvp_index_stats(idx, &ist);
	if (ist.entries || ist.disk_entries)
		return -EBUSY;
	kvp_index_set_seed(idx, t->hash_seed);
	if (t->st.degraded) {
		kvp_tier_forget_found(t);
		return 0;
	}
	r = kvp_index_reserve_disk(idx, (uint32_t)t->lay.n_slots);
	if (r < 0)
		return r;
	if (t->n_found) {
		order = malloc((size_t)t->n_found * sizeof(*order));
		if (!order)
			return -ENOMEM;
		for (uint32_t i = 0; i < t->n_found; i++)
			order[i] = &t->found[i];
		qsort(order, t->n_found, sizeof(*order), cmp_uid);
	}
	for (uint32_t i = 0; i < t->n_found; i++) {
		const struct kvp_tier_found *f = order[i];

		if (i && order[i - 1]->rec.uid == f->rec.uid) {
			t->st.duplicates++;
			kvp_tier_release(t, f->slot);
			continue;
		}
		r = kvp_index_insert_disk(idx, &f->rec, f->slot);
		if (r == 0) {
			t->st.rebuilt++;
			continue;
		}
		if (r == -ENOMEM) {
			free(order);
			return r;
		}
		if (r == -EEXIST)
			t->st.duplicates++;
		else
			t->st.orphans++; /* parent gone, or it disagrees with it */
		kvp_tier_release(t, f->slot);
	}
	free(order);
	kvp_index_set_uid_floor(idx, t->uid_floor);
	kvp_tier_set_drop(t, drop_to_index, idx);
	kvp_tier_forget_found(t);
	return 0;
}

/* ---- flush, stats ---- */

int kvp_tier_flush(struct kvp_tier *t)
{
	int r;

	if (!t)
		return -EINVAL;
	if (t->st.degraded)
		return -ENODEV;
	if (t->in_flight)
		return -EBUSY;
	t->tier_id = random_u64();
	r = write_file_header(t);
	if (r < 0) {
		degrade(t, r, "write header of");
		return r;
	}
	while (t->lru_head != NONE)
		slot_drop(t, t->lru_head, 1);
	return 0;
}

void kvp_tier_stats(const struct kvp_tier *t, struct kvp_tier_stats *st)
{
	double lat[KVP_TIER_LAT_SAMPLES];
	struct kvp_quantiles q;
	uint32_t n;

	*st = t->st;
	st->bytes = t->st.blocks * t->lay.block_bytes;
	st->in_flight = t->in_flight;
	n = kvp_samples_copy(&t->lat, lat);
	st->reload_samples = n;
	if (n) {
		kvp_quantiles_of(lat, n, &q);
		st->reload_p50_ns = (uint64_t)q.p50; /* whole ns: exact in a double */
		st->reload_p99_ns = (uint64_t)q.p99;
	}
}

void kvp_tier_debug_lose_reads(struct kvp_tier *t, uint32_t n)
{
	t->debug_lose_reads = n;
}

const char *kvp_tier_error(const struct kvp_tier *t)
{
	return t->err;
}

const struct kvp_tier_layout *kvp_tier_layout(const struct kvp_tier *t)
{
	return &t->lay;
}
