/* SPDX-License-Identifier: MIT */
/*
 * fuzz_proto.c - the wire frame decoders (ipc/proto.h), both directions: a frame header,
 * then its payload to the decoder of the header's type, as the daemon's loop
 * (ipc/ops.c) and the client library do: GENERATE and CHAT through the one request
 * decoder (cache control, sampling section, tools, messages; FIT_CONTEXT among the
 * flags), re-encoded when accepted; LOGPROBS and the first TOKEN's usage on the client's
 * side.  An input whose header is refused is still decoded: its first byte picks the
 * decoder, the rest is the payload.
 */
#include <string.h>

#include "ipc/proto.h"

#include "fuzz.h"

static const struct kvp_proto_limits lim = {
	.max_frame_bytes = 1u << 20,
	.max_prompt_tokens = 4096,
	.max_new_tokens = 4096,
	.max_text_bytes = 16384,
};

/* Touch every byte of @p[0 .. @n): ASan checks a decoder's pointers lie in the frame. */
static void touch(const void *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		fuzz_sink ^= ((const uint8_t *)p)[i];
}

/*
 * GENERATE and CHAT through the one request decoder, as ipc/ops.c does: every byte it
 * hands over touched (the prompt, context ids, sections, messages); an accepted request
 * encoded again must give back exactly the payload (the codec loses and invents nothing).
 */
static void request(uint32_t type, const uint8_t *p, size_t len)
{
	static struct kvp_proto_msg msgs[KVP_CHAT_MESSAGES_MAX];
	static uint8_t again[(1u << 20) + sizeof(struct kvp_frame_hdr)];
	struct kvp_gen_req r;
	const char *why = "";
	bool conn_fault;
	size_t n;

	if (kvp_proto_decode_request(type, p, len, &lim, &r, msgs, &conn_fault, &why))
		return;
	touch(r.ids, (size_t)r.n_ids * sizeof(int32_t));
	touch(r.text, r.text_bytes);
	touch(r.tools, r.tools_len);
	if (r.has_samp) {
		touch(r.samp.bias, (size_t)r.samp.hdr.n_bias * sizeof(struct kvp_logit_bias));
		touch(r.samp.schema, r.samp.hdr.schema_bytes);
	}
	for (uint32_t i = 0; i < r.n_messages; i++)
		touch(r.msgs[i].text, r.msgs[i].len);
	n = kvp_proto_encode_request(again, sizeof(again), 1, &r);
	if (n != sizeof(struct kvp_frame_hdr) + len ||
	    memcmp(again + sizeof(struct kvp_frame_hdr), p, len))
		__builtin_trap();
}

static void decode(uint32_t type, const uint8_t *p, size_t len)
{
	union {
		struct kvp_hello hello;
		struct kvp_welcome welcome;
		struct kvp_token token;
		struct kvp_usage usage;
		struct kvp_error error;
		struct kvp_tokenize tok;
		struct kvp_detokenize detok;
		struct kvp_ids ids;
		struct kvp_lease_req lreq;
		struct kvp_lease lease;
		struct kvp_pin pin;
		struct kvp_logprobs lp;
	} u;
	struct kvp_usage tu;
	struct kvp_cache_usage cu;
	struct kvp_spec_usage su;
	const void *body;
	const char *text, *why = "";
	int32_t cont;
	bool has_cu, has_su, has_u;

	switch (type) {
	case KVP_FRAME_HELLO:
		kvp_proto_decode_hello(p, len, &u.hello, &why);
		break;
	case KVP_FRAME_WELCOME:
		kvp_proto_decode_welcome(p, len, &u.welcome, &why);
		break;
	case KVP_FRAME_GENERATE:
	case KVP_FRAME_CHAT:
		request(type, p, len);
		break;
	case KVP_FRAME_TOKEN:
		/* without trailers, with a continuation only, with both */
		kvp_proto_decode_token(p, len, &u.token, &body, &text, NULL, NULL, NULL, &why);
		kvp_proto_decode_token(p, len, &u.token, &body, &text, &cont, NULL, NULL, &why);
		kvp_proto_decode_token(p, len, &u.token, &body, &text, &cont, &tu, &has_u, &why);
		break;
	case KVP_FRAME_LOGPROBS:
		if (!kvp_proto_decode_logprobs(p, len, &u.lp, &body, &why))
			touch(body, (size_t)u.lp.n_tokens * (1 + u.lp.n_top) *
					    sizeof(struct kvp_logprob));
		break;
	case KVP_FRAME_DONE:
		kvp_proto_decode_done(p, len, &u.usage, NULL, NULL, NULL, NULL, &why);
		kvp_proto_decode_done(p, len, &u.usage, &cu, &has_cu, &su, &has_su, &why);
		break;
	case KVP_FRAME_ERROR:
		kvp_proto_decode_error(p, len, &u.error, &text, &why);
		break;
	case KVP_FRAME_TOKENIZE:
		kvp_proto_decode_tokenize(p, len, &lim, &u.tok, &text, &why);
		break;
	case KVP_FRAME_DETOKENIZE:
		kvp_proto_decode_detokenize(p, len, &lim, &u.detok, &body, &why);
		break;
	case KVP_FRAME_IDS:
		kvp_proto_decode_ids(p, len, &u.ids, &body, &text, &why);
		break;
	case KVP_FRAME_LEASE:
		kvp_proto_decode_lease_req(p, len, &lim, &u.lreq, &body, &why);
		break;
	case KVP_FRAME_LEASED:
		kvp_proto_decode_lease(p, len, &u.lease, &body, &why);
		break;
	case KVP_FRAME_PIN:
	case KVP_FRAME_UNPIN:
		kvp_proto_decode_pin(p, len, &lim, &u.pin, &body, &why);
		break;
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvp_frame_hdr hdr;
	const char *why = "";

	if (!kvp_proto_check_hdr(data, size, lim.max_frame_bytes, &hdr, &why)) {
		size_t len = size - sizeof(hdr);

		/* the loop hands a decoder exactly len_bytes; a short read never gets here */
		if (hdr.len_bytes <= len)
			decode(hdr.type, data + sizeof(hdr), hdr.len_bytes);
	} else if (size) {
		decode(data[0] % KVP_FRAME__COUNT, data + 1, size - 1);
	}
	return 0;
}
