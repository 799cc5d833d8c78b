/* SPDX-License-Identifier: MIT */
/*
 * fuzz_vocab.c - a tokenizer's vocabulary and merges from untrusted JSON
 * (compute/mkvocab.h, the file kvpool-mkmodel reads), written into a GGUF as
 * tokenizer.ggml.* and built into a tokenizer from it (kvp_tokenizer_new_gguf(): the
 * token list, types, scores, merges, special ids, pre-tokenizer name), which then
 * encodes and decodes a text with special tokens; the chat template it names is
 * detected.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/gguf.h"
#include "compute/mkmodel.h"
#include "compute/mkvocab.h"
#include "compute/text/chat.h"
#include "compute/text/tokenizer.h"

#include "fuzz.h"

static const char sample[] = "Hello world, 123 <|eot_id|> h\xc3\xa9llo\n\t  </s><s>\xe2\x96\x81x";

static void use(const struct kvp_mkmodel_vocab *v)
{
	struct kvp_chat_template ct;
	struct kvp_mkmodel_opts o;
	struct kvp_tokenizer *t = NULL;
	struct kvp_gguf *g = NULL;
	int32_t ids[3 * sizeof(sample) + 4];
	char out[4096];
	void *buf = NULL;
	size_t len;
	int n;

	if (v->chat_template)
		kvp_chat_template_detect(&ct, v->chat_template, strlen(v->chat_template), NULL, 0);
	if (v->n_tokens > 1u << 16 || kvp_mkmodel_preset(&o, "tiny"))
		return;
	o.n_embd = 8;
	o.n_heads = 2;
	o.n_kv_heads = 1;
	o.n_ff = 8;
	o.n_layers = 1;
	o.vocab = v;
	if (kvp_mkmodel_write_mem(&buf, &len, &o, NULL, 0))
		return;
	if (!kvp_gguf_parse(&g, buf, len, NULL, 0) && !kvp_tokenizer_new_gguf(&t, g, 0, NULL, 0)) {
		for (unsigned int f = 0; f < 2; f++) {
			n = kvp_tokenizer_encode_flags(t, sample, sizeof(sample) - 1,
						       f ? KVP_TOK_PARSE_SPECIAL : 0, ids,
						       sizeof(ids) / sizeof(ids[0]));
			if (n > (int)(sizeof(ids) / sizeof(ids[0])))
				__builtin_trap(); /* the header's bound on ids per byte */
			if (n >= 0 &&
			    kvp_tokenizer_decode(t, ids, (size_t)n, KVP_DETOK_RENDER_SPECIAL, out,
						 sizeof(out)) < 0)
				__builtin_trap(); /* encode gave an id decode refuses */
		}
		kvp_tokenizer_free(t);
	}
	kvp_gguf_close(g);
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kvp_mkmodel_vocab *v = NULL;
	char path[64], err[256];
	int fd = fuzz_file(data, size, path, sizeof(path));

	if (fd < 0)
		return 0;
	if (!kvp_mkmodel_vocab_load(&v, path, err, sizeof(err)))
		use(v);
	kvp_mkmodel_vocab_free(v);
	close(fd);
	return 0;
}
