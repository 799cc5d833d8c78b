/* SPDX-License-Identifier: MIT */
/*
 * toolcall.h - tool calls read back out of a model's generated text.
 *
 * The forms the templates kvpool renders tools for (compute/text/chat.h) teach:
 *   Qwen2.5 (ChatML)  text, then one or more <tool_call>\n{"name": ..., "arguments": {...}}
 *                     \n</tool_call> blocks
 *   Llama 3.1 / 3.2   the whole answer one JSON object {"name": ..., "parameters": {...}}
 *   Mistral v0.3/Nemo [TOOL_CALLS] then a JSON array of {"name": ..., "arguments": {...}}
 *                     objects to the end; [TOOL_CALLS] is a control token, which the
 *                     generated text does not show, so the whole answer such an array
 *                     (text before a [TOOL_CALLS] written out is the content)
 * and a forced call (tool_choice required / named: the grammar writes one JSON object
 * {"name", "arguments"}) is the second form.  Both are looked for whatever the model's
 * family: kvpool-http does not know it, and neither form is ordinary prose.  A call is
 * taken only when every block parses, names a declared tool, and has an object (or a
 * string holding one) as its arguments; otherwise the text is the answer, unchanged, so
 * nothing the model wrote is dropped.  A call's arguments are the text the model wrote
 * for them (checked to be a JSON object), byte for byte: re-serialised, numbers would
 * change (0.1 printed as 0.10000000000000001).
 *
 * Pure functions; any thread.
 */
#ifndef KVP_IPC_HTTP_TOOLCALL_H
#define KVP_IPC_HTTP_TOOLCALL_H

#include <stdbool.h>
#include <stddef.h>

/* The opening tag of a Qwen-style call: streamed text stops before it. */
#define KVP_HTTP_CALL_TAG "<tool_call>"
/* Mistral's, when the vocabulary has it as text (a control token has none) */
#define KVP_HTTP_MISTRAL_TAG "[TOOL_CALLS]"

/* struct kvp_http_call - one call: the tool's name and its arguments as compact JSON */
struct kvp_http_call {
	char *name;
	char *args;
};

/**
 * struct kvp_http_calls - a parsed answer
 * @v, @n:    the calls, in order (owned)
 * @content:  the text outside them, whitespace-trimmed (owned, NUL-terminated; may be "")
 */
struct kvp_http_calls {
	struct kvp_http_call *v;
	size_t n;
	char *content;
	size_t content_len;
};

/**
 * kvp_http_calls_parse() - the calls in @text (@len bytes) of tools @names (@n_names)
 * Return: 1 (calls found: @out filled), 0 (none: the text is the answer, @out empty),
 * -ENOMEM.
 */
int kvp_http_calls_parse(struct kvp_http_calls *out, const char *text, size_t len,
			 const char *const *names, size_t n_names);

void kvp_http_calls_free(struct kvp_http_calls *c);

/* Bytes of a call id as kvpoold gets it, and its NUL. */
#define KVP_HTTP_CALL_ID9 10

/*
 * kvp_http_call_id9() - the call id kvpoold renders for @id (@len bytes): Mistral's
 * templates take only ids of 9 characters (their models were trained on 9 letters and
 * digits), the APIs' are longer ("call_...", "toolu_..."), so an id that is not 9
 * ASCII letters and digits goes as 9 base-62 digits of its 64-bit XXH3 hash: a call and
 * the result that names it get the same one, turn after turn (so the prompt, and its
 * cached prefix, stay the same).  Templates without ids never see it.
 */
void kvp_http_call_id9(const char *id, size_t len, char out[KVP_HTTP_CALL_ID9]);

/*
 * Streaming: how many leading bytes of the text so far (@len) may go out as content
 * now.  0 while it is only whitespace or starts with '{' or '[' (a JSON call or a
 * Mistral array may follow); up to the first KVP_HTTP_CALL_TAG or KVP_HTTP_MISTRAL_TAG,
 * or before a tail that may begin one, otherwise.
 * *@call_started: a call's start was seen: nothing after the returned length goes out
 * before the end.
 */
size_t kvp_http_calls_safe_prefix(const char *text, size_t len, bool *call_started);

/*
 * Streaming a forced call (tool_choice required / named: the grammar writes
 * {"name": NAME, "arguments": {...}} with the properties in that order, lightly spaced):
 * kvp_http_calls_head() reads the call's head from the text so far.  Return: 1 (*@name
 * the index of the tool in @names, *@args the offset of the arguments' first byte), 0
 * (not yet whole: more text may make it one), -1 (the text is not such a call).
 */
int kvp_http_calls_head(const char *text, size_t len, const char *const *names, size_t n_names,
			size_t *name, size_t *args);

/*
 * The end of the arguments value starting at offset @args of the text so far: its
 * offset past the closing bracket once written, else @len (every byte so far is inside
 * it).  Bytes @args to the return are the arguments' text kvp_http_calls_parse() gives
 * when the call completes.
 */
size_t kvp_http_calls_args_end(const char *text, size_t len, size_t args);

#endif /* KVP_IPC_HTTP_TOOLCALL_H */
