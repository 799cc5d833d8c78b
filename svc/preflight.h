/* SPDX-License-Identifier: MIT */
/*
 * preflight.h - what can be checked before the model is loaded and the pool faulted in,
 * so a mistake costs a message, not seconds of start-up (or a demo model generated for
 * nothing): each socket path (its directory exists and is writable, it fits sun_path,
 * no live socket answers there), the directory of `tier.path` (the daemon's own, writable
 * by nobody else: shm/tier.h, kvp_tier_check_dir()) and `pool.huge_pages = require`
 * against the 2 MiB pages free now.  The bind and the segment still check again; this only fails early.
 * Thread: the main thread, at start.
 */
#ifndef KVP_SVC_PREFLIGHT_H
#define KVP_SVC_PREFLIGHT_H

#include <stddef.h>

struct kvp_config;

/**
 * kvp_preflight_socket() - can @path be bound as the socket of config key @key?
 * @err: out; "server.socket: PATH: why", naming what to change
 * Return: 0, -ENAMETOOLONG, -ENOENT or -ENOTDIR (no directory), -EACCES (not writable),
 * -EADDRINUSE (something listens there), -EEXIST (not a socket).
 */
int kvp_preflight_socket(const char *key, const char *path, char *err, size_t cap);

/**
 * kvp_preflight() - the checks above for both sockets, the tier's directory when it
 * exists (a missing one leaves the tier off later, logged), and huge pages when required
 * Return: 0, or the first failure's -errno with @err saying why.
 */
int kvp_preflight(const struct kvp_config *c, char *err, size_t cap);

#endif /* KVP_SVC_PREFLIGHT_H */
