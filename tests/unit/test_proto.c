/* SPDX-License-Identifier: MIT */
/*
 * test_proto.c - the wire codec (ipc/proto.c): every encoder round-trips through its
 * decoder, and every class of malformed frame is refused with the right status.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "ipc/proto.h"

static const struct kvp_proto_limits lim = {
	.max_frame_bytes = 4096,
	.max_prompt_tokens = 64,
	.max_new_tokens = 100,
};

static struct kvp_generate gen(uint32_t n_tokens)
{
	return (struct kvp_generate){ .n_tokens = n_tokens,
				      .max_new_tokens = 10,
				      .top_p = 1.0f,
				      .temperature = 0.7f,
				      .top_k = 40,
				      .seed = 1234 };
}

/* Encode @g + @body, check the header, decode the payload. */
static int roundtrip(const struct kvp_generate *g, const void *body, struct kvp_generate *out,
		     const void **out_body)
{
	uint8_t frame[8192];
	struct kvp_frame_hdr h;
	const char *why = NULL;
	size_t n = kvp_proto_encode_generate(frame, sizeof(frame), 42, g, body);
	int r;

	assert_true(n <= sizeof(frame));
	r = kvp_proto_check_hdr(frame, n, lim.max_frame_bytes, &h, &why);
	if (r)
		return r;
	assert_int_equal(h.type, KVP_FRAME_GENERATE);
	assert_int_equal(h.req_id, 42);
	assert_int_equal(h.len_bytes + sizeof(h), n);
	r = kvp_proto_decode_generate(frame + sizeof(h), h.len_bytes, &lim, out, out_body, &why);
	if (r)
		assert_non_null(why);
	return r;
}

static void test_generate_roundtrip(void **state)
{
	/* every field and the ids survive encode/decode; text prompts too */
	int32_t ids[5] = { 0, 1, 2, 99999, 7 };
	struct kvp_generate g = gen(5), out;
	const void *body;

	g.salt_len = 3;
	memcpy(g.salt, "abc", 3);
	g.flags = KVP_GEN_NO_CACHE;
	assert_int_equal(roundtrip(&g, ids, &out, &body), KVP_OK);
	assert_memory_equal(&out, &g, sizeof(g));
	assert_memory_equal(body, ids, sizeof(ids));

	g = gen(0);
	g.flags = KVP_GEN_TEXT;
	g.text_bytes = 5;
	assert_int_equal(roundtrip(&g, "hello", &out, &body), KVP_OK);
	assert_memory_equal(body, "hello", 5);
}

static void test_daemon_frames_roundtrip(void **state)
{
	/* WELCOME, TOKEN, DONE, ERROR decode to what was encoded */
	uint8_t frame[1024];
	struct kvp_frame_hdr h;
	const char *why, *text, *msg;
	const void *ids;
	struct kvp_welcome w = { .n_vocab = 32000,
				 .n_ctx = 2048,
				 .n_fds = 1,
				 .segment_bytes = 1 << 30,
				 .model = "demo" },
			   w2;
	struct kvp_usage u = { .prompt_tokens = 100, .cached_tokens = 96, .ttft_ms = 3.25 }, u2;
	struct kvp_token t;
	struct kvp_error e;
	int32_t tok[2] = { 5, -1 };
	size_t n;

	n = kvp_proto_encode_welcome(frame, sizeof(frame), &w);
	assert_int_equal(kvp_proto_check_hdr(frame, n, 4096, &h, &why), KVP_OK);
	assert_int_equal(kvp_proto_decode_welcome(frame + 24, h.len_bytes, &w2, &why), KVP_OK);
	assert_memory_equal(&w, &w2, sizeof(w));

	n = kvp_proto_encode_token(frame, sizeof(frame), 9, tok, 2, "ab", 2);
	assert_int_equal(n, 24 + 8 + 8 + 2);
	assert_int_equal(kvp_proto_check_hdr(frame, n, 4096, &h, &why), KVP_OK);
	assert_int_equal(kvp_proto_decode_token(frame + 24, h.len_bytes, &t, &ids, &text, &why),
			 KVP_OK);
	assert_int_equal(t.n_tokens, 2);
	assert_memory_equal(ids, tok, 8);
	assert_memory_equal(text, "ab", 2);

	n = kvp_proto_encode_done(frame, sizeof(frame), 9, &u);
	assert_int_equal(kvp_proto_check_hdr(frame, n, 4096, &h, &why), KVP_OK);
	assert_int_equal(kvp_proto_decode_done(frame + 24, h.len_bytes, &u2, &why), KVP_OK);
	assert_memory_equal(&u, &u2, sizeof(u));

	n = kvp_proto_encode_error(frame, sizeof(frame), 0, KVP_E_BUSY, "full", 4);
	assert_int_equal(kvp_proto_check_hdr(frame, n, 4096, &h, &why), KVP_OK);
	assert_int_equal(kvp_proto_decode_error(frame + 24, h.len_bytes, &e, &msg, &why), KVP_OK);
	assert_int_equal(e.status, KVP_E_BUSY);
	assert_memory_equal(msg, "full", 4);
}

