/* SPDX-License-Identifier: MIT */
/*
 * kvpd.h - integration-test fixture: a real kvpoold (the built binary) on temporary
 * sockets and a temporary state directory, started and stopped like systemd does it
 * (READY=1 on $NOTIFY_SOCKET, SIGTERM), plus offline references from kvpool-run.
 */
#ifndef KVP_TESTS_KVPD_H
#define KVP_TESTS_KVPD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvpool/kvpool.h"
#include "tests/integration/jsonq.h"

struct kvpd {
	pid_t pid;	 /* 0 when not running */
	int exit_status; /* wait status once reaped */
	int notify_fd;
	unsigned long watchdog_usec; /* set $WATCHDOG_USEC for the daemon when non-zero */
	char cgroup[512];	     /* non-empty: the daemon joins this cgroup directory */
	uid_t run_uid;		     /* not 0: the daemon runs as this uid (and gid), owning @dir */
	char dir[256];
	char sock[320];
	char status[320];
	char log[320];
	char notify[320];
	char model[512]; /* written by kvpd_setup() */
};

/* Fresh temporary directory and paths.  Return 0 or -errno. */
int kvpd_init(struct kvpd *d);

/*
 * kvpd_model() - write a synthetic model (compute's mkmodel library) into @d's directory
 * @preset: "tiny", "demo", ...; @path: out
 */
int kvpd_model(struct kvpd *d, const char *preset, char *path, size_t cap);

/*
 * kvpd_model_mid() - write @d->model: the tiny preset widened to n_embd 512, 4 layers,
 * n_ff 1536 (f32), context @n_ctx: decodes in a few ms, prefills ~0.3 ms a token, so a
 * test can keep one request running while others queue behind it.
 */
int kvpd_model_mid(struct kvpd *d, uint32_t n_ctx);

/*
 * kvpd_vocab_model() - write @dir/@name.gguf on the vocabulary @dir/@vocab_fam/vocab.json
 * (tests/node/chat-models.mjs writes them): 1 layer, n_embd 16 (the vocabulary matters),
 * f16 weights (a row's logits the same bits in any batch, so seeded samples repeat),
 * with its family's metadata: "llama3" its RoPE base and Llama 3.1's frequency factors,
 * "qwen2" architecture qwen2 (Q/K/V biases, NEOX RoPE, base 1e6, tied output as the
 * small Qwen2.5 files), others the llama defaults.  The model is called @name; its chat
 * template is the vocabulary's, or @tmpl_file's (under tests/data/templates/) when given.
 * Return: 0, -errno (the reason on stderr).
 */
int kvpd_vocab_model(const char *dir, const char *name, const char *vocab_fam,
		     const char *tmpl_file);

/*
 * kvpd_vocab_model_untied() - kvpd_vocab_model() with an output matrix of its own, and
 * f32 weights (kvpd_chain_model() rewrites them): a tied one makes the tiny model repeat
 * its last token whatever a bias says (its logit is the embedding's norm squared), an
 * untied one moves between the tokens a bias lets in.
 */
int kvpd_vocab_model_untied(const char *dir, const char *name, const char *vocab_fam,
			    const char *tmpl_file);

/*
 * kvpd_chain_model() - kvpd_vocab_model_untied() made to write a fixed text: each pair
 * of @pairs (@n of them, at most 16: n_embd) names, by their pieces as the vocabulary
 * spells them ("\xc4\x8a" for Qwen's "\n"), a token and the one that follows it.  The
 * layers' outputs are zeroed (attn_output, ffn_down), so the last hidden state is the
 * current token's embedding: a pair's first token gets basis vector k, the others none,
 * and the output row of its second token 10 x that vector, a logit of 40 against the
 * random rows' ~0.1.  So sampled at any temperature up to 1 the model follows the
 * chain from the prompt's last token, whatever the prompt; a token no pair starts from
 * gives every logit 0.  A test fixture, not a model: -ENOENT when a piece is not in
 * the vocabulary.
 */
int kvpd_chain_model(const char *dir, const char *name, const char *vocab_fam,
		     const char *tmpl_file, const char *const (*pairs)[2], size_t n);

/*
 * kvpd_start() - exec kvpoold --foreground --socket --status-socket --state-dir, then the
 * NULL-terminated @args; wait (up to @timeout_s) for READY=1 on a private NOTIFY_SOCKET.
 * Return: 0 when ready; -ECHILD when it exited first (see exit_status); -ETIMEDOUT.
 */
