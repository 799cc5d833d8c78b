/* SPDX-License-Identifier: MIT */
/*
 * mkmodel.c - synthetic GGUF llama / qwen2 models with seeded random weights.
 *
 * Layout written: header, metadata (architecture, shape, a byte-level llama-style
 * tokenizer), tensor infos, then the tensor data, each tensor aligned to 32 bytes.
 * Each tensor's values come from its own splitmix64 stream seeded by (seed, tensor
 * index), so the output is a pure function of the options.  Matrices are uniform with
 * variance 1/fan_in, which keeps every projection's output at the scale of its input;
 * norms are 1.  No global state; any thread.
 */
#include "compute/mkmodel.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compute/gguf.h"
#include "compute/kernels/quant.h"
#include "compute/mkvocab.h"

#define ALIGN 32u
#define N_BYTE_TOKENS 256u
#define N_VOCAB (3u + N_BYTE_TOKENS)
#define CHUNK_ELEMS (1u << 20) /* values generated per write */
#define QUANT_VERSION 2	       /* GGML's Q8_0 layout: one f16 scale + 32 int8 */

/* Output sink: a FILE, or a growing heap buffer. */
struct sink {
	FILE *f;
	uint8_t *mem;
	size_t len, cap;
	int err; /* first -errno */
	int dry; /* count only: nothing is written */
};

static void put(struct sink *s, const void *p, size_t n)
{
	if (s->err || !n || s->dry)
		return;
	if (s->f) {
		if (fwrite(p, 1, n, s->f) != n)
			s->err = errno ? -errno : -EIO;
		return;
	}
	if (s->len + n > s->cap) {
		size_t cap = s->cap ? s->cap : 1 << 16;
		uint8_t *m;

		while (cap < s->len + n)
			cap *= 2;
		m = realloc(s->mem, cap);
		if (!m) {
			s->err = -ENOMEM;
			return;
		}
		s->mem = m;
		s->cap = cap;
	}
	memcpy(s->mem + s->len, p, n);
	s->len += n;
}

static void put_u32(struct sink *s, uint32_t v)
{
	put(s, &v, 4);
}
static void put_u64(struct sink *s, uint64_t v)
{
	put(s, &v, 8);
}
static void put_f32(struct sink *s, float v)
{
	put(s, &v, 4);
}

static void put_str(struct sink *s, const char *str)
{
	put_u64(s, strlen(str));
	put(s, str, strlen(str));
}

static void kv_str(struct sink *s, const char *k, const char *v)
{
	put_str(s, k);
	put_u32(s, KVP_GGUF_STRING);
	put_str(s, v);
}

static void kv_u32(struct sink *s, const char *k, uint32_t v)
{
	put_str(s, k);
	put_u32(s, KVP_GGUF_U32);
	put_u32(s, v);
}

static void kv_f32(struct sink *s, const char *k, float v)
{
	put_str(s, k);
	put_u32(s, KVP_GGUF_F32);
	put_f32(s, v);
}

static void kv_bool(struct sink *s, const char *k, int v)
{
	uint8_t b = !!v;

	put_str(s, k);
	put_u32(s, KVP_GGUF_BOOL);
	put(s, &b, 1);
}

static void pad_to(struct sink *s, uint64_t *off, uint64_t align)
{
	static const uint8_t zero[64];
	uint64_t n = (align - *off % align) % align;

	put(s, zero, n);
	*off += n;
}

struct tinfo {
	char name[48];
	uint64_t ne0, ne1; /* ne1 = 1: a vector */
	uint32_t type;
	float scale;	    /* uniform half-width; 0: all ones (norms) */
	float anti;	    /* output only: minus this times token_embd (see plan()) */
	const float *fixed; /* ne0 given values instead of random ones (rope_freqs) */
	uint64_t offset;    /* from the data section start */
	uint64_t bytes;
};

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static const struct {
	const char *name;
	uint32_t base;	    /* the recipe's main type */
	uint32_t file_type; /* general.file_type (llama.cpp's LLAMA_FTYPE_*) */
} recipes[] = {
	[KVP_MKMODEL_Q4_K_M - KVP_MKMODEL_Q4_K_M] = { "q4_k_m", KVP_GGML_Q4_K, 15 },
	[KVP_MKMODEL_Q5_K_M - KVP_MKMODEL_Q4_K_M] = { "q5_k_m", KVP_GGML_Q5_K, 17 },
	[KVP_MKMODEL_Q4_K_S - KVP_MKMODEL_Q4_K_M] = { "q4_k_s", KVP_GGML_Q4_K, 14 },
};

