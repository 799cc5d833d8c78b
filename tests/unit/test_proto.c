/* SPDX-License-Identifier: MIT */
/*
 * test_proto.c - the wire codec (ipc/proto.c): every encoder round-trips through its
 * decoder, and every class of malformed frame is refused with the right status
 * (GENERATE, TOKENIZE, DETOKENIZE, CHAT from clients; WELCOME, TOKEN, IDS, DONE, ERROR
 * from the daemon).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "ipc/proto.h"

static const struct kvp_proto_limits lim = {
	.max_frame_bytes = 4096,
	.max_prompt_tokens = 64,
	.max_new_tokens = 100,
};

/*
 * The GENERATE and CHAT wire layouts written by hand, not by the codec's encoder, so that
 * a case may set any field of the fixed structs: reserved words, flags without their
 * section, lengths that lie.  @sect (@sect_len bytes): the sections after the struct.
 */
static size_t raw_generate(uint8_t *f, size_t cap, uint64_t id, const struct kvp_generate *g,
			   const void *sect, size_t sect_len, const void *body)
{
	size_t nb = g->flags & KVP_GEN_TEXT ? g->text_bytes : (size_t)g->n_tokens * 4;
	size_t n = sizeof(struct kvp_frame_hdr) + sizeof(*g) + sect_len + nb;
	struct kvp_frame_hdr h;
	uint8_t *o = f + sizeof(h);

	assert_true(n <= cap);
	kvp_proto_hdr_init(&h, KVP_FRAME_GENERATE, id, (uint32_t)(n - sizeof(h)));
	memcpy(f, &h, sizeof(h));
	memcpy(o, g, sizeof(*g));
	if (sect_len)
		memcpy(o + sizeof(*g), sect, sect_len);
	if (nb)
		memcpy(o + sizeof(*g) + sect_len, body, nb);
	return n;
}

static void raw_put(uint8_t *f, size_t cap, size_t *n, const void *p, size_t len)
{
	assert_true(*n + len <= cap);
	if (len)
		memcpy(f + *n, p, len);
	*n += len;
}

static size_t raw_chat(uint8_t *f, size_t cap, uint64_t id, const struct kvp_chat *c,
		       const void *sect, size_t sect_len, const int32_t *ctx,
		       const struct kvp_proto_msg *m)
{
	struct kvp_frame_hdr h;
	size_t n = sizeof(h);

	raw_put(f, cap, &n, c, sizeof(*c));
	raw_put(f, cap, &n, sect, sect_len);
	raw_put(f, cap, &n, ctx, (size_t)c->n_context * 4);
	for (uint32_t i = 0; i < c->n_messages; i++) {
		struct kvp_chat_message cm = { .role = m[i].role, .bytes = m[i].len };

		raw_put(f, cap, &n, &cm, sizeof(cm));
		raw_put(f, cap, &n, m[i].text, m[i].len);
	}
	kvp_proto_hdr_init(&h, KVP_FRAME_CHAT, id, (uint32_t)(n - sizeof(h)));
	memcpy(f, &h, sizeof(h));
	return n;
}

/* The one decoder on a GENERATE, its answer as the wire struct and the prompt. */
static int decode_generate(const void *p, size_t len, const struct kvp_proto_limits *l,
			   struct kvp_generate *out, const void **body, const char **why)
{
	struct kvp_gen_req r;
	bool conn_fault;
	int st = kvp_proto_decode_request(KVP_FRAME_GENERATE, p, len, l, &r, NULL, &conn_fault,
					  why);

	*out = (struct kvp_generate){ .flags = r.flags,
				      .n_tokens = r.n_ids,
				      .text_bytes = r.text_bytes,
				      .max_new_tokens = r.max_new_tokens,
				      .top_k = r.top_k,
				      .temperature = r.temperature,
				      .top_p = r.top_p,
				      .salt_len = r.salt_len,
				      .seed = r.seed,
				      .priority = r.priority };
	memcpy(out->salt, r.salt, sizeof(out->salt));
	*body = r.flags & KVP_GEN_TEXT ? (const void *)r.text : r.ids;
	/* the connection ends on structure, and on the limits WELCOME announces */
	if (st)
		assert_int_equal(conn_fault, st != KVP_E_INVALID);
	return st;
}

/* The one decoder on a CHAT: the wire struct, the context, the messages (@mout, or NULL). */
static int decode_chat(const void *p, size_t len, const struct kvp_proto_limits *l,
		       struct kvp_chat *out, const void **ctx, struct kvp_proto_msg *mout,
		       struct kvp_gen_req *req, const char **why)
{
	static struct kvp_proto_msg msgs[KVP_CHAT_MESSAGES_MAX];
	struct kvp_gen_req r;
	bool conn_fault;
	int st = kvp_proto_decode_request(KVP_FRAME_CHAT, p, len, l, &r, msgs, &conn_fault, why);

	*out = (struct kvp_chat){ .flags = r.flags,
				  .n_messages = r.n_messages,
				  .n_context = r.n_ids,
				  .context_msgs = r.context_msgs,
				  .max_new_tokens = r.max_new_tokens,
				  .top_k = r.top_k,
				  .temperature = r.temperature,
				  .top_p = r.top_p,
				  .seed = r.seed,
				  .salt_len = r.salt_len,
				  .priority = r.priority };
	memcpy(out->salt, r.salt, sizeof(out->salt));
	memcpy(out->template_name, r.template_name, sizeof(out->template_name));
	*ctx = r.ids;
	if (req)
		*req = r;
	/* a CHAT's limits are the request's alone: only structure ends the connection */
	if (st)
		assert_int_equal(conn_fault, st == KVP_E_PROTO);
	if (!st && mout)
		memcpy(mout, r.msgs, r.n_messages * sizeof(*mout));
	return st;
}

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
	size_t n = raw_generate(frame, sizeof(frame), 42, g, NULL, 0, body);
	int r;

	assert_true(n <= sizeof(frame));
	r = kvp_proto_check_hdr(frame, n, lim.max_frame_bytes, &h, &why);
	if (r)
		return r;
	assert_int_equal(h.type, KVP_FRAME_GENERATE);
	assert_int_equal(h.req_id, 42);
	assert_int_equal(h.len_bytes + sizeof(h), n);
	r = decode_generate(frame + sizeof(h), h.len_bytes, &lim, out, out_body, &why);
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

/*
 * DONE's trailers, told apart by length: cache usage (32 bytes), speculation (8), both
 * (40); a decoder not asking for one refuses the frame that carries it, and more
 * accepted than drafted is malformed.
 */
