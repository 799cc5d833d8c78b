/* SPDX-License-Identifier: MIT */
/*
 * run.c - kvpool-run: one generation in this process, no daemon (see run.h).
 *
 * A struct kvp_kv_view is backed by one page-aligned heap region holding just enough
 * blocks for prompt + generation, block table 0, 1, 2, ...; everything else is the
 * daemon's code path: compute/gen.c's loop (tokenize, prefill in chunks, the stop
 * rules, streamed UTF-8) over kvp_fwd_prefill()/kvp_fwd_decode() and
 * kvp_sampler_sample().  Single-threaded driver; the forward pass uses --threads.
 * Compiled into the kvpool-run executable only (and the test that runs it).
 */
#include "compute/run.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compute/draft.h"
#include "compute/forward.h"
#include "compute/kernels/kernels.h"
#include "compute/linear.h"
#include "compute/gen.h"
#include "compute/gguf.h"
#include "compute/model.h"
#include "compute/sample.h"
#include "compute/text/tokenizer.h"
#include "shm/geom.h"
#include "util/buf.h"
#include "util/json.h"
#include "util/parse.h"
#include "util/time.h"

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint64_t v;

	if (kvp_parse_u64(s, lo, hi, &v))
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

static void run_usage(FILE *f)
{
	fputs("usage: kvpool-run -m MODEL (-p TEXT | --prompt-file F | --tokens ID,ID,...) [options]\n"
	      "       kvpool-run -m MODEL --tokenize (-p TEXT | --prompt-file F) [--no-bos]\n"
	      "                  [--parse-special] [--json]\n"
	      "       kvpool-run -m MODEL --detokenize --tokens ID,ID,... [--render-special] [--json]\n"
	      "Runs one generation in this process (no daemon) through the daemon's code path:\n"
	      "chunked prefill, then one decode step per token, until N tokens or an\n"
	      "end-of-generation token (eos, eot, eom, the model's end-of-turn markers).\n"
	      "  -m, --model FILE      GGUF model (llama or qwen2, any type: docs/models.md)\n"
	      "  -p, --prompt TEXT     prompt text, tokenized by the model's vocabulary\n"
	      "      --prompt-file F   prompt text read from file F ('-': stdin)\n"
	      "      --tokens LIST     prompt as comma-separated token ids instead of text\n"
	      "      --parse-special   special-token text in the prompt (\"<|eot_id|>\") becomes\n"
	      "                        the token; by default it is plain text\n"
	      "      --no-bos          add neither BOS nor EOS to a text prompt\n"
	      "      --tokenize        only print the prompt text's token ids ({\"tokens\":[...]}\n"
	      "                        with --json; else comma-separated) and exit\n"
	      "      --detokenize      only print the text of --tokens ({\"text\":...} with\n"
	      "                        --json; else the bytes as they are) and exit\n"
	      "      --render-special  --detokenize: control tokens as their text\n"
	      "  -n N                  tokens to generate, 1..1048576 (default 32)\n"
	      "      --temperature T   0 = greedy (the default); else sample from softmax(logits / T)\n"
	      "      --top-k K         sample among the K most likely tokens (default 0 = all)\n"
	      "      --top-p P         then among the smallest set with mass >= P, 0..1 (default 1 = all)\n"
	      "      --seed S          sampler seed (default 0)\n"
	      "      --threads N       compute threads, 1..256 (default: online CPUs)\n"
	      "      --json            print one JSON object {tokens, text, timings} instead of the text\n"
	      "      --kv-dtype T      K/V storage type: f32 (default), f16, bf16, int8 or int4\n"
	      "                        (--kv-type is an alias; kvpoold's default is f16)\n"
	      "      --kv-window N     int4: the most recent N tokens kept at full precision,\n"
	      "                        0..4096 (default 32, as kvpoold's [pool] kv_window)\n"
	      "      --block-tokens N  tokens per K/V block, 1..1024 (default 16)\n"
	      "      --chunk N         prefill chunk, 1..4096 tokens (default 256)\n"
	      "      --ignore-eos      do not stop at end-of-generation tokens\n"
	      "      --speculative M   on, off or auto (the default: on for greedy decoding when the\n"
	      "                        weights' kernels are row-exact, i.e. no f32 projections, and\n"
	      "                        the K/V type is not int4): each decode step also verifies up\n"
	      "                        to --draft-max tokens drafted from the prompt and output (the\n"
	      "                        continuation of the longest earlier copy of their last 1..N\n"
	      "                        tokens), kept while the model's greedy picks agree; the output\n"
	      "                        is the same as without. Greedy only (on with --temperature > 0\n"
	      "                        is refused); int4 K/V runs without. Drafted and accepted\n"
	      "                        counts go to the timings\n"
	      "      --draft-max K     most drafts per step, 1..16 (default 8; fewer, or none, as\n"
	      "                        the acceptance rate and the measured step times say)\n"
	      "      --draft-ngram N   longest suffix matched, 1..8 tokens (default 4)\n"
	      "      --dump-kv F       after the prefill, write the K/V of the prompt's full blocks\n"
	      "                        to F: each block's bytes in the pool's block layout\n"
	      "                        (include/kvpool/layout.h), in prompt order (int4: those\n"
	      "                        out of the residual window, the ones that are final)\n"
	      "      --weights W       map (used in place from the file, the default) or copy (the\n"
	      "                        same bytes copied at load into huge pages)\n"
	      "  -h, --help            this text\n"
	      "The load report and timings go to stderr. KVP_ISA=scalar|avx2|avxvnni|avx512 forces\n"
	      "a kernel set (default: the widest this CPU runs); KVP_F32_GEMM=kvpool|openblas fixes\n"
	      "the path of f32 projections over more than 16 rows (default auto: the faster,\n"
	      "measured once).\n"
	      "Exit status: 0 ok, 1 failure, 2 usage.\n",
	      f);
}

