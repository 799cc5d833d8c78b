/* SPDX-License-Identifier: MIT */
/*
 * jsonq.h - a strict little JSON parser for tests: parses a whole document (RFC 8259:
 * objects, arrays, strings with escapes, numbers, true/false/null), rejects trailing
 * garbage, and answers queries by dotted path ("pool.blocks_used", "pool.arenas.0.node").
 */
#ifndef KVP_TESTS_JSONQ_H
#define KVP_TESTS_JSONQ_H

#include <stdbool.h>
#include <stddef.h>

enum jsonq_type { JQ_NULL, JQ_BOOL, JQ_NUM, JQ_STR, JQ_ARR, JQ_OBJ };

struct jsonq {
	enum jsonq_type type;
	double num;	     /* JQ_NUM, JQ_BOOL (0/1) */
	char *str;	     /* JQ_STR (decoded, NUL-terminated) */
	char *key;	     /* member name when inside an object */
	struct jsonq *child; /* JQ_ARR/JQ_OBJ: first element */
	struct jsonq *next;  /* next sibling */
	size_t n_children;
};

/* Parse @len bytes of @text; NULL when it is not exactly one valid JSON value. */
struct jsonq *jsonq_parse(const char *text, size_t len);
void jsonq_free(struct jsonq *v);

/* Node at dotted @path (array elements by index), or NULL. */
const struct jsonq *jsonq_get(const struct jsonq *root, const char *path);

/* Number at @path; @dflt when absent or not a number. */
double jsonq_num(const struct jsonq *root, const char *path, double dflt);

/*
 * jsonq_delta() - number at @path in @after minus the one in @before (two status reports)
 * Return: the difference, or JSONQ_ABSENT when either lacks a number there (never a
 * real difference of counters, so an equality check on it fails).
 */
#define JSONQ_ABSENT 1e15 /* positive: cmocka converts it to an unsigned integer */
double jsonq_delta(const struct jsonq *after, const struct jsonq *before, const char *path);

/* String at @path, or NULL. */
const char *jsonq_str(const struct jsonq *root, const char *path);

/* The index i of the first element of the array at @list whose string member @field is
 * @want (e.g. "domains", "name", "uid-0"), or -1 (none, or no such array). */
int jsonq_index_of(const struct jsonq *root, const char *list, const char *field, const char *want);

#endif /* KVP_TESTS_JSONQ_H */
