/* SPDX-License-Identifier: MIT */
/*
 * fuzz_http_api.c - kvpool-http's request bodies (ipc/http/api.h): byte 0 picks the
 * endpoint (completions, chat completions, messages, tokenize, detokenize,
 * count_tokens) and whether token ids are checked against a vocabulary; the rest is the
 * JSON body.  A refusal is a 400 with a message; whatever was parsed is freed.
 */
#include <errno.h>

#include "ipc/http/api.h"

#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvp_http_gen g = { 0 };
	struct kvp_http_err err = { 0 };
	int r;

	if (!size)
		return 0;
	r = kvp_http_parse(&g, (enum kvp_http_api)(data[0] % 6), (const char *)data + 1, size - 1,
			   (data[0] & 0x80) ? 128256 : 0, &err);
	if (r == -EINVAL && (err.status < 400 || err.status > 499))
		__builtin_trap(); /* a bad request is answered 4xx */
	kvp_http_gen_deinit(&g);
	return 0;
}
