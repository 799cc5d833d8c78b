/* SPDX-License-Identifier: MIT */
/*
 * usage.c - what a request used (struct kvp_usage, struct kvp_cache_usage, summed over
 * a parallel-sampling group), the engine's counters published as a snapshot, and the
 * quantiles kvp_sched_get_stats() computes from it on the caller's thread.
 * Thread: the engine thread, except kvp_sched_get_stats() (any, under stats_lock).
 */
#include "svc/engine/engine_impl.h"

#include <stdlib.h>
#include <string.h>

void eng_fill_usage(struct kvp_sched *s, struct seq *q, uint32_t status, struct kvp_usage *u)
{
	uint64_t t = now_ns(s);

	memset(u, 0, sizeof(*u));
	/* a continuation forked from the first one shares its prompt: counted there */
	u->prompt_tokens = q->cont ? 0 : q->gen.n_prompt;
	u->cached_tokens = q->tok_cached;
	u->cache_creation_tokens = q->n_created * s->block_tokens;
	u->recomputed_tokens = q->tok_computed;
	u->generated_tokens = q->gen.n_generated;
	u->status = status;
	u->queue_ms = kvp_ns_to_ms((q->t_admit ? q->t_admit : t) - q->t_recv);
	u->ttft_ms = q->t_first ? kvp_ns_to_ms(q->t_first - q->t_recv) : 0;
	u->prefill_ms = kvp_ns_to_ms(q->prefill_ns);
	u->decode_ms = q->t_first ? kvp_ns_to_ms(q->t_last - q->t_first) : 0;
	u->preemptions = q->preemptions;
	u->resume_computed_tokens = q->tok_resume;
	u->cached_tokens_disk = q->tok_cached_disk;
	u->swapped_tokens = q->tok_swapped;
	u->cached_tokens_remote = q->tok_cached_remote;
	u->ttft_steps = q->ttft_steps;
}

void eng_fill_cache_usage(const struct seq *q, struct kvp_cache_usage *cu)
{
	*cu = (struct kvp_cache_usage){ .miss_reason = q->miss_reason,
					.miss_tier = q->miss_tier,
					.matched_blocks = q->matched,
					.evicted_tokens = q->evicted_toks,
					.ttl_s = q->no_cache ? 0 : q->cc.ttl_s,
					.n = q->cc.n,
					.blocks = q->cu_blocks };
}

void eng_fill_spec_usage(const struct seq *q, struct kvp_spec_usage *su)
{
	if (q->grp)
		*su = q->grp->su;
	else
		*su = (struct kvp_spec_usage){ .drafted = q->spec_drafted,
					       .accepted = q->spec_accepted };
}

/*
 * @q of a group ends with usage @u and @status: add them to the group's.  Return: true
 * when @q is the last (the group's DONE goes out now, with @u and @cu the group's).
 */
bool eng_group_end(struct seq *q, uint32_t status, struct kvp_usage *u, struct kvp_cache_usage *cu)
{
	struct group *g = q->grp;
	struct kvp_usage *a = &g->u;

	if (!q->cont) {
		/* the prompt's figures are the first continuation's */
		a->prompt_tokens = u->prompt_tokens;
		a->cached_tokens = u->cached_tokens;
		a->recomputed_tokens = u->recomputed_tokens;
		a->cached_tokens_disk = u->cached_tokens_disk;
		a->cached_tokens_remote = u->cached_tokens_remote;
		a->queue_ms = u->queue_ms;
		a->ttft_ms = u->ttft_ms;
		a->prefill_ms = u->prefill_ms;
		a->ttft_steps = u->ttft_steps;
		eng_fill_cache_usage(q, &g->cu);
	}
	a->cache_creation_tokens += u->cache_creation_tokens;
	a->generated_tokens += u->generated_tokens;
	a->preemptions += u->preemptions;
	a->swapped_tokens += u->swapped_tokens;
	a->resume_computed_tokens += u->resume_computed_tokens;
	g->su.drafted += q->spec_drafted;
	g->su.accepted += q->spec_accepted;
	if (u->decode_ms > a->decode_ms)
		a->decode_ms = u->decode_ms;
	if (status != KVP_OK && g->status == KVP_OK)
		g->status = status;
	if (--g->live)
		return false;
	*u = *a;
	u->status = g->status;
	*cu = g->cu;
	return true;
}

