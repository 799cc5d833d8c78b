/* SPDX-License-Identifier: MIT */
/*
 * daemon.h - struct kvp_daemon owns everything kvpoold runs: the model and tokenizer,
 * the NUMA topology, the pool and prefix index of each trust domain, the engine
 * (svc/engine/engine.h), the request/status server (ipc/server.h), sd_notify and the watchdog.
 *
 * Lifecycle: kvp_daemon_new() builds it all in order and binds the sockets (and on a
 * failure undoes what it built); kvp_daemon_run() sends READY=1, serves until
 * SIGTERM/SIGINT, then drains; kvp_daemon_free() tears down in reverse order.  main.c
 * is just these three calls.
 *
 * Thread: the main thread builds and frees it and then becomes the loop thread; the
 * engine thread runs inside svc/engine/.
 */
#ifndef KVP_SVC_DAEMON_H
#define KVP_SVC_DAEMON_H

#include "svc/config.h"

struct kvp_daemon;

/**
 * kvp_daemon_new() - load the model (generating the demo model if needed), make the
 * pool and index, start nothing yet but bind both sockets
 * @cfg: checked configuration (copied)
 *
 * Installs the SIGTERM/SIGINT handler first: a stop requested while starting ends the
 * startup after the step in progress (no partial demo model is left behind).
 * @out: out; the daemon, set only on success
 * Return: 0; -ECANCELED when a stop was requested while starting (logged; a clean
 * stop); or -errno after logging what failed and why.  Nothing is left to free after
 * a failure.
 */
int kvp_daemon_new(struct kvp_daemon **out, const struct kvp_config *cfg);

/**
 * kvp_daemon_run() - READY=1, serve until SIGTERM/SIGINT, then drain: stop accepting,
 * let running requests finish for drain_timeout_ms, cancel the rest (a second signal
 * cuts the wait short), send what is owed
 * Return: 0 after a clean stop, or -errno when the loop failed.
 */
int kvp_daemon_run(struct kvp_daemon *d);

/* Release everything in reverse order of creation; NULL is fine. */
void kvp_daemon_free(struct kvp_daemon *d);

#endif /* KVP_SVC_DAEMON_H */
