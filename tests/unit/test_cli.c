/* SPDX-License-Identifier: MIT */
/*
 * test_cli.c - the `kvpool` CLI as a user runs it: the built binary is executed
 * against the ipc/ server running in a thread of this process (an echo ops table:
 * each prompt id comes back as a TOKEN whose text is "<id>;"), and its exit status,
 * stdout and stderr are checked.  Bad arguments must fail with status 2 and a message
 * naming the argument.  chat, tokenize and detokenize talk to the same server (its
 * CHAT answers with the conversation's shape as prompt ids); chat's interactive mode
 * runs on a pseudo-terminal, where Ctrl-C cancels a reply and the conversation goes on.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include <cmocka.h>

#include "ipc/server.h"
#include "tests/lib/testlib.h"

struct fixture {
	char dir[256];
	char sock[300];
	char status[300];
	char cli[512];
	struct kvp_server *srv;
	pthread_t thread;
	atomic_bool held; /* a GENERATE of token 42 (or a CHAT saying "hold") is held */
	/* the last CHAT: its messages, context ids, the messages they cover, roles */
	atomic_uint chat_msgs, chat_context, chat_context_msgs, chat_roles;
	atomic_int chat_priority;
	atomic_uint chat_flags;
	/* GENERATEs received, and the priority field of the last one */
	atomic_uint generates;
	atomic_int gen_priority;
};

static int e_hello(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, const char *client,
		   struct kvp_welcome *w, int *fds, unsigned int *n_fds, char *why, size_t why_cap)
{
	(void)why;
	(void)why_cap;
	w->n_vocab = 300;
	w->bos_id = w->eos_id = UINT32_MAX;
	*n_fds = 0;
	return KVP_OK;
}

static int e_generate(void *ctx, kvp_conn_id conn, uint64_t req_id, const struct kvp_gen_req *g)
{
	struct fixture *f = ctx;
	const int32_t *tokens = g->ids;
	const char *text = g->text;
	struct kvp_usage u = { .prompt_tokens = g->n_ids, .cached_tokens = 16, .ttft_ms = 2.5 };
	char buf[16];

	atomic_store(&f->gen_priority, g->priority);
	atomic_fetch_add(&f->generates, 1);
	if (tokens && (tokens[0] == 43 || tokens[0] == 44)) {
		/* the daemon stops mid-generation: a DONE with SHUTDOWN, or the connection ends */
		static const int32_t two[] = { 7, 8 };

		kvp_server_send_tokens(f->srv, conn, req_id, two, 2, "ab", 2);
		if (tokens[0] == 44) {
			kvp_server_send_error(f->srv, conn, 0, KVP_E_SHUTDOWN, "daemon stopping");
			return KVP_OK;
		}
		u.generated_tokens = 2;
		u.status = KVP_E_SHUTDOWN;
		kvp_server_send_done(f->srv, conn, req_id, &u, NULL, NULL);
		return KVP_OK;
	}
	if (tokens && tokens[0] == 27) {
		/* escape sequences, a bell, a C1 control, a stray byte, then good UTF-8 */
		static const char ctl[] = "\x1b[31mred\x07 \xc2\x9b \xff \xc3\xa9\tok\n";
		int32_t id = 27;

		kvp_server_send_tokens(f->srv, conn, req_id, &id, 1, ctl, sizeof(ctl) - 1);
		u.generated_tokens = 1;
		kvp_server_send_done(f->srv, conn, req_id, &u, NULL, NULL);
		return KVP_OK;
	}
	if (tokens && tokens[0] == 42) {
		/* held: no answer until the client cancels, like a long prefill */
		atomic_store(&f->held, true);
		return KVP_OK;
	}
	for (uint32_t i = 0; tokens && i < g->n_ids && i < g->max_new_tokens; i++) {
		int n = snprintf(buf, sizeof(buf), "%d;", tokens[i]);

		kvp_server_send_tokens(f->srv, conn, req_id, &tokens[i], 1, buf, (uint32_t)n);
		u.generated_tokens++;
	}
	if (text) {
		/*
		 * text with a quote, a newline, a stray byte, a surrogate, an overlong form,
		 * a code point past U+10FFFF, then good two- and four-byte characters: the
		 * JSON must stay valid
		 */
		static const char odd[] = "a\"b\n\xff"
					  "\xed\xa0\x80"
					  "\xe0\x80\x80"
					  "\xf4\x90\x80\x80"
					  "\xc3\xa9"
					  "\xf0\x9f\x98\x80";
		int32_t id = 1;

		kvp_server_send_tokens(f->srv, conn, req_id, &id, 1, odd, sizeof(odd) - 1);
		u.generated_tokens = 1;
	}
	/* a request that names speculation asks for its figures: 9 drafted, 4 kept */
	kvp_server_send_done(f->srv, conn, req_id, &u, NULL,
			     g->flags & KVP_GEN_SPEC_USAGE ? &(struct kvp_spec_usage){ 9, 4 } :
							     NULL);
	return KVP_OK;
}

static void e_cancel(void *ctx, kvp_conn_id conn, uint64_t req_id)
{
	struct fixture *f = ctx;
	struct kvp_usage u = { .prompt_tokens = 1, .status = KVP_E_CANCELLED };

	kvp_server_send_done(f->srv, conn, req_id, &u, NULL, NULL);
}

static void e_closed(void *ctx, kvp_conn_id conn)
{
}

/* TOKENIZE: each byte its id, +1000 with parse_special, BOS 1 unless NO_BOS. */
static int e_tokenize(void *ctx, kvp_conn_id conn, uint64_t req_id, const struct kvp_tokenize *t,
		      const char *text)
{
	struct fixture *f = ctx;
	struct kvp_usage u = { 0 };
	int32_t ids[300];
	uint32_t n = 0;

	if (!(t->flags & KVP_TOKENIZE_NO_BOS))
		ids[n++] = 1;
	for (uint32_t i = 0; i < t->text_bytes && n < 300; i++)
		ids[n++] = (uint8_t)text[i] + (t->flags & KVP_TOKENIZE_PARSE_SPECIAL ? 1000 : 0);
	u.prompt_tokens = n;
	kvp_server_send_ids(f->srv, conn, req_id, ids, n, NULL, 0);
	kvp_server_send_done(f->srv, conn, req_id, &u, NULL, NULL);
	return KVP_OK;
}

