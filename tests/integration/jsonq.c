/* SPDX-License-Identifier: MIT */
/*
 * jsonq.c - recursive-descent JSON parser for tests (see jsonq.h).
 *
 * Strict on purpose: the status socket's output must parse here exactly as any
 * conforming parser would take it, so leading zeros, bare control bytes in strings,
 * trailing commas, NaN and trailing garbage are all refused.  Depth is bounded.
 */
#include "tests/integration/jsonq.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct parser {
	const char *p;
	const char *end;
	int depth;
};

static void skip_ws(struct parser *ps)
{
	while (ps->p < ps->end &&
	       (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
		ps->p++;
}

static bool lit(struct parser *ps, const char *w)
{
	size_t n = strlen(w);

	if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, w, n))
		return false;
	ps->p += n;
	return true;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static void put_utf8(char *out, size_t *n, uint32_t cp)
{
	if (cp < 0x80) {
		out[(*n)++] = (char)cp;
	} else if (cp < 0x800) {
		out[(*n)++] = (char)(0xc0 | cp >> 6);
		out[(*n)++] = (char)(0x80 | (cp & 0x3f));
	} else if (cp < 0x10000) {
		out[(*n)++] = (char)(0xe0 | cp >> 12);
		out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[(*n)++] = (char)(0x80 | (cp & 0x3f));
	} else {
		out[(*n)++] = (char)(0xf0 | cp >> 18);
		out[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3f));
		out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[(*n)++] = (char)(0x80 | (cp & 0x3f));
	}
}

static bool hex4(struct parser *ps, uint32_t *v)
{
	int i;

	if (ps->end - ps->p < 4)
		return false;
	*v = 0;
	for (i = 0; i < 4; i++) {
		int h = hexval(ps->p[i]);

		if (h < 0)
			return false;
		*v = *v << 4 | (uint32_t)h;
	}
	ps->p += 4;
	return true;
}

static char *parse_string(struct parser *ps)
{
	const char *start;
	char *out;
	size_t n = 0;

	if (ps->p >= ps->end || *ps->p != '"')
		return NULL;
	start = ++ps->p;
	/* decoded text is never longer than the escaped text */
	while (ps->p < ps->end && *ps->p != '"') {
		if (*ps->p == '\\')
			ps->p++;
		ps->p++;
	}
	if (ps->p >= ps->end)
		return NULL;
	out = malloc((size_t)(ps->p - start) + 1);
	if (!out)
		return NULL;
	ps->p = start;
	while (*ps->p != '"') {
		unsigned char c = (unsigned char)*ps->p++;
		uint32_t cp;

		if (c < 0x20)
			goto bad;
		if (c != '\\') {
			out[n++] = (char)c;
			continue;
		}
		c = (unsigned char)*ps->p++;
		switch (c) {
		case '"':
			out[n++] = '"';
			break;
		case '\\':
			out[n++] = '\\';
			break;
		case '/':
			out[n++] = '/';
			break;
		case 'b':
			out[n++] = '\b';
			break;
		case 'f':
			out[n++] = '\f';
			break;
		case 'n':
			out[n++] = '\n';
			break;
		case 'r':
			out[n++] = '\r';
			break;
		case 't':
			out[n++] = '\t';
			break;
		case 'u':
			if (!hex4(ps, &cp))
				goto bad;
			if (cp >= 0xd800 && cp < 0xdc00) {
				uint32_t lo;

				if (!lit(ps, "\\u") || !hex4(ps, &lo) || lo < 0xdc00 ||
				    lo >= 0xe000)
					goto bad;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			} else if (cp >= 0xdc00 && cp < 0xe000) {
				goto bad;
			}
			put_utf8(out, &n, cp);
			break;
		default:
			goto bad;
		}
	}
	ps->p++;
	out[n] = '\0';
	return out;
bad:
	free(out);
	return NULL;
}

static bool parse_number(struct parser *ps, double *v)
{
	const char *s = ps->p;
	char buf[64];

	if (ps->p < ps->end && *ps->p == '-')
		ps->p++;
	if (ps->p >= ps->end)
		return false;
	if (*ps->p == '0') {
		ps->p++;
	} else if (*ps->p >= '1' && *ps->p <= '9') {
		while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
			ps->p++;
	} else {
		return false;
	}
	if (ps->p < ps->end && *ps->p == '.') {
		ps->p++;
		if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
			return false;
		while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
			ps->p++;
	}
	if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
		ps->p++;
		if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
			ps->p++;
		if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9')
			return false;
		while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
			ps->p++;
	}
	if ((size_t)(ps->p - s) >= sizeof(buf))
		return false;
	memcpy(buf, s, (size_t)(ps->p - s));
	buf[ps->p - s] = '\0';
	*v = strtod(buf, NULL);
	return true;
}

static struct jsonq *parse_value(struct parser *ps);

