/* SPDX-License-Identifier: MIT */
/*
 * tokenizer.c - llama-style (SentencePiece with byte fallback) and byte-level vocabularies.
 *
 * Encoding splits the (normalised) text into UTF-8 characters and then merges the
 * adjacent pair whose concatenation is a vocabulary piece with the highest score,
 * leftmost first, until no pair is a piece (a priority queue of candidate pairs, so
 * n log n); what is left and has no piece becomes its byte tokens.  A byte-level vocabulary is the case where no character is a piece.
 * Pieces are found through an open-addressing hash table built once.
 * Immutable after build; any thread.
 */
#include "compute/tokenizer.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/gguf.h"
#include "compute/model.h"

#define SPM_SPACE "\xe2\x96\x81"	/* U+2581, SentencePiece's visible space */
#define PIECE_MAX 1024u

struct kvp_tokenizer {
	uint32_t n;
	const char **piece;	/* raw pieces, NUL-terminated, into arena */
	uint32_t *piece_len;
	const char **text;	/* what each token decodes to (into arena) */
	uint32_t *text_len;
	float *score;
	int32_t *type;
	int32_t byte_id[256];	/* -1 when the vocabulary lacks that byte token */
	int32_t bos, eos, unk;
	int add_bos;
	int spm;		/* vocabulary uses U+2581 for spaces */
	uint32_t *ht;		/* id + 1, 0 = empty */
	uint32_t ht_mask;
	char *arena;
};

static uint64_t hash_bytes(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)p[i]) * 0x100000001b3ull;
	return h;
}

/* Id of the piece equal to p[0..n), or -1. */
static int32_t lookup(const struct kvp_tokenizer *t, const char *p, size_t n)
{
	for (uint64_t i = hash_bytes(p, n);; i++) {
		uint32_t v = t->ht[i & t->ht_mask];

		if (!v)
			return -1;
		if (t->piece_len[v - 1] == n && memcmp(t->piece[v - 1], p, n) == 0)
			return (int32_t)(v - 1);
	}
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* "<0xAB>" -> 0xAB, else -1. */
static int byte_piece(const char *p, size_t n)
{
	if (n != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>' ||
	    hexval(p[3]) < 0 || hexval(p[4]) < 0)
		return -1;
	return hexval(p[3]) * 16 + hexval(p[4]);
}

int kvp_tokenizer_build(struct kvp_tokenizer **out, const char *const *pieces,
			const float *scores, const int32_t *types, uint32_t n, int32_t bos,
			int32_t eos, int32_t unk, int add_bos)
{
	struct kvp_tokenizer *t;
	size_t arena = 0, cap = 16, off = 0;

	*out = NULL;
	if (!n || n > (1u << 24))
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		size_t l = strlen(pieces[i]);

		if (l > PIECE_MAX)
			return -EINVAL;
		arena += 2 * (l + 1);
	}
	while (cap < 2 * (size_t)n)
		cap *= 2;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->n = n;
	t->piece = calloc(n, sizeof(*t->piece));
	t->piece_len = calloc(n, sizeof(*t->piece_len));
	t->text = calloc(n, sizeof(*t->text));
	t->text_len = calloc(n, sizeof(*t->text_len));
	t->score = calloc(n, sizeof(*t->score));
	t->type = calloc(n, sizeof(*t->type));
	t->ht = calloc(cap, sizeof(*t->ht));
	t->arena = malloc(arena ? arena : 1);
	if (!t->piece || !t->piece_len || !t->text || !t->text_len || !t->score || !t->type ||
	    !t->ht || !t->arena) {
		kvp_tokenizer_free(t);
		return -ENOMEM;
	}
	t->ht_mask = (uint32_t)cap - 1;
	t->bos = bos >= 0 && (uint32_t)bos < n ? bos : -1;
	t->eos = eos >= 0 && (uint32_t)eos < n ? eos : -1;
	t->unk = unk >= 0 && (uint32_t)unk < n ? unk : -1;
	t->add_bos = add_bos && t->bos >= 0;
	memset(t->byte_id, 0xff, sizeof(t->byte_id));
	for (uint32_t i = 0; i < n; i++) {
		size_t l = strlen(pieces[i]);
		int b = byte_piece(pieces[i], l);

		memcpy(t->arena + off, pieces[i], l + 1);
		t->piece[i] = t->arena + off;
		t->piece_len[i] = (uint32_t)l;
		off += l + 1;
		t->score[i] = scores && isfinite(scores[i]) ? scores[i] : 0.0f;
		t->type[i] = types ? types[i] : (b >= 0 ? KVP_TOK_BYTE : KVP_TOK_NORMAL);
		if (t->type[i] == KVP_TOK_BYTE && b >= 0 && t->byte_id[b] < 0)
			t->byte_id[b] = (int32_t)i;
		if (l == 3 && memcmp(pieces[i], SPM_SPACE, 3) == 0)
			t->spm = 1;
		if (lookup(t, pieces[i], l) < 0) {	/* the first of duplicates wins */
			for (uint64_t h = hash_bytes(pieces[i], l);; h++) {
				if (!t->ht[h & t->ht_mask]) {
					t->ht[h & t->ht_mask] = i + 1;
					break;
				}
			}
		}
	}
	/* decoded text: bytes for byte tokens, nothing for control, spaces for U+2581 */
	for (uint32_t i = 0; i < n; i++) {
		char *d = t->arena + off;
		size_t dl = 0;
		int b = byte_piece(t->piece[i], t->piece_len[i]);

		if (t->type[i] == KVP_TOK_BYTE && b >= 0) {
			d[dl++] = (char)b;
		} else if (t->type[i] == KVP_TOK_NORMAL || t->type[i] == KVP_TOK_USER) {
			for (uint32_t k = 0; k < t->piece_len[i];) {
				if (t->spm && t->piece_len[i] - k >= 3 &&
				    memcmp(t->piece[i] + k, SPM_SPACE, 3) == 0) {
					d[dl++] = ' ';
					k += 3;
				} else {
					d[dl++] = t->piece[i][k++];
				}
			}
		}
		t->text[i] = d;
		t->text_len[i] = (uint32_t)dl;
		off += dl + 1;
	}
	*out = t;
	return 0;
}

