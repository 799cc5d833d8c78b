/* SPDX-License-Identifier: MIT */
/*
 * chat.h - render a conversation (system / user / assistant messages) into the prompt
 * text a chat model was trained on, as its tokenizer.chat_template would.
 *
 * There is no template engine here: the template's text is recognised as one of the
 * common families and rendered by a built-in formatter that gives, byte for byte, what
 * the real template gives under Jinja (tests/unit/test_chat.c checks each against
 * @huggingface/jinja on the families' published templates).  Variants a family's
 * templates differ in (a default system prompt, Llama 3.1's date header) are read from
 * the template text.  A template of no known family is an error naming the families,
 * so the caller can pick one by name (--chat-template NAME).
 *
 * The rendered text holds the template's special tokens as text ("<|eot_id|>", and
 * BOS when the template writes it): tokenize it with KVP_TOK_PARSE_SPECIAL and, when
 * the family writes BOS itself, KVP_TOK_NO_ADD_SPECIAL (kvp_chat_writes_bos()).
 * Pure functions of their arguments; any thread.
 */
#ifndef KVP_COMPUTE_TEXT_CHAT_H
#define KVP_COMPUTE_TEXT_CHAT_H

#include <stdbool.h>
#include <stddef.h>

enum kvp_chat_role {
	KVP_CHAT_SYSTEM,
	KVP_CHAT_USER,
	KVP_CHAT_ASSISTANT,
	KVP_CHAT_TOOL,	    /* a tool's result (the content as the tool gave it) */
	KVP_CHAT_TOOL_CALL, /* a call the assistant made: belongs to the assistant message
			     * before it (or the call before it); @name, and the arguments
			     * as JSON text in @content */
};

enum kvp_chat_family {
	KVP_CHAT_LLAMA3,   /* Llama 3 Instruct: <|start_header_id|>role<|end_header_id|> */
	KVP_CHAT_LLAMA31,  /* Llama 3.1: + a system header with "Cutting Knowledge Date" */
	KVP_CHAT_LLAMA32,  /* Llama 3.2: the same, dated today unless told */
	KVP_CHAT_CHATML,   /* <|im_start|>role\n...<|im_end|> (Qwen, SmolLM, Hermes) */
	KVP_CHAT_LLAMA2,   /* [INST] <<SYS>> ... <</SYS>> [/INST] */
	KVP_CHAT_MISTRAL,  /* [INST] ... [/INST], no system turn (v0.1/v0.2) */
	KVP_CHAT_PHI3,	   /* <|user|>\n...<|end|> */
	KVP_CHAT_GEMMA,	   /* <start_of_turn>user / model, no system turn */
	KVP_CHAT_ZEPHYR,   /* <|user|>\n...</s> (Zephyr, TinyLlama) */
	KVP_CHAT_DEEPSEEK, /* User: ... Assistant: ... (deepseek-llm chat) */
	KVP_CHAT_QWEN3,	   /* ChatML with <think> blocks and Qwen's tools (Qwen3) */
	KVP_CHAT_MISTRAL3, /* Mistral v0.3: [INST] ...[/INST], system text in the last turn,
			    * [AVAILABLE_TOOLS] / [TOOL_CALLS] / [TOOL_RESULTS] */
	KVP_CHAT_NEMO,	   /* Mistral Nemo: v0.3's without its spaces and trim */
	KVP_CHAT__COUNT
};

/*
 * struct kvp_chat_msg - one message; @content is @len bytes of UTF-8 (borrowed);
 * KVP_CHAT_TOOL_CALL: the function's @name (@name_len bytes), NULL for other roles;
 * KVP_CHAT_TOOL_CALL and KVP_CHAT_TOOL: the call's @id (@id_len bytes; the result's
 * tool_call_id), NULL when not given.  Only Mistral's templates write ids, and they
 * refuse a call or result whose id is missing or not 9 characters long.
 */
struct kvp_chat_msg {
	enum kvp_chat_role role;
	const char *content;
	size_t len;
	const char *name;
	size_t name_len;
	const char *id;
	size_t id_len;
};

#define KVP_CHAT_DEFAULT_SYSTEM_MAX 1024

/**
 * struct kvp_chat_template - a recognised template
 * @family:         how to render
 * @default_system: ChatML: the system turn the template adds when the conversation
 *                  has none (Qwen's "You are Qwen, ..."), "" for none
 * @tools:          the template renders tools, tool calls and tool results (Llama
 *                  3.1/3.2's JSON calls, Qwen2.5's <tool_call>, Mistral v0.3 / Nemo's
 *                  [TOOL_CALLS] with call ids); a conversation with any of them is
 *                  refused by the others
 */
