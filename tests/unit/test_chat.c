/* SPDX-License-Identifier: MIT */
/*
 * test_chat.c - chat templates: recognition of the families from their real template
 * text (tests/data/templates/FAMILY.MODEL.jinja), byte-equal rendering against
 * @huggingface/jinja running those templates (tests/node/chat-oracle.mjs, run here
 * with node; skipped without node, failed when node is here but the packages are not),
 * refusals where the template raises, names and errors.
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

#include "compute/text/chat.h"
#include "tests/lib/testlib.h"

static char *template_path(const char *file)
{
	static char p[4096];

	snprintf(p, sizeof(p), "%s/tests/data/templates/%s", getenv("KVP_SOURCE_DIR"), file);
	return p;
}

static int hexval(int c)
{
	return c <= '9' ? c - '0' : c - 'a' + 10;
}

/* Decode a hex token ("-" = empty) into a malloc'd NUL-terminated string. */
static char *unhex(const char *h, size_t hl, size_t *len)
{
	char *s = malloc(hl / 2 + 1);
	size_t n = 0;

	assert_non_null(s);
	if (!(hl == 1 && h[0] == '-'))
		for (size_t i = 0; i + 1 < hl; i += 2)
			s[n++] = (char)(hexval(h[i]) << 4 | hexval(h[i + 1]));
	s[n] = 0;
	*len = n;
	return s;
}

static void test_families_recognised(void **state)
{
	/* each real template is recognised as the family its file is named for */
	static const char *const files[][2] = {
		{ "llama3.meta-llama-3-8b-instruct.jinja", "llama3" },
		{ "llama3.1.llama-3.1-8b-instruct.jinja", "llama3.1" },
		{ "llama3.2.llama-3.2-1b-instruct.jinja", "llama3.2" },
		{ "chatml.qwen2.5-0.5b-instruct.jinja", "chatml" },
		{ "chatml.smollm2-instruct.jinja", "chatml" },
		{ "chatml.openhermes-2.5-mistral-7b.jinja", "chatml" },
		{ "llama2.llama-2-7b-chat.jinja", "llama2" },
		{ "mistral.mistral-7b-instruct-v0.2.jinja", "mistral" },
		{ "phi3.phi-3.5-mini-instruct.jinja", "phi3" },
		{ "gemma.gemma-2-2b-it.jinja", "gemma" },
		{ "zephyr.tinyllama-1.1b-chat.jinja", "zephyr" },
		{ "deepseek.deepseek-llm-7b-chat.jinja", "deepseek" },
		{ "qwen3.qwen3-0.6b.jinja", "qwen3" },
		{ "mistral-v3.mistral-7b-instruct-v0.3.jinja", "mistral-v3" },
		{ "mistral-nemo.mistral-nemo-instruct-2407.jinja", "mistral-nemo" },
	};
	struct kvp_chat_template t;

	if (!getenv("KVP_SOURCE_DIR"))
		skip();
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		size_t len;
		char *src = kvp_test_read_file(template_path(files[i][0]), &len);

		assert_non_null(src);
		assert_int_equal(kvp_chat_template_detect(&t, src, len, NULL, 0), 0);
		assert_string_equal(kvp_chat_family_name(t.family), files[i][1]);
		if (strstr(files[i][0], "qwen2.5"))
			assert_string_equal(
				t.default_system,
				"You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
		else if (strstr(files[i][0], "smollm"))
			assert_string_equal(
				t.default_system,
				"You are a helpful AI assistant named SmolLM, trained by Hugging Face");
		else
			assert_string_equal(t.default_system, "");
		free(src);
	}
}

static void test_unknown_template_lists_names(void **state)
{
	/* an unknown template and an unknown name are errors that name every family */
	static const char src[] = "{% for m in messages %}<<{{ m.content }}>>{% endfor %}";
	struct kvp_chat_template t;
	char err[512];

	assert_int_equal(kvp_chat_template_detect(&t, src, sizeof(src) - 1, err, sizeof(err)),
			 -ENOTSUP);
	assert_non_null(strstr(
		err,
		"llama3, llama3.1, llama3.2, chatml, llama2, mistral, phi3, gemma, zephyr, deepseek"));
	assert_int_equal(kvp_chat_template_named(&t, "vicuna", err, sizeof(err)), -ENOTSUP);
	assert_non_null(strstr(err, "'vicuna'"));
	assert_non_null(strstr(err, "chatml"));
	assert_int_equal(kvp_chat_template_named(&t, "gemma", err, sizeof(err)), 0);
	assert_int_equal(t.family, KVP_CHAT_GEMMA);
	/* a Mistral template of a later version is not taken for v0.2 */
	assert_int_equal(kvp_chat_template_detect(&t, "[INST][AVAILABLE_TOOLS]", 23, NULL, 0),
			 -ENOTSUP);
}