int kvp_tokenizer_new(struct kvp_tokenizer **out, const struct kvp_model *m, char *err,
		      size_t errlen)
{
	const struct kvp_gguf *g = kvp_model_gguf(m);
	uint32_t n = kvp_model_hparams(m)->n_vocab;
	const struct kvp_gguf_kv *toks, *sc = NULL, *ty = NULL;
	struct kvp_gguf_str model, s;
	const char **pieces = NULL;
	char *buf = NULL;
	float *scores = NULL;
	int32_t *types = NULL;
	uint64_t bos = 1, eos = 2, unk = 0;
	int add_bos = 1, r = -EBADMSG;
	const uint8_t *p;
	size_t total = 0, off = 0;

	*out = NULL;
	if (kvp_gguf_get_str(g, "tokenizer.ggml.model", &model) || !kvp_gguf_str_eq(model, "llama")) {
		if (err && errlen)
			snprintf(err, errlen, "tokenizer: tokenizer.ggml.model is not 'llama' (only SentencePiece-style vocabularies are supported)");
		return -ENOTSUP;
	}
	if (kvp_gguf_get_arr(g, "tokenizer.ggml.tokens", KVP_GGUF_STRING, &toks) || toks->arr_n != n) {
		if (err && errlen)
			snprintf(err, errlen, "tokenizer: tokenizer.ggml.tokens missing or not %u strings", n);
		return -EBADMSG;
	}
	if (kvp_gguf_find(g, "tokenizer.ggml.scores") &&
	    (kvp_gguf_get_arr(g, "tokenizer.ggml.scores", KVP_GGUF_F32, &sc) || sc->arr_n != n))
		goto bad;
	if (kvp_gguf_find(g, "tokenizer.ggml.token_type") &&
	    (kvp_gguf_get_arr(g, "tokenizer.ggml.token_type", KVP_GGUF_I32, &ty) || ty->arr_n != n))
		goto bad;
	kvp_gguf_get_uint(g, "tokenizer.ggml.bos_token_id", UINT32_MAX, &bos);
	kvp_gguf_get_uint(g, "tokenizer.ggml.eos_token_id", UINT32_MAX, &eos);
	kvp_gguf_get_uint(g, "tokenizer.ggml.unknown_token_id", UINT32_MAX, &unk);
	kvp_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos);

	/* pieces in the file are not NUL-terminated: copy them out once */
	p = toks->val;
	for (uint32_t i = 0; i < n; i++) {
		s = kvp_gguf_str_next(&p);
		if (s.len > PIECE_MAX || memchr(s.p, 0, s.len))
			goto bad;
		total += s.len + 1;
	}
	pieces = calloc(n, sizeof(*pieces));
	buf = malloc(total);
	scores = sc ? malloc((size_t)n * sizeof(float)) : NULL;
	types = ty ? malloc((size_t)n * sizeof(int32_t)) : NULL;
	if (!pieces || !buf || (sc && !scores) || (ty && !types)) {
		r = -ENOMEM;
		goto out;
	}
	p = toks->val;
	for (uint32_t i = 0; i < n; i++) {
		s = kvp_gguf_str_next(&p);
		memcpy(buf + off, s.p, s.len);
		buf[off + s.len] = 0;
		pieces[i] = buf + off;
		off += s.len + 1;
	}
	if (sc)
		memcpy(scores, sc->val, (size_t)n * sizeof(float));
	if (ty)
		memcpy(types, ty->val, (size_t)n * sizeof(int32_t));
	r = kvp_tokenizer_build(out, pieces, scores, types, n, bos < n ? (int32_t)bos : -1,
				eos < n ? (int32_t)eos : -1, unk < n ? (int32_t)unk : -1, add_bos);
	if (r && err && errlen)
		snprintf(err, errlen, "tokenizer: %s", strerror(-r));
	goto out;
