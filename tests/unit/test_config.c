/* SPDX-License-Identifier: MIT */
/*
 * test_config.c - kvpoold configuration: defaults, INI file, flags, errors that name
 * the key and the line, size suffixes, cross-field checks, print/reload round trip.
 */
#include <errno.h>
#include <grp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>
#include <cmocka.h>

#include "compute/model.h"
#include "shm/pool.h"
#include "svc/config.h"
#include "util/parse.h"
#include "tests/lib/testlib.h"

struct fixture {
	char dir[256];
	char path[512];
	char err[512];
	struct kvp_config c;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (!f || kvp_test_tmpdir(f->dir, sizeof(f->dir)) < 0)
		return -1;
	snprintf(f->path, sizeof(f->path), "%s/kvpoold.conf", f->dir);
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

static void write_file(const char *path, const char *text)
{
	assert_int_equal(kvp_test_write_file(path, text), 0);
}

/* Parse argv (NULL-terminated list after the program name) into f->c. */
static int parse(struct fixture *f, enum kvp_config_action *act, ...)
{
	char *argv[32] = { "kvpoold" };
	int argc = 1;
	va_list ap;
	char *a;

	va_start(ap, act);
	while ((a = va_arg(ap, char *)) && argc < 31)
		argv[argc++] = a;
	va_end(ap);
	f->err[0] = '\0';
	return kvp_config_parse_args(&f->c, argc, argv, act, f->err, sizeof(f->err));
}

static void test_defaults_are_valid(void **state)
{
	struct fixture *f = *state;

	/* the documented defaults pass the check and match docs/daemon.md */
	kvp_config_defaults(&f->c);
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), 0);
	assert_string_equal(f->c.socket_path, "/run/kvpool/kvpool.sock");
	assert_string_equal(f->c.status_path, "/run/kvpool/status.sock");
	assert_string_equal(f->c.state_dir, "/var/lib/kvpool");
	assert_int_equal(f->c.pool_bytes, 1ull << 30);
	assert_int_equal(f->c.block_tokens, 16);
	assert_int_equal(f->c.huge_pages, KVP_HUGE_AUTO);
	assert_int_equal(f->c.drain_timeout_ms, 10000);
	assert_int_equal(f->c.weights, KVP_MODEL_WEIGHTS_COPY);
	assert_int_equal(f->c.kv_dtype, KVP_DTYPE_F16); /* as llama.cpp's cache */
	assert_string_equal(f->c.model_path, "");
}

static void test_kv_type_alias(void **state)
{
	struct fixture *f = *state;
	enum kvp_config_action act;

	/* --kv-dtype, and kvpool-run's name --kv-type for the same setting; both validated */
	kvp_config_defaults(&f->c);
	assert_int_equal(parse(f, &act, "--kv-dtype", "bf16", NULL), 0);
	assert_int_equal(f->c.kv_dtype, KVP_DTYPE_BF16);
	assert_int_equal(parse(f, &act, "--kv-type=f32", NULL), 0);
	assert_int_equal(f->c.kv_dtype, KVP_DTYPE_F32);
	assert_int_not_equal(parse(f, &act, "--kv-type", "q8_0", NULL), 0);
	assert_non_null(strstr(f->err, "--kv-dtype"));
	/* int4 and its residual window: 32 by default, 0 .. 4096 */
	kvp_config_defaults(&f->c);
	assert_int_equal(f->c.kv_window, 32);
	assert_int_equal(parse(f, &act, "--kv-dtype", "int4", "--kv-window", "0", NULL), 0);
	assert_int_equal(f->c.kv_dtype, KVP_DTYPE_INT4);
	assert_int_equal(f->c.kv_window, 0);
	assert_int_equal(parse(f, &act, "--kv-window", "4096", NULL), 0);
	assert_int_equal(f->c.kv_window, 4096);
	assert_int_not_equal(parse(f, &act, "--kv-window", "4097", NULL), 0);
	assert_non_null(strstr(f->err, "kv-window"));
}

