/* SPDX-License-Identifier: MIT */
/*
 * backend.c - the pool of kvpoold connections and its thread (see backend.h).
 *
 * The thread loops: take new jobs from the inbox (under @lock) and send them, send the
 * cancels that were asked for, poll the eventfd, every open connection and the watched
 * client sockets, then handle what is ready.  kvp_client_next() reads exactly one frame
 * and buffers nothing, and it blocks until the frame is whole; so a connection is read
 * while the socket holds at least a frame header (kvpoold writes whole frames, so the
 * rest follows at once), up to FRAMES_PER_ROUND frames, and poll() sees the rest.
 *
 * Invariants: a job is in exactly one place, the inbox, the wait list or one slot of one
 * connection, from submit until its end (its slot is cleared before ops->end is called);
 * @busy counts reservations (slots + @queue).  A job that finds every slot taken waits
 * on the thread's wait list, in arrival order, and new jobs queue behind it; slots freed
 * by DONE or ERROR go to the wait list's head first.  Waiting jobs' client sockets are
 * watched as running ones are, so a client gone while waiting is never sent.  Jobs are never touched after their end: watched sockets are handled
 * before any frame that could end their job in the same round.
 */
#include "ipc/http/backend.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "ipc/http/toolcall.h"
#include "util/log.h"
#include "util/time.h"

#define RETRY_NS 250000000ull /* after a failed connect, the next try waits this long */
#define IDLE_RETRY_MS 1000    /* no connection open: try one again this often */
#define FRAMES_PER_ROUND 64   /* frames read from one connection before polling again */

struct bconn {
	struct kvp_client *c; /* NULL: closed */
	unsigned int n;	      /* jobs in flight on it */
	struct kvp_http_job **slots;
	uint64_t retry_ns; /* no connect attempt before this */
};

struct kvp_http_backend {
	char path[108];
	unsigned int n_conns, per_conn, queue;
	struct bconn *conns;
	struct kvp_http_job *wait, *wait_tail; /* the thread's: jobs waiting for a slot */
	int efd;
	pthread_t thread;
	bool started;

	pthread_mutex_t lock; /* the inbox, @stopping, @cancel_all, @info */
	struct kvp_http_job *inbox, *inbox_tail;
	bool stopping;
	bool cancel_all;
	struct kvp_http_backend_info info;
	char last_err[256]; /* the thread's: why the last connect failed */

	atomic_uint busy;
	atomic_uint up;

	/* the thread's: the pieces for logprobs (read at the first request asking them, again
	 * when kvpoold serves another model), one TOKEN's logprobs */
	struct kvp_http_vocab *vocab;
	struct kvp_logprob *lp;
	size_t lp_cap;
};

static void wake(struct kvp_http_backend *be)
{
	uint64_t one = 1;

	/* a full counter still wakes the thread: a failed write changes nothing */
	(void)!write(be->efd, &one, sizeof(one));
}

static void end_job(struct kvp_http_backend *be, struct kvp_http_job *job,
		    const struct kvp_usage *u, int status, const char *msg)
{
	atomic_fetch_sub(&be->busy, 1);
	job->ops->end(job, u, status, msg);
}

