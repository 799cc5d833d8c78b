/* SPDX-License-Identifier: MIT */
/*
 * test_convo.c - a conversation's prompt ids (compute/convo.c): the first turn is the
 * rendered template tokenized with special tokens parsed (BOS from the template or
 * the vocabulary, once); a later turn is the context ids, verbatim, then only what the
 * template writes after the context's assistant message; on a vocabulary where text
 * tokenizes the same however it is cut (byte-level), a continuation equals tokenizing
 * the whole conversation again; bad contexts, refusals and limits are errors; and
 * KVP_TOK_CONTINUE gives a continued SentencePiece text no word-start space.
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
#include "compute/text/chat.h"
#include "compute/text/tokenizer.h"
#include "tests/lib/spmfix.h"

#define N_SPECIAL 7

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

static uint32_t prompt(const struct kvp_tokenizer *tok, const char *tmpl,
		       const struct kvp_convo *cv, int32_t *out, size_t cap)
{
	struct kvp_chat_template t = named(tmpl);
	char err[256] = "";
	int32_t *ids;
	uint32_t n;
	int r;

	r = kvp_convo_prompt(&ids, &n, tok, &t, cv, 4096, err, sizeof(err));
	if (r)
		fprintf(stderr, "%s\n", err);
	assert_int_equal(r, 0);
	assert_true(n <= cap);
	memcpy(out, ids, n * sizeof(*ids));
	free(ids);
	return n;
}

#define MSG(r, s) \
	{ \
		.role = (r), .content = (s), .len = sizeof(s) - 1 \
	}

static void test_first_turn(void **state)
{
	/*
	 * the rendered text, special tokens parsed: ChatML's markers are single ids and
	 * the vocabulary's BOS leads (the template writes none); Llama 3's template writes
	 * BOS itself: exactly one, first
	 */
	const struct kvp_chat_msg m[] = { MSG(KVP_CHAT_USER, "hi") };
	struct kvp_convo cv = { .msgs = m, .n_msgs = 1 };
	int32_t ids[512];
	uint32_t n, bos = 0;

	n = prompt(*state, "chatml", &cv, ids, 512);
	/* <s> <|im_start|> u s e r \n h i <|im_end|> \n <|im_start|> a s s i s t a n t \n */
	assert_int_equal(n, 1 + 1 + 5 + 2 + 1 + 1 + 1 + 10);
	assert_int_equal(ids[0], 1);
	assert_int_equal(ids[1], 259);
	assert_int_equal(ids[9], 260);
	assert_int_equal(ids[11], 259);

	n = prompt(*state, "llama3", &cv, ids, 512);
	assert_int_equal(ids[0], 1);
	for (uint32_t i = 0; i < n; i++)
		bos += ids[i] == 1;
	assert_int_equal(bos, 1);
	assert_int_equal(ids[1], 261); /* <|start_header_id|> */
}

static void test_continuation(void **state)
{
	/*
	 * turn 2 = turn 1's context ids verbatim, then the rest of the rendering; where
	 * cutting never changes tokens (byte-level), that is exactly the whole
	 * conversation tokenized again, for ChatML, Llama 3 and Llama 2
	 */
	static const char *const tmpls[] = { "chatml", "llama3", "llama2", "zephyr" };
	/* the reply as generated: Llama 2's template puts a space before the content */
	static const char *const replies[] = { "Hello!", "Hello!", " Hello!", "Hello!" };

	for (size_t k = 0; k < sizeof(tmpls) / sizeof(tmpls[0]); k++) {
		const struct kvp_chat_msg m[] = {
			MSG(KVP_CHAT_SYSTEM, "Be brief."),
			MSG(KVP_CHAT_USER, "hi"),
			MSG(KVP_CHAT_ASSISTANT, "Hello!"),
			MSG(KVP_CHAT_USER, "more"),
		};
		struct kvp_convo first = { .msgs = m, .n_msgs = 2 };
		struct kvp_convo all = { .msgs = m, .n_msgs = 4 };
		int32_t ctx[512], whole[512], cont[512];
		uint32_t n_ctx, n_whole, n_cont;
		int n;

		/* turn 1's prompt, then the reply as the model would have generated it */
		n_ctx = prompt(*state, tmpls[k], &first, ctx, 512);
		n = kvp_tokenizer_encode_flags(*state, replies[k], strlen(replies[k]),
					       KVP_TOK_NO_ADD_SPECIAL, ctx + n_ctx, 512 - n_ctx);
		assert_int_equal(n, (int)strlen(replies[k]));
		n_ctx += (uint32_t)n;
		n_whole = prompt(*state, tmpls[k], &all, whole, 512);
		all.context = ctx;
		all.n_context = n_ctx;
		all.context_msgs = 3;
		n_cont = prompt(*state, tmpls[k], &all, cont, 512);
		assert_true(n_cont > n_ctx);
		assert_memory_equal(cont, ctx, n_ctx * sizeof(int32_t));
		if (n_cont != n_whole || memcmp(cont, whole, n_whole * sizeof(int32_t)))
			fprintf(stderr, "%s: continuation differs from the whole\n", tmpls[k]);
		assert_int_equal(n_cont, n_whole);
		assert_memory_equal(cont, whole, n_whole * sizeof(int32_t));
	}
}