/* DETOKENIZE: "<id>;" per id, "[<id>]" with RENDER_SPECIAL, and a stray byte at the end. */
static int e_detokenize(void *ctx, kvp_conn_id conn, uint64_t req_id,
			const struct kvp_detokenize *d, const int32_t *ids)
{
	struct fixture *f = ctx;
	struct kvp_usage u = { .prompt_tokens = d->n_tokens };
	char text[4096];
	size_t n = 0;

	for (uint32_t i = 0; i < d->n_tokens && n < 4000; i++)
		n += (size_t)snprintf(text + n, sizeof(text) - n,
				      d->flags & KVP_DETOKENIZE_RENDER_SPECIAL ? "[%d]" : "%d;",
				      ids[i]);
	text[n++] = (char)0xff;
	kvp_server_send_ids(f->srv, conn, req_id, NULL, 0, text, (uint32_t)n);
	kvp_server_send_done(f->srv, conn, req_id, &u, NULL, NULL);
	return KVP_OK;
}

/*
 * CHAT: the prompt ids say the conversation's shape (messages, context ids, messages
 * covered); the reply is "r1 r2" (ids 7, 8), or nothing until cancelled when the last
 * message is "hold"; a message "refuse" gets an ERROR.
 */
static int e_chat(void *ctx, kvp_conn_id conn, uint64_t req_id, const struct kvp_gen_req *ch)
{
	struct fixture *f = ctx;
	const struct kvp_proto_msg *msgs = ch->msgs;
	const struct kvp_proto_msg *last = &msgs[ch->n_messages - 1];
	int32_t prompt[3] = { (int32_t)ch->n_messages, (int32_t)ch->n_ids,
			      (int32_t)ch->context_msgs };
	struct kvp_usage u = { .prompt_tokens = 3 + ch->n_ids, .generated_tokens = 2 };
	unsigned int roles = 0;
	int32_t r1 = 7, r2 = 8;

	for (uint32_t i = 0; i < ch->n_messages && i < 16; i++)
		roles |= msgs[i].role << (2 * i);
	atomic_store(&f->chat_msgs, ch->n_messages);
	atomic_store(&f->chat_priority, ch->priority);
	atomic_store(&f->chat_flags, ch->flags);
	atomic_store(&f->chat_context, ch->n_ids);
	atomic_store(&f->chat_context_msgs, ch->context_msgs);
	atomic_store(&f->chat_roles, roles);
	if (last->len == 6 && !memcmp(last->text, "refuse", 6)) {
		kvp_server_send_error(f->srv, conn, req_id, KVP_E_INVALID, "refused on purpose");
		return KVP_OK;
	}
	kvp_server_send_ids(f->srv, conn, req_id, prompt, 3, NULL, 0);
	if (last->len == 4 && !memcmp(last->text, "hold", 4)) {
		kvp_server_send_tokens(f->srv, conn, req_id, &r1, 1, "partial", 7);
		atomic_store(&f->held, true);
		return KVP_OK;
	}
	kvp_server_send_tokens(f->srv, conn, req_id, &r1, 1, "r1", 2);
	kvp_server_send_tokens(f->srv, conn, req_id, &r2, 1, " r2", 3);
	kvp_server_send_done(f->srv, conn, req_id, &u, NULL, NULL);
	return KVP_OK;
}

/* A status report with the members the CLI's summary reads. */
static const char status_json[] =
	"{\"daemon\":{\"version\":\"0.1.0\",\"model\":\"tiny\",\"state\":\"serving\","
	"\"pid\":7,\"uptime_ms\":61000},\"pool\":{\"bytes\":67108864,\"block_tokens\":16,"
	"\"page_kind\":\"4k\",\"kv_dtype\":\"int4\",\"bytes_per_token\":1032192.5,"
	"\"bytes_per_token_f32\":7340032,\"blocks_total\":100,\"blocks_used\":1,"
	"\"blocks_cached\":9,\"blocks_free\":90},\"index\":{\"entries\":9,\"lookups\":4,"
	"\"request_hit_rate\":0.5,\"token_hit_rate\":0.25,\"evictions\":0},"
	"\"scheduler\":{\"queued\":0,\"running\":1,\"requests_total\":5,\"requests_done\":4,"
	"\"requests_cancelled\":0,\"requests_failed\":0,\"requests_rejected\":1,"
	"\"ttft_samples\":4,\"ttft_p50_ms\":12.5,\"ttft_p99_ms\":40,\"policy\":\"fair\","
	"\"queued_high\":1,\"queued_normal\":2,\"queued_low\":3,\"preemptions\":5,"
	"\"preemptions_swapped\":4,\"preempted\":1,\"step_p50_ms\":7.5,\"step_p99_ms\":20,"
	"\"step_max_ms\":31,\"step_target_ms\":18.25,\"itl_p50_ms\":8,\"itl_p99_ms\":22.5,"
	"\"itl_max_ms\":33},"
	"\"usage\":{\"prompt_tokens\":400,\"cached_tokens\":100,\"recomputed_tokens\":268,"
	"\"generated_tokens\":64,\"cached_tokens_disk\":32},\"tier\":{\"state\":\"on\","
	"\"slots\":500,\"blocks\":12,\"bytes\":3145728,\"writes\":20,\"reloads\":2,"
	"\"reload_p50_ms\":1.25,\"reload_p99_ms\":4,\"checksum_failures\":1,\"errors\":0},"
	"\"connections\":{\"open\":2,\"total\":9,\"refused\":3,"
	"\"refused_per_uid\":1,\"idle_closed\":2},"
	"\"domains\":[{\"name\":\"research\",\"requests\":3,\"cache\":{\"eviction\":\"lfu\","
	"\"min_tokens\":64,\"request_hit_rate\":0.5,\"token_hit_rate\":0.25,"
	"\"tokens_saved\":48,\"evictions\":2,\"recomputed_tokens\":16,"
	"\"pinned_bytes\":2097152,\"cost_uncached\":200,\"cost_saved_ratio\":0.215}},"
	"{\"name\":\"ops\",\"requests\":0,\"cache\":{\"eviction\":\"lru\"}}]}\n";

