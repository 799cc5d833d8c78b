/* SPDX-License-Identifier: MIT */
/*
 * model.c - binds a GGUF file of a supported architecture (compute/arch.h) to the
 * weights the forward pass reads.
 *
 * Every hyper-parameter is range-checked and every tensor's shape and type is checked
 * against what the hyper-parameters imply before anything reads tensor data, so the
 * forward pass can trust the tensors in struct kvp_weights.  Tensors stay in the
 * mapping in their own type (KVP_MODEL_WEIGHTS_MAP) or their bytes are copied into the
 * model's weight arena (KVP_MODEL_WEIGHTS_COPY); only vectors that are not f32 (norms
 * stored as f16/bf16) are converted, into that arena.
 * Invariant after open: the model is read-only; any thread may use it.
 */
#include "compute/model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/*
 * libxxhash's _dispatch entry points pick the widest XXH3 loop the CPU has at run time:
 * the build targets the portable baseline, where the inlined code would be SSE2 (about a
 * third of the AVX2 speed; the fingerprint hashes the whole file).
 */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xxh_x86dispatch.h> /* elsewhere the baseline has the vector loop (aarch64: NEON) */
#endif

#include "compute/arch.h"
#include "util/errmsg.h"
#include "compute/gguf.h"
#include "compute/kernels/quant.h"
#include "compute/rope.h"

/* Bounds on hyper-parameters: beyond these a file is corrupt, not a bigger model. */
#define EMBD_MAX 65536u
#define LAYERS_MAX 1024u
#define HEADS_MAX 1024u
#define FF_MAX (1u << 20)
#define VOCAB_MAX (1u << 22)
#define HEAD_DIM_MAX 1024u
#define QD_MAX (1u << 18) /* n_heads * head_dim */

struct kvp_model {
	struct kvp_gguf *gguf;
	const struct kvp_arch *arch;
	struct kvp_model_hparams hp;
	struct kvp_rope rope;
	uint8_t *bound; /* per file tensor: bound to a weight (open only) */
	char key[128];	/* akey()'s buffer (open only) */
	struct kvp_model_info info;
	struct kvp_weights w;
	struct kvp_layer_weights *layers;
	uint32_t placement; /* enum kvp_model_weights, resolved (never DEFAULT) */
	/* arena: converted vectors, and copied tensors (KVP_MODEL_WEIGHTS_COPY) */
	uint8_t *arena;
	size_t arena_cap; /* bytes mapped at arena */
	size_t arena_used;
	char name[256];
	uint8_t fp[KVP_MODEL_FP_BYTES];
};

static int get_u32(const struct kvp_gguf *g, const char *key, uint32_t lo, uint32_t hi,
		   int required, uint32_t *out, char *err, size_t errlen)
{
	uint64_t v;
	int r = kvp_gguf_get_uint(g, key, UINT32_MAX, &v);

	if (r == -ENOENT && !required)
		return 0;
	if (r == -ENOENT) {
		kvp_errmsg(err, errlen, "model: missing %s", key);
		return -EBADMSG;
	}
	if (r || v < lo || v > hi) {
		kvp_errmsg(err, errlen, "model: %s out of range [%u, %u]", key, lo, hi);
		return -EBADMSG;
	}
	*out = (uint32_t)v;
	return 0;
}

/* An optional float key in (lo, hi], finite; *out keeps its default when absent. */
static int get_f32(const struct kvp_gguf *g, const char *key, float lo, float hi, float *out,
		   char *err, size_t errlen)
{
	float v;
	int r = kvp_gguf_get_f32(g, key, &v);

	if (r == -ENOENT)
		return 0;
	if (r || !(v > lo) || !(v <= hi)) {
		kvp_errmsg(err, errlen, "model: bad %s (want a float in (%g, %g])", key, lo, hi);
		return -EBADMSG;
	}
	*out = v;
	return 0;
}

/* "<prefix>.<suffix>" of the model's architecture, in m->key (valid until the next call). */
static const char *akey(struct kvp_model *m, const char *suffix)
{
	snprintf(m->key, sizeof(m->key), "%s.%s", m->arch->prefix, suffix);
	return m->key;
}

