/* SPDX-License-Identifier: MIT */
/*
 * dispatch.c - which kernel table this CPU runs, and the kernels every table shares.
 *
 * An instruction set counts as supported only when cpuid reports every extension the
 * table's file is compiled for *and* the OS saves the registers they use (XGETBV):
 * a kernel must never raise SIGILL.  The answer is computed on each call (a few cpuid
 * instructions; callers ask once per context), so there is no state to initialise.
 * The decision is a pure function of the cpuid words (kvp_isa_supported_by()), so the
 * tests check it for CPUs the machine is not (an AVX-VNNI client core, an OS without
 * ZMM state).
 *
 * On aarch64 the words are the kernel's hwcaps (getauxval(AT_HWCAP/AT_HWCAP2)): user
 * space cannot read the ID registers portably, and the kernel reports an extension only
 * when it also enables it (SVE's state, for instance).  Its tables are neon (fp + asimd,
 * every aarch64 Linux CPU) and neondot (+ asimddp: sdot), both neon.c.  Only the tables of the build's
 * architecture are linked in (compute/kernels/meson.build); the others keep their enum
 * value and name, and are "not supported" here.
 */
#include "compute/kernels/kernels.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

/* the tables this build has (NULL: another architecture's) */
static const struct kvp_kernels *const tables[KVP_ISA__COUNT] = {
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

/* every table's name, built or not: KVP_ISA names another architecture's as -ENOTSUP */
static const char *const names[KVP_ISA__COUNT] = {
	[KVP_ISA_SCALAR] = "scalar", [KVP_ISA_AVX2] = "avx2", [KVP_ISA_AVXVNNI] = "avxvnni",
	[KVP_ISA_AVX512] = "avx512", [KVP_ISA_NEON] = "neon", [KVP_ISA_NEONDOT] = "neondot",
};

const char *kvp_isa_name(uint32_t isa)
{
	return isa < KVP_ISA__COUNT ? names[isa] : NULL;
}

#define BIT(r, n) (((r) >> (n)) & 1u)

#if defined(__x86_64__) || defined(__i386__)
static uint64_t xgetbv0(void)
{
	uint32_t lo, hi;

	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return (uint64_t)hi << 32 | lo;
}

static void cpu_read_x86(struct kvp_cpu *cpu)
{
	uint32_t a, b, c, d;

	if (!__get_cpuid(0, &cpu->max_leaf, &b, &c, &d))
		return;
	__cpuid(1, a, b, cpu->ecx1, d);
	if (BIT(cpu->ecx1, 27)) /* OSXSAVE: XGETBV is there */
		cpu->xcr0 = xgetbv0();
	if (cpu->max_leaf < 7)
		return;
	__cpuid_count(7, 0, a, cpu->ebx7, cpu->ecx7, d);
	if (a >= 1)
		__cpuid_count(7, 1, cpu->eax7_1, b, c, d);
}
#endif

void kvp_cpu_read(struct kvp_cpu *cpu)
{
	memset(cpu, 0, sizeof(*cpu));
#if defined(__x86_64__) || defined(__i386__)
	cpu_read_x86(cpu);
#elif defined(__aarch64__)
	cpu->hwcap = getauxval(AT_HWCAP);
	cpu->hwcap2 = getauxval(AT_HWCAP2);
#endif
}

int kvp_isa_supported_by(const struct kvp_cpu *cpu, uint32_t isa)
{
	if (isa == KVP_ISA_SCALAR)
		return 1;
	/*
	 * aarch64: fp and asimd for the NEON table (every Linux CPU has them; the kernel
	 * reports both), and asimddp (sdot) for the dotprod one
	 */
	if (isa == KVP_ISA_NEON || isa == KVP_ISA_NEONDOT) {
		uint64_t need = KVP_HWCAP_FP | KVP_HWCAP_ASIMD |
				(isa == KVP_ISA_NEONDOT ? KVP_HWCAP_ASIMDDP : 0);

		return (cpu->hwcap & need) == need;
	}
	if (isa >= KVP_ISA__COUNT || cpu->max_leaf < 7)
		return 0;
	/* FMA, OSXSAVE, AVX, F16C */
	if (!BIT(cpu->ecx1, 12) || !BIT(cpu->ecx1, 27) || !BIT(cpu->ecx1, 28) ||
	    !BIT(cpu->ecx1, 29))
		return 0;
	if ((cpu->xcr0 & 0x6) != 0x6) /* XMM and YMM state */
		return 0;
	/* AVX2, BMI2 (every vector file is built with it) */
	if (!BIT(cpu->ebx7, 5) || !BIT(cpu->ebx7, 8))
		return 0;
	switch (isa) {
	case KVP_ISA_AVX2:
		return 1;
	case KVP_ISA_AVXVNNI: /* CPUID.(7,1):EAX bit 4, the VEX-encoded vpdpbusd */
		return (int)BIT(cpu->eax7_1, 4);
	default: /* AVX-512 */
		/* opmask, ZMM 0-15 upper halves, ZMM 16-31 */
		if ((cpu->xcr0 & 0xe0) != 0xe0)
			return 0;
		/* AVX512 F, DQ, BW, VL; VNNI; BF16 */
		return BIT(cpu->ebx7, 16) && BIT(cpu->ebx7, 17) && BIT(cpu->ebx7, 30) &&
		       BIT(cpu->ebx7, 31) && BIT(cpu->ecx7, 11) && BIT(cpu->eax7_1, 5);
	}
}

int kvp_isa_supported(uint32_t isa)
{
	struct kvp_cpu cpu;

	kvp_cpu_read(&cpu);
	return kvp_isa_supported_by(&cpu, isa);
}

const struct kvp_kernels *kvp_kernels_for(uint32_t isa)
{
	return isa < KVP_ISA__COUNT && kvp_isa_supported(isa) ? tables[isa] : NULL;
}

int kvp_kernels_best(const struct kvp_kernels **out)
{
	const char *want = getenv("KVP_ISA");
	struct kvp_cpu cpu;

	if (want && *want) {
		for (uint32_t i = 0; i < KVP_ISA__COUNT; i++) {
			if (strcmp(want, names[i]))
				continue;
			*out = kvp_kernels_for(i);
			return *out ? 0 : -ENOTSUP;
		}
		*out = NULL;
		return -EINVAL;
	}
	kvp_cpu_read(&cpu);
	*out = tables[kvp_isa_best(&cpu)];
	return 0;
}

uint32_t kvp_isa_best(const struct kvp_cpu *cpu)
{
	uint32_t i = KVP_ISA__COUNT - 1;

	/* the words of one architecture never admit another's tables (the tests check) */
	while (i > KVP_ISA_SCALAR && !(tables[i] && kvp_isa_supported_by(cpu, i)))
		i--;
	return i;
}

const char *kvp_kernels_gap(const struct kvp_kernels *k, char *buf, size_t len)
{
	for (uint32_t t = 0; t < KVP_GGML_TYPE__COUNT; t++) {
		if (!kvp_qtype(t))
			continue;
		if (!k->matmul[t] || !k->dequant[t]) {
			snprintf(buf, len, "%s[%s]", k->matmul[t] ? "dequant" : "matmul",
				 kvp_qtype(t)->name);
			return buf;
		}
		if (k->act[t] >= KVP_ACT__COUNT ||
		    (kvp_qtype(t)->act == KVP_ACT_Q8) != (k->act[t] >= KVP_ACT_Q8)) {
			snprintf(buf, len, "act[%s]", kvp_qtype(t)->name);
			return buf;
		}
	}
	for (uint32_t a = 0; a < KVP_ACT__COUNT; a++) {
		if (!k->quant_act[a]) {
			snprintf(buf, len, "quant_act[%u]", a);
			return buf;
		}
	}
	for (uint32_t d = 0; d < KVP_DTYPE__COUNT; d++) {
		if (d == KVP_DTYPE_INT4) {
			if (!k->kvq4_k || !k->kvq4_v || !k->kvq4_load_k || !k->kvq4_load_v) {
				snprintf(buf, len, "kvq4[%u]", d);
				return buf;
			}
			continue;
		}
		if (kvp_dtype_is_int(d)) {
			if (!k->kvq_row8 || !k->kvq_chan8 || !k->kvq_load_row8 ||
			    !k->kvq_load_chan8) {
				snprintf(buf, len, "kvq[%u]", d);
				return buf;
			}
			continue;
		}
		if (!k->kv_store[d] || !k->kv_load[d]) {
			snprintf(buf, len, "kv_%s[%u]", k->kv_store[d] ? "load" : "store", d);
			return buf;
		}
	}
	if (!k->rmsnorm || !k->swiglu || !k->attn_block || !k->attn_block8 || !k->name) {
		snprintf(buf, len, "%s",
			 !k->rmsnorm	 ? "rmsnorm" :
			 !k->swiglu	 ? "swiglu" :
			 !k->attn_block	 ? "attn_block" :
			 !k->attn_block8 ? "attn_block8" :
					   "name");
		return buf;
	}
	return NULL;
}

int kvp_kernels_check(const struct kvp_kernels *k)
{
	char buf[48];

	return kvp_kernels_gap(k, buf, sizeof(buf)) ? -EINVAL : 0;
}

void kvp_rope_table(float *restrict cs, uint32_t pos, uint32_t n_rot, float base)
{
	for (uint32_t i = 0; i < n_rot / 2; i++) {
		double theta = (double)pos * pow((double)base, -2.0 * i / (double)n_rot);

		cs[2 * i] = (float)cos(theta);
		cs[2 * i + 1] = (float)sin(theta);
	}
}

void kvp_rope_apply(float *restrict x, uint32_t n_heads, uint32_t head_dim, uint32_t n_rot,
		    const float *restrict cs)
{
	for (uint32_t h = 0; h < n_heads; h++) {
		float *v = x + (size_t)h * head_dim;

		for (uint32_t i = 0; i < n_rot / 2; i++) {
			float c = cs[2 * i], s = cs[2 * i + 1];
			float a = v[2 * i], b = v[2 * i + 1];

			v[2 * i] = a * c - b * s;
			v[2 * i + 1] = a * s + b * c;
		}
	}
}

void kvp_softmax(float *x, size_t n)
{
	float mx = -INFINITY;
	double sum = 0;

	for (size_t i = 0; i < n; i++)
		mx = x[i] > mx ? x[i] : mx;
	for (size_t i = 0; i < n; i++) {
		x[i] = expf(x[i] - mx);
		sum += x[i];
	}
	float inv = (float)(1.0 / sum);

	for (size_t i = 0; i < n; i++)
		x[i] *= inv;
}
