/* SPDX-License-Identifier: MIT */
/*
 * bench_pool.c - the three shm/ figures, each next to a baseline measured in the same
 * run (medians of several runs):
 *
 *  1. block alloc+free pairs per second, against malloc+free of 4 KiB chunks in the same
 *     batch pattern.  Baseline choice: malloc is what a fixed-size object allocator
 *     replaces (a pointer bump cannot free, so it would not be doing the same work).
 *     Heap trimming is turned off first (mallopt), so glibc carves the chunks from memory
 *     it keeps instead of returning it to the kernel every batch: a fair, fast bar.
 *  2. looking up a 32,768-token prompt (2,048 blocks of 16) in an index holding
 *     1,000,000 blocks, against hashing the same 32,768 tokens with XXH3-128 in one call
 *     (the raw cost of reading and hashing those bytes).  The lookup is given the prompt
 *     plus one more token, since a lookup never covers the last prompt token: so all
 *     2,048 cached blocks are matched.
 *  3. faulting in a 512 MiB pool segment with 2 MiB hugetlb pages, against 4 KiB pages.
 *     Needs 257 free huge pages.  With fewer it prints the 4 KiB figure and says why the
 *     huge-page one is skipped; it reserves pages itself only when asked to
 *     (KVP_BENCH_RESERVE_HUGEPAGES=1, as root), because nr_hugepages is machine-wide and
 *     other programs (run-all.sh, a running kvpoold) may be relying on its value.  It then
 *     restores the old value, unless someone else changed it meanwhile.
 */
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "shm/index.h"
#include "tests/lib/testlib.h"

#define RUNS 7

static const struct kvp_model_shape tiny = {
	.n_layers = 1,
	.n_kv_heads = 1,
	.head_dim = 16,
	.dtype = KVP_DTYPE_F32,
	.block_tokens = 16,
};

static struct kvp_pool *make_pool(uint32_t n_blocks)
{
	struct kvp_pool_config cfg = { .shape = tiny,
				       .n_blocks = n_blocks,
				       .pages = KVP_PAGES_OFF,
				       .name = "kvpbench",
				       .no_prefault = 1 };
	struct kvp_pool *p;
	int r = kvp_pool_new(&p, &cfg);

	if (r < 0) {
		fprintf(stderr, "bench: pool of %u blocks: %s\n", n_blocks, strerror(-r));
		exit(1);
	}
	return p;
}

/* ---- 1. alloc + free ---- */

#define BATCH 256
#define ITERS 4000

static void bench_alloc_free(void)
{
	struct kvp_pool *p = make_pool(65536);
	double pool_s[RUNS], malloc_s[RUNS];
	static void *volatile ptrs[BATCH];
	uint32_t ids[BATCH];

	mallopt(M_TRIM_THRESHOLD, 256 << 20);
	mallopt(M_MMAP_THRESHOLD, 64 << 20);
	for (int r = 0; r < RUNS; r++) {
		uint64_t t0 = kvp_test_now_ns();

		for (int it = 0; it < ITERS; it++) {
			for (int i = 0; i < BATCH; i++)
				if (kvp_pool_alloc(p, KVP_NODE_ANY, &ids[i]) < 0)
					abort();
			for (int i = 0; i < BATCH; i++)
				kvp_pool_unref(p, ids[i]);
		}
		pool_s[r] = (double)(kvp_test_now_ns() - t0) * 1e-9;

		t0 = kvp_test_now_ns();
		for (int it = 0; it < ITERS; it++) {
			for (int i = 0; i < BATCH; i++)
				ptrs[i] = malloc(4096);
			for (int i = 0; i < BATCH; i++)
				free(ptrs[i]);
		}
		malloc_s[r] = (double)(kvp_test_now_ns() - t0) * 1e-9;
	}
	double ops = (double)ITERS * BATCH;

	kvp_bench_report("block alloc+free", ops / kvp_test_median(pool_s, RUNS) * 1e-6,
			 "M pairs/s", "malloc+free 4 KiB",
			 ops / kvp_test_median(malloc_s, RUNS) * 1e-6, "M pairs/s");
	kvp_pool_free(p);
}

