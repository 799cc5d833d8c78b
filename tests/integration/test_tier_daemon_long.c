/* SPDX-License-Identifier: MIT */
/*
 * test_tier_daemon_long.c - test_tier_daemon.c with 30 rounds of SIGKILL during
 * offloading (suite 'slow': meson test -C build --setup slow --suite slow).
 */
#define KILL_ROUNDS 30
#include "test_tier_daemon.c"
