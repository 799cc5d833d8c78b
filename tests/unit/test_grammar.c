/* SPDX-License-Identifier: MIT */
/*
 * test_grammar.c - JSON Schema grammars: what they accept and refuse byte by byte, the
 * keywords refused by name, and the token mask against stepping each token alone.
 */
#include <errno.h>
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/grammar.h"

/* 256 byte tokens, then multi-byte ones as a BPE vocabulary has, then a control token */
static const char *const extra[] = { "{\"", "\":", "\",\"", "true", "null",	" \"",
				     "\"}", "12",  "0.",    "abc",  "\"name\"", "\"age\":",
				     "}}",  "\\u", "é",	    "\n  " };
#define N_EXTRA (sizeof(extra) / sizeof(extra[0]))
#define N_VOCAB (256 + N_EXTRA + 1)

static struct kvp_grammar_vocab *vocab(void)
{
	static char bytes[256];
	const char *p[N_VOCAB];
	size_t l[N_VOCAB];
	struct kvp_grammar_vocab *v;

	for (int i = 0; i < 256; i++) {
		bytes[i] = (char)i;
		p[i] = &bytes[i];
		l[i] = 1;
	}
	for (size_t i = 0; i < N_EXTRA; i++) {
		p[256 + i] = extra[i];
		l[256 + i] = strlen(extra[i]);
	}
	p[N_VOCAB - 1] = NULL; /* EOS */
	l[N_VOCAB - 1] = 0;
	assert_int_equal(kvp_grammar_vocab_new(&v, N_VOCAB, p, l), 0);
	return v;
}

static struct kvp_grammar *compile(const char *schema)
{
	struct kvp_grammar *g;
	char err[256];
	int r = kvp_grammar_compile(&g, schema, strlen(schema), err, sizeof(err));

	if (r)
		fail_msg("%s: %s", schema, err);
	return g;
}

/* does @g accept @text as a whole value? */
static bool accepts(const struct kvp_grammar *g, const struct kvp_grammar_vocab *v,
		    const char *text)
{
	struct kvp_grammar_matcher *m;
	bool ok;

	assert_int_equal(kvp_grammar_matcher_new(&m, g, v), 0);
	ok = !kvp_grammar_accept_bytes(m, text, strlen(text)) && kvp_grammar_accepting(m);
	kvp_grammar_matcher_free(m);
	return ok;
}

struct want {
	const char *text;
	bool ok;
};

static void check(const char *schema, const struct want *w, size_t n)
{
	struct kvp_grammar_vocab *v = vocab();
	struct kvp_grammar *g = compile(schema);

	for (size_t i = 0; i < n; i++)
		if (accepts(g, v, w[i].text) != w[i].ok)
			fail_msg("%s: \"%s\" should be %s", schema, w[i].text,
				 w[i].ok ? "accepted" : "refused");
	kvp_grammar_free(g);
	kvp_grammar_vocab_free(v);
}

#define CHECK(schema, ...) \
	do { \
		const struct want w_[] = { __VA_ARGS__ }; \
		check(schema, w_, sizeof(w_) / sizeof(w_[0])); \
	} while (0)

static void test_scalars(void **state)
{
	CHECK("{\"type\":\"string\"}", { "\"\"", true }, { "\"a b\"", true },
	      { "\"\\n\\u00e9\"", true }, { "\"é\"", true }, { "\"\xc3\"", false },
	      { "\"\xed\xa0\x80\"", false }, { "\"a", false }, { "\"\x01\"", false },
	      { "\"\\x\"", false }, { "1", false }, { " \"a\"", false }, { "\"a\" ", false });
	CHECK("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", { "\"a\"", false },
	      { "\"ab\"", true }, { "\"é\\n\"", true }, { "\"abc\"", true }, { "\"abcd\"", false });
	CHECK("{\"type\":\"number\"}", { "0", true }, { "-1.5e+10", true }, { "01", false },
	      { "1.", false }, { "-", false }, { ".5", false }, { "2E3", true },
	      { "1e999", false });
	CHECK("{\"type\":\"integer\"}", { "0", true }, { "-12", true }, { "1.0", false },
	      { "1e2", false }, { "-0", true });
	CHECK("{\"type\":\"boolean\"}", { "true", true }, { "false", true }, { "null", false },
	      { "tru", false });
	CHECK("{\"type\":\"null\"}", { "null", true }, { "0", false });
	CHECK("{\"type\":[\"string\",\"null\"]}", { "null", true }, { "\"x\"", true },
	      { "1", false });
}

