/* SPDX-License-Identifier: MIT */
/*
 * test_gguf.c - the GGUF reader and model binding on damaged files: every truncation
 * point, thousands of seeded random byte flips, wrong architecture, missing tensors;
 * plus metadata lookups, file open errors, and the model fingerprint.
 * Each damaged file lives in a malloc of exactly its size, so any read past its end is
 * an ASan report.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "compute/forward.h"
#include "compute/gguf.h"
#include "compute/kernels/quant.h"
#include "compute/mkmodel.h"
#include "compute/model.h"
#include "compute/text/tokenizer.h"
#include "shm/geom.h"
#include "tests/lib/testlib.h"

/* A small but complete model: f16 matrices, 1 layer, n_embd 32. */
static void *small_file(size_t *len, uint32_t type, uint64_t seed)
{
	struct kvp_mkmodel_opts o;
	void *buf;

	assert_int_equal(kvp_mkmodel_preset(&o, "tiny"), 0);
	o.n_embd = 32;
	o.n_layers = 1;
	o.n_heads = 2;
	o.n_kv_heads = 1;
	o.n_ff = 32;
	o.type = type;
	o.seed = seed;
	assert_int_equal(kvp_mkmodel_write_mem(&buf, len, &o, NULL, 0), 0);
	return buf;
}

static void test_parse_small_model(void **state)
{
	/* the writer's file parses: metadata typed lookups, tensor table, aligned data */
	size_t len;
	void *buf = small_file(&len, KVP_GGML_F16, 1);
	struct kvp_gguf *g;
	struct kvp_gguf_str s;
	const struct kvp_gguf_kv *arr;
	const struct kvp_gguf_tensor *t;
	uint64_t u;
	char err[256];

	assert_int_equal(kvp_gguf_parse(&g, buf, len, err, sizeof(err)), 0);
	assert_int_equal(g->version, 3);
	assert_int_equal(g->n_tensors, 9 + 3);
	assert_int_equal(kvp_gguf_get_str(g, "general.architecture", &s), 0);
	assert_true(kvp_gguf_str_eq(s, "llama"));
	assert_int_equal(kvp_gguf_get_uint(g, "llama.embedding_length", UINT32_MAX, &u), 0);
	assert_int_equal(u, 32);
	assert_int_equal(kvp_gguf_get_uint(g, "llama.embedding_length", 31, &u), -EBADMSG);
	assert_int_equal(kvp_gguf_get_uint(g, "general.name", UINT32_MAX, &u), -EBADMSG);
	assert_int_equal(kvp_gguf_get_uint(g, "no.such.key", UINT32_MAX, &u), -ENOENT);
	assert_int_equal(kvp_gguf_get_arr(g, "tokenizer.ggml.tokens", KVP_GGUF_STRING, &arr), 0);
	assert_int_equal(arr->arr_n, 259);
	const uint8_t *p = arr->val;
	s = kvp_gguf_str_next(&p);
	assert_true(kvp_gguf_str_eq(s, "<unk>"));
	t = kvp_gguf_tensor(g, "blk.0.attn_q.weight");
	assert_non_null(t);
	assert_int_equal(t->type, KVP_GGML_F16);
	assert_int_equal(t->ne[0], 32);
	assert_int_equal(t->ne[1], 32);
	assert_int_equal(t->n_bytes, 32 * 32 * 2);
	assert_int_equal(((const uint8_t *)t->data - g->base) % g->alignment, 0);
	assert_true((const uint8_t *)t->data + t->n_bytes <= g->base + len);
	kvp_gguf_close(g);
	free(buf);
}

static void test_every_truncation_fails_cleanly(void **state)
{
	/* every strict prefix of the file is refused with a message; the whole file loads */
	size_t len;
	uint8_t *buf = small_file(&len, KVP_GGML_F16, 2);
	char err[256];

	for (size_t n = 0; n <= len; n++) {
		uint8_t *cut = malloc(n ? n : 1);
		struct kvp_model *m;
		int r;

		memcpy(cut, buf, n);
		err[0] = 0;
		r = kvp_model_open_mem(&m, cut, n, err, sizeof(err));
		if (n < len) {
			if (r != -EBADMSG)
				fail_msg("prefix of %zu/%zu bytes: got %d", n, len, r);
			assert_true(err[0] != 0);
			assert_null(m);
		} else {
			assert_int_equal(r, 0);
			kvp_model_close(m);
		}
		free(cut);
	}
	free(buf);
}

