/* SPDX-License-Identifier: MIT */
/*
 * chat.c - chat templates by family: recognise a tokenizer.chat_template from marker
 * strings, render conversations with built-in formatters.
 *
 * Each formatter is the template's logic written out, including what the templates
 * do that is easy to miss: Llama 3 and Gemma trim each message, Llama 2 strips them;
 * Llama 2, Mistral and Gemma refuse conversations whose roles do not alternate (and
 * Mistral and Gemma any system turn) with the template's own message; Phi-3 ends with
 * EOS when no generation prompt is asked for and skips an empty system turn; Zephyr
 * ends each turn with EOS and a newline.  Recognition is conservative: a template with
 * a marker of a variant not written here (a Mistral [AVAILABLE_TOOLS] template other
 * than v0.3's and Nemo's, a Gemma without its "System role not supported") is unknown
 * rather than rendered wrong.
 * No state; any thread.
 */
#include "compute/text/chat.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const names[KVP_CHAT__COUNT] = {
	[KVP_CHAT_LLAMA3] = "llama3",	  [KVP_CHAT_LLAMA31] = "llama3.1",
	[KVP_CHAT_LLAMA32] = "llama3.2",  [KVP_CHAT_CHATML] = "chatml",
	[KVP_CHAT_LLAMA2] = "llama2",	  [KVP_CHAT_MISTRAL] = "mistral",
	[KVP_CHAT_PHI3] = "phi3",	  [KVP_CHAT_GEMMA] = "gemma",
	[KVP_CHAT_ZEPHYR] = "zephyr",	  [KVP_CHAT_DEEPSEEK] = "deepseek",
	[KVP_CHAT_QWEN3] = "qwen3",	  [KVP_CHAT_MISTRAL3] = "mistral-v3",
	[KVP_CHAT_NEMO] = "mistral-nemo",
};

static const char *const role_names[] = {
	[KVP_CHAT_SYSTEM] = "system",	    [KVP_CHAT_USER] = "user",
	[KVP_CHAT_ASSISTANT] = "assistant", [KVP_CHAT_TOOL] = "tool",
	[KVP_CHAT_TOOL_CALL] = "assistant",
};

#define ALTERNATE "Conversation roles must alternate user/assistant/user/assistant/..."

const char *kvp_chat_family_name(enum kvp_chat_family f)
{
	return (unsigned int)f < KVP_CHAT__COUNT ? names[f] : "?";
}

const char *kvp_chat_names(void)
{
	return "llama3, llama3.1, llama3.2, chatml, llama2, mistral, phi3, gemma, zephyr, deepseek, "
	       "qwen3, mistral-v3, mistral-nemo";
}

bool kvp_chat_writes_bos(const struct kvp_chat_template *t)
{
	return t->family != KVP_CHAT_CHATML && t->family != KVP_CHAT_QWEN3 &&
	       t->family != KVP_CHAT_PHI3 && t->family != KVP_CHAT_ZEPHYR;
}

static bool has(const char *src, size_t len, const char *needle)
{
	return memmem(src, len, needle, strlen(needle)) != NULL;
}

/*
 * ChatML's default system prompt: a literal "<|im_start|>system\n<text><|im_end|>" in
 * the template (the \n written as an escape or as a newline), where <text> is not the
 * start of an expression (a quote closing the literal).
 */
static void chatml_default_system(struct kvp_chat_template *t, const char *src, size_t len)
{
	static const char marker[] = "<|im_start|>system";
	const char *p = src, *end = src + len;

	while ((p = memmem(p, (size_t)(end - p), marker, sizeof(marker) - 1))) {
		const char *q = p + sizeof(marker) - 1, *e;
		size_t o = 0;

		p = q;
		if (end - q >= 2 && q[0] == '\\' && q[1] == 'n')
			q += 2;
		else if (q < end && q[0] == '\n')
			q++;
		else
			continue;
		if (q >= end || *q == '\'' || *q == '"')
			continue;
		e = memmem(q, (size_t)(end - q), "<|im_end|>", 10);
		if (!e)
			continue;
		for (; q < e && o + 1 < sizeof(t->default_system); q++) {
			if (*q == '\\' && q + 1 < e) { /* Jinja string escapes */
				q++;
				t->default_system[o++] = *q == 'n' ? '\n' : *q == 't' ? '\t' : *q;
			} else {
				t->default_system[o++] = *q;
			}
		}
		t->default_system[o] = 0;
		return;
	}
}

/*
 * Whether the template is one whose tool rendering is written here: Llama 3.1/3.2's
 * (tools in the first user message, {"name", "parameters"} calls, "ipython" results)
 * and Qwen2.5's (a "# Tools" system turn with its default system prompt,
 * <tool_call>/<tool_response>).  Qwen3's, with no default prompt and <think>, is its
 * own family.
 */
static bool tools_variant(const struct kvp_chat_template *t, const char *src, size_t len)
{
	if (t->family == KVP_CHAT_LLAMA31 || t->family == KVP_CHAT_LLAMA32)
		return has(src, len, "tools_in_user_message") &&
		       has(src, len, "Environment: ipython") && has(src, len, "\"parameters\": ");
	if (t->family == KVP_CHAT_QWEN3 || t->family == KVP_CHAT_MISTRAL3 ||
	    t->family == KVP_CHAT_NEMO)
		return true; /* recognised only with their tool rendering (mistral_variant()) */
	if (t->family == KVP_CHAT_CHATML)
		return t->default_system[0] && has(src, len, "<tools></tools>") &&
		       has(src, len, "<tool_call>\\n{\"name\": \"") &&
		       has(src, len, "<tool_response>") && !has(src, len, "<think>");
	return false;
}

/*
 * Mistral v0.3 and Nemo (tokenizer v3, [AVAILABLE_TOOLS]): the system turn goes into the
 * last message when that is the user's, and the two differ in the spaces written after
 * [INST] and before an assistant turn (trimmed in v0.3, as is in Nemo).  Anything else
 * (Mistral Large's, with no trim, or later [SYSTEM_PROMPT] ones) is not recognised.
 */
static int mistral_variant(const char *src, size_t len)
{
	if (has(src, len, "\"[INST] \" + system_message") &&
	    has(src, len, "\"[INST] \" + message[\"content\"] + \"[/INST]\"") &&
	    has(src, len, "{{- \" \" + message[\"content\"]|trim + eos_token"))
		return KVP_CHAT_MISTRAL3;
	if (has(src, len, "\"[INST]\" + system_message") &&
	    has(src, len, "\"[INST]\" + message[\"content\"] + \"[/INST]\"") &&
	    has(src, len, "{{- message[\"content\"] + eos_token"))
		return KVP_CHAT_NEMO;
	return -1;
}

