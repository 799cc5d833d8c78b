/* SPDX-License-Identifier: MIT */
/*
 * test_util.c - util/: the monotonic clock, strict number parsing, UTF-8 validation,
 * the byte cursor, percentiles, the sample ring, the config key-table engine, mkdir -p, the error buffer, text buffers and the JSON
 * writer, whose output is parsed back with jansson (test_run, test_cli and test_status
 * check the programs' JSON byte for byte against what they printed before sharing it).
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>
#include <cmocka.h>
#include <jansson.h>

#include "tests/lib/testlib.h"
#include "util/buf.h"
#include "util/cursor.h"
#include "util/errmsg.h"
#include "util/fs.h"
#include "util/json.h"
#include "util/keytab.h"
#include "util/parse.h"
#include "util/samples.h"
#include "util/stats.h"
#include "util/time.h"
#include "util/utf8.h"

static void test_clock_is_monotonic(void **state)
{
	uint64_t a = kvp_now_ns();
	uint64_t b;

	/* never goes back, and moves over a sleep */
	usleep(2000);
	b = kvp_now_ns();
	assert_true(b >= a + 1000000);
	assert_float_equal(kvp_ns_to_ms(2500000), 2.5, 1e-12);
	assert_float_equal(kvp_ns_to_s(1500000000), 1.5, 1e-12);
}