static void test_context_kept_verbatim(void **state)
{
	/* the context is trusted as the conversation so far: never re-tokenized */
	const struct kvp_chat_msg m[] = {
		MSG(KVP_CHAT_USER, "hi"),
		MSG(KVP_CHAT_ASSISTANT, "whatever the text says"),
		MSG(KVP_CHAT_USER, "next"),
	};
	int32_t ctx[3] = { 7, 263, 100 }, out[256];
	struct kvp_convo cv = {
		.msgs = m, .n_msgs = 3, .context = ctx, .n_context = 3, .context_msgs = 2
	};
	uint32_t n = prompt(*state, "chatml", &cv, out, 256);

	assert_memory_equal(out, ctx, sizeof(ctx));
	/* then <|im_end|> \n <|im_start|> u s e r ...: the template's end of that turn */
	assert_int_equal(out[3], 260);
	assert_int_equal(out[4], 3 + '\n');
	assert_int_equal(out[5], 259);
	assert_true(n > 8);
}

static void test_errors(void **state)
{
	/* a context not ending in an assistant message, refusals, limits */
	const struct kvp_chat_msg m[] = {
		MSG(KVP_CHAT_USER, "hi"),
		MSG(KVP_CHAT_ASSISTANT, "yo"),
		MSG(KVP_CHAT_USER, "x"),
	};
	const struct kvp_chat_msg two_users[] = { MSG(KVP_CHAT_USER, "a"),
						  MSG(KVP_CHAT_USER, "b") };
	struct kvp_chat_template t = named("chatml"), l2 = named("llama2");
	int32_t ctx[2] = { 1, 2 };
	struct kvp_convo cv = { .msgs = m, .n_msgs = 3, .context = ctx, .n_context = 2 };
	char err[256] = "";
	int32_t *ids = NULL;
	uint32_t n;

	cv.context_msgs = 1; /* a user message */
	assert_int_equal(kvp_convo_prompt(&ids, &n, *state, &t, &cv, 100, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "assistant"));
	cv.context_msgs = 4; /* beyond the messages */
	assert_int_equal(kvp_convo_prompt(&ids, &n, *state, &t, &cv, 100, err, sizeof(err)),
			 -EINVAL);
	cv.context_msgs = 0; /* ids without messages they cover */
	assert_int_equal(kvp_convo_prompt(&ids, &n, *state, &t, &cv, 100, err, sizeof(err)),
			 -EINVAL);
	cv.n_msgs = 0;
	assert_int_equal(kvp_convo_prompt(&ids, &n, *state, &t, &cv, 100, err, sizeof(err)),
			 -EINVAL);

	/* the template's own refusal, in its words */
	cv = (struct kvp_convo){ .msgs = two_users, .n_msgs = 2 };
	assert_int_equal(kvp_convo_prompt(&ids, &n, *state, &l2, &cv, 100, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "alternate"));

	/* limits: the context alone, and with the rest */
	cv = (struct kvp_convo){
		.msgs = m, .n_msgs = 3, .context = ctx, .n_context = 2, .context_msgs = 2
	};
	assert_int_equal(kvp_convo_prompt(&ids, &n, *state, &t, &cv, 1, err, sizeof(err)), -E2BIG);
	assert_int_equal(kvp_convo_prompt(&ids, &n, *state, &t, &cv, 5, err, sizeof(err)), -E2BIG);
	cv = (struct kvp_convo){ .msgs = m, .n_msgs = 1 };
	assert_int_equal(kvp_convo_prompt(&ids, &n, *state, &t, &cv, 3, err, sizeof(err)), -E2BIG);
	assert_null(ids);
}

static void test_continue_flag(void **state)
{
	/*
	 * SentencePiece: a text continuing earlier text gets no word-start space at its
	 * start (but after a special token it does, as everywhere)
	 */
	const char *pieces[] = { "<unk>", "<s>",	   "</s>",	"\xe2\x96\x81",
				 "x",	  "\xe2\x96\x81x", "<|eot_id|>" };
	const int32_t types[] = { KVP_TOK_UNKNOWN, KVP_TOK_CONTROL, KVP_TOK_CONTROL, KVP_TOK_NORMAL,
				  KVP_TOK_NORMAL,  KVP_TOK_NORMAL,  KVP_TOK_CONTROL };
	const float scores[] = { 0, 0, 0, -1, -1, 0, 0 };
	const unsigned int base = KVP_TOK_NO_ADD_SPECIAL | KVP_TOK_PARSE_SPECIAL;
	struct kvp_tokenizer *t;
	int32_t ids[16];

	(void)state;
	assert_int_equal(kvp_tokenizer_build(&t, pieces, scores, types, 7, 1, 2, 0, 1), 0);
	/* " x": the word-start space, then " x" */
	assert_int_equal(kvp_tokenizer_encode_flags(t, " x", 2, base, ids, 16), 2);
	assert_int_equal(ids[0], 3);
	assert_int_equal(ids[1], 5);
	assert_int_equal(kvp_tokenizer_encode_flags(t, " x", 2, base | KVP_TOK_CONTINUE, ids, 16),
			 1);
	assert_int_equal(ids[0], 5);
	/* "x<|eot_id|>x" continued: the first x has no space, the one after the token has */
	assert_int_equal(kvp_tokenizer_encode_flags(t, "x<|eot_id|>x", 12, base | KVP_TOK_CONTINUE,
						    ids, 16),
			 3);
	assert_int_equal(ids[0], 4);
	assert_int_equal(ids[1], 6);
	assert_int_equal(ids[2], 5);
	kvp_tokenizer_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_first_turn, setup, teardown),
		cmocka_unit_test_setup_teardown(test_continuation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_context_kept_verbatim, setup, teardown),
		cmocka_unit_test_setup_teardown(test_errors, setup, teardown),
		cmocka_unit_test(test_continue_flag),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
