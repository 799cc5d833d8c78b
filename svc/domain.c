/* SPDX-License-Identifier: MIT */
/*
 * domain.c - trust domains and what each owns: pool, prefix index, client fd (see
 * domain.h).
 *
 * Invariant: every index kvp_domain_of_peer() returns is < n_domains, so callers index
 * their per-domain arrays with it directly.
 * Thread: the main thread builds and frees the table; see domain.h for the rest.
 */
#include "svc/domain.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "compute/model.h"
#include "shm/index.h"
#include "shm/numa.h"
#include "shm/pool.h"
#include "shm/segment.h"
#include "shm/tier.h"
#include "svc/config.h"
#include "svc/log.h"
#include "svc/notify.h"
#include "util/time.h"

void kvp_domains_init_default(struct kvp_domains *d)
{
	memset(d, 0, sizeof(*d));
	d->n_domains = 1;
	strcpy(d->dom[KVP_DOMAIN_DEFAULT].name, "default");
	d->dom[KVP_DOMAIN_DEFAULT].ro_fd = -1;
}

void kvp_domains_deinit(struct kvp_domains *d)
{
	for (uint32_t i = 0; i < d->n_domains; i++)
		kvp_domain_close(&d->dom[i]);
}

int kvp_domain_of_peer(const struct kvp_domains *d, uid_t uid, gid_t gid)
{
	(void)uid;
	(void)gid;
	if (d->n_domains == 0)
		return -EPERM;
	/* one domain for everyone until domains are configured by user and group */
	return KVP_DOMAIN_DEFAULT;
}

const char *kvp_domain_name(const struct kvp_domains *d, uint32_t idx)
{
	return idx < d->n_domains ? d->dom[idx].name : "?";
}

/* pool.huge_pages = require could not be met: say how far off the machine is. */
static void log_huge_pages_missing(int r, uint64_t bytes)
{
	long free_pages = kvp_hugetlb_free_pages();
	uint64_t want = (bytes + 2 * KVP_HUGE_PAGE_BYTES - 1) / KVP_HUGE_PAGE_BYTES + 1;

	kvp_log(LOG_ERR,
		"pool: huge pages required (pool.huge_pages = require) but %s: %ld "
		"free 2 MiB pages, about %llu needed; reserve them with "
		"sysctl vm.nr_hugepages or use huge_pages = auto",
		r == -EOPNOTSUPP ? "the kernel has no hugetlb memfd" : "too few are reserved",
		free_pages < 0 ? 0 : free_pages, (unsigned long long)want);
}

/*
 * Open tier.path for @dom's pool and give its blocks back to the (empty) index: the
 * rebuild after a restart.  An unusable file is logged and leaves the tier off (degraded).
 * Return: 0, or -errno for a bad configuration or no memory.
 */
static int open_tier(struct kvp_domain *dom, const struct kvp_model *m,
		     const struct kvp_config *cfg, const struct kvp_notify *notify)
{
	struct kvp_tier_config tc = { .path = cfg->tier_path, .max_bytes = cfg->tier_bytes };
	struct kvp_tier_stats st;
	uint64_t t0;
	double secs, gib;
	int r;

	if (!*cfg->tier_path)
		return 0;
	memcpy(tc.model_fp, kvp_model_fingerprint(m), sizeof(tc.model_fp));
	kvp_notify_status(notify, "opening the disk tier %s", cfg->tier_path);
	t0 = kvp_now_ns();
	r = kvp_tier_open(&dom->tier, &tc, dom->pool);
	if (r < 0) {
		kvp_log(LOG_ERR, "tier: %s: %s (tier.size %llu: at least one block)",
			cfg->tier_path, strerror(-r), (unsigned long long)cfg->tier_bytes);
		return r;
	}
	r = kvp_tier_attach_index(dom->tier, dom->index);
	if (r < 0) {
		kvp_log(LOG_ERR, "tier: rebuild the index from %s: %s", cfg->tier_path,
			strerror(-r));
		kvp_tier_free(dom->tier);
		dom->tier = NULL;
		return r;
	}
	secs = (double)(kvp_now_ns() - t0) / 1e9;
	kvp_tier_stats(dom->tier, &st);
	if (st.degraded) {
		kvp_log(LOG_ERR, "%s", kvp_tier_error(dom->tier));
		return 0;
	}
	gib = (double)st.file_bytes / (1u << 30);
	kvp_log(LOG_INFO,
		"tier: %s: %llu slots of %llu KiB (%.2f GiB)%s; rebuilt %llu blocks (scanned %llu "
		"slots: %llu sound, %llu empty, %llu corrupt, %llu foreign; %llu orphans) in "
		"%.3f s, %.3f s per GiB",
		cfg->tier_path, (unsigned long long)st.slots,
		(unsigned long long)(st.slot_bytes >> 10), gib,
		st.reset ? ", new or re-initialised" : "", (unsigned long long)st.rebuilt,
		(unsigned long long)st.scan_slots, (unsigned long long)st.scan_valid,
		(unsigned long long)st.scan_empty, (unsigned long long)st.scan_corrupt,
		(unsigned long long)st.scan_foreign, (unsigned long long)st.orphans, secs,
		gib > 0 ? secs / gib : 0);
	return 0;
}

