/* SPDX-License-Identifier: MIT */
/*
 * errmsg.h - the caller's error-message buffer of compute/.
 *
 * compute/ does not log: a function that can fail for a reason worth a sentence (a
 * corrupt GGUF, a refused architecture) takes a `char *err, size_t errlen` and fills it
 * through kvp_errmsg(); the caller decides where the sentence goes.
 */
#ifndef KVP_COMPUTE_ERRMSG_H
#define KVP_COMPUTE_ERRMSG_H

#include <stddef.h>

/* printf into @err (at most @errlen bytes, NUL-terminated); no-op when @err is NULL or 0 long */
void kvp_errmsg(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif /* KVP_COMPUTE_ERRMSG_H */
