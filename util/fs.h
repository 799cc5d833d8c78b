/* SPDX-License-Identifier: MIT */
/*
 * fs.h - filesystem helpers.
 * Thread: any.
 */
#ifndef KVP_UTIL_FS_H
#define KVP_UTIL_FS_H

#include <sys/types.h>

/**
 * kvp_mkdir_p() - create @path and any missing parents with @mode, like mkdir -p
 * Return: 0 (also when it exists already), -ENAMETOOLONG, or -errno of mkdir(2).
 */
int kvp_mkdir_p(const char *path, mode_t mode);

#endif /* KVP_UTIL_FS_H */
