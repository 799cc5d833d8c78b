/* SPDX-License-Identifier: MIT */
/*
 * daemon.c - kvpoold's owner object: builds everything in order, serves, drains, and
 * tears down in reverse (see daemon.h).
 *
 * Construction order (kvp_daemon_new): notify channel, demo model (generated into
 * state_dir when no model is configured), model + tokenizer, NUMA topology, pool
 * (pre-faulted, sealed) + prefix index, read-only pool fd for clients, engine (no thread
 * yet), server (sockets bound under the server's umask, before any other thread of
 * ours exists), engine wakeup eventfd + watchdog timerfd registered in the ring, engine
 * thread.  Free runs the same list backwards.
 *
 * The loop thread (this file's server callbacks) keeps a table of connections that said
 * HELLO: their peer, domain, requests in flight and per-connection counters for the
 * status report.  A request's first CANCEL is passed to the engine and any repeat is
 * dropped here, so the engine's inbox holds at most one cancel per outstanding request
 * (ipc/ has already dropped CANCELs of ids not in flight).  Every request accepted by
 * the engine ends with exactly one DONE or ERROR event, which removes it from its
 * connection's in-flight list.
 *
 * GENERATE arrives fully validated by ipc/ (frame, limits, sampling values, token ids
 * against WELCOME's n_vocab, req_id unique in flight, max_reqs_per_conn); what is left
 * here needs the model or the pool: tokenizing a text prompt and its limit, and (in the
 * engine) whether the request can ever fit in the pool.
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

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "compute/gen.h"
#include "compute/mkmodel.h"
#include "compute/model.h"
#include "compute/tokenizer.h"
#include "ipc/server.h"
#include "shm/index.h"
#include "shm/numa.h"
#include "shm/pool.h"
#include "shm/segment.h"
#include "svc/domain.h"
#include "svc/log.h"
#include "svc/notify.h"
#include "svc/sched.h"
#include "svc/status.h"
#include "util/fs.h"
#include "util/time.h"

#ifndef KVP_VERSION
#define KVP_VERSION "unknown"
#endif

#define CONN_BUCKETS 256u
#define EVENT_BATCH 256u

/* A request in flight on a connection. */
struct inflight {
	uint64_t req_id;
	bool cancel_sent;		/* the engine has been told to cancel it */
};

/* A connection that said HELLO.  Loop thread only. */
struct conn_info {
	struct conn_info *next;		/* hash chain */
	kvp_conn_id id;
	struct kvp_peer peer;
	char client[KVP_CLIENT_NAME_MAX + 1];	/* the name its HELLO gave (sanitized by ipc/) */
	uint32_t domain;
	uint32_t n_inflight;
	struct inflight *inflight;	/* max_reqs_per_conn of room */
	uint64_t requests;
	uint64_t generated_tokens;
	uint64_t cached_tokens;
};

struct kvp_daemon {
	struct kvp_config cfg;
	struct kvp_notify notify;
	struct kvp_domains domains;
	char model_path[PATH_MAX];
	char model_name[64];
	struct kvp_model *model;
	struct kvp_tokenizer *tok;
	uint32_t n_vocab;
	uint32_t n_ctx;
	struct kvp_numa *numa;
	struct kvp_pool *pool;
	struct kvp_index *index;
	int ro_fd;
	struct kvp_sched *sched;
	struct kvp_server *srv;
	int wake_fd;
	int wd_fd;
	struct kvp_welcome welcome;
	uint64_t t_start_ns;
	const char *state;

	/* loop thread */
	struct conn_info *conns[CONN_BUCKETS];
	uint64_t n_conns;
	uint64_t req_rejected;
	uint64_t domain_requests;
	struct kvp_sched_event *evbuf;
	int32_t *tok_buf;		/* coalesced TOKEN ids */
	char *text_buf;			/* coalesced TOKEN text */
	struct kvp_status_snap *snap;
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

/* ---- connections (loop thread) ---- */

static uint32_t conn_bucket(kvp_conn_id id)
{
	return (uint32_t)((id * 0x9e3779b97f4a7c15ull) >> 56) % CONN_BUCKETS;
}

static struct conn_info *conn_find(struct kvp_daemon *d, kvp_conn_id id)
{
	struct conn_info *c;

	for (c = d->conns[conn_bucket(id)]; c; c = c->next)
		if (c->id == id)
			return c;
	return NULL;
}

static void conn_drop(struct kvp_daemon *d, kvp_conn_id id)
{
	struct conn_info **pp = &d->conns[conn_bucket(id)];

	while (*pp) {
		struct conn_info *c = *pp;

		if (c->id == id) {
			*pp = c->next;
			free(c->inflight);
			free(c);
			d->n_conns--;
			return;
		}
		pp = &c->next;
	}
}

static struct inflight *inflight_find(struct conn_info *c, uint64_t req_id)
{
	uint32_t i;

