/* SPDX-License-Identifier: MIT */
/*
 * vocab.c - the shared vocabulary of every tokenizer: pieces and their decoded bytes,
 * token types, special ids, the piece hash, the special tokens a text may spell, and
 * the end-of-generation set; built from GGUF metadata (tokenizer.ggml.*) or from
 * arrays.  The per-model work is elsewhere: spm.c, bpe.c (+ pretok.c), encode.c.
 *
 * Pieces are found through an open-addressing hash table built once.  Everything here
 * runs at load time; the result is immutable and shared by every thread.
 */
#include "compute/text/vocab.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/gguf.h"
#include "compute/model.h"
#include "compute/text/pretok.h"

/* Everything a tokenizer is made of, however it was read. */
struct build_args {
	enum kvp_tok_model model;
	const char *const *pieces;
	const float *scores;  /* or NULL */
	const int32_t *types; /* or NULL */
	uint32_t n;
	int32_t bos, eos, unk, eot, eom;	/* -1: none */
	int add_bos, add_eos, add_space_prefix; /* -1: the model's default */
	const char *const *merges;		/* BPE: n_merges "left right" strings */
	const uint32_t *merge_lens;
	uint32_t n_merges;
	const char *pre; /* BPE: tokenizer.ggml.pre, or NULL */
	size_t pre_len;
};

/*
 * Control tokens that end a turn in the families we know.  Matched by text, because
 * files name only eos (and sometimes eot/eom) by id, while instruct models stop on
 * their end-of-turn token.
 */
static const char *const eog_texts[] = {
	"<|eot_id|>",
	"<|eom_id|>",
	"<|end_of_text|>",
	"<|im_end|>",
	"<|end|>",
	"<end_of_turn>",
	"<|endoftext|>",
	"<|EOT|>",
	"<EOT>",
	"_<EOT>",
	/* DeepSeek; octal escapes end after three digits, so no split literal is needed */
	"<\357\275\234end\342\226\201of\342\226\201sentence\357\275\234>",
	"</s>",
};

static uint64_t hash_bytes(const char *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)p[i]) * 0x100000001b3ull;
	return h;
}

int32_t kvp_vocab_lookup(const struct kvp_tokenizer *t, const char *p, size_t n)
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