static void done_trailers(const struct kvp_usage *u)
{
	uint8_t frame[256];
	struct kvp_frame_hdr h;
	struct kvp_usage u2;
	struct kvp_cache_usage cu = { .matched_blocks = 3, .n = 1 }, cu2;
	struct kvp_spec_usage su = { .drafted = 40, .accepted = 31 }, su2;
	const char *why;
	bool has_cu, has_su;
	size_t n;

	n = kvp_proto_encode_done(frame, sizeof(frame), 9, u, NULL, &su);
	assert_int_equal(n, 24 + 80 + 8);
	assert_int_equal(kvp_proto_check_hdr(frame, n, 4096, &h, &why), KVP_OK);
	assert_int_equal(kvp_proto_decode_done(frame + 24, h.len_bytes, &u2, &cu2, &has_cu, &su2,
					       &has_su, &why),
			 KVP_OK);
	assert_memory_equal(u, &u2, sizeof(u2));
	assert_false(has_cu);
	assert_true(has_su);
	assert_int_equal(su2.drafted, 40);
	assert_int_equal(su2.accepted, 31);
	/* a client that asks for neither trailer refuses it */
	assert_int_equal(kvp_proto_decode_done(frame + 24, h.len_bytes, &u2, NULL, NULL, NULL, NULL,
					       &why),
			 KVP_E_PROTO);

	n = kvp_proto_encode_done(frame, sizeof(frame), 9, u, &cu, &su);
	assert_int_equal(n, 24 + 80 + 32 + 8);
	assert_int_equal(kvp_proto_check_hdr(frame, n, 4096, &h, &why), KVP_OK);
	assert_int_equal(kvp_proto_decode_done(frame + 24, h.len_bytes, &u2, &cu2, &has_cu, &su2,
					       &has_su, &why),
			 KVP_OK);
	assert_true(has_cu);
	assert_true(has_su);
	assert_int_equal(cu2.matched_blocks, 3);
	assert_int_equal(su2.accepted, 31);
	/* a client that knows the cache trailer only: both together are too long */
	assert_int_equal(kvp_proto_decode_done(frame + 24, h.len_bytes, &u2, &cu2, &has_cu, NULL,
					       NULL, &why),
			 KVP_E_PROTO);

	/* the cache trailer alone still decodes with both asked for, no speculation */
	n = kvp_proto_encode_done(frame, sizeof(frame), 9, u, &cu, NULL);
	assert_int_equal(kvp_proto_check_hdr(frame, n, 4096, &h, &why), KVP_OK);
	assert_int_equal(kvp_proto_decode_done(frame + 24, h.len_bytes, &u2, &cu2, &has_cu, &su2,
					       &has_su, &why),
			 KVP_OK);
	assert_true(has_cu);
	assert_false(has_su);
	assert_int_equal(su2.drafted, 0);

	/* speculation without the cache trailer asked for: 8 bytes are not a cache usage */
	n = kvp_proto_encode_done(frame, sizeof(frame), 9, u, NULL, &su);
	assert_int_equal(kvp_proto_check_hdr(frame, n, 4096, &h, &why), KVP_OK);
	assert_int_equal(kvp_proto_decode_done(frame + 24, h.len_bytes, &u2, NULL, NULL, &su2,
					       &has_su, &why),
			 KVP_OK);
	assert_true(has_su);

	su.accepted = 41; /* more kept than drafted */
	n = kvp_proto_encode_done(frame, sizeof(frame), 9, u, &cu, &su);
	assert_int_equal(kvp_proto_check_hdr(frame, n, 4096, &h, &why), KVP_OK);
	assert_int_equal(kvp_proto_decode_done(frame + 24, h.len_bytes, &u2, &cu2, &has_cu, &su2,
					       &has_su, &why),
			 KVP_E_PROTO);
	/* 4 bytes past the usage: neither trailer */
	assert_int_equal(kvp_proto_decode_done(frame + 24, 84, &u2, &cu2, &has_cu, &su2, &has_su,
					       &why),
			 KVP_E_PROTO);
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

	n = kvp_proto_encode_token(frame, sizeof(frame), 9, tok, 2, "ab", 2, -1, NULL);
	assert_int_equal(n, 24 + 8 + 8 + 2);
	assert_int_equal(kvp_proto_check_hdr(frame, n, 4096, &h, &why), KVP_OK);
	assert_int_equal(kvp_proto_decode_token(frame + 24, h.len_bytes, &t, &ids, &text, NULL,
						NULL, NULL, &why),
			 KVP_OK);
	assert_int_equal(t.n_tokens, 2);
	assert_memory_equal(ids, tok, 8);
	assert_memory_equal(text, "ab", 2);

	n = kvp_proto_encode_done(frame, sizeof(frame), 9, &u, NULL, NULL);
	assert_int_equal(kvp_proto_check_hdr(frame, n, 4096, &h, &why), KVP_OK);
	assert_int_equal(kvp_proto_decode_done(frame + 24, h.len_bytes, &u2, NULL, NULL, NULL, NULL,
					       &why),
			 KVP_OK);
	assert_memory_equal(&u, &u2, sizeof(u));
	done_trailers(&u);

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
	assert_int_equal(kvp_proto_encode_done(frame, sizeof(frame), 1, &u, NULL, NULL), 24 + 80);
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
	assert_int_equal(decode_generate(raw, sizeof(g) - 1, &lim, &out, &body, &why), KVP_E_PROTO);
	/* n_tokens beyond the payload; trailing bytes */
	g = gen(4);
	memcpy(raw, &g, sizeof(g));
	assert_int_equal(decode_generate(raw, sizeof(g) + 15, &lim, &out, &body, &why),
			 KVP_E_PROTO);
	assert_int_equal(decode_generate(raw, sizeof(g) + 17, &lim, &out, &body, &why),
			 KVP_E_PROTO);
	assert_int_equal(decode_generate(raw, sizeof(g) + 16, &lim, &out, &body, &why), KVP_OK);
	/* huge n_tokens: the size computation must not wrap */
	g = gen(UINT32_MAX);
	memcpy(raw, &g, sizeof(g));
	assert_int_equal(decode_generate(raw, sizeof(g) + 16, &lim, &out, &body, &why),
			 KVP_E_PROTO);

	g = gen(4), g.flags = 0x8;
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
	assert_int_equal(decode_generate(raw, sizeof(g) + 19, &lim, &out, &body, &why),
			 KVP_E_PROTO);
	g.flags = KVP_GEN_TEXT;
	memcpy(raw, &g, sizeof(g));
	assert_int_equal(decode_generate(raw, sizeof(g) + 3, &lim, &out, &body, &why), KVP_E_PROTO);

	g = gen(65);
	assert_int_equal(roundtrip(&g, ids, &out, &body), KVP_E_LIMIT);
	/* a text longer in bytes than max_prompt_tokens: its tokens are what count */
	g = gen(0), g.flags = KVP_GEN_TEXT, g.text_bytes = 65;
	memset(raw, 'a', 65);
	assert_int_equal(roundtrip(&g, raw, &out, &body), KVP_OK);
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
	assert_int_equal(kvp_proto_decode_token(raw, 8 + 8 + 2, &t, &ids, &text, NULL, NULL, NULL,
						&why),
			 KVP_E_PROTO);
	assert_int_equal(kvp_proto_decode_token(raw, 8 + 8 + 4, &t, &ids, &text, NULL, NULL, NULL,
						&why),
			 KVP_E_PROTO);
	assert_int_equal(kvp_proto_decode_token(raw, 8 + 8 + 3, &t, &ids, &text, NULL, NULL, NULL,
						&why),
			 KVP_OK);
	assert_int_equal(kvp_proto_decode_done(raw, 55, &u, NULL, NULL, NULL, NULL, &why),
			 KVP_E_PROTO);
	memcpy(raw, &e, sizeof(e));
	assert_int_equal(kvp_proto_decode_error(raw, 8 + 9, &e, &text, &why), KVP_E_PROTO);
	assert_int_equal(kvp_proto_decode_error(raw, 8 + 10, &e, &text, &why), KVP_OK);
}

/* A frame's payload, checked for header type @type and req_id 9; its length in *@len. */
static const uint8_t *payload_of(const uint8_t *frame, size_t n, uint32_t type, size_t *len)
{
	struct kvp_frame_hdr h;
	const char *why;

	assert_int_equal(kvp_proto_check_hdr(frame, n, 1u << 20, &h, &why), KVP_OK);
	assert_int_equal(h.type, type);
	assert_int_equal(h.req_id, 9);
	assert_int_equal(h.len_bytes + sizeof(h), n);
	*len = h.len_bytes;
	return frame + sizeof(h);
}

static void test_tokenizer_frames(void **state)
{
	/*
	 * TOKENIZE, DETOKENIZE and IDS round-trip; flags, lengths, limits and NUL bytes are
	 * refused with their classes (structure, limit, value)
	 */
	uint8_t f[512], raw[512];
	struct kvp_tokenize t = { .flags = KVP_TOKENIZE__ALL, .text_bytes = 5 }, to;
	struct kvp_detokenize d = { .flags = KVP_DETOKENIZE_RENDER_SPECIAL, .n_tokens = 3 }, dout;
	struct kvp_ids io;
	int32_t ids[3] = { 5, 0, 70000 };
	const uint8_t *pl;
	const void *idp;
	const char *text, *why;
	size_t n, len;

	n = kvp_proto_encode_tokenize(f, sizeof(f), 9, &t, "hello");
	pl = payload_of(f, n, KVP_FRAME_TOKENIZE, &len);
	assert_int_equal(kvp_proto_decode_tokenize(pl, len, &lim, &to, &text, &why), KVP_OK);
	assert_memory_equal(&to, &t, sizeof(t));
	assert_memory_equal(text, "hello", 5);
	/* empty text is a request too (BOS alone) */
	t.text_bytes = 0;
	n = kvp_proto_encode_tokenize(f, sizeof(f), 9, &t, "");
	pl = payload_of(f, n, KVP_FRAME_TOKENIZE, &len);
	assert_int_equal(kvp_proto_decode_tokenize(pl, len, &lim, &to, &text, &why), KVP_OK);

	n = kvp_proto_encode_detokenize(f, sizeof(f), 9, &d, ids);
	pl = payload_of(f, n, KVP_FRAME_DETOKENIZE, &len);
	assert_int_equal(kvp_proto_decode_detokenize(pl, len, &lim, &dout, &idp, &why), KVP_OK);
	assert_memory_equal(&dout, &d, sizeof(d));
	assert_memory_equal(idp, ids, sizeof(ids));

	n = kvp_proto_encode_ids(f, sizeof(f), 9, ids, 3, "abc", 3);
	pl = payload_of(f, n, KVP_FRAME_IDS, &len);
	assert_int_equal(kvp_proto_decode_ids(pl, len, &io, &idp, &text, &why), KVP_OK);
	assert_int_equal(io.n_tokens, 3);
	assert_int_equal(io.text_bytes, 3);
	assert_memory_equal(idp, ids, sizeof(ids));
	assert_memory_equal(text, "abc", 3);
	assert_int_equal(kvp_proto_decode_ids(pl, len - 1, &io, &idp, &text, &why), KVP_E_PROTO);
	memcpy(raw, pl, len);
	raw[len] = 0;
	assert_int_equal(kvp_proto_decode_ids(raw, len + 1, &io, &idp, &text, &why), KVP_E_PROTO);

	/* TOKENIZE: short, unknown flag, beyond the frame, trailing, too long, a NUL */
	t = (struct kvp_tokenize){ .text_bytes = 3 };
	memcpy(raw, &t, sizeof(t));
	memcpy(raw + sizeof(t), "a\0b!", 4);
	assert_int_equal(kvp_proto_decode_tokenize(raw, 7, &lim, &to, &text, &why), KVP_E_PROTO);
	assert_int_equal(kvp_proto_decode_tokenize(raw, sizeof(t) + 2, &lim, &to, &text, &why),
			 KVP_E_PROTO);
	assert_int_equal(kvp_proto_decode_tokenize(raw, sizeof(t) + 4, &lim, &to, &text, &why),
			 KVP_E_PROTO);
	assert_int_equal(kvp_proto_decode_tokenize(raw, sizeof(t) + 3, &lim, &to, &text, &why),
			 KVP_E_INVALID);
	t.flags = 0x4;
	memcpy(raw, &t, sizeof(t));
	assert_int_equal(kvp_proto_decode_tokenize(raw, sizeof(t) + 3, &lim, &to, &text, &why),
			 KVP_E_PROTO);
	/* more bytes than max_prompt_tokens is no limit (the daemon counts the ids) */
	t = (struct kvp_tokenize){ .text_bytes = lim.max_prompt_tokens + 1 };
	memset(raw, 'x', sizeof(raw));
	memcpy(raw, &t, sizeof(t));
	assert_int_equal(kvp_proto_decode_tokenize(raw, sizeof(t) + t.text_bytes, &lim, &to, &text,
						   &why),
			 KVP_OK);

	/* DETOKENIZE: unknown flag, n_tokens that would wrap, too many */
	d = (struct kvp_detokenize){ .flags = 2, .n_tokens = 1 };
	memcpy(raw, &d, sizeof(d));
	assert_int_equal(kvp_proto_decode_detokenize(raw, sizeof(d) + 4, &lim, &dout, &idp, &why),
			 KVP_E_PROTO);
	d = (struct kvp_detokenize){ .n_tokens = UINT32_MAX };
	memcpy(raw, &d, sizeof(d));
	assert_int_equal(kvp_proto_decode_detokenize(raw, sizeof(d) + 4, &lim, &dout, &idp, &why),
			 KVP_E_PROTO);
	d = (struct kvp_detokenize){ .n_tokens = lim.max_prompt_tokens + 1 };
	memcpy(raw, &d, sizeof(d));
	assert_int_equal(kvp_proto_decode_detokenize(raw, sizeof(d) + 4 * d.n_tokens, &lim, &dout,
						     &idp, &why),
			 KVP_E_LIMIT);
}

