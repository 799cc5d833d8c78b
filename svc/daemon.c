/* SPDX-License-Identifier: MIT */
/*
 * daemon.c - kvpoold's owner object: builds everything in order, serves, drains, and
 * tears down in reverse (see daemon.h).  The parts each have their file:
 *
 *	svc/domain.c    trust domains and what each owns: pool, prefix index, client fd
 *	svc/demo.c      the built-in demo model, written once into state_dir
 *	svc/engine/engine.c     the engine thread
 *	svc/requests.c  the loop thread's side of requests (ipc/ callbacks, engine events)
 *	svc/conns.c     the connections that said HELLO
 *	svc/stats.c     the status report's figures
 *	svc/watchdog.c  systemd's watchdog pings
 *
 * and this file wires them.  Construction order (kvp_daemon_new): notify channel,
 * request state and status scratch, model + tokenizer (the demo model generated first
 * when none is configured), NUMA topology, each domain's pool (pre-faulted, sealed),
 * index and read-only fd, engine eventfd, remote tier (svc/remotecfg.c: its I/O thread, the
 * store's first answer logged), engine (no thread yet), server (sockets bound
 * under the server's umask, before any other thread of ours exists) with the engine
 * eventfd in its ring, watchdog timer, engine thread.  Failure unwinds the steps taken,
 * in reverse; kvp_daemon_free() runs the whole list backwards.
 *
 * Signals: SIGTERM and SIGINT call kvp_server_stop() through the one static pointer a
 * signal handler needs (the only file-scope mutable state besides the log level).  The
 * handler is installed before the first startup step, so a stop requested while
 * starting (generating the demo model, pre-faulting the pool) takes effect when that
 * step ends: kvp_daemon_new() then returns -ECANCELED, having left no half-made file
 * and bound no socket that outlives it, and kvpoold exits 0.
 *
 * Thread: the main thread (= the loop thread while serving).
 */
#include "svc/daemon.h"

#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compute/kernels/kernels.h"
#include "compute/linear.h"
#include "compute/model.h"
#include "compute/gguf.h"
#include "compute/text/chat.h"
#include "compute/text/tokenizer.h"
#include "ipc/server.h"
#include "shm/numa.h"
#include "shm/pool.h"
#include "shm/remote/codec.h"
#include "shm/remote/remote.h"
#include "svc/demo.h"
#include "svc/domain.h"
#include "util/log.h"
#include "svc/memguard.h"
#include "util/notify.h"
#include "svc/preflight.h"
#include "svc/reclaim.h"
#include "svc/remotecfg.h"
#include "svc/requests.h"
#include "svc/engine/engine.h"
#include "svc/stats.h"
#include "svc/watchdog.h"
#include "util/time.h"

#ifndef KVP_VERSION
#define KVP_VERSION "unknown"
#endif

struct kvp_daemon {
	struct kvp_config cfg;
	struct kvp_notify notify;
	struct kvp_domains domains;
	char model_path[PATH_MAX];
	char model_name[64];
	char model_fp[2 * KVP_MODEL_FP_BYTES + 1];
	struct kvp_model *model;
	struct kvp_tokenizer *tok;
	struct kvp_chat_template tmpl; /* valid when have_tmpl, else tmpl_err says why */
	bool have_tmpl;
	char tmpl_err[512];
	struct kvp_numa *numa;
	struct kvp_welcome base;   /* the model's part of every domain's WELCOME */
	struct kvp_remote *remote; /* NULL without remote.url */
	uint32_t n_remote_domains; /* domains the remote tier knows: those made at start */
	char numerics[16];	   /* the engine's kernel table: the remote tier's class */
	char remote_host[KVP_REMOTE_HOST_ID_MAX]; /* chain summary keys' HOST */
	struct kvp_server *srv;
	int wake_fd; /* the engine writes it after queueing events */
	struct kvp_watchdog watchdog;
	struct kvp_reclaim reclaim; /* idle per-uid domains (svc/reclaim.h) */
	uint64_t model_bytes;	    /* the model's file: the memory guard's count of it */
	struct kvp_requests req;    /* loop thread */
	struct kvp_stats stats;	    /* loop thread */
	uint64_t t_start_ns;
	const char *state; /* "starting", "serving", "draining" */
};

static struct kvp_server *volatile sig_server;
static volatile sig_atomic_t sig_count;

static void on_signal(int sig)
{
	struct kvp_server *srv = sig_server;

	(void)sig;
	sig_count++;
	if (srv)
		kvp_server_stop(srv);
}

/* ---- construction ---- */

/*
 * The chat template CHAT requests use when they name none: daemon.chat_template, else
 * the family the model's tokenizer.chat_template is recognised as.  A model without a
 * known one still serves everything else; its CHATs without a template name are
 * refused with the reason kept here.  Return: 0, or -ENOTSUP for a bad configured name.
 */
