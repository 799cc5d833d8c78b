/* SPDX-License-Identifier: MIT */
/*
 * test_kernels.c - every kernel table this CPU runs, against references written here.
 *
 *  - conversions: f16/bf16 exactly against the IEEE definitions;
 *  - dequantization: every weight type against a decoder written in this file from the
 *    GGUF block definitions, in ggml's loop order (a second, independent reading of the
 *    layouts), on random blocks with extreme and zero scales; each table's dequant equals
 *    the reference bit for bit;
 *  - the quantizer: dequantize(quantize(x)) is close to x for every type;
 *  - activation quantizers of each table equal the reference byte for byte;
 *  - matmul of every type on every table, for 1..32 input rows (decode batches) and
 *    prefill shapes, ragged shapes and partial output ranges of every remainder of the
 *    register tiles, and weights and activations at the largest codes (the int16 sums
 *    of the AVX2 kernels must not saturate), against the dot product of the dequantized
 *    weights and the dequantized activations computed in double: only rounding may
 *    differ; and the integer types' rows computed together are bit-equal to each alone;
 *  - the float kernels (rmsnorm, swiglu, attention step, rope, softmax) vs formulas.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/kernels/kernels.h"
#include "compute/linear.h"
#include "compute/threads.h"
#include "kvpool/layout.h"
#include "tests/lib/testlib.h"

static uint32_t bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
	return kvp_test_xorshift(&rng);
}

/* uniform in [-1, 1) */
static float frand(void)
{
	return (float)((next() >> 40) * 0x1p-24 * 2.0 - 1.0);
}

/*
 * compute/kernels/meson.build: avxvnni.c built for the tests with vpdpbusd's AVX-512 VL
 * encoding, the AVX-VNNI table's code on a CPU with AVX-512 VNNI but not AVX-VNNI
 */
#if defined(__x86_64__) || defined(__i386__)
extern const struct kvp_kernels kvp_kernels_avxvnni_evex;
#endif

/* The tables this machine runs (scalar always), and the AVX-VNNI twin where it runs. */
static const struct kvp_kernels *tables[KVP_ISA__COUNT + 1];
static int n_tables;

static int setup(void **state)
{
	for (uint32_t i = 0; i < KVP_ISA__COUNT; i++) {
		if (kvp_kernels_for(i))
			tables[n_tables++] = kvp_kernels_for(i);
#if defined(__x86_64__) || defined(__i386__)
		else if (i == KVP_ISA_AVXVNNI && kvp_isa_supported(KVP_ISA_AVX512))
			tables[n_tables++] = &kvp_kernels_avxvnni_evex; /* in its place */
#endif
	}
	return 0;
}

/* IEEE binary16 by definition: (-1)^s * 2^(e-15) * (1 + m/1024), subnormal 2^-14 * m/1024 */
static float half_ref(uint16_t h)
{
	int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
	double v;

	if (e == 31)
		return m ? NAN : (s ? -INFINITY : INFINITY);
	v = e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
	return (float)(s ? -v : v);
}

/*
 * every table built, in enum kvp_isa order, whether this CPU runs it or not; NULL for
 * another architecture's (compute/kernels/meson.build builds the host's only)
 */
static const struct kvp_kernels *const built[KVP_ISA__COUNT] = {
	[KVP_ISA_SCALAR] = &kvp_kernels_scalar,
#if defined(__x86_64__) || defined(__i386__)
	[KVP_ISA_AVX2] = &kvp_kernels_avx2,
	[KVP_ISA_AVXVNNI] = &kvp_kernels_avxvnni,
	[KVP_ISA_AVX512] = &kvp_kernels_avx512,
#elif defined(__aarch64__)
	[KVP_ISA_NEON] = &kvp_kernels_neon,
	[KVP_ISA_NEONDOT] = &kvp_kernels_neondot,
#endif
};

static void test_tables_complete(void **state)
{
	/* every table has every slot and its own name; the CPU's best is in the list */
	char buf[64];
	const struct kvp_kernels *best;

	for (uint32_t i = 0; i < KVP_ISA__COUNT; i++) {
		const struct kvp_kernels *k = built[i];

		assert_non_null(kvp_isa_name(i));
		for (uint32_t j = 0; j < i; j++)
			assert_string_not_equal(kvp_isa_name(j), kvp_isa_name(i));
		if (!k) { /* another architecture's: never supported here */
			assert_false(kvp_isa_supported(i));
			assert_null(kvp_kernels_for(i));
			continue;
		}
		if (kvp_kernels_gap(k, buf, sizeof(buf)))
			fail_msg("table %s: empty slot %s", k->name, buf);
		assert_int_equal(kvp_kernels_check(k), 0);
		assert_int_equal(k->isa, i);
		assert_string_equal(kvp_isa_name(i), k->name);
	}
	assert_null(kvp_isa_name(KVP_ISA__COUNT));
	assert_null(kvp_kernels_for(KVP_ISA__COUNT));
	assert_non_null(kvp_kernels_for(KVP_ISA_SCALAR));
	unsetenv("KVP_ISA");
	assert_int_equal(kvp_kernels_best(&best), 0);
	assert_ptr_equal(best, tables[n_tables - 1]);
	print_message("kernel tables on this CPU:");
	for (int t = 0; t < n_tables; t++)
		print_message(" %s", tables[t]->name);
	print_message("\n");
}

static void test_isa_env_forces_each_table(void **state)
{
	/*
	 * KVP_ISA=<name> gives exactly that table where the CPU runs it and -ENOTSUP where
	 * not (never a fallback); a name no table has is -EINVAL; empty is unset
	 */
	const struct kvp_kernels *k, *best;
	static const char *const unknown[] = { "mmx", "AVX2", "avx", "avx2 ", "avx512vnni" };

	unsetenv("KVP_ISA");
	assert_int_equal(kvp_kernels_best(&best), 0);
	for (uint32_t i = 0; i < KVP_ISA__COUNT; i++) {
		int rc;

		assert_int_equal(setenv("KVP_ISA", kvp_isa_name(i), 1), 0);
		k = (const struct kvp_kernels *)1;
		rc = kvp_kernels_best(&k);
		if (kvp_isa_supported(i)) {
			assert_non_null(built[i]);
			assert_int_equal(rc, 0);
			assert_ptr_equal(k, built[i]);
			assert_ptr_equal(kvp_kernels_for(i), built[i]);
		} else {
			assert_int_equal(rc, -ENOTSUP);
			assert_null(k);
			assert_null(kvp_kernels_for(i));
		}
	}
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		assert_int_equal(setenv("KVP_ISA", unknown[i], 1), 0);
		assert_int_equal(kvp_kernels_best(&k), -EINVAL);
		assert_null(k);
	}
	assert_int_equal(setenv("KVP_ISA", "", 1), 0);
	assert_int_equal(kvp_kernels_best(&k), 0);
	assert_ptr_equal(k, best);
	unsetenv("KVP_ISA");
}

/* cpuid words of an AVX2 CPU whose OS saves YMM state (FMA, OSXSAVE, AVX, F16C; AVX2, BMI2) */
static struct kvp_cpu cpu_avx2(void)
{
	return (struct kvp_cpu){ .max_leaf = 0x10,
				 .ecx1 = 1u << 12 | 1u << 27 | 1u << 28 | 1u << 29,
				 .ebx7 = 1u << 5 | 1u << 8,
				 .xcr0 = 0x7 };
}

