/* SPDX-License-Identifier: MIT */
/*
 * convo.h - the token ids of a chat conversation's prompt: render the messages with a
 * chat template (compute/text/chat.h), tokenize the text with special tokens parsed,
 * and, on later turns, continue on the exact ids the conversation already has.
 *
 * A first turn (no context) is rendered whole with the generation prompt and tokenized
 * with KVP_TOK_PARSE_SPECIAL; BOS is left to the template when it writes it
 * (kvp_chat_writes_bos()), else added as the vocabulary says.
 *
 * A later turn comes with @context: the ids of the conversation up to and including
 * the content of an assistant message (the prompt the daemon built for it plus the ids
 * it generated).  Re-tokenizing the generated text would not give those ids back (BPE
 * may split it differently, templates trim it), and the K/V cached for them is only
 * found again with exactly those ids.  So the conversation is rendered with that
 * message's content replaced by a marker that no message can hold (bytes that are never
 * UTF-8), and only the text after the marker (the template's end of that turn, the
 * new messages, the generation prompt) is tokenized and appended to the context, as a
 * continuation (KVP_TOK_CONTINUE: no SentencePiece word-start space at its start).
 *
 * Pure functions of their arguments; any thread.
 */
#ifndef KVP_COMPUTE_CONVO_H
#define KVP_COMPUTE_CONVO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "compute/text/chat.h"

struct kvp_tokenizer;

/**
 * struct kvp_convo - a conversation to turn into prompt ids
 * @msgs, @n_msgs:  the messages, in order (well-formed UTF-8: the marker relies on it)
 * @context:        @n_context ids of the conversation so far, or NULL / 0
 * @context_msgs:   messages @context covers; message @context_msgs - 1 is an assistant
 *                  message and the context ends after its content (0 without context)
 * @date:           Llama 3.1/3.2's "Today Date", or NULL (see struct kvp_chat_opts)
 * @no_generation_prompt: end after the last message, without the header of the
 *                  assistant's turn (a prefix of a longer conversation, convo_bp.h)
 * @tools, @tools_len: the tool definitions (JSON array text), or NULL (chat.h)
 * @no_thinking:    Qwen3's enable_thinking=false (struct kvp_chat_opts)
 */
struct kvp_convo {
	const struct kvp_chat_msg *msgs;
	size_t n_msgs;
	const int32_t *context;
	uint32_t n_context;
	uint32_t context_msgs;
	const char *date;
	bool no_generation_prompt;
	const char *tools;
	size_t tools_len;
	bool no_thinking;
};

/**
 * kvp_convo_prompt() - the prompt ids of @cv for the assistant's next reply
 * @ids:     out; malloc()ed ids (the caller frees them), set only on success
 * @n_ids:   out; how many (>= 1)
 * @max_ids: more ids than this is -E2BIG
 * @err, @errlen: why, on -EINVAL
 * Return: 0; -EINVAL (the template refuses the conversation, with its words; a context
 * that does not end in an assistant message; nothing to generate from); -E2BIG; -ENOMEM.
 */
int kvp_convo_prompt(int32_t **ids, uint32_t *n_ids, const struct kvp_tokenizer *tok,
		     const struct kvp_chat_template *tmpl, const struct kvp_convo *cv,
		     uint32_t max_ids, char *err, size_t errlen);

#endif /* KVP_COMPUTE_CONVO_H */
