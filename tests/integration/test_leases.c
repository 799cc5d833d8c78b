/* SPDX-License-Identifier: MIT */
/*
 * test_leases.c - LEASE / RELEASE against a real kvpoold (the tiny model):
 *  - the K/V read through a lease, in the client's read-only mapping, is bit-equal to
 *    what kvpool-run computes for the same prompt (--dump-kv), also after enough other
 *    traffic to evict everything not held: a lease keeps its blocks;
 *  - generations: once released, the prompt's blocks are evicted and reused by other
 *    prompts; the (block, generation) pairs leased later never repeat an earlier one,
 *    and a reused block id shows a new generation;
 *  - lifetime: RELEASE, disconnect and the time limit each end a lease (status counts
 *    each); limits: leases.max_per_conn (BUSY) and leases.max_ms (the granted ttl).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "kvpool/kvpool.h"
#include "tests/integration/jsonq.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

#define BT 16u /* pool.block_size (the default) */

/* @n ids of prompt number @seed: distinct from the first id on, inside the vocabulary. */
static void ids_of(int32_t *ids, uint32_t n, uint32_t seed)
{
	uint32_t x = 2166136261u ^ seed;

	for (uint32_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		ids[i] = (int32_t)(3 + (x >> 8) % 250);
	}
	ids[0] = (int32_t)(3 + seed % 250);
}

/* One greedy request of @ids (1 new token).  Return its status. */
static int generate(struct kvp_client *k, const int32_t *ids, uint32_t n)
{
	struct kvp_client_prompt pr = { .tokens = ids, .n_tokens = n };
	struct kvp_client_params p;
	struct kvp_usage u;

	kvp_client_params_init(&p);
	p.max_new_tokens = 1;
	return kvp_client_generate(k, &pr, &p, NULL, NULL, &u);
}

/* kvpool-run's name of K/V type @dtype (enum kvp_dtype). */
static const char *dtype_arg(uint32_t dtype)
{
	static const char *const names[] = { "f32", "f16", "bf16", "int8", "int4" };

	assert_true(dtype < sizeof(names) / sizeof(names[0]));
	return names[dtype];
}

