/* SPDX-License-Identifier: MIT */
/*
 * test_protodoc.c - docs/protocol.md states the frame sizes the daemon speaks: every
 * "`struct kvp_X` (N bytes)" (or ", N bytes", ", exactly N bytes") it writes equals
 * sizeof(struct kvp_X) of include/kvpool/proto.h, every "DONE ... N bytes" is a DONE the
 * daemon sends (the usage alone, or with struct kvp_cache_usage), and the header is
 * "N-byte".  A struct the page gives a size for and this table does not know fails too,
 * so a new frame cannot be documented without being checked.
 *
 * The page is read from $KVP_SOURCE_DIR (set by tests/meson.build).
 */
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "kvpool/layout.h"
#include "kvpool/proto.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static const struct {
	const char *name;
	size_t size;
} structs[] = {
	{ "kvp_frame_hdr", sizeof(struct kvp_frame_hdr) },
	{ "kvp_usage", sizeof(struct kvp_usage) },
	{ "kvp_spec_usage", sizeof(struct kvp_spec_usage) },
	{ "kvp_hello", sizeof(struct kvp_hello) },
	{ "kvp_welcome", sizeof(struct kvp_welcome) },
	{ "kvp_generate", sizeof(struct kvp_generate) },
	{ "kvp_sampling", sizeof(struct kvp_sampling) },
	{ "kvp_logit_bias", sizeof(struct kvp_logit_bias) },
	{ "kvp_logprobs", sizeof(struct kvp_logprobs) },
	{ "kvp_logprob", sizeof(struct kvp_logprob) },
	{ "kvp_token", sizeof(struct kvp_token) },
	{ "kvp_error", sizeof(struct kvp_error) },
	{ "kvp_tokenize", sizeof(struct kvp_tokenize) },
	{ "kvp_detokenize", sizeof(struct kvp_detokenize) },
	{ "kvp_ids", sizeof(struct kvp_ids) },
	{ "kvp_chat", sizeof(struct kvp_chat) },
	{ "kvp_chat_message", sizeof(struct kvp_chat_message) },
	{ "kvp_lease_req", sizeof(struct kvp_lease_req) },
	{ "kvp_lease_block", sizeof(struct kvp_lease_block) },
	{ "kvp_lease", sizeof(struct kvp_lease) },
	{ "kvp_cache_ctl", sizeof(struct kvp_cache_ctl) },
	{ "kvp_cache_usage", sizeof(struct kvp_cache_usage) },
	{ "kvp_token_cont", sizeof(struct kvp_token_cont) },
	{ "kvp_pin", sizeof(struct kvp_pin) },
	{ "kvp_model_shape", sizeof(struct kvp_model_shape) },
	{ "kvp_pool_header", sizeof(struct kvp_pool_header) },
};

/* docs/protocol.md with every newline made a space (prose sentences wrap). */
static char *read_doc(void)
{
	const char *src = getenv("KVP_SOURCE_DIR");
	char path[4096];
	char *buf;
	long n;
	FILE *f;

	snprintf(path, sizeof(path), "%s/docs/protocol.md", src ? src : ".");
	f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open %s (KVP_SOURCE_DIR)", path);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n > 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	buf[n] = '\0';
	for (long i = 0; i < n; i++)
		if (buf[i] == '\n')
			buf[i] = ' ';
	return buf;
}

static long size_of(const char *name, size_t len)
{
	for (size_t i = 0; i < ARRAY_SIZE(structs); i++)
		if (strlen(structs[i].name) == len && !strncmp(structs[i].name, name, len))
			return (long)structs[i].size;
	return -1;
}

/* Each match of @re in @doc: its group @g as a number, and where the match is. */
static unsigned int each_match(const char *doc, const char *re, int g,
			       void (*fn)(const char *doc, const regmatch_t *m, long n))
{
	regmatch_t m[8];
	unsigned int count = 0;
	const char *p = doc;
	regex_t rx;

	assert_int_equal(regcomp(&rx, re, REG_EXTENDED), 0);
	while (!regexec(&rx, p, ARRAY_SIZE(m), m, p == doc ? 0 : REG_NOTBOL)) {
		fn(p, m, strtol(p + m[g].rm_so, NULL, 10));
		count++;
		p += m[0].rm_eo;
	}
	regfree(&rx);
	return count;
}

static void check_struct(const char *p, const regmatch_t *m, long n)
{
	long want = size_of(p + m[1].rm_so, (size_t)(m[1].rm_eo - m[1].rm_so));

	if (want < 0)
		fail_msg("docs/protocol.md gives %ld bytes for struct %.*s, which this test "
			 "does not know: add it to structs[]",
			 n, (int)(m[1].rm_eo - m[1].rm_so), p + m[1].rm_so);
	if (n != want)
		fail_msg("docs/protocol.md: struct %.*s is %ld bytes there, sizeof says %ld",
			 (int)(m[1].rm_eo - m[1].rm_so), p + m[1].rm_so, n, want);
}

static void check_done(const char *p, const regmatch_t *m, long n)
{
	long alone = (long)sizeof(struct kvp_usage);
	long with_cu = alone + (long)sizeof(struct kvp_cache_usage);

	if (n != alone && n != with_cu)
		fail_msg("docs/protocol.md: \"%.*s\": a DONE is %ld or %ld bytes",
			 (int)(m[0].rm_eo - m[0].rm_so), p + m[0].rm_so, alone, with_cu);
}

static void check_hdr(const char *p, const regmatch_t *m, long n)
{
	(void)p;
	(void)m;
	assert_int_equal(n, sizeof(struct kvp_frame_hdr));
}

static void test_struct_sizes(void **state)
{
	/* every struct size the page states is the ABI's sizeof */
	char *doc = read_doc();
	unsigned int n = each_match(doc, "`struct (kvp_[a-z_]+)`(, | \\()(exactly )?([0-9]+) bytes",
				    4, check_struct);

	(void)state;
	/* the frame table alone states 16: a page that lost them would pass vacuously */
	assert_true(n >= 16);
	free(doc);
}

static void test_done_sizes(void **state)
{
	/* prose about DONE's length ("a DONE of N bytes", "the DONE payload is then N") */
	char *doc = read_doc();
	unsigned int n = each_match(doc, "DONE[^|.]{0,60} ([0-9]+) bytes", 1, check_done);

	(void)state;
	assert_true(n >= 2);
	n = each_match(doc, "([0-9]+)-byte header", 1, check_hdr);
	assert_true(n >= 1);
	free(doc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_struct_sizes),
		cmocka_unit_test(test_done_sizes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