bad:
	if (err && errlen)
		snprintf(err, errlen, "tokenizer: bad tokenizer.ggml.tokens/scores/token_type");
out:
	free(pieces);
	free(buf);
	free(scores);
	free(types);
	return r;
}

void kvp_tokenizer_free(struct kvp_tokenizer *t)
{
	if (!t)
		return;
	free(t->piece);
	free(t->piece_len);
	free(t->text);
	free(t->text_len);
	free(t->score);
	free(t->type);
	free(t->ht);
	free(t->arena);
	free(t);
}

uint32_t kvp_tokenizer_n_vocab(const struct kvp_tokenizer *t) { return t->n; }
int32_t kvp_tokenizer_bos(const struct kvp_tokenizer *t) { return t->bos; }
int32_t kvp_tokenizer_eos(const struct kvp_tokenizer *t) { return t->eos; }

/* Length of the UTF-8 character starting at p (1 for an invalid or cut byte). */
static size_t utf8_len(const uint8_t *p, size_t left)
{
	size_t n = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 1;

	if (n > left)
		return 1;
	for (size_t i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 1;
	return n;
}

struct sym {
	uint32_t start, len;	/* len 0: merged into its left neighbour */
	int32_t prev, next;
};

/* A candidate merge of symbol left with its next, queued with the piece's score. */
struct bigram {
	float score;
	int32_t left;
	uint32_t len;	/* both symbols' bytes when queued: a later change makes it stale */
};

/* Higher score first; on a tie the leftmost pair, as SentencePiece does. */
static int bigram_before(const struct bigram *a, const struct bigram *b)
{
	return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(struct bigram *h, size_t *n, struct bigram e)
{
	size_t i = (*n)++;

	while (i && bigram_before(&e, &h[(i - 1) / 2])) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = e;
}

static struct bigram heap_pop(struct bigram *h, size_t *n)
{
	struct bigram top = h[0], last = h[--(*n)];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= *n)
			break;
		if (c + 1 < *n && bigram_before(&h[c + 1], &h[c]))
			c++;
		if (!bigram_before(&h[c], &last))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = last;
	return top;
}

/* Queue the merge of symbol @i with its next when their bytes together are a piece. */
static void queue_pair(const struct kvp_tokenizer *t, const char *txt, const struct sym *s,
		       int32_t i, struct bigram *h, size_t *n)
{
	int32_t j = i >= 0 ? s[i].next : -1, id;

	if (j < 0 || s[i].len + s[j].len > PIECE_MAX)
		return;
	id = lookup(t, txt + s[i].start, s[i].len + s[j].len);
	if (id >= 0)
		heap_push(h, n, (struct bigram){ t->score[id], i, s[i].len + s[j].len });
}

int kvp_tokenizer_encode(const struct kvp_tokenizer *t, const char *text, size_t len,
			 int32_t *ids, size_t cap)
{
	size_t nl = 0, count = 0, nh = 0;
	char *txt;
	struct sym *s;
	struct bigram *h;
	int32_t n_sym = 0;

	if (len > (1u << 28))
		return -E2BIG;
	txt = malloc(3 * len + 4);
	s = malloc((len + 2) * sizeof(*s));	/* a symbol per byte, + the leading U+2581 */
	h = malloc(3 * (len + 2) * sizeof(*h));	/* n - 1 pairs, + 2 per merge */
	if (!txt || !s || !h) {
		free(txt);
		free(s);
		free(h);
		return -ENOMEM;
	}
	/* normalise: SentencePiece marks spaces, and a word start at the beginning */
	if (t->spm && len) {
		memcpy(txt, SPM_SPACE, 3);
		nl = 3;
	}
	for (size_t i = 0; i < len; i++) {
		if (t->spm && text[i] == ' ') {
			memcpy(txt + nl, SPM_SPACE, 3);
			nl += 3;
		} else {
			txt[nl++] = text[i];
		}
	}
	for (size_t i = 0; i < nl;) {
		size_t cl = utf8_len((const uint8_t *)txt + i, nl - i);

		s[n_sym] = (struct sym){ .start = (uint32_t)i, .len = (uint32_t)cl,
					 .prev = n_sym - 1, .next = -1 };
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
		struct bigram e = heap_pop(h, &nh);
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
#define EMIT(v) do { if (count < cap) ids[count] = (v); count++; } while (0)
	if (t->add_bos)
		EMIT(t->bos);
	for (int32_t i = n_sym ? 0 : -1; i >= 0; i = s[i].next) {
		int32_t id = lookup(t, txt + s[i].start, s[i].len);

		if (id >= 0 && t->type[id] != KVP_TOK_BYTE) {
			EMIT(id);
			continue;
		}
		for (uint32_t k = 0; k < s[i].len; k++) {
			int32_t b = t->byte_id[(uint8_t)txt[s[i].start + k]];

			if (b >= 0 || t->unk >= 0)
				EMIT(b >= 0 ? b : t->unk);
		}
	}
#undef EMIT
	free(txt);
	free(s);
	free(h);
	return count > INT32_MAX ? -E2BIG : (int)count;
}

const char *kvp_tokenizer_piece(const struct kvp_tokenizer *t, int32_t id, size_t *len)
{
	if (id < 0 || (uint32_t)id >= t->n) {
		*len = 0;
		return NULL;
	}
	*len = t->text_len[id];
	return t->text[id];
}

static const char replacement[3] = { (char)0xef, (char)0xbf, (char)0xbd };

int kvp_utf8_feed(struct kvp_utf8_stream *s, const void *in, size_t n, char *out, size_t cap)
{
	const uint8_t *p = in;
	size_t o = 0;

	if (cap < 3 * n + 3)
		return -ENOBUFS;
	for (size_t i = 0; i < n; i++) {
		uint8_t c = p[i];

		if (s->n) {
			/* second-byte ranges exclude overlongs, surrogates and > U+10FFFF */
			uint8_t lo = 0x80, hi = 0xbf;

			if (s->n == 1) {
				if (s->buf[0] == 0xe0) lo = 0xa0;
				if (s->buf[0] == 0xed) hi = 0x9f;
				if (s->buf[0] == 0xf0) lo = 0x90;
				if (s->buf[0] == 0xf4) hi = 0x8f;
			}
			if (c >= lo && c <= hi) {
				s->buf[s->n++] = c;
				if (s->n == s->need) {
					memcpy(out + o, s->buf, s->n);
					o += s->n;
					s->n = 0;
				}
				continue;
			}
			memcpy(out + o, replacement, 3);	/* cut short: drop it, then look at c afresh */
			o += 3;
			s->n = 0;
		}
		if (c < 0x80) {
			out[o++] = (char)c;
		} else if (c >= 0xc2 && c <= 0xf4) {
			s->buf[0] = c;
			s->n = 1;
			s->need = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
		} else {
			memcpy(out + o, replacement, 3);
			o += 3;
		}
	}
	return (int)o;
}

int kvp_utf8_flush(struct kvp_utf8_stream *s, char *out, size_t cap)
{
	if (!s->n)
		return 0;
	s->n = 0;
	if (cap < 3)
		return -ENOBUFS;
	memcpy(out, replacement, 3);
	return 3;
}
