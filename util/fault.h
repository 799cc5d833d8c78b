/* SPDX-License-Identifier: MIT */
/*
 * fault.h - fault injection for tests (meson -Dfault_injection=true; off by default and
 * in every release build, where nothing of this exists and KVP_FAULT_RES() is its
 * argument).
 *
 * A test arms a named site to fail its calls from the @nth on, @count times (1: a
 * transient fault, KVP_FAULT_ALWAYS: a persistent one), then runs the code under test
 * and disarms.  Two kinds of site:
 *  - library calls, by their own names: "malloc", "calloc", "realloc",
 *    "aligned_alloc", "posix_memalign", "strdup", "strndup" (and "alloc", any of
 *    them), "memfd_create", "ftruncate", "fallocate", "mmap", "read", "write", "pread",
 *    "pwrite", "io_uring_submit", "io_uring_submit_and_wait".  These need no change in
 *    the code under test: a test executable is linked with kvp_fault_link_args
 *    (-Wl,--wrap=NAME for each, util/meson.build), so every call from the
 *    project's objects goes through util/fault_wrap.c first;
 *  - points in our code where a result arrives from elsewhere, marked with
 *    KVP_FAULT_RES(): "tier.cqe", the result of each io_uring completion of the disk tier.
 * A failing call returns what the real one returns on that error: NULL or -1 with errno
 * for library calls, -errno from io_uring, @how itself at a KVP_FAULT_RES() site.
 * @how KVP_FAULT_SHORT instead makes read, write, pread, pwrite (and a positive result at
 * a KVP_FAULT_RES() site) move half the bytes asked for: a short transfer.
 *
 * A site given as "SCOPE/SITE" counts (and fails) only the calls a thread makes inside
 * that scope: code marks one with KVP_FAULT_SCOPE_ENTER("NAME") ... KVP_FAULT_SCOPE_LEAVE()
 * (kvpoold's request loop names each client frame's handling by its type: "GENERATE",
 * "TOKENIZE", ...), so "TOKENIZE/alloc:1:1:ENOMEM" fails the first allocation made while
 * the daemon handles a TOKENIZE, wherever it is, and nothing else.
 *
 * A program can take its faults from the environment instead, with kvp_fault_arm_env():
 * KVP_FAULT="SITE:NTH:COUNT:HOW,..." (HOW an errno name such as EIO or ENOMEM, or
 * "short"; COUNT 0 = always).  kvpoold does at start, in a fault-injection build.
 * Thread-safe; any thread.
 */
#ifndef KVP_UTIL_FAULT_H
#define KVP_UTIL_FAULT_H

#include <stdbool.h>
#include <stdint.h>

#define KVP_FAULT_ALWAYS UINT64_MAX
#define KVP_FAULT_SHORT 1

#ifdef KVP_FAULT_INJECTION

/**
 * kvp_fault_arm() - fail calls @nth .. @nth + @count - 1 (1-based, counted from now) of
 * @site ("SITE" or "SCOPE/SITE", above) with @how (a negative errno, or KVP_FAULT_SHORT)
 * Re-arming a site restarts its count.  Return: 0, -EINVAL (unknown site, @nth 0, @how
 * neither), -ENOSPC (too many sites armed at once).
 */
int kvp_fault_arm(const char *site, uint64_t nth, uint64_t count, int how);

/* kvp_fault_disarm() - no more faults anywhere (counts kept until the next arm). */
void kvp_fault_disarm(void);

/* Calls @site saw since it was armed, and how many of them were failed. */
uint64_t kvp_fault_calls(const char *site);
uint64_t kvp_fault_hits(const char *site);

/* Arm what $KVP_FAULT asks for (format above).  Return: 0, or -EINVAL naming nothing. */
int kvp_fault_arm_env(void);

/*
 * kvp_fault_res() - at a result site: @res as it came, or the armed fault instead
 * (KVP_FAULT_RES() calls it).
 */
int kvp_fault_res(const char *site, int res);

#define KVP_FAULT_RES(site, res) kvp_fault_res(site, res)

/* The calling thread's scope (a string that outlives it; NULL: none), for "SCOPE/SITE". */
void kvp_fault_scope(const char *name);

#define KVP_FAULT_SCOPE_ENTER(name) kvp_fault_scope(name)
#define KVP_FAULT_SCOPE_LEAVE() kvp_fault_scope(NULL)

/*
 * kvp_fault_take() - count one call of @site (and of @group: "alloc" for the
 * allocators, or NULL) and say whether it fails: 0, or the armed @how.  For
 * util/fault_wrap.c.
 */
int kvp_fault_take(const char *site, const char *group);

#else

#define KVP_FAULT_RES(site, res) (res)
#define KVP_FAULT_SCOPE_ENTER(name) ((void)(name))
#define KVP_FAULT_SCOPE_LEAVE() ((void)0)

#endif /* KVP_FAULT_INJECTION */

#endif /* KVP_UTIL_FAULT_H */