struct run_opts {
	const char *model, *prompt, *prompt_file, *tokens, *dump_kv;
	uint32_t n_gen, threads, block_tokens, chunk, kv_dtype, weights, kv_window;
	uint32_t draft_max, draft_ngram;
	int speculative; /* -1 auto, 0 off, 1 on */
	struct kvp_sample_params sp;
	int json, ignore_eos, parse_special, no_bos, tokenize, detokenize, render_special;
};

/*
 * --dump-kv: the first @n blocks' bytes (block_bytes each, the layout the daemon's pool
 * and a lease show) to @path.  Return: 0, or -1 (said on stderr).
 */
static int dump_kv(const char *path, const struct kvp_kv_view *kv, uint32_t n)
{
	FILE *f = fopen(path, "we");
	bool ok = f != NULL;

	for (uint32_t i = 0; ok && i < n; i++)
		ok = fwrite((const uint8_t *)kv->base + (size_t)i * kv->geom.block_stride, 1,
			    kv->geom.block_bytes, f) == kv->geom.block_bytes;
	if (f && fclose(f))
		ok = false;
	if (!ok)
		fprintf(stderr, "kvpool-run: --dump-kv %s: %s\n", path, strerror(errno));
	return ok ? 0 : -1;
}

/* Name the option and the value at fault, and what it takes. */
static int bad_opt(const char *opt, const char *val, const char *want)
{
	fprintf(stderr, "kvpool-run: %s: want %s, got '%s'\n", opt, want, val);
	return -EINVAL;
}

