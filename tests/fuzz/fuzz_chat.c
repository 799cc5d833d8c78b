/* SPDX-License-Identifier: MIT */
/*
 * fuzz_chat.c - the chat templates (compute/text/chat.h): the input as a model's
 * tokenizer.chat_template to recognise, and as a conversation to render.  Byte 0 picks
 * the family and add_generation_prompt; then messages, each a role byte and its text up
 * to the next NUL (the codecs never pass a NUL in a message); with bit 0x20 the template
 * renders tools and the first message's text is the tools' JSON instead.  A tool call's
 * text is NAME\nARGUMENTS (as on the wire).  A rendered prompt is NUL-terminated at the
 * length returned.
 */
#include <stdlib.h>
#include <string.h>

#include "compute/text/chat.h"

#include "fuzz.h"

#define MAX_MSGS 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvp_chat_msg msgs[MAX_MSGS];
	struct kvp_chat_template t;
	struct kvp_chat_opts o = { .bos = "<s>", .eos = "</s>", .date = "26 Jul 2024" };
	char err[256], *out = NULL;
	size_t n = 0, len = 0;

	kvp_chat_template_detect(&t, (const char *)data, size, err, sizeof(err));
	if (!size)
		return 0;
	memset(&t, 0, sizeof(t));
	t.family = (enum kvp_chat_family)(data[0] % KVP_CHAT__COUNT);
	o.add_generation_prompt = data[0] & 0x80;
	if (data[0] & 0x40)
		memcpy(t.default_system, "You are kind.", 14);
	t.tools = data[0] & 0x20;
	for (size_t i = 1; i < size && n < MAX_MSGS;) {
		const uint8_t *end = memchr(data + i + 1, 0, size - i - 1);
		size_t stop = end ? (size_t)(end - data) : size;

		/* built in a local (GCC 12 under -fsanitize took msgs[n] for uninitialised) */
		struct kvp_chat_msg m = { .role = (enum kvp_chat_role)(data[i] % 5),
					  .content = (const char *)data + i + 1,
					  .len = stop - i - 1 };

		i = stop + 1;
		if (t.tools && !o.tools) {
			o.tools = m.content;
			o.tools_len = m.len;
			continue;
		}
		if (m.role == KVP_CHAT_TOOL_CALL) {
			const char *nl = memchr(m.content, '\n', m.len);

			m.name = m.content;
			m.name_len = nl ? (size_t)(nl - m.content) : m.len;
			m.content += nl ? m.name_len + 1 : m.len;
			m.len -= nl ? m.name_len + 1 : m.len;
		}
		msgs[n++] = m;
	}
	if (!kvp_chat_render(&out, &len, &t, msgs, n, &o, err, sizeof(err)) && out[len])
		__builtin_trap(); /* NUL-terminated at the length it returned */
	free(out);
	return 0;
}