static struct kvp_chat chat(uint32_t n_messages)
{
	return (struct kvp_chat){ .n_messages = n_messages,
				  .max_new_tokens = 10,
				  .temperature = 0.5f,
				  .top_p = 1.0f,
				  .seed = 7,
				  .template_name = "chatml" };
}

/* Encode a CHAT and decode it: its status (and the decoded parts when KVP_OK). */
static int chat_rt(const struct kvp_chat *c, const int32_t *ctx, const struct kvp_proto_msg *m,
		   struct kvp_chat *out, struct kvp_proto_msg *mout)
{
	static uint8_t f[1 << 16];
	const uint8_t *pl;
	const void *ctxp;
	const char *why = NULL;
	size_t n, len;
	int r;

	n = raw_chat(f, sizeof(f), 9, c, NULL, 0, ctx, m);
	pl = payload_of(f, n, KVP_FRAME_CHAT, &len);
	r = decode_chat(pl, len, &lim, out, &ctxp, mout, NULL, &why);
	if (r) {
		assert_non_null(why);
		return r;
	}
	if (c->n_context)
		assert_memory_equal(ctxp, ctx, c->n_context * sizeof(int32_t));
	return r;
}

/* Encode a CHAT with a tools section (@tools, @tl bytes) and decode it: its status. */
static int tools_rt(struct kvp_chat *c, const struct kvp_proto_msg *m, const char *tools,
		    uint32_t tl, const struct kvp_proto_limits *l, const char **got,
		    uint32_t *got_len)
{
	static uint8_t f[1 << 16];
	static uint8_t sect[1024];
	struct kvp_chat_tools t = { .bytes = tl };
	const uint8_t *pl;
	const void *ctxp;
	const char *why = NULL;
	struct kvp_gen_req req;
	struct kvp_chat o;
	size_t n, len;
	int r;

	c->flags |= KVP_CHAT_TOOLS;
	memcpy(sect, &t, sizeof(t));
	memcpy(sect + sizeof(t), tools, tl);
	n = raw_chat(f, sizeof(f), 9, c, sect, sizeof(t) + tl, NULL, m);
	pl = payload_of(f, n, KVP_FRAME_CHAT, &len);
	r = decode_chat(pl, len, l, &o, &ctxp, NULL, &req, &why);
	if (r) {
		assert_non_null(why);
		return r;
	}
	*got = req.tools;
	*got_len = req.tools_len;
	return r;
}

static void test_chat_tools(void **state)
{
	/*
	 * the tools section (KVP_CHAT_TOOLS) round-trips before the context ids; tool calls
	 * are NAME\nARGUMENTS; the tools' text is UTF-8 without NUL and counts against
	 * max_text_bytes with the messages; a reserved field set is structure (PROTO)
	 */
	static const char tools[] = "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
	const struct kvp_proto_msg m[4] = {
		{ .role = KVP_ROLE_USER, .len = 2, .text = "hi" },
		{ .role = KVP_ROLE_ASSISTANT, .len = 0, .text = "" },
		{ .role = KVP_ROLE_TOOL_CALL, .len = 8, .text = "f\n{\"a\":1}" },
		{ .role = KVP_ROLE_TOOL, .len = 1, .text = "2" },
	};
	struct kvp_proto_msg bad[4];
	struct kvp_proto_limits capped = lim;
	struct kvp_chat c = chat(4);
	const char *got;
	uint32_t got_len;

	assert_int_equal(tools_rt(&c, m, tools, sizeof(tools) - 1, &lim, &got, &got_len), KVP_OK);
	assert_int_equal(got_len, sizeof(tools) - 1);
	assert_memory_equal(got, tools, got_len);
	c = chat(4); /* an empty section is a section */
	assert_int_equal(tools_rt(&c, m, "", 0, &lim, &got, &got_len), KVP_OK);
	assert_int_equal(got_len, 0);
	c = chat(4);
	assert_int_equal(tools_rt(&c, m, "[\0]", 3, &lim, &got, &got_len), KVP_E_INVALID);
	c = chat(4);
	assert_int_equal(tools_rt(&c, m, "[\xff]", 3, &lim, &got, &got_len), KVP_E_INVALID);
	memcpy(bad, m, sizeof(m));
	bad[2].text = "f {}", bad[2].len = 4; /* no newline */
	c = chat(4);
	assert_int_equal(tools_rt(&c, bad, "[]", 2, &lim, &got, &got_len), KVP_E_INVALID);
	bad[2].text = "\n{}", bad[2].len = 3; /* no name */
	c = chat(4);
	assert_int_equal(tools_rt(&c, bad, "[]", 2, &lim, &got, &got_len), KVP_E_INVALID);
	capped.max_text_bytes = 11 + sizeof(tools) - 2; /* the messages' 11 bytes + tools - 1 */
	c = chat(4);
	assert_int_equal(tools_rt(&c, m, tools, sizeof(tools) - 1, &capped, &got, &got_len),
			 KVP_E_LIMIT);
	capped.max_text_bytes++;
	c = chat(4);
	assert_int_equal(tools_rt(&c, m, tools, sizeof(tools) - 1, &capped, &got, &got_len),
			 KVP_OK);
	/* KVP_CHAT_CALL_IDS: NAME\nID\nARGUMENTS and ID\nRESULT, the id 1 to 64 bytes */
	{
		char long_id[2 + 65 + 3];
		struct kvp_proto_msg ids[4];

		memcpy(ids, m, sizeof(m));
		ids[2].text = "f\nabcdefghi\n{\"a\":1}", ids[2].len = 18;
		ids[3].text = "abcdefghi\n2", ids[3].len = 11;
		c = chat(4);
		c.flags |= KVP_CHAT_CALL_IDS;
		assert_int_equal(tools_rt(&c, ids, "[]", 2, &lim, &got, &got_len), KVP_OK);
		c = chat(4); /* without the flag a result is its text, whatever it holds */
		assert_int_equal(tools_rt(&c, ids, "[]", 2, &lim, &got, &got_len), KVP_OK);
		memcpy(bad, ids, sizeof(ids));
		bad[3].text = "2", bad[3].len = 1; /* a result without its id */
		c = chat(4);
		c.flags |= KVP_CHAT_CALL_IDS;
		assert_int_equal(tools_rt(&c, bad, "[]", 2, &lim, &got, &got_len), KVP_E_INVALID);
		memcpy(bad, ids, sizeof(ids));
		bad[2].text = "f\n\n{}", bad[2].len = 5; /* an empty id */
		c = chat(4);
		c.flags |= KVP_CHAT_CALL_IDS;
		assert_int_equal(tools_rt(&c, bad, "[]", 2, &lim, &got, &got_len), KVP_E_INVALID);
		bad[2].text = "f\n{}", bad[2].len = 4; /* none */
		c = chat(4);
		c.flags |= KVP_CHAT_CALL_IDS;
		assert_int_equal(tools_rt(&c, bad, "[]", 2, &lim, &got, &got_len), KVP_E_INVALID);
		for (size_t k = 64; k <= 65; k++) { /* "x\nID\n{}", ID of 64 bytes, then 65 */
			memcpy(long_id, "x\n", 2);
			memset(long_id + 2, 'i', k);
			memcpy(long_id + 2 + k, "\n{}", 3);
			bad[2].text = long_id, bad[2].len = 2 + k + 3;
			c = chat(4);
			c.flags |= KVP_CHAT_CALL_IDS;
			assert_int_equal(tools_rt(&c, bad, "[]", 2, &lim, &got, &got_len),
					 k == 64 ? KVP_OK : KVP_E_INVALID);
		}
	}
	/* without the flag there is no section */
	{
		static uint8_t f[1024];
		struct kvp_gen_req req;
		const uint8_t *pl;
		const void *ctxp;
		const char *why;
		size_t n, len;

		c = chat(4);
		n = raw_chat(f, sizeof(f), 9, &c, NULL, 0, NULL, m);
		pl = payload_of(f, n, KVP_FRAME_CHAT, &len);
		assert_int_equal(decode_chat(pl, len, &lim, &c, &ctxp, NULL, &req, &why), KVP_OK);
		assert_null(req.tools);
		assert_int_equal(req.tools_len, 0);
	}
}

