/* SPDX-License-Identifier: MIT */
/*
 * toolcall.c - tool calls out of generated text (see toolcall.h), read with jansson.
 */
#include "ipc/http/toolcall.h"

#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define END_TAG "</tool_call>"

static bool ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static bool known(const char *name, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(names[i], name))
			return true;
	return false;
}

static const char *skip_ws(const char *p, const char *e)
{
	while (p < e && ws(*p))
		p++;
	return p;
}

/*
 * The end of the JSON value at @p (no whitespace before it), or NULL when it is not whole
 * before @e.  Structural only (strings with their escapes, brackets nested, a scalar up
 * to the next delimiter): the text is checked by jansson, this finds where values are.
 */
static const char *value_end(const char *p, const char *e)
{
	size_t depth = 0;
	bool in_str = false;

	if (p == e)
		return NULL;
	if (*p != '{' && *p != '[' && *p != '"') {
		while (p < e && !ws(*p) && *p != ',' && *p != '}' && *p != ']')
			p++;
		return p;
	}
	for (; p < e; p++) {
		if (in_str) {
			if (*p == '\\' && p + 1 < e)
				p++;
			else if (*p == '"')
				in_str = false;
			else
				continue;
			if (!in_str && !depth)
				return p + 1;
		} else if (*p == '"') {
			in_str = true;
		} else if (*p == '{' || *p == '[') {
			depth++;
		} else if ((*p == '}' || *p == ']') && !--depth) {
			return p + 1;
		}
	}
	return NULL;
}

/*
 * The text of member @key's value in the JSON object @s..@e (checked already), the last
 * one when given twice (as jansson takes it): true and *@vs, *@ve, or false.
 */
static bool member_span(const char *s, const char *e, const char *key, const char **vs,
			const char **ve)
{
	const char *p = skip_ws(s, e), *k, *ke, *v, *w;
	size_t kl = strlen(key);
	bool found = false;

	if (p == e || *p != '{')
		return false;
	p = skip_ws(p + 1, e);
	while (p < e && *p == '"') {
		k = p;
		ke = value_end(k, e);
		p = ke ? skip_ws(ke, e) : e;
		if (p == e || *p != ':')
			return false;
		v = skip_ws(p + 1, e);
		w = value_end(v, e);
		if (!w)
			return false;
		if ((size_t)(ke - k) == kl + 2 && !memcmp(k + 1, key, kl)) {
			*vs = v;
			*ve = w;
			found = true;
		}
		p = skip_ws(w, e);
		if (p < e && *p == ',')
			p = skip_ws(p + 1, e);
	}
	return found;
}

/*
 * One call's JSON text: 1 (added to @out), 0 (not a call of a declared tool), -ENOMEM.
 * The arguments are kept as the model wrote them (or as the string holding them says),
 * not re-serialised: jansson would print 0.1 as 0.10000000000000001 and 1.5e3 as 1500.0.
 * Integers are read as reals only to check the text: one past 64 bits is still JSON.
 */
static int one_call(struct kvp_http_calls *out, const char *s, size_t n, const char *const *names,
		    size_t n_names)
{
	json_t *o = json_loadb(s, n, JSON_DECODE_INT_AS_REAL, NULL), *name, *args, *parsed = NULL;
	const char *key = "arguments", *as = NULL, *ae = NULL;
	struct kvp_http_call *v;
	int r = 0;

	if (!json_is_object(o))
		goto out;
	name = json_object_get(o, "name");
	args = json_object_get(o, key);
	if (!args)
		args = json_object_get(o, key = "parameters");
	if (json_is_string(args)) {
		as = json_string_value(args);
		ae = as + json_string_length(args);
		args = parsed = json_loadb(as, (size_t)(ae - as), JSON_DECODE_INT_AS_REAL, NULL);
		as = skip_ws(as, ae);
		while (ae > as && ws(ae[-1]))
			ae--;
	} else if (json_is_object(args) && !member_span(s, s + n, key, &as, &ae)) {
		goto out;
	}
	if (!json_is_string(name) || !known(json_string_value(name), names, n_names) ||
	    !json_is_object(args))
		goto out;
	r = -ENOMEM;
	v = realloc(out->v, (out->n + 1) * sizeof(*v));
	if (!v)
		goto out;
	out->v = v;
	v[out->n].name = strdup(json_string_value(name));
	v[out->n].args = strndup(as, (size_t)(ae - as));
	out->n++;
	if (!v[out->n - 1].name || !v[out->n - 1].args)
		goto out;
	r = 1;
out:
	json_decref(parsed);
	json_decref(o);
	return r;
}

