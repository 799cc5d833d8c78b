/* SPDX-License-Identifier: MIT */
/*
 * log.h - the daemon's logger: one line per call on stderr, with the sd-daemon
 * "<N>" priority prefix that journald reads (N = syslog priority, LOG_ERR = 3 ...).
 *
 * Format of a message: "subsystem: what: why", lowercase, no trailing period.
 * The level and the prefix switch are set once by kvp_log_init() before any thread
 * starts (the log level is the one piece of mutable global state kvpool allows:
 * docs/architecture.md, Conventions).
 */
#ifndef KVP_UTIL_LOG_H
#define KVP_UTIL_LOG_H

#include <stdbool.h>
#include <syslog.h>

/**
 * kvp_log_init() - set the threshold and the output form
 * @max_prio:  messages with a priority above this (less severe) are dropped
 * @prefix:    true: "<N>" sd-daemon prefixes (journald); false: "kvpoold: " for a terminal
 *
 * Call before any thread starts; later calls race with loggers.
 */
void kvp_log_init(int max_prio, bool prefix);

/*
 * kvp_log_set_name() - the program name of the terminal form ("kvpoold" unless set)
 * @name: a string that outlives every logging thread (a literal); call it before any
 *        thread starts, as kvp_log_init()
 */
void kvp_log_set_name(const char *name);

/* True when a message of @prio would be written. */
bool kvp_log_enabled(int prio);

/**
 * kvp_log() - write one line at @prio (LOG_ERR .. LOG_DEBUG)
 *
 * The line is formatted into a stack buffer and written with one write(2), so lines
 * of concurrent threads never interleave.  Lines longer than 1 KiB are cut.
 * errno is preserved.
 */
void kvp_log(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/**
 * kvp_log_level_parse() - "emerg".."debug" (also "err", "warn", "error") or "0".."7"
 * Return: 0 and *@prio set, or -EINVAL.
 */
int kvp_log_level_parse(const char *s, int *prio);

/* Canonical name of @prio ("err", "info" ...), "?" if out of range. */
const char *kvp_log_level_name(int prio);

#endif /* KVP_UTIL_LOG_H */