static int read_shape(struct kvp_model *m, char *err, size_t errlen)
{
	const struct kvp_gguf *g = m->gguf;
	struct kvp_model_hparams *hp = &m->hp;
	uint32_t v_len = 0;
	int r;

	hp->n_ctx_train = 2048;
	if ((r = get_u32(g, akey(m, "embedding_length"), 2, EMBD_MAX, 1, &hp->n_embd, err,
			 errlen)) ||
	    (r = get_u32(g, akey(m, "block_count"), 1, LAYERS_MAX, 1, &hp->n_layers, err,
			 errlen)) ||
	    (r = get_u32(g, akey(m, "attention.head_count"), 1, HEADS_MAX, 1, &hp->n_heads, err,
			 errlen)) ||
	    (r = get_u32(g, akey(m, "feed_forward_length"), 1, FF_MAX, 1, &hp->n_ff, err,
			 errlen)) ||
	    (r = get_u32(g, akey(m, "context_length"), 1, UINT32_MAX, 0, &hp->n_ctx_train, err,
			 errlen)))
		return r;
	hp->n_kv_heads = hp->n_heads;
	if ((r = get_u32(g, akey(m, "attention.head_count_kv"), 1, hp->n_heads, 0, &hp->n_kv_heads,
			 err, errlen)))
		return r;
	if (hp->n_heads % hp->n_kv_heads) {
		kvp_errmsg(err, errlen, "model: %u heads do not divide into %u kv heads",
			   hp->n_heads, hp->n_kv_heads);
		return -EBADMSG;
	}
	/* the head size: key_length when given (Q, K, V and O follow it), else n_embd / heads */
	if ((r = get_u32(g, akey(m, "attention.key_length"), 1, HEAD_DIM_MAX, 0, &hp->head_dim, err,
			 errlen)))
		return r;
	if (!hp->head_dim && hp->n_embd % hp->n_heads) {
		kvp_errmsg(err, errlen,
			   "model: n_embd %u is not a multiple of %u heads and %s is absent",
			   hp->n_embd, hp->n_heads, akey(m, "attention.key_length"));
		return -EBADMSG;
	}
	if (!hp->head_dim)
		hp->head_dim = hp->n_embd / hp->n_heads;
	if ((uint64_t)hp->head_dim * hp->n_heads > QD_MAX) {
		kvp_errmsg(err, errlen, "model: %u heads of %u are too wide", hp->n_heads,
			   hp->head_dim);
		return -EBADMSG;
	}
	if ((r = get_u32(g, akey(m, "attention.value_length"), 1, HEAD_DIM_MAX, 0, &v_len, err,
			 errlen)))
		return r;
	/* the pool stores K and V heads of one size: different sizes are refused, by name */
	if (v_len && v_len != hp->head_dim) {
		kvp_errmsg(err, errlen,
			   "model: %s %u differs from the key head size %u: different K "
			   "and V head sizes are not supported",
			   akey(m, "attention.value_length"), v_len, hp->head_dim);
		return -ENOTSUP;
	}
	hp->n_rot = hp->head_dim;
	if ((r = get_u32(g, akey(m, "rope.dimension_count"), 2, hp->head_dim, 0, &hp->n_rot, err,
			 errlen)))
		return r;
	if (hp->n_rot % 2) {
		kvp_errmsg(err, errlen,
			   "model: %u rotated dimensions (%s, else the head size) is odd",
			   hp->n_rot, akey(m, "rope.dimension_count"));
		return -EBADMSG;
	}
	return 0;
}

/*
 * RoPE base and scaling, as llama.cpp reads them: rope.scaling.type defaults to
 * "linear" (so a bare factor scales linearly), "none" never scales, the factor is
 * rope.scaling.factor or the older rope.scale_linear (0 meaning none).
 */
