/* SPDX-License-Identifier: MIT */
/*
 * test_gen.c - compute/gen.c, the generation loop the engine and kvpool-run share: the
 * stop rules (EOS neither kept nor counted, the max_new-th token is the last), text
 * streamed in slices equals the pieces fed whole (characters split across tokens and
 * slices, ill-formed bytes as U+FFFD), tokenizing with a limit, prefill chunking and
 * the decode position.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/gen.h"
#include "compute/text/tokenizer.h"
#include "tests/lib/spmfix.h"

#define N_EXTRA 4

/* <unk> <s> </s>, the 256 byte tokens, then a long piece, "é", "ab" and <|eot_id|>. */
static int setup(void **state)
{
	static char bytes[256][8];
	static char long_piece[101];
	const char *pieces[259 + N_EXTRA];
	int32_t types[259 + N_EXTRA];
	struct kvp_tokenizer *t;

	spmfix_base(bytes, pieces, types);
	/* 100 bytes: 33 three-byte characters and a 'z' */
	for (int i = 0; i < 33; i++)
		memcpy(long_piece + 3 * i, "\xe2\x82\xac", 3);
	long_piece[99] = 'z';
	pieces[259] = long_piece;
	pieces[260] = "\xc3\xa9";
	pieces[261] = "ab";
	pieces[262] = "<|eot_id|>";
	for (int i = 0; i < N_EXTRA; i++)
		types[259 + i] = KVP_TOK_NORMAL;
	types[262] = KVP_TOK_CONTROL; /* an end of turn that is not EOS */
	assert_int_equal(kvp_tokenizer_build(&t, pieces, NULL, types, 259 + N_EXTRA, 1, 2, 0, 1),
			 0);
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	kvp_tokenizer_free(*state);
	return 0;
}

static void test_stop_rules(void **state)
{
	static const int32_t prompt[] = { 1, 261 };
	struct kvp_gen g;

	/* EOS: not kept; the third kept token is the last of max_new = 3 */
	kvp_gen_init(&g, *state, prompt, 2, 3, true);
	assert_true(g.stop_eog);
	assert_int_equal(g.last, -1);
	assert_int_equal(kvp_gen_take(&g, 261), KVP_GEN_CONTINUE);
	assert_int_equal(kvp_gen_take(&g, 260), KVP_GEN_CONTINUE);
	assert_int_equal(g.last, 260);
	assert_int_equal(kvp_gen_take(&g, 2), KVP_GEN_EOS);
	assert_int_equal(g.n_generated, 2);
	assert_int_equal(g.last, 260);
	assert_int_equal(kvp_gen_take(&g, 5), KVP_GEN_LAST);
	assert_int_equal(g.n_generated, 3);
	/* ignoring EOS, or no tokenizer: the stop token is an ordinary one */
	kvp_gen_init(&g, *state, prompt, 2, 1, false);
	assert_int_equal(kvp_gen_take(&g, 2), KVP_GEN_LAST);
	kvp_gen_init(&g, NULL, prompt, 2, 1, true);
	assert_false(g.stop_eog);
	assert_int_equal(kvp_gen_take(&g, 2), KVP_GEN_LAST);
}

static void test_stops_at_end_of_turn(void **state)
{
	/*
	 * the whole end-of-generation set stops, not only EOS: <|eot_id|> (a control token
	 * that is not EOS) ends the sequence unkept; --ignore-eos keeps it like any token
	 */
	static const int32_t prompt[] = { 1, 261 };
	int32_t kept[4] = { -1, -1, -1, -1 };
	struct kvp_gen g;

	assert_int_equal(kvp_tokenizer_eos(*state), 2);
	assert_true(kvp_tokenizer_is_eog(*state, 262));
	assert_false(kvp_tokenizer_is_eog(*state, 261));
	kvp_gen_init(&g, *state, prompt, 2, 4, true);
	g.kept = kept;
	assert_int_equal(kvp_gen_take(&g, 261), KVP_GEN_CONTINUE);
	assert_int_equal(kvp_gen_take(&g, 260), KVP_GEN_CONTINUE);
	assert_int_equal(kvp_gen_take(&g, 262), KVP_GEN_EOS);
	assert_int_equal(g.n_generated, 2);
	/* the kept ids are stored in order; the end of turn is not */
	assert_int_equal(kept[0], 261);
	assert_int_equal(kept[1], 260);
	assert_int_equal(kept[2], -1);

	kvp_gen_init(&g, *state, prompt, 2, 2, false);
	assert_int_equal(kvp_gen_take(&g, 262), KVP_GEN_CONTINUE);
	assert_int_equal(kvp_gen_take(&g, 2), KVP_GEN_LAST);
	assert_int_equal(g.n_generated, 2);
}

