/* SPDX-License-Identifier: MIT */
/*
 * remote.c - the remote tier: queues shared with the engine, and the I/O thread that
 * drives two store connections per trust domain (see remote.h).
 *
 * Shared state (queues, breakers, counters, completions) is under r->lock, held only
 * for O(1) work (a fetch's token copy at most); every socket, hiredis context, encode,
 * check and copy of K/V belongs to the I/O thread and happens outside the lock.
 *
 * Queues.  Publishes: a ring per domain of queue_blocks entries.  The engine writes at
 * the tail; the I/O thread reads the entry at the head outside the lock and advances the
 * head under it.  An entry counts against the bound (pub_inflight) from publish until
 * its completion is polled, so the engine can never write a slot the I/O thread is
 * reading.  Fetches: the same, with fetch_queue entries whose arrays are allocated once.
 * Completions: one ring, sized to every bound together, so it never overflows.
 *
 * The I/O thread's turn: for each domain, the breaker (probe due? open: fail what is
 * queued), deadlines, then new work (the fetch at the head of the queue; publishes
 * while the connection has room); then poll() on the wake-up eventfd and every
 * connection, to the nearest deadline; then reads and replies.
 */
#include "shm/remote/remote.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <malloc.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "shm/remote/breaker.h"
#include "shm/remote/codec.h"
#include "shm/remote/conn.h"
#include "shm/remote/cost.h"
#include "util/errmsg.h"
#include "util/samples.h"
#include "util/time.h"

#define READ_CHUNK (256u << 10) /* one read(2) */
#define READ_BUDGET (8u << 20)	/* bytes read from one connection per turn */
#ifndef PUB_WINDOW
#define PUB_WINDOW (1u << 20) /* unsent bytes the publish lane keeps in hiredis */
#endif
#define PUB_MAX_OWED 64u	  /* values in flight per lane, at most */
#define POLL_MAX_NS 1000000000ull /* a turn at least every second */
#define MS 1000000ull

/*
 * Values in flight per lane (at most PUB_MAX_OWED): enough to keep the connection busy,
 * few enough that the store never buffers a whole fetch (Redis builds its replies to
 * everything it has read before it writes any: 256 GETs of 516 KiB would be 135 MB of
 * output buffers on the store, and a silence long enough to look like a stall).
 */
#ifndef WINDOW_BYTES
#define WINDOW_BYTES (4u << 20)
#endif

/* one queued publish (copied at kvp_remote_publish(), but the K/V) */
struct pub {
	uint64_t tag;
	const void *kv;
	struct kvp_prefix_key key;
	struct kvp_h128 hash;
	struct kvp_h128 phash;
	uint32_t *tokens; /* dom->pub_tokens + slot * block_tokens */
};

enum fphase { F_IDLE = 0, F_EXISTS = 1, F_GET = 2 };

/* one queued fetch; arrays allocated once per slot (max_fetch_blocks) */
struct fop {
	uint64_t tag;
	uint64_t submit_ns;
	uint64_t deadline_ns;
	struct kvp_prefix_key key;
	struct kvp_h128 parent;
	double prefill_tps;
	uint32_t n_blocks;
	uint32_t *tokens;
	void **dest;
	struct kvp_h128 *hash;
	struct kvp_h128 *digest;
	/* I/O thread progress */
	uint32_t phase;
	uint32_t n_replies;
	uint32_t n_found;
	uint32_t n_get;
	uint32_t n_sent; /* GETs sent so far (a window ahead of n_ok) */
	uint32_t n_ok;
	bool counting;	/* still inside the leading run of found blocks */
	bool err_reply; /* the existence check got an error reply */
	bool cut;	/* trimmed to what fits the deadline */
	uint64_t sent_ns;
};

enum pkind { P_BLOCK = 0, P_ROUTE = 1 };

struct dom {
	struct kvp_remote_domain_config cfg;
	uint32_t id;

	/* shared: under r->lock */
	struct pub *pubs;
	uint32_t *pub_tokens;
	uint32_t pub_head, pub_tail, pub_inflight;
	struct fop *fops;
	uint32_t f_head, f_tail, f_inflight;
	struct kvp_breaker br;
	struct kvp_remote_stats st;
	struct kvp_samples lat; /* fetch latencies, ms (over lat_buf) */
	double *lat_buf;
	uint8_t *route; /* a chain summary waiting to be sent (owned) */
	size_t route_len;
	char route_key[KVP_REMOTE_KEY_MAX + KVP_REMOTE_HOST_ID_MAX];
	uint32_t route_ttl;
	int last_err;
	bool busy; /* the I/O thread has replies owed or a fetch in progress */
	/* finished operations of this domain: its engine takes only its own (the cookies
	 * and blocks in them are that engine's); a ring bounded by queue_blocks +
	 * fetch_queue, never full */
	struct kvp_remote_done *done;
	uint32_t done_head, done_n;
	int done_fd; /* I/O thread -> this domain's engine */
	bool notify; /* completions posted this turn */

	/* the I/O thread's */
	struct kvp_rconn fc; /* fetch lane (and probes) */
	struct kvp_rconn pc; /* publish lane */
	struct fop *cur;
	bool probing;
	uint8_t kinds[PUB_MAX_OWED]; /* enum pkind of each SET owed, in order */
	uint32_t kinds_head, kinds_n;
};

struct kvp_remote {
	struct kvp_remote_config cfg;
	struct kvp_remote_codec codec;
	uint32_t n_doms;
	struct dom *doms;

	pthread_mutex_t lock;
	pthread_cond_t cond; /* broadcast after every turn of the I/O thread */
	bool lock_ok, cond_ok;
	bool stop;
	bool notify; /* completions posted this turn */
	uint64_t turn;
	bool idle;
	uint32_t done_cap; /* each domain's ring */
	uint32_t done_n;   /* completions waiting, all domains */
	struct kvp_remote_est est;
	kvp_remote_hook_fn hook;
	void *hook_ctx;

	int wake_fd; /* engine -> I/O thread */
	int done_fd; /* I/O thread -> a caller polling every domain (kvp_remote_poll()) */
	pthread_t thread;
	bool thread_ok;

	/* the I/O thread's */
	uint8_t *scratch;
	uint8_t *vbuf;
	uint32_t window; /* values in flight per lane (WINDOW_BYTES) */
	struct pollfd *pfd;
	struct kvp_rconn **pconn;
	struct dom **pdom;
};

/* ---- small helpers ---- */

