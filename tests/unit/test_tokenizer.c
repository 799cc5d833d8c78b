/* SPDX-License-Identifier: MIT */
/*
 * test_tokenizer.c - byte-level and SentencePiece-style encoding, decoding, BOS, and the
 * streaming UTF-8 helper.
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

#include "compute/mkmodel.h"
#include "compute/model.h"
#include "compute/text/tokenizer.h"
#include "tests/lib/spmfix.h"

static void test_byte_level_round_trip(void **state)
{
	/* the synthetic vocabulary: BOS + one byte token per byte, decoded back exactly */
	static const char text[] = "h\xc3\xa9llo, \xe4\xb8\x96\xe7\x95\x8c! \x01\xff";
	struct kvp_mkmodel_opts o;
	struct kvp_model *m;
	struct kvp_tokenizer *t;
	void *buf;
	size_t len, n = strlen(text), pl;
	int32_t ids[64];
	char out[64];
	size_t ol = 0;
	int k;

	assert_int_equal(kvp_mkmodel_preset(&o, "tiny"), 0);
	assert_int_equal(kvp_mkmodel_write_mem(&buf, &len, &o, NULL, 0), 0);
	assert_int_equal(kvp_model_open_mem(&m, buf, len, NULL, 0), 0);
	assert_int_equal(kvp_tokenizer_new(&t, m, NULL, 0), 0);
	assert_int_equal(kvp_tokenizer_n_vocab(t), 259);
	assert_int_equal(kvp_tokenizer_bos(t), 1);
	assert_int_equal(kvp_tokenizer_eos(t), 2);
	k = kvp_tokenizer_encode(t, text, n, ids, 64);
	assert_int_equal(k, (int)n + 1);
	assert_int_equal(ids[0], 1);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(ids[i + 1], 3 + (uint8_t)text[i]);
	for (int i = 0; i < k; i++) {
		const char *p = kvp_tokenizer_piece(t, ids[i], &pl);

		memcpy(out + ol, p, pl);
		ol += pl;
	}
	assert_int_equal(ol, n); /* BOS decodes to nothing */
	assert_memory_equal(out, text, n);
	assert_null(kvp_tokenizer_piece(t, 259, &pl));
	assert_int_equal(pl, 0);
	/* a short buffer: the needed count comes back, only cap ids written */
	ids[2] = -7;
	assert_int_equal(kvp_tokenizer_encode(t, text, n, ids, 2), (int)n + 1);
	assert_int_equal(ids[2], -7);
	kvp_tokenizer_free(t);
	kvp_model_close(m);
	free(buf);
}

static void test_sentencepiece_merges_and_fallback(void **state)
{
	/*
	 * with a U+2581 vocabulary: a leading word marker is added, spaces become U+2581,
	 * the best-scoring merges win, an unknown character falls back to byte tokens, and
	 * decoding turns U+2581 back into spaces
	 */
	const char *pieces[259 + 12];
	char bytes[256][8];
	float scores[259 + 12] = { 0 };
	int32_t types[259 + 12];
	static const char *extra[12] = {
		"\xe2\x96\x81",
		"h",
		"e",
		"l",
		"o",
		"he",
		"ll",
		"llo",
		"hello",
		"\xe2\x96\x81hello",
		"w",
		"\xe2\x96\x81w",
	};
	static const float sc[12] = {
		-1, -2, -2, -2, -2, -1.5f, -1, -0.8f, -0.5f, -0.1f, -3, -0.9f
	};
	struct kvp_tokenizer *t;
	int32_t ids[32];
	char out[64];
	size_t ol = 0, pl;
	int k;

	spmfix_base(bytes, pieces, types);
	for (int i = 0; i < 12; i++) {
		pieces[259 + i] = extra[i];
		scores[259 + i] = sc[i];
		types[259 + i] = KVP_TOK_NORMAL;
	}
	assert_int_equal(kvp_tokenizer_build(&t, pieces, scores, types, 271, 1, 2, 0, 1), 0);
	/* "hello w\xc3\xa9" -> <s> _hello _w <0xC3> <0xA9> */
	k = kvp_tokenizer_encode(t, "hello w\xc3\xa9", 9, ids, 32);
	assert_int_equal(k, 5);
	assert_int_equal(ids[0], 1);
	assert_int_equal(ids[1], 259 + 9);
	assert_int_equal(ids[2], 259 + 11);
	assert_int_equal(ids[3], 3 + 0xc3);
	assert_int_equal(ids[4], 3 + 0xa9);
	for (int i = 0; i < k; i++) {
		const char *p = kvp_tokenizer_piece(t, ids[i], &pl);

		memcpy(out + ol, p, pl);
		ol += pl;
	}
	assert_int_equal(ol, 10);
	assert_memory_equal(out, " hello w\xc3\xa9", 10);
	/* "hell" has no whole-word piece: _ + he + ll (merge order by score) */
	k = kvp_tokenizer_encode(t, "hell", 4, ids, 32);
	assert_int_equal(k, 4);
	assert_int_equal(ids[1], 259 + 0);
	assert_int_equal(ids[2], 259 + 5);
	assert_int_equal(ids[3], 259 + 6);
	kvp_tokenizer_free(t);
}

