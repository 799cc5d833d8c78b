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

#include <assert.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
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
#include "svc/domcfg.h"
#include "util/log.h"
#include "util/notify.h"
#include "util/time.h"

void kvp_domains_init_default(struct kvp_domains *d)
{
	memset(d, 0, sizeof(*d));
	d->mode = KVP_DOMAINS_SINGLE;
	d->max = 1;
	d->n_domains = 1;
	strcpy(d->dom[KVP_DOMAIN_DEFAULT].name, "default");
	kvp_cache_policy_defaults(&d->dom[KVP_DOMAIN_DEFAULT].cache);
	d->dom[KVP_DOMAIN_DEFAULT].ro_fd = -1;
}

/*
 * An empty entry named @name after the last one; it counts (n_domains) only once the
 * caller has filled it.  Return: it, or NULL when the table is full.
 */
static struct kvp_domain *add_entry(struct kvp_domains *d, const char *name)
{
	struct kvp_domain *dom;

	if (d->n_domains >= KVP_DOMAINS_MAX)
		return NULL;
	dom = &d->dom[d->n_domains];
	memset(dom, 0, sizeof(*dom));
	snprintf(dom->name, sizeof(dom->name), "%s", name);
	dom->ro_fd = -1;
	dom->uid = UINT32_MAX;
	return dom;
}

/* @dom's tier file: tier.path itself when it is the only domain there can be. */
static void set_tier_path(struct kvp_domain *dom, const char *base, bool only)
{
	size_t n = strnlen(base, sizeof(dom->tier_path) - KVP_DOMAIN_NAME_MAX - 2);

	memcpy(dom->tier_path, base, n); /* distinct buffers: base is the table's */
	dom->tier_path[n] = '\0';
	if (n && !only) {
		dom->tier_path[n] = '.';
		memcpy(dom->tier_path + n + 1, dom->name, strlen(dom->name) + 1);
	}
}

static int add_id(uint32_t *ids, uint32_t *n, uint32_t id, const char *dom)
{
	for (uint32_t i = 0; i < *n; i++)
		if (ids[i] == id)
			return 0;
	if (*n >= KVP_DOMAIN_IDS_MAX) {
		kvp_log(LOG_ERR, "domain %s: more than %d users or groups", dom,
			KVP_DOMAIN_IDS_MAX);
		return -EINVAL;
	}
	ids[(*n)++] = id;
	return 0;
}

/*
 * Who is in [domain NAME] @c: its listed uids, the members of its listed groups (their
 * uids: a peer's supplementary groups are not in SO_PEERCRED) and the groups' gids.
 */
static int resolve_members(struct kvp_domain *dom, const struct kvp_domcfg *c)
{
	const char *p = c->users;
	char buf[16384];
	uint32_t id;
	int r;

	while ((r = kvp_domcfg_next_id(&p, true, &id)) > 0)
		if (add_id(dom->uids, &dom->n_uids, id, dom->name) < 0)
			return -EINVAL;
	if (r < 0)
		goto bad;
	p = c->groups;
	while ((r = kvp_domcfg_next_id(&p, false, &id)) > 0) {
		struct group gr, *res = NULL;

		if (add_id(dom->gids, &dom->n_gids, id, dom->name) < 0)
			return -EINVAL;
		if (getgrgid_r((gid_t)id, &gr, buf, sizeof(buf), &res) || !res)
			continue; /* a numeric gid without a group entry: gid match only */
		for (char **m = res->gr_mem; *m; m++) {
			struct passwd pw, *pr = NULL;
			char pbuf[4096];

			if (getpwnam_r(*m, &pw, pbuf, sizeof(pbuf), &pr) || !pr)
				continue;
			if (add_id(dom->uids, &dom->n_uids, pr->pw_uid, dom->name) < 0)
				return -EINVAL;
		}
	}
	if (r < 0)
		goto bad;
	return 0;
bad:
	kvp_log(LOG_ERR, "domain %s: a user or group named in it does not exist", dom->name);
	return -EINVAL;
}

