/* SPDX-License-Identifier: MIT */
/*
 * fuzz_tokenize.c - the tokenizers (compute/text/tokenizer.h) on untrusted text and ids:
 * a SentencePiece vocabulary and a byte-level BPE one (GPT-2 byte characters, merges,
 * the llama-bpe pre-tokenizer, control tokens), built once.  The first byte picks the
 * vocabulary and the encode flags, the rest is the text: encoded, decoded again (for
 * valid UTF-8 without special tokens, decode(encode(s)) == s, as the header promises;
 * a U+2581 written in the text comes back from SentencePiece as a space),
 * and read as raw ids for the decoder and the UTF-8 stream.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "compute/gguf.h"
#include "compute/mkmodel.h"
#include "compute/mkvocab.h"
#include "compute/text/tokenizer.h"
#include "tests/lib/spmfix.h"

#include "fuzz.h"

static struct kvp_tokenizer *tok[2];

/* GPT-2's printable character for byte @b, as UTF-8 into @out (3 bytes). */
static void byte_char(unsigned int b, char *out)
{
	unsigned int cp = b;

	if (b <= 32 || (b >= 127 && b <= 160) || b == 173) {
		unsigned int k = 0;

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

static struct kvp_tokenizer *spm(void)
{
	static const char *const own[] = {
		"\xe2\x96\x81", "\xe2\x96\x81the", "\xe2\x96\x81hello", "he", "ll", "o",
		"\xc3\xa9",	"<|eot|>"
	};
	const size_t n = SPMFIX_BASE + sizeof(own) / sizeof(own[0]);
	static char bytes[256][8];
	const char *pieces[SPMFIX_BASE + 8];
	int32_t types[SPMFIX_BASE + 8];
	float scores[SPMFIX_BASE + 8] = { 0 };
	struct kvp_tokenizer *t = NULL;

	spmfix_base(bytes, pieces, types);
	for (size_t i = SPMFIX_BASE; i < n; i++) {
		pieces[i] = own[i - SPMFIX_BASE];
		types[i] = KVP_TOK_NORMAL;
		scores[i] = -(float)(i - SPMFIX_BASE);
	}
	types[n - 1] = KVP_TOK_CONTROL;
	if (kvp_tokenizer_build(&t, pieces, scores, types, (uint32_t)n, 1, 2, 0, 1))
		abort();
	return t;
}

static struct kvp_tokenizer *bpe(void)
{
	static const char *const merges[] = { "h e", "l l", "he ll", "Ġ t", "Ġt h", "Ġth e" };
	static const char *const words[] = { "he", "ll", "hell", "Ġt", "Ġth", "Ġthe" };
	char *tokens[256 + 6 + 2], chars[256][4];
	int32_t types[256 + 6 + 2];
	struct kvp_mkmodel_vocab v = {
		.model = "gpt2",
		.pre = "llama-bpe",
		.tokens = tokens,
		.types = types,
		.merges = (char **)merges,
		.n_merges = 6,
		.bos = 262,
		.eos = 263,
		.unk = -1,
		.eot = 263,
		.eom = -1,
		.pad = -1,
		.add_bos = 1,
		.add_eos = 0,
		.add_space_prefix = -1,
	};
	struct kvp_mkmodel_opts o;
	struct kvp_tokenizer *t = NULL;
	struct kvp_gguf *g = NULL;
	void *buf = NULL;
	size_t len;

	for (unsigned int b = 0; b < 256; b++) {
		byte_char(b, chars[b]);
		tokens[b] = chars[b];
		types[b] = KVP_TOK_NORMAL;
	}
	for (int i = 0; i < 6; i++) {
		tokens[256 + i] = (char *)words[i];
		types[256 + i] = KVP_TOK_NORMAL;
	}
	tokens[262] = "<|begin_of_text|>";
	tokens[263] = "<|eot_id|>";
	types[262] = types[263] = KVP_TOK_CONTROL;
	v.n_tokens = 264;
	if (kvp_mkmodel_preset(&o, "tiny"))
		abort();
	o.n_embd = 8;
	o.n_heads = 2;
	o.n_kv_heads = 1;
	o.n_ff = 8;
	o.n_layers = 1;
	o.vocab = &v;
	if (kvp_mkmodel_write_mem(&buf, &len, &o, NULL, 0) ||
	    kvp_gguf_parse(&g, buf, len, NULL, 0) || kvp_tokenizer_new_gguf(&t, g, 0, NULL, 0))
		abort();
	kvp_gguf_close(g);
	free(buf);
	return t;
}

static bool utf8_ok(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned int c = s[i], k, cp;

		if (c < 0x80) {
			if (!c)
				return false; /* NUL: a text the callers never pass */
			i++;
			continue;
		}
		k = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc2 ? 1 : 0;
		if (!k || c > 0xf4 || i + k >= n)
			return false;
		cp = c & (0x3f >> k);
		for (unsigned int j = 1; j <= k; j++) {
			if ((s[i + j] & 0xc0) != 0x80)
				return false;
			cp = cp << 6 | (s[i + j] & 0x3f);
		}
		if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += k + 1;
	}
	return true;
}

/*
 * Whether @out (@m bytes, decoded) is @text (@len): SentencePiece reads a U+2581
 * written in the text as the space it stands for (as the reference engines do), so
 * under tok[0] each one in @text comes back a space.
 */
static bool same_text(const struct kvp_tokenizer *t, const char *out, size_t m, const char *text,
		      size_t len)
{
	size_t j = 0;

	if (t != tok[0])
		return m == len && !memcmp(out, text, len);
	for (size_t i = 0; i < len; j++) {
		char c = text[i];

		if (len - i >= 3 && !memcmp(text + i, "\xe2\x96\x81", 3)) {
			c = ' ';
			i += 3;
		} else {
			i++;
		}
		if (j >= m || out[j] != c)
			return false;
	}
	return j == m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct kvp_tokenizer *t;
	struct kvp_utf8_stream us = { 0 };
	unsigned int flags;
	const char *text;
	int32_t *ids, *raw;
	char *out;
	size_t len, cap, n_raw;
	int n;

	if (!tok[0]) {
		tok[0] = spm();
		tok[1] = bpe();
	}
	if (!size)
		return 0;
	t = tok[data[0] & 1];
	flags = (data[0] >> 1) & 0xf;
	text = (const char *)data + 1;
	len = size - 1;
	cap = 3 * len + 4;
	ids = malloc(cap * sizeof(*ids));
	out = malloc(4 * len + 16);
	if (!ids || !out)
		abort();
	n = kvp_tokenizer_encode_flags(t, text, len, flags, ids, cap);
	if (n > (int)cap)
		__builtin_trap(); /* the header's bound on ids per byte */
	if (n >= 0) {
		long m = kvp_tokenizer_decode(t, ids, (size_t)n, 0, out, 4 * len + 16);

		if (m < 0)
			__builtin_trap(); /* encode gave an id decode refuses */
		if (!(flags & (KVP_TOK_PARSE_SPECIAL | KVP_TOK_CONTINUE)) &&
		    utf8_ok((const uint8_t *)text, len) && !same_text(t, out, (size_t)m, text, len))
			__builtin_trap(); /* decode(encode(s)) == s */
	}
	/* the same bytes as ids: any int32, out of range ones refused */
	n_raw = len / 4;
	raw = malloc((n_raw ? n_raw : 1) * sizeof(*raw));
	if (!raw)
		abort();
	memcpy(raw, text, n_raw * 4);
	for (size_t i = 0; i < n_raw; i++)
		raw[i] = (int32_t)((uint32_t)raw[i] % (kvp_tokenizer_n_vocab(t) + 2)) - 1;
	kvp_tokenizer_decode(t, raw, n_raw, flags & 3, out, len);
	for (size_t i = 0; i < n_raw; i++) {
		size_t pl;
		const char *p = kvp_tokenizer_piece(t, raw[i], &pl);
		char *u = malloc(3 * pl + 3);

		if (!u)
			abort();
		if (p && kvp_utf8_feed(&us, p, pl, u, 3 * pl + 3) < 0)
			__builtin_trap();
		kvp_tokenizer_token_text(t, raw[i], &pl);
		kvp_tokenizer_type(t, raw[i]);
		kvp_tokenizer_is_eog(t, raw[i]);
		free(u);
	}
	{
		char u[3];

		kvp_utf8_flush(&us, u, sizeof(u));
	}
	free(raw);
	free(ids);
	free(out);
	return 0;
}
