/* SPDX-License-Identifier: MIT */
/*
 * test_bpe.c - byte-level BPE against its definition, lossless round trips (invalid
 * UTF-8 included), streaming detokenization, the metadata flags (add_bos, add_eos,
 * add_space_prefix, tokenizer.ggml.pre), and a seeded fuzz of the tokenizer and chat
 * code: random vocabularies, merges and metadata written as GGUF (then byte-flipped),
 * random text and conversations - no crash, no sanitizer report, results in bounds.
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

#include "compute/gguf.h"
#include "compute/mkmodel.h"
#include "compute/mkvocab.h"
#include "compute/text/chat.h"
#include "compute/text/tokenizer.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	return n ? (uint32_t)((rng >> 33) % n) : 0;
}

/* GPT-2's printable character for byte b, written here from the definition. */
static void byte_char(unsigned int b, char *out)
{
	unsigned int cp = b, k = 0;

	if (b <= 32 || (b >= 127 && b <= 160) || b == 173) {
		for (unsigned int x = 0; x < b; x++)
			k += x <= 32 || (x >= 127 && x <= 160) || x == 173;
		cp = 256 + k;
	}
	if (cp < 0x80) {
		out[0] = (char)cp;
		out[1] = 0;
	} else {
		out[0] = (char)(0xc0 | cp >> 6);
		out[1] = (char)(0x80 | (cp & 0x3f));
		out[2] = 0;
	}
}

/* A vocabulary under construction. */
struct vb {
	struct kvp_mkmodel_vocab v;
	uint32_t cap_t, cap_m;
};

static void vb_init(struct vb *b, const char *model, const char *pre)
{
	memset(b, 0, sizeof(*b));
	b->v.model = strdup(model);
	b->v.pre = pre ? strdup(pre) : NULL;
	b->v.bos = b->v.eos = b->v.unk = b->v.eot = b->v.eom = b->v.pad = -1;
	b->v.add_bos = b->v.add_eos = b->v.add_space_prefix = -1;
	b->cap_t = b->cap_m = 1024;
	b->v.tokens = calloc(b->cap_t, sizeof(char *));
	b->v.types = calloc(b->cap_t, sizeof(int32_t));
	b->v.merges = calloc(b->cap_m, sizeof(char *));
	assert_true(b->v.model && b->v.tokens && b->v.types && b->v.merges);
}

static int32_t vb_token(struct vb *b, const char *s, int32_t type)
{
	assert_true(b->v.n_tokens < b->cap_t);
	b->v.tokens[b->v.n_tokens] = strdup(s);
	b->v.types[b->v.n_tokens] = type;
	return (int32_t)b->v.n_tokens++;
}

static void vb_merge(struct vb *b, const char *l, const char *r)
{
	char m[512];

	assert_true(b->v.n_merges < b->cap_m);
	snprintf(m, sizeof(m), "%s %s", l, r);
	b->v.merges[b->v.n_merges++] = strdup(m);
}

/* Write @v into a GGUF in memory and build the tokenizer from it (through the file). */
static int vb_load(const struct kvp_mkmodel_vocab *v, void **buf, struct kvp_gguf **g,
		   struct kvp_tokenizer **t, char *err, size_t errlen)
{
	struct kvp_mkmodel_opts o;
	size_t len;
	int r;

	assert_int_equal(kvp_mkmodel_preset(&o, "tiny"), 0);
	o.n_embd = 8;
	o.n_heads = 2;
	o.n_kv_heads = 1;
	o.n_ff = 8;
	o.n_layers = 1;
	o.vocab = v;
	assert_int_equal(kvp_mkmodel_write_mem(buf, &len, &o, err, errlen), 0);
	assert_int_equal(kvp_gguf_parse(g, *buf, len, err, errlen), 0);
	r = kvp_tokenizer_new_gguf(t, *g, 0, err, errlen);
	return r;
}

/* A byte-level vocabulary: the 256 byte characters, then merges making @words. */
static void byte_vocab(struct vb *b, const char *pre)
{
	char c[4];

	vb_init(b, "gpt2", pre);
	for (unsigned int x = 0; x < 256; x++) {
		byte_char(x, c);
		vb_token(b, c, KVP_TOK_NORMAL);
	}
}

