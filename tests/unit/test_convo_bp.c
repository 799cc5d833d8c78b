/* SPDX-License-Identifier: MIT */
/*
 * test_convo_bp.c - message breakpoints onto prompt-token positions
 * (compute/convo_bp.c), on a byte-level vocabulary with the chat families' special
 * tokens: with Llama 3 and ChatML, breakpoint k lands exactly where message k's turn
 * ends in the full prompt (the ids of the text written up to there, checked against
 * the prompt), the last message's breakpoint is the whole prompt, TTLs (weights) stay
 * with their breakpoints, a context covering some messages gives the same positions,
 * counts out of range or not increasing are refused with words (nothing changed), and a
 * system message a template folds into the next turn covers the first token only.
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

#include "compute/convo.h"
#include "compute/convo_bp.h"
#include "compute/text/chat.h"
#include "compute/text/tokenizer.h"
#include "tests/lib/spmfix.h"

#define N_SPECIAL 7
#define CAP 1024

static const char *const specials[N_SPECIAL] = {
	"<|im_start|>", "<|im_end|>",	     "<|start_header_id|>", "<|end_header_id|>",
	"<|eot_id|>",	"<|begin_of_text|>", "<|endoftext|>",
};

/* <unk> <s> </s>, 256 byte tokens, the special tokens: a byte-level vocabulary. */
static int setup(void **state)
{
	static char bytes[256][8];
	const char *pieces[259 + N_SPECIAL];
	int32_t types[259 + N_SPECIAL];
	struct kvp_tokenizer *t;

	spmfix_base(bytes, pieces, types);
	for (int i = 0; i < N_SPECIAL; i++) {
		pieces[259 + i] = specials[i];
		types[259 + i] = KVP_TOK_CONTROL;
	}
	assert_int_equal(kvp_tokenizer_build(&t, pieces, NULL, types, 259 + N_SPECIAL, 1, 2, 0, 1),
			 0);
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	kvp_tokenizer_free(*state);
	return 0;
}

static struct kvp_chat_template named(const char *name)
{
	struct kvp_chat_template t;

	assert_int_equal(kvp_chat_template_named(&t, name, NULL, 0), 0);
	return t;
}

#define MSG(r, s) \
	{ \
		.role = (r), .content = (s), .len = sizeof(s) - 1 \
	}

static const struct kvp_chat_msg convo4[] = {
	MSG(KVP_CHAT_SYSTEM, "You are terse."),
	MSG(KVP_CHAT_USER, "What is a KV cache?"),
	MSG(KVP_CHAT_ASSISTANT, "Keys and values kept."),
	MSG(KVP_CHAT_USER, "And a block?"),
};

/* The full prompt of @cv under @tmpl into @ids: its length. */
static uint32_t full_prompt(const struct kvp_tokenizer *tok, const struct kvp_chat_template *t,
			    const struct kvp_convo *cv, int32_t *out)
{
	char err[256] = "";
	int32_t *ids;
	uint32_t n;

	assert_int_equal(kvp_convo_prompt(&ids, &n, tok, t, cv, CAP, err, sizeof(err)), 0);
	assert_true(n <= CAP);
	memcpy(out, ids, n * sizeof(*ids));
	free(ids);
	return n;
}

/*
 * The ids of @text (special tokens parsed, BOS as the vocabulary adds it unless
 * @tmpl_bos) must open @ids: return their number, the expected breakpoint.
 */
static uint32_t opens(const struct kvp_tokenizer *tok, const char *text, bool tmpl_bos,
		      const int32_t *ids, uint32_t n_ids)
{
	int32_t want[CAP];
	int n = kvp_tokenizer_encode_flags(tok, text, strlen(text),
					   KVP_TOK_PARSE_SPECIAL |
						   (tmpl_bos ? KVP_TOK_NO_ADD_SPECIAL : 0),
					   want, CAP);

	assert_true(n > 0 && (uint32_t)n <= n_ids);
	assert_memory_equal(want, ids, (size_t)n * sizeof(*ids));
	return (uint32_t)n;
}

static int map(const struct kvp_tokenizer *tok, const struct kvp_chat_template *t,
	       const struct kvp_convo *cv, const int32_t *ids, uint32_t n_ids, uint32_t *bps,
	       uint32_t *w, uint32_t *n, char *err, size_t errlen)
{
	return kvp_convo_breakpoints(bps, w, n, tok, t, cv, ids, n_ids, CAP, err, errlen);
}

