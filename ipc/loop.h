/* SPDX-License-Identifier: MIT */
/*
 * loop.h - the io_uring ring of the server: setup, a provided-buffer ring for
 * receives, user_data packing with generations, and CQE dispatch.
 *
 * Thread: owned by the loop thread; nothing here is thread-safe.
 */
#ifndef KVP_IPC_LOOP_H
#define KVP_IPC_LOOP_H

#include <stdint.h>
#include <liburing.h>

/*
 * user_data layout: bits 0-7 the operation, 8-31 the generation of the object (a
 * connection slot) the operation belongs to, 32-63 its index.  An integer rather than
 * a pointer, so a completion arriving after its connection slot was reused is
 * recognised by its stale generation instead of touching the new owner.
 */
static inline uint64_t kvp_ud_pack(uint32_t idx, uint32_t gen, uint32_t op)
{
	return (uint64_t)idx << 32 | (uint64_t)(gen & 0xffffff) << 8 | (op & 0xff);
}

static inline uint32_t kvp_ud_idx(uint64_t ud)
{
	return (uint32_t)(ud >> 32);
}

static inline uint32_t kvp_ud_gen(uint64_t ud)
{
	return (uint32_t)(ud >> 8) & 0xffffff;
}

static inline uint32_t kvp_ud_op(uint64_t ud)
{
	return (uint32_t)ud & 0xff;
}

/**
 * struct kvp_loop - one ring plus its provided-buffer group
 * @ring:     the io_uring
 * @br:       the buffer ring shared with the kernel (one page-aligned mapping)
 * @bufs:     @n_bufs buffers of @buf_size bytes, buffer id i at bufs + i * buf_size
 * @bgid:     buffer group id given to receives (IOSQE_BUFFER_SELECT)
 */
struct kvp_loop {
	struct io_uring ring;
	struct io_uring_buf_ring *br;
	size_t br_bytes;
	uint8_t *bufs;
	uint32_t n_bufs;
	uint32_t buf_size;
	uint16_t bgid;
	int br_mask;
};

int kvp_loop_init(struct kvp_loop *l, unsigned int sq_entries, unsigned int cq_entries,
		  unsigned int n_bufs, unsigned int buf_size);
void kvp_loop_deinit(struct kvp_loop *l);
struct io_uring_sqe *kvp_loop_sqe(struct kvp_loop *l);
void kvp_loop_prep_recv(struct kvp_loop *l, struct io_uring_sqe *sqe, int fd);
const uint8_t *kvp_loop_buf(const struct kvp_loop *l, uint32_t cqe_flags, uint32_t *bid);
void kvp_loop_buf_recycle(struct kvp_loop *l, uint32_t bid);
int kvp_loop_wait(struct kvp_loop *l, int timeout_ms);

typedef void kvp_loop_cqe_fn(void *arg, uint64_t ud, int res, uint32_t flags);
unsigned int kvp_loop_dispatch(struct kvp_loop *l, kvp_loop_cqe_fn *fn, void *arg);

#endif /* KVP_IPC_LOOP_H */
