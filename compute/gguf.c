/* SPDX-License-Identifier: MIT */
/*
 * gguf.c - GGUF parsing through a bounds-checked cursor.
 *
 * Every read from the file goes through struct kvp_cur (util/cursor.h), which refuses to
 * step past the end; every product of file-supplied numbers is overflow-checked; counts are bounded
 * by what the remaining bytes could possibly hold before anything is allocated.  A
 * parse either succeeds with every pointer inside the file, or fails with a message.
 * No state is shared: any thread may parse, and a parsed file is read-only.
 */
#include "compute/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/errmsg.h"
#include "util/cursor.h"

/* Sanity limits beyond the file size: a key or name longer than this is corruption. */
#define KEY_MAX 65535u
#define NAME_MAX_BYTES 4096u
#define ARRAY_DEPTH_MAX 3
#define ELEMS_MAX (1ull << 40)

static int cur_str(struct kvp_cur *c, struct kvp_gguf_str *s, uint64_t max)
{
	uint64_t len;
	const uint8_t *p;

	if (kvp_cur_le64(c, &len) || len > max || !(p = kvp_cur_take(c, len)))
		return -EBADMSG;
	s->p = (const char *)p;
	s->len = len;
	return 0;
}

/* Bytes of one scalar of metadata type @t, or 0 for STRING/ARRAY/unknown. */
static uint64_t vtype_size(uint32_t t)
{
	switch (t) {
	case KVP_GGUF_U8:
	case KVP_GGUF_I8:
	case KVP_GGUF_BOOL:
		return 1;
	case KVP_GGUF_U16:
	case KVP_GGUF_I16:
		return 2;
	case KVP_GGUF_U32:
	case KVP_GGUF_I32:
	case KVP_GGUF_F32:
		return 4;
	case KVP_GGUF_U64:
	case KVP_GGUF_I64:
	case KVP_GGUF_F64:
		return 8;
	default:
		return 0;
	}
}

/* Skip one value of type @t (arrays recursively, to @depth); -EBADMSG if it overruns. */
static int skip_value(struct kvp_cur *c, uint32_t t, int depth, uint32_t *arr_type, uint64_t *arr_n)
{
	struct kvp_gguf_str s;
	uint64_t sz = vtype_size(t), n, bytes;
	uint32_t et;

	if (sz)
		return kvp_cur_take(c, sz) ? 0 : -EBADMSG;
	if (t == KVP_GGUF_STRING)
		return cur_str(c, &s, UINT64_MAX);
	if (t != KVP_GGUF_ARRAY || depth >= ARRAY_DEPTH_MAX)
		return -EBADMSG;
	if (kvp_cur_le32(c, &et) || kvp_cur_le64(c, &n))
		return -EBADMSG;
	if (arr_type)
		*arr_type = et;
	if (arr_n)
		*arr_n = n;
	sz = vtype_size(et);
	if (sz) {
		if (__builtin_mul_overflow(n, sz, &bytes) || !kvp_cur_take(c, bytes))
			return -EBADMSG;
		return 0;
	}
	if (et != KVP_GGUF_STRING && et != KVP_GGUF_ARRAY)
		return -EBADMSG;
	/* each string or array element takes at least 8 bytes: bound n before looping */
	if (n > (c->size - c->off) / 8)
		return -EBADMSG;
	for (uint64_t i = 0; i < n; i++)
		if (skip_value(c, et, depth + 1, NULL, NULL))
			return -EBADMSG;
	return 0;
}

struct ggml_type_desc {
	const char *name;
	uint32_t block; /* elements per block */
	uint32_t bytes; /* bytes per block */
};

