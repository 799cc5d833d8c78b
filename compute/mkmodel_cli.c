/* SPDX-License-Identifier: MIT */
/*
 * mkmodel_cli.c - kvpool-mkmodel's command line over kvp_mkmodel_write() (see run.h and
 * mkmodel.h).  Compiled into the kvpool-mkmodel executable only (and test_run).
 */
#include "compute/run.h"

#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/mkmodel.h"
#include "compute/mkvocab.h"
#include "util/parse.h"

static void mkmodel_usage(FILE *f)
{
	fputs("usage: kvpool-mkmodel -o FILE [--preset tiny|tinyq|demo|1b] [--type TYPE]\n"
	      "                      [--seed S] [--n-embd N] [--n-layers N] [--n-heads N]\n"
	      "                      [--n-kv-heads N] [--n-ff N] [--n-ctx N] [--tied|--untied]\n"
	      "                      [--name NAME] [--vocab FILE] [--chat-template FILE]\n"
	      "Writes a GGUF v3 llama model with seeded random weights and a byte-level vocabulary\n"
	      "(<unk>, <s>, </s>, then 256 byte tokens) or a given one; the same options always\n"
	      "give the same file.\n"
	      "  -o, --output FILE   where to write (replaced atomically)\n"
	      "  -p, --preset NAME   tiny: n_embd 64, 2 layers, 4 heads / 2 KV, n_ff 128 (the default)\n"
	      "                      tinyq: n_embd 256, 2 layers, 4 / 2 heads, n_ff 512 (fits K-quants)\n"
	      "                      demo: ~104M params, n_embd 768, 12 layers, 12 / 4 heads, n_ff 3072\n"
	      "                      1b: Llama-3.2-1B-like, n_embd 2048, 16 layers, 32 / 8 heads, n_ff 8192\n"
	      "  -t, --type T        matrix type (norms stay f32): f32 (default), f16, bf16,\n"
	      "                      q8_0, q4_0, q4_1, q5_0, q5_1 (n_embd, n_ff multiples of 32),\n"
	      "                      q2_k, q3_k, q4_k, q5_k, q6_k (multiples of 256), or a mix as\n"
	      "                      llama.cpp's recipes do: q4_k_m, q5_k_m (attn_v, ffn_down partly\n"
	      "                      and output q6_k), q4_k_s (output q6_k)\n"
	      "  -s, --seed S        weight seed (default 1234)\n"
	      "      --n-embd, --n-layers, --n-heads, --n-kv-heads, --n-ff, --n-ctx N\n"
	      "                      override the preset's shape (each 1..1048576)\n"
	      "      --tied, --untied  reuse token_embd as the output matrix, or not (presets: untied)\n"
	      "      --name NAME     general.name\n"
	      "      --vocab FILE    a real tokenizer instead of the byte-level one: a JSON object of\n"
	      "                      the tokenizer.ggml.* keys (model, pre, tokens, token_type, scores,\n"
	      "                      merges, *_token_id, add_*, chat_template); see compute/mkvocab.h\n"
	      "      --chat-template FILE  tokenizer.chat_template from a text file\n"
	      "  -h, --help          this text\n",
	      f);
}

