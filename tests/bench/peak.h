/* SPDX-License-Identifier: MIT */
/*
 * peak.h - register-only peak rates measured in the benchmark's own run: the ceilings
 * compute throughput is judged against.  One measuring function per kernel table, each
 * built with that table's flags and timing the instructions that table computes with.
 */
#ifndef KVP_TESTS_BENCH_PEAK_H
#define KVP_TESTS_BENCH_PEAK_H

/*
 * struct kvp_bench_peak - GOP/s of all the threads at once, 2 per multiply-add
 * @f32, @f32_insn:   f32 FMA (vfmadd231ps zmm / ymm)
 * @bf16, @bf16_insn: bf16 dot (vdpbf16ps); 0 and NULL where the table has none
 * @int8, @int8_insn: u8 x s8 dot (vpdpbusd zmm; on AVX2 vpmaddubsw + vpmaddwd + vpaddd)
 */
struct kvp_bench_peak {
	double f32, bf16, int8;
	const char *f32_insn, *bf16_insn, *int8_insn;
};

/* @threads threads at once, summed.  AVX-512 (F, VNNI, BF16) machines only. */
void kvp_bench_peak_avx512(struct kvp_bench_peak *p, int threads);

/* The same for the AVX2 table (AVX2 + FMA): no bf16.  Call where AVX2 and FMA run. */
void kvp_bench_peak_avx2(struct kvp_bench_peak *p, int threads);

/*
 * The AVX2 roofs' loops themselves, one thread's share, for benchmarks that time them
 * their own way (tile_ceiling.c): per iteration KVP_BENCH_AVX2_NACC vfmadd231ps ymm
 * (16 ops each), or as many vpmaddubsw + vpmaddwd + vpaddd (64 ops each).
 */
#define KVP_BENCH_AVX2_NACC 12
void kvp_bench_fma_ymm(long iters);
void kvp_bench_maddubs_ymm(long iters);

/*
 * kvp_bench_peak_rate() - GOP/s of @threads threads (1..64) each calling @fn(@iters)
 * at once, @fn doing @ops operations per iteration: the median of 5 timings after a
 * short call that wakes the vector unit up.  Built without ISA flags: the callers above.
 */
double kvp_bench_peak_rate(void (*fn)(long iters), long iters, double ops, int threads);

#endif /* KVP_TESTS_BENCH_PEAK_H */