static void test_enum_const_anyof(void **state)
{
	CHECK("{\"enum\":[\"red\",\"green\",1,12,null]}", { "\"red\"", true }, { "\"gre\"", false },
	      { "1", true }, { "12", true }, { "123", false }, { "null", true }, { "true", false });
	CHECK("{\"type\":\"string\",\"enum\":[\"a\",1]}", { "\"a\"", true }, { "1", false });
	CHECK("{\"const\":{\"a\":[1,2]}}", { "{\"a\":[1,2]}", true }, { "{\"a\":[1]}", false });
	CHECK("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"object\",\"properties\":{\"x\":"
	      "{\"type\":\"string\"}},\"required\":[\"x\"]},{\"type\":\"object\",\"properties\":"
	      "{\"x\":{\"type\":\"number\"}},\"required\":[\"x\"]}]}",
	      { "5", true }, { "{\"x\":\"s\"}", true }, { "{\"x\":2.5}", true },
	      { "{\"x\":true}", false }, { "{}", false });
}

/*
 * Every branch of a 16-way anyOf is reachable, the 9th to 16th too (a set of 8 threads
 * once dropped them: a forced call could never name the 9th tool), and a schema that
 * could hold more branches open at once, nested ones counted together, is refused.
 */
static void test_anyof_fan_out(void **state)
{
	struct kvp_grammar_vocab *v = vocab();
	struct kvp_grammar *g;
	char schema[4096], text[64], err[256];
	int len = snprintf(schema, sizeof(schema), "{\"anyOf\":[");

	for (int i = 0; i < 16; i++)
		len += snprintf(schema + len, sizeof(schema) - (size_t)len,
				"%s{\"type\":\"object\",\"properties\":{\"name\":{\"const\":"
				"\"tool%d\"}},\"required\":[\"name\"]}",
				i ? "," : "", i);
	snprintf(schema + len, sizeof(schema) - (size_t)len, "]}");
	g = compile(schema);
	for (int i = 0; i < 16; i++) {
		snprintf(text, sizeof(text), "{\"name\":\"tool%d\"}", i);
		if (!accepts(g, v, text))
			fail_msg("branch %d of 16 refused: %s", i, text);
	}
	assert_false(accepts(g, v, "{\"name\":\"tool16\"}"));
	kvp_grammar_free(g);
	/* three branches with three alternatives open in each: 9 at once, fine */
	g = compile("{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"anyOf\":["
		    "{\"type\":\"integer\"},{\"type\":\"string\"},{\"type\":\"null\"}]},\"b\":"
		    "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\"},{\"type\":"
		    "\"null\"}]}}},{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":"
		    "\"integer\"},{\"type\":\"string\"},{\"type\":\"boolean\"}]}},{\"anyOf\":["
		    "{\"type\":\"number\"},{\"type\":\"boolean\"},{\"type\":\"null\"}]}]}");
	assert_true(accepts(g, v, "{\"a\":\"x\",\"b\":null}"));
	assert_true(accepts(g, v, "[1,\"y\",true]"));
	kvp_grammar_free(g);
	/* 16 branches, one of them a 2-way anyOf: 17 open at once */
	len = snprintf(schema, sizeof(schema),
		       "{\"anyOf\":[{\"anyOf\":[{\"type\":\"integer\"},"
		       "{\"type\":\"string\"}]}");
	for (int i = 1; i < 16; i++)
		len += snprintf(schema + len, sizeof(schema) - (size_t)len, ",{\"const\":%d}", i);
	snprintf(schema + len, sizeof(schema) - (size_t)len, "]}");
	assert_int_equal(kvp_grammar_compile(&g, schema, strlen(schema), err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "more than 16 alternatives can be open at once"));
	kvp_grammar_vocab_free(v);
}

