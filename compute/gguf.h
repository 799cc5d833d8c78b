/* SPDX-License-Identifier: MIT */
/*
 * gguf.h - a bounds-checked reader of GGUF v2/v3 files over a read-only mapping.
 *
 * kvp_gguf_open() maps the file and parses the header, every metadata key/value and
 * every tensor info up front, checking each count, string length, array extent and
 * tensor extent against the file size (with overflow-checked arithmetic).  After a
 * successful parse every pointer it hands out lies inside the file, so callers may read
 * values without further checks; a malformed file fails the parse with a message
 * naming the offset and the item at fault.  Nothing is copied: strings and tensor data
 * point into the mapping.  Immutable after parse; any thread may read it.
 * When a key or tensor name appears twice, the first one wins.
 */
#ifndef KVP_COMPUTE_GGUF_H
#define KVP_COMPUTE_GGUF_H

#include <stddef.h>
#include <stdint.h>

#define KVP_GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define KVP_GGUF_DEFAULT_ALIGN 32u
#define KVP_GGUF_MAX_DIMS 4

/*
 * GGML tensor types (the values GGUF files carry).  The reader knows the block size of
 * each so any file's tensor extents can be checked; which of them the engine computes
 * with is compute/kernels/quant.h's business.  Gaps are types ggml has retired.
 */
enum kvp_ggml_type {
	KVP_GGML_F32 = 0,
	KVP_GGML_F16 = 1,
	KVP_GGML_Q4_0 = 2,
	KVP_GGML_Q4_1 = 3,
	KVP_GGML_Q5_0 = 6,
	KVP_GGML_Q5_1 = 7,
	KVP_GGML_Q8_0 = 8,
	KVP_GGML_Q8_1 = 9,
	KVP_GGML_Q2_K = 10,
	KVP_GGML_Q3_K = 11,
	KVP_GGML_Q4_K = 12,
	KVP_GGML_Q5_K = 13,
	KVP_GGML_Q6_K = 14,
	KVP_GGML_Q8_K = 15,
	KVP_GGML_IQ2_XXS = 16,
	KVP_GGML_IQ2_XS = 17,
	KVP_GGML_IQ3_XXS = 18,
	KVP_GGML_IQ1_S = 19,
	KVP_GGML_IQ4_NL = 20,
	KVP_GGML_IQ3_S = 21,
	KVP_GGML_IQ2_S = 22,
	KVP_GGML_IQ4_XS = 23,
	KVP_GGML_I8 = 24,
	KVP_GGML_I16 = 25,
	KVP_GGML_I32 = 26,
	KVP_GGML_I64 = 27,
	KVP_GGML_F64 = 28,
	KVP_GGML_IQ1_M = 29,
	KVP_GGML_BF16 = 30,
	KVP_GGML_TQ1_0 = 34,
	KVP_GGML_TQ2_0 = 35,
	KVP_GGML_MXFP4 = 39,
	KVP_GGML_TYPE__COUNT = 40
};

/* Metadata value types (GGUF spec). */
enum kvp_gguf_vtype {
	KVP_GGUF_U8 = 0,
	KVP_GGUF_I8 = 1,
	KVP_GGUF_U16 = 2,
	KVP_GGUF_I16 = 3,
	KVP_GGUF_U32 = 4,
	KVP_GGUF_I32 = 5,
	KVP_GGUF_F32 = 6,
	KVP_GGUF_BOOL = 7,
	KVP_GGUF_STRING = 8,
	KVP_GGUF_ARRAY = 9,
	KVP_GGUF_U64 = 10,
	KVP_GGUF_I64 = 11,
	KVP_GGUF_F64 = 12,
	KVP_GGUF_VTYPE__COUNT
};

/* A string inside the file: not NUL-terminated. */
struct kvp_gguf_str {
	const char *p;
	uint64_t len;
};

/**
 * struct kvp_gguf_kv - one metadata entry
 * @key:      its name
 * @type:     enum kvp_gguf_vtype
 * @arr_type: element type when @type is ARRAY
 * @arr_n:    element count when @type is ARRAY
 * @val:      first byte of the value (for ARRAY: of the first element), in the file
 * @val_bytes: bytes the value spans from @val
 */
struct kvp_gguf_kv {
	struct kvp_gguf_str key;
	uint32_t type;
	uint32_t arr_type;
	uint64_t arr_n;
	const uint8_t *val;
	uint64_t val_bytes;
};

/**
 * struct kvp_gguf_tensor - one tensor info, validated
 * @name:    its name
 * @n_dims:  1 .. KVP_GGUF_MAX_DIMS
 * @ne:      elements per dimension, ne[0] innermost (a row); unused ones are 1
 * @type:    GGML type
 * @n_elems: product of ne
 * @n_bytes: bytes of data
 * @data:    first byte, inside the file, aligned to the file's alignment
 */
