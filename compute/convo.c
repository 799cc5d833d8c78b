/* SPDX-License-Identifier: MIT */
/*
 * convo.c - a conversation's prompt ids (see convo.h).
 *
 * Invariant: the ids returned for a conversation with context start with the context,
 * unchanged; only the template's text after the context is tokenized.
 * Thread: any (no state).
 */
#include "compute/convo.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compute/gen.h"
#include "compute/text/tokenizer.h"
#include "util/errmsg.h"

/*
 * Stands for the content the context ends in.  0xFF and 0xFE never occur in UTF-8, and
 * messages are well-formed UTF-8, so the marker is found only where it was put; no
 * template trims or escapes these bytes.
 */
static const char MARKER[] = "\xff\xfekvpool-context\xfe\xff";

/* The text of special token @id as a NUL-terminated string, or NULL (none, no memory). */
static char *special_text(const struct kvp_tokenizer *tok, int32_t id)
{
	const char *p;
	size_t len;
	char *s;

	if (id < 0 || !(p = kvp_tokenizer_token_text(tok, id, &len)))
		return NULL;
	s = malloc(len + 1);
	if (s) {
		memcpy(s, p, len);
		s[len] = 0;
	}
	return s;
}

/* Does the vocabulary put BOS in front of a text by itself? */
static bool adds_bos(const struct kvp_tokenizer *tok)
{
	int32_t ids[4];
	int n = kvp_tokenizer_encode_flags(tok, "", 0, 0, ids, 4);

	return n >= 1 && ids[0] == kvp_tokenizer_bos(tok) && ids[0] >= 0;
}

/* First-turn ids: the whole text, BOS from the template or the vocabulary, never EOS. */
static int whole(int32_t **ids, uint32_t *n_ids, const struct kvp_tokenizer *tok, bool tmpl_bos,
		 const char *text, size_t len, uint32_t max_ids)
{
	unsigned int flags = KVP_TOK_PARSE_SPECIAL | KVP_TOK_NO_ADD_SPECIAL;
	bool bos = !tmpl_bos && adds_bos(tok);
	int32_t *v;
	uint32_t n;
	int r;

	if (bos && !max_ids)
		return -E2BIG;
	r = kvp_gen_tokenize(&v, &n, tok, text, len, flags, max_ids - (bos ? 1 : 0));
	if (r < 0)
		return r;
	if (bos) {
		int32_t *grown = realloc(v, ((size_t)n + 1) * sizeof(*v));

		if (!grown) {
			free(v);
			return -ENOMEM;
		}
		v = grown;
		memmove(v + 1, v, (size_t)n * sizeof(*v));
		v[0] = kvp_tokenizer_bos(tok);
		n++;
	}
	*ids = v;
	*n_ids = n;
	return 0;
}

/* Continuation ids: @context, then the text after the marker in @text. */
static int continued(int32_t **ids, uint32_t *n_ids, const struct kvp_tokenizer *tok,
		     const struct kvp_convo *cv, const char *text, size_t len, uint32_t max_ids,
		     char *err, size_t errlen)
{
	const unsigned int flags = KVP_TOK_PARSE_SPECIAL | KVP_TOK_NO_ADD_SPECIAL |
				   KVP_TOK_CONTINUE;
	const size_t ml = sizeof(MARKER) - 1;
	const char *at = memmem(text, len, MARKER, ml);
	const char *rest;
	int32_t *tail, *v;
	uint32_t n_tail;
	int r;

	if (!at || memmem(at + ml, len - (size_t)(at - text) - ml, MARKER, ml)) {
		kvp_errmsg(err, errlen,
			   "chat: the template does not write the context's "
			   "assistant message once");
		return -EINVAL;
	}
	if (cv->n_context > max_ids)
		return -E2BIG;
	rest = at + ml;
	r = kvp_gen_tokenize(&tail, &n_tail, tok, rest, len - (size_t)(rest - text), flags,
			     max_ids - cv->n_context);
	if (r < 0)
		return r;
	if (!n_tail) {
		free(tail);
		kvp_errmsg(err, errlen, "chat: nothing follows the context: no prompt for a reply");
		return -EINVAL;
	}
	v = malloc(((size_t)cv->n_context + n_tail) * sizeof(*v));
	if (!v) {
		free(tail);
		return -ENOMEM;
	}
	memcpy(v, cv->context, (size_t)cv->n_context * sizeof(*v));
	memcpy(v + cv->n_context, tail, (size_t)n_tail * sizeof(*v));
	free(tail);
	*ids = v;
	*n_ids = cv->n_context + n_tail;
	return 0;
}

int kvp_convo_prompt(int32_t **ids, uint32_t *n_ids, const struct kvp_tokenizer *tok,
		     const struct kvp_chat_template *tmpl, const struct kvp_convo *cv,
		     uint32_t max_ids, char *err, size_t errlen)
{
	struct kvp_chat_msg *msgs = NULL;
	struct kvp_chat_opts o = { .add_generation_prompt = !cv->no_generation_prompt,
				   .date = cv->date,
				   .tools = cv->tools,
				   .tools_len = cv->tools_len,
				   .no_thinking = cv->no_thinking };
	char *bos = NULL, *eos = NULL, *text = NULL;
	size_t len = 0;
	int r;

	if (!cv->n_msgs) {
		kvp_errmsg(err, errlen, "chat: no messages");
		return -EINVAL;
	}
	if (!cv->n_context != !cv->context_msgs || cv->context_msgs > cv->n_msgs ||
	    (cv->context_msgs && cv->msgs[cv->context_msgs - 1].role != KVP_CHAT_ASSISTANT)) {
		kvp_errmsg(err, errlen, "chat: the context must end with an assistant message");
		return -EINVAL;
	}
	r = -ENOMEM;
	bos = special_text(tok, kvp_tokenizer_bos(tok));
	eos = special_text(tok, kvp_tokenizer_eos(tok));
	if ((kvp_tokenizer_bos(tok) >= 0 && !bos) || (kvp_tokenizer_eos(tok) >= 0 && !eos))
		goto out;
	o.bos = bos;
	o.eos = eos;
	if (cv->context_msgs) {
		msgs = malloc(cv->n_msgs * sizeof(*msgs));
		if (!msgs)
			goto out;
		memcpy(msgs, cv->msgs, cv->n_msgs * sizeof(*msgs));
		msgs[cv->context_msgs - 1].content = MARKER;
		msgs[cv->context_msgs - 1].len = sizeof(MARKER) - 1;
	}
	r = kvp_chat_render(&text, &len, tmpl, msgs ? msgs : cv->msgs, cv->n_msgs, &o, err, errlen);
	if (r < 0)
		goto out;
	if (cv->context_msgs)
		r = continued(ids, n_ids, tok, cv, text, len, max_ids, err, errlen);
	else
		r = whole(ids, n_ids, tok, kvp_chat_writes_bos(tmpl), text, len, max_ids);
	if (r == 0 && !*n_ids) {
		free(*ids);
		kvp_errmsg(err, errlen, "chat: the conversation gives no tokens");
		r = -EINVAL;
	}
out:
	free(text);
	free(msgs);
	free(bos);
	free(eos);
	return r;
}
