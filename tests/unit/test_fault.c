/* SPDX-License-Identifier: MIT */
/*
 * test_fault.c - faults injected where the kernel or the allocator can fail us
 * (util/fault.h; built only with -Dfault_injection=true), and what each operation does
 * then: a clear error, the state it had before (counts, references, blocks), no crash,
 * and - under ASan's leak checker, which the test command runs - no leak.
 *
 * Allocation: the n-th allocation of an operation fails, for n = 1, 2, ... until the
 * operation runs without meeting a fault, once transient (that call only) and once
 * persistent (every call from the n-th on), for the public operations of the pool, the
 * prefix index and the disk tier that allocate; the wire codec, the tier record format
 * and the remote value codec must not allocate at all.  The pool segment's memfd_create,
 * ftruncate and mmap fail in turn.  The disk tier's io_uring: a completion with EIO or a
 * short transfer (an injected CQE result, on a real file), and a refused submission.
 * The sweep's figures (runs and faults) are printed for tests/RELIABILITY.md;
 * KVP_FAULT_ROUNDS=N repeats the whole sweep N times (tests/stress.sh's long form).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ipc/proto.h"
#include "shm/index.h"
#include "shm/pool.h"
#include "shm/remote/codec.h"
#include "shm/tier.h"
#include "shm/tier_fmt.h"
#include "tests/lib/tierfix.h"
#include "util/fault.h"

#define BT 16
#define NB 64
#define SWEEP_MAX 10000 /* more allocations than any operation here makes */

static const struct kvp_model_shape shape = {
	.n_layers = 2,
	.n_kv_heads = 2,
	.head_dim = 24,
	.dtype = KVP_DTYPE_F16,
	.block_tokens = BT,
};

static unsigned long runs_total, faults_total;

/*
 * An operation under test: run once (return 0 or -errno), undo what a success did, and
 * say whether the state it leaves on failure is the state before (NULL: nothing to
 * compare).
 */
struct op {
	const char *name;
	int (*run)(void *ctx);
	void (*undo)(void *ctx);
	bool (*intact)(void *ctx);
	int want; /* the error a failed run returns */
};

/*
 * Fail the n-th call of @site for n = 1, 2, ... (@persistent: and every call after it)
 * until a run meets no fault; each failed run must return op->want and leave the state
 * intact, and a run after each must succeed (nothing broken for later).
 */
static void sweep(const struct op *op, void *ctx, const char *site, bool persistent)
{
	unsigned int n;

	for (n = 1; n < SWEEP_MAX; n++) {
		int r;

		assert_int_equal(kvp_fault_arm(site, n, persistent ? KVP_FAULT_ALWAYS : 1, -ENOMEM),
				 0);
		r = op->run(ctx);
		kvp_fault_disarm();
		runs_total++;
		if (!kvp_fault_hits(site)) {
			assert_int_equal(r, 0);
			op->undo(ctx);
			break;
		}
		faults_total += kvp_fault_hits(site);
		if (r == 0) {
			/* a fault it survived (a fallback, a retry): fine, if it then works */
			op->undo(ctx);
		} else {
			if (r != op->want)
				fail_msg("%s: allocation %u %s: %d, want %d", op->name, n,
					 persistent ? "on" : "once", r, op->want);
			if (op->intact && !op->intact(ctx))
				fail_msg("%s: state changed by a failed run (allocation %u)",
					 op->name, n);
		}
		assert_int_equal(op->run(ctx), 0);
		op->undo(ctx);
	}
	assert_true(n < SWEEP_MAX);
	print_message("%s: %s %s: %u runs\n", op->name, site,
		      persistent ? "persistent" : "transient", n);
}

static void sweep_both(const struct op *op, void *ctx)
{
	sweep(op, ctx, "alloc", false);
	sweep(op, ctx, "alloc", true);
}