static void lock(struct kvp_remote *r)
{
	pthread_mutex_lock(&r->lock);
}

static void unlock(struct kvp_remote *r)
{
	pthread_mutex_unlock(&r->lock);
}

static void poke(int fd)
{
	uint64_t one = 1;

	/* an eventfd write fails only when the counter would overflow: it is set then */
	(void)!write(fd, &one, sizeof(one));
}

static uint32_t bt_of(const struct kvp_remote *r)
{
	return r->codec.lay.shape.block_tokens;
}

static bool h128_eq(struct kvp_h128 a, struct kvp_h128 b)
{
	return a.lo == b.lo && a.hi == b.hi;
}

/* Post a completion to its domain's ring (locked).  The ring holds the domain's bounds
 * together: never full. */
static void post_done(struct kvp_remote *r, const struct kvp_remote_done *d)
{
	struct dom *dm = &r->doms[d->domain];
	uint32_t i = (dm->done_head + dm->done_n) % r->done_cap;

	dm->done[i] = *d;
	dm->done_n++;
	dm->notify = true;
	r->done_n++;
	r->notify = true;
}

/* Record a failure's words for the status and the start-up log (locked). */
static void note_error(struct kvp_remote *r, struct dom *d, int err, const char *what)
{
	snprintf(d->st.last_error, sizeof(d->st.last_error), "%.100s: %.120s", r->cfg.url, what);
	d->last_err = err;
}

/* ---- fetch lane ---- */

static void finish_fetch(struct kvp_remote *r, struct dom *d, uint32_t stop, uint64_t now)
{
	struct fop *f = d->cur;
	struct kvp_remote_done done = {
		.tag = f->tag,
		.kind = KVP_REMOTE_DONE_FETCH,
		.domain = d->id,
		.result = (int32_t)f->n_ok,
		.n_found = f->n_found,
		.stop = stop,
		.elapsed_ns = now - f->submit_ns,
	};
	bool reached = f->phase != F_IDLE;
	uint64_t rtt;

	/* replies still owed would arrive for the next fetch: drop the connection */
	if (d->fc.owed)
		kvp_rconn_close(&d->fc);
	lock(r);
	rtt = (uint64_t)r->est.rtt_ns;
	if (f->phase == F_GET && f->n_ok && now - f->sent_ns > rtt)
		kvp_remote_est_bw(&r->est, (uint64_t)f->n_ok * r->codec.value_bytes,
				  now - f->sent_ns - rtt);
	d->st.hit_blocks += f->n_ok;
	d->st.hit_bytes += (uint64_t)f->n_ok * r->codec.lay.block_bytes;
	d->st.holes += stop == KVP_REMOTE_STOP_MISS;
	d->st.cost_skips += stop == KVP_REMOTE_STOP_COST;
	d->st.deadline_cuts += stop == KVP_REMOTE_STOP_DEADLINE || f->cut;
	if (reached) {
		kvp_samples_add(&d->lat, (double)(now - f->submit_ns) / 1e6);
	}
	post_done(r, &done);
	d->f_head++;
	unlock(r);
	d->cur = NULL;
}

static int append_key_cmd(struct kvp_remote *r, struct dom *d, struct kvp_rconn *c, const char *cmd,
			  struct kvp_h128 digest, uint64_t now)
{
	char key[KVP_REMOTE_KEY_MAX];
	const char *argv[2] = { cmd, key };
	size_t lens[2] = { strlen(cmd), 0 };
	int n = kvp_remote_block_key(key, sizeof(key), d->cfg.name, digest);

	if (n < 0)
		return n;
	lens[1] = (size_t)n;
	return kvp_rconn_append(c, 2, argv, lens, now);
}

/* Hash the chain, then one EXISTS per block, pipelined. */
static int start_exists(struct kvp_remote *r, struct dom *d, struct fop *f, uint64_t now)
{
	uint32_t bt = bt_of(r);
	struct kvp_h128 h = f->parent;

	for (uint32_t j = 0; j < f->n_blocks; j++) {
		int e;

		h = kvp_chain_hash(h, f->tokens + (size_t)j * bt, bt);
		f->hash[j] = h;
		f->digest[j] = kvp_remote_digest(&r->codec, h, f->key.seed);
		e = append_key_cmd(r, d, &d->fc, "EXISTS", f->digest[j], now);
		if (e < 0)
			return e;
	}
	f->phase = F_EXISTS;
	f->n_replies = 0;
	f->n_found = 0;
	f->counting = true;
	f->sent_ns = now;
	lock(r);
	d->st.exist_checked += f->n_blocks;
	unlock(r);
	return 0;
}

/* Keep a window of GETs ahead of the values checked so far. */
static int top_up_gets(struct kvp_remote *r, struct dom *d, struct fop *f, uint64_t now)
{
	while (f->n_sent < f->n_get && f->n_sent - f->n_ok < r->window) {
		int e = append_key_cmd(r, d, &d->fc, "GET", f->digest[f->n_sent], now);

		if (e < 0)
			return e;
		f->n_sent++;
	}
	return 0;
}

/* The existence check is in: weigh, then ask for the values. */
static int start_get(struct kvp_remote *r, struct dom *d, struct fop *f, uint64_t now)
{
	struct kvp_remote_est est;
	uint64_t left = f->deadline_ns > now ? f->deadline_ns - now : 0;
	kvp_remote_hook_fn hook;
	uint32_t k, k_any;
	void *hook_ctx;

	lock(r);
	kvp_remote_est_rtt(&r->est, now - f->sent_ns);
	est = r->est;
	d->st.exist_found += f->n_found;
	hook = r->hook;
	hook_ctx = r->hook_ctx;
	unlock(r);
	if (hook)
		hook(hook_ctx, d->id, f->n_found);
	if (!f->n_found) {
		finish_fetch(r, d, f->err_reply ? KVP_REMOTE_STOP_ERROR : KVP_REMOTE_STOP_MISS,
			     now);
		return 0;
	}
	k = kvp_remote_plan(&est, f->n_found, r->codec.value_bytes, bt_of(r), f->prefill_tps, left);
	if (!k) {
		/* without a deadline, would it have been worth it? */
		k_any = kvp_remote_plan(&est, f->n_found, r->codec.value_bytes, bt_of(r),
					f->prefill_tps, UINT64_MAX / 4);
		finish_fetch(r, d, k_any ? KVP_REMOTE_STOP_DEADLINE : KVP_REMOTE_STOP_COST, now);
		return 0;
	}
	f->cut = k < f->n_found;
	f->phase = F_GET;
	f->n_get = k;
	f->n_ok = 0;
	f->n_sent = 0;
	f->sent_ns = now;
	return top_up_gets(r, d, f, now);
}