/* ... plus AVX-512 F, DQ, BW, VL, VNNI, BF16 and the ZMM state */
static struct kvp_cpu cpu_avx512(void)
{
	struct kvp_cpu c = cpu_avx2();

	c.ebx7 |= 1u << 16 | 1u << 17 | 1u << 30 | 1u << 31;
	c.ecx7 |= 1u << 11;
	c.eax7_1 |= 1u << 5;
	c.xcr0 |= 0xe0;
	return c;
}

/*
 * kvp_isa_best() of @c's words, of this build's architecture when @native: the table they
 * admit; words of another architecture admit none here (those tables are not linked), so
 * the answer is the best table the words alone give
 */
static uint32_t best_of(const struct kvp_cpu *c, bool native)
{
	uint32_t i = KVP_ISA__COUNT - 1;

	if (native)
		return kvp_isa_best(c);
	assert_int_equal(kvp_isa_best(c), KVP_ISA_SCALAR);
	while (i > KVP_ISA_SCALAR && !kvp_isa_supported_by(c, i))
		i--;
	return i;
}

#if defined(__x86_64__) || defined(__i386__)
#define x86_best(c) best_of(c, true)
#else
#define x86_best(c) best_of(c, false)
#endif
#if defined(__aarch64__)
#define arm_best(c) best_of(c, true)
#else
#define arm_best(c) best_of(c, false)
#endif

static void test_dispatch_by_cpuid(void **state)
{
	/* the table each kind of CPU gets, from its cpuid words alone */
	struct kvp_cpu c, real;

	c = cpu_avx2(); /* Zen 2/3, Haswell..Comet Lake */
	assert_int_equal(x86_best(&c), KVP_ISA_AVX2);
	assert_false(kvp_isa_supported_by(&c, KVP_ISA_AVXVNNI));
	assert_false(kvp_isa_supported_by(&c, KVP_ISA_AVX512));
	c.eax7_1 |= 1u << 4; /* Alder Lake and later client cores: AVX-VNNI, no AVX-512 */
	assert_int_equal(x86_best(&c), KVP_ISA_AVXVNNI);
	assert_true(kvp_isa_supported_by(&c, KVP_ISA_AVX2));
	c = cpu_avx512(); /* Zen 4: AVX-512 VNNI but no AVX-VNNI */
	assert_int_equal(x86_best(&c), KVP_ISA_AVX512);
	assert_false(kvp_isa_supported_by(&c, KVP_ISA_AVXVNNI));
	assert_true(kvp_isa_supported_by(&c, KVP_ISA_AVX2));
	c.eax7_1 |= 1u << 4; /* Sapphire Rapids: both, AVX-512 preferred */
	assert_int_equal(x86_best(&c), KVP_ISA_AVX512);
	assert_true(kvp_isa_supported_by(&c, KVP_ISA_AVXVNNI));
	c.xcr0 = 0x7; /* an OS that does not save ZMM state */
	assert_int_equal(x86_best(&c), KVP_ISA_AVXVNNI);
	c = cpu_avx512();
	c.eax7_1 &= ~(1u << 5); /* Ice Lake: no AVX512_BF16 */
	assert_int_equal(x86_best(&c), KVP_ISA_AVX2);
	c = cpu_avx2();
	c.ebx7 &= ~(1u << 8); /* no BMI2: the vector files use it */
	assert_int_equal(x86_best(&c), KVP_ISA_SCALAR);
	c = cpu_avx2();
	c.ecx1 &= ~(1u << 29); /* no F16C */
	assert_int_equal(x86_best(&c), KVP_ISA_SCALAR);
	c = cpu_avx2();
	c.ecx1 &= ~(1u << 27); /* no OSXSAVE: the OS saves no YMM state */
	c.xcr0 = 0;
	assert_int_equal(x86_best(&c), KVP_ISA_SCALAR);
	c = cpu_avx2();
	c.xcr0 = 0x3; /* XSAVE, but YMM state off */
	assert_int_equal(x86_best(&c), KVP_ISA_SCALAR);
	c = cpu_avx512();
	c.max_leaf = 6; /* no leaf 7 */
	assert_int_equal(x86_best(&c), KVP_ISA_SCALAR);
	memset(&c, 0, sizeof(c));
	assert_true(kvp_isa_supported_by(&c, KVP_ISA_SCALAR));
	assert_false(kvp_isa_supported_by(&c, KVP_ISA__COUNT));

	/* ARM words (every hwcap bit) admit no x86 table */
	memset(&c, 0, sizeof(c));
	c.hwcap = c.hwcap2 = ~0ull;
	for (uint32_t i = KVP_ISA_AVX2; i <= KVP_ISA_AVX512; i++)
		assert_false(kvp_isa_supported_by(&c, i));
	/* and x86 words (every cpuid bit) no ARM table */
	c = cpu_avx512();
	c.eax7_1 = c.ecx1 = ~0u;
	assert_false(kvp_isa_supported_by(&c, KVP_ISA_NEON));
	assert_false(kvp_isa_supported_by(&c, KVP_ISA_NEONDOT));

	/* the aarch64 tables from the hwcaps alone */
	memset(&c, 0, sizeof(c));
	c.hwcap = KVP_HWCAP_FP | KVP_HWCAP_ASIMD; /* Cortex-A53/A72: no dotprod */
	assert_int_equal(arm_best(&c), KVP_ISA_NEON);
	assert_false(kvp_isa_supported_by(&c, KVP_ISA_NEONDOT));
	c.hwcap |= KVP_HWCAP_ASIMDDP | KVP_HWCAP_ASIMDHP; /* Neoverse N1 and later */
	assert_int_equal(arm_best(&c), KVP_ISA_NEONDOT);
	assert_true(kvp_isa_supported_by(&c, KVP_ISA_NEON));
	c.hwcap = KVP_HWCAP_ASIMD | KVP_HWCAP_ASIMDDP; /* no fp: never on Linux, refused */
	assert_int_equal(arm_best(&c), KVP_ISA_SCALAR);
	c.hwcap = KVP_HWCAP_FP | KVP_HWCAP_ASIMDDP;
	assert_int_equal(arm_best(&c), KVP_ISA_SCALAR);

	/* and this machine's words agree with what it is told it runs */
	kvp_cpu_read(&real);
	for (uint32_t i = 0; i < KVP_ISA__COUNT; i++)
		assert_int_equal(kvp_isa_supported_by(&real, i), kvp_isa_supported(i));
#if defined(__aarch64__)
	/* the kernel's hwcaps: Advanced SIMD on every aarch64 Linux CPU; no cpuid words */
	assert_true(real.hwcap & KVP_HWCAP_ASIMD);
	assert_int_equal(real.max_leaf, 0);
	print_message("hwcaps: asimddp %d asimdhp %d sve %d i8mm %d bf16 %d\n",
		      !!(real.hwcap & KVP_HWCAP_ASIMDDP), !!(real.hwcap & KVP_HWCAP_ASIMDHP),
		      !!(real.hwcap & KVP_HWCAP_SVE), !!(real.hwcap2 & KVP_HWCAP2_I8MM),
		      !!(real.hwcap2 & KVP_HWCAP2_BF16));
#else
	assert_int_equal(real.hwcap | real.hwcap2, 0);
#endif
}