/* A small file of @type: K-quant shapes (rows of 256) when the type needs them. */
static void *small_file_of(size_t *len, uint32_t type, uint64_t seed)
{
	struct kvp_mkmodel_opts o;
	void *buf;

	if (type < KVP_MKMODEL_Q4_K_M && (!kvp_qtype(type) || kvp_qtype(type)->block < 256))
		return small_file(len, type, seed);
	assert_int_equal(kvp_mkmodel_preset(&o, "tinyq"), 0);
	o.n_layers = 1;
	o.n_ff = 256;
	o.type = type;
	o.seed = seed;
	assert_int_equal(kvp_mkmodel_write_mem(&buf, len, &o, NULL, 0), 0);
	return buf;
}

/* The logits of a 3-token prefill of @m into @lg (n_vocab floats). */
static void last_logits(struct kvp_model *m, float *lg)
{
	struct kvp_fwd *f;
	struct kvp_kv_view kv = { 0 };
	struct kvp_model_shape sh;
	uint32_t table[1] = { 0 };
	int32_t toks[3] = { 1, 5, 7 };

	kvp_model_kv_shape(m, KVP_DTYPE_F32, 4, &sh);
	assert_int_equal(kvp_geom_init(&kv.geom, &sh), 0);
	kv.n_blocks = 1;
	kv.base = aligned_alloc(4096, kv.geom.block_stride);
	assert_int_equal(kvp_fwd_new(&f, m,
				     &(struct kvp_fwd_opts){
					     .n_threads = 1, .max_chunk = 4, .max_batch = 1 }),
			 0);
	assert_int_equal(kvp_fwd_prefill(f, &kv, table, 1, 0, toks, 3, lg, 0), 0);
	kvp_fwd_free(f);
	free(kv.base);
}

/*
 * @iters copies of a @type file with 1-4 random bytes changed (half of them inside the
 * metadata and tensor infos, where a flip matters most): each either loads or fails
 * with a message; a loaded one gets a tokenizer and runs a short prefill without a
 * crash (flipped scales may give NaN logits; they must not give a fault).
 */
static void byte_flips(uint32_t type, int iters)
{
	size_t len;
	uint8_t *buf = small_file_of(&len, type, 3);
	struct kvp_gguf *g;
	uint64_t seed = 0x9e3779b97f4a7c15ull, head;
	int loaded = 0, refused = 0;
	char err[256];

	assert_int_equal(kvp_gguf_parse(&g, buf, len, NULL, 0), 0);
	head = g->data_off;
	kvp_gguf_close(g);
	for (int it = 0; it < iters; it++) {
		uint8_t *c = malloc(len);
		struct kvp_model *m;
		int flips = 1 + (int)(kvp_test_xorshift(&seed) % 4), r;

		memcpy(c, buf, len);
		for (int k = 0; k < flips; k++) {
			size_t at = it % 2 ? kvp_test_xorshift(&seed) % head :
					     kvp_test_xorshift(&seed) % len;

			c[at] ^= (uint8_t)(1 + kvp_test_xorshift(&seed) % 255);
		}
		err[0] = 0;
		r = kvp_model_open_mem(&m, c, len, err, sizeof(err));
		if (r) {
			assert_true(r == -EBADMSG || r == -ENOTSUP);
			assert_true(err[0] != 0);
			refused++;
		} else {
			struct kvp_tokenizer *t = NULL;
			struct kvp_fwd *f;
			struct kvp_kv_view kv = { 0 };
			struct kvp_model_shape sh;
			uint32_t table[1] = { 0 };
			int32_t ids[16];
			const struct kvp_model_hparams *hp = kvp_model_hparams(m);
			float *lg = malloc(hp->n_vocab * sizeof(float));

			loaded++;
			if (kvp_tokenizer_new(&t, m, err, sizeof(err)) == 0) {
				int n = kvp_tokenizer_encode(t, "hi!", 3, ids, 16);

				assert_true(n >= 0 && n <= 5);
				kvp_tokenizer_free(t);
			}
			kvp_model_kv_shape(m, KVP_DTYPE_F32, 4, &sh);
			assert_int_equal(kvp_geom_init(&kv.geom, &sh), 0);
			kv.n_blocks = 1;
			kv.base = aligned_alloc(4096, kv.geom.block_stride);
			assert_int_equal(kvp_fwd_new(&f, m,
						     &(struct kvp_fwd_opts){ .n_threads = 1,
									     .max_chunk = 4,
									     .max_batch = 1 }),
					 0);
			int32_t toks[3] = { 1, 5, (int32_t)(hp->n_vocab - 1) };
			assert_int_equal(kvp_fwd_prefill(f, &kv, table, 1, 0, toks, 3, lg, 0), 0);
			kvp_fwd_free(f);
			free(kv.base);
			free(lg);
			kvp_model_close(m);
		}
		free(c);
	}
	print_message("byte flips, %s file: %d loaded, %d refused\n",
		      type < KVP_GGML_TYPE__COUNT ? kvp_ggml_type_name(type) : "q4_k_m", loaded,
		      refused);
	assert_true(refused > iters / 30);
	assert_true(loaded > iters / 30);
	free(buf);
}

