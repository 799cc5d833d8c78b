/* SPDX-License-Identifier: MIT */
/*
 * encode.c - text to token ids: BOS/EOS, special tokens written in the text, and the
 * runs of plain text between them handed to the model's encoder (spm.c or bpe.c).
 *
 * Added tokens are split out of the text before pre-tokenization, as the reference
 * engines do: user-defined ones always (a vocabulary's "  " or "<tool_call>" is one id
 * whatever the text is), control ones only when the caller asks (KVP_TOK_PARSE_SPECIAL):
 * a raw prompt that contains "<|eot_id|>" is text, so a user cannot end a turn or forge
 * a system header.  The scan is leftmost, longest first; only bytes that begin some
 * special piece are tried.
 * SentencePiece puts its word-start space at the start of the text and again after each
 * special token, as the reference engine does.  Any thread.
 */
#include <errno.h>
#include <string.h>

#include "compute/text/vocab.h"

#define MAX_TEXT (1u << 28)

static bool wanted(const struct kvp_tokenizer *t, int32_t id, unsigned int flags)
{
	if (flags & KVP_TOK_PARSE_SPECIAL)
		return true;
	return t->type[id] == KVP_TOK_USER;
}

/* The special token spelled at text[i..), or -1. */
static int32_t special_at(const struct kvp_tokenizer *t, const char *text, size_t left,
			  unsigned int flags)
{
	if (!t->special_first[(uint8_t)text[0]])
		return -1;
	for (uint32_t k = 0; k < t->n_special; k++) {
		int32_t id = t->special[k];
		uint32_t l = t->piece_len[id];

		if (l <= left && !memcmp(t->piece[id], text, l) && wanted(t, id, flags))
			return id;
	}
	return -1;
}

/*
 * A run of plain text.  Each run starts the text or follows a special token, and
 * SentencePiece gives each its word-start space.
 */
static int encode_run(const struct kvp_tokenizer *t, struct kvp_bpe_ctx *bpe, const char *text,
		      size_t len, bool space, struct kvp_ids *out)
{
	if (bpe)
		return kvp_bpe_encode(bpe, text, len);
	return kvp_spm_encode(t, text, len, space && t->add_space_prefix, out);
}

int kvp_tokenizer_encode_flags(const struct kvp_tokenizer *t, const char *text, size_t len,
			       unsigned int flags, int32_t *ids, size_t cap)
{
	struct kvp_ids out = { .ids = ids, .cap = cap };
	struct kvp_bpe_ctx *bpe = NULL;
	int add = !(flags & KVP_TOK_NO_ADD_SPECIAL), r = 0;
	bool cont = flags & KVP_TOK_CONTINUE; /* a run at the start continues earlier text */
	size_t run = 0;

	if (len > MAX_TEXT)
		return -E2BIG;
	if (t->model == KVP_TOKM_BPE && len && (r = kvp_bpe_ctx_new(&bpe, t, len, &out)))
		return r;
	if (add && t->add_bos)
		kvp_ids_put(&out, t->bos);
	if (t->n_special) {
		for (size_t i = 0; i < len; i++) {
			int32_t id = special_at(t, text + i, len - i, flags);

			if (id < 0)
				continue;
			if (i > run &&
			    (r = encode_run(t, bpe, text + run, i - run, !(cont && !run), &out)))
				goto out;
			kvp_ids_put(&out, id);
			i += t->piece_len[id] - 1;
			run = i + 1;
		}
	}
	if (len > run && (r = encode_run(t, bpe, text + run, len - run, !(cont && !run), &out)))
		goto out;
	if (add && t->add_eos)
		kvp_ids_put(&out, t->eos);
	r = out.count > INT32_MAX ? -E2BIG : (int)out.count;
out:
	kvp_bpe_ctx_free(bpe);
	return r;
}

int kvp_tokenizer_encode(const struct kvp_tokenizer *t, const char *text, size_t len, int32_t *ids,
			 size_t cap)
{
	return kvp_tokenizer_encode_flags(t, text, len, 0, ids, cap);
}
