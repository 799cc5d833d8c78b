/* SPDX-License-Identifier: MIT */
/*
 * kvpool/layout.h - pool geometry as clients see it (ABI, versioned).
 *
 * Needs C11 or later (static_assert of <assert.h>, used to pin the ABI); an older
 * -std= stops at an #error saying so.  Link with -lkvpool (pkg-config: kvpool).
 *
 * A client that maps a pool segment read-only (the fd passed in WELCOME) finds the
 * K/V of block id at  data_offset + id * block_stride  and, inside a block, the run of
 * (layer, k|v, kv_head) at kvp_layout_run_offset() (below), holding block_tokens rows of
 * head_dim elements of dtype, and for the integer types their scales after the rows
 * (int4: two elements a byte, and K and V runs of their own sizes).
 * For f32, f16 and bf16 every run has the same size and the offset is
 * ((layer * 2 + kv) * n_kv_heads + kv_head) * run_bytes.
 *
 * Every struct here crosses a process boundary: fixed-width little-endian fields,
 * explicit padding, sizes pinned by static_assert.
 */
#ifndef KVPOOL_LAYOUT_H
#define KVPOOL_LAYOUT_H

#if !defined(__cplusplus) && (!defined(__STDC_VERSION__) || __STDC_VERSION__ < 201112L)
#error "the kvpool headers need C11 or later (e.g. -std=c11 or -std=gnu17)"
#endif

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

/*
 * K/V element types.  Values are ABI.
 *
 * KVP_DTYPE_INT8 (symmetric, x = q * scale, q in [-127, 127]; layout revision 2,
 * KVP_INT8_LAYOUT_REV):
 *  - a K run is  int8 q[head_dim / 4][block_tokens][4]  then  uint8 code[head_dim]:
 *    one scale per channel over the block's tokens (keys have outlier channels; a
 *    per-token scale would spend the 8 bits on them, KIVI's finding).  Channels go in
 *    quads, each quad's block_tokens rows of 4 together: key t, channel c is at
 *    kvp_int8_k_index() (so an int8 dot of 4 channels scores many tokens at once);
 *  - a V run is  int8 q[block_tokens][head_dim]  then  uint8 code[block_tokens]: one
 *    scale per token.
 * A scale is a one-byte unsigned float (kvp_int8_scale(): 5 bits of exponent, 3 of
 * mantissa, 2^-24 .. 240): the smallest one that holds the group's largest magnitude,
 * so a group's step is at most 12.5% above amax / 127.
 * A block's K is quantized when its last row is written: until then the daemon holds
 * the partial block's keys in f32 in private memory (never in the segment), so the K
 * of a block a client can see (a full, sealed block) is always final.  Its V rows are
 * final from the moment they are written.
 *
 * KVP_DTYPE_INT4 (asymmetric, KIVI's grouping: keys per channel over the block's
 * tokens, values per token; x = lo + q * step, q in [0, 15]):
 *  - a run (K or V) is  nibbles[block_tokens * head_dim / 2]  (element e = t * head_dim
 *    + d in byte e / 2, the low nibble for even e), then  f16 d, f16 dmin  (the run's
 *    step and offset units), then one (s, m) pair of 6-bit codes per group (K: a group
 *    per channel, head_dim of them; V: a group per token, block_tokens of them), as a
 *    little-endian bit stream, code i at bit 6 * i (s of group g is code 2g, m code
 *    2g + 1), padded to a whole byte.  A group's step = d * s (s in [0, 63]) and its
 *    offset lo = dmin * m (m signed, two's complement in 6 bits, [-32, 31]); in f32,
 *    value = fmaf(q, step, lo).  So 4 bits an element plus 12 bits a group plus 4 bytes
 *    a run: at 16 tokens of head_dim 64, 1152 bytes against f16's 4096 (3.56x), at 32
 *    tokens 2200 against 8192 (3.72x).
 *  - the daemon keeps the most recent tokens of each sequence at full precision (the
 *    residual window, [pool] kv_window, KIVI's R): a block is quantized (K and V) when
 *    the sequence's end is kv_window tokens past the block's last one; until then its
 *    K and V live in f32 in daemon memory and its bytes in the segment are not final.
 *    A client only ever sees sealed (quantized, final) blocks: the index, the tiers and
 *    leases take a block only once it is sealed.
 */
enum kvp_dtype {
	KVP_DTYPE_F32 = 0,
	KVP_DTYPE_F16 = 1,
	KVP_DTYPE_BF16 = 2,
	KVP_DTYPE_INT8 = 3,
	KVP_DTYPE_INT4 = 4,
	KVP_DTYPE__COUNT
};

