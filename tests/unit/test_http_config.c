/* SPDX-License-Identifier: MIT */
/*
 * test_http_config.c - ipc/http/config.c: defaults, section [http] of the INI file,
 * the command line over it, the derived status socket, errors naming their key or flag;
 * systemd/kvpool-http.conf.example states every default.
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
#include <syslog.h>
#include <unistd.h>
#include <cmocka.h>

#include "ipc/http/config.h"
#include "tests/lib/testlib.h"

struct fixture {
	char dir[256];
	char path[300];
	struct kvp_http_config c;
	char err[1024];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f || kvp_test_tmpdir(f->dir, sizeof(f->dir)) < 0)
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/http.conf", f->dir);
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

/* argv from a NULL-terminated list, with the program name first. */
static int parse(struct fixture *f, const char *const *args, enum kvp_http_config_action *act)
{
	char *argv[32] = { "kvpool-http" };
	int argc = 1;

	while (*args)
		argv[argc++] = (char *)*args++;
	argv[argc] = NULL;
	return kvp_http_config_parse_args(&f->c, argc, argv, act, f->err, sizeof(f->err));
}

static void test_defaults(void **state)
{
	struct fixture *f = *state;
	const char *args[] = { "--config", "/dev/null", NULL };
	enum kvp_http_config_action act;

	/* what docs/http.md states, and the status socket beside the request socket */
	assert_int_equal(parse(f, args, &act), 0);
	assert_int_equal(act, KVP_HTTP_CONFIG_RUN);
	assert_int_equal(kvp_http_config_check(&f->c, f->err, sizeof(f->err)), 0);
	assert_string_equal(f->c.socket_path, "/run/kvpool/kvpool.sock");
	assert_string_equal(f->c.status_path, "/run/kvpool/status.sock");
	assert_int_equal(f->c.n_listen, 1);
	assert_string_equal(f->c.listen[0], "127.0.0.1:8080");
	assert_string_equal(f->c.api_keys, "");
	assert_int_equal(f->c.log_level, LOG_INFO);
	assert_int_equal(f->c.threads, 2);
	assert_int_equal(f->c.max_body_bytes, 1 << 20);
	assert_int_equal(f->c.max_header_bytes, 16 << 10);
	assert_int_equal(f->c.max_conns, 256);
	assert_int_equal(f->c.idle_timeout_s, 60);
	assert_int_equal(f->c.backend_conns, 4);
	assert_int_equal(f->c.backend_reqs_per_conn, 16);
	assert_int_equal(f->c.backend_queue, 1024);
	assert_int_equal(f->c.stream_buffer_bytes, 1 << 20);
	assert_int_equal(f->c.drain_timeout_ms, 10000);
	assert_int_equal(f->c.anthropic_cache, KVP_HTTP_CACHE_AUTO);
}

static void test_file_then_flags(void **state)
{
	struct fixture *f = *state;
	const char *args[] = { "--config",
			       f->path,
			       "--listen",
			       "[::1]:9000",
			       "--listen=unix:/tmp/h.sock",
			       "--socket",
			       "/tmp/k/kvpool.sock",
			       "--log-level",
			       "debug",
			       NULL };
	enum kvp_http_config_action act;

	/* the file sets keys; flags override; the first --listen replaces the file's list */
	put(f, "# comment\n[http]\nlisten = 127.0.0.1:1, unix:/run/a.sock\nmax_body_bytes = 2M\n"
	       "threads = 4\napi_keys = /etc/k\nanthropic_cache = explicit\n"
	       "model_aliases = a,b\nlog_level = err\n");
	assert_int_equal(parse(f, args, &act), 0);
	assert_int_equal(kvp_http_config_check(&f->c, f->err, sizeof(f->err)), 0);
	assert_int_equal(f->c.n_listen, 2);
	assert_string_equal(f->c.listen[0], "[::1]:9000");
	assert_string_equal(f->c.listen[1], "unix:/tmp/h.sock");
	assert_int_equal(f->c.max_body_bytes, 2 << 20);
	assert_int_equal(f->c.threads, 4);
	assert_string_equal(f->c.api_keys, "/etc/k");
	assert_int_equal(f->c.anthropic_cache, KVP_HTTP_CACHE_EXPLICIT);
	assert_string_equal(f->c.model_aliases, "a,b");
	assert_int_equal(f->c.log_level, LOG_DEBUG);
	assert_string_equal(f->c.socket_path, "/tmp/k/kvpool.sock");
	assert_string_equal(f->c.status_path, "/tmp/k/status.sock");
	assert_string_equal(f->c.config_path, f->path);
	/* the file's list stays without --listen */
	{
		const char *a2[] = { "--config", f->path, NULL };

		assert_int_equal(parse(f, a2, &act), 0);
		assert_int_equal(f->c.n_listen, 2);
		assert_string_equal(f->c.listen[1], "unix:/run/a.sock");
	}
}

