/* SPDX-License-Identifier: MIT */
/*
 * dispatch.c - which kernel table this CPU runs, and the kernels every table shares.
 *
 * An instruction set counts as supported only when cpuid reports every extension the
 * table's file is compiled for *and* the OS saves the registers they use (XGETBV):
 * a kernel must never raise SIGILL.  The answer is computed on each call (a few cpuid
 * instructions; callers ask once per context), so there is no state to initialise.
 */
#include "compute/kernels/kernels.h"

#include <cpuid.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct kvp_kernels *const tables[KVP_ISA__COUNT] = {
	[KVP_ISA_SCALAR] = &kvp_kernels_scalar,
	[KVP_ISA_AVX2] = &kvp_kernels_avx2,
	[KVP_ISA_AVX512] = &kvp_kernels_avx512,
};

const char *kvp_isa_name(uint32_t isa)
{
	return isa < KVP_ISA__COUNT ? tables[isa]->name : NULL;
}

static uint64_t xgetbv0(void)
{
	uint32_t lo, hi;

	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return (uint64_t)hi << 32 | lo;
}

#define BIT(r, n) (((r) >> (n)) & 1u)

int kvp_isa_supported(uint32_t isa)
{
	uint32_t a, b, c, d, b7 = 0, c7 = 0, a71 = 0, max;
	uint64_t xcr0;

	if (isa == KVP_ISA_SCALAR)
		return 1;
	if (isa >= KVP_ISA__COUNT || !__get_cpuid(0, &max, &b, &c, &d) || max < 7)
		return 0;
	__cpuid(1, a, b, c, d);
	/* FMA, OSXSAVE, AVX, F16C */
	if (!BIT(c, 12) || !BIT(c, 27) || !BIT(c, 28) || !BIT(c, 29))
		return 0;
	xcr0 = xgetbv0();
	if ((xcr0 & 0x6) != 0x6) /* XMM and YMM state */
		return 0;
	__cpuid_count(7, 0, a, b7, c7, d);
	if (a >= 1)
		__cpuid_count(7, 1, a71, b, c, d);
	if (!BIT(b7, 5) || !BIT(b7, 8)) /* AVX2, BMI2 (both vector files are built with it) */
		return 0;
	if (isa == KVP_ISA_AVX2)
		return 1;
	/* opmask, ZMM 0-15 upper halves, ZMM 16-31 */
	if ((xcr0 & 0xe0) != 0xe0)
		return 0;
	/* AVX512 F, DQ, BW, VL; VNNI; BF16 */
	return BIT(b7, 16) && BIT(b7, 17) && BIT(b7, 30) && BIT(b7, 31) && BIT(c7, 11) &&
	       BIT(a71, 5);
}

const struct kvp_kernels *kvp_kernels_for(uint32_t isa)
{
	return kvp_isa_supported(isa) ? tables[isa] : NULL;
}

int kvp_kernels_best(const struct kvp_kernels **out)
{
	const char *want = getenv("KVP_ISA");

	if (want && *want) {
		for (uint32_t i = 0; i < KVP_ISA__COUNT; i++) {
			if (strcmp(want, tables[i]->name))
				continue;
			*out = kvp_kernels_for(i);
			return *out ? 0 : -ENOTSUP;
		}
		*out = NULL;
		return -EINVAL;
	}
	for (uint32_t i = KVP_ISA__COUNT; i-- > 0;) {
		if (kvp_isa_supported(i)) {
			*out = tables[i];
			return 0;
		}
	}
	*out = NULL; /* cannot happen: scalar is always supported */
	return -ENOTSUP;
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
	}
	for (uint32_t a = 0; a < KVP_ACT__COUNT; a++) {
		if (!k->quant_act[a]) {
			snprintf(buf, len, "quant_act[%u]", a);
			return buf;
		}
	}
	for (uint32_t d = 0; d < KVP_DTYPE__COUNT; d++) {
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
	if (!k->rmsnorm || !k->swiglu || !k->attn_block || !k->name) {
		snprintf(buf, len, "%s",
			 !k->rmsnorm	? "rmsnorm" :
			 !k->swiglu	? "swiglu" :
			 !k->attn_block ? "attn_block" :
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