/* kvpool-run --dump-kv of @ids into @path, K/V stored as @dtype.  Return: its exit status. */
static int run_dump(const char *model, const int32_t *ids, uint32_t n, uint32_t dtype,
		    const char *path)
{
	char bin[512], *toks = malloc((size_t)n * 12 + 1);
	size_t off = 0;
	pid_t pid;
	int st;

	assert_non_null(toks);
	assert_int_equal(kvp_test_build_path(bin, sizeof(bin), "compute/kvpool-run"), 0);
	for (uint32_t i = 0; i < n; i++)
		off += (size_t)sprintf(toks + off, "%s%d", i ? "," : "", ids[i]);
	pid = fork();
	if (pid == 0) {
		execl(bin, bin, "-m", model, "--tokens", toks, "-n", "1", "--threads", "1",
		      "--kv-dtype", dtype_arg(dtype), "--dump-kv", path, (char *)NULL);
		_exit(127);
	}
	free(toks);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* The status report's figure at @path, once the engine has published it (<= 3 s). */
static double status_num_until(struct kvpd *d, const char *path, double want)
{
	double v = -1, t_end = kvp_test_now_s() + 3;

	do {
		struct jsonq *j = kvpd_status(d);

		assert_non_null(j);
		v = jsonq_num(j, path, -1);
		jsonq_free(j);
		if (v == want)
			break;
		usleep(20000);
	} while (kvp_test_now_s() < t_end);
	return v;
}

/* Bytes of one block: the K/V of all layers and heads (include/kvpool/layout.h). */
static size_t block_bytes(const struct kvp_lease *l)
{
	return (size_t)kvp_layout_block_bytes(&l->shape);
}

/* Every leased block equals kvpool-run's block of the same index, byte for byte. */
static void check_bits(struct kvp_client *k, const struct kvp_client_lease *l, const uint8_t *ref,
		       size_t ref_len)
{
	const struct kvp_lease *h = kvp_client_lease_info(l);
	size_t bb = block_bytes(h), len = 0;
	const uint8_t *pool = kvp_client_pool(k, &len);

	assert_true(ref_len >= (size_t)h->n_blocks * bb);
	for (uint32_t i = 0; i < h->n_blocks; i++) {
		const struct kvp_lease_block *b = kvp_client_lease_block(l, i);

		assert_non_null(b);
		assert_true(b->offset + bb <= len);
		if (memcmp(pool + b->offset, ref + (size_t)i * bb, bb))
			fail_msg("leased block %u (id %u) differs from kvpool-run's", i, b->block);
		/*
		 * the accessor: K and V of each (layer, head) where the layout puts them, the
		 * runs back to back: a layer's K heads, then its V heads (of f32/f16/bf16 runs,
		 * ((layer * 2 + v) * n_kv_heads + head) runs of one size in)
		 */
		size_t at = 0;

		for (uint32_t layer = 0; layer < h->shape.n_layers; layer++)
			for (int v = 0; v < 2; v++)
				for (uint32_t hd = 0; hd < h->shape.n_kv_heads; hd++) {
					const uint8_t *p = kvp_client_lease_kv(k, l, i, layer, v,
									       hd);
					size_t run = (size_t)kvp_layout_run_bytes(&h->shape,
										  (uint32_t)v);

					assert_ptr_equal(p, pool + b->offset + at);
					assert_memory_equal(p, ref + (size_t)i * bb + at, run);
					at += run;
				}
		assert_int_equal(at, bb);
	}
	assert_null(kvp_client_lease_kv(k, l, h->n_blocks, 0, 0, 0));
	assert_null(kvp_client_lease_kv(k, l, 0, h->shape.n_layers, 0, 0));
}

static void bits_and_pressure(uint32_t dtype, uint32_t n_ids, uint32_t n_leased);

static void test_bits_and_pressure(void **state)
{
	bits_and_pressure(KVP_DTYPE_F16, 40, 2); /* the daemon's default, as llama.cpp's */
}

/* f32 and bf16 blocks: every type's bytes as kvpool-run --dump-kv writes them */
static void test_bits_and_pressure_f32(void **state)
{
	bits_and_pressure(KVP_DTYPE_F32, 40, 2);
}

static void test_bits_and_pressure_bf16(void **state)
{
	bits_and_pressure(KVP_DTYPE_BF16, 40, 2);
}

/* int8 blocks: the quantized bytes and their scales, in the layout LEASED names */
static void test_bits_and_pressure_int8(void **state)
{
	bits_and_pressure(KVP_DTYPE_INT8, 40, 2);
}

/*
 * int4 blocks: only those out of the residual window (32 tokens by default) are final,
 * published and leased: of 80 ids, (80 - 32) / 16 = 3 blocks, the ones --dump-kv writes
 */
static void test_bits_and_pressure_int4(void **state)
{
	bits_and_pressure(KVP_DTYPE_INT4, 80, 3);
}

static void bits_and_pressure(uint32_t dtype, uint32_t n_ids, uint32_t n_leased)
{
	/*
	 * @n_ids ids: @n_leased full blocks leased; then other prompts fill the 1 MiB pool twice.
	 * Bit equality needs the same chunk boundaries as kvpool-run's one chunk: the fifo
	 * policy's fixed chunks (256 tokens) rather than the fair policy's time-sized ones,
	 * which a slow build (sanitizers) cuts smaller; and the same f32 path: each process
	 * measures sgemm against our kernel, and a loaded machine can tip one of them.
	 */
	const char *args[] = { "--pool-size", "1M",	    "--threads",      "1", "--sched-policy",
			       "fifo",	      "--kv-dtype", dtype_arg(dtype), NULL };
	int32_t ids[80], other[4 * BT];
	struct kvp_client_lease *l = NULL, *l2 = NULL;
	struct kvp_client *k = NULL;
	char path[400];
	uint8_t *ref;
	size_t ref_len;
	struct kvpd d;
	uint32_t n_pool;

	assert_int_equal(setenv("KVP_F32_GEMM", "kvpool", 1), 0); /* both inherit it */
	assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
	ids_of(ids, n_ids, 1);
	assert_int_equal(kvp_client_connect(&k, d.sock), 0);
	assert_int_equal(kvp_client_lease(k, ids, n_ids, NULL, 0, 0, &l), 0);
	assert_int_equal(kvp_client_lease_info(l)->n_blocks, 0); /* nothing cached yet */
	assert_int_equal(kvp_client_lease_info(l)->lease_id, 0);
	assert_int_equal(kvp_client_release(k, l), 0);
	assert_int_equal(generate(k, ids, n_ids), 0);
	assert_int_equal(kvp_client_lease(k, ids, n_ids, NULL, 0, 0, &l), 0);
	assert_int_equal(kvp_client_lease_info(l)->n_blocks, n_leased);
	assert_true(kvp_client_lease_info(l)->lease_id != 0);
	/* a salt partitions: the same ids under another salt hold nothing */
	assert_int_equal(kvp_client_lease(k, ids, n_ids, "s", 1, 0, &l2), 0);
	assert_int_equal(kvp_client_lease_info(l2)->n_blocks, 0);
	kvp_client_release(k, l2);

	snprintf(path, sizeof(path), "%s/kv.bin", d.dir);
	assert_int_equal(kvp_client_lease_info(l)->shape.dtype, dtype);
	assert_int_equal(run_dump(d.model, ids, n_ids, dtype, path), 0);
	ref = (uint8_t *)kvp_test_read_file(path, &ref_len);
	assert_non_null(ref);
	assert_int_equal(ref_len, n_leased * block_bytes(kvp_client_lease_info(l)));
	check_bits(k, l, ref, ref_len);

	/* pressure: twice the pool in other prompts; the leased blocks stay as they were */
	n_pool = kvp_client_welcome(k)->n_blocks;
	for (uint32_t i = 0; i < n_pool / 2 + 8; i++) {
		ids_of(other, 4 * BT, 100 + i);
		assert_int_equal(generate(k, other, 4 * BT), 0);
	}
	assert_true(status_num_until(&d, "index.evictions", -2) > 0);
	check_bits(k, l, ref, ref_len);
	assert_int_equal(kvp_client_release(k, l), 0);
	free(ref);
	kvp_client_close(k);
	kvpd_cleanup(&d);
	unsetenv("KVP_F32_GEMM");
}

static void test_generation_tells_reuse(void **state)
{
	const char *args[] = { "--pool-size", "1M", "--lease-max-per-conn", "64", NULL };
	struct kvp_lease_block old[2];
	int32_t ids[2 * BT + 1], other[4 * BT];
	struct kvp_client_lease *l = NULL;
	struct kvp_client *k = NULL;
	struct kvpd d;
	uint32_t n_pool, seen_reused = 0;

	(void)state;
	assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
	assert_int_equal(kvp_client_connect(&k, d.sock), 0);
	ids_of(ids, 2 * BT + 1, 7);
	assert_int_equal(generate(k, ids, 2 * BT + 1), 0);
	assert_int_equal(kvp_client_lease(k, ids, 2 * BT + 1, NULL, 0, 0, &l), 0);
	assert_int_equal(kvp_client_lease_info(l)->n_blocks, 2);
	old[0] = *kvp_client_lease_block(l, 0);
	old[1] = *kvp_client_lease_block(l, 1);
	assert_int_equal(kvp_client_release(k, l), 0);

	/* other prompts through the whole pool, twice: the released blocks are reused */
	n_pool = kvp_client_welcome(k)->n_blocks;
	for (uint32_t i = 0; i < n_pool / 2; i++) {
		ids_of(other, 4 * BT, 1000 + i);
		assert_int_equal(generate(k, other, 4 * BT), 0);
	}
	assert_int_equal(kvp_client_lease(k, ids, 2 * BT + 1, NULL, 0, 0, &l), 0);
	assert_int_equal(kvp_client_lease_info(l)->n_blocks, 0); /* evicted */
	kvp_client_release(k, l);
	/* every cached block now: no (block, generation) pair is an old one; the old ids
	 * that were reused show a new generation */
	for (uint32_t i = n_pool / 4; i < n_pool / 2; i++) {
		ids_of(other, 4 * BT, 1000 + i);
		assert_int_equal(kvp_client_lease(k, other, 4 * BT, NULL, 0, 0, &l), 0);
		for (uint32_t b = 0; b < kvp_client_lease_info(l)->n_blocks; b++) {
			const struct kvp_lease_block *x = kvp_client_lease_block(l, b);

			for (int o = 0; o < 2; o++) {
				if (x->block != old[o].block)
					continue;
				assert_int_not_equal(x->generation, old[o].generation);
				seen_reused++;
			}
		}
		assert_int_equal(kvp_client_release(k, l), 0);
	}
	fprintf(stderr, "old blocks %u/%u seen reused in later leases: %u\n", old[0].block,
		old[1].block, seen_reused);
	assert_true(seen_reused >= 1);
	kvp_client_close(k);
	kvpd_cleanup(&d);
}

static void test_lifetime_and_limits(void **state)
{
	const char *args[] = { "--pool-size", "8M", "--lease-max-per-conn", "2", "--lease-max-ms",
			       "400",	      NULL };
	struct kvp_client_lease *a = NULL, *b = NULL, *c3 = NULL;
	struct kvp_client *k = NULL, *k2 = NULL;
	int32_t ids[2 * BT + 1];
	struct kvpd d;
	int r;

	(void)state;
	assert_int_equal(kvpd_setup(&d, "tiny", args), 0);
	assert_int_equal(kvp_client_connect(&k, d.sock), 0);
	ids_of(ids, 2 * BT + 1, 3);
	assert_int_equal(generate(k, ids, 2 * BT + 1), 0);

	/* RELEASE ends it */
	assert_int_equal(kvp_client_lease(k, ids, 2 * BT + 1, NULL, 0, 100000, &a), 0);
	assert_int_equal(kvp_client_lease_info(a)->ttl_ms, 400); /* capped by leases.max_ms */
	assert_true(status_num_until(&d, "leases.active", 1) == 1);
	assert_int_equal(kvp_client_release(k, a), 0);
	assert_true(status_num_until(&d, "leases.released", 1) == 1);
	assert_true(status_num_until(&d, "leases.active", 0) == 0);

	/* the limit per connection: a third is refused BUSY, the connection stays */
	assert_int_equal(kvp_client_lease(k, ids, 2 * BT + 1, NULL, 0, 0, &a), 0);
	assert_int_equal(kvp_client_lease(k, ids, 2 * BT + 1, NULL, 0, 0, &b), 0);
	r = kvp_client_lease(k, ids, 2 * BT + 1, NULL, 0, 0, &c3);
	assert_int_equal(r, KVP_E_BUSY);
	assert_null(c3);
	assert_non_null(strstr(kvp_client_errmsg(k), "leases.max_per_conn"));
	assert_true(status_num_until(&d, "leases.refused", 1) == 1);
	/* the time limit: both end by themselves */
	assert_true(status_num_until(&d, "leases.expired", 2) == 2);
	assert_true(status_num_until(&d, "leases.active", 0) == 0);
	kvp_client_release(k, a); /* an expired lease: RELEASE is ignored */
	kvp_client_release(k, b);
	assert_int_equal(generate(k, ids, 2 * BT + 1), 0); /* the connection still works */

	/* the connection's end releases what it holds */
	assert_int_equal(kvp_client_connect(&k2, d.sock), 0);
	assert_int_equal(kvp_client_lease(k2, ids, 2 * BT + 1, NULL, 0, 0, &a), 0);
	assert_int_equal(kvp_client_lease_info(a)->n_blocks, 2);
	kvp_client_lease_free(a); /* no RELEASE: the daemon holds it until the close */
	assert_true(status_num_until(&d, "leases.active", 1) == 1);
	kvp_client_close(k2);
	assert_true(status_num_until(&d, "leases.closed", 1) == 1);
	assert_true(status_num_until(&d, "leases.active", 0) == 0);
	assert_true(status_num_until(&d, "pool.blocks_used", 0) == 0);
	kvp_client_close(k);
	kvpd_cleanup(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bits_and_pressure),
		cmocka_unit_test(test_bits_and_pressure_f32),
		cmocka_unit_test(test_bits_and_pressure_bf16),
		cmocka_unit_test(test_bits_and_pressure_int8),
		cmocka_unit_test(test_bits_and_pressure_int4),
		cmocka_unit_test(test_generation_tells_reuse),
		cmocka_unit_test(test_lifetime_and_limits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