static int e_status(void *ctx, const struct kvp_peer *peer, enum kvp_status_fmt fmt, char *buf,
		    size_t cap)
{
	int n = snprintf(buf, cap, "%s", fmt == KVP_STATUS_PROM ? "kvpool_up 1\n" : status_json);

	return (size_t)n < cap ? n : -ENOSPC;
}

/* GENERATE and CHAT; the CLI sends cache control with every request, ignored here. */
static int e_request(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, uint64_t req_id,
		     const struct kvp_gen_req *r, struct kvp_prompt_ids *prompt)
{
	(void)peer;
	(void)prompt; /* left to ipc/, which frees it */
	return r->type == KVP_FRAME_CHAT ? e_chat(ctx, conn, req_id, r) :
					   e_generate(ctx, conn, req_id, r);
}

static void *run(void *arg)
{
	struct fixture *f = arg;

	kvp_server_run(f->srv);
	return NULL;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct kvp_server_config cfg = { .socket_gid = (gid_t)-1, .status_gid = (gid_t)-1 };
	struct kvp_server_ops ops = { .hello = e_hello,
				      .generate = e_request,
				      .cancel = e_cancel,
				      .closed = e_closed,
				      .tokenize = e_tokenize,
				      .detokenize = e_detokenize,
				      .status = e_status };

	assert_non_null(f);
	assert_int_equal(kvp_test_tmpdir(f->dir, sizeof(f->dir)), 0);
	snprintf(f->sock, sizeof(f->sock), "%s/k.sock", f->dir);
	snprintf(f->status, sizeof(f->status), "%s/s.sock", f->dir);
	assert_int_equal(kvp_test_build_path(f->cli, sizeof(f->cli), "ipc/kvpool"), 0);
	cfg.socket_path = f->sock;
	cfg.status_path = f->status;
	ops.ctx = f;
	assert_int_equal(kvp_server_new(&f->srv, &cfg, &ops), 0);
	assert_int_equal(pthread_create(&f->thread, NULL, run, f), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	kvp_server_stop(f->srv);
	pthread_join(f->thread, NULL);
	kvp_server_free(f->srv);
	kvp_test_rmtree(f->dir);
	free(f);
	return 0;
}

/* Read all of @fd into @buf (NUL-terminated). */
static void slurp(int fd, char *buf, size_t cap)
{
	size_t n = 0;
	ssize_t r;

	while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0)
		n += (size_t)r;
	buf[n] = 0;
}

/* Run the CLI with --socket/--status-socket (not with "--bare" first) and @args. */
static int cli(struct fixture *f, char *out, char *err, size_t cap, ...)
{
	const char *argv[32] = { f->cli, "--socket", f->sock, "--status-socket", f->status };
	int po[2], pe[2], st, n = 5;
	va_list ap;
	pid_t pid;

	va_start(ap, cap);
	while (n < 31 && (argv[n] = va_arg(ap, const char *)))
		n++;
	va_end(ap);
	if (!strcmp(argv[5] ? argv[5] : "", "--bare")) {
		/* without the fixture's socket flags */
		memmove(&argv[1], &argv[6], (size_t)(n - 5) * sizeof(argv[0]));
		n -= 5;
	}
	argv[n] = NULL;
	assert_int_equal(pipe2(po, O_CLOEXEC), 0);
	assert_int_equal(pipe2(pe, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		dup2(po[1], 1);
		dup2(pe[1], 2);
		execv(f->cli, (char *const *)argv);
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	/* outputs are small: read stdout fully, then stderr */
	slurp(po[0], out, cap);
	slurp(pe[0], err, cap);
	close(po[0]);
	close(pe[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

static void test_generate_streams_and_prints_usage(void **state)
{
	/* text goes to stdout as it arrives, the usage line with every field to stderr */
	struct fixture *f = *state;
	char out[4096], err[4096];

	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "5,6,7", NULL), 0);
	assert_string_equal(out, "5;6;7;\n");
	assert_non_null(strstr(err, "prompt_tokens 3"));
	assert_non_null(strstr(err, "cached_tokens 16"));
	assert_non_null(strstr(err, "ttft 2.5 ms"));
}

static void test_generate_json(void **state)
{
	/* one JSON object: generated ids, text (escaped, invalid UTF-8 replaced), usage */
	struct fixture *f = *state;
	char out[4096], err[4096];

	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "5,6", "-n", "1",
			     "--json", NULL),
			 0);
	assert_non_null(strstr(out, "{\"tokens\":[5],\"text\":\"5;\",\"usage\":{"));
	assert_non_null(strstr(
		out,
		"\"prompt_tokens\":2,\"cached_tokens\":16,"
		"\"cache_creation_tokens\":0,\"recomputed_tokens\":0,"
		"\"generated_tokens\":1,\"queue_ms\":0.000,\"ttft_ms\":2.500,"
		"\"prefill_ms\":0.000,\"decode_ms\":0.000,"
		"\"cached_tokens_disk\":0,\"preemptions\":0,"
		"\"swapped_tokens\":0,\"resume_computed_tokens\":0,\"cached_tokens_remote\":0}}"));
	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "-p", "hi", "--json", NULL), 0);
	assert_non_null(strstr(out, "\"text\":\"a\\\"b\\n\\ufffd"
				    "\\ufffd\\ufffd\\ufffd"
				    "\\ufffd\\ufffd\\ufffd"
				    "\\ufffd\\ufffd\\ufffd\\ufffd"
				    "\xc3\xa9\xf0\x9f\x98\x80\""));
}