/* The GGML types whose sizes we know (so any file's extents can be checked). */
static const struct ggml_type_desc ggml_types[KVP_GGML_TYPE__COUNT] = {
	[KVP_GGML_F32] = { "f32", 1, 4 },
	[KVP_GGML_F16] = { "f16", 1, 2 },
	[KVP_GGML_Q4_0] = { "q4_0", 32, 18 },
	[KVP_GGML_Q4_1] = { "q4_1", 32, 20 },
	[KVP_GGML_Q5_0] = { "q5_0", 32, 22 },
	[KVP_GGML_Q5_1] = { "q5_1", 32, 24 },
	[KVP_GGML_Q8_0] = { "q8_0", 32, 34 },
	[KVP_GGML_Q8_1] = { "q8_1", 32, 36 },
	[KVP_GGML_Q2_K] = { "q2_k", 256, 84 },
	[KVP_GGML_Q3_K] = { "q3_k", 256, 110 },
	[KVP_GGML_Q4_K] = { "q4_k", 256, 144 },
	[KVP_GGML_Q5_K] = { "q5_k", 256, 176 },
	[KVP_GGML_Q6_K] = { "q6_k", 256, 210 },
	[KVP_GGML_Q8_K] = { "q8_k", 256, 292 },
	[KVP_GGML_IQ2_XXS] = { "iq2_xxs", 256, 66 },
	[KVP_GGML_IQ2_XS] = { "iq2_xs", 256, 74 },
	[KVP_GGML_IQ3_XXS] = { "iq3_xxs", 256, 98 },
	[KVP_GGML_IQ1_S] = { "iq1_s", 256, 50 },
	[KVP_GGML_IQ4_NL] = { "iq4_nl", 32, 18 },
	[KVP_GGML_IQ3_S] = { "iq3_s", 256, 110 },
	[KVP_GGML_IQ2_S] = { "iq2_s", 256, 82 },
	[KVP_GGML_IQ4_XS] = { "iq4_xs", 256, 136 },
	[KVP_GGML_I8] = { "i8", 1, 1 },
	[KVP_GGML_I16] = { "i16", 1, 2 },
	[KVP_GGML_I32] = { "i32", 1, 4 },
	[KVP_GGML_I64] = { "i64", 1, 8 },
	[KVP_GGML_F64] = { "f64", 1, 8 },
	[KVP_GGML_IQ1_M] = { "iq1_m", 256, 56 },
	[KVP_GGML_BF16] = { "bf16", 1, 2 },
	[KVP_GGML_TQ1_0] = { "tq1_0", 256, 54 },
	[KVP_GGML_TQ2_0] = { "tq2_0", 256, 66 },
	[KVP_GGML_MXFP4] = { "mxfp4", 32, 17 },
};

const char *kvp_ggml_type_name(uint32_t type)
{
	if (type >= sizeof(ggml_types) / sizeof(ggml_types[0]))
		return NULL;
	return ggml_types[type].name;
}

uint32_t kvp_ggml_block_elems(uint32_t type)
{
	return kvp_ggml_type_name(type) ? ggml_types[type].block : 0;
}

uint64_t kvp_ggml_row_bytes(uint32_t type, uint64_t n)
{
	const struct ggml_type_desc *d;

	if (!kvp_ggml_type_name(type))
		return 0;
	d = &ggml_types[type];
	if (n % d->block || n > ELEMS_MAX)
		return 0;
	return n / d->block * d->bytes;
}

int kvp_gguf_str_eq(struct kvp_gguf_str s, const char *c)
{
	size_t n = strlen(c);

	return s.len == n && memcmp(s.p, c, n) == 0;
}

static int parse_kvs(struct kvp_gguf *g, struct kvp_cur *c, char *err, size_t errlen)
{
	for (uint64_t i = 0; i < g->n_kv; i++) {
		struct kvp_gguf_kv *kv = &g->kv[i];
		size_t at = c->off, vstart;

		if (cur_str(c, &kv->key, KEY_MAX) || kvp_cur_le32(c, &kv->type)) {
			kvp_errmsg(err, errlen,
				   "gguf: metadata entry %llu truncated or bad key at offset %zu",
				   (unsigned long long)i, at);
			return -EBADMSG;
		}
		vstart = c->off;
		if (kv->type >= KVP_GGUF_VTYPE__COUNT ||
		    skip_value(c, kv->type, 0, &kv->arr_type, &kv->arr_n)) {
			kvp_errmsg(
				err, errlen,
				"gguf: metadata '%.*s' (type %u) malformed or truncated at offset %zu",
				(int)(kv->key.len > 128 ? 128 : kv->key.len), kv->key.p, kv->type,
				vstart);
			return -EBADMSG;
		}
		kv->val = c->base + vstart;
		kv->val_bytes = c->off - vstart;
		if (kv->type == KVP_GGUF_ARRAY) {
			kv->val += 12; /* element type and count precede the elements */
			kv->val_bytes -= 12;
		}
	}
	return 0;
}