static void test_objects_arrays(void **state)
{
	const char
		*person = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
			  "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":"
			  "{\"type\":\"string\"},\"minItems\":1,\"maxItems\":2}},"
			  "\"required\":[\"name\",\"tags\"],\"additionalProperties\":false}";

	CHECK(person, { "{\"name\":\"a\",\"tags\":[\"x\"]}", true },
	      { "{\"name\":\"a\",\"age\":3,\"tags\":[\"x\",\"y\"]}", true },
	      { "{ \"name\": \"a\",\n  \"tags\": [ \"x\" ] }", true },
	      { "{\"name\":\"a\"}", false }, { "{\"tags\":[\"x\"]}", false },
	      { "{\"name\":\"a\",\"tags\":[]}", false },
	      { "{\"name\":\"a\",\"tags\":[\"x\",\"y\",\"z\"]}", false },
	      { "{\"name\":\"a\",\"tags\":[\"x\"],\"age\":3}", false }, /* the schema's order */
	      { "{\"name\":\"a\",\"other\":1,\"tags\":[\"x\"]}", false },
	      { "{\"name\":\"a\",\"tags\":[\"x\"],}", false });
	CHECK("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", { "{}", true },
	      { "{\"a\":1}", true }, { "{\"b\":1}", false });
	CHECK("{\"type\":\"object\",\"additionalProperties\":false}", { "{}", true },
	      { "{\"a\":1}", false });
	CHECK("{\"type\":\"object\"}", { "{}", true },
	      { "{\"k\":[1,{\"z\":null}],\"j\":\"v\"}", true }, { "[]", false });
	CHECK("{\"type\":\"array\"}", { "[]", true }, { "[1,\"a\",[true],{}]", true },
	      { "[1,]", false });
	CHECK("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":0}",
	      { "[]", true }, { "[1]", false });
	CHECK("{\"properties\":{\"q\":{\"type\":\"string\",\"description\":\"asked\"}},"
	      "\"title\":\"t\",\"required\":[\"q\"]}",
	      { "{\"q\":\"\"}", true }, { "{}", false });
	/* whitespace is bounded: a model cannot pad forever */
	char pad[64] = "{";

	memset(pad + 1, ' ', KVP_GRAMMAR_WS_MAX + 1);
	strcpy(pad + 2 + KVP_GRAMMAR_WS_MAX, "}");
	CHECK("{\"type\":\"object\"}", { pad, false }, { pad + 1, false });
}

static void test_refused_by_name(void **state)
{
	static const char *const bad[][2] = {
		{ "{\"type\":\"string\",\"pattern\":\"^a\"}", "\"pattern\"" },
		{ "{\"$ref\":\"#/$defs/x\"}", "\"$ref\"" },
		{ "{\"type\":\"integer\",\"minimum\":3}", "\"minimum\"" },
		{ "{\"type\":\"string\",\"format\":\"date\"}", "\"format\"" },
		{ "{\"oneOf\":[{\"type\":\"string\"}]}", "\"oneOf\"" },
		{ "{\"allOf\":[{\"type\":\"string\"}]}", "\"allOf\"" },
		{ "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}",
		  "additionalProperties" },
		{ "{\"type\":\"array\",\"items\":[{\"type\":\"string\"}]}", "items" },
		{ "{\"type\":\"array\",\"prefixItems\":[]}", "\"prefixItems\"" },
		{ "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"multipleOf\":2}}}",
		  "\"multipleOf\"" },
		{ "{\"type\":\"object\",\"required\":[\"a\"],\"properties\":{\"b\":{}}}", "\"a\"" },
		{ "{\"type\":\"strin\"}", "\"strin\"" },
		{ "{\"type\":\"string\",\"minLength\":-1}", "minLength" },
		{ "{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "minItems" },
		{ "{\"enum\":[]}", "enum" },
		{ "[1]", "schema" },
		{ "{\"type\":", "not JSON" },
	};
	char err[256];
	struct kvp_grammar *g;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		assert_int_equal(kvp_grammar_compile(&g, bad[i][0], strlen(bad[i][0]), err,
						     sizeof(err)),
				 -EINVAL);
		assert_null(g);
		if (!strstr(err, bad[i][1]))
			fail_msg("%s: \"%s\" does not name %s", bad[i][0], err, bad[i][1]);
	}
	/* nested past the automaton's depth */
	char deep[1024] = "";

	for (int i = 0; i < KVP_GRAMMAR_DEPTH; i++)
		strcat(deep, "{\"type\":\"array\",\"items\":");
	strcat(deep, "{\"type\":\"null\"}");
	for (int i = 0; i < KVP_GRAMMAR_DEPTH; i++)
		strcat(deep, "}");
	assert_int_equal(kvp_grammar_compile(&g, deep, strlen(deep), err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "nested"));
}

static uint64_t rng(uint64_t *s)
{
	*s = *s * 6364136223846793005ull + 1442695040888963407ull;
	return *s >> 33;
}

/*
 * Random walks through the mask: each step checks the mask against accepting every
 * token alone, picks an allowed token at random (the end when accepting, sometimes),
 * and the text must then parse as JSON with the required keys.
 */