static bool parse_members(struct parser *ps, struct jsonq *v, bool obj, char close)
{
	struct jsonq **tail = &v->child;

	if (++ps->depth > 64)
		return false;
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == close) {
		ps->p++;
		ps->depth--;
		return true;
	}
	for (;;) {
		char *key = NULL;
		struct jsonq *item;

		skip_ws(ps);
		if (obj) {
			key = parse_string(ps);
			if (!key)
				return false;
			skip_ws(ps);
			if (ps->p >= ps->end || *ps->p != ':') {
				free(key);
				return false;
			}
			ps->p++;
		}
		item = parse_value(ps);
		if (!item) {
			free(key);
			return false;
		}
		item->key = key;
		*tail = item;
		tail = &item->next;
		v->n_children++;
		skip_ws(ps);
		if (ps->p >= ps->end)
			return false;
		if (*ps->p == ',') {
			ps->p++;
			continue;
		}
		if (*ps->p != close)
			return false;
		ps->p++;
		ps->depth--;
		return true;
	}
}

static struct jsonq *parse_value(struct parser *ps)
{
	struct jsonq *v = calloc(1, sizeof(*v));

	if (!v)
		return NULL;
	skip_ws(ps);
	if (ps->p >= ps->end)
		goto bad;
	switch (*ps->p) {
	case '{':
		ps->p++;
		v->type = JQ_OBJ;
		if (!parse_members(ps, v, true, '}'))
			goto bad;
		break;
	case '[':
		ps->p++;
		v->type = JQ_ARR;
		if (!parse_members(ps, v, false, ']'))
			goto bad;
		break;
	case '"':
		v->type = JQ_STR;
		v->str = parse_string(ps);
		if (!v->str)
			goto bad;
		break;
	case 't':
		v->type = JQ_BOOL;
		v->num = 1;
		if (!lit(ps, "true"))
			goto bad;
		break;
	case 'f':
		v->type = JQ_BOOL;
		if (!lit(ps, "false"))
			goto bad;
		break;
	case 'n':
		v->type = JQ_NULL;
		if (!lit(ps, "null"))
			goto bad;
		break;
	default:
		v->type = JQ_NUM;
		if (!parse_number(ps, &v->num))
			goto bad;
	}
	return v;
bad:
	jsonq_free(v);
	return NULL;
}

struct jsonq *jsonq_parse(const char *text, size_t len)
{
	struct parser ps = { .p = text, .end = text + len };
	struct jsonq *v = parse_value(&ps);

	if (!v)
		return NULL;
	skip_ws(&ps);
	if (ps.p != ps.end) {
		jsonq_free(v);
		return NULL;
	}
	return v;
}

void jsonq_free(struct jsonq *v)
{
	while (v) {
		struct jsonq *next = v->next;

		jsonq_free(v->child);
		free(v->str);
		free(v->key);
		free(v);
		v = next;
	}
}

const struct jsonq *jsonq_get(const struct jsonq *root, const char *path)
{
	const struct jsonq *v = root;

	while (v && *path) {
		const char *dot = strchr(path, '.');
		size_t n = dot ? (size_t)(dot - path) : strlen(path);
		const struct jsonq *c;

		if (v->type == JQ_OBJ) {
			for (c = v->child; c; c = c->next)
				if (strlen(c->key) == n && !memcmp(c->key, path, n))
					break;
		} else if (v->type == JQ_ARR) {
			size_t idx = strtoul(path, NULL, 10);

			for (c = v->child; c && idx; c = c->next)
				idx--;
		} else {
			return NULL;
		}
		v = c;
		path += n;
		if (*path == '.')
			path++;
	}
	return v;
}

double jsonq_num(const struct jsonq *root, const char *path, double dflt)
{
	const struct jsonq *v = jsonq_get(root, path);

	return v && v->type == JQ_NUM ? v->num : dflt;
}

double jsonq_delta(const struct jsonq *after, const struct jsonq *before, const char *path)
{
	const struct jsonq *a = jsonq_get(after, path);
	const struct jsonq *b = jsonq_get(before, path);

	if (!a || !b || a->type != JQ_NUM || b->type != JQ_NUM)
		return JSONQ_ABSENT;
	return a->num - b->num;
}

const char *jsonq_str(const struct jsonq *root, const char *path)
{
	const struct jsonq *v = jsonq_get(root, path);

	return v && v->type == JQ_STR ? v->str : NULL;
}

int jsonq_index_of(const struct jsonq *root, const char *list, const char *field, const char *want)
{
	char path[256];

	for (int i = 0;; i++) {
		const char *v;

		if ((size_t)snprintf(path, sizeof(path), "%s.%d", list, i) >= sizeof(path) ||
		    !jsonq_get(root, path))
			return -1;
		snprintf(path, sizeof(path), "%s.%d.%s", list, i, field);
		v = jsonq_str(root, path);
		if (v && !strcmp(v, want))
			return i;
	}
}