static void reply_error(struct kvp_remote *r, struct dom *d, const char *cmd, const redisReply *rep)
{
	char what[200];

	snprintf(what, sizeof(what), "%s: %.150s", cmd,
		 rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply type");
	lock(r);
	d->st.error_replies++;
	note_error(r, d, -EIO, what);
	unlock(r);
}

static int on_fetch_reply(struct kvp_remote *r, struct dom *d, redisReply *rep, uint64_t now)
{
	struct fop *f = d->cur;

	if (!f)
		return -EPROTO; /* nothing was asked on this lane: out of step */
	if (f->phase == F_EXISTS) {
		if (rep->type == REDIS_REPLY_INTEGER) {
			if (f->counting && rep->integer == 1)
				f->n_found++;
			else
				f->counting = false;
		} else {
			f->counting = false;
			f->err_reply = true;
			reply_error(r, d, "EXISTS", rep);
		}
		if (++f->n_replies == f->n_blocks)
			return start_get(r, d, f, now);
		return 0;
	}
	if (f->phase == F_GET) {
		uint32_t j = f->n_ok, bt = bt_of(r);
		struct kvp_remote_expect e = {
			.digest = f->digest[j],
			.hash = f->hash[j],
			.phash = j ? f->hash[j - 1] : f->parent,
			.key = &f->key,
			.tokens = f->tokens + (size_t)j * bt,
			.first = j == 0 && h128_eq(f->parent, f->key.seed),
		};

		if (rep->type == REDIS_REPLY_NIL) {
			finish_fetch(r, d, KVP_REMOTE_STOP_MISS, now); /* gone since EXISTS */
			return 0;
		}
		if (rep->type != REDIS_REPLY_STRING) {
			reply_error(r, d, "GET", rep);
			finish_fetch(r, d, KVP_REMOTE_STOP_ERROR, now);
			return 0;
		}
		if (kvp_remote_value_check((const uint8_t *)rep->str, rep->len, &r->codec, &e,
					   f->dest[j]) < 0) {
			lock(r);
			d->st.verify_failures++;
			unlock(r);
			finish_fetch(r, d, KVP_REMOTE_STOP_VERIFY, now);
			return 0;
		}
		if (++f->n_ok == f->n_get)
			finish_fetch(r, d,
				     f->n_get < f->n_found    ? KVP_REMOTE_STOP_DEADLINE :
				     f->n_found < f->n_blocks ? KVP_REMOTE_STOP_MISS :
								KVP_REMOTE_STOP_END,
				     now);
		else
			return top_up_gets(r, d, f, now);
		return 0;
	}
	return -EPROTO;
}

/* ---- publish lane ---- */

static void push_kind(struct dom *d, enum pkind k)
{
	d->kinds[(d->kinds_head + d->kinds_n) % PUB_MAX_OWED] = (uint8_t)k;
	d->kinds_n++;
}

static int on_publish_reply(struct kvp_remote *r, struct dom *d, redisReply *rep)
{
	enum pkind k;

	if (!d->kinds_n)
		return -EPROTO;
	k = d->kinds[d->kinds_head];
	d->kinds_head = (d->kinds_head + 1) % PUB_MAX_OWED;
	d->kinds_n--;
	if (rep->type == REDIS_REPLY_ERROR) {
		reply_error(r, d, "SET", rep);
		lock(r);
		d->st.publish_errors += k == P_BLOCK;
		unlock(r);
		/* a replica after a failover, a store loading its data: reconnecting (to the
		 * new primary, through Sentinel or the proxy) is what helps */
		if (!strncmp(rep->str, "READONLY", 8) || !strncmp(rep->str, "LOADING", 7) ||
		    !strncmp(rep->str, "MASTERDOWN", 10))
			return -EAGAIN;
		return 0;
	}
	lock(r);
	if (k == P_ROUTE)
		d->st.route_published += rep->type == REDIS_REPLY_STATUS;
	else if (rep->type == REDIS_REPLY_STATUS)
		d->st.stored++;
	else if (rep->type == REDIS_REPLY_NIL)
		d->st.already++;
	unlock(r);
	return 0;
}

/* Queue SETs while the connection has room. */
static int pump_publishes(struct kvp_remote *r, struct dom *d, uint64_t now)
{
	char key[KVP_REMOTE_KEY_MAX], ttl[16];
	const char *argv[6];
	size_t lens[6];

	snprintf(ttl, sizeof(ttl), "%u", r->cfg.ttl_s);
	while (d->pc.owed < r->window && kvp_rconn_unsent(&d->pc) < PUB_WINDOW) {
		struct kvp_remote_done done = { .kind = KVP_REMOTE_DONE_PUBLISH, .domain = d->id };
		struct kvp_index_rec rec;
		struct kvp_h128 digest;
		uint8_t *route;
		struct pub *p;
		int n, e;

		lock(r);
		route = d->route;
		if (route) {
			size_t len = d->route_len;
			char rkey[sizeof(d->route_key)];
			char rttl[16];

			d->route = NULL;
			strcpy(rkey, d->route_key);
			snprintf(rttl, sizeof(rttl), "%u", d->route_ttl);
			unlock(r);
			argv[0] = "SET", lens[0] = 3;
			argv[1] = rkey, lens[1] = strlen(rkey);
			argv[2] = (const char *)route, lens[2] = len;
			argv[3] = "EX", lens[3] = 2;
			argv[4] = rttl, lens[4] = strlen(rttl);
			e = kvp_rconn_append(&d->pc, 5, argv, lens, now);
			free(route);
			if (e < 0)
				return e;
			push_kind(d, P_ROUTE);
			continue;
		}
		if (d->pub_head == d->pub_tail) {
			unlock(r);
			break;
		}
		p = &d->pubs[d->pub_head % r->cfg.queue_blocks];
		unlock(r);

		/* the entry stays put until the head moves (remote.c's header) */
		digest = kvp_remote_digest(&r->codec, p->hash, p->key.seed);
		n = kvp_remote_block_key(key, sizeof(key), d->cfg.name, digest);
		if (n < 0)
			return n;
		rec = (struct kvp_index_rec){
			.hash = p->hash, .phash = p->phash, .key = p->key, .tokens = p->tokens
		};
		kvp_remote_value_encode(r->vbuf, &r->codec, digest, &rec, p->kv);
		argv[0] = "SET", lens[0] = 3;
		argv[1] = key, lens[1] = (size_t)n;
		argv[2] = (const char *)r->vbuf, lens[2] = r->codec.value_bytes;
		argv[3] = "NX", lens[3] = 2;
		argv[4] = "EX", lens[4] = 2;
		argv[5] = ttl, lens[5] = strlen(ttl);
		e = kvp_rconn_append(&d->pc, 6, argv, lens, now);
		if (e < 0)
			return e;
		push_kind(d, P_BLOCK);
		done.tag = p->tag;
		lock(r);
		d->pub_head++;
		d->st.bytes_written += r->codec.value_bytes;
		post_done(r, &done);
		unlock(r);
	}
	return 0;
}

/* ---- connections and the breaker ---- */

static int open_conn(struct kvp_remote *r, struct dom *d, struct kvp_rconn *c, uint64_t now)
{
	return kvp_rconn_open(c, &r->cfg.addr, d->cfg.user, d->cfg.password, now);
}

/* Publishes sent but not answered are lost with their connection. */
static void lose_publishes(struct kvp_remote *r, struct dom *d)
{
	uint32_t lost = 0;

	for (uint32_t i = 0; i < d->kinds_n; i++)
		lost += d->kinds[(d->kinds_head + i) % PUB_MAX_OWED] == P_BLOCK;
	d->kinds_n = 0;
	d->kinds_head = 0;
	if (lost) {
		lock(r);
		d->st.publish_lost += lost;
		unlock(r);
	}
}

/* A connection failed: close it, count it, tell the breaker (or the probe). */
static void conn_failed(struct kvp_remote *r, struct dom *d, struct kvp_rconn *c, int err,
			uint64_t now)
{
	bool probe = c == &d->fc && d->probing;

	if (c == &d->fc && d->cur)
		finish_fetch(r, d, KVP_REMOTE_STOP_ERROR, now);
	if (c == &d->pc)
		lose_publishes(r, d);
	lock(r);
	d->st.errors++;
	note_error(r, d, err, c->errstr[0] ? c->errstr : strerror(-err));
	if (probe)
		kvp_breaker_probe_done(&d->br, false, now);
	else
		kvp_breaker_failure(&d->br, now);
	d->st.breaker_opens = d->br.opens;
	unlock(r);
	if (probe)
		d->probing = false;
	kvp_rconn_close(c);
}

/* The breaker is not closed: nothing queued may wait for it. */
static void fail_queued(struct kvp_remote *r, struct dom *d, uint64_t now)
{
	if (d->cur)
		finish_fetch(r, d, KVP_REMOTE_STOP_OFF, now);
	lose_publishes(r, d);
	kvp_rconn_close(&d->pc);
	lock(r);
	while (d->f_head != d->f_tail) {
		struct fop *f = &d->fops[d->f_head % r->cfg.fetch_queue];
		struct kvp_remote_done done = { .tag = f->tag,
						.kind = KVP_REMOTE_DONE_FETCH,
						.domain = d->id,
						.stop = KVP_REMOTE_STOP_OFF,
						.elapsed_ns = now - f->submit_ns };

		post_done(r, &done);
		d->f_head++;
	}
	while (d->pub_head != d->pub_tail) {
		struct pub *p = &d->pubs[d->pub_head % r->cfg.queue_blocks];
		struct kvp_remote_done done = { .tag = p->tag,
						.kind = KVP_REMOTE_DONE_PUBLISH,
						.domain = d->id,
						.result = -ENODEV };

		post_done(r, &done);
		d->st.publish_off_drops++;
		d->pub_head++;
	}
	free(d->route);
	d->route = NULL;
	unlock(r);
}

static void step_fetch(struct kvp_remote *r, struct dom *d, uint64_t now)
{
	struct fop *f;
	int e;

	if (!d->cur) {
		lock(r);
		if (d->f_head != d->f_tail) {
			d->cur = &d->fops[d->f_head % r->cfg.fetch_queue];
			d->cur->phase = F_IDLE;
		}
		unlock(r);
		if (!d->cur)
			return;
	}
	f = d->cur;
	if (now >= f->deadline_ns) {
		finish_fetch(r, d, KVP_REMOTE_STOP_DEADLINE, now);
		return;
	}
	if (d->fc.state == KVP_RCONN_DOWN) {
		e = open_conn(r, d, &d->fc, now);
		if (e < 0) {
			conn_failed(r, d, &d->fc, e, now);
			return;
		}
	}
	if (!kvp_rconn_ready(&d->fc) || f->phase != F_IDLE)
		return;
	e = start_exists(r, d, f, now);
	if (e < 0)
		conn_failed(r, d, &d->fc, e, now);
}

static void step_publish(struct kvp_remote *r, struct dom *d, uint64_t now)
{
	bool work;
	int e;

	lock(r);
	work = d->pub_head != d->pub_tail || d->route;
	unlock(r);
	if (!work)
		return;
	if (d->pc.state == KVP_RCONN_DOWN) {
		e = open_conn(r, d, &d->pc, now);
		if (e < 0) {
			conn_failed(r, d, &d->pc, e, now);
			return;
		}
	}
	if (!kvp_rconn_ready(&d->pc))
		return;
	e = pump_publishes(r, d, now);
	if (e < 0)
		conn_failed(r, d, &d->pc, e, now);
}

static void step_domain(struct kvp_remote *r, struct dom *d, uint64_t now)
{
	bool probe, closed;
	int e;

	lock(r);
	probe = kvp_breaker_probe_due(&d->br, now);
	closed = kvp_breaker_closed(&d->br);
	d->st.probes = d->br.probes;
	unlock(r);
	if (probe) {
		kvp_rconn_close(&d->fc);
		d->probing = true;
		e = open_conn(r, d, &d->fc, now);
		if (e < 0)
			conn_failed(r, d, &d->fc, e, now);
	}
	if (!closed) {
		fail_queued(r, d, now);
		if (!d->probing)
			kvp_rconn_close(&d->fc);
		else if ((e = kvp_rconn_check_time(&d->fc, now)) < 0)
			conn_failed(r, d, &d->fc, e, now);
		return;
	}
	if (d->fc.state != KVP_RCONN_DOWN && (e = kvp_rconn_check_time(&d->fc, now)) < 0)
		conn_failed(r, d, &d->fc, e, now);
	if (d->pc.state != KVP_RCONN_DOWN && (e = kvp_rconn_check_time(&d->pc, now)) < 0)
		conn_failed(r, d, &d->pc, e, now);
	step_fetch(r, d, now);
	step_publish(r, d, now);
}

/* Every complete reply on @c. */
static int take_replies(struct kvp_remote *r, struct dom *d, struct kvp_rconn *c, uint64_t now)
{
	for (;;) {
		redisReply *rep = NULL;
		int g = kvp_rconn_reply(c, &rep, now);

		if (g <= 0)
			return g;
		lock(r);
		kvp_breaker_success(&d->br);
		unlock(r);
		if (c == &d->fc)
			g = on_fetch_reply(r, d, rep, now);
		else
			g = on_publish_reply(r, d, rep);
		kvp_rconn_reply_free(rep);
		if (g < 0)
			return g;
		if (c->state == KVP_RCONN_DOWN)
			return 0;
	}
}

static void handle_io(struct kvp_remote *r, struct dom *d, struct kvp_rconn *c, short revents,
		      uint64_t now)
{
	bool was_ready = kvp_rconn_ready(c);
	size_t budget = READ_BUDGET;
	int e;

	e = kvp_rconn_pump(c, revents, now);
	if (e < 0)
		goto fail;
	while ((revents & (POLLIN | POLLHUP | POLLERR)) && budget && c->state != KVP_RCONN_DOWN) {
		ssize_t n = kvp_rconn_read(c, r->scratch, READ_CHUNK, now);

		if (n < 0) {
			e = (int)n;
			goto fail;
		}
		if (n == 0)
			break;
		budget = (size_t)n >= budget ? 0 : budget - (size_t)n;
		e = take_replies(r, d, c, now);
		if (e < 0)
			goto fail;
		if ((size_t)n < READ_CHUNK)
			break; /* most likely all there was */
	}
	if (!was_ready && kvp_rconn_ready(c)) {
		lock(r);
		d->st.connects++;
		kvp_remote_est_rtt(&r->est, c->rtt_ns);
		if (c == &d->fc && d->probing) {
			kvp_breaker_probe_done(&d->br, true, now);
			d->st.last_error[0] = '\0';
			d->last_err = 0;
		}
		unlock(r);
		if (c == &d->fc)
			d->probing = false;
	}
	return;

fail:
	conn_failed(r, d, c, e, now);
}

/* ---- the I/O thread ---- */

static uint64_t min64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static void *io_main(void *arg)
{
	struct kvp_remote *r = arg;
	sigset_t all;

	/* signals are the other threads' business; SIGPIPE must stay pending (conn.h) */
	sigfillset(&all);
	sigdelset(&all, SIGSEGV);
	sigdelset(&all, SIGBUS);
	sigdelset(&all, SIGFPE);
	sigdelset(&all, SIGILL);
	pthread_sigmask(SIG_BLOCK, &all, NULL);

	for (;;) {
		uint64_t now = kvp_now_ns(), next = now + POLL_MAX_NS;
		bool idle = true, notify;
		uint32_t doms_done = 0; /* bit per domain with completions posted */
		nfds_t n = 1;
		int ms;

		lock(r);
		if (r->stop) {
			unlock(r);
			break;
		}
		unlock(r);
		for (uint32_t i = 0; i < r->n_doms; i++)
			step_domain(r, &r->doms[i], now);

		r->pfd[0] = (struct pollfd){ .fd = r->wake_fd, .events = POLLIN };
		for (uint32_t i = 0; i < r->n_doms; i++) {
			struct dom *d = &r->doms[i];
			struct kvp_rconn *cs[2] = { &d->fc, &d->pc };

			for (int k = 0; k < 2; k++) {
				short ev = kvp_rconn_events(cs[k]);

				if (!ev)
					continue;
				r->pfd[n] = (struct pollfd){ .fd = kvp_rconn_fd(cs[k]),
							     .events = ev };
				r->pconn[n] = cs[k];
				r->pdom[n] = d;
				n++;
				next = min64(next, kvp_rconn_timeout_ns(cs[k]));
			}
			if (d->cur)
				next = min64(next, d->cur->deadline_ns);
		}
		lock(r);
		for (uint32_t i = 0; i < r->n_doms; i++) {
			struct dom *d = &r->doms[i];

			next = min64(next, kvp_breaker_next_ns(&d->br));
			d->busy = d->cur || d->pc.owed || d->kinds_n;
			d->st.conn_state = d->fc.state;
			idle = idle && !d->busy && d->pub_head == d->pub_tail &&
			       d->f_head == d->f_tail && !d->route;
		}
		r->idle = idle;
		r->turn++;
		notify = r->notify;
		r->notify = false;
		for (uint32_t i = 0; i < r->n_doms; i++) {
			doms_done |= (uint32_t)r->doms[i].notify << i;
			r->doms[i].notify = false;
		}
		pthread_cond_broadcast(&r->cond);
		unlock(r);
		if (notify)
			poke(r->done_fd);
		for (uint32_t i = 0; i < r->n_doms; i++)
			if (doms_done & (1u << i))
				poke(r->doms[i].done_fd);

		ms = next <= now ? 0 : (int)((next - now + MS - 1) / MS);
		if (poll(r->pfd, n, ms) < 0 && errno != EINTR)
			continue;
		if (r->pfd[0].revents & POLLIN) {
			uint64_t v;

			(void)!read(r->wake_fd, &v, sizeof(v));
		}
		now = kvp_now_ns();
		for (nfds_t i = 1; i < n; i++)
			if (r->pfd[i].revents)
				handle_io(r, r->pdom[i], r->pconn[i], r->pfd[i].revents, now);
	}
	for (uint32_t i = 0; i < r->n_doms; i++) {
		kvp_rconn_close(&r->doms[i].fc);
		kvp_rconn_close(&r->doms[i].pc);
	}
	return NULL;
}

/* ---- the engine's side ---- */

static int dom_alloc(struct kvp_remote *r, struct dom *d)
{
	uint32_t bt = bt_of(r), maxb = r->cfg.max_fetch_blocks;

	d->pubs = calloc(r->cfg.queue_blocks, sizeof(*d->pubs));
	d->pub_tokens = calloc((size_t)r->cfg.queue_blocks * bt, sizeof(uint32_t));
	d->fops = calloc(r->cfg.fetch_queue, sizeof(*d->fops));
	d->lat_buf = calloc(KVP_REMOTE_LAT_SAMPLES, sizeof(double));
	kvp_samples_init(&d->lat, d->lat_buf, KVP_REMOTE_LAT_SAMPLES);
	d->done = calloc(r->done_cap, sizeof(*d->done));
	if (!d->pubs || !d->pub_tokens || !d->fops || !d->lat_buf || !d->done)
		return -ENOMEM;
	d->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->done_fd < 0)
		return -errno;
	for (uint32_t i = 0; i < r->cfg.queue_blocks; i++)
		d->pubs[i].tokens = d->pub_tokens + (size_t)i * bt;
	for (uint32_t i = 0; i < r->cfg.fetch_queue; i++) {
		struct fop *f = &d->fops[i];

		f->tokens = calloc((size_t)maxb * bt, sizeof(uint32_t));
		f->dest = calloc(maxb, sizeof(void *));
		f->hash = calloc(maxb, sizeof(struct kvp_h128));
		f->digest = calloc(maxb, sizeof(struct kvp_h128));
		if (!f->tokens || !f->dest || !f->hash || !f->digest)
			return -ENOMEM;
	}
	return 0;
}

