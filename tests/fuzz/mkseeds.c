/* SPDX-License-Identifier: MIT */
/*
 * mkseeds.c - write the binary seeds of the fuzz corpora (tests/fuzz/corpus/<target>/)
 * from the encoders themselves, so every seed is a sound input a fuzzer mutates from:
 * frames of every type, a small GGUF model, disk-tier file and slot regions, remote
 * values of the fixture's blocks.  Text seeds (JSON, INI, HTTP heads) are written by
 * hand in the corpus.  Run when a format changes, then commit what it wrote:
 *
 *	build/tests/fuzz/fuzz-mkseeds tests/fuzz/corpus
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/mkmodel.h"
#include "ipc/proto.h"
#include "shm/remote/codec.h"

#include "blkfix.h"

static const char *root;

static void put(const char *target, const char *name, const void *p, size_t n)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/seed-%s", root, target, name);
	f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
		fprintf(stderr, "mkseeds: %s: %s\n", path, strerror(errno));
		exit(1);
	}
}

/*
 * The sampling section (logprobs, penalties, logit bias, a JSON schema) on GENERATE and
 * CHAT, alone and after a cache control, FIT_CONTEXT; the frames that answer it
 * (LOGPROBS, and the first TOKEN with the prompt's usage).
 */
static void sampling_seeds(uint8_t *b, size_t cap, const struct kvp_gen_req *g0,
			   const struct kvp_gen_req *ch0)
{
	static const char schema[] = "{\"type\":\"object\",\"properties\":{\"a\":"
				     "{\"type\":\"integer\"}},\"required\":[\"a\"]}";
	struct kvp_sampling s = { .flags = KVP_SAMP_LOGPROBS,
				  .top_logprobs = 2,
				  .presence_penalty = 0.5f,
				  .frequency_penalty = -0.25f,
				  .n_bias = 2,
				  .grammar = KVP_GRAMMAR_JSON_SCHEMA,
				  .schema_bytes = sizeof(schema) - 1 };
	const struct kvp_logit_bias bias[] = { { 3186, 5.0f }, { 2, -100.0f } };
	struct kvp_cache_ctl cc = { .n_breakpoints = 1, .breakpoints = { 2 }, .n = 2 };
	struct kvp_logprobs lh = { .n_tokens = 2, .n_top = 2 };
	const struct kvp_logprob lp[] = { { 15043, -0.1f }, { 15043, -0.1f }, { 7, -2.5f },
					  { 3186, -1.0f },  { 3186, -1.0f },  { 9, -1.5f } };
	struct kvp_usage u = { .prompt_tokens = 4, .cached_tokens = 0 };
	const struct kvp_proto_sampling ps = { .hdr = s, .bias = bias, .schema = schema };
	struct kvp_gen_req g = *g0, ch = *ch0;
	const int32_t *ids = g0->ids;
	size_t n;

	g.flags = KVP_GEN_FIT_CONTEXT;
	g.has_samp = true;
	g.samp = ps;
	n = kvp_proto_encode_request(b, cap, 10, &g);
	put("proto", "generate-sampling-fit", b, n);
	g.flags = 0;
	g.has_cc = true;
	g.cc = cc;
	n = kvp_proto_encode_request(b, cap, 11, &g);
	put("proto", "generate-cc-sampling", b, n);
	g = *g0;
	g.flags = KVP_GEN_FIT_CONTEXT;
	n = kvp_proto_encode_request(b, cap, 12, &g);
	put("proto", "generate-fit", b, n);
	/* a JSON object grammar, no bias: the section alone */
	g.flags = 0;
	g.has_samp = true;
	g.samp = (struct kvp_proto_sampling){ .hdr.grammar = KVP_GRAMMAR_JSON_OBJECT };
	n = kvp_proto_encode_request(b, cap, 13, &g);
	put("proto", "generate-json-object", b, n);
	ch.flags = KVP_CHAT_FIT_CONTEXT;
	ch.has_samp = true;
	ch.samp = ps;
	n = kvp_proto_encode_request(b, cap, 14, &ch);
	put("proto", "chat-sampling-fit", b, n);
	ch.flags = 0;
	ch.has_cc = true;
	ch.cc = cc;
	n = kvp_proto_encode_request(b, cap, 15, &ch);
	put("proto", "chat-cc-sampling", b, n);
	n = kvp_proto_encode_logprobs(b, cap, 10, &lh, lp);
	put("proto", "logprobs", b, n);
	n = kvp_proto_encode_token(b, cap, 10, ids, 2, "he", 2, -1, &u);
	put("proto", "token-usage", b, n);
	n = kvp_proto_encode_token(b, cap, 11, ids, 2, "he", 2, 1, &u);
	put("proto", "token-cont-usage", b, n);
}

