/* SPDX-License-Identifier: MIT */
/*
 * errmsg.c - fill a caller's error-message buffer (see errmsg.h).
 */
#include "util/errmsg.h"

#include <stdarg.h>
#include <stdio.h>

void kvp_errmsg(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}
