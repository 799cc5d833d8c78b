/* SPDX-License-Identifier: MIT */
/*
 * cli.c - `kvpool`, the command-line client of kvpoold, built on libkvpool only.
 *
 *   kvpool [--socket PATH] [--status-socket PATH] COMMAND [options]
 *
 * Without --status-socket, the status socket is status.sock next to --socket, as the
 * daemon places it (or the default path when neither is given).
 * generate streams a request's text to stdout (usage on stderr) or prints one JSON
 * object; chat holds a conversation (interactive on a terminal, else one turn per
 * --message or per line of stdin) on libkvpool's struct kvp_client_conv, so each turn
 * continues on the exact ids of the last; tokenize and detokenize use the daemon's
 * tokenizer; status prints the status socket's report; bench is a load generator with
 * one thread and one connection per client.  Numbers on the command line are parsed
 * strictly (the whole argument, in range) and a bad argument is an error naming it.
 * Exit status: 0 ok, 1 a request or connection failed, 2 bad usage.
 * Thread: main; bench adds one thread per client and reports from main.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "ipc/client/usage_json.h"
#include "kvpool/kvpool.h"
#include "util/buf.h"
#include "util/escape.h"
#include "util/json.h"
#include "util/parse.h"
#include "util/stats.h"
#include "util/time.h"

#define EXIT_USAGE 2

#ifndef KVP_VERSION
#define KVP_VERSION "unknown"
#endif

static const char *sock_path;
static const char *status_path;
static char status_buf[4096]; /* status.sock next to --socket */
/* where a usage error points: the command's own help once a command is chosen */
static const char *help_hint = "kvpool --help";

static void die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die_usage(const char *fmt, ...)
{
	va_list ap;

	fputs("kvpool: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see %s)\n", help_hint);
	exit(EXIT_USAGE);
}

/*
 * getopt_long() returned '?' or ':' (opterr is 0, so it printed nothing): one message
 * naming the option as typed.
 */
static void die_bad_option(int opt, char **argv)
{
	const char *arg = argv[optind - 1];

	if (optopt && (!arg || strncmp(arg, "--", 2)))
		die_usage(opt == ':' ? "option '-%c' needs a value" : "unknown option '-%c'",
			  optopt);
	die_usage(opt == ':' ? "option '%s' needs a value" : "unknown option '%s'", arg);
}

/*
 * Why connecting to the daemon failed, in words an operator can act on: nothing
 * listening, or no permission, is not the same as a daemon that refused.
 */
static void print_connect_error(const char *what, const char *path, int r, const char *detail)
{
	if (r == -ENOENT || r == -ECONNREFUSED)
		fprintf(stderr,
			"kvpool: no kvpoold listening on %s (is the service running? see %s)\n",
			path, what);
	else if (r == -EACCES || r == -EPERM)
		fprintf(stderr,
			"kvpool: no permission to connect to %s (join the group that owns it: "
			"for the service, kvpool for the request socket, kvpool-status for the "
			"status socket, which is the operators')\n",
			path);
	else
		fprintf(stderr, "kvpool: %s\n", detail);
}

/* ------------------------------------------------------------ strict parsing */

static uint64_t parse_u64(const char *s, const char *what, uint64_t min, uint64_t max)
{
	uint64_t v;
	int r;

	r = kvp_parse_u64(s, min, max, &v);
	if (r == -ERANGE)
		die_usage("%s: '%s' is out of range [%llu, %llu]", what, s, (unsigned long long)min,
			  (unsigned long long)max);
	if (r < 0)
		die_usage("%s: '%s' is not a non-negative integer", what, s ? s : "");
	return v;
}

/* A whole number in [min, max], with an optional leading '-'. */
static int64_t parse_i64(const char *s, const char *what, int64_t min, int64_t max)
{
	int64_t v;
	int r = kvp_parse_i64(s, min, max, &v);

	if (r == -ERANGE)
		die_usage("%s: '%s' is out of range [%lld, %lld]", what, s, (long long)min,
			  (long long)max);
	if (r < 0)
		die_usage("%s: '%s' is not an integer", what, s ? s : "");
	return v;
}

/* A finite number in [min, max], or in (min, max] when @open_min. */
static float parse_float(const char *s, const char *what, float min, float max, bool open_min)
{
	float v;
	int r;

	r = kvp_parse_float(s, min, max, &v);
	if (r == 0 && open_min && v == min)
		r = -ERANGE;
	if (r == -ERANGE)
		die_usage("%s: %s is out of range %s%g, %g]", what, s, open_min ? "(" : "[",
			  (double)min, (double)max);
	if (r < 0)
		die_usage("%s: '%s' is not a finite number", what, s ? s : "");
	return v;
}

/* "1,2,3" -> ids (malloc()ed) */
static int32_t *parse_tokens(const char *s, size_t *n_out)
{
	int32_t *ids;
	int r;

	r = kvp_parse_ids(s, &ids, n_out);
	if (r == -ENOMEM)
		die_usage("out of memory");
	if (r < 0)
		die_usage("--tokens: '%s' is not a comma-separated list of token ids", s);
	return ids;
}

static char *read_file(const char *path, size_t *len)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	size_t cap = 65536, n = 0;
	char *buf;

	if (!f) {
		fprintf(stderr, "kvpool: --prompt-file %s: %s\n", path, strerror(errno));
		exit(1);
	}
	buf = malloc(cap);
	while (buf) {
		size_t got = fread(buf + n, 1, cap - n, f);

		n += got;
		if (n < cap)
			break;
		cap *= 2;
		buf = realloc(buf, cap);
	}
	if (!buf || ferror(f)) {
		fprintf(stderr, "kvpool: --prompt-file %s: read failed\n", path);
		exit(1);
	}
	if (f != stdin)
		fclose(f);
	*len = n;
	return buf;
}

/* ------------------------------------------------------------ JSON output */

/* The prompt of generate, pin and unpin: one of -p TEXT, --tokens IDS, --prompt-file F. */
struct prompt_opt {
	struct kvp_client_prompt pr;
	int32_t *ids;	 /* --tokens, owned */
	char *file_text; /* --prompt-file, owned */
	int n;		 /* how many were given */
};

/* A prompt option: 0 when @opt is one, -1 when it is not. */
static int prompt_option(struct prompt_opt *po, int opt, const char *arg)
{
	switch (opt) {
	case 'p':
		po->pr.text = arg;
		po->pr.text_len = strlen(arg);
		break;
	case 't':
		po->ids = parse_tokens(arg, &po->pr.n_tokens);
		po->pr.tokens = po->ids;
		break;
	case 'f':
		po->file_text = read_file(arg, &po->pr.text_len);
		po->pr.text = po->file_text;
		break;
	default:
		return -1;
	}
	po->n++;
	return 0;
}

/* After the options: exactly one prompt, and not an empty text. */
static void prompt_check(const struct prompt_opt *po, const char *cmd)
{
	if (po->n != 1)
		die_usage("%s: give exactly one of -p, --tokens, --prompt-file", cmd);
	if (po->pr.text && !po->pr.text_len)
		die_usage("%s: the prompt is empty", cmd);
}

static void prompt_opt_deinit(struct prompt_opt *po)
{
	free(po->ids);
	free(po->file_text);
}

/*
 * Cache control of this run's requests (--breakpoint, --ttl, --retain, --parallel), and
 * the client whose last DONE the usage line reports the cache usage of.
 */
static struct kvp_cache_ctl cli_cc;
static struct kvp_client *cli_client;

/* A cache option of generate and chat: 0 when @opt is one, -1 when it is not. */
static int cache_option(int opt, const char *arg)
{
	char *colon;

	switch (opt) {
	case 'B':
		if (cli_cc.n_breakpoints == KVP_CACHE_BREAKPOINTS_MAX)
			die_usage("--breakpoint: at most %d", KVP_CACHE_BREAKPOINTS_MAX);
		colon = strchr(arg, ':');
		if (colon) {
			*colon = '\0';
			cli_cc.bp_ttl_s[cli_cc.n_breakpoints] = (uint32_t)
				parse_u64(colon + 1, "--breakpoint TTL", 1, 7 * 86400);
		}
		cli_cc.breakpoints[cli_cc.n_breakpoints] = (uint32_t)parse_u64(arg, "--breakpoint",
									       1, UINT32_MAX);
		if (cli_cc.n_breakpoints && cli_cc.breakpoints[cli_cc.n_breakpoints] <=
						    cli_cc.breakpoints[cli_cc.n_breakpoints - 1])
			die_usage("--breakpoint: positions must increase");
		cli_cc.n_breakpoints++;
		return 0;
	case 'L':
		cli_cc.ttl_s = (uint32_t)parse_u64(arg, "--ttl", 1, 7 * 86400);
		return 0;
	case 'Q':
		cli_cc.retain = (uint32_t)parse_u64(arg, "--retain", 0, 100);
		cli_cc.flags |= KVP_CC_RETAIN;
		return 0;
	case 'W':
		cli_cc.n = (uint32_t)parse_u64(arg, "--parallel", 1, KVP_PARALLEL_MAX);
		return 0;
	}
	return -1;
}

#define CACHE_OPTIONS \
	{ "breakpoint", required_argument, NULL, 'B' }, { "ttl", required_argument, NULL, 'L' }, \
	{ \
		"retain", required_argument, NULL, 'Q' \
	}

#define CACHE_HELP \
	"      --breakpoint POS[:TTL]  cache only the prefix up to token POS (up to 4; the\n" \
	"                         last one counts), kept TTL seconds (default --ttl)\n" \
	"      --ttl S            keep what this request caches or hits S seconds (default\n" \
	"                         cache.ttl_default_s, at most cache.ttl_max_s)\n" \
	"      --retain P         retention priority 0..100 (cache.eviction = priority)\n"

/* The usage of a DONE as a JSON object (member @key). */
static void json_usage(struct kvp_json *j, const char *key, const struct kvp_usage *u)
{
	struct kvp_cache_usage cu;
	struct kvp_spec_usage su;

	kvp_json_begin(j, key, '{');
	kvp_usage_json_members(j, u);
	kvp_json_u64(j, "swapped_tokens", u->swapped_tokens);
	kvp_json_u64(j, "resume_computed_tokens", u->resume_computed_tokens);
	if (cli_client && kvp_client_event_cache(cli_client, &cu)) {
		const char *mr = kvp_client_miss_reason_name(cu.miss_reason);

		kvp_json_str(j, "miss_reason", mr, strlen(mr));
		if (cu.miss_tier)
			kvp_json_str(j, "miss_tier",
				     cu.miss_tier == KVP_MISS_TIER_DISK ? "disk" : "memory",
				     cu.miss_tier == KVP_MISS_TIER_DISK ? 4 : 6);
		kvp_json_u64(j, "matched_blocks", cu.matched_blocks);
		kvp_json_u64(j, "evicted_tokens", cu.evicted_tokens);
		kvp_json_u64(j, "ttl_s", cu.ttl_s);
		kvp_json_u64(j, "n", cu.n);
	}
	kvp_json_u64(j, "cached_tokens_remote", u->cached_tokens_remote);
	if (cli_client && kvp_client_event_spec(cli_client, &su)) {
		kvp_json_u64(j, "drafted_tokens", su.drafted);
		kvp_json_u64(j, "accepted_tokens", su.accepted);
	}
	kvp_json_end(j, '}');
}

