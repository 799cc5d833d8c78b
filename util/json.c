/* SPDX-License-Identifier: MIT */
/*
 * json.c - the JSON writer (see json.h).
 *
 * jansson encodes only well-formed UTF-8 (json_stringn() refuses the rest), so a
 * string is cut into its maximal well-formed runs: each run is encoded by jansson as a
 * JSON string of its own, whose quotes are dropped, and each ill-formed byte between
 * runs is written as \ufffd.  A string free of bad bytes, the usual case, is one run.
 */
#include "util/json.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>

#include "util/utf8.h"

void kvp_json_init(struct kvp_json *j, struct kvp_buf *out)
{
	j->out = out;
	j->first = true;
}

/* The comma before every member but the first, then the member's name. */
static void member(struct kvp_json *j, const char *key)
{
	if (!j->first)
		kvp_buf_add(j->out, ",", 1);
	j->first = false;
	if (key)
		kvp_buf_printf(j->out, "\"%s\":", key);
}

void kvp_json_begin(struct kvp_json *j, const char *key, char brace)
{
	member(j, key);
	kvp_buf_add(j->out, &brace, 1);
	j->first = true;
}

void kvp_json_end(struct kvp_json *j, char brace)
{
	kvp_buf_add(j->out, &brace, 1);
	j->first = false;
}

void kvp_json_u64(struct kvp_json *j, const char *key, uint64_t v)
{
	member(j, key);
	kvp_buf_printf(j->out, "%llu", (unsigned long long)v);
}

void kvp_json_i64(struct kvp_json *j, const char *key, int64_t v)
{
	member(j, key);
	kvp_buf_printf(j->out, "%lld", (long long)v);
}

void kvp_json_fixed(struct kvp_json *j, const char *key, double v, int decimals)
{
	member(j, key);
	kvp_buf_printf(j->out, "%.*f", decimals, isfinite(v) ? v : 0.0);
}

void kvp_json_sig(struct kvp_json *j, const char *key, double v, int digits)
{
	member(j, key);
	kvp_buf_printf(j->out, "%.*g", digits, isfinite(v) ? v : 0.0);
}

/* Well-formed @s (@n > 0 bytes), escaped by jansson, without the quotes. */
static void put_run(struct kvp_buf *b, const char *s, size_t n)
{
	char small[256];
	char *enc = small;
	json_t *str;
	size_t len;

	str = json_stringn_nocheck(s, n); /* checked by the caller: see kvp_utf8_char_len() */
	if (!str) {
		kvp_buf_fail(b, -ENOMEM);
		return;
	}
	len = json_dumpb(str, small, sizeof(small), JSON_ENCODE_ANY);
	if (len > sizeof(small)) {
		enc = malloc(len);
		if (enc)
			len = json_dumpb(str, enc, len, JSON_ENCODE_ANY);
	}
	json_decref(str);
	if (!enc || len < 2) {
		kvp_buf_fail(b, -ENOMEM);
	} else {
		kvp_buf_add(b, enc + 1, len - 2);
	}
	if (enc != small)
		free(enc);
}

void kvp_json_str(struct kvp_json *j, const char *key, const char *s, size_t n)
{
	size_t run = 0;
	size_t i = 0;

	member(j, key);
	kvp_buf_add(j->out, "\"", 1);
	while (i < n) {
		size_t len = kvp_utf8_char_len(s + i, n - i);

		if (len) {
			i += len;
			continue;
		}
		if (i > run)
			put_run(j->out, s + run, i - run);
		kvp_buf_add(j->out, "\\ufffd", 6);
		run = ++i;
	}
	if (n > run)
		put_run(j->out, s + run, n - run);
	kvp_buf_add(j->out, "\"", 1);
}

void kvp_json_bool(struct kvp_json *j, const char *key, bool v)
{
	member(j, key);
	kvp_buf_add(j->out, v ? "true" : "false", v ? 4 : 5);
}

void kvp_json_null(struct kvp_json *j, const char *key)
{
	member(j, key);
	kvp_buf_add(j->out, "null", 4);
}
