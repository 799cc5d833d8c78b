/* SPDX-License-Identifier: MIT */
/*
 * sampling.c - a sampling section into struct kvp_sched_sampling (svc/engine/sampling.h).
 */
#include "svc/engine/sampling.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include "compute/grammar.h"
#include "compute/sample.h"
#include "compute/text/tokenizer.h"

void kvp_sched_sampling_free(struct kvp_sched_sampling *ss)
{
	if (!ss)
		return;
	kvp_grammar_free(ss->grammar);
	free(ss);
}

int kvp_sched_sampling_new(struct kvp_sched_sampling **out, const struct kvp_sampling *hdr,
			   const void *bias, const char *schema, uint32_t n_vocab, char *why,
			   size_t why_cap)
{
	struct kvp_sched_sampling *ss;
	char err[256];
	int r = 0;

	*out = NULL;
	ss = calloc(1, sizeof(*ss));
	if (!ss)
		return -ENOMEM;
	ss->logprobs = hdr->flags & KVP_SAMP_LOGPROBS;
	ss->top_logprobs = hdr->top_logprobs;
	ss->presence = hdr->presence_penalty;
	ss->frequency = hdr->frequency_penalty;
	ss->n_bias = hdr->n_bias;
	ss->think_budget = hdr->flags & KVP_SAMP_THINK_BUDGET ? hdr->think_budget : 0;
	for (uint32_t i = 0; i < ss->n_bias; i++) {
		struct kvp_logit_bias b;

		memcpy(&b, (const uint8_t *)bias + i * sizeof(b), sizeof(b));
		if (b.id < 0 || (uint32_t)b.id >= n_vocab) {
			snprintf(why, why_cap,
				 "logit_bias: token id %d is not in the vocabulary (%u)", b.id,
				 n_vocab);
			kvp_sched_sampling_free(ss);
			return -EINVAL;
		}
		ss->bias_ids[i] = b.id;
		ss->bias[i] = b.bias;
	}
	if (hdr->grammar == KVP_GRAMMAR_JSON_OBJECT) {
		r = kvp_grammar_any_object(&ss->grammar);
	} else if (hdr->grammar == KVP_GRAMMAR_JSON_SCHEMA) {
		r = kvp_grammar_compile(&ss->grammar, schema, hdr->schema_bytes, err, sizeof(err));
		if (r == -EINVAL)
			snprintf(why, why_cap, "json_schema: %s", err);
	}
	if (r) {
		kvp_sched_sampling_free(ss);
		return r;
	}
	*out = ss;
	return 0;
}

/* The grammar's view of @tok: each token's bytes, none for those never written as text. */
static int vocab_build(struct kvp_grammar_vocab **out, const struct kvp_tokenizer *tok,
		       const int32_t *eog, size_t n_eog)
{
	uint32_t n = kvp_tokenizer_n_vocab(tok);
	const char **pieces = calloc(n, sizeof(*pieces));
	size_t *lens = calloc(n, sizeof(*lens));
	int r = -ENOMEM;

	if (pieces && lens) {
		for (uint32_t i = 0; i < n; i++) {
			int type = kvp_tokenizer_type(tok, (int32_t)i);

			if (type == KVP_TOK_CONTROL || type == KVP_TOK_UNKNOWN ||
			    type == KVP_TOK_UNUSED)
				continue;
			pieces[i] = kvp_tokenizer_piece(tok, (int32_t)i, &lens[i]);
		}
		for (size_t i = 0; i < n_eog; i++)
			if (eog[i] >= 0 && (uint32_t)eog[i] < n)
				pieces[eog[i]] = NULL;
		r = kvp_grammar_vocab_new(out, n, pieces, lens);
	}
	free(pieces);
	free(lens);
	return r;
}

int kvp_sched_sampling_think(struct kvp_sched_sampling *ss, const struct kvp_tokenizer *tok,
			     char *why, size_t why_cap)
{
	if (!ss->think_budget)
		return 0;
	ss->think_open = tok ? kvp_tokenizer_find(tok, "<think>", 7) : -1;
	ss->think_close = tok ? kvp_tokenizer_find(tok, "</think>", 8) : -1;
	if (ss->think_open >= 0 && ss->think_close >= 0)
		return 0;
	snprintf(why, why_cap,
		 "sampling: a reasoning budget needs <think> and </think> tokens, and the "
		 "model's vocabulary has no %s",
		 ss->think_open < 0 ? "<think>" : "</think>");
	return -EINVAL;
}

int kvp_sched_sampling_apply(struct kvp_sampler *smp, const struct kvp_sched_sampling *ss,
			     struct kvp_grammar_vocab **gv, const struct kvp_tokenizer *tok,
			     const int32_t *eog, size_t n_eog)
{
	static pthread_mutex_t build_lock = PTHREAD_MUTEX_INITIALIZER;
	struct kvp_sample_extra x = { .bias_ids = ss->bias_ids,
				      .bias = ss->bias,
				      .n_bias = ss->n_bias,
				      .presence = ss->presence,
				      .frequency = ss->frequency,
				      .logprobs = ss->logprobs,
				      .top_logprobs = ss->top_logprobs,
				      .eog = eog,
				      .n_eog = (uint32_t)n_eog,
				      .think_open = ss->think_open,
				      .think_close = ss->think_close,
				      .think_budget = ss->think_budget };
	int r = 0;

	if (ss->grammar) {
		if (!tok)
			return -EINVAL;
		pthread_mutex_lock(&build_lock);
		if (!*gv)
			r = vocab_build(gv, tok, eog, n_eog);
		pthread_mutex_unlock(&build_lock);
		if (r)
			return r;
		x.grammar = ss->grammar;
		x.vocab = *gv;
	}
	return kvp_sampler_set_extra(smp, &x);
}
