/* SPDX-License-Identifier: MIT */
/*
 * gen.h - one generation loop, as the steps of one sequence: the engine thread
 * (svc/engine/engine.c) drives many sequences with it, interleaved in batches; kvpool-run
 * drives one.  Both therefore tokenize, feed prefill chunks, keep or stop on a sampled
 * token and stream its text by the same rules:
 *
 *	kvp_gen_tokenize()          text prompt -> ids (retrying when a vocabulary needs
 *	                            more ids than the usual len + 2)
 *	kvp_gen_prefill_next/_prefill()   the prompt in chunks, position by position
 *	kvp_gen_take()              a sampled token: an end-of-generation token (the
 *	                            model's EOG set: eos, eot, eom, end-of-turn markers)
 *	                            ends the sequence unseen and uncounted; the
 *	                            max_new-th kept token is the last
 *	kvp_gen_text()/_flush()     its piece as whole UTF-8 characters (an ill-formed
 *	                            byte becomes U+FFFD), in slices that fit a buffer
 *	kvp_gen_decode_seq()/_decoded()   the kept token through one decode step
 *
 * Sampling, the K/V blocks and the forward context stay with the caller (the engine
 * owns a pool and batches; kvpool-run owns a heap region).
 * Thread: a struct kvp_gen belongs to the thread driving its sequence.
 */
#ifndef KVP_COMPUTE_GEN_H
#define KVP_COMPUTE_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compute/forward.h"
#include "shm/geom.h"
#include "compute/text/tokenizer.h"

/**
 * struct kvp_gen - where one sequence stands
 * @tok:         for the pieces of kept tokens (borrowed); NULL: no text
 * @prompt:      @n_prompt ids (borrowed; must outlive the generation)
 * @max_new:     tokens to keep at most (>= 1)
 * @stop_eog:    an end-of-generation token (kvp_tokenizer_is_eog()) ends the sequence
 * @kept:        NULL, or room for @max_new ids: each kept token is stored there (the
 *               engine points it right after the prompt, so prompt and reply are one
 *               array whose full blocks it can publish)
 * @n_past:      positions whose K/V is computed (prompt, then kept tokens fed back); a
 *               caller that reuses cached K/V (the engine, after a prefix hit) moves it
 *               past those positions before the first prefill
 * @n_generated: tokens kept so far (an end-of-generation token never is)
 * @last:        the last kept token: the input of the next decode step; -1 before
 * @utf8:        holds a character split across pieces
 */
struct kvp_gen {
	const struct kvp_tokenizer *tok;
	const int32_t *prompt;
	uint32_t n_prompt;
	uint32_t max_new;
	bool stop_eog;
	int32_t *kept;
	uint32_t n_past;
	uint32_t n_generated;
	int32_t last;
	struct kvp_utf8_stream utf8;
};

/* What to do after kvp_gen_take(). */
enum kvp_gen_next {
	KVP_GEN_CONTINUE, /* kept: show it, then decode it */
	KVP_GEN_LAST,	  /* kept, and the last one allowed: show it, then end */
	KVP_GEN_EOS,	  /* end of generation: neither kept nor shown; end now */
};

/*
 * Start a sequence of @n_prompt >= 1 ids; @stop_eog: stop at the model's end-of-generation
 * set (false for --ignore-eos, and without a tokenizer there is none).  @kept is NULL.
 */
void kvp_gen_init(struct kvp_gen *g, const struct kvp_tokenizer *tok, const int32_t *prompt,
		  uint32_t n_prompt, uint32_t max_new, bool stop_eog);

/**
 * kvp_gen_tokenize() - a text prompt as token ids
 * @ids:     out; malloc()ed ids (the caller frees them); NULL after an error
 * @n_ids:   out; how many (0 when the text gives none: the caller decides)
 * @text:    @len bytes (UTF-8; ill-formed bytes become their byte tokens)
 * @flags:   enum kvp_tok_flags (0 for a raw prompt; KVP_TOK_PARSE_SPECIAL, ...)
 * @max_ids: more ids than this is an error
 * Return: 0, -E2BIG (more than @max_ids), -ENOMEM, or the tokenizer's -errno.
 */
int kvp_gen_tokenize(int32_t **ids, uint32_t *n_ids, const struct kvp_tokenizer *tok,
		     const char *text, size_t len, unsigned int flags, uint32_t max_ids);

/* Prompt tokens the next prefill chunk takes: what is left, at most @budget. */
uint32_t kvp_gen_prefill_next(const struct kvp_gen *g, uint32_t budget);