static void test_arm(void **state)
{
	/* the mechanism itself: calls counted from the arm, the n-th failed, then real again */
	void *p[4];

	assert_int_equal(kvp_fault_arm("nonsense", 1, 1, -EIO), -EINVAL);
	assert_int_equal(kvp_fault_arm("malloc", 0, 1, -EIO), -EINVAL);
	assert_int_equal(kvp_fault_arm("malloc", 2, 1, -ENOMEM), 0);
	for (int i = 0; i < 4; i++)
		p[i] = malloc(16);
	kvp_fault_disarm();
	assert_non_null(p[0]);
	assert_null(p[1]);
	assert_non_null(p[2]);
	assert_non_null(p[3]);
	assert_int_equal(kvp_fault_calls("malloc"), 4);
	assert_int_equal(kvp_fault_hits("malloc"), 1);
	for (int i = 0; i < 4; i++)
		free(p[i]);
	setenv("KVP_FAULT", "calloc:1:0:ENOMEM,pread:3:2:short", 1);
	assert_int_equal(kvp_fault_arm_env(), 0);
	assert_null(calloc(1, 1));
	assert_null(calloc(1, 1)); /* 0: always */
	kvp_fault_disarm();
	setenv("KVP_FAULT", "calloc:1:1:EWHAT", 1);
	assert_int_equal(kvp_fault_arm_env(), -EINVAL);
	unsetenv("KVP_FAULT");
	assert_int_equal(KVP_FAULT_RES("tier.cqe", 5), 5); /* not armed: as it came */
}

/* ---- pure codecs: no allocation at all ---- */

static void test_codecs_allocate_nothing(void **state)
{
	/* the wire codec, the tier record format and the remote codec never allocate, so no
	 * allocation failure can reach them: every encoder and decoder run with all armed */
	static uint8_t buf[1 << 16], val[1 << 16];
	const int32_t ids[] = { 1, 2, 3, 4 };
	const struct kvp_proto_limits lim = { 1 << 20, 4096, 4096, 1 << 16 };
	struct kvp_gen_req g = { .type = KVP_FRAME_GENERATE,
				 .n_ids = 4,
				 .ids = ids,
				 .max_new_tokens = 8,
				 .temperature = 1.0f,
				 .top_p = 1.0f };
	struct kvp_proto_msg msgs[] = { { KVP_ROLE_USER, 2, "hi" } }, mo[1];
	struct kvp_gen_req ch = { .type = KVP_FRAME_CHAT,
				  .n_messages = 1,
				  .msgs = msgs,
				  .max_new_tokens = 8,
				  .temperature = 1.0f,
				  .top_p = 1.0f };
	struct kvp_tier_layout lay;
	struct kvp_tier_file_hdr fh;
	struct kvp_tier_blk_info info;
	struct kvp_remote_codec c;
	struct kvp_prefix_key key;
	struct kvp_extra_keys ek = { .kv_dtype = KVP_DTYPE_F16 };
	const uint8_t fp[16] = "fault-model";
	uint32_t tokens[BT], tok2[BT];
	struct kvp_index_rec rec;
	struct kvp_frame_hdr hdr;
	struct kvp_gen_req out;
	const char *why;
	bool conn_fault;
	size_t n;
	uint8_t *kv = calloc(1, 1 << 16);

	assert_non_null(kv);
	for (int i = 0; i < BT; i++)
		tokens[i] = 100 + i;
	memcpy(ek.model_fp, fp, 16);
	assert_int_equal(kvp_fault_arm("alloc", 1, KVP_FAULT_ALWAYS, -ENOMEM), 0);

	n = kvp_proto_encode_request(buf, sizeof(buf), 1, &g);
	assert_int_equal(kvp_proto_check_hdr(buf, n, lim.max_frame_bytes, &hdr, &why), KVP_OK);
	assert_int_equal(kvp_proto_decode_request(hdr.type, buf + sizeof(hdr), hdr.len_bytes, &lim,
						  &out, NULL, &conn_fault, &why),
			 KVP_OK);
	n = kvp_proto_encode_request(buf, sizeof(buf), 2, &ch);
	assert_int_equal(kvp_proto_check_hdr(buf, n, lim.max_frame_bytes, &hdr, &why), KVP_OK);
	assert_int_equal(kvp_proto_decode_request(hdr.type, buf + sizeof(hdr), hdr.len_bytes, &lim,
						  &out, mo, &conn_fault, &why),
			 KVP_OK);

	assert_int_equal(kvp_prefix_key_init(&key, &ek), 0);
	assert_int_equal(kvp_tier_layout_init(&lay, &shape, fp, 1 << 20), 0);
	rec = (struct kvp_index_rec){ .phash = key.seed, .uid = 1, .key = key, .tokens = tokens };
	rec.hash = kvp_chain_hash(rec.phash, tokens, BT);
	kvp_tier_file_encode(buf, &lay, 9, 1);
	assert_int_equal(kvp_tier_file_parse(buf, KVP_TIER_FILE_REGION, &fh), 0);
	kvp_tier_blk_encode(buf, &lay, 9, 0, 1, &rec, kv);
	assert_int_equal(kvp_tier_blk_parse(buf, lay.slot_hdr_bytes, &lay, 9, 0, tok2, &info), 0);
	assert_int_equal(kvp_tier_blk_verify(buf, &lay, &info, kv), 0);

	assert_int_equal(kvp_remote_codec_init(&c, &shape, fp, "avx2"), 0);
	assert_true(c.value_bytes <= sizeof(val));
	{
		struct kvp_remote_expect e = { .digest = kvp_remote_digest(&c, rec.hash, key.seed),
					       .hash = rec.hash,
					       .phash = rec.phash,
					       .key = &key,
					       .tokens = tokens,
					       .first = true };

		kvp_remote_value_encode(val, &c, e.digest, &rec, kv);
		assert_int_equal(kvp_remote_value_check(val, c.value_bytes, &c, &e, kv), 0);
	}
	kvp_fault_disarm();
	assert_int_equal(kvp_fault_calls("alloc"), 0);
	runs_total++;
	free(kv);
}

