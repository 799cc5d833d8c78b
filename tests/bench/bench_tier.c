/* SPDX-License-Identifier: MIT */
/*
 * bench_tier.c - the disk tier against fio on the same file system, in the same run,
 * with the same I/O unit and queue depth (target: ratio >= 0.8):
 *
 *  1. write: every slot of a fresh 1 GiB tier, in slot order (a block = 512 KiB of K/V
 *     of a 1B-class model, 16 layers x 8 KV heads x 64 x f16 x 16 tokens, plus its 4 KiB
 *     header region: one 516 KiB writev, or two fixed-buffer writes), checksum included,
 *     against fio rw=write bs=516k iodepth=32 ioengine=io_uring direct=1;
 *  2. read: every slot back in random order into pool blocks, header and sum checked,
 *     against fio rw=randread with the same unit and depth (fio checks nothing: the sum
 *     of every block read is the tier's to pay);
 *  3. rebuild: reopening the full tier, per GiB of file: the header scan (4 KiB per slot)
 *     against fio reading 4 KiB every 516 KiB (rw=read:512k), and the full scan (every
 *     byte read and summed) against fio reading the file sequentially; the whole open
 *     (which adds preallocation, ring setup and registering the pool) is printed too.
 *
 * Both the registered-buffer path (opt-in) and plain vectored I/O (the default) are
 * measured, each against fio using the same technique (fio's own figure can move
 * severalfold with --fixedbufs --registerfiles, and between identical runs on a shared
 * machine: docs/tier.md).  Each tier figure is measured right before its fio run; RUNS
 * runs; printed: medians, their ratio, and the median of the per-pair ratios.
 * The file system is $KVP_BENCH_TIER_DIR, else $TMPDIR, else /var/tmp; the size is
 * $KVP_BENCH_TIER_MB (default 1024).  The pool's pages are the daemon's default (2 MiB
 * hugetlb pages when some are reserved; KVP_BENCH_RESERVE_HUGEPAGES=1 reserves them, as
 * root, and gives them back), or 4 KiB with KVP_BENCH_TIER_4K=1; fio's buffers get the
 * same kind of pages (--mem=shmhuge), since the page size of the buffers can move
 * O_DIRECT throughput severalfold for both (docs/tier.md).  fio is the Debian package
 * (tests/deps.sh).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "tests/lib/testlib.h"
#include "tests/lib/tierfix.h"

#define RUNS 7
#define QD 32
#define NB 64  /* pool blocks: >= QD, so reads in flight never share one */
#define REAP 4 /* completions reaped (and checked) between refills, as tier.h advises */

static const struct kvp_model_shape shape = {
	.n_layers = 16,
	.n_kv_heads = 8,
	.head_dim = 64,
	.dtype = KVP_DTYPE_F16,
	.block_tokens = 16,
};

static char dir[512], tier_path[600], fio_path[600];
static uint64_t tier_bytes;
static const char *fio_mem = ""; /* fio's buffers: the same kind of pages as the pool */
static uint64_t dropped;	 /* blocks that failed their check on every read */
static char cleanup_dir[512];	 /* removed at exit, also after an error */

static void cleanup(void)
{
	if (cleanup_dir[0])
		kvp_test_rmtree(cleanup_dir);
}

#define HP_FILE "/proc/sys/vm/nr_hugepages"
#define HP_WANT 48 /* the pool's 16 MiB + fio's 16.5 MiB of 2 MiB pages, with room */

static long hp_read(const char *path)
{
	FILE *fp = fopen(path, "r");
	long v = -1;

	if (fp) {
		if (fscanf(fp, "%ld", &v) != 1)
			v = -1;
		fclose(fp);
	}
	return v;
}

static int hp_write(long v)
{
	FILE *fp = fopen(HP_FILE, "w");
	int ok;

	if (!fp)
		return -1;
	ok = fprintf(fp, "%ld\n", v) > 0;
	return fclose(fp) == 0 && ok ? 0 : -1;
}

/* Largest "bw_bytes" in fio's JSON (the one direction the job did), bytes/s. */
static double fio_bw(const char *args)
{
	char cmd[2048], line[512];
	double best = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "fio --name=b --filename='%s' --ioengine=io_uring --direct=1 --iodepth=%d "
		 "--numjobs=1 --size=%llu --output-format=json %s %s 2>/dev/null",
		 fio_path, QD, (unsigned long long)tier_bytes, fio_mem, args);
	p = popen(cmd, "r");
	if (!p) {
		perror("bench: fio");
		exit(1);
	}
	while (fgets(line, sizeof(line), p)) {
		const char *k = strstr(line, "\"bw_bytes\"");
		double v;

		if (k && sscanf(strchr(k, ':') + 1, "%lf", &v) == 1 && v > best)
			best = v;
	}
	if (pclose(p) != 0 || best <= 0) {
		fprintf(stderr, "bench: fio failed: %s\n", cmd);
		exit(1);
	}
	return best;
}

