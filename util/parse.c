/* SPDX-License-Identifier: MIT */
/*
 * parse.c - strict number parsing (see parse.h).
 *
 * strtoull() and strtof() skip leading space and take a sign, and strtoull() wraps
 * "-1" to UINT64_MAX; each function therefore checks the first character itself
 * before handing the text over, and the end pointer after.
 */
#include "util/parse.h"

#include <ctype.h>
#include <stdbool.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Leading decimal digits of @s into *@v; *@end after them.  -EINVAL/-ERANGE. */
static int digits(const char *s, uint64_t *v, char **end)
{
	unsigned long long x;

	if (!s || !is_digit(*s))
		return -EINVAL;
	errno = 0;
	x = strtoull(s, end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	*v = x;
	return 0;
}

int kvp_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	char *end = NULL;
	int r = digits(s, &v, &end);

	if (r == 0 && *end)
		r = -EINVAL;
	if (r == 0 && (v < min || v > max))
		r = -ERANGE;
	if (r == 0)
		*out = v;
	return r;
}

int kvp_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out)
{
	bool neg = s && *s == '-';
	uint64_t mag;
	int64_t v;
	int r = kvp_parse_u64(s ? s + neg : s, 0, (uint64_t)INT64_MAX + neg, &mag);

	if (r < 0)
		return r;
	v = neg ? (int64_t)(0 - mag) : (int64_t)mag; /* -2^63 included */
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

/* The power of 2 a size suffix stands for: K 10, M 20, G 30, T 40; 0 for anything else. */
static unsigned int suffix_shift(char c)
{
	static const char units[] = "kmgt";
	const char *u = c ? strchr(units, tolower((unsigned char)c)) : NULL;

	return u ? 10 * (unsigned int)(u - units + 1) : 0;
}

int kvp_parse_size(const char *s, uint64_t *out)
{
	unsigned int shift;
	uint64_t v;
	char *end;
	int r;

	r = digits(s, &v, &end);
	if (r < 0)
		return r;
	shift = suffix_shift(*end);
	if (shift)
		end++;
	/* "2G", "2GB", "2GiB"; a bare number may end in "B" */
	if (shift && (!strcmp(end, "iB") || !strcmp(end, "B")))
		end += strlen(end);
	else if (!shift && !strcmp(end, "B"))
		end++;
	if (*end)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = v << shift;
	return 0;
}

int kvp_parse_float(const char *s, float min, float max, float *out)
{
	char *end;
	float v;

	/* decimal only: no space, no '+', no "nan"/"inf", no hexadecimal float */
	if (!s || (!is_digit(*s) && *s != '.' && *s != '-') ||
	    s[strspn(s, "0123456789.eE+-")] != '\0')
		return -EINVAL;
	errno = 0;
	v = strtof(s, &end);
	if (errno || end == s || *end || !isfinite(v))
		return -EINVAL;
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int kvp_parse_ids(const char *s, int32_t **ids, size_t *n)
{
	size_t cap = 1;
	size_t k = 0;
	int32_t *v;

	if (!s || !*s)
		return -EINVAL;
	for (const char *p = s; *p; p++)
		cap += *p == ',';
	v = malloc(cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (;;) {
		uint64_t x;
		char *end;
		int r;

		r = digits(s, &x, &end);
		if (r == 0 && x > INT32_MAX)
			r = -ERANGE;
		if (r == 0 && *end && *end != ',')
			r = -EINVAL;
		if (r < 0) {
			free(v);
			return r;
		}
		v[k++] = (int32_t)x;
		if (!*end)
			break;
		s = end + 1; /* an empty element after a ',' fails in digits() */
	}
	*ids = v;
	*n = k;
	return 0;
}