static int connect_conn(struct kvp_http_backend *be, unsigned int i)
{
	struct bconn *b = &be->conns[i];
	const struct kvp_welcome *w;
	struct kvp_client *c;
	int r;

	r = kvp_client_connect(&c, be->path);
	if (r) {
		snprintf(be->last_err, sizeof(be->last_err), "%s",
			 c ? kvp_client_errmsg(c) : kvp_client_strerror(r));
		kvp_client_close(c);
		b->retry_ns = kvp_now_ns() + RETRY_NS;
		if (!atomic_load(&be->up))
			kvp_log(LOG_DEBUG, "backend: connect %s: %s", be->path, be->last_err);
		return r;
	}
	b->c = c;
	b->n = 0;
	w = kvp_client_welcome(c);
	pthread_mutex_lock(&be->lock);
	if (!be->info.known || strncmp(be->info.model, w->model, sizeof(w->model)))
		kvp_log(LOG_INFO, "backend: kvpoold at %s serves %.64s (vocabulary %u, context %u)",
			be->path, w->model, w->n_vocab, w->n_ctx);
	be->info.known = true;
	be->info.up = true;
	snprintf(be->info.model, sizeof(be->info.model), "%.64s", w->model);
	be->info.n_vocab = w->n_vocab;
	be->info.n_ctx = w->n_ctx;
	be->info.max_new_tokens = w->max_new_tokens;
	be->info.max_prompt_tokens = w->max_prompt_tokens;
	be->info.block_tokens = w->shape.block_tokens;
	pthread_mutex_unlock(&be->lock);
	atomic_fetch_add(&be->up, 1);
	return 0;
}

/* Close connection @i; its jobs end with @status and "@why". */
static void conn_down(struct kvp_http_backend *be, unsigned int i, int status, const char *why)
{
	struct bconn *b = &be->conns[i];
	char msg[320];

	if (!b->c)
		return;
	snprintf(msg, sizeof(msg), "connection to kvpoold lost: %s", why);
	if (status == -ENOTCONN)
		kvp_log(LOG_WARNING, "backend: %s", msg);
	kvp_client_close(b->c);
	b->c = NULL;
	b->retry_ns = kvp_now_ns() + RETRY_NS;
	if (atomic_fetch_sub(&be->up, 1) == 1) {
		pthread_mutex_lock(&be->lock);
		be->info.up = false;
		pthread_mutex_unlock(&be->lock);
	}
	for (unsigned int s = 0; s < be->per_conn; s++) {
		struct kvp_http_job *job = b->slots[s];

		if (!job)
			continue;
		b->slots[s] = NULL;
		end_job(be, job, NULL, status, msg);
	}
	b->n = 0;
}

static void send_cancel(struct kvp_http_backend *be, struct kvp_http_job *job)
{
	struct bconn *b = &be->conns[job->conn];

	if (job->cancel_sent)
		return;
	job->cancel_sent = true;
	if (kvp_client_cancel(b->c, job->req_id))
		conn_down(be, (unsigned int)job->conn, -ENOTCONN, kvp_client_errmsg(b->c));
}

/* The connection a new job goes on, opening one when it helps; -1 when none can take it. */
static int pick(struct kvp_http_backend *be)
{
	uint64_t now = kvp_now_ns();
	int best = -1;

	for (unsigned int i = 0; i < be->n_conns; i++)
		if (be->conns[i].c && !be->conns[i].n)
			return (int)i;
	for (unsigned int i = 0; i < be->n_conns; i++) {
		if (be->conns[i].c)
			continue;
		if (now >= be->conns[i].retry_ns && !connect_conn(be, i))
			return (int)i;
		break; /* kvpoold refused one: do not try them all for this job */
	}
	for (unsigned int i = 0; i < be->n_conns; i++) {
		struct bconn *b = &be->conns[i];

		if (b->c && b->n < be->per_conn && (best < 0 || b->n < be->conns[best].n))
			best = (int)i;
	}
	return best;
}

/*
 * A call or result with its id as kvpoold takes them (KVP_CHAT_CALL_IDS): "NAME\nID\n
 * ARGUMENTS" (a call's text is "NAME\nARGUMENTS"), "ID\nRESULT"; the id as
 * kvp_http_call_id9() gives it.
 */