static int read_rope(struct kvp_model *m, char *err, size_t errlen)
{
	const struct kvp_gguf *g = m->gguf;
	struct kvp_model_hparams *hp = &m->hp;
	struct kvp_gguf_str type;
	int r, have_type;
	float f = 0;

	hp->rope_base = 10000.0f;
	if ((r = get_f32(g, akey(m, "rope.freq_base"), 1.0f, 1e12f, &hp->rope_base, err, errlen)))
		return r;
	r = kvp_gguf_get_str(g, akey(m, "rope.scaling.type"), &type);
	if (r && r != -ENOENT) {
		kvp_errmsg(err, errlen, "model: %s is not a string", m->key);
		return -EBADMSG;
	}
	have_type = !r;
	hp->rope_scaling = KVP_ROPE_SCALING_LINEAR;
	if (have_type && kvp_gguf_str_eq(type, "none")) {
		hp->rope_scaling = KVP_ROPE_SCALING_NONE;
	} else if (have_type && kvp_gguf_str_eq(type, "yarn")) {
		hp->rope_scaling = KVP_ROPE_SCALING_YARN;
	} else if (have_type && !kvp_gguf_str_eq(type, "linear")) {
		kvp_errmsg(err, errlen, "model: %s '%.*s' is not supported (none, linear, yarn)",
			   m->key, (int)(type.len > 32 ? 32 : type.len), type.p);
		return -ENOTSUP;
	}
	r = kvp_gguf_get_f32(g, akey(m, "rope.scaling.factor"), &f);
	if (r == -ENOENT)
		r = kvp_gguf_get_f32(g, akey(m, "rope.scale_linear"), &f);
	if ((r && r != -ENOENT) || !(f >= 0.0f) || f > 1e6f) {
		kvp_errmsg(err, errlen, "model: bad %s (want a float in [0, 1e6])", m->key);
		return -EBADMSG;
	}
	hp->rope_factor = f == 0.0f ? 1.0f : f;
	if (hp->rope_scaling == KVP_ROPE_SCALING_NONE || (!have_type && hp->rope_factor == 1.0f)) {
		hp->rope_scaling = KVP_ROPE_SCALING_NONE;
		hp->rope_factor = 1.0f;
	}
	if (hp->rope_scaling == KVP_ROPE_SCALING_YARN && hp->rope_factor < 1.0f) {
		kvp_errmsg(err, errlen, "model: %s %g < 1 with yarn scaling is not supported",
			   akey(m, "rope.scaling.factor"), hp->rope_factor);
		return -ENOTSUP;
	}
	hp->rope_orig_ctx = hp->n_ctx_train;
	hp->yarn_beta_fast = KVP_YARN_BETA_FAST;
	hp->yarn_beta_slow = KVP_YARN_BETA_SLOW;
	hp->rope_attn_factor = 1.0f;
	if ((r = get_u32(g, akey(m, "rope.scaling.original_context_length"), 1, UINT32_MAX, 0,
			 &hp->rope_orig_ctx, err, errlen)) ||
	    (r = get_f32(g, akey(m, "rope.scaling.yarn_beta_fast"), 0.0f, 1e6f, &hp->yarn_beta_fast,
			 err, errlen)) ||
	    (r = get_f32(g, akey(m, "rope.scaling.yarn_beta_slow"), 0.0f, 1e6f, &hp->yarn_beta_slow,
			 err, errlen)) ||
	    (r = get_f32(g, akey(m, "rope.scaling.attn_factor"), 0.0f, 1e6f, &hp->rope_attn_factor,
			 err, errlen)))
		return r;
	return 0;
}

static int read_hparams(struct kvp_model *m, char *err, size_t errlen)
{
	const struct kvp_gguf *g = m->gguf;
	struct kvp_model_hparams *hp = &m->hp;
	struct kvp_gguf_str arch, name;
	int r;

	if (kvp_gguf_get_str(g, "general.architecture", &arch)) {
		kvp_errmsg(err, errlen, "model: no general.architecture");
		return -EBADMSG;
	}
	m->arch = kvp_arch_find(arch.p, arch.len);
	if (!m->arch) {
		kvp_errmsg(err, errlen,
			   "model: architecture '%.*s' is not supported (supported: %s)",
			   (int)(arch.len > 64 ? 64 : arch.len), arch.p, kvp_arch_list());
		return -ENOTSUP;
	}
	hp->arch = m->arch->id;
	hp->rope_layout = m->arch->rope_layout;
	if (!kvp_gguf_get_str(g, "general.name", &name))
		snprintf(m->name, sizeof(m->name), "%.*s", (int)(name.len > 255 ? 255 : name.len),
			 name.p);
	/* first: a key we would misread must not surface as a confusing range error */
	if ((r = kvp_arch_check_keys(m->arch, g, err, errlen)) ||
	    (r = read_shape(m, err, errlen)) || (r = read_rope(m, err, errlen)))
		return r;
	hp->rms_eps = 1e-5f;
	return get_f32(g, akey(m, "attention.layer_norm_rms_epsilon"), 0.0f, 1.0f, &hp->rms_eps,
		       err, errlen);
}

/*
 * The weight arena: one anonymous mapping, 2 MiB aligned and advised MADV_HUGEPAGE
 * before anything touches it, so the kernel backs it with transparent huge pages where
 * it can (THP "madvise" or "always").  It is reserved at the largest size the file's
 * tensors could need (MAP_NORESERVE: untouched pages cost nothing), filled by a bump
 * pointer, then trimmed and made read-only.  Why huge pages: decode streams every
 * weight once per step, and on 4 KiB pages (the file mapping, or malloc) the page walks
 * cost 10-20% of the stream (docs/compute.md).
 */
#define ARENA_ALIGN ((size_t)2 << 20)

static int arena_reserve(struct kvp_model *m, size_t need)
{
	size_t len;
	uint8_t *p, *a;

	need = (need + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1);
	len = need + ARENA_ALIGN;

	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
		 0);
	if (p == MAP_FAILED)
		return -errno;
	a = (uint8_t *)(((uintptr_t)p + ARENA_ALIGN - 1) & ~(uintptr_t)(ARENA_ALIGN - 1));
	if (a > p)
		munmap(p, (size_t)(a - p));
	len -= (size_t)(a - p);
	if (len > need) {
		munmap(a + need, len - need);
		len = need;
	}
	/* advice only: a kernel without THP still gives 4 KiB pages */
	madvise(a, len, MADV_HUGEPAGE);
	m->arena = a;
	m->arena_cap = len;
	return 0;
}

