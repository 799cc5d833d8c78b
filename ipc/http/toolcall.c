/* SPDX-License-Identifier: MIT */
/*
 * toolcall.c - tool calls out of generated text (see toolcall.h), read with jansson.
 */
#include "ipc/http/toolcall.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

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

/* One call's JSON text: 1 (added to @out), 0 (not a call of a declared tool), -ENOMEM. */
static int one_call(struct kvp_http_calls *out, const char *s, size_t n, const char *const *names,
		    size_t n_names)
{
	json_t *o = json_loadb(s, n, 0, NULL), *name, *args, *parsed = NULL;
	struct kvp_http_call *v;
	int r = 0;

	if (!json_is_object(o))
		goto out;
	name = json_object_get(o, "name");
	args = json_object_get(o, "arguments");
	if (!args)
		args = json_object_get(o, "parameters");
	if (json_is_string(args))
		args = parsed = json_loadb(json_string_value(args), json_string_length(args), 0,
					   NULL);
	if (!json_is_string(name) || !known(json_string_value(name), names, n_names) ||
	    !json_is_object(args))
		goto out;
	r = -ENOMEM;
	v = realloc(out->v, (out->n + 1) * sizeof(*v));
	if (!v)
		goto out;
	out->v = v;
	v[out->n].name = strdup(json_string_value(name));
	v[out->n].args = json_dumps(args, JSON_COMPACT);
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

int kvp_http_calls_parse(struct kvp_http_calls *out, const char *text, size_t len,
			 const char *const *names, size_t n_names)
{
	const char *p = text, *e = text + len, *tag;
	int r = 0;

	*out = (struct kvp_http_calls){ 0 };
	while (p < e && ws(*p))
		p++;
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
	{ /* trim */
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
	size_t i = 0, tl = strlen(KVP_HTTP_CALL_TAG);
	const char *tag;

	*call_started = false;
	while (i < len && ws(text[i]))
		i++;
	if (i == len)
		return 0;
	if (text[i] == '{') {
		*call_started = true;
		return 0;
	}
	tag = memmem(text, len, KVP_HTTP_CALL_TAG, tl);
	if (tag) {
		*call_started = true;
		return (size_t)(tag - text);
	}
	/* keep back a tail that is the start of the tag */
	for (size_t k = tl - 1; k > 0; k--)
		if (len >= k && !memcmp(text + len - k, KVP_HTTP_CALL_TAG, k))
			return len - k;
	return len;
}