/* Write a finished JSON text (one line) to stdout.  Return: 0, or -errno when it failed. */
static int json_print(struct kvp_buf *b)
{
	int r;

	kvp_buf_add(b, "\n", 1);
	r = kvp_buf_finish(b);
	if (r < 0) {
		fprintf(stderr, "kvpool: JSON output: %s\n", strerror(-r));
		return r;
	}
	fwrite(b->p, 1, b->len, stdout);
	return 0;
}

/* ------------------------------------------------------------ generate */

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	interrupted = 1;
}

/**
 * struct gen_out - what one generate has received
 * @json:     keep ids and text for one JSON object at the end
 * @tty:      stdout is a terminal: text is escaped (util/escape.h), else raw bytes
 * @n_recv:   token ids received (also without --json: the partial usage needs it)
 * @t0_ms, @ttft_ms: submit time, and first token as seen here (< 0: none yet)
 * @midline:  text was printed and its last byte was not a newline
 * @got_done: a DONE arrived; @u holds its usage
 */
struct gen_out {
	bool json;
	bool tty;
	int32_t *ids;
	size_t n_ids, cap_ids;
	struct kvp_buf text;
	uint64_t n_recv;
	double t0_ms, ttft_ms;
	bool midline;
	bool got_done;
	struct kvp_buf cont[KVP_PARALLEL_MAX]; /* --parallel: each continuation's text */
	bool parallel;
};

static double now_ms(void);

/* One TOKEN event: print its text, or keep ids and text for --json.  Return -ENOMEM. */
static int on_tokens(struct gen_out *g, const int32_t *ids, uint32_t n, const char *text,
		     uint32_t len)
{
	g->n_recv += n;
	if (g->ttft_ms < 0 && n)
		g->ttft_ms = now_ms() - g->t0_ms;
	if (g->parallel) {
		/* continuations interleave: each one's text is kept and shown at the end */
		int k = cli_client ? kvp_client_event_cont(cli_client) : -1;

		if (k < 0 || k >= KVP_PARALLEL_MAX)
			k = 0;
		kvp_buf_add(&g->cont[k], text, len);
		return g->cont[k].err ? -ENOMEM : 0;
	}
	if (!g->json) {
		if (g->tty) {
			struct kvp_buf e = KVP_BUF_INIT;

			kvp_escape_tty(&e, text, len);
			if (e.err) {
				kvp_buf_deinit(&e);
				return -ENOMEM;
			}
			fwrite(e.p, 1, e.len, stdout);
			kvp_buf_deinit(&e);
		} else {
			fwrite(text, 1, len, stdout);
		}
		fflush(stdout);
		if (len)
			g->midline = text[len - 1] != '\n';
		return 0;
	}
	if (g->n_ids + n > g->cap_ids) {
		g->cap_ids = (g->n_ids + n) * 2;
		g->ids = realloc(g->ids, g->cap_ids * sizeof(*g->ids));
	}
	kvp_buf_add(&g->text, text, len);
	if (!g->ids || g->text.err)
		return -ENOMEM;
	memcpy(g->ids + g->n_ids, ids, n * sizeof(*ids));
	g->n_ids += n;
	return 0;
}

/*
 * The next event of request @id, waiting in poll() so that a Ctrl-C is seen: the first
 * SIGINT sends a CANCEL (once: *@cancelled), and the wait goes on for the DONE that
 * follows.  Events of other requests are skipped.
 * Return: 0 with @ev, or the error of cancel/next (kvp_client_errmsg() says why) or of
 * poll(), in which case @why (@cap bytes; may be NULL, 0) says so.
 */