/* Trim the arena to what was used and make it read-only (the model is immutable). */
static void arena_seal(struct kvp_model *m)
{
	size_t keep = (m->arena_used + ARENA_ALIGN - 1) & ~(ARENA_ALIGN - 1);

	if (!m->arena)
		return;
	if (keep < m->arena_cap) {
		munmap(m->arena + keep, m->arena_cap - keep);
		m->arena_cap = keep;
	}
	if (!m->arena_cap) {
		m->arena = NULL;
		return;
	}
	mprotect(m->arena, m->arena_cap, PROT_READ);
	m->info.arena_bytes = m->arena_cap;
}

/*
 * With the weights copied, nothing reads the file's tensor data again after open: this
 * process's pages of [p, p + len) are dropped as soon as a tensor has been copied, and
 * again once it has been hashed, so the resident size peaks at the arena plus one
 * tensor instead of the arena plus the whole file.  Safe: a later read would fault the
 * pages in again from the file (MAP_PRIVATE, never written); the page cache stays, the
 * kernel's to reclaim.  A caller's buffer (kvp_model_open_mem) is never touched.
 */
static void drop_file_pages(const struct kvp_model *m, const void *p, size_t len)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE); /* 16/64 KiB on some aarch64 */
	uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1);
	uintptr_t b = ((uintptr_t)p + len) & ~(page - 1);

	if (m->placement == KVP_MODEL_WEIGHTS_COPY && m->gguf->mapped && b > a)
		madvise((void *)a, b - a, MADV_DONTNEED);
}

/* Does a vector tensor need converting (not f32)?  (Alignment: see arena_bytes().) */
static int needs_conversion(const struct kvp_gguf_tensor *t, int vector)
{
	return vector && t->type != KVP_GGML_F32;
}

/*
 * Bytes of arena a tensor takes (64-byte aligned): its f32 copy, its bytes, or none.
 * The kernels read floats and binary16 scales in place, so a tensor must start 4-byte
 * aligned; GGUF allows general.alignment = 1 (and a caller's buffer may be anywhere),
 * so one that does not is copied, as with KVP_MODEL_WEIGHTS_COPY.
 */
static size_t arena_bytes(const struct kvp_model *m, const struct kvp_gguf_tensor *t)
{
	int vector = t->n_dims == 1 || t->ne[1] == 1;

	if (needs_conversion(t, vector))
		return (t->n_elems * 4 + 63) & ~(size_t)63;
	if (m->placement == KVP_MODEL_WEIGHTS_COPY || (uintptr_t)t->data % 4)
		return (t->n_bytes + 63) & ~(size_t)63;
	return 0;
}

/*
 * Find tensor @name of shape (ne0, ne1) (ne1 = 1 for a vector) and bind it: in place
 * (or its bytes copied, KVP_MODEL_WEIGHTS_COPY) in its own type; a vector that is not
 * f32 is converted to f32 in the arena.
 */
static int bind(struct kvp_model *m, const char *name, uint64_t ne0, uint64_t ne1,
		struct kvp_tensor *out, char *err, size_t errlen)
{
	const struct kvp_gguf_tensor *t = kvp_gguf_tensor(m->gguf, name);
	uint32_t n_dims = ne1 > 1 ? 2 : 1;
	const struct kvp_qtype *qt;
	size_t bytes;
	uint8_t *buf;

	if (!t) {
		kvp_errmsg(err, errlen, "model: missing tensor %s", name);
		return -EBADMSG;
	}
	if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1 ||
	    t->n_dims < n_dims || t->n_dims > 2) {
		kvp_errmsg(err, errlen,
			   "model: tensor %s has shape [%llu, %llu], want [%llu, %llu]", name,
			   (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
			   (unsigned long long)ne0, (unsigned long long)ne1);
		return -EBADMSG;
	}
	qt = kvp_qtype(t->type);
	if (!qt) {
		kvp_errmsg(err, errlen,
			   "model: tensor %s has type %s, not supported (supported: %s)", name,
			   kvp_ggml_type_name(t->type), kvp_qtype_list());
		return -ENOTSUP;
	}
	if (n_dims == 1 && t->type != KVP_GGML_F32 && t->type != KVP_GGML_F16 &&
	    t->type != KVP_GGML_BF16) {
		kvp_errmsg(
			err, errlen,
			"model: vector %s has type %s; norms and biases must be f32, f16 or bf16",
			name, kvp_ggml_type_name(t->type));
		return -ENOTSUP;
	}
	m->bound[t - m->gguf->tensors] = 1;
	m->info.n_params += t->n_elems;
	m->info.type_tensors[t->type]++;
	m->info.type_bytes[t->type] += t->n_bytes;
	*out = (struct kvp_tensor){ .type = t->type,
				    .data = t->data,
				    .ne0 = ne0,
				    .ne1 = ne1,
				    .row_bytes = kvp_ggml_row_bytes(t->type, ne0) };
	bytes = arena_bytes(m, t);
	if (!bytes)
		return 0;
	/* cannot happen: arena_need() counted every tensor of the file */
	if (!m->arena || bytes > m->arena_cap - m->arena_used) {
		kvp_errmsg(err, errlen, "model: out of memory placing %s", name);
		return -ENOMEM;
	}
	buf = m->arena + m->arena_used;
	m->arena_used += bytes;
	if (needs_conversion(t, n_dims == 1)) {
		kvp_dequant_ref((float *)buf, t->data, t->type, t->n_elems);
		*out = (struct kvp_tensor){ .type = KVP_GGML_F32,
					    .data = buf,
					    .ne0 = ne0,
					    .ne1 = ne1,
					    .row_bytes = ne0 * 4 };
		m->info.n_converted++;
		m->info.converted_bytes += bytes;
	} else {
		memcpy(buf, t->data, t->n_bytes);
		out->data = buf;
		m->info.copied_bytes += bytes;
	}
	drop_file_pages(m, t->data, t->n_bytes);
	return 0;
}

