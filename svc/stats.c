/* SPDX-License-Identifier: MIT */
/*
 * stats.c - fill the status report from its sources and render it (see stats.h).
 * Thread: the loop thread.
 */
#include "svc/stats.h"

#include <assert.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <xxhash.h>

#include "shm/pool.h"
#include "svc/domain.h"
#include "util/log.h"
#include "svc/requests.h"
#include "svc/engine/engine.h"
#include "svc/status.h"
#include "util/time.h"

#ifndef KVP_VERSION
#define KVP_VERSION "unknown"
#endif

int kvp_stats_init(struct kvp_stats *st)
{
	size_t got = 0;

	memset(st, 0, sizeof(*st));
	st->self_uid = geteuid();
	st->op_gid = (gid_t)-1;
	while (got < sizeof(st->hash_key)) {
		ssize_t n = getrandom(st->hash_key + got, sizeof(st->hash_key) - got, 0);

		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0)
			got += (size_t)n;
	}
	st->snap = calloc(1, sizeof(*st->snap));
	return st->snap ? 0 : -ENOMEM;
}

int kvp_stats_set_operators(struct kvp_stats *st, const char *name)
{
	struct group gr, *res = NULL;
	char buf[16384];
	int r;

	st->op_gid = (gid_t)-1;
	st->n_op_uids = 0;
	if (!*name)
		return 0;
	r = getgrnam_r(name, &gr, buf, sizeof(buf), &res);
	if (r == ERANGE)
		return -E2BIG; /* an /etc/group entry longer than we read */
	if (r || !res)
		return -ENOENT;
	for (char **m = res->gr_mem; *m; m++) {
		struct passwd pw, *pr = NULL;
		char pbuf[4096];

		if (getpwnam_r(*m, &pw, pbuf, sizeof(pbuf), &pr) || !pr)
			continue;
		if (st->n_op_uids == KVP_STATS_OPERATORS_MAX) {
			st->n_op_uids = 0;
			return -E2BIG;
		}
		st->op_uids[st->n_op_uids++] = pr->pw_uid;
	}
	st->op_gid = res->gr_gid;
	return 0;
}

static bool is_operator(const struct kvp_stats *st, const struct kvp_peer *peer)
{
	if (peer->uid == 0 || peer->uid == st->self_uid)
		return true;
	if (st->op_gid != (gid_t)-1 && peer->gid == st->op_gid)
		return true;
	for (uint32_t i = 0; i < st->n_op_uids; i++)
		if (st->op_uids[i] == peer->uid)
			return true;
	return false;
}

void kvp_stats_view_of(const struct kvp_stats *st, const struct kvp_peer *peer,
		       struct kvp_stats_view *v)
{
	int idx = kvp_domain_of_peer(st->domains, peer->uid, peer->gid);

	/* never makes a per-uid domain: a status peer that never said HELLO has none */
	v->domain = idx >= 0 ? idx : -1;
	v->all = is_operator(st, peer);
}

/*
 * Keyed, so that it confirms nothing about a guessed prompt (the secret never leaves the
 * process), and mixed with the domain so equal prompts of two domains show different
 * values.
 */
struct kvp_h128 kvp_stats_shown_hash(const struct kvp_stats *st, const char *name,
				     struct kvp_h128 h)
{
	uint8_t in[16 + KVP_DOMAIN_NAME_MAX] = { 0 };
	size_t n = strnlen(name, KVP_DOMAIN_NAME_MAX);
	XXH128_hash_t k;

	memcpy(in, &h.lo, 8);
	memcpy(in + 8, &h.hi, 8);
	memcpy(in + 16, name, n);
	k = XXH3_128bits_withSecret(in, 16 + n, st->hash_key, sizeof(st->hash_key));
	return (struct kvp_h128){ .lo = k.low64, .hi = k.high64 };
}

void kvp_stats_deinit(struct kvp_stats *st)
{
	free(st->snap);
	st->snap = NULL;
}
/*
 * Fill @c from @st (its cache counters, usage sums and policy): the daemon-wide figures
 * from the sums, each domain's from its own engine's.
 */