static void test_file_then_flags_override(void **state)
{
	struct fixture *f = *state;
	enum kvp_config_action act;
	char cfg[600];

	/* the file sets values, a later flag wins over the file, both forms of flag work */
	write_file(f->path, "; comment\n[pool]\nsize = 64M\nblock_size = 32\n"
			    "huge_pages = off\n\n[daemon]\nthreads = 3  ; inline comment\n"
			    "log_level = debug\n[server]\nsocket = /tmp/a.sock\n");
	snprintf(cfg, sizeof(cfg), "--config=%s", f->path);
	assert_int_equal(parse(f, &act, cfg, "--pool-size", "2G", "--threads=1", NULL), 0);
	assert_int_equal(act, KVP_CONFIG_RUN);
	assert_int_equal(f->c.pool_bytes, 2ull << 30);
	assert_int_equal(f->c.block_tokens, 32);
	assert_int_equal(f->c.huge_pages, KVP_HUGE_OFF);
	assert_int_equal(f->c.threads, 1);
	assert_int_equal(f->c.log_level, LOG_DEBUG);
	assert_string_equal(f->c.socket_path, "/tmp/a.sock");
	assert_string_equal(f->c.config_path, f->path);
	/* flags given before --config still override the file */
	assert_int_equal(parse(f, &act, "--block-size", "8", "--config", f->path, NULL), 0);
	assert_int_equal(f->c.block_tokens, 8);
}