static void test_random_byte_flips(void **state)
{
	/* f16 (3000 copies), and a file of every other layout (700 or 300 each) */
	byte_flips(KVP_GGML_F16, 3000);
	byte_flips(KVP_GGML_Q8_0, 700);
	byte_flips(KVP_GGML_Q4_0, 700);
	byte_flips(KVP_GGML_Q5_1, 700);
	byte_flips(KVP_MKMODEL_Q4_K_M, 700);
	byte_flips(KVP_GGML_Q3_K, 700);
	byte_flips(KVP_GGML_BF16, 300);
	byte_flips(KVP_GGML_Q4_1, 300);
	byte_flips(KVP_GGML_Q5_0, 300);
	byte_flips(KVP_GGML_Q2_K, 300);
	byte_flips(KVP_GGML_Q5_K, 300);
	byte_flips(KVP_GGML_Q6_K, 300);
}

static void test_unaligned_tensors_are_copied(void **state)
{
	/*
	 * GGUF allows general.alignment = 1 and a caller's buffer may start anywhere: files
	 * whose every tensor starts at an odd address (the whole buffer one byte off) load,
	 * their tensors copied to aligned memory, and give the same logits as the aligned
	 * file (under UBSan a misaligned read would abort)
	 */
	static const uint32_t types[] = { KVP_GGML_F32, KVP_GGML_F16, KVP_GGML_Q4_0,
					  KVP_MKMODEL_Q4_K_M };

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		size_t len;
		uint8_t *buf = small_file_of(&len, types[i], 5), *odd = malloc(len + 1);
		struct kvp_model *a, *b;
		float *la, *lb;
		char err[256];

		memcpy(odd + 1, buf, len);
		assert_int_equal(kvp_model_open_mem(&a, buf, len, err, sizeof(err)), 0);
		if (kvp_model_open_mem(&b, odd + 1, len, err, sizeof(err)))
			fail_msg("unaligned file %zu: %s", i, err);
		assert_int_equal(kvp_model_info(a)->copied_bytes, 0);
		assert_true(kvp_model_info(b)->copied_bytes > 0);
		la = malloc(kvp_model_hparams(a)->n_vocab * 4);
		lb = malloc(kvp_model_hparams(a)->n_vocab * 4);
		last_logits(a, la);
		last_logits(b, lb);
		assert_memory_equal(la, lb, kvp_model_hparams(a)->n_vocab * 4);
		kvp_model_close(a);
		kvp_model_close(b);
		free(la);
		free(lb);
		free(odd);
		free(buf);
	}
}