static int load_chat_template(struct kvp_daemon *d)
{
	struct kvp_gguf_str src;
	int r;

	if (*d->cfg.chat_template) {
		r = kvp_chat_template_named(&d->tmpl, d->cfg.chat_template, d->tmpl_err,
					    sizeof(d->tmpl_err));
		if (r < 0) {
			kvp_log(LOG_ERR, "daemon.chat_template: %s", d->tmpl_err);
			return r;
		}
		d->have_tmpl = true;
		kvp_log(LOG_INFO, "chat: template %s (daemon.chat_template)", d->cfg.chat_template);
		return 0;
	}
	if (kvp_gguf_get_str(kvp_model_gguf(d->model), "tokenizer.chat_template", &src) < 0) {
		snprintf(d->tmpl_err, sizeof(d->tmpl_err),
			 "chat: the model has no chat template (tokenizer.chat_template); name one "
			 "(known: %s)",
			 kvp_chat_names());
		kvp_log(LOG_NOTICE, "%s", d->tmpl_err);
		return 0;
	}
	r = kvp_chat_template_detect(&d->tmpl, src.p, (size_t)src.len, d->tmpl_err,
				     sizeof(d->tmpl_err));
	if (r < 0) {
		kvp_log(LOG_WARNING, "%s", d->tmpl_err);
		return 0;
	}
	d->have_tmpl = true;
	kvp_log(LOG_INFO, "chat: the model's template is %s", kvp_chat_family_name(d->tmpl.family));
	return 0;
}

static int load_model(struct kvp_daemon *d)
{
	const struct kvp_model_opts mo = { .weights = d->cfg.weights };
	const struct kvp_model_hparams *hp;
	const struct kvp_model_info *mi;
	char err[256] = "";
	bool demo = !*d->cfg.model_path;
	uint64_t t0;
	double load_s;
	int r;

	if (demo) {
		if (snprintf(d->model_path, sizeof(d->model_path), "%s/demo.gguf",
			     d->cfg.state_dir) >= (int)sizeof(d->model_path))
			return -ENAMETOOLONG;
		if (access(d->model_path, R_OK) < 0) {
			r = kvp_demo_write(d->cfg.state_dir, d->model_path, &d->notify);
			if (r < 0)
				return r;
		}
	} else {
		snprintf(d->model_path, sizeof(d->model_path), "%s", d->cfg.model_path);
	}
	kvp_notify_status(&d->notify, "loading %s (weights %s)", d->model_path,
			  d->cfg.weights == KVP_MODEL_WEIGHTS_COPY ? "copied" : "mapped");
	t0 = kvp_now_ns();
	r = kvp_model_open_opts(&d->model, d->model_path, &mo, err, sizeof(err));
	if (r == -EBADMSG && demo) {
		/* a demo model cut short by a crash while writing: make it again */
		kvp_log(LOG_WARNING, "model: %s: %s; regenerating the demo model", d->model_path,
			err);
		r = kvp_demo_write(d->cfg.state_dir, d->model_path, &d->notify);
		if (r < 0)
			return r;
		t0 = kvp_now_ns();
		r = kvp_model_open_opts(&d->model, d->model_path, &mo, err, sizeof(err));
	}
	if (r < 0) {
		kvp_log(LOG_ERR, "model: open %s: %s", d->model_path, *err ? err : strerror(-r));
		return r;
	}
	load_s = (double)(kvp_now_ns() - t0) / 1e9;
	r = kvp_tokenizer_new(&d->tok, d->model, err, sizeof(err));
	if (r < 0) {
		kvp_log(LOG_ERR, "model: tokenizer of %s: %s", d->model_path,
			*err ? err : strerror(-r));
		goto err_model;
	}
	r = load_chat_template(d);
	if (r < 0)
		goto err_tok;
	hp = kvp_model_hparams(d->model);
	mi = kvp_model_info(d->model);
	snprintf(d->model_name, sizeof(d->model_name), "%s",
		 *kvp_model_name(d->model) ? kvp_model_name(d->model) : (demo ? "demo" : "?"));
	kvp_log(LOG_INFO,
		"model: %s: %s, %llu parameters, %u layers, n_embd %u, %u heads / %u kv, "
		"vocab %u, weights %s",
		d->model_path, d->model_name, (unsigned long long)mi->n_params, hp->n_layers,
		hp->n_embd, hp->n_heads, hp->n_kv_heads, hp->n_vocab, mi->file_type);
	{
		const struct kvp_kernels *k;
		char types[512]; /* every type a file may mix */

		r = kvp_kernels_best(&k);
		if (r < 0) {
			kvp_log(LOG_ERR, "model: KVP_ISA=%s: %s", getenv("KVP_ISA"),
				r == -EINVAL ?
					"no such kernel set (scalar, avx2, avxvnni, avx512)" :
					"this CPU cannot run it");
			goto err_tok;
		}
		if (kvp_lin_f32_gemm() < 0) {
			kvp_log(LOG_ERR, "model: KVP_F32_GEMM=%s: not auto, kvpool or openblas",
				getenv("KVP_F32_GEMM"));
			r = -EINVAL;
			goto err_tok;
		}
		snprintf(d->numerics, sizeof(d->numerics), "%s", k->name);
		kvp_model_info_types(mi, types, sizeof(types));
		kvp_log(LOG_INFO,
			"model: weights in their file types: %s; %.1f MiB read per step; "
			"kernels %s",
			types, (double)mi->weight_bytes / (1 << 20), k->name);
	}
	/* the load time is what daemon.weights = copy costs: say what it bought */
	if (mi->weights_copied)
		kvp_log(LOG_INFO,
			"model: loaded in %.3f s, weights copied into huge-page "
			"memory: %.1f MiB copied, arena %.1f MiB (daemon.weights = copy)",
			load_s, (double)mi->copied_bytes / (1 << 20),
			(double)mi->arena_bytes / (1 << 20));
	else
		kvp_log(LOG_INFO,
			"model: loaded in %.3f s, weights used in place from the file "
			"mapping, arena %.1f MiB (daemon.weights = map)",
			load_s, (double)mi->arena_bytes / (1 << 20));
	return 0;

err_tok:
	kvp_tokenizer_free(d->tok);
	d->tok = NULL;
err_model:
	kvp_model_close(d->model);
	d->model = NULL;
	return r;
}