static void test_unknown_key_names_key_and_line(void **state)
{
	struct fixture *f = *state;
	enum kvp_config_action act;

	/* line 4 holds the typo: the message names file, line and section.key */
	write_file(f->path, "[pool]\nsize = 64M\n\nsise = 1G\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":4: pool.sise: unknown key"));
	assert_non_null(strstr(f->err, f->path));
}

static void test_bad_value_names_key_and_line(void **state)
{
	struct fixture *f = *state;
	enum kvp_config_action act;

	write_file(f->path, "[daemon]\nthreads = 2\n[pool]\nhuge_pages = maybe\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":4: pool.huge_pages: 'maybe' is not one of"));

	write_file(f->path, "[pool]\nblock_size = 0\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":2: pool.block_size: 0 is out of range"));

	write_file(f->path, "[pool]\n\n\nsize = 12X\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":4: pool.size: '12X' is not a size"));

	write_file(f->path, "[daemon]\nthreads = -1\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":2: daemon.threads: '-1' is not a whole number"));
}

static void test_weights_key(void **state)
{
	struct fixture *f = *state;
	enum kvp_config_action act;

	/* daemon.weights: copy by default, map from the file, a flag overrides the file in
	 * both spellings, and a bad value is refused naming file, line, key and the choices */
	assert_int_equal(parse(f, &act, "--config", "/dev/null", NULL), 0);
	assert_int_equal(f->c.weights, KVP_MODEL_WEIGHTS_COPY);
	write_file(f->path, "[daemon]\nthreads = 1\nweights = map\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), 0);
	assert_int_equal(f->c.weights, KVP_MODEL_WEIGHTS_MAP);
	assert_int_equal(parse(f, &act, "--config", f->path, "--weights", "copy", NULL), 0);
	assert_int_equal(f->c.weights, KVP_MODEL_WEIGHTS_COPY);
	assert_int_equal(parse(f, &act, "--weights=map", NULL), 0);
	assert_int_equal(f->c.weights, KVP_MODEL_WEIGHTS_MAP);
	assert_int_equal(parse(f, &act, "--set", "daemon.weights=MAP", NULL), 0);
	assert_int_equal(f->c.weights, KVP_MODEL_WEIGHTS_MAP);

	write_file(f->path, "[daemon]\nthreads = 1\n\nweights = hugepages\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, f->path));
	assert_non_null(strstr(f->err, ":4: daemon.weights: 'hugepages' is not one of copy, map"));
	/* "default" is compute/'s own choice, not a daemon setting: refused too */
	write_file(f->path, "[daemon]\nweights = default\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":2: daemon.weights: 'default' is not one of"));
	write_file(f->path, "[daemon]\nweights =\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":2: daemon.weights: '' is not one of"));
	assert_int_equal(parse(f, &act, "--weights", "mmap", NULL), -EINVAL);
	assert_non_null(strstr(f->err, "--weights: 'mmap' is not one of copy, map"));
	assert_int_equal(parse(f, &act, "--weights", NULL), -EINVAL);
	assert_non_null(strstr(f->err, "--weights: needs a value"));
}

static void test_structural_errors(void **state)
{
	struct fixture *f = *state;
	enum kvp_config_action act;
	char *longline;

	/* duplicate keys, keys before any section, syntax errors and overlong lines */
	write_file(f->path, "[pool]\nsize = 1G\nsize = 2G\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":3: pool.size: set twice"));

	write_file(f->path, "threads = 2\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":1: threads: key outside any [section]"));

	write_file(f->path, "[daemon]\nthreads 2\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":2: syntax error"));

	longline = malloc(600);
	assert_non_null(longline);
	memset(longline, 'a', 599);
	memcpy(longline, "[daemon]\nmodel = /", 18);
	longline[599] = '\0';
	write_file(f->path, longline);
	free(longline);
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":2: line longer than"));
}

static void test_missing_files(void **state)
{
	struct fixture *f = *state;
	enum kvp_config_action act;
	char missing[600];

	/* an explicit missing --config is an error; a missing optional file is not */
	snprintf(missing, sizeof(missing), "%s/nope.conf", f->dir);
	assert_int_equal(parse(f, &act, "--config", missing, NULL), -ENOENT);
	assert_non_null(strstr(f->err, "nope.conf"));
	kvp_config_defaults(&f->c);
	assert_int_equal(kvp_config_load_file(&f->c, missing, false, f->err, sizeof(f->err)), 0);
	assert_string_equal(f->c.config_path, "");
}

static void test_sizes(void **state)
{
	uint64_t v;

	/* suffixes are powers of 1024; garbage and overflow are refused */
	assert_int_equal(kvp_parse_size("512", &v), 0);
	assert_int_equal(v, 512);
	assert_int_equal(kvp_parse_size("64K", &v), 0);
	assert_int_equal(v, 65536);
	assert_int_equal(kvp_parse_size("3m", &v), 0);
	assert_int_equal(v, 3u << 20);
	assert_int_equal(kvp_parse_size("2GiB", &v), 0);
	assert_int_equal(v, 2ull << 30);
	assert_int_equal(kvp_parse_size("1T", &v), 0);
	assert_int_equal(v, 1ull << 40);
	assert_int_equal(kvp_parse_size("", &v), -EINVAL);
	assert_int_equal(kvp_parse_size("G", &v), -EINVAL);
	assert_int_equal(kvp_parse_size("1.5G", &v), -EINVAL);
	assert_int_equal(kvp_parse_size("-1", &v), -EINVAL);
	assert_int_equal(kvp_parse_size("10 M", &v), -EINVAL);
	assert_int_equal(kvp_parse_size("99999999999999999999", &v), -ERANGE);
	assert_int_equal(kvp_parse_size("20000000T", &v), -ERANGE);
}

static void test_flag_errors(void **state)
{
	struct fixture *f = *state;
	enum kvp_config_action act;
	char cfg[600];

	/* flags are checked like file keys, and name themselves in the error */
	write_file(f->path, "");
	snprintf(cfg, sizeof(cfg), "--config=%s", f->path);
	assert_int_equal(parse(f, &act, cfg, "--pool-size", "lots", NULL), -EINVAL);
	assert_non_null(strstr(f->err, "--pool-size: 'lots' is not a size"));
	assert_int_equal(parse(f, &act, cfg, "--bogus", "1", NULL), -EINVAL);
	assert_non_null(strstr(f->err, "--bogus: unknown flag"));
	assert_int_equal(parse(f, &act, cfg, "--threads", NULL), -EINVAL);
	assert_non_null(strstr(f->err, "--threads: needs a value"));
	assert_int_equal(parse(f, &act, cfg, "stray", NULL), -EINVAL);
	assert_int_equal(parse(f, &act, cfg, "--set", "pool.nope=1", NULL), -EINVAL);
	assert_non_null(strstr(f->err, "pool.nope: unknown key"));
	assert_int_equal(parse(f, &act, cfg, "--set", "scheduler.max_running=8", "--foreground",
			       "--ignore-eos", "--threads", "3", NULL),
			 0);
	assert_int_equal(f->c.max_running, 8);
	assert_true(f->c.foreground);
	assert_true(f->c.ignore_eos);
	assert_int_equal(f->c.threads, 3);
	assert_int_equal(parse(f, &act, cfg, "--ignore-eos=no", NULL), 0);
	assert_false(f->c.ignore_eos);
	assert_int_equal(parse(f, &act, cfg, "--ignore-eos=maybe", NULL), -EINVAL);
	assert_non_null(strstr(f->err, "--ignore-eos: 'maybe' is not a boolean"));
	assert_int_equal(parse(f, &act, cfg, "--threads", "2", "--help", NULL), 0);
	assert_int_equal(act, KVP_CONFIG_HELP);
	assert_int_equal(parse(f, &act, cfg, "--check-config", NULL), 0);
	assert_int_equal(act, KVP_CONFIG_CHECK);
}

static void test_check_cross_fields(void **state)
{
	struct fixture *f = *state;

	/* values valid alone but not together are refused, naming the key */
	kvp_config_defaults(&f->c);
	f->c.max_frame_bytes = 4096;
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), -EINVAL);
	assert_non_null(strstr(f->err, "server.max_frame_bytes"));

	kvp_config_defaults(&f->c);
	f->c.block_tokens = 24;
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), -EINVAL);
	assert_non_null(strstr(f->err, "pool.block_size"));

	kvp_config_defaults(&f->c);
	strcpy(f->c.status_path, f->c.socket_path);
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), -EINVAL);
	assert_non_null(strstr(f->err, "server.status_socket"));

	kvp_config_defaults(&f->c);
	strcpy(f->c.socket_group, "no-such-group-kvp");
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), -EINVAL);
	assert_non_null(strstr(f->err, "server.socket_group: no group named"));

	kvp_config_defaults(&f->c);
	strcpy(f->c.socket_group, "root");
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), 0);
}

