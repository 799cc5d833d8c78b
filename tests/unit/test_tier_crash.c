/* SPDX-License-Identifier: MIT */
/*
 * test_tier_crash.c - crash consistency of the disk tier under SIGKILL.
 *
 * Each round forks a child that opens the tier and offloads as fast as it can (chains
 * of blocks, queue full, the tier full so slots are overwritten all the time) and kills
 * it with SIGKILL at a random moment.  The parent then reopens the tier (waiting for the
 * dead child's writes in flight to land: they hold the file lock) and checks:
 *
 *   - every block the rebuild reports holds exactly the K/V written for its chain hash
 *     (full scan: each read back must pass and match; header scan: a read may be
 *     refused as torn, but never serves anything else);
 *   - every write the child saw complete, whose slot was not taken again since, is
 *     reported and reads back (the child logs those in shared memory);
 *   - the index rebuild accounts for every reported block (rebuilt, orphan, duplicate).
 *
 * CRASH_ROUNDS rounds (a few here; test_tier_crash_long.c runs many in 'slow').
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "tests/lib/testlib.h"
#include "tests/lib/tierfix.h"

#ifndef CRASH_ROUNDS
#define CRASH_ROUNDS 6
#endif

#define BT 16
#define NB 64	 /* pool blocks */
#define SLOTS 96 /* tier slots: fewer than the child writes, so it overwrites */
#define QD 16

/* 64 KiB of K/V per block: writes long enough to be caught in flight */
static const struct kvp_model_shape shape = {
	.n_layers = 4,
	.n_kv_heads = 4,
	.head_dim = 64,
	.dtype = KVP_DTYPE_F16,
	.block_tokens = BT,
};

/* What the child knows for sure, per slot: the uid of its last completed write, 0 when
 * the slot was dropped (evicted for a new write) since.  Shared with the parent. */
struct crash_log {
	volatile uint64_t done_uid[SLOTS];
	volatile uint64_t writes;
};

static struct crash_log *xlog;

static void child_drop(void *ctx, uint32_t slot, uint64_t uid)
{
	/* called before the slot is written again: from here on it may be torn */
	__atomic_store_n(&xlog->done_uid[slot], 0, __ATOMIC_SEQ_CST);
}

/* Offload forever; never returns (SIGKILL ends it). */
static void child_main(struct tfix *f, uint32_t flags, uint64_t seed)
{
	struct kvp_pool_config pc = { .shape = shape, .n_blocks = NB, .pages = KVP_PAGES_OFF };
	struct kvp_tier_config c = tfix_cfg(f, SLOTS, flags);
	struct kvp_index_rec parent, rec;
	uint32_t ptok[BT], tok[BT], chain_left = 0;
	uint8_t busy[NB] = { 0 };
	struct kvp_tier_done d[QD];
	struct kvp_tier *t;
	uint32_t b = 0;

	kvp_pool_free(f->pool); /* the parent's: not ours to write into */
	if (kvp_pool_new(&f->pool, &pc) < 0)
		_exit(2);
	c.queue_depth = QD;
	c.lock_wait_ms = 10000;
	if (kvp_tier_open(&t, &c, f->pool) < 0)
		_exit(3);
	kvp_tier_set_drop(t, child_drop, NULL);
	f->next_uid = kvp_tier_uid_floor(t) + 1; /* uids never reused across rounds */
	f->rng = seed | 1;
	for (;;) {
		int s;

		if (!chain_left) {
			chain_left = 1 + (uint32_t)(f->rng % 7);
			tfix_rec(f, NULL, tok, &rec);
		} else {
			tfix_rec(f, &parent, tok, &rec);
		}
		chain_left--;
		while (busy[b])
			b = (b + 1) % NB;
		tfix_fill(f, b, rec.hash);
		while ((s = kvp_tier_write(t, &rec, b, b)) == -EBUSY) {
			int n = kvp_tier_wait(t, d, QD);

			for (int i = 0; i < n; i++) {
				busy[d[i].block] = 0;
				if (d[i].result == 0) {
					__atomic_store_n(&xlog->done_uid[d[i].slot], d[i].uid,
							 __ATOMIC_SEQ_CST);
					xlog->writes++;
				}
			}
		}
		if (s < 0)
			_exit(4); /* off: the parent sees no progress and says so */
		busy[b] = 1;
		parent = rec;
		memcpy(ptok, tok, sizeof(tok));
		parent.tokens = ptok;
	}
}

struct totals {
	uint64_t found, served, refused, completed_checked, rebuilt, orphans, dups;
};