static void test_parse_u64_is_strict(void **state)
{
	static const char *bad[] = { "", " 1", "+1", "-1", "1 ", "1x", "0x10", "1.0", NULL };
	uint64_t v = 7;

	/* the whole string is the number; range and overflow are -ERANGE */
	assert_int_equal(kvp_parse_u64("0", 0, 10, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(kvp_parse_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
	assert_true(v == UINT64_MAX);
	assert_int_equal(kvp_parse_u64("18446744073709551616", 0, UINT64_MAX, &v), -ERANGE);
	assert_int_equal(kvp_parse_u64("11", 0, 10, &v), -ERANGE);
	assert_int_equal(kvp_parse_u64("0", 1, 10, &v), -ERANGE);
	assert_true(v == UINT64_MAX); /* untouched on error */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(kvp_parse_u64(bad[i], 0, UINT64_MAX, &v), -EINVAL);
}

static void test_parse_i64_is_strict(void **state)
{
	static const char *bad[] = { "", "-", "+1", "--1", " -1", "-1 ", "-0x1", "1.0", NULL };
	int64_t v = 7;

	/* one optional '-', then as kvp_parse_u64(); both ends of int64_t */
	assert_int_equal(kvp_parse_i64("-1000", -1000, 1000, &v), 0);
	assert_int_equal(v, -1000);
	assert_int_equal(kvp_parse_i64("-0", -1, 1, &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(kvp_parse_i64("-9223372036854775808", INT64_MIN, 0, &v), 0);
	assert_true(v == INT64_MIN);
	assert_int_equal(kvp_parse_i64("9223372036854775807", 0, INT64_MAX, &v), 0);
	assert_true(v == INT64_MAX);
	assert_int_equal(kvp_parse_i64("9223372036854775808", INT64_MIN, INT64_MAX, &v), -ERANGE);
	assert_int_equal(kvp_parse_i64("-9223372036854775809", INT64_MIN, INT64_MAX, &v), -ERANGE);
	assert_int_equal(kvp_parse_i64("-1001", -1000, 1000, &v), -ERANGE);
	assert_int_equal(kvp_parse_i64("1001", -1000, 1000, &v), -ERANGE);
	assert_true(v == INT64_MAX); /* untouched on error */
	for (size_t i = 0; bad[i]; i++)
		assert_int_equal(kvp_parse_i64(bad[i], INT64_MIN, INT64_MAX, &v), -EINVAL);
}

static void test_parse_size_suffixes(void **state)
{
	static const char *bad[] = { "1KiBx", "iB", "1iB", "1 KiB", "1kb", NULL };
	uint64_t v;

	/* (test_config covers the plain cases) B after a number or suffix, the 64-bit edge */
	assert_int_equal(kvp_parse_size("3mB", &v), 0);
	assert_int_equal(v, 3ull << 20);
	assert_int_equal(kvp_parse_size("512B", &v), 0);
	assert_int_equal(v, 512);
	assert_int_equal(kvp_parse_size("16777215T", &v), 0);
	assert_true(v == 16777215ull << 40);
	assert_int_equal(kvp_parse_size("16777216T", &v), -ERANGE);
	for (size_t i = 0; bad[i]; i++)
		assert_int_equal(kvp_parse_size(bad[i], &v), -EINVAL);
}

static void test_parse_float(void **state)
{
	static const char *bad[] = { "",   "nan",  "inf", "-inf",  " 1",
				     "+1", "1e99", "1,5", "0x1p3", NULL };
	float v;

	/* finite decimal numbers only, range checked */
	assert_int_equal(kvp_parse_float("0.5", 0, 1, &v), 0);
	assert_float_equal(v, 0.5, 0);
	assert_int_equal(kvp_parse_float(".25", 0, 1, &v), 0);
	assert_float_equal(v, 0.25, 0);
	assert_int_equal(kvp_parse_float("-1", -2, 0, &v), 0);
	assert_float_equal(v, -1, 0);
	assert_int_equal(kvp_parse_float("1e-3", 0, 1, &v), 0);
	assert_int_equal(kvp_parse_float("1.5", 0, 1, &v), -ERANGE);
	assert_int_equal(kvp_parse_float("0x1p3", 0, 100, &v), -EINVAL);
	for (size_t i = 0; i + 1 < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(kvp_parse_float(bad[i], -1e30f, 1e30f, &v), -EINVAL);
}

static void test_parse_ids(void **state)
{
	static const char *bad[] = { "", ",", "1,", ",1", "1,,2", "1,-2", "1, 2", "a", NULL };
	int32_t *ids;
	size_t n;

	/* comma-separated, no empty element, each in [0, INT32_MAX] */
	assert_int_equal(kvp_parse_ids("5", &ids, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(ids[0], 5);
	free(ids);
	assert_int_equal(kvp_parse_ids("0,2147483647,12", &ids, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(ids[1], INT32_MAX);
	assert_int_equal(ids[2], 12);
	free(ids);
	assert_int_equal(kvp_parse_ids("2147483648", &ids, &n), -ERANGE);
	for (size_t i = 0; i + 1 < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(kvp_parse_ids(bad[i], &ids, &n), -EINVAL);
}

static void test_utf8_rfc3629(void **state)
{
	static const struct {
		const char *s;
		size_t n;
		size_t len;
	} cases[] = {
		{ "a", 1, 1 },
		{ "\xc3\xa9", 2, 2 },
		{ "\xe2\x82\xac", 3, 3 },
		{ "\xf0\x9f\x98\x80", 4, 4 },
		{ "\xf4\x8f\xbf\xbf", 4, 4 }, /* U+10FFFF */
		{ "\xc3", 1, 0 },	      /* cut short */
		{ "\xc0\xaf", 2, 0 },	      /* overlong '/' */
		{ "\xe0\x80\xaf", 3, 0 },     /* overlong */
		{ "\xed\xa0\x80", 3, 0 },     /* surrogate U+D800 */
		{ "\xf4\x90\x80\x80", 4, 0 }, /* past U+10FFFF */
		{ "\xf5\x80\x80\x80", 4, 0 },
		{ "\x80", 1, 0 },	  /* lone continuation */
		{ "\xe2\x28\xa1", 3, 0 }, /* bad continuation */
	};

	/* what a strict JSON parser accepts, and nothing else */
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(kvp_utf8_char_len(cases[i].s, cases[i].n), cases[i].len);
	assert_true(kvp_utf8_valid("h\xc3\xa9llo \xf0\x9f\x98\x80", 11));
	assert_false(kvp_utf8_valid("h\xc3", 2));
	assert_true(kvp_utf8_valid("", 0));
}

static void test_cursor_bounds(void **state)
{
	static const uint8_t bytes[] = { 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0x80, 9 };
	struct kvp_cur c;
	uint32_t a;
	uint64_t b;

	/* reads stop at the end without moving; integers are little-endian */
	kvp_cur_init(&c, bytes, sizeof(bytes));
	assert_int_equal(kvp_cur_le32(&c, &a), 0);
	assert_int_equal(a, 1);
	assert_int_equal(kvp_cur_le64(&c, &b), 0);
	assert_true(b == (0x80ull << 56 | 2));
	assert_int_equal(kvp_cur_left(&c), 1);
	assert_int_equal(kvp_cur_le32(&c, &a), -EBADMSG);
	assert_int_equal(kvp_cur_le64(&c, &b), -EBADMSG);
	assert_null(kvp_cur_take(&c, 2));
	assert_null(kvp_cur_take(&c, UINT64_MAX));
	assert_int_equal(c.off, 12);
	assert_ptr_equal(kvp_cur_take(&c, 1), bytes + 12);
	/* no input at all: 0 bytes can be taken (a non-NULL pointer), 1 cannot */
	kvp_cur_init(&c, NULL, 0);
	assert_non_null(kvp_cur_take(&c, 0));
	assert_null(kvp_cur_take(&c, 1));
	assert_int_equal(kvp_cur_le32(&c, &a), -EBADMSG);
	assert_int_equal(kvp_cur_left(&c), 0);
	assert_non_null(kvp_cur_take(&c, 0));
}

static void test_percentiles(void **state)
{
	double v[] = { 5, 1, 4, 2, 3, 10, 9, 8, 7, 6 };

	/* nearest rank over the sorted sample; no sample, no value */
	kvp_sort_doubles(v, 10);
	for (int i = 0; i < 10; i++)
		assert_float_equal(v[i], i + 1, 0);
	assert_float_equal(kvp_percentile_sorted(v, 10, 50), 5, 0);
	assert_float_equal(kvp_percentile_sorted(v, 10, 99), 10, 0);
	assert_float_equal(kvp_percentile_sorted(v, 10, 100), 10, 0);
	assert_float_equal(kvp_percentile_sorted(v, 10, 0), 1, 0);
	assert_float_equal(kvp_percentile_sorted(v, 10, 10), 1, 0);
	assert_float_equal(kvp_percentile_sorted(v, 10, 11), 2, 0);
	assert_true(isnan(kvp_percentile_sorted(v, 0, 50)));
}

/*
 * The sample ring keeps the newest cap samples; a snapshot catching up copies only the
 * new ones and ends holding what the ring holds, even after the ring wrapped past it;
 * quantiles are nearest rank, NaN with no sample.
 */
static void test_sample_ring(void **state)
{
	double v[4], w[4], out[4];
	struct kvp_samples r, snap;
	struct kvp_quantiles q;
	uint32_t n;

	kvp_samples_init(&r, v, 4);
	kvp_samples_init(&snap, w, 4);
	assert_int_equal(kvp_samples_copy(&r, out), 0);
	kvp_quantiles_of(out, 0, &q);
	assert_true(isnan(q.p50) && isnan(q.p99) && isnan(q.max));
	kvp_samples_add(&r, 3);
	kvp_samples_add(&r, 1);
	kvp_samples_catch_up(&snap, &r);
	assert_int_equal(kvp_samples_count(&snap), 2);
	for (int i = 0; i < 9; i++) /* wraps twice past the snapshot */
		kvp_samples_add(&r, 10 + i);
	assert_int_equal(r.n, 11);
	assert_int_equal(kvp_samples_count(&r), 4);
	kvp_samples_catch_up(&snap, &r);
	assert_int_equal(snap.n, 11);
	n = kvp_samples_copy(&snap, out);
	assert_int_equal(n, 4);
	kvp_quantiles_of(out, n, &q);
	/* the newest four: 15, 16, 17, 18 */
	assert_float_equal(out[0], 15, 0);
	assert_float_equal(q.p50, 16, 0);
	assert_float_equal(q.p99, 18, 0);
	assert_float_equal(q.max, 18, 0);
}

/*
 * The key-table engine: each value type parses within its bounds, refuses with one
 * wording, leaves the field alone on a refusal, and prints what it reads back.
 */
static void test_keytab(void **state)
{
	static const char *const names[] = { NULL, "copy", "map" };
	const struct kvp_key str = { KVP_KEY_STR, .cap = 4 };
	const struct kvp_key u32 = { KVP_KEY_U32, .min = 1, .max = 64 };
	const struct kvp_key sz64 = { KVP_KEY_SIZE, .cap = 8, .min = 1, .max = 1ull << 50 };
	const struct kvp_key sz32 = { KVP_KEY_SIZE, .cap = 4, .min = 0, .max = 1ull << 31 };
	const struct kvp_key en = { KVP_KEY_ENUM, .names = names, .n_names = 3 };
	const struct kvp_key bo = { .type = KVP_KEY_BOOL };
	const struct kvp_key lv = { .type = KVP_KEY_LEVEL };
	char s[4] = "ab", err[128], buf[64];
	uint32_t u = 7, e = 2;
	uint64_t v = 0;
	bool b = false;
	int prio = 0;

	assert_int_equal(kvp_key_parse(&str, s, "abcd", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "too long (at most 3 bytes)");
	assert_string_equal(s, "ab");
	assert_int_equal(kvp_key_parse(&str, s, "xyz", err, sizeof(err)), 0);
	assert_string_equal(s, "xyz");

	assert_int_equal(kvp_key_parse(&u32, &u, "65", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "65 is out of range [1, 64]");
	assert_int_equal(kvp_key_parse(&u32, &u, "x", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "'x' is not a whole number");
	assert_int_equal(u, 7);
	kvp_key_text(&u32, &u, buf, sizeof(buf));
	assert_string_equal(buf, "7");

	assert_int_equal(kvp_key_parse(&sz64, &v, "2T", err, sizeof(err)), 0);
	assert_true(v == 2ull << 40);
	kvp_key_text(&sz64, &v, buf, sizeof(buf));
	assert_string_equal(buf, "2048G");
	assert_int_equal(kvp_key_parse(&sz64, &v, "12X", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "'12X' is not a size (a number with an optional K, M, G or T "
				 "suffix)");
	assert_int_equal(kvp_key_parse(&sz32, &u, "3M", err, sizeof(err)), 0);
	assert_int_equal(u, 3 << 20);
	kvp_key_text(&sz32, &u, buf, sizeof(buf));
	assert_string_equal(buf, "3M");

	assert_int_equal(kvp_key_parse(&en, &e, "COPY", err, sizeof(err)), 0);
	assert_int_equal(e, 1);
	kvp_key_text(&en, &e, buf, sizeof(buf));
	assert_string_equal(buf, "copy");
	assert_int_equal(kvp_key_parse(&en, &e, "disk", err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "'disk' is not one of copy, map"); /* the NULL name: not a word */
	assert_int_equal(e, 1);

	assert_int_equal(kvp_key_parse(&bo, &b, "On", err, sizeof(err)), 0);
	assert_true(b);
	kvp_key_text(&bo, &b, buf, sizeof(buf));
	assert_string_equal(buf, "yes");
	assert_int_equal(kvp_key_parse(&bo, &b, "maybe", err, sizeof(err)), -EINVAL);

	assert_int_equal(kvp_key_parse(&lv, &prio, "debug", err, sizeof(err)), 0);
	assert_int_equal(prio, LOG_DEBUG);
	assert_int_equal(kvp_key_parse(&lv, &prio, "loud", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'loud' is not a log level"));
}

static void test_mkdir_p(void **state)
{
	char dir[256], path[512];
	struct stat st;

	/* parents made, an existing directory is fine, a file in the way is not */
	assert_int_equal(kvp_test_tmpdir(dir, sizeof(dir)), 0);
	snprintf(path, sizeof(path), "%s/a/b/c", dir);
	assert_int_equal(kvp_mkdir_p(path, 0750), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(kvp_mkdir_p(path, 0750), 0);
	snprintf(path, sizeof(path), "%s/a/file", dir);
	fclose(fopen(path, "w"));
	snprintf(path, sizeof(path), "%s/a/file/x", dir);
	assert_int_equal(kvp_mkdir_p(path, 0750), -ENOTDIR);
	{
		char *big = malloc(PATH_MAX + 10);

		memset(big, 'x', PATH_MAX + 9);
		big[PATH_MAX + 9] = '\0';
		assert_int_equal(kvp_mkdir_p(big, 0750), -ENAMETOOLONG);
		free(big);
	}
	kvp_test_rmtree(dir);
}

static void test_errmsg(void **state)
{
	char err[8] = "unset";

	/* bounded, NUL-terminated, and a no-op without a buffer */
	kvp_errmsg(err, sizeof(err), "value %d too big", 12345);
	assert_string_equal(err, "value 1");
	kvp_errmsg(NULL, 10, "x");
	kvp_errmsg(err, 0, "y");
	assert_string_equal(err, "value 1");
}

static void test_buf_fixed_is_whole_or_failed(void **state)
{
	struct kvp_buf b;
	char mem[8];

	/* like snprintf: n bytes need n + 1; the first failure sticks */
	kvp_buf_init_fixed(&b, mem, sizeof(mem));
	kvp_buf_printf(&b, "%s", "1234567");
	assert_int_equal(kvp_buf_finish(&b), 7);
	assert_string_equal(mem, "1234567");
	kvp_buf_add(&b, "8", 1);
	assert_int_equal(kvp_buf_finish(&b), -ENOSPC);
	kvp_buf_add(&b, "", 0);
	assert_int_equal(kvp_buf_finish(&b), -ENOSPC);
	kvp_buf_init_fixed(&b, mem, sizeof(mem));
	kvp_buf_printf(&b, "%d", 12345678);
	assert_int_equal(kvp_buf_finish(&b), -ENOSPC);
	assert_int_equal(strlen(mem), 0); /* no partial tail */
	kvp_buf_init_fixed(&b, mem, 0);
	assert_int_equal(kvp_buf_finish(&b), -ENOSPC);
	kvp_buf_deinit(&b);
}

static void test_buf_grows(void **state)
{
	struct kvp_buf b = KVP_BUF_INIT;
	char big[5000];

	/* a growable buffer takes anything and stays NUL-terminated */
	memset(big, 'z', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(kvp_buf_finish(&b), 0);
	kvp_buf_printf(&b, "<%s>", big);
	kvp_buf_add(&b, "!", 1);
	assert_int_equal(kvp_buf_finish(&b), (int)sizeof(big) + 2);
	assert_int_equal(strlen(b.p), sizeof(big) + 2);
	assert_int_equal(b.p[sizeof(big)], '>');
	kvp_buf_fail(&b, -EIO);
	assert_int_equal(kvp_buf_finish(&b), -EIO);
	kvp_buf_deinit(&b);
	kvp_buf_deinit(&b);
}

static void test_json_escapes_one_policy(void **state)
{
	/* every control character, DEL, and each kind of ill-formed byte */
	static const char in[] = "a\tb\x01\x1b\x7f\x1f\r\x0c\x08\n\"\\"
				 "\xff"
				 "\xed\xa0\x80"
				 "\xc3"
				 "\xf0\x9f\x98"
				 "ok\xc3\xa9";
	struct kvp_buf b = KVP_BUF_INIT;
	struct kvp_json j;
	json_error_t jerr;
	json_t *root;

	/*
	 * jansson spells the control characters (\t \r \f \b \n short, the rest \u00XX);
	 * DEL stays as it is; each byte that does not begin a well-formed character is
	 * \ufffd, so the text always parses, and parses to the policy's string
	 */
	kvp_json_init(&j, &b);
	kvp_json_begin(&j, NULL, '[');
	kvp_json_str(&j, NULL, in, sizeof(in) - 1);
	kvp_json_str(&j, NULL, "nul\0byte", 8);
	kvp_json_end(&j, ']');
	assert_true(kvp_buf_finish(&b) > 0);
	assert_string_equal(b.p, "[\"a\\tb\\u0001\\u001B\x7f\\u001F\\r\\f\\b\\n\\\"\\\\"
				 "\\ufffd"
				 "\\ufffd\\ufffd\\ufffd"
				 "\\ufffd"
				 "\\ufffd\\ufffd\\ufffd"
				 "ok\xc3\xa9\",\"nul\\u0000byte\"]");
	root = json_loadb(b.p, b.len, JSON_ALLOW_NUL, &jerr);
	assert_non_null(root);
	assert_string_equal(json_string_value(json_array_get(root, 0)),
			    "a\tb\x01\x1b\x7f\x1f\r\x0c\x08\n\"\\"
			    "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
			    "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
			    "ok\xc3\xa9");
	assert_int_equal(json_string_length(json_array_get(root, 1)), 8);
	json_decref(root);
	kvp_buf_deinit(&b);
}

static void test_json_numbers_and_nesting(void **state)
{
	struct kvp_buf b = KVP_BUF_INIT;
	struct kvp_json j;

	/* commas placed by the writer; NaN and infinity print as 0 (JSON has neither) */
	kvp_json_init(&j, &b);
	kvp_json_begin(&j, NULL, '{');
	kvp_json_u64(&j, "max", UINT64_MAX);
	kvp_json_i64(&j, "min", INT64_MIN);
	kvp_json_begin(&j, "a", '[');
	kvp_json_begin(&j, NULL, '{');
	kvp_json_end(&j, '}');
	kvp_json_begin(&j, NULL, '[');
	kvp_json_end(&j, ']');
	kvp_json_sig(&j, NULL, 2.0 / 3.0, 6);
	kvp_json_fixed(&j, NULL, NAN, 3);
	kvp_json_sig(&j, NULL, -INFINITY, 6);
	kvp_json_end(&j, ']');
	kvp_json_begin(&j, "o", '{');
	kvp_json_end(&j, '}');
	kvp_json_end(&j, '}');
	assert_true(kvp_buf_finish(&b) > 0);
	assert_string_equal(b.p, "{\"max\":18446744073709551615,\"min\":-9223372036854775808,"
				 "\"a\":[{},[],0.666667,0.000,0],\"o\":{}}");
	kvp_buf_deinit(&b);
}

static void test_json_bool_and_null(void **state)
{
	struct kvp_buf b = KVP_BUF_INIT;
	struct kvp_json j;

	/* true, false and null as members and as array elements, commas placed */
	kvp_json_init(&j, &b);
	kvp_json_begin(&j, NULL, '{');
	kvp_json_bool(&j, "t", true);
	kvp_json_null(&j, "n");
	kvp_json_begin(&j, "a", '[');
	kvp_json_bool(&j, NULL, false);
	kvp_json_null(&j, NULL);
	kvp_json_end(&j, ']');
	kvp_json_end(&j, '}');
	assert_true(kvp_buf_finish(&b) > 0);
	assert_string_equal(b.p, "{\"t\":true,\"n\":null,\"a\":[false,null]}");
	kvp_buf_deinit(&b);
}

static void test_json_fixed_buffer(void **state)
{
	char mem[64];
	struct kvp_buf b;
	struct kvp_json j;
	int n;

	/* a report that does not fit fails whole, even when a string overflows */
	kvp_buf_init_fixed(&b, mem, sizeof(mem));
	kvp_json_init(&j, &b);
	kvp_json_begin(&j, NULL, '{');
	kvp_json_str(&j, "k", "0123456789012345678901234567890123456789012345678901234567", 58);
	kvp_json_end(&j, '}');
	assert_int_equal(kvp_buf_finish(&b), -ENOSPC);
	kvp_buf_init_fixed(&b, mem, sizeof(mem));
	kvp_json_init(&j, &b);
	kvp_json_begin(&j, NULL, '{');
	kvp_json_str(&j, "k", "short", 5);
	kvp_json_end(&j, '}');
	n = kvp_buf_finish(&b);
	assert_int_equal(n, 13);
	assert_string_equal(mem, "{\"k\":\"short\"}");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clock_is_monotonic),
		cmocka_unit_test(test_parse_u64_is_strict),
		cmocka_unit_test(test_parse_i64_is_strict),
		cmocka_unit_test(test_parse_size_suffixes),
		cmocka_unit_test(test_parse_float),
		cmocka_unit_test(test_parse_ids),
		cmocka_unit_test(test_utf8_rfc3629),
		cmocka_unit_test(test_cursor_bounds),
		cmocka_unit_test(test_percentiles),
		cmocka_unit_test(test_sample_ring),
		cmocka_unit_test(test_keytab),
		cmocka_unit_test(test_mkdir_p),
		cmocka_unit_test(test_errmsg),
		cmocka_unit_test(test_buf_fixed_is_whole_or_failed),
		cmocka_unit_test(test_buf_grows),
		cmocka_unit_test(test_json_escapes_one_policy),
		cmocka_unit_test(test_json_numbers_and_nesting),
		cmocka_unit_test(test_json_bool_and_null),
		cmocka_unit_test(test_json_fixed_buffer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