static void test_quantized_truncation_and_misalignment(void **state)
{
	/*
	 * a Q4_K_M file cut inside its tensor data at every 61st byte, and one whose last
	 * tensor's offset is moved off the file's alignment, are refused with a message
	 * naming the tensor; the whole file loads
	 */
	size_t len;
	uint8_t *buf = small_file_of(&len, KVP_MKMODEL_Q4_K_M, 4);
	struct kvp_gguf *g;
	struct kvp_model *m;
	uint64_t head, off;
	char err[256];
	uint8_t *p;

	assert_int_equal(kvp_gguf_parse(&g, buf, len, NULL, 0), 0);
	head = g->data_off;
	kvp_gguf_close(g);
	for (size_t n = head; n < len; n += 61) {
		err[0] = 0;
		assert_int_equal(kvp_model_open_mem(&m, buf, n, err, sizeof(err)), -EBADMSG);
		assert_non_null(strstr(err, "tensor '"));
	}
	assert_int_equal(kvp_model_open_mem(&m, buf, len, err, sizeof(err)), 0);
	kvp_model_close(m);
	/* output.weight's info ends with its type (u32) then its offset (u64) */
	p = memmem(buf, head, "output.weight", strlen("output.weight"));
	assert_non_null(p);
	p += strlen("output.weight") + 4 + 2 * 8 + 4;
	memcpy(&off, p, 8);
	off += 2;
	memcpy(p, &off, 8);
	err[0] = 0;
	assert_int_equal(kvp_model_open_mem(&m, buf, len, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "output.weight"));
	assert_non_null(strstr(err, "misaligned"));
	free(buf);
}

/* Replace the first @from after @key in @buf with @to (same length). */
static void patch_after(uint8_t *buf, size_t len, const char *key, const char *from, const char *to)
{
	uint8_t *k = memmem(buf, len, key, strlen(key));
	uint8_t *f;

	assert_non_null(k);
	f = memmem(k, len - (k - buf), from, strlen(from));
	assert_non_null(f);
	memcpy(f, to, strlen(to));
}

static void test_refusals_name_the_problem(void **state)
{
	/* another architecture, a missing tensor, a bad head count: refused, named */
	size_t len;
	uint8_t *buf = small_file(&len, KVP_GGML_F32, 4);
	uint8_t *c = malloc(len);
	struct kvp_model *m;
	char err[256];

	memcpy(c, buf, len);
	patch_after(c, len, "general.architecture", "llama", "gemma");
	assert_int_equal(kvp_model_open_mem(&m, c, len, err, sizeof(err)), -ENOTSUP);
	assert_non_null(strstr(err, "gemma"));
	assert_non_null(strstr(err, "qwen2")); /* the supported list */

	memcpy(c, buf, len);
	patch_after(c, len, "tokenizer.ggml.add_eos_token", "output_norm.weight",
		    "output_nXrm.weight");
	assert_int_equal(kvp_model_open_mem(&m, c, len, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "output_norm.weight"));

	memcpy(c, buf, len);
	{ /* head_count 2 -> 3: 32 is not divisible by 3 */
		uint8_t *k = memmem(c, len, "llama.attention.head_count", 26);

		assert_non_null(k);
		assert_int_equal(k[26 + 4], 2);
		k[26 + 4] = 3;
	}
	assert_int_equal(kvp_model_open_mem(&m, c, len, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "heads"));

	memcpy(c, buf, len);
	patch_after(c, len, "tokenizer.ggml.model", "llama", "gpt2x");
	assert_int_equal(kvp_model_open_mem(&m, c, len, err, sizeof(err)), 0);
	{
		struct kvp_tokenizer *t;

		assert_int_equal(kvp_tokenizer_new(&t, m, err, sizeof(err)), -ENOTSUP);
	}
	kvp_model_close(m);
	free(c);
	free(buf);
}

static void test_names_given_twice_refused(void **state)
{
	/* a tensor name or a metadata key given twice: refused, named (a reader taking the
	 * first and one taking the last would run different models) */
	size_t len;
	uint8_t *buf = small_file(&len, KVP_GGML_F32, 5);
	uint8_t *c = malloc(len);
	struct kvp_gguf *g;
	char err[256];

	assert_non_null(c);
	memcpy(c, buf, len);
	patch_after(c, len, "blk.0.attn_k.weight", "attn_k", "attn_q");
	assert_int_equal(kvp_gguf_parse(&g, c, len, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "tensor 'blk.0.attn_q.weight' appears twice"));

	memcpy(c, buf, len);
	patch_after(c, len, "general.file_type", "file_type", "alignment");
	assert_int_equal(kvp_gguf_parse(&g, c, len, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "metadata key 'general.alignment' appears twice"));

	assert_int_equal(kvp_gguf_parse(&g, buf, len, err, sizeof(err)), 0);
	kvp_gguf_close(g);
	free(c);
	free(buf);
}

