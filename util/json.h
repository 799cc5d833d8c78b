/* SPDX-License-Identifier: MIT */
/*
 * json.h - kvpool's one JSON writer: the status report, `kvpool generate|bench --json`
 * and `kvpool-run --json` all write through it.
 *
 * A streaming writer over a struct kvp_buf: the caller opens objects and arrays and
 * adds members in order, the writer places the commas.  Strings are encoded by jansson
 * (Debian's libjansson), so every output escapes the way any jansson-built program
 * does: \" \\ \b \f \n \r \t, \u00XX for the other control characters, everything else
 * as UTF-8.  Text that is not well-formed UTF-8 follows util/utf8.h's policy: each
 * byte that does not begin a well-formed character is written as \ufffd, so the output
 * always parses and shows where the bad bytes were.  Numbers are printed by the caller's
 * choice of format (a fixed number of decimals, or of significant digits); a number that
 * is not finite prints as 0, since JSON has no NaN or infinity.  Member names are the
 * program's own literals and are written as given.
 *
 * Thread: a writer belongs to the thread writing it.
 */
#ifndef KVP_UTIL_JSON_H
#define KVP_UTIL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"

/**
 * struct kvp_json - a JSON text being written
 * @out:   where the text goes (borrowed); failures are kept there (kvp_buf_finish())
 * @first: the next member is the first of its object or array (no comma before it)
 */
struct kvp_json {
	struct kvp_buf *out;
	bool first;
};

/* Start a JSON text at the end of @out. */
void kvp_json_init(struct kvp_json *j, struct kvp_buf *out);

/*
 * Every function below adds one member called @key to the object being written, or,
 * with @key NULL, one element to the array being written (or the top-level value).
 */

/* Open an object ('{') or an array ('['). */
void kvp_json_begin(struct kvp_json *j, const char *key, char brace);

/* Close what kvp_json_begin() opened ('}' or ']'). */
void kvp_json_end(struct kvp_json *j, char brace);

void kvp_json_u64(struct kvp_json *j, const char *key, uint64_t v);
void kvp_json_i64(struct kvp_json *j, const char *key, int64_t v);

/* @v with @decimals digits after the point ("%.3f" for milliseconds). */
void kvp_json_fixed(struct kvp_json *j, const char *key, double v, int decimals);

/* @v with @digits significant digits ("%.6g" for ratios). */
void kvp_json_sig(struct kvp_json *j, const char *key, double v, int digits);

/* @n bytes of @s, which may hold anything (see the UTF-8 policy above). */
void kvp_json_str(struct kvp_json *j, const char *key, const char *s, size_t n);

/* true or false. */
void kvp_json_bool(struct kvp_json *j, const char *key, bool v);

/* null: a member that the API's shape has but this output has no value for. */
void kvp_json_null(struct kvp_json *j, const char *key);

#endif /* KVP_UTIL_JSON_H */
