/* SPDX-License-Identifier: MIT */
/*
 * mkvocab.c - read a family's tokenizer (vocabulary JSON, chat template text) for
 * kvpool-mkmodel, so a synthetic model can carry Llama 3's, Qwen2's or Llama 2's real
 * vocabulary, merges, special tokens and template.  JSON through jansson; every value is
 * checked for type and range, and an error names the key.  No global state; any thread.
 */
#include "compute/mkvocab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define MAX_TOKENS (1u << 24)

void kvp_mkmodel_vocab_free(struct kvp_mkmodel_vocab *v)
{
	if (!v)
		return;
	for (uint32_t i = 0; v->tokens && i < v->n_tokens; i++)
		free(v->tokens[i]);
	for (uint32_t i = 0; v->merges && i < v->n_merges; i++)
		free(v->merges[i]);
	free(v->tokens);
	free(v->merges);
	free(v->scores);
	free(v->types);
	free(v->model);
	free(v->pre);
	free(v->chat_template);
	free(v);
}

/* A JSON string without NUL bytes, copied; NULL with *bad set when it is not one. */
static char *dup_str(const json_t *j, int *bad)
{
	char *s;

	if (!json_is_string(j) || memchr(json_string_value(j), 0, json_string_length(j))) {
		*bad = 1;
		return NULL;
	}
	s = strdup(json_string_value(j));
	if (!s)
		*bad = -1;
	return s;
}

/* An array of strings; Return: 0, -EBADMSG, -ENOMEM. */
static int str_array(const json_t *a, char ***out, uint32_t *n)
{
	size_t k = json_array_size(a);
	int bad = 0;

	if (!json_is_array(a) || k > MAX_TOKENS)
		return -EBADMSG;
	*out = calloc(k ? k : 1, sizeof(**out));
	if (!*out)
		return -ENOMEM;
	*n = (uint32_t)k;
	for (size_t i = 0; i < k && !bad; i++)
		(*out)[i] = dup_str(json_array_get(a, i), &bad);
	return bad > 0 ? -EBADMSG : bad < 0 ? -ENOMEM : 0;
}

static int64_t get_id(const json_t *root, const char *key, int *bad)
{
	const json_t *j = json_object_get(root, key);

	if (!j || json_is_null(j))
		return -1;
	if (!json_is_integer(j) || json_integer_value(j) < 0 || json_integer_value(j) > INT32_MAX) {
		*bad = 1;
		return -1;
	}
	return json_integer_value(j);
}

static int get_flag(const json_t *root, const char *key, int *bad)
{
	const json_t *j = json_object_get(root, key);

	if (!j || json_is_null(j))
		return -1;
	if (!json_is_boolean(j)) {
		*bad = 1;
		return -1;
	}
	return json_is_true(j);
}