static int add_with_id(struct kvp_client_conv *cv, int role, const struct kvp_http_msg *m,
		       const char *text)
{
	size_t head = 0, n = m->len + KVP_HTTP_CALL_ID9;
	char id[KVP_HTTP_CALL_ID9], *t;
	int r;

	if (role == KVP_ROLE_TOOL_CALL) { /* api.c writes every call as NAME\nARGUMENTS */
		const char *nl = memchr(text, '\n', m->len);

		if (!nl)
			return -EINVAL;
		head = (size_t)(nl + 1 - text);
	}
	kvp_http_call_id9(m->id, strlen(m->id), id);
	t = malloc(n);
	if (!t)
		return -ENOMEM;
	memcpy(t, text, head);
	memcpy(t + head, id, KVP_HTTP_CALL_ID9 - 1);
	t[head + KVP_HTTP_CALL_ID9 - 1] = '\n';
	memcpy(t + head + KVP_HTTP_CALL_ID9, text + head, m->len - head);
	r = kvp_client_conv_add(cv, role, t, n);
	free(t);
	return r;
}

/* A chat's messages as a libkvpool conversation (a builder: freed once it is sent). */
static int build_conv(const struct kvp_http_job *job, struct kvp_client_conv **out)
{
	static const int roles[] = { [KVP_HTTP_ROLE_SYSTEM] = KVP_ROLE_SYSTEM,
				     [KVP_HTTP_ROLE_USER] = KVP_ROLE_USER,
				     [KVP_HTTP_ROLE_ASSISTANT] = KVP_ROLE_ASSISTANT,
				     [KVP_HTTP_ROLE_TOOL] = KVP_ROLE_TOOL,
				     [KVP_HTTP_ROLE_TOOL_CALL] = KVP_ROLE_TOOL_CALL };
	struct kvp_client_conv *cv;
	bool ids = true;
	int r;

	r = kvp_client_conv_new(&cv);
	if (r)
		return r;
	if ((job->tools && (r = kvp_client_conv_set_tools(cv, job->tools, job->tools_len))) ||
	    (r = kvp_client_conv_set_thinking(cv, job->thinking))) {
		kvp_client_conv_free(cv);
		return r;
	}
	/* ids when every call and result has one (the APIs require them); Mistral's
	 * templates refuse calls without, the others leave them out */
	for (size_t k = 0; k < job->n_msgs; k++)
		if (job->msgs[k].role == KVP_HTTP_ROLE_TOOL ||
		    job->msgs[k].role == KVP_HTTP_ROLE_TOOL_CALL)
			ids = ids && job->msgs[k].id;
	kvp_client_conv_set_call_ids(cv, ids);
	for (size_t k = 0; k < job->n_msgs; k++) {
		const struct kvp_http_msg *m = &job->msgs[k];
		const char *text = m->text ? m->text : "";

		if (ids && (m->role == KVP_HTTP_ROLE_TOOL || m->role == KVP_HTTP_ROLE_TOOL_CALL))
			r = add_with_id(cv, roles[m->role], m, text);
		else
			r = kvp_client_conv_add(cv, roles[m->role], text, m->len);
		if (r) {
			kvp_client_conv_free(cv);
			return r;
		}
	}
	*out = cv;
	return 0;
}