static int parse_tensor_infos(struct kvp_gguf *g, struct kvp_cur *c, char *err, size_t errlen)
{
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		struct kvp_gguf_tensor *t = &g->tensors[i];
		size_t at = c->off;
		uint64_t off;

		if (cur_str(c, &t->name, NAME_MAX_BYTES) || kvp_cur_le32(c, &t->n_dims) ||
		    t->n_dims == 0 || t->n_dims > KVP_GGUF_MAX_DIMS) {
			kvp_errmsg(err, errlen,
				   "gguf: tensor info %llu truncated or bad at offset %zu",
				   (unsigned long long)i, at);
			return -EBADMSG;
		}
		t->n_elems = 1;
		for (uint32_t d = 0; d < KVP_GGUF_MAX_DIMS; d++) {
			t->ne[d] = 1;
			if (d < t->n_dims && kvp_cur_le64(c, &t->ne[d]))
				goto trunc;
			if (t->ne[d] == 0 ||
			    __builtin_mul_overflow(t->n_elems, t->ne[d], &t->n_elems) ||
			    t->n_elems > ELEMS_MAX) {
				kvp_errmsg(err, errlen, "gguf: tensor '%.*s' has a bad shape",
					   (int)(t->name.len > 128 ? 128 : t->name.len), t->name.p);
				return -EBADMSG;
			}
		}
		if (kvp_cur_le32(c, &t->type) || kvp_cur_le64(c, &off))
			goto trunc;
		if (!kvp_ggml_type_name(t->type)) {
			kvp_errmsg(err, errlen, "gguf: tensor '%.*s' has unknown type %u",
				   (int)(t->name.len > 128 ? 128 : t->name.len), t->name.p,
				   t->type);
			return -EBADMSG;
		}
		/* rows are whole blocks, so n_bytes = rows * row_bytes exactly */
		uint64_t row = kvp_ggml_row_bytes(t->type, t->ne[0]);
		if (!row || __builtin_mul_overflow(row, t->n_elems / t->ne[0], &t->n_bytes)) {
			kvp_errmsg(err, errlen,
				   "gguf: tensor '%.*s': row of %llu is not whole %s blocks",
				   (int)(t->name.len > 128 ? 128 : t->name.len), t->name.p,
				   (unsigned long long)t->ne[0], kvp_ggml_type_name(t->type));
			return -EBADMSG;
		}
		/* the data offset is checked once the data section start is known */
		t->data = (const void *)(uintptr_t)off;
		continue;
trunc:
		kvp_errmsg(err, errlen, "gguf: tensor info %llu truncated at offset %zu",
			   (unsigned long long)i, c->off);
		return -EBADMSG;
	}
	return 0;
}

static int str_cmp(struct kvp_gguf_str a, struct kvp_gguf_str b)
{
	if (a.len != b.len)
		return a.len < b.len ? -1 : 1;
	return memcmp(a.p, b.p, a.len);
}

static int cmp_str_ptr(const void *a, const void *b)
{
	return str_cmp(**(const struct kvp_gguf_str *const *)a,
		       **(const struct kvp_gguf_str *const *)b);
}

/*
 * Refuse two metadata entries with one key, or two tensors with one name: every lookup
 * takes the first, so a second would be read by nothing here and by the first-or-last
 * rule of another reader (a file that means two things).  Sorted: O(n log n) for any
 * count the file can hold.  @kind names what is compared, for the message.
 */
static int check_unique(const struct kvp_gguf_str *first, size_t stride, uint64_t n,
			const char *kind, char *err, size_t errlen)
{
	const struct kvp_gguf_str **v;
	int r = 0;

	if (n < 2)
		return 0;
	v = malloc(n * sizeof(*v));
	if (!v) {
		kvp_errmsg(err, errlen, "gguf: out of memory");
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < n; i++)
		v[i] = (const struct kvp_gguf_str *)((const uint8_t *)first + i * stride);
	qsort(v, n, sizeof(*v), cmp_str_ptr);
	for (uint64_t i = 1; i < n && !r; i++) {
		if (str_cmp(*v[i - 1], *v[i]))
			continue;
		kvp_errmsg(err, errlen, "gguf: %s '%.*s' appears twice", kind,
			   (int)(v[i]->len > 128 ? 128 : v[i]->len), v[i]->p);
		r = -EBADMSG;
	}
	free(v);
	return r;
}