int kvp_mkmodel_vocab_load(struct kvp_mkmodel_vocab **out, const char *path, char *err,
			   size_t errlen)
{
	struct kvp_mkmodel_vocab *v;
	json_error_t je;
	json_t *root, *j;
	const char *key = "";
	int r = -EBADMSG, bad = 0;

	*out = NULL;
	root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	if (!root) {
		if (err && errlen)
			snprintf(err, errlen, "mkmodel: vocabulary %s: line %d: %s", path, je.line,
				 je.text);
		return je.line < 0 ? -ENOENT : -EBADMSG;
	}
	v = calloc(1, sizeof(*v));
	if (!v) {
		r = -ENOMEM;
		goto err_json;
	}
	if (!json_is_object(root))
		goto bad;
	key = "model";
	v->model = dup_str(json_object_get(root, "model"), &bad);
	if (bad || (strcmp(v->model, "llama") && strcmp(v->model, "gpt2")))
		goto bad;
	key = "pre";
	if ((j = json_object_get(root, "pre")) && !json_is_null(j) &&
	    (!(v->pre = dup_str(j, &bad)) || bad))
		goto bad;
	key = "tokens";
	r = str_array(json_object_get(root, "tokens"), &v->tokens, &v->n_tokens);
	if (r || !v->n_tokens) {
		r = r ? r : -EBADMSG;
		goto err_free;
	}
	r = -EBADMSG;
	key = "merges";
	if ((j = json_object_get(root, "merges")) && !json_is_null(j) &&
	    (r = str_array(j, &v->merges, &v->n_merges)))
		goto err_free;
	r = -EBADMSG;
	key = "scores";
	if ((j = json_object_get(root, "scores")) && !json_is_null(j)) {
		if (json_array_size(j) != v->n_tokens ||
		    !(v->scores = malloc(v->n_tokens * sizeof(float))))
			goto bad;
		for (uint32_t i = 0; i < v->n_tokens; i++) {
			if (!json_is_number(json_array_get(j, i)))
				goto bad;
			v->scores[i] = (float)json_number_value(json_array_get(j, i));
		}
	}
	key = "token_type";
	if ((j = json_object_get(root, "token_type")) && !json_is_null(j)) {
		if (json_array_size(j) != v->n_tokens ||
		    !(v->types = malloc(v->n_tokens * sizeof(int32_t))))
			goto bad;
		for (uint32_t i = 0; i < v->n_tokens; i++) {
			const json_t *e = json_array_get(j, i);

			if (!json_is_integer(e) || json_integer_value(e) < 0 ||
			    json_integer_value(e) > 6)
				goto bad;
			v->types[i] = (int32_t)json_integer_value(e);
		}
	}
	key = "*_token_id";
	v->bos = get_id(root, "bos_token_id", &bad);
	v->eos = get_id(root, "eos_token_id", &bad);
	v->unk = get_id(root, "unknown_token_id", &bad);
	v->eot = get_id(root, "eot_token_id", &bad);
	v->eom = get_id(root, "eom_token_id", &bad);
	v->pad = get_id(root, "padding_token_id", &bad);
	if (bad || v->bos >= v->n_tokens || v->eos >= v->n_tokens || v->unk >= v->n_tokens ||
	    v->eot >= v->n_tokens || v->eom >= v->n_tokens || v->pad >= v->n_tokens)
		goto bad;
	key = "add_*";
	v->add_bos = get_flag(root, "add_bos_token", &bad);
	v->add_eos = get_flag(root, "add_eos_token", &bad);
	v->add_space_prefix = get_flag(root, "add_space_prefix", &bad);
	if (bad)
		goto bad;
	key = "chat_template";
	if ((j = json_object_get(root, "chat_template")) && !json_is_null(j) &&
	    (!(v->chat_template = dup_str(j, &bad)) || bad))
		goto bad;
	json_decref(root);
	*out = v;
	return 0;
bad:
	r = bad < 0 ? -ENOMEM : -EBADMSG;
err_free:
	if (err && errlen)
		snprintf(err, errlen, "mkmodel: vocabulary %s: key '%s': %s", path, key,
			 r == -ENOMEM ? "out of memory" : "missing or malformed");
	kvp_mkmodel_vocab_free(v);
err_json:
	json_decref(root);
	return r;
}

int kvp_mkmodel_read_text(char **out, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int r = 0;

	*out = NULL;
	if (!f) {
		r = -errno;
		goto out;
	}
	for (;;) {
		size_t n;

		if (len + 4096 + 1 > cap) {
			char *b = realloc(buf, cap = 2 * cap + 8192);

			if (!b) {
				r = -ENOMEM;
				goto out_close;
			}
			buf = b;
		}
		n = fread(buf + len, 1, cap - len - 1, f);
		len += n;
		if (n == 0)
			break;
	}
	if (ferror(f))
		r = -EIO;
	else if (memchr(buf, 0, len))
		r = -EBADMSG;
out_close:
	fclose(f);
out:
	if (r) {
		free(buf);
		if (err && errlen)
			snprintf(err, errlen, "mkmodel: read %s: %s", path,
				 r == -EBADMSG ? "holds a NUL byte" : strerror(-r));
		return r;
	}
	buf[len] = 0;
	*out = buf;
	return 0;
}
