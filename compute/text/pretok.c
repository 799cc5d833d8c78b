/* SPDX-License-Identifier: MIT */
/*
 * pretok.c - pre-tokenizers of byte-level BPE vocabularies, one per tokenizer.ggml.pre
 * value, as sequences of regular expressions run by PCRE2 (UTF + UCP, JIT-compiled).
 *
 * The expressions are the ones the model families publish with their tokenizers, with
 * one deliberate change: "\s" is spelled out as the Unicode White_Space property (the
 * 25 characters below).  PCRE2's \s under UCP also takes U+180E, and JavaScript's
 * takes U+FEFF and not U+0085; the reference tokenizers use White_Space, so that is
 * what is written here, identically for every engine.  "(?i:'s|...)" is written with
 * explicit letter pairs for the same reason: a caseless match would also take "'ſ"
 * (U+017F folds to s), which the references do not.
 *
 * A pre-tokenizer is immutable once compiled; compiled PCRE2 code may be matched from
 * any number of threads, each with its own match data (struct kvp_pretok_state).
 */
#include "compute/text/pretok.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "compute/text/vocab.h"

#define MAX_RE 6

/* Unicode White_Space, for use inside a character class */
#define WS \
	"\\t\\n\\x0b\\f\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}" \
	"\\x{202f}\\x{205f}\\x{3000}"
#define S "[" WS "]"
#define NS "[^" WS "]"

/* GPT-2's expression, shared by many families */
#define RE_GPT2 \
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|" S "+(?!" NS ")"
#define RE_CONTRACTIONS_ANYCASE "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
/* Llama 3: digits in threes; Qwen2: one digit at a time */
#define RE_LLAMA3_LIKE(digits) \
	RE_CONTRACTIONS_ANYCASE "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" digits "| ?[^" WS \
				"\\p{L}\\p{N}]+[\\r\\n]*|" S "*[\\r\\n]+|" S "+(?!" NS ")|" S "+"
#define RE_CJK "[\\x{4e00}-\\x{9fa5}\\x{0800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+"

static const char *const re_default[] = {
	"[\\p{P}\\$\\+<=>\\^~\\|]+",
	RE_GPT2,
	"\\p{N}+",
	"[0-9][0-9][0-9]",
};
static const char *const re_llama3[] = { RE_LLAMA3_LIKE("\\p{N}{1,3}") };
static const char *const re_qwen2[] = { RE_LLAMA3_LIKE("\\p{N}") };
static const char *const re_gpt2[] = { RE_GPT2 };
static const char *const re_starcoder[] = { "\\p{N}", RE_GPT2 };
static const char *const re_falcon[] = {
	"[\\p{P}\\$\\+<=>\\^~\\|`]+",
	RE_GPT2,
	"[0-9][0-9][0-9]",
};
static const char *const re_deepseek_llm[] = {
	"[\\r\\n]",
	S "?[A-Za-z\\x{b5}\\x{c0}-\\x{d6}\\x{d8}-\\x{f6}\\x{f8}-\\x{1ba}\\x{1bc}-\\x{1bf}"
	  "\\x{1c4}-\\x{293}\\x{295}-\\x{2af}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37b}-\\x{37d}"
	  "\\x{37f}\\x{386}\\x{388}-\\x{38a}\\x{38c}\\x{38e}-\\x{3a1}\\x{3a3}-\\x{3f5}"
	  "\\x{3f7}-\\x{481}\\x{48a}-\\x{52f}\\x{531}-\\x{556}\\x{10a0}-\\x{10c5}"
	  "\\x{13a0}-\\x{13f5}\\x{13f8}-\\x{13fd}\\x{1c90}-\\x{1cba}\\x{1cbd}-\\x{1cbf}"
	  "\\x{1d00}-\\x{1d2b}\\x{1d6b}-\\x{1d77}\\x{1d79}-\\x{1d9a}\\x{1e00}-\\x{1f15}"
	  "\\x{1f18}-\\x{1f1d}\\x{1f20}-\\x{1f45}\\x{1f48}-\\x{1f4d}\\x{1f50}-\\x{1f57}"
	  "\\x{1f59}\\x{1f5b}\\x{1f5d}\\x{1f5f}-\\x{1f7d}\\x{1f80}-\\x{1fb4}\\x{1fb6}-\\x{1fbc}"
	  "\\x{1fbe}\\x{1fc2}-\\x{1fc4}\\x{1fc6}-\\x{1fcc}\\x{1fd0}-\\x{1fd3}\\x{1fd6}-\\x{1fdb}"
	  "\\x{1fe0}-\\x{1fec}\\x{1ff2}-\\x{1ff4}\\x{1ff6}-\\x{1ffc}\\x{2102}\\x{2107}"
	  "\\x{210a}-\\x{2113}\\x{2115}\\x{2119}-\\x{211d}\\x{2124}\\x{2126}\\x{2128}"
	  "\\x{212a}-\\x{212d}\\x{212f}-\\x{2134}\\x{2139}\\x{213c}-\\x{213f}\\x{2145}-\\x{2149}"
	  "\\x{214e}\\x{2183}\\x{2184}\\x{2c00}-\\x{2c7b}\\x{2c7e}-\\x{2ce4}\\x{2ceb}-\\x{2cee}"
	  "\\x{2cf2}\\x{2cf3}\\x{a640}-\\x{a66d}\\x{a680}-\\x{a69b}\\x{a722}-\\x{a76f}"
	  "\\x{a771}-\\x{a787}\\x{a78b}-\\x{a78e}\\x{ab70}-\\x{abbf}\\x{fb00}-\\x{fb06}"
	  "\\x{fb13}-\\x{fb17}\\x{ff21}-\\x{ff3a}\\x{ff41}-\\x{ff5a}\\x{10400}-\\x{1044f}"
	  "\\x{104b0}-\\x{104d3}\\x{104d8}-\\x{104fb}\\x{10c80}-\\x{10cb2}\\x{10cc0}-\\x{10cf2}"
	  "\\x{118a0}-\\x{118df}\\x{1e900}-\\x{1e943}]+",
	S "?[!-/:-~\\x{ff01}-\\x{ff0f}\\x{ff1a}-\\x{ff5e}\\x{2018}-\\x{201f}\\x{3000}-\\x{3002}]+",
	S "+$",
	RE_CJK,
	"\\p{N}+",
};
static const char *const re_deepseek_coder[] = {
	"[\\r\\n]", S "?\\p{L}+", S "?\\p{P}+", RE_CJK, "\\p{N}",
};

