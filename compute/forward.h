/* SPDX-License-Identifier: MIT */
/*
 * forward.h - the fast forward pass: chunked prefill, batched decode and mixed steps of both
 * over pool blocks.
 *
 * A forward context (struct kvp_fwd) is made once per engine thread and holds all
 * scratch, sized by its options: nothing allocates inside prefill or decode.  K/V is
 * read and written only through a struct kvp_kv_view (shm/geom.h) and per-sequence
 * block tables (arrays of uint32 block ids): token t of a sequence lives in block
 * table[t / block_tokens], row t % block_tokens; the K/V of a position is written by
 * the call that processes it and only read afterwards.  Blocks shared between
 * sequences (prefix-cache hits) are only read, so a shared prefix plus a suffix gives
 * the same result as computing the whole prompt.
 *
 * Threads: a context owns a pool of n_threads (the caller included); projections go
 * through compute/linear.c (our kernels for the weights' types on this pool, OpenBLAS
 * for f32 prefill), attention is split by (sequence, kv head) on the pool.  Norms, RoPE
 * and the K/V stores run on the calling thread.  A context is used by one thread at a
 * time.
 *
 * Kernels: the context uses one kernel table (compute/kernels/kernels.h), the CPU's
 * best or the one KVP_ISA forces, or the one its options name (tests run every path).
 *
 * Precision: activations are f32 between layers; each projection computes in its
 * weights' type (int8 dot products on activations quantized per block for the integer
 * types, bf16 for BF16); K/V are stored in the view's dtype (f32, f16, bf16 or int8),
 * converted on write and on read; int8 keys wait in the view's stage until their block
 * is full, and are quantized by the call that writes its last row (shm/geom.h).
 */
#ifndef KVP_COMPUTE_FORWARD_H
#define KVP_COMPUTE_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "shm/geom.h"

struct kvp_kernels;

struct kvp_model;
struct kvp_fwd;

/**
 * struct kvp_fwd_opts - sizes a forward context
 * @n_threads:  threads for the matrix products (>= 1)
 * @max_chunk:  most tokens one kvp_fwd_prefill() call takes (>= 1)
 * @max_batch:  most sequences one kvp_fwd_decode() call takes, and most parts of one
 *              kvp_fwd_step() (>= 1); a step's rows add up to max_chunk + max_batch
 * @kernels:    the kernel table to use, or NULL for kvp_kernels_best()
 */
struct kvp_fwd_opts {
	uint32_t n_threads;
	uint32_t max_chunk;
	uint32_t max_batch;
	const struct kvp_kernels *kernels;
};

/**
 * kvp_fwd_new() - allocate a forward context and all its scratch
 * @out:  out; freed with kvp_fwd_free()
 * @m:    the model (borrowed; must outlive the context)
 * @o:    sizes
 *
 * Scratch is about (max_chunk + max_batch) * (4 n_embd + 2 n_ff) floats (a mixed step
 * holds a prefill chunk and a decode batch), plus the quantized copies of one layer
 * input.
 * Return: 0, -EINVAL for zero or absurd sizes or an unknown KVP_ISA, -ENOTSUP when
 * KVP_ISA names an instruction set this CPU lacks, -ENOMEM.
 */
int kvp_fwd_new(struct kvp_fwd **out, const struct kvp_model *m, const struct kvp_fwd_opts *o);

/* kvp_fwd_kernels() - the kernel table the context computes with (its name for logs). */
const struct kvp_kernels *kvp_fwd_kernels(const struct kvp_fwd *f);

/**
 * kvp_fwd_rows_exact() - does a row's result not depend on the rows beside it?
 *
 * True when no projection has f32 weights: the other types' kernels compute each row
 * alone, so a row run inside a step of any rows (up to max_chunk + max_batch, all on
 * our kernels) is bit-equal to it run alone (tests/unit/test_fwd_step.c).  The f32 GEMV
 * kernel sums 8 rows at a time in another order than one (equal within rounding only),
 * so speculative decoding, which verifies drafts as extra rows, keeps greedy output
 * identical only when this holds.
 */
bool kvp_fwd_rows_exact(const struct kvp_fwd *f);

/* kvp_fwd_free() - NULL is a no-op. */
void kvp_fwd_free(struct kvp_fwd *f);

/**
 * kvp_fwd_check_view() - does @kv fit this model?
 *
 * The view's n_layers, n_kv_heads and head_dim must equal the model's and its dtype
 * be f32, f16, bf16 or int8 (int8: with a stage).  Prefill and decode check this too.
 * Return: 0 or -EINVAL.
 */
int kvp_fwd_check_view(const struct kvp_fwd *f, const struct kvp_kv_view *kv);