/* Send @job's request on @c: 0, or as kvp_client_submit() (-ENOMEM: nothing was sent). */
static int send_job(struct kvp_client *c, struct kvp_http_job *job)
{
	struct kvp_client_conv *cv;
	int r;

	switch (job->kind) {
	case KVP_HTTP_JOB_CHAT:
	case KVP_HTTP_JOB_CHAT_PROMPT:
		r = build_conv(job, &cv);
		if (r)
			return r;
		if (job->kind == KVP_HTTP_JOB_CHAT) {
			/*
			 * the connection is shared: the cache control goes with this request's
			 * frame only (libkvpool copies it into the frame at submit)
			 */
			if (job->has_cc)
				r = kvp_client_set_cache(c, &job->cc);
			if (r == 0 && job->has_samp)
				r = kvp_client_set_sampling(c, &job->samp);
			if (r == 0)
				r = kvp_client_chat_submit(c, cv, &job->params, &job->req_id);
			if (job->has_cc)
				kvp_client_set_cache(c, NULL);
			if (job->has_samp)
				kvp_client_set_sampling(c, NULL);
		} else {
			r = kvp_client_chat_prompt_submit(c, cv, &job->req_id);
		}
		kvp_client_conv_free(cv); /* the frame is out; the reply is not kept here */
		return r;
	case KVP_HTTP_JOB_TOKENIZE:
		return kvp_client_tokenize_submit(c, job->prompt.text, job->prompt.text_len,
						  job->tok_flags, &job->req_id);
	case KVP_HTTP_JOB_DETOKENIZE:
		return kvp_client_detokenize_submit(c, job->prompt.tokens, job->prompt.n_tokens,
						    job->tok_flags, &job->req_id);
	default:
		/* as a chat's: with this request's frame only (n > 1 rides in the cache
		 * control) */
		r = job->has_cc ? kvp_client_set_cache(c, &job->cc) : 0;
		if (r == 0 && job->has_samp)
			r = kvp_client_set_sampling(c, &job->samp);
		if (r == 0)
			r = kvp_client_submit(c, &job->prompt, &job->params, &job->req_id);
		if (job->has_cc)
			kvp_client_set_cache(c, NULL);
		if (job->has_samp)
			kvp_client_set_sampling(c, NULL);
		return r;
	}
}

static void wait_push(struct kvp_http_backend *be, struct kvp_http_job *job)
{
	job->next = NULL;
	if (be->wait_tail)
		be->wait_tail->next = job;
	else
		be->wait = job;
	be->wait_tail = job;
}

/*
 * The vocabulary of the model kvpoold serves now, read once (on its own connection: a
 * few hundred DETOKENIZEs of 512 ids for 150k ids, this thread waits for them once).
 */
static bool vocab_ready(struct kvp_http_backend *be, char *msg, size_t cap)
{
	char err[300] = "";
	uint64_t t0;
	int r;

	if (be->vocab && be->vocab->n == be->info.n_vocab &&
	    !strcmp(be->vocab->model, be->info.model))
		return true;
	kvp_http_vocab_free(be->vocab);
	be->vocab = NULL;
	t0 = kvp_now_ns();
	r = kvp_http_vocab_load(&be->vocab, be->path, err, sizeof(err));
	if (r) {
		snprintf(msg, cap, "logprobs need the vocabulary, which could not be read: %s",
			 err);
		kvp_log(LOG_WARNING, "backend: %s", msg);
		return false;
	}
	kvp_log(LOG_INFO, "backend: read the vocabulary of %s (%u ids) for logprobs in %.1f ms",
		be->vocab->model, be->vocab->n, (double)(kvp_now_ns() - t0) / 1e6);
	return true;
}

/* A TOKEN's logprobs into @be->lp for ops->tokens: false when it carried none. */
static bool take_logprobs(struct kvp_http_backend *be, struct kvp_client *c,
			  struct kvp_http_job *job, const struct kvp_client_event *ev)
{
	const struct kvp_logprob *top;
	uint32_t n_top = 0, k = 0;
	float lp;

	for (uint32_t i = 0; i < ev->n_tokens; i++) {
		if (kvp_client_event_logprob(c, i, &lp, &top, &n_top))
			return false;
		if (!i) {
			size_t need = (size_t)ev->n_tokens * (1 + n_top);

			if (need > be->lp_cap) {
				struct kvp_logprob *p = realloc(be->lp, need * sizeof(*p));

				if (!p)
					return false;
				be->lp = p;
				be->lp_cap = need;
			}
			k = n_top;
		}
		if (n_top != k)
			return false; /* kvpoold lists as many for every id */
		be->lp[i * (1 + k)] = (struct kvp_logprob){ .id = ev->tokens[i], .logprob = lp };
		memcpy(&be->lp[i * (1 + k) + 1], top, k * sizeof(*top));
	}
	job->lp = be->lp;
	job->lp_top = k;
	return true;
}

/*
 * Send @job, or put it on the wait list when every slot is taken (@front: back at the
 * list's head, where it was).  Return: true when it was sent or ended, false when it
 * waits.
 */