/* Upper bound of the arena: every tensor of the file that bind() may place there. */
static size_t arena_need(const struct kvp_model *m)
{
	size_t need = 0;

	for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
		const struct kvp_gguf_tensor *t = &m->gguf->tensors[i];

		if (t->n_elems > (SIZE_MAX / 2 - need) / 4 - 64)
			return SIZE_MAX;
		need += arena_bytes(m, t);
	}
	return need;
}

/* Bytes one step reads: every bound matrix and vector, the embedding only as output. */
static uint64_t tensor_bytes(const struct kvp_tensor *t)
{
	return t->row_bytes * t->ne1;
}

static uint64_t weight_bytes(const struct kvp_model *m)
{
	uint64_t b = tensor_bytes(&m->w.output_norm) + tensor_bytes(&m->w.output);

	for (uint32_t l = 0; l < m->hp.n_layers; l++) {
		const struct kvp_layer_weights *L = &m->layers[l];

		b += tensor_bytes(&L->attn_norm) + tensor_bytes(&L->wq) + tensor_bytes(&L->wk) +
		     tensor_bytes(&L->wv) + tensor_bytes(&L->wo) + tensor_bytes(&L->ffn_norm) +
		     tensor_bytes(&L->w_gate) + tensor_bytes(&L->w_up) + tensor_bytes(&L->w_down) +
		     tensor_bytes(&L->bq) + tensor_bytes(&L->bk) + tensor_bytes(&L->bv) +
		     tensor_bytes(&L->bo);
	}
	return b;
}

/*
 * Bind tensor @name as bind() does when the architecture has it (@need: enum
 * kvp_arch_need): required ones must exist, optional ones are bound when present, and
 * absent ones are left for the unused-tensor check to refuse.  *@have is set when bound.
 */
static int bind_opt(struct kvp_model *m, const char *name, uint32_t need, uint64_t ne0,
		    struct kvp_tensor *out, int *have, char *err, size_t errlen)
{
	int r;

	if (need == KVP_ARCH_ABSENT ||
	    (need == KVP_ARCH_OPTIONAL && !kvp_gguf_tensor(m->gguf, name)))
		return 0;
	r = bind(m, name, ne0, 1, out, err, errlen);
	if (!r)
		*have = 1;
	return r;
}

/* A tensor the forward pass would not read is math it would silently skip: refuse it. */
static int check_all_bound(const struct kvp_model *m, char *err, size_t errlen)
{
	for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
		const struct kvp_gguf_str *nm = &m->gguf->tensors[i].name;

		if (m->bound[i])
			continue;
		kvp_errmsg(err, errlen,
			   "model: tensor %.*s is not part of architecture %s as kvpool "
			   "runs it; refused rather than ignored",
			   (int)(nm->len > 96 ? 96 : nm->len), nm->p, m->arch->name);
		return -ENOTSUP;
	}
	return 0;
}