static void test_encoder_reports_needed_size(void **state)
{
	/* like snprintf: too small a buffer is untouched and the needed length returned */
	uint8_t frame[16];
	struct kvp_usage u = { 0 };

	memset(frame, 0xaa, sizeof(frame));
	assert_int_equal(kvp_proto_encode_done(frame, sizeof(frame), 1, &u), 24 + 72);
	assert_int_equal(frame[0], 0xaa);
}

static void test_bad_headers(void **state)
{
	/* magic, version, type, flags, frame size: each refused with its class */
	struct kvp_frame_hdr ok, h, out;
	const char *why;

	kvp_proto_hdr_init(&ok, KVP_FRAME_CANCEL, 1, 0);
	assert_int_equal(kvp_proto_check_hdr(&ok, sizeof(ok), 4096, &out, &why), KVP_OK);
	assert_int_equal(kvp_proto_check_hdr(&ok, sizeof(ok) - 1, 4096, &out, &why), KVP_E_PROTO);
	h = ok, h.magic ^= 1;
	assert_int_equal(kvp_proto_check_hdr(&h, sizeof(h), 4096, &out, &why), KVP_E_PROTO);
	h = ok, h.version = 1; /* version 1 clients: a clear error, not garbage */
	assert_int_equal(kvp_proto_check_hdr(&h, sizeof(h), 4096, &out, &why), KVP_E_VERSION);
	h = ok, h.version = 3;
	assert_int_equal(kvp_proto_check_hdr(&h, sizeof(h), 4096, &out, &why), KVP_E_VERSION);
	h = ok, h.type = KVP_FRAME__COUNT;
	assert_int_equal(kvp_proto_check_hdr(&h, sizeof(h), 4096, &out, &why), KVP_E_PROTO);
	h = ok, h.flags = 1;
	assert_int_equal(kvp_proto_check_hdr(&h, sizeof(h), 4096, &out, &why), KVP_E_PROTO);
	h = ok, h.len_bytes = 4096 - 24;
	assert_int_equal(kvp_proto_check_hdr(&h, sizeof(h), 4096, &out, &why), KVP_OK);
	h.len_bytes++;
	assert_int_equal(kvp_proto_check_hdr(&h, sizeof(h), 4096, &out, &why), KVP_E_LIMIT);
	h.len_bytes = UINT32_MAX; /* no wrap-around in the size check */
	assert_int_equal(kvp_proto_check_hdr(&h, sizeof(h), UINT32_MAX, &out, &why), KVP_E_LIMIT);
}

static void test_bad_generate_payloads(void **state)
{
	/* structure -> PROTO, maxima -> LIMIT, values -> INVALID */
	int32_t ids[80] = { 0 };
	uint8_t raw[2048] = { 0 };
	struct kvp_generate g, out;
	const void *body;
	const char *why;

	/* shorter than the struct */
	assert_int_equal(kvp_proto_decode_generate(raw, sizeof(g) - 1, &lim, &out, &body, &why),
			 KVP_E_PROTO);
	/* n_tokens beyond the payload; trailing bytes */
	g = gen(4);
	memcpy(raw, &g, sizeof(g));
	assert_int_equal(kvp_proto_decode_generate(raw, sizeof(g) + 15, &lim, &out, &body, &why),
			 KVP_E_PROTO);
	assert_int_equal(kvp_proto_decode_generate(raw, sizeof(g) + 17, &lim, &out, &body, &why),
			 KVP_E_PROTO);
	assert_int_equal(kvp_proto_decode_generate(raw, sizeof(g) + 16, &lim, &out, &body, &why),
			 KVP_OK);
	/* huge n_tokens: the size computation must not wrap */
	g = gen(UINT32_MAX);
	memcpy(raw, &g, sizeof(g));
	assert_int_equal(kvp_proto_decode_generate(raw, sizeof(g) + 16, &lim, &out, &body, &why),
			 KVP_E_PROTO);

	g = gen(4), g.flags = 0x4;
	assert_int_equal(roundtrip(&g, ids, &out, &body), KVP_E_PROTO);
	g = gen(4), g.salt_len = KVP_SALT_MAX + 1;
	assert_int_equal(roundtrip(&g, ids, &out, &body), KVP_E_PROTO);
	g = gen(4), g.salt_len = 2, g.salt[5] = 1; /* padding not zero */
	assert_int_equal(roundtrip(&g, ids, &out, &body), KVP_E_PROTO);
	g = gen(4), g.salt_len = KVP_SALT_MAX, memset(g.salt, 7, KVP_SALT_MAX);
	assert_int_equal(roundtrip(&g, ids, &out, &body), KVP_OK);
	g = gen(0); /* neither tokens nor text */
	assert_int_equal(roundtrip(&g, ids, &out, &body), KVP_E_PROTO);
	g = gen(4), g.text_bytes = 3; /* both */
	memcpy(raw, &g, sizeof(g));
	memset(raw + sizeof(g), 'a', 19);
	assert_int_equal(kvp_proto_decode_generate(raw, sizeof(g) + 19, &lim, &out, &body, &why),
			 KVP_E_PROTO);
	g.flags = KVP_GEN_TEXT;
	memcpy(raw, &g, sizeof(g));
	assert_int_equal(kvp_proto_decode_generate(raw, sizeof(g) + 3, &lim, &out, &body, &why),
			 KVP_E_PROTO);

	g = gen(65);
	assert_int_equal(roundtrip(&g, ids, &out, &body), KVP_E_LIMIT);
	g = gen(0), g.flags = KVP_GEN_TEXT, g.text_bytes = 65;
	memset(raw, 'a', 65);
	assert_int_equal(roundtrip(&g, raw, &out, &body), KVP_E_LIMIT);
	g = gen(4), g.max_new_tokens = 101;
	assert_int_equal(roundtrip(&g, ids, &out, &body), KVP_E_LIMIT);

	g = gen(4), g.max_new_tokens = 0;
	assert_int_equal(roundtrip(&g, ids, &out, &body), KVP_E_INVALID);
	g = gen(4), g.temperature = NAN;
	assert_int_equal(roundtrip(&g, ids, &out, &body), KVP_E_INVALID);
	g = gen(4), g.temperature = INFINITY;
	assert_int_equal(roundtrip(&g, ids, &out, &body), KVP_E_INVALID);
	g = gen(4), g.temperature = -0.5f;
	assert_int_equal(roundtrip(&g, ids, &out, &body), KVP_E_INVALID);
	g = gen(4), g.top_p = 0.0f;
	assert_int_equal(roundtrip(&g, ids, &out, &body), KVP_E_INVALID);
	g = gen(4), g.top_p = 1.01f;
	assert_int_equal(roundtrip(&g, ids, &out, &body), KVP_E_INVALID);
	g = gen(4), g.top_p = NAN;
	assert_int_equal(roundtrip(&g, ids, &out, &body), KVP_E_INVALID);
	g = gen(0), g.flags = KVP_GEN_TEXT, g.text_bytes = 3;
	assert_int_equal(roundtrip(&g, "a\0b", &out, &body), KVP_E_INVALID);
}