static void test_status_group(void **state)
{
	/*
	 * The status socket's group is the operators' (kvpool-status by default, the socket
	 * the daemon's user's alone without it), never the request socket's: that is refused
	 * naming both, whether named twice or left to the daemon's own group.
	 */
	struct fixture *f = *state;
	struct group *own = getgrgid(getegid());
	char own_name[64];
	gid_t gid;

	assert_non_null(own);
	snprintf(own_name, sizeof(own_name), "%s", own->gr_name);
	kvp_config_defaults(&f->c);
	assert_string_equal(f->c.status_group, "kvpool-status");
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), 0);
	if (!getgrnam("kvpool-status"))
		assert_int_equal(kvp_config_status_gid(&f->c, &gid), -ENOENT);

	strcpy(f->c.socket_group, own_name);
	strcpy(f->c.status_group, own_name);
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), -EINVAL);
	assert_non_null(strstr(f->err, "server.status_group"));
	assert_non_null(strstr(f->err, "request socket's group"));

	f->c.socket_group[0] = 0; /* the daemon's own group: the same */
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), -EINVAL);
	assert_non_null(strstr(f->err, "server.status_group"));

	f->c.status_path[0] = 0; /* no status socket: nothing to refuse */
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), 0);

	kvp_config_defaults(&f->c);
	f->c.status_group[0] = 0; /* owner only */
	assert_int_equal(kvp_config_status_gid(&f->c, &gid), 0);
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), 0);

	strcpy(f->c.status_group, "no-such-group-kvp");
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), -EINVAL);
	assert_non_null(strstr(f->err, "server.status_group: no group named"));

	/* another group than the request socket's is fine */
	if (getgrnam("nogroup") && getgrnam("nogroup")->gr_gid != getegid()) {
		strcpy(f->c.status_group, "nogroup");
		assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), 0);
		assert_int_equal(kvp_config_status_gid(&f->c, &gid), 1);
		assert_int_equal(gid, getgrnam("nogroup")->gr_gid);
	}
}

static void test_print_reads_back(void **state)
{
	struct fixture *f = *state;
	struct kvp_config back;
	FILE *fp;

	/* --check-config output is a config file giving the same config */
	kvp_config_defaults(&f->c);
	f->c.pool_bytes = 3ull << 20;
	f->c.max_frame_bytes = 2u << 20;
	f->c.huge_pages = KVP_HUGE_REQUIRE;
	strcpy(f->c.model_path, "/models/x.gguf");
	strcpy(f->c.status_path, "");
	f->c.status_path_auto = false; /* set, as the file read back sets it */
	f->c.log_level = LOG_WARNING;
	f->c.weights = KVP_MODEL_WEIGHTS_MAP;
	fp = fopen(f->path, "w");
	assert_non_null(fp);
	kvp_config_print(&f->c, fp);
	fclose(fp);
	kvp_config_defaults(&back);
	assert_int_equal(kvp_config_load_file(&back, f->path, true, f->err, sizeof(f->err)), 0);
	memset(back.config_path, 0, sizeof(back.config_path));
	assert_memory_equal(&back, &f->c, sizeof(back));
}