#define N_RECIPES (sizeof(recipes) / sizeof(recipes[0]))

static int is_recipe(uint32_t type)
{
	return type >= KVP_MKMODEL_Q4_K_M && type < KVP_MKMODEL_Q4_K_M + N_RECIPES;
}

int kvp_mkmodel_type_parse(const char *s)
{
	for (uint32_t t = 0; t < KVP_GGML_TYPE__COUNT; t++)
		if (kvp_qtype(t) && !strcmp(s, kvp_qtype(t)->name))
			return (int)t;
	for (uint32_t i = 0; i < N_RECIPES; i++)
		if (!strcmp(s, recipes[i].name))
			return (int)(KVP_MKMODEL_Q4_K_M + i);
	return -EINVAL;
}

const char *kvp_mkmodel_type_list(void)
{
	return "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, "
	       "q4_k_m, q5_k_m, q4_k_s";
}

/* The main matrix type of @type (a GGML type or a recipe). */
static uint32_t base_type(uint32_t type)
{
	return is_recipe(type) ? recipes[type - KVP_MKMODEL_Q4_K_M].base : type;
}

/* llama.cpp's use_more_bits(): first and last eighth of the layers, every third between. */
static int more_bits(uint32_t l, uint32_t n)
{
	return l < n / 8 || l >= 7 * n / 8 || (l - n / 8) % 3 == 2;
}

/* The type of matrix @suffix ("attn_v", "output", ...) of layer @l under @o's type. */
static uint32_t matrix_type(const struct kvp_mkmodel_opts *o, const char *suffix, uint32_t l)
{
	if (!is_recipe(o->type))
		return o->type;
	if (!strcmp(suffix, "output"))
		return KVP_GGML_Q6_K;
	if (o->type != KVP_MKMODEL_Q4_K_S &&
	    (!strcmp(suffix, "attn_v") || !strcmp(suffix, "ffn_down")) && more_bits(l, o->n_layers))
		return KVP_GGML_Q6_K;
	return base_type(o->type);
}

int kvp_mkmodel_preset(struct kvp_mkmodel_opts *o, const char *preset)
{
	memset(o, 0, sizeof(*o));
	o->type = KVP_GGML_F32;
	o->seed = 1234;
	o->rope_base = 10000.0f;
	o->rms_eps = 1e-5f;
	o->n_ctx = 4096;
	if (!strcmp(preset, "tiny")) {
		o->name = "kvpool-tiny";
		o->n_embd = 64;
		o->n_layers = 2;
		o->n_heads = 4;
		o->n_kv_heads = 2;
		o->n_ff = 128;
		o->n_ctx = 1024;
	} else if (!strcmp(preset, "tinyq")) {
		o->name = "kvpool-tinyq";
		o->n_embd = 256;
		o->n_layers = 2;
		o->n_heads = 4;
		o->n_kv_heads = 2;
		o->n_ff = 512;
		o->n_ctx = 1024;
	} else if (!strcmp(preset, "demo")) {
		o->name = "kvpool-demo";
		o->n_embd = 768;
		o->n_layers = 12;
		o->n_heads = 12;
		o->n_kv_heads = 4;
		o->n_ff = 3072;
	} else if (!strcmp(preset, "1b")) {
		o->name = "kvpool-1b";
		o->n_embd = 2048;
		o->n_layers = 16;
		o->n_heads = 32;
		o->n_kv_heads = 8;
		o->n_ff = 8192;
		o->rope_base = 500000.0f;
		/* untied (Llama-3.2-1B ties them): a tied random model repeats its input token */
	} else {
		return -EINVAL;
	}
	return 0;
}