static bool dispatch(struct kvp_http_backend *be, struct kvp_http_job *job, bool front)
{
	char msg[400];
	int tries = 0, i, r;

	if (atomic_load(&job->cancel)) {
		end_job(be, job, NULL, KVP_E_CANCELLED, "cancelled before it was sent");
		return true;
	}
	if (job->has_samp && job->samp.logprobs && !vocab_ready(be, msg, sizeof(msg))) {
		end_job(be, job, NULL, KVP_E_INTERNAL, msg);
		return true;
	}
again:
	i = pick(be);
	if (i < 0) {
		if (atomic_load(&be->up)) {
			if (front) {
				job->next = be->wait;
				be->wait = job;
				if (!be->wait_tail)
					be->wait_tail = job;
			} else {
				wait_push(be, job);
			}
			return false;
		} else {
			snprintf(msg, sizeof(msg), "kvpoold is not reachable at %s: %s", be->path,
				 be->last_err[0] ? be->last_err : "no connection yet");
			end_job(be, job, NULL, -ENOTCONN, msg);
		}
		return true;
	}
	r = send_job(be->conns[i].c, job);
	if (r > 0 || r == -EINVAL || r == -EMSGSIZE || r == -ENOMEM) {
		/* refused before anything was sent: the request's fault, not the link's */
		snprintf(msg, sizeof(msg), "%s",
			 r == -ENOMEM ? "out of memory" : kvp_client_errmsg(be->conns[i].c));
		end_job(be, job, NULL, r, msg);
		return true;
	}
	if (r) {
		conn_down(be, (unsigned int)i, -ENOTCONN, kvp_client_errmsg(be->conns[i].c));
		if (++tries < 2)
			goto again; /* nothing reached kvpoold: try once on a fresh connection */
		end_job(be, job, NULL, -ENOTCONN, "connection to kvpoold lost while sending");
		return true;
	}
	for (unsigned int s = 0; s < be->per_conn; s++) {
		if (!be->conns[i].slots[s]) {
			be->conns[i].slots[s] = job;
			break;
		}
	}
	be->conns[i].n++;
	job->conn = i;
	job->cancel_sent = false;
	return true;
}

/* Send waiting jobs while there are slots (the cancelled ones end); oldest first. */
static void drain_wait(struct kvp_http_backend *be)
{
	while (be->wait) {
		struct kvp_http_job *job = be->wait;

		be->wait = job->next;
		if (!be->wait)
			be->wait_tail = NULL;
		if (!dispatch(be, job, true))
			return;
	}
}

/* End every waiting job with @status. */
static void wait_end_all(struct kvp_http_backend *be, int status, const char *msg)
{
	while (be->wait) {
		struct kvp_http_job *job = be->wait;

		be->wait = job->next;
		end_job(be, job, NULL, status, msg);
	}
	be->wait_tail = NULL;
}

/* End the waiting jobs that were cancelled (all of them with @all). */
static void wait_cancels(struct kvp_http_backend *be, bool all)
{
	struct kvp_http_job **pp = &be->wait, *job;

	be->wait_tail = NULL;
	while ((job = *pp)) {
		if (all || atomic_load(&job->cancel)) {
			*pp = job->next;
			end_job(be, job, NULL, KVP_E_CANCELLED, "cancelled while it waited");
			continue;
		}
		be->wait_tail = job;
		pp = &job->next;
	}
}

static struct kvp_http_job **find_slot(struct kvp_http_backend *be, unsigned int i, uint64_t id)
{
	for (unsigned int s = 0; s < be->per_conn; s++)
		if (be->conns[i].slots[s] && be->conns[i].slots[s]->req_id == id)
			return &be->conns[i].slots[s];
	return NULL;
}

