/* SPDX-License-Identifier: MIT */
/*
 * ini.h - one reader of INI config files (on libinih) for kvpoold and kvpool-http.
 *
 * The reader tokenizes sections, keys and values and keeps the line numbers; each
 * program keeps its own key table and hands a callback that applies one key.  The
 * file's first error, whatever its cause, becomes one sentence "PATH:LINE: WHY".
 * Rules both programs rely on: a line too long for inih is an error (never two
 * settings), and continuation lines are off (they would glue two settings together).
 *
 * Thread: main only (libinih's ini_allow_multiline is a global).
 */
#ifndef KVP_UTIL_INI_H
#define KVP_UTIL_INI_H

#include <stddef.h>

/**
 * typedef kvp_ini_key_fn - apply one "key = value" line
 * @user:    the caller's state, as passed to kvp_ini_load()
 * @section: the section the line stands in ("" before the first [section])
 * @why:     where to write the error sentence (without path and line), @cap bytes
 * Return: 0, or -errno with @why written; the first error stops the file.
 */
typedef int (*kvp_ini_key_fn)(void *user, const char *section, const char *key, const char *value,
			      char *why, size_t cap);

/**
 * kvp_ini_load() - read the INI file @path, calling @fn for each key in file order
 * @want: what a line that is neither should be, for the syntax error ("[http] or key = value")
 * @err:  out; on error one sentence: "PATH: ERRNO TEXT", "PATH:LINE: WHY", "PATH: read error"
 * Return: 0, -ENOENT (and other -errno of fopen) when @path cannot be opened, -EINVAL for
 * a bad line (a syntax error, a line too long, or @fn's error), -EIO, -ENOMEM.
 */
int kvp_ini_load(const char *path, const char *want, kvp_ini_key_fn fn, void *user, char *err,
		 size_t cap);

#endif /* KVP_UTIL_INI_H */