static void test_hparams_from_metadata(void **state)
{
	/*
	 * every llama.* key reaches the hyper-parameters (rope base and rms epsilon too), and
	 * a model that differs only in rope base has another fingerprint
	 */
	struct kvp_mkmodel_opts o;
	struct kvp_model *a, *b;
	const struct kvp_model_hparams *hp;
	void *ba, *bb;
	size_t la, lb;

	assert_int_equal(kvp_mkmodel_preset(&o, "tiny"), 0);
	o.n_embd = 96;
	o.n_heads = 6;
	o.n_kv_heads = 2;
	o.n_layers = 3;
	o.n_ff = 80;
	o.n_ctx = 777;
	o.rope_base = 500000.0f;
	o.rms_eps = 1e-6f;
	assert_int_equal(kvp_mkmodel_write_mem(&ba, &la, &o, NULL, 0), 0);
	o.rope_base = 10000.0f;
	assert_int_equal(kvp_mkmodel_write_mem(&bb, &lb, &o, NULL, 0), 0);
	assert_int_equal(kvp_model_open_mem(&a, ba, la, NULL, 0), 0);
	assert_int_equal(kvp_model_open_mem(&b, bb, lb, NULL, 0), 0);
	hp = kvp_model_hparams(a);
	assert_int_equal(hp->n_vocab, 259);
	assert_int_equal(hp->n_embd, 96);
	assert_int_equal(hp->n_heads, 6);
	assert_int_equal(hp->n_kv_heads, 2);
	assert_int_equal(hp->head_dim, 16);
	assert_int_equal(hp->n_rot, 16);
	assert_int_equal(hp->n_layers, 3);
	assert_int_equal(hp->n_ff, 80);
	assert_int_equal(hp->n_ctx_train, 777);
	assert_true(hp->rope_base == 500000.0f);
	assert_true(hp->rms_eps == 1e-6f);
	assert_int_equal(hp->tied_output, 0);
	assert_true(kvp_model_hparams(b)->rope_base == 10000.0f);
	assert_memory_not_equal(kvp_model_fingerprint(a), kvp_model_fingerprint(b),
				KVP_MODEL_FP_BYTES);
	kvp_model_close(a);
	kvp_model_close(b);
	free(ba);
	free(bb);
}

/* Offset of the type field of tensor info @name (2-D) in @buf. */
static size_t tensor_type_at(const uint8_t *buf, size_t len, const char *name)
{
	const struct kvp_gguf_tensor *t;
	struct kvp_gguf *g;
	const uint8_t *p;
	size_t at;

	assert_int_equal(kvp_gguf_parse(&g, buf, len, NULL, 0), 0);
	t = kvp_gguf_tensor(g, name);
	assert_non_null(t);
	assert_int_equal(t->n_dims, 2);
	p = (const uint8_t *)t->name.p; /* name, then n_dims, ne[0], ne[1], type */
	at = (size_t)(p - buf) + t->name.len + 4 + 16;
	kvp_gguf_close(g);
	return at;
}

static void test_format_details(void **state)
{
	/*
	 * a quantized file carries general.quantization_version (the spec requires it); a
	 * tensor of a type we cannot compute with is refused naming it and its type; a
	 * byte-swapped version is reported as big-endian; an unknown version by number
	 */
	size_t qlen, len, at;
	uint8_t *buf = small_file(&qlen, KVP_GGML_Q8_0, 5),
		*f32 = small_file(&len, KVP_GGML_F32, 5);
	struct kvp_gguf *g;
	struct kvp_model *m;
	uint64_t v;
	uint32_t type = KVP_GGML_IQ4_NL; /* no kernels; 32 per block, so the extent fits */
	char err[256];

	assert_int_equal(kvp_gguf_parse(&g, buf, qlen, NULL, 0), 0);
	assert_int_equal(kvp_gguf_get_uint(g, "general.quantization_version", UINT32_MAX, &v), 0);
	assert_int_equal(v, 2);
	assert_int_equal(kvp_gguf_get_uint(g, "general.file_type", UINT32_MAX, &v), 0);
	assert_int_equal(v, 7); /* MOSTLY_Q8_0 */
	kvp_gguf_close(g);
	free(buf);

	at = tensor_type_at(f32, len, "blk.0.ffn_up.weight");
	memcpy(f32 + at, &type, 4);
	assert_int_equal(kvp_model_open_mem(&m, f32, len, err, sizeof(err)), -ENOTSUP);
	assert_non_null(strstr(err, "blk.0.ffn_up.weight"));
	assert_non_null(strstr(err, "iq4_nl"));
	assert_non_null(strstr(err, "q4_k")); /* the supported list */

	memcpy(f32 + 4, "\0\0\0\3", 4);
	assert_int_equal(kvp_model_open_mem(&m, f32, len, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "big-endian"));
	memcpy(f32 + 4, "\1\0\0\0", 4);
	assert_int_equal(kvp_model_open_mem(&m, f32, len, err, sizeof(err)), -EBADMSG);
	assert_non_null(strstr(err, "version 1"));
	free(f32);
}