/* --speculative on / off ask for the drafted and accepted tokens; without it none come */
static void test_generate_speculative(void **state)
{
	struct fixture *f = *state;
	char out[4096], err[4096];

	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "5,6",
			     "--speculative", "on", NULL),
			 0);
	assert_non_null(strstr(err, "; drafted_tokens 9, accepted_tokens 4\n"));
	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "5,6",
			     "--speculative", "off", "--json", NULL),
			 0);
	assert_non_null(strstr(out, "\"cached_tokens_remote\":0,\"drafted_tokens\":9,"
				    "\"accepted_tokens\":4}}"));
	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "5,6", NULL), 0);
	assert_null(strstr(err, "drafted_tokens"));
	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "5,6", "--json",
			     NULL),
			 0);
	assert_null(strstr(out, "drafted_tokens"));
}

static void test_generate_json_exact(void **state)
{
	/* byte for byte what earlier releases printed, with protocol 2's usage fields
	 * appended (the echo server's usage is fixed) */
	struct fixture *f = *state;
	char out[4096], err[4096];

	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "5,6,7", "--json",
			     NULL),
			 0);
	assert_string_equal(
		out,
		"{\"tokens\":[5,6,7],\"text\":\"5;6;7;\",\"usage\":{"
		"\"prompt_tokens\":3,\"cached_tokens\":16,"
		"\"cache_creation_tokens\":0,\"recomputed_tokens\":0,"
		"\"generated_tokens\":3,\"queue_ms\":0.000,\"ttft_ms\":2.500,"
		"\"prefill_ms\":0.000,\"decode_ms\":0.000,"
		"\"cached_tokens_disk\":0,\"preemptions\":0,"
		"\"swapped_tokens\":0,\"resume_computed_tokens\":0,\"cached_tokens_remote\":0}}\n");
	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "-p", "hi", "--json", NULL), 0);
	assert_string_equal(
		out,
		"{\"tokens\":[1],\"text\":\"a\\\"b\\n\\ufffd"
		"\\ufffd\\ufffd\\ufffd"
		"\\ufffd\\ufffd\\ufffd"
		"\\ufffd\\ufffd\\ufffd\\ufffd"
		"\xc3\xa9\xf0\x9f\x98\x80\","
		"\"usage\":{\"prompt_tokens\":0,\"cached_tokens\":16,"
		"\"cache_creation_tokens\":0,\"recomputed_tokens\":0,"
		"\"generated_tokens\":1,\"queue_ms\":0.000,\"ttft_ms\":2.500,"
		"\"prefill_ms\":0.000,\"decode_ms\":0.000,"
		"\"cached_tokens_disk\":0,\"preemptions\":0,"
		"\"swapped_tokens\":0,\"resume_computed_tokens\":0,\"cached_tokens_remote\":0}}\n");
}

static void test_status_formats(void **state)
{
	/* a summary by default; --json and --prom print what the status socket returns */
	struct fixture *f = *state;
	char out[4096], err[4096];

	assert_int_equal(cli(f, out, err, sizeof(out), "status", NULL), 0);
	assert_non_null(strstr(out, "kvpoold 0.1.0 (pid 7), serving for 1m 1s\n"));
	assert_non_null(strstr(out, "pool         64.0 MiB in 4k pages, int4 K/V"));
	assert_non_null(
		strstr(out,
		       "K/V          1032192.5 bytes per token, scales included (f32: 7340032)"));
	assert_non_null(strstr(out, "prefix hits  50.0% of requests, 25.0% of prompt tokens"));
	assert_non_null(strstr(out, "requests 5: 4 done, 0 cancelled, 0 failed, 1 rejected"));
	assert_non_null(strstr(out, "TTFT         p50 12.5 ms, p99 40.0 ms"));
	assert_non_null(strstr(out,
			       "policy       fair: queued by priority 1 high, 2 normal, 3 low; "
			       "5 preemptions (4 to disk), 1 preempted now\n"));
	assert_non_null(strstr(out, "steps        p50 7.5 ms, p99 20.0, max 31.0 (target 18.2); "
				    "between tokens p50 8.0 ms, p99 22.5, max 33.0\n"));
	assert_non_null(
		strstr(out, "2 open (9 since start); refused 3 (1 per-uid limit), 2 closed"));
	assert_non_null(strstr(out, "400 prompt tokens (100 cached, 32 from disk, 268 computed), "
				    "64 generated"));
	assert_non_null(strstr(out, "tier         12 blocks (3.0 MiB) on disk in 500 slots; 20 "
				    "writes, 2 reloads (p50 1.2 ms, p99 4.0 ms); 1 checksum "
				    "failures, 0 errors\n"));
	/* one line per trust domain, its cache by its own policy */
	assert_non_null(strstr(out, "  domain research  3 requests; hits 50.0% of requests, "
				    "25.0% of tokens; 48 tokens saved; 2 evictions, 16 "
				    "recomputed; 2.0 MiB pinned; cost 78.5% of uncached (lfu, "
				    "min 64 tokens)\n"));
	assert_non_null(strstr(out, "  domain ops       0 requests; hits 0.0% of requests, 0.0% "
				    "of tokens; 0 tokens saved; 0 evictions, 0 recomputed; 0 B "
				    "pinned; cost 100.0% of uncached (lru)\n"));
	assert_int_equal(cli(f, out, err, sizeof(out), "status", "--json", NULL), 0);
	assert_string_equal(out, status_json);
	assert_int_equal(cli(f, out, err, sizeof(out), "status", "--prom", NULL), 0);
	assert_string_equal(out, "kvpool_up 1\n");
}

static void test_bench_reports(void **state)
{
	/* bench runs clients x requests and reports cold and warm groups */
	struct fixture *f = *state;
	char out[8192], err[8192];

	assert_int_equal(cli(f, out, err, sizeof(out), "bench", "--clients", "3", "--requests", "2",
			     "--prefix-tokens", "8", "--suffix-tokens", "2", "--new-tokens", "4",
			     NULL),
			 0);
	assert_non_null(strstr(out, "6 ok, 0 failed"));
	assert_non_null(strstr(out, "cold      3 ok of 3"));
	assert_non_null(strstr(out, "warm      3 ok of 3"));
	assert_non_null(strstr(err, "6/6 requests done"));
}

