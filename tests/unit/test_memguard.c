/* SPDX-License-Identifier: MIT */
/*
 * test_memguard.c - the memory guard's arithmetic (svc/memguard.c) on facts the test
 * sets: a new per-uid domain's pool is refused, with the figures, when what the daemon
 * holds and it exceed daemon.memory_limit or the cgroup's limit, or when it alone exceeds
 * MemAvailable or what the cgroup has left; the start check honours the budget too; and
 * the facts read from this machine are consistent (room within the limit).  The daemon's
 * side, a refused HELLO and the others served, is test_domains'.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "svc/memguard.h"

#define MIB (1ull << 20)

static void no_limits(struct kvp_memguard_facts *f)
{
	memset(f, 0, sizeof(*f));
	f->mem_available = 64 * 1024 * MIB;
	f->cg_limit = UINT64_MAX;
	f->cg_room = UINT64_MAX;
	f->budget = UINT64_MAX;
	f->cg_file = "memory.max";
	snprintf(f->cg_dir, sizeof(f->cg_dir), "/sys/fs/cgroup/test");
}

static void test_domain_budget(void **state)
{
	/* held 40 MiB + a 16 MiB pool: fits a 56 MiB budget, not a 55 MiB one */
	struct kvp_memguard_facts f;
	char err[512] = "";

	(void)state;
	no_limits(&f);
	f.budget = 56 * MIB;
	assert_int_equal(kvp_memguard_check_domain(&f, 16 * MIB, 40 * MIB, 2, err, sizeof(err)), 0);
	f.budget = 55 * MIB;
	assert_int_equal(kvp_memguard_check_domain(&f, 16 * MIB, 40 * MIB, 2, err, sizeof(err)),
			 -ENOMEM);
	assert_non_null(strstr(err, "its pool (16.0 MiB)"));
	assert_non_null(strstr(err, "(40.0 MiB: the model and 2 domain pool(s))"));
	assert_non_null(strstr(err, "need 56.0 MiB, more than daemon.memory_limit (55.0 MiB)"));
	/* on huge pages the pool counts for nothing */
	assert_int_equal(kvp_memguard_check_domain(&f, 0, 40 * MIB, 2, err, sizeof(err)), 0);
}

static void test_domain_cgroup(void **state)
{
	/* the cgroup's limit bounds held + pool; what it has left bounds the pool alone */
	struct kvp_memguard_facts f;
	char err[512] = "";

	(void)state;
	no_limits(&f);
	f.cg_limit = 100 * MIB;
	assert_int_equal(kvp_memguard_check_domain(&f, 16 * MIB, 84 * MIB, 3, err, sizeof(err)), 0);
	assert_int_equal(kvp_memguard_check_domain(&f, 16 * MIB, 85 * MIB, 3, err, sizeof(err)),
			 -ENOMEM);
	assert_non_null(strstr(err, "the memory cgroup's limit (100.0 MiB)"));
	f.cg_room = 10 * MIB; /* something else of the cgroup took the rest */
	assert_int_equal(kvp_memguard_check_domain(&f, 16 * MIB, 20 * MIB, 1, err, sizeof(err)),
			 -ENOMEM);
	assert_non_null(strstr(err, "more than the memory cgroup has left: 10.0 MiB"));
	f.cg_room = UINT64_MAX;
	f.mem_available = 15 * MIB;
	assert_int_equal(kvp_memguard_check_domain(&f, 16 * MIB, 20 * MIB, 1, err, sizeof(err)),
			 -ENOMEM);
	assert_non_null(strstr(err, "MemAvailable"));
	assert_non_null(strstr(err, "15.0 MiB"));
}

static void test_start_budget(void **state)
{
	/* at start, pool + model against daemon.memory_limit as against a cgroup */
	struct kvp_memguard_facts f;
	char err[512] = "";

	(void)state;
	no_limits(&f);
	f.budget = 64 * MIB;
	assert_int_equal(kvp_memguard_check(&f, 32 * MIB, 32 * MIB, "its file", err, sizeof(err)),
			 0);
	assert_int_equal(kvp_memguard_check(&f, 33 * MIB, 32 * MIB, "its file", err, sizeof(err)),
			 -ENOMEM);
	assert_non_null(strstr(err, "more than daemon.memory_limit allows: 64.0 MiB"));
}

static void test_read_is_consistent(void **state)
{
	/* this machine's facts: no budget unless set; a cgroup's room never above its limit */
	struct kvp_memguard_facts f;

	(void)state;
	kvp_memguard_read(&f);
	assert_true(f.budget == UINT64_MAX);
	if (f.cg_limit != UINT64_MAX)
		assert_true(f.cg_room <= f.cg_limit);
	print_message("MemAvailable %llu MiB, cgroup limit %s, room %s\n",
		      (unsigned long long)(f.mem_available / MIB),
		      f.cg_limit == UINT64_MAX ? "none" : "set",
		      f.cg_room == UINT64_MAX ? "none" : "set");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_domain_budget),
		cmocka_unit_test(test_domain_cgroup),
		cmocka_unit_test(test_start_budget),
		cmocka_unit_test(test_read_is_consistent),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
