/* SPDX-License-Identifier: MIT */
/*
 * kernels.h - the numeric kernels, one table per instruction set, chosen at run time.
 *
 * The project is built for a portable x86-64 baseline; the code that needs wider
 * vectors lives in one file per instruction set, each compiled with its own flags
 * (kernels/scalar.c, avx2.c, avxvnni.c, avx512.c; neon.c on aarch64, built twice), and
 * exports one const struct
 * kvp_kernels.  kvp_kernels_best() picks the widest table the CPU runs (cpuid and the
 * OS's XSAVE state on x86, the kernel's hwcaps on aarch64; only the build's
 * architecture's tables are linked); KVP_ISA=scalar|avx2|avxvnni|avx512|neon|neondot
 * forces one, which is how tests and benchmarks run every path the machine has.  The scalar table is the
 * portable reference the others are tested against.
 *
 * Adding a weight type: its block layout and reference code in quant.h/quant.c, then
 * one matmul (and dequant) entry per table.  Adding an instruction set: one file that
 * fills a table, its flags in meson.build and its cpuid test in dispatch.c.
 * kvp_kernels_check() refuses a table with an empty slot, at start and in the tests.
 *
 * Tables are immutable; every function is reentrant.
 */
#ifndef KVP_COMPUTE_KERNELS_KERNELS_H
#define KVP_COMPUTE_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "compute/gguf.h"
#include "compute/kernels/quant.h"
#include "kvpool/layout.h"

/* In order of preference: kvp_kernels_best() takes the last one the CPU runs. */
enum kvp_isa {
	KVP_ISA_SCALAR = 0,
	KVP_ISA_AVX2 = 1,    /* AVX2 + FMA + F16C + BMI2 */
	KVP_ISA_AVXVNNI = 2, /* the same + AVX-VNNI (VEX vpdpbusd), for CPUs without AVX-512 */
	KVP_ISA_AVX512 = 3,  /* AVX-512 F/BW/DQ/VL + VNNI + BF16 */
	KVP_ISA_NEON = 4,    /* aarch64 Advanced SIMD (fp, asimd) */
	KVP_ISA_NEONDOT = 5, /* the same + the dotprod extension (asimddp: sdot) */
	KVP_ISA__COUNT
};

/*
 * kvp_matmul_fn - out[r * ldo + o] = dot(W row o, x row r), r < @rows, o in [@o0, @o1)
 * @w:      the weight matrix, rows of @w_row_bytes bytes of the table slot's type
 * @x:      @rows activation rows of @x_row_bytes bytes each, in the format the table
 *          takes for the type (struct kvp_kernels.act), prepared by its quant_act
 * @k:      elements per row (a multiple of the type's block)
 *
 * Each weight row is read once for all @rows: decode batches (a few rows) stream the
 * weights once per step, prefill tiles (many rows) reuse each weight block for a tile
 * of tokens.  Threads split [0, d_out) into disjoint [o0, o1).
 */
typedef void kvp_matmul_fn(float *restrict out, size_t ldo, const void *restrict w,
			   size_t w_row_bytes, const void *restrict x, size_t x_row_bytes,
			   size_t rows, size_t k, size_t o0, size_t o1);

/* @k f32 activations to the format at @dst (quant.h); equals kvp_quant_act_ref(). */
typedef void kvp_quant_act_fn(void *restrict dst, const float *restrict x, size_t k);

/* @n elements (a multiple of the block) of a weight type to f32. */
typedef void kvp_dequant_fn(float *restrict dst, const void *restrict src, size_t n);

/* K/V element conversion for one enum kvp_dtype: @n values stored or loaded. */
typedef void kvp_kv_store_fn(void *restrict dst, const float *restrict src, size_t n);
typedef void kvp_kv_load_fn(float *restrict dst, const void *restrict src, size_t n);

/*
 * The integer K/V types (kvq.h has the formats and the reference each must equal):
 * kvp_kvq_row_fn quantizes one V row of @hd values to int8 and its scale code;
 * kvp_kvq_chan_fn a full block's K (@rows x @hd f32) per channel, @hd codes, into the
 * run's channel quads; kvp_kvq_load_fn turns a run of @rows tokens back to f32 rows
 * (per token or per channel scales), into the L1 scratch attention reads a block at
 * a time.
 */
typedef void kvp_kvq_row_fn(int8_t *restrict q, uint8_t *restrict code, const float *restrict x,
			    uint32_t hd);
typedef void kvp_kvq_chan_fn(int8_t *restrict q, uint8_t *restrict code, const float *restrict k,
			     uint32_t rows, uint32_t hd);
typedef void kvp_kvq_load_fn(float *restrict dst, const int8_t *restrict q,
			     const uint8_t *restrict code, uint32_t rows, uint32_t hd);

