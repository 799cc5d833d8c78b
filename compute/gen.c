/* SPDX-License-Identifier: MIT */
/*
 * gen.c - the generation loop of one sequence (see gen.h).
 *
 * Invariants: n_past <= n_prompt + n_generated (the last kept token is fed back only
 * by the next decode step); n_generated <= max_new.
 * Thread: the thread driving the sequence.
 */
#include "compute/gen.h"

#include <errno.h>
#include <stdlib.h>

#include "compute/draft.h"

void kvp_gen_init(struct kvp_gen *g, const struct kvp_tokenizer *tok, const int32_t *prompt,
		  uint32_t n_prompt, uint32_t max_new, bool stop_eog)
{
	*g = (struct kvp_gen){ .tok = tok,
			       .prompt = prompt,
			       .n_prompt = n_prompt,
			       .max_new = max_new,
			       .stop_eog = stop_eog && tok,
			       .last = -1 };
}

int kvp_gen_tokenize(int32_t **ids, uint32_t *n_ids, const struct kvp_tokenizer *tok,
		     const char *text, size_t len, unsigned int flags, uint32_t max_ids)
{
	/* ordinary vocabularies need at most len + 2 ids; others say how many */
	size_t cap = len + 2;
	int32_t *v = NULL;
	int n;

	for (;;) {
		int32_t *grown = realloc(v, cap * sizeof(*v));

		if (!grown) {
			n = -ENOMEM;
			break;
		}
		v = grown;
		n = kvp_tokenizer_encode_flags(tok, text, len, flags, v, cap);
		if (n < 0)
			break;
		if ((uint32_t)n > max_ids) {
			n = -E2BIG;
			break;
		}
		if ((size_t)n <= cap) {
			*ids = v;
			*n_ids = (uint32_t)n;
			return 0;
		}
		cap = (size_t)n; /* a strange vocabulary: encode again with room */
	}
	free(v);
	*ids = NULL;
	return n;
}

uint32_t kvp_gen_prefill_next(const struct kvp_gen *g, uint32_t budget)
{
	uint32_t left = g->n_prompt - g->n_past;

	return left < budget ? left : budget;
}

int kvp_gen_prefill(struct kvp_gen *g, struct kvp_fwd *fwd, const struct kvp_kv_view *kv,
		    const uint32_t *table, uint32_t n_table, uint32_t n, float *logits)
{
	int r;

	r = kvp_fwd_prefill(fwd, kv, table, n_table, g->n_past, g->prompt + g->n_past, n, logits,
			    0);
	if (r < 0)
		return r;
	g->n_past += n;
	return 0;
}

enum kvp_gen_next kvp_gen_take(struct kvp_gen *g, int32_t token)
{
	if (g->stop_eog && kvp_tokenizer_is_eog(g->tok, token))
		return KVP_GEN_EOS;
	g->last = token;
	if (g->kept && g->n_generated < g->max_new)
		g->kept[g->n_generated] = token;
	g->n_generated++;
	return g->n_generated >= g->max_new ? KVP_GEN_LAST : KVP_GEN_CONTINUE;
}

int kvp_gen_text(struct kvp_gen *g, int32_t token, size_t *off, char *out, size_t cap, bool *more)
{
	/* kvp_utf8_feed() writes at most 3 bytes per byte in, plus 3 for a held character */
	size_t slice = cap >= 6 ? (cap - 3) / 3 : 0;
	const char *piece = NULL;
	size_t len = 0;
	size_t take;
	int n;

	*more = false;
	if (!slice)
		return -EINVAL;
	if (g->tok)
		piece = kvp_tokenizer_piece(g->tok, token, &len);
	if (!piece || *off >= len)
		return 0;
	take = len - *off < slice ? len - *off : slice;
	n = kvp_utf8_feed(&g->utf8, piece + *off, take, out, cap);
	*off += take;
	*more = *off < len;
	return n > 0 ? n : 0;
}

int kvp_gen_flush(struct kvp_gen *g, char *out, size_t cap)
{
	int n = kvp_utf8_flush(&g->utf8, out, cap);

	return n > 0 ? n : 0;
}

struct kvp_fwd_seq kvp_gen_decode_seq(const struct kvp_gen *g, const uint32_t *table,
				      uint32_t n_table)
{
	return (struct kvp_fwd_seq){
		.table = table, .n_table = n_table, .pos = g->n_past, .token = g->last
	};
}

void kvp_gen_decoded(struct kvp_gen *g)
{
	g->n_past++;
}

uint32_t kvp_gen_spec_rows(const struct kvp_gen *g, const struct kvp_draft *d, uint32_t cap,
			   int32_t *rows)
{
	uint32_t left = g->max_new - g->n_generated, n_hist = g->n_prompt + g->n_generated;

	rows[0] = g->last;
	/* a step of k drafts keeps up to k + 1 tokens, the last of which is never fed back */
	if (left <= 1 || g->kept != g->prompt + g->n_prompt)
		return 1;
	cap = cap < left - 1 ? cap : left - 1;
	return 1 + kvp_draft_propose(d, g->prompt, n_hist, rows + 1, cap);
}

void kvp_gen_spec_done(struct kvp_gen *g, struct kvp_draft *d, uint32_t n_rows, uint32_t n_valid)
{
	g->n_past += n_valid;
	kvp_draft_update(d, n_rows - 1, n_valid - 1);
}

uint32_t kvp_gen_spec_kv_cap(uint32_t dtype, uint32_t bt, uint32_t pos)
{
	if (dtype == KVP_DTYPE_INT4)
		return 0;
	if (dtype == KVP_DTYPE_INT8)
		return pos % bt + 2 <= bt ? bt - 2 - pos % bt : 0;
	return UINT32_MAX;
}
