/* SPDX-License-Identifier: MIT */
/*
 * test_remote_config.c - the remote tier's settings and ACL lines: store URLs parsed
 * (TCP, IPv6, Unix) and refused with a reason (TLS without hiredis_ssl, credentials in
 * the URL, bad ports, trailing paths); keys set by name with ranges; domains with safe
 * names; the check refusing a plaintext store off this host unless allowed; and the
 * ACL lines confining a domain to its prefix and commands.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "shm/remote/acl.h"
#include "shm/remote/config.h"

/* Good URLs parse into transport, host, port, path and whether the store is local. */
static void test_urls(void **state)
{
	struct kvp_remote_addr a;
	char err[256];

	(void)state;
	assert_int_equal(kvp_remote_url_parse(&a, "redis://127.0.0.1:6390", err, sizeof(err)), 0);
	assert_int_equal(a.transport, KVP_REMOTE_TCP);
	assert_string_equal(a.host, "127.0.0.1");
	assert_int_equal(a.port, 6390);
	assert_true(a.loopback);
	assert_int_equal(kvp_remote_url_parse(&a, "redis://cache.internal", err, sizeof(err)), 0);
	assert_string_equal(a.host, "cache.internal");
	assert_int_equal(a.port, 6379);
	assert_false(a.loopback);
	assert_int_equal(kvp_remote_url_parse(&a, "redis://[::1]:7000/", err, sizeof(err)), 0);
	assert_string_equal(a.host, "::1");
	assert_int_equal(a.port, 7000);
	assert_true(a.loopback);
	assert_int_equal(kvp_remote_url_parse(&a, "redis://[fd00::5]", err, sizeof(err)), 0);
	assert_false(a.loopback);
	assert_int_equal(kvp_remote_url_parse(&a, "redis://localhost:1", err, sizeof(err)), 0);
	assert_true(a.loopback);
	assert_int_equal(kvp_remote_url_parse(&a, "redis://10.1.2.3:6379", err, sizeof(err)), 0);
	assert_false(a.loopback);
	assert_int_equal(kvp_remote_url_parse(&a, "unix:/run/redis/redis.sock", err, sizeof(err)),
			 0);
	assert_int_equal(a.transport, KVP_REMOTE_UNIX);
	assert_string_equal(a.path, "/run/redis/redis.sock");
	assert_true(a.loopback);
	assert_int_equal(kvp_remote_url_parse(&a, "unix:///tmp/r.sock", err, sizeof(err)), 0);
	assert_string_equal(a.path, "/tmp/r.sock");
}

/* Bad URLs are refused with the reason in the sentence. */
static void test_bad_urls(void **state)
{
	static const struct {
		const char *url;
		int err;
		const char *says;
	} bad[] = {
		{ "", -EINVAL, "empty" },
		{ "rediss://cache:6380", -EPROTONOSUPPORT, "TLS" },
		{ "http://cache", -EPROTONOSUPPORT, "expected" },
		{ "redis://user:pw@cache:6379", -EINVAL, "no user or password" },
		{ "redis://cache:0", -EINVAL, "port" },
		{ "redis://cache:65536", -EINVAL, "port" },
		{ "redis://cache:x", -EINVAL, "port" },
		{ "redis://cache:6379/2", -EINVAL, "database" },
		{ "redis://", -EINVAL, "no host" },
		{ "redis://ca che", -EINVAL, "bad character" },
		{ "redis://[::1", -EINVAL, "unclosed" },
		{ "redis://[nothex]:1", -EINVAL, "IPv6" },
		{ "unix:relative.sock", -EINVAL, "absolute" },
	};
	struct kvp_remote_addr a;
	char err[512], longp[200];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_equal(kvp_remote_url_parse(&a, bad[i].url, err, sizeof(err)),
				 bad[i].err);
		if (!strstr(err, bad[i].says))
			fail_msg("'%s': '%s' does not say '%s'", bad[i].url, err, bad[i].says);
	}
	memset(longp, 'a', sizeof(longp));
	memcpy(longp, "unix:/", 6);
	longp[sizeof(longp) - 1] = '\0';
	assert_int_equal(kvp_remote_url_parse(&a, longp, err, sizeof(err)), -ENAMETOOLONG);
}