/* The demo model's file, for the memory guard before it is first written. */
#define DEMO_MODEL_BYTES (420ull << 20)

/*
 * What can fail before the model loads and the pool is faulted in fails here, in a
 * fraction of a second: socket paths, required huge pages, and whether pool and model
 * fit the memory the machine and the cgroup give us (svc/preflight.h, svc/memguard.h).
 */
static int startup_checks(struct kvp_daemon *d)
{
	struct kvp_memguard_facts mf;
	const char *model = *d->cfg.model_path ? d->cfg.model_path : NULL;
	uint64_t pool = d->cfg.pool_bytes, model_bytes = DEMO_MODEL_BYTES;
	const char *note = "the demo model";
	char path[PATH_MAX + 16];
	char err[1024];
	struct stat st;
	long hp;
	int r;

	r = kvp_preflight(&d->cfg, err, sizeof(err));
	if (r < 0) {
		kvp_log(LOG_ERR, "%s", err);
		return r;
	}
	if (!d->cfg.memory_guard) {
		kvp_log(LOG_NOTICE, "memory: not checked (daemon.memory_guard = no)");
		return 0;
	}
	if (!model) {
		snprintf(path, sizeof(path), "%s/demo.gguf", d->cfg.state_dir);
		model = path;
		note = "the demo model, its file";
	} else {
		note = "its file";
	}
	if (stat(model, &st) == 0)
		model_bytes = (uint64_t)st.st_size;
	else if (*d->cfg.model_path)
		model_bytes = 0; /* opening it will say what is wrong */
	else
		note = "the demo model, not yet written";
	/* a pool on reserved 2 MiB pages is counted by neither MemAvailable nor a cgroup */
	hp = kvp_hugetlb_free_pages();
	if (d->cfg.huge_pages != KVP_HUGE_OFF && hp > 0 &&
	    (uint64_t)hp * KVP_HUGE_PAGE_BYTES >= pool + KVP_HUGE_PAGE_BYTES)
		pool = 0;
	kvp_memguard_read(&mf);
	if (d->cfg.memory_limit_bytes)
		mf.budget = d->cfg.memory_limit_bytes;
	r = kvp_memguard_check(&mf, pool, model_bytes, note, err, sizeof(err));
	if (r < 0) {
		kvp_log(LOG_ERR, "%s", err);
		return r;
	}
	if (mf.cg_limit == UINT64_MAX)
		snprintf(err, sizeof(err), "none");
	else
		snprintf(err, sizeof(err), "%.1f MiB", (double)mf.cg_limit / (1 << 20));
	kvp_log(LOG_INFO,
		"memory: pool %.1f MiB%s + model %.1f MiB fit (MemAvailable %.1f MiB, cgroup "
		"limit %s)",
		(double)d->cfg.pool_bytes / (1 << 20), pool ? "" : " on huge pages",
		(double)model_bytes / (1 << 20), (double)mf.mem_available / (1 << 20), err);
	return 0;
}

/* The longest sequence a request may ask for: limits.context_tokens, else the model's. */
static uint32_t model_context(const struct kvp_daemon *d)
{
	return d->cfg.context_tokens ? d->cfg.context_tokens :
				       kvp_model_hparams(d->model)->n_ctx_train;
}