/*
 * The naive SentencePiece encoder written from the definition, for comparison: after
 * normalisation, repeatedly merge the adjacent pair whose concatenation is a piece
 * with the highest score, leftmost on ties; then emit each symbol's piece, or its
 * bytes.  Pieces are looked up by linear search.  ASCII text only.
 */
static int naive_spm(const char *const *pieces, const float *scores, uint32_t n_pieces,
		     const char *text, int32_t *ids)
{
	char sym[128][64];
	int n = 0, k = 0;

	strcpy(sym[n++], "\xe2\x96\x81");
	for (const char *p = text; *p; p++) {
		if (*p == ' ')
			strcpy(sym[n++], "\xe2\x96\x81");
		else
			sym[n][0] = *p, sym[n][1] = 0, n++;
	}
	for (;;) {
		int best = -1;
		float bs = 0;

		for (int i = 0; i + 1 < n; i++) {
			char cat[128];
			size_t la = strlen(sym[i]), lb = strlen(sym[i + 1]);

			memcpy(cat, sym[i], la); /* pieces are short: both fit in 63 */
			memcpy(cat + la, sym[i + 1], lb + 1);
			for (uint32_t v = 0; v < n_pieces; v++) {
				if (strcmp(pieces[v], cat))
					continue;
				if (best < 0 || scores[v] > bs) {
					best = i;
					bs = scores[v];
				}
				break; /* the first of duplicates */
			}
		}
		if (best < 0)
			break;
		{
			size_t la = strlen(sym[best]), lb = strlen(sym[best + 1]);

			assert_true(la + lb < sizeof(sym[0]));
			memcpy(&sym[best][la], sym[best + 1], lb + 1);
		}
		memmove(sym[best + 1], sym[best + 2], (size_t)(n - best - 2) * sizeof(sym[0]));
		n--;
	}
	ids[k++] = 1; /* BOS */
	for (int i = 0; i < n; i++) {
		uint32_t v = 0;

		while (v < n_pieces && strcmp(pieces[v], sym[i]))
			v++;
		if (v < n_pieces && v >= 259) {
			ids[k++] = (int32_t)v;
			continue;
		}
		for (const char *c = sym[i]; *c; c++)
			ids[k++] = 3 + (uint8_t)*c;
	}
	return k;
}

static void test_merges_match_the_definition(void **state)
{
	/*
	 * 400 random texts over "abc " against random vocabularies of pieces over the same
	 * letters (scores drawn from few values, so ties are common): the queue-based
	 * encoder gives exactly the ids of the naive one
	 */
	uint64_t seed = 12345;
	char bytes[256][8], extra[40][16];
	const char *pieces[259 + 40];
	float scores[259 + 40];
	int32_t types[259 + 40];

	spmfix_base(bytes, pieces, types);
	for (int i = 0; i < SPMFIX_BASE; i++)
		scores[i] = 0;
	for (int round = 0; round < 20; round++) {
		struct kvp_tokenizer *t;
		uint32_t nv = 259;

		/* U+2581 and the single letters, then random 2..5-symbol pieces */
		strcpy(extra[0], "\xe2\x96\x81");
		strcpy(extra[1], "a");
		strcpy(extra[2], "b");
		strcpy(extra[3], "c");
		for (int e = 4; e < 40; e++) {
			int l = 2 + (int)((seed = seed * 6364136223846793005ull + 1) >> 60) % 4;

			extra[e][0] = 0;
			for (int c = 0; c < l; c++) {
				int x = (int)((seed = seed * 6364136223846793005ull + 1) >> 61) % 4;

				strcat(extra[e], x == 3 ? "\xe2\x96\x81" :
							  (const char[]){ (char)('a' + x), 0 });
			}
		}
		for (int e = 0; e < 40; e++, nv++) {
			pieces[nv] = extra[e];
			scores[nv] = (float)((seed = seed * 6364136223846793005ull + 1) >> 62);
			types[nv] = KVP_TOK_NORMAL;
		}
		assert_int_equal(kvp_tokenizer_build(&t, pieces, scores, types, nv, 1, 2, 0, 1), 0);
		for (int it = 0; it < 20; it++) {
			char text[48];
			int32_t got[160], want[160];
			int n = (int)((seed = seed * 6364136223846793005ull + 1) >> 59), k;

			for (int c = 0; c < n; c++)
				text[c] = "abc "[(seed = seed * 6364136223846793005ull + 1) >> 62];
			text[n] = 0;
			k = naive_spm(pieces, scores, nv, text, want);
			assert_int_equal(kvp_tokenizer_encode(t, text, (size_t)n, got, 160),
					 n ? k : 1);
			if (n)
				assert_memory_equal(got, want, (size_t)k * sizeof(int32_t));
		}
		kvp_tokenizer_free(t);
	}
}