/* Keys by name: each sets its field, values out of range and unknown keys are refused. */
static void test_set(void **state)
{
	struct kvp_remote_config c;
	char err[256];

	(void)state;
	kvp_remote_config_defaults(&c);
	assert_int_equal(c.publish, KVP_REMOTE_PUBLISH_ALL);
	assert_int_equal(kvp_remote_config_set(&c, "url", "unix:/tmp/x.sock", err, sizeof(err)), 0);
	assert_string_equal(c.url, "unix:/tmp/x.sock");
	assert_int_equal(c.addr.transport, KVP_REMOTE_UNIX);
	assert_int_equal(kvp_remote_config_set(&c, "ttl_s", "600", err, sizeof(err)), 0);
	assert_int_equal(c.ttl_s, 600);
	assert_int_equal(kvp_remote_config_set(&c, "publish", "selective", err, sizeof(err)), 0);
	assert_int_equal(c.publish, KVP_REMOTE_PUBLISH_SELECTIVE);
	assert_int_equal(kvp_remote_config_set(&c, "op_timeout_ms", "150", err, sizeof(err)), 0);
	assert_int_equal(c.op_timeout_ms, 150);
	assert_int_equal(kvp_remote_config_set(&c, "allow_plaintext", "1", err, sizeof(err)), 0);
	assert_true(c.allow_plaintext);
	assert_int_equal(kvp_remote_config_set(&c, "ttl_s", "0", err, sizeof(err)), -ERANGE);
	assert_non_null(strstr(err, "remote.ttl_s"));
	assert_int_equal(kvp_remote_config_set(&c, "queue_blocks", "-1", err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(kvp_remote_config_set(&c, "publish", "some", err, sizeof(err)), -EINVAL);
	assert_int_equal(kvp_remote_config_set(&c, "allow_plaintext", "2", err, sizeof(err)),
			 -ERANGE);
	assert_int_equal(kvp_remote_config_set(&c, "colour", "1", err, sizeof(err)), -ENOENT);
	assert_int_equal(kvp_remote_config_set(&c, "url", "rediss://x", err, sizeof(err)),
			 -EPROTONOSUPPORT);
	assert_string_equal(c.url, "unix:/tmp/x.sock"); /* unchanged on error */
}

/* Domains: names are plain, unique, bounded in number; passwords fit one ACL rule. */
static void test_domains(void **state)
{
	struct kvp_remote_config c;
	char err[256], name[8];
	uint32_t id;

	(void)state;
	kvp_remote_config_defaults(&c);
	assert_int_equal(kvp_remote_config_add_domain(&c, &id, "a", "kvp-a", "pw", err,
						      sizeof(err)),
			 0);
	assert_int_equal(id, 0);
	assert_int_equal(kvp_remote_config_add_domain(&c, &id, "b", NULL, NULL, err, sizeof(err)),
			 0);
	assert_int_equal(id, 1);
	assert_int_equal(kvp_remote_config_add_domain(&c, &id, "a", "x", "y", err, sizeof(err)),
			 -EEXIST);
	assert_int_equal(kvp_remote_config_add_domain(&c, &id, "a:b", NULL, NULL, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(kvp_remote_config_add_domain(&c, &id, "c*", NULL, NULL, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(kvp_remote_config_add_domain(&c, &id, "c", "bad user", NULL, err,
						      sizeof(err)),
			 -EINVAL);
	assert_int_equal(kvp_remote_config_add_domain(&c, &id, "c", "u", "", err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(kvp_remote_config_add_domain(&c, &id, "c", "u", "two words", err,
						      sizeof(err)),
			 -EINVAL);
	for (int i = 2; i < KVP_REMOTE_MAX_DOMAINS; i++) {
		snprintf(name, sizeof(name), "d%d", i);
		assert_int_equal(kvp_remote_config_add_domain(&c, &id, name, NULL, NULL, err,
							      sizeof(err)),
				 0);
	}
	assert_int_equal(kvp_remote_config_add_domain(&c, &id, "z", NULL, NULL, err, sizeof(err)),
			 -ENOSPC);
}

/* The check: a URL and a domain are needed; a TCP store off this host needs
 * allow_plaintext (there is no TLS); limits must hold. */
static void test_check(void **state)
{
	struct kvp_remote_config c;
	char err[512];
	uint32_t id;

	(void)state;
	kvp_remote_config_defaults(&c);
	assert_int_equal(kvp_remote_config_check(&c, err, sizeof(err)), -EINVAL);
	assert_int_equal(kvp_remote_config_set(&c, "url", "redis://10.0.0.5:6379", err,
					       sizeof(err)),
			 0);
	assert_int_equal(kvp_remote_config_check(&c, err, sizeof(err)), -EINVAL); /* no domain */
	assert_int_equal(kvp_remote_config_add_domain(&c, &id, "a", "u", "p", err, sizeof(err)), 0);
	assert_int_equal(kvp_remote_config_check(&c, err, sizeof(err)), -EPERM);
	assert_non_null(strstr(err, "allow_plaintext"));
	c.allow_plaintext = true;
	assert_int_equal(kvp_remote_config_check(&c, err, sizeof(err)), 0);
	c.allow_plaintext = false;
	assert_int_equal(kvp_remote_config_set(&c, "url", "redis://127.0.0.1:6379", err,
					       sizeof(err)),
			 0);
	assert_int_equal(kvp_remote_config_check(&c, err, sizeof(err)), 0);
	c.breaker_probe_max_ms = c.breaker_probe_ms - 1;
	assert_int_equal(kvp_remote_config_check(&c, err, sizeof(err)), -EINVAL);
}

/* ACL lines: a domain user is confined to its prefix and the tier's commands (no SCAN,
 * KEYS, DEL...); users without a password, or the default user, are refused. */
static void test_acl(void **state)
{
	struct kvp_remote_domain_config d = { .name = "tenant-a",
					      .user = "kvp-a",
					      .password = "s3cret" };
	char line[512];

	(void)state;
	assert_true(kvp_remote_acl_domain(line, sizeof(line), &d, KVP_REMOTE_ACL_COMMAND) > 0);
	assert_string_equal(line, "ACL SETUSER kvp-a reset on >s3cret resetkeys ~kvp1:tenant-a:* "
				  "resetchannels -@all +get +set +exists +ping");
	assert_true(kvp_remote_acl_domain(line, sizeof(line), &d, KVP_REMOTE_ACL_FILE) > 0);
	assert_string_equal(line, "user kvp-a reset on >s3cret resetkeys ~kvp1:tenant-a:* "
				  "resetchannels -@all +get +set +exists +ping");
	assert_null(strstr(line, "+scan"));
	assert_null(strstr(line, "+keys"));
	assert_null(strstr(line, "+@"));
	assert_int_equal(kvp_remote_acl_domain(line, 20, &d, KVP_REMOTE_ACL_COMMAND), -ENOSPC);
	d.password[0] = '\0';
	assert_int_equal(kvp_remote_acl_domain(line, sizeof(line), &d, KVP_REMOTE_ACL_COMMAND),
			 -EINVAL);
	strcpy(d.password, "x");
	strcpy(d.user, "default");
	assert_int_equal(kvp_remote_acl_domain(line, sizeof(line), &d, KVP_REMOTE_ACL_COMMAND),
			 -EINVAL);
	assert_true(kvp_remote_acl_router(line, sizeof(line), "router", "pw",
					  KVP_REMOTE_ACL_COMMAND) > 0);
	assert_string_equal(line, "ACL SETUSER router reset on >pw resetkeys %R~kvp1:*:r:* "
				  "resetchannels -@all +get +ping");
	assert_int_equal(kvp_remote_acl_router(line, sizeof(line), "router", "",
					       KVP_REMOTE_ACL_COMMAND),
			 -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_urls),  cmocka_unit_test(test_bad_urls),
		cmocka_unit_test(test_set),   cmocka_unit_test(test_domains),
		cmocka_unit_test(test_check), cmocka_unit_test(test_acl),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