static int add_content(struct kvp_http_calls *out, const char *s, size_t n)
{
	char *p = realloc(out->content, out->content_len + n + 1);

	if (!p)
		return -ENOMEM;
	memcpy(p + out->content_len, s, n);
	out->content = p;
	out->content_len += n;
	p[out->content_len] = 0;
	return 0;
}

void kvp_http_call_id9(const char *id, size_t len, char out[KVP_HTTP_CALL_ID9])
{
	static const char digits[] =
		"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
	bool alnum = len == 9;
	uint64_t h;

	for (size_t i = 0; alnum && i < len; i++)
		alnum = (id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'z') ||
			(id[i] >= 'A' && id[i] <= 'Z');
	if (alnum) {
		memcpy(out, id, 9);
	} else {
		h = XXH3_64bits(id, len);
		for (size_t i = 0; i < 9; i++, h /= 62)
			out[i] = digits[h % 62];
	}
	out[9] = 0;
}

void kvp_http_calls_free(struct kvp_http_calls *c)
{
	for (size_t i = 0; i < c->n; i++) {
		free(c->v[i].name);
		free(c->v[i].args);
	}
	free(c->v);
	free(c->content);
	*c = (struct kvp_http_calls){ 0 };
}

/*
 * Mistral's calls: a JSON array of call objects from @p (at its '[') to the end of the
 * text, whitespace after it allowed: 1 (every element a call, added), 0, -ENOMEM.
 */
static int call_array(struct kvp_http_calls *out, const char *p, const char *e,
		      const char *const *names, size_t n_names)
{
	int r = 0;

	for (p = skip_ws(p + 1, e); p < e && *p != ']';) {
		const char *end = *p == '{' ? value_end(p, e) : NULL;

		if (!end)
			return 0;
		r = one_call(out, p, (size_t)(end - p), names, n_names);
		if (r <= 0)
			return r;
		p = skip_ws(end, e);
		if (p < e && *p == ',')
			p = skip_ws(p + 1, e);
		else if (p < e && *p != ']')
			return 0;
	}
	/* whole, not empty, nothing after it */
	return p < e && r == 1 && skip_ws(p + 1, e) == e ? 1 : 0;
}

int kvp_http_calls_parse(struct kvp_http_calls *out, const char *text, size_t len,
			 const char *const *names, size_t n_names)
{
	const char *p = text, *e = text + len, *tag;
	int r = 0;

	*out = (struct kvp_http_calls){ 0 };
	tag = memmem(text, len, KVP_HTTP_MISTRAL_TAG, strlen(KVP_HTTP_MISTRAL_TAG));
	if (tag) /* Mistral's marker written as text: the text before it is the content */
		p = skip_ws(tag + strlen(KVP_HTTP_MISTRAL_TAG), e);
	else
		p = skip_ws(p, e);
	if (p < e && *p == '[') { /* Mistral's [TOOL_CALLS] [{...}, ...] (the marker a control
				   * token, so no text of its own, or written) */
		r = call_array(out, p, e, names, n_names);
		if (r <= 0)
			goto none;
		if (add_content(out, "", 0) ||
		    (tag && add_content(out, text, (size_t)(tag - text))))
			goto nomem;
		goto trim;
	}
	if (tag)
		goto none;
	if (p < e && *p == '{') { /* the whole answer one call (Llama, a forced call) */
		while (e > p && ws(e[-1]))
			e--;
		r = one_call(out, p, (size_t)(e - p), names, n_names);
		if (r <= 0)
			goto none;
		if (add_content(out, "", 0))
			goto nomem;
		return 1;
	}
	p = text;
	while ((tag = memmem(p, (size_t)(e - p), KVP_HTTP_CALL_TAG, strlen(KVP_HTTP_CALL_TAG)))) {
		const char *body = tag + strlen(KVP_HTTP_CALL_TAG);
		const char *end = memmem(body, (size_t)(e - body), END_TAG, strlen(END_TAG));

		if (add_content(out, p, (size_t)(tag - p)))
			goto nomem;
		/* a last block the model did not close still counts when its JSON is whole */
		r = one_call(out, body, (size_t)((end ? end : e) - body), names, n_names);
		if (r <= 0)
			goto none;
		p = end ? end + strlen(END_TAG) : e;
	}
	if (!out->n)
		goto none;
	if (add_content(out, p, (size_t)(e - p)))
		goto nomem;
trim : {
	size_t a = 0, b = out->content_len;

	while (a < b && ws(out->content[a]))
		a++;
	while (b > a && ws(out->content[b - 1]))
		b--;
	memmove(out->content, out->content + a, b - a);
	out->content_len = b - a;
	out->content[out->content_len] = 0;
}
	return 1;
none:
	r = r < 0 ? r : 0;
	kvp_http_calls_free(out);
	return r;
nomem:
	kvp_http_calls_free(out);
	return -ENOMEM;
}