static struct kvp_tier *open_tier(struct tfix *f, uint32_t flags, double *open_s)
{
	struct kvp_tier_config c = {
		.path = tier_path, .max_bytes = tier_bytes, .queue_depth = QD, .flags = flags
	};
	struct kvp_tier_stats st;
	struct kvp_tier *t;
	double t0 = kvp_test_now_s();

	memcpy(c.model_fp, f->fp, 16);
	if (kvp_tier_open(&t, &c, f->pool) < 0) {
		fprintf(stderr, "bench: tier open failed\n");
		exit(1);
	}
	if (open_s)
		*open_s = kvp_test_now_s() - t0;
	kvp_tier_stats(t, &st);
	if (st.degraded) {
		fprintf(stderr, "bench: %s\n", kvp_tier_error(t));
		exit(1);
	}
	return t;
}

/* Fill every slot once, QD in flight; bytes/s of slots written. */
static double tier_write_all(struct tfix *f, struct kvp_tier *t, uint64_t *uids)
{
	const struct kvp_tier_layout *lay = kvp_tier_layout(t);
	struct kvp_tier_done d[QD];
	uint32_t tok[16];
	double t0 = kvp_test_now_s();

	for (uint64_t i = 0; i < lay->n_slots; i++) {
		struct kvp_index_rec rec;
		int s;

		tfix_rec(f, NULL, tok, &rec);
		while ((s = kvp_tier_write(t, &rec, (uint32_t)(i % NB), i)) == -EBUSY)
			kvp_tier_wait(t, d, REAP);
		if (s < 0) {
			fprintf(stderr, "bench: write: %s\n", strerror(-s));
			exit(1);
		}
		uids[s] = rec.uid;
	}
	tfix_drain(t, NULL, NULL);
	return (double)lay->n_slots * (double)lay->slot_bytes / (kvp_test_now_s() - t0);
}

/* Read every slot back in the order @perm; bytes/s.  Every read must pass its check. */
static double tier_read_all(struct kvp_tier *t, const uint32_t *perm, const uint64_t *uids)
{
	const struct kvp_tier_layout *lay = kvp_tier_layout(t);
	struct kvp_tier_done d[QD];
	uint32_t failed = 0, ok = 0;
	double t0 = kvp_test_now_s();

	for (uint64_t i = 0; i < lay->n_slots; i++) {
		int r;

		while ((r = kvp_tier_read(t, perm[i], uids[perm[i]], (uint32_t)(i % NB), i)) ==
		       -EBUSY) {
			int n = kvp_tier_wait(t, d, REAP);

			for (int k = 0; k < n; k++)
				failed += d[k].result != 0;
		}
		if (r < 0) {
			fprintf(stderr, "bench: read: %s\n", strerror(-r));
			exit(1);
		}
	}
	tfix_drain(t, &ok, &failed);
	dropped += failed; /* failed their check on every try: dropped, never served */
	return (double)lay->n_slots * (double)lay->slot_bytes / (kvp_test_now_s() - t0);
}

static const char *fs_name(const char *path)
{
	struct statfs s;

	if (statfs(path, &s) < 0)
		return "?";
	switch (s.f_type) {
	case 0xEF53:
		return "ext2/3/4";
	case 0x58465342:
		return "xfs";
	case 0x9123683E:
		return "btrfs";
	case 0x01021994:
		return "tmpfs";
	default:
		return "other";
	}
}

/* Median of the per-pair ratios: robust to the drift of a shared disk between pairs. */
static double paired_ratio(const double *v, const double *base, int n, int lower_better)
{
	double q[RUNS];

	for (int i = 0; i < n; i++)
		q[i] = lower_better ? base[i] / v[i] : v[i] / base[i];
	return kvp_test_median(q, n);
}