#define DEF(nm, re, im, bos) \
	{ \
		nm, re, sizeof(re) / sizeof(re[0]), im, bos \
	}

/* name, expressions, ignore_merges, adds BOS by default */
static const struct pre_def {
	const char *name;
	const char *const *re;
	unsigned int n_re;
	bool ignore_merges;
	bool add_bos;
} defs[] = {
	DEF("default", re_default, false, false),
	DEF("llama-bpe", re_llama3, true, true),
	DEF("llama3", re_llama3, true, true),
	DEF("dbrx", re_llama3, false, false),
	DEF("smaug-bpe", re_llama3, false, false),
	DEF("qwen2", re_qwen2, false, false),
	DEF("stablelm2", re_qwen2, false, false),
	DEF("deepseek-r1-qwen", re_qwen2, false, false),
	DEF("gpt-2", re_gpt2, false, false),
	DEF("mpt", re_gpt2, false, false),
	DEF("olmo", re_gpt2, false, false),
	DEF("gpt-neox", re_gpt2, false, false),
	DEF("starcoder", re_starcoder, false, false),
	DEF("refact", re_starcoder, false, false),
	DEF("smollm", re_starcoder, false, false),
	DEF("command-r", re_starcoder, false, false),
	DEF("falcon", re_falcon, false, false),
	DEF("deepseek-llm", re_deepseek_llm, false, false),
	DEF("deepseek-coder", re_deepseek_coder, false, false),
};

#define N_DEFS (sizeof(defs) / sizeof(defs[0]))

struct kvp_pretok {
	const struct pre_def *def;
	pcre2_code *code[MAX_RE];
};

struct kvp_pretok_state {
	pcre2_match_data *md;
	pcre2_match_context *mctx;
	pcre2_jit_stack *jit;
};

const char *kvp_pretok_names(void)
{
	return "default, llama-bpe, llama3, dbrx, smaug-bpe, qwen2, stablelm2, deepseek-r1-qwen, "
	       "gpt-2, mpt, olmo, gpt-neox, starcoder, refact, smollm, command-r, falcon, "
	       "deepseek-llm, deepseek-coder";
}

