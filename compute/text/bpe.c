/* SPDX-License-Identifier: MIT */
/*
 * bpe.c - byte-level BPE (tokenizer.ggml.model = "gpt2"): Llama 3, Qwen2, SmolLM,
 * DeepSeek, GPT-2 families.
 *
 * The pre-tokenizer (pretok.c) cuts the text into words.  Each byte of a word starts as
 * the token of the printable character GPT-2 maps that byte to ("Ġ" for a space), then
 * adjacent pairs are merged lowest tokenizer.ggml.merges rank first, leftmost on a tie,
 * until no pair has a merge.  Pairs wait in a priority queue (n log n per word rather
 * than a rescan per merge), keyed by token ids, so a merge costs one hash probe and no
 * string building.  Llama 3 takes a word that is itself a token whole, before any merge
 * ("ignore_merges"), as its reference tokenizer does.
 *
 * Words repeat (" the", " of", indentation), so a long text keeps a small per-call cache
 * of word -> ids, direct-mapped and bounded; the vocabulary itself is never written,
 * so any number of threads encode at once.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compute/text/pretok.h"
#include "compute/text/vocab.h"

#define CACHE_MIN_TEXT 2048u /* shorter texts repeat too little to pay for a cache */
#define CACHE_WORD 24u	     /* longest word cached, bytes */
#define CACHE_IDS 8u	     /* most ids a cached word may have */

/*
 * GPT-2's byte -> character map: the printable Latin-1 bytes stand for themselves; the
 * other 68 (0-32, 127-160, 173) become U+0100 onwards, in byte order.
 */
static uint32_t byte_to_cp(uint8_t b)
{
	if (b <= 32)
		return 256 + b;
	if (b >= 127 && b <= 160)
		return 256 + 33 + (b - 127);
	if (b == 173)
		return 256 + 33 + 34;
	return b;
}

/* The inverse: the byte a character stands for, or -1. */
static int cp_to_byte(uint32_t cp)
{
	if (cp < 256)
		return (cp <= 32 || (cp >= 127 && cp <= 160) || cp == 173) ? -1 : (int)cp;
	if (cp < 256 + 33)
		return (int)(cp - 256);
	if (cp < 256 + 33 + 34)
		return (int)(cp - 256 - 33 + 127);
	if (cp == 256 + 33 + 34)
		return 173;
	return -1;
}

size_t kvp_bpe_byte_char(uint8_t b, char out[2])
{
	uint32_t cp = byte_to_cp(b);

	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	out[0] = (char)(0xc0 | cp >> 6);
	out[1] = (char)(0x80 | (cp & 0x3f));
	return 2;
}

size_t kvp_bpe_decode_piece(const char *piece, size_t n, char *out)
{
	const uint8_t *p = (const uint8_t *)piece;
	size_t o = 0;

	for (size_t i = 0; i < n;) {
		size_t cl = kvp_utf8_char_len(p + i, n - i);
		uint32_t cp;
		int b = -1;

		if (cl == 2) {
			cp = (uint32_t)(p[i] & 0x1f) << 6 | (p[i + 1] & 0x3f);
			b = cp_to_byte(cp);
		} else if (cl == 1) {
			b = cp_to_byte(p[i]);
		}
		if (b >= 0) {
			out[o++] = (char)b;
			i += cl;
		} else { /* not a mapped character: its bytes as they are */
			cl = cl ? cl : 1;
			memcpy(out + o, p + i, cl);
			o += cl;
			i += cl;
		}
	}
	return o;
}

static uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Slot of the merge (l, r), or -1. */
static int64_t merge_find(const struct kvp_bpe_merges *m, int32_t l, int32_t r)
{
	uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;

	if (!m->n)
		return -1;
	for (uint64_t i = mix64(key);; i++) {
		uint64_t k = m->key[i & m->mask];

		if (k == key)
			return (int64_t)(i & m->mask);
		if (k == UINT64_MAX)
			return -1;
	}
}