/* The head size: the explicit one, or n_embd / n_heads. */
static uint32_t head_dim(const struct kvp_mkmodel_opts *o)
{
	return o->head_dim ? o->head_dim : o->n_embd / o->n_heads;
}

static const char *arch_name(const struct kvp_mkmodel_opts *o)
{
	return o->arch ? o->arch : "llama";
}

static int is_qwen2(const struct kvp_mkmodel_opts *o)
{
	return !strcmp(arch_name(o), "qwen2");
}

static int check_opts(const struct kvp_mkmodel_opts *o, char *err, size_t errlen)
{
	const char *why = NULL;
	const struct kvp_mkmodel_rope_freqs *rf = &o->rope_freqs;
	uint32_t blk = !is_recipe(o->type) && kvp_qtype(o->type) ? kvp_qtype(o->type)->block : 1;

	if (is_recipe(o->type))
		blk = KVP_QK_K;
	if (!o->n_embd || !o->n_layers || !o->n_heads || !o->n_kv_heads || !o->n_ff || !o->n_ctx)
		why = "zero dimension";
	else if (o->n_embd > 65536 || o->n_layers > 1024 || o->n_heads > 1024 ||
		 o->n_ff > (1u << 20) || o->head_dim > 1024)
		why = "dimension too large (n_embd <= 65536, n_layers <= 1024, n_heads <= 1024, n_ff <= 1048576, head_dim <= 1024)";
	else if (o->n_heads % o->n_kv_heads || (!o->head_dim && o->n_embd % o->n_heads) ||
		 head_dim(o) % 2)
		why = "n_embd / n_heads / n_kv_heads do not divide evenly into an even head_dim";
	else if (strcmp(arch_name(o), "llama") && strcmp(arch_name(o), "qwen2"))
		why = "unknown architecture (llama, qwen2)";
	else if (!is_recipe(o->type) && !kvp_qtype(o->type))
		why = "unknown type";
	else if (o->n_embd % blk || o->n_ff % blk || ((uint64_t)o->n_heads * head_dim(o)) % blk)
		why = "this type needs n_embd, n_ff and n_heads * head_dim multiples of its block (32 for the legacy quants, 256 for the K-quants)";
	else if (!(o->rope_base > 1.0f) || !(o->rms_eps > 0.0f))
		why = "bad rope_base or rms_eps";
	else if (rf->factor != 0 &&
		 (!(rf->factor >= 1.0f) || !(rf->low_freq_factor > 0.0f) ||
		  !(rf->high_freq_factor > rf->low_freq_factor) || !rf->orig_ctx))
		why = "bad rope_freqs (want factor >= 1, 0 < low < high, orig_ctx > 0)";
	else if (!(o->rope_scaling_factor >= 0.0f))
		why = "bad rope scaling factor";
	else if (o->n_extra && !o->extra)
		why = "extra keys missing";
	else if (o->vocab && (!o->vocab->n_tokens || !o->vocab->model))
		why = "empty vocabulary";
	if (why) {
		if (err && errlen)
			snprintf(err, errlen, "mkmodel: %s", why);
		return -EINVAL;
	}
	return 0;
}

void kvp_mkmodel_rope_freqs_llama3(float *out, uint32_t n_rot, float base,
				   const struct kvp_mkmodel_rope_freqs *p)
{
	double lo_wave = p->orig_ctx / p->low_freq_factor,
	       hi_wave = p->orig_ctx / p->high_freq_factor;

	for (uint32_t i = 0; i < n_rot / 2; i++) {
		double wave = 2 * M_PI / pow(base, -2.0 * i / n_rot);

		if (wave < hi_wave) {
			out[i] = 1.0f;
		} else if (wave > lo_wave) {
			out[i] = p->factor;
		} else {
			double a = (p->orig_ctx / wave - p->low_freq_factor) /
				   (p->high_freq_factor - p->low_freq_factor);

			out[i] = (float)(1.0 / ((1 - a) / p->factor + a));
		}
	}
}

/* Rows of token_embd and output: the real vocabulary's size, or the byte-level one's. */
static uint32_t n_vocab(const struct kvp_mkmodel_opts *o)
{
	return o->vocab ? o->vocab->n_tokens : N_VOCAB;
}

