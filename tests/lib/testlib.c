/* SPDX-License-Identifier: MIT */
/*
 * testlib.c - fixtures shared by tests and benchmarks (see testlib.h).
 */
#include "tests/lib/testlib.h"

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/stats.h"
#include "util/time.h"

uint64_t kvp_test_now_ns(void)
{
	return kvp_now_ns();
}

double kvp_test_now_s(void)
{
	return (double)kvp_test_now_ns() * 1e-9;
}

int kvp_test_tmpdir(char *buf, size_t cap)
{
	const char *base = getenv("TMPDIR");
	int n;

	if (!base || !*base)
		base = "/tmp";
	n = snprintf(buf, cap, "%s/kvptest.XXXXXX", base);
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	if (!mkdtemp(buf))
		return -errno;
	return 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path) < 0 ? -1 : 0;
}

int kvp_test_rmtree(const char *path)
{
	if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) < 0)
		return -errno;
	return 0;
}

char *kvp_test_read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t n = 0, cap = 0;

	if (!f)
		return NULL;
	for (;;) {
		size_t got;

		if (cap - n < 4097) {
			char *grown = realloc(buf, cap ? cap * 2 : 8192);

			if (!grown)
				goto out_fail;
			buf = grown;
			cap = cap ? cap * 2 : 8192;
		}
		got = fread(buf + n, 1, cap - n - 1, f);
		n += got;
		if (!got)
			break;
	}
	if (ferror(f)) {
		errno = EIO;
		goto out_fail;
	}
	fclose(f);
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
out_fail:
	fclose(f);
	free(buf);
	return NULL;
}

int kvp_test_write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -errno;
	fputs(text, f);
	return fclose(f) ? -errno : 0;
}

uint64_t kvp_test_xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

void kvp_test_fill_ids(uint64_t *s, int32_t *t, uint32_t n, uint32_t mod)
{
	for (uint32_t i = 0; i < n; i++)
		t[i] = 3 + (int32_t)(kvp_test_xorshift(s) % mod);
}

int kvp_test_build_path(char *buf, size_t cap, const char *rel)
{
	const char *dir = getenv("KVP_BUILD_DIR");
	int n;

	if (dir && *dir) {
		n = snprintf(buf, cap, "%s/%s", dir, rel);
	} else {
		char self[4096];
		ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
		char *slash;

		if (len < 0)
			return -errno;
		self[len] = '\0';
		/* tests live in <build>/tests/ */
		slash = strrchr(self, '/');
		if (slash)
			*slash = '\0';
		slash = strrchr(self, '/');
		if (slash)
			*slash = '\0';
		n = snprintf(buf, cap, "%s/%s", self, rel);
	}
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	return 0;
}

const char *kvp_test_loadavg(void)
{
	static char buf[128];
	FILE *f = fopen("/proc/loadavg", "r");

	buf[0] = 0;
	if (!f || !fgets(buf, sizeof(buf), f))
		snprintf(buf, sizeof(buf), "?");
	if (f)
		fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	return buf;
}

double kvp_test_median(double *v, int n)
{
	kvp_sort_doubles(v, (size_t)n);
	if (n % 2)
		return v[n / 2];
	return 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double kvp_test_percentile_sorted(const double *v, int n, double p)
{
	return kvp_percentile_sorted(v, n > 0 ? (size_t)n : 0, p);
}

void kvp_bench_report(const char *name, double value, const char *unit, const char *base_name,
		      double base_value, const char *base_unit)
{
	printf("%s: %.4g %s  (baseline: %s %.4g %s)  ratio %.3f\n", name, value, unit, base_name,
	       base_value, base_unit, base_value != 0 ? value / base_value : 0.0);
	fflush(stdout);
}

struct spin_arg {
	uint64_t run_ns;
	uint64_t lost_ns;
};

/* Spin, counting gaps between clock reads longer than 50 us as time taken from us. */
static void *spin(void *p)
{
	struct spin_arg *a = p;
	uint64_t start = kvp_test_now_ns();
	uint64_t prev = start;
	uint64_t now;

	do {
		now = kvp_test_now_ns();
		if (now - prev > 50000)
			a->lost_ns += now - prev;
		prev = now;
	} while (now - start < a->run_ns);
	return NULL;
}

double kvp_bench_cpu_regime(unsigned int ms)
{
	struct spin_arg a[2] = { { .run_ns = ms * 1000000ull }, { .run_ns = ms * 1000000ull } };
	pthread_t t;
	double lost;

	if (pthread_create(&t, NULL, spin, &a[1]) != 0) {
		spin(&a[0]);
		lost = 0;
	} else {
		spin(&a[0]);
		pthread_join(t, NULL);
		lost = (double)(a[0].lost_ns + a[1].lost_ns) / (2.0 * a[0].run_ns);
	}
	printf("cpu regime: %s (two spinning threads lost %.0f%% of their time)\n",
	       lost > 0.25 ? "shared" : "dedicated", lost * 100);
	fflush(stdout);
	return lost;
}
