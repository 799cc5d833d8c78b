/* SPDX-License-Identifier: MIT */
/*
 * test_http_stop.c - ipc/http/stop.c: stop strings over text that arrives in pieces.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ipc/http/stop.h"

struct run {
	struct kvp_http_stop s;
	struct kvp_buf out;
	size_t lens[8];
};

static void start(struct run *r, char *const *stops, size_t n)
{
	memset(r, 0, sizeof(*r));
	for (size_t i = 0; i < n; i++)
		r->lens[i] = strlen(stops[i]);
	kvp_http_stop_init(&r->s, stops, r->lens, n);
	r->out = (struct kvp_buf)KVP_BUF_INIT;
}

static bool feed(struct run *r, const char *piece)
{
	return kvp_http_stop_feed(&r->s, piece, strlen(piece), &r->out);
}

static const char *out(struct run *r)
{
	return r->out.p ? r->out.p : "";
}

static void finish(struct run *r)
{
	kvp_http_stop_deinit(&r->s);
	kvp_buf_deinit(&r->out);
}

static void test_no_stops_pass_through(void **state)
{
	struct run r;

	/* without stop strings every byte is released at once */
	start(&r, NULL, 0);
	assert_false(feed(&r, "hello "));
	assert_string_equal(out(&r), "hello ");
	assert_false(feed(&r, "world"));
	assert_string_equal(out(&r), "hello world");
	finish(&r);
}

static void test_stop_in_one_piece(void **state)
{
	char *stops[] = { "STOP" };
	struct run r;

	/* the text ends right before the stop string; nothing after it is released */
	start(&r, stops, 1);
	assert_true(feed(&r, "hello STOP world"));
	assert_string_equal(out(&r), "hello ");
	assert_true(r.s.hit);
	assert_true(feed(&r, "more"));
	kvp_http_stop_flush(&r.s, &r.out);
	assert_string_equal(out(&r), "hello ");
	finish(&r);
}

static void test_stop_split_across_pieces(void **state)
{
	char *stops[] = { "STOP" };
	struct run r;

	/* a possible start of the stop string is held back, released only once it fails */
	start(&r, stops, 1);
	assert_false(feed(&r, "hel"));
	assert_string_equal(out(&r), "hel");
	assert_false(feed(&r, "lo ST"));
	assert_string_equal(out(&r), "hello ");
	assert_true(feed(&r, "OP world"));
	assert_string_equal(out(&r), "hello ");
	finish(&r);
	/* a false start is released when it cannot be a stop any more */
	start(&r, stops, 1);
	assert_false(feed(&r, "a ST"));
	assert_string_equal(out(&r), "a ");
	assert_false(feed(&r, "AR"));
	assert_string_equal(out(&r), "a STAR");
	assert_false(feed(&r, "S"));
	kvp_http_stop_flush(&r.s, &r.out); /* the end: what is held comes out */
	assert_string_equal(out(&r), "a STARS");
	finish(&r);
}

static void test_earliest_of_several_wins(void **state)
{
	char *stops[] = { "world", "lo", "zzz" };
	struct run r;

	/* the earliest occurrence of any stop string ends the text; which one is kept */
	start(&r, stops, 3);
	assert_true(feed(&r, "hello world"));
	assert_string_equal(out(&r), "hel");
	assert_int_equal(r.s.which, 1);
	finish(&r);
}

static void test_overlapping_prefixes(void **state)
{
	char *stops[] = { "aab" };
	struct run r;

	/* "aaab": the match starts at the second 'a', after a failed start at the first */
	start(&r, stops, 1);
	assert_false(feed(&r, "a"));
	assert_false(feed(&r, "a"));
	assert_false(feed(&r, "a"));
	assert_string_equal(out(&r), "a");
	assert_true(feed(&r, "b"));
	assert_string_equal(out(&r), "a");
	finish(&r);
}

/* The reference: @text up to the earliest occurrence of any stop string. */
static size_t reference_cut(const char *text, char *const *stops, size_t n, bool *hit)
{
	size_t best = strlen(text);

	*hit = false;
	for (size_t i = 0; i < n; i++) {
		const char *m = strstr(text, stops[i]);

		if (m && (size_t)(m - text) <= best) {
			best = (size_t)(m - text);
			*hit = true;
		}
	}
	return best;
}

static void test_random_splits_match_reference(void **state)
{
	/* any text, any stop strings (neither inside the other), any split into pieces:
	 * the released text is the text up to the first stop string, and a stop is
	 * reported exactly when one occurs */
	srand(12345);
	for (int iter = 0; iter < 20000; iter++) {
		char text[64], s0[6], s1[6], *stops[2] = { s0, s1 };
		size_t n = 1 + (size_t)rand() % 40, n_stops = 1 + (size_t)rand() % 2, cut, pos = 0;
		bool hit, got = false;
		struct run r;

		for (size_t i = 0; i < n; i++)
			text[i] = "abc"[rand() % 3];
		text[n] = '\0';
		for (size_t k = 0; k < 2; k++) {
			size_t len = 1 + (size_t)rand() % 4;

			for (size_t i = 0; i < len; i++)
				stops[k][i] = "abc"[rand() % 3];
			stops[k][len] = '\0';
		}
		/* one stop string inside another: which wins depends on how the text is
		 * split (the first one completed); the reference covers the rest */
		if (n_stops == 2 && (strstr(s0, s1) || strstr(s1, s0)))
			continue;
		cut = reference_cut(text, stops, n_stops, &hit);
		start(&r, stops, n_stops);
		while (pos < n && !got) {
			size_t piece = 1 + (size_t)rand() % 5;
			char buf[8];

			if (piece > n - pos)
				piece = n - pos;
			memcpy(buf, text + pos, piece);
			buf[piece] = '\0';
			got = feed(&r, buf);
			pos += piece;
		}
		if (!got)
			kvp_http_stop_flush(&r.s, &r.out);
		assert_int_equal(got, hit);
		assert_int_equal(r.out.len, cut);
		assert_memory_equal(out(&r), text, cut);
		finish(&r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_stops_pass_through),
		cmocka_unit_test(test_stop_in_one_piece),
		cmocka_unit_test(test_stop_split_across_pieces),
		cmocka_unit_test(test_earliest_of_several_wins),
		cmocka_unit_test(test_overlapping_prefixes),
		cmocka_unit_test(test_random_splits_match_reference),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