static void test_chat_frames(void **state)
{
	/*
	 * CHAT round-trips (context ids, messages, template name, sampling), and each fault
	 * has its class: structure (flags, reserved, salt, counts, lengths) PROTO; maxima
	 * (messages, context, max_new_tokens) LIMIT; values (roles, text, name, sampling,
	 * a context not ending in an assistant message) INVALID
	 */
	static struct kvp_proto_msg many[KVP_CHAT_MESSAGES_MAX + 1];
	const struct kvp_proto_msg m[3] = {
		{ .role = KVP_ROLE_USER, .len = 2, .text = "hi" },
		{ .role = KVP_ROLE_ASSISTANT, .len = 0, .text = "" },
		{ .role = KVP_ROLE_USER, .len = 10, .text = "\xc3\xa9t\xc3\xa9 \xf0\x9f\xa6\x99" },
	};
	int32_t ctx[4] = { 1, 2, 3, 4 };
	struct kvp_proto_msg mo[3], bad[3];
	struct kvp_chat c = chat(3), o;
	uint8_t raw[512];
	const void *ctxp;
	const char *why;

	c.n_context = 4;
	c.context_msgs = 2;
	c.salt_len = 2;
	memcpy(c.salt, "ab", 2);
	assert_int_equal(chat_rt(&c, ctx, m, &o, mo), KVP_OK);
	assert_memory_equal(&o, &c, sizeof(c));
	for (int i = 0; i < 3; i++) {
		assert_int_equal(mo[i].role, m[i].role);
		assert_int_equal(mo[i].len, m[i].len);
		assert_memory_equal(mo[i].text, m[i].text, m[i].len);
	}

	/* structure */
	c = chat(3), c.flags = 0x1;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_PROTO);
	c = chat(3), c.flags = 0x8;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_PROTO);
	c = chat(3), c.flags = KVP_CHAT_NO_CACHE | KVP_CHAT_PROMPT_ONLY;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_OK);
	/* reasoning on or off passes through; both at once is a value fault; the bit above
	 * them is unknown */
	c = chat(3), c.flags = KVP_CHAT_THINKING;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_OK);
	assert_int_equal(o.flags, KVP_CHAT_THINKING);
	c = chat(3), c.flags = KVP_CHAT_NO_THINKING;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_OK);
	assert_int_equal(o.flags, KVP_CHAT_NO_THINKING);
	c = chat(3), c.flags = KVP_CHAT_THINKING | KVP_CHAT_NO_THINKING;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_INVALID);
	/* speculative decoding on or off likewise */
	c = chat(3), c.flags = KVP_CHAT_SPEC_ON;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_OK);
	assert_int_equal(o.flags, KVP_CHAT_SPEC_ON);
	c = chat(3), c.flags = KVP_CHAT_SPEC_OFF;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_OK);
	assert_int_equal(o.flags, KVP_CHAT_SPEC_OFF);
	c = chat(3), c.flags = KVP_CHAT_SPEC_ON | KVP_CHAT_SPEC_OFF;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_INVALID);
	c = chat(3), c.flags = KVP_CHAT_CALL_IDS; /* no calls: nothing else changes */
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_OK);
	assert_int_equal(o.flags, KVP_CHAT_CALL_IDS);
	c = chat(3), c.flags = KVP_CHAT_SPEC_ON | KVP_CHAT_SPEC_USAGE;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_OK);
	assert_int_equal(o.flags, KVP_CHAT_SPEC_ON | KVP_CHAT_SPEC_USAGE);
	c = chat(3), c.flags = KVP_CHAT_SPEC_USAGE << 1;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_PROTO);
	c = chat(3), c.priority = 1001; /* a value: refused as invalid, not as structure */
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_INVALID);
	c = chat(3), c.priority = -1000;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_OK);
	c = chat(3), c.salt_len = 65;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_PROTO);
	c = chat(3), c.salt[3] = 1;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_PROTO);
	c = chat(0);
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_PROTO);
	c = chat(3), c.context_msgs = 2; /* no context ids */
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_PROTO);
	c = chat(3), c.n_context = 4; /* context ids covering no message */
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_PROTO);
	c = chat(3), c.n_context = 4, c.context_msgs = 4;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_PROTO);
	/* a message longer than the frame, and one byte too many */
	c = chat(1);
	memcpy(raw, &c, sizeof(c));
	memcpy(raw + sizeof(c), &(struct kvp_chat_message){ .role = 1, .bytes = 3 }, 8);
	memcpy(raw + sizeof(c) + 8, "abcd", 4);
	assert_int_equal(decode_chat(raw, sizeof(c) + 8 + 2, &lim, &o, &ctxp, NULL, NULL, &why),
			 KVP_E_PROTO);
	assert_int_equal(decode_chat(raw, sizeof(c) + 8 + 4, &lim, &o, &ctxp, NULL, NULL, &why),
			 KVP_E_PROTO);
	assert_int_equal(decode_chat(raw, sizeof(c) + 8 + 3, &lim, &o, &ctxp, NULL, NULL, &why),
			 KVP_OK);
	c.n_context = UINT32_MAX, c.context_msgs = 1; /* must not wrap */
	memcpy(raw, &c, sizeof(c));
	assert_int_equal(decode_chat(raw, sizeof(c) + 8 + 3, &lim, &o, &ctxp, NULL, NULL, &why),
			 KVP_E_PROTO);

	/* maxima */
	for (size_t i = 0; i < KVP_CHAT_MESSAGES_MAX + 1; i++)
		many[i] = (struct kvp_proto_msg){ .role = KVP_ROLE_USER, .len = 1, .text = "x" };
	c = chat(KVP_CHAT_MESSAGES_MAX + 1);
	assert_int_equal(chat_rt(&c, ctx, many, &o, NULL), KVP_E_LIMIT);
	c = chat(KVP_CHAT_MESSAGES_MAX);
	assert_int_equal(chat_rt(&c, ctx, many, &o, NULL), KVP_OK);
	c = chat(3), c.max_new_tokens = lim.max_new_tokens + 1;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_LIMIT);
	{
		static int32_t long_ctx[65];

		c = chat(3), c.n_context = lim.max_prompt_tokens + 1, c.context_msgs = 2;
		assert_int_equal(chat_rt(&c, long_ctx, m, &o, NULL), KVP_E_LIMIT);
	}

	/* values */
	c = chat(3), c.max_new_tokens = 0;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_INVALID);
	c = chat(3), c.temperature = NAN;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_INVALID);
	c = chat(3), c.top_p = 0.0f;
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_INVALID);
	c = chat(3), memcpy(c.template_name, "chat\nml", 7);
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_INVALID);
	c = chat(3), memset(c.template_name, 'a', sizeof(c.template_name)); /* no NUL */
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_INVALID);
	c = chat(3), c.template_name[7] = 'x'; /* "chatml\0x": not NUL-padded */
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_INVALID);
	c = chat(3), c.n_context = 4, c.context_msgs = 1; /* ends in a user message */
	assert_int_equal(chat_rt(&c, ctx, m, &o, NULL), KVP_E_INVALID);
	memcpy(bad, m, sizeof(m));
	bad[0].role = KVP_ROLE__COUNT;
	c = chat(3);
	assert_int_equal(chat_rt(&c, ctx, bad, &o, NULL), KVP_E_INVALID);
	memcpy(bad, m, sizeof(m));
	bad[2].text = "a\0b", bad[2].len = 3;
	assert_int_equal(chat_rt(&c, ctx, bad, &o, NULL), KVP_E_INVALID);
	/* ill-formed UTF-8: a stray byte, a surrogate, an overlong form, a cut character */
	{
		static const char *const ill[] = { "a\xff", "\xed\xa0\x80", "\xc0\xaf",
						   "\xe6\x97" };

		for (size_t i = 0; i < 4; i++) {
			memcpy(bad, m, sizeof(m));
			bad[1].text = ill[i], bad[1].len = (uint32_t)strlen(ill[i]);
			assert_int_equal(chat_rt(&c, ctx, bad, &o, NULL), KVP_E_INVALID);
		}
	}
}

/*
 * @r through the one request path: kvp_proto_encode_request(), the header checked, then
 * kvp_proto_decode_request() into *@out (messages into @mout).  Return: its status.
 */
static int request_rt(const struct kvp_gen_req *r, const struct kvp_proto_limits *l,
		      struct kvp_gen_req *out, struct kvp_proto_msg *mout, bool *conn_fault,
		      const char **why)
{
	static uint8_t f[1 << 16];
	struct kvp_frame_hdr h;
	size_t n = kvp_proto_encode_request(f, sizeof(f), 77, r);

	assert_true(n > sizeof(h) && n <= sizeof(f));
	assert_int_equal(kvp_proto_encode_request(NULL, 0, 77, r), n); /* the length alone */
	assert_int_equal(kvp_proto_check_hdr(f, n, 1 << 20, &h, why), KVP_OK);
	assert_int_equal(h.type, r->type);
	assert_int_equal(h.req_id, 77);
	assert_int_equal(sizeof(h) + h.len_bytes, n);
	*why = NULL;
	return kvp_proto_decode_request(h.type, f + sizeof(h), h.len_bytes, l, out, mout,
					conn_fault, why);
}