static void test_bad_arguments(void **state)
{
	/* each bad argument: exit 2 and a message naming it; nothing is sent */
	struct fixture *f = *state;
	char out[4096], err[4096];
	static const struct {
		const char *a[6];   /* NULL-terminated */
		const char *expect; /* in stderr */
	} bad[] = {
		{ { "generate", "-p", "x", "-n", "abc" }, "-n" },
		{ { "generate", "-p", "x", "-n", "0" }, "-n" },
		{ { "generate", "-p", "x", "-n", "12x" }, "-n" },
		{ { "generate", "-p", "x", "-n", "-3" }, "-n" },
		{ { "generate", "-p", "x", "--top-p", "0" }, "--top-p" },
		{ { "generate", "-p", "x", "--top-p", "1.5" }, "--top-p" },
		{ { "generate", "-p", "x", "--temperature", "nan" }, "--temperature" },
		{ { "generate", "-p", "x", "--temperature", "101" }, "--temperature" },
		{ { "generate", "-p", "x", "--seed", "99999999999999999999" }, "--seed" },
		{ { "generate", "--tokens", "1,,2" }, "--tokens" },
		{ { "generate", "--tokens", "1,-2" }, "--tokens" },
		{ { "generate", "--tokens", "1,2", "-p", "x" }, "exactly one" },
		{ { "generate", "--json" }, "exactly one" },
		{ { "bench", "--clients", "2" }, "required" },
		{ { "bench", "--clients", "0" }, "--clients" },
		{ { "tokenize" }, "exactly one" },
		{ { "tokenize", "-p", "x", "--prompt-file", "/dev/null" }, "exactly one" },
		{ { "tokenize", "-p", "x", "extra" }, "unexpected argument" },
		{ { "detokenize" }, "--tokens is required" },
		{ { "detokenize", "--tokens", "1,,2" }, "--tokens" },
		{ { "chat", "-n", "0", "--message", "x" }, "-n" },
		{ { "chat", "--chat-template", "0123456789012345678901234567890123" },
		  "--chat-template" },
		{ { "chat", "--top-p", "2", "--message", "x" }, "--top-p" },
		{ { "chat", "stray" }, "unexpected argument" },
		{ { "chat", "--thinking", "yes", "--message", "x" }, "--thinking" },
		{ { "frobnicate" }, "unknown command" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *const *a = bad[i].a;

		assert_int_equal(cli(f, out, err, sizeof(out), a[0], a[1], a[2], a[3], a[4], a[5],
				     NULL),
				 2);
		assert_non_null(strstr(err, bad[i].expect));
	}
	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--salt",
			     "0123456789012345678901234567890123456789012345678901234567890123X",
			     "-p", "x", NULL),
			 2);
	assert_non_null(strstr(err, "--salt"));
	/* help tells the truth and succeeds */
	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--help", NULL), 0);
	assert_non_null(strstr(out, "--prompt-file"));
	/* the synopsis names the cache-control flags too, not only the option list */
	assert_non_null(strstr(out, "[--parallel N] [--breakpoint POS[:TTL]]... [--ttl S]"));
	assert_int_equal(cli(f, out, err, sizeof(out), "bench", "--help", NULL), 0);
	assert_non_null(strstr(out, "--prefix-tokens"));
	assert_int_equal(cli(f, out, err, sizeof(out), "--help", NULL), 0);
	assert_non_null(strstr(out, "status"));
	assert_non_null(strstr(out, "chat"));
	assert_non_null(strstr(out, "tokenize"));
	assert_int_equal(cli(f, out, err, sizeof(out), "chat", "--help", NULL), 0);
	assert_non_null(strstr(out, "Ctrl-C cancels the"));
	assert_non_null(strstr(out, "[--thinking on|off]"));
	assert_int_equal(cli(f, out, err, sizeof(out), "tokenize", "--help", NULL), 0);
	assert_non_null(strstr(out, "--parse-special"));
	assert_int_equal(cli(f, out, err, sizeof(out), "detokenize", "--help", NULL), 0);
	assert_non_null(strstr(out, "--render-special"));
}

static void test_generate_priority(void **state)
{
	/*
	 * --priority N reaches the daemon in GENERATE.priority, either end of the range and
	 * a negative value as its own argument included; without it, KVP_PRIORITY_DEFAULT
	 * (none named: the trust domain's).  A value out of range or not a number: exit 2
	 * naming the flag and the range, nothing sent.
	 */
	struct fixture *f = *state;
	char out[4096], err[4096];
	static const struct {
		const char *arg;
		int want;
	} good[] = { { "7", 7 }, { "-1000", -1000 }, { "1000", 1000 }, { "-1", -1 } };
	static const struct {
		const char *arg, *why;
	} bad[] = {
		{ "1001", "--priority: '1001' is out of range [-1000, 1000]" },
		{ "-1001", "--priority: '-1001' is out of range [-1000, 1000]" },
		{ "high", "--priority: 'high' is not an integer" },
		{ "5x", "--priority: '5x' is not an integer" },
		{ "", "--priority: '' is not an integer" },
	};
	unsigned int n;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		atomic_store(&f->gen_priority, 12345);
		assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "5,6",
				     "--priority", good[i].arg, NULL),
				 0);
		assert_int_equal(atomic_load(&f->gen_priority), good[i].want);
		assert_string_equal(out, "5;6;\n");
	}
	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "5", "--priority=-3",
			     NULL),
			 0);
	assert_int_equal(atomic_load(&f->gen_priority), -3);
	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "5", "--priority",
			     "0", NULL),
			 0);
	assert_int_equal(atomic_load(&f->gen_priority), 0);
	/* no flag: none named, the trust domain's default */
	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "5", NULL), 0);
	assert_int_equal(atomic_load(&f->gen_priority), KVP_PRIORITY_DEFAULT);

	n = atomic_load(&f->generates);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "5",
				     "--priority", bad[i].arg, NULL),
				 2);
		if (!strstr(err, bad[i].why))
			fail_msg("--priority '%s': stderr '%s'", bad[i].arg, err);
		assert_string_equal(out, "");
	}
	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "5", "--priority",
			     NULL),
			 2);
	assert_non_null(strstr(err, "option '--priority' needs a value"));
	assert_int_equal(atomic_load(&f->generates), n); /* none of them was sent */
}