static void cache_derive(struct kvp_status_cache *c, const struct kvp_sched_stats *st)
{
	static const char *const names[KVP_EVICT__COUNT] = { "lru", "lfu", "priority" };
	const struct kvp_cache_policy *pol = &st->cache_policy;
	struct kvp_cache_prefix top[KVP_CACHE_TOP];
	double written, read, computed;

	memset(c, 0, sizeof(*c));
	snprintf(c->eviction, sizeof(c->eviction), "%s",
		 pol->eviction < KVP_EVICT__COUNT ? names[pol->eviction] : "?");
	c->request_hit_rate = st->lookups ? (double)st->hit_requests / (double)st->lookups : 0;
	c->token_hit_rate = st->lookup_tokens ? (double)st->hit_tokens / (double)st->lookup_tokens :
						0;
	c->tokens_saved = st->cached_tokens + st->cached_tokens_disk;
	c->flops_saved = (double)c->tokens_saved * (double)st->cache.flops_per_token;
	c->pinned_bytes = (uint64_t)st->pool.cpin_blocks * st->block_bytes;
	/*
	 * Cost view, as hosted prompt caching bills it: a prompt token computed and not
	 * cached costs 1, one written to the cache cost_write_pct %, one read from it
	 * cost_read_pct %.
	 */
	written = (double)st->cache_creation_tokens;
	read = (double)c->tokens_saved;
	computed = (double)st->prompt_tokens - read;
	if (computed < written)
		written = computed > 0 ? computed : 0;
	c->cost_uncached = (double)st->prompt_tokens;
	c->cost_cached = (computed - written) + written * pol->cost_write_pct / 100.0 +
			 read * pol->cost_read_pct / 100.0;
	c->cost_saved_ratio = c->cost_uncached > 0 ? 1.0 - c->cost_cached / c->cost_uncached : 0;
	c->n_top = kvp_cache_stats_top(&st->cache, top, KVP_CACHE_TOP);
	for (uint32_t i = 0; i < c->n_top; i++) {
		snprintf(c->top[i].hash, sizeof(c->top[i].hash), "%016llx%016llx",
			 (unsigned long long)top[i].hash.hi, (unsigned long long)top[i].hash.lo);
		c->top[i].tokens = top[i].tokens;
		c->top[i].hits = top[i].hits;
	}
}

#define ADD(f) (sum->f += x->f)
#define MAXOF(f) (sum->f = x->f > sum->f ? x->f : sum->f)

static void add_tier(struct kvp_tiering_stats *sum, const struct kvp_tiering_stats *x)
{
	ADD(offloaded), ADD(offload_freed), ADD(saved), ADD(reloads), ADD(reload_failures);
	ADD(flushes), ADD(write_mb_s), ADD(read_mb_s);
	ADD(tier.slots), ADD(tier.file_bytes), ADD(tier.blocks), ADD(tier.bytes);
	ADD(tier.writes), ADD(tier.write_bytes), ADD(tier.reads), ADD(tier.read_bytes);
	ADD(tier.evictions), ADD(tier.checksum_failures), ADD(tier.reread_recovered);
	ADD(tier.errors), ADD(tier.in_flight), ADD(tier.scan_slots), ADD(tier.scan_valid);
	ADD(tier.scan_empty), ADD(tier.scan_corrupt), ADD(tier.scan_foreign);
	ADD(tier.scan_bytes), ADD(tier.scan_ns), ADD(tier.rebuilt), ADD(tier.orphans);
	ADD(tier.duplicates), ADD(tier.reload_samples), ADD(tier.type_resets);
	MAXOF(tier.reload_p50_ns), MAXOF(tier.reload_p99_ns);
	if (!sum->tier.degraded)
		sum->tier.degraded = x->tier.degraded;
}

/*
 * The cache counters of every domain add up; the most-hit prefixes are pooled (each
 * domain's own chain hashes, so none is merged with another's) up to the table's size.
 */
static void add_cache(struct kvp_cache_stats *sum, const struct kvp_cache_stats *x)
{
	for (uint32_t i = 0; i < KVP_MISS__COUNT; i++)
		ADD(miss[i]);
	ADD(miss_evicted_mem), ADD(miss_evicted_disk), ADD(evicted_tokens), ADD(pins);
	ADD(unpins), ADD(pin_refused), ADD(flushes), ADD(flushed_blocks), ADD(parallel);
	ADD(continuations);
	for (uint32_t i = 0; i < x->n_prefixes && sum->n_prefixes < KVP_CACHE_TRACK; i++)
		sum->prefixes[sum->n_prefixes++] = x->prefixes[i];
}