/* f->c's [domain @name] section; fails the test when there is none. */
static const struct kvp_domcfg *domcfg_of(const struct fixture *f, const char *name)
{
	for (uint32_t i = 0; i < f->c.n_domcfg; i++)
		if (!strcmp(f->c.domcfg[i].name, name))
			return &f->c.domcfg[i];
	fail_msg("no [domain %s]", name);
	return NULL;
}

static void test_domain_cache_overrides(void **state)
{
	struct fixture *f = *state;
	enum kvp_config_action act;
	struct kvp_cache_policy a, b, none;
	struct kvp_config back;
	char *text = NULL;
	size_t len = 0;
	FILE *fp;

	/* a [domain NAME] key overrides [cache] for that domain only; the rest is [cache]'s */
	write_file(f->path, "[domains]\nmode = groups\n[cache]\nmin_tokens = 16\n"
			    "ttl_default_s = 120\n[domain a]\nusers = root\nmin_tokens = 64\n"
			    "eviction = lfu\npin_max = 8M\nretain_default = 90\n"
			    "[domain b]\ngroups = 0\nttl_default_s = 60\nttl_max_s = 600\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), 0);
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), 0);
	kvp_domcfg_cache_policy(&a, domcfg_of(f, "a"), &f->c.cache);
	kvp_domcfg_cache_policy(&b, domcfg_of(f, "b"), &f->c.cache);
	kvp_domcfg_cache_policy(&none, NULL, &f->c.cache);
	assert_int_equal(a.min_tokens, 64);
	assert_int_equal(a.eviction, KVP_EVICT_LFU);
	assert_int_equal(a.pin_max_bytes, 8u << 20);
	assert_int_equal(a.retain_default, 90);
	assert_int_equal(a.ttl_default_s, 120); /* [cache]'s */
	assert_int_equal(a.ttl_max_s, 3600);	/* the default's */
	assert_int_equal(b.min_tokens, 16);
	assert_int_equal(b.eviction, KVP_EVICT_LRU);
	assert_int_equal(b.ttl_default_s, 60);
	assert_int_equal(b.ttl_max_s, 600);
	assert_int_equal(b.pin_max_bytes, 0);
	/* no section (per-uid, single): [cache] itself, the global keys untouched */
	assert_memory_equal(&none, &f->c.cache, sizeof(none));
	assert_int_equal(f->c.cache.min_tokens, 16);
	assert_int_equal(f->c.cache.eviction, KVP_EVICT_LRU);

	/* --check-config prints the overrides as keys (read back to the same config) and
	 * each domain's whole policy in effect as a comment */
	fp = open_memstream(&text, &len);
	assert_non_null(fp);
	kvp_config_print(&f->c, fp);
	fclose(fp);
	assert_non_null(strstr(text,
			       "[domain a]\nusers = root\ngroups = \npool_size = 0\n"
			       "tier_size = 0\noperators = no\npriority = 0\nmin_tokens = 64\n"
			       "pin_max = 8M\n"
			       "eviction = lfu\nretain_default = 90\n"));
	assert_non_null(strstr(text, "; cache policy in effect: ttl_default_s=120 "
				     "ttl_max_s=3600 min_tokens=64 pin_max=8M eviction=lfu "
				     "retain_default=90\n"));
	assert_non_null(strstr(text, "; cache policy in effect: ttl_default_s=60 ttl_max_s=600 "
				     "min_tokens=16 pin_max=0 eviction=lru retain_default=50\n"));
	write_file(f->path, text);
	free(text);
	kvp_config_defaults(&back);
	assert_int_equal(kvp_config_load_file(&back, f->path, true, f->err, sizeof(f->err)), 0);
	memset(back.config_path, 0, sizeof(back.config_path));
	memset(f->c.config_path, 0, sizeof(f->c.config_path));
	assert_memory_equal(&back.cache, &f->c.cache, sizeof(back.cache));
	/* (@seen differs: the printed "groups = " sets that key, empty) */
	assert_int_equal(back.n_domcfg, 2);
	for (uint32_t i = 0; i < 2; i++) {
		struct kvp_cache_policy p0, p1;

		kvp_domcfg_cache_policy(&p0, &f->c.domcfg[i], &f->c.cache);
		kvp_domcfg_cache_policy(&p1, &back.domcfg[i], &back.cache);
		assert_memory_equal(&p0, &p1, sizeof(p0));
	}
}