int kvp_domain_open(struct kvp_domain *dom, const struct kvp_model *m, const struct kvp_config *cfg,
		    struct kvp_numa *numa, const struct kvp_notify *notify)
{
	static const enum kvp_page_mode modes[] = {
		[KVP_HUGE_AUTO] = KVP_PAGES_AUTO,
		[KVP_HUGE_REQUIRE] = KVP_PAGES_REQUIRE_HUGE,
		[KVP_HUGE_OFF] = KVP_PAGES_OFF,
	};
	struct kvp_pool_config pc = { 0 };
	struct kvp_model_shape shape;
	struct kvp_geom g;
	char name[64];
	uint64_t n_blocks;
	uint64_t t0;
	int r;

	kvp_model_kv_shape(m, cfg->kv_dtype, cfg->block_tokens, &shape);
	r = kvp_geom_init(&g, &shape);
	if (r < 0) {
		kvp_log(LOG_ERR, "pool: block shape of this model is invalid: %s", strerror(-r));
		return r;
	}
	n_blocks = cfg->pool_bytes / g.block_stride;
	if (n_blocks < 1 || n_blocks > UINT32_MAX - 1) {
		kvp_log(LOG_ERR,
			"pool: pool.size %llu holds %llu blocks of %zu bytes; need 1 .. %u",
			(unsigned long long)cfg->pool_bytes, (unsigned long long)n_blocks,
			g.block_stride, UINT32_MAX - 1);
		return -EINVAL;
	}
	snprintf(name, sizeof(name), "kvpool:%s", dom->name);
	pc.shape = shape;
	pc.n_blocks = (uint32_t)n_blocks;
	pc.pages = modes[cfg->huge_pages];
	pc.numa = numa;
	pc.name = name;
	kvp_notify_status(notify, "pre-faulting the %llu MiB pool",
			  (unsigned long long)(n_blocks * g.block_stride >> 20));
	t0 = kvp_now_ns();
	r = kvp_pool_new(&dom->pool, &pc);
	if (r < 0) {
		if (cfg->huge_pages == KVP_HUGE_REQUIRE && (r == -ENOMEM || r == -EOPNOTSUPP))
			log_huge_pages_missing(r, n_blocks * g.block_stride);
		else
			kvp_log(LOG_ERR, "pool: create %llu blocks of %zu bytes: %s",
				(unsigned long long)n_blocks, g.block_stride, strerror(-r));
		return r;
	}
	kvp_log(LOG_INFO,
		"pool: %u blocks of %u tokens (%zu bytes, %s K/V), %llu MiB on %s pages, "
		"%u arena(s), pre-faulted in %.0f ms",
		kvp_pool_n_blocks(dom->pool), shape.block_tokens, g.block_bytes,
		kvp_dtype_name(shape.dtype), (unsigned long long)(n_blocks * g.block_stride >> 20),
		kvp_page_kind_name(kvp_segment_page_kind(kvp_pool_segment(dom->pool))),
		kvp_pool_n_arenas(dom->pool), kvp_ns_to_ms(kvp_now_ns() - t0));
	if (cfg->huge_pages == KVP_HUGE_AUTO &&
	    kvp_segment_page_kind(kvp_pool_segment(dom->pool)) == KVP_PAGE_4K)
		kvp_log(LOG_NOTICE, "pool: no huge pages obtained; using 4 KiB pages "
				    "(reserve vm.nr_hugepages for faster K/V reads)");
	r = kvp_index_new(&dom->index, dom->pool);
	if (r < 0) {
		kvp_log(LOG_ERR, "index: create: %s", strerror(-r));
		goto err_pool;
	}
	r = open_tier(dom, m, cfg, notify);
	if (r < 0)
		goto err_index;
	dom->ro_fd = kvp_segment_reopen_ro(kvp_pool_segment(dom->pool));
	if (dom->ro_fd < 0) {
		r = dom->ro_fd;
		kvp_log(LOG_ERR, "pool: read-only fd for clients: %s", strerror(-r));
		goto err_tier;
	}
	return 0;

err_tier:
	kvp_tier_free(dom->tier);
	dom->tier = NULL;
err_index:
	kvp_index_free(dom->index);
	dom->index = NULL;
err_pool:
	kvp_pool_free(dom->pool);
	dom->pool = NULL;
	dom->ro_fd = -1;
	return r;
}

void kvp_domain_close(struct kvp_domain *dom)
{
	if (dom->ro_fd >= 0)
		close(dom->ro_fd);
	dom->ro_fd = -1;
	kvp_tier_free(dom->tier); /* before the index it tells and the pool it reads */
	dom->tier = NULL;
	kvp_index_free(dom->index);
	dom->index = NULL;
	kvp_pool_free(dom->pool);
	dom->pool = NULL;
}

void kvp_domain_set_welcome(struct kvp_domain *dom, const struct kvp_welcome *base)
{
	const struct kvp_segment *seg = kvp_pool_segment(dom->pool);
	const struct kvp_geom *g = kvp_pool_geom(dom->pool);
	struct kvp_welcome *w = &dom->welcome;
	uint64_t pool_tokens = (uint64_t)kvp_pool_n_blocks(dom->pool) * g->shape.block_tokens;

	*w = *base;
	/* the longest sequence: the configured limits, and never more than the pool holds */
	if (w->n_ctx > pool_tokens + 1)
		w->n_ctx = (uint32_t)(pool_tokens + 1);
	w->shape = g->shape;
	w->block_stride = g->block_stride;
	w->data_offset = seg->data_offset;
	w->segment_bytes = seg->bytes;
	w->n_blocks = kvp_pool_n_blocks(dom->pool);
}