/* Most tensors plan() lists. */
static size_t max_tensors(const struct kvp_mkmodel_opts *o)
{
	return 12 * (size_t)o->n_layers + 4;
}

/*
 * The tensor list in file order; returns the count (<= max_tensors()).  Tensors past
 * the original llama set (biases, rope_freqs) come last, so every other tensor keeps
 * its index, hence its random stream: the same options give the same weights with or
 * without them.  @freqs: rope_freqs' values when @o asks for them.
 */
static size_t plan(const struct kvp_mkmodel_opts *o, struct tinfo *t, const float *freqs)
{
	uint64_t hd = head_dim(o), qd = hd * o->n_heads, kvd = hd * o->n_kv_heads;
	size_t n = 0;
	float emb = sqrtf(3.0f); /* unit variance */
	float in_e = sqrtf(3.0f / o->n_embd), in_ff = sqrtf(3.0f / o->n_ff);
	float in_q = sqrtf(3.0f / (float)qd);

#define ADD(nm, a, b, s, ty) \
	do { \
		snprintf(t[n].name, sizeof(t[n].name), "%s", nm); \
		t[n].ne0 = (a); \
		t[n].ne1 = (b); \
		t[n].scale = (s); \
		t[n].type = (s) == 0 || (b) == 1 ? KVP_GGML_F32 : (ty); \
		n++; \
	} while (0)
	ADD("token_embd.weight", o->n_embd, n_vocab(o), emb, matrix_type(o, "token_embd", 0));
	for (uint32_t l = 0; l < o->n_layers; l++) {
		char nm[48];
		const struct {
			const char *s;
			uint64_t a, b;
			float sc;
		} L[] = {
			{ "attn_norm", o->n_embd, 1, 0 },
			{ "attn_q", o->n_embd, qd, in_e },
			{ "attn_k", o->n_embd, kvd, in_e },
			{ "attn_v", o->n_embd, kvd, in_e },
			{ "attn_output", qd, o->n_embd, in_q },
			{ "ffn_norm", o->n_embd, 1, 0 },
			{ "ffn_gate", o->n_embd, o->n_ff, in_e },
			{ "ffn_up", o->n_embd, o->n_ff, in_e },
			{ "ffn_down", o->n_ff, o->n_embd, in_ff },
		};

		for (size_t i = 0; i < sizeof(L) / sizeof(L[0]); i++) {
			snprintf(nm, sizeof(nm), "blk.%u.%s.weight", l, L[i].s);
			ADD(nm, L[i].a, L[i].b, L[i].sc, matrix_type(o, L[i].s, l));
		}
	}
	ADD("output_norm.weight", o->n_embd, 1, 0, KVP_GGML_F32);
	if (!o->tied) { /* logits with a std of about 2: varied but decisive */
		ADD("output.weight", o->n_embd, n_vocab(o), 2.0f * in_e,
		    matrix_type(o, "output", 0));
		/*
		 * A random model's last hidden state is dominated by the current token's
		 * embedding, so random output rows let some token predict itself and greedy
		 * text collapses into one repeated token.  Subtracting a multiple of the
		 * embedding from each output row costs that token ~4 logit std devs.
		 */
		t[n - 1].anti = 8.0f * sqrtf(2.0f * o->n_layers + 1) / o->n_embd;
	}
	/* biases of about the projections' own scale, as trained Qwen2 models have */
	for (uint32_t l = 0; (is_qwen2(o) || o->qkv_bias) && l < o->n_layers; l++) {
		const struct {
			const char *s;
			uint64_t a;
		} B[] = {
			{ "attn_q", qd },
			{ "attn_k", kvd },
			{ "attn_v", kvd },
		};
		char nm[48];

		for (size_t i = 0; i < sizeof(B) / sizeof(B[0]); i++) {
			snprintf(nm, sizeof(nm), "blk.%u.%s.bias", l, B[i].s);
			ADD(nm, B[i].a, 1, 0.5f, KVP_GGML_F32);
		}
	}
	if (freqs) {
		ADD("rope_freqs.weight", hd / 2, 1, 1.0f, KVP_GGML_F32);
		t[n - 1].fixed = freqs;
	}
#undef ADD
	return n;
}