static void test_message_breakpoints(void **state)
{
	/*
	 * KVP_CC_BP_MESSAGES: counted messages, at least 1, at most the CHAT's; a GENERATE
	 * carrying it is refused (INVALID, the connection kept), and so is a count of 0
	 */
	const struct kvp_proto_msg m[3] = { { KVP_ROLE_USER, 1, "a" },
					    { KVP_ROLE_ASSISTANT, 1, "b" },
					    { KVP_ROLE_USER, 1, "c" } };
	const int32_t ids[2] = { 1, 2 };
	const struct kvp_cache_ctl cc = { .flags = KVP_CC_BP_MESSAGES,
					  .n_breakpoints = 2,
					  .breakpoints = { 1, 3 },
					  .bp_ttl_s = { 3600, 0 } };
	struct kvp_gen_req ch = { .type = KVP_FRAME_CHAT,
				  .n_messages = 3,
				  .msgs = m,
				  .max_new_tokens = 4,
				  .top_p = 1.0f,
				  .has_cc = true,
				  .cc = cc },
			   g = { .type = KVP_FRAME_GENERATE,
				 .n_ids = 2,
				 .ids = ids,
				 .max_new_tokens = 4,
				 .top_p = 1.0f,
				 .has_cc = true,
				 .cc = cc },
			   out;
	struct kvp_proto_msg mo[3];
	const char *why = NULL;
	bool conn_fault;

	(void)state;
	assert_int_equal(request_rt(&ch, &lim, &out, mo, &conn_fault, &why), KVP_OK);
	assert_true(out.has_cc);
	assert_int_equal(out.cc.flags, KVP_CC_BP_MESSAGES);
	assert_memory_equal(&out.cc, &cc, sizeof(cc));
	ch.n_messages = 2; /* the last breakpoint counts 3 */
	assert_int_equal(request_rt(&ch, &lim, &out, mo, &conn_fault, &why), KVP_E_INVALID);
	assert_false(conn_fault);
	assert_non_null(strstr(why, "messages"));
	assert_int_equal(request_rt(&g, &lim, &out, NULL, &conn_fault, &why), KVP_E_INVALID);
	assert_false(conn_fault);
	assert_non_null(strstr(why, "CHAT only"));
	g.cc.flags = 0; /* token positions: anything goes here, the daemon checks the prompt */
	assert_int_equal(request_rt(&g, &lim, &out, NULL, &conn_fault, &why), KVP_OK);
	ch.n_messages = 3;
	ch.cc.breakpoints[0] = 0;
	assert_int_equal(request_rt(&ch, &lim, &out, mo, &conn_fault, &why), KVP_E_INVALID);
	assert_non_null(strstr(why, "message breakpoint"));
	ch.cc.breakpoints[0] = 1;
	ch.cc.flags = 0x4; /* not a flag */
	assert_int_equal(request_rt(&ch, &lim, &out, mo, &conn_fault, &why), KVP_E_PROTO);
	assert_true(conn_fault);
}

/* Equal requests: every field, pointed-to bytes compared by content. */
static void assert_req_equal(const struct kvp_gen_req *a, const struct kvp_gen_req *b)
{
	assert_int_equal(a->type, b->type);
	assert_int_equal(a->flags, b->flags);
	assert_int_equal(a->max_new_tokens, b->max_new_tokens);
	assert_int_equal(a->top_k, b->top_k);
	assert_true(a->temperature == b->temperature && a->top_p == b->top_p);
	assert_int_equal(a->seed, b->seed);
	assert_int_equal(a->priority, b->priority);
	assert_int_equal(a->salt_len, b->salt_len);
	assert_memory_equal(a->salt, b->salt, sizeof(a->salt));
	assert_int_equal(a->has_cc, b->has_cc);
	if (a->has_cc)
		assert_memory_equal(&a->cc, &b->cc, sizeof(a->cc));
	assert_int_equal(a->has_samp, b->has_samp);
	if (a->has_samp) {
		assert_memory_equal(&a->samp.hdr, &b->samp.hdr, sizeof(a->samp.hdr));
		if (a->samp.hdr.n_bias)
			assert_memory_equal(a->samp.bias, b->samp.bias,
					    a->samp.hdr.n_bias * sizeof(struct kvp_logit_bias));
		if (a->samp.hdr.schema_bytes)
			assert_memory_equal(a->samp.schema, b->samp.schema,
					    a->samp.hdr.schema_bytes);
	}
	assert_int_equal(a->n_ids, b->n_ids);
	assert_int_equal(!a->ids, !b->ids);
	if (a->n_ids)
		assert_memory_equal(a->ids, b->ids, a->n_ids * sizeof(int32_t));
	assert_int_equal(a->text_bytes, b->text_bytes);
	assert_int_equal(!a->text, !b->text);
	if (a->text_bytes)
		assert_memory_equal(a->text, b->text, a->text_bytes);
	assert_int_equal(a->context_msgs, b->context_msgs);
	assert_memory_equal(a->template_name, b->template_name, sizeof(a->template_name));
	assert_int_equal(!a->tools, !b->tools);
	assert_int_equal(a->tools_len, b->tools_len);
	if (a->tools_len)
		assert_memory_equal(a->tools, b->tools, a->tools_len);
	assert_int_equal(a->n_messages, b->n_messages);
	for (uint32_t i = 0; i < a->n_messages; i++) {
		assert_int_equal(a->msgs[i].role, b->msgs[i].role);
		assert_int_equal(a->msgs[i].len, b->msgs[i].len);
		assert_memory_equal(a->msgs[i].text, b->msgs[i].text, a->msgs[i].len);
	}
}

/* The prompt kinds of the one request: how GENERATE and CHAT give it. */
enum prompt_kind { P_TOKENS, P_TEXT, P_CHAT, P_CHAT_TOOLS, P_CHAT_CONTEXT, P__COUNT };

/*
 * One request of @kind with the optional parts @cc, @samp, @fit; its flags are the
 * request's own only (the encoder adds the section flags).
 */
static struct kvp_gen_req one_request(enum prompt_kind kind, bool cc, bool samp, bool fit)
{
	static const int32_t ids[3] = { 5, 0, 31999 };
	static const struct kvp_logit_bias bias[2] = { { 3, -2.5f }, { 9, 100.0f } };
	static const char schema[] = "{\"type\":\"object\"}";
	static const char tools[] = "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
	static const struct kvp_proto_msg m[3] = {
		{ .role = KVP_ROLE_SYSTEM, .len = 3, .text = "sys" },
		{ .role = KVP_ROLE_ASSISTANT, .len = 0, .text = "" },
		{ .role = KVP_ROLE_USER, .len = 5, .text = "h\xc3\xa9l!" },
	};
	struct kvp_gen_req r = { .type = kind >= P_CHAT ? KVP_FRAME_CHAT : KVP_FRAME_GENERATE,
				 .max_new_tokens = 9,
				 .top_k = 40,
				 .temperature = 0.75f,
				 .top_p = 0.5f,
				 .seed = 0x1234567890ull,
				 .priority = cc ? -7 : KVP_PRIORITY_DEFAULT,
				 .salt_len = 3,
				 .salt = "xyz" };

	if (fit)
		r.flags |= KVP_GEN_FIT_CONTEXT;
	if (cc) {
		r.has_cc = true;
		r.cc = (struct kvp_cache_ctl){ .flags = KVP_CC_RETAIN,
					       .n_breakpoints = 2,
					       .breakpoints = { 1, 2 },
					       .bp_ttl_s = { 60, 0 },
					       .ttl_s = 30,
					       .retain = 80,
					       .n = kind >= P_CHAT ? 0 : 3 };
	}
	if (samp) {
		r.has_samp = true;
		r.samp = (struct kvp_proto_sampling){ .hdr = { .flags = KVP_SAMP_LOGPROBS,
							       .top_logprobs = 2,
							       .presence_penalty = 0.5f,
							       .frequency_penalty = -1.0f,
							       .n_bias = 2,
							       .grammar = KVP_GRAMMAR_JSON_SCHEMA,
							       .schema_bytes = sizeof(schema) - 1 },
						      .bias = bias,
						      .schema = schema };
	}
	switch (kind) {
	case P_TOKENS:
		r.flags |= KVP_GEN_NO_CACHE;
		r.ids = ids, r.n_ids = 3;
		break;
	case P_TEXT:
		r.flags |= KVP_GEN_TEXT | KVP_GEN_PARSE_SPECIAL;
		r.text = "hello w\xc3\xb6rld", r.text_bytes = 12;
		break;
	case P_CHAT_CONTEXT:
		r.ids = ids, r.n_ids = 3, r.context_msgs = 2;
		/* fall through */
	case P_CHAT_TOOLS:
		if (kind == P_CHAT_TOOLS)
			r.tools = tools, r.tools_len = sizeof(tools) - 1;
		/* fall through */
	case P_CHAT:
		r.flags |= KVP_CHAT_NO_CACHE;
		r.msgs = m, r.n_messages = 3;
		memcpy(r.template_name, "chatml", 6);
		break;
	default:
		break;
	}
	return r;
}