/*
 * Each domain's part of the remote tier: its counters add up; the breaker, the
 * connection, the round trip and the rate are the tier's, so the first domain's stand.
 */
static void add_remote(struct kvp_remoting_stats *sum, const struct kvp_remoting_stats *x)
{
	if (!x->configured)
		return;
	if (!sum->configured) {
		*sum = *x;
		return;
	}
	ADD(offered), ADD(fetch_blocks), ADD(loaded_blocks), ADD(evict_offers);
	ADD(backlog_drops);
	ADD(tier.fetches), ADD(tier.fetch_refused), ADD(tier.fetch_busy), ADD(tier.exist_checked);
	ADD(tier.exist_found), ADD(tier.hit_blocks), ADD(tier.hit_bytes), ADD(tier.holes);
	ADD(tier.cost_skips), ADD(tier.deadline_cuts), ADD(tier.verify_failures);
	ADD(tier.publishes), ADD(tier.publish_skipped), ADD(tier.publish_drops);
	ADD(tier.publish_off_drops), ADD(tier.publish_lost), ADD(tier.stored), ADD(tier.already);
	ADD(tier.publish_errors), ADD(tier.bytes_written), ADD(tier.route_published);
	if (x->tier.fetch_p50_ms > sum->tier.fetch_p50_ms)
		sum->tier.fetch_p50_ms = x->tier.fetch_p50_ms;
	if (x->tier.fetch_p99_ms > sum->tier.fetch_p99_ms)
		sum->tier.fetch_p99_ms = x->tier.fetch_p99_ms;
}

/*
 * Fold domain engine @x into the daemon-wide @sum: counters and gauges add up, arenas
 * add up by position (every pool follows the same NUMA topology); a quantile or a
 * maximum is the largest of the domains' (the worst domain's, not a true quantile of
 * the union); the calibration is the first engine's.
 */
static void add_sched(struct kvp_sched_stats *sum, const struct kvp_sched_stats *x)
{
	ADD(pool.allocs), ADD(pool.alloc_fails), ADD(pool.alloc_remote), ADD(pool.evictions);
	ADD(pool.cow_copies);
	for (uint32_t a = 0; a < x->pool.n_arenas && a < KVP_MAX_ARENAS; a++) {
		ADD(pool.arena[a].n_blocks), ADD(pool.arena[a].free), ADD(pool.arena[a].used);
		ADD(pool.arena[a].cached);
	}
	ADD(index.entries), ADD(index.extra_keys), ADD(index.lookups), ADD(index.lookup_blocks);
	ADD(index.hit_blocks), ADD(index.publishes), ADD(index.publish_dups);
	ADD(index.evictions), ADD(index.collisions), ADD(index.disk_entries), ADD(index.offloads);
	ADD(index.disk_lookup_blocks), ADD(index.disk_hit_blocks), ADD(index.reloads);
	ADD(index.disk_drops);
	ADD(queued), ADD(running), ADD(waiting_prefix), ADD(reserved_blocks), ADD(req_total);
	ADD(req_done), ADD(req_cancelled), ADD(req_failed), ADD(lookups), ADD(hit_requests);
	ADD(lookup_tokens), ADD(hit_tokens), ADD(prompt_tokens), ADD(cached_tokens);
	ADD(cache_creation_tokens), ADD(recomputed_tokens), ADD(generated_tokens);
	ADD(queue_ms), ADD(ttft_ms), ADD(prefill_ms), ADD(decode_ms), ADD(prefix_waits);
	ADD(cancels_received), ADD(steps), ADD(ttft_samples);
	ADD(decode_rows), ADD(spec_drafted), ADD(spec_accepted), ADD(prefill_steps);
	ADD(prefill_tokens), ADD(prompts_moved), ADD(prompts_grown);
	MAXOF(ttft_p50_ms), MAXOF(ttft_p99_ms);
	ADD(queued_high), ADD(queued_normal), ADD(queued_low), ADD(preempted), ADD(preemptions);
	ADD(preempt_swapped), ADD(cached_tokens_disk), ADD(swapped_tokens);
	ADD(resume_computed_tokens), ADD(preempt_usage);
	for (uint32_t i = 0; i < KVP_SCHED_ITL_BUCKETS; i++)
		ADD(itl_le[i]);
	ADD(itl_count), ADD(itl_sum_ms);
	MAXOF(itl_p50_ms), MAXOF(itl_p99_ms), MAXOF(itl_max_ms);
	MAXOF(step_p50_ms), MAXOF(step_p99_ms), MAXOF(step_max_ms);
	ADD(leases_active), ADD(leases_granted), ADD(leases_released), ADD(leases_expired);
	ADD(leases_closed), ADD(leases_refused);
	sum->tier_configured |= x->tier_configured;
	add_tier(&sum->tier, &x->tier);
	add_cache(&sum->cache, &x->cache);
	add_remote(&sum->remote, &x->remote);
	ADD(cached_tokens_remote);
	ADD(pool.evictions_ttl), ADD(pool.flushed), ADD(pool.cpin_blocks), ADD(pool.cpin_idle);
	ADD(index.evicted_unread);
}