static void kv_id(struct sink *s, unsigned int *n, const char *k, int64_t v)
{
	if (v < 0)
		return;
	kv_u32(s, k, (uint32_t)v);
	++*n;
}

static void kv_flag(struct sink *s, unsigned int *n, const char *k, int v)
{
	if (v < 0)
		return;
	kv_bool(s, k, v);
	++*n;
}

static void arr_head(struct sink *s, const char *k, uint32_t type, uint64_t n)
{
	put_str(s, k);
	put_u32(s, KVP_GGUF_ARRAY);
	put_u32(s, type);
	put_u64(s, n);
}

/* The synthetic byte-level tokenizer: <unk> <s> </s> and the 256 byte tokens. */
static unsigned int write_byte_vocab(struct sink *s)
{
	char piece[8];

	kv_str(s, "tokenizer.ggml.model", "llama");
	arr_head(s, "tokenizer.ggml.tokens", KVP_GGUF_STRING, N_VOCAB);
	put_str(s, "<unk>");
	put_str(s, "<s>");
	put_str(s, "</s>");
	for (unsigned b = 0; b < N_BYTE_TOKENS; b++) {
		snprintf(piece, sizeof(piece), "<0x%02X>", b);
		put_str(s, piece);
	}
	arr_head(s, "tokenizer.ggml.scores", KVP_GGUF_F32, N_VOCAB);
	for (unsigned i = 0; i < N_VOCAB; i++)
		put_f32(s, 0.0f);
	arr_head(s, "tokenizer.ggml.token_type", KVP_GGUF_I32, N_VOCAB);
	put_u32(s, 2); /* <unk>: unknown */
	put_u32(s, 3); /* <s>: control */
	put_u32(s, 3); /* </s>: control */
	for (unsigned b = 0; b < N_BYTE_TOKENS; b++)
		put_u32(s, 6); /* byte */
	kv_u32(s, "tokenizer.ggml.bos_token_id", 1);
	kv_u32(s, "tokenizer.ggml.eos_token_id", 2);
	kv_u32(s, "tokenizer.ggml.unknown_token_id", 0);
	kv_bool(s, "tokenizer.ggml.add_bos_token", 1);
	kv_bool(s, "tokenizer.ggml.add_eos_token", 0);
	return 9;
}

/* A real family's tokenizer (compute/mkvocab.h); returns the keys written. */
static unsigned int write_real_vocab(struct sink *s, const struct kvp_mkmodel_vocab *v)
{
	unsigned int n = 2;

	kv_str(s, "tokenizer.ggml.model", v->model);
	if (v->pre) {
		kv_str(s, "tokenizer.ggml.pre", v->pre);
		n++;
	}
	arr_head(s, "tokenizer.ggml.tokens", KVP_GGUF_STRING, v->n_tokens);
	for (uint32_t i = 0; i < v->n_tokens; i++)
		put_str(s, v->tokens[i]);
	if (v->scores) {
		arr_head(s, "tokenizer.ggml.scores", KVP_GGUF_F32, v->n_tokens);
		put(s, v->scores, (size_t)v->n_tokens * sizeof(float));
		n++;
	}
	if (v->types) {
		arr_head(s, "tokenizer.ggml.token_type", KVP_GGUF_I32, v->n_tokens);
		put(s, v->types, (size_t)v->n_tokens * sizeof(int32_t));
		n++;
	}
	if (v->merges) {
		arr_head(s, "tokenizer.ggml.merges", KVP_GGUF_STRING, v->n_merges);
		for (uint32_t i = 0; i < v->n_merges; i++)
			put_str(s, v->merges[i]);
		n++;
	}
	kv_id(s, &n, "tokenizer.ggml.bos_token_id", v->bos);
	kv_id(s, &n, "tokenizer.ggml.eos_token_id", v->eos);
	kv_id(s, &n, "tokenizer.ggml.unknown_token_id", v->unk);
	kv_id(s, &n, "tokenizer.ggml.eot_token_id", v->eot);
	kv_id(s, &n, "tokenizer.ggml.eom_token_id", v->eom);
	kv_id(s, &n, "tokenizer.ggml.padding_token_id", v->pad);
	kv_flag(s, &n, "tokenizer.ggml.add_bos_token", v->add_bos);
	kv_flag(s, &n, "tokenizer.ggml.add_eos_token", v->add_eos);
	kv_flag(s, &n, "tokenizer.ggml.add_space_prefix", v->add_space_prefix);
	return n;
}