/* The model's part of every domain's WELCOME, then each domain's pool layout. */
static void set_welcomes(struct kvp_daemon *d)
{
	struct kvp_welcome base = { 0 };

	int32_t bos = kvp_tokenizer_bos(d->tok);
	int32_t eos = kvp_tokenizer_eos(d->tok);

	base.n_vocab = kvp_model_hparams(d->model)->n_vocab;
	base.n_ctx = d->cfg.max_prompt_tokens + d->cfg.max_new_tokens;
	if (base.n_ctx > model_context(d))
		base.n_ctx = model_context(d);
	base.bos_id = bos >= 0 ? (uint32_t)bos : UINT32_MAX;
	base.eos_id = eos >= 0 ? (uint32_t)eos : UINT32_MAX;
	base.max_new_tokens = d->cfg.max_new_tokens;
	base.max_prompt_tokens = d->cfg.max_prompt_tokens;
	memcpy(base.fingerprint, kvp_model_fingerprint(d->model), sizeof(base.fingerprint));
	snprintf(base.model, sizeof(base.model), "%s", d->model_name);
	for (unsigned int i = 0; i < KVP_MODEL_FP_BYTES; i++)
		snprintf(d->model_fp + 2 * i, 3, "%02x", kvp_model_fingerprint(d->model)[i]);
	d->base = base;
	for (uint32_t i = 0; i < d->domains.n_domains; i++)
		kvp_domain_set_welcome(&d->domains.dom[i], &base);
}

static int make_engine(struct kvp_daemon *d, struct kvp_domain *dom)
{
	const struct kvp_model_hparams *hp = kvp_model_hparams(d->model);
	struct kvp_sched_config sc = { 0 };
	uint32_t idx = (uint32_t)(dom - d->domains.dom);
	float one = 1.0f;
	long ncpu;
	int r;

	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	sc.pool = dom->pool;
	sc.index = dom->index;
	sc.model = d->model;
	sc.tok = d->tok;
	memcpy(sc.base_keys.model_fp, kvp_model_fingerprint(d->model), KVP_MODEL_FP_BYTES);
	sc.base_keys.kv_dtype = d->cfg.kv_dtype;
	memcpy(&sc.base_keys.rope_theta_bits, &hp->rope_base, sizeof(uint32_t));
	memcpy(&sc.base_keys.rope_scale_bits, &one, sizeof(uint32_t));
	sc.n_threads = d->cfg.threads ? d->cfg.threads : (uint32_t)(ncpu > 0 ? ncpu : 1);
	sc.max_running = d->cfg.max_running;
	sc.max_queued = d->cfg.max_queued;
	sc.prefill_chunk = d->cfg.prefill_chunk_tokens;
	sc.event_capacity = 8192;
	sc.ignore_eos = d->cfg.ignore_eos;
	sc.speculative = d->cfg.speculative ? KVP_SCHED_SPEC_AUTO : KVP_SCHED_SPEC_OFF;
	sc.draft_max = d->cfg.speculative_draft_max;
	sc.draft_ngram = d->cfg.speculative_ngram;
	sc.test_eog_after = d->cfg.test_eog_after;
	if (sc.test_eog_after)
		kvp_log(LOG_WARNING,
			"engine: scheduler.test_eog_after = %u: every reply ends "
			"after %u tokens (a test hook)",
			sc.test_eog_after, sc.test_eog_after);
	sc.wake_fd = d->wake_fd;
	sc.policy = d->cfg.policy;
	sc.step_target_ns = (uint64_t)d->cfg.step_target_ms * 1000000;
	sc.prefill_step_ns = (uint64_t)d->cfg.prefill_step_ms * 1000000;
	sc.itl_budget_pct = d->cfg.itl_budget_pct;
	sc.cost_call_ns = (uint64_t)d->cfg.cost_call_us * 1000;
	sc.cost_token_ns = (uint64_t)d->cfg.cost_token_us * 1000;
	sc.aging_ms = d->cfg.prefill_aging_ms;
	sc.headroom_blocks = d->cfg.admit_headroom_blocks;
	sc.tier = dom->tier;
	sc.tier_high_pct = d->cfg.tier_high_pct;
	sc.tier_low_pct = d->cfg.tier_low_pct;
	sc.cache = dom->cache; /* [cache] with the domain's overrides */
	/*
	 * remote domain ids are domain indexes; the tier learns the domains that exist at
	 * start (groups, single, and the daemon's own uid): a uid's domain made later has
	 * the local tiers only
	 */
	if (idx < d->n_remote_domains) {
		sc.remote = d->remote;
		sc.remote_domain = idx;
		sc.remote_host = d->remote_host;
		sc.remote_summary_s = d->cfg.remote.summary_period_s;
	} else if (d->remote) {
		kvp_log(LOG_NOTICE, "remote: domain %s opened after start: memory and disk only",
			dom->name);
	}
	r = kvp_sched_new(&dom->sched, &sc);
	if (r < 0)
		kvp_log(LOG_ERR, "engine: domain %s: create (%u threads, batch %u, chunk %u): %s",
			dom->name, sc.n_threads, sc.max_running, sc.prefill_chunk, strerror(-r));
	return r;
}

/* ---- the engines, one per trust domain (svc/domain.h) ---- */

static int make_engines(struct kvp_daemon *d)
{
	for (uint32_t i = 0; i < d->domains.n_domains; i++) {
		int r = make_engine(d, &d->domains.dom[i]);

		if (r < 0)
			return r;
	}
	return 0;
}

