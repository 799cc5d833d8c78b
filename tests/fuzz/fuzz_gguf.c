/* SPDX-License-Identifier: MIT */
/*
 * fuzz_gguf.c - the GGUF reader (compute/gguf.h): header, metadata and tensor table,
 * then every entry read back as its consumers do (typed getters, string arrays walked,
 * each entry and tensor found by its name - and no other: names are unique - and each
 * tensor's first and last byte touched), then the model binder
 * (compute/model.h: the llama metadata, shapes and tensor types) over the same bytes.
 */
#include <string.h>

#include "compute/gguf.h"
#include "compute/model.h"

#include "fuzz.h"

static void walk(const struct kvp_gguf *g)
{
	char key[256];

	for (uint64_t i = 0; i < g->n_kv; i++) {
		const struct kvp_gguf_kv *kv = &g->kv[i], *arr;
		struct kvp_gguf_str s;
		uint64_t u;
		double d;
		float f;
		int b;

		kvp_gguf_kv_f64(kv, &d);
		/* a name with a NUL is reachable by no C string: only its own length */
		if (kv->key.len >= sizeof(key) || memchr(kv->key.p, 0, kv->key.len))
			continue;
		memcpy(key, kv->key.p, kv->key.len);
		key[kv->key.len] = 0;
		if (kvp_gguf_find(g, key) != kv)
			__builtin_trap(); /* one entry per key */
		kvp_gguf_get_uint(g, key, UINT64_MAX, &u);
		kvp_gguf_get_f32(g, key, &f);
		kvp_gguf_get_bool(g, key, &b);
		if (!kvp_gguf_get_str(g, key, &s) && s.len)
			fuzz_sink ^= (uint8_t)(s.p[0] ^ s.p[s.len - 1]);
		if (!kvp_gguf_get_arr(g, key, KVP_GGUF_STRING, &arr)) {
			const uint8_t *p = arr->val;

			for (uint64_t k = 0; k < arr->arr_n; k++) {
				s = kvp_gguf_str_next(&p);
				if (s.len)
					fuzz_sink ^= (uint8_t)(s.p[0] ^ s.p[s.len - 1]);
			}
		}
	}
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		const struct kvp_gguf_tensor *t = &g->tensors[i];

		if (t->name.len >= sizeof(key) || memchr(t->name.p, 0, t->name.len))
			continue;
		memcpy(key, t->name.p, t->name.len);
		key[t->name.len] = 0;
		if (kvp_gguf_tensor(g, key) != t)
			__builtin_trap(); /* the tensor the table lists is the one its name finds */
		kvp_ggml_type_name(t->type);
		if (t->n_bytes)
			fuzz_sink ^= ((const uint8_t *)t->data)[0] ^
				     ((const uint8_t *)t->data)[t->n_bytes - 1];
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvp_gguf *g = NULL;
	struct kvp_model *m = NULL;
	char err[256];

	if (!kvp_gguf_parse(&g, data, size, err, sizeof(err)))
		walk(g);
	kvp_gguf_close(g);
	if (!kvp_model_open_mem(&m, data, size, err, sizeof(err)))
		kvp_model_close(m);
	return 0;
}
