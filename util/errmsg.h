/* SPDX-License-Identifier: MIT */
/*
 * errmsg.h - the error-message channel of kvpool's libraries.
 *
 * Functions return 0 or -errno.  When the code alone cannot say what went wrong (a
 * corrupt GGUF, a config value out of range), the function also takes a
 * `char *err, size_t errlen` from its caller and writes one sentence there through
 * kvp_errmsg(); it never prints or logs.  The caller decides where the sentence goes:
 * the daemon logs it (util/log.h), a program prints it to stderr.
 */
#ifndef KVP_UTIL_ERRMSG_H
#define KVP_UTIL_ERRMSG_H

#include <stddef.h>

/* printf into @err (at most @errlen bytes, NUL-terminated); no-op when @err is NULL or 0 long */
void kvp_errmsg(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif /* KVP_UTIL_ERRMSG_H */