static int start_engines(struct kvp_daemon *d)
{
	for (uint32_t i = 0; i < d->domains.n_domains; i++) {
		int r = kvp_sched_start(d->domains.dom[i].sched);

		if (r < 0)
			return r;
	}
	return 0;
}

/* Free every domain's engine (its blocks go back to its pool); NULL ones are fine. */
static void free_engines(struct kvp_daemon *d)
{
	for (uint32_t i = 0; i < d->domains.n_domains; i++) {
		kvp_sched_free(d->domains.dom[i].sched);
		d->domains.dom[i].sched = NULL;
	}
}

static uint64_t outstanding(const struct kvp_daemon *d)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < d->domains.n_domains; i++)
		n += kvp_sched_outstanding(d->domains.dom[i].sched);
	return n + kvp_requests_pending(&d->req); /* and those the text worker has */
}

/* Whether a pool of @bytes would sit on reserved 2 MiB pages (counted by no guard). */
static bool on_hugetlb(const struct kvp_daemon *d, uint64_t bytes)
{
	long hp = kvp_hugetlb_free_pages();

	return d->cfg.huge_pages != KVP_HUGE_OFF && hp > 0 &&
	       (uint64_t)hp * KVP_HUGE_PAGE_BYTES >= bytes + KVP_HUGE_PAGE_BYTES;
}

/*
 * The memory guard for a new per-uid domain (svc/memguard.h): its pool against what is
 * left, and with what the daemon holds (the model, the open domains' pools outside
 * hugetlb) against daemon.memory_limit and the cgroup's limit.  Return: 0, or -ENOMEM
 * with @why naming the figures (logged by the caller).
 */
static int guard_domain(const struct kvp_daemon *d, const struct kvp_domain *dom, char *why,
			size_t cap)
{
	struct kvp_memguard_facts mf;
	uint64_t pool = on_hugetlb(d, dom->pool_bytes) ? 0 : dom->pool_bytes;
	uint64_t held = d->model_bytes;
	uint32_t n_open = 0;

	if (!d->cfg.memory_guard)
		return 0;
	for (uint32_t i = 0; i < d->domains.n_domains; i++) {
		const struct kvp_segment *seg;

		if (!d->domains.dom[i].pool)
			continue;
		seg = kvp_pool_segment(d->domains.dom[i].pool);
		n_open++;
		if (kvp_segment_page_kind(seg) != KVP_PAGE_HUGETLB_2M)
			held += seg->bytes;
	}
	kvp_memguard_read(&mf);
	if (d->cfg.memory_limit_bytes)
		mf.budget = d->cfg.memory_limit_bytes;
	return kvp_memguard_check_domain(&mf, pool, held, n_open, why, cap);
}

/*
 * domains.mode = per-uid: a uid's first HELLO opens its domain (loop thread): its pool is
 * pre-faulted and its engine calibrated here, so that HELLO waits for both.
 */
static int open_uid_domain(void *arg, struct kvp_domain *dom, char *why, size_t cap)
{
	struct kvp_daemon *d = arg;
	int r;

	r = guard_domain(d, dom, why, cap);
	if (r < 0)
		return r;
	r = kvp_domain_open(dom, d->model, &d->cfg, d->numa, &d->notify);
	if (r < 0)
		return r;
	kvp_domain_set_welcome(dom, &d->base);
	r = make_engine(d, dom);
	if (r < 0)
		goto err_close;
	r = kvp_sched_start(dom->sched);
	if (r < 0)
		goto err_sched;
	return 0;

err_sched:
	kvp_sched_free(dom->sched);
	dom->sched = NULL;
err_close:
	kvp_domain_close(dom);
	return r;
}

static gid_t group_gid(const char *name)
{
	struct group *gr;

	if (!*name)
		return (gid_t)-1;
	gr = getgrnam(name); /* main thread, before the engine thread starts */
	return gr ? gr->gr_gid : (gid_t)-1;
}

/* The status socket's group, or (gid_t)-1: the daemon's user's alone (mode 0600). */
static gid_t status_gid(const struct kvp_config *cfg)
{
	gid_t gid;
	int r = kvp_config_status_gid(cfg, &gid);

	if (r == 1)
		return gid;
	if (r < 0 && *cfg->status_path)
		kvp_log(LOG_NOTICE,
			"server: status socket %s: the daemon's user's only (mode 0600): group "
			"%s %s",
			cfg->status_path, cfg->status_group,
			r == -ENOENT ? "does not exist" : "is not one of the daemon's");
	return (gid_t)-1;
}

/*
 * limits.max_text_bytes = 0: 4 x max_prompt_tokens x the vocabulary's longest token.
 * A text longer than max_prompt_tokens x that tokenizes to more ids than
 * max_prompt_tokens whatever it says (a token covers at most its own bytes); four times
 * it leaves room for what a chat template drops (trimmed whitespace).  At most the
 * frame's size: beyond it the cap changes nothing.
 */