static void test_errors_name_the_key(void **state)
{
	static const struct {
		const char *file, *why;
	} files[] = {
		{ "[http]\nthreads = 0\n", ":2: http.threads: 0 is out of range" },
		{ "[http]\nbogus = 1\n", ":2: http.bogus: unknown key" },
		{ "[daemon]\nmodel = x\n",
		  ":2: daemon.model: kvpool-http reads only section [http]" },
		{ "threads = 2\n", ":1: threads: kvpool-http reads only section [http]" },
		{ "[http]\nthreads = 2\nthreads = 3\n", ":3: http.threads: set twice" },
		/* the words kvpoold says too: one key-table engine (util/keytab.h) */
		{ "[http]\nmax_body_bytes = 12X\n",
		  "http.max_body_bytes: '12X' is not a size (a number with an optional K, M, G or "
		  "T suffix)" },
		{ "[http]\nmax_body_bytes = 1T\n", "http.max_body_bytes: 1T is out of range" },
		{ "[http]\nanthropic_cache = sometimes\n", "not one of auto, explicit" },
		{ "[http]\nlisten = a:1,,b:2\n", "an empty address" },
		{ "[http\n", ":1: syntax error" },
	};
	struct fixture *f = *state;
	enum kvp_http_config_action act;

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		const char *args[] = { "--config", f->path, NULL };

		put(f, files[i].file);
		assert_int_equal(parse(f, args, &act), -EINVAL);
		if (!strstr(f->err, files[i].why))
			fail_msg("case %zu: '%s' lacks '%s'", i, f->err, files[i].why);
	}
	{
		const char *a[] = { "--config", "/nonexistent.conf", NULL };

		assert_true(parse(f, a, &act) < 0);
		assert_non_null(strstr(f->err, "/nonexistent.conf"));
	}
	{
		const char *a[] = { "--config", "/dev/null", "--log-level", "loud", NULL };

		assert_int_equal(parse(f, a, &act), -EINVAL);
		assert_non_null(strstr(f->err, "--log-level: 'loud' is not a log level"));
	}
	{
		const char *a[] = { "--nope", NULL };

		assert_int_equal(parse(f, a, &act), -EINVAL);
		assert_non_null(strstr(f->err, "--nope: unknown flag"));
	}
	{
		const char *a[] = { "--config", "/dev/null", "--socket", "/a/status.sock", NULL };

		assert_int_equal(parse(f, a, &act), 0);
		assert_int_equal(kvp_http_config_check(&f->c, f->err, sizeof(f->err)), -EINVAL);
		assert_non_null(strstr(f->err, "same path"));
	}
}

static void test_help_and_version(void **state)
{
	struct fixture *f = *state;
	const char *h[] = { "--listen", "x:1", "--help", NULL };
	const char *v[] = { "--version", NULL };
	enum kvp_http_config_action act;

	/* --help and --version win over everything else and read no file */
	assert_int_equal(parse(f, h, &act), 0);
	assert_int_equal(act, KVP_HTTP_CONFIG_HELP);
	assert_int_equal(parse(f, v, &act), 0);
	assert_int_equal(act, KVP_HTTP_CONFIG_VERSION);
}

static void test_example_states_the_defaults(void **state)
{
	struct fixture *f = *state;
	struct kvp_http_config dflt;
	char path[4096];
	const char *src = getenv("KVP_SOURCE_DIR");

	/* systemd/kvpool-http.conf.example parses and sets every key to its default */
	assert_non_null(src);
	snprintf(path, sizeof(path), "%s/systemd/kvpool-http.conf.example", src);
	kvp_http_config_defaults(&dflt);
	kvp_http_config_defaults(&f->c);
	assert_int_equal(kvp_http_config_load_file(&f->c, path, true, f->err, sizeof(f->err)), 0);
	memset(f->c.config_path, 0, sizeof(f->c.config_path));
	assert_memory_equal(&f->c, &dflt, sizeof(dflt));
	/* ... and names every key --help lists */
	{
		char *usage = NULL, *example = NULL, *line, *save = NULL;
		size_t len = 0, n = 0;
		FILE *m = open_memstream(&usage, &len);
		FILE *e = fopen(path, "r");
		bool keys = false;

		assert_non_null(m);
		assert_non_null(e);
		kvp_http_config_usage(m);
		fclose(m);
		assert_true(getdelim(&example, &n, '\0', e) > 0);
		fclose(e);
		for (line = strtok_r(usage, "\n", &save); line;
		     line = strtok_r(NULL, "\n", &save)) {
			char key[64], want[80];

			if (strstr(line, "Keys of [http]"))
				keys = true;
			else if (keys && sscanf(line, " %63s", key) == 1) {
				snprintf(want, sizeof(want), "\n%s =", key);
				if (!strstr(example, want))
					fail_msg("the example lacks key %s", key);
			}
		}
		assert_true(keys);
		free(usage);
		free(example);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_file_then_flags),
		cmocka_unit_test(test_errors_name_the_key),
		cmocka_unit_test(test_help_and_version),
		cmocka_unit_test(test_example_states_the_defaults),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