/* One scalar metadata value and what each getter must make of it (E = -EBADMSG). */
struct scalar_case {
	uint32_t type;
	uint8_t val[8]; /* as stored: little-endian */
	int r_uint;	/* kvp_gguf_get_uint(..., UINT64_MAX) */
	uint64_t u;	/* its value when 0 */
	int r_f32;	/* kvp_gguf_get_f32 */
	int r_bool;	/* kvp_gguf_get_bool */
	int b;		/* its value when 0 */
	double f;	/* kvp_gguf_kv_f64's value (it takes every scalar) */
};

#define E (-EBADMSG)

static void test_scalar_getters_every_type(void **state)
{
	/*
	 * every scalar metadata type reads back its value through each getter that takes it
	 * (signed, unsigned, 8 to 64 bits, floats, BOOL), and the others refuse it: a
	 * negative integer is no uint or bool, a float no integer, a BOOL no uint;
	 * kvp_gguf_kv_f64() takes every scalar and refuses a string
	 */
	static const struct scalar_case cases[] = {
		{ KVP_GGUF_U8, { 200 }, 0, 200, E, 0, 1, 200 },
		{ KVP_GGUF_U8, { 0 }, 0, 0, E, 0, 0, 0 },
		{ KVP_GGUF_I8, { 0xfb }, E, 0, E, E, 0, -5 },
		{ KVP_GGUF_I8, { 7 }, 0, 7, E, 0, 1, 7 },
		{ KVP_GGUF_U16, { 0x60, 0xea }, 0, 60000, E, 0, 1, 60000 },
		{ KVP_GGUF_I16, { 0xd4, 0xfe }, E, 0, E, E, 0, -300 },
		{ KVP_GGUF_U32, { 0x00, 0x28, 0x6b, 0xee }, 0, 4000000000u, E, 0, 1, 4e9 },
		{ KVP_GGUF_I32, { 0x90, 0xee, 0xfe, 0xff }, E, 0, E, E, 0, -70000 },
		{ KVP_GGUF_I32, { 0x70, 0x11, 0x01, 0x00 }, 0, 70000, E, 0, 1, 70000 },
		{ KVP_GGUF_U64, { 0, 0, 0, 0, 0, 0, 0, 0x10 }, 0, 1ull << 60, E, 0, 1, 0x1p60 },
		{ KVP_GGUF_I64, { 0, 0, 0, 0, 0, 0xff, 0xff, 0xff }, E, 0, E, E, 0, -0x1p40 },
		{ KVP_GGUF_F32, { 0, 0, 0xc0, 0x3f }, E, 0, 0, E, 0, 1.5 },
		{ KVP_GGUF_F64, { 0, 0, 0, 0, 0, 0, 0x02, 0xc0 }, E, 0, 0, E, 0, -2.25 },
		{ KVP_GGUF_BOOL, { 1 }, E, 0, E, 0, 1, 1 },
		{ KVP_GGUF_BOOL, { 0 }, E, 0, E, 0, 0, 0 },
	};
	static const uint8_t str[] = { 2, 0, 0, 0, 0, 0, 0, 0, 'h', 'i' };
	struct kvp_gguf_kv kv = { .key = { "k", 1 } };
	struct kvp_gguf g = { .n_kv = 1, .kv = &kv };

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct scalar_case *c = &cases[i];
		uint64_t u = 12345;
		float f32 = 0;
		double f = 0;
		int b = -1;

		kv.type = c->type;
		kv.val = c->val;
		kv.val_bytes = sizeof(c->val);
		assert_int_equal(kvp_gguf_get_uint(&g, "k", UINT64_MAX, &u), c->r_uint);
		if (!c->r_uint)
			assert_true(u == c->u);
		assert_int_equal(kvp_gguf_get_f32(&g, "k", &f32), c->r_f32);
		if (!c->r_f32)
			assert_true(f32 == (float)c->f);
		assert_int_equal(kvp_gguf_get_bool(&g, "k", &b), c->r_bool);
		if (!c->r_bool)
			assert_int_equal(b, c->b);
		assert_int_equal(kvp_gguf_kv_f64(&kv, &f), 0);
		assert_true(f == c->f);
	}
	kv.type = KVP_GGUF_STRING;
	kv.val = str;
	kv.val_bytes = sizeof(str);
	assert_int_equal(kvp_gguf_kv_f64(&kv, &(double){ 0 }), -EBADMSG);
	assert_int_equal(kvp_gguf_get_uint(&g, "k", UINT64_MAX, &(uint64_t){ 0 }), -EBADMSG);
	assert_int_equal(kvp_gguf_get_bool(&g, "k", &(int){ 0 }), -EBADMSG);
	assert_int_equal(kvp_gguf_get_f32(&g, "nope", &(float){ 0 }), -ENOENT);
}