/* Return 0, 1 for --help, or -EINVAL (the reason is printed). */
static int run_parse(int argc, char **argv, struct run_opts *o)
{
	static const struct option lo[] = {
		{ "model", required_argument, 0, 'm' },
		{ "prompt", required_argument, 0, 'p' },
		{ "tokens", required_argument, 0, 't' },
		{ "temperature", required_argument, 0, 'T' },
		{ "top-k", required_argument, 0, 'k' },
		{ "top-p", required_argument, 0, 'P' },
		{ "seed", required_argument, 0, 's' },
		{ "threads", required_argument, 0, 'j' },
		{ "json", no_argument, 0, 'J' },
		{ "kv-dtype", required_argument, 0, 'K' },
		{ "kv-type", required_argument, 0, 'K' }, /* the old name, an alias */
		{ "kv-window", required_argument, 0, 'w' },
		{ "block-tokens", required_argument, 0, 'b' },
		{ "chunk", required_argument, 0, 'c' },
		{ "ignore-eos", no_argument, 0, 'E' },
		{ "weights", required_argument, 0, 'W' },
		{ "prompt-file", required_argument, 0, 'f' },
		{ "parse-special", no_argument, 0, 'S' },
		{ "no-bos", no_argument, 0, 'B' },
		{ "tokenize", no_argument, 0, 'z' },
		{ "detokenize", no_argument, 0, 'Z' },
		{ "render-special", no_argument, 0, 'R' },
		{ "dump-kv", required_argument, 0, 'D' },
		{ "speculative", required_argument, 0, 'X' },
		{ "draft-max", required_argument, 0, 'x' },
		{ "draft-ngram", required_argument, 0, 'g' },
		{ "help", no_argument, 0, 'h' },
		{ 0 },
	};
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int c;

	memset(o, 0, sizeof(*o));
	o->n_gen = 32;
	o->threads = ncpu > 0 && ncpu < 256 ? (uint32_t)ncpu : 1;
	o->block_tokens = 16;
	o->kv_window = KVP_KV_WINDOW_DEFAULT;
	o->chunk = 256;
	o->speculative = -1;
	o->draft_max = KVP_DRAFT_K_DEFAULT;
	o->draft_ngram = 4;
	o->sp.top_p = 1.0f;
	o->sp.seed = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "m:p:n:h", lo, NULL)) != -1) {
		switch (c) {
		case 'm':
			o->model = optarg;
			break;
		case 'p':
			o->prompt = optarg;
			break;
		case 't':
			o->tokens = optarg;
			break;
		case 'n':
			if (parse_u32(optarg, 1, 1u << 20, &o->n_gen))
				return bad_opt("-n", optarg, "an integer in [1, 1048576]");
			break;
		case 'T':
			if (kvp_parse_float(optarg, 0.0f, 1e30f, &o->sp.temperature))
				return bad_opt("--temperature", optarg, "a number >= 0");
			break;
		case 'k':
			if (parse_u32(optarg, 0, UINT32_MAX, &o->sp.top_k))
				return bad_opt("--top-k", optarg, "an integer >= 0");
			break;
		case 'P':
			if (kvp_parse_float(optarg, 0.0f, 1.0f, &o->sp.top_p))
				return bad_opt("--top-p", optarg, "a number in [0, 1]");
			break;
		case 's':
			if (kvp_parse_u64(optarg, 0, UINT64_MAX, &o->sp.seed))
				return bad_opt("--seed", optarg, "an unsigned 64-bit integer");
			break;
		case 'j':
			if (parse_u32(optarg, 1, 256, &o->threads))
				return bad_opt("--threads", optarg, "an integer in [1, 256]");
			break;
		case 'J':
			o->json = 1;
			break;
		case 'E':
			o->ignore_eos = 1;
			break;
		case 'f':
			o->prompt_file = optarg;
			break;
		case 'S':
			o->parse_special = 1;
			break;
		case 'B':
			o->no_bos = 1;
			break;
		case 'z':
			o->tokenize = 1;
			break;
		case 'Z':
			o->detokenize = 1;
			break;
		case 'R':
			o->render_special = 1;
			break;
		case 'K':
			if (kvp_dtype_parse(optarg, &o->kv_dtype) < 0)
				return bad_opt("--kv-dtype", optarg, KVP_DTYPE_NAMES);
			break;
		case 'w':
			if (parse_u32(optarg, 0, KVP_KV_WINDOW_MAX, &o->kv_window))
				return bad_opt("--kv-window", optarg, "an integer in [0, 4096]");
			break;
		case 'b':
			if (parse_u32(optarg, 1, 1024, &o->block_tokens))
				return bad_opt("--block-tokens", optarg, "an integer in [1, 1024]");
			break;
		case 'c':
			if (parse_u32(optarg, 1, 4096, &o->chunk))
				return bad_opt("--chunk", optarg, "an integer in [1, 4096]");
			break;
		case 'W':
			if (!strcmp(optarg, "map"))
				o->weights = KVP_MODEL_WEIGHTS_MAP;
			else if (!strcmp(optarg, "copy"))
				o->weights = KVP_MODEL_WEIGHTS_COPY;
			else
				return bad_opt("--weights", optarg, "map or copy");
			break;
		case 'D':
			o->dump_kv = optarg;
			break;
		case 'X':
			if (!strcmp(optarg, "on"))
				o->speculative = 1;
			else if (!strcmp(optarg, "off"))
				o->speculative = 0;
			else if (!strcmp(optarg, "auto"))
				o->speculative = -1;
			else
				return bad_opt("--speculative", optarg, "on, off or auto");
			break;
		case 'x':
			if (parse_u32(optarg, 1, KVP_DRAFT_K_MAX, &o->draft_max))
				return bad_opt("--draft-max", optarg, "an integer in [1, 16]");
			break;
		case 'g':
			if (parse_u32(optarg, 1, KVP_DRAFT_NGRAM_MAX, &o->draft_ngram))
				return bad_opt("--draft-ngram", optarg, "an integer in [1, 8]");
			break;
		case 'h':
			return 1;
		default:
			return -EINVAL; /* getopt named the option */
		}
	}
	if (optind != argc) {
		fprintf(stderr, "kvpool-run: unexpected argument '%s'\n", argv[optind]);
		return -EINVAL;
	}
	if (!o->model) {
		fprintf(stderr, "kvpool-run: no model (-m FILE)\n");
		return -EINVAL;
	}
	if (o->tokenize && o->detokenize) {
		fprintf(stderr, "kvpool-run: --tokenize and --detokenize exclude each other\n");
		return -EINVAL;
	}
	if (!!o->prompt + !!o->prompt_file + !!o->tokens != 1) {
		fprintf(stderr, "kvpool-run: give exactly one of -p TEXT, --prompt-file F and "
				"--tokens LIST\n");
		return -EINVAL;
	}
	if (o->speculative == 1 && o->sp.temperature > 0) {
		fprintf(stderr, "kvpool-run: --speculative on decodes greedily only (no "
				"--temperature)\n");
		return -EINVAL;
	}
	if ((o->tokenize && o->tokens) || (o->detokenize && !o->tokens)) {
		fprintf(stderr, "kvpool-run: --tokenize takes -p or --prompt-file, --detokenize "
				"--tokens\n");
		return -EINVAL;
	}
	return 0;
}

