/* SPDX-License-Identifier: MIT */
/*
 * spm.c - SentencePiece-style encoding (tokenizer.ggml.model = "llama").
 *
 * The (normalised) text is split into UTF-8 characters, then the adjacent pair whose
 * concatenation is a vocabulary piece with the highest score is merged, leftmost
 * first, until no pair is a piece (a priority queue of candidate pairs, so n log n);
 * what is left and has no piece becomes its byte tokens.  A byte-level vocabulary is
 * the case where no character is a piece.  Per-call buffers only; any thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compute/text/vocab.h"

struct sym {
	uint32_t start, len; /* len 0: merged into its left neighbour */
	int32_t prev, next;
};

/* A candidate merge of symbol left with its next, queued with the piece's score. */
/* Queue the merge of symbol @i with its next when their bytes together are a piece. */
static void queue_pair(const struct kvp_tokenizer *t, const char *txt, const struct sym *s,
		       int32_t i, struct kvp_merge *h, size_t *n)
{
	int32_t j = i >= 0 ? s[i].next : -1, id;

	if (j < 0 || s[i].len + s[j].len > KVP_PIECE_MAX)
		return;
	id = kvp_vocab_lookup(t, txt + s[i].start, s[i].len + s[j].len);
	if (id >= 0)
		/* higher score first: the queue pops the lowest key */
		kvp_merge_push(h, n, (struct kvp_merge){ -t->score[id], i, s[i].len + s[j].len });
}

int kvp_spm_encode(const struct kvp_tokenizer *t, const char *text, size_t len, int space_prefix,
		   struct kvp_ids *out)
{
	size_t nl = 0, nh = 0;
	char *txt;
	struct sym *s;
	struct kvp_merge *h;
	int32_t n_sym = 0;

	if (!len && !space_prefix)
		return 0;
	txt = malloc(3 * len + 4);
	s = malloc((len + 2) * sizeof(*s));	/* a symbol per byte, + the leading U+2581 */
	h = malloc(3 * (len + 2) * sizeof(*h)); /* n - 1 pairs, + 2 per merge */
	if (!txt || !s || !h) {
		free(txt);
		free(s);
		free(h);
		return -ENOMEM;
	}
	/* normalise: SentencePiece marks spaces, and a word start at the beginning */
	if (space_prefix) {
		memcpy(txt, KVP_SPM_SPACE, 3);
		nl = 3;
	}
	for (size_t i = 0; i < len; i++) {
		if (t->spm && text[i] == ' ') {
			memcpy(txt + nl, KVP_SPM_SPACE, 3);
			nl += 3;
		} else {
			txt[nl++] = text[i];
		}
	}
	for (size_t i = 0; i < nl;) {
		size_t cl = kvp_utf8_char_len((const uint8_t *)txt + i, nl - i);

		if (!cl)
			cl = 1; /* an invalid byte is a symbol of its own (a byte token) */
		s[n_sym] = (struct sym){
			.start = (uint32_t)i, .len = (uint32_t)cl, .prev = n_sym - 1, .next = -1
		};
		if (n_sym)
			s[n_sym - 1].next = n_sym;
		n_sym++;
		i += cl;
	}
	/*
	 * Merge the best pair until none is a piece.  The queue holds every adjacent pair
	 * that is a piece (n log n in all, where rescanning the list per merge was n^2); an
	 * entry whose symbols changed since it was queued is stale and skipped: lengths
	 * only grow, so the pair's total length tells.
	 */
	for (int32_t i = 0; i < n_sym; i++)
		queue_pair(t, txt, s, i, h, &nh);
	while (nh) {
		struct kvp_merge e = kvp_merge_pop(h, &nh);
		int32_t i = e.left, j = s[i].next;

		if (!s[i].len || j < 0 || s[i].len + s[j].len != e.len)
			continue;
		s[i].len = e.len;
		s[j].len = 0;
		s[i].next = s[j].next;
		if (s[j].next >= 0)
			s[s[j].next].prev = i;
		queue_pair(t, txt, s, s[i].prev, h, &nh);
		queue_pair(t, txt, s, i, h, &nh);
	}
	for (int32_t i = n_sym ? 0 : -1; i >= 0; i = s[i].next) {
		int32_t id = kvp_vocab_lookup(t, txt + s[i].start, s[i].len);

		if (id >= 0 && t->type[id] != KVP_TOK_BYTE) {
			kvp_ids_put(out, id);
			continue;
		}
		for (uint32_t k = 0; k < s[i].len; k++) {
			int32_t b = t->byte_id[(uint8_t)txt[s[i].start + k]];

			if (b >= 0 || t->unk >= 0)
				kvp_ids_put(out, b >= 0 ? b : t->unk);
		}
	}
	free(txt);
	free(s);
	free(h);
	return 0;
}