size_t kvp_http_calls_safe_prefix(const char *text, size_t len, bool *call_started)
{
	static const char *const tags[] = { KVP_HTTP_CALL_TAG, KVP_HTTP_MISTRAL_TAG };
	size_t i = 0, safe = len;

	*call_started = false;
	while (i < len && ws(text[i]))
		i++;
	if (i == len)
		return 0;
	if (text[i] == '{' || text[i] == '[') {
		*call_started = true;
		return 0;
	}
	for (size_t t = 0; t < 2; t++) {
		const char *tag = memmem(text, len, tags[t], strlen(tags[t]));

		if (tag && (size_t)(tag - text) < safe) {
			*call_started = true;
			safe = (size_t)(tag - text);
		}
	}
	if (*call_started)
		return safe;
	/* keep back a tail that is the start of a tag */
	for (size_t t = 0; t < 2; t++)
		for (size_t k = strlen(tags[t]) - 1; k > 0; k--)
			if (len >= k && len - k < safe && !memcmp(text + len - k, tags[t], k))
				safe = len - k;
	return safe;
}

/* Match @lit at *@p: 1 (past it), 0 (the text ends inside it), -1 (it differs). */
static int lit(const char **p, const char *e, const char *lit)
{
	size_t n = strlen(lit), have = (size_t)(e - *p) < n ? (size_t)(e - *p) : n;

	if (memcmp(*p, lit, have))
		return -1;
	if (have < n)
		return 0;
	*p += n;
	return 1;
}

int kvp_http_calls_head(const char *text, size_t len, const char *const *names, size_t n_names,
			size_t *name, size_t *args)
{
	static const char *const seq[] = { "{", "\"name\"", ":", NULL, ",", "\"arguments\"", ":" };
	const char *p = text, *e = text + len;

	for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
		int r;

		p = skip_ws(p, e);
		if (p == e)
			return 0;
		if (!seq[i]) { /* the name: a string with no escapes (the grammar's const) */
			const char *q = p + 1, *end;
			size_t k;

			if (*p != '"')
				return -1;
			end = memchr(q, '"', (size_t)(e - q));
			if (memchr(q, '\\', (size_t)((end ? end : e) - q)))
				return -1;
			if (!end)
				return 0;
			for (k = 0; k < n_names; k++)
				if (strlen(names[k]) == (size_t)(end - q) &&
				    !memcmp(names[k], q, (size_t)(end - q)))
					break;
			if (k == n_names)
				return -1;
			*name = k;
			p = end + 1;
			continue;
		}
		r = lit(&p, e, seq[i]);
		if (r <= 0)
			return r;
	}
	p = skip_ws(p, e);
	if (p == e)
		return 0;
	*args = (size_t)(p - text);
	return 1;
}

size_t kvp_http_calls_args_end(const char *text, size_t len, size_t args)
{
	const char *end = value_end(text + args, text + len);

	/* a scalar may go on in the next piece: only a bracketed value ends here */
	if (!end || (text[args] != '{' && text[args] != '[' && text[args] != '"'))
		return len;
	return (size_t)(end - text);
}