/* Is @dtype an integer type (scales in the runs, K quantized once its block is full)? */
static inline int kvp_dtype_is_int(uint32_t dtype)
{
	return dtype == KVP_DTYPE_INT8 || dtype == KVP_DTYPE_INT4;
}

/* The int8 layout's revision: revision 1 (f16 scales, K rows token-major) is refused. */
#define KVP_INT8_LAYOUT_REV 2u

/* Bytes of an int8 K run (rows, then a scale code per channel) and V run (one per row). */
#define KVP_INT8_K_RUN_BYTES(bt, hd) ((uint64_t)(bt) * (hd) + (hd))
#define KVP_INT8_V_RUN_BYTES(bt, hd) ((uint64_t)(bt) * (hd) + (bt))

/* Where key @t, channel @c of an int8 K run of @bt tokens is (head_dim is a multiple of 4). */
static inline uint64_t kvp_int8_k_index(uint32_t bt, uint32_t t, uint32_t c)
{
	return ((uint64_t)(c / 4) * bt + t) * 4 + c % 4;
}

/* The scale an int8 scale @code stands for: 2^((code >> 3) - 24) * (1 + (code & 7) / 8). */
static inline float kvp_int8_scale(uint8_t code)
{
	/* exact: a 4-bit integer times a power of two */
	return (float)(8u + (code & 7u)) * (float)(1u << (code >> 3)) / 134217728.0f;
}

/*
 * int4 runs: the nibbles, then d and dmin (f16 each), then the groups' packed codes.
 * block_tokens * head_dim must be even (head_dim is: RoPE rotates pairs).
 */
#define KVP_INT4_SCALES_OFFSET(bt, hd) ((uint64_t)(bt) * (hd) / 2u)
#define KVP_INT4_CODES_BYTES(groups) ((12u * (uint64_t)(groups) + 7u) / 8u)
#define KVP_INT4_RUN_BYTES(bt, hd, groups) \
	(KVP_INT4_SCALES_OFFSET(bt, hd) + 4u + KVP_INT4_CODES_BYTES(groups))
#define KVP_INT4_K_RUN_BYTES(bt, hd) KVP_INT4_RUN_BYTES(bt, hd, hd)
#define KVP_INT4_V_RUN_BYTES(bt, hd) KVP_INT4_RUN_BYTES(bt, hd, bt)

/**
 * struct kvp_model_shape - what decides the size and layout of a KV block
 * @n_layers:     transformer layers
 * @n_kv_heads:   K/V heads per layer (GQA/MQA: fewer than query heads)
 * @head_dim:     elements per head
 * @dtype:        enum kvp_dtype of the stored K/V
 * @block_tokens: tokens per block (default 16)
 */
struct kvp_model_shape {
	uint32_t n_layers;
	uint32_t n_kv_heads;
	uint32_t head_dim;
	uint32_t dtype;
	uint32_t block_tokens;
	uint32_t reserved0;
};
static_assert(sizeof(struct kvp_model_shape) == 24, "layout ABI");

/*
 * kvp_layout_run_bytes() - bytes of one K (@kv 0) or V (@kv 1) run of a block of @s:
 * its rows and, for int8 and int4, its scales; 0 for an unknown dtype.  Integer math only.
 */
static inline uint64_t kvp_layout_run_bytes(const struct kvp_model_shape *s, uint32_t kv)
{
	uint64_t rows = (uint64_t)s->block_tokens * s->head_dim;

	switch (s->dtype) {
	case KVP_DTYPE_F32:
		return rows * 4;
	case KVP_DTYPE_F16:
	case KVP_DTYPE_BF16:
		return rows * 2;
	case KVP_DTYPE_INT8:
		return kv ? KVP_INT8_V_RUN_BYTES(s->block_tokens, s->head_dim) :
			    KVP_INT8_K_RUN_BYTES(s->block_tokens, s->head_dim);
	case KVP_DTYPE_INT4:
		return kv ? KVP_INT4_V_RUN_BYTES(s->block_tokens, s->head_dim) :
			    KVP_INT4_K_RUN_BYTES(s->block_tokens, s->head_dim);
	default:
		return 0;
	}
}

/*
 * kvp_layout_run_offset() - where, inside a block, the run of (@layer, @kv, @head)
 * starts: a layer's K runs (one per kv head), then its V runs, then the next layer.
 */
static inline uint64_t kvp_layout_run_offset(const struct kvp_model_shape *s, uint32_t layer,
					     uint32_t kv, uint32_t head)
{
	uint64_t kb = kvp_layout_run_bytes(s, 0), vb = kvp_layout_run_bytes(s, 1);

	return (uint64_t)layer * s->n_kv_heads * (kb + vb) + (uint64_t)kv * s->n_kv_heads * kb +
	       (uint64_t)head * (kv ? vb : kb);
}