static void report(const char *name, double *v, double *base, const char *base_name, double scale,
		   const char *unit, int lower_better)
{
	double pr = paired_ratio(v, base, RUNS, lower_better);
	double mv = kvp_test_median(v, RUNS) * scale, mb = kvp_test_median(base, RUNS) * scale;

	if (lower_better)
		printf("%s: %.3f %s  (baseline: %s %.3f %s)  ratio %.3f (baseline/figure; "
		       "median of paired ratios %.3f)\n",
		       name, mv, unit, base_name, mb, unit, mb / mv, pr);
	else
		printf("%s: %.0f %s  (baseline: %s %.0f %s)  ratio %.3f (median of paired "
		       "ratios %.3f)\n",
		       name, mv, unit, base_name, mb, unit, mv / mb, pr);
}

int main(void)
{
	const char *base = getenv("KVP_BENCH_TIER_DIR");
	const char *mb = getenv("KVP_BENCH_TIER_MB");
	static const char *const fixed_opt[2] = { "--registerfiles --fixedbufs", "" };
	struct kvp_tier_layout lay;
	double w[2][RUNS], r[2][RUNS], fw[2][RUNS], fr[2][RUNS];
	double hs[RUNS], fs[RUNS], fhs[RUNS], ffs[RUNS], ho[RUNS], fo[RUNS];
	uint64_t *uids;
	uint32_t *perm;
	struct tfix f;
	char bs[32], skip[32], args[256];
	double gib;
	uint64_t rereads = 0;
	long hp_orig = -1, hp_set = -1;

	if (tfix_sh("command -v fio >/dev/null") != 0) {
		printf("bench-tier: fio is not installed (bash tests/deps.sh): skipped\n");
		return KVP_TEST_SKIP;
	}
	if (!base)
		base = getenv("TMPDIR");
	if (!base)
		base = "/var/tmp";
	setenv("TMPDIR", base, 1);
	tier_bytes = (mb ? strtoull(mb, NULL, 10) : 1024) << 20;
	/* like bench-pool: nr_hugepages is machine-wide, so reserve only when asked */
	if (getenv("KVP_BENCH_RESERVE_HUGEPAGES") && !getenv("KVP_BENCH_TIER_4K")) {
		hp_orig = hp_read(HP_FILE);
		if (hp_orig >= 0 &&
		    hp_read("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages") < HP_WANT &&
		    hp_write(hp_orig + HP_WANT) == 0)
			hp_set = hp_orig + HP_WANT;
	}
	if (tfix_init_pages(&f, &shape, NB,
			    getenv("KVP_BENCH_TIER_4K") ? KVP_PAGES_OFF : KVP_PAGES_AUTO) < 0) {
		fprintf(stderr, "bench: fixture\n");
		return 1;
	}
	snprintf(dir, sizeof(dir), "%s", f.dir);
	snprintf(cleanup_dir, sizeof(cleanup_dir), "%s", f.dir);
	atexit(cleanup);
	snprintf(tier_path, sizeof(tier_path), "%s/tier", dir);
	snprintf(fio_path, sizeof(fio_path), "%s/fio", dir);
	kvp_tier_layout_init(&lay, &shape, f.fp, tier_bytes);
	tier_bytes = lay.file_bytes; /* fio moves exactly the tier's bytes */
	gib = (double)tier_bytes / (1 << 30);
	uids = calloc(lay.n_slots, sizeof(*uids));
	perm = malloc(lay.n_slots * sizeof(*perm));
	for (uint32_t i = 0; i < lay.n_slots; i++)
		perm[i] = i;
	srand(12345);
	for (uint32_t i = lay.n_slots; i > 1; i--) {
		uint32_t j = (uint32_t)rand() % i, x = perm[i - 1];

		perm[i - 1] = perm[j];
		perm[j] = x;
	}
	for (uint32_t b = 0; b < NB; b++)
		tfix_pattern(kvp_pool_data(f.pool, b), lay.block_bytes, (struct kvp_h128){ b, 1 });
	snprintf(bs, sizeof(bs), "%llu", (unsigned long long)lay.slot_bytes);
	snprintf(skip, sizeof(skip), "%llu", (unsigned long long)(lay.slot_bytes - 4096));

	printf("bench-tier: %s on %s, %.2f GiB file, %llu slots of %llu bytes (K/V %llu), "
	       "queue depth %d, %d runs, each figure paired with its fio run\n",
	       dir, fs_name(dir), gib, (unsigned long long)lay.n_slots,
	       (unsigned long long)lay.slot_bytes, (unsigned long long)lay.block_bytes, QD, RUNS);
	if (kvp_segment_page_kind(kvp_pool_segment(f.pool)) == KVP_PAGE_HUGETLB_2M)
		fio_mem = "--mem=shmhuge";
	printf("pool pages: %s, fio buffers: %s (KVP_BENCH_TIER_4K=1: 4 KiB pages for both; "
	       "KVP_BENCH_RESERVE_HUGEPAGES=1: reserve 2 MiB pages for both)\n",
	       kvp_page_kind_name(kvp_segment_page_kind(kvp_pool_segment(f.pool))),
	       *fio_mem ? "2 MiB (--mem=shmhuge)" : "malloc (4 KiB pages)");
	kvp_bench_cpu_regime(300);

	for (int run = 0; run < RUNS; run++) {
		/* mode 0: tier with registered buffers vs fio --fixedbufs --registerfiles;
		 * mode 1: plain vectored I/O vs plain fio */
		for (int mode = 0; mode < 2; mode++) {
			struct kvp_tier_stats st;
			struct kvp_tier *t;

			unlink(tier_path);
			t = open_tier(&f, mode ? 0 : KVP_TIER_FIXED_BUFS, NULL);
			kvp_tier_stats(t, &st);
			if (!mode && !st.fixed_buffers) {
				fprintf(stderr, "bench: the pool could not be registered\n");
				return 1;
			}
			w[mode][run] = tier_write_all(&f, t, uids);
			unlink(fio_path);
			snprintf(args, sizeof(args), "--rw=write --bs=%s --fallocate=native %s", bs,
				 fixed_opt[mode]);
			fw[mode][run] = fio_bw(args);
			r[mode][run] = tier_read_all(t, perm, uids);
			kvp_tier_stats(t, &st);
			rereads += st.reread_recovered;

			snprintf(args, sizeof(args),
				 "--rw=randread --bs=%s --norandommap --randrepeat=1 %s", bs,
				 fixed_opt[mode]);
			fr[mode][run] = fio_bw(args);
			kvp_tier_free(t);
		}
		/* rebuild of the full tier the plain pass left; the scans read into buffers
		 * of their own with the file registered */
		{
			struct kvp_tier_stats st;
			double sec;
			struct kvp_tier *t = open_tier(&f, 0, &sec);

			kvp_tier_stats(t, &st);
			hs[run] = (double)st.scan_ns * 1e-9 / gib;
			ho[run] = sec / gib;
			kvp_tier_free(t);
			snprintf(args, sizeof(args), "--rw=read:%s --bs=4096 --registerfiles",
				 skip);
			fhs[run] = (double)lay.n_slots * 4096 / fio_bw(args) / gib;
			t = open_tier(&f, KVP_TIER_SCAN_FULL, &sec);
			kvp_tier_stats(t, &st);
			fs[run] = (double)st.scan_ns * 1e-9 / gib;
			fo[run] = sec / gib;
			kvp_tier_free(t);
			snprintf(args, sizeof(args), "--rw=read --bs=%s --registerfiles", bs);
			ffs[run] = (double)tier_bytes / fio_bw(args) / gib;
		}
	}

	printf("reads that lost their data in transit and were read again: %llu of %llu; "
	       "blocks dropped after failing every re-read: %llu\n",
	       (unsigned long long)rereads, (unsigned long long)RUNS * 2 * lay.n_slots,
	       (unsigned long long)dropped);
	report("tier write (registered buffers)", w[0], fw[0],
	       "fio io_uring O_DIRECT write, --fixedbufs --registerfiles", 1e-6, "MB/s", 0);
	report("tier read + check, random order (registered buffers)", r[0], fr[0],
	       "fio io_uring O_DIRECT randread, --fixedbufs --registerfiles", 1e-6, "MB/s", 0);
	report("tier write (plain I/O)", w[1], fw[1], "fio io_uring O_DIRECT write", 1e-6, "MB/s",
	       0);
	report("tier read + check, random order (plain I/O)", r[1], fr[1],
	       "fio io_uring O_DIRECT randread", 1e-6, "MB/s", 0);
	report("rebuild, header scan", hs, fhs, "fio 4 KiB every slot", 1, "s/GiB", 1);
	printf("  the whole open with that scan (file, lock, preallocation, ring, registration, "
	       "scan): %.3f s/GiB\n",
	       kvp_test_median(ho, RUNS));
	report("rebuild, full scan, every byte summed", fs, ffs, "fio sequential read", 1, "s/GiB",
	       1);
	printf("  the whole open with that scan: %.3f s/GiB\n", kvp_test_median(fo, RUNS));
	free(uids);
	free(perm);
	tfix_deinit(&f);
	/* give the pages back, unless someone else changed the setting meanwhile */
	if (hp_set >= 0 && hp_read(HP_FILE) == hp_set)
		hp_write(hp_orig);
	return 0;
}