static void test_refusals_and_trim(void **state)
{
	/*
	 * Gemma refuses a system turn and non-alternating roles with the template's words;
	 * Llama 3 trims content (Unicode spaces too), ChatML does not
	 */
	struct kvp_chat_template t;
	struct kvp_chat_msg sys[] = { { KVP_CHAT_SYSTEM, "S", 1, NULL, 0, NULL, 0 },
				      { KVP_CHAT_USER, "u", 1, NULL, 0, NULL, 0 } };
	struct kvp_chat_msg two[] = { { KVP_CHAT_USER, "a", 1, NULL, 0, NULL, 0 },
				      { KVP_CHAT_USER, "b", 1, NULL, 0, NULL, 0 } };
	struct kvp_chat_msg sp[] = { { KVP_CHAT_USER, "\xe3\x80\x80 hi\t\xc2\xa0", 9, NULL, 0, NULL,
				       0 } };
	struct kvp_chat_opts o = { .bos = "<B>", .eos = "<E>" };
	char err[256], *out;
	size_t len;

	assert_int_equal(kvp_chat_template_named(&t, "gemma", NULL, 0), 0);
	assert_int_equal(kvp_chat_render(&out, &len, &t, sys, 2, &o, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "chat: System role not supported");
	assert_int_equal(kvp_chat_render(&out, &len, &t, two, 2, &o, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "must alternate"));
	assert_int_equal(kvp_chat_template_named(&t, "llama3", NULL, 0), 0);
	assert_int_equal(kvp_chat_render(&out, &len, &t, sp, 1, &o, err, sizeof(err)), 0);
	assert_string_equal(out, "<B><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
	assert_int_equal(len, strlen(out));
	free(out);
	assert_int_equal(kvp_chat_template_named(&t, "chatml", NULL, 0), 0);
	o.add_generation_prompt = true;
	assert_int_equal(kvp_chat_render(&out, &len, &t, sp, 1, &o, err, sizeof(err)), 0);
	assert_string_equal(
		out,
		"<|im_start|>user\n\xe3\x80\x80 hi\t\xc2\xa0<|im_end|>\n<|im_start|>assistant\n");
	free(out);
}

static void test_qwen3_no_thinking(void **state)
{
	/* Qwen3's enable_thinking=false: an empty <think> block after the generation prompt */
	struct kvp_chat_template t;
	struct kvp_chat_msg u[] = { { KVP_CHAT_USER, "Hi", 2, NULL, 0, NULL, 0 } };
	struct kvp_chat_opts o = { .add_generation_prompt = true, .no_thinking = true };
	char *out;
	size_t len;

	assert_int_equal(kvp_chat_template_named(&t, "qwen3", NULL, 0), 0);
	assert_true(t.tools);
	assert_false(kvp_chat_writes_bos(&t));
	assert_int_equal(kvp_chat_render(&out, &len, &t, u, 1, &o, NULL, 0), 0);
	assert_string_equal(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
				 "<think>\n\n</think>\n\n");
	free(out);
	o.no_thinking = false;
	assert_int_equal(kvp_chat_render(&out, &len, &t, u, 1, &o, NULL, 0), 0);
	assert_string_equal(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
	free(out);
	/* only Qwen3 has a reasoning section: the others refuse thinking by name, and
	 * no_thinking changes nothing they render */
	assert_true(kvp_chat_reasons(&t));
	for (int f = 0; f < KVP_CHAT__COUNT; f++) {
		struct kvp_chat_template other;
		char err[160], *a, *b;
		size_t la, lb;

		if (f == KVP_CHAT_QWEN3 ||
		    kvp_chat_template_named(&other, kvp_chat_family_name(f), NULL, 0))
			continue;
		assert_false(kvp_chat_reasons(&other));
		assert_int_equal(kvp_chat_thinking_refused(&other, err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, kvp_chat_family_name(f)));
		assert_non_null(strstr(err, "has no reasoning section"));
		o.no_thinking = false;
		assert_int_equal(kvp_chat_render(&a, &la, &other, u, 1, &o, NULL, 0), 0);
		o.no_thinking = true;
		assert_int_equal(kvp_chat_render(&b, &lb, &other, u, 1, &o, NULL, 0), 0);
		assert_string_equal(a, b);
		free(a);
		free(b);
	}
}

static void test_mistral3_tools(void **state)
{
	/*
	 * Mistral v0.3 / Nemo render tools, calls and results; a call whose id is not 9
	 * characters long (or missing) is refused with the template's own message
	 */
	static const char *const fams[] = { "mistral-v3", "mistral-nemo" };
	static const char want[2][256] = {
		"<s>[AVAILABLE_TOOLS] [[/AVAILABLE_TOOLS][INST] Hi[/INST][TOOL_CALLS] [{\"name\": "
		"\"f\", \"arguments\": {\"a\": 1}, \"id\": \"abcdefghi\"}]</s>[TOOL_RESULTS] "
		"{\"content\": 2, \"call_id\": \"abcdefghi\"}[/TOOL_RESULTS]",
		"<s>[AVAILABLE_TOOLS][[/AVAILABLE_TOOLS][INST]Hi[/INST][TOOL_CALLS][{\"name\": "
		"\"f\", \"arguments\": {\"a\": 1}, \"id\": \"abcdefghi\"}]</s>[TOOL_RESULTS]"
		"{\"content\": 2, \"call_id\": \"abcdefghi\"}[/TOOL_RESULTS]",
	};
	struct kvp_chat_msg u[] = {
		{ KVP_CHAT_USER, "Hi", 2, NULL, 0, NULL, 0 },
		{ KVP_CHAT_ASSISTANT, "", 0, NULL, 0, NULL, 0 },
		{ KVP_CHAT_TOOL_CALL, "{\"a\":1.0}", 9, "f", 1, "abcdefghi", 9 },
		{ KVP_CHAT_TOOL, "2", 1, NULL, 0, "abcdefghi", 9 },
	};
	struct kvp_chat_opts o = { .tools = "[]", .tools_len = 2, .bos = "<s>", .eos = "</s>" };
	struct kvp_chat_template t;
	char err[256], *out;
	size_t len;

	(void)state;
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(kvp_chat_template_named(&t, fams[i], NULL, 0), 0);
		assert_true(t.tools);
		assert_int_equal(kvp_chat_render(&out, &len, &t, u, 4, &o, err, sizeof(err)), 0);
		assert_string_equal(out, want[i]);
		free(out);
		u[3].id_len = 8;
		assert_int_equal(kvp_chat_render(&out, &len, &t, u, 4, &o, err, sizeof(err)),
				 -EINVAL);
		assert_string_equal(
			err, "chat: Tool call IDs should be alphanumeric strings with length 9!");
		u[3].id_len = 9;
		u[2].id = NULL;
		assert_int_equal(kvp_chat_render(&out, &len, &t, u, 4, &o, err, sizeof(err)),
				 -EINVAL);
		u[2].id = "abcdefghi";
	}
}

static void test_renders_equal_jinja(void **state)
{
	/*
	 * every real template x 9 conversations (with and without a system turn, multi-turn,
	 * whitespace to trim, non-Latin text, roles that do not alternate) x
	 * add_generation_prompt on and off: kvpool's text is byte-equal to what
	 * @huggingface/jinja renders from the template, and where the template raises,
	 * kvpool refuses
	 */
	const char *src = getenv("KVP_SOURCE_DIR");
	char cmd[8192], dir[] = "/tmp/kvp-chat-oracle.XXXXXX", path[128], cur[256] = "";
	char *cases, *tsrc = NULL;
	struct kvp_chat_template t;
	int n = 0, bad = 0, refused = 0, ntools = 0, ntools_refused = 0;

	if (!src || system("command -v node >/dev/null 2>&1"))
		skip();
	snprintf(cmd, sizeof(cmd), "%s/tests/node/node_modules/@huggingface/jinja/package.json",
		 src);
	if (access(cmd, R_OK)) /* node is here: the packages must be too (tests/deps.sh) */
		fail_msg("chat oracle: %s missing: run tests/deps.sh", cmd);
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/chat.txt", dir);
	snprintf(cmd, sizeof(cmd),
		 "node '%s/tests/node/chat-oracle.mjs' '%s/tests/data/templates' '%s'", src, src,
		 path);
	assert_int_equal(system(cmd), 0);
	cases = kvp_test_read_file(path, NULL);
	assert_non_null(cases);
	for (char *line = cases, *nl; *line; line = nl + 1) {
		char *tok[64], *save = NULL, *out = NULL, err[256];
		struct kvp_chat_msg msgs[16];
		struct kvp_chat_opts o = { .date = "26 Jul 2024" };
		char *owned[24];
		bool tooly;
		size_t nt = 0, nm, len, l, no = 0;
		int r;

		nl = strchr(line, '\n');
		assert_non_null(nl);
		*nl = 0;
		for (char *w = strtok_r(line, " ", &save); w && nt < 64;
		     w = strtok_r(NULL, " ", &save))
			tok[nt++] = w;
		assert_true(nt >= 7);
		if (strcmp(cur, tok[0])) {
			size_t tl;

			free(tsrc);
			snprintf(cur, sizeof(cur), "%s", tok[0]);
			tsrc = kvp_test_read_file(template_path(cur), &tl);
			assert_non_null(tsrc);
			assert_int_equal(kvp_chat_template_detect(&t, tsrc, tl, NULL, 0), 0);
		}
		o.add_generation_prompt = tok[1][0] == '1';
		o.bos = owned[no++] = unhex(tok[2], strlen(tok[2]), &l);
		o.eos = owned[no++] = unhex(tok[3], strlen(tok[3]), &l);
		nm = (size_t)atoi(tok[4]);
		assert_true(nm <= 16 && (nt == 5 + nm + 2 || nt == 5 + nm + 3));
		tooly = false;
		if (nt == 5 + nm + 3) { /* tools:HEX before "=" */
			assert_memory_equal(tok[5 + nm], "tools:", 6);
			o.tools = owned[no++] = unhex(tok[5 + nm] + 6, strlen(tok[5 + nm] + 6),
						      &o.tools_len);
			tooly = true;
		}
		for (size_t i = 0; i < nm; i++) {
			char *colon = strchr(tok[5 + i], ':'), *c, *idc;

			assert_non_null(colon);
			*colon = 0;
			idc = strchr(colon + 1, ':'); /* ROLE:HEX:IDHEX: a call's or result's id */
			if (idc)
				*idc = 0;
			msgs[i] = (struct kvp_chat_msg){ 0 };
			msgs[i].role = !strcmp(tok[5 + i], "system") ? KVP_CHAT_SYSTEM :
				       !strcmp(tok[5 + i], "user")   ? KVP_CHAT_USER :
				       !strcmp(tok[5 + i], "tool")   ? KVP_CHAT_TOOL :
				       !strcmp(tok[5 + i], "call")   ? KVP_CHAT_TOOL_CALL :
								       KVP_CHAT_ASSISTANT;
			msgs[i].content = owned[no++] = unhex(colon + 1, strlen(colon + 1),
							      &msgs[i].len);
			if (idc)
				msgs[i].id = owned[no++] = unhex(idc + 1, strlen(idc + 1),
								 &msgs[i].id_len);
			if (msgs[i].role == KVP_CHAT_TOOL || msgs[i].role == KVP_CHAT_TOOL_CALL)
				tooly = true;
			if (msgs[i].role == KVP_CHAT_TOOL_CALL) { /* "NAME\nARGS" */
				c = strchr(msgs[i].content, '\n');
				assert_non_null(c);
				msgs[i].name = msgs[i].content;
				msgs[i].name_len = (size_t)(c - msgs[i].content);
				msgs[i].len -= msgs[i].name_len + 1;
				msgs[i].content = c + 1;
			}
		}
		r = kvp_chat_render(&out, &len, &t, msgs, nm, &o, err, sizeof(err));
		n++;
		ntools += tooly && t.tools;
		if (tooly && !t.tools) {
			/* a template without tools: refused by name, never rendered without them */
			char want[128];

			snprintf(want, sizeof(want),
				 "chat: the model's chat template (%s) does not support tools",
				 kvp_chat_family_name(t.family));
			ntools_refused++;
			if ((r != -EINVAL || strncmp(err, want, strlen(want))) && bad++ < 5)
				fprintf(stderr, "MISMATCH %s case %d: tools not refused (r=%d)\n",
					cur, n, r);
		} else if (!strcmp(tok[nt - 1], "error")) {
			refused++;
			if (r != -EINVAL && bad++ < 5)
				fprintf(stderr,
					"MISMATCH %s case %d: jinja raised, kvpool rendered\n", cur,
					n);
		} else {
			size_t wl;
			char *want = unhex(tok[nt - 1] + 3, strlen(tok[nt - 1] + 3), &wl);

			if ((r || wl != len || memcmp(want, out, len)) && bad++ < 5)
				fprintf(stderr,
					"MISMATCH %s case %d (r=%d %s)\n  want \"%s\"\n  got  \"%s\"\n",
					cur, n, r, r ? err : "", want, out ? out : "");
			free(want);
		}
		free(out);
		for (size_t i = 0; i < no; i++)
			free(owned[i]);
	}
	fprintf(stderr,
		"chat: %d cases (%d refused by the template), %d with tools (%d refused: no "
		"tools in the template), %d mismatches\n",
		n, refused, ntools, ntools_refused, bad);
	free(tsrc);
	free(cases);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
	assert_true(n >= 15 * 26);
	/* Llama 3.1, 3.2, Qwen2.5, Qwen3, Mistral v0.3 and Nemo x 14 tool conversations x 2
	 * rendered, the other 9 refused */
	assert_int_equal(ntools, 6 * 14 * 2);
	assert_int_equal(ntools_refused, 9 * 14 * 2);
	assert_int_equal(bad, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_families_recognised),
		cmocka_unit_test(test_unknown_template_lists_names),
		cmocka_unit_test(test_refusals_and_trim),
		cmocka_unit_test(test_qwen3_no_thinking),
		cmocka_unit_test(test_mistral3_tools),
		cmocka_unit_test(test_renders_equal_jinja),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