static int bind_layer(struct kvp_model *m, uint32_t l, char *err, size_t errlen)
{
	const struct kvp_model_hparams *hp = &m->hp;
	struct kvp_layer_weights *L = &m->layers[l];
	uint64_t qd = (uint64_t)hp->n_heads * hp->head_dim;
	uint64_t kvd = (uint64_t)hp->n_kv_heads * hp->head_dim;
	const struct {
		const char *suffix;
		uint64_t ne0, ne1;
		struct kvp_tensor *dst;
	} t[] = {
		{ "attn_norm", hp->n_embd, 1, &L->attn_norm },
		{ "attn_q", hp->n_embd, qd, &L->wq },
		{ "attn_k", hp->n_embd, kvd, &L->wk },
		{ "attn_v", hp->n_embd, kvd, &L->wv },
		{ "attn_output", qd, hp->n_embd, &L->wo },
		{ "ffn_norm", hp->n_embd, 1, &L->ffn_norm },
		{ "ffn_gate", hp->n_embd, hp->n_ff, &L->w_gate },
		{ "ffn_up", hp->n_embd, hp->n_ff, &L->w_up },
		{ "ffn_down", hp->n_ff, hp->n_embd, &L->w_down },
	};
	const struct {
		const char *suffix;
		uint32_t need;
		uint64_t ne0;
		struct kvp_tensor *dst;
		int *have;
	} b[] = {
		{ "attn_q", m->arch->qkv_bias, qd, &L->bq, &m->hp.qkv_bias },
		{ "attn_k", m->arch->qkv_bias, kvd, &L->bk, &m->hp.qkv_bias },
		{ "attn_v", m->arch->qkv_bias, kvd, &L->bv, &m->hp.qkv_bias },
		{ "attn_output", m->arch->o_bias, hp->n_embd, &L->bo, &m->hp.o_bias },
	};
	char nm[64];
	int r;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		snprintf(nm, sizeof(nm), "blk.%u.%s.weight", l, t[i].suffix);
		if ((r = bind(m, nm, t[i].ne0, t[i].ne1, t[i].dst, err, errlen)))
			return r;
	}
	for (size_t i = 0; i < sizeof(b) / sizeof(b[0]); i++) {
		snprintf(nm, sizeof(nm), "blk.%u.%s.bias", l, b[i].suffix);
		if ((r = bind_opt(m, nm, b[i].need, b[i].ne0, b[i].dst, b[i].have, err, errlen)))
			return r;
	}
	return 0;
}

static int bind_all(struct kvp_model *m, char *err, size_t errlen)
{
	const struct kvp_model_hparams *hp = &m->hp;
	const struct kvp_gguf_tensor *emb = kvp_gguf_tensor(m->gguf, "token_embd.weight");
	uint32_t n_vocab_key = 0;
	size_t need;
	int r;

	if (!emb || emb->n_dims != 2 || emb->ne[1] < 1 || emb->ne[1] > VOCAB_MAX) {
		kvp_errmsg(err, errlen,
			   "model: token_embd.weight missing or not [n_embd, n_vocab]");
		return -EBADMSG;
	}
	m->hp.n_vocab = (uint32_t)emb->ne[1];
	if ((r = get_u32(m->gguf, akey(m, "vocab_size"), 1, VOCAB_MAX, 0, &n_vocab_key, err,
			 errlen)))
		return r;
	if (n_vocab_key && n_vocab_key != hp->n_vocab) {
		kvp_errmsg(err, errlen, "model: %s %u but token_embd.weight has %u rows",
			   akey(m, "vocab_size"), n_vocab_key, hp->n_vocab);
		return -EBADMSG;
	}
	m->layers = calloc(hp->n_layers, sizeof(*m->layers));
	m->bound = calloc(m->gguf->n_tensors ? m->gguf->n_tensors : 1, 1);
	if (!m->layers || !m->bound) {
		kvp_errmsg(err, errlen, "model: out of memory");
		return -ENOMEM;
	}
	need = arena_need(m);
	if (need == SIZE_MAX) {
		kvp_errmsg(err, errlen, "model: tensors too large to place");
		return -ENOMEM;
	}
	if (need && (r = arena_reserve(m, need))) {
		kvp_errmsg(err, errlen, "model: cannot reserve %zu bytes for the weights", need);
		return r;
	}
	if ((r = bind(m, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->w.tok_embd, err,
		      errlen)) ||
	    (r = bind(m, "output_norm.weight", hp->n_embd, 1, &m->w.output_norm, err, errlen)) ||
	    (r = bind_opt(m, "rope_freqs.weight", KVP_ARCH_OPTIONAL, hp->n_rot / 2,
			  &m->w.rope_freqs, &m->hp.rope_freqs, err, errlen)))
		return r;
	if (kvp_gguf_tensor(m->gguf, "output.weight")) {
		r = bind(m, "output.weight", hp->n_embd, hp->n_vocab, &m->w.output, err, errlen);
		if (r)
			return r;
	} else {
		m->w.output = m->w.tok_embd;
		m->hp.tied_output = 1;
	}
	for (uint32_t l = 0; l < hp->n_layers; l++)
		if ((r = bind_layer(m, l, err, errlen)))
			return r;
	if ((r = check_all_bound(m, err, errlen)))
		return r;
	m->w.layers = m->layers;
	arena_seal(m);
	m->info.weight_bytes = weight_bytes(m);
	return 0;
}