static void test_domain_cache_errors(void **state)
{
	struct fixture *f = *state;
	enum kvp_config_action act;

	/* a bad value names file line, section and key, with [cache]'s own words */
	write_file(f->path, "[domains]\nmode = groups\n[domain a]\nusers = root\n"
			    "min_tokens = many\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":5: domain a.min_tokens: 'many' is not a whole number"));

	write_file(f->path, "[domains]\nmode = groups\n[domain a]\nusers = root\n"
			    "eviction = fifo\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":5: domain a.eviction: 'fifo' is not one of lru, lfu, "
				       "priority"));

	write_file(f->path, "[domains]\nmode = groups\n[domain a]\nusers = root\n"
			    "retain_default = 101\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":5: domain a.retain_default: 101 is out of range"));

	write_file(f->path, "[domains]\nmode = groups\n[domain a]\nusers = root\n"
			    "pin_max = lots\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":5: domain a.pin_max: 'lots' is not a size"));

	write_file(f->path, "[domains]\nmode = groups\n[domain a]\nusers = root\n"
			    "min_tokens = 1\nmin_tokens = 2\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":6: domain a.min_tokens: set twice"));

	/* the daemon-wide switches are not a domain's */
	write_file(f->path, "[domains]\nmode = groups\n[domain a]\nusers = root\n"
			    "pin_allowed = yes\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":5: domain a.pin_allowed: unknown key"));

	/* TTLs coherent per domain, naming the key the section set */
	write_file(f->path, "[domains]\nmode = groups\n[domain a]\nusers = root\n"
			    "ttl_default_s = 7200\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), 0);
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), -EINVAL);
	assert_non_null(strstr(f->err, "domain a.ttl_default_s: 7200 is above ttl_max_s = 3600"));
	write_file(f->path, "[domains]\nmode = groups\n[domain a]\nusers = root\n"
			    "ttl_max_s = 60\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), 0);
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), -EINVAL);
	assert_non_null(strstr(f->err, "domain a.ttl_max_s: 60 is below the ttl_default_s of "
				       "[cache] (300)"));
	/* a flag reaches a domain's key too */
	assert_int_equal(parse(f, &act, "--config", f->path, "--set", "domain a.ttl_default_s=30",
			       NULL),
			 0);
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), 0);
}