/* One frame from connection @i. */
static void read_one(struct kvp_http_backend *be, unsigned int i)
{
	struct bconn *b = &be->conns[i];
	struct kvp_client_event ev;
	struct kvp_http_job **slot, *job;
	int r;

	r = kvp_client_next(b->c, &ev);
	if (r) {
		conn_down(be, i, -ENOTCONN, kvp_client_errmsg(b->c));
		return;
	}
	if (!ev.req_id) {
		if (ev.type == KVP_EVENT_ERROR)
			conn_down(be, i, ev.status == KVP_E_SHUTDOWN ? KVP_E_SHUTDOWN : -ENOTCONN,
				  ev.message);
		return;
	}
	slot = find_slot(be, i, ev.req_id);
	if (!slot)
		return; /* not ours (cannot happen: ids are this connection's) */
	job = *slot;
	switch (ev.type) {
	case KVP_EVENT_IDS:
		if (job->ops->ids)
			job->ops->ids(job, ev.tokens, ev.n_tokens, ev.text, ev.text_len);
		return;
	case KVP_EVENT_TOKEN:
		if (ev.usage.prompt_tokens && job->ops->usage)
			job->ops->usage(job, &ev.usage);
		job->lp = NULL;
		job->vocab = be->vocab;
		if (job->has_samp && job->samp.logprobs && ev.n_tokens)
			take_logprobs(be, b->c, job, &ev);
		r = kvp_client_event_cont(b->c);
		job->cont = r > 0 ? (uint32_t)r : 0;
		if (job->ops->tokens(job, ev.tokens, ev.n_tokens, ev.text, ev.text_len))
			atomic_store(&job->cancel, true);
		if (atomic_load(&job->cancel))
			send_cancel(be, job);
		return;
	case KVP_EVENT_DONE:
		*slot = NULL;
		b->n--;
		job->has_su = kvp_client_event_spec(b->c, &job->su) == 1;
		end_job(be, job, &ev.usage, (int)ev.usage.status, NULL);
		return;
	case KVP_EVENT_ERROR:
		*slot = NULL;
		b->n--;
		end_job(be, job, NULL, ev.status, ev.message);
		return;
	}
}

/*
 * Send the cancels asked for (every job's with @all).  Walks the slots as they are now:
 * a failed send closes its connection and ends that connection's jobs, so no pointer to
 * a job is kept across a send.
 */
static void send_cancels(struct kvp_http_backend *be, bool all)
{
	for (unsigned int i = 0; i < be->n_conns; i++) {
		for (unsigned int s = 0; be->conns[i].c && s < be->per_conn; s++) {
			struct kvp_http_job *job = be->conns[i].slots[s];

			if (job && all)
				atomic_store(&job->cancel, true);
			if (job && atomic_load(&job->cancel) && !job->cancel_sent)
				send_cancel(be, job);
		}
	}
}

