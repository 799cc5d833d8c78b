/* SPDX-License-Identifier: MIT */
/*
 * testlib.h - shared fixtures for tests and benchmarks: temporary directories, the
 * build-tree paths of our programs, monotonic time, medians, and the benchmark report
 * line (a figure next to the baseline measured in the same run, and their ratio).
 */
#ifndef KVP_TESTS_TESTLIB_H
#define KVP_TESTS_TESTLIB_H

#include <stddef.h>
#include <stdint.h>

/* Exit status that meson (and liburing's tests) read as "skipped". */
#define KVP_TEST_SKIP 77

/* Monotonic clock in nanoseconds / seconds. */
uint64_t kvp_test_now_ns(void);
double kvp_test_now_s(void);

/*
 * kvp_test_tmpdir() - make a fresh private directory under $TMPDIR (or /tmp)
 * @buf: out; at least 256 bytes
 * Return: 0 or -errno.  kvp_test_rmtree() removes it again.
 */
int kvp_test_tmpdir(char *buf, size_t cap);
int kvp_test_rmtree(const char *path);

/*
 * kvp_test_read_file() - the whole file at @path, NUL-terminated (also when binary)
 * @len: out, may be NULL; the bytes read, without the NUL
 * Return: a malloc()ed buffer the caller frees, or NULL (errno set) when it cannot be read.
 */
char *kvp_test_read_file(const char *path, size_t *len);

/* kvp_test_write_file() - create or truncate @path with @text.  Return: 0 or -errno. */
int kvp_test_write_file(const char *path, const char *text);

/*
 * kvp_test_build_path() - path of a built file, e.g. "compute/kvpool-mkmodel"
 * Uses $KVP_BUILD_DIR (set by meson test), else the directory above the test binary.
 * Return: 0, or -ENAMETOOLONG.
 */
int kvp_test_build_path(char *buf, size_t cap, const char *rel);

/*
 * kvp_test_xorshift() - the next value of Marsaglia's xorshift64 (13, 7, 17) over *@s
 * (seeded non-zero): the tests' one reproducible PRNG; each caller keeps its own state.
 */
uint64_t kvp_test_xorshift(uint64_t *s);

/*
 * kvp_test_fill_ids() - @n token ids 3 + kvp_test_xorshift(@s) % @mod: random prompts
 * past <unk> <s> </s> of the synthetic byte-level vocabularies
 */
void kvp_test_fill_ids(uint64_t *s, int32_t *t, uint32_t n, uint32_t mod);

/* /proc/loadavg's line without its newline ("?" when unreadable): a static buffer. */
const char *kvp_test_loadavg(void);

/* Sorts @v in place and returns its median (n >= 1). */
double kvp_test_median(double *v, int n);

/* Nearest-rank percentile @p (0..100) of a sorted array. */
double kvp_test_percentile_sorted(const double *v, int n, double p);

/*
 * kvp_bench_report() - one benchmark line:
 *   "name: value unit  (baseline: base_name base_value unit)  ratio R"
 * where R = value / base_value.  Both figures are medians of the same run.
 */
void kvp_bench_report(const char *name, double value, const char *unit, const char *base_name,
		      double base_value, const char *base_unit);

/*
 * kvp_bench_cpu_regime() - does each of two threads get a CPU of its own right now?
 * Spins two threads for ~@ms milliseconds and measures the fraction of wall time each
 * loses; prints "cpu regime: dedicated|shared (lost N%)" and returns the lost fraction.
 * On a shared machine two-thread figures are only comparable within one regime.
 */
double kvp_bench_cpu_regime(unsigned int ms);

#endif /* KVP_TESTS_TESTLIB_H */