/* Every tokenizer key (and the chat template); returns how many were written. */
static unsigned int write_tokenizer(struct sink *s, const struct kvp_mkmodel_opts *o)
{
	const char *tmpl = o->chat_template ? o->chat_template :
			   o->vocab	    ? o->vocab->chat_template :
					      NULL;
	unsigned int n = o->vocab ? write_real_vocab(s, o->vocab) : write_byte_vocab(s);

	if (tmpl) {
		kv_str(s, "tokenizer.chat_template", tmpl);
		n++;
	}
	return n;
}

/* "<arch>.<suffix>" */
static const char *akey(char *buf, size_t len, const struct kvp_mkmodel_opts *o, const char *suffix)
{
	snprintf(buf, len, "%s.%s", arch_name(o), suffix);
	return buf;
}

/* The keys past the original llama set (head size, RoPE scaling, extras); returns the count. */
static unsigned int write_model_keys(struct sink *s, const struct kvp_mkmodel_opts *o)
{
	unsigned int n = 0;
	char k[96];

	if (o->head_dim) {
		kv_u32(s, akey(k, sizeof(k), o, "attention.key_length"), o->head_dim);
		kv_u32(s, akey(k, sizeof(k), o, "attention.value_length"), o->head_dim);
		n += 2;
	}
	if (o->rope_scaling) {
		kv_str(s, akey(k, sizeof(k), o, "rope.scaling.type"), o->rope_scaling);
		n++;
	}
	if (o->rope_scaling_factor) {
		kv_f32(s, akey(k, sizeof(k), o, "rope.scaling.factor"), o->rope_scaling_factor);
		n++;
	}
	if (o->rope_orig_ctx) {
		kv_u32(s, akey(k, sizeof(k), o, "rope.scaling.original_context_length"),
		       o->rope_orig_ctx);
		n++;
	}
	for (uint32_t i = 0; i < o->n_extra; i++) {
		const struct kvp_mkmodel_kv *e = &o->extra[i];

		put_str(s, e->key);
		put_u32(s, e->type);
		switch (e->type) {
		case KVP_GGUF_I32:
			put_u32(s, (uint32_t)(int32_t)e->num);
			break;
		case KVP_GGUF_F32:
			put_f32(s, (float)e->num);
			break;
		case KVP_GGUF_BOOL: {
			uint8_t b = e->num != 0;
			put(s, &b, 1);
			break;
		}
		case KVP_GGUF_STRING:
			put_str(s, e->str ? e->str : "");
			break;
		default:
			put_u32(s, (uint32_t)e->num);
			break; /* KVP_GGUF_U32 */
		}
		n++;
	}
	return n;
}