/*
 * kvp_attn_block8_fn - kvp_attn_block_fn for the @ng query heads of one kv head
 * against a full int8 block, its K and V read as stored (kvqattn.inc: scored in int8,
 * each query quantized per block with the K scales folded in; the keys and the values
 * read once for several heads, each token's V scale folded into its softmax weight)
 * @o, @m, @q:  the heads' outputs, (max, mass) pairs and queries, consecutive
 *              (@ng * hd, 2 * @ng and @ng * hd floats); each head as kvp_attn_block_fn's
 * @kq, @kcode: the block's K run (channel quads of @bt keys) and its @hd scale codes
 * @vq, @vcode: the block's V run (@bt rows of @hd codes) and its @bt scale codes
 * @sbuf:       room for @bt scores
 */
typedef void kvp_attn_block8_fn(float *restrict o, float *restrict m, const float *restrict q,
				uint32_t ng, const int8_t *restrict kq,
				const uint8_t *restrict kcode, const int8_t *restrict vq,
				const uint8_t *restrict vcode, uint32_t bt, float scale,
				float *restrict sbuf, uint32_t hd);

/*
 * int4 (kvq4.h): kvp_kvq4_fn quantizes a full block's K (per channel) or V (per token),
 * @bt rows of @hd f32, into its run (nibbles and scales); kvp_kvq4_load_fn turns the
 * first @rows rows of a run of @bt back to f32, into the L1 scratch.
 */
typedef void kvp_kvq4_fn(uint8_t *restrict run, const float *restrict x, uint32_t bt, uint32_t hd);
typedef void kvp_kvq4_load_fn(float *restrict dst, const uint8_t *restrict run, uint32_t rows,
			      uint32_t bt, uint32_t hd);

/*
 * kvp_attn_block_fn - one K/V block's worth of attention for one query head, with an
 * online softmax
 * @o:     (hd) running output, unnormalised
 * @m:     [0] running max score, [1] running mass; -inf and 0 before the first block
 * @q:     (hd) the query, RoPE applied
 * @K, @V: (lim, hd) keys and values of the block's first @lim positions
 * @scale: 1 / sqrt(hd)
 * @sbuf:  room for @lim scores
 */
typedef void kvp_attn_block_fn(float *restrict o, float *restrict m, const float *restrict q,
			       const float *restrict K, const float *restrict V, uint32_t lim,
			       float scale, float *restrict sbuf, uint32_t hd);

/**
 * struct kvp_kernels - one instruction set's kernels
 * @name:      "scalar", "avx2", "avxvnni", "avx512", "neon", "neondot"
 * @isa:       enum kvp_isa
 * @matmul:    per GGML type with kernels (quant.h: kvp_qtype() non-NULL); NULL elsewhere
 * @dequant:   the same types to f32 (embedding rows, tests)
 * @act:       per weight type, the enum kvp_act its matmul takes (quant.h: the AVX-512
 *             table takes struct kvp_qtype.act, the others struct kvp_act_q8k for the
 *             K-quants); callers quantize with quant_act[act[type]]
 * @quant_act: per enum kvp_act
 * @kv_store, @kv_load: per float enum kvp_dtype (f32, f16, bf16; NULL for int8)
 * @kvq_row8, @kvq_chan8, @kvq_load_row8, @kvq_load_chan8: int8 K/V (kvq.h)
 * @kvq4_k, @kvq4_v, @kvq4_load_k, @kvq4_load_v: int4 K/V (kvq4.h)
 * @rmsnorm:   out (n) = x (n) / rms(x) * w (n); out may equal x
 * @swiglu:    gate (n) = silu(gate) * up
 * @attn_block: see kvp_attn_block_fn
 * @attn_block8: see kvp_attn_block8_fn
 */
struct kvp_kernels {
	const char *name;
	uint32_t isa;
	kvp_matmul_fn *matmul[KVP_GGML_TYPE__COUNT];
	kvp_dequant_fn *dequant[KVP_GGML_TYPE__COUNT];
	uint8_t act[KVP_GGML_TYPE__COUNT];
	kvp_quant_act_fn *quant_act[KVP_ACT__COUNT];
	kvp_kv_store_fn *kv_store[KVP_DTYPE__COUNT];
	kvp_kv_load_fn *kv_load[KVP_DTYPE__COUNT];
	kvp_kvq_row_fn *kvq_row8;
	kvp_kvq_chan_fn *kvq_chan8;
	kvp_kvq_load_fn *kvq_load_row8;
	kvp_kvq_load_fn *kvq_load_chan8;
	kvp_kvq4_fn *kvq4_k;
	kvp_kvq4_fn *kvq4_v;
	kvp_kvq4_load_fn *kvq4_load_k;
	kvp_kvq4_load_fn *kvq4_load_v;
	void (*rmsnorm)(float *out, const float *x, const float *restrict w, size_t n, float eps);
	void (*swiglu)(float *restrict gate, const float *restrict up, size_t n);
	kvp_attn_block_fn *attn_block;
	kvp_attn_block8_fn *attn_block8;
};