int kvp_chat_template_detect(struct kvp_chat_template *out, const char *src, size_t len, char *err,
			     size_t errlen)
{
	int f = -1;

	memset(out, 0, sizeof(*out));
	if (has(src, len, "<|start_header_id|>")) {
		if (!has(src, len, "Cutting Knowledge Date"))
			f = KVP_CHAT_LLAMA3;
		else
			f = has(src, len, "strftime_now") ? KVP_CHAT_LLAMA32 : KVP_CHAT_LLAMA31;
	} else if (has(src, len, "<|im_start|>") && has(src, len, "last_query_index") &&
		   has(src, len, "reasoning_content") && has(src, len, "enable_thinking") &&
		   has(src, len, "<tools></tools>")) {
		f = KVP_CHAT_QWEN3;
	} else if (has(src, len, "<|im_start|>")) {
		f = KVP_CHAT_CHATML;
		chatml_default_system(out, src, len);
	} else if (has(src, len, "<start_of_turn>")) {
		if (has(src, len, "System role not supported"))
			f = KVP_CHAT_GEMMA;
	} else if (has(src, len, "[INST]")) {
		if (has(src, len, "<<SYS>>"))
			f = KVP_CHAT_LLAMA2;
		else if (!has(src, len, "[AVAILABLE_TOOLS]") && !has(src, len, "[SYSTEM_PROMPT]"))
			f = KVP_CHAT_MISTRAL;
		else if (has(src, len, "[AVAILABLE_TOOLS]") &&
			 has(src, len, "loop.last and system_message"))
			f = mistral_variant(src, len);
	} else if (has(src, len, "<|assistant|>") && has(src, len, "<|end|>")) {
		f = KVP_CHAT_PHI3;
	} else if (has(src, len, "<|user|>") && has(src, len, "eos_token")) {
		f = KVP_CHAT_ZEPHYR;
	} else if (has(src, len, "'User: '") && has(src, len, "Assistant:")) {
		f = KVP_CHAT_DEEPSEEK;
	}
	if (f < 0) {
		if (err && errlen)
			snprintf(
				err, errlen,
				"chat: the model's chat template is not one kvpool knows (known: %s); choose one by name",
				kvp_chat_names());
		return -ENOTSUP;
	}
	out->family = (enum kvp_chat_family)f;
	out->tools = tools_variant(out, src, len);
	return 0;
}

int kvp_chat_template_named(struct kvp_chat_template *out, const char *name, char *err,
			    size_t errlen)
{
	memset(out, 0, sizeof(*out));
	for (int f = 0; f < KVP_CHAT__COUNT; f++) {
		if (!strcmp(names[f], name)) {
			out->family = (enum kvp_chat_family)f;
			/* by name, the families' tool-rendering templates (Llama 3.1/3.2, Qwen3,
			 * Mistral v0.3 / Nemo) */
			out->tools = f == KVP_CHAT_LLAMA31 || f == KVP_CHAT_LLAMA32 ||
				     f == KVP_CHAT_QWEN3 || f == KVP_CHAT_MISTRAL3 ||
				     f == KVP_CHAT_NEMO;
			return 0;
		}
	}
	if (err && errlen)
		snprintf(err, errlen, "chat: unknown chat template '%s' (known: %s)", name,
			 kvp_chat_names());
	return -ENOTSUP;
}

/* A growing output string. */
struct buf {
	char *p;
	size_t len, cap;
	int err;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (b->err)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p) {
			b->err = -ENOMEM;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = 0;
}

static void puts_(struct buf *b, const char *s)
{
	if (s)
		put(b, s, strlen(s));
}

/* Whitespace as Python's str.strip() (Jinja's trim) sees it: Unicode White_Space and
 * the four ASCII separators; returns its byte length at @p, or 0. */
static size_t space_at(const uint8_t *p, size_t left)
{
	if (*p == ' ' || (*p >= '\t' && *p <= '\r') || (*p >= 0x1c && *p <= 0x1f))
		return 1;
	if (left >= 2 && p[0] == 0xc2 && (p[1] == 0x85 || p[1] == 0xa0))
		return 2;
	if (left >= 3 && p[0] == 0xe1 && p[1] == 0x9a && p[2] == 0x80) /* U+1680 */
		return 3;
	if (left >= 3 && p[0] == 0xe2 && p[1] == 0x80 &&
	    (p[2] <= 0x8a || p[2] == 0xa8 || p[2] == 0xa9 || p[2] == 0xaf))
		return 3;
	if (left >= 3 && p[0] == 0xe2 && p[1] == 0x81 && p[2] == 0x9f) /* U+205F */
		return 3;
	if (left >= 3 && p[0] == 0xe3 && p[1] == 0x80 && p[2] == 0x80) /* U+3000 */
		return 3;
	return 0;
}

/* The message's content without leading and trailing whitespace. */
static void put_trimmed(struct buf *b, const struct kvp_chat_msg *m)
{
	const uint8_t *s = (const uint8_t *)m->content, *e = s + m->len;
	size_t k;

	while (s < e && (k = space_at(s, (size_t)(e - s))))
		s += k;
	while (e > s) {
		/* step back over one character and see whether it is whitespace */
		const uint8_t *c = e - 1;

		while (c > s && (*c & 0xc0) == 0x80 && e - c < 4)
			c--;
		k = space_at(c, (size_t)(e - c));
		if (k != (size_t)(e - c))
			break;
		e = c;
	}
	put(b, (const char *)s, (size_t)(e - s));
}

static void put_msg(struct buf *b, const struct kvp_chat_msg *m)
{
	put(b, m->content, m->len);
}

/*
 * tojson as @huggingface/jinja writes it (see struct kvp_chat_opts), from JSON text:
 * one recursive pass that checks the text and writes the value again.  @b NULL: check
 * and skip only.  Returns the end of the value, or NULL when the text is not JSON.
 */
#define JSON_DEPTH_MAX 64