static void write_meta(struct sink *s, const struct kvp_mkmodel_opts *o, size_t n_tensors)
{
	/* general.file_type: llama.cpp's LLAMA_FTYPE_MOSTLY_* of the main type */
	static const uint32_t file_type[KVP_GGML_TYPE__COUNT] = {
		[KVP_GGML_F32] = 0,   [KVP_GGML_F16] = 1,   [KVP_GGML_Q4_0] = 2,
		[KVP_GGML_Q4_1] = 3,  [KVP_GGML_Q8_0] = 7,  [KVP_GGML_Q5_0] = 8,
		[KVP_GGML_Q5_1] = 9,  [KVP_GGML_Q2_K] = 10, [KVP_GGML_Q3_K] = 12,
		[KVP_GGML_Q4_K] = 14, [KVP_GGML_Q5_K] = 16, [KVP_GGML_Q6_K] = 18,
		[KVP_GGML_BF16] = 32,
	};
	struct sink count = { .dry = 1 };
	char k[96];

	put_u32(s, KVP_GGUF_MAGIC);
	put_u32(s, 3);
	put_u64(s, n_tensors);
	/* metadata entries below (a wrong count fails every parse) */
	put_u64(s, 15 + write_tokenizer(&count, o) + write_model_keys(&count, o));
	kv_str(s, "general.architecture", arch_name(o));
	kv_str(s, "general.name", o->name ? o->name : "kvpool-synthetic");
	kv_u32(s, "general.alignment", ALIGN);
	kv_u32(s, "general.file_type",
	       is_recipe(o->type) ? recipes[o->type - KVP_MKMODEL_Q4_K_M].file_type :
				    file_type[o->type]);
	/* the spec requires it when any tensor is quantized; converters always write it */
	kv_u32(s, "general.quantization_version", QUANT_VERSION);
	kv_u32(s, akey(k, sizeof(k), o, "context_length"), o->n_ctx);
	kv_u32(s, akey(k, sizeof(k), o, "embedding_length"), o->n_embd);
	kv_u32(s, akey(k, sizeof(k), o, "block_count"), o->n_layers);
	kv_u32(s, akey(k, sizeof(k), o, "feed_forward_length"), o->n_ff);
	kv_u32(s, akey(k, sizeof(k), o, "attention.head_count"), o->n_heads);
	kv_u32(s, akey(k, sizeof(k), o, "attention.head_count_kv"), o->n_kv_heads);
	kv_u32(s, akey(k, sizeof(k), o, "rope.dimension_count"), head_dim(o));
	kv_f32(s, akey(k, sizeof(k), o, "rope.freq_base"), o->rope_base);
	kv_f32(s, akey(k, sizeof(k), o, "attention.layer_norm_rms_epsilon"), o->rms_eps);
	kv_u32(s, akey(k, sizeof(k), o, "vocab_size"), n_vocab(o));
	write_model_keys(s, o);
	write_tokenizer(s, o);
}

/* Generate tensor @idx's values and write them in its type. */
static uint64_t stream_seed(uint64_t seed, size_t idx)
{
	return seed * 0x100000001b3ull + idx * 0x9e3779b97f4a7c15ull + 1;
}

/* k uniform values in [-a, a) from stream *st */
static void uniform(float *vals, size_t k, float a, uint64_t *st)
{
	for (size_t i = 0; i + 1 < k; i += 2) {
		uint64_t r = splitmix64(st);

		vals[i] = ((float)(r >> 40) * 0x1p-24f * 2.0f - 1.0f) * a;
		vals[i + 1] = ((float)((r >> 8) & 0xffffff) * 0x1p-24f * 2.0f - 1.0f) * a;
	}
	if (k % 2)
		vals[k - 1] = ((float)(splitmix64(st) >> 40) * 0x1p-24f * 2 - 1) * a;
}

/*
 * Generate tensor @idx's values and write them in its type.  @emb describes tensor 0
 * (token_embd, same shape as output), regenerated alongside when t->anti is set.
 */
static void write_tensor(struct sink *s, const struct tinfo *t, size_t idx, uint64_t seed,
			 const struct tinfo *emb, float *vals, float *evals, uint8_t *enc)
{
	uint64_t n = t->ne0 * t->ne1, done = 0;
	uint64_t st = stream_seed(seed, idx), est = stream_seed(seed, 0);

	while (done < n) {
		size_t k = n - done < CHUNK_ELEMS ? n - done : CHUNK_ELEMS;

		if (t->fixed) {
			memcpy(vals, t->fixed + done, k * sizeof(float));
		} else if (t->scale == 0) {
			for (size_t i = 0; i < k; i++)
				vals[i] = 1.0f;
		} else {
			uniform(vals, k, t->scale, &st);
			if (t->anti) { /* k splits identically: output and embedding share a shape */
				uniform(evals, k, emb->scale, &est);
				for (size_t i = 0; i < k; i++)
					vals[i] -= t->anti * evals[i];
			}
		}
		/* k is a multiple of every block size (CHUNK_ELEMS is, and so is n) */
		kvp_quantize_ref(enc, vals, t->type, k);
		put(s, enc, kvp_ggml_row_bytes(t->type, k));
		done += k;
	}
}