static int next_event(struct kvp_client *c, uint64_t id, bool *cancelled,
		      struct kvp_client_event *ev, char *why, size_t cap)
{
	for (;;) {
		struct pollfd pfd = { .fd = kvp_client_socket_fd(c), .events = POLLIN };
		int r;

		if (interrupted && !*cancelled) {
			*cancelled = true;
			r = kvp_client_cancel(c, id);
			if (r)
				return r;
		}
		if (poll(&pfd, 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			snprintf(why, cap, "poll: %s", strerror(-r));
			return r;
		}
		r = kvp_client_next(c, ev);
		if (r || ev->req_id == id || !ev->req_id)
			return r;
	}
}

/*
 * One request through the iterator API, so that Ctrl-C cancels it at any moment, also
 * during a long prefill before the first token: SIGINT (installed without SA_RESTART)
 * interrupts poll(), a CANCEL goes out, and the DONE that follows still carries the
 * usage.  A second Ctrl-C ends the process (SA_RESETHAND).
 * Return: 0, KVP_E_CANCELLED, the daemon's enum kvp_status, or -errno; on a failure
 * @why (@cap bytes) says why.
 */
static int run_generate(struct kvp_client *c, const struct kvp_client_prompt *pr,
			const struct kvp_client_params *p, struct gen_out *out, struct kvp_usage *u,
			char *why, size_t cap)
{
	struct kvp_client_event ev;
	bool cancelled = false;
	uint64_t id;
	int r;

	out->t0_ms = now_ms();
	out->ttft_ms = -1;
	*why = '\0';
	r = kvp_client_submit(c, pr, p, &id);
	while (!r) {
		r = next_event(c, id, &cancelled, &ev, why, cap);
		if (r)
			break;
		if (ev.type == KVP_EVENT_TOKEN) {
			r = on_tokens(out, ev.tokens, ev.n_tokens, ev.text, ev.text_len);
			if (r) {
				snprintf(why, cap, "out of memory");
				return r;
			}
			continue;
		}
		if (ev.type == KVP_EVENT_DONE) {
			*u = ev.usage;
			out->got_done = true;
			if (ev.status && ev.status != KVP_E_CANCELLED)
				snprintf(why, cap, "generation stopped: %s",
					 kvp_client_strerror(ev.status));
			return ev.status; /* KVP_OK, or KVP_E_CANCELLED after our CANCEL */
		}
		snprintf(why, cap, "daemon: %s", ev.message);
		return ev.status;
	}
	if (!*why) /* poll() said already */
		snprintf(why, cap, "%s", kvp_client_errmsg(c));
	return r;
}

static void generate_help(FILE *o)
{
	fputs("usage: kvpool [--socket PATH] generate (-p TEXT | --tokens 1,2,3 | --prompt-file F)\n"
	      "              [-n N] [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
	      "              [--salt S] [--no-cache] [--parse-special] [--priority N]\n"
	      "              [--speculative on|off] [--parallel N] [--breakpoint POS[:TTL]]... [--ttl S] [--retain P]\n"
	      "              [--json]\n"
	      "\n"
	      "Send one prompt to kvpoold and stream the generated text to stdout as it\n"
	      "arrives; the usage (prompt, cached and computed tokens, times) goes to stderr.\n"
	      "\n"
	      "  -p, --prompt TEXT      prompt text, tokenized by the daemon\n"
	      "      --tokens LIST      prompt as comma-separated token ids\n"
	      "      --prompt-file F    prompt text read from file F ('-': stdin)\n"
	      "  -n, --max-new-tokens N tokens to generate at most: 1 .. the daemon's\n"
	      "                         limits.max_new_tokens (4096 unless configured);\n"
	      "                         default 64, or that limit if lower\n"
	      "      --temperature T    0 = greedy (default), up to 100\n"
	      "      --top-k K          sample from the K most likely tokens; 0 = off (default)\n"
	      "      --top-p P          nucleus sampling, in (0, 1]; 1 = off (default)\n"
	      "      --seed S           sampler seed (default 0)\n"
	      "      --salt S           cache salt (at most 64 bytes): requests with different\n"
	      "                         salts never share cached prefix blocks\n"
	      "      --no-cache         neither use nor publish prefix-cache blocks\n"
	      "      --parse-special    special-token text in the prompt (\"<|eot_id|>\") becomes\n"
	      "                         those tokens; by default it is plain text\n"
	      "      --speculative M    on or off: draft tokens from the prompt and output and\n"
	      "                         verify them in the decode step (greedy output\n"
	      "                         unchanged); the usage then says how many were\n"
	      "                         drafted and accepted; default: the daemon's\n"
	      "                         (scheduler.speculative)\n"
	      "      --priority N       -1000 .. 1000: when the daemon is busy, higher\n"
	      "                         priorities are admitted, prefilled and kept running\n"
	      "                         first (default: your trust domain's, 0 unless the\n"
	      "                         daemon's [domain NAME] sets one)\n"
	      "      --json             print one JSON object instead: tokens (generated ids),\n"
	      "                         text and usage\n"
	      "      --parallel N       sample N continuations (1..16) of the one prompt;\n"
	      "                         continuation i uses seed S + i; shown one after another\n" CACHE_HELP
	      "\n"
	      "The usage line ends with the cache's view: miss_reason (none, no_prefix,\n"
	      "below_block, below_minimum, evicted (memory|disk), salt_mismatch,\n"
	      "model_mismatch, disabled, io_error) and matched_blocks.\n"
	      "Ctrl-C cancels the request.  On a terminal, control characters and bytes that\n"
	      "are not UTF-8 in the text are shown as \\xNN; piped, the bytes are written as\n"
	      "they are.\n",
	      o);
}

/* Print the usage of a DONE on stderr (@how: "" or why it stopped early). */
static void print_usage_line(const struct kvp_usage *u, const char *how)
{
	struct kvp_cache_usage cu;
	struct kvp_spec_usage su;

	fprintf(stderr,
		"usage: prompt_tokens %u, cached_tokens %u, cache_creation_tokens %u, "
		"recomputed_tokens %u, generated_tokens %u; queue %.1f ms, ttft %.1f ms, "
		"prefill %.1f ms, decode %.1f ms%s",
		u->prompt_tokens, u->cached_tokens, u->cache_creation_tokens, u->recomputed_tokens,
		u->generated_tokens, u->queue_ms, u->ttft_ms, u->prefill_ms, u->decode_ms, how);
	/* the fields of protocol version 2, when they say something */
	if (u->cached_tokens_disk || u->preemptions)
		fprintf(stderr,
			"; cached_tokens_disk %u, preemptions %u, swapped_tokens %u, "
			"resume_computed_tokens %u",
			u->cached_tokens_disk, u->preemptions, u->swapped_tokens,
			u->resume_computed_tokens);
	/* why the prompt was not (all) served from the cache */
	if (cli_client && kvp_client_event_cache(cli_client, &cu)) {
		fprintf(stderr, "; miss_reason %s", kvp_client_miss_reason_name(cu.miss_reason));
		if (cu.miss_tier)
			fprintf(stderr, " (%s)",
				cu.miss_tier == KVP_MISS_TIER_DISK ? "disk" : "memory");
		fprintf(stderr, ", matched_blocks %u", cu.matched_blocks);
		if (cu.evicted_tokens)
			fprintf(stderr, ", evicted_tokens %u", cu.evicted_tokens);
		if (cu.n > 1)
			fprintf(stderr, ", continuations %u", cu.n);
	}
	if (u->cached_tokens_remote)
		fprintf(stderr, "; cached_tokens_remote %u", u->cached_tokens_remote);
	/* requests that named --speculative on or off */
	if (cli_client && kvp_client_event_spec(cli_client, &su))
		fprintf(stderr, "; drafted_tokens %u, accepted_tokens %u", su.drafted, su.accepted);
	fputc('\n', stderr);
}

static int cmd_generate(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "prompt", required_argument, NULL, 'p' },
		{ "tokens", required_argument, NULL, 't' },
		{ "prompt-file", required_argument, NULL, 'f' },
		{ "max-new-tokens", required_argument, NULL, 'n' },
		{ "temperature", required_argument, NULL, 'T' },
		{ "top-k", required_argument, NULL, 'k' },
		{ "top-p", required_argument, NULL, 'P' },
		{ "seed", required_argument, NULL, 's' },
		{ "salt", required_argument, NULL, 'S' },
		{ "no-cache", no_argument, NULL, 'N' },
		{ "parse-special", no_argument, NULL, 'x' },
		{ "priority", required_argument, NULL, 'R' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ "parallel", required_argument, NULL, 'W' },
		{ "speculative", required_argument, NULL, 'X' },
		CACHE_OPTIONS,
		{ 0 },
	};
	struct prompt_opt po = { 0 };
	struct kvp_client_params p;
	struct gen_out out = { .text = KVP_BUF_INIT };
	struct kvp_usage u = { 0 };
	struct sigaction sa = { .sa_handler = on_sigint, .sa_flags = SA_RESETHAND };
	struct kvp_client *c;
	char why[512] = "";
	bool n_given = false;
	int opt, r;

	help_hint = "kvpool generate --help";
	kvp_client_params_init(&p);
	p.max_new_tokens = 64;
	while ((opt = getopt_long(argc, argv, ":p:n:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'n':
			p.max_new_tokens = (uint32_t)parse_u64(optarg, "-n", 1, UINT32_MAX);
			n_given = true;
			break;
		case 'T':
			p.temperature = parse_float(optarg, "--temperature", 0.0f, 100.0f, false);
			break;
		case 'k':
			p.top_k = (uint32_t)parse_u64(optarg, "--top-k", 0, UINT32_MAX);
			break;
		case 'P':
			p.top_p = parse_float(optarg, "--top-p", 0.0f, 1.0f, true);
			break;
		case 's':
			p.seed = parse_u64(optarg, "--seed", 0, UINT64_MAX);
			break;
		case 'S':
			if (strlen(optarg) > KVP_SALT_MAX)
				die_usage("--salt: longer than %d bytes", KVP_SALT_MAX);
			p.salt = optarg;
			p.salt_len = strlen(optarg);
			break;
		case 'N':
			p.no_cache = true;
			break;
		case 'x':
			p.parse_special = true;
			break;
		case 'R':
			p.priority = (int32_t)parse_i64(optarg, "--priority", KVP_PRIORITY_MIN,
							KVP_PRIORITY_MAX);
			break;
		case 'X':
			if (!strcmp(optarg, "on"))
				p.speculative = KVP_SPECULATIVE_ON;
			else if (!strcmp(optarg, "off"))
				p.speculative = KVP_SPECULATIVE_OFF;
			else
				die_usage("--speculative: on or off, not '%s'", optarg);
			break;
		case 'j':
			out.json = true;
			break;
		case 'h':
			generate_help(stdout);
			return 0;
		default:
			if (optarg && (prompt_option(&po, opt, optarg) == 0 ||
				       cache_option(opt, optarg) == 0))
				break;
			die_bad_option(opt, argv);
		}
	}
	if (optind < argc)
		die_usage("generate: unexpected argument '%s'", argv[optind]);
	prompt_check(&po, "generate");

	r = kvp_client_connect(&c, sock_path);
	if (r) {
		print_connect_error("--socket", sock_path ? sock_path : KVP_DEFAULT_SOCKET, r,
				    kvp_client_errmsg(c));
		goto out;
	}
	cli_client = c;
	kvp_client_set_cache(c, &cli_cc); /* checked above; DONE then says why it missed */
	out.parallel = cli_cc.n > 1;
	for (int k = 0; k < KVP_PARALLEL_MAX; k++)
		out.cont[k] = (struct kvp_buf)KVP_BUF_INIT;
	/* the daemon's own limit, known from WELCOME: say it rather than be refused */
	if (p.max_new_tokens > kvp_client_welcome(c)->max_new_tokens) {
		uint32_t lim = kvp_client_welcome(c)->max_new_tokens;

		if (n_given) {
			fprintf(stderr,
				"kvpool: -n: %u is more than this daemon allows: 1 .. %u (its "
				"limits.max_new_tokens) (see %s)\n",
				p.max_new_tokens, lim, help_hint);
			kvp_client_close(c);
			prompt_opt_deinit(&po);
			return EXIT_USAGE;
		}
		p.max_new_tokens = lim;
	}
	out.tty = isatty(STDOUT_FILENO);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	r = run_generate(c, &po.pr, &p, &out, &u, why, sizeof(why));
	/* text on stdout ends its line before anything else is said */
	if (!out.json && out.midline)
		fputc('\n', stdout);
	fflush(stdout);
	if (r && r != KVP_E_CANCELLED) {
		fprintf(stderr, "kvpool: generate: %s\n", why);
		if (out.got_done && !out.json) {
			/* the daemon ended it early (e.g. it is stopping): its usage so far */
			print_usage_line(&u, " (partial)");
		} else if (!out.got_done && (out.n_recv || r < 0)) {
			/* tokens came, or the connection was lost: what we counted.  An
			 * ERROR refusing the request before any token says all there is. */
			fprintf(stderr,
				"partial usage (counted here, no DONE arrived): generated_tokens "
				"%llu, ttft %.1f ms%s\n",
				(unsigned long long)out.n_recv, out.ttft_ms < 0 ? 0.0 : out.ttft_ms,
				out.ttft_ms < 0 ? " (no token arrived)" : "");
		}
		if (!out.got_done || !out.json)
			goto out;
	}
	if (out.json) {
		struct kvp_buf b = KVP_BUF_INIT;
		struct kvp_json j;

		kvp_json_init(&j, &b);
		kvp_json_begin(&j, NULL, '{');
		kvp_json_begin(&j, "tokens", '[');
		for (size_t i = 0; i < out.n_ids; i++)
			kvp_json_i64(&j, NULL, out.ids[i]);
		kvp_json_end(&j, ']');
		kvp_json_str(&j, "text", out.text.p, out.text.len);
		if (out.parallel) {
			kvp_json_begin(&j, "continuations", '[');
			for (uint32_t k = 0; k < cli_cc.n; k++)
				kvp_json_str(&j, NULL, out.cont[k].p ? out.cont[k].p : "",
					     out.cont[k].len);
			kvp_json_end(&j, ']');
		}
		json_usage(&j, "usage", &u);
		kvp_json_end(&j, '}');
		if (json_print(&b) < 0 && !r)
			r = -EIO;
		kvp_buf_deinit(&b);
	} else {
		for (uint32_t k = 0; out.parallel && k < cli_cc.n; k++)
			printf("--- continuation %u (seed %llu) ---\n%.*s\n", k,
			       (unsigned long long)(p.seed + k), (int)out.cont[k].len,
			       out.cont[k].p ? out.cont[k].p : "");
		fflush(stdout);
		print_usage_line(&u, r == KVP_E_CANCELLED ? " (cancelled)" : "");
	}
out:
	for (int k = 0; out.parallel && k < KVP_PARALLEL_MAX; k++)
		kvp_buf_deinit(&out.cont[k]);
	cli_client = NULL;
	kvp_client_close(c);
	prompt_opt_deinit(&po);
	free(out.ids);
	kvp_buf_deinit(&out.text);
	return r ? 1 : 0;
}

/* ------------------------------------------------------------ tokenize, detokenize */

static int cmd_tokenize(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "prompt", required_argument, NULL, 'p' },
		{ "prompt-file", required_argument, NULL, 'f' },
		{ "no-bos", no_argument, NULL, 'B' },
		{ "parse-special", no_argument, NULL, 'x' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct kvp_buf b = KVP_BUF_INIT;
	struct kvp_client *c = NULL;
	unsigned int flags = 0;
	const char *text = NULL;
	char *file_text = NULL;
	int32_t *ids = NULL;
	size_t len = 0, n = 0;
	int n_texts = 0, opt, r;
	bool json = false;

	while ((opt = getopt_long(argc, argv, "p:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'p':
			text = optarg;
			len = strlen(optarg);
			n_texts++;
			break;
		case 'f':
			file_text = read_file(optarg, &len);
			text = file_text;
			n_texts++;
			break;
		case 'B':
			flags |= KVP_TOKENIZE_NO_BOS;
			break;
		case 'x':
			flags |= KVP_TOKENIZE_PARSE_SPECIAL;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			puts("usage: kvpool [--socket PATH] tokenize (-p TEXT | --prompt-file F)\n"
			     "              [--no-bos] [--parse-special] [--json]\n"
			     "\n"
			     "Print the token ids the daemon's model gives TEXT: comma-separated, or\n"
			     "{\"tokens\":[...]} with --json (what kvpool-run --tokenize prints).\n"
			     "  --no-bos          add neither BOS nor EOS\n"
			     "  --parse-special   special-token text (\"<|eot_id|>\") becomes the token");
			return 0;
		default:
			die_usage("tokenize: bad option");
		}
	}
	if (optind < argc)
		die_usage("tokenize: unexpected argument '%s'", argv[optind]);
	if (n_texts != 1)
		die_usage("tokenize: give exactly one of -p and --prompt-file");
	r = kvp_client_connect(&c, sock_path);
	if (!r)
		r = kvp_client_tokenize(c, text, len, flags, &ids, &n);
	if (r) {
		fprintf(stderr, "kvpool: tokenize: %s\n", kvp_client_errmsg(c));
		goto out;
	}
	if (json) {
		struct kvp_json j;

		kvp_json_init(&j, &b);
		kvp_json_begin(&j, NULL, '{');
		kvp_json_begin(&j, "tokens", '[');
		for (size_t i = 0; i < n; i++)
			kvp_json_i64(&j, NULL, ids[i]);
		kvp_json_end(&j, ']');
		kvp_json_end(&j, '}');
	} else {
		for (size_t i = 0; i < n; i++) {
			char num[16];
			int w = snprintf(num, sizeof(num), "%s%d", i ? "," : "", ids[i]);

			kvp_buf_add(&b, num, (size_t)w);
		}
	}
	if (json_print(&b) < 0)
		r = -EIO;
out:
	kvp_buf_deinit(&b);
	kvp_client_close(c);
	free(ids);
	free(file_text);
	return r ? 1 : 0;
}

static int cmd_detokenize(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "tokens", required_argument, NULL, 't' },
		{ "render-special", no_argument, NULL, 'R' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct kvp_buf b = KVP_BUF_INIT;
	struct kvp_client *c = NULL;
	unsigned int flags = 0;
	int32_t *ids = NULL;
	char *text = NULL;
	size_t n = 0, len = 0;
	bool json = false;
	int opt, r;

	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 't':
			free(ids);
			ids = parse_tokens(optarg, &n);
			break;
		case 'R':
			flags |= KVP_DETOKENIZE_RENDER_SPECIAL;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			puts("usage: kvpool [--socket PATH] detokenize --tokens 1,2,3 [--render-special]\n"
			     "              [--json]\n"
			     "\n"
			     "Print the text of the ids: the bytes as they are, or {\"text\":...} with\n"
			     "--json (bytes that are not UTF-8 shown as U+FFFD), as kvpool-run\n"
			     "--detokenize prints them.\n"
			     "  --render-special  control tokens as their text (\"<|eot_id|>\")");
			return 0;
		default:
			die_usage("detokenize: bad option");
		}
	}
	if (optind < argc)
		die_usage("detokenize: unexpected argument '%s'", argv[optind]);
	if (!ids)
		die_usage("detokenize: --tokens is required");
	r = kvp_client_connect(&c, sock_path);
	if (!r)
		r = kvp_client_detokenize(c, ids, n, flags, &text, &len);
	if (r) {
		fprintf(stderr, "kvpool: detokenize: %s\n", kvp_client_errmsg(c));
		goto out;
	}
	if (json) {
		struct kvp_json j;

		kvp_json_init(&j, &b);
		kvp_json_begin(&j, NULL, '{');
		kvp_json_str(&j, "text", text, len);
		kvp_json_end(&j, '}');
	} else {
		kvp_buf_add(&b, text, len);
	}
	if (json_print(&b) < 0)
		r = -EIO;
