/* SPDX-License-Identifier: MIT */
/*
 * convo_bp.h - cache breakpoints given as message counts turned into prompt-token
 * positions.
 *
 * A client of CHAT cannot know where a message ends in the prompt's ids: the daemon
 * renders the template and tokenizes.  So a breakpoint may name a message count k (the
 * prefix ending after the k-th message), and the daemon maps it: it renders the first k
 * messages as a conversation of their own (same template, same context when the
 * context lies within them; no generation prompt, so the text ends with message k's
 * turn: "<|im_end|>\n", "<|eot_id|>"), tokenizes it, and takes the longest common
 * prefix of those ids with the full prompt's.  The common prefix, rather than the
 * length of the shorter prompt, keeps the position inside the prompt whatever the
 * template writes differently at the end of a conversation (a turn-end it leaves out,
 * a system prompt it folds into the next message): it stops where they part.
 *
 * Pure functions of their arguments; any thread.
 */
#ifndef KVP_COMPUTE_CONVO_BP_H
#define KVP_COMPUTE_CONVO_BP_H

#include <stddef.h>
#include <stdint.h>

#include "compute/convo.h"
#include "compute/text/chat.h"

struct kvp_tokenizer;

/**
 * kvp_convo_breakpoints() - map message breakpoints onto prompt-token positions
 * @bps:     in: @n message counts, strictly increasing, each in [1, cv->n_msgs];
 *           out: *@n token positions, strictly increasing, each in [1, @n_ids]
 * @weights: in/out, beside @bps (may be NULL): when two message breakpoints land on the
 *           same position they become one, keeping the larger weight (a TTL)
 * @n:       in/out; how many
 * @tok, @tmpl, @cv: the conversation as given to kvp_convo_prompt()
 * @ids, @n_ids: its prompt (kvp_convo_prompt()'s answer for @cv)
 * @max_ids: as for kvp_convo_prompt()
 * @err, @errlen: why, on -EINVAL
 *
 * First k messages the template does not render on their own, or renders to no ids
 * (Llama 2 writes the system prompt inside the next user turn), end at position 1.
 *
 * Return: 0; -EINVAL (a count out of range or not increasing), -E2BIG, -ENOMEM.  On
 * error @bps, @weights and @n are unchanged.
 */
int kvp_convo_breakpoints(uint32_t *bps, uint32_t *weights, uint32_t *n,
			  const struct kvp_tokenizer *tok, const struct kvp_chat_template *tmpl,
			  const struct kvp_convo *cv, const int32_t *ids, uint32_t n_ids,
			  uint32_t max_ids, char *err, size_t errlen);

#endif /* KVP_COMPUTE_CONVO_BP_H */