/* What the decoder of @in's frame must give: @in with its section flags. */
static struct kvp_gen_req with_section_flags(struct kvp_gen_req in)
{
	if (in.has_cc)
		in.flags |= KVP_GEN_CACHE_CTL;
	if (in.has_samp)
		in.flags |= KVP_GEN_SAMPLING;
	if (in.tools)
		in.flags |= KVP_CHAT_TOOLS;
	return in;
}

static void test_one_request_path(void **state)
{
	/*
	 * GENERATE and CHAT through one encoder and one decoder, for every combination of the
	 * optional parts (cache control x sampling x fit-context x tokens / text / chat /
	 * chat with tools / chat with context): the decoder gives back the struct encoded,
	 * encoding it again gives back the frame, its length is known before it is written
	 */
	static uint8_t f[1 << 16], again[1 << 16];
	struct kvp_proto_msg mo[KVP_CHAT_MESSAGES_MAX];
	const struct kvp_proto_limits l = { 1 << 20, 64, 100, 1 << 16 };
	unsigned int combos = 0;

	(void)state;
	for (int kind = 0; kind < P__COUNT; kind++)
		for (int bits = 0; bits < 8; bits++) {
			struct kvp_gen_req in = one_request(kind, bits & 1, bits & 2, bits & 4);
			struct kvp_gen_req want = with_section_flags(in), out;
			const char *why = NULL;
			bool conn_fault = false;
			size_t n, n2;

			assert_int_equal(request_rt(&in, &l, &out, mo, &conn_fault, &why), KVP_OK);
			assert_req_equal(&out, &want);
			/* the decoded request encodes to the same frame */
			n = kvp_proto_encode_request(f, sizeof(f), 5, &in);
			n2 = kvp_proto_encode_request(again, sizeof(again), 5, &out);
			assert_int_equal(n, n2);
			assert_memory_equal(f, again, n);
			/* a buffer one byte short: the length, and nothing written */
			memset(again, 0xa5, sizeof(again));
			assert_int_equal(kvp_proto_encode_request(again, n - 1, 5, &in), n);
			assert_int_equal(again[0], 0xa5);
			combos++;
		}
	assert_int_equal(combos, 40);
}

/*
 * Patch the fixed struct's flags of the frame in @f (GENERATE and CHAT keep them first)
 * and decode it.  Return: the status.
 */
static int decode_patched(uint8_t *f, size_t n, uint32_t flags, const struct kvp_proto_limits *l,
			  bool *conn_fault, const char **why)
{
	static struct kvp_proto_msg mo[KVP_CHAT_MESSAGES_MAX];
	struct kvp_frame_hdr h;
	struct kvp_gen_req out;

	memcpy(&h, f, sizeof(h));
	memcpy(f + sizeof(h), &flags, sizeof(flags));
	return kvp_proto_decode_request(h.type, f + sizeof(h), n - sizeof(h), l, &out, mo,
					conn_fault, why);
}

static void test_one_request_malformed(void **state)
{
	/*
	 * Every combination again, broken: cut at every length, or a byte too long, or
	 * a section flag set without its section, or cleared with it, or a flag the frame
	 * type does not define, or a section's own length past the frame: all malformed
	 * (KVP_E_PROTO, the connection ends)
	 */
	static uint8_t f[1 << 16];
	const struct kvp_proto_limits l = { 1 << 20, 64, 100, 1 << 16 };
	const size_t h = sizeof(struct kvp_frame_hdr);

	(void)state;
	for (int kind = 0; kind < P__COUNT; kind++)
		for (int bits = 0; bits < 8; bits++) {
			struct kvp_gen_req in = one_request(kind, bits & 1, bits & 2, bits & 4);
			struct kvp_gen_req want = with_section_flags(in), out;
			bool chat = in.type == KVP_FRAME_CHAT;
			uint32_t foreign = chat ? KVP_GEN_TEXT : KVP_CHAT_TOOLS;
			const char *why = NULL;
			bool conn_fault;
			size_t n = kvp_proto_encode_request(f, sizeof(f), 5, &in);

			for (size_t cut = h; cut < n; cut++) {
				conn_fault = false;
				assert_int_equal(kvp_proto_decode_request(in.type, f + h, cut - h,
									  &l, &out, NULL,
									  &conn_fault, &why),
						 KVP_E_PROTO);
				assert_true(conn_fault);
			}
			f[n] = 0;
			assert_int_equal(kvp_proto_decode_request(in.type, f + h, n + 1 - h, &l,
								  &out, NULL, &conn_fault, &why),
					 KVP_E_PROTO);
			/* each section flag toggled: the rest of the frame is misread */
			for (uint32_t sect = KVP_GEN_CACHE_CTL; sect <= KVP_CHAT_TOOLS;
			     sect <<= 1) {
				if (sect != KVP_GEN_CACHE_CTL && sect != KVP_GEN_SAMPLING &&
				    (!chat || sect != KVP_CHAT_TOOLS))
					continue;
				n = kvp_proto_encode_request(f, sizeof(f), 5, &in);
				assert_int_equal(decode_patched(f, n, want.flags ^ sect, &l,
								&conn_fault, &why),
						 KVP_E_PROTO);
				assert_true(conn_fault);
			}
			/* unknown flags, and the other frame type's own */
			n = kvp_proto_encode_request(f, sizeof(f), 5, &in);
			assert_int_equal(decode_patched(f, n, want.flags | 0x80, &l, &conn_fault,
							&why),
					 KVP_E_PROTO);
			assert_non_null(strstr(why, "unknown"));
			n = kvp_proto_encode_request(f, sizeof(f), 5, &in);
			assert_int_equal(decode_patched(f, n, want.flags | foreign, &l, &conn_fault,
							&why),
					 KVP_E_PROTO);
		}
	/* a section's own lengths past the frame: bias entries, schema, tools */
	{
		struct kvp_gen_req in = one_request(P_CHAT_TOOLS, true, true, false), out;
		bool conn_fault;
		const char *why;
		struct kvp_gen_req bad;
		struct kvp_proto_msg mo[3];

		bad = in, bad.samp.hdr.n_bias = KVP_LOGIT_BIAS_MAX + 1;
		bad.samp.bias = calloc(KVP_LOGIT_BIAS_MAX + 1, sizeof(struct kvp_logit_bias));
		assert_non_null(bad.samp.bias);
		assert_int_equal(request_rt(&bad, &l, &out, mo, &conn_fault, &why), KVP_E_PROTO);
		assert_true(conn_fault);
		free((void *)bad.samp.bias);
		/* the sampling section's schema length lies by one: the tools are misread */
		{
			size_t n = kvp_proto_encode_request(f, sizeof(f), 5, &in);
			size_t off = h + sizeof(struct kvp_chat) + sizeof(struct kvp_cache_ctl) +
				     offsetof(struct kvp_sampling, schema_bytes);
			uint32_t sb;

			memcpy(&sb, f + off, 4);
			sb += 1000;
			memcpy(f + off, &sb, 4);
			assert_int_equal(kvp_proto_decode_request(KVP_FRAME_CHAT, f + h, n - h, &l,
								  &out, mo, &conn_fault, &why),
					 KVP_E_PROTO);
			assert_true(conn_fault);
		}
		/* the tools' length past the frame, and their reserved word */
		{
			size_t n, off;
			struct kvp_chat_tools t = { .bytes = 60000 };

			n = kvp_proto_encode_request(f, sizeof(f), 5, &in);
			off = h + sizeof(struct kvp_chat) + sizeof(struct kvp_cache_ctl) +
			      sizeof(struct kvp_sampling) + 2 * sizeof(struct kvp_logit_bias) +
			      in.samp.hdr.schema_bytes;
			memcpy(f + off, &t, sizeof(t));
			assert_int_equal(kvp_proto_decode_request(KVP_FRAME_CHAT, f + h, n - h, &l,
								  &out, mo, &conn_fault, &why),
					 KVP_E_PROTO);
			t = (struct kvp_chat_tools){ .bytes = in.tools_len, .reserved = 1 };
			memcpy(f + off, &t, sizeof(t));
			assert_int_equal(kvp_proto_decode_request(KVP_FRAME_CHAT, f + h, n - h, &l,
								  &out, mo, &conn_fault, &why),
					 KVP_E_PROTO);
			assert_non_null(strstr(why, "reserved"));
		}
		/* the values of each section: refused, the connection kept */
		bad = in, bad.cc.retain = 101;
		assert_int_equal(request_rt(&bad, &l, &out, mo, &conn_fault, &why), KVP_E_INVALID);
		assert_false(conn_fault);
		bad = in, bad.samp.hdr.top_logprobs = 21;
		assert_int_equal(request_rt(&bad, &l, &out, mo, &conn_fault, &why), KVP_E_INVALID);
		assert_false(conn_fault);
		bad = in, bad.tools = "[\xff]", bad.tools_len = 3;
		assert_int_equal(request_rt(&bad, &l, &out, mo, &conn_fault, &why), KVP_E_INVALID);
		assert_false(conn_fault);
		/* more continuations than the maximum: a limit, the request's alone */
		bad = one_request(P_TOKENS, true, false, false), bad.cc.n = KVP_PARALLEL_MAX + 1;
		assert_int_equal(request_rt(&bad, &l, &out, NULL, &conn_fault, &why), KVP_E_LIMIT);
		assert_false(conn_fault);
		/* GENERATE over a limit WELCOME announces: the connection's fault */
		bad = one_request(P_TEXT, false, false, false), bad.max_new_tokens = 101;
		assert_int_equal(request_rt(&bad, &l, &out, NULL, &conn_fault, &why), KVP_E_LIMIT);
		assert_true(conn_fault);
		/* ... a CHAT's is its own */
		bad = one_request(P_CHAT, false, false, false), bad.max_new_tokens = 101;
		assert_int_equal(request_rt(&bad, &l, &out, mo, &conn_fault, &why), KVP_E_LIMIT);
		assert_false(conn_fault);
		/* neither frame: nothing to decode */
		assert_int_equal(kvp_proto_decode_request(KVP_FRAME_TOKENIZE, f + h, 8, &l, &out,
							  NULL, &conn_fault, &why),
				 KVP_E_PROTO);
	}
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
	assert_true(kvp_proto_from_client(KVP_FRAME_TOKENIZE));
	assert_true(kvp_proto_from_client(KVP_FRAME_DETOKENIZE));
	assert_true(kvp_proto_from_client(KVP_FRAME_CHAT));
	assert_false(kvp_proto_from_client(KVP_FRAME_IDS));
	assert_string_equal(kvp_proto_type_name(KVP_FRAME_CHAT), "CHAT");
}

