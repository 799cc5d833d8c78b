/* SPDX-License-Identifier: MIT */
/*
 * sampling.h - a request's sampling section (docs/protocol.md, "Sampling") turned into
 * what the engine's sampler takes: the bias entries checked against the vocabulary, the
 * grammar compiled.  Made on the loop thread when the frame arrives (a schema that does
 * not compile is refused then, with the keyword's name), handed to the engine with the
 * request (struct kvp_sched_req.samp), freed by whoever holds it last.
 */
#ifndef KVP_ENGINE_SAMPLING_H
#define KVP_ENGINE_SAMPLING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvpool/proto.h"

struct kvp_grammar;

/**
 * struct kvp_sched_sampling - one request's
 * @grammar:  compiled (owned), or NULL
 * @logprobs, @top_logprobs, @presence, @frequency: as struct kvp_sampling
 * @n_bias, @bias_ids, @bias: the logit bias entries
 * @think_budget: the reasoning section's budget (0: none), its bounds' ids
 *          @think_open, @think_close (kvp_sched_sampling_think())
 */
struct kvp_sched_sampling {
	struct kvp_grammar *grammar;
	uint32_t think_budget;
	int32_t think_open, think_close;
	bool logprobs;
	uint32_t top_logprobs;
	float presence, frequency;
	uint32_t n_bias;
	int32_t bias_ids[KVP_LOGIT_BIAS_MAX];
	float bias[KVP_LOGIT_BIAS_MAX];
};

/**
 * kvp_sched_sampling_new() - from a decoded section (values checked by ipc/)
 * @hdr:     the section's fixed part
 * @bias:    @hdr->n_bias struct kvp_logit_bias (unaligned: copied before reading)
 * @schema:  @hdr->schema_bytes of schema text when the grammar is a schema
 * @n_vocab: bias ids must be below it
 * @why, @why_cap: the refusal in words
 * Return: 0; -EINVAL (a bias id past the vocabulary, a schema refused); -ENOMEM.
 */
int kvp_sched_sampling_new(struct kvp_sched_sampling **out, const struct kvp_sampling *hdr,
			   const void *bias, const char *schema, uint32_t n_vocab, char *why,
			   size_t why_cap);

/* NULL is a no-op. */
void kvp_sched_sampling_free(struct kvp_sched_sampling *ss);

struct kvp_sampler;
struct kvp_tokenizer;

/*
 * kvp_sched_sampling_think() - with a think_budget, the ids of the reasoning section's
 * bounds in @tok ("<think>", "</think>", as Qwen3 and the reasoning models after it
 * write them).  Return: 0; -EINVAL (no such tokens: @why says so).
 */
int kvp_sched_sampling_think(struct kvp_sched_sampling *ss, const struct kvp_tokenizer *tok,
			     char *why, size_t why_cap);
struct kvp_grammar_vocab;

/**
 * kvp_sched_sampling_apply() - give a new sampler @ss's extras
 * @gv:    the engine's grammar vocabulary, built from @tok on first use (the ids of
 *         control, unknown and unused tokens and the @eog ids have no bytes in it);
 *         freed with kvp_grammar_vocab_free() by the engine
 * @eog, @n_eog: the end-of-generation ids (allowed where the grammar's value is whole)
 * Return: 0, -EINVAL, -ENOMEM.
 */
int kvp_sched_sampling_apply(struct kvp_sampler *smp, const struct kvp_sched_sampling *ss,
			     struct kvp_grammar_vocab **gv, const struct kvp_tokenizer *tok,
			     const int32_t *eog, size_t n_eog);

#endif /* KVP_ENGINE_SAMPLING_H */
