/* SPDX-License-Identifier: MIT */
/*
 * kvpool/layout.h - pool geometry as clients see it (ABI, versioned).
 *
 * Needs C11 or later (static_assert of <assert.h>, used to pin the ABI); an older
 * -std= stops at an #error saying so.  Link with -lkvpool (pkg-config: kvpool).
 *
 * A client that maps a pool segment read-only (the fd passed in WELCOME) finds the
 * K/V of block id at  data_offset + id * block_stride  and, inside a block, the run of
 * (layer, k|v, kv_head) at  ((layer * 2 + kv) * n_kv_heads + kv_head) * head_bytes,
 * holding block_tokens rows of head_dim elements of dtype.
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

/* K/V element types.  Values are ABI; int8 with per-block scales comes later as 3. */
enum kvp_dtype { KVP_DTYPE_F32 = 0, KVP_DTYPE_F16 = 1, KVP_DTYPE_BF16 = 2, KVP_DTYPE__COUNT };

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
 * Page kinds a pool segment can be backed by.  Values are ABI (kvp_pool_header.page_kind).
 * KVP_PAGE_THP means a plain memfd advised MADV_HUGEPAGE that the kernel did back
 * with 2 MiB pages when it was pre-faulted; an advised segment that got no huge
 * page is reported as KVP_PAGE_4K.
 */
enum kvp_page_kind { KVP_PAGE_4K = 0, KVP_PAGE_THP = 1, KVP_PAGE_HUGETLB_2M = 2, KVP_PAGE__COUNT };

#define KVP_POOL_MAGIC 0x4c4f4f5050564b31ull /* "1KVPPOOL" little-endian */
#define KVP_POOL_VERSION 1u

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
