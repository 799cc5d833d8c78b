/* SPDX-License-Identifier: MIT */
/*
 * ini.c - the INI reader of kvpoold and kvpool-http (see ini.h).
 *
 * Debian's inih gives the handler no line number, so the reader inih pulls lines through
 * counts them itself; it also sees a line longer than inih's buffer whole (getline) and
 * turns it into an error instead of letting inih read the rest as a second line.
 *
 * Thread: main only.
 */
#include "util/ini.h"

#include <errno.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/errmsg.h"

/* State of one file's parse, passed to inih's callbacks. */
struct ini_ctx {
	kvp_ini_key_fn fn;
	void *user;
	FILE *f;
	int line;     /* lines handed to inih so far: the current line */
	int err_line; /* first error's line, 0 = none */
	char err[512];
	char *buf; /* getline buffer */
	size_t buf_cap;
};

/* fgets-like reader that counts lines and never splits one. */
static char *ini_read(char *str, int num, void *stream)
{
	struct ini_ctx *x = stream;
	ssize_t n;

	n = getline(&x->buf, &x->buf_cap, x->f);
	if (n < 0)
		return NULL;
	x->line++;
	if (n >= num - 1) {
		if (!x->err_line) {
			x->err_line = x->line;
			snprintf(x->err, sizeof(x->err), "line longer than %d bytes", num - 3);
		}
		strcpy(str, "\n");
		return str;
	}
	memcpy(str, x->buf, (size_t)n + 1);
	return str;
}

static int ini_handle(void *user, const char *section, const char *name, const char *value)
{
	struct ini_ctx *x = user;

	if (x->err_line)
		return 1; /* report the first error only; keep inih quiet */
	if (x->fn(x->user, section, name, value, x->err, sizeof(x->err)) < 0) {
		x->err_line = x->line;
		return 0;
	}
	return 1;
}

int kvp_ini_load(const char *path, const char *want, kvp_ini_key_fn fn, void *user, char *err,
		 size_t cap)
{
	struct ini_ctx *x;
	int r;

	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->fn = fn;
	x->user = user;
	x->f = fopen(path, "re");
	if (!x->f) {
		r = -errno;
		kvp_errmsg(err, cap, "%s: %s", path, strerror(-r));
		goto out_free;
	}
	/* a continuation line would silently glue two settings together */
	ini_allow_multiline = false;
	r = ini_parse_stream(ini_read, x, ini_handle, x);
	if (r == 0 && !x->err_line && ferror(x->f)) {
		kvp_errmsg(err, cap, "%s: read error", path);
		r = -EIO;
	} else if (r != 0 || x->err_line) {
		if (x->err_line)
			kvp_errmsg(err, cap, "%s:%d: %s", path, x->err_line, x->err);
		else if (r > 0)
			kvp_errmsg(err, cap, "%s:%d: syntax error (want %s)", path, r, want);
		else
			kvp_errmsg(err, cap, "%s: cannot parse (inih error %d)", path, r);
		r = -EINVAL;
	}
	fclose(x->f);
out_free:
	free(x->buf);
	free(x);
	return r;
}