/* The whole of @path ("-": stdin) in *@out (malloc()ed).  Return: 0 or -errno. */
static int read_all(const char *path, char **out, size_t *len)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	struct kvp_buf b = KVP_BUF_INIT;
	char chunk[65536];
	size_t n;
	int r = 0;

	if (!f)
		return -errno;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		kvp_buf_add(&b, chunk, n);
	if (ferror(f))
		r = -EIO;
	if (f != stdin)
		fclose(f);
	if (!r && (r = kvp_buf_finish(&b)) > 0)
		r = 0; /* the length */
	if (r) {
		kvp_buf_deinit(&b);
		return r;
	}
	*len = b.len;
	*out = b.p ? b.p : strdup("");
	return *out ? 0 : -ENOMEM;
}

/* Flags of kvp_tokenizer_encode_flags() for a text prompt, from the options. */
static unsigned int tok_flags(const struct run_opts *o)
{
	return (o->parse_special ? KVP_TOK_PARSE_SPECIAL : 0) |
	       (o->no_bos ? KVP_TOK_NO_ADD_SPECIAL : 0);
}

/*
 * --tokenize / --detokenize: only the vocabulary is read (kvp_tokenizer_new_gguf()), so
 * this is quick for any model size.  Return: the exit status.
 */
static int run_text(const struct run_opts *o, const char *text, size_t text_len, FILE *out)
{
	struct kvp_tokenizer *tok = NULL;
	struct kvp_buf b = KVP_BUF_INIT;
	struct kvp_gguf *g = NULL;
	struct kvp_json j;
	int32_t *ids = NULL;
	char err[512] = "";
	char *dec = NULL;
	uint32_t n = 0;
	int r, ret = 1;

	r = kvp_gguf_open(&g, o->model, err, sizeof(err));
	if (!r)
		r = kvp_tokenizer_new_gguf(&tok, g, 0, err, sizeof(err));
	if (r) {
		fprintf(stderr, "kvpool-run: %s\n", *err ? err : strerror(-r));
		goto out;
	}
	kvp_json_init(&j, &b);
	if (o->tokenize) {
		r = kvp_gen_tokenize(&ids, &n, tok, text, text_len, tok_flags(o), UINT32_MAX);
		if (r < 0) {
			fprintf(stderr, "kvpool-run: tokenize: %s\n", strerror(-r));
			goto out;
		}
		if (o->json) {
			kvp_json_begin(&j, NULL, '{');
			kvp_json_begin(&j, "tokens", '[');
			for (uint32_t i = 0; i < n; i++)
				kvp_json_i64(&j, NULL, ids[i]);
			kvp_json_end(&j, ']');
			kvp_json_end(&j, '}');
		} else {
			for (uint32_t i = 0; i < n; i++) {
				char num[16];
				int w = snprintf(num, sizeof(num), "%s%d", i ? "," : "", ids[i]);

				kvp_buf_add(&b, num, (size_t)w);
			}
		}
	} else {
		size_t n_ids;
		long len;

		r = kvp_parse_ids(o->tokens, &ids, &n_ids);
		if (r < 0 || n_ids > UINT32_MAX) {
			fprintf(stderr,
				"kvpool-run: --tokens: want comma-separated ids, got '%s'\n",
				o->tokens);
			ret = 2;
			goto out;
		}
		len = kvp_tokenizer_decode(tok, ids, n_ids,
					   o->render_special ? KVP_DETOK_RENDER_SPECIAL : 0, NULL,
					   0);
		dec = len >= 0 ? malloc((size_t)len + 1) : NULL;
		if (len < 0) {
			fprintf(stderr,
				"kvpool-run: --tokens: an id is outside the vocabulary (%u)\n",
				kvp_tokenizer_n_vocab(tok));
			ret = 2;
			goto out;
		}
		if (!dec)
			goto out;
		kvp_tokenizer_decode(tok, ids, n_ids,
				     o->render_special ? KVP_DETOK_RENDER_SPECIAL : 0, dec,
				     (size_t)len);
		if (o->json) {
			kvp_json_begin(&j, NULL, '{');
			kvp_json_str(&j, "text", dec, (size_t)len);
			kvp_json_end(&j, '}');
		} else {
			kvp_buf_add(&b, dec, (size_t)len);
		}
	}
	kvp_buf_add(&b, "\n", 1);
	if (kvp_buf_finish(&b) < 0) {
		fprintf(stderr, "kvpool-run: out of memory\n");
		goto out;
	}
	fwrite(b.p, 1, b.len, out);
	fflush(out);
	ret = 0;
out:
	kvp_buf_deinit(&b);
	kvp_tokenizer_free(tok);
	kvp_gguf_close(g);
	free(ids);
	free(dec);
	return ret;
}