#undef ADD
#undef MAXOF

/* Domain @i's line (@slot of the report's list) from its engine's figures @x. */
static void fill_domain(const struct kvp_stats *src, struct kvp_status_snap *s, uint32_t i,
			uint32_t slot, const struct kvp_sched_stats *x)
{
	const struct kvp_domain *dom = &src->domains->dom[i];
	struct kvp_status_domain *sd = &s->domains[slot];

	snprintf(sd->name, sizeof(sd->name), "%s", dom->name);
	sd->requests = dom->requests;
	sd->pool_bytes = dom->pool ? (uint64_t)kvp_pool_n_blocks(dom->pool) *
					     kvp_pool_geom(dom->pool)->block_stride :
				     0;
	for (uint32_t a = 0; a < x->pool.n_arenas && a < KVP_MAX_ARENAS; a++) {
		sd->blocks_total += x->pool.arena[a].n_blocks;
		sd->blocks_used += x->pool.arena[a].used;
		sd->blocks_cached += x->pool.arena[a].cached;
		sd->blocks_free += x->pool.arena[a].free;
	}
	sd->lookups = x->lookups;
	sd->hit_requests = x->hit_requests;
	sd->prompt_tokens = x->prompt_tokens;
	sd->cached_tokens = x->cached_tokens;
	sd->evictions = x->pool.evictions;
	sd->operators = kvp_domain_may_pin(dom);
	sd->priority = dom->priority;
	sd->sched = *x;
	cache_derive(&sd->cache, x);
}

static bool visible(const struct kvp_stats_view *v, uint32_t i)
{
	return v->all || (v->domain >= 0 && i == (uint32_t)v->domain);
}

/*
 * Every domain's engine @v may see: the sums in s->sched (the daemon-wide figures of an
 * operator's report, its own domain's otherwise), each domain's own line in the report's
 * list (@slot[i]: domain i's place there, -1 when not listed), chain hashes keyed.
 */
static void fill_engines(const struct kvp_stats *src, const struct kvp_stats_view *v,
			 struct kvp_status_snap *s, int *slot)
{
	struct kvp_sched_stats xs;
	struct kvp_sched_stats *x;
	bool first = true;

	for (uint32_t i = 0; i < src->domains->n_domains; i++) {
		const struct kvp_domain *dom = &src->domains->dom[i];

		slot[i] = -1;
		if (!visible(v, i))
			continue;
		x = first ? &s->sched : &xs;
		kvp_sched_get_stats(dom->sched, x);
		for (uint32_t k = 0; k < x->cache.n_prefixes && k < KVP_CACHE_TRACK; k++)
			x->cache.prefixes[k].hash = kvp_stats_shown_hash(src, dom->name,
									 x->cache.prefixes[k].hash);
		if (!first)
			add_sched(&s->sched, x);
		first = false;
		if (s->n_domains < KVP_STATUS_MAX_DOMAINS) {
			slot[i] = (int)s->n_domains++;
			fill_domain(src, s, i, (uint32_t)slot[i], x);
		}
	}
	if (first) {
		/* no domain to show: the pool's page kind is still the daemon's */
		kvp_sched_get_stats(src->domains->dom[KVP_DOMAIN_DEFAULT].sched, &xs);
		s->sched.pool.page_kind = xs.pool.page_kind;
	}
}