static void proto(void)
{
	static uint8_t b[8192];
	const int32_t ids[] = { 1, 15043, 3186, 29892 };
	struct kvp_hello hello = { .flags = KVP_HELLO_WANT_POOL_FD, .client = "fuzz" };
	struct kvp_gen_req g = { .type = KVP_FRAME_GENERATE,
				 .n_ids = 4,
				 .ids = ids,
				 .max_new_tokens = 16,
				 .top_k = 40,
				 .temperature = 0.7f,
				 .top_p = 0.9f,
				 .seed = 1,
				 .salt_len = 2,
				 .salt = "ab" };
	struct kvp_gen_req gt = { .type = KVP_FRAME_GENERATE,
				  .flags = KVP_GEN_TEXT,
				  .text_bytes = 11,
				  .text = "hello world",
				  .max_new_tokens = 8 };
	struct kvp_cache_ctl cc = { .flags = KVP_CC_RETAIN,
				    .n_breakpoints = 2,
				    .breakpoints = { 2, 4 },
				    .ttl_s = 60,
				    .retain = 50,
				    .n = 1 };
	struct kvp_usage u = { 0 };
	struct kvp_cache_usage cu = { 0 };
	struct kvp_tokenize tk = { .text_bytes = 11 };
	struct kvp_detokenize dt = { .n_tokens = 4 };
	struct kvp_proto_msg msgs[] = { { KVP_ROLE_SYSTEM, 4, "Be k" },
					{ KVP_ROLE_USER, 5, "hello" } };
	struct kvp_gen_req ch = { .type = KVP_FRAME_CHAT,
				  .n_messages = 2,
				  .msgs = msgs,
				  .max_new_tokens = 16,
				  .temperature = 1.0f,
				  .top_p = 1.0f,
				  .template_name = "llama3" };
	struct kvp_lease_req lr = { .n_tokens = 4, .ttl_ms = 1000 };
	struct kvp_pin pin = { .flags = 0, .n_tokens = 4 };
	struct kvp_welcome w = { .n_vocab = 32000, .n_ctx = 2048, .model = "tiny" };
	struct kvp_lease l = { 0 };
	struct kvp_gen_req chc = ch, gc = g;
	size_t n;

	n = kvp_proto_encode_hello(b, sizeof(b), &hello);
	put("proto", "hello", b, n);
	n = kvp_proto_encode_request(b, sizeof(b), 7, &g);
	put("proto", "generate-ids", b, n);
	n = kvp_proto_encode_request(b, sizeof(b), 8, &gt);
	put("proto", "generate-text", b, n);
	gc.has_cc = true;
	gc.cc = cc;
	n = kvp_proto_encode_request(b, sizeof(b), 9, &gc);
	put("proto", "generate-cc", b, n);
	n = kvp_proto_encode_cancel(b, sizeof(b), 7);
	put("proto", "cancel", b, n);
	n = kvp_proto_encode_welcome(b, sizeof(b), &w);
	put("proto", "welcome", b, n);
	n = kvp_proto_encode_token(b, sizeof(b), 7, ids, 2, "he", 2, -1, NULL);
	put("proto", "token", b, n);
	n = kvp_proto_encode_token(b, sizeof(b), 7, ids, 2, "he", 2, 1, NULL);
	put("proto", "token-cc", b, n);
	n = kvp_proto_encode_done(b, sizeof(b), 7, &u, NULL, NULL);
	put("proto", "done", b, n);
	n = kvp_proto_encode_done(b, sizeof(b), 7, &u, &cu, NULL);
	put("proto", "done-cc", b, n);
	n = kvp_proto_encode_done(b, sizeof(b), 7, &u, &cu, &(struct kvp_spec_usage){ 12, 9 });
	put("proto", "done-cc-spec", b, n);
	n = kvp_proto_encode_error(b, sizeof(b), 7, KVP_E_LIMIT, "too long", 8);
	put("proto", "error", b, n);
	n = kvp_proto_encode_tokenize(b, sizeof(b), 7, &tk, "hello world");
	put("proto", "tokenize", b, n);
	n = kvp_proto_encode_detokenize(b, sizeof(b), 7, &dt, ids);
	put("proto", "detokenize", b, n);
	n = kvp_proto_encode_ids(b, sizeof(b), 7, ids, 4, "text", 4);
	put("proto", "ids", b, n);
	n = kvp_proto_encode_request(b, sizeof(b), 7, &ch);
	put("proto", "chat", b, n);
	cc.flags |= KVP_CC_BP_MESSAGES;
	cc.n_breakpoints = 1;
	cc.breakpoints[0] = 1;
	chc.has_cc = true;
	chc.cc = cc;
	n = kvp_proto_encode_request(b, sizeof(b), 7, &chc);
	put("proto", "chat-cc", b, n);
	n = kvp_proto_encode_lease_req(b, sizeof(b), 7, &lr, ids);
	put("proto", "lease", b, n);
	n = kvp_proto_encode_lease(b, sizeof(b), 7, &l, NULL);
	put("proto", "leased", b, n);
	n = kvp_proto_encode_release(b, sizeof(b), 7);
	put("proto", "release", b, n);
	n = kvp_proto_encode_pin(b, sizeof(b), KVP_FRAME_PIN, 7, &pin, ids);
	put("proto", "pin", b, n);
	n = kvp_proto_encode_flush_domain(b, sizeof(b), 7, "alice");
	put("proto", "flush-domain", b, n);
	sampling_seeds(b, sizeof(b), &g, &ch);
}