static void test_tokenize_parse_special(void **state)
{
	/*
	 * special-token text in a prompt is text unless asked: parsed, "<|eot_id|>" is its
	 * one id; raw, it is spelled out in byte tokens and can never end a turn
	 */
	int32_t *ids;
	uint32_t n, i;

	assert_int_equal(kvp_gen_tokenize(&ids, &n, *state, "ab<|eot_id|>", 12,
					  KVP_TOK_PARSE_SPECIAL | KVP_TOK_NO_ADD_SPECIAL, 64),
			 0);
	assert_int_equal(n, 2);
	assert_int_equal(ids[0], 261);
	assert_int_equal(ids[1], 262);
	free(ids);
	assert_int_equal(kvp_gen_tokenize(&ids, &n, *state, "ab<|eot_id|>", 12, 0, 64), 0);
	assert_true(n > 3);
	assert_int_equal(ids[0], 1); /* BOS, as the vocabulary says */
	for (i = 0; i < n; i++)
		assert_int_not_equal(ids[i], 262);
	free(ids);
}

/* All the text of @ids through kvp_gen_text() with @cap-byte slices, then the flush. */
static size_t stream(const struct kvp_tokenizer *t, const int32_t *ids, size_t n, size_t cap,
		     char *out)
{
	static const int32_t prompt[] = { 1 };
	struct kvp_gen g;
	size_t len = 0;
	char slice[512];

	assert_true(cap <= sizeof(slice));
	kvp_gen_init(&g, t, prompt, 1, 100, false);
	for (size_t i = 0; i < n; i++) {
		size_t off = 0;
		bool more;
		int calls = 0;

		do {
			int w = kvp_gen_text(&g, ids[i], &off, slice, cap, &more);

			assert_true(w >= 0 && (size_t)w <= cap);
			memcpy(out + len, slice, (size_t)w);
			len += (size_t)w;
			calls++;
		} while (more);
		assert_true(calls >= 1);
	}
	len += (size_t)kvp_gen_flush(&g, out + len, 3);
	return len;
}

static void test_text_slices_equal_whole(void **state)
{
	/* é split over two byte tokens, the long piece, a stray byte, a cut-off character */
	static const int32_t ids[] = { 3 + 0xc3, 3 + 0xa9, 259,	 261,	   3 + 0xff,
				       260,	 0,	   9999, 3 + 0xe2, 3 + 0x82 };
	char whole[1024], small[1024];
	size_t a, b;
	char slice[8];
	size_t off = 0;
	bool more;

	a = stream(*state, ids, sizeof(ids) / sizeof(ids[0]), 512, whole);
	b = stream(*state, ids, sizeof(ids) / sizeof(ids[0]), 6, small);
	assert_int_equal(a, b);
	assert_memory_equal(whole, small, a);
	assert_int_equal(a, 2 + 100 + 2 + 3 + 2 + 3);
	assert_memory_equal(whole, "\xc3\xa9", 2);
	assert_memory_equal(whole + 102, "ab\xef\xbf\xbd\xc3\xa9\xef\xbf\xbd", 10);
	/* a buffer too small for one character and its replacements is refused */
	{
		struct kvp_gen g;
		static const int32_t prompt[] = { 1 };

		kvp_gen_init(&g, *state, prompt, 1, 1, false);
		assert_int_equal(kvp_gen_text(&g, 261, &off, slice, 5, &more), -EINVAL);
		assert_false(more);
	}
}

static void test_tokenize_limit(void **state)
{
	int32_t *ids = (int32_t *)1;
	uint32_t n = 0;

	/* <s> + "ab" (the merge needs no scores: whole-piece match) within and past a limit */
	assert_int_equal(kvp_gen_tokenize(&ids, &n, *state, "ab", 2, 0, 16), 0);
	assert_true(n >= 2);
	assert_int_equal(ids[0], 1);
	free(ids);
	assert_int_equal(kvp_gen_tokenize(&ids, &n, *state, "abababab", 8, 0, 2), -E2BIG);
	assert_null(ids);
	assert_int_equal(kvp_gen_tokenize(&ids, &n, *state, "", 0, 0, 16), 0);
	assert_int_equal(n, 1); /* just <s> */
	free(ids);
}

static void test_prefill_chunks_and_decode_position(void **state)
{
	static const int32_t prompt[10] = { 1 };
	static const uint32_t table[] = { 7, 8 };
	struct kvp_fwd_seq seq;
	struct kvp_gen g;

	/* chunks of at most the budget until the prompt is done; decode feeds @last back */
	kvp_gen_init(&g, *state, prompt, 10, 4, false);
	assert_int_equal(kvp_gen_prefill_next(&g, 4), 4);
	g.n_past = 8; /* as after two chunks, or a prefix hit */
	assert_false(kvp_gen_prefilled(&g));
	assert_int_equal(kvp_gen_prefill_next(&g, 4), 2);
	g.n_past = 10;
	assert_true(kvp_gen_prefilled(&g));
	assert_int_equal(kvp_gen_prefill_next(&g, 4), 0);
	assert_int_equal(kvp_gen_take(&g, 42), KVP_GEN_CONTINUE);
	seq = kvp_gen_decode_seq(&g, table, 2);
	assert_ptr_equal(seq.table, table);
	assert_int_equal(seq.n_table, 2);
	assert_int_equal(seq.pos, 10);
	assert_int_equal(seq.token, 42);
	kvp_gen_decoded(&g);
	assert_int_equal(g.n_past, 11);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_stop_rules, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stops_at_end_of_turn, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tokenize_parse_special, setup, teardown),
		cmocka_unit_test_setup_teardown(test_text_slices_equal_whole, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tokenize_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_prefill_chunks_and_decode_position, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
