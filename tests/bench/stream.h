/* SPDX-License-Identifier: MIT */
/*
 * stream.h - the memory read bandwidth measured in the benchmark's own run: the ceiling
 * decode (one pass over the weights per step) is judged against.
 */
#ifndef KVP_TESTS_BENCH_STREAM_H
#define KVP_TESTS_BENCH_STREAM_H

/*
 * kvp_bench_read_gbps() - GB/s of @threads threads (1..64) summing disjoint parts of
 * a 1 GiB buffer (STREAM-style read, 4 KiB pages), the median of 5 passes; 0 when the
 * buffer cannot be allocated.
 */
double kvp_bench_read_gbps(int threads);

#endif /* KVP_TESTS_BENCH_STREAM_H */