static void *run(void *arg)
{
	struct kvp_http_backend *be = arg;
	size_t max_fds = 1 + be->n_conns + (size_t)be->n_conns * be->per_conn + be->queue;
	struct pollfd *pfd = calloc(max_fds, sizeof(*pfd));
	struct kvp_http_job **watched = calloc(max_fds, sizeof(*watched));
	unsigned int *conn_of = calloc(max_fds, sizeof(*conn_of));
	uint64_t next_idle_try = 0;

	if (!pfd || !watched || !conn_of) {
		kvp_log(LOG_CRIT, "backend: out of memory at start");
		abort(); /* nothing could ever be served: let systemd restart us */
	}
	for (;;) {
		struct kvp_http_job *jobs, *next;
		bool stopping, cancel_all;
		size_t n = 1, first_watch;
		int timeout = -1;

		pthread_mutex_lock(&be->lock);
		jobs = be->inbox;
		be->inbox = be->inbox_tail = NULL;
		stopping = be->stopping;
		cancel_all = be->cancel_all;
		be->cancel_all = false;
		pthread_mutex_unlock(&be->lock);

		if (stopping)
			wait_end_all(be, -ESHUTDOWN, "kvpool-http is stopping");
		else
			drain_wait(be);
		for (; jobs; jobs = next) {
			next = jobs->next;
			if (stopping)
				end_job(be, jobs, NULL, -ESHUTDOWN, "kvpool-http is stopping");
			else if (be->wait)
				wait_push(be, jobs); /* behind those that came first */
			else
				dispatch(be, jobs, false);
		}
		if (stopping)
			break;
		send_cancels(be, cancel_all);
		wait_cancels(be, cancel_all);
		if (!atomic_load(&be->up)) {
			uint64_t now = kvp_now_ns();

			if (now >= next_idle_try) {
				next_idle_try = now + IDLE_RETRY_MS * 1000000ull;
				be->conns[0].retry_ns = 0;
				connect_conn(be, 0);
			}
			if (!atomic_load(&be->up))
				timeout = IDLE_RETRY_MS;
		}

		pfd[0] = (struct pollfd){ .fd = be->efd, .events = POLLIN };
		for (unsigned int i = 0; i < be->n_conns; i++) {
			if (!be->conns[i].c)
				continue;
			conn_of[n] = i;
			pfd[n++] = (struct pollfd){ .fd = kvp_client_socket_fd(be->conns[i].c),
						    .events = POLLIN };
		}
		first_watch = n;
		for (unsigned int i = 0; i < be->n_conns; i++) {
			for (unsigned int s = 0; be->conns[i].c && s < be->per_conn; s++) {
				struct kvp_http_job *job = be->conns[i].slots[s];
				int fd;

				if (!job || job->hung_up || (fd = job->ops->watch_fd(job)) < 0)
					continue;
				watched[n] = job;
				pfd[n++] = (struct pollfd){ .fd = fd, .events = POLLRDHUP };
			}
		}
		for (struct kvp_http_job *job = be->wait; job; job = job->next) {
			int fd;

			if (job->hung_up || (fd = job->ops->watch_fd(job)) < 0)
				continue;
			watched[n] = job;
			pfd[n++] = (struct pollfd){ .fd = fd, .events = POLLRDHUP };
		}
		if (poll(pfd, n, timeout) < 0)
			continue; /* EINTR */
		if (pfd[0].revents) {
			uint64_t v;

			(void)!read(be->efd, &v, sizeof(v));
		}
		/* hang-ups first: their jobs are all still in their slots now */
		for (size_t k = first_watch; k < n; k++) {
			struct kvp_http_job *job = watched[k];

			if (!(pfd[k].revents & (POLLRDHUP | POLLHUP | POLLERR)))
				continue;
			job->hung_up = true;
			atomic_store(&job->cancel, true);
			job->ops->hangup(job);
		}
		send_cancels(be, false);
		wait_cancels(be, false);
		for (size_t k = 1; k < first_watch; k++) {
			struct bconn *b = &be->conns[conn_of[k]];

			if (!pfd[k].revents)
				continue;
			for (int f = 0; f < FRAMES_PER_ROUND && b->c; f++) {
				int avail = 0;

				read_one(be, conn_of[k]);
				if (!b->c ||
				    ioctl(kvp_client_socket_fd(b->c), FIONREAD, &avail) < 0 ||
				    avail < (int)sizeof(struct kvp_frame_hdr))
					break;
			}
		}
	}
	for (unsigned int i = 0; i < be->n_conns; i++)
		conn_down(be, i, -ESHUTDOWN, "kvpool-http is stopping");
	free(pfd);
	free(watched);
	free(conn_of);
	return NULL;
}

