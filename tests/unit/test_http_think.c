/* SPDX-License-Identifier: MIT */
/*
 * test_http_think.c - ipc/http/think.c: a reasoning block split off generated text that
 * arrives in pieces: every case fed whole, byte by byte, and cut at every pair of points
 * (so each tag and each run of newlines is split across pieces in every way), each way
 * giving the same reasoning and answer.
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

#include "ipc/http/think.h"

struct want {
	const char *text;
	const char *reason; /* NULL: no block opened */
	const char *answer;
};

static const struct want cases[] = {
	/* Qwen3's shape */
	{ "<think>\nI should greet.\n</think>\n\nHello!", "I should greet.", "Hello!" },
	/* no block: passed through, leading whitespace and all */
	{ "Hello <think> there", NULL, "Hello <think> there" },
	{ "  \nHello", NULL, "  \nHello" },
	{ "<thin", NULL, "<thin" },
	{ "<thinking>x", NULL, "<thinking>x" },
	{ "", NULL, "" },
	{ "\n\n", NULL, "\n\n" },
	/* whitespace before the block is not the answer's */
	{ "\n <think>r</think>a", "r", "a" },
	/* an empty block (enable_thinking=false written by the model itself) */
	{ "<think>\n\n</think>\n\nA", "", "A" },
	{ "<think></think>", "", "" },
	/* newlines inside the reasoning stay; only its ends are trimmed */
	{ "<think>\n\na\n\nb\n\n</think>\n\nc\n", "a\n\nb", "c\n" },
	/* a partial close tag inside the reasoning is reasoning */
	{ "<think>x</thin y</think>z", "x</thin y", "z" },
	{ "<think>x<</think>y", "x<", "y" },
	/* only the first close ends it; a second is the answer's text */
	{ "<think>a</think>b</think>c", "a", "b</think>c" },
	/* unterminated (max_tokens): reasoning to the end, trailing newlines trimmed */
	{ "<think>\nhalf a thought\n\n", "half a thought", "" },
	{ "<think>\nhalf</thi", "half</thi", "" },
	{ "<think>", "", "" },
	/* answer whitespace after the newlines is kept */
	{ "<think>r</think>\n  a", "r", "  a" },
	/* UTF-8 is bytes here: split inside a character, joined again */
	{ "<think>日本</think>\n語", "日本", "語" },
};

struct run {
	struct kvp_http_think t;
	struct kvp_buf reason, answer;
};

static void run_pieces(const char *text, const size_t *cuts, size_t n_cuts, struct run *r)
{
	size_t at = 0, len = strlen(text);

	kvp_http_think_init(&r->t);
	r->reason = (struct kvp_buf)KVP_BUF_INIT;
	r->answer = (struct kvp_buf)KVP_BUF_INIT;
	for (size_t i = 0; i <= n_cuts; i++) {
		size_t end = i < n_cuts ? cuts[i] : len;

		kvp_http_think_feed(&r->t, text + at, end - at, &r->reason, &r->answer);
		at = end;
	}
	kvp_http_think_flush(&r->t, &r->reason, &r->answer);
}

static void check(const struct want *w, struct run *r, const char *how)
{
	bool opened = kvp_http_think_opened(&r->t);

	assert_int_equal(r->reason.err, 0);
	assert_int_equal(r->answer.err, 0);
	if (opened != (w->reason != NULL))
		fail_msg("'%s' %s: opened %d", w->text, how, opened);
	if (w->reason && (r->reason.len != strlen(w->reason) ||
			  memcmp(r->reason.p ? r->reason.p : "", w->reason, r->reason.len)))
		fail_msg("'%s' %s: reasoning '%.*s', want '%s'", w->text, how, (int)r->reason.len,
			 r->reason.p ? r->reason.p : "", w->reason);
	if (!w->reason && r->reason.len)
		fail_msg("'%s' %s: reasoning without a block", w->text, how);
	if (r->answer.len != strlen(w->answer) ||
	    memcmp(r->answer.p ? r->answer.p : "", w->answer, r->answer.len))
		fail_msg("'%s' %s: answer '%.*s', want '%s'", w->text, how, (int)r->answer.len,
			 r->answer.p ? r->answer.p : "", w->answer);
	kvp_http_think_deinit(&r->t);
	kvp_buf_deinit(&r->reason);
	kvp_buf_deinit(&r->answer);
}

static void test_whole_and_bytewise(void **state)
{
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		const char *text = cases[c].text;
		size_t len = strlen(text);
		size_t *cuts = calloc(len + 1, sizeof(*cuts));
		struct run r;

		assert_non_null(cuts);
		run_pieces(text, NULL, 0, &r);
		check(&cases[c], &r, "whole");
		for (size_t i = 0; i + 1 < len; i++)
			cuts[i] = i + 1;
		run_pieces(text, cuts, len ? len - 1 : 0, &r);
		check(&cases[c], &r, "byte by byte");
		free(cuts);
	}
}

static void test_every_two_cuts(void **state)
{
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
		const char *text = cases[c].text;
		size_t len = strlen(text);

		for (size_t a = 0; a <= len; a++)
			for (size_t b = a; b <= len; b++) {
				size_t cuts[2] = { a, b };
				char how[64];
				struct run r;

				snprintf(how, sizeof(how), "cut at %zu and %zu", a, b);
				run_pieces(text, cuts, 2, &r);
				check(&cases[c], &r, how);
			}
	}
}

/* What is held back while streaming is only what may still change: the answer after a
 * closed block, and reasoning before a possible close, go out at once. */
static void test_streams_early(void **state)
{
	struct run r;

	kvp_http_think_init(&r.t);
	r.reason = (struct kvp_buf)KVP_BUF_INIT;
	r.answer = (struct kvp_buf)KVP_BUF_INIT;
	kvp_http_think_feed(&r.t, "<thi", 4, &r.reason, &r.answer);
	assert_int_equal(r.reason.len + r.answer.len, 0);
	kvp_http_think_feed(&r.t, "nk>\nabc", 7, &r.reason, &r.answer);
	assert_int_equal(r.reason.len, 3);
	assert_true(kvp_http_think_opened(&r.t));
	kvp_http_think_feed(&r.t, "\n</th", 5, &r.reason, &r.answer);
	assert_int_equal(r.reason.len, 3); /* "\n</th" may be the close */
	kvp_http_think_feed(&r.t, "ink>\n\nA", 7, &r.reason, &r.answer);
	assert_int_equal(r.answer.len, 1);
	kvp_http_think_feed(&r.t, "B", 1, &r.reason, &r.answer);
	assert_int_equal(r.answer.len, 2);
	assert_int_equal(r.t.held.len, 0);
	kvp_http_think_flush(&r.t, &r.reason, &r.answer);
	assert_memory_equal(r.reason.p, "abc", 3);
	assert_memory_equal(r.answer.p, "AB", 2);
	kvp_http_think_deinit(&r.t);
	kvp_buf_deinit(&r.reason);
	kvp_buf_deinit(&r.answer);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_whole_and_bytewise),
		cmocka_unit_test(test_every_two_cuts),
		cmocka_unit_test(test_streams_early),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