out:
	kvp_buf_deinit(&b);
	kvp_client_close(c);
	free(ids);
	free(text);
	return r ? 1 : 0;
}

/* ------------------------------------------------------------ lease */

/* FNV-1a of @n bytes: a short fingerprint of a block's K/V for --dump. */
static uint64_t fnv1a(const uint8_t *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

static int cmd_lease(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "tokens", required_argument, NULL, 't' },
		{ "salt", required_argument, NULL, 'S' },
		{ "dump", no_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct kvp_client_lease *l = NULL;
	struct kvp_client *c = NULL;
	const struct kvp_lease *h;
	const char *salt = "";
	int32_t *ids = NULL;
	bool dump = false;
	size_t n = 0;
	int opt, r;

	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 't':
			free(ids);
			ids = parse_tokens(optarg, &n);
			break;
		case 'S':
			salt = optarg;
			break;
		case 'd':
			dump = true;
			break;
		case 'h':
			puts("usage: kvpool [--socket PATH] lease --tokens 1,2,3 [--salt S] [--dump]\n"
			     "\n"
			     "Lease the cached blocks of the longest cached prefix of the ids (as a\n"
			     "GENERATE with this salt published them), print what the lease holds,\n"
			     "release it.  --dump: each block's generation, offset in the pool\n"
			     "mapping, a checksum of its K/V and the first K values of layer 0,\n"
			     "head 0, read in place through the read-only mapping.");
			return 0;
		default:
			die_usage("lease: bad option");
		}
	}
	if (optind < argc)
		die_usage("lease: unexpected argument '%s'", argv[optind]);
	if (!ids)
		die_usage("lease: --tokens is required");
	r = kvp_client_connect(&c, sock_path);
	if (!r)
		r = kvp_client_lease(c, ids, n, salt, strlen(salt), 0, &l);
	if (r) {
		fprintf(stderr, "kvpool: lease: %s\n", kvp_client_errmsg(c));
		goto out;
	}
	h = kvp_client_lease_info(l);
	printf("lease %llu: %u blocks (%u of %zu tokens), ttl %u ms; %u layers, %u kv heads, "
	       "head_dim %u, %s\n",
	       (unsigned long long)h->lease_id, h->n_blocks, h->n_blocks * h->shape.block_tokens, n,
	       h->ttl_ms, h->shape.n_layers, h->shape.n_kv_heads, h->shape.head_dim,
	       h->shape.dtype == KVP_DTYPE_F32 ? "f32" :
	       h->shape.dtype == KVP_DTYPE_F16 ? "f16" :
						 "bf16");
	for (uint32_t i = 0; dump && i < h->n_blocks; i++) {
		const struct kvp_lease_block *b = kvp_client_lease_block(l, i);
		const uint8_t *k0 = kvp_client_lease_kv(c, l, i, 0, 0, 0);
		size_t len = 0;
		const uint8_t *pool = kvp_client_pool(c, &len);
		size_t bytes = (size_t)h->block_stride;

		if (!k0 || !pool || b->offset + bytes > len) {
			fprintf(stderr, "kvpool: lease: block %u is outside the pool mapping\n", i);
			r = -EIO;
			break;
		}
		printf("  block %u: id %u generation %u offset %llu fnv1a %016llx", i, b->block,
		       b->generation, (unsigned long long)b->offset,
		       (unsigned long long)fnv1a(pool + b->offset, bytes));
		if (h->shape.dtype == KVP_DTYPE_F32) {
			float v[4];

			memcpy(v, k0, sizeof(v));
			printf(" k[0][0][0][0..3] %g %g %g %g", v[0], v[1], v[2], v[3]);
		}
		printf("\n");
	}
	kvp_client_release(c, l);
out:
	kvp_client_close(c);
	free(ids);
	return r ? 1 : 0;
}

/* ------------------------------------------------------------ chat */

struct chat_opts {
	struct kvp_client_params p;
	bool json;
	bool interactive;
};

/*
 * One turn: @cv's last message is the user's; send it, stream the reply to stdout (or
 * keep it for --json), then print the usage.  Ctrl-C cancels the reply: what came stays
 * in the conversation, as the reply so far.  On an ERROR the user's message is taken
 * back.  Return: 0, KVP_E_CANCELLED, the daemon's status, or -errno.
 */
static int chat_turn(struct kvp_client *c, struct kvp_client_conv *cv, const struct chat_opts *o,
		     unsigned int turn)
{
	struct kvp_client_event ev;
	struct gen_out out = { .json = o->json,
			       .tty = isatty(STDOUT_FILENO),
			       .text = KVP_BUF_INIT };
	struct kvp_usage u = { 0 };
	bool cancelled = false;
	uint64_t id;
	int r;

	interrupted = 0;
	r = kvp_client_chat_submit(c, cv, &o->p, &id);
	while (!r) {
		r = next_event(c, id, &cancelled, &ev, NULL, 0);
		if (r)
			break;
		r = kvp_client_conv_feed(cv, &ev);
		if (r < 0)
			break;
		r = 0;
		if (ev.type == KVP_EVENT_TOKEN) {
			r = on_tokens(&out, ev.tokens, ev.n_tokens, ev.text, ev.text_len);
			continue;
		}
		if (ev.type == KVP_EVENT_DONE) {
			u = ev.usage;
			r = ev.status; /* 0, KVP_E_CANCELLED, or why it stopped early */
			if (ev.status && ev.status != KVP_E_CANCELLED)
				fprintf(stderr, "%skvpool: chat: generation stopped: %s\n",
					o->json ? "" : "\n", kvp_client_strerror(ev.status));
			goto done;
		}
		if (ev.type == KVP_EVENT_ERROR) {
			fprintf(stderr, "kvpool: chat: daemon: %s\n", ev.message);
			kvp_client_conv_pop(cv);
			r = ev.status;
			goto out;
		}
	}
	if (r > 0) /* refused before it was sent: the library's words */
		fprintf(stderr, "kvpool: chat: %s\n", kvp_client_errmsg(c));
	else
		fprintf(stderr, "kvpool: chat: %s\n",
			r == -ENOMEM ? "out of memory" : kvp_client_errmsg(c));
	kvp_client_conv_pop(cv);
	goto out;
done:
	if (o->json) {
		struct kvp_buf b = KVP_BUF_INIT;
		struct kvp_json j;

		kvp_json_init(&j, &b);
		kvp_json_begin(&j, NULL, '{');
		kvp_json_u64(&j, "turn", turn);
		kvp_json_begin(&j, "tokens", '[');
		for (size_t i = 0; i < out.n_ids; i++)
			kvp_json_i64(&j, NULL, out.ids[i]);
		kvp_json_end(&j, ']');
		kvp_json_str(&j, "text", out.text.p, out.text.len);
		kvp_json_str(&j, "status", kvp_client_strerror((int)u.status),
			     strlen(kvp_client_strerror((int)u.status)));
		json_usage(&j, "usage", &u);
		kvp_json_end(&j, '}');
		if (json_print(&b) < 0 && !r)
			r = -EIO;
		kvp_buf_deinit(&b);
	} else {
		if (out.midline) /* the reply's text ends its line before the usage */
			fputc('\n', stdout);
		fflush(stdout);
		print_usage_line(&u, r == KVP_E_CANCELLED ? " (cancelled)" : "");
	}
out:
	free(out.ids);
	kvp_buf_deinit(&out.text);
	return r;
}

/*
 * Interactive: show the prompt and wait until stdin has a line (or its end) or a Ctrl-C
 * comes; true on Ctrl-C (the terminal has dropped the line typed so far).  SIGINT is
 * blocked except inside ppoll(), so one that lands between the prompt and the wait is
 * taken there, never lost while a read sleeps.  On a terminal in canonical mode a
 * readable stdin holds a whole line, so the getline() after this does not block.
 */
static bool prompt_interrupted(void)
{
	struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
	sigset_t block, old;
	int r;

	sigemptyset(&block);
	sigaddset(&block, SIGINT);
	sigprocmask(SIG_BLOCK, &block, &old);
	interrupted = 0;
	fputs("> ", stdout);
	fflush(stdout);
	do
		r = ppoll(&p, 1, NULL, &old);
	while (r < 0 && errno == EINTR && !interrupted);
	sigprocmask(SIG_SETMASK, &old, NULL);
	return interrupted;
}

/*
 * The next user turn from stdin: one line, without its newline.  Interactive, a Ctrl-C
 * at the prompt drops the line typed so far.  Return: the length, or -1 at the end.
 */