static void walk(const char *schema, bool any_object, uint64_t seed, int walks)
{
	struct kvp_grammar_vocab *v = vocab();
	struct kvp_grammar *g;
	uint32_t bits[(N_VOCAB + 31) / 32];

	if (any_object)
		assert_int_equal(kvp_grammar_any_object(&g), 0);
	else
		g = compile(schema);
	for (int w = 0; w < walks; w++) {
		struct kvp_grammar_matcher *m;
		char text[4096];
		size_t len = 0;
		json_t *j;

		assert_int_equal(kvp_grammar_matcher_new(&m, g, v), 0);
		for (int step = 0;; step++) {
			uint32_t n = kvp_grammar_mask(m, bits), pick, seen = 0;

			for (int32_t t = 0; t < (int32_t)N_VOCAB - 1; t++) { /* the mask is exact */
				struct kvp_grammar_matcher *one;
				bool in = bits[t / 32] >> (t % 32) & 1;

				if (t % 7 && !in) /* every allowed one, a seventh of the others */
					continue;
				assert_int_equal(kvp_grammar_matcher_new(&one, g, v), 0);
				assert_int_equal(kvp_grammar_accept_bytes(one, text, len), 0);
				assert_int_equal(kvp_grammar_accept(one, t) == 0, in);
				kvp_grammar_matcher_free(one);
			}
			assert_false(bits[(N_VOCAB - 1) / 32] >> ((N_VOCAB - 1) % 32) & 1);
			if (kvp_grammar_accepting(m) && (!n || rng(&seed) % 4 == 0 || len > 2000))
				break;
			assert_true(n > 0);
			/* past 1000 bytes prefer closing bytes, so the walk ends */
			pick = (uint32_t)(rng(&seed) % n);
			for (uint32_t t = 0; t < N_VOCAB; t++) {
				if (!(bits[t / 32] >> (t % 32) & 1))
					continue;
				if (len > 1000 && n > 1 &&
				    !strchr("}]\"0", t < 256 ? (int)t : 'x') && rng(&seed) % 8)
					continue;
				if (seen++ >= pick || len > 1000) {
					pick = t;
					break;
				}
			}
			assert_int_equal(kvp_grammar_accept(m, (int32_t)pick), 0);
			if (pick < 256) {
				text[len++] = (char)pick;
			} else {
				memcpy(text + len, extra[pick - 256], strlen(extra[pick - 256]));
				len += strlen(extra[pick - 256]);
			}
			assert_true(len < sizeof(text) - 32);
		}
		j = json_loadb(text, len, JSON_DECODE_ANY, NULL);
		if (!j)
			fail_msg("not JSON: %.*s", (int)len, text);
		if (any_object)
			assert_true(json_is_object(j));
		json_decref(j);
		kvp_grammar_matcher_free(m);
	}
	kvp_grammar_free(g);
	kvp_grammar_vocab_free(v);
}

static void test_mask_walks(void **state)
{
	walk("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
	     "\"age\":{\"type\":\"integer\"},\"ok\":{\"type\":\"boolean\"},\"v\":{\"anyOf\":"
	     "[{\"type\":\"number\"},{\"enum\":[\"x\",\"y\"]}]},\"l\":{\"type\":\"array\",\"items\":"
	     "{\"type\":\"null\"},\"maxItems\":3}},\"required\":[\"name\",\"age\",\"l\"]}",
	     false, 1, 20);
	walk(NULL, true, 2, 10);
}

static void test_vocab_trie_duplicates(void **state)
{
	/* two tokens with the same bytes are both allowed; an empty piece never is */
	const char *p[] = { "a", "\"", "\"", "", "b" };
	size_t l[] = { 1, 1, 1, 0, 1 };
	struct kvp_grammar_vocab *v;
	struct kvp_grammar *g = compile("{\"type\":\"string\"}");
	struct kvp_grammar_matcher *m;
	uint32_t bits[1];

	assert_int_equal(kvp_grammar_vocab_new(&v, 5, p, l), 0);
	assert_int_equal(kvp_grammar_matcher_new(&m, g, v), 0);
	assert_int_equal(kvp_grammar_mask(m, bits), 2);
	assert_int_equal(bits[0], 0x6);
	assert_int_equal(kvp_grammar_accept(m, 2), 0);
	assert_int_equal(kvp_grammar_mask(m, bits), 4);
	assert_int_equal(bits[0], 0x17);
	assert_int_equal(kvp_grammar_accept(m, 3), -EINVAL);
	assert_int_equal(kvp_grammar_accept(m, 1), 0);
	assert_true(kvp_grammar_accepting(m));
	assert_int_equal(kvp_grammar_mask(m, bits), 0);
	kvp_grammar_matcher_free(m);
	kvp_grammar_free(g);
	kvp_grammar_vocab_free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scalars),
		cmocka_unit_test(test_enum_const_anyof),
		cmocka_unit_test(test_anyof_fan_out),
		cmocka_unit_test(test_objects_arrays),
		cmocka_unit_test(test_refused_by_name),
		cmocka_unit_test(test_vocab_trie_duplicates),
		cmocka_unit_test(test_mask_walks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