int kvp_domains_init(struct kvp_domains *d, const struct kvp_config *cfg, uid_t self)
{
	struct kvp_domain *dom;
	char name[KVP_DOMAIN_NAME_MAX];
	uint32_t n = cfg->n_domcfg;

	memset(d, 0, sizeof(*d));
	d->mode = cfg->domains_mode;
	snprintf(d->tier_base, sizeof(d->tier_base), "%s", cfg->tier_path);
	switch (cfg->domains_mode) {
	case KVP_DOMAINS_SINGLE:
		d->max = 1;
		dom = add_entry(d, "all");
		dom->pool_bytes = cfg->pool_bytes;
		dom->tier_bytes = cfg->tier_bytes;
		dom->operators = true;
		dom->cache = cfg->cache;
		set_tier_path(dom, d->tier_base, true);
		d->n_domains = 1;
		return 0;
	case KVP_DOMAINS_GROUPS:
		d->max = n;
		for (uint32_t i = 0; i < n; i++) {
			const struct kvp_domcfg *c = &cfg->domcfg[i];

			dom = add_entry(d, c->name);
			dom->pool_bytes = c->pool_bytes ? c->pool_bytes : cfg->pool_bytes / n;
			dom->tier_bytes = c->tier_bytes ? c->tier_bytes : cfg->tier_bytes / n;
			dom->operators = c->operators;
			dom->priority = c->priority;
			kvp_domcfg_cache_policy(&dom->cache, c, &cfg->cache);
			set_tier_path(dom, d->tier_base, false);
			if (resolve_members(dom, c) < 0)
				return -EINVAL;
			d->n_domains++;
		}
		return 0;
	default:
		d->max = cfg->domains_max < KVP_DOMAINS_MAX ? cfg->domains_max : KVP_DOMAINS_MAX;
		d->uid_pool_bytes = cfg->domains_pool_bytes ? cfg->domains_pool_bytes :
							      cfg->pool_bytes;
		d->uid_tier_bytes = cfg->domains_tier_bytes ? cfg->domains_tier_bytes :
							      cfg->tier_bytes;
		snprintf(name, sizeof(name), "uid-%u", (unsigned int)self);
		dom = add_entry(d, name);
		dom->uid = (uint32_t)self;
		dom->pool_bytes = d->uid_pool_bytes;
		dom->tier_bytes = d->uid_tier_bytes;
		dom->operators = self == 0;
		d->uid_cache = cfg->cache;
		dom->cache = cfg->cache;
		set_tier_path(dom, d->tier_base, true); /* the daemon's own: tier.path itself */
		d->n_domains = 1;
		return 0;
	}
}

void kvp_domains_deinit(struct kvp_domains *d)
{
	for (uint32_t i = 0; i < d->n_domains; i++)
		kvp_domain_close(&d->dom[i]);
}