static uint32_t text_bytes_cap(const struct kvp_daemon *d)
{
	uint64_t longest = 1, cap;

	if (d->cfg.max_text_bytes)
		return d->cfg.max_text_bytes;
	for (uint32_t i = 0; i < kvp_tokenizer_n_vocab(d->tok); i++) {
		size_t len = 0;

		if (kvp_tokenizer_piece(d->tok, (int32_t)i, &len) && len > longest)
			longest = len;
	}
	cap = 4 * (uint64_t)d->cfg.max_prompt_tokens * longest;
	return cap < d->cfg.max_frame_bytes ? (uint32_t)cap : d->cfg.max_frame_bytes;
}

static int make_server(struct kvp_daemon *d)
{
	struct kvp_server_config sc = {
		.socket_path = d->cfg.socket_path,
		.status_path = *d->cfg.status_path ? d->cfg.status_path : NULL,
		.socket_gid = group_gid(d->cfg.socket_group),
		.status_gid = status_gid(&d->cfg),
		.max_frame_bytes = d->cfg.max_frame_bytes,
		.max_conns = d->cfg.max_conns,
		.max_reqs_per_conn = d->cfg.max_reqs_per_conn,
		.max_prompt_tokens = d->cfg.max_prompt_tokens,
		.max_new_tokens = d->cfg.max_new_tokens,
		.outq_bytes = d->cfg.outq_bytes > UINT32_MAX ? UINT32_MAX :
							       (uint32_t)d->cfg.outq_bytes,
		.max_conns_per_uid = kvp_config_conns_per_uid(&d->cfg),
		.idle_timeout_ms = d->cfg.idle_timeout_ms,
		.max_text_bytes = text_bytes_cap(d),
		.max_refusals = d->cfg.max_refusals ? d->cfg.max_refusals : UINT32_MAX,
	};
	struct kvp_server_ops ops;
	int r;

	d->req.domains = &d->domains;
	d->req.tok = d->tok;
	d->req.tmpl = d->have_tmpl ? &d->tmpl : NULL;
	d->req.tmpl_err = d->tmpl_err;
	d->req.max_prompt_tokens = d->cfg.max_prompt_tokens;
	d->req.n_ctx = model_context(d);
	d->req.max_reqs_per_conn = d->cfg.max_reqs_per_conn;
	d->req.lease_max_per_conn = d->cfg.lease_max_per_conn;
	d->req.lease_max_ms = d->cfg.lease_max_ms;
	d->req.cache = &d->cfg.cache;
	d->req.report = kvp_stats_report;
	d->req.report_arg = &d->stats;
	d->stats.model = d->model_name;
	d->stats.model_fp = d->model_fp;
	d->req.log.enabled = d->cfg.request_log;
	d->stats.state = &d->state;
	d->stats.t_start_ns = d->t_start_ns;
	d->stats.req = &d->req;
	d->stats.domains = &d->domains;
	d->stats.cache = &d->cfg.cache;
	kvp_requests_ops(&d->req, &ops);
	r = kvp_server_new(&d->srv, &sc, &ops);
	if (r < 0) {
		kvp_log(LOG_ERR, "server: listen on %s%s%s: %s", d->cfg.socket_path,
			sc.status_path ? " and " : "", sc.status_path ? sc.status_path : "",
			strerror(-r));
		return r;
	}
	d->req.srv = d->srv;
	kvp_log(LOG_INFO, "server: text of one request at most %u bytes (limits.max_text_bytes%s)",
		sc.max_text_bytes, d->cfg.max_text_bytes ? "" : " = 0: from the vocabulary");
	r = kvp_server_add_wakeup(d->srv, d->wake_fd, kvp_requests_on_events, &d->req);
	if (r < 0) {
		kvp_log(LOG_ERR, "server: register the engine eventfd: %s", strerror(-r));
		goto err_server;
	}
	r = kvp_requests_start_text(&d->req);
	if (r < 0) {
		kvp_log(LOG_ERR, "server: start the text worker: %s", strerror(-r));
		goto err_server;
	}
	r = kvp_server_add_wakeup(d->srv, d->req.text_efd, kvp_requests_on_text, &d->req);
	if (r < 0) {
		kvp_log(LOG_ERR, "server: register the text worker's eventfd: %s", strerror(-r));
		goto err_text;
	}
	return 0;

err_text:
	kvp_requests_stop_text(&d->req);

err_server:
	kvp_server_free(d->srv);
	d->srv = NULL;
	d->req.srv = NULL;
	return r;
}

/*
 * SA_RESTART: a signal during a startup step (a write of the demo model, a page fault
 * loop) must not turn into a spurious EINTR failure; the loop is woken by the eventfd
 * that kvp_server_stop() writes, not by EINTR.
 */
