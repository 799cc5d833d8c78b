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
 * a marker of a variant not written here (Mistral's [AVAILABLE_TOOLS], a Gemma without
 * its "System role not supported") is unknown rather than rendered wrong.
 * No state; any thread.
 */
#include "compute/text/chat.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const names[KVP_CHAT__COUNT] = {
	[KVP_CHAT_LLAMA3] = "llama3",	 [KVP_CHAT_LLAMA31] = "llama3.1",
	[KVP_CHAT_LLAMA32] = "llama3.2", [KVP_CHAT_CHATML] = "chatml",
	[KVP_CHAT_LLAMA2] = "llama2",	 [KVP_CHAT_MISTRAL] = "mistral",
	[KVP_CHAT_PHI3] = "phi3",	 [KVP_CHAT_GEMMA] = "gemma",
	[KVP_CHAT_ZEPHYR] = "zephyr",	 [KVP_CHAT_DEEPSEEK] = "deepseek",
};

static const char *const role_names[] = {
	[KVP_CHAT_SYSTEM] = "system",
	[KVP_CHAT_USER] = "user",
	[KVP_CHAT_ASSISTANT] = "assistant",
};

#define ALTERNATE "Conversation roles must alternate user/assistant/user/assistant/..."

const char *kvp_chat_family_name(enum kvp_chat_family f)
{
	return (unsigned int)f < KVP_CHAT__COUNT ? names[f] : "?";
}

const char *kvp_chat_names(void)
{
	return "llama3, llama3.1, llama3.2, chatml, llama2, mistral, phi3, gemma, zephyr, deepseek";
}

bool kvp_chat_writes_bos(const struct kvp_chat_template *t)
{
	return t->family != KVP_CHAT_CHATML && t->family != KVP_CHAT_PHI3 &&
	       t->family != KVP_CHAT_ZEPHYR;
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
	return 0;
}

int kvp_chat_template_named(struct kvp_chat_template *out, const char *name, char *err,
			    size_t errlen)
{
	memset(out, 0, sizeof(*out));
	for (int f = 0; f < KVP_CHAT__COUNT; f++) {
		if (!strcmp(names[f], name)) {
			out->family = (enum kvp_chat_family)f;
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
	case KVP_CHAT_LLAMA32: {
		char today[32] = "26 Jul 2024";
		const char *date = o->date;

		if (!date && t->family == KVP_CHAT_LLAMA32) { /* strftime_now("%d %b %Y") */
			time_t now = time(NULL);
			struct tm tm;

			if (localtime_r(&now, &tm))
				strftime(today, sizeof(today), "%d %b %Y", &tm);
		}
		puts_(b, o->bos);
		llama3_turn(b, "system", NULL);
		puts_(b, "Cutting Knowledge Date: December 2023\nToday Date: ");
		puts_(b, date ? date : today);
		puts_(b, "\n\n");
		if (sys)
			put_trimmed(b, &m[0]);
		puts_(b, "<|eot_id|>");
		for (size_t i = sys; i < n; i++) {
			llama3_turn(b, role_names[m[i].role], &m[i]);
			puts_(b, "<|eot_id|>");
		}
		if (gen)
			llama3_turn(b, "assistant", NULL);
		return 0;
	}
	case KVP_CHAT_CHATML:
		if (t->default_system[0] && n && !sys) {
			puts_(b, "<|im_start|>system\n");
			puts_(b, t->default_system);
			puts_(b, "<|im_end|>\n");
		}
		for (size_t i = 0; i < n; i++) {
			puts_(b, "<|im_start|>");
			puts_(b, role_names[m[i].role]);
			puts_(b, "\n");
			put_msg(b, &m[i]);
			puts_(b, "<|im_end|>\n");
		}
		if (gen)
			puts_(b, "<|im_start|>assistant\n");
		return 0;
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

int kvp_chat_render(char **out, size_t *len, const struct kvp_chat_template *t,
		    const struct kvp_chat_msg *msgs, size_t n, const struct kvp_chat_opts *o,
		    char *err, size_t errlen)
{
	struct buf b = { 0 };
	int r;

	*out = NULL;
	*len = 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned int)msgs[i].role > KVP_CHAT_ASSISTANT)
			return refuse(err, errlen, "a message has an unknown role");
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