static ssize_t chat_read_line(char **line, size_t *cap, bool interactive)
{
	for (;;) {
		ssize_t n;

		if (interactive && prompt_interrupted()) {
			fputc('\n', stdout);
			continue;
		}
		n = getline(line, cap, stdin);
		if (n < 0)
			return -1;
		if (n && (*line)[n - 1] == '\n')
			(*line)[--n] = 0;
		if (n && (*line)[n - 1] == '\r')
			(*line)[--n] = 0;
		if (!n && interactive)
			continue; /* an empty line is no turn */
		return n;
	}
}

static void chat_help(FILE *o)
{
	fputs("usage: kvpool [--socket PATH] chat [--system TEXT] [--message TEXT]...\n"
	      "              [--chat-template NAME] [-n N] [--temperature T] [--top-k K]\n"
	      "              [--top-p P] [--seed S] [--salt S] [--no-cache] [--priority N]\n"
	      "              [--breakpoint POS[:TTL]]... [--ttl S] [--retain P]\n"
	      "              [--thinking on|off] [--json]\n"
	      "\n"
	      "Chat with the daemon's model, rendered by its chat template.  On a terminal:\n"
	      "one line per user turn, the reply streamed as it comes; Ctrl-C cancels the\n"
	      "reply (the conversation goes on), Ctrl-D ends.  Otherwise the user turns are\n"
	      "the --message arguments, in order (one: a one-shot question), or else each\n"
	      "line of stdin.  Each turn continues on the exact token ids of the last, so the\n"
	      "daemon's prefix cache covers the whole conversation so far; the usage of each\n"
	      "turn goes to stderr (cached_tokens shows it).\n"
	      "\n"
	      "  -s, --system TEXT      the system message\n"
	      "  -m, --message TEXT     a user turn (repeatable)\n"
	      "      --chat-template N  render with template family N (llama3, llama3.1,\n"
	      "                         llama3.2, chatml, llama2, mistral, phi3, gemma, zephyr,\n"
	      "                         deepseek, qwen3) instead of the model's\n"
	      "      --thinking on|off  the template's reasoning section (Qwen3's <think>\n"
	      "                         block, enable_thinking) on or off; not given: the\n"
	      "                         template's default (Qwen3: on).  A template without\n"
	      "                         one refuses on (the daemon names it); off changes\n"
	      "                         nothing there.  The reasoning is printed as the model\n"
	      "                         writes it, <think> tags included, and stays in the\n"
	      "                         conversation's later turns (they continue on its ids)\n"
	      "  -n, --max-new-tokens N reply tokens at most (default: the daemon's maximum,\n"
	      "                         at most 1024)\n" CACHE_HELP
	      "      --temperature T, --top-k K, --top-p P, --seed S, --salt S, --no-cache,\n"
	      "      --priority N       as for kvpool generate\n"
	      "      --json             one JSON object per turn: turn, tokens (the reply's\n"
	      "                         ids), text, status, usage\n",
	      o);
}

static int cmd_chat(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "system", required_argument, NULL, 's' },
		{ "message", required_argument, NULL, 'm' },
		{ "chat-template", required_argument, NULL, 'C' },
		{ "max-new-tokens", required_argument, NULL, 'n' },
		{ "temperature", required_argument, NULL, 'T' },
		{ "top-k", required_argument, NULL, 'k' },
		{ "top-p", required_argument, NULL, 'P' },
		{ "seed", required_argument, NULL, 'S' },
		{ "salt", required_argument, NULL, 'a' },
		{ "no-cache", no_argument, NULL, 'N' },
		{ "priority", required_argument, NULL, 'R' },
		{ "json", no_argument, NULL, 'j' },
		{ "thinking", required_argument, NULL, 'H' },
		{ "help", no_argument, NULL, 'h' },
		CACHE_OPTIONS,
		{ 0 },
	};
	struct sigaction sa = { .sa_handler = on_sigint };
	int thinking = KVP_THINKING_DEFAULT;
	struct kvp_client_conv *cv = NULL;
	struct kvp_client *c = NULL;
	struct chat_opts o = { 0 };
	const char *system = NULL, *tmpl = NULL;
	const char **messages = NULL;
	size_t n_messages = 0, cap = 0;
	bool have_n = false;
	unsigned int turn = 0;
	char *line = NULL;
	int opt, r;

	kvp_client_params_init(&o.p);
	messages = calloc((size_t)argc + 1, sizeof(*messages));
	if (!messages)
		die_usage("out of memory");
	while ((opt = getopt_long(argc, argv, "s:m:n:h", opts, NULL)) != -1) {
		switch (opt) {
		case 's':
			system = optarg;
			break;
		case 'm':
			messages[n_messages++] = optarg;
			break;
		case 'C':
			if (strlen(optarg) >= KVP_CHAT_TEMPLATE_NAME_MAX)
				die_usage("--chat-template: '%s' is longer than %d bytes", optarg,
					  KVP_CHAT_TEMPLATE_NAME_MAX - 1);
			tmpl = optarg;
			break;
		case 'n':
			o.p.max_new_tokens = (uint32_t)parse_u64(optarg, "-n", 1, UINT32_MAX);
			have_n = true;
			break;
		case 'T':
			o.p.temperature = parse_float(optarg, "--temperature", 0.0f, 100.0f, false);
			break;
		case 'k':
			o.p.top_k = (uint32_t)parse_u64(optarg, "--top-k", 0, UINT32_MAX);
			break;
		case 'P':
			o.p.top_p = parse_float(optarg, "--top-p", 0.0f, 1.0f, true);
			break;
		case 'S':
			o.p.seed = parse_u64(optarg, "--seed", 0, UINT64_MAX);
			break;
		case 'a':
			if (strlen(optarg) > KVP_SALT_MAX)
				die_usage("--salt: longer than %d bytes", KVP_SALT_MAX);
			o.p.salt = optarg;
			o.p.salt_len = strlen(optarg);
			break;
		case 'N':
			o.p.no_cache = true;
			break;
		case 'R':
			o.p.priority = (int32_t)parse_i64(optarg, "--priority", KVP_PRIORITY_MIN,
							  KVP_PRIORITY_MAX);
			break;
		case 'j':
			o.json = true;
			break;
		case 'H':
			if (!strcmp(optarg, "on"))
				thinking = KVP_THINKING_ON;
			else if (!strcmp(optarg, "off"))
				thinking = KVP_THINKING_OFF;
			else
				die_usage("--thinking: '%s' is not on or off", optarg);
			break;
		case 'h':
			chat_help(stdout);
			free(messages);
			return 0;
		default:
			if (optarg && cache_option(opt, optarg) == 0)
				break;
			die_usage("chat: bad option");
		}
	}
	if (optind < argc)
		die_usage("chat: unexpected argument '%s'", argv[optind]);
	o.interactive = !n_messages && isatty(STDIN_FILENO) && !o.json;

	if (kvp_client_conv_new(&cv) || kvp_client_conv_set_template(cv, tmpl) ||
	    kvp_client_conv_set_thinking(cv, thinking) ||
	    (system && kvp_client_conv_add(cv, KVP_ROLE_SYSTEM, system, strlen(system))))
		die_usage("out of memory");
	r = kvp_client_connect(&c, sock_path);
	if (r) {
		fprintf(stderr, "kvpool: %s\n", kvp_client_errmsg(c));
		goto out;
	}
	cli_client = c;
	kvp_client_set_cache(c, &cli_cc); /* each DONE then says why it missed */
	if (!have_n) {
		uint32_t most = kvp_client_welcome(c)->max_new_tokens;

		o.p.max_new_tokens = most && most < 1024 ? most : 1024;
		o.p.fit_context = true; /* no -n: what the model's context leaves, at most that */
	}
	/*
	 * no SA_RESTART: a Ctrl-C interrupts poll() or the line being read.  Interactive,
	 * every Ctrl-C cancels a reply; otherwise a second one ends the program.
	 */
	if (!o.interactive)
		sa.sa_flags = SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	for (;;) {
		const char *text;
		size_t len;

		if (n_messages) {
			if (turn == n_messages)
				break;
			text = messages[turn];
			len = strlen(text);
		} else {
			ssize_t n = chat_read_line(&line, &cap, o.interactive);

			if (n < 0)
				break;
			text = line;
			len = (size_t)n;
		}
		turn++;
		if (kvp_client_conv_add(cv, KVP_ROLE_USER, text, len)) {
			r = -ENOMEM;
			break;
		}
		r = chat_turn(c, cv, &o, turn);
		if (r == -ENOTCONN || r == -EPROTO || (r && !o.interactive))
			break; /* the connection is gone, or a scripted conversation failed */
		r = 0;
	}
	if (o.interactive)
		fputc('\n', stdout);
out:
	kvp_client_close(c);
	kvp_client_conv_free(cv);
	free(messages);
	free(line);
	return r ? 1 : 0;
}

/* ------------------------------------------------------------ flush */

/* The number after "@key": in @text (a report of ours), or -1. */
static long long json_number_after(const char *text, const char *key)
{
	const char *p = text ? strstr(text, key) : NULL;

	return p ? strtoll(p + strlen(key), NULL, 10) : -1;
}