int kvp_pretok_new(struct kvp_pretok **out, const char *name, size_t len, char *err, size_t errlen)
{
	const struct pre_def *def = NULL;
	struct kvp_pretok *p;

	*out = NULL;
	if (!name) {
		def = &defs[0];
	} else {
		for (size_t i = 0; i < N_DEFS && !def; i++)
			if (strlen(defs[i].name) == len && !memcmp(defs[i].name, name, len))
				def = &defs[i];
	}
	if (!def) {
		if (err && errlen)
			snprintf(
				err, errlen,
				"tokenizer: tokenizer.ggml.pre '%.*s' is not supported (known: %s)",
				(int)(len > 64 ? 64 : len), name, kvp_pretok_names());
		return -ENOTSUP;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->def = def;
	for (unsigned int i = 0; i < def->n_re; i++) {
		int ec;
		PCRE2_SIZE eo;

		p->code[i] = pcre2_compile((PCRE2_SPTR)def->re[i], PCRE2_ZERO_TERMINATED,
					   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &ec, &eo,
					   NULL);
		if (!p->code[i]) {
			PCRE2_UCHAR msg[128];

			pcre2_get_error_message(ec, msg, sizeof(msg));
			if (err && errlen)
				snprintf(err, errlen,
					 "tokenizer: pre-tokenizer '%s' expression %u at %zu: %s",
					 def->name, i, (size_t)eo, (const char *)msg);
			kvp_pretok_free(p);
			return ec == PCRE2_ERROR_NOMEMORY ? -ENOMEM : -EINVAL;
		}
		/* JIT is an optimisation: without it (no JIT on this CPU) the interpreter runs */
		pcre2_jit_compile(p->code[i], PCRE2_JIT_COMPLETE);
	}
	*out = p;
	return 0;
}

void kvp_pretok_free(struct kvp_pretok *p)
{
	if (!p)
		return;
	for (unsigned int i = 0; i < MAX_RE; i++)
		pcre2_code_free(p->code[i]);
	free(p);
}

const char *kvp_pretok_name(const struct kvp_pretok *p)
{
	return p->def->name;
}
bool kvp_pretok_ignore_merges(const struct kvp_pretok *p)
{
	return p->def->ignore_merges;
}
bool kvp_pretok_adds_bos(const struct kvp_pretok *p)
{
	return p->def->add_bos;
}

int kvp_pretok_state_new(struct kvp_pretok_state **out, const struct kvp_pretok *p)
{
	struct kvp_pretok_state *s = calloc(1, sizeof(*s));

	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->md = pcre2_match_data_create(1, NULL);
	s->mctx = pcre2_match_context_create(NULL);
	/*
	 * The default JIT stack is 32 KiB on the machine stack; a private one that may grow
	 * to 1 MiB keeps long whitespace or letter runs from failing a match.
	 */
	s->jit = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
	if (!s->md || !s->mctx || !s->jit) {
		kvp_pretok_state_free(s);
		return -ENOMEM;
	}
	pcre2_jit_stack_assign(s->mctx, NULL, s->jit);
	(void)p;
	*out = s;
	return 0;
}

void kvp_pretok_state_free(struct kvp_pretok_state *s)
{
	if (!s)
		return;
	pcre2_match_data_free(s->md);
	pcre2_match_context_free(s->mctx);
	pcre2_jit_stack_free(s->jit);
	free(s);
}

/* Cut text[0..len) (valid UTF-8) with expression @level and hand the pieces down. */
static int split_level(const struct kvp_pretok *p, struct kvp_pretok_state *s, unsigned int level,
		       const char *text, size_t len, kvp_pretok_word_fn *fn, void *ctx)
{
	size_t gap = 0, at = 0;
	int r;

	if (level == p->def->n_re)
		return fn(ctx, text, len);
	while (at < len) {
		int rc = pcre2_match(p->code[level], (PCRE2_SPTR)text, len, at, PCRE2_NO_UTF_CHECK,
				     s->md, s->mctx);
		PCRE2_SIZE *ov;
		size_t ms, me;

		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0)
			return -EIO;
		/* copied out: the levels below reuse the same match data */
		ov = pcre2_get_ovector_pointer(s->md);
		ms = ov[0];
		me = ov[1];
		if (me <= ms) { /* an empty match cuts nothing: look again one character on */
			size_t cl = kvp_utf8_char_len((const uint8_t *)text + ms, len - ms);

			at = ms + (cl ? cl : 1);
			continue;
		}
		if (ms > gap && (r = split_level(p, s, level + 1, text + gap, ms - gap, fn, ctx)))
			return r;
		if ((r = split_level(p, s, level + 1, text + ms, me - ms, fn, ctx)))
			return r;
		gap = at = me;
	}
	if (gap < len)
		return split_level(p, s, level + 1, text + gap, len - gap, fn, ctx);
	return 0;
}

int kvp_pretok_split(const struct kvp_pretok *p, struct kvp_pretok_state *s, const char *text,
		     size_t len, kvp_pretok_word_fn *fn, void *ctx)
{
	size_t run = 0, i = 0;
	int r;

	/* valid runs go to the expressions; each invalid byte is a word of its own */
	while (i < len) {
		size_t cl = kvp_utf8_char_len((const uint8_t *)text + i, len - i);

		if (cl) {
			i += cl;
			continue;
		}
		if (i > run && (r = split_level(p, s, 0, text + run, i - run, fn, ctx)))
			return r;
		if ((r = fn(ctx, text + i, 1)))
			return r;
		run = ++i;
	}
	if (len > run)
		return split_level(p, s, 0, text + run, len - run, fn, ctx);
	return 0;
}