/* The tables (kernels/<isa>.c); use them through the functions below. */
extern const struct kvp_kernels kvp_kernels_scalar;
extern const struct kvp_kernels kvp_kernels_avx2;
extern const struct kvp_kernels kvp_kernels_avxvnni;
extern const struct kvp_kernels kvp_kernels_avx512;
extern const struct kvp_kernels kvp_kernels_neon;
extern const struct kvp_kernels kvp_kernels_neondot;

/*
 * kvp_isa_name() - "scalar", "avx2", ..., or NULL for an unknown @isa; every table's,
 * also those of another architecture than the build's.
 */
const char *kvp_isa_name(uint32_t isa);

/*
 * kvp_isa_supported() - does this CPU (and OS) run @isa?  Scalar always; another
 * architecture's never.
 */
int kvp_isa_supported(uint32_t isa);

/**
 * struct kvp_cpu - the words the choice of table depends on
 * @max_leaf: x86: CPUID.0:EAX
 * @ecx1:     x86: CPUID.1:ECX (FMA, OSXSAVE, AVX, F16C)
 * @ebx7, @ecx7, @eax7_1: x86: CPUID.(7,0):EBX, ECX and CPUID.(7,1):EAX
 * @xcr0:     x86: XGETBV(0), the register state the OS saves (0 without OSXSAVE)
 * @hwcap, @hwcap2: aarch64: getauxval(AT_HWCAP), getauxval(AT_HWCAP2) (KVP_HWCAP_*)
 *
 * Another architecture's words are 0.
 */
struct kvp_cpu {
	uint32_t max_leaf, ecx1, ebx7, ecx7, eax7_1;
	uint64_t xcr0;
	uint64_t hwcap, hwcap2;
};

/*
 * The aarch64 hwcap bits kvpool reads (the kernel's uapi asm/hwcap.h values, spelled here
 * so that the tests on any architecture can build the words of an ARM CPU).
 */
#define KVP_HWCAP_FP (1ull << 0)
#define KVP_HWCAP_ASIMD (1ull << 1)    /* Advanced SIMD (NEON) */
#define KVP_HWCAP_ASIMDHP (1ull << 10) /* f16 arithmetic in NEON */
#define KVP_HWCAP_ASIMDDP (1ull << 20) /* sdot/udot (dotprod) */
#define KVP_HWCAP_SVE (1ull << 22)
#define KVP_HWCAP2_SVE2 (1ull << 1)
#define KVP_HWCAP2_I8MM (1ull << 13) /* smmla/usdot */
#define KVP_HWCAP2_BF16 (1ull << 14)

/*
 * kvp_cpu_read() - this CPU's words; kvp_isa_supported_by() - would @cpu run @isa?
 * kvp_isa_best() - the last enum kvp_isa this build has a table for and @cpu runs (what
 * kvp_kernels_best() takes).
 */
void kvp_cpu_read(struct kvp_cpu *cpu);
int kvp_isa_supported_by(const struct kvp_cpu *cpu, uint32_t isa);
uint32_t kvp_isa_best(const struct kvp_cpu *cpu);

/*
 * kvp_kernels_for() - the table of @isa, or NULL when unknown, not supported here or of
 * another architecture than the build's.
 */
const struct kvp_kernels *kvp_kernels_for(uint32_t isa);

/**
 * kvp_kernels_best() - the table to use: the widest the CPU supports, or the one
 * KVP_ISA names
 * @out: out; the table (immutable, static)
 *
 * Return: 0; -EINVAL when KVP_ISA names no instruction set; -ENOTSUP when it names one
 * this CPU lacks.  Callers report both (a forced path must never fall back silently).
 */
int kvp_kernels_best(const struct kvp_kernels **out);

/**
 * kvp_kernels_check() - is every slot of @k filled?
 * Return: 0, or -EINVAL naming nothing (tests name the slot via kvp_kernels_gap()).
 */
int kvp_kernels_check(const struct kvp_kernels *k);

/* kvp_kernels_gap() - the first empty slot of @k as text ("matmul[q4_k]"), or NULL. */
const char *kvp_kernels_gap(const struct kvp_kernels *k, char *buf, size_t len);

/* Rotation and softmax run the same everywhere (not on a hot path worth a table slot). */

/*
 * kvp_rope_table() - cos/sin for one position: cs[2i] = cos(pos * base^(-2i/n_rot)),
 * cs[2i+1] = sin(...), i < n_rot / 2.  Computed in double.
 */
void kvp_rope_table(float *restrict cs, uint32_t pos, uint32_t n_rot, float base);

/*
 * kvp_rope_apply() - rotate the pairs (2i, 2i+1), i < n_rot / 2, of each of @n_heads
 * heads of @head_dim at @x by the angles of @cs (the GGUF "llama" RoPE layout).
 */
void kvp_rope_apply(float *restrict x, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot,
		    const float *restrict cs);

/* x (n) = softmax(x), max-subtracted; sums in double. */
void kvp_softmax(float *x, size_t n);

#endif /* KVP_COMPUTE_KERNELS_KERNELS_H */