/**
 * kvp_fwd_prefill() - process one chunk of one sequence
 * @f:        the context
 * @kv:       where K/V live
 * @table:    the sequence's block table: @n_table block ids, each < kv->n_blocks;
 *            it must cover positions 0 .. n_past + n - 1
 * @n_table:  entries in @table
 * @n_past:   positions already in the blocks (their K/V is read, never written)
 * @tokens:   @n token ids, each < n_vocab; they take positions n_past .. n_past + n - 1
 * @n:        1 .. max_chunk
 * @logits:   out; n_vocab floats for the last position, or n * n_vocab (row i for
 *            position n_past + i) when @all_logits
 * @all_logits: nonzero to compute the logits of every position of the chunk
 *
 * Writes K/V of the @n new positions into their blocks.  A long prompt is prefilled
 * by calling this repeatedly with n_past advancing; the result equals one call.
 * Return: 0, or -EINVAL (bad ids, table too short, view mismatch, n out of range), or
 * -ENOSPC (int8: no stage slot for a block it would write).
 * Nothing is written on -EINVAL.
 */
int kvp_fwd_prefill(struct kvp_fwd *f, const struct kvp_kv_view *kv, const uint32_t *table,
		    uint32_t n_table, uint32_t n_past, const int32_t *tokens, uint32_t n,
		    float *logits, int all_logits);

/**
 * struct kvp_fwd_seq - one sequence of a decode batch
 * @table:   its block table (borrowed), @n_table ids covering positions 0 .. pos
 * @n_table: entries in @table
 * @pos:     position of @token (= tokens already in the blocks)
 * @token:   the token to process (the last one sampled)
 */
struct kvp_fwd_seq {
	const uint32_t *table;
	uint32_t n_table;
	uint32_t pos;
	int32_t token;
};

/**
 * kvp_fwd_decode() - one decode step for a batch of sequences
 * @f:      the context
 * @kv:     where K/V live (one view for the whole batch)
 * @seqs:   @n_seqs sequences, 1 .. max_batch; they must not share the block of their
 *          own position @pos (shared, read-only prefix blocks are fine)
 * @logits: out; n_seqs * n_vocab floats, row i for seqs[i]
 *
 * Each projection reads its weights once per 8 sequences (one GEMV pass over the batch,
 * sgemm past 16).  The result for each sequence equals decoding it alone (within
 * rounding: summation order differs between the paths).
 * Return: 0, or -EINVAL (bad ids, short table, view mismatch) or -ENOSPC (int8: the
 * stage is full); nothing written then.
 */
int kvp_fwd_decode(struct kvp_fwd *f, const struct kvp_kv_view *kv, const struct kvp_fwd_seq *seqs,
		   uint32_t n_seqs, float *logits);

/**
 * struct kvp_fwd_part - the rows of one sequence in a mixed step
 * @table:   its block table (borrowed), @n_table ids covering positions 0 .. pos0 + n - 1
 * @n_table: entries in @table
 * @pos0:    position of tokens[0] (= positions already in the blocks; read, never written)
 * @tokens:  @n token ids (borrowed), each < n_vocab, at positions pos0 .. pos0 + n - 1
 * @n:       >= 1: 1 for a decode row, more for a prefill chunk
 * @n_logits: logits of the part's last max(1, @n_logits) rows (<= @n): 0 or 1 for the
 *           last row only, more to verify drafted tokens (speculative decoding: the
 *           last kept token and its k drafts as 1 + k rows, every row's logits)
 */
struct kvp_fwd_part {
	const uint32_t *table;
	uint32_t n_table;
	uint32_t pos0;
	const int32_t *tokens;
	uint32_t n;
	uint32_t n_logits;
};

/**
 * kvp_fwd_step() - one forward step over the rows of several sequences at once
 * @f:       the context
 * @kv:      where K/V live (one view for the whole step)
 * @parts:   @n_parts sequences, 1 .. max_batch, rows adding up to at most
 *           max_chunk + max_batch; like a decode batch, no two may share the block of
 *           a position they write (shared, read-only prefix blocks are fine)
 * @logits:  out; n_vocab floats per logits row: part 0's max(1, n_logits) rows (in
 *           position order), then part 1's, ...; with every n_logits <= 1, row i is
 *           the last position of parts[i]
 *
 * The decode batch and a prefill chunk in one call: every projection runs once over all
 * rows (the weights are read once per step, not once per call), attention runs per part
 * over its own block table, and only each part's last row goes through the output norm
 * and the vocabulary projection (its last n_logits rows when more).  Writes K/V of every
 * row's position.  The result for
 * each part equals running it alone through kvp_fwd_prefill() or kvp_fwd_decode()
 * (within rounding: with more rows an f32 projection may take sgemm instead of the GEMV
 * kernel, whose summation order differs; docs/compute.md "Mixed steps").
 * Return: 0, or -EINVAL (bad ids, short table, view mismatch, sizes) or -ENOSPC (int8:
 * the stage is full); nothing written
 * then.
 */
int kvp_fwd_step(struct kvp_fwd *f, const struct kvp_kv_view *kv, const struct kvp_fwd_part *parts,
		 uint32_t n_parts, float *logits);

#endif /* KVP_COMPUTE_FORWARD_H */