static void test_bad_daemon_payloads(void **state)
{
	/* the client's decoders refuse short, long and inconsistent payloads */
	uint8_t raw[256] = { 0 };
	struct kvp_welcome w = { 0 };
	struct kvp_hello h = { 0 };
	struct kvp_token t = { .n_tokens = 2, .text_bytes = 3 };
	struct kvp_error e = { .status = 1, .msg_bytes = 10 };
	struct kvp_usage u;
	const void *ids;
	const char *text, *why;

	assert_int_equal(kvp_proto_decode_welcome(raw, sizeof(w) - 1, &w, &why), KVP_E_PROTO);
	w.n_fds = 2;
	memcpy(raw, &w, sizeof(w));
	assert_int_equal(kvp_proto_decode_welcome(raw, sizeof(w), &w, &why), KVP_E_PROTO);
	memset(raw, 0, sizeof(raw));
	assert_int_equal(kvp_proto_decode_hello(raw, sizeof(h) + 1, &h, &why), KVP_E_PROTO);
	raw[0] = 2; /* unknown HELLO flag */
	assert_int_equal(kvp_proto_decode_hello(raw, sizeof(h), &h, &why), KVP_E_PROTO);
	memcpy(raw, &t, sizeof(t));
	assert_int_equal(kvp_proto_decode_token(raw, 8 + 8 + 2, &t, &ids, &text, &why),
			 KVP_E_PROTO);
	assert_int_equal(kvp_proto_decode_token(raw, 8 + 8 + 4, &t, &ids, &text, &why),
			 KVP_E_PROTO);
	assert_int_equal(kvp_proto_decode_token(raw, 8 + 8 + 3, &t, &ids, &text, &why), KVP_OK);
	assert_int_equal(kvp_proto_decode_done(raw, 55, &u, &why), KVP_E_PROTO);
	memcpy(raw, &e, sizeof(e));
	assert_int_equal(kvp_proto_decode_error(raw, 8 + 9, &e, &text, &why), KVP_E_PROTO);
	assert_int_equal(kvp_proto_decode_error(raw, 8 + 10, &e, &text, &why), KVP_OK);
}

static void test_names(void **state)
{
	/* every type and status has a name; out of range values do not crash */
	for (uint32_t i = 0; i < KVP_FRAME__COUNT; i++)
		assert_string_not_equal(kvp_proto_type_name(i), "?");
	assert_string_equal(kvp_proto_type_name(999), "?");
	for (uint32_t i = 0; i < KVP_STATUS__COUNT; i++)
		assert_non_null(kvp_proto_status_str(i));
	assert_string_equal(kvp_proto_status_str(999), "unknown status");
	assert_true(kvp_proto_from_client(KVP_FRAME_HELLO));
	assert_false(kvp_proto_from_client(KVP_FRAME_TOKEN));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_generate_roundtrip),
		cmocka_unit_test(test_daemon_frames_roundtrip),
		cmocka_unit_test(test_encoder_reports_needed_size),
		cmocka_unit_test(test_bad_headers),
		cmocka_unit_test(test_bad_generate_payloads),
		cmocka_unit_test(test_bad_daemon_payloads),
		cmocka_unit_test(test_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
