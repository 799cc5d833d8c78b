/* SPDX-License-Identifier: MIT */
/*
 * test_tier_crash_long.c - the SIGKILL crash-consistency test of test_tier_crash.c with
 * many rounds (suite 'slow'; about a quarter of a second per round).
 */
#define CRASH_ROUNDS 200
#include "test_tier_crash.c"