	for (i = 0; i < c->n_inflight; i++)
		if (c->inflight[i].req_id == req_id)
			return &c->inflight[i];
	return NULL;
}

static void inflight_del(struct conn_info *c, uint64_t req_id)
{
	struct inflight *f = inflight_find(c, req_id);

	if (f)
		*f = c->inflight[--c->n_inflight];
}

/* ---- server callbacks (loop thread) ---- */

static int op_hello(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer, const char *client,
		    struct kvp_welcome *welcome, int *fds, unsigned int *n_fds)
{
	struct kvp_daemon *d = ctx;
	struct conn_info *c;
	int dom;

	dom = kvp_domain_of_peer(&d->domains, peer->uid, peer->gid);
	kvp_log(LOG_DEBUG, "server: connection %#llx: HELLO from pid %ld uid %ld gid %ld, "
		"client \"%s\", domain %d", (unsigned long long)conn, (long)peer->pid,
		(long)peer->uid, (long)peer->gid, client, dom);
	if (dom < 0)
		return KVP_E_INVALID;
	if (!conn_find(d, conn)) {
		c = calloc(1, sizeof(*c));
		if (!c)
			return KVP_E_INTERNAL;
		c->inflight = calloc(d->cfg.max_reqs_per_conn, sizeof(*c->inflight));
		if (!c->inflight) {
			free(c);
			return KVP_E_INTERNAL;
		}
		c->id = conn;
		c->peer = *peer;
		snprintf(c->client, sizeof(c->client), "%s", client);
		c->domain = (uint32_t)dom;
		c->next = d->conns[conn_bucket(conn)];
		d->conns[conn_bucket(conn)] = c;
		d->n_conns++;
	}
	*welcome = d->welcome;
	if (*n_fds >= 1) {
		fds[0] = d->ro_fd;	/* borrowed: the server sends it, never closes it */
		*n_fds = 1;
		welcome->n_fds = 1;
	} else {
		*n_fds = 0;
	}
	return KVP_OK;
}

/*
 * Tokenize a text prompt into r->tokens.  Return: KVP_OK, KVP_E_LIMIT (more ids than
 * max_prompt_tokens), KVP_E_INVALID (no ids at all) or KVP_E_INTERNAL.
 */
static int tokenize_prompt(struct kvp_daemon *d, const char *text, uint32_t len,
			   struct kvp_sched_req *r)
{
	int n;