static bool has_id(const uint32_t *ids, uint32_t n, uint32_t id)
{
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

int kvp_domain_of_peer(const struct kvp_domains *d, uid_t uid, gid_t gid)
{
	if (d->n_domains == 0)
		return -EPERM;
	switch (d->mode) {
	case KVP_DOMAINS_SINGLE:
		return KVP_DOMAIN_DEFAULT;
	case KVP_DOMAINS_GROUPS:
		for (uint32_t i = 0; i < d->n_domains; i++)
			if (has_id(d->dom[i].uids, d->dom[i].n_uids, (uint32_t)uid) ||
			    has_id(d->dom[i].gids, d->dom[i].n_gids, (uint32_t)gid))
				return (int)i;
		return -EPERM;
	default:
		for (uint32_t i = 0; i < d->n_domains; i++)
			if (d->dom[i].uid == (uint32_t)uid)
				return (int)i;
		return -ENOENT;
	}
}

int kvp_domains_for_peer(struct kvp_domains *d, uid_t uid, gid_t gid, char *why, size_t cap)
{
	struct kvp_domain *dom;
	char name[KVP_DOMAIN_NAME_MAX];
	int idx = kvp_domain_of_peer(d, uid, gid);
	int r;

	if (cap)
		*why = '\0';
	if (idx != -ENOENT)
		return idx;
	if (d->n_domains >= d->max || !d->open) {
		d->refused_max++;
		snprintf(why, cap,
			 "HELLO refused: no trust domain can be opened for you now: %u are open, "
			 "domains.max; try later (idle ones are reclaimed)",
			 d->n_domains);
		return -EBUSY;
	}
	snprintf(name, sizeof(name), "uid-%u", (unsigned int)uid);
	dom = add_entry(d, name);
	if (!dom)
		return -EBUSY;
	dom->uid = (uint32_t)uid;
	dom->pool_bytes = d->uid_pool_bytes;
	dom->tier_bytes = d->uid_tier_bytes;
	dom->operators = uid == 0;
	dom->cache = d->uid_cache;
	dom->on_hello = true;
	dom->idle_since_ns = kvp_now_ns();
	set_tier_path(dom, d->tier_base, false);
	r = d->open(d->open_arg, dom, why, cap);
	if (r < 0) {
		memset(dom, 0, sizeof(*dom));
		dom->ro_fd = -1;
		if (r == -ENOMEM)
			d->refused_memory++;
		return r;
	}
	d->made++;
	kvp_log(LOG_INFO, "domain %s: made on its first HELLO (%u of at most %u domains)",
		dom->name, d->n_domains + 1, d->max);
	return (int)d->n_domains++;
}

uint32_t kvp_domains_remove(struct kvp_domains *d, uint32_t idx)
{
	uint32_t last = d->n_domains - 1;

	assert(idx < d->n_domains && !d->dom[idx].pool && !d->dom[idx].sched);
	if (idx != last)
		d->dom[idx] = d->dom[last];
	memset(&d->dom[last], 0, sizeof(d->dom[last]));
	d->dom[last].ro_fd = -1;
	d->n_domains--;
	return last;
}

bool kvp_domain_may_pin(const struct kvp_domain *dom)
{
	return dom->operators;
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
		     const struct kvp_notify *notify)
{
	struct kvp_tier_config tc = { .path = dom->tier_path, .max_bytes = dom->tier_bytes };
	struct kvp_tier_stats st;
	const char *how;
	uint64_t t0;
	double secs, gib;
	int r;

	if (!*dom->tier_path)
		return 0;
	memcpy(tc.model_fp, kvp_model_fingerprint(m), sizeof(tc.model_fp));
	kvp_notify_status(notify, "opening the disk tier %s", dom->tier_path);
	t0 = kvp_now_ns();
	r = kvp_tier_open(&dom->tier, &tc, dom->pool);
	if (r < 0) {
		kvp_log(LOG_ERR, "tier: %s: %s (tier.size %llu: at least one block)",
			dom->tier_path, strerror(-r), (unsigned long long)dom->tier_bytes);
		return r;
	}
	r = kvp_tier_attach_index(dom->tier, dom->index);
	if (r < 0) {
		kvp_log(LOG_ERR, "tier: rebuild the index from %s: %s", dom->tier_path,
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
	how = st.type_resets ? ", re-initialised (written with another K/V type)" :
	      st.reset	     ? ", new or re-initialised" :
			       "";
	kvp_log(LOG_INFO,
		"tier: %s: %llu slots of %llu KiB (%.2f GiB)%s; rebuilt %llu blocks (scanned %llu "
		"slots: %llu sound, %llu empty, %llu corrupt, %llu foreign; %llu orphans) in "
		"%.3f s, %.3f s per GiB",
		dom->tier_path, (unsigned long long)st.slots,
		(unsigned long long)(st.slot_bytes >> 10), gib, how, (unsigned long long)st.rebuilt,
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
	n_blocks = dom->pool_bytes / g.block_stride;
	if (n_blocks < 1 || n_blocks > UINT32_MAX - 1) {
		kvp_log(LOG_ERR,
			"pool: domain %s: pool size %llu holds %llu blocks of %zu bytes; need 1 .. %u",
			dom->name, (unsigned long long)dom->pool_bytes,
			(unsigned long long)n_blocks, g.block_stride, UINT32_MAX - 1);
		return -EINVAL;
	}
	snprintf(name, sizeof(name), "kvpool:%s", dom->name);
	pc.shape = shape;
	pc.n_blocks = (uint32_t)n_blocks;
	pc.pages = modes[cfg->huge_pages];
	pc.numa = numa;
	pc.name = name;
	/*
	 * int8: the partial blocks whose keys wait, in f32, for the block to fill (shm/geom.h):
	 * one per sequence between calls, and during a call every block its rows reach (a
	 * step's prefill chunk over its parts, two more per part at the edges).
	 */
	pc.stage_slots = 3 * cfg->max_running + cfg->prefill_chunk_tokens / cfg->block_tokens + 4;
	/*
	 * int4: K and V of every block of a sequence's residual window stay staged (at most
	 * ceil(window / block) full blocks and the partial one), a step's chunk on top.
	 */
	if (cfg->kv_dtype == KVP_DTYPE_INT4) {
		pc.kv_window = cfg->kv_window;
		pc.stage_slots = ((cfg->kv_window + cfg->block_tokens - 1) / cfg->block_tokens +
				  3) * cfg->max_running +
				 cfg->prefill_chunk_tokens / cfg->block_tokens + 4;
	}
	kvp_notify_status(notify, "pre-faulting the %llu MiB pool",
			  (unsigned long long)(n_blocks * g.block_stride >> 20));
	t0 = kvp_now_ns();
	r = kvp_pool_new(&dom->pool, &pc);
	if (r < 0) {
		/* asked again, not told by @r: ENOTSUP is EOPNOTSUPP (no hugetlb) on Linux */
		if (kvp_page_size_check(sysconf(_SC_PAGESIZE)) < 0)
			kvp_log(LOG_ERR,
				"pool: this kernel's page size is %ld bytes; the pool layout "
				"needs 4 KiB pages (16/64 KiB page kernels are not supported)",
				sysconf(_SC_PAGESIZE));
		else if (cfg->huge_pages == KVP_HUGE_REQUIRE && (r == -ENOMEM || r == -EOPNOTSUPP))
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
	r = open_tier(dom, m, notify);
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