/*
 * Every decoder of ipc/proto.c on an empty payload, at NULL (what a caller may pass for
 * zero bytes) and at a real address: refused as malformed, never read (the sanitizer
 * build catches a NULL memcpy or memchr).
 */
static void test_empty_payloads(void **state)
{
	static const uint8_t nothing[1];
	const void *bases[2] = { NULL, nothing };
	struct kvp_frame_hdr hdr;
	struct kvp_hello hello;
	struct kvp_welcome w;
	struct kvp_token t;
	struct kvp_usage u;
	struct kvp_cache_usage cu;
	struct kvp_error e;
	struct kvp_tokenize tz;
	struct kvp_detokenize dt;
	struct kvp_ids ids;
	struct kvp_lease_req lr;
	struct kvp_lease le;
	struct kvp_pin pin;
	struct kvp_gen_req req;
	struct kvp_proto_msg msg;
	const void *p1, *p2;
	const char *s1, *s2;
	int32_t cont;
	bool has_cu, conn_fault;

	(void)state;
	for (int i = 0; i < 2; i++) {
		const void *b = bases[i];
		const char *why = NULL;

		assert_int_equal(kvp_proto_check_hdr(b, 0, 4096, &hdr, &why), KVP_E_PROTO);
		assert_non_null(why);
		assert_int_equal(kvp_proto_decode_hello(b, 0, &hello, &why), KVP_E_PROTO);
		assert_int_equal(kvp_proto_decode_request(KVP_FRAME_GENERATE, b, 0, &lim, &req,
							  NULL, &conn_fault, &why),
				 KVP_E_PROTO);
		assert_true(conn_fault);
		msg.len = 77; /* no messages: nothing is written */
		assert_int_equal(kvp_proto_decode_request(KVP_FRAME_CHAT, b, 0, &lim, &req, &msg,
							  &conn_fault, &why),
				 KVP_E_PROTO);
		assert_int_equal(msg.len, 77);
		assert_int_equal(kvp_proto_decode_welcome(b, 0, &w, &why), KVP_E_PROTO);
		assert_int_equal(kvp_proto_decode_token(b, 0, &t, &p1, &s1, NULL, NULL, NULL, &why),
				 KVP_E_PROTO);
		assert_int_equal(kvp_proto_decode_token(b, 0, &t, &p1, &s1, &cont, NULL, NULL,
							&why),
				 KVP_E_PROTO);
		assert_int_equal(kvp_proto_decode_done(b, 0, &u, NULL, NULL, NULL, NULL, &why),
				 KVP_E_PROTO);
		assert_int_equal(kvp_proto_decode_done(b, 0, &u, &cu, &has_cu, NULL, NULL, &why),
				 KVP_E_PROTO);
		assert_false(has_cu);
		assert_int_equal(kvp_proto_decode_error(b, 0, &e, &s1, &why), KVP_E_PROTO);
		assert_int_equal(kvp_proto_decode_tokenize(b, 0, &lim, &tz, &s2, &why),
				 KVP_E_PROTO);
		assert_int_equal(kvp_proto_decode_detokenize(b, 0, &lim, &dt, &p1, &why),
				 KVP_E_PROTO);
		assert_int_equal(kvp_proto_decode_ids(b, 0, &ids, &p1, &s1, &why), KVP_E_PROTO);
		assert_int_equal(kvp_proto_decode_lease_req(b, 0, &lim, &lr, &p1, &why),
				 KVP_E_PROTO);
		assert_int_equal(kvp_proto_decode_lease(b, 0, &le, &p2, &why), KVP_E_PROTO);
		assert_int_equal(kvp_proto_decode_pin(b, 0, &lim, &pin, &p1, &why), KVP_E_PROTO);
	}
}

/* LEASE: salt padding must be zero, as GENERATE's and PIN's (a salt that hashes alike) */
static void test_lease_salt_padding(void **state)
{
	struct kvp_lease_req l = { .n_tokens = 1, .salt_len = 3, .salt = { 'a', 'b', 'c' } };
	struct kvp_lease_req out;
	int32_t id = 5;
	uint8_t frame[256];
	const void *ids;
	const char *why = NULL;
	size_t n;

	(void)state;
	n = kvp_proto_encode_lease_req(frame, sizeof(frame), 9, &l, &id);
	assert_int_equal(kvp_proto_decode_lease_req(frame + sizeof(struct kvp_frame_hdr),
						    n - sizeof(struct kvp_frame_hdr), &lim, &out,
						    &ids, &why),
			 KVP_OK);
	l.salt[10] = 1; /* past salt_len */
	n = kvp_proto_encode_lease_req(frame, sizeof(frame), 9, &l, &id);
	assert_int_equal(kvp_proto_decode_lease_req(frame + sizeof(struct kvp_frame_hdr),
						    n - sizeof(struct kvp_frame_hdr), &lim, &out,
						    &ids, &why),
			 KVP_E_PROTO);
	assert_string_equal(why, "salt padding must be zero");
	l.salt[10] = 0;
	l.salt_len = KVP_SALT_MAX + 1;
	n = kvp_proto_encode_lease_req(frame, sizeof(frame), 9, &l, &id);
	assert_int_equal(kvp_proto_decode_lease_req(frame + sizeof(struct kvp_frame_hdr),
						    n - sizeof(struct kvp_frame_hdr), &lim, &out,
						    &ids, &why),
			 KVP_E_PROTO);
}

/*
 * max_text_bytes: a CHAT's messages together, a GENERATE's, PIN's or TOKENIZE's text
 * past it are LIMIT, decided by the decoder (before anything renders or tokenizes)
 */
static void test_text_cap(void **state)
{
	struct kvp_proto_limits capped = lim;
	const struct kvp_proto_msg m[2] = {
		{ .role = KVP_ROLE_SYSTEM, .len = 6, .text = "abcdef" },
		{ .role = KVP_ROLE_USER, .len = 5, .text = "ghijk" },
	};
	struct kvp_chat c = chat(2), co;
	struct kvp_generate g = gen(0), go;
	struct kvp_tokenize t = { .text_bytes = 11 }, to;
	struct kvp_pin pin = { .flags = KVP_GEN_TEXT, .text_bytes = 11 }, po;
	uint8_t raw[512];
	const void *p;
	const char *why = NULL, *text;
	size_t n;
	const size_t h = sizeof(struct kvp_frame_hdr);

	(void)state;
	g.flags = KVP_GEN_TEXT;
	g.text_bytes = 11;
	for (uint32_t cap = 10; cap <= 11; cap++) {
		int want = cap == 10 ? KVP_E_LIMIT : KVP_OK;

		capped.max_text_bytes = cap;
		n = raw_chat(raw, sizeof(raw), 1, &c, NULL, 0, NULL, m);
		assert_int_equal(decode_chat(raw + h, n - h, &capped, &co, &p, NULL, NULL, &why),
				 want);
		if (want)
			assert_string_equal(why,
					    "chat messages longer than max_text_bytes together");
		n = raw_generate(raw, sizeof(raw), 1, &g, NULL, 0, "hello world");
		assert_int_equal(decode_generate(raw + h, n - h, &capped, &go, &p, &why), want);
		n = kvp_proto_encode_tokenize(raw, sizeof(raw), 1, &t, "hello world");
		assert_int_equal(kvp_proto_decode_tokenize(raw + h, n - h, &capped, &to, &text,
							   &why),
				 want);
		n = kvp_proto_encode_pin(raw, sizeof(raw), KVP_FRAME_PIN, 1, &pin, "hello world");
		assert_int_equal(kvp_proto_decode_pin(raw + h, n - h, &capped, &po, &p, &why),
				 want);
	}
	/* 0: no cap (max_prompt_tokens, 64 bytes here, still holds the others) */
	capped.max_text_bytes = 0;
	n = raw_chat(raw, sizeof(raw), 1, &c, NULL, 0, NULL, m);
	assert_int_equal(decode_chat(raw + h, n - h, &capped, &co, &p, NULL, NULL, &why), KVP_OK);
}