static int32_t valid_id(int32_t id, uint32_t n)
{
	return id >= 0 && (uint32_t)id < n ? id : -1;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Longest first, so "<|im_start|>" wins over a "<|im" prefix; then by id. */
static int sort_special(struct kvp_tokenizer *t)
{
	uint64_t *k = malloc((t->n_special ? t->n_special : 1) * sizeof(*k));

	if (!k)
		return -ENOMEM;
	for (uint32_t i = 0; i < t->n_special; i++)
		k[i] = (uint64_t)(KVP_PIECE_MAX - t->piece_len[t->special[i]]) << 32 |
		       (uint32_t)t->special[i];
	qsort(k, t->n_special, sizeof(*k), u64_cmp);
	for (uint32_t i = 0; i < t->n_special; i++)
		t->special[i] = (int32_t)(uint32_t)k[i];
	free(k);
	return 0;
}

/* Decoded text of token i into d; returns its length (never more than the piece's). */
static size_t decode_piece(const struct kvp_tokenizer *t, uint32_t i, char *d)
{
	const char *p = t->piece[i];
	uint32_t l = t->piece_len[i];
	size_t dl = 0;
	int b = byte_piece(p, l);

	if (t->type[i] == KVP_TOK_BYTE && b >= 0) {
		d[0] = (char)b;
		return 1;
	}
	if (t->type[i] != KVP_TOK_NORMAL && t->type[i] != KVP_TOK_USER)
		return 0;
	if (t->model == KVP_TOKM_BPE) {
		if (t->type[i] == KVP_TOK_USER) { /* added tokens are stored as plain text */
			memcpy(d, p, l);
			return l;
		}
		return kvp_bpe_decode_piece(p, l, d);
	}
	for (uint32_t k = 0; k < l;) {
		if (t->spm && l - k >= 3 && memcmp(p + k, KVP_SPM_SPACE, 3) == 0) {
			d[dl++] = ' ';
			k += 3;
		} else {
			d[dl++] = p[k++];
		}
	}
	return dl;
}

static int build(struct kvp_tokenizer **out, const struct build_args *a, char *err, size_t errlen)
{
	struct kvp_tokenizer *t;
	size_t arena = 0, cap = 16, off = 0;
	uint32_t n = a->n;
	int r = -ENOMEM;

	*out = NULL;
	if (!n || n > (1u << 24)) {
		if (err && errlen)
			snprintf(err, errlen,
				 "tokenizer: vocabulary of %u tokens (want 1 .. 16777216)", n);
		return -EINVAL;
	}
	for (uint32_t i = 0; i < n; i++) {
		size_t l = strlen(a->pieces[i]);

		if (l > KVP_PIECE_MAX) {
			if (err && errlen)
				snprintf(err, errlen,
					 "tokenizer: token %u is %zu bytes long (at most %u)", i, l,
					 KVP_PIECE_MAX);
			return -EINVAL;
		}
		arena += 2 * (l + 1);
	}
	while (cap < 2 * (size_t)n)
		cap *= 2;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->n = n;
	t->model = a->model;
	t->piece = calloc(n, sizeof(*t->piece));
	t->piece_len = calloc(n, sizeof(*t->piece_len));
	t->text = calloc(n, sizeof(*t->text));
	t->text_len = calloc(n, sizeof(*t->text_len));
	t->score = calloc(n, sizeof(*t->score));
	t->type = calloc(n, sizeof(*t->type));
	t->eog = calloc(n, 1);
	t->special = calloc(n, sizeof(*t->special));
	t->ht = calloc(cap, sizeof(*t->ht));
	t->arena = malloc(arena ? arena : 1);
	if (!t->piece || !t->piece_len || !t->text || !t->text_len || !t->score || !t->type ||
	    !t->eog || !t->special || !t->ht || !t->arena)
		goto err_free;
	t->ht_mask = (uint32_t)cap - 1;
	t->bos = valid_id(a->bos, n);
	t->eos = valid_id(a->eos, n);
	t->unk = valid_id(a->unk, n);
	t->eot = valid_id(a->eot, n);
	t->eom = valid_id(a->eom, n);
	t->add_eos = a->add_eos > 0 && t->eos >= 0;
	memset(t->byte_id, 0xff, sizeof(t->byte_id));
	for (uint32_t i = 0; i < n; i++) {
		size_t l = strlen(a->pieces[i]);
		int b = byte_piece(a->pieces[i], l);

		memcpy(t->arena + off, a->pieces[i], l + 1);
		t->piece[i] = t->arena + off;
		t->piece_len[i] = (uint32_t)l;
		off += l + 1;
		t->score[i] = a->scores && isfinite(a->scores[i]) ? a->scores[i] : 0.0f;
		t->type[i] = a->types ? a->types[i] : (b >= 0 ? KVP_TOK_BYTE : KVP_TOK_NORMAL);
		if (t->type[i] < KVP_TOK_NORMAL || t->type[i] > KVP_TOK_BYTE)
			t->type[i] = KVP_TOK_NORMAL; /* undefined types read as normal */
		if (a->model == KVP_TOKM_SPM && t->type[i] == KVP_TOK_BYTE && b >= 0 &&
		    t->byte_id[b] < 0)
			t->byte_id[b] = (int32_t)i;
		if (l == 3 && memcmp(a->pieces[i], KVP_SPM_SPACE, 3) == 0)
			t->spm = a->model == KVP_TOKM_SPM;
		if (kvp_vocab_lookup(t, a->pieces[i], l) < 0) { /* the first of duplicates wins */
			for (uint64_t h = hash_bytes(a->pieces[i], l);; h++) {
				if (!t->ht[h & t->ht_mask]) {
					t->ht[h & t->ht_mask] = i + 1;
					break;
				}
			}
		}
		if (l && (t->type[i] == KVP_TOK_CONTROL || t->type[i] == KVP_TOK_USER ||
			  t->type[i] == KVP_TOK_UNKNOWN)) {
			t->special[t->n_special++] = (int32_t)i;
			t->special_first[(uint8_t)a->pieces[i][0]] = 1;
		}
	}
	if (sort_special(t))
		goto err_free;
	/* SentencePiece adds the leading space unless told not to; byte-level BPE never */
	t->add_space_prefix = a->model == KVP_TOKM_SPM && t->spm && a->add_space_prefix != 0;

	if (a->model == KVP_TOKM_BPE) {
		for (unsigned int b = 0; b < 256; b++) {
			t->byte_char_len[b] = (uint8_t)kvp_bpe_byte_char((uint8_t)b,
									 t->byte_char[b]);
			t->byte_id[b] = kvp_vocab_lookup(t, t->byte_char[b], t->byte_char_len[b]);
		}
		r = kvp_pretok_new(&t->pre, a->pre, a->pre_len, err, errlen);
		if (r)
			goto err_free;
		t->ignore_merges = kvp_pretok_ignore_merges(t->pre);
		r = kvp_bpe_merges_build(t, a->merges, a->merge_lens, a->n_merges, err, errlen);
		if (r)
			goto err_free;
		t->add_bos = a->add_bos < 0 ? kvp_pretok_adds_bos(t->pre) : a->add_bos > 0;
	} else {
		t->add_bos = a->add_bos != 0;
	}
	t->add_bos = t->add_bos && t->bos >= 0;

	/* decoded text, after the model is known (byte-level pieces decode differently) */
	for (uint32_t i = 0; i < n; i++) {
		char *d = t->arena + off;
		size_t dl = decode_piece(t, i, d);

		t->text[i] = d;
		t->text_len[i] = (uint32_t)dl;
		off += dl + 1;
	}

	/* end of generation: the ids the file names, and end-of-turn control tokens */
	if (t->eos >= 0)
		t->eog[t->eos] = 1;
	if (t->eot >= 0)
		t->eog[t->eot] = 1;
	if (t->eom >= 0)
		t->eog[t->eom] = 1;
	for (size_t k = 0; k < sizeof(eog_texts) / sizeof(eog_texts[0]); k++) {
		int32_t id = kvp_vocab_lookup(t, eog_texts[k], strlen(eog_texts[k]));

		if (id >= 0 && (t->type[id] == KVP_TOK_CONTROL || t->type[id] == KVP_TOK_USER))
			t->eog[id] = 1;
	}
	*out = t;
	return 0;
err_free:
	if (r == -ENOMEM && err && errlen)
		snprintf(err, errlen, "tokenizer: out of memory");
	kvp_tokenizer_free(t);
	return r;
}

int kvp_tokenizer_build(struct kvp_tokenizer **out, const char *const *pieces, const float *scores,
			const int32_t *types, uint32_t n, int32_t bos, int32_t eos, int32_t unk,
			int add_bos)
{
	struct build_args a = {
		.model = KVP_TOKM_SPM,
		.pieces = pieces,
		.scores = scores,
		.types = types,
		.n = n,
		.bos = bos,
		.eos = eos,
		.unk = unk,
		.eot = -1,
		.eom = -1,
		.add_bos = !!add_bos,
		.add_eos = 0,
		.add_space_prefix = 1,
	};

	return build(out, &a, NULL, 0);
}

/* Copy a GGUF string array out as NUL-terminated strings; -EBADMSG if one has a NUL. */
static int copy_strings(const struct kvp_gguf_kv *kv, size_t max_len, const char ***strs,
			uint32_t **lens, char **buf)
{
	const uint8_t *p = kv->val;
	size_t total = 0, off = 0;
	struct kvp_gguf_str s;

	for (uint64_t i = 0; i < kv->arr_n; i++) {
		s = kvp_gguf_str_next(&p);
		if (s.len > max_len || memchr(s.p, 0, s.len))
			return -EBADMSG;
		total += s.len + 1;
	}
	*strs = calloc(kv->arr_n ? kv->arr_n : 1, sizeof(**strs));
	if (lens)
		*lens = calloc(kv->arr_n ? kv->arr_n : 1, sizeof(**lens));
	*buf = malloc(total ? total : 1);
	if (!*strs || (lens && !*lens) || !*buf)
		return -ENOMEM;
	p = kv->val;
	for (uint64_t i = 0; i < kv->arr_n; i++) {
		s = kvp_gguf_str_next(&p);
		memcpy(*buf + off, s.p, s.len);
		(*buf)[off + s.len] = 0;
		(*strs)[i] = *buf + off;
		if (lens)
			(*lens)[i] = (uint32_t)s.len;
		off += s.len + 1;
	}
	return 0;
}

static int32_t get_id(const struct kvp_gguf *g, const char *key, int32_t dflt)
{
	uint64_t v;

	if (kvp_gguf_get_uint(g, key, UINT32_MAX, &v))
		return dflt;
	return v <= INT32_MAX ? (int32_t)v : -1;
}

static int get_flag(const struct kvp_gguf *g, const char *key)
{
	int v;

	return kvp_gguf_get_bool(g, key, &v) ? -1 : !!v;
}

int kvp_tokenizer_new_gguf(struct kvp_tokenizer **out, const struct kvp_gguf *g, uint32_t n_vocab,
			   char *err, size_t errlen)
{
	const struct kvp_gguf_kv *toks, *sc = NULL, *ty = NULL, *mg = NULL;
	struct kvp_gguf_str model, pre;
	struct build_args a = { .add_bos = -1, .add_eos = -1, .add_space_prefix = -1 };
	const char **pieces = NULL, **merges = NULL;
	uint32_t *merge_lens = NULL;
	char *buf = NULL, *mbuf = NULL;
	float *scores = NULL;
	int32_t *types = NULL;
	int r = -EBADMSG, bpe;
	const char *why = "bad tokenizer.ggml.tokens/scores/token_type";

	*out = NULL;
	if (kvp_gguf_get_str(g, "tokenizer.ggml.model", &model) ||
	    !(kvp_gguf_str_eq(model, "llama") || kvp_gguf_str_eq(model, "gpt2"))) {
		if (err && errlen) {
			if (kvp_gguf_get_str(g, "tokenizer.ggml.model", &model))
				snprintf(err, errlen,
					 "tokenizer: no tokenizer.ggml.model in the file");
			else
				snprintf(
					err, errlen,
					"tokenizer: tokenizer.ggml.model '%.*s' is not supported (known: llama, gpt2)",
					(int)(model.len > 64 ? 64 : model.len), model.p);
		}
		return -ENOTSUP;
	}
	bpe = kvp_gguf_str_eq(model, "gpt2");
	if (kvp_gguf_get_arr(g, "tokenizer.ggml.tokens", KVP_GGUF_STRING, &toks) ||
	    (n_vocab && toks->arr_n != n_vocab) || !toks->arr_n || toks->arr_n > (1u << 24)) {
		if (err && errlen)
			snprintf(err, errlen,
				 "tokenizer: tokenizer.ggml.tokens missing or not %u strings",
				 n_vocab);
		return -EBADMSG;
	}
	a.n = (uint32_t)toks->arr_n;
	if (kvp_gguf_find(g, "tokenizer.ggml.scores") &&
	    (kvp_gguf_get_arr(g, "tokenizer.ggml.scores", KVP_GGUF_F32, &sc) || sc->arr_n != a.n))
		goto bad;
	if (kvp_gguf_find(g, "tokenizer.ggml.token_type") &&
	    (kvp_gguf_get_arr(g, "tokenizer.ggml.token_type", KVP_GGUF_I32, &ty) ||
	     ty->arr_n != a.n))
		goto bad;
	if (bpe) {
		why = "tokenizer.ggml.merges missing or malformed (byte-level BPE needs it)";
		if (kvp_gguf_get_arr(g, "tokenizer.ggml.merges", KVP_GGUF_STRING, &mg) ||
		    mg->arr_n > (1u << 24))
			goto bad;
		if (!kvp_gguf_get_str(g, "tokenizer.ggml.pre", &pre)) {
			a.pre = pre.p;
			a.pre_len = pre.len;
		}
	}
	a.model = bpe ? KVP_TOKM_BPE : KVP_TOKM_SPM;
	a.bos = get_id(g, "tokenizer.ggml.bos_token_id", bpe ? -1 : 1);
	a.eos = get_id(g, "tokenizer.ggml.eos_token_id", bpe ? -1 : 2);
	a.unk = get_id(g, "tokenizer.ggml.unknown_token_id", bpe ? -1 : 0);
	a.eot = get_id(g, "tokenizer.ggml.eot_token_id", -1);
	a.eom = get_id(g, "tokenizer.ggml.eom_token_id", -1);
	a.add_bos = get_flag(g, "tokenizer.ggml.add_bos_token");
	a.add_eos = get_flag(g, "tokenizer.ggml.add_eos_token");
	a.add_space_prefix = get_flag(g, "tokenizer.ggml.add_space_prefix");

	/* pieces in the file are not NUL-terminated: copy them out once */
	why = "bad tokenizer.ggml.tokens (a token too long or holding a NUL byte)";
	r = copy_strings(toks, KVP_PIECE_MAX, &pieces, NULL, &buf);
	if (r)
		goto out;
	if (mg) {
		why = "bad tokenizer.ggml.merges (an entry too long or holding a NUL byte)";
		r = copy_strings(mg, 2 * KVP_PIECE_MAX + 1, &merges, &merge_lens, &mbuf);
		if (r)
			goto out;
		a.merges = merges;
		a.merge_lens = merge_lens;
		a.n_merges = (uint32_t)mg->arr_n;
	}
	scores = sc ? malloc((size_t)a.n * sizeof(float)) : NULL;
	types = ty ? malloc((size_t)a.n * sizeof(int32_t)) : NULL;
	if ((sc && !scores) || (ty && !types)) {
		r = -ENOMEM;
		goto out;
	}
	if (sc)
		memcpy(scores, sc->val, (size_t)a.n * sizeof(float));
	if (ty)
		memcpy(types, ty->val, (size_t)a.n * sizeof(int32_t));
	a.pieces = pieces;
	a.scores = scores;
	a.types = types;
	r = build(out, &a, err, errlen);
	if (r && err && errlen && !err[0])
		snprintf(err, errlen, "tokenizer: %s", strerror(-r));
	goto out_free;
bad:
	r = -EBADMSG;
out:
	if (err && errlen)
		snprintf(err, errlen, "tokenizer: %s", r == -ENOMEM ? "out of memory" : why);
out_free:
	free(pieces);
	free(buf);
	free(merges);
	free(merge_lens);
	free(mbuf);
	free(scores);
	free(types);
	return r;
}

int kvp_tokenizer_new(struct kvp_tokenizer **out, const struct kvp_model *m, char *err,
		      size_t errlen)
{
	if (err && errlen)
		err[0] = 0;
	return kvp_tokenizer_new_gguf(out, kvp_model_gguf(m), kvp_model_hparams(m)->n_vocab, err,
				      errlen);
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
	free(t->eog);
	free(t->special);
	free(t->ht);
	free(t->arena);
	kvp_bpe_merges_deinit(&t->merges);
	kvp_pretok_free(t->pre);
	free(t);
}

uint32_t kvp_tokenizer_n_vocab(const struct kvp_tokenizer *t)
{
	return t->n;
}
int32_t kvp_tokenizer_bos(const struct kvp_tokenizer *t)
{
	return t->bos;
}
int32_t kvp_tokenizer_eos(const struct kvp_tokenizer *t)
{
	return t->eos;
}

const char *kvp_tokenizer_model_name(const struct kvp_tokenizer *t)
{
	return t->model == KVP_TOKM_BPE ? "gpt2" : "llama";
}

const char *kvp_tokenizer_pre_name(const struct kvp_tokenizer *t)
{
	return t->pre ? kvp_pretok_name(t->pre) : "";
}

bool kvp_tokenizer_is_eog(const struct kvp_tokenizer *t, int32_t id)
{
	return id >= 0 && (uint32_t)id < t->n && t->eog[id];
}

size_t kvp_tokenizer_eog(const struct kvp_tokenizer *t, int32_t *ids, size_t cap)
{
	size_t k = 0;

	for (uint32_t i = 0; i < t->n; i++) {
		if (!t->eog[i])
			continue;
		if (k < cap)
			ids[k] = (int32_t)i;
		k++;
	}
	return k;
}

int kvp_tokenizer_type(const struct kvp_tokenizer *t, int32_t id)
{
	return id >= 0 && (uint32_t)id < t->n ? t->type[id] : 0;
}

int32_t kvp_tokenizer_find(const struct kvp_tokenizer *t, const char *text, size_t len)
{
	return len <= KVP_PIECE_MAX ? kvp_vocab_lookup(t, text, len) : -1;
}

const char *kvp_tokenizer_token_text(const struct kvp_tokenizer *t, int32_t id, size_t *len)
{
	if (id < 0 || (uint32_t)id >= t->n) {
		*len = 0;
		return NULL;
	}
	*len = t->piece_len[id];
	return t->piece[id];
}

static int merge_before(const struct kvp_merge *a, const struct kvp_merge *b)
{
	return a->key < b->key || (a->key == b->key && a->left < b->left);
}

void kvp_merge_push(struct kvp_merge *h, size_t *n, struct kvp_merge e)
{
	size_t i = (*n)++;

	while (i && merge_before(&e, &h[(i - 1) / 2])) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = e;
}

struct kvp_merge kvp_merge_pop(struct kvp_merge *h, size_t *n)
{
	struct kvp_merge top = h[0], last = h[--(*n)];
	size_t i = 0;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= *n)
			break;
		if (c + 1 < *n && merge_before(&h[c + 1], &h[c]))
			c++;
		if (!merge_before(&h[c], &last))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = last;
	return top;
}