static void catch_stop_signals(void)
{
	struct sigaction sa = { .sa_handler = on_signal, .sa_flags = SA_RESTART };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* A stop was requested while starting: say so once the step in progress has ended. */
static bool stop_requested(const char *after)
{
	if (!sig_count)
		return false;
	kvp_log(LOG_NOTICE, "daemon: stop requested during startup; stopping after %s", after);
	return true;
}

int kvp_daemon_new(struct kvp_daemon **out, const struct kvp_config *cfg)
{
	struct kvp_domain *dom;
	struct kvp_daemon *d;
	int r;

	catch_stop_signals();

	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->cfg = *cfg;
	d->wake_fd = -1;
	d->notify = (struct kvp_notify)KVP_NOTIFY_INIT;
	d->watchdog = (struct kvp_watchdog)KVP_WATCHDOG_INIT;
	d->reclaim = (struct kvp_reclaim)KVP_RECLAIM_INIT;
	d->t_start_ns = kvp_now_ns();
	d->state = "starting";
	r = kvp_domains_init(&d->domains, cfg, geteuid());
	if (r < 0) {
		free(d);
		return r;
	}
	d->domains.open = open_uid_domain;
	d->domains.open_arg = d;
	dom = &d->domains.dom[KVP_DOMAIN_DEFAULT];

	r = kvp_notify_open(&d->notify);
	if (r < 0)
		kvp_log(LOG_WARNING, "notify: $NOTIFY_SOCKET unusable: %s; not notifying",
			strerror(-r));
	kvp_log(LOG_INFO, "daemon: kvpoold %s starting%s%s", KVP_VERSION,
		*cfg->config_path ? " with " : "", cfg->config_path);
	r = kvp_requests_init(&d->req);
	if (r < 0)
		goto err_notify;
	r = kvp_stats_init(&d->stats);
	if (r < 0)
		goto err_requests;
	r = kvp_stats_set_operators(&d->stats, d->cfg.status_operators);
	if (r == -ENOENT && !strcmp(d->cfg.status_operators, KVP_STATUS_GROUP_DEFAULT)) {
		r = 0; /* the default group is optional: root and the daemon's user only */
	} else if (r < 0) {
		kvp_log(LOG_ERR, "server.status_operators: group %s: %s", d->cfg.status_operators,
			r == -E2BIG ? "more members than the status socket lists (64)" :
				      "does not exist");
		goto err_stats;
	}
	r = startup_checks(d);
	if (r < 0)
		goto err_stats;
	r = load_model(d);
	if (r < 0)
		goto err_stats;
	{
		struct stat st;

		d->model_bytes = stat(d->model_path, &st) == 0 ? (uint64_t)st.st_size : 0;
	}
	r = -ECANCELED;
	if (stop_requested("loading the model"))
		goto err_model;
	r = kvp_numa_open(&d->numa, NULL);
	if (r < 0) {
		kvp_log(LOG_ERR, "pool: read NUMA topology: %s", strerror(-r));
		goto err_model;
	}
	for (uint32_t i = 0; i < d->domains.n_domains; i++) {
		r = kvp_domain_open(&d->domains.dom[i], d->model, &d->cfg, d->numa, &d->notify);
		if (r < 0)
			goto err_domains;
	}
	r = -ECANCELED;
	if (stop_requested("making the pool"))
		goto err_domains;
	set_welcomes(d);
	d->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->wake_fd < 0) {
		r = -errno;
		kvp_log(LOG_ERR, "engine: eventfd: %s", strerror(-r));
		goto err_domains;
	}
	r = kvp_remotecfg_start(&d->remote, &d->cfg, &d->domains,
				d->domains.dom[KVP_DOMAIN_DEFAULT].pool,
				kvp_model_fingerprint(d->model), d->numerics);
	if (r < 0)
		goto err_wake;
	d->n_remote_domains = d->remote ? d->domains.n_domains : 0;
	if (d->remote && d->cfg.remote.summary_period_s) {
		char err[256];

		/* checked with the rest of [remote]: fails only if the host name changed */
		r = kvp_remotecfg_host(&d->cfg, d->remote_host, sizeof(d->remote_host), err,
				       sizeof(err));
		if (r < 0) {
			kvp_log(LOG_ERR, "config: %s", err);
			goto err_remote;
		}
		kvp_log(LOG_INFO, "remote: chain summaries every %u s as host %s",
			d->cfg.remote.summary_period_s, d->remote_host);
	}
	r = make_engines(d);
	if (r < 0)
		goto err_remote;
	r = make_server(d);
	if (r < 0)
		goto err_engine;
	sig_server = d->srv; /* from now on a signal also stops the loop */
	r = kvp_watchdog_init(&d->watchdog, &d->notify, d->srv);
	if (r < 0)
		goto err_server;
	r = kvp_reclaim_init(&d->reclaim, &d->domains, &d->req.conns, cfg->domains_idle_reclaim_ms,
			     d->srv);
	if (r < 0)
		goto err_server;
	r = -ECANCELED;
	if (stop_requested("binding the sockets"))
		goto err_server;
	r = start_engines(d);
	if (r < 0) {
		kvp_log(LOG_ERR, "engine: start thread: %s", strerror(-r));
		goto err_server;
	}
	kvp_log(LOG_INFO,
		"daemon: serving on %s (status %s); longest request %u tokens, "
		"pool holds %llu tokens; domains.mode %s, %u domain(s) open (first: %s)",
		cfg->socket_path, *cfg->status_path ? cfg->status_path : "off", dom->welcome.n_ctx,
		(unsigned long long)dom->welcome.n_blocks * dom->welcome.shape.block_tokens,
		kvp_domains_mode_name(d->domains.mode), d->domains.n_domains, dom->name);
	*out = d;
	return 0;

err_server:
	sig_server = NULL;
	kvp_server_free(d->srv);
	kvp_requests_stop_text(&d->req);   /* before the tokenizer it reads */
	kvp_watchdog_deinit(&d->watchdog); /* after the server: its ring reads the timer */
	kvp_reclaim_deinit(&d->reclaim);
err_engine:
	free_engines(d);
err_remote:
	kvp_remote_free(d->remote); /* after the engines, before the pools it reads */
err_wake:
	close(d->wake_fd);
err_domains:
	kvp_domains_deinit(&d->domains);
	kvp_numa_close(d->numa);
err_model:
	kvp_tokenizer_free(d->tok);
	kvp_model_close(d->model);
err_stats:
	kvp_stats_deinit(&d->stats);
err_requests:
	kvp_requests_deinit(&d->req);
err_notify:
	kvp_notify_close(&d->notify);
	free(d);
	return r;
}