/* ---- 2. lookup in a 1,000,000-block index ---- */

#define INDEX_BLOCKS 1000000u
#define PROMPT_BLOCKS 2048u
#define BT 16u
#define LOOKUP_RUNS 21

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t next_token(void)
{
	return (uint32_t)(kvp_test_xorshift(&rng) % 128256); /* a Llama-3-sized vocabulary */
}

static void bench_lookup(void)
{
	struct kvp_pool *p = make_pool(INDEX_BLOCKS);
	uint32_t *toks = malloc(((size_t)PROMPT_BLOCKS * BT + 1) * sizeof(*toks));
	uint32_t *ids = malloc(PROMPT_BLOCKS * sizeof(*ids));
	uint32_t *target = malloc(((size_t)PROMPT_BLOCKS * BT + 1) * sizeof(*target));
	struct kvp_extra_keys ek = { .model_fp = "bench-model-0001", .kv_dtype = KVP_DTYPE_F16 };
	double look_s[LOOKUP_RUNS], hash_s[LOOKUP_RUNS];
	struct kvp_prefix_key key;
	struct kvp_index *idx;
	uint32_t done = 0, chain = 0, out;
	volatile uint64_t sink = 0;
	uint64_t t_fill = kvp_test_now_ns();

	if (!toks || !ids || !target || kvp_index_new(&idx, p) < 0 ||
	    kvp_prefix_key_init(&key, &ek) < 0)
		abort();
	/* fill: prompts of 2,048 random-token blocks until 1,000,000 blocks are cached */
	while (done < INDEX_BLOCKS) {
		uint32_t n = INDEX_BLOCKS - done < PROMPT_BLOCKS ? INDEX_BLOCKS - done :
								   PROMPT_BLOCKS;
		uint32_t parent = KVP_BLOCK_NONE;

		for (uint32_t i = 0; i < n * BT; i++)
			toks[i] = next_token();
		for (uint32_t b = 0; b < n; b++) {
			if (kvp_pool_alloc(p, KVP_NODE_ANY, &ids[b]) < 0 ||
			    kvp_index_publish(idx, &key, parent, toks + b * BT, ids[b], &out) != 0)
				abort();
			parent = ids[b];
		}
		for (uint32_t b = 0; b < n; b++)
			kvp_pool_unref(p, ids[b]);
		if (chain++ == 200) /* a prompt from the middle of the fill */
			memcpy(target, toks, (size_t)PROMPT_BLOCKS * BT * sizeof(*toks));
		done += n;
	}
	target[PROMPT_BLOCKS * BT] = 1; /* the one token a lookup leaves to compute */
	printf("index: %u blocks cached in %.2f s\n", done,
	       (double)(kvp_test_now_ns() - t_fill) * 1e-9);

	for (int r = 0; r < LOOKUP_RUNS; r++) {
		uint64_t t0 = kvp_test_now_ns();
		int hits = kvp_index_lookup(idx, &key, target, PROMPT_BLOCKS * BT + 1, ids,
					    PROMPT_BLOCKS);

		look_s[r] = (double)(kvp_test_now_ns() - t0) * 1e-9;
		if (hits != (int)PROMPT_BLOCKS) {
			fprintf(stderr, "bench: lookup hit %d of %u blocks\n", hits, PROMPT_BLOCKS);
			exit(1);
		}
		for (int i = 0; i < hits; i++)
			kvp_pool_unref(p, ids[i]);

		t0 = kvp_test_now_ns();
		XXH128_hash_t h = XXH3_128bits(target,
					       (size_t)PROMPT_BLOCKS * BT * sizeof(*target));

		hash_s[r] = (double)(kvp_test_now_ns() - t0) * 1e-9;
		sink += h.low64;
	}
	kvp_bench_report("lookup 32768-token prompt, 2048 blocks hit, 1M-block index",
			 kvp_test_median(look_s, LOOKUP_RUNS) * 1e6, "us",
			 "XXH3-128 of the 32768 tokens", kvp_test_median(hash_s, LOOKUP_RUNS) * 1e6,
			 "us");
	(void)sink;
	kvp_index_free(idx);
	kvp_pool_free(p);
	free(toks);
	free(ids);
	free(target);
}

