/* SPDX-License-Identifier: MIT */
/*
 * run.c - the offline command-line tools: kvpool-run (one generation, in-process) and
 * kvpool-mkmodel (synthetic models).
 *
 * kvpool-run backs a struct kvp_kv_view with one page-aligned heap region holding just
 * enough blocks for prompt + generation, block table 0, 1, 2, ...; everything else is
 * the daemon's code path: chunked kvp_fwd_prefill(), then kvp_fwd_decode() one token
 * at a time, kvp_sampler_sample(), and streamed UTF-8 text.  Single-threaded driver;
 * OpenBLAS uses --threads.
 */
#include "compute/run.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "compute/forward.h"
#include "compute/mkmodel.h"
#include "compute/mkvocab.h"
#include "compute/model.h"
#include "compute/sample.h"
#include "compute/text/tokenizer.h"
#include "shm/geom.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi)
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint64_t v;

	if (parse_u64(s, lo, hi, &v))
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

/* A finite float in [lo, hi]. */
static int parse_float(const char *s, float lo, float hi, float *out)
{
	char *end;
	float v;

	errno = 0;
	v = strtof(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi))
		return -EINVAL;
	*out = v;
	return 0;
}

/* "1,2,3" -> ids; Return count or -EINVAL. */
static int parse_tokens(const char *s, int32_t **out)
{
	size_t n = 1, k = 0;
	int32_t *v;

	for (const char *p = s; *p; p++)
		n += *p == ',';
	if (n > INT32_MAX)
		return -EINVAL;
	v = malloc(n * sizeof(*v));
	if (!v)
		return -ENOMEM;
	while (*s) {
		char *end;
		long x;

		errno = 0;
		x = strtol(s, &end, 10);
		if (errno || end == s || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
			free(v);
			return -EINVAL;
		}
		v[k++] = (int32_t)x;
		s = *end ? end + 1 : end;
	}
	if (!k) {
		free(v);
		return -EINVAL;
	}
	*out = v;
	return (int)k;
}

static void json_str(FILE *out, const char *s, size_t n)
{
	fputc('"', out);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			fprintf(out, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", out);
		else if (c < 0x20 || c == 0x7f)
			fprintf(out, "\\u%04x", c);
		else
			fputc(c, out);
	}
	fputc('"', out);
}

static void run_usage(FILE *f)
{
	fputs("usage: kvpool-run -m MODEL (-p TEXT | --tokens ID,ID,...) [options]\n"
	      "Runs one generation in this process (no daemon) through the daemon's code path:\n"
	      "chunked prefill, then one decode step per token, until N tokens or EOS.\n"
	      "  -m, --model FILE      GGUF model (llama or qwen2, any type: docs/models.md)\n"
	      "  -p, --prompt TEXT     prompt text, tokenized by the model's vocabulary\n"
	      "      --tokens LIST     prompt as comma-separated token ids instead of text\n"
	      "  -n N                  tokens to generate, 1..1048576 (default 32)\n"
	      "      --temperature T   0 = greedy (the default); else sample from softmax(logits / T)\n"
	      "      --top-k K         sample among the K most likely tokens (default 0 = all)\n"
	      "      --top-p P         then among the smallest set with mass >= P, 0..1 (default 1 = all)\n"
	      "      --seed S          sampler seed (default 0)\n"
	      "      --threads N       compute threads, 1..256 (default: online CPUs)\n"
	      "      --json            print one JSON object {tokens, text, timings} instead of the text\n"
	      "      --kv-type T       K/V storage type: f32 (default), f16 or bf16\n"
	      "      --block-tokens N  tokens per K/V block, 1..1024 (default 16)\n"
	      "      --chunk N         prefill chunk, 1..4096 tokens (default 256)\n"
	      "      --ignore-eos      do not stop at the end-of-sequence token\n"
	      "      --weights W       f32 weights: map (used from the file, the default) or copy\n"
	      "                        (copied at load into huge pages: faster decode, slower load)\n"
	      "  -h, --help            this text\n"
	      "The load report and timings go to stderr. Exit status: 0 ok, 1 failure, 2 usage.\n", f);
}