/* The rotation the forward pass applies, derived once (compute/rope.h). */
static int make_rope(struct kvp_model *m, char *err, size_t errlen)
{
	const struct kvp_model_hparams *hp = &m->hp;
	struct kvp_rope_params p = {
		.n_rot = hp->n_rot,
		.layout = hp->rope_layout,
		.base = hp->rope_base,
		.scaling = hp->rope_scaling,
		.factor = hp->rope_factor,
		.orig_ctx = hp->rope_orig_ctx,
		.beta_fast = hp->yarn_beta_fast,
		.beta_slow = hp->yarn_beta_slow,
		.attn_factor = hp->rope_attn_factor,
		.freq_factors = m->w.rope_freqs.data,
	};
	int r = kvp_rope_init(&m->rope, &p);

	if (r == -EINVAL && p.freq_factors)
		kvp_errmsg(err, errlen,
			   "model: rope_freqs.weight has a factor that is not finite "
			   "and positive");
	else if (r)
		kvp_errmsg(err, errlen, "model: bad RoPE parameters");
	return r == -EINVAL ? -EBADMSG : r;
}

void kvp_model_info_types(const struct kvp_model_info *mi, char *buf, size_t len)
{
	size_t n = 0;

	if (len)
		buf[0] = 0;
	for (uint32_t t = 0; t < KVP_GGML_TYPE__COUNT && n < len; t++) {
		int w;

		if (!mi->type_tensors[t])
			continue;
		w = snprintf(buf + n, len - n, "%s%s %u tensors %.1f MiB", n ? ", " : "",
			     kvp_ggml_type_name(t), mi->type_tensors[t],
			     (double)mi->type_bytes[t] / (1 << 20));
		if (w < 0)
			break;
		n += (size_t)w;
	}
}

/* The file's dominant matrix type, for the load report. */
static const char *file_type(const struct kvp_gguf *g)
{
	uint32_t type = UINT32_MAX;

	for (uint64_t i = 0; i < g->n_tensors; i++) {
		if (g->tensors[i].n_dims < 2)
			continue;
		if (type != UINT32_MAX && type != g->tensors[i].type)
			return "mixed";
		type = g->tensors[i].type;
	}
	return type == UINT32_MAX ? "none" : kvp_ggml_type_name(type);
}

/*
 * The architecture and every hyper-parameter (the RoPE variant as its derived per-pair
 * frequencies and scale, so any two rotations that differ hash apart), then each
 * tensor's name, type, shape and stored bytes (biases and rope_freqs among them).
 */
static void fingerprint(struct kvp_model *m)
{
	XXH3_state_t st;
	XXH128_hash_t h;
	const struct kvp_model_hparams *hp = &m->hp;
	uint32_t words[] = { hp->arch,
			     hp->n_vocab,
			     hp->n_embd,
			     hp->n_layers,
			     hp->n_heads,
			     hp->n_kv_heads,
			     hp->head_dim,
			     hp->n_ff,
			     hp->n_rot,
			     (uint32_t)hp->tied_output,
			     hp->rope_layout,
			     hp->rope_scaling,
			     hp->rope_orig_ctx,
			     (uint32_t)hp->rope_freqs,
			     (uint32_t)hp->qkv_bias,
			     (uint32_t)hp->o_bias };
	float floats[] = { hp->rope_base,      hp->rms_eps,	   hp->rope_factor,
			   hp->yarn_beta_fast, hp->yarn_beta_slow, hp->rope_attn_factor };

	XXH3_128bits_reset(&st);
	XXH3_128bits_update(&st, "kvpool-model-2", 14);
	XXH3_128bits_update(&st, m->arch->name, strlen(m->arch->name));
	XXH3_128bits_update(&st, words, sizeof(words));
	XXH3_128bits_update(&st, floats, sizeof(floats));
	XXH3_128bits_update(&st, &m->rope.mscale, sizeof(m->rope.mscale));
	XXH3_128bits_update(&st, m->rope.freq, hp->n_rot / 2 * sizeof(*m->rope.freq));
	for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
		const struct kvp_gguf_tensor *t = &m->gguf->tensors[i];

		XXH3_128bits_update(&st, t->name.p, t->name.len);
		XXH3_128bits_update(&st, &t->type, sizeof(t->type));
		XXH3_128bits_update(&st, t->ne, sizeof(t->ne));
		XXH3_128bits_update(&st, t->data, t->n_bytes);
		drop_file_pages(m, t->data, t->n_bytes);
	}
	h = XXH3_128bits_digest(&st);
	XXH128_canonicalFromHash((XXH128_canonical_t *)m->fp, h);
}

/*
 * The end of both opens: takes ownership of @m (with its parsed file), which is freed on
 * failure; on success *@out holds it.
 */