/* ---- pool ---- */

struct pool_ctx {
	struct kvp_pool *pool;
};

static int pool_run(void *v)
{
	struct pool_ctx *c = v;
	struct kvp_pool_config pc = {
		.shape = shape, .n_blocks = NB, .pages = KVP_PAGES_OFF, .name = "kvptest-fault"
	};

	c->pool = NULL;
	return kvp_pool_new(&c->pool, &pc);
}

static void pool_undo(void *v)
{
	struct pool_ctx *c = v;

	kvp_pool_free(c->pool);
	c->pool = NULL;
}

static bool pool_intact(void *v)
{
	return !((struct pool_ctx *)v)->pool; /* a failed create hands nothing out */
}

static void test_pool_new(void **state)
{
	const struct op op = { "kvp_pool_new", pool_run, pool_undo, pool_intact, -ENOMEM };
	struct pool_ctx c = { 0 };
	static const char *const sys[] = { "memfd_create", "ftruncate", "mmap" };

	sweep_both(&op, &c);
	/* the segment's system calls, each failing once and for good: an error, not a pool */
	for (size_t i = 0; i < sizeof(sys) / sizeof(sys[0]); i++) {
		for (int persistent = 0; persistent < 2; persistent++) {
			int r;

			assert_int_equal(kvp_fault_arm(sys[i], 1, persistent ? KVP_FAULT_ALWAYS : 1,
						       i ? -ENOSPC : -EMFILE),
					 0);
			r = pool_run(&c);
			kvp_fault_disarm();
			runs_total++;
			assert_true(kvp_fault_hits(sys[i]) >= 1);
			faults_total += kvp_fault_hits(sys[i]);
			if (r == 0) {
				/* a transient fault the segment retried past (e.g. without sealing) */
				assert_false(persistent);
				pool_undo(&c);
				continue;
			}
			assert_int_equal(r, i ? -ENOSPC : -EMFILE);
			assert_null(c.pool);
		}
	}
}

/* ---- prefix index ---- */

struct idx_ctx {
	struct tfix tf;
	struct kvp_index *idx;
	uint32_t block, parent;
	uint32_t tokens[BT];
	struct kvp_prefix_key key2; /* other extra keys: the publish that grows the table */
	struct kvp_index_stats before;
	uint32_t free_before;
};

static int idx_new_run(void *v)
{
	struct idx_ctx *c = v;

	return kvp_index_new(&c->idx, c->tf.pool);
}