void kvp_stats_fill(const struct kvp_stats *src, const struct kvp_stats_view *v,
		    struct kvp_status_snap *s)
{
	const struct kvp_domain *dom = &src->domains->dom[KVP_DOMAIN_DEFAULT];
	const struct kvp_geom *g = kvp_pool_geom(dom->pool);
	const struct kvp_pool_stats *ps = &s->sched.pool;
	const struct kvp_conn_rec *c;
	int slot[KVP_DOMAINS_MAX];
	uint32_t a;

	memset(s, 0, sizeof(*s));
	/* the counters, whole: status.c's table says what each one is */
	fill_engines(src, v, s, slot);
	if (src->cache) /* the sums' policy is the first domain's: show [cache]'s */
		s->sched.cache_policy = *src->cache;
	snprintf(s->view, sizeof(s->view), "%s", v->all ? "all" : "domain");
	snprintf(s->view_domain, sizeof(s->view_domain), "%s",
		 v->all || v->domain < 0 ? "" : kvp_domain_name(src->domains, (uint32_t)v->domain));
	/* the server's counters and the request log count every domain's traffic */
	if (v->all) {
		kvp_server_get_stats(src->req->srv, &s->server);
		static_assert(sizeof(s->lat) == sizeof(src->req->log.lat), "histograms");
		memcpy(s->lat, src->req->log.lat, sizeof(s->lat));
		s->req_rejected = src->req->rejected;
		s->text_jobs = src->req->text_jobs;
		s->text_bytes = src->req->text_bytes;
		s->text_pending = kvp_requests_pending(src->req);
	}

	snprintf(s->version, sizeof(s->version), "%s", KVP_VERSION);
	snprintf(s->model, sizeof(s->model), "%s", src->model);
	snprintf(s->model_fp, sizeof(s->model_fp), "%s", src->model_fp ? src->model_fp : "");
	snprintf(s->state, sizeof(s->state), "%s", *src->state);
	s->uptime_ms = (kvp_now_ns() - src->t_start_ns) / 1000000;
	s->pid = (uint32_t)getpid();

	/* what is derived */
	s->block_tokens = g->shape.block_tokens;
	s->block_bytes = g->block_bytes;
	for (a = 0; a < src->domains->n_domains; a++)
		if (visible(v, a))
			s->pool_bytes += (uint64_t)kvp_pool_n_blocks(src->domains->dom[a].pool) *
					 g->block_stride;
	snprintf(s->page_kind, sizeof(s->page_kind), "%s",
		 kvp_page_kind_name((enum kvp_page_kind)ps->page_kind));
	snprintf(s->kv_dtype, sizeof(s->kv_dtype), "%s", kvp_dtype_name(g->shape.dtype));
	s->bytes_per_token = (double)g->block_bytes / g->shape.block_tokens;
	s->bytes_per_token_f32 = (uint64_t)2 * g->shape.n_layers * g->shape.n_kv_heads *
				 g->shape.head_dim * sizeof(float);
	for (a = 0; a < ps->n_arenas && a < KVP_MAX_ARENAS; a++) {
		s->blocks_total += ps->arena[a].n_blocks;
		s->blocks_used += ps->arena[a].used;
		s->blocks_cached += ps->arena[a].cached;
		s->blocks_free += ps->arena[a].free;
	}
	s->index_inserts = s->sched.index.publishes - s->sched.index.publish_dups;
	s->req_total = s->sched.req_total + s->req_rejected;
	snprintf(s->sched_policy, sizeof(s->sched_policy), "%s",
		 s->sched.policy == KVP_SCHED_FIFO ? "fifo" : "fair");
	snprintf(s->tier_state, sizeof(s->tier_state), "%s",
		 !s->sched.tier_configured   ? "off" :
		 s->sched.tier.tier.degraded ? "degraded" :
					       "on");
	s->tier_degraded = s->sched.tier.tier.degraded;
	s->tier_reload_p50_ms = (double)s->sched.tier.tier.reload_p50_ns / 1e6;
	s->tier_reload_p99_ms = (double)s->sched.tier.tier.reload_p99_ns / 1e6;
	s->tier_scan_ms = (double)s->sched.tier.tier.scan_ns / 1e6;
	cache_derive(&s->cache, &s->sched);
	snprintf(s->remote_state, sizeof(s->remote_state), "%s",
		 !s->sched.remote.configured	 ? "off" :
		 s->sched.remote.tier.state == 0 ? "on" :
		 s->sched.remote.tier.state == 1 ? "open" :
						   "probing");