struct kvp_chat_template {
	enum kvp_chat_family family;
	char default_system[KVP_CHAT_DEFAULT_SYSTEM_MAX];
	bool tools;
};

/**
 * struct kvp_chat_opts - what the template takes besides the messages
 * @bos, @eos: the vocabulary's BOS and EOS token text ("<s>", "<|eot_id|>"), or NULL
 * @date:      Llama 3.1/3.2's "Today Date" ("26 Jul 2024"); NULL: 3.1's fixed default,
 *             3.2's today (local time), as the templates do
 * @add_generation_prompt: end with the header of the assistant's turn
 * @tools, @tools_len: the tool definitions, a JSON array of OpenAI-shaped objects
 *             ({"type": "function", "function": {"name", "description", "parameters"}})
 *             as the templates' `tools` variable takes them; NULL: none given
 * @no_thinking: Qwen3's enable_thinking=false (an empty <think> block after the
 *             generation prompt); false: the variable undefined, as the template's default
 *
 * JSON the template writes with `tojson` (the tools, a call's arguments, Llama's tool
 * results) is re-serialised as @huggingface/jinja's tojson does: keys in their order,
 * ", " and ": " separators (",\n" + indent with indent=4), strings as JSON.stringify
 * escapes them (non-ASCII as is), numbers as JavaScript prints them (1.0 is 1).
 */
struct kvp_chat_opts {
	const char *bos;
	const char *eos;
	const char *date;
	bool add_generation_prompt;
	const char *tools;
	size_t tools_len;
	bool no_thinking;
};

/**
 * kvp_chat_template_detect() - recognise a tokenizer.chat_template
 * @out:  out; the family and its variant
 * @src, @len: the template's text
 * @err, @errlen: on -ENOTSUP, "chat: the model's chat template is not one kvpool knows
 *        (known: llama3, ...); choose one by name"
 * Return: 0 or -ENOTSUP.
 */
int kvp_chat_template_detect(struct kvp_chat_template *out, const char *src, size_t len, char *err,
			     size_t errlen);

/**
 * kvp_chat_template_named() - a family by name (an override of the model's template)
 * Return: 0, or -ENOTSUP with @err listing the names.
 */
int kvp_chat_template_named(struct kvp_chat_template *out, const char *name, char *err,
			    size_t errlen);

/* kvp_chat_family_name() - "llama3", "chatml", ...; kvp_chat_names() - all, comma-separated. */
const char *kvp_chat_family_name(enum kvp_chat_family f);
const char *kvp_chat_names(void);

/*
 * kvp_chat_tools_refused() - @err gets "chat: the model's chat template (NAME) does not
 * support tools" and the return is -EINVAL (for callers that refuse before rendering).
 */
int kvp_chat_tools_refused(const struct kvp_chat_template *t, char *err, size_t errlen);

/*
 * kvp_chat_reasons() - has the family's template a reasoning section (Qwen3's <think>
 * block, which enable_thinking turns on and off)?
 */
bool kvp_chat_reasons(const struct kvp_chat_template *t);

/*
 * kvp_chat_thinking_refused() - @err gets "chat: the model's chat template (NAME) has no
 * reasoning section: thinking cannot be enabled" and the return is -EINVAL.
 */
int kvp_chat_thinking_refused(const struct kvp_chat_template *t, char *err, size_t errlen);

/* kvp_chat_writes_bos() - does the family's template write BOS into the text itself? */
bool kvp_chat_writes_bos(const struct kvp_chat_template *t);

/**
 * kvp_chat_render() - the prompt text of a conversation
 * @out, @len: out; a malloc'd NUL-terminated string the caller frees, and its length
 * @t:     the template
 * @msgs:  @n messages, in order
 * @o:     special token text, date, add_generation_prompt
 * @err, @errlen: on -EINVAL, what the template refuses (its own words: "System role not
 *         supported", "Conversation roles must alternate user/assistant/...")
 * Return: 0, -EINVAL (a conversation the template refuses), -ENOMEM.
 */
int kvp_chat_render(char **out, size_t *len, const struct kvp_chat_template *t,
		    const struct kvp_chat_msg *msgs, size_t n, const struct kvp_chat_opts *o,
		    char *err, size_t errlen);

#endif /* KVP_COMPUTE_TEXT_CHAT_H */