static void dom_free(struct kvp_remote *r, struct dom *d)
{
	if (d->fops)
		for (uint32_t i = 0; i < r->cfg.fetch_queue; i++) {
			free(d->fops[i].tokens);
			free(d->fops[i].dest);
			free(d->fops[i].hash);
			free(d->fops[i].digest);
		}
	free(d->fops);
	free(d->pubs);
	free(d->pub_tokens);
	free(d->lat_buf);
	free(d->route);
	free(d->done);
	if (d->done_fd >= 0)
		close(d->done_fd);
}

void kvp_remote_free(struct kvp_remote *r)
{
	if (!r)
		return;
	if (r->thread_ok) {
		lock(r);
		r->stop = true;
		unlock(r);
		poke(r->wake_fd);
		pthread_join(r->thread, NULL);
	}
	if (r->doms)
		for (uint32_t i = 0; i < r->n_doms; i++)
			dom_free(r, &r->doms[i]);
	free(r->doms);
	free(r->scratch);
	free(r->vbuf);
	free(r->pfd);
	free(r->pconn);
	free(r->pdom);
	if (r->wake_fd >= 0)
		close(r->wake_fd);
	if (r->done_fd >= 0)
		close(r->done_fd);
	if (r->cond_ok)
		pthread_cond_destroy(&r->cond);
	if (r->lock_ok)
		pthread_mutex_destroy(&r->lock);
	free(r);
}