static void test_tokenize_detokenize(void **state)
{
	/* ids comma-separated or as JSON; flags reach the daemon; text as bytes or JSON */
	struct fixture *f = *state;
	char out[4096], err[4096];

	assert_int_equal(cli(f, out, err, sizeof(out), "tokenize", "-p", "ab", NULL), 0);
	assert_string_equal(out, "1,97,98\n");
	assert_int_equal(cli(f, out, err, sizeof(out), "tokenize", "-p", "ab", "--json", "--no-bos",
			     "--parse-special", NULL),
			 0);
	assert_string_equal(out, "{\"tokens\":[1097,1098]}\n");
	assert_int_equal(cli(f, out, err, sizeof(out), "tokenize", "--prompt-file", "/dev/null",
			     "--no-bos", "--json", NULL),
			 0);
	assert_string_equal(out, "{\"tokens\":[]}\n");
	assert_int_equal(cli(f, out, err, sizeof(out), "detokenize", "--tokens", "5,6", NULL), 0);
	assert_string_equal(out, "5;6;\xff\n");
	assert_int_equal(cli(f, out, err, sizeof(out), "detokenize", "--tokens", "5,6", "--json",
			     "--render-special", NULL),
			 0);
	assert_string_equal(out, "{\"text\":\"[5][6]\\ufffd\"}\n");
}

static void test_chat_turns(void **state)
{
	/*
	 * --message turns in order, each continuing on the last: the second CHAT carries
	 * the first prompt's and reply's ids (3 + 2) as context covering 3 messages; --json
	 * prints one object per turn; an ERROR ends a scripted chat with status 1
	 */
	struct fixture *f = *state;
	char out[4096], err[4096];

	assert_int_equal(cli(f, out, err, sizeof(out), "chat", "--system", "S", "--message", "a",
			     "--message", "b", "--json", NULL),
			 0);
	assert_string_equal(
		out,
		"{\"turn\":1,\"tokens\":[7,8],\"text\":\"r1 r2\",\"status\":"
		"\"ok\",\"usage\":{\"prompt_tokens\":3,\"cached_tokens\":0,"
		"\"cache_creation_tokens\":0,\"recomputed_tokens\":0,"
		"\"generated_tokens\":2,\"queue_ms\":0.000,\"ttft_ms\":0.000,"
		"\"prefill_ms\":0.000,\"decode_ms\":0.000,"
		"\"cached_tokens_disk\":0,\"preemptions\":0,"
		"\"swapped_tokens\":0,\"resume_computed_tokens\":0,\"cached_tokens_remote\":0}}\n"
		"{\"turn\":2,\"tokens\":[7,8],\"text\":\"r1 r2\",\"status\":"
		"\"ok\",\"usage\":{\"prompt_tokens\":8,\"cached_tokens\":0,"
		"\"cache_creation_tokens\":0,\"recomputed_tokens\":0,"
		"\"generated_tokens\":2,\"queue_ms\":0.000,\"ttft_ms\":0.000,"
		"\"prefill_ms\":0.000,\"decode_ms\":0.000,"
		"\"cached_tokens_disk\":0,\"preemptions\":0,"
		"\"swapped_tokens\":0,\"resume_computed_tokens\":0,\"cached_tokens_remote\":0}}\n");
	assert_int_equal(atomic_load(&f->chat_msgs), 4);
	assert_int_equal(atomic_load(&f->chat_context), 5);
	assert_int_equal(atomic_load(&f->chat_context_msgs), 3);
	/* system, user, assistant, user */
	assert_int_equal(atomic_load(&f->chat_roles), KVP_ROLE_SYSTEM | KVP_ROLE_USER << 2 |
							      KVP_ROLE_ASSISTANT << 4 |
							      KVP_ROLE_USER << 6);
	assert_int_equal(atomic_load(&f->chat_priority), KVP_PRIORITY_DEFAULT); /* none named */
	/* plain: the reply text, the usage on stderr; --priority as generate's */
	assert_int_equal(cli(f, out, err, sizeof(out), "chat", "--message", "a", "--priority", "-7",
			     NULL),
			 0);
	assert_int_equal(atomic_load(&f->chat_priority), -7);
	assert_string_equal(out, "r1 r2\n");
	/* --thinking reaches CHAT as its flags; not given, neither is set */
	assert_int_equal(atomic_load(&f->chat_flags) & (KVP_CHAT_THINKING | KVP_CHAT_NO_THINKING),
			 0);
	assert_int_equal(cli(f, out, err, sizeof(out), "chat", "--message", "a", "--thinking", "on",
			     NULL),
			 0);
	assert_int_equal(atomic_load(&f->chat_flags) & (KVP_CHAT_THINKING | KVP_CHAT_NO_THINKING),
			 KVP_CHAT_THINKING);
	assert_int_equal(cli(f, out, err, sizeof(out), "chat", "--message", "a", "--thinking",
			     "off", NULL),
			 0);
	assert_int_equal(atomic_load(&f->chat_flags) & (KVP_CHAT_THINKING | KVP_CHAT_NO_THINKING),
			 KVP_CHAT_NO_THINKING);
	assert_non_null(strstr(err, "generated_tokens 2"));
	assert_int_equal(cli(f, out, err, sizeof(out), "chat", "--message", "refuse", "--message",
			     "never sent", NULL),
			 1);
	assert_non_null(strstr(err, "refused on purpose"));
	assert_int_equal(atomic_load(&f->chat_msgs), 1);
}

/*
 * Read from @fd until @needle shows up after *@from (or 5 s pass); then *@from is just
 * past it.  Return: whether it did.
 */
static bool read_until(int fd, char *buf, size_t cap, size_t *len, size_t *from, const char *needle)
{
	for (int i = 0; i < 500; i++) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		const char *at;
		ssize_t n;

		buf[*len] = 0;
		at = strstr(buf + *from, needle);
		if (at) {
			*from = (size_t)(at - buf) + strlen(needle);
			return true;
		}
		if (poll(&p, 1, 10) <= 0)
			continue;
		n = read(fd, buf + *len, cap - 1 - *len);
		if (n <= 0)
			return false;
		*len += (size_t)n;
	}
	return false;
}

