/* SPDX-License-Identifier: MIT */
/*
 * vocab.c - the vocabulary's pieces from kvpoold (see vocab.h).
 *
 * DETOKENIZE of a sequence is the concatenation of its ids' pieces (the one exception:
 * SentencePiece's word-start space is dropped from the first piece), so ids are read in
 * runs with a separator between them: a one-byte piece that cannot occur inside another
 * (0xff, 0xfe, ...: bytes that are never UTF-8, learned into no merge) and that starts
 * the run, so nothing is dropped from a real piece either.  A run whose text does not
 * split into its pieces (a vocabulary with such a merge after all) is read id by id,
 * each behind the separator; a vocabulary without any such byte token is read id by id
 * alone (then a SentencePiece piece's leading space is lost: documented in docs/http.md).
 */
#include "ipc/http/vocab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvpool/kvpool.h"
#include "util/buf.h"

#define RUN_IDS 512 /* ids per DETOKENIZE: well inside max_prompt_tokens and outq_bytes */

int kvp_http_vocab_split(const char *text, size_t len, char sep, uint32_t n, uint32_t *off)
{
	uint32_t k = 0;

	if (!len || text[0] != sep || text[len - 1] != sep)
		return -EINVAL;
	for (size_t i = 0; i + 1 < len; i++) {
		if (text[i] != sep)
			continue;
		if (k == n)
			return -EINVAL;
		off[k++] = (uint32_t)i + 1;
	}
	if (k != n)
		return -EINVAL;
	off[n] = (uint32_t)len;
	return 0;
}

/* The id of a one-byte piece no other piece contains, or -1. */
static int32_t find_sep(struct kvp_client *c, char *sep)
{
	static const unsigned char cand[] = { 0xff, 0xfe, 0xfd, 0xfc, 0xfb,
					      0xfa, 0xf9, 0xf8, 0xc0, 0xc1 };

	for (size_t i = 0; i < sizeof(cand); i++) {
		char b = (char)cand[i], *text = NULL;
		int32_t *ids = NULL, id;
		size_t n = 0, len = 0;
		bool ok;

		if (kvp_client_tokenize(c, &b, 1, KVP_TOKENIZE_NO_BOS, &ids, &n))
			continue;
		id = n == 1 ? ids[0] : -1;
		free(ids);
		if (id < 0)
			continue;
		ok = !kvp_client_detokenize(c, &id, 1, KVP_DETOKENIZE_RENDER_SPECIAL, &text,
					    &len) &&
		     len == 1 && text[0] == b;
		free(text);
		if (ok) {
			*sep = b;
			return id;
		}
	}
	return -1;
}

/* Ids [base, base + n) one by one (behind @sep_id when there is one) onto @v. */
static int read_alone(struct kvp_client *c, struct kvp_buf *b, uint32_t *off, uint32_t base,
		      uint32_t n, int32_t sep_id)
{
	for (uint32_t i = 0; i < n; i++) {
		int32_t ids[2] = { sep_id, (int32_t)(base + i) };
		bool s = sep_id >= 0;
		char *text = NULL;
		size_t len = 0;
		int r;

		r = kvp_client_detokenize(c, s ? ids : ids + 1, s ? 2 : 1,
					  KVP_DETOKENIZE_RENDER_SPECIAL, &text, &len);
		if (r)
			return r;
		off[base + i] = (uint32_t)b->len;
		if (len >= (size_t)s)
			kvp_buf_add(b, text + s, len - s);
		free(text);
	}
	return 0;
}

int kvp_http_vocab_load(struct kvp_http_vocab **out, const char *socket_path, char *err, size_t cap)
{
	struct kvp_buf b = KVP_BUF_INIT;
	struct kvp_http_vocab *v;
	const struct kvp_welcome *w;
	struct kvp_client *c;
	int32_t *run = NULL, sep_id;
	uint32_t *pos = NULL;
	char sep = 0;
	int r;

	*out = NULL;
	r = kvp_client_connect(&c, socket_path);
	if (r) {
		snprintf(err, cap, "%s", c ? kvp_client_errmsg(c) : kvp_client_strerror(r));
		kvp_client_close(c);
		return r;
	}
	w = kvp_client_welcome(c);
	v = calloc(1, sizeof(*v));
	run = malloc((2 * RUN_IDS + 1) * sizeof(*run));
	pos = malloc((RUN_IDS + 1) * sizeof(*pos));
	if (v) {
		v->n = w->n_vocab;
		snprintf(v->model, sizeof(v->model), "%.64s", w->model);
		v->off = malloc(((size_t)v->n + 1) * sizeof(*v->off));
	}
	if (!v || !v->off || !run || !pos) {
		r = -ENOMEM;
		snprintf(err, cap, "out of memory");
		goto out;
	}
	sep_id = find_sep(c, &sep);
	for (uint32_t base = 0; base < v->n && !r; base += RUN_IDS) {
		uint32_t k = v->n - base < RUN_IDS ? v->n - base : RUN_IDS;
		char *text = NULL;
		size_t len = 0;

		if (sep_id < 0) {
			r = read_alone(c, &b, v->off, base, k, -1);
			continue;
		}
		for (uint32_t i = 0; i < k; i++) {
			run[2 * i] = sep_id;
			run[2 * i + 1] = (int32_t)(base + i);
		}
		run[2 * k] = sep_id;
		r = kvp_client_detokenize(c, run, 2 * k + 1, KVP_DETOKENIZE_RENDER_SPECIAL, &text,
					  &len);
		if (r)
			break;
		if (kvp_http_vocab_split(text, len, sep, k, pos)) {
			r = read_alone(c, &b, v->off, base, k, sep_id);
		} else {
			for (uint32_t i = 0; i < k; i++) {
				v->off[base + i] = (uint32_t)b.len;
				kvp_buf_add(&b, text + pos[i], pos[i + 1] - 1 - pos[i]);
			}
		}
		free(text);
	}
	if (r) {
		snprintf(err, cap, "reading the vocabulary: %s",
			 r < 0 ? kvp_client_errmsg(c) : kvp_client_strerror(r));
		goto out;
	}
	if (b.err || b.len > UINT32_MAX) {
		r = -ENOMEM;
		snprintf(err, cap, "out of memory");
		goto out;
	}
	v->off[v->n] = (uint32_t)b.len;
	v->bytes = b.p ? b.p : strdup("");
	b = (struct kvp_buf)KVP_BUF_INIT;
	if (!v->bytes) {
		r = -ENOMEM;
		snprintf(err, cap, "out of memory");
		goto out;
	}
	*out = v;
	v = NULL;
out:
	kvp_buf_deinit(&b);
	kvp_http_vocab_free(v);
	free(run);
	free(pos);
	kvp_client_close(c);
	return r;
}

void kvp_http_vocab_free(struct kvp_http_vocab *v)
{
	if (!v)
		return;
	free(v->off);
	free(v->bytes);
	free(v);
}

const char *kvp_http_vocab_piece(const struct kvp_http_vocab *v, int32_t id, size_t *len)
{
	if (!v || id < 0 || (uint32_t)id >= v->n) {
		*len = 0;
		return "";
	}
	*len = v->off[id + 1] - v->off[id];
	return v->bytes + v->off[id];
}