/*
 * hiredis 0.14 formats every command into a fresh buffer, appends it to its output
 * buffer, and frees both once sent; every reply is a fresh buffer too.  With values of
 * hundreds of KiB and glibc's default thresholds, each of those is a new mmap whose pages
 * fault in, then a munmap: measured on this VM (where a page fault is expensive), a plain
 * hiredis loop of pipelined 516 KiB SETs ran at 27-46 MB/s that way and at 360-550 MB/s
 * with the thresholds raised.  Serving such buffers from glibc's heap and keeping freed
 * memory for the next one (tens of MiB at most: the windows bound what is in flight) is
 * a process-wide choice, so the program makes it (kvpoold at start-up), not the tier.
 */
void kvp_remote_tune_malloc(void)
{
	mallopt(M_MMAP_THRESHOLD, 16 << 20);
	mallopt(M_TRIM_THRESHOLD, 128 << 20);
}

int kvp_remote_new(struct kvp_remote **out, const struct kvp_remote_config *cfg,
		   const struct kvp_model_shape *shape, const uint8_t model_fp[16],
		   const char *numerics, char *err, size_t errlen)
{
	pthread_condattr_t ca;
	struct kvp_remote *r;
	uint64_t now;
	int e;

	if (!out || !cfg || !shape || !model_fp)
		return -EINVAL;
	e = kvp_remote_config_check(cfg, err, errlen);
	if (e < 0)
		return e;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->wake_fd = -1;
	r->done_fd = -1;
	r->cfg = *cfg;
	e = kvp_remote_codec_init(&r->codec, shape, model_fp, numerics);
	if (e < 0) {
		kvp_errmsg(err, errlen,
			   "remote: bad block shape or numerics class '%s' (1..%d of "
			   "[A-Za-z0-9_-])",
			   numerics ? numerics : "", KVP_REMOTE_NAME_MAX - 1);
		goto err_free;
	}
	e = -ENOMEM;
	r->n_doms = cfg->n_domains;
	r->doms = calloc(r->n_doms, sizeof(*r->doms));
	r->done_cap = cfg->queue_blocks + cfg->fetch_queue; /* per domain */
	for (uint32_t i = 0; r->doms && i < r->n_doms; i++)
		r->doms[i].done_fd = -1;
	r->scratch = malloc(READ_CHUNK);
	r->vbuf = malloc(r->codec.value_bytes);
	r->window = (uint32_t)(WINDOW_BYTES / r->codec.value_bytes);
	r->window = r->window < 2 ? 2 : r->window > PUB_MAX_OWED ? PUB_MAX_OWED : r->window;
	r->pfd = calloc(1 + 2 * r->n_doms, sizeof(*r->pfd));
	r->pconn = calloc(1 + 2 * r->n_doms, sizeof(*r->pconn));
	r->pdom = calloc(1 + 2 * r->n_doms, sizeof(*r->pdom));
	if (!r->doms || !r->scratch || !r->vbuf || !r->pfd || !r->pconn || !r->pdom)
		goto err_free;
	now = kvp_now_ns();
	for (uint32_t i = 0; i < r->n_doms; i++) {
		struct dom *d = &r->doms[i];

		d->cfg = cfg->domains[i];
		d->id = i;
		e = dom_alloc(r, d);
		if (e < 0)
			goto err_free;
		e = -ENOMEM;
		kvp_breaker_init(&d->br, cfg->breaker_errors, cfg->breaker_probe_ms * MS,
				 cfg->breaker_probe_max_ms * MS, now);
		d->st.state = d->br.state;
		/* a reply is a record and a little RESP; anything larger is not ours */
		kvp_rconn_init(&d->fc, cfg->connect_timeout_ms * MS, cfg->op_timeout_ms * MS,
			       r->codec.value_bytes + 4096);
		kvp_rconn_init(&d->pc, cfg->connect_timeout_ms * MS, cfg->op_timeout_ms * MS, 4096);
	}
	kvp_remote_est_init(&r->est, (double)cfg->bandwidth_mbps * 1e6, 0);
	e = pthread_mutex_init(&r->lock, NULL);
	if (e) {
		e = -e;
		goto err_free;
	}
	r->lock_ok = true;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	e = pthread_cond_init(&r->cond, &ca);
	pthread_condattr_destroy(&ca);
	if (e) {
		e = -e;
		goto err_free;
	}
	r->cond_ok = true;
	r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	r->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->wake_fd < 0 || r->done_fd < 0) {
		e = -errno;
		goto err_free;
	}
	e = pthread_create(&r->thread, NULL, io_main, r);
	if (e) {
		e = -e;
		kvp_errmsg(err, errlen, "remote: cannot start its I/O thread: %s", strerror(-e));
		goto err_free;
	}
	r->thread_ok = true;
	*out = r;
	return 0;