int kvp_daemon_run(struct kvp_daemon *d)
{
	uint64_t deadline;
	int r;

	d->state = "serving";
	kvp_notify_send(&d->notify, "READY=1");
	kvp_notify_status(&d->notify, "serving %s: %u blocks", d->model_name,
			  kvp_pool_n_blocks(d->domains.dom[KVP_DOMAIN_DEFAULT].pool));
	r = sig_count ? 0 : kvp_server_run(d->srv);
	if (r < 0) {
		kvp_log(LOG_ERR, "server: event loop failed: %s", strerror(-r));
		return r;
	}

	/* drain: no new connections or requests; running ones get drain_timeout_ms */
	d->state = "draining";
	kvp_notify_send(&d->notify, "STOPPING=1");
	kvp_notify_status(&d->notify, "draining %llu requests", (unsigned long long)outstanding(d));
	kvp_log(LOG_INFO, "daemon: stopping; %llu request(s) in flight get %u ms to finish",
		(unsigned long long)outstanding(d), d->cfg.drain_timeout_ms);
	for (uint32_t i = 0; i < d->domains.n_domains; i++)
		kvp_sched_drain(d->domains.dom[i].sched);
	deadline = kvp_now_ns() + (uint64_t)d->cfg.drain_timeout_ms * 1000000;
	while (outstanding(d) && kvp_now_ns() < deadline && sig_count < 2) {
		uint64_t left_ms = (deadline - kvp_now_ns()) / 1000000;

		r = kvp_server_run_for(d->srv, left_ms < 50 ? (unsigned int)left_ms + 1 : 50);
		if (r < 0)
			break;
	}
	if (outstanding(d)) {
		kvp_log(LOG_NOTICE, "daemon: cancelling %llu request(s) still running",
			(unsigned long long)outstanding(d));
		for (uint32_t i = 0; i < d->domains.n_domains; i++)
			kvp_sched_cancel_all(d->domains.dom[i].sched, KVP_E_SHUTDOWN);
		deadline = kvp_now_ns() + 2000000000ull;
		while (outstanding(d) && kvp_now_ns() < deadline)
			if (kvp_server_run_for(d->srv, 20) < 0)
				break;
	}
	/* let the last DONE/ERROR frames leave */
	kvp_server_run_for(d->srv, 50);
	kvp_log(LOG_INFO, "daemon: stopped");
	return 0;
}

void kvp_daemon_free(struct kvp_daemon *d)
{
	if (!d)
		return;
	for (uint32_t i = 0; i < d->domains.n_domains; i++)
		kvp_sched_loop_gone(d->domains.dom[i].sched);
	sig_server = NULL;
	kvp_server_free(d->srv);	 /* reports every connection closed to d->req */
	kvp_requests_stop_text(&d->req); /* its thread reads the tokenizer */
	free_engines(d);
	kvp_remote_free(d->remote); /* its I/O thread reads pool blocks: before the pools */
	kvp_watchdog_deinit(&d->watchdog);
	kvp_reclaim_deinit(&d->reclaim);
	close(d->wake_fd);
	kvp_domains_deinit(&d->domains);
	kvp_numa_close(d->numa);
	kvp_tokenizer_free(d->tok);
	kvp_model_close(d->model);
	kvp_stats_deinit(&d->stats);
	kvp_requests_deinit(&d->req);
	kvp_notify_close(&d->notify);
	free(d);
}