static double prefill_rate(const struct kvp_run_result *res)
{
	return res->prefill_s > 0 ? res->n_prompt / res->prefill_s : 0.0;
}

/*
 * tokens the decode steps gave per second (sampling included, prefill excluded): one
 * per step, plus the drafts a speculative step accepted
 */
static double decode_rate(const struct kvp_run_result *res)
{
	return res->n_steps && res->decode_s > 0 ?
		       (res->n_steps + res->n_accepted) / res->decode_s :
		       0.0;
}

void kvp_run_json(struct kvp_buf *b, const struct kvp_run_result *res)
{
	struct kvp_json j;

	kvp_json_init(&j, b);
	kvp_json_begin(&j, NULL, '{');
	kvp_json_begin(&j, "tokens", '[');
	for (uint32_t i = 0; i < res->n_ids; i++)
		kvp_json_i64(&j, NULL, res->ids[i]);
	kvp_json_end(&j, ']');
	kvp_json_str(&j, "text", res->text, res->text_len);
	kvp_json_begin(&j, "timings", '{');
	kvp_json_u64(&j, "prompt_tokens", res->n_prompt);
	kvp_json_u64(&j, "generated_tokens", res->n_ids);
	kvp_json_fixed(&j, "prefill_ms", res->prefill_s * 1e3, 3);
	kvp_json_fixed(&j, "decode_ms", res->decode_s * 1e3, 3);
	kvp_json_fixed(&j, "prefill_tok_s", prefill_rate(res), 2);
	kvp_json_fixed(&j, "decode_tok_s", decode_rate(res), 2);
	if (res->speculative) {
		kvp_json_u64(&j, "drafted_tokens", res->n_drafted);
		kvp_json_u64(&j, "accepted_tokens", res->n_accepted);
	}
	kvp_json_end(&j, '}');
	kvp_json_end(&j, '}');
	kvp_buf_add(b, "\n", 1);
}

/* The text of kept @id: appended to @text, and shown at once unless @json.  -ENOMEM. */
static int show_token(struct kvp_gen *g, int32_t id, struct kvp_buf *text, bool json, FILE *out)
{
	size_t from = text->len;
	size_t off = 0;
	char slice[256];
	bool more;

	do {
		int n = kvp_gen_text(g, id, &off, slice, sizeof(slice), &more);

		kvp_buf_add(text, slice, (size_t)n);
	} while (more);
	if (text->err)
		return text->err;
	if (!json && text->len > from) {
		fwrite(text->p + from, 1, text->len - from, out);
		fflush(out);
	}
	return 0;
}