static void idx_new_undo(void *v)
{
	struct idx_ctx *c = v;

	kvp_index_free(c->idx);
	c->idx = NULL;
}

static bool idx_new_intact(void *v)
{
	struct idx_ctx *c = v;
	struct kvp_index *again;
	int r;

	/* the pool has no evictor registered by a failed create: a new index may take it */
	if (c->idx)
		return false;
	r = kvp_index_new(&again, c->tf.pool);
	kvp_index_free(again);
	return r == 0;
}

static int idx_publish_run(void *v)
{
	struct idx_ctx *c = v;
	uint32_t out;
	int r;

	kvp_index_stats(c->idx, &c->before);
	c->free_before = kvp_pool_n_free(c->tf.pool);
	r = kvp_pool_alloc(c->tf.pool, -1, &c->block);
	if (r)
		return r;
	r = kvp_index_publish(c->idx, &c->key2, KVP_BLOCK_NONE, c->tokens, c->block, &out);
	if (r) {
		kvp_pool_unref(c->tf.pool, c->block);
		return r;
	}
	return 0;
}

static void idx_publish_undo(void *v)
{
	struct idx_ctx *c = v;

	/* drop the caller's reference and evict it: the index forgets it, keys unused */
	kvp_pool_unref(c->tf.pool, c->block);
	assert_int_equal(kvp_pool_evict_block(c->tf.pool, c->block), 0);
}

static bool idx_publish_intact(void *v)
{
	struct idx_ctx *c = v;
	struct kvp_index_stats st;
	uint32_t hits[4];

	kvp_index_stats(c->idx, &st);
	return st.entries == c->before.entries && st.extra_keys == c->before.extra_keys &&
	       st.publishes == c->before.publishes &&
	       kvp_pool_n_free(c->tf.pool) == c->free_before &&
	       kvp_index_lookup(c->idx, &c->key2, c->tokens, BT + 1, hits, 4) == 0;
}

static void nothing(void *v)
{
}

static int idx_reserve_run(void *v)
{
	return kvp_index_reserve_disk(((struct idx_ctx *)v)->idx, 256);
}

/*
 * The pool evicts a published block while no allocation succeeds (the recently-evicted
 * hint set is allocated on first use, in the eviction callback, which cannot fail): the
 * entry still leaves the index, the block is free, and the hint is only missing.
 */
static void evict_without_memory(struct idx_ctx *c)
{
	struct kvp_index_stats st;
	uint32_t hits[4], tier;

	assert_int_equal(idx_publish_run(c), 0);
	assert_int_equal(kvp_fault_arm("alloc", 1, KVP_FAULT_ALWAYS, -ENOMEM), 0);
	idx_publish_undo(c);
	kvp_fault_disarm();
	runs_total++;
	faults_total += kvp_fault_hits("alloc");
	assert_true(kvp_fault_hits("alloc") >= 1);
	kvp_index_stats(c->idx, &st);
	assert_int_equal(st.entries, c->before.entries);
	assert_int_equal(kvp_pool_n_free(c->tf.pool), c->free_before);
	assert_int_equal(kvp_index_lookup(c->idx, &c->key2, c->tokens, BT + 1, hits, 4), 0);
	assert_true(kvp_index_evicted(c->idx, &c->key2, c->tokens, BT + 1, 0, &tier) >= 0);
	print_message("kvp_index evict: %lu allocations refused\n",
		      (unsigned long)kvp_fault_hits("alloc"));
}