	n = kvp_gen_tokenize(&r->tokens, &r->n_tokens, d->tok, text, len,
			     d->cfg.max_prompt_tokens);
	if (n == -E2BIG)
		return KVP_E_LIMIT;
	if (n < 0)
		return KVP_E_INTERNAL;
	return r->n_tokens ? KVP_OK : KVP_E_INVALID;
}

static int op_generate(void *ctx, kvp_conn_id conn, const struct kvp_peer *peer,
		       uint64_t req_id, const struct kvp_generate *g, const int32_t *tokens,
		       const char *text)
{
	struct kvp_daemon *d = ctx;
	struct kvp_sched_req r = { .conn = conn, .req_id = req_id, .t_recv_ns = kvp_now_ns() };
	struct conn_info *c = conn_find(d, conn);
	int st;
	int n;

	(void)peer;
	if (!c)
		return KVP_E_INTERNAL;	/* ipc/ only passes GENERATE after a HELLO we took */
	/* ipc/ keeps at most max_reqs_per_conn ids, each once, in flight */
	assert(c->n_inflight < d->cfg.max_reqs_per_conn && !inflight_find(c, req_id));

	if (g->flags & KVP_GEN_TEXT) {
		st = tokenize_prompt(d, text, g->text_bytes, &r);
		if (st != KVP_OK)
			goto refuse;
	} else {
		r.tokens = malloc((size_t)g->n_tokens * sizeof(int32_t));
		if (!r.tokens) {
			st = KVP_E_INTERNAL;
			goto refuse;
		}
		memcpy(r.tokens, tokens, (size_t)g->n_tokens * sizeof(int32_t));
		r.n_tokens = g->n_tokens;
	}
	r.max_new = g->max_new_tokens;
	r.no_cache = g->flags & KVP_GEN_NO_CACHE;
	r.sample = (struct kvp_sample_params){ .temperature = g->temperature, .top_k = g->top_k,
					       .top_p = g->top_p, .seed = g->seed };
	r.salt_len = g->salt_len;
	memcpy(r.salt, g->salt, g->salt_len);
	n = kvp_sched_submit(d->sched, &r);
	switch (n) {
	case 0:
		c->inflight[c->n_inflight++] = (struct inflight){ .req_id = req_id };
		c->requests++;
		d->domain_requests++;
		return KVP_OK;
	case -EAGAIN:
		st = KVP_E_BUSY;
		break;
	case -ENOSPC:
		st = KVP_E_NOSPACE;	/* prompt + max_new_tokens beyond the whole pool */
		break;
	case -ESHUTDOWN:
		st = KVP_E_SHUTDOWN;
		break;
	case -EINVAL:
		st = KVP_E_INVALID;
		break;
	default:
		st = KVP_E_INTERNAL;
		break;
	}
refuse:
	free(r.tokens);
	d->req_rejected++;
	return st;
}

static void op_cancel(void *ctx, kvp_conn_id conn, uint64_t req_id)
{
	struct kvp_daemon *d = ctx;
	struct conn_info *c = conn_find(d, conn);
	struct inflight *f = c ? inflight_find(c, req_id) : NULL;

	/* once per request: repeated CANCELs must not grow the engine's inbox */
	if (f && !f->cancel_sent) {
		f->cancel_sent = true;
		kvp_sched_cancel(d->sched, conn, req_id);
	}
}

static void op_closed(void *ctx, kvp_conn_id conn)
{
	struct kvp_daemon *d = ctx;
	struct conn_info *c = conn_find(d, conn);

	if (!c)
		return;
	if (c->n_inflight)
		kvp_sched_conn_closed(d->sched, conn);
	conn_drop(d, conn);
}

static void fill_snapshot(struct kvp_daemon *d, struct kvp_status_snap *s)
{
	struct kvp_sched_stats st;
	const struct kvp_geom *g = kvp_pool_geom(d->pool);
	uint32_t a, b;

	kvp_sched_get_stats(d->sched, &st);
	memset(s, 0, sizeof(*s));
	kvp_server_get_stats(d->srv, &s->server);
	snprintf(s->version, sizeof(s->version), "%s", KVP_VERSION);
	snprintf(s->model, sizeof(s->model), "%s", d->model_name);
	snprintf(s->state, sizeof(s->state), "%s", d->state);
	s->uptime_ms = (kvp_now_ns() - d->t_start_ns) / 1000000;
	s->pid = (uint32_t)getpid();

	s->block_tokens = g->shape.block_tokens;
	s->block_bytes = g->block_bytes;
	s->pool_bytes = (uint64_t)kvp_pool_n_blocks(d->pool) * g->block_stride;
	snprintf(s->page_kind, sizeof(s->page_kind), "%s",
		 kvp_page_kind_name((enum kvp_page_kind)st.pool.page_kind));
	snprintf(s->kv_dtype, sizeof(s->kv_dtype), "%s", kvp_dtype_name(g->shape.dtype));
	s->n_arenas = st.pool.n_arenas < KVP_STATUS_MAX_ARENAS ? st.pool.n_arenas :
								  KVP_STATUS_MAX_ARENAS;
	for (a = 0; a < st.pool.n_arenas && a < KVP_MAX_ARENAS; a++) {
		const struct kvp_arena_stats *ar = &st.pool.arena[a];

		s->blocks_total += ar->n_blocks;
		s->blocks_used += ar->used;
		s->blocks_cached += ar->cached;
		s->blocks_free += ar->free;
		if (a < KVP_STATUS_MAX_ARENAS)
			s->arenas[a] = (struct kvp_status_arena){
				.node = ar->node_os_index, .blocks_total = ar->n_blocks,
				.blocks_used = ar->used, .blocks_cached = ar->cached,
				.blocks_free = ar->free };
	}
	s->index_entries = st.index.entries;
	s->index_lookups = st.lookups;
	s->index_hit_requests = st.hit_requests;
	s->index_lookup_tokens = st.lookup_tokens;
	s->index_hit_tokens = st.hit_tokens;
	s->index_inserts = st.index.publishes - st.index.publish_dups;
	s->index_evictions = st.pool.evictions;

	s->sched_queued = st.queued;
	s->sched_running = st.running;
	s->sched_waiting_prefix = st.waiting_prefix;
	s->sched_cancels = st.cancels_received;
	s->req_total = st.req_total + d->req_rejected;
	s->req_done = st.req_done;
	s->req_cancelled = st.req_cancelled;
	s->req_failed = st.req_failed;
	s->req_rejected = d->req_rejected;
	s->prompt_tokens = st.prompt_tokens;
	s->cached_tokens = st.cached_tokens;
	s->cache_creation_tokens = st.cache_creation_tokens;
	s->recomputed_tokens = st.recomputed_tokens;
	s->generated_tokens = st.generated_tokens;
	s->queue_ms = st.queue_ms;
	s->ttft_ms = st.ttft_ms;
	s->prefill_ms = st.prefill_ms;
	s->decode_ms = st.decode_ms;
	s->ttft_samples = st.ttft_samples;
	s->ttft_p50_ms = st.ttft_p50_ms;
	s->ttft_p99_ms = st.ttft_p99_ms;

	for (b = 0; b < CONN_BUCKETS && s->n_conns < KVP_STATUS_MAX_CONNS; b++) {
		const struct conn_info *c;

		for (c = d->conns[b]; c && s->n_conns < KVP_STATUS_MAX_CONNS; c = c->next) {
			struct kvp_status_conn *sc = &s->conns[s->n_conns++];

			*sc = (struct kvp_status_conn){
				.id = c->id, .pid = c->peer.pid, .uid = c->peer.uid,
				.domain = c->domain, .in_flight = c->n_inflight,
				.requests = c->requests, .generated_tokens = c->generated_tokens,
				.cached_tokens = c->cached_tokens };
			static_assert(sizeof(sc->client) == sizeof(c->client), "client name");
			memcpy(sc->client, c->client, sizeof(sc->client));
		}
	}
	s->n_domains = 1;
	snprintf(s->domains[0].name, sizeof(s->domains[0].name), "%s",
		 kvp_domain_name(&d->domains, KVP_DOMAIN_DEFAULT));
	s->domains[0].conns_open = d->n_conns;
	s->domains[0].requests = d->domain_requests;
}

static int op_status(void *ctx, enum kvp_status_fmt fmt, char *buf, size_t cap)
{
	struct kvp_daemon *d = ctx;

	fill_snapshot(d, d->snap);
	if (fmt == KVP_STATUS_PROM)
		return kvp_status_render_prom(d->snap, buf, cap);
	return kvp_status_render_json(d->snap, buf, cap);
}

/* ---- engine events -> frames (loop thread) ---- */

static void send_tokens(struct kvp_daemon *d, kvp_conn_id conn, uint64_t req_id, uint32_t n_tok,
			uint32_t n_text)
{
	/* -ENOTCONN: the client is gone; its closed callback cleans up */
	kvp_server_send_tokens(d->srv, conn, req_id, d->tok_buf, n_tok, d->text_buf, n_text);
}

static void on_engine_events(void *arg)
{
	struct kvp_daemon *d = arg;
	unsigned int n;

	while ((n = kvp_sched_poll_events(d->sched, d->evbuf, EVENT_BATCH)) > 0) {
		unsigned int i = 0;

		while (i < n) {
			struct kvp_sched_event *e = &d->evbuf[i];
			struct conn_info *c = conn_find(d, e->conn);

			if (e->type == KVP_SCHED_EV_TOKEN) {
				/* consecutive TOKENs of one request go out as one frame */
				uint32_t n_tok = 0;
				uint32_t n_text = 0;
				unsigned int j = i;

				while (j < n && d->evbuf[j].type == KVP_SCHED_EV_TOKEN &&
				       d->evbuf[j].conn == e->conn &&
				       d->evbuf[j].req_id == e->req_id && n_tok < EVENT_BATCH) {
					if (d->evbuf[j].token >= 0)
						d->tok_buf[n_tok++] = d->evbuf[j].token;
					memcpy(d->text_buf + n_text, d->evbuf[j].text,
					       d->evbuf[j].text_len);
					n_text += d->evbuf[j].text_len;
					j++;
				}
				if (c)
					send_tokens(d, e->conn, e->req_id, n_tok, n_text);
				i = j;
				continue;
			}
			if (e->type == KVP_SCHED_EV_DONE) {
				if (c) {
					kvp_server_send_done(d->srv, e->conn, e->req_id, &e->usage);
					inflight_del(c, e->req_id);
					c->generated_tokens += e->usage.generated_tokens;
					c->cached_tokens += e->usage.cached_tokens;
				}
			} else if (e->type == KVP_SCHED_EV_ERROR) {
				if (c) {
					char msg[KVP_SCHED_EV_TEXT + 1];

					memcpy(msg, e->text, e->text_len);
					msg[e->text_len] = '\0';
					kvp_server_send_error(d->srv, e->conn, e->req_id,
							      (enum kvp_status)e->status, msg);
					inflight_del(c, e->req_id);
				}
			}
			i++;
		}
	}
}

static void on_watchdog(void *arg)
{
	struct kvp_daemon *d = arg;

	/* sent from the loop: a wedged loop stops the pings and systemd restarts us */
	kvp_notify_send(&d->notify, "WATCHDOG=1");
}

/* ---- construction ---- */

/* Remove every entry of directory @path (not recursive: it holds only files of ours). */
static int empty_dir(const char *path)
{
	struct dirent *e;
	DIR *dir = opendir(path);
	int r = 0;

	if (!dir)
		return errno == ENOENT ? 0 : -errno;
	while ((e = readdir(dir)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    unlinkat(dirfd(dir), e->d_name, 0) < 0 && !r)
			r = -errno;
	closedir(dir);
	return r;
}

/*
 * Write the demo model to d->model_path.  It is written inside a directory of its own,
 * <state_dir>/demo.tmp, and renamed into place: whatever a killed earlier attempt left
 * there (mkmodel's temporary file) is ours to remove, whatever its name, and a reader
 * of demo.gguf never sees a partial model.
 */
static int generate_demo(struct kvp_daemon *d)
{
	struct kvp_mkmodel_opts o;
	char err[256] = "";
	char dir[sizeof(d->model_path)];
	char tmp[sizeof(d->model_path) + 16];
	uint64_t t0;
	int r;

	r = kvp_mkdir_p(d->cfg.state_dir, 0750);
	if (r < 0) {
		kvp_log(LOG_ERR, "model: create state directory %s: %s", d->cfg.state_dir,
			strerror(-r));
		return r;
	}
	r = kvp_mkmodel_preset(&o, "demo");
	if (r < 0)
		return r;
	if (snprintf(dir, sizeof(dir), "%s/demo.tmp", d->cfg.state_dir) >= (int)sizeof(dir))
		return -ENAMETOOLONG;
	snprintf(tmp, sizeof(tmp), "%s/demo.gguf", dir);
	r = empty_dir(dir);
	if (r == 0 && mkdir(dir, 0750) < 0 && errno != EEXIST)
		r = -errno;
	if (r < 0) {
		kvp_log(LOG_ERR, "model: prepare %s: %s", dir, strerror(-r));
		return r;
	}
	kvp_notify_status(&d->notify, "generating the demo model into %s", d->model_path);
	kvp_log(LOG_NOTICE, "model: generating the built-in demo model into %s (once)",
		d->model_path);
	t0 = kvp_now_ns();
	r = kvp_mkmodel_write(tmp, &o, err, sizeof(err));
	if (r < 0)
		kvp_log(LOG_ERR, "model: write demo model %s: %s", tmp, *err ? err : strerror(-r));
	if (r == 0 && rename(tmp, d->model_path) < 0) {
		r = -errno;
		kvp_log(LOG_ERR, "model: rename %s to %s: %s", tmp, d->model_path, strerror(-r));
	}
	empty_dir(dir);
	rmdir(dir);
	if (r < 0)
		return r;
	kvp_log(LOG_INFO, "model: demo model written in %.1f s", (double)(kvp_now_ns() - t0) / 1e9);
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
			r = generate_demo(d);
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
		r = generate_demo(d);
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
		return r;
	}
	hp = kvp_model_hparams(d->model);
	mi = kvp_model_info(d->model);
	d->n_vocab = hp->n_vocab;
	snprintf(d->model_name, sizeof(d->model_name), "%s",
		 *kvp_model_name(d->model) ? kvp_model_name(d->model) : (demo ? "demo" : "?"));
	kvp_log(LOG_INFO,
		"model: %s: %s, %llu parameters, %u layers, n_embd %u, %u heads / %u kv, "
		"vocab %u, weights %s",
		d->model_path, d->model_name, (unsigned long long)mi->n_params, hp->n_layers,
		hp->n_embd, hp->n_heads, hp->n_kv_heads, hp->n_vocab, mi->file_type);
	if (mi->n_converted)
		kvp_log(LOG_INFO, "model: converted %u tensors to f32 at load (%.1f MiB)",
			mi->n_converted, (double)mi->converted_bytes / (1 << 20));
	/* the load time is what daemon.weights = copy costs: say what it bought */
	if (mi->weights_copied)
		kvp_log(LOG_INFO, "model: loaded in %.3f s, weights copied into huge-page "
			"memory: %.1f MiB copied, arena %.1f MiB (daemon.weights = copy)",
			load_s, (double)mi->copied_bytes / (1 << 20),
			(double)mi->arena_bytes / (1 << 20));
	else
		kvp_log(LOG_INFO, "model: loaded in %.3f s, weights used in place from the file "
			"mapping, arena %.1f MiB (daemon.weights = map)",
			load_s, (double)mi->arena_bytes / (1 << 20));
	return 0;
}

static int make_pool(struct kvp_daemon *d)
{
	static const enum kvp_page_mode modes[] = {
		[KVP_HUGE_AUTO] = KVP_PAGES_AUTO,
		[KVP_HUGE_REQUIRE] = KVP_PAGES_REQUIRE_HUGE,
		[KVP_HUGE_OFF] = KVP_PAGES_OFF,
	};
	struct kvp_pool_config pc = { 0 };
	struct kvp_model_shape shape;
	struct kvp_geom g;
	uint64_t n_blocks;
	uint64_t t0;
	int r;

	kvp_model_kv_shape(d->model, d->cfg.kv_dtype, d->cfg.block_tokens, &shape);
	r = kvp_geom_init(&g, &shape);
	if (r < 0) {
		kvp_log(LOG_ERR, "pool: block shape of this model is invalid: %s", strerror(-r));
		return r;
	}
	n_blocks = d->cfg.pool_bytes / g.block_stride;
	if (n_blocks < 1 || n_blocks > UINT32_MAX - 1) {
		kvp_log(LOG_ERR, "pool: pool.size %llu holds %llu blocks of %zu bytes; need 1 .. %u",
			(unsigned long long)d->cfg.pool_bytes, (unsigned long long)n_blocks,
			g.block_stride, UINT32_MAX - 1);
		return -EINVAL;
	}
	r = kvp_numa_open(&d->numa, NULL);
	if (r < 0) {
		kvp_log(LOG_ERR, "pool: read NUMA topology: %s", strerror(-r));
		return r;
	}
	pc.shape = shape;
	pc.n_blocks = (uint32_t)n_blocks;
	pc.pages = modes[d->cfg.huge_pages];
	pc.numa = d->numa;
	pc.name = "kvpool:default";
	kvp_notify_status(&d->notify, "pre-faulting the %llu MiB pool",
			  (unsigned long long)(n_blocks * g.block_stride >> 20));
	t0 = kvp_now_ns();
	r = kvp_pool_new(&d->pool, &pc);
	if (r < 0) {
		if (d->cfg.huge_pages == KVP_HUGE_REQUIRE && (r == -ENOMEM || r == -EOPNOTSUPP)) {
			long free_pages = kvp_hugetlb_free_pages();
			uint64_t want = (n_blocks * g.block_stride + 2 * KVP_HUGE_PAGE_BYTES - 1) /
					KVP_HUGE_PAGE_BYTES + 1;

			kvp_log(LOG_ERR,
				"pool: huge pages required (pool.huge_pages = require) but %s: %ld "
				"free 2 MiB pages, about %llu needed; reserve them with "
				"sysctl vm.nr_hugepages or use huge_pages = auto",
				r == -EOPNOTSUPP ? "the kernel has no hugetlb memfd" :
						   "too few are reserved",
				free_pages < 0 ? 0 : free_pages, (unsigned long long)want);
		} else {
			kvp_log(LOG_ERR, "pool: create %llu blocks of %zu bytes: %s",
				(unsigned long long)n_blocks, g.block_stride, strerror(-r));
		}
		return r;
	}
	kvp_log(LOG_INFO,
		"pool: %u blocks of %u tokens (%zu bytes, %s K/V), %llu MiB on %s pages, "
		"%u arena(s), pre-faulted in %.0f ms",
		kvp_pool_n_blocks(d->pool), shape.block_tokens, g.block_bytes,
		kvp_dtype_name(shape.dtype), (unsigned long long)(n_blocks * g.block_stride >> 20),
		kvp_page_kind_name(kvp_segment_page_kind(kvp_pool_segment(d->pool))),
		kvp_pool_n_arenas(d->pool), (double)(kvp_now_ns() - t0) / 1e6);
	if (d->cfg.huge_pages == KVP_HUGE_AUTO &&
	    kvp_segment_page_kind(kvp_pool_segment(d->pool)) == KVP_PAGE_4K)
		kvp_log(LOG_NOTICE, "pool: no huge pages obtained; using 4 KiB pages "
			"(reserve vm.nr_hugepages for faster K/V reads)");
	r = kvp_index_new(&d->index, d->pool);
	if (r < 0) {
		kvp_log(LOG_ERR, "index: create: %s", strerror(-r));
		return r;
	}
	d->ro_fd = kvp_segment_reopen_ro(kvp_pool_segment(d->pool));
	if (d->ro_fd < 0) {
		r = d->ro_fd;
		kvp_log(LOG_ERR, "pool: read-only fd for clients: %s", strerror(-r));
		return r;
	}
	return 0;
}

static void fill_welcome(struct kvp_daemon *d)
{
	const struct kvp_segment *seg = kvp_pool_segment(d->pool);
	const struct kvp_geom *g = kvp_pool_geom(d->pool);
	struct kvp_welcome *w = &d->welcome;
	uint64_t pool_tokens = (uint64_t)kvp_pool_n_blocks(d->pool) * g->shape.block_tokens;
	int32_t bos = kvp_tokenizer_bos(d->tok);
	int32_t eos = kvp_tokenizer_eos(d->tok);

	/* the longest sequence: the configured limits, and never more than the pool holds */
	d->n_ctx = d->cfg.max_prompt_tokens + d->cfg.max_new_tokens;
	if (d->n_ctx > pool_tokens + 1)
		d->n_ctx = (uint32_t)(pool_tokens + 1);
	memset(w, 0, sizeof(*w));
	w->n_vocab = d->n_vocab;
	w->n_ctx = d->n_ctx;
	w->bos_id = bos >= 0 ? (uint32_t)bos : UINT32_MAX;
	w->eos_id = eos >= 0 ? (uint32_t)eos : UINT32_MAX;
	w->shape = g->shape;
	w->block_stride = g->block_stride;
	w->data_offset = seg->data_offset;
	w->segment_bytes = seg->bytes;
	w->n_blocks = kvp_pool_n_blocks(d->pool);
	w->max_new_tokens = d->cfg.max_new_tokens;
	w->max_prompt_tokens = d->cfg.max_prompt_tokens;
	memcpy(w->fingerprint, kvp_model_fingerprint(d->model), sizeof(w->fingerprint));
	snprintf(w->model, sizeof(w->model), "%s", d->model_name);
}

static int make_engine(struct kvp_daemon *d)
{
	const struct kvp_model_hparams *hp = kvp_model_hparams(d->model);
	struct kvp_sched_config sc = { 0 };
	float one = 1.0f;
	long ncpu;
	int r;

	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	sc.pool = d->pool;
	sc.index = d->index;
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
	sc.wake_fd = d->wake_fd;
	r = kvp_sched_new(&d->sched, &sc);
	if (r < 0)
		kvp_log(LOG_ERR, "engine: create (%u threads, batch %u, chunk %u): %s",
			sc.n_threads, sc.max_running, sc.prefill_chunk, strerror(-r));
	return r;
}

static gid_t group_gid(const char *name)
{
	struct group *gr;

	if (!*name)
		return (gid_t)-1;
	gr = getgrnam(name);	/* main thread, before the engine thread starts */
	return gr ? gr->gr_gid : (gid_t)-1;
}

static int make_server(struct kvp_daemon *d)
{
	struct kvp_server_config sc = {
		.socket_path = d->cfg.socket_path,
		.status_path = *d->cfg.status_path ? d->cfg.status_path : NULL,
		.socket_gid = group_gid(d->cfg.socket_group),
		.status_gid = group_gid(d->cfg.status_group),
		.max_frame_bytes = d->cfg.max_frame_bytes,
		.max_conns = d->cfg.max_conns,
		.max_reqs_per_conn = d->cfg.max_reqs_per_conn,
		.max_prompt_tokens = d->cfg.max_prompt_tokens,
		.max_new_tokens = d->cfg.max_new_tokens,
		.outq_bytes = d->cfg.outq_bytes > UINT32_MAX ? UINT32_MAX :
							     (uint32_t)d->cfg.outq_bytes,
	};
	struct kvp_server_ops ops = {
		.ctx = d,
		.hello = op_hello,
		.generate = op_generate,
		.cancel = op_cancel,
		.closed = op_closed,
		.status = op_status,
	};
	uint64_t wd_usec;
	int r;

	r = kvp_server_new(&sc, &ops, &d->srv);
	if (r < 0) {
		kvp_log(LOG_ERR, "server: listen on %s%s%s: %s", d->cfg.socket_path,
			sc.status_path ? " and " : "", sc.status_path ? sc.status_path : "",
			strerror(-r));
		return r;
	}
	r = kvp_server_add_wakeup(d->srv, d->wake_fd, on_engine_events, d);
	if (r < 0) {
		kvp_log(LOG_ERR, "server: register the engine eventfd: %s", strerror(-r));
		return r;
	}
	wd_usec = kvp_notify_watchdog_interval_usec(&d->notify);
	if (wd_usec) {
		struct itimerspec its = { 0 };

		d->wd_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
		if (d->wd_fd < 0) {
			r = -errno;
			kvp_log(LOG_ERR, "notify: watchdog timer: %s", strerror(-r));
			return r;
		}
		its.it_interval.tv_sec = (time_t)(wd_usec / 1000000);
		its.it_interval.tv_nsec = (long)(wd_usec % 1000000) * 1000;
		its.it_value = its.it_interval;
		if (timerfd_settime(d->wd_fd, 0, &its, NULL) < 0) {
			r = -errno;
			kvp_log(LOG_ERR, "notify: watchdog timer: %s", strerror(-r));
			return r;
		}
		/* a timerfd read gives 8 bytes like an eventfd: the wakeup path fits it */
		r = kvp_server_add_wakeup(d->srv, d->wd_fd, on_watchdog, d);
		if (r < 0) {
			kvp_log(LOG_ERR, "notify: register the watchdog timer: %s", strerror(-r));
			return r;
		}
		kvp_log(LOG_INFO, "notify: watchdog ping every %llu ms",
			(unsigned long long)(wd_usec / 1000));
	}
	return 0;
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
	struct kvp_daemon *d;
	int r;

	catch_stop_signals();

	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->cfg = *cfg;
	d->ro_fd = -1;
	d->wake_fd = -1;
	d->wd_fd = -1;
	d->notify = (struct kvp_notify)KVP_NOTIFY_INIT;
	d->t_start_ns = kvp_now_ns();
	d->state = "starting";
	kvp_domains_init_default(&d->domains);
	*out = d;	/* kvp_daemon_free() undoes whatever part was built */

	r = kvp_notify_open(&d->notify);
	if (r < 0)
		kvp_log(LOG_WARNING, "notify: $NOTIFY_SOCKET unusable: %s; not notifying",
			strerror(-r));
	kvp_log(LOG_INFO, "daemon: kvpoold %s starting%s%s", KVP_VERSION,
		*cfg->config_path ? " with " : "", cfg->config_path);
	d->evbuf = calloc(EVENT_BATCH, sizeof(*d->evbuf));
	d->tok_buf = calloc(EVENT_BATCH, sizeof(int32_t));
	d->text_buf = malloc((size_t)EVENT_BATCH * KVP_SCHED_EV_TEXT);
	d->snap = calloc(1, sizeof(*d->snap));
	if (!d->evbuf || !d->tok_buf || !d->text_buf || !d->snap)
		return -ENOMEM;
	r = load_model(d);
	if (r < 0)
		return r;
	if (stop_requested("loading the model"))
		return -ECANCELED;
	r = make_pool(d);
	if (r < 0)
		return r;
	if (stop_requested("making the pool"))
		return -ECANCELED;
	fill_welcome(d);
	d->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->wake_fd < 0) {
		r = -errno;
		kvp_log(LOG_ERR, "engine: eventfd: %s", strerror(-r));
		return r;
	}
	r = make_engine(d);
	if (r < 0)
		return r;
	r = make_server(d);
	if (r < 0)
		return r;
	sig_server = d->srv;	/* from now on a signal also stops the loop */
	if (stop_requested("binding the sockets"))
		return -ECANCELED;
	r = kvp_sched_start(d->sched);
	if (r < 0) {
		kvp_log(LOG_ERR, "engine: start thread: %s", strerror(-r));
		return r;
	}
	{
		uint64_t most = (uint64_t)kvp_pool_n_blocks(d->pool) *
				kvp_pool_geom(d->pool)->shape.block_tokens;

		kvp_log(LOG_INFO, "daemon: serving on %s (status %s); longest request %u tokens, "
			"pool holds %llu tokens",
			cfg->socket_path, *cfg->status_path ? cfg->status_path : "off", d->n_ctx,
			(unsigned long long)most);
	}
	return 0;
}