int kvp_http_backend_new(struct kvp_http_backend **out, const char *socket_path,
			 unsigned int n_conns, unsigned int per_conn, unsigned int queue)
{
	struct kvp_http_backend *be;
	int r;

	if (!n_conns || !per_conn || strlen(socket_path) >= sizeof(be->path))
		return -EINVAL;
	be = calloc(1, sizeof(*be));
	if (!be)
		return -ENOMEM;
	strcpy(be->path, socket_path);
	be->n_conns = n_conns;
	be->per_conn = per_conn;
	be->queue = queue;
	be->efd = -1;
	pthread_mutex_init(&be->lock, NULL);
	be->conns = calloc(n_conns, sizeof(*be->conns));
	if (!be->conns) {
		r = -ENOMEM;
		goto err_free;
	}
	for (unsigned int i = 0; i < n_conns; i++) {
		be->conns[i].slots = calloc(per_conn, sizeof(*be->conns[i].slots));
		if (!be->conns[i].slots) {
			r = -ENOMEM;
			goto err_free;
		}
	}
	be->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (be->efd < 0) {
		r = -errno;
		goto err_free;
	}
	/* the first connection now, so the model is known before the first request */
	if (connect_conn(be, 0))
		kvp_log(LOG_WARNING,
			"backend: kvpoold is not reachable at %s yet: %s; retrying every %d ms",
			be->path, be->last_err, IDLE_RETRY_MS);
	r = -pthread_create(&be->thread, NULL, run, be);
	if (r)
		goto err_free;
	be->started = true;
	*out = be;
	return 0;

err_free:
	kvp_http_backend_free(be);
	return r;
}

void kvp_http_backend_free(struct kvp_http_backend *be)
{
	if (!be)
		return;
	if (be->started) {
		pthread_mutex_lock(&be->lock);
		be->stopping = true;
		pthread_mutex_unlock(&be->lock);
		wake(be);
		pthread_join(be->thread, NULL);
	} else {
		for (unsigned int i = 0; be->conns && i < be->n_conns; i++)
			kvp_client_close(be->conns[i].c);
	}
	for (unsigned int i = 0; be->conns && i < be->n_conns; i++)
		free(be->conns[i].slots);
	free(be->conns);
	if (be->efd >= 0)
		close(be->efd);
	pthread_mutex_destroy(&be->lock);
	kvp_http_vocab_free(be->vocab);
	free(be->lp);
	free(be);
}

int kvp_http_backend_reserve(struct kvp_http_backend *be)
{
	unsigned int cap = be->n_conns * be->per_conn + be->queue;

	if (atomic_fetch_add(&be->busy, 1) >= cap) {
		atomic_fetch_sub(&be->busy, 1);
		return -EBUSY;
	}
	return 0;
}

void kvp_http_backend_unreserve(struct kvp_http_backend *be)
{
	atomic_fetch_sub(&be->busy, 1);
}

void kvp_http_backend_submit(struct kvp_http_backend *be, struct kvp_http_job *job)
{
	job->next = NULL;
	job->conn = -1;
	job->hung_up = false;
	pthread_mutex_lock(&be->lock);
	if (be->inbox_tail)
		be->inbox_tail->next = job;
	else
		be->inbox = job;
	be->inbox_tail = job;
	pthread_mutex_unlock(&be->lock);
	wake(be);
}

void kvp_http_backend_cancel(struct kvp_http_backend *be, struct kvp_http_job *job)
{
	atomic_store(&job->cancel, true);
	wake(be);
}

void kvp_http_backend_cancel_all(struct kvp_http_backend *be)
{
	pthread_mutex_lock(&be->lock);
	be->cancel_all = true;
	pthread_mutex_unlock(&be->lock);
	wake(be);
}

void kvp_http_backend_wake(struct kvp_http_backend *be)
{
	wake(be);
}

unsigned int kvp_http_backend_busy(struct kvp_http_backend *be)
{
	return atomic_load(&be->busy);
}

unsigned int kvp_http_backend_up(struct kvp_http_backend *be)
{
	return atomic_load(&be->up);
}

void kvp_http_backend_info(struct kvp_http_backend *be, struct kvp_http_backend_info *info)
{
	pthread_mutex_lock(&be->lock);
	*info = be->info;
	pthread_mutex_unlock(&be->lock);
}