static int finish_open(struct kvp_model **out, struct kvp_model *m, const struct kvp_model_opts *o,
		       char *err, size_t errlen)
{
	int r;

	m->placement = o && o->weights != KVP_MODEL_WEIGHTS_DEFAULT ? o->weights :
								      KVP_MODEL_WEIGHTS_DEFAULT_IS;
	if (m->placement != KVP_MODEL_WEIGHTS_MAP && m->placement != KVP_MODEL_WEIGHTS_COPY) {
		kvp_errmsg(err, errlen, "model: unknown weight placement %u", m->placement);
		r = -EINVAL;
		goto err_model;
	}
	m->info.weights_copied = m->placement == KVP_MODEL_WEIGHTS_COPY;
	r = read_hparams(m, err, errlen);
	if (!r)
		r = bind_all(m, err, errlen);
	if (!r)
		r = make_rope(m, err, errlen);
	free(m->bound);
	m->bound = NULL;
	if (r)
		goto err_model;
	m->info.file_type = file_type(m->gguf);
	m->info.file_bytes = m->gguf->size;
	fingerprint(m);
	*out = m;
	return 0;

err_model: /* whatever was bound: kvp_model_close() takes a partly opened model */
	kvp_model_close(m);
	return r;
}

int kvp_model_open(struct kvp_model **out, const char *path, char *err, size_t errlen)
{
	return kvp_model_open_opts(out, path, NULL, err, errlen);
}

int kvp_model_open_opts(struct kvp_model **out, const char *path, const struct kvp_model_opts *o,
			char *err, size_t errlen)
{
	struct kvp_model *m = calloc(1, sizeof(*m));
	int r;

	*out = NULL;
	if (!m) {
		kvp_errmsg(err, errlen, "model: out of memory");
		return -ENOMEM;
	}
	r = kvp_gguf_open(&m->gguf, path, err, errlen);
	if (r)
		goto err_free;
	return finish_open(out, m, o, err, errlen);

err_free:
	free(m);
	return r;
}

int kvp_model_open_mem(struct kvp_model **out, const void *buf, size_t len, char *err,
		       size_t errlen)
{
	struct kvp_model *m = calloc(1, sizeof(*m));
	int r;

	*out = NULL;
	if (!m) {
		kvp_errmsg(err, errlen, "model: out of memory");
		return -ENOMEM;
	}
	r = kvp_gguf_parse(&m->gguf, buf, len, err, errlen);
	if (r)
		goto err_free;
	return finish_open(out, m, NULL, err, errlen);

err_free:
	free(m);
	return r;
}

void kvp_model_close(struct kvp_model *m)
{
	if (!m)
		return;
	if (m->arena)
		munmap(m->arena, m->arena_cap);
	kvp_rope_deinit(&m->rope);
	free(m->bound);
	free(m->layers);
	kvp_gguf_close(m->gguf);
	free(m);
}

const struct kvp_model_hparams *kvp_model_hparams(const struct kvp_model *m)
{
	return &m->hp;
}

const struct kvp_model_info *kvp_model_info(const struct kvp_model *m)
{
	return &m->info;
}

void kvp_model_describe(const struct kvp_model *m, char *buf, size_t len)
{
	const struct kvp_model_hparams *hp = &m->hp;
	char sc[96] = "";

	if (hp->rope_scaling == KVP_ROPE_SCALING_LINEAR)
		snprintf(sc, sizeof(sc), ", linear x%g", hp->rope_factor);
	else if (hp->rope_scaling == KVP_ROPE_SCALING_YARN)
		snprintf(sc, sizeof(sc), ", yarn x%g from %u", hp->rope_factor, hp->rope_orig_ctx);
	snprintf(buf, len, "%s, head_dim %u, RoPE %s base %g%s%s%s%s%s", m->arch->name,
		 hp->head_dim, kvp_rope_layout_name(hp->rope_layout), hp->rope_base, sc,
		 hp->n_rot != hp->head_dim ? " (partial)" : "",
		 hp->rope_freqs ? ", rope_freqs" : "", hp->qkv_bias ? ", Q/K/V biases" : "",
		 hp->o_bias ? ", output bias" : "");
}

const char *kvp_model_name(const struct kvp_model *m)
{
	return m->name;
}

const uint8_t *kvp_model_fingerprint(const struct kvp_model *m)
{
	return m->fp;
}

void kvp_model_kv_shape(const struct kvp_model *m, uint32_t dtype, uint32_t block_tokens,
			struct kvp_model_shape *out)
{
	memset(out, 0, sizeof(*out));
	out->n_layers = m->hp.n_layers;
	out->n_kv_heads = m->hp.n_kv_heads;
	out->head_dim = m->hp.head_dim;
	out->dtype = dtype;
	out->block_tokens = block_tokens;
}

const struct kvp_weights *kvp_model_weights(const struct kvp_model *m)
{
	return &m->w;
}

const struct kvp_gguf *kvp_model_gguf(const struct kvp_model *m)
{
	return m->gguf;
}

const struct kvp_rope *kvp_model_rope(const struct kvp_model *m)
{
	return &m->rope;
}