static void test_f16_bf16_all_values_exact(void **state)
{
	/* all 65536 halves and bfloats: the reference and every table's bulk paths */
	uint16_t *h = malloc(65536 * 2);
	float *f = malloc(65536 * 4), *g = malloc(65536 * 4);

	for (uint32_t i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	assert_int_equal(kvp_dequant_ref(f, h, KVP_GGML_F16, 65536), 0);
	for (int t = 0; t < n_tables; t++) {
		tables[t]->dequant[KVP_GGML_F16](g, h, 65536);
		for (uint32_t i = 0; i < 65536; i++) {
			float r = half_ref((uint16_t)i);

			if (isnan(r)) {
				assert_true(isnan(f[i]) && isnan(g[i]));
				assert_int_equal(bits(f[i]), bits(g[i])); /* same NaN payload */
			} else {
				assert_int_equal(bits(f[i]), bits(r));
				assert_int_equal(bits(g[i]), bits(r));
			}
		}
		tables[t]->dequant[KVP_GGML_BF16](g, h, 65536);
		for (uint32_t i = 0; i < 65536; i++)
			assert_int_equal(bits(g[i]), i << 16);
	}
	free(h);
	free(f);
	free(g);
}

static void test_f32_to_f16_bf16_rounding(void **state)
{
	/*
	 * every finite half round-trips; midpoints go to the even neighbour; every table's
	 * K/V stores equal the scalar conversions on random values of all magnitudes
	 */
	float src[4099];
	uint16_t out[4099];

	for (uint32_t i = 0; i < 0x7c00; i++) {
		for (uint32_t sign = 0; sign < 2; sign++) {
			uint16_t h = (uint16_t)(i | sign << 15);

			assert_int_equal(kvp_f32_to_f16(kvp_f16_to_f32(h)), h);
			if (i + 1 < 0x7c00) {
				float mid = (kvp_f16_to_f32((uint16_t)i) +
					     kvp_f16_to_f32((uint16_t)(i + 1))) /
					    2;
				uint16_t want = (i & 1) ? i + 1 : i;

				assert_int_equal(kvp_f32_to_f16(mid), want);
			}
		}
	}
	assert_int_equal(kvp_f32_to_f16(70000.0f), 0x7c00);
	assert_int_equal(kvp_f32_to_f16(-INFINITY), 0xfc00);
	assert_true((kvp_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (kvp_f32_to_f16(NAN) & 0x3ff));
	for (int i = 0; i < 4099; i++) {
		uint64_t s = next();

		src[i] = ldexpf((float)(s >> 40) / (1 << 24), (int)((s >> 8) % 50) - 30) *
			 ((s & 1) ? -1 : 1);
	}
	for (int t = 0; t < n_tables; t++) {
		tables[t]->kv_store[KVP_DTYPE_F16](out, src, 4099);
		for (int i = 0; i < 4099; i++)
			assert_int_equal(out[i], kvp_f32_to_f16(src[i]));
		tables[t]->kv_store[KVP_DTYPE_BF16](out, src, 4099);
		for (int i = 0; i < 4099; i++) {
			uint32_t u = bits(src[i]), lo = u & 0xffff, hi = u >> 16;
			uint16_t want = (uint16_t)(lo > 0x8000 || (lo == 0x8000 && (hi & 1)) ?
							   hi + 1 :
							   hi);

			assert_int_equal(out[i], want);
		}
	}
}

/*
 * ---- a second reading of the block layouts, in ggml's loop order ----
 * Each decodes one block of @type at @b into 32 or 256 floats.
 */
static float h16(const uint8_t *p)
{
	uint16_t h;

	memcpy(&h, p, 2);
	return half_ref(h);
}

static void k4_scale_min(int j, const uint8_t *q, int *d, int *m)
{
	if (j < 4) {
		*d = q[j] & 63;
		*m = q[j + 4] & 63;
	} else {
		*d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
		*m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
	}
}

static void decode_block(const uint8_t *b, uint32_t type, float *y)
{
	switch (type) {
	case KVP_GGML_Q4_0: /* d; qs[16] */
		for (int j = 0; j < 16; j++) {
			y[j] = ((b[2 + j] & 0xF) - 8) * h16(b);
			y[j + 16] = ((b[2 + j] >> 4) - 8) * h16(b);
		}
		return;
	case KVP_GGML_Q4_1: /* d; m; qs[16] */
		for (int j = 0; j < 16; j++) {
			y[j] = (b[4 + j] & 0xF) * h16(b) + h16(b + 2);
			y[j + 16] = (b[4 + j] >> 4) * h16(b) + h16(b + 2);
		}
		return;
	case KVP_GGML_Q5_0:
	case KVP_GGML_Q5_1: { /* d; (m;) qh[4]; qs[16] */
		int one = type == KVP_GGML_Q5_1;
		uint32_t qh;
		const uint8_t *qs = b + (one ? 8 : 6);

		memcpy(&qh, b + (one ? 4 : 2), 4);
		for (int j = 0; j < 16; j++) {
			int xh0 = ((qh >> j) << 4) & 0x10, xh1 = (qh >> (j + 12)) & 0x10;
			int x0 = (qs[j] & 0xF) | xh0, x1 = (qs[j] >> 4) | xh1;

			if (one) {
				y[j] = x0 * h16(b) + h16(b + 2);
				y[j + 16] = x1 * h16(b) + h16(b + 2);
			} else {
				y[j] = (x0 - 16) * h16(b);
				y[j + 16] = (x1 - 16) * h16(b);
			}
		}
		return;
	}
	case KVP_GGML_Q8_0:
		for (int j = 0; j < 32; j++)
			y[j] = (int8_t)b[2 + j] * h16(b);
		return;
	case KVP_GGML_Q2_K: { /* scales[16]; qs[64]; d; dmin */
		const uint8_t *q = b + 16;
		float d = h16(b + 80), mn = h16(b + 82);
		int is = 0;

		for (int n = 0; n < 256; n += 128, q += 32)
			for (int shift = 0; shift < 8; shift += 2)
				for (int half = 0; half < 2; half++) {
					uint8_t sc = b[is++];
					float dl = d * (sc & 0xF), ml = mn * (sc >> 4);

					for (int l = 0; l < 16; l++)
						*y++ = dl * ((q[l + 16 * half] >> shift) & 3) - ml;
				}
		return;
	}
	case KVP_GGML_Q3_K: { /* hmask[32]; qs[64]; scales[12]; d */
		const uint8_t *hm = b, *q = b + 32, *s = b + 96;
		float d = h16(b + 108);
		int8_t sc[16];
		uint8_t m = 1;
		int is = 0;

		for (int j = 0; j < 16; j++) {
			int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;

			sc[j] = (int8_t)((lo | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32);
		}
		for (int n = 0; n < 256; n += 128, q += 32)
			for (int shift = 0; shift < 8; shift += 2, m <<= 1)
				for (int half = 0; half < 2; half++) {
					float dl = d * sc[is++];

					for (int l = 16 * half; l < 16 * half + 16; l++)
						*y++ = dl * (((q[l] >> shift) & 3) -
							     ((hm[l] & m) ? 0 : 4));
				}
		return;
	}
	case KVP_GGML_Q4_K:
	case KVP_GGML_Q5_K: { /* d; dmin; scales[12]; (qh[32];) qs[128] */
		int five = type == KVP_GGML_Q5_K;
		const uint8_t *ql = b + (five ? 48 : 16), *qh = b + 16;
		float d = h16(b), mn = h16(b + 2);
		uint8_t u1 = 1, u2 = 2;

		for (int j = 0, is = 0; j < 256; j += 64, ql += 32, is += 2, u1 <<= 2, u2 <<= 2) {
			int sc, m;
			float d1, m1, d2, m2;

			k4_scale_min(is, b + 4, &sc, &m);
			d1 = d * sc;
			m1 = mn * m;
			k4_scale_min(is + 1, b + 4, &sc, &m);
			d2 = d * sc;
			m2 = mn * m;
			for (int l = 0; l < 32; l++)
				*y++ = d1 * ((ql[l] & 0xF) + (five && (qh[l] & u1) ? 16 : 0)) - m1;
			for (int l = 0; l < 32; l++)
				*y++ = d2 * ((ql[l] >> 4) + (five && (qh[l] & u2) ? 16 : 0)) - m2;
		}
		return;
	}
	case KVP_GGML_Q6_K: { /* ql[128]; qh[64]; scales[16]; d */
		const uint8_t *ql = b, *qh = b + 128;
		const int8_t *sc = (const int8_t *)(b + 192);
		float d = h16(b + 208);

		for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
			for (int l = 0; l < 32; l++) {
				int is = l / 16;

				y[l] = d * sc[is] * (((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
				y[l + 32] = d * sc[is + 2] *
					    (((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
				y[l + 64] = d * sc[is + 4] *
					    (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
				y[l + 96] = d * sc[is + 6] *
					    (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
			}
		return;
	}
	}
	fail_msg("decode_block: type %u", type);
}

static const uint32_t int_types[] = {
	KVP_GGML_Q8_0, KVP_GGML_Q4_0, KVP_GGML_Q4_1, KVP_GGML_Q5_0, KVP_GGML_Q5_1,
	KVP_GGML_Q2_K, KVP_GGML_Q3_K, KVP_GGML_Q4_K, KVP_GGML_Q5_K, KVP_GGML_Q6_K,
};
#define N_INT_TYPES (sizeof(int_types) / sizeof(int_types[0]))

static const uint32_t all_types[] = {
	KVP_GGML_F32,  KVP_GGML_F16,  KVP_GGML_BF16, KVP_GGML_Q8_0, KVP_GGML_Q4_0,
	KVP_GGML_Q4_1, KVP_GGML_Q5_0, KVP_GGML_Q5_1, KVP_GGML_Q2_K, KVP_GGML_Q3_K,
	KVP_GGML_Q4_K, KVP_GGML_Q5_K, KVP_GGML_Q6_K,
};
#define N_ALL_TYPES (sizeof(all_types) / sizeof(all_types[0]))

/* Positions of the binary16 scales in each integer block (to plant extremes there). */
static void scale_offsets(uint32_t type, int *off, int *n)
{
	switch (type) {
	case KVP_GGML_Q4_1:
	case KVP_GGML_Q5_1:
		off[0] = 0;
		off[1] = 2;
		*n = 2;
		return;
	case KVP_GGML_Q2_K:
		off[0] = 80;
		off[1] = 82;
		*n = 2;
		return;
	case KVP_GGML_Q3_K:
		off[0] = 108;
		*n = 1;
		return;
	case KVP_GGML_Q4_K:
	case KVP_GGML_Q5_K:
		off[0] = 0;
		off[1] = 2;
		*n = 2;
		return;
	case KVP_GGML_Q6_K:
		off[0] = 208;
		*n = 1;
		return;
	default:
		off[0] = 0;
		*n = 1;
		return;
	}
}

/* @nb random blocks of @type; scales random finite halves, with zero and extremes mixed in */
static void random_blocks(uint8_t *buf, uint32_t type, size_t nb, int extreme)
{
	const struct kvp_qtype *t = kvp_qtype(type);
	int off[2], n;

	for (size_t i = 0; i < nb * t->block_bytes; i++)
		buf[i] = (uint8_t)next();
	scale_offsets(type, off, &n);
	for (size_t b = 0; b < nb; b++) {
		for (int s = 0; s < n; s++) {
			static const uint16_t special[] = { 0x0000, 0x8000, 0x7bff,
							    0xfbff, 0x0001, 0x3c00 };
			uint16_t h = extreme && b % 3 == 0 ? special[next() % 6] :
							     (uint16_t)(0x2000 + next() % 0x1800) |
								     (next() & 0x8000);

			memcpy(buf + b * t->block_bytes + off[s], &h, 2);
		}
	}
}

static void test_dequant_every_type(void **state)
{
	/*
	 * random blocks (zero, tiny, huge and negative scales among them) decode the same in
	 * quant.c's reference, in this file's second reading and in every table's dequant
	 */
	enum { NB = 48 };
	uint8_t *buf = malloc(NB * 292);
	float *ref = malloc(NB * 256 * 4), *got = malloc(NB * 256 * 4), y[256];

	for (size_t i = 0; i < N_INT_TYPES; i++) {
		uint32_t type = int_types[i];
		const struct kvp_qtype *t = kvp_qtype(type);
		size_t n = NB * t->block;

		random_blocks(buf, type, NB, 1);
		assert_int_equal(kvp_dequant_ref(ref, buf, type, n), 0);
		for (size_t b = 0; b < NB; b++) {
			decode_block(buf + b * t->block_bytes, type, y);
			for (uint32_t e = 0; e < t->block; e++)
				if (bits(y[e]) != bits(ref[b * t->block + e]) &&
				    !(isnan(y[e]) && isnan(ref[b * t->block + e])))
					fail_msg("%s block %zu elem %u: ref %g, test decoder %g",
						 t->name, b, e, ref[b * t->block + e], y[e]);
		}
		for (int k = 0; k < n_tables; k++) {
			tables[k]->dequant[type](got, buf, n);
			assert_memory_equal(got, ref, n * 4);
		}
	}
	assert_int_equal(kvp_dequant_ref(ref, buf, KVP_GGML_IQ2_XS, 256), -ENOTSUP);
	free(buf);
	free(ref);
	free(got);
}

static void test_quantize_round_trip(void **state)
{
	/*
	 * dequantize(quantize(x)) stays within about one step of x (the symmetric types map
	 * the extreme to -2^(b-1) exactly and lose up to a step on the other side)
	 */
	enum { N = 4096 };
	static const struct {
		uint32_t type;
		double rel;
	} bound[] = {
		{ KVP_GGML_F16, 1e-3 },	 { KVP_GGML_BF16, 8e-3 }, { KVP_GGML_Q8_0, 0.01 },
		{ KVP_GGML_Q5_0, 0.07 }, { KVP_GGML_Q5_1, 0.07 }, { KVP_GGML_Q4_0, 0.13 },
		{ KVP_GGML_Q4_1, 0.13 }, { KVP_GGML_Q6_K, 0.04 }, { KVP_GGML_Q5_K, 0.07 },
		{ KVP_GGML_Q4_K, 0.13 }, { KVP_GGML_Q3_K, 0.3 },  { KVP_GGML_Q2_K, 0.5 },
	};
	float *x = malloc(N * 4), *y = malloc(N * 4);
	uint8_t *q = malloc(N * 4);

	for (int i = 0; i < N; i++)
		x[i] = frand() * (i % 256 < 16 ? 0.01f : 1.0f); /* a quiet sub-block too */
	for (size_t i = 0; i < sizeof(bound) / sizeof(bound[0]); i++) {
		double err = 0, mag = 0;

		assert_int_equal(kvp_quantize_ref(q, x, bound[i].type, N), 0);
		assert_int_equal(kvp_dequant_ref(y, q, bound[i].type, N), 0);
		for (int j = 0; j < N; j++) {
			/* not fmax(): GCC 12 for aarch64 fails (ICE) vectorizing that reduction */
			double e = fabs((double)y[j] - x[j]), a = fabs(x[j]);

			err = e > err ? e : err;
			mag = a > mag ? a : mag;
		}
		print_message("%s: max round-trip error %.4f of %.4f\n",
			      kvp_qtype(bound[i].type)->name, err, mag);
		if (err > bound[i].rel * mag)
			fail_msg("%s: max error %g of max magnitude %g",
				 kvp_qtype(bound[i].type)->name, err, mag);
	}
	free(x);
	free(y);
	free(q);
}

static void test_act_quantizers_equal_reference(void **state)
{
	/* each table's activation formats equal the reference byte for byte */
	enum { K = 1024 };
	float x[K];
	uint8_t ref[K * 4], got[K * 4];

	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < K; i++)
			x[i] = round == 0 ? 0.0f :
					    frand() * (round == 3 ? 1e6f : 3.0f) *
						    (i % 97 == 0 ? 40.0f : 1.0f);
		for (uint32_t a = 0; a < KVP_ACT__COUNT; a++) {
			size_t bytes = kvp_act_row_bytes(a, K);

			kvp_quant_act_ref(ref, a, x, K);
			for (int t = 0; t < n_tables; t++) {
				memset(got, 0xa5, sizeof(got));
				tables[t]->quant_act[a](got, x, K);
				if (memcmp(got, ref, bytes))
					fail_msg("table %s act format %u round %d differs",
						 tables[t]->name, a, round);
			}
		}
	}
}

/* The activation row as the kernels see it, dequantized (what an exact dot uses). */
static void act_values(float *v, uint32_t act, const uint8_t *row, size_t k)
{
	switch (act) {
	case KVP_ACT_F32:
		memcpy(v, row, k * 4);
		return;
	case KVP_ACT_BF16:
		for (size_t i = 0; i < k; i++)
			v[i] = kvp_bf16_to_f32(((const uint16_t *)row)[i]);
		return;
	case KVP_ACT_Q8:
		for (size_t i = 0; i < k; i++) {
			const struct kvp_act_q8 *a = (const struct kvp_act_q8 *)row + i / KVP_QG;

			v[i] = a->d[(i % KVP_QG) / 16] * (float)a->q[kvp_q8_pos(i % KVP_QG)];
		}
		return;
	case KVP_ACT_Q8K:
		for (size_t i = 0; i < k; i++) {
			const struct kvp_act_q8k *a = (const struct kvp_act_q8k *)row + i / KVP_QG;

			v[i] = a->d * (float)a->q[kvp_q8k_pos(i % KVP_QG)];
		}
		return;
	}
}

/*
 * one matmul of @type on table @kt: @rows input rows, k = @k, outputs [o0, o1) of @d_out;
 * @extreme: weights of one sign per 16 elements (+-1, so most codes are the largest the
 * type has) against activations all +1 or all -1 (codes +-127), in place of random ones
 */
static void matmul_case_x(const struct kvp_kernels *kt, uint32_t type, size_t rows, size_t k,
			  size_t d_out, size_t o0, size_t o1, int extreme)
{
	const struct kvp_qtype *t = kvp_qtype(type);
	size_t rb = kvp_ggml_row_bytes(type, k), xs = kvp_act_row_bytes(kt->act[type], k);
	float *wf = malloc(d_out * k * 4), *x = malloc(rows * k * 4), *xv = malloc(k * 4);
	float *out = malloc(rows * d_out * 4), *wd = malloc(d_out * k * 4);
	uint8_t *w = malloc(d_out * rb), *xa = malloc(rows * xs);

	for (size_t i = 0; i < d_out * k; i++)
		wf[i] = extreme ? ((i / 16 + i / k) % 2 ? 1.0f : -1.0f) : frand();
	for (size_t i = 0; i < rows * k; i++)
		x[i] = extreme ? (i / k % 2 ? -1.0f : 1.0f) : frand() * (i % 31 == 0 ? 5.0f : 1.0f);
	assert_int_equal(kvp_quantize_ref(w, wf, type, d_out * k), 0);
	assert_int_equal(kvp_dequant_ref(wd, w, type, d_out * k), 0);
	for (size_t r = 0; r < rows; r++)
		kt->quant_act[kt->act[type]](xa + r * xs, x + r * k, k);
	for (size_t i = 0; i < rows * d_out; i++)
		out[i] = -1234.0f;
	kt->matmul[type](out, d_out, w, rb, xa, xs, rows, k, o0, o1);
	for (size_t r = 0; r < rows; r++) {
		act_values(xv, kt->act[type], xa + r * xs, k);
		for (size_t o = 0; o < d_out; o++) {
			double want = 0, mag = 0;

			if (o < o0 || o >= o1) {
				if (out[r * d_out + o] != -1234.0f)
					fail_msg("%s %s: wrote output %zu outside [%zu, %zu)",
						 kt->name, t->name, o, o0, o1);
				continue;
			}
			for (size_t i = 0; i < k; i++) {
				want += (double)wd[o * k + i] * xv[i];
				mag += fabs((double)wd[o * k + i] * xv[i]);
			}
			if (!(fabs(out[r * d_out + o] - want) <= 2e-5 * mag + 1e-6))
				fail_msg(
					"%s %s rows %zu k %zu: out (%zu, %zu) = %.7g, want %.7g (mag %g)",
					kt->name, t->name, rows, k, r, o, out[r * d_out + o], want,
					mag);
		}
	}
	free(wf);
	free(x);
	free(xv);
	free(out);
	free(wd);
	free(w);
	free(xa);
}

static void matmul_case(const struct kvp_kernels *kt, uint32_t type, size_t rows, size_t k,
			size_t d_out, size_t o0, size_t o1)
{
	matmul_case_x(kt, type, rows, k, d_out, o0, o1, 0);
}

/*
 * @rows rows at once equal, bit for bit, each row alone (the mixed step relies on it:
 * test_fwd_step), on the decode and tile paths of the integer and 16-bit float types
 * and the integer types' slices
 */
static void matmul_batch_invariant_o(const struct kvp_kernels *kt, uint32_t type, size_t rows,
				     size_t k, size_t d_out, size_t o0, size_t o1)
{
	const struct kvp_qtype *t = kvp_qtype(type);
	size_t rb = kvp_ggml_row_bytes(type, k), xs = kvp_act_row_bytes(kt->act[type], k);
	float *wf = malloc(d_out * k * 4), *x = malloc(k * 4);
	float *all = malloc(rows * d_out * 4), *one = malloc(d_out * 4);
	uint8_t *w = malloc(d_out * rb), *xa = malloc(rows * xs);

	for (size_t i = 0; i < d_out * k; i++)
		wf[i] = frand();
	assert_int_equal(kvp_quantize_ref(w, wf, type, d_out * k), 0);
	for (size_t r = 0; r < rows; r++) {
		for (size_t i = 0; i < k; i++)
			x[i] = frand();
		kt->quant_act[kt->act[type]](xa + r * xs, x, k);
	}
	kt->matmul[type](all, d_out, w, rb, xa, xs, rows, k, o0, o1);
	for (size_t r = 0; r < rows; r++) {
		kt->matmul[type](one, d_out, w, rb, xa + r * xs, xs, 1, k, o0, o1);
		for (size_t o = o0; o < o1; o++)
			if (bits(one[o]) != bits(all[r * d_out + o]))
				fail_msg("%s %s k %zu: row %zu of %zu gives %.9g, alone %.9g",
					 kt->name, t->name, k, r, rows, all[r * d_out + o], one[o]);
	}
	free(wf);
	free(x);
	free(all);
	free(one);
	free(w);
	free(xa);
}

static void matmul_batch_invariant(const struct kvp_kernels *kt, uint32_t type, size_t rows,
				   size_t k)
{
	matmul_batch_invariant_o(kt, type, rows, k, 7, 0, 7);
}

static void test_matmul_every_type_every_table(void **state)
{
	/*
	 * rows 1..32 (decode batches: the GEMV groups, the float tile from 5 or 9 rows on,
	 * the integer prefill tile), k of one block up to several panel slices for K-quants,
	 * ragged k for the float types, and output ranges that do not start at 0 or end at d_out
	 */
	for (int t = 0; t < n_tables; t++) {
		for (size_t i = 0; i < N_ALL_TYPES; i++) {
			uint32_t type = all_types[i];
			uint32_t blk = kvp_qtype(type)->block;
			int half = type == KVP_GGML_F16 || type == KVP_GGML_BF16;
			size_t ks[] = { blk == 1 ? 77 : blk, blk == 1 ? 1000 : 3 * blk,
					blk == 256 ? 256 * 70 :
					blk == 32  ? 32 * 300 :
						     2053 };

			/* output ranges starting and ending at every residue of the tiles */
			for (size_t rows = 1; rows <= 32; rows++)
				matmul_case(tables[t], type, rows, ks[rows % 2], 37, rows % 4,
					    37 - rows % 3);
			for (size_t rows = 1; rows <= 8; rows++)
				matmul_case_x(tables[t], type, rows, ks[1], 9, 0, 9, 1);
			/*
			 * beyond one panel slice (16 groups) too (the AVX-512 tile summed per
			 * slice where its decode path sums a row whole: rows of k > 4096
			 * differed in the last bits with the batch), and the 16-bit float
			 * types at ragged k (the AVX-512 tile summed the tail in its vectors,
			 * the GEMV after them); f32 takes sgemm's order in prefill
			 */
			for (size_t rows = 2; type != KVP_GGML_F32 && rows <= 70; rows += 17) {
				matmul_batch_invariant(tables[t], type, rows, ks[1]);
				matmul_batch_invariant(tables[t], type, rows, ks[2]);
				if (blk == 1)
					matmul_batch_invariant(tables[t], type, rows, ks[0]);
			}
			/*
			 * every batch 1..70 of the 16-bit float types (the GEMV, the dot tile,
			 * the panel form from 32 rows, its token blocks and ragged tiles), outputs
			 * not starting at 0 and ending mid-panel, k over several panel slices
			 * with a ragged end, or under one vector step
			 */
			for (size_t rows = 1; half && rows <= 70; rows++) {
				size_t kr = rows % 3 ? ks[2] : rows % 2 ? 9 : 600;

				matmul_batch_invariant_o(tables[t], type, rows, kr, 23, rows % 5,
							 23 - rows % 4);
			}
			/* past one token block of the panel form (two blocks of 102 and 98 on AVX2) */
			if (half)
				matmul_batch_invariant_o(tables[t], type, 200, ks[2], 11, 1, 10);
			matmul_case(tables[t], type, 3, ks[2], 5, 0, 5);
			matmul_case(tables[t], type, 70, ks[1], 17, 1, 17);
			/* the float outer-product tile: uneven row tiles, k blocks with a ragged
			 * end, whole panels then a remainder through the GEMV */
			if (blk == 1) {
				matmul_case(tables[t], type, 29, ks[2], 75, 2, 71);
				/* a prefill chunk: many full row tiles, several k panels */
				matmul_case(tables[t], type, 150, 776, 70, 1, 69);
				/* the 16-bit panel form: token blocks, ragged k, k under a step */
				for (size_t rows = 31; rows <= 70; rows += 13)
					matmul_case(tables[t], type, rows, rows % 2 ? 2053 : 13, 19,
						    rows % 5, 19 - rows % 3);
			}
		}
	}
}

static void test_q8k_tables_equal_scalar(void **state)
{
	/*
	 * The K-quants on struct kvp_act_q8k: every table that takes it gives the scalar
	 * table's bits (the same integer lanes, the same fused float steps in the same
	 * order, quant.h), on its decode path (rows 1..16, token blocks of 8/4/2/1) and its
	 * tile (more), k of one block and beyond a panel slice (16 groups), ragged ranges
	 */
	static const uint32_t kq[] = { KVP_GGML_Q2_K, KVP_GGML_Q3_K, KVP_GGML_Q4_K, KVP_GGML_Q5_K,
				       KVP_GGML_Q6_K };
	static const size_t rows_of[] = { 1, 2, 3, 5, 8, 9, 13, 16, 17, 21, 33 };
	const struct kvp_kernels *s = &kvp_kernels_scalar;
	int checked = 0;

	(void)state;
	for (int t = 0; t < n_tables; t++) {
		const struct kvp_kernels *kt = tables[t];

		for (size_t i = 0; i < sizeof(kq) / sizeof(kq[0]); i++) {
			uint32_t type = kq[i];

			if (kt == s || kt->act[type] != KVP_ACT_Q8K)
				continue;
			assert_int_equal(s->act[type], KVP_ACT_Q8K);
			for (size_t kk = 0; kk < 3; kk++) {
				size_t k = kk == 0 ? 256 : kk == 1 ? 256 * 5 : 256 * 37, d_out = 9;
				size_t rb = kvp_ggml_row_bytes(type, k);
				size_t xs = kvp_act_row_bytes(KVP_ACT_Q8K, k), R = 33;
				float *wf = malloc(d_out * k * 4), *x = malloc(k * 4);
				float *ov = malloc(R * d_out * 4), *os = malloc(R * d_out * 4);
				uint8_t *w = malloc(d_out * rb), *xa = malloc(R * xs);

				for (size_t e = 0; e < d_out * k; e++)
					wf[e] = frand() * (e % 61 == 0 ? 4.0f : 1.0f);
				assert_int_equal(kvp_quantize_ref(w, wf, type, d_out * k), 0);
				for (size_t r = 0; r < R; r++) {
					for (size_t e = 0; e < k; e++)
						x[e] = frand() * (e % 37 == 0 ? 6.0f : 1.0f);
					kt->quant_act[KVP_ACT_Q8K](xa + r * xs, x, k);
				}
				for (size_t ri = 0; ri < sizeof(rows_of) / sizeof(rows_of[0]);
				     ri++) {
					size_t rows = rows_of[ri], o0 = ri % 3, o1 = d_out - ri % 2;

					kt->matmul[type](ov, d_out, w, rb, xa, xs, rows, k, o0, o1);
					s->matmul[type](os, d_out, w, rb, xa, xs, rows, k, o0, o1);
					for (size_t r = 0; r < rows; r++)
						for (size_t o = o0; o < o1; o++)
							if (bits(ov[r * d_out + o]) !=
							    bits(os[r * d_out + o]))
								fail_msg(
									"%s %s k %zu rows %zu: out "
									"(%zu, %zu) = %.9g, scalar "
									"%.9g",
									kt->name,
									kvp_qtype(type)->name, k,
									rows, r, o,
									ov[r * d_out + o],
									os[r * d_out + o]);
				}
				checked++;
				free(wf);
				free(x);
				free(ov);
				free(os);
				free(w);
				free(xa);
			}
		}
	}
	print_message("%d table x type x k cases bit-equal to scalar\n", checked);
	if (!checked && kvp_isa_supported(KVP_ISA_AVX2))
		fail_msg("the AVX2 table takes no struct kvp_act_q8k");
}

static void test_vnni_decode_equals_avx2(void **state)
{
	/*
	 * The AVX-VNNI table's integer decode (vpdpbusd) gives the AVX2 table's bits (the
	 * same exact integer dots, the same float steps), on whichever encoding runs here:
	 * the table itself, or its AVX-512 twin (setup()).
	 */
	const struct kvp_kernels *v = NULL, *a = built[KVP_ISA_AVX2];

	for (int t = 0; t < n_tables; t++)
		if (tables[t]->isa == KVP_ISA_AVXVNNI)
			v = tables[t];
	if (!v || !a || !kvp_isa_supported(KVP_ISA_AVX2))
		skip();
	for (size_t i = 0; i < N_ALL_TYPES; i++) {
		uint32_t type = all_types[i];
		const struct kvp_qtype *qt = kvp_qtype(type);
		size_t k = qt->block == 256 ? 256 * 19 : 32 * 133, d_out = 11;
		uint32_t act = a->act[type];
		size_t rb = kvp_ggml_row_bytes(type, k), xs = kvp_act_row_bytes(act, k);
		float *wf, *x, *ov, *oa;
		uint8_t *w, *xa;

		if (act != KVP_ACT_Q8 && act != KVP_ACT_Q8K)
			continue;
		wf = malloc(d_out * k * 4);
		x = malloc(k * 4);
		ov = malloc(4 * d_out * 4);
		oa = malloc(4 * d_out * 4);
		w = malloc(d_out * rb);
		xa = malloc(4 * xs);
		for (size_t e = 0; e < d_out * k; e++)
			wf[e] = frand();
		assert_int_equal(kvp_quantize_ref(w, wf, type, d_out * k), 0);
		for (size_t r = 0; r < 4; r++) {
			for (size_t e = 0; e < k; e++)
				x[e] = frand();
			a->quant_act[act](xa + r * xs, x, k);
		}
		for (size_t rows = 1; rows <= 4; rows++) {
			v->matmul[type](ov, d_out, w, rb, xa, xs, rows, k, 0, d_out);
			a->matmul[type](oa, d_out, w, rb, xa, xs, rows, k, 0, d_out);
			for (size_t o = 0; o < rows * d_out; o++)
				if (bits(ov[o]) != bits(oa[o]))
					fail_msg("%s %s rows %zu: out %zu = %.9g, avx2 %.9g",
						 v->name, qt->name, rows, o, ov[o], oa[o]);
		}
		free(wf);
		free(x);
		free(ov);
		free(oa);
		free(w);
		free(xa);
	}
}

static void test_float_kernels_match_formulas(void **state)
{
	/* rmsnorm, swiglu, the attention step of every table; rope, softmax */
	enum { N = 67 };
	float x[N], w[N], o[N], cs[N], y[N];
	double ss = 0;

	for (int i = 0; i < N; i++) {
		x[i] = sinf(i * 0.7f) * 3;
		w[i] = 0.5f + i / 64.0f;
		ss += (double)x[i] * x[i];
	}
	for (int t = 0; t < n_tables; t++) {
		tables[t]->rmsnorm(o, x, w, N, 1e-5f);
		for (int i = 0; i < N; i++)
			assert_true(fabs(o[i] - x[i] / sqrt(ss / N + 1e-5) * w[i]) < 1e-5);
		memcpy(y, x, sizeof(x));
		tables[t]->swiglu(y, w, N);
		for (int i = 0; i < N; i++)
			assert_true(fabs(y[i] - x[i] / (1 + exp(-x[i])) * w[i]) < 1e-5);
	}

	kvp_rope_table(cs, 17, 32, 10000.0f);
	memcpy(y, x, sizeof(x));
	kvp_rope_apply(y, 2, 32, 32, cs); /* 2 heads of 32, all rotated */
	for (int h = 0; h < 2; h++)
		for (int i = 0; i < 16; i++) {
			double th = 17 * pow(10000.0, -2.0 * i / 32);
			double a = x[h * 32 + 2 * i], b = x[h * 32 + 2 * i + 1];

			assert_true(fabs(y[h * 32 + 2 * i] - (a * cos(th) - b * sin(th))) < 1e-5);
			assert_true(fabs(y[h * 32 + 2 * i + 1] - (a * sin(th) + b * cos(th))) <
				    1e-5);
		}

	memcpy(y, x, sizeof(x));
	kvp_softmax(y, N);
	double mx = -1e30, sum = 0;
	for (int i = 0; i < N; i++)
		mx = x[i] > mx ? x[i] : mx;
	for (int i = 0; i < N; i++)
		sum += exp(x[i] - mx);
	for (int i = 0; i < N; i++)
		assert_true(fabs(y[i] - exp(x[i] - mx) / sum) < 1e-6);
}

static void test_attn_block_matches_softmax(void **state)
{
	/*
	 * two blocks through attn_block (online softmax) equal softmax(qK/sqrt(hd)) V over
	 * both, for head_dim 64, 128 (the specialised paths) and 40 (the generic one)
	 */
	static const uint32_t hds[] = { 64, 128, 40 };
	enum { T1 = 16, T2 = 9 };

	for (int t = 0; t < n_tables; t++) {
		for (int h = 0; h < 3; h++) {
			uint32_t hd = hds[h];
			float *q = malloc(hd * 4), *K = malloc((T1 + T2) * hd * 4);
			float *V = malloc((T1 + T2) * hd * 4), *o = calloc(hd, 4), sbuf[T1];
			float m[2] = { -INFINITY, 0 }, scale = 1.0f / sqrtf((float)hd);
			double sc[T1 + T2], mx = -1e30, den = 0;

			for (uint32_t i = 0; i < hd; i++)
				q[i] = frand();
			for (uint32_t i = 0; i < (T1 + T2) * hd; i++) {
				K[i] = frand();
				V[i] = frand();
			}
			tables[t]->attn_block(o, m, q, K, V, T1, scale, sbuf, hd);
			tables[t]->attn_block(o, m, q, K + T1 * hd, V + T1 * hd, T2, scale, sbuf,
					      hd);
			for (int j = 0; j < T1 + T2; j++) {
				sc[j] = 0;
				for (uint32_t i = 0; i < hd; i++)
					sc[j] += (double)q[i] * K[j * hd + i];
				sc[j] *= scale;
				mx = sc[j] > mx ? sc[j] : mx;
			}
			for (int j = 0; j < T1 + T2; j++)
				den += exp(sc[j] - mx);
			for (uint32_t i = 0; i < hd; i++) {
				double want = 0;

				for (int j = 0; j < T1 + T2; j++)
					want += exp(sc[j] - mx) / den * V[j * hd + i];
				assert_true(fabs(o[i] / m[1] - want) < 1e-5);
			}
			free(q);
			free(K);
			free(V);
			free(o);
		}
	}
}

static void test_swiglu_whole_range(void **state)
{
	/*
	 * the vector tables' exp (SwiGLU's and softmax's) against libm in double over the
	 * whole float range SiLU meets, both clamps, a tail shorter than a vector, and NaN
	 */
	enum { N = 3 * 16 * 64 + 5 };
	static float x[N], y[N], one[N];

	for (int i = 0; i < N; i++) {
		x[i] = -100.0f + 200.0f * (float)i / (N - 2);
		one[i] = 1;
	}
	x[N - 1] = NAN;
	for (int t = 0; t < n_tables; t++) {
		memcpy(y, x, sizeof(y));
		tables[t]->swiglu(y, one, N);
		for (int i = 0; i < N - 1; i++) {
			double want = x[i] / (1 + exp(-(double)x[i]));

			assert_true(fabs(y[i] - want) <= 2e-6 * fabs(want) + 1e-30);
		}
		assert_true(isnan(y[N - 1]));
	}
}

/*
 * F32 projections of many rows take sgemm or our kernel, whichever this CPU runs faster
 * (measured): both give x @ W^T, and the measured choice is the same for every context.
 */
static void test_linear_f32_both_paths(void **state)
{
	enum { ROWS = 80, K = 300, D = 70 };
	float *w = malloc(sizeof(float) * D * K), *x = malloc(sizeof(float) * ROWS * K);
	float *out = malloc(sizeof(float) * ROWS * D);
	struct kvp_threads *pool;
	uint64_t seed = 7;

	assert_non_null(w);
	assert_non_null(x);
	assert_non_null(out);
	for (int i = 0; i < D * K; i++)
		w[i] = (float)(kvp_test_xorshift(&seed) % 2001) * 1e-3f - 1;
	for (int i = 0; i < ROWS * K; i++)
		x[i] = (float)(kvp_test_xorshift(&seed) % 2001) * 1e-3f - 1;
	assert_int_equal(kvp_threads_new(&pool, 2), 0);
	for (int t = 0; t < n_tables; t++) {
		const struct kvp_tensor wt = { .type = KVP_GGML_F32,
					       .data = w,
					       .ne0 = K,
					       .ne1 = D,
					       .row_bytes = K * sizeof(float) };
		struct kvp_lin a, b;
		size_t measured;

		assert_int_equal(kvp_lin_init(&a, tables[t], pool, ROWS, K), 0);
		assert_int_equal(kvp_lin_init(&b, tables[t], pool, ROWS, K), 0);
		measured = kvp_lin_blas_rows(&a);
		assert_true(measured >= 16);
		assert_int_equal(kvp_lin_blas_rows(&b), measured);
		for (int path = 0; path < 2; path++) {
			kvp_lin_set_blas_rows(&a, path ? 16 : SIZE_MAX);
			for (size_t rows = 17; rows <= ROWS; rows += 63) {
				memset(out, 0, sizeof(float) * ROWS * D);
				kvp_lin_run(&a, x, rows, 1, (float *[]){ out },
					    (const struct kvp_tensor *[]){ &wt });
				for (size_t r = 0; r < rows; r++)
					for (int o = 0; o < D; o++) {
						double want = 0;

						for (int i = 0; i < K; i++)
							want += (double)x[r * K + i] * w[o * K + i];
						assert_true(fabs(out[r * D + o] - want) < 1e-3);
					}
			}
		}
		kvp_lin_deinit(&a);
		kvp_lin_deinit(&b);
	}
	kvp_threads_free(pool);
	free(w);
	free(x);
	free(out);
}

/* KVP_F32_GEMM fixes the path without measuring; another value is refused. */
static void test_f32_gemm_env(void **state)
{
	static const struct {
		const char *v;
		int mode;
		size_t rows;
	} cases[] = {
		{ "kvpool", KVP_F32_GEMM_KVPOOL, SIZE_MAX },
		{ "openblas", KVP_F32_GEMM_OPENBLAS, 16 },
		{ "", KVP_F32_GEMM_AUTO, 0 },
		{ "OpenBLAS", -EINVAL, 0 },
		{ "fast", -EINVAL, 0 },
	};
	struct kvp_threads *pool;

	(void)state;
	assert_int_equal(kvp_threads_new(&pool, 1), 0);
	unsetenv("KVP_F32_GEMM");
	assert_int_equal(kvp_lin_f32_gemm(), KVP_F32_GEMM_AUTO);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct kvp_lin l;

		assert_int_equal(setenv("KVP_F32_GEMM", cases[i].v, 1), 0);
		assert_int_equal(kvp_lin_f32_gemm(), cases[i].mode);
		if (!cases[i].rows)
			continue;
		/* a fresh context: the process's measurement (if any) is not consulted */
		assert_int_equal(kvp_lin_init(&l, tables[0], pool, 64, 64), 0);
		assert_int_equal(kvp_lin_blas_rows(&l), cases[i].rows);
		kvp_lin_deinit(&l);
	}
	unsetenv("KVP_F32_GEMM");
	kvp_threads_free(pool);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tables_complete),
		cmocka_unit_test(test_isa_env_forces_each_table),
		cmocka_unit_test(test_dispatch_by_cpuid),
		cmocka_unit_test(test_f16_bf16_all_values_exact),
		cmocka_unit_test(test_f32_to_f16_bf16_rounding),
		cmocka_unit_test(test_dequant_every_type),
		cmocka_unit_test(test_quantize_round_trip),
		cmocka_unit_test(test_act_quantizers_equal_reference),
		cmocka_unit_test(test_matmul_every_type_every_table),
		cmocka_unit_test(test_q8k_tables_equal_scalar),
		cmocka_unit_test(test_vnni_decode_equals_avx2),
		cmocka_unit_test(test_float_kernels_match_formulas),
		cmocka_unit_test(test_attn_block_matches_softmax),
		cmocka_unit_test(test_swiglu_whole_range),
		cmocka_unit_test(test_linear_f32_both_paths),
		cmocka_unit_test(test_f32_gemm_env),
	};

	return cmocka_run_group_tests(tests, setup, NULL);
}