/**
 * kvp_gen_prefill() - compute the next @n prompt positions (from kvp_gen_prefill_next())
 * @table, @n_table: block table covering positions 0 .. n_past + n - 1
 * @logits:          out; the logits of the last of them (n_vocab floats)
 * Return: 0 (n_past advanced by @n), or -errno of kvp_fwd_prefill().
 */
int kvp_gen_prefill(struct kvp_gen *g, struct kvp_fwd *fwd, const struct kvp_kv_view *kv,
		    const uint32_t *table, uint32_t n_table, uint32_t n, float *logits);

/* Whether the whole prompt is computed (then sample from the last logits). */
static inline bool kvp_gen_prefilled(const struct kvp_gen *g)
{
	return g->n_past == g->n_prompt;
}

/* Apply the stop conditions to the sampled @token; a kept one counts and becomes @last. */
enum kvp_gen_next kvp_gen_take(struct kvp_gen *g, int32_t token);

/**
 * kvp_gen_text() - the text of kept @token, one slice at a time
 * @off:  in/out; bytes of the token's piece consumed, 0 to start
 * @out:  @cap >= 6 bytes
 * @more: out; true when a slice of the piece is left (call again with the same @off)
 *
 * Each call feeds at most (cap - 3) / 3 bytes of the piece, the most whose complete
 * characters (and U+FFFD replacements) always fit @cap.
 * Return: bytes of whole characters written to @out (0 .. cap), or -EINVAL for a
 * @cap below 6.
 */
int kvp_gen_text(struct kvp_gen *g, int32_t token, size_t *off, char *out, size_t cap, bool *more);

/* End of the text: a character left incomplete becomes U+FFFD.  @out: 3 bytes.  Return: 0 or 3. */
int kvp_gen_flush(struct kvp_gen *g, char *out, size_t cap);

/* The decode-batch entry that feeds @last back at position n_past. */
struct kvp_fwd_seq kvp_gen_decode_seq(const struct kvp_gen *g, const uint32_t *table,
				      uint32_t n_table);

/* The decode step of kvp_gen_decode_seq() ran: one more position computed. */
void kvp_gen_decoded(struct kvp_gen *g);

struct kvp_draft;

/*
 * Speculative decoding (compute/draft.h), greedy: a decode step becomes the part
 * {last, d1 .. dk} at positions n_past .. n_past + k, with every row's logits
 * (kvp_fwd_part.n_logits).  Row i's pick is the token after row i's input; the caller
 * takes the picks in order through kvp_gen_take() (showing each) while the pick of row
 * i equals d(i+1) (kvp_gen_spec_agrees()), stops at the first that differs (it is kept:
 * the model's own next token) or when kvp_gen_take() ends the sequence, then calls
 * kvp_gen_spec_done() with the rows whose inputs stood.  The K/V the rejected rows
 * wrote stays past n_past: nothing reads a position beyond the query's own, and the
 * next step writes those positions again.
 */

/**
 * kvp_gen_spec_rows() - the rows of a speculative decode step
 * @d:    the sequence's draft source
 * @cap:  most drafts the caller's step has room for (block and budget limits)
 * @rows: out; room for 1 + min(cap, d->k) tokens: @last, then the drafts
 *
 * Needs @kept right after @prompt (one array: the history the drafts come from); else
 * no drafts.  Never drafts past what max_new still allows (the last allowed token is
 * never fed back).
 * Return: rows (1 = a plain decode row, no drafts).
 */
uint32_t kvp_gen_spec_rows(const struct kvp_gen *g, const struct kvp_draft *d, uint32_t cap,
			   int32_t *rows);

/* Whether row @i's pick @id makes row i + 1 of @rows (of @n) stand: it is the draft fed there. */
static inline bool kvp_gen_spec_agrees(const int32_t *rows, uint32_t n, uint32_t i, int32_t id)
{
	return i + 1 < n && rows[i + 1] == id;
}

/*
 * The verify step of @n_rows rows ran and the inputs of its first @n_valid rows (1 ..
 * n_rows) stood: that many more positions computed; @d learns that n_valid - 1 of
 * n_rows - 1 drafts passed.
 */
void kvp_gen_spec_done(struct kvp_gen *g, struct kvp_draft *d, uint32_t n_rows, uint32_t n_valid);

/*
 * Drafts a step may hold at position @pos for K/V of @dtype in blocks of @bt tokens:
 * unlimited (UINT32_MAX) for the float types; int8 keys are quantized when the call
 * writing a block's last row seals it, which a rejected draft could not take back, so
 * the rows stay inside pos's block short of its last row; int4's residual window moves
 * with the rows written, so none.
 */
uint32_t kvp_gen_spec_kv_cap(uint32_t dtype, uint32_t bt, uint32_t pos);

#endif /* KVP_COMPUTE_GEN_H */