static void gguf(void)
{
	struct kvp_mkmodel_opts o;
	void *buf = NULL;
	size_t len;

	if (kvp_mkmodel_preset(&o, "tiny"))
		exit(1);
	o.n_embd = 8;
	o.n_heads = 2;
	o.n_kv_heads = 1;
	o.n_ff = 8;
	o.n_layers = 1;
	o.chat_template = "{{ bos_token }}{% for m in messages %}<|im_start|>";
	if (kvp_mkmodel_write_mem(&buf, &len, &o, NULL, 0)) {
		fprintf(stderr, "mkseeds: mkmodel failed\n");
		exit(1);
	}
	put("gguf", "tiny-f32", buf, len);
	free(buf);
}

static void tier_remote(void)
{
	struct blkfix f;
	struct kvp_remote_codec c;
	uint8_t *b, *kv;
	const uint64_t tier_id = 0x1234abcd5678ef01ull;

	blkfix_init(&f);
	b = calloc(1, f.lay.slot_hdr_bytes + f.lay.block_bytes + KVP_TIER_FILE_REGION);
	kv = b + f.lay.slot_hdr_bytes;
	if (!b || kvp_remote_codec_init(&c, &f.shape, f.fp, "avx2"))
		exit(1);
	kvp_tier_file_encode(b, &f.lay, tier_id, 42);
	put("tier", "file-header", b, KVP_TIER_FILE_REGION);
	for (int i = 0; i < 2; i++) {
		uint8_t *val = malloc(c.value_bytes);
		char name[32];

		for (size_t k = 0; k < f.lay.block_bytes; k++)
			kv[k] = (uint8_t)(k * 131 + 7 + i);
		kvp_tier_blk_encode(b, &f.lay, tier_id, (uint64_t)i, 1 + (uint64_t)i, &f.rec[i],
				    kv);
		snprintf(name, sizeof(name), "slot%d", i);
		put("tier", name, b, f.lay.slot_hdr_bytes + f.lay.block_bytes);
		if (!val)
			exit(1);
		kvp_remote_value_encode(val, &c, kvp_remote_digest(&c, f.rec[i].hash, f.key.seed),
					&f.rec[i], kv);
		snprintf(name, sizeof(name), "block%d", i);
		put("remote", name, val, c.value_bytes);
		free(val);
	}
	free(b);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: fuzz-mkseeds CORPUS_DIR\n");
		return 2;
	}
	root = argv[1];
	proto();
	gguf();
	tier_remote();
	return 0;
}
