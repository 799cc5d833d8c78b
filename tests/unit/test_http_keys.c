/* SPDX-License-Identifier: MIT */
/*
 * test_http_keys.c - ipc/http/keys.c: the API key file (KEY NAME [SALT] lines), its
 * errors with their line numbers, and key lookup.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "ipc/http/keys.h"
#include "tests/lib/testlib.h"

struct fixture {
	char dir[256];
	char path[300];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f || kvp_test_tmpdir(f->dir, sizeof(f->dir)) < 0)
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/keys", f->dir);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kvp_test_rmtree(f->dir);
	free(f);
	return 0;
}

static void put(struct fixture *f, const char *text)
{
	assert_int_equal(kvp_test_write_file(f->path, text), 0);
}

static void test_load_and_find(void **state)
{
	struct fixture *f = *state;
	struct kvp_http_keys k;
	const struct kvp_http_tenant *t;
	char err[256];

	/* comments, blank lines, tabs; the salt is the name unless given; two keys of
	 * one tenant share it */
	put(f, "# keys\n\nsk-aaaaaaaa alice\n  sk-bbbbbbbb\tbob\tteam-b  \nsk-cccccccc alice\n");
	assert_int_equal(kvp_http_keys_load(&k, f->path, err, sizeof(err)), 0);
	assert_int_equal(k.n_keys, 3);
	assert_int_equal(k.n_tenants, 2);
	t = kvp_http_keys_find(&k, "sk-aaaaaaaa", 11);
	assert_non_null(t);
	assert_string_equal(t->name, "alice");
	assert_int_equal(t->salt_len, 5);
	assert_memory_equal(t->salt, "alice", 5);
	assert_ptr_equal(kvp_http_keys_find(&k, "sk-cccccccc", 11), t);
	t = kvp_http_keys_find(&k, "sk-bbbbbbbb", 11);
	assert_non_null(t);
	assert_string_equal(t->name, "bob");
	assert_memory_equal(t->salt, "team-b", 6);
	/* only the whole key: not a prefix, not longer, not empty */
	assert_null(kvp_http_keys_find(&k, "sk-aaaaaaa", 10));
	assert_null(kvp_http_keys_find(&k, "sk-aaaaaaaaa", 12));
	assert_null(kvp_http_keys_find(&k, "", 0));
	assert_null(kvp_http_keys_find(&k, "sk-dddddddd", 11));
	kvp_http_keys_deinit(&k);
	assert_int_equal(k.n_keys, 0);
}

static void test_bad_files(void **state)
{
	static const struct {
		const char *text, *why;
	} cases[] = {
		{ "sk-shrt a\n", ":1: the key must be 8 to 256" },
		{ "# c\nsk-aaaaaaaa bad/name\n", ":2: the name" },
		{ "sk-aaaaaaaa a 012345678901234567890123456789012\n", ":1: the salt" },
		{ "sk-aaaaaaaa a\nsk-aaaaaaaa b\n", ":2: this key is already listed" },
		{ "sk-aaaaaaaa a s1\nsk-bbbbbbbb a s2\n", ":2: this name was given another salt" },
		{ "sk-aaaaaaaa a s1 extra\n", ":1: want KEY NAME [SALT]" },
		{ "sk-aaaaaaaa\n", ":1: want KEY NAME [SALT]" },
		{ "# only comments\n\n", "no key in the file" },
	};
	struct fixture *f = *state;
	struct kvp_http_keys k;
	char err[256];

	/* each is refused with the line and the reason */
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		put(f, cases[i].text);
		assert_int_equal(kvp_http_keys_load(&k, f->path, err, sizeof(err)), -EINVAL);
		if (!strstr(err, cases[i].why))
			fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i].why);
		assert_int_equal(k.n_keys, 0);
	}
	assert_int_equal(kvp_http_keys_load(&k, "/nonexistent/keys", err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "/nonexistent/keys"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_load_and_find),
		cmocka_unit_test(test_bad_files),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