static void test_chat_interactive_ctrl_c(void **state)
{
	/*
	 * on a terminal: a prompt per turn; Ctrl-C while a reply streams cancels that reply
	 * (its usage says cancelled) and the conversation goes on with the partial reply in
	 * it; Ctrl-C at the prompt drops the line; Ctrl-D ends with status 0
	 */
	struct fixture *f = *state;
	const char *argv[] = { f->cli, "--socket", f->sock, "chat", NULL };
	char buf[16384];
	size_t len = 0, from = 0;
	int master, st;
	pid_t pid;

	master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	assert_true(master >= 0);
	assert_int_equal(grantpt(master), 0);
	assert_int_equal(unlockpt(master), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		int slave;

		setsid();
		slave = open(ptsname(master), O_RDWR);
		if (slave < 0)
			_exit(126);
		ioctl(slave, TIOCSCTTY, 0);
		dup2(slave, 0);
		dup2(slave, 1);
		dup2(slave, 2);
		execv(f->cli, (char *const *)argv);
		_exit(127);
	}
	assert_true(read_until(master, buf, sizeof(buf), &len, &from, "> "));
	assert_int_equal(write(master, "hold\n", 5), 5);
	for (int i = 0; i < 5000 && !atomic_load(&f->held); i++)
		usleep(1000);
	assert_true(atomic_load(&f->held));
	assert_true(read_until(master, buf, sizeof(buf), &len, &from, "partial"));
	assert_int_equal(write(master, "\x03", 1), 1); /* Ctrl-C: SIGINT to the CLI */
	assert_true(read_until(master, buf, sizeof(buf), &len, &from, "(cancelled)"));
	assert_true(read_until(master, buf, sizeof(buf), &len, &from, "> "));
	/* the conversation went on: the held reply is in it, as context too */
	assert_int_equal(write(master, "next\n", 5), 5);
	assert_true(read_until(master, buf, sizeof(buf), &len, &from, "r1 r2"));
	assert_int_equal(atomic_load(&f->chat_msgs), 3);
	assert_int_equal(atomic_load(&f->chat_context), 4); /* 3 prompt ids + "partial" */
	assert_int_equal(atomic_load(&f->chat_context_msgs), 2);
	assert_true(read_until(master, buf, sizeof(buf), &len, &from, "> "));
	/* Ctrl-C at the prompt: the line typed so far is dropped, a new prompt comes */
	assert_int_equal(write(master, "dropped\x03", 8), 8);
	assert_true(read_until(master, buf, sizeof(buf), &len, &from, "> "));
	assert_int_equal(write(master, "\x04", 1), 1); /* Ctrl-D */
	for (int i = 0; i < 5000 && waitpid(pid, &st, WNOHANG) == 0; i++) {
		char drain[256];

		if (read(master, drain, sizeof(drain)) < 0 && errno != EAGAIN)
			usleep(1000);
	}
	if (waitpid(pid, &st, WNOHANG) == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		fail_msg("kvpool chat did not end at Ctrl-D");
	}
	close(master);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	/* the dropped line never became a turn */
	assert_int_equal(atomic_load(&f->chat_msgs), 3);
}

static void test_ctrl_c_cancels_before_first_token(void **state)
{
	/* Ctrl-C while the daemon has not answered yet: CANCEL goes out, usage is shown */
	struct fixture *f = *state;
	const char *argv[] = { f->cli, "--socket", f->sock, "generate", "--tokens", "42", NULL };
	char err[4096];
	int pe[2], st = 0;
	pid_t pid;

	assert_int_equal(pipe2(pe, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		dup2(pe[1], 2);
		execv(f->cli, (char *const *)argv);
		_exit(127);
	}
	close(pe[1]);
	for (int i = 0; i < 5000 && !atomic_load(&f->held); i++)
		usleep(1000);
	assert_true(atomic_load(&f->held));
	usleep(20000); /* let the CLI block waiting for the first token */
	kill(pid, SIGINT);
	for (int i = 0; i < 5000 && waitpid(pid, &st, WNOHANG) == 0; i++)
		usleep(1000);
	if (waitpid(pid, &st, WNOHANG) == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		fail_msg("kvpool generate ignored Ctrl-C before its first token");
	}
	slurp(pe[0], err, sizeof(err));
	close(pe[0]);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 1);
	assert_non_null(strstr(err, "prompt_tokens 1"));
	assert_non_null(strstr(err, "(cancelled)"));
}

static void test_daemon_refusal_exits_1(void **state)
{
	/* a request the daemon refuses (id beyond n_vocab) fails with status 1 and why */
	struct fixture *f = *state;
	char out[4096], err[4096];

	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "299,300", NULL), 1);
	assert_non_null(strstr(err, "outside the vocabulary"));
	/* refused before any token: no "partial usage" line, as if it had been cut short */
	assert_null(strstr(err, "partial usage"));
}