static void test_domain_priority(void **state)
{
	struct fixture *f = *state;
	enum kvp_config_action act;
	struct kvp_config back;
	char *text = NULL;
	size_t len = 0;
	FILE *fp;

	/* the request field's range, either end included; a section without it: 0 */
	write_file(f->path, "[domains]\nmode = groups\n[domain a]\nusers = root\n"
			    "priority = -1000\n[domain b]\ngroups = 0\npriority = 1000\n"
			    "[domain c]\ngroups = 0\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), 0);
	assert_int_equal(kvp_config_check(&f->c, f->err, sizeof(f->err)), 0);
	assert_int_equal(domcfg_of(f, "a")->priority, -1000);
	assert_int_equal(domcfg_of(f, "b")->priority, 1000);
	assert_int_equal(domcfg_of(f, "c")->priority, 0);
	/* a flag sets it too */
	assert_int_equal(parse(f, &act, "--config", f->path, "--set", "domain c.priority=-7", NULL),
			 0);
	assert_int_equal(domcfg_of(f, "c")->priority, -7);

	/* --check-config prints it, and the output reads back to the same values */
	fp = open_memstream(&text, &len);
	assert_non_null(fp);
	kvp_config_print(&f->c, fp);
	fclose(fp);
	assert_non_null(strstr(text, "[domain a]\nusers = root\ngroups = \npool_size = 0\n"
				     "tier_size = 0\noperators = no\npriority = -1000\n"));
	assert_non_null(strstr(text, "operators = no\npriority = -7\n"));
	write_file(f->path, text);
	free(text);
	kvp_config_defaults(&back);
	assert_int_equal(kvp_config_load_file(&back, f->path, true, f->err, sizeof(f->err)), 0);
	assert_int_equal(back.n_domcfg, 3);
	for (uint32_t i = 0; i < 3; i++)
		assert_int_equal(back.domcfg[i].priority, f->c.domcfg[i].priority);
}

static void test_domain_priority_errors(void **state)
{
	struct fixture *f = *state;
	enum kvp_config_action act;
	static const struct {
		const char *value, *why;
	} bad[] = {
		{ "1001", "'1001' is out of range [-1000, 1000]" },
		{ "-1001", "'-1001' is out of range [-1000, 1000]" },
		{ "99999999999999999999", "is out of range [-1000, 1000]" },
		{ "high", "'high' is not an integer" },
		{ "5x", "'5x' is not an integer" },
		{ "+5", "'+5' is not an integer" },
		{ "-", "'-' is not an integer" },
		{ "", "'' is not an integer" },
	};
	char text[256];

	/* a bad value stops the load, naming line, section and key and the range */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(text, sizeof(text),
			 "[domains]\nmode = groups\n[domain a]\nusers = root\npriority = %s\n",
			 bad[i].value);
		write_file(f->path, text);
		assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
		if (!strstr(f->err, ":5: domain a.priority: ") || !strstr(f->err, bad[i].why))
			fail_msg("priority = %s: '%s'", bad[i].value, f->err);
	}
	write_file(f->path, "[domains]\nmode = groups\n[domain a]\nusers = root\n"
			    "priority = 1\npriority = 2\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":6: domain a.priority: set twice"));
	/* and from a flag */
	assert_int_equal(parse(f, &act, "--config", "/dev/null", "--domains-mode", "groups",
			       "--set", "domain a.users=root", "--set", "domain a.priority=2000",
			       NULL),
			 -EINVAL);
	assert_non_null(strstr(f->err, "domain a.priority: '2000' is out of range"));
}

static void test_status_socket_follows_socket(void **state)
{
	struct fixture *f = *state;
	enum kvp_config_action act;

	/* unset, the status socket is status.sock next to the request socket */
	assert_int_equal(parse(f, &act, "--config", "/dev/null", "--socket", "/tmp/x/k.sock", NULL),
			 0);
	assert_string_equal(f->c.status_path, "/tmp/x/status.sock");
	assert_int_equal(parse(f, &act, "--config", "/dev/null", "--socket", "k.sock", NULL), 0);
	assert_string_equal(f->c.status_path, "status.sock");
	/* set by a flag (also empty: none) or by the file, it stays as set */
	assert_int_equal(parse(f, &act, "--config", "/dev/null", "--socket", "/tmp/x/k.sock",
			       "--status-socket", "/tmp/y/s.sock", NULL),
			 0);
	assert_string_equal(f->c.status_path, "/tmp/y/s.sock");
	assert_int_equal(parse(f, &act, "--config", "/dev/null", "--status-socket=", "--socket",
			       "/tmp/x/k.sock", NULL),
			 0);
	assert_string_equal(f->c.status_path, "");
	write_file(f->path, "[server]\nstatus_socket = /tmp/z/s.sock\n");
	assert_int_equal(parse(f, &act, "--config", f->path, "--socket", "/tmp/x/k.sock", NULL), 0);
	assert_string_equal(f->c.status_path, "/tmp/z/s.sock");
}

static void test_conn_limit_keys(void **state)
{
	struct fixture *f = *state;
	enum kvp_config_action act;

	/* per-uid connections default to a quarter of max_conns; the idle timeout to 5 min */
	assert_int_equal(parse(f, &act, "--config", "/dev/null", NULL), 0);
	assert_int_equal(kvp_config_conns_per_uid(&f->c), 64);
	assert_int_equal(f->c.idle_timeout_ms, 300000);
	assert_true(f->c.request_log);
	assert_true(f->c.memory_guard);
	assert_int_equal(parse(f, &act, "--config", "/dev/null", "--max-conns", "2", NULL), 0);
	assert_int_equal(kvp_config_conns_per_uid(&f->c), 1);
	assert_int_equal(parse(f, &act, "--config", "/dev/null", "--max-conns-per-uid", "5",
			       "--idle-timeout-ms", "0", "--request-log=no", "--memory-guard=no",
			       NULL),
			 0);
	assert_int_equal(kvp_config_conns_per_uid(&f->c), 5);
	assert_int_equal(f->c.idle_timeout_ms, 0);
	assert_false(f->c.request_log);
	assert_false(f->c.memory_guard);
	assert_int_equal(parse(f, &act, "--config", "/dev/null", "--idle-timeout-ms", "-1", NULL),
			 -EINVAL);
	assert_non_null(strstr(f->err, "--idle-timeout-ms"));
}

static void test_domain_resource_keys(void **state)
{
	struct fixture *f = *state;
	enum kvp_config_action act;

	/* no memory budget of its own, idle per-uid domains reclaimed after 10 min */
	assert_int_equal(parse(f, &act, "--config", "/dev/null", NULL), 0);
	assert_int_equal(f->c.memory_limit_bytes, 0);
	assert_int_equal(f->c.domains_idle_reclaim_ms, 600000);
	assert_int_equal(parse(f, &act, "--config", "/dev/null", "--memory-limit", "3G",
			       "--domains-idle-reclaim-ms", "0", NULL),
			 0);
	assert_int_equal(f->c.memory_limit_bytes, 3ull << 30);
	assert_int_equal(f->c.domains_idle_reclaim_ms, 0);
	assert_int_equal(parse(f, &act, "--config", "/dev/null", "--domains-idle-reclaim-ms",
			       "604800001", NULL),
			 -EINVAL);
	assert_non_null(strstr(f->err, "out of range"));
}

static void test_speculative_keys(void **state)
{
	struct fixture *f = *state;
	enum kvp_config_action act;

	/* compute/draft.h's defaults, each bounded by what a draft source holds */
	assert_int_equal(parse(f, &act, "--config", "/dev/null", NULL), 0);
	assert_true(f->c.speculative);
	assert_int_equal(f->c.speculative_draft_max, 8);
	assert_int_equal(f->c.speculative_ngram, 4);
	write_file(f->path, "[scheduler]\nspeculative_draft_max = 16\nspeculative_ngram = 1\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), 0);
	assert_int_equal(f->c.speculative_draft_max, 16);
	assert_int_equal(f->c.speculative_ngram, 1);
	write_file(f->path, "[scheduler]\nspeculative_draft_max = 17\n");
	assert_int_equal(parse(f, &act, "--config", f->path, NULL), -EINVAL);
	assert_non_null(strstr(f->err, ":2: scheduler.speculative_draft_max: 17 is out of range"));
	assert_int_equal(parse(f, &act, "--config", "/dev/null", "--speculative-ngram", "9", NULL),
			 -EINVAL);
	assert_non_null(strstr(f->err, "--speculative-ngram"));
	assert_int_equal(parse(f, &act, "--config", "/dev/null", "--speculative-draft-max", "0",
			       NULL),
			 -EINVAL);
	assert_non_null(strstr(f->err, "--speculative-draft-max"));
}

static void test_usage_lists_every_flag(void **state)
{
	struct fixture *f = *state;
	const char *flags[] = { "--config",	      "--model",     "--socket",
				"--status-socket",    "--pool-size", "--block-size",
				"--huge-pages",	      "--threads",   "--foreground",
				"--log-level",	      "--state-dir", "--kv-dtype",
				"--drain-timeout-ms", "--weights" };
	char text[16384];
	size_t n;
	FILE *fp;

	/* --help tells about every flag */
	fp = fopen(f->path, "w+");
	assert_non_null(fp);
	kvp_config_usage(fp);
	rewind(fp);
	n = fread(text, 1, sizeof(text) - 1, fp);
	text[n] = '\0';
	fclose(fp);
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
		assert_non_null(strstr(text, flags[i]));
	/* the weights default is a trade an operator must be told about */
	assert_non_null(strstr(text, "slower start"));
	assert_non_null(strstr(text, "long-running daemon"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_kv_type_alias, setup, teardown),
		cmocka_unit_test_setup_teardown(test_defaults_are_valid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_then_flags_override, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_key_names_key_and_line, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_bad_value_names_key_and_line, setup, teardown),
		cmocka_unit_test_setup_teardown(test_weights_key, setup, teardown),
		cmocka_unit_test_setup_teardown(test_structural_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_missing_files, setup, teardown),
		cmocka_unit_test(test_sizes),
		cmocka_unit_test_setup_teardown(test_flag_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_check_cross_fields, setup, teardown),
		cmocka_unit_test_setup_teardown(test_print_reads_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_speculative_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_usage_lists_every_flag, setup, teardown),
		cmocka_unit_test_setup_teardown(test_status_socket_follows_socket, setup, teardown),
		cmocka_unit_test_setup_teardown(test_conn_limit_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_domain_resource_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_domain_cache_overrides, setup, teardown),
		cmocka_unit_test_setup_teardown(test_domain_cache_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_domain_priority, setup, teardown),
		cmocka_unit_test_setup_teardown(test_domain_priority_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_status_group, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