/* The sampling section: lengths are faults (PROTO), values refusals (INVALID). */
static int gen_with_sampling(const struct kvp_sampling *sh, const void *bias, const char *schema,
			     size_t cut, struct kvp_proto_sampling *ps, const char **why)
{
	static uint8_t frame[4096];
	uint8_t sect[1024];
	struct kvp_generate g = {
		.flags = KVP_GEN_SAMPLING, .n_tokens = 2, .max_new_tokens = 4, .top_p = 1
	};
	int32_t ids[2] = { 1, 2 };
	struct kvp_gen_req out;
	struct kvp_frame_hdr h;
	size_t n = sizeof(*sh);
	bool conn_fault;
	int r;

	/* at most the 2 entries given: a count above that leaves the frame short */
	uint32_t nb = sh->n_bias < 2 ? sh->n_bias : 2;

	memcpy(sect, sh, sizeof(*sh));
	memcpy(sect + n, bias, (size_t)nb * sizeof(struct kvp_logit_bias));
	n += (size_t)nb * sizeof(struct kvp_logit_bias);
	memcpy(sect + n, schema, sh->schema_bytes);
	n += sh->schema_bytes;
	raw_generate(frame, sizeof(frame), 9, &g, sect, n, ids);
	memcpy(&h, frame, sizeof(h));
	r = kvp_proto_decode_request(KVP_FRAME_GENERATE, frame + sizeof(h), h.len_bytes - cut, &lim,
				     &out, NULL, &conn_fault, why);
	/* lengths end the connection, values refuse the request */
	if (r)
		assert_int_equal(conn_fault, r == KVP_E_PROTO);
	if (r && r != KVP_E_INVALID)
		return r;
	assert_true(out.has_samp);
	*ps = out.samp;
	if (r)
		return r;
	assert_memory_equal(out.ids, ids, sizeof(ids));
	return r;
}

static void test_sampling_section(void **state)
{
	struct kvp_logit_bias b[2] = { { 5, -100 }, { 7, 2.5f } };
	const char *schema = "{\"type\":\"object\"}";
	struct kvp_sampling sh = { .flags = KVP_SAMP_LOGPROBS,
				   .top_logprobs = 3,
				   .presence_penalty = 0.5f,
				   .n_bias = 2,
				   .grammar = KVP_GRAMMAR_JSON_SCHEMA,
				   .schema_bytes = (uint32_t)strlen(schema) };
	struct kvp_proto_sampling ps;
	struct kvp_sampling bad;
	const char *why = "";

	assert_int_equal(gen_with_sampling(&sh, b, schema, 0, &ps, &why), KVP_OK);
	assert_int_equal(ps.hdr.top_logprobs, 3);
	assert_int_equal(ps.hdr.n_bias, 2);
	assert_memory_equal(ps.bias, b, sizeof(b));
	assert_memory_equal(ps.schema, schema, strlen(schema));
	/* the prompt cut short: the section's lengths no longer fit */
	assert_int_equal(gen_with_sampling(&sh, b, schema, 9, &ps, &why), KVP_E_PROTO);
	bad = sh, bad.n_bias = KVP_LOGIT_BIAS_MAX + 1;
	assert_int_equal(gen_with_sampling(&bad, b, schema, 0, &ps, &why), KVP_E_PROTO);
	bad = sh, bad.think_budget = 1; /* without its flag: structure */
	assert_int_equal(gen_with_sampling(&bad, b, schema, 0, &ps, &why), KVP_E_PROTO);
	bad = sh, bad.flags |= KVP_SAMP_THINK_BUDGET, bad.think_budget = 7;
	assert_int_equal(gen_with_sampling(&bad, b, schema, 0, &ps, &why), KVP_OK);
	assert_int_equal(ps.hdr.think_budget, 7);
	bad.think_budget = 0; /* with it, a value: at least 1 */
	assert_int_equal(gen_with_sampling(&bad, b, schema, 0, &ps, &why), KVP_E_INVALID);
	bad = sh, bad.flags = 0x80;
	assert_int_equal(gen_with_sampling(&bad, b, schema, 0, &ps, &why), KVP_E_PROTO);
	bad = sh, bad.top_logprobs = 21;
	assert_int_equal(gen_with_sampling(&bad, b, schema, 0, &ps, &why), KVP_E_INVALID);
	bad = sh, bad.flags = 0;
	assert_int_equal(gen_with_sampling(&bad, b, schema, 0, &ps, &why), KVP_E_INVALID);
	bad = sh, bad.frequency_penalty = 2.5f;
	assert_int_equal(gen_with_sampling(&bad, b, schema, 0, &ps, &why), KVP_E_INVALID);
	bad = sh, bad.grammar = KVP_GRAMMAR_JSON_OBJECT;
	assert_int_equal(gen_with_sampling(&bad, b, schema, 0, &ps, &why), KVP_E_INVALID);
	bad = sh, bad.grammar = 9;
	assert_int_equal(gen_with_sampling(&bad, b, schema, 0, &ps, &why), KVP_E_INVALID);
	b[1].bias = 101;
	assert_int_equal(gen_with_sampling(&sh, b, schema, 0, &ps, &why), KVP_E_INVALID);
	assert_non_null(strstr(why, "bias"));
}

static void test_logprobs_frame(void **state)
{
	uint8_t frame[256];
	struct kvp_logprob e[6] = { { 3, -0.5f }, { 3, -0.5f }, { 9, -1.5f },
				    { 4, -2.0f }, { 1, -0.1f }, { 4, -2.0f } };
	struct kvp_logprobs h = { .n_tokens = 2, .n_top = 2 }, out;
	struct kvp_frame_hdr hdr;
	const void *entries;
	const char *why = "";
	size_t len = kvp_proto_encode_logprobs(frame, sizeof(frame), 5, &h, e);

	assert_int_equal(len, sizeof(hdr) + sizeof(h) + sizeof(e));
	memcpy(&hdr, frame, sizeof(hdr));
	assert_int_equal(hdr.type, KVP_FRAME_LOGPROBS);
	assert_int_equal(kvp_proto_decode_logprobs(frame + sizeof(hdr), hdr.len_bytes, &out,
						   &entries, &why),
			 KVP_OK);
	assert_memory_equal(entries, e, sizeof(e));
	assert_int_equal(kvp_proto_decode_logprobs(frame + sizeof(hdr), hdr.len_bytes - 1, &out,
						   &entries, &why),
			 KVP_E_PROTO);
	h.n_top = 21;
	memcpy(frame + sizeof(hdr), &h, sizeof(h));
	assert_int_equal(kvp_proto_decode_logprobs(frame + sizeof(hdr), hdr.len_bytes, &out,
						   &entries, &why),
			 KVP_E_PROTO);
}

static void test_token_usage_trailer(void **state)
{
	/*
	 * a TOKEN's trailers, told apart by the bytes after the text: the continuation (8),
	 * the prompt's usage (80), both (88); a decoder that takes no usage refuses one
	 */
	const int32_t ids[2] = { 7, 9 };
	struct kvp_usage u = { .prompt_tokens = 100,
			       .cached_tokens = 64,
			       .cache_creation_tokens = 32 };
	struct kvp_usage got;
	struct kvp_token t;
	uint8_t raw[256];
	const size_t h = sizeof(struct kvp_frame_hdr);
	const void *p;
	const char *text, *why = NULL;
	int32_t cont;
	bool has;
	size_t n;

	(void)state;
	for (int c = -1; c <= 3; c += 4) {
		n = kvp_proto_encode_token(raw, sizeof(raw), 5, ids, 2, "ab", 2, c, &u);
		assert_int_equal(n, h + 8 + 8 + 2 + (c >= 0 ? 8 : 0) + sizeof(u));
		memset(&got, 0, sizeof(got));
		assert_int_equal(kvp_proto_decode_token(raw + h, n - h, &t, &p, &text, &cont, &got,
							&has, &why),
				 KVP_OK);
		assert_true(has);
		assert_int_equal(cont, c);
		assert_int_equal(t.n_tokens, 2);
		assert_memory_equal(text, "ab", 2);
		assert_memory_equal(&got, &u, sizeof(u));
		assert_int_equal(kvp_proto_decode_token(raw + h, n - h, &t, &p, &text, &cont, NULL,
							NULL, &why),
				 KVP_E_PROTO);
		/* without usage: as before */
		n = kvp_proto_encode_token(raw, sizeof(raw), 5, ids, 2, "ab", 2, c, NULL);
		assert_int_equal(kvp_proto_decode_token(raw + h, n - h, &t, &p, &text, &cont, &got,
							&has, &why),
				 KVP_OK);
		assert_false(has);
		assert_int_equal(cont, c);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_generate_roundtrip),
		cmocka_unit_test(test_sampling_section),
		cmocka_unit_test(test_logprobs_frame),
		cmocka_unit_test(test_daemon_frames_roundtrip),
		cmocka_unit_test(test_token_usage_trailer),
		cmocka_unit_test(test_encoder_reports_needed_size),
		cmocka_unit_test(test_bad_headers),
		cmocka_unit_test(test_bad_generate_payloads),
		cmocka_unit_test(test_bad_daemon_payloads),
		cmocka_unit_test(test_tokenizer_frames),
		cmocka_unit_test(test_chat_frames),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_message_breakpoints),
		cmocka_unit_test(test_empty_payloads),
		cmocka_unit_test(test_lease_salt_padding),
		cmocka_unit_test(test_text_cap),
		cmocka_unit_test(test_chat_tools),
		cmocka_unit_test(test_one_request_path),
		cmocka_unit_test(test_one_request_malformed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