static void test_messages_name_the_fix(void **state)
{
	/* one line per usage error, pointing at the command's help; limits from the daemon */
	struct fixture *f = *state;
	char out[4096], err[4096], bad[400];

	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokenz", "1", NULL), 2);
	assert_string_equal(err,
			    "kvpool: unknown option '--tokenz' (see kvpool generate --help)\n");
	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "-p", "x", "-n", NULL), 2);
	assert_string_equal(err,
			    "kvpool: option '-n' needs a value (see kvpool generate --help)\n");
	assert_int_equal(cli(f, out, err, sizeof(out), "status", "--jsn", NULL), 2);
	assert_string_equal(err, "kvpool: unknown option '--jsn' (see kvpool status --help)\n");
	assert_int_equal(cli(f, out, err, sizeof(out), "bench", "-x", NULL), 2);
	assert_string_equal(err, "kvpool: unknown option '-x' (see kvpool bench --help)\n");
	assert_int_equal(cli(f, out, err, sizeof(out), "--sockett", "x", "status", NULL), 2);
	assert_string_equal(err, "kvpool: unknown option '--sockett' (see kvpool --help)\n");
	/* -n beyond the daemon's limits.max_new_tokens (4096 here): the range is stated */
	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "-p", "x", "-n", "5000", NULL),
			 2);
	assert_non_null(strstr(err, "-n: 5000 is more than this daemon allows: 1 .. 4096"));
	/* a token id the vocabulary lacks: the id, where, and the vocabulary size */
	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "299,300", NULL), 1);
	assert_non_null(strstr(err, "token id 300 (prompt position 1) is outside the vocabulary: "
				    "n_vocab 300, ids 0..299"));
	assert_true(err[0] != '\n');
	assert_string_equal(out, "");
	/* nothing listening: said so, with the path and the flag */
	snprintf(bad, sizeof(bad), "%s/none.sock", f->dir);
	assert_int_equal(cli(f, out, err, sizeof(out), "--socket", bad, "generate", "-p", "x",
			     NULL),
			 1);
	assert_non_null(strstr(err, "kvpool: no kvpoold listening on "));
	assert_non_null(strstr(err, "none.sock (is the service running? see --socket)"));
	/* --socket alone: the status socket is looked for next to it */
	assert_int_equal(cli(f, out, err, sizeof(out), "--bare", "--socket", bad, "status", NULL),
			 1);
	assert_non_null(strstr(err, "/status.sock (is the service running?"));
	/* each socket given the other's path: which one answered, not "bad magic" */
	assert_int_equal(cli(f, out, err, sizeof(out), "--socket", f->status, "generate", "-p", "x",
			     NULL),
			 1);
	assert_non_null(strstr(err, "status socket"));
	assert_null(strstr(err, "magic"));
	assert_int_equal(cli(f, out, err, sizeof(out), "--status-socket", f->sock, "status", NULL),
			 1);
	assert_non_null(strstr(err, "is kvpoold's request socket, not its status socket"));
}

static void test_partial_usage_when_daemon_stops(void **state)
{
	/* the daemon stops mid-generation: the text so far, then the usage the CLI has */
	struct fixture *f = *state;
	char out[4096], err[4096];

	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "43", NULL), 1);
	assert_string_equal(out, "ab\n");
	assert_non_null(strstr(err, "kvpool: generate: generation stopped"));
	assert_non_null(strstr(err, "generated_tokens 2;"));
	assert_non_null(strstr(err, "(partial)"));
	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "44", NULL), 1);
	assert_string_equal(out, "ab\n");
	assert_non_null(strstr(err, "daemon stopping"));
	assert_non_null(strstr(err, "partial usage (counted here, no DONE arrived): "
				    "generated_tokens 2, ttft"));
	assert_true(err[0] != '\n');
}

static void test_text_escaped_on_terminal_only(void **state)
{
	/* on a terminal, control characters and stray bytes show as \xNN; piped, raw */
	struct fixture *f = *state;
	const char *argv[] = { f->cli, "--socket", f->sock, "generate", "--tokens", "27", NULL };
	char out[4096], err[4096], tty[4096];
	size_t n = 0;
	int master, st;
	pid_t pid;

	assert_int_equal(cli(f, out, err, sizeof(out), "generate", "--tokens", "27", NULL), 0);
	assert_string_equal(out, "\x1b[31mred\x07 \xc2\x9b \xff \xc3\xa9\tok\n");
	pid = forkpty(&master, NULL, NULL, NULL);
	assert_true(pid >= 0);
	if (!pid) {
		int devnull = open("/dev/null", O_WRONLY);

		dup2(devnull, 2); /* the usage line stays out of the captured screen */
		execv(f->cli, (char *const *)argv);
		_exit(127);
	}
	for (;;) {
		struct pollfd p = { .fd = master, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, 5000) <= 0)
			break;
		r = read(master, tty + n, sizeof(tty) - 1 - n);
		if (r <= 0)
			break; /* EIO once the child has gone */
		n += (size_t)r;
	}
	tty[n] = '\0';
	close(master);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* the terminal turns \n into \r\n; \t and é pass */
	assert_string_equal(tty, "\\x1b[31mred\\x07 \\xc2\\x9b \\xff \xc3\xa9\tok\r\n");
}

static void test_every_program_has_version(void **state)
{
	/* --version on every program prints the same version string (meson's) */
	static const char *const progs[] = { "ipc/kvpool", "svc/kvpoold", "compute/kvpool-run",
					     "compute/kvpool-mkmodel", "ipc/http/kvpool-http" };
	char want[64] = "", path[512], cmd[600], line[128];

	for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++) {
		FILE *p;
		const char *v;

		assert_int_equal(kvp_test_build_path(path, sizeof(path), progs[i]), 0);
		snprintf(cmd, sizeof(cmd), "'%s' --version", path);
		p = popen(cmd, "r");
		assert_non_null(p);
		assert_non_null(fgets(line, sizeof(line), p));
		assert_int_equal(pclose(p), 0);
		v = strchr(line, ' ');
		assert_non_null(v);
		assert_true(v[1] >= '0' && v[1] <= '9');
		if (!*want)
			snprintf(want, sizeof(want), "%s", v);
		assert_string_equal(v, want);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_generate_streams_and_prints_usage, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_generate_json, setup, teardown),
		cmocka_unit_test_setup_teardown(test_generate_speculative, setup, teardown),
		cmocka_unit_test_setup_teardown(test_generate_json_exact, setup, teardown),
		cmocka_unit_test_setup_teardown(test_status_formats, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bench_reports, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
		cmocka_unit_test_setup_teardown(test_generate_priority, setup, teardown),
		cmocka_unit_test_setup_teardown(test_daemon_refusal_exits_1, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ctrl_c_cancels_before_first_token, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_tokenize_detokenize, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chat_turns, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chat_interactive_ctrl_c, setup, teardown),
		cmocka_unit_test_setup_teardown(test_messages_name_the_fix, setup, teardown),
		cmocka_unit_test_setup_teardown(test_partial_usage_when_daemon_stops, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_text_escaped_on_terminal_only, setup,
						teardown),
		cmocka_unit_test(test_every_program_has_version),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
