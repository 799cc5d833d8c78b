/* SPDX-License-Identifier: MIT */
/*
 * stats.c - fill the status report from its sources and render it (see stats.h).
 * Thread: the loop thread.
 */
#include "svc/stats.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm/pool.h"
#include "svc/domain.h"
#include "svc/requests.h"
#include "svc/sched.h"
#include "svc/status.h"
#include "util/time.h"

#ifndef KVP_VERSION
#define KVP_VERSION "unknown"
#endif

int kvp_stats_init(struct kvp_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->snap = calloc(1, sizeof(*st->snap));
	return st->snap ? 0 : -ENOMEM;
}

void kvp_stats_deinit(struct kvp_stats *st)
{
	free(st->snap);
	st->snap = NULL;
}

void kvp_stats_fill(const struct kvp_stats *src, struct kvp_status_snap *s)
{
	const struct kvp_domain *dom = &src->domains->dom[KVP_DOMAIN_DEFAULT];
	const struct kvp_geom *g = kvp_pool_geom(dom->pool);
	const struct kvp_pool_stats *ps = &s->sched.pool;
	const struct kvp_conn_rec *c;
	uint32_t a;

	memset(s, 0, sizeof(*s));
	/* the counters, whole: status.c's table says what each one is */
	kvp_sched_get_stats(src->sched, &s->sched);
	kvp_server_get_stats(src->req->srv, &s->server);

	snprintf(s->version, sizeof(s->version), "%s", KVP_VERSION);
	snprintf(s->model, sizeof(s->model), "%s", src->model);
	snprintf(s->model_fp, sizeof(s->model_fp), "%s", src->model_fp ? src->model_fp : "");
	static_assert(sizeof(s->lat) == sizeof(src->req->log.lat), "histograms");
	memcpy(s->lat, src->req->log.lat, sizeof(s->lat));
	snprintf(s->state, sizeof(s->state), "%s", *src->state);
	s->uptime_ms = (kvp_now_ns() - src->t_start_ns) / 1000000;
	s->pid = (uint32_t)getpid();

	/* what is derived */
	s->block_tokens = g->shape.block_tokens;
	s->block_bytes = g->block_bytes;
	s->pool_bytes = (uint64_t)kvp_pool_n_blocks(dom->pool) * g->block_stride;
	snprintf(s->page_kind, sizeof(s->page_kind), "%s",
		 kvp_page_kind_name((enum kvp_page_kind)ps->page_kind));
	snprintf(s->kv_dtype, sizeof(s->kv_dtype), "%s", kvp_dtype_name(g->shape.dtype));
	for (a = 0; a < ps->n_arenas && a < KVP_MAX_ARENAS; a++) {
		s->blocks_total += ps->arena[a].n_blocks;
		s->blocks_used += ps->arena[a].used;
		s->blocks_cached += ps->arena[a].cached;
		s->blocks_free += ps->arena[a].free;
	}
	s->index_inserts = s->sched.index.publishes - s->sched.index.publish_dups;
	s->req_rejected = src->req->rejected;
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
	snprintf(s->remote_state, sizeof(s->remote_state), "%s",
		 !s->sched.remote.configured	 ? "off" :
		 s->sched.remote.tier.state == 0 ? "on" :
		 s->sched.remote.tier.state == 1 ? "open" :
						   "probing");

	for (c = kvp_conns_first(&src->req->conns); c && s->n_conns < KVP_STATUS_MAX_CONNS;
	     c = kvp_conns_next(&src->req->conns, c)) {
		struct kvp_status_conn *sc = &s->conns[s->n_conns++];

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
	s->n_domains = src->domains->n_domains < KVP_STATUS_MAX_DOMAINS ? src->domains->n_domains :
									  KVP_STATUS_MAX_DOMAINS;
	for (a = 0; a < s->n_domains; a++) {
		snprintf(s->domains[a].name, sizeof(s->domains[a].name), "%s",
			 src->domains->dom[a].name);
		s->domains[a].requests = src->domains->dom[a].requests;
	}
	for (c = kvp_conns_first(&src->req->conns); c; c = kvp_conns_next(&src->req->conns, c))
		if (c->domain < s->n_domains)
			s->domains[c->domain].conns_open++;
}

/* The answer to flush-tier: asked of the engine, which empties the tier at its next step. */
static int flush_tier(struct kvp_stats *st, char *buf, size_t cap)
{
	struct kvp_sched_stats ss;
	int n;

	kvp_sched_get_stats(st->sched, &ss);
	if (kvp_sched_flush_tier(st->sched) < 0)
		n = snprintf(buf, cap, "{\"error\":\"no disk tier configured (tier.path)\"}\n");
	else
		n = snprintf(buf, cap, "{\"flush\":\"requested\",\"flushes_before\":%llu}\n",
			     (unsigned long long)ss.tier.flushes);
	return n < 0 || (size_t)n >= cap ? -ENOSPC : n;
}

int kvp_stats_report(void *arg, enum kvp_status_fmt fmt, char *buf, size_t cap)
{
	struct kvp_stats *st = arg;

	if (fmt == KVP_STATUS_FLUSH_TIER)
		return flush_tier(st, buf, cap);

	kvp_stats_fill(st, st->snap);
	if (fmt == KVP_STATUS_PROM)
		return kvp_status_render_prom(st->snap, buf, cap);
	return kvp_status_render_json(st->snap, buf, cap);
}