struct run_opts {
	const char *model, *prompt, *tokens;
	uint32_t n_gen, threads, block_tokens, chunk, kv_dtype, weights;
	struct kvp_sample_params sp;
	int json, ignore_eos;
};

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
		{ "model", required_argument, 0, 'm' }, { "prompt", required_argument, 0, 'p' },
		{ "tokens", required_argument, 0, 't' }, { "temperature", required_argument, 0, 'T' },
		{ "top-k", required_argument, 0, 'k' }, { "top-p", required_argument, 0, 'P' },
		{ "seed", required_argument, 0, 's' }, { "threads", required_argument, 0, 'j' },
		{ "json", no_argument, 0, 'J' }, { "kv-type", required_argument, 0, 'K' },
		{ "block-tokens", required_argument, 0, 'b' }, { "chunk", required_argument, 0, 'c' },
		{ "ignore-eos", no_argument, 0, 'E' }, { "weights", required_argument, 0, 'W' },
		{ "help", no_argument, 0, 'h' }, { 0 },
	};
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int c;

	memset(o, 0, sizeof(*o));
	o->n_gen = 32;
	o->threads = ncpu > 0 && ncpu < 256 ? (uint32_t)ncpu : 1;
	o->block_tokens = 16;
	o->chunk = 256;
	o->sp.top_p = 1.0f;
	o->sp.seed = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "m:p:n:h", lo, NULL)) != -1) {
		switch (c) {
		case 'm': o->model = optarg; break;
		case 'p': o->prompt = optarg; break;
		case 't': o->tokens = optarg; break;
		case 'n':
			if (parse_u32(optarg, 1, 1u << 20, &o->n_gen))
				return bad_opt("-n", optarg, "an integer in [1, 1048576]");
			break;
		case 'T':
			if (parse_float(optarg, 0.0f, 1e30f, &o->sp.temperature))
				return bad_opt("--temperature", optarg, "a number >= 0");
			break;
		case 'k':
			if (parse_u32(optarg, 0, UINT32_MAX, &o->sp.top_k))
				return bad_opt("--top-k", optarg, "an integer >= 0");
			break;
		case 'P':
			if (parse_float(optarg, 0.0f, 1.0f, &o->sp.top_p))
				return bad_opt("--top-p", optarg, "a number in [0, 1]");
			break;
		case 's':
			if (parse_u64(optarg, 0, UINT64_MAX, &o->sp.seed))
				return bad_opt("--seed", optarg, "an unsigned 64-bit integer");
			break;
		case 'j':
			if (parse_u32(optarg, 1, 256, &o->threads))
				return bad_opt("--threads", optarg, "an integer in [1, 256]");
			break;
		case 'J': o->json = 1; break;
		case 'E': o->ignore_eos = 1; break;
		case 'K':
			if (!strcmp(optarg, "f32"))
				o->kv_dtype = KVP_DTYPE_F32;
			else if (!strcmp(optarg, "f16"))
				o->kv_dtype = KVP_DTYPE_F16;
			else if (!strcmp(optarg, "bf16"))
				o->kv_dtype = KVP_DTYPE_BF16;
			else
				return bad_opt("--kv-type", optarg, "f32, f16 or bf16");
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
		case 'h': return 1;
		default: return -EINVAL;	/* getopt named the option */
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
	if (!o->prompt == !o->tokens) {
		fprintf(stderr, "kvpool-run: give exactly one of -p TEXT and --tokens LIST\n");
		return -EINVAL;
	}
	return 0;
}

/* Make room for @need more bytes after @len in *@buf; 0 or -ENOMEM. */
static int reserve(char **buf, size_t *cap, size_t len, size_t need)
{
	size_t c = *cap ? *cap : 4096;
	char *p;

	while (c - len < need)
		c *= 2;
	if (c == *cap)
		return 0;
	p = realloc(*buf, c);
	if (!p)
		return -ENOMEM;
	*buf = p;
	*cap = c;
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
	struct kvp_model_shape shape;
	struct kvp_utf8_stream us = { 0 };
	const struct kvp_model_hparams *hp;
	const struct kvp_model_info *info;
	int32_t *prompt = NULL, *gen = NULL, eos = -1;
	uint32_t *table = NULL, n_prompt, n_blocks, n_out = 0, n_steps = 0;
	float *logits = NULL;
	char err[512] = "", desc[256], *text = NULL;
	size_t text_len = 0, text_cap = 0;
	double t0, t_prefill, t_decode, prefill_tok_s, decode_tok_s;
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
	r = kvp_model_open_opts(&m, o.model, &(struct kvp_model_opts){ .weights = o.weights }, err,
				sizeof(err));
	if (r) {
		fprintf(stderr, "kvpool-run: %s\n", err);
		return 1;
	}
	hp = kvp_model_hparams(m);
	info = kvp_model_info(m);
	kvp_model_describe(m, desc, sizeof(desc));
	fprintf(stderr, "kvpool-run: model '%s': %s; %u layers, n_embd %u, %u/%u heads, n_ff %u, "
		"vocab %u, %.1fM params, %s; %u tensors converted to f32 (%.1f MiB)%s\n",
		kvp_model_name(m), desc, hp->n_layers, hp->n_embd, hp->n_heads, hp->n_kv_heads,
		hp->n_ff, hp->n_vocab,
		info->n_params / 1e6, info->file_type, info->n_converted,
		info->converted_bytes / 1048576.0, info->weights_copied ? ", f32 weights copied" : "");
	r = kvp_tokenizer_new(&tok, m, err, sizeof(err));
	if (r && o.prompt) {
		fprintf(stderr, "kvpool-run: %s\n", err);
		goto out;
	}
	if (tok)
		eos = kvp_tokenizer_eos(tok);
	if (o.tokens) {
		r = parse_tokens(o.tokens, &prompt);
		if (r < 0) {
			fprintf(stderr, "kvpool-run: --tokens: want comma-separated ids, got '%s'\n",
				o.tokens);
			ret = 2;
			goto out;
		}
		n_prompt = (uint32_t)r;
		for (uint32_t i = 0; i < n_prompt; i++) {
			if ((uint32_t)prompt[i] >= hp->n_vocab) {
				fprintf(stderr, "kvpool-run: --tokens: id %d >= vocabulary %u\n", prompt[i],
					hp->n_vocab);
				ret = 2;
				goto out;
			}
		}
	} else {
		size_t len = strlen(o.prompt), cap = len + 2;

		/* len + 2 ids suffice for ordinary vocabularies; a stranger one says how many */
		for (;;) {
			free(prompt);
			prompt = malloc(cap * sizeof(*prompt));
			if (!prompt) {
				fprintf(stderr, "kvpool-run: out of memory\n");
				goto out;
			}
			r = kvp_tokenizer_encode(tok, o.prompt, len, prompt, cap);
			if (r < 0 || (size_t)r <= cap)
				break;
			cap = (size_t)r;
		}
		if (r < 0) {
			fprintf(stderr, "kvpool-run: tokenize: %s\n", strerror(-r));
			goto out;
		}
		if (r == 0) {
			fprintf(stderr, "kvpool-run: the prompt gives no tokens\n");
			ret = 2;
			goto out;
		}
		n_prompt = (uint32_t)r;
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
	gen = malloc(o.n_gen * sizeof(*gen));
	logits = malloc((size_t)hp->n_vocab * sizeof(*logits));
	if (!kv.base || !table || !gen || !logits || reserve(&text, &text_cap, 0, 4096)) {
		fprintf(stderr, "kvpool-run: out of memory (%.1f MiB of K/V for %u positions)\n",
			(double)n_blocks * kv.geom.block_stride / 1048576.0, n_prompt + o.n_gen);
		goto out;
	}
	for (uint32_t i = 0; i < n_blocks; i++)
		table[i] = i;
	r = kvp_fwd_new(&fwd, m, &(struct kvp_fwd_opts){ .n_threads = o.threads,
		.max_chunk = o.chunk < n_prompt ? o.chunk : n_prompt, .max_batch = 1 });
	if (!r)
		r = kvp_sampler_new(&smp, hp->n_vocab, &o.sp);
	if (r) {
		fprintf(stderr, "kvpool-run: setup: %s\n", strerror(-r));
		goto out;
	}

	t0 = now_s();
	for (uint32_t done = 0; done < n_prompt;) {
		uint32_t n = n_prompt - done < o.chunk ? n_prompt - done : o.chunk;

		r = kvp_fwd_prefill(fwd, &kv, table, n_blocks, done, prompt + done, n, logits, 0);
		if (r) {
			fprintf(stderr, "kvpool-run: prefill: %s\n", strerror(-r));
			goto out;
		}
		done += n;
	}
	t_prefill = now_s() - t0;
	t0 = now_s();
	for (;;) {
		int32_t id = kvp_sampler_sample(smp, logits);

		if (id == eos && !o.ignore_eos)
			break;
		gen[n_out++] = id;
		if (tok) {
			size_t plen;
			const char *p = kvp_tokenizer_piece(tok, id, &plen);
			int w;

			if (reserve(&text, &text_cap, text_len, 3 * plen + 3)) {
				fprintf(stderr, "kvpool-run: out of memory\n");
				goto out;
			}
			w = kvp_utf8_feed(&us, p, plen, text + text_len, 3 * plen + 3);
			if (w > 0) {
				if (!o.json) {
					fwrite(text + text_len, 1, w, out);
					fflush(out);
				}
				text_len += w;
			}
		}
		if (n_out == o.n_gen)
			break;
		r = kvp_fwd_decode(fwd, &kv, &(struct kvp_fwd_seq){ .table = table,
			.n_table = n_blocks, .pos = n_prompt + n_out - 1, .token = id }, 1, logits);
		if (r) {
			fprintf(stderr, "kvpool-run: decode: %s\n", strerror(-r));
			goto out;
		}
		n_steps++;
	}
	t_decode = now_s() - t0;
	if (tok) {
		int w = kvp_utf8_flush(&us, text + text_len, text_cap - text_len);

		if (w > 0 && !o.json)
			fwrite(text + text_len, 1, w, out);
		text_len += w > 0 ? w : 0;
	}
	/* decode rate: forward steps per second (sampling included, prefill excluded) */
	prefill_tok_s = t_prefill > 0 ? n_prompt / t_prefill : 0.0;
	decode_tok_s = n_steps && t_decode > 0 ? n_steps / t_decode : 0.0;

	if (o.json) {
		fputs("{\"tokens\":[", out);
		for (uint32_t i = 0; i < n_out; i++)
			fprintf(out, "%s%d", i ? "," : "", gen[i]);
		fputs("],\"text\":", out);
		json_str(out, text, text_len);
		fprintf(out, ",\"timings\":{\"prompt_tokens\":%u,\"generated_tokens\":%u,"
			"\"prefill_ms\":%.3f,\"decode_ms\":%.3f,\"prefill_tok_s\":%.2f,"
			"\"decode_tok_s\":%.2f}}\n", n_prompt, n_out, t_prefill * 1e3, t_decode * 1e3,
			prefill_tok_s, decode_tok_s);
	} else {
		fputc('\n', out);
		fprintf(stderr, "kvpool-run: prompt %u tokens in %.1f ms (%.1f tok/s), generated %u in %.1f ms (%.1f tok/s)\n",
			n_prompt, t_prefill * 1e3, prefill_tok_s, n_out, t_decode * 1e3, decode_tok_s);
	}
	fflush(out);
	ret = 0;
out:
	kvp_sampler_free(smp);
	kvp_fwd_free(fwd);
	kvp_tokenizer_free(tok);
	kvp_model_close(m);
	free(kv.base);
	free(table);
	free(gen);
	free(logits);
	free(text);
	free(prompt);
	return ret;
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
	      "                      [--rope-orig-ctx N]\n"
	      "Writes a GGUF v3 llama (or qwen2) model with seeded random weights and a byte-level vocabulary\n"
	      "(<unk>, <s>, </s>, then 256 byte tokens); the same options always give the same file.\n"
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
	      "  -h, --help          this text\n", f);
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
		{ "preset", required_argument, 0, 'p' }, { "type", required_argument, 0, 't' },
		{ "seed", required_argument, 0, 's' }, { "output", required_argument, 0, 'o' },
		{ "n-embd", required_argument, 0, 'e' }, { "n-layers", required_argument, 0, 'l' },
		{ "n-heads", required_argument, 0, 'H' }, { "n-kv-heads", required_argument, 0, 'K' },
		{ "n-ff", required_argument, 0, 'f' }, { "n-ctx", required_argument, 0, 'c' },
		{ "tied", no_argument, 0, 'T' }, { "untied", no_argument, 0, 'U' },
		{ "name", required_argument, 0, 'N' }, { "help", no_argument, 0, 'h' },
		{ "vocab", required_argument, 0, 'V' }, { "chat-template", required_argument, 0, 'C' },
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
		uint32_t *dst = c == 'e' ? &e : c == 'l' ? &l : c == 'H' ? &H : c == 'K' ? &K :
				c == 'f' ? &F : c == 'c' ? &C : NULL;

		if (dst) {
			if (parse_u32(optarg, 1, 1u << 20, dst)) {
				fprintf(stderr, "kvpool-mkmodel: --%s: want an integer in [1, 1048576], got '%s'\n",
					lo[li].name, optarg);
				goto usage;
			}
			continue;
		}
		switch (c) {
		case 'p': preset = optarg; break;
		case 't': type = optarg; break;
		case 'o': path = optarg; break;
		case 'N': name = optarg; break;
		case 'V': vocab_path = optarg; break;
		case 'C': tmpl_path = optarg; break;
		case 'T': tied = 1; break;
		case 'U': tied = 0; break;
		case OPT_ARCH:
			if (strcmp(optarg, "llama") && strcmp(optarg, "qwen2")) {
				fprintf(stderr, "kvpool-mkmodel: --arch: want llama or qwen2, got '%s'\n", optarg);
				goto usage;
			}
			arch = optarg;
			break;
		case OPT_HEAD_DIM:
			if (parse_u32(optarg, 2, 1024, &head_dim) || head_dim % 2) {
				fprintf(stderr, "kvpool-mkmodel: --head-dim: want an even integer in [2, 1024], got '%s'\n",
					optarg);
				goto usage;
			}
			break;
		case OPT_QKV_BIAS: qkv_bias = 1; break;
		case OPT_ROPE_BASE:
			if (parse_float(optarg, 1.0001f, 1e12f, &rope_base)) {
				fprintf(stderr, "kvpool-mkmodel: --rope-base: want a number > 1, got '%s'\n", optarg);
				goto usage;
			}
			break;
		case OPT_ROPE_FREQS:
			freqs = (struct kvp_mkmodel_rope_freqs){ 8.0f, 1.0f, 4.0f, 8192 };
			if (optarg && parse_rope_freqs(optarg, &freqs)) {
				fprintf(stderr, "kvpool-mkmodel: --rope-freqs: want FACTOR,LOW,HIGH,CTX (factor >= 1, 0 < low < high, ctx >= 1), got '%s'\n",
					optarg);
				goto usage;
			}
			break;
		case OPT_ROPE_SCALING:
			if (strcmp(optarg, "none") && strcmp(optarg, "linear") && strcmp(optarg, "yarn")) {
				fprintf(stderr, "kvpool-mkmodel: --rope-scaling: want none, linear or yarn, got '%s'\n",
					optarg);
				goto usage;
			}
			scaling = optarg;
			break;
		case OPT_ROPE_FACTOR:
			if (parse_float(optarg, 1e-3f, 1e6f, &factor)) {
				fprintf(stderr, "kvpool-mkmodel: --rope-scaling-factor: want a number in [0.001, 1e6], got '%s'\n",
					optarg);
				goto usage;
			}
			break;
		case OPT_ROPE_ORIG_CTX:
			if (parse_u32(optarg, 1, UINT32_MAX, &orig_ctx)) {
				fprintf(stderr, "kvpool-mkmodel: --rope-orig-ctx: want an integer >= 1, got '%s'\n",
					optarg);
				goto usage;
			}
			break;
		case 's':
			if (parse_u64(optarg, 0, UINT64_MAX, &seed)) {
				fprintf(stderr, "kvpool-mkmodel: --seed: want an unsigned 64-bit integer, got '%s'\n",
					optarg);
				goto usage;
			}
			have_seed = 1;
			break;
		case 'h':
			mkmodel_usage(stdout);
			return 0;
		default: goto usage;	/* getopt named the option */
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
		fprintf(stderr, "kvpool-mkmodel: --preset: want tiny, tinyq, demo or 1b, got '%s'\n", preset);
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