struct kvp_gguf_tensor {
	struct kvp_gguf_str name;
	uint32_t n_dims;
	uint64_t ne[KVP_GGUF_MAX_DIMS];
	uint32_t type;
	uint64_t n_elems;
	uint64_t n_bytes;
	const void *data;
};

/**
 * struct kvp_gguf - a parsed file
 * @base, @size: the whole file
 * @version:     2 or 3
 * @alignment:   general.alignment (power of two), else 32
 * @data_off:    start of the tensor data section
 */
struct kvp_gguf {
	const uint8_t *base;
	size_t size;
	uint32_t version;
	uint32_t alignment;
	uint64_t n_kv;
	uint64_t n_tensors;
	struct kvp_gguf_kv *kv;
	struct kvp_gguf_tensor *tensors;
	uint64_t data_off;
	int mapped; /* base came from mmap and is unmapped by close */
};

/**
 * kvp_gguf_open() - map @path read-only and parse it
 * @out:  out; freed with kvp_gguf_close()
 * @err, @errlen: on failure, a reason such as
 *        "gguf: tensor 'blk.0.attn_q.weight' data [4096, 69632) past end of file (40000)"
 * Return: 0, -errno from open/mmap, -EBADMSG for a malformed file, -ENOMEM.
 */
int kvp_gguf_open(struct kvp_gguf **out, const char *path, char *err, size_t errlen);

/* kvp_gguf_parse() - as kvp_gguf_open() over a caller's buffer (borrowed). */
int kvp_gguf_parse(struct kvp_gguf **out, const void *buf, size_t len, char *err, size_t errlen);

/* kvp_gguf_close() - NULL is a no-op. */
void kvp_gguf_close(struct kvp_gguf *g);

/* kvp_gguf_find() - the entry called @key, or NULL. */
const struct kvp_gguf_kv *kvp_gguf_find(const struct kvp_gguf *g, const char *key);

/*
 * Typed getters.  Return 0; -ENOENT when @key is absent; -EBADMSG when its type does not
 * fit (a negative or too-large integer, a non-string, ...).
 * kvp_gguf_get_uint() accepts any integer type; kvp_gguf_get_f32() accepts F32 and F64;
 * kvp_gguf_get_bool() accepts BOOL and integers.
 */
int kvp_gguf_get_uint(const struct kvp_gguf *g, const char *key, uint64_t max, uint64_t *out);
int kvp_gguf_get_f32(const struct kvp_gguf *g, const char *key, float *out);
int kvp_gguf_get_bool(const struct kvp_gguf *g, const char *key, int *out);
int kvp_gguf_get_str(const struct kvp_gguf *g, const char *key, struct kvp_gguf_str *out);

/*
 * kvp_gguf_kv_f64() - the value of @kv, any scalar number or BOOL (0 or 1), as a double
 * (64-bit integers beyond 2^53 rounded).  Decoded by the same code as the getters above.
 * Return: 0, or -EBADMSG for a string or an array.
 */
int kvp_gguf_kv_f64(const struct kvp_gguf_kv *kv, double *out);

/*
 * kvp_gguf_get_arr() - the ARRAY called @key with elements of @elem_type
 * @out: the entry.  Return 0, -ENOENT, or -EBADMSG (not an array of that type).
 */
int kvp_gguf_get_arr(const struct kvp_gguf *g, const char *key, uint32_t elem_type,
		     const struct kvp_gguf_kv **out);

/*
 * kvp_gguf_str_next() - walk a validated string array: reads the string at *@p and
 * advances *@p.  Only for arrays of STRING returned by kvp_gguf_get_arr(), at most
 * arr_n times (the parse checked every length).
 */
struct kvp_gguf_str kvp_gguf_str_next(const uint8_t **p);

/* kvp_gguf_tensor() - the tensor called @name, or NULL. */
const struct kvp_gguf_tensor *kvp_gguf_tensor(const struct kvp_gguf *g, const char *name);

/* kvp_gguf_str_eq() - does @s equal the NUL-terminated @c? */
int kvp_gguf_str_eq(struct kvp_gguf_str s, const char *c);

/*
 * kvp_ggml_type_name() - "f32", "f16", "q8_0", ... or NULL for a type this reader does
 * not know.  kvp_ggml_row_bytes() - bytes of a row of @n elements of @type, or 0 when
 * @n is not a whole number of the type's blocks or the type is unknown.
 * kvp_ggml_block_elems() - elements per block of @type (1 for plain types), 0 if unknown.
 */
const char *kvp_ggml_type_name(uint32_t type);
uint64_t kvp_ggml_row_bytes(uint32_t type, uint64_t n);
uint32_t kvp_ggml_block_elems(uint32_t type);

#endif /* KVP_COMPUTE_GGUF_H */