static void test_pre_and_model_refused_by_name(void **state)
{
	/* an unknown tokenizer.ggml.pre or model is refused, naming it and the known ones */
	struct vb b;
	struct kvp_tokenizer *t = NULL;
	struct kvp_gguf *g = NULL;
	void *buf = NULL;
	char err[1024] = "";

	byte_vocab(&b, "gpt-5-turbo");
	assert_int_equal(vb_load(&b.v, &buf, &g, &t, err, sizeof(err)), -ENOTSUP);
	assert_non_null(strstr(err, "'gpt-5-turbo'"));
	assert_non_null(strstr(err, "llama-bpe"));
	assert_non_null(strstr(err, "deepseek-coder"));
	kvp_gguf_close(g);
	free(buf);
	/* no tokenizer.ggml.pre at all: the GPT-2-like default set */
	free(b.v.pre);
	b.v.pre = NULL;
	assert_int_equal(vb_load(&b.v, &buf, &g, &t, err, sizeof(err)), 0);
	assert_string_equal(kvp_tokenizer_pre_name(t), "default");
	kvp_tokenizer_free(t);
	kvp_gguf_close(g);
	free(buf);
	{
		struct kvp_mkmodel_vocab *v = malloc(sizeof(*v));

		*v = b.v;
		kvp_mkmodel_vocab_free(v);
	}
}

/*
 * BPE from the definition: the word's bytes as symbols; while some adjacent pair has a
 * merge, merge the one of lowest rank (leftmost on a tie); then each symbol's id.
 */
