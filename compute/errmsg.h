/* SPDX-License-Identifier: MIT */
/*
 * errmsg.h - compute/'s error messages go through util/errmsg.h (kvp_errmsg()): a
 * function that can fail for a reason worth a sentence (a corrupt GGUF, a refused
 * architecture) takes a `char *err, size_t errlen` and fills it; compute/ never logs.
 *
 * This header only forwards; the files of compute/ that include it can include
 * util/errmsg.h directly and it can then go.
 */
#ifndef KVP_COMPUTE_ERRMSG_H
#define KVP_COMPUTE_ERRMSG_H

#include "util/errmsg.h"

#endif /* KVP_COMPUTE_ERRMSG_H */