int kvp_run_main(int argc, char **argv, FILE *out)
{
	struct run_opts o;
	struct kvp_model *m = NULL;
	struct kvp_tokenizer *tok = NULL;
	struct kvp_fwd *fwd = NULL;
	struct kvp_sampler *smp = NULL;
	struct kvp_kv_view kv = { 0 };
	struct kvp_kv_stage stage = { 0 };
	struct kvp_model_shape shape;
	struct kvp_buf text = KVP_BUF_INIT;
	struct kvp_run_result res = { 0 };
	struct kvp_gen g;
	const struct kvp_model_hparams *hp;
	const struct kvp_model_info *info;
	int32_t *prompt = NULL, *gen = NULL;
	uint32_t *table = NULL, n_prompt, n_blocks;
	float *logits = NULL;
	char err[512] = "", desc[256];
	char *file_text = NULL;
	size_t file_len = 0;
	struct kvp_draft draft;
	int32_t rows[1 + KVP_DRAFT_K_MAX], id;
	bool spec = false;
	uint64_t t0, t_step;
	int r, ret = 1;

	r = run_parse(argc, argv, &o);
	if (r == 1) {
		run_usage(out);
		return 0;
	}
	if (r) {
		fprintf(stderr, "kvpool-run: try 'kvpool-run --help'\n");
		return 2;
	}
	if (o.prompt_file) {
		r = read_all(o.prompt_file, &file_text, &file_len);
		if (r) {
			fprintf(stderr, "kvpool-run: --prompt-file %s: %s\n", o.prompt_file,
				strerror(-r));
			return 1;
		}
	}
	if (o.tokenize || o.detokenize) {
		ret = run_text(&o, o.prompt ? o.prompt : file_text,
			       o.prompt ? strlen(o.prompt) : file_len, out);
		free(file_text);
		return ret;
	}
	r = kvp_model_open_opts(&m, o.model, &(struct kvp_model_opts){ .weights = o.weights }, err,
				sizeof(err));
	if (r) {
		fprintf(stderr, "kvpool-run: %s\n", err);
		return 1;
	}
	hp = kvp_model_hparams(m);
	info = kvp_model_info(m);
	{
		const struct kvp_kernels *k;
		char types[512]; /* every type a file may mix */

		r = kvp_kernels_best(&k);
		if (r) {
			fprintf(stderr, "kvpool-run: KVP_ISA=%s: %s\n", getenv("KVP_ISA"),
				r == -EINVAL ?
					"no such kernel set (scalar, avx2, avxvnni, avx512)" :
					"this CPU cannot run it");
			ret = 1;
			goto out;
		}
		if (kvp_lin_f32_gemm() < 0) {
			fprintf(stderr,
				"kvpool-run: KVP_F32_GEMM=%s: not auto, kvpool or openblas\n",
				getenv("KVP_F32_GEMM"));
			ret = 1;
			goto out;
		}
		kvp_model_info_types(info, types, sizeof(types));
		kvp_model_describe(m, desc, sizeof(desc));
		fprintf(stderr,
			"kvpool-run: model '%s': %s; %u layers, n_embd %u, %u/%u heads, n_ff %u, "
			"vocab %u, %.1fM params; %s; weights %s; kernels %s\n",
			kvp_model_name(m), desc, hp->n_layers, hp->n_embd, hp->n_heads,
			hp->n_kv_heads, hp->n_ff, hp->n_vocab, info->n_params / 1e6, types,
			info->weights_copied ? "copied" : "mapped", k->name);
	}
	r = kvp_tokenizer_new(&tok, m, err, sizeof(err));
	if (r && !o.tokens) {
		fprintf(stderr, "kvpool-run: %s\n", err);
		goto out;
	}
	if (o.tokens) {
		size_t n_ids;

		r = kvp_parse_ids(o.tokens, &prompt, &n_ids);
		if (r < 0 || n_ids > UINT32_MAX) {
			fprintf(stderr,
				"kvpool-run: --tokens: want comma-separated ids, got '%s'\n",
				o.tokens);
			ret = 2;
			goto out;
		}
		n_prompt = (uint32_t)n_ids;
		for (uint32_t i = 0; i < n_prompt; i++) {
			if ((uint32_t)prompt[i] >= hp->n_vocab) {
				fprintf(stderr, "kvpool-run: --tokens: id %d >= vocabulary %u\n",
					prompt[i], hp->n_vocab);
				ret = 2;
				goto out;
			}
		}
	} else {
		r = kvp_gen_tokenize(&prompt, &n_prompt, tok, o.prompt ? o.prompt : file_text,
				     o.prompt ? strlen(o.prompt) : file_len, tok_flags(&o),
				     UINT32_MAX);
		if (r < 0) {
			fprintf(stderr, "kvpool-run: tokenize: %s\n", strerror(-r));
			goto out;
		}
		if (!n_prompt) {
			fprintf(stderr, "kvpool-run: the prompt gives no tokens\n");
			ret = 2;
			goto out;
		}
	}
	if ((uint64_t)n_prompt + o.n_gen > INT32_MAX) {
		fprintf(stderr, "kvpool-run: prompt + generation too long\n");
		ret = 2;
		goto out;
	}

	/* the K/V "pool": just enough blocks, laid out as the daemon's */
	kvp_model_kv_shape(m, o.kv_dtype, o.block_tokens, &shape);
	if (kvp_geom_init(&kv.geom, &shape)) {
		fprintf(stderr, "kvpool-run: bad KV block shape\n");
		goto out;
	}
	n_blocks = (n_prompt + o.n_gen + o.block_tokens - 1) / o.block_tokens;
	kv.n_blocks = n_blocks;
	kv.base = aligned_alloc(KVP_BLOCK_ALIGN, (size_t)n_blocks * kv.geom.block_stride);
	table = malloc(n_blocks * sizeof(*table));
	/* prompt and kept tokens as one history: the drafts are looked up in it */
	gen = malloc(((size_t)n_prompt + o.n_gen) * sizeof(*gen));
	logits = malloc((size_t)(1 + o.draft_max) * hp->n_vocab * sizeof(*logits));
	if (!kv.base || !table || !gen || !logits) {
		fprintf(stderr, "kvpool-run: out of memory (%.1f MiB of K/V for %u positions)\n",
			(double)n_blocks * kv.geom.block_stride / 1048576.0, n_prompt + o.n_gen);
		goto out;
	}
	for (uint32_t i = 0; i < n_blocks; i++)
		table[i] = i;
	/*
	 * int8: the keys of the blocks a prefill chunk fills wait there (shm/geom.h); int4:
	 * K and V of those and of the residual window's blocks
	 */
	if (kvp_dtype_is_int(shape.dtype)) {
		uint32_t w = shape.dtype == KVP_DTYPE_INT4 ? o.kv_window : 0;

		if (kvp_stage_init(&stage, &kv.geom, n_blocks,
				   o.chunk / o.block_tokens + 2 +
					   (w + o.block_tokens - 1) / o.block_tokens + 1) < 0) {
			fprintf(stderr, "kvpool-run: out of memory (K/V staging)\n");
			goto out;
		}
		stage.window = w;
		kv.stage = &stage;
	}
	/* a verify step's 1 + k rows fit in max_chunk + max_batch whatever the prompt */
	r = kvp_fwd_new(&fwd, m,
			&(struct kvp_fwd_opts){ .n_threads = o.threads,
						.max_chunk = o.chunk < n_prompt ? o.chunk :
										  n_prompt,
						.max_batch = 1 + o.draft_max });
	if (!r)
		r = kvp_sampler_new(&smp, hp->n_vocab, &o.sp);
	if (r) {
		fprintf(stderr, "kvpool-run: setup: %s\n", strerror(-r));
		goto out;
	}
	memcpy(gen, prompt, n_prompt * sizeof(*gen));
	kvp_gen_init(&g, tok, gen, n_prompt, o.n_gen, !o.ignore_eos);
	g.kept = gen + n_prompt;
	if (o.speculative < 0)
		spec = o.sp.temperature <= 0 && kvp_fwd_rows_exact(fwd) &&
		       shape.dtype != KVP_DTYPE_INT4;
	else
		spec = o.speculative == 1;
	if (spec && shape.dtype == KVP_DTYPE_INT4) {
		fprintf(stderr, "kvpool-run: --speculative: int4 K/V runs without\n");
		spec = false;
	}
	if (spec && !kvp_fwd_rows_exact(fwd))
		fprintf(stderr, "kvpool-run: --speculative on with f32 projections: greedy "
				"output equal to a run without only within rounding\n");
	kvp_draft_init(&draft, o.draft_ngram, 1, o.draft_max);
	res.speculative = spec;

	t0 = kvp_now_ns();
	while (!kvp_gen_prefilled(&g)) {
		r = kvp_gen_prefill(&g, fwd, &kv, table, n_blocks,
				    kvp_gen_prefill_next(&g, o.chunk), logits);
		if (r) {
			fprintf(stderr, "kvpool-run: prefill: %s\n", strerror(-r));
			goto out;
		}
	}
	res.prefill_s = kvp_ns_to_s(kvp_now_ns() - t0);
	if (o.dump_kv &&
	    dump_kv(o.dump_kv, &kv,
		    shape.dtype != KVP_DTYPE_INT4 ? n_prompt / o.block_tokens :
		    n_prompt > o.kv_window	  ? (n_prompt - o.kv_window) / o.block_tokens :
						    0) < 0)
		goto out;
	t0 = kvp_now_ns();
	id = kvp_sampler_sample(smp, logits);
	for (;;) {
		enum kvp_gen_next next = kvp_gen_take(&g, id);
		struct kvp_fwd_seq seq;
		uint32_t n_rows, i;

		if (next == KVP_GEN_EOS)
			break;
		res.n_ids++;
		if (show_token(&g, id, &text, o.json, out)) {
			fprintf(stderr, "kvpool-run: out of memory\n");
			goto out;
		}
		if (next == KVP_GEN_LAST)
			break;
		if (!spec) {
			seq = kvp_gen_decode_seq(&g, table, n_blocks);
			r = kvp_fwd_decode(fwd, &kv, &seq, 1, logits);
			if (r) {
				fprintf(stderr, "kvpool-run: decode: %s\n", strerror(-r));
				goto out;
			}
			kvp_gen_decoded(&g);
			res.n_steps++;
			id = kvp_sampler_sample(smp, logits);
			continue;
		}
		/* the last token and its drafts in one step; every row's pick */
		n_rows = kvp_gen_spec_rows(&g, &draft,
					   kvp_gen_spec_kv_cap(shape.dtype, o.block_tokens,
							       g.n_past),
					   rows);
		t_step = kvp_now_ns();
		r = kvp_fwd_step(fwd, &kv,
				 &(struct kvp_fwd_part){ .table = table,
							 .n_table = n_blocks,
							 .pos0 = g.n_past,
							 .tokens = rows,
							 .n = n_rows,
							 .n_logits = n_rows },
				 1, logits);
		if (r) {
			fprintf(stderr, "kvpool-run: decode: %s\n", strerror(-r));
			goto out;
		}
		t_step = kvp_now_ns() - t_step;
		res.n_steps++;
		res.n_drafted += n_rows - 1;
		/* keep the picks that are the next row's draft; the first other one is next */
		for (i = 0;; i++) {
			id = kvp_sampler_sample(smp, logits + (size_t)i * hp->n_vocab);
			if (!kvp_gen_spec_agrees(rows, n_rows, i, id))
				break;
			next = kvp_gen_take(&g, id);
			if (next == KVP_GEN_EOS)
				goto done;
			res.n_accepted++; /* a kept token no step of its own gave */
			res.n_ids++;
			if (show_token(&g, id, &text, o.json, out)) {
				fprintf(stderr, "kvpool-run: out of memory\n");
				goto out;
			}
			if (next == KVP_GEN_LAST)
				goto done;
		}
		kvp_gen_spec_done(&g, &draft, n_rows, i + 1);
		/* what this many rows cost here: k follows tokens per time, not the rate alone */
		kvp_draft_step_cost(&draft, n_rows, (double)t_step);
	}
done:
	res.decode_s = kvp_ns_to_s(kvp_now_ns() - t0);
	{
		char tail[3];
		int w = kvp_gen_flush(&g, tail, sizeof(tail));

		if (w > 0 && !o.json)
			fwrite(tail, 1, (size_t)w, out);
		kvp_buf_add(&text, tail, (size_t)w);
	}
	res.ids = gen + n_prompt;
	res.n_prompt = n_prompt;
	res.text = text.p ? text.p : "";
	res.text_len = text.len;

	if (o.json) {
		struct kvp_buf b = KVP_BUF_INIT;

		kvp_run_json(&b, &res);
		if (kvp_buf_finish(&b) < 0) {
			fprintf(stderr, "kvpool-run: out of memory\n");
			kvp_buf_deinit(&b);
			goto out;
		}
		fwrite(b.p, 1, b.len, out);
		kvp_buf_deinit(&b);
	} else {
		fputc('\n', out);
		fflush(out); /* the text's line ends before the timings, also in one pipe */
		fprintf(stderr,
			"kvpool-run: prompt %u tokens in %.1f ms (%.1f tok/s), generated %u "
			"in %.1f ms (%.1f tok/s)\n",
			n_prompt, res.prefill_s * 1e3, prefill_rate(&res), res.n_ids,
			res.decode_s * 1e3, decode_rate(&res));
		if (spec)
			fprintf(stderr,
				"kvpool-run: speculative: %u steps, %llu tokens drafted, %llu "
				"accepted (%.0f%%)\n",
				res.n_steps, (unsigned long long)res.n_drafted,
				(unsigned long long)res.n_accepted,
				res.n_drafted ? 100.0 * res.n_accepted / res.n_drafted : 0.0);
	}
	fflush(out);
	ret = 0;
out:
	kvp_sampler_free(smp);
	kvp_fwd_free(fwd);
	kvp_tokenizer_free(tok);
	kvp_model_close(m);
	free(kv.base);
	kvp_stage_deinit(&stage);
	free(table);
	free(gen);
	free(logits);
	kvp_buf_deinit(&text);
	free(prompt);
	free(file_text);
	return ret;
}
