/* SPDX-License-Identifier: MIT */
/*
 * peak.h - register-only peak rates measured in the benchmark's own run: the ceilings
 * compute throughput is judged against.
 */
#ifndef KVP_TESTS_BENCH_PEAK_H
#define KVP_TESTS_BENCH_PEAK_H

/* GOP/s: f32 FMA, bf16 dot (vdpbf16ps), int8 dot (vpdpbusd); 2 per multiply-add. */
struct kvp_bench_peak {
	double f32, bf16, int8;
};

/* @threads threads at once, summed.  AVX-512 (F, VNNI, BF16) machines only. */
void kvp_bench_peak_avx512(struct kvp_bench_peak *p, int threads);

#endif /* KVP_TESTS_BENCH_PEAK_H */