static int naive_bpe(const struct kvp_mkmodel_vocab *v, const char *word, int32_t *ids)
{
	char sym[256][64];
	int n = 0, k = 0;

	for (const char *p = word; *p; p++)
		byte_char((uint8_t)*p, sym[n++]);
	for (;;) {
		int best = -1;
		uint32_t br = UINT32_MAX;

		for (int i = 0; i + 1 < n; i++) {
			char m[160];

			snprintf(m, sizeof(m), "%s %s", sym[i], sym[i + 1]);
			for (uint32_t r = 0; r < v->n_merges && r < br; r++) {
				if (!strcmp(v->merges[r], m)) {
					br = r;
					best = i;
					break;
				}
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
	for (int i = 0; i < n; i++) {
		uint32_t id = 0;

		while (id < v->n_tokens && strcmp(v->tokens[id], sym[i]))
			id++;
		assert_true(id < v->n_tokens);
		ids[k++] = (int32_t)id;
	}
	return k;
}

static void test_merges_match_the_definition(void **state)
{
	/*
	 * 30 random merge lists over "abcd" (every merge's result a token, ranks random):
	 * the queue-based encoder gives exactly the naive definition's ids on 40 random
	 * words each
	 */
	for (int round = 0; round < 30; round++) {
		struct vb b;
		struct kvp_tokenizer *t = NULL;
		struct kvp_gguf *g = NULL;
		void *buf = NULL;
		char err[512];

		byte_vocab(&b, "gpt-2");
		for (int m = 0; m < 60; m++) {
			/* a merge of two existing tokens over the letters */
			uint32_t l = 256 + rnd(b.v.n_tokens - 256 + 4),
				 r = 256 + rnd(b.v.n_tokens - 256 + 4);
			const char *ls = l >= b.v.n_tokens ? b.v.tokens['a' + (l - b.v.n_tokens)] :
							     b.v.tokens[l];
			const char *rs = r >= b.v.n_tokens ? b.v.tokens['a' + (r - b.v.n_tokens)] :
							     b.v.tokens[r];
			char cat[128];
			uint32_t id = 0;

			if (strlen(ls) + strlen(rs) > 12)
				continue;
			snprintf(cat, sizeof(cat), "%s%s", ls, rs);
			while (id < b.v.n_tokens && strcmp(b.v.tokens[id], cat))
				id++;
			if (id == b.v.n_tokens)
				vb_token(&b, cat, KVP_TOK_NORMAL);
			vb_merge(&b, ls, rs);
		}
		assert_int_equal(vb_load(&b.v, &buf, &g, &t, err, sizeof(err)), 0);
		for (int it = 0; it < 40; it++) {
			char w[40];
			int32_t want[64], got[64];
			int n = 1 + (int)rnd(30), k;

			for (int i = 0; i < n; i++)
				w[i] = (char)('a' + rnd(4));
			w[n] = 0;
			k = naive_bpe(&b.v, w, want);
			assert_int_equal(kvp_tokenizer_encode(t, w, (size_t)n, got, 64), k);
			assert_memory_equal(got, want, (size_t)k * sizeof(int32_t));
		}
		kvp_tokenizer_free(t);
		kvp_gguf_close(g);
		free(buf);
		{
			struct kvp_mkmodel_vocab *v = malloc(sizeof(*v));

			*v = b.v;
			kvp_mkmodel_vocab_free(v);
		}
	}
}

static void test_lossless_and_streamed(void **state)
{
	/*
	 * a byte-level vocabulary loses nothing: any bytes (invalid UTF-8 included) decode
	 * back exactly; streamed one token at a time through kvp_utf8_feed(), a valid text
	 * comes out whole characters at a time, and equal
	 */
	static const char text[] =
		"caf\xc3\xa9 \xf0\x9f\xa6\x99 \xe4\xb8\xad\xe6\x96\x87 ok\xff\xfe\xc3";
	struct vb b;
	struct kvp_tokenizer *t = NULL;
	struct kvp_gguf *g = NULL;
	void *buf = NULL;
	char err[512], out[256], st[64];
	int32_t ids[128];
	int k;
	long n;
	size_t ol = 0;
	struct kvp_utf8_stream us = { 0 };

	byte_vocab(&b, "llama-bpe");
	vb_merge(&b, "c", "a");
	vb_token(&b, "ca", KVP_TOK_NORMAL);
	vb_token(&b, "<|eot_id|>", KVP_TOK_CONTROL);
	b.v.eos = b.v.n_tokens - 1;
	b.v.add_eos = 1;
	b.v.add_bos = 0;
	assert_int_equal(vb_load(&b.v, &buf, &g, &t, err, sizeof(err)), 0);
	k = kvp_tokenizer_encode(t, text, sizeof(text) - 1, ids, 128);
	assert_true(k > 0 && k <= (int)sizeof(text) + 1);
	assert_int_equal(ids[k - 1], (int)b.v.n_tokens - 1); /* add_eos */
	assert_int_equal(ids[0], 256);			     /* "ca" merged */
	n = kvp_tokenizer_decode(t, ids, (size_t)k, 0, out, sizeof(out));
	assert_int_equal(n, (long)sizeof(text) - 1);
	assert_memory_equal(out, text, sizeof(text) - 1);
	/* streamed: the valid prefix (up to "ok") comes out whole */
	for (int i = 0; i + 1 < k; i++) {
		size_t pl;
		const char *p = kvp_tokenizer_piece(t, ids[i], &pl);
		int w = kvp_utf8_feed(&us, p, pl, st, sizeof(st));

		assert_true(w >= 0);
		/* never half a character: what came out so far is valid UTF-8 up to here */
		memcpy(out + ol, st, (size_t)w);
		ol += (size_t)w;
	}
	assert_true(ol >= 20);
	assert_memory_equal(out, text, 20); /* "café 🦙 中文 ok" */
	kvp_tokenizer_free(t);
	kvp_gguf_close(g);
	free(buf);
	{
		struct kvp_mkmodel_vocab *v = malloc(sizeof(*v));

		*v = b.v;
		kvp_mkmodel_vocab_free(v);
	}
}

static void test_spm_space_prefix_flag(void **state)
{
	/* SentencePiece with add_space_prefix = false: no U+2581 before the first word */
	struct vb b;
	struct kvp_tokenizer *t = NULL;
	struct kvp_gguf *g = NULL;
	void *buf = NULL;
	char err[512], name[8];
	int32_t ids[16];

	vb_init(&b, "llama", NULL);
	vb_token(&b, "<unk>", KVP_TOK_UNKNOWN);
	vb_token(&b, "<s>", KVP_TOK_CONTROL);
	vb_token(&b, "</s>", KVP_TOK_CONTROL);
	for (int x = 0; x < 256; x++) {
		snprintf(name, sizeof(name), "<0x%02X>", x);
		vb_token(&b, name, KVP_TOK_BYTE);
	}
	vb_token(&b, "\xe2\x96\x81", KVP_TOK_NORMAL);
	vb_token(&b, "hi", KVP_TOK_NORMAL);
	vb_token(&b, "\xe2\x96\x81hi", KVP_TOK_NORMAL);
	b.v.scores = calloc(b.v.n_tokens, sizeof(float));
	b.v.bos = 1;
	b.v.eos = 2;
	b.v.unk = 0;
	b.v.add_space_prefix = 0;
	assert_int_equal(vb_load(&b.v, &buf, &g, &t, err, sizeof(err)), 0);
	assert_int_equal(kvp_tokenizer_encode(t, "hi hi", 5, ids, 16), 3);
	assert_int_equal(ids[0], 1);
	assert_int_equal(ids[1], 260); /* "hi", no prefix */
	assert_int_equal(ids[2], 261); /* "▁hi" */
	kvp_tokenizer_free(t);
	kvp_gguf_close(g);
	free(buf);
	b.v.add_space_prefix = -1; /* default: the prefix */
	assert_int_equal(vb_load(&b.v, &buf, &g, &t, err, sizeof(err)), 0);
	assert_int_equal(kvp_tokenizer_encode(t, "hi hi", 5, ids, 16), 3);
	assert_int_equal(ids[1], 261);
	kvp_tokenizer_free(t);
	kvp_gguf_close(g);
	free(buf);
	{
		struct kvp_mkmodel_vocab *v = malloc(sizeof(*v));

		*v = b.v;
		kvp_mkmodel_vocab_free(v);
	}
}

static const char *const pres[] = {
	"default",	  "llama-bpe", "qwen2", "gpt-2",    "smollm", "falcon", "deepseek-llm",
	"deepseek-coder", "starcoder", "mpt",	"gpt-neox", "refact", "bogus",
};

static const char *const frags[] = {
	"<|eot_id|>",	"<|im_start|>", "\xe2\x96\x81", " ",	    "  ", "\n",
	"\r\n",		"\t",		"123456",	"hello",    "'s", "\xf0\x9f\xa6\x99",
	"\xe4\xb8\xad", "\xc3",		"\xff",		"\x80",	    "!!", "<",
	"\xe2\x80\xa8", "\xc2\xa0",	"Ab",		"\xd9\xa3",
};

/* Random bytes and fragments, up to @max bytes. */
static size_t random_text(char *s, size_t max)
{
	size_t n = 0, target = rnd((uint32_t)max);

	while (n < target) {
		if (rnd(3)) {
			const char *f = frags[rnd(sizeof(frags) / sizeof(frags[0]))];
			size_t l = strlen(f);

			if (n + l > max)
				break;
			memcpy(s + n, f, l);
			n += l;
		} else {
			s[n++] = (char)rnd(256);
		}
	}
	return n;
}

static void fuzz_one(struct kvp_tokenizer *t)
{
	char text[600];
	int32_t ids[2048];
	char back[4096];

	for (int it = 0; it < 30; it++) {
		size_t n = random_text(text, sizeof(text));
		unsigned int flags = rnd(8);
		int k = kvp_tokenizer_encode_flags(t, text, n, flags, ids, 2048);

		assert_true(k >= 0 && k <= (int)(3 * n + 4));
		for (int i = 0; i < k; i++)
			assert_true(ids[i] >= 0 && (uint32_t)ids[i] < kvp_tokenizer_n_vocab(t));
		assert_true(kvp_tokenizer_decode(t, ids, (size_t)k, rnd(4), back, sizeof(back)) >=
			    0);
		/* a short buffer: the same count, nothing past cap */
		ids[3] = -7;
		assert_int_equal(kvp_tokenizer_encode_flags(t, text, n, flags, ids, 3), k);
		if (k > 3)
			assert_int_equal(ids[3], -7);
	}
}

static void test_fuzz_vocabularies_and_text(void **state)
{
	/*
	 * 150 random vocabularies (byte-level BPE with random merges, pre-tokenizers and
	 * special tokens; or SentencePiece with random pieces and scores), each written as
	 * GGUF, loaded, and encoded/decoded on random text with random flags; then the
	 * GGUF's bytes flipped at random and loaded again: every load either fails with an
	 * error or gives a tokenizer that survives the same treatment
	 */
	for (int round = 0; round < 150; round++) {
		struct vb b;
		struct kvp_tokenizer *t = NULL;
		struct kvp_gguf *g = NULL;
		void *buf = NULL;
		char err[1024], tok[64];
		int spm = rnd(3) == 0, r;
		size_t len;

		if (spm) {
			vb_init(&b, "llama", NULL);
			b.v.scores = calloc(b.cap_t, sizeof(float));
			for (int i = 0; i < 200; i++) {
				size_t l = 1 + rnd(6);

				for (size_t c = 0; c < l; c++)
					tok[c] = "ab \xe2\x96\x81<>|"[rnd(9)];
				tok[l] = 0;
				b.v.scores[b.v.n_tokens] = (float)rnd(100) - 50.0f;
				vb_token(&b, tok, (int32_t)(1 + rnd(6)));
			}
			b.v.add_space_prefix = (int)rnd(3) - 1;
		} else {
			byte_vocab(&b, pres[rnd(sizeof(pres) / sizeof(pres[0]))]);
			for (int i = 0; i < 300; i++) {
				uint32_t l = rnd(b.v.n_tokens), rr = rnd(b.v.n_tokens);
				char cat[256];

				if (strlen(b.v.tokens[l]) + strlen(b.v.tokens[rr]) > 40)
					continue;
				snprintf(cat, sizeof(cat), "%s%s", b.v.tokens[l], b.v.tokens[rr]);
				if (rnd(4))
					vb_token(&b, cat,
						 rnd(10) ? KVP_TOK_NORMAL : (int32_t)rnd(8));
				vb_merge(&b, b.v.tokens[l], b.v.tokens[rr]);
				if (!rnd(20)) /* malformed merges too */
					b.v.merges[b.v.n_merges++] = strdup(rnd(2) ? "nospace" :
										     " ");
			}
			vb_token(&b, "<|eot_id|>", KVP_TOK_CONTROL);
			vb_token(&b, "<|im_start|>", KVP_TOK_USER);
		}
		b.v.bos = rnd(2) ? (int64_t)rnd(b.v.n_tokens) : -1;
		b.v.eos = rnd(2) ? (int64_t)rnd(b.v.n_tokens) : -1;
		b.v.add_bos = (int)rnd(3) - 1;
		b.v.add_eos = (int)rnd(3) - 1;
		r = vb_load(&b.v, &buf, &g, &t, err, sizeof(err));
		assert_true(r == 0 || r == -ENOTSUP || r == -EBADMSG || r == -EINVAL);
		if (!r)
			fuzz_one(t);
		kvp_tokenizer_free(t);
		t = NULL;
		/* flip bytes in the metadata (the first 64 KiB) and load again */
		len = g->size;
		kvp_gguf_close(g);
		g = NULL;
		for (int f = 0; f < 8; f++) {
			uint8_t *p = buf;
			size_t lim = len < 65536 ? len : 65536;

			for (int k = 0; k < 4; k++)
				p[24 + rnd((uint32_t)(lim - 24))] ^= (uint8_t)(1u << rnd(8));
			if (kvp_gguf_parse(&g, buf, len, err, sizeof(err)))
				continue;
			if (!kvp_tokenizer_new_gguf(&t, g, 0, err, sizeof(err))) {
				fuzz_one(t);
				kvp_tokenizer_free(t);
				t = NULL;
			}
			kvp_gguf_close(g);
			g = NULL;
		}
		free(buf);
		{
			struct kvp_mkmodel_vocab *v = malloc(sizeof(*v));

			*v = b.v;
			kvp_mkmodel_vocab_free(v);
		}
	}
}

static void test_fuzz_chat(void **state)
{
	/*
	 * random template texts made of the families' markers, random conversations of
	 * random bytes and roles: detection and rendering never crash, a rendering is
	 * NUL-terminated at its length, and a refusal says why
	 */
	static const char *const marks[] = {
		"<|start_header_id|>",
		"Cutting Knowledge Date",
		"strftime_now",
		"<|im_start|>",
		"<|im_start|>system\\nHello \\' there<|im_end|>",
		"<|im_start|>system\n'",
		"<start_of_turn>",
		"System role not supported",
		"[INST]",
		"<<SYS>>",
		"[AVAILABLE_TOOLS]",
		"<|assistant|>",
		"<|end|>",
		"<|user|>",
		"eos_token",
		"'User: '",
		"Assistant:",
		"{% for %}",
		"\\",
	};
	char tmpl[512], content[8][64], err[256];

	for (int it = 0; it < 3000; it++) {
		struct kvp_chat_template t;
		struct kvp_chat_msg m[8];
		struct kvp_chat_opts o = { .bos = rnd(2) ? "<s>" : NULL,
					   .eos = rnd(2) ? "</s>" : NULL,
					   .date = rnd(2) ? "1 Jan 2025" : NULL,
					   .add_generation_prompt = rnd(2) };
		size_t tl = 0, n = rnd(8), len;
		char *out;
		int r;

		for (int k = rnd(6); k >= 0; k--) {
			const char *s = marks[rnd(sizeof(marks) / sizeof(marks[0]))];

			if (tl + strlen(s) < sizeof(tmpl)) {
				memcpy(tmpl + tl, s, strlen(s));
				tl += strlen(s);
			}
		}
		if (kvp_chat_template_detect(&t, tmpl, tl, err, sizeof(err))) {
			assert_non_null(strstr(err, "known:"));
			assert_int_equal(kvp_chat_template_named(&t,
								 kvp_chat_family_name(
									 rnd(KVP_CHAT__COUNT)),
								 NULL, 0),
					 0);
		}
		for (size_t i = 0; i < n; i++) {
			size_t l = rnd(64);

			for (size_t c = 0; c < l; c++)
				content[i][c] = (char)(rnd(4) ? " \t\n\xc2\xa0\xe3\x80\x80"
								"ab"[rnd(11)] :
								rnd(256));
			m[i] = (struct kvp_chat_msg){
				(enum kvp_chat_role)rnd(3), content[i], l, NULL, 0, NULL, 0
			};
		}
		r = kvp_chat_render(&out, &len, &t, m, n, &o, err, sizeof(err));
		if (r) {
			assert_int_equal(r, -EINVAL);
			assert_true(strlen(err) > 6);
			assert_null(out);
			continue;
		}
		assert_int_equal(out[len], 0);
		free(out);
	}
}

static void test_long_runs_are_bounded(void **state)
{
	/*
	 * long runs (256 KiB of spaces, of one letter, of digits, of newlines) go through every
	 * pre-tokenizer without a PCRE2 resource error; the meson timeout bounds their time
	 */
	static const char fill[] = { ' ', 'a', '7', '\n', '\xe4' };
	size_t len = 1 << 18;
	char *text = malloc(len);
	int32_t *ids = malloc((len + 2) * sizeof(int32_t));

	assert_true(text && ids);
	for (size_t p = 0; p < sizeof(pres) / sizeof(pres[0]) - 1; p++) {
		struct vb b;
		struct kvp_tokenizer *t = NULL;
		struct kvp_gguf *g = NULL;
		void *buf = NULL;
		char err[512];

		byte_vocab(&b, pres[p]);
		vb_merge(&b, "Ġ", "Ġ");
		vb_token(&b, "ĠĠ", KVP_TOK_NORMAL);
		assert_int_equal(vb_load(&b.v, &buf, &g, &t, err, sizeof(err)), 0);
		for (size_t f = 0; f < sizeof(fill); f++) {
			int k;

			if (f == 4) /* 中 repeated */
				for (size_t i = 0; i + 3 <= len; i += 3)
					memcpy(text + i, "\xe4\xb8\xad", 3);
			else
				memset(text, fill[f], len);
			k = kvp_tokenizer_encode(t, text, f == 4 ? len / 3 * 3 : len, ids, len + 2);
			assert_true(k > 0);
		}
		kvp_tokenizer_free(t);
		kvp_gguf_close(g);
		free(buf);
		{
			struct kvp_mkmodel_vocab *v = malloc(sizeof(*v));

			*v = b.v;
			kvp_mkmodel_vocab_free(v);
		}
	}
	free(text);
	free(ids);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pre_and_model_refused_by_name),
		cmocka_unit_test(test_merges_match_the_definition),
		cmocka_unit_test(test_lossless_and_streamed),
		cmocka_unit_test(test_spm_space_prefix_flag),
		cmocka_unit_test(test_fuzz_vocabularies_and_text),
		cmocka_unit_test(test_fuzz_chat),
		cmocka_unit_test(test_long_runs_are_bounded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
