/* SPDX-License-Identifier: MIT */
/*
 * isa_stub.c - the vector kernel tables of a fuzz build (-Dfuzz=true, clang): the
 * vector files are written with GCC's vector extensions (__builtin_shuffle with a
 * variable mask, which clang lacks), and no harness computes with a kernel, so these
 * stand in for them by name only.  A table with empty slots fails kvp_kernels_check()
 * and is never run (compute/kernels/meson.build links this instead of avx2.c,
 * avxvnni.c and avx512.c in that build alone).
 */
#include "compute/kernels/kernels.h"

const struct kvp_kernels kvp_kernels_avx2 = { .name = "avx2" };
const struct kvp_kernels kvp_kernels_avxvnni = { .name = "avxvnni" };
const struct kvp_kernels kvp_kernels_avx512 = { .name = "avx512" };