static void test_chatml(void **state)
{
	/* a generation prompt would add "<|im_start|>assistant\n": the turn ends before */
	struct kvp_chat_template t = named("chatml");
	struct kvp_convo cv = { .msgs = convo4, .n_msgs = 4 };
	int32_t ids[CAP];
	uint32_t n_ids = full_prompt(*state, &t, &cv, ids);
	uint32_t bps[4] = { 1, 3, 4 }, w[4] = { 3600, 300, 300 }, n = 3;
	char err[256] = "";

	assert_int_equal(map(*state, &t, &cv, ids, n_ids, bps, w, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 3);
	assert_int_equal(bps[0], opens(*state, "<|im_start|>system\nYou are terse.<|im_end|>\n",
				       false, ids, n_ids));
	assert_int_equal(bps[1], opens(*state,
				       "<|im_start|>system\nYou are terse.<|im_end|>\n"
				       "<|im_start|>user\nWhat is a KV cache?<|im_end|>\n"
				       "<|im_start|>assistant\nKeys and values kept.<|im_end|>\n",
				       false, ids, n_ids));
	assert_int_equal(bps[2], n_ids);
	assert_int_equal(bps[3], 0);
	assert_int_equal(w[0], 3600);
	assert_int_equal(w[1], 300);
	assert_int_equal(w[2], 300);
}

static void test_llama3(void **state)
{
	/* Llama 3 writes BOS itself; message k's turn ends at its <|eot_id|> */
	struct kvp_chat_template t = named("llama3");
	struct kvp_convo cv = { .msgs = convo4, .n_msgs = 4 };
	int32_t ids[CAP];
	uint32_t n_ids = full_prompt(*state, &t, &cv, ids);
	uint32_t bps[4] = { 1, 2 }, n = 2;
	char err[256] = "";

	assert_int_equal(map(*state, &t, &cv, ids, n_ids, bps, NULL, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 2);
	assert_int_equal(bps[0], opens(*state,
				       "<s><|start_header_id|>system<|end_header_id|>"
				       "\n\nYou are terse.<|eot_id|>",
				       true, ids, n_ids));
	assert_int_equal(bps[1], opens(*state,
				       "<s><|start_header_id|>system<|end_header_id|>"
				       "\n\nYou are terse.<|eot_id|>"
				       "<|start_header_id|>user<|end_header_id|>\n\n"
				       "What is a KV cache?<|eot_id|>",
				       true, ids, n_ids));
	assert_true(bps[1] < n_ids);
}

static void test_context(void **state)
{
	/*
	 * a context covering messages 1-3 (turn 1's prompt and reply): breakpoints within
	 * it render without it, later ones with it; on a byte-level vocabulary both give
	 * the positions of the conversation rendered whole
	 */
	static const char *const tmpls[] = { "chatml", "llama3" };

	for (size_t k = 0; k < sizeof(tmpls) / sizeof(tmpls[0]); k++) {
		struct kvp_chat_template t = named(tmpls[k]);
		struct kvp_convo first = { .msgs = convo4, .n_msgs = 2 };
		struct kvp_convo all = { .msgs = convo4, .n_msgs = 4 };
		const char *reply = convo4[2].content;
		int32_t ctx[CAP], whole[CAP], cont[CAP];
		uint32_t n_ctx, n_whole, n_cont;
		uint32_t a[4] = { 1, 2, 3 }, b[4] = { 1, 2, 3 }, na = 3, nb = 3;
		char err[256] = "";
		int n;

		n_ctx = full_prompt(*state, &t, &first, ctx);
		n = kvp_tokenizer_encode_flags(*state, reply, strlen(reply), KVP_TOK_NO_ADD_SPECIAL,
					       ctx + n_ctx, CAP - n_ctx);
		assert_int_equal(n, (int)strlen(reply));
		n_ctx += (uint32_t)n;
		n_whole = full_prompt(*state, &t, &all, whole);
		all.context = ctx;
		all.n_context = n_ctx;
		all.context_msgs = 3;
		n_cont = full_prompt(*state, &t, &all, cont);
		assert_int_equal(n_cont, n_whole);
		assert_int_equal(map(*state, &t, &all, cont, n_cont, a, NULL, &na, err,
				     sizeof(err)),
				 0);
		all.context = NULL;
		all.n_context = 0;
		all.context_msgs = 0;
		assert_int_equal(map(*state, &t, &all, whole, n_whole, b, NULL, &nb, err,
				     sizeof(err)),
				 0);
		assert_int_equal(na, 3);
		assert_int_equal(nb, 3);
		assert_memory_equal(a, b, sizeof(a));
		/* message 3 ends where the context ends, plus its turn's end marker */
		assert_true(a[2] > n_ctx && a[2] < n_cont);
	}
}

static void test_refused(void **state)
{
	struct kvp_chat_template t = named("chatml");
	struct kvp_convo cv = { .msgs = convo4, .n_msgs = 4 };
	static const uint32_t bad[][2] = { { 0, 0 }, { 5, 0 }, { 2, 2 }, { 3, 1 } };
	int32_t ids[CAP];
	uint32_t n_ids = full_prompt(*state, &t, &cv, ids);

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint32_t bps[4] = { bad[i][0], bad[i][1] }, n = bad[i][1] ? 2 : 1;
		char err[256] = "";

		assert_int_equal(map(*state, &t, &cv, ids, n_ids, bps, NULL, &n, err, sizeof(err)),
				 -EINVAL);
		assert_non_null(strstr(err, "cache breakpoint"));
		/* untouched */
		assert_int_equal(n, bad[i][1] ? 2 : 1);
		assert_int_equal(bps[0], bad[i][0]);
	}
}

static void test_folded_system(void **state)
{
	/*
	 * Llama 2 writes the system prompt inside the first user turn: the system message
	 * alone renders nothing, so its breakpoint covers the first token only; the user
	 * message's turn ends at its [/INST]
	 */
	struct kvp_chat_template t = named("llama2");
	struct kvp_convo cv = { .msgs = convo4, .n_msgs = 4 };
	int32_t ids[CAP];
	uint32_t n_ids = full_prompt(*state, &t, &cv, ids);
	uint32_t bps[4] = { 1, 2 }, w[4] = { 300, 3600 }, n = 2;
	char err[256] = "";

	assert_int_equal(map(*state, &t, &cv, ids, n_ids, bps, w, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 2);
	assert_int_equal(bps[0], 1);
	assert_int_equal(bps[1], opens(*state,
				       "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\n"
				       "What is a KV cache? [/INST]",
				       true, ids, n_ids));
	assert_int_equal(w[0], 300);
	assert_int_equal(w[1], 3600);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chatml),	      cmocka_unit_test(test_llama3),
		cmocka_unit_test(test_context),	      cmocka_unit_test(test_refused),
		cmocka_unit_test(test_folded_system),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