/* ---- 3. fault-in, 4 KiB vs 2 MiB pages ---- */

#define FAULT_BYTES (512u << 20)
#define FAULT_RUNS 5

static double fault_once(enum kvp_page_mode mode, int *err)
{
	struct kvp_segment *seg;
	struct kvp_geom g;
	uint64_t t0;
	double s;

	kvp_geom_init(&g, &tiny);
	*err = kvp_segment_open(&seg, &g, FAULT_BYTES / g.block_stride, mode, "kvpbench");
	if (*err < 0)
		return 0;
	t0 = kvp_test_now_ns();
	*err = kvp_segment_prefault(seg);
	s = (double)(kvp_test_now_ns() - t0) * 1e-9;
	kvp_segment_close(seg);
	return s;
}

static long read_nr_hugepages(void)
{
	FILE *f = fopen("/proc/sys/vm/nr_hugepages", "re");
	long n = -1;

	if (f) {
		if (fscanf(f, "%ld", &n) != 1)
			n = -1;
		fclose(f);
	}
	return n;
}

static int write_nr_hugepages(long n)
{
	FILE *f = fopen("/proc/sys/vm/nr_hugepages", "we");
	int ok;

	if (!f)
		return -errno;
	ok = fprintf(f, "%ld\n", n) > 0;
	return fclose(f) == 0 && ok ? 0 : -EIO;
}

static void bench_fault(void)
{
	long need = FAULT_BYTES / KVP_HUGE_PAGE_BYTES + 1; /* + the header page */
	long orig = read_nr_hugepages(), free_pages = kvp_hugetlb_free_pages();
	const char *ask = getenv("KVP_BENCH_RESERVE_HUGEPAGES");
	double small[FAULT_RUNS], huge[FAULT_RUNS];
	long got = -1;
	int err = 0;

	for (int r = 0; r < FAULT_RUNS; r++) {
		small[r] = fault_once(KVP_PAGES_OFF, &err);
		if (err < 0) {
			fprintf(stderr, "bench: 4 KiB segment: %s\n", strerror(-err));
			exit(1);
		}
	}
	if (free_pages < need && ask && strcmp(ask, "1") == 0 && geteuid() == 0 && orig >= 0 &&
	    write_nr_hugepages(orig + need - (free_pages > 0 ? free_pages : 0)) == 0) {
		got = read_nr_hugepages(); /* the kernel may reserve fewer than asked */
		free_pages = kvp_hugetlb_free_pages();
	}
	err = free_pages < need ? -ENOMEM : 0;
	for (int r = 0; r < FAULT_RUNS && !err; r++)
		huge[r] = fault_once(KVP_PAGES_REQUIRE_HUGE, &err);
	if (err < 0) {
		/* no ratio without the huge-page figure: say so rather than print half of one */
		printf("fault-in 512 MiB, 2 MiB pages: skipped: %s (%ld free huge pages, need %ld; "
		       "reserve them in /proc/sys/vm/nr_hugepages, or run as root with "
		       "KVP_BENCH_RESERVE_HUGEPAGES=1)\n",
		       strerror(-err), free_pages, need);
		printf("fault-in 512 MiB, 4 KiB pages: %.1f ms (no same-run baseline)\n",
		       kvp_test_median(small, FAULT_RUNS) * 1e3);
	} else {
		kvp_bench_report("fault-in 512 MiB pool, 2 MiB hugetlb pages",
				 kvp_test_median(huge, FAULT_RUNS) * 1e3, "ms", "4 KiB pages",
				 kvp_test_median(small, FAULT_RUNS) * 1e3, "ms");
	}
	/* put back only our own change: a different value now is someone else's */
	if (got >= 0 && read_nr_hugepages() == got && write_nr_hugepages(orig) < 0)
		fprintf(stderr, "bench: could not restore nr_hugepages to %ld\n", orig);
}

int main(void)
{
	kvp_bench_cpu_regime(500);
	bench_alloc_free();
	bench_lookup();
	bench_fault();
	return 0;
}