int kvp_bpe_merges_build(struct kvp_tokenizer *t, const char *const *merges, const uint32_t *lens,
			 uint32_t n, char *err, size_t errlen)
{
	struct kvp_bpe_merges *m = &t->merges;
	size_t cap = 16;
	char cat[2 * KVP_PIECE_MAX + 1];

	while (cap < (size_t)n + n / 2 + 1)
		cap *= 2;
	m->key = malloc(cap * sizeof(*m->key));
	m->rank = malloc(cap * sizeof(*m->rank));
	m->result = malloc(cap * sizeof(*m->result));
	if (!m->key || !m->rank || !m->result)
		return -ENOMEM;
	memset(m->key, 0xff, cap * sizeof(*m->key));
	m->mask = (uint32_t)cap - 1;
	for (uint32_t i = 0; i < n; i++) {
		const char *s = merges[i], *sp;
		uint32_t len = lens[i];
		int32_t l, r, res;
		uint64_t key;

		/* "left right": the first space after the first byte (a piece never holds a
		 * raw space in a byte-level vocabulary, but the left one may be a lone space) */
		sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
		if (!sp)
			continue; /* malformed: no merge can use it */
		l = kvp_vocab_lookup(t, s, (size_t)(sp - s));
		r = kvp_vocab_lookup(t, sp + 1, len - (size_t)(sp - s) - 1);
		if (l < 0 || r < 0 || len - 1 > sizeof(cat))
			continue;
		memcpy(cat, s, (size_t)(sp - s));
		memcpy(cat + (sp - s), sp + 1, len - (size_t)(sp - s) - 1);
		res = kvp_vocab_lookup(t, cat, len - 1);
		if (res < 0 || merge_find(m, l, r) >= 0) /* a repeated pair keeps its first rank */
			continue;
		key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
		for (uint64_t h = mix64(key);; h++) {
			if (m->key[h & m->mask] == UINT64_MAX) {
				m->key[h & m->mask] = key;
				m->rank[h & m->mask] = i;
				m->result[h & m->mask] = res;
				break;
			}
		}
		m->n++;
	}
	(void)err;
	(void)errlen;
	return 0;
}

void kvp_bpe_merges_deinit(struct kvp_bpe_merges *m)
{
	free(m->key);
	free(m->rank);
	free(m->result);
	memset(m, 0, sizeof(*m));
}

struct sym {
	int32_t id;   /* token of the bytes so far, -1 for a byte with no token */
	uint32_t len; /* bytes; 0: merged into its left neighbour */
	int32_t prev, next;
};

/* A candidate merge of symbol left with its next. */
struct cache_slot {
	uint8_t wlen; /* 0: empty */
	uint8_t n_ids;
	char word[CACHE_WORD];
	int32_t ids[CACHE_IDS];
};

/* Per-call state of kvp_bpe_encode(). */
struct kvp_bpe_ctx {
	struct kvp_pretok_state *st;
	const struct kvp_tokenizer *t;
	struct kvp_ids *out;
	struct sym *sym;
	struct kvp_merge *heap;
	char *map;  /* a word spelled in mapped characters (ignore_merges) */
	size_t cap; /* bytes of the longest word the buffers hold */
	struct cache_slot *cache;
	uint32_t cache_mask;
};

static int grow(struct kvp_bpe_ctx *c, size_t n)
{
	size_t cap = c->cap ? c->cap : 64;
	void *a, *b, *d;

	while (cap < n)
		cap *= 2;
	a = realloc(c->sym, cap * sizeof(*c->sym));
	if (a)
		c->sym = a;
	b = realloc(c->heap, 3 * cap * sizeof(*c->heap)); /* n - 1 pairs, + 2 per merge */
	if (b)
		c->heap = b;
	d = realloc(c->map, 2 * cap);
	if (d)
		c->map = d;
	if (!a || !b || !d)
		return -ENOMEM;
	c->cap = cap;
	return 0;
}

static void queue_pair(const struct kvp_bpe_ctx *c, int32_t i, size_t *nh)
{
	const struct sym *s = c->sym;
	int32_t j = i >= 0 ? s[i].next : -1;
	int64_t slot;

	if (j < 0 || s[i].id < 0 || s[j].id < 0)
		return;
	slot = merge_find(&c->t->merges, s[i].id, s[j].id);
	if (slot >= 0)
		kvp_merge_push(c->heap, nh,
			       (struct kvp_merge){ (float)c->t->merges.rank[slot], i,
						   s[i].len + s[j].len });
}

static void put_id(const struct kvp_bpe_ctx *c, int32_t id)
{
	if (id >= 0)
		kvp_ids_put(c->out, id);
	else if (c->t->unk >= 0)
		kvp_ids_put(c->out, c->t->unk);
	/* else: a byte the vocabulary cannot spell (no real vocabulary lacks one) */
}

static uint64_t hash_word(const char *w, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)w[i]) * 0x100000001b3ull;
	return h;
}