void eng_publish_stats(struct kvp_sched *s)
{
	kvp_pool_stats(s->cfg.pool, &s->st.pool);
	kvp_index_stats(s->cfg.index, &s->st.index);
	if (s->tiering)
		kvp_tiering_stats(s->tiering, &s->st.tier, now_ns(s),
				  !eng_has_work(s) && !kvp_tiering_in_flight(s->tiering));
	if (s->remoting)
		kvp_remoting_stats(s->remoting, &s->st.remote, now_ns(s));
	s->st.queued = s->queue.n;
	s->st.waiting_prefix = s->waiting.n;
	s->st.running = s->active.n;
	s->st.reserved_blocks = s->reserved_total;
	s->st.leases_active = s->leases.n;
	s->st.leases_granted = s->leases.granted;
	s->st.leases_released = s->leases.released;
	s->st.leases_expired = s->leases.expired;
	s->st.leases_closed = s->leases.closed;
	s->st.inbox_handled = s->handled;
	s->st.queued_high = s->st.queued_normal = s->st.queued_low = s->st.preempted = 0;
	for (const struct seq *q = s->queue.first; q; q = q->next) {
		if (q->priority > 0)
			s->st.queued_high++;
		else if (q->priority < 0)
			s->st.queued_low++;
		else
			s->st.queued_normal++;
		s->st.preempted += q->admit_no != 0;
	}
	pthread_mutex_lock(&s->stats_lock);
	s->snap = s->st;
	kvp_samples_catch_up(&s->snap_ttft, &s->ttft);
	kvp_samples_catch_up(&s->snap_itl, &s->itl);
	kvp_samples_catch_up(&s->snap_step, &s->step);
	pthread_mutex_unlock(&s->stats_lock);
}

/* Nearest-rank quantiles of the last min(@n, @cap) samples of @ring (sorted in place). */
/* Sort @v (@n samples) for p50, p99 and the max, each 0 when there is none. */
static void quantiles(double *v, uint32_t n, double *p50, double *p99, double *max)
{
	struct kvp_quantiles q;

	kvp_quantiles_of(v, n, &q);
	*p50 = n ? q.p50 : 0;
	*p99 = n ? q.p99 : 0;
	if (max)
		*max = n ? q.max : 0;
}

void kvp_sched_get_stats(struct kvp_sched *s, struct kvp_sched_stats *st)
{
	/* copies: the sorts happen outside the lock, on the caller's time */
	double *v = malloc((TTFT_RING + ITL_RING + STEP_RING) * sizeof(double));
	uint32_t n_ttft = 0, n_itl = 0, n_step = 0;

	pthread_mutex_lock(&s->stats_lock);
	*st = s->snap;
	st->ttft_samples = s->snap_ttft.n;
	if (v) {
		n_ttft = kvp_samples_copy(&s->snap_ttft, v);
		n_itl = kvp_samples_copy(&s->snap_itl, v + TTFT_RING);
		n_step = kvp_samples_copy(&s->snap_step, v + TTFT_RING + ITL_RING);
	}
	pthread_mutex_unlock(&s->stats_lock);
	st->prompts_moved = atomic_load(&s->prompts_moved);
	st->prompts_grown = atomic_load(&s->prompts_grown);
	/* the store answers while the engine sleeps: its counters now, not at the last step */
	if (s->cfg.remote)
		kvp_remote_stats(s->cfg.remote, s->cfg.remote_domain, &st->remote.tier);
	if (!v)
		return; /* no quantiles this time; the counters are there */
	/* the order of the samples does not matter for quantiles: sort the copies */
	quantiles(v, n_ttft, &st->ttft_p50_ms, &st->ttft_p99_ms, NULL);
	quantiles(v + TTFT_RING, n_itl, &st->itl_p50_ms, &st->itl_p99_ms, &st->itl_max_ms);
	quantiles(v + TTFT_RING + ITL_RING, n_step, &st->step_p50_ms, &st->step_p99_ms,
		  &st->step_max_ms);
	free(v);
}

/* Add ending @q's usage to the engine's sums: every request that ended, finished or not. */
void eng_usage_sum(struct kvp_sched *s, struct seq *q, uint32_t status)
{
	struct kvp_usage u;

	eng_fill_usage(s, q, status, &u);
	s->st.prompt_tokens += u.prompt_tokens;
	s->st.cached_tokens += u.cached_tokens;
	s->st.cache_creation_tokens += u.cache_creation_tokens;
	s->st.recomputed_tokens += u.recomputed_tokens;
	s->st.generated_tokens += u.generated_tokens;
	s->st.queue_ms += u.queue_ms;
	s->st.ttft_ms += u.ttft_ms;
	s->st.prefill_ms += u.prefill_ms;
	s->st.decode_ms += u.decode_ms;
	s->st.cached_tokens_disk += u.cached_tokens_disk;
	s->st.swapped_tokens += u.swapped_tokens;
	s->st.cached_tokens_remote += u.cached_tokens_remote;
	s->st.resume_computed_tokens += u.resume_computed_tokens;
	s->st.preempt_usage += u.preemptions;
}