err_free:
	if (e == -ENOMEM)
		kvp_errmsg(err, errlen, "remote: out of memory");
	kvp_remote_free(r);
	return e;
}

static void abs_deadline(struct timespec *ts, uint32_t timeout_ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += timeout_ms / 1000;
	ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

int kvp_remote_wait_ready(struct kvp_remote *r, uint32_t timeout_ms, char *err, size_t errlen)
{
	struct timespec ts;
	int ret = 0;

	abs_deadline(&ts, timeout_ms);
	lock(r);
	for (;;) {
		bool all = true;

		for (uint32_t i = 0; i < r->n_doms; i++)
			all = all &&
			      (kvp_breaker_closed(&r->doms[i].br) || r->doms[i].br.probes_done > 0);
		if (all || pthread_cond_timedwait(&r->cond, &r->lock, &ts) == ETIMEDOUT)
			break;
	}
	for (uint32_t i = 0; i < r->n_doms; i++) {
		struct dom *d = &r->doms[i];

		if (kvp_breaker_closed(&d->br))
			continue;
		ret = d->last_err ? d->last_err : -ETIMEDOUT;
		kvp_errmsg(err, errlen,
			   "remote: domain %s: %s; local-only until it answers (probing every "
			   "%u..%u ms)",
			   d->cfg.name, d->st.last_error[0] ? d->st.last_error : "no answer yet",
			   r->cfg.breaker_probe_ms, r->cfg.breaker_probe_max_ms);
		break;
	}
	unlock(r);
	return ret;
}

int kvp_remote_publish(struct kvp_remote *r, uint32_t domain, enum kvp_remote_why why,
		       const struct kvp_index_rec *rec, const void *kv, uint64_t tag)
{
	uint32_t bt = bt_of(r);
	struct dom *d;
	struct pub *p;
	bool go;

	if (domain >= r->n_doms || !rec || !rec->tokens || !kv)
		return -EINVAL;
	d = &r->doms[domain];
	switch (r->cfg.publish) {
	case KVP_REMOTE_PUBLISH_ALL:
		go = why == KVP_REMOTE_WHY_CREATED;
		break;
	case KVP_REMOTE_PUBLISH_SELECTIVE:
		go = why == KVP_REMOTE_WHY_REUSED || why == KVP_REMOTE_WHY_EVICTED;
		break;
	default:
		go = false;
	}
	lock(r);
	if (!go) {
		d->st.publish_skipped++;
		unlock(r);
		return 1;
	}
	if (!kvp_breaker_closed(&d->br)) {
		d->st.publish_off_drops++;
		unlock(r);
		return -ENODEV;
	}
	if (d->pub_inflight >= r->cfg.queue_blocks) {
		d->st.publish_drops++;
		unlock(r);
		return -ENOBUFS;
	}
	p = &d->pubs[d->pub_tail % r->cfg.queue_blocks];
	p->tag = tag;
	p->kv = kv;
	p->key = rec->key;
	p->hash = rec->hash;
	p->phash = rec->phash;
	memcpy(p->tokens, rec->tokens, 4ull * bt);
	d->pub_tail++;
	d->pub_inflight++;
	d->st.publishes++;
	unlock(r);
	poke(r->wake_fd);
	return 0;
}

int kvp_remote_fetch(struct kvp_remote *r, const struct kvp_remote_fetch *req)
{
	uint32_t bt = bt_of(r);
	uint64_t now = kvp_now_ns();
	struct dom *d;
	struct fop *f;

	if (!req || req->domain >= r->n_doms || !req->n_blocks ||
	    req->n_blocks > r->cfg.max_fetch_blocks || !req->key || !req->tokens || !req->dest)
		return -EINVAL;
	for (uint32_t j = 0; j < req->n_blocks; j++)
		if (!req->dest[j])
			return -EINVAL;
	d = &r->doms[req->domain];
	lock(r);
	if (!kvp_breaker_closed(&d->br)) {
		d->st.fetch_refused++;
		unlock(r);
		return -ENODEV;
	}
	if (d->f_inflight >= r->cfg.fetch_queue) {
		d->st.fetch_busy++;
		unlock(r);
		return -EBUSY;
	}
	f = &d->fops[d->f_tail % r->cfg.fetch_queue];
	f->tag = req->tag;
	f->submit_ns = now;
	f->deadline_ns = now +
			 (uint64_t)(req->timeout_ms ? req->timeout_ms : r->cfg.fetch_timeout_ms) *
				 MS;
	f->key = *req->key;
	f->parent = req->parent_hash;
	f->prefill_tps = req->prefill_tps > 0 ? req->prefill_tps : 0;
	f->n_blocks = req->n_blocks;
	memcpy(f->tokens, req->tokens, 4ull * bt * req->n_blocks);
	memcpy(f->dest, req->dest, sizeof(void *) * req->n_blocks);
	f->phase = F_IDLE;
	f->n_ok = 0;
	f->n_found = 0;
	f->err_reply = false;
	f->cut = false;
	d->f_tail++;
	d->f_inflight++;
	d->st.fetches++;
	unlock(r);
	poke(r->wake_fd);
	return 0;
}

int kvp_remote_route_publish(struct kvp_remote *r, uint32_t domain, const char *host,
			     const struct kvp_bloom *b, uint32_t ttl_s)
{
	struct timespec wall;
	struct dom *d;
	uint8_t *buf;
	size_t len;
	char key[sizeof(d->route_key)];

	if (domain >= r->n_doms || !b || !ttl_s)
		return -EINVAL;
	d = &r->doms[domain];
	if (kvp_remote_route_key(key, sizeof(key), d->cfg.name, host) < 0)
		return -EINVAL;
	len = kvp_bloom_encoded_bytes(b);
	buf = malloc(len);
	if (!buf)
		return -ENOMEM;
	clock_gettime(CLOCK_REALTIME, &wall);
	kvp_bloom_encode(b, buf, (uint64_t)wall.tv_sec, ttl_s);
	lock(r);
	if (!kvp_breaker_closed(&d->br)) {
		unlock(r);
		free(buf);
		return -ENODEV;
	}
	free(d->route); /* a newer summary replaces one not yet sent */
	d->route = buf;
	d->route_len = len;
	d->route_ttl = ttl_s;
	strcpy(d->route_key, key);
	unlock(r);
	poke(r->wake_fd);
	return 0;
}

/* Take up to @max of @dm's completions into @out (locked).  Return: how many. */
static uint32_t take_done(struct kvp_remote *r, struct dom *dm, struct kvp_remote_done *out,
			  uint32_t max)
{
	uint32_t n = 0;

	while (n < max && dm->done_n) {
		const struct kvp_remote_done *d = &dm->done[dm->done_head];

		out[n++] = *d;
		if (d->kind == KVP_REMOTE_DONE_PUBLISH)
			dm->pub_inflight--;
		else
			dm->f_inflight--;
		dm->done_head = (dm->done_head + 1) % r->done_cap;
		dm->done_n--;
		r->done_n--;
	}
	return n;
}

int kvp_remote_poll(struct kvp_remote *r, struct kvp_remote_done *out, uint32_t max)
{
	uint64_t v;
	uint32_t n = 0;

	/* reset first: a completion posted after the pop sets it again (a domain's own fd
	 * may stay readable for nothing: its poller finds its ring empty) */
	(void)!read(r->done_fd, &v, sizeof(v));
	lock(r);
	for (uint32_t i = 0; i < r->n_doms && n < max; i++)
		n += take_done(r, &r->doms[i], out + n, max - n);
	if (r->done_n)
		poke(r->done_fd);
	unlock(r);
	return (int)n;
}

int kvp_remote_poll_domain(struct kvp_remote *r, uint32_t domain, struct kvp_remote_done *out,
			   uint32_t max)
{
	struct dom *dm;
	uint64_t v;
	uint32_t n;

	if (domain >= r->n_doms)
		return -EINVAL;
	dm = &r->doms[domain];
	(void)!read(dm->done_fd, &v, sizeof(v));
	lock(r);
	n = take_done(r, dm, out, max);
	if (dm->done_n)
		poke(dm->done_fd);
	unlock(r);
	return (int)n;
}

const struct kvp_remote_config *kvp_remote_settings(const struct kvp_remote *r)
{
	return &r->cfg;
}

bool kvp_remote_domain_up(struct kvp_remote *r, uint32_t domain)
{
	bool up;

	if (domain >= r->n_doms)
		return false;
	lock(r);
	up = kvp_breaker_closed(&r->doms[domain].br);
	unlock(r);
	return up;
}

int kvp_remote_event_fd(const struct kvp_remote *r)
{
	return r->done_fd;
}

int kvp_remote_domain_event_fd(const struct kvp_remote *r, uint32_t domain)
{
	return domain < r->n_doms ? r->doms[domain].done_fd : -1;
}

int kvp_remote_wait(struct kvp_remote *r, uint32_t timeout_ms)
{
	uint64_t end = kvp_now_ns() + (uint64_t)timeout_ms * MS;

	for (;;) {
		struct pollfd p = { .fd = r->done_fd, .events = POLLIN };
		uint64_t now, v;
		bool ready;

		lock(r);
		ready = r->done_n > 0;
		unlock(r);
		if (ready)
			return 1;
		now = kvp_now_ns();
		if (now >= end || poll(&p, 1, (int)((end - now + MS - 1) / MS)) <= 0)
			return 0;
		/* readable for completions a domain's poller took already: reset, look again */
		(void)!read(r->done_fd, &v, sizeof(v));
	}
}

int kvp_remote_drain(struct kvp_remote *r, uint32_t timeout_ms)
{
	struct timespec ts;
	uint64_t t0;
	int ret = 0;

	abs_deadline(&ts, timeout_ms);
	lock(r);
	t0 = r->turn;
	/* a turn that began after this call has seen everything queued before it */
	while (!(r->turn >= t0 + 2 && r->idle)) {
		unlock(r);
		poke(r->wake_fd);
		lock(r);
		if (pthread_cond_timedwait(&r->cond, &r->lock, &ts) == ETIMEDOUT) {
			ret = r->turn >= t0 + 2 && r->idle ? 0 : -ETIMEDOUT;
			break;
		}
	}
	unlock(r);
	return ret;
}

void kvp_remote_stats(struct kvp_remote *r, uint32_t domain, struct kvp_remote_stats *st)
{
	double lat[KVP_REMOTE_LAT_SAMPLES];
	struct kvp_quantiles q;
	uint32_t n;

	memset(st, 0, sizeof(*st));
	if (domain >= r->n_doms)
		return;
	lock(r);
	*st = r->doms[domain].st;
	st->state = r->doms[domain].br.state;
	st->breaker_opens = r->doms[domain].br.opens;
	st->probes = r->doms[domain].br.probes;
	st->rtt_ms = r->est.rtt_ns / 1e6;
	st->bw_mbps = r->est.bw_bps / 1e6;
	n = kvp_samples_copy(&r->doms[domain].lat, lat);
	unlock(r);
	kvp_quantiles_of(lat, n, &q); /* NaN without a fetch, as the stats say */
	st->fetch_p50_ms = q.p50;
	st->fetch_p99_ms = q.p99;
}

size_t kvp_remote_value_bytes(const struct kvp_remote *r)
{
	return r->codec.value_bytes;
}

size_t kvp_remote_block_bytes(const struct kvp_remote *r)
{
	return r->codec.lay.block_bytes;
}

const char *kvp_remote_stop_name(uint32_t stop)
{
	static const char *const names[] = { "end",    "miss",	"cost", "deadline",
					     "verify", "error", "off" };

	return stop < sizeof(names) / sizeof(names[0]) ? names[stop] : "?";
}

void kvp_remote_debug_set_hook(struct kvp_remote *r, kvp_remote_hook_fn fn, void *ctx)
{
	lock(r);
	r->hook = fn;
	r->hook_ctx = ctx;
	unlock(r);
}