static int encode_word(void *ctx, const char *w, size_t n)
{
	struct kvp_bpe_ctx *c = ctx;
	const struct kvp_tokenizer *t = c->t;
	struct cache_slot *slot = NULL;
	size_t nh = 0, first = c->out->count;
	int32_t n_sym = (int32_t)n;

	if (n == 1) {
		put_id(c, t->byte_id[(uint8_t)w[0]]);
		return 0;
	}
	if (n > c->cap && grow(c, n))
		return -ENOMEM;
	if (t->ignore_merges && n <= KVP_PIECE_MAX) {
		size_t ml = 0;
		int32_t id;

		for (size_t i = 0; i < n; i++) {
			memcpy(c->map + ml, t->byte_char[(uint8_t)w[i]],
			       t->byte_char_len[(uint8_t)w[i]]);
			ml += t->byte_char_len[(uint8_t)w[i]];
		}
		id = ml <= KVP_PIECE_MAX ? kvp_vocab_lookup(t, c->map, ml) : -1;
		if (id >= 0) {
			kvp_ids_put(c->out, id);
			return 0;
		}
	}
	if (c->cache && n <= CACHE_WORD) {
		slot = &c->cache[hash_word(w, n) & c->cache_mask];
		if (slot->wlen == n && !memcmp(slot->word, w, n)) {
			for (unsigned int i = 0; i < slot->n_ids; i++)
				kvp_ids_put(c->out, slot->ids[i]);
			return 0;
		}
	}
	for (int32_t i = 0; i < n_sym; i++)
		c->sym[i] = (struct sym){ .id = t->byte_id[(uint8_t)w[i]],
					  .len = 1,
					  .prev = i - 1,
					  .next = i + 1 < n_sym ? i + 1 : -1 };
	for (int32_t i = 0; i + 1 < n_sym; i++)
		queue_pair(c, i, &nh);
	while (nh) {
		struct kvp_merge e = kvp_merge_pop(c->heap, &nh);
		struct sym *s = c->sym;
		int32_t i = e.left, j = s[i].next;
		int64_t m;

		if (!s[i].len || j < 0 || s[i].len + s[j].len != e.len)
			continue;
		m = merge_find(&t->merges, s[i].id, s[j].id);
		s[i].id = t->merges.result[m];
		s[i].len = e.len;
		s[j].len = 0;
		s[i].next = s[j].next;
		if (s[j].next >= 0)
			s[s[j].next].prev = i;
		queue_pair(c, s[i].prev, &nh);
		queue_pair(c, i, &nh);
	}
	for (int32_t i = 0; i >= 0; i = c->sym[i].next)
		put_id(c, c->sym[i].id);
	if (slot && c->out->count - first <= CACHE_IDS && c->out->count <= c->out->cap) {
		slot->wlen = (uint8_t)n;
		slot->n_ids = (uint8_t)(c->out->count - first);
		memcpy(slot->word, w, n);
		memcpy(slot->ids, c->out->ids + first, slot->n_ids * sizeof(int32_t));
	}
	return 0;
}

int kvp_bpe_ctx_new(struct kvp_bpe_ctx **out, const struct kvp_tokenizer *t, size_t text_len,
		    struct kvp_ids *ids)
{
	struct kvp_bpe_ctx *c = calloc(1, sizeof(*c));
	int r;

	*out = NULL;
	if (!c)
		return -ENOMEM;
	c->t = t;
	c->out = ids;
	r = kvp_pretok_state_new(&c->st, t->pre);
	if (r) {
		free(c);
		return r;
	}
	if (text_len >= CACHE_MIN_TEXT) {
		size_t slots = 256;

		while (slots < text_len / 16 && slots < 4096)
			slots *= 2;
		c->cache = calloc(slots, sizeof(*c->cache)); /* no cache is only slower */
		c->cache_mask = c->cache ? (uint32_t)slots - 1 : 0;
	}
	*out = c;
	return 0;
}

void kvp_bpe_ctx_free(struct kvp_bpe_ctx *c)
{
	if (!c)
		return;
	kvp_pretok_state_free(c->st);
	free(c->sym);
	free(c->heap);
	free(c->map);
	free(c->cache);
	free(c);
}

int kvp_bpe_encode(struct kvp_bpe_ctx *c, const char *text, size_t len)
{
	return len ? kvp_pretok_split(c->t->pre, c->st, text, len, encode_word, c) : 0;
}
