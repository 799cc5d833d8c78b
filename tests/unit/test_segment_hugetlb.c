/* SPDX-License-Identifier: MIT */
/*
 * test_segment_hugetlb.c - the MFD_HUGETLB half of test_segment.c, as its own test so
 * it can exit 77 (skip) on a machine with no 2 MiB pages reserved while test-segment,
 * which covers the fallback path, still runs and passes there.
 */
#define KVP_TEST_HUGETLB_ONLY 1
#include "test_segment.c"