static int write_all(struct sink *s, const struct kvp_mkmodel_opts *o, char *err, size_t errlen)
{
	size_t cap = max_tensors(o), n;
	struct tinfo *t = calloc(cap, sizeof(*t));
	float *freqs = o->rope_freqs.factor ? malloc(head_dim(o) / 2 * sizeof(float) + 1) : NULL;
	float *vals = malloc(CHUNK_ELEMS * sizeof(float));
	float *evals = malloc(CHUNK_ELEMS * sizeof(float));
	uint8_t *enc = malloc(CHUNK_ELEMS * sizeof(float));
	uint64_t off = 0, data_off = 0;
	int r = 0;

	if (!t || !vals || !evals || !enc || (o->rope_freqs.factor && !freqs)) {
		r = -ENOMEM;
		goto out;
	}
	if (freqs)
		kvp_mkmodel_rope_freqs_llama3(freqs, head_dim(o), o->rope_base, &o->rope_freqs);
	n = plan(o, t, freqs);
	for (size_t i = 0; i < n; i++) {
		t[i].bytes = kvp_ggml_row_bytes(t[i].type, t[i].ne0) * t[i].ne1;
		t[i].offset = data_off;
		data_off += (t[i].bytes + ALIGN - 1) / ALIGN * ALIGN;
	}
	write_meta(s, o, n);
	for (size_t i = 0; i < n; i++) {
		put_str(s, t[i].name);
		put_u32(s, t[i].ne1 > 1 ? 2 : 1);
		put_u64(s, t[i].ne0);
		if (t[i].ne1 > 1)
			put_u64(s, t[i].ne1);
		put_u32(s, t[i].type);
		put_u64(s, t[i].offset);
	}
	off = s->f ? (uint64_t)ftello(s->f) : s->len;
	pad_to(s, &off, ALIGN);
	for (size_t i = 0; i < n; i++) {
		write_tensor(s, &t[i], i, o->seed, &t[0], vals, evals, enc);
		off += t[i].bytes;
		pad_to(s, &off, ALIGN);
	}
	r = s->err;
out:
	if (r && err && errlen)
		snprintf(err, errlen, "mkmodel: write: %s", strerror(-r));
	free(t);
	free(freqs);
	free(vals);
	free(evals);
	free(enc);
	return r;
}

int kvp_mkmodel_write_mem(void **buf, size_t *len, const struct kvp_mkmodel_opts *o, char *err,
			  size_t errlen)
{
	struct sink s = { 0 };
	int r = check_opts(o, err, errlen);

	*buf = NULL;
	*len = 0;
	if (r)
		return r;
	r = write_all(&s, o, err, errlen);
	if (r) {
		free(s.mem);
		return r;
	}
	*buf = s.mem;
	*len = s.len;
	return 0;
}

int kvp_mkmodel_write(const char *path, const struct kvp_mkmodel_opts *o, char *err, size_t errlen)
{
	struct sink s = { 0 };
	char tmp[4096];
	int r = check_opts(o, err, errlen), fd;

	if (r)
		return r;
	if (snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path) >= (int)sizeof(tmp)) {
		if (err && errlen)
			snprintf(err, errlen, "mkmodel: path too long");
		return -ENAMETOOLONG;
	}
	fd = mkstemp(tmp);
	if (fd < 0 || !(s.f = fdopen(fd, "wb"))) {
		r = -errno;
		if (fd >= 0) {
			close(fd);
			unlink(tmp);
		}
		if (err && errlen)
			snprintf(err, errlen, "mkmodel: create %s: %s", tmp, strerror(-r));
		return r;
	}
	fchmod(fd, 0644); /* a model is not a secret; mkstemp made it 0600 */
	setvbuf(s.f, NULL, _IOFBF, 1 << 20);
	r = write_all(&s, o, err, errlen);
	if (fclose(s.f) && !r) {
		r = -errno;
		if (err && errlen)
			snprintf(err, errlen, "mkmodel: close %s: %s", tmp, strerror(-r));
	}
	if (!r && rename(tmp, path) < 0) {
		r = -errno;
		if (err && errlen)
			snprintf(err, errlen, "mkmodel: rename to %s: %s", path, strerror(-r));
	}
	if (r)
		unlink(tmp);
	return r;
}
