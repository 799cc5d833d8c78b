/* SPDX-License-Identifier: MIT */
/*
 * loop.c - io_uring ring with a provided-buffer ring for multishot receives.
 *
 * liburing 2.3 has io_uring_register_buf_ring() but not io_uring_setup_buf_ring()
 * (2.4), so the buffer ring is mapped here and registered by hand.  Receives are
 * multishot (IORING_RECV_MULTISHOT, kernel 6.0+) and pick a buffer from group @bgid;
 * the consumer copies the bytes out at once and hands the buffer back, so the ring
 * runs dry (-ENOBUFS, which ends a multishot receive) only under a burst of more
 * than n_bufs completions in one batch, and the caller then re-arms.
 *
 * Invariant: every buffer id is either in the kernel's ring or being consumed by
 * the current CQE; kvp_loop_buf_recycle() returns it exactly once.
 * Thread: the loop thread only.
 */
#include "ipc/loop.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

/**
 * kvp_loop_init() - set up the ring and register @n_bufs receive buffers
 * @sq_entries: submission queue size
 * @cq_entries: completion queue size (multishot operations post many CQEs)
 * @n_bufs:     power of two, at most 32768
 * @buf_size:   bytes per receive buffer
 * Return: 0 or -errno (-EINVAL for a bad size).
 */
int kvp_loop_init(struct kvp_loop *l, unsigned int sq_entries, unsigned int cq_entries,
		  unsigned int n_bufs, unsigned int buf_size)
{
	struct io_uring_params p = { .flags = IORING_SETUP_CQSIZE, .cq_entries = cq_entries };
	struct io_uring_buf_reg reg = { 0 };
	int r;

	memset(l, 0, sizeof(*l));
	if (!n_bufs || (n_bufs & (n_bufs - 1)) || n_bufs > 32768 || !buf_size)
		return -EINVAL;
	/*
	 * No COOP_TASKRUN: the loop thread also blocks in svc/'s callbacks' syscalls, and
	 * completions must not wait for its next io_uring_enter().
	 */
	r = io_uring_queue_init_params(sq_entries, &l->ring, &p);
	if (r < 0)
		return r;

	l->n_bufs = n_bufs;
	l->buf_size = buf_size;
	l->bgid = 1;
	l->br_mask = io_uring_buf_ring_mask(n_bufs);
	l->br_bytes = (size_t)n_bufs * sizeof(struct io_uring_buf);
	l->br = mmap(NULL, l->br_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (l->br == MAP_FAILED) {
		r = -errno;
		goto err_exit;
	}
	l->bufs = mmap(NULL, (size_t)n_bufs * buf_size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (l->bufs == MAP_FAILED) {
		r = -errno;
		goto err_unmap_br;
	}
	reg.ring_addr = (uint64_t)(uintptr_t)l->br;
	reg.ring_entries = n_bufs;
	reg.bgid = l->bgid;
	r = io_uring_register_buf_ring(&l->ring, &reg, 0);
	if (r < 0)
		goto err_unmap_bufs;
	io_uring_buf_ring_init(l->br);
	for (uint32_t i = 0; i < n_bufs; i++)
		io_uring_buf_ring_add(l->br, l->bufs + (size_t)i * buf_size, buf_size,
				      (unsigned short)i, l->br_mask, (int)i);
	io_uring_buf_ring_advance(l->br, (int)n_bufs);
	return 0;

err_unmap_bufs:
	munmap(l->bufs, (size_t)n_bufs * buf_size);
err_unmap_br:
	munmap(l->br, l->br_bytes);
err_exit:
	io_uring_queue_exit(&l->ring);
	memset(l, 0, sizeof(*l));
	return r;
}

/* Tear down the ring (cancelling what is in flight), then the buffers. */
void kvp_loop_deinit(struct kvp_loop *l)
{
	if (!l->br)
		return;
	io_uring_unregister_buf_ring(&l->ring, l->bgid);
	io_uring_queue_exit(&l->ring);
	munmap(l->bufs, (size_t)l->n_bufs * l->buf_size);
	munmap(l->br, l->br_bytes);
	memset(l, 0, sizeof(*l));
}

/*
 * kvp_loop_sqe() - a free SQE, submitting what is queued when the SQ is full
 * Return: an SQE, or NULL only if the kernel refuses submissions (ring broken).
 */
struct io_uring_sqe *kvp_loop_sqe(struct kvp_loop *l)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);

	if (!sqe) {
		io_uring_submit(&l->ring);
		sqe = io_uring_get_sqe(&l->ring);
	}
	return sqe;
}

/* Prepare a multishot receive on @fd into the provided-buffer group. */
void kvp_loop_prep_recv(struct kvp_loop *l, struct io_uring_sqe *sqe, int fd)
{
	io_uring_prep_recv_multishot(sqe, fd, NULL, 0, 0);
	sqe->flags |= IOSQE_BUFFER_SELECT;
	sqe->buf_group = l->bgid;
}

/*
 * kvp_loop_buf() - the buffer a receive CQE filled, or NULL when it carries none
 * @bid: out; the buffer id to recycle once the bytes are consumed
 */
const uint8_t *kvp_loop_buf(const struct kvp_loop *l, uint32_t cqe_flags, uint32_t *bid)
{
	if (!(cqe_flags & IORING_CQE_F_BUFFER))
		return NULL;
	*bid = cqe_flags >> IORING_CQE_BUFFER_SHIFT;
	if (*bid >= l->n_bufs)
		return NULL;
	return l->bufs + (size_t)*bid * l->buf_size;
}

/* Give buffer @bid back to the kernel. */
void kvp_loop_buf_recycle(struct kvp_loop *l, uint32_t bid)
{
	io_uring_buf_ring_add(l->br, l->bufs + (size_t)bid * l->buf_size, l->buf_size,
			      (unsigned short)bid, l->br_mask, 0);
	io_uring_buf_ring_advance(l->br, 1);
}

/*
 * kvp_loop_wait() - submit what is queued and wait for a completion
 * @timeout_ms: -1 to wait without limit
 * Return: 0 (a completion is ready, or the timeout passed, or a signal came), or
 *         -errno if the ring failed.
 */
int kvp_loop_wait(struct kvp_loop *l, int timeout_ms)
{
	struct __kernel_timespec ts = { .tv_sec = timeout_ms / 1000,
					.tv_nsec = (long long)(timeout_ms % 1000) * 1000000 };
	struct io_uring_cqe *cqe;
	int r;

	r = io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, timeout_ms < 0 ? NULL : &ts, NULL);
	if (r == -ETIME || r == -EINTR || r == -EAGAIN || r == -EBUSY)
		return 0;
	return r < 0 ? r : 0;
}

/*
 * kvp_loop_dispatch() - call @fn for every ready CQE, marking each seen
 * Return: the number dispatched.
 */
unsigned int kvp_loop_dispatch(struct kvp_loop *l, kvp_loop_cqe_fn *fn, void *arg)
{
	struct io_uring_cqe *cqe;
	unsigned int n = 0;

	while (io_uring_peek_cqe(&l->ring, &cqe) == 0) {
		uint64_t ud = cqe->user_data;
		int res = cqe->res;
		uint32_t flags = cqe->flags;

		/* seen first: @fn may submit, and needs the CQ slot only through these copies */
		io_uring_cqe_seen(&l->ring, cqe);
		fn(arg, ud, res, flags);
		n++;
	}
	return n;
}