static void test_index(void **state)
{
	const struct op new_op = { "kvp_index_new", idx_new_run, idx_new_undo, idx_new_intact,
				   -ENOMEM };
	const struct op pub_op = { "kvp_index_publish", idx_publish_run, idx_publish_undo,
				   idx_publish_intact, -ENOMEM };
	const struct op res_op = { "kvp_index_reserve_disk", idx_reserve_run, nothing, NULL,
				   -ENOMEM };
	struct idx_ctx *c = calloc(1, sizeof(*c));
	struct kvp_extra_keys ek = { .kv_dtype = KVP_DTYPE_F16, .salt_len = 3, .salt = "two" };

	assert_non_null(c);
	assert_int_equal(tfix_init(&c->tf, &shape, NB), 0);
	memcpy(ek.model_fp, c->tf.fp, 16);
	assert_int_equal(kvp_prefix_key_init(&c->key2, &ek), 0);
	for (int i = 0; i < BT; i++)
		c->tokens[i] = 7 * i + 1;
	sweep_both(&new_op, c);
	assert_int_equal(kvp_index_new(&c->idx, c->tf.pool), 0);
	evict_without_memory(c); /* first: before any eviction allocated the hint set */
	sweep_both(&pub_op, c);
	sweep_both(&res_op, c);
	kvp_index_free(c->idx);
	tfix_deinit(&c->tf);
	free(c);
}

/* ---- disk tier ---- */

#define NREC 16

struct tier_ctx {
	struct tfix tf;
	struct kvp_tier *t;
	struct kvp_index_rec rec[NREC];
	uint32_t tok[NREC][BT];
	int slot[NREC];
	uint32_t free_before;
};

static int tier_open_run(void *v)
{
	struct tier_ctx *c = v;
	struct kvp_tier_config cfg = tfix_cfg(&c->tf, 32, 0);

	c->free_before = kvp_pool_n_free(c->tf.pool);
	return kvp_tier_open(&c->t, &cfg, c->tf.pool);
}

static void tier_open_undo(void *v)
{
	struct tier_ctx *c = v;

	kvp_tier_free(c->t);
	c->t = NULL;
}

static bool tier_open_intact(void *v)
{
	struct tier_ctx *c = v;

	return !c->t && kvp_pool_n_free(c->tf.pool) == c->free_before;
}

/*
 * Open the tier again: each of the first @n records is found and reads back bit-exact.
 * With @extra, record @n may be found too (a write whose completion was made to fail
 * after the device wrote it: sound on disk, so found) and must then read back exact.
 * Return: whether record @n was found.
 */
static bool reopen_and_check(struct tier_ctx *c, uint32_t n, bool extra)
{
	struct kvp_tier_config cfg = tfix_cfg(&c->tf, 32, 0);
	uint32_t found = 0;
	bool found_extra = false;

	kvp_tier_free(c->t);
	assert_int_equal(kvp_tier_open(&c->t, &cfg, c->tf.pool), 0);
	for (uint32_t k = 0; k < kvp_tier_n_found(c->t); k++) {
		const struct kvp_tier_found *f = kvp_tier_found(c->t, k);
		uint32_t i = 0;

		while (i < n + extra && c->rec[i].uid != f->rec.uid)
			i++;
		assert_true(i < n + extra); /* nothing found that was never written */
		found += i < n;
		found_extra |= i == n;
		tfix_fill(&c->tf, 40, (struct kvp_h128){ 0, 0 });
		assert_int_equal(tfix_read_wait(c->t, f->slot, f->rec.uid, 40), 0);
		assert_true(tfix_holds(&c->tf, 40, c->rec[i].hash));
	}
	assert_int_equal(found, n); /* nothing lost */
	return found_extra;
}

static int32_t degraded(const struct kvp_tier *t)
{
	struct kvp_tier_stats st;

	kvp_tier_stats(t, &st);
	return st.degraded;
}

/*
 * One faulty completion of a write (@write) or of a read: the operation reports the
 * error, the tier goes off with it (naming it), the pool block keeps its K/V, and after
 * a restart every block written before is there, bit-exact.
 */