/* Reopen after the kill and check everything the round left behind. */
static void verify_round(struct tfix *f, uint32_t flags, struct totals *tot)
{
	struct kvp_tier_config c = tfix_cfg(f, SLOTS, flags);
	int full = (flags & KVP_TIER_SCAN_FULL) != 0;
	uint64_t at_slot[SLOTS] = { 0 };
	struct kvp_tier_stats st;
	struct kvp_index *idx;
	struct kvp_tier *t;
	uint32_t n;

	c.lock_wait_ms = 10000;
	assert_int_equal(kvp_tier_open(&t, &c, f->pool), 0);
	kvp_tier_stats(t, &st);
	if (st.degraded)
		fail_msg("reopen after the kill: %s", kvp_tier_error(t));
	n = kvp_tier_n_found(t);
	tot->found += n;
	for (uint32_t i = 0; i < n; i++) {
		const struct kvp_tier_found *fd = kvp_tier_found(t, i);
		uint32_t b = i % NB;
		int r;

		at_slot[fd->slot] = fd->rec.uid;
		r = tfix_read_wait(t, fd->slot, fd->rec.uid, b);
		if (r == 0) {
			/* served: it must be exactly the K/V written for this chain hash */
			if (!tfix_holds(f, b, fd->rec.hash))
				fail_msg("slot %u uid %llu: served K/V that was not written for it",
					 fd->slot, (unsigned long long)fd->rec.uid);
			tot->served++;
		} else {
			if (r != -EBADMSG)
				fail_msg("slot %u: read %s", fd->slot, strerror(-r));
			if (full)
				fail_msg("slot %u: the full scan reported a block that fails its "
					 "read",
					 fd->slot);
			tot->refused++;
		}
	}
	/* every completed write not since overwritten was found (and, above, served) */
	for (uint32_t s = 0; s < SLOTS; s++) {
		uint64_t u = __atomic_load_n(&xlog->done_uid[s], __ATOMIC_SEQ_CST);

		if (!u)
			continue;
		if (at_slot[s] != u)
			fail_msg("slot %u: completed write uid %llu lost (found %llu)", s,
				 (unsigned long long)u, (unsigned long long)at_slot[s]);
		tot->completed_checked++;
	}
	kvp_tier_free(t);

	/* the index rebuild over the same crash state accounts for every block */
	assert_int_equal(kvp_index_new(&idx, f->pool), 0);
	assert_int_equal(kvp_tier_open(&t, &c, f->pool), 0);
	n = kvp_tier_n_found(t);
	assert_int_equal(kvp_tier_attach_index(t, idx), 0);
	kvp_tier_stats(t, &st);
	assert_int_equal(st.rebuilt + st.orphans + st.duplicates, n);
	tot->rebuilt += st.rebuilt;
	tot->orphans += st.orphans;
	tot->dups += st.duplicates;
	kvp_tier_free(t);
	kvp_index_free(idx);
}

static void test_sigkill_while_offloading(void **state)
{
	/* CRASH_ROUNDS kills at random moments: no wrong block ever served, none lost */
	struct tfix f;
	struct totals tot = { 0 };
	uint64_t seed = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 20;
	uint64_t writes = 0;

	assert_int_equal(tfix_init(&f, &shape, NB), 0);
	xlog = mmap(NULL, sizeof(*xlog), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(xlog != MAP_FAILED);
	print_message("crash rounds: %d, seed %llu\n", CRASH_ROUNDS, (unsigned long long)seed);
	srand((unsigned int)seed);
	for (int round = 0; round < CRASH_ROUNDS; round++) {
		/* alternate the scan, and fixed buffers vs plain I/O in the child */
		uint32_t cflags = round & 2 ? KVP_TIER_FIXED_BUFS : 0;
		uint32_t vflags = round & 1 ? KVP_TIER_SCAN_FULL : 0;
		int wst;
		pid_t pid;

		memset((void *)xlog, 0, sizeof(*xlog));
		pid = fork();
		assert_true(pid >= 0);
		if (pid == 0)
			child_main(&f, cflags, seed + (uint64_t)round * 7919);
		usleep(30000 + (useconds_t)(rand() % 170000));
		assert_int_equal(kill(pid, SIGKILL), 0);
		assert_int_equal(waitpid(pid, &wst, 0), pid);
		if (!WIFSIGNALED(wst))
			fail_msg("round %d: the child exited by itself (status %d)", round,
				 WEXITSTATUS(wst));
		writes += xlog->writes;
		verify_round(&f, vflags, &tot);
	}
	print_message("child writes completed %llu; reported %llu: served bit-exact %llu, "
		      "refused as torn %llu; completed-and-kept checked %llu; index rebuilt %llu, "
		      "orphans %llu, duplicates %llu\n",
		      (unsigned long long)writes, (unsigned long long)tot.found,
		      (unsigned long long)tot.served, (unsigned long long)tot.refused,
		      (unsigned long long)tot.completed_checked, (unsigned long long)tot.rebuilt,
		      (unsigned long long)tot.orphans, (unsigned long long)tot.dups);
	assert_true(writes > 0);
	assert_true(tot.served > 0);
	munmap(xlog, sizeof(*xlog));
	tfix_deinit(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sigkill_while_offloading),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