int kvp_mkmodel_main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "preset", required_argument, 0, 'p' },
		{ "type", required_argument, 0, 't' },
		{ "seed", required_argument, 0, 's' },
		{ "output", required_argument, 0, 'o' },
		{ "n-embd", required_argument, 0, 'e' },
		{ "n-layers", required_argument, 0, 'l' },
		{ "n-heads", required_argument, 0, 'H' },
		{ "n-kv-heads", required_argument, 0, 'K' },
		{ "n-ff", required_argument, 0, 'f' },
		{ "n-ctx", required_argument, 0, 'c' },
		{ "tied", no_argument, 0, 'T' },
		{ "untied", no_argument, 0, 'U' },
		{ "name", required_argument, 0, 'N' },
		{ "help", no_argument, 0, 'h' },
		{ "vocab", required_argument, 0, 'V' },
		{ "chat-template", required_argument, 0, 'C' },
		{ 0 },
	};
	const char *vocab_path = NULL, *tmpl_path = NULL;
	struct kvp_mkmodel_vocab *vocab = NULL;
	char *tmpl = NULL;
	const char *preset = "tiny", *path = NULL, *type = NULL, *name = NULL;
	/* --n-embd .. --n-ctx, by option letter; 0: the preset's */
	static const char shape_opts[] = "elHKfc";
	uint32_t shape[sizeof(shape_opts) - 1] = { 0 };
	int tied = -1, c, r, li;
	uint64_t seed = 0;
	int have_seed = 0;
	struct kvp_mkmodel_opts o;
	char err[256];

	optind = 1;
	while ((c = getopt_long(argc, argv, "o:t:s:p:h", lo, &li)) != -1) {
		const char *k = c > 0 ? strchr(shape_opts, c) : NULL;

		if (k) {
			uint64_t v;

			if (kvp_parse_u64(optarg, 1, 1u << 20, &v)) {
				fprintf(stderr,
					"kvpool-mkmodel: --%s: want an integer in [1, 1048576], got '%s'\n",
					lo[li].name, optarg);
				goto usage;
			}
			shape[k - shape_opts] = (uint32_t)v;
			continue;
		}
		switch (c) {
		case 'p':
			preset = optarg;
			break;
		case 't':
			type = optarg;
			break;
		case 'o':
			path = optarg;
			break;
		case 'N':
			name = optarg;
			break;
		case 'V':
			vocab_path = optarg;
			break;
		case 'C':
			tmpl_path = optarg;
			break;
		case 'T':
			tied = 1;
			break;
		case 'U':
			tied = 0;
			break;
		case 's':
			if (kvp_parse_u64(optarg, 0, UINT64_MAX, &seed)) {
				fprintf(stderr,
					"kvpool-mkmodel: --seed: want an unsigned 64-bit integer, got '%s'\n",
					optarg);
				goto usage;
			}
			have_seed = 1;
			break;
		case 'h':
			mkmodel_usage(stdout);
			return 0;
		default:
			goto usage; /* getopt named the option */
		}
	}
	if (optind != argc) {
		fprintf(stderr, "kvpool-mkmodel: unexpected argument '%s'\n", argv[optind]);
		goto usage;
	}
	if (!path) {
		fprintf(stderr, "kvpool-mkmodel: no output file (-o FILE)\n");
		goto usage;
	}
	if (kvp_mkmodel_preset(&o, preset)) {
		fprintf(stderr,
			"kvpool-mkmodel: --preset: want tiny, tinyq, demo or 1b, got '%s'\n",
			preset);
		goto usage;
	}
	if (type) {
		r = kvp_mkmodel_type_parse(type);
		if (r < 0) {
			fprintf(stderr, "kvpool-mkmodel: --type: want one of %s; got '%s'\n",
				kvp_mkmodel_type_list(), type);
			goto usage;
		}
		o.type = (uint32_t)r;
	}
	if (have_seed)
		o.seed = seed;
	{
		uint32_t *field[] = { &o.n_embd,     &o.n_layers, &o.n_heads,
				      &o.n_kv_heads, &o.n_ff,	  &o.n_ctx };

		static_assert(sizeof(field) / sizeof(field[0]) == sizeof(shape_opts) - 1,
			      "one field per shape option");
		for (size_t i = 0; i < sizeof(shape) / sizeof(shape[0]); i++)
			if (shape[i])
				*field[i] = shape[i];
	}
	if (tied >= 0)
		o.tied = tied;
	if (name)
		o.name = name;
	if (vocab_path && kvp_mkmodel_vocab_load(&vocab, vocab_path, err, sizeof(err))) {
		fprintf(stderr, "kvpool-mkmodel: %s\n", err);
		return 1;
	}
	if (tmpl_path && kvp_mkmodel_read_text(&tmpl, tmpl_path, err, sizeof(err))) {
		fprintf(stderr, "kvpool-mkmodel: %s\n", err);
		kvp_mkmodel_vocab_free(vocab);
		return 1;
	}
	o.vocab = vocab;
	o.chat_template = tmpl;
	r = kvp_mkmodel_write(path, &o, err, sizeof(err));
	kvp_mkmodel_vocab_free(vocab);
	free(tmpl);
	if (r) {
		fprintf(stderr, "kvpool-mkmodel: %s\n", err);
		return r == -EINVAL ? 2 : 1;
	}
	return 0;
usage:
	fprintf(stderr, "kvpool-mkmodel: try 'kvpool-mkmodel --help'\n");
	return 2;
}