static const char *json_ws(const char *p, const char *e)
{
	while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

static int hex4(const char *p, const char *e)
{
	int v = 0;

	if (e - p < 4)
		return -1;
	for (int i = 0; i < 4; i++) {
		int c = p[i], d = c >= '0' && c <= '9' ? c - '0' :
				  c >= 'a' && c <= 'f' ? c - 'a' + 10 :
				  c >= 'A' && c <= 'F' ? c - 'A' + 10 :
							 -1;

		if (d < 0)
			return -1;
		v = v << 4 | d;
	}
	return v;
}

static void put_u(struct buf *b, unsigned int u)
{
	char t[16];

	snprintf(t, sizeof(t), "\\u%04x", u);
	puts_(b, t);
}

static void put_cp(struct buf *b, unsigned int c)
{
	char t[4];
	size_t n;

	if (c < 0x80) {
		t[0] = (char)c;
		n = 1;
	} else if (c < 0x800) {
		t[0] = (char)(0xc0 | c >> 6);
		t[1] = (char)(0x80 | (c & 0x3f));
		n = 2;
	} else if (c < 0x10000) {
		t[0] = (char)(0xe0 | c >> 12);
		t[1] = (char)(0x80 | (c >> 6 & 0x3f));
		t[2] = (char)(0x80 | (c & 0x3f));
		n = 3;
	} else {
		t[0] = (char)(0xf0 | c >> 18);
		t[1] = (char)(0x80 | (c >> 12 & 0x3f));
		t[2] = (char)(0x80 | (c >> 6 & 0x3f));
		t[3] = (char)(0x80 | (c & 0x3f));
		n = 4;
	}
	put(b, t, n);
}

/* One character of a string as JSON.stringify writes it. */
static void put_jchar(struct buf *b, unsigned int c)
{
	static const char esc[] = {
		['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't'
	};
	char t[2] = { '\\', 0 };

	if (c == '"' || c == '\\') {
		t[1] = (char)c;
		put(b, t, 2);
	} else if (c < 0x20 && c < sizeof(esc) && esc[c]) {
		t[1] = esc[c];
		put(b, t, 2);
	} else if (c < 0x20 || (c >= 0xd800 && c < 0xe000)) { /* a lone surrogate too */
		put_u(b, c);
	} else {
		put_cp(b, c);
	}
}

/* A string of raw UTF-8 written as a JSON string literal. */
static void put_jstring(struct buf *b, const char *s, size_t n)
{
	const char *e = s + n;

	puts_(b, "\"");
	while (s < e) {
		const char *run = s;

		while (s < e && *s != '"' && *s != '\\' && (unsigned char)*s >= 0x20)
			s++;
		put(b, run, (size_t)(s - run));
		if (s < e)
			put_jchar(b, (unsigned char)*s++);
	}
	puts_(b, "\"");
}

/*
 * A JSON string at @p: written to @b as JSON.stringify would (@raw false) or as the
 * characters it holds (@raw true: what a template's '"' + val + '"' writes; a lone
 * surrogate, which UTF-8 cannot hold, as U+FFFD as Buffer.from() writes it).
 */
static const char *json_string_as(struct buf *b, const char *p, const char *e, bool raw)
{
	if (p >= e || *p != '"')
		return NULL;
	if (b && !raw)
		puts_(b, "\"");
	for (p++; p < e && *p != '"';) {
		const char *run = p;

		while (p < e && *p != '"' && *p != '\\') {
			if ((unsigned char)*p < 0x20)
				return NULL;
			p++;
		}
		if (b)
			put(b, run, (size_t)(p - run));
		if (p < e && *p == '\\') {
			int c, lo;

			if (++p >= e)
				return NULL;
			switch (*p) {
			case '"':
			case '\\':
			case '/':
				c = *p;
				break;
			case 'b':
				c = '\b';
				break;
			case 'f':
				c = '\f';
				break;
			case 'n':
				c = '\n';
				break;
			case 'r':
				c = '\r';
				break;
			case 't':
				c = '\t';
				break;
			case 'u':
				c = hex4(p + 1, e);
				if (c < 0)
					return NULL;
				p += 4;
				if (c >= 0xd800 && c < 0xdc00 && e - p >= 7 && p[1] == '\\' &&
				    p[2] == 'u' && (lo = hex4(p + 3, e)) >= 0xdc00 && lo < 0xe000) {
					c = 0x10000 + ((c - 0xd800) << 10) + (lo - 0xdc00);
					p += 6;
				}
				break;
			default:
				return NULL;
			}
			p++;
			if (b && raw)
				put_cp(b, c >= 0xd800 && c < 0xe000 ? 0xfffd : (unsigned int)c);
			else if (b)
				put_jchar(b, (unsigned int)c);
		}
	}
	if (p >= e)
		return NULL;
	if (b && !raw)
		puts_(b, "\"");
	return p + 1;
}

static const char *json_string(struct buf *b, const char *p, const char *e)
{
	return json_string_as(b, p, e, false);
}

/* A number as JavaScript's Number.prototype.toString writes it (JSON.stringify). */
static void put_jsnum(struct buf *b, double d)
{
	char t[40], digits[20];
	int k = 0, exp, n;

	if (!isfinite(d)) {
		puts_(b, "null");
		return;
	}
	if (d == 0) {
		puts_(b, "0");
		return;
	}
	if (d < 0) {
		puts_(b, "-");
		d = -d;
	}
	for (int p = 1; p <= 17; p++) { /* the shortest digits that read back as d */
		snprintf(t, sizeof(t), "%.*e", p - 1, d);
		if (strtod(t, NULL) == d)
			break;
	}
	for (const char *q = t; *q && *q != 'e'; q++)
		if (*q >= '0' && *q <= '9')
			digits[k++] = *q;
	while (k > 1 && digits[k - 1] == '0')
		k--;
	digits[k] = 0;
	exp = atoi(strchr(t, 'e') + 1);
	n = exp + 1;
	if (k <= n && n <= 21) {
		puts_(b, digits);
		for (int i = k; i < n; i++)
			puts_(b, "0");
	} else if (0 < n && n <= 21) {
		put(b, digits, (size_t)n);
		puts_(b, ".");
		puts_(b, digits + n);
	} else if (-6 < n && n <= 0) {
		puts_(b, "0.");
		for (int i = n; i < 0; i++)
			puts_(b, "0");
		puts_(b, digits);
	} else {
		put(b, digits, 1);
		if (k > 1) {
			puts_(b, ".");
			puts_(b, digits + 1);
		}
		snprintf(t, sizeof(t), "e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
		puts_(b, t);
	}
}

static const char *json_number(struct buf *b, const char *p, const char *e)
{
	const char *s = p;
	char t[400];

	if (p < e && *p == '-')
		p++;
	if (p < e && *p == '0')
		p++;
	else if (p < e && *p >= '1' && *p <= '9')
		while (p < e && *p >= '0' && *p <= '9')
			p++;
	else
		return NULL;
	if (p < e && *p == '.') {
		if (++p >= e || *p < '0' || *p > '9')
			return NULL;
		while (p < e && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < e && (*p == 'e' || *p == 'E')) {
		if (++p < e && (*p == '+' || *p == '-'))
			p++;
		if (p >= e || *p < '0' || *p > '9')
			return NULL;
		while (p < e && *p >= '0' && *p <= '9')
			p++;
	}
	if (b) {
		size_t n = (size_t)(p - s) < sizeof(t) - 1 ? (size_t)(p - s) : sizeof(t) - 1;

		memcpy(t, s, n);
		t[n] = 0;
		put_jsnum(b, strtod(t, NULL));
	}
	return p;
}

static void put_pad(struct buf *b, int indent, int depth)
{
	puts_(b, "\n");
	for (int i = 0; i < indent * depth; i++)
		puts_(b, " ");
}

static const char *json_value(struct buf *b, const char *p, const char *e, int indent, int depth)
{
	p = json_ws(p, e);
	if (p >= e || depth > JSON_DEPTH_MAX)
		return NULL;
	if (*p == '"')
		return json_string(b, p, e);
	if (*p == '{' || *p == '[') {
		char close = *p == '{' ? '}' : ']';
		bool obj = *p == '{';
		int n = 0;

		if (b)
			put(b, p, 1);
		p = json_ws(p + 1, e);
		while (p < e && *p != close) {
			if (n && *p++ != ',')
				return NULL;
			if (b && n)
				puts_(b, indent ? "," : ", ");
			if (b && indent)
				put_pad(b, indent, depth + 1);
			if (obj) {
				p = json_string(b, json_ws(p, e), e);
				if (!p || (p = json_ws(p, e)) >= e || *p++ != ':')
					return NULL;
				if (b)
					puts_(b, ": ");
			}
			p = json_value(b, p, e, indent, depth + 1);
			if (!p)
				return NULL;
			p = json_ws(p, e);
			n++;
		}
		if (p >= e)
			return NULL;
		if (b && indent && n)
			put_pad(b, indent, depth);
		if (b)
			put(b, p, 1);
		return p + 1;
	}
	for (const char *const *w = (const char *const[]){ "true", "false", "null", NULL }; *w;
	     w++) {
		size_t l = strlen(*w);

		if ((size_t)(e - p) >= l && !memcmp(p, *w, l)) {
			if (b)
				put(b, p, l);
			return p + l;
		}
	}
	return json_number(b, p, e);
}

/* The whole of @s (@n bytes) is one JSON value: written as tojson; -EINVAL if not. */
static int put_json(struct buf *b, const char *s, size_t n, int indent)
{
	const char *e = s + n, *p = json_value(b, s, e, indent, 0);

	return p && json_ws(p, e) == e ? 0 : -EINVAL;
}

/*
 * The elements of a JSON array, in turn: *@p is at the array (first call) or after the
 * last element; @el, @el_len get the next one.  Returns 1 (an element), 0 (the end),
 * -EINVAL (not an array of JSON values).
 */
static int json_next(const char **p, const char *e, const char **el, size_t *el_len)
{
	const char *q = json_ws(*p, e), *end;

	if (q < e && *q == '[')
		q = json_ws(q + 1, e);
	else if (q < e && *q == ',')
		q = json_ws(q + 1, e);
	else if (q >= e || *q != ']')
		return -EINVAL;
	if (q < e && *q == ']') {
		*p = q + 1;
		return 0;
	}
	end = json_value(NULL, q, e, 0, 1);
	if (!end)
		return -EINVAL;
	*el = q;
	*el_len = (size_t)(end - q);
	*p = json_ws(end, e);
	return 1;
}

/*
 * The members of a JSON object (checked already), in turn, as json_next(): *@p is at
 * the object (first call) or after the last member; @key gets the key's JSON string
 * (quotes included), @val, @val_len its value.  Returns 1, 0 (the end), -EINVAL.
 */
static int json_obj_next(const char **p, const char *e, const char **key, const char **val,
			 size_t *val_len)
{
	const char *q = json_ws(*p, e), *end;

	if (q < e && (*q == '{' || *q == ','))
		q = json_ws(q + 1, e);
	else if (q >= e || *q != '}')
		return -EINVAL;
	if (q < e && *q == '}') {
		*p = q + 1;
		return 0;
	}
	*key = q;
	end = json_string(NULL, q, e);
	if (!end || (end = json_ws(end, e)) >= e || *end != ':')
		return -EINVAL;
	q = json_ws(end + 1, e);
	end = json_value(NULL, q, e, 0, 1);
	if (!end)
		return -EINVAL;
	*val = q;
	*val_len = (size_t)(end - q);
	*p = json_ws(end, e);
	return 1;
}

/* Is the JSON string at @key (quotes included) @want once its escapes are read? */
static bool json_key_is(const char *key, const char *e, const char *want)
{
	struct buf k = { 0 };
	bool is;

	put(&k, "", 0);
	is = json_string_as(&k, key, e, true) && !k.err && !strcmp(k.p, want);
	free(k.p);
	return is;
}

/* The value of member @name of the JSON object @s..@e (checked): true and *@v, *@vl. */
static bool json_member(const char *s, const char *e, const char *name, const char **v, size_t *vl)
{
	const char *p = s, *key;

	while (json_obj_next(&p, e, &key, v, vl) > 0)
		if (json_key_is(key, e, name))
			return true;
	return false;
}

static int refuse(char *err, size_t errlen, const char *why)
{
	if (err && errlen)
		snprintf(err, errlen, "chat: %s", why);
	return -EINVAL;
}

/* Llama 2, Mistral, Gemma: user first, then alternating. */
static bool alternates(const struct kvp_chat_msg *m, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((m[i].role == KVP_CHAT_USER) != (i % 2 == 0))
			return false;
	return true;
}

static void llama3_turn(struct buf *b, const char *role, const struct kvp_chat_msg *m)
{
	puts_(b, "<|start_header_id|>");
	puts_(b, role);
	puts_(b, "<|end_header_id|>\n\n");
	if (m)
		put_trimmed(b, m);
}

/* Calls m[i + 1 ..] that belong to assistant message @i. */
static size_t calls_of(const struct kvp_chat_msg *m, size_t n, size_t i)
{
	size_t k = 0;

	while (i + 1 + k < n && m[i + 1 + k].role == KVP_CHAT_TOOL_CALL)
		k++;
	return k;
}

/* Each element of the tools array as tojson(indent) after @pre and before @post. */
static int put_tools(struct buf *b, const struct kvp_chat_opts *o, const char *pre,
		     const char *post, int indent)
{
	const char *p = o->tools, *e = o->tools + o->tools_len, *el;
	size_t el_len;
	int r;

	while ((r = json_next(&p, e, &el, &el_len)) > 0) {
		puts_(b, pre);
		put_json(b, el, el_len, indent);
		puts_(b, post);
	}
	return r;
}

/*
 * Llama 3.1 / 3.2: with tools, "Environment: ipython" in the system turn and the tools
 * (tojson, indent 4) in the first user message (tools_in_user_message's default); an
 * assistant message with a call is {"name": NAME, "parameters": ARGS} (one call only),
 * a tool result an "ipython" turn whose content is written with tojson (a string is
 * iterable to the template, so it is quoted).
 */
static int render_llama31(struct buf *b, const struct kvp_chat_template *t,
			  const struct kvp_chat_msg *m, size_t n, const struct kvp_chat_opts *o,
			  char *err, size_t errlen)
{
	bool sys = n && m[0].role == KVP_CHAT_SYSTEM;
	char today[32] = "26 Jul 2024";
	const char *date = o->date;
	size_t i = sys;

	if (!date && t->family == KVP_CHAT_LLAMA32) { /* strftime_now("%d %b %Y") */
		time_t now = time(NULL);
		struct tm tm;

		if (localtime_r(&now, &tm))
			strftime(today, sizeof(today), "%d %b %Y", &tm);
	}
	puts_(b, o->bos);
	llama3_turn(b, "system", NULL);
	if (o->tools)
		puts_(b, "Environment: ipython\n");
	puts_(b, "Cutting Knowledge Date: December 2023\nToday Date: ");
	puts_(b, date ? date : today);
	puts_(b, "\n\n");
	if (sys)
		put_trimmed(b, &m[0]);
	puts_(b, "<|eot_id|>");
	if (o->tools) {
		if (i >= n)
			return refuse(
				err, errlen,
				"Cannot put tools in the first user message when there's no first user message!");
		puts_(b,
		      "<|start_header_id|>user<|end_header_id|>\n\n"
		      "Given the following functions, please respond with a JSON for a function call "
		      "with its proper arguments that best answers the given prompt.\n\n"
		      "Respond in the format {\"name\": function name, \"parameters\": dictionary of "
		      "argument name and its value}.Do not use variables.\n\n");
		if (put_tools(b, o, "", "\n\n", 4) < 0)
			return refuse(err, errlen, "the tools are not a JSON array");
		put_trimmed(b, &m[i]);
		puts_(b, "<|eot_id|>");
		i += 1 + calls_of(m, n, i); /* the message goes whole, its calls with it */
	}
	for (; i < n; i++) {
		size_t k = m[i].role == KVP_CHAT_ASSISTANT ? calls_of(m, n, i) : 0;

		if (m[i].role == KVP_CHAT_TOOL) {
			llama3_turn(b, "ipython", NULL);
			put_jstring(b, m[i].content, m[i].len);
		} else if (k) {
			if (k != 1)
				return refuse(
					err, errlen,
					"This model only supports single tool-calls at once!");
			llama3_turn(b, "assistant", NULL);
			puts_(b, "{\"name\": \"");
			put(b, m[i + 1].name, m[i + 1].name_len);
			puts_(b, "\", \"parameters\": ");
			put_json(b, m[i + 1].content, m[i + 1].len, 0);
			puts_(b, "}");
			i++;
		} else {
			llama3_turn(b, role_names[m[i].role], &m[i]);
		}
		puts_(b, "<|eot_id|>");
	}
	if (o->add_generation_prompt)
		llama3_turn(b, "assistant", NULL);
	return 0;
}

/*
 * Qwen's tools text after the system prompt: the tools one per line (tojson) and how to
 * call them; Qwen2.5's template writes the example call's braces doubled, Qwen3's not.
 */
static void qwen_tools(struct buf *b, const struct kvp_chat_opts *o, bool doubled)
{
	puts_(b, "# Tools\n\nYou may call one or more functions to assist with the user "
		 "query.\n\nYou are provided with function signatures within <tools></tools> "
		 "XML tags:\n<tools>");
	put_tools(b, o, "\n", "", 0);
	puts_(b, "\n</tools>\n\nFor each function call, return a json object with function "
		 "name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n");
	puts_(b, doubled ? "{{\"name\": <function-name>, \"arguments\": <args-json-object>}}" :
			   "{\"name\": <function-name>, \"arguments\": <args-json-object>}");
	puts_(b, "\n</tool_call><|im_end|>\n");
}

/* Tool result m[i]: consecutive results share one user turn of <tool_response> blocks. */
static void qwen_tool_result(struct buf *b, const struct kvp_chat_msg *m, size_t n, size_t i)
{
	if (!i || m[i - 1].role != KVP_CHAT_TOOL)
		puts_(b, "<|im_start|>user");
	puts_(b, "\n<tool_response>\n");
	put_msg(b, &m[i]);
	puts_(b, "\n</tool_response>");
	if (i + 1 == n || m[i + 1].role != KVP_CHAT_TOOL)
		puts_(b, "<|im_end|>\n");
}

/* One call as a <tool_call> block (no newline before it). */
static void qwen_call(struct buf *b, const struct kvp_chat_msg *c)
{
	puts_(b, "<tool_call>\n{\"name\": \"");
	put(b, c->name, c->name_len);
	puts_(b, "\", \"arguments\": ");
	put_json(b, c->content, c->len, 0);
	puts_(b, "}\n</tool_call>");
}

/* <|im_start|>ROLE\nCONTENT<|im_end|>\n */
static void chatml_turn(struct buf *b, const char *role, const char *s, size_t n)
{
	puts_(b, "<|im_start|>");
	puts_(b, role);
	puts_(b, "\n");
	put(b, s, n);
	puts_(b, "<|im_end|>\n");
}

/*
 * ChatML; Qwen2.5's tools: a system turn (the conversation's or the default) with the
 * tools one per line (tojson), an assistant's calls as <tool_call> blocks after its
 * content, consecutive tool results in one user turn of <tool_response> blocks.
 */
static int render_chatml(struct buf *b, const struct kvp_chat_template *t,
			 const struct kvp_chat_msg *m, size_t n, const struct kvp_chat_opts *o)
{
	bool sys = n && m[0].role == KVP_CHAT_SYSTEM, tools = false;
	const char *p = o->tools, *el;
	size_t el_len;

	if (o->tools && json_next(&p, o->tools + o->tools_len, &el, &el_len) > 0)
		tools = true; /* "if tools": an empty list is false */
	if (tools) {
		puts_(b, "<|im_start|>system\n");
		if (sys)
			put_msg(b, &m[0]);
		else
			puts_(b, t->default_system);
		puts_(b, "\n\n");
		qwen_tools(b, o, true);
	} else if (t->default_system[0] && n && !sys) {
		chatml_turn(b, "system", t->default_system, strlen(t->default_system));
	}
	for (size_t i = tools && sys; i < n; i++) {
		size_t k = m[i].role == KVP_CHAT_ASSISTANT ? calls_of(m, n, i) : 0;

		if (m[i].role == KVP_CHAT_TOOL) {
			qwen_tool_result(b, m, n, i);
		} else if (k) {
			puts_(b, "<|im_start|>assistant");
			if (m[i].len) {
				puts_(b, "\n");
				put_msg(b, &m[i]);
			}
			for (; k; k--) {
				puts_(b, "\n");
				qwen_call(b, &m[++i]);
			}
			puts_(b, "<|im_end|>\n");
		} else {
			chatml_turn(b, role_names[m[i].role], m[i].content, m[i].len);
		}
	}
	if (o->add_generation_prompt)
		puts_(b, "<|im_start|>assistant\n");
	return 0;
}

/* Python's s.strip/lstrip/rstrip('\n') on [*s, *e): newlines only. */
static void strip_nl(const char **s, const char **e, bool left, bool right)
{
	while (left && *s < *e && **s == '\n')
		(*s)++;
	while (right && *e > *s && (*e)[-1] == '\n')
		(*e)--;
}

static const char *last_of(const char *s, const char *e, const char *needle)
{
	size_t nl = strlen(needle);
	const char *found = NULL;

	for (const char *p = s; (p = memmem(p, (size_t)(e - p), needle, nl)); p += nl)
		found = p;
	return found;
}

static bool wraps(const struct kvp_chat_msg *m, const char *head, const char *tail)
{
	size_t h = strlen(head), t = strlen(tail);

	return m->len >= h && m->len >= t && !memcmp(m->content, head, h) &&
	       !memcmp(m->content + m->len - t, tail, t);
}

/*
 * Qwen3: ChatML without a default system prompt; the tools in a system turn as
 * Qwen2.5's; an assistant message's "<think>...</think>" is cut off its content, and
 * written back (the reasoning stripped of newlines, in a <think> block) only for the
 * messages after the last real user query (one that is not a wrapped <tool_response>)
 * that are the last message or have reasoning; calls follow the content on lines of
 * their own.
 */
static int render_qwen3(struct buf *b, const struct kvp_chat_msg *m, size_t n,
			const struct kvp_chat_opts *o)
{
	bool sys = n && m[0].role == KVP_CHAT_SYSTEM, tools = false;
	const char *p = o->tools, *el;
	size_t el_len, query = n;

	if (o->tools && json_next(&p, o->tools + o->tools_len, &el, &el_len) > 0)
		tools = true;
	if (tools) {
		puts_(b, "<|im_start|>system\n");
		if (sys) {
			put_msg(b, &m[0]);
			puts_(b, "\n\n");
		}
		qwen_tools(b, o, false);
	} else if (sys) {
		chatml_turn(b, "system", m[0].content, m[0].len);
	}
	for (size_t i = n; i-- > 0;) {
		if (m[i].role == KVP_CHAT_USER &&
		    !wraps(&m[i], "<tool_response>", "</tool_response>")) {
			query = i;
			break;
		}
	}
	for (size_t i = sys; i < n; i++) {
		size_t k = m[i].role == KVP_CHAT_ASSISTANT ? calls_of(m, n, i) : 0;

		if (m[i].role == KVP_CHAT_TOOL) {
			qwen_tool_result(b, m, n, i);
		} else if (m[i].role == KVP_CHAT_ASSISTANT) {
			const char *cs = m[i].content, *ce = cs + m[i].len;
			const char *rs = cs, *re = cs, *end = last_of(cs, ce, "</think>");

			if (end) { /* content.split('</think>')[-1].lstrip('\n') */
				const char *first = memmem(cs, m[i].len, "</think>", 8), *open;

				re = first; /* split('</think>')[0].rstrip('\n') */
				strip_nl(&rs, &re, false, true);
				open = last_of(rs, re, "<think>"); /* .split('<think>')[-1] */
				if (open)
					rs = open + 7;
				strip_nl(&rs, &re, true, false);
				cs = end + 8;
				strip_nl(&cs, &ce, true, false);
			}
			puts_(b, "<|im_start|>assistant\n");
			if (i > query && (i + k + 1 == n || re > rs)) {
				const char *ls = cs;

				strip_nl(&rs, &re, true, true);
				puts_(b, "<think>\n");
				put(b, rs, (size_t)(re - rs));
				puts_(b, "\n</think>\n\n");
				strip_nl(&ls, &ce, true, false);
				put(b, ls, (size_t)(ce - ls));
			} else {
				put(b, cs, (size_t)(ce - cs));
			}
			for (size_t j = 0; j < k; j++) {
				const struct kvp_chat_msg *c = &m[i + 1 + j];

				if (j || ce > cs)
					puts_(b, "\n");
				qwen_call(b, c);
			}
			i += k;
			puts_(b, "<|im_end|>\n");
		} else {
			chatml_turn(b, role_names[m[i].role], m[i].content, m[i].len);
		}
	}
	if (o->add_generation_prompt) {
		puts_(b, "<|im_start|>assistant\n");
		if (o->no_thinking)
			puts_(b, "<think>\n\n</think>\n\n");
	}
	return 0;
}

/*
 * Mistral's [AVAILABLE_TOOLS] block: each tool's function as the template writes it,
 * member by member in their order ("return" left out), a string value raw between
 * quotes (its '"' + val + '"' escapes nothing), any other value tojson.
 */
static int mistral_tools(struct buf *b, const struct kvp_chat_opts *o, bool v3)
{
	const char *p = o->tools, *e = o->tools + o->tools_len, *el;
	size_t el_len, n = 0;
	int r;

	puts_(b, v3 ? "[AVAILABLE_TOOLS] [" : "[AVAILABLE_TOOLS][");
	while ((r = json_next(&p, e, &el, &el_len)) > 0) {
		const char *fs, *q, *key, *val;
		size_t fl, vl, k = 0;

		if (*el != '{' || !json_member(el, el + el_len, "function", &fs, &fl) || *fs != '{')
			return -EINVAL;
		if (n++)
			puts_(b, ", ");
		puts_(b, "{\"type\": \"function\", \"function\": {");
		for (q = fs; (r = json_obj_next(&q, fs + fl, &key, &val, &vl)) > 0;) {
			if (json_key_is(key, fs + fl, "return"))
				continue;
			if (k++)
				puts_(b, ", ");
			puts_(b, "\"");
			json_string_as(b, key, fs + fl, true);
			if (*val == '"') {
				puts_(b, "\": \"");
				json_string_as(b, val, val + vl, true);
				puts_(b, "\"");
			} else {
				puts_(b, "\": ");
				put_json(b, val, vl, 0);
			}
		}
		if (r < 0)
			return r;
		puts_(b, "}}");
	}
	if (r < 0)
		return r;
	if (n)
		puts_(b, "]");
	puts_(b, "[/AVAILABLE_TOOLS]");
	return 0;
}

/* A call id as the template checks it: given, and 9 long (JavaScript's length: UTF-16). */
static bool mistral_id_ok(const struct kvp_chat_msg *m)
{
	size_t units = 0;

	if (!m->id)
		return false;
	for (size_t i = 0; i < m->id_len; i++) {
		unsigned char c = (unsigned char)m->id[i];

		units += (c & 0xc0) != 0x80;
		units += c >= 0xf0; /* a surrogate pair */
	}
	return units == 9;
}

#define MISTRAL_IDS "Tool call IDs should be alphanumeric strings with length 9!"

/*
 * Mistral v0.3 / Nemo: after an optional system turn, user first and alternating, tool
 * results and assistant messages with calls left out of the count; the system text goes
 * into the last message only, and only when that is the user's (so it is dropped from a
 * conversation that ends otherwise, as the template does).  With tools (even an empty
 * list: the template asks "is not none") the [AVAILABLE_TOOLS] block goes right before
 * the last user message (the template's message == user_messages[-1], which
 * @huggingface/jinja compares by identity); an assistant message with calls is written
 * as its calls alone, [TOOL_CALLS] [{"name", "arguments", "id"}, ...] and EOS, its
 * content dropped; a result is [TOOL_RESULTS] {"content": TEXT, "call_id": ID}
 * [/TOOL_RESULTS] with TEXT as it is.  A call or result without a 9-character id is
 * refused with the template's message.  No generation prompt: the prompt ends with
 * [/INST] (or [/TOOL_RESULTS]) either way.
 */
static int render_mistral3(struct buf *b, const struct kvp_chat_template *t,
			   const struct kvp_chat_msg *m, size_t n, const struct kvp_chat_opts *o,
			   char *err, size_t errlen)
{
	bool sys = n && m[0].role == KVP_CHAT_SYSTEM, v3 = t->family == KVP_CHAT_MISTRAL3;
	const char *inst = v3 ? "[INST] " : "[INST]";
	size_t turn = 0, last_user = n;

	for (size_t i = sys; i < n; i++) {
		if (m[i].role == KVP_CHAT_TOOL || m[i].role == KVP_CHAT_TOOL_CALL ||
		    (m[i].role == KVP_CHAT_ASSISTANT && calls_of(m, n, i)))
			continue;
		if ((m[i].role == KVP_CHAT_USER) != (turn++ % 2 == 0))
			return refuse(err, errlen,
				      "After the optional system message, conversation roles must "
				      "alternate user/assistant/user/assistant/...");
	}
	for (size_t i = sys; i < n; i++)
		if (m[i].role == KVP_CHAT_USER)
			last_user = i;
	puts_(b, o->bos);
	for (size_t i = sys; i < n; i++) {
		size_t k = m[i].role == KVP_CHAT_ASSISTANT ? calls_of(m, n, i) : 0;

		if (m[i].role == KVP_CHAT_USER) {
			if (o->tools && i == last_user && mistral_tools(b, o, v3))
				return refuse(err, errlen, "a tool has no function object");
			puts_(b, inst);
			if (i + 1 == n && sys) {
				put_msg(b, &m[0]);
				puts_(b, "\n\n");
			}
			put_msg(b, &m[i]);
			puts_(b, "[/INST]");
		} else if (k) {
			puts_(b, v3 ? "[TOOL_CALLS] [" : "[TOOL_CALLS][");
			for (size_t j = 1; j <= k; j++) {
				const struct kvp_chat_msg *c = &m[i + j];

				puts_(b, "{\"name\": ");
				put_jstring(b, c->name, c->name_len);
				puts_(b, ", \"arguments\": ");
				put_json(b, c->content, c->len, 0);
				if (!mistral_id_ok(c))
					return refuse(err, errlen, MISTRAL_IDS);
				puts_(b, ", \"id\": \"");
				put(b, c->id, c->id_len);
				puts_(b, j < k ? "\"}, " : "\"}]");
			}
			puts_(b, o->eos);
			i += k;
		} else if (m[i].role == KVP_CHAT_ASSISTANT) {
			if (v3) {
				puts_(b, " ");
				put_trimmed(b, &m[i]);
			} else {
				put_msg(b, &m[i]);
			}
			puts_(b, o->eos);
		} else if (m[i].role == KVP_CHAT_TOOL) {
			puts_(b, v3 ? "[TOOL_RESULTS] {\"content\": " :
				      "[TOOL_RESULTS]{\"content\": ");
			put_msg(b, &m[i]);
			puts_(b, ", ");
			if (!mistral_id_ok(&m[i]))
				return refuse(err, errlen, MISTRAL_IDS);
			puts_(b, "\"call_id\": \"");
			put(b, m[i].id, m[i].id_len);
			puts_(b, "\"}[/TOOL_RESULTS]");
		} else {
			return refuse(err, errlen,
				      "Only user and assistant roles are supported, with the "
				      "exception of an initial optional system message!");
		}
	}
	return 0;
}

static int render(struct buf *b, const struct kvp_chat_template *t, const struct kvp_chat_msg *m,
		  size_t n, const struct kvp_chat_opts *o, char *err, size_t errlen)
{
	bool gen = o->add_generation_prompt, sys = n && m[0].role == KVP_CHAT_SYSTEM;

	switch (t->family) {
	case KVP_CHAT_LLAMA3:
		if (n)
			puts_(b, o->bos);
		for (size_t i = 0; i < n; i++) {
			llama3_turn(b, role_names[m[i].role], &m[i]);
			puts_(b, "<|eot_id|>");
		}
		if (gen)
			llama3_turn(b, "assistant", NULL);
		return 0;
	case KVP_CHAT_LLAMA31:
	case KVP_CHAT_LLAMA32:
		return render_llama31(b, t, m, n, o, err, errlen);
	case KVP_CHAT_CHATML:
		return render_chatml(b, t, m, n, o);
	case KVP_CHAT_QWEN3:
		return render_qwen3(b, m, n, o);
	case KVP_CHAT_LLAMA2:
		if (!alternates(m + sys, n - sys))
			return refuse(err, errlen, ALTERNATE);
		for (size_t i = sys; i < n; i++) {
			/* the system turn goes inside the first [INST]; strip() sees the whole */
			struct kvp_chat_msg c = m[i];
			struct buf tmp = { 0 };

			/*
			 * An empty system turn adds no <<SYS>> block: "system_message != false" is
			 * false for "" under @huggingface/jinja (JavaScript equality), true under
			 * Python's Jinja; we follow the former, which an empty block would not help.
			 */
			if (i == sys && sys && m[0].len) {
				puts_(&tmp, "<<SYS>>\n");
				put_msg(&tmp, &m[0]);
				puts_(&tmp, "\n<</SYS>>\n\n");
				put_msg(&tmp, &m[i]);
				if (tmp.err)
					return tmp.err;
				c.content = tmp.p;
				c.len = tmp.len;
			}
			if (c.role == KVP_CHAT_USER) {
				puts_(b, o->bos);
				puts_(b, "[INST] ");
				put_trimmed(b, &c);
				puts_(b, " [/INST]");
			} else if (c.role == KVP_CHAT_ASSISTANT) {
				puts_(b, " ");
				put_trimmed(b, &c);
				puts_(b, " ");
				puts_(b, o->eos);
			}
			free(tmp.p);
		}
		return 0;
	case KVP_CHAT_MISTRAL:
		puts_(b, o->bos);
		if (!alternates(m, n))
			return refuse(err, errlen, ALTERNATE);
		for (size_t i = 0; i < n; i++) {
			if (m[i].role == KVP_CHAT_USER) {
				puts_(b, "[INST] ");
				put_msg(b, &m[i]);
				puts_(b, " [/INST]");
			} else if (m[i].role == KVP_CHAT_ASSISTANT) {
				put_msg(b, &m[i]);
				puts_(b, o->eos);
			} else {
				return refuse(err, errlen,
					      "Only user and assistant roles are supported!");
			}
		}
		return 0;
	case KVP_CHAT_MISTRAL3:
	case KVP_CHAT_NEMO:
		return render_mistral3(b, t, m, n, o, err, errlen);
	case KVP_CHAT_PHI3:
		for (size_t i = 0; i < n; i++) {
			if (m[i].role == KVP_CHAT_SYSTEM && !m[i].len)
				continue;
			puts_(b, "<|");
			puts_(b, role_names[m[i].role]);
			puts_(b, "|>\n");
			put_msg(b, &m[i]);
			puts_(b, "<|end|>\n");
		}
		puts_(b, gen ? "<|assistant|>\n" : o->eos);
		return 0;
	case KVP_CHAT_GEMMA:
		puts_(b, o->bos);
		if (sys)
			return refuse(err, errlen, "System role not supported");
		if (!alternates(m, n))
			return refuse(err, errlen, ALTERNATE);
		for (size_t i = 0; i < n; i++) {
			puts_(b, "<start_of_turn>");
			puts_(b, m[i].role == KVP_CHAT_ASSISTANT ? "model" : role_names[m[i].role]);
			puts_(b, "\n");
			put_trimmed(b, &m[i]);
			puts_(b, "<end_of_turn>\n");
		}
		if (gen)
			puts_(b, "<start_of_turn>model\n");
		return 0;
	case KVP_CHAT_ZEPHYR:
		for (size_t i = 0; i < n; i++) {
			puts_(b, "<|");
			puts_(b, role_names[m[i].role]);
			puts_(b, "|>\n");
			put_msg(b, &m[i]);
			puts_(b, o->eos);
			puts_(b, "\n");
			if (i + 1 == n && gen)
				puts_(b, "<|assistant|>\n");
		}
		return 0;
	case KVP_CHAT_DEEPSEEK:
		puts_(b, o->bos);
		for (size_t i = 0; i < n; i++) {
			if (m[i].role == KVP_CHAT_USER) {
				puts_(b, "User: ");
				put_msg(b, &m[i]);
				puts_(b, "\n\n");
			} else if (m[i].role == KVP_CHAT_ASSISTANT) {
				puts_(b, "Assistant: ");
				put_msg(b, &m[i]);
				puts_(b, o->eos);
			} else {
				put_msg(b, &m[i]);
				puts_(b, "\n\n");
			}
		}
		if (gen)
			puts_(b, "Assistant:");
		return 0;
	case KVP_CHAT__COUNT:
		break;
	}
	return refuse(err, errlen, "unknown template family");
}

int kvp_chat_tools_refused(const struct kvp_chat_template *t, char *err, size_t errlen)
{
	if (err && errlen)
		snprintf(err, errlen, "chat: the model's chat template (%s) does not support tools",
			 kvp_chat_family_name(t->family));
	return -EINVAL;
}

bool kvp_chat_reasons(const struct kvp_chat_template *t)
{
	return t->family == KVP_CHAT_QWEN3;
}

int kvp_chat_thinking_refused(const struct kvp_chat_template *t, char *err, size_t errlen)
{
	if (err && errlen)
		snprintf(err, errlen,
			 "chat: the model's chat template (%s) has no reasoning section: "
			 "thinking cannot be enabled",
			 kvp_chat_family_name(t->family));
	return -EINVAL;
}

int kvp_chat_render(char **out, size_t *len, const struct kvp_chat_template *t,
		    const struct kvp_chat_msg *msgs, size_t n, const struct kvp_chat_opts *o,
		    char *err, size_t errlen)
{
	struct buf b = { 0 };
	int r;

	*out = NULL;
	*len = 0;
	for (size_t i = 0; i < n; i++) {
		enum kvp_chat_role role = msgs[i].role;

		if ((unsigned int)role > KVP_CHAT_TOOL_CALL)
			return refuse(err, errlen, "a message has an unknown role");
		if ((role == KVP_CHAT_TOOL || role == KVP_CHAT_TOOL_CALL) && !t->tools)
			return kvp_chat_tools_refused(t, err, errlen);
		if (role == KVP_CHAT_TOOL_CALL && (!i || (msgs[i - 1].role != KVP_CHAT_ASSISTANT &&
							  msgs[i - 1].role != KVP_CHAT_TOOL_CALL)))
			return refuse(err, errlen, "a tool call that follows no assistant message");
		if (role == KVP_CHAT_TOOL_CALL && put_json(NULL, msgs[i].content, msgs[i].len, 0))
			return refuse(err, errlen, "a tool call's arguments are not JSON");
	}
	if (o->tools && !t->tools)
		return kvp_chat_tools_refused(t, err, errlen);
	if (o->tools && (put_json(NULL, o->tools, o->tools_len, 0) ||
			 *json_ws(o->tools, o->tools + o->tools_len) != '['))
		return refuse(err, errlen, "the tools are not a JSON array");
	put(&b, "", 0); /* an empty rendering is still a string */
	r = render(&b, t, msgs, n, o, err, errlen);
	if (!r)
		r = b.err;
	if (r) {
		if (r == -ENOMEM && err && errlen)
			snprintf(err, errlen, "chat: out of memory");
		free(b.p);
		return r;
	}
	*out = b.p;
	*len = b.len;
	return 0;
}
