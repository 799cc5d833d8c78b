/* SPDX-License-Identifier: MIT */
/*
 * fuzz_http_head.c - kvpool-http's own request-head checks (ipc/http/head.h) on raw
 * bytes as the gate peeks them: the whole input, and shorter reads of an accepted head
 * (a head that is acceptable whole was never refused, nor taken as complete, on a
 * prefix: the gate decides on what has arrived so far); then the input's lines as
 * header fields to the field-by-field framing rules the handler uses.
 */
#include <string.h>

#include "ipc/http/head.h"

#include "fuzz.h"

#define MAX_HEAD 8192

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvp_http_framing f = KVP_HTTP_FRAMING_INIT;
	const char *p = (const char *)data;
	struct kvp_http_head h;
	int r = kvp_http_head_check(p, size, MAX_HEAD, &h);

	if (r == 1) {
		struct kvp_http_head hp;
		size_t cut[2] = { h.len - 1, h.len / 2 };

		if (!h.len || h.len > size || h.len > MAX_HEAD)
			__builtin_trap();
		for (int i = 0; i < 2; i++)
			if (kvp_http_head_check(p, cut[i], MAX_HEAD, &hp) != 0)
				__builtin_trap(); /* a prefix of a sound head is incomplete */
	} else if (r == -1 && (!h.status || !h.why)) {
		__builtin_trap(); /* a refusal names its status and reason */
	}
	kvp_http_reason(h.status);
	for (size_t i = 0; i < size;) {
		const char *nl = memchr(p + i, '\n', size - i);
		size_t end = nl ? (size_t)(nl - p) : size;
		const char *colon = memchr(p + i, ':', end - i);

		if (colon) {
			size_t v = (size_t)(colon - p) + 1;

			kvp_http_framing_add(&f, p + i, (size_t)(colon - p) - i, p + v, end - v);
		}
		i = end + 1;
	}
	if (kvp_http_framing_end(&f, size && (data[0] & 1)) && !f.why)
		__builtin_trap();
	return 0;
}
