/* SPDX-License-Identifier: MIT */
/*
 * mkmodel_cli.c - kvpool-mkmodel's command line over kvp_mkmodel_write() (see run.h and
 * mkmodel.h).  Compiled into the kvpool-mkmodel executable only (and test_run).
 */
#include "compute/run.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/mkmodel.h"
#include "compute/mkvocab.h"
#include "util/parse.h"

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint64_t v;

	if (kvp_parse_u64(s, lo, hi, &v))
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	return kvp_parse_u64(s, lo, hi, out);
}

static int parse_float(const char *s, float lo, float hi, float *out)
{
	return kvp_parse_float(s, lo, hi, out);
}

/* kvpool-mkmodel's long options without a short form */
enum {
	OPT_ARCH = 0x100,
	OPT_HEAD_DIM,
	OPT_QKV_BIAS,
	OPT_ROPE_BASE,
	OPT_ROPE_FREQS,
	OPT_ROPE_SCALING,
	OPT_ROPE_FACTOR,
	OPT_ROPE_ORIG_CTX,
};

static void mkmodel_usage(FILE *f)
{
	fputs("usage: kvpool-mkmodel -o FILE [--preset tiny|tinyq|demo|1b] [--type TYPE]\n"
	      "                      [--seed S] [--n-embd N] [--n-layers N] [--n-heads N]\n"
	      "                      [--n-kv-heads N] [--n-ff N] [--n-ctx N] [--tied|--untied]\n"
	      "                      [--name NAME] [--arch llama|qwen2] [--head-dim N] [--qkv-bias]\n"
	      "                      [--rope-base F] [--rope-freqs[=F,LOW,HIGH,CTX]]\n"
	      "                      [--rope-scaling none|linear|yarn] [--rope-scaling-factor F]\n"
	      "                      [--rope-orig-ctx N] [--vocab FILE] [--chat-template FILE]\n"
	      "Writes a GGUF v3 llama (or qwen2) model with seeded random weights and a byte-level vocabulary\n"
	      "(<unk>, <s>, </s>, then 256 byte tokens) or the real one --vocab names (docs/text.md);\n"
	      "the same options always give the same file.\n"
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
	      "      --arch A        llama (default) or qwen2 (Q/K/V biases; read with the NEOX\n"
	      "                      RoPE layout); the metadata keys take the architecture's prefix\n"
	      "      --head-dim N    head size other than n_embd / n_heads (attention.key_length\n"
	      "                      and value_length; Q is n_heads * N wide)\n"
	      "      --qkv-bias      Q/K/V biases in a llama file too\n"
	      "      --rope-base F   rope.freq_base (default 10000; the 1b preset 500000)\n"
	      "      --rope-freqs[=F,LOW,HIGH,CTX]  write rope_freqs.weight: Llama 3.1's frequency\n"
	      "                      factors (default 8,1,4,8192: factor, low/high frequency\n"
	      "                      factors, original context)\n"
	      "      --rope-scaling T  rope.scaling.type: none, linear or yarn\n"
	      "      --rope-scaling-factor F  rope.scaling.factor (positions divided by F)\n"
	      "      --rope-orig-ctx N  rope.scaling.original_context_length (YaRN)\n"
	      "  -h, --help          this text\n",
	      f);
}