static void test_count_bound_of_a_strange_vocabulary(void **state)
{
	/*
	 * a vocabulary whose U+2581 piece is typed as a byte token spells every space as 3
	 * byte tokens: encode reports the full count (over len + 2, within 3 len + 4) and
	 * writes no more than cap
	 */
	const char *pieces[260];
	char bytes[256][8];
	int32_t types[260], ids[64];
	struct kvp_tokenizer *t;

	spmfix_base(bytes, pieces, types);
	pieces[259] = "\xe2\x96\x81";
	types[259] = KVP_TOK_BYTE;
	assert_int_equal(kvp_tokenizer_build(&t, pieces, NULL, types, 260, 1, 2, 0, 1), 0);
	for (int i = 0; i < 64; i++)
		ids[i] = -7;
	/* "a b": BOS, then U+2581 a U+2581 b by bytes: 1 + 3 + 1 + 3 + 1 = 9 > 3 + 2 */
	assert_int_equal(kvp_tokenizer_encode(t, "a b", 3, ids, 5), 9);
	assert_int_equal(ids[3], 3 + 0x81); /* the last byte of the leading U+2581 */
	assert_int_equal(ids[4], 3 + 'a');
	assert_int_equal(ids[5], -7); /* nothing past cap */
	assert_int_equal(kvp_tokenizer_encode(t, "a b", 3, ids, 64), 9);
	assert_int_equal(ids[8], 3 + 'b');
	kvp_tokenizer_free(t);
}

static void test_utf8_stream(void **state)
{
	/* a character split over pieces comes out whole; broken sequences become U+FFFD */
	struct kvp_utf8_stream s = { 0 };
	char out[64];

	assert_int_equal(kvp_utf8_feed(&s, "a\xe4", 2, out, sizeof(out)), 1);
	assert_int_equal(out[0], 'a');
	assert_int_equal(kvp_utf8_feed(&s, "\xb8", 1, out, sizeof(out)), 0);
	assert_int_equal(kvp_utf8_feed(&s, "\x96z", 2, out, sizeof(out)), 4);
	assert_memory_equal(out, "\xe4\xb8\x96z", 4);
	/* cut short by ASCII: replacement, then the ASCII byte */
	assert_int_equal(kvp_utf8_feed(&s, "\xf0\x9f!", 3, out, sizeof(out)), 4);
	assert_memory_equal(out, "\xef\xbf\xbd!", 4);
	/* a stray continuation byte and an overlong lead */
	assert_int_equal(kvp_utf8_feed(&s, "\x80\xc0", 2, out, sizeof(out)), 6);
	assert_memory_equal(out, "\xef\xbf\xbd\xef\xbf\xbd", 6);
	/* E0 80 is overlong: both bytes replaced */
	assert_int_equal(kvp_utf8_feed(&s, "\xe0\x80", 2, out, sizeof(out)), 6);
	/* end of stream with a held lead byte */
	assert_int_equal(kvp_utf8_feed(&s, "\xc3", 1, out, sizeof(out)), 0);
	assert_int_equal(kvp_utf8_flush(&s, out, sizeof(out)), 3);
	assert_int_equal(kvp_utf8_flush(&s, out, sizeof(out)), 0);
	assert_int_equal(kvp_utf8_feed(&s, "abc", 3, out, 5), -ENOBUFS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_byte_level_round_trip),
		cmocka_unit_test(test_sentencepiece_merges_and_fallback),
		cmocka_unit_test(test_merges_match_the_definition),
		cmocka_unit_test(test_count_bound_of_a_strange_vocabulary),
		cmocka_unit_test(test_utf8_stream),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