static int parse(struct kvp_gguf *g, char *err, size_t errlen)
{
	struct kvp_cur c = { .base = g->base, .off = 0, .size = g->size };
	const struct kvp_gguf_kv *al;
	uint32_t magic;
	uint64_t align64;
	int r;

	if (kvp_cur_le32(&c, &magic) || magic != KVP_GGUF_MAGIC) {
		kvp_errmsg(err, errlen, "gguf: not a GGUF file (bad magic)");
		return -EBADMSG;
	}
	if (kvp_cur_le32(&c, &g->version)) {
		kvp_errmsg(err, errlen, "gguf: header truncated");
		return -EBADMSG;
	}
	if (g->version != 2 && g->version != 3) {
		uint32_t sw = __builtin_bswap32(g->version);

		if (sw == 2 || sw == 3) /* v3 allows big-endian files; the magic reads the same */
			kvp_errmsg(err, errlen, "gguf: big-endian GGUF v%u is not supported", sw);
		else
			kvp_errmsg(err, errlen, "gguf: unsupported version %u (want 2 or 3)",
				   g->version);
		return -EBADMSG;
	}
	if (kvp_cur_le64(&c, &g->n_tensors) || kvp_cur_le64(&c, &g->n_kv)) {
		kvp_errmsg(err, errlen, "gguf: header truncated");
		return -EBADMSG;
	}
	/* a kv takes >= 13 bytes and a tensor info >= 32: bound counts before allocating */
	if (g->n_kv > (c.size - c.off) / 13 || g->n_tensors > (c.size - c.off) / 32) {
		kvp_errmsg(err, errlen,
			   "gguf: %llu metadata entries / %llu tensors cannot fit in %zu bytes",
			   (unsigned long long)g->n_kv, (unsigned long long)g->n_tensors, g->size);
		return -EBADMSG;
	}
	g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof(*g->kv));
	g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*g->tensors));
	if (!g->kv || !g->tensors) {
		kvp_errmsg(err, errlen, "gguf: out of memory");
		return -ENOMEM;
	}
	r = parse_kvs(g, &c, err, errlen);
	if (!r)
		r = check_unique(&g->kv[0].key, sizeof(g->kv[0]), g->n_kv, "metadata key", err,
				 errlen);
	if (r)
		return r;

	g->alignment = KVP_GGUF_DEFAULT_ALIGN;
	al = kvp_gguf_find(g, "general.alignment");
	if (al) {
		r = kvp_gguf_get_uint(g, "general.alignment", 1u << 20, &align64);
		if (r || align64 == 0 || (align64 & (align64 - 1))) {
			kvp_errmsg(err, errlen, "gguf: general.alignment is not a power of two");
			return -EBADMSG;
		}
		g->alignment = (uint32_t)align64;
	}

	r = parse_tensor_infos(g, &c, err, errlen);
	if (!r)
		r = check_unique(&g->tensors[0].name, sizeof(g->tensors[0]), g->n_tensors, "tensor",
				 err, errlen);
	if (r)
		return r;

	g->data_off = (c.off + g->alignment - 1) & ~(uint64_t)(g->alignment - 1);
	if (g->n_tensors && g->data_off > g->size) {
		kvp_errmsg(err, errlen, "gguf: data section at %llu past end of file (%zu)",
			   (unsigned long long)g->data_off, g->size);
		return -EBADMSG;
	}
	for (uint64_t i = 0; i < g->n_tensors; i++) {
		struct kvp_gguf_tensor *t = &g->tensors[i];
		uint64_t off = (uint64_t)(uintptr_t)t->data, start, end;

		if (off % g->alignment || __builtin_add_overflow(g->data_off, off, &start) ||
		    __builtin_add_overflow(start, t->n_bytes, &end) || end > g->size) {
			kvp_errmsg(
				err, errlen,
				"gguf: tensor '%.*s' data [%llu, +%llu) misaligned or past end of file (%zu)",
				(int)(t->name.len > 128 ? 128 : t->name.len), t->name.p,
				(unsigned long long)off, (unsigned long long)t->n_bytes, g->size);
			return -EBADMSG;
		}
		t->data = g->base + start;
	}
	return 0;
}