/* "F,LOW,HIGH,CTX" into @p; -EINVAL when malformed. */
static int parse_rope_freqs(const char *s, struct kvp_mkmodel_rope_freqs *p)
{
	char *end;

	errno = 0;
	p->factor = strtof(s, &end);
	if (*end++ != ',')
		return -EINVAL;
	p->low_freq_factor = strtof(end, &end);
	if (*end++ != ',')
		return -EINVAL;
	p->high_freq_factor = strtof(end, &end);
	if (*end++ != ',')
		return -EINVAL;
	if (errno || parse_u32(end, 1, UINT32_MAX, &p->orig_ctx) || !(p->factor >= 1.0f) ||
	    !(p->low_freq_factor > 0.0f) || !(p->high_freq_factor > p->low_freq_factor))
		return -EINVAL;
	return 0;
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
		{ "arch", required_argument, 0, OPT_ARCH },
		{ "head-dim", required_argument, 0, OPT_HEAD_DIM },
		{ "qkv-bias", no_argument, 0, OPT_QKV_BIAS },
		{ "rope-base", required_argument, 0, OPT_ROPE_BASE },
		{ "rope-freqs", optional_argument, 0, OPT_ROPE_FREQS },
		{ "rope-scaling", required_argument, 0, OPT_ROPE_SCALING },
		{ "rope-scaling-factor", required_argument, 0, OPT_ROPE_FACTOR },
		{ "rope-orig-ctx", required_argument, 0, OPT_ROPE_ORIG_CTX },
		{ 0 },
	};
	struct kvp_mkmodel_rope_freqs freqs = { 0 };
	const char *arch = NULL, *scaling = NULL;
	uint32_t head_dim = 0, orig_ctx = 0;
	float rope_base = 0, factor = 0;
	int qkv_bias = 0;
	const char *vocab_path = NULL, *tmpl_path = NULL;
	struct kvp_mkmodel_vocab *vocab = NULL;
	char *tmpl = NULL;
	const char *preset = "tiny", *path = NULL, *type = NULL, *name = NULL;
	uint32_t e = 0, l = 0, H = 0, K = 0, F = 0, C = 0;
	int tied = -1, c, r, li;
	uint64_t seed = 0;
	int have_seed = 0;
	struct kvp_mkmodel_opts o;
	char err[256];

	optind = 1;
	while ((c = getopt_long(argc, argv, "o:t:s:p:h", lo, &li)) != -1) {
		uint32_t *dst = c == 'e' ? &e :
				c == 'l' ? &l :
				c == 'H' ? &H :
				c == 'K' ? &K :
				c == 'f' ? &F :
				c == 'c' ? &C :
					   NULL;

		if (dst) {
			if (parse_u32(optarg, 1, 1u << 20, dst)) {
				fprintf(stderr,
					"kvpool-mkmodel: --%s: want an integer in [1, 1048576], got '%s'\n",
					lo[li].name, optarg);
				goto usage;
			}
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
		case OPT_ARCH:
			if (strcmp(optarg, "llama") && strcmp(optarg, "qwen2")) {
				fprintf(stderr,
					"kvpool-mkmodel: --arch: want llama or qwen2, got '%s'\n",
					optarg);
				goto usage;
			}
			arch = optarg;
			break;
		case OPT_HEAD_DIM:
			if (parse_u32(optarg, 2, 1024, &head_dim) || head_dim % 2) {
				fprintf(stderr,
					"kvpool-mkmodel: --head-dim: want an even integer in [2, 1024], got '%s'\n",
					optarg);
				goto usage;
			}
			break;
		case OPT_QKV_BIAS:
			qkv_bias = 1;
			break;
		case OPT_ROPE_BASE:
			if (parse_float(optarg, 1.0001f, 1e12f, &rope_base)) {
				fprintf(stderr,
					"kvpool-mkmodel: --rope-base: want a number > 1, got '%s'\n",
					optarg);
				goto usage;
			}
			break;
		case OPT_ROPE_FREQS:
			freqs = (struct kvp_mkmodel_rope_freqs){ 8.0f, 1.0f, 4.0f, 8192 };
			if (optarg && parse_rope_freqs(optarg, &freqs)) {
				fprintf(stderr,
					"kvpool-mkmodel: --rope-freqs: want FACTOR,LOW,HIGH,CTX (factor >= 1, 0 < low < high, ctx >= 1), got '%s'\n",
					optarg);
				goto usage;
			}
			break;
		case OPT_ROPE_SCALING:
			if (strcmp(optarg, "none") && strcmp(optarg, "linear") &&
			    strcmp(optarg, "yarn")) {
				fprintf(stderr,
					"kvpool-mkmodel: --rope-scaling: want none, linear or yarn, got '%s'\n",
					optarg);
				goto usage;
			}
			scaling = optarg;
			break;
		case OPT_ROPE_FACTOR:
			if (parse_float(optarg, 1e-3f, 1e6f, &factor)) {
				fprintf(stderr,
					"kvpool-mkmodel: --rope-scaling-factor: want a number in [0.001, 1e6], got '%s'\n",
					optarg);
				goto usage;
			}
			break;
		case OPT_ROPE_ORIG_CTX:
			if (parse_u32(optarg, 1, UINT32_MAX, &orig_ctx)) {
				fprintf(stderr,
					"kvpool-mkmodel: --rope-orig-ctx: want an integer >= 1, got '%s'\n",
					optarg);
				goto usage;
			}
			break;
		case 's':
			if (parse_u64(optarg, 0, UINT64_MAX, &seed)) {
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
	if (e)
		o.n_embd = e;
	if (l)
		o.n_layers = l;
	if (H)
		o.n_heads = H;
	if (K)
		o.n_kv_heads = K;
	if (F)
		o.n_ff = F;
	if (C)
		o.n_ctx = C;
	if (tied >= 0)
		o.tied = tied;
	if (name)
		o.name = name;
	if (rope_base)
		o.rope_base = rope_base;
	o.arch = arch;
	o.head_dim = head_dim;
	o.qkv_bias = qkv_bias;
	o.rope_freqs = freqs;
	o.rope_scaling = scaling;
	o.rope_scaling_factor = factor;
	o.rope_orig_ctx = orig_ctx;
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