int kvp_daemon_run(struct kvp_daemon *d)
{
	uint64_t deadline;
	int r;

	d->state = "serving";
	kvp_notify_send(&d->notify, "READY=1");
	kvp_notify_status(&d->notify, "serving %s: %u blocks", d->model_name,
			  kvp_pool_n_blocks(d->pool));
	r = sig_count ? 0 : kvp_server_run(d->srv);
	if (r < 0) {
		kvp_log(LOG_ERR, "server: event loop failed: %s", strerror(-r));
		return r;
	}

	/* drain: no new connections or requests; running ones get drain_timeout_ms */
	d->state = "draining";
	kvp_notify_send(&d->notify, "STOPPING=1");
	kvp_notify_status(&d->notify, "draining %llu requests",
			  (unsigned long long)kvp_sched_outstanding(d->sched));
	kvp_log(LOG_INFO, "daemon: stopping; %llu request(s) in flight get %u ms to finish",
		(unsigned long long)kvp_sched_outstanding(d->sched), d->cfg.drain_timeout_ms);
	kvp_sched_drain(d->sched);
	deadline = kvp_now_ns() + (uint64_t)d->cfg.drain_timeout_ms * 1000000;
	while (kvp_sched_outstanding(d->sched) && kvp_now_ns() < deadline && sig_count < 2) {
		uint64_t left_ms = (deadline - kvp_now_ns()) / 1000000;

		r = kvp_server_run_for(d->srv, left_ms < 50 ? (unsigned int)left_ms + 1 : 50);
		if (r < 0)
			break;
	}
	if (kvp_sched_outstanding(d->sched)) {
		kvp_log(LOG_NOTICE, "daemon: cancelling %llu request(s) still running",
			(unsigned long long)kvp_sched_outstanding(d->sched));
		kvp_sched_cancel_all(d->sched, KVP_E_SHUTDOWN);
		deadline = kvp_now_ns() + 2000000000ull;
		while (kvp_sched_outstanding(d->sched) && kvp_now_ns() < deadline)
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
	struct conn_info *c;
	uint32_t b;

	if (!d)
		return;
	if (d->sched)
		kvp_sched_loop_gone(d->sched);
	sig_server = NULL;
	kvp_server_free(d->srv);	/* calls op_closed for each connection */
	kvp_sched_free(d->sched);
	if (d->wd_fd >= 0)
		close(d->wd_fd);
	if (d->wake_fd >= 0)
		close(d->wake_fd);
	if (d->ro_fd >= 0)
		close(d->ro_fd);
	kvp_index_free(d->index);
	kvp_pool_free(d->pool);
	kvp_numa_close(d->numa);
	kvp_tokenizer_free(d->tok);
	kvp_model_close(d->model);
	for (b = 0; b < CONN_BUCKETS; b++) {
		while ((c = d->conns[b])) {
			d->conns[b] = c->next;
			free(c->inflight);
			free(c);
		}
	}
	free(d->snap);
	free(d->text_buf);
	free(d->tok_buf);
	free(d->evbuf);
	kvp_notify_close(&d->notify);
	free(d);
}