/* kvpool pin / unpin: the full blocks of a prompt stay cached (operators). */
static int cmd_pin(int argc, char **argv, bool unpin)
{
	static const struct option opts[] = {
		{ "prompt", required_argument, NULL, 'p' },
		{ "tokens", required_argument, NULL, 't' },
		{ "prompt-file", required_argument, NULL, 'f' },
		{ "salt", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *what = unpin ? "unpin" : "pin";
	struct prompt_opt po = { 0 };
	const char *salt = NULL;
	struct kvp_client *c;
	int opt, r;
	uint32_t blocks = 0;

	while ((opt = getopt_long(argc, argv, ":p:h", opts, NULL)) != -1) {
		switch (opt) {
		case 'S':
			if (strlen(optarg) > KVP_SALT_MAX)
				die_usage("--salt: longer than %d bytes", KVP_SALT_MAX);
			salt = optarg;
			break;
		case 'h':
			printf("usage: kvpool [--socket PATH] %s (-p TEXT | --tokens 1,2,3 |\n"
			       "              --prompt-file F) [--salt S]\n"
			       "\n"
			       "%s\n"
			       "Operators only: the daemon refuses unless cache.pin_allowed = yes.\n",
			       what,
			       unpin ? "Drop one pin from the full blocks of the prompt (pins nest)." :
				       "Compute the prompt's full blocks if they are not cached and keep\n"
				       "them in memory, under any pressure, until `kvpool unpin` of the\n"
				       "same prompt and salt.  Pinned bytes are capped by cache.pin_max.");
			return 0;
		default:
			if (optarg && prompt_option(&po, opt, optarg) == 0)
				break;
			die_bad_option(opt, argv);
		}
	}
	if (optind < argc)
		die_usage("%s: unexpected argument '%s'", what, argv[optind]);
	prompt_check(&po, what);
	r = kvp_client_connect(&c, sock_path);
	if (r) {
		print_connect_error("--socket", sock_path ? sock_path : KVP_DEFAULT_SOCKET, r,
				    kvp_client_errmsg(c));
	} else {
		r = kvp_client_pin(c, &po.pr, salt, salt ? strlen(salt) : 0, unpin, &blocks);
		if (r)
			fprintf(stderr, "kvpool: %s: %s\n", what, kvp_client_errmsg(c));
		else
			printf("kvpool: %s %u blocks\n", unpin ? "unpinned" : "pinned", blocks);
	}
	kvp_client_close(c);
	prompt_opt_deinit(&po);
	return r ? 1 : 0;
}

/* kvpool flush (no --tier): the FLUSH frame, on the request socket; @domain or NULL. */
static int flush_cache(const char *domain)
{
	struct kvp_client *c;
	uint32_t blocks = 0;
	int r = kvp_client_connect(&c, sock_path);

	if (r) {
		print_connect_error("--socket", sock_path ? sock_path : KVP_DEFAULT_SOCKET, r,
				    kvp_client_errmsg(c));
	} else {
		r = kvp_client_flush_domain(c, domain, &blocks);
		if (r)
			fprintf(stderr, "kvpool: flush: %s\n", kvp_client_errmsg(c));
		else if (domain)
			printf("kvpool: flushed %u cached blocks of domain %s\n", blocks, domain);
		else
			printf("kvpool: flushed %u cached blocks\n", blocks);
	}
	kvp_client_close(c);
	return r ? 1 : 0;
}

static int cmd_flush(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "tier", no_argument, NULL, 't' },
		{ "domain", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *domain = NULL;
	bool tier = false;
	long long before, now = -1;
	char *text = NULL;
	int opt, r;

	while ((opt = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (opt) {
		case 't':
			tier = true;
			break;
		case 'd':
			domain = optarg;
			break;
		case 'h':
			puts("usage: kvpool [--socket PATH] flush [--domain D]\n"
			     "       kvpool [--status-socket PATH] flush --tier\n"
			     "\n"
			     "Without --tier: drop every cached block in memory that no request holds\n"
			     "and no pin keeps (a TTL does not keep it); operators only\n"
			     "(cache.pin_allowed).  --domain D: trust domain D's instead of\n"
			     "this user's own (another domain than one's own: uid 0 only).\n"
			     "With --tier: empty kvpoold's disk tier: every cached block on disk is dropped (memory\n"
			     "is kept), and the file is marked so that none of them comes back after a\n"
			     "restart either.  Asked through the status socket (an operator's); waits\n"
			     "until the engine has done it (at most 30 s).");
			return 0;
		default:
			die_usage("flush: bad option");
		}
	}
	if (optind < argc)
		die_usage("flush: unexpected argument '%s'", argv[optind]);
	if (tier && domain)
		die_usage("flush: --tier empties every domain's tier; no --domain with it");
	if (!tier)
		return flush_cache(domain);
	r = kvp_client_status(status_path, "flush-tier", &text, NULL);
	if (r < 0) {
		fprintf(stderr, "kvpool: flush: %s: %s\n",
			status_path ? status_path : KVP_DEFAULT_STATUS_SOCKET, strerror(-r));
		return 1;
	}
	before = json_number_after(text, "\"flushes_before\":");
	if (before < 0) {
		fprintf(stderr, "kvpool: flush: %s", text);
		free(text);
		return 1;
	}
	free(text);
	for (int i = 0; i < 300 && now <= before; i++) {
		usleep(100000);
		text = NULL;
		if (kvp_client_status(status_path, "json", &text, NULL) == 0)
			now = json_number_after(text, "\"flushes\":");
		free(text);
	}
	if (now <= before) {
		fprintf(stderr, "kvpool: flush: the daemon did not report the flush within 30 s\n");
		return 1;
	}
	puts("kvpool: disk tier flushed");
	return 0;
}

/* ------------------------------------------------------------ status */

/* The member at dotted @path of @root, or NULL. */
static json_t *jget(json_t *root, const char *path)
{
	char key[64];

	while (root && *path) {
		size_t n = strcspn(path, ".");

		if (n >= sizeof(key))
			return NULL;
		memcpy(key, path, n);
		key[n] = '\0';
		root = json_object_get(root, key);
		path += n + (path[n] == '.');
	}
	return root;
}

static double jnum(json_t *root, const char *path)
{
	return json_number_value(jget(root, path)); /* 0 when absent */
}

static unsigned long long ju(json_t *root, const char *path)
{
	return (unsigned long long)jnum(root, path);
}

static const char *jstr(json_t *root, const char *path)
{
	const char *v = json_string_value(jget(root, path));

	return v ? v : "?";
}

/* 1536 -> "1.5 KiB" */
static const char *human_bytes(double v, char *buf, size_t cap)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned int i = 0;

	while (v >= 1024 && i < 4) {
		v /= 1024;
		i++;
	}
	snprintf(buf, cap, i ? "%.1f %s" : "%.0f %s", v, unit[i]);
	return buf;
}

static const char *human_duration(unsigned long long ms, char *buf, size_t cap)
{
	unsigned long long s = ms / 1000;

	if (s >= 86400)
		snprintf(buf, cap, "%llud %lluh", s / 86400, s % 86400 / 3600);
	else if (s >= 3600)
		snprintf(buf, cap, "%lluh %llum", s / 3600, s % 3600 / 60);
	else if (s >= 60)
		snprintf(buf, cap, "%llum %llus", s / 60, s % 60);
	else
		snprintf(buf, cap, "%.1f s", (double)ms / 1000);
	return buf;
}

/*
 * The disk tier's line, when one is configured: prefix hits above count memory only, so
 * without it a prefix served from disk would not show in the summary at all.
 */
static void print_tier_summary(json_t *j)
{
	const char *state = jstr(j, "tier.state");
	char b1[32];

	if (!strcmp(state, "off") || !strcmp(state, "?"))
		return;
	if (!strcmp(state, "degraded"))
		printf("  tier         degraded (%s): memory only, see the log\n",
		       strerror((int)-jnum(j, "tier.degraded")));
	else
		printf("  tier         %llu blocks (%s) on disk in %llu slots; %llu writes, %llu "
		       "reloads (p50 %.1f ms, p99 %.1f ms); %llu checksum failures, %llu errors\n",
		       ju(j, "tier.blocks"), human_bytes(jnum(j, "tier.bytes"), b1, sizeof(b1)),
		       ju(j, "tier.slots"), ju(j, "tier.writes"), ju(j, "tier.reloads"),
		       jnum(j, "tier.reload_p50_ms"), jnum(j, "tier.reload_p99_ms"),
		       ju(j, "tier.checksum_failures"), ju(j, "tier.errors"));
}

/*
 * One line per trust domain: its traffic and its cache, by its own policy (never a
 * prefix's content: the report has none).
 */
static void print_domains_summary(json_t *j)
{
	json_t *doms = jget(j, "domains");
	size_t i;
	json_t *d;

	json_array_foreach(doms, i, d)
	{
		char b1[32], min[32] = "";

		if (ju(d, "cache.min_tokens"))
			snprintf(min, sizeof(min), ", min %llu tokens", ju(d, "cache.min_tokens"));
		printf("  domain %-9s %llu requests; hits %.1f%% of requests, %.1f%% of tokens; "
		       "%llu tokens saved; %llu evictions, %llu recomputed; %s pinned; cost "
		       "%.1f%% of uncached (%s%s)\n",
		       jstr(d, "name"), ju(d, "requests"), 100 * jnum(d, "cache.request_hit_rate"),
		       100 * jnum(d, "cache.token_hit_rate"), ju(d, "cache.tokens_saved"),
		       ju(d, "cache.evictions"), ju(d, "cache.recomputed_tokens"),
		       human_bytes(jnum(d, "cache.pinned_bytes"), b1, sizeof(b1)),
		       jnum(d, "cache.cost_uncached") > 0 ?
			       100 * (1 - jnum(d, "cache.cost_saved_ratio")) :
			       100.0,
		       jstr(d, "cache.eviction"), min);
	}
}

/* The report as a person reads it: the figures that say how the daemon is doing. */
static int print_status_summary(const char *text, size_t len)
{
	json_error_t e;
	json_t *j = json_loadb(text, len, 0, &e);
	char b1[32];
	unsigned long long lookups;

	if (!json_is_object(j)) {
		fprintf(stderr, "kvpool: status: the daemon's report is not JSON: %s\n", e.text);
		json_decref(j);
		return 1;
	}
	printf("kvpoold %s (pid %llu), %s for %s\n", jstr(j, "daemon.version"), ju(j, "daemon.pid"),
	       jstr(j, "daemon.state"), human_duration(ju(j, "daemon.uptime_ms"), b1, sizeof(b1)));
	printf("  model        %s\n", jstr(j, "daemon.model"));
	printf("  pool         %s in %s pages, %s K/V, %llu tokens per block\n",
	       human_bytes(jnum(j, "pool.bytes"), b1, sizeof(b1)), jstr(j, "pool.page_kind"),
	       jstr(j, "pool.kv_dtype"), ju(j, "pool.block_tokens"));
	printf("  K/V          %.15g bytes per token, scales included (f32: %llu)\n",
	       jnum(j, "pool.bytes_per_token"), ju(j, "pool.bytes_per_token_f32"));
	printf("  blocks       %llu: %llu used, %llu cached, %llu free\n",
	       ju(j, "pool.blocks_total"), ju(j, "pool.blocks_used"), ju(j, "pool.blocks_cached"),
	       ju(j, "pool.blocks_free"));
	lookups = ju(j, "index.lookups");
	if (lookups)
		printf("  prefix hits  %.1f%% of requests, %.1f%% of prompt tokens (%llu lookups, "
		       "%llu entries, %llu evictions)\n",
		       100 * jnum(j, "index.request_hit_rate"),
		       100 * jnum(j, "index.token_hit_rate"), lookups, ju(j, "index.entries"),
		       ju(j, "index.evictions"));
	else
		printf("  prefix hits  no lookups yet (%llu entries)\n", ju(j, "index.entries"));
	printf("  scheduler    %llu running, %llu queued; requests %llu: %llu done, %llu "
	       "cancelled, %llu failed, %llu rejected\n",
	       ju(j, "scheduler.running"), ju(j, "scheduler.queued"),
	       ju(j, "scheduler.requests_total"), ju(j, "scheduler.requests_done"),
	       ju(j, "scheduler.requests_cancelled"), ju(j, "scheduler.requests_failed"),
	       ju(j, "scheduler.requests_rejected"));
	printf("  policy       %s: queued by priority %llu high, %llu normal, %llu low; "
	       "%llu preemptions (%llu to disk), %llu preempted now\n",
	       jstr(j, "scheduler.policy"), ju(j, "scheduler.queued_high"),
	       ju(j, "scheduler.queued_normal"), ju(j, "scheduler.queued_low"),
	       ju(j, "scheduler.preemptions"), ju(j, "scheduler.preemptions_swapped"),
	       ju(j, "scheduler.preempted"));
	if (ju(j, "scheduler.ttft_samples"))
		printf("  TTFT         p50 %.1f ms, p99 %.1f ms (last %llu requests)\n",
		       jnum(j, "scheduler.ttft_p50_ms"), jnum(j, "scheduler.ttft_p99_ms"),
		       ju(j, "scheduler.ttft_samples"));
	printf("  steps        p50 %.1f ms, p99 %.1f, max %.1f (target %.1f); between tokens "
	       "p50 %.1f ms, p99 %.1f, max %.1f\n",
	       jnum(j, "scheduler.step_p50_ms"), jnum(j, "scheduler.step_p99_ms"),
	       jnum(j, "scheduler.step_max_ms"), jnum(j, "scheduler.step_target_ms"),
	       jnum(j, "scheduler.itl_p50_ms"), jnum(j, "scheduler.itl_p99_ms"),
	       jnum(j, "scheduler.itl_max_ms"));
	printf("  connections  %llu open (%llu since start); refused %llu (%llu per-uid "
	       "limit), %llu closed idle\n",
	       ju(j, "connections.open"), ju(j, "connections.total"), ju(j, "connections.refused"),
	       ju(j, "connections.refused_per_uid"), ju(j, "connections.idle_closed"));
	if (ju(j, "usage.cached_tokens_disk")) /* disjoint from cached_tokens (memory) */
		printf("  usage        %llu prompt tokens (%llu cached, %llu from disk, %llu "
		       "computed), %llu generated\n",
		       ju(j, "usage.prompt_tokens"), ju(j, "usage.cached_tokens"),
		       ju(j, "usage.cached_tokens_disk"), ju(j, "usage.recomputed_tokens"),
		       ju(j, "usage.generated_tokens"));
	else
		printf("  usage        %llu prompt tokens (%llu cached, %llu computed), %llu "
		       "generated\n",
		       ju(j, "usage.prompt_tokens"), ju(j, "usage.cached_tokens"),
		       ju(j, "usage.recomputed_tokens"), ju(j, "usage.generated_tokens"));
	print_tier_summary(j);
	print_domains_summary(j);
	printf("(every figure: kvpool status --json; Prometheus: kvpool status --prom)\n");
	json_decref(j);
	return 0;
}

static int cmd_status(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "prom", no_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *path = status_path ? status_path : KVP_DEFAULT_STATUS_SOCKET;
	const char *fmt = "json";
	bool raw = false;
	char *text;
	size_t len;
	int opt, r;

	help_hint = "kvpool status --help";
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (opt) {
		case 'j':
			fmt = "json";
			raw = true;
			break;
		case 'p':
			fmt = "prom";
			raw = true;
			break;
		case 'h':
			puts("usage: kvpool [--socket PATH | --status-socket PATH] status [--json | "
			     "--prom]\n"
			     "\n"
			     "Print kvpoold's status: a summary (pool, page kind, prefix hit rates,\n"
			     "scheduler, connections, usage totals); with --json the whole report as\n"
			     "one JSON object, with --prom in the Prometheus text format.\n"
			     "It asks the status socket: --status-socket, else status.sock next to\n"
			     "--socket, else " KVP_DEFAULT_STATUS_SOCKET ".");
			return 0;
		default:
			die_bad_option(opt, argv);
		}
	}
	if (optind < argc)
		die_usage("status: unexpected argument '%s'", argv[optind]);
	r = kvp_client_status(status_path, fmt, &text, &len);
	if (r) {
		char detail[600];

		snprintf(detail, sizeof(detail), "status %s: %s", path, strerror(-r));
		print_connect_error(status_path == status_buf ? "--socket, --status-socket" :
								"--status-socket",
				    path, r, detail);
		return 1;
	}
	/* a frame's magic ("LPVK" little-endian): this is the request socket */
	if (len >= 4 && !memcmp(text, "LPVK", 4)) {
		fprintf(stderr,
			"kvpool: %s is kvpoold's request socket, not its status socket (give the "
			"status socket with --status-socket)\n",
			path);
		free(text);
		return 1;
	}
	if (len > 9 && !memcmp(text, "{\"error\":", 9)) {
		fprintf(stderr, "kvpool: status %s: %.*s", path, (int)len, text);
		free(text);
		return 1;
	}
	if (raw) {
		fwrite(text, 1, len, stdout);
		if (len && text[len - 1] != '\n')
			fputc('\n', stdout);
		r = 0;
	} else {
		r = print_status_summary(text, len);
	}
	free(text);
	return r;
}

/* ------------------------------------------------------------ bench */

struct bench_cfg {
	unsigned int clients, requests, prefix, suffix, new_tokens;
	uint64_t seed;
};

struct bench_result {
	bool ok;
	int status;
	double ttft_ms; /* measured here: submit to first TOKEN */
	double total_ms;
	struct kvp_usage u;
};

struct bench_client {
	pthread_t thread;
	unsigned int idx;
	const struct bench_cfg *cfg;
	struct bench_result *res; /* cfg->requests of them */
	char err[256];
};

static atomic_uint bench_done;
static atomic_ulong bench_gen_tokens;

static double now_ms(void)
{
	return kvp_ns_to_ms(kvp_now_ns());
}

/* splitmix64: the same seed gives the same prompt in every run */
static uint64_t mix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int32_t pick_token(uint64_t *s, const struct kvp_welcome *w)
{
	for (;;) {
		uint32_t id = (uint32_t)(mix(s) % w->n_vocab);

		if (id != w->bos_id && id != w->eos_id)
			return (int32_t)id;
	}
}

static void *bench_thread(void *arg)
{
	struct bench_client *bc = arg;
	const struct bench_cfg *cfg = bc->cfg;
	unsigned int n = cfg->prefix + cfg->suffix;
	struct kvp_client_params p;
	const struct kvp_welcome *w;
	struct kvp_client *c;
	int32_t *ids;
	int r;

	r = kvp_client_connect(&c, sock_path);
	if (r) {
		if (r == -ENOENT || r == -ECONNREFUSED)
			snprintf(bc->err, sizeof(bc->err),
				 "no kvpoold listening on %s (is the service running? see "
				 "--socket)",
				 sock_path ? sock_path : KVP_DEFAULT_SOCKET);
		else
			snprintf(bc->err, sizeof(bc->err), "%s", kvp_client_errmsg(c));
		kvp_client_close(c);
		atomic_fetch_add(&bench_done, cfg->requests);
		return NULL;
	}
	w = kvp_client_welcome(c);
	ids = malloc(n * sizeof(*ids));
	if (!ids || !w->n_vocab) {
		snprintf(bc->err, sizeof(bc->err), "%s",
			 ids ? "daemon reports n_vocab 0" : "no memory");
		free(ids);
		kvp_client_close(c);
		atomic_fetch_add(&bench_done, cfg->requests);
		return NULL;
	}
	kvp_client_params_init(&p);
	p.max_new_tokens = cfg->new_tokens;
	for (unsigned int r_i = 0; r_i < cfg->requests; r_i++) {
		struct bench_result *res = &bc->res[r_i];
		struct kvp_client_prompt pr = { .tokens = ids, .n_tokens = n };
		struct kvp_client_event ev;
		uint64_t s = cfg->seed, req;
		double t0;

		for (unsigned int i = 0; i < cfg->prefix; i++)
			ids[i] = pick_token(&s, w); /* shared by every request */
		s = cfg->seed ^ ((uint64_t)(bc->idx + 1) << 32) ^ (r_i + 1);
		for (unsigned int i = cfg->prefix; i < n; i++)
			ids[i] = pick_token(&s, w); /* this request's own tail */
		t0 = now_ms();
		res->ttft_ms = -1;
		r = kvp_client_submit(c, &pr, &p, &req);
		while (!r) {
			r = kvp_client_next(c, &ev);
			if (r)
				break;
			if (ev.type == KVP_EVENT_TOKEN) {
				if (res->ttft_ms < 0)
					res->ttft_ms = now_ms() - t0;
				atomic_fetch_add(&bench_gen_tokens, ev.n_tokens);
			} else if (ev.type == KVP_EVENT_DONE) {
				res->u = ev.usage;
				res->ok = ev.status == KVP_OK;
				res->status = ev.status;
				break;
			} else {
				res->status = ev.status;
				snprintf(bc->err, sizeof(bc->err), "request failed: %s",
					 ev.message);
				break;
			}
		}
		res->total_ms = now_ms() - t0;
		if (r) {
			res->status = r;
			snprintf(bc->err, sizeof(bc->err), "%s", kvp_client_errmsg(c));
		}
		atomic_fetch_add(&bench_done, 1);
		if (r) /* the connection is gone: count the rest as failed */
			atomic_fetch_add(&bench_done, cfg->requests - r_i - 1);
		if (r)
			break;
	}
	free(ids);
	kvp_client_close(c);
	return NULL;
}

struct bench_group {
	double *ttft;
	size_t n, ok;
	uint64_t prompt, cached, hits, gen;
};

/* One group's figures: a JSON member @name of @j, or (@j NULL) a line of text. */
static void group_print(const char *name, struct bench_group *g, struct kvp_json *j)
{
	double p50, p99;

	kvp_sort_doubles(g->ttft, g->n);
	p50 = kvp_percentile_sorted(g->ttft, g->n, 50);
	p99 = kvp_percentile_sorted(g->ttft, g->n, 99);
	if (j) {
		kvp_json_begin(j, name, '{');
		kvp_json_u64(j, "requests", g->n);
		kvp_json_u64(j, "ok", g->ok);
		kvp_json_fixed(j, "ttft_p50_ms", p50, 3);
		kvp_json_fixed(j, "ttft_p99_ms", p99, 3);
		kvp_json_fixed(j, "token_hit_rate",
			       g->prompt ? (double)g->cached / (double)g->prompt : 0.0, 4);
		kvp_json_fixed(j, "request_hit_rate", g->ok ? (double)g->hits / (double)g->ok : 0.0,
			       4);
		kvp_json_end(j, '}');
		return;
	}
	printf("  %-5s %5zu ok of %-5zu TTFT p50 %8.2f ms  p99 %8.2f ms  "
	       "token hit rate %5.1f%%  request hit rate %5.1f%%\n",
	       name, g->ok, g->n, p50, p99,
	       g->prompt ? 100.0 * (double)g->cached / (double)g->prompt : 0.0,
	       g->ok ? 100.0 * (double)g->hits / (double)g->ok : 0.0);
}

static int cmd_bench(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "clients", required_argument, NULL, 'c' },
		{ "requests", required_argument, NULL, 'r' },
		{ "prefix-tokens", required_argument, NULL, 'P' },
		{ "suffix-tokens", required_argument, NULL, 'S' },
		{ "new-tokens", required_argument, NULL, 'g' },
		{ "seed", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct bench_cfg cfg = { .new_tokens = 16, .seed = 1 };
	struct bench_group cold = { 0 }, warm = { 0 };
	bool have_c = false, have_r = false, have_p = false, have_s = false, json = false;
	bool tty = isatty(STDERR_FILENO);
	struct bench_client *bc;
	unsigned int total, failed = 0;
	uint64_t prompt_all = 0;
	double t0, elapsed, last = 0;
	int opt;

	help_hint = "kvpool bench --help";
	while ((opt = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			cfg.clients = (unsigned int)parse_u64(optarg, "--clients", 1, 1024);
			have_c = true;
			break;
		case 'r':
			cfg.requests = (unsigned int)parse_u64(optarg, "--requests", 1, 1000000);
			have_r = true;
			break;
		case 'P':
			cfg.prefix = (unsigned int)parse_u64(optarg, "--prefix-tokens", 0,
							     1u << 24);
			have_p = true;
			break;
		case 'S':
			cfg.suffix = (unsigned int)parse_u64(optarg, "--suffix-tokens", 0,
							     1u << 24);
			have_s = true;
			break;
		case 'g':
			cfg.new_tokens = (unsigned int)parse_u64(optarg, "--new-tokens", 1,
								 1u << 20);
			break;
		case 's':
			cfg.seed = parse_u64(optarg, "--seed", 0, UINT64_MAX);
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			puts("usage: kvpool [--socket PATH] bench --clients N --requests M\n"
			     "              --prefix-tokens P --suffix-tokens S [--new-tokens G]\n"
			     "              [--seed X] [--json]\n"
			     "\n"
			     "Load generator: N threads, each with its own connection, send M requests\n"
			     "one after the other.  Every prompt is P token ids shared by all requests\n"
			     "(the same in every run with the same --seed) followed by S ids of its\n"
			     "own; each asks for G new tokens (default 16).  Progress goes to stderr.\n"
			     "The report gives TTFT p50/p99 (measured by the client: request sent to\n"
			     "first token), throughput, and the token hit rate (cached_tokens /\n"
			     "prompt_tokens) and request hit rate (requests with cached_tokens > 0),\n"
			     "for cold requests (each client's first) and warm ones (the rest).");
			return 0;
		default:
			die_bad_option(opt, argv);
		}
	}
	if (optind < argc)
		die_usage("bench: unexpected argument '%s'", argv[optind]);
	if (!have_c || !have_r || !have_p || !have_s)
		die_usage("bench: --clients, --requests, --prefix-tokens and --suffix-tokens are "
			  "required");
	if (!cfg.prefix && !cfg.suffix)
		die_usage("bench: the prompt would be empty");

	bc = calloc(cfg.clients, sizeof(*bc));
	if (!bc)
		die_usage("out of memory");
	total = cfg.clients * cfg.requests;
	t0 = now_ms();
	for (unsigned int i = 0; i < cfg.clients; i++) {
		bc[i] = (struct bench_client){ .idx = i, .cfg = &cfg };
		bc[i].res = calloc(cfg.requests, sizeof(*bc[i].res));
		if (!bc[i].res || pthread_create(&bc[i].thread, NULL, bench_thread, &bc[i]))
			die_usage("cannot start client %u", i);
	}
	/* progress on stderr: a rewritten line on a terminal, a line a second otherwise */
	for (;;) {
		unsigned int done = atomic_load(&bench_done);
		double t = now_ms() - t0;

		if (done >= total || t - last >= (tty ? 250.0 : 1000.0)) {
			fprintf(stderr,
				"%sbench: %u/%u requests done, %.1f s, %.1f generated tok/s%s",
				tty ? "\r" : "", done, total, t / 1e3,
				(double)atomic_load(&bench_gen_tokens) / (t / 1e3),
				tty ? "" : "\n");
			last = t;
		}
		if (done >= total)
			break;
		usleep(50000);
	}
	if (tty)
		fputc('\n', stderr);
	for (unsigned int i = 0; i < cfg.clients; i++)
		pthread_join(bc[i].thread, NULL);
	elapsed = (now_ms() - t0) / 1e3;

	cold.ttft = calloc(total, sizeof(double));
	warm.ttft = calloc(total, sizeof(double));
	if (!cold.ttft || !warm.ttft)
		die_usage("out of memory");
	for (unsigned int i = 0; i < cfg.clients; i++) {
		if (bc[i].err[0])
			fprintf(stderr, "kvpool: bench client %u: %s\n", i, bc[i].err);
		for (unsigned int r = 0; r < cfg.requests; r++) {
			struct bench_result *res = &bc[i].res[r];
			struct bench_group *g = r ? &warm : &cold;

			g->n++;
			if (!res->ok) {
				failed++;
				continue;
			}
			g->ok++;
			g->ttft[g->ok - 1] = res->ttft_ms;
			g->prompt += res->u.prompt_tokens;
			g->cached += res->u.cached_tokens;
			g->hits += res->u.cached_tokens > 0;
			g->gen += res->u.generated_tokens;
		}
	}
	cold.n = cold.ok, warm.n = warm.ok; /* percentiles over successful requests */
	prompt_all = cold.prompt + warm.prompt;
	if (json) {
		struct kvp_buf b = KVP_BUF_INIT;
		struct kvp_json j;

		kvp_json_init(&j, &b);
		kvp_json_begin(&j, NULL, '{');
		kvp_json_u64(&j, "clients", cfg.clients);
		kvp_json_u64(&j, "requests", cfg.requests);
		kvp_json_u64(&j, "prefix_tokens", cfg.prefix);
		kvp_json_u64(&j, "suffix_tokens", cfg.suffix);
		kvp_json_u64(&j, "new_tokens", cfg.new_tokens);
		kvp_json_u64(&j, "failed", failed);
		kvp_json_fixed(&j, "seconds", elapsed, 3);
		kvp_json_fixed(&j, "requests_per_s", (double)(total - failed) / elapsed, 3);
		kvp_json_fixed(&j, "generated_tokens_per_s",
			       (double)(cold.gen + warm.gen) / elapsed, 3);
		kvp_json_fixed(&j, "prompt_tokens_per_s", (double)prompt_all / elapsed, 3);
		group_print("cold", &cold, &j);
		group_print("warm", &warm, &j);
		kvp_json_end(&j, '}');
		if (json_print(&b) < 0)
			failed++;
		kvp_buf_deinit(&b);
	} else {
		printf("bench: %u clients x %u requests, prompt %u shared + %u own tokens, "
		       "%u new tokens\n",
		       cfg.clients, cfg.requests, cfg.prefix, cfg.suffix, cfg.new_tokens);
		printf("  %u ok, %u failed in %.2f s: %.2f req/s, %.1f generated tok/s, "
		       "%.1f prompt tok/s\n",
		       total - failed, failed, elapsed, (double)(total - failed) / elapsed,
		       (double)(cold.gen + warm.gen) / elapsed, (double)prompt_all / elapsed);
		group_print("cold", &cold, NULL);
		group_print("warm", &warm, NULL);
	}
	for (unsigned int i = 0; i < cfg.clients; i++)
		free(bc[i].res);
	free(bc);
	free(cold.ttft);
	free(warm.ttft);
	return failed ? 1 : 0;
}

/* ------------------------------------------------------------ main */

static void main_help(FILE *o)
{
	fputs("usage: kvpool [--socket PATH] [--status-socket PATH] COMMAND [OPTIONS]\n"
	      "\n"
	      "Client of kvpoold, the local KV-cache LLM inference daemon.\n"
	      "\n"
	      "Commands:\n"
	      "  generate   send a prompt, stream the generated text (kvpool generate --help)\n"
	      "  chat       a conversation with the model, on its chat template (kvpool chat --help)\n"
	      "  tokenize   the model's token ids of a text (kvpool tokenize --help)\n"
	      "  detokenize the text of token ids (kvpool detokenize --help)\n"
	      "  lease      lease the cached blocks of a prefix, print them (kvpool lease --help)\n"
	      "  status     print the daemon's status report (kvpool status --help)\n"
	      "  flush      operators: drop unreferenced cached blocks; --tier: empty the disk tier\n"
	      "  pin, unpin operators: keep a prompt's blocks cached until unpinned\n"
	      "  bench      load generator: TTFT, throughput, prefix hit rates (kvpool bench --help)\n"
	      "\n"
	      "Options:\n"
	      "  --socket PATH         request socket (default " KVP_DEFAULT_SOCKET ")\n"
	      "  --status-socket PATH  status socket (default: status.sock next to --socket,\n"
	      "                        where kvpoold puts it unless told otherwise; without\n"
	      "                        --socket " KVP_DEFAULT_STATUS_SOCKET ")\n"
	      "  -h, --help            this text\n"
	      "  --version             print the version\n"
	      "Exit status: 0 ok, 1 the request or connection failed, 2 bad usage.\n",
	      o);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "status-socket", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	const char *cmd;
	int opt;

	opterr = 0; /* one message of ours per bad option: die_bad_option() */
	/* '+': stop at the command; its own options are parsed by the command */
	while ((opt = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
		switch (opt) {
		case 's':
			sock_path = optarg;
			break;
		case 'S':
			status_path = optarg;
			break;
		case 'h':
			main_help(stdout);
			return 0;
		case 'V':
			printf("kvpool %s\n", KVP_VERSION);
			return 0;
		default:
			die_bad_option(opt, argv);
		}
	}
	if (sock_path && !status_path) {
		/* kvpoold puts its status socket there unless told otherwise */
		const char *slash = strrchr(sock_path, '/');

		if (snprintf(status_buf, sizeof(status_buf), "%.*sstatus.sock",
			     slash ? (int)(slash - sock_path + 1) : 0,
			     sock_path) < (int)sizeof(status_buf))
			status_path = status_buf;
	}
	if (optind >= argc)
		die_usage("no command given");
	cmd = argv[optind];
	argc -= optind;
	argv += optind;
	optind = 1;
	if (!strcmp(cmd, "generate"))
		return cmd_generate(argc, argv);
	if (!strcmp(cmd, "chat"))
		return cmd_chat(argc, argv);
	if (!strcmp(cmd, "tokenize"))
		return cmd_tokenize(argc, argv);
	if (!strcmp(cmd, "detokenize"))
		return cmd_detokenize(argc, argv);
	if (!strcmp(cmd, "lease"))
		return cmd_lease(argc, argv);
	if (!strcmp(cmd, "status"))
		return cmd_status(argc, argv);
	if (!strcmp(cmd, "flush"))
		return cmd_flush(argc, argv);
	if (!strcmp(cmd, "pin"))
		return cmd_pin(argc, argv, false);
	if (!strcmp(cmd, "unpin"))
		return cmd_pin(argc, argv, true);
	if (!strcmp(cmd, "bench"))
		return cmd_bench(argc, argv);
	if (!strcmp(cmd, "help")) {
		main_help(stdout);
		return 0;
	}
	die_usage("unknown command '%s'", cmd);
}