	for (c = kvp_conns_first(&src->req->conns); c && s->n_conns < KVP_STATUS_MAX_CONNS;
	     c = kvp_conns_next(&src->req->conns, c)) {
		struct kvp_status_conn *sc;

		if (!visible(v, c->domain))
			continue;
		sc = &s->conns[s->n_conns++];
		*sc = (struct kvp_status_conn){ .id = c->id,
						.pid = c->peer.pid,
						.uid = c->peer.uid,
						.domain = c->domain,
						.in_flight = c->in_flight,
						.requests = c->requests,
						.generated_tokens = c->generated_tokens,
						.cached_tokens = c->cached_tokens };
		static_assert(sizeof(sc->client) == sizeof(c->client), "client name");
		memcpy(sc->client, c->client, sizeof(sc->client));
	}
	for (c = kvp_conns_first(&src->req->conns); c; c = kvp_conns_next(&src->req->conns, c)) {
		if (c->domain >= src->domains->n_domains || slot[c->domain] < 0)
			continue;
		s->domains[slot[c->domain]].conns_open++;
		if (!v->all)
			s->server.conns_open++; /* its own, in place of the daemon's */
	}
	if (v->all) { /* how many domains there are is no one domain's business */
		s->slots.open = src->domains->n_domains;
		s->slots.max = src->domains->max;
		s->slots.made = src->domains->made;
		s->slots.reclaimed = src->domains->reclaimed;
		s->slots.refused_max = src->domains->refused_max;
		s->slots.refused_memory = src->domains->refused_memory;
	}
}

/* The answer to flush-tier: asked of the engine, which empties the tier at its next step. */
static int flush_tier(struct kvp_stats *st, char *buf, size_t cap)
{
	struct kvp_sched_stats sst;
	struct kvp_sched_stats *ss = &sst;
	uint64_t flushes = 0;
	int n, r = -ENODEV;

	/* every domain's tier: the flush is the operator's, over all of them */
	for (uint32_t i = 0; i < st->domains->n_domains; i++) {
		kvp_sched_get_stats(st->domains->dom[i].sched, ss);
		flushes += ss->tier.flushes;
		if (kvp_sched_flush_tier(st->domains->dom[i].sched) == 0)
			r = 0;
	}
	if (r < 0)
		n = snprintf(buf, cap, "{\"error\":\"no disk tier configured (tier.path)\"}\n");
	else
		n = snprintf(buf, cap, "{\"flush\":\"requested\",\"flushes_before\":%llu}\n",
			     (unsigned long long)flushes);
	return n < 0 || (size_t)n >= cap ? -ENOSPC : n;
}

/* A command from a peer who is no operator: refused, nothing done. */
static int refuse_command(const struct kvp_peer *peer, char *buf, size_t cap)
{
	int n = snprintf(buf, cap,
			 "{\"error\":\"denied: status commands (flush-tier) are operators' and uid "
			 "%ld is none (root, the daemon's user, server.status_operators)\"}\n",
			 (long)peer->uid);

	kvp_log(LOG_NOTICE, "status: flush-tier from uid %ld pid %ld refused: not an operator",
		(long)peer->uid, (long)peer->pid);
	return n < 0 || (size_t)n >= cap ? -ENOSPC : n;
}

int kvp_stats_report(void *arg, const struct kvp_peer *peer, enum kvp_status_fmt fmt, char *buf,
		     size_t cap)
{
	struct kvp_stats *st = arg;
	struct kvp_stats_view v;

	kvp_stats_view_of(st, peer, &v);
	if (fmt == KVP_STATUS_FLUSH_TIER)
		return v.all ? flush_tier(st, buf, cap) : refuse_command(peer, buf, cap);

	kvp_stats_fill(st, &v, st->snap);
	if (fmt == KVP_STATUS_PROM)
		return kvp_status_render_prom(st->snap, buf, cap);
	return kvp_status_render_json(st->snap, buf, cap);
}
