/* SPDX-License-Identifier: MIT */
/*
 * demo.h - the built-in demo model: with no daemon.model configured, kvpoold serves a
 * synthetic ~104M-parameter llama model (compute/mkmodel.h, preset "demo") that it
 * writes into its state directory once and reuses afterwards.
 * Thread: the main thread, while starting.
 */
#ifndef KVP_SVC_DEMO_H
#define KVP_SVC_DEMO_H

struct kvp_notify;

/**
 * kvp_demo_write() - write the demo model to @path, atomically
 * @state_dir: created (with parents) when missing; holds the temporary directory
 * @path:      where the model goes (in @state_dir)
 * @notify:    progress for systemd's status line (borrowed)
 *
 * Logs what it does, and on failure what failed and why.
 * Return: 0, or -errno; nothing half-written is left at @path.
 */
int kvp_demo_write(const char *state_dir, const char *path, const struct kvp_notify *notify);

#endif /* KVP_SVC_DEMO_H */
