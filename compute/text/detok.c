/* SPDX-License-Identifier: MIT */
/*
 * detok.c - token ids back to text: one token's bytes (kvp_tokenizer_piece(), what the
 * generation loops stream), a whole sequence (kvp_tokenizer_decode()), and the UTF-8
 * stream that holds back a character split over several tokens - byte-level BPE splits
 * most non-Latin characters, and a client must only ever see whole characters.
 *
 * No state but the caller's struct kvp_utf8_stream; any thread.
 */
#include <errno.h>
#include <string.h>

#include "compute/text/vocab.h"

const char *kvp_tokenizer_piece(const struct kvp_tokenizer *t, int32_t id, size_t *len)
{
	if (id < 0 || (uint32_t)id >= t->n) {
		*len = 0;
		return NULL;
	}
	*len = t->text_len[id];
	return t->text[id];
}

long kvp_tokenizer_decode(const struct kvp_tokenizer *t, const int32_t *ids, size_t n,
			  unsigned int flags, char *out, size_t cap)
{
	/* the space SentencePiece put before the first word is not the text's */
	int strip = t->add_space_prefix && !(flags & KVP_DETOK_KEEP_PREFIX_SPACE);
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		const char *p;
		size_t l;

		if (ids[i] < 0 || (uint32_t)ids[i] >= t->n)
			return -EINVAL;
		if ((flags & KVP_DETOK_RENDER_SPECIAL) && t->type[ids[i]] == KVP_TOK_CONTROL) {
			p = t->piece[ids[i]];
			l = t->piece_len[ids[i]];
		} else {
			p = t->text[ids[i]];
			l = t->text_len[ids[i]];
		}
		if (strip && l) {
			strip = 0;
			if (p[0] == ' ' && t->type[ids[i]] == KVP_TOK_NORMAL) {
				p++;
				l--;
			}
		}
		if (o < cap)
			memcpy(out + o, p, l <= cap - o ? l : cap - o);
		o += l;
	}
	return (long)o;
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
				if (s->buf[0] == 0xe0)
					lo = 0xa0;
				if (s->buf[0] == 0xed)
					hi = 0x9f;
				if (s->buf[0] == 0xf0)
					lo = 0x90;
				if (s->buf[0] == 0xf4)
					hi = 0x8f;
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
			memcpy(out + o, replacement,
			       3); /* cut short: drop it, then look at c afresh */
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