/* kvp_layout_block_bytes() - payload bytes of one block of @s (every run of it). */
static inline uint64_t kvp_layout_block_bytes(const struct kvp_model_shape *s)
{
	return (uint64_t)s->n_layers * s->n_kv_heads *
	       (kvp_layout_run_bytes(s, 0) + kvp_layout_run_bytes(s, 1));
}

/* The int8 runs of a block of 16 tokens of head_dim 64: pinned, as the rest of the ABI. */
static_assert(KVP_DTYPE_INT8 == 3, "layout ABI");
static_assert(KVP_INT8_K_RUN_BYTES(16, 64) == 1088, "layout ABI");
static_assert(KVP_INT8_V_RUN_BYTES(16, 64) == 1040, "layout ABI");
static_assert(KVP_INT8_LAYOUT_REV == 2, "layout ABI");

/* The int4 runs at 16 and 32 tokens of head_dim 64 (and 128), pinned. */
static_assert(KVP_DTYPE_INT4 == 4, "layout ABI");
static_assert(KVP_INT4_SCALES_OFFSET(16, 64) == 512, "layout ABI");
static_assert(KVP_INT4_K_RUN_BYTES(16, 64) == 612, "layout ABI");
static_assert(KVP_INT4_V_RUN_BYTES(16, 64) == 540, "layout ABI");
static_assert(KVP_INT4_K_RUN_BYTES(32, 64) == 1124, "layout ABI");
static_assert(KVP_INT4_V_RUN_BYTES(32, 64) == 1076, "layout ABI");
static_assert(KVP_INT4_K_RUN_BYTES(16, 128) == 1220, "layout ABI");
static_assert(KVP_INT4_V_RUN_BYTES(16, 128) == 1052, "layout ABI");

/*
 * Page kinds a pool segment can be backed by.  Values are ABI (kvp_pool_header.page_kind).
 * KVP_PAGE_THP means a plain memfd advised MADV_HUGEPAGE that the kernel did back
 * with 2 MiB pages when it was pre-faulted; an advised segment that got no huge
 * page is reported as KVP_PAGE_4K.
 */
enum kvp_page_kind { KVP_PAGE_4K = 0, KVP_PAGE_THP = 1, KVP_PAGE_HUGETLB_2M = 2, KVP_PAGE__COUNT };

#define KVP_POOL_MAGIC 0x4c4f4f5050564b31ull /* "1KVPPOOL" little-endian */
/* 2: int8 runs of KVP_INT8_LAYOUT_REV 2 (a client of version 1 would misread them) */
#define KVP_POOL_VERSION 2u

/**
 * struct kvp_pool_header - first bytes of every pool segment (little-endian, 128 bytes)
 * @magic:         KVP_POOL_MAGIC
 * @version:       KVP_POOL_VERSION; a client refuses any other
 * @header_bytes:  sizeof(struct kvp_pool_header) as written
 * @shape:         K/V block shape (validated by the daemon)
 * @block_bytes:   payload bytes of one block (block_tokens * bytes per token)
 * @block_stride:  bytes between two blocks (multiple of 4096)
 * @data_offset:   offset of block 0 from the segment start (>= 4096; 2 MiB on hugetlb)
 * @segment_bytes: size of the whole segment
 * @n_blocks:      blocks in the segment; ids 0 .. n_blocks-1
 * @page_kind:     enum kvp_page_kind backing the segment
 * @page_bytes:    4096 or 2 MiB
 *
 * Block id is at data_offset + id * block_stride; data_offset + n_blocks * block_stride
 * <= segment_bytes.  Per-block metadata (refcount, generation, hashes) is daemon-private
 * and never in the segment.
 */
struct kvp_pool_header {
	uint64_t magic;
	uint32_t version;
	uint32_t header_bytes;
	struct kvp_model_shape shape;
	uint64_t block_bytes;
	uint64_t block_stride;
	uint64_t data_offset;
	uint64_t segment_bytes;
	uint32_t n_blocks;
	uint32_t page_kind;
	uint64_t page_bytes;
	uint8_t reserved[40];
};
static_assert(sizeof(struct kvp_pool_header) == 128, "layout ABI");
static_assert(offsetof(struct kvp_pool_header, shape) == 16, "layout ABI");
static_assert(offsetof(struct kvp_pool_header, data_offset) == 56, "layout ABI");
static_assert(offsetof(struct kvp_pool_header, n_blocks) == 72, "layout ABI");
static_assert(offsetof(struct kvp_pool_header, page_bytes) == 80, "layout ABI");

#endif /* KVPOOL_LAYOUT_H */