int kvpd_start(struct kvpd *d, double timeout_s, const char *const *args);

/* Wait for the daemon to exit; 0 (then exit_status is set) or -ETIMEDOUT. */
int kvpd_wait(struct kvpd *d, double timeout_s);

/* SIGTERM and wait (SIGKILL after 30 s).  Return the wait status. */
int kvpd_stop(struct kvpd *d);

/* Stop if running and remove the directory. */
void kvpd_cleanup(struct kvpd *d);

/*
 * kvpd_setup() - what a test group's setup does: kvpd_init(), the @preset model written
 * to d->model, kvpoold started on it ("--model d->model", then @args) and ready within
 * 60 s.  On failure the daemon's log is printed and everything is cleaned up.
 * Return: 0, or -1 (what a cmocka setup returns).
 */
int kvpd_setup(struct kvpd *d, const char *preset, const char *const *args);

/*
 * kvpd_teardown() - a cmocka group teardown for a heap fixture whose first member is
 * its struct kvpd: stop the daemon, remove the directory, free the fixture.
 */
int kvpd_teardown(void **state);

/* The status socket's JSON, parsed (strictly); NULL when it fails to fetch or parse. */
struct jsonq *kvpd_status(struct kvpd *d);

/* One figure of the status report (a dotted path); @dflt when it cannot be had. */
double kvpd_status_num(struct kvpd *d, const char *path, double dflt);

/* What kvpd_generate() collected: the first KVPD_GEN_MAX ids, the usage, the result. */
#define KVPD_GEN_MAX 64
struct kvpd_gen {
	int32_t ids[KVPD_GEN_MAX];
	uint32_t n;
	struct kvp_usage u;
	int rc;
};

/*
 * kvpd_generate() - one greedy generation of @max_new tokens after the @n ids of
 * @prompt on a connection of its own to @sock (with @no_cache: past the prefix cache)
 * @o: out; zeroed first, so ids past o->n compare equal between runs
 * Return: 0 or what connect/generate returned (also in o->rc).
 */
int kvpd_generate(const char *sock, const int32_t *prompt, uint32_t n, uint32_t max_new,
		  bool no_cache, struct kvpd_gen *o);

/* Whether the daemon's stderr log contains @needle. */
bool kvpd_log_has(struct kvpd *d, const char *needle);

/* Print the daemon's log to stderr (after a failure). */
void kvpd_dump_log(struct kvpd *d);

/*
 * kvpd_offline() - greedy tokens from `kvpool-run -m MODEL --tokens ... -n N --json
 * --kv-dtype f16` (the daemon's default K/V type)
 * @out: room for @n_gen ids; *@n_out: how many it generated
 * Return: 0 or -errno.
 */
int kvpd_offline(const char *model, const int32_t *prompt, uint32_t n_prompt, uint32_t n_gen,
		 bool ignore_eos, int32_t *out, uint32_t *n_out);

/* kvpd_offline() with the K/V stored as @kv_dtype (kvpool-run --kv-dtype's names). */
int kvpd_offline_kv(const char *model, const char *kv_dtype, const int32_t *prompt,
		    uint32_t n_prompt, uint32_t n_gen, bool ignore_eos, int32_t *out,
		    uint32_t *n_out);

/*
 * kvpd_memcg_make() - a memory cgroup for a daemon to join (struct kvpd.cgroup): cgroup
 * v1 under this process's own memory cgroup (so it stays within whatever limits this
 * process), else v2 at the root of the unified hierarchy, limited to @limit bytes
 * (UINT64_MAX: none).  Remove it with rmdir() once the daemon is gone.
 * @dir: out; its directory
 * Return: 0, or -1 when no usable memory cgroup can be made here (skip the test).
 */
int kvpd_memcg_make(char *dir, size_t cap, uint64_t limit);

/* Set the limit of memory cgroup @dir (UINT64_MAX: none).  0 or -errno. */
int kvpd_memcg_limit(const char *dir, uint64_t limit);

/* Bytes charged to memory cgroup @dir now (page cache included); 0 when unknown. */
uint64_t kvpd_memcg_usage(const char *dir);

/* Processes the OOM killer ended in memory cgroup @dir; UINT64_MAX when unknown. */
uint64_t kvpd_memcg_oom_kills(const char *dir);

#endif /* KVP_TESTS_KVPD_H */