int kvp_gguf_parse(struct kvp_gguf **out, const void *buf, size_t len, char *err, size_t errlen)
{
	struct kvp_gguf *g = calloc(1, sizeof(*g));
	int r;

	*out = NULL;
	if (!g) {
		kvp_errmsg(err, errlen, "gguf: out of memory");
		return -ENOMEM;
	}
	g->base = buf;
	g->size = len;
	r = parse(g, err, errlen);
	if (r) {
		kvp_gguf_close(g);
		return r;
	}
	*out = g;
	return 0;
}

int kvp_gguf_open(struct kvp_gguf **out, const char *path, char *err, size_t errlen)
{
	struct stat st;
	void *map;
	int fd, r;

	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		kvp_errmsg(err, errlen, "gguf: open %s: %s", path, strerror(-r));
		return r;
	}
	if (fstat(fd, &st) < 0) {
		r = -errno;
		kvp_errmsg(err, errlen, "gguf: stat %s: %s", path, strerror(-r));
		close(fd);
		return r;
	}
	if (!S_ISREG(st.st_mode) || st.st_size < 24) {
		kvp_errmsg(err, errlen, "gguf: %s: not a regular file of at least 24 bytes", path);
		close(fd);
		return -EBADMSG;
	}
	map = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	r = -errno;
	close(fd); /* the mapping keeps the file */
	if (map == MAP_FAILED) {
		kvp_errmsg(err, errlen, "gguf: mmap %s: %s", path, strerror(-r));
		return r;
	}
	r = kvp_gguf_parse(out, map, st.st_size, err, errlen);
	if (r) {
		munmap(map, st.st_size);
		return r;
	}
	(*out)->mapped = 1;
	return 0;
}

void kvp_gguf_close(struct kvp_gguf *g)
{
	if (!g)
		return;
	if (g->mapped)
		munmap((void *)g->base, g->size);
	free(g->kv);
	free(g->tensors);
	free(g);
}

const struct kvp_gguf_kv *kvp_gguf_find(const struct kvp_gguf *g, const char *key)
{
	for (uint64_t i = 0; i < g->n_kv; i++)
		if (kvp_gguf_str_eq(g->kv[i].key, key))
			return &g->kv[i];
	return NULL;
}

/*
 * A scalar number of the file, decoded in one place for every getter: which kind it is
 * and its value as that kind (BOOL is an unsigned 0 or 1 of its own kind).
 */
enum num_kind { NUM_UINT, NUM_SINT, NUM_FLOAT, NUM_BOOL };

struct num {
	enum num_kind kind;
	uint64_t u; /* NUM_UINT, NUM_BOOL */
	int64_t s;  /* NUM_SINT */
	double f;   /* NUM_FLOAT */
};

/* Decode @kv's scalar value into @n; -EBADMSG for a string or an array. */
static int kv_num(const struct kvp_gguf_kv *kv, struct num *n)
{
	uint64_t w = vtype_size(kv->type), raw = 0;

	if (!w)
		return -EBADMSG;
	/* copied as stored: little-endian, as the host is (ipc/proto.h refuses others) */
	memcpy(&raw, kv->val, w);
	n->kind = NUM_SINT;
	switch (kv->type) {
	case KVP_GGUF_I8:
		n->s = (int8_t)raw;
		return 0;
	case KVP_GGUF_I16:
		n->s = (int16_t)raw;
		return 0;
	case KVP_GGUF_I32:
		n->s = (int32_t)raw;
		return 0;
	case KVP_GGUF_I64:
		n->s = (int64_t)raw;
		return 0;
	case KVP_GGUF_F32: {
		float f;

		memcpy(&f, kv->val, 4);
		n->kind = NUM_FLOAT;
		n->f = f;
		return 0;
	}
	case KVP_GGUF_F64:
		n->kind = NUM_FLOAT;
		memcpy(&n->f, kv->val, 8);
		return 0;
	case KVP_GGUF_BOOL:
		n->kind = NUM_BOOL;
		n->u = raw != 0;
		return 0;
	default: /* U8, U16, U32, U64 */
		n->kind = NUM_UINT;
		n->u = raw;
		return 0;
	}
}