#undef E

static void test_open_file_and_fingerprint(void **state)
{
	/* a file on disk opens; a missing one gives -ENOENT; fingerprints follow content */
	char dir[256], path[512], err[256];
	struct kvp_mkmodel_opts o;
	struct kvp_model *a, *b, *c, *d;

	assert_int_equal(kvp_test_tmpdir(dir, sizeof(dir)), 0);
	snprintf(path, sizeof(path), "%s/m.gguf", dir);
	assert_int_equal(kvp_model_open(&a, path, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "m.gguf"));
	assert_int_equal(kvp_mkmodel_preset(&o, "tiny"), 0);
	assert_int_equal(kvp_mkmodel_write(path, &o, err, sizeof(err)), 0);
	assert_int_equal(kvp_model_open(&a, path, err, sizeof(err)), 0);
	assert_int_equal(kvp_model_open(&b, path, err, sizeof(err)), 0);
	assert_string_equal(kvp_model_name(a), "kvpool-tiny");
	assert_int_equal(kvp_model_info(a)->n_converted, 0);
	assert_memory_equal(kvp_model_fingerprint(a), kvp_model_fingerprint(b), KVP_MODEL_FP_BYTES);
	o.seed++;
	assert_int_equal(kvp_mkmodel_write(path, &o, err, sizeof(err)), 0);
	assert_int_equal(kvp_model_open(&c, path, err, sizeof(err)), 0);
	assert_memory_not_equal(kvp_model_fingerprint(a), kvp_model_fingerprint(c),
				KVP_MODEL_FP_BYTES);
	o.seed--;
	o.type = KVP_GGML_F16;
	assert_int_equal(kvp_mkmodel_write(path, &o, err, sizeof(err)), 0);
	assert_int_equal(kvp_model_open(&d, path, err, sizeof(err)), 0);
	assert_int_equal(kvp_model_info(d)->n_converted, 0); /* used in place */
	assert_int_equal(kvp_model_info(d)->type_tensors[KVP_GGML_F16], 2 * 7 + 2);
	assert_memory_not_equal(kvp_model_fingerprint(a), kvp_model_fingerprint(d),
				KVP_MODEL_FP_BYTES);
	kvp_model_close(a);
	kvp_model_close(b);
	kvp_model_close(c);
	kvp_model_close(d);
	kvp_test_rmtree(dir);
}

