/* SPDX-License-Identifier: MIT */
/*
 * mkseeds.c - write the binary seeds of the fuzz corpora (tests/fuzz/corpus/<target>/)
 * from the encoders themselves, so every seed is a sound input a fuzzer mutates from:
 * frames of every type, a small GGUF model, disk-tier file and slot regions, remote
 * values of the fixture's blocks, the tier-rebuild harness's file descriptions.  Text seeds (JSON, INI, HTTP heads) are written by
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

/* One structured input of fuzz_tier_rebuild.c: mode bytes, then records and damages. */
static void rebuild_put(const char *name, const uint8_t *p, size_t n)
{
	put("tier-rebuild", name, p, n);
}

/*
 * The rebuild harness's inputs (fuzz_tier_rebuild.c says what the bytes mean): chains
 * found whole, each way a block is refused or dropped at attach, each file header plan,
 * a cut file, and one raw image of a sound file with a chain of two.  Each is four mode
 * bytes, then records of 8 (one a line), then damages of 3.
 */
static void tier_rebuild(void)
{
	/* clang-format off */
	static const uint8_t chain[] = { 0, 0, 0, 3,
		0, 0, 0, 0, 1, 1, 0, 0,
		1, 1, 0, 0, 2, 2, 0, 0,
		2, 2, 0, 0, 3, 3, 0, 0 };
	/* full scan, queue depth 4, the middle block's K/V flipped */
	static const uint8_t full[] = { 1 | 3 << 2, 0, 0, 3,
		0, 0, 0, 0, 1, 1, 0, 0,
		0x81, 1, 0, 0, 2, 2, 9, 0,
		2, 2, 0, 0, 3, 3, 0, 0 };
	/* an equal block twice, a uid twice (the newer kept), a first block rewritten */
	static const uint8_t dups[] = { 4, 0, 0, 6,
		0, 0, 0, 0, 7, 1, 0, 0,
		3, 0, 0, 0, 7, 2, 0, 0,
		4, 0, 40, 0, 8, 3, 0, 0,
		5, 0, 40, 0, 9, 4, 0, 0,
		6, 4, 0, 0, 10, 5, 0, 0,
		0, 0, 0, 0, 11, 6, 0, 0 };
	/* a parent lied about, a parent erased, a parent of other extra keys */
	static const uint8_t orphans[] = { 8, 0, 0, 6,
		0, 0, 0, 0, 1, 1, 0, 0,
		1, 1, 0, 77, 2, 2, 0, 0,
		2, 0, 0, 0, 3, 3, 0, 0,
		3, 3, 0, 0, 4, 4, 0, 0,
		0x42, 0, 0, 0, 0, 0, 0, 0,
		0x24, 1, 0, 0, 5, 5, 0, 0 };
	/* another tier id, misdirected, generation 0, uid not above puid, a torn header */
	static const uint8_t refused[] = { 0, 0, 0, 6,
		0, 0, 0, 0, 1, 1, 0, 0,
		0x11, 1, 0, 0, 2, 2, 0, 0,
		0x0a, 1, 0, 0, 3, 3, 0, 0,
		3, 1, 0, 0, 4, 0, 0, 0,
		4, 1, 2, 0, 5, 5, 0, 0,
		5, 1, 0, 0, 6, 6, 100, 0x40 };
	/* the header says 4 slots (a resize), 16 slots; another model (a reset) */
	static const uint8_t resize4[] = { 0x10, 3, 0, 3,
		0, 0, 0, 0, 1, 1, 0, 0,
		5, 1, 0, 0, 2, 2, 0, 0,
		7, 2, 0, 0, 3, 3, 0, 0 };
	static const uint8_t resize16[] = { 0x10, 15, 0, 2,
		0, 0, 0, 0, 1, 1, 0, 0,
		7, 1, 0, 0, 2, 2, 0, 0 };
	static const uint8_t reset[] = { 0x21, 0, 0, 2,
		0, 0, 0, 0, 1, 1, 0, 0,
		1, 1, 0, 0, 2, 2, 0, 0 };
	/* cut inside slot 1's K/V (offset 22,528), and to nothing (a new file) */
	static const uint8_t cut[] = { 0x40, 0, 44, 3,
		0, 0, 0, 0, 1, 1, 0, 0,
		1, 1, 0, 0, 2, 2, 0, 0,
		2, 2, 0, 0, 3, 3, 0, 0 };
	static const uint8_t cut0[] = { 0x40, 0, 0, 1,
		0, 0, 0, 0, 1, 1, 0, 0 };
	/* damages: the file header's version byte; then slot 1's uid (fixed buffers) */
	static const uint8_t dmg_file[] = { 0, 0, 0, 1,
		0, 0, 0, 0, 1, 1, 0, 0,
		4, 0, 1 };
	static const uint8_t dmg_slot[] = { 2, 0, 0, 2,
		0, 0, 0, 0, 1, 1, 0, 0,
		1, 1, 0, 0, 2, 2, 0, 0,
		0x10, 0x20, 0x80 };
	/* clang-format on */
	struct blkfix f;
	const size_t slots = 2;
	uint8_t *raw;
	size_t n;

	rebuild_put("chain", chain, sizeof(chain));
	rebuild_put("full-damaged-kv", full, sizeof(full));
	rebuild_put("duplicates", dups, sizeof(dups));
	rebuild_put("orphans", orphans, sizeof(orphans));
	rebuild_put("refused", refused, sizeof(refused));
	rebuild_put("resize4", resize4, sizeof(resize4));
	rebuild_put("resize16", resize16, sizeof(resize16));
	rebuild_put("reset", reset, sizeof(reset));
	rebuild_put("cut-kv", cut, sizeof(cut));
	rebuild_put("cut-all", cut0, sizeof(cut0));
	rebuild_put("damage-file-header", dmg_file, sizeof(dmg_file));
	rebuild_put("damage-slot", dmg_slot, sizeof(dmg_slot));
	rebuild_put("empty", chain, 0);
	rebuild_put("raw-not-a-tier", (const uint8_t *)"\x80\0\0precious data, not a tier\n", 29);

	blkfix_init(&f);
	n = 3 + KVP_TIER_FILE_REGION + slots * f.lay.slot_bytes;
	raw = calloc(1, n);
	if (!raw)
		exit(1);
	raw[0] = 0x80 | 1; /* raw, full scan */
	kvp_tier_file_encode(raw + 3, &f.lay, 0x1234abcd5678ef01ull, 42);
	for (uint64_t i = 0; i < slots; i++) {
		uint8_t *s = raw + 3 + kvp_tier_slot_offset(&f.lay, i);

		for (size_t k = 0; k < f.lay.block_bytes; k++)
			s[f.lay.slot_hdr_bytes + k] = (uint8_t)(k * 131 + 7 + i);
		kvp_tier_blk_encode(s, &f.lay, 0x1234abcd5678ef01ull, i, 1 + i, &f.rec[i],
				    s + f.lay.slot_hdr_bytes);
	}
	rebuild_put("raw-chain", raw, n);
	free(raw);
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
	tier_rebuild();
	return 0;
}