/* @key's integer value, not negative; -ENOENT, -EBADMSG for any other type. */
static int find_uint(const struct kvp_gguf *g, const char *key, struct num *n)
{
	const struct kvp_gguf_kv *kv = kvp_gguf_find(g, key);

	if (!kv)
		return -ENOENT;
	if (kv_num(kv, n) || n->kind == NUM_FLOAT || n->kind == NUM_BOOL)
		return -EBADMSG;
	if (n->kind == NUM_SINT) {
		if (n->s < 0)
			return -EBADMSG;
		n->kind = NUM_UINT;
		n->u = (uint64_t)n->s;
	}
	return 0;
}

int kvp_gguf_get_uint(const struct kvp_gguf *g, const char *key, uint64_t max, uint64_t *out)
{
	struct num n;
	int r = find_uint(g, key, &n);

	if (r)
		return r;
	if (n.u > max)
		return -EBADMSG;
	*out = n.u;
	return 0;
}

int kvp_gguf_get_f32(const struct kvp_gguf *g, const char *key, float *out)
{
	const struct kvp_gguf_kv *kv = kvp_gguf_find(g, key);
	struct num n;

	if (!kv)
		return -ENOENT;
	if (kv_num(kv, &n) || n.kind != NUM_FLOAT)
		return -EBADMSG;
	*out = (float)n.f;
	return 0;
}

int kvp_gguf_get_bool(const struct kvp_gguf *g, const char *key, int *out)
{
	const struct kvp_gguf_kv *kv = kvp_gguf_find(g, key);
	struct num n;
	int r;

	if (!kv)
		return -ENOENT;
	if (kv->type == KVP_GGUF_BOOL) {
		*out = kv->val[0] != 0;
		return 0;
	}
	r = find_uint(g, key, &n);
	if (r)
		return r;
	*out = n.u != 0;
	return 0;
}

int kvp_gguf_kv_f64(const struct kvp_gguf_kv *kv, double *out)
{
	struct num n;

	if (kv_num(kv, &n))
		return -EBADMSG;
	switch (n.kind) {
	case NUM_SINT:
		*out = (double)n.s;
		break;
	case NUM_FLOAT:
		*out = n.f;
		break;
	default:
		*out = (double)n.u;
		break;
	}
	return 0;
}

int kvp_gguf_get_str(const struct kvp_gguf *g, const char *key, struct kvp_gguf_str *out)
{
	const struct kvp_gguf_kv *kv = kvp_gguf_find(g, key);

	if (!kv)
		return -ENOENT;
	if (kv->type != KVP_GGUF_STRING)
		return -EBADMSG;
	memcpy(&out->len, kv->val, 8);
	out->p = (const char *)kv->val + 8;
	return 0;
}

int kvp_gguf_get_arr(const struct kvp_gguf *g, const char *key, uint32_t elem_type,
		     const struct kvp_gguf_kv **out)
{
	const struct kvp_gguf_kv *kv = kvp_gguf_find(g, key);

	if (!kv)
		return -ENOENT;
	if (kv->type != KVP_GGUF_ARRAY || kv->arr_type != elem_type)
		return -EBADMSG;
	*out = kv;
	return 0;
}

struct kvp_gguf_str kvp_gguf_str_next(const uint8_t **p)
{
	struct kvp_gguf_str s;

	memcpy(&s.len, *p, 8);
	s.p = (const char *)*p + 8;
	*p += 8 + s.len;
	return s;
}

const struct kvp_gguf_tensor *kvp_gguf_tensor(const struct kvp_gguf *g, const char *name)
{
	for (uint64_t i = 0; i < g->n_tensors; i++)
		if (kvp_gguf_str_eq(g->tensors[i].name, name))
			return &g->tensors[i];
	return NULL;
}