static void tier_cqe_fault(struct tier_ctx *c, bool write, int how, uint32_t *n)
{
	uint32_t k = *n;
	int r;

	/* block k: written already for a read fault, to be written for a write fault */
	tfix_rec(&c->tf, k ? &c->rec[k - 1] : NULL, c->tok[k], &c->rec[k]);
	tfix_fill(&c->tf, k, c->rec[k].hash);
	if (!write) {
		c->slot[k] = tfix_write_wait(c->t, &c->rec[k], k);
		assert_true(c->slot[k] >= 0);
		*n = ++k;
	}
	assert_int_equal(kvp_fault_arm("tier.cqe", 1, 1, how), 0);
	if (write)
		r = tfix_write_wait(c->t, &c->rec[k], k);
	else
		r = tfix_read_wait(c->t, c->slot[k - 1], c->rec[k - 1].uid, 20);
	kvp_fault_disarm();
	runs_total++;
	faults_total += kvp_fault_hits("tier.cqe");
	assert_int_equal(kvp_fault_hits("tier.cqe"), 1);
	assert_int_equal(r, -EIO); /* a short transfer is an I/O error too */
	assert_int_equal(degraded(c->t), -EIO);
	assert_non_null(strstr(kvp_tier_error(c->t), write ? "write" : "read"));
	assert_true(tfix_holds(&c->tf, write ? k : k - 1, c->rec[write ? k : k - 1].hash));
	/* off: later operations are refused at once, nothing queued */
	assert_int_equal(kvp_tier_write(c->t, &c->rec[0], 30, 1), -ENODEV);
	*n += reopen_and_check(c, *n, write);
}

static void test_tier(void **state)
{
	const struct op open_op = { "kvp_tier_open", tier_open_run, tier_open_undo,
				    tier_open_intact, -ENOMEM };
	struct tier_ctx *c = calloc(1, sizeof(*c));
	uint32_t n = 0;

	assert_non_null(c);
	assert_int_equal(tfix_init(&c->tf, &shape, NB), 0);
	sweep_both(&open_op, c);

	assert_int_equal(tier_open_run(c), 0);
	for (; n < 3; n++) {
		tfix_rec(&c->tf, n ? &c->rec[n - 1] : NULL, c->tok[n], &c->rec[n]);
		tfix_fill(&c->tf, n, c->rec[n].hash);
		c->slot[n] = tfix_write_wait(c->t, &c->rec[n], n);
		assert_true(c->slot[n] >= 0);
	}
	tier_cqe_fault(c, true, -EIO, &n);
	tier_cqe_fault(c, true, KVP_FAULT_SHORT, &n);
	tier_cqe_fault(c, false, -EIO, &n);
	tier_cqe_fault(c, false, KVP_FAULT_SHORT, &n);

	/* a refused submission: the SQE stays queued and the wait submits it, or the tier
	 * goes off; either way the write completes once and nothing is lost */
	{
		uint32_t ok = 0, failed = 0;
		int s;

		tfix_rec(&c->tf, &c->rec[n - 1], c->tok[n], &c->rec[n]);
		tfix_fill(&c->tf, n, c->rec[n].hash);
		assert_int_equal(kvp_fault_arm("io_uring_submit", 1, 1, -EIO), 0);
		s = kvp_tier_write(c->t, &c->rec[n], n, 1);
		kvp_fault_disarm();
		runs_total++;
		faults_total += kvp_fault_hits("io_uring_submit");
		assert_true(s >= 0 || s == -ENODEV);
		tfix_drain(c->t, &ok, &failed);
		assert_true(ok + failed == (s >= 0 ? 1u : 0u));
		assert_true(tfix_holds(&c->tf, n, c->rec[n].hash));
		if (reopen_and_check(c, n, true))
			n++;
		else
			assert_int_equal(ok, 0); /* a write reported done is on disk */
	}
	kvp_tier_free(c->t);
	tfix_deinit(&c->tf);
	free(c);
}

static void test_figures(void **state)
{
	/* the line tests/RELIABILITY.md quotes */
	print_message("fault sweep: %lu runs, %lu faults injected\n", runs_total, faults_total);
	assert_true(faults_total > 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_arm),	 cmocka_unit_test(test_codecs_allocate_nothing),
		cmocka_unit_test(test_pool_new), cmocka_unit_test(test_index),
		cmocka_unit_test(test_tier),	 cmocka_unit_test(test_figures),
	};
	const char *env = getenv("KVP_FAULT_ROUNDS");
	int rounds = env ? atoi(env) : 1, r = 0;

	for (int i = 0; i < (rounds > 0 ? rounds : 1) && !r; i++)
		r = cmocka_run_group_tests(tests, NULL, NULL);
	return r;
}