static void test_weights_copied_equal_mapped(void **state)
{
	/*
	 * KVP_MODEL_WEIGHTS_COPY gives the same weights, bit for bit, at other addresses: a
	 * 2 MiB-aligned arena outside the file mapping, counted in the info; MAP uses the
	 * file in place and allocates nothing; an unknown placement is refused.
	 */
	char dir[256], path[512], err[256];
	struct kvp_mkmodel_opts o;
	struct kvp_model *a, *b, *c;
	const struct kvp_weights *wa, *wb;
	const struct kvp_model_hparams *hp;
	const struct kvp_model_info *ia, *ib;
	size_t e, qd, kvd;

	assert_int_equal(kvp_test_tmpdir(dir, sizeof(dir)), 0);
	snprintf(path, sizeof(path), "%s/m.gguf", dir);
	assert_int_equal(kvp_mkmodel_preset(&o, "tiny"), 0);
	assert_int_equal(kvp_mkmodel_write(path, &o, err, sizeof(err)), 0);
	assert_int_equal(kvp_model_open_opts(&a, path,
					     &(struct kvp_model_opts){
						     .weights = KVP_MODEL_WEIGHTS_MAP },
					     err, sizeof(err)),
			 0);
	assert_int_equal(kvp_model_open_opts(&b, path,
					     &(struct kvp_model_opts){
						     .weights = KVP_MODEL_WEIGHTS_COPY },
					     err, sizeof(err)),
			 0);
	assert_int_equal(kvp_model_open_opts(&c, path, &(struct kvp_model_opts){ .weights = 7 },
					     err, sizeof(err)),
			 -EINVAL);
	assert_null(c);
	assert_non_null(strstr(err, "placement"));
	ia = kvp_model_info(a);
	ib = kvp_model_info(b);
	assert_int_equal(ia->weights_copied, 0);
	assert_int_equal(ia->copied_bytes, 0);
	assert_int_equal(ia->arena_bytes, 0);
	assert_int_equal(ib->weights_copied, 1);
	assert_true(ib->copied_bytes >= ib->weight_bytes);
	assert_true(ib->arena_bytes >= ib->copied_bytes);
	assert_int_equal(ib->arena_bytes % (2u << 20), 0);
	assert_int_equal(ib->n_converted, 0);
	assert_memory_equal(kvp_model_fingerprint(a), kvp_model_fingerprint(b), KVP_MODEL_FP_BYTES);
	hp = kvp_model_hparams(a);
	wa = kvp_model_weights(a);
	wb = kvp_model_weights(b);
	e = hp->n_embd;
	qd = (size_t)hp->n_heads * hp->head_dim;
	kvd = (size_t)hp->n_kv_heads * hp->head_dim;
	assert_int_equal((uintptr_t)wb->tok_embd.data % (2u << 20), 0);
	assert_ptr_not_equal(wa->tok_embd.data, wb->tok_embd.data);
	assert_memory_equal(wa->tok_embd.data, wb->tok_embd.data, (size_t)hp->n_vocab * e * 4);
	assert_memory_equal(wa->output.data, wb->output.data, (size_t)hp->n_vocab * e * 4);
	assert_memory_equal(wa->output_norm.data, wb->output_norm.data, e * 4);
	for (uint32_t l = 0; l < hp->n_layers; l++) {
		const struct kvp_layer_weights *la = &wa->layers[l], *lb = &wb->layers[l];

		assert_ptr_not_equal(la->wq.data, lb->wq.data);
		assert_memory_equal(la->attn_norm.data, lb->attn_norm.data, e * 4);
		assert_memory_equal(la->wq.data, lb->wq.data, qd * e * 4);
		assert_memory_equal(la->wk.data, lb->wk.data, kvd * e * 4);
		assert_memory_equal(la->wv.data, lb->wv.data, kvd * e * 4);
		assert_memory_equal(la->wo.data, lb->wo.data, e * qd * 4);
		assert_memory_equal(la->ffn_norm.data, lb->ffn_norm.data, e * 4);
		assert_memory_equal(la->w_gate.data, lb->w_gate.data, hp->n_ff * e * 4);
		assert_memory_equal(la->w_up.data, lb->w_up.data, hp->n_ff * e * 4);
		assert_memory_equal(la->w_down.data, lb->w_down.data, e * hp->n_ff * 4);
	}
	/* the weights stay readable after the file's pages were dropped and it is gone */
	kvp_test_rmtree(dir);
	assert_memory_equal(wa->layers[0].wq.data, wb->layers[0].wq.data, qd * e * 4);
	kvp_model_close(a);
	kvp_model_close(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_small_model),
		cmocka_unit_test(test_every_truncation_fails_cleanly),
		cmocka_unit_test(test_random_byte_flips),
		cmocka_unit_test(test_quantized_truncation_and_misalignment),
		cmocka_unit_test(test_unaligned_tensors_are_copied),
		cmocka_unit_test(test_refusals_name_the_problem),
		cmocka_unit_test(test_names_given_twice_refused),
		cmocka_unit_test(test_hparams_from_metadata),
		cmocka_unit_test(test_format_details),
		cmocka_unit_test(test_scalar_getters_every_type),
		cmocka_unit_test(test_open_file_and_fingerprint),
		cmocka_unit_test(test_weights_copied_equal_mapped),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
